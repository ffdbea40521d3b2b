/*
 * Fuzz target: arbitrary bytes as control messages.
 *
 * The first byte chooses what the rest is. Even: one message for the decoders (hello, welcome,
 * bye), then the sizes and connection-segment header that ferry__welcome_check and
 * ferry__conn_check judge; whatever they accept must describe a geometry that fits its segments.
 * Odd: a little program run against a real publisher of this process, through raw seqpacket
 * sockets connected to its listening socket: connect, send datagrams (raw bytes, or a valid hello
 * with patched bytes, or a goodbye) with or without descriptors, read what it answers, hang up,
 * publish. Every welcome the publisher sends must pass the subscriber's own checks, and once every
 * socket is closed the publisher must be back where it started: no subscriber, no descriptor
 * more, no chunk on loan or referenced beyond its history.
 */
#include "core/core.h"
#include "fuzz_util.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FP_TOPIC "/fuzz/proto"
#define FP_TYPE "fuzz/proto"
#define FP_SLOTS 4
#define FP_MAX_OPS 48
#define FP_MAX_DATAGRAM 1100
#define FP_HISTORY 2

/* ---- decoders ------------------------------------------------------------------------------ */

static void check_geometry(const ferry__welcome *w, uint64_t data_fd_size, uint64_t conn_fd_size)
{
    FZ_ASSERT(w->max_chunks >= 1 && w->max_chunks <= 65536);
    FZ_ASSERT(w->depth >= 1 && w->depth <= w->deliver_capacity);
    FZ_ASSERT((w->deliver_capacity & (w->deliver_capacity - 1)) == 0);
    FZ_ASSERT((w->return_capacity & (w->return_capacity - 1)) == 0);
    FZ_ASSERT(w->return_capacity >= w->max_chunks);
    FZ_ASSERT(w->data_size == data_fd_size && data_fd_size >= FERRY__PAGE);
    FZ_ASSERT(w->table_offset >= sizeof(ferry__data_header) && w->table_offset <= w->data_size);
    uint64_t table_bytes = (uint64_t)w->max_chunks * sizeof(ferry__chunk_entry);
    FZ_ASSERT(table_bytes <= w->data_size - w->table_offset);
    FZ_ASSERT(w->arena_offset >= w->table_offset + table_bytes && w->arena_offset <= w->data_size);
    FZ_ASSERT(w->payload_offset >= sizeof(ferry__chunk_header) && w->payload_offset <= FERRY__PAGE);
    uint64_t d, r;
    uint64_t need = ferry__conn_layout(w->deliver_capacity, w->return_capacity, &d, &r);
    FZ_ASSERT(need == conn_fd_size && w->conn_size == conn_fd_size);
    FZ_ASSERT(d >= sizeof(ferry__conn_header));
    FZ_ASSERT(d + (uint64_t)w->deliver_capacity * 8 <= r);
    FZ_ASSERT(r + (uint64_t)w->return_capacity * 8 <= conn_fd_size);
}

