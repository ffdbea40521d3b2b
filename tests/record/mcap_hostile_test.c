/*
 * Hostile MCAP files against the reader (src/record/mcap_read*.c), `ferry bag info` and
 * `ferry play`, each made here byte by byte:
 *
 *   duplicate_chunk_index  one message, its chunk listed 100,000 times by the summary: the
 *                          summary is ignored with a reason, play publishes 1 message
 *   overlapping_indexes    chunk indexes that overlap or point past the data section, metadata
 *                          indexes that list one record 20,000 times: each summary ignored
 *   bomb_listed_twice      a zstd chunk of 256 MiB (8 KiB in the file) listed 10,000 times:
 *                          play ends after reading it twice (open, play), not 10,000 times
 *   zstd_bomb_memory       a 32 KiB chunk that inflates to 1 GiB, without a summary: refused
 *                          within the reader's memory_max (and its peak RSS stays small), and
 *                          bag info is not OOM-killed in a memory cgroup of 512 MiB
 *   description_flood      channels with a 64 KiB topic (refused: over FERRY_MCAP_NAME_MAX), and
 *                          256 channels of 4 MiB of metadata each in zstd chunks: refused at
 *                          FERRY_MCAP_INFO_MAX, bag info's peak RSS under 512 MiB
 *   schema_after_chunk     a schema read from a decompressed chunk keeps its bytes when later
 *                          chunks reuse or replace the chunk buffer (a use-after-free before)
 *   many_channels          65,536 channels, 4 million messages and 262,144 statistics entries:
 *                          bag info ends in seconds (lookups by table and binary search)
 *   cancel                 a walk over 400 chunks of 256 MiB (no message: no callback) that a
 *                          timer's handler cancels, and bag info scanning them: SIGTERM ends it
 *                          within seconds
 *   play_sigterm           play --loop over those chunks: SIGTERM ends it within seconds
 *
 *   mcap_hostile_test FERRY_CLI [CASE...]  runs the cases, or those named
 *   mcap_hostile_test --write DIR     writes the hostile files, full size, to measure by hand
 *   mcap_hostile_test --seeds DIR     writes small ones (<= 2 KiB) for the fuzz_mcap corpus
 */
#include "mcap.h"
#include "mcap_codec.h"
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zstd.h>

#define KIB ((uint64_t)1 << 10)
#define MIB ((uint64_t)1 << 20)
#define GIB ((uint64_t)1 << 30)
#define CGROUP_LIMIT (512 * MIB)
/* Time a command may take for what is work of a second or less when nothing else runs. */
#define CLI_BOUND_S (30 * TU_SLOWDOWN)

typedef ferry__mcap_buf buf;

static const char *cli; /* the ferry program */

/* --- building files ---------------------------------------------------------------------- */

static void put_bytes(buf *b, const void *p, size_t n)
{
    ferry__mcap_put_u32(b, (uint32_t)n);
    ferry__mcap_put(b, p, n);
}

static void file_start(buf *b)
{
    size_t at;

    memset(b, 0, sizeof *b);
    ferry__mcap_put(b, FERRY_MCAP_MAGIC, FERRY_MCAP_MAGIC_SIZE);
    at = ferry__mcap_record_begin(b, FERRY_MCAP_OP_HEADER);
    ferry__mcap_put_str(b, "ros2");
    ferry__mcap_put_str(b, "mcap_hostile_test");
    ferry__mcap_record_end(b, at);
}

static void put_schema(buf *b, uint16_t id, const char *name, const void *data, size_t n)
{
    size_t at = ferry__mcap_record_begin(b, FERRY_MCAP_OP_SCHEMA);

    ferry__mcap_put_u16(b, id);
    ferry__mcap_put_str(b, name);
    ferry__mcap_put_str(b, "ros2msg");
    put_bytes(b, data, n);
    ferry__mcap_record_end(b, at);
}

/* A channel; its metadata: nkv keys "k<i>", each value vsize bytes of 'v'; a ferry-raw channel
 * gets the type play needs instead. */
static void put_channel(buf *b, uint16_t id, const char *topic, const char *encoding, unsigned nkv,
                        size_t vsize)
{
    size_t at = ferry__mcap_record_begin(b, FERRY_MCAP_OP_CHANNEL), m;

    ferry__mcap_put_u16(b, id);
    ferry__mcap_put_u16(b, 0);
    ferry__mcap_put_str(b, topic);
    ferry__mcap_put_str(b, encoding);
    m = ferry__mcap_len32_begin(b);
    if (strcmp(encoding, "ferry-raw") == 0) {
        ferry__mcap_put_str(b, "ferry.type");
        ferry__mcap_put_str(b, "test/hostile");
        ferry__mcap_put_str(b, "ferry.type_hash");
        ferry__mcap_put_str(b, "0x1234");
    }
    for (unsigned i = 0; i < nkv; i++) {
        char key[16];

        snprintf(key, sizeof key, "k%u", i);
        ferry__mcap_put_str(b, key);
        ferry__mcap_put_u32(b, (uint32_t)vsize);
        if (ferry__mcap_buf_reserve(b, vsize)) {
            memset(b->p + b->len, 'v', vsize);
            b->len += vsize;
        }
    }
    ferry__mcap_len32_end(b, m);
    ferry__mcap_record_end(b, at);
}

static void put_message(buf *b, uint16_t channel, uint32_t seq, uint64_t t, const void *data,
                        size_t n)
{
    size_t at = ferry__mcap_record_begin(b, FERRY_MCAP_OP_MESSAGE);

    ferry__mcap_put_u16(b, channel);
    ferry__mcap_put_u32(b, seq);
    ferry__mcap_put_u64(b, t);
    ferry__mcap_put_u64(b, t);
    ferry__mcap_put(b, data, n);
    ferry__mcap_record_end(b, at);
}

static void put_metadata(buf *b, const char *name, const char *const *kv, size_t n)
{
    size_t at = ferry__mcap_record_begin(b, FERRY_MCAP_OP_METADATA), m;

    ferry__mcap_put_str(b, name);
    m = ferry__mcap_len32_begin(b);
    for (size_t i = 0; i < 2 * n; i++)
        ferry__mcap_put_str(b, kv[i]);
    ferry__mcap_len32_end(b, m);
    ferry__mcap_record_end(b, at);
}

typedef struct chunk_at {
    uint64_t offset, length, csize, usize;
    const char *compression;
} chunk_at;

