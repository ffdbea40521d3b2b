/*
 * The copying shared-memory baseline: the publisher copies each message from its own buffer into
 * a slot of a shared ring, each subscriber copies it out into its own buffer. This is the work a
 * shared-memory DDS transport does for every sample, and the work ferry exists to avoid.
 */
#include "bench.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define BUS_MAGIC 0x7375622d79727266ULL /* "ferry-bus" */
#define BUS_LINE 64
#define BUS_SLOT_ALIGN 4096

/* Layout of the mapping, in order: the bus header, rings[rings], readers[readers],
 * cursors[readers][rings], then per ring `slots` slots of slot_stride bytes (a slot header
 * followed by the payload). Everything is addressed by offsets from the bus header. */
typedef struct bus_ring {
    _Atomic uint64_t head; /* sequence of the last message published; 0 before the first */
    char pad[BUS_LINE - sizeof(uint64_t)];
} bus_ring;

typedef struct bus_reader {
    _Atomic uint32_t doorbell; /* bumped by every send; the futex word */
    _Atomic uint32_t waiting;  /* 1 while the reader may sleep on the doorbell */
    uint32_t next_ring;        /* where the next scan starts, for fairness between rings */
    char pad[BUS_LINE - 3 * sizeof(uint32_t)];
} bus_reader;

typedef struct bus_cursor {
    uint64_t next;    /* sequence the reader wants next */
    uint64_t dropped; /* messages it lost */
} bus_cursor;

typedef struct bus_slot {
    _Atomic uint64_t seq;  /* sequence of the message held; 0 while being written */
    _Atomic uint64_t size;
} bus_slot;

struct bench_shm_bus {
    uint64_t magic;
    uint32_t rings, readers, slots;
    size_t slot_bytes, slot_stride, map_bytes;
    size_t off_rings, off_readers, off_cursors, off_slots;
};

static size_t round_up(size_t v, size_t a)
{
    return (v + a - 1) / a * a;
}

static bus_ring *ring_at(const bench_shm_bus *bus, uint32_t r)
{
    return (bus_ring *)((char *)bus + bus->off_rings) + r;
}

static bus_reader *reader_at(const bench_shm_bus *bus, uint32_t i)
{
    return (bus_reader *)((char *)bus + bus->off_readers) + i;
}

static bus_cursor *cursor_at(const bench_shm_bus *bus, uint32_t reader, uint32_t r)
{
    return (bus_cursor *)((char *)bus + bus->off_cursors) + (size_t)reader * bus->rings + r;
}

static bus_slot *slot_at(const bench_shm_bus *bus, uint32_t r, uint64_t seq)
{
    size_t index = (size_t)r * bus->slots + (size_t)((seq - 1) % bus->slots);
    return (bus_slot *)((char *)bus + bus->off_slots + index * bus->slot_stride);
}

static char *slot_data(bus_slot *s)
{
    return (char *)s + BUS_LINE;
}

bench_shm_bus *bench_shm_bus_create(uint32_t rings, uint32_t readers, uint32_t slots,
                                    size_t slot_bytes)
{
    if (rings == 0 || readers == 0 || slots == 0 || slot_bytes == 0) {
        fprintf(stderr, "ferry: shm bus: invalid geometry\n");
        return NULL;
    }
    bench_shm_bus shape = {.magic = BUS_MAGIC, .rings = rings, .readers = readers, .slots = slots,
                           .slot_bytes = slot_bytes};
    shape.slot_stride = round_up(BUS_LINE + slot_bytes, BUS_SLOT_ALIGN);
    shape.off_rings = round_up(sizeof(bench_shm_bus), BUS_LINE);
    shape.off_readers = shape.off_rings + rings * sizeof(bus_ring);
    shape.off_cursors = shape.off_readers + readers * sizeof(bus_reader);
    shape.off_slots = round_up(shape.off_cursors + (size_t)readers * rings * sizeof(bus_cursor),
                               BUS_SLOT_ALIGN);
    shape.map_bytes = shape.off_slots + (size_t)rings * slots * shape.slot_stride;

    void *map = mmap(NULL, shape.map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                     -1, 0);
    if (map == MAP_FAILED) {
        fprintf(stderr, "ferry: shm bus: mmap of %zu bytes: %s\n", shape.map_bytes,
                strerror(errno));
        return NULL;
    }
    bench_shm_bus *bus = map;
    *bus = shape;
    for (uint32_t r = 0; r < rings; r++)
        atomic_init(&ring_at(bus, r)->head, 0);
    for (uint32_t i = 0; i < readers; i++) {
        bus_reader *rd = reader_at(bus, i);
        atomic_init(&rd->doorbell, 0);
        atomic_init(&rd->waiting, 0);
        rd->next_ring = 0;
        for (uint32_t r = 0; r < rings; r++)
            *cursor_at(bus, i, r) = (bus_cursor){.next = 1, .dropped = 0};
    }
    for (uint32_t r = 0; r < rings; r++)
        for (uint64_t s = 1; s <= slots; s++) {
            bus_slot *sl = slot_at(bus, r, s);
            atomic_init(&sl->seq, 0);
            atomic_init(&sl->size, 0);
        }
    return bus;
}

void bench_shm_bus_destroy(bench_shm_bus *bus)
{
    if (bus && bus->magic == BUS_MAGIC)
        munmap(bus, bus->map_bytes);
}

