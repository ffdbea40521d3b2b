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
 * owner's work and every use (the owner never waits for a reader); MALLOC calls cudaMalloc and, at the last
 * release, waits on the CPU for every use before cudaFree. Both exist to compare against.
 *
 * Concurrency: one mutex guards the lists, the counters and the use slots. It is never held
 * across a CUDA call that can block (cudaMalloc, cudaFree, cudaEventSynchronize); the calls made
 * under it (cudaEventQuery, cudaEventCreateWithFlags) return at once. A buffer taken off the
 * idle lists belongs to the one thread that took it, which then touches it without the lock.
 * Holds are an atomic count: the thread whose release drops it to zero does the return.
 * Buffer structs are pooled and freed only by destroy, so a stale handle finds a state that is
 * not live and fails with FERRY_ESTATE instead of touching freed memory.
 */
#include "gpu/internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CACHE_MAGIC 0x43555047u /* "GPUC" */
#define BUFFER_MAGIC 0x42555047u /* "GPUB" */

#define MAX_USES 8           /* other streams that may record a use of one buffer */
#define SCAN_DEPTH 4         /* idle buffers looked at, from the MRU end, for one needing no wait */
#define MIN_SHIFT 12         /* smallest class: 4 KiB */
#define STEP_SHIFT 3         /* 8 classes per doubling */
#define MAX_SHIFT 61         /* largest class: 2^62 bytes */
#define CLASS_COUNT (1 + (MAX_SHIFT - MIN_SHIFT + 1) * (1 << STEP_SHIFT))
#define SLAB_BUFFERS 32

#define DEFAULT_IDLE_CAP ((size_t)64 << 20)
#define DEFAULT_MAX_LIVE 64u

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

    cudaMemPool_t pool; /* ASYNC */
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

/* Not in gpu.h: for tests (linked statically). */
uint64_t ferry__gpu_cache_cuda_calls(const ferry_gpu_cache *cache)
{
    return cache ? atomic_load_explicit(&cache->cuda_calls, memory_order_relaxed) : 0;
}

/* ---------------------------------------------------------------------------------------------
 * Device selection: saved and restored around the calls that need it, so the hit path (which
 * makes no CUDA call) does not pay for it either.
 * ------------------------------------------------------------------------------------------- */

typedef struct gpu_dev {
    bool entered;
    bool switched;
    int saved;
} gpu_dev;

static cudaError_t dev_enter(ferry_gpu_cache *c, gpu_dev *d)
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

static void dev_leave(ferry_gpu_cache *c, gpu_dev *d)
{
    if (d->switched)
        CU(c, cudaSetDevice(d->saved));
    d->entered = false;
    d->switched = false;
}

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
 * Lists (lock held)
 * ------------------------------------------------------------------------------------------- */

static void idle_push(ferry_gpu_cache *c, ferry_gpu_buffer *b)
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

static void idle_unlink(ferry_gpu_cache *c, ferry_gpu_buffer *b)
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

static ferry_gpu_buffer *struct_get(ferry_gpu_cache *c)
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

static void struct_put(ferry_gpu_cache *c, ferry_gpu_buffer *b)
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

/* A live buffer went away (released or never made): wakes one allocation waiting on max_live. */
static void live_drop(ferry_gpu_cache *c, size_t capacity)
{
    c->st.live_buffers--;
    c->st.live_bytes -= capacity;
    if (c->waiters)
        pthread_cond_signal(&c->released);
}

/* Lock held. Returns with a live slot reserved for the caller, or an error. */
static ferry_err live_reserve(ferry_gpu_cache *c)
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

/* ---------------------------------------------------------------------------------------------
 * Events of a buffer
 * ------------------------------------------------------------------------------------------- */

static bool same_stream(cudaStream_t a, cudaStream_t b)
{
    /* cudaStreamPerThread names the calling thread's stream: equal handles may be two streams. */
    return a == b && a != cudaStreamPerThread;
}

static bool event_done(ferry_gpu_cache *c, cudaEvent_t e)
{
    /* An error is treated as not done: the wait that follows reports it. */
    return CU(c, ferry__gpu_event_query(e)) == cudaSuccess;
}

