/*
 * The CDR reader of ros2.h: ROS 2's messages read straight from their plain-CDR (XCDR1)
 * serialisation, every length checked against the bytes there are.
 */
#include "ros2.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * Plain CDR (XCDR1)
 *
 * Primitives, doubles included, are aligned to their size relative to the start of the data
 * after the 4-byte encapsulation header; a string is a uint32 length counting its NUL, then the
 * bytes and the NUL; a sequence is a uint32 count, then its elements; booleans and octets are
 * one byte.
 * ------------------------------------------------------------------------------------------- */

typedef struct cdr_reader {
    const uint8_t *p; /* the data after the encapsulation header */
    size_t size;
    size_t pos; /* always <= size */
    bool swap;  /* the data's byte order is not the host's */
} cdr_reader;

static bool cdr_u8(cdr_reader *c, uint8_t *v)
{
    if (c->pos >= c->size)
        return false;
    *v = c->p[c->pos++];
    return true;
}

static bool cdr_u32(cdr_reader *c, uint32_t *v)
{
    size_t pad = (4u - (c->pos & 3u)) & 3u;
    uint32_t x;

    if (c->size - c->pos < pad || c->size - c->pos - pad < 4)
        return false;
    c->pos += pad;
    memcpy(&x, c->p + c->pos, 4);
    c->pos += 4;
    *v = c->swap ? __builtin_bswap32(x) : x;
    return true;
}

/* Eight bytes aligned to eight, in the host's order. */
static bool cdr_u64(cdr_reader *c, uint64_t *v)
{
    size_t pad = (8u - (c->pos & 7u)) & 7u;
    uint64_t x;

    if (c->size - c->pos < pad || c->size - c->pos - pad < 8)
        return false;
    c->pos += pad;
    memcpy(&x, c->p + c->pos, 8);
    c->pos += 8;
    *v = c->swap ? __builtin_bswap64(x) : x;
    return true;
}

static bool cdr_f64(cdr_reader *c, double *v)
{
    uint64_t x;

    if (!cdr_u64(c, &x))
        return false;
    memcpy(v, &x, sizeof *v);
    return true;
}

static bool cdr_f64s(cdr_reader *c, double *v, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++)
        if (!cdr_f64(c, &v[i]))
            return false;
    return true;
}

static bool cdr_i32(cdr_reader *c, int32_t *v)
{
    uint32_t x;

    if (!cdr_u32(c, &x))
        return false;
    memcpy(v, &x, sizeof *v);
    return true;
}

/* A string: at least its NUL, which must be the last of its bytes. */
static bool cdr_string(cdr_reader *c, const char **s)
{
    uint32_t n;

    if (!cdr_u32(c, &n) || n == 0 || n > c->size - c->pos || c->p[c->pos + n - 1] != '\0')
        return false;
    *s = (const char *)(c->p + c->pos);
    c->pos += n;
    return true;
}

static bool cdr_octets(cdr_reader *c, const uint8_t **data, uint32_t *n)
{
    if (!cdr_u32(c, n) || *n > c->size - c->pos)
        return false;
    *data = c->p + c->pos;
    c->pos += *n;
    return true;
}

/* The encapsulation header: CDR_BE (0x0000) or CDR_LE (0x0001), big-endian on the wire; the two
 * option bytes (padding at the end) are not needed. */
static ferry_ros2_cdr_result cdr_open(cdr_reader *c, const void *ser, size_t size)
{
    const uint8_t *h = ser;
    bool little;

    if (ser == NULL || size < 4 || size - 4 > UINT32_MAX)
        return FERRY_ROS2_CDR_MALFORMED;
    if (h[0] != 0 || h[1] > 1)
        return FERRY_ROS2_CDR_UNSUPPORTED;
    little = h[1] == 1;
    c->p = h + 4;
    c->size = size - 4;
    c->pos = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    c->swap = little;
#else
    c->swap = !little;
#endif
    return FERRY_ROS2_CDR_OK;
}

/* Time_ stamp, string frame_id */
static bool cdr_header(cdr_reader *c, ferry_ros2_header *h)
{
    return cdr_i32(c, &h->sec) && cdr_u32(c, &h->nanosec) && cdr_string(c, &h->frame_id);
}

static bool parse_image(cdr_reader *c, ferry_ros2_image_msg *out)
{
    return cdr_header(c, &out->header) && cdr_u32(c, &out->height) && cdr_u32(c, &out->width) &&
           cdr_string(c, &out->encoding) && cdr_u8(c, &out->is_bigendian) &&
           cdr_u32(c, &out->step) && cdr_octets(c, &out->data, &out->data_size);
}

static bool parse_cloud(cdr_reader *c, ferry_ros2_cloud_msg *out)
{
    uint32_t i;

    if (!cdr_header(c, &out->header) || !cdr_u32(c, &out->height) || !cdr_u32(c, &out->width) ||
        !cdr_u32(c, &out->nfields))
        return false;
    /* Every field is read, also past the ones kept: each takes at least 13 bytes, so a count
     * that the data cannot hold fails within size / 13 rounds. */
    for (i = 0; i < out->nfields; i++) {
        ferry_ros2_field_msg f;

        if (!cdr_string(c, &f.name) || !cdr_u32(c, &f.offset) || !cdr_u8(c, &f.datatype) ||
            !cdr_u32(c, &f.count))
            return false;
        if (i < FERRY_POINTCLOUD_FIELDS_MAX)
            out->fields[i] = f;
    }
    return cdr_u8(c, &out->is_bigendian) && cdr_u32(c, &out->point_step) &&
           cdr_u32(c, &out->row_step) && cdr_octets(c, &out->data, &out->data_size) &&
           cdr_u8(c, &out->is_dense);
}