int bench_shm_send(bench_shm_bus *bus, uint32_t ring, const void *data, size_t size)
{
    if (ring >= bus->rings || size > bus->slot_bytes)
        return -1;
    bus_ring *rg = ring_at(bus, ring);
    uint64_t seq = atomic_load_explicit(&rg->head, memory_order_relaxed) + 1; /* one writer */
    bus_slot *sl = slot_at(bus, ring, seq);

    atomic_store_explicit(&sl->seq, 0, memory_order_relaxed);
    /* Orders the "being written" mark before the payload stores, so a reader that saw the old
     * sequence before copying and sees it again after knows nothing was overwritten. */
    atomic_thread_fence(memory_order_release);
    memcpy(slot_data(sl), data, size);
    atomic_store_explicit(&sl->size, size, memory_order_relaxed);
    /* Publishes the payload and size with the sequence. */
    atomic_store_explicit(&sl->seq, seq, memory_order_release);
    /* Readers acquire head and then find the slot complete. */
    atomic_store_explicit(&rg->head, seq, memory_order_release);

    for (uint32_t i = 0; i < bus->readers; i++) {
        bus_reader *rd = reader_at(bus, i);
        /* seq_cst pairs with the reader's store of waiting and load of doorbell: either the
         * reader sees the new doorbell and does not sleep, or the writer sees it waiting. */
        atomic_fetch_add_explicit(&rd->doorbell, 1, memory_order_seq_cst);
        if (atomic_load_explicit(&rd->waiting, memory_order_seq_cst))
            bench_futex_wake(&rd->doorbell);
    }
    return 0;
}

/* 0: copied one message of ring r; 1: nothing new in r; -1: too large for cap. */
static int try_ring(bench_shm_bus *bus, uint32_t reader, uint32_t r, void *dst, size_t cap,
                    size_t *size)
{
    bus_cursor *cur = cursor_at(bus, reader, r);
    for (;;) {
        uint64_t head = atomic_load_explicit(&ring_at(bus, r)->head, memory_order_acquire);
        uint64_t want = cur->next;
        if (want > head)
            return 1;
        if (head - want >= bus->slots) {
            uint64_t oldest = head - bus->slots + 1;
            cur->dropped += oldest - want;
            want = oldest;
        }
        bus_slot *sl = slot_at(bus, r, want);
        cur->next = want + 1;
        if (atomic_load_explicit(&sl->seq, memory_order_acquire) != want) {
            cur->dropped++;
            continue;
        }
        size_t n = (size_t)atomic_load_explicit(&sl->size, memory_order_relaxed);
        if (n > cap) {
            fprintf(stderr, "ferry: shm bus: message of %zu bytes, buffer of %zu\n", n, cap);
            return -1;
        }
        memcpy(dst, slot_data(sl), n);
        /* Orders the payload loads before the second look at the sequence. */
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&sl->seq, memory_order_relaxed) != want) {
            cur->dropped++;
            continue;
        }
        *size = n;
        return 0;
    }
}

int bench_shm_recv(bench_shm_bus *bus, uint32_t reader, void *dst, size_t cap, uint32_t *ring,
                   size_t *size, int64_t timeout_ns)
{
    if (reader >= bus->readers)
        return -1;
    bus_reader *rd = reader_at(bus, reader);
    int64_t deadline = timeout_ns >= 0 ? bench_now_ns() + timeout_ns : -1;
    for (;;) {
        uint32_t bell = atomic_load_explicit(&rd->doorbell, memory_order_acquire);
        for (uint32_t k = 0; k < bus->rings; k++) {
            uint32_t r = (rd->next_ring + k) % bus->rings;
            int rc = try_ring(bus, reader, r, dst, cap, size);
            if (rc == 1)
                continue;
            if (rc == 0) {
                *ring = r;
                rd->next_ring = (r + 1) % bus->rings;
            }
            return rc;
        }
        int64_t left = -1;
        if (deadline >= 0) {
            left = deadline - bench_now_ns();
            if (left <= 0)
                return 1;
        }
        atomic_store_explicit(&rd->waiting, 1, memory_order_seq_cst);
        if (atomic_load_explicit(&rd->doorbell, memory_order_seq_cst) == bell)
            bench_futex_wait(&rd->doorbell, bell, left);
        atomic_store_explicit(&rd->waiting, 0, memory_order_relaxed);
    }
}

uint64_t bench_shm_dropped(const bench_shm_bus *bus, uint32_t reader, uint32_t ring)
{
    if (reader >= bus->readers || ring >= bus->rings)
        return 0;
    return cursor_at(bus, reader, ring)->dropped;
}

/* ---------------------------------------------------------------------------------------------
 * As a bench transport: one ring, one reader
 * ------------------------------------------------------------------------------------------- */

typedef struct shm_state {
    bench_params p;
    bench_shm_bus *bus;
    char *own; /* the publisher's or the subscriber's private buffer */
} shm_state;

static int shm_prepare(void **state, const bench_params *p)
{
    shm_state *s = calloc(1, sizeof *s);
    if (!s)
        return -1;
    s->p = *p;
    s->bus = bench_shm_bus_create(1, 1, p->depth, p->payload);
    if (!s->bus) {
        free(s);
        return -1;
    }
    /* Touch the whole ring now: first-touch faults would otherwise land in the first laps. */
    memset((char *)s->bus + s->bus->off_slots, 0, s->bus->map_bytes - s->bus->off_slots);
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
    int64_t t = bench_now_ns();
    bench_wire w = {.seq = seq, .send_ns = t, .flags = flags};
    memcpy(s->own, &w, sizeof w);
    *send_ns = t;
    return bench_shm_send(s->bus, 0, s->own, s->p.payload);
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
    int rc = bench_shm_recv(s->bus, 0, s->own, s->p.payload, &ring, &size, timeout_ns);
    if (rc != 0)
        return rc;
    m->recv_ns = bench_now_ns();
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
    bench_shm_bus_destroy(s->bus);
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