/* A Chunk of records (already compressed for "zstd"), its records' CRC when crc. */
static chunk_at put_chunk(buf *b, const char *compression, const void *records, size_t n,
                          uint64_t usize, uint32_t crc)
{
    chunk_at c = {b->len, 0, n, usize, compression};
    size_t at = ferry__mcap_record_begin(b, FERRY_MCAP_OP_CHUNK);

    ferry__mcap_put_u64(b, 0);          /* start time */
    ferry__mcap_put_u64(b, UINT64_MAX); /* end time */
    ferry__mcap_put_u64(b, usize);
    ferry__mcap_put_u32(b, crc);
    ferry__mcap_put_str(b, compression);
    ferry__mcap_put_u64(b, n);
    ferry__mcap_put(b, records, n);
    ferry__mcap_record_end(b, at);
    c.length = b->len - c.offset;
    return c;
}

/* A chunk of the records in r, compressed with zstd (level 1). */
static chunk_at put_zstd_chunk(buf *b, const buf *r)
{
    size_t cap = ZSTD_compressBound(r->len), n;
    void *z = malloc(cap);
    chunk_at c;

    TU_CHECK_MSG(z != NULL, "out of memory for %zu bytes", cap);
    n = ZSTD_compress(z, cap, r->p, r->len, 1);
    TU_CHECK_MSG(!ZSTD_isError(n), "zstd: %s", ZSTD_getErrorName(n));
    c = put_chunk(b, "zstd", z, n, r->len, ferry__mcap_crc32(0, r->p, r->len));
    free(z);
    return c;
}

/* The largest multiple of 9 (an empty record: opcode 0, length 0) up to n. */
static uint64_t records_of_zeros(uint64_t n)
{
    return n / 9 * 9;
}

/* A chunk of usize zero bytes (empty records of the unknown opcode 0) as a zstd frame of RLE
 * blocks, 4 bytes per 128 KiB: what zstd makes of zeros, 32 KiB per GiB. */
static chunk_at put_zero_chunk(buf *b, uint64_t usize)
{
    buf z;
    uint64_t left = usize;
    chunk_at c;

    memset(&z, 0, sizeof z);
    ferry__mcap_put_u32(&z, 0xFD2FB528u); /* magic */
    ferry__mcap_put_u8(&z, 0xE0);         /* an 8-byte content size, single segment */
    ferry__mcap_put_u64(&z, usize);
    do {
        uint32_t n = left > 128 * KIB ? (uint32_t)(128 * KIB) : (uint32_t)left;
        uint32_t head;

        left -= n;
        head = (left == 0 ? 1u : 0u) | (1u << 1) | (n << 3); /* last, RLE, size */
        ferry__mcap_put_u8(&z, (uint8_t)head);
        ferry__mcap_put_u8(&z, (uint8_t)(head >> 8));
        ferry__mcap_put_u8(&z, (uint8_t)(head >> 16));
        ferry__mcap_put_u8(&z, 0);
    } while (left > 0);
    TU_CHECK(!z.failed);
    c = put_chunk(b, "zstd", z.p, z.len, usize, 0);
    ferry__mcap_buf_free(&z);
    return c;
}

static void put_chunk_index(buf *b, const chunk_at *c)
{
    size_t at = ferry__mcap_record_begin(b, FERRY_MCAP_OP_CHUNK_INDEX);

    ferry__mcap_put_u64(b, 0);
    ferry__mcap_put_u64(b, UINT64_MAX);
    ferry__mcap_put_u64(b, c->offset);
    ferry__mcap_put_u64(b, c->length);
    ferry__mcap_put_u32(b, 0); /* message index offsets */
    ferry__mcap_put_u64(b, 0); /* message index length */
    ferry__mcap_put_str(b, c->compression);
    ferry__mcap_put_u64(b, c->csize);
    ferry__mcap_put_u64(b, c->usize);
    ferry__mcap_record_end(b, at);
}

static void put_metadata_index(buf *b, uint64_t offset, uint64_t length)
{
    size_t at = ferry__mcap_record_begin(b, FERRY_MCAP_OP_METADATA_INDEX);

    ferry__mcap_put_u64(b, offset);
    ferry__mcap_put_u64(b, length);
    ferry__mcap_put_str(b, "m");
    ferry__mcap_record_end(b, at);
}

static void put_statistics(buf *b, uint64_t messages, uint32_t channels, uint32_t chunks)
{
    size_t at = ferry__mcap_record_begin(b, FERRY_MCAP_OP_STATISTICS);

    ferry__mcap_put_u64(b, messages);
    ferry__mcap_put_u16(b, 0);
    ferry__mcap_put_u32(b, channels);
    ferry__mcap_put_u32(b, 0);
    ferry__mcap_put_u32(b, 0);
    ferry__mcap_put_u32(b, chunks);
    ferry__mcap_put_u64(b, 1000);
    ferry__mcap_put_u64(b, 1000);
    ferry__mcap_put_u32(b, 0);
    ferry__mcap_record_end(b, at);
}

/* Data End; returns where the summary starts. */
static uint64_t data_end(buf *b)
{
    size_t at = ferry__mcap_record_begin(b, FERRY_MCAP_OP_DATA_END);

    ferry__mcap_put_u32(b, 0);
    ferry__mcap_record_end(b, at);
    return b->len;
}

/* The footer (its CRC over the summary) and the closing magic. */
static void file_end(buf *b, uint64_t summary_start)
{
    ferry__mcap_put_u8(b, FERRY_MCAP_OP_FOOTER);
    ferry__mcap_put_u64(b, 20);
    ferry__mcap_put_u64(b, summary_start);
    ferry__mcap_put_u64(b, 0);
    TU_CHECK(!b->failed);
    ferry__mcap_put_u32(b, ferry__mcap_crc32(0, b->p + summary_start, b->len - summary_start));
    ferry__mcap_put(b, FERRY_MCAP_MAGIC, FERRY_MCAP_MAGIC_SIZE);
    TU_CHECK_MSG(!b->failed, "out of memory building a file");
}

/* --- the files ------------------------------------------------------------------------------ */

/* One message of a ferry-raw channel in an uncompressed chunk; the summary lists the chunk
 * `listed` times. */
