/*
 * Tests of the approximate-time synchroniser: the policy core on hand-built stamp sequences
 * (every token comes out exactly once, in a set or discarded), then the synchroniser over real
 * subscribers fed by two publisher processes at 30 Hz and 10 Hz with jittered stamps.
 */
#include "testutil.h"

#include <ferry/sync.h>

#include "framework/sync_core.h"

#include <stdlib.h>

#define MS TU_MS
#define MAX_TOKENS 4096

/* A harness around one core: tokens are 1, 2, 3, ... in the order added. */
typedef struct harness {
    ferry__sync_core *core;
    uint32_t n;
    int64_t max_interval;
    uint64_t next;
    int64_t stamp[MAX_TOKENS];
    uint32_t topic[MAX_TOKENS];
    int emitted[MAX_TOKENS];
    int discarded[MAX_TOKENS];
    /* Sets emitted so far, flattened. */
    uint64_t sets[MAX_TOKENS];
    uint32_t nsets;
    uint64_t discarded_per_topic[FERRY_SYNC_MAX_TOPICS];
} harness;

static harness H;

static void h_init(uint32_t n, uint32_t cap, int64_t max_interval)
{
    memset(&H, 0, sizeof H);
    H.n = n;
    H.max_interval = max_interval;
    H.next = 1;
    TU_OK(ferry__sync_core_create(&H.core, n, cap, max_interval));
}

static void h_collect(void)
{
    for (uint32_t i = 0; i < ferry__sync_core_ndiscarded(H.core); i++) {
        uint32_t t;
        uint64_t tok;
        ferry__sync_core_discarded(H.core, i, &t, &tok);
        TU_CHECK(tok > 0 && tok < H.next);
        TU_EQ_U64(t, H.topic[tok]);
        H.discarded[tok]++;
        H.discarded_per_topic[t]++;
    }
    for (uint32_t i = 0; i < ferry__sync_core_nsets(H.core); i++) {
        const uint64_t *set = ferry__sync_core_set(H.core, i);
        int64_t lo = INT64_MAX, hi = INT64_MIN;
        for (uint32_t t = 0; t < H.n; t++) {
            uint64_t tok = set[t];
            TU_CHECK(tok > 0 && tok < H.next);
            TU_EQ_U64(H.topic[tok], t);
            H.emitted[tok]++;
            lo = H.stamp[tok] < lo ? H.stamp[tok] : lo;
            hi = H.stamp[tok] > hi ? H.stamp[tok] : hi;
            TU_CHECK(H.nsets * H.n + t < MAX_TOKENS);
            H.sets[H.nsets * H.n + t] = tok;
        }
        if (H.max_interval > 0)
            TU_CMP_I64(hi - lo, <=, H.max_interval);
        H.nsets++;
    }
}

/* Adds one message; returns its token. */
static uint64_t h_add(uint32_t topic, int64_t stamp)
{
    TU_CHECK(H.next < MAX_TOKENS);
    uint64_t tok = H.next++;
    H.stamp[tok] = stamp;
    H.topic[tok] = topic;
    TU_OK(ferry__sync_core_add(H.core, topic, stamp, tok));
    h_collect();
    return tok;
}

/* Drains the core and checks conservation: every token out exactly once. */
static void h_finish(void)
{
    ferry__sync_core_drain(H.core);
    h_collect();
    for (uint64_t tok = 1; tok < H.next; tok++)
        TU_CHECK_MSG(H.emitted[tok] + H.discarded[tok] == 1,
                     "token %" PRIu64 ": emitted %d, discarded %d", tok, H.emitted[tok],
                     H.discarded[tok]);
    ferry__sync_core_destroy(H.core);
    H.core = NULL;
}

static const uint64_t *h_set(uint32_t i)
{
    TU_CMP_U64(i, <, H.nsets);
    return &H.sets[i * H.n];
}

