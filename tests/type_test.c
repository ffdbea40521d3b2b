/*
 * Type safety of topics. A topic's type is its publishers': while a live publisher exists, a
 * publisher or subscriber of another type name or type hash is refused with FERRY_ETYPE, in
 * another process or in this one. Subscribers claim nothing: a subscriber of another type never
 * keeps a publisher from starting; it is refused at the handshake instead, on its side, and
 * ferry_subscriber_wait_publishers says FERRY_ETYPE. An untyped subscriber takes the type of the
 * first publisher it meets. Endpoints of dead processes do not count.
 */
#include "testutil.h"

#include <signal.h>
#include <string.h>
#include <sys/wait.h>

#define TYPE_A "test/type_a"
#define TYPE_B "test/type_b"

enum { MSG_CREATED = 1, MSG_QUIT, MSG_REFUSED };

typedef struct holder_args {
    bool publisher;
    const char *topic;
    tu_pipe to_parent, to_child;
} holder_args;

/* Creates one endpoint of type A and keeps it (running housekeeping) until told to quit. */
static int holder(void *arg)
{
    holder_args *a = arg;
    ferry_node *node = tu_node("holder");
    ferry_publisher *pub = NULL;
    ferry_subscriber *sub = NULL;
    if (a->publisher)
        TU_OK(ferry_publisher_create(&pub, node, a->topic, TYPE_A, ferry_hash(TYPE_A), NULL));
    else
        TU_OK(ferry_subscriber_create(&sub, node, a->topic, TYPE_A, ferry_hash(TYPE_A), NULL));
    tu_send(&a->to_parent, MSG_CREATED);
    if (pub != NULL) {
        TU_EQ_U64(tu_serve_until(&pub, 1, &a->to_child, 30000), MSG_QUIT);
        TU_OK(ferry_publisher_destroy(pub));
    } else {
        /* Looks for publishers until told to quit; says so once one refused it for its type. */
        bool told = false;
        while (!tu_readable(&a->to_child)) {
            ferry_err err = ferry_subscriber_wait_publishers(sub, 1, 20 * TU_MS);
            if (err == FERRY_ETYPE && !told) {
                tu_send(&a->to_parent, MSG_REFUSED);
                told = true;
            }
        }
        TU_EQ_U64(tu_recv(&a->to_child, 30000), MSG_QUIT);
        TU_OK(ferry_subscriber_destroy(sub));
    }
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    return 0;
}

/* With a live publisher of type A: every endpoint of another type name or hash is refused. */
static void refused_everything_else(ferry_node *node, const char *topic)
{
    ferry_publisher *pub = NULL;
    ferry_subscriber *sub = NULL;
    TU_ERR(ferry_subscriber_create(&sub, node, topic, TYPE_B, ferry_hash(TYPE_A), NULL),
           FERRY_ETYPE);
    TU_ERR(ferry_subscriber_create(&sub, node, topic, TYPE_A, ferry_hash(TYPE_B), NULL),
           FERRY_ETYPE);
    TU_ERR(ferry_subscriber_create(&sub, node, topic, TYPE_B, ferry_hash(TYPE_B), NULL),
           FERRY_ETYPE);
    TU_ERR(ferry_publisher_create(&pub, node, topic, TYPE_B, ferry_hash(TYPE_A), NULL),
           FERRY_ETYPE);
    TU_ERR(ferry_publisher_create(&pub, node, topic, TYPE_A, ferry_hash(TYPE_A) + 1, NULL),
           FERRY_ETYPE);
    TU_ERR(ferry_publisher_create(&pub, node, topic, TYPE_B, ferry_hash(TYPE_B), NULL),
           FERRY_ETYPE);
    TU_CHECK(pub == NULL);
    TU_CHECK(sub == NULL);
}

static void test_publisher_exists(void)
{
    const char *topic = "/type/pub_exists";
    holder_args a = {true, topic, tu_pipe_make(), tu_pipe_make()};
    pid_t child = tu_fork(holder, &a, 60);
    TU_EQ_U64(tu_recv(&a.to_parent, TU_WAIT_MS), MSG_CREATED);

    ferry_node *node = tu_node("typed");
    refused_everything_else(node, topic);
    /* The matching type is welcome, and an untyped subscriber takes it. */
    ferry_subscriber *sub = NULL, *any = NULL;
    TU_OK(ferry_subscriber_create(&sub, node, topic, TYPE_A, ferry_hash(TYPE_A), NULL));
    TU_OK(ferry_subscriber_wait_publishers(sub, 1, TU_WAIT_NS));
    TU_OK(ferry_subscriber_create(&any, node, topic, NULL, 0, NULL));
    TU_OK(ferry_subscriber_wait_publishers(any, 1, TU_WAIT_NS));
    const char *name = NULL;
    uint64_t hash = 0;
    TU_OK(ferry_subscriber_type(any, &name, &hash));
    TU_EQ_STR(name, TYPE_A);
    TU_EQ_U64(hash, ferry_hash(TYPE_A));
    refused_everything_else(node, topic);
    TU_OK(ferry_subscriber_destroy(any));
    TU_OK(ferry_subscriber_destroy(sub));
    tu_send(&a.to_child, MSG_QUIT);
    TU_CHILD_OK(child);

    /* With its publisher gone the topic is free for another type. */
    ferry_publisher *pub = NULL;
    TU_OK(ferry_publisher_create(&pub, node, topic, TYPE_B, ferry_hash(TYPE_B), NULL));
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
    tu_pipe_close(&a.to_parent);
    tu_pipe_close(&a.to_child);
}

