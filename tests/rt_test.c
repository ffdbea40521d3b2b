/*
 * Real-time controls (rt.h) and the steady state they exist for.
 *
 * - Arguments: bad CPUs, priorities and stack sizes are refused with FERRY_EINVAL before
 *   anything is applied.
 * - Refusals for real: a child drops RLIMIT_RTPRIO to 0 and RLIMIT_MEMLOCK to 64 KiB, then (as
 *   root) its uid to 65534, and SCHED_FIFO and the memory lock are refused with FERRY_EPERM and
 *   messages that name the capability and the limit.
 * - As root: SCHED_FIFO and the pinning are applied to the calling thread (checked with
 *   pthread_getschedparam and sched_getaffinity), in a child that only sleeps under them.
 * - Steady state: a forked publisher streams 1280x720x3 frames (reserve(depth + 3)) to a forked
 *   subscriber with prefault, overflow BLOCK; after a warm-up that passes every reserved chunk
 *   through once, each process counts its own minor page faults and heap calls over 300 frames
 *   and both totals must be 0, once plain and once with lock_memory + prefault_stack.
 */
#include "testutil.h"

#include <ferry/rt.h>

#include <errno.h>
#include <grp.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RT_TEST_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) ||                         \
    __has_feature(memory_sanitizer)
#define RT_TEST_SANITIZER 1
#endif
#endif

#define TYPE "test/rt_frame"
#define FRAME ((size_t)1280 * 720 * 3)
#define DEPTH 4
#define RESERVE (DEPTH + 3)
/* The warm-up lasts 1.6 s at PERIOD_NS: longer than the longest period of the endpoints'
 * housekeeping (the 1 s rescans and sweeps), so that every path the steady state takes has run
 * once (a first call binds a symbol or touches a page of code: a fault that is not the steady
 * state's). */
#define WARMUP 400
#define FRAMES 300
#define PERIOD_NS (4 * TU_MS) /* 250 Hz: both sides sleep between frames, housekeeping runs */

/* ---- heap calls, counted while a flag is on (as alloc_test does) ------------------------ */

#ifndef RT_TEST_SANITIZER
static volatile int counting;
static unsigned long allocs, frees;

extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t size);
extern void *__libc_memalign(size_t align, size_t size);
extern void __libc_free(void *p);

void *malloc(size_t size)
{
    allocs += counting;
    return __libc_malloc(size);
}

void *calloc(size_t n, size_t size)
{
    allocs += counting;
    return __libc_calloc(n, size);
}

void *realloc(void *p, size_t size)
{
    allocs += counting;
    return __libc_realloc(p, size);
}

void *memalign(size_t align, size_t size)
{
    allocs += counting;
    return __libc_memalign(align, size);
}

void *aligned_alloc(size_t align, size_t size)
{
    allocs += counting;
    return __libc_memalign(align, size);
}

int posix_memalign(void **out, size_t align, size_t size)
{
    if (align < sizeof(void *) || (align & (align - 1)) != 0)
        return EINVAL;
    allocs += counting;
    void *p = __libc_memalign(align, size);
    if (p == NULL)
        return ENOMEM;
    *out = p;
    return 0;
}

void free(void *p)
{
    frees += counting && p != NULL;
    __libc_free(p);
}
#endif

/* Page-fault counts are exact only without a sanitizer: it faults in shadow pages as memory is
 * touched. */
#ifndef RT_TEST_SANITIZER
#define NO_FAULTS(n) TU_EQ_U64((n), 0)
#else
#define NO_FAULTS(n) (void)(n)
#endif

/* ---- arguments ----------------------------------------------------------------------------- */

static void test_counters(void)
{
    uint32_t n = 0;
    TU_OK(ferry_rt_cpu_count(&n));
    TU_CMP_U64(n, >=, 1);
    TU_ERR(ferry_rt_cpu_count(NULL), FERRY_EINVAL);
    uint64_t minor0 = 0, minor1 = 0, major = 0;
    TU_OK(ferry_rt_page_faults(&minor0, &major));
    /* Touching fresh pages counts. Straight from mmap: a sanitizer's malloc may hand out
     * memory it faulted in already. */
    size_t len = (size_t)64 << 20;
    unsigned char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    TU_CHECK(p != MAP_FAILED);
    for (size_t i = 0; i < len; i += 4096)
        p[i] = (unsigned char)i;
    TU_OK(ferry_rt_page_faults(&minor1, NULL));
    munmap(p, len);
    TU_CMP_U64(minor1 - minor0, >=, 1000);
    TU_OK(ferry_rt_page_faults(NULL, NULL));
}

