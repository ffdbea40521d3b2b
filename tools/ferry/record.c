/*
 * ferry record: subscribes to the topics that match its patterns (all of them by default,
 * rescanning the domain once a second for new ones) and writes every sample it takes into an
 * MCAP file the way rosbag2 does (profile "ros2", schemas "ros2msg", messages "cdr"). Types
 * without a ROS 2 counterpart are stored as their raw ferry payload (message encoding
 * "ferry-raw"). The recorder never slows a publisher: its subscribers drop their oldest sample
 * when it falls behind, and it counts what it lost per topic.
 *
 * A sample's serialisation goes from the sample's own pages to writev (src/record/mcap.h); for
 * lz4 and zstd it is compressed from them. Single-threaded.
 */
#include "cli.h"
#include "decode.h"
#include "mcap.h"
#include "ros2/ros2.h"

#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <getopt.h>
#include <inttypes.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define CMD "record"
#define NS_PER_S 1000000000LL
#define TOPICS_MAX 256 /* a waitset's capacity */
#define PATTERNS_MAX 64
#define DEPTH_DEFAULT 16u /* half a second of a 30 fps camera */
#define NICE_DEFAULT 10u
#define TAKE_BURST 64 /* samples taken from one topic before the others get a turn */
#define STATS_NAME "ferry.record.stats"

static void usage(FILE *to)
{
    fputs("usage: ferry record [TOPIC|PATTERN ...] -o FILE.mcap [options]\n"
          "Records the topics that match (fnmatch patterns on names with their leading '/';\n"
          "none: every topic) into an MCAP file that `ros2 bag info`, `ros2 bag play` and\n"
          "Foxglove open. Topics that appear later are picked up within a second. Image,\n"
          "PointCloud2, CameraInfo, CompressedImage, Imu and host tensor topics are stored as\n"
          "ROS 2 CDR; other types as their raw ferry payload (message encoding ferry-raw).\n"
          "The recorder never slows a publisher: when it falls behind it loses samples, and\n"
          "counts them per topic. SIGINT or SIGTERM finishes the file cleanly.\n"
          "\n"
          "options:\n"
          "  -o, --output FILE     the MCAP file (overwritten); with --split-*, FILE without\n"
          "                        .mcap gets _0.mcap, _1.mcap, ...\n"
          "  --seconds S           stop after S seconds (default: until a signal)\n"
          "  --max-size BYTES      stop before the files together pass BYTES (1M..; suffixes\n"
          "                        k, M, G)\n"
          "  --split-size BYTES    start a new file once one reaches BYTES (1M..)\n"
          "  --split-seconds S     start a new file every S seconds\n"
          "  --compression C       chunk compression: none, lz4 or zstd (default none)\n"
          "  --chunk-size BYTES    uncompressed bytes per chunk, 4k..1G (default 4M)\n"
          "  --no-crc              write no CRCs (0: not computed), which read every byte once\n"
          "                        more (a quarter of a core at 250 MB/s with zlib's; ISA-L's,\n"
          "                        when the build has it, is 12 times faster)\n"
          "  --depth N             queue depth per publisher, 1..4096 (default 16)\n"
          "  --sched idle|normal   idle (the default): run under SCHED_IDLE, on CPU time no other\n"
          "                        task wants, so that the pipeline's publishers and consumers\n"
          "                        are never preempted by it (on a saturated machine it falls\n"
          "                        behind and counts what it drops); normal: at --nice\n"
          "  --nice N              with --sched normal, run at nice N, 0..19; 0 keeps the\n"
          "                        priority the recorder was started with (default 10)\n"
          "  --stats               print per topic, once a second, what was recorded and lost\n"
          "  --quiet               print nothing but errors (not even the summary at the end)\n"
          "  --domain N            domain number 0..1023 (default $FERRY_DOMAIN, else 0)\n"
          "  --dir PATH            root of the domain directories (default $FERRY_DIR, else\n"
          "                        /dev/shm/ferry-<uid>)\n"
          "  -h, --help            print this help\n",
          to);
}

typedef struct rec_args {
    cli_opts o; /* --depth, --quiet, --domain, --dir */
    const char *output;
    char patterns[PATTERNS_MAX][FERRY_TOPIC_MAX + 2];
    size_t npatterns;
    double seconds, split_seconds;
    uint64_t max_size, split_size, nice;
    size_t chunk_size;
    ferry_mcap_compression compression;
    bool stats, no_crc, sched_normal;
} rec_args;

