/*
 * What the ferry commands share: where they work, option value parsing, error messages, the
 * synthetic frame format and latency statistics.
 */
#include "cli.h"
#include "util.h"

#include <dirent.h>
#include <getopt.h>
#include <sys/stat.h>
#include <unistd.h>

#include <errno.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---------------------------------------------------------------------------------------------
 * Option values
 * ------------------------------------------------------------------------------------------- */

/* The library's limits, as options_resolve in src/core/publisher.c and subscriber.c checks them:
 * the CLI checks first, so an error names the option instead of saying "invalid argument". */
#define LIB_PAGE 4096u                     /* FERRY__PAGE; a pool takes at least two */
#define LIB_SAMPLE_MAX ((uint64_t)1 << 40) /* max_sample_size */
#define LIB_POOL_MAX ((uint64_t)1 << 42)   /* pool_bytes */
#define LIB_HISTORY_MAX 4096u              /* publisher and subscriber history */
#define LIB_CHUNKS_MAX 65536u              /* a publisher's max_chunks */
#define LIB_SUBSCRIBERS_MAX 1024u          /* a publisher's max_subscribers */
#define LIB_DEPTH_MAX 4096u                /* a subscriber's depth */
/* Where size_t is narrower than 64 bits, it caps the byte options lower. */
#define BYTES_MAX(v) ((uint64_t)SIZE_MAX < (v) ? (uint64_t)SIZE_MAX : (v))

/* The help of the options most commands take (CLI_OPTION_DOMAIN, CLI_OPTION_DIR). */
const char cli_help_domain[] = "domain number 0..1023 (default $FERRY_DOMAIN, else 0)";
const char cli_help_dir[] = "root of the domain directories (default $FERRY_DIR, else\n"
                            "/dev/shm/ferry-<uid>)";

const cli_range cli_ranges[CLI_R_END] = {
    [CLI_R_DOMAIN] = {.name = "--domain", .kind = CLI_WHOLE, .hi = FERRY_DOMAIN_MAX},
    [CLI_R_DOMAIN_ENV] = {.name = "FERRY_DOMAIN", .kind = CLI_WHOLE, .hi = FERRY_DOMAIN_MAX},
    [CLI_R_COUNT] = {.name = "--count", .kind = CLI_WHOLE, .hi = UINT64_MAX},
    [CLI_R_TIMEOUT] = {.name = "--timeout", .kind = CLI_REAL, .real_hi = 1e9, .unit = "s"},
    [CLI_R_PUB_SIZE] = {.name = "--size",
                        .kind = CLI_BYTES,
                        .lo = sizeof(cli_frame_header),
                        .hi = BYTES_MAX(LIB_SAMPLE_MAX),
                        .unit = "bytes"},
    /* Below 0.01 Hz a frame takes minutes; above 100 kHz the period is too short to keep. */
    [CLI_R_PUB_RATE] = {.name = "--rate",
                        .kind = CLI_REAL,
                        .real_lo = 0.01,
                        .real_hi = 1e5,
                        .unit = "Hz",
                        .zero = "as fast as possible"},
    [CLI_R_PUB_WAIT_SUBSCRIBERS] = {.name = "--wait-subscribers",
                                    .kind = CLI_WHOLE,
                                    .hi = LIB_SUBSCRIBERS_MAX},
    [CLI_R_PUB_HISTORY] = {.name = "--history",
                           .kind = CLI_WHOLE,
                           .hi = LIB_HISTORY_MAX,
                           .note = "must also be below --chunks"},
    [CLI_R_PUB_CHUNKS] = {.name = "--chunks", .kind = CLI_WHOLE, .lo = 1, .hi = LIB_CHUNKS_MAX},
    [CLI_R_PUB_SHARE] = {.name = "--share",
                         .kind = CLI_WHOLE,
                         .lo = 1,
                         .hi = LIB_CHUNKS_MAX,
                         .note = "must also be at most --chunks"},
    [CLI_R_PUB_SHARE_BYTES] = {.name = "--share-bytes",
                               .kind = CLI_BYTES,
                               .lo = 1,
                               .hi = BYTES_MAX(LIB_POOL_MAX),
                               .unit = "bytes"},
    [CLI_R_PUB_POOL] = {.name = "--pool",
                        .kind = CLI_BYTES,
                        .lo = 2 * LIB_PAGE,
                        .hi = BYTES_MAX(LIB_POOL_MAX),
                        .unit = "bytes"},
    /* Sides are the 32-bit width and height of the message headers (include/ferry/msg.h); the
     * frame they make must also fit --size's range. */
    [CLI_R_PUB_IMAGE] =
        {.name = "--image", .kind = CLI_SIDES, .lo = 1, .hi = UINT32_MAX, .unit = "pixels a side"},
    [CLI_R_PUB_CLOUD] =
        {.name = "--cloud", .kind = CLI_SIDES, .lo = 1, .hi = UINT32_MAX, .unit = "points a side"},
    /* At least a synthetic frame header; at most what keeps a cloud, with room for its header,
     * within the 32-bit sizes of the ROS 2 wire format (ferry bridge). */
    [CLI_R_PUB_CLOUD_POINTS] = {.name = "--cloud",
                                .kind = CLI_WHOLE,
                                .lo = sizeof(cli_frame_header) / CLI_CLOUD_POINT_STEP,
                                .hi = (UINT32_MAX - 4096) / CLI_CLOUD_POINT_STEP,
                                .unit = "points"},
    [CLI_R_SUB_DEPTH] = {.name = "--depth", .kind = CLI_WHOLE, .lo = 1, .hi = LIB_DEPTH_MAX},
    [CLI_R_SUB_HISTORY] = {.name = "--history", .kind = CLI_WHOLE, .hi = LIB_HISTORY_MAX},
    [CLI_R_HZ_WINDOW] = {.name = "--window", .kind = CLI_WHOLE, .lo = 2, .hi = 1000000},
    [CLI_R_DELAY_WINDOW] = {.name = "--window", .kind = CLI_WHOLE, .lo = 1, .hi = 1000000},
    /* The highest domain id whose ports the DDS default port mapping can still give. */
    [CLI_R_BRIDGE_DDS_DOMAIN] = {.name = "--dds-domain", .kind = CLI_WHOLE, .hi = 232},
    [CLI_R_BRIDGE_SECONDS] = {.name = "--seconds", .kind = CLI_REAL, .real_hi = 1e9, .unit = "s"},
    [CLI_R_DEMO_SECONDS] = {.name = "--seconds", .kind = CLI_WHOLE, .lo = 1, .hi = 3600},
    [CLI_R_GPU_DEVICE] = {.name = "--device", .kind = CLI_WHOLE, .hi = 1024},
    [CLI_R_RECORD_SECONDS] = {.name = "--seconds",
                              .kind = CLI_REAL,
                              .real_hi = 1e9,
                              .unit = "s",
                              .zero = "until a signal"},
    [CLI_R_RECORD_MAX_SIZE] = {.name = "--max-size",
                               .kind = CLI_BYTES,
                               .lo = 1 << 20,
                               .hi = UINT64_MAX,
                               .unit = "bytes",
                               .zero = "no limit"},
    [CLI_R_RECORD_SPLIT_SIZE] = {.name = "--split-size",
                                 .kind = CLI_BYTES,
                                 .lo = 1 << 20,
                                 .hi = UINT64_MAX,
                                 .unit = "bytes"},
    [CLI_R_RECORD_CHUNK_SIZE] =
        {.name = "--chunk-size", .kind = CLI_BYTES, .lo = 4096, .hi = 1 << 30, .unit = "bytes"},
    [CLI_R_RECORD_NICE] = {.name = "--nice", .kind = CLI_WHOLE, .hi = 19},
    [CLI_R_PLAY_RATE] = {.name = "--rate",
                         .kind = CLI_REAL,
                         .real_lo = 0.001,
                         .real_hi = 1000,
                         .zero = "as fast as possible"},
    [CLI_R_PLAY_TIME] = {.name = "--start/--end", .kind = CLI_REAL, .real_hi = 1e9, .unit = "s"},
    [CLI_R_VIEW_PORT] = {.name = "--port",
                         .kind = CLI_WHOLE,
                         .hi = 65535,
                         .note = "0 picks a free port"},
    [CLI_R_VIEW_MAX_RATE] = {.name = "--max-rate",
                             .kind = CLI_REAL,
                             .real_lo = 0.1,
                             .real_hi = 1e4,
                             .unit = "Hz",
                             .zero = "every sample"},
    [CLI_R_VIEW_JPEG_QUALITY] = {.name = "--jpeg-quality", .kind = CLI_WHOLE, .lo = 1, .hi = 100},
    [CLI_R_VIEW_MAX_CONNS] = {.name = "--max-connections",
                              .kind = CLI_WHOLE,
                              .lo = 1,
                              .hi = 65535,
                              .note = "also at most half of ulimit -n, less 64"},
};

