/*
 * Subscriber: finds the topic's publishers in the topic directory (a directory watch plus a
 * bounded rescan), connects to each, maps its data segment read-only and takes samples from the
 * delivery ring of its connection segment.
 *
 * Everything a publisher wrote is checked before use: ring counters, descriptors, the chunk table
 * and chunk headers are read once into locals and range-checked against the geometry received at
 * connect (itself checked against the sizes of the segments received). A publisher that breaks
 * the rules is disconnected; samples already taken from it stay readable.
 *
 * Single-threaded per subscriber: the caller serialises.
 */
#include "core/core.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { SC_FREE = 0, SC_PENDING = 1, SC_ACTIVE = 2, SC_GONE = 3 };
#define REFUSED_MAX 16
#define RESCAN_NS 1000000000LL      /* safety-net rescan of the topic directory */
/* A publisher answers a hello within its next housekeeping (50 ms while it publishes); one that
 * has not answered in 2 s is dropped and not tried again. */
#define PENDING_TIMEOUT_NS 2000000000LL
#define FUTEX_SLICE_NS 50000000LL /* longest doorbell sleep before housekeeping runs again */

typedef struct sconn {
    int state;
    uint32_t gen;
    int sock;
    char name[64]; /* the publisher's socket file */
    uint64_t pub_id;
    int32_t pid;
    int64_t since;
    const uint8_t *data;
    uint64_t data_size;
    ferry__conn ring;
    uint32_t max_chunks;
    uint64_t table_offset, arena_offset, payload_offset;
    uint64_t rhead; /* private copy of return_head */
    uint64_t *held_bits;
    uint64_t *seen_bits; /* chunks whose pages are populated here (prefault), in held_bits' block */
    uint32_t held;
    uint32_t armed; /* doorbell value we last set, 0 when none */
    struct attachment {
        uint64_t key;
        int fds[FERRY__ATTACH_FDS];
        int nfds;
    } *attachments; /* allocated at the first one */
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
    uint32_t held;
    uint64_t dropped_closed;
    char refused[REFUSED_MAX][64];
    uint32_t refused_next;
    bool rescan;
    bool no_futex; /* the kernel lacks futex_waitv: sleep on the notifier */
    bool paused;   /* lifecycle not active: publishers skip us, stragglers are given back */
    uint64_t discarded; /* queued samples given back unread while paused */
    int64_t next_rescan;
    int64_t next_housekeep;
    void *waitset;
    struct {
        ferry__close_hook fn;
        void *arg;
    } hooks[FERRY__CLOSE_HOOKS];
};

void ferry_subscriber_options_init(ferry_subscriber_options *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->depth = 2;
    o->max_held = 16;
    o->max_publishers = 16;
}

static ferry_err options_resolve(ferry_subscriber_options *o)
{
    ferry_subscriber_options d;
    ferry_subscriber_options_init(&d);
    if (!o->depth)
        o->depth = d.depth;
    if (!o->max_held)
        o->max_held = d.max_held;
    if (!o->max_publishers)
        o->max_publishers = d.max_publishers;
    if (o->depth > 4096 || o->history > 4096 || o->max_publishers > 256 ||
        o->max_held > 65536)
        return FERRY_EINVAL;
    if (o->overflow != FERRY_OVERFLOW_DROP_OLDEST && o->overflow != FERRY_OVERFLOW_BLOCK)
        return FERRY_EINVAL;
    return FERRY_OK;
}

ferry_err ferry__subscriber_check(ferry_subscriber *sub)
{
    return ferry__endpoint_check(sub ? &sub->ep : NULL, FERRY__SUB_MAGIC);
}

static void update_stats(ferry_subscriber *sub)
{
    uint64_t dropped = sub->dropped_closed;
    for (uint32_t k = 0; k < sub->nlive; k++)
        dropped += atomic_load_explicit(&sub->conns[sub->live[k]].ring.hdr->dropped,
                                        memory_order_relaxed);
    sub->stats.dropped = dropped;
    sub->stats.held = sub->held;
    sub->stats.publishers = sub->nactive;
}

/* Copies the counters to the status file, for tools; off the hot path. */
static void publish_status(ferry_subscriber *sub)
{
    update_stats(sub);
    *sub->st = sub->stats;
}

static void live_remove(ferry_subscriber *sub, sconn *c)
{
    uint16_t slot = (uint16_t)(c - sub->conns);
    for (uint32_t k = 0; k < sub->nlive; k++)
        if (sub->live[k] == slot) {
            sub->live[k] = sub->live[--sub->nlive];
            return;
        }
}

/* ---- connections -------------------------------------------------------------------------- */

static void conn_release_resources(ferry_subscriber *sub, sconn *c)
{
    if (c->sock >= 0) {
        ferry__poller_del(sub->ep.epfd, c->sock);
        close(c->sock);
        c->sock = -1;
    }
}

