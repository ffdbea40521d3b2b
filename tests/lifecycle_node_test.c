/*
 * Lifecycle node (lifecycle.h): every valid transition and every invalid one, callbacks and
 * their failures, managed publishers that refuse loans unless active, managed subscribers that
 * are skipped by an external publisher while paused (nothing received, nothing dropped on
 * either side), and cleanup that gives back every descriptor, mapping and endpoint.
 */
#include "testutil.h"

#include <ferry/lifecycle.h>

#include "core/core.h"

#include <unistd.h>

#define TYPE "test/lifecycle_node"
#define SIZE 4096

/* ---- callbacks that count and can be told to fail ---------------------------------------- */

typedef struct calls {
    int configure, activate, deactivate, cleanup, shutdown;
    ferry_err fail_configure, fail_activate, fail_deactivate, fail_cleanup, fail_shutdown;
    ferry_lifecycle_state seen; /* state during the last callback */
    ferry_err nested;           /* a transition tried from inside a callback */
    /* on_configure creates a transient publisher when set */
    bool create_in_configure;
    ferry_publisher *transient;
} calls;

static ferry_err cb_common(calls *c, ferry_lifecycle *lc)
{
    c->seen = ferry_lifecycle_state_get(lc);
    c->nested = ferry_lifecycle_shutdown(lc);
    return FERRY_OK;
}

static ferry_err on_configure(void *arg, ferry_lifecycle *lc)
{
    calls *c = arg;
    c->configure++;
    cb_common(c, lc);
    if (c->create_in_configure) {
        ferry_err err = ferry_lifecycle_publisher(lc, "/lcn/transient", TYPE, ferry_hash(TYPE),
                                                  NULL, 0, 0, &c->transient);
        if (err)
            return err;
    }
    return c->fail_configure;
}
static ferry_err on_activate(void *arg, ferry_lifecycle *lc)
{
    calls *c = arg;
    c->activate++;
    cb_common(c, lc);
    return c->fail_activate;
}
static ferry_err on_deactivate(void *arg, ferry_lifecycle *lc)
{
    calls *c = arg;
    c->deactivate++;
    cb_common(c, lc);
    return c->fail_deactivate;
}
static ferry_err on_cleanup(void *arg, ferry_lifecycle *lc)
{
    calls *c = arg;
    c->cleanup++;
    cb_common(c, lc);
    return c->fail_cleanup;
}
static ferry_err on_shutdown(void *arg, ferry_lifecycle *lc)
{
    calls *c = arg;
    c->shutdown++;
    cb_common(c, lc);
    return c->fail_shutdown;
}

static ferry_lifecycle *make_lc(ferry_node *node, calls *c)
{
    ferry_lifecycle_callbacks cb = {on_configure, on_activate, on_deactivate,
                                    on_cleanup,   on_shutdown, c};
    ferry_lifecycle *lc = NULL;
    TU_OK(ferry_lifecycle_create(&lc, node, &cb));
    TU_EQ_U64(ferry_lifecycle_state_get(lc), FERRY_LIFECYCLE_UNCONFIGURED);
    return lc;
}

#define STATE(lc, s) TU_EQ_STR(ferry_lifecycle_state_name(ferry_lifecycle_state_get(lc)), s)

/* Every transition that is not allowed from the current state: FERRY_ESTATE, state unchanged. */
static void invalid_from(ferry_lifecycle *lc)
{
    ferry_lifecycle_state s = ferry_lifecycle_state_get(lc);
    if (s != FERRY_LIFECYCLE_UNCONFIGURED)
        TU_ERR(ferry_lifecycle_configure(lc), FERRY_ESTATE);
    if (s != FERRY_LIFECYCLE_INACTIVE) {
        TU_ERR(ferry_lifecycle_activate(lc), FERRY_ESTATE);
        TU_ERR(ferry_lifecycle_cleanup(lc), FERRY_ESTATE);
    }
    if (s != FERRY_LIFECYCLE_ACTIVE)
        TU_ERR(ferry_lifecycle_deactivate(lc), FERRY_ESTATE);
    if (s == FERRY_LIFECYCLE_FINALIZED)
        TU_ERR(ferry_lifecycle_shutdown(lc), FERRY_ESTATE);
    TU_EQ_U64(ferry_lifecycle_state_get(lc), s);
}

