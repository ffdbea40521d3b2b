/*
 * `ferry bench gpu`, part 1: the image adapter experiment of the first user report, done as a
 * controlled comparison. Three camera processes publish 1280x720 RGB8 frames (2,764,800 B)
 * through ferry, at 30 fps each or as fast as this process takes them. For every taken frame
 * this process asks the strategy under test for a device buffer, copies the frame in
 * (ferry_gpu_sample_copy: from the registered publisher pages, at pinned speed), runs a consumer
 * kernel (a checksum into the frame's own slot) and releases the buffer. Strategies, all
 * through the same ferry_gpu_cache calls:
 *   cudaMalloc           MALLOC backend: cudaMalloc, then at release a CPU wait and cudaFree
 *   async-threshold-0    ASYNC backend, a pool of its own, release threshold 0 (CUDA's default)
 *   async-threshold-max  ASYNC backend, a pool of its own, release threshold UINT64_MAX
 *   ferry-cache          CACHE backend
 * Modes: synced (cudaStreamSynchronize per frame, then the sample is released) and pipelined
 * (no per-frame wait: an event recorded after the frame's work, from a fixed ring as deep as
 * max_live, is polled before the sample is released); each at 30 fps and flat out. The floor
 * rows use one buffer per camera allocated beforehand: the copy and the kernel alone, synced.
 *
 * One stream per camera, so buffers move between streams the way they do between camera
 * callbacks. Every checksum is checked against the pattern the camera wrote: a buffer handed
 * out while earlier work still used it shows up as a wrong checksum.
 */
#include "gpu_bench.h"
#include "adapter.h"

#include "bench.h"
#include "cli.h"
#include <ferry/gpu.h>

#include <cuda_runtime.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct strategy {
    const char *name;
    bool floor;
    ferry_gpu_backend backend;
    uint64_t threshold;
} strategy;

static const strategy strategies[] = {
    {"floor", true, FERRY_GPU_BACKEND_CACHE, 0},
    {"cudaMalloc", false, FERRY_GPU_BACKEND_MALLOC, 0},
    {"async-threshold-0", false, FERRY_GPU_BACKEND_ASYNC, 0},
    {"async-threshold-max", false, FERRY_GPU_BACKEND_ASYNC, UINT64_MAX},
    {"ferry-cache", false, FERRY_GPU_BACKEND_CACHE, 0},
};
#define NSTRATEGIES (sizeof strategies / sizeof strategies[0])
#define FLOOR 0
#define CACHE_STRATEGY 4

typedef struct mode {
    const char *name;
    bool paced;
    bool pipelined;
} mode;

static const mode modes[] = {
    {"synced-30fps", true, false},
    {"pipelined-30fps", true, true},
    {"synced-flat", false, false},
    {"pipelined-flat", false, true},
};
#define NMODES (sizeof modes / sizeof modes[0])

/* One row's results. */
typedef struct row_result {
    bool ran;
    uint64_t frames;
    double fps;
    uint64_t device_allocs;
    uint64_t retained;
    double p50, p99, max, cpu_per_frame, alloc_p50; /* microseconds */
    uint64_t dropped;
    uint64_t errors;
} row_result;

typedef struct inflight {
    ferry_sample sample;
    int cam;
    int64_t t0;
    bool measured;
} inflight;

typedef struct adapter {
    const bench_gpu_args *a;
    const char *dir;
    adapter_ctl *ctl;
    cudaStream_t streams[CAMERAS];
    cudaEvent_t ring_ev[RING];
    inflight ring[RING];
    unsigned ring_head, ring_count;
    unsigned long long *d_slots;
    unsigned long long *h_slots;
    uint64_t *seqs;
    uint8_t *cams;
    size_t nframes;
    bool slots_full;
    void *floor_buf[CAMERAS];
    uint64_t fixed_sum;

    /* this row */
    const strategy *st;
    const mode *md;
    pid_t pids[CAMERAS];
    ferry_node *node;
    ferry_subscriber *subs[CAMERAS];
    ferry_waitset *ws;
    ferry_gpu_cache *cache;
    cli_lat lat, alloc_lat;
    uint64_t bad_frames;

    cli_lat strategy_alloc[NSTRATEGIES];
    row_result results[NSTRATEGIES][NMODES];
} adapter;

