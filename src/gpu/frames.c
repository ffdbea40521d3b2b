/*
 * Device frames across processes. A device frame travels as an ordinary host sample whose
 * payload is a descriptor (frames_internal.h); the device memory behind host chunk i is device
 * chunk i of the publisher. The core loans host chunk i again only after every reference to it
 * came back, so device chunk i is free exactly when host chunk i is loaned again: no bookkeeping
 * of readers is needed here.
 *
 * Export: VMM allocations (cuMemCreate, POSIX file descriptor) handed to subscribers as core
 * attachments under a key unique in the process, or legacy IPC handles carried in the
 * descriptor. Subscribers import once per (connection, chunk, key) and undo the import in a close
 * hook, before the core unmaps the connection.
 *
 * Ordering stays on the GPU: at publish the publisher's stream writes the chunk's generation
 * into the descriptor's ready word (host memory, registered and mapped), after a memory barrier;
 * a reader's stream waits until the word reaches that generation. A reader's release records an
 * event; the host sample goes back only when it completed.
 *
 * One thread at a time per object, as for the core's publisher and subscriber.
 */
#include "gpu/internal.h"

#include "core/module.h"
#include "gpu/frames_internal.h"

#include <cuda.h> /* types and enums only: the driver is reached through ferry__gpu_driver_fn */

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GPUB_MAGIC 0x4255504755504746ULL /* publisher object */
#define GSUB_MAGIC 0x4255534755504746ULL /* subscriber object */
#define ANCHOR_MAGIC 0x52484e4146555047ULL

_Static_assert(sizeof(cudaIpcMemHandle_t) == 64, "legacy IPC handle is 64 bytes");

/* ---- driver entry points -------------------------------------------------------------------- */

typedef CUresult (*pfn_device_get)(CUdevice *, int);
typedef CUresult (*pfn_device_get_attribute)(int *, CUdevice_attribute, CUdevice);
typedef CUresult (*pfn_granularity)(size_t *, const CUmemAllocationProp *,
                                    CUmemAllocationGranularity_flags);
typedef CUresult (*pfn_mem_create)(CUmemGenericAllocationHandle *, size_t,
                                   const CUmemAllocationProp *, unsigned long long);
typedef CUresult (*pfn_mem_release)(CUmemGenericAllocationHandle);
typedef CUresult (*pfn_address_reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr,
                                        unsigned long long);