typedef enum parsed {
    PARSED,
    NOT_A_NUMBER,
    OUT_OF_RANGE, /* a number, but beyond what the type holds (or, a real, too near 0) */
} parsed;

static parsed parse_whole(const char *text, bool suffix, uint64_t *out)
{
    char *end = NULL;
    unsigned long long v;
    unsigned shift = 0;
    int err;

    /* strtoull accepts leading blanks and a minus sign; a count or a size takes neither. */
    if (text == NULL || text[0] < '0' || text[0] > '9')
        return NOT_A_NUMBER;
    errno = 0;
    v = strtoull(text, &end, 10);
    err = errno;
    if (suffix) {
        switch (*end) {
        case 'k':
        case 'K':
            shift = 10;
            end++;
            break;
        case 'm':
        case 'M':
            shift = 20;
            end++;
            break;
        case 'g':
        case 'G':
            shift = 30;
            end++;
            break;
        default:
            break;
        }
    }
    if (*end != '\0')
        return NOT_A_NUMBER;
    if (err == ERANGE || v > (UINT64_MAX >> shift))
        return OUT_OF_RANGE;
    *out = (uint64_t)v << shift;
    return PARSED;
}

static parsed parse_real(const char *text, double *out)
{
    char *end = NULL;
    double v;

    if (text == NULL || text[0] == '\0' || text[0] == ' ' || text[0] == '\t')
        return NOT_A_NUMBER;
    errno = 0;
    v = strtod(text, &end);
    if (end == text || *end != '\0' || isnan(v))
        return NOT_A_NUMBER;
    /* Underflow too: 1e-400 would otherwise read as 0, which can mean something else. */
    if (errno == ERANGE)
        return OUT_OF_RANGE;
    *out = v;
    return PARSED;
}

/* A byte count the way options take it: "8k", "1024G", or plain bytes. */
static void format_bytes(char *buf, size_t cap, uint64_t v)
{
    static const char suffix[] = "GMk";
    unsigned i;

    for (i = 0; i < 3; i++) {
        uint64_t unit = (uint64_t)1 << (30 - 10 * i);

        if (v >= unit && v % unit == 0) {
            snprintf(buf, cap, "%" PRIu64 "%c", v / unit, suffix[i]);
            return;
        }
    }
    snprintf(buf, cap, "%" PRIu64, v);
}

/* "ferry CMD: NAME TEXT is out of range: LO..HI UNIT, or 0 for ZERO (NOTE)", or "is not a
 * number: ..." when text is no number at all. */
static void range_message(const char *cmd, const cli_range *r, const char *text, bool not_number)
{
    static const char *const not_what[] = {
        [CLI_WHOLE] = "is not a whole number",
        [CLI_BYTES] = "is not a size",
        [CLI_REAL] = "is not a number",
        [CLI_SIDES] = "is not WIDTHxHEIGHT",
    };
    char lo[32], hi[32];

    if (r->kind == CLI_BYTES) {
        format_bytes(lo, sizeof lo, r->lo);
        format_bytes(hi, sizeof hi, r->hi);
    } else if (r->kind == CLI_REAL) {
        snprintf(lo, sizeof lo, "%.15g", r->real_lo);
        snprintf(hi, sizeof hi, "%.15g", r->real_hi);
    } else {
        snprintf(lo, sizeof lo, "%" PRIu64, r->lo);
        snprintf(hi, sizeof hi, "%" PRIu64, r->hi);
    }
    cli_fail(cmd, 2, "%s %s %s: %s..%s%s%s%s%s%s%s%s", r->name,
             text == NULL || text[0] == '\0' ? "''" : text,
             not_number ? not_what[r->kind] : "is out of range", lo, hi, r->unit ? " " : "",
             r->unit ? r->unit : "", r->zero ? ", or 0 for " : "", r->zero ? r->zero : "",
             r->note ? " (" : "", r->note ? r->note : "", r->note ? ")" : "");
}

int cli_range_fail(const char *cmd, const cli_range *r, const char *text)
{
    range_message(cmd, r, text, false);
    return 2;
}

