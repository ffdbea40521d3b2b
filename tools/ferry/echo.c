/*
 * ferry echo: subscribes to a topic and prints one line per sample: its sequence, size, one-way
 * latency and publisher, and with --verify whether a synthetic frame arrived intact.
 */
#include "cli.h"

#include <ferry/msg.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <string.h>

#define CMD "echo"
#define NS_PER_S 1000000000LL
#define WAIT_SLICE_NS 100000000LL

static void usage(FILE *to)
{
    fputs("usage: ferry echo TOPIC [options]\n"
          "Prints one line per sample taken from TOPIC:\n"
          "  seq=N size=N latency_us=X.X publisher=HEX [ok|CORRUPT]\n"
          "latency_us is the time from ferry_publish to the take. A summary goes to stderr at\n"
          "the end. Exits 1 when a frame failed --verify, or when --timeout expired before\n"
          "--count samples came.\n"
          "\n"
          "options:\n"
          "  --count N        stop after N samples; 0 runs until a signal (default 0)\n"
          "  --verify         check each synthetic frame's header and checksum (ok / CORRUPT);\n"
          "                   on sensor_msgs/Image and PointCloud2 topics, the sample must be\n"
          "                   a valid image or cloud whose data is a synthetic frame\n"
          "  --quiet          print no line per sample, only the summary\n"
          "  --type NAME      type name to subscribe with (default: the type of the topic's\n"
          "                   live endpoints, else " CLI_FRAME_TYPE ")\n"
          "  --depth N        queue depth per publisher, 1..4096 (default: the library's, 2)\n"
          "  --history N      ask each publisher for its last N samples on joining, 0..4096\n"
          "                   (default 0)\n"
          "  --timeout SEC    give up after SEC seconds, 0..1000000000 (default: never)\n"
          "  --domain N       domain number 0..1023 (default $FERRY_DOMAIN, else 0)\n"
          "  --dir PATH       root of the domain directories (default $FERRY_DIR, else\n"
          "                   /dev/shm/ferry-<uid>)\n"
          "  -h, --help       print this help\n",
          to);
}

typedef struct echo_args {
    cli_opts o; /* --count, --quiet, --type, --depth, --timeout, --domain, --dir */
    const char *topic;
    uint64_t history;
    bool verify;
    int kind; /* 0 synthetic frames, 1 images, 2 point clouds: what --verify checks */
} echo_args;

static int parse_args(int argc, char **argv, echo_args *a)
{
    enum { O_VERIFY = CLI_O_OWN, O_HISTORY };
    static const struct option options[] = {
        CLI_OPT_COUNT,
        {"verify", no_argument, NULL, O_VERIFY},
        CLI_OPT_QUIET,
        CLI_OPT_TYPE,
        CLI_OPT_DEPTH,
        {"history", required_argument, NULL, O_HISTORY},
        CLI_OPT_TIMEOUT,
        CLI_OPT_DOMAIN,
        CLI_OPT_DIR,
        CLI_OPT_HELP,
        CLI_OPT_END,
    };
    cli_parser p = {.cmd = CMD, .options = options, .usage = usage, .opts = &a->o};
    int c;

    memset(a, 0, sizeof *a);
    cli_opts_init(&a->o);
    while ((c = cli_getopt(&p, argc, argv)) >= CLI_O_OWN) {
        switch (c) {
        case O_VERIFY:
            a->verify = true;
            break;
        case O_HISTORY:
            if (!cli_parse_whole(CMD, &cli_ranges[CLI_R_SUB_HISTORY], optarg, &a->history))
                return 2;
            break;
        }
    }
    if (c == CLI_OPTS_EXIT) return p.status;
    if (!cli_topic_operand(CMD, argc, argv, &a->topic))
        return 2;
    return -1;
}

typedef struct echo_totals {
    uint64_t received;
    uint64_t corrupt;
    bool output_failed;
} echo_totals;

static bool sample_intact(const echo_args *a, const ferry_sample *s)
{
    if (a->kind == 1) {
        ferry_image_view v;

        return ferry_image_view_get(s, &v) == FERRY_OK && cli_frame_verify(v.data, v.data_size);
    }
    if (a->kind == 2) {
        ferry_pointcloud_view v;

        return ferry_pointcloud_view_get(s, &v) == FERRY_OK &&
               cli_frame_verify(v.data, v.data_size);
    }
    return cli_frame_verify(s->data, s->size);
}

