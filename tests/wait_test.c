/*
 * Waiting for samples from another process: the subscriber's pollable descriptor in an epoll
 * set, a waitset over subscribers of several topics, and how promptly ferry_wait wakes; which
 * doorbells a subscriber sets with and without its descriptor handed out; how ferry_wait sleeps
 * where the kernel has no futex_waitv (a seccomp filter makes it ENOSYS); an event loop that
 * sleeps on the descriptor until a steady stream's next sample is anticipated
 * (ferry_subscriber_wake_at) and catches it (ferry_subscriber_catch) loses nothing.
 */
#include "testutil.h"

#include "core/conn.h"
#include "core/subscriber.h"

#include <errno.h>
#include <poll.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define TYPE "test/wait"
#define SIZE 4096
#define NTOPICS 3
#define ROUNDS 20

enum { MSG_READY = 100, MSG_DONE, MSG_QUIT };

static const char *const topics[NTOPICS] = {"/ws/a", "/ws/b", "/ws/c"};

typedef struct pubctl {
    tu_pipe to_pub;
    int ntopics;
    int64_t delay_ns; /* between a request and the publish */
} pubctl;

/* Publishes on topics[i] when told i, until told MSG_QUIT. */
static int publisher_main(void *arg)
{
    pubctl *l = arg;
    ferry_node *node = tu_node("waitpub");
    ferry_publisher *pubs[NTOPICS];
    uint64_t seq[NTOPICS];
    for (int i = 0; i < l->ntopics; i++) {
        TU_OK(ferry_publisher_create(&pubs[i], node, topics[i], TYPE, ferry_hash(TYPE), NULL));
        seq[i] = 0;
    }
    for (int i = 0; i < l->ntopics; i++)
        TU_OK(ferry_publisher_wait_subscribers(pubs[i], 1, TU_WAIT_NS));
    TU_EQ_U64(tu_serve_until(pubs, (size_t)l->ntopics, &l->to_pub, TU_WAIT_MS), MSG_READY);
    for (;;) {
        uint64_t cmd = tu_serve_until(pubs, (size_t)l->ntopics, &l->to_pub, 30000);
        if (cmd == MSG_QUIT)
            break;
        TU_CMP_U64(cmd, <, (uint64_t)l->ntopics);
        if (l->delay_ns > 0)
            tu_sleep_ns(l->delay_ns);
        tu_publish_pattern(pubs[cmd], SIZE, ++seq[cmd]);
    }
    for (int i = 0; i < l->ntopics; i++)
        TU_OK(ferry_publisher_destroy(pubs[i]));
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    return 0;
}

/* Forks publisher_main over the first ntopics topics, delay_ns between a request and its publish.
 */
static pid_t start_publisher(pubctl *l, int ntopics, int64_t delay_ns)
{
    l->to_pub = tu_pipe_make();
    l->ntopics = ntopics;
    l->delay_ns = delay_ns;
    return tu_fork(publisher_main, l, 60);
}

static ferry_subscriber *make_sub_polling(ferry_node *node, const char *topic, bool busy_poll)
{
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = 8;
    so.busy_poll = busy_poll;
    ferry_subscriber *sub = NULL;
    TU_OK(ferry_subscriber_create(&sub, node, topic, TYPE, ferry_hash(TYPE), &so));
    TU_OK(ferry_subscriber_wait_publishers(sub, 1, TU_WAIT_NS));
    return sub;
}

static ferry_subscriber *make_sub(ferry_node *node, const char *topic)
{
    return make_sub_polling(node, topic, false);
}

