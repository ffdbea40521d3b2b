/*
 * Resource limits: what ferry does when the system says no. Each limit is applied with
 * setrlimit (or a seccomp filter for memfd_create) in a forked child, so the test process keeps
 * its own limits. For every case: a clear error code (and errno for FERRY_ESYS), nothing half
 * made (no descriptor, mapping or file left), the process goes on, and raising the limit again
 * makes the same call succeed. An honest publisher/subscriber pair in other processes, on the
 * same topic, carries on undisturbed meanwhile.
 *
 *   descriptors (RLIMIT_NOFILE)   creation: FERRY_ESYS, errno EMFILE; a handshake whose
 *                                 descriptors cannot be received: not connected, retried later
 *   memfd_create refused          FERRY_ESYS with memfd_create's errno (EMFILE, ENFILE), or
 *                                 FERRY_ENOMEM when it ran out of memory; in a publisher's
 *                                 handshake: the subscriber is refused (rejected on both sides)
 *   address space (RLIMIT_AS)     publisher creation: FERRY_ENOMEM (the segment cannot be
 *                                 mapped); a subscriber that cannot map a publisher's segment
 *                                 is not connected and retries
 *   file size (RLIMIT_FSIZE)      publisher creation: FERRY_ESYS, errno EFBIG
 *   inotify refused (EMFILE)      a subscriber is made all the same, says once that it cannot
 *                                 watch the topic directory, and finds publishers by its rescan
 *   locked memory (RLIMIT_MEMLOCK) no effect: ferry locks no memory
 *   byte cap / chunk cap          ferry_loan: FERRY_EPOOL (FERRY_ETIMEDOUT with
 *                                 FERRY_POOL_BLOCK); loans succeed again once chunks come back
 */
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define TYPE "test/limits"
#define TOPIC "/lim/cam"
#define OTHER_TOPIC "/lim/other" /* for publishers beside an honest pair's */
#define SIZE ((size_t)64 * 1024)

enum { MSG_READY = 1, MSG_STOP, MSG_DONE };

/* --- helpers ------------------------------------------------------------------------------ */

/* The highest descriptor number open in this process. */
static int max_fd(void)
{
    DIR *d = opendir("/proc/self/fd");
    TU_CHECK(d != NULL);
    int self = dirfd(d), top = -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        int fd = atoi(e->d_name);
        if (fd != self && fd > top)
            top = fd;
    }
    closedir(d);
    return top;
}

/* Fills every free descriptor number below the highest open one (with /dev/null), so that a
 * limit of top + 1 + k leaves exactly k descriptors to spare. Returns the highest. */
typedef struct fd_fill {
    int fds[1024];
    int n;
} fd_fill;

static int fill_fd_holes(fd_fill *f)
{
    int top = max_fd();
    f->n = 0;
    for (int fd = 0; fd < top; fd++) {
        if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
            continue;
        TU_CHECK(f->n < 1024);
        int got = open("/dev/null", O_RDONLY | O_CLOEXEC);
        TU_CHECK(got == fd);
        f->fds[f->n++] = got;
    }
    return top;
}

static void unfill_fd_holes(fd_fill *f)
{
    for (int i = 0; i < f->n; i++)
        close(f->fds[i]);
    f->n = 0;
}

static void set_limit(int resource, rlim_t soft)
{
    struct rlimit r;
    TU_CHECK(getrlimit(resource, &r) == 0);
    r.rlim_cur = soft;
    TU_CHECK_MSG(setrlimit(resource, &r) == 0, "setrlimit(%d, %llu): %s", resource,
                 (unsigned long long)soft, strerror(errno));
}

static rlim_t get_limit(int resource)
{
    struct rlimit r;
    TU_CHECK(getrlimit(resource, &r) == 0);
    return r.rlim_cur;
}

/* Entries of the topic directory, dot files (temporaries) included; 0 when it is missing. */
static int topic_entries(void)
{
    char path[PATH_MAX];
    tu_topic_path(TOPIC, path, sizeof path);
    return tu_dir_entries(path);
}

/* What a process holds and shows, to compare before and after a failed call. */
typedef struct footprint {
    int fds, maps, entries, endpoints;
} footprint;

static footprint footprint_now(void)
{
    footprint f = {tu_fd_count(), tu_maps_count("memfd:ferry"), topic_entries(),
                   tu_inspect_count(TOPIC, NULL)};
    return f;
}

#define CHECK_FOOTPRINT(before) check_footprint(__FILE__, __LINE__, (before))
static void check_footprint(const char *file, int line, footprint before)
{
    footprint now = footprint_now();
    if (now.fds != before.fds || now.maps != before.maps || now.entries != before.entries ||
        now.endpoints != before.endpoints)
        tu_fail(file, line,
                "a failed call left something: descriptors %d -> %d, ferry mappings %d -> %d, "
                "topic directory entries %d -> %d, endpoints %d -> %d",
                before.fds, now.fds, before.maps, now.maps, before.entries, now.entries,
                before.endpoints, now.endpoints);
}

