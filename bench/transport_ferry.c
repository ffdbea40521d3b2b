/*
 * ferry's zero-copy path through the real library: ferry_loan / ferry_publish on one side,
 * ferry_take / ferry_release on the other. The driver writes the frame into the loan and reads
 * it in the taken sample, in place: no payload byte is copied by the transport.
 */
#include "bench.h"

#include <errno.h>
#include <poll.h>
#include <time.h>

#include <ferry/ferry.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FB_TOPIC "/bench/transport"
#define FB_TYPE "ferry/bench_message"
#define FB_CONNECT_NS ((int64_t)10 * 1000000000)
#define FB_POOL_WAIT_NS ((int64_t)2 * 1000000000)
#define FB_BLOCK_NS ((int64_t)5 * 1000000000) /* lossless: a publish waits at most this long */

typedef struct fb_state {
    bench_params p;
    ferry_node *node;
    ferry_publisher *pub;
    ferry_subscriber *sub;
    ferry_sample sample; /* subscriber: the sample between sub_recv and sub_done */
    /* Variant rows (bench_entry.variant): */
    bool busy_poll; /* "busy-poll": the subscriber polls instead of sleeping */
    bool no_spin;   /* "no-spin": both sides sleep at once (FERRY_SPIN_OFF) */
    bool huge;      /* "huge": the pool on huge pages where the machine offers them */
    /* How the subscriber sleeps: ferry_wait (0), or as an event loop does: poll(2) on its
     * descriptor with the anticipation of ferry_subscriber_wake_at/catch ("fd") or without it
     * ("fd-plain"), or a ferry_waitset ("waitset"). */
    enum { FB_WAIT, FB_FD, FB_FD_PLAIN, FB_WAITSET } wait;
    int fd;
    ferry_waitset *ws;
} fb_state;

static int fail(const char *what, ferry_err err)
{
    fprintf(stderr, "ferry bench: %s: %s\n", what, ferry_strerror(err));
    return -1;
}

static int fb_prepare(void **state, const bench_params *p)
{
    fb_state *s = calloc(1, sizeof *s);
    if (!s)
        return -1;
    s->p = *p;
    /* Options of variant rows (bench_entry.variant in bench_main.c), one word each, applied
     * in fb_pub_open / fb_sub_open. */
    const char *v = p->variant ? p->variant : "";
    if (strcmp(v, "busy-poll") == 0) {
        s->busy_poll = true;
    } else if (strcmp(v, "no-spin") == 0) {
        s->no_spin = true;
    } else if (strcmp(v, "huge") == 0) {
        s->huge = true;
    } else if (strcmp(v, "fd") == 0) {
        s->wait = FB_FD;
    } else if (strcmp(v, "fd-plain") == 0) {
        s->wait = FB_FD_PLAIN;
    } else if (strcmp(v, "waitset") == 0) {
        s->wait = FB_WAITSET;
    } else if (v[0]) {
        fprintf(stderr, "ferry bench: ferry-zero-copy: unknown variant '%s'\n", v);
        free(s);
        return -1;
    }
    *state = s;
    return 0;
}

static ferry_err fb_node(fb_state *s, const char *name)
{
    ferry_node_options o;
    ferry_node_options_init(&o);
    o.dir = s->p.dir;
    o.domain = s->p.domain;
    o.name = name;
    return ferry_node_create(&s->node, &o);
}

