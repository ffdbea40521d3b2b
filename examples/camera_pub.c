/*
 * camera_pub: a minimal camera publisher. Loans a 1280x720 rgb8 image, draws into it, stamps it
 * and publishes it at 30 fps: the frame is written once, in shared memory, and never copied.
 *
 *   camera_pub TOPIC FRAMES        e.g. camera_pub /camera/front/image_raw 300
 *
 * Waits up to 10 s for a subscriber before the first frame. FERRY_DIR, when set, is the
 * domain directory's root (as for the ferry CLI).
 */
#include <ferry/ferry.h>
#include <ferry/msg.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        ferry_err err_ = (call);                                                                   \
        if (err_ != FERRY_OK) {                                                                    \
            fprintf(stderr, "camera_pub: %s: %s\n", #call, ferry_strerror(err_));                  \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define WIDTH 1280u
#define HEIGHT 720u
#define PERIOD_NS (1000000000L / 30)

/* A moving gradient: every row one grey level, shifted by one per frame. */
static void draw(ferry_image *img, unsigned frame)
{
    unsigned char *row = img->data;
    for (uint32_t y = 0; y < img->header->height; y++, row += img->header->step)
        memset(row, (int)((y + frame) & 0xff), (size_t)img->header->width * 3);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: camera_pub TOPIC FRAMES\n");
        return 2;
    }
    unsigned frames = (unsigned)strtoul(argv[2], NULL, 10);

    ferry_node_options no;
    ferry_node_options_init(&no);
    no.dir = getenv("FERRY_DIR"); /* NULL: the default, /dev/shm/ferry-<uid> */
    no.name = "camera_pub";
    ferry_node *node;
    CHECK(ferry_node_create(&node, &no));

    ferry_publisher *pub;
    CHECK(ferry_publisher_create(&pub, node, argv[1], FERRY_IMAGE_TYPE_NAME, FERRY_IMAGE_TYPE_HASH,
                                 NULL));
    /* Frames published before anyone listens go nowhere; the wait also accepts subscribers. */
    CHECK(ferry_publisher_wait_subscribers(pub, 1, 10 * 1000000000LL));

    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    for (unsigned i = 0; i < frames; i++) {
        ferry_image img;
        CHECK(ferry_image_loan(pub, WIDTH, HEIGHT, "rgb8", 0, &img)); /* 0: minimum step */
        draw(&img, i);
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now); /* acquisition time, as ROS stamps it */
        img.header->stamp =
            (ferry_stamp){.sec = (int32_t)now.tv_sec, .nanosec = (uint32_t)now.tv_nsec};
        snprintf(img.header->frame_id, sizeof img.header->frame_id, "camera");
        CHECK(ferry_image_publish(pub, &img)); /* the loan is ferry's now */

        next.tv_nsec += PERIOD_NS;
        if (next.tv_nsec >= 1000000000L) {
            next.tv_nsec -= 1000000000L;
            next.tv_sec++;
        }
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
    }

    ferry_publisher_stats st;
    CHECK(ferry_publisher_stats_get(pub, &st));
    printf("camera_pub: published %llu frames, %llu dropped, %llu bytes copied\n",
           (unsigned long long)st.published, (unsigned long long)st.dropped,
           (unsigned long long)st.bytes_copied);
    CHECK(ferry_publisher_destroy(pub));
    CHECK(ferry_node_destroy(node));
    return 0;
}