static void conn_close(ferry_subscriber *sub, sconn *c)
{
    if (c->state == SC_FREE)
        return;
    if (c->state == SC_ACTIVE)
        sub->nactive--;
    if (c->state == SC_ACTIVE || c->state == SC_GONE) {
        for (int h = 0; h < FERRY__CLOSE_HOOKS; h++)
            if (sub->hooks[h].fn)
                sub->hooks[h].fn(sub->hooks[h].arg, (uint32_t)(c - sub->conns), c->gen);
        live_remove(sub, c);
        sub->dropped_closed += atomic_load_explicit(&c->ring.hdr->dropped, memory_order_relaxed);
        ferry__unmap((void *)c->data, c->data_size);
        ferry__conn_unmap(&c->ring);
        sub->held -= c->held;
        free(c->held_bits);
    }
    conn_release_resources(sub, c);
    for (uint32_t k = 0; k < c->nattachments; k++)
        for (int i = 0; i < c->attachments[k].nfds; i++)
            close(c->attachments[k].fds[i]);
    free(c->attachments);
    uint32_t gen = c->gen + 1;
    memset(c, 0, sizeof *c);
    c->gen = gen;
    c->sock = -1;
    sub->nconns--;
    update_stats(sub);
}

static bool ring_empty(const sconn *c)
{
    return atomic_load_explicit(&c->ring.hdr->deliver_head, memory_order_acquire) ==
           atomic_load_explicit(&c->ring.hdr->deliver_tail, memory_order_acquire);
}

/* The publisher went away (or misbehaved): no more returns; what is queued may still be taken
 * and what is held stays mapped until released. */
static void conn_gone(ferry_subscriber *sub, sconn *c, bool lost)
{
    if (c->state == SC_PENDING) {
        conn_close(sub, c);
        return;
    }
    if (c->state != SC_ACTIVE)
        return;
    c->state = SC_GONE;
    sub->nactive--;
    sub->stats.publishers_lost += lost;
    conn_release_resources(sub, c);
    ferry__log(sub->ep.node, FERRY_LOG_INFO, "%s: publisher pid %d gone", sub->ep.topic, (int)c->pid);
    if (c->held == 0 && ring_empty(c))
        conn_close(sub, c);
    update_stats(sub);
}

static void discard_queued(ferry_subscriber *sub);

static void conn_fail(ferry_subscriber *sub, sconn *c, const char *why)
{
    sub->stats.protocol_errors++;
    ferry__log_peer(sub->ep.node, &sub->ep.peer_log, FERRY_LOG_WARN,
                    "%s: publisher pid %d disconnected: %s", sub->ep.topic, (int)c->pid, why);
    /* Queued samples from a publisher that broke the rules are not taken. */
    if (c->state == SC_ACTIVE) {
        c->state = SC_GONE;
        sub->nactive--;
        sub->stats.publishers_lost++;
        conn_release_resources(sub, c);
    }
    if (c->state == SC_GONE && c->held == 0)
        conn_close(sub, c);
    else if (c->state == SC_PENDING)
        conn_close(sub, c);
}

static bool refused(const ferry_subscriber *sub, const char *name)
{
    for (uint32_t i = 0; i < REFUSED_MAX; i++)
        if (strcmp(sub->refused[i], name) == 0)
            return true;
    return false;
}

static void remember_refused(ferry_subscriber *sub, const char *name)
{
    snprintf(sub->refused[sub->refused_next], sizeof sub->refused[0], "%s", name);
    sub->refused_next = (sub->refused_next + 1) % REFUSED_MAX;
}

static bool sealed_against_shrinking(int fd)
{
    unsigned seals = 0;
    return ferry__memfd_seals(fd, &seals) == 0 && (seals & F_SEAL_SHRINK);
}

