/*
 * Fuzz target: arbitrary bytes as the contents of shared memory.
 *
 * One publisher and one subscriber of this process are connected to each other; the input is a
 * little program of operations on them (publish, take, release, poll, wait, loan) mixed with
 * writes of input bytes into the connection segment (the rings, their counters, the doorbells),
 * into the data segment's chunk table and into chunk headers, through the publisher's writable
 * mapping. Both ends live in one process, so a crash or an out-of-bounds read on either side
 * ends the run. Invariants checked: a taken sample lies inside the subscriber's read-only mapping
 * of the data segment; a sample taken is released with FERRY_OK; once the subscriber is gone
 * every chunk is back with the publisher (history aside); no descriptor or mapping survives the
 * pair, which is made afresh for each input.
 *
 * The first three bytes choose the options (pool size, history, depth, overflow, held samples).
 */
#include "core/core.h"
#include "fuzz_util.h"

#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FC_TOPIC "/fuzz/conn"
#define FC_TYPE "fuzz/conn"
#define FC_MAX_OPS 64
#define FC_MAX_HELD 16
#define FC_MAX_SAMPLE 2048

static struct {
    bool ready;
    char root[64];
    ferry_node *node;
    int fd_base;
} fc;

typedef struct pair {
    ferry_publisher *pub;
    ferry_subscriber *sub;
    uint64_t pub_id;
    uint32_t max_chunks, history;
    fz_map data_rw; /* the publisher's view of its data segment; lives as long as it does */
    uint64_t table_offset, arena_offset;
    uint64_t doff, roff;
    uint32_t dcap, rcap;
    ferry_sample held[FC_MAX_HELD];
    uint32_t nheld;
    void *loan;
} pair;

static void fc_teardown(void)
{
    if (fc.node)
        ferry_node_destroy(fc.node);
    fz_rmrf(fc.root);
}

static void fc_setup(void)
{
    if (fc.ready)
        return;
    fc.node = fz_node(fc.root, 8, "fuzzconn");
    fc.fd_base = fz_fd_count();
    atexit(fc_teardown);
    fc.ready = true;
}

static void pair_open(pair *p, fz_reader *r)
{
    memset(p, 0, sizeof *p);
    uint8_t b0 = fz_u8(r), b1 = fz_u8(r), b2 = fz_u8(r);
    ferry_publisher_options po;
    ferry_publisher_options_init(&po);
    po.admit_blocking = true; /* its subscribers ask to block it */
    po.max_sample_size = FC_MAX_SAMPLE;
    po.pool_bytes = 128 * 1024;
    po.max_chunks = 4 + (b0 & 7);
    po.history = (b0 >> 3) & 3;
    po.max_subscribers = 2;
    po.block_timeout_ns = 1000;
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = 1 + (b1 & 7);
    so.overflow = (b1 >> 3) & 1 ? FERRY_OVERFLOW_BLOCK : FERRY_OVERFLOW_DROP_OLDEST;
    so.history = (b1 >> 4) & 3;
    so.max_held = 1 + (b2 & 15);
    p->max_chunks = po.max_chunks;
    p->history = po.history;
    FZ_ASSERT(ferry_publisher_create(&p->pub, fc.node, FC_TOPIC, FC_TYPE, ferry_hash(FC_TYPE),
                                     &po) == FERRY_OK);
    FZ_ASSERT(ferry_subscriber_create(&p->sub, fc.node, FC_TOPIC, FC_TYPE, ferry_hash(FC_TYPE),
                                      &so) == FERRY_OK);
    ferry_publisher_stats ps;
    ferry_subscriber_stats ss;
    for (int k = 0;; k++) {
        FZ_ASSERT(k < 2000);
        FZ_ASSERT(ferry_publisher_poll(p->pub, 0) == FERRY_OK);
        ferry_err e = ferry_subscriber_wait_publishers(p->sub, 1, k < 10 ? 0 : 1000000);
        FZ_ASSERT(e == FERRY_OK || e == FERRY_ETIMEDOUT);
        FZ_ASSERT(ferry_publisher_stats_get(p->pub, &ps) == FERRY_OK);
        FZ_ASSERT(ferry_subscriber_stats_get(p->sub, &ss) == FERRY_OK);
        if (ps.subscribers == 1 && ss.publishers == 1)
            break;
    }
    p->pub_id = ps.id;
    fz_map conn[2];
    FZ_ASSERT(fz_find_maps("memfd:ferry-conn", "rw-s", conn, 2) == 2);
    FZ_ASSERT(fz_find_maps("memfd:ferry-data", "rw-s", &p->data_rw, 1) == 1);
    FZ_ASSERT(fz_find_maps("memfd:ferry-data", "r--s", NULL, 0) == 1);
    /* Geometry as the publisher wrote it, before anything is scribbled. */
    const ferry__data_header *dh = (const ferry__data_header *)p->data_rw.start;
    p->table_offset = dh->table_offset;
    p->arena_offset = dh->arena_offset;
    const ferry__conn_header *ch = (const ferry__conn_header *)conn[0].start;
    p->dcap = ch->deliver_capacity;
    p->rcap = ch->return_capacity;
    ferry__conn_layout(p->dcap, p->rcap, &p->doff, &p->roff);
    FZ_ASSERT(p->doff == ch->deliver_offset && p->roff == ch->return_offset);
}

