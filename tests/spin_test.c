/*
 * Waiting: the spin budget before a sleep is honoured (a wait with nothing to come spins at most
 * its budget, then sleeps; FERRY_SPIN_OFF never spins; the budget shrinks when spinning finds
 * nothing), a busy-polling subscriber polls instead of sleeping and still gets every sample, the
 * options' ranges, and lossless floods: with subscribers that block the publisher nothing is
 * lost or reordered, spinning, sleeping, or yielding on one CPU.
 *
 * CPU time is that of the calling thread (CLOCK_THREAD_CPUTIME_ID): a sleep costs none of it.
 */
#include "testutil.h"

#include <sched.h>
#include <time.h>

#define TYPE "test/spin"
#define MS TU_MS

static int64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * TU_SEC + ts.tv_nsec;
}

static ferry_subscriber *subscriber(ferry_node *node, const char *topic, int64_t spin_ns,
                                    bool busy_poll)
{
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.spin_ns = spin_ns;
    so.busy_poll = busy_poll;
    ferry_subscriber *sub;
    TU_OK(ferry_subscriber_create(&sub, node, topic, TYPE, 1, &so));
    return sub;
}

/* CPU time one ferry_wait of timeout_ns took, with nothing published. */
static int64_t wait_cpu(ferry_subscriber *sub, int64_t timeout_ns)
{
    int64_t t0 = thread_cpu_ns();
    TU_ERR(ferry_wait(sub, timeout_ns), FERRY_ETIMEDOUT);
    return thread_cpu_ns() - t0;
}

static void test_options_range(void)
{
    ferry_node *node = tu_node("range");
    ferry_subscriber_options so;
    ferry_subscriber *sub;
    int64_t bad[] = {-2, INT64_MIN, 10 * MS + 1, INT64_MAX};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ferry_subscriber_options_init(&so);
        so.spin_ns = bad[i];
        TU_ERR(ferry_subscriber_create(&sub, node, "/spin/range", TYPE, 1, &so), FERRY_EINVAL);
        ferry_publisher_options po;
        ferry_publisher_options_init(&po);
        po.spin_ns = bad[i];
        ferry_publisher *pub;
        TU_ERR(ferry_publisher_create(&pub, node, "/spin/range", TYPE, 1, &po), FERRY_EINVAL);
    }
    int64_t good[] = {FERRY_SPIN_OFF, 0, 1, 10 * MS};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        sub = subscriber(node, "/spin/range", good[i], false);
        TU_OK(ferry_subscriber_destroy(sub));
    }
    TU_OK(ferry_node_destroy(node));
}

/* A wait with nothing to come spins for its budget, not longer, then sleeps. */
static void test_budget_honoured(void)
{
    ferry_node *node = tu_node("budget");
    ferry_subscriber *sub = subscriber(node, "/spin/budget", 5 * MS, false);
    int64_t cpu = wait_cpu(sub, 300 * MS);
    /* The lower bound shows it spun (a loaded machine may take the CPU away for part of it). */
    TU_CMP_I64(cpu, >=, 1 * MS);
    TU_CMP_I64(cpu, <=, 5 * MS + 25 * MS * TU_SLOWDOWN);
    TU_OK(ferry_subscriber_destroy(sub));

    sub = subscriber(node, "/spin/budget", FERRY_SPIN_OFF, false);
    cpu = wait_cpu(sub, 300 * MS);
    TU_CMP_I64(cpu, <=, 3 * MS * TU_SLOWDOWN);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
}

/* Spins that find nothing halve the budget: eight empty waits cost about twice the budget, not
 * eight times it. */
static void test_budget_adapts(void)
{
    ferry_node *node = tu_node("adapt");
    ferry_subscriber *sub = subscriber(node, "/spin/adapt", 8 * MS, false);
    int64_t cpu = 0;
    for (int i = 0; i < 8; i++)
        cpu += wait_cpu(sub, 20 * MS);
    TU_CMP_I64(cpu, >=, 2 * MS);
    TU_CMP_I64(cpu, <=, 16 * MS + 20 * MS * TU_SLOWDOWN);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
}

/* A busy-polling subscriber uses its CPU while it waits. */
static void test_busy_poll_spins(void)
{
    ferry_node *node = tu_node("busy");
    ferry_subscriber *sub = subscriber(node, "/spin/busy", 0, true);
    int64_t t0 = ferry_now().ns;
    int64_t cpu = wait_cpu(sub, 200 * MS);
    TU_CMP_I64(ferry_now().ns - t0, >=, 200 * MS);
    TU_CMP_I64(cpu, >=, 40 * MS);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
}

