/*
 * Device frames across processes, the publisher: device chunks behind its host chunks, exported
 * once per allocation, filled by the application's stream and published with the chunk's
 * generation written to its ready word on that stream (frames.c tells the whole story).
 *
 * One thread at a time per object, as for the core's publisher.
 */
#include "gpu/internal.h"

#include "core/module.h"
#include "gpu/frames_internal.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GPUB_MAGIC 0x4255504755504746ULL /* publisher object */

/* A key names an allocation to the subscribers of a host publisher for as long as that publisher
 * lives, and a host publisher may carry device-frame publishers one after the other: keys from
 * one counter of the process stay unique across all of them. */
static _Atomic uint64_t next_key = 1;

static size_t round_up(size_t v, size_t to)
{
    return (v + to - 1) / to * to;
}

static int dev_attr(CUdevice d, CUdevice_attribute a)
{
    int v = 0;
    if (!ferry__gpu_drv.device_get_attribute ||
        ferry__gpu_drv.device_get_attribute(&v, a, d) != CUDA_SUCCESS)
        return 0;
    return v;
}

typedef struct dchunk {
    uint8_t *payload;      /* the host chunk's payload (descriptor); NULL before first use */
    CUdeviceptr ready_dev; /* device address of the descriptor's ready word */
    cudaEvent_t done;      /* recorded at each publish, after the ready write */
    bool done_pending;     /* done was recorded and not seen complete */
    bool loaned;
    uint32_t gen; /* last generation written (or found) in ready */
    size_t loan_size;
    uint64_t key;
    size_t alloc_size; /* 0: no device memory yet */
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
    size_t gran; /* VMM granularity, or the legacy rounding */
    size_t page;
    dchunk *chunks; /* indexed by host chunk index */
    uint32_t nchunks;
    bool early_wake;
    ferry_gpu_publisher_stats stats;
};

void ferry_gpu_publisher_options_init(ferry_gpu_publisher_options *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->device = 0;
    o->ipc = FERRY_GPU_IPC_AUTO;
    o->early_wake = true;
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
    ferry__gpu_drv_load();
    if (!ferry__gpu_drv.base)
        return FERRY_ENOTSUP;

    int prev;
    if ((err = ferry__gpu_device_enter(o.device, &prev)))
        return err;
    ferry_gpu_publisher *g = calloc(1, sizeof *g);
    if (!g) {
        ferry__gpu_device_leave(o.device, prev);
        return FERRY_ENOMEM;
    }
    g->magic = GPUB_MAGIC;
    g->pub = pub;
    g->device = o.device;
    g->early_wake = o.early_wake;
    long page = sysconf(_SC_PAGESIZE);
    g->page = page > 0 ? (size_t)page : 4096;
    CUresult r = ferry__gpu_drv.device_get(&g->cudev, o.device);
    if (r != CUDA_SUCCESS) {
        err = ferry__gpu_cu_err(r);
        goto fail;
    }
    int map_host = 0, uva = 0;
    cudaDeviceGetAttribute(&map_host, cudaDevAttrCanMapHostMemory, o.device);
    cudaDeviceGetAttribute(&uva, cudaDevAttrUnifiedAddressing, o.device);
    (void)cudaGetLastError();
    (void)map_host;
    bool vmm_ok =
        ferry__gpu_drv.vmm &&
        dev_attr(g->cudev, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) &&
        dev_attr(g->cudev, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED);
    bool legacy_ok = uva != 0; /* legacy IPC needs unified addressing on Linux */
    bool automatic = o.ipc == FERRY_GPU_IPC_AUTO;
    if (automatic)
        o.ipc = vmm_ok ? FERRY_GPU_IPC_VMM : FERRY_GPU_IPC_LEGACY;
    if ((o.ipc == FERRY_GPU_IPC_VMM && !vmm_ok) || (o.ipc == FERRY_GPU_IPC_LEGACY && !legacy_ok)) {
        ferry__endpoint_log(pub, FERRY_LOG_ERROR, "device frames by %s refused: %s",
                            o.ipc == FERRY_GPU_IPC_VMM ? "VMM" : "legacy CUDA IPC",
                            o.ipc == FERRY_GPU_IPC_VMM
                                ? "the driver or device has no POSIX file-descriptor export"
                                : "the device has no unified addressing");
        err = FERRY_ENOTSUP;
        goto fail;
    }
    g->ipc = o.ipc;
    /* The path in use and why, once: what a handoff costs depends on it (docs/gpu.md). */
    bool mps = false;
    ferry_gpu_mps_enabled(o.device, &mps);
    ferry__endpoint_note(pub, "device frames on device %d by %s%s; MPS %s", o.device,
                         g->ipc == FERRY_GPU_IPC_VMM ? "VMM allocations (file descriptors)"
                                                     : "legacy CUDA IPC handles",
                         automatic && !vmm_ok ? " (no POSIX file-descriptor export here)" : "",
                         mps ? "on: readers share one context"
                             : "off: each frame waits for the GPU to switch between the "
                               "processes' contexts");
    if (g->ipc == FERRY_GPU_IPC_VMM) {
        CUmemAllocationProp prop;
        vmm_prop(&prop, g->cudev);
        if ((r = ferry__gpu_drv.granularity(
                 &g->gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)) != CUDA_SUCCESS ||
            g->gran == 0) {
            err = r ? ferry__gpu_cu_err(r) : FERRY_ENOTSUP;
            goto fail;
        }
    } else {
        g->gran = (size_t)64 << 10;
    }
    ferry__gpu_device_leave(o.device, prev);
    *out = g;
    return FERRY_OK;
fail:
    ferry__gpu_device_leave(o.device, prev);
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
        ferry__gpu_drv.mem_unmap(c->va, c->alloc_size);
        ferry__gpu_drv.address_free(c->va, c->alloc_size);
        ferry__gpu_drv.mem_release(c->handle);
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
    CUresult r = ferry__gpu_drv.mem_create(&h, asize, &prop, 0);
    if (r != CUDA_SUCCESS)
        return ferry__gpu_cu_err(r);
    if ((r = ferry__gpu_drv.address_reserve(&va, asize, g->gran, 0, 0)) != CUDA_SUCCESS)
        goto fail_release;
    if ((r = ferry__gpu_drv.mem_map(va, asize, 0, h, 0)) != CUDA_SUCCESS)
        goto fail_free;
    CUmemAccessDesc ad;
    memset(&ad, 0, sizeof ad);
    ad.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    ad.location.id = (int)g->cudev;
    ad.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if ((r = ferry__gpu_drv.set_access(va, asize, &ad, 1)) != CUDA_SUCCESS)
        goto fail_unmap;
    if ((r = ferry__gpu_drv.export_handle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)) !=
        CUDA_SUCCESS)
        goto fail_unmap;
    uint64_t key = atomic_fetch_add_explicit(&next_key, 1, memory_order_relaxed);
    ferry_err err = ferry__publisher_attach(g->pub, key, &fd, 1);
    close(fd); /* the core keeps a duplicate */
    if (err) {
        ferry__gpu_drv.mem_unmap(va, asize);
        ferry__gpu_drv.address_free(va, asize);
        ferry__gpu_drv.mem_release(h);
        return err;
    }
    c->handle = h;
    c->va = va;
    c->alloc_size = asize;
    c->key = key;
    g->stats.exports++;
    return FERRY_OK;
