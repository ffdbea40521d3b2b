/*
 * ferry record: subscribes to the topics that match its patterns (all of them by default,
 * rescanning the domain once a second for new ones) and writes every sample it takes into an
 * MCAP file the way rosbag2 does (profile "ros2", schemas "ros2msg", messages "cdr"). Types
 * without a ROS 2 counterpart are stored as their raw ferry payload (message encoding
 * "ferry-raw"). The recorder never slows a publisher: its subscribers drop their oldest sample
 * when it falls behind, and it counts what it lost per topic.
 *
 * A sample's serialisation goes from the sample's own pages to writev (src/record/mcap.h); for
 * lz4 and zstd it is compressed from them. One thread takes and writes the samples; the writer's
 * own thread starts the writeback. A failed write (a full disk) ends the recording with the file
 * cut back to its last complete chunk and finished there.
 */
#include "cli.h"
#include "commands.h"
#include "decode.h"
#include "mcap.h"
#include "ros2.h"
#include "ros2_types.h"

#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <getopt.h>
#include <inttypes.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define CMD "record"
#define NS_PER_S 1000000000LL
#define TOPICS_MAX 256 /* a waitset's capacity */
#define PATTERNS_MAX 64
#define DEPTH_DEFAULT 32u /* a second of a 30 fps camera */
#define NICE_DEFAULT 10u
#define TAKE_BURST 64 /* samples taken from one topic before the others get a turn */
#define STATS_NAME "ferry.record.stats"
/* Disk space held back for finishing a file on a full disk: the summary of a recording of 50,000
 * chunks (200 GB in chunks of 4 MiB), its statistics and the recorder's counts fit in it. */
#define RESERVE_BYTES (4u << 20)

typedef struct rec_args {
    cli_opts o; /* --depth, --quiet, --domain, --dir */
    const char *output;
    char patterns[PATTERNS_MAX][FERRY_TOPIC_MAX + 2];
    size_t npatterns;
    double seconds, split_seconds;
    uint64_t max_size, split_size, nice;
    size_t chunk_size;
    int compression;  /* a ferry_mcap_compression */
    int sched_normal; /* --sched: 1 normal, 0 idle */
    bool stats, no_crc;
} rec_args;

/* Codes of the options that need more than their row: cli_getopt returns them. */
enum {
    O_OUTPUT = CLI_O_OWN,
};

static const char about[] =
    "usage: ferry record [TOPIC|PATTERN ...] -o FILE.mcap [options]\n"
    "Records the topics that match (fnmatch patterns on names with their leading '/';\n"
    "none: every topic) into an MCAP file that `ros2 bag info`, `ros2 bag play` and\n"
    "Foxglove open. Topics that appear later are picked up within a second. Image,\n"
    "PointCloud2, CameraInfo, CompressedImage, Imu and host tensor topics are stored as\n"
    "ROS 2 CDR; the topics of ROS 2 nodes on rmw_ferry_cpp as the CDR they carry, with\n"
    "the definition their node gives (a plain type's in-memory layout converted to CDR);\n"
    "other types as their raw ferry payload (message encoding ferry-raw).\n"
    "The recorder never slows a publisher: when it falls behind it loses samples, and\n"
    "counts them per topic. SIGINT or SIGTERM finishes the file cleanly.\n"
    "\n"
    "options:\n";

