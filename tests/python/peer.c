/*
 * The C side of the Python tests: takes images a Python publisher sent and prints what it
 * found, or publishes images for a Python subscriber to check. Pixel i of frame seq holds
 * (i + 13 * seq) & 0xff in both directions.
 *
 *   python_peer take DIR TOPIC COUNT          prints "seq WxH sum ok|BAD" per image
 *   python_peer pub DIR TOPIC COUNT W H       publishes COUNT rgb8 images to one subscriber
 */
#include <ferry/ferry.h>
#include <ferry/msg.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what, ferry_err err)
{
    fprintf(stderr, "python_peer: %s: %s\n", what, ferry_strerror(err));
    return 1;
}

static int take(ferry_node *node, const char *topic, unsigned count)
{
    ferry_subscriber *sub;
    unsigned got = 0, bad = 0;
    ferry_subscriber_options so;
    ferry_err err;

    /* Deep enough for every frame: the test publishes them back to back, and on a busy machine
     * a shallow drop-oldest queue would lose the first ones. */
    ferry_subscriber_options_init(&so);
    so.depth = count < 64 ? count : 64;
    err = ferry_subscriber_create(&sub, node, topic, FERRY_IMAGE_TYPE_NAME, FERRY_IMAGE_TYPE_HASH,
                                  &so);
    if (err != FERRY_OK)
        return fail("ferry_subscriber_create", err);
    err = ferry_subscriber_wait_publishers(sub, 1, 10000000000LL);
    if (err != FERRY_OK)
        return fail("ferry_subscriber_wait_publishers", err);
    printf("ready\n");
    fflush(stdout);
    while (got < count) {
        ferry_image_view v;
        ferry_sample s;
        uint64_t sum = 0;
        bool ok = true;
        size_t i;

        err = ferry_wait(sub, 10000000000LL);
        if (err != FERRY_OK)
            return fail("ferry_wait", err);
        if (ferry_take(sub, &s) != FERRY_OK)
            continue;
        err = ferry_image_view_get(&s, &v);
        if (err != FERRY_OK)
            return fail("ferry_image_view_get", err);
        for (i = 0; i < v.data_size; i++) {
            uint8_t b = ((const uint8_t *)v.data)[i];

            sum += b;
            if (b != (uint8_t)(i + 13 * s.sequence))
                ok = false;
        }
        if (!ok)
            bad++;
        printf("%" PRIu64 " %ux%u %" PRIu64 " %s\n", s.sequence, v.header.width, v.header.height,
               sum, ok ? "ok" : "BAD");
        ferry_release(sub, &s);
        got++;
    }
    ferry_subscriber_destroy(sub);
    return bad == 0 ? 0 : 1;
}

static int pub(ferry_node *node, const char *topic, unsigned count, unsigned w, unsigned h)
{
    ferry_publisher *p;
    ferry_err err;
    unsigned n;

    err =
        ferry_publisher_create(&p, node, topic, FERRY_IMAGE_TYPE_NAME, FERRY_IMAGE_TYPE_HASH, NULL);
    if (err != FERRY_OK)
        return fail("ferry_publisher_create", err);
    err = ferry_publisher_wait_subscribers(p, 1, 10000000000LL);
    if (err != FERRY_OK)
        return fail("ferry_publisher_wait_subscribers", err);
    for (n = 1; n <= count; n++) {
        ferry_image img;
        size_t i;

        err = ferry_image_loan(p, w, h, "rgb8", 0, &img);
        if (err != FERRY_OK)
            return fail("ferry_image_loan", err);
        for (i = 0; i < img.data_size; i++)
            ((uint8_t *)img.data)[i] = (uint8_t)(i + 13 * n);
        snprintf(img.header->frame_id, sizeof img.header->frame_id, "peer");
        err = ferry_image_publish(p, &img);
        if (err != FERRY_OK)
            return fail("ferry_image_publish", err);
        ferry_publisher_poll(p, 10000000); /* 100 Hz, and take back what came back */
    }
    /* Stay until the subscriber is gone, so that it can take the last frames. */
    for (n = 0; n < 1000; n++) {
        ferry_publisher_stats st;

        ferry_publisher_poll(p, 10000000);
        if (ferry_publisher_stats_get(p, &st) == FERRY_OK && st.subscribers == 0)
            break;
    }
    ferry_publisher_destroy(p);
    return 0;
}

int main(int argc, char **argv)
{
    ferry_node_options o;
    ferry_node *node;
    ferry_err err;
    int status;

    if (argc < 5 || (strcmp(argv[1], "pub") == 0 && argc < 7)) {
        fprintf(stderr, "usage: python_peer take DIR TOPIC COUNT | pub DIR TOPIC COUNT W H\n");
        return 2;
    }
    ferry_node_options_init(&o);
    o.dir = argv[2];
    if (getenv("FERRY_DOMAIN") != NULL)
        o.domain = (uint32_t)strtoul(getenv("FERRY_DOMAIN"), NULL, 10);
    o.name = "python_peer";
    err = ferry_node_create(&node, &o);
    if (err != FERRY_OK)
        return fail("ferry_node_create", err);
    if (strcmp(argv[1], "take") == 0)
        status = take(node, argv[3], (unsigned)strtoul(argv[4], NULL, 10));
    else
        status = pub(node, argv[3], (unsigned)strtoul(argv[4], NULL, 10),
                     (unsigned)strtoul(argv[5], NULL, 10), (unsigned)strtoul(argv[6], NULL, 10));
    ferry_node_destroy(node);
    return status;
}
