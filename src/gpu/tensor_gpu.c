/*
 * Device tensors (include/ferry/tensor.h): a device frame whose metadata is a tensor header, and
 * its DLPack export. The header is validated by libferry's ferry_tensor_header_check on a copy,
 * against the frame's size. Export records come from a pool of this module's own, recycled as in
 * src/core/tensor.c (a second deleter call finds a dead record, never freed memory).
 */
#include <ferry/gpu.h>
#include <ferry/tensor.h>

#include "gpu/frames_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

ferry_err ferry_tensor_gpu_publish(ferry_gpu_publisher *gpub, void *device_ptr, void *stream,
                                   ferry_dtype dtype, uint32_t ndim, const int64_t *shape,
                                   const int64_t *strides, const ferry_stamp *stamp,
                                   const char *frame_id)
{
    if (!gpub || !device_ptr)
        return FERRY_EINVAL;
    ferry_tensor_header h;
    ferry_err err = ferry_tensor_header_init(&h, dtype, ndim, shape, strides);
    if (err != FERRY_OK)
        return err;
    if (frame_id && strnlen(frame_id, FERRY_FRAME_ID_MAX + 1) > FERRY_FRAME_ID_MAX)
        return FERRY_EINVAL;
    size_t loan_size;
    int device;
    if ((err = ferry__gpu_loan_info(gpub, device_ptr, &loan_size, &device)) != FERRY_OK)
        return err;
    if (h.data_size > loan_size)
        return FERRY_EINVAL;
    h.device.device_type = FERRY_DL_CUDA;
    h.device.device_id = device;
    h.data_offset = 0;
    if (stamp)
        h.stamp = *stamp;
    if (frame_id)
        memcpy(h.frame_id, frame_id, strlen(frame_id) + 1);
    return ferry_gpu_publish_meta(gpub, device_ptr, stream, &h, sizeof h);
}

ferry_err ferry_tensor_gpu_view_get(const ferry_gpu_frame *frame, ferry_tensor_view *out)
{
    if (!frame || !out)
        return FERRY_EINVAL;
    if (!frame->device_ptr)
        return FERRY_ESTATE;
    if (!frame->meta || frame->meta_size < sizeof(ferry_tensor_header))
        return FERRY_EPROTO;
    ferry_tensor_header h;
    memcpy(&h, frame->meta, sizeof h); /* once: the publisher may still write it */
    ferry_tensor_view v;
    if (ferry_tensor_header_check(&h, frame->size, &v) != FERRY_OK ||
        h.device.device_type != FERRY_DL_CUDA || frame->device < 0)
        return FERRY_EPROTO;
    v.device.device_type = FERRY_DL_CUDA;
    v.device.device_id = frame->device;
    v.data = (const unsigned char *)frame->device_ptr + h.data_offset;
    *out = v;
    return FERRY_OK;
}

/* ---- DLPack export -------------------------------------------------------------------------- */

#define GEXPORT_LIVE 0x45564c5f55504746ULL
#define GEXPORT_DEAD 0x444145445f555047ULL

typedef struct gpu_export {
    _Atomic uint64_t state;
    struct gpu_export *next;
    ferry_gpu_subscriber *gsub;
    ferry_gpu_frame frame;
    ferry_gpu_stream stream;
    int64_t shape[FERRY_TENSOR_DIMS_MAX];
    int64_t strides[FERRY_TENSOR_DIMS_MAX];
    ferry_dlpack_tensor plain;
    ferry_dlpack_tensor_versioned versioned;
} gpu_export;

static pthread_mutex_t gexport_lock = PTHREAD_MUTEX_INITIALIZER;
static gpu_export *gexport_head, *gexport_tail;

static gpu_export *gexport_get(void)
{
    pthread_mutex_lock(&gexport_lock);
    gpu_export *x = gexport_head;
    if (x) {
        gexport_head = x->next;
        if (!gexport_head)
            gexport_tail = NULL;
    }
    pthread_mutex_unlock(&gexport_lock);
    if (!x && !(x = calloc(1, sizeof *x)))
        return NULL;
    x->next = NULL;
    return x;
}

