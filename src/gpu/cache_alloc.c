/* The device buffer cache's allocation: a size class from the size, an idle buffer of the class
 * that the asking stream may use at once (or after a wait on the GPU when the idle cap leaves no
 * room to pass it over), else a device allocation made outside the lock while the live slot stays
 * reserved. Any thread; the lock is held only around the lists and counters. */
#include "gpu/cache_internal.h"

/* ---------------------------------------------------------------------------------------------
 * Size classes: 4 KiB, then 8 steps per power of two. O(1) from the size.
 * ------------------------------------------------------------------------------------------- */

static bool size_class(size_t size, uint32_t *cls, size_t *capacity)
{
    if (size <= ((size_t)1 << MIN_SHIFT)) {
        *cls = 0;
        *capacity = (size_t)1 << MIN_SHIFT;
        return true;
    }
    unsigned long long x = (unsigned long long)size - 1;
    unsigned k = 63u - (unsigned)__builtin_clzll(x); /* 2^k <= x < 2^(k+1) */
    if (k > MAX_SHIFT)
        return false;
    unsigned shift = k - STEP_SHIFT;
    unsigned long long q = x >> shift; /* 8..15 */
    *capacity = (size_t)((q + 1) << shift);
    *cls = 1u + (k - MIN_SHIFT) * (1u << STEP_SHIFT) + (uint32_t)(q - (1u << STEP_SHIFT));
    return true;
}

/* ---------------------------------------------------------------------------------------------
 * Allocation
 * ------------------------------------------------------------------------------------------- */

/* Lock held. The idle buffer of class cls (buffers of capacity bytes) to hand to stream s, or
 * NULL when a new one should be allocated: the class has none, or every one it has is still
 * read on other streams and the idle cap leaves room to keep them while a new one is used (a
 * slow reader then never makes the producer wait for it). *wait tells that s must first wait
 * for the buffer's earlier uses: only when the cap leaves no such room. *busy tells that idle
 * buffers were passed over because they are still read. */
static ferry_gpu_buffer *idle_pick(ferry_gpu_cache *c, uint32_t cls, size_t capacity,
                                   cudaStream_t s, bool *wait, bool *busy)
{
    ferry_gpu_buffer *head = c->classes[cls];
    *wait = *busy = false;
    if (!head)
        return NULL;
    /* Stream order alone protects a buffer whose uses were all on s: no CUDA call. */
    int n = 0;
    for (ferry_gpu_buffer *b = head; b && n < SCAN_DEPTH; b = b->next, n++)
        if (ferry__gpu_cache_same_stream(b->owner, s) && b->nuses == 0)
            return b;
    n = 0;
    for (ferry_gpu_buffer *b = head; b && n < SCAN_DEPTH; b = b->next, n++)
        if (ferry__gpu_cache_uses_done(c, b, s))
            return b;
    if (c->st.idle_bytes + capacity <= c->idle_cap) {
        *busy = true;
        return NULL;
    }
    *wait = true;
    return head;
}

static void hand_out(ferry_gpu_buffer *b, size_t size, cudaStream_t s)
{
    b->size = size;
    b->owner = s;
    b->owner_pending = false;
    b->nuses = 0;
    atomic_store_explicit(&b->holds, 1, memory_order_relaxed);
    atomic_store_explicit(&b->state, BUF_LIVE, memory_order_release);
}

static ferry_err device_alloc(ferry_gpu_cache *c, ferry_gpu_buffer *b, size_t capacity,
                              cudaStream_t s, gpu_dev *dev)
{
    cudaError_t e = ferry__gpu_cache_dev_enter(c, dev);
    if (e != cudaSuccess)
        return ferry__gpu_err(e);
    void *ptr = NULL;
    if (c->backend == FERRY_GPU_BACKEND_ASYNC) {
        e = CU(c, cudaMallocFromPoolAsync(&ptr, capacity, c->pool, s));
    } else {
        e = CU(c, cudaMalloc(&ptr, capacity));
        if (e == cudaErrorMemoryAllocation && c->backend == FERRY_GPU_BACKEND_CACHE) {
            /* Idle buffers of other classes may be what fills the device: give them back. */
            CU(c, cudaGetLastError());
            pthread_mutex_lock(&c->lock);
            ferry_gpu_buffer *list = ferry__gpu_cache_evict_lru(c, 0);
            pthread_mutex_unlock(&c->lock);
            if (list) {
                ferry__gpu_cache_free_list(c, list, dev);
                e = CU(c, cudaMalloc(&ptr, capacity));
            }
        }
    }
    if (e != cudaSuccess) {
        CU(c, cudaGetLastError()); /* reported here: not left for the caller's error checks */
        return ferry__gpu_err(e);
    }
    if (!b->owner_event && c->backend != FERRY_GPU_BACKEND_ASYNC) {
        e = CU(c, cudaEventCreateWithFlags(&b->owner_event, cudaEventDisableTiming));
        if (e != cudaSuccess) {
            b->owner_event = NULL;
            CU(c, cudaFree(ptr));
            return ferry__gpu_err(e);
        }
    }
    b->ptr = ptr;
    b->capacity = capacity;
    return FERRY_OK;
}

