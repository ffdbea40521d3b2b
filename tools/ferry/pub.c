/*
 * ferry pub: publishes synthetic frames (cli_frame_fill), or an image file decoded once, on a
 * topic at a fixed rate, through the zero-copy path (ferry_loan + ferry_publish), until a count
 * is reached or a signal arrives. With --camera-info, each image is followed by a matching
 * sensor_msgs/CameraInfo on a second publisher.
 */
#include "cli.h"
#include "commands.h"

#include <ferry/msg.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CMD "pub"
#define NS_PER_S 1000000000LL
#define WAIT_SLICE_NS 100000000LL

typedef struct pub_args {
    cli_opts o; /* --count, --domain, --dir */
    const char *topic;
    size_t size;
    double rate;
    uint64_t wait_subscribers;
    uint64_t history;
    const char *history_arg; /* as given, for a message about the chunk count */
    uint64_t chunks;         /* 0: the library's default */
    uint64_t share;          /* chunks one subscriber may hold; 0: the library's default */
    size_t share_bytes;      /* the same in bytes; 0: the library's default */
    bool admit_blocking;
    int huge_pages; /* a ferry_huge_pages */
    size_t pool;
    uint32_t width, height;
    const char *sides_arg; /* WIDTHxHEIGHT as given */
    bool cloud;            /* width x height are points, not pixels */
    const char *encoding;
    bool encoding_given;
    const char *frame_id;
    const char *from;    /* --from FILE */
    cli_image_file file; /* its pixels, once loaded */
    bool camera_info;    /* --camera-info */
    /* Where the camera infos go: "<parent of topic>/camera_info". */
    char info_topic[FERRY_TOPIC_MAX + 2];
    const char *size_option; /* the first of --size, --image, --cloud given, for --from */
} pub_args;

/* Codes of the options that need more than their row: cli_getopt returns them. */
enum {
    O_SIZE = CLI_O_OWN,
    O_HISTORY,
    O_IMAGE,
    O_CLOUD,
    O_ENCODING,
    O_FROM,
    O_FRAME_ID,
};

static const char about[] =
    "usage: ferry pub TOPIC [options]\n"
    "Publishes synthetic frames of type " CLI_FRAME_TYPE " (a header, then a pattern\n"
    "derived from the sequence number, covered by a checksum that `ferry echo --verify`\n"
    "checks) at a fixed rate. SIGINT or SIGTERM stops it cleanly.\n"
    "\n"
    "options:\n";

