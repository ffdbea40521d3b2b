/*
 * Waiting: the spin budget before a sleep is honoured (a wait with nothing to come spins at most
 * its budget, then sleeps; FERRY_SPIN_OFF never spins; the budget shrinks when spinning finds
 * nothing), a busy-polling subscriber polls instead of sleeping and still gets every sample, the
 * options' ranges, and lossless floods: with subscribers that block the publisher nothing is
 * lost or reordered, spinning, sleeping, or yielding on one CPU; and where the two sides are
 * pinned decides whether they spin or yield (each on a CPU of its own: spin; on one: yield).
 *
 * CPU time is that of the calling thread (CLOCK_THREAD_CPUTIME_ID): a sleep costs none of it.
 */
#include "testutil.h"

#include "core/spin.h"

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
    int64_t pause_ns;  /* the subscriber's work after each take */
    int64_t period_ns; /* the publisher's pace; 0: as fast as it can */
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
    if (f->period_ns > 0) {
        printf("  %llu samples every %.0f ms: %llu anticipated, %llu caught spinning\n",
               (unsigned long long)f->count, f->period_ns / 1e6,
               (unsigned long long)st.spin.paced_spins, (unsigned long long)st.spin.paced_found);
        TU_CMP_U64(st.spin.paced_found, <=, st.spin.paced_spins);
        TU_CMP_U64(st.spin.paced_spins, <, f->count);
    }
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
    return 0;
}

/* Publishes count messages, one every period_ns (0: as fast as it can), to a lossless
 * subscriber in another process; returns how long the publications took. */
static int64_t flood_run(uint64_t count, int64_t spin_ns, bool busy_poll, int64_t pause_ns,
                         int64_t period_ns)
{
    flood f = {count, spin_ns, busy_poll, pause_ns, period_ns, tu_pipe_make()};
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
    int64_t t0 = ferry_now().ns, t = t0;
    for (uint64_t v = 1; v <= count; v++) {
        if (period_ns > 0) {
            t += period_ns;
            int64_t left = t - ferry_now().ns;
            if (left > 0)
                tu_sleep_ns(left);
        }
        TU_OK(ferry_publish_copy(pub, &v, sizeof v));
    }
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
    flood_run(200000 / TU_SLOWDOWN, 0, false, 0, 0);
}

static void test_lossless_flood_sleeping(void)
{
    flood_run(20000 / TU_SLOWDOWN, FERRY_SPIN_OFF, false, 0, 0);
}

static void test_lossless_flood_busy_poll(void)
{
    flood_run(100000 / TU_SLOWDOWN, 0, true, 0, 0);
}

enum { SLOW_N = 40 };

/* A publisher blocked by a lossless subscriber that takes one message now and then, never
 * draining half its queue (the publisher's low-water mark) before it sleeps, still publishes at
 * that subscriber's pace: it looks again every millisecond, and a wake-up that does not come
 * never holds it until its block timeout. */
static void test_blocked_by_slow_taker(void)
{
    int64_t took = flood_run(SLOW_N, FERRY_SPIN_OFF, false, 2 * MS, 0);
    printf("  %d blocking publications to a subscriber taking one per 2 ms: %.0f ms\n", SLOW_N,
           (double)took / 1e6);
    /* About (SLOW_N - 8) x 2 ms quiet; one block timeout alone would be 10 s. */
    TU_CMP_I64(took, <, 3000 * MS);
}

/* On one CPU the default budget yields once instead of spinning: both sides of a flood pinned to
 * one CPU lose nothing, and a wait with nothing to come yields, never spins (what it decided is
 * in its stats; the CPU it took is printed, not asserted: a busy machine makes any wait dearer). */