static void make_duplicate_chunk_index(buf *b, unsigned listed)
{
    buf r;
    chunk_at c;
    uint64_t s;
    static const char payload[] = "the only message";

    file_start(b);
    memset(&r, 0, sizeof r);
    put_channel(&r, 0, "/dup", "ferry-raw", 0, 0);
    put_message(&r, 0, 1, 1000, payload, sizeof payload);
    c = put_chunk(b, "", r.p, r.len, r.len, ferry__mcap_crc32(0, r.p, r.len));
    ferry__mcap_buf_free(&r);
    s = data_end(b);
    put_channel(b, 0, "/dup", "ferry-raw", 0, 0);
    put_statistics(b, 1, 1, listed);
    for (unsigned i = 0; i < listed; i++)
        put_chunk_index(b, &c);
    file_end(b, s);
}

/* Two chunks; the summary has a third index starting inside the first. */
static void make_overlapping_chunk_index(buf *b)
{
    chunk_at c[3];
    uint64_t s;

    file_start(b);
    c[0] = put_chunk(b, "", NULL, 0, 0, 0);
    c[1] = put_chunk(b, "", NULL, 0, 0, 0);
    c[2] = c[0];
    c[2].offset += 9;
    c[2].length = c[1].offset + c[1].length - c[2].offset;
    c[2].csize = 0;
    s = data_end(b);
    put_statistics(b, 0, 0, 3);
    for (int i = 0; i < 3; i++)
        put_chunk_index(b, &c[i]);
    file_end(b, s);
}

/* A chunk index past the data section (into the summary itself). */
static void make_outside_chunk_index(buf *b)
{
    chunk_at c;
    uint64_t s;

    file_start(b);
    c = put_chunk(b, "", NULL, 0, 0, 0);
    s = data_end(b);
    put_statistics(b, 0, 0, 1);
    c.offset = s;
    put_chunk_index(b, &c);
    file_end(b, s);
}

/* One Metadata record of `entries` entries, listed `listed` times by the summary. */
static void make_duplicate_metadata_index(buf *b, unsigned entries, unsigned listed)
{
    const char **kv = calloc(2 * (size_t)entries, sizeof *kv);
    char *text = malloc((size_t)entries * 16);
    uint64_t at, len, s;

    TU_CHECK(kv != NULL && text != NULL);
    for (unsigned i = 0; i < entries; i++) {
        snprintf(text + (size_t)i * 16, 16, "key%u", i);
        kv[2 * i] = text + (size_t)i * 16;
        kv[2 * i + 1] = "value";
    }
    file_start(b);
    at = b->len;
    put_metadata(b, "hostile", kv, entries);
    len = b->len - at;
    free(kv);
    free(text);
    s = data_end(b);
    put_statistics(b, 0, 0, 0);
    for (unsigned i = 0; i < listed; i++)
        put_metadata_index(b, at, len);
    file_end(b, s);
}

/* A zstd chunk of `size` bytes of empty records, listed `listed` times by the summary. */
static void make_bomb_listed(buf *b, uint64_t size, unsigned listed)
{
    chunk_at c;
    uint64_t s;

    file_start(b);
    c = put_zero_chunk(b, records_of_zeros(size));
    s = data_end(b);
    put_statistics(b, 0, 0, listed);
    for (unsigned i = 0; i < listed; i++)
        put_chunk_index(b, &c);
    file_end(b, s);
}

/* `n` zstd chunks of `size` bytes of empty records each; with a summary or without (no footer:
 * a reader scans it). */
static void make_bombs(buf *b, uint64_t size, unsigned n, bool summary)
{
    chunk_at *c = calloc(n, sizeof *c);
    uint64_t s;

    TU_CHECK(c != NULL);
    file_start(b);
    for (unsigned i = 0; i < n; i++)
        c[i] = put_zero_chunk(b, records_of_zeros(size));
    if (summary) {
        s = data_end(b);
        put_statistics(b, 0, 0, n);
        for (unsigned i = 0; i < n; i++)
            put_chunk_index(b, &c[i]);
        file_end(b, s);
    }
    free(c);
}

/* `n` channels with a topic of `topic_size` bytes, in zstd chunks of 256 MiB at most; no
 * summary. */
static void make_long_topics(buf *b, unsigned n, size_t topic_size)
{
    char *topic = malloc(topic_size + 1);
    buf r;

    TU_CHECK(topic != NULL);
    memset(topic, 't', topic_size);
    topic[0] = '/';
    topic[topic_size] = '\0';
    memset(&r, 0, sizeof r);
    file_start(b);
    for (unsigned i = 0; i < n; i++) {
        put_channel(&r, (uint16_t)i, topic, "cdr", 0, 0);
        if (r.len + topic_size + 64 > 256 * MIB || i + 1 == n) {
            put_zstd_chunk(b, &r);
            r.len = 0;
        }
    }
    free(topic);
    ferry__mcap_buf_free(&r);
}

/* `chunks` zstd chunks of `per_chunk` channels each, each channel with `nkv` metadata entries
 * of `vsize` bytes; no summary. */
static void make_channel_flood(buf *b, unsigned chunks, unsigned per_chunk, unsigned nkv,
                               size_t vsize)
{
    buf r;

    file_start(b);
    memset(&r, 0, sizeof r);
    for (unsigned c = 0; c < chunks; c++) {
        r.len = 0;
        for (unsigned i = 0; i < per_chunk; i++) {
            char topic[32];
            unsigned id = c * per_chunk + i;

            snprintf(topic, sizeof topic, "/flood/%u", id);
            put_channel(&r, (uint16_t)id, topic, "cdr", nkv, vsize);
        }
        TU_CHECK_MSG(!r.failed, "out of memory building a chunk");
        put_zstd_chunk(b, &r);
    }
    ferry__mcap_buf_free(&r);
}

#define SCHEMA_TEXT "int32 x\n"

/* Schema 1 in a small zstd chunk, then chunks of other records: one of the same size (the
 * reader's chunk buffer is reused: overwritten) when `grow` is false, else a larger one (the
 * buffer is replaced: freed) then one of the same size again. No summary. */
static void make_schema_then_chunks(buf *b, bool grow)
{
    buf r;
    size_t first;

    file_start(b);
    memset(&r, 0, sizeof r);
    put_schema(&r, 1, "pkg/msg/T", SCHEMA_TEXT, strlen(SCHEMA_TEXT));
    put_channel(&r, 0, "/t", "cdr", 0, 0);
    first = r.len;
    put_zstd_chunk(b, &r);
    if (grow) {
        r.len = 0;
        for (int i = 0; i < 64; i++)
            put_message(&r, 0, (uint32_t)i, 1000, "xxxxxxxx", 8);
        put_zstd_chunk(b, &r);
    }
    /* Records of the first chunk's size, other bytes where the schema's were. */
    r.len = 0;
    while (first - r.len >= 2 * 31)
        put_message(&r, 0, 7, 1000, NULL, 0);
    put_message(&r, 0, 7, 1000, "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz", first - r.len - 31);
    TU_CHECK_MSG(r.len == first, "filler of %zu bytes, want %zu", r.len, first);
    put_zstd_chunk(b, &r);
    ferry__mcap_buf_free(&r);
}

