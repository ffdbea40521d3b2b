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
 * Even with bit 1 set: a program run by a forged publisher (a socket it listens on in the topic
 * directory) against a real subscriber of this process: its hello must carry no descriptor; then
 * welcomes (maybe bent) with the two segments, none, one, swapped, with extra or wrong
 * descriptors, sealed or not; raw datagrams and attachments with descriptors; wake-ups up to a
 * flood; writes into the forged segments; shrinking them; hang-ups; and the subscriber waiting,
 * taking and releasing between them. Every sample it takes must lie inside the forged read-only
 * mapping, and once it is destroyed no descriptor or mapping may be left.
 */
#include "core/core.h"
#include "fuzz_util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
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
    fp.node = fz_node(fp.root, 7, "fuzzproto");
    ferry_publisher_options po;
    ferry_publisher_options_init(&po);
    po.max_sample_size = 1024;
    po.pool_bytes = 64 * 1024;
    po.max_chunks = 8;
    po.max_subscribers = FP_SLOTS - 1; /* one connection more than the publisher takes */
    po.history = FP_HISTORY;
    po.block_timeout_ns = 1000;
    ferry_err err =
        ferry_publisher_create(&fp.pub, fp.node, FP_TOPIC, FP_TYPE, ferry_hash(FP_TYPE), &po);
    FZ_ASSERT(err == FERRY_OK);
    ferry_publisher_stats st;
    FZ_ASSERT(ferry_publisher_stats_get(fp.pub, &st) == FERRY_OK);
    int len = snprintf(fp.sock, sizeof fp.sock, "%s/fuzz.proto/pub.%016llx.sock",
                       ferry_node_dir(fp.node), (unsigned long long)st.id);
    FZ_ASSERT(len > 0 && (size_t)len < sizeof fp.sock);
    for (int i = 0; i < FP_SLOTS; i++)
        fp.slot[i] = -1;
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
    /* Counted per input: the other modes keep descriptors of their own (a node's directory). */
    int fd_base = fz_fd_count();
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
        case 5: {  /* publish: subscribers that connected get deliveries, history fills */
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
        if (st.subscribers == 0 && fz_fd_count() == fd_base)
            break;
    }
    FZ_ASSERT(st.subscribers == 0);
    if (fz_fd_count() != fd_base) {
        fprintf(stderr, "descriptors: %d, %d at the start\n", fz_fd_count(), fd_base);
        fz_fd_dump();
    }
    FZ_ASSERT(fz_fd_count() == fd_base);
    FZ_ASSERT(st.chunks_loaned == 0);
    FZ_ASSERT(st.chunks_in_use <= FP_HISTORY);
    FZ_ASSERT(st.chunks_free + st.chunks_in_use == st.chunks_total);
    FZ_ASSERT(fz_find_maps("memfd:ferry-conn", "rw-s", NULL, 0) == 0);
}

/* ---- a live subscriber and a forged publisher -------------------------------------------------
 */

#define FS_TOPIC "/fuzz/sub"
#define FS_CHUNKS 4
#define FS_MAX_OPS 32

static struct {
    bool ready;
    char root[64];
    char listen_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    char tmp_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    ferry_node *node;
} fs;

static void fs_teardown(void)
{
    if (fs.node)
        ferry_node_destroy(fs.node);
    fz_rmrf(fs.root);
}

static void fs_setup(void)
{
    if (fs.ready)
        return;
    fs.node = fz_node(fs.root, 8, "fuzzsub");
    int n = snprintf(fs.listen_path, sizeof fs.listen_path, "%s/fuzz.sub/pub.fa4e000000000001.sock",
                     ferry_node_dir(fs.node));
    FZ_ASSERT(n > 0 && (size_t)n < sizeof fs.listen_path);
    n = snprintf(fs.tmp_path, sizeof fs.tmp_path, "%s/fuzz.sub/.fake.tmp", ferry_node_dir(fs.node));
    FZ_ASSERT(n > 0 && (size_t)n < sizeof fs.tmp_path);
    atexit(fs_teardown);
    fs.ready = true;
}

/* A publisher's segments made by hand: a data segment of FS_CHUNKS one-page chunks, each with a
 * valid header, and a connection segment whose ring names the first queued chunks. */
typedef struct fs_segs {
    int data_fd, conn_fd;
    uint8_t *data;
    ferry__conn_header *conn;
    uint64_t data_size, conn_size;
    ferry__welcome w;
} fs_segs;

static int fs_memfd(const char *name, uint64_t size, bool seal)
{
    int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    FZ_ASSERT(fd >= 0);
    FZ_ASSERT(ftruncate(fd, (off_t)size) == 0);
    if (seal)
        FZ_ASSERT(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0);
    return fd;
}

