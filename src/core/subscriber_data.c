/*
 * The subscriber's data path: samples taken from each publisher's delivery ring (every descriptor
 * and chunk header checked), given back through the return ring, doorbells armed and rung, and
 * the waits of ferry_take and ferry_wait. See subscriber.h.
 */
#include "core/subscriber.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>

#define FUTEX_SLICE_NS 50000000LL /* longest doorbell sleep before housekeeping runs again */

typedef struct peeked {
    uint64_t tail;
    uint64_t desc;
    ferry__chunk_header h;
    uint64_t offset;
    uint64_t capacity;
} peeked;

/* Reads the oldest queued entry of c and checks everything about it: a FERRY__PEEK_ value;
 * with FERRY__PEEK_BROKEN the publisher broke the rules and c is closed. */
static int peek(ferry_subscriber *sub, sconn *c, peeked *p)
{
    uint64_t tail, d;
    int found = ferry__conn_peek(&c->ring, &tail, &d);
    if (found == FERRY__PEEK_BROKEN) {
        ferry__sub_conn_fail(sub, c, "delivery ring counters out of range");
        return -1;
    }
    if (found != FERRY__PEEK_ENTRY)
        return found;
    uint32_t index = ferry__desc_index(d);
    if (index >= c->max_chunks) {
        ferry__sub_conn_fail(sub, c, "chunk index out of range");
        return -1;
    }
    ferry__chunk_entry e;
    memcpy(&e, c->data + c->table_offset + (uint64_t)index * sizeof e, sizeof e);
    if (e.offset < c->arena_offset || e.offset % FERRY__PAGE || e.offset >= c->data_size ||
        c->payload_offset > c->data_size - e.offset ||
        e.capacity > c->data_size - e.offset - c->payload_offset) {
        ferry__sub_conn_fail(sub, c, "chunk table entry out of range");
        return -1;
    }
    /* First sight of the chunk on this connection: its pages must all be allocated, or reading
     * them would allocate pages charged to us (a publisher's sparse segment can make a frame
     * span any size of hole). The data segment is sealed against writing, so no hole can be
     * punched later. */
    uint64_t bit = (uint64_t)1 << (index % 64);
    if (!(c->backed_bits[index / 64] & bit)) {
        if (ferry__fd_backed(c->data_fd, e.offset, c->payload_offset + e.capacity) == 0) {
            ferry__sub_conn_fail(sub, c, "a chunk spans pages the publisher never allocated");
            return -1;
        }
        c->backed_bits[index / 64] |= bit;
    }
    memcpy(&p->h, c->data + e.offset, sizeof p->h);
    if (p->h.index != index || p->h.generation != ferry__desc_gen(d) || p->h.size == 0 ||
        p->h.size > e.capacity) {
        /* The entry may have been dropped and its chunk reused while we looked: only a stable
         * tail makes this a real violation. */
        if (ferry__conn_tail_moved(&c->ring, tail))
            return FERRY__PEEK_RACED;
        ferry__sub_conn_fail(sub, c, "chunk header does not match its descriptor");
        return -1;
    }
    p->tail = tail;
    p->desc = d;
    p->offset = e.offset;
    p->capacity = e.capacity;
    return 1;
}