/* `channels` channels "/c<i>" (ferry-raw) and `messages` empty messages on the last one, in zstd
 * chunks, then recorder statistics for each topic and one unrecorded topic per channel, 4096
 * entries a Metadata record. No summary. */
static void make_many_channels(buf *b, unsigned channels, unsigned messages)
{
    const char *kv[2 * 4096];
    char(*keys)[24] = malloc(4096 * sizeof *keys);
    static const char *const what[] = {"bytes", "dropped", "recorded"};
    buf r;
    unsigned k = 0;

    TU_CHECK(keys != NULL);
    file_start(b);
    memset(&r, 0, sizeof r);
    for (unsigned i = 0; i < channels; i++) {
        char topic[24];

        snprintf(topic, sizeof topic, "/c%05u", i);
        put_channel(&r, (uint16_t)i, topic, "ferry-raw", 0, 0);
    }
    for (unsigned m = 0; m < messages; m++) {
        put_message(&r, (uint16_t)(channels - 1), 1, 1000, NULL, 0);
        if (r.len >= 256 * MIB) {
            put_zstd_chunk(b, &r);
            r.len = 0;
        }
    }
    TU_CHECK_MSG(!r.failed, "out of memory building a chunk");
    if (r.len > 0)
        put_zstd_chunk(b, &r);
    ferry__mcap_buf_free(&r);
    for (unsigned i = 0; i < channels; i++) {
        for (unsigned w = 0; w < 4; w++) {
            if (w < 3)
                snprintf(keys[k], sizeof keys[k], "/c%05u.%s", i, what[w]);
            else
                snprintf(keys[k], sizeof keys[k], "/n%05u.recorded", i);
            kv[2 * k] = keys[k];
            kv[2 * k + 1] = "1";
            if (++k == 4096) {
                put_metadata(b, "ferry.record.stats", kv, k);
                k = 0;
            }
        }
    }
    if (k > 0)
        put_metadata(b, "ferry.record.stats", kv, k);
    free(keys);
    TU_CHECK_MSG(!b->failed, "out of memory building a file");
}

static void save(const buf *b, const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    size_t done = 0;

    TU_CHECK_MSG(fd >= 0, "%s: %s", path, strerror(errno));
    while (done < b->len) {
        ssize_t n = write(fd, b->p + done, b->len - done);

        TU_CHECK_MSG(n > 0, "writing %s: %s", path, strerror(errno));
        done += (size_t)n;
    }
    TU_CHECK(close(fd) == 0);
}

/* tu_dir()/name */
static const char *in_dir(const char *name)
{
    static char path[PATH_MAX];

    snprintf(path, sizeof path, "%s/%s", tu_dir(), name);
    return path;
}

/* --- running the reader and the program ------------------------------------------------------ */

static bool count_message(void *arg, const ferry_mcap_message *m)
{
    (void)m;
    (*(uint64_t *)arg)++;
    return true;
}

typedef struct run {
    int status;      /* wait status */
    double seconds;  /* from start (or from the signal, when one was sent) to exit */
    long maxrss_mib; /* the peak resident set */
    char out[8192];  /* the first bytes of stdout and stderr */
    char tail[4096]; /* and the last */
} run;

/* Whether pid has a handler for sig (/proc/PID/status SigCgt). */
static bool catches(pid_t pid, int sig)
{
    char path[64], line[256];
    bool yes = false;
    FILE *f;

    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    f = fopen(path, "re");
    if (f == NULL)
        return false;
    while (fgets(line, sizeof line, f) != NULL)
        if (strncmp(line, "SigCgt:", 7) == 0)
            yes = (strtoull(line + 7, NULL, 16) >> (sig - 1)) & 1;
    fclose(f);
    return yes;
}

static double since_s(ferry_time t)
{
    return (double)tu_since(t) / 1e9;
}

/* Runs cli with args (NULL-terminated) in cgroup (a directory, or NULL), its address space
 * limited to as_limit bytes (0: not), its output in a file; with sig, sends sig once it has a
 * handler for it (and after delay_ms more). Kills it and fails after bound_s seconds. */
static void run_cli(run *res, const char *const *args, const char *cgroup, uint64_t as_limit,
                    int sig, int delay_ms, double bound_s)
{
    const char *argv[32];
    char out_path[PATH_MAX];
    int argc = 0, fd;
    pid_t pid;
    ferry_time t0 = ferry_now();
    bool sent = false;
    struct rusage ru;
    ssize_t n;

    argv[argc++] = cli;
    while (*args != NULL && argc < 31)
        argv[argc++] = *args++;
    argv[argc] = NULL;
    snprintf(out_path, sizeof out_path, "%s/cli.out", tu_dir());
    fflush(NULL);
    pid = fork();
    TU_CHECK_MSG(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

        if (cgroup != NULL) {
            char procs[PATH_MAX + 16], me[32];
            int p;

            snprintf(procs, sizeof procs, "%s/cgroup.procs", cgroup);
            snprintf(me, sizeof me, "%d\n", (int)getpid());
            p = open(procs, O_WRONLY);
            if (p < 0 || write(p, me, strlen(me)) != (ssize_t)strlen(me))
                _exit(126);
            close(p);
        }
        if (as_limit != 0) {
            struct rlimit rl = {as_limit, as_limit};

            if (setrlimit(RLIMIT_AS, &rl) != 0)
                _exit(126);
        }
        if (o < 0 || dup2(o, 1) < 0 || dup2(o, 2) < 0)
            _exit(126);
        execv(cli, (char *const *)argv);
        _exit(127);
    }
    for (;;) {
        pid_t w = wait4(pid, &res->status, WNOHANG, &ru);

        TU_CHECK_MSG(w >= 0, "wait4: %s", strerror(errno));
        if (w == pid)
            break;
        if (sig != 0 && !sent && catches(pid, sig)) {
            tu_sleep_ns(delay_ms * TU_MS);
            kill(pid, sig);
            sent = true;
            t0 = ferry_now();
        }
        if (since_s(t0) > bound_s) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            TU_FAIL("ferry %s %s still runs after %.0f s%s", argv[1], argv[2], bound_s,
                    sent ? " since the signal" : "");
        }
        tu_sleep_ns(sent ? TU_MS : 20 * TU_MS);
    }
    res->seconds = since_s(t0);
    res->maxrss_mib = ru.ru_maxrss / 1024;
    fd = open(out_path, O_RDONLY | O_CLOEXEC);
    TU_CHECK(fd >= 0);
    n = read(fd, res->out, sizeof res->out - 1);
    res->out[n > 0 ? n : 0] = '\0';
    n = pread(fd, res->tail, sizeof res->tail - 1,
              lseek(fd, 0, SEEK_END) > (off_t)sizeof res->tail
                  ? lseek(fd, 0, SEEK_END) - (off_t)(sizeof res->tail - 1)
                  : 0);
    res->tail[n > 0 ? n : 0] = '\0';
    close(fd);
    printf("    ferry");
    for (int i = 1; i < argc; i++)
        printf(" %s", strrchr(argv[i], '/') ? strrchr(argv[i], '/') + 1 : argv[i]);
    printf("%s%s: %s %d in %.2f s, peak RSS %ld MiB\n", cgroup ? " (in the cgroup)" : "",
           as_limit ? " (address space limited)" : "", WIFEXITED(res->status) ? "exit" : "signal",
           WIFEXITED(res->status) ? WEXITSTATUS(res->status) : WTERMSIG(res->status), res->seconds,
           res->maxrss_mib);
}

