/*
 * The publisher's control plane: connections that wait for their hello in places of their own,
 * the handshake that admits or refuses a subscriber (with a reason it prints), the welcome with
 * the segments, attachments, goodbyes and wake-ups, and housekeeping, which runs all of it from
 * the publisher's poller. See publisher.h.
 */
#include "core/publisher.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* An honest subscriber sends its hello right after it connects, before we even accept: one that
 * has sent none within a second is dropped. */
#define HELLO_TIMEOUT_NS 1000000000LL

void ferry__pub_conn_close(ferry_publisher *pub, pconn *c, bool lost)
{
    if (c->state == PC_FREE)
        return;
    {
        /* Take back every reference the subscriber had: queued, held, or in flight back. */
        uint32_t reclaimed = 0;
        for (uint32_t w = 0; w < pub->words; w++) {
            while (c->bits[w]) {
                uint32_t i = w * 64 + (uint32_t)__builtin_ctzll(c->bits[w]);
                ferry__pub_drop_ref(pub, c, i);
                reclaimed++;
            }
        }
        /* Every reference it had went back above, from its peer's share too. */
        pub->shares[c->share].conns--;
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
                        "%s: subscriber pid %d left, %u chunk references taken back", pub->ep.topic,
                        (int)c->pid, reclaimed);
    }
    ferry__poller_del(pub->ep.epfd, c->sock);
    ferry__sock_dispose(c->sock);
    uint64_t *bits = c->bits;
    uint32_t gen = c->gen + 1;
    memset(c, 0, sizeof *c);
    c->bits = bits;
    c->gen = gen;
    c->state = PC_FREE;
    ferry__pub_sync_stats(pub);
}

void ferry__pub_conn_fail(ferry_publisher *pub, pconn *c, const char *why)
{
    pub->stats.protocol_errors++;
    ferry__log_peer(pub->ep.node, &pub->ep.peer_log, FERRY_LOG_WARN,
                    "%s: subscriber pid %d disconnected: %s", pub->ep.topic, (int)c->pid, why);
    ferry__pub_conn_close(pub, c, true);
}

/* Frees a pending connection's place, closing its socket. */
void ferry__pub_pending_close(ferry_publisher *pub, pending *p)
{
    if (p->sock < 0)
        return;
    ferry__poller_del(pub->ep.epfd, p->sock);
    ferry__sock_dispose(p->sock);
    p->sock = -1;
    p->gen++;
    pub->npending--;
}

static void pending_drop(ferry_publisher *pub, pending *p, const char *why)
{
    pub->stats.pending_dropped++;
    ferry__log_peer(pub->ep.node, &pub->ep.peer_log, FERRY_LOG_WARN,
                    "%s: connection from pid %d dropped: %s", pub->ep.topic, (int)p->pid, why);
    ferry__pub_pending_close(pub, p);
}

bool ferry__pub_send_attachment(ferry_publisher *pub, pconn *c, const struct attachment *a)
{
    ferry__attach_msg m;
    ferry__msg_init(&m, sizeof m, FERRY__MSG_ATTACH);
    m.key = a->key;
    m.nfds = (uint32_t)a->nfds;
    if (ferry__send_msg(c->sock, &m, sizeof m, a->fds, a->nfds) == 0)
        return true;
    int e = errno;
    /* A reset or broken connection is a subscriber that died or left (not news: it says so
     * only at debug level); its chunks are reclaimed. */
    bool gone = e == EPIPE || e == ECONNRESET;
    ferry__log(pub->ep.node, gone ? FERRY_LOG_DEBUG : FERRY_LOG_WARN,
               "%s: attachment to pid %d failed: %s", pub->ep.topic, (int)c->pid, strerror(e));
    ferry__pub_conn_close(pub, c, gone);
    return false;
}

/* A welcome's fields that say who answers: status, pid, publisher and type. */
static void welcome_init(const ferry_publisher *pub, ferry__welcome *w, ferry_err status)
{
    ferry__msg_init(w, sizeof *w, FERRY__MSG_WELCOME);
    w->status = (int32_t)status;
    w->pid = (int32_t)getpid();
    w->publisher_id = pub->ep.id;
    w->type_hash = pub->ep.type_hash;
    w->offered = ferry__pub_offered(pub);
    memcpy(w->type_name, pub->ep.type_name, sizeof w->type_name);
}