typedef CUresult (*pfn_address_free)(CUdeviceptr, size_t);
typedef CUresult (*pfn_mem_map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                                unsigned long long);
typedef CUresult (*pfn_mem_unmap)(CUdeviceptr, size_t);
typedef CUresult (*pfn_set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
typedef CUresult (*pfn_export)(void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
                               unsigned long long);
typedef CUresult (*pfn_import)(CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType);
typedef CUresult (*pfn_props_from_handle)(CUmemAllocationProp *, CUmemGenericAllocationHandle);
typedef CUresult (*pfn_stream_value32)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
typedef CUresult (*pfn_address_range)(CUdeviceptr *, size_t *, CUdeviceptr);

static struct {
    pfn_device_get device_get;
    pfn_device_get_attribute device_get_attribute;
    pfn_granularity granularity;
    pfn_mem_create mem_create;
    pfn_mem_release mem_release;
    pfn_address_reserve address_reserve;
    pfn_address_free address_free;
    pfn_mem_map mem_map;
    pfn_mem_unmap mem_unmap;
    pfn_set_access set_access;
    pfn_export export_handle;
    pfn_import import_handle;
    pfn_props_from_handle props_from_handle;
    pfn_stream_value32 write_value32;
    pfn_stream_value32 wait_value32;
    pfn_address_range address_range;
    bool base;  /* device queries and stream memory operations */
    bool vmm;   /* every VMM function */
} drv;

static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

static void drv_load(void)
{
    /* Object pointers to function pointers through memcpy: ISO C has no direct conversion. */
#define LOAD(field, name)                                                                      \
    do {                                                                                       \
        void *fn_ = ferry__gpu_driver_fn(name);                                                \
        memcpy(&drv.field, &fn_, sizeof fn_);                                                  \
    } while (0)
    LOAD(device_get, "cuDeviceGet");
    LOAD(device_get_attribute, "cuDeviceGetAttribute");
    LOAD(granularity, "cuMemGetAllocationGranularity");
    LOAD(mem_create, "cuMemCreate");
    LOAD(mem_release, "cuMemRelease");
    LOAD(address_reserve, "cuMemAddressReserve");
    LOAD(address_free, "cuMemAddressFree");
    LOAD(mem_map, "cuMemMap");
    LOAD(mem_unmap, "cuMemUnmap");
    LOAD(set_access, "cuMemSetAccess");
    LOAD(export_handle, "cuMemExportToShareableHandle");
    LOAD(import_handle, "cuMemImportFromShareableHandle");
    LOAD(props_from_handle, "cuMemGetAllocationPropertiesFromHandle");
    LOAD(write_value32, "cuStreamWriteValue32");
    LOAD(wait_value32, "cuStreamWaitValue32");
    LOAD(address_range, "cuMemGetAddressRange");
#undef LOAD
    drv.base = drv.device_get && drv.device_get_attribute && drv.write_value32 &&
               drv.wait_value32 && drv.address_range;
    drv.vmm = drv.granularity && drv.mem_create && drv.mem_release && drv.address_reserve &&
              drv.address_free && drv.mem_map && drv.mem_unmap && drv.set_access &&
              drv.export_handle && drv.import_handle && drv.props_from_handle;
}

/* ---- keys ----------------------------------------------------------------------------------- */

/* A key names an allocation to the subscribers of a host publisher for as long as that publisher
 * lives, and a host publisher may carry device-frame publishers one after the other: keys from
 * one counter of the process stay unique across all of them. */
static _Atomic uint64_t next_key = 1;

/* ---- helpers -------------------------------------------------------------------------------- */

/* Maps a runtime error and clears it from the runtime's last-error slot. */
static ferry_err rt_fail(cudaError_t e)
{
    (void)cudaGetLastError();
    return ferry__gpu_err(e);
}

static ferry_err cu_err(CUresult r)
{
    switch (r) {
    case CUDA_SUCCESS:
        return FERRY_OK;
    case CUDA_ERROR_OUT_OF_MEMORY:
        return FERRY_ENOMEM;
    case CUDA_ERROR_NOT_SUPPORTED:
        return FERRY_ENOTSUP;
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
        return FERRY_ENODEV;
    case CUDA_ERROR_INVALID_VALUE:
        return FERRY_EINVAL;
    default:
        return FERRY_ESYS;
    }
}

/* Makes device current and its primary context bound to this thread (driver calls need it;
 * since CUDA 12 cudaSetDevice initialises and binds the context). *prev gets the device to
 * restore. */
static ferry_err device_enter(int device, int *prev)
{
    cudaError_t e = cudaGetDevice(prev);
    if (e != cudaSuccess)
        return rt_fail(e);
    if ((e = cudaSetDevice(device)) != cudaSuccess)
        return rt_fail(e);
    return FERRY_OK;
}

static void device_leave(int device, int prev)
{
    if (prev != device && cudaSetDevice(prev) != cudaSuccess)
        (void)cudaGetLastError();
}

static size_t round_up(size_t v, size_t to)
{
    return (v + to - 1) / to * to;
}

/* Grows an array of elements of size elem to hold at least want entries (zeroed). */
static bool grow(void **arr, uint32_t *cap, uint32_t want, size_t elem)
{
    if (want <= *cap)
        return true;
    uint32_t n = *cap ? *cap : 8;
    while (n < want)
        n *= 2;
    void *p = realloc(*arr, (size_t)n * elem);
    if (!p)
        return false;
    memset((uint8_t *)p + (size_t)*cap * elem, 0, (size_t)(n - *cap) * elem);
    *arr = p;
    *cap = n;
    return true;
}

static int dev_attr(CUdevice d, CUdevice_attribute a)
{
    int v = 0;
    if (!drv.device_get_attribute || drv.device_get_attribute(&v, a, d) != CUDA_SUCCESS)
        return 0;
    return v;
}

/* ---- publisher ------------------------------------------------------------------------------ */

typedef struct dchunk {
    uint8_t *payload;       /* the host chunk's payload (descriptor); NULL before first use */
    void *reg_start;        /* registered pages holding the descriptor */
    CUdeviceptr ready_dev;  /* device address of the descriptor's ready word */
    cudaEvent_t done;       /* recorded at each publish, after the ready write */
    bool done_pending;      /* done was recorded and not seen complete */
    bool loaned;
    uint32_t gen;           /* last generation written (or found) in ready */
    size_t loan_size;
    uint64_t key;
    size_t alloc_size;      /* 0: no device memory yet */
    CUdeviceptr va;
    CUmemGenericAllocationHandle handle;
    cudaIpcMemHandle_t ipc_handle;
} dchunk;

struct ferry_gpu_publisher {
    uint64_t magic;
    ferry_publisher *pub;
    int device;
    CUdevice cudev;
    ferry_gpu_ipc ipc;
    size_t gran;     /* VMM granularity, or the legacy rounding */
    size_t page;
    dchunk *chunks;  /* indexed by host chunk index */
    uint32_t nchunks;
    ferry_gpu_publisher_stats stats;
};

void ferry_gpu_publisher_options_init(ferry_gpu_publisher_options *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->device = 0;
    o->ipc = FERRY_GPU_IPC_AUTO;
}

static void vmm_prop(CUmemAllocationProp *prop, CUdevice dev)
{
    memset(prop, 0, sizeof *prop);
    prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop->location.id = (int)dev;
    prop->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
}

ferry_err ferry_gpu_publisher_create(ferry_gpu_publisher **out, ferry_publisher *pub,
                                     const ferry_gpu_publisher_options *options)
{
    if (!out)
        return FERRY_EINVAL;
    *out = NULL;
    ferry_gpu_publisher_options o;
    ferry_gpu_publisher_options_init(&o);
    if (options)
        o = *options;
    ferry_err err = ferry__gpu_check_device(o.device);
    if (err)
        return err;
    if (!pub || o.ipc < FERRY_GPU_IPC_AUTO || o.ipc > FERRY_GPU_IPC_LEGACY)
        return FERRY_EINVAL;
    ferry_publisher_stats st;
    if ((err = ferry_publisher_stats_get(pub, &st)))
        return err;
    pthread_once(&drv_once, drv_load);
    if (!drv.base)
        return FERRY_ENOTSUP;

    int prev;
    if ((err = device_enter(o.device, &prev)))
        return err;
    ferry_gpu_publisher *g = calloc(1, sizeof *g);
    if (!g) {
        device_leave(o.device, prev);
        return FERRY_ENOMEM;
    }
    g->magic = GPUB_MAGIC;
    g->pub = pub;
    g->device = o.device;
    long page = sysconf(_SC_PAGESIZE);
    g->page = page > 0 ? (size_t)page : 4096;
    CUresult r = drv.device_get(&g->cudev, o.device);
    if (r != CUDA_SUCCESS) {
        err = cu_err(r);
        goto fail;
    }
    int map_host = 0, uva = 0;
    cudaDeviceGetAttribute(&map_host, cudaDevAttrCanMapHostMemory, o.device);
    cudaDeviceGetAttribute(&uva, cudaDevAttrUnifiedAddressing, o.device);
    (void)cudaGetLastError();
    (void)map_host;
    bool vmm_ok = drv.vmm &&
                  dev_attr(g->cudev, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) &&
                  dev_attr(g->cudev, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED);
    bool legacy_ok = uva != 0; /* legacy IPC needs unified addressing on Linux */
    if (o.ipc == FERRY_GPU_IPC_AUTO)
        o.ipc = vmm_ok ? FERRY_GPU_IPC_VMM : FERRY_GPU_IPC_LEGACY;
    if ((o.ipc == FERRY_GPU_IPC_VMM && !vmm_ok) || (o.ipc == FERRY_GPU_IPC_LEGACY && !legacy_ok)) {
        err = FERRY_ENOTSUP;
        goto fail;
    }
    g->ipc = o.ipc;
    if (g->ipc == FERRY_GPU_IPC_VMM) {
        CUmemAllocationProp prop;
        vmm_prop(&prop, g->cudev);
        if ((r = drv.granularity(&g->gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)) !=
                CUDA_SUCCESS ||
            g->gran == 0) {
            err = r ? cu_err(r) : FERRY_ENOTSUP;
            goto fail;
        }
    } else {
        g->gran = (size_t)64 << 10;
    }
    device_leave(o.device, prev);
    *out = g;
    return FERRY_OK;
fail:
    device_leave(o.device, prev);
    free(g);
    return err;
}

static ferry_err gpub_check(const ferry_gpu_publisher *g)
{
    if (!g)
        return FERRY_EINVAL;
    return g->magic == GPUB_MAGIC ? FERRY_OK : FERRY_ECLOSED;
}

ferry_err ferry_gpu_publisher_ipc(ferry_gpu_publisher *gpub, ferry_gpu_ipc *ipc)
{
    ferry_err err = gpub_check(gpub);
    if (err)
        return err;
    if (!ipc)
        return FERRY_EINVAL;
    *ipc = gpub->ipc;
    return FERRY_OK;
}

/* Frees a chunk's device memory; its last frame's work must have completed. Importers keep
 * their own mappings (VMM) until they drop them. */
static void chunk_free_device(ferry_gpu_publisher *g, dchunk *c)
{
    if (!c->alloc_size)
        return;
    if (g->ipc == FERRY_GPU_IPC_VMM) {
        /* Withdraw the export from every subscriber; imports made from it stay valid. */
        ferry__publisher_detach(g->pub, c->key);
        drv.mem_unmap(c->va, c->alloc_size);
        drv.address_free(c->va, c->alloc_size);
        drv.mem_release(c->handle);
    } else if (cudaFree((void *)(uintptr_t)c->va) != cudaSuccess) {
        (void)cudaGetLastError();
    }
    c->alloc_size = 0;
    c->va = 0;
    c->key = 0;
}

static ferry_err chunk_alloc_vmm(ferry_gpu_publisher *g, dchunk *c, size_t size)
{
    size_t asize = round_up(size, g->gran);
    CUmemAllocationProp prop;
    vmm_prop(&prop, g->cudev);
    CUmemGenericAllocationHandle h;
    CUdeviceptr va = 0;
    int fd = -1;
    CUresult r = drv.mem_create(&h, asize, &prop, 0);
    if (r != CUDA_SUCCESS)
        return cu_err(r);
    if ((r = drv.address_reserve(&va, asize, g->gran, 0, 0)) != CUDA_SUCCESS)
        goto fail_release;
    if ((r = drv.mem_map(va, asize, 0, h, 0)) != CUDA_SUCCESS)
        goto fail_free;
    CUmemAccessDesc ad;
    memset(&ad, 0, sizeof ad);
    ad.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    ad.location.id = (int)g->cudev;
    ad.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if ((r = drv.set_access(va, asize, &ad, 1)) != CUDA_SUCCESS)
        goto fail_unmap;
    if ((r = drv.export_handle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)) !=
        CUDA_SUCCESS)
        goto fail_unmap;
    uint64_t key = atomic_fetch_add_explicit(&next_key, 1, memory_order_relaxed);
    ferry_err err = ferry__publisher_attach(g->pub, key, &fd, 1);
    close(fd); /* the core keeps a duplicate */
    if (err) {
        drv.mem_unmap(va, asize);
        drv.address_free(va, asize);
        drv.mem_release(h);
        return err;
    }
    c->handle = h;
    c->va = va;
    c->alloc_size = asize;
    c->key = key;
    g->stats.exports++;
    return FERRY_OK;
fail_unmap:
    drv.mem_unmap(va, asize);
fail_free:
    drv.address_free(va, asize);
fail_release:
    drv.mem_release(h);
    return cu_err(r);
}