static int parse_args(int argc, char **argv, rec_args *a)
{
    enum {
        O_OUTPUT = CLI_O_OWN,
        O_SECONDS,
        O_MAX_SIZE,
        O_SPLIT_SIZE,
        O_SPLIT_SECONDS,
        O_COMPRESSION,
        O_CHUNK_SIZE,
        O_STATS,
        O_NO_CRC,
        O_NICE,
        O_SCHED,
    };
    static const struct option options[] = {
        {"output", required_argument, NULL, O_OUTPUT},
        {"seconds", required_argument, NULL, O_SECONDS},
        {"max-size", required_argument, NULL, O_MAX_SIZE},
        {"split-size", required_argument, NULL, O_SPLIT_SIZE},
        {"split-seconds", required_argument, NULL, O_SPLIT_SECONDS},
        {"compression", required_argument, NULL, O_COMPRESSION},
        {"chunk-size", required_argument, NULL, O_CHUNK_SIZE},
        {"stats", no_argument, NULL, O_STATS},
        {"no-crc", no_argument, NULL, O_NO_CRC},
        {"nice", required_argument, NULL, O_NICE},
        {"sched", required_argument, NULL, O_SCHED},
        CLI_OPT_DEPTH,
        CLI_OPT_QUIET,
        CLI_OPT_DOMAIN,
        CLI_OPT_DIR,
        CLI_OPT_HELP,
        CLI_OPT_END,
    };
    cli_parser p = {.cmd = CMD, .options = options, .usage = usage, .opts = &a->o};
    size_t chunk = 0;
    int c;

    memset(a, 0, sizeof *a);
    cli_opts_init(&a->o);
    a->nice = NICE_DEFAULT;
    /* -o is the one short option; cli_getopt knows long ones, so it becomes --output here. */
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "-o") == 0) argv[i] = "--output";
    while ((c = cli_getopt(&p, argc, argv)) >= CLI_O_OWN) {
        switch (c) {
        case O_OUTPUT:
            if (optarg[0] == '\0') return cli_fail(CMD, 2, "empty --output");
            a->output = optarg;
            break;
        case O_SECONDS:
            if (!cli_parse_real(CMD, &cli_ranges[CLI_R_RECORD_SECONDS], optarg, &a->seconds))
                return 2;
            break;
        case O_SPLIT_SECONDS:
            if (!cli_parse_real(CMD, &cli_ranges[CLI_R_RECORD_SECONDS], optarg,
                                &a->split_seconds))
                return 2;
            break;
        case O_MAX_SIZE:
            if (!cli_parse_whole(CMD, &cli_ranges[CLI_R_RECORD_MAX_SIZE], optarg, &a->max_size))
                return 2;
            break;
        case O_SPLIT_SIZE:
            if (!cli_parse_whole(CMD, &cli_ranges[CLI_R_RECORD_SPLIT_SIZE], optarg,
                                 &a->split_size))
                return 2;
            break;
        case O_CHUNK_SIZE:
            if (!cli_parse_bytes(CMD, &cli_ranges[CLI_R_RECORD_CHUNK_SIZE], optarg, &chunk))
                return 2;
            a->chunk_size = chunk;
            break;
        case O_COMPRESSION:
            if (strcmp(optarg, "none") == 0)
                a->compression = FERRY_MCAP_NONE;
            else if (strcmp(optarg, "lz4") == 0)
                a->compression = FERRY_MCAP_LZ4;
            else if (strcmp(optarg, "zstd") == 0)
                a->compression = FERRY_MCAP_ZSTD;
            else
                return cli_fail(CMD, 2, "--compression %s: none, lz4 or zstd", optarg);
            break;
        case O_STATS:
            a->stats = true;
            break;
        case O_NO_CRC:
            a->no_crc = true;
            break;
        case O_NICE:
            if (!cli_parse_whole(CMD, &cli_ranges[CLI_R_RECORD_NICE], optarg, &a->nice)) return 2;
            break;
        case O_SCHED:
            if (strcmp(optarg, "idle") == 0)
                a->sched_normal = false;
            else if (strcmp(optarg, "normal") == 0)
                a->sched_normal = true;
            else
                return cli_fail(CMD, 2, "--sched %s: idle or normal", optarg);
            break;
        }
    }
    if (c == CLI_OPTS_EXIT) return p.status;
    if (a->output == NULL) return cli_fail(CMD, 2, "no output file (-o FILE.mcap)");
    if (a->split_size != 0 && a->split_seconds > 0.0)
        return cli_fail(CMD, 2, "--split-size and --split-seconds exclude each other");
    for (int i = optind; i < argc; i++) {
        if (a->npatterns == PATTERNS_MAX)
            return cli_fail(CMD, 2, "at most %d topic patterns", PATTERNS_MAX);
        if (argv[i][0] == '\0' || strlen(argv[i]) > FERRY_TOPIC_MAX)
            return cli_fail(CMD, 2, "invalid topic pattern '%s'", argv[i]);
        snprintf(a->patterns[a->npatterns++], sizeof a->patterns[0], "%s%s",
                 argv[i][0] == '/' ? "" : "/", argv[i]);
    }
    return -1;
}

