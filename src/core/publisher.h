/*
 * The publisher's private parts, shared by its three files: publisher.c (creation, options,
 * attachments, destruction and the calls that report), publisher_control.c (the control plane:
 * pending connections, handshakes, welcomes, goodbyes, housekeeping) and publisher_data.c (the
 * data path: loans, publication, delivery, returns and the references behind them).
 *
 * A publisher owns a pool (its data segment) and one connection segment per subscriber. Every
 * chunk reference handed to a subscriber is recorded privately, in a bit per chunk per
 * connection, so the publisher alone decides when a chunk is free: when its last reference comes
 * back through a return ring, is dropped from a full delivery ring, or is taken back because the
 * subscriber hung up (its socket closed: exit, crash or SIGKILL alike). Nothing the subscriber
 * writes is trusted: returns of chunks it does not hold, counters that run backwards or past the
 * head, and malformed messages disconnect it.
 *
 * Single-threaded per publisher: the caller serialises.
 */
#ifndef FERRY_PUBLISHER_H
#define FERRY_PUBLISHER_H

#include "core/core.h"

enum { PC_FREE = 0, PC_ACTIVE = 2 };

/* An accepted connection waiting for its hello. Pending connections have places of their own
 * (max_pending), apart from the admitted subscribers, so that connections that never speak
 * cannot lock newcomers out. */
typedef struct pending {
    int sock; /* -1 when the place is free */
    uint32_t gen;
    int32_t pid;
    uint32_t uid;
    int64_t since;
} pending;

/* What one peer holds, all its connections together: the per-subscriber limits apply to it, so
 * that a process cannot multiply its share by connecting again. A peer is a process of this
 * publisher's user, or every process of another user (a member of the share group), since
 * processes are cheap to make. Places are the connections': at most one each. */
typedef struct peer_share {
    uint64_t key; /* peer_key(); meaningful while conns > 0 */
    uint32_t conns;
    uint32_t outstanding;
    uint64_t outstanding_bytes; /* capacities of those chunks */
} peer_share;

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
    uint32_t share;             /* its peer's place in the publisher's shares */
    bool limited;               /* at its per-subscriber limit at the last publication */
    bool limit_told;            /* the log said so once: later times are counted, not logged */
    bool later;                 /* background, not paused: served in ferry_publish's second pass */
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
    peer_share *shares; /* max_subscribers places */
    pending *pending;
    uint32_t npending;
    uint16_t *active;   /* slots of the active connections, dense: hot loops touch only these */
    uint32_t nblocking; /* active connections whose subscriber blocks the publisher */
    uint64_t *bits;     /* max_subscribers * words_per_conn */
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
    /* Housekeeping late enough to run after a publication leaves the directory sweep to the
     * next loan; see ferry__pub_housekeep_maybe. */
    bool publishing;
    ferry__spin spin; /* the blocking waits' spin before they sleep */
};

/* ---- control plane (publisher_control.c) ---------------------------------------------------- */

/* Ends a connection and takes back every reference its subscriber had; lost counts it as a
 * subscriber that died (no goodbye). */
void ferry__pub_conn_close(ferry_publisher *pub, pconn *c, bool lost);
/* A subscriber that broke the rules: counted, logged (why) and disconnected. */
void ferry__pub_conn_fail(ferry_publisher *pub, pconn *c, const char *why);
/* Frees a pending connection's place, closing its socket. */
void ferry__pub_pending_close(ferry_publisher *pub, pending *p);
/* The FERRY_QOS_* policies pub offers: reliability unless best_effort, durability with history. */
static inline uint32_t ferry__pub_offered(const ferry_publisher *pub)
{
    return (pub->opt.best_effort ? 0u : (uint32_t)FERRY_QOS_RELIABLE) |
           (pub->opt.history ? (uint32_t)FERRY_QOS_DURABLE : 0u);
}
/* Sends one attachment; false when the connection failed and was closed. */
bool ferry__pub_send_attachment(ferry_publisher *pub, pconn *c, const struct attachment *a);
/* Accepts, handshakes, reads goodbyes and wake-ups for at most timeout_ns, then drains returns
 * and refreshes the status file. */
void ferry__pub_housekeep(ferry_publisher *pub, int64_t timeout_ns);
/* Asks every subscriber to signal when it takes or returns, then sleeps at most until deadline. */
void ferry__pub_sleep_for_subscribers(ferry_publisher *pub, int64_t deadline, bool for_room);

/* ---- data path (publisher_data.c) ----------------------------------------------------------- */

/* Drops connection c's reference to chunk index. */
void ferry__pub_drop_ref(ferry_publisher *pub, pconn *c, uint32_t index);
/* Takes in what every active subscriber gave back. */
void ferry__pub_drain_all_returns(ferry_publisher *pub);
/* Appends a reference to chunk index on c, waking its subscriber when asked. Returns false when
 * c was dropped. */
bool ferry__pub_deliver(ferry_publisher *pub, pconn *c, uint32_t index, bool wake);

/* ---- small helpers of all three ------------------------------------------------------------- */

static inline ferry_err ferry__pub_check(ferry_publisher *pub)
{
    return ferry__endpoint_check(pub ? &pub->ep : NULL, FERRY__PUB_MAGIC);
}

static inline void ferry__pub_sync_stats(ferry_publisher *pub)
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
    s->huge_pages = p->huge;
    s->huge_bytes = p->huge_bytes;
    ferry__spin_stats(&pub->spin, &s->spin);
}

/* Copies the counters to the status file, for tools; off the hot path. */
static inline void ferry__pub_publish_status(ferry_publisher *pub)
{
    ferry__pub_sync_stats(pub);
    *pub->st = pub->stats;
}

/* Housekeeping comes with loans, when due (now: the clock of the call): after a publication its
 * system calls would run while the subscribers just woken may wait for this CPU (unpinned, often
 * placed on it), and delay them. A publisher that goes on publishing without loaning (loans made
 * long before) gets it after a publication once it is FERRY__PUB_HOUSEKEEP_LATE_NS overdue, with
 * the directory sweep left to its next loan. */
static inline void ferry__pub_housekeep_maybe(ferry_publisher *pub, int64_t now, bool publishing)
{
    int64_t late = publishing ? FERRY__PUB_HOUSEKEEP_LATE_NS : 0;
    if (now < pub->next_housekeep + late)
        return;
    pub->publishing = publishing;
    ferry__pub_housekeep(pub, 0);
    pub->publishing = false;
}

#endif