static void gexport_put(gpu_export *x)
{
    x->next = NULL;
    pthread_mutex_lock(&gexport_lock);
    if (gexport_tail)
        gexport_tail->next = x;
    else
        gexport_head = x;
    gexport_tail = x;
    pthread_mutex_unlock(&gexport_lock);
}

static void gexport_release(gpu_export *x)
{
    uint64_t live = GEXPORT_LIVE;
    if (!atomic_compare_exchange_strong(&x->state, &live, GEXPORT_DEAD))
        return; /* a second call */
    (void)ferry_gpu_frame_release(x->gsub, &x->frame, x->stream);
    x->gsub = NULL;
    gexport_put(x);
}

static void gexport_delete_plain(ferry_dlpack_tensor *self)
{
    if (self && self->manager_ctx)
        gexport_release(self->manager_ctx);
}

static void gexport_delete_versioned(ferry_dlpack_tensor_versioned *self)
{
    if (self && self->manager_ctx)
        gexport_release(self->manager_ctx);
}

static ferry_err gexport_make(ferry_gpu_subscriber *gsub, ferry_gpu_frame *frame,
                              ferry_gpu_stream stream, gpu_export **out, ferry_dl_tensor *dl)
{
    if (!gsub || !frame)
        return FERRY_EINVAL;
    ferry_tensor_view v;
    ferry_err err = ferry_tensor_gpu_view_get(frame, &v);
    if (err != FERRY_OK)
        return err;
    gpu_export *x = gexport_get();
    if (!x)
        return FERRY_ENOMEM;
    x->gsub = gsub;
    x->frame = *frame;
    x->stream = stream;
    memcpy(x->shape, v.header.shape, sizeof x->shape);
    memcpy(x->strides, v.header.strides, sizeof x->strides);
    memset(dl, 0, sizeof *dl);
    dl->data = (void *)(uintptr_t)v.data;
    dl->device = v.device;
    dl->ndim = (int32_t)v.header.ndim;
    dl->dtype = v.header.dtype;
    dl->shape = x->shape;
    dl->strides = x->strides;
    dl->byte_offset = 0;
    atomic_store(&x->state, GEXPORT_LIVE);
    memset(frame, 0, sizeof *frame);
    *out = x;
    return FERRY_OK;
}

ferry_err ferry_tensor_gpu_to_dlpack(ferry_gpu_subscriber *gsub, ferry_gpu_frame *frame,
                                     void *stream, ferry_dlpack_tensor **out)
{
    if (!out)
        return FERRY_EINVAL;
    gpu_export *x;
    ferry_dl_tensor dl;
    ferry_err err = gexport_make(gsub, frame, stream, &x, &dl);
    if (err != FERRY_OK)
        return err;
    x->plain.dl_tensor = dl;
    x->plain.manager_ctx = x;
    x->plain.deleter = gexport_delete_plain;
    *out = &x->plain;
    return FERRY_OK;
}

ferry_err ferry_tensor_gpu_to_dlpack_versioned(ferry_gpu_subscriber *gsub,
                                               ferry_gpu_frame *frame, void *stream,
                                               ferry_dlpack_tensor_versioned **out)
{
    if (!out)
        return FERRY_EINVAL;
    gpu_export *x;
    ferry_dl_tensor dl;
    ferry_err err = gexport_make(gsub, frame, stream, &x, &dl);
    if (err != FERRY_OK)
        return err;
    x->versioned.version.major = FERRY_DLPACK_MAJOR;
    x->versioned.version.minor = FERRY_DLPACK_MINOR;
    x->versioned.manager_ctx = x;
    x->versioned.deleter = gexport_delete_versioned;
    x->versioned.flags = FERRY_DLPACK_FLAG_READ_ONLY;
    x->versioned.dl_tensor = dl;
    *out = &x->versioned;
    return FERRY_OK;
}
