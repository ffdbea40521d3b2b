/*
 * `ferry demo`'s GPU consumer: a process that takes every frame of one camera, copies it from
 * the publisher's registered pages into a device buffer from a ferry_gpu_cache (no staging copy;
 * the cache allocates once and reuses after that), sums the pixels with a kernel and checks the
 * sum against the same sum made on the CPU. Latency is from the camera's send time to the
 * kernel's result on the host. Without a device it reports DEMO_MSG_SKIP and exits.
 */
#include "demo.h"

#include <ferry/gpu.h>
#include <ferry/msg.h>

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* demo_kernels.cu */
int demo_gpu_sum(const void *p, unsigned long long words, unsigned long long *sum, int blocks,
                 cudaStream_t stream);

typedef struct gpu_consumer {
    const demo_cfg *c;
    cudaStream_t stream;
    bool stream_made;
    ferry_gpu_cache *cache;
    ferry_gpu_buffer *sum_buf;
    ferry_node *node;
    ferry_subscriber *sub;
    demo_lat_rec *lat;
    int blocks;
    uint64_t last_seq;
    int64_t last_frame_ns;
    bool done;
    demo_gpu_result r;
} gpu_consumer;

static uint64_t cpu_sum64(const unsigned char *p, size_t words)
{
    uint64_t acc = 0;
    for (size_t i = 0; i < words; i++) {
        uint64_t w;
        memcpy(&w, p + 8 * i, sizeof w);
        acc += w;
    }
    return acc;
}

static int cuda_fail(const char *what, cudaError_t e)
{
    cli_fail("demo", 1, "GPU consumer: %s: %s", what, cudaGetErrorString(e));
    return -1;
}

static int ferry_fail(const char *what, ferry_err e)
{
    cli_fail("demo", 1, "GPU consumer: %s: %s", what, ferry_strerror(e));
    return -1;
}

/* One frame through the GPU; the sample stays held until the kernel's result is back. */
static int gpu_frame(gpu_consumer *g, const ferry_sample *s)
{
    ferry_image_view v;
    cli_frame_header h;
    if (ferry_image_view_get(s, &v) != FERRY_OK || v.header.width != DEMO_WIDTH ||
        v.header.height != DEMO_HEIGHT || v.data_size < sizeof h ||
        (v.data_size - sizeof h) % 8 != 0) {
        g->r.corrupt++;
        return 0;
    }
    memcpy(&h, v.data, sizeof h);
    size_t offset = (size_t)((const unsigned char *)v.data - (const unsigned char *)s->data);
    size_t words = (v.data_size - sizeof h) / 8;

    ferry_gpu_buffer *buf;
    ferry_err err = ferry_gpu_alloc(g->cache, s->size, g->stream, &buf);
    if (err)
        return ferry_fail("device buffer", err);
    unsigned long long *dsum = ferry_gpu_buffer_ptr(g->sum_buf);
    unsigned long long sum = 0;
    const unsigned char *dframe = ferry_gpu_buffer_ptr(buf);
    cudaError_t e = cudaSuccess;
    if ((err = ferry_gpu_sample_copy(g->sub, s, 0, ferry_gpu_buffer_ptr(buf), g->stream))) {
        ferry_gpu_release(buf);
        return ferry_fail("copy to the device", err);
    }
    if ((e = cudaMemsetAsync(dsum, 0, sizeof *dsum, g->stream)) != cudaSuccess ||
        (e = (cudaError_t)demo_gpu_sum(dframe + offset + sizeof h, words, dsum, g->blocks,
                                       g->stream)) != cudaSuccess ||
        (e = cudaMemcpyAsync(&sum, dsum, sizeof sum, cudaMemcpyDeviceToHost, g->stream)) !=
            cudaSuccess ||
        (e = cudaStreamSynchronize(g->stream)) != cudaSuccess) {
        cudaStreamSynchronize(g->stream);
        ferry_gpu_release(buf);
        return cuda_fail("kernel", e);
    }
    int64_t done = ferry_now().ns;
    ferry_gpu_release(buf);

    int64_t c0 = cli_cpu_ns();
    uint64_t expect = cpu_sum64((const unsigned char *)v.data + sizeof h, words);
    g->r.check_cpu_ns += cli_cpu_ns() - c0;
    if (h.magic != CLI_FRAME_MAGIC || expect != (uint64_t)sum) {
        g->r.mismatches++;
        return 0;
    }
    g->r.received++;
    if (g->r.lat_count < g->c->frames)
        g->lat[g->r.lat_count++] = (demo_lat_rec){h.send_ns, done - h.send_ns};
    if (h.sequence <= g->last_seq)
        g->r.disorder++;
    g->last_seq = h.sequence;
    if (h.sequence == g->c->frames)
        g->done = true;
    return 0;
}

