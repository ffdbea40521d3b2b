/*
 * The publisher side of ros2.h: a parsed ROS 2 message checked field by field and published
 * through a loan, the loan being the one copy of its bulk. Images, point clouds, compressed
 * images and tensors are checked and loaned by their own functions (encodings, geometry, point
 * fields, dtypes); the kinds whose sample is one fixed header are filled by walking their
 * members (msg_table.h).
 */
#include "msg_table.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* The reason of a refusal that names what was refused (an encoding): each thread's own, valid
 * until its next call. */
static _Thread_local char why_buf[160];

static bool bounded_string(const char *s, size_t max)
{
    return s != NULL && strnlen(s, max + 1) <= max;
}

static ferry_err invalid(const char **why, const char *what)
{
    *why = what;
    return FERRY_EINVAL;
}

/* A loan's or a publish's error: the caller tells too big or refused from a full pool. */
static ferry_err failed(const char **why, ferry_err err)
{
    *why = ferry_strerror(err);
    return err;
}

/* The checks every type's header gets: a frame_id that fits, a stamp in range. */
static bool header_ok(const ferry_ros2_header *h, size_t frame_id_max, const char **why)
{
    if (!bounded_string(h->frame_id, frame_id_max))
        return (*why = "frame_id too long", false);
    if (h->nanosec >= 1000000000u)
        return (*why = "stamp", false);
    return true;
}

static ferry_stamp stamp_of(const ferry_ros2_header *h)
{
    ferry_stamp s = {h->sec, h->nanosec};

    return s;
}

/* An encoding for a log line: at most FERRY_ENCODING_MAX bytes, what is not printable ASCII
 * shown as '?' (it comes from the network). */
static void printable(char out[FERRY_ENCODING_MAX + 1], const char *s)
{
    size_t i;

    for (i = 0; i < FERRY_ENCODING_MAX && s[i] != '\0'; i++)
        out[i] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
    out[i] = '\0';
}

static ferry_err bad_encoding(const char **why, const ferry_ros2_image_msg *m)
{
    char enc[FERRY_ENCODING_MAX + 1];
    ferry_image_layout l;

    printable(enc, m->encoding);
    if (!bounded_string(m->encoding, FERRY_ENCODING_MAX))
        snprintf(why_buf, sizeof why_buf, "encoding '%s...' longer than %u bytes", enc,
                 FERRY_ENCODING_MAX);
    else if (ferry_image_layout_get(m->encoding, 2, 2, 0, &l) != FERRY_OK)
        snprintf(why_buf, sizeof why_buf, "unknown encoding '%s'", enc);
    else
        snprintf(why_buf, sizeof why_buf,
                 "geometry or step for encoding '%s' (%ux%u, step %u, at least %u bytes a row)",
                 enc, (unsigned)m->width, (unsigned)m->height, (unsigned)m->step,
                 (unsigned)((uint64_t)m->width * l.bytes_per_pixel > UINT32_MAX
                                ? UINT32_MAX
                                : m->width * l.bytes_per_pixel));
    *why = why_buf;
    return FERRY_EINVAL;
}

static ferry_err publish_image(ferry_publisher *pub, const ferry_ros2_image_msg *m,
                               const char **why)
{
    ferry_image_layout layout;
    ferry_image img;
    ferry_err err;

    if (!header_ok(&m->header, FERRY_MSG_FRAME_ID_MAX, why))
        return FERRY_EINVAL;
    if (m->encoding == NULL)
        return invalid(why, "encoding");
    if (!bounded_string(m->encoding, FERRY_ENCODING_MAX))
        return bad_encoding(why, m);
    if (m->is_bigendian > 1)
        return invalid(why, "is_bigendian");
    if (ferry_image_layout_get(m->encoding, m->width, m->height, m->step, &layout) != FERRY_OK)
        return bad_encoding(why, m);
    if (m->data == NULL || layout.data_size != (uint64_t)m->data_size)
        return invalid(why, "data size");
    err = ferry_image_loan(pub, m->width, m->height, m->encoding, m->step, &img);
    if (err != FERRY_OK)
        return failed(why, err);
    memcpy(img.data, m->data, img.data_size);
    img.header->stamp = stamp_of(&m->header);
    memcpy(img.header->frame_id, m->header.frame_id, strlen(m->header.frame_id) + 1);
    img.header->is_bigendian = m->is_bigendian;
    err = ferry_image_publish(pub, &img);
    if (err != FERRY_OK) {
        ferry_image_loan_release(pub, &img);
        return failed(why, err);
    }
    return FERRY_OK;
}

