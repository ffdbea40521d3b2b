/*
 * ferry hz: measures a topic's rate, like `rostopic hz`. Once a second it prints the rate, the
 * minimum, maximum, mean and standard deviation of the period and the bandwidth over the last
 * --window samples. Periods are taken between the publish times of the samples received.
 */
#include "cli.h"
#include "commands.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#define CMD "hz"
#define NS_PER_S 1000000000LL
#define WAIT_SLICE_NS 100000000LL
#define WINDOW_DEFAULT 100u

typedef struct hz_args {
    cli_opts o; /* --count, --type, --timeout, --domain, --dir */
    const char *topic;
    uint64_t window;
} hz_args;

static const char about[] =
    "usage: ferry hz TOPIC [options]\n"
    "Prints once a second, over the last --window samples received:\n"
    "  rate R Hz  period min A ms max B ms mean C ms std D ms  bandwidth E MB/s  window N\n"
    "(MB = 10^6 bytes). Periods are measured between publish times; a second with no new\n"
    "sample prints 'no new samples'.\n"
    "\n"
    "options:\n";

static const cli_option options[] = {
    {.name = "--window",
     .value = "N",
     CLI_WHOLE_AT(hz_args, window),
     .range = &cli_ranges[CLI_R_HZ_WINDOW],
     .help = "samples the statistics cover, 2..1000000 (default 100)"},
    CLI_OPTION_COUNT("stop after N rate reports; 0 runs until a signal (default 0)"),
    CLI_OPTION_TYPE("type name to subscribe with (default: the type of the topic's\n"
                    "publishers; with none yet, it waits for one, and says so after\n"
                    "a second)"),
    CLI_OPTION_TIMEOUT("give up after SEC seconds (0..1000000000); exits 1 if no\n"
                       "publisher came, or --count reports were not printed by then\n"
                       "(default: never)"),
    CLI_OPTIONS_WHERE_END,
};

static int parse_args(int argc, char **argv, hz_args *a)
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

/* The last cap samples received: publish times and sizes, in a ring. */
typedef struct window {
    int64_t *t_ns;
    size_t *size;
    size_t cap, count, next;
    uint64_t fresh; /* samples since the last report */
} window;

static bool window_init(window *w, size_t cap)
{
    memset(w, 0, sizeof *w);
    w->t_ns = malloc(cap * sizeof *w->t_ns);
    w->size = malloc(cap * sizeof *w->size);
    w->cap = cap;
    return w->t_ns != NULL && w->size != NULL;
}

static void window_free(window *w)
{
    free(w->t_ns);
    free(w->size);
}

static void window_add(window *w, int64_t t_ns, size_t size)
{
    w->t_ns[w->next] = t_ns;
    w->size[w->next] = size;
    w->next = (w->next + 1) % w->cap;
    if (w->count < w->cap)
        w->count++;
    w->fresh++;
}

/* Prints one report; returns false when the window holds too little for a rate. */
static bool window_report(const window *w)
{
    size_t first = (w->next + w->cap - w->count) % w->cap, i;
    int64_t pmin = INT64_MAX, pmax = INT64_MIN, span;
    double sum = 0.0, sumsq = 0.0, mean, var, bytes = 0.0;
    size_t periods = 0;

    if (w->count < 2)
        return false;
    for (i = 1; i < w->count; i++) {
        size_t prev = (first + i - 1) % w->cap, cur = (first + i) % w->cap;
        int64_t p = w->t_ns[cur] - w->t_ns[prev];

        pmin = p < pmin ? p : pmin;
        pmax = p > pmax ? p : pmax;
        sum += (double)p;
        sumsq += (double)p * (double)p;
        bytes += (double)w->size[cur];
        periods++;
    }
    span = w->t_ns[(first + w->count - 1) % w->cap] - w->t_ns[first];
    if (span <= 0)
        return false;
    mean = sum / (double)periods;
    var = sumsq / (double)periods - mean * mean;
    printf("rate %.3f Hz  period min %.3f ms max %.3f ms mean %.3f ms std %.3f ms  "
           "bandwidth %.2f MB/s  window %zu\n",
           (double)periods * 1e9 / (double)span, (double)pmin / 1e6, (double)pmax / 1e6, mean / 1e6,
           var > 0.0 ? sqrt(var) / 1e6 : 0.0, bytes * 1e3 / (double)span, w->count);
    return true;
}

