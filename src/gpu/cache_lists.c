/* The device buffer cache's lists: the idle list of each size class and the LRU list of every
 * idle buffer, the pool of buffer structs (slabs freed only by destroy), and the count of live
 * buffers that max_live bounds, where an allocation may wait for a release. Every function here
 * runs with the cache's lock held (cache.c). */
#include "gpu/cache_internal.h"

void ferry__gpu_cache_idle_push(ferry_gpu_cache *c, ferry_gpu_buffer *b)
{
    ferry_gpu_buffer **head = &c->classes[b->cls];
    b->prev = NULL;
    b->next = *head;
    if (*head)
        (*head)->prev = b;
    *head = b;

    b->lru_prev = NULL;
    b->lru_next = c->lru_head;
    if (c->lru_head)
        c->lru_head->lru_prev = b;
    else
        c->lru_tail = b;
    c->lru_head = b;

    atomic_store_explicit(&b->state, BUF_IDLE, memory_order_relaxed);
    c->st.idle_buffers++;
    c->st.idle_bytes += b->capacity;
}

void ferry__gpu_cache_idle_unlink(ferry_gpu_cache *c, ferry_gpu_buffer *b)
{
    if (b->prev)
        b->prev->next = b->next;
    else
        c->classes[b->cls] = b->next;
    if (b->next)
        b->next->prev = b->prev;
    b->prev = b->next = NULL;

    if (b->lru_prev)
        b->lru_prev->lru_next = b->lru_next;
    else
        c->lru_head = b->lru_next;
    if (b->lru_next)
        b->lru_next->lru_prev = b->lru_prev;
    else
        c->lru_tail = b->lru_prev;
    b->lru_prev = b->lru_next = NULL;

    c->st.idle_buffers--;
    c->st.idle_bytes -= b->capacity;
}

ferry_gpu_buffer *ferry__gpu_cache_struct_get(ferry_gpu_cache *c)
{
    if (!c->free_structs) {
        gpu_slab *slab = calloc(1, sizeof *slab);
        if (!slab)
            return NULL;
        slab->next = c->slabs;
        c->slabs = slab;
        for (int i = SLAB_BUFFERS - 1; i >= 0; i--) {
            ferry_gpu_buffer *b = &slab->buffers[i];
            b->magic = BUFFER_MAGIC;
            b->cache = c;
            atomic_init(&b->state, BUF_FREE);
            atomic_init(&b->holds, 0);
            b->next = c->free_structs;
            c->free_structs = b;
        }
    }
    ferry_gpu_buffer *b = c->free_structs;
    c->free_structs = b->next;
    b->next = b->prev = NULL;
    return b;
}

void ferry__gpu_cache_struct_put(ferry_gpu_cache *c, ferry_gpu_buffer *b)
{
    atomic_store_explicit(&b->state, BUF_FREE, memory_order_relaxed);
    b->ptr = NULL;
    b->size = b->capacity = 0;
    b->owner = NULL;
    b->owner_pending = false;
    b->nuses = 0;
    b->prev = NULL;
    b->next = c->free_structs;
    c->free_structs = b;
}

void ferry__gpu_cache_live_drop(ferry_gpu_cache *c, size_t capacity)
{
    c->st.live_buffers--;
    c->st.live_bytes -= capacity;
    if (c->waiters)
        pthread_cond_signal(&c->released);
}

ferry_err ferry__gpu_cache_live_reserve(ferry_gpu_cache *c)
{
    if (c->st.live_buffers >= c->max_live) {
        if (c->live_wait_ns == 0)
            return FERRY_ELIMIT;
        c->st.backpressure_waits++;
        struct timespec deadline;
        if (c->live_wait_ns > 0) {
            clock_gettime(CLOCK_MONOTONIC, &deadline);
            int64_t ns = (int64_t)deadline.tv_nsec + c->live_wait_ns % 1000000000;
            deadline.tv_sec += (time_t)(c->live_wait_ns / 1000000000 + ns / 1000000000);
            deadline.tv_nsec = (long)(ns % 1000000000);
        }
        c->waiters++;
        while (c->st.live_buffers >= c->max_live) {
            if (c->live_wait_ns < 0) {
                pthread_cond_wait(&c->released, &c->lock);
            } else if (pthread_cond_timedwait(&c->released, &c->lock, &deadline) == ETIMEDOUT &&
                       c->st.live_buffers >= c->max_live) {
                c->waiters--;
                return FERRY_ETIMEDOUT;
            }
        }
        c->waiters--;
    }
    c->st.live_buffers++;
    return FERRY_OK;
}
