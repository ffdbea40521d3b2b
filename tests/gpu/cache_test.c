/*
 * The device buffer cache (gpu.h): reuse without device allocations, reuse across streams only
 * after the earlier uses (ordered on the GPU, never by a CPU wait), holds of several consumers,
 * shutdown while kernels still run, the idle cap and trim, the bound on live buffers, bad
 * arguments and stale handles; each for the three backends where it means something.
 *
 * Kernels that read a buffer spin first (tens of milliseconds of GPU time), so a buffer handed
 * out again too early is overwritten under them and they count the damage. A control run
 * without record_use shows that the readers do see such damage.
 *
 * Without a device every call is checked to fail cleanly and the test exits 77 (skipped).
 * --short (or FERRY_GPU_TEST_SHORT=1) runs fewer cycles and skips the timing-dependent control,
 * for runs under compute-sanitizer, which serialises kernels.
 */
#include "cache_kernels.h"
#include "gpu_testutil.h"
#include "testutil.h"

#include <ferry/gpu.h>

#include "gpu/internal.h"

#include <cuda_runtime.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* In cache.c, not in gpu.h: CUDA runtime calls the cache has made. */

#define MB ((size_t)1 << 20)
#define SPIN_NS ((uint64_t)50 * 1000000)

static bool short_mode;
static int device_count;
static cudaStream_t sa, sb, sc; /* non-blocking streams: A allocates, B and C consume */
static unsigned int *d_errors;  /* device counters of the reader kernels */
static const char *test_name = "?";

static const char *backend_name(ferry_gpu_backend b)
{
    switch (b) {
    case FERRY_GPU_BACKEND_CACHE:
        return "cache";
    case FERRY_GPU_BACKEND_ASYNC:
        return "async";
    case FERRY_GPU_BACKEND_MALLOC:
        return "malloc";
    }
    return "?";
}

static ferry_gpu_cache_options options(ferry_gpu_backend backend)
{
    ferry_gpu_cache_options o;
    ferry_gpu_cache_options_init(&o);
    o.backend = backend;
    o.own_pool = true;
    return o;
}

static ferry_gpu_cache *make(const ferry_gpu_cache_options *o)
{
    ferry_gpu_cache *c = NULL;
    TU_OK(ferry_gpu_cache_create(&c, o));
    TU_CHECK(c != NULL);
    return c;
}

static ferry_gpu_cache_stats stats(ferry_gpu_cache *c)
{
    ferry_gpu_cache_stats s;
    TU_OK(ferry_gpu_cache_stats_get(c, &s));
    return s;
}

static void sync_all(void)
{
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaGetLastError());
}

static void zero_errors(void)
{
    CUDA_OK(cudaMemset(d_errors, 0, 4 * sizeof *d_errors));
    sync_all();
}

static unsigned int read_errors(int i)
{
    unsigned int h[4];
    sync_all();
    CUDA_OK(cudaMemcpy(h, d_errors, sizeof h, cudaMemcpyDeviceToHost));
    return h[i];
}

static int64_t ms_since(ferry_time t)
{
    return tu_since(t) / TU_MS;
}

/* Ends a test: every buffer released, the cache destroyed, no CUDA error left behind. */
static void finish(ferry_gpu_cache *c)
{
    ferry_gpu_cache_stats s = stats(c);
    TU_EQ_U64(s.live_buffers, 0);
    TU_EQ_U64(s.live_bytes, 0);
    TU_OK(ferry_gpu_cache_destroy(c));
    sync_all();
}

typedef void (*backend_test)(ferry_gpu_backend backend);

static void run(const char *name, backend_test fn, ferry_gpu_backend backend)
{
    char full[128];
    snprintf(full, sizeof full, "%s/%s", name, backend_name(backend));
    test_name = full;
    printf("--- %s\n", full);
    fflush(stdout);
    fn(backend);
    printf("ok  %s\n", full);
    fflush(stdout);
    test_name = "?";
}

/* ---------------------------------------------------------------------------------------------
 * No device: every call fails cleanly.
 * ------------------------------------------------------------------------------------------- */

static void check_no_device(void)
{
    int n = -1;
    TU_ERR(ferry_gpu_device_count(&n), FERRY_ENODEV);
    TU_EQ_U64(n, 0);
    TU_ERR(ferry_gpu_device_count(NULL), FERRY_EINVAL);

    ferry_gpu_cache_options_init(NULL);
    static const ferry_gpu_backend backends[] = {FERRY_GPU_BACKEND_CACHE, FERRY_GPU_BACKEND_ASYNC,
                                                 FERRY_GPU_BACKEND_MALLOC};
    for (size_t i = 0; i < 3; i++) {
        ferry_gpu_cache_options o = options(backends[i]);
        ferry_gpu_cache *c = (ferry_gpu_cache *)&o; /* must stay untouched */
        TU_ERR(ferry_gpu_cache_create(&c, &o), FERRY_ENODEV);
        TU_EQ_PTR(c, &o);
        o.own_pool = false;
        TU_ERR(ferry_gpu_cache_create(&c, &o), FERRY_ENODEV);
        o.device = 3;
        TU_ERR(ferry_gpu_cache_create(&c, &o), FERRY_ENODEV);
        TU_ERR(ferry_gpu_cache_create(NULL, &o), FERRY_EINVAL);
    }
    ferry_gpu_cache *c = NULL;
    TU_ERR(ferry_gpu_cache_create(&c, NULL), FERRY_ENODEV);
    TU_CHECK(c == NULL);

    ferry_gpu_buffer *b = NULL;
    ferry_gpu_cache_stats s;
    TU_ERR(ferry_gpu_alloc(NULL, 4096, NULL, &b), FERRY_EINVAL);
    TU_ERR(ferry_gpu_alloc(NULL, 4096, NULL, NULL), FERRY_EINVAL);
    TU_CHECK(b == NULL);
    TU_CHECK(ferry_gpu_buffer_ptr(NULL) == NULL);
    TU_EQ_U64(ferry_gpu_buffer_size(NULL), 0);
    TU_ERR(ferry_gpu_retain(NULL), FERRY_EINVAL);
    TU_ERR(ferry_gpu_record_use(NULL, NULL), FERRY_EINVAL);
    TU_ERR(ferry_gpu_release(NULL), FERRY_EINVAL);
    TU_ERR(ferry_gpu_trim(NULL, 0), FERRY_EINVAL);
    TU_ERR(ferry_gpu_cache_stats_get(NULL, &s), FERRY_EINVAL);
    TU_ERR(ferry_gpu_cache_destroy(NULL), FERRY_EINVAL);
}