static void fuzz_decoders(const uint8_t *d, size_t n)
{
    ferry__hello h;
    if (ferry__hello_decode(d, n, &h) == FERRY_OK) {
        FZ_ASSERT(n == sizeof h);
        FZ_ASSERT(memchr(h.topic, 0, sizeof h.topic) != NULL);
        FZ_ASSERT(memchr(h.type_name, 0, sizeof h.type_name) != NULL);
        FZ_ASSERT(memchr(h.node_name, 0, sizeof h.node_name) != NULL);
        FZ_ASSERT(h.depth >= 1 && h.depth <= 4096 && h.history <= 4096);
        FZ_ASSERT(h.overflow <= FERRY_OVERFLOW_BLOCK);
    }
    if (ferry__bye_decode(d, n) == FERRY_OK)
        FZ_ASSERT(n == sizeof(ferry__bye));
    ferry__welcome w;
    if (ferry__welcome_decode(d, n, &w) == FERRY_OK)
        FZ_ASSERT(n == sizeof w && memchr(w.type_name, 0, sizeof w.type_name) != NULL);
    if (n < sizeof w || ferry__welcome_decode(d, sizeof w, &w) != FERRY_OK)
        return;
    FZ_ASSERT(w.status >= 0 && w.status < FERRY_ERR_COUNT_);

    /* After the welcome: how to pick the descriptor sizes, the sizes, the connection header. */
    fz_reader r = {d + sizeof w, n - sizeof w};
    uint8_t how = fz_u8(&r);
    uint64_t data_fd_size = (how & 1) ? fz_u64(&r) : w.data_size;
    uint64_t conn_fd_size = (how & 2) ? fz_u64(&r) : w.conn_size;
    if (ferry__welcome_check(&w, data_fd_size, conn_fd_size) != FERRY_OK)
        return;
    check_geometry(&w, data_fd_size, conn_fd_size);

    union {
        ferry__conn_header h;
        uint8_t raw[sizeof(ferry__conn_header)];
    } conn;
    memset(&conn, 0, sizeof conn);
    if (how & 4) {
        /* A header that matches, then bytes of the input laid over it at an offset. */
        uint64_t doff, roff;
        conn.h.magic = FERRY__CONN_MAGIC;
        conn.h.version = FERRY_PROTOCOL_VERSION;
        conn.h.header_size = sizeof conn.h;
        conn.h.size = ferry__conn_layout(w.deliver_capacity, w.return_capacity, &doff, &roff);
        conn.h.deliver_offset = doff;
        conn.h.return_offset = roff;
        conn.h.deliver_capacity = w.deliver_capacity;
        conn.h.depth = w.depth;
        conn.h.return_capacity = w.return_capacity;
        size_t at = fz_u8(&r) % sizeof conn.raw;
        fz_bytes(&r, conn.raw + at, sizeof conn.raw - at);
    } else {
        fz_bytes(&r, conn.raw, sizeof conn.raw);
    }
    if (ferry__conn_check(&conn.h, &w) == FERRY_OK) {
        uint64_t doff, roff;
        uint64_t sz = ferry__conn_layout(w.deliver_capacity, w.return_capacity, &doff, &roff);
        FZ_ASSERT(conn.h.size == sz && conn.h.deliver_offset == doff &&
                  conn.h.return_offset == roff && conn.h.depth == w.depth);
    }
}

/* ---- a live publisher ------------------------------------------------------------------------ */

static struct {
    bool ready;
    char root[64];
    char sock[sizeof(((struct sockaddr_un *)0)->sun_path)];
    ferry_node *node;
    ferry_publisher *pub;
    int fd_base;
    int slot[FP_SLOTS];
} fp;

static void fp_teardown(void)
{
    if (fp.pub)
        ferry_publisher_destroy(fp.pub);
    if (fp.node)
        ferry_node_destroy(fp.node);
    fz_rmrf(fp.root);
}

static void fp_setup(void)
{
    if (fp.ready)
        return;
    snprintf(fp.root, sizeof fp.root, "/tmp/ferry-fuzz-XXXXXX");
    FZ_ASSERT(mkdtemp(fp.root) != NULL);
    ferry_node_options no;
    ferry_node_options_init(&no);
    no.dir = fp.root;
    no.domain = 7;
    no.name = "fuzzproto";
    no.log = fz_log_quiet;
    ferry_err err = ferry_node_create(&fp.node, &no);
    FZ_ASSERT(err == FERRY_OK);
    ferry_publisher_options po;
    ferry_publisher_options_init(&po);
    po.max_sample_size = 1024;
    po.pool_bytes = 64 * 1024;
    po.max_chunks = 8;
    po.max_subscribers = FP_SLOTS - 1; /* one connection more than the publisher takes */
    po.history = FP_HISTORY;
    po.block_timeout_ns = 1000;
    err = ferry_publisher_create(&fp.pub, fp.node, FP_TOPIC, FP_TYPE, ferry_hash(FP_TYPE), &po);
    FZ_ASSERT(err == FERRY_OK);
    ferry_publisher_stats st;
    FZ_ASSERT(ferry_publisher_stats_get(fp.pub, &st) == FERRY_OK);
    int len = snprintf(fp.sock, sizeof fp.sock, "%s/fuzz.proto/pub.%016llx.sock",
                       ferry_node_dir(fp.node), (unsigned long long)st.id);
    FZ_ASSERT(len > 0 && (size_t)len < sizeof fp.sock);
    for (int i = 0; i < FP_SLOTS; i++)
        fp.slot[i] = -1;
    fp.fd_base = fz_fd_count();
    atexit(fp_teardown);
    fp.ready = true;
}

static void slot_close(int i)
{
    if (fp.slot[i] >= 0)
        close(fp.slot[i]);
    fp.slot[i] = -1;
}