static void fs_build(fs_segs *s, uint32_t depth, uint32_t queued, bool seal)
{
    memset(s, 0, sizeof *s);
    s->data_size = FERRY__PAGE * (1 + FS_CHUNKS);
    s->data_fd = fs_memfd("fuzz-data", s->data_size, seal);
    s->data = mmap(NULL, s->data_size, PROT_READ | PROT_WRITE, MAP_SHARED, s->data_fd, 0);
    FZ_ASSERT(s->data != MAP_FAILED);
    ferry__data_header *dh = (ferry__data_header *)s->data;
    dh->magic = FERRY__DATA_MAGIC;
    dh->version = FERRY_PROTOCOL_VERSION;
    dh->header_size = sizeof *dh;
    dh->segment_size = s->data_size;
    dh->table_offset = 128;
    dh->arena_offset = FERRY__PAGE;
    dh->payload_offset = 64;
    dh->publisher_id = 0xfa4e000000000001ull;
    dh->max_chunks = FS_CHUNKS;
    ferry__chunk_entry *table = (ferry__chunk_entry *)(s->data + 128);
    for (uint32_t i = 0; i < FS_CHUNKS; i++) {
        table[i].offset = FERRY__PAGE * (1 + i);
        table[i].capacity = FERRY__PAGE - 64;
        ferry__chunk_header *h = (ferry__chunk_header *)(s->data + table[i].offset);
        h->size = 100 + i;
        h->sequence = i + 1;
        h->publisher_id = dh->publisher_id;
        h->index = i;
        h->generation = 1;
    }
    uint32_t dcap = ferry__pow2_at_least(depth), rcap = ferry__pow2_at_least(FS_CHUNKS);
    uint64_t doff, roff;
    s->conn_size = ferry__conn_layout(dcap, rcap, &doff, &roff);
    s->conn_fd = fs_memfd("fuzz-conn", s->conn_size, seal);
    s->conn = mmap(NULL, s->conn_size, PROT_READ | PROT_WRITE, MAP_SHARED, s->conn_fd, 0);
    FZ_ASSERT(s->conn != MAP_FAILED);
    s->conn->magic = FERRY__CONN_MAGIC;
    s->conn->version = FERRY_PROTOCOL_VERSION;
    s->conn->header_size = sizeof *s->conn;
    s->conn->size = s->conn_size;
    s->conn->deliver_offset = doff;
    s->conn->return_offset = roff;
    s->conn->deliver_capacity = dcap;
    s->conn->depth = depth;
    s->conn->return_capacity = rcap;
    uint64_t *slots = (uint64_t *)((uint8_t *)s->conn + doff);
    if (queued > depth)
        queued = depth;
    if (queued > FS_CHUNKS)
        queued = FS_CHUNKS;
    for (uint32_t i = 0; i < queued; i++)
        slots[i] = ferry__desc(i, 1);
    atomic_store(&s->conn->deliver_head, queued);
    ferry__welcome *w = &s->w;
    memset(w, 0, sizeof *w);
    w->magic = FERRY__MSG_MAGIC;
    w->version = FERRY_PROTOCOL_VERSION;
    w->kind = FERRY__MSG_WELCOME;
    w->status = FERRY_OK;
    w->pid = (int32_t)getpid();
    w->publisher_id = dh->publisher_id;
    w->type_hash = ferry_hash(FP_TYPE);
    w->data_size = s->data_size;
    w->table_offset = 128;
    w->arena_offset = FERRY__PAGE;
    w->payload_offset = 64;
    w->conn_size = s->conn_size;
    w->max_chunks = FS_CHUNKS;
    w->depth = depth;
    w->deliver_capacity = dcap;
    w->return_capacity = rcap;
    snprintf(w->type_name, sizeof w->type_name, "%s", FP_TYPE);
}

static void fs_free(fs_segs *s)
{
    if (s->data)
        munmap(s->data, s->data_size);
    if (s->conn)
        munmap(s->conn, s->conn_size);
    close(s->data_fd);
    close(s->conn_fd);
    s->data = NULL;
    s->conn = NULL;
}

static int fs_listen(void)
{
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    FZ_ASSERT(fd >= 0);
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    memcpy(a.sun_path, fs.tmp_path, strlen(fs.tmp_path) + 1);
    unlink(fs.tmp_path);
    FZ_ASSERT(bind(fd, (struct sockaddr *)&a, sizeof a) == 0);
    FZ_ASSERT(listen(fd, 4) == 0);
    FZ_ASSERT(rename(fs.tmp_path, fs.listen_path) == 0);
    return fd;
}

