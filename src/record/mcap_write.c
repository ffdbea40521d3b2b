/*
 * The MCAP writer (mcap.h). Bytes reach the file through one staging buffer for small pieces and
 * writev for the large ones, so that a frame's bulk goes from the caller's iovec to the kernel.
 * The data section's CRC runs in file order; the records of an uncompressed chunk are CRC'd once,
 * as the chunk's CRC, and folded into the data section's with crc32_combine when the chunk's
 * header (reserved, then filled in with pwrite) is known.
 */
#include "mcap.h"
#include "mcap_codec.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <lz4frame.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#define STAGE_CAP (64u * 1024u)
#define COPY_BELOW 4096u /* pieces smaller than this are staged (copied) */
#define CHUNK_SIZE_DEFAULT (4u * 1024u * 1024u)
#define ZSTD_LEVEL 1
#define IOV_PIECES 8u
#define WRITE_BEHIND (8u << 20)  /* bytes written between two sync_file_range calls */
#define WRITE_SLICE (256u << 10) /* most bytes one writev takes */
/* The reserved header of an uncompressed chunk: opcode, length, start, end, uncompressed size,
 * CRC, compression "" and the records' length. */
#define CHUNK_HEAD_NONE (1u + 8u + 8u + 8u + 8u + 4u + 4u + 8u)

typedef struct index_entry {
    uint64_t time, offset;
} index_entry;

typedef struct wchannel {
    uint64_t messages;
    uint64_t kept;    /* of those, in complete chunks (the file's end after a cut) */
    index_entry *idx; /* this chunk's message index */
    size_t nidx, capidx;
} wchannel;

struct ferry_mcap_writer {
    int fd;
    ferry_mcap_writer_options o;
    ferry_err err; /* the first failure; every later call returns it */
    int err_errno;
    uint64_t off;             /* file offset of the next byte, staged ones counted */
    uint64_t written, synced; /* bytes handed to the kernel; of those, sent to the disk */
    uint64_t dropped;         /* bytes before this offset were dropped from the page cache */
    /* The write-behind thread: the writer posts how far it wrote and where the open chunk starts
     * (behind_lock guards both and behind_stop); the thread owns synced and dropped then. */
    pthread_t behind;
    bool behind_running, behind_stop;
    pthread_mutex_t behind_lock;
    pthread_cond_t behind_wake;
    uint64_t behind_written, behind_limit, posted;
    uint32_t data_crc;
    uint8_t *stage;
    size_t staged;

    /* The open chunk. */
    bool in_chunk;
    uint64_t chunk_start, chunk_usize, chunk_t0, chunk_t1;
    uint32_t chunk_crc;
    ferry__mcap_buf cbuf; /* compressed records */
    LZ4F_cctx *lz4;
    ZSTD_CCtx *zstd;
    uint16_t *touched; /* channels with messages in the chunk */
    size_t ntouched;

    wchannel *chans;
    size_t nchans;
    uint16_t nschemas;
    ferry__mcap_buf schemas, channels, chunk_indexes, metadata_indexes;
    uint64_t messages, t0, t1;
    uint32_t chunks, metadata_count;

    /* The end of the last complete chunk (or metadata record), all of it handed to the kernel, and
     * what the summary held then: where ferry_mcap_writer_cut takes the file back to. */
    struct {
        uint64_t off, messages, t0, t1;
        uint32_t data_crc, chunks, metadata_count;
        size_t chunk_indexes, metadata_indexes;
    } kept;
};

static const LZ4F_preferences_t lz4_prefs = {
    .frameInfo = {.blockSizeID = LZ4F_max4MB},
    .compressionLevel = 0,
};

const char *ferry_mcap_compression_name(ferry_mcap_compression c)
{
    return c == FERRY_MCAP_LZ4 ? "lz4" : c == FERRY_MCAP_ZSTD ? "zstd" : "";
}

static ferry_err fail(ferry_mcap_writer *w, ferry_err err)
{
    if (w->err == FERRY_OK) {
        w->err = err;
        w->err_errno = errno;
    }
    return w->err;
}

static uint32_t crc_update(const ferry_mcap_writer *w, uint32_t crc, const void *p, size_t n)
{
    return w->o.no_crc ? 0 : ferry__mcap_crc32(crc, p, n);
}

/* Writes all of iov (which it may modify), WRITE_SLICE bytes a call at most: on a kernel without
 * preemption (PREEMPT_NONE) the copy of a whole frame into the page cache, milliseconds, is not
 * interrupted for a camera woken on the same CPU, however idle the writer's scheduling class; the
 * return from each slice to user space lets it in. */