/* After a take (tail: the delivery tail it left) or a return (tail UINT64_MAX: no room made). */
static void wake_publisher(ferry_subscriber *sub, sconn *c, uint64_t tail)
{
    ferry__conn_header *hdr = c->ring.hdr;
    /* Pairs with the publisher's store of pub_waiting, fence, re-check. */
    ferry__conn_doorbell_fence();
    if (atomic_load_explicit(&hdr->pub_waiting, memory_order_acquire) == 0)
        return;
    /* A publisher waiting for more room than there is sleeps on (its low-water mark). The
     * head is read only then: in a flood it is the publisher's busiest line. */
    uint32_t want = atomic_load_explicit(&hdr->pub_wake_room, memory_order_relaxed);
    if (want > 0) {
        uint64_t free = 0;
        if (tail != UINT64_MAX) {
            uint64_t queued = ferry__conn_queued_behind(&c->ring, tail);
            free = queued < sub->opt.depth ? sub->opt.depth - queued : 0;
        }
        if (want > free)
            return;
    }
    if (ferry__conn_doorbell_ring(&hdr->pub_waiting) && c->sock >= 0) {
        /* MSG_DONTWAIT: never blocks; EAGAIN means the publisher has wake-ups queued. */
        ferry__bye m;
        ferry__wake_init(&m);
        ferry__send_msg(c->sock, &m, sizeof m, NULL, 0);
    }
}

/* Hands a chunk reference back to the publisher of the active connection c. */
static void give_back(ferry_subscriber *sub, sconn *c, uint64_t d)
{
    if (!ferry__conn_give_back(&c->ring, &c->rhead, &c->rtail_seen, d)) {
        ferry__sub_conn_fail(sub, c, "return ring counters out of range");
        return;
    }
    wake_publisher(sub, c, UINT64_MAX);
}

/* First sight of a chunk on this connection: map all its pages now, so that reading this
 * sample and every later one in the chunk does not fault. Once per chunk per connection; the
 * geometry was checked by peek. */
static void prefault_chunk(sconn *c, uint32_t index, const peeked *p)
{
    uint64_t bit = (uint64_t)1 << (index % 64);
    if (c->seen_bits[index / 64] & bit)
        return;
    c->seen_bits[index / 64] |= bit;
    uint64_t len = c->payload_offset + p->capacity;
    uint64_t room = c->data_size - p->offset;
    len = (len + FERRY__PAGE - 1) / FERRY__PAGE * FERRY__PAGE;
    ferry__prefault_read(c->data + p->offset, len < room ? len : room);
}

static bool try_take(ferry_subscriber *sub, ferry_sample *out)
{
    if (sub->paused) {
        ferry__sub_discard_queued(sub);
        return false;
    }
    for (int attempt = 0; attempt < 64; attempt++) {
        sconn *best = NULL;
        peeked bp = {0}, p;
        bool raced = false;
        for (uint32_t k = sub->nlive; k-- > 0;) {
            sconn *c = &sub->conns[sub->live[k]];
            int r = peek(sub, c, &p);
            if (r == FERRY__PEEK_RACED)
                raced = true;
            if (r == FERRY__PEEK_ENTRY && (!best || p.h.publish_ns < bp.h.publish_ns)) {
                best = c;
                bp = p;
            }
        }
        if (!best) {
            if (raced)
                continue;
            return false;
        }
        if (!ferry__conn_claim(&best->ring, bp.tail))
            continue; /* the publisher dropped it first */
        uint32_t index = ferry__desc_index(bp.desc);
        if ((best->held_bits[index / 64] >> (index % 64)) & 1) {
            ferry__sub_conn_fail(sub, best, "delivered a chunk we already hold");
            continue;
        }
        best->held_bits[index / 64] |= (uint64_t)1 << (index % 64);
        if (sub->opt.prefault)
            prefault_chunk(best, index, &bp);
        best->held++;
        sub->held++;
        sub->stats.received++;
        sub->stats.held = sub->held;
        out->data = best->data + bp.offset + best->payload_offset;
        out->size = bp.h.size;
        out->sequence = bp.h.sequence;
        out->publish_time.ns = bp.h.publish_ns;
        out->publisher_id = best->pub_id;
        out->private_[0] = sub->cookie;
        out->private_[1] = (uint64_t)(best - sub->conns) << 32 | best->gen;
        out->private_[2] = bp.desc;
        if (best->state == SC_ACTIVE)
            wake_publisher(sub, best, bp.tail + 1);
        return true;
    }
    return false;
}

