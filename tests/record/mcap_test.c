/*
 * The MCAP writer and reader (src/record/): a file of each compression written from iovecs and
 * read back message by message, through the chunk indexes and by a scan; a writer abandoned
 * mid-chunk (what SIGKILL leaves) reads up to its last complete chunk; a writer whose write failed
 * (a file size limit standing for a full disk) is cut back to its last complete chunk and finishes
 * a file that reads whole; every prefix of a small
 * file and every single-byte corruption of it opens or fails cleanly, and a corrupt chunk fails
 * its CRC.
 */
#include "mcap.h"

#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#define CHECK_EQ(a, b)                                                                             \
    do {                                                                                           \
        uint64_t a_ = (uint64_t)(a), b_ = (uint64_t)(b);                                           \
        if (a_ != b_) {                                                                            \
            fprintf(stderr, "%s:%d: %s == %" PRIu64 ", expected %s == %" PRIu64 "\n", __FILE__,    \
                    __LINE__, #a, a_, #b, b_);                                                     \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define BIG (300u * 1024u)
#define MESSAGES 40u

static uint8_t big[BIG];

static void fill(uint32_t i, size_t n)
{
    for (size_t k = 0; k < n; k++)
        big[k] = (uint8_t)(k * 7 + i * 13 + (k >> 9));
}

/* Message i: a 16-byte head, then i % 3 == 0 ? BIG bytes : 100 bytes of the pattern. */
static size_t msg_size(uint32_t i)
{
    return 16 + (i % 3 == 0 ? BIG : 100);
}

static char path[256];

static void write_file(ferry_mcap_compression comp, uint32_t count, bool finish)
{
    ferry_mcap_writer_options o;
    ferry_mcap_writer *w;
    uint16_t s, c0, c1;
    ferry_mcap_kv meta[] = {{"ferry_type", "test/raw"}, {"ferry_hash", "1234"}};
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

    CHECK(fd >= 0);
    memset(&o, 0, sizeof o);
    o.compression = comp;
    o.chunk_size = 512 * 1024;
    o.profile = "ros2";
    CHECK(ferry_mcap_writer_open(&w, fd, &o) == FERRY_OK);
    CHECK(ferry_mcap_writer_add_schema(w, "pkg/msg/T", "ros2msg", "int32 x\n", 8, &s) == FERRY_OK);
    CHECK_EQ(s, 1);
    CHECK(ferry_mcap_writer_add_channel(w, s, "/a", "cdr", NULL, 0, &c0) == FERRY_OK);
    CHECK(ferry_mcap_writer_add_channel(w, s, "/b", "ferry-raw", meta, 2, &c1) == FERRY_OK);
    for (uint32_t i = 0; i < count; i++) {
        uint8_t head[16];
        struct iovec iov[2];

        memset(head, (int)i, sizeof head);
        fill(i, msg_size(i) - 16);
        iov[0] = (struct iovec){head, sizeof head};
        iov[1] = (struct iovec){big, msg_size(i) - 16};
        CHECK(ferry_mcap_writer_write(w, i % 2 ? c1 : c0, i + 1, 1000 + i, 500 + i, iov, 2) ==
              FERRY_OK);
        /* A corrupted sample buffer afterwards must not matter: it was written or compressed. */
        memset(big, 0xee, msg_size(i) - 16);
    }
    if (finish) {
        ferry_mcap_kv kv[] = {{"dropped./a", "0"}};

        CHECK(ferry_mcap_writer_add_metadata(w, "ferry.record.stats", kv, 1) == FERRY_OK);
        CHECK(ferry_mcap_writer_close(w) == FERRY_OK);
    } else {
        ferry_mcap_writer_abandon(w);
    }
    close(fd);
}

typedef struct seen {
    uint32_t count;
    bool bad;
} seen;

static bool on_msg(void *arg, const ferry_mcap_message *m)
{
    seen *s = arg;
    uint32_t i = m->sequence - 1;

    if (i != s->count || m->size != msg_size(i) || m->log_time != 1000 + i ||
        m->publish_time != 500 + i || m->channel_id != (i % 2)) {
        s->bad = true;
        return false;
    }
    fill(i, m->size - 16);
    for (size_t k = 0; k < 16; k++)
        if (m->data[k] != (uint8_t)i)
            s->bad = true;
    if (memcmp(m->data + 16, big, m->size - 16) != 0)
        s->bad = true;
    s->count++;
    return !s->bad;
}

static void read_back(ferry_mcap_compression comp)
{
    ferry_mcap_reader *r;
    const ferry_mcap_info *in;
    char why[256];
    seen s = {0, false};

    write_file(comp, MESSAGES, true);
    CHECK(ferry_mcap_reader_open(&r, path, why, sizeof why) == FERRY_OK);
    in = ferry_mcap_reader_info(r);
    CHECK(in->has_summary && !in->truncated);
    CHECK(strcmp(in->profile, "ros2") == 0);
    CHECK(strncmp(in->library, "ferry ", 6) == 0);
    CHECK_EQ(in->message_count, MESSAGES);
    CHECK_EQ(in->start_time, 1000);
    CHECK_EQ(in->end_time, 1000 + MESSAGES - 1);
    CHECK_EQ(in->nschemas, 1);
    CHECK(strcmp(in->schemas[0].name, "pkg/msg/T") == 0 && in->schemas[0].size == 8);
    CHECK_EQ(in->nchannels, 2);
    CHECK(strcmp(in->channels[1].topic, "/b") == 0 && in->channels[1].nmetadata == 2);
    CHECK(strcmp(in->channels[1].metadata[0].value, "test/raw") == 0);
    CHECK_EQ(in->channels[0].messages, MESSAGES / 2);
    CHECK(in->nchunks > 1 && in->chunk_count == in->nchunks);
    CHECK(strcmp(in->chunks[0].compression, ferry_mcap_compression_name(comp)) == 0);
    CHECK_EQ(in->nmetadata, 1);
    CHECK(strcmp(in->metadata[0].name, "ferry.record.stats") == 0);
    CHECK(ferry_mcap_reader_messages(r, 0, UINT64_MAX, on_msg, &s, why, sizeof why) == FERRY_OK);
    CHECK(!s.bad);
    CHECK_EQ(s.count, MESSAGES);
    /* A time range skips chunks by their index. */
    s.count = 0;
    CHECK(ferry_mcap_reader_messages(r, 0, 1005, on_msg, &s, why, sizeof why) == FERRY_OK);
    CHECK_EQ(s.count, 6);
    ferry_mcap_reader_close(r);
}

static uint8_t *slurp(size_t *n)
{
    FILE *f = fopen(path, "rb");
    uint8_t *p;
    long size;

    CHECK(f != NULL);
    fseek(f, 0, SEEK_END);
    size = ftell(f);
    fseek(f, 0, SEEK_SET);
    p = malloc((size_t)size + 1);
    CHECK(p != NULL && fread(p, 1, (size_t)size, f) == (size_t)size);
    fclose(f);
    *n = (size_t)size;
    return p;
}

/* What SIGKILL leaves: the chunks closed so far, then a reserved header or nothing. */
static void abandoned(ferry_mcap_compression comp)
{
    ferry_mcap_reader *r;
    char why[256];
    seen s = {0, false};

    write_file(comp, 11, false); /* two chunks close (at messages 3 and 9), one stays open */
    CHECK(ferry_mcap_reader_open(&r, path, why, sizeof why) == FERRY_OK);
    CHECK(ferry_mcap_reader_info(r)->truncated && !ferry_mcap_reader_info(r)->has_summary);
    CHECK(ferry_mcap_reader_messages(r, 0, UINT64_MAX, on_msg, &s, why, sizeof why) == FERRY_OK);
    CHECK(!s.bad);
    CHECK_EQ(s.count, 10);
    CHECK_EQ(ferry_mcap_reader_info(r)->message_count, s.count);
    ferry_mcap_reader_close(r);
}

/* A full disk, played by RLIMIT_FSIZE (a write past it fails with EFBIG): the writer fails
 * mid-chunk, ferry_mcap_writer_cut takes the file back to its last complete chunk, and the file is
 * finished there, summary and all. */
static void cut_back(ferry_mcap_compression comp)
{
    ferry_mcap_writer_options o;
    ferry_mcap_writer *w;
    ferry_mcap_reader *r;
    struct rlimit old, lim;
    uint64_t kept[3];
    uint16_t s, c0, c1;
    uint32_t i;
    ferry_err err = FERRY_OK;
    char why[256];
    seen seen_msgs = {0, false};
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

    CHECK(fd >= 0);
    CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
    lim = old;
    lim.rlim_cur = 2u << 20; /* mid-way through a chunk */
    CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    memset(&o, 0, sizeof o);
    o.compression = comp;
    o.chunk_size = 512 * 1024;
    CHECK(ferry_mcap_writer_open(&w, fd, &o) == FERRY_OK);
    CHECK(ferry_mcap_writer_add_schema(w, "pkg/msg/T", "ros2msg", "int32 x\n", 8, &s) == FERRY_OK);
    CHECK(ferry_mcap_writer_add_channel(w, s, "/a", "cdr", NULL, 0, &c0) == FERRY_OK);
    CHECK(ferry_mcap_writer_add_channel(w, s, "/b", "ferry-raw", NULL, 0, &c1) == FERRY_OK);
    for (i = 0; i < 20000 && err == FERRY_OK; i++) {
        uint8_t head[16];
        struct iovec iov[2];

        memset(head, (int)i, sizeof head);
        fill(i, msg_size(i) - 16);
        iov[0] = (struct iovec){head, sizeof head};
        iov[1] = (struct iovec){big, msg_size(i) - 16};
        err = ferry_mcap_writer_write(w, i % 2 ? c1 : c0, i + 1, 1000 + i, 500 + i, iov, 2);
    }
    CHECK_EQ(err, FERRY_ESYS);
    CHECK(i > 10);
    CHECK(ferry_mcap_writer_cut(w, kept, 3) == FERRY_OK);
    CHECK(kept[0] + kept[1] < i && kept[0] + kept[1] > 3);
    CHECK_EQ(kept[2], 0);
    CHECK(ferry_mcap_writer_size(w) < lim.rlim_cur);
    /* A compressed chunk is written at once: the cut gives back only what its failed write got.
     * ferry record holds a reserve back for the summary and gives it back here; so does this test.
     */
    lim.rlim_cur += 1u << 20;
    CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    CHECK(ferry_mcap_writer_add_metadata(w, "ferry.record.stats", NULL, 0) == FERRY_OK);
    CHECK(ferry_mcap_writer_close(w) == FERRY_OK);
    close(fd);
    CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0);

    CHECK(ferry_mcap_reader_open(&r, path, why, sizeof why) == FERRY_OK);
    CHECK(ferry_mcap_reader_info(r)->has_summary && !ferry_mcap_reader_info(r)->truncated);
    CHECK_EQ(ferry_mcap_reader_info(r)->message_count, kept[0] + kept[1]);
    CHECK(ferry_mcap_reader_messages(r, 0, UINT64_MAX, on_msg, &seen_msgs, why, sizeof why) ==
          FERRY_OK);
    CHECK(!seen_msgs.bad);
    CHECK_EQ(seen_msgs.count, kept[0] + kept[1]);
    ferry_mcap_reader_close(r);
}

static bool count_only(void *arg, const ferry_mcap_message *m)
{
    (void)m;
    ((seen *)arg)->count++;
    return true;
}

/* Every prefix and many one-byte corruptions of a small file: never a crash (the sanitizer build
 * checks the reads); a flipped byte in a chunk's records fails its CRC. */
static void hostile(void)
{
    uint8_t *file;
    size_t n, crc_failures = 0;
    char why[256];

    write_file(FERRY_MCAP_ZSTD, 8, true);
    file = slurp(&n);
    for (size_t cut = 0; cut < n; cut++) {
        ferry_mcap_reader *r;
        seen s = {0, false};

        if (ferry_mcap_reader_open_mem(&r, file, cut, why, sizeof why) == FERRY_OK) {
            CHECK(ferry_mcap_reader_info(r)->truncated);
            ferry_mcap_reader_messages(r, 0, UINT64_MAX, count_only, &s, why, sizeof why);
            ferry_mcap_reader_close(r);
        }
    }
    for (size_t at = 0; at < n; at += 1 + at / 64) {
        for (int bit = 0; bit < 8; bit += 3) {
            ferry_mcap_reader *r;
            seen s = {0, false};

            file[at] ^= (uint8_t)(1u << bit);
            if (ferry_mcap_reader_open_mem(&r, file, n, why, sizeof why) == FERRY_OK) {
                if (ferry_mcap_reader_messages(r, 0, UINT64_MAX, count_only, &s, why, sizeof why) !=
                        FERRY_OK &&
                    strstr(why, "CRC") != NULL)
                    crc_failures++;
                ferry_mcap_reader_close(r);
            }
            file[at] ^= (uint8_t)(1u << bit);
        }
    }
    CHECK(crc_failures > 0);
    free(file);

    /* Not MCAP at all. */
    {
        ferry_mcap_reader *r;

        CHECK(ferry_mcap_reader_open_mem(&r, "hello world, not mcap", 21, why, sizeof why) ==
              FERRY_EPROTO);
        CHECK(strstr(why, "not an MCAP file") != NULL);
    }
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");

    snprintf(path, sizeof path, "%s/ferry-mcap-test-%d.mcap", tmp != NULL ? tmp : "/tmp",
             (int)getpid());
    read_back(FERRY_MCAP_NONE);
    read_back(FERRY_MCAP_LZ4);
    read_back(FERRY_MCAP_ZSTD);
    abandoned(FERRY_MCAP_NONE);
    abandoned(FERRY_MCAP_LZ4);
    signal(SIGXFSZ, SIG_IGN); /* a write past RLIMIT_FSIZE fails with EFBIG instead */
    cut_back(FERRY_MCAP_NONE);
    cut_back(FERRY_MCAP_ZSTD);
    hostile();
    unlink(path);
    printf("mcap_test: ok\n");
    return 0;
}
