/*
 * A lifecycle node that hands camera frames to the GPU, and what each transition does to its
 * GPU resources. on_configure declares a managed subscriber of 1280x720 rgb8 images, creates a
 * device buffer cache and a stream, and warms the cache (one buffer of the frame's size class
 * allocated and given back on that stream), so that frames then cost no device allocation;
 * frames register the publisher's chunks with CUDA on first sight (ferry_gpu_sample_device_ptr).
 * on_cleanup and on_shutdown destroy the cache and the stream. A forked publisher process
 * publishes images at about 100 Hz from a reserved pool throughout.
 *
 * Checks, per round (configure, activate, frames, deactivate, cleanup; three rounds, the last
 * ending in a shutdown from ACTIVE instead):
 *   configure: the cache holds one idle buffer (one device allocation), device memory went down
 *              by at least that buffer;
 *   active:    FRAMES frames copied to the cache's buffer (ferry_gpu_sample_copy) and read in
 *              place through the registration, checksums on the GPU equal to the CPU's; no
 *              device allocation after the warm-up (cache stats); one registration per chunk;
 *   deactivate: for 300 ms of publishing nothing is taken, delivered or dropped, on either side,
 *              and the cache is untouched;
 *   cleanup:   the cache and the subscriber are gone, every registration was undone, device
 *              memory (cudaMemGetInfo) is back within 2 MiB of its value before configure, and
 *              the descriptors, ferry mappings and ferry_inspect endpoints are those of before;
 *   and configure + activate work again afterwards.
 *
 * Without a device: ferry_gpu_device_count returns FERRY_ENODEV, a configure fails with it and
 * leaves nothing behind; then the test exits 77 (skipped).
 */
#include "gpu_testutil.h"
#include "testutil.h"

#include "core/core.h"
#include <ferry/gpu.h>
#include <ferry/lifecycle.h>
#include <ferry/msg.h>

#include "gpu/internal.h"

#include <cuda_runtime.h>
#include <stdlib.h>
#include <unistd.h>

#define TOPIC "/camera/image"
#define WIDTH 1280u
#define HEIGHT 720u
#define ENCODING "rgb8"
#define DEV 0
#define FRAMES 30
#define ROUNDS 3
#define PUB_CHUNKS 8u /* the publisher's reserved pool */
#define MAX_CHUNK_INDEX 64u
#define RESULT_ALIGN ((size_t)256)
#define MEM_TOLERANCE ((size_t)2 << 20) /* device memory that may differ after cleanup */
#define PAUSE_NS (300 * TU_MS)

/* lifecycle_gpu_kernels.cu: zeroes *out and adds the checksum of n bytes at p, on stream;
 * returns a cudaError_t. out == NULL only loads the kernel. */
int lcg_checksum(const void *p, size_t n, unsigned long long *out, void *stream);

static size_t align_up(size_t n, size_t a)
{
    return (n + a - 1) / a * a;
}

/* Bytes of one image sample: the header, padding to the pixel alignment, the pixels. */
static size_t image_bytes(void)
{
    ferry_image_layout l;
    TU_OK(ferry_image_layout_get(ENCODING, WIDTH, HEIGHT, 0, &l));
    return align_up(sizeof(ferry_image_header), FERRY_MSG_DATA_ALIGN) + (size_t)l.data_size;
}

typedef struct reg_counts {
    uint64_t reg, unreg, failed;
} reg_counts;

static reg_counts reg_counts_now(void)
{
    ferry_gpu_host_stats st;
    TU_OK(ferry_gpu_host_stats_get(&st));
    reg_counts c = {st.registered, st.unregistered, st.unregister_failed};
    return c;
}

static size_t device_free_bytes(void)
{
    size_t free_b = 0, total_b = 0;
    CUDA_OK(cudaMemGetInfo(&free_b, &total_b));
    return free_b;
}

/* ---- the node ------------------------------------------------------------------------------
 * What it holds between configure and cleanup: the managed subscriber (created by its
 * on_configure, destroyed by the lifecycle after on_cleanup), a device buffer cache and a
 * stream. Each frame borrows a buffer of the cache: the frame, then two result words. */