static int gpu_setup(gpu_consumer *g)
{
    cudaError_t e;
    ferry_err err;
    struct cudaDeviceProp prop;
    if ((e = cudaSetDevice(0)) != cudaSuccess)
        return cuda_fail("cudaSetDevice", e);
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
        snprintf(g->r.device, sizeof g->r.device, "%.63s", prop.name);
        g->blocks = prop.multiProcessorCount > 0 ? 2 * prop.multiProcessorCount : 64;
    } else {
        g->blocks = 64;
    }
    if ((e = cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking)) != cudaSuccess)
        return cuda_fail("cudaStreamCreate", e);
    g->stream_made = true;
    ferry_gpu_cache_options o;
    ferry_gpu_cache_options_init(&o);
    if ((err = ferry_gpu_cache_create(&g->cache, &o)) != FERRY_OK)
        return ferry_fail("cache", err);
    if ((err = ferry_gpu_alloc(g->cache, sizeof(unsigned long long), g->stream, &g->sum_buf)))
        return ferry_fail("result buffer", err);

    char topic[64];
    demo_camera_topic(topic, sizeof topic, DEMO_GPU_CAMERA);
    if (cli_node(&g->c->where, "gpu", &g->node) != FERRY_OK)
        return -1;
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = DEMO_QUEUE_DEPTH;
    so.overflow = FERRY_OVERFLOW_DROP_OLDEST;
    if ((err = ferry_subscriber_create(&g->sub, g->node, topic, FERRY_IMAGE_TYPE_NAME,
                                       FERRY_IMAGE_TYPE_HASH, &so)) != FERRY_OK)
        return ferry_fail("subscriber", err);
    if ((err = ferry_subscriber_wait_publishers(g->sub, 1, DEMO_CONNECT_NS)) != FERRY_OK)
        return ferry_fail("waiting for the camera", err);
    return 0;
}

static int gpu_run(gpu_consumer *g)
{
    int64_t started = cli_now_ns();
    while (!g->done) {
        int64_t now = cli_now_ns();
        if (g->last_frame_ns == 0 ? now - started > DEMO_FIRST_FRAME_NS
                                  : now - g->last_frame_ns > DEMO_IDLE_NS)
            break;
        ferry_err err = ferry_wait(g->sub, 100 * DEMO_NS_PER_MS);
        if (err == FERRY_ETIMEDOUT)
            continue;
        if (err)
            return ferry_fail("wait", err);
        for (;;) {
            ferry_sample s;
            err = ferry_take(g->sub, &s);
            if (err == FERRY_EAGAIN)
                break;
            if (err)
                return ferry_fail("take", err);
            g->last_frame_ns = cli_now_ns();
            int rc = gpu_frame(g, &s);
            if ((err = ferry_release(g->sub, &s)) != FERRY_OK)
                return ferry_fail("release", err);
            if (rc != 0)
                return rc;
        }
    }
    return 0;
}

int demo_gpu_main(const demo_cfg *c, int res)
{
    int count = 0;
    ferry_err err = ferry_gpu_device_count(&count);
    if (err != FERRY_OK || count < 1) {
        char msg = DEMO_MSG_SKIP;
        demo_gpu_skip skip;
        memset(&skip, 0, sizeof skip);
        snprintf(skip.reason, sizeof skip.reason, "%s",
                 err == FERRY_ENODEV || err == FERRY_OK ? "no GPU" : ferry_strerror(err));
        cli_write_full(res, &msg, 1);
        cli_write_full(res, &skip, sizeof skip);
        return 0;
    }

    char msg = DEMO_MSG_GPU;
    if (cli_write_full(res, &msg, 1) != 0)
        return 1;
    gpu_consumer *g = calloc(1, sizeof *g);
    int rc = 1;
    msg = DEMO_MSG_FAIL;
    if (!g || !(g->lat = malloc(c->frames * sizeof *g->lat))) {
        cli_write_full(res, &msg, 1);
        goto out;
    }
    g->c = c;
    g->r.status = -1;
    int64_t cpu0 = cli_cpu_ns();
    if (gpu_setup(g) != 0) {
        cli_write_full(res, &msg, 1);
        goto out;
    }
    msg = DEMO_MSG_READY;
    if (cli_write_full(res, &msg, 1) != 0)
        goto out;
    g->r.status = gpu_run(g);
    g->r.cpu_ns = cli_cpu_ns() - cpu0;
    ferry_subscriber_stats st;
    if (ferry_subscriber_stats_get(g->sub, &st) == FERRY_OK)
        g->r.dropped = st.dropped;
    ferry_gpu_cache_stats cs;
    if (ferry_gpu_cache_stats_get(g->cache, &cs) == FERRY_OK) {
        g->r.device_allocs = cs.device_allocs;
        g->r.cache_hits = cs.hits;
    }
    if (cli_write_full(res, &g->r, sizeof g->r) == 0 &&
        (g->r.lat_count == 0 || cli_write_full(res, g->lat, g->r.lat_count * sizeof *g->lat) == 0))
        rc = g->r.status == 0 ? 0 : 1;
out:
    if (g) {
        if (g->stream_made)
            cudaStreamSynchronize(g->stream);
        if (g->sum_buf)
            ferry_gpu_release(g->sum_buf);
        if (g->sub && (err = ferry_subscriber_destroy(g->sub)) != FERRY_OK)
            cli_fail("demo", 1, "GPU consumer: subscriber destroy: %s", ferry_strerror(err));
        if (g->node && (err = ferry_node_destroy(g->node)) != FERRY_OK)
            cli_fail("demo", 1, "GPU consumer: node destroy: %s", ferry_strerror(err));
        if (g->cache && (err = ferry_gpu_cache_destroy(g->cache)) != FERRY_OK)
            cli_fail("demo", 1, "GPU consumer: cache destroy: %s", ferry_strerror(err));
        if (g->stream_made)
            cudaStreamDestroy(g->stream);
        free(g->lat);
        free(g);
    }
    return rc;
}