static ferry_err write_all(ferry_mcap_writer *w, struct iovec *iov, int n)
{
    while (n > 0) {
        size_t len = 0, whole = 0;
        int k = 0;
        ssize_t done;

        while (k < n && k < IOV_MAX && len < WRITE_SLICE)
            len += iov[k++].iov_len;
        if (len > WRITE_SLICE) { /* the last piece in part */
            whole = iov[k - 1].iov_len;
            iov[k - 1].iov_len -= len - WRITE_SLICE;
        }
        done = writev(w->fd, iov, k);
        if (whole != 0)
            iov[k - 1].iov_len = whole;

        if (done < 0) {
            if (errno == EINTR)
                continue;
            return fail(w, FERRY_ESYS);
        }
        while (n > 0 && (size_t)done >= iov->iov_len) {
            done -= (ssize_t)iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (uint8_t *)iov->iov_base + done;
            iov->iov_len -= (size_t)done;
        }
    }
    return FERRY_OK;
}

/* Keeps dirty pages from piling up: once WRITE_BEHIND bytes were written since the last time,
 * starts their writeback (sync_file_range) and drops from the page cache what an earlier round
 * sent, up to the open chunk (below limit), whose reserved header is rewritten later. A recorder
 * that let the kernel collect gigabytes of dirty pages would meet them again as one long stall in
 * a write (dirty throttling) or at close. */
static void write_behind_round(ferry_mcap_writer *w, uint64_t written, uint64_t limit)
{
    uint64_t keep;

    if (written < w->synced) { /* cut back */
        w->synced = written;
        if (w->dropped > written)
            w->dropped = written & ~(uint64_t)4095;
        return;
    }
    sync_file_range(w->fd, (off64_t)w->synced, (off64_t)(written - w->synced),
                    SYNC_FILE_RANGE_WRITE);
    keep = limit < w->synced ? limit : w->synced;
    keep = keep > WRITE_BEHIND ? (keep - WRITE_BEHIND) & ~(uint64_t)4095 : 0;
    if (keep > w->dropped) {
        posix_fadvise(w->fd, (off_t)w->dropped, (off_t)(keep - w->dropped), POSIX_FADV_DONTNEED);
        w->dropped = keep;
    }
    w->synced = written;
}

/* sync_file_range does not wait for the writeback, but it does wait for room in the device's
 * queue, for milliseconds at a time when the disk is busy (a fifth of the writer's time at
 * 650 MB/s here): on a thread of its own it never holds up the next write. */
static void *write_behind_main(void *arg)
{
    ferry_mcap_writer *w = arg;

    pthread_mutex_lock(&w->behind_lock);
    for (;;) {
        uint64_t written, limit;

        while (!w->behind_stop && w->behind_written == w->synced)
            pthread_cond_wait(&w->behind_wake, &w->behind_lock);
        if (w->behind_stop)
            break;
        written = w->behind_written;
        limit = w->behind_limit;
        pthread_mutex_unlock(&w->behind_lock);
        write_behind_round(w, written, limit);
        pthread_mutex_lock(&w->behind_lock);
    }
    pthread_mutex_unlock(&w->behind_lock);
    return NULL;
}

static void write_behind(ferry_mcap_writer *w)
{
    uint64_t limit = w->in_chunk ? w->chunk_start : w->written;

    if (w->o.no_write_behind || (w->posted != UINT64_MAX && w->written - w->posted < WRITE_BEHIND))
        return;
    w->posted = w->written;
    if (!w->behind_running) {
        write_behind_round(w, w->written, limit);
        return;
    }
    pthread_mutex_lock(&w->behind_lock);
    w->behind_written = w->written;
    w->behind_limit = limit;
    pthread_cond_signal(&w->behind_wake);
    pthread_mutex_unlock(&w->behind_lock);
}

/* Writes the staged bytes, then pieces (none: just the staged bytes). */
static ferry_err flush_with(ferry_mcap_writer *w, const struct iovec *pieces, unsigned n)
{
    struct iovec iov[IOV_PIECES + 1];
    int k = 0;

    if (w->err != FERRY_OK)
        return w->err;
    if (w->staged > 0)
        iov[k++] = (struct iovec){w->stage, w->staged};
    for (unsigned i = 0; i < n; i++)
        if (pieces[i].iov_len > 0)
            iov[k++] = pieces[i];
    w->staged = 0;
    if (write_all(w, iov, k) != FERRY_OK)
        return w->err;
    w->written = w->off;
    write_behind(w);
    return FERRY_OK;
}

/* Hands everything staged to the kernel and remembers the file's end as one that
 * ferry_mcap_writer_cut may go back to: every record before it is complete. */
static ferry_err mark_kept(ferry_mcap_writer *w)
{
    if (flush_with(w, NULL, 0) != FERRY_OK)
        return w->err;
    w->kept.off = w->off;
    w->kept.messages = w->messages;
    w->kept.t0 = w->t0;
    w->kept.t1 = w->t1;
    w->kept.data_crc = w->data_crc;
    w->kept.chunks = w->chunks;
    w->kept.metadata_count = w->metadata_count;
    w->kept.chunk_indexes = w->chunk_indexes.len;
    w->kept.metadata_indexes = w->metadata_indexes.len;
    for (size_t i = 0; i < w->nchans; i++)
        w->chans[i].kept = w->chans[i].messages;
    return FERRY_OK;
}

