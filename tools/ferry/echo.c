/*
 * ferry echo: subscribes to a topic and prints one line per sample: its sequence, size, one-way
 * latency and publisher, and with --verify whether a synthetic frame arrived intact; with
 * --json, one JSON object per sample with the message's decoded fields (decode.h).
 */
#include "cli.h"
#include "commands.h"
#include "decode.h"

#include <ferry/msg.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <string.h>

#define CMD "echo"
#define NS_PER_S 1000000000LL
#define WAIT_SLICE_NS 100000000LL
#define FIELDS_MAX 32
#define LOOKUP_PERIOD_NS 100000000LL

typedef struct echo_args {
    cli_opts o; /* --count, --quiet, --type, --depth, --timeout, --domain, --dir */
    const char *topic;
    uint64_t history;
    bool verify;
    bool data; /* --data */
    const char *fields[FIELDS_MAX];
    size_t nfields;
    int kind; /* 0 synthetic frames, 1 images, 2 point clouds: what --verify checks */
    cli_type type;
    const cli_msg_type *decoder;
    /* A ROS 2 type an rmw_ferry_cpp node publishes, decoded by its definition. */
    ferry_node *node;
    bool ros2_named; /* the type is named "pkg/msg/Name" and ferry has no decoder of its own */
    ferry_ros2_schema *schema;
    ferry_ros2_wire wire;
    int64_t next_lookup_ns;
    bool told_schema;
} echo_args;

/* The option that needs more than its row: cli_getopt returns it. */
enum { O_FIELD = CLI_O_OWN };

static const char about[] =
    "usage: ferry echo TOPIC [options]\n"
    "Prints one line per sample taken from TOPIC:\n"
    "  seq=N size=N latency_us=X.X publisher=HEX [ok|CORRUPT]\n"
    "latency_us is the time from ferry_publish to the take. A summary goes to stderr at\n"
    "the end. Exits 1 when a frame failed --verify, or when --timeout expired before\n"
    "--count samples came or with no publisher seen. Without --type, echo waits for a\n"
    "publisher and subscribes with its type; with none after a second, it says so.\n"
    "\n"
    "options:\n";

static const cli_option options[] = {
    CLI_OPTION_JSON("print one JSON object a line per sample instead: topic, type,\n"
                    "sequence, publisher, publish_time_ns, size, latency_us,\n"
                    "latency_from (\"stamp\" or \"publish\"), the message's fields as\n"
                    "ROS 2 names them, and data {bytes, crc32, head, tail}"),
    {.name = "--data",
     CLI_FLAG_AT(echo_args, data),
     .help = "with --json, add the data itself as data.base64"},
    {.name = "--field",
     .value = "NAME",
     .kind = CLI_K_CODE,
     .code = O_FIELD,
     .help = "print only field NAME, a dotted path (header.stamp,\n"
             "fields.0.name); repeatable; implies --json"},
    CLI_OPTION_COUNT("stop after N samples; 0 runs until a signal (default 0)"),
    {.name = "--verify",
     CLI_FLAG_AT(echo_args, verify),
     .help = "check each synthetic frame's header and checksum (ok / CORRUPT);\n"
             "on sensor_msgs/Image and PointCloud2 topics, the sample must be\n"
             "a valid image or cloud whose data is a synthetic frame"},
    CLI_OPTION_QUIET("print no line per sample, only the summary"),
    CLI_OPTION_TYPE("type name to subscribe with at once (default: the type of the\n"
                    "topic's publishers; with none yet, it waits for one)"),
    CLI_OPTION_DEPTH("queue depth per publisher, 1..4096 (default: the library's, 2)"),
    {.name = "--history",
     .value = "N",
     CLI_WHOLE_AT(echo_args, history),
     .range = &cli_ranges[CLI_R_SUB_HISTORY],
     .help = "ask each publisher for its last N samples on joining, 0..4096\n"
             "(default 0)"},
    CLI_OPTION_TIMEOUT("give up after SEC seconds, 0..1000000000 (default: never); exits\n"
                       "1 if no publisher came, or --count samples did not"),
    CLI_OPTIONS_WHERE_END,
};

