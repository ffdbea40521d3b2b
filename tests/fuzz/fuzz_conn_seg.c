/*
 * Fuzz target: the connection segment module (src/core/conn.c) on its own, its peer hostile.
 *
 * The honest publisher makes a segment with ferry__conn_create for a depth and a pool size the
 * input picks; the honest subscriber maps the same descriptor with ferry__conn_map for the
 * capacities of the welcome. The rest of the input is a little program: the hostile peer writes
 * bytes anywhere in the segment (header, ring counters, doorbells, slots) or sets a counter, a
 * doorbell or a slot outright, interleaved with what conn.h lets the honest ends do: the
 * producer's push, tail load and return drain, the consumer's peek and return push, the claim of
 * the delivery ring's entry at tail (either end, at the tail it read or a stale one), ringing a
 * doorbell, mapping the segment afresh, and checking its header against the welcome.
 *
 * Invariants, from conn.h's rules:
 *  - layout: capacities are the smallest powers of two >= depth and >= max_chunks; both rings lie
 *    inside the segment, 64-byte aligned, after the header, in order; the size is whole pages; the
 *    memfd has that size and is sealed against growing, shrinking and resealing; the header holds
 *    what was asked and every counter starts at 0;
 *  - ring pointers and masks come from each end's own computation: both ends agree, they stay
 *    inside the mapping, nothing the peer writes moves them, and a mapping made after the peer
 *    rewrote the header's offsets and capacities computes the same ones;
 *  - ferry__conn_claim(t) wins exactly when deliver_tail is t, moves it to t + 1 and changes no
 *    other byte; a loss changes nothing; while the peer leaves deliver_tail alone no tail is won
 *    twice, whichever end claims;
 *  - ferry__conn_check accepts the header exactly when the fields the layout depends on are as the
 *    publisher wrote them, whatever the peer wrote elsewhere;
 *  - the producer's tail load succeeds exactly when the tail moved forward from the last one it
 *    saw and not past its head, and then the tail it reports is between the two; its push writes
 *    the slot at its own head and publishes head + 1; a drain reports at most a ring's worth of
 *    returns and reads only slots of the return ring;
 *  - the consumer's peek reports an entry only for counters within one ring's worth, and then the
 *    slot at tail; broken only when the counters are out of range; its give-back looks at the
 *    producer's tail only when the one it saw last leaves no room, succeeds exactly when there is
 *    room by the tail it then sees (which moved only forward), writes the slot at its own head,
 *    never one the producer may still read, and publishes head + 1, and changes nothing otherwise;
 *  - ringing a doorbell returns what it held and leaves it 0;
 *  - ring entries (ferry__desc) carry index and generation unchanged;
 *  - nothing is left behind: no descriptor, no mapping, after each input.
 */
#include "core/core.h"
#include "fuzz_util.h"

#include <fcntl.h>
#include <stddef.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CS_MAX_OPS 96
#define CS_MAX_DEPTH 300   /* crosses 256: capacities up to 512 */
#define CS_MAX_CHUNKS 2100 /* crosses 2048: capacities up to 4096 */
#define CS_MAX_WON 128

typedef struct seg {
    ferry__conn pub, sub;
    int fd;
    uint32_t depth, max_chunks, dcap, rcap;
    uint64_t doff, roff;
    ferry__welcome w;      /* what the publisher would announce */
    ferry__conn_header at; /* the header as the publisher wrote it */
    uint8_t *before;       /* a copy of the segment, for what a claim may change */
    uint64_t won[CS_MAX_WON];
    uint32_t nwon;
    uint64_t head, tail_seen, rtail; /* the producer's private copies */
    uint64_t rhead, rtail_seen;      /* the consumer's */
} seg;

static int cs_fd_base = -1;

static bool pow2(uint32_t v)
{
    return v != 0 && (v & (v - 1)) == 0;
}

/* The end's ring pointers: its own layout of its own mapping, inside it. */
static void check_pointers(const seg *s, const ferry__conn *c)
{
    const uint8_t *base = (const uint8_t *)c->hdr;
    FZ_ASSERT(c->size == s->pub.size);
    FZ_ASSERT((const uint8_t *)c->dslots == base + s->doff);
    FZ_ASSERT((const uint8_t *)c->rslots == base + s->roff);
    FZ_ASSERT(c->dmask == s->dcap - 1 && c->rmask == s->rcap - 1);
    FZ_ASSERT(s->doff + (uint64_t)(c->dmask + 1) * 8 <= c->size);
    FZ_ASSERT(s->roff + (uint64_t)(c->rmask + 1) * 8 <= c->size);
}