typedef struct gpu_node {
    ferry_subscriber *sub;
    ferry_gpu_cache *cache;
    cudaStream_t stream;
    size_t frame_bytes; /* one image sample */
    size_t buf_bytes;   /* a frame buffer: the frame, then the results at result_off */
    size_t result_off;
    unsigned long long results[2]; /* copied back from the device */
    bool seen[MAX_CHUNK_INDEX];    /* chunks of this configuration registered already */
    uint64_t frames;               /* frames handed to the GPU in this configuration */
    int configures, cleanups, shutdowns;
} gpu_node;

/* Releases the GPU resources, in on_cleanup and on_shutdown, and when on_configure fails. */
static ferry_err node_release_gpu(gpu_node *n)
{
    ferry_err err = FERRY_OK;
    cudaError_t e = cudaSuccess;
    if (n->stream)
        e = cudaStreamSynchronize(n->stream);
    if (n->cache) {
        err = ferry_gpu_cache_destroy(n->cache); /* FERRY_EBUSY: a buffer is live */
        n->cache = NULL;
    }
    if (n->stream) {
        cudaError_t d = cudaStreamDestroy(n->stream);
        if (e == cudaSuccess)
            e = d;
        n->stream = NULL;
    }
    if (!err && e != cudaSuccess)
        err = ferry__gpu_err(e);
    return err;
}

static ferry_err on_configure(void *arg, ferry_lifecycle *lc)
{
    gpu_node *n = arg;
    n->configures++;
    n->frames = 0;
    memset(n->seen, 0, sizeof n->seen);
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = 2;
    /* Created now; the lifecycle destroys it after on_cleanup (or when configure fails). */
    ferry_err err = ferry_lifecycle_subscriber(lc, TOPIC, FERRY_IMAGE_TYPE_NAME,
                                               FERRY_IMAGE_TYPE_HASH, &so, &n->sub);
    if (err)
        return err;

    ferry_gpu_cache_options co;
    ferry_gpu_cache_options_init(&co);
    co.device = DEV;
    co.max_live = 4;
    if ((err = ferry_gpu_cache_create(&n->cache, &co)))
        return err;
    cudaError_t e = cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        n->stream = NULL;
        err = ferry__gpu_err(e);
    }
    /* Warm-up: one buffer of the frame's size class, allocated and given back on the stream
     * frames will use. Every frame after this is a hit: no device allocation while streaming. */
    ferry_gpu_buffer *b = NULL;
    if (!err && !(err = ferry_gpu_alloc(n->cache, n->buf_bytes, n->stream, &b)))
        err = ferry_gpu_release(b);
    if (err) {
        /* on_cleanup is not called after a failed configure: release here. The lifecycle
         * destroys the subscriber. */
        node_release_gpu(n);
        n->sub = NULL;
    }
    return err;
}

static ferry_err on_deactivate(void *arg, ferry_lifecycle *lc)
{
    gpu_node *n = arg;
    (void)lc;
    /* Frames are released as they are processed; what is left is GPU work in flight. */
    cudaError_t e = cudaStreamSynchronize(n->stream);
    return e == cudaSuccess ? FERRY_OK : ferry__gpu_err(e);
}

static ferry_err on_cleanup(void *arg, ferry_lifecycle *lc)
{
    gpu_node *n = arg;
    (void)lc;
    n->cleanups++;
    n->sub = NULL; /* created from on_configure: destroyed after this returns, not cleared */
    return node_release_gpu(n);
}

static ferry_err on_shutdown(void *arg, ferry_lifecycle *lc)
{
    gpu_node *n = arg;
    (void)lc;
    n->shutdowns++;
    n->sub = NULL;
    return node_release_gpu(n);
}

/* One frame: checked as an image, registered (first sight of its chunk) and read in place,
 * copied into a cache buffer, both checksummed on the GPU and compared with the CPU's. */
