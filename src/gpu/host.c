/*
 * Host frames to the GPU: a taken sample's chunk is registered with CUDA (read-only, mapped,
 * portable) the first time the subscriber hands it to the GPU; later samples in that chunk find
 * the registration by index. The registrations of one subscriber live in a registry installed as
 * one of its close hooks, so they are undone before the core unmaps a publisher's data segment (and
 * all of them when the subscriber is destroyed). A registration left in place after its pages were
 * unmapped would pin them for ever and make a later mapping at the same address unregistrable.
 *
 * One thread at a time per subscriber, as for the subscriber itself; the close hook runs inside
 * the subscriber's own calls. The counters are process-wide atomics.
 */
#include "gpu/internal.h"

#include "core/module.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HOST_MAGIC 0x54534f4855504746ULL /* "FGPUHOST" */
#define HOST_FLAGS (cudaHostRegisterMapped | cudaHostRegisterPortable | cudaHostRegisterReadOnly)
#define CAPS_CACHED 64 /* devices whose capabilities are remembered */

enum { CAPS_UNKNOWN = 0, CAPS_OK = 1, CAPS_NOMAP = 2 };

/* One chunk of one connection: the registered page range and its device address. With unified
 * addressing (every platform CUDA still supports) a portable registration has one device
 * address, valid on every device. */
typedef struct host_chunk {
    const uint8_t *start; /* NULL when not registered */
    uint8_t *dev_base;
    int device; /* current at registration, made current again to undo it */
} host_chunk;

typedef struct host_conn {
    uint32_t gen;
    uint32_t nchunks; /* entries of chunks, indexed by chunk index */
    uint32_t live;    /* registered entries */
    host_chunk *chunks;
} host_conn;

typedef struct host_registry {
    uint64_t magic;
    uintptr_t page;
    uint32_t nconns; /* entries of conns, indexed by connection slot */
    host_conn *conns;
} host_registry;

static _Atomic int caps_cache[CAPS_CACHED];
/*
 * Registrations made and undone in this process. They are the process's on purpose, not a
 * subscriber's: a registration pins pages of the process, which the driver tracks per process (a
 * range registered by anyone in it, the application included, is not registered again), and the
 * figure that matters most, what a subscriber's destroy undid, can only be read once that
 * subscriber is gone.
 */
static struct {
    _Atomic uint64_t registered;
    _Atomic uint64_t unregistered;
    _Atomic uint64_t unregister_failed;
} host_stats;

ferry_err ferry_gpu_host_stats_get(ferry_gpu_host_stats *out)
{
    if (!out)
        return FERRY_EINVAL;
    out->registered = atomic_load_explicit(&host_stats.registered, memory_order_relaxed);
    out->unregistered = atomic_load_explicit(&host_stats.unregistered, memory_order_relaxed);
    out->unregister_failed =
        atomic_load_explicit(&host_stats.unregister_failed, memory_order_relaxed);
    return FERRY_OK;
}

/* Maps a CUDA error and clears it from the runtime's last-error slot, so an application that
 * checks cudaGetLastError() does not see an error this module already reported. */
static ferry_err cuda_fail(cudaError_t e)
{
    (void)cudaGetLastError();
    return ferry__gpu_err(e);
}

/* The device can map host memory and register read-only pages (the subscriber's mapping is
 * PROT_READ: without cudaHostRegisterReadOnly the driver would pin them for writing, and fail). */
static ferry_err device_caps(int device)
{
    if (device < CAPS_CACHED) {
        int c = atomic_load_explicit(&caps_cache[device], memory_order_relaxed);
        if (c != CAPS_UNKNOWN)
            return c == CAPS_OK ? FERRY_OK : FERRY_ENOTSUP;
    }
    int reg = 0, map = 0, ro = 0;
    cudaError_t e = cudaDeviceGetAttribute(&reg, cudaDevAttrHostRegisterSupported, device);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&map, cudaDevAttrCanMapHostMemory, device);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&ro, cudaDevAttrHostRegisterReadOnlySupported, device);
    if (e != cudaSuccess)
        return cuda_fail(e);
    int c = reg && map && ro ? CAPS_OK : CAPS_NOMAP;
    if (device < CAPS_CACHED)
        atomic_store_explicit(&caps_cache[device], c, memory_order_relaxed);
    return c == CAPS_OK ? FERRY_OK : FERRY_ENOTSUP;
}

