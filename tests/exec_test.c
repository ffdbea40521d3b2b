/*
 * Tests of the executor over real subscribers fed by a forked publisher process: dispatch in the
 * spinning thread (counts, order, fairness of batches), a worker pool with an exclusive and a
 * reentrant group, timers, stop from another thread and from a signal handler, drain on return
 * and kept samples, removing subscribers while their callbacks run and from callbacks, argument
 * errors, and no heap allocation per sample in steady state.
 *
 * Timings are loose on purpose: the machine may be a loaded 2-core VM.
 */
#include "testutil.h"

#include <ferry/exec.h>

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/time.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define EXEC_NO_MALLOC_HOOK 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) ||                         \
    __has_feature(memory_sanitizer)
#define EXEC_NO_MALLOC_HOOK 1
#endif
#endif

#define TYPE "exec_test/Msg"
#define MS TU_MS
#define MAX_TOPICS 3

typedef struct msg {
    uint32_t topic;
    uint32_t pad;
    uint64_t seq;
} msg;

static const char *const topics[MAX_TOPICS] = {"/exec/a", "/exec/b", "/exec/c"};
static pthread_t main_thread;

/* ---- the publisher process ------------------------------------------------------------------ */

typedef struct pub_plan {
    uint32_t ntopics;
    uint32_t prefill;  /* per topic, published before telling the parent "ready" */
    uint32_t count;    /* per topic after "go"; 0: publish until "done" */
    int64_t period_ns; /* between rounds after "go" */
    tu_pipe ready, go, done;
} pub_plan;

static void publish_round(ferry_publisher **pubs, uint32_t n, uint64_t seq, bool may_time_out)
{
    for (uint32_t i = 0; i < n; i++) {
        msg m = {.topic = i, .seq = seq};
        ferry_err err = ferry_publish_copy(pubs[i], &m, sizeof m);
        if (!(may_time_out && err == FERRY_ETIMEDOUT))
            TU_OK(err);
    }
}

static int publisher_main(void *arg)
{
    pub_plan *p = arg;
    ferry_node *node = tu_node("pub");
    ferry_publisher_options po;
    ferry_publisher_options_init(&po);
    po.admit_blocking = true; /* its subscribers ask to block it */
    po.block_timeout_ns = TU_WAIT_NS;
    ferry_publisher *pubs[MAX_TOPICS] = {NULL};
    for (uint32_t i = 0; i < p->ntopics; i++)
        TU_OK(ferry_publisher_create(&pubs[i], node, topics[i], TYPE, ferry_hash(TYPE), &po));
    for (uint32_t i = 0; i < p->ntopics; i++)
        TU_OK(ferry_publisher_wait_subscribers(pubs[i], 1, TU_WAIT_NS));
    uint64_t seq = 0;
    for (uint32_t k = 0; k < p->prefill; k++)
        publish_round(pubs, p->ntopics, ++seq, false);
    tu_send(&p->ready, seq);
    tu_serve_until(pubs, p->ntopics, &p->go, TU_WAIT_MS);
    if (p->count > 0) {
        for (uint32_t k = 0; k < p->count; k++) {
            publish_round(pubs, p->ntopics, ++seq, false);
            if (p->period_ns)
                for (uint32_t i = 0; i < p->ntopics; i++)
                    TU_OK(ferry_publisher_poll(pubs[i], p->period_ns / p->ntopics));
        }
    } else {
        while (!tu_readable(&p->done)) {
            publish_round(pubs, p->ntopics, ++seq, true);
            for (uint32_t i = 0; i < p->ntopics; i++)
                TU_OK(ferry_publisher_poll(pubs[i], p->period_ns / p->ntopics));
        }
    }
    tu_serve_until(pubs, p->ntopics, &p->done, 3 * TU_WAIT_MS);
    for (uint32_t i = 0; i < p->ntopics; i++)
        TU_OK(ferry_publisher_destroy(pubs[i]));
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    return 0;
}

/* A publisher process and this process's subscribers of its topics. Forked before any thread
 * of this process exists. */
typedef struct rig {
    pub_plan plan;
    pid_t pid;
    ferry_node *node;
    ferry_subscriber *subs[MAX_TOPICS];
} rig;

static void rig_start(rig *r, uint32_t ntopics, uint32_t prefill, uint32_t count, int64_t period_ns,
                      bool block)
{
    memset(r, 0, sizeof *r);
    r->plan.ntopics = ntopics;
    r->plan.prefill = prefill;
    r->plan.count = count;
    r->plan.period_ns = period_ns;
    r->plan.ready = tu_pipe_make();
    r->plan.go = tu_pipe_make();
    r->plan.done = tu_pipe_make();
    r->pid = tu_fork(publisher_main, &r->plan, 60);
    r->node = tu_node("sub");
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = 16;
    so.max_held = 16;
    so.overflow = block ? FERRY_OVERFLOW_BLOCK : FERRY_OVERFLOW_DROP_OLDEST;
    for (uint32_t i = 0; i < ntopics; i++)
        TU_OK(
            ferry_subscriber_create(&r->subs[i], r->node, topics[i], TYPE, ferry_hash(TYPE), &so));
    for (uint32_t i = 0; i < ntopics; i++)
        TU_OK(ferry_subscriber_wait_publishers(r->subs[i], 1, TU_WAIT_NS));
    TU_EQ_U64(tu_recv(&r->plan.ready, TU_WAIT_MS), prefill);
}

static void rig_go(rig *r)
{
    tu_send(&r->plan.go, 1);
}

/* Ends the publisher; checks every subscriber holds nothing, then destroys them. */
static void rig_end(rig *r)
{
    tu_send(&r->plan.done, 1);
    TU_CHILD_OK(r->pid);
    for (uint32_t i = 0; i < r->plan.ntopics; i++) {
        ferry_subscriber_stats ss;
        TU_OK(ferry_subscriber_stats_get(r->subs[i], &ss));
        TU_EQ_U64(ss.held, 0);
        TU_OK(ferry_subscriber_destroy(r->subs[i]));
    }
    TU_OK(ferry_node_destroy(r->node));
    tu_pipe_close(&r->plan.ready);
    tu_pipe_close(&r->plan.go);
    tu_pipe_close(&r->plan.done);
}