static void welcome(ferry_subscriber *sub, sconn *c)
{
    union {
        ferry__welcome w;
        char raw[sizeof(ferry__welcome) + 1];
    } buf;
    int fds[2]; /* what a welcome carries; more are closed unread */
    int nfds = 2;
    ssize_t n = ferry__recv_msg(c->sock, buf.raw, sizeof buf.raw, fds, &nfds);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return;
    if (n <= 0) {
        for (int i = 0; i < nfds; i++)
            close(fds[i]); /* an empty datagram may still carry descriptors */
        if (n < 0)
            ferry__log_peer(sub->ep.node, &sub->ep.peer_log, FERRY_LOG_WARN,
                            "%s: welcome from publisher pid %d lost: %s%s", sub->ep.topic,
                            (int)c->pid, strerror(errno),
                            errno == EMSGSIZE ? " (its descriptors could not be received: out "
                                                "of file descriptors?)"
                                              : "");
        conn_close(sub, c);
        return;
    }
    ferry__welcome w;
    const char *why = NULL;
    ferry_err err = ferry__welcome_decode(buf.raw, (size_t)n, &w);
    uint64_t data_size = 0, conn_size = 0;
    if (err) {
        why = "malformed welcome";
    } else if (w.status != FERRY_OK) {
        sub->stats.rejected++;
        /* A type, permission or protocol refusal stays true; a publisher short of memory or
         * descriptors, or at its limit of subscribers, is tried again at the next scan. */
        if (w.status == FERRY_ETYPE || w.status == FERRY_EPERM || w.status == FERRY_EPROTO)
            remember_refused(sub, c->name);
        ferry__log_peer(sub->ep.node, &sub->ep.peer_log, FERRY_LOG_WARN,
                        "%s: publisher pid %d refused us: %s (%s; it has type %s/%016llx)",
                        sub->ep.topic, (int)w.pid,
                        w.reason[0] ? w.reason : ferry_strerror((ferry_err)w.status),
                        ferry_errname((ferry_err)w.status), w.type_name,
                        (unsigned long long)w.type_hash);
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
        conn_close(sub, c);
        return;
    } else if (nfds != 2 || ferry__fd_is_memfd(fds[0]) != 1 || ferry__fd_is_memfd(fds[1]) != 1 ||
               ferry__fd_size(fds[0], &data_size) != 0 ||
               ferry__fd_size(fds[1], &conn_size) != 0) {
        why = "welcome without its descriptors";
    } else if (ferry__welcome_check(&w, data_size, conn_size) != FERRY_OK) {
        why = "welcome with an impossible geometry";
    } else if (!sealed_against_shrinking(fds[0]) || !sealed_against_shrinking(fds[1])) {
        /* A segment its owner could still truncate would turn our next read into SIGBUS. */
        why = "segments not sealed against shrinking";
    } else if (w.type_hash != sub->ep.type_hash || strcmp(w.type_name, sub->ep.type_name) != 0) {
        sub->stats.rejected++;
        remember_refused(sub, c->name);
        why = "type mismatch";
    }
    if (why) {
        if (err || nfds != 2)
            sub->stats.protocol_errors++;
        ferry__log_peer(sub->ep.node, &sub->ep.peer_log, FERRY_LOG_WARN, "%s: publisher pid %d: %s",
                        sub->ep.topic, (int)c->pid, why);
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
        conn_close(sub, c);
        return;
    }
    const uint8_t *data = ferry__map(fds[0], data_size, false);
    ferry__conn ring;
    memset(&ring, 0, sizeof ring);
    bool mapped = ferry__conn_map(&ring, fds[1], conn_size, w.deliver_capacity,
                                  w.return_capacity) == 0;
    ferry__conn_header *hdr = ring.hdr;
    /* Two bitmaps in one block: chunks held, chunks already populated (prefault). */
    uint64_t *bits = calloc(2 * (size_t)((w.max_chunks + 63) / 64), sizeof *bits);
    close(fds[0]);
    close(fds[1]);
    int map_errno = errno;
    const ferry__data_header *dh = (const ferry__data_header *)data;
    if (!data || !mapped || !bits || ferry__conn_check(hdr, &w) != FERRY_OK ||
        dh->magic != FERRY__DATA_MAGIC || dh->publisher_id != w.publisher_id) {
        if (!data || !mapped || !bits)
            ferry__log(sub->ep.node, FERRY_LOG_WARN,
                       "%s: publisher pid %d: cannot map its segments: %s", sub->ep.topic,
                       (int)c->pid, strerror(bits ? map_errno : ENOMEM));
        else
            ferry__log(sub->ep.node, FERRY_LOG_WARN, "%s: publisher pid %d: segments do not match",
                       sub->ep.topic, (int)c->pid);
        sub->stats.protocol_errors += data && mapped && bits;
        ferry__unmap((void *)data, data_size);
        if (mapped)
            ferry__conn_unmap(&ring);
        free(bits);
        conn_close(sub, c);
        return;
    }
    c->data = data;
    c->data_size = data_size;
    c->ring = ring;
    c->max_chunks = w.max_chunks;
    c->table_offset = w.table_offset;
    c->arena_offset = w.arena_offset;
    c->payload_offset = w.payload_offset;
    c->rhead = atomic_load_explicit(&hdr->return_head, memory_order_relaxed);
    c->held_bits = bits;
    c->seen_bits = bits + (w.max_chunks + 63) / 64;
    /* A connection made while paused starts paused. What the publisher delivered before it
     * could see this (history) is given back unread. */
    if (sub->paused)
        atomic_store_explicit(&hdr->sub_paused, 1, memory_order_seq_cst);
    c->pub_id = w.publisher_id;
    c->state = SC_ACTIVE;
    sub->nactive++;
    sub->live[sub->nlive++] = (uint16_t)(c - sub->conns);
    update_stats(sub);
    ferry__log(sub->ep.node, FERRY_LOG_DEBUG, "%s: connected to publisher pid %d", sub->ep.topic,
               (int)c->pid);
}

