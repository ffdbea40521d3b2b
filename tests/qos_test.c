/*
 * Quality of service: drop-oldest overflow counts exactly what it dropped, a blocking subscriber
 * holds the publisher back for block_timeout_ns and no longer, an exhausted pool fails at once or
 * after the timeout, a chunk coming back from another process unblocks a waiting loan, and a
 * subscriber that requires reliability or durability connects only to publishers that offer it.
 */
#include "testutil.h"

#include <string.h>

#define TYPE "test/qos"
#define MARGIN_NS (1500 * TU_MS)

enum { MSG_READY = 1, MSG_PUBLISHED, MSG_GO, MSG_TAKEN, MSG_HOLDING, MSG_DONE };

typedef struct peer {
    tu_pipe to_pub, to_sub;
} peer;

static peer make_peer(void)
{
    peer p;
    p.to_pub = tu_pipe_make();
    p.to_sub = tu_pipe_make();
    return p;
}

static ferry_subscriber *make_sub(ferry_node *node, const char *topic, uint32_t depth,
                                  ferry_overflow overflow)
{
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = depth;
    so.overflow = overflow;
    ferry_subscriber *sub = NULL;
    TU_OK(ferry_subscriber_create(&sub, node, topic, TYPE, ferry_hash(TYPE), &so));
    TU_OK(ferry_subscriber_wait_publishers(sub, 1, TU_WAIT_NS));
    return sub;
}

static void take_expect(ferry_subscriber *sub, uint64_t seq, size_t size)
{
    ferry_sample s;
    ferry_err e = ferry_take(sub, &s);
    if (e == FERRY_EAGAIN) {
        TU_OK(ferry_wait(sub, TU_WAIT_NS));
        e = ferry_take(sub, &s);
    }
    TU_OK(e);
    TU_EQ_U64(s.sequence, seq);
    TU_SAMPLE_INTACT(&s, size);
    TU_OK(ferry_release(sub, &s));
}

static void end_sub(ferry_node *node, ferry_subscriber *sub)
{
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
}

/* Runs the publisher's housekeeping until no chunk is referenced any more. */
static void wait_chunks_back(ferry_publisher *pub)
{
    ferry_time t0 = ferry_now();
    ferry_publisher_stats st;
    for (;;) {
        TU_OK(ferry_publisher_poll(pub, 2 * TU_MS));
        TU_OK(ferry_publisher_stats_get(pub, &st));
        if (st.chunks_in_use == 0)
            break;
        TU_CHECK_MSG(tu_since(t0) < TU_WAIT_NS, "%u chunks still in use after 10 s",
                     st.chunks_in_use);
    }
    TU_EQ_U64(st.chunks_total, st.chunks_free + st.chunks_loaned);
}

/* --- drop oldest -------------------------------------------------------------------------- */

static int drop_subscriber(void *arg)
{
    peer *p = arg;
    ferry_node *node = tu_node("dropsub");
    ferry_subscriber *sub = make_sub(node, "/drop", 2, FERRY_OVERFLOW_DROP_OLDEST);
    tu_send(&p->to_pub, MSG_READY);
    TU_EQ_U64(tu_recv(&p->to_sub, TU_WAIT_MS), MSG_PUBLISHED);

    take_expect(sub, 9, 1000);
    take_expect(sub, 10, 1000);
    ferry_sample s;
    TU_ERR(ferry_take(sub, &s), FERRY_EAGAIN);
    ferry_subscriber_stats st;
    TU_OK(ferry_subscriber_stats_get(sub, &st));
    TU_EQ_U64(st.dropped, 8);
    TU_EQ_U64(st.received, 2);
    tu_send(&p->to_pub, MSG_DONE);
    end_sub(node, sub);
    return 0;
}

static void test_drop_oldest(void)
{
    peer p = make_peer();
    pid_t child = tu_fork(drop_subscriber, &p, 60);
    ferry_node *node = tu_node("droppub");
    ferry_publisher *pub = NULL;
    TU_OK(ferry_publisher_create(&pub, node, "/drop", TYPE, ferry_hash(TYPE), NULL));
    TU_OK(ferry_publisher_wait_subscribers(pub, 1, TU_WAIT_NS));
    TU_EQ_U64(tu_serve_until(&pub, 1, &p.to_pub, TU_WAIT_MS), MSG_READY);

    for (uint64_t seq = 1; seq <= 10; seq++)
        tu_publish_pattern(pub, 1000, seq);
    ferry_publisher_stats st;
    TU_OK(ferry_publisher_stats_get(pub, &st));
    TU_EQ_U64(st.published, 10);
    TU_EQ_U64(st.deliveries, 10);
    TU_EQ_U64(st.dropped, 8);
    tu_send(&p.to_sub, MSG_PUBLISHED);

    TU_EQ_U64(tu_serve_until(&pub, 1, &p.to_pub, TU_WAIT_MS), MSG_DONE);
    TU_OK(ferry_publisher_stats_get(pub, &st));
    TU_EQ_U64(st.dropped, 8);
    wait_chunks_back(pub);
    TU_CHILD_OK(child);
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
}