/* Gives back, unread, everything queued for a paused subscriber: what was there when it paused,
 * and what a publisher delivered before it saw the pause word. */
void ferry__sub_discard_queued(ferry_subscriber *sub)
{
    for (uint32_t k = sub->nlive; k-- > 0;) {
        sconn *c = &sub->conns[sub->live[k]];
        int state = c->state;
        /* Bounded by the ring's capacity; stops when c fails (it may be closed then). */
        for (uint32_t n = 0; n <= c->ring.dmask && c->state == state; n++) {
            peeked p;
            int r = peek(sub, c, &p);
            if (r == FERRY__PEEK_RACED)
                continue;
            if (r != FERRY__PEEK_ENTRY)
                break;
            if (!ferry__conn_claim(&c->ring, p.tail))
                continue;
            uint32_t index = ferry__desc_index(p.desc);
            if ((c->held_bits[index / 64] >> (index % 64)) & 1) {
                ferry__sub_conn_fail(sub, c, "delivered a chunk we already hold");
                break;
            }
            sub->discarded++;
            if (c->state == SC_ACTIVE)
                give_back(sub, c, p.desc);
        }
        if (c->state == state && state == SC_GONE && c->held == 0 && ferry__sub_ring_empty(c))
            ferry__sub_conn_close(sub, c);
    }
}

bool ferry__subscriber_background(const ferry_subscriber *sub)
{
    return sub->opt.background;
}

bool ferry__subscriber_ready(ferry_subscriber *sub)
{
    if (sub->paused) {
        ferry__sub_discard_queued(sub);
        return false;
    }
    for (uint32_t k = 0; k < sub->nlive; k++)
        if (!ferry__sub_ring_empty(&sub->conns[sub->live[k]]))
            return true;
    return false;
}

/* Sets every active connection's doorbell to how (a FERRY__DOORBELL_ value), then checks the
 * rings once more; true when a sample is queued. */
static bool arm(ferry_subscriber *sub, uint32_t how)
{
    /* Backwards: a connection that fails while its messages are read is swapped out of the
     * dense list with one already visited. */
    for (uint32_t k = sub->nlive; k-- > 0;) {
        sconn *c = &sub->conns[sub->live[k]];
        if (c->state != SC_ACTIVE)
            continue;
        /* A notifier doorbell we set that is clear again means its publisher sent a wake-up on
         * the socket: read it, so that the descriptor does not stay readable. One message: an
         * honest publisher sends one wake-up per doorbell, and anything more keeps the socket
         * readable for housekeeping. */
        uint32_t now = ferry__conn_doorbell_get(&c->ring.hdr->sub_waiting);
        if (c->armed == FERRY__DOORBELL_NOTIFIER && now == 0) {
            ferry__sub_read_messages(sub, c, false, 1);
            if (c->state != SC_ACTIVE)
                continue;
        }
        /* A notifier doorbell set anew may bring one wake-up (the one for a doorbell that fired
         * may still be on its way: it is read later, against this credit). */
        if (how == FERRY__DOORBELL_NOTIFIER &&
            (c->armed != FERRY__DOORBELL_NOTIFIER || now != FERRY__DOORBELL_NOTIFIER) &&
            c->wake_credit < WAKE_CREDIT_MAX)
            c->wake_credit++;
        /* Stored only when it changes: the publisher reads this line at every publication, and
         * a store would take it from the publisher's cache each time. */
        if (now != how)
            ferry__conn_doorbell_set(&c->ring.hdr->sub_waiting, how);
        c->armed = how;
    }
    /* Pairs with the publisher's fence between its new head and its doorbell check. */
    ferry__conn_doorbell_fence();
    return ferry__subscriber_ready(sub);
}

bool ferry__subscriber_arm(ferry_subscriber *sub)
{
    return arm(sub, FERRY__DOORBELL_NOTIFIER);
}

