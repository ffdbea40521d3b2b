/*
 * Typed frames without pixel arithmetic (ferry/msg.h): camera infos, compressed images and IMU
 * samples loaned, filled, published and viewed field by field in one process; every invalid
 * argument refused with nothing loaned; hostile samples (each field of a valid one corrupted in
 * turn, sizes changed) refused by the views with FERRY_EPROTO and the view untouched.
 */
#include "testutil.h"

#include <ferry/msg.h>

#include <stdlib.h>
#include <string.h>

typedef struct endpoints {
    ferry_node *node;
    ferry_publisher *pub;
    ferry_subscriber *sub;
} endpoints;

static endpoints open_endpoints(const char *topic, const char *type, uint64_t hash)
{
    endpoints e;
    e.node = tu_node("msg_sensor");
    TU_OK(ferry_publisher_create(&e.pub, e.node, topic, type, hash, NULL));
    TU_OK(ferry_subscriber_create(&e.sub, e.node, topic, type, hash, NULL));
    tu_connect_local(e.pub, 1, e.sub, 1);
    return e;
}

static void close_endpoints(endpoints *e)
{
    ferry_publisher_stats st;
    TU_OK(ferry_publisher_stats_get(e->pub, &st));
    TU_EQ_U64(st.chunks_loaned, 0);
    TU_OK(ferry_subscriber_destroy(e->sub));
    TU_OK(ferry_publisher_destroy(e->pub));
    TU_OK(ferry_node_destroy(e->node));
}

/* A heap copy of a sample, at least size bytes, for corruption. */
static unsigned char *copy_of(const ferry_sample *s, size_t size)
{
    size_t n = size > s->size ? size : s->size;
    unsigned char *buf = aligned_alloc(64, (n + 63) / 64 * 64);
    TU_CHECK(buf != NULL);
    memset(buf, 0, (n + 63) / 64 * 64);
    memcpy(buf, s->data, s->size);
    return buf;
}

/* A 255-byte frame id: the longest there is. */
static void long_frame_id(char *out)
{
    memset(out, 'f', FERRY_MSG_FRAME_ID_MAX);
    out[FERRY_MSG_FRAME_ID_MAX] = '\0';
}

static void test_constants(void)
{
    TU_EQ_U64(FERRY_CAMERA_INFO_TYPE_HASH, ferry_hash(FERRY_CAMERA_INFO_TYPE_NAME));
    TU_EQ_U64(FERRY_COMPRESSED_IMAGE_TYPE_HASH, ferry_hash(FERRY_COMPRESSED_IMAGE_TYPE_NAME));
    TU_EQ_U64(FERRY_IMU_TYPE_HASH, ferry_hash(FERRY_IMU_TYPE_NAME));
    TU_EQ_U64(FERRY_POSE_STAMPED_TYPE_HASH, ferry_hash(FERRY_POSE_STAMPED_TYPE_NAME));
    TU_EQ_U64(sizeof(ferry_pose_stamped_header), 328);
    TU_EQ_U64(sizeof(ferry_camera_info_header), 744);
    TU_EQ_U64(sizeof(ferry_compressed_image_header), 352);
    TU_EQ_U64(sizeof(ferry_imu_header), 568);
    TU_EQ_U64(sizeof(ferry_quaternion), 32);
    TU_EQ_U64(sizeof(ferry_vector3), 24);
}

/* --- camera infos ------------------------------------------------------------------------- */

static void fill_camera_info(ferry_camera_info_header *h)
{
    h->stamp.sec = 1700000001;
    h->stamp.nanosec = 999999999;
    long_frame_id(h->frame_id);
    h->height = 1080;
    h->width = 1920;
    strcpy(h->distortion_model, "rational_polynomial");
    h->d_count = 8;
    for (int i = 0; i < 8; i++)
        h->d[i] = -0.25 + 0.01 * i;
    for (int i = 0; i < 9; i++) {
        h->k[i] = 100.0 + i;
        h->r[i] = i % 4 == 0 ? 1.0 : 0.0;
    }
    for (int i = 0; i < 12; i++)
        h->p[i] = 200.5 + i;
    h->binning_x = 2;
    h->binning_y = 4;
    h->roi.x_offset = 10;
    h->roi.y_offset = 20;
    h->roi.height = 480;
    h->roi.width = 640;
    h->roi.do_rectify = 1;
}

