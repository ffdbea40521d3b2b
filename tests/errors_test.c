/*
 * Error codes and argument checking: every code has its own message and name, and every public
 * function refuses invalid arguments and invalid states with the error its declaration names.
 */
#include "testutil.h"

#include "core/core.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>

#define TYPE "test/errors"

static uint64_t type_hash(void)
{
    return ferry_hash(TYPE);
}

static bool count_cb(void *arg, const ferry_endpoint_info *info)
{
    (void)arg;
    (void)info;
    return true;
}

static void test_messages(void)
{
    for (int i = 0; i < (int)FERRY_ERR_COUNT_; i++) {
        const char *m = ferry_strerror((ferry_err)i);
        const char *n = ferry_errname((ferry_err)i);
        TU_CHECK_MSG(m != NULL && m[0] != '\0', "ferry_strerror(%d) is empty", i);
        TU_CHECK_MSG(n != NULL && n[0] != '\0', "ferry_errname(%d) is empty", i);
        TU_CHECK_MSG(strncmp(n, "FERRY_", 6) == 0, "ferry_errname(%d) = \"%s\"", i, n);
        for (int k = 0; k < i; k++) {
            TU_CHECK_MSG(strcmp(m, ferry_strerror((ferry_err)k)) != 0,
                         "codes %d and %d share the message \"%s\"", k, i, m);
            TU_CHECK_MSG(strcmp(n, ferry_errname((ferry_err)k)) != 0,
                         "codes %d and %d share the name \"%s\"", k, i, n);
        }
    }
    TU_EQ_STR(ferry_errname(FERRY_OK), "FERRY_OK");
    TU_EQ_STR(ferry_errname(FERRY_EINVAL), "FERRY_EINVAL");
    TU_EQ_STR(ferry_errname(FERRY_EFOREIGN), "FERRY_EFOREIGN");
    TU_EQ_STR(ferry_errname(FERRY_ETIMEDOUT), "FERRY_ETIMEDOUT");

    const int bad[] = {(int)FERRY_ERR_COUNT_, (int)FERRY_ERR_COUNT_ + 1, 1000, -1, 0x7fffffff};
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
        const char *m = ferry_strerror((ferry_err)bad[b]);
        const char *n = ferry_errname((ferry_err)bad[b]);
        TU_CHECK_MSG(m != NULL && m[0] != '\0', "ferry_strerror(%d) is empty", bad[b]);
        TU_CHECK_MSG(n != NULL && n[0] != '\0', "ferry_errname(%d) is empty", bad[b]);
        /* An unknown code must not read as success or as one of the real codes. */
        for (int k = 0; k < (int)FERRY_ERR_COUNT_; k++) {
            TU_CHECK_MSG(strcmp(m, ferry_strerror((ferry_err)k)) != 0,
                         "ferry_strerror(%d) = \"%s\", the message of code %d", bad[b], m, k);
            TU_CHECK_MSG(strcmp(n, ferry_errname((ferry_err)k)) != 0,
                         "ferry_errname(%d) = \"%s\", the name of code %d", bad[b], n, k);
        }
    }
}