/* Sleeps on the doorbell words of the active connections (a futex wait is cheaper to wake than
 * a datagram behind epoll). Returns false when that is not possible here: more connections than
 * one vectored wait takes, or two or more where the kernel has no futex_waitv (one connection,
 * the usual case, is waited for with FUTEX_WAIT everywhere). */
static bool sleep_on_doorbells(ferry_subscriber *sub, int64_t timeout_ns)
{
    void *words[128];
    uint32_t expected[128];
    unsigned n = 0;
    if (sub->nactive == 0 || sub->nactive > 128 || sub->nconns != sub->nactive ||
        (sub->no_futexv && sub->nactive > 1))
        return false;
    if (arm(sub, FERRY__DOORBELL_FUTEX))
        return true;
    for (uint32_t k = 0; k < sub->nlive; k++) {
        sconn *c = &sub->conns[sub->live[k]];
        if (c->state == SC_ACTIVE) {
            words[n] = (void *)&c->ring.hdr->sub_waiting;
            expected[n++] = FERRY__DOORBELL_FUTEX;
        }
    }
    if (ferry__futex_waitv(words, expected, n, timeout_ns) != 0 && errno == ENOSYS) {
        sub->no_futexv = true;
        return false;
    }
    return true;
}

/* True when a publisher woke us ahead of a publication (ferry__publisher_wake_soon) and this
 * subscriber may spin for it; the hints are cleared either way. */
static bool woken_soon(ferry_subscriber *sub)
{
    bool soon = false;
    for (uint32_t k = 0; k < sub->nlive; k++) {
        sconn *c = &sub->conns[sub->live[k]];
        if (c->state == SC_ACTIVE &&
            atomic_load_explicit(&c->ring.hdr->pub_soon, memory_order_relaxed) != 0) {
            atomic_store_explicit(&c->ring.hdr->pub_soon, 0, memory_order_relaxed);
            soon = true;
        }
    }
    return soon && sub->spin.max > 0;
}

/* Polls until a sample is queued (true) or until passes. It yields every few hundred polls:
 * on the publisher's CPU (unpinned, woken onto it), it would otherwise hold back the very
 * publication it waits for. */
static bool poll_ready_until(ferry_subscriber *sub, int64_t until)
{
    for (unsigned i = 1; !ferry__subscriber_ready(sub); i++) {
        ferry__cpu_relax();
        if (i % 256 == 0) {
            if (ferry__clock_ns() >= until)
                return false;
            sched_yield();
        }
    }
    return true;
}

/* Polls for the publication a publisher announced, up to FERRY__SOON_SPIN_NS (or deadline). */
static void poll_soon(ferry_subscriber *sub, int64_t deadline)
{
    int64_t until = ferry__clock_ns() + FERRY__SOON_SPIN_NS;
    poll_ready_until(sub, deadline < until ? deadline : until);
}

/* Housekeeping for a subscriber that keeps finding samples: the empty-queue path, which runs it
 * otherwise, may never come. A subscriber that found its queue empty lately (and so ran it
 * there, at its own rate) pays nothing here: a frame that woke it is not delayed by it. */
static void busy_housekeep(ferry_subscriber *sub)
{
    int64_t now = ferry__clock_ns();
    if (now - sub->busy_since >= FERRY__SUB_BUSY_HOUSEKEEP_NS) {
        sub->busy_since = now;
        ferry__sub_housekeep(sub, 0);
    }
}

