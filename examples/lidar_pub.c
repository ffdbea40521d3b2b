/*
 * lidar_pub: a minimal point-cloud publisher, the camera's partner in the fusion example.
 * Loans a cloud of 16 rings x 1024 points (x, y, z, intensity as float32), fills, stamps and
 * publishes it at 10 Hz.
 *
 *   lidar_pub TOPIC FRAMES         e.g. lidar_pub /lidar/top/points 100
 *
 * Waits up to 10 s for a subscriber before the first cloud. FERRY_DIR as for camera_pub.
 */
#include <ferry/ferry.h>
#include <ferry/msg.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        ferry_err err_ = (call);                                                                   \
        if (err_ != FERRY_OK) {                                                                    \
            fprintf(stderr, "lidar_pub: %s: %s\n", #call, ferry_strerror(err_));                   \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define RINGS 16u
#define POINTS_PER_RING 1024u
#define PERIOD_NS (1000000000L / 10)

static const ferry_point_field fields[] = {
    {.name = "x", .offset = 0, .datatype = FERRY_POINT_FLOAT32, .count = 1},
    {.name = "y", .offset = 4, .datatype = FERRY_POINT_FLOAT32, .count = 1},
    {.name = "z", .offset = 8, .datatype = FERRY_POINT_FLOAT32, .count = 1},
    {.name = "intensity", .offset = 12, .datatype = FERRY_POINT_FLOAT32, .count = 1},
};

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: lidar_pub TOPIC FRAMES\n");
        return 2;
    }
    unsigned frames = (unsigned)strtoul(argv[2], NULL, 10);

    ferry_node_options no;
    ferry_node_options_init(&no);
    no.dir = getenv("FERRY_DIR");
    no.name = "lidar_pub";
    ferry_node *node;
    CHECK(ferry_node_create(&node, &no));
    ferry_publisher *pub;
    CHECK(ferry_publisher_create(&pub, node, argv[1], FERRY_POINTCLOUD_TYPE_NAME,
                                 FERRY_POINTCLOUD_TYPE_HASH, NULL));
    CHECK(ferry_publisher_wait_subscribers(pub, 1, 10 * 1000000000LL));

    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    for (unsigned i = 0; i < frames; i++) {
        ferry_pointcloud pc;
        /* height RINGS rows of POINTS_PER_RING points; point_step 0: packed, 16 bytes */
        CHECK(ferry_pointcloud_loan(pub, POINTS_PER_RING, RINGS, fields, 4, 0, &pc));
        float *p = pc.data;
        for (uint32_t r = 0; r < RINGS; r++)
            for (uint32_t k = 0; k < POINTS_PER_RING; k++, p += 4) {
                p[0] = (float)k * 0.01f;
                p[1] = (float)r * 0.1f;
                p[2] = (float)i * 0.001f;
                p[3] = 1.0f;
            }
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        pc.header->stamp =
            (ferry_stamp){.sec = (int32_t)now.tv_sec, .nanosec = (uint32_t)now.tv_nsec};
        snprintf(pc.header->frame_id, sizeof pc.header->frame_id, "lidar");
        pc.header->is_dense = 1;
        CHECK(ferry_pointcloud_publish(pub, &pc));

        next.tv_nsec += PERIOD_NS;
        if (next.tv_nsec >= 1000000000L) {
            next.tv_nsec -= 1000000000L;
            next.tv_sec++;
        }
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
    }

    printf("lidar_pub: published %u clouds\n", frames);
    CHECK(ferry_publisher_destroy(pub));
    CHECK(ferry_node_destroy(node));
    return 0;
}