static void test_topic_names(void)
{
    char longest[FERRY_TOPIC_MAX + 1];
    memset(longest, 'a', FERRY_TOPIC_MAX);
    longest[FERRY_TOPIC_MAX] = '\0';
    char too_long[FERRY_TOPIC_MAX + 2];
    memset(too_long, 'a', FERRY_TOPIC_MAX + 1);
    too_long[FERRY_TOPIC_MAX + 1] = '\0';

    const char *good[] = {"a", "/a", "a/b", "/a/b", "/cam_front/image_raw", "Z9_", longest};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        TU_CHECK_MSG(ferry_topic_validate(good[i]) == FERRY_OK, "\"%s\" refused: %s", good[i],
                     ferry_strerror(ferry_topic_validate(good[i])));

    const char *bad[] = {"",     "/",    "//",    "a//b", "a/", "/a/",    "a b",         " a",
                         "a ",   "a\tb", "a-b",   "a.b",  "..", "a/../b", "caf\xc3\xa9", "\xff",
                         "a\\b", "a*",   too_long};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        TU_CHECK_MSG(ferry_topic_validate(bad[i]) == FERRY_ENAME,
                     "topic \"%s\" (#%zu): got %s, expected FERRY_ENAME", bad[i], i,
                     ferry_errname(ferry_topic_validate(bad[i])));
    /* Only FERRY_ENAME is documented; a NULL name must at least not pass. */
    ferry_err e = ferry_topic_validate(NULL);
    TU_CHECK_MSG(e == FERRY_ENAME || e == FERRY_EINVAL, "ferry_topic_validate(NULL) = %s",
                 ferry_errname(e));

    /* The same names are refused by the calls that take a topic. */
    ferry_node *node = tu_node("names");
    ferry_publisher *pub = NULL;
    ferry_subscriber *sub = NULL;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        TU_ERR(ferry_publisher_create(&pub, node, bad[i], TYPE, type_hash(), NULL), FERRY_ENAME);
        TU_ERR(ferry_subscriber_create(&sub, node, bad[i], TYPE, type_hash(), NULL), FERRY_ENAME);
        TU_ERR(ferry_inspect(tu_dir(), tu_domain(), bad[i], count_cb, NULL), FERRY_ENAME);
    }
    TU_CHECK(pub == NULL);
    TU_CHECK(sub == NULL);

    /* Type names: empty or longer than FERRY_TYPE_NAME_MAX. */
    char long_type[FERRY_TYPE_NAME_MAX + 2];
    memset(long_type, 't', FERRY_TYPE_NAME_MAX + 1);
    long_type[FERRY_TYPE_NAME_MAX + 1] = '\0';
    TU_ERR(ferry_publisher_create(&pub, node, "/t", "", 1, NULL), FERRY_ENAME);
    TU_ERR(ferry_publisher_create(&pub, node, "/t", long_type, 1, NULL), FERRY_ENAME);
    TU_ERR(ferry_subscriber_create(&sub, node, "/t", "", 1, NULL), FERRY_ENAME);
    TU_ERR(ferry_subscriber_create(&sub, node, "/t", long_type, 1, NULL), FERRY_ENAME);
    long_type[FERRY_TYPE_NAME_MAX] = '\0';
    TU_OK(ferry_publisher_create(&pub, node, "/t", long_type, 1, NULL));
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
}

static void test_node_arguments(void)
{
    ferry_node *node = NULL;
    ferry_node_options o = tu_node_options("args");
    TU_ERR(ferry_node_create(NULL, &o), FERRY_EINVAL);

    o.domain = FERRY_DOMAIN_MAX + 1;
    TU_ERR(ferry_node_create(&node, &o), FERRY_EINVAL);
    o.domain = 100000;
    TU_ERR(ferry_node_create(&node, &o), FERRY_EINVAL);
    TU_CHECK(node == NULL);

    const char *bad_names[] = {"a b", "a/b", "a.b", "caf\xc3\xa9",
                               "0123456789012345678901234567890123456789012345678901234567890123"};
    for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
        o = tu_node_options(bad_names[i]);
        TU_CHECK_MSG(ferry_node_create(&node, &o) == FERRY_ENAME, "node name \"%s\": got %s",
                     bad_names[i], ferry_errname(ferry_node_create(&node, &o)));
    }
    TU_CHECK(node == NULL);
    o = tu_node_options("012345678901234567890123456789012345678901234567890123456789-_A");
    TU_OK(ferry_node_create(&node, &o));
    TU_CHECK(ferry_node_dir(node) != NULL);
    TU_CHECK_MSG(strncmp(ferry_node_dir(node), tu_dir(), strlen(tu_dir())) == 0,
                 "node dir \"%s\" is not under \"%s\"", ferry_node_dir(node), tu_dir());
    TU_OK(ferry_node_destroy(node));

    TU_ERR(ferry_node_destroy(NULL), FERRY_EINVAL);
    TU_CHECK(ferry_node_dir(NULL) == NULL);

    TU_ERR(ferry_inspect(tu_dir(), tu_domain(), NULL, NULL, NULL), FERRY_EINVAL);
    TU_ERR(ferry_inspect(tu_dir(), FERRY_DOMAIN_MAX + 1, NULL, count_cb, NULL), FERRY_EINVAL);
    TU_ERR(ferry_clean(tu_dir(), FERRY_DOMAIN_MAX + 1, NULL), FERRY_EINVAL);
    uint32_t removed = 99;
    TU_OK(ferry_clean(tu_dir(), tu_domain(), &removed));
    TU_EQ_U64(removed, 0);
}

