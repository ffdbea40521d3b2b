/*
 * Typed frames (include/ferry/msg.h) of the types without pixel arithmetic: camera infos, IMU
 * samples and poses, one fixed header each that is the whole sample, and compressed images, a
 * header and bytes of any length. As in msg.c, a header read from a sample is copied first and
 * validated on the copy.
 */
#include "msg_internal.h"

#include <string.h>

_Static_assert(sizeof(ferry_roi) == 20, "ferry_roi layout");
_Static_assert(offsetof(ferry_camera_info_header, stamp) == 48, "ferry_camera_info_header layout");
_Static_assert(offsetof(ferry_camera_info_header, d) == 376, "ferry_camera_info_header layout");
_Static_assert(sizeof(ferry_camera_info_header) == 744, "ferry_camera_info_header layout");
_Static_assert(offsetof(ferry_compressed_image_header, format) == 272,
               "ferry_compressed_image_header layout");
_Static_assert(sizeof(ferry_compressed_image_header) == 352,
               "ferry_compressed_image_header layout");
_Static_assert(offsetof(ferry_imu_header, orientation) == 272, "ferry_imu_header layout");
_Static_assert(sizeof(ferry_imu_header) == 568, "ferry_imu_header layout");
_Static_assert(offsetof(ferry_pose_stamped_header, pose) == 272,
               "ferry_pose_stamped_header layout");
_Static_assert(sizeof(ferry_pose_stamped_header) == 328, "ferry_pose_stamped_header layout");

/* The largest header that is a whole sample and needs only a terminated frame_id. */
#define FERRY_MSG_PLAIN_HEADER_MAX sizeof(ferry_imu_header)
_Static_assert(sizeof(ferry_pose_stamped_header) <= FERRY_MSG_PLAIN_HEADER_MAX,
               "the plain headers fit");

/* Loans a sample of size bytes whose first clear bytes (the header and its padding, at most
 * size) are cleared, and gives the header magic, version and header_size. */
