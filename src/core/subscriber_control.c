/*
 * The subscriber's control plane: publishers found in the topic directory (a directory watch and
 * a bounded rescan), connections and their hello, the welcome and the segments it carries (every
 * size and geometry checked), attachments, goodbyes, publishers that stay silent or refuse, and
 * housekeeping, which runs all of it from the subscriber's poller. See subscriber.h.
 */
#include "core/subscriber.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RESCAN_NS 1000000000LL /* safety-net rescan of the topic directory */
/* A publisher answers a hello within its next housekeeping (50 ms while it publishes); one that
 * read ours and has not answered in 2 s is dropped and tried again only after a back-off that
 * starts at SILENT_RETRY_MIN_NS and doubles while it stays silent, up to SILENT_RETRY_MAX_NS: a
 * publisher stalled for a while (stopped, swapped, debugged, under a sanitizer) is found again,
 * and a listener that never answers costs one connection and a 2 s wait per 30 s. One that has
 * not even
 * read it (it has not accepted our connection: it is stalled, or a flood of connections is
 * queued ahead of ours) is waited for, in its queue, up to UNREAD_TIMEOUT_NS, then tried again
 * afresh; so is one whose listen backlog is full. Either is logged once it is 2 s late. */
#define PENDING_TIMEOUT_NS 2000000000LL
#define UNREAD_TIMEOUT_NS 10000000000LL
#define SILENT_RETRY_MIN_NS 1000000000LL
#define SILENT_RETRY_MAX_NS 30000000000LL
/* A connect refused by a full listen backlog is tried again this often, at most. */
#define QUEUED_RETRY_NS 2000000LL

static void live_remove(ferry_subscriber *sub, sconn *c)
{
    uint16_t slot = (uint16_t)(c - sub->conns);
    for (uint32_t k = 0; k < sub->nlive; k++)
        if (sub->live[k] == slot) {
            sub->live[k] = sub->live[--sub->nlive];
            return;
        }
}

static void conn_release_resources(ferry_subscriber *sub, sconn *c)
{
    if (c->sock >= 0) {
        ferry__poller_del(sub->ep.epfd, c->sock);
        ferry__sock_dispose(c->sock);
        c->sock = -1;
    }
}

void ferry__sub_conn_close(ferry_subscriber *sub, sconn *c)
{
    if (c->state == SC_FREE)
        return;
    if (c->state == SC_ACTIVE)
        sub->nactive--;
    if (c->state == SC_QUEUED)
        sub->nqueued--;
    if (c->state == SC_ACTIVE || c->state == SC_GONE) {
        for (int h = 0; h < FERRY__CLOSE_HOOKS; h++)
            if (sub->hooks[h].fn)
                sub->hooks[h].fn(sub->hooks[h].arg, (uint32_t)(c - sub->conns), c->gen);
        live_remove(sub, c);
        sub->dropped_closed += atomic_load_explicit(&c->ring.hdr->dropped, memory_order_relaxed);
        ferry__unmap((void *)c->data, c->data_size);
        ferry__fd_dispose(c->data_fd);
        ferry__conn_unmap(&c->ring);
        sub->held -= c->held;
        free(c->held_bits);
    }
    conn_release_resources(sub, c);
    for (uint32_t k = 0; k < c->nattachments; k++)
        for (int i = 0; i < c->attachments[k].nfds; i++)
            ferry__fd_dispose(c->attachments[k].fds[i]);
    free(c->attachments);
    uint32_t gen = c->gen + 1;
    memset(c, 0, sizeof *c);
    c->gen = gen;
    c->sock = -1;
    sub->nconns--;
    ferry__sub_update_stats(sub);
}

/* The publisher went away (or misbehaved): no more returns; what is queued may still be taken
 * and what is held stays mapped until released. */