/* One recorded topic. Counters are for the whole run; *_file for the file being written. */
typedef struct rtopic {
    char topic[FERRY_TOPIC_MAX + 2];
    cli_type type;
    ferry_ros2_kind kind;
    ferry_subscriber *sub; /* NULL when it could not be subscribed to */
    const char *failure;   /* then: why */
    bool in_file;          /* its channel is in the current file */
    uint16_t channel;
    uint64_t recorded, bytes, dropped, invalid, skipped;
    uint64_t recorded_file, bytes_file, dropped_at_file, last_recorded;
} rtopic;

/* A schema of the current file: a ROS 2 kind, or a raw ferry type. */
typedef struct rschema {
    ferry_ros2_kind kind;
    cli_type type;
    uint16_t id;
} rschema;

typedef struct recorder {
    const rec_args *a;
    ferry_node *node;
    ferry_waitset *ws;
    rtopic topics[TOPICS_MAX];
    size_t ntopics;
    bool full_warned;
    ferry_ros2_cdr *cdr;
    int64_t realtime_offset; /* CLOCK_REALTIME - CLOCK_MONOTONIC at the start */
    int64_t start_ns;

    /* The current file. */
    int fd;
    ferry_mcap_writer *w;
    char path[4096];
    unsigned file_index;
    int64_t file_start_ns;
    rschema schemas[TOPICS_MAX];
    size_t nschemas;
    uint64_t bytes_before; /* bytes of the files already closed */
    bool limit_reached;
} recorder;

static bool topic_matches(const rec_args *a, const char *topic)
{
    if (a->npatterns == 0) return true;
    for (size_t i = 0; i < a->npatterns; i++)
        if (fnmatch(a->patterns[i], topic, 0) == 0) return true;
    return false;
}

static rtopic *find_topic(recorder *R, const char *topic)
{
    for (size_t i = 0; i < R->ntopics; i++)
        if (strcmp(R->topics[i].topic, topic) == 0) return &R->topics[i];
    return NULL;
}

static bool scan_endpoint(void *arg, const ferry_endpoint_info *info)
{
    recorder *R = arg;
    ferry_subscriber_options o;
    rtopic *t;
    ferry_err err;

    if (!info->alive || info->kind != FERRY_ENDPOINT_PUBLISHER) return true;
    if (!topic_matches(R->a, info->topic) || find_topic(R, info->topic) != NULL) return true;
    if (R->ntopics == TOPICS_MAX) {
        if (!R->full_warned)
            fprintf(stderr, "ferry record: %d topics already; %s and later ones are not recorded\n",
                    TOPICS_MAX, info->topic);
        R->full_warned = true;
        return false;
    }
    t = &R->topics[R->ntopics];
    memset(t, 0, sizeof *t);
    snprintf(t->topic, sizeof t->topic, "%s", info->topic);
    snprintf(t->type.name, sizeof t->type.name, "%s", info->type_name);
    t->type.hash = info->type_hash;
    t->kind = ferry_ros2_kind_of_ferry(t->type.name, t->type.hash);

    ferry_subscriber_options_init(&o);
    o.depth = R->a->o.depth != 0 ? (uint32_t)R->a->o.depth : DEPTH_DEFAULT;
    o.overflow = FERRY_OVERFLOW_DROP_OLDEST; /* never slow a publisher */
    o.background = true;                     /* nor the consumers it wakes */
    /* A topic that cannot be subscribed to stays in the table without a subscriber, so that it
     * is reported once, not at every rescan. */
    R->ntopics++;
    err = ferry_subscriber_create(&t->sub, R->node, t->topic, t->type.name, t->type.hash, &o);
    if (err == FERRY_OK && (err = ferry_waitset_add(R->ws, t->sub, t)) != FERRY_OK) {
        ferry_subscriber_destroy(t->sub);
        t->sub = NULL;
    }
    if (err != FERRY_OK) {
        t->sub = NULL;
        t->failure = ferry_strerror(err);
        fprintf(stderr, "ferry record: cannot record %s (type %s): %s\n", t->topic, t->type.name,
                t->failure);
        return true;
    }
    if (!R->a->o.quiet)
        fprintf(stderr, "ferry record: recording %s (%s%s%s)\n", t->topic, t->type.name,
                t->kind != FERRY_ROS2_NONE ? " as " : ", raw",
                t->kind != FERRY_ROS2_NONE ? ferry_ros2_name(t->kind) : "");
    return true;
}

