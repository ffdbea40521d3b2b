/*
 * The CDR writer of ros2.h: a taken sample, validated by its view, serialised as plain CDR
 * (XCDR1, little endian) in up to three pieces, the bulk left where it is in the sample.
 *
 * Alignment is relative to the first byte after the encapsulation header, as the reader's; the
 * bulk is a sequence<uint8>, so the bytes after it need no padding for the one-byte is_dense of
 * PointCloud2, the only field that follows a bulk.
 */
#include "ros2.h"

#include <stdbool.h>
#include <string.h>

typedef struct cdr_writer {
    uint8_t *p; /* the data after the encapsulation header */
    size_t cap;
    size_t pos;
    bool full; /* a field did not fit: the serialisation is void */
} cdr_writer;

static void put(cdr_writer *w, size_t align, const void *v, size_t n)
{
    size_t pad = (align - (w->pos & (align - 1))) & (align - 1);

    if (w->full || w->cap - w->pos < pad + n) {
        w->full = true;
        return;
    }
    memset(w->p + w->pos, 0, pad);
    memcpy(w->p + w->pos + pad, v, n);
    w->pos += pad + n;
}

/* Host values go out as they are: the writer runs on little-endian hosts only (asserted below). */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the CDR writer emits CDR_LE from host values"
#endif

static void put_u8(cdr_writer *w, uint8_t v)
{
    put(w, 1, &v, 1);
}
static void put_u32(cdr_writer *w, uint32_t v)
{
    put(w, 4, &v, 4);
}
static void put_i32(cdr_writer *w, int32_t v)
{
    put(w, 4, &v, 4);
}
static void put_i64(cdr_writer *w, int64_t v)
{
    put(w, 8, &v, 8);
}
static void put_f64(cdr_writer *w, double v)
{
    put(w, 8, &v, 8);
}

static void put_f64s(cdr_writer *w, const double *v, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++)
        put_f64(w, v[i]);
}

/* A string: its length with the NUL, then its bytes and the NUL. s is terminated (a view's). */
static void put_string(cdr_writer *w, const char *s)
{
    size_t n = strlen(s) + 1;

    put_u32(w, (uint32_t)n);
    put(w, 1, s, n);
}

static void put_header(cdr_writer *w, ferry_stamp stamp, const char *frame_id)
{
    put_i32(w, stamp.sec);
    put_u32(w, stamp.nanosec);
    put_string(w, frame_id);
}

static void put_vector3(cdr_writer *w, ferry_vector3 v)
{
    put_f64(w, v.x);
    put_f64(w, v.y);
    put_f64(w, v.z);
}

static void writer_open(cdr_writer *w, ferry_ros2_cdr *out)
{
    static const uint8_t cdr_le[4] = {0x00, 0x01, 0x00, 0x00};

    memcpy(out->head, cdr_le, sizeof cdr_le);
    w->p = out->head + 4;
    w->cap = sizeof out->head - 4;
    w->pos = 0;
    w->full = false;
}

/* Closes the pieces: the head, then the bulk and the tail where there are. */
static ferry_err writer_close(const cdr_writer *w, ferry_ros2_cdr *out, const void *bulk,
                              size_t bulk_size, size_t tail_size, ferry_stamp stamp)
{
    unsigned n = 0;

    if (w->full)
        return FERRY_EINVAL;
    out->iov[n].iov_base = out->head;
    out->iov[n++].iov_len = 4 + w->pos;
    if (bulk_size != 0) {
        out->iov[n].iov_base = (void *)(uintptr_t)bulk;
        out->iov[n++].iov_len = bulk_size;
    }
    if (tail_size != 0) {
        out->iov[n].iov_base = out->tail;
        out->iov[n++].iov_len = tail_size;
    }
    out->niov = n;
    out->size = 4 + w->pos + bulk_size + tail_size;
    out->stamp_ns = (int64_t)stamp.sec * 1000000000 + stamp.nanosec;
    return FERRY_OK;
}