fail_unmap:
    ferry__gpu_drv.mem_unmap(va, asize);
fail_free:
    ferry__gpu_drv.address_free(va, asize);
fail_release:
    ferry__gpu_drv.mem_release(h);
    return ferry__gpu_cu_err(r);
}

static ferry_err chunk_alloc_legacy(ferry_gpu_publisher *g, dchunk *c, size_t size)
{
    size_t asize = round_up(size, g->gran);
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, asize);
    if (e != cudaSuccess)
        return ferry__gpu_rt_fail(e);
    if ((e = cudaIpcGetMemHandle(&c->ipc_handle, p)) != cudaSuccess) {
        cudaFree(p);
        return ferry__gpu_rt_fail(e);
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
    /* The publication follows this loan within the caller's kernel launches: a reader asleep
     * in ferry_wait wakes meanwhile (tens of microseconds on a virtual machine) and polls for
     * it, instead of starting to wake only once it is out. */
    if (g->early_wake)
        ferry__publisher_wake_soon(g->pub);
    uint32_t i;
    if ((err = ferry__publisher_loan_index(g->pub, payload, &i))) {
        ferry_loan_release(g->pub, payload);
        return err;
    }
    int prev;
    if ((err = ferry__gpu_device_enter(g->device, &prev))) {
        ferry_loan_release(g->pub, payload);
        return err;
    }
    if (i >= g->nchunks &&
        !ferry__gpu_grow((void **)&g->chunks, &g->nchunks, i + 1, sizeof(dchunk))) {
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
        err = ferry__gpu_rt_fail(e);
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
            err = ferry__gpu_rt_fail(e);
            goto fail;
        }
    }
    if (c->done_pending) {
        /* The previous frame of this chunk went out with nobody reading it (or its readers were
         * done before its writer): its work may still run. The new work waits on the GPU. */
        e = ferry__gpu_event_query(c->done);
        if (e == cudaErrorNotReady) {
            if ((e = cudaStreamWaitEvent((cudaStream_t)stream, c->done, 0)) != cudaSuccess) {
                err = ferry__gpu_rt_fail(e);
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
    ferry__gpu_device_leave(g->device, prev);
    *device_ptr = (void *)(uintptr_t)c->va;
    return FERRY_OK;
fail:
    ferry__gpu_device_leave(g->device, prev);
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
    if ((err = ferry__gpu_device_enter(g->device, &prev)))
        return err;
    /* Default flags: the write waits for the stream's earlier work and is preceded by a memory
     * barrier, so the frame's bytes are visible to whoever sees the new generation. */
    CUresult r = ferry__gpu_drv.write_value32((CUstream)stream, c->ready_dev, gen, 0);
    if (r != CUDA_SUCCESS) {
        ferry__gpu_device_leave(g->device, prev);
        return ferry__gpu_cu_err(r);
    }
    c->gen = gen;
    cudaError_t e = cudaEventRecord(c->done, (cudaStream_t)stream);
    ferry__gpu_device_leave(g->device, prev);
    if (e != cudaSuccess)
        return ferry__gpu_rt_fail(e);
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
    bool entered = ferry__gpu_device_enter(g->device, &prev) == FERRY_OK;
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
    }
    if (entered)
        ferry__gpu_device_leave(g->device, prev);
    free(g->chunks);
    g->magic = 0;
    free(g);
    return FERRY_OK;
}