/* True when every event that stream s would have to wait for has completed. Lock held; only
 * cudaEventQuery, which returns at once. */
static bool uses_done(ferry_gpu_cache *c, const ferry_gpu_buffer *b, cudaStream_t s)
{
    if (b->owner_pending && !same_stream(b->owner, s) && !event_done(c, b->owner_event))
        return false;
    for (uint32_t i = 0; i < b->nuses; i++)
        if (!same_stream(b->uses[i].stream, s) && !event_done(c, b->uses[i].event))
            return false;
    return true;
}

/* Makes s wait on the GPU for the buffer's earlier uses. The buffer is the caller's alone. */
static cudaError_t wait_uses(ferry_gpu_cache *c, const ferry_gpu_buffer *b, cudaStream_t s)
{
    cudaError_t e;
    if (b->owner_pending && !same_stream(b->owner, s) &&
        (e = CU(c, cudaStreamWaitEvent(s, b->owner_event, 0))) != cudaSuccess)
        return e;
    for (uint32_t i = 0; i < b->nuses; i++)
        if (!same_stream(b->uses[i].stream, s) &&
            (e = CU(c, cudaStreamWaitEvent(s, b->uses[i].event, 0))) != cudaSuccess)
            return e;
    return cudaSuccess;
}

/* Waits on the CPU for every recorded use (eviction, trim, destroy, MALLOC release). */
static cudaError_t sync_uses(ferry_gpu_cache *c, ferry_gpu_buffer *b)
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

/* Frees a list (linked by next) of buffers taken off the idle lists: waits for their recorded
 * uses, cudaFree, then gives the structs back. Lock not held. */
static cudaError_t free_list(ferry_gpu_cache *c, ferry_gpu_buffer *list, gpu_dev *dev)
{
    if (!list)
        return cudaSuccess;
    cudaError_t first = dev_enter(c, dev);
    uint64_t frees = 0, bytes = 0;
    uint32_t n = 0;
    for (ferry_gpu_buffer *b = list; b; b = b->next) {
        cudaError_t e = sync_uses(c, b);
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
        struct_put(c, list);
        list = next;
    }
    pthread_mutex_unlock(&c->lock);
    return first;
}

/* Lock held. Takes least recently used idle buffers off the lists until at most keep bytes stay
 * idle; returns them as a list for free_list. */
static ferry_gpu_buffer *evict_lru(ferry_gpu_cache *c, size_t keep)
{
    ferry_gpu_buffer *list = NULL;
    while (c->st.idle_bytes > keep && c->lru_tail) {
        ferry_gpu_buffer *b = c->lru_tail;
        idle_unlink(c, b);
        atomic_store_explicit(&b->state, BUF_FREEING, memory_order_relaxed);
        c->freeing++;
        b->next = list;
        list = b;
    }
    return list;
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
    cudaError_t e = CU(c, cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported,
                                                 c->device));
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
    cudaError_t e = dev_enter(c, &dev);
    err = e == cudaSuccess ? FERRY_OK : ferry__gpu_err(e);
    if (!err && c->backend == FERRY_GPU_BACKEND_ASYNC)
        err = async_setup(c, o.own_pool, o.release_threshold);
    dev_leave(c, &dev);
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

static bool cache_ok(const ferry_gpu_cache *c)
{
    return c && c->magic == CACHE_MAGIC;
}

