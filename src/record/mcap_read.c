/*
 * The MCAP reader (mcap.h). The file is one read-only buffer; every record is parsed through a
 * bounded cursor (mcap_codec.h), and a record whose length runs past what is left ends a scan as
 * "truncated" at the top level and is an error inside a chunk, whose records must be whole.
 *
 * What a file can make the reader do is bounded by the file itself: the summary's chunk and
 * metadata indexes are sorted by offset and refused when two overlap (a chunk listed twice would
 * be decompressed twice), schemas and channels are found by id in a table (no walk per record),
 * and a second record with a known id is skipped before anything of it is copied. What it can
 * make the reader hold is counted (kept, an estimate with the allocator's overhead) against
 * FERRY_MCAP_INFO_MAX, the caller's memory_max and, every HEADROOM_STEP, the memory the process
 * may still take.
 */
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
#define FOOTER_SIZE (RECORD_HEAD + 20u)
#define IDS 65536u                        /* schema and channel ids are 16 bits */
#define HEAP_OVERHEAD 16u                 /* what the allocator adds to a block, about */
#define HEADROOM_STEP ((uint64_t)4 << 20) /* growth between two checks of the memory available */
#define SLICE ((size_t)64 << 20)          /* CRC and LZ4 work between two looks at cancel */
#define MIB(n) ((n) >> 20)

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