static ferry_err encode_image(const ferry_sample *s, ferry_ros2_cdr *out)
{
    ferry_image_view v;
    cdr_writer w;

    if (ferry_image_view_get(s, &v) != FERRY_OK || v.data_size > UINT32_MAX)
        return FERRY_EINVAL;
    writer_open(&w, out);
    put_header(&w, v.header.stamp, v.header.frame_id);
    put_u32(&w, v.header.height);
    put_u32(&w, v.header.width);
    put_string(&w, v.header.encoding);
    put_u8(&w, v.header.is_bigendian);
    put_u32(&w, v.header.step);
    put_u32(&w, (uint32_t)v.data_size);
    return writer_close(&w, out, v.data, v.data_size, 0, v.header.stamp);
}

static ferry_err encode_cloud(const ferry_sample *s, ferry_ros2_cdr *out)
{
    ferry_pointcloud_view v;
    cdr_writer w;
    uint32_t i;

    if (ferry_pointcloud_view_get(s, &v) != FERRY_OK || v.data_size > UINT32_MAX)
        return FERRY_EINVAL;
    writer_open(&w, out);
    put_header(&w, v.header.stamp, v.header.frame_id);
    put_u32(&w, v.header.height);
    put_u32(&w, v.header.width);
    put_u32(&w, v.header.nfields);
    for (i = 0; i < v.header.nfields; i++) {
        const ferry_point_field *f = &v.header.fields[i];

        put_string(&w, f->name);
        put_u32(&w, f->offset);
        put_u8(&w, f->datatype);
        put_u32(&w, f->count);
    }
    put_u8(&w, v.header.is_bigendian);
    put_u32(&w, v.header.point_step);
    put_u32(&w, v.header.row_step);
    put_u32(&w, (uint32_t)v.data_size);
    out->tail[0] = v.header.is_dense;
    return writer_close(&w, out, v.data, v.data_size, 1, v.header.stamp);
}

static ferry_err encode_camera_info(const ferry_sample *s, ferry_ros2_cdr *out)
{
    ferry_camera_info_view v;
    const ferry_camera_info_header *h = &v.header;
    cdr_writer w;

    if (ferry_camera_info_view_get(s, &v) != FERRY_OK)
        return FERRY_EINVAL;
    writer_open(&w, out);
    put_header(&w, h->stamp, h->frame_id);
    put_u32(&w, h->height);
    put_u32(&w, h->width);
    put_string(&w, h->distortion_model);
    put_u32(&w, h->d_count);
    put_f64s(&w, h->d, h->d_count);
    put_f64s(&w, h->k, 9);
    put_f64s(&w, h->r, 9);
    put_f64s(&w, h->p, 12);
    put_u32(&w, h->binning_x);
    put_u32(&w, h->binning_y);
    put_u32(&w, h->roi.x_offset);
    put_u32(&w, h->roi.y_offset);
    put_u32(&w, h->roi.height);
    put_u32(&w, h->roi.width);
    put_u8(&w, h->roi.do_rectify);
    return writer_close(&w, out, NULL, 0, 0, h->stamp);
}

ferry_err ferry_ros2_cdr_encode_compressed(ferry_stamp stamp, const char *frame_id,
                                           const char *format, const void *data, size_t size,
                                           ferry_ros2_cdr *out)
{
    cdr_writer w;

    if (out == NULL || frame_id == NULL || format == NULL || (data == NULL && size != 0) ||
        size > UINT32_MAX ||
        strnlen(frame_id, FERRY_MSG_FRAME_ID_MAX + 1) > FERRY_MSG_FRAME_ID_MAX ||
        strnlen(format, FERRY_COMPRESSED_FORMAT_MAX + 1) > FERRY_COMPRESSED_FORMAT_MAX)
        return FERRY_EINVAL;
    writer_open(&w, out);
    put_header(&w, stamp, frame_id);
    put_string(&w, format);
    put_u32(&w, (uint32_t)size);
    return writer_close(&w, out, data, size, 0, stamp);
}