#define CHECK_FAILED(err, saved_errno, exp_err, exp_errno)                                         \
    check_failed(__FILE__, __LINE__, (err), (saved_errno), (exp_err), (exp_errno))
/* err must be exp_err, with errno exp_errno when that is not 0, and a printable message. */
static void check_failed(const char *file, int line, ferry_err err, int saved_errno,
                         ferry_err exp_err, int exp_errno)
{
    const char *msg = ferry_strerror(err);
    if (err != exp_err || (exp_errno != 0 && saved_errno != exp_errno))
        tu_fail(file, line, "got %s (%s), errno %d (%s); expected %s, errno %d (%s)",
                ferry_errname(err), msg, saved_errno, strerror(saved_errno), ferry_errname(exp_err),
                exp_errno, strerror(exp_errno));
    if (msg == NULL || msg[0] == '\0')
        tu_fail(file, line, "ferry_strerror(%s) is empty", ferry_errname(err));
}

/* Log sink: counts messages and keeps the last one. */
typedef struct log_sink {
    int count;
    char last[512];
} log_sink;

static void sink_log(void *arg, ferry_log_level level, const char *message)
{
    log_sink *l = arg;
    (void)level;
    l->count++;
    snprintf(l->last, sizeof l->last, "%s", message);
}

static ferry_node *node_logging(const char *name, log_sink *sink)
{
    ferry_node_options o = tu_node_options(name);
    o.log = sink_log;
    o.log_arg = sink;
    ferry_node *node = NULL;
    TU_OK(ferry_node_create(&node, &o));
    return node;
}

/* --- the honest pair: a publisher and a subscriber in processes of their own -------------- */

typedef struct honest {
    tu_pipe pub_ctl, pub_out, sub_ctl, sub_out;
    pid_t pub_pid, sub_pid;
    size_t pool_bytes;
} honest;

static int honest_publisher(void *arg)
{
    honest *h = arg;
    ferry_node *node = tu_node("honestpub");
    ferry_publisher *pub = NULL;
    int e = 0;
    TU_OK(tu_try_publisher(node, TOPIC, TYPE, h->pool_bytes, SIZE, &pub, &e));
    TU_OK(ferry_publisher_wait_subscribers(pub, 1, TU_WAIT_NS));
    tu_send(&h->pub_out, MSG_READY);
    uint64_t seq = 0;
    while (!tu_readable(&h->pub_ctl)) {
        void *p = NULL;
        ferry_err err = ferry_loan(pub, SIZE, &p);
        if (err == FERRY_OK) {
            tu_fill(p, SIZE, ++seq);
            TU_OK(ferry_publish(pub, p, 0));
        } else {
            TU_CHECK_MSG(err == FERRY_EPOOL, "ferry_loan: %s", ferry_strerror(err));
        }
        TU_OK(ferry_publisher_poll(pub, 4 * TU_MS));
    }
    TU_EQ_U64(tu_recv(&h->pub_ctl, 0), MSG_STOP);
    ferry_publisher_stats ps;
    TU_OK(ferry_publisher_stats_get(pub, &ps));
    TU_EQ_U64(ps.protocol_errors, 0);
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    tu_send(&h->pub_out, seq);
    return 0;
}

static int honest_subscriber(void *arg)
{
    honest *h = arg;
    ferry_node *node = tu_node("honestsub");
    ferry_subscriber *sub = NULL;
    int e = 0;
    TU_OK(tu_try_subscriber(node, TOPIC, TYPE, &sub, &e));
    TU_OK(ferry_subscriber_wait_publishers(sub, 1, TU_WAIT_NS));
    uint64_t got = 0;
    while (!tu_readable(&h->sub_ctl)) {
        ferry_sample s;
        ferry_err err = ferry_take(sub, &s);
        if (err == FERRY_OK) {
            TU_SAMPLE_INTACT(&s, SIZE);
            TU_OK(ferry_release(sub, &s));
            if (++got == 1)
                tu_send(&h->sub_out, MSG_READY);
            continue;
        }
        TU_ERR(err, FERRY_EAGAIN);
        err = ferry_wait(sub, 20 * TU_MS);
        TU_CHECK(err == FERRY_OK || err == FERRY_ETIMEDOUT);
    }
    TU_EQ_U64(tu_recv(&h->sub_ctl, 0), MSG_STOP);
    ferry_subscriber_stats ss;
    TU_OK(ferry_subscriber_stats_get(sub, &ss));
    TU_EQ_U64(ss.protocol_errors, 0);
    TU_EQ_U64(ss.publishers_lost, 0);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    tu_send(&h->sub_out, got);
    return 0;
}

