/*
 * Publish/subscribe between processes: payload integrity at camera frame sizes, ordering and
 * sequence numbers, several publishers and subscribers on one topic, either start order,
 * history for late joiners, and a payload size that changes mid-stream.
 */
#include "testutil.h"

#include "platform/platform.h"

#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#define TYPE "test/pubsub"
#define MAX_PEERS 4

/* What one forked publisher or subscriber does; the same description serves every test. */
typedef struct role {
    const char *topic;
    int index;           /* this publisher's index into to_pub */
    int npubs, nsubs;    /* the peers to wait for */
    uint64_t count;      /* samples per publisher */
    const size_t *sizes; /* sample seq uses sizes[(seq - 1) / (count / nsizes)] */
    int nsizes;
    uint32_t depth;
    ferry_overflow overflow;
    uint32_t pub_history;
    tu_pipe to_pub[MAX_PEERS]; /* messages for publisher i: "ready", "done" */
    tu_pipe created;           /* a child that was created tells the parent */
    bool check_classes;        /* publisher: size_classes must grow with each new size */
} role;

enum { MSG_CREATED = 1, MSG_READY = 2, MSG_DONE = 3, MSG_PUBLISHED = 4 };

static size_t size_for(const role *r, uint64_t seq)
{
    uint64_t per = r->count / (uint64_t)r->nsizes;
    uint64_t k = (seq - 1) / per;
    if (k >= (uint64_t)r->nsizes)
        k = (uint64_t)r->nsizes - 1;
    return r->sizes[k];
}

static size_t max_size(const role *r)
{
    size_t m = 0;
    for (int i = 0; i < r->nsizes; i++)
        if (r->sizes[i] > m)
            m = r->sizes[i];
    return m;
}

static void expect_messages(ferry_publisher *pub, const tu_pipe *in, int n, uint64_t msg)
{
    for (int i = 0; i < n; i++)
        TU_EQ_U64(tu_serve_until(&pub, 1, in, TU_WAIT_MS), msg);
}

static int publisher_main(void *arg)
{
    const role *r = arg;
    ferry_node *node = tu_node("pub");
    ferry_publisher_options po;
    ferry_publisher_options_init(&po);
    po.admit_blocking = true; /* its subscribers ask to block it */
    po.block_timeout_ns = TU_WAIT_NS;
    po.history = r->pub_history;
    po.max_chunks = 4096; /* a deep subscriber queue may hold many small chunks */
    if (max_size(r) > po.max_sample_size)
        po.max_sample_size = max_size(r);
    ferry_publisher *pub = NULL;
    TU_OK(ferry_publisher_create(&pub, node, r->topic, TYPE, ferry_hash(TYPE), &po));
    if (r->created.w >= 0)
        tu_send(&r->created, MSG_CREATED);

    TU_OK(ferry_publisher_wait_subscribers(pub, (uint32_t)r->nsubs, TU_WAIT_NS));
    expect_messages(pub, &r->to_pub[r->index], r->nsubs, MSG_READY);

    uint32_t classes = 0;
    size_t last = 0;
    for (uint64_t seq = 1; seq <= r->count; seq++) {
        size_t size = size_for(r, seq);
        tu_publish_pattern(pub, size, seq);
        if (r->check_classes && (seq == r->count || size_for(r, seq + 1) != size)) {
            ferry_publisher_stats st;
            TU_OK(ferry_publisher_stats_get(pub, &st));
            if (size > last)
                TU_CMP_U64(st.size_classes, >, classes);
            else
                TU_CMP_U64(st.size_classes, >=, classes);
            classes = st.size_classes;
            last = size;
        }
    }
    expect_messages(pub, &r->to_pub[r->index], r->nsubs, MSG_DONE);

    ferry_publisher_stats st;
    TU_OK(ferry_publisher_stats_get(pub, &st));
    TU_EQ_U64(st.published, r->count);
    TU_EQ_U64(st.deliveries, r->count * (uint64_t)r->nsubs);
    TU_EQ_U64(st.dropped, 0);
    TU_EQ_U64(st.bytes_copied, 0);
    TU_EQ_U64(st.chunks_loaned, 0);
    TU_EQ_U64(st.chunks_total, st.chunks_free + st.chunks_loaned + st.chunks_in_use);
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    return 0;
}