static const cli_option options[] = {
    {.name = "--output",
     .short_name = 'o',
     .value = "FILE",
     CLI_STRING_AT(rec_args, output),
     .code = O_OUTPUT,
     .help = "the MCAP file (overwritten); with --split-*, FILE without\n"
             ".mcap gets _0.mcap, _1.mcap, ..."},
    {.name = "--seconds",
     .value = "S",
     CLI_REAL_AT(rec_args, seconds),
     .range = &cli_ranges[CLI_R_RECORD_SECONDS],
     .help = "stop after S seconds (default: until a signal)"},
    {.name = "--max-size",
     .value = "BYTES",
     CLI_WHOLE_AT(rec_args, max_size),
     .range = &cli_ranges[CLI_R_RECORD_MAX_SIZE],
     .help = "stop before the files together pass BYTES (1M..; suffixes\n"
             "k, M, G)"},
    {.name = "--split-size",
     .value = "BYTES",
     CLI_WHOLE_AT(rec_args, split_size),
     .range = &cli_ranges[CLI_R_RECORD_SPLIT_SIZE],
     .help = "start a new file once one reaches BYTES (1M..)"},
    {.name = "--split-seconds",
     .value = "S",
     CLI_REAL_AT(rec_args, split_seconds),
     .range = &cli_ranges[CLI_R_RECORD_SECONDS],
     .help = "start a new file every S seconds"},
    {.name = "--compression",
     .value = "C",
     CLI_CHOICE_AT(rec_args, compression),
     .choices = (const cli_choice[]){{"none", FERRY_MCAP_NONE},
                                     {"lz4", FERRY_MCAP_LZ4},
                                     {"zstd", FERRY_MCAP_ZSTD},
                                     {NULL, 0}},
     .bad_choice = "--compression %s: %s",
     .help = "chunk compression: none, lz4 or zstd (default none)"},
    {.name = "--chunk-size",
     .value = "BYTES",
     CLI_BYTES_AT(rec_args, chunk_size),
     .range = &cli_ranges[CLI_R_RECORD_CHUNK_SIZE],
     .help = "uncompressed bytes per chunk, 4k..1G (default 4M)"},
    {.name = "--no-crc",
     CLI_FLAG_AT(rec_args, no_crc),
     .help = "write no CRCs (0: not computed), which read every byte once\n"
             "more (a quarter of a core at 250 MB/s with zlib's; ISA-L's,\n"
             "when the build has it, is 12 times faster)"},
    CLI_OPTION_DEPTH("queue depth per publisher, 1..4096 (default 32)"),
    {.name = "--sched",
     .value = "idle|normal",
     CLI_CHOICE_AT(rec_args, sched_normal),
     .choices = (const cli_choice[]){{"idle", 0}, {"normal", 1}, {NULL, 0}},
     .bad_choice = "--sched %s: %s",
     .help = "idle (the default): run under SCHED_IDLE, on CPU time no other\n"
             "task wants, so that the pipeline's publishers and consumers\n"
             "are never preempted by it (on a saturated machine it falls\n"
             "behind and counts what it drops); normal: at --nice"},
    {.name = "--nice",
     .value = "N",
     CLI_WHOLE_AT(rec_args, nice),
     .range = &cli_ranges[CLI_R_RECORD_NICE],
     .help = "with --sched normal, run at nice N, 0..19; 0 keeps the\n"
             "priority the recorder was started with (default 10)"},
    {.name = "--stats",
     CLI_FLAG_AT(rec_args, stats),
     .help = "print per topic, once a second, what was recorded and lost"},
    CLI_OPTION_QUIET("print nothing but errors (not even the summary at the end)"),
    CLI_OPTIONS_WHERE_END,
};

