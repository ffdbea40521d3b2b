/*
 * Hostile peers, each in a process of its own: a subscriber that scribbles over its connection
 * segment, a publisher that scribbles over its data segment and its connection segment, a process
 * that sends garbage to a publisher's socket, and a fake publisher that answers hellos with
 * garbage welcomes or with segments that change under the subscriber's feet. Each time the
 * honest side disconnects the offender with an error logged and counted, crashes not, reads
 * nothing outside its mappings, leaks no descriptor, and keeps serving the honest peers, whose
 * frames arrive intact.
 *
 * Usage: hostile_test [scenario...]; no argument runs every scenario.
 */
#include "testutil.h"

#include "core/core.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <unistd.h>

#define TYPE "test/hostile"
#define TOPIC "/hostile"
#define FAKE_ID 0xfa4e000000000000ull

enum { MSG_READY = 1, MSG_GO, MSG_DONE, MSG_QUIT, MSG_STOP };

/* ---- shared helpers -------------------------------------------------------------------------- */

static char log_text[32768];
static size_t log_len;
static int log_lines; /* all lines ever logged, also those the buffer no longer holds */

static void log_capture(void *arg, ferry_log_level level, const char *message)
{
    (void)arg;
    (void)level;
    log_lines++;
    size_t n = strlen(message);
    if (log_len + n + 2 > sizeof log_text)
        log_len = 0; /* keep the recent lines */
    memcpy(log_text + log_len, message, n);
    log_text[log_len + n] = '\n';
    log_len += n + 1;
    log_text[log_len] = '\0';
}

static bool log_has(const char *needle)
{
    return strstr(log_text, needle) != NULL;
}

/* Lines of the log that contain needle. */
static int log_count(const char *needle)
{
    int n = 0;
    for (const char *p = log_text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

static ferry_node *hostile_node(const char *name)
{
    ferry_node_options o = tu_node_options(name);
    o.log = log_capture;
    o.log_level = FERRY_LOG_INFO;
    log_len = 0;
    log_text[0] = '\0';
    ferry_node *node = NULL;
    TU_OK(ferry_node_create(&node, &o));
    return node;
}

typedef struct region {
    uint8_t *start;
    size_t len;
} region;

/* Mappings of this process whose /proc/self/maps line contains needle, with permissions perms. */
static int find_regions(const char *needle, const char *perms, region *out, int cap)
{
    tu_mapping m[16];
    int n = tu_maps_find(needle, perms, m, 16);
    for (int i = 0; i < n && i < cap && i < 16; i++) {
        out[i].start = (uint8_t *)m[i].start;
        out[i].len = m[i].end - m[i].start;
    }
    return n;
}

static region only_region(const char *needle, const char *perms)
{
    region r = {NULL, 0};
    TU_CMP_I64(find_regions(needle, perms, &r, 1), ==, 1);
    return r;
}

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void fill_random(void *p, size_t n, uint64_t seed)
{
    uint8_t *b = p;
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = rng_next(&seed);
        memcpy(b + i, &v, n - i < 8 ? n - i : 8);
    }
}

static size_t frame_size(uint64_t seq)
{
    return 512 + (size_t)(seq * 977 % 3000);
}

/* Publishes the next frame (pattern of its sequence number) when the pool has room. */
static bool publish_next(ferry_publisher *pub, uint64_t *seq)
{
    void *p = NULL;
    ferry_err e = ferry_loan(pub, frame_size(*seq + 1), &p);
    if (e == FERRY_EPOOL)
        return false;
    TU_OK(e);
    tu_fill(p, frame_size(*seq + 1), *seq + 1);
    TU_OK(ferry_publish(pub, p, 0));
    ++*seq;
    return true;
}

static void sock_path(const char *topic, const char *name, char *out, size_t cap)
{
    char dir[PATH_MAX];
    tu_topic_path(topic, dir, sizeof dir);
    int n = snprintf(out, cap, "%s/%s", dir, name);
    TU_CHECK(n > 0 && (size_t)n < cap);
}

/* The socket name of the only publisher of topic. */
static void publisher_sock(const char *topic, char *out, size_t cap)
{
    char dir[PATH_MAX];
    tu_topic_path(topic, dir, sizeof dir);
    DIR *d = opendir(dir);
    TU_CHECK(d != NULL);
    struct dirent *e;
    bool found = false;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (strncmp(e->d_name, "pub.", 4) == 0 && n > 5 &&
            strcmp(e->d_name + n - 5, ".sock") == 0) {
            TU_CHECK(!found);
            sock_path(topic, e->d_name, out, cap);
            found = true;
        }
    }
    closedir(d);
    TU_CHECK(found);
}

static int raw_connect(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    TU_CHECK(fd >= 0);
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    TU_CHECK(strlen(path) < sizeof a.sun_path);
    memcpy(a.sun_path, path, strlen(path) + 1);
    TU_CHECK_MSG(connect(fd, (struct sockaddr *)&a, sizeof a) == 0, "connect %s: %s", path,
                 strerror(errno));
    return fd;
}

static void raw_send(int sock, const void *buf, size_t len, const int *fds, int nfds)
{
    TU_CHECK_MSG(ferry__send_msg(sock, buf, len, fds, nfds) == 0, "send: %s", strerror(errno));
}

/* Receives one datagram (waiting up to timeout_ms); its descriptors go to fds (up to 8), the
 * count to *nfds. Returns the byte count, 0 at hang-up, -1 on timeout. */
static ssize_t raw_recv(int sock, void *buf, size_t cap, int *fds, int *nfds, int timeout_ms)
{
    *nfds = 0;
    struct pollfd pf = {.fd = sock, .events = POLLIN};
    if (poll(&pf, 1, timeout_ms) != 1)
        return -1;
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(8 * sizeof(int))];
    } control;
    struct iovec iov = {.iov_base = buf, .iov_len = cap};
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.buf;
    msg.msg_controllen = sizeof control.buf;
    ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n < 0 && errno == ECONNRESET)
        return 0;
    TU_CHECK_MSG(n >= 0, "recvmsg: %s", strerror(errno));
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count && *nfds < 8; i++)
            memcpy(&fds[(*nfds)++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
    }
    return n;
}

static void close_all(int *fds, int n)
{
    for (int i = 0; i < n; i++)
        close(fds[i]);
}

/* Reads until the peer hangs up; returns the status of the last welcome seen (-1 for none). */
static int wait_hangup(int sock, int timeout_ms)
{
    int status = -1;
    ferry_time t0 = ferry_now();
    for (;;) {
        union {
            ferry__welcome w;
            char raw[sizeof(ferry__welcome) + 64];
        } buf;
        int fds[8], nfds;
        int left = timeout_ms - (int)(tu_since(t0) / TU_MS);
        TU_CHECK_MSG(left > 0, "the peer did not hang up within %d ms", timeout_ms);
        ssize_t n = raw_recv(sock, buf.raw, sizeof buf.raw, fds, &nfds, left);
        close_all(fds, nfds);
        if (n == 0)
            return status;
        if (n == (ssize_t)sizeof(ferry__welcome) && buf.w.magic == FERRY__MSG_MAGIC)
            status = buf.w.status;
    }
}

static int make_eventfd(void)
{
    int fd = eventfd(0, EFD_CLOEXEC);
    TU_CHECK(fd >= 0);
    return fd;
}

static int make_pipe_end(void)
{
    int p[2];
    TU_CHECK(pipe2(p, O_CLOEXEC) == 0);
    close(p[1]);
    return p[0];
}

static int make_regular_file(void)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/regular-file", tu_dir());
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    TU_CHECK(fd >= 0);
    unlink(path);
    return fd;
}

static void hello_init(ferry__hello *h, const char *topic)
{
    memset(h, 0, sizeof *h);
    h->magic = FERRY__MSG_MAGIC;
    h->version = FERRY_PROTOCOL_VERSION;
    h->kind = FERRY__MSG_HELLO;
    h->subscriber_id = 0x5ca1ab1e;
    h->type_hash = ferry_hash(TYPE);
    h->pid = (int32_t)getpid();
    h->depth = 2;
    snprintf(h->topic, sizeof h->topic, "%s", topic);
    snprintf(h->type_name, sizeof h->type_name, "%s", TYPE);
    snprintf(h->node_name, sizeof h->node_name, "raw");
}

/* A peer process and the two pipes to talk to it. */
typedef struct peer {
    tu_pipe up, down; /* child -> test, test -> child */
    int variant;
} peer;

static peer peer_make(int variant)
{
    peer p = {tu_pipe_make(), tu_pipe_make(), variant};
    return p;
}

static void peer_close(peer *p)
{
    tu_pipe_close(&p->up);
    tu_pipe_close(&p->down);
}

/* A child forked after the test's own endpoints exist inherits their descriptors and mappings;
 * it drops them first, so that it is a peer of its own and hang-ups are seen where they
 * happen. Its teardown check then counts from there. */
static int child_fds;

static void child_scrub(void)
{
    static tu_mapping doomed[256];
    for (int k = 0; k < 2; k++) {
        int n = tu_maps_find(k == 0 ? "memfd:ferry" : tu_dir(), NULL, doomed, 256);
        for (int i = 0; i < n && i < 256; i++)
            munmap((void *)doomed[i].start, doomed[i].end - doomed[i].start);
    }
    /* The library's descriptors are close-on-exec, the test's pipes are not. */
    DIR *d = opendir("/proc/self/fd");
    TU_CHECK(d != NULL);
    int fds[256], nfds = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && nfds < 256)
        if (e->d_name[0] != '.')
            fds[nfds++] = atoi(e->d_name);
    int self = dirfd(d);
    for (int i = 0; i < nfds; i++) {
        int flags = fds[i] > 2 && fds[i] != self ? fcntl(fds[i], F_GETFD) : -1;
        if (flags >= 0 && (flags & FD_CLOEXEC))
            close(fds[i]);
    }
    closedir(d);
    child_fds = tu_fd_count();
}

static void child_teardown(void)
{
    TU_CMP_I64(tu_fd_count(), ==, child_fds);
    tu_check_no_mappings();
    TU_CMP_I64(tu_maps_count("memfd:ferry-conn"), ==, 0);
}

/* ---- a subscriber that only takes, checks and releases --------------------------------------- */

typedef struct take_stats {
    uint64_t trusted_id; /* frames of this publisher must be intact */
    uint64_t trusted;
    uint64_t other_id; /* the last other publisher seen, and its frames since */
    uint64_t other, other_after;
    bool scribbled; /* other publishers have started scribbling */
} take_stats;

/* The sample lies inside one of the read-only data segments mapped here; every byte is read. */
static void check_inside(const ferry_sample *s)
{
    region ro[8];
    int n = find_regions("memfd:ferry-data", "r--s", ro, 8);
    const uint8_t *d = s->data;
    bool inside = false;
    for (int i = 0; i < n && i < 8; i++)
        inside |=
            d >= ro[i].start && s->size <= ro[i].len && d <= ro[i].start + ro[i].len - s->size;
    TU_CHECK_MSG(inside, "sample of %zu bytes at %p lies outside every data segment", s->size,
                 s->data);
    uint8_t x = 0;
    for (size_t i = 0; i < s->size; i += 256)
        x ^= ((const volatile uint8_t *)d)[i];
    (void)x;
}

/* Takes every queued sample (holding them all, so duplicates are seen), checks, releases. */
static void take_all(ferry_subscriber *sub, take_stats *ts)
{
    ferry_sample held[32];
    int n = 0;
    while (n < 32) {
        ferry_err e = ferry_take(sub, &held[n]);
        if (e == FERRY_EAGAIN || e == FERRY_ELIMIT)
            break;
        TU_OK(e);
        const ferry_sample *s = &held[n++];
        check_inside(s);
        if (ts->trusted_id && s->publisher_id == ts->trusted_id) {
            TU_SAMPLE_INTACT(s, frame_size(s->sequence));
            ts->trusted++;
        } else {
            /* Frames from before the scribbling are intact; after, they need only lie inside
             * a mapping (checked above). */
            if (!ts->scribbled)
                TU_SAMPLE_INTACT(s, frame_size(s->sequence));
            if (s->publisher_id != ts->other_id) {
                ts->other_id = s->publisher_id;
                ts->other = ts->other_after = 0;
            }
            ts->other++;
            ts->other_after += ts->scribbled;
        }
    }
    for (int i = 0; i < n; i++)
        TU_OK(ferry_release(sub, &held[i]));
}

/* Runs the subscriber (wait, take, check, release) until the pipe has a message; returns it. */
static uint64_t sub_serve_until(ferry_subscriber *sub, take_stats *ts, const tu_pipe *p,
                                int timeout_ms)
{
    ferry_time t0 = ferry_now();
    for (;;) {
        ferry_err e = ferry_wait(sub, 2 * TU_MS);
        TU_CHECK(e == FERRY_OK || e == FERRY_ETIMEDOUT);
        take_all(sub, ts);
        if (tu_readable(p))
            return tu_recv(p, 0);
        TU_CHECK_MSG(tu_since(t0) < timeout_ms * TU_MS, "no message within %d ms", timeout_ms);
    }
}

/* ---- (a) subscribers that scribble over their connection segment ----------------------------- */

enum {
    A_RETURN_HEAD_HUGE,
    A_RETURN_NOT_HELD,
    A_RETURN_INDEX_RANGE,
    A_RETURN_TWICE,
    A_RETURN_HEAD_BACK,
    A_TAIL_PAST_HEAD,
    A_TAIL_BACK,
    A_SLOTS_GARBAGE,
    A_RANDOM,
    A_HARMLESS, /* fields the publisher never reads back: it must not care */
    A_COUNT
};
static const char *const a_names[A_COUNT] = {
    "return head huge",
    "return of a chunk not held",
    "return index out of range",
    "return twice",
    "return head backwards",
    "delivery tail past head",
    "delivery tail backwards",
    "delivery slots garbage",
    "random segment",
    "harmless fields",
};

static int good_sub_main(void *arg)
{
    child_scrub();
    peer *p = arg;
    ferry_node *node = hostile_node("good");
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = 8;
    ferry_subscriber *sub = NULL;
    TU_OK(ferry_subscriber_create(&sub, node, TOPIC, TYPE, ferry_hash(TYPE), &so));
    TU_OK(ferry_subscriber_wait_publishers(sub, 1, TU_WAIT_NS));
    tu_send(&p->up, MSG_READY);
    uint64_t final = 0, last = 0, got = 0;
    ferry_time t0 = ferry_now();
    while (final == 0 || last < final) {
        if (final == 0 && tu_readable(&p->down))
            final = tu_recv(&p->down, 0);
        ferry_err e = ferry_wait(sub, 20 * TU_MS);
        TU_CHECK(e == FERRY_OK || e == FERRY_ETIMEDOUT);
        ferry_sample s;
        while (ferry_take(sub, &s) == FERRY_OK) {
            TU_SAMPLE_INTACT(&s, frame_size(s.sequence));
            TU_CMP_U64(s.sequence, >, last);
            last = s.sequence;
            got++;
            TU_OK(ferry_release(sub, &s));
        }
        TU_CHECK_MSG(tu_since(t0) < 25 * TU_SEC, "final frame %" PRIu64 " not received", final);
    }
    ferry_subscriber_stats st;
    TU_OK(ferry_subscriber_stats_get(sub, &st));
    TU_EQ_U64(st.protocol_errors, 0);
    TU_EQ_U64(st.publishers_lost, 0);
    tu_send(&p->up, got);
    TU_EQ_U64(tu_recv(&p->down, TU_WAIT_MS), MSG_QUIT);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
    child_teardown();
    return 0;
}

