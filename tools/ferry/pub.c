/*
 * ferry pub: publishes synthetic frames (cli_frame_fill) on a topic at a fixed rate, through the
 * zero-copy path (ferry_loan + ferry_publish), until a count is reached or a signal arrives.
 */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#define CMD "pub"
#define NS_PER_S 1000000000LL
#define WAIT_SLICE_NS 100000000LL

static void usage(FILE *to)
{
    fputs("usage: ferry pub TOPIC [options]\n"
          "Publishes synthetic frames of type " CLI_FRAME_TYPE " (a header, then a pattern\n"
          "derived from the sequence number, covered by a checksum that `ferry echo --verify`\n"
          "checks) at a fixed rate. SIGINT or SIGTERM stops it cleanly.\n"
          "\n"
          "options:\n"
          "  --size BYTES            frame size, >= 64; suffixes k, M, G (default 1M)\n"
          "  --rate HZ               frames per second; 0 publishes as fast as possible\n"
          "                          (default 30)\n"
          "  --count N               stop after N frame periods (a frame skipped for a full\n"
          "                          pool counts); 0 publishes for ever (default 0)\n"
          "  --wait-subscribers N    wait for N subscribers before the first frame (default 0)\n"
          "  --history N             keep the last N frames for late joiners (default 0)\n"
          "  --pool BYTES            byte cap of the publisher's pool (default: the library's,\n"
          "                          raised to 4 frames when smaller)\n"
          "  --domain N              domain number (default $FERRY_DOMAIN, else 0)\n"
          "  --dir PATH              root of the domain directories (default $FERRY_DIR, else\n"
          "                          /dev/shm/ferry-<uid>)\n"
          "  -h, --help              print this help\n",
          to);
}

typedef struct pub_args {
    cli_where where;
    const char *topic;
    size_t size;
    double rate;
    uint64_t count;
    uint64_t wait_subscribers;
    uint64_t history;
    size_t pool;
} pub_args;

static int parse_args(int argc, char **argv, pub_args *a)
{
    enum { O_SIZE = 256, O_RATE, O_COUNT, O_WAIT, O_HISTORY, O_POOL, O_DOMAIN, O_DIR };
    static const struct option options[] = {
        {"size", required_argument, NULL, O_SIZE},
        {"rate", required_argument, NULL, O_RATE},
        {"count", required_argument, NULL, O_COUNT},
        {"wait-subscribers", required_argument, NULL, O_WAIT},
        {"history", required_argument, NULL, O_HISTORY},
        {"pool", required_argument, NULL, O_POOL},
        {"domain", required_argument, NULL, O_DOMAIN},
        {"dir", required_argument, NULL, O_DIR},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;

    memset(a, 0, sizeof *a);
    a->size = 1u << 20;
    a->rate = 30.0;
    if (!cli_where_from_env(&a->where)) return 2;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
        switch (c) {
        case O_SIZE:
            if (!cli_parse_size(optarg, &a->size) || a->size < sizeof(cli_frame_header))
                return cli_fail(CMD, 2, "invalid --size '%s' (bytes, at least %zu)", optarg,
                                sizeof(cli_frame_header));
            break;
        case O_RATE:
            if (!cli_parse_double(optarg, &a->rate) || a->rate < 0.0 || a->rate > 1e9)
                return cli_fail(CMD, 2, "invalid --rate '%s' (Hz, 0 for as fast as possible)",
                                optarg);
            break;
        case O_COUNT:
            if (!cli_parse_u64(optarg, &a->count))
                return cli_fail(CMD, 2, "invalid --count '%s'", optarg);
            break;
        case O_WAIT:
            if (!cli_parse_u64(optarg, &a->wait_subscribers) || a->wait_subscribers > UINT32_MAX)
                return cli_fail(CMD, 2, "invalid --wait-subscribers '%s'", optarg);
            break;
        case O_HISTORY:
            if (!cli_parse_u64(optarg, &a->history) || a->history > UINT32_MAX)
                return cli_fail(CMD, 2, "invalid --history '%s'", optarg);
            break;
        case O_POOL:
            if (!cli_parse_size(optarg, &a->pool) || a->pool == 0)
                return cli_fail(CMD, 2, "invalid --pool '%s'", optarg);
            break;
        case O_DOMAIN:
            if (!cli_parse_domain(optarg, &a->where.domain)) return 2;
            break;
        case O_DIR:
            a->where.dir = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case ':':
        default:
            return cli_option_error(CMD, c, argv);
        }
    }
    if (!cli_topic_operand(CMD, argc, argv, &a->topic))
        return 2;
    return -1;
}

