/*
 * What the files of the MCAP reader share (mcap_read.c, mcap_read_info.c, mcap_read_records.c,
 * mcap_read_summary.c): the reader's state, a pass over records, and the helpers each part calls
 * in another. Private to src/record/. A reader is used by one thread at a time (mcap.h); only its
 * cancel flag may change meanwhile, set from a signal handler.
 */
#ifndef FERRY_MCAP_READ_H
#define FERRY_MCAP_READ_H

#include "mcap.h"
#include "mcap_codec.h"
#include "platform/platform.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <lz4frame.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#define RECORD_HEAD 9u /* opcode and length */

struct ferry_mcap_reader {
    const uint8_t *base;
    size_t size;
    void *map;
    size_t map_size;
    ferry_mcap_info info;
    uint64_t data_start, data_end; /* the data section's records: [data_start, data_end) */
    uint8_t *ubuf;                 /* a decompressed chunk */
    size_t ucap;
    LZ4F_dctx *lz4;
    ZSTD_DCtx *zstd;
    size_t cap_schemas, cap_channels, cap_chunks, cap_metadata;
    uint32_t *schema_at, *channel_at; /* by id: 1 + the index in info.schemas / channels, 0 none */
    const volatile sig_atomic_t *cancel;
    uint64_t memory_max;
    uint64_t kept;      /* heap the description holds */
    uint64_t unchecked; /* growth since the memory available was last checked */
    /* Why the last record that failed to parse failed, when more is known than "malformed". */
    ferry_err fault;
    char fault_why[128];
};

/* One pass over records: scanning (registering schemas and channels, counting), or handing
 * messages to fn. */
typedef struct walk {
    ferry_mcap_reader *r;
    bool scan;
    uint64_t start, end;
    ferry_mcap_message_fn fn;
    void *arg;
    bool stopped;   /* fn returned false, or cancelled */
    bool cancelled; /* the cancel flag was seen */
    char *why;
    size_t why_size;
} walk;

/* ---- why a record failed (mcap_read.c, mcap_read_info.c) ------------------------------------- */

/* Writes the message into why (when there is room for one) and returns err. */
ferry_err ferry__mcap_say(char *why, size_t n, ferry_err err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Notes why a parse fails (the first reason of a record wins; ferry__mcap_fault_clear starts a
 * record). */
void ferry__mcap_fault(ferry_mcap_reader *r, ferry_err err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static inline void ferry__mcap_fault_clear(ferry_mcap_reader *r)
{
    r->fault = FERRY_OK;
    r->fault_why[0] = '\0';
}

/* The error of a record that failed to parse: what ferry__mcap_fault noted, else malformed. */
static inline ferry_err ferry__mcap_fault_err(const ferry_mcap_reader *r)
{
    return r->fault != FERRY_OK ? r->fault : FERRY_EPROTO;
}

static inline const char *ferry__mcap_fault_text(const ferry_mcap_reader *r)
{
    return r->fault != FERRY_OK ? r->fault_why : "malformed";
}

static inline bool ferry__mcap_cancelled(const ferry_mcap_reader *r)
{
    return r->cancel != NULL && *r->cancel != 0;
}

/* ---- the description (mcap_read_info.c) ------------------------------------------------------ */

/* Whether n more bytes of heap may be held (the chunk buffer's or the description's): within
 * memory_max, and within the memory available, which is read once n, or the growth since the
 * last reading, reaches HEADROOM_STEP (the headroom keeps a margin of 64 MiB or more, so that
 * smaller steps between two readings cannot reach the OOM killer). */
bool ferry__mcap_room_for(ferry_mcap_reader *r, uint64_t n, const char *what);

/* Room for one more element at count (at most max elements). */
bool ferry__mcap_grow(ferry_mcap_reader *r, void **p, size_t *cap, size_t count, size_t elem,
                      size_t max, const char *what);

/* A string field of at most max bytes as a NUL-terminated copy; NULL when malformed, too long
 * or out of memory (c->failed set, the reason noted). */
char *ferry__mcap_get_str(ferry_mcap_reader *r, ferry__mcap_cur *c, uint32_t max, const char *what);

static inline ferry_mcap_channel *ferry__mcap_find_channel(const ferry_mcap_reader *r, uint16_t id)
{
    uint32_t at = r->channel_at != NULL ? r->channel_at[id] : 0;

    return at != 0 ? &r->info.channels[at - 1] : NULL;
}

/* Schema and Channel records: a second one with a known id is skipped unread (the summary
 * repeats them). Schema id 0 is invalid and ignored, as the specification says. */
bool ferry__mcap_add_schema(ferry_mcap_reader *r, ferry__mcap_cur c);
bool ferry__mcap_add_channel(ferry_mcap_reader *r, ferry__mcap_cur c);

/* A Metadata record, and a chunk index (from the summary, or a chunk met by a scan). */
bool ferry__mcap_add_metadata(ferry_mcap_reader *r, ferry__mcap_cur c);
bool ferry__mcap_add_chunk_index(ferry_mcap_reader *r, const ferry_mcap_chunk_index *ci);

/* Frees what the description holds (the profile and library stay). */
void ferry__mcap_info_reset(ferry_mcap_reader *r);

/* ---- records (mcap_read_records.c) and the summary (mcap_read_summary.c) --------------------- */

/* The compression name of a chunk (p[0..n)): "", "lz4", "zstd", or "?" for any other. */
void ferry__mcap_set_compression(char out[8], const uint8_t *p, uint32_t n);

/* The records of p[0..n): at the top level (chunk_at UINT64_MAX; base is p's file offset) or
 * inside the chunk at file offset chunk_at (base 0). */
ferry_err ferry__mcap_walk_records(walk *k, const uint8_t *p, uint64_t n, uint64_t base,
                                   uint64_t chunk_at, bool *truncated, bool *data_end);

/* The Chunk record c at file offset off (length bytes in all), scanned or read. */
ferry_err ferry__mcap_on_chunk(walk *k, ferry__mcap_cur c, uint64_t off, uint64_t length);

/* Reads the summary section; false (after setting why) when it cannot be trusted. */
bool ferry__mcap_read_summary(ferry_mcap_reader *r, uint64_t from, uint64_t to, char *why,
                              size_t why_size);

#endif
