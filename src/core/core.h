/*
 * Internals shared by the core's files, one header per concern: the data segment (segment.h),
 * the connection segment and its rings (conn.h), the control messages (proto.h), status files
 * (status.h), the pool (pool.h), names and the node (node.h), and the module contract the
 * layers above see (module.h). This header gathers them with what the endpoints share
 * (housekeeping rates, epoll tags, the waitset's view of a subscriber).
 *
 * Shared memory holds offsets and indices, never pointers. Every value another process can write
 * is read once into a local, range-checked, then used; walks over shared structures are bounded.
 * Concurrency: node functions lock node->lock; a publisher or subscriber is used by one thread at
 * a time (the caller serialises); the rings are single-producer/single-consumer except the
 * delivery ring's tail, which both ends advance with a CAS (see the ring rules in conn.h).
 */
#ifndef FERRY_CORE_H
#define FERRY_CORE_H

#include <ferry/ferry.h>

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/conn.h"
#include "core/endpoint.h"
#include "core/module.h"
#include "core/node.h"
#include "core/pool.h"
#include "core/proto.h"
#include "core/segment.h"
#include "core/spin.h"
#include "core/status.h"
#include "platform/platform.h"

/* Hot paths poll for housekeeping at most this often: a subscriber that found nothing every
 * millisecond (so an application's epoll loop cannot spin on a pending hang-up), a publisher
 * every 50 ms (so a dead subscriber's chunks come back within 100 ms at 30 Hz, and a 30 Hz
 * camera pays the system call on every other frame, after its wake-ups). */
#define FERRY__HOUSEKEEP_NS 1000000
#define FERRY__PUB_HOUSEKEEP_NS 50000000
/* Housekeeping after a publication (publisher.h). */
#define FERRY__PUB_HOUSEKEEP_LATE_NS 200000000
/* A subscriber whose queue never runs dry (it is slower than its publishers) still looks for
 * new, restarted and dead publishers at least this often. */
#define FERRY__SUB_BUSY_HOUSEKEEP_NS 10000000
/* How long a subscriber woken ahead of a publication (ferry__publisher_wake_soon) polls for it
 * before it sleeps again. */
#define FERRY__SOON_SPIN_NS 100000
/* Loans of at least this size take in their subscribers' returns first (publisher_data.c). */
#define FERRY__HOT_REUSE_BYTES (64u * 1024u)

/* ---- what the endpoints share ---------------------------------------------------------------- */

/* Epoll tags: kind in the top byte, slot and connection generation below. */
enum {
    FERRY__TAG_LISTEN = 1,
    FERRY__TAG_WATCH = 3,
    FERRY__TAG_CONN = 4,
    FERRY__TAG_PENDING = 5, /* a publisher's accepted connection whose hello has not come */
};
static inline uint64_t ferry__tag(unsigned kind, uint32_t slot, uint32_t gen)
{
    return (uint64_t)kind << 56 | (uint64_t)(slot & 0xffffffu) << 32 | gen;
}
static inline unsigned ferry__tag_kind(uint64_t t)
{
    return (unsigned)(t >> 56);
}
static inline uint32_t ferry__tag_slot(uint64_t t)
{
    return (uint32_t)(t >> 32) & 0xffffffu;
}
static inline uint32_t ferry__tag_gen(uint64_t t)
{
    return (uint32_t)t;
}

/* Subscriber internals the waitset needs. */
bool ferry__subscriber_ready(ferry_subscriber *sub);
/* ferry_subscriber_options.background: no publication wakes it, waits look at it themselves. */
bool ferry__subscriber_background(const ferry_subscriber *sub);
/* Arms the doorbells and runs housekeeping; true when a sample is queued. */
bool ferry__subscriber_arm(ferry_subscriber *sub);
void ferry__subscriber_housekeep(ferry_subscriber *sub);
/* A wait found a sample queued after it slept: the stream's pace learns from it (spin.h). */
void ferry__subscriber_arrived(ferry_subscriber *sub);
int ferry__subscriber_poll_fd(const ferry_subscriber *sub);

#endif