static int subscriber_main(void *arg)
{
    const role *r = arg;
    ferry_node *node = tu_node("sub");
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = r->depth;
    so.overflow = r->overflow;
    ferry_subscriber *sub = NULL;
    TU_OK(ferry_subscriber_create(&sub, node, r->topic, TYPE, ferry_hash(TYPE), &so));
    if (r->created.w >= 0)
        tu_send(&r->created, MSG_CREATED);

    TU_OK(ferry_subscriber_wait_publishers(sub, (uint32_t)r->npubs, TU_WAIT_NS));
    for (int i = 0; i < r->npubs; i++)
        tu_send(&r->to_pub[i], MSG_READY);

    uint64_t ids[MAX_PEERS], next[MAX_PEERS];
    int64_t last_time[MAX_PEERS];
    int known = 0;
    uint64_t total = 0, want = r->count * (uint64_t)r->npubs;
    while (total < want) {
        ferry_sample s;
        ferry_err e = ferry_take(sub, &s);
        if (e == FERRY_EAGAIN) {
            TU_OK(ferry_wait(sub, TU_WAIT_NS));
            continue;
        }
        TU_OK(e);
        int k = 0;
        while (k < known && ids[k] != s.publisher_id)
            k++;
        if (k == known) {
            TU_CHECK_MSG(known < r->npubs, "samples from more than %d publishers", r->npubs);
            ids[k] = s.publisher_id;
            next[k] = 1;
            last_time[k] = 0;
            known++;
        }
        TU_EQ_U64(s.sequence, next[k]);
        TU_CMP_I64(s.publish_time.ns, >=, last_time[k]);
        TU_CMP_I64(s.publish_time.ns, <=, ferry_now().ns);
        TU_SAMPLE_INTACT(&s, size_for(r, s.sequence));
        next[k]++;
        last_time[k] = s.publish_time.ns;
        total++;
        TU_OK(ferry_release(sub, &s));
        TU_CHECK(s.data == NULL);
    }
    TU_EQ_U64(known, r->npubs);
    for (int k = 0; k < known; k++)
        TU_EQ_U64(next[k], r->count + 1);
    ferry_sample s;
    TU_ERR(ferry_take(sub, &s), FERRY_EAGAIN);

    ferry_subscriber_stats st;
    TU_OK(ferry_subscriber_stats_get(sub, &st));
    TU_EQ_U64(st.received, want);
    TU_EQ_U64(st.dropped, 0);
    TU_EQ_U64(st.bytes_copied, 0);
    TU_EQ_U64(st.held, 0);
    TU_EQ_U64(st.publishers, (uint64_t)r->npubs);
    for (int i = 0; i < r->npubs; i++)
        tu_send(&r->to_pub[i], MSG_DONE);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    return 0;
}

static role make_role(const char *topic, int npubs, int nsubs, uint64_t count, const size_t *sizes,
                      int nsizes)
{
    role r;
    memset(&r, 0, sizeof r);
    r.topic = topic;
    r.npubs = npubs;
    r.nsubs = nsubs;
    r.count = count;
    r.sizes = sizes;
    r.nsizes = nsizes;
    r.depth = 4;
    r.overflow = FERRY_OVERFLOW_BLOCK;
    for (int i = 0; i < MAX_PEERS; i++)
        r.to_pub[i] = i < npubs ? tu_pipe_make() : (tu_pipe){-1, -1};
    r.created = (tu_pipe){-1, -1};
    return r;
}

/* npubs publishers and nsubs subscribers, each in its own process, started together. */
static void run_group(role *r)
{
    pid_t pids[2 * MAX_PEERS];
    int n = 0;
    for (int i = 0; i < r->nsubs; i++)
        pids[n++] = tu_fork(subscriber_main, r, 60);
    for (int i = 0; i < r->npubs; i++) {
        r->index = i;
        pids[n++] = tu_fork(publisher_main, r, 60);
    }
    for (int i = 0; i < n; i++)
        TU_CHILD_OK(pids[i]);
}

static void test_integrity_two_subscribers(void)
{
    static const size_t sizes[] = {64, 1048576, 2764800, 6220800};
    role r = make_role("/cam/integrity", 1, 2, 4 * 5, sizes, 4);
    run_group(&r);
}