static void test_core_args(void)
{
    ferry__sync_core *c = NULL;
    TU_ERR(ferry__sync_core_create(&c, 1, 4, 0), FERRY_EINVAL);
    TU_ERR(ferry__sync_core_create(&c, 10, 4, 0), FERRY_EINVAL);
    TU_ERR(ferry__sync_core_create(&c, 2, 0, 0), FERRY_EINVAL);
    TU_ERR(ferry__sync_core_create(&c, 2, 4, -1), FERRY_EINVAL);
    TU_OK(ferry__sync_core_create(&c, 2, 4, 0));
    TU_ERR(ferry__sync_core_add(c, 2, 0, 1), FERRY_EINVAL);
    ferry__sync_core_destroy(c);
}

static void test_core_exact(void)
{
    h_init(2, 10, 0);
    uint64_t a[5], b[5];
    for (int i = 0; i < 5; i++) {
        a[i] = h_add(0, i * 100 * MS);
        b[i] = h_add(1, i * 100 * MS);
    }
    TU_EQ_U64(H.nsets, 5);
    for (uint32_t i = 0; i < 5; i++) {
        TU_EQ_U64(h_set(i)[0], a[i]);
        TU_EQ_U64(h_set(i)[1], b[i]);
    }
    h_finish();
    TU_EQ_U64(H.discarded_per_topic[0] + H.discarded_per_topic[1], 0);
}

static void test_core_jitter(void)
{
    h_init(2, 10, 10 * MS);
    static const int64_t ja[] = {3, -2, 4, 0, -4, 1};
    static const int64_t jb[] = {-3, 4, -1, 2, 3, -5};
    uint64_t a[6], b[6];
    for (int i = 0; i < 6; i++) {
        a[i] = h_add(0, i * 100 * MS + ja[i] * MS);
        b[i] = h_add(1, i * 100 * MS + jb[i] * MS);
    }
    /* The last pair may wait for a later message to prove it optimal. */
    TU_CMP_U64(H.nsets, >=, 5);
    for (uint32_t i = 0; i < H.nsets; i++) {
        TU_EQ_U64(h_set(i)[0], a[i]);
        TU_EQ_U64(h_set(i)[1], b[i]);
    }
    h_finish();
}

/* Topic 1 loses frames 2 and 3: topic 0's frames 2 and 3 are dropped, the others pair up. */
static void test_core_dropped_frames(void)
{
    h_init(2, 10, 20 * MS);
    uint64_t a[7], b[7] = {0};
    for (int i = 0; i < 7; i++) {
        a[i] = h_add(0, i * 33 * MS);
        if (i != 2 && i != 3)
            b[i] = h_add(1, i * 33 * MS + 1 * MS);
    }
    h_add(0, 7 * 33 * MS);
    h_add(1, 7 * 33 * MS);
    TU_CMP_U64(H.nsets, >=, 5);
    static const int pairs[] = {0, 1, 4, 5, 6};
    for (uint32_t i = 0; i < 5; i++) {
        TU_EQ_U64(h_set(i)[0], a[pairs[i]]);
        TU_EQ_U64(h_set(i)[1], b[pairs[i]]);
    }
    TU_EQ_U64(H.discarded[a[2]], 1);
    TU_EQ_U64(H.discarded[a[3]], 1);
    h_finish();
}