static void test_transitions(void)
{
    ferry_node *node = tu_node("lcn");
    calls c = {0};
    ferry_lifecycle *lc = make_lc(node, &c);
    TU_EQ_STR(ferry_lifecycle_state_name(FERRY_LIFECYCLE_INACTIVE), "inactive");
    TU_EQ_STR(ferry_lifecycle_state_name((ferry_lifecycle_state)99), "unknown");
    TU_ERR(ferry_lifecycle_configure(NULL), FERRY_EINVAL);
    TU_EQ_U64(ferry_lifecycle_state_get(NULL), 0);

    invalid_from(lc);
    TU_OK(ferry_lifecycle_configure(lc));
    STATE(lc, "inactive");
    TU_EQ_U64(c.seen, FERRY_LIFECYCLE_UNCONFIGURED); /* callbacks run in the source state */
    TU_ERR(c.nested, FERRY_ESTATE);
    invalid_from(lc);
    TU_OK(ferry_lifecycle_activate(lc));
    STATE(lc, "active");
    invalid_from(lc);
    TU_OK(ferry_lifecycle_deactivate(lc));
    STATE(lc, "inactive");
    TU_OK(ferry_lifecycle_cleanup(lc));
    STATE(lc, "unconfigured");
    TU_EQ_U64(c.configure, 1);
    TU_EQ_U64(c.activate, 1);
    TU_EQ_U64(c.deactivate, 1);
    TU_EQ_U64(c.cleanup, 1);
    TU_ERR(c.nested, FERRY_ESTATE);

    /* Shutdown from each state. */
    TU_OK(ferry_lifecycle_shutdown(lc));
    STATE(lc, "finalized");
    invalid_from(lc);
    TU_EQ_U64(c.shutdown, 1);
    ferry_publisher *pub = NULL;
    ferry_subscriber *sub = NULL;
    TU_ERR(ferry_lifecycle_publisher(lc, "/lcn/x", TYPE, 1, NULL, 0, 0, &pub), FERRY_ESTATE);
    TU_ERR(ferry_lifecycle_subscriber(lc, "/lcn/x", TYPE, 1, NULL, &sub), FERRY_ESTATE);
    TU_OK(ferry_lifecycle_destroy(lc));

    lc = make_lc(node, &c);
    TU_OK(ferry_lifecycle_configure(lc));
    TU_OK(ferry_lifecycle_shutdown(lc));
    STATE(lc, "finalized");
    TU_OK(ferry_lifecycle_destroy(lc));

    lc = make_lc(node, &c);
    TU_OK(ferry_lifecycle_configure(lc));
    TU_OK(ferry_lifecycle_activate(lc));
    TU_OK(ferry_lifecycle_shutdown(lc));
    STATE(lc, "finalized");
    TU_OK(ferry_lifecycle_destroy(lc));
    TU_EQ_U64(c.shutdown, 3);

    /* Destroy shuts down first, from any state. */
    lc = make_lc(node, &c);
    TU_OK(ferry_lifecycle_configure(lc));
    TU_OK(ferry_lifecycle_activate(lc));
    TU_OK(ferry_lifecycle_destroy(lc));
    TU_EQ_U64(c.shutdown, 4);
    lc = make_lc(node, &c);
    TU_OK(ferry_lifecycle_destroy(lc));
    TU_EQ_U64(c.shutdown, 5);

    /* No callbacks at all. */
    TU_OK(ferry_lifecycle_create(&lc, node, NULL));
    TU_OK(ferry_lifecycle_configure(lc));
    TU_OK(ferry_lifecycle_activate(lc));
    TU_OK(ferry_lifecycle_deactivate(lc));
    TU_OK(ferry_lifecycle_cleanup(lc));
    TU_OK(ferry_lifecycle_destroy(lc));
    TU_ERR(ferry_lifecycle_create(NULL, node, NULL), FERRY_EINVAL);
    TU_ERR(ferry_lifecycle_create(&lc, NULL, NULL), FERRY_EINVAL);
    TU_OK(ferry_node_destroy(node));
}

