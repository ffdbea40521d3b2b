/*
 * The copying shared-memory baseline: the publisher copies each message from its own buffer into
 * a slot of a shared ring, each subscriber copies it out into its own buffer. This is the work a
 * shared-memory DDS transport does for every sample, and the work ferry exists to avoid.
 *
 * Drop-oldest rows use the CLI's shm bus (tools/lib/shmbus.h) with one ring and one reader:
 * the writer overwrites the oldest slot and never waits. Lossless rows use a ring of their own
 * below, a single-producer single-consumer queue whose writer sleeps while every slot is full.
 */
#include "bench.h"
#include "shmbus.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define SHM_BLOCK_NS ((int64_t)10 * 1000000000) /* lossless: a send waits at most this long */

/* The lossless ring: header, then slots of payload bytes. head and tail are free-running
 * counts of messages written and read, masked only when indexing. */
typedef struct block_ring {
    _Atomic uint64_t head;
    _Atomic uint64_t tail;
    _Atomic uint32_t data_bell;  /* futex: bumped after each write */
    _Atomic uint32_t space_bell; /* futex: bumped after each read */
    _Atomic uint32_t reader_waiting;
    _Atomic uint32_t writer_waiting;
    uint64_t slots;
    uint64_t slot_bytes;
    uint64_t sizes[]; /* bytes of the message in each slot; the slots follow, page aligned */
} block_ring;

typedef struct shm_state {
    bench_params p;
    cli_shm_bus *bus; /* drop-oldest rows */
    block_ring *ring; /* lossless rows */
    size_t ring_bytes, ring_head;
    char *own; /* the publisher's or the subscriber's private buffer */
} shm_state;

static char *ring_slot(shm_state *s, uint64_t i)
{
    return (char *)s->ring + s->ring_head + (i % s->ring->slots) * s->ring->slot_bytes;
}

static int ring_create(shm_state *s)
{
    size_t head = sizeof(block_ring) + (size_t)s->p.depth * sizeof(uint64_t);
    head = (head + BENCH_PAGE - 1) / BENCH_PAGE * BENCH_PAGE;
    size_t slot = (s->p.payload + 63) / 64 * 64;
    size_t bytes = head + (size_t)s->p.depth * slot;
    void *map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) {
        fprintf(stderr, "ferry bench: mmap of %zu bytes: %s\n", bytes, strerror(errno));
        return -1;
    }
    s->ring = map;
    s->ring_bytes = bytes;
    s->ring_head = head;
    atomic_init(&s->ring->head, 0);
    atomic_init(&s->ring->tail, 0);
    atomic_init(&s->ring->data_bell, 0);
    atomic_init(&s->ring->space_bell, 0);
    atomic_init(&s->ring->reader_waiting, 0);
    atomic_init(&s->ring->writer_waiting, 0);
    s->ring->slots = s->p.depth;
    s->ring->slot_bytes = slot;
    /* Touch the whole ring now: first-touch faults would otherwise land in the first laps. */
    cli_prefault((char *)map + head, bytes - head);
    return 0;
}

/* Sleeps on bell while ready() is false; the other side bumps bell and then wakes when it sees
 * *waiting. The seq_cst store of waiting and load of bell pair with the other side's seq_cst
 * bump and load of waiting, so a wake is never missed. 0, or 1 at the deadline. */
static int ring_wait(_Atomic uint32_t *bell, _Atomic uint32_t *waiting, block_ring *r,
                     bool for_data, int64_t deadline)
{
    for (;;) {
        uint32_t b = atomic_load_explicit(bell, memory_order_acquire);
        uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
        uint64_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
        if (for_data ? head != tail : head - tail < r->slots)
            return 0;
        int64_t left = -1;
        if (deadline >= 0) {
            left = deadline - cli_now_ns();
            if (left <= 0)
                return 1;
        }
        atomic_store_explicit(waiting, 1, memory_order_seq_cst);
        if (atomic_load_explicit(bell, memory_order_seq_cst) == b)
            cli_futex_wait(bell, b, left);
        atomic_store_explicit(waiting, 0, memory_order_relaxed);
    }
}

