/*
 * ferry bridge: carries image, point-cloud, camera-info, compressed-image and IMU topics, and the
 * topics of rmw_ferry_cpp's nodes, between a ferry domain and DDS (Cyclone DDS, ROS 2 wire
 * conventions) in both directions until a signal or --seconds. The work is done
 * by src/bridge (bridge.h); this file parses options and reports.
 */
#include "cli.h"
#include "commands.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define CMD "bridge"

#ifdef FERRY_HAVE_BRIDGE

#include "bridge.h"

#include <errno.h>

#define NS_PER_S 1000000000LL
#define RUN_SLICE_NS 200000000LL

typedef struct bridge_args {
    cli_opts o; /* --depth, --quiet, --domain, --dir */
    const char *patterns[FERRY_BRIDGE_PATTERNS_MAX];
    size_t npatterns;
    int direction; /* a ferry_bridge_direction */
    ferry_bridge_reliability reliability;
    uint64_t dds_domain;
    bool dds_domain_set;
    bool dds_domain_from_ros; /* taken from $ROS_DOMAIN_ID */
    const char *config;
    double seconds;
    bool stats;
} bridge_args;

/* Codes of the options that need more than their row: cli_getopt returns them. */
enum {
    O_TOPIC = CLI_O_OWN,
    O_RELIABLE,
    O_BEST_EFFORT,
    O_DDS_DOMAIN,
};

static const char about[] =
    "usage: ferry bridge [options]\n"
    "Carries sensor_msgs/Image, PointCloud2, CameraInfo, CompressedImage and Imu topics,\n"
    "and the topics of ROS 2 nodes on rmw_ferry_cpp (any message type), between the ferry\n"
    "domain and DDS (Cyclone DDS, ROS 2 conventions: topic rt/<name>, type\n"
    "sensor_msgs::msg::dds_::Image_ and so on). Out: local topics with a publisher go to\n"
    "DDS. In: DDS writers of those types (of any ROS 2 type a local rmw_ferry_cpp node\n"
    "uses) on rt/... topics are published locally. A frame that came from DDS is never\n"
    "sent back. SIGINT or SIGTERM stops it cleanly.\n"
    "\n"
    "options:\n";

static const cli_option options[] = {
    {.name = "--topic",
     .value = "PATTERN",
     .kind = CLI_K_CODE,
     .code = O_TOPIC,
     .help = "bridge topics matching PATTERN (fnmatch, on names with their\n"
             "leading '/', '*' also matches '/'); repeatable (default: all)"},
    {.name = "--direction",
     .value = "DIR",
     CLI_CHOICE_AT(bridge_args, direction),
     .choices = (const cli_choice[]){{"out", FERRY_BRIDGE_OUT},
                                     {"in", FERRY_BRIDGE_IN},
                                     {"both", FERRY_BRIDGE_BOTH},
                                     {NULL, 0}},
     .bad_choice = "invalid --direction '%s' (%s)",
     .help = "out (ferry to DDS), in (DDS to ferry) or both (default both)"},
    {.name = "--reliable",
     .kind = CLI_K_CODE,
     .code = O_RELIABLE,
     .help = "DDS reliability RELIABLE for every route"},
    {.name = "--best-effort",
     .kind = CLI_K_CODE,
     .code = O_BEST_EFFORT,
     .help = "DDS reliability BEST_EFFORT for every route\n"
             "(default: out reliable; in reliable unless a remote writer is\n"
             "best effort, transient local when every one is). A reliable\n"
             "out route loses nothing: its ferry subscriber blocks a\n"
             "publisher that admits it (ferry pub --admit-blocking) when\n"
             "full, and drops the oldest frame (counted) for one that\n"
             "does not"},
    CLI_OPTION_DEPTH("ferry queue depth and DDS reader and best-effort history\n"
                     "depth, 1..4096 (default 8)"),
    {.name = "--dds-domain",
     .value = "N",
     CLI_WHOLE_AT(bridge_args, dds_domain),
     .range = &cli_ranges[CLI_R_BRIDGE_DDS_DOMAIN],
     .code = O_DDS_DOMAIN,
     .help = "DDS domain id, 0..232 (default $ROS_DOMAIN_ID, else the\n"
             "ferry domain)"},
    {.name = "--config",
     .value = "XML|FILE",
     CLI_STRING_AT(bridge_args, config),
     .help = "extra Cyclone DDS configuration (XML text, a file, or a\n"
             "comma-separated list as CYCLONEDDS_URI takes), applied after\n"
             "the bridge's large-sample settings and $CYCLONEDDS_URI\n"
             "(default $FERRY_BRIDGE_CONFIG)"},
    {.name = "--seconds",
     .value = "SEC",
     CLI_REAL_AT(bridge_args, seconds),
     .range = &cli_ranges[CLI_R_BRIDGE_SECONDS],
     .help = "stop after SEC seconds, 0..1000000000 (default: run until a\n"
             "signal)"},
    {.name = "--stats",
     CLI_FLAG_AT(bridge_args, stats),
     .help = "print the counters at exit, with where frames were lost"},
    CLI_OPTION_QUIET("log warnings and errors only"),
    /* The bridge has two domains: this one is ferry's. */
    CLI_SHARED_ROW("--domain", "N", CLI_O_DOMAIN,
                   "ferry domain 0..1023 (default $FERRY_DOMAIN, else 0)"),
    CLI_OPTION_DIR,
    CLI_OPTION_HELP,
    CLI_OPTION_END,
};