static const cli_option options[] = {
    {.name = "--size",
     .value = "BYTES",
     CLI_BYTES_AT(pub_args, size),
     .range = &cli_ranges[CLI_R_PUB_SIZE],
     .code = O_SIZE,
     .help = "frame size, 64..1024G; suffixes k, M, G (default 1M)"},
    {.name = "--rate",
     .value = "HZ",
     CLI_REAL_AT(pub_args, rate),
     .range = &cli_ranges[CLI_R_PUB_RATE],
     .help = "frames per second, 0.01..100000; 0 publishes as fast as\n"
             "possible (default 30)"},
    CLI_OPTION_COUNT("stop after N frame periods (a frame skipped for a full\n"
                     "pool counts); 0 publishes for ever (default 0)"),
    {.name = "--wait-subscribers",
     .value = "N",
     CLI_WHOLE_AT(pub_args, wait_subscribers),
     .range = &cli_ranges[CLI_R_PUB_WAIT_SUBSCRIBERS],
     .help = "wait for N subscribers (0..1024) before the first frame\n"
             "(default 0)"},
    {.name = "--history",
     .value = "N",
     CLI_WHOLE_AT(pub_args, history),
     .range = &cli_ranges[CLI_R_PUB_HISTORY],
     .code = O_HISTORY,
     .help = "keep the last N frames for late joiners, 0..4096 and below\n"
             "--chunks (default 0)"},
    {.name = "--chunks",
     .value = "N",
     CLI_WHOLE_AT(pub_args, chunks),
     .range = &cli_ranges[CLI_R_PUB_CHUNKS],
     .help = "most chunks (frames) in the publisher's pool, 1..65536\n"
             "(default: the library's, 256)"},
    {.name = "--share",
     .value = "N",
     CLI_WHOLE_AT(pub_args, share),
     .range = &cli_ranges[CLI_R_PUB_SHARE],
     .help = "most chunks one subscriber may hold, queued and taken\n"
             "together, 1..--chunks; a subscriber is a process (every\n"
             "process of another user counts as one), whatever number\n"
             "of connections it makes (default: seven eighths of --chunks)"},
    {.name = "--share-bytes",
     .value = "BYTES",
     CLI_BYTES_AT(pub_args, share_bytes),
     .range = &cli_ranges[CLI_R_PUB_SHARE_BYTES],
     .help = "the same in bytes of chunks (default: seven eighths of the\n"
             "pool)"},
    {.name = "--admit-blocking",
     CLI_FLAG_AT(pub_args, admit_blocking),
     .help = "admit subscribers that ask to block the publisher\n"
             "(lossless); by default they are refused"},
    {.name = "--huge-pages",
     .value = "MODE",
     CLI_CHOICE_AT(pub_args, huge_pages),
     .choices = (const cli_choice[]){{"off", FERRY_HUGE_PAGES_OFF},
                                     {"thp", FERRY_HUGE_PAGES_THP},
                                     {"hugetlb", FERRY_HUGE_PAGES_HUGETLB},
                                     {"auto", FERRY_HUGE_PAGES_AUTO},
                                     {NULL, 0}},
     .bad_choice = "invalid --huge-pages '%s' (%s)",
     .help = "back the pool with 2 MiB pages: off, thp, hugetlb or auto\n"
             "(default off; `ferry info` shows what the pool got)"},
    {.name = "--pool",
     .value = "BYTES",
     CLI_BYTES_AT(pub_args, pool),
     .range = &cli_ranges[CLI_R_PUB_POOL],
     .help = "byte cap of the publisher's pool, 8k..4096G (default: the\n"
             "library's, raised to 4 frames when smaller)"},
    {.name = "--image",
     .value = "WxH",
     .kind = CLI_K_CODE,
     .code = O_IMAGE,
     .help = "publish sensor_msgs/Image frames of W x H pixels instead;\n"
             "their pixel bytes are a synthetic frame (echo --verify);\n"
             "a frame, header included, takes 256..1024G bytes"},
    {.name = "--encoding",
     .value = "ENC",
     CLI_STRING_AT(pub_args, encoding),
     .code = O_ENCODING,
     .help = "with --image, the image encoding (default rgb8)"},
    {.name = "--cloud",
     .value = "WxH",
     .kind = CLI_K_CODE,
     .code = O_CLOUD,
     .help = "publish sensor_msgs/PointCloud2 frames of H rows of W\n"
             "points instead, fields x y z intensity (float32, point\n"
             "step 16), 4..268435199 points; their point bytes are a\n"
             "synthetic frame"},
    {.name = "--from",
     .value = "FILE",
     CLI_STRING_AT(pub_args, from),
     .code = O_FROM,
     .help = "publish the image in FILE as sensor_msgs/Image instead,\n"
             "again at every frame: PNG, JPEG, PPM (P6) or PGM (P5),\n"
             "8-bit; mono8, rgb8 or rgba8 as the file has it"},
    {.name = "--camera-info",
     CLI_FLAG_AT(pub_args, camera_info),
     .help = "with --image or --from, also publish a matching\n"
             "sensor_msgs/CameraInfo on <parent of TOPIC>/camera_info\n"
             "(/camera_info for a topic without a parent), one per\n"
             "image: same size, stamp and frame_id, plumb_bob with\n"
             "zero distortion, a pinhole with fx = fy = width at the\n"
             "image centre"},
    {.name = "--frame-id",
     .value = "ID",
     CLI_STRING_AT(pub_args, frame_id),
     .code = O_FRAME_ID,
     .help = "image or cloud frame_id (default: the topic's last\n"
             "segment)"},
    CLI_OPTIONS_WHERE_END,
};

/* The library keeps the history below the chunk count, so a loan always finds a chunk: false
 * after a message when it is not. */
static bool history_fits(const pub_args *a, uint64_t chunks)
{
    cli_range r = cli_ranges[CLI_R_PUB_HISTORY];
    char note[64];

    if (a->history < chunks)
        return true;
    if (r.hi > chunks - 1)
        r.hi = chunks - 1;
    snprintf(note, sizeof note, "must also be below --chunks, %" PRIu64 "%s", chunks,
             a->chunks != 0 ? "" : " by default");
    r.note = note;
    cli_range_fail(CMD, &r, a->history_arg);
    return false;
}

/* The sample of a --cloud frame: its header, padded to 64 bytes, then the points. False after
 * a message when they cannot hold a synthetic frame or are too many to carry. */
