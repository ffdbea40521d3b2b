/* The copying shared-memory bus (shmbus.h): one ring of seqlocked slots per writer, a futex
 * doorbell per reader. */
#include "shmbus.h"
#include "util.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
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
    _Atomic uint64_t seq; /* sequence of the message held; 0 while being written */
    _Atomic uint64_t size;
} bus_slot;

struct cli_shm_bus {
    uint64_t magic;
    uint32_t rings, readers, slots;
    size_t slot_bytes, slot_stride, map_bytes;
    size_t off_rings, off_readers, off_cursors, off_slots;
};

static size_t round_up(size_t v, size_t a)
{
    return (v + a - 1) / a * a;
}

static bus_ring *ring_at(const cli_shm_bus *bus, uint32_t r)
{
    return (bus_ring *)((char *)bus + bus->off_rings) + r;
}

static bus_reader *reader_at(const cli_shm_bus *bus, uint32_t i)
{
    return (bus_reader *)((char *)bus + bus->off_readers) + i;
}

static bus_cursor *cursor_at(const cli_shm_bus *bus, uint32_t reader, uint32_t r)
{
    return (bus_cursor *)((char *)bus + bus->off_cursors) + (size_t)reader * bus->rings + r;
}

static bus_slot *slot_at(const cli_shm_bus *bus, uint32_t r, uint64_t seq)
{
    size_t index = (size_t)r * bus->slots + (size_t)((seq - 1) % bus->slots);
    return (bus_slot *)((char *)bus + bus->off_slots + index * bus->slot_stride);
}

static char *slot_data(bus_slot *s)
{
    return (char *)s + BUS_LINE;
}

cli_shm_bus *cli_shm_bus_create(uint32_t rings, uint32_t readers, uint32_t slots, size_t slot_bytes)
{
    if (rings == 0 || readers == 0 || slots == 0 || slot_bytes == 0) {
        fprintf(stderr, "ferry: shm bus: invalid geometry\n");
        return NULL;
    }
    cli_shm_bus shape = {.magic = BUS_MAGIC,
                         .rings = rings,
                         .readers = readers,
                         .slots = slots,
                         .slot_bytes = slot_bytes};
    shape.slot_stride = round_up(BUS_LINE + slot_bytes, BUS_SLOT_ALIGN);
    shape.off_rings = round_up(sizeof(cli_shm_bus), BUS_LINE);
    shape.off_readers = shape.off_rings + rings * sizeof(bus_ring);
    shape.off_cursors = shape.off_readers + readers * sizeof(bus_reader);
    shape.off_slots =
        round_up(shape.off_cursors + (size_t)readers * rings * sizeof(bus_cursor), BUS_SLOT_ALIGN);
    shape.map_bytes = shape.off_slots + (size_t)rings * slots * shape.slot_stride;

    void *map =
        mmap(NULL, shape.map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) {
        fprintf(stderr, "ferry: shm bus: mmap of %zu bytes: %s\n", shape.map_bytes,
                strerror(errno));
        return NULL;
    }
    cli_shm_bus *bus = map;
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

void cli_shm_bus_destroy(cli_shm_bus *bus)
{
    if (bus && bus->magic == BUS_MAGIC)
        munmap(bus, bus->map_bytes);
}

int cli_shm_send(cli_shm_bus *bus, uint32_t ring, const void *data, size_t size)
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
            cli_futex_wake(&rd->doorbell);
    }
    return 0;
}

/* 0: copied one message of ring r; 1: nothing new in r; -1: too large for cap. */
static int try_ring(cli_shm_bus *bus, uint32_t reader, uint32_t r, void *dst, size_t cap,
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

int cli_shm_recv(cli_shm_bus *bus, uint32_t reader, void *dst, size_t cap, uint32_t *ring,
                 size_t *size, int64_t timeout_ns)
{
    if (reader >= bus->readers)
        return -1;
    bus_reader *rd = reader_at(bus, reader);
    int64_t deadline = timeout_ns >= 0 ? cli_now_ns() + timeout_ns : -1;
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
            left = deadline - cli_now_ns();
            if (left <= 0)
                return 1;
        }
        atomic_store_explicit(&rd->waiting, 1, memory_order_seq_cst);
        if (atomic_load_explicit(&rd->doorbell, memory_order_seq_cst) == bell)
            cli_futex_wait(&rd->doorbell, bell, left);
        atomic_store_explicit(&rd->waiting, 0, memory_order_relaxed);
    }
}

uint64_t cli_shm_dropped(const cli_shm_bus *bus, uint32_t reader, uint32_t ring)
{
    if (reader >= bus->readers || ring >= bus->rings)
        return 0;
    return cursor_at(bus, reader, ring)->dropped;
}

void cli_shm_bus_prefault(cli_shm_bus *bus)
{
    memset((char *)bus + bus->off_slots, 0, bus->map_bytes - bus->off_slots);
}