static int fail_cuda(const char *what, cudaError_t e)
{
    return cli_fail("bench gpu", 1, "adapter: %s: %s", what, cudaGetErrorString(e));
}

static int fail_ferry(const char *what, ferry_err e)
{
    return cli_fail("bench gpu", 1, "adapter: %s: %s", what, ferry_strerror(e));
}

static uint64_t expected_sum(const adapter *g, uint64_t seq, uint32_t cam)
{
    return bench_adapter_expected(g->fixed_sum, seq, cam);
}

/* ---------------------------------------------------------------------------------------------
 * The consumer
 * ------------------------------------------------------------------------------------------- */

/* Releases the oldest pipelined frames whose work completed; waits for the first when block. */
static int reap(adapter *g, bool block)
{
    while (g->ring_count) {
        unsigned k = g->ring_head;
        cudaError_t e = block ? cudaEventSynchronize(g->ring_ev[k]) : cudaEventQuery(g->ring_ev[k]);
        if (e == cudaErrorNotReady)
            return 0;
        if (e != cudaSuccess)
            return fail_cuda("frame event", e);
        inflight *f = &g->ring[k];
        if (f->measured)
            cli_lat_add(&g->lat, cli_now_ns() - f->t0);
        ferry_err err = ferry_release(g->subs[f->cam], &f->sample);
        if (err)
            return fail_ferry("release sample", err);
        g->ring_head = (k + 1) % RING;
        g->ring_count--;
        block = false;
    }
    return 0;
}

/* One taken frame: device buffer, copy, kernel, release. */
static int frame(adapter *g, int cam, ferry_sample *smp, bool measured)
{
    ferry_subscriber *sub = g->subs[cam];
    frame_header h = {0};
    if (smp->size == FRAME_BYTES)
        memcpy(&h, smp->data, sizeof h);
    bool intact = h.magic == FRAME_MAGIC && h.camera == (uint32_t)cam;
    if (!intact || g->nframes >= SLOTS) {
        if (!intact)
            g->bad_frames++;
        else
            g->slots_full = true;
        ferry_err err = ferry_release(sub, smp);
        return err ? fail_ferry("release sample", err) : 0;
    }
    size_t idx = g->nframes++;
    g->seqs[idx] = h.seq;
    g->cams[idx] = (uint8_t)cam;
    cudaStream_t s = g->streams[cam];

    int64_t t0 = cli_now_ns();
    ferry_gpu_buffer *buf = NULL;
    void *dptr = g->floor_buf[cam];
    if (g->cache) {
        ferry_err err = ferry_gpu_alloc(g->cache, smp->size, s, &buf);
        int64_t t1 = cli_now_ns();
        if (err)
            return fail_ferry("ferry_gpu_alloc", err);
        if (measured)
            cli_lat_add(&g->alloc_lat, t1 - t0);
        dptr = ferry_gpu_buffer_ptr(buf);
    }
    ferry_err err = ferry_gpu_sample_copy(sub, smp, g->a->device, dptr, s);
    if (err)
        return fail_ferry("ferry_gpu_sample_copy", err);
    cudaError_t e = bench_adapter_checksum(dptr, smp->size, g->d_slots + idx, s);
    if (e != cudaSuccess)
        return fail_cuda("checksum kernel", e);
    /* Stream order keeps the buffer's work before any reuse: released at once. */
    if (buf && (err = ferry_gpu_release(buf)))
        return fail_ferry("ferry_gpu_release", err);

    if (!g->md->pipelined) {
        if ((e = cudaStreamSynchronize(s)) != cudaSuccess)
            return fail_cuda("cudaStreamSynchronize", e);
        int64_t t1 = cli_now_ns();
        if ((err = ferry_release(sub, smp)))
            return fail_ferry("release sample", err);
        if (measured)
            cli_lat_add(&g->lat, t1 - t0);
        return 0;
    }
    unsigned k = (g->ring_head + g->ring_count) % RING;
    if ((e = cudaEventRecord(g->ring_ev[k], s)) != cudaSuccess)
        return fail_cuda("cudaEventRecord", e);
    g->ring[k] = (inflight){.sample = *smp, .cam = cam, .t0 = t0, .measured = measured};
    g->ring_count++;
    return 0;
}