typedef void (*ci_corruption)(ferry_camera_info_header *h, size_t *size);
static void cic_magic(ferry_camera_info_header *h, size_t *s)
{
    (void)s;
    h->magic = FERRY_IMU_MAGIC;
}
static void cic_version(ferry_camera_info_header *h, size_t *s)
{
    (void)s;
    h->version = 1;
}
static void cic_header_size(ferry_camera_info_header *h, size_t *s)
{
    (void)s;
    h->header_size -= 8;
}
static void cic_size_plus(ferry_camera_info_header *h, size_t *s)
{
    (void)h;
    *s += 64;
}
static void cic_size_minus(ferry_camera_info_header *h, size_t *s)
{
    (void)h;
    *s -= 1;
}
static void cic_size_zero(ferry_camera_info_header *h, size_t *s)
{
    (void)h;
    *s = 0;
}
static void cic_frame(ferry_camera_info_header *h, size_t *s)
{
    (void)s;
    memset(h->frame_id, 'x', sizeof h->frame_id);
}
static void cic_model(ferry_camera_info_header *h, size_t *s)
{
    (void)s;
    memset(h->distortion_model, 'm', sizeof h->distortion_model);
}
static void cic_d_count(ferry_camera_info_header *h, size_t *s)
{
    (void)s;
    h->d_count = FERRY_CAMERA_INFO_D_MAX + 1;
}
static void cic_d_count_huge(ferry_camera_info_header *h, size_t *s)
{
    (void)s;
    h->d_count = UINT32_MAX;
}
static void cic_d_tail(ferry_camera_info_header *h, size_t *s)
{
    (void)s;
    h->d[FERRY_CAMERA_INFO_D_MAX - 1] = 1.0;
}
static void cic_rectify(ferry_camera_info_header *h, size_t *s)
{
    (void)s;
    h->roi.do_rectify = 2;
}
static void cic_reserved(ferry_camera_info_header *h, size_t *s)
{
    (void)s;
    h->roi.reserved_[1] = 1;
}

static void test_camera_info(void)
{
    endpoints e = open_endpoints("/camera/camera_info", FERRY_CAMERA_INFO_TYPE_NAME,
                                 FERRY_CAMERA_INFO_TYPE_HASH);
    ferry_camera_info ci;
    TU_ERR(ferry_camera_info_loan(NULL, &ci), FERRY_EINVAL);
    TU_ERR(ferry_camera_info_loan(e.pub, NULL), FERRY_EINVAL);
    TU_OK(ferry_camera_info_loan(e.pub, &ci));
    TU_EQ_PTR(ci.payload, ci.header);
    TU_EQ_U64(ci.payload_size, sizeof(ferry_camera_info_header));
    TU_EQ_U64(ci.header->d_count, 0);
    TU_EQ_STR(ci.header->distortion_model, "");
    /* A broken header is refused at publish and stays on loan. */
    ci.header->d_count = 17;
    TU_ERR(ferry_camera_info_publish(e.pub, &ci), FERRY_EINVAL);
    TU_ERR(ferry_camera_info_publish(NULL, &ci), FERRY_EINVAL);
    TU_ERR(ferry_camera_info_publish(e.pub, NULL), FERRY_EINVAL);
    fill_camera_info(ci.header);
    ferry_camera_info_header sent = *ci.header;
    TU_OK(ferry_camera_info_publish(e.pub, &ci));
    TU_CHECK(ci.payload == NULL && ci.header == NULL);
    TU_ERR(ferry_camera_info_publish(e.pub, &ci), FERRY_EINVAL);
    TU_ERR(ferry_camera_info_loan_release(e.pub, &ci), FERRY_EINVAL);

    ferry_sample s;
    TU_TAKE(e.sub, &s);
    ferry_camera_info_view v;
    TU_ERR(ferry_camera_info_view_get(NULL, &v), FERRY_EINVAL);
    TU_ERR(ferry_camera_info_view_get(&s, NULL), FERRY_EINVAL);
    TU_OK(ferry_camera_info_view_get(&s, &v));
    TU_CHECK(memcmp(&v.header, &sent, sizeof sent) == 0);
    TU_EQ_U64(strlen(v.header.frame_id), FERRY_MSG_FRAME_ID_MAX);
    TU_EQ_STR(v.header.distortion_model, "rational_polynomial");
    TU_CHECK(v.header.d[7] == -0.25 + 0.07 && v.header.p[11] == 211.5);
    TU_EQ_U64(v.header.roi.do_rectify, 1);

    static const ci_corruption list[] = {
        cic_magic,     cic_version, cic_header_size, cic_size_plus, cic_size_minus,
        cic_size_zero, cic_frame,   cic_model,       cic_d_count,   cic_d_count_huge,
        cic_d_tail,    cic_rectify, cic_reserved,
    };
    for (size_t i = 0; i < sizeof list / sizeof list[0]; i++) {
        unsigned char *buf = copy_of(&s, s.size + 64);
        ferry_sample fake = s;
        fake.data = buf;
        size_t size = s.size;
        list[i]((ferry_camera_info_header *)(void *)buf, &size);
        fake.size = size;
        memset(&v, 0x5a, sizeof v);
        ferry_err err = ferry_camera_info_view_get(&fake, &v);
        TU_CHECK_MSG(err == FERRY_EPROTO, "camera info corruption %zu: got %s", i,
                     ferry_errname(err));
        const unsigned char *p = (const unsigned char *)&v;
        for (size_t k = 0; k < sizeof v; k++)
            TU_CHECK_MSG(p[k] == 0x5a, "camera info corruption %zu: view written at %zu", i, k);
        free(buf);
    }
    /* Not an IMU sample, nor a compressed image. */
    ferry_imu_view iv;
    ferry_compressed_image_view cv;
    TU_ERR(ferry_imu_view_get(&s, &iv), FERRY_EPROTO);
    TU_ERR(ferry_compressed_image_view_get(&s, &cv), FERRY_EPROTO);
    TU_OK(ferry_release(e.sub, &s));

    TU_OK(ferry_camera_info_loan(e.pub, &ci));
    TU_ERR(ferry_camera_info_loan_release(NULL, &ci), FERRY_EINVAL);
    TU_OK(ferry_camera_info_loan_release(e.pub, &ci));
    TU_CHECK(ci.payload == NULL);
    close_endpoints(&e);
}