/* The samples taken lie inside a read-only mapping of the forged data segment; every one of
 * their pages is read. */
static void fs_take(ferry_subscriber *sub, ferry_sample *held, int *nheld, unsigned release)
{
    while (*nheld < 4) {
        ferry_sample *s = &held[*nheld];
        if (ferry_take(sub, s) != FERRY_OK)
            break;
        fz_map m[4];
        int n = fz_find_maps("memfd:fuzz-data", "r--s", m, 4);
        bool inside = false;
        const uint8_t *d = s->data;
        for (int i = 0; i < n && i < 4; i++)
            inside |=
                d >= m[i].start && s->size <= m[i].len && d <= m[i].start + m[i].len - s->size;
        FZ_ASSERT(inside);
        volatile uint8_t x = 0;
        for (size_t i = 0; i < s->size; i += 256)
            x ^= d[i];
        (void)x;
        (*nheld)++;
    }
    while (*nheld > 0 && release-- > 0)
        FZ_ASSERT(ferry_release(sub, &held[--*nheld]) == FERRY_OK);
}

/* Descriptors for a welcome, by kind: the two segments as they are, none, one, swapped, with a
 * third (a pipe), an eventfd and a pipe, two of /dev/null, or unsealed segments (made by the
 * caller). Returns the count; *extra gets descriptors to close afterwards. */
static int fs_welcome_fds(unsigned kind, const fs_segs *s, int *fds, int *extra, int *nextra)
{
    int p[2];
    *nextra = 0;
    switch (kind % 7) {
    case 0:
        fds[0] = s->data_fd;
        fds[1] = s->conn_fd;
        return 2;
    case 1:
        return 0;
    case 2:
        fds[0] = s->data_fd;
        return 1;
    case 3:
        fds[0] = s->conn_fd;
        fds[1] = s->data_fd;
        return 2;
    case 4:
        FZ_ASSERT(pipe2(p, O_CLOEXEC) == 0);
        close(p[1]);
        fds[0] = s->data_fd;
        fds[1] = s->conn_fd;
        fds[2] = extra[(*nextra)++] = p[0];
        return 3;
    case 5:
        FZ_ASSERT(pipe2(p, O_CLOEXEC) == 0);
        close(p[1]);
        fds[0] = extra[(*nextra)++] = eventfd(0, EFD_CLOEXEC);
        fds[1] = extra[(*nextra)++] = p[0];
        return 2;
    default:
        fds[0] = extra[(*nextra)++] = open("/dev/null", O_RDONLY | O_CLOEXEC);
        fds[1] = extra[(*nextra)++] = open("/dev/null", O_RDONLY | O_CLOEXEC);
        return 2;
    }
}

