/*
 * ferry play: publishes the messages of an MCAP file on ferry at their recorded pace: each when
 * its publish time comes (the publisher's time, as ferry record stores it; the log time where a
 * message has none), the deltas divided by --rate. While it waits, for subscribers or for the
 * next message, it runs every publisher's housekeeping, so that a subscriber of any topic is
 * answered at once. A channel of a ROS 2 type ("cdr" messages of a known ros2msg
 * schema) gets a publisher of the ferry type of that kind and each message is parsed and
 * published through a loan (src/ros2/ros2.h); a "ferry-raw" channel gets a publisher of the
 * ferry type its metadata names and each message is copied into a loan as it is. Messages that
 * do not parse are counted and skipped. Single-threaded.
 */
#include "cli.h"
#include "commands.h"
#include "mcap.h"
#include "ros2.h"
#include "util.h"

#include <errno.h>
#include <fnmatch.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CMD "play"
#define NS_PER_S 1000000000LL
#define FILTERS_MAX 64
#define SLEEP_SLICE_NS 50000000LL
#define SAMPLE_MAX ((size_t)256 << 20)
#define POOL_BYTES ((size_t)1 << 30)
#define LINGER_NS (2 * NS_PER_S)

typedef struct play_args {
    cli_opts o; /* --timeout, --quiet, --domain, --dir */
    const char *file;
    double rate, start_s, end_s;
    bool loop, has_end;
    const char *topics[FILTERS_MAX];
    size_t ntopics;
    const char *remap_from[FILTERS_MAX], *remap_to[FILTERS_MAX];
    size_t nremaps;
    uint64_t wait_subscribers;
} play_args;

/* Codes of the options that need more than their row: cli_getopt returns them. */
enum { O_TOPIC = CLI_O_OWN, O_END, O_REMAP };

static const char about[] =
    "usage: ferry play FILE.mcap [options]\n"
    "Publishes the messages of FILE (written by `ferry record`, rosbag2 or any MCAP\n"
    "writer of ROS 2 CDR messages) on ferry at their recorded pace: each message when\n"
    "its publish time comes (the publisher's time, which ferry record stores; the log\n"
    "time where a writer left it 0), in file order. ROS 2 types that ferry has\n"
    "(Image, PointCloud2, CameraInfo, CompressedImage, Imu, ferry_msgs/Tensor) are\n"
    "published as ferry's own; ferry-raw channels with the type they were recorded\n"
    "with; other channels are skipped. Stamps are the recorded ones. Prints a summary\n"
    "on stderr; exits 1 when the file is unreadable or a record is malformed.\n"
    "\n"
    "options:\n";

static const cli_option options[] = {
    {.name = "--rate",
     .value = "X",
     CLI_REAL_AT(play_args, rate),
     .range = &cli_ranges[CLI_R_PLAY_RATE],
     .help = "speed factor, 0.001..1000; 0 publishes as fast as possible\n"
             "(default 1)"},
    {.name = "--loop",
     CLI_FLAG_AT(play_args, loop),
     .help = "start again at the end, until a signal"},
    {.name = "--topic",
     .value = "PATTERN",
     .kind = CLI_K_CODE,
     .code = O_TOPIC,
     .help = "play only topics matching PATTERN (fnmatch); repeatable"},
    {.name = "--start",
     .value = "S",
     CLI_REAL_AT(play_args, start_s),
     .range = &cli_ranges[CLI_R_PLAY_TIME],
     .help = "skip the first S seconds of the file (log time)"},
    {.name = "--end",
     .value = "S",
     CLI_REAL_AT(play_args, end_s),
     .range = &cli_ranges[CLI_R_PLAY_TIME],
     .code = O_END,
     .help = "stop S seconds after the file's start (log time)"},
    {.name = "--remap",
     .value = "FROM:TO",
     .kind = CLI_K_CODE,
     .code = O_REMAP,
     .help = "publish topic FROM as TO; repeatable"},
    {.name = "--wait-subscribers",
     .value = "N",
     CLI_WHOLE_AT(play_args, wait_subscribers),
     .range = &cli_ranges[CLI_R_PUB_WAIT_SUBSCRIBERS],
     .help = "wait (up to --timeout, default 10 s) until every publisher\n"
             "has N subscribers before the first message; subscribers\n"
             "of every topic are served meanwhile"},
    CLI_OPTION_TIMEOUT("how long --wait-subscribers waits"),
    CLI_OPTION_QUIET("print no summary"),
    CLI_OPTIONS_WHERE_END,
};

