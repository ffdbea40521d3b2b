/*
 * Typed frames (include/ferry/msg.h): the checks all headers share, and images and point clouds:
 * header layouts, size arithmetic and validation (msg_sensor.c has the other types). Every
 * header read from a sample is copied first and validated on the copy, because the publisher
 * still maps the memory writable.
 */
#include "msg_internal.h"

#include <limits.h>
#include <string.h>

_Static_assert(sizeof(ferry_stamp) == 8, "ferry_stamp layout");
_Static_assert(sizeof(ferry_image_header) == 336, "ferry_image_header layout");
_Static_assert(offsetof(ferry_image_header, encoding) == 32, "ferry_image_header layout");
_Static_assert(offsetof(ferry_image_header, frame_id) == 64, "ferry_image_header layout");
_Static_assert(offsetof(ferry_image_header, data_offset) == 320, "ferry_image_header layout");
_Static_assert(sizeof(ferry_point_field) == 44, "ferry_point_field layout");
_Static_assert(offsetof(ferry_pointcloud_header, fields) == 296, "ferry_pointcloud_header layout");
_Static_assert(sizeof(ferry_pointcloud_header) == 3128, "ferry_pointcloud_header layout");

/* rows_num / rows_den: rows of data per row of pixels (3/2 for nv12 and nv21: a chroma plane
 * of half the rows; 3/1 for nv24: one of twice the luma plane's bytes). */
typedef struct msg_encoding {
    const char *name;
    uint32_t bytes_per_pixel;
    bool even_width;
    bool even_height;
    uint8_t rows_num, rows_den;
} msg_encoding;

#define MSG_PACKED(name, bpp)                                                                      \
    {                                                                                              \
        name, bpp, false, false, 1, 1                                                              \
    }
/* The generic encodings of sensor_msgs/image_encodings (OpenCV's type names): a depth of these,
 * "C" and a channel count of 1..MSG_CHANNELS_MAX (OpenCV's CV_CN_MAX) in decimal, without a
 * leading zero. */
static const struct msg_depth {
    const char *prefix;
    uint32_t bytes;
} msg_depths[] = {{"8UC", 1},  {"8SC", 1},  {"16UC", 2}, {"16SC", 2},
                  {"32SC", 4}, {"32FC", 4}, {"64FC", 8}};
#define MSG_CHANNELS_MAX 512u

static const msg_encoding msg_encodings[] = {
    MSG_PACKED("rgb8", 3),
    MSG_PACKED("bgr8", 3),
    MSG_PACKED("rgba8", 4),
    MSG_PACKED("bgra8", 4),
    MSG_PACKED("rgb16", 6),
    MSG_PACKED("bgr16", 6),
    MSG_PACKED("rgba16", 8),
    MSG_PACKED("bgra16", 8),
    MSG_PACKED("mono8", 1),
    MSG_PACKED("mono16", 2),
    MSG_PACKED("bayer_rggb8", 1),
    MSG_PACKED("bayer_bggr8", 1),
    MSG_PACKED("bayer_gbrg8", 1),
    MSG_PACKED("bayer_grbg8", 1),
    MSG_PACKED("bayer_rggb16", 2),
    MSG_PACKED("bayer_bggr16", 2),
    MSG_PACKED("bayer_gbrg16", 2),
    MSG_PACKED("bayer_grbg16", 2),
    {"yuv422", 2, true, false, 1, 1},
    {"yuv422_yuy2", 2, true, false, 1, 1},
    {"yuyv", 2, true, false, 1, 1},
    {"uyvy", 2, true, false, 1, 1},
    {"nv12", 1, true, true, 3, 2},
    {"nv21", 1, true, true, 3, 2},
    {"nv24", 1, false, false, 3, 1},
};

static bool msg_host_bigendian(void)
{
    const uint16_t one = 1;
    uint8_t first;
    memcpy(&first, &one, 1);
    return first == 0;
}

/* A generic encoding ("32FC3"): its bytes per pixel, or 0. */
static uint32_t msg_generic_bpp(const char *encoding)
{
    for (size_t i = 0; i < sizeof msg_depths / sizeof msg_depths[0]; i++) {
        size_t n = strlen(msg_depths[i].prefix);
        if (strncmp(encoding, msg_depths[i].prefix, n) != 0)
            continue;
        const char *p = encoding + n;
        uint32_t channels = 0;
        if (*p < '1' || *p > '9')
            return 0;
        for (; *p >= '0' && *p <= '9'; p++) {
            channels = channels * 10 + (uint32_t)(*p - '0');
            if (channels > MSG_CHANNELS_MAX)
                return 0;
        }
        return *p == '\0' ? channels * msg_depths[i].bytes : 0;
    }
    return 0;
}

/* encoding must be terminated within FERRY_ENCODING_MAX + 1 bytes. A generic encoding is
 * described in *tmp. */