/* Bytes in file order, straight to the file (staged or written). */
static ferry_err out_raw(ferry_mcap_writer *w, const struct iovec *iov, unsigned n)
{
    size_t small = 0;
    bool big = false;

    if (w->err != FERRY_OK)
        return w->err;
    for (unsigned i = 0; i < n; i++) {
        small += iov[i].iov_len;
        if (iov[i].iov_len >= COPY_BELOW)
            big = true;
    }
    if (!big && small <= STAGE_CAP) {
        if (w->staged + small > STAGE_CAP && flush_with(w, NULL, 0) != FERRY_OK)
            return w->err;
        for (unsigned i = 0; i < n; i++) {
            memcpy(w->stage + w->staged, iov[i].iov_base, iov[i].iov_len);
            w->staged += iov[i].iov_len;
        }
        w->off += small;
        return FERRY_OK;
    }
    w->off += small;
    return flush_with(w, iov, n);
}

/* Data-section bytes outside a chunk. */
static ferry_err out_data(ferry_mcap_writer *w, const void *p, size_t n, uint32_t *crc)
{
    struct iovec iov = {(void *)p, n};

    *crc = crc_update(w, *crc, p, n);
    return out_raw(w, &iov, 1);
}

static bool cbuf_room(ferry_mcap_writer *w, size_t n)
{
    if (ferry__mcap_buf_reserve(&w->cbuf, n))
        return true;
    fail(w, FERRY_ENOMEM);
    return false;
}

/* Records inside the open chunk. */
static ferry_err out_chunk(ferry_mcap_writer *w, const struct iovec *iov, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        w->chunk_crc = crc_update(w, w->chunk_crc, iov[i].iov_base, iov[i].iov_len);
        w->chunk_usize += iov[i].iov_len;
    }
    if (w->o.compression == FERRY_MCAP_NONE)
        return out_raw(w, iov, n);
    for (unsigned i = 0; i < n && w->err == FERRY_OK; i++) {
        if (w->o.compression == FERRY_MCAP_LZ4) {
            size_t r;

            if (!cbuf_room(w, LZ4F_compressBound(iov[i].iov_len, &lz4_prefs)))
                break;
            r = LZ4F_compressUpdate(w->lz4, w->cbuf.p + w->cbuf.len, w->cbuf.cap - w->cbuf.len,
                                    iov[i].iov_base, iov[i].iov_len, NULL);
            if (LZ4F_isError(r))
                return fail(w, FERRY_EINVAL);
            w->cbuf.len += r;
        } else {
            ZSTD_inBuffer in = {iov[i].iov_base, iov[i].iov_len, 0};

            while (in.pos < in.size) {
                ZSTD_outBuffer ob;
                size_t r;

                if (!cbuf_room(w, ZSTD_CStreamOutSize()))
                    break;
                ob = (ZSTD_outBuffer){w->cbuf.p + w->cbuf.len, w->cbuf.cap - w->cbuf.len, 0};
                r = ZSTD_compressStream2(w->zstd, &ob, &in, ZSTD_e_continue);
                if (ZSTD_isError(r))
                    return fail(w, FERRY_EINVAL);
                w->cbuf.len += ob.pos;
            }
        }
    }
    return w->err;
}

static ferry_err chunk_open(ferry_mcap_writer *w)
{
    w->in_chunk = true;
    w->chunk_start = w->off;
    w->chunk_usize = 0;
    w->chunk_crc = 0;
    w->chunk_t0 = UINT64_MAX;
    w->chunk_t1 = 0;
    w->ntouched = 0;
    w->cbuf.len = 0;
    if (w->o.compression == FERRY_MCAP_NONE) {
        /* A length no reader takes until the real header replaces this one. */
        uint8_t head[CHUNK_HEAD_NONE];
        struct iovec iov = {head, sizeof head};

        memset(head, 0, sizeof head);
        head[0] = FERRY_MCAP_OP_CHUNK;
        ferry__mcap_le64(head + 1, UINT64_MAX);
        return out_raw(w, &iov, 1);
    }
    if (w->o.compression == FERRY_MCAP_LZ4) {
        size_t r;

        if (!cbuf_room(w, LZ4F_HEADER_SIZE_MAX))
            return w->err;
        r = LZ4F_compressBegin(w->lz4, w->cbuf.p, w->cbuf.cap, &lz4_prefs);
        if (LZ4F_isError(r))
            return fail(w, FERRY_EINVAL);
        w->cbuf.len = r;
    } else {
        ZSTD_CCtx_reset(w->zstd, ZSTD_reset_session_only);
    }
    return FERRY_OK;
}