static void test_epoll(void)
{
    pubctl l;
    pid_t child = start_publisher(&l, 1, 10 * TU_MS);
    ferry_node *node = tu_node("epoll");
    ferry_subscriber *sub = make_sub(node, topics[0]);
    int fd = -1;
    TU_OK(ferry_subscriber_fd(sub, &fd));
    TU_CHECK(fd >= 0);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    TU_CHECK(ep >= 0);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 42};
    TU_CHECK_MSG(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == 0, "epoll_ctl: %s", strerror(errno));
    tu_send(&l.to_pub, MSG_READY);

    ferry_sample s;
    for (uint64_t round = 1; round <= 3; round++) {
        /* Take until FERRY_EAGAIN arms the descriptor, then wait on it. */
        TU_ERR(ferry_take(sub, &s), FERRY_EAGAIN);
        tu_send(&l.to_pub, 0);
        ferry_time t0 = ferry_now();
        int wakes = 0;
        ferry_err e = FERRY_EAGAIN;
        while (e == FERRY_EAGAIN) {
            int64_t left_ms = (TU_WAIT_NS - tu_since(t0)) / TU_MS;
            TU_CHECK_MSG(left_ms > 0, "no sample after 10 s and %d wake-ups", wakes);
            struct epoll_event got;
            int n = epoll_wait(ep, &got, 1, (int)left_ms);
            if (n < 0 && errno == EINTR)
                continue;
            TU_CHECK_MSG(n >= 0, "epoll_wait: %s", strerror(errno));
            if (n == 0)
                continue;
            TU_EQ_U64(got.data.u64, 42);
            wakes++;
            e = ferry_take(sub, &s);
        }
        TU_OK(e);
        TU_CMP_I64(wakes, >=, 1);
        TU_CMP_I64(wakes, <, 1000);
        TU_EQ_U64(s.sequence, round);
        TU_SAMPLE_INTACT(&s, SIZE);
        TU_OK(ferry_release(sub, &s));
    }
    tu_send(&l.to_pub, MSG_QUIT);
    TU_CHILD_OK(child);
    close(ep);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
}

/* --- an event loop's anticipation -------------------------------------------------------- */

#define STEADY_COUNT 60
#define STEADY_PERIOD_NS (10 * TU_MS)

/* A camera: STEADY_COUNT samples, one every STEADY_PERIOD_NS, once told MSG_READY. */
static int steady_publisher_main(void *arg)
{
    pubctl *l = arg;
    ferry_node *node = tu_node("steadypub");
    ferry_publisher *pub = NULL;
    TU_OK(ferry_publisher_create(&pub, node, "/steady", TYPE, ferry_hash(TYPE), NULL));
    TU_OK(ferry_publisher_wait_subscribers(pub, 1, TU_WAIT_NS));
    TU_EQ_U64(tu_serve_until(&pub, 1, &l->to_pub, TU_WAIT_MS), MSG_READY);
    int64_t next = ferry_now().ns;
    for (uint64_t seq = 1; seq <= STEADY_COUNT; seq++) {
        next += STEADY_PERIOD_NS;
        int64_t wait = next - ferry_now().ns;
        if (wait > 0)
            tu_sleep_ns(wait);
        tu_publish_pattern(pub, SIZE, seq);
    }
    TU_EQ_U64(tu_serve_until(&pub, 1, &l->to_pub, 30000), MSG_QUIT);
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    return 0;
}