static int echo_loop(ferry_subscriber *sub, const echo_args *a, echo_totals *tot, bool *timed_out)
{
    int64_t deadline =
        a->o.timeout_s >= 0.0 ? ferry_now().ns + (int64_t)(a->o.timeout_s * 1e9) : -1;

    while (!cli_stop_requested && (a->o.count == 0 || tot->received < a->o.count)) {
        ferry_sample s;
        ferry_err err = ferry_take(sub, &s);

        if (err == FERRY_OK) {
            int64_t latency = ferry_now().ns - s.publish_time.ns;
            bool intact = !a->verify || sample_intact(a, &s);

            tot->received++;
            if (!intact) tot->corrupt++;
            if (!a->o.quiet) {
                printf("seq=%" PRIu64 " size=%zu latency_us=%.1f publisher=%" PRIx64 "%s\n",
                       s.sequence, s.size, (double)latency / 1e3, s.publisher_id,
                       !a->verify ? ""
                       : intact   ? " ok"
                                  : " CORRUPT");
                if (ferror(stdout)) {
                    /* A reader that left (EPIPE) ends the command like a signal does. */
                    tot->output_failed = errno != EPIPE;
                    cli_stop_requested = 1;
                }
            }
            err = ferry_release(sub, &s);
            if (err != FERRY_OK) return cli_fail(CMD, 1, "ferry_release: %s", ferry_strerror(err));
            continue;
        }
        if (err != FERRY_EAGAIN) return cli_fail(CMD, 1, "ferry_take: %s", ferry_strerror(err));
        if (deadline >= 0) {
            int64_t left = deadline - ferry_now().ns;

            if (left <= 0) {
                *timed_out = true;
                return 0;
            }
            err = ferry_wait(sub, left < WAIT_SLICE_NS ? left : WAIT_SLICE_NS);
        } else {
            err = ferry_wait(sub, WAIT_SLICE_NS);
        }
        if (err != FERRY_OK && err != FERRY_ETIMEDOUT)
            return cli_fail(CMD, 1, "ferry_wait: %s", ferry_strerror(err));
    }
    return 0;
}

int ferry_cmd_echo(int argc, char **argv)
{
    ferry_subscriber_options o;
    ferry_subscriber_stats st;
    ferry_subscriber *sub = NULL;
    ferry_node *node = NULL;
    echo_totals tot = {0, 0, false};
    bool timed_out = false;
    cli_type type;
    ferry_err err;
    echo_args a;
    int status;

    status = parse_args(argc, argv, &a);
    if (status >= 0) return status;
    if (ferry_topic_validate(a.topic) != FERRY_OK)
        return cli_fail(CMD, 2, "invalid topic name '%s'", a.topic);
    cli_topic_type(&a.o.where, a.topic, a.o.type, &type);
    if (strcmp(type.name, FERRY_IMAGE_TYPE_NAME) == 0)
        a.kind = 1;
    else if (strcmp(type.name, FERRY_POINTCLOUD_TYPE_NAME) == 0)
        a.kind = 2;

    ferry_subscriber_options_init(&o);
    if (a.o.depth != 0) o.depth = (uint32_t)a.o.depth;
    o.history = (uint32_t)a.history;

    /* Lines go out as they come, also into a pipe, so a reader sees samples live. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    cli_stop_on_signals();
    if (cli_node(&a.o.where, CMD, &node) != FERRY_OK) return 1;
    err = ferry_subscriber_create(&sub, node, a.topic, type.name, type.hash, &o);
    if (err != FERRY_OK) {
        int saved = errno;

        status = cli_fail(CMD, 1, "cannot subscribe to '%s' (type %s): %s%s%s", a.topic, type.name,
                          ferry_strerror(err), err == FERRY_ESYS ? ": " : "",
                          err == FERRY_ESYS ? strerror(saved) : "");
        ferry_node_destroy(node);
        return status;
    }

    status = echo_loop(sub, &a, &tot, &timed_out);

    memset(&st, 0, sizeof st);
    err = ferry_subscriber_stats_get(sub, &st);
    if (err != FERRY_OK && status == 0)
        status = cli_fail(CMD, 1, "ferry_subscriber_stats_get: %s", ferry_strerror(err));
    fprintf(stderr, "ferry echo: %s: received %" PRIu64 ", dropped %" PRIu64, a.topic, tot.received,
            st.dropped);
    if (a.verify) fprintf(stderr, ", corrupt %" PRIu64, tot.corrupt);
    fprintf(stderr, ", publishers %" PRIu32 "\n", st.publishers);
    /* With no --count, --timeout is simply how long to listen. */
    if (timed_out && a.o.count != 0 && status == 0)
        status = cli_fail(CMD, 1, "timed out after %g s with %" PRIu64 " of %" PRIu64 " samples",
                          a.o.timeout_s, tot.received, a.o.count);
    if (tot.corrupt != 0 && status == 0) status = 1;

    err = ferry_subscriber_destroy(sub);
    if (err != FERRY_OK && status == 0)
        status = cli_fail(CMD, 1, "ferry_subscriber_destroy: %s", ferry_strerror(err));
    err = ferry_node_destroy(node);
    if (err != FERRY_OK && status == 0)
        status = cli_fail(CMD, 1, "ferry_node_destroy: %s", ferry_strerror(err));
    if (tot.output_failed && status == 0) status = 1;
    return status;
}