static void ring_ring(_Atomic uint32_t *bell, _Atomic uint32_t *waiting)
{
    atomic_fetch_add_explicit(bell, 1, memory_order_seq_cst);
    if (atomic_load_explicit(waiting, memory_order_seq_cst))
        cli_futex_wake(bell);
}

static int shm_prepare(void **state, const bench_params *p)
{
    shm_state *s = calloc(1, sizeof *s);
    if (!s)
        return -1;
    s->p = *p;
    if (p->lossless) {
        if (ring_create(s) != 0) {
            free(s);
            return -1;
        }
    } else {
        s->bus = cli_shm_bus_create(1, 1, p->depth, p->payload);
        if (!s->bus) {
            free(s);
            return -1;
        }
        cli_shm_bus_prefault(s->bus);
    }
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

static int shm_open_side(void *state)
{
    return own_buffer(state);
}

static int shm_pub_loan(void *state, void **buf, size_t *size)
{
    shm_state *s = state;
    *buf = s->own;
    *size = s->p.payload;
    return 0;
}

static int shm_pub_send(void *state, void *buf)
{
    shm_state *s = state;
    if (!s->ring)
        return cli_shm_send(s->bus, 0, buf, s->p.payload);
    block_ring *r = s->ring;
    if (ring_wait(&r->space_bell, &r->writer_waiting, r, false, cli_now_ns() + SHM_BLOCK_NS) != 0) {
        fprintf(stderr, "ferry bench: shm-copy: the ring stayed full for 10 s\n");
        return -1;
    }
    uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
    memcpy(ring_slot(s, head), buf, s->p.payload);
    r->sizes[head % r->slots] = s->p.payload;
    /* Publishes the slot's bytes and size with the new head. */
    atomic_store_explicit(&r->head, head + 1, memory_order_release);
    ring_ring(&r->data_bell, &r->reader_waiting);
    return 0;
}

static void shm_close(void *state)
{
    shm_state *s = state;
    free(s->own);
    s->own = NULL;
}

static int shm_sub_recv(void *state, const void **data, size_t *size, int64_t *recv_ns,
                        int64_t timeout_ns)
{
    shm_state *s = state;
    if (!s->ring) {
        uint32_t ring;
        int rc = cli_shm_recv(s->bus, 0, s->own, s->p.payload, &ring, size, timeout_ns);
        if (rc != 0)
            return rc;
    } else {
        block_ring *r = s->ring;
        int64_t deadline = timeout_ns >= 0 ? cli_now_ns() + timeout_ns : -1;
        if (ring_wait(&r->data_bell, &r->reader_waiting, r, true, deadline) != 0)
            return 1;
        uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
        size_t n = r->sizes[tail % r->slots];
        if (n > s->p.payload) {
            fprintf(stderr, "ferry bench: shm-copy: message of %zu bytes\n", n);
            return -1;
        }
        memcpy(s->own, ring_slot(s, tail), n);
        *size = n;
        /* Orders the copy out before the slot is handed back to the writer. */
        atomic_store_explicit(&r->tail, tail + 1, memory_order_release);
        ring_ring(&r->space_bell, &r->writer_waiting);
    }
    *recv_ns = cli_now_ns();
    *data = s->own;
    return 0;
}

static void shm_release(void *state)
{
    shm_state *s = state;
    if (s->bus)
        cli_shm_bus_destroy(s->bus);
    if (s->ring)
        munmap(s->ring, s->ring_bytes);
    free(s->own);
    free(s);
}

const bench_transport bench_transport_shm_copy = {
    .name = "shm-copy",
    .summary = "copy into a shared ring slot, copy out (shared-memory DDS transport)",
    .caps = BENCH_CAP_LOSSLESS,
    .prepare = shm_prepare,
    .pub_open = shm_open_side,
    .pub_loan = shm_pub_loan,
    .pub_send = shm_pub_send,
    .pub_close = shm_close,
    .sub_open = shm_open_side,
    .sub_recv = shm_sub_recv,
    .sub_close = shm_close,
    .release = shm_release,
};
