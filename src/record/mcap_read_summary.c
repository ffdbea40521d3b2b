/* The MCAP reader's summary section: schemas, channels, statistics, and chunk and metadata
 * indexes checked against the data section, sorted by offset and refused when two overlap (a
 * record listed twice would be read twice); the metadata records they point at are read once.
 * One thread at a time per reader. */
#include "mcap_read.h"

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
    if (b_offset >= a_offset + a_length)
        return false;
    if (b_offset == a_offset)
        ferry__mcap_say(why, why_size, FERRY_EPROTO,
                        "its %s indexes list the %s at offset %" PRIu64 " twice", what, what,
                        a_offset);
    else
        ferry__mcap_say(why, why_size, FERRY_EPROTO,
                        "its %s indexes overlap: the %s at offset %" PRIu64 " (%" PRIu64
                        " bytes) and the one at offset %" PRIu64,
                        what, what, a_offset, a_length, b_offset);
    return true;
}

bool ferry__mcap_read_summary(ferry_mcap_reader *r, uint64_t from, uint64_t to, char *why,
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

        if (ferry__mcap_cancelled(r)) {
            ferry__mcap_say(why, why_size, FERRY_ESYS, "interrupted");
            ok = false;
            break;
        }
        if (h.failed || len > h.left) {
            ferry__mcap_say(why, why_size, FERRY_EPROTO,
                            "summary record at offset %" PRIu64 " overruns the summary", at);
            ok = false;
            break;
        }
        c = ferry__mcap_cur_make(h.p, (size_t)len);
        ferry__mcap_fault_clear(r);
        switch (op) {
        case FERRY_MCAP_OP_SCHEMA:
            ok = ferry__mcap_add_schema(r, c);
            break;
        case FERRY_MCAP_OP_CHANNEL:
            ok = ferry__mcap_add_channel(r, c);
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
            ferry__mcap_set_compression(ci.compression, cname, clen);
            ci.compressed_size = ferry__mcap_get_u64(&c);
            ci.uncompressed_size = ferry__mcap_get_u64(&c);
            if (!c.failed && !(ci.offset >= r->data_start && ci.length >= RECORD_HEAD &&
                               ci.offset <= r->data_end && ci.length <= r->data_end - ci.offset &&
                               ci.compressed_size < ci.length))
                ferry__mcap_fault(r, FERRY_EPROTO,
                                  "a chunk index (offset %" PRIu64 ", %" PRIu64
                                  " bytes) points outside the data section",
                                  ci.offset, ci.length);
            ok = !c.failed && r->fault == FERRY_OK && ferry__mcap_add_chunk_index(r, &ci);
            break;
        }
        case FERRY_MCAP_OP_METADATA_INDEX: {
            span s;

            s.offset = ferry__mcap_get_u64(&c);
            s.length = ferry__mcap_get_u64(&c);
            if (!c.failed && !(s.offset >= r->data_start && s.length >= RECORD_HEAD &&
                               s.offset <= r->data_end && s.length <= r->data_end - s.offset))
                ferry__mcap_fault(r, FERRY_EPROTO,
                                  "a metadata index (offset %" PRIu64 ", %" PRIu64
                                  " bytes) points outside the data section",
                                  s.offset, s.length);
            ok = !c.failed && r->fault == FERRY_OK &&
                 ferry__mcap_grow(r, (void **)&meta, &cap_meta, nmeta, sizeof s,
                                  FERRY_MCAP_RECORDS_MAX, "metadata records");
            if (ok)
                meta[nmeta++] = s;
            break;
        }
        default:
            break;
        }
        if (!ok)
            ferry__mcap_say(why, why_size, ferry__mcap_fault_err(r),
                            "summary record 0x%02x at offset %" PRIu64 ": %s", op, at,
                            ferry__mcap_fault_text(r));
        at += RECORD_HEAD + len;
    }
    if (ok && !have_stats) {
        ferry__mcap_say(why, why_size, FERRY_EPROTO, "the summary has no statistics");
        ok = false;
    }
    /* In file order, each record once. */
    if (ok) {
        ferry_mcap_chunk_index *ci = r->info.chunks;

        if (r->info.nchunks > 1)
            qsort(ci, r->info.nchunks, sizeof *ci, chunk_order);
        for (size_t i = 1; ok && i < r->info.nchunks; i++)
            ok = !overlap("chunk", ci[i - 1].offset, ci[i - 1].length, ci[i].offset, why, why_size);
        if (nmeta > 1)
            qsort(meta, nmeta, sizeof *meta, span_order);
        for (size_t i = 1; ok && i < nmeta; i++)
            ok = !overlap("metadata", meta[i - 1].offset, meta[i - 1].length, meta[i].offset, why,
                          why_size);
    }
    for (size_t i = 0; ok && i < nmeta; i++) {
        ferry__mcap_cur mh = ferry__mcap_cur_make(r->base + meta[i].offset, (size_t)meta[i].length);
        uint8_t mop = ferry__mcap_get_u8(&mh);
        uint64_t ml = ferry__mcap_get_u64(&mh);

        ferry__mcap_fault_clear(r);
        ok = !ferry__mcap_cancelled(r) && mop == FERRY_MCAP_OP_METADATA &&
             ml == meta[i].length - RECORD_HEAD &&
             ferry__mcap_add_metadata(r, ferry__mcap_cur_make(mh.p, (size_t)ml));
        if (!ok)
            ferry__mcap_say(why, why_size, ferry__mcap_fault_err(r),
                            "the metadata index of offset %" PRIu64 ": %s", meta[i].offset,
                            ferry__mcap_cancelled(r) ? "interrupted" : ferry__mcap_fault_text(r));
    }
    free(meta);
    while (ok && counts.left > 0) {
        uint16_t id = ferry__mcap_get_u16(&counts);
        uint64_t count = ferry__mcap_get_u64(&counts);
        ferry_mcap_channel *ch = ferry__mcap_find_channel(r, id);

        if (ch != NULL)
            ch->messages = count;
    }
    return ok;
}