bool cli_parse_whole(const char *cmd, const cli_range *r, const char *text, uint64_t *out)
{
    uint64_t v = 0;
    parsed p = parse_whole(text, r->kind == CLI_BYTES, &v);

    if (p == PARSED && ((v >= r->lo && v <= r->hi) || (r->zero != NULL && v == 0))) {
        *out = v;
        return true;
    }
    range_message(cmd, r, text, p == NOT_A_NUMBER);
    return false;
}

bool cli_parse_bytes(const char *cmd, const cli_range *r, const char *text, size_t *out)
{
    uint64_t v;

    /* The table caps every byte range at SIZE_MAX. */
    if (!cli_parse_whole(cmd, r, text, &v))
        return false;
    *out = (size_t)v;
    return true;
}

bool cli_parse_real(const char *cmd, const cli_range *r, const char *text, double *out)
{
    double v = 0.0;
    parsed p = parse_real(text, &v);

    if (p == PARSED && ((v >= r->real_lo && v <= r->real_hi) || (r->zero != NULL && v == 0.0))) {
        *out = v;
        return true;
    }
    range_message(cmd, r, text, p == NOT_A_NUMBER);
    return false;
}

bool cli_parse_sides(const char *cmd, const cli_range *r, const char *text, uint32_t *width,
                     uint32_t *height)
{
    const char *x = text != NULL ? strchr(text, 'x') : NULL;
    char first[32];
    uint64_t w = 0, h = 0;
    parsed pw, ph;

    if (x == NULL || (size_t)(x - text) >= sizeof first) {
        range_message(cmd, r, text, true);
        return false;
    }
    memcpy(first, text, (size_t)(x - text));
    first[x - text] = '\0';
    pw = parse_whole(first, false, &w);
    ph = parse_whole(x + 1, false, &h);
    if (pw == PARSED && ph == PARSED && w >= r->lo && w <= r->hi && h >= r->lo && h <= r->hi) {
        *width = (uint32_t)w;
        *height = (uint32_t)h;
        return true;
    }
    range_message(cmd, r, text, pw == NOT_A_NUMBER || ph == NOT_A_NUMBER);
    return false;
}

bool cli_parse_domain(const char *cmd, const char *text, uint32_t *out)
{
    uint64_t v;

    if (!cli_parse_whole(cmd, &cli_ranges[CLI_R_DOMAIN], text, &v))
        return false;
    *out = (uint32_t)v;
    return true;
}

bool cli_parse_dir(const char *cmd, const char *text, const char **out)
{
    if (text == NULL || text[0] == '\0') {
        cli_fail(cmd, 2,
                 "--dir is empty: give the path of a directory, or leave --dir out for "
                 "the default");
        return false;
    }
    *out = text;
    return true;
}

bool cli_where_from_env(const char *cmd, cli_where *w)
{
    const char *dir = getenv("FERRY_DIR");
    const char *domain = getenv("FERRY_DOMAIN");
    uint64_t v;

    /* Set but empty is a mistake rather than a wish for the default, as with --dir. */
    if (dir != NULL && dir[0] == '\0') {
        cli_fail(cmd, 2,
                 "FERRY_DIR is set but empty: give a directory, or unset it for "
                 "/dev/shm/ferry-<uid>");
        return false;
    }
    w->dir = dir;
    w->domain = 0;
    if (domain != NULL && domain[0] != '\0') {
        if (!cli_parse_whole(cmd, &cli_ranges[CLI_R_DOMAIN_ENV], domain, &v))
            return false;
        w->domain = (uint32_t)v;
    }
    return true;
}

/* "ferry CMD: " (or "ferry: ") and the message, without the line's end. */
__attribute__((format(printf, 2, 0))) static void say(const char *cmd, const char *fmt, va_list ap)
{
    if (cmd != NULL && cmd[0] != '\0')
        fprintf(stderr, "ferry %s: ", cmd);
    else
        fputs("ferry: ", stderr);
    vfprintf(stderr, fmt, ap);
}

