/*
 * No allocation on the hot path: once a publisher and a subscriber are connected and the size
 * class exists, loan, publish, take and release make no heap allocation, in one process and
 * across two. The heap functions are interposed here and counted while a flag is on.
 */
#include "testutil.h"

#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ALLOC_TEST_SKIP 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) ||                         \
    __has_feature(memory_sanitizer)
#define ALLOC_TEST_SKIP 1
#endif
#endif

#define TYPE "test/alloc"
#define SIZE 4096
#define WARMUP 10
#define CYCLES 1000

#ifndef ALLOC_TEST_SKIP

extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t size);
extern void *__libc_memalign(size_t align, size_t size);
extern void __libc_free(void *p);

static volatile int counting;
static unsigned long allocs, frees;
static size_t first_sizes[8];

static void count_alloc(size_t size)
{
    if (counting) {
        if (allocs < sizeof first_sizes / sizeof first_sizes[0])
            first_sizes[allocs] = size;
        allocs++;
    }
}

void *malloc(size_t size)
{
    count_alloc(size);
    return __libc_malloc(size);
}

void *calloc(size_t n, size_t size)
{
    count_alloc(n * size);
    return __libc_calloc(n, size);
}

void *realloc(void *p, size_t size)
{
    count_alloc(size);
    return __libc_realloc(p, size);
}

void *memalign(size_t align, size_t size)
{
    count_alloc(size);
    return __libc_memalign(align, size);
}

void *aligned_alloc(size_t align, size_t size)
{
    count_alloc(size);
    return __libc_memalign(align, size);
}

int posix_memalign(void **out, size_t align, size_t size)
{
    if (align < sizeof(void *) || (align & (align - 1)) != 0)
        return EINVAL;
    count_alloc(size);
    void *p = __libc_memalign(align, size);
    if (p == NULL)
        return ENOMEM;
    *out = p;
    return 0;
}

void free(void *p)
{
    if (counting && p != NULL)
        frees++;
    __libc_free(p);
}

static void counting_on(void)
{
    allocs = frees = 0;
    counting = 1;
}

static void counting_off_expect_none(const char *where)
{
    counting = 0;
    if (allocs != 0 || frees != 0) {
        char sizes[256] = "";
        size_t len = 0;
        for (unsigned long i = 0; i < allocs && i < 8; i++)
            len += (size_t)snprintf(sizes + len, sizeof sizes - len, " %zu", first_sizes[i]);
        TU_FAIL("%s: %lu allocations (first sizes:%s) and %lu frees on the hot path, expected 0",
                where, allocs, sizes, frees);
    }
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
    TU_SAMPLE_INTACT(&s, SIZE);
    TU_OK(ferry_release(sub, &s));
}

static void publish_one(ferry_publisher *pub, uint64_t seq)
{
    void *p = NULL;
    TU_OK(ferry_loan(pub, SIZE, &p));
    tu_fill(p, SIZE, seq);
    TU_OK(ferry_publish(pub, p, 0));
}

static ferry_publisher *make_pub(ferry_node *node)
{
    ferry_publisher_options po;
    ferry_publisher_options_init(&po);
    po.admit_blocking = true; /* its subscribers ask to block it */
    po.block_timeout_ns = TU_WAIT_NS;
    ferry_publisher *pub = NULL;
    TU_OK(ferry_publisher_create(&pub, node, "/alloc", TYPE, ferry_hash(TYPE), &po));
    return pub;
}

static ferry_subscriber *make_sub(ferry_node *node)
{
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = 8;
    so.overflow = FERRY_OVERFLOW_BLOCK;
    ferry_subscriber *sub = NULL;
    TU_OK(ferry_subscriber_create(&sub, node, "/alloc", TYPE, ferry_hash(TYPE), &so));
    return sub;
}

static void test_one_process(void)
{
    /* The interposition sees the library's own allocations (creating a node allocates). */
    counting_on();
    ferry_node *node = tu_node("alloc");
    counting = 0;
    TU_CMP_U64(allocs, >=, 1);

    ferry_publisher *pub = make_pub(node);
    ferry_subscriber *sub = make_sub(node);
    tu_connect_local(pub, 1, sub, 1);
    uint64_t seq = 0;
    for (int i = 0; i < WARMUP; i++) {
        publish_one(pub, ++seq);
        take_one(sub, seq);
    }

    counting_on();
    for (int i = 0; i < CYCLES; i++) {
        publish_one(pub, ++seq);
        take_one(sub, seq);
        /* Spread the cycles over a quarter second so periodic housekeeping runs among them. */
        if (i % 4 == 0)
            tu_sleep_ns(TU_MS);
    }
    counting_off_expect_none("loan/publish/take/release in one process");

    ferry_subscriber_stats ss;
    ferry_publisher_stats ps;
    TU_OK(ferry_subscriber_stats_get(sub, &ss));
    TU_OK(ferry_publisher_stats_get(pub, &ps));
    TU_EQ_U64(ss.received, WARMUP + CYCLES);
    TU_EQ_U64(ps.published, WARMUP + CYCLES);
    TU_EQ_U64(ps.size_classes, 1);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
}

enum { MSG_READY = 1, MSG_DONE };

static int subscriber_main(void *arg)
{
    tu_pipe *to_pub = arg;
    ferry_node *node = tu_node("allocsub");
    ferry_subscriber *sub = make_sub(node);
    TU_OK(ferry_subscriber_wait_publishers(sub, 1, TU_WAIT_NS));
    tu_send(to_pub, MSG_READY);
    uint64_t seq = 0;
    for (int i = 0; i < WARMUP; i++)
        take_one(sub, ++seq);
    counting_on();
    for (int i = 0; i < CYCLES; i++)
        take_one(sub, ++seq);
    counting_off_expect_none("take/release in the subscriber process");
    tu_send(to_pub, MSG_DONE);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    return 0;
}

static void test_two_processes(void)
{
    tu_pipe to_pub = tu_pipe_make();
    pid_t child = tu_fork(subscriber_main, &to_pub, 60);
    ferry_node *node = tu_node("allocpub");
    ferry_publisher *pub = make_pub(node);
    TU_OK(ferry_publisher_wait_subscribers(pub, 1, TU_WAIT_NS));
    TU_EQ_U64(tu_serve_until(&pub, 1, &to_pub, TU_WAIT_MS), MSG_READY);
    uint64_t seq = 0;
    for (int i = 0; i < WARMUP; i++)
        publish_one(pub, ++seq);
    counting_on();
    for (int i = 0; i < CYCLES; i++)
        publish_one(pub, ++seq);
    counting_off_expect_none("loan/publish in the publisher process");
    TU_EQ_U64(tu_serve_until(&pub, 1, &to_pub, 30000), MSG_DONE);
    TU_CHILD_OK(child);
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
}

int main(void)
{
    /* Make stdio allocate its buffers before anything is counted. */
    printf("alloc_test: counting heap calls on the hot path\n");
    fflush(stdout);
    TU_RUN(test_one_process);
    TU_RUN(test_two_processes);
    return 0;
}

#else

int main(void)
{
    printf("alloc_test: skipped, the sanitizer owns malloc\n");
    return TU_SKIP;
}

#endif