static void test_one_cpu_yields(void)
{
    cpu_set_t old, one;
    TU_CHECK(sched_getaffinity(0, sizeof old, &old) == 0);
    CPU_ZERO(&one);
    int cpu = sched_getcpu();
    CPU_SET(cpu >= 0 ? cpu : 0, &one);
    TU_CHECK(sched_setaffinity(0, sizeof one, &one) == 0);
    int64_t t0 = ferry_now().ns;
    flood_run(200000 / TU_SLOWDOWN, 0, false, 0, 0);
    printf("  %d messages on one CPU in %.0f ms\n", 200000 / TU_SLOWDOWN,
           (double)(ferry_now().ns - t0) / 1e6);
    ferry_node *node = tu_node("one_cpu");
    ferry_subscriber *sub = subscriber(node, "/spin/one", 0, false);
    int64_t spent = 0;
    enum { WAITS = 40 };
    for (int i = 0; i < WAITS; i++)
        spent += wait_cpu(sub, 5 * MS);
    printf("  %d empty 5 ms waits on one CPU: %.0f us of CPU each\n", WAITS,
           (double)spent / WAITS / 1e3);
    ferry_subscriber_stats st;
    TU_OK(ferry_subscriber_stats_get(sub, &st));
    TU_EQ_U64(st.spin.mode, FERRY_SPIN_MODE_YIELD);
    TU_EQ_U64(st.spin.budget_ns, 0);
    TU_EQ_U64(st.spin.cpu, (uint64_t)(cpu >= 0 ? cpu : 0));
    TU_EQ_U64(st.spin.spins_found, 0);
    TU_EQ_U64(st.spin.paced_spins, 0);
    /* Only waits that spun through their timeouts instead of sleeping come near this. */
    TU_CMP_I64(spent, <, WAITS * 5 * MS / 2);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
    TU_CHECK(sched_setaffinity(0, sizeof old, &old) == 0);
}

/* Where the two sides may run decides how they spin (spin.h): each pinned to a CPU of its own,
 * both spin; both pinned to one CPU, both yield; each knows the other's CPU within a few looks. */
typedef struct placement {
    int pub_cpu, sub_cpu;
    tu_pipe done;
} placement;

static bool never_ready(void *arg)
{
    return *(int *)arg != 0;
}

static void pin(int cpu)
{
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    TU_CHECK(sched_setaffinity(0, sizeof one, &one) == 0);
}

/* True when the endpoint's view is the one expected for its CPU and its one peer's. */
static bool placed(const ferry_spin_stats *sp, int cpu, int peer_cpu)
{
    uint32_t want = cpu == peer_cpu ? FERRY_SPIN_MODE_YIELD : FERRY_SPIN_MODE_SPIN;
    return sp->mode == want && sp->cpu == cpu && sp->peers_same_cpu == (cpu == peer_cpu) &&
           sp->peers_elsewhere == (cpu != peer_cpu) &&
           sp->budget_ns == (cpu == peer_cpu ? 0 : FERRY_SPIN_DEFAULT_NS);
}

static int placement_subscriber(void *arg)
{
    placement *pl = arg;
    pin(pl->sub_cpu);
    ferry_node *node = tu_node("placement_sub");
    ferry_subscriber *sub = subscriber(node, "/spin/placement", 0, false);
    TU_OK(ferry_subscriber_wait_publishers(sub, 1, TU_WAIT_NS));
    ferry_subscriber_stats st;
    int64_t end = ferry_now().ns + TU_WAIT_NS;
    do {
        ferry_sample s;
        while (ferry_take(sub, &s) == FERRY_OK)
            TU_OK(ferry_release(sub, &s));
        ferry_wait(sub, 10 * MS);
        TU_OK(ferry_subscriber_stats_get(sub, &st));
    } while (!placed(&st.spin, pl->sub_cpu, pl->pub_cpu) && ferry_now().ns < end);
    printf("  subscriber on CPU %d: mode %u cpu %d peers %u there, %u elsewhere\n", pl->sub_cpu,
           st.spin.mode, st.spin.cpu, st.spin.peers_same_cpu, st.spin.peers_elsewhere);
    TU_CHECK(placed(&st.spin, pl->sub_cpu, pl->pub_cpu));
    tu_send(&pl->done, 1);
    /* Taking on until the publisher, having seen us too, goes. */
    end = ferry_now().ns + 6 * TU_WAIT_NS;
    while (st.publishers > 0 && ferry_now().ns < end) {
        ferry_sample s;
        while (ferry_take(sub, &s) == FERRY_OK)
            TU_OK(ferry_release(sub, &s));
        ferry_wait(sub, 10 * MS);
        TU_OK(ferry_subscriber_stats_get(sub, &st));
    }
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
    return 0;
}

