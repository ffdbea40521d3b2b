/*
 * What the files of the device buffer cache share (cache.c, cache_lists.c, cache_events.c,
 * cache_alloc.c, cache_holds.c): the cache and buffer structs, the count of CUDA calls, and the
 * helpers one part calls in another. Private to src/gpu/. The rules are cache.c's: one mutex per
 * cache guards the lists, the counters and the use slots, and is never held across a CUDA call
 * that can block; a buffer off the idle lists belongs to the one thread that took it.
 */
#ifndef FERRY_GPU_CACHE_INTERNAL_H
#define FERRY_GPU_CACHE_INTERNAL_H

#include "gpu/internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CACHE_MAGIC 0x43555047u  /* "GPUC" */
#define BUFFER_MAGIC 0x42555047u /* "GPUB" */

#define MAX_USES 8   /* other streams that may record a use of one buffer */
#define SCAN_DEPTH 4 /* idle buffers looked at, from the MRU end, for one needing no wait */
#define MIN_SHIFT 12 /* smallest class: 4 KiB */
#define STEP_SHIFT 3 /* 8 classes per doubling */
#define MAX_SHIFT 61 /* largest class: 2^62 bytes */
#define CLASS_COUNT (1 + (MAX_SHIFT - MIN_SHIFT + 1) * (1 << STEP_SHIFT))
#define SLAB_BUFFERS 32

enum buffer_state {
    BUF_FREE = 0, /* in the struct pool: no device memory */
    BUF_LIVE,     /* handed out, holds > 0 */
    BUF_IDLE,     /* in the idle lists */
    BUF_FREEING,  /* off the lists, being freed by one thread */
};

/* A use recorded by another stream than the owner; pending until waited for or seen done.
 * The event stays with the slot when it is no longer pending, for the next use. */
typedef struct gpu_use {
    cudaStream_t stream;
    cudaEvent_t event;
} gpu_use;

struct ferry_gpu_buffer {
    uint32_t magic;
    _Atomic uint32_t state;
    _Atomic uint32_t holds;
    uint32_t cls;
    ferry_gpu_cache *cache;
    void *ptr;
    size_t size;     /* asked for */
    size_t capacity; /* allocated */
    cudaStream_t owner;
    cudaEvent_t owner_event; /* kept with the struct, created with its first device buffer */
    bool owner_pending;      /* owner_event recorded and not known complete */
    uint32_t nuses;          /* uses[0, nuses) are pending */
    gpu_use uses[MAX_USES];
    /* Class idle list (most recent first), or the struct pool, or a list of buffers to free. */
    ferry_gpu_buffer *prev, *next;
    /* Every idle buffer, most recent first. */
    ferry_gpu_buffer *lru_prev, *lru_next;
};

typedef struct gpu_slab {
    struct gpu_slab *next;
    ferry_gpu_buffer buffers[SLAB_BUFFERS];
} gpu_slab;

struct ferry_gpu_cache {
    uint32_t magic;
    int device;
    ferry_gpu_backend backend;
    size_t idle_cap;
    uint32_t max_live;
    int64_t live_wait_ns;

    cudaMemPool_t pool;       /* ASYNC */
    cudaStream_t free_stream; /* ASYNC: where frees of buffers other streams read are ordered */
    bool own_pool;
    bool restore_threshold; /* the device's default pool: its threshold is put back at destroy */
    uint64_t saved_threshold;

    pthread_mutex_t lock;
    pthread_cond_t released; /* a live buffer was released (max_live) */
    uint32_t waiters;
    uint32_t freeing; /* buffers being freed outside the lock */

    ferry_gpu_buffer *classes[CLASS_COUNT];
    ferry_gpu_buffer *lru_head, *lru_tail;
    ferry_gpu_buffer *free_structs;
    gpu_slab *slabs;

    ferry_gpu_cache_stats st;
    uint64_t device_bytes; /* held from the device: live + idle + being freed */

    /* CUDA runtime calls made by this cache: lets tests check that a hit makes none. */
    _Atomic uint64_t cuda_calls;
};

/* Counts every CUDA runtime call the cache makes. */
#define CU(c, call) (atomic_fetch_add_explicit(&(c)->cuda_calls, 1, memory_order_relaxed), (call))

/* ---- device selection, the cache itself (cache.c) -------------------------------------------- */

/* Device selection around the calls that need it: whether the cache's device was made current,
 * and the device it replaced. */
typedef struct gpu_dev {
    bool entered;
    bool switched;
    int saved;
} gpu_dev;

/* Makes the cache's device current (once per d); _leave puts back the one it replaced. */
cudaError_t ferry__gpu_cache_dev_enter(ferry_gpu_cache *c, gpu_dev *d);
void ferry__gpu_cache_dev_leave(ferry_gpu_cache *c, gpu_dev *d);

static inline bool ferry__gpu_cache_ok(const ferry_gpu_cache *c)
{
    return c && c->magic == CACHE_MAGIC;
}

/* ---- lists, lock held (cache_lists.c) -------------------------------------------------------- */

/* Puts b at the head of its class's idle list and of the LRU list; takes it off both. */
void ferry__gpu_cache_idle_push(ferry_gpu_cache *c, ferry_gpu_buffer *b);
void ferry__gpu_cache_idle_unlink(ferry_gpu_cache *c, ferry_gpu_buffer *b);

/* A buffer struct from the pool (a slab more when it is empty; NULL when out of memory), and
 * one back to it. */
ferry_gpu_buffer *ferry__gpu_cache_struct_get(ferry_gpu_cache *c);
void ferry__gpu_cache_struct_put(ferry_gpu_cache *c, ferry_gpu_buffer *b);

/* A live buffer went away (released or never made): wakes one allocation waiting on max_live. */
void ferry__gpu_cache_live_drop(ferry_gpu_cache *c, size_t capacity);

/* Lock held. Returns with a live slot reserved for the caller, or an error. */
ferry_err ferry__gpu_cache_live_reserve(ferry_gpu_cache *c);

/* ---- events of a buffer (cache_events.c) ----------------------------------------------------- */

static inline bool ferry__gpu_cache_same_stream(cudaStream_t a, cudaStream_t b)
{
    /* cudaStreamPerThread names the calling thread's stream: equal handles may be two streams. */
    return a == b && a != cudaStreamPerThread;
}

/* True when every event that stream s would have to wait for has completed. Lock held; only
 * cudaEventQuery, which returns at once. */
bool ferry__gpu_cache_uses_done(ferry_gpu_cache *c, const ferry_gpu_buffer *b, cudaStream_t s);

/* Makes s wait on the GPU for the buffer's earlier uses. The buffer is the caller's alone. */
cudaError_t ferry__gpu_cache_wait_uses(ferry_gpu_cache *c, const ferry_gpu_buffer *b,
                                       cudaStream_t s);

/* Waits on the CPU for every recorded use (eviction, trim, destroy, MALLOC release). */
cudaError_t ferry__gpu_cache_sync_uses(ferry_gpu_cache *c, ferry_gpu_buffer *b);

/* Frees a list (linked by next) of buffers taken off the idle lists: waits for their recorded
 * uses, cudaFree, then gives the structs back. Lock not held. */
cudaError_t ferry__gpu_cache_free_list(ferry_gpu_cache *c, ferry_gpu_buffer *list, gpu_dev *dev);

/* Lock held. Takes least recently used idle buffers off the lists until at most keep bytes stay
 * idle; returns them as a list for ferry__gpu_cache_free_list. */
ferry_gpu_buffer *ferry__gpu_cache_evict_lru(ferry_gpu_cache *c, size_t keep);

#endif