#define CHECK_EXIT(res, code)                                                                      \
    TU_CHECK_MSG(WIFEXITED((res).status) && WEXITSTATUS((res).status) == (code),                   \
                 "%s: status 0x%x, expected exit %d; its output:\n%s",                             \
                 WIFSIGNALED((res).status) ? strsignal(WTERMSIG((res).status)) : "exit",           \
                 (unsigned)(res).status, (code), (res).out)
#define CHECK_OUT(res, text)                                                                       \
    TU_CHECK_MSG(strstr((res).out, (text)) != NULL, "expected \"%s\" in the output:\n%s", (text),  \
                 (res).out)

/* A memory cgroup of `limit` bytes below this process's (v2 where it has the memory controller,
 * else v1's), where systemd mounts them; false when none can be made (not root, no
 * controller). */
static bool cgroup_make(char *dir, size_t cap, uint64_t limit)
{
    char line[512], value[32];
    FILE *f = fopen("/proc/self/cgroup", "re");
    bool made = false;

    if (f == NULL)
        return false;
    snprintf(value, sizeof value, "%" PRIu64, limit);
    while (!made && fgets(line, sizeof line, f) != NULL) {
        char *controllers = strchr(line, ':'),
             *path = controllers ? strchr(controllers + 1, ':') : NULL;
        bool v2;
        int fd;

        if (path == NULL)
            continue;
        path[strcspn(path, "\n")] = '\0';
        *path++ = '\0';
        v2 = strcmp(line, "0") == 0;
        if (!v2 && strstr(controllers + 1, "memory") == NULL)
            continue;
        snprintf(dir, cap, "/sys/fs/cgroup%s%s/ferry-mcap-%d", v2 ? "" : "/memory",
                 strcmp(path, "/") == 0 ? "" : path, (int)getpid());
        if (mkdir(dir, 0755) != 0)
            continue;
        snprintf(line, sizeof line, "%s/%s", dir, v2 ? "memory.max" : "memory.limit_in_bytes");
        fd = open(line, O_WRONLY | O_CLOEXEC);
        made = fd >= 0 && write(fd, value, strlen(value)) == (ssize_t)strlen(value);
        if (fd >= 0)
            close(fd);
        if (!made)
            rmdir(dir);
    }
    fclose(f);
    return made;
}

static void cgroup_remove(const char *dir)
{
    /* The last charges of a process that just exited may take a moment to go. */
    for (int i = 0; i < 200 && rmdir(dir) != 0; i++)
        tu_sleep_ns(10 * TU_MS);
}

/* --- the cases ------------------------------------------------------------------------------- */

static int test_duplicate_chunk_index(void)
{
    buf b;
    ferry_mcap_reader *r;
    const ferry_mcap_info *in;
    char why[256], domain[16], file[PATH_MAX];
    uint64_t count = 0;
    run res;

    make_duplicate_chunk_index(&b, 100000);
    TU_OK(ferry_mcap_reader_open_mem(&r, b.p, b.len, why, sizeof why));
    in = ferry_mcap_reader_info(r);
    TU_CHECK_MSG(!in->has_summary && strstr(in->summary_ignored, "twice") != NULL,
                 "summary used (%d) or ignored for another reason: \"%s\"", in->has_summary,
                 in->summary_ignored);
    TU_EQ_U64(in->nchunks, 1);
    TU_OK(ferry_mcap_reader_messages(r, 0, UINT64_MAX, count_message, &count, why, sizeof why));
    TU_EQ_U64(count, 1);
    ferry_mcap_reader_close(r);

    snprintf(file, sizeof file, "%s", in_dir("dup.mcap"));
    save(&b, file);
    printf("    one message, its chunk listed 100,000 times: %zu bytes\n", b.len);
    ferry__mcap_buf_free(&b);
    snprintf(domain, sizeof domain, "%u", tu_domain());
    {
        const char *args[] = {"play",   file,       "--rate", "0", "--dir",
                              tu_dir(), "--domain", domain,   NULL};

        run_cli(&res, args, NULL, 0, 0, 0, CLI_BOUND_S);
    }
    CHECK_EXIT(res, 0);
    CHECK_OUT(res, "published 1,");
    {
        const char *args[] = {"bag", "info", file, NULL};

        run_cli(&res, args, NULL, 0, 0, 0, CLI_BOUND_S);
    }
    CHECK_EXIT(res, 0);
    CHECK_OUT(res, "summary ignored: its chunk indexes list the chunk at offset");
    CHECK_OUT(res, "Messages:          1\n");
    unlink(file);
    unlink(in_dir("cli.out"));
    return 0;
}

