/*
 * consumer: a minimal image consumer. Subscribes to an image topic, waits for frames, takes
 * each one (a read-only view of the publisher's memory: no copy), validates it as an image and
 * prints what it holds. Exits after FRAMES frames, or with status 1 when none comes for 5 s.
 *
 *   consumer TOPIC FRAMES [-q]     -q: print only the summary
 */
#include <ferry/ferry.h>
#include <ferry/msg.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        ferry_err err_ = (call);                                                                   \
        if (err_ != FERRY_OK) {                                                                    \
            fprintf(stderr, "consumer: %s: %s\n", #call, ferry_strerror(err_));                    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: consumer TOPIC FRAMES [-q]\n");
        return 2;
    }
    unsigned long frames = strtoul(argv[2], NULL, 10);
    int quiet = argc > 3 && strcmp(argv[3], "-q") == 0;

    ferry_node_options no;
    ferry_node_options_init(&no);
    no.dir = getenv("FERRY_DIR"); /* NULL: the default, /dev/shm/ferry-<uid> */
    no.name = "consumer";
    ferry_node *node;
    CHECK(ferry_node_create(&node, &no));

    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = 4; /* frames queued for us before the publisher drops the oldest */
    ferry_subscriber *sub;
    CHECK(ferry_subscriber_create(&sub, node, argv[1], FERRY_IMAGE_TYPE_NAME, FERRY_IMAGE_TYPE_HASH,
                                  &so));

    unsigned long seen = 0;
    unsigned long long bytes = 0;
    while (seen < frames) {
        CHECK(ferry_wait(sub, 5 * 1000000000LL)); /* FERRY_ETIMEDOUT after 5 s of silence */
        ferry_sample s;
        while (seen < frames && ferry_take(sub, &s) == FERRY_OK) {
            ferry_image_view v;
            ferry_err err = ferry_image_view_get(&s, &v); /* the sample is untrusted input */
            if (err != FERRY_OK) {
                fprintf(stderr, "consumer: sample %llu: %s\n", (unsigned long long)s.sequence,
                        ferry_strerror(err));
            } else {
                seen++;
                bytes += v.data_size;
                if (!quiet)
                    printf("frame %llu: %ux%u %s frame_id=%s stamp=%d.%09u\n",
                           (unsigned long long)s.sequence, v.header.width, v.header.height,
                           v.header.encoding, v.header.frame_id, v.header.stamp.sec,
                           v.header.stamp.nanosec);
            }
            CHECK(ferry_release(sub, &s)); /* v.data must not be read after this */
        }
    }

    ferry_subscriber_stats st;
    CHECK(ferry_subscriber_stats_get(sub, &st));
    printf("consumer: %lu frames, %llu pixel bytes, %llu dropped, %llu bytes copied\n", seen, bytes,
           (unsigned long long)st.dropped, (unsigned long long)st.bytes_copied);
    CHECK(ferry_subscriber_destroy(sub));
    CHECK(ferry_node_destroy(node));
    return 0;
}