/* Refuses a pending connection with a welcome that says why (the refused subscriber prints
 * it), then closes it. */
static void reject(ferry_publisher *pub, pending *p, ferry_err status, const char *why)
{
    ferry__welcome w;
    welcome_init(pub, &w, status);
    snprintf(w.reason, sizeof w.reason, "%s", why);
    ferry__send_msg(p->sock, &w, sizeof w, NULL, 0);
    pub->stats.rejected++;
    ferry__log_peer(pub->ep.node, &pub->ep.peer_log, FERRY_LOG_WARN,
                    "%s: refused subscriber pid %d: %s", pub->ep.topic, (int)p->pid, why);
    ferry__pub_pending_close(pub, p);
}

static pconn *free_conn(ferry_publisher *pub)
{
    for (uint32_t i = 0; i < pub->opt.max_subscribers; i++)
        if (pub->conns[i].state == PC_FREE)
            return &pub->conns[i];
    return NULL;
}

/* The peer a connection belongs to: a process of this publisher's user (which could do anything
 * to this process anyway), or all the processes of another user together. */
static uint64_t peer_key(int32_t pid, uint32_t uid)
{
    return uid == (uint32_t)geteuid() ? (uint64_t)(uint32_t)pid : ((uint64_t)1 << 32) | uid;
}

/* The place of the peer's share, joined by one more connection. There is always one: a free
 * place per connection. */
