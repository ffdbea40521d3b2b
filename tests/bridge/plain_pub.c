/*
 * A plain Cyclone DDS publisher that acts as a ROS 2 camera: sensor_msgs/Image on a DDS topic
 * ("rt/...") with ROS 2's default publisher QoS (reliable, keep last 10, volatile, XCDR1), pixels
 * that are synthetic frames (pattern.h) so that `ferry echo --verify` on the far side of a
 * bridge checks them. Links no ferry code. Waits up to 10 s for a matching reader first.
 *
 * With --cloud it acts as a ROS 2 LiDAR driver instead: sensor_msgs/PointCloud2 of HEIGHT rows
 * of WIDTH points, fields x y z intensity (float32, offsets 0 4 8 12, count 1), point_step 16,
 * with ROS 2's sensor-data QoS (best effort, keep last 5, volatile). The point bytes are a
 * synthetic frame, so the floats are arbitrary bit patterns and is_dense is false.
 *
 * usage: bridge_plain_pub [--cloud] TOPIC WIDTH HEIGHT FRAME_ID COUNT RATE_HZ [DOMAIN]
 */
#include "pattern.h"
#include "ros2_image_types.h"

#include <dds/dds.h>

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

static dds_return_t write_cloud(dds_entity_t wr, unsigned char *points, uint32_t width,
                                uint32_t height, char *frame_id, int64_t wall)
{
    static char *const names[4] = {"x", "y", "z", "intensity"};
    sensor_msgs_msg_dds__PointField_ fields[4];
    sensor_msgs_msg_dds__PointCloud2_ pc;
    uint32_t i;

    memset(&pc, 0, sizeof pc);
    for (i = 0; i < 4; i++) {
        fields[i].name_ = names[i];
        fields[i].offset_ = 4 * i;
        fields[i].datatype_ = 7; /* PointField.FLOAT32 */
        fields[i].count_ = 1;
    }
    pc.header_.stamp_.sec_ = (int32_t)(wall / 1000000000);
    pc.header_.stamp_.nanosec_ = (uint32_t)(wall % 1000000000);
    pc.header_.frame_id_ = frame_id;
    pc.height_ = height;
    pc.width_ = width;
    pc.fields_._buffer = fields;
    pc.fields_._length = pc.fields_._maximum = 4;
    pc.fields_._release = false;
    pc.is_bigendian_ = false;
    pc.point_step_ = 16;
    pc.row_step_ = width * 16;
    pc.data_._buffer = points;
    pc.data_._length = pc.data_._maximum = width * 16 * height;
    pc.data_._release = false;
    pc.is_dense_ = false;
    return dds_write(wr, &pc);
}

int main(int argc, char **argv)
{
    sensor_msgs_msg_dds__Image_ m;
    bool cloud = argc > 1 && strcmp(argv[1], "--cloud") == 0;
    size_t bytes;
    dds_publication_matched_status_t st;
    uint32_t width, height, domain = 0;
    long count, i, written = 0;
    dds_entity_t pp, tp, wr;
    double rate;
    int64_t next, waited;
    unsigned char *pixels;
    dds_qos_t *q;

    if (cloud) {
        argv++;
        argc--;
    }
    if (argc < 7) {
        fprintf(stderr, "usage: %s [--cloud] TOPIC WIDTH HEIGHT FRAME_ID COUNT RATE_HZ [DOMAIN]\n",
                argv[0]);
        return 2;
    }
    width = (uint32_t)strtoul(argv[2], NULL, 10);
    height = (uint32_t)strtoul(argv[3], NULL, 10);
    count = strtol(argv[5], NULL, 10);
    rate = atof(argv[6]);
    if (argc > 7)
        domain = (uint32_t)strtoul(argv[7], NULL, 10);
    bytes = (size_t)width * (cloud ? 16 : 3) * height;
    if (width == 0 || height == 0 || rate <= 0 || bytes < 64)
        return 2;
    pixels = malloc(bytes);
    if (pixels == NULL)
        return 2;

    pp = dds_create_participant(domain, NULL, NULL);
    tp = dds_create_topic(
        pp, cloud ? &sensor_msgs_msg_dds__PointCloud2__desc : &sensor_msgs_msg_dds__Image__desc,
        argv[1], NULL, NULL);
    q = dds_create_qos();
    if (cloud) {
        dds_qset_reliability(q, DDS_RELIABILITY_BEST_EFFORT, 0);
        dds_qset_history(q, DDS_HISTORY_KEEP_LAST, 5);
    } else {
        dds_qset_reliability(q, DDS_RELIABILITY_RELIABLE, DDS_MSECS(500));
        dds_qset_history(q, DDS_HISTORY_KEEP_LAST, 10);
    }
    {
        dds_data_representation_id_t rep = DDS_DATA_REPRESENTATION_XCDR1;

        dds_qset_data_representation(q, 1, &rep);
    }
    wr = dds_create_writer(pp, tp, q, NULL);
    dds_delete_qos(q);
    if (pp < 0 || tp < 0 || wr < 0) {
        fprintf(stderr, "plain_pub: cannot create the writer\n");
        return 1;
    }
    for (waited = 0; waited < 100; waited++) {
        if (dds_get_publication_matched_status(wr, &st) == DDS_RETCODE_OK && st.current_count > 0)
            break;
        dds_sleepfor(DDS_MSECS(100));
    }
    /* Discovery of the reader's side completes a little after the match. */
    dds_sleepfor(DDS_MSECS(300));

    next = now_ns(CLOCK_MONOTONIC);
    for (i = 1; i <= count; i++) {
        int64_t wall = now_ns(CLOCK_REALTIME);

        pat_fill(pixels, bytes, (uint64_t)i, now_ns(CLOCK_MONOTONIC));
        if (cloud) {
            if (write_cloud(wr, pixels, width, height, argv[4], wall) == DDS_RETCODE_OK)
                written++;
        } else {
            memset(&m, 0, sizeof m);
            m.header_.stamp_.sec_ = (int32_t)(wall / 1000000000);
            m.header_.stamp_.nanosec_ = (uint32_t)(wall % 1000000000);
            m.header_.frame_id_ = argv[4];
            m.height_ = height;
            m.width_ = width;
            m.encoding_ = "rgb8";
            m.is_bigendian_ = 0;
            m.step_ = width * 3;
            m.data_._buffer = pixels;
            m.data_._length = m.data_._maximum = width * 3 * height;
            m.data_._release = false;
            if (dds_write(wr, &m) == DDS_RETCODE_OK)
                written++;
        }
        next += (int64_t)(1e9 / rate);
        {
            int64_t left = next - now_ns(CLOCK_MONOTONIC);

            if (left > 0)
                dds_sleepfor(left);
        }
    }
    /* Let the reliable protocol deliver the last frames before the writer goes. */
    dds_sleepfor(DDS_MSECS(500));
    printf("plain_pub: %s: written %ld of %ld\n", argv[1], written, count);
    dds_delete(pp);
    free(pixels);
    return written == count ? 0 : 1;
}