static void connect_to(ferry_subscriber *sub, const char *name)
{
    sconn *c = NULL;
    for (uint32_t i = 0; i < sub->opt.max_publishers; i++)
        if (sub->conns[i].state == SC_FREE) {
            c = &sub->conns[i];
            break;
        }
    if (!c) {
        ferry__log(sub->ep.node, FERRY_LOG_WARN, "%s: more than %u publishers; ignoring %s",
                   sub->ep.topic, sub->opt.max_publishers, name);
        return;
    }
    int fd = ferry__connect_at(sub->ep.dirfd, name);
    if (fd < 0) {
        if (errno != ECONNREFUSED && errno != EAGAIN && errno != ENOENT)
            ferry__log(sub->ep.node, FERRY_LOG_WARN, "%s: cannot connect to %s: %s", sub->ep.topic,
                       name, strerror(errno));
        if (errno == ECONNREFUSED) {
            /* Nobody listens: its publisher died. Whoever finds a stale socket removes it,
             * together with the dead publisher's status file. */
            char status[80];
            ferry__status st;
            bool alive = true;
            size_t len = strlen(name);
            if (len > 5 && len < 64) {
                snprintf(status, sizeof status, "%.*s.status", (int)(len - 5), name);
                if (ferry__status_read(sub->ep.dirfd, status, &st, &alive) != FERRY_OK || !alive)
                    unlinkat(sub->ep.dirfd, status, 0);
            }
            unlinkat(sub->ep.dirfd, name, 0);
        } else if (errno == EAGAIN) {
            sub->next_rescan = ferry__clock_ns() + 10000000; /* its backlog is full */
        }
        return;
    }
    pid_t pid = 0;
    uid_t uid = 0;
    gid_t gid = 0;
    if (ferry__peer_cred(fd, &pid, &uid, &gid) != 0 ||
        !ferry__node_peer_allowed(sub->ep.node, fd, uid)) {
        sub->stats.rejected++;
        remember_refused(sub, name);
        ferry__log(sub->ep.node, FERRY_LOG_WARN, "%s: publisher pid %d uid %u not allowed",
                   sub->ep.topic, (int)pid, (unsigned)uid);
        close(fd);
        return;
    }
    ferry__hello h;
    memset(&h, 0, sizeof h);
    h.magic = FERRY__MSG_MAGIC;
    h.version = FERRY_PROTOCOL_VERSION;
    h.kind = FERRY__MSG_HELLO;
    h.subscriber_id = sub->ep.id;
    h.type_hash = sub->ep.type_hash;
    h.pid = (int32_t)getpid();
    h.depth = sub->opt.depth;
    h.overflow = (uint32_t)sub->opt.overflow;
    h.history = sub->opt.history;
    memcpy(h.topic, sub->ep.topic, sizeof h.topic);
    memcpy(h.type_name, sub->ep.type_name, sizeof h.type_name);
    memcpy(h.node_name, sub->ep.node->name, sizeof h.node_name);
    if (ferry__send_msg(fd, &h, sizeof h, NULL, 0) != 0) {
        close(fd);
        return;
    }
    uint32_t slot = (uint32_t)(c - sub->conns);
    c->state = SC_PENDING;
    c->sock = fd;
    c->pid = (int32_t)pid;
    c->since = ferry__clock_ns();
    snprintf(c->name, sizeof c->name, "%s", name);
    sub->nconns++;
    if (ferry__poller_add(sub->ep.epfd, fd, ferry__tag(FERRY__TAG_CONN, slot, c->gen)) != 0)
        conn_close(sub, c);
}

static bool known(const ferry_subscriber *sub, const char *name)
{
    for (uint32_t i = 0; i < sub->opt.max_publishers; i++)
        if (sub->conns[i].state != SC_FREE && strcmp(sub->conns[i].name, name) == 0)
            return true;
    return refused(sub, name);
}

static void scan_entry(void *arg, const char *name)
{
    ferry_subscriber *sub = arg;
    size_t len = strlen(name);
    if (len >= 64 || len < 10 || strncmp(name, "pub.", 4) != 0 ||
        strcmp(name + len - 5, ".sock") != 0)
        return;
    if (!known(sub, name))
        connect_to(sub, name);
}

/* Lists the topic directory without allocating: it runs every RESCAN_NS, also in a subscriber
 * whose loop must not touch the heap. */
static void scan(ferry_subscriber *sub)
{
    sub->rescan = false;
    sub->next_rescan = ferry__clock_ns() + RESCAN_NS;
    if (ferry__dir_each(sub->ep.dirfd, 4096, scan_entry, sub) != 0)
        ferry__log(sub->ep.node, FERRY_LOG_WARN, "%s: cannot read the topic directory: %s",
                   sub->ep.topic, strerror(errno));
}

static void rewatch(ferry_subscriber *sub)
{
    /* The topic directory was removed (by a clean-up): make it again and watch the new one. */
    ferry__poller_del(sub->ep.epfd, sub->watch_fd);
    close(sub->watch_fd);
    sub->watch_fd = -1;
    close(sub->ep.dirfd);
    sub->ep.dirfd = ferry__node_topic_dir(sub->ep.node, sub->ep.dirname);
    if (sub->ep.dirfd < 0)
        return;
    if (ferry__dirwatch_create(&sub->watch_fd, sub->ep.dirfd) == 0)
        ferry__poller_add(sub->ep.epfd, sub->watch_fd, ferry__tag(FERRY__TAG_WATCH, 0, 0));
    sub->rescan = true;
}

/* Stores an attachment, or withdraws it when it carries no descriptor; false when the
 * publisher sent more than it may. */
static bool keep_attachment(sconn *c, const ferry__attach_msg *m, const int *fds)
{
    struct attachment *a = NULL;
    for (uint32_t k = 0; k < c->nattachments; k++)
        if (c->attachments[k].key == m->key)
            a = &c->attachments[k]; /* replaced: the newer descriptors win */
    if (m->nfds == 0) {
        if (a) {
            for (int i = 0; i < a->nfds; i++)
                close(a->fds[i]);
            *a = c->attachments[--c->nattachments];
        }
        return true;
    }
    if (!a) {
        if (c->nattachments == FERRY__ATTACH_MAX)
            return false;
        if (!c->attachments &&
            !(c->attachments = calloc(FERRY__ATTACH_MAX, sizeof *c->attachments)))
            return false;
        a = &c->attachments[c->nattachments++];
    } else {
        for (int i = 0; i < a->nfds; i++)
            close(a->fds[i]);
    }
    a->key = m->key;
    a->nfds = (int)m->nfds;
    memcpy(a->fds, fds, (size_t)a->nfds * sizeof *fds);
    return true;
}

/* Reads what an active publisher sent (wake-ups, attachments), up to max messages; a hang-up
 * ends it. */