static uint32_t share_join(ferry_publisher *pub, int32_t pid, uint32_t uid)
{
    uint64_t key = peer_key(pid, uid);
    uint32_t free_place = UINT32_MAX;
    for (uint32_t i = 0; i < pub->opt.max_subscribers; i++) {
        peer_share *sh = &pub->shares[i];
        if (sh->conns > 0 && sh->key == key) {
            sh->conns++;
            return i;
        }
        if (sh->conns == 0 && free_place == UINT32_MAX)
            free_place = i;
    }
    peer_share *sh = &pub->shares[free_place];
    memset(sh, 0, sizeof *sh);
    sh->key = key;
    sh->conns = 1;
    return free_place;
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
        ferry__fd_dispose(fds[i]);
    if (n <= 0) {
        if (n < 0)
            ferry__log_peer(pub->ep.node, &pub->ep.peer_log, FERRY_LOG_WARN,
                            "%s: hello from pid %d lost: %s", pub->ep.topic, (int)p->pid,
                            strerror(errno));
        ferry__pub_pending_close(pub, p);
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
    /* An untyped subscriber (no type name) takes whatever this topic carries. */
    if (hello.type_name[0] != '\0' &&
        (hello.type_hash != pub->ep.type_hash || strcmp(hello.type_name, pub->ep.type_name) != 0)) {
        snprintf(why, sizeof why,
                 "type mismatch (it has %.48s/%016llx, the topic has %.48s/%016llx)",
                 hello.type_name, (unsigned long long)hello.type_hash, pub->ep.type_name,
                 (unsigned long long)pub->ep.type_hash);
        reject(pub, p, FERRY_ETYPE, why);
        return;
    }
    uint32_t lacking = hello.require & ~ferry__pub_offered(pub);
    if (lacking) {
        pub->stats.incompatible++;
        pub->stats.incompatible_policies = lacking;
        snprintf(why, sizeof why,
                 "incompatible QoS: it requires %s, which this publisher does not offer",
                 ferry__qos_names(lacking));
        reject(pub, p, FERRY_EQOS, why);
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
    welcome_init(pub, &w, FERRY_OK);
    w.data_size = pub->pool.size;
    w.table_offset = (uint64_t)((uint8_t *)pub->pool.table - pub->pool.base);
    w.arena_offset = pub->pool.arena_offset;
    w.payload_offset = pub->pool.payload_offset;
    w.conn_size = ring.size;
    w.max_chunks = pub->opt.max_chunks;
    w.depth = depth;
    w.deliver_capacity = ring.dmask + 1;
    w.return_capacity = ring.rmask + 1;

    /* The socket moves from its pending place to the connection's. */
    uint32_t slot = (uint32_t)(c - pub->conns);
    int sock = p->sock;
    int32_t pid = p->pid;
    c->share = share_join(pub, pid, p->uid);
    ferry__poller_del(pub->ep.epfd, sock);
    p->sock = -1;
    p->gen++;
    pub->npending--;
    c->sock = sock;
    c->pid = pid;
    c->since = ferry__clock_ns();
    c->conn_fd = fd;
    c->ring = ring;
    atomic_store_explicit(&ring.hdr->pub_cpu, ferry__spin_word(&pub->spin), memory_order_relaxed);
    c->depth = depth;
    c->overflow = (uint8_t)hello.overflow;
    c->sub_id = hello.subscriber_id;
    c->state = PC_ACTIVE;
    pub->active[pub->nactive++] = (uint16_t)slot;
    pub->nblocking += c->overflow == FERRY_OVERFLOW_BLOCK;
    if (ferry__poller_add(pub->ep.epfd, sock, ferry__tag(FERRY__TAG_CONN, slot, c->gen)) != 0) {
        ferry__pub_conn_close(pub, c, false);
        return;
    }

    int send_fds[2] = {pub->pool.ro_fd, fd};
    if (ferry__send_msg(c->sock, &w, sizeof w, send_fds, 2) != 0) {
        ferry__log_peer(pub->ep.node, &pub->ep.peer_log, FERRY_LOG_WARN,
                        "%s: welcome to pid %d failed: %s", pub->ep.topic, (int)c->pid,
                        strerror(errno));
        ferry__pub_conn_close(pub, c, false);
        return;
    }
    /* Attachments before any sample: a sample may refer to them. */
    for (uint32_t k = 0; k < pub->nattachments; k++)
        if (!ferry__pub_send_attachment(pub, c, &pub->attachments[k]))
            return;
    /* Late joiner: the last samples, oldest first. */
    uint32_t want = hello.history < pub->hist_len ? hello.history : pub->hist_len;
    for (uint32_t k = 0; k < want; k++) {
        uint32_t pos = (pub->hist_head + pub->opt.history - want + k) % pub->opt.history;
        if (!ferry__pub_deliver(pub, c, pub->history[pos], k + 1 == want))
            return;
    }
    ferry__log(pub->ep.node, FERRY_LOG_DEBUG, "%s: subscriber pid %d connected", pub->ep.topic,
               (int)c->pid);
    ferry__pub_sync_stats(pub);
}

/* A place for a new pending connection: a free one, else the oldest's, dropped for it unless
 * its hello came meanwhile (a subscriber sends it right after its connect, which may have been
 * accepted first). */
static pending *pending_place(ferry_publisher *pub)
{
    for (;;) {
        pending *oldest = NULL;
        for (uint32_t i = 0; i < pub->opt.max_pending; i++) {
            pending *p = &pub->pending[i];
            if (p->sock < 0)
                return p;
            if (!oldest || p->since < oldest->since)
                oldest = p;
        }
        handshake(pub, oldest);
        if (oldest->sock >= 0) {
            pending_drop(pub, oldest, "no hello yet, and its place went to a newer connection");
            return oldest;
        }
    }
}

/* Accepts every connection waiting in the listen backlog, up to a bound: a publisher that runs
 * housekeeping only in its loans (a camera sleeping between frames) empties a backlog that a
 * flood of silent connections filled, and the honest connections queued among them, whose hello
 * is there already, are admitted in the same pass. */
#define ACCEPT_MAX (FERRY__LISTEN_BACKLOG + 16)

static void accept_all(ferry_publisher *pub)
{
    for (int k = 0; k < ACCEPT_MAX; k++) {
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
                            "%s: refused connection from pid %d uid %u: not allowed", pub->ep.topic,
                            (int)pid, (unsigned)uid);
            ferry__sock_dispose(fd);
            continue;
        }
        pending *p = pending_place(pub);
        uint32_t slot = (uint32_t)(p - pub->pending);
        p->sock = fd;
        p->pid = (int32_t)pid;
        p->uid = (uint32_t)uid;
        p->since = ferry__clock_ns();
        pub->npending++;
        if (ferry__poller_add(pub->ep.epfd, fd, ferry__tag(FERRY__TAG_PENDING, slot, p->gen)) !=
            0) {
            ferry__pub_pending_close(pub, p);
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
                ferry__pub_conn_close(pub, c, true);
            return;
        }
        if (got <= 0) {
            ferry__pub_conn_close(pub, c, true);
            return;
        }
        uint32_t kind = ferry__ctl_decode(&m, (size_t)got);
        if (kind == FERRY__MSG_BYE) {
            ferry__pub_conn_close(pub, c, false);
            return;
        }
        if (kind != FERRY__MSG_WAKE) {
            ferry__pub_conn_fail(pub, c, "unexpected message");
            return;
        }
    }
    ferry__pub_conn_fail(pub, c, "a flood of wake-ups");
}