/* Starts the pair and waits until samples flow. */
static void honest_start(honest *h, size_t pool_bytes)
{
    h->pub_ctl = tu_pipe_make();
    h->pub_out = tu_pipe_make();
    h->sub_ctl = tu_pipe_make();
    h->sub_out = tu_pipe_make();
    h->pool_bytes = pool_bytes;
    h->pub_pid = tu_fork(honest_publisher, h, 30);
    h->sub_pid = tu_fork(honest_subscriber, h, 30);
    TU_EQ_U64(tu_recv(&h->pub_out, TU_WAIT_MS), MSG_READY);
    TU_EQ_U64(tu_recv(&h->sub_out, TU_WAIT_MS), MSG_READY);
}

/* Stops the pair: the subscriber kept receiving intact samples all along. */
static void honest_stop(honest *h)
{
    tu_send(&h->sub_ctl, MSG_STOP);
    uint64_t got = tu_recv(&h->sub_out, TU_WAIT_MS);
    TU_CHILD_OK(h->sub_pid);
    tu_send(&h->pub_ctl, MSG_STOP);
    uint64_t sent = tu_recv(&h->pub_out, TU_WAIT_MS);
    TU_CHILD_OK(h->pub_pid);
    printf("    honest pair: %" PRIu64 " published, %" PRIu64 " received intact\n", sent, got);
    TU_CMP_U64(got, >=, 2);
}

/* --- descriptors -------------------------------------------------------------------------- */

/* Creation with 0, 1, 2, ... descriptors to spare: every failure is FERRY_ESYS/EMFILE and
 * leaves nothing behind; with enough, it succeeds. */
static int fd_limit_publisher_main(void *arg)
{
    (void)arg;
    ferry_node *node = tu_node("fdpub");
    rlim_t old = get_limit(RLIMIT_NOFILE);
    fd_fill fill;
    int top = fill_fd_holes(&fill), failures = 0, spare_needed = -1;
    for (int spare = 0; spare < 64 && spare_needed < 0; spare++) {
        footprint before = footprint_now();
        ferry_publisher *pub = NULL;
        int e = 0;
        set_limit(RLIMIT_NOFILE, (rlim_t)(top + 1 + spare));
        ferry_err err = tu_try_publisher(node, OTHER_TOPIC, TYPE, 16 * SIZE, SIZE, &pub, &e);
        set_limit(RLIMIT_NOFILE, old);
        if (err == FERRY_OK) {
            spare_needed = spare;
            tu_publish_pattern(pub, SIZE, 1);
            TU_OK(ferry_publisher_destroy(pub));
            break;
        }
        CHECK_FAILED(err, e, FERRY_ESYS, EMFILE);
        TU_CHECK(pub == NULL);
        CHECK_FOOTPRINT(before);
        failures++;
    }
    printf("    publisher creation needs %d spare descriptors; %d failed cleanly below that\n",
           spare_needed, failures);
    TU_CMP_I64(failures, >=, 1);
    TU_CMP_I64(spare_needed, >, 0);
    unfill_fd_holes(&fill);
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    return 0;
}

static int fd_limit_subscriber_main(void *arg)
{
    (void)arg;
    log_sink logs = {0, ""};
    ferry_node *node = node_logging("fdsub", &logs);
    rlim_t old = get_limit(RLIMIT_NOFILE);
    fd_fill fill;
    int top = fill_fd_holes(&fill), failures = 0, created_at = -1, unconnected = 0;
    for (int spare = 0; spare < 64; spare++) {
        footprint before = footprint_now();
        ferry_subscriber *sub = NULL;
        int e = 0;
        set_limit(RLIMIT_NOFILE, (rlim_t)(top + 1 + spare));
        ferry_err err = tu_try_subscriber(node, TOPIC, TYPE, &sub, &e);
        if (err != FERRY_OK) {
            set_limit(RLIMIT_NOFILE, old);
            CHECK_FAILED(err, e, FERRY_ESYS, EMFILE);
            TU_CHECK(sub == NULL);
            CHECK_FOOTPRINT(before);
            failures++;
            continue;
        }
        if (created_at < 0)
            created_at = spare;
        set_limit(RLIMIT_NOFILE, old);
        int fds_created = tu_fd_count();
        set_limit(RLIMIT_NOFILE, (rlim_t)(top + 1 + spare));
        /* Created, still limited: the handshake needs a socket and three received
         * descriptors. Either it connects, or it stays unconnected and keeps running. */
        err = ferry_subscriber_wait_publishers(sub, 1, 300 * TU_MS);
        TU_CHECK_MSG(err == FERRY_OK || err == FERRY_ETIMEDOUT, "wait_publishers: %s",
                     ferry_errname(err));
        if (err == FERRY_OK) {
            TU_TAKE_INTACT(sub, 0);
            set_limit(RLIMIT_NOFILE, old);
            TU_OK(ferry_subscriber_destroy(sub));
            printf("    subscriber: creation needs %d spare descriptors (%d failed cleanly), "
                   "connecting %d\n",
                   created_at, failures, spare);
            break;
        }
        unconnected++;
        ferry_sample s;
        TU_ERR(ferry_take(sub, &s), FERRY_EAGAIN);
        ferry_subscriber_stats ss;
        TU_OK(ferry_subscriber_stats_get(sub, &ss));
        TU_EQ_U64(ss.publishers, 0);
        set_limit(RLIMIT_NOFILE, old);
        /* Failed handshakes leave no descriptor or mapping behind (a connection that was
         * pending at creation may have been closed since). */
        TU_CMP_I64(tu_fd_count(), <=, fds_created);
        TU_CMP_I64(tu_maps_count("memfd:ferry"), ==, 0);
        if (unconnected == 1) {
            /* Raising the limit again is all it takes: the next rescan connects. */
            TU_OK(ferry_subscriber_wait_publishers(sub, 1, TU_WAIT_NS));
            TU_TAKE_INTACT(sub, 0);
        }
        TU_OK(ferry_subscriber_destroy(sub));
        CHECK_FOOTPRINT(before);
    }
    TU_CMP_I64(failures, >=, 1);
    TU_CMP_I64(created_at, >, 0);
    TU_CMP_I64(unconnected, >=, 1);
    unfill_fd_holes(&fill);
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    /* A subscriber that cannot connect for want of descriptors says so (it cannot return an
     * error: the handshake runs inside later calls). */
    TU_CHECK_MSG(logs.count >= 1,
                 "the subscriber stayed unconnected at the descriptor limit "
                 "%d times and logged nothing",
                 unconnected);
    printf("    last diagnostic: %s\n", logs.last);
    return 0;
}

