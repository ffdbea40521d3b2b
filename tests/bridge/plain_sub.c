/*
 * A plain Cyclone DDS subscriber, as a ROS 2 node's would be: reads sensor_msgs/Image on a DDS
 * topic ("rt/...") with its own copy of the ROS 2 types and checks every field of every sample:
 * geometry, encoding, step, endianness, stamp (near the wall clock, never going back), frame_id,
 * and the pixel bytes (a synthetic frame: header, checksum, every pattern word). Links no ferry
 * code. Prints "seq=N" per good sample and a summary with the latency from the frame's send time
 * (CLOCK_MONOTONIC: same host only). COUNT > 0: exit 0 once COUNT good samples came with none
 * bad; COUNT < 0: listen until the timeout and exit 0 when none was bad and no sequence came
 * twice (the test counts the lines). 1 otherwise, 2 on usage.
 *
 * With --cloud it reads sensor_msgs/PointCloud2 instead, as `ferry pub --cloud` sends them
 * (WIDTH x HEIGHT points, ENCODING "xyzi": fields x y z intensity, float32 at offsets 0 4 8 12,
 * count 1, point_step 16, row_step WIDTH * 16, little endian, not dense) and checks every field
 * of the message and every descriptor of fields, then the point bytes as a synthetic frame.
 *
 * --depth N keeps the last N samples in the reader's history instead of ROS 2's default 10: a
 * reader that falls further behind than its history loses samples in its own cache, which says
 * nothing about the writer. --keep-all N keeps every sample instead, at most N untaken: a reader
 * that falls behind makes a reliable writer wait (flow control) and loses nothing, so that what
 * it misses is the writer's loss. SIGTERM or SIGINT ends the wait early, with the summary; the
 * summary also gives the reader's SAMPLE_LOST count (samples DDS knows it never delivered).
 *
 * usage: bridge_plain_sub [--cloud] [--depth N | --keep-all N] TOPIC WIDTH HEIGHT ENCODING
 *                         FRAME_ID COUNT TIMEOUT_S [DOMAIN]
 */
#include "pattern.h"
#include "ros2_image_types.h"