/* ---- callbacks ---------------------------------------------------------------------------- */

/* Callbacks running at once, and the most seen. */
typedef struct gauge {
    _Atomic int now;
    _Atomic int max;
} gauge;

static void gauge_enter(gauge *g)
{
    if (!g)
        return;
    int n = atomic_fetch_add(&g->now, 1) + 1;
    int m = atomic_load(&g->max);
    while (n > m && !atomic_compare_exchange_weak(&g->max, &m, n)) {
    }
}

static void gauge_leave(gauge *g)
{
    if (g)
        atomic_fetch_sub(&g->now, 1);
}

typedef struct track {
    uint32_t topic;
    bool ordered;    /* sequences must come 1, 2, 3, ... (no drop) */
    bool increasing; /* sequences must increase (drops allowed) */
    int64_t sleep_ns;
    gauge *group; /* concurrency of the callback's group */
    gauge self;   /* concurrency of this subscriber's callbacks */
    ferry_executor *ex;
    _Atomic uint64_t *total; /* shared count of every track */
    uint64_t stop_at;        /* stop ex when *total reaches it (0: never) */
    _Atomic uint64_t calls, last, disorder, bad, on_main;
    /* Topics in call order, for the fairness check (single-threaded only). */
    uint32_t *log;
    _Atomic uint32_t *nlog;
    uint32_t log_cap;
    /* Removal from the callback: remove `victim` (or itself when victim == self) at call
     * remove_at, recording the result. */
    ferry_subscriber *self_sub, *victim;
    uint64_t remove_at;
    _Atomic int remove_err;
    /* Keeping: every keep_every-th sample, up to KEEP_MAX. */
    uint32_t keep_every;
} track;

#define KEEP_MAX 8
static ferry_sample kept[KEEP_MAX];
static _Atomic uint32_t nkept;
static _Atomic int keep_errors;

static void on_sample(void *arg, ferry_subscriber *sub, const ferry_sample *s)
{
    track *t = arg;
    gauge_enter(t->group);
    gauge_enter(&t->self);
    msg m = {0};
    if (s->size != sizeof m || !s->data) {
        atomic_fetch_add(&t->bad, 1);
    } else {
        memcpy(&m, s->data, sizeof m);
        if (m.topic != t->topic || m.seq != s->sequence)
            atomic_fetch_add(&t->bad, 1);
    }
    if (t->self_sub && sub != t->self_sub)
        atomic_fetch_add(&t->bad, 1);
    uint64_t prev = atomic_exchange(&t->last, m.seq);
    if ((t->ordered && m.seq != prev + 1) || (t->increasing && m.seq <= prev))
        atomic_fetch_add(&t->disorder, 1);
    if (pthread_equal(pthread_self(), main_thread))
        atomic_fetch_add(&t->on_main, 1);
    if (t->log) {
        uint32_t i = atomic_fetch_add(t->nlog, 1);
        if (i < t->log_cap)
            t->log[i] = t->topic;
    }
    if (t->sleep_ns)
        tu_sleep_ns(t->sleep_ns);
    uint64_t calls = atomic_fetch_add(&t->calls, 1) + 1;
    if (t->keep_every && calls % t->keep_every == 0) {
        uint32_t k = atomic_fetch_add(&nkept, 1);
        if (k < KEEP_MAX) {
            if (ferry_executor_keep(t->ex, s, &kept[k]) != FERRY_OK)
                atomic_fetch_add(&keep_errors, 1);
            /* Keeping twice is refused. */
            ferry_sample again;
            if (ferry_executor_keep(t->ex, s, &again) != FERRY_ESTATE)
                atomic_fetch_add(&keep_errors, 1);
        } else {
            atomic_fetch_sub(&nkept, 1);
        }
    }
    if (t->remove_at && calls == t->remove_at)
        atomic_store(&t->remove_err, (int)ferry_executor_remove_subscriber(t->ex, t->victim));
    gauge_leave(&t->self);
    gauge_leave(t->group);
    if (t->total && t->stop_at && atomic_fetch_add(t->total, 1) + 1 == t->stop_at)
        ferry_executor_stop(t->ex);
}

static void track_init(track *t, uint32_t topic, ferry_executor *ex, _Atomic uint64_t *total,
                       uint64_t stop_at)
{
    memset(t, 0, sizeof *t);
    t->topic = topic;
    t->ex = ex;
    t->total = total;
    t->stop_at = stop_at;
}

typedef struct tick {
    _Atomic uint64_t calls;
    _Atomic int64_t last_ns;
    _Atomic uint64_t backwards;
    gauge *group;
    int64_t sleep_ns;
    ferry_executor *ex;
    uint32_t remove_self_id; /* remove this timer at its first call */
    _Atomic int remove_err;
} tick;

static void on_tick(void *arg, ferry_time now)
{
    tick *k = arg;
    gauge_enter(k->group);
    int64_t prev = atomic_exchange(&k->last_ns, now.ns);
    if (now.ns < prev)
        atomic_fetch_add(&k->backwards, 1);
    if (k->sleep_ns)
        tu_sleep_ns(k->sleep_ns);
    if (k->remove_self_id)
        atomic_store(&k->remove_err, (int)ferry_executor_remove_timer(k->ex, k->remove_self_id));
    atomic_fetch_add(&k->calls, 1);
    gauge_leave(k->group);
}

static ferry_executor *make_exec(ferry_node *node, uint32_t threads, uint32_t max_batch)
{
    ferry_executor_options o;
    ferry_executor_options_init(&o);
    TU_EQ_U64(o.threads, 0);
    TU_EQ_U64(o.max_batch, 8);
    o.threads = threads;
    o.max_batch = max_batch;
    ferry_executor *ex = NULL;
    TU_OK(ferry_executor_create(&ex, node, &o));
    return ex;
}