/* Where this thread and the subscribers may run decides how the blocking waits spin (spin.h):
 * our word written where it changed, theirs counted. */
static void look_at_cpus(ferry_publisher *pub, int64_t now)
{
    if (!ferry__spin_look(&pub->spin, now))
        return;
    uint32_t word = ferry__spin_word(&pub->spin);
    for (uint32_t i = 0; i < pub->nactive; i++) {
        ferry__conn_header *h = pub->conns[pub->active[i]].ring.hdr;
        if (atomic_load_explicit(&h->pub_cpu, memory_order_relaxed) != word)
            atomic_store_explicit(&h->pub_cpu, word, memory_order_relaxed);
        ferry__spin_peer(&pub->spin, atomic_load_explicit(&h->sub_cpu, memory_order_relaxed));
    }
    ferry__spin_decide(&pub->spin);
}

void ferry__pub_housekeep(ferry_publisher *pub, int64_t timeout_ns)
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
    ferry__pub_drain_all_returns(pub);
    int64_t now = ferry__clock_ns();
    look_at_cpus(pub, now);
    ferry__pub_publish_status(pub);
    if (!pub->publishing)
        ferry__endpoint_sweep(&pub->ep, now);
    pub->next_housekeep = now + FERRY__PUB_HOUSEKEEP_NS;
}

/* Asks every subscriber to signal our notifier when it takes or returns, then sleeps at most
 * until deadline. for_room: we wait for room in the queues of subscribers that block us, and
 * ask those to signal only once half their queue is free (the others' takes and every return
 * make none); a subscriber that stops taking before that leaves us to look again after a
 * millisecond, so a slow one still gets its publications at its own pace. */
void ferry__pub_sleep_for_subscribers(ferry_publisher *pub, int64_t deadline, bool for_room)
{
    for (uint32_t k = 0; k < pub->nactive; k++) {
        pconn *c = &pub->conns[pub->active[k]];
        uint32_t want = 0;
        if (for_room)
            want = c->overflow == FERRY_OVERFLOW_BLOCK ? (c->depth + 1) / 2 : UINT32_MAX;
        atomic_store_explicit(&c->ring.hdr->pub_wake_room, want, memory_order_relaxed);
    }
    /* The wanted room before the doorbells: a subscriber that sees a doorbell sees its room. */
    atomic_thread_fence(memory_order_release);
    for (uint32_t k = 0; k < pub->nactive; k++)
        ferry__conn_doorbell_set(&pub->conns[pub->active[k]].ring.hdr->pub_waiting,
                                 FERRY__DOORBELL_NOTIFIER);
    /* Pairs with the subscriber's fence after its take or return. */
    ferry__conn_doorbell_fence();
    ferry__pub_drain_all_returns(pub);
    int64_t left = ferry__remaining(deadline);
    /* Bound each sleep so a subscriber that missed the doorbell (or stopped short of the
     * wanted room) cannot stall us. */
    int64_t cap = for_room ? 1000000 : 10000000;
    if (left < 0 || left > cap)
        left = cap;
    ferry__pub_housekeep(pub, left);
}