static void test_failing_callbacks(void)
{
    ferry_node *node = tu_node("lcn");
    calls c = {0};
    ferry_lifecycle *lc = make_lc(node, &c);
    ferry_publisher *pub = NULL;
    ferry_subscriber *sub = NULL;
    TU_OK(ferry_lifecycle_publisher(lc, "/lcn/fail", TYPE, ferry_hash(TYPE), NULL, SIZE, 4, &pub));
    TU_OK(ferry_lifecycle_subscriber(lc, "/lcn/fail", TYPE, ferry_hash(TYPE), NULL, &sub));
    int fds = tu_fd_count(), maps = tu_maps_count("ferry");

    /* A failed configure releases what it created and stays UNCONFIGURED. */
    c.fail_configure = FERRY_ENOMEM;
    c.create_in_configure = true;
    TU_ERR(ferry_lifecycle_configure(lc), FERRY_ENOMEM);
    STATE(lc, "unconfigured");
    TU_CHECK(pub == NULL && sub == NULL);
    TU_EQ_U64(tu_fd_count(), fds);
    TU_EQ_U64(tu_maps_count("ferry"), maps);
    TU_EQ_U64(tu_inspect_count(NULL, NULL), 0);

    c.fail_configure = FERRY_OK;
    TU_OK(ferry_lifecycle_configure(lc));
    TU_CHECK(pub != NULL && sub != NULL && c.transient != NULL);

    /* A failed activate stays INACTIVE, endpoints still inactive. */
    c.fail_activate = FERRY_EPERM;
    TU_ERR(ferry_lifecycle_activate(lc), FERRY_EPERM);
    STATE(lc, "inactive");
    void *p = NULL;
    TU_ERR(ferry_loan(pub, SIZE, &p), FERRY_ESTATE);
    TU_ERR(ferry_loan(c.transient, SIZE, &p), FERRY_ESTATE);
    c.fail_activate = FERRY_OK;
    TU_OK(ferry_lifecycle_activate(lc));
    TU_OK(ferry_loan(c.transient, SIZE, &p));
    TU_OK(ferry_loan_release(c.transient, p));

    /* Failing deactivate, cleanup and shutdown still make their transition. */
    c.fail_deactivate = FERRY_EPROTO;
    TU_ERR(ferry_lifecycle_deactivate(lc), FERRY_EPROTO);
    STATE(lc, "inactive");
    TU_ERR(ferry_loan(pub, SIZE, &p), FERRY_ESTATE);
    c.fail_cleanup = FERRY_EPROTO;
    TU_ERR(ferry_lifecycle_cleanup(lc), FERRY_EPROTO);
    STATE(lc, "unconfigured");
    TU_CHECK(pub == NULL && sub == NULL);
    TU_EQ_U64(tu_fd_count(), fds);
    TU_EQ_U64(tu_maps_count("ferry"), maps);
    TU_OK(ferry_lifecycle_configure(lc));
    c.fail_shutdown = FERRY_EPROTO;
    TU_ERR(ferry_lifecycle_shutdown(lc), FERRY_EPROTO);
    STATE(lc, "finalized");
    TU_CHECK(pub == NULL && sub == NULL);
    TU_OK(ferry_lifecycle_destroy(lc));
    TU_EQ_U64(tu_fd_count(), fds);
    TU_EQ_U64(tu_maps_count("ferry"), maps);
    TU_OK(ferry_node_destroy(node));
}

/* ---- managed endpoints in one process ----------------------------------------------------- */

static void take_n(ferry_subscriber *sub, int n)
{
    for (int i = 0; i < n; i++) {
        ferry_sample s;
        ferry_err e = ferry_take(sub, &s);
        if (e == FERRY_EAGAIN) {
            TU_OK(ferry_wait(sub, TU_WAIT_NS));
            e = ferry_take(sub, &s);
        }
        TU_OK(e);
        TU_SAMPLE_INTACT(&s, SIZE);
        TU_OK(ferry_release(sub, &s));
    }
}

