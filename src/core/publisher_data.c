/*
 * The publisher's data path: loans from the pool, publication, delivery into each subscriber's
 * ring (dropping the oldest, or waiting for room for subscribers that block), the return rings,
 * and the per-connection references that decide when a chunk is free. See publisher.h.
 */
#include "core/publisher.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void unref(ferry_publisher *pub, uint32_t index)
{
    ferry__chunk *ch = &pub->pool.chunks[index];
    if (ch->refs > 0 && --ch->refs == 0 && ch->state == FERRY__CHUNK_PUBLISHED)
        ferry__pool_put(&pub->pool, index);
}

static bool bit_test(const pconn *c, uint32_t i)
{
    return (c->bits[i / 64] >> (i % 64)) & 1;
}

static void bit_set(pconn *c, uint32_t i)
{
    c->bits[i / 64] |= (uint64_t)1 << (i % 64);
}

static void bit_clear(pconn *c, uint32_t i)
{
    c->bits[i / 64] &= ~((uint64_t)1 << (i % 64));
}

/* A descriptor a subscriber gave back (or left in its ring): it must name a chunk this
 * connection references, in its current generation. */
static bool desc_valid(ferry_publisher *pub, const pconn *c, uint64_t d)
{
    uint32_t i = ferry__desc_index(d);
    return i < pub->pool.nchunks && bit_test(c, i) && pub->pool.chunks[i].gen == ferry__desc_gen(d);
}

void ferry__pub_drop_ref(ferry_publisher *pub, pconn *c, uint32_t index)
{
    bit_clear(c, index);
    peer_share *sh = &pub->shares[c->share];
    c->outstanding--;
    c->outstanding_bytes -= pub->pool.chunks[index].capacity;
    sh->outstanding--;
    sh->outstanding_bytes -= pub->pool.chunks[index].capacity;
    unref(pub, index);
}

#ifdef FERRY_CHECKS
/* A connection's references agree with themselves: its bitmap, their count and their bytes. */
static void conn_check(const ferry_publisher *pub, const pconn *c)
{
    uint32_t refs = 0;
    uint64_t bytes = 0;
    for (uint32_t w = 0; w < pub->words; w++)
        for (uint64_t b = c->bits[w]; b; b &= b - 1) {
            uint32_t i = w * 64 + (uint32_t)__builtin_ctzll(b);
            FERRY__CHECK(i < pub->pool.nchunks && pub->pool.chunks[i].refs > 0);
            refs++;
            bytes += pub->pool.chunks[i].capacity;
        }
    FERRY__CHECK_EQ(refs, c->outstanding);
    FERRY__CHECK_EQ(bytes, c->outstanding_bytes);
}
#else
static void conn_check(const ferry_publisher *pub, const pconn *c)
{
    (void)pub;
    (void)c;
}
#endif

static void drain_returns(ferry_publisher *pub, pconn *c)
{
    uint64_t head;
    if (!ferry__conn_returns(&c->ring, c->rtail, &head)) {
        ferry__pub_conn_fail(pub, c, "return ring counter out of range");
        return;
    }
    if (head == c->rtail)
        return;
    while (c->rtail != head) {
        uint64_t d = ferry__conn_returned(&c->ring, c->rtail);
        if (!desc_valid(pub, c, d)) {
            ferry__pub_conn_fail(pub, c, "returned a chunk it did not hold");
            return;
        }
        ferry__pub_drop_ref(pub, c, ferry__desc_index(d));
        c->rtail++;
    }
    ferry__conn_returns_done(&c->ring, c->rtail);
    conn_check(pub, c);
}

/* Loops over the active connections run backwards: a connection that fails is swapped out of
 * the dense list with one already visited. */
void ferry__pub_drain_all_returns(ferry_publisher *pub)
{
    for (uint32_t k = pub->nactive; k-- > 0;)
        drain_returns(pub, &pub->conns[pub->active[k]]);
}

/* Reads the delivery tail and checks it moved only forward and not past head. */
static bool load_tail(ferry_publisher *pub, pconn *c, uint64_t *tail)
{
    if (!ferry__conn_tail(&c->ring, c->head, &c->tail_seen)) {
        ferry__pub_conn_fail(pub, c, "delivery ring counter out of range");
        return false;
    }
    *tail = c->tail_seen;
    return true;
}

/* One wake-up datagram; MSG_DONTWAIT makes the send itself non-blocking whatever the peer did
 * to its end. EAGAIN means wake-ups are queued already; a broken connection is seen by
 * housekeeping. */