static void check_drained(ferry_executor *ex, uint64_t kept_now)
{
    ferry_executor_stats st;
    TU_OK(ferry_executor_stats_get(ex, &st));
    TU_EQ_U64(st.running, 0);
    TU_EQ_U64(st.samples_taken, st.samples_released + kept_now);
}

/* ---- single-threaded dispatch ------------------------------------------------------------- */

#define PREFILL 16
#define LIVE 100

static void test_single_thread(void)
{
    rig r;
    rig_start(&r, 3, PREFILL, LIVE, 0, true);
    ferry_executor *ex = make_exec(r.node, 0, 4);
    _Atomic uint64_t total = 0;
    uint32_t log[3 * PREFILL];
    _Atomic uint32_t nlog = 0;
    track t[3];
    for (uint32_t i = 0; i < 3; i++) {
        track_init(&t[i], i, ex, &total, 3 * PREFILL);
        t[i].ordered = true;
        t[i].self_sub = r.subs[i];
        t[i].log = log;
        t[i].nlog = &nlog;
        t[i].log_cap = 3 * PREFILL;
        TU_OK(ferry_executor_add_subscriber(ex, r.subs[i], NULL, on_sample, &t[i]));
    }
    /* Everything is queued already: rounds of 4 per subscriber, in the order they were added. */
    TU_OK(ferry_executor_spin(ex, TU_WAIT_NS));
    TU_EQ_U64(atomic_load(&nlog), 3 * PREFILL);
    for (uint32_t i = 0; i < 3 * PREFILL; i++)
        TU_CHECK_MSG(log[i] == (i / 4) % 3, "call %u was of topic %u, expected %u", i, log[i],
                     (i / 4) % 3);
    check_drained(ex, 0);

    /* Then live traffic, stopped from a callback at the last sample. */
    for (uint32_t i = 0; i < 3; i++) {
        t[i].log = NULL;
        t[i].stop_at = 3 * (PREFILL + LIVE);
    }
    rig_go(&r);
    TU_OK(ferry_executor_spin(ex, TU_WAIT_NS));
    for (uint32_t i = 0; i < 3; i++) {
        TU_EQ_U64(atomic_load(&t[i].calls), PREFILL + LIVE);
        TU_EQ_U64(atomic_load(&t[i].disorder), 0);
        TU_EQ_U64(atomic_load(&t[i].bad), 0);
        TU_EQ_U64(atomic_load(&t[i].on_main), PREFILL + LIVE);
        TU_EQ_U64(atomic_load(&t[i].self.max), 1);
    }
    ferry_executor_stats st;
    TU_OK(ferry_executor_stats_get(ex, &st));
    TU_EQ_U64(st.callbacks, 3 * (PREFILL + LIVE));
    TU_EQ_U64(st.samples_taken, 3 * (PREFILL + LIVE));
    TU_EQ_U64(st.samples_released, 3 * (PREFILL + LIVE));
    TU_EQ_U64(st.max_concurrency, 1);
    TU_EQ_U64(st.running, 0);
    TU_EQ_U64(st.timer_callbacks, 0);
    /* Nothing more comes: a spin times out. */
    TU_ERR(ferry_executor_spin(ex, 20 * MS), FERRY_ETIMEDOUT);
    TU_ERR(ferry_executor_spin_once(ex, 20 * MS), FERRY_ETIMEDOUT);
    TU_OK(ferry_executor_destroy(ex));
    rig_end(&r);
}

/* ---- worker pool with groups -------------------------------------------------------------- */

#define POOL_N 40

static void test_pool_groups(void)
{
    rig r;
    rig_start(&r, 3, 0, POOL_N, 0, true);
    ferry_executor *ex = make_exec(r.node, 4, 0);
    ferry_callback_group *gx = NULL, *gr = NULL;
    TU_OK(ferry_callback_group_create(ex, FERRY_GROUP_EXCLUSIVE, &gx));
    TU_OK(ferry_callback_group_create(ex, FERRY_GROUP_REENTRANT, &gr));
    gauge in_x = {0}, in_r = {0};
    _Atomic uint64_t total = 0;
    track t[3];
    for (uint32_t i = 0; i < 3; i++) {
        track_init(&t[i], i, ex, &total, 3 * POOL_N);
        t[i].self_sub = r.subs[i];
        t[i].ordered = i < 2; /* exclusive: in take order */
        t[i].group = i < 2 ? &in_x : &in_r;
        t[i].sleep_ns = i < 2 ? MS : 3 * MS;
        TU_OK(ferry_executor_add_subscriber(ex, r.subs[i], i < 2 ? gx : gr, on_sample, &t[i]));
    }
    /* A timer in the exclusive group shares its exclusion. */
    tick k = {0};
    k.group = &in_x;
    k.sleep_ns = MS;
    TU_OK(ferry_executor_add_timer(ex, 5 * MS, gx, on_tick, &k, NULL));
    rig_go(&r);
    TU_OK(ferry_executor_spin(ex, 3 * TU_WAIT_NS));
    for (uint32_t i = 0; i < 3; i++) {
        TU_EQ_U64(atomic_load(&t[i].calls), POOL_N);
        TU_EQ_U64(atomic_load(&t[i].disorder), 0);
        TU_EQ_U64(atomic_load(&t[i].bad), 0);
        TU_EQ_U64(atomic_load(&t[i].on_main), 0);
    }
    TU_EQ_U64(atomic_load(&in_x.max), 1);
    TU_CMP_U64(atomic_load(&in_r.max), >, 1);
    TU_CMP_U64(atomic_load(&t[2].self.max), >, 1); /* even one subscriber's callbacks overlap */
    TU_CMP_U64(atomic_load(&k.calls), >=, 1);
    ferry_executor_stats st;
    TU_OK(ferry_executor_stats_get(ex, &st));
    TU_EQ_U64(st.callbacks, 3 * POOL_N);
    TU_CMP_U64(st.max_concurrency, >, 1);
    TU_CMP_U64(st.max_concurrency, <=, 4);
    TU_EQ_U64(st.timer_callbacks, atomic_load(&k.calls));
    check_drained(ex, 0);
    printf("    reentrant concurrency %d, executor %u, timer calls %" PRIu64 "\n",
           atomic_load(&in_r.max), st.max_concurrency, (uint64_t)atomic_load(&k.calls));
    TU_OK(ferry_executor_destroy(ex));
    rig_end(&r);
}