static ferry_err chunk_alloc_legacy(ferry_gpu_publisher *g, dchunk *c, size_t size)
{
    size_t asize = round_up(size, g->gran);
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, asize);
    if (e != cudaSuccess)
        return rt_fail(e);
    if ((e = cudaIpcGetMemHandle(&c->ipc_handle, p)) != cudaSuccess) {
        cudaFree(p);
        return rt_fail(e);
    }
    c->va = (CUdeviceptr)(uintptr_t)p;
    c->alloc_size = asize;
    c->key = atomic_fetch_add_explicit(&next_key, 1, memory_order_relaxed);
    g->stats.exports++;
    return FERRY_OK;
}

/* First use of host chunk payload: the descriptor is written there by the CPU alone (the ready
 * word lives in device memory), so nothing needs registering. */
static ferry_err chunk_host_setup(ferry_gpu_publisher *g, dchunk *c, uint8_t *payload)
{
    (void)g;
    c->payload = payload;
    return FERRY_OK;
}

ferry_err ferry_gpu_loan(ferry_gpu_publisher *gpub, size_t size, ferry_gpu_stream stream,
                         void **device_ptr)
{
    ferry_err err = gpub_check(gpub);
    if (err)
        return err;
    if (!device_ptr || size == 0)
        return FERRY_EINVAL;
    *device_ptr = NULL;
    ferry_gpu_publisher *g = gpub;
    void *payload;
    /* Room for the largest metadata, so that every descriptor loan is of one size class. */
    if ((err = ferry_loan(g->pub, FERRY__GPU_META_OFFSET + FERRY_GPU_META_MAX, &payload)))
        return err;
    uint32_t i;
    if ((err = ferry__publisher_loan_index(g->pub, payload, &i))) {
        ferry_loan_release(g->pub, payload);
        return err;
    }
    int prev;
    if ((err = device_enter(g->device, &prev))) {
        ferry_loan_release(g->pub, payload);
        return err;
    }
    if (i >= g->nchunks && !grow((void **)&g->chunks, &g->nchunks, i + 1, sizeof(dchunk))) {
        err = FERRY_ENOMEM;
        goto fail;
    }
    dchunk *c = &g->chunks[i];
    if (c->loaned) { /* the core handed out a chunk this object thinks is loaned */
        err = FERRY_ESTATE;
        goto fail;
    }
    if (c->payload != (uint8_t *)payload && (err = chunk_host_setup(g, c, payload)))
        goto fail;
    cudaError_t e;
    if (!c->done &&
        (e = cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming)) != cudaSuccess) {
        c->done = NULL;
        err = rt_fail(e);
        goto fail;
    }
    if (c->alloc_size < size + FERRY__GPU_READY_BYTES) {
        /* Growing: the old allocation's last frame must be done before it is unmapped (a CPU
         * wait, only when frames grow). */
        if (c->done_pending && cudaEventSynchronize(c->done) != cudaSuccess)
            (void)cudaGetLastError();
        c->done_pending = false;
        chunk_free_device(g, c);
        err = g->ipc == FERRY_GPU_IPC_VMM ? chunk_alloc_vmm(g, c, size + FERRY__GPU_READY_BYTES)
                                           : chunk_alloc_legacy(g, c, size + FERRY__GPU_READY_BYTES);
        if (err)
            goto fail;
        /* The ready word of fresh memory starts at 0, below every generation (they start at 1
         * and only grow), so no reader can mistake it for a published frame. */
        c->ready_dev = c->va + c->alloc_size - FERRY__GPU_READY_BYTES;
        if ((e = cudaMemsetAsync((void *)(uintptr_t)c->ready_dev, 0, sizeof(uint32_t),
                                 (cudaStream_t)stream)) != cudaSuccess ||
            (e = cudaStreamSynchronize((cudaStream_t)stream)) != cudaSuccess) {
            err = rt_fail(e);
            goto fail;
        }
    }
    if (c->done_pending) {
        /* The previous frame of this chunk went out with nobody reading it (or its readers were
         * done before its writer): its work may still run. The new work waits on the GPU. */
        e = ferry__gpu_event_query(c->done);
        if (e == cudaErrorNotReady) {
            if ((e = cudaStreamWaitEvent((cudaStream_t)stream, c->done, 0)) != cudaSuccess) {
                err = rt_fail(e);
                goto fail;
            }
            g->stats.reuse_waits++;
        } else {
            if (e != cudaSuccess)
                (void)cudaGetLastError();
            c->done_pending = false;
        }
    }
    c->loaned = true;
    c->loan_size = size;
    device_leave(g->device, prev);
    *device_ptr = (void *)(uintptr_t)c->va;
    return FERRY_OK;