static int test_fd_limit(void)
{
    honest h;
    honest_start(&h, 16 * SIZE);
    TU_CHILD_OK(tu_fork(fd_limit_publisher_main, NULL, 20));
    TU_CHILD_OK(tu_fork(fd_limit_subscriber_main, NULL, 20));
    honest_stop(&h);
    return 0;
}

/* A publisher at its descriptor limit: connections it cannot take (accept, the subscriber's
 * eventfd, the connection segment) fail one by one, the publisher keeps running, and once its
 * limit is raised the same subscriber connects. */
typedef struct pub_limit {
    tu_pipe to_main, to_sub;
} pub_limit;

static int limited_publisher_main(void *arg)
{
    pub_limit *pl = arg;
    log_sink logs = {0, ""};
    ferry_node *node = node_logging("fdlimpub", &logs);
    ferry_publisher *pub = NULL;
    int e = 0;
    TU_OK(tu_try_publisher(node, TOPIC, TYPE, 16 * SIZE, SIZE, &pub, &e));
    rlim_t old = get_limit(RLIMIT_NOFILE);
    fd_fill fill;
    int top = fill_fd_holes(&fill);
    tu_send(&pl->to_sub, MSG_READY);
    ferry_publisher_stats ps;
    /* One step per spare descriptor, each long enough for the subscriber to try again (it
     * rescans the topic at least once a second). */
    for (int spare = 0; spare < 4; spare++) {
        set_limit(RLIMIT_NOFILE, (rlim_t)(top + 1 + spare));
        ferry_time t0 = ferry_now();
        while (tu_since(t0) < (spare == 0 ? 200 : 1100) * TU_MS)
            TU_OK(ferry_publisher_poll(pub, 10 * TU_MS));
        TU_OK(ferry_publisher_stats_get(pub, &ps));
        set_limit(RLIMIT_NOFILE, old);
        printf("    publisher with %d descriptors to spare: %" PRIu64 " refused, %" PRIu64
               " protocol errors, %u connected; last diagnostic: %s\n",
               spare, ps.rejected, ps.protocol_errors, ps.subscribers,
               logs.count ? logs.last : "(none)");
        if (ps.subscribers > 0)
            break;
    }
    unfill_fd_holes(&fill);
    /* Limit raised: the subscriber that was turned away gets in. */
    ferry_err err = ferry_publisher_wait_subscribers(pub, 1, 5 * TU_SEC);
    TU_CHECK_MSG(err == FERRY_OK,
                 "the subscriber did not connect within 5 s of the limit being "
                 "raised (%" PRIu64 " refusals before): %s",
                 ps.rejected, ferry_errname(err));
    tu_publish_pattern(pub, SIZE, 1);
    TU_EQ_U64(tu_serve_until(&pub, 1, &pl->to_main, TU_WAIT_MS), MSG_DONE);
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    return 0;
}