/* ---- timers ------------------------------------------------------------------------------- */

static void test_timers(void)
{
    ferry_node *node = tu_node("timers");
    ferry_executor *ex = make_exec(node, 0, 0);
    tick a = {0}, b = {0}, once = {0};
    uint32_t ida = 0, idb = 0, ido = 0;
    TU_OK(ferry_executor_add_timer(ex, 20 * MS, NULL, on_tick, &a, &ida));
    TU_OK(ferry_executor_add_timer(ex, 50 * MS, NULL, on_tick, &b, &idb));
    TU_OK(ferry_executor_add_timer(ex, 10 * MS, NULL, on_tick, &once, &ido));
    TU_CHECK(ida != 0 && idb != 0 && ido != 0 && ida != idb && idb != ido);
    once.ex = ex;
    once.remove_self_id = ido;
    ferry_time t0 = ferry_now();
    TU_ERR(ferry_executor_spin(ex, TU_SEC), FERRY_ETIMEDOUT);
    int64_t took = tu_since(t0);
    TU_CMP_I64(took, >=, TU_SEC);
    TU_CMP_I64(took, <, 5 * TU_SEC);
    /* About 50 and 20; never more than one per period, loose below for a loaded machine. */
    TU_CMP_U64(atomic_load(&a.calls), >=, 10);
    TU_CMP_U64(atomic_load(&a.calls), <=, (uint64_t)(took / (20 * MS)) + 1);
    TU_CMP_U64(atomic_load(&b.calls), >=, 4);
    TU_CMP_U64(atomic_load(&b.calls), <=, (uint64_t)(took / (50 * MS)) + 1);
    TU_EQ_U64(atomic_load(&once.calls), 1);
    TU_EQ_U64(atomic_load(&once.remove_err), FERRY_OK);
    TU_EQ_U64(atomic_load(&a.backwards) + atomic_load(&b.backwards), 0);
    printf("    1 s: %" PRIu64 " calls of 20 ms, %" PRIu64 " of 50 ms\n",
           (uint64_t)atomic_load(&a.calls), (uint64_t)atomic_load(&b.calls));

    /* A removed timer is not called again; its id is gone. */
    TU_OK(ferry_executor_remove_timer(ex, idb));
    TU_ERR(ferry_executor_remove_timer(ex, idb), FERRY_ESTATE);
    TU_ERR(ferry_executor_remove_timer(ex, ido), FERRY_ESTATE);
    uint64_t b_calls = atomic_load(&b.calls), a_calls = atomic_load(&a.calls);
    TU_OK(ferry_executor_spin_once(ex, TU_WAIT_NS));
    TU_CMP_U64(atomic_load(&a.calls), >, a_calls);
    TU_ERR(ferry_executor_spin(ex, 200 * MS), FERRY_ETIMEDOUT);
    TU_EQ_U64(atomic_load(&b.calls), b_calls);
    TU_OK(ferry_executor_destroy(ex));

    /* In a pool: a 10 ms timer in a reentrant group, and one in the default group. */
    ex = make_exec(node, 2, 0);
    ferry_callback_group *gr = NULL;
    TU_OK(ferry_callback_group_create(ex, FERRY_GROUP_REENTRANT, &gr));
    tick c = {0}, d = {0};
    TU_OK(ferry_executor_add_timer(ex, 10 * MS, gr, on_tick, &c, NULL));
    TU_OK(ferry_executor_add_timer(ex, 25 * MS, NULL, on_tick, &d, NULL));
    t0 = ferry_now();
    TU_ERR(ferry_executor_spin(ex, 500 * MS), FERRY_ETIMEDOUT);
    took = tu_since(t0);
    TU_CMP_U64(atomic_load(&c.calls), >=, 10);
    TU_CMP_U64(atomic_load(&c.calls), <=, (uint64_t)(took / (10 * MS)) + 1);
    TU_CMP_U64(atomic_load(&d.calls), >=, 4);
    TU_CMP_U64(atomic_load(&d.calls), <=, (uint64_t)(took / (25 * MS)) + 1);
    ferry_executor_stats st;
    TU_OK(ferry_executor_stats_get(ex, &st));
    TU_EQ_U64(st.timer_callbacks, atomic_load(&c.calls) + atomic_load(&d.calls));
    TU_EQ_U64(st.running, 0);
    TU_OK(ferry_executor_destroy(ex));
    TU_OK(ferry_node_destroy(node));
}

/* ---- stop --------------------------------------------------------------------------------- */

typedef struct stopper {
    ferry_executor *ex;
    int64_t after_ns;
    ferry_err err;
} stopper;

static void *stopper_main(void *arg)
{
    stopper *s = arg;
    tu_sleep_ns(s->after_ns);
    s->err = ferry_executor_stop(s->ex);
    return NULL;
}

static ferry_executor *alarm_target;

static void on_alarm(int sig)
{
    (void)sig;
    ferry_executor_stop(alarm_target);
}