static ferry_err say(char *why, size_t n, ferry_err err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static ferry_err say(char *why, size_t n, ferry_err err, const char *fmt, ...)
{
    va_list ap;

    if (why != NULL && n > 0) {
        va_start(ap, fmt);
        vsnprintf(why, n, fmt, ap);
        va_end(ap);
    }
    return err;
}

/* Notes why a parse fails (the first reason of a record wins; fault_clear starts a record). */
static void fault(ferry_mcap_reader *r, ferry_err err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fault(ferry_mcap_reader *r, ferry_err err, const char *fmt, ...)
{
    va_list ap;

    if (r->fault != FERRY_OK) return;
    r->fault = err;
    va_start(ap, fmt);
    vsnprintf(r->fault_why, sizeof r->fault_why, fmt, ap);
    va_end(ap);
}

static void fault_clear(ferry_mcap_reader *r)
{
    r->fault = FERRY_OK;
    r->fault_why[0] = '\0';
}

/* The error of a record that failed to parse: what fault noted, else malformed. */
static ferry_err fault_err(const ferry_mcap_reader *r)
{
    return r->fault != FERRY_OK ? r->fault : FERRY_EPROTO;
}

static const char *fault_text(const ferry_mcap_reader *r)
{
    return r->fault != FERRY_OK ? r->fault_why : "malformed";
}

static bool cancelled(const ferry_mcap_reader *r)
{
    return r->cancel != NULL && *r->cancel != 0;
}

/* Whether n more bytes of heap may be held (the chunk buffer's or the description's): within
 * memory_max, and within the memory available, which is read once n, or the growth since the
 * last reading, reaches HEADROOM_STEP (the headroom keeps a margin of 64 MiB or more, so that
 * smaller steps between two readings cannot reach the OOM killer). */
static bool room_for(ferry_mcap_reader *r, uint64_t n, const char *what)
{
    uint64_t held = r->kept + r->ucap;

    if (r->memory_max != 0 && (held > r->memory_max || n > r->memory_max - held)) {
        fault(r, FERRY_ELIMIT, "%s would take the reader over its limit of %" PRIu64 " MiB", what,
              MIB(r->memory_max));
        return false;
    }
    if (n >= HEADROOM_STEP || r->unchecked + n >= HEADROOM_STEP) {
        uint64_t room = ferry__memory_headroom(), want = n >= HEADROOM_STEP ? n : HEADROOM_STEP;

        if (room < want) {
            fault(r, FERRY_ENOMEM,
                  "%s needs %" PRIu64 " MiB more, and this process may take only %" PRIu64
                  " MiB more (the memory available or a memory cgroup's limit)",
                  what, MIB(want + (1u << 20) - 1), MIB(room));
            return false;
        }
        r->unchecked = 0;
    } else {
        r->unchecked += n;
    }
    return true;
}

/* Counts n bytes (one allocation) into the description: within FERRY_MCAP_INFO_MAX and
 * room_for. */
static bool take(ferry_mcap_reader *r, uint64_t n)
{
    n += HEAP_OVERHEAD;
    if (r->kept + n > FERRY_MCAP_INFO_MAX) {
        fault(r, FERRY_ELIMIT,
              "the file's schemas, channels, indexes and metadata need more than %" PRIu64
              " MiB (FERRY_MCAP_INFO_MAX)",
              MIB(FERRY_MCAP_INFO_MAX));
        return false;
    }
    if (!room_for(r, n, "the file's description")) return false;
    r->kept += n;
    return true;
}

static void *take_alloc(ferry_mcap_reader *r, size_t n)
{
    void *p;

    if (!take(r, n)) return NULL;
    p = malloc(n > 0 ? n : 1);
    if (p == NULL) fault(r, FERRY_ENOMEM, "out of memory");
    return p;
}

/* Room for one more element at count (at most max elements). */
static bool grow(ferry_mcap_reader *r, void **p, size_t *cap, size_t count, size_t elem, size_t max,
                 const char *what)
{
    size_t ncap;
    void *q;

    if (count < *cap) return true;
    if (count >= max) {
        fault(r, FERRY_ELIMIT, "more than %zu %s", max, what);
        return false;
    }
    ncap = *cap ? *cap * 2 : 8;
    if (ncap > max) ncap = max;
    if (!take(r, (uint64_t)(ncap - *cap) * elem)) return false;
    q = realloc(*p, ncap * elem);
    if (q == NULL) {
        fault(r, FERRY_ENOMEM, "out of memory");
        return false;
    }
    *p = q;
    *cap = ncap;
    return true;
}

/* A string field of at most max bytes as a NUL-terminated copy; NULL when malformed, too long
 * or out of memory (c->failed set, the reason noted). */
static char *get_str(ferry_mcap_reader *r, ferry__mcap_cur *c, uint32_t max, const char *what)
{
    uint32_t n = ferry__mcap_get_u32(c);
    const uint8_t *p;
    char *s;

    if (c->failed) return NULL;
    if (n > max) {
        fault(r, FERRY_ELIMIT, "%s of %" PRIu32 " bytes, over the limit of %" PRIu32, what, n, max);
        c->failed = true;
        return NULL;
    }
    p = ferry__mcap_get_bytes(c, n);
    if (p == NULL) return NULL;
    s = take_alloc(r, (size_t)n + 1);
    if (s == NULL) {
        c->failed = true;
        return NULL;
    }
    memcpy(s, p, n);
    s[n] = '\0';
    return s;
}

static void free_kv(ferry_mcap_kv *kv, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free((char *)kv[i].key);
        free((char *)kv[i].value);
    }
    free(kv);
}

/* A Map<string, string>. */
static bool get_map(ferry_mcap_reader *r, ferry__mcap_cur *c, ferry_mcap_kv **out, size_t *count)
{
    ferry__mcap_cur m = ferry__mcap_get_len32(c);
    ferry_mcap_kv *kv = NULL;
    size_t n = 0, cap = 0;

    while (!m.failed && m.left > 0) {
        char *k, *v;

        if (!grow(r, (void **)&kv, &cap, n, sizeof *kv, FERRY_MCAP_MAP_MAX, "entries in a map")) {
            m.failed = true;
            break;
        }
        k = get_str(r, &m, FERRY_MCAP_STRING_MAX, "a map key");
        v = get_str(r, &m, FERRY_MCAP_STRING_MAX, "a map value");
        if (k == NULL || v == NULL) {
            free(k);
            free(v);
            m.failed = true;
            break;
        }
        kv[n].key = k;
        kv[n].value = v;
        n++;
    }
    if (m.failed || c->failed) {
        free_kv(kv, n);
        c->failed = true;
        return false;
    }
    *out = kv;
    *count = n;
    return true;
}

static ferry_mcap_channel *find_channel(const ferry_mcap_reader *r, uint16_t id)
{
    uint32_t at = r->channel_at != NULL ? r->channel_at[id] : 0;

    return at != 0 ? &r->info.channels[at - 1] : NULL;
}

static ferry_mcap_schema *find_schema(const ferry_mcap_reader *r, uint16_t id)
{
    uint32_t at = r->schema_at != NULL ? r->schema_at[id] : 0;

    return at != 0 ? &r->info.schemas[at - 1] : NULL;
}

const ferry_mcap_channel *ferry_mcap_reader_channel(const ferry_mcap_reader *r, uint16_t id)
{
    return r != NULL ? find_channel(r, id) : NULL;
}

const ferry_mcap_schema *ferry_mcap_reader_schema(const ferry_mcap_reader *r, uint16_t id)
{
    return r != NULL ? find_schema(r, id) : NULL;
}

const ferry_mcap_info *ferry_mcap_reader_info(const ferry_mcap_reader *r)
{
    return r != NULL ? &r->info : NULL;
}

/* The id table *at (allocated on first use). */
static bool id_table(ferry_mcap_reader *r, uint32_t **at)
{
    if (*at != NULL) return true;
    if (!take(r, IDS * sizeof **at)) return false;
    *at = calloc(IDS, sizeof **at);
    if (*at == NULL) fault(r, FERRY_ENOMEM, "out of memory");
    return *at != NULL;
}

/* Schema and Channel records: a second one with a known id is skipped unread (the summary
 * repeats them). Schema id 0 is invalid and ignored, as the specification says. */
static bool add_schema(ferry_mcap_reader *r, ferry__mcap_cur c)
{
    ferry_mcap_schema s;
    uint32_t n;
    const uint8_t *data;

    memset(&s, 0, sizeof s);
    s.id = ferry__mcap_get_u16(&c);
    if (c.failed) return false;
    if (s.id == 0 || find_schema(r, s.id) != NULL) return true;
    s.name = get_str(r, &c, FERRY_MCAP_NAME_MAX, "a schema name");
    s.encoding = get_str(r, &c, FERRY_MCAP_NAME_MAX, "a schema encoding");
    n = ferry__mcap_get_u32(&c);
    if (!c.failed && n > FERRY_MCAP_SCHEMA_MAX)
        fault(r, FERRY_ELIMIT, "a schema of %" PRIu32 " bytes, over the limit of %" PRIu64, n,
              FERRY_MCAP_SCHEMA_MAX);
    else if ((data = ferry__mcap_get_bytes(&c, n)) != NULL && (s.data = take_alloc(r, n)) != NULL)
        memcpy((uint8_t *)s.data, data, n);
    s.size = n;
    if (s.name != NULL && s.encoding != NULL && s.data != NULL && !c.failed &&
        id_table(r, &r->schema_at) &&
        grow(r, (void **)&r->info.schemas, &r->cap_schemas, r->info.nschemas, sizeof s, IDS,
             "schemas")) {
        r->info.schemas[r->info.nschemas++] = s;
        r->schema_at[s.id] = (uint32_t)r->info.nschemas;
        return true;
    }
    free(s.name);
    free(s.encoding);
    free((uint8_t *)s.data);
    return false;
}

static bool add_channel(ferry_mcap_reader *r, ferry__mcap_cur c)
{
    ferry_mcap_channel ch;

    memset(&ch, 0, sizeof ch);
    ch.id = ferry__mcap_get_u16(&c);
    ch.schema_id = ferry__mcap_get_u16(&c);
    if (c.failed) return false;
    if (find_channel(r, ch.id) != NULL) return true;
    ch.topic = get_str(r, &c, FERRY_MCAP_NAME_MAX, "a topic");
    ch.message_encoding = get_str(r, &c, FERRY_MCAP_NAME_MAX, "a message encoding");
    if (ch.topic != NULL && ch.message_encoding != NULL &&
        get_map(r, &c, &ch.metadata, &ch.nmetadata)) {
        if (id_table(r, &r->channel_at) && grow(r, (void **)&r->info.channels, &r->cap_channels,
                                                r->info.nchannels, sizeof ch, IDS, "channels")) {
            r->info.channels[r->info.nchannels++] = ch;
            r->channel_at[ch.id] = (uint32_t)r->info.nchannels;
            return true;
        }
        free_kv(ch.metadata, ch.nmetadata);
    }
    /* get_map left nothing when it failed. */
    free(ch.topic);
    free(ch.message_encoding);
    return false;
}

static bool add_metadata(ferry_mcap_reader *r, ferry__mcap_cur c)
{
    ferry_mcap_metadata m;

    memset(&m, 0, sizeof m);
    m.name = get_str(r, &c, FERRY_MCAP_NAME_MAX, "a metadata name");
    if (m.name == NULL || !get_map(r, &c, &m.kv, &m.n)) {
        free(m.name);
        return false;
    }
    if (!grow(r, (void **)&r->info.metadata, &r->cap_metadata, r->info.nmetadata, sizeof m,
              FERRY_MCAP_RECORDS_MAX, "metadata records")) {
        free(m.name);
        free_kv(m.kv, m.n);
        return false;
    }
    r->info.metadata[r->info.nmetadata++] = m;
    return true;
}

static bool add_chunk_index(ferry_mcap_reader *r, const ferry_mcap_chunk_index *ci)
{
    if (!grow(r, (void **)&r->info.chunks, &r->cap_chunks, r->info.nchunks, sizeof *ci,
              FERRY_MCAP_RECORDS_MAX, "chunks"))
        return false;
    r->info.chunks[r->info.nchunks++] = *ci;
    return true;
}

static void set_compression(char out[8], const uint8_t *p, uint32_t n)
{
    if (n < 8 && p != NULL) {
        memcpy(out, p, n);
        out[n] = '\0';
        if (n == 0 || strcmp(out, "lz4") == 0 || strcmp(out, "zstd") == 0) return;
    }
    snprintf(out, 8, "?");
}

/* A Chunk's header fields, and its records in memory (decompressed when needed, CRC checked). */
typedef struct chunk_view {
    uint64_t start_time, end_time, usize;
    uint32_t crc;
    char compression[8];
    const uint8_t *records;
    uint64_t records_size;
} chunk_view;

static ferry_err chunk_parse(ferry__mcap_cur c, chunk_view *v)
{
    uint32_t clen;
    const uint8_t *cname;

    v->start_time = ferry__mcap_get_u64(&c);
    v->end_time = ferry__mcap_get_u64(&c);
    v->usize = ferry__mcap_get_u64(&c);
    v->crc = ferry__mcap_get_u32(&c);
    clen = ferry__mcap_get_u32(&c);
    cname = ferry__mcap_get_bytes(&c, clen);
    set_compression(v->compression, cname, clen);
    v->records_size = ferry__mcap_get_u64(&c);
    v->records = ferry__mcap_get_bytes(&c, v->records_size);
    return c.failed ? FERRY_EPROTO : FERRY_OK;
}

/* A buffer of v->usize bytes for the decompressed chunk at off; FERRY_OK with k->cancelled set
 * when the cancel flag stopped it. */
static ferry_err chunk_buffer(walk *k, const chunk_view *v, uint64_t off)
{
    ferry_mcap_reader *r = k->r;
    uint8_t *p;

    if (v->usize > FERRY_MCAP_CHUNK_MAX)
        return say(k->why, k->why_size, FERRY_ELIMIT,
                   "chunk at offset %" PRIu64 ": uncompressed size %" PRIu64
                   " is over the limit of %" PRIu64 " bytes",
                   off, v->usize, FERRY_MCAP_CHUNK_MAX);
    if (v->usize <= r->ucap) return FERRY_OK;
    fault_clear(r);
    if (!room_for(r, v->usize - r->ucap, "its buffer"))
        return say(k->why, k->why_size, r->fault,
                   "chunk at offset %" PRIu64 " (%" PRIu64 " bytes uncompressed): %s", off,
                   v->usize, r->fault_why);
    /* Not realloc: the old contents are not needed, and copying them would touch their pages. */
    free(r->ubuf);
    r->ucap = 0;
    p = malloc((size_t)v->usize);
    r->ubuf = p;
    if (p == NULL)
        return say(k->why, k->why_size, FERRY_ENOMEM,
                   "chunk at offset %" PRIu64 ": out of memory for %" PRIu64 " bytes", off,
                   v->usize);
    r->ucap = (size_t)v->usize;
    /* Its pages, a slice at a time: faulting in a fresh GiB takes seconds on a busy machine,
     * too long for one call that cannot look at the cancel flag. */
    for (size_t at = 0; at < r->ucap && !k->cancelled; at += SLICE) {
        if (cancelled(r))
            k->stopped = k->cancelled = true;
        else
            ferry__prefault_write(p + at, r->ucap - at < SLICE ? r->ucap - at : SLICE);
    }
    return FERRY_OK;
}

/* Decompresses the LZ4 frame of v into ubuf, SLICE bytes of output at a time. */
static ferry_err lz4_load(walk *k, const chunk_view *v, uint64_t off, size_t *n)
{
    ferry_mcap_reader *r = k->r;
    const uint8_t *src = v->records;
    size_t in_left = (size_t)v->records_size, out_done = 0;
    LZ4F_decompressOptions_t opts;

    memset(&opts, 0, sizeof opts);
    opts.stableDst = 1; /* the output stays where it was written: no copy of the window */
    if (r->lz4 == NULL && LZ4F_isError(LZ4F_createDecompressionContext(&r->lz4, LZ4F_VERSION)))
        return say(k->why, k->why_size, FERRY_ENOMEM, "out of memory (lz4)");
    LZ4F_resetDecompressionContext(r->lz4);
    for (;;) {
        size_t room = (size_t)v->usize - out_done, srcn = in_left;
        size_t dst = room < SLICE ? room : SLICE;
        size_t ret;

        if (cancelled(r)) {
            k->stopped = k->cancelled = true;
            return FERRY_OK;
        }
        ret = LZ4F_decompress(r->lz4, r->ubuf + out_done, &dst, src, &srcn, &opts);
        if (LZ4F_isError(ret))
            return say(k->why, k->why_size, FERRY_EPROTO, "chunk at offset %" PRIu64 ": lz4: %s",
                       off, LZ4F_getErrorName(ret));
        out_done += dst;
        src += srcn;
        in_left -= srcn;
        if (ret == 0) break; /* the frame is complete */
        if (dst == 0 && srcn == 0)
            return say(k->why, k->why_size, FERRY_EPROTO,
                       "chunk at offset %" PRIu64 ": lz4 frame incomplete or larger than its "
                       "uncompressed size",
                       off);
    }
    *n = out_done;
    return FERRY_OK;
}

/* Decompresses v's records into ubuf, checks the chunk's CRC, and points v at its records;
 * returns FERRY_OK with k->cancelled set when the cancel flag stopped it. */
static ferry_err chunk_load(walk *k, chunk_view *v, uint64_t off)
{
    ferry_mcap_reader *r = k->r;
    size_t n = 0;
    ferry_err err;

    if (v->compression[0] != '\0' && v->usize == 0) {
        /* Nothing to decompress (and no buffer to decompress into). */
        v->records = (const uint8_t *)"";
        v->records_size = 0;
    } else if (v->compression[0] == '\0') {
        if (v->usize != v->records_size)
            return say(k->why, k->why_size, FERRY_EPROTO,
                       "chunk at offset %" PRIu64 ": uncompressed size %" PRIu64 " but %" PRIu64
                       " bytes of records",
                       off, v->usize, v->records_size);
    } else if (strcmp(v->compression, "lz4") != 0 && strcmp(v->compression, "zstd") != 0) {
        return say(k->why, k->why_size, FERRY_EPROTO,
                   "chunk at offset %" PRIu64 ": unsupported compression", off);
    } else {
        if (strcmp(v->compression, "zstd") == 0) {
            /* A frame that announces more than the chunk does is refused before any memory is
             * taken for it. */
            unsigned long long fcs = ZSTD_getFrameContentSize(v->records, (size_t)v->records_size);

            if (fcs != ZSTD_CONTENTSIZE_UNKNOWN && fcs != ZSTD_CONTENTSIZE_ERROR && fcs > v->usize)
                return say(k->why, k->why_size, FERRY_EPROTO,
                           "chunk at offset %" PRIu64 ": its zstd frame holds %llu bytes, the "
                           "chunk announces %" PRIu64,
                           off, fcs, v->usize);
        }
        err = chunk_buffer(k, v, off);
        if (err != FERRY_OK || k->cancelled) return err;
        if (strcmp(v->compression, "lz4") == 0) {
            err = lz4_load(k, v, off, &n);
            if (err != FERRY_OK || k->cancelled) return err;
        } else {
            /* One call for the whole chunk (at most FERRY_MCAP_CHUNK_MAX, about a second): the
             * streaming interface would need a window buffer of the frame's size besides. */
            if (r->zstd == NULL && (r->zstd = ZSTD_createDCtx()) == NULL)
                return say(k->why, k->why_size, FERRY_ENOMEM, "out of memory (zstd)");
            n = ZSTD_decompressDCtx(r->zstd, r->ubuf, (size_t)v->usize, v->records,
                                    (size_t)v->records_size);
            if (ZSTD_isError(n))
                return say(k->why, k->why_size, FERRY_EPROTO,
                           "chunk at offset %" PRIu64 ": zstd: %s", off, ZSTD_getErrorName(n));
        }
        if (n != v->usize)
            return say(k->why, k->why_size, FERRY_EPROTO,
                       "chunk at offset %" PRIu64 ": %zu bytes decompressed, %" PRIu64 " announced",
                       off, n, v->usize);
        v->records = r->ubuf;
        v->records_size = v->usize;
    }
    if (v->crc != 0) {
        uint32_t crc = 0;

        for (uint64_t at = 0; at < v->records_size; at += SLICE) {
            uint64_t step = v->records_size - at < SLICE ? v->records_size - at : SLICE;

            if (cancelled(r)) {
                k->stopped = k->cancelled = true;
                return FERRY_OK;
            }
            crc = ferry__mcap_crc32(crc, v->records + at, (size_t)step);
        }
        if (crc != v->crc)
            return say(k->why, k->why_size, FERRY_EPROTO,
                       "chunk at offset %" PRIu64 ": CRC mismatch (0x%08" PRIx32
                       " in the file, 0x%08" PRIx32 " computed)",
                       off, v->crc, crc);
    }
    return FERRY_OK;
}

static ferry_err on_message(walk *k, ferry__mcap_cur c, uint64_t off)
{
    ferry_mcap_message m;
    ferry_mcap_channel *ch;

    m.channel_id = ferry__mcap_get_u16(&c);
    m.sequence = ferry__mcap_get_u32(&c);
    m.log_time = ferry__mcap_get_u64(&c);
    m.publish_time = ferry__mcap_get_u64(&c);
    if (c.failed)
        return say(k->why, k->why_size, FERRY_EPROTO,
                   "message at offset %" PRIu64 ": shorter than its fields", off);
    m.data = c.p;
    m.size = c.left;
    if (k->scan) {
        ferry_mcap_info *in = &k->r->info;

        ch = find_channel(k->r, m.channel_id);
        if (ch != NULL) {
            ch->messages++;
            ch->bytes += m.size;
        }
        if (in->message_count == 0 || m.log_time < in->start_time) in->start_time = m.log_time;
        if (m.log_time > in->end_time) in->end_time = m.log_time;
        in->message_count++;
        return FERRY_OK;
    }
    if (m.log_time < k->start || m.log_time > k->end) return FERRY_OK;
    if (!k->fn(k->arg, &m)) k->stopped = true;
    return FERRY_OK;
}

static ferry_err walk_records(walk *k, const uint8_t *p, uint64_t n, uint64_t base,
                              uint64_t chunk_at, bool *truncated, bool *data_end);

static ferry_err on_chunk(walk *k, ferry__mcap_cur c, uint64_t off, uint64_t length)
{
    chunk_view v;
    ferry_err err;

    if (chunk_parse(c, &v) != FERRY_OK)
        return say(k->why, k->why_size, FERRY_EPROTO,
                   "chunk at offset %" PRIu64 ": its fields overrun the record", off);
    if (k->scan) {
        ferry_mcap_chunk_index ci;

        memset(&ci, 0, sizeof ci);
        ci.start_time = v.start_time;
        ci.end_time = v.end_time;
        ci.offset = off;
        ci.length = length;
        ci.compressed_size = v.records_size;
        ci.uncompressed_size = v.usize;
        memcpy(ci.compression, v.compression, sizeof ci.compression);
        fault_clear(k->r);
        if (!add_chunk_index(k->r, &ci))
            return say(k->why, k->why_size, fault_err(k->r), "chunk at offset %" PRIu64 ": %s", off,
                       fault_text(k->r));
    } else if (v.end_time < k->start || v.start_time > k->end) {
        return FERRY_OK;
    }
    err = chunk_load(k, &v, off);
    if (err != FERRY_OK || k->cancelled) return err;
    return walk_records(k, v.records, v.records_size, 0, off, NULL, NULL);
}

/* The records of p[0..n): at the top level (chunk_at UINT64_MAX; base is p's file offset) or
 * inside the chunk at file offset chunk_at (base 0). */
static ferry_err walk_records(walk *k, const uint8_t *p, uint64_t n, uint64_t base,
                              uint64_t chunk_at, bool *truncated, bool *data_end)
{
    bool top = chunk_at == UINT64_MAX;
    uint64_t at = 0;
    char where[64] = "";

    while (at < n && !k->stopped) {
        ferry__mcap_cur h = ferry__mcap_cur_make(p + at, (size_t)(n - at));
        uint8_t op = ferry__mcap_get_u8(&h);
        uint64_t len = ferry__mcap_get_u64(&h);
        ferry__mcap_cur body;
        ferry_err err = FERRY_OK;
        const char *what = NULL;
        bool ok = true;

        if (cancelled(k->r)) {
            k->stopped = k->cancelled = true;
            break;
        }
        if (h.failed || len > h.left) {
            if (top) {
                *truncated = true;
                return FERRY_OK;
            }
            return say(k->why, k->why_size, FERRY_EPROTO,
                       "record at offset %" PRIu64 " of the chunk at offset %" PRIu64
                       " overruns the chunk",
                       at, chunk_at);
        }
        body = ferry__mcap_cur_make(h.p, (size_t)len);
        fault_clear(k->r);
        switch (op) {
        case FERRY_MCAP_OP_SCHEMA:
            what = "schema";
            ok = !k->scan || add_schema(k->r, body);
            break;
        case FERRY_MCAP_OP_CHANNEL:
            what = "channel";
            ok = !k->scan || add_channel(k->r, body);
            break;
        case FERRY_MCAP_OP_MESSAGE:
            err = on_message(k, body, base + at);
            break;
        case FERRY_MCAP_OP_CHUNK:
            if (!top)
                err = say(k->why, k->why_size, FERRY_EPROTO,
                          "a chunk inside the chunk at offset %" PRIu64, chunk_at);
            else
                err = on_chunk(k, body, base + at, RECORD_HEAD + len);
            break;
        case FERRY_MCAP_OP_METADATA:
            what = "metadata";
            ok = !k->scan || !top || add_metadata(k->r, body);
            break;
        case FERRY_MCAP_OP_DATA_END:
            if (top) {
                *data_end = true;
                return FERRY_OK;
            }
            break;
        default: /* message indexes, attachments, unknown opcodes: skipped */
            break;
        }
        if (!ok) {
            if (!top) snprintf(where, sizeof where, " of the chunk at offset %" PRIu64, chunk_at);
            err = say(k->why, k->why_size, fault_err(k->r), "%s at offset %" PRIu64 "%s: %s", what,
                      base + at, where, fault_text(k->r));
        }
        if (err != FERRY_OK) return err;
        at += RECORD_HEAD + len;
    }
    return FERRY_OK;
}

/* A Metadata Index: the offset and length of a Metadata record. */
typedef struct span {
    uint64_t offset, length;
} span;

static int span_order(const void *a, const void *b)
{
    uint64_t x = ((const span *)a)->offset, y = ((const span *)b)->offset;

    return x < y ? -1 : x > y;
}

static int chunk_order(const void *a, const void *b)
{
    uint64_t x = ((const ferry_mcap_chunk_index *)a)->offset;
    uint64_t y = ((const ferry_mcap_chunk_index *)b)->offset;

    return x < y ? -1 : x > y;
}

/* Whether the record at b (sorted after a) starts inside a: a record listed twice, or two that
 * overlap, would be read twice. */
static bool overlap(const char *what, uint64_t a_offset, uint64_t a_length, uint64_t b_offset,
                    char *why, size_t why_size)
{
    if (b_offset >= a_offset + a_length) return false;
    if (b_offset == a_offset)
        say(why, why_size, FERRY_EPROTO, "its %s indexes list the %s at offset %" PRIu64 " twice",
            what, what, a_offset);
    else
        say(why, why_size, FERRY_EPROTO,
            "its %s indexes overlap: the %s at offset %" PRIu64 " (%" PRIu64
            " bytes) and the one at offset %" PRIu64,
            what, what, a_offset, a_length, b_offset);
    return true;
}

/* Reads the summary section; false (after setting why) when it cannot be trusted. */
static bool read_summary(ferry_mcap_reader *r, uint64_t from, uint64_t to, char *why,
                         size_t why_size)
{
    uint64_t at = from;
    bool have_stats = false, ok = true;
    ferry__mcap_cur counts = ferry__mcap_cur_make(NULL, 0);
    span *meta = NULL;
    size_t nmeta = 0, cap_meta = 0;

    while (at < to && ok) {
        ferry__mcap_cur h = ferry__mcap_cur_make(r->base + at, (size_t)(to - at));
        uint8_t op = ferry__mcap_get_u8(&h);
        uint64_t len = ferry__mcap_get_u64(&h);
        ferry__mcap_cur c;

        if (cancelled(r)) {
            say(why, why_size, FERRY_ESYS, "interrupted");
            ok = false;
            break;
        }
        if (h.failed || len > h.left) {
            say(why, why_size, FERRY_EPROTO,
                "summary record at offset %" PRIu64 " overruns the summary", at);
            ok = false;
            break;
        }
        c = ferry__mcap_cur_make(h.p, (size_t)len);
        fault_clear(r);
        switch (op) {
        case FERRY_MCAP_OP_SCHEMA:
            ok = add_schema(r, c);
            break;
        case FERRY_MCAP_OP_CHANNEL:
            ok = add_channel(r, c);
            break;
        case FERRY_MCAP_OP_STATISTICS: {
            ferry__mcap_cur m;

            r->info.message_count = ferry__mcap_get_u64(&c);
            (void)ferry__mcap_get_u16(&c); /* schemas */
            (void)ferry__mcap_get_u32(&c); /* channels */
            (void)ferry__mcap_get_u32(&c); /* attachments */
            (void)ferry__mcap_get_u32(&c); /* metadata */
            r->info.chunk_count = ferry__mcap_get_u32(&c);
            r->info.start_time = ferry__mcap_get_u64(&c);
            r->info.end_time = ferry__mcap_get_u64(&c);
            m = ferry__mcap_get_len32(&c);
            ok = !c.failed && !m.failed && m.left % 10 == 0;
            have_stats = ok;
            counts = m; /* applied once every channel of the summary is known */
            break;
        }
        case FERRY_MCAP_OP_CHUNK_INDEX: {
            ferry_mcap_chunk_index ci;
            ferry__mcap_cur m;
            uint32_t clen;
            const uint8_t *cname;

            memset(&ci, 0, sizeof ci);
            ci.start_time = ferry__mcap_get_u64(&c);
            ci.end_time = ferry__mcap_get_u64(&c);
            ci.offset = ferry__mcap_get_u64(&c);
            ci.length = ferry__mcap_get_u64(&c);
            m = ferry__mcap_get_len32(&c); /* message index offsets: not needed */
            (void)m;
            (void)ferry__mcap_get_u64(&c); /* message index length */
            clen = ferry__mcap_get_u32(&c);
            cname = ferry__mcap_get_bytes(&c, clen);
            set_compression(ci.compression, cname, clen);
            ci.compressed_size = ferry__mcap_get_u64(&c);
            ci.uncompressed_size = ferry__mcap_get_u64(&c);
            if (!c.failed && !(ci.offset >= r->data_start && ci.length >= RECORD_HEAD &&
                               ci.offset <= r->data_end && ci.length <= r->data_end - ci.offset &&
                               ci.compressed_size < ci.length))
                fault(r, FERRY_EPROTO,
                      "a chunk index (offset %" PRIu64 ", %" PRIu64
                      " bytes) points outside the data section",
                      ci.offset, ci.length);
            ok = !c.failed && r->fault == FERRY_OK && add_chunk_index(r, &ci);
            break;
        }
        case FERRY_MCAP_OP_METADATA_INDEX: {
            span s;

            s.offset = ferry__mcap_get_u64(&c);
            s.length = ferry__mcap_get_u64(&c);
            if (!c.failed && !(s.offset >= r->data_start && s.length >= RECORD_HEAD &&
                               s.offset <= r->data_end && s.length <= r->data_end - s.offset))
                fault(r, FERRY_EPROTO,
                      "a metadata index (offset %" PRIu64 ", %" PRIu64
                      " bytes) points outside the data section",
                      s.offset, s.length);
            ok = !c.failed && r->fault == FERRY_OK &&
                 grow(r, (void **)&meta, &cap_meta, nmeta, sizeof s, FERRY_MCAP_RECORDS_MAX,
                      "metadata records");
            if (ok) meta[nmeta++] = s;
            break;
        }
        default:
            break;
        }
        if (!ok)
            say(why, why_size, fault_err(r), "summary record 0x%02x at offset %" PRIu64 ": %s", op,
                at, fault_text(r));
        at += RECORD_HEAD + len;
    }
    if (ok && !have_stats) {
        say(why, why_size, FERRY_EPROTO, "the summary has no statistics");
        ok = false;
    }
    /* In file order, each record once. */
    if (ok) {
        ferry_mcap_chunk_index *ci = r->info.chunks;

        if (r->info.nchunks > 1) qsort(ci, r->info.nchunks, sizeof *ci, chunk_order);
        for (size_t i = 1; ok && i < r->info.nchunks; i++)
            ok = !overlap("chunk", ci[i - 1].offset, ci[i - 1].length, ci[i].offset, why, why_size);
        if (nmeta > 1) qsort(meta, nmeta, sizeof *meta, span_order);
        for (size_t i = 1; ok && i < nmeta; i++)
            ok = !overlap("metadata", meta[i - 1].offset, meta[i - 1].length, meta[i].offset, why,
                          why_size);
    }
    for (size_t i = 0; ok && i < nmeta; i++) {
        ferry__mcap_cur mh = ferry__mcap_cur_make(r->base + meta[i].offset, (size_t)meta[i].length);
        uint8_t mop = ferry__mcap_get_u8(&mh);
        uint64_t ml = ferry__mcap_get_u64(&mh);

        fault_clear(r);
        ok = !cancelled(r) && mop == FERRY_MCAP_OP_METADATA && ml == meta[i].length - RECORD_HEAD &&
             add_metadata(r, ferry__mcap_cur_make(mh.p, (size_t)ml));
        if (!ok)
            say(why, why_size, fault_err(r), "the metadata index of offset %" PRIu64 ": %s",
                meta[i].offset, cancelled(r) ? "interrupted" : fault_text(r));
    }
    free(meta);
    while (ok && counts.left > 0) {
        uint16_t id = ferry__mcap_get_u16(&counts);
        uint64_t count = ferry__mcap_get_u64(&counts);
        ferry_mcap_channel *ch = find_channel(r, id);

        if (ch != NULL) ch->messages = count;
    }
    return ok;
}

static void info_reset(ferry_mcap_reader *r)
{
    ferry_mcap_info *in = &r->info;

    for (size_t i = 0; i < in->nschemas; i++) {
        free(in->schemas[i].name);
        free(in->schemas[i].encoding);
        free((uint8_t *)in->schemas[i].data);
    }
    for (size_t i = 0; i < in->nchannels; i++) {
        free(in->channels[i].topic);
        free(in->channels[i].message_encoding);
        free_kv(in->channels[i].metadata, in->channels[i].nmetadata);
    }
    for (size_t i = 0; i < in->nmetadata; i++) {
        free(in->metadata[i].name);
        free_kv(in->metadata[i].kv, in->metadata[i].n);
    }
    free(in->schemas);
    free(in->channels);
    free(in->chunks);
    free(in->metadata);
    free(r->schema_at);
    free(r->channel_at);
    r->schema_at = r->channel_at = NULL;
    in->schemas = NULL;
    in->channels = NULL;
    in->chunks = NULL;
    in->metadata = NULL;
    in->nschemas = in->nchannels = in->nchunks = in->nmetadata = 0;
    r->cap_schemas = r->cap_channels = r->cap_chunks = r->cap_metadata = 0;
    in->message_count = in->start_time = in->end_time = 0;
    in->chunk_count = 0;
    r->kept = 0; /* what is left (the profile and library) is under a few KiB */
}

static ferry_err open_buffer(ferry_mcap_reader *r, char *why, size_t why_size)
{
    ferry__mcap_cur c = ferry__mcap_cur_make(r->base, r->size);
    const uint8_t *magic = ferry__mcap_get_bytes(&c, FERRY_MCAP_MAGIC_SIZE);
    uint8_t op;
    uint64_t len, footer_at;
    bool footer = false, truncated = false, data_end = false;
    char *summary_why = r->info.summary_ignored;
    size_t summary_why_size = sizeof r->info.summary_ignored;
    ferry_err err;
    walk k;

    r->info.file_size = r->size;
    if (magic == NULL || memcmp(magic, FERRY_MCAP_MAGIC, FERRY_MCAP_MAGIC_SIZE) != 0)
        return say(why, why_size, FERRY_EPROTO, "not an MCAP file (no magic at its start)");
    op = ferry__mcap_get_u8(&c);
    len = ferry__mcap_get_u64(&c);
    if (c.failed || op != FERRY_MCAP_OP_HEADER || len > c.left)
        return say(why, why_size, FERRY_EPROTO, "no complete Header record after the magic");
    {
        ferry__mcap_cur h = ferry__mcap_cur_make(c.p, (size_t)len);

        r->info.profile = get_str(r, &h, FERRY_MCAP_NAME_MAX, "the profile");
        r->info.library = get_str(r, &h, FERRY_MCAP_NAME_MAX, "the library");
        if (h.failed)
            return say(why, why_size, fault_err(r), "the Header record: %s", fault_text(r));
    }
    r->data_start = FERRY_MCAP_MAGIC_SIZE + RECORD_HEAD + len;
    r->data_end = r->size;

    /* The footer, and the summary it points at. */
    if (r->size >= r->data_start + FOOTER_SIZE + FERRY_MCAP_MAGIC_SIZE &&
        memcmp(r->base + r->size - FERRY_MCAP_MAGIC_SIZE, FERRY_MCAP_MAGIC,
               FERRY_MCAP_MAGIC_SIZE) == 0) {
        ferry__mcap_cur f;
        uint64_t summary_start, offsets_start;
        uint32_t crc;

        footer_at = r->size - FERRY_MCAP_MAGIC_SIZE - FOOTER_SIZE;
        f = ferry__mcap_cur_make(r->base + footer_at, FOOTER_SIZE);
        op = ferry__mcap_get_u8(&f);
        len = ferry__mcap_get_u64(&f);
        summary_start = ferry__mcap_get_u64(&f);
        offsets_start = ferry__mcap_get_u64(&f);
        crc = ferry__mcap_get_u32(&f);
        if (op == FERRY_MCAP_OP_FOOTER && len == 20) {
            footer = true;
            if (summary_start != 0 && summary_start >= r->data_start &&
                summary_start <= footer_at && offsets_start <= footer_at &&
                (offsets_start == 0 || offsets_start >= summary_start)) {
                uint64_t to = offsets_start != 0 ? offsets_start : footer_at;
                uint32_t got = 0;

                if (crc != 0) {
                    got = ferry__mcap_crc32(0, r->base + summary_start,
                                            (size_t)(footer_at + RECORD_HEAD + 16 - summary_start));
                }
                r->data_end = summary_start;
                if (crc != 0 && got != crc)
                    snprintf(summary_why, summary_why_size, "its CRC does not match");
                else if (read_summary(r, summary_start, to, summary_why, summary_why_size))
                    r->info.has_summary = true;
                if (!r->info.has_summary) info_reset(r);
            } else if (summary_start != 0) {
                snprintf(summary_why, summary_why_size, "the footer's summary offset is bad");
            }
            if (!r->info.has_summary) r->data_end = footer_at;
        }
    }
    r->info.truncated = !footer;
    if (r->info.has_summary) {
        summary_why[0] = '\0';
        if (r->info.chunk_count == 0) r->info.chunk_count = (uint32_t)r->info.nchunks;
        return FERRY_OK;
    }

    /* No summary to trust: scan the data section. */
    memset(&k, 0, sizeof k);
    k.r = r;
    k.scan = true;
    k.why = why;
    k.why_size = why_size;
    err = walk_records(&k, r->base + r->data_start, r->data_end - r->data_start, r->data_start,
                       UINT64_MAX, &truncated, &data_end);
    if (err != FERRY_OK) return err;
    if (k.cancelled) {
        errno = EINTR;
        return say(why, why_size, FERRY_ESYS, "interrupted");
    }
    if (truncated || !data_end) r->info.truncated = true;
    r->info.chunk_count = (uint32_t)r->info.nchunks;
    return FERRY_OK;
}

ferry_err ferry_mcap_reader_open_mem_with(ferry_mcap_reader **out, const void *data, size_t size,
                                          const ferry_mcap_reader_options *o, char *why,
                                          size_t why_size)
{
    ferry_mcap_reader *r;
    ferry_err err;

    if (out == NULL || (data == NULL && size > 0))
        return say(why, why_size, FERRY_EINVAL, "invalid argument");
    r = calloc(1, sizeof *r);
    if (r == NULL) return say(why, why_size, FERRY_ENOMEM, "out of memory");
    r->base = data;
    r->size = size;
    if (o != NULL) {
        r->cancel = o->cancel;
        r->memory_max = o->memory_max;
    }
    err = open_buffer(r, why, why_size);
    if (err != FERRY_OK) {
        int e = errno;

        ferry_mcap_reader_close(r);
        errno = e;
        return err;
    }
    *out = r;
    return FERRY_OK;
}

ferry_err ferry_mcap_reader_open_mem(ferry_mcap_reader **out, const void *data, size_t size,
                                     char *why, size_t why_size)
{
    return ferry_mcap_reader_open_mem_with(out, data, size, NULL, why, why_size);
}

ferry_err ferry_mcap_reader_open_with(ferry_mcap_reader **out, const char *path,
                                      const ferry_mcap_reader_options *o, char *why,
                                      size_t why_size)
{
    struct stat st;
    void *map = NULL;
    int fd;
    ferry_err err;

    if (out == NULL || path == NULL) return say(why, why_size, FERRY_EINVAL, "invalid argument");
    /* O_NONBLOCK: a FIFO named as the file must not block the open. */
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return say(why, why_size, FERRY_ESYS, "%s", strerror(errno));
    if (fstat(fd, &st) != 0) {
        int e = errno;

        close(fd);
        errno = e;
        return say(why, why_size, FERRY_ESYS, "%s", strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return say(why, why_size, FERRY_EPROTO, "not a regular file");
    }
    if (st.st_size > 0) {
        map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            int e = errno;

            close(fd);
            errno = e;
            return say(why, why_size, FERRY_ESYS, "mmap: %s", strerror(e));
        }
        madvise(map, (size_t)st.st_size, MADV_SEQUENTIAL);
    }
    close(fd);
    err = ferry_mcap_reader_open_mem_with(out, map, (size_t)st.st_size, o, why, why_size);
    if (err != FERRY_OK) {
        int e = errno;

        if (map != NULL) munmap(map, (size_t)st.st_size);
        errno = e;
        return err;
    }
    (*out)->map = map;
    (*out)->map_size = (size_t)st.st_size;
    return FERRY_OK;
}

ferry_err ferry_mcap_reader_open(ferry_mcap_reader **out, const char *path, char *why,
                                 size_t why_size)
{
    return ferry_mcap_reader_open_with(out, path, NULL, why, why_size);
}

void ferry_mcap_reader_set_cancel(ferry_mcap_reader *r, const volatile sig_atomic_t *cancel)
{
    if (r != NULL) r->cancel = cancel;
}

void ferry_mcap_reader_close(ferry_mcap_reader *r)
{
    if (r == NULL) return;
    info_reset(r);
    free(r->info.profile);
    free(r->info.library);
    free(r->ubuf);
    if (r->lz4 != NULL) LZ4F_freeDecompressionContext(r->lz4);
    ZSTD_freeDCtx(r->zstd);
    if (r->map != NULL) munmap(r->map, r->map_size);
    free(r);
}

ferry_err ferry_mcap_reader_messages(ferry_mcap_reader *r, uint64_t start, uint64_t end,
                                     ferry_mcap_message_fn fn, void *arg, char *why,
                                     size_t why_size)
{
    bool truncated = false, data_end = false;
    walk k;

    if (r == NULL || fn == NULL) return say(why, why_size, FERRY_EINVAL, "invalid argument");
    memset(&k, 0, sizeof k);
    k.r = r;
    k.start = start;
    k.end = end;
    k.fn = fn;
    k.arg = arg;
    k.why = why;
    k.why_size = why_size;
    if (!r->info.has_summary || r->info.nchunks == 0)
        return walk_records(&k, r->base + r->data_start, r->data_end - r->data_start, r->data_start,
                            UINT64_MAX, &truncated, &data_end);
    /* Seek through the chunk indexes, which read_summary checked against the data section and
     * sorted by offset, none overlapping another; the record there must be the chunk the index
     * says. */
    for (size_t i = 0; i < r->info.nchunks && !k.stopped && !cancelled(r); i++) {
        const ferry_mcap_chunk_index *ci = &r->info.chunks[i];
        ferry__mcap_cur h;
        uint8_t op;
        uint64_t len;
        ferry_err err;

        if (ci->end_time < start || ci->start_time > end) continue;
        h = ferry__mcap_cur_make(r->base + ci->offset, (size_t)ci->length);
        op = ferry__mcap_get_u8(&h);
        len = ferry__mcap_get_u64(&h);
        if (h.failed || op != FERRY_MCAP_OP_CHUNK || len != ci->length - RECORD_HEAD)
            return say(why, why_size, FERRY_EPROTO,
                       "chunk index %zu points at offset %" PRIu64 ", where no such chunk is", i,
                       ci->offset);
        err = on_chunk(&k, ferry__mcap_cur_make(h.p, (size_t)len), ci->offset, ci->length);
        if (err != FERRY_OK) return err;
    }
    return FERRY_OK;
}