static void conn_gone(ferry_subscriber *sub, sconn *c, bool lost)
{
    if (c->state == SC_PENDING) {
        ferry__sub_conn_close(sub, c);
        return;
    }
    if (c->state != SC_ACTIVE)
        return;
    c->state = SC_GONE;
    sub->nactive--;
    sub->stats.publishers_lost += lost;
    conn_release_resources(sub, c);
    ferry__log(sub->ep.node, FERRY_LOG_INFO, "%s: publisher pid %d gone", sub->ep.topic,
               (int)c->pid);
    if (c->held == 0 && ferry__sub_ring_empty(c))
        ferry__sub_conn_close(sub, c);
    ferry__sub_update_stats(sub);
}

void ferry__sub_conn_fail(ferry_subscriber *sub, sconn *c, const char *why)
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
        ferry__sub_conn_close(sub, c);
    else if (c->state == SC_PENDING)
        ferry__sub_conn_close(sub, c);
}

static refusal *refusal_of(ferry_subscriber *sub, const char *name)
{
    for (uint32_t i = 0; i < REFUSED_MAX; i++)
        if (sub->refused[i].name[0] && strcmp(sub->refused[i].name, name) == 0)
            return &sub->refused[i];
    return NULL;
}

/* True when name is not to be connected to now. */
static bool refused(ferry_subscriber *sub, const char *name)
{
    refusal *r = refusal_of(sub, name);
    return r && (r->retry_at == 0 || ferry__clock_ns() < r->retry_at);
}

/* name's place among the remembered, the oldest one's when it has none. */
static refusal *refusal_place(ferry_subscriber *sub, const char *name)
{
    refusal *r = refusal_of(sub, name);
    if (!r) {
        r = &sub->refused[sub->refused_next];
        sub->refused_next = (sub->refused_next + 1) % REFUSED_MAX;
        *r = (refusal){0};
        snprintf(r->name, sizeof r->name, "%s", name);
    }
    return r;
}

static void remember_refused(ferry_subscriber *sub, const char *name)
{
    refusal_place(sub, name)->retry_at = 0;
}

/* A publisher that read our hello and did not answer: tried again after the back-off. */
static void remember_silent(ferry_subscriber *sub, const char *name, int64_t now)
{
    refusal *r = refusal_place(sub, name);
    r->backoff = r->backoff == 0                         ? SILENT_RETRY_MIN_NS
                 : r->backoff >= SILENT_RETRY_MAX_NS / 2 ? SILENT_RETRY_MAX_NS
                                                         : 2 * r->backoff;
    r->retry_at = now + r->backoff;
}

/* A publisher that answered: whatever was remembered of it is forgotten. */
static void forget_refusal(ferry_subscriber *sub, const char *name)
{
    refusal *r = refusal_of(sub, name);
    if (r)
        *r = (refusal){0};
}

static bool sealed(int fd, unsigned want)
{
    unsigned seals = 0;
    return ferry__memfd_seals(fd, &seals) == 0 && (seals & want) == want;
}

/* The data segment's own seals: no shrinking (a read past its end would be SIGBUS) and no
 * writing through new descriptors or mappings, which also forbids punching holes: pages found
 * allocated once stay allocated. */