static void read_messages(ferry_subscriber *sub, sconn *c, bool hup, int max)
{
    unsigned wakes = 0;
    for (int k = 0; k < max; k++) {
        union {
            ferry__attach_msg m;
            char raw[sizeof(ferry__attach_msg) + 1];
        } buf;
        int fds[FERRY__ATTACH_FDS];
        int nfds = FERRY__ATTACH_FDS;
        ssize_t got = ferry__recv_msg(c->sock, buf.raw, sizeof buf.raw, fds, &nfds);
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (hup)
                conn_gone(sub, c, true);
            return;
        }
        if (got <= 0) {
            for (int i = 0; i < nfds; i++)
                close(fds[i]);
            conn_gone(sub, c, true);
            return;
        }
        if (nfds == 0 && ferry__ctl_decode(buf.raw, (size_t)got) == FERRY__MSG_WAKE) {
            if (++wakes > FERRY__WAKE_FLOOD) {
                conn_fail(sub, c, "a flood of wake-ups");
                return;
            }
            /* The wake-up for the doorbell we set is read: arming again need not look. */
            if (c->armed == FERRY__DOORBELL_NOTIFIER)
                c->armed = 0;
            continue;
        }
        ferry__attach_msg m;
        if (ferry__attach_decode(buf.raw, (size_t)got, nfds, &m) != FERRY_OK ||
            !keep_attachment(c, &m, fds)) {
            for (int i = 0; i < nfds; i++)
                close(fds[i]);
            conn_fail(sub, c, "unexpected message");
            return;
        }
    }
}

ferry_err ferry__subscriber_attachment(ferry_subscriber *sub, uint32_t slot, uint32_t gen,
                                       uint64_t key, int *fds, int *nfds)
{
    ferry_err err = ferry__subscriber_check(sub);
    if (err)
        return err;
    if (!fds || !nfds || slot >= sub->opt.max_publishers)
        return FERRY_EINVAL;
    sconn *c = &sub->conns[slot];
    for (int round = 0; round < 2; round++) {
        if (c->gen != gen || (c->state != SC_ACTIVE && c->state != SC_GONE))
            return FERRY_ESTATE;
        for (uint32_t k = 0; k < c->nattachments; k++)
            if (c->attachments[k].key == key) {
                *nfds = c->attachments[k].nfds;
                memcpy(fds, c->attachments[k].fds, (size_t)*nfds * sizeof *fds);
                return FERRY_OK;
            }
        /* Sent before any sample that names it: it is in the socket already. */
        if (round == 0 && c->state == SC_ACTIVE)
            read_messages(sub, c, false, 64);
    }
    return FERRY_EAGAIN;
}

static void housekeep(ferry_subscriber *sub, int64_t timeout_ns)
{
    ferry__event ev[16];
    int n = ferry__poller_wait(sub->ep.epfd, ev, 16, timeout_ns);
    for (int i = 0; i < n; i++) {
        unsigned kind = ferry__tag_kind(ev[i].tag);
        if (kind == FERRY__TAG_WATCH) {
            if (ferry__dirwatch_drain(sub->watch_fd))
                rewatch(sub);
            sub->rescan = true;
        } else if (kind == FERRY__TAG_CONN) {
            uint32_t slot = ferry__tag_slot(ev[i].tag);
            if (slot >= sub->opt.max_publishers)
                continue;
            sconn *c = &sub->conns[slot];
            if (c->gen != ferry__tag_gen(ev[i].tag) || c->sock < 0)
                continue;
            if (c->state == SC_PENDING) {
                welcome(sub, c);
            } else if (c->state == SC_ACTIVE) {
                read_messages(sub, c, ev[i].hup || ev[i].err, 64);
            }
        }
    }
    int64_t now = ferry__clock_ns();
    if (sub->rescan || now >= sub->next_rescan)
        scan(sub);
    for (uint32_t i = 0; i < sub->opt.max_publishers && sub->nconns; i++) {
        sconn *c = &sub->conns[i];
        if (c->state == SC_GONE && c->held == 0 && ring_empty(c))
            conn_close(sub, c);
        else if (c->state == SC_PENDING && now - c->since > PENDING_TIMEOUT_NS) {
            /* A listener that never answers is not a publisher worth a place again. */
            ferry__log_peer(sub->ep.node, &sub->ep.peer_log, FERRY_LOG_WARN,
                            "%s: %s (pid %d) did not answer our hello within 2 s", sub->ep.topic,
                            c->name, (int)c->pid);
            remember_refused(sub, c->name);
            conn_close(sub, c);
        }
    }
    if (sub->paused)
        discard_queued(sub);
    publish_status(sub);
    sub->next_housekeep = ferry__clock_ns() + FERRY__HOUSEKEEP_NS;
}

void ferry__subscriber_housekeep(ferry_subscriber *sub)
{
    housekeep(sub, 0);
}

/* ---- taking ------------------------------------------------------------------------------- */

typedef struct peeked {
    uint64_t tail;
    uint64_t desc;
    ferry__chunk_header h;
    uint64_t offset;
    uint64_t capacity;
} peeked;

/* Reads the oldest queued entry of c and checks everything about it. 1: found, 0: empty,
 * -1: the publisher broke the rules (c is closed). */