static const msg_encoding *msg_encoding_find(const char *encoding, msg_encoding *tmp)
{
    for (size_t i = 0; i < sizeof msg_encodings / sizeof msg_encodings[0]; i++)
        if (strcmp(msg_encodings[i].name, encoding) == 0)
            return &msg_encodings[i];
    uint32_t bpp = msg_generic_bpp(encoding);
    if (bpp == 0)
        return NULL;
    *tmp = (msg_encoding){encoding, bpp, false, false, 1, 1};
    return tmp;
}

uint64_t ferry__msg_align_up(uint64_t v)
{
    return (v + FERRY_MSG_DATA_ALIGN - 1) & ~(uint64_t)(FERRY_MSG_DATA_ALIGN - 1);
}

bool ferry__msg_terminated(const char *s, size_t cap)
{
    return memchr(s, '\0', cap) != NULL;
}

bool ferry__msg_zero(const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != 0)
            return false;
    return true;
}

bool ferry__msg_prefix_ok(const void *header, uint32_t magic, size_t expected)
{
    struct {
        uint32_t magic;
        uint16_t version;
        uint16_t header_size;
    } p;
    memcpy(&p, header, sizeof p);
    return p.magic == magic && p.version == FERRY_MSG_VERSION && p.header_size == expected;
}

static ferry_err msg_layout(const msg_encoding *enc, uint32_t width, uint32_t height, uint32_t step,
                            ferry_image_layout *out)
{
    if (width == 0 || height == 0)
        return FERRY_EINVAL;
    if ((enc->even_width && width % 2 != 0) || (enc->even_height && height % 2 != 0))
        return FERRY_EINVAL;
    uint64_t min_step = (uint64_t)width * enc->bytes_per_pixel;
    if (min_step > UINT32_MAX)
        return FERRY_EINVAL;
    if (step == 0)
        step = (uint32_t)min_step;
    if (step < min_step)
        return FERRY_EINVAL;
    /* step < 2^32 and height < 2^32, so the products below need an explicit check. */
    uint64_t rows = (uint64_t)height / enc->rows_den * enc->rows_num;
    if (rows > UINT64_MAX / step)
        return FERRY_EINVAL;
    uint64_t size = rows * step;
    if (size > SIZE_MAX)
        return FERRY_EINVAL;
    out->bytes_per_pixel = enc->bytes_per_pixel;
    out->min_step = (uint32_t)min_step;
    out->step = step;
    out->data_size = size;
    return FERRY_OK;
}

ferry_err ferry_image_layout_get(const char *encoding, uint32_t width, uint32_t height,
                                 uint32_t step, ferry_image_layout *out)
{
    if (!encoding || !out || strnlen(encoding, FERRY_ENCODING_MAX + 1) > FERRY_ENCODING_MAX)
        return FERRY_EINVAL;
    msg_encoding generic;
    const msg_encoding *enc = msg_encoding_find(encoding, &generic);
    if (!enc)
        return FERRY_EINVAL;
    ferry_image_layout l;
    ferry_err err = msg_layout(enc, width, height, step, &l);
    if (err == FERRY_OK)
        *out = l;
    return err;
}

bool ferry__msg_data_inside(uint64_t header_size, uint64_t data_offset, uint64_t data_size,
                            size_t size)
{
    return data_offset >= header_size && data_offset % FERRY_MSG_DATA_ALIGN == 0 &&
           data_offset <= size && data_size <= size - data_offset;
}

/* Validates a copy of an image header for a payload of size bytes. */
static bool msg_image_check(const ferry_image_header *h, size_t size, ferry_image_layout *layout)
{
    if (!ferry__msg_prefix_ok(h, FERRY_IMAGE_MAGIC, sizeof *h))
        return false;
    if (h->is_bigendian > 1 || !ferry__msg_terminated(h->encoding, sizeof h->encoding) ||
        !ferry__msg_terminated(h->frame_id, sizeof h->frame_id))
        return false;
    msg_encoding generic;
    const msg_encoding *enc = msg_encoding_find(h->encoding, &generic);
    if (!enc || h->step == 0)
        return false;
    if (msg_layout(enc, h->width, h->height, h->step, layout) != FERRY_OK)
        return false;
    return h->data_size == layout->data_size &&
           ferry__msg_data_inside(h->header_size, h->data_offset, h->data_size, size);
}

void ferry__msg_clear(void *out, size_t n)
{
    if (out)
        memset(out, 0, n);
}

ferry_err ferry__msg_loan_release(ferry_publisher *pub, void *loan, size_t loan_size, void *payload)
{
    if (!pub || !payload)
        return FERRY_EINVAL;
    ferry_err err = ferry_loan_release(pub, payload);
    if (err == FERRY_OK)
        memset(loan, 0, loan_size);
    return err;
}