static void rescan(recorder *R)
{
    ferry_inspect(R->a->o.where.dir, R->a->o.where.domain, NULL, scan_endpoint, R);
}

static void file_path(const recorder *R, char *out, size_t cap)
{
    const char *o = R->a->output;
    size_t n = strlen(o);

    if (R->a->split_size == 0 && R->a->split_seconds <= 0.0) {
        snprintf(out, cap, "%s", o);
        return;
    }
    if (n > 5 && strcmp(o + n - 5, ".mcap") == 0) n -= 5;
    snprintf(out, cap, "%.*s_%u.mcap", (int)n, o, R->file_index);
}

static int file_open(recorder *R)
{
    ferry_mcap_writer_options wo;
    ferry_err err;

    file_path(R, R->path, sizeof R->path);
    R->fd = open(R->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (R->fd < 0) return cli_fail(CMD, 1, "cannot create %s: %s", R->path, strerror(errno));
    memset(&wo, 0, sizeof wo);
    wo.compression = R->a->compression;
    wo.chunk_size = R->a->chunk_size;
    wo.profile = "ros2";
    wo.no_crc = R->a->no_crc;
    err = ferry_mcap_writer_open(&R->w, R->fd, &wo);
    if (err != FERRY_OK) {
        close(R->fd);
        R->fd = -1;
        return cli_fail(CMD, 1, "%s: %s%s%s", R->path, ferry_strerror(err),
                        err == FERRY_ESYS ? ": " : "", err == FERRY_ESYS ? strerror(errno) : "");
    }
    R->nschemas = 0;
    R->file_start_ns = ferry_now().ns;
    for (size_t i = 0; i < R->ntopics; i++) {
        R->topics[i].in_file = false;
        R->topics[i].recorded_file = R->topics[i].bytes_file = 0;
        R->topics[i].dropped_at_file = R->topics[i].dropped;
    }
    return 0;
}

/* The per-topic counters of the file, as one Metadata record: "<topic>.recorded", ".bytes",
 * ".dropped" (lost by the recorder while this file was open), ".invalid" (samples that were not
 * a valid message of their type), ".skipped" (device tensors). */
static void write_stats(recorder *R)
{
    enum { PER_TOPIC = 5 };
    ferry_mcap_kv *kv = calloc(R->ntopics * PER_TOPIC, sizeof *kv);
    char (*text)[FERRY_TOPIC_MAX + 64] = calloc(R->ntopics * PER_TOPIC * 2, sizeof *text);
    size_t n = 0;

    if (kv == NULL || text == NULL) goto out;
    for (size_t i = 0; i < R->ntopics; i++) {
        const rtopic *t = &R->topics[i];
        const char *names[PER_TOPIC] = {"recorded", "bytes", "dropped", "invalid", "skipped"};
        uint64_t values[PER_TOPIC] = {t->recorded_file, t->bytes_file,
                                      t->dropped - t->dropped_at_file, t->invalid, t->skipped};

        for (int k = 0; k < PER_TOPIC; k++) {
            snprintf(text[2 * n], sizeof text[0], "%s.%s", t->topic, names[k]);
            snprintf(text[2 * n + 1], sizeof text[0], "%" PRIu64, values[k]);
            kv[n] = (ferry_mcap_kv){text[2 * n], text[2 * n + 1]};
            n++;
        }
    }
    ferry_mcap_writer_add_metadata(R->w, STATS_NAME, kv, n);
out:
    free(kv);
    free(text);
}

static void update_drops(recorder *R)
{
    for (size_t i = 0; i < R->ntopics; i++) {
        ferry_subscriber_stats st;

        if (R->topics[i].sub != NULL &&
            ferry_subscriber_stats_get(R->topics[i].sub, &st) == FERRY_OK)
            R->topics[i].dropped = st.dropped;
    }
}

static int file_close(recorder *R)
{
    ferry_err err;
    int status = 0;

    if (R->w == NULL) return 0;
    update_drops(R);
    write_stats(R);
    R->bytes_before += ferry_mcap_writer_size(R->w);
    err = ferry_mcap_writer_close(R->w);
    R->w = NULL;
    if (err != FERRY_OK)
        status = cli_fail(CMD, 1, "finishing %s: %s%s%s", R->path, ferry_strerror(err),
                          err == FERRY_ESYS ? ": " : "", err == FERRY_ESYS ? strerror(errno) : "");
    if (close(R->fd) != 0 && status == 0)
        status = cli_fail(CMD, 1, "closing %s: %s", R->path, strerror(errno));
    R->fd = -1;
    R->file_index++;
    return status;
}

/* The schema of t's type in the current file, added when it is not there yet. */
static ferry_err schema_for(recorder *R, const rtopic *t, uint16_t *id)
{
    rschema *s;
    ferry_err err;

    for (size_t i = 0; i < R->nschemas; i++) {
        s = &R->schemas[i];
        if (s->kind == t->kind &&
            (t->kind != FERRY_ROS2_NONE ||
             (strcmp(s->type.name, t->type.name) == 0 && s->type.hash == t->type.hash))) {
            *id = s->id;
            return FERRY_OK;
        }
    }
    s = &R->schemas[R->nschemas];
    s->kind = t->kind;
    s->type = t->type;
    if (t->kind != FERRY_ROS2_NONE) {
        const char *def = ferry_ros2_definition(t->kind);

        err = ferry_mcap_writer_add_schema(R->w, ferry_ros2_name(t->kind), "ros2msg", def,
                                           strlen(def), &s->id);
    } else {
        /* rosbag2 takes no schema id 0: a raw type gets a schema of its ferry name with no
         * encoding and no definition. */
        err = ferry_mcap_writer_add_schema(R->w, t->type.name, "", NULL, 0, &s->id);
    }
    if (err != FERRY_OK) return err;
    R->nschemas++;
    *id = s->id;
    return FERRY_OK;
}

static ferry_err channel_for(recorder *R, rtopic *t)
{
    char hash[32];
    ferry_mcap_kv meta[2] = {{"ferry.type", t->type.name}, {"ferry.type_hash", hash}};
    uint16_t schema;
    ferry_err err;

    if (t->in_file) return FERRY_OK;
    err = schema_for(R, t, &schema);
    if (err != FERRY_OK) return err;
    snprintf(hash, sizeof hash, "0x%016" PRIx64, t->type.hash);
    err = ferry_mcap_writer_add_channel(R->w, schema, t->topic,
                                        t->kind != FERRY_ROS2_NONE ? "cdr" : "ferry-raw", meta, 2,
                                        &t->channel);
    if (err == FERRY_OK) t->in_file = true;
    return err;
}

/* Starts the next file when the current one is full or old enough; stops at --max-size. */
static int maybe_rotate(recorder *R, size_t next)
{
    const rec_args *a = R->a;
    uint64_t size = ferry_mcap_writer_size(R->w);
    int status;

    if (a->max_size != 0 && R->bytes_before + size + next > a->max_size) {
        R->limit_reached = true;
        return 0;
    }
    if ((a->split_size != 0 && size + next > a->split_size && size > 4096) ||
        (a->split_seconds > 0.0 &&
         ferry_now().ns - R->file_start_ns >= (int64_t)(a->split_seconds * 1e9))) {
        status = file_close(R);
        if (status != 0) return status;
        return file_open(R);
    }
    return 0;
}

static int record_sample(recorder *R, rtopic *t, const ferry_sample *s, int64_t take_ns)
{
    struct iovec raw = {(void *)s->data, s->size};
    const struct iovec *iov = &raw;
    unsigned niov = 1;
    size_t size = s->size;
    ferry_err err;
    int status;

    if (t->kind != FERRY_ROS2_NONE) {
        err = ferry_ros2_cdr_encode(t->kind, s, R->cdr);
        if (err == FERRY_ENOTSUP) {
            t->skipped++;
            return 0;
        }
        if (err != FERRY_OK) {
            t->invalid++;
            return 0;
        }
        iov = R->cdr->iov;
        niov = R->cdr->niov;
        size = R->cdr->size;
    }
    status = maybe_rotate(R, size + 64);
    if (status != 0 || R->limit_reached) return status;
    err = channel_for(R, t);
    if (err == FERRY_OK)
        err = ferry_mcap_writer_write(R->w, t->channel, (uint32_t)s->sequence,
                                      (uint64_t)(take_ns + R->realtime_offset),
                                      (uint64_t)(s->publish_time.ns + R->realtime_offset), iov,
                                      niov);
    if (err != FERRY_OK)
        return cli_fail(CMD, 1, "writing %s: %s%s%s", R->path, ferry_strerror(err),
                        err == FERRY_ESYS ? ": " : "", err == FERRY_ESYS ? strerror(errno) : "");
    t->recorded++;
    t->recorded_file++;
    t->bytes += size;
    t->bytes_file += size;
    return 0;
}

/* Takes what t has queued, up to a burst. */
static int drain(recorder *R, rtopic *t)
{
    if (t->sub == NULL) return 0;
    for (int i = 0; i < TAKE_BURST && !R->limit_reached; i++) {
        ferry_sample s;
        ferry_err err = ferry_take(t->sub, &s);
        int status;

        if (err == FERRY_EAGAIN) return 0;
        if (err != FERRY_OK) return cli_fail(CMD, 1, "%s: ferry_take: %s", t->topic,
                                             ferry_strerror(err));
        status = record_sample(R, t, &s, ferry_now().ns);
        err = ferry_release(t->sub, &s);
        if (status != 0) return status;
        if (err != FERRY_OK)
            return cli_fail(CMD, 1, "%s: ferry_release: %s", t->topic, ferry_strerror(err));
    }
    return 0;
}

/* Once a second: each topic's counts and what the last second added; at the end, the totals
 * ("total TOPIC: ...") and one line for the whole recording. */
static void print_stats(recorder *R, bool final)
{
    for (size_t i = 0; i < R->ntopics; i++) {
        rtopic *t = &R->topics[i];

        if (t->sub == NULL) {
            printf("%s%s: not recorded: %s\n", final ? "total " : "", t->topic, t->failure);
            continue;
        }
        printf("%s%s: recorded %" PRIu64, final ? "total " : "", t->topic, t->recorded);
        if (!final) printf(" (%+" PRId64 ")", (int64_t)(t->recorded - t->last_recorded));
        printf(" dropped %" PRIu64 " bytes %" PRIu64, t->dropped, t->bytes);
        if (t->invalid != 0) printf(" invalid %" PRIu64, t->invalid);
        if (t->skipped != 0) printf(" skipped %" PRIu64 " (device tensors)", t->skipped);
        putchar('\n');
        t->last_recorded = t->recorded;
    }
    if (R->ntopics == 0 && !final) printf("no topic yet\n");
    if (final) {
        double secs = (double)(ferry_now().ns - R->start_ns) / 1e9;
        uint64_t messages = 0;

        for (size_t i = 0; i < R->ntopics; i++) messages += R->topics[i].recorded;
        printf("recorded %" PRIu64 " messages into %u file%s (%s%s), %" PRIu64
               " bytes in %.3f s (%.1f MB/s), cpu %.3f s\n",
               messages, R->file_index, R->file_index == 1 ? "" : "s", R->a->output,
               R->file_index > 1 ? " split" : "", R->bytes_before, secs,
               secs > 0 ? (double)R->bytes_before / 1e6 / secs : 0.0,
               (double)cli_cpu_ns() / 1e9);
    }
    fflush(stdout);
}

static int record_loop(recorder *R)
{
    const rec_args *a = R->a;
    int64_t start = ferry_now().ns, next_second = start + NS_PER_S;
    int64_t stop = a->seconds > 0.0 ? start + (int64_t)(a->seconds * 1e9) : -1;

    while (!cli_stop_requested && !R->limit_reached) {
        void *ready[TOPICS_MAX];
        size_t count = 0;
        int64_t now = ferry_now().ns, wait = next_second - now;
        ferry_err err;

        if (stop >= 0 && now >= stop) break;
        if (now >= next_second) {
            rescan(R);
            update_drops(R);
            if (a->stats) print_stats(R, false);
            next_second += NS_PER_S;
            if (next_second <= now) next_second = now + NS_PER_S;
            /* A time split happens at the next sample, or here when none comes. */
            if (a->split_seconds > 0.0 && maybe_rotate(R, 0) != 0) return 1;
            continue;
        }
        if (stop >= 0 && stop - now < wait) wait = stop - now;
        if (R->ntopics == 0) {
            cli_sleep_until(now + (wait < 100000000 ? wait : 100000000));
            continue;
        }
        err = ferry_waitset_wait(R->ws, wait, ready, TOPICS_MAX, &count);
        if (err != FERRY_OK && err != FERRY_ETIMEDOUT)
            return cli_fail(CMD, 1, "ferry_waitset_wait: %s", ferry_strerror(err));
        for (size_t i = 0; i < count; i++) {
            int status = drain(R, ready[i]);

            if (status != 0) return status;
        }
    }
    /* What is queued when the recording ends is still recorded. */
    for (size_t i = 0; i < R->ntopics && !R->limit_reached; i++) {
        int status = drain(R, &R->topics[i]);

        if (status != 0) return status;
    }
    return 0;
}

int ferry_cmd_record(int argc, char **argv)
{
    recorder *R;
    rec_args a;
    int status;

    status = parse_args(argc, argv, &a);
    if (status >= 0) return status;
    R = calloc(1, sizeof *R);
    if (R == NULL) return cli_fail(CMD, 1, "out of memory");
    R->cdr = malloc(sizeof *R->cdr);
    R->a = &a;
    R->fd = -1;
    if (R->cdr == NULL) {
        free(R);
        return cli_fail(CMD, 1, "out of memory");
    }
    /* SCHED_IDLE and raising one's own nice value need no privilege; a recorder started nicer
     * stays so. A policy the system refuses (a seccomp filter, say) leaves the nice value. */
    if (!a.sched_normal) {
        struct sched_param sp = {.sched_priority = 0};

        if (sched_setscheduler(0, SCHED_IDLE, &sp) != 0) {
            fprintf(stderr, "ferry record: SCHED_IDLE refused (%s): running at nice %u\n",
                    strerror(errno), (unsigned)a.nice);
            a.sched_normal = true;
        }
    }
    errno = 0;
    if (a.sched_normal && a.nice > 0) {
        int now = getpriority(PRIO_PROCESS, 0);

        if ((now != -1 || errno == 0) && now < (int)a.nice &&
            setpriority(PRIO_PROCESS, 0, (int)a.nice) != 0)
            fprintf(stderr, "ferry record: setpriority(%d): %s\n", (int)a.nice, strerror(errno));
    }
    R->start_ns = ferry_now().ns;
    R->realtime_offset = cli_realtime_ns() - R->start_ns;
    setvbuf(stdout, NULL, _IOLBF, 0);
    cli_stop_on_signals();
    status = 1;
    if (cli_node(&a.o.where, CMD, &R->node) != FERRY_OK) goto out;
    if (ferry_waitset_create(&R->ws, R->node) != FERRY_OK) {
        cli_fail(CMD, 1, "ferry_waitset_create failed");
        goto out;
    }
    if (file_open(R) != 0) goto out;
    rescan(R);
    status = record_loop(R);
    update_drops(R);
    if (file_close(R) != 0 && status == 0) status = 1;
    if (R->limit_reached && !a.o.quiet)
        fprintf(stderr, "ferry record: --max-size reached\n");
    if (!a.o.quiet) print_stats(R, true);
    if (!a.sched_normal) {
        uint64_t dropped = 0;

        for (size_t i = 0; i < R->ntopics; i++) dropped += R->topics[i].dropped;
        if (dropped > 0)
            fprintf(stderr, "ferry record: %" PRIu64 " samples dropped under SCHED_IDLE, which "
                    "gets only CPU time nobody else wants; --sched normal gives the recorder a "
                    "share of a busy CPU\n", dropped);
    }
out:
    if (R->w != NULL) {
        ferry_mcap_writer_close(R->w);
        close(R->fd);
    }
    for (size_t i = 0; i < R->ntopics; i++) {
        if (R->topics[i].sub == NULL) continue;
        ferry_waitset_remove(R->ws, R->topics[i].sub);
        ferry_subscriber_destroy(R->topics[i].sub);
    }
    if (R->ws != NULL) ferry_waitset_destroy(R->ws);
    if (R->node != NULL) ferry_node_destroy(R->node);
    free(R->cdr);
    free(R);
    return status;
}