static int parse_args(int argc, char **argv, play_args *a)
{
    cli_parser p = {
        .cmd = CMD, .table = options, .about = about, .column = 24, .dest = a, .opts = &a->o};
    int c;

    memset(a, 0, sizeof *a);
    cli_opts_init(&a->o);
    a->rate = 1.0;
    while ((c = cli_getopt(&p, argc, argv)) >= CLI_O_OWN) {
        char *colon;

        switch (c) {
        case O_TOPIC:
            if (a->ntopics == FILTERS_MAX)
                return cli_fail(CMD, 2, "at most %d --topic options", FILTERS_MAX);
            a->topics[a->ntopics++] = optarg;
            break;
        case O_END:
            a->has_end = true;
            break;
        case O_REMAP:
            colon = strchr(optarg, ':');
            if (colon == NULL || colon == optarg || colon[1] == '\0')
                return cli_fail(CMD, 2, "--remap %s: FROM:TO", optarg);
            if (a->nremaps == FILTERS_MAX)
                return cli_fail(CMD, 2, "at most %d --remap options", FILTERS_MAX);
            *colon = '\0';
            a->remap_from[a->nremaps] = optarg;
            a->remap_to[a->nremaps++] = colon + 1;
            if (ferry_topic_validate(colon + 1) != FERRY_OK)
                return cli_fail(CMD, 2, "--remap: invalid topic name '%s'", colon + 1);
            break;
        }
    }
    if (c == CLI_OPTS_EXIT)
        return p.status;
    if (optind + 1 != argc)
        return cli_fail(CMD, 2, optind >= argc ? "no FILE.mcap given" : "one FILE.mcap only");
    a->file = argv[optind];
    if (a->has_end && a->end_s < a->start_s)
        return cli_fail(CMD, 2, "--end is before --start");
    return -1;
}

/* What each channel of the file is published as. */
typedef struct pchannel {
    uint16_t id;
    bool play;
    ferry_ros2_kind kind;
    ferry_publisher *pub;
    char topic[FERRY_TOPIC_MAX + 2];
} pchannel;

typedef struct player {
    const play_args *a;
    ferry_mcap_reader *r;
    ferry_node *node;
    pchannel *ch;
    size_t nch;
    struct pollfd *fds; /* the publishers' descriptors, for their housekeeping */
    size_t nfds;
    int64_t wall0; /* when the first message of this pass was due */
    uint64_t t0;   /* its pace time (pace_time) */
    bool first;
    uint64_t published, malformed, failed, skipped;
    const char *first_failure;
} player;

static bool topic_wanted(const play_args *a, const char *topic)
{
    if (a->ntopics == 0)
        return true;
    for (size_t i = 0; i < a->ntopics; i++) {
        const char *pat = a->topics[i];
        char with_slash[FERRY_TOPIC_MAX + 2];

        snprintf(with_slash, sizeof with_slash, "%s%s", pat[0] == '/' ? "" : "/", pat);
        if (fnmatch(with_slash, topic, 0) == 0)
            return true;
    }
    return false;
}

static const char *meta_value(const ferry_mcap_channel *c, const char *key)
{
    for (size_t i = 0; i < c->nmetadata; i++)
        if (strcmp(c->metadata[i].key, key) == 0)
            return c->metadata[i].value;
    return NULL;
}

