/*
 * fusion: a sensor-fusion node. Subscribes to a camera and a lidar topic and pairs their frames
 * by acquisition stamp with the approximate-time synchroniser (ferry/sync.h), the policy of ROS
 * message_filters. Prints each pair and its skew; exits after PAIRS pairs, or with status 1
 * when nothing arrives for 5 s.
 *
 *   fusion IMAGE_TOPIC CLOUD_TOPIC PAIRS     (with camera_pub and lidar_pub on those topics)
 */
#include <ferry/ferry.h>
#include <ferry/msg.h>
#include <ferry/sync.h>

#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        ferry_err err_ = (call);                                                                   \
        if (err_ != FERRY_OK) {                                                                    \
            fprintf(stderr, "fusion: %s: %s\n", #call, ferry_strerror(err_));                      \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static int64_t to_ns(ferry_stamp t)
{
    return (int64_t)t.sec * 1000000000 + t.nanosec;
}

/* The synchroniser's clock: the stamp in the frame's header (index 0 images, 1 clouds). A frame
 * that is not valid gets 0, so far from the others that max_interval_ns never lets it pair. */
static int64_t frame_stamp(void *arg, uint32_t index, const ferry_sample *s)
{
    (void)arg;
    ferry_image_view iv;
    ferry_pointcloud_view pv;
    if (index == 0)
        return ferry_image_view_get(s, &iv) == FERRY_OK ? to_ns(iv.header.stamp) : 0;
    return ferry_pointcloud_view_get(s, &pv) == FERRY_OK ? to_ns(pv.header.stamp) : 0;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: fusion IMAGE_TOPIC CLOUD_TOPIC PAIRS\n");
        return 2;
    }
    unsigned long pairs = strtoul(argv[3], NULL, 10);

    ferry_node_options no;
    ferry_node_options_init(&no);
    no.dir = getenv("FERRY_DIR");
    no.name = "fusion";
    ferry_node *node;
    CHECK(ferry_node_create(&node, &no));
    ferry_subscriber *subs[2];
    CHECK(ferry_subscriber_create(&subs[0], node, argv[1], FERRY_IMAGE_TYPE_NAME,
                                  FERRY_IMAGE_TYPE_HASH, NULL));
    CHECK(ferry_subscriber_create(&subs[1], node, argv[2], FERRY_POINTCLOUD_TYPE_NAME,
                                  FERRY_POINTCLOUD_TYPE_HASH, NULL));

    ferry_sync_options o;
    ferry_sync_options_init(&o);
    o.max_interval_ns = 20 * 1000000; /* a 30 fps camera is never more than 16.7 ms away */
    o.stamp = frame_stamp;
    o.node = node; /* lets ferry_sync_wait wait on both subscribers */
    ferry_sync *sync;
    CHECK(ferry_sync_create(&sync, subs, 2, &o));

    unsigned long matched = 0;
    int64_t worst = 0;
    while (matched < pairs) {
        CHECK(ferry_sync_wait(sync, 5 * 1000000000LL));
        ferry_sample set[2]; /* set[0] from subs[0], set[1] from subs[1] */
        while (matched < pairs && ferry_sync_take(sync, set) == FERRY_OK) {
            int64_t skew = frame_stamp(NULL, 0, &set[0]) - frame_stamp(NULL, 1, &set[1]);
            if (skew < 0)
                skew = -skew;
            if (skew > worst)
                worst = skew;
            printf("pair %lu: image %llu + cloud %llu, skew %.3f ms\n", ++matched,
                   (unsigned long long)set[0].sequence, (unsigned long long)set[1].sequence,
                   (double)skew / 1e6);
            CHECK(ferry_sync_release(sync, set));
        }
    }

    ferry_sync_stats st;
    CHECK(ferry_sync_stats_get(sync, &st));
    printf("fusion: %lu pairs, max skew %.3f ms; discarded %llu images, %llu clouds\n", matched,
           (double)worst / 1e6, (unsigned long long)st.discarded[0],
           (unsigned long long)st.discarded[1]);
    CHECK(ferry_sync_destroy(sync)); /* before its subscribers */
    CHECK(ferry_subscriber_destroy(subs[1]));
    CHECK(ferry_subscriber_destroy(subs[0]));
    CHECK(ferry_node_destroy(node));
    return 0;
}