/* Complaints about a full pool or a blocked subscriber can come at the frame rate; say them at
 * most once a second, with the running total. */
typedef struct complaint {
    uint64_t count;
    int64_t last_ns;
} complaint;

static void complain(complaint *c, const char *what, ferry_err err)
{
    int64_t now = ferry_now().ns;

    c->count++;
    if (c->count == 1 || now - c->last_ns >= NS_PER_S) {
        cli_fail(CMD, 0, "%s: %s (%s), %" PRIu64 " so far; going on", what, ferry_strerror(err),
                 ferry_errname(err), c->count);
        c->last_ns = now;
    }
}

/* Runs housekeeping until the absolute time t_ns, so subscribers can connect meanwhile. */
static ferry_err idle_until(ferry_publisher *pub, int64_t t_ns)
{
    for (;;) {
        int64_t left = t_ns - ferry_now().ns;
        ferry_err err;

        if (left <= 0 || cli_stop_requested) return FERRY_OK;
        err = ferry_publisher_poll(pub, left);
        if (err != FERRY_OK) return err;
    }
}

static int publish_loop(ferry_publisher *pub, const pub_args *a, uint64_t *published,
                        complaint *pool_full, complaint *blocked, int64_t *elapsed_ns)
{
    int64_t period = a->rate > 0.0 ? (int64_t)((double)NS_PER_S / a->rate) : 0;
    int64_t start = ferry_now().ns, next = start;
    uint64_t frames = 0;
    ferry_err err;

    /* --count counts frame slots, published or not, so a pool that stays exhausted (history
     * holding every chunk) cannot keep the command running for ever. */
    while (!cli_stop_requested && (a->count == 0 || frames < a->count)) {
        void *payload = NULL;

        frames++;

        err = ferry_loan(pub, a->size, &payload);
        if (err == FERRY_EPOOL || err == FERRY_ETIMEDOUT) {
            complain(pool_full, "no chunk to loan", err);
        } else if (err != FERRY_OK) {
            *elapsed_ns = ferry_now().ns - start;
            return cli_fail(CMD, 1, "ferry_loan: %s", ferry_strerror(err));
        } else {
            cli_frame_fill(payload, a->size, *published + 1, true);
            err = ferry_publish(pub, payload, 0);
            if (err == FERRY_OK) {
                (*published)++;
            } else {
                ferry_err rel = ferry_loan_release(pub, payload);

                if (err != FERRY_ETIMEDOUT) {
                    *elapsed_ns = ferry_now().ns - start;
                    return cli_fail(CMD, 1, "ferry_publish: %s", ferry_strerror(err));
                }
                complain(blocked, "a blocking subscriber stayed full", err);
                if (rel != FERRY_OK) {
                    *elapsed_ns = ferry_now().ns - start;
                    return cli_fail(CMD, 1, "ferry_loan_release: %s", ferry_strerror(rel));
                }
            }
        }
        if (a->count != 0 && frames >= a->count) break;
        if (period > 0) {
            int64_t now = ferry_now().ns;

            next += period;
            /* After a stall, keep the rate rather than bursting to catch up. */
            if (now - next > period) next = now;
            err = idle_until(pub, next);
            if (err != FERRY_OK) {
                *elapsed_ns = ferry_now().ns - start;
                return cli_fail(CMD, 1, "ferry_publisher_poll: %s", ferry_strerror(err));
            }
        }
    }
    *elapsed_ns = ferry_now().ns - start;
    return 0;
}