static int peek(ferry_subscriber *sub, sconn *c, peeked *p)
{
    uint64_t tail = atomic_load_explicit(&c->ring.hdr->deliver_tail, memory_order_acquire);
    /* Acquire: pairs with the publisher's release of head; the slot and the chunk it names are
     * visible once we see the head that covers them. */
    uint64_t head = atomic_load_explicit(&c->ring.hdr->deliver_head, memory_order_acquire);
    if (head == tail)
        return 0;
    if (head - tail > (uint64_t)c->ring.dmask + 1) {
        /* Between our two loads the publisher may have dropped the oldest entry and appended
         * one: only a tail that stayed put makes these counters impossible. */
        if (atomic_load_explicit(&c->ring.hdr->deliver_tail, memory_order_acquire) != tail)
            return 2;
        conn_fail(sub, c, "delivery ring counters out of range");
        return -1;
    }
    uint64_t d = atomic_load_explicit(&c->ring.dslots[tail & c->ring.dmask], memory_order_relaxed);
    uint32_t index = ferry__desc_index(d);
    if (index >= c->max_chunks) {
        conn_fail(sub, c, "chunk index out of range");
        return -1;
    }
    ferry__chunk_entry e;
    memcpy(&e, c->data + c->table_offset + (uint64_t)index * sizeof e, sizeof e);
    if (e.offset < c->arena_offset || e.offset % FERRY__PAGE || e.offset >= c->data_size ||
        c->payload_offset > c->data_size - e.offset ||
        e.capacity > c->data_size - e.offset - c->payload_offset) {
        conn_fail(sub, c, "chunk table entry out of range");
        return -1;
    }
    memcpy(&p->h, c->data + e.offset, sizeof p->h);
    if (p->h.index != index || p->h.generation != ferry__desc_gen(d) || p->h.size == 0 ||
        p->h.size > e.capacity) {
        /* The entry may have been dropped and its chunk reused while we looked: only a stable
         * tail makes this a real violation. */
        if (atomic_load_explicit(&c->ring.hdr->deliver_tail, memory_order_acquire) != tail)
            return 2;
        conn_fail(sub, c, "chunk header does not match its descriptor");
        return -1;
    }
    p->tail = tail;
    p->desc = d;
    p->offset = e.offset;
    p->capacity = e.capacity;
    return 1;
}

static void wake_publisher(sconn *c)
{
    /* Pairs with the publisher's store of pub_waiting, fence, re-check. */
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&c->ring.hdr->pub_waiting, memory_order_relaxed) &&
        atomic_exchange_explicit(&c->ring.hdr->pub_waiting, 0, memory_order_acq_rel) && c->sock >= 0) {
        /* MSG_DONTWAIT: never blocks; EAGAIN means the publisher has wake-ups queued. */
        ferry__bye m;
        ferry__wake_init(&m);
        ferry__send_msg(c->sock, &m, sizeof m, NULL, 0);
    }
}

/* Hands a chunk reference back to the publisher of the active connection c. */
static void give_back(ferry_subscriber *sub, sconn *c, uint64_t d)
{
    uint64_t tail = atomic_load_explicit(&c->ring.hdr->return_tail, memory_order_acquire);
    if (c->rhead - tail >= (uint64_t)c->ring.rmask + 1) {
        conn_fail(sub, c, "return ring counters out of range");
        return;
    }
    atomic_store_explicit(&c->ring.rslots[c->rhead & c->ring.rmask], d, memory_order_relaxed);
    c->rhead++;
    /* Release: the slot is written before the publisher sees the new head. */
    atomic_store_explicit(&c->ring.hdr->return_head, c->rhead, memory_order_release);
    wake_publisher(c);
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
        discard_queued(sub);
        return false;
    }
    for (int attempt = 0; attempt < 64; attempt++) {
        sconn *best = NULL;
        peeked bp = {0}, p;
        bool raced = false;
        for (uint32_t k = sub->nlive; k-- > 0;) {
            sconn *c = &sub->conns[sub->live[k]];
            int r = peek(sub, c, &p);
            if (r == 2)
                raced = true;
            if (r == 1 && (!best || p.h.publish_ns < bp.h.publish_ns)) {
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
            conn_fail(sub, best, "delivered a chunk we already hold");
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
            wake_publisher(best);
        return true;
    }
    return false;
}

/* Gives back, unread, everything queued for a paused subscriber: what was there when it paused,
 * and what a publisher delivered before it saw the pause word. */
static void discard_queued(ferry_subscriber *sub)
{
    for (uint32_t k = sub->nlive; k-- > 0;) {
        sconn *c = &sub->conns[sub->live[k]];
        int state = c->state;
        /* Bounded by the ring's capacity; stops when c fails (it may be closed then). */
        for (uint32_t n = 0; n <= c->ring.dmask && c->state == state; n++) {
            peeked p;
            int r = peek(sub, c, &p);
            if (r == 2)
                continue;
            if (r != 1)
                break;
            if (!ferry__conn_claim(&c->ring, p.tail))
                continue;
            uint32_t index = ferry__desc_index(p.desc);
            if ((c->held_bits[index / 64] >> (index % 64)) & 1) {
                conn_fail(sub, c, "delivered a chunk we already hold");
                break;
            }
            sub->discarded++;
            if (c->state == SC_ACTIVE)
                give_back(sub, c, p.desc);
        }
        if (c->state == state && state == SC_GONE && c->held == 0 && ring_empty(c))
            conn_close(sub, c);
    }
}

bool ferry__subscriber_ready(ferry_subscriber *sub)
{
    if (sub->paused) {
        discard_queued(sub);
        return false;
    }
    for (uint32_t k = 0; k < sub->nlive; k++)
        if (!ring_empty(&sub->conns[sub->live[k]]))
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
        if (c->armed == FERRY__DOORBELL_NOTIFIER &&
            atomic_load_explicit(&c->ring.hdr->sub_waiting, memory_order_relaxed) == 0) {
            read_messages(sub, c, false, 1);
            if (c->state != SC_ACTIVE)
                continue;
        }
        atomic_store_explicit(&c->ring.hdr->sub_waiting, how, memory_order_relaxed);
        c->armed = how;
    }
    /* Pairs with the publisher's fence between its new head and its doorbell check. */
    atomic_thread_fence(memory_order_seq_cst);
    return ferry__subscriber_ready(sub);
}