/* The chunk's header record bytes for the records' size and compressed size. */
static size_t chunk_head(const ferry_mcap_writer *w, uint8_t *p, uint64_t records_size)
{
    const char *comp = ferry_mcap_compression_name(w->o.compression);
    uint32_t clen = (uint32_t)strlen(comp);
    uint64_t t0 = w->chunk_t0 == UINT64_MAX ? 0 : w->chunk_t0;
    size_t n = 0;
    ferry__mcap_buf b = {p, 0, 64, false};

    ferry__mcap_put_u8(&b, FERRY_MCAP_OP_CHUNK);
    ferry__mcap_put_u64(&b, 8 + 8 + 8 + 4 + 4 + clen + 8 + records_size);
    ferry__mcap_put_u64(&b, t0);
    ferry__mcap_put_u64(&b, w->chunk_t1);
    ferry__mcap_put_u64(&b, w->chunk_usize);
    ferry__mcap_put_u32(&b, w->chunk_crc);
    ferry__mcap_put_str(&b, comp);
    ferry__mcap_put_u64(&b, records_size);
    n = b.len;
    return n;
}

static ferry_err chunk_close(ferry_mcap_writer *w)
{
    uint8_t head[64];
    uint64_t records_size, chunk_length, index_start;
    size_t hn, at;

    if (!w->in_chunk || w->err != FERRY_OK)
        return w->err;
    w->in_chunk = false;
    if (w->o.compression == FERRY_MCAP_NONE) {
        records_size = w->chunk_usize;
        hn = chunk_head(w, head, records_size);
        if (flush_with(w, NULL, 0) != FERRY_OK)
            return w->err;
        for (size_t done = 0; done < hn;) {
            ssize_t r = pwrite(w->fd, head + done, hn - done, (off_t)(w->chunk_start + done));

            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                return fail(w, FERRY_ESYS);
            done += (size_t)r;
        }
        w->data_crc = crc_update(w, w->data_crc, head, hn);
        if (!w->o.no_crc)
            w->data_crc = (uint32_t)crc32_combine(w->data_crc, w->chunk_crc, (z_off_t)records_size);
    } else {
        struct iovec iov[2];

        if (w->o.compression == FERRY_MCAP_LZ4) {
            size_t r;

            if (!cbuf_room(w, LZ4F_compressBound(0, &lz4_prefs)))
                return w->err;
            r = LZ4F_compressEnd(w->lz4, w->cbuf.p + w->cbuf.len, w->cbuf.cap - w->cbuf.len, NULL);
            if (LZ4F_isError(r))
                return fail(w, FERRY_EINVAL);
            w->cbuf.len += r;
        } else {
            ZSTD_inBuffer in = {NULL, 0, 0};
            size_t r;

            do {
                ZSTD_outBuffer ob;

                if (!cbuf_room(w, ZSTD_CStreamOutSize()))
                    return w->err;
                ob = (ZSTD_outBuffer){w->cbuf.p + w->cbuf.len, w->cbuf.cap - w->cbuf.len, 0};
                r = ZSTD_compressStream2(w->zstd, &ob, &in, ZSTD_e_end);
                if (ZSTD_isError(r))
                    return fail(w, FERRY_EINVAL);
                w->cbuf.len += ob.pos;
            } while (r != 0);
        }
        records_size = w->cbuf.len;
        hn = chunk_head(w, head, records_size);
        w->data_crc = crc_update(w, w->data_crc, head, hn);
        w->data_crc = crc_update(w, w->data_crc, w->cbuf.p, w->cbuf.len);
        iov[0] = (struct iovec){head, hn};
        iov[1] = (struct iovec){w->cbuf.p, w->cbuf.len};
        if (out_raw(w, iov, 2) != FERRY_OK)
            return w->err;
    }
    chunk_length = w->off - w->chunk_start;

    /* The message indexes, one record per channel of the chunk; their offsets go into the chunk
     * index. */
    {
        ferry__mcap_buf b = {0};
        ferry__mcap_buf *ci = &w->chunk_indexes;
        size_t map;

        at = ferry__mcap_record_begin(ci, FERRY_MCAP_OP_CHUNK_INDEX);
        ferry__mcap_put_u64(ci, w->chunk_t0 == UINT64_MAX ? 0 : w->chunk_t0);
        ferry__mcap_put_u64(ci, w->chunk_t1);
        ferry__mcap_put_u64(ci, w->chunk_start);
        ferry__mcap_put_u64(ci, chunk_length);
        map = ferry__mcap_len32_begin(ci);
        index_start = w->off;
        for (size_t i = 0; i < w->ntouched; i++) {
            wchannel *c = &w->chans[w->touched[i]];
            size_t r, arr;

            ferry__mcap_put_u16(ci, w->touched[i]);
            ferry__mcap_put_u64(ci, w->off + b.len);
            r = ferry__mcap_record_begin(&b, FERRY_MCAP_OP_MESSAGE_INDEX);
            ferry__mcap_put_u16(&b, w->touched[i]);
            arr = ferry__mcap_len32_begin(&b);
            for (size_t k = 0; k < c->nidx; k++) {
                ferry__mcap_put_u64(&b, c->idx[k].time);
                ferry__mcap_put_u64(&b, c->idx[k].offset);
            }
            ferry__mcap_len32_end(&b, arr);
            ferry__mcap_record_end(&b, r);
            c->nidx = 0;
        }
        ferry__mcap_len32_end(ci, map);
        ferry__mcap_put_u64(ci, b.len);
        ferry__mcap_put_str(ci, ferry_mcap_compression_name(w->o.compression));
        ferry__mcap_put_u64(ci, records_size);
        ferry__mcap_put_u64(ci, w->chunk_usize);
        ferry__mcap_record_end(ci, at);
        if (b.failed || ci->failed) {
            ferry__mcap_buf_free(&b);
            return fail(w, FERRY_ENOMEM);
        }
        if (b.len > 0)
            out_data(w, b.p, b.len, &w->data_crc);
        ferry__mcap_buf_free(&b);
        (void)index_start;
    }
    w->chunks++;
    if (w->err != FERRY_OK)
        return w->err;
    return mark_kept(w);
}

