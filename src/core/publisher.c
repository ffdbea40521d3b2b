/*
 * Publisher: owns a pool (its data segment) and one connection segment per subscriber.
 *
 * Every chunk reference handed to a subscriber is recorded privately, in a bit per chunk per
 * connection, so the publisher alone decides when a chunk is free: when its last reference comes
 * back through a return ring, is dropped from a full delivery ring, or is taken back because the
 * subscriber hung up (its socket closed: exit, crash or SIGKILL alike). Nothing the subscriber
 * writes is trusted: returns of chunks it does not hold, counters that run backwards or past the
 * head, and malformed messages disconnect it.
 *
 * Single-threaded per publisher: the caller serialises.
 */
#include "core/core.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { PC_FREE = 0, PC_ACTIVE = 2 };
/* An honest subscriber sends its hello right after it connects, before we even accept: one that
 * has sent none within a second is dropped. */
#define HELLO_TIMEOUT_NS 1000000000LL
#define MAX_PENDING_LIMIT 256

/* An accepted connection waiting for its hello. Pending connections have places of their own
 * (max_pending), apart from the admitted subscribers, so that connections that never speak
 * cannot lock newcomers out. */
typedef struct pending {
    int sock; /* -1 when the place is free */
    uint32_t gen;
    int32_t pid;
    int64_t since;
} pending;

typedef struct pconn {
    int state;
    uint32_t gen;
    int sock;
    int conn_fd;
    ferry__conn ring;
    uint32_t depth;
    uint8_t overflow;
    uint64_t head;      /* private copy of deliver_head: the shared one is never read back */
    uint64_t tail_seen; /* the delivery tail may only move forward, up to head */
    uint64_t rtail;     /* private copy of return_tail */
    uint64_t *bits;     /* chunks referenced by this subscriber (queued or held) */
    uint32_t outstanding;
    uint64_t outstanding_bytes; /* capacities of those chunks */
    bool limited;       /* at its per-subscriber limit at the last publication */
    bool limit_told;    /* the log said so once: later times are counted, not logged */
    uint64_t dropped;
    uint64_t sub_id;
    int32_t pid;
    int64_t since;
} pconn;

struct ferry_publisher {
    ferry__endpoint ep;
    ferry_publisher_options opt;
    char sock_name[64];
    int listen_fd;
    ferry__pool pool;
    ferry_publisher_stats *st; /* private counters, copied to the status file by sync_stats */
    ferry_publisher_stats stats;
    pconn *conns;
    pending *pending;
    uint32_t npending;
    uint16_t *active; /* slots of the active connections, dense: hot loops touch only these */
    uint32_t nblocking; /* active connections whose subscriber blocks the publisher */
    uint64_t *bits; /* max_subscribers * words_per_conn */
    uint32_t words;
    uint32_t nactive;
    uint32_t *history;
    uint32_t hist_len, hist_head;
    struct attachment {
        uint64_t key;
        int fds[FERRY__ATTACH_FDS];
        int nfds;
    } attachments[FERRY__ATTACH_MAX];
    uint32_t nattachments;
    uint64_t seq;
    int64_t next_housekeep;
    bool inactive; /* a lifecycle that is not active: loans and publications refused */
};

void ferry_publisher_options_init(ferry_publisher_options *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->max_sample_size = (size_t)64 << 20;
    o->pool_bytes = (size_t)256 << 20;
    o->max_chunks = 256;
    o->max_subscribers = 32;
    o->payload_align = 64;
    o->block_timeout_ns = 100000000;
    o->max_pending = 8;
}

static ferry_err options_resolve(ferry_publisher_options *o)
{
    ferry_publisher_options d;
    ferry_publisher_options_init(&d);
    if (!o->max_sample_size)
        o->max_sample_size = d.max_sample_size;
    if (!o->pool_bytes)
        o->pool_bytes = d.pool_bytes;
    if (!o->max_chunks)
        o->max_chunks = d.max_chunks;
    if (!o->max_subscribers)
        o->max_subscribers = d.max_subscribers;
    if (!o->payload_align)
        o->payload_align = d.payload_align;
    if (!o->block_timeout_ns)
        o->block_timeout_ns = d.block_timeout_ns;
    if (!o->max_pending)
        o->max_pending = d.max_pending;
    if (o->max_chunks > 65536 || o->max_subscribers > 1024 || o->history > 4096 ||
        o->max_pending > MAX_PENDING_LIMIT || o->block_timeout_ns < 0)
        return FERRY_EINVAL;
    if (o->history >= o->max_chunks)
        return FERRY_EINVAL;
    if (o->payload_align < 64 || o->payload_align > FERRY__PAGE ||
        (o->payload_align & (o->payload_align - 1)))
        return FERRY_EINVAL;
    if (o->max_sample_size > ((size_t)1 << 40) || o->pool_bytes > ((size_t)1 << 42))
        return FERRY_EINVAL;
    if (o->max_sample_size > o->pool_bytes)
        o->max_sample_size = o->pool_bytes - FERRY__PAGE;
    if (o->on_pool_exhausted != FERRY_POOL_ERROR && o->on_pool_exhausted != FERRY_POOL_BLOCK)
        return FERRY_EINVAL;
    if (o->pool_bytes < 2 * FERRY__PAGE)
        return FERRY_EINVAL;
    /* By default one subscriber may hold seven eighths of the pool: the rest, at least a chunk,
     * stays for the publisher's next loans and its other subscribers. */
    if (!o->max_chunks_per_subscriber) {
        uint32_t keep = o->max_chunks / 8 > 1 ? o->max_chunks / 8 : 1;
        o->max_chunks_per_subscriber = o->max_chunks > keep ? o->max_chunks - keep : 1;
    }
    if (!o->max_bytes_per_subscriber)
        o->max_bytes_per_subscriber = o->pool_bytes - o->pool_bytes / 8;
    if (o->max_chunks_per_subscriber > o->max_chunks)
        return FERRY_EINVAL;
    return FERRY_OK;
}

