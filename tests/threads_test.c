/*
 * Threads sharing one node: creation and destruction of endpoints from many threads at once (the
 * node serialises them), and publisher/subscriber pairs whose two ends run in different threads
 * of one process. Built like every test; it is the one ThreadSanitizer learns most from.
 */
#include "testutil.h"

#include <pthread.h>
#include <stdatomic.h>

#define THREADS 4
#define MESSAGES 300
#define TYPE "test/threads"

typedef struct pair_args {
    ferry_node *node;
    char topic[32];
    _Atomic int ready;
    _Atomic uint64_t received;
    _Atomic int failed;
} pair_args;

static void *publisher_thread(void *arg)
{
    pair_args *a = arg;
    ferry_publisher *pub;
    ferry_publisher_options po;
    ferry_publisher_options_init(&po);
    po.admit_blocking = true; /* the subscriber asks to block it */
    if (ferry_publisher_create(&pub, a->node, a->topic, TYPE, ferry_hash(TYPE), &po) != FERRY_OK) {
        atomic_store(&a->failed, 1);
        return NULL;
    }
    if (ferry_publisher_wait_subscribers(pub, 1, TU_WAIT_NS) != FERRY_OK)
        atomic_store(&a->failed, 2);
    for (uint64_t i = 1; i <= MESSAGES && !atomic_load(&a->failed); i++) {
        void *p;
        ferry_err err = ferry_loan(pub, 64 + i, &p);
        while (err == FERRY_EPOOL) {
            ferry_publisher_poll(pub, TU_MS);
            err = ferry_loan(pub, 64 + i, &p);
        }
        if (err != FERRY_OK) {
            atomic_store(&a->failed, 3);
            break;
        }
        memcpy(p, &i, sizeof i);
        if (ferry_publish(pub, p, 0) != FERRY_OK)
            atomic_store(&a->failed, 4);
    }
    /* Serve until the subscriber has everything, so its last samples are not cut off. */
    while (atomic_load(&a->received) < MESSAGES && !atomic_load(&a->failed))
        ferry_publisher_poll(pub, TU_MS);
    if (ferry_publisher_destroy(pub) != FERRY_OK)
        atomic_store(&a->failed, 5);
    return NULL;
}

static void *subscriber_thread(void *arg)
{
    pair_args *a = arg;
    ferry_subscriber *sub;
    ferry_subscriber_options o;
    ferry_subscriber_options_init(&o);
    o.overflow = FERRY_OVERFLOW_BLOCK;
    o.depth = 8;
    if (ferry_subscriber_create(&sub, a->node, a->topic, TYPE, ferry_hash(TYPE), &o) != FERRY_OK) {
        atomic_store(&a->failed, 10);
        return NULL;
    }
    uint64_t expect = 1;
    int64_t deadline = ferry_now().ns + 30 * TU_SEC;
    while (expect <= MESSAGES && !atomic_load(&a->failed) && ferry_now().ns < deadline) {
        ferry_sample s;
        ferry_err err = ferry_take(sub, &s);
        if (err == FERRY_EAGAIN) {
            ferry_wait(sub, 10 * TU_MS);
            continue;
        }
        uint64_t v;
        memcpy(&v, s.data, sizeof v);
        if (err != FERRY_OK || v != expect || s.sequence != expect || s.size != 64 + expect)
            atomic_store(&a->failed, 11);
        expect++;
        atomic_fetch_add(&a->received, 1);
        if (ferry_release(sub, &s) != FERRY_OK)
            atomic_store(&a->failed, 12);
    }
    if (ferry_subscriber_destroy(sub) != FERRY_OK)
        atomic_store(&a->failed, 13);
    return NULL;
}

/* Pairs whose ends live in different threads of one process, all on one node. */
static void test_cross_thread_pairs(void)
{
    ferry_node *node = tu_node("threads");
    pair_args args[THREADS];
    pthread_t threads[2 * THREADS];
    for (int i = 0; i < THREADS; i++) {
        memset(&args[i], 0, sizeof args[i]);
        args[i].node = node;
        snprintf(args[i].topic, sizeof args[i].topic, "/pair/%d", i);
        TU_CHECK(pthread_create(&threads[2 * i], NULL, subscriber_thread, &args[i]) == 0);
        TU_CHECK(pthread_create(&threads[2 * i + 1], NULL, publisher_thread, &args[i]) == 0);
    }
    for (int i = 0; i < 2 * THREADS; i++)
        pthread_join(threads[i], NULL);
    for (int i = 0; i < THREADS; i++) {
        TU_EQ_U64(atomic_load(&args[i].failed), 0);
        TU_EQ_U64(atomic_load(&args[i].received), MESSAGES);
    }
    TU_OK(ferry_node_destroy(node));
}

typedef struct churn_args {
    ferry_node *node;
    int index;
    _Atomic int *failed;
} churn_args;

static void *churn_thread(void *arg)
{
    churn_args *a = arg;
    char topic[32];
    snprintf(topic, sizeof topic, "/churn/%d", a->index % 2);
    for (int round = 0; round < 40; round++) {
        ferry_publisher *pub = NULL;
        ferry_subscriber *sub = NULL;
        ferry_waitset *ws = NULL;
        if (ferry_publisher_create(&pub, a->node, topic, TYPE, ferry_hash(TYPE), NULL) ||
            ferry_subscriber_create(&sub, a->node, topic, TYPE, ferry_hash(TYPE), NULL) ||
            ferry_waitset_create(&ws, a->node) || ferry_waitset_add(ws, sub, NULL)) {
            atomic_store(a->failed, 1);
            return NULL;
        }
        ferry_publisher_poll(pub, 0);
        if (ferry_waitset_remove(ws, sub) || ferry_waitset_destroy(ws) ||
            ferry_subscriber_destroy(sub) || ferry_publisher_destroy(pub)) {
            atomic_store(a->failed, 2);
            return NULL;
        }
        /* A handle destroyed in this thread fails cleanly, whatever the others do meanwhile. */
        if (ferry_publisher_destroy(pub) != FERRY_ECLOSED)
            atomic_store(a->failed, 3);
    }
    return NULL;
}

/* Many threads creating and destroying endpoints of one node at once. */
static void test_churn(void)
{
    ferry_node *node = tu_node("churn");
    _Atomic int failed = 0;
    churn_args args[THREADS];
    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; i++) {
        args[i] = (churn_args){node, i, &failed};
        TU_CHECK(pthread_create(&threads[i], NULL, churn_thread, &args[i]) == 0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(threads[i], NULL);
    TU_EQ_U64(atomic_load(&failed), 0);
    TU_OK(ferry_node_destroy(node));
}

int main(void)
{
    TU_RUN(test_cross_thread_pairs);
    TU_RUN(test_churn);
    return 0;
}