static void placement_run(int pub_cpu, int sub_cpu)
{
    cpu_set_t old;
    TU_CHECK(sched_getaffinity(0, sizeof old, &old) == 0);
    placement pl = {pub_cpu, sub_cpu, tu_pipe_make()};
    pid_t pid = tu_fork(placement_subscriber, &pl, 60);
    pin(pub_cpu);
    ferry_node *node = tu_node("placement_pub");
    ferry_publisher *pub;
    TU_OK(ferry_publisher_create(&pub, node, "/spin/placement", TYPE, 1, NULL));
    TU_OK(ferry_publisher_wait_subscribers(pub, 1, TU_WAIT_NS));
    ferry_publisher_stats st;
    int64_t end = ferry_now().ns + TU_WAIT_NS;
    uint64_t v = 0;
    do {
        v++;
        TU_OK(ferry_publish_copy(pub, &v, sizeof v)); /* housekeeping comes with the loans */
        tu_sleep_ns(5 * MS);
        TU_OK(ferry_publisher_stats_get(pub, &st));
    } while (!placed(&st.spin, pub_cpu, sub_cpu) && ferry_now().ns < end);
    printf("  publisher on CPU %d: mode %u cpu %d peers %u there, %u elsewhere\n", pub_cpu,
           st.spin.mode, st.spin.cpu, st.spin.peers_same_cpu, st.spin.peers_elsewhere);
    TU_CHECK(placed(&st.spin, pub_cpu, sub_cpu));
    TU_EQ_U64(tu_recv(&pl.done, 2 * TU_WAIT_MS), 1);
    TU_OK(ferry_publisher_destroy(pub));
    TU_CHILD_OK(pid);
    TU_OK(ferry_node_destroy(node));
    tu_pipe_close(&pl.done);
    TU_CHECK(sched_setaffinity(0, sizeof old, &old) == 0);
}

static void test_placement(void)
{
    cpu_set_t set;
    TU_CHECK(sched_getaffinity(0, sizeof set, &set) == 0);
    int cpus[2], n = 0;
    for (int i = 0; i < CPU_SETSIZE && n < 2; i++)
        if (CPU_ISSET(i, &set))
            cpus[n++] = i;
    placement_run(cpus[0], cpus[0]);
    if (n < 2) {
        printf("  one CPU: the pinned-apart case cannot be made here\n");
        return;
    }
    placement_run(cpus[0], cpus[1]);
    /* Unpinned (several CPUs each): spinning, whatever the peer says. */
    ferry_node *node = tu_node("unpinned");
    ferry_subscriber *sub = subscriber(node, "/spin/unpinned", 0, false);
    ferry_subscriber_stats st;
    TU_OK(ferry_subscriber_stats_get(sub, &st));
    TU_EQ_U64(st.spin.mode, FERRY_SPIN_MODE_SPIN);
    TU_CMP_I64(st.spin.cpu, ==, -1);
    TU_CMP_I64(st.spin.budget_ns, ==, FERRY_SPIN_DEFAULT_NS);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
}

/* A peer's word in the connection segment is its own to write: any value only counts it as on
 * this CPU, elsewhere, or silent, and a peer that says "elsewhere" while it shares the CPU costs
 * at most a budget that runs down to nothing. */
static void test_hostile_cpu_words(void)
{
    ferry__spin s;
    ferry__spin_init(&s, 0);
    s.cpu = 3; /* as if pinned to CPU 3 */
    s.elsewhere = s.same = 0;
    uint32_t words[] = {0, 4, 1, 0x7fffffffu, 0x80000000u, FERRY__SPIN_SEVERAL, 5, 4};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        ferry__spin_peer(&s, words[i]);
    TU_EQ_U64(s.same, 2);      /* 4 twice: CPU 3 */
    TU_EQ_U64(s.elsewhere, 5); /* 0 is a peer that has not said */
    ferry__spin_decide(&s);
    TU_CMP_I64(s.max, ==, FERRY_SPIN_DEFAULT_NS);
    /* Only silent or same-CPU peers: yield. */
    s.elsewhere = 0;
    ferry__spin_decide(&s);
    TU_CMP_I64(s.max, ==, 0);
    TU_CHECK(s.yield);
    /* A lie ("elsewhere") with nothing ever coming: the budget halves at each spin to nothing,
     * then one full spin per 32 waits. */
    s.elsewhere = 1;
    ferry__spin_decide(&s);
    int never = 0;
    int64_t before = ferry_now().ns;
    for (int i = 0; i < 64; i++)
        TU_CHECK(!ferry__spin_until(&s, never_ready, &never, INT64_MAX));
    int64_t spent = ferry_now().ns - before;
    TU_CMP_I64(s.cur, <, FERRY_SPIN_DEFAULT_NS);
    printf("  64 waits on a lying peer spun %.0f us in all\n", spent / 1e3);
}

