/*
 * The MCAP reader (mcap.h). The file is one read-only buffer; every record is parsed through a
 * bounded cursor (mcap_codec.h), and a record whose length runs past what is left ends a scan as
 * "truncated" at the top level and is an error inside a chunk, whose records must be whole.
 */
#include "mcap.h"
#include "mcap_codec.h"

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
#define MAP_ENTRIES_MAX 4096u

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
};

/* One pass over records: scanning (registering schemas and channels, counting), or handing
 * messages to fn. */
typedef struct walk {
    ferry_mcap_reader *r;
    bool scan;
    uint64_t start, end;
    ferry_mcap_message_fn fn;
    void *arg;
    bool stopped;
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

static bool grow(void **p, size_t *cap, size_t count, size_t elem)
{
    size_t ncap;
    void *q;

    if (count < *cap) return true;
    if (count >= FERRY_MCAP_RECORDS_MAX) return false;
    ncap = *cap ? *cap * 2 : 8;
    q = realloc(*p, ncap * elem);
    if (q == NULL) return false;
    *p = q;
    *cap = ncap;
    return true;
}

/* A string field as a NUL-terminated copy; NULL when malformed, too long or out of memory. */
static char *get_str(ferry__mcap_cur *c)
{
    uint32_t n = ferry__mcap_get_u32(c);
    const uint8_t *p;
    char *s;

    if (n > FERRY_MCAP_STRING_MAX) {
        c->failed = true;
        return NULL;
    }
    p = ferry__mcap_get_bytes(c, n);
    if (p == NULL) return NULL;
    s = malloc((size_t)n + 1);
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
static bool get_map(ferry__mcap_cur *c, ferry_mcap_kv **out, size_t *count)
{
    ferry__mcap_cur m = ferry__mcap_get_len32(c);
    ferry_mcap_kv *kv = NULL;
    size_t n = 0, cap = 0;

    while (!m.failed && m.left > 0) {
        char *k, *v;

        if (n == MAP_ENTRIES_MAX || !grow((void **)&kv, &cap, n, sizeof *kv)) {
            m.failed = true;
            break;
        }
        k = get_str(&m);
        v = get_str(&m);
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
    for (size_t i = 0; i < r->info.nchannels; i++)
        if (r->info.channels[i].id == id) return &r->info.channels[i];
    return NULL;
}

static ferry_mcap_schema *find_schema(const ferry_mcap_reader *r, uint16_t id)
{
    for (size_t i = 0; i < r->info.nschemas; i++)
        if (r->info.schemas[i].id == id) return &r->info.schemas[i];
    return NULL;
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

/* Schema and Channel records: a second one with a known id is ignored (the summary repeats
 * them). Schema id 0 is invalid and ignored, as the specification says. */
static bool add_schema(ferry_mcap_reader *r, ferry__mcap_cur c)
{
    ferry_mcap_schema s;
    uint32_t n;
    bool ok;

    memset(&s, 0, sizeof s);
    s.id = ferry__mcap_get_u16(&c);
    s.name = get_str(&c);
    s.encoding = get_str(&c);
    n = ferry__mcap_get_u32(&c);
    s.data = ferry__mcap_get_bytes(&c, n);
    s.size = n;
    ok = !c.failed && s.name != NULL && s.encoding != NULL;
    if (ok && s.id != 0 && find_schema(r, s.id) == NULL) {
        if (grow((void **)&r->info.schemas, &r->cap_schemas, r->info.nschemas, sizeof s)) {
            r->info.schemas[r->info.nschemas++] = s;
            return true;
        }
        ok = false;
    }
    /* Malformed, ignored (id 0 or known) or no memory: what was read goes. */
    free(s.name);
    free(s.encoding);
    return ok;
}

static bool add_channel(ferry_mcap_reader *r, ferry__mcap_cur c)
{
    ferry_mcap_channel ch;
    bool ok;

    memset(&ch, 0, sizeof ch);
    ch.id = ferry__mcap_get_u16(&c);
    ch.schema_id = ferry__mcap_get_u16(&c);
    ch.topic = get_str(&c);
    ch.message_encoding = get_str(&c);
    ok = !c.failed && ch.topic != NULL && ch.message_encoding != NULL &&
         get_map(&c, &ch.metadata, &ch.nmetadata);
    if (ok && find_channel(r, ch.id) == NULL) {
        if (grow((void **)&r->info.channels, &r->cap_channels, r->info.nchannels, sizeof ch)) {
            r->info.channels[r->info.nchannels++] = ch;
            return true;
        }
        ok = false;
    }
    /* Malformed, known already or no memory: what was read goes (get_map left nothing when it
     * failed). */
    free(ch.topic);
    free(ch.message_encoding);
    free_kv(ch.metadata, ch.nmetadata);
    return ok;
}

static bool add_metadata(ferry_mcap_reader *r, ferry__mcap_cur c)
{
    ferry_mcap_metadata m;

    memset(&m, 0, sizeof m);
    m.name = get_str(&c);
    if (m.name == NULL || !get_map(&c, &m.kv, &m.n)) {
        free(m.name);
        return false;
    }
    if (!grow((void **)&r->info.metadata, &r->cap_metadata, r->info.nmetadata, sizeof m)) {
        free(m.name);
        free_kv(m.kv, m.n);
        return false;
    }
    r->info.metadata[r->info.nmetadata++] = m;
    return true;
}

static bool add_chunk_index(ferry_mcap_reader *r, const ferry_mcap_chunk_index *ci)
{
    if (!grow((void **)&r->info.chunks, &r->cap_chunks, r->info.nchunks, sizeof *ci)) return false;
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

static ferry_err chunk_load(ferry_mcap_reader *r, chunk_view *v, uint64_t off, char *why,
                            size_t why_size)
{
    const uint8_t *src = v->records;
    size_t n;

    if (v->compression[0] != '\0' && v->usize == 0) {
        /* Nothing to decompress (and no buffer to decompress into). */
        v->records = (const uint8_t *)"";
        v->records_size = 0;
    } else if (v->compression[0] == '\0') {
        if (v->usize != v->records_size)
            return say(why, why_size, FERRY_EPROTO,
                       "chunk at offset %" PRIu64 ": uncompressed size %" PRIu64
                       " but %" PRIu64 " bytes of records",
                       off, v->usize, v->records_size);
    } else {
        if (v->usize > FERRY_MCAP_CHUNK_MAX)
            return say(why, why_size, FERRY_EPROTO,
                       "chunk at offset %" PRIu64 ": uncompressed size %" PRIu64
                       " is over the limit of %" PRIu64 " bytes",
                       off, v->usize, FERRY_MCAP_CHUNK_MAX);
        if (v->usize > r->ucap) {
            uint8_t *p = realloc(r->ubuf, (size_t)v->usize);

            if (p == NULL) return say(why, why_size, FERRY_ENOMEM, "out of memory for a chunk");
            r->ubuf = p;
            r->ucap = (size_t)v->usize;
        }
        if (strcmp(v->compression, "lz4") == 0) {
            size_t in_left = (size_t)v->records_size, out_done = 0;

            if (r->lz4 == NULL &&
                LZ4F_isError(LZ4F_createDecompressionContext(&r->lz4, LZ4F_VERSION)))
                return say(why, why_size, FERRY_ENOMEM, "out of memory (lz4)");
            LZ4F_resetDecompressionContext(r->lz4);
            for (;;) {
                size_t dst = (size_t)v->usize - out_done, srcn = in_left;
                size_t ret = LZ4F_decompress(r->lz4, r->ubuf + out_done, &dst, src, &srcn, NULL);

                if (LZ4F_isError(ret))
                    return say(why, why_size, FERRY_EPROTO,
                               "chunk at offset %" PRIu64 ": lz4: %s", off,
                               LZ4F_getErrorName(ret));
                out_done += dst;
                src += srcn;
                in_left -= srcn;
                if (ret == 0) break; /* the frame is complete */
                if (dst == 0 && srcn == 0)
                    return say(why, why_size, FERRY_EPROTO,
                               "chunk at offset %" PRIu64 ": lz4 frame incomplete or larger "
                               "than its uncompressed size",
                               off);
            }
            n = out_done;
        } else if (strcmp(v->compression, "zstd") == 0) {
            if (r->zstd == NULL && (r->zstd = ZSTD_createDCtx()) == NULL)
                return say(why, why_size, FERRY_ENOMEM, "out of memory (zstd)");
            n = ZSTD_decompressDCtx(r->zstd, r->ubuf, (size_t)v->usize, src,
                                    (size_t)v->records_size);
            if (ZSTD_isError(n))
                return say(why, why_size, FERRY_EPROTO, "chunk at offset %" PRIu64 ": zstd: %s",
                           off, ZSTD_getErrorName(n));
        } else {
            return say(why, why_size, FERRY_EPROTO,
                       "chunk at offset %" PRIu64 ": unsupported compression", off);
        }
        if (n != v->usize)
            return say(why, why_size, FERRY_EPROTO,
                       "chunk at offset %" PRIu64 ": %zu bytes decompressed, %" PRIu64
                       " announced",
                       off, n, v->usize);
        v->records = r->ubuf;
        v->records_size = v->usize;
    }
    if (v->crc != 0) {
        uint32_t crc = ferry__mcap_crc32(0, v->records, (size_t)v->records_size);

        if (crc != v->crc)
            return say(why, why_size, FERRY_EPROTO,
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
    ch = find_channel(k->r, m.channel_id);
    if (k->scan) {
        ferry_mcap_info *in = &k->r->info;

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

static ferry_err walk_records(walk *k, const uint8_t *p, uint64_t n, uint64_t base, bool top,
                              bool *truncated, bool *data_end);

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
        if (!add_chunk_index(k->r, &ci))
            return say(k->why, k->why_size, FERRY_ENOMEM, "too many chunks");
    } else if (v.end_time < k->start || v.start_time > k->end) {
        return FERRY_OK;
    }
    err = chunk_load(k->r, &v, off, k->why, k->why_size);
    if (err != FERRY_OK) return err;
    return walk_records(k, v.records, v.records_size, 0, false, NULL, NULL);
}

/* The records of p[0..n): at the top level (base is p's file offset) or inside a chunk. */
static ferry_err walk_records(walk *k, const uint8_t *p, uint64_t n, uint64_t base, bool top,
                              bool *truncated, bool *data_end)
{
    uint64_t at = 0;

    while (at < n && !k->stopped) {
        ferry__mcap_cur h = ferry__mcap_cur_make(p + at, (size_t)(n - at));
        uint8_t op = ferry__mcap_get_u8(&h);
        uint64_t len = ferry__mcap_get_u64(&h);
        ferry__mcap_cur body;
        ferry_err err = FERRY_OK;

        if (h.failed || len > h.left) {
            if (top) {
                *truncated = true;
                return FERRY_OK;
            }
            return say(k->why, k->why_size, FERRY_EPROTO,
                       "record at offset %" PRIu64 " of a chunk overruns the chunk", at);
        }
        body = ferry__mcap_cur_make(h.p, (size_t)len);
        switch (op) {
        case FERRY_MCAP_OP_SCHEMA:
            if (k->scan && !add_schema(k->r, body))
                err = say(k->why, k->why_size, FERRY_EPROTO,
                          "schema at offset %" PRIu64 " is malformed", base + at);
            break;
        case FERRY_MCAP_OP_CHANNEL:
            if (k->scan && !add_channel(k->r, body))
                err = say(k->why, k->why_size, FERRY_EPROTO,
                          "channel at offset %" PRIu64 " is malformed", base + at);
            break;
        case FERRY_MCAP_OP_MESSAGE:
            err = on_message(k, body, base + at);
            break;
        case FERRY_MCAP_OP_CHUNK:
            if (!top)
                err = say(k->why, k->why_size, FERRY_EPROTO, "a chunk inside a chunk");
            else
                err = on_chunk(k, body, base + at, RECORD_HEAD + len);
            break;
        case FERRY_MCAP_OP_METADATA:
            if (k->scan && top && !add_metadata(k->r, body))
                err = say(k->why, k->why_size, FERRY_EPROTO,
                          "metadata at offset %" PRIu64 " is malformed", base + at);
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
        if (err != FERRY_OK) return err;
        at += RECORD_HEAD + len;
    }
    return FERRY_OK;
}

/* Reads the summary section; false (after setting why) when it cannot be trusted. */
static bool read_summary(ferry_mcap_reader *r, uint64_t from, uint64_t to, char *why,
                         size_t why_size)
{
    uint64_t at = from;
    bool have_stats = false;
    ferry__mcap_cur counts = ferry__mcap_cur_make(NULL, 0);

    while (at < to) {
        ferry__mcap_cur h = ferry__mcap_cur_make(r->base + at, (size_t)(to - at));
        uint8_t op = ferry__mcap_get_u8(&h);
        uint64_t len = ferry__mcap_get_u64(&h);
        ferry__mcap_cur c;
        bool ok = true;

        if (h.failed || len > h.left) {
            say(why, why_size, FERRY_EPROTO,
                "summary record at offset %" PRIu64 " overruns the summary", at);
            return false;
        }
        c = ferry__mcap_cur_make(h.p, (size_t)len);
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
            ok = !c.failed && ci.offset >= r->data_start && ci.length >= RECORD_HEAD &&
                 ci.offset <= r->data_end && ci.length <= r->data_end - ci.offset &&
                 add_chunk_index(r, &ci);
            break;
        }
        case FERRY_MCAP_OP_METADATA_INDEX: {
            uint64_t off = ferry__mcap_get_u64(&c), mlen = ferry__mcap_get_u64(&c);

            ok = !c.failed && off >= r->data_start && mlen >= RECORD_HEAD &&
                 off <= r->data_end && mlen <= r->data_end - off;
            if (ok) {
                ferry__mcap_cur mh = ferry__mcap_cur_make(r->base + off, (size_t)mlen);
                uint8_t mop = ferry__mcap_get_u8(&mh);
                uint64_t ml = ferry__mcap_get_u64(&mh);

                ok = mop == FERRY_MCAP_OP_METADATA && ml == mlen - RECORD_HEAD &&
                     add_metadata(r, ferry__mcap_cur_make(mh.p, (size_t)ml));
            }
            break;
        }
        default:
            break;
        }
        if (!ok) {
            say(why, why_size, FERRY_EPROTO,
                "summary record 0x%02x at offset %" PRIu64 " is malformed", op, at);
            return false;
        }
        at += RECORD_HEAD + len;
    }
    if (!have_stats) {
        say(why, why_size, FERRY_EPROTO, "the summary has no statistics");
        return false;
    }
    while (counts.left > 0) {
        uint16_t id = ferry__mcap_get_u16(&counts);
        uint64_t count = ferry__mcap_get_u64(&counts);
        ferry_mcap_channel *ch = find_channel(r, id);

        if (ch != NULL) ch->messages = count;
    }
    return true;
}

static void info_reset(ferry_mcap_reader *r)
{
    ferry_mcap_info *in = &r->info;

    for (size_t i = 0; i < in->nschemas; i++) {
        free(in->schemas[i].name);
        free(in->schemas[i].encoding);
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
    in->schemas = NULL;
    in->channels = NULL;
    in->chunks = NULL;
    in->metadata = NULL;
    in->nschemas = in->nchannels = in->nchunks = in->nmetadata = 0;
    r->cap_schemas = r->cap_channels = r->cap_chunks = r->cap_metadata = 0;
    in->message_count = in->start_time = in->end_time = 0;
    in->chunk_count = 0;
}

static ferry_err open_buffer(ferry_mcap_reader *r, char *why, size_t why_size)
{
    ferry__mcap_cur c = ferry__mcap_cur_make(r->base, r->size);
    const uint8_t *magic = ferry__mcap_get_bytes(&c, FERRY_MCAP_MAGIC_SIZE);
    uint8_t op;
    uint64_t len, footer_at;
    bool footer = false, truncated = false, data_end = false;
    char summary_why[200] = "";
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

        r->info.profile = get_str(&h);
        r->info.library = get_str(&h);
        if (h.failed) return say(why, why_size, FERRY_EPROTO, "the Header record is malformed");
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
                    snprintf(summary_why, sizeof summary_why, "summary CRC mismatch");
                else if (read_summary(r, summary_start, to, summary_why, sizeof summary_why))
                    r->info.has_summary = true;
                if (!r->info.has_summary) info_reset(r);
            } else if (summary_start != 0) {
                snprintf(summary_why, sizeof summary_why, "the footer's summary offset is bad");
            }
            if (!r->info.has_summary) r->data_end = footer_at;
        }
    }
    r->info.truncated = !footer;
    if (r->info.has_summary) {
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
                       true, &truncated, &data_end);
    if (err != FERRY_OK) return err;
    if (truncated || !data_end) r->info.truncated = true;
    r->info.chunk_count = (uint32_t)r->info.nchunks;
    (void)summary_why;
    return FERRY_OK;
}

ferry_err ferry_mcap_reader_open_mem(ferry_mcap_reader **out, const void *data, size_t size,
                                     char *why, size_t why_size)
{
    ferry_mcap_reader *r;
    ferry_err err;

    if (out == NULL || (data == NULL && size > 0))
        return say(why, why_size, FERRY_EINVAL, "invalid argument");
    r = calloc(1, sizeof *r);
    if (r == NULL) return say(why, why_size, FERRY_ENOMEM, "out of memory");
    r->base = data;
    r->size = size;
    err = open_buffer(r, why, why_size);
    if (err != FERRY_OK) {
        ferry_mcap_reader_close(r);
        return err;
    }
    *out = r;
    return FERRY_OK;
}

ferry_err ferry_mcap_reader_open(ferry_mcap_reader **out, const char *path, char *why,
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
    err = ferry_mcap_reader_open_mem(out, map, (size_t)st.st_size, why, why_size);
    if (err != FERRY_OK) {
        if (map != NULL) munmap(map, (size_t)st.st_size);
        return err;
    }
    (*out)->map = map;
    (*out)->map_size = (size_t)st.st_size;
    return FERRY_OK;
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
        return walk_records(&k, r->base + r->data_start, r->data_end - r->data_start,
                            r->data_start, true, &truncated, &data_end);
    /* Seek through the chunk indexes, whose offsets read_summary checked against the data
     * section; the record there must be the chunk the index says. */
    for (size_t i = 0; i < r->info.nchunks && !k.stopped; i++) {
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