/* --- compressed images -------------------------------------------------------------------- */

typedef void (*cmp_corruption)(ferry_compressed_image_header *h, size_t *size);
static void cmc_magic(ferry_compressed_image_header *h, size_t *s)
{
    (void)s;
    h->magic = FERRY_IMAGE_MAGIC;
}
static void cmc_version(ferry_compressed_image_header *h, size_t *s)
{
    (void)s;
    h->version = 3;
}
static void cmc_header_size(ferry_compressed_image_header *h, size_t *s)
{
    (void)s;
    h->header_size = 144;
}
static void cmc_frame(ferry_compressed_image_header *h, size_t *s)
{
    (void)s;
    memset(h->frame_id, 'x', sizeof h->frame_id);
}
static void cmc_format(ferry_compressed_image_header *h, size_t *s)
{
    (void)s;
    memset(h->format, 'j', sizeof h->format);
}
static void cmc_size_plus(ferry_compressed_image_header *h, size_t *s)
{
    (void)s;
    h->data_size += 1;
}
static void cmc_size_minus(ferry_compressed_image_header *h, size_t *s)
{
    (void)s;
    h->data_size -= 1;
}
static void cmc_size_max(ferry_compressed_image_header *h, size_t *s)
{
    (void)s;
    h->data_size = UINT64_MAX;
}
static void cmc_trailing(ferry_compressed_image_header *h, size_t *s)
{
    (void)h;
    *s += 1;
}
static void cmc_truncated(ferry_compressed_image_header *h, size_t *s)
{
    (void)h;
    *s -= 1;
}
static void cmc_header_only(ferry_compressed_image_header *h, size_t *s)
{
    (void)h;
    *s = sizeof *h - 1;
}
static void cmc_offset_in_header(ferry_compressed_image_header *h, size_t *s)
{
    (void)s;
    h->data_offset = 320;
    h->data_size += 64;
}
static void cmc_offset_unaligned(ferry_compressed_image_header *h, size_t *s)
{
    (void)s;
    h->data_offset += 1;
    h->data_size -= 1;
}
static void cmc_offset_max(ferry_compressed_image_header *h, size_t *s)
{
    (void)s;
    h->data_offset = UINT64_MAX - 63;
}