/* A publisher and a subscriber of this process: each answers only in its own calls. */
static void connect_in_process(ferry_publisher *pub, ferry_subscriber *sub)
{
    for (int i = 0; i < 500; i++) {
        TU_OK(ferry_publisher_poll(pub, 0));
        if (ferry_subscriber_wait_publishers(sub, 1, 10 * TU_MS) == FERRY_OK)
            return;
    }
    TU_FAIL("the subscriber did not connect");
}

/* A subscriber of type A, in another process, does not keep a publisher of type B from
 * starting; that publisher refuses it, and it is the one told. */
static void test_subscriber_exists(void)
{
    const char *topic = "/type/sub_exists";
    holder_args a = {false, topic, tu_pipe_make(), tu_pipe_make()};
    pid_t child = tu_fork(holder, &a, 60);
    TU_EQ_U64(tu_recv(&a.to_parent, TU_WAIT_MS), MSG_CREATED);

    ferry_node *node = tu_node("typed");
    ferry_publisher *pub = NULL;
    TU_OK(ferry_publisher_create(&pub, node, topic, TYPE_B, ferry_hash(TYPE_B), NULL));
    /* The topic is B's now: A's endpoints are refused here, B's welcome. */
    ferry_subscriber *sub = NULL;
    TU_ERR(ferry_subscriber_create(&sub, node, topic, TYPE_A, ferry_hash(TYPE_A), NULL),
           FERRY_ETYPE);
    ferry_publisher *other = NULL;
    TU_ERR(ferry_publisher_create(&other, node, topic, TYPE_A, ferry_hash(TYPE_A), NULL),
           FERRY_ETYPE);
    TU_OK(ferry_subscriber_create(&sub, node, topic, TYPE_B, ferry_hash(TYPE_B), NULL));
    connect_in_process(pub, sub);
    /* The child's subscriber of A is refused at its handshake and hears it there; the publisher
     * counts it, and serves only ours. */
    int64_t deadline = ferry_now().ns + TU_WAIT_NS;
    while (!tu_readable(&a.to_parent) && ferry_now().ns < deadline)
        TU_OK(ferry_publisher_poll(pub, 10 * TU_MS));
    TU_EQ_U64(tu_recv(&a.to_parent, TU_WAIT_MS), MSG_REFUSED);
    ferry_publisher_stats st;
    TU_OK(ferry_publisher_stats_get(pub, &st));
    TU_CMP_U64(st.rejected, >=, 1);
    TU_EQ_U64(st.subscribers, 1);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_publisher_destroy(pub));
    tu_send(&a.to_child, MSG_QUIT);
    TU_CHILD_OK(child);
    TU_OK(ferry_node_destroy(node));
    tu_pipe_close(&a.to_parent);
    tu_pipe_close(&a.to_child);
}

/* The subscriber that was refused for its type hears it from ferry_subscriber_wait_publishers. */
static void test_refused_subscriber_told(void)
{
    ferry_node *node = tu_node("told");
    ferry_subscriber *sub = NULL;
    TU_OK(ferry_subscriber_create(&sub, node, "/type/told", TYPE_A, ferry_hash(TYPE_A), NULL));
    ferry_publisher *pub = NULL;
    TU_OK(ferry_publisher_create(&pub, node, "/type/told", TYPE_B, ferry_hash(TYPE_B), NULL));
    ferry_err err = FERRY_OK;
    for (int i = 0; i < 100 && err != FERRY_ETYPE; i++) {
        TU_OK(ferry_publisher_poll(pub, 0));
        err = ferry_subscriber_wait_publishers(sub, 1, 20 * TU_MS);
    }
    TU_ERR(err, FERRY_ETYPE);
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
}

typedef struct type_count {
    int total, of_b;
} type_count;

static bool count_type(void *arg, const ferry_endpoint_info *info)
{
    type_count *tc = arg;
    tc->total++;
    tc->of_b += strcmp(info->type_name, TYPE_B) == 0 && info->type_hash == ferry_hash(TYPE_B);
    return true;
}