static void test_create_arguments(void)
{
    ferry_node *node = tu_node("create");
    ferry_publisher *pub = NULL;
    ferry_subscriber *sub = NULL;
    const uint64_t h = type_hash();

    TU_ERR(ferry_publisher_create(NULL, node, "/t", TYPE, h, NULL), FERRY_EINVAL);
    TU_ERR(ferry_publisher_create(&pub, NULL, "/t", TYPE, h, NULL), FERRY_EINVAL);
    TU_ERR(ferry_publisher_create(&pub, node, NULL, TYPE, h, NULL), FERRY_EINVAL);
    TU_ERR(ferry_publisher_create(&pub, node, "/t", NULL, h, NULL), FERRY_EINVAL);
    TU_ERR(ferry_subscriber_create(NULL, node, "/t", TYPE, h, NULL), FERRY_EINVAL);
    TU_ERR(ferry_subscriber_create(&sub, NULL, "/t", TYPE, h, NULL), FERRY_EINVAL);
    TU_ERR(ferry_subscriber_create(&sub, node, NULL, TYPE, h, NULL), FERRY_EINVAL);
    /* No type: an untyped subscriber, which has none until it meets a publisher. */
    TU_OK(ferry_subscriber_create(&sub, node, "/t", NULL, h, NULL));
    const char *tn = NULL;
    uint64_t th = 0;
    TU_ERR(ferry_subscriber_type(sub, &tn, &th), FERRY_EAGAIN);
    TU_ERR(ferry_subscriber_type(sub, NULL, &th), FERRY_EINVAL);
    TU_OK(ferry_subscriber_destroy(sub));
    sub = NULL;

    ferry_publisher_options po;
    static const size_t bad_align[] = {3, 32, 63, 65, 96, 8192, 100000};
    for (size_t i = 0; i < sizeof bad_align / sizeof bad_align[0]; i++) {
        ferry_publisher_options_init(&po);
        po.payload_align = bad_align[i];
        TU_CHECK_MSG(ferry_publisher_create(&pub, node, "/t", TYPE, h, &po) == FERRY_EINVAL,
                     "payload_align %zu accepted", bad_align[i]);
    }
    ferry_publisher_options_init(&po);
    po.max_chunks = 65537;
    TU_ERR(ferry_publisher_create(&pub, node, "/t", TYPE, h, &po), FERRY_EINVAL);
    ferry_publisher_options_init(&po);
    po.max_subscribers = 1025;
    TU_ERR(ferry_publisher_create(&pub, node, "/t", TYPE, h, &po), FERRY_EINVAL);
    ferry_publisher_options_init(&po);
    po.on_pool_exhausted = (ferry_pool_policy)7;
    TU_ERR(ferry_publisher_create(&pub, node, "/t", TYPE, h, &po), FERRY_EINVAL);
    TU_CHECK(pub == NULL);

    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = 100000;
    TU_ERR(ferry_subscriber_create(&sub, node, "/t", TYPE, h, &so), FERRY_EINVAL);
    ferry_subscriber_options_init(&so);
    so.depth = 4097;
    TU_ERR(ferry_subscriber_create(&sub, node, "/t", TYPE, h, &so), FERRY_EINVAL);
    ferry_subscriber_options_init(&so);
    so.overflow = (ferry_overflow)5;
    TU_ERR(ferry_subscriber_create(&sub, node, "/t", TYPE, h, &so), FERRY_EINVAL);
    ferry_subscriber_options_init(&so);
    so.max_publishers = 257;
    TU_ERR(ferry_subscriber_create(&sub, node, "/t", TYPE, h, &so), FERRY_EINVAL);
    TU_CHECK(sub == NULL);

    /* The limits themselves and zeroed fields (defaults) are accepted. */
    ferry_publisher_options_init(&po);
    po.payload_align = 4096;
    po.max_subscribers = 1024;
    TU_OK(ferry_publisher_create(&pub, node, "/t", TYPE, h, &po));
    TU_OK(ferry_publisher_destroy(pub));
    memset(&po, 0, sizeof po);
    TU_OK(ferry_publisher_create(&pub, node, "/t", TYPE, h, &po));
    TU_OK(ferry_publisher_destroy(pub));
    ferry_subscriber_options_init(&so);
    so.depth = 4096;
    so.max_publishers = 256;
    TU_OK(ferry_subscriber_create(&sub, node, "/t", TYPE, h, &so));
    TU_OK(ferry_subscriber_destroy(sub));
    memset(&so, 0, sizeof so);
    TU_OK(ferry_subscriber_create(&sub, node, "/t", TYPE, h, &so));
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
}