static void test_compressed_image(void)
{
    endpoints e = open_endpoints("/camera/image_raw/compressed", FERRY_COMPRESSED_IMAGE_TYPE_NAME,
                                 FERRY_COMPRESSED_IMAGE_TYPE_HASH);
    ferry_compressed_image ci;
    char longfmt[FERRY_COMPRESSED_FORMAT_MAX + 2];
    memset(longfmt, 'f', sizeof longfmt - 1);
    longfmt[sizeof longfmt - 1] = '\0';
    TU_ERR(ferry_compressed_image_loan(NULL, "jpeg", 10, &ci), FERRY_EINVAL);
    TU_ERR(ferry_compressed_image_loan(e.pub, NULL, 10, &ci), FERRY_EINVAL);
    TU_ERR(ferry_compressed_image_loan(e.pub, "jpeg", 10, NULL), FERRY_EINVAL);
    TU_ERR(ferry_compressed_image_loan(e.pub, longfmt, 10, &ci), FERRY_EINVAL);
    TU_ERR(ferry_compressed_image_loan(e.pub, "jpeg", SIZE_MAX, &ci), FERRY_EINVAL);
    TU_ERR(ferry_compressed_image_loan(e.pub, "jpeg", (size_t)1 << 40, &ci), FERRY_ETOOBIG);
    TU_CHECK(ci.payload == NULL);

    /* A loan of 100000 bytes of which 12345 are used. */
    TU_OK(ferry_compressed_image_loan(e.pub, "rgb8; jpeg compressed bgr8", 100000, &ci));
    TU_EQ_U64((uintptr_t)ci.data % 64, 0);
    TU_EQ_U64(ci.capacity, 100000);
    TU_EQ_U64(ci.header->data_size, 100000);
    tu_fill(ci.data, 12345, 5);
    ci.header->stamp.sec = 7;
    ci.header->stamp.nanosec = 8;
    strcpy(ci.header->frame_id, "camera_optical");
    ci.header->data_size = 100001;
    TU_ERR(ferry_compressed_image_publish(e.pub, &ci), FERRY_EINVAL);
    ci.header->data_size = 12345;
    TU_OK(ferry_compressed_image_publish(e.pub, &ci));
    TU_CHECK(ci.payload == NULL);
    ferry_sample s;
    TU_TAKE(e.sub, &s);
    TU_EQ_U64(s.size, 384 + 12345);
    ferry_compressed_image_view v;
    TU_ERR(ferry_compressed_image_view_get(NULL, &v), FERRY_EINVAL);
    TU_OK(ferry_compressed_image_view_get(&s, &v));
    TU_EQ_STR(v.header.format, "rgb8; jpeg compressed bgr8");
    TU_EQ_STR(v.header.frame_id, "camera_optical");
    TU_CMP_I64(v.header.stamp.sec, ==, 7);
    TU_EQ_U64(v.header.stamp.nanosec, 8);
    TU_EQ_U64(v.data_size, 12345);
    TU_EQ_PTR(v.data, (const unsigned char *)s.data + 384);
    TU_EQ_U64(tu_verify(v.data, v.data_size, 5), SIZE_MAX);

    static const cmp_corruption list[] = {
        cmc_magic,       cmc_version,          cmc_header_size,      cmc_frame,      cmc_format,
        cmc_size_plus,   cmc_size_minus,       cmc_size_max,         cmc_trailing,   cmc_truncated,
        cmc_header_only, cmc_offset_in_header, cmc_offset_unaligned, cmc_offset_max,
    };
    for (size_t i = 0; i < sizeof list / sizeof list[0]; i++) {
        unsigned char *buf = copy_of(&s, s.size + 64);
        ferry_sample fake = s;
        fake.data = buf;
        size_t size = s.size;
        list[i]((ferry_compressed_image_header *)(void *)buf, &size);
        fake.size = size;
        memset(&v, 0x5a, sizeof v);
        ferry_err err = ferry_compressed_image_view_get(&fake, &v);
        TU_CHECK_MSG(err == FERRY_EPROTO, "compressed corruption %zu: got %s", i,
                     ferry_errname(err));
        const unsigned char *p = (const unsigned char *)&v;
        for (size_t k = 0; k < sizeof v; k++)
            TU_CHECK_MSG(p[k] == 0x5a, "compressed corruption %zu: view written at %zu", i, k);
        free(buf);
    }
    TU_OK(ferry_release(e.sub, &s));

    /* No data at all, and an empty format: both allowed. */
    TU_OK(ferry_compressed_image_loan(e.pub, "", 0, &ci));
    TU_OK(ferry_compressed_image_publish(e.pub, &ci));
    TU_TAKE(e.sub, &s);
    TU_EQ_U64(s.size, 384);
    TU_OK(ferry_compressed_image_view_get(&s, &v));
    TU_EQ_U64(v.data_size, 0);
    TU_EQ_STR(v.header.format, "");
    TU_OK(ferry_release(e.sub, &s));

    TU_OK(ferry_compressed_image_loan(e.pub, "png", 64, &ci));
    TU_OK(ferry_compressed_image_loan_release(e.pub, &ci));
    TU_ERR(ferry_compressed_image_loan_release(e.pub, &ci), FERRY_EINVAL);
    close_endpoints(&e);
}