/* ---------------------------------------------------------------------------------------------
 * Steady state on one stream: no device allocation, and a hit makes no CUDA call.
 * ------------------------------------------------------------------------------------------- */

static void one_cycle(ferry_gpu_cache *c, size_t size, uint32_t value, uint64_t *alloc_calls,
                      void **ptr)
{
    ferry_gpu_buffer *b = NULL;
    uint64_t before = ferry__gpu_cache_cuda_calls(c);
    TU_OK(ferry_gpu_alloc(c, size, sa, &b));
    if (alloc_calls)
        *alloc_calls += ferry__gpu_cache_cuda_calls(c) - before;
    TU_CHECK(b != NULL);
    TU_EQ_U64(ferry_gpu_buffer_size(b), size);
    if (ptr)
        *ptr = ferry_gpu_buffer_ptr(b);
    CUDA_OK(ck_fill(ferry_gpu_buffer_ptr(b), size / 4, value, sa));
    TU_OK(ferry_gpu_release(b));
}

static void test_steady(ferry_gpu_backend backend)
{
    ferry_gpu_cache_options o = options(backend);
    ferry_gpu_cache *c = make(&o);
    const size_t size = 2764800; /* one 1280x720 RGB8 frame */
    const uint64_t cycles = short_mode ? 200 : 1000;

    for (uint32_t i = 0; i < 10; i++)
        one_cycle(c, size, i, NULL, NULL);
    ferry_gpu_cache_stats s0 = stats(c);
    uint64_t alloc_calls = 0;
    void *first = NULL;
    bool same_ptr = true;
    ferry_time t = ferry_now();
    for (uint64_t i = 0; i < cycles; i++) {
        void *p = NULL;
        one_cycle(c, size, (uint32_t)i, &alloc_calls, &p);
        if (i == 0)
            first = p;
        same_ptr = same_ptr && p == first;
    }
    int64_t elapsed = tu_since(t);
    ferry_gpu_cache_stats s1 = stats(c);
    printf("    %" PRIu64 " cycles: %.2f us per alloc+fill+release, device allocs %" PRIu64
           ", CUDA calls in alloc %" PRIu64 "\n",
           cycles, (double)elapsed / 1e3 / (double)cycles, s1.device_allocs - s0.device_allocs,
           alloc_calls);

    if (backend == FERRY_GPU_BACKEND_CACHE) {
        TU_EQ_U64(s1.device_allocs - s0.device_allocs, 0);
        TU_EQ_U64(s1.device_frees - s0.device_frees, 0);
        TU_EQ_U64(s1.misses - s0.misses, 0);
        TU_EQ_U64(s1.hits - s0.hits, cycles);
        TU_EQ_U64(s1.gpu_waits - s0.gpu_waits, 0);
        TU_EQ_U64(alloc_calls, 0); /* the hit path makes no CUDA call */
        TU_CHECK(same_ptr);
        TU_EQ_U64(s1.idle_buffers, 1);
        TU_CMP_U64(s1.idle_bytes, >=, size);
    } else {
        TU_EQ_U64(s1.device_allocs - s0.device_allocs, cycles);
        TU_EQ_U64(s1.device_frees - s0.device_frees, cycles);
    }
    TU_EQ_U64(s1.live_buffers, 0);
    sync_all();
    finish(c);
}

/* ASYNC on the device's default pool: works, and its release threshold is put back. */
static void test_default_pool(ferry_gpu_backend backend)
{
    cudaMemPool_t pool;
    CUDA_OK(cudaDeviceGetDefaultMemPool(&pool, 0));
    uint64_t before = 12345 * 4096, now = 0;
    CUDA_OK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &before));

    ferry_gpu_cache_options o = options(backend);
    o.own_pool = false;
    o.release_threshold = UINT64_MAX;
    ferry_gpu_cache *c = make(&o);
    CUDA_OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &now));
    TU_EQ_U64(now, UINT64_MAX);
    for (uint32_t i = 0; i < 20; i++)
        one_cycle(c, 3 * MB, i, NULL, NULL);
    sync_all();
    ferry_gpu_cache_stats s = stats(c);
    TU_EQ_U64(s.device_allocs, 20);
    TU_CMP_U64(s.idle_bytes, >=, 3 * MB); /* the pool kept it: threshold UINT64_MAX */
    TU_OK(ferry_gpu_trim(c, 0));
    TU_EQ_U64(stats(c).idle_bytes, 0);
    finish(c);
    CUDA_OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &now));
    TU_EQ_U64(now, before);
    uint64_t zero = 0;
    CUDA_OK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &zero));
}

/* ---------------------------------------------------------------------------------------------
 * Cross-stream safety: a reader on B still runs when the buffer is asked for again.
 * ------------------------------------------------------------------------------------------- */

#define P_VALUE 0x5a5a1234u
#define Q_VALUE 0xa5a5beefu

/* Allocates on A, writes P, starts a reader of P on B (spinning first). */
static ferry_gpu_buffer *start_reader(ferry_gpu_cache *c, size_t size, uint64_t spin_ns,
                                      cudaStream_t reader, int counter, bool record)
{
    ferry_gpu_buffer *b = NULL;
    TU_OK(ferry_gpu_alloc(c, size, sa, &b));
    CUDA_OK(ck_fill(ferry_gpu_buffer_ptr(b), size / 4, P_VALUE, sa));
    CUDA_OK(cudaStreamSynchronize(sa));
    CUDA_OK(ck_spin_check(ferry_gpu_buffer_ptr(b), size / 4, P_VALUE, spin_ns, d_errors + counter,
                          reader));
    if (record)
        TU_OK(ferry_gpu_record_use(b, reader));
    return b;
}

