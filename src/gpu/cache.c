/*
 * The device buffer cache of gpu.h: three backends behind one interface.
 *
 * CACHE keeps released buffers in size classes (8 per doubling, from 4 KiB) with an idle list
 * per class, most recently used at its head, and one list of every idle buffer in LRU order for
 * the idle cap. A buffer remembers the stream it was last handed out for (its owner), an event
 * recorded on the owner at its last release, and one event per other stream that recorded a
 * use. It goes back to its owner stream with no CUDA call at all (stream order protects it); to
 * another stream once its events completed, or after that stream was made to wait for them on
 * the GPU, never on the CPU. Because the owner event is recorded at release, reuse, eviction
 * and destroy never need the owner stream to exist any more.
 *
 * ASYNC allocates with cudaMallocFromPoolAsync and frees with cudaFreeAsync on the owner stream,
 * or, when other streams recorded uses, on a stream of the cache's own made to wait for the
 * owner's work and every use (the owner never waits for a reader); MALLOC calls cudaMalloc and,
 * at the last release, waits on the CPU for every use before cudaFree. Both exist to compare
 * against.
 *
 * Concurrency: one mutex guards the lists, the counters and the use slots. It is never held
 * across a CUDA call that can block (cudaMalloc, cudaFree, cudaEventSynchronize); the calls made
 * under it (cudaEventQuery, cudaEventCreateWithFlags) return at once. A buffer taken off the
 * idle lists belongs to the one thread that took it, which then touches it without the lock.
 * Holds are an atomic count: the thread whose release drops it to zero does the return.
 * Buffer structs are pooled and freed only by destroy, so a stale handle finds a state that is
 * not live and fails with FERRY_ESTATE instead of touching freed memory.
 *
 * This file holds the cache itself: device selection, create, destroy, trim and stats. The idle
 * lists and the struct pool are in cache_lists.c, a buffer's events and the freeing of buffers
 * in cache_events.c, allocation in cache_alloc.c, holds and uses in cache_holds.c, on the
 * private cache_internal.h.
 */
#include "gpu/cache_internal.h"

#define DEFAULT_IDLE_CAP ((size_t)64 << 20)
#define DEFAULT_MAX_LIVE 64u

/* Not in gpu.h: for tests (linked statically). */
uint64_t ferry__gpu_cache_cuda_calls(const ferry_gpu_cache *cache)
{
    return cache ? atomic_load_explicit(&cache->cuda_calls, memory_order_relaxed) : 0;
}

/* ---------------------------------------------------------------------------------------------
 * Device selection: saved and restored around the calls that need it, so the hit path (which
 * makes no CUDA call) does not pay for it either.
 * ------------------------------------------------------------------------------------------- */

cudaError_t ferry__gpu_cache_dev_enter(ferry_gpu_cache *c, gpu_dev *d)
{
    if (d->entered)
        return cudaSuccess;
    int current = -1;
    cudaError_t e = CU(c, cudaGetDevice(&current));
    if (e != cudaSuccess)
        return e;
    if (current != c->device) {
        e = CU(c, cudaSetDevice(c->device));
        if (e != cudaSuccess)
            return e;
        d->saved = current;
        d->switched = true;
    }
    d->entered = true;
    return cudaSuccess;
}

void ferry__gpu_cache_dev_leave(ferry_gpu_cache *c, gpu_dev *d)
{
    if (d->switched)
        CU(c, cudaSetDevice(d->saved));
    d->entered = false;
    d->switched = false;
}

/* ---------------------------------------------------------------------------------------------
 * Create, destroy
 * ------------------------------------------------------------------------------------------- */

void ferry_gpu_cache_options_init(ferry_gpu_cache_options *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->device = 0;
    o->backend = FERRY_GPU_BACKEND_CACHE;
    o->idle_cap_bytes = DEFAULT_IDLE_CAP;
    o->max_live = DEFAULT_MAX_LIVE;
    o->live_wait_ns = 0;
    o->release_threshold = 0;
    o->own_pool = false;
}

