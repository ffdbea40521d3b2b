/*
 * ferry delay: how old samples are when they arrive, like `ros2 topic delay`: the time from a
 * sample's header stamp to its take, on CLOCK_REALTIME (the clock ROS stamps are on). Once a
 * second it prints mean, min, p50, p99 and max over the last --window samples, and at the end
 * the same over every sample. Only for types whose samples carry a stamp (decode.h).
 */
#include "cli.h"
#include "commands.h"
#include "decode.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define CMD "delay"
#define NS_PER_S 1000000000LL
#define WAIT_SLICE_NS 100000000LL
#define WINDOW_DEFAULT 100u
/* The final percentiles cover at most this many samples (the first ones): 128 MiB. */
#define ALL_MAX ((size_t)1 << 24)

typedef struct delay_args {
    cli_opts o; /* --count, --type, --timeout, --domain, --dir */
    const char *topic;
    uint64_t window;
} delay_args;

static const char about[] =
    "usage: ferry delay TOPIC [options]\n"
    "Prints once a second, over the last --window samples received, the delay from each\n"
    "sample's header stamp to its take (CLOCK_REALTIME, as ROS stamps are):\n"
    "  delay mean A ms  min B ms  p50 C ms  p99 D ms  max E ms  window N\n"
    "and at the end the same over every sample ('total', with the sample count). A second\n"
    "with no new sample prints 'no new samples'. Only for types with a header stamp;\n"
    "samples whose stamp is zero are counted as unstamped and left out.\n"
    "\n"
    "options:\n";

static const cli_option options[] = {
    {.name = "--window",
     .value = "N",
     CLI_WHOLE_AT(delay_args, window),
     .range = &cli_ranges[CLI_R_DELAY_WINDOW],
     .help = "samples the periodic statistics cover, 1..1000000 (default 100)"},
    CLI_OPTION_COUNT("stop after N samples; 0 runs until a signal (default 0)"),
    CLI_OPTION_TYPE("type name to subscribe with at once (default: the type of the\n"
                    "topic's publishers; with none yet, it waits for one, and says\n"
                    "so after a second)"),
    CLI_OPTION_TIMEOUT("give up after SEC seconds (0..1000000000); exits 1 if no\n"
                       "publisher came, or --count samples had not come by then\n"
                       "(default: never)"),
    CLI_OPTIONS_WHERE_END,
};

static int parse_args(int argc, char **argv, delay_args *a)
{
    cli_parser p = {
        .cmd = CMD, .table = options, .about = about, .column = 19, .dest = a, .opts = &a->o};

    memset(a, 0, sizeof *a);
    cli_opts_init(&a->o);
    a->window = WINDOW_DEFAULT;
    if (cli_getopt(&p, argc, argv) != CLI_OPTS_END)
        return p.status;
    if (!cli_topic_operand(CMD, argc, argv, &a->topic))
        return 2;
    return -1;
}

/* The delays: the last window ones in a ring, every one (up to ALL_MAX) in all. */
typedef struct delays {
    int64_t *ring, *scratch;
    size_t cap, count, next;
    uint64_t fresh; /* since the last report */
    cli_lat all;
    size_t all_cap;
    uint64_t total, unstamped, invalid;
    double sum_all;
    int64_t min_all, max_all;
} delays;

static bool delays_init(delays *d, size_t window)
{
    memset(d, 0, sizeof *d);
    d->ring = malloc(window * sizeof *d->ring);
    d->scratch = malloc(window * sizeof *d->scratch);
    d->cap = window;
    return d->ring != NULL && d->scratch != NULL && cli_lat_init(&d->all, 0);
}

static void delays_free(delays *d)
{
    free(d->ring);
    free(d->scratch);
    cli_lat_free(&d->all);
}