static void seg_open(seg *s, fz_reader *r)
{
    memset(s, 0, sizeof *s);
    s->depth = 1 + fz_u16(r) % CS_MAX_DEPTH;
    s->max_chunks = 1 + fz_u16(r) % CS_MAX_CHUNKS;
    s->fd = ferry__conn_create(&s->pub, s->depth, s->max_chunks);
    FZ_ASSERT(s->fd >= 0);

    /* Layout. */
    s->dcap = s->pub.dmask + 1;
    s->rcap = s->pub.rmask + 1;
    FZ_ASSERT(pow2(s->dcap) && s->dcap >= s->depth && (s->dcap == 1 || s->dcap / 2 < s->depth));
    FZ_ASSERT(pow2(s->rcap) && s->rcap >= s->max_chunks &&
              (s->rcap == 1 || s->rcap / 2 < s->max_chunks));
    FZ_ASSERT(ferry__pow2_at_least(s->depth) == s->dcap);
    FZ_ASSERT(ferry__pow2_at_least(s->max_chunks) == s->rcap);
    uint64_t size = ferry__conn_layout(s->dcap, s->rcap, &s->doff, &s->roff);
    FZ_ASSERT(size == s->pub.size && size % FERRY__PAGE == 0);
    FZ_ASSERT(s->doff >= sizeof(ferry__conn_header) && s->doff % 64 == 0);
    FZ_ASSERT(s->roff >= s->doff + (uint64_t)s->dcap * 8 && s->roff % 64 == 0);
    FZ_ASSERT(s->roff + (uint64_t)s->rcap * 8 <= size);
    struct stat st;
    FZ_ASSERT(fstat(s->fd, &st) == 0 && (uint64_t)st.st_size == size);
    int seals = fcntl(s->fd, F_GET_SEALS);
    FZ_ASSERT(seals >= 0 && (seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) ==
                                (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL));

    /* The header as written. */
    const ferry__conn_header *h = s->pub.hdr;
    FZ_ASSERT(h->magic == FERRY__CONN_MAGIC && h->version == FERRY_PROTOCOL_VERSION);
    FZ_ASSERT(h->header_size == sizeof *h && h->size == size);
    FZ_ASSERT(h->deliver_offset == s->doff && h->return_offset == s->roff);
    FZ_ASSERT(h->deliver_capacity == s->dcap && h->return_capacity == s->rcap);
    FZ_ASSERT(h->depth == s->depth);
    FZ_ASSERT(atomic_load(&h->deliver_head) == 0 && atomic_load(&h->deliver_tail) == 0);
    FZ_ASSERT(atomic_load(&h->return_head) == 0 && atomic_load(&h->return_tail) == 0);
    FZ_ASSERT(atomic_load(&h->sub_waiting) == 0 && atomic_load(&h->pub_waiting) == 0);
    FZ_ASSERT(atomic_load(&h->sub_paused) == 0 && atomic_load(&h->dropped) == 0);
    memcpy(&s->at, h, sizeof s->at);
    check_pointers(s, &s->pub);

    /* The welcome's view of it, and the subscriber's mapping for it. */
    s->w.conn_size = size;
    s->w.depth = s->depth;
    s->w.max_chunks = s->max_chunks;
    s->w.deliver_capacity = s->dcap;
    s->w.return_capacity = s->rcap;
    FZ_ASSERT(ferry__conn_map(&s->sub, s->fd, size, s->dcap, s->rcap) == 0);
    FZ_ASSERT(s->sub.hdr != s->pub.hdr);
    check_pointers(s, &s->sub);
    FZ_ASSERT(ferry__conn_check(s->sub.hdr, &s->w) == FERRY_OK);

    s->before = malloc(size);
    FZ_ASSERT(s->before != NULL);
}

static void seg_close(seg *s)
{
    ferry__conn_unmap(&s->sub);
    ferry__conn_unmap(&s->pub);
    FZ_ASSERT(s->sub.hdr == NULL && s->pub.hdr == NULL && s->pub.size == 0);
    close(s->fd);
    free(s->before);
    FZ_ASSERT(fz_find_maps("memfd:ferry-conn", "rw-s", NULL, 0) == 0);
    FZ_ASSERT(fz_fd_count() == cs_fd_base);
}

