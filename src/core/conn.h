/*
 * The connection segment and its rings: one segment per publisher-subscriber pair, made by the
 * publisher, mapped read-write by both. Both sides' ring code is here and nowhere else: the
 * segment's layout, its creation (publisher) and mapping (subscriber), the producer's push, tail
 * load and return drain, the consumer's peek and return push, the one claim of the delivery
 * ring's oldest entry that both ends make, and the doorbells. Every counter read from the segment
 * is bounds-checked here against this side's private copy; what a slot names (a chunk) is checked
 * by the caller, which knows the pool.
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
    /* Written by the subscriber alone, once connected: nonzero for a background subscriber
     * (ferry_subscriber_options.background), which the publisher serves after the others at
     * each publication. It decides only when this subscriber is woken. */
    _Atomic uint32_t sub_background;
    /* Written by the publisher alone, before it sets pub_waiting: the free delivery slots it
     * waits for (0: wake it at every take and return). A publisher blocked by a full queue asks
     * for half of it, so that it is woken once per half-queue drained, not once per message (the
     * low-water mark). It decides only when this publisher is woken. */
    _Atomic uint32_t pub_wake_room;
    /* Set by the publisher when it woke the subscriber ahead of a publication it is about to
     * make (ferry__publisher_wake_soon: a device frame's loan, whose publication follows within
     * microseconds); cleared by the subscriber, which then polls for that publication a bounded
     * time (FERRY__SOON_SPIN_NS) instead of sleeping again. A hint: it decides only how long
     * this subscriber spins after one wake-up. */
    _Atomic uint32_t pub_soon;
    /* Each written by its side alone (ferry__spin_word, spin.h): where its thread may run,
     * for the other side's choice between spinning and yielding. Written only when it changes
     * and read every FERRY__SPIN_LOOK_NS, so they cost the doorbell line nothing; a hint
     * either way (any value only makes the reader spin or yield). */
    _Atomic uint32_t pub_cpu;
    _Atomic uint32_t sub_cpu;
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

/* ---- both ends --------------------------------------------------------------------------------
 */

/* The entry of the delivery ring at position pos. Relaxed: the acquire that made pos visible
 * (of head by the consumer, of tail by the producer) orders it. */
static inline uint64_t ferry__conn_entry(const ferry__conn *c, uint64_t pos)
{
    return atomic_load_explicit(&c->dslots[pos & c->dmask], memory_order_relaxed);
}

/* The one claim of the delivery ring's entry at tail, by either end (ring rules above): true when
 * this side won it and owns the entry; false when the other side took it first. */
static inline bool ferry__conn_claim(ferry__conn *c, uint64_t tail)
{
    uint64_t expected = tail;
    return atomic_compare_exchange_strong_explicit(&c->hdr->deliver_tail, &expected, tail + 1,
                                                   memory_order_acq_rel, memory_order_acquire);
}

/* ---- producer (the publisher) -------------------------------------------------------------- */

/* Appends d at *head and publishes it. The caller checked there is room (head - tail < depth). */
static inline void ferry__conn_push(ferry__conn *c, uint64_t *head, uint64_t d)
{
    atomic_store_explicit(&c->dslots[*head & c->dmask], d, memory_order_relaxed);
    ++*head;
    /* Release: the slot, and the chunk's header and payload the caller wrote before, are visible
     * before the new head. */
    atomic_store_explicit(&c->hdr->deliver_head, *head, memory_order_release);
}

/* Loads the delivery tail into *seen. The consumer may only move it forward, up to head: false
 * (and *seen unchanged) when it ran backwards or past head. */
static inline bool ferry__conn_tail(ferry__conn *c, uint64_t head, uint64_t *seen)
{
    /* Acquire: the consumer is done with the entries below the tail it shows. */
    uint64_t t = atomic_load_explicit(&c->hdr->deliver_tail, memory_order_acquire);
    if (t - *seen > head - *seen)
        return false;
    *seen = t;
    return true;
}

/* Returns waiting: loads the return ring's head into *head; false when it is more than the ring
 * holds past tail (counters out of range). The entries between tail and *head are read with
 * ferry__conn_returned and acknowledged with ferry__conn_returns_done. */
static inline bool ferry__conn_returns(ferry__conn *c, uint64_t tail, uint64_t *head)
{
    /* Acquire: pairs with the consumer's release of head; the slots below it are written. */
    uint64_t h = atomic_load_explicit(&c->hdr->return_head, memory_order_acquire);
    if (h - tail > (uint64_t)c->rmask + 1)
        return false;
    *head = h;
    return true;
}

static inline uint64_t ferry__conn_returned(const ferry__conn *c, uint64_t pos)
{
    return atomic_load_explicit(&c->rslots[pos & c->rmask], memory_order_relaxed);
}

static inline void ferry__conn_returns_done(ferry__conn *c, uint64_t tail)
{
    /* Release: our reads of the slots happen before the consumer may reuse them. */
    atomic_store_explicit(&c->hdr->return_tail, tail, memory_order_release);
}

/* ---- consumer (the subscriber) ------------------------------------------------------------- */

/* What the consumer finds at the delivery ring's tail. */
enum {
    FERRY__PEEK_BROKEN = -1, /* counters out of range with a tail that stayed put */
    FERRY__PEEK_EMPTY = 0,
    FERRY__PEEK_ENTRY = 1, /* *tail and *d hold the oldest entry (not claimed yet) */
    FERRY__PEEK_RACED = 2, /* the producer moved the tail while we looked: look again */
};