static void send_wake(int sock)
{
    ferry__bye m;
    ferry__wake_init(&m);
    ferry__send_msg(sock, &m, sizeof m, NULL, 0);
}

static void wake_subscriber(pconn *c)
{
    /* The doorbell says how the subscriber sleeps: in ferry_wait on the word itself, or on its
     * notifier (an epoll set of its own or the application's). */
    uint32_t how = ferry__conn_doorbell_ring(&c->ring.hdr->sub_waiting);
    if (how == FERRY__DOORBELL_FUTEX)
        ferry__futex_wake((void *)&c->ring.hdr->sub_waiting);
    else if (how == FERRY__DOORBELL_NOTIFIER)
        send_wake(c->sock);
}

/* A paused subscriber (its lifecycle is inactive) is skipped. The word is the subscriber's to
 * write: whatever it holds decides only what that subscriber receives. */
static bool paused(const pconn *c)
{
    return atomic_load_explicit(&c->ring.hdr->sub_paused, memory_order_relaxed) != 0;
}

/* The subscriber's word too: it decides only whether this one is served in the second pass. */
static bool background(const pconn *c)
{
    return atomic_load_explicit(&c->ring.hdr->sub_background, memory_order_relaxed) != 0;
}

void ferry__publisher_wake_soon(ferry_publisher *pub)
{
    if (ferry__pub_check(pub) || pub->inactive)
        return;
    for (uint32_t k = 0; k < pub->nactive; k++) {
        pconn *c = &pub->conns[pub->active[k]];
        ferry__conn_header *h = c->ring.hdr;
        if (ferry__conn_doorbell_get(&h->sub_waiting) != FERRY__DOORBELL_FUTEX || paused(c) ||
            background(c))
            continue;
        /* The hint before the doorbell: a subscriber woken by this exchange sees it. One that
         * woke otherwise and sees it polls a little for nothing. */
        atomic_store_explicit(&h->pub_soon, 1, memory_order_relaxed);
        if (ferry__conn_doorbell_take(&h->sub_waiting, FERRY__DOORBELL_FUTEX))
            ferry__futex_wake((void *)&h->sub_waiting);
    }
}

/* True when one more reference to ch would take c's peer (all its connections) past the
 * per-subscriber limits. */
static bool at_limit(const ferry_publisher *pub, const pconn *c, const ferry__chunk *ch)
{
    const peer_share *sh = &pub->shares[c->share];
    return sh->outstanding >= pub->opt.max_chunks_per_subscriber ||
           ch->capacity > pub->opt.max_bytes_per_subscriber - sh->outstanding_bytes;
}

/* Appends a reference to chunk index on c. Returns false when c was dropped. */
bool ferry__pub_deliver(ferry_publisher *pub, pconn *c, uint32_t index, bool wake)
{
    /* The tail only moves forward: while the one last seen leaves room there is room, and the
     * subscriber's line need not be read. */
    uint64_t tail = c->tail_seen;
    if (c->head - tail >= c->depth && !load_tail(pub, c, &tail))
        return false;
    if (c->head - tail >= c->depth) {
        /* Full: drop the oldest. If the subscriber takes it first our CAS fails and there is
         * room anyway. */
        uint64_t old = ferry__conn_entry(&c->ring, tail);
        if (ferry__conn_claim(&c->ring, tail)) {
            c->tail_seen = tail + 1;
            if (!desc_valid(pub, c, old)) {
                ferry__pub_conn_fail(pub, c, "delivery ring slot corrupted");
                return false;
            }
            ferry__pub_drop_ref(pub, c, ferry__desc_index(old));
            c->dropped++;
            pub->stats.dropped++;
            atomic_store_explicit(&c->ring.hdr->dropped, c->dropped, memory_order_relaxed);
        } else if (!load_tail(pub, c, &tail) || c->head - tail >= c->depth) {
            if (c->state == PC_ACTIVE)
                ferry__pub_conn_fail(pub, c, "delivery ring counter out of range");
            return false;
        }
    }
    ferry__chunk *ch = &pub->pool.chunks[index];
    if (at_limit(pub, c, ch)) {
        /* What it gave back is taken in lazily (see ferry_loan): look before judging. */
        drain_returns(pub, c);
        if (c->state != PC_ACTIVE)
            return false;
    }
    if (at_limit(pub, c, ch)) {
        /* At its limit: this subscriber misses the publication, the others do not. */
        c->dropped++;
        pub->stats.dropped++;
        pub->stats.limited++;
        atomic_store_explicit(&c->ring.hdr->dropped, c->dropped, memory_order_relaxed);
        if (!c->limited)
            ferry__log_peer(
                pub->ep.node, &pub->ep.peer_log, c->limit_told ? FERRY_LOG_DEBUG : FERRY_LOG_WARN,
                "%s: subscriber pid %d holds %u chunks (%llu bytes; its %s, %u "
                "connection%s: %u chunks, %llu bytes), the limit: it receives nothing "
                "more until it gives some back",
                pub->ep.topic, (int)c->pid, c->outstanding,
                (unsigned long long)c->outstanding_bytes,
                pub->shares[c->share].key >> 32 ? "user" : "process", pub->shares[c->share].conns,
                pub->shares[c->share].conns == 1 ? "" : "s", pub->shares[c->share].outstanding,
                (unsigned long long)pub->shares[c->share].outstanding_bytes);
        c->limited = c->limit_told = true;
        return true;
    }
    c->limited = false;
    ferry__conn_push(&c->ring, &c->head, ferry__desc(index, ch->gen));
    bit_set(c, index);
    c->outstanding++;
    c->outstanding_bytes += ch->capacity;
    pub->shares[c->share].outstanding++;
    pub->shares[c->share].outstanding_bytes += ch->capacity;
    ch->refs++;
    pub->stats.deliveries++;
    conn_check(pub, c);
    if (wake)
        wake_subscriber(c);
    return true;
}