static bool cloud_size(pub_args *a)
{
    cli_range r = cli_ranges[CLI_R_PUB_CLOUD_POINTS];
    uint64_t points = (uint64_t)a->width * a->height;
    char note[64];

    if (points < r.lo || points > r.hi) {
        snprintf(note, sizeof note, "%u bytes each; this is %" PRIu64, CLI_CLOUD_POINT_STEP,
                 points);
        r.note = note;
        cli_range_fail(CMD, &r, a->sides_arg);
        return false;
    }
    a->size = ((sizeof(ferry_pointcloud_header) + 63) / 64) * 64 +
              (size_t)(points * CLI_CLOUD_POINT_STEP);
    return true;
}

/* The sample of an --image frame: its header, padded to 64 bytes, then the pixels, which must
 * hold a synthetic frame; the whole within --size's range. False after a message when not. */
static bool image_size(pub_args *a)
{
    uint64_t header = ((sizeof(ferry_image_header) + 63) / 64) * 64, frame;
    cli_range r = cli_ranges[CLI_R_PUB_SIZE];
    ferry_image_layout l;
    char note[96];

    if (ferry_image_layout_get(a->encoding, 2, 2, 0, &l) != FERRY_OK) {
        cli_fail(CMD, 2, "--encoding %s is not an image encoding (docs/msg.md lists them)",
                 a->encoding);
        return false;
    }
    if (ferry_image_layout_get(a->encoding, a->width, a->height, 0, &l) != FERRY_OK) {
        cli_fail(CMD, 2,
                 "--image %s does not fit %s: rows of at most %" PRIu32 " bytes, sides "
                 "even where the encoding subsamples",
                 a->sides_arg, a->encoding, UINT32_MAX);
        return false;
    }
    frame = l.data_size > UINT64_MAX - header ? UINT64_MAX : header + l.data_size;
    r.name = "--image";
    r.lo = header + sizeof(cli_frame_header);
    r.unit = "bytes a frame";
    if (frame < r.lo || frame > r.hi) {
        snprintf(note, sizeof note, "%s, header and pixels: %" PRIu64, a->encoding, frame);
        r.note = note;
        cli_range_fail(CMD, &r, a->sides_arg);
        return false;
    }
    a->size = (size_t)frame;
    return true;
}

/* The topic of --camera-info: the image topic's parent, then "/camera_info". False after a
 * message when that is no valid topic, or is the image topic itself. */
static bool info_topic(pub_args *a)
{
    const char *slash = strrchr(a->topic, '/');
    int parent = slash != NULL ? (int)(slash - a->topic) : 0;
    int n;

    /* run() names an invalid image topic as such. */
    if (ferry_topic_validate(a->topic) != FERRY_OK)
        return true;
    n = snprintf(a->info_topic, sizeof a->info_topic, "%s%.*s/camera_info",
                 a->topic[0] == '/' || parent == 0 ? "" : "/", parent, a->topic);
    if (n < 0 || (size_t)n >= sizeof a->info_topic ||
        ferry_topic_validate(a->info_topic) != FERRY_OK) {
        cli_fail(CMD, 2,
                 "--camera-info: '%s' has no valid camera_info topic next to it (at most "
                 "%u bytes)",
                 a->topic, FERRY_TOPIC_MAX);
        return false;
    }
    if (strcmp(a->info_topic + 1, a->topic + (a->topic[0] == '/')) == 0) {
        cli_fail(CMD, 2, "--camera-info: the image topic '%s' is its camera_info topic", a->topic);
        return false;
    }
    return true;
}

/* The image of --from: decoded once, published at every frame. Returns 0, or the exit status
 * after a message. */
static int file_size(pub_args *a)
{
    uint64_t header = ((sizeof(ferry_image_header) + 63) / 64) * 64;
    int status = cli_image_load(CMD, a->from, &a->file);

    if (status != 0)
        return status;
    a->width = a->file.width;
    a->height = a->file.height;
    a->encoding = a->file.encoding;
    if (a->file.size > cli_ranges[CLI_R_PUB_SIZE].hi - header)
        /* cli_image_file_free in ferry_cmd_pub gives the pixels back. */
        return cli_fail(CMD, 1, "--from %s: %ux%u pixels are more than a sample holds", a->from,
                        (unsigned)a->width, (unsigned)a->height);
    a->size = (size_t)(header + a->file.size);
    return 0;
}