static int parse_args(int argc, char **argv, rec_args *a)
{
    cli_parser p = {
        .cmd = CMD, .table = options, .about = about, .column = 24, .dest = a, .opts = &a->o};
    int c;

    memset(a, 0, sizeof *a);
    cli_opts_init(&a->o);
    a->nice = NICE_DEFAULT;
    while ((c = cli_getopt(&p, argc, argv)) >= CLI_O_OWN) {
        if (c == O_OUTPUT && optarg[0] == '\0')
            return cli_fail(CMD, 2, "empty --output");
    }
    if (c == CLI_OPTS_EXIT)
        return p.status;
    if (a->output == NULL)
        return cli_fail(CMD, 2, "no output file (-o FILE.mcap)");
    if (a->split_size != 0 && a->split_seconds > 0.0)
        return cli_fail(CMD, 2, "--split-size and --split-seconds exclude each other");
    for (int i = optind; i < argc; i++) {
        if (a->npatterns == PATTERNS_MAX)
            return cli_fail(CMD, 2, "at most %d topic patterns", PATTERNS_MAX);
        if (!cli_topic_pattern_check(CMD, argv[i]))
            return 2;
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
    /* A ROS 2 type of an rmw_ferry_cpp node: its samples are CDR already (or a plain type's C
     * layout, converted to CDR here) and are stored as they are, with this definition. */
    bool ros2;
    ferry_ros2_kind ros2_kind; /* one ferry knows: each sample is checked by its parser */
    char *definition;          /* malloc'd; NULL: ferry_ros2_definition(ros2_kind) */
    ferry_ros2_schema *plain;  /* a plain type's schema, for the conversion */
    ferry_subscriber *sub;     /* NULL when it could not be subscribed to */
    const char *failure;       /* then: why */
    bool in_file;              /* its channel is in the current file */
    uint16_t channel;
    uint64_t recorded, bytes, dropped, invalid, skipped;
    uint64_t cut; /* taken, then lost when a failed write cut the file back */
    uint64_t recorded_file, bytes_file, dropped_at_file, last_recorded;
} rtopic;

/* A schema of the current file: a ROS 2 kind, a ROS 2 type by its name, or a raw ferry type. */
typedef struct rschema {
    ferry_ros2_kind kind;
    bool ros2;
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
    unsigned char *converted; /* a plain sample as CDR */
    size_t converted_cap;
    int64_t realtime_offset; /* CLOCK_REALTIME - CLOCK_MONOTONIC at the start */
    int64_t start_ns;

    /* The current file, and an unnamed file of RESERVE_BYTES in its directory (-1: none), given
     * back when a write fails so that the file can still be finished. */
    int fd, reserve_fd;
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
    if (a->npatterns == 0)
        return true;
    for (size_t i = 0; i < a->npatterns; i++)
        if (fnmatch(a->patterns[i], topic, 0) == 0)
            return true;
    return false;
}

static rtopic *find_topic(recorder *R, const char *topic)
{
    for (size_t i = 0; i < R->ntopics; i++)
        if (strcmp(R->topics[i].topic, topic) == 0)
            return &R->topics[i];
    return NULL;
}

/* A type named "pkg/msg/Name" that ferry has no kind of: a ROS 2 type when an rmw_ferry_cpp node
 * described it in the domain's graph files (it does so right after making its publisher: a
 * moment is given), or when it is one of ferry's kinds by its ROS 2 name. Else it is recorded
 * raw. false, with t->failure set and said, when it cannot be recorded. */
static bool ros2_type(recorder *R, rtopic *t)
{
    ferry_ros2_type_info info;
    ferry_err err = FERRY_EAGAIN;
    char why[256];

    for (int attempt = 0; attempt < 10 && err == FERRY_EAGAIN; attempt++) {
        if (attempt > 0)
            cli_sleep_until(ferry_now().ns + 20000000);
        err = ferry_ros2_type_find(ferry_node_dir(R->node), t->type.name, t->type.hash, &info);
    }
    t->ros2_kind = ferry_ros2_kind_of_name(t->type.name);
    if (err != FERRY_OK) {
        t->ros2 = t->ros2_kind != FERRY_ROS2_NONE; /* names.c's definition */
        return true;
    }
    t->ros2 = true;
    if (info.wire == FERRY_ROS2_WIRE_PLAIN &&
        ferry_ros2_schema_parse(t->type.name, info.definition, info.definition_size, &t->plain, why,
                                sizeof why) != FERRY_OK) {
        fprintf(stderr,
                "ferry record: not recording %s: %s travels in its plain (in-memory) "
                "layout and its definition does not parse (%s)\n",
                t->topic, t->type.name, why);
        t->failure = "plain layout of a definition that does not parse";
        ferry_ros2_type_info_free(&info);
        return false;
    }
    if (t->plain != NULL && ferry_ros2_schema_plain_size(t->plain) + 8 > R->converted_cap) {
        size_t cap = ferry_ros2_schema_plain_size(t->plain) + 8;
        unsigned char *c = realloc(R->converted, cap);

        if (c == NULL) {
            t->failure = "out of memory";
            fprintf(stderr, "ferry record: not recording %s: out of memory\n", t->topic);
            ferry_ros2_type_info_free(&info);
            return false;
        }
        R->converted = c;
        R->converted_cap = cap;
    }
    t->definition = info.definition; /* kept */
    return true;
}

static bool scan_endpoint(void *arg, const ferry_endpoint_info *info)
{
    recorder *R = arg;
    ferry_subscriber_options o;
    rtopic *t;
    ferry_err err;

    if (!info->alive || info->kind != FERRY_ENDPOINT_PUBLISHER)
        return true;
    if (!topic_matches(R->a, info->topic) || find_topic(R, info->topic) != NULL)
        return true;
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
    if (t->kind == FERRY_ROS2_NONE && strstr(t->type.name, "/msg/") != NULL && !ros2_type(R, t)) {
        R->ntopics++; /* listed, not recorded: said once */
        return true;
    }

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
                t->kind != FERRY_ROS2_NONE    ? " as "
                : t->ros2 && t->plain != NULL ? ", plain (in-memory) layout converted to CDR"
                : t->ros2                     ? ", ROS 2 CDR"
                                              : ", raw",
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
    if (n > 5 && strcmp(o + n - 5, ".mcap") == 0)
        n -= 5;
    snprintf(out, cap, "%.*s_%u.mcap", (int)n, o, R->file_index);
}

/* The reserve: an unnamed file (O_TMPFILE: nothing to clean up after a crash) with its blocks
 * allocated, in the directory of R->path. Where the filesystem takes neither, there is none, and
 * a disk that fills up right after a chunk may leave no room for the summary (the file then
 * reads up to its last complete chunk, as after a crash). */
static void reserve_open(recorder *R)
{
    char dir[sizeof R->path];
    char *slash;

    if (R->reserve_fd >= 0)
        return;
    snprintf(dir, sizeof dir, "%s", R->path);
    slash = strrchr(dir, '/');
    if (slash == NULL)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    R->reserve_fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (R->reserve_fd >= 0 && fallocate(R->reserve_fd, 0, 0, RESERVE_BYTES) != 0) {
        close(R->reserve_fd);
        R->reserve_fd = -1;
    }
}

static int file_open(recorder *R)
{
    ferry_mcap_writer_options wo;
    struct stat st;
    ferry_err err;

    file_path(R, R->path, sizeof R->path);
    /* Non-blocking, so that a FIFO (whose open waits for a reader) or a device cannot stop the
     * recorder here; then only a regular file is kept: the writer fills in each chunk's header
     * in place (pwrite) once the chunk is complete, which no pipe takes. */
    R->fd = open(R->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, 0644);
    if (R->fd < 0 && errno == ENXIO)
        return cli_fail(CMD, 1, "%s is a FIFO (with no reader): the output must be a regular file",
                        R->path);
    if (R->fd < 0)
        return cli_fail(CMD, 1, "cannot create %s: %s", R->path, strerror(errno));
    memset(&st, 0, sizeof st);
    if (fstat(R->fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        fcntl(R->fd, F_SETFL, fcntl(R->fd, F_GETFL) & ~O_NONBLOCK) != 0) {
        int e = errno;
        const char *kind = S_ISFIFO(st.st_mode)   ? "a FIFO"
                           : S_ISSOCK(st.st_mode) ? "a socket"
                           : S_ISCHR(st.st_mode)  ? "a character device"
                           : S_ISBLK(st.st_mode)  ? "a block device"
                                                  : "not a regular file";

        close(R->fd);
        R->fd = -1;
        if (S_ISREG(st.st_mode))
            return cli_fail(CMD, 1, "%s: %s", R->path, strerror(e));
        return cli_fail(CMD, 1,
                        "%s is %s: the output must be a regular file (each chunk's "
                        "header is written in place once the chunk is complete)",
                        R->path, kind);
    }
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
    reserve_open(R);
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
    char(*text)[FERRY_TOPIC_MAX + 64] = calloc(R->ntopics * PER_TOPIC * 2, sizeof *text);
    size_t n = 0;

    if (kv == NULL || text == NULL)
        goto out;
    for (size_t i = 0; i < R->ntopics; i++) {
        const rtopic *t = &R->topics[i];
        const char *names[PER_TOPIC] = {"recorded", "bytes", "dropped", "invalid", "skipped"};
        uint64_t values[PER_TOPIC] = {t->recorded_file, t->bytes_file,
                                      t->dropped - t->dropped_at_file + t->cut, t->invalid,
                                      t->skipped};

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

    if (R->w == NULL)
        return 0;
    update_drops(R);
    write_stats(R);
    R->bytes_before += ferry_mcap_writer_size(R->w);
    err = ferry_mcap_writer_close(R->w);
    R->w = NULL;
    if (err == FERRY_ESYS)
        status = cli_fail(CMD, 1,
                          "finishing %s: %s: it has no summary, and readers take it up to its last "
                          "complete chunk",
                          R->path, strerror(errno));
    else if (err != FERRY_OK)
        status = cli_fail(CMD, 1, "finishing %s: %s", R->path, ferry_strerror(err));
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
        if (s->kind == t->kind && s->ros2 == t->ros2 &&
            (t->kind != FERRY_ROS2_NONE ||
             (strcmp(s->type.name, t->type.name) == 0 && s->type.hash == t->type.hash))) {
            *id = s->id;
            return FERRY_OK;
        }
    }
    s = &R->schemas[R->nschemas];
    s->kind = t->kind;
    s->ros2 = t->ros2;
    s->type = t->type;
    if (t->ros2) {
        const char *def =
            t->definition != NULL ? t->definition : ferry_ros2_definition(t->ros2_kind);

        err = ferry_mcap_writer_add_schema(R->w, t->type.name, "ros2msg", def, strlen(def), &s->id);
    } else if (t->kind != FERRY_ROS2_NONE) {
        const char *def = ferry_ros2_definition(t->kind);

        err = ferry_mcap_writer_add_schema(R->w, ferry_ros2_name(t->kind), "ros2msg", def,
                                           strlen(def), &s->id);
    } else {
        /* rosbag2 takes no schema id 0: a raw type gets a schema of its ferry name with no
         * encoding and no definition. */
        err = ferry_mcap_writer_add_schema(R->w, t->type.name, "", NULL, 0, &s->id);
    }
    if (err != FERRY_OK)
        return err;
    R->nschemas++;
    *id = s->id;
    return FERRY_OK;
}

/* The offered_qos_profiles of the MCAP ros2 profile: the QoS of each live publisher of the
 * topic, in the YAML that rosbag2 writes (rmw's enum values, durations as sec and nsec). What
 * ferry knows of a publisher: delivery is reliable (a sample reaches every subscriber's queue; a
 * full queue drops its oldest, as a KEEP_LAST history does), a publisher that keeps history is
 * transient local with that depth, one that keeps none volatile with the recorder's depth. */
#define QOS_PROFILES_MAX 16
#define QOS_PROFILE_YAML 512
typedef struct qos_profiles {
    char yaml[QOS_PROFILES_MAX * QOS_PROFILE_YAML + 8];
    size_t len;
    unsigned n;
    uint32_t volatile_depth;
} qos_profiles;

static bool add_qos_profile(void *arg, const ferry_endpoint_info *info)
{
    static const char infinite[] = "\n    sec: 9223372036\n    nsec: 854775807";
    qos_profiles *q = arg;
    int n;

    if (info->kind != FERRY_ENDPOINT_PUBLISHER || !info->alive)
        return true;
    if (q->n == QOS_PROFILES_MAX)
        return false;
    n = snprintf(q->yaml + q->len, sizeof q->yaml - q->len,
                 "- history: 1\n  depth: %" PRIu32 "\n  reliability: 1\n  durability: %d\n"
                 "  deadline:%s\n  lifespan:%s\n  liveliness: 1\n"
                 "  liveliness_lease_duration:%s\n  avoid_ros_namespace_conventions: false\n",
                 info->depth > 0 ? info->depth : q->volatile_depth, info->depth > 0 ? 1 : 2,
                 infinite, infinite, infinite);
    if (n < 0 || (size_t)n >= sizeof q->yaml - q->len)
        return false;
    q->len += (size_t)n;
    q->n++;
    return true;
}

static ferry_err channel_for(recorder *R, rtopic *t)
{
    char hash[32];
    static qos_profiles qos; /* one recorder thread */
    ferry_mcap_kv meta[3] = {{"ferry.type", t->type.name},
                             {"ferry.type_hash", hash},
                             {"offered_qos_profiles", qos.yaml}};
    uint16_t schema;
    ferry_err err;

    if (t->in_file)
        return FERRY_OK;
    err = schema_for(R, t, &schema);
    if (err != FERRY_OK)
        return err;
    snprintf(hash, sizeof hash, "0x%016" PRIx64, t->type.hash);
    memset(&qos, 0, sizeof qos);
    qos.volatile_depth = R->a->o.depth != 0 ? (uint32_t)R->a->o.depth : DEPTH_DEFAULT;
    ferry_inspect(R->a->o.where.dir, R->a->o.where.domain, t->topic, add_qos_profile, &qos);
    if (qos.n == 0)
        snprintf(qos.yaml, sizeof qos.yaml, "[]"); /* the publisher went away */
    err = ferry_mcap_writer_add_channel(R->w, schema, t->topic,
                                        t->kind != FERRY_ROS2_NONE || t->ros2 ? "cdr" : "ferry-raw",
                                        meta, 3, &t->channel);
    if (err == FERRY_OK)
        t->in_file = true;
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
        if (status != 0)
            return status;
        return file_open(R);
    }
    return 0;
}

/* A write failed (a full disk, a quota, an I/O error) while t's sample was written: the recording
 * stops. The file is cut back to its last complete chunk, which gives the space of the rest back,
 * and finished there (the caller closes it), so that it reads whole; the messages of the chunk
 * that did not fit, and the sample, count as dropped. Returns 1. */
static int write_failed(recorder *R, rtopic *t_failed, ferry_err err)
{
    int e = errno;
    uint64_t kept[TOPICS_MAX], cut = 0;
    const char *cause = err == FERRY_ESYS ? strerror(e) : ferry_strerror(err);

    if (R->reserve_fd >= 0) {
        close(R->reserve_fd);
        R->reserve_fd = -1;
    }
    if (ferry_mcap_writer_cut(R->w, kept, TOPICS_MAX) != FERRY_OK) {
        t_failed->cut++;
        fprintf(stderr,
                "ferry record: %s: %s after %.1f MB; recording stopped, and the file could not be "
                "cut back to its last complete chunk (%s): readers take it up to there\n",
                R->path, cause, (double)(R->bytes_before + ferry_mcap_writer_size(R->w)) / 1e6,
                strerror(errno));
        return 1;
    }
    for (size_t i = 0; i < R->ntopics; i++) {
        rtopic *t = &R->topics[i];
        uint64_t taken = t->recorded_file + (t == t_failed);
        uint64_t n = taken - (t->in_file && t->channel < TOPICS_MAX ? kept[t->channel] : 0);

        if (n == 0 || n > taken)
            continue;
        /* Bytes are counted per topic, not per chunk: the lost messages' share of them. */
        if (t->recorded_file > 0) {
            uint64_t share = t->bytes_file / t->recorded_file * (n - (t == t_failed));

            t->bytes -= share;
            t->bytes_file -= share;
        }
        t->recorded -= n - (t == t_failed);
        t->recorded_file -= n - (t == t_failed);
        t->cut += n;
        cut += n;
    }
    fprintf(stderr,
            "ferry record: %s: %s after %.1f MB; recording stopped, the file cut back to its "
            "last complete chunk (the %" PRIu64 " message%s taken since counted as dropped) to "
            "be finished there\n",
            R->path, cause, (double)(R->bytes_before + ferry_mcap_writer_size(R->w)) / 1e6, cut,
            cut == 1 ? "" : "s");
    return 1;
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
    } else if (t->plain != NULL) {
        if (ferry_ros2_plain_to_cdr(t->plain, s->data, s->size, R->converted, R->converted_cap,
                                    &size) != FERRY_OK) {
            t->invalid++;
            return 0;
        }
        raw.iov_base = R->converted;
        raw.iov_len = size;
    } else if (t->ros2) {
        const unsigned char *h = s->data;
        ferry_ros2_msg msg;

        /* CDR as it came; a kind ferry knows is parsed (in place) to be sure it is one. */
        if (s->size < 4 || h[0] != 0 || h[1] > 1 ||
            (t->ros2_kind != FERRY_ROS2_NONE &&
             ferry_ros2_cdr_parse(t->ros2_kind, s->data, s->size, &msg) != FERRY_ROS2_CDR_OK)) {
            t->invalid++;
            return 0;
        }
    }
    status = maybe_rotate(R, size + 64);
    if (status != 0 || R->limit_reached)
        return status;
    err = channel_for(R, t);
    if (err == FERRY_OK)
        err = ferry_mcap_writer_write(
            R->w, t->channel, (uint32_t)s->sequence, (uint64_t)(take_ns + R->realtime_offset),
            (uint64_t)(s->publish_time.ns + R->realtime_offset), iov, niov);
    if (err == FERRY_ESYS)
        return write_failed(R, t, err);
    if (err != FERRY_OK)
        return cli_fail(CMD, 1, "writing %s: %s", R->path, ferry_strerror(err));
    t->recorded++;
    t->recorded_file++;
    t->bytes += size;
    t->bytes_file += size;
    return 0;
}