static void delays_add(delays *d, int64_t ns)
{
    d->ring[d->next] = ns;
    d->next = (d->next + 1) % d->cap;
    if (d->count < d->cap)
        d->count++;
    d->fresh++;
    if (d->total == 0 || ns < d->min_all)
        d->min_all = ns;
    if (d->total == 0 || ns > d->max_all)
        d->max_all = ns;
    d->total++;
    d->sum_all += (double)ns;
    /* Grown by doubling; past ALL_MAX the percentiles keep the samples they have. */
    if (d->all.count == d->all.capacity && d->all.capacity < ALL_MAX) {
        size_t cap = d->all.capacity ? d->all.capacity * 2 : 1024;
        int64_t *grown = realloc(d->all.ns, cap * sizeof *grown);

        if (grown != NULL) {
            d->all.ns = grown;
            d->all.capacity = cap;
        }
    }
    cli_lat_add(&d->all, ns);
}

static void print_stats(const char *label, cli_lat *l, double mean, int64_t min, int64_t max)
{
    printf("%s mean %.3f ms  min %.3f ms  p50 %.3f ms  p99 %.3f ms  max %.3f ms", label, mean / 1e6,
           (double)min / 1e6, (double)cli_lat_pct(l, 50.0) / 1e6,
           (double)cli_lat_pct(l, 99.0) / 1e6, (double)max / 1e6);
}

static void report(delays *d)
{
    cli_lat l = {d->scratch, d->count, d->count};
    int64_t min = d->ring[0], max = d->ring[0];
    double sum = 0.0;
    size_t i;

    for (i = 0; i < d->count; i++) {
        d->scratch[i] = d->ring[i];
        min = d->ring[i] < min ? d->ring[i] : min;
        max = d->ring[i] > max ? d->ring[i] : max;
        sum += (double)d->ring[i];
    }
    print_stats("delay", &l, sum / (double)d->count, min, max);
    printf("  window %zu\n", d->count);
}

static void summary(delays *d)
{
    if (d->total == 0) {
        printf("total samples 0  unstamped %" PRIu64 "  invalid %" PRIu64 "\n", d->unstamped,
               d->invalid);
        return;
    }
    print_stats("total delay", &d->all, d->sum_all / (double)d->total, d->min_all, d->max_all);
    printf("  samples %" PRIu64 "  unstamped %" PRIu64 "  invalid %" PRIu64 "\n", d->total,
           d->unstamped, d->invalid);
}

/* Every sample taken, stamped or not. */
static uint64_t delays_taken(const delays *d)
{
    return d->total + d->unstamped + d->invalid;
}

/* One taken sample into d: its delay, or counted as invalid or unstamped. */
static void take_one(delays *d, const cli_msg_type *decoder, const ferry_sample *s)
{
    int64_t now = cli_realtime_ns();
    cli_msg m;

    memset(&m, 0, sizeof m);
    cli_msg_decode(decoder, s, &m, NULL, 0);
    if (!m.valid)
        d->invalid++;
    else if (!m.has_stamp || cli_stamp_ns(m.stamp) == 0)
        d->unstamped++;
    else
        delays_add(d, now - cli_stamp_ns(m.stamp));
}

static int delay_loop(ferry_subscriber *sub, const delay_args *a, const cli_msg_type *decoder,
                      int64_t deadline, delays *d, bool *timed_out, cli_watch *wa)
{
    int64_t now = ferry_now().ns, next_report = now + NS_PER_S;

    while (!cli_stop_requested && (a->o.count == 0 || d->total < a->o.count)) {
        ferry_sample s;
        ferry_err err = ferry_take(sub, &s);
        int64_t until;

        if (err == FERRY_OK) {
            take_one(d, decoder, &s);
            err = ferry_release(sub, &s);
            if (err != FERRY_OK)
                return cli_fail_err(CMD, 1, err, "ferry_release");
        } else if (err != FERRY_EAGAIN) {
            return cli_fail_err(CMD, 1, err, "ferry_take");
        } else {
            cli_watch_tick(wa, delays_taken(d));
        }
        now = ferry_now().ns;
        if (now >= next_report) {
            if (d->fresh == 0)
                printf("no new samples\n");
            else
                report(d);
            d->fresh = 0;
            /* A reader that left (EPIPE) ends the command like a signal does. */
            if (ferror(stdout))
                return errno == EPIPE ? 0 : 1;
            next_report += NS_PER_S;
            if (next_report <= now)
                next_report = now + NS_PER_S;
            continue;
        }
        if (deadline >= 0 && now >= deadline) {
            *timed_out = true;
            return 0;
        }
        if (err == FERRY_OK)
            continue;
        until = next_report;
        if (deadline >= 0 && deadline < until)
            until = deadline;
        if (until - now > WAIT_SLICE_NS)
            until = now + WAIT_SLICE_NS;
        err = ferry_wait(sub, until - now);
        if (err != FERRY_OK && err != FERRY_ETIMEDOUT)
            return cli_fail_err(CMD, 1, err, "ferry_wait");
    }
    return 0;
}