/* True when the delivery tail is no longer tail: an entry seen there may have been dropped and
 * its chunk reused, so what looked wrong about it proves nothing. */
static inline bool ferry__conn_tail_moved(ferry__conn *c, uint64_t tail)
{
    return atomic_load_explicit(&c->hdr->deliver_tail, memory_order_acquire) != tail;
}

static inline int ferry__conn_peek(ferry__conn *c, uint64_t *tail, uint64_t *d)
{
    uint64_t t = atomic_load_explicit(&c->hdr->deliver_tail, memory_order_acquire);
    /* Acquire: pairs with the producer's release of head; the slot and the chunk it names are
     * visible once we see the head that covers them. */
    uint64_t h = atomic_load_explicit(&c->hdr->deliver_head, memory_order_acquire);
    if (h == t)
        return FERRY__PEEK_EMPTY;
    if (h - t > (uint64_t)c->dmask + 1)
        /* Between our two loads the producer may have dropped the oldest entry and appended
         * one: only a tail that stayed put makes these counters impossible. */
        return ferry__conn_tail_moved(c, t) ? FERRY__PEEK_RACED : FERRY__PEEK_BROKEN;
    *tail = t;
    *d = ferry__conn_entry(c, t);
    return FERRY__PEEK_ENTRY;
}

/* The return ring's head as the segment holds it when the consumer maps it: where its own
 * returns start. Relaxed: nothing is read through it, and the producer checks every head it
 * loads (ferry__conn_returns). */
static inline uint64_t ferry__conn_return_start(const ferry__conn *c)
{
    return atomic_load_explicit(&c->hdr->return_head, memory_order_relaxed);
}

/* Entries queued behind tail, the consumer's tail after a take, for a guess at the room a
 * wake-up would make. Relaxed: nothing is read through the head, and a stale one only makes
 * the guess smaller (the producer looks again when it wakes). */
static inline uint64_t ferry__conn_queued_behind(const ferry__conn *c, uint64_t tail)
{
    return atomic_load_explicit(&c->hdr->deliver_head, memory_order_relaxed) - tail;
}

/* Hands d back on the return ring at *head. *tail_seen is the producer's tail as last seen: the
 * tail only moves forward, so while head - *tail_seen leaves room the slot is free without a look
 * at the producer's line; otherwise the tail is loaded again, and false means it ran backwards or
 * past head, or the ring is full (counters out of range: an honest producer's ring never fills,
 * since it holds every chunk there is). */
static inline bool ferry__conn_give_back(ferry__conn *c, uint64_t *head, uint64_t *tail_seen,
                                         uint64_t d)
{
    uint64_t cap = (uint64_t)c->rmask + 1;
    if (*head - *tail_seen >= cap) {
        /* Acquire: the producer read the slots below the tail it shows; we may overwrite them. */
        uint64_t t = atomic_load_explicit(&c->hdr->return_tail, memory_order_acquire);
        if (t - *tail_seen > *head - *tail_seen || *head - t >= cap)
            return false;
        *tail_seen = t;
    }
    atomic_store_explicit(&c->rslots[*head & c->rmask], d, memory_order_relaxed);
    ++*head;
    /* Release: the slot is written before the producer sees the new head. */
    atomic_store_explicit(&c->hdr->return_head, *head, memory_order_release);
    return true;
}

/* ---- doorbells (doorbell rules above) ------------------------------------------------------- */

/* A side about to sleep sets its doorbell (how it sleeps). The caller fences with
 * ferry__conn_doorbell_fence after setting all of its doorbells, then looks at the rings. */
static inline void ferry__conn_doorbell_set(_Atomic uint32_t *bell, uint32_t how)
{
    atomic_store_explicit(bell, how, memory_order_relaxed);
}

static inline uint32_t ferry__conn_doorbell_get(_Atomic uint32_t *bell)
{
    return atomic_load_explicit(bell, memory_order_relaxed);
}

/* The fence between a side's last write (doorbells set, or entries published or returned) and
 * its look at the other side's: one of the two sides sees the other's write. */
static inline void ferry__conn_doorbell_fence(void)
{
    atomic_thread_fence(memory_order_seq_cst);
}

/* After publishing or returning: fences, then takes the peer's doorbell back to 0 if it is set.
 * Returns how the peer sleeps (the value won), 0 when it does not or the other waker won. */
static inline uint32_t ferry__conn_doorbell_ring(_Atomic uint32_t *bell)
{
    ferry__conn_doorbell_fence();
    if (!atomic_load_explicit(bell, memory_order_relaxed))
        return 0;
    return atomic_exchange_explicit(bell, 0, memory_order_acq_rel);
}

/* Takes the peer's doorbell back to 0 only if it says the peer sleeps the way how (a publisher
 * waking ahead of a publication wakes futex sleepers alone). True when it was taken. */
static inline bool ferry__conn_doorbell_take(_Atomic uint32_t *bell, uint32_t how)
{
    if (atomic_load_explicit(bell, memory_order_relaxed) != how)
        return false;
    return atomic_compare_exchange_strong_explicit(bell, &how, 0, memory_order_acq_rel,
                                                   memory_order_relaxed);
}

#endif