static ferry_err async_setup(ferry_gpu_cache *c, bool own_pool, uint64_t threshold)
{
    int supported = 0;
    cudaError_t e =
        CU(c, cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, c->device));
    if (e != cudaSuccess)
        return ferry__gpu_err(e);
    if (!supported)
        return FERRY_ENOTSUP;
    if (own_pool) {
        struct cudaMemPoolProps props;
        memset(&props, 0, sizeof props);
        props.allocType = cudaMemAllocationTypePinned;
        props.handleTypes = cudaMemHandleTypeNone;
        props.location.type = cudaMemLocationTypeDevice;
        props.location.id = c->device;
        e = CU(c, cudaMemPoolCreate(&c->pool, &props));
        if (e != cudaSuccess)
            return ferry__gpu_err(e);
        c->own_pool = true;
    } else {
        e = CU(c, cudaDeviceGetDefaultMemPool(&c->pool, c->device));
        if (e != cudaSuccess)
            return ferry__gpu_err(e);
        /* The default pool is the whole process's: its threshold is put back at destroy. */
        uint64_t old = 0;
        if (CU(c, cudaMemPoolGetAttribute(c->pool, cudaMemPoolAttrReleaseThreshold, &old)) ==
            cudaSuccess) {
            c->saved_threshold = old;
            c->restore_threshold = true;
        }
    }
    e = CU(c, cudaMemPoolSetAttribute(c->pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    if (e == cudaSuccess)
        e = CU(c, cudaStreamCreateWithFlags(&c->free_stream, cudaStreamNonBlocking));
    if (e != cudaSuccess) {
        c->free_stream = NULL;
        if (c->own_pool)
            CU(c, cudaMemPoolDestroy(c->pool));
        c->own_pool = false;
        c->restore_threshold = false;
        c->pool = NULL;
        return ferry__gpu_err(e);
    }
    return FERRY_OK;
}

ferry_err ferry_gpu_cache_create(ferry_gpu_cache **out, const ferry_gpu_cache_options *options)
{
    if (!out)
        return FERRY_EINVAL;
    ferry_gpu_cache_options o;
    ferry_gpu_cache_options_init(&o);
    if (options)
        o = *options;
    if (o.device < 0)
        return FERRY_EINVAL;
    if (o.backend != FERRY_GPU_BACKEND_CACHE && o.backend != FERRY_GPU_BACKEND_ASYNC &&
        o.backend != FERRY_GPU_BACKEND_MALLOC)
        return FERRY_EINVAL;
    ferry_err err = ferry__gpu_check_device(o.device);
    if (err)
        return err;

    ferry_gpu_cache *c = calloc(1, sizeof *c);
    if (!c)
        return FERRY_ENOMEM;
    c->device = o.device;
    c->backend = o.backend;
    c->idle_cap = o.idle_cap_bytes ? o.idle_cap_bytes : DEFAULT_IDLE_CAP;
    c->max_live = o.max_live ? o.max_live : DEFAULT_MAX_LIVE;
    c->live_wait_ns = o.live_wait_ns;
    atomic_init(&c->cuda_calls, 0);

    pthread_condattr_t ca;
    if (pthread_mutex_init(&c->lock, NULL) != 0) {
        free(c);
        return FERRY_ENOMEM;
    }
    if (pthread_condattr_init(&ca) != 0) {
        pthread_mutex_destroy(&c->lock);
        free(c);
        return FERRY_ENOMEM;
    }
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&c->released, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0) {
        pthread_mutex_destroy(&c->lock);
        free(c);
        return FERRY_ENOMEM;
    }

    gpu_dev dev = {0};
    cudaError_t e = ferry__gpu_cache_dev_enter(c, &dev);
    err = e == cudaSuccess ? FERRY_OK : ferry__gpu_err(e);
    if (!err && c->backend == FERRY_GPU_BACKEND_ASYNC)
        err = async_setup(c, o.own_pool, o.release_threshold);
    ferry__gpu_cache_dev_leave(c, &dev);
    if (err) {
        pthread_cond_destroy(&c->released);
        pthread_mutex_destroy(&c->lock);
        free(c);
        return err;
    }
    c->magic = CACHE_MAGIC;
    *out = c;
    return FERRY_OK;
}