/* An untyped subscriber started before any publisher takes the first one's type, then refuses
 * publishers of another. */
static void test_untyped_first(void)
{
    ferry_node *node = tu_node("untyped");
    ferry_subscriber *any = NULL;
    TU_OK(ferry_subscriber_create(&any, node, "/type/untyped", NULL, 0, NULL));
    const char *name = NULL;
    uint64_t hash = 0;
    TU_ERR(ferry_subscriber_type(any, &name, &hash), FERRY_EAGAIN);
    ferry_publisher *pub = NULL;
    TU_OK(ferry_publisher_create(&pub, node, "/type/untyped", TYPE_B, ferry_hash(TYPE_B), NULL));
    connect_in_process(pub, any);
    TU_OK(ferry_subscriber_type(any, &name, &hash));
    TU_EQ_STR(name, TYPE_B);
    TU_EQ_U64(hash, ferry_hash(TYPE_B));
    TU_OK(ferry_publish_copy(pub, "frame", 5));
    ferry_sample s;
    TU_OK(ferry_wait(any, TU_WAIT_NS));
    TU_OK(ferry_take(any, &s));
    TU_EQ_U64(s.size, 5);
    TU_OK(ferry_release(any, &s));
    /* Its status file shows the type it took. */
    type_count tc = {0, 0};
    TU_OK(ferry_inspect(tu_dir(), tu_domain(), "/type/untyped", count_type, &tc));
    TU_EQ_U64(tc.total, 2);
    TU_EQ_U64(tc.of_b, 2);
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_subscriber_destroy(any));
    TU_OK(ferry_node_destroy(node));
}

static void test_same_process(void)
{
    ferry_node *node = tu_node("same");
    ferry_publisher *pub = NULL;
    ferry_subscriber *sub = NULL;
    TU_OK(ferry_publisher_create(&pub, node, "/type/same", TYPE_A, ferry_hash(TYPE_A), NULL));
    refused_everything_else(node, "/type/same");
    /* "a/b" and "/a/b" are one topic. */
    TU_ERR(ferry_subscriber_create(&sub, node, "type/same", TYPE_B, ferry_hash(TYPE_B), NULL),
           FERRY_ETYPE);
    TU_OK(ferry_publisher_destroy(pub));

    /* A subscriber claims nothing: a publisher of another type starts beside it. */
    TU_OK(ferry_subscriber_create(&sub, node, "/type/same", TYPE_B, ferry_hash(TYPE_B), NULL));
    TU_OK(ferry_publisher_create(&pub, node, "/type/same", TYPE_A, ferry_hash(TYPE_A), NULL));
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
}

/* An endpoint whose process was killed left its files behind; it must not block another type,
 * and ferry_clean removes what it left. */
static void test_dead_endpoint(void)
{
    for (int round = 0; round < 2; round++) {
        holder_args a;
        a.publisher = true;
        a.topic = "/type/dead";
        a.to_parent = tu_pipe_make();
        a.to_child = tu_pipe_make();
        pid_t child = tu_fork(holder, &a, 60);
        TU_EQ_U64(tu_recv(&a.to_parent, TU_WAIT_MS), MSG_CREATED);
        TU_CHECK(kill(child, SIGKILL) == 0);
        int st = tu_wait_status(child, TU_WAIT_MS);
        TU_CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
        tu_pipe_close(&a.to_parent);
        tu_pipe_close(&a.to_child);

        int alive = -1;
        TU_EQ_U64(tu_inspect_count("/type/dead", &alive), 1);
        TU_EQ_U64(alive, 0);
        if (round == 0) {
            uint32_t removed = 0;
            TU_OK(ferry_clean(tu_dir(), tu_domain(), &removed));
            TU_CMP_U64(removed, >=, 1);
            TU_EQ_U64(tu_inspect_count("/type/dead", &alive), 0);
            TU_EQ_U64(tu_domain_files(), 0);
        }
        ferry_node *node = tu_node("survivor");
        ferry_subscriber *sub = NULL;
        TU_OK(ferry_subscriber_create(&sub, node, "/type/dead", TYPE_B, ferry_hash(TYPE_B), NULL));
        TU_OK(ferry_subscriber_destroy(sub));
        TU_OK(ferry_node_destroy(node));
        if (round == 1) {
            uint32_t removed = 0;
            TU_OK(ferry_clean(tu_dir(), tu_domain(), &removed));
            TU_EQ_U64(tu_inspect_count("/type/dead", &alive), 0);
        }
    }
}

int main(void)
{
    TU_RUN(test_publisher_exists);
    TU_RUN(test_subscriber_exists);
    TU_RUN(test_refused_subscriber_told);
    TU_RUN(test_untyped_first);
    TU_RUN(test_same_process);
    TU_RUN(test_dead_endpoint);
    return 0;
}