/* --- block -------------------------------------------------------------------------------- */

static int block_subscriber(void *arg)
{
    peer *p = arg;
    ferry_node *node = tu_node("blocksub");
    ferry_subscriber *sub = make_sub(node, "/block", 1, FERRY_OVERFLOW_BLOCK);
    tu_send(&p->to_pub, MSG_READY);
    TU_EQ_U64(tu_recv(&p->to_sub, 30000), MSG_GO);
    take_expect(sub, 1, 4096);
    tu_send(&p->to_pub, MSG_TAKEN);
    take_expect(sub, 2, 4096);
    ferry_subscriber_stats st;
    TU_OK(ferry_subscriber_stats_get(sub, &st));
    TU_EQ_U64(st.dropped, 0);
    TU_EQ_U64(st.received, 2);
    tu_send(&p->to_pub, MSG_DONE);
    end_sub(node, sub);
    return 0;
}

static void test_block_policy(void)
{
    const int64_t timeout = 200 * TU_MS;
    peer p = make_peer();
    pid_t child = tu_fork(block_subscriber, &p, 60);
    ferry_node *node = tu_node("blockpub");
    ferry_publisher_options po;
    ferry_publisher_options_init(&po);
    po.block_timeout_ns = timeout;
    po.admit_blocking = true;
    ferry_publisher *pub = NULL;
    TU_OK(ferry_publisher_create(&pub, node, "/block", TYPE, ferry_hash(TYPE), &po));
    TU_OK(ferry_publisher_wait_subscribers(pub, 1, TU_WAIT_NS));
    TU_EQ_U64(tu_serve_until(&pub, 1, &p.to_pub, TU_WAIT_MS), MSG_READY);

    tu_publish_pattern(pub, 4096, 1);

    /* The queue (depth 1) is full and the subscriber does not take: publish gives up. */
    void *loan = NULL;
    TU_OK(ferry_loan(pub, 4096, &loan));
    tu_fill(loan, 4096, 2);
    ferry_time t0 = ferry_now();
    TU_ERR(ferry_publish(pub, loan, 0), FERRY_ETIMEDOUT);
    int64_t elapsed = tu_since(t0);
    TU_CMP_I64(elapsed, >=, timeout);
    TU_CMP_I64(elapsed, <, timeout + MARGIN_NS);
    ferry_publisher_stats st;
    TU_OK(ferry_publisher_stats_get(pub, &st));
    TU_EQ_U64(st.published, 1);
    TU_EQ_U64(st.dropped, 0);
    TU_EQ_U64(st.chunks_loaned, 1);
    /* The loan is still the caller's. */
    TU_OK(ferry_loan_release(pub, loan));
    TU_OK(ferry_publisher_stats_get(pub, &st));
    TU_EQ_U64(st.chunks_loaned, 0);

    /* Again, then publish the same loan once the subscriber made room. */
    TU_OK(ferry_loan(pub, 4096, &loan));
    tu_fill(loan, 4096, 2);
    t0 = ferry_now();
    TU_ERR(ferry_publish(pub, loan, 0), FERRY_ETIMEDOUT);
    TU_CMP_I64(tu_since(t0), >=, timeout);
    tu_send(&p.to_sub, MSG_GO);
    TU_EQ_U64(tu_serve_until(&pub, 1, &p.to_pub, TU_WAIT_MS), MSG_TAKEN);
    TU_OK(ferry_publish(pub, loan, 0));
    TU_EQ_U64(tu_serve_until(&pub, 1, &p.to_pub, TU_WAIT_MS), MSG_DONE);

    TU_OK(ferry_publisher_stats_get(pub, &st));
    TU_EQ_U64(st.published, 2);
    TU_EQ_U64(st.deliveries, 2);
    TU_EQ_U64(st.dropped, 0);
    wait_chunks_back(pub);
    TU_CHILD_OK(child);
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
}

