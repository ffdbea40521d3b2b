/* The MCAP reader's walk over records, at the top level of the data section or inside a chunk:
 * each chunk decompressed into the reader's buffer (an LZ4 frame a slice at a time, zstd in one
 * call) and its CRC checked a slice at a time, looking at the cancel flag between slices; a scan
 * registers schemas, channels and chunks, a read hands messages to the caller. One thread at a
 * time per reader; the cancel flag may be set from a signal handler meanwhile. */
#include "mcap_read.h"

#define SLICE ((size_t)64 << 20) /* CRC and LZ4 work between two looks at cancel */

void ferry__mcap_set_compression(char out[8], const uint8_t *p, uint32_t n)
{
    if (n < 8 && p != NULL) {
        memcpy(out, p, n);
        out[n] = '\0';
        if (n == 0 || strcmp(out, "lz4") == 0 || strcmp(out, "zstd") == 0)
            return;
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
    ferry__mcap_set_compression(v->compression, cname, clen);
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
        return ferry__mcap_say(k->why, k->why_size, FERRY_ELIMIT,
                               "chunk at offset %" PRIu64 ": uncompressed size %" PRIu64
                               " is over the limit of %" PRIu64 " bytes",
                               off, v->usize, FERRY_MCAP_CHUNK_MAX);
    if (v->usize <= r->ucap)
        return FERRY_OK;
    ferry__mcap_fault_clear(r);
    if (!ferry__mcap_room_for(r, v->usize - r->ucap, "its buffer"))
        return ferry__mcap_say(k->why, k->why_size, r->fault,
                               "chunk at offset %" PRIu64 " (%" PRIu64 " bytes uncompressed): %s",
                               off, v->usize, r->fault_why);
    /* Not realloc: the old contents are not needed, and copying them would touch their pages. */
    free(r->ubuf);
    r->ucap = 0;
    p = malloc((size_t)v->usize);
    r->ubuf = p;
    if (p == NULL)
        return ferry__mcap_say(k->why, k->why_size, FERRY_ENOMEM,
                               "chunk at offset %" PRIu64 ": out of memory for %" PRIu64 " bytes",
                               off, v->usize);
    r->ucap = (size_t)v->usize;
    /* Its pages, a slice at a time: faulting in a fresh GiB takes seconds on a busy machine,
     * too long for one call that cannot look at the cancel flag. */
    for (size_t at = 0; at < r->ucap && !k->cancelled; at += SLICE) {
        if (ferry__mcap_cancelled(r))
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
        return ferry__mcap_say(k->why, k->why_size, FERRY_ENOMEM, "out of memory (lz4)");
    LZ4F_resetDecompressionContext(r->lz4);
    for (;;) {
        size_t room = (size_t)v->usize - out_done, srcn = in_left;
        size_t dst = room < SLICE ? room : SLICE;
        size_t ret;

        if (ferry__mcap_cancelled(r)) {
            k->stopped = k->cancelled = true;
            return FERRY_OK;
        }
        ret = LZ4F_decompress(r->lz4, r->ubuf + out_done, &dst, src, &srcn, &opts);
        if (LZ4F_isError(ret))
            return ferry__mcap_say(k->why, k->why_size, FERRY_EPROTO,
                                   "chunk at offset %" PRIu64 ": lz4: %s", off,
                                   LZ4F_getErrorName(ret));
        out_done += dst;
        src += srcn;
        in_left -= srcn;
        if (ret == 0)
            break; /* the frame is complete */
        if (dst == 0 && srcn == 0)
            return ferry__mcap_say(k->why, k->why_size, FERRY_EPROTO,
                                   "chunk at offset %" PRIu64
                                   ": lz4 frame incomplete or larger than its "
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
            return ferry__mcap_say(k->why, k->why_size, FERRY_EPROTO,
                                   "chunk at offset %" PRIu64 ": uncompressed size %" PRIu64
                                   " but %" PRIu64 " bytes of records",
                                   off, v->usize, v->records_size);
    } else if (strcmp(v->compression, "lz4") != 0 && strcmp(v->compression, "zstd") != 0) {
        return ferry__mcap_say(k->why, k->why_size, FERRY_EPROTO,
                               "chunk at offset %" PRIu64 ": unsupported compression", off);
    } else {
        if (strcmp(v->compression, "zstd") == 0) {
            /* A frame that announces more than the chunk does is refused before any memory is
             * taken for it. */
            unsigned long long fcs = ZSTD_getFrameContentSize(v->records, (size_t)v->records_size);

            if (fcs != ZSTD_CONTENTSIZE_UNKNOWN && fcs != ZSTD_CONTENTSIZE_ERROR && fcs > v->usize)
                return ferry__mcap_say(k->why, k->why_size, FERRY_EPROTO,
                                       "chunk at offset %" PRIu64
                                       ": its zstd frame holds %llu bytes, the "
                                       "chunk announces %" PRIu64,
                                       off, fcs, v->usize);
        }
        err = chunk_buffer(k, v, off);
        if (err != FERRY_OK || k->cancelled)
            return err;
        if (strcmp(v->compression, "lz4") == 0) {
            err = lz4_load(k, v, off, &n);
            if (err != FERRY_OK || k->cancelled)
                return err;
        } else {
            /* One call for the whole chunk (at most FERRY_MCAP_CHUNK_MAX, about a second): the
             * streaming interface would need a window buffer of the frame's size besides. */
            if (r->zstd == NULL && (r->zstd = ZSTD_createDCtx()) == NULL)
                return ferry__mcap_say(k->why, k->why_size, FERRY_ENOMEM, "out of memory (zstd)");
            n = ZSTD_decompressDCtx(r->zstd, r->ubuf, (size_t)v->usize, v->records,
                                    (size_t)v->records_size);
            if (ZSTD_isError(n))
                return ferry__mcap_say(k->why, k->why_size, FERRY_EPROTO,
                                       "chunk at offset %" PRIu64 ": zstd: %s", off,
                                       ZSTD_getErrorName(n));
        }
        if (n != v->usize)
            return ferry__mcap_say(k->why, k->why_size, FERRY_EPROTO,
                                   "chunk at offset %" PRIu64 ": %zu bytes decompressed, %" PRIu64
                                   " announced",
                                   off, n, v->usize);
        v->records = r->ubuf;
        v->records_size = v->usize;
    }
    if (v->crc != 0) {
        uint32_t crc = 0;

        for (uint64_t at = 0; at < v->records_size; at += SLICE) {
            uint64_t step = v->records_size - at < SLICE ? v->records_size - at : SLICE;

            if (ferry__mcap_cancelled(r)) {
                k->stopped = k->cancelled = true;
                return FERRY_OK;
            }
            crc = ferry__mcap_crc32(crc, v->records + at, (size_t)step);
        }
        if (crc != v->crc)
            return ferry__mcap_say(k->why, k->why_size, FERRY_EPROTO,
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
        return ferry__mcap_say(k->why, k->why_size, FERRY_EPROTO,
                               "message at offset %" PRIu64 ": shorter than its fields", off);
    m.data = c.p;
    m.size = c.left;
    if (k->scan) {
        ferry_mcap_info *in = &k->r->info;

        ch = ferry__mcap_find_channel(k->r, m.channel_id);
        if (ch != NULL) {
            ch->messages++;
            ch->bytes += m.size;
        }
        if (in->message_count == 0 || m.log_time < in->start_time)
            in->start_time = m.log_time;
        if (m.log_time > in->end_time)
            in->end_time = m.log_time;
        in->message_count++;
        return FERRY_OK;
    }
    if (m.log_time < k->start || m.log_time > k->end)
        return FERRY_OK;
    if (!k->fn(k->arg, &m))
        k->stopped = true;
    return FERRY_OK;
}

ferry_err ferry__mcap_on_chunk(walk *k, ferry__mcap_cur c, uint64_t off, uint64_t length)
{
    chunk_view v;
    ferry_err err;

    if (chunk_parse(c, &v) != FERRY_OK)
        return ferry__mcap_say(k->why, k->why_size, FERRY_EPROTO,
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
        ferry__mcap_fault_clear(k->r);
        if (!ferry__mcap_add_chunk_index(k->r, &ci))
            return ferry__mcap_say(k->why, k->why_size, ferry__mcap_fault_err(k->r),
                                   "chunk at offset %" PRIu64 ": %s", off,
                                   ferry__mcap_fault_text(k->r));
    } else if (v.end_time < k->start || v.start_time > k->end) {
        return FERRY_OK;
    }
    err = chunk_load(k, &v, off);
    if (err != FERRY_OK || k->cancelled)
        return err;
    return ferry__mcap_walk_records(k, v.records, v.records_size, 0, off, NULL, NULL);
}

ferry_err ferry__mcap_walk_records(walk *k, const uint8_t *p, uint64_t n, uint64_t base,
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

        if (ferry__mcap_cancelled(k->r)) {
            k->stopped = k->cancelled = true;
            break;
        }
        if (h.failed || len > h.left) {
            if (top) {
                *truncated = true;
                return FERRY_OK;
            }
            return ferry__mcap_say(k->why, k->why_size, FERRY_EPROTO,
                                   "record at offset %" PRIu64 " of the chunk at offset %" PRIu64
                                   " overruns the chunk",
                                   at, chunk_at);
        }
        body = ferry__mcap_cur_make(h.p, (size_t)len);
        ferry__mcap_fault_clear(k->r);
        switch (op) {
        case FERRY_MCAP_OP_SCHEMA:
            what = "schema";
            ok = !k->scan || ferry__mcap_add_schema(k->r, body);
            break;
        case FERRY_MCAP_OP_CHANNEL:
            what = "channel";
            ok = !k->scan || ferry__mcap_add_channel(k->r, body);
            break;
        case FERRY_MCAP_OP_MESSAGE:
            err = on_message(k, body, base + at);
            break;
        case FERRY_MCAP_OP_CHUNK:
            if (!top)
                err = ferry__mcap_say(k->why, k->why_size, FERRY_EPROTO,
                                      "a chunk inside the chunk at offset %" PRIu64, chunk_at);
            else
                err = ferry__mcap_on_chunk(k, body, base + at, RECORD_HEAD + len);
            break;
        case FERRY_MCAP_OP_METADATA:
            what = "metadata";
            ok = !k->scan || !top || ferry__mcap_add_metadata(k->r, body);
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
            if (!top)
                snprintf(where, sizeof where, " of the chunk at offset %" PRIu64, chunk_at);
            err = ferry__mcap_say(k->why, k->why_size, ferry__mcap_fault_err(k->r),
                                  "%s at offset %" PRIu64 "%s: %s", what, base + at, where,
                                  ferry__mcap_fault_text(k->r));
        }
        if (err != FERRY_OK)
            return err;
        at += RECORD_HEAD + len;
    }
    return FERRY_OK;
}