static void expect_einval(const ferry_rt_options *o, const char *needle)
{
    ferry_rt_report r;
    TU_ERR(ferry_rt_apply(o, &r), FERRY_EINVAL);
    TU_CHECK_MSG(strstr(r.message, needle) != NULL, "message \"%s\" lacks \"%s\"", r.message,
                 needle);
    TU_CHECK(!r.pinned && !r.fifo && !r.locked && !r.prefaulted);
    TU_EQ_U64(r.failed_errno, EINVAL);
    printf("  refused as expected: %s\n", r.message);
}

static void test_invalid(void)
{
    ferry_rt_options o;
    ferry_rt_options_init(&o);
    TU_ERR(ferry_rt_apply(NULL, NULL), FERRY_EINVAL);
    TU_OK(ferry_rt_apply(&o, NULL)); /* nothing asked for */

    o.ncpus = 1;
    expect_einval(&o, "cpus is NULL");
    int bad[2] = {0, -1};
    o.cpus = bad;
    o.ncpus = 2;
    expect_einval(&o, "CPU -1 is not online");
    bad[1] = 100000;
    expect_einval(&o, "CPU 100000 is not online");

    ferry_rt_options_init(&o);
    o.fifo_priority = 100;
    expect_einval(&o, "priority 100 out of range");
    o.fifo_priority = -1;
    expect_einval(&o, "priority -1 out of range");

    ferry_rt_options_init(&o);
    o.prefault_stack_bytes = (size_t)1 << 40;
    expect_einval(&o, "does not fit");

    /* A valid request with an invalid part applies nothing. */
    ferry_rt_options_init(&o);
    o.lock_memory = true;
    o.fifo_priority = 200;
    expect_einval(&o, "out of range");
}

/* ---- refusals without the privilege -------------------------------------------------------- */

static void expect_eperm(const ferry_rt_options *o, const char *need1, const char *need2)
{
    ferry_rt_report r;
    TU_ERR(ferry_rt_apply(o, &r), FERRY_EPERM);
    TU_CHECK_MSG(strstr(r.message, need1) && strstr(r.message, need2),
                 "message \"%s\" lacks \"%s\" or \"%s\"", r.message, need1, need2);
    TU_CHECK(!r.fifo && !r.locked);
    TU_CHECK(r.failed_errno == EPERM || r.failed_errno == ENOMEM);
    printf("  refused as expected: %s\n", r.message);
}

static int unprivileged_main(void *arg)
{
    (void)arg;
    struct rlimit rt = {0, 0}, ml = {65536, 65536};
    TU_CHECK_MSG(setrlimit(RLIMIT_RTPRIO, &rt) == 0, "setrlimit: %s", strerror(errno));
    TU_CHECK_MSG(setrlimit(RLIMIT_MEMLOCK, &ml) == 0, "setrlimit: %s", strerror(errno));
    if (geteuid() == 0) {
        /* After the limits: a process without CAP_SYS_RESOURCE cannot raise them again. */
        TU_CHECK_MSG(setgroups(0, NULL) == 0 && setgid(65534) == 0 && setuid(65534) == 0,
                     "dropping root: %s", strerror(errno));
        TU_CHECK(geteuid() == 65534);
    }
    ferry_rt_options o;
    ferry_rt_options_init(&o);
    o.fifo_priority = 5;
    expect_eperm(&o, "CAP_SYS_NICE", "RLIMIT_RTPRIO >= 5");

    ferry_rt_options_init(&o);
    o.lock_memory = true;
#ifndef RT_TEST_SANITIZER
    expect_eperm(&o, "CAP_IPC_LOCK", "RLIMIT_MEMLOCK");
#else
    printf("  memory lock refusal not checked: the sanitizer makes mlockall a no-op\n");
#endif

    /* Stops at the first failure: the lock after a refused SCHED_FIFO is not tried. */
    o.fifo_priority = 5;
    ferry_rt_report r;
    TU_ERR(ferry_rt_apply(&o, &r), FERRY_EPERM);
    TU_CHECK(strstr(r.message, "SCHED_FIFO") != NULL);
    int policy = -1;
    struct sched_param sp;
    TU_CHECK(pthread_getschedparam(pthread_self(), &policy, &sp) == 0);
    TU_EQ_U64(policy, SCHED_OTHER);
    return 0;
}