/* A loan that waits for a chunk to come back (FERRY_POOL_BLOCK). */
typedef struct loan_try {
    ferry_publisher *pub;
    size_t size;
    uint32_t index;
    ferry_err err;
} loan_try;

static bool chunk_back(void *arg)
{
    loan_try *t = arg;
    ferry__pub_drain_all_returns(t->pub);
    t->index = ferry__pool_get(&t->pub->pool, t->size, &t->err);
    return t->index != FERRY__NONE || t->err != FERRY_EPOOL;
}

ferry_err ferry_loan(ferry_publisher *pub, size_t size, void **payload)
{
    ferry_err err = ferry__pub_check(pub);
    if (err)
        return err;
    if (!payload || size == 0)
        return FERRY_EINVAL;
    if (size > pub->opt.max_sample_size)
        return FERRY_ETOOBIG;
    if (pub->inactive) {
        ferry__log(pub->ep.node, FERRY_LOG_DEBUG,
                   "%s: loan refused: the publisher's lifecycle is "
                   "not active",
                   pub->ep.topic);
        return FERRY_ESTATE;
    }
    /* Housekeeping here, before the frame is filled, rather than after a publication. */
    int64_t now = ferry__clock_ns();
    ferry__pub_housekeep_maybe(pub, now, false);
    /* One left by housekeeping after a publication (publisher.h); a comparison when none is due. */
    ferry__endpoint_sweep(&pub->ep, now);
    /* Small samples: returns are taken in when the free list runs dry, not at every loan: a
     * free chunk needs no look at the subscribers' lines, and the pool grows exactly when it did
     * before (only when nothing came back). Large ones: at every loan, for which a look at the
     * lines is nothing beside the frame, so that the chunk given back last (the free list is a
     * stack) is loaned again while its lines are still in this CPU's caches, and a stream cycles
     * through as few chunks as its queues hold rather than through the whole pool (a 720p frame
     * written into a cold chunk took twice as long). */
    bool drained = size >= FERRY__HOT_REUSE_BYTES;
    if (drained)
        ferry__pub_drain_all_returns(pub);
    uint32_t index = ferry__pool_get_free(&pub->pool, size);
    if (index == FERRY__NONE) {
        if (!drained)
            ferry__pub_drain_all_returns(pub);
        index = ferry__pool_get(&pub->pool, size, &err);
    }
    if (index == FERRY__NONE) {
        /* Housekeeping may find a dead subscriber whose chunks come back. */
        ferry__pub_housekeep(pub, 0);
        index = ferry__pool_get(&pub->pool, size, &err);
    }
    /* History is a courtesy to late joiners: it never starves the live stream. */
    while (index == FERRY__NONE && err == FERRY_EPOOL && pub->hist_len > 0) {
        uint32_t oldest = (pub->hist_head + pub->opt.history - pub->hist_len) % pub->opt.history;
        pub->hist_len--;
        unref(pub, pub->history[oldest]);
        index = ferry__pool_get(&pub->pool, size, &err);
    }
    if (index == FERRY__NONE && err == FERRY_EPOOL &&
        pub->opt.on_pool_exhausted == FERRY_POOL_BLOCK) {
        int64_t deadline = ferry__deadline(pub->opt.block_timeout_ns);
        loan_try t = {pub, size, FERRY__NONE, err};
        if (ferry__spin_until(&pub->spin, chunk_back, &t, deadline)) {
            index = t.index;
            err = t.err;
        }
        while (index == FERRY__NONE && err == FERRY_EPOOL) {
            if (ferry__remaining(deadline) == 0) {
                err = FERRY_ETIMEDOUT;
                break;
            }
            ferry__pub_sleep_for_subscribers(pub, deadline, false);
            index = ferry__pool_get(&pub->pool, size, &err);
        }
    }
    if (index == FERRY__NONE) {
        ferry__pub_sync_stats(pub);
        return err;
    }
    ferry__chunk *ch = &pub->pool.chunks[index];
    ch->gen++;
    ch->loan_size = size;
    ferry__chunk_header *h = ferry__pool_header(&pub->pool, index);
    h->index = index;
    h->generation = ch->gen;
    h->size = size;
    h->publisher_id = pub->ep.id;
    *payload = ferry__pool_payload(&pub->pool, index);
    return FERRY_OK;
}