static void node_process(gpu_node *n, const ferry_sample *s)
{
    ferry_image_view v;
    TU_OK(ferry_image_view_get(s, &v));
    TU_EQ_U64(v.header.width, WIDTH);
    TU_EQ_U64(v.header.height, HEIGHT);
    TU_EQ_STR(v.header.encoding, ENCODING);
    TU_EQ_U64(s->size, n->frame_bytes);
    size_t bad = tu_verify(v.data, v.data_size, s->sequence);
    TU_CHECK_MSG(bad == SIZE_MAX, "frame %" PRIu64 ": pixel byte %zu is not the publisher's",
                 s->sequence, bad);
    unsigned long long cpu = tu_weighted_checksum(s->data, s->size);

    ferry__sample_where w;
    TU_OK(ferry__sample_where_get(n->sub, s, &w));
    TU_CMP_U64(w.chunk, <, MAX_CHUNK_INDEX);
    reg_counts before = reg_counts_now();
    const void *in_place = NULL;
    TU_OK(ferry_gpu_sample_device_ptr(n->sub, s, DEV, &in_place));
    TU_EQ_U64(reg_counts_now().reg, before.reg + (n->seen[w.chunk] ? 0 : 1));
    n->seen[w.chunk] = true;

    ferry_gpu_buffer *b = NULL;
    TU_OK(ferry_gpu_alloc(n->cache, n->buf_bytes, n->stream, &b));
    unsigned char *dev = ferry_gpu_buffer_ptr(b);
    unsigned long long *res = (unsigned long long *)(void *)(dev + n->result_off);
    TU_OK(ferry_gpu_sample_copy(n->sub, s, DEV, dev, n->stream));
    CUDA_OK(lcg_checksum(dev, s->size, &res[0], n->stream));
    CUDA_OK(lcg_checksum(in_place, s->size, &res[1], n->stream));
    CUDA_OK(cudaMemcpyAsync(n->results, res, sizeof n->results, cudaMemcpyDeviceToHost, n->stream));
    /* The sample stays held until the copy and the in-place read completed. */
    CUDA_OK(cudaStreamSynchronize(n->stream));
    TU_CHECK_MSG(n->results[0] == cpu, "frame %" PRIu64 ": checksum of the copy %llx, CPU %llx",
                 s->sequence, n->results[0], cpu);
    TU_CHECK_MSG(n->results[1] == cpu, "frame %" PRIu64 ": checksum read in place %llx, CPU %llx",
                 s->sequence, n->results[1], cpu);
    TU_OK(ferry_gpu_release(b));
    n->frames++;
}

/* ---- the publisher process ---------------------------------------------------------------- */

enum { CMD_QUERY = 1, CMD_STOP = 2 };
enum { ACK_READY = 100 };

typedef struct peer {
    tu_pipe cmd, reply;
    size_t frame_bytes;
    pid_t pid;
} peer;

typedef struct pub_counts {
    uint64_t published, deliveries, dropped, pool_busy;
} pub_counts;

/* Publishes an image every 10 ms from a reserved pool (a full pool skips a tick), filled with
 * the pattern of its sequence; answers queries with its counters. */