static void test_not_permitted(void)
{
    pid_t child = tu_fork(unprivileged_main, NULL, 30);
    TU_CHILD_OK(child);
}

/* ---- applied, as root ------------------------------------------------------------------------ */

static int privileged_main(void *arg)
{
    (void)arg;
    uint32_t n = 0;
    TU_OK(ferry_rt_cpu_count(&n));
    int cpu = (int)n - 1;
    cpu_set_t before;
    TU_CHECK(sched_getaffinity(0, sizeof before, &before) == 0);
    if (!CPU_ISSET(cpu, &before)) {
        printf("  CPU %d is not ours (cpuset): skipping the pinning check\n", cpu);
        return TU_SKIP;
    }

    ferry_rt_options o;
    ferry_rt_options_init(&o);
    o.cpus = &cpu;
    o.ncpus = 1;
    o.fifo_priority = 3; /* low, and this thread only sleeps under it */
    o.lock_memory = true;
    o.prefault_stack_bytes = (size_t)256 << 10;
    o.prefault_heap_bytes = (size_t)4 << 20;
    ferry_rt_report r;
    ferry_err err = ferry_rt_apply(&o, &r);
    if (err == FERRY_EPERM && r.pinned && !r.fifo) {
        /* Root without a real-time budget (a cgroup with cpu.rt_runtime_us 0). */
        printf("  SCHED_FIFO not available here: %s\n", r.message);
        return TU_SKIP;
    }
    TU_CHECK_MSG(err == FERRY_OK, "%s: %s", ferry_errname(err), r.message);
    TU_CHECK(r.pinned && r.fifo && r.locked && r.prefaulted);
    TU_EQ_U64(r.failed_errno, 0);

    cpu_set_t now;
    TU_CHECK(sched_getaffinity(0, sizeof now, &now) == 0);
    TU_EQ_U64(CPU_COUNT(&now), 1);
    TU_CHECK(CPU_ISSET(cpu, &now));
    int policy = -1;
    struct sched_param sp;
    TU_CHECK(pthread_getschedparam(pthread_self(), &policy, &sp) == 0);
    TU_EQ_U64(policy, SCHED_FIFO);
    TU_EQ_U64(sp.sched_priority, 3);
    TU_EQ_U64(sched_getscheduler(0), SCHED_FIFO);
    tu_sleep_ns(TU_MS);

    /* Locked: VmLck counts what is resident, the stack and heap prefaulted above included
     * (a sanitizer makes mlockall a no-op). */
    FILE *f = fopen("/proc/self/status", "r");
    TU_CHECK(f != NULL);
    char line[256];
    unsigned long locked_kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmLck: %lu", &locked_kb) == 1)
            break;
    fclose(f);
#ifndef RT_TEST_SANITIZER
    TU_CMP_U64(locked_kb, >=, 4096 + 256);
#endif
    printf("  %s; CPU %d only, SCHED_FIFO 3, VmLck %lu KiB\n", r.message, cpu, locked_kb);

    /* Back to an ordinary thread on every CPU. */
    memset(&sp, 0, sizeof sp);
    TU_CHECK(pthread_setschedparam(pthread_self(), SCHED_OTHER, &sp) == 0);
    TU_CHECK(sched_setaffinity(0, sizeof before, &before) == 0);
    TU_EQ_U64(sched_getscheduler(0), SCHED_OTHER);
    return 0;
}

static void test_applied(void)
{
    if (geteuid() != 0) {
        printf("  not root: SCHED_FIFO and locking are not checked here\n");
        return;
    }
    pid_t child = tu_fork(privileged_main, NULL, 30);
    int st = tu_wait_status(child, 30000);
    TU_CHECK_MSG(WIFEXITED(st) && (WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == TU_SKIP),
                 "child status %d", st);
}

/* ---- reserve and prefault --------------------------------------------------------------- */

