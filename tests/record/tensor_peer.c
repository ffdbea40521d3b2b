/*
 * The tensor publisher of record_test.sh (`ferry pub` has none): COUNT host tensors of float32
 * [4, 8], element i of tensor n being n * 1000 + i, stamped and with frame_id "tensor", once a
 * SUBSCRIBERS subscribers are there, 20 ms apart; then it stays until they have left (at most
 * 10 s).
 *
 *   tensor_peer DIR TOPIC COUNT SUBSCRIBERS
 */
#include <ferry/ferry.h>
#include <ferry/tensor.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WAIT_NS 10000000000LL
#define GAP_NS 20000000LL

static int fail(const char *what, ferry_err err)
{
    fprintf(stderr, "tensor_peer: %s: %s\n", what, ferry_strerror(err));
    return 1;
}

int main(int argc, char **argv)
{
    static const int64_t shape[2] = {4, 8};
    ferry_node_options no;
    ferry_node *node;
    ferry_publisher *pub;
    ferry_err err;
    int count;

    if (argc != 5) {
        fprintf(stderr, "usage: tensor_peer DIR TOPIC COUNT SUBSCRIBERS\n");
        return 2;
    }
    count = atoi(argv[3]);
    ferry_node_options_init(&no);
    no.dir = argv[1];
    if ((err = ferry_node_create(&node, &no)) != FERRY_OK)
        return fail("node", err);
    err = ferry_publisher_create(&pub, node, argv[2], FERRY_TENSOR_TYPE_NAME,
                                 FERRY_TENSOR_TYPE_HASH, NULL);
    if (err != FERRY_OK)
        return fail("publisher", err);
    if ((err = ferry_publisher_wait_subscribers(pub, (uint32_t)atoi(argv[4]), WAIT_NS)) != FERRY_OK)
        return fail("waiting for a subscriber", err);
    for (int n = 0; n < count; n++) {
        struct timespec ts;
        ferry_tensor t;
        float *x;

        if ((err = ferry_tensor_loan(pub, FERRY_DTYPE_FLOAT32, 2, shape, NULL, &t)) != FERRY_OK)
            return fail("loan", err);
        x = t.data;
        for (int i = 0; i < 32; i++)
            x[i] = (float)(n * 1000 + i);
        clock_gettime(CLOCK_REALTIME, &ts);
        t.header->stamp.sec = (int32_t)ts.tv_sec;
        t.header->stamp.nanosec = (uint32_t)ts.tv_nsec;
        snprintf(t.header->frame_id, sizeof t.header->frame_id, "tensor");
        if ((err = ferry_tensor_publish(pub, &t)) != FERRY_OK)
            return fail("publish", err);
        ferry_publisher_poll(pub, GAP_NS);
    }
    for (int64_t waited = 0; waited < WAIT_NS; waited += GAP_NS) {
        ferry_publisher_stats st;

        if (ferry_publisher_stats_get(pub, &st) != FERRY_OK || st.subscribers == 0)
            break;
        ferry_publisher_poll(pub, GAP_NS);
    }
    ferry_publisher_destroy(pub);
    ferry_node_destroy(node);
    return 0;
}