static int patient_subscriber_main(void *arg)
{
    pub_limit *pl = arg;
    TU_EQ_U64(tu_recv(&pl->to_sub, TU_WAIT_MS), MSG_READY);
    log_sink logs = {0, ""};
    ferry_node *node = node_logging("patient", &logs);
    ferry_subscriber *sub = NULL;
    int e = 0;
    TU_OK(tu_try_subscriber(node, TOPIC, TYPE, &sub, &e));
    TU_OK(ferry_subscriber_wait_publishers(sub, 1, 9 * TU_SEC));
    TU_TAKE_INTACT(sub, 0);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    tu_send(&pl->to_main, MSG_DONE);
    return 0;
}

static int test_publisher_fd_limit(void)
{
    pub_limit pl = {tu_pipe_make(), tu_pipe_make()};
    pid_t p = tu_fork(limited_publisher_main, &pl, 25);
    pid_t s = tu_fork(patient_subscriber_main, &pl, 25);
    TU_CHILD_OK(s);
    TU_CHILD_OK(p);
    return 0;
}

/* --- memfd_create refused ----------------------------------------------------------------- */

/* Makes the system call nr fail with err from now on in this process (and its children). */
static bool refuse_call(long nr, int err)
{
#if defined(__x86_64__)
    const unsigned arch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
    const unsigned arch = AUDIT_ARCH_AARCH64;
#else
    const unsigned arch = 0;
#endif
    if (arch == 0 || nr < 0)
        return false;
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, arch, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nr, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ((unsigned)err & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = (unsigned short)(sizeof f / sizeof f[0]), .filter = f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0)
        return false;
    return true;
}

#ifdef SYS_memfd_create
#define NR_MEMFD_CREATE SYS_memfd_create
#else
#define NR_MEMFD_CREATE (-1L)
#endif

typedef struct memfd_case {
    int err;          /* what memfd_create says */
    ferry_err expect; /* what publisher creation gives */
    int expect_errno; /* and errno, for FERRY_ESYS */
} memfd_case;

static int memfd_refused_main(void *arg)
{
    const memfd_case *mc = arg;
    log_sink pub_logs = {0, ""};
    ferry_node *node = node_logging("memfd", &pub_logs);
    ferry_publisher *pub = NULL;
    int e = 0;
    TU_OK(tu_try_publisher(node, TOPIC, TYPE, 16 * SIZE, SIZE, &pub, &e));
    ferry_subscriber *early = NULL;
    TU_OK(tu_try_subscriber(node, TOPIC, TYPE, &early, &e));
    tu_connect_local(pub, 1, early, 1);

    if (!refuse_call(NR_MEMFD_CREATE, mc->err))
        return TU_SKIP;

    /* A second publisher cannot get its data segment. */
    footprint before = footprint_now();
    ferry_publisher *second = NULL;
    ferry_err err = tu_try_publisher(node, TOPIC, TYPE, 16 * SIZE, SIZE, &second, &e);
    CHECK_FAILED(err, e, mc->expect, mc->expect_errno);
    TU_CHECK(second == NULL);
    CHECK_FOOTPRINT(before);

    /* A new subscriber needs a connection segment the publisher cannot make now: it is
     * refused, on both sides, and the publisher goes on serving the one it has. */
    log_sink logs = {0, ""};
    ferry_node_options o = tu_node_options("late");
    o.log = sink_log;
    o.log_arg = &logs;
    ferry_node *late_node = NULL;
    TU_OK(ferry_node_create(&late_node, &o));
    ferry_subscriber *late = NULL;
    TU_OK(tu_try_subscriber(late_node, TOPIC, TYPE, &late, &e));
    ferry_publisher_stats ps;
    ferry_subscriber_stats ss;
    ferry_time t0 = ferry_now();
    do {
        TU_OK(ferry_publisher_poll(pub, TU_MS));
        ferry_err w = ferry_subscriber_wait_publishers(late, 1, TU_MS);
        TU_CHECK_MSG(w == FERRY_ETIMEDOUT, "the late subscriber connected: %s", ferry_errname(w));
        TU_OK(ferry_publisher_stats_get(pub, &ps));
        TU_OK(ferry_subscriber_stats_get(late, &ss));
        TU_CHECK_MSG(tu_since(t0) < TU_WAIT_NS,
                     "no refusal: publisher rejected %" PRIu64 ", subscriber rejected %" PRIu64,
                     ps.rejected, ss.rejected);
    } while (ps.rejected == 0 || ss.rejected == 0);
    TU_EQ_U64(ps.subscribers, 1);
    TU_EQ_U64(ss.publishers, 0);
    TU_CMP_I64(logs.count, >=, 1);
    printf("    late subscriber was told: %s\n", logs.last);
    TU_CMP_I64(pub_logs.count, >=, 1);
    tu_publish_pattern(pub, SIZE, 1);
    TU_TAKE_INTACT(early, 0);
    ferry_sample s;
    TU_ERR(ferry_take(late, &s), FERRY_EAGAIN);

    TU_OK(ferry_subscriber_destroy(late));
    TU_OK(ferry_node_destroy(late_node));
    TU_OK(ferry_subscriber_destroy(early));
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    return 0;
}

