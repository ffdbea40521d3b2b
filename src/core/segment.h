/*
 * The data segment's layout: a publisher's pool as its subscribers map it (read-only), with the
 * chunk table and the header at the start of every chunk. Everything in it is written by the
 * publisher alone and checked by every subscriber before use.
 */
#ifndef FERRY_SEGMENT_H
#define FERRY_SEGMENT_H

#include <stdint.h>

#define FERRY__DATA_MAGIC 0x5441445952524546ULL /* "FERRYDAT" */

typedef struct ferry__data_header {
    uint64_t magic;
    uint32_t version;
    uint32_t header_size;
    uint64_t segment_size;   /* bytes of the memfd (the byte cap plus header and table) */
    uint64_t table_offset;   /* ferry__chunk_entry[max_chunks] */
    uint64_t arena_offset;   /* first chunk; page aligned */
    uint64_t payload_offset; /* from a chunk's start to its payload */
    uint64_t publisher_id;
    uint32_t max_chunks;
    uint32_t reserved;
} ferry__data_header;

/* Written once, when the chunk is carved, before it is ever delivered. */
typedef struct ferry__chunk_entry {
    uint64_t offset;   /* chunk start, page aligned */
    uint64_t capacity; /* payload bytes */
} ferry__chunk_entry;

/* At the start of every chunk; rewritten by the publisher for each loan. */
typedef struct ferry__chunk_header {
    uint64_t size;
    uint64_t sequence;
    int64_t publish_ns;
    uint64_t publisher_id;
    uint32_t index;
    uint32_t generation;
    uint64_t reserved[3];
} ferry__chunk_header;

#endif