static void test_ordering(void)
{
    static const size_t sizes[] = {200};
    /* A shallow queue that blocks the publisher, and a deep one that never fills. */
    role r = make_role("/order", 1, 1, 500, sizes, 1);
    pid_t blocking = tu_fork(subscriber_main, &r, 60);
    role deep = r;
    deep.depth = 1024;
    deep.overflow = FERRY_OVERFLOW_DROP_OLDEST;
    pid_t dropping = tu_fork(subscriber_main, &deep, 60);
    r.nsubs = 2;
    pid_t pub = tu_fork(publisher_main, &r, 60);
    TU_CHILD_OK(blocking);
    TU_CHILD_OK(dropping);
    TU_CHILD_OK(pub);
}

static void test_many_to_many(void)
{
    static const size_t sizes[] = {4096};
    role r = make_role("/many/to/many", 2, 3, 100, sizes, 1);
    run_group(&r);
}

static void test_subscribers_first(void)
{
    static const size_t sizes[] = {65536};
    role r = make_role("/order/subs_first", 1, 2, 10, sizes, 1);
    r.created = tu_pipe_make();
    pid_t s1 = tu_fork(subscriber_main, &r, 60);
    pid_t s2 = tu_fork(subscriber_main, &r, 60);
    TU_EQ_U64(tu_recv(&r.created, TU_WAIT_MS), MSG_CREATED);
    TU_EQ_U64(tu_recv(&r.created, TU_WAIT_MS), MSG_CREATED);
    role p = r;
    p.created = (tu_pipe){-1, -1};
    pid_t pub = tu_fork(publisher_main, &p, 60);
    TU_CHILD_OK(s1);
    TU_CHILD_OK(s2);
    TU_CHILD_OK(pub);
}

static void test_publisher_first(void)
{
    static const size_t sizes[] = {65536};
    role r = make_role("/order/pub_first", 1, 2, 10, sizes, 1);
    r.created = tu_pipe_make();
    pid_t pub = tu_fork(publisher_main, &r, 60);
    TU_EQ_U64(tu_recv(&r.created, TU_WAIT_MS), MSG_CREATED);
    role s = r;
    s.created = (tu_pipe){-1, -1};
    pid_t s1 = tu_fork(subscriber_main, &s, 60);
    pid_t s2 = tu_fork(subscriber_main, &s, 60);
    TU_CHILD_OK(s1);
    TU_CHILD_OK(s2);
    TU_CHILD_OK(pub);
}

static void test_resolution_change(void)
{
    static const size_t sizes[] = {2764800, 6220800, 64};
    role r = make_role("/cam/resize", 1, 1, 3 * 3, sizes, 3);
    r.check_classes = true;
    r.depth = 16;
    run_group(&r);
}

/* --- late joiners ---------------------------------------------------------------------------- */

#define HIST_SIZE 8192
#define HIST_SUBS 4

typedef struct history_args {
    tu_pipe to_parent, to_pub;
    uint32_t sub_history;
} history_args;

static int history_publisher(void *arg)
{
    history_args *a = arg;
    ferry_node *node = tu_node("histpub");
    ferry_publisher_options po;
    ferry_publisher_options_init(&po);
    po.history = 3;
    ferry_publisher *pub = NULL;
    TU_OK(ferry_publisher_create(&pub, node, "/hist", TYPE, ferry_hash(TYPE), &po));
    for (uint64_t seq = 1; seq <= 5; seq++)
        tu_publish_pattern(pub, HIST_SIZE, seq);
    tu_send(&a->to_parent, MSG_PUBLISHED);

    TU_OK(ferry_publisher_wait_subscribers(pub, HIST_SUBS, TU_WAIT_NS));
    expect_messages(pub, &a->to_pub, HIST_SUBS, MSG_READY);
    tu_publish_pattern(pub, HIST_SIZE, 6);
    expect_messages(pub, &a->to_pub, HIST_SUBS, MSG_DONE);

    ferry_publisher_stats st;
    TU_OK(ferry_publisher_stats_get(pub, &st));
    TU_EQ_U64(st.published, 6);
    TU_EQ_U64(st.dropped, 0);
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    return 0;
}

static void take_one(ferry_subscriber *sub, uint64_t seq)
{
    ferry_sample s;
    ferry_err e = ferry_take(sub, &s);
    if (e == FERRY_EAGAIN) {
        TU_OK(ferry_wait(sub, TU_WAIT_NS));
        e = ferry_take(sub, &s);
    }
    TU_OK(e);
    TU_EQ_U64(s.sequence, seq);
    TU_SAMPLE_INTACT(&s, HIST_SIZE);
    TU_OK(ferry_release(sub, &s));
}