/* Topic 1's message for time t arrives before topic 0's messages for earlier times. */
static void test_core_out_of_order_between_topics(void)
{
    h_init(2, 10, 0);
    uint64_t b1 = h_add(1, 100 * MS);
    uint64_t b2 = h_add(1, 200 * MS);
    TU_EQ_U64(H.nsets, 0);
    uint64_t a0 = h_add(0, 98 * MS);
    /* A later topic-0 message up to 100 ms could still come closer to b1. */
    TU_EQ_U64(H.nsets, 0);
    uint64_t a1 = h_add(0, 150 * MS);
    TU_EQ_U64(H.nsets, 1);
    TU_EQ_U64(h_set(0)[0], a0);
    TU_EQ_U64(h_set(0)[1], b1);
    TU_EQ_U64(H.discarded[a1], 0); /* b2 pivots now; a later topic-0 message may come closer */
    uint64_t a2 = h_add(0, 199 * MS);
    TU_EQ_U64(H.discarded[a1], 1); /* passed over: a2 is closer to b2 */
    TU_EQ_U64(H.nsets, 1);
    h_add(0, 250 * MS);
    TU_EQ_U64(H.nsets, 2);
    TU_EQ_U64(h_set(1)[0], a2);
    TU_EQ_U64(h_set(1)[1], b2);
    TU_EQ_U64(H.discarded[a1], 1);
    /* Within one topic, a stamp earlier than one seen is discarded at once. */
    uint64_t late = h_add(1, 180 * MS);
    TU_EQ_U64(H.discarded[late], 1);
    h_finish();
}

/* A burst on one topic beyond queue_size: the oldest are dropped and counted. */
static void test_core_burst(void)
{
    h_init(2, 4, 0);
    uint64_t a[10];
    for (int i = 0; i < 10; i++)
        a[i] = h_add(0, i * MS);
    TU_EQ_U64(H.discarded_per_topic[0], 6);
    for (int i = 0; i < 6; i++)
        TU_EQ_U64(H.discarded[a[i]], 1);
    TU_EQ_U64(ferry__sync_core_queued(H.core, 0), 4);
    h_add(1, 7 * MS);
    TU_EQ_U64(H.nsets, 1);
    TU_EQ_U64(h_set(0)[0], a[7]);
    TU_EQ_U64(H.discarded[a[6]], 1);
    h_finish();
}

/* Sets spanning more than max_interval are never emitted; the oldest head goes instead. */
static void test_core_max_interval(void)
{
    h_init(2, 10, 5 * MS);
    uint64_t a0 = h_add(0, 0);
    uint64_t b0 = h_add(1, 20 * MS);
    TU_EQ_U64(H.nsets, 0);
    TU_EQ_U64(H.discarded[a0], 1);
    uint64_t a1 = h_add(0, 22 * MS);
    TU_EQ_U64(H.nsets, 0); /* a topic-1 message up to 22 ms could still come */
    h_add(1, 40 * MS);
    TU_EQ_U64(H.nsets, 1);
    TU_EQ_U64(h_set(0)[0], a1);
    TU_EQ_U64(h_set(0)[1], b0);
    /* A long run of pseudo-random stamps: every set within the limit (checked by h_collect). */
    uint64_t x = 12345;
    int64_t t[2] = {100 * MS, 100 * MS};
    for (int i = 0; i < 2000; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t topic = (uint32_t)(x >> 63);
        t[topic] += (int64_t)((x >> 20) % (12 * MS));
        h_add(topic, t[topic]);
    }
    TU_CMP_U64(H.nsets, >, 10);
    h_finish();
}

static void test_core_topics(uint32_t n)
{
    h_init(n, 8, 10 * MS);
    uint64_t x = 99 + n;
    uint64_t expect = 0;
    for (int k = 0; k < 40; k++) {
        /* Each topic's message of frame k arrives in a shuffled order, with jitter < 4 ms; one
         * topic loses every seventh frame. */
        uint32_t order[FERRY_SYNC_MAX_TOPICS];
        for (uint32_t i = 0; i < n; i++)
            order[i] = i;
        for (uint32_t i = n - 1; i > 0; i--) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            uint32_t j = (uint32_t)((x >> 33) % (i + 1));
            uint32_t tmp = order[i];
            order[i] = order[j];
            order[j] = tmp;
        }
        for (uint32_t i = 0; i < n; i++) {
            if (order[i] == n - 1 && k % 7 == 3)
                continue;
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            h_add(order[i], k * 50 * MS + (int64_t)((x >> 40) % (4 * MS)));
        }
        if (k % 7 != 3)
            expect++;
    }
    /* The last frame may still wait to be proven optimal. */
    TU_CMP_U64(H.nsets, >=, expect - 1);
    for (uint32_t i = 0; i < H.nsets; i++) {
        const uint64_t *set = h_set(i);
        int64_t frame = H.stamp[set[0]] / (50 * MS);
        for (uint32_t t = 1; t < n; t++)
            TU_CMP_I64(H.stamp[set[t]] / (50 * MS), ==, frame);
    }
    h_finish();
}