/* A record (schema, channel, message header) into the chunk, opening one when none is open. */
static ferry_err chunk_record(ferry_mcap_writer *w, const struct iovec *iov, unsigned n)
{
    if (w->err != FERRY_OK)
        return w->err;
    if (!w->in_chunk && chunk_open(w) != FERRY_OK)
        return w->err;
    return out_chunk(w, iov, n);
}

static ferry_err maybe_close(ferry_mcap_writer *w)
{
    if (w->in_chunk && w->chunk_usize >= w->o.chunk_size)
        return chunk_close(w);
    return w->err;
}

ferry_err ferry_mcap_writer_open(ferry_mcap_writer **out, int fd,
                                 const ferry_mcap_writer_options *o)
{
    ferry_mcap_writer *w;
    ferry__mcap_buf b = {0};
    char library[64];
    size_t at;

    if (out == NULL || fd < 0)
        return FERRY_EINVAL;
    if (o != NULL && (unsigned)o->compression > FERRY_MCAP_ZSTD)
        return FERRY_EINVAL;
    w = calloc(1, sizeof *w);
    if (w == NULL)
        return FERRY_ENOMEM;
    w->fd = fd;
    if (o != NULL)
        w->o = *o;
    if (w->o.chunk_size == 0)
        w->o.chunk_size = CHUNK_SIZE_DEFAULT;
    w->t0 = UINT64_MAX;
    /* Without the thread (none could be made), write_behind runs its rounds itself. */
    if (!w->o.no_write_behind && pthread_mutex_init(&w->behind_lock, NULL) == 0) {
        if (pthread_cond_init(&w->behind_wake, NULL) != 0) {
            pthread_mutex_destroy(&w->behind_lock);
        } else if (pthread_create(&w->behind, NULL, write_behind_main, w) != 0) {
            pthread_cond_destroy(&w->behind_wake);
            pthread_mutex_destroy(&w->behind_lock);
        } else {
            w->behind_running = true;
        }
    }
    w->stage = malloc(STAGE_CAP);
    if (w->stage == NULL)
        goto nomem;
    if (w->o.compression == FERRY_MCAP_LZ4 &&
        LZ4F_isError(LZ4F_createCompressionContext(&w->lz4, LZ4F_VERSION)))
        goto nomem;
    if (w->o.compression == FERRY_MCAP_ZSTD) {
        w->zstd = ZSTD_createCCtx();
        if (w->zstd == NULL)
            goto nomem;
        ZSTD_CCtx_setParameter(w->zstd, ZSTD_c_compressionLevel, ZSTD_LEVEL);
    }
    snprintf(library, sizeof library, "ferry %d.%d", FERRY_VERSION_MAJOR, FERRY_VERSION_MINOR);
    ferry__mcap_put(&b, FERRY_MCAP_MAGIC, FERRY_MCAP_MAGIC_SIZE);
    at = ferry__mcap_record_begin(&b, FERRY_MCAP_OP_HEADER);
    ferry__mcap_put_str(&b, w->o.profile != NULL ? w->o.profile : "");
    ferry__mcap_put_str(&b, w->o.library != NULL ? w->o.library : library);
    ferry__mcap_record_end(&b, at);
    if (b.failed)
        goto nomem;
    w->o.profile = w->o.library = NULL; /* not kept: the caller's strings */
    out_data(w, b.p, b.len, &w->data_crc);
    ferry__mcap_buf_free(&b);
    if (mark_kept(w) != FERRY_OK) {
        ferry_err err = w->err;

        ferry_mcap_writer_abandon(w);
        return err;
    }
    *out = w;
    return FERRY_OK;
nomem:
    ferry__mcap_buf_free(&b);
    ferry_mcap_writer_abandon(w);
    return FERRY_ENOMEM;
}