ferry_err ferry_take(ferry_subscriber *sub, ferry_sample *sample)
{
    ferry_err err = ferry__subscriber_check(sub);
    if (err)
        return err;
    if (!sample)
        return FERRY_EINVAL;
    if (sub->held >= sub->opt.max_held)
        return FERRY_ELIMIT;
    if (try_take(sub, sample)) {
        /* A loop on the descriptor woke for it: when it came paces the anticipation. That is
         * its publish time (this side's wake-up, which comes later by a varying amount, would
         * blur the period); a time in the future or over a second old is not believed. A
         * publisher that lies about it can only move when this side spins, within its budget. */
        if (sub->take_empty && sub->fd_given) {
            int64_t now = ferry__clock_ns(), at = sample->publish_time.ns;
            ferry__pace_arrived(&sub->pace, at <= now && now - at < 1000000000LL ? at : now);
        }
        sub->take_empty = false;
        busy_housekeep(sub);
        return FERRY_OK;
    }
    sub->take_empty = true;
    /* About to report "nothing": arm the doorbells where the descriptor was handed out (so that
     * it fires on the next delivery) and run housekeeping at a bounded rate (so a pending
     * hang-up cannot keep the fd readable). A subscriber without it waits in ferry_wait, which
     * sets its doorbells only to sleep. */
    bool armed = sub->fd_given;
    if (armed)
        ferry__subscriber_arm(sub);
    sub->busy_since = ferry__clock_ns();
    bool kept = sub->busy_since >= sub->next_housekeep;
    if (kept)
        ferry__sub_housekeep(sub, 0);
    /* Once more where a sample may have come meanwhile: before the doorbells were set, or from
     * a publisher that housekeeping just connected. */
    if ((armed || kept) && try_take(sub, sample)) {
        sub->take_empty = false;
        return FERRY_OK;
    }
    return FERRY_EAGAIN;
}

/* The connection and chunk of a sample sub holds, or the error that says why not. */
static ferry_err held_sample(ferry_subscriber *sub, const ferry_sample *sample, sconn **conn,
                             uint32_t *chunk)
{
    if (sample->private_[0] != sub->cookie)
        return sample->private_[0] == 0 ? FERRY_ESTATE : FERRY_EFOREIGN;
    uint32_t slot = (uint32_t)(sample->private_[1] >> 32);
    uint32_t gen = (uint32_t)sample->private_[1];
    if (slot >= sub->opt.max_publishers)
        return FERRY_ESTATE;
    sconn *c = &sub->conns[slot];
    uint32_t index = ferry__desc_index(sample->private_[2]);
    if (c->gen != gen || (c->state != SC_ACTIVE && c->state != SC_GONE) || index >= c->max_chunks ||
        !((c->held_bits[index / 64] >> (index % 64)) & 1))
        return FERRY_ESTATE;
    *conn = c;
    *chunk = index;
    return FERRY_OK;
}

ferry_err ferry__sample_where_get(ferry_subscriber *sub, const ferry_sample *sample,
                                  ferry__sample_where *out)
{
    ferry_err err = ferry__subscriber_check(sub);
    if (err)
        return err;
    if (!sample || !out)
        return FERRY_EINVAL;
    sconn *c;
    uint32_t index;
    if ((err = held_sample(sub, sample, &c, &index)))
        return err;
    /* The table entry was checked when the sample was taken and never changes: the chunk's
     * bounds follow from the payload pointer handed out then. */
    ferry__chunk_entry e;
    memcpy(&e, c->data + c->table_offset + (uint64_t)index * sizeof e, sizeof e);
    const uint8_t *payload = c->data + e.offset + c->payload_offset;
    if (e.offset < c->arena_offset || e.offset % FERRY__PAGE || e.offset >= c->data_size ||
        c->payload_offset > c->data_size - e.offset ||
        e.capacity > c->data_size - e.offset - c->payload_offset ||
        (const uint8_t *)sample->data != payload)
        return FERRY_EPROTO;
    out->slot = (uint32_t)(c - sub->conns);
    out->gen = c->gen;
    out->chunk = index;
    out->chunk_payload = payload;
    out->chunk_capacity = e.capacity;
    return FERRY_OK;
}

