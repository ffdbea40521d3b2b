/*
 * The serialized baseline: the default path of a middleware without shared memory. The
 * publisher serializes each message (header fields and payload copied into a message buffer in a
 * CDR-like, length-prefixed encoding) and writes it to a Unix-domain stream socket; the
 * subscriber reads the whole message and deserializes it into its own buffer.
 */
#include "bench.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Encoding: u32 length of what follows; a CDR encapsulation header (little endian); u64 seq;
 * i64 send_ns; u32 flags; u32 payload length; payload bytes. */
#define UDS_ENCAP 0x00000100u /* bytes 00 01 00 00: CDR_LE, as in an RTPS serialized payload */
#define UDS_FIXED (4 + 8 + 8 + 4 + 4) /* after the length prefix */
#define UDS_READ_CHUNK ((size_t)256 * 1024)

typedef struct uds_state {
    bench_params p;
    int fd[2];
    char *own;       /* the application's message payload (publisher) or its copy (subscriber) */
    char *wire;      /* the serialized message (publisher) or the receive buffer (subscriber) */
    size_t cap;      /* bytes of wire */
    size_t pos, end; /* subscriber: unread bytes are wire[pos, end) */
} uds_state;

static int uds_prepare(void **state, const bench_params *p)
{
    uds_state *s = calloc(1, sizeof *s);
    if (!s)
        return -1;
    s->p = *p;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s->fd) != 0) {
        fprintf(stderr, "ferry bench: socketpair: %s\n", strerror(errno));
        free(s);
        return -1;
    }
    *state = s;
    return 0;
}

static int uds_buffers(uds_state *s, size_t wire_cap)
{
    s->own = malloc(s->p.payload);
    s->cap = wire_cap;
    s->wire = malloc(wire_cap);
    if (!s->own || !s->wire) {
        fprintf(stderr, "ferry bench: out of memory\n");
        return -1;
    }
    for (size_t i = 0; i < s->p.payload; i++)
        s->own[i] = (char)(i * 13u);
    cli_prefault(s->wire, wire_cap);
    return 0;
}

static int uds_pub_open(void *state)
{
    uds_state *s = state;
    close(s->fd[1]);
    s->fd[1] = -1;
    return uds_buffers(s, 4 + UDS_FIXED + s->p.payload);
}

static void put32(char *p, uint32_t v)
{
    memcpy(p, &v, 4);
}

static void put64(char *p, uint64_t v)
{
    memcpy(p, &v, 8);
}

static int uds_pub_loan(void *state, void **buf, size_t *size)
{
    uds_state *s = state;
    *buf = s->own;
    *size = s->p.payload;
    return 0;
}

static int uds_pub_send(void *state, void *buf)
{
    uds_state *s = state;
    bench_wire h;
    memcpy(&h, buf, sizeof h);
    char *w = s->wire;
    put32(w, (uint32_t)(UDS_FIXED + s->p.payload));
    put32(w + 4, UDS_ENCAP);
    put64(w + 8, h.seq);
    put64(w + 16, (uint64_t)h.send_ns);
    put32(w + 24, h.flags);
    put32(w + 28, (uint32_t)s->p.payload);
    memcpy(w + 4 + UDS_FIXED, buf, s->p.payload);
    if (cli_write_full(s->fd[0], w, 4 + UDS_FIXED + s->p.payload) != 0) {
        fprintf(stderr, "ferry bench: uds write: %s\n", strerror(errno));
        return -1;
    }
    return 0;
}

static void uds_close(void *state)
{
    uds_state *s = state;
    free(s->own);
    free(s->wire);
    s->own = s->wire = NULL;
}

static int uds_sub_open(void *state)
{
    uds_state *s = state;
    close(s->fd[0]);
    s->fd[0] = -1;
    size_t need = 4 + UDS_FIXED + s->p.payload;
    return uds_buffers(s, need > UDS_READ_CHUNK ? need : UDS_READ_CHUNK);
}