static void test_publisher_calls(void)
{
    ferry_node *node = tu_node("pubcalls");
    ferry_publisher *pub = NULL, *other = NULL;
    ferry_publisher_options po;
    ferry_publisher_options_init(&po);
    po.max_sample_size = 1 << 20;
    TU_OK(ferry_publisher_create(&pub, node, "/p", TYPE, type_hash(), &po));
    TU_OK(ferry_publisher_create(&other, node, "/q", TYPE, type_hash(), NULL));

    void *p = NULL;
    TU_ERR(ferry_loan(NULL, 64, &p), FERRY_EINVAL);
    TU_ERR(ferry_loan(pub, 64, NULL), FERRY_EINVAL);
    TU_ERR(ferry_loan(pub, 0, &p), FERRY_EINVAL);
    TU_ERR(ferry_loan(pub, (1 << 20) + 1, &p), FERRY_ETOOBIG);
    TU_ERR(ferry_loan(pub, SIZE_MAX, &p), FERRY_ETOOBIG);
    TU_CHECK(p == NULL);
    TU_OK(ferry_loan(pub, 1 << 20, &p));
    TU_CHECK(p != NULL);
    TU_EQ_U64((uintptr_t)p % 64, 0);

    TU_ERR(ferry_publish(NULL, p, 0), FERRY_EINVAL);
    TU_ERR(ferry_publish(pub, NULL, 0), FERRY_EINVAL);
    TU_ERR(ferry_publish(pub, p, (1 << 20) + 1), FERRY_EINVAL);
    TU_ERR(ferry_loan_release(NULL, p), FERRY_EINVAL);
    TU_ERR(ferry_loan_release(pub, NULL), FERRY_EINVAL);

    /* Foreign pointers: the heap, the stack, the inside of a loan, another publisher's loan. */
    void *heap = malloc(4096);
    TU_CHECK(heap != NULL);
    int on_stack = 0;
    void *theirs = NULL;
    TU_OK(ferry_loan(other, 64, &theirs));
    TU_ERR(ferry_publish(pub, heap, 0), FERRY_EFOREIGN);
    TU_ERR(ferry_publish(pub, &on_stack, 0), FERRY_EFOREIGN);
    TU_ERR(ferry_publish(pub, theirs, 0), FERRY_EFOREIGN);
    TU_ERR(ferry_loan_release(pub, heap), FERRY_EFOREIGN);
    TU_ERR(ferry_loan_release(pub, theirs), FERRY_EFOREIGN);
    TU_ERR(ferry_publish(other, p, 0), FERRY_EFOREIGN);
    free(heap);
    TU_OK(ferry_loan_release(other, theirs));
    TU_ERR(ferry_loan_release(other, theirs), FERRY_ESTATE);
    TU_ERR(ferry_publish(other, theirs, 0), FERRY_ESTATE);

    /* Double publish, release after publish. */
    TU_OK(ferry_publish(pub, p, 100));
    TU_ERR(ferry_publish(pub, p, 0), FERRY_ESTATE);
    TU_ERR(ferry_loan_release(pub, p), FERRY_ESTATE);

    /* Double release. */
    TU_OK(ferry_loan(pub, 64, &p));
    TU_OK(ferry_loan_release(pub, p));
    TU_ERR(ferry_loan_release(pub, p), FERRY_ESTATE);
    TU_ERR(ferry_publish(pub, p, 0), FERRY_ESTATE);

    /* The bytes in front of a loan are the application's to scribble on by mistake: releases
     * and publications still find their chunks, first, middle and last of the pool alike. */
    void *loans[3];
    for (int i = 0; i < 3; i++) {
        TU_OK(ferry_loan(pub, 64, &loans[i]));
        memset((char *)loans[i] - 64, 0xa5, 64);
    }
    TU_OK(ferry_loan_release(pub, loans[2]));
    TU_OK(ferry_loan_release(pub, loans[0]));
    TU_ERR(ferry_loan_release(pub, loans[0]), FERRY_ESTATE);
    TU_OK(ferry_publish(pub, loans[1], 0));
    TU_ERR(ferry_loan_release(pub, (char *)loans[1] + 64), FERRY_EFOREIGN);

    char data[128] = {0};
    TU_ERR(ferry_publish_copy(NULL, data, sizeof data), FERRY_EINVAL);
    TU_ERR(ferry_publish_copy(pub, NULL, sizeof data), FERRY_EINVAL);
    TU_ERR(ferry_publish_copy(pub, data, 0), FERRY_EINVAL);
    TU_ERR(ferry_publish_copy(pub, data, (1 << 20) + 1), FERRY_ETOOBIG);
    TU_OK(ferry_publish_copy(pub, data, sizeof data));

    int fd = -1;
    ferry_publisher_stats st;
    TU_ERR(ferry_publisher_poll(NULL, 0), FERRY_EINVAL);
    TU_ERR(ferry_publisher_wait_subscribers(NULL, 1, 0), FERRY_EINVAL);
    TU_ERR(ferry_publisher_fd(NULL, &fd), FERRY_EINVAL);
    TU_ERR(ferry_publisher_fd(pub, NULL), FERRY_EINVAL);
    TU_ERR(ferry_publisher_stats_get(NULL, &st), FERRY_EINVAL);
    TU_ERR(ferry_publisher_stats_get(pub, NULL), FERRY_EINVAL);
    TU_OK(ferry_publisher_fd(pub, &fd));
    TU_CHECK(fd >= 0);
    TU_OK(ferry_publisher_poll(pub, 0));
    TU_OK(ferry_publisher_wait_subscribers(pub, 0, 0));
    ferry_time t0 = ferry_now();
    TU_ERR(ferry_publisher_wait_subscribers(pub, 1, 20 * TU_MS), FERRY_ETIMEDOUT);
    TU_CMP_I64(tu_since(t0), >=, 20 * TU_MS);
    TU_OK(ferry_publisher_stats_get(pub, &st));
    TU_EQ_U64(st.published, 3);
    TU_EQ_U64(st.chunks_loaned, 0);
    TU_EQ_U64(st.bytes_copied, sizeof data);
    TU_ERR(ferry_publisher_destroy(NULL), FERRY_EINVAL);

    /* A node with live children refuses to go. */
    TU_ERR(ferry_node_destroy(node), FERRY_EBUSY);
    TU_OK(ferry_publisher_destroy(other));
    TU_ERR(ferry_node_destroy(node), FERRY_EBUSY);

    /* A destroyed publisher is detected while its node lives. */
    TU_OK(ferry_publisher_destroy(pub));
    TU_ERR(ferry_publisher_destroy(pub), FERRY_ECLOSED);
    p = NULL;
    TU_ERR(ferry_loan(pub, 64, &p), FERRY_ECLOSED);
    TU_CHECK(p == NULL);
    TU_ERR(ferry_publish_copy(pub, data, sizeof data), FERRY_ECLOSED);
    TU_ERR(ferry_publisher_poll(pub, 0), FERRY_ECLOSED);
    TU_ERR(ferry_publisher_wait_subscribers(pub, 0, 0), FERRY_ECLOSED);
    TU_ERR(ferry_publisher_fd(pub, &fd), FERRY_ECLOSED);
    TU_ERR(ferry_publisher_stats_get(pub, &st), FERRY_ECLOSED);
    TU_OK(ferry_node_destroy(node));
}