static void slot_connect(int i)
{
    slot_close(i);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    FZ_ASSERT(fd >= 0);
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    memcpy(a.sun_path, fp.sock, strlen(fp.sock) + 1);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd); /* backlog full: like a peer that never got through */
        return;
    }
    fp.slot[i] = fd;
}

/* Descriptors to attach: 0 none, 1 an eventfd, 2 a pipe, 3 four of mixed kinds. */
static int make_fds(unsigned kind, int *fds)
{
    int p[2];
    switch (kind & 3) {
    case 1:
        fds[0] = eventfd(0, EFD_CLOEXEC);
        return fds[0] >= 0;
    case 2:
        if (pipe2(p, O_CLOEXEC) != 0)
            return 0;
        close(p[1]);
        fds[0] = p[0];
        return 1;
    case 3:
        fds[0] = eventfd(0, EFD_CLOEXEC);
        fds[1] = eventfd(0, EFD_CLOEXEC);
        fds[2] = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (pipe2(p, O_CLOEXEC) != 0)
            p[0] = p[1] = -1;
        if (p[1] >= 0)
            close(p[1]);
        fds[3] = p[0];
        if (fds[0] < 0 || fds[1] < 0 || fds[2] < 0 || fds[3] < 0) {
            for (int i = 0; i < 4; i++)
                if (fds[i] >= 0)
                    close(fds[i]);
            return 0;
        }
        return 4;
    default:
        return 0;
    }
}

static void send_with_fds(int sock, const void *buf, size_t len, unsigned fdkind)
{
    int fds[4] = {-1, -1, -1, -1};
    int nfds = make_fds(fdkind, fds);
    (void)ferry__send_msg(sock, buf, len, fds, nfds);
    for (int i = 0; i < nfds; i++)
        close(fds[i]);
}

static void hello_template(ferry__hello *h)
{
    memset(h, 0, sizeof *h);
    h->magic = FERRY__MSG_MAGIC;
    h->version = FERRY_PROTOCOL_VERSION;
    h->kind = FERRY__MSG_HELLO;
    h->subscriber_id = 0x1234;
    h->type_hash = ferry_hash(FP_TYPE);
    h->pid = (int32_t)getpid();
    h->depth = 2;
    snprintf(h->topic, sizeof h->topic, "%s", FP_TOPIC);
    snprintf(h->type_name, sizeof h->type_name, "%s", FP_TYPE);
    snprintf(h->node_name, sizeof h->node_name, "raw");
}

/* Whatever the publisher sends is a welcome, and an accepting one passes the subscriber's
 * checks against the segments that came with it. */
static void read_answers(int sock)
{
    for (int k = 0; k < 4; k++) {
        union {
            ferry__welcome w;
            char raw[sizeof(ferry__welcome) + 64];
        } buf;
        union {
            struct cmsghdr align;
            char buf[CMSG_SPACE(8 * sizeof(int))];
        } control;
        struct iovec iov = {.iov_base = buf.raw, .iov_len = sizeof buf.raw};
        struct msghdr msg;
        memset(&msg, 0, sizeof msg);
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.buf;
        msg.msg_controllen = sizeof control.buf;
        ssize_t n = recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n <= 0)
            return;
        int fds[8];
        int nfds = 0;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
            if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                continue;
            size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < count && nfds < 8; i++)
                memcpy(&fds[nfds++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        }
        ferry__welcome w;
        FZ_ASSERT(ferry__welcome_decode(buf.raw, (size_t)n, &w) == FERRY_OK);
        if (w.status == FERRY_OK) {
            FZ_ASSERT(nfds == 2);
            struct stat sd, sc;
            FZ_ASSERT(fstat(fds[0], &sd) == 0 && fstat(fds[1], &sc) == 0);
            FZ_ASSERT(ferry__welcome_check(&w, (uint64_t)sd.st_size, (uint64_t)sc.st_size) ==
                      FERRY_OK);
            void *m = mmap(NULL, (size_t)sc.st_size, PROT_READ, MAP_SHARED, fds[1], 0);
            FZ_ASSERT(m != MAP_FAILED);
            FZ_ASSERT(ferry__conn_check(m, &w) == FERRY_OK);
            munmap(m, (size_t)sc.st_size);
        } else {
            FZ_ASSERT(nfds == 0);
        }
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
    }
}