static void test_cross_stream(ferry_gpu_backend backend)
{
    ferry_gpu_cache_options o = options(backend);
    ferry_gpu_cache *c = make(&o);
    const size_t size = 4 * MB;
    cudaStream_t writers[2] = {sa, sc};

    /* With room under the idle cap the buffer still read is passed over: a new one, at once. */
    for (int w = 0; w < 2; w++) {
        zero_errors();
        ferry_gpu_buffer *b = start_reader(c, size, SPIN_NS, sb, 0, true);
        void *old = ferry_gpu_buffer_ptr(b);
        TU_OK(ferry_gpu_release(b));
        ferry_gpu_cache_stats s0 = stats(c);
        ferry_time t = ferry_now();
        ferry_gpu_buffer *b2 = NULL;
        TU_OK(ferry_gpu_alloc(c, size, writers[w], &b2));
        int64_t alloc_ms = ms_since(t);
        CUDA_OK(ck_fill(ferry_gpu_buffer_ptr(b2), size / 4, Q_VALUE, writers[w]));
        TU_OK(ferry_gpu_release(b2));
        ferry_gpu_cache_stats s1 = stats(c);
        unsigned int errors = read_errors(0);
        printf("    room under the cap, writer on %s: reader errors %u, alloc took %" PRId64
               " ms, busy skips +%" PRIu64 "\n",
               w == 0 ? "the owner stream" : "a third stream", errors, alloc_ms,
               s1.busy_skips - s0.busy_skips);
        TU_EQ_U64(errors, 0);
        if (backend == FERRY_GPU_BACKEND_CACHE) {
            TU_CHECK_MSG(w == 1 || ferry_gpu_buffer_ptr(b2) != old,
                         "a buffer still read on another stream was handed out again");
            TU_EQ_U64(s1.gpu_waits - s0.gpu_waits, 0);
            TU_CMP_I64(alloc_ms, <, (int64_t)(SPIN_NS / 2 / 1000000));
        }
        sync_all();
        TU_OK(ferry_gpu_trim(c, 0));
    }
    finish(c);

    /* A cap with no room for a second buffer: the same buffer, ordered after the reader on the
     * GPU, and still no CPU wait. */
    o.idle_cap_bytes = size;
    c = make(&o);
    for (int w = 0; w < 2; w++) {
        zero_errors();
        ferry_gpu_buffer *b = start_reader(c, size, SPIN_NS, sb, 0, true);
        void *old = ferry_gpu_buffer_ptr(b);
        TU_OK(ferry_gpu_release(b));
        ferry_gpu_cache_stats s0 = stats(c);

        ferry_time t = ferry_now();
        ferry_gpu_buffer *b2 = NULL;
        TU_OK(ferry_gpu_alloc(c, size, writers[w], &b2));
        int64_t alloc_ms = ms_since(t);
        CUDA_OK(ck_fill(ferry_gpu_buffer_ptr(b2), size / 4, Q_VALUE, writers[w]));
        TU_OK(ferry_gpu_release(b2));
        ferry_gpu_cache_stats s1 = stats(c);
        unsigned int errors = read_errors(0);
        printf("    writer on %s: reader errors %u, alloc took %" PRId64 " ms, gpu waits +%" PRIu64
               "\n",
               w == 0 ? "the owner stream" : "a third stream", errors, alloc_ms,
               s1.gpu_waits - s0.gpu_waits);
        TU_EQ_U64(errors, 0);
        if (backend == FERRY_GPU_BACKEND_CACHE) {
            /* The same buffer, ordered on the GPU: the CPU did not wait for the reader. */
            TU_EQ_PTR(ferry_gpu_buffer_ptr(b2), old);
            TU_EQ_U64(s1.hits - s0.hits, 1);
            TU_EQ_U64(s1.gpu_waits - s0.gpu_waits, 1);
            TU_CMP_I64(alloc_ms, <, (int64_t)(SPIN_NS / 2 / 1000000));
        }
    }

    if (backend == FERRY_GPU_BACKEND_CACHE && !short_mode) {
        /* Control: without record_use the cache cannot know about B, hands the buffer to A at
         * once and the writer runs under the reader, which must see it. Without this, a reader
         * that never catches anything would make the checks above meaningless. */
        zero_errors();
        ferry_gpu_buffer *b = start_reader(c, size, SPIN_NS, sb, 0, false);
        void *old = ferry_gpu_buffer_ptr(b);
        TU_OK(ferry_gpu_release(b));
        ferry_gpu_buffer *b2 = NULL;
        TU_OK(ferry_gpu_alloc(c, size, sa, &b2));
        TU_EQ_PTR(ferry_gpu_buffer_ptr(b2), old);
        CUDA_OK(ck_fill(ferry_gpu_buffer_ptr(b2), size / 4, Q_VALUE, sa));
        TU_OK(ferry_gpu_release(b2));
        unsigned int errors = read_errors(0);
        printf("    control without record_use: reader errors %u (must be > 0)\n", errors);
        TU_CMP_U64(errors, >, 0);
    }
    finish(c);
}

/* ---------------------------------------------------------------------------------------------
 * Several consumers: two holds, uses on B and C, released in either order.
 * ------------------------------------------------------------------------------------------- */