fail:
    device_leave(g->device, prev);
    ferry_loan_release(g->pub, payload);
    return err;
}

/* The loaned chunk whose device memory is device_ptr. */
static ferry_err find_loan(ferry_gpu_publisher *g, const void *device_ptr, dchunk **out)
{
    if (!device_ptr)
        return FERRY_EINVAL;
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)device_ptr;
    for (uint32_t i = 0; i < g->nchunks; i++)
        if (g->chunks[i].alloc_size && g->chunks[i].va == p) {
            if (!g->chunks[i].loaned)
                return FERRY_ESTATE;
            *out = &g->chunks[i];
            return FERRY_OK;
        }
    return FERRY_EFOREIGN;
}

ferry_err ferry_gpu_publish(ferry_gpu_publisher *gpub, void *device_ptr, ferry_gpu_stream stream)
{
    return ferry_gpu_publish_meta(gpub, device_ptr, stream, NULL, 0);
}

ferry_err ferry_gpu_publish_meta(ferry_gpu_publisher *gpub, void *device_ptr,
                                 ferry_gpu_stream stream, const void *meta, size_t meta_size)
{
    ferry_err err = gpub_check(gpub);
    if (err)
        return err;
    if (meta_size > FERRY_GPU_META_MAX || (meta_size > 0 && !meta))
        return FERRY_EINVAL;
    ferry_gpu_publisher *g = gpub;
    dchunk *c;
    if ((err = find_loan(g, device_ptr, &c)))
        return err;
    ferry__gpu_frame_desc *d = (ferry__gpu_frame_desc *)c->payload;
    uint32_t gen = c->gen + 1;
    d->magic = FERRY__GPU_FRAME_MAGIC;
    d->version = FERRY__GPU_FRAME_VERSION;
    d->ipc = (uint32_t)g->ipc;
    d->key = c->key;
    d->offset = 0;
    d->size = c->loan_size;
    d->alloc_size = c->alloc_size;
    d->generation = gen;
    d->device = (uint32_t)g->device;
    d->ready_offset = c->alloc_size - FERRY__GPU_READY_BYTES;
    if (g->ipc == FERRY_GPU_IPC_LEGACY)
        memcpy(d->legacy_handle, &c->ipc_handle, sizeof d->legacy_handle);
    else
        memset(d->legacy_handle, 0, sizeof d->legacy_handle);
    d->meta_offset = (uint32_t)FERRY__GPU_META_OFFSET;
    d->meta_size = (uint32_t)meta_size;
    memset(c->payload + sizeof *d, 0, FERRY__GPU_META_OFFSET - sizeof *d);
    if (meta_size)
        memcpy(c->payload + FERRY__GPU_META_OFFSET, meta, meta_size);

    int prev;
    if ((err = device_enter(g->device, &prev)))
        return err;
    /* Default flags: the write waits for the stream's earlier work and is preceded by a memory
     * barrier, so the frame's bytes are visible to whoever sees the new generation. */
    CUresult r = drv.write_value32((CUstream)stream, c->ready_dev, gen, 0);
    if (r != CUDA_SUCCESS) {
        device_leave(g->device, prev);
        return cu_err(r);
    }
    c->gen = gen;
    cudaError_t e = cudaEventRecord(c->done, (cudaStream_t)stream);
    device_leave(g->device, prev);
    if (e != cudaSuccess)
        return rt_fail(e);
    c->done_pending = true;
    if ((err = ferry_publish(g->pub, c->payload, FERRY__GPU_META_OFFSET + meta_size)))
        return err; /* still the caller's loan; a later publish writes a newer generation */
    c->loaned = false;
    return FERRY_OK;
}