/* The ferry type of a channel; false (after a line on stderr) for one that cannot be played. */
static bool channel_type(const ferry_mcap_reader *r, const ferry_mcap_channel *c,
                         ferry_ros2_kind *kind, const char **type, uint64_t *hash)
{
    const ferry_mcap_schema *s = ferry_mcap_reader_schema(r, c->schema_id);

    *kind = FERRY_ROS2_NONE;
    if (strcmp(c->message_encoding, "cdr") == 0 && s != NULL &&
        strcmp(s->encoding, "ros2msg") == 0) {
        *kind = ferry_ros2_kind_of_name(s->name);
        if (*kind != FERRY_ROS2_NONE) {
            *type = ferry_ros2_ferry_type(*kind);
            *hash = ferry_ros2_ferry_hash(*kind);
            return true;
        }
        fprintf(stderr, "ferry play: %s: type %s has no ferry counterpart; skipped\n", c->topic,
                s->name);
        return false;
    }
    if (strcmp(c->message_encoding, "ferry-raw") == 0) {
        const char *t = meta_value(c, "ferry.type"), *h = meta_value(c, "ferry.type_hash");
        char *end = NULL;

        if (t != NULL && h != NULL && t[0] != '\0' && strlen(t) <= FERRY_TYPE_NAME_MAX) {
            errno = 0;
            *hash = strtoull(h, &end, 0);
            if (errno == 0 && end != h && *end == '\0') {
                *type = t;
                return true;
            }
        }
        fprintf(stderr,
                "ferry play: %s: ferry-raw channel without a valid ferry.type and "
                "ferry.type_hash; skipped\n",
                c->topic);
        return false;
    }
    fprintf(stderr, "ferry play: %s: message encoding '%s' is not played; skipped\n", c->topic,
            c->message_encoding);
    return false;
}

static int make_publishers(player *P)
{
    const ferry_mcap_info *in = ferry_mcap_reader_info(P->r);
    ferry_publisher_options o;

    P->ch = calloc(in->nchannels ? in->nchannels : 1, sizeof *P->ch);
    P->fds = calloc(in->nchannels ? in->nchannels : 1, sizeof *P->fds);
    if (P->ch == NULL || P->fds == NULL)
        return cli_fail(CMD, 1, "out of memory");
    ferry_publisher_options_init(&o);
    o.max_sample_size = SAMPLE_MAX;
    o.pool_bytes = POOL_BYTES;
    /* A subscriber that holds its samples makes the player wait a little, not lose them. */
    o.on_pool_exhausted = FERRY_POOL_BLOCK;
    for (size_t i = 0; i < in->nchannels; i++) {
        const ferry_mcap_channel *c = &in->channels[i];
        pchannel *pc = &P->ch[P->nch++];
        const char *type = NULL, *topic = c->topic;
        uint64_t hash = 0;
        ferry_err err;

        pc->id = c->id;
        if (!topic_wanted(P->a, c->topic))
            continue;
        for (size_t k = 0; k < P->a->nremaps; k++) {
            const char *from = P->a->remap_from[k];

            if (strcmp(from, topic) == 0 || (from[0] != '/' && strcmp(from, topic + 1) == 0))
                topic = P->a->remap_to[k];
        }
        if (ferry_topic_validate(topic) != FERRY_OK) {
            fprintf(stderr, "ferry play: '%s' is not a ferry topic name; skipped\n", topic);
            continue;
        }
        if (!channel_type(P->r, c, &pc->kind, &type, &hash))
            continue;
        snprintf(pc->topic, sizeof pc->topic, "%s%s", topic[0] == '/' ? "" : "/", topic);
        err = ferry_publisher_create(&pc->pub, P->node, pc->topic, type, hash, &o);
        if (err != FERRY_OK)
            return cli_fail(CMD, 1, "cannot publish %s (type %s): %s", pc->topic, type,
                            ferry_strerror(err));
        pc->play = true;
        err = ferry_publisher_fd(pc->pub, &P->fds[P->nfds].fd);
        if (err != FERRY_OK)
            return cli_fail(CMD, 1, "%s: ferry_publisher_fd: %s", pc->topic, ferry_strerror(err));
        P->fds[P->nfds++].events = POLLIN;
    }
    return 0;
}

static pchannel *channel_of(player *P, uint16_t id)
{
    for (size_t i = 0; i < P->nch; i++)
        if (P->ch[i].id == id)
            return &P->ch[i];
    return NULL;
}

/* Waits until t (CLOCK_MONOTONIC) running every publisher's housekeeping as its descriptor
 * fires: a subscriber that connects is answered at once (it gives a publisher 2 s to answer its
 * hello), whichever topic it wants and however long the wait. In slices, so that a signal ends
 * the wait promptly. */