static uint64_t dropped_now(adapter *g)
{
    uint64_t d = 0;
    for (int i = 0; i < CAMERAS; i++) {
        ferry_subscriber_stats s;
        if (g->subs[i] && ferry_subscriber_stats_get(g->subs[i], &s) == FERRY_OK)
            d += s.dropped;
    }
    return d;
}

static void stop_cameras(adapter *g)
{
    atomic_store(&g->ctl->stop, 1);
    for (int i = 0; i < CAMERAS; i++) {
        if (g->pids[i] <= 0)
            continue;
        char what[32];
        snprintf(what, sizeof what, "camera %d", i);
        if (bench_adapter_reap(g->pids[i], (int64_t)5 * 1000000000, what) == 0) {
            fprintf(stderr, "ferry bench gpu: adapter: camera %d failed\n", i);
            atomic_store(&g->ctl->failed, 1);
        }
        g->pids[i] = 0;
    }
}

static void teardown_row(adapter *g)
{
    for (int i = 0; i < CAMERAS; i++)
        cudaStreamSynchronize(g->streams[i]);
    while (g->ring_count) {
        inflight *f = &g->ring[g->ring_head];
        ferry_release(g->subs[f->cam], &f->sample);
        g->ring_head = (g->ring_head + 1) % RING;
        g->ring_count--;
    }
    atomic_store(&g->ctl->stop, 1);
    for (int i = 0; i < CAMERAS; i++) {
        if (g->subs[i]) {
            if (g->ws)
                ferry_waitset_remove(g->ws, g->subs[i]);
            ferry_subscriber_destroy(g->subs[i]);
            g->subs[i] = NULL;
        }
    }
    if (g->ws)
        ferry_waitset_destroy(g->ws);
    g->ws = NULL;
    if (g->node)
        ferry_node_destroy(g->node);
    g->node = NULL;
    stop_cameras(g);
    if (g->cache) {
        ferry_err err = ferry_gpu_cache_destroy(g->cache);
        if (err)
            fail_ferry("cache destroy", err);
    }
    g->cache = NULL;
}

static int start_row(adapter *g)
{
    atomic_store(&g->ctl->stop, 0);
    atomic_store(&g->ctl->failed, 0);
    for (int i = 0; i < CAMERAS; i++)
        if ((g->pids[i] = bench_adapter_spawn_camera(g->dir, i, g->md->paced, g->ctl)) < 0)
            return 1;

    ferry_node_options no;
    ferry_node_options_init(&no);
    no.dir = g->dir;
    no.name = "adapter";
    ferry_err err = ferry_node_create(&g->node, &no);
    if (err)
        return fail_ferry("node", err);
    if ((err = ferry_waitset_create(&g->ws, g->node)))
        return fail_ferry("waitset", err);
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = SUB_DEPTH;
    /* Paced cameras never wait for the consumer (a late frame drops the oldest); flat-out
     * cameras publish as fast as the consumer takes. */
    so.overflow = g->md->paced ? FERRY_OVERFLOW_DROP_OLDEST : FERRY_OVERFLOW_BLOCK;
    so.max_held = RING + 4;
    for (int i = 0; i < CAMERAS; i++) {
        char topic[64];
        snprintf(topic, sizeof topic, "/bench/gpu/adapter/cam%d", i);
        if ((err = ferry_subscriber_create(&g->subs[i], g->node, topic, FRAME_TYPE,
                                           ferry_hash(FRAME_TYPE), &so)))
            return fail_ferry("subscriber", err);
        if ((err = ferry_waitset_add(g->ws, g->subs[i], (void *)(intptr_t)(i + 1))))
            return fail_ferry("waitset add", err);
    }
    for (int i = 0; i < CAMERAS; i++)
        if ((err = ferry_subscriber_wait_publishers(g->subs[i], 1, CONNECT_NS)))
            return fail_ferry("waiting for the cameras", err);

    if (!g->st->floor &&
        bench_adapter_cache(&g->cache, g->a->device, g->st->backend, g->st->threshold, RING) != 0)
        return 1;
    cudaError_t e = cudaMemset(g->d_slots, 0, SLOTS * sizeof *g->d_slots);
    if (e == cudaSuccess)
        e = cudaDeviceSynchronize();
    if (e != cudaSuccess)
        return fail_cuda("clearing the slots", e);
    g->nframes = 0;
    g->slots_full = false;
    g->bad_frames = 0;
    g->lat.count = 0;
    g->alloc_lat.count = 0;
    return 0;
}