ferry_err ferry_image_loan(ferry_publisher *pub, uint32_t width, uint32_t height,
                           const char *encoding, uint32_t step, ferry_image *out)
{
    ferry__msg_clear(out, sizeof *out);
    if (!pub || !out)
        return FERRY_EINVAL;
    ferry_image_layout l;
    ferry_err err = ferry_image_layout_get(encoding, width, height, step, &l);
    if (err != FERRY_OK)
        return err;
    uint64_t offset = ferry__msg_align_up(sizeof(ferry_image_header));
    if (l.data_size > SIZE_MAX - offset)
        return FERRY_EINVAL;
    size_t total = (size_t)(offset + l.data_size);
    void *payload;
    if ((err = ferry_loan(pub, total, &payload)) != FERRY_OK)
        return err;
    /* The chunk may hold an older sample: clear the header and its padding, not the pixels. */
    memset(payload, 0, (size_t)offset);
    ferry_image_header *h = payload;
    h->magic = FERRY_IMAGE_MAGIC;
    h->version = FERRY_MSG_VERSION;
    h->header_size = sizeof(ferry_image_header);
    h->width = width;
    h->height = height;
    h->step = l.step;
    h->is_bigendian = msg_host_bigendian() ? 1 : 0;
    memcpy(h->encoding, encoding, strlen(encoding) + 1);
    h->data_offset = offset;
    h->data_size = l.data_size;
    out->header = h;
    out->data = (unsigned char *)payload + offset;
    out->data_size = (size_t)l.data_size;
    out->payload = payload;
    out->payload_size = total;
    return FERRY_OK;
}

ferry_err ferry_image_publish(ferry_publisher *pub, ferry_image *img)
{
    if (!pub || !img || !img->payload || img->payload_size < sizeof(ferry_image_header))
        return FERRY_EINVAL;
    ferry_image_header h;
    ferry_image_layout l;
    memcpy(&h, img->payload, sizeof h);
    if (!msg_image_check(&h, img->payload_size, &l))
        return FERRY_EINVAL;
    ferry_err err = ferry_publish(pub, img->payload, img->payload_size);
    if (err == FERRY_OK)
        memset(img, 0, sizeof *img);
    return err;
}

ferry_err ferry_image_loan_release(ferry_publisher *pub, ferry_image *img)
{
    if (!img)
        return FERRY_EINVAL;
    return ferry__msg_loan_release(pub, img, sizeof *img, img->payload);
}