static void test_reserve(void)
{
    ferry_node *node = tu_node("reserve");
    ferry_publisher_options po;
    ferry_publisher_options_init(&po);
    po.pool_bytes = (size_t)32 << 20;
    po.max_chunks = 8;
    po.max_sample_size = (size_t)8 << 20;
    ferry_publisher *pub = NULL;
    TU_OK(ferry_publisher_create(&pub, node, "/rt/reserve", TYPE, ferry_hash(TYPE), &po));
    TU_ERR(ferry_publisher_reserve(NULL, FRAME, 1), FERRY_EINVAL);
    TU_ERR(ferry_publisher_reserve(pub, 0, 1), FERRY_EINVAL);
    TU_ERR(ferry_publisher_reserve(pub, FRAME, 0), FERRY_EINVAL);
    TU_ERR(ferry_publisher_reserve(pub, (size_t)9 << 20, 1), FERRY_ETOOBIG);
    TU_ERR(ferry_publisher_reserve(pub, 4096, 9), FERRY_EPOOL);   /* max_chunks */
    TU_ERR(ferry_publisher_reserve(pub, FRAME, 12), FERRY_EPOOL); /* pool_bytes */
    ferry_publisher_stats ps;
    TU_OK(ferry_publisher_stats_get(pub, &ps));
    TU_EQ_U64(ps.chunks_total, 0); /* refusals carve nothing */

    TU_OK(ferry_publisher_reserve(pub, FRAME, 3));
    TU_OK(ferry_publisher_stats_get(pub, &ps));
    TU_EQ_U64(ps.chunks_total, 3);
    TU_EQ_U64(ps.chunks_free, 3);
    TU_EQ_U64(ps.size_classes, 1);
    TU_OK(ferry_publisher_reserve(pub, FRAME, 2));        /* held already */
    TU_OK(ferry_publisher_reserve(pub, FRAME - 1000, 3)); /* same class */
    TU_OK(ferry_publisher_stats_get(pub, &ps));
    TU_EQ_U64(ps.chunks_total, 3);

    /* Loans from the reservation neither carve nor fault, writing the whole frame. One round of
     * loans first runs the publisher's housekeeping once (its first run may fault, binding the
     * functions it calls): what is measured is the reservation. */
    void *p[3];
    for (int i = 0; i < 3; i++)
        TU_OK(ferry_loan(pub, FRAME, &p[i]));
    for (int i = 0; i < 3; i++)
        TU_OK(ferry_loan_release(pub, p[i]));
    uint64_t f0 = 0, f1 = 0;
    TU_OK(ferry_rt_page_faults(&f0, NULL));
    for (int i = 0; i < 3; i++) {
        TU_OK(ferry_loan(pub, FRAME, &p[i]));
        memset(p[i], i, FRAME);
    }
    TU_OK(ferry_rt_page_faults(&f1, NULL));
    NO_FAULTS(f1 - f0);
    TU_OK(ferry_publisher_stats_get(pub, &ps));
    TU_EQ_U64(ps.chunks_total, 3);
    for (int i = 0; i < 3; i++)
        TU_OK(ferry_loan_release(pub, p[i]));
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
}

/* Faults while reading the whole of each of n fresh samples, after ferry_take returned it. */
static uint64_t read_faults(bool prefault, int n)
{
    ferry_node *node = tu_node("prefault");
    ferry_publisher *pub = NULL;
    TU_OK(ferry_publisher_create(&pub, node, "/rt/prefault", TYPE, ferry_hash(TYPE), NULL));
    TU_OK(ferry_publisher_reserve(pub, FRAME, (uint32_t)n));
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = (uint32_t)n;
    so.prefault = prefault;
    ferry_subscriber *sub = NULL;
    TU_OK(ferry_subscriber_create(&sub, node, "/rt/prefault", TYPE, ferry_hash(TYPE), &so));
    tu_connect_local(pub, 1, sub, 1);
    void *p[16];
    for (int i = 0; i < n; i++) /* n distinct chunks */
        TU_OK(ferry_loan(pub, FRAME, &p[i]));
    for (int i = 0; i < n; i++) {
        tu_fill(p[i], FRAME, (uint64_t)i + 1);
        TU_OK(ferry_publish(pub, p[i], 0));
    }
    uint64_t total = 0;
    for (int i = 0; i < n; i++) {
        ferry_sample s;
        TU_OK(ferry_take(sub, &s));
        uint64_t f0 = 0, f1 = 0;
        TU_OK(ferry_rt_page_faults(&f0, NULL));
        TU_SAMPLE_INTACT(&s, FRAME);
        TU_OK(ferry_rt_page_faults(&f1, NULL));
        total += f1 - f0;
        TU_OK(ferry_release(sub, &s));
    }
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
    return total;
}

static void test_prefault(void)
{
    uint64_t without = read_faults(false, 4), with = read_faults(true, 4);
    printf("  faults reading 4 fresh frames after ferry_take: %" PRIu64
           " without prefault, %" PRIu64 " with\n",
           without, with);
    TU_CMP_U64(without, >=, 4 * (FRAME / 4096) / 16); /* the kernel maps up to 16 per fault */
    NO_FAULTS(with);
}