static void test_subscriber_calls(void)
{
    ferry_node *node = tu_node("subcalls");
    ferry_publisher *pub = NULL;
    ferry_subscriber *a = NULL, *b = NULL;
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = 8;
    so.max_held = 2;
    TU_OK(ferry_publisher_create(&pub, node, "/s", TYPE, type_hash(), NULL));
    TU_OK(ferry_subscriber_create(&a, node, "/s", TYPE, type_hash(), &so));
    TU_OK(ferry_subscriber_create(&b, node, "/s", TYPE, type_hash(), &so));
    tu_connect_local(pub, 1, a, 1);
    tu_connect_local(pub, 2, b, 1);

    ferry_sample s, t, u, copy;
    memset(&s, 0, sizeof s);
    TU_ERR(ferry_take(NULL, &s), FERRY_EINVAL);
    TU_ERR(ferry_take(a, NULL), FERRY_EINVAL);
    TU_ERR(ferry_take(a, &s), FERRY_EAGAIN);
    TU_ERR(ferry_release(a, &s), FERRY_ESTATE);
    TU_ERR(ferry_release(NULL, &s), FERRY_EINVAL);
    TU_ERR(ferry_release(a, NULL), FERRY_EINVAL);
    TU_ERR(ferry_wait(NULL, 0), FERRY_EINVAL);
    TU_ERR(ferry_subscriber_wait_publishers(NULL, 1, 0), FERRY_EINVAL);
    int fd = -1;
    TU_ERR(ferry_subscriber_fd(NULL, &fd), FERRY_EINVAL);
    TU_ERR(ferry_subscriber_fd(a, NULL), FERRY_EINVAL);
    ferry_subscriber_stats st;
    TU_ERR(ferry_subscriber_stats_get(NULL, &st), FERRY_EINVAL);
    TU_ERR(ferry_subscriber_stats_get(a, NULL), FERRY_EINVAL);
    TU_ERR(ferry_subscriber_destroy(NULL), FERRY_EINVAL);

    ferry_time t0 = ferry_now();
    TU_ERR(ferry_wait(a, 30 * TU_MS), FERRY_ETIMEDOUT);
    TU_CMP_I64(tu_since(t0), >=, 30 * TU_MS);
    TU_ERR(ferry_wait(a, 0), FERRY_ETIMEDOUT);
    TU_ERR(ferry_subscriber_wait_publishers(a, 2, 20 * TU_MS), FERRY_ETIMEDOUT);

    for (uint64_t seq = 1; seq <= 3; seq++)
        tu_publish_pattern(pub, 256, seq);
    TU_OK(ferry_wait(a, TU_WAIT_NS));
    TU_OK(ferry_wait(b, TU_WAIT_NS));

    /* A sample taken by a goes back through a only. */
    TU_OK(ferry_take(a, &s));
    TU_SAMPLE_INTACT(&s, 256);
    TU_EQ_U64(s.sequence, 1);
    TU_ERR(ferry_release(b, &s), FERRY_EFOREIGN);

    /* max_held = 2. */
    TU_OK(ferry_take(a, &t));
    TU_EQ_U64(t.sequence, 2);
    TU_ERR(ferry_take(a, &u), FERRY_ELIMIT);
    TU_OK(ferry_subscriber_stats_get(a, &st));
    TU_EQ_U64(st.held, 2);

    /* Holding samples: neither the subscriber nor the node may go. */
    TU_ERR(ferry_subscriber_destroy(a), FERRY_EBUSY);
    TU_ERR(ferry_node_destroy(node), FERRY_EBUSY);

    /* Double release, through the cleared sample and through a copy of it. */
    copy = s;
    TU_OK(ferry_release(a, &s));
    TU_ERR(ferry_release(a, &s), FERRY_ESTATE);
    TU_ERR(ferry_release(a, &copy), FERRY_ESTATE);
    TU_OK(ferry_take(a, &u));
    TU_EQ_U64(u.sequence, 3);
    TU_ERR(ferry_take(a, &s), FERRY_ELIMIT);
    TU_OK(ferry_release(a, &t));
    TU_OK(ferry_release(a, &u));
    TU_ERR(ferry_release(a, &t), FERRY_ESTATE);
    TU_ERR(ferry_take(a, &s), FERRY_EAGAIN);
    TU_OK(ferry_subscriber_stats_get(a, &st));
    TU_EQ_U64(st.held, 0);
    TU_EQ_U64(st.received, 3);

    TU_OK(ferry_subscriber_destroy(a));
    TU_ERR(ferry_subscriber_destroy(a), FERRY_ECLOSED);
    TU_ERR(ferry_take(a, &s), FERRY_ECLOSED);
    TU_ERR(ferry_release(a, &copy), FERRY_ECLOSED);
    TU_ERR(ferry_wait(a, 0), FERRY_ECLOSED);
    TU_ERR(ferry_subscriber_wait_publishers(a, 0, 0), FERRY_ECLOSED);
    TU_ERR(ferry_subscriber_fd(a, &fd), FERRY_ECLOSED);
    TU_ERR(ferry_subscriber_stats_get(a, &st), FERRY_ECLOSED);

    /* b still has its three samples. */
    for (uint64_t seq = 1; seq <= 3; seq++) {
        TU_OK(ferry_take(b, &s));
        TU_EQ_U64(s.sequence, seq);
        TU_SAMPLE_INTACT(&s, 256);
        TU_OK(ferry_release(b, &s));
    }
    TU_OK(ferry_subscriber_destroy(b));
    TU_ERR(ferry_node_destroy(node), FERRY_EBUSY);
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
}

