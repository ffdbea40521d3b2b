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
 *
 * This file opens a reader (the header, then the footer and the summary it points at, or a scan
 * of the data section when there is no summary to trust), closes it, and reads its messages
 * through the chunk indexes. The description is built in mcap_read_info.c, records are walked in
 * mcap_read_records.c and the summary is read in mcap_read_summary.c, on the private
 * mcap_read.h. A reader is used by one thread at a time; its cancel flag may be set from a
 * signal handler.
 */
#include "mcap_read.h"

#define FOOTER_SIZE (RECORD_HEAD + 20u)

ferry_err ferry__mcap_say(char *why, size_t n, ferry_err err, const char *fmt, ...)
{
    va_list ap;

    if (why != NULL && n > 0) {
        va_start(ap, fmt);
        vsnprintf(why, n, fmt, ap);
        va_end(ap);
    }
    return err;
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
        return ferry__mcap_say(why, why_size, FERRY_EPROTO,
                               "not an MCAP file (no magic at its start)");
    op = ferry__mcap_get_u8(&c);
    len = ferry__mcap_get_u64(&c);
    if (c.failed || op != FERRY_MCAP_OP_HEADER || len > c.left)
        return ferry__mcap_say(why, why_size, FERRY_EPROTO,
                               "no complete Header record after the magic");
    {
        ferry__mcap_cur h = ferry__mcap_cur_make(c.p, (size_t)len);

        r->info.profile = ferry__mcap_get_str(r, &h, FERRY_MCAP_NAME_MAX, "the profile");
        r->info.library = ferry__mcap_get_str(r, &h, FERRY_MCAP_NAME_MAX, "the library");
        if (h.failed)
            return ferry__mcap_say(why, why_size, ferry__mcap_fault_err(r), "the Header record: %s",
                                   ferry__mcap_fault_text(r));
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
                else if (ferry__mcap_read_summary(r, summary_start, to, summary_why,
                                                  summary_why_size))
                    r->info.has_summary = true;
                if (!r->info.has_summary)
                    ferry__mcap_info_reset(r);
            } else if (summary_start != 0) {
                snprintf(summary_why, summary_why_size, "the footer's summary offset is bad");
            }
            if (!r->info.has_summary)
                r->data_end = footer_at;
        }
    }
    r->info.truncated = !footer;
    if (r->info.has_summary) {
        summary_why[0] = '\0';
        if (r->info.chunk_count == 0)
            r->info.chunk_count = (uint32_t)r->info.nchunks;
        return FERRY_OK;
    }

    /* No summary to trust: scan the data section. */
    memset(&k, 0, sizeof k);
    k.r = r;
    k.scan = true;
    k.why = why;
    k.why_size = why_size;
    err = ferry__mcap_walk_records(&k, r->base + r->data_start, r->data_end - r->data_start,
                                   r->data_start, UINT64_MAX, &truncated, &data_end);
    if (err != FERRY_OK)
        return err;
    if (k.cancelled) {
        errno = EINTR;
        return ferry__mcap_say(why, why_size, FERRY_ESYS, "interrupted");
    }
    if (truncated || !data_end)
        r->info.truncated = true;
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
        return ferry__mcap_say(why, why_size, FERRY_EINVAL, "invalid argument");
    r = calloc(1, sizeof *r);
    if (r == NULL)
        return ferry__mcap_say(why, why_size, FERRY_ENOMEM, "out of memory");
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

    if (out == NULL || path == NULL)
        return ferry__mcap_say(why, why_size, FERRY_EINVAL, "invalid argument");
    /* O_NONBLOCK: a FIFO named as the file must not block the open. */
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return ferry__mcap_say(why, why_size, FERRY_ESYS, "%s", strerror(errno));
    if (fstat(fd, &st) != 0) {
        int e = errno;

        close(fd);
        errno = e;
        return ferry__mcap_say(why, why_size, FERRY_ESYS, "%s", strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return ferry__mcap_say(why, why_size, FERRY_EPROTO, "not a regular file");
    }
    if (st.st_size > 0) {
        map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            int e = errno;

            close(fd);
            errno = e;
            return ferry__mcap_say(why, why_size, FERRY_ESYS, "mmap: %s", strerror(e));
        }
        madvise(map, (size_t)st.st_size, MADV_SEQUENTIAL);
    }
    close(fd);
    err = ferry_mcap_reader_open_mem_with(out, map, (size_t)st.st_size, o, why, why_size);
    if (err != FERRY_OK) {
        int e = errno;

        if (map != NULL)
            munmap(map, (size_t)st.st_size);
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
    if (r != NULL)
        r->cancel = cancel;
}

void ferry_mcap_reader_close(ferry_mcap_reader *r)
{
    if (r == NULL)
        return;
    ferry__mcap_info_reset(r);
    free(r->info.profile);
    free(r->info.library);
    free(r->ubuf);
    if (r->lz4 != NULL)
        LZ4F_freeDecompressionContext(r->lz4);
    ZSTD_freeDCtx(r->zstd);
    if (r->map != NULL)
        munmap(r->map, r->map_size);
    free(r);
}

ferry_err ferry_mcap_reader_messages(ferry_mcap_reader *r, uint64_t start, uint64_t end,
                                     ferry_mcap_message_fn fn, void *arg, char *why,
                                     size_t why_size)
{
    bool truncated = false, data_end = false;
    walk k;

    if (r == NULL || fn == NULL)
        return ferry__mcap_say(why, why_size, FERRY_EINVAL, "invalid argument");
    memset(&k, 0, sizeof k);
    k.r = r;
    k.start = start;
    k.end = end;
    k.fn = fn;
    k.arg = arg;
    k.why = why;
    k.why_size = why_size;
    if (!r->info.has_summary || r->info.nchunks == 0)
        return ferry__mcap_walk_records(&k, r->base + r->data_start, r->data_end - r->data_start,
                                        r->data_start, UINT64_MAX, &truncated, &data_end);
    /* Seek through the chunk indexes, which ferry__mcap_read_summary checked against the data
     * section and sorted by offset, none overlapping another; the record there must be the chunk
     * the index says. */
    for (size_t i = 0; i < r->info.nchunks && !k.stopped && !ferry__mcap_cancelled(r); i++) {
        const ferry_mcap_chunk_index *ci = &r->info.chunks[i];
        ferry__mcap_cur h;
        uint8_t op;
        uint64_t len;
        ferry_err err;

        if (ci->end_time < start || ci->start_time > end)
            continue;
        h = ferry__mcap_cur_make(r->base + ci->offset, (size_t)ci->length);
        op = ferry__mcap_get_u8(&h);
        len = ferry__mcap_get_u64(&h);
        if (h.failed || op != FERRY_MCAP_OP_CHUNK || len != ci->length - RECORD_HEAD)
            return ferry__mcap_say(why, why_size, FERRY_EPROTO,
                                   "chunk index %zu points at offset %" PRIu64
                                   ", where no such chunk is",
                                   i, ci->offset);
        err = ferry__mcap_on_chunk(&k, ferry__mcap_cur_make(h.p, (size_t)len), ci->offset,
                                   ci->length);
        if (err != FERRY_OK)
            return err;
    }
    return FERRY_OK;
}