static void test_consumers(ferry_gpu_backend backend)
{
    ferry_gpu_cache_options o = options(backend);
    ferry_gpu_cache *c = make(&o);
    const size_t size = 2 * MB;
    const uint64_t long_ns = 80 * 1000000, short_ns = 20 * 1000000;

    for (int combo = 0; combo < 4; combo++) {
        bool b_first = combo & 1; /* which consumer releases first */
        bool b_long = combo & 2;  /* which reader reads late */
        zero_errors();
        ferry_gpu_buffer *b = NULL;
        TU_OK(ferry_gpu_alloc(c, size, sa, &b));
        void *ptr = ferry_gpu_buffer_ptr(b);
        CUDA_OK(ck_fill(ptr, size / 4, P_VALUE, sa));
        CUDA_OK(cudaStreamSynchronize(sa));
        TU_OK(ferry_gpu_retain(b));
        CUDA_OK(
            ck_spin_check(ptr, size / 4, P_VALUE, b_long ? long_ns : short_ns, d_errors + 0, sb));
        TU_OK(ferry_gpu_record_use(b, sb));
        CUDA_OK(
            ck_spin_check(ptr, size / 4, P_VALUE, b_long ? short_ns : long_ns, d_errors + 1, sc));
        TU_OK(ferry_gpu_record_use(b, sc));
        (void)b_first; /* holds are not tied to streams: the order shows in which runs first */

        TU_OK(ferry_gpu_release(b)); /* first consumer */
        TU_EQ_U64(stats(c).live_buffers, 1);
        ferry_gpu_buffer *other = NULL;
        TU_OK(ferry_gpu_alloc(c, size, b_first ? sb : sc, &other));
        TU_CHECK_MSG(ferry_gpu_buffer_ptr(other) != ptr,
                     "a buffer with a hold left was handed out again");
        TU_EQ_U64(stats(c).live_buffers, 2);

        TU_OK(ferry_gpu_release(b)); /* second consumer */
        TU_EQ_U64(stats(c).live_buffers, 1);
        TU_ERR(ferry_gpu_release(b), FERRY_ESTATE);

        ferry_gpu_cache_stats s0 = stats(c);
        ferry_gpu_buffer *again = NULL;
        TU_OK(ferry_gpu_alloc(c, size, sa, &again));
        if (backend == FERRY_GPU_BACKEND_CACHE) {
            /* Still read on B and C, with room under the cap: passed over (for a new buffer,
             * or one of an earlier round whose readers are done), no wait. */
            TU_CHECK(ferry_gpu_buffer_ptr(again) != ptr);
            TU_EQ_U64(stats(c).gpu_waits - s0.gpu_waits, 0);
        }
        CUDA_OK(ck_fill(ferry_gpu_buffer_ptr(again), size / 4, Q_VALUE, sa));
        TU_OK(ferry_gpu_release(again));
        TU_OK(ferry_gpu_release(other));
        unsigned int eb = read_errors(0), ec = read_errors(1);
        printf("    release %s first, %s reads late: errors B %u, C %u\n", b_first ? "B" : "C",
               b_long ? "B" : "C", eb, ec);
        TU_EQ_U64(eb, 0);
        TU_EQ_U64(ec, 0);
    }
    finish(c);
}

/* ---------------------------------------------------------------------------------------------
 * Slow readers: a camera at 30 fps whose frames are each read by two kernels on other streams
 * for 40 ms, longer than the frame period. The producer never waits for them (no GPU wait, no
 * slow allocation), no frame is overwritten while read, and the cache holds at most the frames
 * in flight plus two.
 * ------------------------------------------------------------------------------------------- */

static void test_slow_readers(ferry_gpu_backend backend)
{
    ferry_gpu_cache_options o = options(backend);
    ferry_gpu_cache *c = make(&o);
    const size_t size = 2764800; /* 1280x720 RGB8 */
    const int64_t period_ns = 33 * TU_MS, read_ns = 40 * TU_MS;
    const int frames = short_mode ? 20 : 60;
    enum { READERS = 4 };
    cudaStream_t readers[READERS];
    for (int i = 0; i < READERS; i++)
        CUDA_OK(cudaStreamCreateWithFlags(&readers[i], cudaStreamNonBlocking));
    cudaEvent_t filled;
    CUDA_OK(cudaEventCreateWithFlags(&filled, cudaEventDisableTiming));
    zero_errors();
    ferry_gpu_cache_stats s0 = stats(c);
    int64_t worst_alloc_ns = 0;
    uint64_t frame_bytes = 0; /* the capacity of the size's class */
    ferry_time start = ferry_now();
    for (int i = 0; i < frames; i++) {
        ferry_time t = ferry_now();
        ferry_gpu_buffer *b = NULL;
        TU_OK(ferry_gpu_alloc(c, size, sa, &b));
        if (tu_since(t) > worst_alloc_ns)
            worst_alloc_ns = tu_since(t);
        if (i == 0)
            frame_bytes = stats(c).live_bytes;
        uint32_t *p = ferry_gpu_buffer_ptr(b);
        CUDA_OK(ck_fill(p, size / 4, P_VALUE + (uint32_t)i, sa));
        CUDA_OK(cudaEventRecord(filled, sa));
        for (int k = 0; k < 2; k++) {
            cudaStream_t r = readers[(2 * i + k) % READERS];
            CUDA_OK(cudaStreamWaitEvent(r, filled, 0));
            CUDA_OK(ck_spin_check(p, size / 4, P_VALUE + (uint32_t)i, (uint64_t)read_ns,
                                  d_errors + k, r));
            TU_OK(ferry_gpu_record_use(b, r));
        }
        TU_OK(ferry_gpu_release(b));
        int64_t next = (int64_t)(i + 1) * period_ns - tu_since(start);
        if (next > 0)
            tu_sleep_ns(next);
    }
    ferry_gpu_cache_stats s1 = stats(c);
    unsigned int e0 = read_errors(0), e1 = read_errors(1);
    printf("    %d frames at 30 fps in %" PRId64 " ms, slowest alloc %" PRId64
           " us, gpu waits +%" PRIu64 ", busy skips +%" PRIu64 ", device allocs +%" PRIu64
           ", peak %" PRIu64 " bytes (%.1f frames), reader errors %u %u\n",
           frames, tu_since(start) / TU_MS, worst_alloc_ns / 1000, s1.gpu_waits - s0.gpu_waits,
           s1.busy_skips - s0.busy_skips, s1.device_allocs - s0.device_allocs, s1.peak_bytes,
           (double)s1.peak_bytes / (double)frame_bytes, e0, e1);
    TU_EQ_U64(e0, 0);
    TU_EQ_U64(e1, 0);
    if (backend == FERRY_GPU_BACKEND_CACHE) {
        TU_EQ_U64(s1.gpu_waits - s0.gpu_waits, 0);
        TU_CMP_I64(worst_alloc_ns, <, 10 * TU_MS);
        /* In flight: two frames read (40 ms > 33 ms), one filled; plus two. */
        TU_CMP_U64(s1.peak_bytes, <=, 5 * frame_bytes);
        TU_CMP_U64(s1.busy_skips - s0.busy_skips, >, 0);
    }
    sync_all();
    CUDA_OK(cudaEventDestroy(filled));
    for (int i = 0; i < READERS; i++)
        CUDA_OK(cudaStreamDestroy(readers[i]));
    finish(c);
}