static int parse_args(int argc, char **argv, pub_args *a)
{
    cli_parser p = {
        .cmd = CMD, .table = options, .about = about, .column = 26, .dest = a, .opts = &a->o};
    ferry_publisher_options d;
    int c;

    memset(a, 0, sizeof *a);
    cli_opts_init(&a->o);
    a->size = 1u << 20;
    a->rate = 30.0;
    a->encoding = "rgb8";
    while ((c = cli_getopt(&p, argc, argv)) >= CLI_O_OWN) {
        switch (c) {
        case O_SIZE:
            if (a->size_option == NULL)
                a->size_option = "--size";
            break;
        case O_HISTORY:
            a->history_arg = optarg;
            break;
        case O_IMAGE:
        case O_CLOUD:
            if (!cli_parse_sides(CMD, &cli_ranges[c == O_IMAGE ? CLI_R_PUB_IMAGE : CLI_R_PUB_CLOUD],
                                 optarg, &a->width, &a->height))
                return 2;
            a->sides_arg = optarg;
            a->cloud = c == O_CLOUD;
            if (a->size_option == NULL)
                a->size_option = c == O_CLOUD ? "--cloud" : "--image";
            break;
        case O_ENCODING:
            a->encoding_given = true;
            break;
        case O_FROM:
            if (optarg[0] == '\0')
                return cli_fail(CMD, 2, "--from is empty: give an image file");
            break;
        case O_FRAME_ID:
            if (strlen(optarg) > FERRY_MSG_FRAME_ID_MAX)
                return cli_fail(CMD, 2, "invalid --frame-id '%s' (at most %u bytes)", optarg,
                                FERRY_MSG_FRAME_ID_MAX);
            break;
        }
    }
    if (c == CLI_OPTS_EXIT)
        return p.status;
    if (a->from != NULL && a->size_option != NULL)
        return cli_fail(CMD, 2, "--from and %s cannot be used together (the file gives the size)",
                        a->size_option);
    if (a->from != NULL && a->encoding_given)
        return cli_fail(CMD, 2,
                        "--from and --encoding cannot be used together (the file gives "
                        "the encoding)");
    /* Only the synthetic images of --image have an encoding to choose: refused elsewhere, rather
     * than ignored while frames of another type go out. */
    if (a->encoding_given && a->from == NULL && (a->sides_arg == NULL || a->cloud))
        return cli_fail(CMD, 2,
                        "--encoding needs --image (it is the encoding of the images "
                        "--image WxH publishes)");
    if (a->camera_info && a->from == NULL && (a->sides_arg == NULL || a->cloud))
        return cli_fail(CMD, 2, "--camera-info needs --image or --from");
    ferry_publisher_options_init(&d);
    if (!history_fits(a, a->chunks != 0 ? a->chunks : d.max_chunks))
        return 2;
    if (a->share > (a->chunks != 0 ? a->chunks : d.max_chunks))
        return cli_fail(CMD, 2,
                        "--share %" PRIu64 " is more than the pool's %" PRIu64 " chunks "
                        "(--chunks)",
                        a->share, a->chunks != 0 ? a->chunks : (uint64_t)d.max_chunks);

    if (!cli_topic_operand(CMD, argc, argv, &a->topic))
        return 2;
    if (a->camera_info && !info_topic(a))
        return 2;
    if (a->from != NULL) {
        int status = file_size(a);

        if (status != 0)
            return status;
    }
    if (a->cloud && !cloud_size(a))
        return 2;
    if (!a->cloud && a->from == NULL && a->width != 0 && !image_size(a))
        return 2;
    if (a->width != 0 && a->frame_id == NULL) {
        const char *slash = strrchr(a->topic, '/');

        a->frame_id = slash != NULL ? slash + 1 : a->topic;
        if (strlen(a->frame_id) > FERRY_MSG_FRAME_ID_MAX)
            a->frame_id = "";
    }
    return -1;
}

/* An image whose pixel bytes are a synthetic frame (or the file's), stamped with the wall clock;
 * *stamp receives the stamp. */
static ferry_err publish_image(ferry_publisher *pub, const pub_args *a, uint64_t sequence,
                               ferry_stamp *stamp, cli_lat *calls)
{
    struct timespec now;
    ferry_image img;
    ferry_err err;

    err = ferry_image_loan(pub, a->width, a->height, a->encoding, 0, &img);
    if (err != FERRY_OK)
        return err;
    /* The loan's rows are packed (step 0 asks for the minimum), as the file's are. */
    if (a->file.pixels != NULL)
        memcpy(img.data, a->file.pixels, img.data_size);
    else
        cli_frame_fill(img.data, img.data_size, sequence, true);
    clock_gettime(CLOCK_REALTIME, &now);
    img.header->stamp.sec = (int32_t)now.tv_sec;
    img.header->stamp.nanosec = (uint32_t)now.tv_nsec;
    *stamp = img.header->stamp;
    snprintf(img.header->frame_id, sizeof img.header->frame_id, "%s", a->frame_id);
    int64_t t0 = ferry_now().ns;
    err = ferry_image_publish(pub, &img);
    cli_lat_add(calls, ferry_now().ns - t0);
    if (err != FERRY_OK) {
        ferry_err rel = ferry_image_loan_release(pub, &img);

        if (rel != FERRY_OK)
            return rel;
    }
    return err;
}