static void test_managed_local(void)
{
    ferry_node *node = tu_node("lcn");
    calls c = {0};
    ferry_lifecycle *lc = make_lc(node, &c);
    ferry_publisher *pub = NULL;
    ferry_subscriber *sub = NULL;
    TU_ERR(ferry_lifecycle_publisher(lc, "/lcn/local", TYPE, 1, NULL, 0, 2, &pub), FERRY_EINVAL);
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = 4;
    TU_OK(ferry_lifecycle_publisher(lc, "/lcn/local", TYPE, ferry_hash(TYPE), NULL, SIZE, 6, &pub));
    TU_OK(ferry_lifecycle_subscriber(lc, "/lcn/local", TYPE, ferry_hash(TYPE), &so, &sub));
    TU_CHECK(pub == NULL && sub == NULL); /* declared, not created */

    int fds = tu_fd_count(), maps = tu_maps_count("ferry");
    TU_EQ_U64(tu_inspect_count(NULL, NULL), 0);

    for (int round = 0; round < 2; round++) { /* reconfigure after cleanup works */
        TU_OK(ferry_lifecycle_configure(lc));
        TU_CHECK(pub != NULL && sub != NULL);
        ferry_publisher_stats ps;
        TU_OK(ferry_publisher_stats_get(pub, &ps));
        TU_CMP_U64(ps.chunks_total, >=, 6); /* the reserve */
        TU_EQ_U64(ps.chunks_loaned, 0);
        int alive = 0;
        TU_EQ_U64(tu_inspect_count(NULL, &alive), 2);
        tu_connect_local(pub, 1, sub, 1);

        void *p = NULL;
        TU_ERR(ferry_loan(pub, SIZE, &p), FERRY_ESTATE);
        TU_ERR(ferry_publish_copy(pub, "x", 1), FERRY_ESTATE);

        TU_OK(ferry_lifecycle_activate(lc));
        for (uint64_t i = 1; i <= 3; i++)
            tu_publish_pattern(pub, SIZE, i);
        take_n(sub, 2);

        /* Deactivate with one sample queued and one loan out: the queued one is given back
         * unread (neither received nor dropped); the loan may not be published, only released. */
        TU_OK(ferry_loan(pub, SIZE, &p));
        TU_OK(ferry_lifecycle_deactivate(lc));
        TU_ERR(ferry_publish(pub, p, 0), FERRY_ESTATE);
        ferry_sample s;
        TU_ERR(ferry_take(sub, &s), FERRY_EAGAIN);
        ferry_subscriber_stats ss;
        TU_OK(ferry_subscriber_stats_get(sub, &ss));
        TU_EQ_U64(ss.received, 2);
        TU_EQ_U64(ss.dropped, 0);
        uint64_t discarded = 0;
        TU_OK(ferry__subscriber_discarded(sub, &discarded));
        TU_EQ_U64(discarded, 1);

        /* Cleanup refuses while the loan is out. */
        TU_ERR(ferry_lifecycle_cleanup(lc), FERRY_EBUSY);
        STATE(lc, "inactive");
        TU_OK(ferry_loan_release(pub, p));

        /* ... and while a sample is held. */
        TU_OK(ferry_lifecycle_activate(lc));
        tu_publish_pattern(pub, SIZE, 4);
        TU_OK(ferry_wait(sub, TU_WAIT_NS));
        TU_OK(ferry_take(sub, &s));
        TU_OK(ferry_lifecycle_deactivate(lc));
        TU_ERR(ferry_lifecycle_cleanup(lc), FERRY_EBUSY);
        TU_ERR(ferry_lifecycle_shutdown(lc), FERRY_EBUSY);
        TU_ERR(ferry_lifecycle_destroy(lc), FERRY_EBUSY);
        STATE(lc, "inactive");
        TU_SAMPLE_INTACT(&s, SIZE); /* held samples stay valid while paused */
        TU_OK(ferry_release(sub, &s));
        TU_OK(ferry_publisher_stats_get(pub, &ps));
        TU_EQ_U64(ps.dropped, 0);

        TU_OK(ferry_lifecycle_cleanup(lc));
        TU_CHECK(pub == NULL && sub == NULL);
        TU_EQ_U64(tu_fd_count(), fds);
        TU_EQ_U64(tu_maps_count("ferry"), maps);
        TU_EQ_U64(tu_inspect_count(NULL, &alive), 0);
    }
    TU_EQ_U64(c.configure, 2);
    TU_OK(ferry_lifecycle_destroy(lc));
    TU_OK(ferry_node_destroy(node));
}

/* ---- paused subscriber, external publisher ----------------------------------------------- */

enum { MSG_READY = 1, MSG_QUERY, MSG_STOP };

typedef struct peer {
    tu_pipe to_pub, from_pub;
} peer;