static int publisher_main(void *arg)
{
    peer *p = arg;
    ferry_node *node = tu_node("camera");
    ferry_publisher_options o;
    ferry_publisher_options_init(&o);
    o.max_sample_size = p->frame_bytes;
    o.max_chunks = PUB_CHUNKS;
    o.pool_bytes = (size_t)PUB_CHUNKS * (p->frame_bytes + ((size_t)1 << 20));
    ferry_publisher *pub = NULL;
    TU_OK(ferry_publisher_create(&pub, node, TOPIC, FERRY_IMAGE_TYPE_NAME, FERRY_IMAGE_TYPE_HASH,
                                 &o));
    TU_OK(ferry_publisher_reserve(pub, p->frame_bytes, PUB_CHUNKS));
    tu_send(&p->reply, ACK_READY);
    uint64_t seq = 0, pool_busy = 0;
    for (;;) {
        ferry_time tick = ferry_now();
        ferry_image img;
        ferry_err err = ferry_image_loan(pub, WIDTH, HEIGHT, ENCODING, 0, &img);
        if (err == FERRY_EPOOL) {
            pool_busy++;
        } else {
            TU_OK(err);
            TU_EQ_U64(img.payload_size, p->frame_bytes);
            tu_fill(img.data, img.data_size, seq + 1);
            img.header->stamp.sec = (int32_t)(seq + 1);
            snprintf(img.header->frame_id, sizeof img.header->frame_id, "camera");
            TU_OK(ferry_image_publish(pub, &img));
            seq++;
        }
        int64_t left;
        while ((left = 10 * TU_MS - tu_since(tick)) > 0)
            TU_OK(ferry_publisher_poll(pub, left));
        if (!tu_readable(&p->cmd))
            continue;
        uint64_t m = tu_recv(&p->cmd, TU_WAIT_MS);
        if (m == CMD_STOP)
            break;
        ferry_publisher_stats ps;
        TU_OK(ferry_publisher_stats_get(pub, &ps));
        tu_send(&p->reply, ps.published);
        tu_send(&p->reply, ps.deliveries);
        tu_send(&p->reply, ps.dropped);
        tu_send(&p->reply, pool_busy);
    }
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    return 0;
}

static pub_counts query(peer *p)
{
    pub_counts c;
    tu_send(&p->cmd, CMD_QUERY);
    c.published = tu_recv(&p->reply, TU_WAIT_MS);
    c.deliveries = tu_recv(&p->reply, TU_WAIT_MS);
    c.dropped = tu_recv(&p->reply, TU_WAIT_MS);
    c.pool_busy = tu_recv(&p->reply, TU_WAIT_MS);
    return c;
}

/* ---- the test ----------------------------------------------------------------------------- */

#define STATE(lc, s) TU_EQ_STR(ferry_lifecycle_state_name(ferry_lifecycle_state_get(lc)), s)

static void node_init(gpu_node *n)
{
    memset(n, 0, sizeof *n);
    n->frame_bytes = image_bytes();
    n->result_off = align_up(n->frame_bytes, RESULT_ALIGN);
    n->buf_bytes = n->result_off + RESULT_ALIGN;
}

static ferry_gpu_cache_stats cache_stats(gpu_node *n)
{
    ferry_gpu_cache_stats cs;
    TU_OK(ferry_gpu_cache_stats_get(n->cache, &cs));
    return cs;
}

/* What configure must give back: counted before it, compared after cleanup or shutdown. */
typedef struct baseline {
    int fds, maps, endpoints, alive;
    size_t dev_free;
} baseline;

static baseline baseline_now(void)
{
    baseline b;
    b.fds = tu_fd_count();
    b.maps = tu_maps_count("ferry");
    b.endpoints = tu_inspect_count(NULL, &b.alive);
    b.dev_free = device_free_bytes();
    return b;
}

static void check_released(const baseline *b0, const reg_counts *r0, const char *after)
{
    reg_counts r = reg_counts_now();
    TU_CMP_U64(r.reg - r0->reg, >=, 1);
    TU_EQ_U64(r.unreg - r0->unreg, r.reg - r0->reg); /* every registration undone */
    TU_EQ_U64(r.failed, r0->failed);
    baseline b = baseline_now();
    double diff_mib = ((double)b.dev_free - (double)b0->dev_free) / (1 << 20);
    printf("  after %s: %" PRIu64 " registrations undone; device free %.1f MiB (%+.2f MiB "
           "from before configure); fds %d (%d), ferry maps %d (%d), endpoints %d (%d)\n",
           after, r.unreg - r0->unreg, b.dev_free / 1048576.0, diff_mib, b.fds, b0->fds, b.maps,
           b0->maps, b.endpoints, b0->endpoints);
    TU_CHECK_MSG(b.dev_free + MEM_TOLERANCE >= b0->dev_free,
                 "device memory not given back: %zu bytes free, %zu before configure", b.dev_free,
                 b0->dev_free);
    TU_EQ_U64(b.fds, b0->fds);
    TU_EQ_U64(b.maps, b0->maps);
    TU_EQ_U64(b.endpoints, b0->endpoints);
    TU_EQ_U64(b.alive, b0->alive);
}