/* The calibration of an image of a->width x a->height just published with stamp: an ideal
 * pinhole (fx = fy = width, principal point at the centre), plumb_bob without distortion. */
static ferry_err publish_camera_info(ferry_publisher *pub, const pub_args *a, ferry_stamp stamp)
{
    double w = (double)a->width, cx = w / 2.0, cy = (double)a->height / 2.0;
    ferry_camera_info_header *h;
    ferry_camera_info ci;
    ferry_err err;

    err = ferry_camera_info_loan(pub, &ci);
    if (err != FERRY_OK)
        return err;
    h = ci.header;
    h->width = a->width;
    h->height = a->height;
    h->stamp = stamp;
    snprintf(h->frame_id, sizeof h->frame_id, "%s", a->frame_id);
    snprintf(h->distortion_model, sizeof h->distortion_model, "plumb_bob");
    h->d_count = 5;
    h->k[0] = w;
    h->k[2] = cx;
    h->k[4] = w;
    h->k[5] = cy;
    h->k[8] = 1.0;
    h->r[0] = h->r[4] = h->r[8] = 1.0;
    h->p[0] = w;
    h->p[2] = cx;
    h->p[5] = w;
    h->p[6] = cy;
    h->p[10] = 1.0;
    err = ferry_camera_info_publish(pub, &ci);
    if (err != FERRY_OK) {
        ferry_err rel = ferry_camera_info_loan_release(pub, &ci);

        if (rel != FERRY_OK)
            return rel;
    }
    return err;
}

/* A LiDAR-like cloud: x y z intensity, float32 each. The point bytes are a synthetic frame, so
 * the floats are arbitrary bit patterns (NaN among them): is_dense stays 0. */
static ferry_err publish_cloud(ferry_publisher *pub, const pub_args *a, uint64_t sequence,
                               cli_lat *calls)
{
    static const char *const names[4] = {"x", "y", "z", "intensity"};
    ferry_point_field fields[4];
    struct timespec now;
    ferry_pointcloud pc;
    ferry_err err;
    uint32_t i;

    memset(fields, 0, sizeof fields);
    for (i = 0; i < 4; i++) {
        snprintf(fields[i].name, sizeof fields[i].name, "%s", names[i]);
        fields[i].offset = 4 * i;
        fields[i].datatype = FERRY_POINT_FLOAT32;
        fields[i].count = 1;
    }
    err = ferry_pointcloud_loan(pub, a->width, a->height, fields, 4, CLI_CLOUD_POINT_STEP, &pc);
    if (err != FERRY_OK)
        return err;
    cli_frame_fill(pc.data, pc.data_size, sequence, true);
    clock_gettime(CLOCK_REALTIME, &now);
    pc.header->stamp.sec = (int32_t)now.tv_sec;
    pc.header->stamp.nanosec = (uint32_t)now.tv_nsec;
    pc.header->is_dense = 0;
    snprintf(pc.header->frame_id, sizeof pc.header->frame_id, "%s", a->frame_id);
    int64_t t0 = ferry_now().ns;
    err = ferry_pointcloud_publish(pub, &pc);
    cli_lat_add(calls, ferry_now().ns - t0);
    if (err != FERRY_OK) {
        ferry_err rel = ferry_pointcloud_loan_release(pub, &pc);

        if (rel != FERRY_OK)
            return rel;
    }
    return err;
}

/* Complaints about a full pool or a blocked subscriber can come at the frame rate; say them at
 * most once a second, with the running total. */
typedef struct complaint {
    uint64_t count;
    int64_t last_ns;
} complaint;

typedef struct pub_counts {
    uint64_t published, infos;              /* images or frames; camera infos */
    complaint pool_full, blocked;           /* of the images or frames */
    complaint no_memory;                    /* loans refused for memory (FERRY_ENOMEM) */
    complaint info_pool_full, info_blocked; /* of the camera infos */
    int64_t elapsed_ns;
    cli_lat calls; /* how long each publish call took: what a subscriber costs the publisher */
} pub_counts;

/* Publish calls timed at most: 8 MiB of samples, over an hour at 30 Hz. */
#define CALLS_MAX ((size_t)1 << 20)