static int test_overlapping_indexes(void)
{
    buf b;
    ferry_mcap_reader *r;
    const ferry_mcap_info *in;
    char why[256];

    make_overlapping_chunk_index(&b);
    TU_OK(ferry_mcap_reader_open_mem(&r, b.p, b.len, why, sizeof why));
    in = ferry_mcap_reader_info(r);
    TU_CHECK_MSG(!in->has_summary && strstr(in->summary_ignored, "overlap") != NULL,
                 "summary used (%d) or ignored for another reason: \"%s\"", in->has_summary,
                 in->summary_ignored);
    TU_EQ_U64(in->nchunks, 2);
    ferry_mcap_reader_close(r);
    ferry__mcap_buf_free(&b);

    make_outside_chunk_index(&b);
    TU_OK(ferry_mcap_reader_open_mem(&r, b.p, b.len, why, sizeof why));
    in = ferry_mcap_reader_info(r);
    TU_CHECK_MSG(!in->has_summary && strstr(in->summary_ignored, "outside the data") != NULL,
                 "summary used (%d) or ignored for another reason: \"%s\"", in->has_summary,
                 in->summary_ignored);
    ferry_mcap_reader_close(r);
    ferry__mcap_buf_free(&b);

    /* 20,000 listings of a record of 4096 entries: 80 million entries (several GB) read, were
     * each listing read. */
    make_duplicate_metadata_index(&b, 4096, 20000);
    TU_OK(ferry_mcap_reader_open_mem(&r, b.p, b.len, why, sizeof why));
    in = ferry_mcap_reader_info(r);
    TU_CHECK_MSG(!in->has_summary && strstr(in->summary_ignored, "metadata") != NULL,
                 "summary used (%d) or ignored for another reason: \"%s\"", in->has_summary,
                 in->summary_ignored);
    TU_EQ_U64(in->nmetadata, 1);
    TU_EQ_U64(in->metadata[0].n, 4096);
    printf("    summaries ignored, scanned instead: \"%s\"\n", in->summary_ignored);
    ferry_mcap_reader_close(r);
    ferry__mcap_buf_free(&b);
    return 0;
}

static int test_bomb_listed_twice(void)
{
    buf b;
    char domain[16], file[PATH_MAX];
    run res;

    make_bomb_listed(&b, 256 * MIB, 10000);
    snprintf(file, sizeof file, "%s", in_dir("bomb-listed.mcap"));
    save(&b, file);
    printf("    a chunk of 256 MiB listed 10,000 times: %zu bytes\n", b.len);
    ferry__mcap_buf_free(&b);
    snprintf(domain, sizeof domain, "%u", tu_domain());
    {
        const char *args[] = {"play",   file,       "--rate", "0", "--dir",
                              tu_dir(), "--domain", domain,   NULL};

        run_cli(&res, args, NULL, 0, 0, 0, CLI_BOUND_S);
    }
    if (WIFEXITED(res.status) && WEXITSTATUS(res.status) == 1 &&
        strstr(res.out, "may take only") != NULL) {
        printf("    not 256 MiB of memory to spare: skipped\n");
        unlink(file);
        unlink(in_dir("cli.out"));
        return TU_SKIP;
    }
    CHECK_EXIT(res, 0);
    CHECK_OUT(res, "published 0,");
    unlink(file);
    unlink(in_dir("cli.out"));
    return 0;
}

/* In a child: opens the bomb with memory_max 64 MiB; exits 0 when refused with the limit named
 * and the peak RSS under 64 MiB. */
static int bomb_in_child(void *arg)
{
    const buf *b = arg;
    ferry_mcap_reader_options o;
    ferry_mcap_reader *r = NULL;
    char why[256];
    struct rusage ru;

    memset(&o, 0, sizeof o);
    o.memory_max = 64 * MIB;
    TU_ERR(ferry_mcap_reader_open_mem_with(&r, b->p, b->len, &o, why, sizeof why), FERRY_ELIMIT);
    TU_CHECK_MSG(strstr(why, "over its limit of 64 MiB") != NULL, "why: %s", why);
    TU_CHECK(getrusage(RUSAGE_SELF, &ru) == 0);
    printf("    reader, memory_max 64 MiB: \"%s\"; peak RSS %ld MiB\n", why, ru.ru_maxrss / 1024);
    TU_CMP_I64(ru.ru_maxrss / 1024, <, 64);
    return 0;
}

static int test_zstd_bomb_memory(void)
{
    buf b;
    char file[PATH_MAX], cg[PATH_MAX];
    run res;

    make_bombs(&b, GIB, 1, false);
    printf("    a chunk of 1 GiB in %zu bytes, no summary\n", b.len);
    TU_CHILD_OK(tu_fork(bomb_in_child, &b, 60));
    snprintf(file, sizeof file, "%s", in_dir("bomb.mcap"));
    save(&b, file);
    ferry__mcap_buf_free(&b);
    {
        const char *args[] = {"bag", "info", file, NULL};

        /* The address space limited as `prlimit --as` does: the allocation fails, cleanly (not
         * with a sanitizer, whose shadow memory needs terabytes of it). */
        if (TU_SLOWDOWN == 1) {
            run_cli(&res, args, NULL, CGROUP_LIMIT, 0, 0, CLI_BOUND_S);
            CHECK_EXIT(res, 1);
            CHECK_OUT(res, "bomb.mcap: chunk at offset");
        }
        if (!cgroup_make(cg, sizeof cg, CGROUP_LIMIT)) {
            printf("    no writable memory cgroup (v1 or v2): the cgroup part skipped\n");
        } else {
            /* Where the kernel's charge would call the OOM killer: the reader refuses first. */
            run_cli(&res, args, cg, 0, 0, 0, CLI_BOUND_S);
            cgroup_remove(cg);
            CHECK_EXIT(res, 1);
            CHECK_OUT(res, "may take only");
            TU_CMP_I64(res.maxrss_mib, <, CGROUP_LIMIT / MIB);
        }
    }
    unlink(file);
    unlink(in_dir("cli.out"));
    return 0;
}