static void test_waitset_calls(void)
{
    ferry_node *node = tu_node("wscalls");
    ferry_waitset *ws = NULL, *ws2 = NULL;
    ferry_subscriber *sub = NULL;
    TU_ERR(ferry_waitset_create(NULL, node), FERRY_EINVAL);
    TU_ERR(ferry_waitset_create(&ws, NULL), FERRY_EINVAL);
    TU_OK(ferry_waitset_create(&ws, node));
    TU_OK(ferry_waitset_create(&ws2, node));
    TU_OK(ferry_subscriber_create(&sub, node, "/w", TYPE, type_hash(), NULL));

    void *ready[4];
    size_t count = 99;
    TU_ERR(ferry_waitset_add(NULL, sub, NULL), FERRY_EINVAL);
    TU_ERR(ferry_waitset_add(ws, NULL, NULL), FERRY_EINVAL);
    TU_ERR(ferry_waitset_remove(ws, sub), FERRY_ESTATE);
    TU_OK(ferry_waitset_add(ws, sub, &count));
    TU_ERR(ferry_waitset_add(ws, sub, &count), FERRY_EBUSY);
    TU_ERR(ferry_waitset_add(ws2, sub, &count), FERRY_EBUSY);
    TU_ERR(ferry_waitset_remove(ws2, sub), FERRY_ESTATE);
    TU_ERR(ferry_waitset_remove(NULL, sub), FERRY_EINVAL);
    TU_ERR(ferry_waitset_remove(ws, NULL), FERRY_EINVAL);

    TU_ERR(ferry_waitset_wait(NULL, 0, ready, 4, &count), FERRY_EINVAL);
    TU_ERR(ferry_waitset_wait(ws, 0, NULL, 4, &count), FERRY_EINVAL);
    TU_ERR(ferry_waitset_wait(ws, 0, ready, 0, &count), FERRY_EINVAL);
    TU_ERR(ferry_waitset_wait(ws, 0, ready, 4, NULL), FERRY_EINVAL);
    ferry_time t0 = ferry_now();
    TU_ERR(ferry_waitset_wait(ws, 30 * TU_MS, ready, 4, &count), FERRY_ETIMEDOUT);
    TU_CMP_I64(tu_since(t0), >=, 30 * TU_MS);
    TU_EQ_U64(count, 0);

    TU_ERR(ferry_node_destroy(node), FERRY_EBUSY);
    TU_OK(ferry_waitset_remove(ws, sub));
    TU_ERR(ferry_waitset_remove(ws, sub), FERRY_ESTATE);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_ERR(ferry_node_destroy(node), FERRY_EBUSY);
    TU_ERR(ferry_waitset_destroy(NULL), FERRY_EINVAL);
    TU_OK(ferry_waitset_destroy(ws));
    TU_ERR(ferry_node_destroy(node), FERRY_EBUSY);
    TU_OK(ferry_waitset_destroy(ws2));
    TU_OK(ferry_node_destroy(node));
}