static int parse_args(int argc, char **argv, bridge_args *a)
{
    cli_parser p = {
        .cmd = CMD, .table = options, .about = about, .column = 22, .dest = a, .opts = &a->o};
    const char *env = getenv("FERRY_BRIDGE_CONFIG");
    int c;

    memset(a, 0, sizeof *a);
    cli_opts_init(&a->o);
    a->direction = FERRY_BRIDGE_BOTH;
    a->seconds = -1.0;
    a->config = env != NULL && env[0] != '\0' ? env : NULL;
    while ((c = cli_getopt(&p, argc, argv)) >= CLI_O_OWN) {
        switch (c) {
        case O_TOPIC:
            if (a->npatterns == FERRY_BRIDGE_PATTERNS_MAX)
                return cli_fail(CMD, 2, "too many --topic patterns (at most %u)",
                                FERRY_BRIDGE_PATTERNS_MAX);
            if (optarg[0] == '\0' || strlen(optarg) > FERRY_TOPIC_MAX)
                return cli_fail(CMD, 2, "invalid --topic '%s' (a pattern of 1..%u bytes)", optarg,
                                FERRY_TOPIC_MAX);
            a->patterns[a->npatterns++] = optarg;
            break;
        case O_RELIABLE:
            a->reliability = FERRY_BRIDGE_RELIABLE;
            break;
        case O_BEST_EFFORT:
            a->reliability = FERRY_BRIDGE_BEST_EFFORT;
            break;
        case O_DDS_DOMAIN:
            a->dds_domain_set = true;
            break;
        }
    }
    if (c == CLI_OPTS_EXIT)
        return p.status;
    if (optind < argc)
        return cli_fail(CMD, 2, "unexpected argument '%s'", argv[optind]);
    if (!a->dds_domain_set) {
        uint64_t dds_max = cli_ranges[CLI_R_BRIDGE_DDS_DOMAIN].hi;
        const char *ros = getenv("ROS_DOMAIN_ID");

        /* ROS 2 nodes of this shell are on $ROS_DOMAIN_ID: so is the bridge, unless told. */
        if (ros != NULL && ros[0] != '\0') {
            cli_range r = cli_ranges[CLI_R_BRIDGE_DDS_DOMAIN];

            r.name = "ROS_DOMAIN_ID";
            if (!cli_parse_whole(CMD, &r, ros, &a->dds_domain))
                return 2;
            a->dds_domain_from_ros = true;
            return -1;
        }
        if (a->o.where.domain > dds_max)
            return cli_fail(CMD, 2,
                            "ferry domain %u is no DDS domain id (0..%" PRIu64 "): give "
                            "--dds-domain",
                            (unsigned)a->o.where.domain, dds_max);
        a->dds_domain = a->o.where.domain;
    }
    return -1;
}