ferry_err ferry_release(ferry_subscriber *sub, ferry_sample *sample)
{
    ferry_err err = ferry__subscriber_check(sub);
    if (err)
        return err;
    if (!sample)
        return FERRY_EINVAL;
    sconn *c;
    uint32_t index;
    if ((err = held_sample(sub, sample, &c, &index)))
        return err;
    uint64_t d = sample->private_[2];
    c->held_bits[index / 64] &= ~((uint64_t)1 << (index % 64));
    c->held--;
    sub->held--;
    sub->stats.held = sub->held;
    memset(sample, 0, sizeof *sample);
    if (c->state == SC_ACTIVE) {
        give_back(sub, c, d);
    } else if (c->held == 0 && ferry__sub_ring_empty(c)) {
        ferry__sub_conn_close(sub, c);
    }
    ferry__sub_publish_status(sub);
    return FERRY_OK;
}

static bool ready(void *arg)
{
    return ferry__subscriber_ready(arg);
}

/* busy_poll: polls until a sample is queued or deadline passes, never asleep. While it polls,
 * its doorbells say it is awake: where the descriptor was handed out, the ferry_take that found
 * the queue empty set them, and a publisher seeing them set would send a wake-up datagram with
 * every sample (a system call on each side for a reader that needs none). They are set again on
 * the way out, so that the descriptor fires afterwards as it did before the call. */
static ferry_err poll_until(ferry_subscriber *sub, int64_t deadline)
{
    ferry_err err = FERRY_OK;
    if (arm(sub, 0))
        goto out;
    for (unsigned i = 1;; i++) {
        if (ferry__subscriber_ready(sub))
            goto out;
        ferry__cpu_relax();
        if (i % 64 == 0) {
            int64_t now = ferry__clock_ns();
            sub->busy_since = now;
            if (now >= sub->next_housekeep)
                ferry__sub_housekeep(sub, 0);
            if (now >= deadline) {
                if (!ferry__subscriber_ready(sub))
                    err = FERRY_ETIMEDOUT;
                goto out;
            }
        }
    }
out:
    if (sub->fd_given)
        arm(sub, FERRY__DOORBELL_NOTIFIER);
    busy_housekeep(sub);
    return err;
}

/* A steady stream's next sample (spin.h, paced streams): sleeps until a little before it is
 * due, then spins across its arrival with the doorbells clear (so the publisher makes no system
 * call for it). True when a sample is queued. */
static bool anticipate(ferry_subscriber *sub, int64_t deadline)
{
    if (sub->spin.max == 0)
        return false; /* spinning cannot help (one CPU shared) or is off */
    int64_t now = ferry__clock_ns();
    int64_t at = ferry__pace_wake_at(&sub->pace, now);
    if (at == 0 || at >= deadline)
        return false;
    if (now >= sub->next_housekeep)
        ferry__sub_housekeep(sub, 0);
    now = ferry__clock_ns();
    if (at <= now || !sleep_on_doorbells(sub, at - now))
        return false;
    now = ferry__clock_ns();
    if (ferry__subscriber_ready(sub)) {
        ferry__pace_arrived(&sub->pace, now); /* woken by its publication: it came early */
        return true;
    }
    if (now < at)
        return false; /* woken for something else: the caller's wait goes on */
    int64_t until = ferry__pace_spin_until(&sub->pace, at, now);
    if (until > deadline)
        until = deadline;
    int64_t start = now;
    bool found = arm(sub, 0) || poll_ready_until(sub, until);
    now = ferry__clock_ns();
    ferry__pace_spent(&sub->pace, start, now, found);
    if (found)
        ferry__pace_arrived(&sub->pace, now);
    return found;
}

void ferry__subscriber_arrived(ferry_subscriber *sub)
{
    ferry__pace_arrived(&sub->pace, ferry__clock_ns());
    sub->take_empty = false;
}