/* ---- steady state ------------------------------------------------------------------------ */

#ifndef RT_TEST_SANITIZER

typedef struct stream {
    tu_pipe to_pub;      /* subscriber -> publisher: ready, done */
    tu_pipe pub_results; /* each process -> the test: faults, allocs, frees */
    tu_pipe sub_results;
    bool rt; /* lock_memory + prefault_stack in both */
} stream;

enum { MSG_READY = 1, MSG_DONE };

static void apply_rt(const stream *s)
{
    if (!s->rt)
        return;
    ferry_rt_options o;
    ferry_rt_options_init(&o);
    o.lock_memory = true;
    o.prefault_stack_bytes = (size_t)256 << 10;
    ferry_rt_report r;
    ferry_err err = ferry_rt_apply(&o, &r);
    TU_CHECK_MSG(err == FERRY_OK, "ferry_rt_apply: %s: %s", ferry_errname(err), r.message);
}

static void sleep_until(int64_t t)
{
    struct timespec ts = {(time_t)(t / TU_SEC), (long)(t % TU_SEC)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

static void report(const tu_pipe *p, uint64_t faults)
{
    tu_send(p, faults);
    tu_send(p, allocs);
    tu_send(p, frees);
}

static int publisher_main(void *arg)
{
    stream *s = arg;
    apply_rt(s);
    ferry_node *node = tu_node("rtpub");
    ferry_publisher *pub = NULL;
    ferry_publisher_options po;
    ferry_publisher_options_init(&po);
    po.block_timeout_ns = TU_WAIT_NS;
    po.admit_blocking = true;
    TU_OK(ferry_publisher_create(&pub, node, "/rt/frames", TYPE, ferry_hash(TYPE), &po));
    TU_OK(ferry_publisher_reserve(pub, FRAME, RESERVE));
    TU_OK(ferry_publisher_wait_subscribers(pub, 1, TU_WAIT_NS));
    TU_EQ_U64(tu_serve_until(&pub, 1, &s->to_pub, TU_WAIT_MS), MSG_READY);

    /* Warm-up: every reserved chunk goes out once (all loaned at once), so that the subscriber
     * has seen them all before the measurement. */
    uint64_t seq = 0;
    void *loans[RESERVE];
    for (int i = 0; i < RESERVE; i++)
        TU_OK(ferry_loan(pub, FRAME, &loans[i]));
    for (int i = 0; i < RESERVE; i++) {
        tu_fill(loans[i], FRAME, ++seq);
        TU_OK(ferry_publish(pub, loans[i], 0));
    }
    int64_t next = ferry_now().ns;
    for (int i = RESERVE; i < WARMUP; i++) {
        next += PERIOD_NS;
        sleep_until(next);
        tu_publish_pattern(pub, FRAME, ++seq);
    }

    uint64_t f0 = 0, f1 = 0;
    TU_OK(ferry_rt_page_faults(&f0, NULL));
    allocs = frees = 0;
    counting = 1;
    for (int i = 0; i < FRAMES; i++) {
        next += PERIOD_NS;
        sleep_until(next);
        void *p = NULL;
        ferry_err e1 = ferry_loan(pub, FRAME, &p);
        if (e1 == FERRY_OK)
            tu_fill(p, FRAME, ++seq);
        ferry_err e2 = e1 ? e1 : ferry_publish(pub, p, 0);
        if (e2) {
            counting = 0;
            TU_FAIL("frame %d: %s", i, ferry_errname(e2));
        }
    }
    counting = 0;
    TU_OK(ferry_rt_page_faults(&f1, NULL));
    report(&s->pub_results, f1 - f0);

    TU_EQ_U64(tu_serve_until(&pub, 1, &s->to_pub, TU_WAIT_MS), MSG_DONE);
    ferry_publisher_stats ps;
    TU_OK(ferry_publisher_stats_get(pub, &ps));
    TU_EQ_U64(ps.published, WARMUP + FRAMES);
    TU_EQ_U64(ps.dropped, 0);
    TU_EQ_U64(ps.chunks_total, RESERVE); /* nothing carved after the reserve */
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    return 0;
}

/* Takes one frame (waiting for it), checks every byte of it, releases it. false on an error,
 * with counting stopped by the caller before it reports. */
static ferry_err take_frame(ferry_subscriber *sub, uint64_t seq)
{
    ferry_sample s;
    ferry_err e = ferry_take(sub, &s);
    while (e == FERRY_EAGAIN) {
        if ((e = ferry_wait(sub, TU_WAIT_NS)))
            return e;
        e = ferry_take(sub, &s);
    }
    if (e)
        return e;
    if (s.sequence != seq || s.size != FRAME || tu_verify(s.data, s.size, s.sequence) != SIZE_MAX)
        e = FERRY_EPROTO;
    ferry_err r = ferry_release(sub, &s);
    return e ? e : r;
}

static int subscriber_main(void *arg)
{
    stream *s = arg;
    apply_rt(s);
    ferry_node *node = tu_node("rtsub");
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = DEPTH;
    so.overflow = FERRY_OVERFLOW_BLOCK;
    so.prefault = true;
    ferry_subscriber *sub = NULL;
    TU_OK(ferry_subscriber_create(&sub, node, "/rt/frames", TYPE, ferry_hash(TYPE), &so));
    TU_OK(ferry_subscriber_wait_publishers(sub, 1, TU_WAIT_NS));
    tu_send(&s->to_pub, MSG_READY);
    uint64_t seq = 0;
    for (int i = 0; i < WARMUP; i++)
        TU_OK(take_frame(sub, ++seq));

    uint64_t f0 = 0, f1 = 0;
    TU_OK(ferry_rt_page_faults(&f0, NULL));
    allocs = frees = 0;
    counting = 1;
    ferry_err err = FERRY_OK;
    for (int i = 0; i < FRAMES && !err; i++)
        err = take_frame(sub, ++seq);
    counting = 0;
    TU_OK(ferry_rt_page_faults(&f1, NULL));
    TU_CHECK_MSG(err == FERRY_OK, "frame %" PRIu64 ": %s", seq, ferry_errname(err));
    report(&s->sub_results, f1 - f0);
    tu_send(&s->to_pub, MSG_DONE);

    ferry_subscriber_stats ss;
    TU_OK(ferry_subscriber_stats_get(sub, &ss));
    TU_EQ_U64(ss.received, WARMUP + FRAMES);
    TU_EQ_U64(ss.dropped, 0);
    TU_EQ_U64(ss.bytes_copied, 0);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    return 0;
}

static void run_stream(bool rt)
{
    stream s;
    s.to_pub = tu_pipe_make();
    s.pub_results = tu_pipe_make();
    s.sub_results = tu_pipe_make();
    s.rt = rt;
    pid_t pub = tu_fork(publisher_main, &s, 60);
    pid_t sub = tu_fork(subscriber_main, &s, 60);
    uint64_t v[6];
    for (int i = 0; i < 3; i++)
        v[i] = tu_recv(&s.pub_results, 60000);
    for (int i = 3; i < 6; i++)
        v[i] = tu_recv(&s.sub_results, 60000);
    TU_CHILD_OK(pub);
    TU_CHILD_OK(sub);
    printf("  %s: over %d frames of %zu bytes: publisher faults %" PRIu64 ", allocs %" PRIu64
           ", frees %" PRIu64 "; subscriber faults %" PRIu64 ", allocs %" PRIu64 ", frees %" PRIu64
           "\n",
           rt ? "locked + prefaulted stack" : "plain", FRAMES, FRAME, v[0], v[1], v[2], v[3], v[4],
           v[5]);
    for (int i = 0; i < 6; i++)
        TU_EQ_U64(v[i], 0);
}

static void test_steady_state(void)
{
    run_stream(false);
}

static void test_steady_state_rt(void)
{
    if (geteuid() != 0) {
        struct rlimit rl;
        if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0 || rl.rlim_cur != RLIM_INFINITY) {
            printf("  not root and RLIMIT_MEMLOCK is finite: skipped\n");
            return;
        }
    }
    run_stream(true);
}

#endif

int main(void)
{
    printf("rt_test: real-time controls\n");
    fflush(stdout);
    TU_RUN(test_counters);
    TU_RUN(test_invalid);
    TU_RUN(test_not_permitted);
    TU_RUN(test_applied);
    TU_RUN(test_reserve);
    TU_RUN(test_prefault);
#ifndef RT_TEST_SANITIZER
    TU_RUN(test_steady_state);
    TU_RUN(test_steady_state_rt);
#else
    printf("  steady-state test skipped: the sanitizer owns malloc and maps shadow pages\n");
#endif
    return 0;
}