static void test_stop(void)
{
    ferry_node *node = tu_node("stop");
    for (uint32_t threads = 0; threads <= 2; threads += 2) {
        ferry_executor *ex = make_exec(node, threads, 0);
        tick k = {0};
        TU_OK(ferry_executor_add_timer(ex, 5 * MS, NULL, on_tick, &k, NULL));

        /* From another thread. */
        stopper s = {ex, 100 * MS, FERRY_EINVAL};
        pthread_t th;
        TU_CHECK(pthread_create(&th, NULL, stopper_main, &s) == 0);
        ferry_time t0 = ferry_now();
        TU_OK(ferry_executor_spin(ex, FERRY_FOREVER));
        TU_CMP_I64(tu_since(t0), <, TU_WAIT_NS);
        pthread_join(th, NULL);
        TU_OK(s.err);
        TU_CMP_U64(atomic_load(&k.calls), >=, 1);
        check_drained(ex, 0);

        /* From a SIGALRM handler. */
        alarm_target = ex;
        struct sigaction sa, old;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_alarm;
        sigemptyset(&sa.sa_mask);
        TU_CHECK(sigaction(SIGALRM, &sa, &old) == 0);
        struct itimerval it = {.it_value = {.tv_sec = 0, .tv_usec = 150000}};
        TU_CHECK(setitimer(ITIMER_REAL, &it, NULL) == 0);
        uint64_t before = atomic_load(&k.calls);
        t0 = ferry_now();
        TU_OK(ferry_executor_spin(ex, FERRY_FOREVER));
        TU_CMP_I64(tu_since(t0), <, TU_WAIT_NS);
        TU_CMP_U64(atomic_load(&k.calls), >, before);
        TU_CHECK(sigaction(SIGALRM, &old, NULL) == 0);
        check_drained(ex, 0);

        /* A stop while nobody spins makes the next spin return at once, and only that one. */
        TU_OK(ferry_executor_stop(ex));
        t0 = ferry_now();
        TU_OK(ferry_executor_spin(ex, TU_WAIT_NS));
        TU_CMP_I64(tu_since(t0), <, TU_SEC);
        TU_ERR(ferry_executor_spin(ex, 20 * MS), FERRY_ETIMEDOUT);
        TU_OK(ferry_executor_destroy(ex));
    }
    TU_OK(ferry_node_destroy(node));
}

/* ---- drain and kept samples --------------------------------------------------------------- */

typedef struct releaser {
    ferry_executor *ex;
    uint32_t n;
    ferry_err first, second;
} releaser;

static void *releaser_main(void *arg)
{
    releaser *rl = arg;
    rl->first = rl->second = FERRY_OK;
    for (uint32_t i = 0; i < rl->n; i++) {
        ferry_err err = ferry_executor_release(rl->ex, &kept[i]);
        if (err && !rl->first)
            rl->first = err;
        err = ferry_executor_release(rl->ex, &kept[i]);
        if (err != FERRY_ESTATE)
            rl->second = err ? err : FERRY_EINVAL;
    }
    return NULL;
}

static void test_drain_keep(void)
{
    rig r;
    rig_start(&r, 1, 0, 0, 2 * MS, false);
    ferry_executor *ex = make_exec(r.node, 2, 0);
    ferry_callback_group *gr = NULL;
    TU_OK(ferry_callback_group_create(ex, FERRY_GROUP_REENTRANT, &gr));
    atomic_store(&nkept, 0);
    atomic_store(&keep_errors, 0);
    memset(kept, 0, sizeof kept);
    _Atomic uint64_t total = 0;
    track t;
    track_init(&t, 0, ex, &total, 40);
    t.increasing = false; /* reentrant: no order */
    t.sleep_ns = 2 * MS;
    t.keep_every = 3;
    TU_OK(ferry_executor_add_subscriber(ex, r.subs[0], gr, on_sample, &t));
    rig_go(&r);
    TU_OK(ferry_executor_spin(ex, 3 * TU_WAIT_NS));
    TU_EQ_U64(atomic_load(&keep_errors), 0);
    TU_EQ_U64(atomic_load(&t.bad), 0);
    uint32_t nk = atomic_load(&nkept);
    TU_CMP_U64(nk, >=, 8); /* 40 calls, every third kept, at most KEEP_MAX */

    /* Drained: nothing runs, everything taken was released except the kept samples, which
     * the subscriber still holds. */
    ferry_executor_stats st;
    TU_OK(ferry_executor_stats_get(ex, &st));
    TU_EQ_U64(st.running, 0);
    TU_EQ_U64(st.samples_taken, st.samples_released + nk);
    TU_EQ_U64(st.callbacks, st.samples_taken);
    ferry_subscriber_stats ss;
    TU_OK(ferry_subscriber_stats_get(r.subs[0], &ss));
    TU_EQ_U64(ss.held, nk);
    TU_EQ_U64(ss.received, st.samples_taken);
    for (uint32_t i = 0; i < nk; i++)
        TU_CHECK(kept[i].data != NULL && kept[i].size == sizeof(msg));
    /* Outside a callback nothing can be kept. */
    ferry_sample other;
    TU_ERR(ferry_executor_keep(ex, &kept[0], &other), FERRY_ESTATE);

    /* Released later from another thread. */
    releaser rl = {ex, nk, FERRY_OK, FERRY_OK};
    pthread_t th;
    TU_CHECK(pthread_create(&th, NULL, releaser_main, &rl) == 0);
    pthread_join(th, NULL);
    TU_OK(rl.first);
    TU_OK(rl.second);
    TU_OK(ferry_subscriber_stats_get(r.subs[0], &ss));
    TU_EQ_U64(ss.held, 0);
    check_drained(ex, 0);

    /* Samples queued meanwhile stayed in the subscriber for the next spin. */
    t.keep_every = 0;
    uint64_t calls = atomic_load(&t.calls);
    TU_OK(ferry_executor_spin_once(ex, TU_WAIT_NS));
    TU_CMP_U64(atomic_load(&t.calls), >, calls);
    check_drained(ex, 0);
    TU_OK(ferry_executor_destroy(ex));
    rig_end(&r);
}

/* ---- removal ------------------------------------------------------------------------------ */

typedef struct remover {
    ferry_executor *ex;
    ferry_subscriber *sub;
    track *t;
    ferry_err err, again;
    int running_after;
    uint64_t calls_after, calls_later;
} remover;

