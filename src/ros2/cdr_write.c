/*
 * The CDR writer of ros2.h: a taken sample, validated by its kind's view, serialised as plain CDR
 * (XCDR1, little endian) by walking the kind's members (msg_table.h) over the view, in up to
 * three pieces: the fields before the bulk, the bulk left where it is in the sample, the fields
 * after it.
 *
 * Alignment is relative to the first byte after the encapsulation header, as the reader's, and
 * counts the bulk's bytes for the fields that follow it (PointCloud2's is_dense).
 */
#include "msg_table.h"

#include <stdbool.h>
#include <string.h>

typedef struct cdr_writer {
    uint8_t *p; /* the piece being written: the head after the encapsulation header, or the tail */
    size_t cap;
    size_t pos;
    size_t base; /* the serialisation's offset of p[0], for alignment */
    bool full;   /* a field did not fit: the serialisation is void */
    ferry_ros2_cdr *out;
    const void *bulk; /* once the bulk is written: it, its bytes and the head's */
    size_t bulk_size, head_size;
    bool in_tail;
} cdr_writer;

static void put(cdr_writer *w, size_t align, const void *v, size_t n)
{
    size_t pad = (align - ((w->base + w->pos) & (align - 1))) & (align - 1);

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

static void put_u32(cdr_writer *w, uint32_t v)
{
    put(w, 4, &v, 4);
}

/* A string: its length with the NUL, then its bytes and the NUL. s is terminated (a view's). */
static void put_string(cdr_writer *w, const char *s)
{
    size_t n = strlen(s) + 1;

    put_u32(w, (uint32_t)n);
    put(w, 1, s, n);
}

/* The bulk's length goes in the head; what follows it, in the tail. */
static void put_bulk(cdr_writer *w, const void *data, size_t size)
{
    if (w->in_tail || size > UINT32_MAX) {
        w->full = true;
        return;
    }
    put_u32(w, (uint32_t)size);
    w->bulk = data;
    w->bulk_size = size;
    w->head_size = w->pos;
    w->in_tail = true;
    w->base += w->pos + size;
    w->p = w->out->tail;
    w->cap = sizeof w->out->tail;
    w->pos = 0;
}

static void put_members(cdr_writer *w, const ferry_ros2_member *m, uint32_t n, const uint8_t *view,
                        size_t bulk_size);

static void put_one(cdr_writer *w, const ferry_ros2_member *m, const uint8_t *at)
{
    ferry_dtype dtype;

    switch (m->type) {
    case FERRY_ROS2_M_BOOL:
    case FERRY_ROS2_M_U8:
        put(w, 1, at, 1);
        return;
    case FERRY_ROS2_M_I32:
    case FERRY_ROS2_M_U32:
        put(w, 4, at, 4);
        return;
    case FERRY_ROS2_M_I64:
    case FERRY_ROS2_M_F64:
        put(w, 8, at, 8);
        return;
    case FERRY_ROS2_M_STRING:
        put_string(w, (const char *)at);
        return;
    case FERRY_ROS2_M_DTYPE:
        memcpy(&dtype, at, sizeof dtype);
        put_string(w, ferry_dtype_name(dtype));
        return;
    case FERRY_ROS2_M_STRUCT:
        put_members(w, m->members, m->nmembers, at, 0);
        return;
    default:
        w->full = true;
        return;
    }
}

static void put_members(cdr_writer *w, const ferry_ros2_member *m, uint32_t n, const uint8_t *view,
                        size_t bulk_size)
{
    uint32_t i, k, count;

    for (i = 0; i < n; i++, m++) {
        const uint8_t *at = view + m->view;

        switch (m->array) {
        case FERRY_ROS2_A_NONE:
            if (m->type == FERRY_ROS2_M_BULK) {
                const void *data;

                memcpy(&data, at, sizeof data);
                put_bulk(w, data, bulk_size);
            } else {
                put_one(w, m, at);
            }
            break;
        case FERRY_ROS2_A_FIXED:
            for (k = 0; k < m->len; k++)
                put_one(w, m, at + k * ferry_ros2_elem_size(m, true));
            break;
        default:
            memcpy(&count, view + m->view_count, sizeof count);
            if (count > m->len) { /* a view never has more */
                w->full = true;
                return;
            }
            put_u32(w, count);
            for (k = 0; k < count; k++)
                put_one(w, m, at + k * ferry_ros2_elem_size(m, true));
            break;
        }
    }
}

/* Serialises the view v of kind d in the pieces of ros2.h. */
static ferry_err encode_view(const ferry_ros2_kind_desc *d, const void *v, ferry_ros2_cdr *out)
{
    static const uint8_t cdr_le[4] = {0x00, 0x01, 0x00, 0x00};
    const uint8_t *view = v;
    size_t bulk_size = 0;
    cdr_writer w;
    ferry_stamp stamp;
    ferry_err err;
    uint32_t i;
    unsigned n = 0;

    for (i = 0; i < d->nmembers; i++)
        if (d->members[i].type == FERRY_ROS2_M_BULK)
            memcpy(&bulk_size, view + d->members[i].view_count, sizeof bulk_size);
    if (d->write_check != NULL) {
        err = d->write_check(v, &bulk_size);
        if (err != FERRY_OK)
            return err;
    }
    memset(&w, 0, sizeof w);
    memcpy(out->head, cdr_le, sizeof cdr_le);
    w.p = out->head + 4;
    w.cap = sizeof out->head - 4;
    w.out = out;
    put_members(&w, d->members, d->nmembers, view, bulk_size);
    if (w.full)
        return FERRY_EINVAL;
    if (!w.in_tail)
        w.head_size = w.pos;
    out->iov[n].iov_base = out->head;
    out->iov[n++].iov_len = 4 + w.head_size;
    if (w.bulk_size != 0) {
        out->iov[n].iov_base = (void *)(uintptr_t)w.bulk;
        out->iov[n++].iov_len = w.bulk_size;
    }
    if (w.in_tail && w.pos != 0) {
        out->iov[n].iov_base = out->tail;
        out->iov[n++].iov_len = w.pos;
    }
    out->niov = n;
    out->size = 4 + w.head_size + w.bulk_size + (w.in_tail ? w.pos : 0);
    memcpy(&stamp, view + d->stamp, sizeof stamp);
    out->stamp_ns = (int64_t)stamp.sec * 1000000000 + stamp.nanosec;
    return FERRY_OK;
}

ferry_err ferry_ros2_cdr_encode_compressed(ferry_stamp stamp, const char *frame_id,
                                           const char *format, const void *data, size_t size,
                                           ferry_ros2_cdr *out)
{
    ferry_compressed_image_view v;
    size_t nf, nc;

    if (out == NULL || frame_id == NULL || format == NULL || (data == NULL && size != 0) ||
        size > UINT32_MAX)
        return FERRY_EINVAL;
    nf = strnlen(frame_id, FERRY_MSG_FRAME_ID_MAX + 1);
    nc = strnlen(format, FERRY_COMPRESSED_FORMAT_MAX + 1);
    if (nf > FERRY_MSG_FRAME_ID_MAX || nc > FERRY_COMPRESSED_FORMAT_MAX)
        return FERRY_EINVAL;
    memset(&v, 0, sizeof v);
    v.header.stamp = stamp;
    memcpy(v.header.frame_id, frame_id, nf);
    memcpy(v.header.format, format, nc);
    v.data = data;
    v.data_size = size;
    return encode_view(ferry_ros2_kind_desc_of(FERRY_ROS2_COMPRESSED), &v, out);
}

ferry_err ferry_ros2_cdr_encode(ferry_ros2_kind kind, const ferry_sample *s, ferry_ros2_cdr *out)
{
    const ferry_ros2_kind_desc *d = ferry_ros2_kind_desc_of(kind);
    _Alignas(max_align_t) uint8_t v[FERRY_ROS2_VIEW_MAX];
    ferry_err err;

    if (s == NULL || out == NULL || d == NULL || d->view_size > sizeof v)
        return FERRY_EINVAL;
    err = d->view_get(s, v);
    if (err != FERRY_OK)
        return err;
    return encode_view(d, v, out);
}