/* Publishes at about 100 Hz once told; answers a query with (published, deliveries, dropped). */
static int publisher_main(void *arg)
{
    peer *p = arg;
    ferry_node *node = tu_node("lcnpub");
    ferry_publisher *pub = NULL;
    TU_OK(ferry_publisher_create(&pub, node, "/lcn/ext", TYPE, ferry_hash(TYPE), NULL));
    TU_OK(ferry_publisher_wait_subscribers(pub, 1, TU_WAIT_NS));
    TU_EQ_U64(tu_serve_until(&pub, 1, &p->to_pub, TU_WAIT_MS), MSG_READY);
    uint64_t seq = 0;
    for (;;) {
        tu_publish_pattern(pub, SIZE, ++seq);
        TU_OK(ferry_publisher_poll(pub, 10 * TU_MS));
        if (!tu_readable(&p->to_pub))
            continue;
        uint64_t m = tu_recv(&p->to_pub, TU_WAIT_MS);
        if (m == MSG_STOP)
            break;
        ferry_publisher_stats ps;
        TU_OK(ferry_publisher_stats_get(pub, &ps));
        tu_send(&p->from_pub, ps.published);
        tu_send(&p->from_pub, ps.deliveries);
        tu_send(&p->from_pub, ps.dropped);
    }
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    return 0;
}

static void query(peer *p, uint64_t *published, uint64_t *deliveries, uint64_t *dropped)
{
    tu_send(&p->to_pub, MSG_QUERY);
    *published = tu_recv(&p->from_pub, TU_WAIT_MS);
    *deliveries = tu_recv(&p->from_pub, TU_WAIT_MS);
    *dropped = tu_recv(&p->from_pub, TU_WAIT_MS);
}

static void test_paused_external(void)
{
    ferry_node *node = tu_node("lcn");
    ferry_lifecycle *lc = NULL;
    TU_OK(ferry_lifecycle_create(&lc, node, NULL));
    ferry_subscriber *sub = NULL;
    TU_OK(ferry_lifecycle_subscriber(lc, "/lcn/ext", TYPE, ferry_hash(TYPE), NULL, &sub));
    TU_OK(ferry_lifecycle_configure(lc));

    peer p = {tu_pipe_make(), tu_pipe_make()};
    pid_t child = tu_fork(publisher_main, &p, 60);
    TU_OK(ferry_subscriber_wait_publishers(sub, 1, TU_WAIT_NS));
    tu_send(&p.to_pub, MSG_READY);

    /* 300 ms of a 100 Hz stream while paused. */
    ferry_time t0 = ferry_now();
    while (tu_since(t0) < 300 * TU_MS) {
        ferry_sample s;
        TU_ERR(ferry_take(sub, &s), FERRY_EAGAIN);
        TU_ERR(ferry_wait(sub, 20 * TU_MS), FERRY_ETIMEDOUT);
    }
    uint64_t published, deliveries, dropped;
    query(&p, &published, &deliveries, &dropped);
    ferry_subscriber_stats ss;
    TU_OK(ferry_subscriber_stats_get(sub, &ss));
    printf("  paused for 300 ms: publisher published %" PRIu64 ", delivered %" PRIu64
           ", dropped %" PRIu64 "; subscriber received %" PRIu64 ", dropped %" PRIu64 "\n",
           published, deliveries, dropped, ss.received, ss.dropped);
    TU_CMP_U64(published, >=, 10);
    TU_EQ_U64(deliveries, 0);
    TU_EQ_U64(dropped, 0);
    TU_EQ_U64(ss.received, 0);
    TU_EQ_U64(ss.dropped, 0);
    TU_EQ_U64(ss.publishers, 1); /* still connected */

    /* Active: samples flow. */
    TU_OK(ferry_lifecycle_activate(lc));
    take_n(sub, 5);
    TU_OK(ferry_lifecycle_deactivate(lc));
    uint64_t received_then = 0;
    TU_OK(ferry_subscriber_stats_get(sub, &ss));
    received_then = ss.received;
    tu_sleep_ns(100 * TU_MS);
    ferry_sample s;
    TU_ERR(ferry_take(sub, &s), FERRY_EAGAIN);
    TU_OK(ferry_subscriber_stats_get(sub, &ss));
    TU_EQ_U64(ss.received, received_then);
    TU_EQ_U64(ss.dropped, 0);
    query(&p, &published, &deliveries, &dropped);
    TU_EQ_U64(dropped, 0);

    tu_send(&p.to_pub, MSG_STOP);
    TU_CHILD_OK(child);
    TU_OK(ferry_lifecycle_destroy(lc));
    TU_OK(ferry_node_destroy(node));
}

int main(void)
{
    TU_RUN(test_transitions);
    TU_RUN(test_failing_callbacks);
    TU_RUN(test_managed_local);
    TU_RUN(test_paused_external);
    return 0;
}