/* Makes at least n unread bytes available in wire[pos, end). 0, 1 on timeout, -1 on error. */
static int uds_fill(uds_state *s, size_t n, int64_t deadline)
{
    while (s->end - s->pos < n) {
        if (s->cap - s->pos < n) {
            memmove(s->wire, s->wire + s->pos, s->end - s->pos);
            s->end -= s->pos;
            s->pos = 0;
        }
        struct pollfd pfd = {.fd = s->fd[1], .events = POLLIN};
        int ms = -1;
        if (deadline >= 0) {
            int64_t left = deadline - cli_now_ns();
            if (left <= 0)
                return 1;
            ms = (int)(left / 1000000) + 1;
        }
        int r = poll(&pfd, 1, ms);
        if (r < 0 && errno != EINTR) {
            fprintf(stderr, "ferry bench: poll: %s\n", strerror(errno));
            return -1;
        }
        if (r <= 0)
            continue;
        ssize_t got = read(s->fd[1], s->wire + s->end, s->cap - s->end);
        if (got < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (got <= 0) {
            fprintf(stderr, "ferry bench: uds read: %s\n",
                    got == 0 ? "end of stream" : strerror(errno));
            return -1;
        }
        s->end += (size_t)got;
    }
    return 0;
}

static uint32_t get32(const char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static uint64_t get64(const char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static int uds_sub_recv(void *state, const void **data, size_t *size, int64_t *recv_ns,
                        int64_t timeout_ns)
{
    uds_state *s = state;
    int64_t deadline = timeout_ns >= 0 ? cli_now_ns() + timeout_ns : -1;
    int rc = uds_fill(s, 4, deadline);
    if (rc != 0)
        return rc;
    size_t len = get32(s->wire + s->pos);
    if (len < UDS_FIXED || 4 + len > s->cap) {
        fprintf(stderr, "ferry bench: uds: bad message length %zu\n", len);
        return -1;
    }
    /* Once a message started, wait for all of it. */
    rc = uds_fill(s, 4 + len, -1);
    if (rc != 0)
        return rc;
    const char *w = s->wire + s->pos + 4;
    size_t plen = get32(w + 24);
    if (get32(w) != UDS_ENCAP || plen != len - UDS_FIXED || plen > s->p.payload) {
        fprintf(stderr, "ferry bench: uds: malformed message\n");
        return -1;
    }
    /* Deserialized: the fields into their own header, the payload into the own buffer. */
    bench_wire h = {.seq = get64(w + 4), .send_ns = (int64_t)get64(w + 12), .flags = get32(w + 20)};
    memcpy(s->own, w + UDS_FIXED, plen);
    if (plen < sizeof h) {
        fprintf(stderr, "ferry bench: uds: message of %zu bytes\n", plen);
        return -1;
    }
    memcpy(s->own, &h, sizeof h);
    s->pos += 4 + len;
    *recv_ns = cli_now_ns();
    *data = s->own;
    *size = plen;
    return 0;
}

static void uds_release(void *state)
{
    uds_state *s = state;
    for (int i = 0; i < 2; i++)
        if (s->fd[i] >= 0)
            close(s->fd[i]);
    free(s->own);
    free(s->wire);
    free(s);
}

const bench_transport bench_transport_uds = {
    .name = "uds-serialized",
    .summary = "serialize, write to a Unix stream socket, read, deserialize (default path)",
    .caps = BENCH_CAP_LOSSLESS,
    .prepare = uds_prepare,
    .pub_open = uds_pub_open,
    .pub_idle = NULL,
    .pub_loan = uds_pub_loan,
    .pub_send = uds_pub_send,
    .pub_close = uds_close,
    .sub_open = uds_sub_open,
    .sub_recv = uds_sub_recv,
    .sub_close = uds_close,
    .release = uds_release,
};
