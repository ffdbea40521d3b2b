/*
 * The copying shared-memory baseline: the publisher copies each message from its own buffer into
 * a slot of a shared ring, each subscriber copies it out into its own buffer. This is the work a
 * shared-memory DDS transport does for every sample, and the work ferry exists to avoid. The
 * ring is the CLI's shm bus (tools/ferry/shmbus.h) with one ring and one reader.
 */
#include "bench.h"
#include "shmbus.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct shm_state {
    bench_params p;
    cli_shm_bus *bus;
    char *own; /* the publisher's or the subscriber's private buffer */
} shm_state;

static int shm_prepare(void **state, const bench_params *p)
{
    shm_state *s = calloc(1, sizeof *s);
    if (!s)
        return -1;
    s->p = *p;
    s->bus = cli_shm_bus_create(1, 1, p->depth, p->payload);
    if (!s->bus) {
        free(s);
        return -1;
    }
    /* Touch the whole ring now: first-touch faults would otherwise land in the first laps. */
    cli_shm_bus_prefault(s->bus);
    *state = s;
    return 0;
}

static int own_buffer(shm_state *s)
{
    s->own = malloc(s->p.payload);
    if (!s->own) {
        fprintf(stderr, "ferry bench: out of memory\n");
        return -1;
    }
    for (size_t i = 0; i < s->p.payload; i++)
        s->own[i] = (char)(i * 7u);
    return 0;
}

static int shm_pub_open(void *state)
{
    return own_buffer(state);
}

static int shm_pub_send(void *state, uint64_t seq, uint32_t flags, int64_t *send_ns)
{
    shm_state *s = state;
    int64_t t = cli_now_ns();
    bench_wire w = {.seq = seq, .send_ns = t, .flags = flags};
    memcpy(s->own, &w, sizeof w);
    *send_ns = t;
    return cli_shm_send(s->bus, 0, s->own, s->p.payload);
}

static void shm_close(void *state)
{
    shm_state *s = state;
    free(s->own);
    s->own = NULL;
}

static int shm_sub_open(void *state)
{
    return own_buffer(state);
}

static int shm_sub_recv(void *state, bench_msg *m, int64_t timeout_ns)
{
    shm_state *s = state;
    uint32_t ring;
    size_t size;
    int rc = cli_shm_recv(s->bus, 0, s->own, s->p.payload, &ring, &size, timeout_ns);
    if (rc != 0)
        return rc;
    m->recv_ns = cli_now_ns();
    bench_wire w;
    memcpy(&w, s->own, sizeof w);
    m->seq = w.seq;
    m->send_ns = w.send_ns;
    m->flags = w.flags;
    return 0;
}

static void shm_release(void *state)
{
    shm_state *s = state;
    cli_shm_bus_destroy(s->bus);
    free(s->own);
    free(s);
}

const bench_transport bench_transport_shm_copy = {
    .name = "shm-copy",
    .summary = "copy into a shared ring slot, copy out (shared-memory DDS transport)",
    .prepare = shm_prepare,
    .pub_open = shm_pub_open,
    .pub_idle = NULL,
    .pub_send = shm_pub_send,
    .pub_close = shm_close,
    .sub_open = shm_sub_open,
    .sub_recv = shm_sub_recv,
    .sub_close = shm_close,
    .release = shm_release,
};