ferry_err ferry_gpu_cache_destroy(ferry_gpu_cache *c)
{
    if (!ferry__gpu_cache_ok(c))
        return FERRY_EINVAL;
    pthread_mutex_lock(&c->lock);
    if (c->st.live_buffers > 0 || c->freeing > 0 || c->waiters > 0) {
        pthread_mutex_unlock(&c->lock);
        return FERRY_EBUSY;
    }
    c->magic = 0;
    ferry_gpu_buffer *list = ferry__gpu_cache_evict_lru(c, 0);
    pthread_mutex_unlock(&c->lock);

    gpu_dev dev = {0};
    /* Waits for the work recorded on every idle buffer. */
    ferry__gpu_cache_free_list(c, list, &dev);
    if (ferry__gpu_cache_dev_enter(c, &dev) == cudaSuccess) {
        for (gpu_slab *s = c->slabs; s; s = s->next) {
            for (int i = 0; i < SLAB_BUFFERS; i++) {
                ferry_gpu_buffer *b = &s->buffers[i];
                if (b->owner_event)
                    CU(c, cudaEventDestroy(b->owner_event));
                for (int j = 0; j < MAX_USES; j++)
                    if (b->uses[j].event)
                        CU(c, cudaEventDestroy(b->uses[j].event));
            }
        }
        /* Frees of buffers other streams read wait for those reads: done before the pool
         * goes, so no free is left pending on a destroyed pool. */
        if (c->free_stream) {
            CU(c, cudaStreamSynchronize(c->free_stream));
            CU(c, cudaStreamDestroy(c->free_stream));
        }
        if (c->own_pool)
            CU(c, cudaMemPoolDestroy(c->pool)); /* CUDA keeps it until pending frees complete */
        else if (c->restore_threshold)
            CU(c, cudaMemPoolSetAttribute(c->pool, cudaMemPoolAttrReleaseThreshold,
                                          &c->saved_threshold));
    }
    ferry__gpu_cache_dev_leave(c, &dev);

    while (c->slabs) {
        gpu_slab *next = c->slabs->next;
        for (int i = 0; i < SLAB_BUFFERS; i++)
            c->slabs->buffers[i].magic = 0;
        free(c->slabs);
        c->slabs = next;
    }
    pthread_cond_destroy(&c->released);
    pthread_mutex_destroy(&c->lock);
    free(c);
    return FERRY_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Trim, stats
 * ------------------------------------------------------------------------------------------- */

ferry_err ferry_gpu_trim(ferry_gpu_cache *c, size_t keep_idle_bytes)
{
    if (!ferry__gpu_cache_ok(c))
        return FERRY_EINVAL;
    gpu_dev dev = {0};
    cudaError_t e = cudaSuccess;
    if (c->backend == FERRY_GPU_BACKEND_CACHE) {
        pthread_mutex_lock(&c->lock);
        ferry_gpu_buffer *list = ferry__gpu_cache_evict_lru(c, keep_idle_bytes);
        pthread_mutex_unlock(&c->lock);
        e = ferry__gpu_cache_free_list(c, list, &dev);
    } else if (c->backend == FERRY_GPU_BACKEND_ASYNC) {
        e = ferry__gpu_cache_dev_enter(c, &dev);
        if (e == cudaSuccess)
            e = CU(c, cudaMemPoolTrimTo(c->pool, keep_idle_bytes));
    }
    ferry__gpu_cache_dev_leave(c, &dev);
    return e == cudaSuccess ? FERRY_OK : ferry__gpu_err(e);
}

ferry_err ferry_gpu_cache_stats_get(ferry_gpu_cache *c, ferry_gpu_cache_stats *out)
{
    if (!ferry__gpu_cache_ok(c) || !out)
        return FERRY_EINVAL;
    pthread_mutex_lock(&c->lock);
    *out = c->st;
    pthread_mutex_unlock(&c->lock);
    if (c->backend == FERRY_GPU_BACKEND_ASYNC) {
        /* What the pool keeps beyond what is allocated from it is its idle memory. */
        gpu_dev dev = {0};
        uint64_t reserved = 0, used = 0, high = 0;
        cudaError_t e = ferry__gpu_cache_dev_enter(c, &dev);
        if (e == cudaSuccess)
            e = CU(c,
                   cudaMemPoolGetAttribute(c->pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
        if (e == cudaSuccess)
            e = CU(c, cudaMemPoolGetAttribute(c->pool, cudaMemPoolAttrUsedMemCurrent, &used));
        if (e == cudaSuccess)
            e = CU(c, cudaMemPoolGetAttribute(c->pool, cudaMemPoolAttrReservedMemHigh, &high));
        ferry__gpu_cache_dev_leave(c, &dev);
        if (e != cudaSuccess)
            return ferry__gpu_err(e);
        out->idle_bytes = reserved > used ? reserved - used : 0;
        if (high > out->peak_bytes)
            out->peak_bytes = high;
    }
    return FERRY_OK;
}