/* --- pool exhausted ------------------------------------------------------------------------ */

static void test_pool_exhausted(void)
{
    ferry_node *node = tu_node("pool");
    ferry_publisher_options po;
    ferry_publisher *pub = NULL;
    void *loans[32];
    ferry_publisher_stats st;

    /* Byte cap: 1 MiB holds at most four 256 KiB chunks. */
    ferry_publisher_options_init(&po);
    po.pool_bytes = 1 << 20;
    po.max_sample_size = 256 << 10;
    TU_OK(ferry_publisher_create(&pub, node, "/pool/bytes", TYPE, ferry_hash(TYPE), &po));
    int n = 0;
    ferry_err e = FERRY_OK;
    while (n < 16 && (e = ferry_loan(pub, 256 << 10, &loans[n])) == FERRY_OK) {
        memset(loans[n], n, 256 << 10);
        n++;
    }
    TU_ERR(e, FERRY_EPOOL);
    TU_CMP_I64(n, >=, 1);
    TU_CMP_I64(n, <=, 4);
    TU_OK(ferry_publisher_stats_get(pub, &st));
    TU_EQ_U64(st.chunks_loaned, n);
    TU_EQ_U64(st.pool_bytes_cap, 1 << 20);
    TU_CMP_U64(st.pool_bytes, <=, st.pool_bytes_cap);
    uint64_t carved = st.pool_bytes;
    /* A smaller loan does not squeeze past the cap either when no chunk is free. */
    void *small = NULL;
    e = ferry_loan(pub, 64, &small);
    if (e == FERRY_OK)
        TU_OK(ferry_loan_release(pub, small));
    else
        TU_ERR(e, FERRY_EPOOL);
    for (int i = 0; i < n; i++)
        TU_OK(ferry_loan_release(pub, loans[i]));
    /* Released chunks are loaned again; the pool does not grow. */
    TU_OK(ferry_loan(pub, 256 << 10, &loans[0]));
    TU_OK(ferry_publisher_stats_get(pub, &st));
    TU_CMP_U64(st.pool_bytes, <=, carved + (64 << 10));
    TU_CMP_U64(st.pool_bytes, <=, st.pool_bytes_cap);
    TU_OK(ferry_loan_release(pub, loans[0]));
    TU_OK(ferry_publisher_destroy(pub));

    /* Chunk cap: exactly max_chunks loans, then FERRY_EPOOL at once. */
    ferry_publisher_options_init(&po);
    po.max_chunks = 3;
    TU_OK(ferry_publisher_create(&pub, node, "/pool/chunks", TYPE, ferry_hash(TYPE), &po));
    for (int i = 0; i < 3; i++)
        TU_OK(ferry_loan(pub, 64, &loans[i]));
    ferry_time t0 = ferry_now();
    TU_ERR(ferry_loan(pub, 64, &loans[3]), FERRY_EPOOL);
    TU_CMP_I64(tu_since(t0), <, 50 * TU_MS);
    TU_OK(ferry_publisher_stats_get(pub, &st));
    TU_EQ_U64(st.chunks_total, 3);
    TU_EQ_U64(st.chunks_loaned, 3);
    TU_EQ_U64(st.chunks_free, 0);
    /* Publishing with no subscriber gives the chunk straight back. */
    TU_OK(ferry_publish(pub, loans[0], 0));
    TU_OK(ferry_loan(pub, 64, &loans[0]));
    for (int i = 0; i < 3; i++)
        TU_OK(ferry_loan_release(pub, loans[i]));
    TU_OK(ferry_publisher_destroy(pub));

    /* FERRY_POOL_BLOCK: waits block_timeout_ns, then FERRY_ETIMEDOUT. */
    const int64_t timeout = 150 * TU_MS;
    ferry_publisher_options_init(&po);
    po.max_chunks = 2;
    po.on_pool_exhausted = FERRY_POOL_BLOCK;
    po.block_timeout_ns = timeout;
    TU_OK(ferry_publisher_create(&pub, node, "/pool/block", TYPE, ferry_hash(TYPE), &po));
    TU_OK(ferry_loan(pub, 4096, &loans[0]));
    TU_OK(ferry_loan(pub, 4096, &loans[1]));
    t0 = ferry_now();
    TU_ERR(ferry_loan(pub, 4096, &loans[2]), FERRY_ETIMEDOUT);
    int64_t elapsed = tu_since(t0);
    TU_CMP_I64(elapsed, >=, timeout);
    TU_CMP_I64(elapsed, <, timeout + MARGIN_NS);
    TU_OK(ferry_loan_release(pub, loans[1]));
    t0 = ferry_now();
    TU_OK(ferry_loan(pub, 4096, &loans[1]));
    TU_CMP_I64(tu_since(t0), <, timeout); /* a free chunk is loaned without waiting */
    TU_OK(ferry_loan_release(pub, loans[0]));
    TU_OK(ferry_loan_release(pub, loans[1]));
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
}