#include <dds/dds.h>

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int64_t now_ns(clockid_t c)
{
    struct timespec ts;

    clock_gettime(c, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

/* Why the cloud m is not what `ferry pub --cloud WIDTHxHEIGHT` sends, or NULL. */
static const char *cloud_wrong(const sensor_msgs_msg_dds__PointCloud2_ *m, uint32_t width,
                               uint32_t height)
{
    static const char *const names[4] = {"x", "y", "z", "intensity"};
    uint32_t i;

    if (m->width_ != width || m->height_ != height)
        return "geometry";
    if (m->fields_._length != 4 || m->fields_._buffer == NULL)
        return "number of fields";
    for (i = 0; i < 4; i++) {
        const sensor_msgs_msg_dds__PointField_ *f = &m->fields_._buffer[i];

        if (f->name_ == NULL || strcmp(f->name_, names[i]) != 0)
            return "field name";
        if (f->offset_ != 4 * i)
            return "field offset";
        if (f->datatype_ != 7)
            return "field datatype (FLOAT32 = 7)";
        if (f->count_ != 1)
            return "field count";
    }
    if (m->is_bigendian_)
        return "is_bigendian";
    if (m->point_step_ != 16)
        return "point_step";
    if (m->row_step_ != width * 16)
        return "row_step";
    if (m->is_dense_)
        return "is_dense";
    if (m->data_._length != (uint64_t)m->row_step_ * height)
        return "data length";
    return NULL;
}

static uint32_t bytes_per_pixel(const char *enc)
{
    if (strcmp(enc, "rgb8") == 0 || strcmp(enc, "bgr8") == 0)
        return 3;
    if (strcmp(enc, "rgba8") == 0 || strcmp(enc, "bgra8") == 0)
        return 4;
    if (strcmp(enc, "mono8") == 0)
        return 1;
    if (strcmp(enc, "mono16") == 0)
        return 2;
    return 0;
}

int main(int argc, char **argv)
{
    const char *topic, *encoding, *frame_id;
    bool cloud = false, keep_all = false;
    int depth = 10;
    dds_sample_lost_status_t lost = {0, 0};
    uint32_t width, height, domain = 0, bpp;
    long count, good = 0, bad = 0, dup = 0;
    static unsigned char seen[1 << 16];
    static int64_t lat[1 << 16];
    size_t nlat = 0;
    int64_t deadline, last_stamp = 0;
    dds_entity_t pp, tp, rd, ws;
    dds_qos_t *q;

    while (argc > 1 && strncmp(argv[1], "--", 2) == 0) {
        if (strcmp(argv[1], "--cloud") == 0) {
            cloud = true;
        } else if ((strcmp(argv[1], "--depth") == 0 || strcmp(argv[1], "--keep-all") == 0) &&
                   argc > 2 && atoi(argv[2]) > 0) {
            keep_all = strcmp(argv[1], "--keep-all") == 0;
            depth = atoi(argv[2]);
            argv++;
            argc--;
        } else {
            fprintf(stderr, "plain_sub: bad option %s\n", argv[1]);
            return 2;
        }
        argv++;
        argc--;
    }
    if (argc < 8) {
        fprintf(stderr,
                "usage: %s [--cloud] [--depth N | --keep-all N] TOPIC WIDTH HEIGHT ENCODING "
                "FRAME_ID COUNT TIMEOUT_S [DOMAIN]\n",
                argv[0]);
        return 2;
    }
    topic = argv[1];
    width = (uint32_t)strtoul(argv[2], NULL, 10);
    height = (uint32_t)strtoul(argv[3], NULL, 10);
    encoding = argv[4];
    frame_id = argv[5];
    count = strtol(argv[6], NULL, 10);
    deadline = now_ns(CLOCK_MONOTONIC) + (int64_t)(atof(argv[7]) * 1e9);
    if (argc > 8)
        domain = (uint32_t)strtoul(argv[8], NULL, 10);
    bpp = cloud ? (strcmp(encoding, "xyzi") == 0 ? 16 : 0) : bytes_per_pixel(encoding);
    if (bpp == 0) {
        fprintf(stderr, "plain_sub: unknown encoding %s\n", encoding);
        return 2;
    }

    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    pp = dds_create_participant(domain, NULL, NULL);
    if (pp < 0) {
        fprintf(stderr, "plain_sub: dds_create_participant: %s\n", dds_strretcode(pp));
        return 1;
    }
    tp = dds_create_topic(
        pp, cloud ? &sensor_msgs_msg_dds__PointCloud2__desc : &sensor_msgs_msg_dds__Image__desc,
        topic, NULL, NULL);
    q = dds_create_qos();
    /* ROS 2's default subscription QoS: reliable, keep last 10 (or --depth), volatile. */
    dds_qset_reliability(q, DDS_RELIABILITY_RELIABLE, DDS_SECS(1));
    if (keep_all) {
        dds_qset_history(q, DDS_HISTORY_KEEP_ALL, 0);
        dds_qset_resource_limits(q, depth, DDS_LENGTH_UNLIMITED, depth);
    } else {
        dds_qset_history(q, DDS_HISTORY_KEEP_LAST, depth);
    }
    {
        dds_data_representation_id_t rep = DDS_DATA_REPRESENTATION_XCDR1;

        dds_qset_data_representation(q, 1, &rep);
    }
    rd = dds_create_reader(pp, tp, q, NULL);
    dds_delete_qos(q);
    if (tp < 0 || rd < 0) {
        fprintf(stderr, "plain_sub: cannot create the reader\n");
        return 1;
    }
    ws = dds_create_waitset(pp);
    dds_waitset_attach(ws, dds_create_readcondition(rd, DDS_ANY_STATE), 0);

    while (!stop && (count < 0 || good < count) && now_ns(CLOCK_MONOTONIC) < deadline) {
        void *buf[4] = {NULL};
        dds_sample_info_t info[4];
        dds_return_t n, i;

        dds_waitset_wait(ws, NULL, 0, DDS_MSECS(100));
        n = dds_take(rd, buf, info, 4, 4);
        for (i = 0; i < n; i++) {
            const sensor_msgs_msg_dds__Image_ *m = buf[i];
            const sensor_msgs_msg_dds__PointCloud2_ *pc = buf[i];
            const std_msgs_msg_dds__Header_ *h = cloud ? &pc->header_ : &m->header_;
            const unsigned char *data = cloud ? pc->data_._buffer : m->data_._buffer;
            uint32_t length = cloud ? pc->data_._length : m->data_._length;
            int64_t stamp, wall = now_ns(CLOCK_REALTIME);
            const char *why = NULL;
            uint64_t seq = 0;

            if (!info[i].valid_data)
                continue;
            stamp = (int64_t)h->stamp_.sec_ * 1000000000 + h->stamp_.nanosec_;
            if (cloud)
                why = cloud_wrong(pc, width, height);
            else if (m->width_ != width || m->height_ != height)
                why = "geometry";
            else if (m->encoding_ == NULL || strcmp(m->encoding_, encoding) != 0)
                why = "encoding";
            else if (m->step_ != width * bpp)
                why = "step";
            else if (m->is_bigendian_ != 0)
                why = "is_bigendian";
            else if (m->data_._length != (uint64_t)m->step_ * height)
                why = "data length";
            if (why == NULL && (h->frame_id_ == NULL || strcmp(h->frame_id_, frame_id) != 0))
                why = "frame_id";
            else if (why == NULL &&
                     (h->stamp_.nanosec_ >= 1000000000u || stamp < wall - 120000000000LL ||
                      stamp > wall + 5000000000LL || stamp < last_stamp))
                why = "stamp";
            else if (why == NULL && !pat_verify(data, length, &seq))
                why = "data (checksum or pattern)";
            if (why != NULL) {
                bad++;
                fprintf(stderr, "plain_sub: bad sample: %s\n", why);
            } else {
                uint64_t send_ns;

                good++;
                last_stamp = stamp;
                memcpy(&send_ns, data + 24, sizeof send_ns);
                if (nlat < sizeof lat / sizeof lat[0])
                    lat[nlat++] = now_ns(CLOCK_MONOTONIC) - (int64_t)send_ns;
                if (seen[seq % sizeof seen]++ != 0)
                    dup++;
                printf("seq=%" PRIu64 "\n", seq);
            }
        }
        if (n > 0)
            dds_return_loan(rd, buf, n);
    }
    qsort(lat, nlat, sizeof lat[0], cmp_i64);
    if (dds_get_sample_lost_status(rd, &lost) != DDS_RETCODE_OK)
        lost.total_count = 0;
    printf("plain_sub: %s: good %ld bad %ld dup %ld lost %" PRIu32
           " latency_us p50 %.1f p99 %.1f max %.1f\n",
           topic, good, bad, dup, lost.total_count, nlat ? (double)lat[nlat / 2] / 1e3 : 0.0,
           nlat ? (double)lat[nlat * 99 / 100] / 1e3 : 0.0,
           nlat ? (double)lat[nlat - 1] / 1e3 : 0.0);
    dds_delete(pp);
    if (count < 0)
        return bad == 0 && dup == 0 ? 0 : 1;
    return good >= count && bad == 0 && dup == 0 ? 0 : 1;
}