static int wait_subscribers(ferry_publisher *pub, uint32_t n)
{
    if (n == 0) return 0;
    if (isatty(STDERR_FILENO))
        fprintf(stderr, "ferry pub: waiting for %" PRIu32 " subscriber%s\n", n, n == 1 ? "" : "s");
    while (!cli_stop_requested) {
        ferry_err err = ferry_publisher_wait_subscribers(pub, n, WAIT_SLICE_NS);

        if (err == FERRY_OK) return 0;
        if (err != FERRY_ETIMEDOUT)
            return cli_fail(CMD, 1, "ferry_publisher_wait_subscribers: %s", ferry_strerror(err));
    }
    return 0;
}

int ferry_cmd_pub(int argc, char **argv)
{
    ferry_publisher_options o;
    ferry_publisher_stats st;
    ferry_publisher *pub = NULL;
    ferry_node *node = NULL;
    complaint pool_full = {0, 0}, blocked = {0, 0};
    uint64_t published = 0;
    int64_t elapsed = 0;
    ferry_err err;
    pub_args a;
    int status;

    status = parse_args(argc, argv, &a);
    if (status >= 0) return status;
    if (ferry_topic_validate(a.topic) != FERRY_OK)
        return cli_fail(CMD, 2, "invalid topic name '%s'", a.topic);

    ferry_publisher_options_init(&o);
    if (o.max_sample_size < a.size) o.max_sample_size = a.size;
    if (a.pool != 0)
        o.pool_bytes = a.pool;
    else if (a.size <= SIZE_MAX / 4 && o.pool_bytes < 4 * a.size)
        o.pool_bytes = 4 * a.size;
    o.history = (uint32_t)a.history;

    cli_stop_on_signals();
    if (cli_node(&a.where, CMD, &node) != FERRY_OK) return 1;
    err =
        ferry_publisher_create(&pub, node, a.topic, CLI_FRAME_TYPE, ferry_hash(CLI_FRAME_TYPE), &o);
    if (err != FERRY_OK) {
        int saved = errno;

        status = cli_fail(CMD, 1, "cannot publish on '%s': %s%s%s", a.topic, ferry_strerror(err),
                          err == FERRY_ESYS ? ": " : "", err == FERRY_ESYS ? strerror(saved) : "");
        ferry_node_destroy(node);
        return status;
    }
    if (isatty(STDERR_FILENO))
        fprintf(stderr, "ferry pub: %zu-byte frames on %s at %g Hz; Ctrl-C stops\n", a.size,
                a.topic, a.rate);

    status = wait_subscribers(pub, (uint32_t)a.wait_subscribers);
    if (status == 0) status = publish_loop(pub, &a, &published, &pool_full, &blocked, &elapsed);

    memset(&st, 0, sizeof st);
    err = ferry_publisher_stats_get(pub, &st);
    if (err != FERRY_OK && status == 0)
        status = cli_fail(CMD, 1, "ferry_publisher_stats_get: %s", ferry_strerror(err));
    printf("ferry pub: %s: published %" PRIu64 " frames of %zu bytes in %.3f s (%.2f Hz), "
           "dropped %" PRIu64 ", pool exhausted %" PRIu64 ", blocked %" PRIu64
           ", subscribers %" PRIu32 "\n",
           a.topic, published, a.size, (double)elapsed / 1e9,
           elapsed > 0 && published > 1 ? (double)(published - 1) * 1e9 / (double)elapsed : 0.0,
           st.dropped, pool_full.count, blocked.count, st.subscribers);
    fflush(stdout);

    err = ferry_publisher_destroy(pub);
    if (err != FERRY_OK && status == 0)
        status = cli_fail(CMD, 1, "ferry_publisher_destroy: %s", ferry_strerror(err));
    err = ferry_node_destroy(node);
    if (err != FERRY_OK && status == 0)
        status = cli_fail(CMD, 1, "ferry_node_destroy: %s", ferry_strerror(err));
    return status;
}