static void test_core_3_topics(void)
{
    test_core_topics(3);
}

static void test_core_9_topics(void)
{
    test_core_topics(9);
}

/* --- over real subscribers ---------------------------------------------------------------- */

#define TYPE "sync_test/Stamped"
#define PERIOD_A ((int64_t)33333333) /* 30 Hz */
#define PERIOD_B (3 * PERIOD_A)      /* 10 Hz: every third 30 Hz tick */
#define JITTER (3 * MS)
#define MAX_INTERVAL (8 * MS)
#define RUN_NS (2 * TU_SEC)

typedef struct pub_role {
    const char *topic;
    int64_t period;
    uint64_t seed;
} pub_role;

static int publisher_main(void *arg)
{
    const pub_role *r = arg;
    ferry_node *node = tu_node("pub");
    ferry_publisher *pub = NULL;
    TU_OK(ferry_publisher_create(&pub, node, r->topic, TYPE, ferry_hash(TYPE), NULL));
    TU_OK(ferry_publisher_wait_subscribers(pub, 1, TU_WAIT_NS));
    uint64_t x = r->seed;
    int64_t end = ferry_now().ns + RUN_NS;
    int64_t tick = (ferry_now().ns / r->period + 1) * r->period;
    while (tick < end) {
        while (ferry_now().ns < tick)
            TU_OK(ferry_publisher_poll(pub, tick - ferry_now().ns));
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        int64_t stamp = tick + (int64_t)((x >> 33) % (2 * JITTER + 1)) - JITTER;
        void *p = NULL;
        TU_OK(ferry_loan(pub, sizeof stamp, &p));
        memcpy(p, &stamp, sizeof stamp);
        TU_OK(ferry_publish(pub, p, 0));
        tick += r->period;
    }
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    return 0;
}

static int64_t payload_stamp(void *arg, uint32_t index, const ferry_sample *s)
{
    (void)index;
    (*(uint64_t *)arg)++;
    int64_t v = 0;
    if (s->size >= sizeof v)
        memcpy(&v, s->data, sizeof v);
    return v;
}

static void test_sync_args(void)
{
    ferry_node *node = tu_node("sub");
    ferry_subscriber *subs[2] = {NULL, NULL};
    TU_OK(ferry_subscriber_create(&subs[0], node, "/sync/a", TYPE, ferry_hash(TYPE), NULL));
    TU_OK(ferry_subscriber_create(&subs[1], node, "/sync/b", TYPE, ferry_hash(TYPE), NULL));
    ferry_sync *sync = NULL;
    ferry_sync_options o;
    ferry_sync_options_init(&o);
    TU_EQ_U64(o.queue_size, 10);
    TU_ERR(ferry_sync_create(&sync, subs, 1, &o), FERRY_EINVAL);
    ferry_subscriber *twice[2] = {subs[0], subs[0]};
    TU_ERR(ferry_sync_create(&sync, twice, 2, &o), FERRY_EINVAL);
    o.max_interval_ns = -1;
    TU_ERR(ferry_sync_create(&sync, subs, 2, &o), FERRY_EINVAL);
    /* The subscribers hold at most 16 (their default): a queue of 16 could need 17. */
    o.max_interval_ns = 0;
    o.queue_size = 16;
    TU_ERR(ferry_sync_create(&sync, subs, 2, &o), FERRY_EINVAL);
    o.queue_size = 15;
    TU_OK(ferry_sync_create(&sync, subs, 2, &o));
    TU_OK(ferry_sync_destroy(sync));
    TU_OK(ferry_sync_create(&sync, subs, 2, NULL));
    ferry_sample set[2];
    TU_ERR(ferry_sync_take(sync, set), FERRY_EAGAIN);
    TU_ERR(ferry_sync_wait(sync, 0), FERRY_ENOTSUP);
    memset(set, 0, sizeof set);
    TU_ERR(ferry_sync_release(sync, set), FERRY_ESTATE);
    TU_OK(ferry_sync_destroy(sync));
    TU_OK(ferry_subscriber_destroy(subs[0]));
    TU_OK(ferry_subscriber_destroy(subs[1]));
    TU_OK(ferry_node_destroy(node));
}