/* --- a chunk coming back unblocks a loan ----------------------------------------------------- */

static int holding_subscriber(void *arg)
{
    peer *p = arg;
    ferry_node *node = tu_node("holder");
    ferry_subscriber *sub = make_sub(node, "/pool/return", 4, FERRY_OVERFLOW_DROP_OLDEST);
    tu_send(&p->to_pub, MSG_READY);
    ferry_sample held[2];
    for (int i = 0; i < 2; i++) {
        ferry_err e = ferry_take(sub, &held[i]);
        if (e == FERRY_EAGAIN) {
            TU_OK(ferry_wait(sub, TU_WAIT_NS));
            e = ferry_take(sub, &held[i]);
        }
        TU_OK(e);
        TU_EQ_U64(held[i].sequence, (uint64_t)i + 1);
        TU_SAMPLE_INTACT(&held[i], 512);
    }
    tu_send(&p->to_pub, MSG_HOLDING);
    TU_EQ_U64(tu_recv(&p->to_sub, TU_WAIT_MS), MSG_GO);
    /* Let the publisher get stuck in ferry_loan first. */
    tu_sleep_ns(100 * TU_MS);
    ferry_time released = ferry_now();
    TU_OK(ferry_release(sub, &held[0]));
    tu_send(&p->to_pub, (uint64_t)released.ns);
    take_expect(sub, 3, 512);
    TU_OK(ferry_release(sub, &held[1]));
    tu_send(&p->to_pub, MSG_DONE);
    end_sub(node, sub);
    return 0;
}

static void test_returned_chunk_unblocks_loan(void)
{
    peer p = make_peer();
    pid_t child = tu_fork(holding_subscriber, &p, 60);
    ferry_node *node = tu_node("blocked");
    ferry_publisher_options po;
    ferry_publisher_options_init(&po);
    po.max_chunks = 2;
    po.on_pool_exhausted = FERRY_POOL_BLOCK;
    po.block_timeout_ns = TU_WAIT_NS;
    po.max_chunks_per_subscriber = 2; /* the subscriber may hold the whole pool */
    ferry_publisher *pub = NULL;
    TU_OK(ferry_publisher_create(&pub, node, "/pool/return", TYPE, ferry_hash(TYPE), &po));
    TU_OK(ferry_publisher_wait_subscribers(pub, 1, TU_WAIT_NS));
    TU_EQ_U64(tu_serve_until(&pub, 1, &p.to_pub, TU_WAIT_MS), MSG_READY);
    tu_publish_pattern(pub, 512, 1);
    tu_publish_pattern(pub, 512, 2);
    TU_EQ_U64(tu_serve_until(&pub, 1, &p.to_pub, TU_WAIT_MS), MSG_HOLDING);
    ferry_publisher_stats st;
    TU_OK(ferry_publisher_stats_get(pub, &st));
    TU_EQ_U64(st.chunks_in_use, 2);
    TU_EQ_U64(st.chunks_free, 0);

    void *loan = NULL;
    ferry_time t0 = ferry_now();
    tu_send(&p.to_sub, MSG_GO);
    TU_OK(ferry_loan(pub, 512, &loan));
    ferry_time t1 = ferry_now();
    int64_t released = (int64_t)tu_recv(&p.to_pub, TU_WAIT_MS);
    TU_CMP_I64(t1.ns, >=, released);
    TU_CMP_I64(released - t0.ns, >=, 100 * TU_MS);
    TU_CMP_I64(t1.ns - released, <, MARGIN_NS);
    tu_fill(loan, 512, 3);
    TU_OK(ferry_publish(pub, loan, 0));
    TU_EQ_U64(tu_serve_until(&pub, 1, &p.to_pub, TU_WAIT_MS), MSG_DONE);
    wait_chunks_back(pub);
    TU_CHILD_OK(child);
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
}