static ferry_err find_loan(ferry_publisher *pub, void *payload, uint32_t *index)
{
    ferry_err err = ferry__pub_check(pub);
    if (err)
        return err;
    if (!payload)
        return FERRY_EINVAL;
    uint32_t i = ferry__pool_find(&pub->pool, payload);
    if (i == FERRY__NONE)
        return FERRY_EFOREIGN;
    if (pub->pool.chunks[i].state != FERRY__CHUNK_LOANED)
        return FERRY_ESTATE;
    *index = i;
    return FERRY_OK;
}

/* True when a subscriber that blocks the publisher has a full queue. */
static bool blocked(ferry_publisher *pub)
{
    for (uint32_t k = pub->nactive; k-- > 0;) {
        pconn *c = &pub->conns[pub->active[k]];
        uint64_t tail;
        if (c->overflow == FERRY_OVERFLOW_BLOCK && c->head - c->tail_seen >= c->depth &&
            !paused(c) && load_tail(pub, c, &tail) && c->head - tail >= c->depth)
            return true;
    }
    return false;
}

static bool room(void *arg)
{
    return !blocked(arg);
}

/* Waits until every subscriber that blocks the publisher has room in its queue: spinning first
 * (spin.h), then asleep on the subscribers' wake-ups. */
static ferry_err wait_for_room(ferry_publisher *pub)
{
    if (pub->nblocking == 0 || !blocked(pub))
        return FERRY_OK;
    int64_t deadline = ferry__deadline(pub->opt.block_timeout_ns);
    if (ferry__spin_until(&pub->spin, room, pub, deadline))
        return FERRY_OK;
    while (pub->nblocking > 0 && blocked(pub)) {
        if (ferry__remaining(deadline) == 0)
            return FERRY_ETIMEDOUT;
        ferry__pub_sleep_for_subscribers(pub, deadline, true);
    }
    return FERRY_OK;
}