/* In one process: a burst on one topic beyond queue_size is dropped (and released) by the
 * synchroniser, which never holds more than queue_size samples of a topic. */
static void test_sync_burst_local(void)
{
    ferry_node *node = tu_node("local");
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = 16;
    so.max_held = 8;
    ferry_publisher *pubs[2] = {NULL, NULL};
    ferry_subscriber *subs[2] = {NULL, NULL};
    const char *topics[2] = {"/sync/la", "/sync/lb"};
    for (int i = 0; i < 2; i++) {
        TU_OK(ferry_publisher_create(&pubs[i], node, topics[i], TYPE, ferry_hash(TYPE), NULL));
        TU_OK(ferry_subscriber_create(&subs[i], node, topics[i], TYPE, ferry_hash(TYPE), &so));
        tu_connect_local(pubs[i], 1, subs[i], 1);
    }
    ferry_sync_options o;
    ferry_sync_options_init(&o);
    o.queue_size = 3;
    ferry_sync *sync = NULL;
    TU_OK(ferry_sync_create(&sync, subs, 2, &o));
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        TU_OK(ferry_publish_copy(pubs[0], &v, sizeof v));
    ferry_sample set[2];
    TU_ERR(ferry_sync_take(sync, set), FERRY_EAGAIN);
    ferry_sync_stats st;
    TU_OK(ferry_sync_stats_get(sync, &st));
    TU_EQ_U64(st.received[0], 8);
    TU_EQ_U64(st.discarded[0], 5);
    TU_EQ_U64(st.held[0], 3);
    ferry_subscriber_stats ss;
    TU_OK(ferry_subscriber_stats_get(subs[0], &ss));
    TU_EQ_U64(ss.held, 3);
    /* A later sample on the other topic pairs with the latest of the burst. */
    TU_OK(ferry_publish_copy(pubs[1], &v, sizeof v));
    TU_OK(ferry_publish_copy(pubs[0], &v, sizeof v));
    TU_OK(ferry_sync_take(sync, set));
    TU_EQ_U64(set[0].sequence, 8);
    TU_EQ_U64(set[1].sequence, 1);
    TU_OK(ferry_sync_stats_get(sync, &st));
    TU_EQ_U64(st.discarded[0], 7);
    /* Destroy with the set still handed out: everything is released. */
    TU_OK(ferry_sync_destroy(sync));
    for (int i = 0; i < 2; i++) {
        TU_OK(ferry_subscriber_stats_get(subs[i], &ss));
        TU_EQ_U64(ss.held, 0);
        TU_OK(ferry_subscriber_destroy(subs[i]));
        TU_OK(ferry_publisher_destroy(pubs[i]));
    }
    TU_OK(ferry_node_destroy(node));
}