ferry_err ferry_gpu_publisher_stats_get(ferry_gpu_publisher *gpub, ferry_gpu_publisher_stats *out)
{
    ferry_err err = gpub_check(gpub);
    if (err)
        return err;
    if (!out)
        return FERRY_EINVAL;
    *out = gpub->stats;
    return FERRY_OK;
}

ferry_err ferry__gpu_loan_info(ferry_gpu_publisher *gpub, const void *device_ptr, size_t *size,
                              int *device)
{
    ferry_err err = gpub_check(gpub);
    if (err)
        return err;
    dchunk *c;
    if (!size || !device || (err = find_loan(gpub, device_ptr, &c)))
        return err ? err : FERRY_EINVAL;
    *size = c->loan_size;
    *device = gpub->device;
    return FERRY_OK;
}

ferry_err ferry_gpu_loan_release(ferry_gpu_publisher *gpub, void *device_ptr)
{
    ferry_err err = gpub_check(gpub);
    if (err)
        return err;
    dchunk *c;
    if ((err = find_loan(gpub, device_ptr, &c)))
        return err;
    if ((err = ferry_loan_release(gpub->pub, c->payload)))
        return err;
    c->loaned = false;
    return FERRY_OK;
}

ferry_err ferry_gpu_publisher_destroy(ferry_gpu_publisher *gpub)
{
    ferry_err err = gpub_check(gpub);
    if (err)
        return err;
    ferry_gpu_publisher *g = gpub;
    int prev;
    bool entered = device_enter(g->device, &prev) == FERRY_OK;
    for (uint32_t i = 0; i < g->nchunks; i++) {
        dchunk *c = &g->chunks[i];
        if (c->loaned)
            ferry_loan_release(g->pub, c->payload);
        if (c->done) {
            if (c->done_pending && cudaEventSynchronize(c->done) != cudaSuccess)
                (void)cudaGetLastError();
            cudaEventDestroy(c->done);
        }
        chunk_free_device(g, c);
        if (c->reg_start && cudaHostUnregister(c->reg_start) != cudaSuccess)
            (void)cudaGetLastError();
    }
    if (entered)
        device_leave(g->device, prev);
    free(g->chunks);
    g->magic = 0;
    free(g);
    return FERRY_OK;
}

/* ---- subscriber ----------------------------------------------------------------------------- */

typedef struct import {
    bool used;
    uint32_t ipc;
    uint32_t gen; /* the connection's generation */
    uint32_t holds; /* frames taken or pending release */
    uint64_t key;
    CUdeviceptr va;
    size_t size;
    CUmemGenericAllocationHandle handle;
} import;

typedef struct islot {
    import *chunks; /* indexed by host chunk index */
    uint32_t nchunks;
} islot;

typedef struct pending {
    cudaEvent_t ev;
    ferry_sample sample;
    uint64_t key;
    uint32_t slot, chunk;
    bool orphan; /* its connection closed: nothing to give back */
} pending;

/* The close hook's argument. It outlives the subscriber object (the core has no way to remove a
 * hook): a later object on the same subscriber takes it over; the hook frees it when the
 * subscriber itself is destroyed. */
typedef struct anchor {
    uint64_t magic;
    ferry_gpu_subscriber *owner;
} anchor;

struct ferry_gpu_subscriber {
    uint64_t magic;
    ferry_subscriber *sub;
    int device;
    CUdevice cudev;
    anchor *anchor;
    islot *slots; /* indexed by connection slot */
    uint32_t nslots;
    pending *pend; /* entries [0, npend) are parked; [npend, cappend) hold idle events */
    uint32_t npend, cappend;
    uint32_t taken;
    ferry_gpu_subscriber_stats stats;
};

static void unimport(ferry_gpu_subscriber *g, import *im)
{
    if (!im->used)
        return;
    if (im->ipc == FERRY_GPU_IPC_VMM) {
        drv.mem_unmap(im->va, im->size);
        drv.address_free(im->va, im->size);
        drv.mem_release(im->handle);
    } else if (cudaIpcCloseMemHandle((void *)(uintptr_t)im->va) != cudaSuccess) {
        (void)cudaGetLastError();
    }
    memset(im, 0, sizeof *im);
    g->stats.unimports++;
}

/* Before the connection's mappings go: work still parked on its frames is waited for (they
 * could not be given back anyway), then its imports are undone. */
static void slot_close(ferry_gpu_subscriber *g, uint32_t slot)
{
    for (uint32_t k = 0; k < g->npend; k++) {
        pending *p = &g->pend[k];
        if (p->orphan || (slot != UINT32_MAX && p->slot != slot))
            continue;
        if (cudaEventSynchronize(p->ev) != cudaSuccess)
            (void)cudaGetLastError();
        p->orphan = true;
    }
    for (uint32_t s = 0; s < g->nslots; s++) {
        if (slot != UINT32_MAX && s != slot)
            continue;
        for (uint32_t i = 0; i < g->slots[s].nchunks; i++)
            unimport(g, &g->slots[s].chunks[i]);
    }
}