/* A publisher waiting for room for a subscriber that never takes spins at most its budget before
 * it sleeps, and gives up at block_timeout_ns as before. */
typedef struct stuck {
    tu_pipe ready, done;
} stuck;

static int stuck_subscriber(void *arg)
{
    stuck *s = arg;
    ferry_node *node = tu_node("stuck");
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = 1;
    so.overflow = FERRY_OVERFLOW_BLOCK;
    ferry_subscriber *sub;
    TU_OK(ferry_subscriber_create(&sub, node, "/spin/stuck", TYPE, 1, &so));
    TU_OK(ferry_subscriber_wait_publishers(sub, 1, TU_WAIT_NS));
    tu_send(&s->ready, 1);
    tu_recv(&s->done, TU_WAIT_MS * 3);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
    return 0;
}

static void test_publisher_budget(void)
{
    stuck s = {tu_pipe_make(), tu_pipe_make()};
    pid_t pid = tu_fork(stuck_subscriber, &s, 60);
    ferry_node *node = tu_node("pub");
    ferry_publisher_options po;
    ferry_publisher_options_init(&po);
    po.admit_blocking = true;
    po.spin_ns = 5 * MS;
    po.block_timeout_ns = 200 * MS;
    po.max_sample_size = 64;
    ferry_publisher *pub;
    TU_OK(ferry_publisher_create(&pub, node, "/spin/stuck", TYPE, 1, &po));
    TU_OK(ferry_publisher_wait_subscribers(pub, 1, TU_WAIT_NS));
    TU_EQ_U64(tu_recv(&s.ready, TU_WAIT_MS), 1);
    TU_OK(ferry_publish_copy(pub, "a", 1)); /* fills the subscriber's queue of one */
    int64_t t0 = ferry_now().ns, c0 = thread_cpu_ns();
    TU_ERR(ferry_publish_copy(pub, "b", 1), FERRY_ETIMEDOUT);
    int64_t cpu = thread_cpu_ns() - c0;
    TU_CMP_I64(ferry_now().ns - t0, >=, 200 * MS);
    TU_CMP_I64(cpu, >=, 1 * MS);
    TU_CMP_I64(cpu, <=, 5 * MS + 25 * MS * TU_SLOWDOWN);
    tu_send(&s.done, 1);
    TU_CHILD_OK(pid);
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
    tu_pipe_close(&s.ready);
    tu_pipe_close(&s.done);
}

/* A lossless flood: the subscriber blocks the publisher (depth 8), so every message arrives,
 * once and in order, however the two sides wait. */
typedef struct flood {
    uint64_t count;
    int64_t spin_ns;
    bool busy_poll;
    int64_t pause_ns; /* the subscriber's work after each take */
    tu_pipe ready;
} flood;

static int flood_subscriber(void *arg)
{
    flood *f = arg;
    ferry_node *node = tu_node("flood_sub");
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = 8;
    so.overflow = FERRY_OVERFLOW_BLOCK;
    so.spin_ns = f->spin_ns;
    so.busy_poll = f->busy_poll;
    ferry_subscriber *sub;
    TU_OK(ferry_subscriber_create(&sub, node, "/spin/flood", TYPE, 1, &so));
    TU_OK(ferry_subscriber_wait_publishers(sub, 1, TU_WAIT_NS));
    tu_send(&f->ready, 1);
    uint64_t next = 1;
    while (next <= f->count) {
        ferry_sample s;
        ferry_err err = ferry_take(sub, &s);
        if (err == FERRY_EAGAIN) {
            TU_OK(ferry_wait(sub, TU_WAIT_NS));
            continue;
        }
        TU_OK(err);
        uint64_t v;
        TU_EQ_U64(s.size, sizeof v);
        memcpy(&v, s.data, sizeof v);
        TU_EQ_U64(v, next);
        TU_EQ_U64(s.sequence, next);
        TU_OK(ferry_release(sub, &s));
        next++;
        if (f->pause_ns > 0)
            tu_sleep_ns(f->pause_ns);
    }
    ferry_subscriber_stats st;
    TU_OK(ferry_subscriber_stats_get(sub, &st));
    TU_EQ_U64(st.dropped, 0);
    TU_EQ_U64(st.received, f->count);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
    return 0;
}

/* Publishes count messages to a lossless subscriber in another process; returns how long the
 * publications took. */
