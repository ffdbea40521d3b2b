/*
 * consumer: a program built outside the tree, against an installed ferry (tests/install_test.sh,
 * tests/deb_test.sh). In one process it publishes a frame and takes it back through a subscriber,
 * checks every byte and that nothing was copied, and tears everything down.
 *
 *   consumer DIR     DIR: the domain root, a private directory
 */
#include <ferry/ferry.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define FRAME_SIZE (4u << 20)

#define CHECK(call)                                                                                \
    do {                                                                                           \
        ferry_err err_ = (call);                                                                   \
        if (err_ != FERRY_OK) {                                                                    \
            fprintf(stderr, "consumer: %s: %s\n", #call, ferry_strerror(err_));                    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static uint8_t pattern(size_t i)
{
    return (uint8_t)(i * 31u + (i >> 12));
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: consumer DIR\n");
        return 2;
    }
    ferry_node_options no;
    ferry_node_options_init(&no);
    no.dir = argv[1];
    no.name = "consumer";
    ferry_node *node;
    CHECK(ferry_node_create(&node, &no));

    const char *type = "consumer/frame";
    ferry_publisher *pub;
    CHECK(ferry_publisher_create(&pub, node, "/consumer/frames", type, ferry_hash(type), NULL));
    ferry_subscriber *sub;
    CHECK(ferry_subscriber_create(&sub, node, "/consumer/frames", type, ferry_hash(type), NULL));
    /* Both ends in one thread: each side's housekeeping in turn completes the handshake. */
    CHECK(ferry_publisher_wait_subscribers(pub, 1, 5 * 1000000000LL));
    CHECK(ferry_subscriber_wait_publishers(sub, 1, 5 * 1000000000LL));

    void *payload;
    CHECK(ferry_loan(pub, FRAME_SIZE, &payload));
    for (size_t i = 0; i < FRAME_SIZE; i++)
        ((uint8_t *)payload)[i] = pattern(i);
    CHECK(ferry_publish(pub, payload, FRAME_SIZE));

    CHECK(ferry_wait(sub, 5 * 1000000000LL));
    ferry_sample s;
    CHECK(ferry_take(sub, &s));
    if (s.size != FRAME_SIZE || s.sequence != 1) {
        fprintf(stderr, "consumer: took %zu bytes, sequence %llu; want %u, 1\n", s.size,
                (unsigned long long)s.sequence, FRAME_SIZE);
        return 1;
    }
    for (size_t i = 0; i < FRAME_SIZE; i++) {
        if (((const uint8_t *)s.data)[i] != pattern(i)) {
            fprintf(stderr, "consumer: byte %zu is %u, want %u\n", i, ((const uint8_t *)s.data)[i],
                    pattern(i));
            return 1;
        }
    }
    CHECK(ferry_release(sub, &s));

    ferry_subscriber_stats st;
    CHECK(ferry_subscriber_stats_get(sub, &st));
    if (st.bytes_copied != 0) {
        fprintf(stderr, "consumer: %llu bytes copied, want 0\n",
                (unsigned long long)st.bytes_copied);
        return 1;
    }
    CHECK(ferry_subscriber_destroy(sub));
    CHECK(ferry_publisher_destroy(pub));
    CHECK(ferry_node_destroy(node));
    printf("consumer: %u bytes published and taken intact, 0 copied\n", FRAME_SIZE);
    return 0;
}