/* ---------------------------------------------------------------------------------------------
 * Shutdown: destroy while kernels that use released buffers still run.
 * ------------------------------------------------------------------------------------------- */

static void test_shutdown(ferry_gpu_backend backend)
{
    int *flag = NULL, *d_flag = NULL;
    CUDA_OK(cudaHostAlloc((void **)&flag, sizeof *flag, cudaHostAllocMapped));
    CUDA_OK(cudaHostGetDevicePointer((void **)&d_flag, flag, 0));
    const size_t size = 1 * MB;
    const uint64_t spin_ns = 150 * 1000000;

    /* A live buffer: refused, nothing changed. */
    ferry_gpu_cache_options o = options(backend);
    ferry_gpu_cache *c = make(&o);
    ferry_gpu_buffer *b = NULL;
    TU_OK(ferry_gpu_alloc(c, size, sa, &b));
    TU_ERR(ferry_gpu_cache_destroy(c), FERRY_EBUSY);
    TU_OK(ferry_gpu_retain(b));
    TU_OK(ferry_gpu_release(b));
    TU_ERR(ferry_gpu_cache_destroy(c), FERRY_EBUSY);
    TU_OK(ferry_gpu_release(b));

    /* Buffers whose owner stream is gone by the time they are reused and freed. */
    cudaStream_t gone;
    CUDA_OK(cudaStreamCreateWithFlags(&gone, cudaStreamNonBlocking));
    ferry_gpu_buffer *g = NULL;
    TU_OK(ferry_gpu_alloc(c, size, gone, &g));
    CUDA_OK(ck_fill(ferry_gpu_buffer_ptr(g), size / 4, 1, gone));
    TU_OK(ferry_gpu_release(g));
    TU_OK(ferry_gpu_alloc(c, 3 * size, gone, &g));
    CUDA_OK(ck_fill(ferry_gpu_buffer_ptr(g), 3 * size / 4, 1, gone));
    TU_OK(ferry_gpu_release(g));
    CUDA_OK(cudaStreamDestroy(gone));
    TU_OK(ferry_gpu_alloc(c, size, sb, &g)); /* reuse after the owner stream was destroyed */
    TU_OK(ferry_gpu_release(g));

    /* Kernels on B still read released buffers when destroy is called. */
    *(volatile int *)flag = 0;
    ferry_gpu_buffer *bufs[3];
    for (int i = 0; i < 3; i++) {
        TU_OK(ferry_gpu_alloc(c, size * (size_t)(i + 1), sa, &bufs[i]));
        CUDA_OK(ck_fill(ferry_gpu_buffer_ptr(bufs[i]), size * (size_t)(i + 1) / 4, 7, sa));
    }
    CUDA_OK(cudaStreamSynchronize(sa));
    CUDA_OK(ck_spin_flag(ferry_gpu_buffer_ptr(bufs[2]), 3 * size / 4, spin_ns, d_flag, sb));
    TU_OK(ferry_gpu_record_use(bufs[2], sb));
    for (int i = 0; i < 3; i++)
        TU_OK(ferry_gpu_release(bufs[i]));
    ferry_time t = ferry_now();
    TU_OK(ferry_gpu_cache_destroy(c));
    int64_t destroy_ms = ms_since(t);
    int seen = *(volatile int *)flag;
    printf("    destroy took %" PRId64 " ms; kernel finished before it returned: %s\n", destroy_ms,
           seen ? "yes" : "no");
    if (backend != FERRY_GPU_BACKEND_ASYNC) {
        /* CACHE and MALLOC wait for the uses before cudaFree. (cudaFree may wait for the
         * device on its own; compute-sanitizer's memcheck sees a free under a running kernel.) */
        TU_CHECK_MSG(seen != 0, "destroy returned while a kernel still used a released buffer");
    }
    /* ASYNC frees in stream order: the kernel finishes, without error, after destroy too. */
    CUDA_OK(cudaStreamSynchronize(sb));
    TU_CHECK(*(volatile int *)flag != 0);
    sync_all();
    CUDA_OK(cudaFreeHost(flag));
}

/* ---------------------------------------------------------------------------------------------
 * Idle cap and trim
 * ------------------------------------------------------------------------------------------- */