/* One config item: XML and URIs as they are, a plain path as a file:// URI. */
static bool append_config(char **acc, const char *item)
{
    const char *prefix =
        (item[0] == '<' || strstr(item, "://") != NULL || strchr(item, ',') != NULL) ? ""
                                                                                     : "file://";
    size_t old = *acc != NULL ? strlen(*acc) : 0;
    size_t add = strlen(prefix) + strlen(item) + 2;
    char *s = realloc(*acc, old + add);

    if (s == NULL)
        return false;
    snprintf(s + old, add, "%s%s%s", old != 0 ? "," : "", prefix, item);
    *acc = s;
    return true;
}

static void log_line(void *arg, ferry_log_level level, const char *message)
{
    (void)arg;
    fprintf(stderr, "ferry bridge: %s%s\n",
            level == FERRY_LOG_ERROR  ? "error: "
            : level == FERRY_LOG_WARN ? "warning: "
                                      : "",
            message);
}

/* One place a frame can be lost, for the summary line of print_stats. */
typedef struct loss_place {
    uint64_t count;
    const char *where;
} loss_place;

static void print_stats(ferry_bridge *b)
{
    ferry_bridge_route_info ri;
    ferry_bridge_stats st;
    size_t i, n = 0;

    if (ferry_bridge_stats_get(b, &st) != FERRY_OK)
        return;
    printf("ferry bridge: stats out_taken=%" PRIu64 " out_written=%" PRIu64 " out_skipped=%" PRIu64
           " out_early=%" PRIu64 " out_invalid=%" PRIu64 " out_failed=%" PRIu64
           " out_bytes=%" PRIu64 " out_queue_dropped=%" PRIu64 " out_write_timeouts=%" PRIu64
           " routes_out_lossy=%" PRIu32 " in_received=%" PRIu64 " in_published=%" PRIu64
           " in_ignored=%" PRIu64 " in_invalid=%" PRIu64 " in_dropped=%" PRIu64 " in_bytes=%" PRIu64
           " in_lost=%" PRIu64 " in_rejected=%" PRIu64 " in_subscriber_dropped=%" PRIu64 "\n",
           st.out_taken, st.out_written, st.out_skipped, st.out_early, st.out_invalid,
           st.out_failed, st.out_bytes, st.out_queue_dropped, st.out_write_timeouts,
           st.routes_out_lossy, st.in_received, st.in_published, st.in_ignored, st.in_invalid,
           st.in_dropped, st.in_bytes, st.in_lost, st.in_rejected, st.in_subscriber_dropped);
    for (i = 0; ferry_bridge_route_get(b, i, &ri) == FERRY_OK; i++)
        printf("ferry bridge: route %s %s %s %s %s depth=%" PRIu32 " samples=%" PRIu64
               " bytes=%" PRIu64 " lost=%" PRIu64 "\n",
               ri.direction == FERRY_BRIDGE_OUT ? "out" : "in", ri.topic, ri.type_name,
               ri.reliable ? "reliable" : "best-effort", ri.lossless ? "lossless" : "lossy",
               ri.depth, ri.samples, ri.bytes, ri.lost);
    {
        /* In the order a frame passes them (bridge.h). */
        const loss_place places[] = {
            {st.out_queue_dropped,
             "dropped from the bridge's full ferry subscriber queues (out_queue_dropped: a "
             "drop-oldest route, best effort or a publisher that does not admit blocking "
             "subscribers, fell behind)"},
            {st.out_invalid, "invalid ferry samples not sent (out_invalid)"},
            {st.out_failed, "refused by the DDS writers (out_failed: dds_write errors)"},
            {st.in_lost, "reported lost by DDS to the bridge's readers (in_lost: SAMPLE_LOST)"},
            {st.in_rejected,
             "refused by the bridge's full best-effort DDS readers (in_rejected: the bridge "
             "fell behind)"},
            {st.in_invalid, "invalid DDS samples not carried (in_invalid)"},
            {st.in_dropped, "not published on the ferry side (in_dropped: no chunk in the pool)"},
            {st.in_subscriber_dropped,
             "dropped from local subscribers' full queues (in_subscriber_dropped: their own "
             "depth)"},
        };

        printf("ferry bridge: losses:");
        for (i = 0; i < sizeof places / sizeof places[0]; i++)
            if (places[i].count != 0)
                printf("%s %" PRIu64 " %s", n++ ? ";" : "", places[i].count, places[i].where);
        printf("%s\n", n ? "" : " none");
    }
    fflush(stdout);
}