static bool data_sealed(int fd)
{
    return sealed(fd, F_SEAL_SHRINK) &&
           (sealed(fd, F_SEAL_FUTURE_WRITE) || sealed(fd, F_SEAL_WRITE));
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
            ferry__fd_dispose(fds[i]); /* an empty datagram may still carry descriptors */
        if (n < 0)
            ferry__log_peer(sub->ep.node, &sub->ep.peer_log, FERRY_LOG_WARN,
                            "%s: welcome from publisher pid %d lost: %s%s", sub->ep.topic,
                            (int)c->pid, strerror(errno),
                            errno == EMSGSIZE ? " (its descriptors could not be received: out "
                                                "of file descriptors?)"
                                              : "");
        ferry__sub_conn_close(sub, c);
        return;
    }
    ferry__welcome w;
    const char *why = NULL;
    char mismatch[224];
    ferry_err err = ferry__welcome_decode(buf.raw, (size_t)n, &w);
    uint64_t data_size = 0, conn_size = 0;
    if (err) {
        why = "malformed welcome";
    } else if (w.status != FERRY_OK) {
        sub->stats.rejected++;
        /* A type, permission or protocol refusal stays true; a publisher short of memory or
         * descriptors, or at its limit of subscribers, is tried again at the next scan. */
        if (w.status == FERRY_ETYPE || w.status == FERRY_EPERM || w.status == FERRY_EPROTO ||
            w.status == FERRY_EQOS)
            remember_refused(sub, c->name);
        if (w.status == FERRY_EQOS) {
            sub->stats.incompatible++;
            sub->stats.incompatible_policies = sub->opt.require & ~w.offered;
        }
        sub->type_refused |= w.status == FERRY_ETYPE;
        ferry__log_peer(
            sub->ep.node, &sub->ep.peer_log, FERRY_LOG_WARN,
            "%s: publisher pid %d refused us: %s (%s; it has type %s/%016llx)", sub->ep.topic,
            (int)w.pid, w.reason[0] ? w.reason : ferry_strerror((ferry_err)w.status),
            ferry_errname((ferry_err)w.status), w.type_name, (unsigned long long)w.type_hash);
        for (int i = 0; i < nfds; i++)
            ferry__fd_dispose(fds[i]);
        ferry__sub_conn_close(sub, c);
        return;
    } else if (nfds != 2 || ferry__fd_is_memfd(fds[0]) != 1 || ferry__fd_is_memfd(fds[1]) != 1 ||
               ferry__fd_size(fds[0], &data_size) != 0 || ferry__fd_size(fds[1], &conn_size) != 0) {
        why = "welcome without its descriptors";
    } else if (ferry__welcome_check(&w, data_size, conn_size) != FERRY_OK) {
        why = "welcome with an impossible geometry";
    } else if (!data_sealed(fds[0]) || !sealed(fds[1], F_SEAL_SHRINK)) {
        /* A segment its owner could still truncate would turn our next read into SIGBUS; one
         * it could punch holes in, our reads into allocations charged to us. */
        why = "segments not sealed against shrinking (and the data segment against writing)";
    } else if (ferry__fd_backed(fds[0], 0, w.arena_offset) == 0 ||
               ferry__fd_backed(fds[1], 0, conn_size) == 0) {
        /* Reading a hole of a shared mapping allocates a page, charged to the reader. */
        sub->stats.protocol_errors++;
        why = "segments with holes (pages the publisher never allocated)";
    } else if (sub->untyped && sub->ep.type_name[0] == '\0') {
        /* The first publisher met gives an untyped subscriber its type. */
        if (ferry__type_name_validate(w.type_name) != FERRY_OK)
            why = "welcome with an invalid type name";
        else
            ferry__endpoint_adopt_type(&sub->ep, w.type_name, w.type_hash);
    } else if (w.type_hash != sub->ep.type_hash || strcmp(w.type_name, sub->ep.type_name) != 0) {
        sub->stats.rejected++;
        sub->type_refused = true;
        remember_refused(sub, c->name);
        snprintf(mismatch, sizeof mismatch,
                 "type mismatch: it publishes %.48s/%016llx, we take %.48s/%016llx", w.type_name,
                 (unsigned long long)w.type_hash, sub->ep.type_name,
                 (unsigned long long)sub->ep.type_hash);
        why = mismatch;
    }
    if (why) {
        if (err || nfds != 2)
            sub->stats.protocol_errors++;
        ferry__log_peer(sub->ep.node, &sub->ep.peer_log, FERRY_LOG_WARN, "%s: publisher pid %d: %s",
                        sub->ep.topic, (int)c->pid, why);
        for (int i = 0; i < nfds; i++)
            ferry__fd_dispose(fds[i]);
        ferry__sub_conn_close(sub, c);
        return;
    }
    /* On a 2 MiB boundary and asking for huge pages: where the publisher's pool has them (THP
     * or hugetlb), they map here with PMDs too; where it has none, this changes nothing. */
    const uint8_t *data = ferry__map_huge(fds[0], data_size, false);
    ferry__conn ring;
    memset(&ring, 0, sizeof ring);
    bool mapped =
        ferry__conn_map(&ring, fds[1], conn_size, w.deliver_capacity, w.return_capacity) == 0;
    ferry__conn_header *hdr = ring.hdr;
    /* Three bitmaps in one block: chunks held, chunks already populated (prefault), chunks found
     * allocated. */
    uint64_t *bits = calloc(3 * (size_t)((w.max_chunks + 63) / 64), sizeof *bits);
    ferry__fd_dispose(fds[1]);
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
        ferry__fd_dispose(fds[0]);
        ferry__unmap((void *)data, data_size);
        if (mapped)
            ferry__conn_unmap(&ring);
        free(bits);
        ferry__sub_conn_close(sub, c);
        return;
    }
    c->data = data;
    c->data_size = data_size;
    c->ring = ring;
    c->max_chunks = w.max_chunks;
    c->table_offset = w.table_offset;
    c->arena_offset = w.arena_offset;
    c->payload_offset = w.payload_offset;
    c->rhead = ferry__conn_return_start(&c->ring);
    c->rtail_seen = c->rhead;
    c->held_bits = bits;
    c->seen_bits = bits + (w.max_chunks + 63) / 64;
    c->backed_bits = bits + 2 * ((w.max_chunks + 63) / 64);
    c->data_fd = fds[0];
    /* A connection made while paused starts paused. What the publisher delivered before it
     * could see this (history) is given back unread. */
    if (sub->paused)
        atomic_store_explicit(&hdr->sub_paused, 1, memory_order_seq_cst);
    if (sub->opt.background)
        atomic_store_explicit(&hdr->sub_background, 1, memory_order_relaxed);
    atomic_store_explicit(&hdr->sub_cpu, ferry__spin_word(&sub->spin), memory_order_relaxed);
    sub->spin.next_look = 0; /* the publisher's word counts at the next housekeeping */
    c->pub_id = w.publisher_id;
    c->state = SC_ACTIVE;
    forget_refusal(sub, c->name);
    sub->nactive++;
    sub->live[sub->nlive++] = (uint16_t)(c - sub->conns);
    ferry__sub_update_stats(sub);
    ferry__log(sub->ep.node, FERRY_LOG_DEBUG, "%s: connected to publisher pid %d", sub->ep.topic,
               (int)c->pid);
}