/* --- IMU samples -------------------------------------------------------------------------- */

typedef void (*imu_corruption)(ferry_imu_header *h, size_t *size);
static void imc_magic(ferry_imu_header *h, size_t *s)
{
    (void)s;
    h->magic = FERRY_CAMERA_INFO_MAGIC;
}
static void imc_version(ferry_imu_header *h, size_t *s)
{
    (void)s;
    h->version = 0;
}
static void imc_header_size(ferry_imu_header *h, size_t *s)
{
    (void)s;
    h->header_size = 0xffff;
}
static void imc_frame(ferry_imu_header *h, size_t *s)
{
    (void)s;
    memset(h->frame_id, 'x', sizeof h->frame_id);
}
static void imc_size_plus(ferry_imu_header *h, size_t *s)
{
    (void)h;
    *s += 8;
}
static void imc_size_minus(ferry_imu_header *h, size_t *s)
{
    (void)h;
    *s -= 8;
}
static void imc_size_zero(ferry_imu_header *h, size_t *s)
{
    (void)h;
    *s = 0;
}

static void test_imu(void)
{
    endpoints e = open_endpoints("/imu/data", FERRY_IMU_TYPE_NAME, FERRY_IMU_TYPE_HASH);
    ferry_imu imu;
    TU_ERR(ferry_imu_loan(NULL, &imu), FERRY_EINVAL);
    TU_ERR(ferry_imu_loan(e.pub, NULL), FERRY_EINVAL);
    TU_OK(ferry_imu_loan(e.pub, &imu));
    TU_CHECK(imu.header->orientation.w == 1.0 && imu.header->orientation.x == 0.0);
    TU_EQ_U64(imu.payload_size, sizeof(ferry_imu_header));
    imu.header->stamp.sec = -1;
    imu.header->stamp.nanosec = 5;
    strcpy(imu.header->frame_id, "imu_link");
    imu.header->orientation = (ferry_quaternion){0.5, -0.5, 0.5, -0.5};
    imu.header->angular_velocity = (ferry_vector3){0.01, 0.02, -0.03};
    imu.header->linear_acceleration = (ferry_vector3){0.1, 0.2, 9.81};
    for (int i = 0; i < 9; i++) {
        imu.header->orientation_covariance[i] = i == 0 ? -1.0 : 0.0;
        imu.header->angular_velocity_covariance[i] = 1e-4 * i;
        imu.header->linear_acceleration_covariance[i] = 1e-2 * i;
    }
    ferry_imu_header sent = *imu.header;
    memset(imu.header->frame_id, 'x', sizeof imu.header->frame_id);
    TU_ERR(ferry_imu_publish(e.pub, &imu), FERRY_EINVAL);
    memcpy(imu.header->frame_id, sent.frame_id, sizeof sent.frame_id);
    TU_ERR(ferry_imu_publish(NULL, &imu), FERRY_EINVAL);
    TU_OK(ferry_imu_publish(e.pub, &imu));
    TU_CHECK(imu.payload == NULL);

    ferry_sample s;
    TU_TAKE(e.sub, &s);
    ferry_imu_view v;
    TU_ERR(ferry_imu_view_get(&s, NULL), FERRY_EINVAL);
    TU_OK(ferry_imu_view_get(&s, &v));
    TU_CHECK(memcmp(&v.header, &sent, sizeof sent) == 0);
    TU_CHECK(v.header.linear_acceleration.z == 9.81 && v.header.orientation.w == -0.5);
    static const imu_corruption list[] = {
        imc_magic,     imc_version,    imc_header_size, imc_frame,
        imc_size_plus, imc_size_minus, imc_size_zero,
    };
    for (size_t i = 0; i < sizeof list / sizeof list[0]; i++) {
        unsigned char *buf = copy_of(&s, s.size + 64);
        ferry_sample fake = s;
        fake.data = buf;
        size_t size = s.size;
        list[i]((ferry_imu_header *)(void *)buf, &size);
        fake.size = size;
        memset(&v, 0x5a, sizeof v);
        ferry_err err = ferry_imu_view_get(&fake, &v);
        TU_CHECK_MSG(err == FERRY_EPROTO, "imu corruption %zu: got %s", i, ferry_errname(err));
        const unsigned char *p = (const unsigned char *)&v;
        for (size_t k = 0; k < sizeof v; k++)
            TU_CHECK_MSG(p[k] == 0x5a, "imu corruption %zu: view written at %zu", i, k);
        free(buf);
    }
    ferry_camera_info_view cv;
    TU_ERR(ferry_camera_info_view_get(&s, &cv), FERRY_EPROTO);
    TU_OK(ferry_release(e.sub, &s));
    TU_OK(ferry_imu_loan(e.pub, &imu));
    TU_OK(ferry_imu_loan_release(e.pub, &imu));
    close_endpoints(&e);
}

