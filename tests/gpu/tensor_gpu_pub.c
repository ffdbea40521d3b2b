/*
 * Publisher of tensors for the tensor tests (tensor_gpu_test, dlpack_torch.py), run as a process
 * of its own:
 *   tensor_gpu_pub DIR DOMAIN COUNT DEVICE_TOPIC|- HOST_TOPIC|-
 * Device tensors (DEVICE_TOPIC): float32 [3, 480, 640], element i of tensor k (k from 0) is
 * k * 1000 + i % 1000, filled with cudaMemcpy from host values (no kernel). Host tensors
 * (HOST_TOPIC): float32 [2, 3, 4] with k * 1000 + i, then int16 [4, 3] column-major (strides
 * [1, 4]) with element (r, c) = k * 100 + r * 10 + c, alternating (even k, odd k). Each tensor
 * has stamp {k, k * 1000} and frame_id "frame<k>". "-" leaves a kind out; without a device
 * topic no CUDA call is made. Waits for one subscriber per topic, publishes COUNT of each
 * (subscribers should use FERRY_OVERFLOW_BLOCK), then runs housekeeping until every subscriber
 * left and every chunk came back. Exit status 0 on success; messages on stderr.
 */
#include <ferry/gpu.h>
#include <ferry/tensor.h>

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TYPE FERRY_TENSOR_TYPE_NAME
#define HASH FERRY_TENSOR_TYPE_HASH
#define WAIT_NS ((int64_t)60000000000)

#define CHECK(expr)                                                                                \
    do {                                                                                           \
        ferry_err e_ = (expr);                                                                     \
        if (e_ != FERRY_OK) {                                                                      \
            fprintf(stderr, "tensor_gpu_pub: %s: %s\n", #expr, ferry_strerror(e_));                \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define CUDA_CHECK(expr)                                                                           \
    do {                                                                                           \
        cudaError_t c_ = (expr);                                                                   \
        if (c_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "tensor_gpu_pub: %s: %s\n", #expr, cudaGetErrorString(c_));            \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static void publish_host(ferry_publisher *pub, uint64_t k)
{
    ferry_tensor t;
    if (k % 2 == 0) {
        const int64_t shape[] = {2, 3, 4};
        CHECK(ferry_tensor_loan(pub, FERRY_DTYPE_FLOAT32, 3, shape, NULL, &t));
        for (int i = 0; i < 24; i++)
            ((float *)t.data)[i] = (float)(k * 1000 + (uint64_t)i);
    } else {
        const int64_t shape[] = {4, 3}, strides[] = {1, 4};
        CHECK(ferry_tensor_loan(pub, FERRY_DTYPE_INT16, 2, shape, strides, &t));
        for (int r = 0; r < 4; r++)
            for (int c = 0; c < 3; c++)
                ((int16_t *)t.data)[r + 4 * c] = (int16_t)(k * 100 + (uint64_t)(r * 10 + c));
    }
    t.header->stamp.sec = (int32_t)k;
    t.header->stamp.nanosec = (uint32_t)k * 1000u;
    snprintf(t.header->frame_id, sizeof t.header->frame_id, "frame%u", (unsigned)k);
    CHECK(ferry_tensor_publish(pub, &t));
}

static void publish_device(ferry_gpu_publisher *gp, float *host, uint64_t k)
{
    const int64_t shape[] = {3, 480, 640};
    const size_t n = 3 * 480 * 640;
    for (size_t i = 0; i < n; i++)
        host[i] = (float)(k * 1000 + i % 1000);
    void *dptr;
    CHECK(ferry_gpu_loan(gp, n * sizeof(float), NULL, &dptr));
    /* Synchronous on the legacy default stream, which is the stream published with. */
    CUDA_CHECK(cudaMemcpy(dptr, host, n * sizeof(float), cudaMemcpyHostToDevice));
    ferry_stamp stamp = {(int32_t)k, (uint32_t)k * 1000u};
    char id[32];
    snprintf(id, sizeof id, "frame%u", (unsigned)k);
    CHECK(
        ferry_tensor_gpu_publish(gp, dptr, NULL, FERRY_DTYPE_FLOAT32, 3, shape, NULL, &stamp, id));
}

static ferry_publisher *make_pub(ferry_node *node, const char *topic)
{
    ferry_publisher_options po;
    ferry_publisher_options_init(&po);
    po.admit_blocking = true; /* its subscribers ask to block it */
    po.block_timeout_ns = WAIT_NS;
    po.max_chunks = 16; /* bounds the device memory of device frames */
    po.on_pool_exhausted = FERRY_POOL_BLOCK;
    ferry_publisher *pub;
    CHECK(ferry_publisher_create(&pub, node, topic, TYPE, HASH, &po));
    return pub;
}

/* Housekeeping until the subscriber left and every chunk came back. */
static void drain(ferry_publisher *pub)
{
    ferry_time t0 = ferry_now();
    for (;;) {
        ferry_publisher_stats st;
        CHECK(ferry_publisher_stats_get(pub, &st));
        if (st.subscribers == 0 && st.chunks_in_use == 0)
            return;
        if (ferry_now().ns - t0.ns > WAIT_NS) {
            fprintf(stderr, "tensor_gpu_pub: subscribers %u, chunks in use %u after 60 s\n",
                    st.subscribers, st.chunks_in_use);
            exit(1);
        }
        CHECK(ferry_publisher_poll(pub, 10000000));
    }
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: tensor_gpu_pub DIR DOMAIN COUNT DEVICE_TOPIC|- HOST_TOPIC|-\n");
        return 2;
    }
    uint64_t count = strtoull(argv[3], NULL, 10);
    const char *dtopic = strcmp(argv[4], "-") ? argv[4] : NULL;
    const char *htopic = strcmp(argv[5], "-") ? argv[5] : NULL;
    ferry_node_options no;
    ferry_node_options_init(&no);
    no.dir = argv[1];
    no.domain = (uint32_t)strtoul(argv[2], NULL, 10);
    no.name = "tensor_pub";
    ferry_node *node;
    CHECK(ferry_node_create(&node, &no));
    ferry_publisher *dpub = dtopic ? make_pub(node, dtopic) : NULL;
    ferry_publisher *hpub = htopic ? make_pub(node, htopic) : NULL;
    ferry_gpu_publisher *gp = NULL;
    float *host = NULL;
    if (dpub) {
        CHECK(ferry_gpu_publisher_create(&gp, dpub, NULL));
        CUDA_CHECK(cudaMallocHost((void **)&host, 3 * 480 * 640 * sizeof(float)));
        CHECK(ferry_publisher_wait_subscribers(dpub, 1, WAIT_NS));
    }
    if (hpub)
        CHECK(ferry_publisher_wait_subscribers(hpub, 1, WAIT_NS));
    for (uint64_t k = 0; k < count; k++) {
        if (gp)
            publish_device(gp, host, k);
        if (hpub)
            publish_host(hpub, k);
    }
    if (hpub)
        drain(hpub);
    if (dpub)
        drain(dpub);
    if (gp) {
        CHECK(ferry_gpu_publisher_destroy(gp));
        CUDA_CHECK(cudaFreeHost(host));
    }
    if (dpub)
        CHECK(ferry_publisher_destroy(dpub));
    if (hpub)
        CHECK(ferry_publisher_destroy(hpub));
    CHECK(ferry_node_destroy(node));
    fprintf(stderr, "tensor_gpu_pub: published %u tensor(s) per topic\n", (unsigned)count);
    return 0;
}