/* Takes what t has queued, up to a burst. */
static int drain(recorder *R, rtopic *t)
{
    if (t->sub == NULL)
        return 0;
    for (int i = 0; i < TAKE_BURST && !R->limit_reached; i++) {
        ferry_sample s;
        ferry_err err = ferry_take(t->sub, &s);
        int status;

        if (err == FERRY_EAGAIN)
            return 0;
        if (err != FERRY_OK)
            return cli_fail(CMD, 1, "%s: ferry_take: %s", t->topic, ferry_strerror(err));
        status = record_sample(R, t, &s, ferry_now().ns);
        err = ferry_release(t->sub, &s);
        if (status != 0)
            return status;
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
        if (!final)
            printf(" (%+" PRId64 ")", (int64_t)(t->recorded - t->last_recorded));
        printf(" dropped %" PRIu64 " bytes %" PRIu64, t->dropped + t->cut, t->bytes);
        if (t->invalid != 0)
            printf(" invalid %" PRIu64, t->invalid);
        if (t->skipped != 0)
            printf(" skipped %" PRIu64 " (device tensors)", t->skipped);
        putchar('\n');
        t->last_recorded = t->recorded;
    }
    if (R->ntopics == 0 && !final)
        printf("no topic yet\n");
    if (final) {
        double secs = (double)(ferry_now().ns - R->start_ns) / 1e9;
        uint64_t messages = 0;

        for (size_t i = 0; i < R->ntopics; i++)
            messages += R->topics[i].recorded;
        printf("recorded %" PRIu64 " messages into %u file%s (%s%s), %" PRIu64
               " bytes in %.3f s (%.1f MB/s), cpu %.3f s\n",
               messages, R->file_index, R->file_index == 1 ? "" : "s", R->a->output,
               R->file_index > 1 ? " split" : "", R->bytes_before, secs,
               secs > 0 ? (double)R->bytes_before / 1e6 / secs : 0.0, (double)cli_cpu_ns() / 1e9);
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

        if (stop >= 0 && now >= stop)
            break;
        if (now >= next_second) {
            rescan(R);
            update_drops(R);
            if (a->stats)
                print_stats(R, false);
            next_second += NS_PER_S;
            if (next_second <= now)
                next_second = now + NS_PER_S;
            /* A time split happens at the next sample, or here when none comes. */
            if (a->split_seconds > 0.0 && maybe_rotate(R, 0) != 0)
                return 1;
            continue;
        }
        if (stop >= 0 && stop - now < wait)
            wait = stop - now;
        if (R->ntopics == 0) {
            cli_sleep_until(now + (wait < 100000000 ? wait : 100000000));
            continue;
        }
        err = ferry_waitset_wait(R->ws, wait, ready, TOPICS_MAX, &count);
        if (err != FERRY_OK && err != FERRY_ETIMEDOUT)
            return cli_fail(CMD, 1, "ferry_waitset_wait: %s", ferry_strerror(err));
        for (size_t i = 0; i < count; i++) {
            int status = drain(R, ready[i]);

            if (status != 0)
                return status;
        }
    }
    /* What is queued when the recording ends is still recorded. */
    for (size_t i = 0; i < R->ntopics && !R->limit_reached; i++) {
        int status = drain(R, &R->topics[i]);

        if (status != 0)
            return status;
    }
    return 0;
}