static void pair_close(pair *p)
{
    for (uint32_t i = 0; i < p->nheld; i++)
        FZ_ASSERT(ferry_release(p->sub, &p->held[i]) == FERRY_OK);
    p->nheld = 0;
    if (p->loan)
        FZ_ASSERT(ferry_loan_release(p->pub, p->loan) == FERRY_OK);
    FZ_ASSERT(ferry_subscriber_destroy(p->sub) == FERRY_OK);
    ferry_publisher_stats st;
    for (int k = 0;; k++) {
        FZ_ASSERT(k < 100);
        FZ_ASSERT(ferry_publisher_poll(p->pub, 0) == FERRY_OK);
        FZ_ASSERT(ferry_publisher_stats_get(p->pub, &st) == FERRY_OK);
        if (st.subscribers == 0)
            break;
    }
    /* Every reference the subscriber had is back, whatever it scribbled. */
    FZ_ASSERT(st.chunks_loaned == 0);
    FZ_ASSERT(st.chunks_in_use <= p->history);
    FZ_ASSERT(st.chunks_free + st.chunks_in_use == st.chunks_total);
    FZ_ASSERT(ferry_publisher_destroy(p->pub) == FERRY_OK);
    if (fz_fd_count() != fc.fd_base) {
        fprintf(stderr, "descriptors: %d, %d at the start\n", fz_fd_count(), fc.fd_base);
        fz_fd_dump();
    }
    FZ_ASSERT(fz_fd_count() == fc.fd_base);
    FZ_ASSERT(fz_find_maps("memfd:ferry-", "rw-s", NULL, 0) == 0);
    FZ_ASSERT(fz_find_maps("memfd:ferry-", "r--s", NULL, 0) == 0);
}

/* The connection segment as mapped now (either end: they share it), or NULL once both ends let
 * go of it after a disconnection. */
static uint8_t *conn_map(unsigned which, size_t *len)
{
    fz_map m[2];
    int n = fz_find_maps("memfd:ferry-conn", "rw-s", m, 2);
    if (n <= 0)
        return NULL;
    if (n > 2)
        n = 2;
    *len = m[which % (unsigned)n].len;
    return m[which % (unsigned)n].start;
}

static void check_sample(const pair *p, const ferry_sample *s)
{
    /* Inside the subscriber's read-only view of a data segment, past its table. */
    fz_map ro[4];
    int n = fz_find_maps("memfd:ferry-data", "r--s", ro, 4);
    const uint8_t *d = s->data;
    bool inside = false;
    for (int i = 0; i < n && i < 4; i++) {
        const uint8_t *lo = ro[i].start + p->arena_offset;
        const uint8_t *hi = ro[i].start + ro[i].len;
        inside |= d >= lo && d <= hi && s->size <= (size_t)(hi - d);
    }
    FZ_ASSERT(inside);
    FZ_ASSERT(s->size >= 1 && s->publisher_id == p->pub_id);
    /* Touch every byte: an address outside the mapping would fault here. */
    uint8_t x = 0;
    for (size_t i = 0; i < s->size; i += 512)
        x ^= ((const volatile uint8_t *)d)[i];
    x ^= ((const volatile uint8_t *)d)[s->size - 1];
    (void)x;
}

static void take_one(pair *p)
{
    if (p->nheld == FC_MAX_HELD)
        return;
    ferry_sample s;
    ferry_err e = ferry_take(p->sub, &s);
    FZ_ASSERT(e == FERRY_OK || e == FERRY_EAGAIN || e == FERRY_ELIMIT);
    if (e != FERRY_OK)
        return;
    check_sample(p, &s);
    p->held[p->nheld++] = s;
}

static void release_one(pair *p, uint32_t which)
{
    if (p->nheld == 0)
        return;
    which %= p->nheld;
    FZ_ASSERT(ferry_release(p->sub, &p->held[which]) == FERRY_OK);
    p->held[which] = p->held[--p->nheld];
}

