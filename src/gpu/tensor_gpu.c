/*
 * Device tensors (include/ferry/tensor.h): a device frame whose metadata is a tensor header, and
 * its DLPack export. The header is validated by libferry's ferry_tensor_header_check on a copy,
 * against the frame's size. Exports use libferry's records (src/framework/tensor.c), which release
 * the frame with ferry_gpu_frame_release on the stream given at export.
 */
#include <ferry/gpu.h>
#include <ferry/tensor.h>

#include "core/module.h"
#include "gpu/frames_internal.h"

#include <stdint.h>
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

/* ---- DLPack export: libferry's export records, releasing a device frame ---------------------- */

_Static_assert(sizeof(ferry_gpu_frame) <= FERRY__EXPORT_ITEM_MAX, "a device frame fits a record");

static void frame_release(void *owner, void *item, void *stream)
{
    (void)ferry_gpu_frame_release(owner, item, stream);
}

static ferry_err frame_export(ferry_gpu_subscriber *gsub, ferry_gpu_frame *frame, void *stream,
                              bool versioned, void **out)
{
    if (!gsub || !frame || !out)
        return FERRY_EINVAL;
    ferry_tensor_view v;
    ferry_err err = ferry_tensor_gpu_view_get(frame, &v);
    if (err != FERRY_OK)
        return err;
    err =
        ferry__tensor_export(&v, versioned, frame_release, gsub, stream, frame, sizeof *frame, out);
    if (err == FERRY_OK)
        memset(frame, 0, sizeof *frame);
    return err;
}

ferry_err ferry_tensor_gpu_to_dlpack(ferry_gpu_subscriber *gsub, ferry_gpu_frame *frame,
                                     void *stream, ferry_dlpack_tensor **out)
{
    void *p;
    ferry_err err = frame_export(gsub, frame, stream, false, out ? &p : NULL);
    if (err == FERRY_OK)
        *out = p;
    return err;
}

ferry_err ferry_tensor_gpu_to_dlpack_versioned(ferry_gpu_subscriber *gsub, ferry_gpu_frame *frame,
                                               void *stream, ferry_dlpack_tensor_versioned **out)
{
    void *p;
    ferry_err err = frame_export(gsub, frame, stream, true, out ? &p : NULL);
    if (err == FERRY_OK)
        *out = p;
    return err;
}