static ferry_err encode_compressed(const ferry_sample *s, ferry_ros2_cdr *out)
{
    ferry_compressed_image_view v;

    if (ferry_compressed_image_view_get(s, &v) != FERRY_OK)
        return FERRY_EINVAL;
    return ferry_ros2_cdr_encode_compressed(v.header.stamp, v.header.frame_id, v.header.format,
                                            v.data, v.data_size, out);
}

static ferry_err encode_imu(const ferry_sample *s, ferry_ros2_cdr *out)
{
    ferry_imu_view v;
    const ferry_imu_header *h = &v.header;
    cdr_writer w;

    if (ferry_imu_view_get(s, &v) != FERRY_OK)
        return FERRY_EINVAL;
    writer_open(&w, out);
    put_header(&w, h->stamp, h->frame_id);
    put_f64(&w, h->orientation.x);
    put_f64(&w, h->orientation.y);
    put_f64(&w, h->orientation.z);
    put_f64(&w, h->orientation.w);
    put_f64s(&w, h->orientation_covariance, 9);
    put_vector3(&w, h->angular_velocity);
    put_f64s(&w, h->angular_velocity_covariance, 9);
    put_vector3(&w, h->linear_acceleration);
    put_f64s(&w, h->linear_acceleration_covariance, 9);
    return writer_close(&w, out, NULL, 0, 0, h->stamp);
}

/* Whether a tensor's strides are C order over its shape (any stride of a size-1 or empty
 * dimension goes). */
static bool tensor_contiguous(const ferry_tensor_header *h)
{
    int64_t expect = 1;
    uint32_t i;

    for (i = h->ndim; i-- > 0;) {
        if (h->shape[i] == 0)
            return true;
        if (h->shape[i] != 1 && h->strides[i] != expect)
            return false;
        expect *= h->shape[i];
    }
    return true;
}

static ferry_err encode_tensor(const ferry_sample *s, ferry_ros2_cdr *out)
{
    ferry_tensor_view v;
    cdr_writer w;
    size_t bytes;
    uint32_t i;

    if (ferry_tensor_view_get(s, &v) != FERRY_OK) {
        ferry_tensor_header h;

        /* A device tensor is a valid sample whose elements are not here to write. */
        if (s->data != NULL && s->size >= sizeof h) {
            memcpy(&h, s->data, sizeof h);
            if (h.magic == FERRY_TENSOR_MAGIC && h.device.device_type != FERRY_DL_CPU)
                return FERRY_ENOTSUP;
        }
        return FERRY_EINVAL;
    }
    if (!tensor_contiguous(&v.header))
        return FERRY_ENOTSUP;
    bytes = (size_t)v.numel * v.elem_size; /* inside data_size: the view checked the extent */
    if (bytes > UINT32_MAX)
        return FERRY_EINVAL;
    writer_open(&w, out);
    put_header(&w, v.header.stamp, v.header.frame_id);
    put_string(&w, ferry_dtype_name(v.dtype));
    put_u32(&w, v.header.ndim);
    for (i = 0; i < v.header.ndim; i++)
        put_i64(&w, v.header.shape[i]);
    put_u32(&w, (uint32_t)bytes);
    return writer_close(&w, out, v.data, bytes, 0, v.header.stamp);
}

ferry_err ferry_ros2_cdr_encode(ferry_ros2_kind kind, const ferry_sample *s, ferry_ros2_cdr *out)
{
    if (s == NULL || out == NULL)
        return FERRY_EINVAL;
    switch (kind) {
    case FERRY_ROS2_IMAGE:
        return encode_image(s, out);
    case FERRY_ROS2_CLOUD:
        return encode_cloud(s, out);
    case FERRY_ROS2_CAMERA_INFO:
        return encode_camera_info(s, out);
    case FERRY_ROS2_COMPRESSED:
        return encode_compressed(s, out);
    case FERRY_ROS2_IMU:
        return encode_imu(s, out);
    case FERRY_ROS2_TENSOR:
        return encode_tensor(s, out);
    default:
        return FERRY_EINVAL;
    }
}