static void test_fd_anticipation(void)
{
    ferry_node *node = tu_node("anticipate");
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = STEADY_COUNT;
    ferry_subscriber *sub = NULL;
    TU_OK(ferry_subscriber_create(&sub, node, "/steady", TYPE, ferry_hash(TYPE), &so));
    /* Nothing learned yet: nothing anticipated, and nothing to catch. */
    int64_t at = -1;
    TU_OK(ferry_subscriber_wake_at(sub, &at));
    TU_EQ_U64(at, 0);
    TU_ERR(ferry_subscriber_wake_at(sub, NULL), FERRY_EINVAL);
    TU_ERR(ferry_subscriber_wake_at(NULL, &at), FERRY_EINVAL);
    TU_ERR(ferry_subscriber_catch(NULL, 1), FERRY_EINVAL);
    TU_ERR(ferry_subscriber_catch(sub, 0), FERRY_ETIMEDOUT);
    TU_ERR(ferry_subscriber_catch(sub, ferry_now().ns - TU_MS), FERRY_ETIMEDOUT);

    pubctl l;
    l.to_pub = tu_pipe_make();
    pid_t child = tu_fork(steady_publisher_main, &l, 60);
    TU_OK(ferry_subscriber_wait_publishers(sub, 1, TU_WAIT_NS));
    int fd = -1;
    TU_OK(ferry_subscriber_fd(sub, &fd));
    tu_send(&l.to_pub, MSG_READY);

    /* The loop of an executor: take until empty, sleep on the descriptor (until the anticipated
     * time where there is one), catch. Every sample comes, in order, intact. */
    uint64_t next = 1;
    int anticipated = 0;
    ferry_time t0 = ferry_now();
    while (next <= STEADY_COUNT) {
        TU_CHECK_MSG(tu_since(t0) < 4 * TU_WAIT_NS, "sample %llu not there after 40 s",
                     (unsigned long long)next);
        ferry_sample s;
        ferry_err e = ferry_take(sub, &s);
        if (e == FERRY_OK) {
            TU_EQ_U64(s.sequence, next);
            TU_SAMPLE_INTACT(&s, SIZE);
            TU_OK(ferry_release(sub, &s));
            next++;
            continue;
        }
        TU_ERR(e, FERRY_EAGAIN);
        TU_OK(ferry_subscriber_wake_at(sub, &at));
        int64_t now = ferry_now().ns, sleep = TU_SEC;
        if (at != 0) {
            TU_CMP_I64(at - now, <=, STEADY_PERIOD_NS + TU_MS); /* within about a period */
            sleep = at > now ? at - now : 0;
            anticipated++;
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        struct timespec ts = {.tv_sec = sleep / TU_SEC, .tv_nsec = sleep % TU_SEC};
        int r = ppoll(&p, 1, &ts, NULL);
        TU_CHECK_MSG(r >= 0 || errno == EINTR, "ppoll: %s", strerror(errno));
        if (r == 0 && at != 0) {
            e = ferry_subscriber_catch(sub, at);
            TU_CHECK(e == FERRY_OK || e == FERRY_ETIMEDOUT);
        }
    }
    ferry_subscriber_stats st;
    TU_OK(ferry_subscriber_stats_get(sub, &st));
    /* How often it anticipated depends on how steady the machine let the stream be. */
    printf("  anticipated %d times of %d samples; caught %llu of %llu spins\n", anticipated,
           STEADY_COUNT, (unsigned long long)st.spin.paced_found,
           (unsigned long long)st.spin.paced_spins);
    tu_send(&l.to_pub, MSG_QUIT);
    TU_CHILD_OK(child);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
}

static void test_waitset(void)
{
    pubctl l;
    pid_t child = start_publisher(&l, NTOPICS, 0);
    ferry_node *node = tu_node("waitset");
    ferry_subscriber *subs[NTOPICS];
    int ctx[NTOPICS];
    ferry_waitset *ws = NULL;
    TU_OK(ferry_waitset_create(&ws, node));
    for (int i = 0; i < NTOPICS; i++) {
        subs[i] = make_sub(node, topics[i]);
        TU_OK(ferry_waitset_add(ws, subs[i], &ctx[i]));
    }
    tu_send(&l.to_pub, MSG_READY);

    void *ready[NTOPICS + 1];
    size_t count = 99;
    TU_ERR(ferry_waitset_wait(ws, 20 * TU_MS, ready, NTOPICS + 1, &count), FERRY_ETIMEDOUT);
    TU_EQ_U64(count, 0);

    uint64_t seq[NTOPICS] = {0, 0, 0};
    static const int order[] = {1, 2, 0, 2, 1};
    for (size_t k = 0; k < sizeof order / sizeof order[0]; k++) {
        int t = order[k];
        tu_send(&l.to_pub, (uint64_t)t);
        TU_OK(ferry_waitset_wait(ws, TU_WAIT_NS, ready, NTOPICS + 1, &count));
        TU_EQ_U64(count, 1);
        TU_EQ_PTR(ready[0], &ctx[t]);
        ferry_sample s;
        for (int i = 0; i < NTOPICS; i++)
            if (i != t)
                TU_ERR(ferry_take(subs[i], &s), FERRY_EAGAIN);
        TU_OK(ferry_take(subs[t], &s));
        TU_EQ_U64(s.sequence, ++seq[t]);
        TU_SAMPLE_INTACT(&s, SIZE);
        TU_OK(ferry_release(subs[t], &s));
    }

    /* Two topics at once: both contexts come out, nothing else. */
    tu_send(&l.to_pub, 0);
    tu_send(&l.to_pub, 2);
    bool seen[NTOPICS] = {false, false, false};
    ferry_time t0 = ferry_now();
    while (!(seen[0] && seen[2])) {
        TU_CHECK(tu_since(t0) < TU_WAIT_NS);
        TU_OK(ferry_waitset_wait(ws, TU_WAIT_NS, ready, NTOPICS + 1, &count));
        TU_CMP_U64(count, >=, 1);
        TU_CMP_U64(count, <=, 2);
        for (size_t i = 0; i < count; i++) {
            TU_CHECK(ready[i] == &ctx[0] || ready[i] == &ctx[2]);
            seen[(int *)ready[i] - ctx] = true;
        }
    }
    for (int t = 0; t <= 2; t += 2) {
        ferry_sample s;
        TU_OK(ferry_take(subs[t], &s));
        TU_EQ_U64(s.sequence, ++seq[t]);
        TU_OK(ferry_release(subs[t], &s));
    }
    TU_ERR(ferry_waitset_wait(ws, 20 * TU_MS, ready, NTOPICS + 1, &count), FERRY_ETIMEDOUT);

    /* A removed member no longer wakes the waitset. */
    TU_OK(ferry_waitset_remove(ws, subs[1]));
    tu_send(&l.to_pub, 1);
    TU_OK(ferry_wait(subs[1], TU_WAIT_NS));
    TU_ERR(ferry_waitset_wait(ws, 50 * TU_MS, ready, NTOPICS + 1, &count), FERRY_ETIMEDOUT);
    ferry_sample s;
    TU_OK(ferry_take(subs[1], &s));
    TU_OK(ferry_release(subs[1], &s));

    tu_send(&l.to_pub, MSG_QUIT);
    TU_CHILD_OK(child);
    for (int i = 0; i < NTOPICS; i++) {
        if (i != 1)
            TU_OK(ferry_waitset_remove(ws, subs[i]));
        TU_OK(ferry_subscriber_destroy(subs[i]));
    }
    TU_OK(ferry_waitset_destroy(ws));
    TU_OK(ferry_node_destroy(node));
}

static void test_wait_wakes_promptly(void)
{
    pubctl l;
    /* 20 ms: so that the subscriber is asleep in ferry_wait */
    pid_t child = start_publisher(&l, 1, 20 * TU_MS);
    ferry_node *node = tu_node("prompt");
    ferry_subscriber *sub = make_sub(node, topics[0]);
    tu_send(&l.to_pub, MSG_READY);

    int64_t worst = 0;
    for (uint64_t round = 1; round <= ROUNDS; round++) {
        ferry_time asked = ferry_now();
        tu_send(&l.to_pub, 0);
        TU_OK(ferry_wait(sub, TU_WAIT_NS));
        ferry_time woke = ferry_now();
        ferry_sample s;
        TU_OK(ferry_take(sub, &s));
        TU_EQ_U64(s.sequence, round);
        TU_CMP_I64(s.publish_time.ns, >=, asked.ns + l.delay_ns);
        int64_t latency = woke.ns - s.publish_time.ns;
        TU_CMP_I64(latency, >=, 0);
        TU_CMP_I64(latency, <, 100 * TU_MS);
        if (latency > worst)
            worst = latency;
        TU_OK(ferry_release(sub, &s));
    }
    printf("    ferry_wait woke at most %.3f ms after the publish\n", (double)worst / 1e6);
    tu_send(&l.to_pub, MSG_QUIT);
    TU_CHILD_OK(child);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
}

static uint32_t doorbell(ferry_subscriber *sub)
{
    TU_CMP_U64(sub->nlive, ==, 1);
    return atomic_load(&sub->conns[sub->live[0]].ring.hdr->sub_waiting);
}

/* Publishes one sample (round) and takes it through ferry_wait, checking it. */
static void wait_for_round(ferry_subscriber *sub, pubctl *l, uint64_t round, bool busy)
{
    ferry_sample s;
    TU_ERR(ferry_take(sub, &s), FERRY_EAGAIN);
    /* No descriptor handed out: nobody can wait on it, so a take that found nothing sets no
     * doorbell (a publisher would otherwise send a wake-up datagram, a system call, for a
     * subscriber that spins or polls). */
    TU_EQ_U64(doorbell(sub), 0);
    tu_send(&l->to_pub, 0);
    TU_OK(ferry_wait(sub, TU_WAIT_NS));
    if (busy)
        TU_EQ_U64(doorbell(sub), 0); /* a polling reader never sets one */
    TU_OK(ferry_take(sub, &s));
    TU_EQ_U64(s.sequence, round);
    TU_SAMPLE_INTACT(&s, SIZE);
    TU_OK(ferry_release(sub, &s));
}

/* Doorbells follow the descriptor: a subscriber whose descriptor nobody asked for sets them only
 * to sleep in ferry_wait (and a polling one never); once ferry_subscriber_fd handed it out, the
 * notifier is set at once (so a descriptor asked for after a take that found nothing still
 * fires) and by every take that finds nothing, also after a polling ferry_wait. */
static void test_doorbells(void)
{
    for (int busy = 0; busy <= 1; busy++) {
        pubctl l;
        pid_t child = start_publisher(&l, 1, 10 * TU_MS);
        ferry_node *node = tu_node("doorbells");
        ferry_subscriber *sub = make_sub_polling(node, topics[0], busy);
        tu_send(&l.to_pub, MSG_READY);
        uint64_t round = 0;
        for (int i = 0; i < 3; i++)
            wait_for_round(sub, &l, ++round, busy);

        /* The descriptor, asked for only now, after a take found nothing. */
        ferry_sample s;
        TU_ERR(ferry_take(sub, &s), FERRY_EAGAIN);
        int fd = -1;
        TU_OK(ferry_subscriber_fd(sub, &fd));
        TU_EQ_U64(doorbell(sub), FERRY__DOORBELL_NOTIFIER);
        int ep = epoll_create1(EPOLL_CLOEXEC);
        TU_CHECK(ep >= 0);
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 7};
        TU_CHECK_MSG(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == 0, "epoll_ctl: %s", strerror(errno));
        tu_send(&l.to_pub, 0);
        ferry_err e = FERRY_EAGAIN;
        ferry_time t0 = ferry_now();
        while (e == FERRY_EAGAIN) {
            TU_CHECK_MSG(tu_since(t0) < TU_WAIT_NS, "the descriptor never fired");
            struct epoll_event got;
            if (epoll_wait(ep, &got, 1, 100) == 1)
                e = ferry_take(sub, &s);
        }
        TU_OK(e);
        TU_EQ_U64(s.sequence, ++round);
        TU_OK(ferry_release(sub, &s));
        /* With it out, a take that finds nothing sets the notifier, also after ferry_wait. */
        TU_ERR(ferry_take(sub, &s), FERRY_EAGAIN);
        TU_EQ_U64(doorbell(sub), FERRY__DOORBELL_NOTIFIER);
        tu_send(&l.to_pub, 0);
        TU_OK(ferry_wait(sub, TU_WAIT_NS));
        TU_OK(ferry_take(sub, &s));
        TU_EQ_U64(s.sequence, ++round);
        TU_OK(ferry_release(sub, &s));
        TU_ERR(ferry_take(sub, &s), FERRY_EAGAIN);
        TU_EQ_U64(doorbell(sub), FERRY__DOORBELL_NOTIFIER);

        tu_send(&l.to_pub, MSG_QUIT);
        TU_CHILD_OK(child);
        close(ep);
        TU_OK(ferry_subscriber_destroy(sub));
        TU_OK(ferry_node_destroy(node));
    }
}