int ferry_cmd_record(int argc, char **argv)
{
    recorder *R;
    rec_args a;
    int status;

    status = parse_args(argc, argv, &a);
    if (status >= 0)
        return status;
    R = calloc(1, sizeof *R);
    if (R == NULL)
        return cli_fail(CMD, 1, "out of memory");
    R->cdr = malloc(sizeof *R->cdr);
    R->a = &a;
    R->fd = R->reserve_fd = -1;
    if (R->cdr == NULL) {
        free(R);
        return cli_fail(CMD, 1, "out of memory");
    }
    /* Before the scheduling change, which can keep this process off the CPU for a while on a busy
     * machine: a SIGINT that comes meanwhile must stop it, not be lost. */
    cli_stop_on_signals();
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
    status = 1;
    if (cli_node(&a.o.where, CMD, &R->node) != FERRY_OK)
        goto out;
    if (ferry_waitset_create(&R->ws, R->node) != FERRY_OK) {
        cli_fail(CMD, 1, "ferry_waitset_create failed");
        goto out;
    }
    if (file_open(R) != 0)
        goto out;
    rescan(R);
    status = record_loop(R);
    update_drops(R);
    if (file_close(R) != 0 && status == 0)
        status = 1;
    if (R->limit_reached && !a.o.quiet)
        fprintf(stderr, "ferry record: --max-size reached\n");
    if (!a.o.quiet)
        print_stats(R, true);
    if (!a.sched_normal) {
        uint64_t dropped = 0;

        for (size_t i = 0; i < R->ntopics; i++)
            dropped += R->topics[i].dropped;
        if (dropped > 0)
            fprintf(stderr,
                    "ferry record: %" PRIu64 " samples dropped under SCHED_IDLE, which "
                    "gets only CPU time nobody else wants; --sched normal gives the recorder a "
                    "share of a busy CPU\n",
                    dropped);
    }
out:
    if (R->w != NULL) {
        ferry_mcap_writer_close(R->w);
        close(R->fd);
    }
    if (R->reserve_fd >= 0)
        close(R->reserve_fd);
    for (size_t i = 0; i < R->ntopics; i++) {
        if (R->topics[i].sub == NULL)
            continue;
        ferry_waitset_remove(R->ws, R->topics[i].sub);
        ferry_subscriber_destroy(R->topics[i].sub);
    }
    if (R->ws != NULL)
        ferry_waitset_destroy(R->ws);
    if (R->node != NULL)
        ferry_node_destroy(R->node);
    for (size_t i = 0; i < R->ntopics; i++) {
        free(R->topics[i].definition);
        ferry_ros2_schema_free(R->topics[i].plain);
    }
    free(R->converted);
    free(R->cdr);
    free(R);
    return status;
}