int ferry_cmd_delay(int argc, char **argv)
{
    ferry_subscriber_options o;
    ferry_subscriber *sub = NULL;
    ferry_node *node = NULL;
    const cli_msg_type *decoder;
    bool timed_out = false;
    cli_type_found found;
    char names[256];
    int64_t deadline;
    cli_watch wa;
    cli_type type;
    ferry_err err;
    delay_args a;
    delays d;
    int status;

    status = parse_args(argc, argv, &a);
    if (status >= 0)
        return status;
    if (ferry_topic_validate(a.topic) != FERRY_OK)
        return cli_fail(CMD, 2, "invalid topic name '%s'", a.topic);
    cli_msg_stamped_names(names, sizeof names);
    if (a.o.type != NULL && !cli_msg_type_find(a.o.type)->stamped)
        return cli_fail(CMD, 2, "--type %s has no header stamp (delay takes %s)", a.o.type, names);

    setvbuf(stdout, NULL, _IOLBF, 0);
    cli_stop_on_signals();
    deadline = a.o.timeout_s >= 0.0 ? ferry_now().ns + (int64_t)(a.o.timeout_s * 1e9) : -1;
    cli_watch_init(&wa, CMD, &a.o, a.topic);
    found = cli_topic_type(&wa, deadline, &type);
    if (found != CLI_TYPE_FOUND)
        return found == CLI_TYPE_TIMEOUT ? cli_watch_fail(&wa, a.o.timeout_s) : 0;
    decoder = cli_msg_type_find(type.name);
    if (!decoder->stamped)
        return cli_fail(CMD, 1, "%s carries %s, which has no header stamp (delay takes %s)",
                        a.topic, type.name, names);
    if (!delays_init(&d, (size_t)a.window)) {
        delays_free(&d);
        return cli_fail(CMD, 1, "out of memory");
    }

    /* A deeper queue than the default keeps a busy moment from showing up as drops. */
    ferry_subscriber_options_init(&o);
    if (o.depth < 16)
        o.depth = 16;
    if (cli_subscribe(CMD, &a.o.where, a.topic, &type, &o, &node, &sub) != 0) {
        delays_free(&d);
        return 1;
    }

    status = delay_loop(sub, &a, decoder, deadline, &d, &timed_out, &wa);
    summary(&d);
    /* With a publisher and no --count, --timeout is simply how long to listen. */
    if (timed_out && status == 0 && cli_watch_none(&wa, delays_taken(&d)))
        status = cli_watch_fail(&wa, a.o.timeout_s);
    else if (timed_out && a.o.count != 0 && status == 0)
        status = cli_fail(CMD, 1, "timed out after %g s with %" PRIu64 " of %" PRIu64 " samples",
                          a.o.timeout_s, d.total, a.o.count);

    err = ferry_subscriber_destroy(sub);
    if (err != FERRY_OK && status == 0)
        status = cli_fail_err(CMD, 1, err, "ferry_subscriber_destroy");
    err = ferry_node_destroy(node);
    if (err != FERRY_OK && status == 0)
        status = cli_fail_err(CMD, 1, err, "ferry_node_destroy");
    delays_free(&d);
    if (fflush(stdout) != 0 && errno != EPIPE && status == 0)
        status = 1;
    return status;
}