static void *remover_main(void *arg)
{
    remover *rm = arg;
    ferry_time t0 = ferry_now();
    while (atomic_load(&rm->t->calls) < 10 && tu_since(t0) < TU_WAIT_NS)
        tu_sleep_ns(MS);
    rm->err = ferry_executor_remove_subscriber(rm->ex, rm->sub);
    rm->running_after = atomic_load(&rm->t->self.now);
    rm->calls_after = atomic_load(&rm->t->calls);
    rm->again = ferry_executor_remove_subscriber(rm->ex, rm->sub);
    tu_sleep_ns(100 * MS);
    rm->calls_later = atomic_load(&rm->t->calls);
    ferry_executor_stop(rm->ex);
    return NULL;
}

static void test_remove(void)
{
    rig r;
    rig_start(&r, 3, 0, 0, 2 * MS, false);

    /* Pool: removed from another thread while its callbacks run. */
    ferry_executor *ex = make_exec(r.node, 3, 0);
    ferry_callback_group *gr = NULL;
    TU_OK(ferry_callback_group_create(ex, FERRY_GROUP_REENTRANT, &gr));
    track t[3];
    for (uint32_t i = 0; i < 3; i++) {
        track_init(&t[i], i, ex, NULL, 0);
        t[i].sleep_ns = i == 0 ? 3 * MS : 0;
        TU_OK(ferry_executor_add_subscriber(ex, r.subs[i], i == 0 ? gr : NULL, on_sample, &t[i]));
    }
    rig_go(&r);
    remover rm = {.ex = ex, .sub = r.subs[0], .t = &t[0]};
    pthread_t th;
    TU_CHECK(pthread_create(&th, NULL, remover_main, &rm) == 0);
    TU_OK(ferry_executor_spin(ex, 3 * TU_WAIT_NS));
    pthread_join(th, NULL);
    TU_OK(rm.err);
    TU_ERR(rm.again, FERRY_ESTATE);
    TU_EQ_U64(rm.running_after, 0);
    TU_EQ_U64(rm.calls_later, rm.calls_after);
    TU_CMP_U64(rm.calls_after, >=, 10);
    TU_EQ_U64(atomic_load(&t[0].bad), 0);
    check_drained(ex, 0);
    ferry_subscriber_stats ss;
    TU_OK(ferry_subscriber_stats_get(r.subs[0], &ss));
    TU_EQ_U64(ss.held, 0);
    /* The subscriber is the caller's again: it may take directly, and be added again. */
    ferry_sample s;
    ferry_err err = ferry_take(r.subs[0], &s);
    TU_CHECK_MSG(err == FERRY_OK || err == FERRY_EAGAIN, "take: %s", ferry_strerror(err));
    if (err == FERRY_OK)
        TU_OK(ferry_release(r.subs[0], &s));
    TU_OK(ferry_executor_destroy(ex));

    /* Single thread: a callback removes another subscriber, another removes its own, a third
     * stops the executor. */
    ex = make_exec(r.node, 0, 0);
    _Atomic uint64_t total = 0;
    for (uint32_t i = 0; i < 3; i++)
        track_init(&t[i], i, ex, NULL, 0);
    t[0].remove_at = 5;
    t[0].victim = r.subs[1];
    t[2].remove_at = 7;
    t[2].victim = r.subs[2];
    t[2].total = &total;
    t[2].stop_at = 7;
    for (uint32_t i = 0; i < 3; i++)
        TU_OK(ferry_executor_add_subscriber(ex, r.subs[i], NULL, on_sample, &t[i]));
    TU_OK(ferry_executor_spin(ex, 3 * TU_WAIT_NS));
    TU_EQ_U64(atomic_load(&t[0].remove_err), FERRY_OK);
    TU_EQ_U64(atomic_load(&t[2].remove_err), FERRY_OK);
    TU_EQ_U64(atomic_load(&t[2].calls), 7);
    uint64_t b_calls = atomic_load(&t[1].calls), c_calls = atomic_load(&t[2].calls);
    TU_ERR(ferry_executor_spin(ex, 100 * MS), FERRY_ETIMEDOUT);
    TU_EQ_U64(atomic_load(&t[1].calls), b_calls);
    TU_EQ_U64(atomic_load(&t[2].calls), c_calls);
    TU_CMP_U64(atomic_load(&t[0].calls), >, 5);
    TU_ERR(ferry_executor_remove_subscriber(ex, r.subs[1]), FERRY_ESTATE);
    TU_ERR(ferry_executor_remove_subscriber(ex, r.subs[2]), FERRY_ESTATE);
    /* A removed subscriber may be added again. */
    TU_OK(ferry_executor_add_subscriber(ex, r.subs[1], NULL, on_sample, &t[1]));
    t[1].remove_at = 0;
    TU_OK(ferry_executor_spin_once(ex, TU_WAIT_NS));
    check_drained(ex, 0);
    TU_OK(ferry_executor_destroy(ex));
    rig_end(&r);
}

/* ---- argument errors ---------------------------------------------------------------------- */

static void noop_sample(void *arg, ferry_subscriber *sub, const ferry_sample *s)
{
    (void)arg;
    (void)sub;
    (void)s;
}

static void noop_tick(void *arg, ferry_time now)
{
    (void)arg;
    (void)now;
}

typedef struct inside {
    ferry_executor *ex;
    ferry_err spin, destroy;
    _Atomic int calls;
} inside;

static void on_tick_inside(void *arg, ferry_time now)
{
    (void)now;
    inside *in = arg;
    if (atomic_fetch_add(&in->calls, 1) == 0) {
        in->spin = ferry_executor_spin(in->ex, 0);
        in->destroy = ferry_executor_destroy(in->ex);
        ferry_executor_stop(in->ex);
    }
}