ferry_err ferry_mcap_writer_add_schema(ferry_mcap_writer *w, const char *name, const char *encoding,
                                       const void *data, size_t size, uint16_t *id)
{
    ferry__mcap_buf *s;
    size_t at, start;
    struct iovec iov;

    if (w == NULL || name == NULL || encoding == NULL || (data == NULL && size > 0) ||
        size > UINT32_MAX || id == NULL)
        return FERRY_EINVAL;
    if (w->err != FERRY_OK)
        return w->err;
    if (w->nschemas == UINT16_MAX)
        return FERRY_ELIMIT;
    s = &w->schemas;
    start = s->len;
    at = ferry__mcap_record_begin(s, FERRY_MCAP_OP_SCHEMA);
    ferry__mcap_put_u16(s, (uint16_t)(w->nschemas + 1));
    ferry__mcap_put_str(s, name);
    ferry__mcap_put_str(s, encoding);
    ferry__mcap_put_u32(s, (uint32_t)size);
    ferry__mcap_put(s, data, size);
    ferry__mcap_record_end(s, at);
    if (s->failed)
        return fail(w, FERRY_ENOMEM);
    iov = (struct iovec){s->p + start, s->len - start};
    if (chunk_record(w, &iov, 1) != FERRY_OK)
        return w->err;
    *id = ++w->nschemas;
    return FERRY_OK;
}

ferry_err ferry_mcap_writer_add_channel(ferry_mcap_writer *w, uint16_t schema_id, const char *topic,
                                        const char *message_encoding, const ferry_mcap_kv *metadata,
                                        size_t nmetadata, uint16_t *id)
{
    ferry__mcap_buf *s;
    size_t at, start, map;
    struct iovec iov;
    wchannel *chans;

    if (w == NULL || topic == NULL || message_encoding == NULL || id == NULL ||
        (metadata == NULL && nmetadata > 0) || schema_id > w->nschemas)
        return FERRY_EINVAL;
    if (w->err != FERRY_OK)
        return w->err;
    if (w->nchans >= UINT16_MAX)
        return FERRY_ELIMIT;
    chans = realloc(w->chans, (w->nchans + 1) * sizeof *chans);
    if (chans == NULL)
        return fail(w, FERRY_ENOMEM);
    w->chans = chans;
    memset(&chans[w->nchans], 0, sizeof *chans);
    {
        uint16_t *t = realloc(w->touched, (w->nchans + 1) * sizeof *t);

        if (t == NULL)
            return fail(w, FERRY_ENOMEM);
        w->touched = t;
    }
    s = &w->channels;
    start = s->len;
    at = ferry__mcap_record_begin(s, FERRY_MCAP_OP_CHANNEL);
    ferry__mcap_put_u16(s, (uint16_t)w->nchans);
    ferry__mcap_put_u16(s, schema_id);
    ferry__mcap_put_str(s, topic);
    ferry__mcap_put_str(s, message_encoding);
    map = ferry__mcap_len32_begin(s);
    for (size_t i = 0; i < nmetadata; i++) {
        ferry__mcap_put_str(s, metadata[i].key);
        ferry__mcap_put_str(s, metadata[i].value);
    }
    ferry__mcap_len32_end(s, map);
    ferry__mcap_record_end(s, at);
    if (s->failed)
        return fail(w, FERRY_ENOMEM);
    iov = (struct iovec){s->p + start, s->len - start};
    if (chunk_record(w, &iov, 1) != FERRY_OK)
        return w->err;
    *id = (uint16_t)w->nchans++;
    return FERRY_OK;
}

ferry_err ferry_mcap_writer_write(ferry_mcap_writer *w, uint16_t channel_id, uint32_t sequence,
                                  uint64_t log_time, uint64_t publish_time, const struct iovec *iov,
                                  unsigned niov)
{
    uint8_t head[31];
    struct iovec pieces[IOV_PIECES + 1];
    ferry__mcap_buf b = {head, 0, sizeof head, false};
    uint64_t size = 0, offset;
    wchannel *c;

    if (w == NULL || channel_id >= w->nchans || niov > IOV_PIECES || (iov == NULL && niov > 0))
        return FERRY_EINVAL;
    if (w->err != FERRY_OK)
        return w->err;
    for (unsigned i = 0; i < niov; i++)
        size += iov[i].iov_len;
    c = &w->chans[channel_id];
    if (c->nidx == c->capidx) {
        size_t cap = c->capidx ? c->capidx * 2 : 16;
        index_entry *e = realloc(c->idx, cap * sizeof *e);

        if (e == NULL)
            return fail(w, FERRY_ENOMEM);
        c->idx = e;
        c->capidx = cap;
    }
    if (!w->in_chunk && chunk_open(w) != FERRY_OK)
        return w->err;
    offset = w->chunk_usize;
    ferry__mcap_put_u8(&b, FERRY_MCAP_OP_MESSAGE);
    ferry__mcap_put_u64(&b, 2 + 4 + 8 + 8 + size);
    ferry__mcap_put_u16(&b, channel_id);
    ferry__mcap_put_u32(&b, sequence);
    ferry__mcap_put_u64(&b, log_time);
    ferry__mcap_put_u64(&b, publish_time);
    pieces[0] = (struct iovec){head, b.len};
    for (unsigned i = 0; i < niov; i++)
        pieces[i + 1] = iov[i];
    if (out_chunk(w, pieces, niov + 1) != FERRY_OK)
        return w->err;

    if (c->nidx == 0)
        w->touched[w->ntouched++] = channel_id;
    c->idx[c->nidx++] = (index_entry){log_time, offset};
    c->messages++;
    w->messages++;
    if (log_time < w->chunk_t0)
        w->chunk_t0 = log_time;
    if (log_time > w->chunk_t1)
        w->chunk_t1 = log_time;
    if (log_time < w->t0)
        w->t0 = log_time;
    if (log_time > w->t1)
        w->t1 = log_time;
    return maybe_close(w);
}