static int test_description_flood(void)
{
    buf b;
    ferry_mcap_reader *r = NULL;
    char why[256], file[PATH_MAX], cg[PATH_MAX];
    run res;

    /* The reported file: channels with 64 KiB topics (4 GiB of them, were 65,536 kept). */
    make_long_topics(&b, 64, 65536);
    TU_ERR(ferry_mcap_reader_open_mem(&r, b.p, b.len, why, sizeof why), FERRY_ELIMIT);
    TU_CHECK_MSG(strstr(why, "a topic of 65536 bytes, over the limit of 1024") != NULL, "why: %s",
                 why);
    printf("    64 KiB topics: \"%s\"\n", why);
    ferry__mcap_buf_free(&b);

    /* Every name within its limit, but 1 GiB of channel metadata in all. */
    make_channel_flood(&b, 32, 8, 64, 64 * KIB);
    printf("    256 channels of 4 MiB of metadata in %zu bytes\n", b.len);
    TU_ERR(ferry_mcap_reader_open_mem(&r, b.p, b.len, why, sizeof why), FERRY_ELIMIT);
    TU_CHECK_MSG(strstr(why, "need more than 256 MiB") != NULL, "why: %s", why);
    snprintf(file, sizeof file, "%s", in_dir("flood.mcap"));
    save(&b, file);
    ferry__mcap_buf_free(&b);
    {
        const char *args[] = {"bag", "info", file, NULL};

        run_cli(&res, args, NULL, 0, 0, 0, CLI_BOUND_S);
        CHECK_EXIT(res, 1);
        CHECK_OUT(res, "need more than 256 MiB");
        TU_CMP_I64(res.maxrss_mib, <, CGROUP_LIMIT / MIB);
        if (cgroup_make(cg, sizeof cg, CGROUP_LIMIT)) {
            run_cli(&res, args, cg, 0, 0, 0, CLI_BOUND_S);
            cgroup_remove(cg);
            CHECK_EXIT(res, 1);
        }
    }
    unlink(file);
    unlink(in_dir("cli.out"));
    return 0;
}

static int test_schema_after_chunk(void)
{
    for (int grow = 0; grow < 2; grow++) {
        buf b;
        ferry_mcap_reader *r;
        const ferry_mcap_schema *s;
        char why[256];
        uint64_t count = 0;

        make_schema_then_chunks(&b, grow);
        TU_OK(ferry_mcap_reader_open_mem(&r, b.p, b.len, why, sizeof why));
        s = ferry_mcap_reader_schema(r, 1);
        TU_CHECK(s != NULL);
        TU_EQ_STR(s->name, "pkg/msg/T");
        TU_EQ_U64(s->size, strlen(SCHEMA_TEXT));
        /* Read after the chunks that followed it were decompressed (AddressSanitizer: a
         * heap-use-after-free when the data pointed into the chunk buffer). */
        TU_CHECK_MSG(memcmp(s->data, SCHEMA_TEXT, s->size) == 0, "schema data \"%.*s\"",
                     (int)s->size, (const char *)s->data);
        TU_OK(ferry_mcap_reader_messages(r, 0, UINT64_MAX, count_message, &count, why, sizeof why));
        TU_CHECK_MSG(memcmp(s->data, SCHEMA_TEXT, s->size) == 0, "schema data \"%.*s\"",
                     (int)s->size, (const char *)s->data);
        ferry_mcap_reader_close(r);
        ferry__mcap_buf_free(&b);
    }
    return 0;
}

static int test_many_channels(void)
{
    buf b;
    ferry_mcap_reader *r;
    char why[256], file[PATH_MAX];
    uint64_t count = 0;
    ferry_time t0;
    run res;

    make_many_channels(&b, 65536, 4000000);
    printf("    65,536 channels, 4,000,000 messages, 262,144 statistics: %zu bytes\n", b.len);
    t0 = ferry_now();
    TU_OK(ferry_mcap_reader_open_mem(&r, b.p, b.len, why, sizeof why));
    TU_EQ_U64(ferry_mcap_reader_info(r)->nchannels, 65536);
    TU_EQ_U64(ferry_mcap_reader_info(r)->channels[65535].messages, 4000000);
    TU_OK(ferry_mcap_reader_messages(r, 0, UINT64_MAX, count_message, &count, why, sizeof why));
    TU_EQ_U64(count, 4000000);
    ferry_mcap_reader_close(r);
    printf("    reader: open and walk in %.2f s\n", since_s(t0));
    TU_CHECK_MSG(since_s(t0) < CLI_BOUND_S, "the reader took %.1f s", since_s(t0));
    snprintf(file, sizeof file, "%s", in_dir("many.mcap"));
    save(&b, file);
    ferry__mcap_buf_free(&b);
    {
        const char *args[] = {"bag", "info", file, NULL};

        run_cli(&res, args, NULL, 0, 0, 0, CLI_BOUND_S);
    }
    CHECK_EXIT(res, 0);
    CHECK_OUT(res, "Messages:          4000000\n");
    /* The statistics found: the topics without a channel, in key order, the last one last. */
    TU_CHECK_MSG(strstr(res.tail, "Not stored:        /n65534  recorder dropped -1\n"
                                  "Not stored:        /n65535  recorder dropped -1\n") != NULL,
                 "the end of the output:\n%s", res.tail);
    unlink(file);
    unlink(in_dir("cli.out"));
    return 0;
}

/* In a child: a walk over bombs that a timer's signal cancels (the flag set by its handler). */
static volatile sig_atomic_t stop;

static void on_alarm(int sig)
{
    (void)sig;
    stop = 1;
}

static int cancel_in_child(void *arg)
{
    const buf *b = arg;
    ferry_mcap_reader_options o;
    ferry_mcap_reader *r;
    char why[256];
    uint64_t count = 0;
    struct itimerval it = {{0, 0}, {0, 200000}};
    ferry_time t0;

    memset(&o, 0, sizeof o);
    o.cancel = &stop;
    signal(SIGALRM, on_alarm);
    TU_OK(ferry_mcap_reader_open_mem_with(&r, b->p, b->len, &o, why, sizeof why));
    TU_CHECK(ferry_mcap_reader_info(r)->has_summary);
    t0 = ferry_now();
    TU_CHECK(setitimer(ITIMER_REAL, &it, NULL) == 0);
    TU_OK(ferry_mcap_reader_messages(r, 0, UINT64_MAX, count_message, &count, why, sizeof why));
    TU_CHECK_MSG(stop == 1, "the walk of 400 chunks of 256 MiB ended before the signal");
    printf("    reader: a walk cancelled 0.2 s in returned after %.2f s\n", since_s(t0));
    TU_CHECK_MSG(since_s(t0) < CLI_BOUND_S, "the walk went on for %.1f s", since_s(t0));
    ferry_mcap_reader_close(r);

    /* Cancelled before it starts, an open that scans says so. */
    b = (const buf *)((const char *)arg + sizeof(buf));
    errno = 0;
    TU_ERR(ferry_mcap_reader_open_mem_with(&r, b->p, b->len, &o, why, sizeof why), FERRY_ESYS);
    TU_CHECK_MSG(errno == EINTR && strcmp(why, "interrupted") == 0, "errno %d, why \"%s\"", errno,
                 why);
    return 0;
}

