/* The device buffer cache's holds and uses: retain, a use recorded by another stream than the
 * owner (an event per stream, in a slot of the buffer), and the release whose drop of the hold
 * count to zero returns the buffer: to the idle lists with an event on its owner stream (CACHE),
 * or freed ordered after every use (ASYNC, MALLOC). Holds are an atomic count, so any thread may
 * retain or release; a stale handle finds a state that is not live. */
#include "gpu/cache_internal.h"

static bool buffer_live(const ferry_gpu_buffer *b)
{
    return b->magic == BUFFER_MAGIC &&
           atomic_load_explicit(&b->state, memory_order_acquire) == BUF_LIVE;
}

ferry_err ferry_gpu_retain(ferry_gpu_buffer *b)
{
    if (!b)
        return FERRY_EINVAL;
    if (!buffer_live(b))
        return FERRY_ESTATE;
    uint32_t h = atomic_load_explicit(&b->holds, memory_order_relaxed);
    do {
        if (h == 0)
            return FERRY_ESTATE;
    } while (!atomic_compare_exchange_weak_explicit(&b->holds, &h, h + 1, memory_order_relaxed,
                                                    memory_order_relaxed));
    return FERRY_OK;
}

ferry_err ferry_gpu_record_use(ferry_gpu_buffer *b, ferry_gpu_stream stream)
{
    if (!b)
        return FERRY_EINVAL;
    if (!buffer_live(b) || atomic_load_explicit(&b->holds, memory_order_acquire) == 0)
        return FERRY_ESTATE;
    cudaStream_t s = (cudaStream_t)stream;
    if (ferry__gpu_cache_same_stream(s, b->owner))
        return FERRY_OK; /* the release records on the owner stream */
    ferry_gpu_cache *c = b->cache;
    gpu_dev dev = {0};
    cudaError_t e = ferry__gpu_cache_dev_enter(c, &dev);
    if (e != cudaSuccess)
        return ferry__gpu_err(e);

    pthread_mutex_lock(&c->lock);
    uint32_t slot = MAX_USES;
    for (uint32_t i = 0; i < b->nuses; i++)
        if (b->uses[i].stream == s)
            slot = i;
    if (slot == MAX_USES) {
        if (b->nuses == MAX_USES) {
            pthread_mutex_unlock(&c->lock);
            ferry__gpu_cache_dev_leave(c, &dev);
            return FERRY_ELIMIT;
        }
        if (!b->uses[b->nuses].event) {
            /* Once per slot of a pooled struct; creating an event does not wait for the GPU. */
            e = CU(c, cudaEventCreateWithFlags(&b->uses[b->nuses].event, cudaEventDisableTiming));
            if (e != cudaSuccess) {
                b->uses[b->nuses].event = NULL;
                pthread_mutex_unlock(&c->lock);
                ferry__gpu_cache_dev_leave(c, &dev);
                return ferry__gpu_err(e);
            }
        }
        slot = b->nuses++;
        b->uses[slot].stream = s;
    }
    cudaEvent_t ev = b->uses[slot].event;
    pthread_mutex_unlock(&c->lock);

    /* Outside the lock: the buffer stays live while the caller holds it, so the slot stays. A
     * concurrent record on the same stream is harmless: the later one covers both. */
    e = CU(c, cudaEventRecord(ev, s));
    ferry__gpu_cache_dev_leave(c, &dev);
    return e == cudaSuccess ? FERRY_OK : ferry__gpu_err(e);
}