static int history_subscriber(void *arg)
{
    history_args *a = arg;
    ferry_node *node = tu_node("histsub");
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = 8;
    so.history = a->sub_history;
    ferry_subscriber *sub = NULL;
    TU_OK(ferry_subscriber_create(&sub, node, "/hist", TYPE, ferry_hash(TYPE), &so));
    TU_OK(ferry_subscriber_wait_publishers(sub, 1, TU_WAIT_NS));

    uint64_t got = a->sub_history < 3 ? a->sub_history : 3;
    for (uint64_t seq = 6 - got; seq <= 5; seq++)
        take_one(sub, seq);
    /* Nothing else from the past. */
    TU_ERR(ferry_wait(sub, 200 * TU_MS), FERRY_ETIMEDOUT);

    tu_send(&a->to_pub, MSG_READY);
    take_one(sub, 6);
    ferry_subscriber_stats st;
    TU_OK(ferry_subscriber_stats_get(sub, &st));
    TU_EQ_U64(st.received, got + 1);
    TU_EQ_U64(st.dropped, 0);
    tu_send(&a->to_pub, MSG_DONE);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    return 0;
}

typedef struct inspect_acc {
    int publishers, subscribers, alive;
    uint64_t published;
    bool type_ok, topic_ok;
} inspect_acc;

static bool inspect_cb(void *arg, const ferry_endpoint_info *info)
{
    inspect_acc *acc = arg;
    if (info->kind == FERRY_ENDPOINT_PUBLISHER) {
        acc->publishers++;
        acc->published = info->pub.published;
    } else {
        acc->subscribers++;
    }
    if (info->alive)
        acc->alive++;
    acc->type_ok = strcmp(info->type_name, TYPE) == 0 && info->type_hash == ferry_hash(TYPE);
    acc->topic_ok = strcmp(info->topic, "/hist") == 0 || strcmp(info->topic, "hist") == 0;
    return true;
}

static void test_late_joiner_history(void)
{
    history_args a;
    a.to_parent = tu_pipe_make();
    a.to_pub = tu_pipe_make();
    a.sub_history = 0;
    pid_t pub = tu_fork(history_publisher, &a, 60);
    TU_EQ_U64(tu_recv(&a.to_parent, TU_WAIT_MS), MSG_PUBLISHED);

    /* The publisher is visible with its count before anyone subscribes. */
    inspect_acc acc;
    memset(&acc, 0, sizeof acc);
    TU_OK(ferry_inspect(tu_dir(), tu_domain(), "/hist", inspect_cb, &acc));
    TU_EQ_U64(acc.publishers, 1);
    TU_EQ_U64(acc.subscribers, 0);
    TU_EQ_U64(acc.alive, 1);
    TU_EQ_U64(acc.published, 5);
    TU_CHECK(acc.type_ok);
    TU_CHECK(acc.topic_ok);

    static const uint32_t histories[HIST_SUBS] = {3, 1, 10, 0};
    pid_t subs[HIST_SUBS];
    for (int i = 0; i < HIST_SUBS; i++) {
        a.sub_history = histories[i];
        subs[i] = tu_fork(history_subscriber, &a, 60);
    }
    for (int i = 0; i < HIST_SUBS; i++)
        TU_CHILD_OK(subs[i]);
    TU_CHILD_OK(pub);
}

/* Background subscribers are never woken by a publication, yet see every sample within their
 * poll period. A background subscriber sleeps in ferry_wait, then in a waitset; each time, the
 * publisher publishes 2 ms after the subscriber said it goes to sleep. Woken, it would take the
 * sample tens of microseconds later; looking every FERRY_BACKGROUND_POLL_NS from its sleep's
 * start, it takes it about 3 ms later: never before 0.5 ms as a rule (the median is checked),
 * and never as late as the wait's timeout. */
#define BG_WAITS 10 /* samples for ferry_wait, and as many for the waitset */
typedef struct bg_args {
    tu_pipe to_pub, to_sub;
} bg_args;

static int64_t median_ns(int64_t *v, int n)
{
    for (int i = 1; i < n; i++)
        for (int k = i; k > 0 && v[k - 1] > v[k]; k--) {
            int64_t t = v[k];
            v[k] = v[k - 1];
            v[k - 1] = t;
        }
    return v[n / 2];
}

