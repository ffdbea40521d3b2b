/*
 * Type safety of topics: a publisher or subscriber of another type name or type hash is refused
 * with FERRY_ETYPE while a live endpoint of the topic exists, whichever side came first, in
 * another process or in this one; endpoints of dead processes do not count.
 */
#include "testutil.h"

#include <signal.h>
#include <string.h>
#include <sys/wait.h>

#define TYPE_A "test/type_a"
#define TYPE_B "test/type_b"

enum { MSG_CREATED = 1, MSG_QUIT };

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
        TU_EQ_U64(tu_recv(&a->to_child, 30000), MSG_QUIT);
        TU_OK(ferry_subscriber_destroy(sub));
    }
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    return 0;
}

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

static void run_against_child(bool child_publishes)
{
    const char *topic = child_publishes ? "/type/pub_exists" : "/type/sub_exists";
    holder_args a;
    a.publisher = child_publishes;
    a.topic = topic;
    a.to_parent = tu_pipe_make();
    a.to_child = tu_pipe_make();
    pid_t child = tu_fork(holder, &a, 60);
    TU_EQ_U64(tu_recv(&a.to_parent, TU_WAIT_MS), MSG_CREATED);

    ferry_node *node = tu_node("typed");
    refused_everything_else(node, topic);

    /* The matching type is welcome, on either side. */
    ferry_publisher *pub = NULL;
    ferry_subscriber *sub = NULL;
    if (child_publishes) {
        TU_OK(ferry_subscriber_create(&sub, node, topic, TYPE_A, ferry_hash(TYPE_A), NULL));
        TU_OK(ferry_subscriber_wait_publishers(sub, 1, TU_WAIT_NS));
        refused_everything_else(node, topic);
        TU_OK(ferry_subscriber_destroy(sub));
    } else {
        TU_OK(ferry_publisher_create(&pub, node, topic, TYPE_A, ferry_hash(TYPE_A), NULL));
        refused_everything_else(node, topic);
        TU_OK(ferry_publisher_destroy(pub));
    }
    tu_send(&a.to_child, MSG_QUIT);
    TU_CHILD_OK(child);

    /* With everyone gone the topic is free for another type. */
    TU_OK(ferry_publisher_create(&pub, node, topic, TYPE_B, ferry_hash(TYPE_B), NULL));
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
}

static void test_publisher_exists(void)
{
    run_against_child(true);
}

static void test_subscriber_exists(void)
{
    run_against_child(false);
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

    TU_OK(ferry_subscriber_create(&sub, node, "/type/same", TYPE_B, ferry_hash(TYPE_B), NULL));
    TU_ERR(ferry_publisher_create(&pub, node, "/type/same", TYPE_A, ferry_hash(TYPE_A), NULL),
           FERRY_ETYPE);
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
    TU_RUN(test_same_process);
    TU_RUN(test_dead_endpoint);
    return 0;
}