/* Connects c (a free place, or a queued connection tried again) to the publisher c->name and
 * sends our hello. A full listen backlog keeps the place queued; any other failure frees it. */
static void connect_place(ferry_subscriber *sub, sconn *c)
{
    int64_t now = ferry__clock_ns();
    int fd = ferry__connect_at(sub->ep.dirfd, c->name);
    if (fd < 0 && errno == EAGAIN) {
        /* Its backlog is full: it has not accepted for a while (it accepts in its housekeeping,
         * which a camera runs in its loans only) or a flood of connections fills it. */
        if (c->state == SC_FREE) {
            c->state = SC_QUEUED;
            c->first_try = now;
            c->told = false;
            sub->nconns++;
            sub->nqueued++;
        }
        c->since = now;
        return;
    }
    const char *name = c->name;
    if (fd < 0) {
        if (errno != ECONNREFUSED && errno != ENOENT)
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
        }
        if (c->state != SC_FREE)
            ferry__sub_conn_close(sub, c);
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
        ferry__sock_dispose(fd);
        if (c->state != SC_FREE)
            ferry__sub_conn_close(sub, c);
        return;
    }
    ferry__hello h;
    ferry__msg_init(&h, sizeof h, FERRY__MSG_HELLO);
    h.subscriber_id = sub->ep.id;
    h.type_hash = sub->ep.type_hash;
    h.pid = (int32_t)getpid();
    h.depth = sub->opt.depth;
    h.overflow = (uint32_t)sub->opt.overflow;
    h.history = sub->opt.history;
    h.require = sub->opt.require;
    memcpy(h.topic, sub->ep.topic, sizeof h.topic);
    memcpy(h.type_name, sub->ep.type_name, sizeof h.type_name);
    memcpy(h.node_name, sub->ep.node->name, sizeof h.node_name);
    if (ferry__send_msg(fd, &h, sizeof h, NULL, 0) != 0) {
        ferry__sock_dispose(fd);
        if (c->state != SC_FREE)
            ferry__sub_conn_close(sub, c);
        return;
    }
    uint32_t slot = (uint32_t)(c - sub->conns);
    if (c->state == SC_FREE) {
        sub->nconns++;
        c->first_try = now;
        c->told = false;
    } else {
        sub->nqueued--;
        c->told = false; /* a new reason to wait, said once more */
    }
    c->state = SC_PENDING;
    c->sock = fd;
    c->pid = (int32_t)pid;
    c->since = now;
    if (ferry__poller_add(sub->ep.epfd, fd, ferry__tag(FERRY__TAG_CONN, slot, c->gen)) != 0)
        ferry__sub_conn_close(sub, c);
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
    snprintf(c->name, sizeof c->name, "%s", name);
    connect_place(sub, c);
}