static int bg_subscriber(void *arg)
{
    bg_args *a = arg;
    TU_EQ_U64(tu_recv(&a->to_sub, TU_WAIT_MS), MSG_CREATED);
    ferry_node *node = tu_node("background");
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.spin_ns = FERRY_SPIN_OFF;
    so.background = true;
    ferry_subscriber *sub;
    TU_OK(ferry_subscriber_create(&sub, node, "/bg", TYPE, ferry_hash(TYPE), &so));
    TU_OK(ferry_subscriber_wait_publishers(sub, 1, TU_WAIT_NS));
    ferry_waitset *ws;
    TU_OK(ferry_waitset_create(&ws, node));
    TU_OK(ferry_waitset_add(ws, sub, sub));
    int64_t delay[2][BG_WAITS], worst = 0;
    for (int i = 0; i < 2 * BG_WAITS; i++) {
        tu_send(&a->to_pub, MSG_READY);
        if (i < BG_WAITS) {
            TU_OK(ferry_wait(sub, 5 * TU_WAIT_NS));
        } else {
            void *ready[1];
            size_t count;
            TU_OK(ferry_waitset_wait(ws, 5 * TU_WAIT_NS, ready, 1, &count));
            TU_EQ_U64(count, 1);
        }
        ferry_sample smp;
        TU_OK(ferry_take(sub, &smp));
        int64_t d = tu_since(smp.publish_time);
        delay[i / BG_WAITS][i % BG_WAITS] = d;
        worst = d > worst ? d : worst;
        TU_OK(ferry_release(sub, &smp));
    }
    int64_t m_wait = median_ns(delay[0], BG_WAITS), m_set = median_ns(delay[1], BG_WAITS);
    printf("  background subscriber: sample seen after %.2f ms (ferry_wait) and %.2f ms (waitset) "
           "medians, %.2f ms at worst\n",
           (double)m_wait / 1e6, (double)m_set / 1e6, (double)worst / 1e6);
    TU_CHECK_MSG(m_wait >= TU_MS / 2 && m_set >= TU_MS / 2,
                 "a publication woke the background subscriber");
    TU_CHECK_MSG(worst < 1000 * TU_MS, "a background subscriber waited %.1f ms for a sample",
                 (double)worst / 1e6);
    TU_OK(ferry_waitset_destroy(ws));
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    return 0;
}

static void test_background_not_woken(void)
{
    /* The child first, so that it does not inherit the publisher's mappings. */
    bg_args a = {tu_pipe_make(), tu_pipe_make()};
    pid_t kid = tu_fork(bg_subscriber, &a, 60);
    ferry_node *node = tu_node("bg_pub");
    ferry_publisher *pub;
    TU_OK(ferry_publisher_create(&pub, node, "/bg", TYPE, ferry_hash(TYPE), NULL));
    tu_send(&a.to_sub, MSG_CREATED);
    for (uint64_t seq = 1; seq <= 2 * BG_WAITS; seq++) {
        TU_EQ_U64(tu_serve_until(&pub, 1, &a.to_pub, TU_WAIT_MS), MSG_READY);
        int64_t until = ferry_now().ns + 2 * TU_MS; /* asleep by then, as a rule */
        while (ferry_now().ns < until)
            ferry_publisher_poll(pub, TU_MS / 2);
        tu_publish_pattern(pub, 64, seq);
    }
    TU_CHILD_OK(kid);
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
}

int main(void)
{
    TU_RUN(test_integrity_two_subscribers);
    TU_RUN(test_ordering);
    TU_RUN(test_many_to_many);
    TU_RUN(test_subscribers_first);
    TU_RUN(test_publisher_first);
    TU_RUN(test_late_joiner_history);
    TU_RUN(test_resolution_change);
    TU_RUN(test_background_not_woken);
    /* Honest peers send only what closes without waiting, and every connection socket drains
     * to its end: nothing went to the disposal thread, which was never started. */
    uint64_t deferred, kept;
    uint32_t threads;
    ferry__fd_disposal_stats(&deferred, &kept, &threads);
    TU_EQ_U64(deferred, 0);
    TU_EQ_U64(kept, 0);
    TU_EQ_U64(threads, 0);
    return 0;
}