bool ferry__subscriber_arm(ferry_subscriber *sub)
{
    return arm(sub, FERRY__DOORBELL_NOTIFIER);
}

/* Sleeps on the doorbell words of the active connections (a futex wait is cheaper to wake than
 * an eventfd behind epoll). Returns false when that is not possible here. */
static bool sleep_on_doorbells(ferry_subscriber *sub, int64_t timeout_ns)
{
    void *words[128];
    uint32_t expected[128];
    unsigned n = 0;
    if (sub->no_futex || sub->nactive == 0 || sub->nactive > 128 || sub->nconns != sub->nactive)
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
        sub->no_futex = true;
        return false;
    }
    return true;
}

/* Housekeeping for a subscriber that keeps finding samples: the empty-queue path, which runs it
 * otherwise, may never come. */
static void busy_housekeep(ferry_subscriber *sub)
{
    if (ferry__clock_ns() - sub->next_housekeep >= FERRY__SUB_BUSY_HOUSEKEEP_NS)
        housekeep(sub, 0);
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
        busy_housekeep(sub);
        return FERRY_OK;
    }
    /* About to report "nothing": arm the doorbells (so the fd fires on the next delivery) and
     * run housekeeping at a bounded rate (so a pending hang-up cannot keep the fd readable). */
    ferry__subscriber_arm(sub);
    if (ferry__clock_ns() >= sub->next_housekeep)
        housekeep(sub, 0);
    if (try_take(sub, sample))
        return FERRY_OK;
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
    if (c->gen != gen || (c->state != SC_ACTIVE && c->state != SC_GONE) ||
        index >= c->max_chunks || !((c->held_bits[index / 64] >> (index % 64)) & 1))
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

ferry_err ferry__subscriber_add_close_hook(ferry_subscriber *sub, ferry__close_hook fn, void *arg)
{
    ferry_err err = ferry__subscriber_check(sub);
    if (err)
        return err;
    if (!fn)
        return FERRY_EINVAL;
    for (int h = 0; h < FERRY__CLOSE_HOOKS; h++)
        if (sub->hooks[h].fn == fn)
            return FERRY_EBUSY;
    for (int h = 0; h < FERRY__CLOSE_HOOKS; h++)
        if (!sub->hooks[h].fn) {
            sub->hooks[h].fn = fn;
            sub->hooks[h].arg = arg;
            return FERRY_OK;
        }
    return FERRY_ELIMIT;
}

void *ferry__subscriber_close_hook_arg(ferry_subscriber *sub, ferry__close_hook fn)
{
    if (ferry__subscriber_check(sub) != FERRY_OK)
        return NULL;
    for (int h = 0; h < FERRY__CLOSE_HOOKS; h++)
        if (sub->hooks[h].fn == fn)
            return sub->hooks[h].arg;
    return NULL;
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
    } else if (c->held == 0 && ring_empty(c)) {
        conn_close(sub, c);
    }
    publish_status(sub);
    return FERRY_OK;
}

ferry_err ferry_wait(ferry_subscriber *sub, int64_t timeout_ns)
{
    ferry_err err = ferry__subscriber_check(sub);
    if (err)
        return err;
    int64_t deadline = ferry__deadline(timeout_ns);
    for (;;) {
        if (ferry__subscriber_ready(sub)) {
            busy_housekeep(sub);
            return FERRY_OK;
        }
        int64_t left = ferry__remaining(deadline);
        /* With every connection established, sleep on the doorbells, in slices, so that new
         * publishers and hang-ups are still noticed; otherwise on the poller, which sees
         * everything. */
        if (ferry__clock_ns() >= sub->next_housekeep)
            housekeep(sub, 0);
        int64_t slice = left < 0 || left > FUTEX_SLICE_NS ? FUTEX_SLICE_NS : left;
        if (left != 0 && sleep_on_doorbells(sub, slice))
            continue;
        if (arm(sub, FERRY__DOORBELL_NOTIFIER))
            return FERRY_OK;
        housekeep(sub, left);
        if (left == 0)
            return ferry__subscriber_ready(sub) ? FERRY_OK : FERRY_ETIMEDOUT;
    }
}

ferry_err ferry_subscriber_wait_publishers(ferry_subscriber *sub, uint32_t count,
                                           int64_t timeout_ns)
{
    ferry_err err = ferry__subscriber_check(sub);
    if (err)
        return err;
    int64_t deadline = ferry__deadline(timeout_ns);
    housekeep(sub, 0);
    while (sub->nactive < count) {
        int64_t left = ferry__remaining(deadline);
        if (left == 0)
            return FERRY_ETIMEDOUT;
        /* Short sleeps: a publisher answers during its own calls, which we cannot see. */
        housekeep(sub, left < 0 || left > 5000000 ? 5000000 : left);
    }
    return FERRY_OK;
}