static void take_and_process(gpu_node *n, int frames)
{
    for (int i = 0; i < frames; i++) {
        ferry_sample s;
        ferry_err err = ferry_take(n->sub, &s);
        if (err == FERRY_EAGAIN) {
            TU_OK(ferry_wait(n->sub, TU_WAIT_NS));
            err = ferry_take(n->sub, &s);
        }
        TU_OK(err);
        node_process(n, &s);
        TU_OK(ferry_release(n->sub, &s));
    }
}

static void test_lifecycle_gpu(void)
{
    gpu_node n;
    node_init(&n);
    peer p = {tu_pipe_make(), tu_pipe_make(), n.frame_bytes, 0};
    p.pid = tu_fork(publisher_main, &p, 110);
    TU_EQ_U64(tu_recv(&p.reply, 3 * TU_WAIT_MS), ACK_READY);

    ferry_node *node = tu_node("gpu_node");
    ferry_lifecycle_callbacks cb = {on_configure, NULL, on_deactivate, on_cleanup, on_shutdown, &n};
    ferry_lifecycle *lc = NULL;
    TU_OK(ferry_lifecycle_create(&lc, node, &cb));
    const baseline b0 = baseline_now();
    TU_EQ_U64(b0.endpoints, 1); /* the publisher */
    printf("  before configure: device free %.1f MiB, fds %d, frame %zu bytes, buffer %zu\n",
           b0.dev_free / 1048576.0, b0.fds, n.frame_bytes, n.buf_bytes);

    for (int round = 0; round < ROUNDS; round++) {
        bool shutdown = round == ROUNDS - 1;
        printf("  round %d%s\n", round + 1, shutdown ? " (ends with shutdown from active)" : "");
        const reg_counts r0 = reg_counts_now();

        /* configure: subscriber, cache (warm), stream */
        TU_OK(ferry_lifecycle_configure(lc));
        STATE(lc, "inactive");
        TU_CHECK(n.sub != NULL && n.cache != NULL && n.stream != NULL);
        ferry_gpu_cache_stats cs = cache_stats(&n);
        TU_EQ_U64(cs.device_allocs, 1);
        TU_EQ_U64(cs.idle_buffers, 1);
        TU_EQ_U64(cs.live_buffers, 0);
        size_t dev_free = device_free_bytes();
        printf("    configured: cache holds %" PRIu64 " idle bytes; device free went down by "
               "%.1f MiB\n",
               cs.idle_bytes, ((double)b0.dev_free - (double)dev_free) / (1 << 20));
        TU_CHECK_MSG(dev_free + n.buf_bytes <= b0.dev_free,
                     "device free bytes did not go down by the warm buffer (%zu -> %zu): "
                     "cudaMemGetInfo cannot show what cleanup gives back",
                     b0.dev_free, dev_free);
        int alive = 0;
        TU_EQ_U64(tu_inspect_count(NULL, &alive), b0.endpoints + 1);
        TU_OK(ferry_subscriber_wait_publishers(n.sub, 1, TU_WAIT_NS)); /* connects while paused */

        /* active: frames to the GPU, no device allocation */
        TU_OK(ferry_lifecycle_activate(lc));
        STATE(lc, "active");
        take_and_process(&n, FRAMES);
        cs = cache_stats(&n);
        reg_counts r1 = reg_counts_now();
        ferry_subscriber_stats ss;
        TU_OK(ferry_subscriber_stats_get(n.sub, &ss));
        printf("    active: %" PRIu64 " frames checked on the GPU (copy and in place); cache: "
               "%" PRIu64 " device allocations, %" PRIu64 " hits, %" PRIu64 " misses; %" PRIu64
               " chunks registered; subscriber received %" PRIu64 ", dropped %" PRIu64 "\n",
               n.frames, cs.device_allocs, cs.hits, cs.misses, r1.reg - r0.reg, ss.received,
               ss.dropped);
        TU_EQ_U64(n.frames, FRAMES);
        TU_EQ_U64(cs.device_allocs, 1); /* the warm-up's: none while streaming */
        TU_EQ_U64(cs.misses, 1);
        TU_EQ_U64(cs.hits, FRAMES);
        TU_EQ_U64(cs.live_buffers, 0);
        TU_CMP_U64(r1.reg - r0.reg, >=, 1);
        TU_CMP_U64(r1.reg - r0.reg, <=, PUB_CHUNKS);
        TU_EQ_U64(r1.unreg, r0.unreg); /* kept while the connection lives */

        if (shutdown) {
            TU_OK(ferry_lifecycle_shutdown(lc));
            STATE(lc, "finalized");
            TU_EQ_U64(n.shutdowns, 1);
            TU_CHECK(n.sub == NULL && n.cache == NULL && n.stream == NULL);
            check_released(&b0, &r0, "shutdown");
            break;
        }

        /* deactivate: nothing taken, delivered or dropped while the publisher goes on */
        TU_OK(ferry_lifecycle_deactivate(lc));
        STATE(lc, "inactive");
        pub_counts pc0 = query(&p);
        TU_OK(ferry_subscriber_stats_get(n.sub, &ss));
        ferry_gpu_cache_stats cs0 = cache_stats(&n);
        ferry_time t0 = ferry_now();
        while (tu_since(t0) < PAUSE_NS) {
            ferry_sample s;
            TU_ERR(ferry_take(n.sub, &s), FERRY_EAGAIN);
            TU_ERR(ferry_wait(n.sub, 20 * TU_MS), FERRY_ETIMEDOUT);
        }
        pub_counts pc1 = query(&p);
        ferry_subscriber_stats ss1;
        TU_OK(ferry_subscriber_stats_get(n.sub, &ss1));
        cs = cache_stats(&n);
        printf("    inactive for 300 ms: publisher published %" PRIu64 ", delivered %" PRIu64
               ", dropped %" PRIu64 "; subscriber received %" PRIu64 ", dropped %" PRIu64
               "; cache allocations %" PRIu64 "\n",
               pc1.published - pc0.published, pc1.deliveries - pc0.deliveries,
               pc1.dropped - pc0.dropped, ss1.received - ss.received, ss1.dropped - ss.dropped,
               cs.device_allocs - cs0.device_allocs);
        TU_CMP_U64(pc1.published - pc0.published, >=, 10);
        TU_EQ_U64(pc1.deliveries, pc0.deliveries);
        TU_EQ_U64(pc1.dropped, pc0.dropped);
        TU_EQ_U64(ss1.received, ss.received);
        TU_EQ_U64(ss1.dropped, ss.dropped);
        TU_EQ_U64(ss1.publishers, 1); /* still connected */
        TU_EQ_U64(cs.device_allocs, cs0.device_allocs);
        TU_EQ_U64(cs.hits, cs0.hits);
        TU_EQ_U64(cs.live_buffers, 0);

        /* cleanup: everything configure made is gone */
        TU_OK(ferry_lifecycle_cleanup(lc));
        STATE(lc, "unconfigured");
        TU_EQ_U64(n.cleanups, round + 1);
        TU_CHECK(n.sub == NULL && n.cache == NULL && n.stream == NULL);
        check_released(&b0, &r0, "cleanup");
    }
    TU_EQ_U64(n.configures, ROUNDS);

    pub_counts pc = query(&p);
    printf("  publisher: %" PRIu64 " images published, %" PRIu64 " ticks skipped on a full pool\n",
           pc.published, pc.pool_busy);
    tu_send(&p.cmd, CMD_STOP);
    TU_CHILD_OK(p.pid);
    TU_OK(ferry_lifecycle_destroy(lc));
    TU_OK(ferry_node_destroy(node));
}

