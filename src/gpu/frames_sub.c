/*
 * Device frames across processes, the subscriber: imports of the publishers' allocations, once
 * per (connection, chunk, key), undone in a close hook before the core unmaps the connection;
 * takes that make the reader's stream wait for the frame's ready word; releases that give the
 * host sample back once the reader's work completed (frames.c tells the whole story).
 *
 * One thread at a time per object, as for the core's subscriber.
 */
#include "gpu/internal.h"

#include "core/module.h"
#include "gpu/frames_internal.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define GSUB_MAGIC 0x4255534755504746ULL /* subscriber object */
#define ANCHOR_MAGIC 0x52484e4146555047ULL

typedef struct import {
    bool used;
    uint32_t ipc;
    uint32_t gen;   /* the connection's generation */
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
        ferry__gpu_drv.mem_unmap(im->va, im->size);
        ferry__gpu_drv.address_free(im->va, im->size);
        ferry__gpu_drv.mem_release(im->handle);
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
        bool entered = ferry__gpu_device_enter(g->device, &prev) == FERRY_OK;
        slot_close(g, slot);
        if (entered)
            ferry__gpu_device_leave(g->device, prev);
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
    ferry__gpu_drv_load();
    if (!ferry__gpu_drv.base)
        return FERRY_ENOTSUP;
    ferry_gpu_subscriber *g = calloc(1, sizeof *g);
    if (!g)
        return FERRY_ENOMEM;
    g->magic = GSUB_MAGIC;
    g->sub = sub;
    g->device = device;
    CUresult r = ferry__gpu_drv.device_get(&g->cudev, device);
    if (r != CUDA_SUCCESS) {
        free(g);
        return ferry__gpu_cu_err(r);
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
    bool mps = false;
    ferry_gpu_mps_enabled(device, &mps);
    ferry__endpoint_note(sub, "device frames into device %d; MPS %s", device,
                         mps ? "on: the publisher's context is shared"
                             : "off: each frame waits for the GPU to switch between the "
                               "processes' contexts");
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
            /* Any other error: the context failed, its work will not run any more. */
            if (e != cudaSuccess && !first)
                first = ferry__gpu_rt_fail(e);
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
    if (!ferry__gpu_drv.vmm)
        return FERRY_ENOTSUP;
    int fds[FERRY__ATTACH_FDS];
    int n = 0;
    ferry_err err = ferry__subscriber_attachment(g->sub, w->slot, w->gen, d->key, fds, &n);
    if (err == FERRY_EAGAIN || (err == FERRY_OK && n != 1))
        return FERRY_EPROTO; /* an attachment is sent before any sample naming it */
    if (err)
        return err;
    CUmemGenericAllocationHandle h;
    CUresult r = ferry__gpu_drv.import_handle(&h, (void *)(uintptr_t)fds[0],
                                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (r != CUDA_SUCCESS)
        return r == CUDA_ERROR_OUT_OF_MEMORY ? FERRY_ENOMEM : FERRY_EPROTO;
    CUmemAllocationProp prop;
    size_t gran = 0;
    CUdeviceptr va = 0;
    if ((r = ferry__gpu_drv.props_from_handle(&prop, h)) != CUDA_SUCCESS ||
        (r = ferry__gpu_drv.granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM)) !=
            CUDA_SUCCESS ||
        gran == 0 || d->alloc_size % gran) {
        ferry__gpu_drv.mem_release(h);
        return FERRY_EPROTO;
    }
    if ((r = ferry__gpu_drv.address_reserve(&va, d->alloc_size, gran, 0, 0)) != CUDA_SUCCESS) {
        ferry__gpu_drv.mem_release(h);
        return ferry__gpu_cu_err(r);
    }
    /* Fails when the descriptor claims more than the allocation holds. */
    if ((r = ferry__gpu_drv.mem_map(va, d->alloc_size, 0, h, 0)) != CUDA_SUCCESS) {
        ferry__gpu_drv.address_free(va, d->alloc_size);
        ferry__gpu_drv.mem_release(h);
        return r == CUDA_ERROR_OUT_OF_MEMORY ? FERRY_ENOMEM : FERRY_EPROTO;
    }
    CUmemAccessDesc ad;
    memset(&ad, 0, sizeof ad);
    ad.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    ad.location.id = (int)g->cudev;
    ad.flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
    if ((r = ferry__gpu_drv.set_access(va, d->alloc_size, &ad, 1)) != CUDA_SUCCESS) {
        /* Read-only device mappings are refused on some platforms: readers still work, the
         * frame is then writable by a buggy reader (counted, tests report it). */
        ad.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        if ((r = ferry__gpu_drv.set_access(va, d->alloc_size, &ad, 1)) != CUDA_SUCCESS) {
            ferry__gpu_drv.mem_unmap(va, d->alloc_size);
            ferry__gpu_drv.address_free(va, d->alloc_size);
            ferry__gpu_drv.mem_release(h);
            return ferry__gpu_cu_err(r);
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
    if (ferry__gpu_drv.address_range(&base, &size, (CUdeviceptr)(uintptr_t)p) != CUDA_SUCCESS ||
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
        !ferry__gpu_grow((void **)&g->slots, &g->nslots, w->slot + 1, sizeof(islot)))
        return FERRY_ENOMEM;
    islot *s = &g->slots[w->slot];
    if (w->chunk >= s->nchunks &&
        !ferry__gpu_grow((void **)&s->chunks, &s->nchunks, w->chunk + 1, sizeof(import)))
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
    ferry_err err =
        d->ipc == FERRY_GPU_IPC_VMM ? import_vmm(g, w, d, &fresh) : import_legacy(d, &fresh);
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
static ferry_err frame_open(ferry_gpu_subscriber *g, const ferry_sample *s, ferry_gpu_stream stream,
                            ferry_gpu_frame *frame)
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
    CUresult r = ferry__gpu_drv.wait_value32((CUstream)stream, ready, d.generation,
                                             CU_STREAM_WAIT_VALUE_GEQ);
    if (r != CUDA_SUCCESS)
        return ferry__gpu_cu_err(r);
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
    if ((err = ferry__gpu_device_enter(g->device, &prev)))
        return err;
    reap(g, false);
    ferry_sample s;
    if (!(err = ferry_take(g->sub, &s))) {
        memset(frame, 0, sizeof *frame);
        if ((err = frame_open(g, &s, stream, frame)))
            ferry_release(g->sub, &s);
    }
    ferry__gpu_device_leave(g->device, prev);
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
    if ((err = ferry__gpu_device_enter(g->device, &prev)))
        return err;
    bool parked = false;
    /* The list grows to the most frames ever outstanding (bounded by max_held), events with
     * it: no allocation per frame once that is reached. */
    if (g->npend == g->cappend) {
        uint32_t old = g->cappend;
        if (ferry__gpu_grow((void **)&g->pend, &g->cappend, g->npend + 1, sizeof(pending))) {
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
    ferry__gpu_device_leave(g->device, prev);
    return FERRY_OK;
}

ferry_err ferry_gpu_subscriber_poll(ferry_gpu_subscriber *gsub)
{
    ferry_err err = gsub_check(gsub);
    if (err)
        return err;
    int prev;
    if ((err = ferry__gpu_device_enter(gsub->device, &prev)))
        return err;
    err = reap(gsub, false);
    ferry__gpu_device_leave(gsub->device, prev);
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
    bool entered = ferry__gpu_device_enter(g->device, &prev) == FERRY_OK;
    if (g->anchor)
        reap(g, true);
    slot_close(g, UINT32_MAX);
    for (uint32_t k = 0; k < g->cappend; k++)
        if (g->pend[k].ev)
            cudaEventDestroy(g->pend[k].ev);
    if (entered)
        ferry__gpu_device_leave(g->device, prev);
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