static void complain(complaint *c, const char *what, ferry_err err)
{
    int64_t now = ferry_now().ns;

    int e = errno;

    c->count++;
    if (c->count == 1 || now - c->last_ns >= NS_PER_S) {
        cli_fail(CMD, 0, "%s: %s (%s%s%s), %" PRIu64 " so far; going on", what, ferry_strerror(err),
                 ferry_errname(err), err == FERRY_ENOMEM ? ", " : "",
                 err == FERRY_ENOMEM ? cli_memory_why(e) : "", c->count);
        c->last_ns = now;
    }
}

/* Runs housekeeping until the absolute time t_ns, so subscribers can connect meanwhile. With a
 * camera info publisher (info), both are served, in slices so neither waits for long. */
static ferry_err idle_until(ferry_publisher *pub, ferry_publisher *info, int64_t t_ns)
{
    for (;;) {
        int64_t left = t_ns - ferry_now().ns;
        ferry_err err;

        if (left <= 0 || cli_stop_requested)
            return FERRY_OK;
        if (info != NULL) {
            if (left > WAIT_SLICE_NS / 10)
                left = WAIT_SLICE_NS / 10;
            err = ferry_publisher_poll(info, 0);
            if (err != FERRY_OK)
                return err;
        }
        err = ferry_publisher_poll(pub, left);
        if (err != FERRY_OK)
            return err;
    }
}

/* What publish_loop counts. */

/* A published image's camera info on info (NULL without --camera-info): 0, or the exit status
 * after a message. A full pool or a blocked subscriber there skips this one only. */
static int follow_image(ferry_publisher *info, const pub_args *a, ferry_stamp stamp, pub_counts *c)
{
    ferry_err err;

    if (info == NULL)
        return 0;
    err = publish_camera_info(info, a, stamp);
    if (err == FERRY_OK)
        c->infos++;
    else if (err == FERRY_EPOOL)
        complain(&c->info_pool_full, "no chunk to loan for a camera info", err);
    else if (err == FERRY_ETIMEDOUT)
        complain(&c->info_blocked, "a blocking camera info subscriber stayed full", err);
    else
        return cli_fail_err(CMD, 1, err, "publishing a camera info");
    return 0;
}

static int publish_loop(ferry_publisher *pub, ferry_publisher *info, const pub_args *a,
                        pub_counts *c)
{
    uint64_t *published = &c->published;
    complaint *pool_full = &c->pool_full, *blocked = &c->blocked;
    int64_t *elapsed_ns = &c->elapsed_ns;
    int64_t period = a->rate > 0.0 ? (int64_t)((double)NS_PER_S / a->rate) : 0;
    int64_t start = ferry_now().ns, next = start;
    uint64_t frames = 0;
    ferry_err err;

    /* --count counts frame slots, published or not, so a pool that stays exhausted (history
     * holding every chunk) cannot keep the command running for ever. */
    while (!cli_stop_requested && (a->o.count == 0 || frames < a->o.count)) {
        void *payload = NULL;
        ferry_stamp stamp = {0, 0};

        frames++;

        if (a->width != 0) {
            /* An image or a cloud: ETIMEDOUT comes from a blocking subscriber (the pool errors
             * at once). */
            err = a->cloud ? publish_cloud(pub, a, *published + 1, &c->calls)
                           : publish_image(pub, a, *published + 1, &stamp, &c->calls);
            if (err == FERRY_OK) {
                (*published)++;
                if (follow_image(info, a, stamp, c) != 0) {
                    *elapsed_ns = ferry_now().ns - start;
                    return 1;
                }
            } else if (err == FERRY_EPOOL) {
                complain(pool_full, "no chunk to loan", err);
            } else if (err == FERRY_ENOMEM) {
                complain(&c->no_memory, "no memory for a new chunk", err);
            } else if (err == FERRY_ETIMEDOUT) {
                complain(blocked, "a blocking subscriber stayed full", err);
            } else {
                *elapsed_ns = ferry_now().ns - start;
                return cli_fail_err(CMD, 1, err, "publishing %s",
                                    a->cloud ? "a cloud" : "an image");
            }
        } else {
            err = ferry_loan(pub, a->size, &payload);
            if (err == FERRY_EPOOL || err == FERRY_ETIMEDOUT) {
                complain(pool_full, "no chunk to loan", err);
            } else if (err == FERRY_ENOMEM) {
                complain(&c->no_memory, "no memory for a new chunk", err);
            } else if (err != FERRY_OK) {
                *elapsed_ns = ferry_now().ns - start;
                return cli_fail_err(CMD, 1, err, "ferry_loan");
            } else {
                cli_frame_fill(payload, a->size, *published + 1, true);
                int64_t t0 = ferry_now().ns;
                err = ferry_publish(pub, payload, 0);
                cli_lat_add(&c->calls, ferry_now().ns - t0);
                if (err == FERRY_OK) {
                    (*published)++;
                } else {
                    ferry_err rel = ferry_loan_release(pub, payload);

                    if (err != FERRY_ETIMEDOUT) {
                        *elapsed_ns = ferry_now().ns - start;
                        return cli_fail_err(CMD, 1, err, "ferry_publish");
                    }
                    complain(blocked, "a blocking subscriber stayed full", err);
                    if (rel != FERRY_OK) {
                        *elapsed_ns = ferry_now().ns - start;
                        return cli_fail_err(CMD, 1, rel, "ferry_loan_release");
                    }
                }
            }
        }
        if (a->o.count != 0 && frames >= a->o.count)
            break;
        if (period > 0) {
            int64_t now = ferry_now().ns;

            next += period;
            /* After a stall, keep the rate rather than bursting to catch up. */
            if (now - next > period)
                next = now;
            err = idle_until(pub, info, next);
            if (err != FERRY_OK) {
                *elapsed_ns = ferry_now().ns - start;
                return cli_fail_err(CMD, 1, err, "ferry_publisher_poll");
            }
        }
    }
    *elapsed_ns = ferry_now().ns - start;
    return 0;
}