/* ---- without a device --------------------------------------------------------------------- */

static void test_no_device(void)
{
    int count = -1;
    TU_ERR(ferry_gpu_device_count(&count), FERRY_ENODEV);
    TU_EQ_U64(count, 0);
    ferry_gpu_cache *cache = NULL;
    TU_ERR(ferry_gpu_cache_create(&cache, NULL), FERRY_ENODEV);
    TU_CHECK(cache == NULL);

    /* The node's configure fails with the cache's error and leaves nothing behind. */
    gpu_node n;
    node_init(&n);
    ferry_node *node = tu_node("gpu_node");
    ferry_lifecycle_callbacks cb = {on_configure, NULL, on_deactivate, on_cleanup, on_shutdown, &n};
    ferry_lifecycle *lc = NULL;
    TU_OK(ferry_lifecycle_create(&lc, node, &cb));
    int fds = tu_fd_count(), maps = tu_maps_count("ferry");
    TU_ERR(ferry_lifecycle_configure(lc), FERRY_ENODEV);
    STATE(lc, "unconfigured");
    TU_EQ_U64(n.configures, 1);
    TU_CHECK(n.cache == NULL && n.stream == NULL);
    TU_EQ_U64(tu_fd_count(), fds);
    TU_EQ_U64(tu_maps_count("ferry"), maps);
    TU_EQ_U64(tu_inspect_count(NULL, NULL), 0);
    TU_OK(ferry_lifecycle_destroy(lc));
    TU_EQ_U64(n.shutdowns, 1);
    TU_OK(ferry_node_destroy(node));
}