static void close_hook(void *arg, uint32_t slot, uint32_t gen)
{
    anchor *a = arg;
    (void)gen; /* whatever is imported under the slot belongs to the connection that closes */
    if (!a || a->magic != ANCHOR_MAGIC)
        return;
    ferry_gpu_subscriber *g = a->owner;
    if (g) {
        int prev;
        bool entered = device_enter(g->device, &prev) == FERRY_OK;
        slot_close(g, slot);
        if (entered)
            device_leave(g->device, prev);
    }
    if (slot == UINT32_MAX) {
        if (g)
            g->anchor = NULL;
        a->magic = 0;
        free(a);
    }
}

void ferry_gpu_subscriber_options_init(ferry_gpu_subscriber_options *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->device = 0;
}

ferry_err ferry_gpu_subscriber_create(ferry_gpu_subscriber **out, ferry_subscriber *sub,
                                      const ferry_gpu_subscriber_options *options)
{
    if (!out)
        return FERRY_EINVAL;
    *out = NULL;
    ferry_gpu_subscriber_options o;
    ferry_gpu_subscriber_options_init(&o);
    if (options)
        o = *options;
    int device = o.device;
    ferry_err err = ferry__gpu_check_device(device);
    if (err)
        return err;
    if (!sub)
        return FERRY_EINVAL;
    if ((err = ferry__subscriber_check(sub)))
        return err;
    pthread_once(&drv_once, drv_load);
    if (!drv.base)
        return FERRY_ENOTSUP;
    ferry_gpu_subscriber *g = calloc(1, sizeof *g);
    if (!g)
        return FERRY_ENOMEM;
    g->magic = GSUB_MAGIC;
    g->sub = sub;
    g->device = device;
    CUresult r = drv.device_get(&g->cudev, device);
    if (r != CUDA_SUCCESS) {
        free(g);
        return cu_err(r);
    }
    anchor *a = ferry__subscriber_close_hook_arg(sub, close_hook);
    if (a) {
        if (a->magic != ANCHOR_MAGIC || a->owner) {
            free(g);
            return FERRY_EBUSY; /* one device-frame subscriber per subscriber */
        }
    } else {
        if (!(a = calloc(1, sizeof *a))) {
            free(g);
            return FERRY_ENOMEM;
        }
        a->magic = ANCHOR_MAGIC;
        if ((err = ferry__subscriber_add_close_hook(sub, close_hook, a))) {
            free(a);
            free(g);
            return err;
        }
    }
    a->owner = g;
    g->anchor = a;
    *out = g;
    return FERRY_OK;
}

static ferry_err gsub_check(const ferry_gpu_subscriber *g)
{
    if (!g)
        return FERRY_EINVAL;
    if (g->magic != GSUB_MAGIC)
        return FERRY_ECLOSED;
    return g->anchor ? FERRY_OK : FERRY_ECLOSED; /* its subscriber was destroyed */
}

static import *import_at(ferry_gpu_subscriber *g, uint32_t slot, uint32_t chunk)
{
    if (slot >= g->nslots || chunk >= g->slots[slot].nchunks)
        return NULL;
    return &g->slots[slot].chunks[chunk];
}

/* Gives back the host samples of parked frames whose work completed (all of them, waiting,
 * when wait). */
static ferry_err reap(ferry_gpu_subscriber *g, bool wait)
{
    ferry_err first = FERRY_OK;
    for (uint32_t k = 0; k < g->npend;) {
        pending *p = &g->pend[k];
        if (!p->orphan) {
            cudaError_t e = wait ? cudaEventSynchronize(p->ev) : ferry__gpu_event_query(p->ev);
            if (e == cudaErrorNotReady) {
                k++;
                continue;
            }
            if (e != cudaSuccess && !first)
                first = rt_fail(e); /* the context failed: its work will not run any more */
        }
        pending done = *p;
        *p = g->pend[g->npend - 1];
        g->pend[g->npend - 1] = done; /* the event stays with the array, idle */
        g->npend--;
        if (!done.orphan) {
            import *im = import_at(g, done.slot, done.chunk);
            if (im && im->used && im->key == done.key && im->holds)
                im->holds--;
            /* May close the connection (its publisher is gone), which runs close_hook: it only
             * marks entries, so this walk stays valid. */
            ferry_release(g->sub, &g->pend[g->npend].sample);
        }
    }
    return first;
}

