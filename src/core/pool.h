/*
 * The publisher's pool (pool.c): size classes carved on demand from one sealed memfd (of 4 KiB
 * pages or huge ones), and the private per-chunk state that decides when a chunk is free.
 */
#ifndef FERRY_POOL_H
#define FERRY_POOL_H

#include <ferry/ferry.h>

#include <stdint.h>

#include "core/segment.h"

enum { FERRY__CHUNK_FREE = 0, FERRY__CHUNK_LOANED = 1, FERRY__CHUNK_PUBLISHED = 2 };
#define FERRY__NONE UINT32_MAX

typedef struct ferry__chunk {
    uint64_t offset;   /* chunk start in the segment */
    uint64_t capacity; /* payload bytes */
    uint64_t loan_size;
    uint32_t refs; /* queued or held by subscribers, plus history */
    uint32_t gen;
    uint32_t next_free;
    uint16_t cls;
    uint8_t state;
} ferry__chunk;

typedef struct ferry__class {
    uint64_t chunk_bytes; /* chunk size, page multiple; above 2 MiB in a huge-page pool, a
                             multiple of 2 MiB */
    uint32_t free_head;
    uint32_t count;
    uint32_t free_count;
} ferry__class;

#define FERRY__MAX_CLASSES 64

/* The pool: size classes carved on demand from one sealed memfd (pool.c). */
typedef struct ferry__pool {
    int fd;
    int ro_fd;
    uint8_t *base;
    uint64_t size;
    uint64_t arena_offset;
    uint64_t arena_used;
    uint64_t arena_cap;
    uint64_t payload_offset;
    uint64_t max_sample;
    ferry__chunk_entry *table; /* in the segment */
    ferry__chunk *chunks;      /* private */
    uint32_t max_chunks;
    uint32_t nchunks;
    uint32_t loaned;
    uint32_t nfree;
    ferry__class classes[FERRY__MAX_CLASSES];
    uint32_t nclasses;
    ferry_huge_pages huge; /* what the segment got: OFF, THP or HUGETLB */
    uint64_t huge_bytes;   /* mapped with huge pages here, as of the last carve or refresh */
    char huge_why[256];    /* why huge pages were asked for and not used; empty otherwise */
} ferry__pool;

/* Creates the segment with the pages huge asks for where the machine offers them (AUTO:
 * hugetlb, then THP), else with 4 KiB pages and the reason in huge_why, which the caller logs. */
ferry_err ferry__pool_init(ferry__pool *p, uint64_t publisher_id, uint64_t pool_bytes,
                           uint32_t max_chunks, uint64_t max_sample, uint64_t align,
                           ferry_huge_pages huge);
void ferry__pool_fini(ferry__pool *p);
/* "off", "thp", "hugetlb" or "auto". */
const char *ferry__huge_name(ferry_huge_pages h);
/* Reads again how much of the segment is mapped with huge pages (huge_bytes). */
void ferry__pool_huge_refresh(ferry__pool *p);
/* A free chunk of capacity >= size (carving when needed), or FERRY__NONE with *err set. */
uint32_t ferry__pool_get(ferry__pool *p, uint64_t size, ferry_err *err);
/* A free chunk of size's own class, FERRY__NONE when there is none: never carves. */
uint32_t ferry__pool_get_free(ferry__pool *p, uint64_t size);
/* Makes the size class serving size hold at least count chunks (carving what is missing, all or
 * nothing as far as the caps go) and touches every page of its chunks writable. *chunk_bytes
 * receives the class's chunk size; FERRY_EPOOL when the byte cap, the chunk cap or the number of
 * classes forbids it, FERRY_ENOMEM when the system refused the pages. */
ferry_err ferry__pool_reserve(ferry__pool *p, uint64_t size, uint32_t count, uint64_t *chunk_bytes);
void ferry__pool_put(ferry__pool *p, uint32_t index);
/* Index of the chunk whose payload starts at ptr, or FERRY__NONE. */
uint32_t ferry__pool_find(const ferry__pool *p, const void *payload);
static inline ferry__chunk_header *ferry__pool_header(const ferry__pool *p, uint32_t index)
{
    return (ferry__chunk_header *)(p->base + p->chunks[index].offset);
}
static inline uint8_t *ferry__pool_payload(const ferry__pool *p, uint32_t index)
{
    return p->base + p->chunks[index].offset + p->payload_offset;
}

#endif