static bool run_memfd_case(memfd_case *mc)
{
    int st = tu_wait_status(tu_fork(memfd_refused_main, mc, 20), 20000);
    if (WIFEXITED(st) && WEXITSTATUS(st) == TU_SKIP) {
        printf("    seccomp unavailable: memfd_create failure not simulated\n");
        return true;
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
        return true;
    fprintf(stderr, "    memfd_create failing with %s: case failed (status 0x%x)\n",
            strerror(mc->err), (unsigned)st);
    return false;
}

static int test_memfd_refused(void)
{
    /* Out of descriptors is a system call failure; out of memory is FERRY_ENOMEM, as for the
     * segment's pages and mapping. */
    memfd_case cases[] = {
        {EMFILE, FERRY_ESYS, EMFILE},
        {ENFILE, FERRY_ESYS, ENFILE},
        {ENOMEM, FERRY_ENOMEM, 0},
    };
    int failed = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        failed += !run_memfd_case(&cases[i]);
    TU_CMP_I64(failed, ==, 0);
    return 0;
}

/* --- inotify refused ----------------------------------------------------------------------- */

/* Any process of the user can take all of its inotify instances (fs.inotify.max_user_instances,
 * 128 by default): a subscriber is still made, says once that it cannot watch, and finds a
 * publisher that comes later by its rescan. */
static int inotify_refused_main(void *arg)
{
    (void)arg;
#ifdef SYS_inotify_init1
    if (!refuse_call(SYS_inotify_init1, EMFILE))
        return TU_SKIP;
#else
    return TU_SKIP;
#endif
    log_sink logs = {0, ""};
    ferry_node *node = node_logging("nowatch", &logs);
    ferry_subscriber *sub = NULL;
    int e = 0;
    TU_OK(tu_try_subscriber(node, TOPIC, TYPE, &sub, &e));
    TU_CMP_I64(logs.count, ==, 1);
    TU_CHECK_MSG(strstr(logs.last, "cannot watch") != NULL, "logged: %s", logs.last);
    printf("    subscriber without a watch was told: %s\n", logs.last);
    ferry_publisher *pub = NULL;
    TU_OK(tu_try_publisher(node, TOPIC, TYPE, 16 * SIZE, SIZE, &pub, &e));
    tu_connect_local(pub, 1, sub, 1);
    tu_publish_pattern(pub, SIZE, 1);
    TU_TAKE_INTACT(sub, SIZE);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    return 0;
}

static int test_inotify_refused(void)
{
    int st = tu_wait_status(tu_fork(inotify_refused_main, NULL, 20), 20000);
    if (WIFEXITED(st) && WEXITSTATUS(st) == TU_SKIP) {
        printf("    seccomp unavailable: inotify failure not simulated\n");
        return 0;
    }
    TU_CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                 "inotify refused: case failed (status 0x%x)", (unsigned)st);
    return 0;
}

/* --- memory ------------------------------------------------------------------------------- */

static size_t vm_size(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    TU_CHECK(f != NULL);
    char line[256];
    unsigned long kb = 0;
    while (fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "VmSize: %lu kB", &kb) == 1)
            break;
    fclose(f);
    TU_CHECK(kb > 0);
    return (size_t)kb * 1024;
}

static int address_space_main(void *arg)
{
    (void)arg;
    log_sink logs = {0, ""};
    ferry_node *node = node_logging("as", &logs);
    rlim_t old = get_limit(RLIMIT_AS);
    size_t headroom = (size_t)48 << 20;

    /* A segment bigger than the address space left cannot be mapped. */
    footprint before = footprint_now();
    ferry_publisher *pub = NULL;
    int e = 0;
    set_limit(RLIMIT_AS, (rlim_t)(vm_size() + headroom));
    ferry_err err = tu_try_publisher(node, OTHER_TOPIC, TYPE, (size_t)256 << 20, SIZE, &pub, &e);
    CHECK_FAILED(err, e, FERRY_ENOMEM, 0);
    TU_CHECK(pub == NULL);
    CHECK_FOOTPRINT(before);

    /* Same limit, a pool that fits: works, loans and publishes (on a topic of its own, so that
     * the honest subscriber does not meet a publisher that comes and goes). */
    TU_OK(tu_try_publisher(node, OTHER_TOPIC, TYPE, 16 * SIZE, SIZE, &pub, &e));
    tu_publish_pattern(pub, SIZE, 1);
    TU_OK(ferry_publisher_destroy(pub));

    /* A subscriber that cannot map the honest publisher's (256 MiB) segment: not connected,
     * still running; with the limit raised it connects. */
    before = footprint_now();
    ferry_subscriber *sub = NULL;
    TU_OK(tu_try_subscriber(node, TOPIC, TYPE, &sub, &e));
    err = ferry_subscriber_wait_publishers(sub, 1, 300 * TU_MS);
    TU_ERR(err, FERRY_ETIMEDOUT);
    ferry_sample s;
    TU_ERR(ferry_take(sub, &s), FERRY_EAGAIN);
    TU_CMP_I64(tu_maps_count("memfd:ferry"), ==, 0);
    TU_CMP_I64(logs.count, >=, 1);
    printf("    subscriber out of address space was told: %s\n", logs.last);
    char told[sizeof logs.last];
    snprintf(told, sizeof told, "%s", logs.last);

    set_limit(RLIMIT_AS, old);
    TU_OK(ferry_subscriber_wait_publishers(sub, 1, TU_WAIT_NS));
    TU_TAKE_INTACT(sub, 0);
    TU_OK(ferry_subscriber_destroy(sub));

    /* And the large publisher can be made once the limit is back. */
    TU_OK(tu_try_publisher(node, OTHER_TOPIC, TYPE, (size_t)256 << 20, SIZE, &pub, &e));
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    /* The diagnostic names the cause. */
    TU_CHECK_MSG(strstr(told, "memory") != NULL || strstr(told, strerror(ENOMEM)) != NULL,
                 "the diagnostic of a subscriber out of address space does not say so: \"%s\"",
                 told);
    return 0;
}