static int parse_args(int argc, char **argv, echo_args *a)
{
    cli_parser p = {
        .cmd = CMD, .table = options, .about = about, .column = 19, .dest = a, .opts = &a->o};
    int c;

    memset(a, 0, sizeof *a);
    cli_opts_init(&a->o);
    while ((c = cli_getopt(&p, argc, argv)) == O_FIELD) {
        if (optarg[0] == '\0' || optarg[0] == '.' || strstr(optarg, "..") != NULL ||
            optarg[strlen(optarg) - 1] == '.')
            return cli_fail(CMD, 2, "invalid --field '%s' (a dotted path: header.stamp)", optarg);
        if (a->nfields == FIELDS_MAX)
            return cli_fail(CMD, 2, "--field %s: at most %d --field options", optarg, FIELDS_MAX);
        a->fields[a->nfields++] = optarg;
        a->o.json = true;
    }
    if (c == CLI_OPTS_EXIT)
        return p.status;
    if (a->data && !a->o.json)
        return cli_fail(CMD, 2, "--data needs --json (or --field)");
    if (!cli_topic_operand(CMD, argc, argv, &a->topic))
        return 2;
    return -1;
}

typedef struct echo_totals {
    uint64_t received;
    uint64_t corrupt;
    bool output_failed;
} echo_totals;

/* Whether the synthetic frame in s is intact; *frame gets the sequence it was filled with at its
 * source (which a bridge or a replay keeps), when it is. */
static bool sample_intact(const echo_args *a, const ferry_sample *s, uint64_t *frame)
{
    const void *data = s->data;
    size_t size = s->size;
    cli_frame_header h;

    if (a->kind == 1) {
        ferry_image_view v;

        if (ferry_image_view_get(s, &v) != FERRY_OK)
            return false;
        data = v.data;
        size = v.data_size;
    } else if (a->kind == 2) {
        ferry_pointcloud_view v;

        if (ferry_pointcloud_view_get(s, &v) != FERRY_OK)
            return false;
        data = v.data;
        size = v.data_size;
    }
    if (!cli_frame_verify(data, size))
        return false;
    memcpy(&h, data, sizeof h);
    *frame = h.sequence;
    return true;
}

/* The data as a summary: its size, its CRC-32, its first and last bytes, and with --data the
 * bytes themselves. */
static void add_data(cli_json *j, const echo_args *a, const cli_msg *m)
{
    cli_json_bytes(j, 0, "data", m->data, m->data_size, a->data);
}

/* A ROS 2 type of an rmw_ferry_cpp publisher ("pkg/msg/Name"): its description from the domain's
 * graph files, looked up again every LOOKUP_PERIOD_NS until found (the node writes it just after
 * its publisher is made). */
static void ros2_lookup(echo_args *a)
{
    ferry_ros2_type_info info;
    char why[256];
    int64_t now = ferry_now().ns;

    if (a->schema != NULL || !a->ros2_named || now < a->next_lookup_ns)
        return;
    a->next_lookup_ns = now + LOOKUP_PERIOD_NS;
    if (ferry_ros2_type_find(ferry_node_dir(a->node), a->type.name, a->type.hash, &info) !=
        FERRY_OK)
        return;
    if (ferry_ros2_schema_parse(a->type.name, info.definition, info.definition_size, &a->schema,
                                why, sizeof why) == FERRY_OK)
        a->wire = info.wire;
    else if (!a->told_schema)
        fprintf(stderr, "ferry echo: the definition of %s does not parse (%s): not decoded\n",
                a->type.name, why);
    a->told_schema = true;
    ferry_ros2_type_info_free(&info);
}

/* One sample as a JSON tree: what ferry knows of it, then the message's fields. Latency runs
 * from the header stamp (CLOCK_REALTIME, as ROS stamps are) when the message has one, so a
 * sample that crossed the bridge shows its time on the network too; else from ferry_publish. */