ferry_err ferry_gpu_alloc(ferry_gpu_cache *c, size_t size, ferry_gpu_stream stream,
                          ferry_gpu_buffer **out)
{
    if (!ferry__gpu_cache_ok(c) || !out || size == 0)
        return FERRY_EINVAL;
    cudaStream_t s = (cudaStream_t)stream;
    uint32_t cls = 0;
    size_t capacity = size;
    if (c->backend == FERRY_GPU_BACKEND_CACHE && !size_class(size, &cls, &capacity))
        return FERRY_ENOMEM;

    pthread_mutex_lock(&c->lock);
    ferry_err err = ferry__gpu_cache_live_reserve(c);
    if (err) {
        pthread_mutex_unlock(&c->lock);
        return err;
    }
    bool busy = false;
    if (c->backend == FERRY_GPU_BACKEND_CACHE) {
        bool wait = false;
        ferry_gpu_buffer *b = idle_pick(c, cls, capacity, s, &wait, &busy);
        if (b) {
            ferry__gpu_cache_idle_unlink(c, b);
            c->st.live_bytes += b->capacity;
            c->st.hits++;
            if (wait)
                c->st.gpu_waits++;
            pthread_mutex_unlock(&c->lock);
            if (wait) {
                gpu_dev dev = {0};
                cudaError_t e = ferry__gpu_cache_dev_enter(c, &dev);
                if (e == cudaSuccess)
                    e = ferry__gpu_cache_wait_uses(c, b, s);
                ferry__gpu_cache_dev_leave(c, &dev);
                if (e != cudaSuccess) {
                    /* Not ordered after its uses: it goes back untouched. */
                    pthread_mutex_lock(&c->lock);
                    c->st.hits--;
                    c->st.gpu_waits--;
                    ferry__gpu_cache_idle_push(c, b);
                    ferry__gpu_cache_live_drop(c, b->capacity);
                    pthread_mutex_unlock(&c->lock);
                    return ferry__gpu_err(e);
                }
            }
            hand_out(b, size, s);
            *out = b;
            return FERRY_OK;
        }
    }

    /* A device allocation: the live slot stays reserved while the lock is dropped. */
    c->st.misses++;
    c->st.busy_skips += busy;
    c->st.live_bytes += capacity;
    ferry_gpu_buffer *b = ferry__gpu_cache_struct_get(c);
    if (!b) {
        ferry__gpu_cache_live_drop(c, capacity);
        pthread_mutex_unlock(&c->lock);
        return FERRY_ENOMEM;
    }
    pthread_mutex_unlock(&c->lock);

    gpu_dev dev = {0};
    err = device_alloc(c, b, capacity, s, &dev);
    ferry__gpu_cache_dev_leave(c, &dev);
    pthread_mutex_lock(&c->lock);
    if (err) {
        c->st.misses--;
        c->st.busy_skips -= busy;
        ferry__gpu_cache_struct_put(c, b);
        ferry__gpu_cache_live_drop(c, capacity);
        pthread_mutex_unlock(&c->lock);
        return err;
    }
    c->st.device_allocs++;
    c->device_bytes += capacity;
    if (c->device_bytes > c->st.peak_bytes)
        c->st.peak_bytes = c->device_bytes;
    b->cls = cls;
    pthread_mutex_unlock(&c->lock);
    hand_out(b, size, s);
    *out = b;
    return FERRY_OK;
}

void *ferry_gpu_buffer_ptr(const ferry_gpu_buffer *b)
{
    return b ? b->ptr : NULL;
}

size_t ferry_gpu_buffer_size(const ferry_gpu_buffer *b)
{
    return b ? b->size : 0;
}
