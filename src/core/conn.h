/*
 * The connection segment and its rings: one segment per publisher-subscriber pair, made by the
 * publisher, mapped read-write by both. Both sides' ring code is here: the segment's layout, its
 * creation (publisher) and mapping (subscriber), and the one claim of the delivery ring's oldest
 * entry that both ends make. The segment is shared with a peer: every counter and slot read from
 * it is checked by the caller (publisher.c, subscriber.c) before use.
 */
#ifndef FERRY_CONN_H
#define FERRY_CONN_H

#include <ferry/ferry.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/module.h"

#define FERRY__CONN_MAGIC 0x4e4e4f4359525246ULL /* "FRRYCONN" */

/* A ring entry names a publication: chunk index in the low half, generation in the high half. */
static inline uint64_t ferry__desc(uint32_t index, uint32_t gen)
{
    return (uint64_t)gen << 32 | index;
}
static inline uint32_t ferry__desc_index(uint64_t d)
{
    return (uint32_t)d;
}
static inline uint32_t ferry__desc_gen(uint64_t d)
{
    return (uint32_t)(d >> 32);
}

/*
 * Ring rules. Counters run free (64 bits, never wrap in practice) and are masked only to index.
 * Delivery ring: the publisher alone writes slots and head (store-release after the slot); the
 * subscriber takes the entry at tail by CAS tail -> tail+1; when the ring holds depth entries and
 * the subscriber drops oldest, the publisher takes the entry at tail by the same CAS and counts it
 * dropped. Whoever wins the CAS owns the entry. Return ring: the subscriber writes slots and head,
 * the publisher reads them and writes tail.
 */
typedef struct ferry__conn_header {
    uint64_t magic;
    uint32_t version;
    uint32_t header_size;
    uint64_t size;
    uint64_t deliver_offset;
    uint64_t return_offset;
    uint32_t deliver_capacity; /* power of two >= depth */
    uint32_t depth;
    uint32_t return_capacity; /* power of two >= max_chunks */
    uint32_t reserved;
    _Alignas(FERRY__CACHELINE) _Atomic uint64_t deliver_head;
    _Alignas(FERRY__CACHELINE) _Atomic uint64_t deliver_tail;
    _Alignas(FERRY__CACHELINE) _Atomic uint64_t return_head;
    _Alignas(FERRY__CACHELINE) _Atomic uint64_t return_tail;
    /* Doorbells: set by a side about to sleep, exchanged to 0 by the other side, which then
     * wakes the sleeper (see the doorbell rules below). */
    _Alignas(FERRY__CACHELINE) _Atomic uint32_t sub_waiting;
    _Atomic uint32_t pub_waiting;
    /* Written by the subscriber alone: nonzero while it is paused (a lifecycle that is not
     * active). The publisher reads it at each delivery and skips the connection: nothing is
     * queued and nothing counted as dropped. It decides only what this subscriber receives. It
     * sits in the doorbell line, which the publisher reads at each delivery anyway. */
    _Atomic uint32_t sub_paused;
    _Alignas(FERRY__CACHELINE) _Atomic uint64_t dropped; /* written by the publisher only */
} ferry__conn_header;

/* Doorbell values: how the side that set it sleeps. */
enum { FERRY__DOORBELL_NOTIFIER = 1, FERRY__DOORBELL_FUTEX = 2 };

/*
 * Doorbell rules. A side about to sleep stores its doorbell value (sub_waiting for the subscriber,
 * pub_waiting for the publisher), fences (seq_cst), and looks at the rings once more; the other
 * side publishes (or returns), fences, and wakes the sleeper only if it wins the exchange of the
 * doorbell back to 0: one wake-up per sleep, none while the peer is busy. A FUTEX doorbell is
 * woken on the word itself; a NOTIFIER one by a wake-up datagram on the connection's socket.
 */

/* A mapped connection segment. The ring pointers come from this side's own computation of the
 * layout, never from offsets read back from shared memory (the peer could change them). */
typedef struct ferry__conn {
    ferry__conn_header *hdr;
    uint64_t size;
    _Atomic uint64_t *dslots; /* delivery ring */
    _Atomic uint64_t *rslots; /* return ring */
    uint32_t dmask, rmask;
} ferry__conn;

/* Ring capacities are powers of two: the smallest one >= v. */
static inline uint32_t ferry__pow2_at_least(uint32_t v)
{
    uint32_t p = 1;
    while (p < v)
        p <<= 1;
    return p;
}

/* Bytes of a connection segment for the given capacities, and its ring offsets. */
uint64_t ferry__conn_layout(uint32_t deliver_capacity, uint32_t return_capacity,
                            uint64_t *deliver_offset, uint64_t *return_offset);
/* Publisher: a new segment for a queue of depth and a pool of max_chunks, reserved, sealed
 * against resizing, mapped, touched and with its header written. Returns its memfd (to send),
 * or -1 with errno. */
int ferry__conn_create(ferry__conn *c, uint32_t depth, uint32_t max_chunks);
/* Subscriber: maps the segment received (size bytes, as checked against the welcome) for the
 * given capacities and populates its pages. -1 with errno when it cannot be mapped. */
int ferry__conn_map(ferry__conn *c, int fd, uint64_t size, uint32_t deliver_capacity,
                    uint32_t return_capacity);
void ferry__conn_unmap(ferry__conn *c);

/* The one claim of the delivery ring's entry at tail, by either end (ring rules above): true when
 * this side won it and owns the entry; false when the other side took it first. */
static inline bool ferry__conn_claim(ferry__conn *c, uint64_t tail)
{
    uint64_t expected = tail;
    return atomic_compare_exchange_strong_explicit(&c->hdr->deliver_tail, &expected, tail + 1,
                                                   memory_order_acq_rel, memory_order_acquire);
}

#endif