static void test_errors(void)
{
    ferry_node *node = tu_node("errors");
    ferry_executor *ex = NULL;
    ferry_executor_options o;
    ferry_executor_options_init(NULL);
    ferry_executor_options_init(&o);
    TU_ERR(ferry_executor_create(NULL, node, &o), FERRY_EINVAL);
    TU_ERR(ferry_executor_create(&ex, NULL, &o), FERRY_EINVAL);
    o.threads = FERRY_EXEC_MAX_THREADS + 1;
    TU_ERR(ferry_executor_create(&ex, node, &o), FERRY_EINVAL);
    TU_CHECK(ex == NULL);
    TU_OK(ferry_executor_create(&ex, node, NULL));
    ferry_executor *ex2 = make_exec(node, 1, 0);

    ferry_subscriber *sub = NULL, *sub2 = NULL;
    TU_OK(ferry_subscriber_create(&sub, node, "/exec/e", TYPE, ferry_hash(TYPE), NULL));
    TU_OK(ferry_subscriber_create(&sub2, node, "/exec/f", TYPE, ferry_hash(TYPE), NULL));
    ferry_callback_group *g = NULL, *g2 = NULL;
    TU_ERR(ferry_callback_group_create(NULL, FERRY_GROUP_EXCLUSIVE, &g), FERRY_EINVAL);
    TU_ERR(ferry_callback_group_create(ex, FERRY_GROUP_EXCLUSIVE, NULL), FERRY_EINVAL);
    TU_ERR(ferry_callback_group_create(ex, (ferry_group_kind)7, &g), FERRY_EINVAL);
    TU_OK(ferry_callback_group_create(ex, FERRY_GROUP_REENTRANT, &g));
    TU_OK(ferry_callback_group_create(ex2, FERRY_GROUP_EXCLUSIVE, &g2));

    TU_ERR(ferry_executor_add_subscriber(NULL, sub, NULL, noop_sample, NULL), FERRY_EINVAL);
    TU_ERR(ferry_executor_add_subscriber(ex, NULL, NULL, noop_sample, NULL), FERRY_EINVAL);
    TU_ERR(ferry_executor_add_subscriber(ex, sub, NULL, NULL, NULL), FERRY_EINVAL);
    TU_ERR(ferry_executor_add_subscriber(ex, (ferry_subscriber *)node, NULL, noop_sample, NULL),
           FERRY_EINVAL);
    TU_ERR(ferry_executor_add_subscriber(ex, sub, g2, noop_sample, NULL), FERRY_EINVAL);
    TU_ERR(ferry_executor_remove_subscriber(ex, sub), FERRY_ESTATE);
    TU_ERR(ferry_executor_remove_subscriber(ex, NULL), FERRY_EINVAL);
    TU_ERR(ferry_executor_remove_subscriber(NULL, sub), FERRY_EINVAL);
    TU_OK(ferry_executor_add_subscriber(ex, sub, g, noop_sample, NULL));
    TU_ERR(ferry_executor_add_subscriber(ex, sub, g, noop_sample, NULL), FERRY_EBUSY);
    TU_ERR(ferry_executor_add_subscriber(ex2, sub, NULL, noop_sample, NULL), FERRY_EBUSY);
    /* While added, the subscriber is the executor's. */
    TU_ERR(ferry_subscriber_destroy(sub), FERRY_EBUSY);
    ferry_waitset *ws = NULL;
    TU_OK(ferry_waitset_create(&ws, node));
    TU_ERR(ferry_waitset_add(ws, sub, NULL), FERRY_EBUSY);
    TU_OK(ferry_waitset_add(ws, sub2, NULL));
    TU_ERR(ferry_executor_add_subscriber(ex, sub2, NULL, noop_sample, NULL), FERRY_EBUSY);
    TU_OK(ferry_waitset_remove(ws, sub2));
    TU_OK(ferry_waitset_destroy(ws));
    TU_ERR(ferry_executor_remove_subscriber(ex2, sub), FERRY_ESTATE);
    TU_OK(ferry_executor_remove_subscriber(ex, sub));
    TU_ERR(ferry_executor_remove_subscriber(ex, sub), FERRY_ESTATE);
    TU_OK(ferry_executor_add_subscriber(ex, sub, NULL, noop_sample, NULL));

    uint32_t id = 0;
    TU_ERR(ferry_executor_add_timer(NULL, MS, NULL, noop_tick, NULL, &id), FERRY_EINVAL);
    TU_ERR(ferry_executor_add_timer(ex, 0, NULL, noop_tick, NULL, &id), FERRY_EINVAL);
    TU_ERR(ferry_executor_add_timer(ex, -5, NULL, noop_tick, NULL, &id), FERRY_EINVAL);
    TU_ERR(ferry_executor_add_timer(ex, MS, NULL, NULL, NULL, &id), FERRY_EINVAL);
    TU_ERR(ferry_executor_add_timer(ex, MS, g2, noop_tick, NULL, &id), FERRY_EINVAL);
    TU_OK(ferry_executor_add_timer(ex, TU_SEC, NULL, noop_tick, NULL, NULL));
    TU_OK(ferry_executor_add_timer(ex, TU_SEC, g, noop_tick, NULL, &id));
    TU_ERR(ferry_executor_remove_timer(NULL, id), FERRY_EINVAL);
    TU_ERR(ferry_executor_remove_timer(ex, id + 100), FERRY_ESTATE);
    TU_ERR(ferry_executor_remove_timer(ex, 0), FERRY_ESTATE);
    TU_ERR(ferry_executor_remove_timer(ex2, id), FERRY_ESTATE);
    TU_OK(ferry_executor_remove_timer(ex, id));

    TU_ERR(ferry_executor_spin(NULL, 0), FERRY_EINVAL);
    TU_ERR(ferry_executor_spin_once(NULL, 0), FERRY_EINVAL);
    TU_ERR(ferry_executor_stop(NULL), FERRY_EINVAL);
    ferry_sample s;
    memset(&s, 0, sizeof s);
    TU_ERR(ferry_executor_keep(NULL, &s, &s), FERRY_EINVAL);
    TU_ERR(ferry_executor_keep(ex, NULL, &s), FERRY_EINVAL);
    TU_ERR(ferry_executor_keep(ex, &s, NULL), FERRY_EINVAL);
    TU_ERR(ferry_executor_keep(ex, &s, &s), FERRY_ESTATE);
    TU_ERR(ferry_executor_release(NULL, &s), FERRY_EINVAL);
    TU_ERR(ferry_executor_release(ex, NULL), FERRY_EINVAL);
    TU_ERR(ferry_executor_release(ex, &s), FERRY_ESTATE);
    ferry_executor_stats st;
    TU_ERR(ferry_executor_stats_get(NULL, &st), FERRY_EINVAL);
    TU_ERR(ferry_executor_stats_get(ex, NULL), FERRY_EINVAL);
    TU_ERR(ferry_executor_destroy(NULL), FERRY_EINVAL);
    TU_ERR(ferry_executor_destroy((ferry_executor *)sub2), FERRY_EINVAL);

    /* Inside a callback: spinning again and destroying are refused; stop works. */
    inside in = {.ex = ex2, .spin = FERRY_OK, .destroy = FERRY_OK};
    TU_OK(ferry_executor_add_timer(ex2, MS, NULL, on_tick_inside, &in, NULL));
    TU_OK(ferry_executor_spin(ex2, TU_WAIT_NS));
    TU_ERR(in.spin, FERRY_EBUSY);
    TU_ERR(in.destroy, FERRY_EBUSY);

    /* The node outlives its executors; destroyed ones are recognised. */
    TU_ERR(ferry_node_destroy(node), FERRY_EBUSY);
    TU_OK(ferry_executor_destroy(ex2));
    TU_ERR(ferry_executor_destroy(ex2), FERRY_ECLOSED);
    TU_ERR(ferry_executor_spin(ex2, 0), FERRY_ECLOSED);
    TU_ERR(ferry_executor_stop(ex2), FERRY_ECLOSED);
    /* Destroying forgets the subscribers, which are the caller's again. */
    TU_OK(ferry_executor_destroy(ex));
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_subscriber_destroy(sub2));
    TU_OK(ferry_node_destroy(node));
}