static ferry_err import_vmm(ferry_gpu_subscriber *g, const ferry__sample_where *w,
                            const ferry__gpu_frame_desc *d, import *im)
{
    if (!drv.vmm)
        return FERRY_ENOTSUP;
    int fds[FERRY__ATTACH_FDS];
    int n = 0;
    ferry_err err = ferry__subscriber_attachment(g->sub, w->slot, w->gen, d->key, fds, &n);
    if (err == FERRY_EAGAIN || (err == FERRY_OK && n != 1))
        return FERRY_EPROTO; /* an attachment is sent before any sample naming it */
    if (err)
        return err;
    CUmemGenericAllocationHandle h;
    CUresult r = drv.import_handle(&h, (void *)(uintptr_t)fds[0],
                                   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (r != CUDA_SUCCESS)
        return r == CUDA_ERROR_OUT_OF_MEMORY ? FERRY_ENOMEM : FERRY_EPROTO;
    CUmemAllocationProp prop;
    size_t gran = 0;
    CUdeviceptr va = 0;
    if ((r = drv.props_from_handle(&prop, h)) != CUDA_SUCCESS ||
        (r = drv.granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM)) != CUDA_SUCCESS ||
        gran == 0 || d->alloc_size % gran) {
        drv.mem_release(h);
        return FERRY_EPROTO;
    }
    if ((r = drv.address_reserve(&va, d->alloc_size, gran, 0, 0)) != CUDA_SUCCESS) {
        drv.mem_release(h);
        return cu_err(r);
    }
    /* Fails when the descriptor claims more than the allocation holds. */
    if ((r = drv.mem_map(va, d->alloc_size, 0, h, 0)) != CUDA_SUCCESS) {
        drv.address_free(va, d->alloc_size);
        drv.mem_release(h);
        return r == CUDA_ERROR_OUT_OF_MEMORY ? FERRY_ENOMEM : FERRY_EPROTO;
    }
    CUmemAccessDesc ad;
    memset(&ad, 0, sizeof ad);
    ad.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    ad.location.id = (int)g->cudev;
    ad.flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
    if ((r = drv.set_access(va, d->alloc_size, &ad, 1)) != CUDA_SUCCESS) {
        /* Read-only device mappings are refused on some platforms: readers still work, the
         * frame is then writable by a buggy reader (counted, tests report it). */
        ad.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        if ((r = drv.set_access(va, d->alloc_size, &ad, 1)) != CUDA_SUCCESS) {
            drv.mem_unmap(va, d->alloc_size);
            drv.address_free(va, d->alloc_size);
            drv.mem_release(h);
            return cu_err(r);
        }
        g->stats.readonly_fallbacks++;
    }
    im->handle = h;
    im->va = va;
    return FERRY_OK;
}

static ferry_err import_legacy(const ferry__gpu_frame_desc *d, import *im)
{
    cudaIpcMemHandle_t h;
    memcpy(&h, d->legacy_handle, sizeof h);
    void *p = NULL;
    cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return e == cudaErrorMemoryAllocation ? FERRY_ENOMEM : FERRY_EPROTO;
    }
    CUdeviceptr base = 0;
    size_t size = 0;
    if (drv.address_range(&base, &size, (CUdeviceptr)(uintptr_t)p) != CUDA_SUCCESS ||
        base != (CUdeviceptr)(uintptr_t)p || size < d->alloc_size) {
        cudaIpcCloseMemHandle(p);
        (void)cudaGetLastError();
        return FERRY_EPROTO;
    }
    im->va = (CUdeviceptr)(uintptr_t)p;
    return FERRY_OK;
}

/* The import of the frame's allocation, made when the chunk or its key is new. */
static ferry_err import_get(ferry_gpu_subscriber *g, const ferry__sample_where *w,
                            const ferry__gpu_frame_desc *d, import **out)
{
    if (w->slot >= g->nslots &&
        !grow((void **)&g->slots, &g->nslots, w->slot + 1, sizeof(islot)))
        return FERRY_ENOMEM;
    islot *s = &g->slots[w->slot];
    if (w->chunk >= s->nchunks &&
        !grow((void **)&s->chunks, &s->nchunks, w->chunk + 1, sizeof(import)))
        return FERRY_ENOMEM;
    import *im = &s->chunks[w->chunk];
    if (im->used && im->gen == w->gen && im->key == d->key && im->ipc == d->ipc) {
        if (im->size != d->alloc_size)
            return FERRY_EPROTO;
        *out = im;
        return FERRY_OK;
    }
    if (im->used) {
        /* The publisher replaced the chunk's memory (a bigger frame). Frames of the old memory
         * cannot be held: the host chunk came back before it was loaned again. */
        if (im->holds)
            return FERRY_EPROTO;
        unimport(g, im);
    }
    import fresh;
    memset(&fresh, 0, sizeof fresh);
    ferry_err err = d->ipc == FERRY_GPU_IPC_VMM ? import_vmm(g, w, d, &fresh)
                                                : import_legacy(d, &fresh);
    if (err)
        return err;
    fresh.used = true;
    fresh.ipc = d->ipc;
    fresh.gen = w->gen;
    fresh.key = d->key;
    fresh.size = (size_t)d->alloc_size;
    *im = fresh;
    g->stats.imports++;
    *out = im;
    return FERRY_OK;
}

/* Validates a taken sample's descriptor, imports its memory, makes stream wait for it. */
static ferry_err frame_open(ferry_gpu_subscriber *g, const ferry_sample *s,
                            ferry_gpu_stream stream, ferry_gpu_frame *frame)
{
    ferry__gpu_frame_desc d;
    if (!s->data || s->size < sizeof d)
        return FERRY_EPROTO;
    memcpy(&d, s->data, sizeof d); /* read once: the publisher could change it */
    if (d.magic != FERRY__GPU_FRAME_MAGIC || d.version != FERRY__GPU_FRAME_VERSION ||
        (d.ipc != FERRY_GPU_IPC_VMM && d.ipc != FERRY_GPU_IPC_LEGACY) || d.size == 0 ||
        d.alloc_size == 0 || d.alloc_size > SIZE_MAX / 2 || d.offset > d.alloc_size ||
        d.size > d.alloc_size - d.offset || d.ready_offset % 4 ||
        d.ready_offset > d.alloc_size - sizeof(uint32_t))
        return FERRY_EPROTO;
    /* The metadata stays in the sample (read-only here, still writable by the publisher): its
     * placement is checked, its contents are for the reader to validate. */
    if (d.meta_size > FERRY_GPU_META_MAX || d.meta_offset < sizeof d || d.meta_offset % 8 ||
        d.meta_offset > s->size || d.meta_size > s->size - d.meta_offset)
        return FERRY_EPROTO;
    ferry__sample_where w;
    ferry_err err = ferry__sample_where_get(g->sub, s, &w);
    if (err)
        return err;
    import *im;
    if ((err = import_get(g, &w, &d, &im)))
        return err;
    CUdeviceptr ready = im->va + d.ready_offset;
    CUresult r = drv.wait_value32((CUstream)stream, ready, d.generation, CU_STREAM_WAIT_VALUE_GEQ);
    if (r != CUDA_SUCCESS)
        return cu_err(r);
    im->holds++;
    g->taken++;
    frame->device_ptr = (const void *)(uintptr_t)(im->va + d.offset);
    frame->size = (size_t)d.size;
    frame->sequence = s->sequence;
    frame->publish_time = s->publish_time;
    frame->publisher_id = s->publisher_id;
    frame->host = *s;
    frame->meta = d.meta_size ? (const uint8_t *)s->data + d.meta_offset : NULL;
    frame->meta_size = d.meta_size;
    frame->device = g->device;
    return FERRY_OK;
}