static ferry_err publish_cloud(ferry_publisher *pub, const ferry_ros2_cloud_msg *m,
                               const char **why)
{
    ferry_point_field fields[FERRY_POINTCLOUD_FIELDS_MAX];
    ferry_pointcloud pc;
    uint64_t row, size;
    ferry_err err;
    uint32_t i;

    if (!header_ok(&m->header, FERRY_MSG_FRAME_ID_MAX, why))
        return FERRY_EINVAL;
    if (m->is_bigendian > 1 || m->is_dense > 1)
        return invalid(why, "boolean neither 0 nor 1");
    if (m->nfields == 0 || m->nfields > FERRY_POINTCLOUD_FIELDS_MAX)
        return invalid(why, "number of fields");
    memset(fields, 0, sizeof fields);
    for (i = 0; i < m->nfields; i++) {
        const ferry_ros2_field_msg *f = &m->fields[i];

        if (!bounded_string(f->name, FERRY_FIELD_NAME_MAX) || f->name[0] == '\0')
            return invalid(why, "field name");
        memcpy(fields[i].name, f->name, strlen(f->name) + 1);
        fields[i].offset = f->offset;
        fields[i].datatype = f->datatype;
        fields[i].count = f->count;
    }
    if (m->point_step == 0)
        return invalid(why, "point_step");
    row = (uint64_t)m->width * m->point_step;
    if (row != m->row_step)
        return invalid(why, "row_step");
    size = row * m->height; /* both below 2^32: no overflow */
    if (size != (uint64_t)m->data_size || (size != 0 && m->data == NULL))
        return invalid(why, "data size");
    err = ferry_pointcloud_loan(pub, m->width, m->height, fields, m->nfields, m->point_step, &pc);
    if (err == FERRY_EINVAL)
        return invalid(why, "fields or size");
    if (err != FERRY_OK)
        return failed(why, err);
    if (pc.data_size != size || pc.header->point_step != m->point_step) {
        ferry_pointcloud_loan_release(pub, &pc);
        return invalid(why, "point_step");
    }
    if (size != 0)
        memcpy(pc.data, m->data, size);
    pc.header->stamp = stamp_of(&m->header);
    memcpy(pc.header->frame_id, m->header.frame_id, strlen(m->header.frame_id) + 1);
    pc.header->is_bigendian = m->is_bigendian;
    pc.header->is_dense = m->is_dense;
    err = ferry_pointcloud_publish(pub, &pc);
    if (err != FERRY_OK) {
        ferry_pointcloud_loan_release(pub, &pc);
        return failed(why, err);
    }
    return FERRY_OK;
}