/* Paced streams (spin.h): the anticipation's decisions on a made-up clock. */
static void test_pace_rules(void)
{
    const int64_t period = 33333333, t0 = 5 * TU_SEC;
    ferry__pace p = {0};
    int64_t t = t0;
    /* A first sample, one interval that sets the period and FERRY__PACE_STEADY steady ones, then
     * the next sample is anticipated: awake 30 us before it is due (no timed sleep has been late
     * yet). */
    for (int i = 0; i <= FERRY__PACE_STEADY + 1; i++, t += period) {
        TU_CHECK(ferry__pace_wake_at(&p, t) == 0);
        ferry__pace_arrived(&p, t);
    }
    int64_t last = t - period, due = last + period;
    int64_t at = ferry__pace_wake_at(&p, last + 1000);
    TU_CMP_I64(at, ==, due - 30000);
    /* The timed sleep woke 100 us late: the spin lasts until period / 64 (at least 50 us, here
     * FERRY__PACE_SPIN_MAX_NS at most) past the time due, and the next lead grows. */
    int64_t until = ferry__pace_spin_until(&p, at, at + 100000);
    TU_CMP_I64(until, ==, due + FERRY__PACE_SPIN_MAX_NS);
    ferry__pace_spent(&p, at + 100000, due, true);
    ferry__pace_arrived(&p, due);
    TU_CMP_I64(ferry__pace_wake_at(&p, due + 1000), <, due + period - 30000);
    TU_EQ_U64(p.spins, 1);
    TU_EQ_U64(p.found, 1);
    /* Already due, or not due within a period: not anticipated. */
    TU_CHECK(ferry__pace_wake_at(&p, due + period) == 0);
    /* A miss: learnt again before the next anticipation. */
    ferry__pace_spent(&p, due + period - 50000, due + period + 300000, false);
    TU_CHECK(ferry__pace_wake_at(&p, due + 1000) == 0);
    /* Irregular intervals never become steady. */
    ferry__pace q = {0};
    t = t0;
    for (int i = 0; i < 40; i++) {
        ferry__pace_arrived(&q, t);
        TU_CHECK(ferry__pace_wake_at(&q, t + 1000) == 0);
        t += i % 2 ? period : period / 3;
    }
    /* Too fast for it (the adaptive budget's case), or too slow to be a stream. */
    ferry__pace f = {0};
    for (t = t0; t < t0 + 20 * 100000; t += 100000)
        ferry__pace_arrived(&f, t);
    TU_CHECK(ferry__pace_wake_at(&f, t - 100000 + 1000) == 0);
    /* At most 1/32 of a second's wall time spent spinning: the 32nd ms of spin ends it until the
     * next second. */
    ferry__pace b = p;
    b.steady = FERRY__PACE_STEADY;
    b.last = 20 * TU_SEC;
    b.second = b.last;
    b.spent = 0;
    TU_CHECK(ferry__pace_wake_at(&b, b.last + 1000) != 0);
    b.spent = TU_SEC / 32;
    TU_CHECK(ferry__pace_wake_at(&b, b.last + 1000) == 0);
    TU_CHECK(ferry__pace_wake_at(&b, b.last + TU_SEC + 1000) == 0); /* not due within a period */
    b.last += TU_SEC;
    TU_CHECK(ferry__pace_wake_at(&b, b.last + 1000) != 0); /* a new second */
}

/* A steady 100 Hz stream to a subscriber whose waits may spin (several CPUs): with anticipation
 * in its waits, every sample is still received, in order. How many were anticipated and caught
 * depends on how steady a loaded machine keeps the publisher's timer, and is printed, not
 * asserted (test_pace_rules checks the decisions; bench/README.md the effect). */
static void test_paced_stream(void)
{
    flood_run(60, 0, false, 0, 10 * MS);
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
    TU_RUN(test_placement);
    TU_RUN(test_hostile_cpu_words);
    TU_RUN(test_pace_rules);
    TU_RUN(test_paced_stream);
    TU_RUN(test_blocked_by_slow_taker);
    return 0;
}