/* The peer wrote [off, off + len): forget the tails won when deliver_tail is among them. */
static void peer_wrote(seg *s, size_t off, size_t len)
{
    size_t t = offsetof(ferry__conn_header, deliver_tail);
    if (off < t + sizeof(uint64_t) && t < off + len)
        s->nwon = 0;
}

/* Writes up to 16 input bytes at an offset the input picks, anywhere in the segment, through
 * one end's mapping or the other's (they are the same memory). */
static void peer_scribble(seg *s, fz_reader *r)
{
    uint8_t buf[16];
    uint8_t how = fz_u8(r);
    size_t size = s->pub.size;
    /* Mostly the header's lines, where every counter and doorbell is; at times any byte. */
    size_t off = how & 1 ? fz_u16(r) % size : fz_u16(r) % s->doff;
    size_t len = 1 + fz_u8(r) % sizeof buf;
    if (len > size - off)
        len = size - off;
    len = fz_bytes(r, buf, len);
    uint8_t *base = (uint8_t *)(how & 2 ? s->sub.hdr : s->pub.hdr);
    memcpy(base + off, buf, len);
    peer_wrote(s, off, len);
}

/* A ring counter moves by a small step, either way, or takes any value. */
static void peer_counter(seg *s, fz_reader *r)
{
    uint8_t which = fz_u8(r);
    _Atomic uint64_t *c = fz_conn_counter(which & 1 ? s->sub.hdr : s->pub.hdr, which >> 1);
    if (which & 0x80)
        atomic_store(c, fz_u64(r));
    else
        atomic_fetch_add(c, (uint64_t)(int64_t)(int8_t)fz_u8(r));
    if (c == &s->sub.hdr->deliver_tail || c == &s->pub.hdr->deliver_tail)
        s->nwon = 0;
}

static void peer_doorbell(seg *s, fz_reader *r)
{
    uint8_t which = fz_u8(r);
    ferry__conn_header *h = which & 1 ? s->sub.hdr : s->pub.hdr;
    uint32_t v = which & 2 ? fz_u8(r) % 4 : (uint32_t)fz_u64(r);
    switch ((which >> 2) % 3) {
    case 0:
        atomic_store(&h->sub_waiting, v);
        break;
    case 1:
        atomic_store(&h->pub_waiting, v);
        break;
    default:
        atomic_store(&h->sub_paused, v);
        break;
    }
}

/* A slot of either ring names some chunk in some generation, or holds any bits. */
static void peer_slot(seg *s, fz_reader *r)
{
    uint8_t which = fz_u8(r);
    uint16_t slot = fz_u16(r);
    uint64_t v = which & 2 ? fz_u64(r) : ferry__desc(fz_u16(r) % (s->max_chunks + 2), fz_u8(r));
    if (which & 1)
        atomic_store(&s->sub.rslots[slot & s->sub.rmask], v);
    else
        atomic_store(&s->pub.dslots[slot & s->pub.dmask], v);
}

/* One end claims the entry at the tail it read, or at one a little off it (a stale read). */
static void claim(seg *s, fz_reader *r, bool by_sub)
{
    ferry__conn *c = by_sub ? &s->sub : &s->pub;
    int8_t b = (int8_t)fz_u8(r);
    int off = b & 1 ? b % 3 : 0; /* -2..2, half the time 0 */
    uint64_t now = atomic_load_explicit(&c->hdr->deliver_tail, memory_order_acquire);
    uint64_t t = now + (uint64_t)(int64_t)off;
    memcpy(s->before, c->hdr, c->size);
    bool won = ferry__conn_claim(c, t);
    uint64_t after = atomic_load(&c->hdr->deliver_tail);
    FZ_ASSERT(won == (t == now));
    FZ_ASSERT(after == (won ? t + 1 : now));
    /* No other byte of the segment changed. */
    size_t at = offsetof(ferry__conn_header, deliver_tail);
    FZ_ASSERT(memcmp(s->before, c->hdr, at) == 0);
    FZ_ASSERT(memcmp(s->before + at + 8, (uint8_t *)c->hdr + at + 8, c->size - at - 8) == 0);
    if (!won)
        return;
    for (uint32_t i = 0; i < s->nwon; i++)
        FZ_ASSERT(s->won[i] != t);
    if (s->nwon == CS_MAX_WON)
        s->nwon = 0;
    s->won[s->nwon++] = t;
}