static int scribbling_sub_main(void *arg)
{
    child_scrub();
    peer *p = arg;
    ferry_node *node = hostile_node("scribbler");
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = 4;
    so.max_held = 8;
    ferry_subscriber *sub = NULL;
    TU_OK(ferry_subscriber_create(&sub, node, TOPIC, TYPE, ferry_hash(TYPE), &so));
    TU_OK(ferry_subscriber_wait_publishers(sub, 1, TU_WAIT_NS));
    tu_send(&p->up, MSG_READY);
    TU_EQ_U64(tu_recv(&p->down, TU_WAIT_MS), MSG_GO);

    ferry_sample held[2];
    int nheld = 0;
    for (; nheld < 2; nheld++) {
        TU_OK(ferry_wait(sub, TU_WAIT_NS));
        TU_OK(ferry_take(sub, &held[nheld]));
        TU_SAMPLE_INTACT(&held[nheld], frame_size(held[nheld].sequence));
    }
    region conn = only_region("memfd:ferry-conn", "rw-s");
    ferry__conn_header *h = (ferry__conn_header *)conn.start;
    /* The geometry as the publisher wrote it, read before anything is changed. */
    _Atomic uint64_t *rslots = (_Atomic uint64_t *)(conn.start + h->return_offset);
    _Atomic uint64_t *dslots = (_Atomic uint64_t *)(conn.start + h->deliver_offset);
    uint64_t rmask = h->return_capacity - 1;
    uint32_t dcap = h->deliver_capacity;
    uint64_t rh = atomic_load(&h->return_head);
    uint64_t desc = held[1].private_[2];
    switch (p->variant) {
    case A_RETURN_HEAD_HUGE:
        atomic_store(&h->return_head, 0xdeadbeefdeadbeefull);
        break;
    case A_RETURN_NOT_HELD:
        atomic_store(&rslots[rh & rmask],
                     ferry__desc(ferry__desc_index(desc), ferry__desc_gen(desc) + 1000));
        atomic_store(&h->return_head, rh + 1);
        break;
    case A_RETURN_INDEX_RANGE:
        atomic_store(&rslots[rh & rmask], ferry__desc(0xffffffffu, 1));
        atomic_store(&h->return_head, rh + 1);
        break;
    case A_RETURN_TWICE:
        TU_OK(ferry_release(sub, &held[--nheld]));
        rh = atomic_load(&h->return_head);
        atomic_store(&rslots[rh & rmask], desc);
        atomic_store(&h->return_head, rh + 1);
        break;
    case A_RETURN_HEAD_BACK:
        TU_OK(ferry_release(sub, &held[--nheld]));
        atomic_store(&h->return_head, atomic_load(&h->return_tail) - 1);
        break;
    case A_TAIL_PAST_HEAD:
        atomic_store(&h->deliver_tail, atomic_load(&h->deliver_head) + 3);
        break;
    case A_TAIL_BACK:
        atomic_store(&h->deliver_tail, 0); /* the publisher saw it at 2 or more */
        break;
    case A_SLOTS_GARBAGE:
        for (uint32_t i = 0; i < dcap; i++)
            atomic_store(&dslots[i], 0x4141414141414141ull);
        break;
    case A_RANDOM:
        fill_random(conn.start, conn.len, 42);
        break;
    case A_HARMLESS:
        h->magic = ~h->magic;
        h->version = 77;
        h->header_size = 1;
        h->size = 3;
        h->deliver_offset = (uint64_t)1 << 40;
        h->return_offset = 5;
        h->deliver_capacity = 3;
        h->depth = 0;
        h->return_capacity = 7;
        atomic_store(&h->sub_waiting, 0x55);
        atomic_store(&h->pub_waiting, 0x66);
        /* Its own words: served last and never woken, and a publisher's wanted room. */
        atomic_store(&h->sub_background, 0xdeadbeef);
        atomic_store(&h->pub_wake_room, 0xffffffff);
        break;
    }
    tu_send(&p->up, MSG_DONE);
    if (p->variant == A_HARMLESS) {
        /* Still served, with intact frames. */
        for (int i = 0; i < 3; i++) {
            ferry_sample s;
            TU_OK(ferry_wait(sub, TU_WAIT_NS));
            TU_OK(ferry_take(sub, &s));
            TU_SAMPLE_INTACT(&s, frame_size(s.sequence));
            TU_OK(ferry_release(sub, &s));
        }
        tu_send(&p->up, MSG_DONE);
    }
    TU_EQ_U64(tu_recv(&p->down, TU_WAIT_MS), MSG_QUIT);
    while (nheld > 0)
        TU_OK(ferry_release(sub, &held[--nheld]));
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
    child_teardown();
    return 0;
}

static void test_sub_scribbles(void)
{
    ferry_node *node = hostile_node("victim");
    ferry_publisher_options po;
    ferry_publisher_options_init(&po);
    po.max_chunks = 32;
    po.pool_bytes = 256 * 1024;
    po.max_sample_size = 4000;
    po.max_subscribers = 4;
    ferry_publisher *pub = NULL;
    TU_OK(ferry_publisher_create(&pub, node, TOPIC, TYPE, ferry_hash(TYPE), &po));
    uint64_t seq = 0;
    peer good = peer_make(0);
    pid_t good_pid = tu_fork(good_sub_main, &good, 30);
    TU_EQ_U64(tu_serve_until(&pub, 1, &good.up, TU_WAIT_MS), MSG_READY);

    ferry_publisher_stats st;
    for (int v = 0; v < A_COUNT; v++) {
        peer bad = peer_make(v);
        pid_t bad_pid = tu_fork(scribbling_sub_main, &bad, 30);
        TU_EQ_U64(tu_serve_until(&pub, 1, &bad.up, TU_WAIT_MS), MSG_READY);
        TU_OK(ferry_publisher_wait_subscribers(pub, 2, TU_WAIT_NS));
        /* More than its depth: the publisher drops its oldest and sees its tail move. */
        for (int i = 0; i < 6; i++)
            TU_CHECK(publish_next(pub, &seq));
        TU_OK(ferry_publisher_stats_get(pub, &st));
        uint64_t errors = st.protocol_errors;
        tu_send(&bad.down, MSG_GO);
        TU_EQ_U64(tu_serve_until(&pub, 1, &bad.up, TU_WAIT_MS), MSG_DONE);
        if (v == A_HARMLESS) {
            for (int i = 0; i < 3; i++)
                TU_CHECK(publish_next(pub, &seq));
            TU_EQ_U64(tu_serve_until(&pub, 1, &bad.up, TU_WAIT_MS), MSG_DONE);
            TU_OK(ferry_publisher_stats_get(pub, &st));
            TU_EQ_U64(st.protocol_errors, errors);
            TU_EQ_U64(st.subscribers, 2);
        } else {
            /* Returns are checked in housekeeping, the delivery ring when publishing. */
            ferry_time t0 = ferry_now();
            for (;;) {
                TU_OK(ferry_publisher_poll(pub, TU_MS));
                TU_OK(ferry_publisher_stats_get(pub, &st));
                if (st.protocol_errors > errors)
                    break;
                TU_CHECK_MSG(tu_since(t0) < TU_WAIT_NS, "%s: the subscriber was not disconnected",
                             a_names[v]);
                publish_next(pub, &seq);
            }
            TU_EQ_U64(st.protocol_errors, errors + 1);
            TU_EQ_U64(st.subscribers, 1);
            char needle[64];
            snprintf(needle, sizeof needle, "pid %d disconnected", (int)bad_pid);
            TU_CHECK_MSG(log_has(needle), "%s: no \"%s\" in the log:\n%s", a_names[v], needle,
                         log_text);
        }
        tu_send(&bad.down, MSG_QUIT);
        TU_CHILD_OK(bad_pid);
        peer_close(&bad);
        ferry_time t0 = ferry_now();
        do {
            TU_OK(ferry_publisher_poll(pub, TU_MS));
            TU_OK(ferry_publisher_stats_get(pub, &st));
            TU_CHECK(tu_since(t0) < TU_WAIT_NS);
        } while (st.subscribers != 1);
        printf("    %-28s %s, %u chunks in use after\n", a_names[v],
               v == A_HARMLESS ? "still served" : "disconnected", st.chunks_in_use);
    }

    for (int i = 0; i < 3; i++)
        TU_CHECK(publish_next(pub, &seq));
    tu_send(&good.down, seq);
    uint64_t got = tu_serve_until(&pub, 1, &good.up, TU_WAIT_MS);
    TU_CMP_U64(got, >=, A_COUNT);
    /* Every chunk is accounted for: the good subscriber holds nothing and has nothing queued. */
    TU_OK(ferry_publisher_poll(pub, 0));
    TU_OK(ferry_publisher_stats_get(pub, &st));
    TU_EQ_U64(st.chunks_in_use, 0);
    TU_EQ_U64(st.chunks_loaned, 0);
    TU_EQ_U64(st.chunks_free, st.chunks_total);
    TU_EQ_U64(st.subscribers, 1);
    TU_EQ_U64(st.protocol_errors, A_COUNT - 1);
    TU_CMP_U64(st.subscribers_lost, >=, A_COUNT - 1);
    printf("    good subscriber received %" PRIu64 " of %" PRIu64 " frames intact\n", got, seq);
    tu_send(&good.down, MSG_QUIT);
    TU_CHILD_OK(good_pid);
    peer_close(&good);
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
}

/* ---- (b) publishers that scribble over their segments ---------------------------------------- */

enum {
    B_HEAD_JUMP,
    B_INDEX_RANGE,
    B_INDEX_HUGE,
    B_TAIL_GARBAGE,
    B_TABLE_BEYOND,
    B_TABLE_UNALIGNED,
    B_TABLE_LOW,
    B_TABLE_CAPACITY,
    B_TABLE_RANDOM,
    B_HEADER_INDEX,
    B_HEADER_GEN,
    B_HEADER_SIZE0,
    B_HEADER_SIZE_BIG,
    B_HEADER_RANDOM,
    B_DUPLICATE,
    B_CONN_RANDOM,
    B_COUNT
};
static const char *const b_names[B_COUNT] = {
    "delivery head jump",  "index out of range", "index huge",         "tail garbage",
    "table offset beyond", "table unaligned",    "table offset low",   "table capacity",
    "table random",        "header index",       "header generation",  "header size 0",
    "header size big",     "header random",      "duplicate delivery", "connection random",
};

static int honest_pub_main(void *arg)
{
    child_scrub();
    peer *p = arg;
    ferry_node *node = hostile_node("honest");
    ferry_publisher_options po;
    ferry_publisher_options_init(&po);
    po.max_chunks = 64;
    po.pool_bytes = 512 * 1024;
    po.max_sample_size = 4000;
    ferry_publisher *pub = NULL;
    TU_OK(ferry_publisher_create(&pub, node, TOPIC, TYPE, ferry_hash(TYPE), &po));
    TU_OK(ferry_publisher_wait_subscribers(pub, 1, TU_WAIT_NS));
    ferry_publisher_stats st;
    TU_OK(ferry_publisher_stats_get(pub, &st));
    tu_send(&p->up, st.id);
    uint64_t seq = 0;
    ferry_time t0 = ferry_now();
    while (!tu_readable(&p->down)) {
        publish_next(pub, &seq);
        TU_OK(ferry_publisher_poll(pub, 2 * TU_MS));
        TU_CHECK(tu_since(t0) < 28 * TU_SEC);
    }
    TU_EQ_U64(tu_recv(&p->down, 0), MSG_STOP);
    TU_OK(ferry_publisher_stats_get(pub, &st));
    TU_EQ_U64(st.protocol_errors, 0);
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
    child_teardown();
    return 0;
}

static int scribbling_pub_main(void *arg)
{
    child_scrub();
    peer *p = arg;
    ferry_node *node = hostile_node("forger");
    ferry_publisher_options po;
    ferry_publisher_options_init(&po);
    po.max_chunks = 8;
    po.pool_bytes = 64 * 1024;
    po.max_sample_size = 4000;
    ferry_publisher *pub = NULL;
    TU_OK(ferry_publisher_create(&pub, node, TOPIC, TYPE, ferry_hash(TYPE), &po));
    TU_OK(ferry_publisher_wait_subscribers(pub, 1, TU_WAIT_NS));
    ferry_publisher_stats st;
    TU_OK(ferry_publisher_stats_get(pub, &st));
    tu_send(&p->up, st.id);
    uint64_t seq = 0;
    TU_CHECK(publish_next(pub, &seq));
    TU_CHECK(publish_next(pub, &seq));
    TU_EQ_U64(tu_serve_until(&pub, 1, &p->down, TU_WAIT_MS), MSG_GO);
    TU_OK(ferry_publisher_poll(pub, 0)); /* the two frames are back: their chunks are free */

    region data = only_region("memfd:ferry-data", "rw-s");
    region conn = only_region("memfd:ferry-conn", "rw-s");
    ferry__data_header *dh = (ferry__data_header *)data.start;
    ferry__chunk_entry *table = (ferry__chunk_entry *)(data.start + dh->table_offset);
    ferry__conn_header *h = (ferry__conn_header *)conn.start;
    _Atomic uint64_t *dslots = (_Atomic uint64_t *)(conn.start + h->deliver_offset);
    uint64_t dmask = h->deliver_capacity - 1;
    uint64_t head = atomic_load(&h->deliver_head);
    void *payload = NULL;
    ferry__chunk_header *ch = NULL;
    int v = p->variant;
    if (v >= B_TABLE_BEYOND && v <= B_TABLE_RANDOM) {
        for (uint32_t i = 0; i < dh->max_chunks; i++) {
            ferry__chunk_entry *e = &table[i];
            if (v == B_TABLE_BEYOND)
                e->offset = dh->segment_size + FERRY__PAGE;
            else if (v == B_TABLE_UNALIGNED)
                e->offset += 8;
            else if (v == B_TABLE_LOW)
                e->offset = 0;
            else if (v == B_TABLE_CAPACITY)
                e->capacity = dh->segment_size;
        }
        if (v == B_TABLE_RANDOM)
            fill_random(table, dh->max_chunks * sizeof *table, 7);
    }
    if (v >= B_TABLE_BEYOND) {
        /* A frame through the API: its chunk is one of the two already carved. */
        TU_OK(ferry_loan(pub, frame_size(seq + 1), &payload));
        tu_fill(payload, frame_size(seq + 1), seq + 1);
        TU_OK(ferry_publish(pub, payload, 0));
        seq++;
        ch = (ferry__chunk_header *)((uint8_t *)payload - dh->payload_offset);
        head = atomic_load(&h->deliver_head);
    }
    switch (v) {
    case B_HEAD_JUMP:
        atomic_store(&h->deliver_head, atomic_load(&h->deliver_tail) + 1000);
        break;
    case B_INDEX_RANGE:
        atomic_store(&dslots[head & dmask], ferry__desc(dh->max_chunks + 3, 1));
        atomic_store(&h->deliver_head, head + 1);
        break;
    case B_INDEX_HUGE:
        atomic_store(&dslots[head & dmask], ferry__desc(0xffffffffu, 0xffffffffu));
        atomic_store(&h->deliver_head, head + 1);
        break;
    case B_TAIL_GARBAGE:
        atomic_store(&h->deliver_tail, head + 5);
        break;
    case B_HEADER_INDEX:
        ch->index ^= 1;
        break;
    case B_HEADER_GEN:
        ch->generation += 7;
        break;
    case B_HEADER_SIZE0:
        ch->size = 0;
        break;
    case B_HEADER_SIZE_BIG:
        ch->size = (uint64_t)1 << 40;
        break;
    case B_HEADER_RANDOM:
        fill_random(ch, sizeof *ch, 9);
        break;
    case B_DUPLICATE:
        atomic_store(&dslots[head & dmask], atomic_load(&dslots[(head - 1) & dmask]));
        atomic_store(&h->deliver_head, head + 1);
        break;
    case B_CONN_RANDOM:
        fill_random(conn.start, conn.len, 11);
        break;
    default:
        break;
    }
    tu_send(&p->up, MSG_DONE);
    /* No housekeeping from here on: the subscriber alone decides. */
    TU_EQ_U64(tu_recv(&p->down, TU_WAIT_MS), MSG_QUIT);
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
    child_teardown();
    return 0;
}