static int fb_pub_open(void *state)
{
    fb_state *s = state;
    ferry_err err = fb_node(s, "bench_pub");
    if (err)
        return fail("node", err);
    ferry_publisher_options o;
    ferry_publisher_options_init(&o);
    o.max_sample_size = s->p.payload;
    /* Enough chunks for a full queue, samples in flight and returns not yet collected. */
    size_t chunks = (size_t)s->p.depth * 2 + 64;
    if (chunks > 65536)
        chunks = 65536;
    o.max_chunks = (uint32_t)chunks;
    /* Byte cap: room for what can be in flight with slack for size-class rounding. */
    size_t slot = (s->p.payload + 8191) / 4096 * 4096;
    size_t live = (size_t)s->p.depth + 32 < chunks ? (size_t)s->p.depth + 32 : chunks;
    size_t bytes = live * slot * 2;
    if (bytes < o.pool_bytes)
        bytes = o.pool_bytes;
    o.pool_bytes = bytes;
    if (s->no_spin)
        o.spin_ns = FERRY_SPIN_OFF;
    if (s->huge)
        o.huge_pages = FERRY_HUGE_PAGES_AUTO;
    if (s->p.lossless) {
        /* Lossless: a full subscriber queue or an empty pool makes the publisher wait. */
        o.admit_blocking = true;
        o.on_pool_exhausted = FERRY_POOL_BLOCK;
        o.block_timeout_ns = FB_BLOCK_NS;
    }
    err = ferry_publisher_create(&s->pub, s->node, FB_TOPIC, FB_TYPE, ferry_hash(FB_TYPE), &o);
    if (err)
        return fail("publisher", err);
    /* Carve and touch the chunks the stream will cycle through before it starts, as a camera
     * driver would (iceoryx's mempools are made by RouDi before any publisher exists). */
    uint32_t cycle = s->p.depth + 8 < o.max_chunks ? s->p.depth + 8 : o.max_chunks;
    err = ferry_publisher_reserve(s->pub, s->p.payload, cycle);
    if (err)
        return fail("reserve", err);
    err = ferry_publisher_wait_subscribers(s->pub, 1, FB_CONNECT_NS);
    if (err)
        return fail("waiting for the subscriber", err);
    return 0;
}

static int fb_pub_idle(void *state, int64_t timeout_ns)
{
    fb_state *s = state;
    ferry_err err = ferry_publisher_poll(s->pub, timeout_ns);
    return err ? fail("publisher poll", err) : 0;
}

static int fb_pub_loan(void *state, void **buf, size_t *size)
{
    fb_state *s = state;
    ferry_err err = ferry_loan(s->pub, s->p.payload, buf);
    if (err == FERRY_EPOOL) {
        /* Chunks come back as the subscriber releases them; wait for returns. */
        int64_t deadline = ferry_now().ns + FB_POOL_WAIT_NS;
        while (err == FERRY_EPOOL && ferry_now().ns < deadline) {
            ferry_publisher_poll(s->pub, 100000);
            err = ferry_loan(s->pub, s->p.payload, buf);
        }
    }
    if (err)
        return fail("loan", err);
    *size = s->p.payload;
    return 0;
}

static int fb_pub_send(void *state, void *buf)
{
    fb_state *s = state;
    ferry_err err = ferry_publish(s->pub, buf, 0);
    if (err) {
        ferry_loan_release(s->pub, buf);
        return fail("publish", err);
    }
    return 0;
}

static void fb_pub_close(void *state)
{
    fb_state *s = state;
    ferry_err err;
    if (s->pub && (err = ferry_publisher_destroy(s->pub)) != FERRY_OK)
        fail("publisher destroy", err);
    if (s->node && (err = ferry_node_destroy(s->node)) != FERRY_OK)
        fail("node destroy", err);
    s->pub = NULL;
    s->node = NULL;
}

static int fb_sub_open(void *state)
{
    fb_state *s = state;
    ferry_err err = fb_node(s, "bench_sub");
    if (err)
        return fail("node", err);
    ferry_subscriber_options o;
    ferry_subscriber_options_init(&o);
    o.depth = s->p.depth;
    o.overflow = s->p.lossless ? FERRY_OVERFLOW_BLOCK : FERRY_OVERFLOW_DROP_OLDEST;
    o.busy_poll = s->busy_poll;
    if (s->no_spin)
        o.spin_ns = FERRY_SPIN_OFF;
    err = ferry_subscriber_create(&s->sub, s->node, FB_TOPIC, FB_TYPE, ferry_hash(FB_TYPE), &o);
    if (err)
        return fail("subscriber", err);
    err = ferry_subscriber_wait_publishers(s->sub, 1, FB_CONNECT_NS);
    if (err)
        return fail("waiting for the publisher", err);
    if ((s->wait == FB_FD || s->wait == FB_FD_PLAIN) &&
        (err = ferry_subscriber_fd(s->sub, &s->fd)) != FERRY_OK)
        return fail("subscriber descriptor", err);
    if (s->wait == FB_WAITSET && ((err = ferry_waitset_create(&s->ws, s->node)) != FERRY_OK ||
                                  (err = ferry_waitset_add(s->ws, s->sub, s)) != FERRY_OK))
        return fail("waitset", err);
    return 0;
}

