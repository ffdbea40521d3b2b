/*
 * The subscriber's private parts, shared by its three files: subscriber.c (creation, options,
 * destruction, the calls that report and the hooks of the layers above), subscriber_control.c
 * (the control plane: finding publishers in the topic directory through a directory watch and a
 * bounded rescan, connecting, the welcome and its segments, attachments, goodbyes and
 * housekeeping) and subscriber_data.c (the data path: taking samples from each publisher's
 * delivery ring, giving them back, doorbells and waiting).
 *
 * Everything a publisher wrote is checked before use: ring counters, descriptors, the chunk table
 * and chunk headers are read once into locals and range-checked against the geometry received at
 * connect (itself checked against the sizes of the segments received). A publisher that breaks
 * the rules is disconnected; samples already taken from it stay readable.
 *
 * Single-threaded per subscriber: the caller serialises.
 */
#ifndef FERRY_SUBSCRIBER_H
#define FERRY_SUBSCRIBER_H

#include "core/core.h"

/* SC_QUEUED: the publisher's listen backlog was full (a publisher that accepts only in its
 * housekeeping, or one flooded with connections); no socket yet, the connect is tried again at
 * each housekeeping. SC_PENDING: connected, our hello sent, its welcome awaited. */
enum { SC_FREE = 0, SC_PENDING = 1, SC_ACTIVE = 2, SC_GONE = 3, SC_QUEUED = 4 };
#define REFUSED_MAX 16 /* publishers remembered as refused or silent */

/* A publisher not to connect to: one that refused us (type, permission, protocol) or that we
 * refused, for good; one that read our hello and never answered, until retry_at, after a
 * back-off that doubles while it stays silent (subscriber_control.c). */
typedef struct refusal {
    char name[64];    /* its socket file; "" for a free place */
    int64_t retry_at; /* 0: for good */
    int64_t backoff;  /* the wait before the next try, for a silent one */
} refusal;
/* Wake-ups a subscriber may owe its publisher at once. A fast stream sets and fires its doorbell
 * thousands of times between two housekeeping passes, and a wake-up that was still on its way
 * when the doorbell was set again is read only there: the bound must allow them all. It bounds
 * only how long a peer may send wake-ups nobody asked for before it counts as a flood; each
 * costs the subscriber one read. */
#define WAKE_CREDIT_MAX 65536u

typedef struct sconn {
    int state;
    uint32_t gen;
    int sock;
    char name[64]; /* the publisher's socket file */
    uint64_t pub_id;
    int32_t pid;
    int64_t since;
    int64_t first_try; /* the first connect to this publisher, for what a stuck one logs */
    bool told;         /* a stuck handshake was logged */
    const uint8_t *data;
    uint64_t data_size;
    ferry__conn ring;
    uint32_t max_chunks;
    uint64_t table_offset, arena_offset, payload_offset;
    uint64_t rhead;      /* private copy of return_head */
    uint64_t rtail_seen; /* the publisher's return_tail as last seen */
    uint64_t *held_bits;
    uint64_t *seen_bits; /* chunks whose pages are populated here (prefault), in held_bits' block */
    uint64_t *backed_bits; /* chunks whose pages were found allocated, in held_bits' block */
    int data_fd;           /* the data segment, kept to look for holes (ferry__fd_backed) */
    uint32_t held;
    uint32_t armed; /* doorbell value we last set, 0 when none */
    /* Wake-ups the publisher may have sent: one per notifier doorbell we set (up to
     * WAKE_CREDIT_MAX), less those read. More than FERRY__WAKE_FLOOD beyond them is a flood. */
    uint32_t wake_credit;
    struct attachment {
        uint64_t key;
        int fds[FERRY__ATTACH_FDS];
        int nfds;
    } * attachments; /* allocated at the first one */
    uint32_t nattachments;
} sconn;