static void test_pub_scribbles(void)
{
    ferry_node *node = hostile_node("victim");
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = 8;
    so.max_held = 32;
    so.max_publishers = 4;
    ferry_subscriber *sub = NULL;
    TU_OK(ferry_subscriber_create(&sub, node, TOPIC, TYPE, ferry_hash(TYPE), &so));
    take_stats ts;
    memset(&ts, 0, sizeof ts);
    peer honest = peer_make(0);
    pid_t honest_pid = tu_fork(honest_pub_main, &honest, 30);
    ts.trusted_id = sub_serve_until(sub, &ts, &honest.up, TU_WAIT_MS);

    ferry_subscriber_stats st;
    for (int v = 0; v < B_COUNT; v++) {
        peer bad = peer_make(v);
        pid_t bad_pid = tu_fork(scribbling_pub_main, &bad, 30);
        ts.scribbled = false;
        uint64_t bad_id = sub_serve_until(sub, &ts, &bad.up, TU_WAIT_MS);
        ferry_time t0 = ferry_now();
        while (ts.other_id != bad_id || ts.other < 2) {
            ferry_err e = ferry_wait(sub, 2 * TU_MS);
            TU_CHECK(e == FERRY_OK || e == FERRY_ETIMEDOUT);
            take_all(sub, &ts);
            TU_OK(ferry_subscriber_stats_get(sub, &st));
            TU_CHECK_MSG(tu_since(t0) < TU_WAIT_NS,
                         "%s: the two honest frames did not come (%" PRIu64 " came; %u "
                         "publishers)\n%s",
                         b_names[v], ts.other_id == bad_id ? ts.other : 0, st.publishers, log_text);
        }
        TU_OK(ferry_subscriber_stats_get(sub, &st));
        uint64_t errors = st.protocol_errors;
        uint64_t trusted_before = ts.trusted;
        ts.scribbled = true;
        tu_send(&bad.down, MSG_GO);
        TU_EQ_U64(tu_recv(&bad.up, TU_WAIT_MS), MSG_DONE);
        t0 = ferry_now();
        for (;;) {
            ferry_err e = ferry_wait(sub, 2 * TU_MS);
            TU_CHECK(e == FERRY_OK || e == FERRY_ETIMEDOUT);
            take_all(sub, &ts);
            TU_OK(ferry_subscriber_stats_get(sub, &st));
            if (st.protocol_errors > errors && ts.trusted > trusted_before)
                break;
            TU_CHECK_MSG(tu_since(t0) < TU_WAIT_NS,
                         "%s: publisher not disconnected (%" PRIu64 " errors) or the honest one "
                         "not received",
                         b_names[v], st.protocol_errors - errors);
        }
        TU_EQ_U64(st.protocol_errors, errors + 1);
        char needle[64];
        snprintf(needle, sizeof needle, "pid %d disconnected", (int)bad_pid);
        TU_CHECK_MSG(log_has(needle), "%s: no \"%s\" in the log:\n%s", b_names[v], needle,
                     log_text);
        tu_send(&bad.down, MSG_QUIT);
        TU_CHILD_OK(bad_pid);
        peer_close(&bad);
        t0 = ferry_now();
        do {
            ferry_err e = ferry_wait(sub, 2 * TU_MS);
            TU_CHECK(e == FERRY_OK || e == FERRY_ETIMEDOUT);
            take_all(sub, &ts);
            TU_OK(ferry_subscriber_stats_get(sub, &st));
            TU_CHECK(tu_since(t0) < TU_WAIT_NS);
        } while (st.publishers != 1 || st.held != 0);
        printf("    %-22s disconnected; %" PRIu64 " forged frames passed the checks\n", b_names[v],
               ts.other_id == bad_id ? ts.other_after : 0);
    }
    printf("    honest publisher: %" PRIu64 " frames received intact\n", ts.trusted);
    tu_send(&honest.down, MSG_STOP);
    TU_CHILD_OK(honest_pid);
    peer_close(&honest);
    ferry_time t0 = ferry_now();
    do {
        ferry_err e = ferry_wait(sub, 2 * TU_MS);
        TU_CHECK(e == FERRY_OK || e == FERRY_ETIMEDOUT);
        take_all(sub, &ts);
        TU_OK(ferry_subscriber_stats_get(sub, &st));
        TU_CHECK(tu_since(t0) < TU_WAIT_NS);
    } while (st.publishers != 0);
    TU_EQ_U64(st.protocol_errors, B_COUNT);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
}

/* ---- (c) garbage on a publisher's socket ----------------------------------------------------- */

enum {
    C_HANGUP,
    C_EMPTY,
    C_SHORT,
    C_ALMOST,
    C_LONGER,
    C_HUGE,
    C_RANDOM,
    C_NO_FD,
    C_PIPE_FD,
    C_FILE_FD,
    C_FOUR_FDS,
    C_FOUR_EVENTFDS,
    C_OTHER_TOPIC,
    C_OTHER_TYPE,
    C_BAD_FIELDS,
    C_ACTIVE_GARBAGE,
    C_ACTIVE_HELLO,
    C_BYE_WITH_FDS,
    C_FLOOD,
    C_COUNT
};
static const struct {
    const char *name;
    unsigned errors, rejected; /* at least this many more */
} c_cases[C_COUNT] = {
    {"connect and hang up", 0, 0},
    {"empty datagram", 0, 0},
    {"1-byte datagram", 1, 1},
    {"hello minus one byte", 1, 1},
    {"hello plus one byte", 1, 1},
    /* Longer than a hello: the receive fails (EMSGSIZE) and the connection is dropped as after
     * a hang-up, without a protocol error. */
    {"4 KiB datagram", 0, 0},
    {"random hellos x3", 3, 3},
    {"hello with an eventfd", 1, 1},
    {"hello with a pipe", 1, 1},
    {"hello with a file", 1, 1},
    {"hello with 4 fds, pipe first", 1, 1},
    {"hello with 4 eventfds", 1, 1},
    {"hello for another topic", 0, 1},
    {"hello for another type", 0, 1},
    {"hello fields out of range x4", 4, 4},
    {"garbage after welcome", 1, 0},
    /* Longer than a goodbye: read as a failed receive, a hang-up, not a protocol error. */
    {"second hello", 0, 0},
    {"goodbye with fds", 0, 0},
    /* Silent connections take pending places (max_pending), apart from the admitted ones: the
     * oldest makes room for each newcomer and the rest are dropped after a second. */
    {"flood of silent connections", 0, 0},
};

#define FLOOD 10

/* kind: 0 eventfds, 1 pipes, 2 regular files, 3 a pipe then eventfds. */
static void send_hello(int sock, const ferry__hello *h, int nfds, int kind)
{
    int fds[4] = {-1, -1, -1, -1};
    for (int i = 0; i < nfds && i < 4; i++) {
        if (kind == 1 || (kind == 3 && i == 0))
            fds[i] = make_pipe_end();
        else if (kind == 2)
            fds[i] = make_regular_file();
        else
            fds[i] = make_eventfd();
    }
    raw_send(sock, h, sizeof *h, fds, nfds);
    close_all(fds, nfds);
}

/* Completes a handshake; returns the socket of an active connection. */
static int raw_subscribe(const char *path)
{
    int s = raw_connect(path);
    ferry__hello h;
    hello_init(&h, TOPIC);
    send_hello(s, &h, 0, 0);
    ferry__welcome w;
    int fds[8], nfds;
    ssize_t n = raw_recv(s, &w, sizeof w, fds, &nfds, TU_WAIT_MS);
    close_all(fds, nfds);
    TU_EQ_U64(n, sizeof w);
    TU_EQ_U64(w.status, FERRY_OK);
    TU_EQ_U64(nfds, 2);
    return s;
}

static int garbage_main(void *arg)
{
    child_scrub();
    peer *p = arg;
    char path[PATH_MAX];
    publisher_sock(TOPIC, path, sizeof path);
    uint8_t buf[4096];
    ferry__hello h;
    for (int c = 0; c < C_COUNT; c++) {
        TU_EQ_U64(tu_recv(&p->down, TU_WAIT_MS), MSG_GO);
        int s = raw_connect(path);
        int status = -1;
        switch (c) {
        case C_HANGUP:
            break;
        case C_EMPTY:
            raw_send(s, buf, 0, NULL, 0);
            status = wait_hangup(s, TU_WAIT_MS);
            break;
        case C_SHORT:
        case C_ALMOST:
        case C_LONGER:
        case C_HUGE: {
            size_t len = c == C_SHORT    ? 1
                         : c == C_ALMOST ? sizeof h - 1
                         : c == C_LONGER ? sizeof h + 1
                                         : sizeof buf;
            hello_init(&h, TOPIC);
            memset(buf, 0, sizeof buf);
            memcpy(buf, &h, len < sizeof h ? len : sizeof h);
            raw_send(s, buf, len, NULL, 0);
            status = wait_hangup(s, TU_WAIT_MS);
            break;
        }
        case C_RANDOM:
            for (int k = 0; k < 3; k++) {
                if (k > 0)
                    s = raw_connect(path);
                fill_random(buf, sizeof h, 100 + (uint64_t)k);
                int efd = make_eventfd();
                raw_send(s, buf, sizeof h, &efd, 1);
                close(efd);
                status = wait_hangup(s, TU_WAIT_MS);
                TU_EQ_U64(status, FERRY_EPROTO);
                if (k < 2)
                    close(s);
            }
            break;
        case C_NO_FD: /* a hello carries no descriptor: one with an eventfd is refused */
            hello_init(&h, TOPIC);
            send_hello(s, &h, 1, 0);
            status = wait_hangup(s, TU_WAIT_MS);
            TU_EQ_U64(status, FERRY_EPROTO);
            break;
        case C_PIPE_FD:
        case C_FILE_FD:
            hello_init(&h, TOPIC);
            send_hello(s, &h, 1, c == C_PIPE_FD ? 1 : 2);
            status = wait_hangup(s, TU_WAIT_MS);
            break;
        case C_FOUR_FDS:
            hello_init(&h, TOPIC);
            send_hello(s, &h, 4, 3);
            status = wait_hangup(s, TU_WAIT_MS);
            break;
        case C_FOUR_EVENTFDS:
            hello_init(&h, TOPIC);
            send_hello(s, &h, 4, 0);
            status = wait_hangup(s, TU_WAIT_MS);
            TU_EQ_U64(status, FERRY_EPROTO);
            break;
        case C_OTHER_TOPIC:
            hello_init(&h, "/hostile/other");
            send_hello(s, &h, 0, 0);
            status = wait_hangup(s, TU_WAIT_MS);
            break;
        case C_OTHER_TYPE:
            hello_init(&h, TOPIC);
            snprintf(h.type_name, sizeof h.type_name, "other/type");
            h.type_hash = ferry_hash("other/type");
            send_hello(s, &h, 0, 0);
            status = wait_hangup(s, TU_WAIT_MS);
            TU_EQ_U64(status, FERRY_ETYPE);
            break;
        case C_BAD_FIELDS:
            for (int k = 0; k < 4; k++) {
                if (k > 0)
                    s = raw_connect(path);
                hello_init(&h, TOPIC);
                if (k == 0)
                    h.depth = 0;
                else if (k == 1)
                    h.history = 5000;
                else if (k == 2)
                    h.overflow = 9;
                else
                    memset(h.topic, 'a', sizeof h.topic);
                send_hello(s, &h, 0, 0);
                status = wait_hangup(s, TU_WAIT_MS);
                TU_EQ_U64(status, FERRY_EPROTO);
                if (k < 3)
                    close(s);
            }
            break;
        case C_ACTIVE_GARBAGE:
        case C_ACTIVE_HELLO:
        case C_BYE_WITH_FDS: {
            close(s);
            s = raw_subscribe(path);
            int fds[2] = {make_eventfd(), make_pipe_end()};
            if (c == C_ACTIVE_GARBAGE) {
                memset(buf, 0xee, 8);
                raw_send(s, buf, 8, NULL, 0);
            } else if (c == C_ACTIVE_HELLO) {
                hello_init(&h, TOPIC);
                raw_send(s, &h, sizeof h, fds, 1);
            } else {
                ferry__bye b;
                ferry__bye_init(&b);
                raw_send(s, &b, sizeof b, fds, 2);
            }
            close_all(fds, 2);
            status = wait_hangup(s, TU_WAIT_MS);
            break;
        }
        case C_FLOOD: {
            /* More than max_pending connections that never say hello: each is dropped, the
             * oldest when a newer one needs its place, the rest after a second. */
            int flood[FLOOD];
            flood[0] = s;
            for (int k = 1; k < FLOOD; k++)
                flood[k] = raw_connect(path);
            for (int k = 0; k < FLOOD; k++) {
                wait_hangup(flood[k], TU_WAIT_MS);
                if (k > 0)
                    close(flood[k]);
            }
            break;
        }
        }
        if (status >= 0)
            TU_CMP_U64(status, !=, FERRY_OK);
        close(s);
        tu_send(&p->up, MSG_DONE);
    }
    child_teardown();
    return 0;
}

static void test_socket_garbage(void)
{
    ferry_node *node = hostile_node("victim");
    ferry_publisher_options po;
    ferry_publisher_options_init(&po);
    po.max_chunks = 32;
    po.pool_bytes = 256 * 1024;
    po.max_sample_size = 4000;
    po.max_subscribers = 4;
    ferry_publisher *pub = NULL;
    TU_OK(ferry_publisher_create(&pub, node, TOPIC, TYPE, ferry_hash(TYPE), &po));
    uint64_t seq = 0;
    peer good = peer_make(0);
    pid_t good_pid = tu_fork(good_sub_main, &good, 30);
    TU_EQ_U64(tu_serve_until(&pub, 1, &good.up, TU_WAIT_MS), MSG_READY);
    peer raw = peer_make(0);
    int fds_before = tu_fd_count();
    pid_t raw_pid = tu_fork(garbage_main, &raw, 30);

    ferry_publisher_stats st;
    for (int c = 0; c < C_COUNT; c++) {
        TU_CHECK(publish_next(pub, &seq));
        TU_OK(ferry_publisher_stats_get(pub, &st));
        uint64_t errors = st.protocol_errors, rejected = st.rejected;
        tu_send(&raw.down, MSG_GO);
        TU_EQ_U64(tu_serve_until(&pub, 1, &raw.up, TU_WAIT_MS), MSG_DONE);
        /* The publisher notices the last hang-up in its next housekeeping. */
        ferry_time t0 = ferry_now();
        do {
            TU_OK(ferry_publisher_poll(pub, TU_MS));
            TU_OK(ferry_publisher_stats_get(pub, &st));
            TU_CHECK_MSG(tu_since(t0) < 5 * TU_SEC, "%s: %d descriptors, %d before; %u subscribers",
                         c_cases[c].name, tu_fd_count(), fds_before, st.subscribers);
        } while (tu_fd_count() != fds_before || st.subscribers != 1);
        TU_CMP_U64(st.protocol_errors - errors, >=, c_cases[c].errors);
        TU_CMP_U64(st.rejected - rejected, >=, c_cases[c].rejected);
        printf("    %-30s protocol errors +%" PRIu64 ", rejected +%" PRIu64 "\n", c_cases[c].name,
               st.protocol_errors - errors, st.rejected - rejected);
    }
    TU_CHILD_OK(raw_pid);
    peer_close(&raw);
    TU_CMP_I64(log_count("refused"), >=, 10);
    TU_CMP_I64(log_count("disconnected"), >=, 1);
    /* Every silent connection of the flood was dropped, none admitted. */
    TU_CMP_I64(log_count("dropped: no hello"), >=, FLOOD);
    TU_CMP_U64(st.pending_dropped, >=, FLOOD);

    TU_CHECK(publish_next(pub, &seq));
    tu_send(&good.down, seq);
    uint64_t got = tu_serve_until(&pub, 1, &good.up, TU_WAIT_MS);
    TU_CMP_U64(got, >=, 1);
    TU_OK(ferry_publisher_poll(pub, 0));
    TU_OK(ferry_publisher_stats_get(pub, &st));
    TU_EQ_U64(st.chunks_in_use, 0);
    TU_EQ_U64(st.chunks_loaned, 0);
    TU_EQ_U64(st.subscribers, 1);
    tu_send(&good.down, MSG_QUIT);
    TU_CHILD_OK(good_pid);
    peer_close(&good);
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
}