static int test_address_space(void)
{
    honest h;
    honest_start(&h, (size_t)256 << 20);
    TU_CHILD_OK(tu_fork(address_space_main, NULL, 20));
    honest_stop(&h);
    return 0;
}

static int file_size_main(void *arg)
{
    (void)arg;
    signal(SIGXFSZ, SIG_IGN); /* the call gets EFBIG instead of the process dying */
    ferry_node *node = tu_node("fsize");
    rlim_t old = get_limit(RLIMIT_FSIZE);
    set_limit(RLIMIT_FSIZE, (rlim_t)1 << 20);

    footprint before = footprint_now();
    ferry_publisher *pub = NULL;
    int e = 0;
    ferry_err err = tu_try_publisher(node, TOPIC, TYPE, (size_t)4 << 20, SIZE, &pub, &e);
    CHECK_FAILED(err, e, FERRY_ESYS, EFBIG);
    TU_CHECK(pub == NULL);
    CHECK_FOOTPRINT(before);

    /* A segment under the limit is fine, and so are its loans up to its cap. */
    TU_OK(tu_try_publisher(node, TOPIC, TYPE, (size_t)512 << 10, SIZE, &pub, &e));
    void *loans[8];
    int n = 0;
    while (n < 8 && ferry_loan(pub, SIZE, &loans[n]) == FERRY_OK)
        n++;
    TU_CMP_I64(n, >=, 4);
    for (int i = 0; i < n; i++)
        TU_OK(ferry_loan_release(pub, loans[i]));
    TU_OK(ferry_publisher_destroy(pub));

    set_limit(RLIMIT_FSIZE, old);
    TU_OK(tu_try_publisher(node, TOPIC, TYPE, (size_t)4 << 20, SIZE, &pub, &e));
    tu_publish_pattern(pub, SIZE, 1);
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    return 0;
}

static int test_file_size(void)
{
    TU_CHILD_OK(tu_fork(file_size_main, NULL, 20));
    return 0;
}

static int memlock_main(void *arg)
{
    (void)arg;
    set_limit(RLIMIT_MEMLOCK, 0);
    ferry_node *node = tu_node("memlock");
    ferry_publisher *pub = NULL;
    ferry_subscriber *sub = NULL;
    int e = 0;
    TU_OK(tu_try_publisher(node, TOPIC, TYPE, 16 * SIZE, SIZE, &pub, &e));
    TU_OK(tu_try_subscriber(node, TOPIC, TYPE, &sub, &e));
    tu_connect_local(pub, 1, sub, 1);
    tu_publish_pattern(pub, SIZE, 1);
    TU_TAKE_INTACT(sub, 0);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    return 0;
}

static int test_memlock(void)
{
    TU_CHILD_OK(tu_fork(memlock_main, NULL, 20));
    return 0;
}

/* --- the pool's own caps ------------------------------------------------------------------ */