ferry_err ferry_mcap_writer_add_metadata(ferry_mcap_writer *w, const char *name,
                                         const ferry_mcap_kv *kv, size_t n)
{
    ferry__mcap_buf b = {0};
    ferry__mcap_buf *mi;
    size_t at, map;
    uint64_t offset;

    if (w == NULL || name == NULL || (kv == NULL && n > 0))
        return FERRY_EINVAL;
    if (chunk_close(w) != FERRY_OK)
        return w->err;
    at = ferry__mcap_record_begin(&b, FERRY_MCAP_OP_METADATA);
    ferry__mcap_put_str(&b, name);
    map = ferry__mcap_len32_begin(&b);
    for (size_t i = 0; i < n; i++) {
        ferry__mcap_put_str(&b, kv[i].key);
        ferry__mcap_put_str(&b, kv[i].value);
    }
    ferry__mcap_len32_end(&b, map);
    ferry__mcap_record_end(&b, at);
    if (b.failed) {
        ferry__mcap_buf_free(&b);
        return fail(w, FERRY_ENOMEM);
    }
    offset = w->off;
    if (out_data(w, b.p, b.len, &w->data_crc) != FERRY_OK) {
        ferry__mcap_buf_free(&b);
        return w->err;
    }
    mi = &w->metadata_indexes;
    at = ferry__mcap_record_begin(mi, FERRY_MCAP_OP_METADATA_INDEX);
    ferry__mcap_put_u64(mi, offset);
    ferry__mcap_put_u64(mi, b.len);
    ferry__mcap_put_str(mi, name);
    ferry__mcap_record_end(mi, at);
    ferry__mcap_buf_free(&b);
    if (mi->failed)
        return fail(w, FERRY_ENOMEM);
    w->metadata_count++;
    return mark_kept(w);
}

ferry_err ferry_mcap_writer_cut(ferry_mcap_writer *w, uint64_t *kept, size_t nkept)
{
    if (w == NULL || (kept == NULL && nkept > 0))
        return FERRY_EINVAL;
    for (size_t i = 0; i < nkept; i++)
        kept[i] = 0;
    /* The space of what follows is given back first: on a full disk the summary needs it. */
    if (ftruncate(w->fd, (off_t)w->kept.off) != 0 ||
        lseek(w->fd, (off_t)w->kept.off, SEEK_SET) != (off_t)w->kept.off) {
        w->err = FERRY_OK; /* fail() keeps the first error: this one is the news */
        return fail(w, FERRY_ESYS);
    }
    for (size_t i = 0; i < w->nchans; i++) {
        wchannel *c = &w->chans[i];

        c->messages = c->kept;
        if (i < nkept)
            kept[i] = c->kept;
        c->nidx = 0;
    }
    w->err = FERRY_OK;
    w->err_errno = 0;
    w->in_chunk = false;
    w->ntouched = 0;
    w->cbuf.len = 0;
    w->staged = 0;
    w->off = w->written = w->kept.off;
    w->posted = UINT64_MAX; /* the next write_behind says where the file ends now */
    w->messages = w->kept.messages;
    w->t0 = w->kept.t0;
    w->t1 = w->kept.t1;
    w->data_crc = w->kept.data_crc;
    w->chunks = w->kept.chunks;
    w->metadata_count = w->kept.metadata_count;
    w->chunk_indexes.len = w->kept.chunk_indexes;
    w->metadata_indexes.len = w->kept.metadata_indexes;
    return FERRY_OK;
}

ferry_err ferry_mcap_writer_flush(ferry_mcap_writer *w)
{
    if (w == NULL)
        return FERRY_EINVAL;
    if (chunk_close(w) != FERRY_OK)
        return w->err;
    return flush_with(w, NULL, 0);
}

uint64_t ferry_mcap_writer_size(const ferry_mcap_writer *w)
{
    return w != NULL ? w->off : 0;
}

/* One group of the summary, and its Summary Offset record. */
static void summary_group(ferry_mcap_writer *w, const ferry__mcap_buf *g, uint8_t op,
                          ferry__mcap_buf *offsets, uint32_t *crc)
{
    size_t at;

    if (g->len == 0)
        return;
    at = ferry__mcap_record_begin(offsets, FERRY_MCAP_OP_SUMMARY_OFFSET);
    ferry__mcap_put_u8(offsets, op);
    ferry__mcap_put_u64(offsets, w->off);
    ferry__mcap_put_u64(offsets, g->len);
    ferry__mcap_record_end(offsets, at);
    out_data(w, g->p, g->len, crc);
}