/* A sequence<double> of which the first max elements are kept; *count as sent. Each element
 * takes 8 bytes, so a count that the data cannot hold fails within size / 8 rounds. */
static bool cdr_f64_seq(cdr_reader *c, double *v, size_t max, uint32_t *count)
{
    uint32_t i;

    if (!cdr_u32(c, count))
        return false;
    if (*count > (c->size - c->pos) / 8)
        return false;
    for (i = 0; i < *count; i++) {
        double x;

        if (!cdr_f64(c, &x))
            return false;
        if (i < max)
            v[i] = x;
    }
    return true;
}

static bool parse_camera_info(cdr_reader *c, ferry_ros2_camera_info_msg *out)
{
    return cdr_header(c, &out->header) && cdr_u32(c, &out->height) && cdr_u32(c, &out->width) &&
           cdr_string(c, &out->distortion_model) &&
           cdr_f64_seq(c, out->d, FERRY_CAMERA_INFO_D_MAX, &out->d_count) &&
           cdr_f64s(c, out->k, 9) && cdr_f64s(c, out->r, 9) && cdr_f64s(c, out->p, 12) &&
           cdr_u32(c, &out->binning_x) && cdr_u32(c, &out->binning_y) &&
           cdr_u32(c, &out->roi_x_offset) && cdr_u32(c, &out->roi_y_offset) &&
           cdr_u32(c, &out->roi_height) && cdr_u32(c, &out->roi_width) &&
           cdr_u8(c, &out->roi_do_rectify);
}

static bool parse_compressed(cdr_reader *c, ferry_ros2_compressed_msg *out)
{
    return cdr_header(c, &out->header) && cdr_string(c, &out->format) &&
           cdr_octets(c, &out->data, &out->data_size);
}

static bool cdr_vector3(cdr_reader *c, ferry_vector3 *v)
{
    return cdr_f64(c, &v->x) && cdr_f64(c, &v->y) && cdr_f64(c, &v->z);
}

static bool parse_imu(cdr_reader *c, ferry_ros2_imu_msg *out)
{
    return cdr_header(c, &out->header) && cdr_f64(c, &out->orientation.x) &&
           cdr_f64(c, &out->orientation.y) && cdr_f64(c, &out->orientation.z) &&
           cdr_f64(c, &out->orientation.w) && cdr_f64s(c, out->orientation_covariance, 9) &&
           cdr_vector3(c, &out->angular_velocity) &&
           cdr_f64s(c, out->angular_velocity_covariance, 9) &&
           cdr_vector3(c, &out->linear_acceleration) &&
           cdr_f64s(c, out->linear_acceleration_covariance, 9);
}

static bool cdr_i64(cdr_reader *c, int64_t *v)
{
    uint64_t x;

    if (!cdr_u64(c, &x))
        return false;
    memcpy(v, &x, sizeof *v);
    return true;
}

static bool parse_tensor(cdr_reader *c, ferry_ros2_tensor_msg *out)
{
    uint32_t i;

    if (!cdr_header(c, &out->header) || !cdr_string(c, &out->dtype) || !cdr_u32(c, &out->ndim) ||
        out->ndim > (c->size - c->pos) / 8)
        return false;
    for (i = 0; i < out->ndim; i++) {
        int64_t d;

        if (!cdr_i64(c, &d))
            return false;
        if (i < FERRY_TENSOR_DIMS_MAX)
            out->shape[i] = d;
    }
    return cdr_octets(c, &out->data, &out->data_size);
}

ferry_ros2_cdr_result ferry_ros2_cdr_parse(ferry_ros2_kind kind, const void *ser, size_t size,
                                           ferry_ros2_msg *out)
{
    ferry_ros2_cdr_result res;
    cdr_reader c;
    bool ok;

    if (out == NULL || kind <= FERRY_ROS2_NONE || kind >= FERRY_ROS2_KIND_COUNT_)
        return FERRY_ROS2_CDR_MALFORMED;
    memset(out, 0, sizeof *out);
    res = cdr_open(&c, ser, size);
    if (res != FERRY_ROS2_CDR_OK)
        return res;
    switch (kind) {
    case FERRY_ROS2_IMAGE:
        ok = parse_image(&c, &out->u.image);
        break;
    case FERRY_ROS2_CLOUD:
        ok = parse_cloud(&c, &out->u.cloud);
        break;
    case FERRY_ROS2_CAMERA_INFO:
        ok = parse_camera_info(&c, &out->u.camera_info);
        break;
    case FERRY_ROS2_COMPRESSED:
        ok = parse_compressed(&c, &out->u.compressed);
        break;
    case FERRY_ROS2_IMU:
        ok = parse_imu(&c, &out->u.imu);
        break;
    default:
        ok = parse_tensor(&c, &out->u.tensor);
        break;
    }
    if (!ok) {
        memset(out, 0, sizeof *out);
        return FERRY_ROS2_CDR_MALFORMED;
    }
    out->kind = kind;
    return FERRY_ROS2_CDR_OK;
}