/* Makes device current; *prev receives the device to restore. */
static ferry_err device_enter(int device, int *prev)
{
    cudaError_t e = cudaGetDevice(prev);
    if (e != cudaSuccess)
        return cuda_fail(e);
    if (*prev != device && (e = cudaSetDevice(device)) != cudaSuccess)
        return cuda_fail(e);
    return FERRY_OK;
}

static void device_leave(int device, int prev)
{
    if (prev != device && cudaSetDevice(prev) != cudaSuccess)
        (void)cudaGetLastError();
}

static void chunk_unregister(host_conn *c, host_chunk *hc)
{
    int prev = hc->device;
    bool entered = device_enter(hc->device, &prev) == FERRY_OK;
    cudaError_t e = cudaHostUnregister((void *)(uintptr_t)hc->start);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        atomic_fetch_add_explicit(&host_stats.unregister_failed, 1, memory_order_relaxed);
    } else {
        atomic_fetch_add_explicit(&host_stats.unregistered, 1, memory_order_relaxed);
    }
    if (entered)
        device_leave(hc->device, prev);
    memset(hc, 0, sizeof *hc);
    c->live--;
}

static void conn_unregister(host_conn *c)
{
    for (uint32_t i = 0; i < c->nchunks && c->live; i++)
        if (c->chunks[i].start)
            chunk_unregister(c, &c->chunks[i]);
}

/* Runs before the core unmaps connection (slot, gen), and with slot UINT32_MAX when the
 * subscriber is destroyed. Whatever is registered under the slot belongs to a mapping that is
 * about to go, whichever generation registered it. */
static void close_hook(void *arg, uint32_t slot, uint32_t gen)
{
    host_registry *r = arg;
    (void)gen;
    if (!r || r->magic != HOST_MAGIC)
        return;
    if (slot != UINT32_MAX) {
        if (slot < r->nconns)
            conn_unregister(&r->conns[slot]);
        return;
    }
    for (uint32_t s = 0; s < r->nconns; s++) {
        conn_unregister(&r->conns[s]);
        free(r->conns[s].chunks);
    }
    free(r->conns);
    r->magic = 0;
    free(r);
}

static ferry_err registry_get(ferry_subscriber *sub, host_registry **out)
{
    host_registry *r = ferry__subscriber_close_hook_arg(sub, close_hook);
    if (r) {
        *out = r;
        return FERRY_OK;
    }
    r = calloc(1, sizeof *r);
    if (!r)
        return FERRY_ENOMEM;
    long pg = sysconf(_SC_PAGESIZE);
    r->magic = HOST_MAGIC;
    r->page = pg > 0 ? (uintptr_t)pg : FERRY__PAGE;
    ferry_err err = ferry__subscriber_add_close_hook(sub, close_hook, r);
    if (err) {
        free(r);
        return err;
    }
    *out = r;
    return FERRY_OK;
}

/* The entry of the chunk w names, growing the tables on first sight of a slot or chunk. */
static ferry_err chunk_entry(host_registry *r, const ferry__sample_where *w, host_conn **conn,
                             host_chunk **out)
{
    if (w->slot >= r->nconns) {
        uint32_t n = r->nconns ? r->nconns * 2 : 16;
        while (n <= w->slot)
            n *= 2;
        host_conn *grown = realloc(r->conns, (size_t)n * sizeof *grown);
        if (!grown)
            return FERRY_ENOMEM;
        memset(grown + r->nconns, 0, (size_t)(n - r->nconns) * sizeof *grown);
        r->conns = grown;
        r->nconns = n;
    }
    host_conn *c = &r->conns[w->slot];
    if (c->gen != w->gen) {
        /* The close hook of the previous connection in this slot emptied it already; this
         * only keeps a missed close from leaking. */
        conn_unregister(c);
        c->gen = w->gen;
    }
    if (w->chunk >= c->nchunks) {
        uint32_t n = c->nchunks ? c->nchunks : 16;
        while (n <= w->chunk)
            n *= 2;
        host_chunk *grown = realloc(c->chunks, (size_t)n * sizeof *grown);
        if (!grown)
            return FERRY_ENOMEM;
        memset(grown + c->nchunks, 0, (size_t)(n - c->nchunks) * sizeof *grown);
        c->chunks = grown;
        c->nchunks = n;
    }
    *conn = c;
    *out = &c->chunks[w->chunk];
    return FERRY_OK;
}