static int test_byte_cap(void)
{
    ferry_node *node = tu_node("cap");
    ferry_publisher_options po;
    ferry_publisher_options_init(&po);
    po.pool_bytes = 4 * SIZE + SIZE / 2; /* a few chunks of this size class */
    po.max_sample_size = SIZE;
    po.max_bytes_per_subscriber = po.pool_bytes; /* the subscriber may hold them all */
    ferry_publisher *pub = NULL;
    TU_OK(ferry_publisher_create(&pub, node, TOPIC, TYPE, ferry_hash(TYPE), &po));
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = 8;
    ferry_subscriber *sub = NULL;
    TU_OK(ferry_subscriber_create(&sub, node, TOPIC, TYPE, ferry_hash(TYPE), &so));
    tu_connect_local(pub, 1, sub, 1);

    void *loans[16];
    int n = 0;
    ferry_err err;
    while ((err = ferry_loan(pub, SIZE, &loans[n])) == FERRY_OK)
        TU_CHECK(++n < 16);
    TU_ERR(err, FERRY_EPOOL);
    TU_CHECK(strlen(ferry_strerror(err)) > 0);
    TU_CMP_I64(n, >=, 2);
    TU_CMP_I64(n, <=, 8);
    ferry_publisher_stats ps;
    TU_OK(ferry_publisher_stats_get(pub, &ps));
    TU_CMP_U64(ps.pool_bytes, <=, ps.pool_bytes_cap);
    TU_EQ_U64(ps.chunks_loaned, n);
    TU_ERR(ferry_loan(pub, SIZE, &loans[n]), FERRY_EPOOL); /* still, and nothing changed */

    /* One back: one more loan. */
    TU_OK(ferry_loan_release(pub, loans[0]));
    TU_OK(ferry_loan(pub, SIZE, &loans[0]));

    /* All published and held by the subscriber: the pool is exhausted by the holder. */
    for (int i = 0; i < n; i++) {
        tu_fill(loans[i], SIZE, (uint64_t)i + 1);
        TU_OK(ferry_publish(pub, loans[i], 0));
    }
    ferry_sample held[8];
    for (int i = 0; i < n; i++) {
        TU_OK(ferry_wait(sub, TU_WAIT_NS));
        TU_OK(ferry_take(sub, &held[i]));
        TU_SAMPLE_INTACT(&held[i], SIZE);
    }
    void *p = NULL;
    TU_ERR(ferry_loan(pub, SIZE, &p), FERRY_EPOOL);
    TU_ERR(ferry_loan(pub, 100, &p), FERRY_EPOOL); /* another size class: no bytes left */
    for (int i = 0; i < n; i++)
        TU_OK(ferry_release(sub, &held[i]));
    TU_OK(ferry_loan(pub, SIZE, &p)); /* returns are drained by the loan */
    TU_OK(ferry_loan_release(pub, p));
    TU_OK(ferry_publisher_destroy(pub));

    /* Blocking policy: the same exhaustion is a timeout after block_timeout_ns. */
    po.on_pool_exhausted = FERRY_POOL_BLOCK;
    po.block_timeout_ns = 20 * TU_MS;
    TU_OK(ferry_publisher_create(&pub, node, TOPIC, TYPE, ferry_hash(TYPE), &po));
    for (int i = 0; i < n; i++)
        TU_OK(ferry_loan(pub, SIZE, &loans[i]));
    ferry_time t0 = ferry_now();
    TU_ERR(ferry_loan(pub, SIZE, &p), FERRY_ETIMEDOUT);
    TU_CMP_I64(tu_since(t0), >=, 15 * TU_MS);
    TU_OK(ferry_loan_release(pub, loans[0]));
    TU_OK(ferry_loan(pub, SIZE, &loans[0]));
    for (int i = 0; i < n; i++)
        TU_OK(ferry_loan_release(pub, loans[i]));
    TU_OK(ferry_publisher_destroy(pub));

    /* The chunk cap gives the same error. */
    po.on_pool_exhausted = FERRY_POOL_ERROR;
    po.pool_bytes = 1 << 20;
    po.max_chunks = 2;
    TU_OK(ferry_publisher_create(&pub, node, TOPIC, TYPE, ferry_hash(TYPE), &po));
    TU_OK(ferry_loan(pub, 100, &loans[0]));
    TU_OK(ferry_loan(pub, 100, &loans[1]));
    TU_ERR(ferry_loan(pub, 100, &loans[2]), FERRY_EPOOL);
    TU_OK(ferry_loan_release(pub, loans[0]));
    TU_OK(ferry_loan(pub, 100, &loans[0]));
    TU_OK(ferry_loan_release(pub, loans[0]));
    TU_OK(ferry_loan_release(pub, loans[1]));

    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
    return 0;
}

int main(void)
{
    int failed = 0;
    failed += TU_RUN_ISOLATED(test_byte_cap) != 0;
    failed += TU_RUN_ISOLATED(test_file_size) != 0;
    failed += TU_RUN_ISOLATED(test_memlock) != 0;
    failed += TU_RUN_ISOLATED(test_address_space) != 0;
    failed += TU_RUN_ISOLATED(test_fd_limit) != 0;
    failed += TU_RUN_ISOLATED(test_publisher_fd_limit) != 0;
    failed += TU_RUN_ISOLATED(test_memfd_refused) != 0;
    failed += TU_RUN_ISOLATED(test_inotify_refused) != 0;
    if (failed != 0)
        fprintf(stderr, "%d test(s) failed\n", failed);
    return failed != 0;
}