/* The reader's cancel flag, set by a signal handler, and bag info's. */
static int test_cancel(void)
{
    buf b[2];
    char scan[PATH_MAX];
    run res;

    make_bombs(&b[0], 256 * MIB, 400, true);
    make_bombs(&b[1], 256 * MIB, 400, false);
    printf("    400 chunks of 256 MiB: %zu bytes\n", b[0].len);
    TU_CHILD_OK(tu_fork(cancel_in_child, b, 600));
    snprintf(scan, sizeof scan, "%s", in_dir("bombs-scan.mcap"));
    save(&b[1], scan);
    ferry__mcap_buf_free(&b[0]);
    ferry__mcap_buf_free(&b[1]);
    {
        const char *args[] = {"bag", "info", scan, NULL};

        /* Its scan reads 100 GiB. */
        run_cli(&res, args, NULL, 0, SIGTERM, 500, CLI_BOUND_S);
    }
    CHECK_EXIT(res, 1);
    CHECK_OUT(res, "interrupted");
    unlink(scan);
    unlink(in_dir("cli.out"));
    return 0;
}

/* play sets the reader's cancel flag from its SIGTERM handler. */
static int test_play_sigterm(void)
{
    buf b;
    char domain[16], file[PATH_MAX];
    run res;

    make_bombs(&b, 256 * MIB, 400, true);
    snprintf(file, sizeof file, "%s", in_dir("bombs.mcap"));
    save(&b, file);
    ferry__mcap_buf_free(&b);
    snprintf(domain, sizeof domain, "%u", tu_domain());
    {
        const char *args[] = {"play",  file,     "--rate",   "0",    "--loop",
                              "--dir", tu_dir(), "--domain", domain, NULL};

        /* Each pass reads 100 GiB and hands out no message: only the reader's look at the flag
         * ends it soon. */
        run_cli(&res, args, NULL, 0, SIGTERM, 500, CLI_BOUND_S);
    }
    CHECK_EXIT(res, 0);
    unlink(file);
    unlink(in_dir("cli.out"));
    return 0;
}

/* --- writing the files ------------------------------------------------------------------------ */

static int write_files(const char *dir, bool seeds)
{
    int n = 0;
    buf b;
    char path[PATH_MAX];

#define FILE_OF(name_, ...)                                                                        \
    do {                                                                                           \
        ferry__mcap_buf_free(&b);                                                                  \
        __VA_ARGS__;                                                                               \
        snprintf(path, sizeof path, "%s/%s", dir, name_);                                          \
        save(&b, path);                                                                            \
        printf("%s: %zu bytes\n", path, b.len);                                                    \
        n++;                                                                                       \
    } while (0)
    memset(&b, 0, sizeof b);
    if (seeds) {
        FILE_OF("hostile_dup_chunk_index.mcap", make_duplicate_chunk_index(&b, 16));
        FILE_OF("hostile_overlap_chunk_index.mcap", make_overlapping_chunk_index(&b));
        FILE_OF("hostile_outside_chunk_index.mcap", make_outside_chunk_index(&b));
        FILE_OF("hostile_dup_metadata_index.mcap", make_duplicate_metadata_index(&b, 8, 16));
        FILE_OF("hostile_bomb_listed.mcap", make_bomb_listed(&b, 2 * MIB, 8));
        FILE_OF("hostile_zstd_bomb.mcap", make_bombs(&b, 4 * MIB, 1, false));
        FILE_OF("hostile_long_topic.mcap", make_long_topics(&b, 4, 1500));
        FILE_OF("hostile_channel_flood.mcap", make_channel_flood(&b, 2, 8, 4, 512));
        FILE_OF("hostile_schema_reuse.mcap", make_schema_then_chunks(&b, false));
        FILE_OF("hostile_schema_freed.mcap", make_schema_then_chunks(&b, true));
        FILE_OF("hostile_many_channels.mcap", make_many_channels(&b, 12, 32));
    } else {
        FILE_OF("dup_chunk_index.mcap", make_duplicate_chunk_index(&b, 100000));
        FILE_OF("dup_metadata_index.mcap", make_duplicate_metadata_index(&b, 4096, 20000));
        FILE_OF("bomb_listed.mcap", make_bomb_listed(&b, GIB, 2500));
        FILE_OF("zstd_bomb.mcap", make_bombs(&b, GIB, 1, false));
        FILE_OF("long_topics.mcap", make_long_topics(&b, 65535, 65536));
        FILE_OF("channel_flood.mcap", make_channel_flood(&b, 32, 8, 64, 64 * KIB));
        FILE_OF("schema_freed.mcap", make_schema_then_chunks(&b, true));
        FILE_OF("many_channels.mcap", make_many_channels(&b, 65536, 4000000));
        FILE_OF("bombs.mcap", make_bombs(&b, 256 * MIB, 400, true));
        FILE_OF("bombs_scan.mcap", make_bombs(&b, 256 * MIB, 400, false));
    }
    ferry__mcap_buf_free(&b);
#undef FILE_OF
    return n > 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(void);
    } cases[] = {
        {"duplicate_chunk_index", test_duplicate_chunk_index},
        {"overlapping_indexes", test_overlapping_indexes},
        {"schema_after_chunk", test_schema_after_chunk},
        {"zstd_bomb_memory", test_zstd_bomb_memory},
        {"description_flood", test_description_flood},
        {"bomb_listed_twice", test_bomb_listed_twice},
        {"many_channels", test_many_channels},
        {"cancel", test_cancel},
        {"play_sigterm", test_play_sigterm},
    };
    int results[sizeof cases / sizeof cases[0]], n = 0;

    if (argc == 3 && (strcmp(argv[1], "--write") == 0 || strcmp(argv[1], "--seeds") == 0))
        return write_files(argv[2], strcmp(argv[1], "--seeds") == 0);
    if (argc < 2) {
        fprintf(stderr, "usage: %s FERRY_CLI [CASE...] | --write DIR | --seeds DIR\n", argv[0]);
        return 2;
    }
    cli = argv[1];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bool chosen = argc == 2;

        for (int a = 2; a < argc; a++)
            chosen = chosen || strcmp(argv[a], cases[i].name) == 0;
        if (chosen)
            results[n++] = tu_run_isolated(cases[i].name, cases[i].fn);
    }
    if (n == 0) {
        fprintf(stderr, "no such case\n");
        return 2;
    }
    return tu_results(results, n, 0);
}
