/*
 * The publisher's pool: one sealed memfd holding a header, a chunk table and an arena. Chunks are
 * carved from the arena on demand, in size classes of eight steps per doubling (at most 12.5%
 * slack above one page), and never move. Their pages are reserved (ferry__fd_reserve, which
 * checks that the memory is there to take) when they are carved, before anything touches them.
 * Free chunks of a class sit on a free list: a loan on a warm class is a list pop. Single-threaded:
 * the publisher's caller serialises.
 *
 * A huge-page pool (THP or hugetlb) lays the segment out so that huge pages map with PMDs: the
 * arena starts on a 2 MiB boundary and its cap is a multiple of 2 MiB; classes above 2 MiB are
 * multiples of 2 MiB, and a chunk that is a multiple of 2 MiB starts on a 2 MiB boundary (the
 * arena skips what lies before it). Every mapping of the segment starts on a 2 MiB boundary
 * (ferry__map_huge), so file and address alignment agree. A THP pool reserves its chunks by
 * faulting them in through its MADV_HUGEPAGE mapping, because fallocate would allocate small
 * pages under shmem_enabled=advise; a hugetlb pool's pages were all reserved by the kernel when
 * it was mapped.
 *
 * Invariants: nfree + loaned + (chunks with refs > 0) == nchunks; a chunk's table entry is
 * written before it is first delivered and never changes afterwards; chunks' offsets rise with
 * their index.
 */
#include "core/core.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

_Static_assert(sizeof(ferry__chunk_header) == 64, "chunk header is one cache line");

static uint64_t round_up(uint64_t v, uint64_t to)
{
    return (v + to - 1) / to * to;
}

static uint64_t class_bytes(const ferry__pool *pool, uint64_t need)
{
    if (need <= FERRY__PAGE)
        return FERRY__PAGE;
    unsigned p = 63u - (unsigned)__builtin_clzll(need - 1); /* 2^p < need <= 2^(p+1) */
    uint64_t step = ((uint64_t)1 << p) / 8;
    if (step < FERRY__PAGE)
        step = FERRY__PAGE;
    /* Whole huge pages for large chunks: a 1080p frame's 6 MiB class is three of them. */
    if (pool->huge != FERRY_HUGE_PAGES_OFF && need > FERRY__HUGE_PAGE && step < FERRY__HUGE_PAGE)
        step = FERRY__HUGE_PAGE;
    return round_up(need, step);
}

const char *ferry__huge_name(ferry_huge_pages h)
{
    switch (h) {
    case FERRY_HUGE_PAGES_THP:
        return "thp";
    case FERRY_HUGE_PAGES_HUGETLB:
        return "hugetlb";
    case FERRY_HUGE_PAGES_AUTO:
        return "auto";
    default:
        return "off";
    }
}