ferry_err ferry_subscriber_wake_at(ferry_subscriber *sub, int64_t *wake_at_ns)
{
    ferry_err err = ferry__subscriber_check(sub);
    if (err)
        return err;
    if (!wake_at_ns)
        return FERRY_EINVAL;
    *wake_at_ns = sub->spin.max == 0 || sub->opt.busy_poll
                      ? 0
                      : ferry__pace_wake_at(&sub->pace, ferry__clock_ns());
    return FERRY_OK;
}

ferry_err ferry_subscriber_catch(ferry_subscriber *sub, int64_t wake_at_ns)
{
    ferry_err err = ferry__subscriber_check(sub);
    if (err)
        return err;
    if (ferry__subscriber_ready(sub))
        return FERRY_OK; /* it came early: the take that follows records it */
    int64_t now = ferry__clock_ns();
    if (wake_at_ns <= 0 || wake_at_ns > now || sub->spin.max == 0)
        return FERRY_ETIMEDOUT;
    int64_t until = ferry__pace_spin_until(&sub->pace, wake_at_ns, now);
    bool found = false;
    if (until > now) {
        /* Doorbells clear while it spins: the publisher makes no system call for this sample. */
        found = arm(sub, 0) || poll_ready_until(sub, until);
        ferry__pace_spent(&sub->pace, now, ferry__clock_ns(), found);
    }
    /* Armed again for the loop's next sleep: the descriptor fires as after an empty take. */
    if (sub->fd_given)
        found = arm(sub, FERRY__DOORBELL_NOTIFIER) || found;
    return found ? FERRY_OK : FERRY_ETIMEDOUT;
}

ferry_err ferry_wait(ferry_subscriber *sub, int64_t timeout_ns)
{
    ferry_err err = ferry__subscriber_check(sub);
    if (err)
        return err;
    int64_t deadline = ferry__deadline(timeout_ns);
    if (sub->opt.busy_poll)
        return poll_until(sub, deadline);
    bool waited = false;
    for (;; waited = true) {
        if (ferry__subscriber_ready(sub)) {
            /* Waiting ran housekeeping before it slept: none between a frame and its reader. */
            if (waited) {
                sub->busy_since = ferry__clock_ns();
                ferry__pace_arrived(&sub->pace, sub->busy_since);
                sub->take_empty = false;
            } else {
                busy_housekeep(sub);
            }
            return FERRY_OK;
        }
        if (!waited && timeout_ns != 0 && ferry__spin_until(&sub->spin, ready, sub, deadline)) {
            sub->busy_since = ferry__clock_ns();
            ferry__pace_arrived(&sub->pace, sub->busy_since);
            sub->take_empty = false;
            return FERRY_OK;
        }
        if (!waited && timeout_ns != 0 && anticipate(sub, deadline)) {
            sub->busy_since = ferry__clock_ns();
            return FERRY_OK;
        }
        int64_t left = ferry__remaining(deadline);
        /* With every connection established, sleep on the doorbells, in slices, so that new
         * publishers and hang-ups are still noticed; otherwise on the poller, which sees
         * everything. */
        sub->busy_since = ferry__clock_ns();
        if (sub->busy_since >= sub->next_housekeep)
            ferry__sub_housekeep(sub, 0);
        int64_t cap = sub->opt.background ? FERRY_BACKGROUND_POLL_NS : FUTEX_SLICE_NS;
        int64_t slice = left < 0 || left > cap ? cap : left;
        if (left != 0 && sleep_on_doorbells(sub, slice)) {
            /* Woken ahead of a publication: it follows within microseconds, so poll for it
             * rather than pay another wake-up. */
            if (woken_soon(sub))
                poll_soon(sub, deadline);
            continue;
        }
        if (arm(sub, FERRY__DOORBELL_NOTIFIER))
            return FERRY_OK;
        /* Nobody wakes a background subscriber for a sample: it looks again after a slice. */
        ferry__sub_housekeep(sub, sub->opt.background ? slice : left);
        if (left == 0)
            return ferry__subscriber_ready(sub) ? FERRY_OK : FERRY_ETIMEDOUT;
    }
}