/* Everything CUDA opens, maps or allocates once per process (context, kernel module, stream
 * and event machinery, host registration, pageable copies) happens here, before the test
 * counts descriptors and device memory: the node must give back what it took, not what the
 * process keeps once for all. */
static void warm_up(void)
{
    CUDA_OK(cudaSetDevice(DEV));
    CUDA_OK(cudaFree(0));
    CUDA_OK(lcg_checksum(NULL, 0, NULL, NULL));
    CUDA_OK(cudaDeviceSynchronize());
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    ferry_gpu_cache *cache = NULL;
    TU_OK(ferry_gpu_cache_create(&cache, NULL));
    ferry_gpu_buffer *b = NULL;
    TU_OK(ferry_gpu_alloc(cache, 4096, s, &b));
    unsigned long long *res = ferry_gpu_buffer_ptr(b);

    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    void *host = aligned_alloc(page, 4 * page);
    TU_CHECK(host != NULL);
    memset(host, 7, 4 * page);
    CUDA_OK(cudaHostRegister(host, 4 * page,
                             cudaHostRegisterMapped | cudaHostRegisterPortable |
                                 cudaHostRegisterReadOnly));
    void *dhost = NULL;
    CUDA_OK(cudaHostGetDevicePointer(&dhost, host, 0));
    CUDA_OK(lcg_checksum(dhost, 4 * page, res, s));
    unsigned long long sum = 0;
    CUDA_OK(cudaMemcpyAsync(&sum, res, sizeof sum, cudaMemcpyDeviceToHost, s));
    CUDA_OK(cudaStreamSynchronize(s));
    TU_CHECK_MSG(sum == tu_weighted_checksum(host, 4 * page),
                 "warm-up checksum: GPU %llx, CPU %llx", sum, tu_weighted_checksum(host, 4 * page));
    CUDA_OK(cudaMemcpyAsync(res, host, 4096, cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaStreamSynchronize(s));
    CUDA_OK(cudaHostUnregister(host));
    free(host);
    TU_OK(ferry_gpu_release(b));
    TU_OK(ferry_gpu_cache_destroy(cache));
    CUDA_OK(cudaStreamDestroy(s));
}

int main(void)
{
    int ndev = 0;
    if (ferry_gpu_device_count(&ndev) != FERRY_OK) {
        TU_RUN(test_no_device);
        printf("no CUDA device: the calls return FERRY_ENODEV and configure fails cleanly; "
               "skipped\n");
        return TU_SKIP;
    }
    struct cudaDeviceProp prop;
    CUDA_OK(cudaGetDeviceProperties(&prop, DEV));
    printf("device %d: %s, integrated %d\n", DEV, prop.name, prop.integrated);
    warm_up();
    TU_RUN(test_lifecycle_gpu);
    return 0;
}