static ferry_err publish_compressed(ferry_publisher *pub, const ferry_ros2_compressed_msg *m,
                                    const char **why)
{
    ferry_compressed_image ci;
    ferry_err err;

    if (!header_ok(&m->header, FERRY_MSG_FRAME_ID_MAX, why))
        return FERRY_EINVAL;
    if (!bounded_string(m->format, FERRY_COMPRESSED_FORMAT_MAX))
        return invalid(why, "format too long");
    if (m->data == NULL && m->data_size != 0)
        return invalid(why, "data size");
    err = ferry_compressed_image_loan(pub, m->format, m->data_size, &ci);
    if (err != FERRY_OK)
        return failed(why, err);
    if (m->data_size != 0)
        memcpy(ci.data, m->data, m->data_size);
    ci.header->stamp = stamp_of(&m->header);
    memcpy(ci.header->frame_id, m->header.frame_id, strlen(m->header.frame_id) + 1);
    err = ferry_compressed_image_publish(pub, &ci);
    if (err != FERRY_OK) {
        ferry_compressed_image_loan_release(pub, &ci);
        return failed(why, err);
    }
    return FERRY_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Kinds whose sample is one fixed header (camera infos, IMU samples): the header filled from the
 * parsed message by walking the kind's members, checked by the kind's own view, then copied into
 * a loan.
 * ------------------------------------------------------------------------------------------- */

static bool fill_members(const ferry_ros2_member *m, uint32_t n, const uint8_t *msg, uint8_t *view,
                         const char **why);

static bool fill_one(const ferry_ros2_member *m, const uint8_t *from, uint8_t *to, const char **why)
{
    const char *s;

    switch (m->type) {
    case FERRY_ROS2_M_BOOL:
        if (*from > 1)
            return (*why = "boolean neither 0 nor 1", false);
        *to = *from;
        return true;
    case FERRY_ROS2_M_U8:
    case FERRY_ROS2_M_I32:
    case FERRY_ROS2_M_U32:
    case FERRY_ROS2_M_I64:
    case FERRY_ROS2_M_F64:
        memcpy(to, from, ferry_ros2_elem_size(m, true));
        return true;
    case FERRY_ROS2_M_STRING:
        memcpy(&s, from, sizeof s);
        if (!bounded_string(s, m->max)) {
            snprintf(why_buf, sizeof why_buf, "%s too long", m->name);
            return (*why = why_buf, false);
        }
        memcpy(to, s, strlen(s) + 1);
        return true;
    case FERRY_ROS2_M_STRUCT:
        return fill_members(m->members, m->nmembers, from, to, why);
    default: /* a bulk or a dtype: not in a fixed header */
        return (*why = "kind", false);
    }
}

static bool fill_members(const ferry_ros2_member *m, uint32_t n, const uint8_t *msg, uint8_t *view,
                         const char **why)
{
    uint32_t i, k, count;

    for (i = 0; i < n; i++, m++) {
        const uint8_t *from = msg + m->msg;
        uint8_t *to = view + m->view;

        count = m->array == FERRY_ROS2_A_FIXED ? m->len : 1;
        if (m->array == FERRY_ROS2_A_SEQ) {
            memcpy(&count, msg + m->msg_count, sizeof count);
            if (count > m->len) {
                snprintf(why_buf, sizeof why_buf, "too many elements in %s", m->name);
                return (*why = why_buf, false);
            }
            memcpy(view + m->view_count, &count, sizeof count);
        }
        for (k = 0; k < count; k++)
            if (!fill_one(m, from + k * ferry_ros2_elem_size(m, false),
                          to + k * ferry_ros2_elem_size(m, true), why))
                return false;
    }
    return true;
}

static ferry_err publish_fixed(ferry_publisher *pub, const ferry_ros2_kind_desc *d,
                               const ferry_ros2_msg *msg, const char **why)
{
    _Alignas(max_align_t) uint8_t view[FERRY_ROS2_VIEW_MAX], check[FERRY_ROS2_VIEW_MAX];
    struct {
        uint32_t magic;
        uint16_t version;
        uint16_t header_size;
    } prefix = {d->fixed_magic, FERRY_MSG_VERSION, (uint16_t)d->view_size};
    ferry_sample s;
    void *payload;
    ferry_err err;

    if (d->view_size > sizeof view)
        return invalid(why, "kind");
    memset(view, 0, d->view_size);
    memcpy(view, &prefix, sizeof prefix);
    if (!fill_members(d->members, d->nmembers, (const uint8_t *)&msg->u, view, why))
        return FERRY_EINVAL;
    memset(&s, 0, sizeof s);
    s.data = view;
    s.size = d->view_size;
    if (d->view_get(&s, check) != FERRY_OK)
        return invalid(why, "not a valid message");
    err = ferry_loan(pub, d->view_size, &payload);
    if (err != FERRY_OK)
        return failed(why, err);
    memcpy(payload, view, d->view_size);
    err = ferry_publish(pub, payload, d->view_size);
    if (err != FERRY_OK) {
        ferry_loan_release(pub, payload);
        return failed(why, err);
    }
    return FERRY_OK;
}

static bool dtype_of_name(const char *name, ferry_dtype *out)
{
    int d;

    for (d = FERRY_DTYPE_INT8; d <= FERRY_DTYPE_BOOL; d++)
        if (strcmp(name, ferry_dtype_name((ferry_dtype)d)) == 0) {
            *out = (ferry_dtype)d;
            return true;
        }
    return false;
}

static ferry_err publish_tensor(ferry_publisher *pub, const ferry_ros2_tensor_msg *m,
                                const char **why)
{
    ferry_dtype dtype;
    ferry_tensor t;
    uint64_t numel = 1;
    ferry_err err;
    uint32_t i;

    if (!header_ok(&m->header, FERRY_FRAME_ID_MAX, why))
        return FERRY_EINVAL;
    if (!bounded_string(m->dtype, 15) || !dtype_of_name(m->dtype, &dtype))
        return invalid(why, "dtype");
    if (m->ndim > FERRY_TENSOR_DIMS_MAX)
        return invalid(why, "too many dimensions");
    for (i = 0; i < m->ndim; i++) {
        if (m->shape[i] < 0 || (uint64_t)m->shape[i] > UINT32_MAX)
            return invalid(why, "shape");
        numel *= (uint64_t)m->shape[i]; /* at most 8 factors below 2^32 each, checked below */
        if (numel > UINT32_MAX)
            return invalid(why, "data size");
    }
    if (numel * ferry_dtype_size(dtype) != m->data_size)
        return invalid(why, "data size");
    err = ferry_tensor_loan(pub, dtype, m->ndim, m->shape, NULL, &t);
    if (err != FERRY_OK)
        return failed(why, err);
    if (t.data_size < m->data_size) {
        ferry_tensor_loan_release(pub, &t);
        return invalid(why, "data size");
    }
    if (m->data_size != 0)
        memcpy(t.data, m->data, m->data_size);
    t.header->stamp = stamp_of(&m->header);
    memcpy(t.header->frame_id, m->header.frame_id, strlen(m->header.frame_id) + 1);
    err = ferry_tensor_publish(pub, &t);
    if (err != FERRY_OK) {
        ferry_tensor_loan_release(pub, &t);
        return failed(why, err);
    }
    return FERRY_OK;
}

ferry_err ferry_ros2_publish(ferry_publisher *pub, const ferry_ros2_msg *msg, const char **why)
{
    const ferry_ros2_kind_desc *d;
    const char *ignored;

    if (why == NULL)
        why = &ignored;
    *why = "";
    if (pub == NULL || msg == NULL)
        return invalid(why, "no publisher or message");
    switch (msg->kind) {
    case FERRY_ROS2_IMAGE:
        return publish_image(pub, &msg->u.image, why);
    case FERRY_ROS2_CLOUD:
        return publish_cloud(pub, &msg->u.cloud, why);
    case FERRY_ROS2_COMPRESSED:
        return publish_compressed(pub, &msg->u.compressed, why);
    case FERRY_ROS2_TENSOR:
        return publish_tensor(pub, &msg->u.tensor, why);
    default:
        d = ferry_ros2_kind_desc_of(msg->kind);
        if (d == NULL || d->fixed_magic == 0)
            return invalid(why, "kind");
        if (!header_ok((const ferry_ros2_header *)((const uint8_t *)&msg->u + d->msg_header),
                       FERRY_MSG_FRAME_ID_MAX, why))
            return FERRY_EINVAL;
        return publish_fixed(pub, d, msg, why);
    }
}