static int wait_subscribers(ferry_publisher *pub, uint32_t n)
{
    if (n == 0)
        return 0;
    if (isatty(STDERR_FILENO))
        fprintf(stderr, "ferry pub: waiting for %" PRIu32 " subscriber%s\n", n, n == 1 ? "" : "s");
    while (!cli_stop_requested) {
        ferry_err err = ferry_publisher_wait_subscribers(pub, n, WAIT_SLICE_NS);

        if (err == FERRY_OK)
            return 0;
        if (err != FERRY_ETIMEDOUT)
            return cli_fail_err(CMD, 1, err, "ferry_publisher_wait_subscribers");
    }
    return 0;
}

static int run(pub_args *ap)
{
    ferry_publisher_options o;
    ferry_publisher_stats st;
    ferry_publisher *pub = NULL, *info = NULL;
    ferry_node *node = NULL;
    const char *type_name = CLI_FRAME_TYPE;
    uint64_t type_hash = ferry_hash(CLI_FRAME_TYPE);
    pub_counts c;
    ferry_err err;
    pub_args a = *ap;
    int status;

    if (ferry_topic_validate(a.topic) != FERRY_OK)
        return cli_fail(CMD, 2, "invalid topic name '%s'", a.topic);

    ferry_publisher_options_init(&o);
    if (o.max_sample_size < a.size)
        o.max_sample_size = a.size;
    if (a.pool != 0)
        o.pool_bytes = a.pool;
    else if (a.size <= SIZE_MAX / 4 && o.pool_bytes < 4 * a.size)
        o.pool_bytes = 4 * a.size;
    o.history = (uint32_t)a.history;
    if (a.chunks != 0)
        o.max_chunks = (uint32_t)a.chunks;
    o.max_chunks_per_subscriber = (uint32_t)a.share;
    o.max_bytes_per_subscriber = a.share_bytes;
    o.admit_blocking = a.admit_blocking;
    o.huge_pages = a.huge_pages;
    /* Room for every subscriber waited for, or the wait could never end. */
    if (o.max_subscribers < a.wait_subscribers)
        o.max_subscribers = (uint32_t)a.wait_subscribers;

    cli_stop_on_signals();
    if (cli_node(&a.o.where, CMD, &node) != FERRY_OK)
        return 1;
    if (a.cloud) {
        type_name = FERRY_POINTCLOUD_TYPE_NAME;
        type_hash = FERRY_POINTCLOUD_TYPE_HASH;
    } else if (a.width != 0) {
        type_name = FERRY_IMAGE_TYPE_NAME;
        type_hash = FERRY_IMAGE_TYPE_HASH;
    }
    err = ferry_publisher_create(&pub, node, a.topic, type_name, type_hash, &o);
    if (err != FERRY_OK) {
        status = cli_endpoint_fail(CMD, &a.o.where, "publish on", a.topic, type_name, type_hash,
                                   err, errno);
        ferry_node_destroy(node);
        return status;
    }
    if (a.camera_info) {
        ferry_publisher_options io;

        /* Small samples; the image's history and subscriber room, so late joiners and every
         * subscriber waited for get both. */
        ferry_publisher_options_init(&io);
        io.history = o.history;
        if (a.chunks != 0)
            io.max_chunks = o.max_chunks;
        io.admit_blocking = o.admit_blocking;
        if (io.max_subscribers < o.max_subscribers)
            io.max_subscribers = o.max_subscribers;
        err = ferry_publisher_create(&info, node, a.info_topic, FERRY_CAMERA_INFO_TYPE_NAME,
                                     FERRY_CAMERA_INFO_TYPE_HASH, &io);
        if (err != FERRY_OK) {
            status = cli_endpoint_fail(CMD, &a.o.where, "publish camera infos on", a.info_topic,
                                       FERRY_CAMERA_INFO_TYPE_NAME, FERRY_CAMERA_INFO_TYPE_HASH,
                                       err, errno);
            ferry_publisher_destroy(pub);
            ferry_node_destroy(node);
            return status;
        }
    }
    if (isatty(STDERR_FILENO))
        fprintf(stderr, "ferry pub: %zu-byte frames on %s at %g Hz; Ctrl-C stops\n", a.size,
                a.topic, a.rate);

    memset(&c, 0, sizeof c);
    /* Without room for the samples the calls are not timed; publishing goes on. */
    if (!cli_lat_init(&c.calls,
                      a.o.count != 0 && a.o.count < CALLS_MAX ? (size_t)a.o.count : CALLS_MAX))
        cli_lat_init(&c.calls, 0);
    status = wait_subscribers(pub, (uint32_t)a.wait_subscribers);
    if (status == 0)
        status = publish_loop(pub, info, &a, &c);

    memset(&st, 0, sizeof st);
    err = ferry_publisher_stats_get(pub, &st);
    if (err != FERRY_OK && status == 0)
        status = cli_fail_err(CMD, 1, err, "ferry_publisher_stats_get");
    printf("ferry pub: %s: published %" PRIu64 " frames of %zu bytes in %.3f s (%.2f Hz), "
           "dropped %" PRIu64 ", pool exhausted %" PRIu64 ", blocked %" PRIu64
           ", subscribers %" PRIu32 "\n",
           a.topic, c.published, a.size, (double)c.elapsed_ns / 1e9,
           c.elapsed_ns > 0 && c.published > 1
               ? (double)(c.published - 1) * 1e9 / (double)c.elapsed_ns
               : 0.0,
           st.dropped, c.pool_full.count, c.blocked.count, st.subscribers);
    if (c.no_memory.count > 0)
        printf("ferry pub: %s: %" PRIu64 " frames not published for want of memory\n", a.topic,
               c.no_memory.count);
    if (c.calls.count > 0) {
        size_t n = c.calls.count;
        int64_t max = cli_lat_max(&c.calls);

        printf("ferry pub: %s: publish call p50 %.1f us, p99 %.1f us, max %.1f us (%zu calls)\n",
               a.topic, (double)cli_lat_pct(&c.calls, 50.0) / 1e3,
               (double)cli_lat_pct(&c.calls, 99.0) / 1e3, (double)max / 1e3, n);
    }
    cli_lat_free(&c.calls);
    if (info != NULL) {
        memset(&st, 0, sizeof st);
        err = ferry_publisher_stats_get(info, &st);
        if (err != FERRY_OK && status == 0)
            status = cli_fail_err(CMD, 1, err, "ferry_publisher_stats_get");
        printf("ferry pub: %s: published %" PRIu64 " camera infos, dropped %" PRIu64
               ", pool exhausted %" PRIu64 ", blocked %" PRIu64 ", subscribers %" PRIu32 "\n",
               a.info_topic, c.infos, st.dropped, c.info_pool_full.count, c.info_blocked.count,
               st.subscribers);
    }
    fflush(stdout);

    if (info != NULL) {
        err = ferry_publisher_destroy(info);
        if (err != FERRY_OK && status == 0)
            status = cli_fail_err(CMD, 1, err, "ferry_publisher_destroy");
    }

    err = ferry_publisher_destroy(pub);
    if (err != FERRY_OK && status == 0)
        status = cli_fail_err(CMD, 1, err, "ferry_publisher_destroy");
    err = ferry_node_destroy(node);
    if (err != FERRY_OK && status == 0)
        status = cli_fail_err(CMD, 1, err, "ferry_node_destroy");
    return status;
}

int ferry_cmd_pub(int argc, char **argv)
{
    pub_args a;
    int status = parse_args(argc, argv, &a);

    if (status < 0)
        status = run(&a);
    cli_image_file_free(&a.file);
    return status;
}