static void test_idle_cap(ferry_gpu_backend backend)
{
    ferry_gpu_cache_options o = options(backend);
    const size_t cap = 8 * MB;
    o.idle_cap_bytes = cap;
    ferry_gpu_cache *c = make(&o);

    /* Many sizes released one by one: never more than the cap idle. */
    enum { N = 40 };
    ferry_gpu_buffer *bufs[N];
    size_t total = 0;
    for (int i = 0; i < N; i++) {
        size_t size = (size_t)64 * 1024 * (size_t)(1 + i % 24) + (size_t)i * 4096;
        TU_OK(ferry_gpu_alloc(c, size, sa, &bufs[i]));
        CUDA_OK(ck_fill(ferry_gpu_buffer_ptr(bufs[i]), size / 4, (uint32_t)i, sa));
        total += size;
    }
    for (int i = 0; i < N; i++) {
        TU_OK(ferry_gpu_release(bufs[i]));
        ferry_gpu_cache_stats s = stats(c);
        if (backend == FERRY_GPU_BACKEND_CACHE)
            TU_CMP_U64(s.idle_bytes, <=, cap);
        else if (backend == FERRY_GPU_BACKEND_MALLOC)
            TU_EQ_U64(s.idle_bytes, 0);
    }
    ferry_gpu_cache_stats s = stats(c);
    printf("    %d buffers, %zu bytes released; idle %" PRIu64 " bytes in %u buffers, %" PRIu64
           " device frees\n",
           N, total, s.idle_bytes, s.idle_buffers, s.device_frees);
    if (backend == FERRY_GPU_BACKEND_CACHE) {
        TU_CMP_U64(s.device_frees, >, 0);
        TU_CMP_U64(s.idle_bytes, >, cap / 2);
    }
    sync_all(); /* ASYNC: the frees are stream-ordered */
    TU_OK(ferry_gpu_trim(c, 0));
    s = stats(c);
    TU_EQ_U64(s.idle_bytes, 0);
    TU_EQ_U64(s.idle_buffers, 0);
    TU_EQ_U64(s.device_frees, s.device_allocs);
    finish(c);

    if (backend != FERRY_GPU_BACKEND_CACHE)
        return;

    /* Least recently used goes first. Capacities: 1 MiB, 1.125 MiB, 1.25 MiB, 0.75 MiB. */
    o.idle_cap_bytes = 3 * MB + MB / 2;
    c = make(&o);
    const size_t sizes[4] = {MB, MB + MB / 8, MB + MB / 4, 3 * MB / 4};
    for (int i = 0; i < 4; i++) {
        ferry_gpu_buffer *b = NULL;
        TU_OK(ferry_gpu_alloc(c, sizes[i], sa, &b));
        TU_OK(ferry_gpu_release(b));
    }
    s = stats(c);
    TU_EQ_U64(s.device_frees, 1);
    TU_EQ_U64(s.idle_bytes, 3 * MB + MB / 8);
    ferry_gpu_buffer *b = NULL;
    TU_OK(ferry_gpu_alloc(c, sizes[1], sa, &b)); /* still idle: a hit */
    TU_EQ_U64(stats(c).hits, 1);
    TU_OK(ferry_gpu_release(b));
    TU_OK(ferry_gpu_alloc(c, sizes[0], sa, &b)); /* the LRU one, evicted: a miss */
    TU_EQ_U64(stats(c).misses, 5);
    TU_OK(ferry_gpu_release(b));
    TU_CMP_U64(stats(c).idle_bytes, <=, o.idle_cap_bytes);

    /* trim waits for work still using an idle buffer. */
    int *flag = NULL, *d_flag = NULL;
    CUDA_OK(cudaHostAlloc((void **)&flag, sizeof *flag, cudaHostAllocMapped));
    CUDA_OK(cudaHostGetDevicePointer((void **)&d_flag, flag, 0));
    *(volatile int *)flag = 0;
    TU_OK(ferry_gpu_alloc(c, 2 * MB, sa, &b));
    CUDA_OK(ck_fill(ferry_gpu_buffer_ptr(b), 2 * MB / 4, 3, sa));
    CUDA_OK(cudaStreamSynchronize(sa));
    CUDA_OK(ck_spin_flag(ferry_gpu_buffer_ptr(b), 2 * MB / 4, 100 * 1000000, d_flag, sb));
    TU_OK(ferry_gpu_record_use(b, sb));
    TU_OK(ferry_gpu_release(b));
    TU_OK(ferry_gpu_trim(c, 0));
    TU_CHECK_MSG(*(volatile int *)flag != 0, "trim freed a buffer a kernel still used");
    TU_EQ_U64(stats(c).idle_bytes, 0);
    finish(c);
    CUDA_OK(cudaFreeHost(flag));

    /* FERRY_GPU_IDLE_NONE keeps nothing. */
    o.idle_cap_bytes = FERRY_GPU_IDLE_NONE;
    c = make(&o);
    for (int i = 0; i < 3; i++) {
        TU_OK(ferry_gpu_alloc(c, MB, sa, &b));
        TU_OK(ferry_gpu_release(b));
        s = stats(c);
        TU_EQ_U64(s.idle_bytes, 0);
        TU_EQ_U64(s.device_frees, (uint64_t)i + 1);
    }
    finish(c);
}

/* ---------------------------------------------------------------------------------------------
 * max_live
 * ------------------------------------------------------------------------------------------- */

typedef struct late_release {
    ferry_gpu_buffer *buffer;
    int64_t delay_ns;
} late_release;

static void *release_later(void *arg)
{
    late_release *r = arg;
    tu_sleep_ns(r->delay_ns);
    TU_OK(ferry_gpu_release(r->buffer));
    return NULL;
}

static void test_max_live(ferry_gpu_backend backend)
{
    ferry_gpu_cache_options o = options(backend);
    o.max_live = 2;
    ferry_gpu_cache *c = make(&o);
    ferry_gpu_buffer *b1 = NULL, *b2 = NULL, *b3 = NULL;
    TU_OK(ferry_gpu_alloc(c, MB, sa, &b1));
    TU_OK(ferry_gpu_alloc(c, 2 * MB, sa, &b2));
    ferry_time t = ferry_now();
    TU_ERR(ferry_gpu_alloc(c, MB, sa, &b3), FERRY_ELIMIT);
    TU_CMP_I64(ms_since(t), <, 50);
    TU_CHECK(b3 == NULL);
    TU_EQ_U64(stats(c).backpressure_waits, 0);
    TU_OK(ferry_gpu_release(b2));
    TU_OK(ferry_gpu_alloc(c, MB, sa, &b3));
    TU_OK(ferry_gpu_release(b3));
    TU_OK(ferry_gpu_release(b1));
    finish(c);

    /* Waiting: a release by another thread after 50 ms lets the allocation through. */
    int64_t waits[2] = {5 * TU_SEC, -1};
    for (int i = 0; i < 2; i++) {
        o.live_wait_ns = waits[i];
        c = make(&o);
        TU_OK(ferry_gpu_alloc(c, MB, sa, &b1));
        TU_OK(ferry_gpu_alloc(c, MB, sa, &b2));
        late_release r = {b2, 50 * TU_MS};
        pthread_t th;
        TU_CHECK(pthread_create(&th, NULL, release_later, &r) == 0);
        t = ferry_now();
        TU_OK(ferry_gpu_alloc(c, MB, sa, &b3));
        int64_t waited = ms_since(t);
        TU_CHECK(pthread_join(th, NULL) == 0);
        printf("    live_wait_ns %" PRId64 ": waited %" PRId64 " ms for a release\n", waits[i],
               waited);
        TU_CMP_I64(waited, >=, 40);
        TU_CMP_I64(waited, <, 4000);
        TU_EQ_U64(stats(c).backpressure_waits, 1);
        TU_EQ_U64(stats(c).live_buffers, 2);
        TU_OK(ferry_gpu_release(b3));
        TU_OK(ferry_gpu_release(b1));
        finish(c);
    }

    /* No release: FERRY_ETIMEDOUT after about the wait. */
    o.live_wait_ns = 100 * TU_MS;
    c = make(&o);
    TU_OK(ferry_gpu_alloc(c, MB, sa, &b1));
    TU_OK(ferry_gpu_alloc(c, MB, sa, &b2));
    t = ferry_now();
    b3 = NULL;
    TU_ERR(ferry_gpu_alloc(c, MB, sa, &b3), FERRY_ETIMEDOUT);
    int64_t waited = ms_since(t);
    printf("    timed out after %" PRId64 " ms (asked 100)\n", waited);
    TU_CMP_I64(waited, >=, 95);
    TU_CMP_I64(waited, <, 2000);
    TU_CHECK(b3 == NULL);
    TU_EQ_U64(stats(c).live_buffers, 2);
    TU_OK(ferry_gpu_release(b1));
    TU_OK(ferry_gpu_release(b2));
    finish(c);
}

