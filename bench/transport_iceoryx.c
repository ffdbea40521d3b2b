/*
 * iceoryx 2.0 through its C binding, the zero-copy peer: iox_pub_loan_chunk /
 * iox_pub_publish_chunk on one side, iox_sub_take_chunk / iox_sub_release_chunk on the other,
 * the subscriber asleep in a waitset (iox_ws_timed_wait) until its queue has data. The driver
 * writes and reads the frame in the chunk, as for ferry. Rows run below the private RouDi of
 * bench/roudi.c, and each side is a fresh process (iceoryx has one runtime per process).
 *
 * Drop-oldest rows: subscriber queue of the row's depth with QueueFullPolicy_DISCARD_OLDEST_DATA.
 * Lossless rows: QueueFullPolicy_BLOCK_PRODUCER with a publisher that waits for its consumer
 * (ConsumerTooSlowPolicy_WAIT_FOR_CONSUMER), so publish blocks while the queue is full.
 */
#include "bench.h"

#include <iceoryx_binding_c/chunk.h>
#include <iceoryx_binding_c/log.h>
#include <iceoryx_binding_c/publisher.h>
#include <iceoryx_binding_c/runtime.h>
#include <iceoryx_binding_c/subscriber.h>
#include <iceoryx_binding_c/wait_set.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define IB_SERVICE "ferry", "bench", "transport"
#define IB_CONNECT_NS ((int64_t)10 * 1000000000)
#define IB_POOL_WAIT_NS ((int64_t)2 * 1000000000)
#define IB_MAX_QUEUE 256u /* iceoryx 2.0's largest subscriber queue */

typedef struct ib_state {
    bench_params p;
    iox_pub_storage_t pub_storage;
    iox_sub_storage_t sub_storage;
    iox_ws_storage_t ws_storage;
    iox_pub_t pub;
    iox_sub_t sub;
    iox_ws_t ws;
    const void *chunk; /* subscriber: the chunk between sub_recv and sub_done */
} ib_state;

static int ib_prepare(void **state, const bench_params *p)
{
    if (p->variant && p->variant[0]) {
        fprintf(stderr, "ferry bench: iceoryx: unknown variant '%s'\n", p->variant);
        return -1;
    }
    ib_state *s = calloc(1, sizeof *s);
    if (!s)
        return -1;
    s->p = *p;
    if (s->p.depth > IB_MAX_QUEUE)
        s->p.depth = IB_MAX_QUEUE;
    *state = s;
    return 0;
}

static void ib_runtime(const char *role)
{
    char name[64];
    snprintf(name, sizeof name, "ferry-bench-%s-%ld", role, (long)getpid());
    iox_set_loglevel(Iceoryx_LogLevel_Warn);
    iox_runtime_init(name);
}

static int ib_pub_open(void *state)
{
    ib_state *s = state;
    ib_runtime("pub");
    iox_pub_options_t o;
    iox_pub_options_init(&o);
    o.historyCapacity = 0;
    o.subscriberTooSlowPolicy = s->p.lossless ? ConsumerTooSlowPolicy_WAIT_FOR_CONSUMER
                                              : ConsumerTooSlowPolicy_DISCARD_OLDEST_DATA;
    s->pub = iox_pub_init(&s->pub_storage, IB_SERVICE, &o);
    int64_t deadline = cli_now_ns() + IB_CONNECT_NS;
    while (!iox_pub_has_subscribers(s->pub)) {
        if (cli_now_ns() > deadline) {
            fprintf(stderr, "ferry bench: iceoryx: no subscriber within 10 s\n");
            return -1;
        }
        usleep(1000);
    }
    return 0;
}

static int ib_pub_loan(void *state, void **buf, size_t *size)
{
    ib_state *s = state;
    int64_t deadline = 0;
    for (;;) {
        enum iox_AllocationResult r = iox_pub_loan_chunk(s->pub, buf, (uint32_t)s->p.payload);
        if (r == AllocationResult_SUCCESS)
            break;
        /* Chunks come back as the subscriber releases them. */
        if (r != AllocationResult_RUNNING_OUT_OF_CHUNKS) {
            fprintf(stderr, "ferry bench: iceoryx: loan of %zu bytes failed (%d)\n", s->p.payload,
                    (int)r);
            return -1;
        }
        if (deadline == 0)
            deadline = cli_now_ns() + IB_POOL_WAIT_NS;
        if (cli_now_ns() > deadline) {
            fprintf(stderr, "ferry bench: iceoryx: out of chunks for 2 s\n");
            return -1;
        }
        usleep(100);
    }
    *size = s->p.payload;
    return 0;
}