/* ---- (c) a fake publisher ----------------------------------------------------------------------
 */

enum {
    W_HANGUP,
    W_SHORT,
    W_RANDOM,
    W_LONG,
    W_STATUS_RANGE,
    W_REFUSED,
    W_NO_FDS,
    W_TWO_FDS,
    W_WRONG_KINDS,
    W_SIZE_MISMATCH,
    W_MAX_CHUNKS0,
    W_DCAP_NPOW2,
    W_TABLE_BEYOND,
    W_PAYLOAD_SMALL,
    W_ARENA_OVERLAP,
    W_CONN_MAGIC,
    W_DATA_MAGIC,
    W_DATA_ID,
    W_TYPE,
    W_EXTRA_FD,
    W_BAD_DELIVERY,
    W_COUNT
};
/* Those the subscriber logs (all but a hang-up and a datagram too long to read). */
#define W_LOGGED (W_COUNT - 2)

typedef struct fake_segs {
    int data_fd, conn_fd;
    ferry__welcome w;
    ferry__conn_header *hdr; /* mapped here while the connection lasts */
    uint64_t conn_size;
} fake_segs;

static int fake_memfd(const char *name, uint64_t size, bool seal)
{
    int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    TU_CHECK(fd >= 0);
    TU_CHECK(ftruncate(fd, (off_t)size) == 0);
    if (seal)
        TU_CHECK(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0);
    return fd;
}

/* Segments and a welcome that pass every check of a subscriber that sent hello h; the delivery
 * ring holds one entry naming chunk 0 (or an impossible one when bad_entry). */
static void fake_build(fake_segs *s, const ferry__hello *h, bool seal, bool bad_entry)
{
    const uint32_t max_chunks = 4;
    uint32_t depth = h->depth > h->history ? h->depth : h->history;
    uint32_t dcap = ferry__pow2_at_least(depth ? depth : 1);
    uint32_t rcap = max_chunks;
    uint64_t data_size = FERRY__PAGE * (1 + max_chunks);
    uint64_t doff, roff;
    uint64_t conn_size = ferry__conn_layout(dcap, rcap, &doff, &roff);

    s->data_fd = fake_memfd("fake-data", data_size, seal);
    uint8_t *d = mmap(NULL, data_size, PROT_READ | PROT_WRITE, MAP_SHARED, s->data_fd, 0);
    TU_CHECK(d != MAP_FAILED);
    ferry__data_header *dh = (ferry__data_header *)d;
    dh->magic = FERRY__DATA_MAGIC;
    dh->version = FERRY_PROTOCOL_VERSION;
    dh->header_size = sizeof *dh;
    dh->segment_size = data_size;
    dh->table_offset = 64;
    dh->arena_offset = FERRY__PAGE;
    dh->payload_offset = 64;
    dh->publisher_id = FAKE_ID;
    dh->max_chunks = max_chunks;
    ferry__chunk_entry *table = (ferry__chunk_entry *)(d + 64);
    for (uint32_t i = 0; i < max_chunks; i++) {
        table[i].offset = FERRY__PAGE * (1 + i);
        table[i].capacity = FERRY__PAGE - 64;
        ferry__chunk_header *ch = (ferry__chunk_header *)(d + table[i].offset);
        ch->index = i;
        ch->generation = 1;
        ch->size = 100;
        ch->sequence = 1;
        ch->publisher_id = FAKE_ID;
    }
    /* Every page written, so that none reads as a hole; sealed against writing by fake_send. */
    munmap(d, data_size);

    s->conn_fd = fake_memfd("fake-conn", conn_size, seal);
    s->conn_size = conn_size;
    s->hdr = mmap(NULL, conn_size, PROT_READ | PROT_WRITE, MAP_SHARED, s->conn_fd, 0);
    TU_CHECK(s->hdr != MAP_FAILED);
    ferry__conn_header *c = s->hdr;
    c->magic = FERRY__CONN_MAGIC;
    c->version = FERRY_PROTOCOL_VERSION;
    c->header_size = sizeof *c;
    c->size = conn_size;
    c->deliver_offset = doff;
    c->return_offset = roff;
    c->deliver_capacity = dcap;
    c->depth = depth;
    c->return_capacity = rcap;
    for (uint64_t off = FERRY__PAGE; off < conn_size; off += FERRY__PAGE)
        ((volatile uint8_t *)c)[off] = 0;
    uint64_t entry = bad_entry ? ferry__desc(99, 1) : ferry__desc(0, 1);
    memcpy((uint8_t *)c + doff, &entry, sizeof entry);
    atomic_store(&c->deliver_head, 1);

    ferry__welcome *w = &s->w;
    memset(w, 0, sizeof *w);
    w->magic = FERRY__MSG_MAGIC;
    w->version = FERRY_PROTOCOL_VERSION;
    w->kind = FERRY__MSG_WELCOME;
    w->status = FERRY_OK;
    w->pid = (int32_t)getpid();
    w->publisher_id = FAKE_ID;
    w->type_hash = ferry_hash(TYPE);
    w->data_size = data_size;
    w->table_offset = 64;
    w->arena_offset = FERRY__PAGE;
    w->payload_offset = 64;
    w->conn_size = conn_size;
    w->max_chunks = max_chunks;
    w->depth = depth;
    w->deliver_capacity = dcap;
    w->return_capacity = rcap;
    snprintf(w->type_name, sizeof w->type_name, "%s", TYPE);
}

static void fake_free(fake_segs *s)
{
    if (s->hdr)
        munmap(s->hdr, s->conn_size);
    s->hdr = NULL;
    close(s->data_fd);
    close(s->conn_fd);
}

/* Answers one hello with welcome variant v; returns the socket (for the hang-up), or -1 when
 * it hung up itself. */
static int fake_answer(int sock, int v, const ferry__hello *h)
{
    fake_segs s;
    fake_build(&s, h, true, v == W_EXTRA_FD || v == W_BAD_DELIVERY);
    ferry__welcome w = s.w;
    int fds[3] = {s.data_fd, s.conn_fd, -1};
    int nfds = 2;
    uint8_t buf[sizeof w + 64];
    int extra = -1;
    switch (v) {
    case W_HANGUP:
        fake_free(&s);
        close(sock);
        return -1;
    case W_SHORT:
        raw_send(sock, &w, 7, NULL, 0);
        nfds = -1;
        break;
    case W_RANDOM:
        fill_random(buf, sizeof w, 5);
        raw_send(sock, buf, sizeof w, NULL, 0);
        nfds = -1;
        break;
    case W_LONG:
        memset(buf, 0, sizeof buf);
        memcpy(buf, &w, sizeof w);
        raw_send(sock, buf, sizeof buf, fds, 2);
        nfds = -1;
        break;
    case W_STATUS_RANGE:
        w.status = 1000;
        nfds = 0;
        break;
    case W_REFUSED:
        w.status = FERRY_ETYPE;
        nfds = 0;
        break;
    case W_NO_FDS:
        nfds = 0;
        break;
    case W_TWO_FDS: /* one of the two */
        nfds = 1;
        break;
    case W_WRONG_KINDS:
        fds[0] = make_pipe_end();
        fds[1] = make_regular_file();
        raw_send(sock, &w, sizeof w, fds, 2);
        close(fds[0]);
        close(fds[1]);
        nfds = -1;
        break;
    case W_SIZE_MISMATCH:
        w.data_size += FERRY__PAGE;
        break;
    case W_MAX_CHUNKS0:
        w.max_chunks = 0;
        break;
    case W_DCAP_NPOW2:
        w.deliver_capacity = 3;
        break;
    case W_TABLE_BEYOND:
        w.table_offset = w.data_size;
        break;
    case W_PAYLOAD_SMALL:
        w.payload_offset = 8;
        break;
    case W_ARENA_OVERLAP:
        w.arena_offset = 0;
        break;
    case W_CONN_MAGIC:
        s.hdr->magic = 0;
        break;
    case W_DATA_MAGIC: {
        uint64_t zero = 0;
        TU_CHECK(pwrite(s.data_fd, &zero, sizeof zero, 0) == sizeof zero);
        break;
    }
    case W_DATA_ID:
        w.publisher_id ^= 1;
        break;
    case W_TYPE:
        snprintf(w.type_name, sizeof w.type_name, "other/type");
        break;
    case W_EXTRA_FD:
        extra = make_pipe_end();
        fds[2] = extra;
        nfds = 3;
        break;
    default:
        break;
    }
    /* As a publisher does: the data segment sealed against writing, last. */
    TU_CHECK(fcntl(s.data_fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE) == 0);
    if (nfds >= 0)
        raw_send(sock, &w, sizeof w, fds, nfds);
    if (extra >= 0)
        close(extra);
    fake_free(&s);
    return sock;
}

typedef struct fake_listener {
    int fd;
    char name[64];
} fake_listener;

/* Listens as "pub.<id>.sock" in the topic directory: bound under a temporary name, renamed
 * once listening, as a publisher does. */
static fake_listener fake_listen(const char *topic, uint64_t id)
{
    fake_listener l;
    snprintf(l.name, sizeof l.name, "pub.%016llx.sock", (unsigned long long)id);
    char tmp[PATH_MAX], path[PATH_MAX], dir[PATH_MAX];
    /* The last endpoint of a topic takes its directory with it: made here when gone. */
    tu_topic_path(topic, dir, sizeof dir);
    TU_CHECK(mkdir(dir, 0700) == 0 || errno == EEXIST);
    sock_path(topic, ".fake.tmp", tmp, sizeof tmp);
    sock_path(topic, l.name, path, sizeof path);
    l.fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    TU_CHECK(l.fd >= 0);
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    memcpy(a.sun_path, tmp, strlen(tmp) + 1);
    unlink(tmp);
    TU_CHECK_MSG(bind(l.fd, (struct sockaddr *)&a, sizeof a) == 0, "bind: %s", strerror(errno));
    TU_CHECK(listen(l.fd, 16) == 0);
    TU_CHECK(rename(tmp, path) == 0);
    return l;
}

static void fake_unlisten(const char *topic, fake_listener *l)
{
    char path[PATH_MAX];
    sock_path(topic, l->name, path, sizeof path);
    unlink(path);
    close(l->fd);
    l->fd = -1;
}

/* Accepts a connection on l and reads its hello, which carries no descriptor. */
static int fake_accept(fake_listener *l, ferry__hello *h)
{
    int s = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC);
    TU_CHECK(s >= 0);
    int fds[8], nfds;
    ssize_t n = raw_recv(s, h, sizeof *h, fds, &nfds, TU_WAIT_MS);
    close_all(fds, nfds);
    TU_EQ_U64(n, sizeof *h);
    TU_EQ_U64(nfds, 0);
    return s;
}

static int fake_pub_main(void *arg)
{
    child_scrub();
    peer *p = arg;
    fake_listener l[W_COUNT];
    for (int v = 0; v < W_COUNT; v++)
        l[v] = fake_listen(TOPIC, FAKE_ID + (uint64_t)v);
    int conn_variant[64];
    int conn_fd[64];
    int nconn = 0;
    bool reported[W_COUNT] = {false};
    ferry_time t0 = ferry_now();
    while (!tu_readable(&p->down)) {
        struct pollfd pf[W_COUNT + 64];
        for (int v = 0; v < W_COUNT; v++)
            pf[v] = (struct pollfd){.fd = l[v].fd, .events = POLLIN};
        for (int k = 0; k < nconn; k++)
            pf[W_COUNT + k] = (struct pollfd){.fd = conn_fd[k], .events = POLLIN | POLLRDHUP};
        poll(pf, (nfds_t)(W_COUNT + nconn), 20);
        for (int v = 0; v < W_COUNT; v++) {
            if (!(pf[v].revents & POLLIN) || nconn == 64)
                continue;
            ferry__hello h;
            int s = fake_accept(&l[v], &h);
            s = fake_answer(s, v, &h);
            if (s >= 0) {
                conn_variant[nconn] = v;
                conn_fd[nconn++] = s;
            } else if (!reported[v]) {
                reported[v] = true;
                tu_send(&p->up, (uint64_t)v);
            }
        }
        /* A subscriber that refused the welcome hangs up. */
        for (int k = nconn; k-- > 0;) {
            if (!(pf[W_COUNT + k].revents & (POLLIN | POLLHUP | POLLRDHUP | POLLERR)))
                continue;
            char junk[64];
            if (recv(conn_fd[k], junk, sizeof junk, MSG_DONTWAIT) > 0)
                continue;
            int v = conn_variant[k];
            close(conn_fd[k]);
            conn_fd[k] = conn_fd[--nconn];
            conn_variant[k] = conn_variant[nconn];
            if (!reported[v]) {
                reported[v] = true;
                tu_send(&p->up, (uint64_t)v);
            }
        }
        TU_CHECK(tu_since(t0) < 25 * TU_SEC);
    }
    TU_EQ_U64(tu_recv(&p->down, 0), MSG_STOP);
    for (int v = 0; v < W_COUNT; v++)
        fake_unlisten(TOPIC, &l[v]);
    for (int k = 0; k < nconn; k++)
        close(conn_fd[k]);
    child_teardown();
    return 0;
}

static void sub_serve_for(ferry_subscriber *sub, take_stats *ts, int64_t ns)
{
    ferry_time t0 = ferry_now();
    do {
        ferry_err e = ferry_wait(sub, 2 * TU_MS);
        TU_CHECK(e == FERRY_OK || e == FERRY_ETIMEDOUT);
        take_all(sub, ts);
    } while (tu_since(t0) < ns);
}