/* The subscriber maps the segment again: its pointers come from its layout, not the header. */
static void remap(seg *s)
{
    ferry__conn_unmap(&s->sub);
    FZ_ASSERT(ferry__conn_map(&s->sub, s->fd, s->w.conn_size, s->w.deliver_capacity,
                              s->w.return_capacity) == 0);
    check_pointers(s, &s->sub);
}

/* The header check passes exactly when what the layout depends on is as it was written. */
static void header_check(seg *s)
{
    const ferry__conn_header *h = s->sub.hdr, *a = &s->at;
    bool intact = h->magic == a->magic && h->version == a->version && h->size == a->size &&
                  h->deliver_offset == a->deliver_offset && h->return_offset == a->return_offset &&
                  h->deliver_capacity == a->deliver_capacity &&
                  h->return_capacity == a->return_capacity && h->depth == a->depth;
    FZ_ASSERT((ferry__conn_check(h, &s->w) == FERRY_OK) == intact);
}

static void desc_roundtrip(fz_reader *r)
{
    uint32_t index = (uint32_t)fz_u64(r), gen = (uint32_t)fz_u64(r);
    uint64_t d = ferry__desc(index, gen);
    FZ_ASSERT(ferry__desc_index(d) == index && ferry__desc_gen(d) == gen);
}

/* The producer loads the tail: it may only have moved forward, up to the producer's head. */
static void producer_tail(seg *s)
{
    uint64_t seen = s->tail_seen;
    uint64_t t = atomic_load(&s->pub.hdr->deliver_tail);
    bool ok = ferry__conn_tail(&s->pub, s->head, &s->tail_seen);
    FZ_ASSERT(ok == (t - seen <= s->head - seen));
    FZ_ASSERT(s->tail_seen == (ok ? t : seen));
}

/* The producer pushes an entry when its view of the ring has room. */
static void producer_push(seg *s, fz_reader *r)
{
    if (!ferry__conn_tail(&s->pub, s->head, &s->tail_seen) || s->head - s->tail_seen >= s->depth)
        return;
    uint64_t d = ferry__desc(fz_u16(r) % s->max_chunks, fz_u8(r));
    uint64_t h = s->head;
    ferry__conn_push(&s->pub, &s->head, d);
    FZ_ASSERT(s->head == h + 1);
    FZ_ASSERT(atomic_load(&s->sub.hdr->deliver_head) == s->head);
    FZ_ASSERT(atomic_load(&s->sub.dslots[h & s->sub.dmask]) == d);
    FZ_ASSERT(ferry__conn_entry(&s->sub, h) == d);
}

/* The producer drains the return ring: at most a ring's worth, from the ring's own slots. */
static void producer_drain(seg *s)
{
    uint64_t head = 0, before = atomic_load(&s->pub.hdr->return_head);
    bool ok = ferry__conn_returns(&s->pub, s->rtail, &head);
    FZ_ASSERT(ok == (before - s->rtail <= s->rcap));
    if (!ok) {
        /* A real producer disconnects here; the model starts over from the peer's counters. */
        s->rtail = atomic_load(&s->pub.hdr->return_head);
        ferry__conn_returns_done(&s->pub, s->rtail);
        s->rhead = s->rtail_seen = s->rtail;
        return;
    }
    FZ_ASSERT(head == before);
    for (; s->rtail != head; s->rtail++)
        FZ_ASSERT(ferry__conn_returned(&s->pub, s->rtail) ==
                  atomic_load(&s->pub.rslots[s->rtail & s->pub.rmask]));
    ferry__conn_returns_done(&s->pub, s->rtail);
    FZ_ASSERT(atomic_load(&s->sub.hdr->return_tail) == s->rtail);
}