static void idle_until(player *P, int64_t t)
{
    while (!cli_stop_requested) {
        int64_t left = t - ferry_now().ns;
        struct timespec ts;

        if (left <= 0)
            return;
        if (left > SLEEP_SLICE_NS)
            left = SLEEP_SLICE_NS;
        ts.tv_sec = (time_t)(left / NS_PER_S);
        ts.tv_nsec = (long)(left % NS_PER_S);
        if (ppoll(P->fds, P->nfds, &ts, NULL) > 0)
            for (size_t i = 0; i < P->nch; i++)
                if (P->ch[i].pub != NULL)
                    ferry_publisher_poll(P->ch[i].pub, 0);
    }
}

/* When a message is due: its publish time, the publisher's own, which ferry record stores (and
 * rosbag2 where the middleware gives it) and which a late recorder does not shift; its log time
 * where a writer left the publish time 0. */
static uint64_t pace_time(const ferry_mcap_message *m)
{
    return m->publish_time != 0 ? m->publish_time : m->log_time;
}

static void count_failure(player *P, const char *why)
{
    if (P->first_failure == NULL)
        P->first_failure = why;
}

static bool on_message(void *arg, const ferry_mcap_message *m)
{
    player *P = arg;
    pchannel *pc = channel_of(P, m->channel_id);
    ferry_err err;

    if (cli_stop_requested)
        return false;
    if (pc == NULL || !pc->play) {
        P->skipped++;
        return true;
    }
    if (P->first) {
        P->first = false;
        P->wall0 = ferry_now().ns;
        P->t0 = pace_time(m);
    } else if (P->a->rate > 0.0 && pace_time(m) > P->t0) {
        /* On the first message's schedule: one published late is not made up for by the
         * others (and one due before the last goes at once, after it). */
        idle_until(P, P->wall0 + (int64_t)((double)(pace_time(m) - P->t0) / P->a->rate));
        if (cli_stop_requested)
            return false;
    }
    if (pc->kind != FERRY_ROS2_NONE) {
        ferry_ros2_msg msg;
        const char *why = NULL;

        if (ferry_ros2_cdr_parse(pc->kind, m->data, m->size, &msg) != FERRY_ROS2_CDR_OK) {
            P->malformed++;
            return true;
        }
        err = ferry_ros2_publish(pc->pub, &msg, &why);
        if (err == FERRY_EINVAL) {
            P->malformed++;
            return true;
        }
        if (err != FERRY_OK) {
            P->failed++;
            count_failure(P, why != NULL ? why : ferry_strerror(err));
            return true;
        }
    } else {
        void *loan;

        if (m->size == 0) {
            P->malformed++;
            return true;
        }
        err = ferry_loan(pc->pub, m->size, &loan);
        if (err != FERRY_OK) {
            P->failed++;
            count_failure(P, ferry_strerror(err));
            return true;
        }
        memcpy(loan, m->data, m->size);
        err = ferry_publish(pc->pub, loan, m->size);
        if (err != FERRY_OK) {
            ferry_loan_release(pc->pub, loan);
            P->failed++;
            count_failure(P, ferry_strerror(err));
            return true;
        }
    }
    P->published++;
    return true;
}

/* Waits until every publisher has the subscribers asked for, serving all of them meanwhile. */
static int wait_subscribers(player *P)
{
    int64_t timeout = P->a->o.timeout_s >= 0.0 ? (int64_t)(P->a->o.timeout_s * 1e9) : 10 * NS_PER_S;
    int64_t deadline = ferry_now().ns + timeout;

    for (;;) {
        const char *short_of = NULL;
        size_t missing = 0;
        int64_t now;

        for (size_t i = 0; i < P->nch; i++) {
            ferry_err err;

            if (!P->ch[i].play)
                continue;
            err =
                ferry_publisher_wait_subscribers(P->ch[i].pub, (uint32_t)P->a->wait_subscribers, 0);
            if (err == FERRY_OK)
                continue;
            if (err != FERRY_ETIMEDOUT)
                return cli_fail(CMD, 1, "%s: ferry_publisher_wait_subscribers: %s", P->ch[i].topic,
                                ferry_strerror(err));
            if (short_of == NULL)
                short_of = P->ch[i].topic;
            missing++;
        }
        if (missing == 0 || cli_stop_requested)
            return 0;
        now = ferry_now().ns;
        if (now >= deadline) {
            if (missing == 1)
                return cli_fail(CMD, 1, "%s: fewer than %" PRIu64 " subscribers after %.3g s",
                                short_of, P->a->wait_subscribers, (double)timeout / 1e9);
            return cli_fail(
                CMD, 1, "%s and %zu other topics: fewer than %" PRIu64 " subscribers after %.3g s",
                short_of, missing - 1, P->a->wait_subscribers, (double)timeout / 1e9);
        }
        idle_until(P, now + SLEEP_SLICE_NS < deadline ? now + SLEEP_SLICE_NS : deadline);
    }
}