static void test_fake_publisher(void)
{
    ferry_node *node = hostile_node("victim");
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = 8;
    so.max_held = 32;
    so.max_publishers = 64;
    ferry_subscriber *sub = NULL;
    TU_OK(ferry_subscriber_create(&sub, node, TOPIC, TYPE, ferry_hash(TYPE), &so));
    take_stats ts;
    memset(&ts, 0, sizeof ts);
    peer honest = peer_make(0);
    pid_t honest_pid = tu_fork(honest_pub_main, &honest, 30);
    ts.trusted_id = sub_serve_until(sub, &ts, &honest.up, TU_WAIT_MS);
    ferry_time t0 = ferry_now();
    while (ts.trusted < 3) {
        sub_serve_for(sub, &ts, 2 * TU_MS);
        TU_CHECK(tu_since(t0) < TU_WAIT_NS);
    }
    ferry_subscriber_stats st;
    TU_OK(ferry_subscriber_stats_get(sub, &st));
    int fds_before = tu_fd_count();
    uint64_t errors = st.protocol_errors, rejected = st.rejected, trusted = ts.trusted;

    peer fake = peer_make(0);
    pid_t fake_pid = tu_fork(fake_pub_main, &fake, 30);
    bool seen[W_COUNT] = {false};
    for (int n = 0; n < W_COUNT; n++) {
        uint64_t v = sub_serve_until(sub, &ts, &fake.up, TU_WAIT_MS);
        TU_CHECK(v < W_COUNT && !seen[v]);
        seen[v] = true;
    }
    tu_send(&fake.down, MSG_STOP);
    TU_CHILD_OK(fake_pid);
    peer_close(&fake);
    t0 = ferry_now();
    do {
        sub_serve_for(sub, &ts, 5 * TU_MS);
        TU_OK(ferry_subscriber_stats_get(sub, &st));
        TU_CHECK_MSG(tu_since(t0) < 5 * TU_SEC, "%d descriptors, %d before; %u publishers",
                     tu_fd_count(), fds_before, st.publishers);
    } while (tu_fd_count() != fds_before || st.publishers != 1);
    char needle[32];
    snprintf(needle, sizeof needle, "pid %d", (int)fake_pid);
    TU_CMP_I64(log_count(needle), >=, W_LOGGED);
    TU_CMP_U64(st.rejected - rejected, >=, 2);
    TU_CMP_U64(st.protocol_errors - errors, >=, 10);
    TU_CMP_U64(ts.trusted, >, trusted);
    printf("    %d fake welcomes refused: %d log lines, protocol errors +%" PRIu64
           ", rejected +%" PRIu64 "; %" PRIu64 " honest frames meanwhile\n",
           W_COUNT, log_count(needle), st.protocol_errors - errors, st.rejected - rejected,
           ts.trusted - trusted);

    tu_send(&honest.down, MSG_STOP);
    TU_CHILD_OK(honest_pid);
    peer_close(&honest);
    t0 = ferry_now();
    do {
        sub_serve_for(sub, &ts, 2 * TU_MS);
        TU_OK(ferry_subscriber_stats_get(sub, &st));
        TU_CHECK(tu_since(t0) < TU_WAIT_NS);
    } while (st.publishers != 0);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
}

/* ---- segments that change under the subscriber ----------------------------------------------- */

/* A subscriber that connects to whatever answers, then takes for a while; it must survive. */
static int victim_sub_main(void *arg)
{
    child_scrub();
    peer *p = arg;
    ferry_node *node = hostile_node("victim");
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.max_publishers = 64;
    ferry_subscriber *sub = NULL;
    TU_OK(ferry_subscriber_create(&sub, node, TOPIC, TYPE, ferry_hash(TYPE), &so));
    ferry_err e = ferry_subscriber_wait_publishers(sub, 1, 2 * TU_SEC);
    TU_CHECK(e == FERRY_OK || e == FERRY_ETIMEDOUT);
    tu_send(&p->up, e == FERRY_OK);
    TU_EQ_U64(tu_recv(&p->down, TU_WAIT_MS), MSG_GO);
    ferry_time t0 = ferry_now();
    while (tu_since(t0) < (p->variant == 2 ? 2500 : 200) * TU_MS) {
        e = ferry_wait(sub, 5 * TU_MS);
        TU_CHECK(e == FERRY_OK || e == FERRY_ETIMEDOUT);
        ferry_sample s;
        while (ferry_take(sub, &s) == FERRY_OK)
            TU_OK(ferry_release(sub, &s));
    }
    tu_send(&p->up, MSG_DONE);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
    child_teardown();
    return 0;
}

static bool wait_readable(int fd, int timeout_ms)
{
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    return poll(&pf, 1, timeout_ms) == 1;
}

/* The topic directory, as an endpoint would make it, for a fake publisher that comes first. */
static void make_topic_dir(void)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%u", tu_dir(), tu_domain());
    TU_CHECK(mkdir(path, 0700) == 0 || errno == EEXIST);
    tu_topic_path(TOPIC, path, sizeof path);
    TU_CHECK(mkdir(path, 0700) == 0 || errno == EEXIST);
}

/* A publisher may hand out segments it can shrink afterwards: a subscriber that mapped them
 * would fault (SIGBUS) on its next look at the ring or the table. It must not be caught so. */
static void test_fake_segment_shrink(void)
{
    static const char *const what[2] = {"connection segment", "data segment"};
    make_topic_dir();
    for (int v = 0; v < 2; v++) {
        fake_listener l = fake_listen(TOPIC, FAKE_ID + (uint64_t)v);
        peer s = peer_make(v);
        pid_t pid = tu_fork(victim_sub_main, &s, 20);
        TU_CHECK_MSG(wait_readable(l.fd, TU_WAIT_MS), "no subscriber connected");
        ferry__hello h;
        int sock = fake_accept(&l, &h);
        fake_segs segs;
        fake_build(&segs, &h, false, false);
        int fds[2] = {segs.data_fd, segs.conn_fd};
        raw_send(sock, &segs.w, sizeof segs.w, fds, 2);
        uint64_t connected = tu_recv(&s.up, TU_WAIT_MS);
        TU_CHECK(ftruncate(v == 0 ? segs.conn_fd : segs.data_fd, 0) == 0);
        tu_send(&s.down, MSG_GO);
        TU_EQ_U64(tu_recv(&s.up, TU_WAIT_MS), MSG_DONE);
        TU_CHILD_OK(pid);
        printf("    shrinkable %s: %s, subscriber survived\n", what[v],
               connected ? "accepted" : "refused");
        peer_close(&s);
        close(sock);
        fake_free(&segs);
        fake_unlisten(TOPIC, &l);
    }
}

/* A publisher's data segment is a sparse memfd: a "frame" that spans a hole of 1 GiB would make
 * the subscriber that reads it allocate 1 GiB, charged to itself. The subscriber finds the hole
 * before it reads (the segment is sealed against writing, so none can be punched later) and
 * drops the publisher; its resident set stays where it was. */
#define SPARSE_HOLE ((uint64_t)1 << 30)

static long rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    TU_CHECK(f != NULL);
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