static int hz_loop(ferry_subscriber *sub, const hz_args *a, int64_t deadline, window *w,
                   uint64_t *reports, uint64_t *received, bool *timed_out, cli_watch *wa)
{
    int64_t now = ferry_now().ns;
    int64_t next_report = now + NS_PER_S;

    while (!cli_stop_requested && (a->o.count == 0 || *reports < a->o.count)) {
        ferry_sample s;
        ferry_err err = ferry_take(sub, &s);
        int64_t until;

        if (err == FERRY_OK) {
            window_add(w, s.publish_time.ns, s.size);
            (*received)++;
            err = ferry_release(sub, &s);
            if (err != FERRY_OK)
                return cli_fail_err(CMD, 1, err, "ferry_release");
        } else if (err != FERRY_EAGAIN) {
            return cli_fail_err(CMD, 1, err, "ferry_take");
        } else {
            cli_watch_tick(wa, *received);
        }
        now = ferry_now().ns;
        if (now >= next_report) {
            if (w->fresh == 0)
                printf("no new samples\n");
            else if (window_report(w))
                (*reports)++;
            w->fresh = 0;
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

int ferry_cmd_hz(int argc, char **argv)
{
    ferry_subscriber_options o;
    ferry_subscriber *sub = NULL;
    ferry_node *node = NULL;
    bool timed_out = false;
    uint64_t reports = 0, received = 0;
    cli_type_found found;
    int64_t deadline;
    cli_watch wa;
    cli_type type;
    ferry_err err;
    hz_args a;
    window w;
    int status;

    status = parse_args(argc, argv, &a);
    if (status >= 0)
        return status;
    if (ferry_topic_validate(a.topic) != FERRY_OK)
        return cli_fail(CMD, 2, "invalid topic name '%s'", a.topic);
    if (!window_init(&w, (size_t)a.window)) {
        window_free(&w);
        return cli_fail(CMD, 1, "out of memory");
    }

    /* A deeper queue than the default keeps a busy moment from showing up as drops. */
    ferry_subscriber_options_init(&o);
    if (o.depth < 16)
        o.depth = 16;

    setvbuf(stdout, NULL, _IOLBF, 0);
    cli_stop_on_signals();
    deadline = a.o.timeout_s >= 0.0 ? ferry_now().ns + (int64_t)(a.o.timeout_s * 1e9) : -1;
    cli_watch_init(&wa, CMD, &a.o, a.topic);
    found = cli_topic_type(&wa, deadline, &type);
    if (found != CLI_TYPE_FOUND) {
        window_free(&w);
        return found == CLI_TYPE_TIMEOUT ? cli_watch_fail(&wa, a.o.timeout_s) : 0;
    }
    if (cli_subscribe(CMD, &a.o.where, a.topic, &type, &o, &node, &sub) != 0) {
        window_free(&w);
        return 1;
    }

    status = hz_loop(sub, &a, deadline, &w, &reports, &received, &timed_out, &wa);
    /* With a publisher and no --count, --timeout is simply how long to listen. */
    if (timed_out && status == 0 && cli_watch_none(&wa, received))
        status = cli_watch_fail(&wa, a.o.timeout_s);
    else if (timed_out && a.o.count != 0 && status == 0)
        status = cli_fail(CMD, 1, "timed out after %g s with %" PRIu64 " of %" PRIu64 " reports",
                          a.o.timeout_s, reports, a.o.count);

    err = ferry_subscriber_destroy(sub);
    if (err != FERRY_OK && status == 0)
        status = cli_fail_err(CMD, 1, err, "ferry_subscriber_destroy");
    err = ferry_node_destroy(node);
    if (err != FERRY_OK && status == 0)
        status = cli_fail_err(CMD, 1, err, "ferry_node_destroy");
    window_free(&w);
    return status;
}