ferry_err ferry_gpu_cache_destroy(ferry_gpu_cache *c)
{
    if (!cache_ok(c))
        return FERRY_EINVAL;
    pthread_mutex_lock(&c->lock);
    if (c->st.live_buffers > 0 || c->freeing > 0 || c->waiters > 0) {
        pthread_mutex_unlock(&c->lock);
        return FERRY_EBUSY;
    }
    c->magic = 0;
    ferry_gpu_buffer *list = evict_lru(c, 0);
    pthread_mutex_unlock(&c->lock);

    gpu_dev dev = {0};
    free_list(c, list, &dev); /* waits for the work recorded on every idle buffer */
    if (dev_enter(c, &dev) == cudaSuccess) {
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
    dev_leave(c, &dev);

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
        if (same_stream(b->owner, s) && b->nuses == 0)
            return b;
    n = 0;
    for (ferry_gpu_buffer *b = head; b && n < SCAN_DEPTH; b = b->next, n++)
        if (uses_done(c, b, s))
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
    cudaError_t e = dev_enter(c, dev);
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
            ferry_gpu_buffer *list = evict_lru(c, 0);
            pthread_mutex_unlock(&c->lock);
            if (list) {
                free_list(c, list, dev);
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
    if (!cache_ok(c) || !out || size == 0)
        return FERRY_EINVAL;
    cudaStream_t s = (cudaStream_t)stream;
    uint32_t cls = 0;
    size_t capacity = size;
    if (c->backend == FERRY_GPU_BACKEND_CACHE && !size_class(size, &cls, &capacity))
        return FERRY_ENOMEM;

    pthread_mutex_lock(&c->lock);
    ferry_err err = live_reserve(c);
    if (err) {
        pthread_mutex_unlock(&c->lock);
        return err;
    }
    bool busy = false;
    if (c->backend == FERRY_GPU_BACKEND_CACHE) {
        bool wait = false;
        ferry_gpu_buffer *b = idle_pick(c, cls, capacity, s, &wait, &busy);
        if (b) {
            idle_unlink(c, b);
            c->st.live_bytes += b->capacity;
            c->st.hits++;
            if (wait)
                c->st.gpu_waits++;
            pthread_mutex_unlock(&c->lock);
            if (wait) {
                gpu_dev dev = {0};
                cudaError_t e = dev_enter(c, &dev);
                if (e == cudaSuccess)
                    e = wait_uses(c, b, s);
                dev_leave(c, &dev);
                if (e != cudaSuccess) {
                    /* Not ordered after its uses: it goes back untouched. */
                    pthread_mutex_lock(&c->lock);
                    c->st.hits--;
                    c->st.gpu_waits--;
                    idle_push(c, b);
                    live_drop(c, b->capacity);
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
    ferry_gpu_buffer *b = struct_get(c);
    if (!b) {
        live_drop(c, capacity);
        pthread_mutex_unlock(&c->lock);
        return FERRY_ENOMEM;
    }
    pthread_mutex_unlock(&c->lock);

    gpu_dev dev = {0};
    err = device_alloc(c, b, capacity, s, &dev);
    dev_leave(c, &dev);
    pthread_mutex_lock(&c->lock);
    if (err) {
        c->st.misses--;
        c->st.busy_skips -= busy;
        struct_put(c, b);
        live_drop(c, capacity);
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

/* ---------------------------------------------------------------------------------------------
 * Holds and uses
 * ------------------------------------------------------------------------------------------- */

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
    if (same_stream(s, b->owner))
        return FERRY_OK; /* the release records on the owner stream */
    ferry_gpu_cache *c = b->cache;
    gpu_dev dev = {0};
    cudaError_t e = dev_enter(c, &dev);
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
            dev_leave(c, &dev);
            return FERRY_ELIMIT;
        }
        if (!b->uses[b->nuses].event) {
            /* Once per slot of a pooled struct; creating an event does not wait for the GPU. */
            e = CU(c, cudaEventCreateWithFlags(&b->uses[b->nuses].event, cudaEventDisableTiming));
            if (e != cudaSuccess) {
                b->uses[b->nuses].event = NULL;
                pthread_mutex_unlock(&c->lock);
                dev_leave(c, &dev);
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
    dev_leave(c, &dev);
    return e == cudaSuccess ? FERRY_OK : ferry__gpu_err(e);
}

/* The last hold went: the buffer goes back to the idle lists, or is freed. */
static ferry_err last_release(ferry_gpu_cache *c, ferry_gpu_buffer *b)
{
    gpu_dev dev = {0};
    cudaError_t e = dev_enter(c, &dev);
    ferry_gpu_buffer *evicted = NULL;

    if (c->backend == FERRY_GPU_BACKEND_CACHE && e == cudaSuccess) {
        e = CU(c, cudaEventRecord(b->owner_event, b->owner));
        if (e == cudaSuccess) {
            b->owner_pending = true;
            pthread_mutex_lock(&c->lock);
            live_drop(c, b->capacity);
            idle_push(c, b);
            evicted = evict_lru(c, c->idle_cap);
            pthread_mutex_unlock(&c->lock);
            cudaError_t f = free_list(c, evicted, &dev);
            dev_leave(c, &dev);
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
            others = others || !same_stream(b->uses[i].stream, b->owner);
        if (others) {
            on = c->free_stream;
            if (!b->owner_event)
                r = CU(c, cudaEventCreateWithFlags(&b->owner_event, cudaEventDisableTiming));
            if (r == cudaSuccess)
                r = CU(c, cudaEventRecord(b->owner_event, b->owner));
            if (r == cudaSuccess)
                r = CU(c, cudaStreamWaitEvent(on, b->owner_event, 0));
            for (uint32_t i = 0; i < b->nuses && r == cudaSuccess; i++)
                if (!same_stream(b->uses[i].stream, b->owner))
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
        cudaError_t s = sync_uses(c, b);
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
        sync_uses(c, b);
        CU(c, cudaDeviceSynchronize());
        CU(c, cudaFree(b->ptr));
    }
    dev_leave(c, &dev);

    pthread_mutex_lock(&c->lock);
    c->st.device_frees++;
    c->device_bytes -= b->capacity;
    live_drop(c, b->capacity);
    struct_put(c, b);
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

/* ---------------------------------------------------------------------------------------------
 * Trim, stats
 * ------------------------------------------------------------------------------------------- */

ferry_err ferry_gpu_trim(ferry_gpu_cache *c, size_t keep_idle_bytes)
{
    if (!cache_ok(c))
        return FERRY_EINVAL;
    gpu_dev dev = {0};
    cudaError_t e = cudaSuccess;
    if (c->backend == FERRY_GPU_BACKEND_CACHE) {
        pthread_mutex_lock(&c->lock);
        ferry_gpu_buffer *list = evict_lru(c, keep_idle_bytes);
        pthread_mutex_unlock(&c->lock);
        e = free_list(c, list, &dev);
    } else if (c->backend == FERRY_GPU_BACKEND_ASYNC) {
        e = dev_enter(c, &dev);
        if (e == cudaSuccess)
            e = CU(c, cudaMemPoolTrimTo(c->pool, keep_idle_bytes));
    }
    dev_leave(c, &dev);
    return e == cudaSuccess ? FERRY_OK : ferry__gpu_err(e);
}

ferry_err ferry_gpu_cache_stats_get(ferry_gpu_cache *c, ferry_gpu_cache_stats *out)
{
    if (!cache_ok(c) || !out)
        return FERRY_EINVAL;
    pthread_mutex_lock(&c->lock);
    *out = c->st;
    pthread_mutex_unlock(&c->lock);
    if (c->backend == FERRY_GPU_BACKEND_ASYNC) {
        /* What the pool keeps beyond what is allocated from it is its idle memory. */
        gpu_dev dev = {0};
        uint64_t reserved = 0, used = 0, high = 0;
        cudaError_t e = dev_enter(c, &dev);
        if (e == cudaSuccess)
            e = CU(c, cudaMemPoolGetAttribute(c->pool, cudaMemPoolAttrReservedMemCurrent,
                                              &reserved));
        if (e == cudaSuccess)
            e = CU(c, cudaMemPoolGetAttribute(c->pool, cudaMemPoolAttrUsedMemCurrent, &used));
        if (e == cudaSuccess)
            e = CU(c, cudaMemPoolGetAttribute(c->pool, cudaMemPoolAttrReservedMemHigh, &high));
        dev_leave(c, &dev);
        if (e != cudaSuccess)
            return ferry__gpu_err(e);
        out->idle_bytes = reserved > used ? reserved - used : 0;
        if (high > out->peak_bytes)
            out->peak_bytes = high;
    }
    return FERRY_OK;
}