/* --- required policies ------------------------------------------------------------------- */

/* A subscriber requiring `require` of a publisher with best_effort and history: both sides run
 * their housekeeping until the subscriber connected (want_connected) or was refused. */
static void match_case(uint32_t require, bool best_effort, uint32_t history, bool want_connected)
{
    ferry_node *node = tu_node("match");
    ferry_publisher_options po;
    ferry_publisher_options_init(&po);
    po.best_effort = best_effort;
    po.history = history;
    ferry_publisher *pub = NULL;
    TU_OK(ferry_publisher_create(&pub, node, "/match", TYPE, ferry_hash(TYPE), &po));
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.require = require;
    ferry_subscriber *sub = NULL;
    TU_OK(ferry_subscriber_create(&sub, node, "/match", TYPE, ferry_hash(TYPE), &so));
    ferry_publisher_stats ps;
    ferry_subscriber_stats ss;
    ferry_time t0 = ferry_now();
    for (;;) {
        TU_OK(ferry_publisher_poll(pub, TU_MS));
        ferry_err e = ferry_subscriber_wait_publishers(sub, 1, TU_MS);
        TU_CHECK(e == FERRY_OK || e == FERRY_ETIMEDOUT);
        TU_OK(ferry_publisher_stats_get(pub, &ps));
        TU_OK(ferry_subscriber_stats_get(sub, &ss));
        if ((want_connected && ss.publishers == 1 && ps.subscribers == 1) ||
            (!want_connected && ss.incompatible == 1))
            break;
        TU_CHECK_MSG(tu_since(t0) < TU_WAIT_NS, "neither connected nor refused after 10 s");
    }
    if (want_connected) {
        TU_EQ_U64(ss.incompatible, 0);
        TU_EQ_U64(ps.incompatible, 0);
    } else {
        /* Refused for good: never connected, counted on both sides with the policy it lacked,
         * and not tried again. */
        uint32_t lacking = require & ~((best_effort ? 0u : (uint32_t)FERRY_QOS_RELIABLE) |
                                       (history ? (uint32_t)FERRY_QOS_DURABLE : 0u));
        TU_EQ_U64(ss.incompatible_policies, lacking);
        for (int i = 0; i < 50; i++) {
            TU_OK(ferry_publisher_poll(pub, TU_MS));
            ferry_subscriber_wait_publishers(sub, 1, TU_MS);
        }
        TU_OK(ferry_publisher_stats_get(pub, &ps));
        TU_OK(ferry_subscriber_stats_get(sub, &ss));
        TU_EQ_U64(ss.publishers, 0);
        TU_EQ_U64(ps.subscribers, 0);
        TU_EQ_U64(ss.incompatible, 1);
        TU_EQ_U64(ps.incompatible, 1);
        TU_EQ_U64(ps.incompatible_policies, lacking);
        void *p = NULL;
        TU_OK(ferry_loan(pub, 64, &p));
        TU_OK(ferry_publish(pub, p, 0));
        TU_OK(ferry_publisher_stats_get(pub, &ps));
        TU_EQ_U64(ps.deliveries, 0);
        ferry_sample s;
        TU_ERR(ferry_take(sub, &s), FERRY_EAGAIN);
    }
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
}

static void test_required_policies(void)
{
    match_case(0, true, 0, true);                                       /* requires nothing */
    match_case(FERRY_QOS_RELIABLE, false, 0, true);                     /* the default offer */
    match_case(FERRY_QOS_RELIABLE, true, 0, false);                     /* best effort */
    match_case(FERRY_QOS_DURABLE, false, 0, false);                     /* no history */
    match_case(FERRY_QOS_DURABLE | FERRY_QOS_RELIABLE, false, 4, true); /* history kept */
    match_case(FERRY_QOS_DURABLE | FERRY_QOS_RELIABLE, true, 0, false); /* lacks both */
    ferry_node *node = tu_node("match");
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.require = 4; /* no such policy */
    ferry_subscriber *sub = NULL;
    TU_ERR(ferry_subscriber_create(&sub, node, "/match", TYPE, ferry_hash(TYPE), &so),
           FERRY_EINVAL);
    TU_OK(ferry_node_destroy(node));
}

int main(void)
{
    TU_RUN(test_drop_oldest);
    TU_RUN(test_block_policy);
    TU_RUN(test_pool_exhausted);
    TU_RUN(test_returned_chunk_unblocks_loan);
    TU_RUN(test_required_policies);
    return 0;
}