/* The last hold went: the buffer goes back to the idle lists, or is freed. */
static ferry_err last_release(ferry_gpu_cache *c, ferry_gpu_buffer *b)
{
    gpu_dev dev = {0};
    cudaError_t e = ferry__gpu_cache_dev_enter(c, &dev);
    ferry_gpu_buffer *evicted = NULL;

    if (c->backend == FERRY_GPU_BACKEND_CACHE && e == cudaSuccess) {
        e = CU(c, cudaEventRecord(b->owner_event, b->owner));
        if (e == cudaSuccess) {
            b->owner_pending = true;
            pthread_mutex_lock(&c->lock);
            ferry__gpu_cache_live_drop(c, b->capacity);
            ferry__gpu_cache_idle_push(c, b);
            evicted = ferry__gpu_cache_evict_lru(c, c->idle_cap);
            pthread_mutex_unlock(&c->lock);
            cudaError_t f = ferry__gpu_cache_free_list(c, evicted, &dev);
            ferry__gpu_cache_dev_leave(c, &dev);
            return f == cudaSuccess ? FERRY_OK : ferry__gpu_err(f);
        }
    }

    cudaError_t r = e;
    if (c->backend == FERRY_GPU_BACKEND_ASYNC && e == cudaSuccess) {
        /* Stream-ordered, and the owner stream never waits for the others' reads (a slow
         * reader would hold its next frames back): a buffer other streams used is freed on the
         * cache's own stream, made to wait for the owner's work and every use. Events outlive
         * the streams they were recorded on, so a reader's stream may be gone by now. */
        cudaStream_t on = b->owner;
        bool others = false;
        for (uint32_t i = 0; i < b->nuses; i++)
            others = others || !ferry__gpu_cache_same_stream(b->uses[i].stream, b->owner);
        if (others) {
            on = c->free_stream;
            if (!b->owner_event)
                r = CU(c, cudaEventCreateWithFlags(&b->owner_event, cudaEventDisableTiming));
            if (r == cudaSuccess)
                r = CU(c, cudaEventRecord(b->owner_event, b->owner));
            if (r == cudaSuccess)
                r = CU(c, cudaStreamWaitEvent(on, b->owner_event, 0));
            for (uint32_t i = 0; i < b->nuses && r == cudaSuccess; i++)
                if (!ferry__gpu_cache_same_stream(b->uses[i].stream, b->owner))
                    r = CU(c, cudaStreamWaitEvent(on, b->uses[i].event, 0));
        }
        if (r == cudaSuccess)
            r = CU(c, cudaFreeAsync(b->ptr, on));
        b->nuses = 0;
        if (r != cudaSuccess) {
            /* The owner stream cannot order the free: wait for everything, then free. */
            CU(c, cudaDeviceSynchronize());
            CU(c, cudaFree(b->ptr));
        }
    } else if (c->backend == FERRY_GPU_BACKEND_MALLOC && e == cudaSuccess) {
        r = CU(c, cudaEventRecord(b->owner_event, b->owner));
        b->owner_pending = r == cudaSuccess;
        cudaError_t s = ferry__gpu_cache_sync_uses(c, b);
        if (r == cudaSuccess)
            r = s;
        if (r != cudaSuccess)
            CU(c, cudaDeviceSynchronize());
        cudaError_t f = CU(c, cudaFree(b->ptr));
        if (r == cudaSuccess)
            r = f;
    } else {
        /* CACHE whose owner stream took no event, or no device: the GPU may still use the
         * buffer and nothing can order its reuse, so wait for the device and free it. */
        ferry__gpu_cache_sync_uses(c, b);
        CU(c, cudaDeviceSynchronize());
        CU(c, cudaFree(b->ptr));
    }
    ferry__gpu_cache_dev_leave(c, &dev);

    pthread_mutex_lock(&c->lock);
    c->st.device_frees++;
    c->device_bytes -= b->capacity;
    ferry__gpu_cache_live_drop(c, b->capacity);
    ferry__gpu_cache_struct_put(c, b);
    pthread_mutex_unlock(&c->lock);
    return r == cudaSuccess ? FERRY_OK : ferry__gpu_err(r);
}

ferry_err ferry_gpu_release(ferry_gpu_buffer *b)
{
    if (!b)
        return FERRY_EINVAL;
    if (!buffer_live(b))
        return FERRY_ESTATE;
    uint32_t h = atomic_load_explicit(&b->holds, memory_order_relaxed);
    do {
        if (h == 0)
            return FERRY_ESTATE;
        /* acq_rel: the last releaser sees every other holder's recorded uses. */
    } while (!atomic_compare_exchange_weak_explicit(&b->holds, &h, h - 1, memory_order_acq_rel,
                                                    memory_order_relaxed));
    if (h > 1)
        return FERRY_OK;
    return last_release(b->cache, b);
}