static ferry_err check(ferry_publisher *pub)
{
    return ferry__endpoint_check(pub ? &pub->ep : NULL, FERRY__PUB_MAGIC);
}

static void sync_stats(ferry_publisher *pub)
{
    ferry_publisher_stats *s = &pub->stats;
    const ferry__pool *p = &pub->pool;
    s->pool_bytes = p->arena_used;
    s->pool_bytes_cap = p->arena_cap;
    s->chunks_total = p->nchunks;
    s->chunks_free = p->nfree;
    s->chunks_loaned = p->loaned;
    s->chunks_in_use = p->nchunks - p->nfree - p->loaned;
    s->subscribers = pub->nactive;
    s->size_classes = p->nclasses;
}

/* Copies the counters to the status file, for tools; off the hot path. */
static void publish_status(ferry_publisher *pub)
{
    sync_stats(pub);
    *pub->st = pub->stats;
}

/* ---- references --------------------------------------------------------------------------- */

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

static void drop_ref(ferry_publisher *pub, pconn *c, uint32_t index)
{
    bit_clear(c, index);
    c->outstanding--;
    c->outstanding_bytes -= pub->pool.chunks[index].capacity;
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

/* ---- connections -------------------------------------------------------------------------- */

static void conn_close(ferry_publisher *pub, pconn *c, bool lost)
{
    if (c->state == PC_FREE)
        return;
    {
        /* Take back every reference the subscriber had: queued, held, or in flight back. */
        uint32_t reclaimed = 0;
        for (uint32_t w = 0; w < pub->words; w++) {
            while (c->bits[w]) {
                uint32_t i = w * 64 + (uint32_t)__builtin_ctzll(c->bits[w]);
                drop_ref(pub, c, i);
                reclaimed++;
            }
        }
        pub->stats.chunks_reclaimed += lost ? reclaimed : 0;
        pub->stats.subscribers_lost += lost;
        uint16_t slot = (uint16_t)(c - pub->conns);
        for (uint32_t k = 0; k < pub->nactive; k++)
            if (pub->active[k] == slot) {
                pub->active[k] = pub->active[pub->nactive - 1];
                break;
            }
        pub->nactive--;
        pub->nblocking -= c->overflow == FERRY_OVERFLOW_BLOCK;
        ferry__conn_unmap(&c->ring);
        close(c->conn_fd);
        ferry__log_peer(pub->ep.node, &pub->ep.peer_log, lost ? FERRY_LOG_INFO : FERRY_LOG_DEBUG,
                        "%s: subscriber pid %d left, %u chunk references taken back",
                        pub->ep.topic, (int)c->pid, reclaimed);
    }
    ferry__poller_del(pub->ep.epfd, c->sock);
    close(c->sock);
    uint64_t *bits = c->bits;
    uint32_t gen = c->gen + 1;
    memset(c, 0, sizeof *c);
    c->bits = bits;
    c->gen = gen;
    c->state = PC_FREE;
    sync_stats(pub);
}

static void conn_fail(ferry_publisher *pub, pconn *c, const char *why)
{
    pub->stats.protocol_errors++;
    ferry__log_peer(pub->ep.node, &pub->ep.peer_log, FERRY_LOG_WARN,
                    "%s: subscriber pid %d disconnected: %s", pub->ep.topic, (int)c->pid, why);
    conn_close(pub, c, true);
}

/* Frees a pending connection's place, closing its socket. */
static void pending_close(ferry_publisher *pub, pending *p)
{
    if (p->sock < 0)
        return;
    ferry__poller_del(pub->ep.epfd, p->sock);
    close(p->sock);
    p->sock = -1;
    p->gen++;
    pub->npending--;
}

static void pending_drop(ferry_publisher *pub, pending *p, const char *why)
{
    pub->stats.pending_dropped++;
    ferry__log_peer(pub->ep.node, &pub->ep.peer_log, FERRY_LOG_WARN,
                    "%s: connection from pid %d dropped: %s", pub->ep.topic, (int)p->pid, why);
    pending_close(pub, p);
}

static void drain_returns(ferry_publisher *pub, pconn *c)
{
    uint64_t head = atomic_load_explicit(&c->ring.hdr->return_head, memory_order_acquire);
    if (head == c->rtail)
        return;
    if (head - c->rtail > (uint64_t)c->ring.rmask + 1) {
        conn_fail(pub, c, "return ring counter out of range");
        return;
    }
    while (c->rtail != head) {
        uint64_t d = atomic_load_explicit(&c->ring.rslots[c->rtail & c->ring.rmask], memory_order_relaxed);
        if (!desc_valid(pub, c, d)) {
            conn_fail(pub, c, "returned a chunk it did not hold");
            return;
        }
        drop_ref(pub, c, ferry__desc_index(d));
        c->rtail++;
    }
    /* Release: our reads of the slots happen before the subscriber may reuse them. */
    atomic_store_explicit(&c->ring.hdr->return_tail, c->rtail, memory_order_release);
    conn_check(pub, c);
}

/* Loops over the active connections run backwards: a connection that fails is swapped out of
 * the dense list with one already visited. */
static void drain_all_returns(ferry_publisher *pub)
{
    for (uint32_t k = pub->nactive; k-- > 0;)
        drain_returns(pub, &pub->conns[pub->active[k]]);
}

/* Reads the delivery tail and checks it moved only forward and not past head. */
static bool load_tail(ferry_publisher *pub, pconn *c, uint64_t *tail)
{
    uint64_t t = atomic_load_explicit(&c->ring.hdr->deliver_tail, memory_order_acquire);
    if (t - c->tail_seen > c->head - c->tail_seen) {
        conn_fail(pub, c, "delivery ring counter out of range");
        return false;
    }
    c->tail_seen = t;
    *tail = t;
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
    /* Pairs with the subscriber's store of sub_waiting then fence then ring check: one of us
     * sees the other's write. */
    atomic_thread_fence(memory_order_seq_cst);
    if (!atomic_load_explicit(&c->ring.hdr->sub_waiting, memory_order_relaxed))
        return;
    /* The doorbell says how the subscriber sleeps: in ferry_wait on the word itself, or on its
     * notifier (an epoll set of its own or the application's). */
    uint32_t how = atomic_exchange_explicit(&c->ring.hdr->sub_waiting, 0, memory_order_acq_rel);
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

/* Appends a reference to chunk index on c. Returns false when c was dropped. */
static bool deliver(ferry_publisher *pub, pconn *c, uint32_t index, bool wake)
{
    uint64_t tail;
    if (!load_tail(pub, c, &tail))
        return false;
    if (c->head - tail >= c->depth) {
        /* Full: drop the oldest. If the subscriber takes it first our CAS fails and there is
         * room anyway. */
        uint64_t old = atomic_load_explicit(&c->ring.dslots[tail & c->ring.dmask], memory_order_relaxed);
        if (ferry__conn_claim(&c->ring, tail)) {
            c->tail_seen = tail + 1;
            if (!desc_valid(pub, c, old)) {
                conn_fail(pub, c, "delivery ring slot corrupted");
                return false;
            }
            drop_ref(pub, c, ferry__desc_index(old));
            c->dropped++;
            pub->stats.dropped++;
            atomic_store_explicit(&c->ring.hdr->dropped, c->dropped, memory_order_relaxed);
        } else if (!load_tail(pub, c, &tail) || c->head - tail >= c->depth) {
            if (c->state == PC_ACTIVE)
                conn_fail(pub, c, "delivery ring counter out of range");
            return false;
        }
    }
    ferry__chunk *ch = &pub->pool.chunks[index];
    if (c->outstanding >= pub->opt.max_chunks_per_subscriber ||
        ch->capacity > pub->opt.max_bytes_per_subscriber - c->outstanding_bytes) {
        /* At its limit: this subscriber misses the publication, the others do not. */
        c->dropped++;
        pub->stats.dropped++;
        pub->stats.limited++;
        atomic_store_explicit(&c->ring.hdr->dropped, c->dropped, memory_order_relaxed);
        if (!c->limited)
            ferry__log_peer(pub->ep.node, &pub->ep.peer_log,
                            c->limit_told ? FERRY_LOG_DEBUG : FERRY_LOG_WARN,
                            "%s: subscriber pid %d holds %u chunks (%llu bytes), its limit: it "
                            "receives nothing more until it gives some back", pub->ep.topic,
                            (int)c->pid, c->outstanding, (unsigned long long)c->outstanding_bytes);
        c->limited = c->limit_told = true;
        return true;
    }
    c->limited = false;
    atomic_store_explicit(&c->ring.dslots[c->head & c->ring.dmask], ferry__desc(index, ch->gen),
                          memory_order_relaxed);
    c->head++;
    /* Release: the chunk's header and payload, and the slot, are visible before the new head. */
    atomic_store_explicit(&c->ring.hdr->deliver_head, c->head, memory_order_release);
    bit_set(c, index);
    c->outstanding++;
    c->outstanding_bytes += ch->capacity;
    ch->refs++;
    pub->stats.deliveries++;
    conn_check(pub, c);
    if (wake)
        wake_subscriber(c);
    return true;
}

static bool send_attachment(ferry_publisher *pub, pconn *c, const struct attachment *a)
{
    ferry__attach_msg m;
    memset(&m, 0, sizeof m);
    m.magic = FERRY__MSG_MAGIC;
    m.version = FERRY_PROTOCOL_VERSION;
    m.kind = FERRY__MSG_ATTACH;
    m.key = a->key;
    m.nfds = (uint32_t)a->nfds;
    if (ferry__send_msg(c->sock, &m, sizeof m, a->fds, a->nfds) == 0)
        return true;
    int e = errno;
    ferry__log(pub->ep.node, FERRY_LOG_WARN, "%s: attachment to pid %d failed: %s", pub->ep.topic,
               (int)c->pid, strerror(e));
    /* A reset or broken connection is a subscriber that died: its chunks are reclaimed. */
    conn_close(pub, c, e == EPIPE || e == ECONNRESET);
    return false;
}

/* Refuses a pending connection with a welcome that says why (the refused subscriber prints
 * it), then closes it. */
static void reject(ferry_publisher *pub, pending *p, ferry_err status, const char *why)
{
    ferry__welcome w;
    memset(&w, 0, sizeof w);
    w.magic = FERRY__MSG_MAGIC;
    w.version = FERRY_PROTOCOL_VERSION;
    w.kind = FERRY__MSG_WELCOME;
    w.status = (int32_t)status;
    w.pid = (int32_t)getpid();
    w.publisher_id = pub->ep.id;
    w.type_hash = pub->ep.type_hash;
    memcpy(w.type_name, pub->ep.type_name, sizeof w.type_name);
    snprintf(w.reason, sizeof w.reason, "%s", why);
    ferry__send_msg(p->sock, &w, sizeof w, NULL, 0);
    pub->stats.rejected++;
    ferry__log_peer(pub->ep.node, &pub->ep.peer_log, FERRY_LOG_WARN, "%s: refused subscriber pid %d: %s",
                    pub->ep.topic, (int)p->pid, why);
    pending_close(pub, p);
}

static pconn *free_conn(ferry_publisher *pub)
{
    for (uint32_t i = 0; i < pub->opt.max_subscribers; i++)
        if (pub->conns[i].state == PC_FREE)
            return &pub->conns[i];
    return NULL;
}

/* Reads the hello of a pending connection and admits the subscriber, or refuses it. */
static void handshake(ferry_publisher *pub, pending *p)
{
    union {
        ferry__hello h;
        char raw[sizeof(ferry__hello) + 1];
    } buf;
    int fds[1];
    int nfds = 1;
    ssize_t n = ferry__recv_msg(p->sock, buf.raw, sizeof buf.raw, fds, &nfds);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return;
    /* A hello carries no descriptor: whatever came is closed unused. */
    for (int i = 0; i < nfds; i++)
        close(fds[i]);
    if (n <= 0) {
        if (n < 0)
            ferry__log_peer(pub->ep.node, &pub->ep.peer_log, FERRY_LOG_WARN,
                            "%s: hello from pid %d lost: %s", pub->ep.topic, (int)p->pid,
                            strerror(errno));
        pending_close(pub, p);
        return;
    }
    ferry__hello hello;
    if (ferry__hello_decode(buf.raw, (size_t)n, &hello) != FERRY_OK || nfds != 0) {
        pub->stats.protocol_errors++;
        reject(pub, p, FERRY_EPROTO,
               nfds ? "malformed hello (it carries a descriptor)" : "malformed hello");
        return;
    }
    if (strcmp(hello.topic, pub->ep.topic) != 0) {
        reject(pub, p, FERRY_EPROTO, "hello for another topic");
        return;
    }
    char why[FERRY__REASON_MAX];
    if (hello.type_hash != pub->ep.type_hash || strcmp(hello.type_name, pub->ep.type_name) != 0) {
        snprintf(why, sizeof why, "type mismatch (it has %.48s/%016llx, the topic has %.48s/%016llx)",
                 hello.type_name, (unsigned long long)hello.type_hash, pub->ep.type_name,
                 (unsigned long long)pub->ep.type_hash);
        reject(pub, p, FERRY_ETYPE, why);
        return;
    }
    if (hello.overflow == FERRY_OVERFLOW_BLOCK && !pub->opt.admit_blocking) {
        reject(pub, p, FERRY_EPERM,
               "the publisher does not admit blocking subscribers (FERRY_OVERFLOW_BLOCK)");
        return;
    }
    pconn *c = free_conn(pub);
    if (!c) {
        snprintf(why, sizeof why, "publisher at its limit of %u subscribers",
                 pub->opt.max_subscribers);
        reject(pub, p, FERRY_ELIMIT, why);
        return;
    }

    /* A subscriber that asks for history gets a queue deep enough to hold it. */
    uint32_t depth = hello.depth > hello.history ? hello.depth : hello.history;
    ferry__conn ring;
    int fd = ferry__conn_create(&ring, depth, pub->opt.max_chunks);
    if (fd < 0) {
        int e = errno;
        ferry__log(pub->ep.node, FERRY_LOG_ERROR, "%s: connection segment: %s", pub->ep.topic,
                   strerror(e));
        bool memory = e == ENOMEM || e == ENOSPC;
        reject(pub, p, memory ? FERRY_ENOMEM : FERRY_ESYS,
               memory ? "no memory for the connection segment"
                      : "no descriptor for the connection segment");
        return;
    }

    ferry__welcome w;
    memset(&w, 0, sizeof w);
    w.magic = FERRY__MSG_MAGIC;
    w.version = FERRY_PROTOCOL_VERSION;
    w.kind = FERRY__MSG_WELCOME;
    w.status = FERRY_OK;
    w.pid = (int32_t)getpid();
    w.publisher_id = pub->ep.id;
    w.type_hash = pub->ep.type_hash;
    w.data_size = pub->pool.size;
    w.table_offset = (uint64_t)((uint8_t *)pub->pool.table - pub->pool.base);
    w.arena_offset = pub->pool.arena_offset;
    w.payload_offset = pub->pool.payload_offset;
    w.conn_size = ring.size;
    w.max_chunks = pub->opt.max_chunks;
    w.depth = depth;
    w.deliver_capacity = ring.dmask + 1;
    w.return_capacity = ring.rmask + 1;
    memcpy(w.type_name, pub->ep.type_name, sizeof w.type_name);

    /* The socket moves from its pending place to the connection's. */
    uint32_t slot = (uint32_t)(c - pub->conns);
    int sock = p->sock;
    int32_t pid = p->pid;
    ferry__poller_del(pub->ep.epfd, sock);
    p->sock = -1;
    p->gen++;
    pub->npending--;
    c->sock = sock;
    c->pid = pid;
    c->since = ferry__clock_ns();
    c->conn_fd = fd;
    c->ring = ring;
    c->depth = depth;
    c->overflow = (uint8_t)hello.overflow;
    c->sub_id = hello.subscriber_id;
    c->state = PC_ACTIVE;
    pub->active[pub->nactive++] = (uint16_t)slot;
    pub->nblocking += c->overflow == FERRY_OVERFLOW_BLOCK;
    if (ferry__poller_add(pub->ep.epfd, sock, ferry__tag(FERRY__TAG_CONN, slot, c->gen)) != 0) {
        conn_close(pub, c, false);
        return;
    }

    int send_fds[2] = {pub->pool.ro_fd, fd};
    if (ferry__send_msg(c->sock, &w, sizeof w, send_fds, 2) != 0) {
        ferry__log_peer(pub->ep.node, &pub->ep.peer_log, FERRY_LOG_WARN,
                        "%s: welcome to pid %d failed: %s", pub->ep.topic, (int)c->pid,
                        strerror(errno));
        conn_close(pub, c, false);
        return;
    }
    /* Attachments before any sample: a sample may refer to them. */
    for (uint32_t k = 0; k < pub->nattachments; k++)
        if (!send_attachment(pub, c, &pub->attachments[k]))
            return;
    /* Late joiner: the last samples, oldest first. */
    uint32_t want = hello.history < pub->hist_len ? hello.history : pub->hist_len;
    for (uint32_t k = 0; k < want; k++) {
        uint32_t pos = (pub->hist_head + pub->opt.history - want + k) % pub->opt.history;
        if (!deliver(pub, c, pub->history[pos], k + 1 == want))
            return;
    }
    ferry__log(pub->ep.node, FERRY_LOG_DEBUG, "%s: subscriber pid %d connected", pub->ep.topic,
               (int)c->pid);
    sync_stats(pub);
}

/* A place for a new pending connection: a free one, else the oldest is dropped for it. */
static pending *pending_place(ferry_publisher *pub)
{
    pending *oldest = NULL;
    for (uint32_t i = 0; i < pub->opt.max_pending; i++) {
        pending *p = &pub->pending[i];
        if (p->sock < 0)
            return p;
        if (!oldest || p->since < oldest->since)
            oldest = p;
    }
    pending_drop(pub, oldest, "no hello yet, and its place went to a newer connection");
    return oldest;
}

static void accept_all(ferry_publisher *pub)
{
    for (int k = 0; k < 16; k++) {
        int fd = ferry__accept(pub->listen_fd);
        if (fd < 0)
            return;
        pid_t pid = 0;
        uid_t uid = 0;
        gid_t gid = 0;
        if (ferry__peer_cred(fd, &pid, &uid, &gid) != 0 ||
            !ferry__node_peer_allowed(pub->ep.node, fd, uid)) {
            pub->stats.rejected++;
            ferry__log_peer(pub->ep.node, &pub->ep.peer_log, FERRY_LOG_WARN,
                            "%s: refused connection from pid %d uid %u: not allowed",
                            pub->ep.topic, (int)pid, (unsigned)uid);
            close(fd);
            continue;
        }
        pending *p = pending_place(pub);
        uint32_t slot = (uint32_t)(p - pub->pending);
        p->sock = fd;
        p->pid = (int32_t)pid;
        p->since = ferry__clock_ns();
        pub->npending++;
        if (ferry__poller_add(pub->ep.epfd, fd, ferry__tag(FERRY__TAG_PENDING, slot, p->gen)) != 0) {
            pending_close(pub, p);
            continue;
        }
        handshake(pub, p); /* the hello is usually there already */
    }
}

/* Reads what an active subscriber sent: wake-ups and, last, its goodbye; a hang-up without one
 * is a death. */
static void read_messages(ferry_publisher *pub, pconn *c, bool hup)
{
    for (int k = 0; k <= FERRY__WAKE_FLOOD; k++) {
        ferry__bye m;
        int nfds = 0;
        ssize_t got = ferry__recv_msg(c->sock, &m, sizeof m, NULL, &nfds);
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (hup)
                conn_close(pub, c, true);
            return;
        }
        if (got <= 0) {
            conn_close(pub, c, true);
            return;
        }
        uint32_t kind = ferry__ctl_decode(&m, (size_t)got);
        if (kind == FERRY__MSG_BYE) {
            conn_close(pub, c, false);
            return;
        }
        if (kind != FERRY__MSG_WAKE) {
            conn_fail(pub, c, "unexpected message");
            return;
        }
    }
    conn_fail(pub, c, "a flood of wake-ups");
}

static void housekeep(ferry_publisher *pub, int64_t timeout_ns)
{
    ferry__event ev[16];
    int n = ferry__poller_wait(pub->ep.epfd, ev, 16, timeout_ns);
    for (int i = 0; i < n; i++) {
        unsigned kind = ferry__tag_kind(ev[i].tag);
        uint32_t slot = ferry__tag_slot(ev[i].tag);
        if (kind == FERRY__TAG_LISTEN) {
            accept_all(pub);
        } else if (kind == FERRY__TAG_PENDING) {
            if (slot >= pub->opt.max_pending)
                continue;
            pending *p = &pub->pending[slot];
            if (p->sock >= 0 && p->gen == ferry__tag_gen(ev[i].tag))
                handshake(pub, p);
        } else if (kind == FERRY__TAG_CONN) {
            if (slot >= pub->opt.max_subscribers)
                continue;
            pconn *c = &pub->conns[slot];
            if (c->state == PC_ACTIVE && c->gen == ferry__tag_gen(ev[i].tag))
                read_messages(pub, c, ev[i].hup || ev[i].err);
        }
    }
    if (pub->npending > 0) {
        int64_t now = ferry__clock_ns();
        for (uint32_t i = 0; i < pub->opt.max_pending; i++) {
            pending *p = &pub->pending[i];
            if (p->sock >= 0 && now - p->since > HELLO_TIMEOUT_NS)
                pending_drop(pub, p, "no hello within a second");
        }
    }
    drain_all_returns(pub);
    publish_status(pub);
    pub->next_housekeep = ferry__clock_ns() + FERRY__PUB_HOUSEKEEP_NS;
}

static void housekeep_maybe(ferry_publisher *pub)
{
    if (ferry__clock_ns() >= pub->next_housekeep)
        housekeep(pub, 0);
}

/* Asks every subscriber to signal our notifier when it takes or returns, then sleeps at most
 * until deadline. */
static void sleep_for_subscribers(ferry_publisher *pub, int64_t deadline)
{
    for (uint32_t k = 0; k < pub->nactive; k++)
        atomic_store_explicit(&pub->conns[pub->active[k]].ring.hdr->pub_waiting, 1,
                              memory_order_relaxed);
    /* Pairs with the subscriber's fence after its take or return. */
    atomic_thread_fence(memory_order_seq_cst);
    drain_all_returns(pub);
    int64_t left = ferry__remaining(deadline);
    /* Bound each sleep so a subscriber that missed the doorbell cannot stall us. */
    if (left < 0 || left > 10000000)
        left = 10000000;
    housekeep(pub, left);
}

/* ---- public API --------------------------------------------------------------------------- */

ferry_err ferry_publisher_create(ferry_publisher **out, ferry_node *node, const char *topic,
                                 const char *type_name, uint64_t type_hash,
                                 const ferry_publisher_options *options)
{
    if (!out || !topic || !type_name)
        return FERRY_EINVAL;
    ferry_err err = ferry__node_check(node);
    if (err)
        return err;
    ferry_publisher_options o;
    if (options)
        o = *options;
    else
        ferry_publisher_options_init(&o);
    if ((err = options_resolve(&o)))
        return err;

    ferry_publisher *pub = calloc(1, sizeof *pub);
    if (!pub)
        return FERRY_ENOMEM;
    pub->opt = o;
    pub->listen_fd = -1;
    pub->pool.fd = pub->pool.ro_fd = -1;
    if ((err = ferry__endpoint_open(&pub->ep, node, topic, type_name, type_hash)))
        goto fail;
    pub->words = (o.max_chunks + 63) / 64;
    pub->conns = calloc(o.max_subscribers, sizeof *pub->conns);
    pub->pending = calloc(o.max_pending, sizeof *pub->pending);
    pub->active = calloc(o.max_subscribers, sizeof *pub->active);
    pub->bits = calloc((size_t)o.max_subscribers * pub->words, sizeof *pub->bits);
    pub->history = o.history ? calloc(o.history, sizeof *pub->history) : NULL;
    if (!pub->conns || !pub->pending || !pub->active || !pub->bits ||
        (o.history && !pub->history)) {
        err = FERRY_ENOMEM;
        goto fail;
    }
    for (uint32_t i = 0; i < o.max_pending; i++)
        pub->pending[i].sock = -1;
    for (uint32_t i = 0; i < o.max_subscribers; i++)
        pub->conns[i].bits = pub->bits + (size_t)i * pub->words;

    if ((err = ferry__pool_init(&pub->pool, pub->ep.id, o.pool_bytes, o.max_chunks,
                                o.max_sample_size, o.payload_align)))
        goto fail;

    ferry__status init;
    ferry__endpoint_status_init(&pub->ep, FERRY_ENDPOINT_PUBLISHER, &init);
    init.pub.id = pub->ep.id;
    if ((err = ferry__endpoint_publish_status(&pub->ep, "pub", &init)))
        goto fail;
    pub->st = &pub->ep.status.map->pub;
    pub->stats.id = pub->ep.id;
    publish_status(pub);

    char tmp[80];
    snprintf(pub->sock_name, sizeof pub->sock_name, "pub.%016llx.sock",
             (unsigned long long)pub->ep.id);
    snprintf(tmp, sizeof tmp, ".%s.tmp", pub->sock_name);
    err = FERRY_ESYS;
    pub->listen_fd = ferry__listen_at(pub->ep.dirfd, pub->sock_name, tmp,
                                     ferry__node_file_mode(node, true));
    if (pub->listen_fd < 0)
        goto fail;
    if (ferry__poller_add(pub->ep.epfd, pub->listen_fd, ferry__tag(FERRY__TAG_LISTEN, 0, 0)) != 0)
        goto fail;
    if ((err = ferry__node_adopt(node, &pub->ep.obj, FERRY__PUB_MAGIC)))
        goto fail;
    *out = pub;
    return FERRY_OK;
fail: {
    int e = errno;
    if (pub->listen_fd >= 0) {
        unlinkat(pub->ep.dirfd, pub->sock_name, 0);
        close(pub->listen_fd);
    }
    ferry__endpoint_close(&pub->ep);
    ferry__pool_fini(&pub->pool);
    free(pub->conns);
    free(pub->pending);
    free(pub->active);
    free(pub->bits);
    free(pub->history);
    free(pub);
    errno = e;
    return err;
}
}

ferry_err ferry__publisher_attach(ferry_publisher *pub, uint64_t key, const int *fds, int nfds)
{
    ferry_err err = check(pub);
    if (err)
        return err;
    if (!fds || nfds < 1 || nfds > FERRY__ATTACH_FDS)
        return FERRY_EINVAL;
    if (pub->nattachments == FERRY__ATTACH_MAX)
        return FERRY_ELIMIT;
    struct attachment *a = &pub->attachments[pub->nattachments];
    a->key = key;
    a->nfds = 0;
    for (int i = 0; i < nfds; i++) {
        a->fds[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 0);
        if (a->fds[i] < 0) {
            for (int j = 0; j < i; j++)
                close(a->fds[j]);
            return FERRY_ESYS;
        }
        a->nfds++;
    }
    pub->nattachments++;
    for (uint32_t k = pub->nactive; k-- > 0;)
        send_attachment(pub, &pub->conns[pub->active[k]], a);
    return FERRY_OK;
}

ferry_err ferry__publisher_detach(ferry_publisher *pub, uint64_t key)
{
    ferry_err err = check(pub);
    if (err)
        return err;
    for (uint32_t k = 0; k < pub->nattachments; k++) {
        struct attachment *a = &pub->attachments[k];
        if (a->key != key)
            continue;
        for (int i = 0; i < a->nfds; i++)
            close(a->fds[i]);
        pub->attachments[k] = pub->attachments[--pub->nattachments];
        struct attachment none = {.key = key, .nfds = 0};
        for (uint32_t j = pub->nactive; j-- > 0;)
            send_attachment(pub, &pub->conns[pub->active[j]], &none);
        return FERRY_OK;
    }
    return FERRY_ESTATE;
}

ferry_err ferry_publisher_destroy(ferry_publisher *pub)
{
    ferry_err err = check(pub);
    if (err)
        return err;
    for (uint32_t k = 0; k < pub->nattachments; k++)
        for (int i = 0; i < pub->attachments[k].nfds; i++)
            close(pub->attachments[k].fds[i]);
    /* The socket goes first, so no subscriber connects to a publisher on its way out. */
    unlinkat(pub->ep.dirfd, pub->sock_name, 0);
    close(pub->listen_fd);
    for (uint32_t i = 0; i < pub->opt.max_subscribers; i++)
        conn_close(pub, &pub->conns[i], false);
    for (uint32_t i = 0; i < pub->opt.max_pending; i++)
        pending_close(pub, &pub->pending[i]);
    ferry__endpoint_close(&pub->ep);
    ferry__pool_fini(&pub->pool);
    free(pub->conns);
    free(pub->pending);
    free(pub->active);
    free(pub->bits);
    free(pub->history);
    pub->conns = NULL;
    pub->pending = NULL;
    pub->active = NULL;
    pub->bits = NULL;
    pub->history = NULL;
    ferry__node_bury(pub->ep.node, &pub->ep.obj);
    return FERRY_OK;
}

ferry_err ferry_loan(ferry_publisher *pub, size_t size, void **payload)
{
    ferry_err err = check(pub);
    if (err)
        return err;
    if (!payload || size == 0)
        return FERRY_EINVAL;
    if (size > pub->opt.max_sample_size)
        return FERRY_ETOOBIG;
    if (pub->inactive) {
        ferry__log(pub->ep.node, FERRY_LOG_DEBUG, "%s: loan refused: the publisher's lifecycle is "
                   "not active", pub->ep.topic);
        return FERRY_ESTATE;
    }
    drain_all_returns(pub);
    uint32_t index = ferry__pool_get(&pub->pool, size, &err);
    if (index == FERRY__NONE) {
        /* Housekeeping may find a dead subscriber whose chunks come back. */
        housekeep(pub, 0);
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
        while (index == FERRY__NONE && err == FERRY_EPOOL) {
            if (ferry__remaining(deadline) == 0) {
                err = FERRY_ETIMEDOUT;
                break;
            }
            sleep_for_subscribers(pub, deadline);
            index = ferry__pool_get(&pub->pool, size, &err);
        }
    }
    if (index == FERRY__NONE) {
        sync_stats(pub);
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
    ferry_err err = check(pub);
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

/* Waits until every subscriber that blocks the publisher has room in its queue. */
static ferry_err wait_for_room(ferry_publisher *pub)
{
    int64_t deadline = 0;
    while (pub->nblocking > 0) {
        bool full = false;
        for (uint32_t k = pub->nactive; k-- > 0 && !full;) {
            pconn *c = &pub->conns[pub->active[k]];
            uint64_t tail;
            if (c->overflow == FERRY_OVERFLOW_BLOCK && !paused(c) && load_tail(pub, c, &tail) &&
                c->head - tail >= c->depth)
                full = true;
        }
        if (!full)
            return FERRY_OK;
        if (!deadline)
            deadline = ferry__deadline(pub->opt.block_timeout_ns);
        else if (ferry__remaining(deadline) == 0)
            return FERRY_ETIMEDOUT;
        sleep_for_subscribers(pub, deadline);
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
        ferry__log(pub->ep.node, FERRY_LOG_DEBUG, "%s: publication refused: the publisher's "
                   "lifecycle is not active (the loan is still yours)", pub->ep.topic);
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
    h->publish_ns = ferry__clock_ns();
    ch->state = FERRY__CHUNK_PUBLISHED;
    ch->refs = 0;
    pub->pool.loaned--;
    for (uint32_t k = pub->nactive; k-- > 0;) {
        pconn *c = &pub->conns[pub->active[k]];
        if (!paused(c))
            deliver(pub, c, index, true);
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
     * sit between a frame and its subscribers. */
    publish_status(pub);
    housekeep_maybe(pub);
    return FERRY_OK;
}

ferry_err ferry_publisher_reserve(ferry_publisher *pub, size_t size, uint32_t count)
{
    ferry_err err = check(pub);
    if (err)
        return err;
    if (size == 0 || count == 0)
        return FERRY_EINVAL;
    if (size > pub->opt.max_sample_size) {
        ferry__log(pub->ep.node, FERRY_LOG_WARN, "%s: reserve of %zu-byte samples refused: "
                   "max_sample_size is %zu", pub->ep.topic, size, pub->opt.max_sample_size);
        return FERRY_ETOOBIG;
    }
    ferry__pool *p = &pub->pool;
    uint64_t chunk = 0;
    err = ferry__pool_reserve(p, size, count, &chunk);
    if (err == FERRY_EPOOL)
        ferry__log(pub->ep.node, FERRY_LOG_WARN,
                   "%s: reserve of %u chunks of %llu bytes (for %zu-byte samples) refused: the "
                   "pool holds %u of max_chunks %u and %llu of pool_bytes %llu in %u of %u size "
                   "classes", pub->ep.topic, count, (unsigned long long)chunk, size, p->nchunks,
                   p->max_chunks, (unsigned long long)p->arena_used,
                   (unsigned long long)p->arena_cap, p->nclasses, FERRY__MAX_CLASSES);
    else if (err)
        ferry__log(pub->ep.node, FERRY_LOG_WARN, "%s: reserve of %u chunks of %llu bytes: %s",
                   pub->ep.topic, count, (unsigned long long)chunk, ferry_strerror(err));
    sync_stats(pub);
    return err;
}

ferry_err ferry__publisher_set_active(ferry_publisher *pub, bool active)
{
    ferry_err err = check(pub);
    if (err)
        return err;
    pub->inactive = !active;
    return FERRY_OK;
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
    ferry_err err = check(pub);
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

ferry_err ferry_publisher_poll(ferry_publisher *pub, int64_t timeout_ns)
{
    ferry_err err = check(pub);
    if (err)
        return err;
    housekeep(pub, timeout_ns);
    sync_stats(pub);
    return FERRY_OK;
}

ferry_err ferry_publisher_wait_subscribers(ferry_publisher *pub, uint32_t count,
                                           int64_t timeout_ns)
{
    ferry_err err = check(pub);
    if (err)
        return err;
    int64_t deadline = ferry__deadline(timeout_ns);
    housekeep(pub, 0);
    while (pub->nactive < count) {
        int64_t left = ferry__remaining(deadline);
        if (left == 0)
            return FERRY_ETIMEDOUT;
        housekeep(pub, left);
    }
    sync_stats(pub);
    return FERRY_OK;
}

ferry_err ferry_publisher_fd(ferry_publisher *pub, int *fd)
{
    ferry_err err = check(pub);
    if (err)
        return err;
    if (!fd)
        return FERRY_EINVAL;
    *fd = pub->ep.epfd;
    return FERRY_OK;
}

ferry_err ferry_publisher_stats_get(ferry_publisher *pub, ferry_publisher_stats *out)
{
    ferry_err err = check(pub);
    if (err)
        return err;
    if (!out)
        return FERRY_EINVAL;
    drain_all_returns(pub);
    publish_status(pub);
    *out = pub->stats;
    return FERRY_OK;
}