static void fuzz_publisher(const uint8_t *d, size_t n)
{
    fp_setup();
    fz_reader r = {d, n};
    static uint8_t dgram[FP_MAX_DATAGRAM];
    for (int ops = 0; ops < FP_MAX_OPS && fz_more(&r); ops++) {
        uint8_t op = fz_u8(&r);
        int s = (op >> 4) & (FP_SLOTS - 1);
        switch ((op & 15) % 9) {
        case 0:
            slot_connect(s);
            break;
        case 1: { /* raw datagram */
            size_t len = fz_u16(&r) % FP_MAX_DATAGRAM;
            unsigned fdkind = fz_u8(&r);
            memset(dgram, 0, len);
            fz_bytes(&r, dgram, len);
            if (fp.slot[s] >= 0)
                send_with_fds(fp.slot[s], dgram, len, fdkind);
            break;
        }
        case 2: { /* a valid hello with some bytes changed */
            ferry__hello h;
            hello_template(&h);
            unsigned patches = fz_u8(&r) % 8;
            for (unsigned i = 0; i < patches; i++) {
                size_t at = fz_u16(&r) % sizeof h;
                ((uint8_t *)&h)[at] = fz_u8(&r);
            }
            unsigned fdkind = patches == 0 ? 0 : fz_u8(&r); /* a hello carries none */
            if (fp.slot[s] >= 0)
                send_with_fds(fp.slot[s], &h, sizeof h, fdkind);
            break;
        }
        case 3:
            slot_close(s);
            break;
        case 4:
            break; /* the poll below */
        case 5: { /* publish: subscribers that connected get deliveries, history fills */
            uint8_t sample[1024];
            size_t len = 1 + (size_t)fz_u8(&r) * 4;
            memset(sample, 0xa5, len);
            (void)ferry_publish_copy(fp.pub, sample, len);
            break;
        }
        case 6:
            if (fp.slot[s] >= 0)
                read_answers(fp.slot[s]);
            break;
        case 7: { /* goodbye or wake-ups (a burst, maybe a flood), maybe bent, maybe with
                   * descriptors */
            ferry__bye b;
            uint8_t patch = fz_u8(&r);
            if (patch & 0x40)
                ferry__wake_init(&b);
            else
                ferry__bye_init(&b);
            if (patch & 0x80)
                ((uint8_t *)&b)[patch % sizeof b] ^= fz_u8(&r);
            unsigned times = patch & 0x40 ? 1u + (patch & 0x0f) * 6u : 1u;
            for (unsigned k = 0; k < times && fp.slot[s] >= 0; k++)
                send_with_fds(fp.slot[s], &b, sizeof b, k == 0 ? patch >> 4 : 0);
            break;
        }
        default: /* half-close: the publisher sees a hang-up with the socket still open here */
            if (fp.slot[s] >= 0)
                shutdown(fp.slot[s], SHUT_WR);
            break;
        }
        FZ_ASSERT(ferry_publisher_poll(fp.pub, 0) == FERRY_OK);
    }

    /* Everyone hangs up: the publisher must come back to where it started. */
    for (int i = 0; i < FP_SLOTS; i++)
        slot_close(i);
    ferry_publisher_stats st;
    for (int k = 0; k < 50; k++) {
        FZ_ASSERT(ferry_publisher_poll(fp.pub, 0) == FERRY_OK);
        FZ_ASSERT(ferry_publisher_stats_get(fp.pub, &st) == FERRY_OK);
        if (st.subscribers == 0 && fz_fd_count() == fp.fd_base)
            break;
    }
    FZ_ASSERT(st.subscribers == 0);
    if (fz_fd_count() != fp.fd_base) {
        fprintf(stderr, "descriptors: %d, %d at the start\n", fz_fd_count(), fp.fd_base);
        fz_fd_dump();
    }
    FZ_ASSERT(fz_fd_count() == fp.fd_base);
    FZ_ASSERT(st.chunks_loaned == 0);
    FZ_ASSERT(st.chunks_in_use <= FP_HISTORY);
    FZ_ASSERT(st.chunks_free + st.chunks_in_use == st.chunks_total);
    FZ_ASSERT(fz_find_maps("memfd:ferry-conn", "rw-s", NULL, 0) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if (data[0] & 1)
        fuzz_publisher(data + 1, size - 1);
    else
        fuzz_decoders(data + 1, size - 1);
    return 0;
}