/* ---------------------------------------------------------------------------------------------
 * Bad arguments, double release, stale handles, the use slots
 * ------------------------------------------------------------------------------------------- */

static void test_bad_args(ferry_gpu_backend backend)
{
    ferry_gpu_cache_options o = options(backend);
    ferry_gpu_cache *c = NULL;
    o.backend = (ferry_gpu_backend)7;
    TU_ERR(ferry_gpu_cache_create(&c, &o), FERRY_EINVAL);
    o = options(backend);
    o.device = -1;
    TU_ERR(ferry_gpu_cache_create(&c, &o), FERRY_EINVAL);
    o.device = device_count;
    TU_ERR(ferry_gpu_cache_create(&c, &o), FERRY_ENODEV);
    TU_CHECK(c == NULL);
    TU_ERR(ferry_gpu_cache_create(NULL, &o), FERRY_EINVAL);

    o = options(backend);
    c = make(&o);
    ferry_gpu_buffer *b = NULL;
    ferry_gpu_cache_stats s;
    TU_ERR(ferry_gpu_alloc(c, 0, sa, &b), FERRY_EINVAL);
    TU_ERR(ferry_gpu_alloc(c, 16, sa, NULL), FERRY_EINVAL);
    TU_ERR(ferry_gpu_alloc(NULL, 16, sa, &b), FERRY_EINVAL);
    TU_ERR(ferry_gpu_cache_stats_get(c, NULL), FERRY_EINVAL);
    TU_ERR(ferry_gpu_cache_stats_get(NULL, &s), FERRY_EINVAL);
    TU_ERR(ferry_gpu_trim(NULL, 0), FERRY_EINVAL);
    TU_ERR(ferry_gpu_retain(NULL), FERRY_EINVAL);
    TU_ERR(ferry_gpu_release(NULL), FERRY_EINVAL);
    TU_ERR(ferry_gpu_record_use(NULL, sb), FERRY_EINVAL);
    TU_CHECK(b == NULL);

    /* Far more than any device has. */
    ferry_err err = ferry_gpu_alloc(c, (size_t)1 << 52, sa, &b);
    TU_CHECK_MSG(err == FERRY_ENOMEM || (backend == FERRY_GPU_BACKEND_ASYNC && err == FERRY_EINVAL),
                 "huge allocation: %s", ferry_errname(err));
    TU_EQ_U64(stats(c).live_buffers, 0);
    CUDA_OK(cudaGetLastError());

    /* A small size: the buffer exists and reports the size asked for. */
    TU_OK(ferry_gpu_alloc(c, 1, NULL, &b));
    TU_CHECK(ferry_gpu_buffer_ptr(b) != NULL);
    TU_EQ_U64(ferry_gpu_buffer_size(b), 1);
    TU_OK(ferry_gpu_record_use(b, NULL)); /* the owner stream: nothing to record */
    TU_OK(ferry_gpu_record_use(b, sb));
    TU_OK(ferry_gpu_record_use(b, sb)); /* again: the same slot */
    TU_OK(ferry_gpu_retain(b));
    TU_OK(ferry_gpu_release(b));
    TU_OK(ferry_gpu_release(b));
    TU_ERR(ferry_gpu_release(b), FERRY_ESTATE); /* double release */
    TU_ERR(ferry_gpu_retain(b), FERRY_ESTATE);  /* use after it went idle (or was freed) */
    TU_ERR(ferry_gpu_record_use(b, sb), FERRY_ESTATE);
    TU_EQ_U64(stats(c).live_buffers, 0);

    /* At most 8 other streams per buffer. */
    cudaStream_t extra[9];
    for (int i = 0; i < 9; i++)
        CUDA_OK(cudaStreamCreateWithFlags(&extra[i], cudaStreamNonBlocking));
    TU_OK(ferry_gpu_alloc(c, MB, sa, &b));
    for (int i = 0; i < 8; i++)
        TU_OK(ferry_gpu_record_use(b, extra[i]));
    TU_ERR(ferry_gpu_record_use(b, extra[8]), FERRY_ELIMIT);
    TU_OK(ferry_gpu_record_use(b, extra[3])); /* a stream already recorded: fine */
    TU_OK(ferry_gpu_record_use(b, sa));
    TU_OK(ferry_gpu_release(b));
    /* The next holder of that struct starts with no use recorded. */
    TU_OK(ferry_gpu_alloc(c, MB, sa, &b));
    for (int i = 0; i < 8; i++)
        TU_OK(ferry_gpu_record_use(b, extra[8 - i]));
    TU_OK(ferry_gpu_release(b));
    sync_all();
    for (int i = 0; i < 9; i++)
        CUDA_OK(cudaStreamDestroy(extra[i]));
    finish(c);
}

/* ---------------------------------------------------------------------------------------------
 * Threads: allocations, second-stream readers and releases from several threads at once.
 * ------------------------------------------------------------------------------------------- */

typedef struct worker {
    ferry_gpu_cache *cache;
    int index;
    int cycles;
} worker;