ferry_err ferry_subscriber_fd(ferry_subscriber *sub, int *fd)
{
    ferry_err err = ferry__subscriber_check(sub);
    if (err)
        return err;
    if (!fd)
        return FERRY_EINVAL;
    *fd = sub->ep.epfd;
    return FERRY_OK;
}

ferry_err ferry__subscriber_set_paused(ferry_subscriber *sub, bool paused)
{
    ferry_err err = ferry__subscriber_check(sub);
    if (err)
        return err;
    sub->paused = paused;
    for (uint32_t k = 0; k < sub->nlive; k++) {
        sconn *c = &sub->conns[sub->live[k]];
        if (c->state == SC_ACTIVE)
            atomic_store_explicit(&c->ring.hdr->sub_paused, paused ? 1u : 0u, memory_order_seq_cst);
    }
    /* After the words: what a publisher queues from now on is a straggler, given back later. */
    if (paused)
        discard_queued(sub);
    update_stats(sub);
    return FERRY_OK;
}

ferry_err ferry__subscriber_discarded(ferry_subscriber *sub, uint64_t *discarded)
{
    ferry_err err = ferry__subscriber_check(sub);
    if (err)
        return err;
    if (!discarded)
        return FERRY_EINVAL;
    *discarded = sub->discarded;
    return FERRY_OK;
}

uint32_t ferry__subscriber_max_held(ferry_subscriber *sub)
{
    return ferry__subscriber_check(sub) == FERRY_OK ? sub->opt.max_held : 0;
}

int ferry__subscriber_poll_fd(const ferry_subscriber *sub)
{
    return sub->ep.epfd;
}

void **ferry__subscriber_waitset_slot(ferry_subscriber *sub)
{
    return &sub->waitset;
}

ferry_err ferry_subscriber_stats_get(ferry_subscriber *sub, ferry_subscriber_stats *out)
{
    ferry_err err = ferry__subscriber_check(sub);
    if (err)
        return err;
    if (!out)
        return FERRY_EINVAL;
    publish_status(sub);
    *out = sub->stats;
    return FERRY_OK;
}

ferry_err ferry_subscriber_create(ferry_subscriber **out, ferry_node *node, const char *topic,
                                  const char *type_name, uint64_t type_hash,
                                  const ferry_subscriber_options *options)
{
    if (!out || !topic || !type_name)
        return FERRY_EINVAL;
    ferry_err err = ferry__node_check(node);
    if (err)
        return err;
    ferry_subscriber_options o;
    if (options)
        o = *options;
    else
        ferry_subscriber_options_init(&o);
    if ((err = options_resolve(&o)))
        return err;
    ferry_subscriber *sub = calloc(1, sizeof *sub);
    if (!sub)
        return FERRY_ENOMEM;
    sub->opt = o;
    sub->cookie = ferry__random64();
    sub->watch_fd = -1;
    if ((err = ferry__endpoint_open(&sub->ep, node, topic, type_name, type_hash)))
        goto fail;
    sub->conns = calloc(o.max_publishers, sizeof *sub->conns);
    sub->live = calloc(o.max_publishers, sizeof *sub->live);
    if (!sub->conns || !sub->live) {
        err = FERRY_ENOMEM;
        goto fail;
    }
    for (uint32_t i = 0; i < o.max_publishers; i++)
        sub->conns[i].sock = -1;

    err = FERRY_ESYS;
    if (ferry__dirwatch_create(&sub->watch_fd, sub->ep.dirfd) != 0 ||
        ferry__poller_add(sub->ep.epfd, sub->watch_fd, ferry__tag(FERRY__TAG_WATCH, 0, 0)) != 0)
        goto fail;

    ferry__status init;
    ferry__endpoint_status_init(&sub->ep, FERRY_ENDPOINT_SUBSCRIBER, &init);
    init.depth = o.depth;
    if ((err = ferry__endpoint_publish_status(&sub->ep, "sub", &init)))
        goto fail;
    sub->st = &sub->ep.status.map->sub;
    if ((err = ferry__node_adopt(node, &sub->ep.obj, FERRY__SUB_MAGIC)))
        goto fail;
    scan(sub);
    *out = sub;
    return FERRY_OK;
fail: {
    int e = errno;
    if (sub->watch_fd >= 0)
        close(sub->watch_fd);
    ferry__endpoint_close(&sub->ep);
    free(sub->conns);
    free(sub->live);
    free(sub);
    errno = e;
    return err;
}
}

ferry_err ferry_subscriber_destroy(ferry_subscriber *sub)
{
    ferry_err err = ferry__subscriber_check(sub);
    if (err)
        return err;
    if (sub->held > 0 || sub->waitset)
        return FERRY_EBUSY;
    ferry__bye bye;
    ferry__bye_init(&bye);
    for (uint32_t i = 0; i < sub->opt.max_publishers; i++) {
        if (sub->conns[i].state == SC_ACTIVE)
            ferry__send_msg(sub->conns[i].sock, &bye, sizeof bye, NULL, 0);
        conn_close(sub, &sub->conns[i]);
    }
    for (int h = 0; h < FERRY__CLOSE_HOOKS; h++)
        if (sub->hooks[h].fn)
            sub->hooks[h].fn(sub->hooks[h].arg, UINT32_MAX, 0);
    close(sub->watch_fd);
    ferry__endpoint_close(&sub->ep);
    free(sub->conns);
    free(sub->live);
    sub->conns = NULL;
    sub->live = NULL;
    ferry__node_bury(sub->ep.node, &sub->ep.obj);
    return FERRY_OK;
}