/* A pose: loaned with the identity, refused unterminated, viewed as sent; a corrupted copy
 * (magic, version, size, frame_id) refused without the view written. */
static void test_pose_stamped(void)
{
    endpoints e =
        open_endpoints("/pose", FERRY_POSE_STAMPED_TYPE_NAME, FERRY_POSE_STAMPED_TYPE_HASH);
    ferry_pose_stamped p;
    TU_ERR(ferry_pose_stamped_loan(NULL, &p), FERRY_EINVAL);
    TU_ERR(ferry_pose_stamped_loan(e.pub, NULL), FERRY_EINVAL);
    TU_OK(ferry_pose_stamped_loan(e.pub, &p));
    TU_CHECK(p.header->pose.orientation.w == 1.0 && p.header->pose.position.x == 0.0);
    TU_EQ_U64(p.payload_size, sizeof(ferry_pose_stamped_header));
    p.header->stamp.sec = 7;
    p.header->stamp.nanosec = 8;
    strcpy(p.header->frame_id, "map");
    p.header->pose.position = (ferry_vector3){1.5, -2.5, 0.25};
    p.header->pose.orientation = (ferry_quaternion){0.0, 0.0, 0.6, 0.8};
    ferry_pose_stamped_header sent = *p.header;
    memset(p.header->frame_id, 'x', sizeof p.header->frame_id);
    TU_ERR(ferry_pose_stamped_publish(e.pub, &p), FERRY_EINVAL);
    memcpy(p.header->frame_id, sent.frame_id, sizeof sent.frame_id);
    TU_ERR(ferry_pose_stamped_publish(NULL, &p), FERRY_EINVAL);
    TU_OK(ferry_pose_stamped_publish(e.pub, &p));
    TU_CHECK(p.payload == NULL);

    ferry_sample s;
    TU_TAKE(e.sub, &s);
    ferry_pose_stamped_view v;
    TU_ERR(ferry_pose_stamped_view_get(&s, NULL), FERRY_EINVAL);
    TU_OK(ferry_pose_stamped_view_get(&s, &v));
    TU_CHECK(memcmp(&v.header, &sent, sizeof sent) == 0);
    for (int i = 0; i < 5; i++) {
        unsigned char *buf = copy_of(&s, s.size + 64);
        ferry_sample fake = s;
        fake.data = buf;
        if (i == 0)
            buf[0] ^= 1; /* magic */
        else if (i == 1)
            buf[4] ^= 1; /* version */
        else if (i == 2)
            memset(buf + offsetof(ferry_pose_stamped_header, frame_id), 'x',
                   FERRY_MSG_FRAME_ID_MAX + 1);
        else
            fake.size = i == 3 ? s.size + 8 : s.size - 8;
        memset(&v, 0x5a, sizeof v);
        ferry_err err = ferry_pose_stamped_view_get(&fake, &v);
        TU_CHECK_MSG(err == FERRY_EPROTO, "pose corruption %d: got %s", i, ferry_errname(err));
        const unsigned char *q = (const unsigned char *)&v;
        for (size_t k = 0; k < sizeof v; k++)
            TU_CHECK_MSG(q[k] == 0x5a, "pose corruption %d: view written at %zu", i, k);
        free(buf);
    }
    ferry_imu_view iv;
    TU_ERR(ferry_imu_view_get(&s, &iv), FERRY_EPROTO);
    TU_OK(ferry_release(e.sub, &s));
    TU_OK(ferry_pose_stamped_loan(e.pub, &p));
    TU_OK(ferry_pose_stamped_loan_release(e.pub, &p));
    close_endpoints(&e);
}

int main(void)
{
    TU_RUN(test_constants);
    TU_RUN(test_camera_info);
    TU_RUN(test_compressed_image);
    TU_RUN(test_imu);
    TU_RUN(test_pose_stamped);
    return 0;
}