/* An event loop's wait on the subscriber's descriptor (the "fd" rows): poll(2) until it is
 * readable or left runs out, and with anticipation until a steady stream's next sample is due,
 * then ferry_subscriber_catch. 1 when left ran out. */
static int fb_poll_fd(fb_state *s, int64_t left)
{
    int64_t at = 0, now = ferry_now().ns, sleep = left;
    if (s->wait == FB_FD && ferry_subscriber_wake_at(s->sub, &at) == FERRY_OK && at != 0 &&
        (sleep < 0 || at - now < sleep))
        sleep = at > now ? at - now : 0;
    else
        at = 0;
    struct pollfd pfd = {.fd = s->fd, .events = POLLIN};
    struct timespec ts = {.tv_sec = sleep / 1000000000, .tv_nsec = sleep % 1000000000};
    int r = ppoll(&pfd, 1, sleep < 0 ? NULL : &ts, NULL);
    if (r < 0 && errno != EINTR)
        return fail("poll", FERRY_ESYS);
    if (r == 0 && at != 0) {
        ferry_subscriber_catch(s->sub, at);
        return 0;
    }
    return r == 0 && sleep == left ? 1 : 0;
}

static int fb_sub_recv(void *state, const void **data, size_t *size, int64_t *recv_ns,
                       int64_t timeout_ns)
{
    fb_state *s = state;
    int64_t deadline = timeout_ns >= 0 ? ferry_now().ns + timeout_ns : -1;
    for (;;) {
        ferry_err err = ferry_take(s->sub, &s->sample);
        if (err == FERRY_OK) {
            *recv_ns = ferry_now().ns;
            *data = s->sample.data;
            *size = s->sample.size;
            return 0;
        }
        if (err != FERRY_EAGAIN)
            return fail("take", err);
        int64_t left = FERRY_FOREVER;
        if (deadline >= 0) {
            left = deadline - ferry_now().ns;
            if (left <= 0)
                return 1;
        }
        if (s->wait == FB_FD || s->wait == FB_FD_PLAIN) {
            int r = fb_poll_fd(s, left);
            if (r != 0)
                return r;
            continue;
        }
        if (s->wait == FB_WAITSET) {
            void *ready;
            size_t n;
            err = ferry_waitset_wait(s->ws, left, &ready, 1, &n);
        } else {
            err = ferry_wait(s->sub, left);
        }
        if (err == FERRY_ETIMEDOUT)
            return 1;
        if (err)
            return fail("wait", err);
    }
}

static int fb_sub_done(void *state)
{
    fb_state *s = state;
    ferry_err err = ferry_release(s->sub, &s->sample);
    return err ? fail("release", err) : 0;
}

static void fb_sub_close(void *state)
{
    fb_state *s = state;
    ferry_err err;
    if (s->ws && (err = ferry_waitset_destroy(s->ws)) != FERRY_OK)
        fail("waitset destroy", err);
    s->ws = NULL;
    if (s->sub && (err = ferry_subscriber_destroy(s->sub)) != FERRY_OK)
        fail("subscriber destroy", err);
    if (s->node && (err = ferry_node_destroy(s->node)) != FERRY_OK)
        fail("node destroy", err);
    s->sub = NULL;
    s->node = NULL;
}

static void fb_release(void *state)
{
    free(state);
}

const bench_transport bench_transport_ferry = {
    .name = "ferry-zero-copy",
    .summary = "ferry_loan/ferry_publish, ferry_take/ferry_release: no payload byte copied",
    .caps = BENCH_CAP_LOSSLESS,
    .prepare = fb_prepare,
    .pub_open = fb_pub_open,
    .pub_idle = fb_pub_idle,
    .pub_loan = fb_pub_loan,
    .pub_send = fb_pub_send,
    .pub_close = fb_pub_close,
    .sub_open = fb_sub_open,
    .sub_recv = fb_sub_recv,
    .sub_done = fb_sub_done,
    .sub_close = fb_sub_close,
    .release = fb_release,
};