static bool known(ferry_subscriber *sub, const char *name)
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
void ferry__sub_scan(ferry_subscriber *sub)
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
                ferry__fd_dispose(a->fds[i]);
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
            ferry__fd_dispose(a->fds[i]);
    }
    a->key = m->key;
    a->nfds = (int)m->nfds;
    memcpy(a->fds, fds, (size_t)a->nfds * sizeof *fds);
    return true;
}

/* Reads what an active publisher sent (wake-ups, attachments), up to max messages; a hang-up
 * ends it. */
void ferry__sub_read_messages(ferry_subscriber *sub, sconn *c, bool hup, int max)
{
    unsigned excess = 0;
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
                ferry__fd_dispose(fds[i]);
            conn_gone(sub, c, true);
            return;
        }
        if (nfds == 0 && ferry__ctl_decode(buf.raw, (size_t)got) == FERRY__MSG_WAKE) {
            /* One per notifier doorbell we set is the publisher's due; beyond those, a few
             * may be late, more are a flood. */
            if (c->wake_credit > 0)
                c->wake_credit--;
            else if (++excess > FERRY__WAKE_FLOOD) {
                ferry__sub_conn_fail(sub, c, "a flood of wake-ups");
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
                ferry__fd_dispose(fds[i]);
            ferry__sub_conn_fail(sub, c, "unexpected message");
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
            ferry__sub_read_messages(sub, c, false, 64);
    }
    return FERRY_EAGAIN;
}

/* Logs why c has waited so long, once. */
static void say_stuck(ferry_subscriber *sub, sconn *c, int64_t now)
{
    double s = (double)(now - c->first_try) / 1e9;
    c->told = true;
    if (c->state == SC_QUEUED) {
        ferry__log_peer(sub->ep.node, &sub->ep.peer_log, FERRY_LOG_WARN,
                        "%s: cannot connect to publisher %s: its listen backlog has been full for "
                        "%.1f s (it is stalled, or flooded with connections); still trying",
                        sub->ep.topic, c->name, s);
    } else if (ferry__sock_unread(c->sock) > 0) {
        ferry__log_peer(sub->ep.node, &sub->ep.peer_log, FERRY_LOG_WARN,
                        "%s: publisher %s (pid %d) has not read our hello in %.1f s (it is "
                        "stalled, or its queue of pending connections is flooded); still waiting",
                        sub->ep.topic, c->name, (int)c->pid, s);
    } else {
        ferry__log_peer(sub->ep.node, &sub->ep.peer_log, FERRY_LOG_WARN,
                        "%s: publisher %s (pid %d) did not answer our hello within %.1f s",
                        sub->ep.topic, c->name, (int)c->pid, s);
    }
}

void ferry__sub_say_stuck(ferry_subscriber *sub, int64_t min_ns)
{
    int64_t now = ferry__clock_ns();
    for (uint32_t i = 0; i < sub->opt.max_publishers && sub->nconns; i++) {
        sconn *c = &sub->conns[i];
        if ((c->state == SC_QUEUED || c->state == SC_PENDING) && !c->told &&
            now - c->first_try >= min_ns)
            say_stuck(sub, c, now);
    }
}