/* Appends one reason to huge_why, "; "-separated, named by its kind when asked names it. */
static void why_add(ferry__pool *p, bool named, ferry_huge_pages kind, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void why_add(ferry__pool *p, bool named, ferry_huge_pages kind, const char *fmt, ...)
{
    size_t len = strlen(p->huge_why);
    if (len + 1 >= sizeof p->huge_why)
        return;
    int n = snprintf(p->huge_why + len, sizeof p->huge_why - len, "%s%s%s", len ? "; " : "",
                     named ? ferry__huge_name(kind) : "", named ? ": " : "");
    if (n < 0 || (size_t)n >= sizeof p->huge_why - len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->huge_why + len + (size_t)n, sizeof p->huge_why - len - (size_t)n, fmt, ap);
    va_end(ap);
}

/* Whether the machine offers kind for a segment of size bytes; when not, the reason goes to
 * huge_why. */
static bool huge_offered(ferry__pool *p, ferry_huge_pages kind, bool named, uint64_t size)
{
    if (kind == FERRY_HUGE_PAGES_HUGETLB) {
        uint64_t available, total, need = size / FERRY__HUGE_PAGE;
        if (ferry__hugetlb_pages(&available, &total) != 0) {
            why_add(p, named, kind, "the kernel has no 2 MiB hugetlb pages");
            return false;
        }
        if (available < need) {
            why_add(
                p, named, kind, "%llu free 2 MiB pages, the pool needs %llu (vm.nr_hugepages=%llu)",
                (unsigned long long)available, (unsigned long long)need, (unsigned long long)total);
            return false;
        }
        return true;
    }
    char mode[32];
    if (ferry__thp_shmem_mode(mode, sizeof mode) != 0) {
        why_add(p, named, kind, "the kernel has no transparent huge pages for shmem");
        return false;
    }
    if (strcmp(mode, "never") == 0 || strcmp(mode, "deny") == 0) {
        why_add(p, named, kind, "transparent_hugepage/shmem_enabled is %s", mode);
        return false;
    }
    return true;
}

/* Lays the segment out for kind and creates, sizes and maps its memfd; -1 with errno, nothing
 * left open, when that fails. */
static int segment_open(ferry__pool *p, ferry_huge_pages kind, uint64_t table_end,
                        uint64_t pool_bytes)
{
    uint64_t unit = kind == FERRY_HUGE_PAGES_OFF ? FERRY__PAGE : FERRY__HUGE_PAGE;
    p->huge = kind;
    p->arena_offset = round_up(table_end, unit);
    p->arena_cap = round_up(pool_bytes, unit);
    p->size = p->arena_offset + p->arena_cap;
    p->fd = kind == FERRY_HUGE_PAGES_HUGETLB ? ferry__memfd_create_hugetlb("ferry-data")
                                             : ferry__memfd_create("ferry-data");
    if (p->fd < 0)
        return -1;
    /* Sparse: pages are allocated only as chunks are carved. A hugetlb segment's pages are
     * reserved (not allocated) for it by its first mapping: ENOMEM there, not SIGBUS later. */
    if (ftruncate(p->fd, (off_t)p->size) == 0) {
        p->base = kind == FERRY_HUGE_PAGES_OFF ? ferry__map(p->fd, p->size, true)
                                               : ferry__map_huge(p->fd, p->size, true);
        if (p->base)
            return 0;
    }
    int e = errno;
    close(p->fd);
    p->fd = -1;
    errno = e;
    return -1;
}

ferry_err ferry__pool_init(ferry__pool *p, uint64_t publisher_id, uint64_t pool_bytes,
                           uint32_t max_chunks, uint64_t max_sample, uint64_t align,
                           ferry_huge_pages huge)
{
    memset(p, 0, sizeof *p);
    p->fd = p->ro_fd = -1;
    p->max_chunks = max_chunks;
    p->max_sample = max_sample;
    p->payload_offset = align < sizeof(ferry__chunk_header) ? sizeof(ferry__chunk_header) : align;
    uint64_t table_offset = round_up(sizeof(ferry__data_header), 64);
    uint64_t table_end = table_offset + (uint64_t)max_chunks * sizeof(ferry__chunk_entry);

    p->chunks = calloc(max_chunks, sizeof *p->chunks);
    if (!p->chunks)
        return FERRY_ENOMEM;
    ferry_err err = FERRY_ESYS;
    ferry_huge_pages kinds[2] = {huge, FERRY_HUGE_PAGES_OFF};
    unsigned nkinds = huge == FERRY_HUGE_PAGES_OFF ? 0 : 1;
    if (huge == FERRY_HUGE_PAGES_AUTO) {
        kinds[0] = FERRY_HUGE_PAGES_HUGETLB;
        kinds[1] = FERRY_HUGE_PAGES_THP;
        nkinds = 2;
    }
    bool named = huge == FERRY_HUGE_PAGES_AUTO;
    uint64_t huge_size =
        round_up(table_end, FERRY__HUGE_PAGE) + round_up(pool_bytes, FERRY__HUGE_PAGE);
    for (unsigned k = 0; k < nkinds; k++) {
        if (!huge_offered(p, kinds[k], named, huge_size))
            continue;
        if (segment_open(p, kinds[k], table_end, pool_bytes) == 0) {
            p->huge_why[0] = '\0';
            break;
        }
        why_add(p, named, kinds[k], "%s", strerror(errno));
    }
    if (!p->base && segment_open(p, FERRY_HUGE_PAGES_OFF, table_end, pool_bytes) != 0) {
        err = errno == ENOMEM || errno == ENOSPC ? FERRY_ENOMEM : FERRY_ESYS;
        goto fail;
    }
    if (ferry__fd_reserve(p->fd, 0, p->arena_offset) != 0) {
        err = FERRY_ENOMEM;
        goto fail;
    }
    /* Written once, as every chunk is when carved: subscribers take pages that were reserved
     * but never written for holes (the kernel cannot tell them apart), and refuse them. */
    ferry__prefault_write(p->base, p->arena_offset);
    /* The publisher's mapping is the only writable one there will ever be: no subscriber can
     * write, even by reopening the descriptor it receives. */
    if (ferry__memfd_seal(p->fd, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) !=
        0)
        goto fail;
    p->ro_fd = ferry__fd_reopen_readonly(p->fd);
    if (p->ro_fd < 0)
        goto fail;

    ferry__data_header *h = (ferry__data_header *)p->base;
    h->magic = FERRY__DATA_MAGIC;
    h->version = FERRY_PROTOCOL_VERSION;
    h->header_size = sizeof *h;
    h->segment_size = p->size;
    h->table_offset = table_offset;
    h->arena_offset = p->arena_offset;
    h->payload_offset = p->payload_offset;
    h->publisher_id = publisher_id;
    h->max_chunks = max_chunks;
    p->table = (ferry__chunk_entry *)(p->base + table_offset);
    return FERRY_OK;
fail : {
    int e = errno;
    ferry__pool_fini(p);
    errno = e;
    return err;
}
}

void ferry__pool_fini(ferry__pool *p)
{
    if (p->base)
        ferry__unmap(p->base, p->size);
    if (p->fd >= 0)
        close(p->fd);
    if (p->ro_fd >= 0)
        close(p->ro_fd);
    free(p->chunks);
    memset(p, 0, sizeof *p);
    p->fd = p->ro_fd = -1;
}

static ferry__class *class_find(ferry__pool *p, uint64_t bytes, bool create)
{
    for (uint32_t i = 0; i < p->nclasses; i++)
        if (p->classes[i].chunk_bytes == bytes)
            return &p->classes[i];
    if (!create || p->nclasses == FERRY__MAX_CLASSES)
        return NULL;
    ferry__class *c = &p->classes[p->nclasses++];
    memset(c, 0, sizeof *c);
    c->chunk_bytes = bytes;
    c->free_head = FERRY__NONE;
    return c;
}

#ifdef FERRY_CHECKS
/* The invariants of the header comment, walked in full over the private state (the chunk table
 * in the segment is shared memory, which the publisher's own process may have overwritten):
 * every chunk in exactly one state, the counts agree, each class's free list holds its free
 * chunks and nothing else. */
static void pool_check(const ferry__pool *p)
{
    uint32_t nfree = 0, loaned = 0, per_class[FERRY__MAX_CLASSES] = {0};
    for (uint32_t i = 0; i < p->nchunks; i++) {
        const ferry__chunk *ch = &p->chunks[i];
        FERRY__CHECK(ch->cls < p->nclasses);
        FERRY__CHECK(ch->state == FERRY__CHUNK_FREE || ch->state == FERRY__CHUNK_LOANED ||
                     ch->state == FERRY__CHUNK_PUBLISHED);
        FERRY__CHECK(i == 0 || ch->offset > p->chunks[i - 1].offset);
        FERRY__CHECK(p->huge == FERRY_HUGE_PAGES_OFF ||
                     p->classes[ch->cls].chunk_bytes % FERRY__HUGE_PAGE != 0 ||
                     ch->offset % FERRY__HUGE_PAGE == 0);
        nfree += ch->state == FERRY__CHUNK_FREE;
        loaned += ch->state == FERRY__CHUNK_LOANED;
        per_class[ch->cls]++;
    }
    FERRY__CHECK_EQ(nfree, p->nfree);
    FERRY__CHECK_EQ(loaned, p->loaned);
    FERRY__CHECK(p->nchunks <= p->max_chunks && p->arena_used <= p->arena_cap);
    for (uint32_t k = 0; k < p->nclasses; k++) {
        const ferry__class *c = &p->classes[k];
        FERRY__CHECK_EQ(per_class[k], c->count);
        uint32_t listed = 0;
        for (uint32_t i = c->free_head; i != FERRY__NONE; i = p->chunks[i].next_free) {
            FERRY__CHECK(i < p->nchunks && listed < c->count);
            FERRY__CHECK_EQ(p->chunks[i].state, FERRY__CHUNK_FREE);
            FERRY__CHECK_EQ(p->chunks[i].cls, k);
            listed++;
        }
        FERRY__CHECK_EQ(listed, c->free_count);
    }
}
#else
static void pool_check(const ferry__pool *p)
{
    (void)p;
}
#endif

/* Where in the arena the next chunk of bytes starts: one of whole huge pages on a huge page. */
static uint64_t carve_start(const ferry__pool *p, uint64_t bytes)
{
    if (p->huge != FERRY_HUGE_PAGES_OFF && bytes % FERRY__HUGE_PAGE == 0)
        return round_up(p->arena_used, FERRY__HUGE_PAGE);
    return p->arena_used;
}

/* How many more chunks of bytes the byte cap leaves room for. */
static uint64_t carve_room(const ferry__pool *p, uint64_t bytes)
{
    uint64_t start = carve_start(p, bytes);
    return start < p->arena_cap ? (p->arena_cap - start) / bytes : 0;
}

void ferry__pool_huge_refresh(ferry__pool *p)
{
    uint64_t bytes;
    if (p->huge != FERRY_HUGE_PAGES_OFF && p->base && ferry__map_huge_bytes(p->base, &bytes) == 0)
        p->huge_bytes = bytes;
}

/* Carves n chunks of class c with one reservation of their pages: all of them or none. */
static ferry_err carve(ferry__pool *p, ferry__class *c, uint32_t n)
{
    uint64_t bytes = c->chunk_bytes;
    if (n == 0 || n > p->max_chunks - p->nchunks || n > carve_room(p, bytes))
        return FERRY_EPOOL;
    uint64_t start = carve_start(p, bytes);
    uint64_t offset = p->arena_offset + start, len = (uint64_t)n * bytes;
    /* Reserved before it is touched: a full memory cgroup or machine is an error here, not the
     * OOM killer at the charge or SIGBUS at the first write. */
    int rc = p->huge == FERRY_HUGE_PAGES_THP ? ferry__fd_reserve_mapped(p->fd, p->base, offset, len)
                                             : ferry__fd_reserve(p->fd, offset, len);
    if (rc != 0)
        return FERRY_ENOMEM;
    ferry__prefault_write(p->base + offset, len);
    p->arena_used = start;
    for (uint32_t i = 0; i < n; i++, offset += bytes) {
        uint32_t index = p->nchunks++;
        p->arena_used += bytes;
        p->table[index].offset = offset;
        p->table[index].capacity = bytes - p->payload_offset;
        ferry__chunk *ch = &p->chunks[index];
        memset(ch, 0, sizeof *ch);
        ch->offset = offset;
        ch->capacity = bytes - p->payload_offset;
        ch->cls = (uint16_t)(c - p->classes);
        ch->state = FERRY__CHUNK_LOANED; /* ferry__pool_put moves it to the free list */
        p->loaned++;
        c->count++;
        ferry__pool_put(p, index);
    }
    ferry__pool_huge_refresh(p);
    pool_check(p);
    return FERRY_OK;
}

/* A class made for a carve that failed goes again, so a refusal leaves the pool as it was. */
static void class_drop_if_empty(ferry__pool *p, ferry__class *c)
{
    if (c->count == 0 && c == &p->classes[p->nclasses - 1])
        p->nclasses--;
}

static uint32_t pop(ferry__pool *p, ferry__class *c)
{
    uint32_t index = c->free_head;
    ferry__chunk *ch = &p->chunks[index];
    c->free_head = ch->next_free;
    c->free_count--;
    p->nfree--;
    p->loaned++;
    ch->state = FERRY__CHUNK_LOANED;
    ch->next_free = FERRY__NONE;
    pool_check(p);
    return index;
}

uint32_t ferry__pool_get_free(ferry__pool *p, uint64_t size)
{
    ferry__class *c = class_find(p, class_bytes(p, p->payload_offset + size), false);
    return c && c->free_head != FERRY__NONE ? pop(p, c) : FERRY__NONE;
}

uint32_t ferry__pool_get(ferry__pool *p, uint64_t size, ferry_err *err)
{
    uint64_t bytes = class_bytes(p, p->payload_offset + size);
    ferry__class *c = class_find(p, bytes, true);
    if (c && c->free_head != FERRY__NONE)
        return pop(p, c);
    ferry_err carve_err = FERRY_EPOOL;
    if (c) {
        /* Carve a batch of about 64 KiB, so small samples do not grow one page at a time, and
         * no more than the caps leave room for. */
        uint64_t batch = 65536 / bytes;
        if (batch < 1)
            batch = 1;
        if (batch > 16)
            batch = 16;
        if (batch > p->max_chunks - p->nchunks)
            batch = p->max_chunks - p->nchunks;
        if (batch > carve_room(p, bytes))
            batch = carve_room(p, bytes);
        carve_err = carve(p, c, (uint32_t)batch);
        if (c->free_head != FERRY__NONE)
            return pop(p, c);
        class_drop_if_empty(p, c);
    }
    /* No room to grow: a free chunk of a larger class will do (a camera lowered its
     * resolution); take the smallest that fits. */
    ferry__class *best = NULL;
    for (uint32_t i = 0; i < p->nclasses; i++) {
        ferry__class *k = &p->classes[i];
        if (k->chunk_bytes > bytes && k->free_head != FERRY__NONE &&
            (!best || k->chunk_bytes < best->chunk_bytes))
            best = k;
    }
    if (best)
        return pop(p, best);
    *err = carve_err;
    return FERRY__NONE;
}

ferry_err ferry__pool_reserve(ferry__pool *p, uint64_t size, uint32_t count, uint64_t *chunk_bytes)
{
    uint64_t bytes = class_bytes(p, p->payload_offset + size);
    *chunk_bytes = bytes;
    ferry__class *c = class_find(p, bytes, false);
    uint32_t have = c ? c->count : 0;
    uint32_t need = count > have ? count - have : 0;
    if (need > 0) {
        /* Checked before carving, so that a refusal leaves the pool as it was. */
        if ((!c && p->nclasses == FERRY__MAX_CLASSES) || need > p->max_chunks - p->nchunks ||
            (uint64_t)need > carve_room(p, bytes))
            return FERRY_EPOOL;
        c = class_find(p, bytes, true);
        ferry_err err = carve(p, c, need);
        if (err) {
            class_drop_if_empty(p, c);
            return err;
        }
    }
    /* Carving touched the new chunks; touch the older ones again too, in case their pages were
     * reclaimed since (a pool that is not locked in memory). */
    if (!c)
        return FERRY_OK;
    uint16_t cls = (uint16_t)(c - p->classes);
    for (uint32_t i = 0; i < p->nchunks; i++)
        if (p->chunks[i].cls == cls)
            ferry__prefault_write(p->base + p->chunks[i].offset, bytes);
    return FERRY_OK;
}

void ferry__pool_put(ferry__pool *p, uint32_t index)
{
    FERRY__CHECK(index < p->nchunks);
    ferry__chunk *ch = &p->chunks[index];
    ferry__class *c = &p->classes[ch->cls];
    FERRY__CHECK(ch->state != FERRY__CHUNK_FREE); /* put twice */
    if (ch->state == FERRY__CHUNK_LOANED)
        p->loaned--;
    ch->state = FERRY__CHUNK_FREE;
    ch->refs = 0;
    ch->next_free = c->free_head;
    c->free_head = index;
    c->free_count++;
    p->nfree++;
    pool_check(p);
}

uint32_t ferry__pool_find(const ferry__pool *p, const void *payload)
{
    uintptr_t a = (uintptr_t)payload, base = (uintptr_t)p->base;
    if (!p->base || a < base + p->arena_offset + p->payload_offset ||
        a >= base + p->arena_offset + p->arena_used)
        return FERRY__NONE;
    uint64_t offset = a - base - p->payload_offset;
    if (offset % FERRY__PAGE)
        return FERRY__NONE;
    /* The header is the application's own memory and may have been overwritten: check it
     * against the private table, and where it lies, search the table. Chunks are carved in
     * order, so their offsets rise with their index. */
    uint32_t index = ((const ferry__chunk_header *)(p->base + offset))->index;
    if (index < p->nchunks && p->chunks[index].offset == offset)
        return index;
    uint32_t lo = 0, hi = p->nchunks;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (p->chunks[mid].offset < offset)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < p->nchunks && p->chunks[lo].offset == offset ? lo : FERRY__NONE;
}
