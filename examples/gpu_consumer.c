/*
 * gpu_consumer TOPIC FRAMES: camera frames (from camera_pub) into the GPU. Each frame is copied
 * from the publisher's pages, registered with CUDA once per chunk (pinned speed), into a buffer
 * of a ferry_gpu_cache, which reuses it frame after frame instead of allocating. A kernel
 * (gpu_sum.cu) sums the frame's bytes and the CPU checks the sum. Exits 77 without a GPU.
 */
#include <ferry/ferry.h>
#include <ferry/gpu.h>
#include <ferry/msg.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        ferry_err err_ = (call);                                                                   \
        if (err_ != FERRY_OK) {                                                                    \
            fprintf(stderr, "gpu_consumer: %s: %s\n", #call, ferry_strerror(err_));                \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#define CUDA_CHECK(call) cuda_check((call), #call)

static void cuda_check(cudaError_t err, const char *what)
{
    if (err == cudaSuccess)
        return;
    fprintf(stderr, "gpu_consumer: %s: %s\n", what, cudaGetErrorString(err));
    exit(1);
}

cudaError_t gpu_sum_bytes(const void *p, size_t n, unsigned long long *out, void *stream);

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: gpu_consumer TOPIC FRAMES\n");
        return 2;
    }
    unsigned long frames = strtoul(argv[2], NULL, 10);
    int devices;
    ferry_err err = ferry_gpu_device_count(&devices);
    if (err != FERRY_OK) { /* FERRY_ENODEV: no driver or no device */
        printf("gpu_consumer: no GPU (%s), skipped\n", ferry_strerror(err));
        return 77;
    }

    ferry_gpu_cache *cache; /* CUDA first: frames sent while it starts would be dropped */
    CHECK(ferry_gpu_cache_create(&cache, NULL)); /* device 0, ferry's cache backend */
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreate(&stream));
    ferry_gpu_buffer *sum_buf; /* the kernel's result, kept for the whole run */
    CHECK(ferry_gpu_alloc(cache, sizeof(unsigned long long), stream, &sum_buf));

    ferry_node_options no;
    ferry_node_options_init(&no);
    no.dir = getenv("FERRY_DIR");
    ferry_node *node;
    CHECK(ferry_node_create(&node, &no));
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = 4; /* room for a slow first frame: its chunk is registered with CUDA then */
    ferry_subscriber *sub;
    CHECK(ferry_subscriber_create(&sub, node, argv[1], FERRY_IMAGE_TYPE_NAME, FERRY_IMAGE_TYPE_HASH,
                                  &so));

    for (unsigned long n = 0; n < frames; n++) {
        CHECK(ferry_wait(sub, 5 * 1000000000LL));
        ferry_sample s;
        ferry_image_view v;
        CHECK(ferry_take(sub, &s)); /* ferry_wait said one is queued */
        CHECK(ferry_image_view_get(&s, &v));
        ferry_gpu_buffer *buf; /* same size every frame: reused, no device allocation */
        CHECK(ferry_gpu_alloc(cache, s.size, stream, &buf));
        CHECK(ferry_gpu_sample_copy(sub, &s, 0, ferry_gpu_buffer_ptr(buf), stream));
        unsigned long long *dsum = ferry_gpu_buffer_ptr(sum_buf), gpu = 0, cpu = 0;
        CUDA_CHECK(gpu_sum_bytes(ferry_gpu_buffer_ptr(buf), s.size, dsum, stream));
        CUDA_CHECK(cudaMemcpyAsync(&gpu, dsum, sizeof gpu, cudaMemcpyDeviceToHost, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream)); /* the copy is done: the sample may go */
        CHECK(ferry_gpu_release(buf));
        for (size_t i = 0; i < s.size; i++)
            cpu += ((const unsigned char *)s.data)[i];
        printf("frame %llu: %ux%u %s, GPU sum %llu %s\n", (unsigned long long)s.sequence,
               v.header.width, v.header.height, v.header.encoding, gpu,
               gpu == cpu ? "matches the CPU" : "MISMATCH");
        CHECK(ferry_release(sub, &s));
        if (gpu != cpu)
            return 1;
    }

    ferry_gpu_cache_stats cs;
    CHECK(ferry_gpu_cache_stats_get(cache, &cs));
    printf("gpu_consumer: %lu frames, %llu device allocations, %llu reuses\n", frames,
           (unsigned long long)cs.device_allocs, (unsigned long long)cs.hits);
    CHECK(ferry_gpu_release(sum_buf));
    CHECK(ferry_gpu_cache_destroy(cache));
    CUDA_CHECK(cudaStreamDestroy(stream));
    CHECK(ferry_subscriber_destroy(sub));
    CHECK(ferry_node_destroy(node));
    return 0;
}