/* Samples still queued when a publisher goes are lost to its subscribers: wait (up to
 * LINGER_NS) until every one of them was taken and given back. */
static void linger(player *P)
{
    int64_t deadline = ferry_now().ns + LINGER_NS;
    bool busy = true;

    while (busy && !cli_stop_requested && ferry_now().ns < deadline) {
        busy = false;
        for (size_t i = 0; i < P->nch; i++) {
            ferry_publisher_stats st;

            if (P->ch[i].pub == NULL)
                continue;
            if (ferry_publisher_stats_get(P->ch[i].pub, &st) == FERRY_OK && st.chunks_in_use > 0 &&
                st.subscribers > 0)
                busy = true;
        }
        if (busy)
            cli_sleep_until(ferry_now().ns + 10000000);
    }
}

int ferry_cmd_play(int argc, char **argv)
{
    /* Not automatic: used after a jump back from SIGBUS (cli_bus_arm). */
    static player P;
    static play_args a;
    char why[256];
    const ferry_mcap_info *in;
    uint64_t start, end;
    int status;
    ferry_err err;

    status = parse_args(argc, argv, &a);
    if (status >= 0)
        return status;
    memset(&P, 0, sizeof P);
    P.a = &a;
    if (sigsetjmp(cli_bus_jump, 1) != 0) {
        cli_bus_disarm();
        fprintf(stderr, "ferry play: %s: the file shrank while it was read\n", a.file);
        status = 1;
        goto gone;
    }
    cli_bus_arm();
    err = ferry_mcap_reader_open(&P.r, a.file, why, sizeof why);
    if (err != FERRY_OK) {
        cli_bus_disarm();
        return cli_fail(CMD, 1, "%s: %s", a.file, why);
    }
    in = ferry_mcap_reader_info(P.r);
    if (in->truncated && !a.o.quiet)
        fprintf(stderr, "ferry play: %s is truncated (no footer): playing what it holds\n", a.file);
    if (in->summary_ignored[0] && !a.o.quiet)
        fprintf(stderr, "ferry play: %s: summary ignored (%s); scanned\n", a.file,
                in->summary_ignored);
    start = in->start_time + (uint64_t)(a.start_s * 1e9);
    end = a.has_end ? in->start_time + (uint64_t)(a.end_s * 1e9) : UINT64_MAX;
    cli_stop_on_signals();
    ferry_mcap_reader_set_cancel(P.r, &cli_stop_requested);
    status = 1;
    if (cli_node(&a.o.where, CMD, &P.node) != FERRY_OK)
        goto out;
    status = make_publishers(&P);
    if (status != 0)
        goto out;
    if (a.wait_subscribers > 0 && (status = wait_subscribers(&P)) != 0)
        goto out;
    do {
        P.first = true;
        err = ferry_mcap_reader_messages(P.r, start, end, on_message, &P, why, sizeof why);
        if (err != FERRY_OK) {
            status = cli_fail(CMD, 1, "%s: %s", a.file, why);
            break;
        }
    } while (a.loop && !cli_stop_requested);
    if (!a.o.quiet) {
        fprintf(stderr,
                "ferry play: published %" PRIu64 ", malformed %" PRIu64 ", failed %" PRIu64
                ", skipped %" PRIu64 "%s%s\n",
                P.published, P.malformed, P.failed, P.skipped,
                P.first_failure != NULL ? " (first failure: " : "",
                P.first_failure != NULL ? P.first_failure : "");
        if (P.first_failure != NULL)
            fputs(")\n", stderr);
    }
out:
    linger(&P);
gone:
    cli_bus_disarm();
    for (size_t i = 0; i < P.nch; i++)
        if (P.ch[i].pub != NULL)
            ferry_publisher_destroy(P.ch[i].pub);
    free(P.ch);
    free(P.fds);
    if (P.node != NULL)
        ferry_node_destroy(P.node);
    ferry_mcap_reader_close(P.r);
    return status;
}