static void sample_json(cli_json *j, echo_args *a, const char *topic, const ferry_sample *s,
                        bool intact)
{
    int64_t now_mono = ferry_now().ns, now_real = cli_realtime_ns();
    cli_msg m;
    char id[17];
    bool from_stamp;

    memset(&m, 0, sizeof m);
    cli_msg_decode(a->decoder, s, &m, NULL, 0);
    from_stamp = m.has_stamp && cli_stamp_ns(m.stamp) != 0;
    cli_json_reset(j);
    cli_json_str(j, 0, "topic", topic);
    cli_json_str(j, 0, "type", a->type.name);
    cli_json_u64(j, 0, "sequence", s->sequence);
    snprintf(id, sizeof id, "%" PRIx64, s->publisher_id);
    cli_json_str(j, 0, "publisher", id);
    cli_json_i64(j, 0, "publish_time_ns", s->publish_time.ns);
    cli_json_u64(j, 0, "size", s->size);
    cli_json_real(
        j, 0, "latency_us",
        (double)(from_stamp ? now_real - cli_stamp_ns(m.stamp) : now_mono - s->publish_time.ns) /
            1e3);
    cli_json_str(j, 0, "latency_from", from_stamp ? "stamp" : "publish");
    if (a->verify)
        cli_json_bool(j, 0, "intact", intact);
    ros2_lookup(a);
    if (a->schema != NULL) {
        /* Every field of the message, its byte sequences summarised like data. */
        size_t fields = j->count;
        ferry_ros2_walk_result r =
            cli_json_ros2(j, 0, a->schema, a->wire, s->data, s->size, a->data);

        if (r != FERRY_ROS2_WALK_OK) {
            /* What was added of a message that turned out malformed goes. */
            cli_json_truncate(j, fields);
            cli_json_str(j, 0, "invalid",
                         r == FERRY_ROS2_WALK_UNSUPPORTED
                             ? "the sample is CDR of an encapsulation other than CDR_LE / CDR_BE"
                         : a->wire == FERRY_ROS2_WIRE_PLAIN
                             ? "the sample is not a message of its type's C layout"
                             : "the sample is not a CDR message of its type");
            add_data(j, a, &m);
        }
        return;
    }
    if (m.valid) {
        cli_msg_decode(a->decoder, s, &m, j, 0);
    } else {
        cli_json_str(j, 0, "invalid", "the sample is not a valid message of its type");
        m.data = s->data;
        m.data_size = s->size;
    }
    add_data(j, a, &m);
}

/* Prints the tree, or with --field the fields asked for as one object keyed by their paths.
 * Returns 0, or 1 after a message when a field is not in the sample. */
static int print_json(const cli_json *j, const echo_args *a)
{
    size_t i;

    if (j->failed)
        return cli_fail(CMD, 1, "out of memory");
    if (a->nfields == 0) {
        cli_json_write(j, 0, stdout);
        fputc('\n', stdout);
        return 0;
    }
    for (i = 0; i < a->nfields; i++)
        if (cli_json_find(j, 0, a->fields[i]) < 0)
            return cli_fail(CMD, 1,
                            "--field %s: no such field in this %s sample (try --json "
                            "without --field to see them)",
                            a->fields[i], a->type.name);
    fputc('{', stdout);
    for (i = 0; i < a->nfields; i++) {
        if (i != 0)
            fputs(", ", stdout);
        cli_json_string(stdout, a->fields[i]);
        fputs(": ", stdout);
        cli_json_write(j, cli_json_find(j, 0, a->fields[i]), stdout);
    }
    fputs("}\n", stdout);
    return 0;
}

static int print_sample(cli_json *j, echo_args *a, const char *topic, const ferry_sample *s,
                        bool intact, uint64_t frame)
{
    if (a->o.json) {
        sample_json(j, a, topic, s, intact);
        return print_json(j, a);
    }
    printf("seq=%" PRIu64 " size=%zu latency_us=%.1f publisher=%" PRIx64, s->sequence, s->size,
           (double)(ferry_now().ns - s->publish_time.ns) / 1e3, s->publisher_id);
    if (a->verify && intact)
        printf(" frame=%" PRIu64 " ok\n", frame);
    else
        printf("%s\n", a->verify ? " CORRUPT" : "");
    return 0;
}

static int echo_samples(ferry_subscriber *sub, echo_args *a, const char *topic, int64_t deadline,
                        cli_json *j, echo_totals *tot, bool *timed_out, cli_watch *wa)
{
    while (!cli_stop_requested && (a->o.count == 0 || tot->received < a->o.count)) {
        ferry_sample s;
        ferry_err err = ferry_take(sub, &s);

        if (err == FERRY_OK) {
            uint64_t frame = 0;
            bool intact = !a->verify || sample_intact(a, &s, &frame);

            tot->received++;
            if (!intact)
                tot->corrupt++;
            if (!a->o.quiet) {
                if (print_sample(j, a, topic, &s, intact, frame) != 0) {
                    ferry_release(sub, &s);
                    return 1;
                }
                if (ferror(stdout)) {
                    /* A reader that left (EPIPE) ends the command like a signal does. */
                    tot->output_failed = errno != EPIPE;
                    cli_stop_requested = 1;
                }
            }
            err = ferry_release(sub, &s);
            if (err != FERRY_OK)
                return cli_fail_err(CMD, 1, err, "ferry_release");
            continue;
        }
        if (err != FERRY_EAGAIN)
            return cli_fail_err(CMD, 1, err, "ferry_take");
        cli_watch_tick(wa, tot->received);
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
            return cli_fail_err(CMD, 1, err, "ferry_wait");
    }
    return 0;
}

