/*
 * Endpoints that go away: a taken sample stays readable when its publisher is destroyed or
 * killed; a killed subscriber's chunks come back to the publisher; a publisher restarted after
 * SIGKILL is found again; ferry_clean removes what the dead left.
 */
#include "testutil.h"

#include <signal.h>
#include <sys/wait.h>

#define TYPE "test/lifecycle"
#define SIZE ((size_t)1 << 20)

enum { MSG_READY = 1, MSG_PUBLISHED, MSG_TAKEN, MSG_GONE, MSG_HOLDING, MSG_DONE };

typedef struct peer {
    tu_pipe to_pub, to_sub;
    bool destroy_after_taken; /* publisher: destroy itself once told MSG_TAKEN */
    int publish;              /* samples to publish */
} peer;

static int publisher_main(void *arg)
{
    peer *p = arg;
    ferry_node *node = tu_node("lcpub");
    ferry_publisher *pub = NULL;
    TU_OK(ferry_publisher_create(&pub, node, "/lc", TYPE, ferry_hash(TYPE), NULL));
    TU_OK(ferry_publisher_wait_subscribers(pub, 1, TU_WAIT_NS));
    TU_EQ_U64(tu_serve_until(&pub, 1, &p->to_pub, TU_WAIT_MS), MSG_READY);
    for (int i = 1; i <= p->publish; i++)
        tu_publish_pattern(pub, SIZE, (uint64_t)i);
    tu_send(&p->to_sub, MSG_PUBLISHED);
    uint64_t m = tu_serve_until(&pub, 1, &p->to_pub, 50000);
    if (p->destroy_after_taken) {
        TU_EQ_U64(m, MSG_TAKEN);
    } else {
        TU_EQ_U64(m, MSG_DONE);
    }
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    tu_send(&p->to_sub, MSG_GONE);
    return 0;
}

static ferry_subscriber *make_sub(ferry_node *node, uint32_t depth)
{
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = depth;
    ferry_subscriber *sub = NULL;
    TU_OK(ferry_subscriber_create(&sub, node, "/lc", TYPE, ferry_hash(TYPE), &so));
    return sub;
}

static void take_now(ferry_subscriber *sub, ferry_sample *s, uint64_t seq)
{
    ferry_err e = ferry_take(sub, s);
    if (e == FERRY_EAGAIN) {
        TU_OK(ferry_wait(sub, TU_WAIT_NS));
        e = ferry_take(sub, s);
    }
    TU_OK(e);
    TU_EQ_U64(s->sequence, seq);
    TU_SAMPLE_INTACT(s, SIZE);
}

/* Runs the subscriber's housekeeping until its publisher is gone; samples still queued from it
 * may come out meanwhile and must be intact. */
static void wait_publisher_lost(ferry_subscriber *sub)
{
    ferry_time t0 = ferry_now();
    ferry_subscriber_stats st;
    for (;;) {
        ferry_sample s;
        ferry_err e = ferry_take(sub, &s);
        if (e == FERRY_OK) {
            TU_SAMPLE_INTACT(&s, SIZE);
            TU_OK(ferry_release(sub, &s));
        } else {
            TU_ERR(e, FERRY_EAGAIN);
            e = ferry_wait(sub, 10 * TU_MS);
            TU_CHECK_MSG(e == FERRY_OK || e == FERRY_ETIMEDOUT, "ferry_wait: %s",
                         ferry_strerror(e));
        }
        TU_OK(ferry_subscriber_stats_get(sub, &st));
        if (st.publishers == 0 && st.publishers_lost >= 1)
            break;
        TU_CHECK_MSG(tu_since(t0) < TU_WAIT_NS,
                     "publisher still counted after 10 s: publishers %u, lost %llu", st.publishers,
                     (unsigned long long)st.publishers_lost);
    }
    TU_EQ_U64(st.publishers_lost, 1);
}

static void held_sample_survives(bool kill_publisher)
{
    peer p;
    p.to_pub = tu_pipe_make();
    p.to_sub = tu_pipe_make();
    p.destroy_after_taken = !kill_publisher;
    p.publish = 2;
    pid_t child = tu_fork(publisher_main, &p, 60);
    ferry_node *node = tu_node("lcsub");
    ferry_subscriber *sub = make_sub(node, 4);
    TU_OK(ferry_subscriber_wait_publishers(sub, 1, TU_WAIT_NS));
    tu_send(&p.to_pub, MSG_READY);
    TU_EQ_U64(tu_recv(&p.to_sub, TU_WAIT_MS), MSG_PUBLISHED);
    ferry_sample held;
    take_now(sub, &held, 1);

    if (kill_publisher) {
        TU_CHECK(kill(child, SIGKILL) == 0);
        int st = tu_wait_status(child, TU_WAIT_MS);
        TU_CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    } else {
        tu_send(&p.to_pub, MSG_TAKEN);
        TU_EQ_U64(tu_recv(&p.to_sub, TU_WAIT_MS), MSG_GONE);
        TU_CHILD_OK(child);
    }
    wait_publisher_lost(sub);
    /* The publisher is gone; what we hold is still there, unchanged. */
    TU_SAMPLE_INTACT(&held, SIZE);
    TU_EQ_U64(held.sequence, 1);
    TU_OK(ferry_release(sub, &held));
    ferry_sample s;
    TU_ERR(ferry_take(sub, &s), FERRY_EAGAIN);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
    tu_check_no_mappings();

    if (kill_publisher) {
        uint32_t removed = 0;
        TU_OK(ferry_clean(tu_dir(), tu_domain(), &removed));
        TU_EQ_U64(tu_domain_files(), 0);
    }
}

static void test_publisher_destroyed_while_held(void)
{
    held_sample_survives(false);
}

