/*
 * What the ferry commands share: where they work, option value parsing, error messages, the
 * synthetic frame format and latency statistics.
 */
#include "cli.h"

#include <getopt.h>

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

bool cli_where_from_env(cli_where *w)
{
    const char *dir = getenv("FERRY_DIR");
    const char *domain = getenv("FERRY_DOMAIN");

    w->dir = (dir != NULL && dir[0] != '\0') ? dir : NULL;
    w->domain = 0;
    if (domain != NULL && domain[0] != '\0') {
        uint64_t v;

        if (!cli_parse_u64(domain, &v) || v > FERRY_DOMAIN_MAX) {
            fprintf(stderr, "ferry: invalid FERRY_DOMAIN '%s' (expected 0..%u)\n", domain,
                    FERRY_DOMAIN_MAX);
            return false;
        }
        w->domain = (uint32_t)v;
    }
    return true;
}

bool cli_parse_u64(const char *text, uint64_t *out)
{
    char *end = NULL;
    unsigned long long v;

    /* strtoull accepts leading blanks and a minus sign; a count or a size takes neither. */
    if (text == NULL || text[0] < '0' || text[0] > '9') return false;
    errno = 0;
    v = strtoull(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0') return false;
    *out = (uint64_t)v;
    return true;
}

bool cli_parse_domain(const char *text, uint32_t *out)
{
    uint64_t v;

    if (!cli_parse_u64(text, &v) || v > FERRY_DOMAIN_MAX) {
        fprintf(stderr, "ferry: invalid domain '%s' (expected 0..%u)\n", text ? text : "",
                FERRY_DOMAIN_MAX);
        return false;
    }
    *out = (uint32_t)v;
    return true;
}

bool cli_parse_size(const char *text, size_t *out)
{
    char *end = NULL;
    unsigned long long v;
    unsigned shift = 0;

    if (text == NULL || text[0] < '0' || text[0] > '9') return false;
    errno = 0;
    v = strtoull(text, &end, 10);
    if (errno != 0 || end == text) return false;
    switch (*end) {
    case '\0':
        break;
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
        return false;
    }
    if (*end != '\0') return false;
    if (shift != 0 && v > (SIZE_MAX >> shift)) return false;
    if (v > SIZE_MAX) return false;
    *out = (size_t)v << shift;
    return true;
}

bool cli_parse_double(const char *text, double *out)
{
    char *end = NULL;
    double v;

    if (text == NULL || text[0] == '\0' || text[0] == ' ' || text[0] == '\t') return false;
    errno = 0;
    v = strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || !isfinite(v)) return false;
    *out = v;
    return true;
}

int cli_fail(const char *cmd, int status, const char *fmt, ...)
{
    va_list ap;

    if (cmd != NULL && cmd[0] != '\0')
        fprintf(stderr, "ferry %s: ", cmd);
    else
        fputs("ferry: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
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
        if (err == FERRY_ESYS) fprintf(stderr, " (%s)", strerror(saved));
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
    if (frame == NULL || size < sizeof(cli_frame_header)) return 0;
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

    if (frame == NULL || size < sizeof h) return 0;
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

    if (frame == NULL || size < sizeof h) return false;
    memcpy(&h, frame, sizeof h);
    if (h.magic != CLI_FRAME_MAGIC || h.size != (uint64_t)size) return false;
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
    if (capacity == 0) return true;
    if (capacity > SIZE_MAX / sizeof *l->ns) return false;
    l->ns = malloc(capacity * sizeof *l->ns);
    if (l->ns == NULL) return false;
    l->capacity = capacity;
    return true;
}

void cli_lat_add(cli_lat *l, int64_t ns)
{
    if (l->count < l->capacity) l->ns[l->count++] = ns;
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

    if (l->count == 0) return 0;
    qsort(l->ns, l->count, sizeof *l->ns, cmp_i64);
    if (!(p > 0.0)) p = 0.0;
    if (p > 100.0) p = 100.0;
    /* Nearest rank: the smallest sample with at least p% of the samples at or below it. */
    rank = ceil(p / 100.0 * (double)l->count);
    index = rank < 1.0 ? 0 : (size_t)rank - 1;
    if (index >= l->count) index = l->count - 1;
    return l->ns[index];
}

int64_t cli_lat_max(const cli_lat *l)
{
    int64_t m = 0;
    size_t i;

    for (i = 0; i < l->count; i++)
        if (i == 0 || l->ns[i] > m) m = l->ns[i];
    return m;
}

/* ---------------------------------------------------------------------------------------------
 * Clocks
 * ------------------------------------------------------------------------------------------- */

int64_t cli_cpu_ns(void)
{
    struct timespec ts;

    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) return 0;
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void cli_sleep_until(int64_t t_ns)
{
    struct timespec ts;

    if (t_ns <= 0) return;
    ts.tv_sec = (time_t)(t_ns / 1000000000);
    ts.tv_nsec = (long)(t_ns % 1000000000);
    /* The deadline is absolute, so resuming after a signal handler keeps it. */
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

int cli_option_error(const char *cmd, int c, char **argv)
{
    const char *arg = argv[optind - 1];
    bool long_opt = strncmp(arg, "--", 2) == 0;
    if (c == ':')
        return cli_fail(cmd, 2, "option '%s' needs a value", arg);
    if (long_opt && optopt != 0)
        return cli_fail(cmd, 2, "option '%s' takes no value", arg);
    if (long_opt || optopt == 0)
        return cli_fail(cmd, 2, "unknown option '%s' (try 'ferry %s --help')", arg, cmd);
    return cli_fail(cmd, 2, "unknown option '-%c' (try 'ferry %s --help')", optopt, cmd);
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

volatile sig_atomic_t cli_stop_requested;

static void on_stop_signal(int sig)
{
    (void)sig;
    cli_stop_requested = 1;
}

void cli_stop_on_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

typedef struct found_type {
    cli_type *out;
    bool from_publisher;
    bool found;
} found_type;

static bool note_type(void *arg, const ferry_endpoint_info *info)
{
    found_type *t = arg;
    if (!info->alive || (t->found && t->from_publisher)) return true;
    if (t->found && info->kind != FERRY_ENDPOINT_PUBLISHER) return true;
    snprintf(t->out->name, sizeof t->out->name, "%s", info->type_name);
    t->out->hash = info->type_hash;
    t->from_publisher = info->kind == FERRY_ENDPOINT_PUBLISHER;
    t->found = true;
    return !t->from_publisher;
}

void cli_topic_type(const cli_where *w, const char *topic, const char *given, cli_type *out)
{
    found_type t = {out, false, false};
    memset(out, 0, sizeof *out);
    if (given == NULL) ferry_inspect(w->dir, w->domain, topic, note_type, &t);
    if (!t.found) {
        snprintf(out->name, sizeof out->name, "%s", given ? given : CLI_FRAME_TYPE);
        out->hash = ferry_hash(out->name);
    }
}