static int echo_loop(ferry_subscriber *sub, echo_args *a, int64_t deadline, echo_totals *tot,
                     bool *timed_out, cli_watch *wa)
{
    char topic[FERRY_TOPIC_MAX + 2];
    cli_json j;
    int status = 0;

    snprintf(topic, sizeof topic, "%s%s", a->topic[0] == '/' ? "" : "/", a->topic);
    cli_json_init(&j);
    status = echo_samples(sub, a, topic, deadline, &j, tot, timed_out, wa);
    cli_json_free(&j);
    return status;
}

int ferry_cmd_echo(int argc, char **argv)
{
    ferry_subscriber_options o;
    ferry_subscriber_stats st;
    ferry_subscriber *sub = NULL;
    ferry_node *node = NULL;
    echo_totals tot = {0, 0, false};
    bool timed_out = false;
    cli_type_found found;
    int64_t deadline;
    cli_watch wa;
    ferry_err err;
    echo_args a;
    int status;

    status = parse_args(argc, argv, &a);
    if (status >= 0)
        return status;
    if (ferry_topic_validate(a.topic) != FERRY_OK)
        return cli_fail(CMD, 2, "invalid topic name '%s'", a.topic);

    status = 0;
    ferry_subscriber_options_init(&o);
    if (a.o.depth != 0)
        o.depth = (uint32_t)a.o.depth;
    o.history = (uint32_t)a.history;

    /* Lines go out as they come, also into a pipe, so a reader sees samples live. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    cli_stop_on_signals();
    deadline = a.o.timeout_s >= 0.0 ? ferry_now().ns + (int64_t)(a.o.timeout_s * 1e9) : -1;
    cli_watch_init(&wa, CMD, &a.o, a.topic);
    found = cli_topic_type(&wa, deadline, &a.type);
    if (found == CLI_TYPE_FOUND) {
        if (strcmp(a.type.name, FERRY_IMAGE_TYPE_NAME) == 0)
            a.kind = 1;
        else if (strcmp(a.type.name, FERRY_POINTCLOUD_TYPE_NAME) == 0)
            a.kind = 2;
        a.decoder = cli_msg_type_find(a.type.name);
        a.ros2_named = a.decoder->name == NULL && strstr(a.type.name, "/msg/") != NULL;
        if (cli_subscribe(CMD, &a.o.where, a.topic, &a.type, &o, &node, &sub) != 0)
            return 1;
        a.node = node;
        status = echo_loop(sub, &a, deadline, &tot, &timed_out, &wa);
    } else {
        timed_out = found == CLI_TYPE_TIMEOUT;
    }

    memset(&st, 0, sizeof st);
    err = sub != NULL ? ferry_subscriber_stats_get(sub, &st) : FERRY_OK;
    if (err != FERRY_OK && status == 0)
        status = cli_fail_err(CMD, 1, err, "ferry_subscriber_stats_get");
    fprintf(stderr, "ferry echo: %s: received %" PRIu64 ", dropped %" PRIu64, a.topic, tot.received,
            st.dropped);
    if (a.verify)
        fprintf(stderr, ", corrupt %" PRIu64, tot.corrupt);
    fprintf(stderr, ", publishers %" PRIu32 "\n", st.publishers);
    /* With a publisher and no --count, --timeout is simply how long to listen; with none, the
     * topic or the directory is likely wrong. */
    if (timed_out && status == 0 && cli_watch_none(&wa, tot.received))
        status = cli_watch_fail(&wa, a.o.timeout_s);
    else if (timed_out && a.o.count != 0 && status == 0)
        status = cli_fail(CMD, 1, "timed out after %g s with %" PRIu64 " of %" PRIu64 " samples",
                          a.o.timeout_s, tot.received, a.o.count);
    if (tot.corrupt != 0 && status == 0)
        status = 1;

    if (sub != NULL) {
        err = ferry_subscriber_destroy(sub);
        if (err != FERRY_OK && status == 0)
            status = cli_fail_err(CMD, 1, err, "ferry_subscriber_destroy");
        err = ferry_node_destroy(node);
        if (err != FERRY_OK && status == 0)
            status = cli_fail_err(CMD, 1, err, "ferry_node_destroy");
    }
    ferry_ros2_schema_free(a.schema);
    if (tot.output_failed && status == 0)
        status = 1;
    return status;
}