/*
 * Someone else (the application) registered pages of this chunk. Use their registration when it
 * is mapped and covers the sample contiguously; it is theirs to undo, so it is not remembered
 * and is looked up again on every call.
 */
static ferry_err borrowed_ptr(const ferry_sample *sample, const uint8_t **dptr)
{
    void *first = NULL, *last = NULL;
    void *host = (void *)(uintptr_t)sample->data;
    cudaError_t e = cudaHostGetDevicePointer(&first, host, 0);
    if (e == cudaSuccess && sample->size > 1)
        e = cudaHostGetDevicePointer(&last, (uint8_t *)host + sample->size - 1, 0);
    if (e != cudaSuccess)
        return cuda_fail(cudaErrorHostMemoryAlreadyRegistered);
    if (sample->size > 1 && (uint8_t *)last != (uint8_t *)first + sample->size - 1)
        return FERRY_ESYS;
    *dptr = first;
    return FERRY_OK;
}

/* Validates the call, registers the sample's chunk on first sight, and gives the device address
 * of the sample's payload. Leaves device current; *prev is the device to restore. */
static ferry_err locate(ferry_subscriber *sub, const ferry_sample *sample, int device,
                        const uint8_t **dptr, int *prev)
{
    ferry_err err = ferry__gpu_check_device(device);
    if (err)
        return err;
    ferry__sample_where w;
    if ((err = ferry__sample_where_get(sub, sample, &w)))
        return err;
    if (sample->size > w.chunk_capacity)
        return FERRY_EINVAL; /* the caller changed the sample */
    if ((err = device_caps(device)))
        return err;
    host_registry *r;
    host_conn *c;
    host_chunk *hc;
    if ((err = registry_get(sub, &r)) || (err = chunk_entry(r, &w, &c, &hc)))
        return err;
    if ((err = device_enter(device, prev)))
        return err;
    if (!hc->start) {
        uintptr_t payload = (uintptr_t)w.chunk_payload;
        uintptr_t start = payload & ~(r->page - 1);
        uintptr_t end = (payload + w.chunk_capacity + r->page - 1) & ~(r->page - 1);
        cudaError_t e = cudaHostRegister((void *)start, end - start, HOST_FLAGS);
        if (e == cudaErrorHostMemoryAlreadyRegistered) {
            (void)cudaGetLastError();
            if ((err = borrowed_ptr(sample, dptr)))
                device_leave(device, *prev);
            return err;
        }
        if (e != cudaSuccess) {
            device_leave(device, *prev);
            return cuda_fail(e);
        }
        void *base = NULL;
        if ((e = cudaHostGetDevicePointer(&base, (void *)start, 0)) != cudaSuccess) {
            err = cuda_fail(e);
            if (cudaHostUnregister((void *)start) != cudaSuccess)
                (void)cudaGetLastError();
            device_leave(device, *prev);
            return err;
        }
        hc->start = (const uint8_t *)start;
        hc->dev_base = base;
        hc->device = device;
        c->live++;
        atomic_fetch_add_explicit(&host_stats.registered, 1, memory_order_relaxed);
    }
    *dptr = hc->dev_base + ((const uint8_t *)sample->data - hc->start);
    return FERRY_OK;
}

ferry_err ferry_gpu_sample_device_ptr(ferry_subscriber *sub, const ferry_sample *sample, int device,
                                      const void **device_ptr)
{
    if (!sub || !sample || !device_ptr)
        return FERRY_EINVAL;
    const uint8_t *dptr;
    int prev;
    ferry_err err = locate(sub, sample, device, &dptr, &prev);
    if (err)
        return err;
    device_leave(device, prev);
    *device_ptr = dptr;
    return FERRY_OK;
}

ferry_err ferry_gpu_sample_copy(ferry_subscriber *sub, const ferry_sample *sample, int device,
                                void *dst, ferry_gpu_stream stream)
{
    if (!sub || !sample || !dst)
        return FERRY_EINVAL;
    const uint8_t *dptr;
    int prev;
    ferry_err err = locate(sub, sample, device, &dptr, &prev);
    if (err)
        return err;
    /* From the host address: the runtime finds it registered (pinned) and the copy engine reads
     * the publisher's pages directly, with no staging copy. */
    cudaError_t e = cudaMemcpyAsync(dst, sample->data, sample->size, cudaMemcpyHostToDevice,
                                    (cudaStream_t)stream);
    if (e != cudaSuccess)
        err = cuda_fail(e);
    device_leave(device, prev);
    return err;
}