#ifdef FERRY_CHECKS
/* A chunk given back to the pool twice: with the checks compiled in, the pool's own invariant
 * catches it at once (an abort that names the check). */
static int double_put_main(void *arg)
{
    (void)arg;
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    ferry__pool p;
    TU_OK(ferry__pool_init(&p, 1, 1u << 20, 8, 4096, 64, FERRY_HUGE_PAGES_OFF));
    ferry_err err = FERRY_OK;
    uint32_t index = ferry__pool_get(&p, 100, &err);
    TU_CHECK(index != FERRY__NONE);
    ferry__pool_put(&p, index);
    ferry__pool_put(&p, index); /* must not return */
    return 0;
}
#endif

static void test_invariant_checks(void)
{
#ifdef FERRY_CHECKS
    pid_t pid = tu_fork(double_put_main, NULL, 10);
    int st = tu_wait_status(pid, TU_WAIT_MS);
    TU_CHECK_MSG(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT,
                 "a chunk put twice was not caught (status 0x%x)", st);
#else
    printf("    the invariant checks are not compiled in (-DFERRY_CHECKS=ON)\n");
#endif
}

int main(void)
{
    TU_RUN(test_messages);
    TU_RUN(test_topic_names);
    TU_RUN(test_node_arguments);
    TU_RUN(test_create_arguments);
    TU_RUN(test_publisher_calls);
    TU_RUN(test_subscriber_calls);
    TU_RUN(test_waitset_calls);
    TU_RUN(test_invariant_checks);
    return 0;
}