ferry_err ferry_image_view_get(const ferry_sample *s, ferry_image_view *out)
{
    if (!s || !out)
        return FERRY_EINVAL;
    if (!s->data || s->size < sizeof(ferry_image_header))
        return FERRY_EPROTO;
    ferry_image_view v;
    memcpy(&v.header, s->data, sizeof v.header);
    if (!msg_image_check(&v.header, s->size, &v.layout))
        return FERRY_EPROTO;
    v.data = (const unsigned char *)s->data + v.header.data_offset;
    v.data_size = (size_t)v.header.data_size;
    *out = v;
    return FERRY_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Point clouds
 * ------------------------------------------------------------------------------------------- */

uint32_t ferry_point_datatype_size(uint32_t datatype)
{
    static const uint8_t sizes[] = {0, 1, 1, 2, 2, 4, 4, 4, 8};
    return datatype < sizeof sizes ? sizes[datatype] : 0;
}

/* Checks fields; *end receives the largest offset + size * count. point_step 0: not checked. */
static bool msg_fields_check(const ferry_point_field *fields, uint32_t nfields, uint32_t point_step,
                             uint64_t *end)
{
    if (nfields == 0 || nfields > FERRY_POINTCLOUD_FIELDS_MAX)
        return false;
    uint64_t last = 0;
    for (uint32_t i = 0; i < nfields; i++) {
        const ferry_point_field *f = &fields[i];
        if (!ferry__msg_terminated(f->name, sizeof f->name) || f->name[0] == '\0')
            return false;
        uint32_t size = ferry_point_datatype_size(f->datatype);
        if (size == 0 || f->count == 0)
            return false;
        /* offset < 2^32, size <= 8, count < 2^32: fits in 64 bits. */
        uint64_t fend = (uint64_t)f->offset + (uint64_t)size * f->count;
        if (point_step != 0 && fend > point_step)
            return false;
        if (fend > last)
            last = fend;
        for (uint32_t j = 0; j < i; j++)
            if (strcmp(fields[j].name, f->name) == 0)
                return false;
    }
    *end = last;
    return true;
}

/* row_step and data size of a cloud, or false when they do not fit. */
static bool msg_cloud_sizes(uint32_t width, uint32_t height, uint32_t point_step,
                            uint32_t *row_step, uint64_t *data_size)
{
    uint64_t row = (uint64_t)width * point_step;
    if (row > UINT32_MAX)
        return false;
    uint64_t size = row * height; /* both < 2^32 */
    if (size > SIZE_MAX)
        return false;
    *row_step = (uint32_t)row;
    *data_size = size;
    return true;
}

static bool msg_cloud_check(const ferry_pointcloud_header *h, size_t size)
{
    if (!ferry__msg_prefix_ok(h, FERRY_POINTCLOUD_MAGIC, sizeof *h))
        return false;
    if (h->is_bigendian > 1 || h->is_dense > 1 ||
        !ferry__msg_terminated(h->frame_id, sizeof h->frame_id) || h->point_step == 0)
        return false;
    uint64_t end;
    if (!msg_fields_check(h->fields, h->nfields, h->point_step, &end))
        return false;
    uint32_t row_step;
    uint64_t data_size;
    if (!msg_cloud_sizes(h->width, h->height, h->point_step, &row_step, &data_size))
        return false;
    return h->row_step == row_step && h->data_size == data_size &&
           ferry__msg_data_inside(h->header_size, h->data_offset, h->data_size, size);
}

ferry_err ferry_pointcloud_loan(ferry_publisher *pub, uint32_t width, uint32_t height,
                                const ferry_point_field *fields, uint32_t nfields,
                                uint32_t point_step, ferry_pointcloud *out)
{
    ferry__msg_clear(out, sizeof *out);
    if (!pub || !fields || !out)
        return FERRY_EINVAL;
    uint64_t end;
    if (!msg_fields_check(fields, nfields, point_step, &end))
        return FERRY_EINVAL;
    if (point_step == 0) {
        if (end > UINT32_MAX)
            return FERRY_EINVAL;
        point_step = (uint32_t)end;
    }
    uint32_t row_step;
    uint64_t data_size;
    if (!msg_cloud_sizes(width, height, point_step, &row_step, &data_size))
        return FERRY_EINVAL;
    uint64_t offset = ferry__msg_align_up(sizeof(ferry_pointcloud_header));
    if (data_size > SIZE_MAX - offset)
        return FERRY_EINVAL;
    size_t total = (size_t)(offset + data_size);
    void *payload;
    ferry_err err = ferry_loan(pub, total, &payload);
    if (err != FERRY_OK)
        return err;
    memset(payload, 0, (size_t)offset);
    ferry_pointcloud_header *h = payload;
    h->magic = FERRY_POINTCLOUD_MAGIC;
    h->version = FERRY_MSG_VERSION;
    h->header_size = sizeof(ferry_pointcloud_header);
    h->height = height;
    h->width = width;
    h->point_step = point_step;
    h->row_step = row_step;
    h->nfields = nfields;
    h->is_bigendian = msg_host_bigendian() ? 1 : 0;
    for (uint32_t i = 0; i < nfields; i++) {
        ferry_point_field *f = &h->fields[i];
        memcpy(f->name, fields[i].name, strlen(fields[i].name) + 1);
        f->offset = fields[i].offset;
        f->datatype = fields[i].datatype;
        f->count = fields[i].count;
    }
    h->data_offset = offset;
    h->data_size = data_size;
    out->header = h;
    out->data = (unsigned char *)payload + offset;
    out->data_size = (size_t)data_size;
    out->payload = payload;
    out->payload_size = total;
    return FERRY_OK;
}

ferry_err ferry_pointcloud_publish(ferry_publisher *pub, ferry_pointcloud *pc)
{
    if (!pub || !pc || !pc->payload || pc->payload_size < sizeof(ferry_pointcloud_header))
        return FERRY_EINVAL;
    ferry_pointcloud_header h;
    memcpy(&h, pc->payload, sizeof h);
    if (!msg_cloud_check(&h, pc->payload_size))
        return FERRY_EINVAL;
    ferry_err err = ferry_publish(pub, pc->payload, pc->payload_size);
    if (err == FERRY_OK)
        memset(pc, 0, sizeof *pc);
    return err;
}

ferry_err ferry_pointcloud_loan_release(ferry_publisher *pub, ferry_pointcloud *pc)
{
    if (!pc)
        return FERRY_EINVAL;
    return ferry__msg_loan_release(pub, pc, sizeof *pc, pc->payload);
}

ferry_err ferry_pointcloud_view_get(const ferry_sample *s, ferry_pointcloud_view *out)
{
    if (!s || !out)
        return FERRY_EINVAL;
    if (!s->data || s->size < sizeof(ferry_pointcloud_header))
        return FERRY_EPROTO;
    ferry_pointcloud_view v;
    memcpy(&v.header, s->data, sizeof v.header);
    if (!msg_cloud_check(&v.header, s->size))
        return FERRY_EPROTO;
    v.data = (const unsigned char *)s->data + v.header.data_offset;
    v.data_size = (size_t)v.header.data_size;
    *out = v;
    return FERRY_OK;
}