ferry_err ferry_gpu_take(ferry_gpu_subscriber *gsub, ferry_gpu_stream stream,
                         ferry_gpu_frame *frame)
{
    ferry_err err = gsub_check(gsub);
    if (err)
        return err;
    if (!frame)
        return FERRY_EINVAL;
    ferry_gpu_subscriber *g = gsub;
    int prev;
    if ((err = device_enter(g->device, &prev)))
        return err;
    reap(g, false);
    ferry_sample s;
    if (!(err = ferry_take(g->sub, &s))) {
        memset(frame, 0, sizeof *frame);
        if ((err = frame_open(g, &s, stream, frame)))
            ferry_release(g->sub, &s);
    }
    device_leave(g->device, prev);
    return err;
}

ferry_err ferry_gpu_frame_release(ferry_gpu_subscriber *gsub, ferry_gpu_frame *frame,
                                  ferry_gpu_stream stream)
{
    ferry_err err = gsub_check(gsub);
    if (err)
        return err;
    if (!frame)
        return FERRY_EINVAL;
    ferry_gpu_subscriber *g = gsub;
    if (!frame->device_ptr)
        return FERRY_ESTATE;
    ferry__sample_where w;
    if ((err = ferry__sample_where_get(g->sub, &frame->host, &w)))
        return err;
    for (uint32_t k = 0; k < g->npend; k++) /* a chunk is held once: parked means released */
        if (!g->pend[k].orphan && g->pend[k].slot == w.slot && g->pend[k].chunk == w.chunk)
            return FERRY_ESTATE;
    import *im = import_at(g, w.slot, w.chunk);
    int prev;
    if ((err = device_enter(g->device, &prev)))
        return err;
    bool parked = false;
    /* The list grows to the most frames ever outstanding (bounded by max_held), events with
     * it: no allocation per frame once that is reached. */
    if (g->npend == g->cappend) {
        uint32_t old = g->cappend;
        if (grow((void **)&g->pend, &g->cappend, g->npend + 1, sizeof(pending))) {
            for (uint32_t k = old; k < g->cappend; k++)
                if (cudaEventCreateWithFlags(&g->pend[k].ev, cudaEventDisableTiming) !=
                    cudaSuccess) {
                    (void)cudaGetLastError();
                    g->pend[k].ev = NULL;
                }
        }
    }
    if (g->npend < g->cappend && g->pend[g->npend].ev &&
        cudaEventRecord(g->pend[g->npend].ev, (cudaStream_t)stream) == cudaSuccess) {
        pending *p = &g->pend[g->npend++];
        p->sample = frame->host;
        p->key = im ? im->key : 0;
        p->slot = w.slot;
        p->chunk = w.chunk;
        p->orphan = false;
        parked = true;
    }
    if (!parked) {
        /* No event to park it with: wait here instead (a CPU wait, only when out of memory). */
        (void)cudaGetLastError();
        if (cudaStreamSynchronize((cudaStream_t)stream) != cudaSuccess)
            (void)cudaGetLastError();
        if (im && im->holds)
            im->holds--;
        ferry_sample s = frame->host;
        ferry_release(g->sub, &s);
    }
    if (g->taken)
        g->taken--;
    frame->device_ptr = NULL;
    frame->meta = NULL;
    frame->meta_size = 0;
    reap(g, false);
    device_leave(g->device, prev);
    return FERRY_OK;
}

ferry_err ferry_gpu_subscriber_poll(ferry_gpu_subscriber *gsub)
{
    ferry_err err = gsub_check(gsub);
    if (err)
        return err;
    int prev;
    if ((err = device_enter(gsub->device, &prev)))
        return err;
    err = reap(gsub, false);
    device_leave(gsub->device, prev);
    return err;
}

ferry_err ferry_gpu_subscriber_stats_get(ferry_gpu_subscriber *gsub,
                                         ferry_gpu_subscriber_stats *out)
{
    ferry_err err = gsub_check(gsub);
    if (err)
        return err;
    if (!out)
        return FERRY_EINVAL;
    *out = gsub->stats;
    return FERRY_OK;
}

ferry_err ferry_gpu_subscriber_destroy(ferry_gpu_subscriber *gsub)
{
    if (!gsub)
        return FERRY_EINVAL;
    if (gsub->magic != GSUB_MAGIC)
        return FERRY_ECLOSED;
    ferry_gpu_subscriber *g = gsub;
    if (g->taken && g->anchor)
        return FERRY_EBUSY;
    int prev;
    bool entered = device_enter(g->device, &prev) == FERRY_OK;
    if (g->anchor)
        reap(g, true);
    slot_close(g, UINT32_MAX);
    for (uint32_t k = 0; k < g->cappend; k++)
        if (g->pend[k].ev)
            cudaEventDestroy(g->pend[k].ev);
    if (entered)
        device_leave(g->device, prev);
    for (uint32_t s = 0; s < g->nslots; s++)
        free(g->slots[s].chunks);
    free(g->slots);
    free(g->pend);
    if (g->anchor)
        g->anchor->owner = NULL;
    g->magic = 0;
    free(g);
    return FERRY_OK;
}