static int ib_pub_send(void *state, void *buf)
{
    ib_state *s = state;
    iox_pub_publish_chunk(s->pub, buf);
    return 0;
}

static void ib_pub_close(void *state)
{
    ib_state *s = state;
    if (s->pub) {
        iox_pub_deinit(s->pub);
        s->pub = NULL;
        iox_runtime_shutdown();
    }
}

static int ib_sub_open(void *state)
{
    ib_state *s = state;
    ib_runtime("sub");
    iox_sub_options_t o;
    iox_sub_options_init(&o);
    o.queueCapacity = s->p.depth;
    o.historyRequest = 0;
    o.queueFullPolicy =
        s->p.lossless ? QueueFullPolicy_BLOCK_PRODUCER : QueueFullPolicy_DISCARD_OLDEST_DATA;
    s->sub = iox_sub_init(&s->sub_storage, IB_SERVICE, &o);
    s->ws = iox_ws_init(&s->ws_storage);
    if (iox_ws_attach_subscriber_state(s->ws, s->sub, SubscriberState_HAS_DATA, 0, NULL) !=
        WaitSetResult_SUCCESS) {
        fprintf(stderr, "ferry bench: iceoryx: cannot attach the subscriber to a waitset\n");
        return -1;
    }
    int64_t deadline = cli_now_ns() + IB_CONNECT_NS;
    while (iox_sub_get_subscription_state(s->sub) != SubscribeState_SUBSCRIBED) {
        if (cli_now_ns() > deadline) {
            fprintf(stderr, "ferry bench: iceoryx: not subscribed within 10 s\n");
            return -1;
        }
        usleep(1000);
    }
    return 0;
}

static int ib_sub_recv(void *state, const void **data, size_t *size, int64_t *recv_ns,
                       int64_t timeout_ns)
{
    ib_state *s = state;
    int64_t deadline = cli_now_ns() + timeout_ns;
    for (;;) {
        enum iox_ChunkReceiveResult r = iox_sub_take_chunk(s->sub, &s->chunk);
        if (r == ChunkReceiveResult_SUCCESS) {
            *recv_ns = cli_now_ns();
            *data = s->chunk;
            *size = s->p.payload;
            return 0;
        }
        if (r != ChunkReceiveResult_NO_CHUNK_AVAILABLE) {
            fprintf(stderr, "ferry bench: iceoryx: take failed (%d)\n", (int)r);
            return -1;
        }
        int64_t left = deadline - cli_now_ns();
        if (left <= 0)
            return 1;
        struct timespec ts = {.tv_sec = (time_t)(left / 1000000000),
                              .tv_nsec = (long)(left % 1000000000)};
        iox_notification_info_t info[1];
        uint64_t missed = 0;
        iox_ws_timed_wait(s->ws, ts, info, 1, &missed);
    }
}

static int ib_sub_done(void *state)
{
    ib_state *s = state;
    iox_sub_release_chunk(s->sub, s->chunk);
    s->chunk = NULL;
    return 0;
}

static void ib_sub_close(void *state)
{
    ib_state *s = state;
    if (s->ws) {
        iox_ws_detach_subscriber_state(s->ws, s->sub, SubscriberState_HAS_DATA);
        iox_ws_deinit(s->ws);
        s->ws = NULL;
    }
    if (s->sub) {
        iox_sub_deinit(s->sub);
        s->sub = NULL;
        iox_runtime_shutdown();
    }
}

static void ib_release(void *state)
{
    free(state);
}

static const char *ib_available(void)
{
    return bench_roudi_available();
}

const bench_transport bench_transport_iceoryx = {
    .name = "iceoryx",
    .summary = "iceoryx 2.0 C binding: loan/publish chunk, take/release chunk, waitset",
    .caps = BENCH_CAP_LOSSLESS | BENCH_CAP_PROCESS | BENCH_CAP_ROUDI,
    .available = ib_available,
    .prepare = ib_prepare,
    .pub_open = ib_pub_open,
    .pub_loan = ib_pub_loan,
    .pub_send = ib_pub_send,
    .pub_close = ib_pub_close,
    .sub_open = ib_sub_open,
    .sub_recv = ib_sub_recv,
    .sub_done = ib_sub_done,
    .sub_close = ib_sub_close,
    .release = ib_release,
};