/* Where this thread and the publishers may run decides how ferry_wait spins (spin.h): our
 * word written where it changed, theirs counted. */
static void look_at_cpus(ferry_subscriber *sub, int64_t now)
{
    if (!ferry__spin_look(&sub->spin, now))
        return;
    uint32_t word = ferry__spin_word(&sub->spin);
    for (uint32_t k = 0; k < sub->nlive; k++) {
        sconn *c = &sub->conns[sub->live[k]];
        if (c->state != SC_ACTIVE)
            continue;
        ferry__conn_header *h = c->ring.hdr;
        if (atomic_load_explicit(&h->sub_cpu, memory_order_relaxed) != word)
            atomic_store_explicit(&h->sub_cpu, word, memory_order_relaxed);
        ferry__spin_peer(&sub->spin, atomic_load_explicit(&h->pub_cpu, memory_order_relaxed));
    }
    ferry__spin_decide(&sub->spin);
}

void ferry__sub_housekeep(ferry_subscriber *sub, int64_t timeout_ns)
{
    ferry__event ev[16];
    /* A queued connection has no socket to wake us: it is tried again after a short sleep. */
    if (sub->nqueued > 0 && (timeout_ns < 0 || timeout_ns > QUEUED_RETRY_NS))
        timeout_ns = QUEUED_RETRY_NS;
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
                ferry__sub_read_messages(sub, c, ev[i].hup || ev[i].err, 64);
            }
        }
    }
    int64_t now = ferry__clock_ns();
    if (sub->rescan || now >= sub->next_rescan)
        ferry__sub_scan(sub);
    ferry__endpoint_sweep(&sub->ep, now);
    for (uint32_t i = 0; i < sub->opt.max_publishers && sub->nconns; i++) {
        sconn *c = &sub->conns[i];
        if (c->state == SC_GONE && c->held == 0 && ferry__sub_ring_empty(c)) {
            ferry__sub_conn_close(sub, c);
        } else if (c->state == SC_QUEUED) {
            if (now - c->since >= QUEUED_RETRY_NS)
                connect_place(sub, c);
            if (c->state == SC_QUEUED && !c->told && now - c->first_try > PENDING_TIMEOUT_NS)
                say_stuck(sub, c, now);
        } else if (c->state == SC_PENDING && now - c->since > PENDING_TIMEOUT_NS) {
            if (ferry__sock_unread(c->sock) > 0) {
                /* Not accepted yet: its place in the publisher's queue is kept a while. */
                if (!c->told)
                    say_stuck(sub, c, now);
                if (now - c->since > UNREAD_TIMEOUT_NS) {
                    ferry__log_peer(sub->ep.node, &sub->ep.peer_log, FERRY_LOG_WARN,
                                    "%s: publisher %s (pid %d) has not read our hello in %.0f s; "
                                    "connecting again",
                                    sub->ep.topic, c->name, (int)c->pid, UNREAD_TIMEOUT_NS / 1e9);
                    ferry__sub_conn_close(sub, c);
                }
                continue;
            }
            /* A listener that read our hello and does not answer: its place goes to others,
             * and it is tried again after a back-off (a publisher stalled for a while). */
            remember_silent(sub, c->name, now);
            ferry__log_peer(sub->ep.node, &sub->ep.peer_log, FERRY_LOG_WARN,
                            "%s: publisher %s (pid %d) did not answer our hello within 2 s; "
                            "trying again in %.0f s",
                            sub->ep.topic, c->name, (int)c->pid,
                            refusal_of(sub, c->name)->backoff / 1e9);
            ferry__sub_conn_close(sub, c);
        }
    }
    if (sub->paused)
        ferry__sub_discard_queued(sub);
    look_at_cpus(sub, now);
    ferry__sub_publish_status(sub);
    sub->next_housekeep = ferry__clock_ns() + FERRY__HOUSEKEEP_NS;
}

void ferry__subscriber_housekeep(ferry_subscriber *sub)
{
    ferry__sub_housekeep(sub, 0);
}