int ferry_cmd_bridge(int argc, char **argv)
{
    ferry_bridge_options o;
    ferry_bridge *b = NULL;
    const char *uri = getenv("CYCLONEDDS_URI");
    char *config = NULL;
    int64_t deadline;
    ferry_err err;
    bridge_args a;
    int status;

    status = parse_args(argc, argv, &a);
    if (status >= 0)
        return status;
    if ((uri != NULL && uri[0] != '\0' && !append_config(&config, uri)) ||
        (a.config != NULL && !append_config(&config, a.config))) {
        free(config);
        return cli_fail(CMD, 1, "out of memory");
    }

    ferry_bridge_options_init(&o);
    o.dir = a.o.where.dir;
    o.domain = a.o.where.domain;
    o.dds_domain = (uint32_t)a.dds_domain;
    o.patterns = a.patterns;
    o.npatterns = a.npatterns;
    o.direction = a.direction;
    o.reliability = a.reliability;
    if (a.o.depth != 0)
        o.depth = (uint32_t)a.o.depth;
    o.dds_config = config;
    o.log = log_line;
    o.log_level = a.o.quiet ? FERRY_LOG_WARN : FERRY_LOG_INFO;

    setvbuf(stdout, NULL, _IOLBF, 0);
    cli_stop_on_signals();
    err = ferry_bridge_create(&b, &o);
    free(config);
    if (err != FERRY_OK) {
        int saved = errno;

        return cli_fail(CMD, 1, "cannot start: %s%s%s", ferry_strerror(err),
                        err == FERRY_ESYS ? ": " : "", err == FERRY_ESYS ? strerror(saved) : "");
    }
    if (!a.o.quiet)
        fprintf(stderr, "ferry bridge: ferry domain %u (%s) <-> DDS domain %u%s, direction %s\n",
                (unsigned)a.o.where.domain, a.o.where.dir ? a.o.where.dir : "default directory",
                (unsigned)a.dds_domain, a.dds_domain_from_ros ? " ($ROS_DOMAIN_ID)" : "",
                a.direction == FERRY_BRIDGE_OUT  ? "out"
                : a.direction == FERRY_BRIDGE_IN ? "in"
                                                 : "both");

    deadline = a.seconds >= 0.0 ? ferry_now().ns + (int64_t)(a.seconds * (double)NS_PER_S) : -1;
    while (!cli_stop_requested) {
        int64_t slice = RUN_SLICE_NS;

        if (deadline >= 0) {
            int64_t left = deadline - ferry_now().ns;

            if (left <= 0)
                break;
            if (left < slice)
                slice = left;
        }
        err = ferry_bridge_run(b, slice);
        if (err != FERRY_OK) {
            status = cli_fail(CMD, 1, "ferry_bridge_run: %s", ferry_strerror(err));
            break;
        }
    }
    if (a.stats)
        print_stats(b);
    err = ferry_bridge_destroy(b);
    if (err != FERRY_OK && status <= 0)
        status = cli_fail(CMD, 1, "ferry_bridge_destroy: %s", ferry_strerror(err));
    return status < 0 ? 0 : status;
}

#else /* !FERRY_HAVE_BRIDGE */

int ferry_cmd_bridge(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_fail(CMD, 2,
                    "not built: this ferry was built without Cyclone DDS "
                    "(install cyclonedds-dev and cyclonedds-tools, configure with "
                    "-DFERRY_BRIDGE=ON)");
}

#endif