static void fuzz_subscriber(const uint8_t *d, size_t n)
{
    fs_setup();
    fz_reader r = {d, n};
    uint8_t opts = fz_u8(&r);
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = 1 + (opts & 3);
    so.max_held = 4;
    int base = fz_fd_count();
    ferry_subscriber *sub = NULL;
    FZ_ASSERT(ferry_subscriber_create(&sub, fs.node, FS_TOPIC, FP_TYPE, ferry_hash(FP_TYPE), &so) ==
              FERRY_OK);
    int lfd = fs_listen();
    int sock = -1;
    for (int k = 0; k < 200 && sock < 0; k++) {
        (void)ferry_subscriber_wait_publishers(sub, 1, 0);
        sock = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (sock < 0)
            usleep(200);
    }
    FZ_ASSERT(sock >= 0);
    /* The hello comes at once and carries no descriptor. */
    ferry__hello h;
    int hfds[4];
    int hn = 4;
    ssize_t got = -1;
    for (int k = 0; k < 200 && got < 0; k++) {
        got = ferry__recv_msg(sock, &h, sizeof h, hfds, &hn);
        if (got < 0)
            usleep(200);
    }
    FZ_ASSERT(got == (ssize_t)sizeof h && hn == 0);
    FZ_ASSERT(ferry__hello_decode(&h, sizeof h, &h) == FERRY_OK);

    fs_segs segs;
    bool built = false;
    bool shrunk[2] = {false, false}; /* data, conn: this side may not touch them then */
    ferry_sample held[4];
    int nheld = 0;
    static uint8_t dgram[FP_MAX_DATAGRAM];
    for (int ops = 0; ops < FS_MAX_OPS && fz_more(&r); ops++) {
        uint8_t op = fz_u8(&r);
        switch (op % 8) {
        case 0: { /* a welcome, maybe bent, with descriptors of some kind */
            if (built || sock < 0)
                break;
            uint8_t how = fz_u8(&r);
            fs_build(&segs, h.depth, fz_u8(&r) % 5, (how & 0x80) == 0);
            built = true;
            ferry__welcome w = segs.w;
            unsigned patches = (how >> 3) & 7;
            for (unsigned i = 0; i < patches; i++)
                ((uint8_t *)&w)[fz_u16(&r) % sizeof w] = fz_u8(&r);
            int fds[4], extra[4], nextra;
            int nfds = fs_welcome_fds(how & 7, &segs, fds, extra, &nextra);
            (void)ferry__send_msg(sock, &w, sizeof w, fds, nfds);
            for (int i = 0; i < nextra; i++)
                close(extra[i]);
            break;
        }
        case 1: { /* raw bytes */
            size_t len = fz_u16(&r) % FP_MAX_DATAGRAM;
            unsigned fdkind = fz_u8(&r);
            memset(dgram, 0, len);
            fz_bytes(&r, dgram, len);
            if (sock >= 0)
                send_with_fds(sock, dgram, len, fdkind);
            break;
        }
        case 2: { /* an attachment: a key and up to four descriptors, maybe bent */
            ferry__attach_msg m;
            memset(&m, 0, sizeof m);
            m.magic = FERRY__MSG_MAGIC;
            m.version = FERRY_PROTOCOL_VERSION;
            m.kind = FERRY__MSG_ATTACH;
            m.key = fz_u8(&r) % 3;
            unsigned fdkind = fz_u8(&r);
            int fds[4] = {-1, -1, -1, -1};
            int nfds = make_fds(fdkind, fds);
            m.nfds = (fdkind & 0x80) ? fz_u8(&r) % 6 : (uint32_t)nfds;
            if (sock >= 0)
                (void)ferry__send_msg(sock, &m, sizeof m, fds, nfds);
            for (int i = 0; i < nfds; i++)
                close(fds[i]);
            break;
        }
        case 3: { /* wake-ups, up to a flood */
            ferry__bye b;
            ferry__wake_init(&b);
            unsigned times = 1 + fz_u8(&r) % (3 * FERRY__WAKE_FLOOD);
            for (unsigned k = 0; k < times && sock >= 0; k++)
                (void)ferry__send_msg(sock, &b, sizeof b, NULL, 0);
            break;
        }
        case 4: /* the forged publisher writes its connection segment and chunk headers */
            if (built) {
                size_t at = fz_u16(&r) % segs.conn_size;
                uint8_t v = fz_u8(&r);
                if ((op & 0x80) && !shrunk[0])
                    segs.data[FERRY__PAGE + fz_u16(&r) % (segs.data_size - FERRY__PAGE)] = v;
                else if (!(op & 0x80) && !shrunk[1])
                    ((uint8_t *)segs.conn)[at] = v;
            }
            break;
        case 5: /* the subscriber works */
            (void)ferry_subscriber_wait_publishers(sub, 1, 0);
            (void)ferry_wait(sub, 0);
            fs_take(sub, held, &nheld, fz_u8(&r) % 5);
            break;
        case 6: /* an unsealed segment shrinks under the subscriber */
            if (built && (op & 0x80)) {
                int which = fz_u8(&r) & 1;
                if (ftruncate(which ? segs.conn_fd : segs.data_fd, 0) == 0)
                    shrunk[which] = true;
            }
            break;
        default: /* hang up */
            if (sock >= 0)
                close(sock);
            sock = -1;
            break;
        }
    }
    if (sock >= 0)
        close(sock);
    close(lfd);
    unlink(fs.listen_path);
    for (int k = 0; k < 20; k++) {
        (void)ferry_subscriber_wait_publishers(sub, 1, 0);
        fs_take(sub, held, &nheld, 4);
    }
    while (nheld > 0)
        FZ_ASSERT(ferry_release(sub, &held[--nheld]) == FERRY_OK);
    FZ_ASSERT(ferry_subscriber_destroy(sub) == FERRY_OK);
    if (built)
        fs_free(&segs);
    /* Nothing the forged publisher sent stays: no descriptor, no mapping. */
    if (fz_fd_count() != base) {
        fprintf(stderr, "descriptors: %d, %d before the subscriber\n", fz_fd_count(), base);
        fz_fd_dump();
    }
    FZ_ASSERT(fz_fd_count() == base);
    FZ_ASSERT(fz_find_maps("memfd:fuzz-", "r--s", NULL, 0) == 0);
    FZ_ASSERT(fz_find_maps("memfd:fuzz-", "rw-s", NULL, 0) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if (data[0] & 1)
        fuzz_publisher(data + 1, size - 1);
    else if (data[0] & 2)
        fuzz_subscriber(data + 1, size - 1);
    else
        fuzz_decoders(data + 1, size - 1);
    return 0;
}