static void publish(pair *p, size_t size)
{
    void *payload;
    if (ferry_loan(p->pub, size, &payload) != FERRY_OK)
        return;
    memset(payload, (int)(size & 0xff), size);
    if (ferry_publish(p->pub, payload, 0) != FERRY_OK)
        FZ_ASSERT(ferry_loan_release(p->pub, payload) == FERRY_OK);
}

/* Writes up to 16 input bytes at base[off..limit). */
static void scribble(uint8_t *base, size_t off, size_t limit, fz_reader *r)
{
    uint8_t buf[16];
    size_t len = 1 + fz_u8(r) % sizeof buf;
    if (off >= limit)
        return;
    if (len > limit - off)
        len = limit - off;
    len = fz_bytes(r, buf, len);
    memcpy(base + off, buf, len);
}

static _Atomic uint64_t *counter(unsigned which)
{
    size_t len;
    ferry__conn_header *h = (ferry__conn_header *)conn_map(which & 1, &len);
    return h == NULL ? NULL : fz_conn_counter(h, which >> 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fc_setup();
    fz_reader r = {data, size};
    pair p;
    pair_open(&p, &r);
    for (int ops = 0; ops < FC_MAX_OPS && fz_more(&r); ops++) {
        uint8_t op = fz_u8(&r);
        switch (op % 14) {
        case 0:
            publish(&p, 1 + (size_t)fz_u8(&r) * 8);
            break;
        case 1:
            take_one(&p);
            break;
        case 2:
            release_one(&p, fz_u8(&r));
            break;
        case 3:
            FZ_ASSERT(ferry_publisher_poll(p.pub, 0) == FERRY_OK);
            break;
        case 4: {
            ferry_err e = ferry_wait(p.sub, 0);
            FZ_ASSERT(e == FERRY_OK || e == FERRY_ETIMEDOUT);
            break;
        }
        case 5: { /* bytes anywhere in the connection segment, through either end's mapping */
            size_t len;
            uint8_t *m = conn_map(op >> 7, &len);
            size_t at = fz_u16(&r);
            if (m)
                scribble(m, at % len, len, &r);
            break;
        }
        case 6: /* the chunk table */
            scribble(p.data_rw.start,
                     p.table_offset + fz_u16(&r) % (p.arena_offset - p.table_offset),
                     p.arena_offset, &r);
            break;
        case 7: { /* a chunk header: chunks are one page each at these sizes, carved in order */
            size_t chunk = p.arena_offset + (size_t)(fz_u8(&r) % p.max_chunks) * FERRY__PAGE;
            scribble(p.data_rw.start, chunk + fz_u8(&r) % sizeof(ferry__chunk_header),
                     chunk + sizeof(ferry__chunk_header), &r);
            break;
        }
        case 8: { /* a ring counter moves by a small step, either way */
            _Atomic uint64_t *c = counter(fz_u8(&r));
            int8_t delta = (int8_t)fz_u8(&r);
            if (c)
                atomic_fetch_add(c, (uint64_t)(int64_t)delta);
            break;
        }
        case 9: { /* a ring slot names some chunk in some generation */
            uint8_t which = fz_u8(&r);
            uint32_t cap = which & 1 ? p.rcap : p.dcap;
            uint64_t off = which & 1 ? p.roff : p.doff;
            uint32_t slot = fz_u8(&r) % cap;
            uint64_t desc = ferry__desc(fz_u8(&r) % (p.max_chunks + 2), fz_u8(&r));
            size_t len;
            uint8_t *m = conn_map(0, &len);
            if (m)
                memcpy(m + off + (uint64_t)slot * 8, &desc, sizeof desc);
            break;
        }
        case 10: {
            ferry_publisher_stats ps;
            ferry_subscriber_stats ss;
            FZ_ASSERT(ferry_publisher_stats_get(p.pub, &ps) == FERRY_OK);
            FZ_ASSERT(ferry_subscriber_stats_get(p.sub, &ss) == FERRY_OK);
            FZ_ASSERT(ss.held == p.nheld);
            break;
        }
        case 11:
            if (p.loan) {
                FZ_ASSERT(ferry_loan_release(p.pub, p.loan) == FERRY_OK);
                p.loan = NULL;
            } else if (ferry_loan(p.pub, 1 + fz_u8(&r), &p.loan) != FERRY_OK) {
                p.loan = NULL;
            }
            break;
        case 12:
            for (int k = 0; k < FC_MAX_HELD; k++)
                take_one(&p);
            while (p.nheld)
                release_one(&p, 0);
            break;
        default: /* the data segment's header: read by subscribers only when they connect */
            scribble(p.data_rw.start, fz_u8(&r) % sizeof(ferry__data_header),
                     sizeof(ferry__data_header), &r);
            break;
        }
    }
    pair_close(&p);
    return 0;
}