/* ---- no allocation per sample ------------------------------------------------------------- */

#ifndef EXEC_NO_MALLOC_HOOK

extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t size);
extern void *__libc_memalign(size_t align, size_t size);
extern void __libc_free(void *p);

static _Atomic int counting;
static _Atomic unsigned long allocs, frees;

void *malloc(size_t size)
{
    if (atomic_load_explicit(&counting, memory_order_relaxed))
        atomic_fetch_add(&allocs, 1);
    return __libc_malloc(size);
}

void *calloc(size_t n, size_t size)
{
    if (atomic_load_explicit(&counting, memory_order_relaxed))
        atomic_fetch_add(&allocs, 1);
    return __libc_calloc(n, size);
}

void *realloc(void *p, size_t size)
{
    if (atomic_load_explicit(&counting, memory_order_relaxed))
        atomic_fetch_add(&allocs, 1);
    return __libc_realloc(p, size);
}

void *memalign(size_t align, size_t size)
{
    if (atomic_load_explicit(&counting, memory_order_relaxed))
        atomic_fetch_add(&allocs, 1);
    return __libc_memalign(align, size);
}

void *aligned_alloc(size_t align, size_t size)
{
    return memalign(align, size);
}

int posix_memalign(void **out, size_t align, size_t size)
{
    if (align < sizeof(void *) || (align & (align - 1)) != 0)
        return EINVAL;
    void *p = memalign(align, size);
    if (p == NULL)
        return ENOMEM;
    *out = p;
    return 0;
}

void free(void *p)
{
    if (p && atomic_load_explicit(&counting, memory_order_relaxed))
        atomic_fetch_add(&frees, 1);
    __libc_free(p);
}

/* A subscriber rescans its topic directory once a second (opendir allocates), so one window
 * may see that; an allocation per sample or per callback would show in every window. */
static void test_no_alloc(void)
{
    rig r;
    rig_start(&r, 1, 0, 0, MS, false);
    for (uint32_t threads = 0; threads <= 2; threads += 2) {
        ferry_executor *ex = make_exec(r.node, threads, 0);
        _Atomic uint64_t total = 0;
        track t;
        track_init(&t, 0, ex, &total, 20);
        tick k = {0};
        TU_OK(ferry_executor_add_subscriber(ex, r.subs[0], NULL, on_sample, &t));
        TU_OK(ferry_executor_add_timer(ex, 2 * MS, NULL, on_tick, &k, NULL));
        if (threads == 0)
            rig_go(&r);
        TU_OK(ferry_executor_spin(ex, 3 * TU_WAIT_NS)); /* warm up */
        bool clean = false;
        unsigned long seen[4] = {0};
        for (int w = 0; w < 4 && !clean; w++) {
            t.stop_at = atomic_load(&total) + 100;
            uint64_t ticks = atomic_load(&k.calls);
            atomic_store(&allocs, 0);
            atomic_store(&frees, 0);
            atomic_store(&counting, 1);
            TU_OK(ferry_executor_spin(ex, 3 * TU_WAIT_NS));
            atomic_store(&counting, 0);
            seen[w] = atomic_load(&allocs) + atomic_load(&frees);
            TU_CMP_U64(atomic_load(&k.calls), >, ticks);
            clean = seen[w] == 0;
        }
        TU_CHECK_MSG(clean, "%u threads: allocations in every window: %lu %lu %lu %lu", threads,
                     seen[0], seen[1], seen[2], seen[3]);
        check_drained(ex, 0);
        TU_OK(ferry_executor_destroy(ex));
    }
    rig_end(&r);
}

#endif

int main(void)
{
    main_thread = pthread_self();
    TU_RUN(test_errors);
    TU_RUN(test_single_thread);
    TU_RUN(test_pool_groups);
    TU_RUN(test_timers);
    TU_RUN(test_stop);
    TU_RUN(test_drain_keep);
    TU_RUN(test_remove);
#ifndef EXEC_NO_MALLOC_HOOK
    TU_RUN(test_no_alloc);
#else
    printf("skip test_no_alloc (allocation counting is off under sanitizers)\n");
#endif
    return 0;
}