static ferry_err msg_loan_header(ferry_publisher *pub, size_t size, size_t clear, uint32_t magic,
                                 size_t header_size, void **payload)
{
    ferry_err err = ferry_loan(pub, size, payload);
    if (err != FERRY_OK)
        return err;
    /* The chunk may hold an older sample. */
    memset(*payload, 0, clear);
    struct {
        uint32_t magic;
        uint16_t version;
        uint16_t header_size;
    } p = {magic, FERRY_MSG_VERSION, (uint16_t)header_size};
    memcpy(*payload, &p, sizeof p);
    return FERRY_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Camera infos
 * ------------------------------------------------------------------------------------------- */

static bool msg_camera_info_check(const ferry_camera_info_header *h, size_t size)
{
    if (!ferry__msg_prefix_ok(h, FERRY_CAMERA_INFO_MAGIC, sizeof *h) || size != sizeof *h)
        return false;
    if (!ferry__msg_terminated(h->frame_id, sizeof h->frame_id) ||
        !ferry__msg_terminated(h->distortion_model, sizeof h->distortion_model))
        return false;
    if (h->d_count > FERRY_CAMERA_INFO_D_MAX)
        return false;
    /* The coefficients past d_count are zero, so that equal calibrations are equal bytes. */
    size_t unused = (FERRY_CAMERA_INFO_D_MAX - h->d_count) * sizeof(double);
    if (!ferry__msg_zero(&h->d[h->d_count], unused))
        return false;
    return h->roi.do_rectify <= 1 && ferry__msg_zero(h->roi.reserved_, sizeof h->roi.reserved_);
}

ferry_err ferry_camera_info_loan(ferry_publisher *pub, ferry_camera_info *out)
{
    ferry__msg_clear(out, sizeof *out);
    if (!pub || !out)
        return FERRY_EINVAL;
    void *payload;
    ferry_err err =
        msg_loan_header(pub, sizeof(ferry_camera_info_header), sizeof(ferry_camera_info_header),
                        FERRY_CAMERA_INFO_MAGIC, sizeof(ferry_camera_info_header), &payload);
    if (err != FERRY_OK)
        return err;
    out->header = payload;
    out->payload = payload;
    out->payload_size = sizeof(ferry_camera_info_header);
    return FERRY_OK;
}

ferry_err ferry_camera_info_publish(ferry_publisher *pub, ferry_camera_info *ci)
{
    if (!pub || !ci || !ci->payload || ci->payload_size != sizeof(ferry_camera_info_header))
        return FERRY_EINVAL;
    ferry_camera_info_header h;
    memcpy(&h, ci->payload, sizeof h);
    if (!msg_camera_info_check(&h, ci->payload_size))
        return FERRY_EINVAL;
    ferry_err err = ferry_publish(pub, ci->payload, ci->payload_size);
    if (err == FERRY_OK)
        memset(ci, 0, sizeof *ci);
    return err;
}

ferry_err ferry_camera_info_loan_release(ferry_publisher *pub, ferry_camera_info *ci)
{
    if (!ci)
        return FERRY_EINVAL;
    return ferry__msg_loan_release(pub, ci, sizeof *ci, ci->payload);
}

ferry_err ferry_camera_info_view_get(const ferry_sample *s, ferry_camera_info_view *out)
{
    if (!s || !out)
        return FERRY_EINVAL;
    if (!s->data || s->size != sizeof(ferry_camera_info_header))
        return FERRY_EPROTO;
    ferry_camera_info_view v;
    memcpy(&v.header, s->data, sizeof v.header);
    if (!msg_camera_info_check(&v.header, s->size))
        return FERRY_EPROTO;
    *out = v;
    return FERRY_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Compressed images
 * ------------------------------------------------------------------------------------------- */

/* size: the sample's, which ends right after the data. */
static bool msg_compressed_check(const ferry_compressed_image_header *h, size_t size)
{
    if (!ferry__msg_prefix_ok(h, FERRY_COMPRESSED_IMAGE_MAGIC, sizeof *h))
        return false;
    if (!ferry__msg_terminated(h->frame_id, sizeof h->frame_id) ||
        !ferry__msg_terminated(h->format, sizeof h->format))
        return false;
    return ferry__msg_data_inside(h->header_size, h->data_offset, h->data_size, size) &&
           h->data_offset + h->data_size == size;
}

ferry_err ferry_compressed_image_loan(ferry_publisher *pub, const char *format, size_t capacity,
                                      ferry_compressed_image *out)
{
    ferry__msg_clear(out, sizeof *out);
    if (!pub || !format || !out ||
        strnlen(format, FERRY_COMPRESSED_FORMAT_MAX + 1) > FERRY_COMPRESSED_FORMAT_MAX)
        return FERRY_EINVAL;
    uint64_t offset = ferry__msg_align_up(sizeof(ferry_compressed_image_header));
    if ((uint64_t)capacity > SIZE_MAX - offset)
        return FERRY_EINVAL;
    size_t total = (size_t)offset + capacity;
    void *payload;
    ferry_err err = msg_loan_header(pub, total, (size_t)offset, FERRY_COMPRESSED_IMAGE_MAGIC,
                                    sizeof(ferry_compressed_image_header), &payload);
    if (err != FERRY_OK)
        return err;
    ferry_compressed_image_header *h = payload;
    memcpy(h->format, format, strlen(format) + 1);
    h->data_offset = offset;
    h->data_size = capacity;
    out->header = h;
    out->data = (unsigned char *)payload + offset;
    out->capacity = capacity;
    out->payload = payload;
    out->payload_size = total;
    return FERRY_OK;
}

ferry_err ferry_compressed_image_publish(ferry_publisher *pub, ferry_compressed_image *ci)
{
    if (!pub || !ci || !ci->payload || ci->payload_size < sizeof(ferry_compressed_image_header))
        return FERRY_EINVAL;
    ferry_compressed_image_header h;
    memcpy(&h, ci->payload, sizeof h);
    /* Checked against the sample as it will be published: the data's end is its end. */
    if (h.data_size > ci->capacity || h.data_offset != ci->payload_size - ci->capacity)
        return FERRY_EINVAL;
    size_t size = (size_t)(h.data_offset + h.data_size);
    if (!msg_compressed_check(&h, size))
        return FERRY_EINVAL;
    /* ferry_publish reads 0 as the whole loan: a header with no data is never 0 bytes. */
    ferry_err err = ferry_publish(pub, ci->payload, size);
    if (err == FERRY_OK)
        memset(ci, 0, sizeof *ci);
    return err;
}

ferry_err ferry_compressed_image_loan_release(ferry_publisher *pub, ferry_compressed_image *ci)
{
    if (!ci)
        return FERRY_EINVAL;
    return ferry__msg_loan_release(pub, ci, sizeof *ci, ci->payload);
}

ferry_err ferry_compressed_image_view_get(const ferry_sample *s, ferry_compressed_image_view *out)
{
    if (!s || !out)
        return FERRY_EINVAL;
    if (!s->data || s->size < sizeof(ferry_compressed_image_header))
        return FERRY_EPROTO;
    ferry_compressed_image_view v;
    memcpy(&v.header, s->data, sizeof v.header);
    if (!msg_compressed_check(&v.header, s->size))
        return FERRY_EPROTO;
    v.data = (const unsigned char *)s->data + v.header.data_offset;
    v.data_size = (size_t)v.header.data_size;
    *out = v;
    return FERRY_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Headers that are the whole sample and need only a terminated frame_id: IMU samples, poses
 * ------------------------------------------------------------------------------------------- */

/* The header's frame_id: at the same offset in each of them. */
_Static_assert(offsetof(ferry_imu_header, frame_id) ==
                   offsetof(ferry_pose_stamped_header, frame_id),
               "one frame_id offset for the plain headers");
#define PLAIN_FRAME_ID offsetof(ferry_imu_header, frame_id)

static bool msg_plain_check(const void *h, uint32_t magic, size_t header_size, size_t size)
{
    return ferry__msg_prefix_ok(h, magic, header_size) && size == header_size &&
           ferry__msg_terminated((const char *)h + PLAIN_FRAME_ID, FERRY_MSG_FRAME_ID_MAX + 1);
}

/* Loans a plain header; *header is the payload. */
static ferry_err msg_plain_loan(ferry_publisher *pub, uint32_t magic, size_t header_size,
                                void **header)
{
    if (!pub)
        return FERRY_EINVAL;
    return msg_loan_header(pub, header_size, header_size, magic, header_size, header);
}

/* Publishes a plain header loaned as payload (payload_size bytes) once it checks out. */
static ferry_err msg_plain_publish(ferry_publisher *pub, void *payload, size_t payload_size,
                                   uint32_t magic, size_t header_size)
{
    uint8_t h[FERRY_MSG_PLAIN_HEADER_MAX];

    if (!pub || !payload || payload_size != header_size || header_size > sizeof h)
        return FERRY_EINVAL;
    memcpy(h, payload, header_size);
    if (!msg_plain_check(h, magic, header_size, payload_size))
        return FERRY_EINVAL;
    return ferry_publish(pub, payload, payload_size);
}

/* Copies and checks a taken plain header into out (header_size bytes). */
static ferry_err msg_plain_view(const ferry_sample *s, uint32_t magic, size_t header_size,
                                void *out)
{
    uint8_t h[FERRY_MSG_PLAIN_HEADER_MAX];

    if (!s || !out)
        return FERRY_EINVAL;
    if (!s->data || s->size != header_size || header_size > sizeof h)
        return FERRY_EPROTO;
    memcpy(h, s->data, header_size);
    if (!msg_plain_check(h, magic, header_size, s->size))
        return FERRY_EPROTO;
    memcpy(out, h, header_size);
    return FERRY_OK;
}

ferry_err ferry_imu_loan(ferry_publisher *pub, ferry_imu *out)
{
    ferry__msg_clear(out, sizeof *out);
    if (!out)
        return FERRY_EINVAL;
    void *payload;
    ferry_err err = msg_plain_loan(pub, FERRY_IMU_MAGIC, sizeof(ferry_imu_header), &payload);
    if (err != FERRY_OK)
        return err;
    out->header = payload;
    out->header->orientation.w = 1.0;
    out->payload = payload;
    out->payload_size = sizeof(ferry_imu_header);
    return FERRY_OK;
}

ferry_err ferry_imu_publish(ferry_publisher *pub, ferry_imu *imu)
{
    if (!imu)
        return FERRY_EINVAL;
    ferry_err err = msg_plain_publish(pub, imu->payload, imu->payload_size, FERRY_IMU_MAGIC,
                                      sizeof(ferry_imu_header));
    if (err == FERRY_OK)
        memset(imu, 0, sizeof *imu);
    return err;
}

ferry_err ferry_imu_loan_release(ferry_publisher *pub, ferry_imu *imu)
{
    if (!imu)
        return FERRY_EINVAL;
    return ferry__msg_loan_release(pub, imu, sizeof *imu, imu->payload);
}

ferry_err ferry_imu_view_get(const ferry_sample *s, ferry_imu_view *out)
{
    return msg_plain_view(s, FERRY_IMU_MAGIC, sizeof(ferry_imu_header), out);
}

ferry_err ferry_pose_stamped_loan(ferry_publisher *pub, ferry_pose_stamped *out)
{
    ferry__msg_clear(out, sizeof *out);
    if (!out)
        return FERRY_EINVAL;
    void *payload;
    ferry_err err =
        msg_plain_loan(pub, FERRY_POSE_STAMPED_MAGIC, sizeof(ferry_pose_stamped_header), &payload);
    if (err != FERRY_OK)
        return err;
    out->header = payload;
    out->header->pose.orientation.w = 1.0;
    out->payload = payload;
    out->payload_size = sizeof(ferry_pose_stamped_header);
    return FERRY_OK;
}

ferry_err ferry_pose_stamped_publish(ferry_publisher *pub, ferry_pose_stamped *pose)
{
    if (!pose)
        return FERRY_EINVAL;
    ferry_err err = msg_plain_publish(pub, pose->payload, pose->payload_size,
                                      FERRY_POSE_STAMPED_MAGIC, sizeof(ferry_pose_stamped_header));
    if (err == FERRY_OK)
        memset(pose, 0, sizeof *pose);
    return err;
}

ferry_err ferry_pose_stamped_loan_release(ferry_publisher *pub, ferry_pose_stamped *pose)
{
    if (!pose)
        return FERRY_EINVAL;
    return ferry__msg_loan_release(pub, pose, sizeof *pose, pose->payload);
}

ferry_err ferry_pose_stamped_view_get(const ferry_sample *s, ferry_pose_stamped_view *out)
{
    return msg_plain_view(s, FERRY_POSE_STAMPED_MAGIC, sizeof(ferry_pose_stamped_header), out);
}