static void test_sync_two_publishers(void)
{
    ferry_node *node = tu_node("sub");
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = 8;
    so.max_held = 16;
    ferry_subscriber *subs[2] = {NULL, NULL};
    TU_OK(ferry_subscriber_create(&subs[0], node, "/sync/a", TYPE, ferry_hash(TYPE), &so));
    TU_OK(ferry_subscriber_create(&subs[1], node, "/sync/b", TYPE, ferry_hash(TYPE), &so));

    uint64_t stamps = 0;
    ferry_sync_options o;
    ferry_sync_options_init(&o);
    o.queue_size = 10;
    o.max_interval_ns = MAX_INTERVAL;
    o.stamp = payload_stamp;
    o.stamp_arg = &stamps;
    o.node = node;
    ferry_sync *sync = NULL;
    TU_OK(ferry_sync_create(&sync, subs, 2, &o));

    pub_role ra = {"/sync/a", PERIOD_A, 7};
    pub_role rb = {"/sync/b", PERIOD_B, 11};
    pid_t pa = tu_fork(publisher_main, &ra, 30);
    pid_t pb = tu_fork(publisher_main, &rb, 30);
    TU_OK(ferry_subscriber_wait_publishers(subs[0], 1, TU_WAIT_NS));
    TU_OK(ferry_subscriber_wait_publishers(subs[1], 1, TU_WAIT_NS));

    uint64_t got = 0;
    int64_t prev_b = INT64_MIN;
    ferry_time start = ferry_now();
    while (tu_since(start) < RUN_NS + TU_SEC) {
        ferry_err err = ferry_sync_wait(sync, 50 * MS);
        TU_CHECK_MSG(err == FERRY_OK || err == FERRY_ETIMEDOUT, "wait: %s", ferry_strerror(err));
        ferry_sample set[2];
        while ((err = ferry_sync_take(sync, set)) == FERRY_OK) {
            int64_t sa, sb;
            memcpy(&sa, set[0].data, sizeof sa);
            memcpy(&sb, set[1].data, sizeof sb);
            int64_t span = sa > sb ? sa - sb : sb - sa;
            TU_CMP_I64(span, <=, MAX_INTERVAL);
            TU_CMP_I64(sb, >, prev_b);
            prev_b = sb;
            got++;
            TU_OK(ferry_sync_release(sync, set));
            TU_ERR(ferry_sync_release(sync, set), FERRY_ESTATE);
        }
        TU_ERR(err, FERRY_EAGAIN);
    }
    TU_CHILD_OK(pa);
    TU_CHILD_OK(pb);

    ferry_sync_stats st;
    TU_OK(ferry_sync_stats_get(sync, &st));
    TU_EQ_U64(st.sets, st.taken);
    TU_EQ_U64(st.taken, got);
    /* About 20 frames of 10 Hz in 2 s; allow for a loaded machine. */
    TU_CMP_U64(got, >=, 8);
    TU_CMP_U64(st.received[0] + st.received[1], ==, stamps);
    /* Every 30 Hz sample not in a set was discarded or is still held. */
    TU_EQ_U64(st.received[0], got + st.discarded[0] + st.held[0]);
    TU_EQ_U64(st.received[1], got + st.discarded[1] + st.held[1]);
    TU_CMP_U64(st.discarded[0], >=, got);

    printf("    %" PRIu64 " sets; received %" PRIu64 " + %" PRIu64 ", discarded %" PRIu64
           " + %" PRIu64 "\n",
           got, st.received[0], st.received[1], st.discarded[0], st.discarded[1]);
    TU_OK(ferry_sync_destroy(sync));
    for (int i = 0; i < 2; i++) {
        ferry_subscriber_stats ss;
        TU_OK(ferry_subscriber_stats_get(subs[i], &ss));
        TU_EQ_U64(ss.held, 0);
        TU_OK(ferry_subscriber_destroy(subs[i]));
    }
    TU_OK(ferry_node_destroy(node));
}

int main(void)
{
    TU_RUN(test_core_args);
    TU_RUN(test_core_exact);
    TU_RUN(test_core_jitter);
    TU_RUN(test_core_dropped_frames);
    TU_RUN(test_core_out_of_order_between_topics);
    TU_RUN(test_core_burst);
    TU_RUN(test_core_max_interval);
    TU_RUN(test_core_3_topics);
    TU_RUN(test_core_9_topics);
    TU_RUN(test_sync_args);
    TU_RUN(test_sync_burst_local);
    TU_RUN(test_sync_two_publishers);
    return 0;
}