static ferry_err finish(ferry_mcap_writer *w)
{
    ferry__mcap_buf stats = {0}, offsets = {0}, tail = {0};
    uint64_t summary_start, offsets_start;
    uint32_t crc = 0;
    size_t at, map;

    if (chunk_close(w) != FERRY_OK)
        return w->err;
    at = ferry__mcap_record_begin(&tail, FERRY_MCAP_OP_DATA_END);
    ferry__mcap_put_u32(&tail, w->data_crc);
    ferry__mcap_record_end(&tail, at);
    if (!tail.failed)
        out_data(w, tail.p, tail.len, &crc);
    tail.len = 0;
    crc = 0;

    at = ferry__mcap_record_begin(&stats, FERRY_MCAP_OP_STATISTICS);
    ferry__mcap_put_u64(&stats, w->messages);
    ferry__mcap_put_u16(&stats, w->nschemas);
    ferry__mcap_put_u32(&stats, (uint32_t)w->nchans);
    ferry__mcap_put_u32(&stats, 0);
    ferry__mcap_put_u32(&stats, w->metadata_count);
    ferry__mcap_put_u32(&stats, w->chunks);
    ferry__mcap_put_u64(&stats, w->messages ? w->t0 : 0);
    ferry__mcap_put_u64(&stats, w->t1);
    map = ferry__mcap_len32_begin(&stats);
    for (size_t i = 0; i < w->nchans; i++) {
        ferry__mcap_put_u16(&stats, (uint16_t)i);
        ferry__mcap_put_u64(&stats, w->chans[i].messages);
    }
    ferry__mcap_len32_end(&stats, map);
    ferry__mcap_record_end(&stats, at);

    summary_start = w->off;
    summary_group(w, &w->schemas, FERRY_MCAP_OP_SCHEMA, &offsets, &crc);
    summary_group(w, &w->channels, FERRY_MCAP_OP_CHANNEL, &offsets, &crc);
    summary_group(w, &stats, FERRY_MCAP_OP_STATISTICS, &offsets, &crc);
    summary_group(w, &w->chunk_indexes, FERRY_MCAP_OP_CHUNK_INDEX, &offsets, &crc);
    summary_group(w, &w->metadata_indexes, FERRY_MCAP_OP_METADATA_INDEX, &offsets, &crc);
    offsets_start = w->off;
    if (offsets.len > 0)
        out_data(w, offsets.p, offsets.len, &crc);

    ferry__mcap_put_u8(&tail, FERRY_MCAP_OP_FOOTER);
    ferry__mcap_put_u64(&tail, 20);
    ferry__mcap_put_u64(&tail, summary_start);
    ferry__mcap_put_u64(&tail, offsets_start);
    if (!tail.failed)
        crc = crc_update(w, crc, tail.p, tail.len);
    ferry__mcap_put_u32(&tail, crc);
    ferry__mcap_put(&tail, FERRY_MCAP_MAGIC, FERRY_MCAP_MAGIC_SIZE);
    if (stats.failed || offsets.failed || tail.failed)
        fail(w, FERRY_ENOMEM);
    else
        out_data(w, tail.p, tail.len, &crc);
    ferry__mcap_buf_free(&stats);
    ferry__mcap_buf_free(&offsets);
    ferry__mcap_buf_free(&tail);
    return flush_with(w, NULL, 0);
}

ferry_err ferry_mcap_writer_close(ferry_mcap_writer *w)
{
    ferry_err err;
    int saved;

    if (w == NULL)
        return FERRY_OK;
    err = finish(w);
    saved = w->err_errno;
    ferry_mcap_writer_abandon(w);
    if (err == FERRY_ESYS)
        errno = saved;
    return err;
}

void ferry_mcap_writer_abandon(ferry_mcap_writer *w)
{
    if (w == NULL)
        return;
    if (w->behind_running) {
        pthread_mutex_lock(&w->behind_lock);
        w->behind_stop = true;
        pthread_cond_signal(&w->behind_wake);
        pthread_mutex_unlock(&w->behind_lock);
        pthread_join(w->behind, NULL);
        pthread_cond_destroy(&w->behind_wake);
        pthread_mutex_destroy(&w->behind_lock);
    }
    for (size_t i = 0; i < w->nchans; i++)
        free(w->chans[i].idx);
    free(w->chans);
    free(w->touched);
    free(w->stage);
    ferry__mcap_buf_free(&w->cbuf);
    ferry__mcap_buf_free(&w->schemas);
    ferry__mcap_buf_free(&w->channels);
    ferry__mcap_buf_free(&w->chunk_indexes);
    ferry__mcap_buf_free(&w->metadata_indexes);
    if (w->lz4 != NULL)
        LZ4F_freeCompressionContext(w->lz4);
    ZSTD_freeCCtx(w->zstd);
    free(w);
}