struct ferry_subscriber {
    ferry__endpoint ep;
    uint64_t cookie;
    ferry_subscriber_options opt;
    int watch_fd;
    ferry_subscriber_stats *st; /* in the status file; written by publish_status only */
    ferry_subscriber_stats stats;
    sconn *conns;
    uint16_t *live; /* slots of connections that may hold queued samples (active or gone) */
    uint32_t nlive;
    uint32_t nconns, nactive;
    uint32_t nqueued; /* connections in SC_QUEUED */
    uint32_t held;
    uint64_t dropped_closed;
    refusal refused[REFUSED_MAX];
    uint32_t refused_next;
    bool rescan;
    bool no_futexv; /* the kernel lacks futex_waitv: with 2+ connections, sleep on the notifier */
    /* ferry_subscriber_fd handed the descriptor out: a take that finds nothing sets the notifier
     * doorbells, so that it fires on the next sample. Until then nobody can wait on it, and
     * doorbells stay clear while the subscriber spins or polls: publishers make no system call
     * for it. */
    bool fd_given;
    bool untyped;      /* created without a type: adopts the first publisher's (ep.type_name "") */
    bool type_refused; /* a publisher of another type refused us, or we it */
    ferry__spin spin;  /* ferry_wait's spin before it sleeps */
    ferry__pace pace; /* the anticipation of a steady stream's next sample (ferry_wait, fd loops) */
    bool take_empty;  /* the last take found nothing: the next that finds a sample saw it come */
    bool paused;      /* lifecycle not active: publishers skip us, stragglers are given back */
    uint64_t discarded; /* queued samples given back unread while paused */
    int64_t next_rescan;
    int64_t next_housekeep;
    int64_t busy_since; /* the queue was last seen empty (or busy housekeeping ran) then */
    void *waitset;
    struct {
        ferry__close_hook fn;
        void *arg;
    } hooks[FERRY__CLOSE_HOOKS];
};

/* ---- control plane (subscriber_control.c) --------------------------------------------------- */

/* Frees a connection's place: close hooks told, mappings, socket and attachments let go. */
void ferry__sub_conn_close(ferry_subscriber *sub, sconn *c);
/* A publisher that broke the rules: counted, logged (why) and disconnected; samples taken from
 * it stay readable. */
void ferry__sub_conn_fail(ferry_subscriber *sub, sconn *c, const char *why);
/* Connects to every publisher of the topic directory not known yet. */
void ferry__sub_scan(ferry_subscriber *sub);
/* Reads at most max messages an active publisher sent (wake-ups, attachments); hup: its socket
 * hung up. */
void ferry__sub_read_messages(ferry_subscriber *sub, sconn *c, bool hup, int max);
/* Watches the directory, connects, reads messages and drops the silent for at most timeout_ns. */
void ferry__sub_housekeep(ferry_subscriber *sub, int64_t timeout_ns);
/* Logs, once each, the handshakes stuck for at least min_ns: a publisher whose listen backlog
 * stays full, or that has not read or answered our hello. */
void ferry__sub_say_stuck(ferry_subscriber *sub, int64_t min_ns);

/* ---- data path (subscriber_data.c) ---------------------------------------------------------- */

/* Gives back every queued sample unread (a paused subscriber's stragglers). */
void ferry__sub_discard_queued(ferry_subscriber *sub);

/* ---- small helpers of all three ------------------------------------------------------------- */

static inline bool ferry__sub_ring_empty(const sconn *c)
{
    return atomic_load_explicit(&c->ring.hdr->deliver_head, memory_order_acquire) ==
           atomic_load_explicit(&c->ring.hdr->deliver_tail, memory_order_acquire);
}

static inline void ferry__sub_update_stats(ferry_subscriber *sub)
{
    uint64_t dropped = sub->dropped_closed;
    for (uint32_t k = 0; k < sub->nlive; k++)
        dropped +=
            atomic_load_explicit(&sub->conns[sub->live[k]].ring.hdr->dropped, memory_order_relaxed);
    sub->stats.dropped = dropped;
    sub->stats.held = sub->held;
    sub->stats.publishers = sub->nactive;
    ferry__spin_stats(&sub->spin, &sub->stats.spin);
    sub->stats.spin.paced_spins = sub->pace.spins;
    sub->stats.spin.paced_found = sub->pace.found;
    if (sub->opt.busy_poll)
        sub->stats.spin.mode = FERRY_SPIN_MODE_POLL;
}

/* Copies the counters to the status file, for tools; off the hot path. */
static inline void ferry__sub_publish_status(ferry_subscriber *sub)
{
    ferry__sub_update_stats(sub);
    *sub->st = sub->stats;
}

#endif