/* The consumer peeks at the delivery ring, and claims what it found half the time. */
static void consumer_peek(seg *s, fz_reader *r)
{
    uint64_t h = atomic_load(&s->sub.hdr->deliver_head), t = atomic_load(&s->sub.hdr->deliver_tail);
    uint64_t tail = 0, d = 0;
    int found = ferry__conn_peek(&s->sub, &tail, &d);
    /* Single-threaded: nothing moves the tail between the peek's loads. */
    FZ_ASSERT(found != FERRY__PEEK_RACED);
    if (h == t) {
        FZ_ASSERT(found == FERRY__PEEK_EMPTY);
        return;
    }
    FZ_ASSERT(found == (h - t > s->dcap ? FERRY__PEEK_BROKEN : FERRY__PEEK_ENTRY));
    if (found != FERRY__PEEK_ENTRY)
        return;
    FZ_ASSERT(tail == t && d == atomic_load(&s->sub.dslots[t & s->sub.dmask]));
    FZ_ASSERT(!ferry__conn_tail_moved(&s->sub, tail));
    if (fz_u8(r) & 1) {
        FZ_ASSERT(ferry__conn_claim(&s->sub, tail));
        FZ_ASSERT(ferry__conn_tail_moved(&s->sub, tail));
        s->nwon = 0;
    }
}

/* The consumer gives an entry back: only into room the producer's tail shows, looking at the
 * tail again only when the one it saw last leaves no room. */
static void consumer_give_back(seg *s, fz_reader *r)
{
    uint64_t d = ferry__desc(fz_u16(r) % s->max_chunks, fz_u8(r));
    uint64_t h = s->rhead, seen = s->rtail_seen, t = atomic_load(&s->sub.hdr->return_tail);
    memcpy(s->before, s->sub.hdr, s->sub.size);
    bool ok = ferry__conn_give_back(&s->sub, &s->rhead, &s->rtail_seen, d);
    bool looked = h - seen >= s->rcap;
    FZ_ASSERT(ok == (!looked || (t - seen <= h - seen && h - t < s->rcap)));
    FZ_ASSERT(s->rtail_seen == (ok && looked ? t : seen));
    if (!ok) {
        FZ_ASSERT(s->rhead == h && memcmp(s->before, s->sub.hdr, s->sub.size) == 0);
        return;
    }
    /* Never into a slot the producer may still read: the tail last seen is at most a ring
     * behind. */
    FZ_ASSERT(h - s->rtail_seen < s->rcap);
    FZ_ASSERT(s->rhead == h + 1 && atomic_load(&s->pub.hdr->return_head) == s->rhead);
    FZ_ASSERT(ferry__conn_returned(&s->pub, h) == d);
}

/* Ringing a doorbell takes whatever it held back to 0 and says what that was. */
static void ring_doorbell(seg *s, fz_reader *r)
{
    _Atomic uint32_t *bell = fz_u8(r) & 1 ? &s->pub.hdr->sub_waiting : &s->sub.hdr->pub_waiting;
    uint32_t v = atomic_load(bell);
    FZ_ASSERT(ferry__conn_doorbell_get(bell) == v);
    FZ_ASSERT(ferry__conn_doorbell_ring(bell) == v);
    FZ_ASSERT(atomic_load(bell) == 0);
    ferry__conn_doorbell_set(bell, FERRY__DOORBELL_FUTEX);
    FZ_ASSERT(atomic_load(bell) == FERRY__DOORBELL_FUTEX);
    if (fz_u8(r) & 1)
        atomic_store(bell, v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (cs_fd_base < 0)
        cs_fd_base = fz_fd_count();
    fz_reader r = {data, size};
    seg s;
    seg_open(&s, &r);
    for (int ops = 0; ops < CS_MAX_OPS && fz_more(&r); ops++) {
        switch (fz_u8(&r) % 16) {
        case 0:
            peer_scribble(&s, &r);
            break;
        case 1:
            peer_counter(&s, &r);
            break;
        case 2:
            peer_doorbell(&s, &r);
            break;
        case 3:
            peer_slot(&s, &r);
            break;
        case 4:
            claim(&s, &r, false);
            break;
        case 5:
            claim(&s, &r, true);
            break;
        case 6:
            remap(&s);
            break;
        case 7:
            header_check(&s);
            break;
        case 8:
            desc_roundtrip(&r);
            break;
        case 9:
            producer_tail(&s);
            break;
        case 10:
        case 11:
            producer_push(&s, &r);
            break;
        case 12:
            producer_drain(&s);
            break;
        case 13:
            consumer_peek(&s, &r);
            break;
        case 14:
            consumer_give_back(&s, &r);
            break;
        case 15:
            ring_doorbell(&s, &r);
            break;
        default: /* the publisher's own pointers, whatever the peer wrote */
            check_pointers(&s, &s.pub);
            check_pointers(&s, &s.sub);
            break;
        }
    }
    header_check(&s);
    seg_close(&s);
    return 0;
}