static uint64_t verify(adapter *g)
{
    if (g->nframes == 0)
        return 0;
    cudaError_t e =
        cudaMemcpy(g->h_slots, g->d_slots, g->nframes * sizeof *g->h_slots, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
        fail_cuda("reading the checksums", e);
        return g->nframes;
    }
    uint64_t bad = 0;
    for (size_t i = 0; i < g->nframes; i++) {
        uint64_t want = expected_sum(g, g->seqs[i], g->cams[i]);
        if (g->h_slots[i] != want) {
            if (bad < 5)
                fprintf(stderr,
                        "ferry bench gpu: adapter: frame %zu (camera %u, seq %" PRIu64
                        "): checksum %llx, expected %" PRIx64 "\n",
                        i, g->cams[i], g->seqs[i], g->h_slots[i], want);
            bad++;
        }
    }
    return bad;
}

static int run_row(adapter *g, row_result *r)
{
    memset(r, 0, sizeof *r);
    int rc = start_row(g);
    int64_t warm = g->md->paced ? (g->a->quick ? 500 : 1000) : (g->a->quick ? 300 : 1000);
    int64_t meas = g->md->paced ? (g->a->quick ? 2500 : 15000) : (g->a->quick ? 1500 : 8000);
    warm *= 1000000;
    meas *= 1000000;

    ferry_gpu_cache_stats s0 = {0}, s1 = {0};
    int64_t t_start = cli_now_ns(), t_meas = 0, t_end = 0, cpu0 = 0, cpu1 = 0;
    uint64_t dropped0 = 0;
    bool measuring = false;
    while (rc == 0) {
        int64_t now = cli_now_ns();
        if (!measuring && now >= t_start + warm) {
            measuring = true;
            t_meas = now;
            if (g->cache)
                ferry_gpu_cache_stats_get(g->cache, &s0);
            dropped0 = dropped_now(g);
            cpu0 = cli_cpu_ns();
        }
        if (measuring && now >= t_meas + meas)
            break;
        if (g->slots_full || atomic_load(&g->ctl->failed)) {
            if (atomic_load(&g->ctl->failed))
                rc = cli_fail("bench gpu", 1, "adapter: a camera failed");
            break;
        }
        if (g->md->pipelined && (rc = reap(g, g->ring_count == RING)) != 0)
            break;
        void *ready[CAMERAS];
        size_t n = 0;
        int64_t timeout = g->md->pipelined && g->ring_count ? 50000 : 10000000;
        ferry_err err = ferry_waitset_wait(g->ws, timeout, ready, CAMERAS, &n);
        if (err == FERRY_ETIMEDOUT)
            continue;
        if (err) {
            rc = fail_ferry("waitset wait", err);
            break;
        }
        for (size_t i = 0; i < n && rc == 0; i++) {
            int cam = (int)(intptr_t)ready[i] - 1;
            if (g->md->pipelined && g->ring_count == RING && (rc = reap(g, true)) != 0)
                break;
            ferry_sample smp;
            err = ferry_take(g->subs[cam], &smp);
            if (err == FERRY_EAGAIN)
                continue;
            if (err) {
                rc = fail_ferry("take", err);
                break;
            }
            rc = frame(g, cam, &smp, measuring);
        }
    }
    /* Frames still in flight were measured: wait for them, then read the clocks. */
    while (rc == 0 && g->ring_count)
        rc = reap(g, true);
    t_end = cli_now_ns();
    cpu1 = cli_cpu_ns();
    if (rc == 0) {
        r->dropped = dropped_now(g) - dropped0;
        for (int i = 0; i < CAMERAS; i++)
            cudaStreamSynchronize(g->streams[i]);
        if (g->cache) {
            ferry_gpu_cache_stats_get(g->cache, &s1);
            r->device_allocs = s1.device_allocs - s0.device_allocs;
            /* What stays with the allocator once every buffer is released and the streams
             * are idle: the cache's idle buffers, the pool's reserve. */
            r->retained = s1.idle_bytes;
        } else {
            r->retained = CAMERAS * FRAME_BYTES;
        }
    }
    teardown_row(g);
    if (rc)
        return rc;

    r->ran = true;
    uint64_t measured_frames = g->lat.count; /* every measured frame left one latency */
    r->frames = measured_frames;
    double secs = (double)(t_end - t_meas) / 1e9;
    r->fps = secs > 0 ? (double)measured_frames / secs : 0;
    r->cpu_per_frame = measured_frames ? (double)(cpu1 - cpu0) / 1e3 / (double)measured_frames : 0;
    r->p50 = (double)cli_lat_pct(&g->lat, 50) / 1e3;
    r->p99 = (double)cli_lat_pct(&g->lat, 99) / 1e3;
    r->max = (double)cli_lat_max(&g->lat) / 1e3;
    r->alloc_p50 = (double)cli_lat_pct(&g->alloc_lat, 50) / 1e3;
    cli_lat *agg = &g->strategy_alloc[g->st - strategies];
    for (size_t i = 0; i < g->alloc_lat.count; i++)
        cli_lat_add(agg, g->alloc_lat.ns[i]);
    r->errors = verify(g) + g->bad_frames;
    if (g->slots_full)
        fprintf(stderr, "ferry bench gpu: adapter: %zu frames: the rest of the row was not run\n",
                SLOTS);
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Driver
 * ------------------------------------------------------------------------------------------- */

static int setup(adapter *g)
{
    cudaError_t e = cudaSetDevice(g->a->device);
    if (e != cudaSuccess)
        return fail_cuda("cudaSetDevice", e);
    for (int i = 0; i < CAMERAS; i++) {
        if ((e = cudaStreamCreateWithFlags(&g->streams[i], cudaStreamNonBlocking)) != cudaSuccess)
            return fail_cuda("cudaStreamCreate", e);
        if ((e = cudaMalloc(&g->floor_buf[i], FRAME_BYTES)) != cudaSuccess)
            return fail_cuda("cudaMalloc", e);
    }
    for (int i = 0; i < RING; i++)
        if ((e = cudaEventCreateWithFlags(
                 &g->ring_ev[i], cudaEventDisableTiming | cudaEventBlockingSync)) != cudaSuccess)
            return fail_cuda("cudaEventCreate", e);
    if ((e = cudaMalloc((void **)&g->d_slots, SLOTS * sizeof *g->d_slots)) != cudaSuccess)
        return fail_cuda("cudaMalloc", e);
    g->h_slots = malloc(SLOTS * sizeof *g->h_slots);
    g->seqs = malloc(SLOTS * sizeof *g->seqs);
    g->cams = malloc(SLOTS * sizeof *g->cams);
    bool ok = g->h_slots && g->seqs && g->cams && cli_lat_init(&g->lat, SLOTS) &&
              cli_lat_init(&g->alloc_lat, SLOTS);
    for (size_t i = 0; i < NSTRATEGIES; i++)
        ok = ok && cli_lat_init(&g->strategy_alloc[i], strategies[i].floor ? 0 : SLOTS);
    if (!ok)
        return cli_fail("bench gpu", 1, "adapter: out of memory");
    g->ctl = mmap(NULL, sizeof *g->ctl, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (g->ctl == MAP_FAILED) {
        g->ctl = NULL;
        return cli_fail("bench gpu", 1, "adapter: mmap: %s", strerror(errno));
    }
    g->fixed_sum = bench_adapter_fixed_sum();
    return 0;
}

static void cleanup(adapter *g)
{
    for (int i = 0; i < CAMERAS; i++) {
        if (g->streams[i]) {
            cudaStreamSynchronize(g->streams[i]);
            cudaStreamDestroy(g->streams[i]);
        }
        cudaFree(g->floor_buf[i]);
    }
    for (int i = 0; i < RING; i++)
        if (g->ring_ev[i])
            cudaEventDestroy(g->ring_ev[i]);
    cudaFree(g->d_slots);
    (void)cudaGetLastError();
    free(g->h_slots);
    free(g->seqs);
    free(g->cams);
    cli_lat_free(&g->lat);
    cli_lat_free(&g->alloc_lat);
    for (size_t i = 0; i < NSTRATEGIES; i++)
        cli_lat_free(&g->strategy_alloc[i]);
    if (g->ctl)
        munmap(g->ctl, sizeof *g->ctl);
}

static void print_row(const adapter *g, const row_result *r)
{
    printf("  %-20s %-16s %7" PRIu64 " %8.1f %7" PRIu64
           " %9.1f %8.1f %8.1f %8.1f %7.1f %8.3f %6" PRIu64 " %4" PRIu64 "\n",
           g->st->name, g->md->name, r->frames, r->fps, r->device_allocs,
           (double)r->retained / (1024.0 * 1024.0), r->p50, r->p99, r->max, r->cpu_per_frame,
           r->alloc_p50, r->dropped, r->errors);
    fflush(stdout);
    if (g->a->csv) {
        fprintf(g->a->csv,
                "%s,%s,%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%.2f,%.2f,%.2f,%.2f,%" PRIu64 "\n",
                g->st->name, g->md->name, r->frames, r->device_allocs, r->retained, r->p50, r->p99,
                r->max, r->cpu_per_frame, r->dropped);
        fflush(g->a->csv);
    }
}

static int check(const char *what, bool pass, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int check(const char *what, bool pass, const char *fmt, ...)
{
    char detail[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    printf("  target %-52s %s (%s)\n", what, pass ? "PASS" : "MISS", detail);
    return pass ? 0 : 1;
}

static int same_stream_hit(int device, double *p50_us, double *p99_us);

static void targets(adapter *g)
{
    double same_p50 = -1, same_p99 = -1;
    same_stream_hit(g->a->device, &same_p50, &same_p99);
    printf("ferry-cache hit on the buffer's own stream (one camera per stream, 10000 calls): "
           "p50 %.3f us, p99 %.3f us\n",
           same_p50, same_p99);
    printf("alloc call p50 per strategy (all its rows; three cameras on three streams share one "
           "cache, so most reuses cross streams and query an event):\n");
    for (size_t i = 0; i < NSTRATEGIES; i++)
        if (!strategies[i].floor)
            printf("  %-20s %8.3f us (%zu calls)\n", strategies[i].name,
                   (double)cli_lat_pct(&g->strategy_alloc[i], 50) / 1e3,
                   g->strategy_alloc[i].count);
    int missed = 0, total = 0;
    double hit = (double)cli_lat_pct(&g->strategy_alloc[CACHE_STRATEGY], 50) / 1e3;
    total++;
    missed += check("ferry-cache alloc (hit) p50 <= 0.5 us", same_p50 >= 0 && same_p50 <= 0.5,
                    "%.3f us on its own stream; %.3f us across three streams", same_p50, hit);
    for (size_t m = 0; m < NMODES; m++) {
        const row_result *c = &g->results[CACHE_STRATEGY][m];
        if (!c->ran)
            continue;
        char what[96];
        snprintf(what, sizeof what, "ferry-cache %s: 0 device allocs in steady state",
                 modes[m].name);
        total++;
        missed += check(what, c->device_allocs == 0, "%" PRIu64 " in %" PRIu64 " frames",
                        c->device_allocs, c->frames);
        snprintf(what, sizeof what, "ferry-cache %s: retained <= idle cap", modes[m].name);
        total++;
        missed += check(what, c->retained <= IDLE_CAP, "%.1f MiB",
                        (double)c->retained / (1024.0 * 1024.0));
        const row_result *f = &g->results[FLOOR][m];
        if (modes[m].pipelined || !f->ran)
            continue;
        snprintf(what, sizeof what, "ferry-cache %s: p50 <= 1.1x floor", modes[m].name);
        total++;
        missed += check(what, c->p50 <= 1.1 * f->p50, "%.1f us vs floor %.1f us = %.2fx", c->p50,
                        f->p50, f->p50 > 0 ? c->p50 / f->p50 : 0);
        snprintf(what, sizeof what, "ferry-cache %s: max < 3x p50", modes[m].name);
        total++;
        missed += check(what, c->max < 3 * c->p50, "max %.1f us, p50 %.1f us", c->max, c->p50);
    }
    printf("  targets met: %d of %d\n", total - missed, total);
}

/* The hit path alone: allocations and releases on one stream, as one camera's adapter makes
 * them, with no other work in between. */
static int same_stream_hit(int device, double *p50_us, double *p99_us)
{
    ferry_gpu_cache_options o;
    ferry_gpu_cache_options_init(&o);
    o.device = device;
    ferry_gpu_cache *c = NULL;
    cudaStream_t s = NULL;
    cli_lat lat;
    if (!cli_lat_init(&lat, 10000))
        return -1;
    int rc = -1;
    if (ferry_gpu_cache_create(&c, &o) != FERRY_OK ||
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
        goto out;
    for (int i = 0; i < 10100; i++) {
        ferry_gpu_buffer *b = NULL;
        int64_t t0 = cli_now_ns();
        ferry_err err = ferry_gpu_alloc(c, FRAME_BYTES, s, &b);
        int64_t t1 = cli_now_ns();
        if (err != FERRY_OK)
            goto out;
        if (i >= 100) /* the first ones carve and warm up */
            cli_lat_add(&lat, t1 - t0);
        if (ferry_gpu_release(b) != FERRY_OK)
            goto out;
    }
    *p50_us = (double)cli_lat_pct(&lat, 50) / 1e3;
    *p99_us = (double)cli_lat_pct(&lat, 99) / 1e3;
    rc = 0;
out:
    if (s) {
        cudaStreamSynchronize(s);
        cudaStreamDestroy(s);
    }
    if (c)
        ferry_gpu_cache_destroy(c);
    cli_lat_free(&lat);
    return rc;
}

int bench_gpu_adapter(const bench_gpu_args *a)
{
    int ndev = 0;
    ferry_err err = ferry_gpu_device_count(&ndev);
    if (err)
        return fail_ferry("no CUDA device", err);
    if (a->device < 0 || a->device >= ndev)
        return cli_fail("bench gpu", 2, "adapter: no device %d (%d found)", a->device, ndev);
    adapter *g = calloc(1, sizeof *g);
    if (!g)
        return cli_fail("bench gpu", 1, "adapter: out of memory");
    g->a = a;
    char own_dir[256] = "";
    g->dir = a->dir;
    if (!g->dir) {
        if (!cli_private_dir("ferry-adapter-", own_dir, sizeof own_dir)) {
            free(g);
            return 1;
        }
        g->dir = own_dir;
    }
    /* A camera that died must not take this process with it. */
    struct sigaction ign, old_pipe;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ign, &old_pipe);

    int rc = setup(g);
    uint64_t errors = 0;
    if (rc == 0) {
        struct cudaDeviceProp prop;
        if (cudaGetDeviceProperties(&prop, a->device) == cudaSuccess)
            printf("adapter: device %d %s; %d cameras x %zu B frames; pipelined depth %d%s\n",
                   a->device, prop.name, CAMERAS, FRAME_BYTES, RING, a->quick ? " (quick)" : "");
        printf("  latency: frame taken -> its kernel done (pipelined: seen done by polling); "
               "cpu: this process per frame; alloc: ferry_gpu_alloc call\n");
        printf("  %-20s %-16s %7s %8s %7s %9s %8s %8s %8s %7s %8s %6s %4s\n", "strategy", "mode",
               "frames", "fps", "dallocs", "kept_MiB", "p50_us", "p99_us", "max_us", "cpu_us",
               "alloc_us", "dropped", "err");
        if (a->csv && ftell(a->csv) == 0)
            fprintf(a->csv, "strategy,mode,frames,device_allocs,retained_bytes,p50_us,p99_us,"
                            "max_us,cpu_us_per_frame,dropped\n");
    }
    for (size_t m = 0; m < NMODES && rc == 0; m++) {
        for (size_t s = 0; s < NSTRATEGIES && rc == 0; s++) {
            if (strategies[s].floor && modes[m].pipelined)
                continue;
            g->st = &strategies[s];
            g->md = &modes[m];
            row_result *r = &g->results[s][m];
            rc = run_row(g, r);
            if (rc == 0) {
                print_row(g, r);
                errors += r->errors;
            }
        }
    }
    if (rc == 0) {
        targets(g);
        if (errors) {
            printf("  integrity: %" PRIu64 " frames with a wrong checksum: FAIL\n", errors);
            rc = 1;
        } else {
            printf("  integrity: every frame's checksum matched its pattern\n");
        }
    }
    cleanup(g);
    sigaction(SIGPIPE, &old_pipe, NULL);
    if (own_dir[0])
        cli_rmtree(own_dir);
    free(g);
    return rc;
}
