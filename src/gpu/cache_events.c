/* The device buffer cache's events of a buffer: the owner's, recorded at its last release, and
 * one per other stream that recorded a use. Whether they completed is asked under the lock
 * (cudaEventQuery returns at once), as is the eviction of idle buffers beyond the idle cap; a
 * stream made to wait for them on the GPU, or the CPU made to wait before a buffer is freed, is
 * done outside it, on buffers the caller alone holds. */
#include "gpu/cache_internal.h"

static bool event_done(ferry_gpu_cache *c, cudaEvent_t e)
{
    /* An error is treated as not done: the wait that follows reports it. */
    return CU(c, ferry__gpu_event_query(e)) == cudaSuccess;
}

bool ferry__gpu_cache_uses_done(ferry_gpu_cache *c, const ferry_gpu_buffer *b, cudaStream_t s)
{
    if (b->owner_pending && !ferry__gpu_cache_same_stream(b->owner, s) &&
        !event_done(c, b->owner_event))
        return false;
    for (uint32_t i = 0; i < b->nuses; i++)
        if (!ferry__gpu_cache_same_stream(b->uses[i].stream, s) && !event_done(c, b->uses[i].event))
            return false;
    return true;
}

cudaError_t ferry__gpu_cache_wait_uses(ferry_gpu_cache *c, const ferry_gpu_buffer *b,
                                       cudaStream_t s)
{
    cudaError_t e;
    if (b->owner_pending && !ferry__gpu_cache_same_stream(b->owner, s) &&
        (e = CU(c, cudaStreamWaitEvent(s, b->owner_event, 0))) != cudaSuccess)
        return e;
    for (uint32_t i = 0; i < b->nuses; i++)
        if (!ferry__gpu_cache_same_stream(b->uses[i].stream, s) &&
            (e = CU(c, cudaStreamWaitEvent(s, b->uses[i].event, 0))) != cudaSuccess)
            return e;
    return cudaSuccess;
}

cudaError_t ferry__gpu_cache_sync_uses(ferry_gpu_cache *c, ferry_gpu_buffer *b)
{
    cudaError_t first = cudaSuccess, e;
    if (b->owner_pending && (e = CU(c, cudaEventSynchronize(b->owner_event))) != cudaSuccess)
        first = e;
    for (uint32_t i = 0; i < b->nuses; i++)
        if ((e = CU(c, cudaEventSynchronize(b->uses[i].event))) != cudaSuccess &&
            first == cudaSuccess)
            first = e;
    b->owner_pending = false;
    b->nuses = 0;
    return first;
}

cudaError_t ferry__gpu_cache_free_list(ferry_gpu_cache *c, ferry_gpu_buffer *list, gpu_dev *dev)
{
    if (!list)
        return cudaSuccess;
    cudaError_t first = ferry__gpu_cache_dev_enter(c, dev);
    uint64_t frees = 0, bytes = 0;
    uint32_t n = 0;
    for (ferry_gpu_buffer *b = list; b; b = b->next) {
        cudaError_t e = ferry__gpu_cache_sync_uses(c, b);
        /* cudaFree may also wait for the whole device to go idle: that is CUDA's behaviour,
         * and one more reason the cache frees only beyond the idle cap. */
        cudaError_t f = CU(c, cudaFree(b->ptr));
        if (first == cudaSuccess)
            first = e != cudaSuccess ? e : f;
        frees++;
        bytes += b->capacity;
        n++;
    }
    pthread_mutex_lock(&c->lock);
    c->st.device_frees += frees;
    c->device_bytes -= bytes;
    c->freeing -= n;
    while (list) {
        ferry_gpu_buffer *next = list->next;
        ferry__gpu_cache_struct_put(c, list);
        list = next;
    }
    pthread_mutex_unlock(&c->lock);
    return first;
}

ferry_gpu_buffer *ferry__gpu_cache_evict_lru(ferry_gpu_cache *c, size_t keep)
{
    ferry_gpu_buffer *list = NULL;
    while (c->st.idle_bytes > keep && c->lru_tail) {
        ferry_gpu_buffer *b = c->lru_tail;
        ferry__gpu_cache_idle_unlink(c, b);
        atomic_store_explicit(&b->state, BUF_FREEING, memory_order_relaxed);
        c->freeing++;
        b->next = list;
        list = b;
    }
    return list;
}