static int64_t flood_run(uint64_t count, int64_t spin_ns, bool busy_poll, int64_t pause_ns)
{
    flood f = {count, spin_ns, busy_poll, pause_ns, tu_pipe_make()};
    pid_t pid = tu_fork(flood_subscriber, &f, 120);
    ferry_node *node = tu_node("flood_pub");
    ferry_publisher_options po;
    ferry_publisher_options_init(&po);
    po.admit_blocking = true;
    po.spin_ns = spin_ns;
    po.block_timeout_ns = TU_WAIT_NS;
    po.on_pool_exhausted = FERRY_POOL_BLOCK;
    po.max_sample_size = 64;
    po.pool_bytes = (size_t)1 << 20;
    po.max_chunks = 32;
    ferry_publisher *pub;
    TU_OK(ferry_publisher_create(&pub, node, "/spin/flood", TYPE, 1, &po));
    TU_OK(ferry_publisher_wait_subscribers(pub, 1, TU_WAIT_NS));
    TU_EQ_U64(tu_recv(&f.ready, TU_WAIT_MS), 1);
    int64_t t0 = ferry_now().ns;
    for (uint64_t v = 1; v <= count; v++)
        TU_OK(ferry_publish_copy(pub, &v, sizeof v));
    int64_t took = ferry_now().ns - t0;
    TU_CHILD_OK(pid);
    ferry_publisher_stats st;
    TU_OK(ferry_publisher_stats_get(pub, &st));
    TU_EQ_U64(st.published, count);
    TU_EQ_U64(st.dropped, 0);
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
    tu_pipe_close(&f.ready);
    return took;
}

static void test_lossless_flood_spinning(void)
{
    flood_run(200000 / TU_SLOWDOWN, 0, false, 0);
}

static void test_lossless_flood_sleeping(void)
{
    flood_run(20000 / TU_SLOWDOWN, FERRY_SPIN_OFF, false, 0);
}

static void test_lossless_flood_busy_poll(void)
{
    flood_run(100000 / TU_SLOWDOWN, 0, true, 0);
}

enum { SLOW_N = 40 };

/* A publisher blocked by a lossless subscriber that takes one message now and then, never
 * draining half its queue (the publisher's low-water mark) before it sleeps, still publishes at
 * that subscriber's pace: it looks again every millisecond, and a wake-up that does not come
 * never holds it until its block timeout. */
static void test_blocked_by_slow_taker(void)
{
    int64_t took = flood_run(SLOW_N, FERRY_SPIN_OFF, false, 2 * MS);
    printf("  %d blocking publications to a subscriber taking one per 2 ms: %.0f ms\n", SLOW_N,
           (double)took / 1e6);
    /* About (SLOW_N - 8) x 2 ms; one block timeout alone would be 10 s. */
    TU_CMP_I64(took, <=, 300 * MS * TU_SLOWDOWN);
}

/* On one CPU the default budget yields once instead of spinning: both sides of a flood pinned to
 * one CPU lose nothing, and a wait with nothing to come costs a yield, not a spin. */
static void test_one_cpu_yields(void)
{
    cpu_set_t old, one;
    TU_CHECK(sched_getaffinity(0, sizeof old, &old) == 0);
    CPU_ZERO(&one);
    int cpu = sched_getcpu();
    CPU_SET(cpu >= 0 ? cpu : 0, &one);
    TU_CHECK(sched_setaffinity(0, sizeof one, &one) == 0);
    int64_t t0 = ferry_now().ns;
    flood_run(200000 / TU_SLOWDOWN, 0, false, 0);
    printf("  %d messages on one CPU in %.0f ms\n", 200000 / TU_SLOWDOWN,
           (double)(ferry_now().ns - t0) / 1e6);
    ferry_node *node = tu_node("one_cpu");
    ferry_subscriber *sub = subscriber(node, "/spin/one", 0, false);
    int64_t spent = 0;
    for (int i = 0; i < 40; i++)
        spent += wait_cpu(sub, 5 * MS);
    TU_CMP_I64(spent, <=, 3 * MS * TU_SLOWDOWN);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
    TU_CHECK(sched_setaffinity(0, sizeof old, &old) == 0);
}

int main(void)
{
    TU_RUN(test_options_range);
    TU_RUN(test_budget_honoured);
    TU_RUN(test_budget_adapts);
    TU_RUN(test_busy_poll_spins);
    TU_RUN(test_publisher_budget);
    TU_RUN(test_lossless_flood_spinning);
    TU_RUN(test_lossless_flood_sleeping);
    TU_RUN(test_lossless_flood_busy_poll);
    TU_RUN(test_one_cpu_yields);
    TU_RUN(test_blocked_by_slow_taker);
    return 0;
}