static void test_sparse_frame(void)
{
    make_topic_dir();
    fake_listener l = fake_listen(TOPIC, FAKE_ID);
    ferry_node *node = hostile_node("victim");
    ferry_subscriber *sub = NULL;
    TU_OK(ferry_subscriber_create(&sub, node, TOPIC, TYPE, ferry_hash(TYPE), NULL));
    ferry_time t0 = ferry_now();
    while (!wait_readable(l.fd, 1)) {
        TU_ERR(ferry_subscriber_wait_publishers(sub, 1, 0), FERRY_ETIMEDOUT);
        TU_CHECK(tu_since(t0) < TU_WAIT_NS);
    }
    ferry__hello h;
    int sock = fake_accept(&l, &h);
    fake_segs segs;
    fake_build(&segs, &h, false, false);
    TU_CHECK(fcntl(segs.conn_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0);
    /* Chunk 0 now spans a hole of 1 GiB: its header page is written, the rest never was. */
    uint64_t data_size = FERRY__PAGE * 5 + SPARSE_HOLE;
    TU_CHECK(ftruncate(segs.data_fd, (off_t)data_size) == 0);
    uint8_t *d = mmap(NULL, FERRY__PAGE * 2, PROT_READ | PROT_WRITE, MAP_SHARED, segs.data_fd, 0);
    TU_CHECK(d != MAP_FAILED);
    ((ferry__data_header *)d)->segment_size = data_size;
    ferry__chunk_entry *table = (ferry__chunk_entry *)(d + 64);
    table[0].offset = 4 * FERRY__PAGE;
    table[0].capacity = SPARSE_HOLE - 64;
    munmap(d, FERRY__PAGE * 2);
    uint8_t *c0 =
        mmap(NULL, FERRY__PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, segs.data_fd, 4 * FERRY__PAGE);
    TU_CHECK(c0 != MAP_FAILED);
    ferry__chunk_header *ch = (ferry__chunk_header *)c0;
    ch->index = 0;
    ch->generation = 1;
    ch->size = SPARSE_HOLE - 64;
    ch->sequence = 1;
    ch->publisher_id = FAKE_ID;
    munmap(c0, FERRY__PAGE);
    TU_CHECK(fcntl(segs.data_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE) ==
             0);
    segs.w.data_size = data_size;
    int fds[2] = {segs.data_fd, segs.conn_fd};
    long rss0 = rss_kb();
    ferry_subscriber_stats st;
    TU_OK(ferry_subscriber_stats_get(sub, &st));
    uint64_t errors = st.protocol_errors;
    raw_send(sock, &segs.w, sizeof segs.w, fds, 2);
    /* Connected, then dropped at the first look at the frame. */
    t0 = ferry_now();
    do {
        ferry_sample s;
        ferry_err e = ferry_take(sub, &s);
        TU_CHECK_MSG(e == FERRY_EAGAIN, "a sample over a hole was taken: %s", ferry_errname(e));
        ferry_wait(sub, TU_MS);
        TU_OK(ferry_subscriber_stats_get(sub, &st));
        TU_CHECK_MSG(tu_since(t0) < TU_WAIT_NS, "the publisher was not dropped");
    } while (st.protocol_errors == errors);
    long rss1 = rss_kb();
    printf("    a frame over a hole of %llu MiB refused; resident set %ld -> %ld KiB\n",
           (unsigned long long)(SPARSE_HOLE >> 20), rss0, rss1);
    TU_CMP_I64(rss1 - rss0, <, 64 * 1024);
    TU_CHECK(log_has("a chunk spans pages the publisher never allocated"));
    close(sock);
    fake_free(&segs);
    fake_unlisten(TOPIC, &l);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
}

/* A publisher may rewrite its connection header while a subscriber checks it: what the
 * subscriber uses must be what it checked. A thread flips deliver_offset between the right
 * value and a wild one in every connection it serves. */
#define RACE_SOCKETS 40
#define RACE_CONNS 256

static struct {
    ferry__conn_header *volatile hdr[RACE_CONNS];
    uint64_t good[RACE_CONNS];
    _Atomic int n;
    _Atomic bool stop;
} race;

static void *race_flipper(void *arg)
{
    (void)arg;
    for (uint64_t k = 0; !atomic_load_explicit(&race.stop, memory_order_relaxed); k++) {
        int n = atomic_load_explicit(&race.n, memory_order_acquire);
        for (int i = 0; i < n; i++) {
            volatile uint64_t *off = &race.hdr[i]->deliver_offset;
            *off = (k & 1) ? (uint64_t)1 << 40 : race.good[i];
        }
    }
    return NULL;
}

static void test_fake_offset_race(void)
{
    fake_listener l[RACE_SOCKETS];
    make_topic_dir();
    for (int i = 0; i < RACE_SOCKETS; i++)
        l[i] = fake_listen(TOPIC, FAKE_ID + (uint64_t)i);
    static fake_segs segs[RACE_CONNS];
    int socks[RACE_CONNS];
    int nconn = 0;
    atomic_store(&race.n, 0);
    atomic_store(&race.stop, false);
    pthread_t flipper;
    TU_CHECK(pthread_create(&flipper, NULL, race_flipper, NULL) == 0);
    peer s = peer_make(2);
    pid_t pid = tu_fork(victim_sub_main, &s, 20);
    bool go_sent = false;
    int child = (int)syscall(SYS_pidfd_open, pid, 0);
    TU_CHECK(child >= 0);
    ferry_time t0 = ferry_now();
    for (;;) {
        struct pollfd pf[RACE_SOCKETS + 2];
        for (int i = 0; i < RACE_SOCKETS; i++)
            pf[i] = (struct pollfd){.fd = l[i].fd, .events = POLLIN};
        pf[RACE_SOCKETS] = (struct pollfd){.fd = s.up.r, .events = POLLIN};
        pf[RACE_SOCKETS + 1] = (struct pollfd){.fd = child, .events = POLLIN};
        poll(pf, RACE_SOCKETS + 2, 10);
        if (pf[RACE_SOCKETS + 1].revents & POLLIN)
            break; /* it ended before saying so: TU_CHILD_OK tells how */
        for (int i = 0; i < RACE_SOCKETS && nconn < RACE_CONNS; i++) {
            if (!(pf[i].revents & POLLIN))
                continue;
            ferry__hello h;
            socks[nconn] = fake_accept(&l[i], &h);
            fake_segs *g = &segs[nconn];
            fake_build(g, &h, true, true);
            race.hdr[nconn] = g->hdr;
            race.good[nconn] = g->hdr->deliver_offset;
            atomic_store_explicit(&race.n, nconn + 1, memory_order_release);
            TU_CHECK(fcntl(g->data_fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE) == 0);
            int fds[2] = {g->data_fd, g->conn_fd};
            raw_send(socks[nconn], &g->w, sizeof g->w, fds, 2);
            nconn++;
        }
        if (pf[RACE_SOCKETS].revents & POLLIN) {
            uint64_t m = tu_recv(&s.up, 0);
            if (m == MSG_DONE)
                break;
            if (!go_sent) { /* it connected (or gave up): let it take */
                tu_send(&s.down, MSG_GO);
                go_sent = true;
            }
        }
        TU_CHECK_MSG(tu_since(t0) < 15 * TU_SEC, "the subscriber did not finish");
    }
    atomic_store(&race.stop, true);
    pthread_join(flipper, NULL);
    close(child);
    TU_CHILD_OK(pid);
    printf("    %d connections with a flipping header, subscriber survived\n", nconn);
    peer_close(&s);
    for (int i = 0; i < nconn; i++) {
        close(socks[i]);
        fake_free(&segs[i]);
    }
    for (int i = 0; i < RACE_SOCKETS; i++)
        fake_unlisten(TOPIC, &l[i]);
}

/* An empty datagram reads like a hang-up, but it may carry descriptors: whoever receives it
 * must close them. First a publisher gets one instead of a hello, then a subscriber instead of
 * a welcome. */
static int empty_sender_main(void *arg)
{
    child_scrub();
    peer *p = arg;
    char path[PATH_MAX];
    publisher_sock(TOPIC, path, sizeof path);
    int s = raw_connect(path);
    int fds[2] = {make_eventfd(), make_pipe_end()};
    raw_send(s, "", 0, fds, 2);
    close_all(fds, 2);
    wait_hangup(s, TU_WAIT_MS);
    close(s);
    tu_send(&p->up, MSG_DONE);
    child_teardown();
    return 0;
}

static void test_empty_datagram_fds(void)
{
    ferry_node *node = hostile_node("victim");
    ferry_publisher *pub = NULL;
    TU_OK(ferry_publisher_create(&pub, node, TOPIC, TYPE, ferry_hash(TYPE), NULL));
    int before = tu_fd_count();
    peer e = peer_make(0);
    pid_t pid = tu_fork(empty_sender_main, &e, 20);
    TU_EQ_U64(tu_serve_until(&pub, 1, &e.up, TU_WAIT_MS), MSG_DONE);
    TU_CHILD_OK(pid);
    peer_close(&e);
    TU_OK(ferry_publisher_poll(pub, TU_MS));
    TU_CMP_I64(tu_fd_count(), ==, before);
    TU_OK(ferry_publisher_destroy(pub));

    fake_listener l = fake_listen(TOPIC, FAKE_ID);
    ferry_subscriber *sub = NULL;
    before = tu_fd_count();
    TU_OK(ferry_subscriber_create(&sub, node, TOPIC, TYPE, ferry_hash(TYPE), NULL));
    int with_sub = tu_fd_count();
    ferry_time t0 = ferry_now();
    while (!wait_readable(l.fd, 1)) {
        TU_ERR(ferry_subscriber_wait_publishers(sub, 1, 0), FERRY_ETIMEDOUT);
        TU_CHECK(tu_since(t0) < TU_WAIT_NS);
    }
    ferry__hello h;
    int sock = fake_accept(&l, &h);
    int fds[3] = {make_eventfd(), make_pipe_end(), make_eventfd()};
    raw_send(sock, "", 0, fds, 3);
    close_all(fds, 3);
    fake_unlisten(TOPIC, &l);
    /* The subscriber drops the connection; its descriptors are back where they were. */
    t0 = ferry_now();
    while (!wait_readable(sock, 0)) {
        TU_ERR(ferry_subscriber_wait_publishers(sub, 1, TU_MS), FERRY_ETIMEDOUT);
        TU_CHECK_MSG(tu_since(t0) < TU_WAIT_NS, "the subscriber kept the connection");
    }
    char junk[8];
    TU_CHECK(recv(sock, junk, sizeof junk, 0) == 0);
    close(sock);
    TU_ERR(ferry_subscriber_wait_publishers(sub, 1, TU_MS), FERRY_ETIMEDOUT);
    /* Gone since with_sub: the fake listener (closed above) and the subscriber's socket to it;
     * none of the three descriptors that came with the empty datagram stayed. */
    TU_CMP_I64(tu_fd_count(), ==, with_sub - 2);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_CMP_I64(tu_fd_count(), ==, before - 1);
    TU_OK(ferry_node_destroy(node));
}

/* A descriptor whose last close waits as long as its sender likes: a TCP socket with SO_LINGER
 * {1, LINGER_S} and a full send queue, connected to a listener (*listener, kept open by the
 * caller) that never accepts. Its close waits until the data is delivered, the linger time
 * runs out, or the listener goes (a reset). */
#define LINGER_S 60

static int make_lingering_socket(int *listener)
{
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    TU_CHECK(l >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    TU_CHECK(bind(l, (struct sockaddr *)&a, sizeof a) == 0 && listen(l, 4) == 0 &&
             getsockname(l, (struct sockaddr *)&a, &alen) == 0);
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    TU_CHECK(s >= 0);
    TU_CHECK_MSG(connect(s, (struct sockaddr *)&a, sizeof a) == 0, "connect: %s", strerror(errno));
    struct linger lg = {.l_onoff = 1, .l_linger = LINGER_S};
    TU_CHECK(setsockopt(s, SOL_SOCKET, SO_LINGER, &lg, sizeof lg) == 0);
    static char chunk[65536];
    size_t queued = 0;
    for (;;) {
        ssize_t n = send(s, chunk, sizeof chunk, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0) {
            TU_CHECK_MSG(errno == EAGAIN || errno == EWOULDBLOCK, "send: %s", strerror(errno));
            break;
        }
        queued += (size_t)n;
    }
    int unsent = 0;
    TU_CHECK(ioctl(s, SIOCOUTQ, &unsent) == 0);
    TU_CHECK_MSG(unsent > 0, "nothing left unsent (%zu bytes queued)", queued);
    *listener = l;
    return s;
}

/* The disposal counters of this process (deferred: descriptors handed to the disposal thread). */
static uint64_t disposed_later(void)
{
    uint64_t deferred, kept;
    uint32_t threads;
    ferry__fd_disposal_stats(&deferred, &kept, &threads);
    TU_EQ_U64(kept, 0);
    return deferred;
}

/* Waits until the descriptor count is back to `want` (a descriptor handed to the disposal
 * thread is closed once the listener behind it is gone). */
static void wait_fd_count(int want)
{
    ferry_time t0 = ferry_now();
    while (tu_fd_count() != want) {
        TU_CHECK_MSG(tu_since(t0) < TU_WAIT_NS, "%d descriptors, expected %d", tu_fd_count(), want);
        usleep(1000);
    }
}

/* The attacker: a hello that carries a lingering socket, its own reference dropped at once. */
static int linger_hello_main(void *arg)
{
    child_scrub();
    peer *p = arg;
    int listener;
    int lingering = make_lingering_socket(&listener);
    char path[PATH_MAX];
    publisher_sock(TOPIC, path, sizeof path);
    int s = raw_connect(path);
    ferry__hello h;
    hello_init(&h, TOPIC);
    raw_send(s, &h, sizeof h, &lingering, 1);
    close(lingering);
    tu_send(&p->up, MSG_READY);
    /* The listener stays until the test has seen the publisher go on. */
    TU_EQ_U64(tu_recv(&p->down, TU_WAIT_MS * 6), MSG_DONE);
    close(listener);
    close(s);
    child_teardown();
    return 0;
}

/* A peer hands over a descriptor whose close waits a minute, and drops its own reference: the
 * publisher that receives it with a hello, and the subscriber that finds it queued behind a
 * datagram that ends the connection, go on at once (the close happens on the process's disposal
 * thread); the descriptor is closed once the listener behind it is gone. */
static void test_linger_fds(void)
{
    ferry_node *node = hostile_node("victim");
    ferry_publisher *pub = NULL;
    TU_OK(ferry_publisher_create(&pub, node, TOPIC, TYPE, ferry_hash(TYPE), NULL));
    int before = tu_fd_count();
    uint64_t deferred0 = disposed_later();
    peer a = peer_make(0);
    pid_t pid = tu_fork(linger_hello_main, &a, 120);
    /* The publisher does not run until the attacker has dropped its reference (a connection
     * waits in the listen backlog, and its hello with it). */
    TU_EQ_U64(tu_recv(&a.up, TU_WAIT_MS), MSG_READY);
    /* The hello is read by the publisher's housekeeping: no call of it waits for the close. */
    ferry_publisher_stats ps;
    int64_t slowest = 0;
    ferry_time t0 = ferry_now();
    do {
        ferry_time c0 = ferry_now();
        TU_OK(ferry_publisher_poll(pub, TU_MS));
        if (tu_since(c0) > slowest)
            slowest = tu_since(c0);
        TU_OK(ferry_publisher_stats_get(pub, &ps));
        TU_CHECK_MSG(tu_since(t0) < TU_WAIT_NS, "the hello was not refused");
    } while (ps.protocol_errors == 0);
    printf("    publisher: hello with a lingering socket refused, slowest poll %.1f ms (the "
           "close would wait %d s)\n",
           (double)slowest / 1e6, LINGER_S);
    TU_CMP_I64(slowest, <, 5 * TU_SEC);
    TU_CMP_U64(disposed_later(), >, deferred0);
    tu_publish_pattern(pub, 64, 1);
    tu_send(&a.down, MSG_DONE);
    TU_CHILD_OK(pid);
    peer_close(&a);
    wait_fd_count(before);
    TU_OK(ferry_publisher_destroy(pub));

    /* A fake publisher: an empty datagram (it ends the connection), then one carrying the
     * lingering socket, which the subscriber's close of the connection must not release on its
     * own thread. */
    fake_listener l = fake_listen(TOPIC, FAKE_ID);
    ferry_subscriber *sub = NULL;
    before = tu_fd_count();
    TU_OK(ferry_subscriber_create(&sub, node, TOPIC, TYPE, ferry_hash(TYPE), NULL));
    int with_sub = tu_fd_count();
    t0 = ferry_now();
    while (!wait_readable(l.fd, 1)) {
        TU_ERR(ferry_subscriber_wait_publishers(sub, 1, 0), FERRY_ETIMEDOUT);
        TU_CHECK(tu_since(t0) < TU_WAIT_NS);
    }
    ferry__hello h;
    int sock = fake_accept(&l, &h);
    int listener;
    int lingering = make_lingering_socket(&listener);
    deferred0 = disposed_later();
    raw_send(sock, "", 0, NULL, 0);
    raw_send(sock, "", 0, &lingering, 1);
    close(lingering);
    fake_unlisten(TOPIC, &l);
    slowest = 0;
    t0 = ferry_now();
    while (!wait_readable(sock, 0)) {
        ferry_time c0 = ferry_now();
        TU_ERR(ferry_subscriber_wait_publishers(sub, 1, TU_MS), FERRY_ETIMEDOUT);
        if (tu_since(c0) > slowest)
            slowest = tu_since(c0);
        TU_CHECK_MSG(tu_since(t0) < TU_WAIT_NS, "the subscriber kept the connection");
    }
    printf("    subscriber: connection with a lingering socket queued dropped, slowest call "
           "%.1f ms\n",
           (double)slowest / 1e6);
    TU_CMP_I64(slowest, <, 5 * TU_SEC);
    TU_CMP_U64(disposed_later(), >, deferred0);
    close(sock);
    close(listener);
    /* Gone since with_sub: the fake listener and the subscriber's socket to it. */
    wait_fd_count(with_sub - 2);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_CMP_I64(tu_fd_count(), ==, before - 1);
    TU_OK(ferry_node_destroy(node));
}

/* ---- (d) peers that try to stall, flood, lock out or starve a publisher ---------------------- */

#define RATE_FRAMES 200
#define RATE_PERIOD_NS (2 * TU_MS)
/* The longest one loan and publish may take, attacked: a stall is 100 ms (a block timeout) or
 * for ever. */
#define CALL_MAX_NS (50 * TU_MS * TU_SLOWDOWN)

static ferry_publisher *rate_publisher(ferry_node *node, uint32_t max_subscribers)
{
    ferry_publisher_options po;
    ferry_publisher_options_init(&po);
    po.max_chunks = 64;
    po.pool_bytes = 64 * 4096;
    po.max_sample_size = 4000;
    po.max_subscribers = max_subscribers;
    ferry_publisher *pub = NULL;
    TU_OK(ferry_publisher_create(&pub, node, TOPIC, TYPE, ferry_hash(TYPE), &po));
    return pub;
}

/* Two well-behaved subscribers in processes of their own (good_sub_main checks every frame). */
typedef struct honest {
    peer p[2];
    pid_t pid[2];
} honest;

static honest honest_start(ferry_publisher **pub)
{
    honest h;
    for (int i = 0; i < 2; i++) {
        h.p[i] = peer_make(0);
        h.pid[i] = tu_fork(good_sub_main, &h.p[i], 60);
        TU_EQ_U64(tu_serve_until(pub, 1, &h.p[i].up, TU_WAIT_MS), MSG_READY);
    }
    return h;
}

/* Both received the last frame, intact and in order, and at least at_least frames. */
static void honest_finish(ferry_publisher **pub, honest *h, uint64_t seq, uint64_t at_least)
{
    for (int i = 0; i < 2; i++) {
        tu_send(&h->p[i].down, seq);
        uint64_t got = tu_serve_until(pub, 1, &h->p[i].up, TU_WAIT_MS);
        TU_CMP_U64(got, >=, at_least);
        tu_send(&h->p[i].down, MSG_QUIT);
        TU_CHILD_OK(h->pid[i]);
        peer_close(&h->p[i]);
        printf("    honest subscriber %d received %" PRIu64 " of %" PRIu64 " frames intact\n", i,
               got, seq);
    }
}

/* Publishes frames at a camera's pace, one every RATE_PERIOD_NS, serving in between: each loan
 * and publish must succeed (never short of chunks) within CALL_MAX_NS, and the whole run keep
 * its rate, whatever an attacker does meanwhile. */
static void publish_at_rate(ferry_publisher *pub, uint64_t *seq, int frames)
{
    int64_t worst = 0;
    ferry_time start = ferry_now();
    for (int i = 0; i < frames; i++) {
        ferry_time t0 = ferry_now();
        TU_CHECK_MSG(publish_next(pub, seq), "frame %d: the pool ran dry", i);
        int64_t took = tu_since(t0);
        worst = took > worst ? took : worst;
        int64_t left;
        while ((left = (int64_t)(i + 1) * RATE_PERIOD_NS - tu_since(start)) > 0)
            TU_OK(ferry_publisher_poll(pub, left));
    }
    int64_t total = tu_since(start);
    printf("    %d frames in %.0f ms, slowest loan+publish %.2f ms\n", frames, total / 1e6,
           worst / 1e6);
    TU_CMP_I64(worst, <, CALL_MAX_NS);
    TU_CMP_I64(total, <, frames * RATE_PERIOD_NS + TU_SEC * TU_SLOWDOWN);
}

/* Completes a handshake and keeps the connection segment mapped; *conn_size gets its size. */
static int raw_subscribe_mapped(const char *path, ferry__conn_header **conn, uint64_t *conn_size)
{
    int s = raw_connect(path);
    ferry__hello h;
    hello_init(&h, TOPIC);
    raw_send(s, &h, sizeof h, NULL, 0);
    ferry__welcome w;
    int fds[8], nfds;
    TU_EQ_U64(raw_recv(s, &w, sizeof w, fds, &nfds, TU_WAIT_MS), sizeof w);
    TU_EQ_U64(w.status, FERRY_OK);
    /* The data and connection segments, and nothing a peer could share and tamper with. */
    TU_EQ_U64(nfds, 2);
    for (int i = 0; i < nfds; i++)
        TU_EQ_U64(ferry__fd_is_memfd(fds[i]), 1);
    TU_CHECK(ferry__fd_size(fds[1], conn_size) == 0);
    *conn = mmap(NULL, *conn_size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[1], 0);
    TU_CHECK(*conn != MAP_FAILED);
    close_all(fds, nfds);
    return s;
}

/* Reads every queued datagram without waiting; returns how many were wake-ups. */
static uint64_t drain_wakes(int sock)
{
    uint64_t wakes = 0;
    for (;;) {
        ferry__bye m;
        ssize_t n = recv(sock, &m, sizeof m, MSG_DONTWAIT);
        if (n <= 0)
            return wakes;
        wakes += ferry__ctl_decode(&m, (size_t)n) == FERRY__MSG_WAKE;
    }
}

/* The attacks on wake-ups: a hello that hands over a blocking eventfd whose counter is full (it
 * used to freeze the publisher's next wake-up write for ever); then an admitted subscriber that
 * rings both doorbells all the time and never reads its socket, so that wake-ups pile up until
 * it is full; last, one that floods the publisher with wake-ups. */
static int stall_main(void *arg)
{
    child_scrub();
    peer *p = arg;
    char path[PATH_MAX];
    publisher_sock(TOPIC, path, sizeof path);

    int s = raw_connect(path);
    int efd = eventfd(0, EFD_CLOEXEC); /* blocking */
    uint64_t full = 0xfffffffffffffffeull;
    TU_CHECK(write(efd, &full, sizeof full) == sizeof full);
    ferry__hello h;
    hello_init(&h, TOPIC);
    raw_send(s, &h, sizeof h, &efd, 1);
    close(efd);
    TU_EQ_U64(wait_hangup(s, TU_WAIT_MS), FERRY_EPROTO);
    close(s);

    ferry__conn_header *c;
    uint64_t size;
    s = raw_subscribe_mapped(path, &c, &size);
    tu_send(&p->up, MSG_READY);
    while (!tu_readable(&p->down)) {
        atomic_store(&c->sub_waiting, FERRY__DOORBELL_NOTIFIER);
        atomic_store(&c->pub_waiting, 1);
        tu_sleep_ns(200 * 1000);
    }
    TU_EQ_U64(tu_recv(&p->down, 0), MSG_STOP);
    uint64_t wakes = drain_wakes(s);
    munmap(c, size);
    close(s);

    s = raw_subscribe_mapped(path, &c, &size);
    munmap(c, size);
    ferry__bye wake;
    ferry__wake_init(&wake);
    int sent = 0;
    while (sent < 4 * FERRY__WAKE_FLOOD && ferry__send_msg(s, &wake, sizeof wake, NULL, 0) == 0)
        sent++;
    TU_CMP_I64(sent, >, FERRY__WAKE_FLOOD);
    wait_hangup(s, TU_WAIT_MS);
    close(s);
    tu_send(&p->up, wakes);
    child_teardown();
    return 0;
}

static void test_stall_wakeups(void)
{
    ferry_node *node = hostile_node("victim");
    ferry_publisher *pub = rate_publisher(node, 8);
    honest h = honest_start(&pub);
    peer bad = peer_make(0);
    pid_t bad_pid = tu_fork(stall_main, &bad, 60);
    TU_EQ_U64(tu_serve_until(&pub, 1, &bad.up, TU_WAIT_MS), MSG_READY);
    ferry_publisher_stats st;
    TU_OK(ferry_publisher_stats_get(pub, &st));
    TU_CMP_U64(st.rejected, >=, 1);
    TU_CMP_U64(st.protocol_errors, >=, 1);
    TU_EQ_U64(st.subscribers, 3);

    /* More frames than wake-ups fit in a socket's queue. */
    uint64_t seq = 0;
    publish_at_rate(pub, &seq, 3 * RATE_FRAMES);
    tu_send(&bad.down, MSG_STOP);
    uint64_t wakes = tu_serve_until(&pub, 1, &bad.up, TU_WAIT_MS);
    TU_CHILD_OK(bad_pid);
    peer_close(&bad);
    /* It was woken (so the publisher did try), and the pile never slowed the publisher. */
    printf("    %" PRIu64 " wake-ups were queued for the subscriber that never read them\n", wakes);
    TU_CMP_U64(wakes, >=, 1);
    TU_CMP_U64(wakes, <, 3 * RATE_FRAMES);
    TU_CHECK_MSG(log_has("a flood of wake-ups"), "no flood in the log:\n%s", log_text);
    /* And after the attacker left. */
    publish_at_rate(pub, &seq, RATE_FRAMES / 4);
    TU_OK(ferry_publisher_stats_get(pub, &st));
    TU_EQ_U64(st.subscribers, 2);
    TU_CMP_U64(st.protocol_errors, >=, 2);
    honest_finish(&pub, &h, seq, RATE_FRAMES / 4);
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
}

/* A subscriber that asks to block the publisher (FERRY_OVERFLOW_BLOCK) and never takes. */
static int blocker_main(void *arg)
{
    child_scrub();
    peer *p = arg;
    ferry_node *node = hostile_node("blocker");
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = 1;
    so.overflow = FERRY_OVERFLOW_BLOCK;
    ferry_subscriber *sub = NULL;
    TU_OK(ferry_subscriber_create(&sub, node, TOPIC, TYPE, ferry_hash(TYPE), &so));
    /* Refused, with the reason in its own log. */
    TU_ERR(ferry_subscriber_wait_publishers(sub, 1, 500 * TU_MS), FERRY_ETIMEDOUT);
    TU_CHECK_MSG(log_has("does not admit blocking subscribers"), "log:\n%s", log_text);
    ferry_subscriber_stats st;
    TU_OK(ferry_subscriber_stats_get(sub, &st));
    TU_CMP_U64(st.rejected, >=, 1);
    tu_send(&p->up, MSG_READY);
    /* It stays, refused: nothing it does reaches the publisher again. */
    while (!tu_readable(&p->down))
        ferry_wait(sub, 10 * TU_MS);
    TU_EQ_U64(tu_recv(&p->down, 0), MSG_QUIT);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
    child_teardown();
    return 0;
}

static void test_blocking_refused(void)
{
    ferry_node *node = hostile_node("victim");
    /* No call may wait for ever on its subscribers. */
    ferry_publisher_options po;
    ferry_publisher_options_init(&po);
    po.block_timeout_ns = -1;
    ferry_publisher *pub = NULL;
    TU_ERR(ferry_publisher_create(&pub, node, TOPIC, TYPE, ferry_hash(TYPE), &po), FERRY_EINVAL);

    pub = rate_publisher(node, 8);
    honest h = honest_start(&pub);
    peer bad = peer_make(0);
    pid_t bad_pid = tu_fork(blocker_main, &bad, 60);
    TU_EQ_U64(tu_serve_until(&pub, 1, &bad.up, TU_WAIT_MS), MSG_READY);
    uint64_t seq = 0;
    publish_at_rate(pub, &seq, RATE_FRAMES);
    ferry_publisher_stats st;
    TU_OK(ferry_publisher_stats_get(pub, &st));
    TU_EQ_U64(st.subscribers, 2);
    TU_CMP_U64(st.rejected, >=, 1);
    TU_CHECK(log_has("does not admit blocking subscribers"));
    tu_send(&bad.down, MSG_QUIT);
    TU_CHILD_OK(bad_pid);
    peer_close(&bad);
    honest_finish(&pub, &h, seq, RATE_FRAMES / 4);
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
}

/* Many connections that never say hello, kept up: each one dropped is made again at once. */
#define LOCKOUT_CONNS 48
static int lockout_main(void *arg)
{
    child_scrub();
    peer *p = arg;
    char path[PATH_MAX];
    publisher_sock(TOPIC, path, sizeof path);
    int socks[LOCKOUT_CONNS];
    for (int i = 0; i < LOCKOUT_CONNS; i++)
        socks[i] = raw_connect(path);
    tu_send(&p->up, MSG_READY);
    uint64_t redone = 0;
    while (!tu_readable(&p->down)) {
        struct pollfd pf[LOCKOUT_CONNS];
        for (int i = 0; i < LOCKOUT_CONNS; i++)
            pf[i] = (struct pollfd){.fd = socks[i], .events = POLLIN};
        if (poll(pf, LOCKOUT_CONNS, 10) <= 0)
            continue;
        for (int i = 0; i < LOCKOUT_CONNS; i++)
            if (pf[i].revents) {
                close(socks[i]);
                socks[i] = raw_connect(path);
                redone++;
            }
    }
    TU_EQ_U64(tu_recv(&p->down, 0), MSG_QUIT);
    for (int i = 0; i < LOCKOUT_CONNS; i++)
        close(socks[i]);
    tu_send(&p->up, redone);
    child_teardown();
    return 0;
}

static void test_silent_lockout(void)
{
    ferry_node *node = hostile_node("victim");
    ferry_publisher *pub = rate_publisher(node, 3);
    peer bad = peer_make(0);
    pid_t bad_pid = tu_fork(lockout_main, &bad, 60);
    TU_EQ_U64(tu_serve_until(&pub, 1, &bad.up, TU_WAIT_MS), MSG_READY);
    int lines_before = log_lines;
    /* New subscribers still get in while the flood goes on: at once, or, when the flood holds
     * every pending place, once the silent ones time out (1 s each; a busy machine may need two
     * rounds of housekeeping). */
    ferry_time t0 = ferry_now();
    honest h = honest_start(&pub);
    printf("    two subscribers connected in %.0f ms under a flood of %d silent connections\n",
           tu_since(t0) / 1e6, LOCKOUT_CONNS);
    TU_CMP_I64(tu_since(t0), <, 3 * TU_SEC * TU_SLOWDOWN);
    uint64_t seq = 0;
    publish_at_rate(pub, &seq, RATE_FRAMES * 2);
    ferry_publisher_stats st;
    TU_OK(ferry_publisher_stats_get(pub, &st));
    TU_EQ_U64(st.subscribers, 2);
    TU_CMP_U64(st.pending_dropped, >=, LOCKOUT_CONNS);

    /* At its limit, the publisher refuses a newcomer, which is told why and prints it. */
    ferry_node_options lo = tu_node_options("late");
    lo.log = log_capture;
    ferry_node *late_node = NULL;
    TU_OK(ferry_node_create(&late_node, &lo));
    ferry_subscriber *third = NULL, *fourth = NULL;
    TU_OK(ferry_subscriber_create(&third, late_node, TOPIC, TYPE, ferry_hash(TYPE), NULL));
    tu_connect_local(pub, 3, third, 1);
    TU_OK(ferry_subscriber_create(&fourth, late_node, TOPIC, TYPE, ferry_hash(TYPE), NULL));
    t0 = ferry_now();
    while (!log_has("refused us: publisher at its limit of 3 subscribers")) {
        TU_OK(ferry_publisher_poll(pub, TU_MS));
        TU_ERR(ferry_subscriber_wait_publishers(fourth, 1, TU_MS), FERRY_ETIMEDOUT);
        TU_CHECK_MSG(tu_since(t0) < TU_WAIT_NS, "no refusal in the log:\n%s", log_text);
    }
    TU_OK(ferry_subscriber_destroy(fourth));
    TU_OK(ferry_subscriber_destroy(third));
    TU_OK(ferry_node_destroy(late_node));

    tu_send(&bad.down, MSG_QUIT);
    uint64_t redone = tu_serve_until(&pub, 1, &bad.up, TU_WAIT_MS);
    TU_CHILD_OK(bad_pid);
    peer_close(&bad);
    /* The publisher logged at a bounded rate, however many it dropped. */
    int lines = log_lines - lines_before;
    printf("    %" PRIu64 " connections made again after a drop, %" PRIu64
           " dropped in all, %d log lines\n",
           redone, st.pending_dropped, lines);
    TU_CMP_I64(lines, <=, FERRY__PEER_LOG_BURST + 40);
    honest_finish(&pub, &h, seq, RATE_FRAMES / 4);
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
}

/* A subscriber that takes every frame and never gives one back. */
/* A subscriber process that takes everything and gives nothing back, through p->variant
 * connections (subscribers of nodes of its own) at once. */
static int hoarder_main(void *arg)
{
    child_scrub();
    peer *p = arg;
    int nsubs = p->variant > 0 ? p->variant : 1;
    ferry_node *node[2] = {NULL, NULL};
    ferry_subscriber *sub[2] = {NULL, NULL};
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = 16;
    so.max_held = 65536;
    for (int k = 0; k < nsubs; k++) {
        node[k] = hostile_node(k == 0 ? "hoarder" : "hoarder2");
        TU_OK(ferry_subscriber_create(&sub[k], node[k], TOPIC, TYPE, ferry_hash(TYPE), &so));
        TU_OK(ferry_subscriber_wait_publishers(sub[k], 1, TU_WAIT_NS));
    }
    tu_send(&p->up, MSG_READY);
    static ferry_sample held[2][4096];
    uint32_t n[2] = {0, 0};
    for (bool told = false; !told;) {
        told = tu_readable(&p->down); /* then one last round of takes */
        if (!told)
            ferry_wait(sub[0], 10 * TU_MS);
        for (int k = 0; k < nsubs; k++)
            while (n[k] < 4096 && ferry_take(sub[k], &held[k][n[k]]) == FERRY_OK)
                n[k]++;
    }
    TU_EQ_U64(tu_recv(&p->down, 0), MSG_STOP);
    for (int k = 0; k < nsubs; k++) {
        ferry_subscriber_stats st;
        TU_OK(ferry_subscriber_stats_get(sub[k], &st));
        /* What it missed at its limit counts as dropped for it; with two connections one of
         * them may have been served all along. */
        if (k == 0 && nsubs == 1)
            TU_CMP_U64(st.dropped, >, 0);
        printf("    hoarder connection %d holds %u samples, dropped %" PRIu64 "\n", k, n[k],
               st.dropped);
    }
    tu_send(&p->up, n[0] + n[1]);
    TU_EQ_U64(tu_recv(&p->down, TU_WAIT_MS), MSG_QUIT);
    for (int k = 0; k < nsubs; k++) {
        for (uint32_t i = 0; i < n[k]; i++)
            TU_OK(ferry_release(sub[k], &held[k][i]));
        TU_OK(ferry_subscriber_destroy(sub[k]));
        TU_OK(ferry_node_destroy(node[k]));
    }
    child_teardown();
    return 0;
}

/* A subscriber that holds what it takes until told: it gets seven eighths of the pool at most
 * (the default per-subscriber limit), the rest stays for the camera and the honest subscribers.
 * The limit is its process's, whatever number of connections it makes (connections variant). */
static void hoarder_run(int connections)
{
    ferry_node *node = hostile_node("victim");
    ferry_publisher_options po;
    ferry_publisher_options_init(&po);
    po.max_chunks = 256;
    po.pool_bytes = 256 * 4096;
    po.max_sample_size = 4000;
    ferry_publisher *pub = NULL;
    TU_OK(ferry_publisher_create(&pub, node, TOPIC, TYPE, ferry_hash(TYPE), &po));
    honest h = honest_start(&pub);
    peer bad = peer_make(connections);
    pid_t bad_pid = tu_fork(hoarder_main, &bad, 60);
    TU_EQ_U64(tu_serve_until(&pub, 1, &bad.up, TU_WAIT_MS), MSG_READY);
    uint64_t seq = 0;
    /* More than the pool's chunks: without a limit the hoarder would own them all. */
    publish_at_rate(pub, &seq, 2 * RATE_FRAMES);
    tu_send(&bad.down, MSG_STOP);
    uint64_t held = tu_serve_until(&pub, 1, &bad.up, TU_WAIT_MS);
    ferry_publisher_stats st;
    TU_OK(ferry_publisher_stats_get(pub, &st));
    printf("    the hoarder holds %" PRIu64 " of %u chunks through %d connection%s; %" PRIu64
           " deliveries to it skipped\n",
           held, st.chunks_total, connections, connections == 1 ? "" : "s", st.limited);
    TU_EQ_U64(held, 224); /* seven eighths of max_chunks, the default limit */
    TU_CMP_U64(st.limited, >, 0);
    TU_CHECK(log_has("the limit: it receives nothing more"));
    tu_send(&bad.down, MSG_QUIT);
    TU_CHILD_OK(bad_pid);
    peer_close(&bad);
    honest_finish(&pub, &h, seq, RATE_FRAMES / 4);
    TU_OK(ferry_publisher_poll(pub, 0));
    TU_OK(ferry_publisher_stats_get(pub, &st));
    TU_EQ_U64(st.chunks_in_use, 0);
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
}

static void test_hoarder(void)
{
    hoarder_run(1);
}

static void test_hoarder_two_connections(void)
{
    hoarder_run(2);
}

/* A listener in the topic directory that accepts and never answers: the subscriber gives up on
 * it after 2 s, and its frames from an honest publisher keep coming meanwhile. It comes back
 * after a back-off (a publisher stalled for a while, by a debugger, swap or SIGSTOP, is not
 * lost for good): 1 s after the first drop, 2 s after the second, so a listener that stays
 * silent costs it one connection per back-off, at most one per 30 s. */
static void test_silent_publisher(void)
{
    ferry_node *node = hostile_node("victim");
    ferry_publisher *pub = rate_publisher(node, 4);
    ferry_subscriber *sub = NULL;
    TU_OK(ferry_subscriber_create(&sub, node, TOPIC, TYPE, ferry_hash(TYPE), NULL));
    tu_connect_local(pub, 1, sub, 1);
    fake_listener l = fake_listen(TOPIC, FAKE_ID);
    uint64_t seq = 0, got = 0;
    ferry_time t0 = ferry_now();
    int sock = -1, accepts = 0, drops = 0;
    int64_t accepted_at[3] = {0}, dropped_at[2] = {0};
    while (accepts < 3 && tu_since(t0) < 30 * TU_SEC) {
        TU_CHECK(publish_next(pub, &seq));
        TU_OK(ferry_publisher_poll(pub, 0));
        ferry_err e = ferry_wait(sub, 5 * TU_MS);
        TU_CHECK(e == FERRY_OK || e == FERRY_ETIMEDOUT);
        ferry_sample s;
        while (ferry_take(sub, &s) == FERRY_OK) {
            TU_SAMPLE_INTACT(&s, frame_size(s.sequence));
            got++;
            TU_OK(ferry_release(sub, &s));
        }
        if (sock < 0 && wait_readable(l.fd, 0)) {
            ferry__hello h;
            sock = fake_accept(&l, &h); /* and never a word back */
            accepted_at[accepts++] = tu_since(t0);
        } else if (sock >= 0 && wait_readable(sock, 0)) {
            char b;
            TU_EQ_U64(recv(sock, &b, 1, MSG_DONTWAIT), 0);
            close(sock);
            sock = -1;
            TU_CHECK(drops < 2);
            dropped_at[drops] = tu_since(t0);
            printf("    the silent listener was dropped %.0f ms after connection %d\n",
                   (dropped_at[drops] - accepted_at[drops]) / 1e6, accepts);
            TU_CMP_I64(dropped_at[drops] - accepted_at[drops], >=, 1900 * TU_MS);
            drops++;
        }
    }
    TU_CHECK_MSG(accepts == 3, "the subscriber did not come back to the listener twice");
    TU_CMP_I64(drops, ==, 2);
    printf("    it came back %.0f ms after the first drop, %.0f ms after the second\n",
           (accepted_at[1] - dropped_at[0]) / 1e6, (accepted_at[2] - dropped_at[1]) / 1e6);
    TU_CMP_I64(accepted_at[1] - dropped_at[0], >=, 900 * TU_MS);
    TU_CMP_I64(accepted_at[2] - dropped_at[1], >=, 1900 * TU_MS);
    TU_CHECK(log_has("did not answer our hello within 2 s; trying again in 1 s"));
    TU_CHECK(log_has("did not answer our hello within 2 s; trying again in 2 s"));
    printf("    %" PRIu64 " of %" PRIu64 " frames taken intact meanwhile\n", got, seq);
    TU_CMP_U64(got, >=, seq / 2);
    if (sock >= 0)
        close(sock);
    fake_unlisten(TOPIC, &l);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
}

/* ---- a camera that sleeps between frames, under a flood of silent connections ---------------- */

#define CAMERA_PERIOD_NS (33 * TU_MS) /* 30 Hz */
#define FLOOD_CONNS 1000
#define FLOOD_HONEST 8
#define FLOOD_ADMIT_NS (20 * TU_SEC) /* the generous bound: a busy 2-CPU machine included */
#define NEVER UINT64_MAX
/* A subscriber kept out longer than this has logged why (a stuck handshake is said at 2 s). */
#define FLOOD_QUIET_NS (4 * TU_SEC)

/* A camera: loans, publishes and sleeps to its next frame; it runs housekeeping (accepts,
 * handshakes) only inside its loans. */
static int camera_main(void *arg)
{
    child_scrub();
    peer *p = arg;
    ferry_node *node = hostile_node("camera");
    ferry_publisher *pub = rate_publisher(node, 2 * FLOOD_HONEST);
    tu_send(&p->up, MSG_READY);
    uint64_t seq = 0;
    ferry_time start = ferry_now();
    while (!tu_readable(&p->down)) {
        TU_CHECK_MSG(publish_next(pub, &seq), "frame %" PRIu64 ": the pool ran dry", seq);
        int64_t left = (int64_t)seq * CAMERA_PERIOD_NS - tu_since(start);
        if (left > 0)
            tu_sleep_ns(left);
    }
    TU_EQ_U64(tu_recv(&p->down, 0), MSG_QUIT);
    ferry_publisher_stats st;
    TU_OK(ferry_publisher_stats_get(pub, &st));
    printf("    camera: %" PRIu64 " frames in %.1f s (%.1f Hz), %" PRIu64 " silent connections "
           "dropped, %" PRIu64 " subscribers\n",
           seq, tu_since(start) / 1e9, seq / (tu_since(start) / 1e9), st.pending_dropped,
           (uint64_t)st.subscribers);
    tu_send(&p->up, st.pending_dropped);
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
    child_teardown();
    return 0;
}

/* Non-blocking connect to path: the socket, or -1 with errno (EAGAIN: the backlog is full). */
static int flood_connect(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    TU_CHECK(fd >= 0);
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    memcpy(a.sun_path, path, strlen(path) + 1);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0)
        return fd;
    int e = errno;
    TU_CHECK_MSG(e == EAGAIN, "connect %s: %s", path, strerror(e));
    close(fd);
    errno = e;
    return -1;
}

/* The attacker: up to FLOOD_CONNS connections that never say a word, each one the publisher
 * drops made again at once, and new ones tried until the listen backlog is full, at least
 * every millisecond. Ready once the backlog was full. */
static int flood_main(void *arg)
{
    child_scrub();
    peer *p = arg;
    struct rlimit rl;
    TU_CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    if (rl.rlim_cur < FLOOD_CONNS + 64 && rl.rlim_max >= FLOOD_CONNS + 64) {
        rl.rlim_cur = FLOOD_CONNS + 64;
        TU_CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
    }
    int cap = rl.rlim_cur < FLOOD_CONNS + 64 ? (int)rl.rlim_cur - 64 : FLOOD_CONNS;
    char path[PATH_MAX];
    publisher_sock(TOPIC, path, sizeof path);
    static int socks[FLOOD_CONNS];
    static struct pollfd pf[FLOOD_CONNS];
    for (int i = 0; i < cap; i++)
        socks[i] = -1;
    uint64_t made = 0, full = 0;
    bool ready = false;
    while (!tu_readable(&p->down)) {
        for (int i = 0; i < cap; i++) {
            if (socks[i] >= 0)
                continue;
            socks[i] = flood_connect(path);
            if (socks[i] < 0) {
                full++;
                break;
            }
            made++;
        }
        if (!ready && (full > 0 || made >= (uint64_t)cap)) {
            tu_send(&p->up, MSG_READY);
            ready = true;
        }
        int n = 0;
        for (int i = 0; i < cap; i++)
            if (socks[i] >= 0)
                pf[n++] = (struct pollfd){.fd = socks[i], .events = POLLIN};
        if (poll(pf, (nfds_t)n, 1) <= 0)
            continue;
        for (int k = 0; k < n; k++) {
            if (!pf[k].revents)
                continue;
            for (int i = 0; i < cap; i++)
                if (socks[i] == pf[k].fd) {
                    close(socks[i]);
                    socks[i] = -1;
                }
        }
    }
    TU_EQ_U64(tu_recv(&p->down, 0), MSG_QUIT);
    for (int i = 0; i < cap; i++)
        if (socks[i] >= 0)
            close(socks[i]);
    printf("    attacker: %d connections at most, %" PRIu64 " made, %" PRIu64
           " refused by a full backlog\n",
           cap, made, full);
    tu_send(&p->up, made);
    child_teardown();
    return 0;
}

/* An honest subscriber under the flood: how long it took to take its first frame (NEVER when it
 * did not within FLOOD_ADMIT_NS), and whether it logged why it waited. */
static int flood_honest_main(void *arg)
{
    child_scrub();
    peer *p = arg;
    ferry_node *node = hostile_node("honest");
    ferry_subscriber *sub = NULL;
    TU_OK(ferry_subscriber_create(&sub, node, TOPIC, TYPE, ferry_hash(TYPE), NULL));
    ferry_time t0 = ferry_now();
    uint64_t took = NEVER;
    ferry_err last = FERRY_OK;
    while (tu_since(t0) < FLOOD_ADMIT_NS) {
        last = ferry_subscriber_wait_publishers(sub, 1, TU_SEC);
        if (last != FERRY_OK) {
            TU_ERR(last, FERRY_ETIMEDOUT);
            continue;
        }
        if (ferry_wait(sub, TU_SEC) != FERRY_OK)
            continue;
        ferry_sample s;
        TU_OK(ferry_take(sub, &s));
        TU_SAMPLE_INTACT(&s, frame_size(s.sequence));
        TU_OK(ferry_release(sub, &s));
        took = (uint64_t)tu_since(t0);
        break;
    }
    bool told = log_has("did not answer our hello") || log_has("has not read our hello") ||
                log_has("listen backlog");
    if ((took == NEVER || took > FLOOD_QUIET_NS) && !told)
        printf("    kept out for %.1f s without a word; its log:\n%s",
               (took == NEVER ? FLOOD_ADMIT_NS : (int64_t)took) / 1e9, log_text);
    tu_send(&p->up, took);
    tu_send(&p->up, told);
    TU_EQ_U64(tu_recv(&p->down, 30 * TU_WAIT_MS), MSG_QUIT);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
    child_teardown();
    return 0;
}

static void test_backlog_flood(void)
{
    peer cam = peer_make(0), bad = peer_make(0);
    pid_t cam_pid = tu_fork(camera_main, &cam, 120);
    TU_EQ_U64(tu_recv(&cam.up, TU_WAIT_MS), MSG_READY);
    pid_t bad_pid = tu_fork(flood_main, &bad, 120);
    TU_EQ_U64(tu_recv(&bad.up, TU_WAIT_MS), MSG_READY);
    tu_sleep_ns(TU_SEC); /* the flood in full swing */
    peer h[FLOOD_HONEST];
    pid_t hpid[FLOOD_HONEST];
    for (int i = 0; i < FLOOD_HONEST; i++) {
        h[i] = peer_make(0);
        hpid[i] = tu_fork(flood_honest_main, &h[i], 120);
    }
    uint64_t took[FLOOD_HONEST], worst = 0;
    int in_3s = 0, admitted = 0, told = 0, quiet = 0;
    for (int i = 0; i < FLOOD_HONEST; i++) {
        took[i] = tu_recv(&h[i].up, 3 * TU_WAIT_MS);
        bool said = tu_recv(&h[i].up, TU_WAIT_MS) != 0;
        told += said;
        quiet += !said && (took[i] == NEVER || took[i] > (uint64_t)FLOOD_QUIET_NS);
        admitted += took[i] != NEVER;
        in_3s += took[i] != NEVER && took[i] <= 3 * (uint64_t)TU_SEC;
        worst = took[i] != NEVER && took[i] > worst ? took[i] : worst;
        if (took[i] == NEVER)
            printf("    honest subscriber %d: no frame in %.0f s\n", i, FLOOD_ADMIT_NS / 1e9);
        else
            printf("    honest subscriber %d: first frame after %.0f ms\n", i, took[i] / 1e6);
    }
    printf("    %d of %d honest subscribers admitted (%d within 3 s, the slowest after %.0f ms); "
           "%d logged why they waited\n",
           admitted, FLOOD_HONEST, in_3s, worst / 1e6, told);
    tu_send(&bad.down, MSG_QUIT);
    uint64_t made = tu_recv(&bad.up, TU_WAIT_MS);
    TU_CHILD_OK(bad_pid);
    tu_send(&cam.down, MSG_QUIT);
    uint64_t dropped = tu_recv(&cam.up, TU_WAIT_MS);
    TU_CHILD_OK(cam_pid);
    for (int i = 0; i < FLOOD_HONEST; i++) {
        tu_send(&h[i].down, MSG_QUIT);
        TU_CHILD_OK(hpid[i]);
        peer_close(&h[i]);
    }
    peer_close(&bad);
    peer_close(&cam);
    TU_CMP_U64(made, >, FLOOD_HONEST);
    TU_CMP_U64(dropped, >, 0);
    TU_CMP_I64(admitted, ==, FLOOD_HONEST);
    /* One that waited long said why. */
    TU_CMP_I64(quiet, ==, 0);
}

/* A listener that never accepts, its backlog full, then with room for one more connection: the
 * subscriber says why it waits (its connect refused, then its hello unread) and
 * ferry_subscriber_wait_publishers times out, and not for ever. */
static void test_stuck_handshake(void)
{
    ferry_node *node = hostile_node("victim");
    fake_listener l = fake_listen(TOPIC, FAKE_ID);
    char path[PATH_MAX];
    sock_path(TOPIC, l.name, path, sizeof path);
    int fill[64], nfill = 0;
    while (nfill < 64 && (fill[nfill] = flood_connect(path)) >= 0)
        nfill++;
    TU_CMP_I64(nfill, <, 64);
    ferry_subscriber *sub = NULL;
    TU_OK(ferry_subscriber_create(&sub, node, TOPIC, TYPE, ferry_hash(TYPE), NULL));
    ferry_time t0 = ferry_now();
    TU_ERR(ferry_subscriber_wait_publishers(sub, 1, TU_SEC), FERRY_ETIMEDOUT);
    printf("    its backlog full: wait_publishers timed out after %.0f ms\n", tu_since(t0) / 1e6);
    TU_CHECK_MSG(log_has("its listen backlog has been full for"), "nothing said:\n%s", log_text);
    /* Room for one: the subscriber's connection gets in, and waits there unread. */
    int one = accept4(l.fd, NULL, NULL, SOCK_CLOEXEC);
    TU_CHECK_MSG(one >= 0, "accept: %s", strerror(errno));
    close(one);
    TU_ERR(ferry_subscriber_wait_publishers(sub, 1, TU_SEC), FERRY_ETIMEDOUT);
    TU_CHECK_MSG(log_has("has not read our hello in"), "nothing said:\n%s", log_text);
    printf("    %s", log_text);
    TU_OK(ferry_subscriber_destroy(sub));
    close_all(fill, nfill);
    fake_unlisten(TOPIC, &l);
    TU_OK(ferry_node_destroy(node));
}

static const struct {
    const char *name;
    void (*fn)(void);
} scenarios[] = {
    {"empty_datagram_fds", test_empty_datagram_fds},
    {"linger_fds", test_linger_fds},
    {"sparse_frame", test_sparse_frame},
    {"sub_scribbles", test_sub_scribbles},
    {"pub_scribbles", test_pub_scribbles},
    {"socket_garbage", test_socket_garbage},
    {"fake_publisher", test_fake_publisher},
    {"fake_segment_shrink", test_fake_segment_shrink},
    {"fake_offset_race", test_fake_offset_race},
    {"stall_wakeups", test_stall_wakeups},
    {"blocking_refused", test_blocking_refused},
    {"silent_lockout", test_silent_lockout},
    {"hoarder", test_hoarder},
    {"hoarder_two_connections", test_hoarder_two_connections},
    {"silent_publisher", test_silent_publisher},
    {"backlog_flood", test_backlog_flood},
    {"stuck_handshake", test_stuck_handshake},
};

int main(int argc, char **argv)
{
    size_t n = sizeof scenarios / sizeof scenarios[0];
    if (argc == 1) {
        for (size_t i = 0; i < n; i++)
            tu_run(scenarios[i].name, scenarios[i].fn);
        return 0;
    }
    for (int a = 1; a < argc; a++) {
        size_t i = 0;
        while (i < n && strcmp(argv[a], scenarios[i].name) != 0)
            i++;
        if (i == n) {
            fprintf(stderr, "unknown scenario %s\n", argv[a]);
            return 2;
        }
        tu_run(scenarios[i].name, scenarios[i].fn);
    }
    return 0;
}