static void test_publisher_killed_while_held(void)
{
    held_sample_survives(true);
}

static int holding_subscriber(void *arg)
{
    peer *p = arg;
    ferry_node *node = tu_node("holder");
    ferry_subscriber *sub = make_sub(node, 8);
    TU_OK(ferry_subscriber_wait_publishers(sub, 1, TU_WAIT_NS));
    tu_send(&p->to_pub, MSG_READY);
    ferry_sample a, b;
    take_now(sub, &a, 1);
    take_now(sub, &b, 2);
    tu_send(&p->to_pub, MSG_HOLDING);
    tu_recv(&p->to_sub, 50000); /* killed before anything comes */
    return 1;
}

static void test_subscriber_killed(void)
{
    peer p;
    p.to_pub = tu_pipe_make();
    p.to_sub = tu_pipe_make();
    pid_t child = tu_fork(holding_subscriber, &p, 60);
    ferry_node *node = tu_node("lcpub");
    ferry_publisher *pub = NULL;
    TU_OK(ferry_publisher_create(&pub, node, "/lc", TYPE, ferry_hash(TYPE), NULL));
    TU_OK(ferry_publisher_wait_subscribers(pub, 1, TU_WAIT_NS));
    TU_EQ_U64(tu_serve_until(&pub, 1, &p.to_pub, TU_WAIT_MS), MSG_READY);
    for (uint64_t seq = 1; seq <= 5; seq++)
        tu_publish_pattern(pub, SIZE, seq);
    TU_EQ_U64(tu_serve_until(&pub, 1, &p.to_pub, TU_WAIT_MS), MSG_HOLDING);
    ferry_publisher_stats st;
    TU_OK(ferry_publisher_stats_get(pub, &st));
    TU_EQ_U64(st.chunks_in_use, 5); /* two held, three queued */

    TU_CHECK(kill(child, SIGKILL) == 0);
    int ws = tu_wait_status(child, TU_WAIT_MS);
    TU_CHECK(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL);

    ferry_time t0 = ferry_now();
    for (;;) {
        TU_OK(ferry_publisher_poll(pub, 5 * TU_MS));
        TU_OK(ferry_publisher_stats_get(pub, &st));
        if (st.subscribers == 0 && st.chunks_in_use == 0)
            break;
        TU_CHECK_MSG(tu_since(t0) < TU_WAIT_NS, "after 10 s: %u subscribers, %u chunks in use",
                     st.subscribers, st.chunks_in_use);
    }
    TU_EQ_U64(st.subscribers_lost, 1);
    TU_CMP_U64(st.chunks_reclaimed, >=, 2);
    TU_CMP_U64(st.chunks_reclaimed, <=, 5);
    TU_EQ_U64(st.chunks_free, st.chunks_total);
    /* The chunks are usable again. */
    void *loan = NULL;
    TU_OK(ferry_loan(pub, SIZE, &loan));
    TU_OK(ferry_loan_release(pub, loan));
    TU_OK(ferry_publisher_stats_get(pub, &st));
    TU_CMP_U64(st.chunks_total, <=, 6);

    int alive = -1;
    TU_EQ_U64(tu_inspect_count("/lc", &alive), 2);
    TU_EQ_U64(alive, 1);
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
    uint32_t removed = 0;
    TU_OK(ferry_clean(tu_dir(), tu_domain(), &removed));
    TU_CMP_U64(removed, >=, 1);
}

static void test_restart_after_kill(void)
{
    peer first;
    first.to_pub = tu_pipe_make();
    first.to_sub = tu_pipe_make();
    first.destroy_after_taken = false;
    first.publish = 1;
    pid_t a = tu_fork(publisher_main, &first, 60);
    ferry_node *node = tu_node("lcsub");
    ferry_subscriber *sub = make_sub(node, 4);
    TU_OK(ferry_subscriber_wait_publishers(sub, 1, TU_WAIT_NS));
    tu_send(&first.to_pub, MSG_READY);
    TU_EQ_U64(tu_recv(&first.to_sub, TU_WAIT_MS), MSG_PUBLISHED);
    ferry_sample s;
    take_now(sub, &s, 1);
    uint64_t first_id = s.publisher_id;
    TU_OK(ferry_release(sub, &s));
    TU_CHECK(kill(a, SIGKILL) == 0);
    int st = tu_wait_status(a, TU_WAIT_MS);
    TU_CHECK(WIFSIGNALED(st));
    wait_publisher_lost(sub);

    /* A new publisher on the same topic, with the dead one's files still there. */
    peer second;
    second.to_pub = tu_pipe_make();
    second.to_sub = tu_pipe_make();
    second.destroy_after_taken = false;
    second.publish = 1;
    pid_t b = tu_fork(publisher_main, &second, 60);
    TU_OK(ferry_subscriber_wait_publishers(sub, 1, TU_WAIT_NS));
    tu_send(&second.to_pub, MSG_READY);
    TU_EQ_U64(tu_recv(&second.to_sub, TU_WAIT_MS), MSG_PUBLISHED);
    take_now(sub, &s, 1);
    TU_CHECK(s.publisher_id != first_id);
    TU_OK(ferry_release(sub, &s));
    tu_send(&second.to_pub, MSG_DONE);
    TU_EQ_U64(tu_recv(&second.to_sub, TU_WAIT_MS), MSG_GONE);
    TU_CHILD_OK(b);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
    uint32_t removed = 0;
    TU_OK(ferry_clean(tu_dir(), tu_domain(), &removed));
}

int main(void)
{
    TU_RUN(test_publisher_destroyed_while_held);
    TU_RUN(test_publisher_killed_while_held);
    TU_RUN(test_subscriber_killed);
    TU_RUN(test_restart_after_kill);
    return 0;
}