static void *worker_main(void *arg)
{
    worker *w = arg;
    cudaStream_t s1, s2;
    cudaEvent_t filled;
    CUDA_OK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CUDA_OK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CUDA_OK(cudaEventCreateWithFlags(&filled, cudaEventDisableTiming));
    uint32_t seed = 0x9e3779b9u * (uint32_t)(w->index + 1);
    for (int i = 0; i < w->cycles; i++) {
        seed = seed * 1664525u + 1013904223u;
        size_t size = (size_t)(256 * 1024) << (seed >> 30); /* 4 classes */
        uint32_t value = (uint32_t)w->index << 24 | (uint32_t)i;
        ferry_gpu_buffer *b = NULL;
        TU_OK(ferry_gpu_alloc(w->cache, size, s1, &b));
        CUDA_OK(ck_fill(ferry_gpu_buffer_ptr(b), size / 4, value, s1));
        CUDA_OK(cudaEventRecord(filled, s1));
        CUDA_OK(cudaStreamWaitEvent(s2, filled, 0));
        CUDA_OK(ck_spin_check(ferry_gpu_buffer_ptr(b), size / 4, value, (seed & 7) * 100000,
                              d_errors + 2, s2));
        TU_OK(ferry_gpu_record_use(b, s2));
        if (seed & 0x100) {
            TU_OK(ferry_gpu_retain(b));
            TU_OK(ferry_gpu_release(b));
        }
        TU_OK(ferry_gpu_release(b));
    }
    CUDA_OK(cudaStreamSynchronize(s1));
    CUDA_OK(cudaStreamSynchronize(s2));
    CUDA_OK(cudaEventDestroy(filled));
    CUDA_OK(cudaStreamDestroy(s1));
    CUDA_OK(cudaStreamDestroy(s2));
    return NULL;
}

static void test_threads(ferry_gpu_backend backend)
{
    ferry_gpu_cache_options o = options(backend);
    o.max_live = 3; /* fewer than threads: some wait for releases */
    o.live_wait_ns = -1;
    ferry_gpu_cache *c = make(&o);
    zero_errors();
    enum { THREADS = 4 };
    int cycles = short_mode ? 50 : (backend == FERRY_GPU_BACKEND_MALLOC ? 150 : 500);
    pthread_t th[THREADS];
    worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){c, i, cycles};
        TU_CHECK(pthread_create(&th[i], NULL, worker_main, &w[i]) == 0);
    }
    for (int i = 0; i < THREADS; i++)
        TU_CHECK(pthread_join(th[i], NULL) == 0);
    ferry_gpu_cache_stats s = stats(c);
    unsigned int errors = read_errors(2);
    printf("    %d threads x %d: hits %" PRIu64 ", misses %" PRIu64 ", gpu waits %" PRIu64
           ", backpressure waits %" PRIu64 ", reader errors %u\n",
           THREADS, cycles, s.hits, s.misses, s.gpu_waits, s.backpressure_waits, errors);
    TU_EQ_U64(errors, 0);
    TU_EQ_U64(s.hits + s.misses, (uint64_t)THREADS * (uint64_t)cycles);
    TU_EQ_U64(s.misses, s.device_allocs);
    if (backend == FERRY_GPU_BACKEND_CACHE) {
        TU_EQ_U64(s.idle_buffers + 0u, s.device_allocs - s.device_frees);
        TU_CMP_U64(s.hits, >, 0);
    }
    finish(c);
}

int main(int argc, char **argv)
{
    const char *env = getenv("FERRY_GPU_TEST_SHORT");
    short_mode =
        (env && env[0] && strcmp(env, "0") != 0) || (argc > 1 && strcmp(argv[1], "--short") == 0);
    setvbuf(stdout, NULL, _IOLBF, 0);

    if (ferry_gpu_device_count(&device_count) != FERRY_OK) {
        check_no_device();
        printf("no CUDA device: every call failed cleanly; skipped\n");
        return TU_SKIP;
    }
    CUDA_OK(cudaSetDevice(0));
    CUDA_OK(cudaFree(NULL));
    CUDA_OK(cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking));
    CUDA_OK(cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking));
    CUDA_OK(cudaStreamCreateWithFlags(&sc, cudaStreamNonBlocking));
    CUDA_OK(cudaMalloc((void **)&d_errors, 4 * sizeof *d_errors));
    printf("%d device(s)%s\n", device_count, short_mode ? ", short mode" : "");

    static const ferry_gpu_backend backends[] = {FERRY_GPU_BACKEND_CACHE, FERRY_GPU_BACKEND_ASYNC,
                                                 FERRY_GPU_BACKEND_MALLOC};
    /* FERRY_GPU_TEST_BACKENDS=cache (or async, malloc, a comma list) runs only those. */
    const char *only = getenv("FERRY_GPU_TEST_BACKENDS");
    static const char *const names[] = {"cache", "async", "malloc"};
    for (size_t i = 0; i < 3; i++) {
        ferry_gpu_backend be = backends[i];
        if (only && only[0] && !strstr(only, names[i]))
            continue;
        if (be == FERRY_GPU_BACKEND_ASYNC) {
            ferry_gpu_cache_options o = options(be);
            ferry_gpu_cache *c = NULL;
            ferry_err err = ferry_gpu_cache_create(&c, &o);
            if (err == FERRY_ENOTSUP) {
                printf("--- async: the device has no memory pools: skipped\n");
                continue;
            }
            TU_OK(err);
            TU_OK(ferry_gpu_cache_destroy(c));
            run("default_pool", test_default_pool, be);
        }
        run("bad_args", test_bad_args, be);
        run("steady", test_steady, be);
        run("cross_stream", test_cross_stream, be);
        run("consumers", test_consumers, be);
        run("slow_readers", test_slow_readers, be);
        run("shutdown", test_shutdown, be);
        run("idle_cap", test_idle_cap, be);
        run("max_live", test_max_live, be);
        run("threads", test_threads, be);
    }
    (void)test_name;
    CUDA_OK(cudaFree(d_errors));
    CUDA_OK(cudaStreamDestroy(sa));
    CUDA_OK(cudaStreamDestroy(sb));
    CUDA_OK(cudaStreamDestroy(sc));
    printf("all cache tests passed\n");
    return 0;
}