int cli_fail(const char *cmd, int status, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    say(cmd, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return status;
}

const char *cli_memory_why(int e)
{
    if (e == ENOSPC || e == EDQUOT)
        return "the file system of the domain directory is full: a tmpfs such as /dev/shm "
               "(df shows it)";
    return "memory: MemAvailable or a memory cgroup's limit";
}

int cli_fail_err(const char *cmd, int status, ferry_err err, const char *fmt, ...)
{
    int saved = errno;
    va_list ap;

    va_start(ap, fmt);
    say(cmd, fmt, ap);
    va_end(ap);
    fprintf(stderr, ": %s", ferry_strerror(err));
    if (err == FERRY_ESYS)
        fprintf(stderr, " (%s)", strerror(saved));
    if (err == FERRY_ENOMEM)
        fprintf(stderr, " (%s)", cli_memory_why(saved));
    fputc('\n', stderr);
    errno = saved;
    return status;
}

ferry_err cli_node(const cli_where *w, const char *name, ferry_node **out)
{
    ferry_node_options o;
    ferry_err err;

    ferry_node_options_init(&o);
    o.dir = w->dir;
    o.domain = w->domain;
    o.name = name;
    err = ferry_node_create(out, &o);
    if (err != FERRY_OK) {
        int saved = errno;

        fprintf(stderr, "ferry %s: cannot create a node in %s (domain %u): %s", name ? name : "",
                w->dir ? w->dir : "the default directory", (unsigned)w->domain,
                ferry_strerror(err));
        if (err == FERRY_ESYS)
            fprintf(stderr, " (%s)", strerror(saved));
        fputc('\n', stderr);
        errno = saved;
    }
    return err;
}

/* ---------------------------------------------------------------------------------------------
 * Synthetic frames
 *
 * The pattern is one 64-bit word per 8 bytes, word i = seed ^ (i * K) with the seed mixed from
 * the sequence: cheap to write, different for every frame, and any moved, stale or torn word
 * changes the checksum. A fill with full == false writes the header only, so such a frame keeps
 * the pattern (and checksum) of the last full fill of the buffer; verification checks the
 * checksum against the payload, never the pattern against the sequence.
 * ------------------------------------------------------------------------------------------- */

#define MIX_K 0x9e3779b97f4a7c15ULL
#define XX_P1 0x9e3779b185ebca87ULL
#define XX_P2 0xc2b2ae3d27d4eb4fULL
#define XX_P3 0x165667b19e3779f9ULL
#define XX_P4 0x85ebca77c2b2ae63ULL
#define XX_P5 0x27d4eb2f165667c5ULL

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

static uint64_t rotl64(uint64_t x, unsigned r)
{
    return (x << r) | (x >> (64u - r));
}

static uint64_t load64(const unsigned char *p)
{
    uint64_t v;

    memcpy(&v, p, sizeof v);
    return v;
}

static uint64_t xx_round(uint64_t acc, uint64_t input)
{
    acc += input * XX_P2;
    acc = rotl64(acc, 31);
    return acc * XX_P1;
}

static uint64_t xx_merge(uint64_t h, uint64_t acc)
{
    h ^= xx_round(0, acc);
    return h * XX_P1 + XX_P4;
}

/* An xxHash64-style sum: four independent lanes keep the multiplier busy, so a 6 MB frame
 * costs about what reading it from memory does. */
typedef struct sum_state {
    uint64_t v[4];
} sum_state;

static void sum_init(sum_state *s)
{
    s->v[0] = XX_P1 + XX_P2;
    s->v[1] = XX_P2;
    s->v[2] = 0;
    s->v[3] = 0 - XX_P1;
}

/* Ends a sum of n bytes whose whole 32-byte blocks went through s; rest points at the others. */
static uint64_t sum_finish(const sum_state *s, const unsigned char *rest, size_t n)
{
    const unsigned char *p = rest, *end = rest + n % 32;
    uint64_t h;

    if (n >= 32) {
        h = rotl64(s->v[0], 1) + rotl64(s->v[1], 7) + rotl64(s->v[2], 12) + rotl64(s->v[3], 18);
        h = xx_merge(h, s->v[0]);
        h = xx_merge(h, s->v[1]);
        h = xx_merge(h, s->v[2]);
        h = xx_merge(h, s->v[3]);
    } else {
        h = XX_P5;
    }
    h += (uint64_t)n;
    while (p + 8 <= end) {
        h ^= xx_round(0, load64(p));
        h = rotl64(h, 27) * XX_P1 + XX_P4;
        p += 8;
    }
    if (p < end) {
        uint64_t tail = 0;

        memcpy(&tail, p, (size_t)(end - p));
        h ^= tail * XX_P5;
        h = rotl64(h, 23) * XX_P2 + XX_P3;
    }
    h ^= h >> 33;
    h *= XX_P2;
    h ^= h >> 29;
    h *= XX_P3;
    h ^= h >> 32;
    return h;
}

static uint64_t checksum_bytes(const unsigned char *p, size_t n)
{
    size_t blocks = n / 32, b;
    sum_state s;

    sum_init(&s);
    for (b = 0; b < blocks; b++, p += 32) {
        s.v[0] = xx_round(s.v[0], load64(p));
        s.v[1] = xx_round(s.v[1], load64(p + 8));
        s.v[2] = xx_round(s.v[2], load64(p + 16));
        s.v[3] = xx_round(s.v[3], load64(p + 24));
    }
    return sum_finish(&s, p, n);
}

uint64_t cli_frame_checksum(const void *frame, size_t size)
{
    if (frame == NULL || size < sizeof(cli_frame_header))
        return 0;
    return checksum_bytes((const unsigned char *)frame + sizeof(cli_frame_header),
                          size - sizeof(cli_frame_header));
}

/* Writes the pattern and returns its checksum, summing the words as they are made rather than
 * reading the frame back. */
static uint64_t fill_pattern(unsigned char *p, size_t n, uint64_t sequence)
{
    uint64_t seed = mix64(sequence ^ CLI_FRAME_MAGIC);
    size_t blocks = n / 32, words = n / 8, b, i;
    unsigned char *q = p;
    uint64_t step = 0;
    sum_state s;

    sum_init(&s);
    for (b = 0; b < blocks; b++, q += 32) {
        uint64_t w[4];
        unsigned k;

        for (k = 0; k < 4; k++) {
            w[k] = seed ^ step;
            step += MIX_K;
        }
        memcpy(q, w, sizeof w);
        s.v[0] = xx_round(s.v[0], w[0]);
        s.v[1] = xx_round(s.v[1], w[1]);
        s.v[2] = xx_round(s.v[2], w[2]);
        s.v[3] = xx_round(s.v[3], w[3]);
    }
    for (i = blocks * 4; i < words; i++) {
        uint64_t w = seed ^ step;

        memcpy(p + i * 8, &w, sizeof w);
        step += MIX_K;
    }
    if (n % 8 != 0) {
        uint64_t w = seed ^ step;

        memcpy(p + words * 8, &w, n % 8);
    }
    return sum_finish(&s, q, n);
}

uint64_t cli_frame_fill(void *frame, size_t size, uint64_t sequence, bool full)
{
    unsigned char *bytes = frame;
    cli_frame_header h;

    if (frame == NULL || size < sizeof h)
        return 0;
    if (full) {
        memset(&h, 0, sizeof h);
        h.checksum = fill_pattern(bytes + sizeof h, size - sizeof h, sequence);
    } else {
        memcpy(&h, frame, sizeof h);
    }
    h.magic = CLI_FRAME_MAGIC;
    h.sequence = sequence;
    h.size = (uint64_t)size;
    h.send_ns = ferry_now().ns;
    memcpy(frame, &h, sizeof h);
    return h.checksum;
}

bool cli_frame_verify(const void *frame, size_t size)
{
    cli_frame_header h;

    if (frame == NULL || size < sizeof h)
        return false;
    memcpy(&h, frame, sizeof h);
    if (h.magic != CLI_FRAME_MAGIC || h.size != (uint64_t)size)
        return false;
    return h.checksum == cli_frame_checksum(frame, size);
}

/* ---------------------------------------------------------------------------------------------
 * Latency statistics
 * ------------------------------------------------------------------------------------------- */

bool cli_lat_init(cli_lat *l, size_t capacity)
{
    l->count = 0;
    l->capacity = 0;
    l->ns = NULL;
    if (capacity == 0)
        return true;
    if (capacity > SIZE_MAX / sizeof *l->ns)
        return false;
    l->ns = malloc(capacity * sizeof *l->ns);
    if (l->ns == NULL)
        return false;
    l->capacity = capacity;
    return true;
}

void cli_lat_add(cli_lat *l, int64_t ns)
{
    if (l->count < l->capacity)
        l->ns[l->count++] = ns;
}

void cli_lat_free(cli_lat *l)
{
    free(l->ns);
    l->ns = NULL;
    l->count = 0;
    l->capacity = 0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

int64_t cli_lat_pct(cli_lat *l, double p)
{
    double rank;
    size_t index;

    if (l->count == 0)
        return 0;
    qsort(l->ns, l->count, sizeof *l->ns, cmp_i64);
    if (!(p > 0.0))
        p = 0.0;
    if (p > 100.0)
        p = 100.0;
    /* Nearest rank: the smallest sample with at least p% of the samples at or below it. */
    rank = ceil(p / 100.0 * (double)l->count);
    index = rank < 1.0 ? 0 : (size_t)rank - 1;
    if (index >= l->count)
        index = l->count - 1;
    return l->ns[index];
}

int64_t cli_lat_max(const cli_lat *l)
{
    int64_t m = 0;
    size_t i;

    for (i = 0; i < l->count; i++)
        if (i == 0 || l->ns[i] > m)
            m = l->ns[i];
    return m;
}

/* ---------------------------------------------------------------------------------------------
 * Clocks
 * ------------------------------------------------------------------------------------------- */

int64_t cli_cpu_ns(void)
{
    struct timespec ts;

    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0)
        return 0;
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void cli_sleep_until(int64_t t_ns)
{
    struct timespec ts;

    if (t_ns <= 0)
        return;
    ts.tv_sec = (time_t)(t_ns / 1000000000);
    ts.tv_nsec = (long)(t_ns % 1000000000);
    /* The deadline is absolute, so resuming after a signal handler keeps it. */
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

/* ---------------------------------------------------------------------------------------------
 * Options
 * ------------------------------------------------------------------------------------------- */

/* After getopt_long (with a ':' optstring) returned c, ':' or '?': says in one line what was
 * wrong with argv[optind - 1] (a missing value, a value given to a flag, an unknown option),
 * with the hint to --help; returns 2. */
static int option_error(const char *cmd, int c, char **argv)
{
    const char *arg = argv[optind - 1];
    bool long_opt = strncmp(arg, "--", 2) == 0;
    if (c == ':')
        return cli_fail(cmd, 2, "option '%s' needs a value (try 'ferry %s --help')", arg, cmd);
    if (long_opt && optopt != 0)
        return cli_fail(cmd, 2, "option '%s' takes no value (try 'ferry %s --help')", arg, cmd);
    if (long_opt || optopt == 0)
        return cli_fail(cmd, 2, "unknown option '%s' (try 'ferry %s --help')", arg, cmd);
    return cli_fail(cmd, 2, "unknown option '-%c' (try 'ferry %s --help')", optopt, cmd);
}

void cli_opts_init(cli_opts *o)
{
    memset(o, 0, sizeof *o);
    o->timeout_s = -1.0;
}

/* A shared option's value into p->opts: false after its message. */
static bool shared_option(cli_parser *p, int c, const char *arg)
{
    cli_opts *o = p->opts;
    if (c == CLI_O_DOMAIN || c == CLI_O_DIR) {
        /* The command line overrides the environment, so the environment goes first. */
        if (p->where_from_option && !o->where_given && !cli_where_from_env(p->cmd, &o->where))
            return false;
        o->where_given = true;
    }
    switch (c) {
    case CLI_O_DOMAIN:
        return cli_parse_domain(p->cmd, arg, &o->where.domain);
    case CLI_O_DIR:
        return cli_parse_dir(p->cmd, arg, &o->where.dir);
    case CLI_O_TYPE:
        if (arg[0] == '\0' || strlen(arg) > FERRY_TYPE_NAME_MAX) {
            cli_fail(p->cmd, 2, "invalid --type '%s' (1..%u bytes)", arg, FERRY_TYPE_NAME_MAX);
            return false;
        }
        o->type = arg;
        return true;
    case CLI_O_DEPTH:
        return cli_parse_whole(p->cmd, &cli_ranges[CLI_R_SUB_DEPTH], arg, &o->depth);
    case CLI_O_COUNT:
        return cli_parse_whole(p->cmd, &cli_ranges[CLI_R_COUNT], arg, &o->count);
    case CLI_O_TIMEOUT:
        return cli_parse_real(p->cmd, &cli_ranges[CLI_R_TIMEOUT], arg, &o->timeout_s);
    case CLI_O_JSON:
        o->json = true;
        return true;
    case CLI_O_QUIET:
        o->quiet = true;
        return true;
    case CLI_O_QUICK:
        o->quick = true;
        return true;
    case CLI_O_CSV:
        o->csv = arg;
        return true;
    default:
        return true;
    }
}

/* getopt_long's code of the row i of a table: TABLE_CODE + i, above every command's own. */
#define TABLE_CODE 1024

/* The getopt_long table of p's option table, and each short name's word in argv replaced by its
 * row's name. false (after a message) when the table has too many rows. */
static bool table_start(cli_parser *p, int argc, char **argv)
{
    size_t i;

    for (i = 0; p->table[i].name != NULL; i++) {
        const cli_option *t = &p->table[i];

        if (i == CLI_OPTIONS_MAX) {
            cli_fail(p->cmd, 1, "more than %d options in its table", CLI_OPTIONS_MAX);
            return false;
        }
        p->longopts[i] =
            (struct option){t->name + 2, t->value != NULL ? required_argument : no_argument, NULL,
                            TABLE_CODE + (int)i};
        /* -h is getopt_long's own; a short name stands for its row only as a word of its own. */
        if (t->short_name != 0 && t->code != CLI_O_HELP)
            for (int a = 1; a < argc; a++)
                if (argv[a][0] == '-' && argv[a][1] == t->short_name && argv[a][2] == '\0')
                    argv[a] = (char *)t->name;
    }
    p->longopts[i] = (struct option)CLI_OPT_END;
    return true;
}

/* The words of choices, "a, b or c", into buf. */
static void choice_words(const cli_choice *choices, char *buf, size_t cap)
{
    size_t used = 0;

    buf[0] = '\0';
    for (const cli_choice *ch = choices; ch->word != NULL && used < cap; ch++) {
        const char *sep = ch == choices ? "" : ch[1].word == NULL ? " or " : ", ";
        int n = snprintf(buf + used, cap - used, "%s%s", sep, ch->word);

        if (n < 0)
            break;
        used += (size_t)n;
    }
}

/* The value of the row t (not a shared option's) into p->dest: false after its message. */
static bool table_value(cli_parser *p, const cli_option *t, const char *arg)
{
    char *at = (char *)p->dest + t->dest;

    switch (t->kind) {
    case CLI_K_FLAG:
        *(bool *)at = true;
        return true;
    case CLI_K_STRING:
        *(const char **)at = arg;
        return true;
    case CLI_K_WHOLE:
        return cli_parse_whole(p->cmd, t->range, arg, (uint64_t *)at);
    case CLI_K_BYTES:
        return cli_parse_bytes(p->cmd, t->range, arg, (size_t *)at);
    case CLI_K_REAL:
        return cli_parse_real(p->cmd, t->range, arg, (double *)at);
    case CLI_K_CHOICE: {
        char words[128];

        for (const cli_choice *ch = t->choices; ch->word != NULL; ch++) {
            if (strcmp(arg, ch->word) == 0) {
                *(int *)at = ch->value;
                return true;
            }
        }
        choice_words(t->choices, words, sizeof words);
        cli_fail(p->cmd, 2, t->bad_choice, arg, words);
        return false;
    }
    case CLI_K_CODE:
    case CLI_K_SHARED:
        break;
    }
    return true;
}

void cli_usage(const cli_parser *p, FILE *to)
{
    fputs(p->about, to);
    for (const cli_option *t = p->table; t->name != NULL; t++) {
        char left[96], short_name[8] = "";
        const char *line = t->help, *end;
        int n;

        if (line == NULL)
            continue;
        if (t->short_name != 0)
            snprintf(short_name, sizeof short_name, "-%c, ", t->short_name);
        if (t->label != NULL)
            n = snprintf(left, sizeof left, "  %s", t->label);
        else
            n = snprintf(left, sizeof left, "  %s%s%s%s", short_name, t->name,
                         t->value != NULL ? " " : "", t->value != NULL ? t->value : "");
        /* A name too wide for the column pushes its first line of help two spaces past it. */
        if (n >= p->column)
            fprintf(to, "%s  ", left);
        else
            fprintf(to, "%-*s", p->column, left);
        for (;;) {
            end = strchr(line, '\n');
            if (end == NULL)
                break;
            fprintf(to, "%.*s\n%*s", (int)(end - line), line, p->column, "");
            line = end + 1;
        }
        fprintf(to, "%s\n", line);
    }
    if (p->epilogue != NULL)
        fputs(p->epilogue, to);
}

int cli_getopt(cli_parser *p, int argc, char **argv)
{
    int c;
    if (!p->started) {
        p->started = true;
        p->status = 2;
        if (!p->where_from_option && !cli_where_from_env(p->cmd, &p->opts->where))
            return CLI_OPTS_EXIT;
        if (p->table != NULL && !table_start(p, argc, argv))
            return CLI_OPTS_EXIT;
        opterr = 0;
        optind = 1;
    }
    while ((c = getopt_long(argc, argv, ":h", p->table != NULL ? p->longopts : p->options, NULL)) !=
           -1) {
        /* `--domain --count 5` would take "--count" as the domain: a value given as its own
         * word that looks like a long option is a forgotten value (--opt=--x still passes). */
        if (optarg != NULL && optind >= 2 && optarg == argv[optind - 1] &&
            strncmp(optarg, "--", 2) == 0 && optarg[2] != '\0') {
            cli_fail(p->cmd, 2,
                     "option '%s' needs a value, not the option '%s' (try 'ferry %s "
                     "--help')",
                     argv[optind - 2], optarg, p->cmd);
            return CLI_OPTS_EXIT;
        }
        if (p->table != NULL && c >= TABLE_CODE) {
            const cli_option *t = &p->table[c - TABLE_CODE];

            if (t->kind != CLI_K_SHARED) {
                if (!table_value(p, t, optarg))
                    return CLI_OPTS_EXIT;
                if (t->code >= CLI_O_OWN)
                    return t->code;
                continue;
            }
            c = t->code;
        }
        if (c >= CLI_O_OWN)
            return c;
        if (c == CLI_O_HELP) {
            if (p->table != NULL)
                cli_usage(p, stdout);
            else
                p->usage(stdout);
            p->status = 0;
            return CLI_OPTS_EXIT;
        }
        if (c == ':' || c == '?' || c < CLI_O_DOMAIN) {
            option_error(p->cmd, c, argv);
            return CLI_OPTS_EXIT;
        }
        if (!shared_option(p, c, optarg))
            return CLI_OPTS_EXIT;
    }
    return CLI_OPTS_END;
}

bool cli_topic_operand(const char *cmd, int argc, char **argv, const char **topic)
{
    if (optind >= argc) {
        cli_fail(cmd, 2, "missing TOPIC (try 'ferry %s --help')", cmd);
        return false;
    }
    if (optind + 1 < argc) {
        cli_fail(cmd, 2, "unexpected argument '%s'", argv[optind + 1]);
        return false;
    }
    *topic = argv[optind];
    return true;
}

/* One element of a topic pattern: '*', or one character of a set, which matters here only by
 * whether it holds '/' and whether it holds a word character ([A-Za-z0-9_]). */
typedef struct pattern_elem {
    bool star, slash, word;
    char literal; /* the character of a literal element, else 0 */
} pattern_elem;

static bool topic_word_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* The end (its ']') of the bracket expression opening at p[0], or NULL when it has none (then
 * fnmatch takes the '[' literally). */
static const char *bracket_end(const char *p)
{
    const char *q = p + 1;
    if (*q == '!' || *q == '^')
        q++;
    if (*q == ']')
        q++;
    while (*q != '\0' && *q != ']') {
        if (q[0] == '[' && (q[1] == ':' || q[1] == '.' || q[1] == '=')) {
            const char *e = strchr(q + 2, q[1]);
            while (e != NULL && e[1] != ']')
                e = strchr(e + 1, q[1]);
            if (e == NULL)
                return NULL;
            q = e + 2;
        } else if (q[0] == '\\' && q[1] != '\0') {
            q += 2;
        } else {
            q++;
        }
    }
    return *q == ']' ? q : NULL;
}

/* Whether the pattern, read as elements, matches some word of the topic language '/' w+ ('/' w+)*:
 * a walk of the pattern's elements over the three states of that language's automaton (0: at
 * the start, 1: after a '/', 2: in a segment, the accepting one). */
static bool pattern_can_match(const pattern_elem *e, size_t n)
{
    bool reach[FERRY_TOPIC_MAX + 2][3];
    memset(reach, 0, sizeof reach[0] * (n + 1));
    reach[0][0] = true;
    for (size_t k = 0; k < n; k++) {
        bool *r = reach[k], *next = reach[k + 1];
        if (e[k].star) {
            /* Any run of characters: close the states under both kinds of character. */
            for (int round = 0; round < 3; round++) {
                if (r[0] || r[2])
                    r[1] = true;
                if (r[1])
                    r[2] = true;
            }
            for (int t = 0; t < 3; t++)
                next[t] = next[t] || r[t];
            continue;
        }
        if (e[k].slash && (r[0] || r[2]))
            next[1] = true;
        if (e[k].word && (r[1] || r[2]))
            next[2] = true;
    }
    return reach[n][2];
}

bool cli_topic_pattern_check(const char *cmd, const char *pattern)
{
    static const char names[] = "segments of A-Z a-z 0-9 _ separated by single '/'";
    pattern_elem e[FERRY_TOPIC_MAX + 1];
    size_t n = 0;
    char slashed[FERRY_TOPIC_MAX + 2];
    const char *why = NULL;
    char detail[FERRY_TOPIC_MAX + 64];

    /* Patterns are matched against names with their leading '/'; one without is given one. */
    if (pattern[0] == '\0' || strlen(pattern) > FERRY_TOPIC_MAX) {
        cli_fail(cmd, 2, "invalid topic pattern '%s' (1..%u bytes)", pattern, FERRY_TOPIC_MAX);
        return false;
    }
    snprintf(slashed, sizeof slashed, "%s%s", pattern[0] == '/' ? "" : "/", pattern);
    for (const char *p = slashed; *p != '\0' && n < sizeof e / sizeof e[0]; p++) {
        pattern_elem *x = &e[n++];
        const char *end = *p == '[' ? bracket_end(p) : NULL;
        memset(x, 0, sizeof *x);
        if (*p == '*') {
            x->star = true;
        } else if (*p == '?') {
            x->slash = x->word = true;
        } else if (end != NULL) {
            /* Which characters the set holds, as fnmatch itself reads it. */
            char set[FERRY_TOPIC_MAX + 2];
            char one[2] = {'/', '\0'};
            snprintf(set, sizeof set, "%.*s", (int)(end - p + 1), p);
            x->slash = fnmatch(set, one, 0) == 0;
            for (int c = 0; c < 128 && !x->word; c++) {
                one[0] = (char)c;
                x->word = topic_word_char((char)c) && fnmatch(set, one, 0) == 0;
            }
            if (!x->slash && !x->word && why == NULL) {
                snprintf(detail, sizeof detail, "%s matches no character a topic name has", set);
                why = detail;
            }
            p = end;
        } else {
            if (*p == '\\' && p[1] != '\0')
                p++;
            x->literal = *p;
            x->slash = *p == '/';
            x->word = topic_word_char(*p);
            if (!x->slash && !x->word && why == NULL) {
                snprintf(detail, sizeof detail, "'%c' is in no topic name", *p);
                why = detail;
            }
        }
    }
    if (pattern_can_match(e, n))
        return true;
    for (size_t k = 1; k < n && why == NULL; k++)
        if (e[k].literal == '/' && e[k - 1].literal == '/')
            why = "an empty segment ('//')";
    if (why == NULL && e[n - 1].literal == '/')
        why = "it ends with '/'";
    if (why == NULL)
        why = "no topic name fits it";
    cli_fail(cmd, 2, "topic pattern '%s' can match no topic: %s (topic names are %s)", pattern, why,
             names);
    return false;
}

volatile sig_atomic_t cli_stop_requested;

static void on_stop_signal(int sig)
{
    (void)sig;
    cli_stop_requested = 1;
}

void cli_stop_on_signals(void)
{
    cli_catch_signal(SIGINT, on_stop_signal);
    cli_catch_signal(SIGTERM, on_stop_signal);
}

typedef struct found_type {
    cli_type *out; /* NULL: only whether one lives */
    bool found;
} found_type;

static bool note_publisher_type(void *arg, const ferry_endpoint_info *info)
{
    found_type *t = arg;

    if (!info->alive || info->kind != FERRY_ENDPOINT_PUBLISHER)
        return true;
    if (t->out != NULL) {
        snprintf(t->out->name, sizeof t->out->name, "%s", info->type_name);
        t->out->hash = info->type_hash;
    }
    t->found = true;
    return false;
}

/* The root directory of w as the user knows it. */
static void root_path(const cli_where *w, char *out, size_t cap)
{
    if (w->dir != NULL)
        snprintf(out, cap, "%s", w->dir);
    else
        snprintf(out, cap, "/dev/shm/ferry-%u", (unsigned)geteuid());
}

/* "domain N in DIR", and ", which no ferry process has used" when its directory is missing. */
static void where_text(const cli_where *w, char *out, size_t cap)
{
    char root[PATH_MAX], domain_dir[PATH_MAX + 16];
    struct stat st;
    bool used;

    root_path(w, root, sizeof root);
    snprintf(domain_dir, sizeof domain_dir, "%s/%u", root, (unsigned)w->domain);
    used = stat(domain_dir, &st) == 0 && S_ISDIR(st.st_mode);
    snprintf(out, cap, "domain %u in %s%s", (unsigned)w->domain, root,
             used ? "" : ", which no ferry process has used");
}

static const char *slash(const char *topic)
{
    return topic[0] == '/' ? "" : "/";
}

void cli_watch_init(cli_watch *wa, const char *cmd, const cli_opts *o, const char *topic)
{
    memset(wa, 0, sizeof *wa);
    wa->cmd = cmd;
    wa->opts = o;
    wa->topic = topic;
    wa->notice_ns = ferry_now().ns + CLI_WATCH_NOTICE_NS;
}

bool cli_watch_look(cli_watch *wa)
{
    found_type t = {NULL, false};

    /* A domain nobody has used yet (ENOENT) is one without a publisher so far. */
    ferry_inspect(wa->opts->where.dir, wa->opts->where.domain, wa->topic, note_publisher_type, &t);
    if (t.found)
        wa->seen = true;
    return t.found;
}

void cli_watch_tick(cli_watch *wa, uint64_t received)
{
    const cli_where *w = &wa->opts->where;
    char where[PATH_MAX + 96], hint[PATH_MAX + 64] = "ferry topics";

    if (wa->noticed || ferry_now().ns < wa->notice_ns)
        return;
    wa->noticed = true;
    if (received != 0 || wa->seen || cli_watch_look(wa))
        return;
    where_text(w, where, sizeof where);
    /* `ferry topics` reads FERRY_DOMAIN and FERRY_DIR as this command did; the options it got it
     * needs to be told. */
    if (wa->opts->where_given) {
        size_t n = strlen(hint);

        snprintf(hint + n, sizeof hint - n, " --domain %u%s%s", (unsigned)w->domain,
                 w->dir != NULL ? " --dir " : "", w->dir != NULL ? w->dir : "");
    }
    cli_fail(wa->cmd, 0, "no publisher on %s%s yet (%s); waiting (%s lists what is published)",
             slash(wa->topic), wa->topic, where, hint);
}

bool cli_watch_none(cli_watch *wa, uint64_t received)
{
    return received == 0 && !wa->seen && !cli_watch_look(wa);
}

int cli_watch_fail(const cli_watch *wa, double timeout_s)
{
    char where[PATH_MAX + 96];

    where_text(&wa->opts->where, where, sizeof where);
    return cli_fail(wa->cmd, 1, "timed out after %g s: no publisher on %s%s (%s)", timeout_s,
                    slash(wa->topic), wa->topic, where);
}

#define TYPE_POLL_NS 100000000LL

cli_type_found cli_topic_type(cli_watch *wa, int64_t deadline_ns, cli_type *out)
{
    found_type t = {out, false};

    memset(out, 0, sizeof *out);
    if (wa->opts->type != NULL) {
        snprintf(out->name, sizeof out->name, "%s", wa->opts->type);
        out->hash = ferry_hash(out->name);
        return CLI_TYPE_FOUND;
    }
    for (;;) {
        int64_t now, next;

        ferry_inspect(wa->opts->where.dir, wa->opts->where.domain, wa->topic, note_publisher_type,
                      &t);
        if (t.found) {
            wa->seen = true;
            return CLI_TYPE_FOUND;
        }
        if (cli_stop_requested)
            return CLI_TYPE_STOPPED;
        now = ferry_now().ns;
        if (deadline_ns >= 0 && now >= deadline_ns)
            return CLI_TYPE_TIMEOUT;
        cli_watch_tick(wa, 0);
        next = now + TYPE_POLL_NS;
        if (deadline_ns >= 0 && deadline_ns < next)
            next = deadline_ns;
        cli_sleep_until(next);
    }
}

typedef struct type_in_use {
    const char *type_name;
    uint64_t type_hash;
    ferry_endpoint_info found;
    bool any;
} type_in_use;

static bool note_other_type(void *arg, const ferry_endpoint_info *info)
{
    type_in_use *u = arg;

    if (!info->alive || info->kind != FERRY_ENDPOINT_PUBLISHER)
        return true;
    if (info->type_hash == u->type_hash && strcmp(info->type_name, u->type_name) == 0)
        return true;
    u->found = *info;
    u->any = true;
    return false;
}

int cli_endpoint_fail(const char *cmd, const cli_where *w, const char *what, const char *topic,
                      const char *type_name, uint64_t type_hash, ferry_err err, int saved_errno)
{
    type_in_use u;

    if (err == FERRY_ESYS)
        return cli_fail(cmd, 1, "cannot %s '%s' as %s: %s (%s)", what, topic, type_name,
                        ferry_strerror(err), strerror(saved_errno));
    if (err == FERRY_ENOMEM)
        return cli_fail(cmd, 1, "cannot %s '%s' as %s: %s (%s)", what, topic, type_name,
                        ferry_strerror(err), cli_memory_why(saved_errno));
    if (err != FERRY_ETYPE)
        return cli_fail(cmd, 1, "cannot %s '%s' as %s: %s", what, topic, type_name,
                        ferry_strerror(err));
    memset(&u, 0, sizeof u);
    u.type_name = type_name;
    u.type_hash = type_hash;
    ferry_inspect(w->dir, w->domain, topic, note_other_type, &u);
    if (!u.any) /* it went away since */
        return cli_fail(cmd, 1, "cannot %s '%s' as %s: %s (no longer: try again)", what, topic,
                        type_name, ferry_strerror(err));
    /* The same name with another hash: the hashes tell them apart. */
    if (strcmp(u.found.type_name, type_name) == 0)
        return cli_fail(cmd, 1,
                        "cannot %s '%s' as %s (type hash %016" PRIx64 "): the topic is in "
                        "use with type %s of type hash %016" PRIx64 " (publisher pid %" PRId32
                        ", node '%s')",
                        what, topic, type_name, type_hash, u.found.type_name, u.found.type_hash,
                        u.found.pid, u.found.node_name);
    return cli_fail(cmd, 1,
                    "cannot %s '%s' as %s: the topic is in use with type %s (publisher pid "
                    "%" PRId32 ", node '%s')",
                    what, topic, type_name, u.found.type_name, u.found.pid, u.found.node_name);
}

int cli_subscribe(const char *cmd, const cli_where *w, const char *topic, const cli_type *type,
                  const ferry_subscriber_options *o, ferry_node **node, ferry_subscriber **sub)
{
    ferry_err err;

    *sub = NULL;
    if (cli_node(w, cmd, node) != FERRY_OK)
        return 1;
    err = ferry_subscriber_create(sub, *node, topic, type->name, type->hash, o);
    if (err == FERRY_OK)
        return 0;
    cli_endpoint_fail(cmd, w, "subscribe to", topic, type->name, type->hash, err, errno);
    ferry_node_destroy(*node);
    *node = NULL;
    return 1;
}

/* A domain directory is named by its number, 0..FERRY_DOMAIN_MAX. */
static bool is_domain_dir(const char *root, const struct dirent *e)
{
    char path[PATH_MAX];
    struct stat st;
    uint64_t v;

    if (parse_whole(e->d_name, false, &v) != PARSED || v > FERRY_DOMAIN_MAX)
        return false;
    if (snprintf(path, sizeof path, "%s/%s", root, e->d_name) >= (int)sizeof path)
        return false;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int cli_check_root(const char *cmd, const cli_where *w)
{
    char root[PATH_MAX];
    const struct dirent *e;
    bool found = false;
    DIR *d;

    root_path(w, root, sizeof root);
    d = opendir(root);
    if (d == NULL) {
        if (errno == ENOENT)
            return cli_fail(cmd, 1,
                            "%s does not exist: no ferry process has used it (--dir or "
                            "FERRY_DIR names the directory the others use)",
                            root);
        return cli_fail(cmd, 1, "cannot read %s: %s", root, strerror(errno));
    }
    while (!found && (e = readdir(d)) != NULL)
        found = is_domain_dir(root, e);
    closedir(d);
    if (!found)
        return cli_fail(cmd, 1, "%s holds no ferry domain (no directory 0..%u in it)", root,
                        (unsigned)FERRY_DOMAIN_MAX);
    return 0;
}