ferry_err ferry_publish(ferry_publisher *pub, void *payload, size_t size)
{
    uint32_t index;
    ferry_err err = find_loan(pub, payload, &index);
    if (err)
        return err;
    ferry__chunk *ch = &pub->pool.chunks[index];
    if (size > ch->loan_size)
        return FERRY_EINVAL;
    if (size == 0)
        size = ch->loan_size;
    if (pub->inactive) {
        ferry__log(pub->ep.node, FERRY_LOG_DEBUG,
                   "%s: publication refused: the publisher's "
                   "lifecycle is not active (the loan is still yours)",
                   pub->ep.topic);
        return FERRY_ESTATE;
    }
    if ((err = wait_for_room(pub)))
        return err;
    ferry__chunk_header *h = ferry__pool_header(&pub->pool, index);
    h->index = index; /* restore what the application may have overwritten */
    h->generation = ch->gen;
    h->publisher_id = pub->ep.id;
    h->size = size;
    h->sequence = ++pub->seq;
    int64_t now = ferry__clock_ns();
    h->publish_ns = now;
    ch->state = FERRY__CHUNK_PUBLISHED;
    ch->refs = 0;
    pub->pool.loaned--;
    /* Two passes: background subscribers (recorders, loggers) after the others, and without a
     * wake-up: they look for themselves (ferry_wait and waitsets poll them), so the system call
     * and the CPU they would take stay the pipeline's. The subscriber's words are read once per
     * publication (into later): one that changes them meanwhile still gets one delivery at
     * most. A delivery drops only its own connection, which leaves the active list. */
    uint32_t nlater = 0;
    for (uint32_t k = pub->nactive; k-- > 0;) {
        pconn *c = &pub->conns[pub->active[k]];
        c->later = false;
        if (paused(c))
            continue;
        if (background(c)) {
            c->later = true;
            nlater++;
        } else {
            ferry__pub_deliver(pub, c, index, true);
        }
    }
    for (uint32_t k = pub->nactive; nlater > 0 && k-- > 0;) {
        pconn *c = &pub->conns[pub->active[k]];
        if (c->later) {
            nlater--;
            ferry__pub_deliver(pub, c, index, false);
        }
    }
    if (pub->opt.history) {
        if (pub->hist_len == pub->opt.history)
            unref(pub, pub->history[pub->hist_head]);
        else
            pub->hist_len++;
        pub->history[pub->hist_head] = index;
        pub->hist_head = (pub->hist_head + 1) % pub->opt.history;
        ch->refs++;
    }
    if (ch->refs == 0)
        ferry__pool_put(&pub->pool, index);
    pub->stats.published++;
    /* After the wake-ups: cold pages and system calls cost microseconds that would otherwise
     * sit between a frame and its subscribers. Housekeeping only when long overdue: it comes
     * with loans (publisher.h). */
    ferry__pub_publish_status(pub);
    ferry__pub_housekeep_maybe(pub, now, true);
    return FERRY_OK;
}

ferry_err ferry_publisher_reserve(ferry_publisher *pub, size_t size, uint32_t count)
{
    ferry_err err = ferry__pub_check(pub);
    if (err)
        return err;
    if (size == 0 || count == 0)
        return FERRY_EINVAL;
    if (size > pub->opt.max_sample_size) {
        ferry__log(pub->ep.node, FERRY_LOG_WARN,
                   "%s: reserve of %zu-byte samples refused: "
                   "max_sample_size is %zu",
                   pub->ep.topic, size, pub->opt.max_sample_size);
        return FERRY_ETOOBIG;
    }
    ferry__pool *p = &pub->pool;
    uint64_t chunk = 0;
    err = ferry__pool_reserve(p, size, count, &chunk);
    if (err == FERRY_EPOOL)
        ferry__log(pub->ep.node, FERRY_LOG_WARN,
                   "%s: reserve of %u chunks of %llu bytes (for %zu-byte samples) refused: the "
                   "pool holds %u of max_chunks %u and %llu of pool_bytes %llu in %u of %u size "
                   "classes",
                   pub->ep.topic, count, (unsigned long long)chunk, size, p->nchunks, p->max_chunks,
                   (unsigned long long)p->arena_used, (unsigned long long)p->arena_cap, p->nclasses,
                   FERRY__MAX_CLASSES);
    else if (err)
        ferry__log(pub->ep.node, FERRY_LOG_WARN, "%s: reserve of %u chunks of %llu bytes: %s",
                   pub->ep.topic, count, (unsigned long long)chunk, ferry_strerror(err));
    ferry__pub_sync_stats(pub);
    return err;
}

ferry_err ferry__publisher_loan_index(ferry_publisher *pub, void *payload, uint32_t *index)
{
    if (!index)
        return FERRY_EINVAL;
    return find_loan(pub, payload, index);
}

ferry_err ferry_loan_release(ferry_publisher *pub, void *payload)
{
    uint32_t index;
    ferry_err err = find_loan(pub, payload, &index);
    if (err)
        return err;
    ferry__pool_put(&pub->pool, index);
    return FERRY_OK;
}

ferry_err ferry_publish_copy(ferry_publisher *pub, const void *data, size_t size)
{
    ferry_err err = ferry__pub_check(pub);
    if (err)
        return err;
    if (!data)
        return FERRY_EINVAL;
    void *payload;
    if ((err = ferry_loan(pub, size, &payload)))
        return err;
    memcpy(payload, data, size);
    if ((err = ferry_publish(pub, payload, size))) {
        ferry_loan_release(pub, payload);
        return err;
    }
    pub->stats.bytes_copied += size;
    return FERRY_OK;
}