/* From here on this process's futex_waitv fails with ENOSYS, as on a kernel before 5.16 (the
 * kernels of Ubuntu 22.04 and of Jetson Linux) or in a sandbox that lacks it. False where no
 * filter can be installed or the system call is unknown here. */
static bool deny_futex_waitv(void)
{
#ifdef SYS_futex_waitv
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_futex_waitv, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {(unsigned short)(sizeof f / sizeof f[0]), f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
        return false;
    errno = 0;
    return syscall(SYS_futex_waitv, NULL, 0, 0, NULL, 0) == -1 && errno == ENOSYS;
#else
    return false;
#endif
}

/* How the subscriber slept on each connection the last time it did. A notifier doorbell reads
 * 0 again once its wake-up datagram was read. */
static void check_armed(ferry_subscriber *sub, uint32_t how)
{
    TU_CMP_U64(sub->nlive, >=, 1);
    for (uint32_t k = 0; k < sub->nlive; k++) {
        uint32_t armed = sub->conns[sub->live[k]].armed;
        if (how == FERRY__DOORBELL_NOTIFIER && armed == 0)
            continue;
        TU_EQ_U64(armed, how);
    }
}

/* One request to l's publisher, taken through a sleeping ferry_wait (the publisher waits 10 ms
 * before it publishes, far beyond any spin). */
static void sleep_for_one(ferry_subscriber *sub, pubctl *l, uint64_t seq)
{
    ferry_sample s;
    TU_ERR(ferry_take(sub, &s), FERRY_EAGAIN);
    tu_send(&l->to_pub, 0);
    TU_OK(ferry_wait(sub, TU_WAIT_NS));
    TU_OK(ferry_take(sub, &s));
    TU_EQ_U64(s.sequence, seq);
    TU_SAMPLE_INTACT(&s, SIZE);
    TU_OK(ferry_release(sub, &s));
}

/* Takes (finding nothing) until the subscriber has n active connections. */
static void until_active(ferry_subscriber *sub, uint32_t n)
{
    ferry_time t0 = ferry_now();
    while (sub->nactive != n) {
        TU_CHECK_MSG(tu_since(t0) < TU_WAIT_NS, "%u active connections, not %u", sub->nactive, n);
        ferry_sample s;
        TU_ERR(ferry_take(sub, &s), FERRY_EAGAIN);
        tu_sleep_ns(TU_MS);
    }
}

typedef struct nowaitv {
    pubctl a, b;     /* publisher a is up from the start, b once asked for on start_b */
    tu_pipe start_b; /* the subscriber asks the test's process to fork b (a child of a process
                        that maps ferry segments would inherit its mappings) */
} nowaitv;

/* The subscriber, in a process of its own without futex_waitv. */
static int no_waitv_main(void *arg)
{
    nowaitv *t = arg;
    pubctl *a = &t->a, *b = &t->b;
    bool denied = deny_futex_waitv();
    if (!denied)
        printf("    no seccomp filter here: both cases run with futex_waitv\n");
    ferry_node *node = tu_node("nowaitv");
    ferry_subscriber *sub = make_sub(node, topics[0]);
    tu_send(&a->to_pub, MSG_READY);
    /* One publisher: FUTEX_WAIT, which every kernel has; no fallback. */
    for (uint64_t i = 1; i <= 3; i++) {
        sleep_for_one(sub, a, i);
        check_armed(sub, FERRY__DOORBELL_FUTEX);
    }
    TU_CHECK(!sub->no_futexv);
    /* Two: the vectored wait fails, and the subscriber sleeps on its notifier instead. */
    tu_send(&t->start_b, 1);
    TU_OK(ferry_subscriber_wait_publishers(sub, 2, TU_WAIT_NS));
    tu_send(&b->to_pub, MSG_READY);
    until_active(sub, 2);
    for (uint64_t i = 1; i <= 3; i++) {
        sleep_for_one(sub, b, i);
        check_armed(sub, denied ? FERRY__DOORBELL_NOTIFIER : FERRY__DOORBELL_FUTEX);
        sleep_for_one(sub, a, 3 + i);
        check_armed(sub, denied ? FERRY__DOORBELL_NOTIFIER : FERRY__DOORBELL_FUTEX);
    }
    TU_CHECK(sub->no_futexv == denied);
    tu_send(&b->to_pub, MSG_QUIT);
    /* Back to one: FUTEX_WAIT again. */
    until_active(sub, 1);
    sleep_for_one(sub, a, 7);
    check_armed(sub, FERRY__DOORBELL_FUTEX);
    tu_send(&a->to_pub, MSG_QUIT);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    return 0;
}

/* Where the kernel has no futex_waitv, a subscriber of one publisher still sleeps on its futex
 * (FUTEX_WAIT), and one of two or more falls back to the notifier, and wakes all the same. */
static void test_without_futex_waitv(void)
{
    nowaitv t;
    pid_t pa = start_publisher(&t.a, 1, 10 * TU_MS);
    t.b.to_pub = tu_pipe_make();
    t.b.ntopics = 1;
    t.b.delay_ns = 10 * TU_MS;
    t.start_b = tu_pipe_make();
    pid_t sub = tu_fork(no_waitv_main, &t, 60);
    TU_EQ_U64(tu_recv(&t.start_b, TU_WAIT_MS), 1);
    pid_t pb = tu_fork(publisher_main, &t.b, 60);
    TU_CHILD_OK(sub);
    TU_CHILD_OK(pb);
    TU_CHILD_OK(pa);
}

int main(void)
{
    TU_RUN(test_epoll);
    TU_RUN(test_doorbells);
    TU_RUN(test_waitset);
    TU_RUN(test_wait_wakes_promptly);
    TU_RUN(test_without_futex_waitv);
    TU_RUN(test_fd_anticipation);
    return 0;
}
