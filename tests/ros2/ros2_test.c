/*
 * src/ros2/ros2.h end to end in one process: for every kind, a message loaned, filled and
 * published on ferry, taken, serialised by the CDR writer (the bulk left in the sample), the
 * serialisation parsed back by the CDR reader, republished through ferry_ros2_publish on a second
 * topic and taken there, field by field and byte by byte equal to what was sent. An Image's
 * serialisation is compared with one written here by hand. Then the names and definitions, and
 * the refusals: corrupted samples, device tensors, invalid parsed messages.
 */
#include "testutil.h"

#include "pair.h"

#include "ros2.h"

#include <ferry/msg.h>
#include <ferry/tensor.h>

#include <stdlib.h>
#include <string.h>

typedef struct endpoints {
    ferry_node *node;
    pair a, b; /* a: the original; b: the republished copy */
    ferry_ros2_kind kind;
} endpoints;

static endpoints open_endpoints(ferry_ros2_kind kind)
{
    endpoints e;

    e.kind = kind;
    e.node = tu_node("ros2");
    e.a = open_pair(e.node, "/ros2/a", kind);
    e.b = open_pair(e.node, "/ros2/b", kind);
    return e;
}

static void close_endpoints(endpoints *e)
{
    TU_OK(ferry_subscriber_destroy(e->a.sub));
    TU_OK(ferry_publisher_destroy(e->a.pub));
    TU_OK(ferry_subscriber_destroy(e->b.sub));
    TU_OK(ferry_publisher_destroy(e->b.pub));
    TU_OK(ferry_node_destroy(e->node));
}

/* The pieces of a serialisation in one heap block of exactly its size (reads past it show
 * under ASan). */
static uint8_t *flatten(const ferry_ros2_cdr *c)
{
    uint8_t *buf = malloc(c->size), *at = buf;
    size_t total = 0;
    unsigned i;

    TU_CHECK(buf != NULL);
    TU_CHECK(c->niov >= 1 && c->niov <= 3);
    for (i = 0; i < c->niov; i++) {
        memcpy(at, c->iov[i].iov_base, c->iov[i].iov_len);
        at += c->iov[i].iov_len;
        total += c->iov[i].iov_len;
    }
    TU_EQ_U64(total, c->size);
    return buf;
}

/* Takes the original, serialises it, parses that back and republishes it on b; *out gets the
 * republished sample (held) and the original is released. */
static void round_trip(endpoints *e, const ferry_sample *orig, ferry_sample *out)
{
    ferry_ros2_cdr *cdr = malloc(sizeof *cdr);
    ferry_ros2_msg msg;
    const char *why = NULL;
    uint8_t *flat;

    TU_CHECK(cdr != NULL);
    TU_OK(ferry_ros2_cdr_encode(e->kind, orig, cdr));
    flat = flatten(cdr);
    TU_EQ_U64(flat[0], 0x00);
    TU_EQ_U64(flat[1], 0x01); /* CDR_LE */
    TU_CHECK(ferry_ros2_cdr_parse(e->kind, flat, cdr->size, &msg) == FERRY_ROS2_CDR_OK);
    TU_EQ_U64(msg.kind, e->kind);
    TU_ERR(ferry_ros2_publish(e->b.pub, &msg, &why), FERRY_OK);
    TU_TAKE(e->b.sub, out);
    free(flat);
    free(cdr);
}

static void frame_id_of(char *out, size_t len, char c)
{
    memset(out, c, len);
    out[len] = '\0';
}

/* --- images -------------------------------------------------------------------------------- */

/* The serialisation of the image below, written by hand: 4-byte alignment of the uint32s
 * relative to the byte after the encapsulation header. */
static size_t expected_image_head(uint8_t *b, const char *frame_id)
{
    size_t n = 0, len;
    uint32_t u;
    int32_t sec = 1700000000;

#define PUT(v)                                                                                     \
    do {                                                                                           \
        while ((n - 4) % 4 != 0)                                                                   \
            b[n++] = 0;                                                                            \
        memcpy(b + n, &(v), 4);                                                                    \
        n += 4;                                                                                    \
    } while (0)
    b[n++] = 0;
    b[n++] = 1;
    b[n++] = 0;
    b[n++] = 0;
    PUT(sec);
    u = 42;
    PUT(u);
    len = strlen(frame_id) + 1;
    u = (uint32_t)len;
    PUT(u);
    memcpy(b + n, frame_id, len);
    n += len;
    u = 3; /* height */
    PUT(u);
    u = 5; /* width */
    PUT(u);
    u = 5; /* "bgr8" */
    PUT(u);
    memcpy(b + n, "bgr8", 5);
    n += 5;
    b[n++] = 0; /* is_bigendian */
    u = 16;     /* step */
    PUT(u);
    u = 48; /* data */
    PUT(u);
#undef PUT
    return n;
}

static void test_image(void)
{
    endpoints e = open_endpoints(FERRY_ROS2_IMAGE);
    ferry_ros2_cdr *cdr = malloc(sizeof *cdr);
    uint8_t expected[512];
    ferry_image_view v;
    ferry_sample s, r;
    ferry_image img;
    size_t n, i;

    TU_CHECK(cdr != NULL);
    TU_OK(ferry_image_loan(e.a.pub, 5, 3, "bgr8", 16, &img));
    for (i = 0; i < img.data_size; i++)
        ((uint8_t *)img.data)[i] = (uint8_t)(i * 7 + 1);
    img.header->stamp.sec = 1700000000;
    img.header->stamp.nanosec = 42;
    strcpy(img.header->frame_id, "camera_color_optical_frame");
    TU_OK(ferry_image_publish(e.a.pub, &img));
    TU_TAKE(e.a.sub, &s);

    /* The writer's bytes are the ones written here by hand, the pixels left in the sample. */
    TU_OK(ferry_ros2_cdr_encode(FERRY_ROS2_IMAGE, &s, cdr));
    n = expected_image_head(expected, "camera_color_optical_frame");
    TU_EQ_U64(cdr->niov, 2);
    TU_EQ_U64(cdr->iov[0].iov_len, n);
    TU_CHECK(memcmp(cdr->iov[0].iov_base, expected, n) == 0);
    TU_EQ_U64(cdr->iov[1].iov_len, 48);
    TU_OK(ferry_image_view_get(&s, &v));
    TU_EQ_PTR(cdr->iov[1].iov_base, v.data);
    TU_EQ_U64(cdr->size, n + 48);
    TU_CMP_I64(cdr->stamp_ns, ==, 1700000000LL * 1000000000 + 42);

    round_trip(&e, &s, &r);
    TU_OK(ferry_image_view_get(&r, &v));
    TU_EQ_U64(v.header.width, 5);
    TU_EQ_U64(v.header.height, 3);
    TU_EQ_U64(v.header.step, 16);
    TU_EQ_STR(v.header.encoding, "bgr8");
    TU_EQ_STR(v.header.frame_id, "camera_color_optical_frame");
    TU_EQ_U64(v.header.stamp.sec, 1700000000);
    TU_EQ_U64(v.header.stamp.nanosec, 42);
    for (i = 0; i < 48; i++)
        TU_EQ_U64(((const uint8_t *)v.data)[i], (uint8_t)(i * 7 + 1));
    TU_OK(ferry_release(e.b.sub, &r));

    /* A corrupted sample is refused, not serialised. */
    {
        uint8_t *bad = aligned_alloc(64, (s.size + 63) / 64 * 64);
        ferry_sample bs = s;

        TU_CHECK(bad != NULL);
        memcpy(bad, s.data, s.size);
        ((ferry_image_header *)(void *)bad)->height = 1000;
        bs.data = bad;
        TU_ERR(ferry_ros2_cdr_encode(FERRY_ROS2_IMAGE, &bs, cdr), FERRY_EINVAL);
        TU_ERR(ferry_ros2_cdr_encode(FERRY_ROS2_CLOUD, &s, cdr), FERRY_EINVAL);
        TU_ERR(ferry_ros2_cdr_encode(FERRY_ROS2_NONE, &s, cdr), FERRY_EINVAL);
        free(bad);
    }
    TU_OK(ferry_release(e.a.sub, &s));

    /* Parsed messages that do not add up are refused with the field named, nothing published. */
    {
        ferry_ros2_msg m;
        const char *why = NULL;
        static const uint8_t px[48];

        memset(&m, 0, sizeof m);
        m.kind = FERRY_ROS2_IMAGE;
        m.u.image.header.frame_id = "f";
        m.u.image.encoding = "bgr8";
        m.u.image.width = 5;
        m.u.image.height = 3;
        m.u.image.step = 16;
        m.u.image.data = px;
        m.u.image.data_size = 47;
        TU_ERR(ferry_ros2_publish(e.b.pub, &m, &why), FERRY_EINVAL);
        TU_EQ_STR(why, "data size");
        m.u.image.data_size = 48;
        m.u.image.encoding = "bgr9";
        TU_ERR(ferry_ros2_publish(e.b.pub, &m, &why), FERRY_EINVAL);
        m.u.image.encoding = "bgr8";
        m.u.image.header.nanosec = 1000000000u;
        TU_ERR(ferry_ros2_publish(e.b.pub, &m, &why), FERRY_EINVAL);
        TU_EQ_STR(why, "stamp");
        m.u.image.header.nanosec = 0;
        m.u.image.is_bigendian = 2;
        TU_ERR(ferry_ros2_publish(e.b.pub, &m, &why), FERRY_EINVAL);
        m.kind = FERRY_ROS2_NONE;
        TU_ERR(ferry_ros2_publish(e.b.pub, &m, NULL), FERRY_EINVAL);
        TU_ERR(ferry_ros2_publish(NULL, &m, NULL), FERRY_EINVAL);
    }
    free(cdr);
    close_endpoints(&e);
}

/* --- point clouds -------------------------------------------------------------------------- */

static void test_cloud(void)
{
    endpoints e = open_endpoints(FERRY_ROS2_CLOUD);
    ferry_point_field fields[FERRY_POINTCLOUD_FIELDS_MAX];
    ferry_pointcloud_view v;
    ferry_pointcloud pc;
    ferry_sample s, r;
    uint32_t i;

    /* The most fields there may be, each with the longest name: the largest head. */
    memset(fields, 0, sizeof fields);
    for (i = 0; i < FERRY_POINTCLOUD_FIELDS_MAX; i++) {
        frame_id_of(fields[i].name, FERRY_FIELD_NAME_MAX, 'a');
        fields[i].name[0] = (char)('A' + i % 26);
        fields[i].name[1] = (char)('a' + i / 26);
        fields[i].offset = 4 * i;
        fields[i].datatype = FERRY_POINT_FLOAT32;
        fields[i].count = 1;
    }
    TU_OK(ferry_pointcloud_loan(e.a.pub, 7, 2, fields, FERRY_POINTCLOUD_FIELDS_MAX,
                                4 * FERRY_POINTCLOUD_FIELDS_MAX, &pc));
    for (i = 0; i < pc.data_size; i++)
        ((uint8_t *)pc.data)[i] = (uint8_t)(i ^ 0x5a);
    pc.header->stamp.sec = -3;
    pc.header->stamp.nanosec = 999999999;
    frame_id_of(pc.header->frame_id, FERRY_MSG_FRAME_ID_MAX, 'l');
    pc.header->is_dense = 1;
    TU_OK(ferry_pointcloud_publish(e.a.pub, &pc));
    TU_TAKE(e.a.sub, &s);
    round_trip(&e, &s, &r);
    TU_OK(ferry_pointcloud_view_get(&r, &v));
    TU_EQ_U64(v.header.width, 7);
    TU_EQ_U64(v.header.height, 2);
    TU_EQ_U64(v.header.nfields, FERRY_POINTCLOUD_FIELDS_MAX);
    TU_EQ_U64(v.header.point_step, 4 * FERRY_POINTCLOUD_FIELDS_MAX);
    TU_EQ_U64(v.header.is_dense, 1);
    TU_CMP_I64(v.header.stamp.sec, ==, -3);
    TU_EQ_U64(strlen(v.header.frame_id), FERRY_MSG_FRAME_ID_MAX);
    for (i = 0; i < FERRY_POINTCLOUD_FIELDS_MAX; i++) {
        TU_EQ_STR(v.header.fields[i].name, fields[i].name);
        TU_EQ_U64(v.header.fields[i].offset, 4 * i);
    }
    for (i = 0; i < v.data_size; i++)
        TU_EQ_U64(((const uint8_t *)v.data)[i], (uint8_t)(i ^ 0x5a));
    TU_OK(ferry_release(e.b.sub, &r));
    TU_OK(ferry_release(e.a.sub, &s));
    close_endpoints(&e);
}

/* --- camera infos, compressed images, IMU ---------------------------------------------------- */

static void test_camera_info(void)
{
    endpoints e = open_endpoints(FERRY_ROS2_CAMERA_INFO);
    ferry_camera_info_view v;
    ferry_camera_info ci;
    ferry_sample s, r;
    int i;

    TU_OK(ferry_camera_info_loan(e.a.pub, &ci));
    ci.header->stamp.sec = 17;
    frame_id_of(ci.header->frame_id, FERRY_MSG_FRAME_ID_MAX, 'c');
    ci.header->width = 1280;
    ci.header->height = 720;
    strcpy(ci.header->distortion_model, "plumb_bob");
    ci.header->d_count = FERRY_CAMERA_INFO_D_MAX;
    for (i = 0; i < (int)FERRY_CAMERA_INFO_D_MAX; i++)
        ci.header->d[i] = 0.5 * i - 1;
    for (i = 0; i < 9; i++)
        ci.header->k[i] = 1e-300 * i;
    for (i = 0; i < 12; i++)
        ci.header->p[i] = 100.25 + i;
    ci.header->binning_y = 2;
    ci.header->roi.width = 64;
    ci.header->roi.do_rectify = 1;
    TU_OK(ferry_camera_info_publish(e.a.pub, &ci));
    TU_TAKE(e.a.sub, &s);
    round_trip(&e, &s, &r);
    TU_OK(ferry_camera_info_view_get(&r, &v));
    TU_EQ_U64(v.header.width, 1280);
    TU_EQ_STR(v.header.distortion_model, "plumb_bob");
    TU_EQ_U64(v.header.d_count, FERRY_CAMERA_INFO_D_MAX);
    TU_CHECK(v.header.d[FERRY_CAMERA_INFO_D_MAX - 1] == 0.5 * (FERRY_CAMERA_INFO_D_MAX - 1) - 1);
    TU_CHECK(v.header.k[8] == 1e-300 * 8 && v.header.p[11] == 111.25);
    TU_EQ_U64(v.header.binning_y, 2);
    TU_EQ_U64(v.header.roi.width, 64);
    TU_EQ_U64(v.header.roi.do_rectify, 1);
    TU_OK(ferry_release(e.b.sub, &r));
    TU_OK(ferry_release(e.a.sub, &s));
    close_endpoints(&e);
}

static void test_compressed(void)
{
    endpoints e = open_endpoints(FERRY_ROS2_COMPRESSED);
    ferry_compressed_image_view v;
    ferry_compressed_image ci;
    ferry_sample s, r;
    size_t i;

    TU_OK(ferry_compressed_image_loan(e.a.pub, "jpeg", 1001, &ci));
    for (i = 0; i < 1001; i++)
        ((uint8_t *)ci.data)[i] = (uint8_t)(i * 13);
    ci.header->stamp.nanosec = 5;
    strcpy(ci.header->frame_id, "cam");
    TU_OK(ferry_compressed_image_publish(e.a.pub, &ci));
    TU_TAKE(e.a.sub, &s);
    round_trip(&e, &s, &r);
    TU_OK(ferry_compressed_image_view_get(&r, &v));
    TU_EQ_STR(v.header.format, "jpeg");
    TU_EQ_STR(v.header.frame_id, "cam");
    TU_EQ_U64(v.data_size, 1001);
    for (i = 0; i < 1001; i++)
        TU_EQ_U64(((const uint8_t *)v.data)[i], (uint8_t)(i * 13));
    TU_OK(ferry_release(e.b.sub, &r));
    TU_OK(ferry_release(e.a.sub, &s));
    close_endpoints(&e);
}

static void test_imu(void)
{
    endpoints e = open_endpoints(FERRY_ROS2_IMU);
    ferry_imu_view v;
    ferry_imu imu;
    ferry_sample s, r;

    TU_OK(ferry_imu_loan(e.a.pub, &imu));
    strcpy(imu.header->frame_id, "imu_link");
    imu.header->orientation.w = 1.0;
    imu.header->orientation.z = -0.125;
    imu.header->angular_velocity.y = 3.5;
    imu.header->linear_acceleration.z = 9.81;
    imu.header->linear_acceleration_covariance[8] = 0.01;
    TU_OK(ferry_imu_publish(e.a.pub, &imu));
    TU_TAKE(e.a.sub, &s);
    round_trip(&e, &s, &r);
    TU_OK(ferry_imu_view_get(&r, &v));
    TU_EQ_STR(v.header.frame_id, "imu_link");
    TU_CHECK(v.header.orientation.w == 1.0 && v.header.orientation.z == -0.125);
    TU_CHECK(v.header.angular_velocity.y == 3.5 && v.header.linear_acceleration.z == 9.81);
    TU_CHECK(v.header.linear_acceleration_covariance[8] == 0.01);
    TU_OK(ferry_release(e.b.sub, &r));
    TU_OK(ferry_release(e.a.sub, &s));
    close_endpoints(&e);
}

/* --- poses (the kind added last: one entry of src/ros2/msg_table.c) --------------------------- */

static void test_pose_stamped(void)
{
    endpoints e = open_endpoints(FERRY_ROS2_POSE_STAMPED);
    const double values[7] = {1.5, -2.5, 0.25, 0.0, 0.0, 0.6, 0.8};
    ferry_ros2_cdr *cdr = malloc(sizeof *cdr);
    ferry_pose_stamped_view v;
    ferry_pose_stamped p;
    ferry_ros2_msg msg;
    const char *why = NULL;
    ferry_sample s, r;
    uint8_t expect[128];
    size_t n = 0, i;
    int32_t sec = 1700000000;
    uint32_t nanosec = 5, len = 4;

    TU_CHECK(cdr != NULL);
    TU_OK(ferry_pose_stamped_loan(e.a.pub, &p));
    p.header->stamp.sec = sec;
    p.header->stamp.nanosec = nanosec;
    strcpy(p.header->frame_id, "map");
    p.header->pose.position = (ferry_vector3){values[0], values[1], values[2]};
    p.header->pose.orientation = (ferry_quaternion){values[3], values[4], values[5], values[6]};
    TU_OK(ferry_pose_stamped_publish(e.a.pub, &p));
    TU_TAKE(e.a.sub, &s);

    /* Written by hand: CDR_LE, the stamp, "map" with its NUL, padding to 8 (relative to the byte
     * after the encapsulation header), seven doubles. */
    memcpy(expect, "\x00\x01\x00\x00", 4);
    n = 4;
    memcpy(expect + n, &sec, 4);
    memcpy(expect + n + 4, &nanosec, 4);
    memcpy(expect + n + 8, &len, 4);
    memcpy(expect + n + 12, "map", 4);
    n += 16;
    while ((n - 4) % 8 != 0)
        expect[n++] = 0;
    for (i = 0; i < 7; i++, n += 8)
        memcpy(expect + n, &values[i], 8);
    TU_OK(ferry_ros2_cdr_encode(FERRY_ROS2_POSE_STAMPED, &s, cdr));
    TU_EQ_U64(cdr->niov, 1);
    TU_EQ_U64(cdr->size, n);
    TU_CHECK(memcmp(cdr->iov[0].iov_base, expect, n) == 0);
    TU_EQ_U64(cdr->stamp_ns, (uint64_t)sec * 1000000000u + nanosec);

    round_trip(&e, &s, &r);
    TU_OK(ferry_pose_stamped_view_get(&r, &v));
    TU_EQ_STR(v.header.frame_id, "map");
    TU_CHECK(v.header.stamp.sec == sec && v.header.stamp.nanosec == nanosec);
    TU_CHECK(v.header.pose.position.y == -2.5 && v.header.pose.orientation.w == 0.8);
    TU_OK(ferry_release(e.b.sub, &r));

    /* Refused as a view refuses: a stamp out of range, a truncated message. */
    TU_CHECK(ferry_ros2_cdr_parse(FERRY_ROS2_POSE_STAMPED, expect, n, &msg) == FERRY_ROS2_CDR_OK);
    TU_CHECK(msg.u.pose_stamped.pose.orientation.z == 0.6);
    msg.u.pose_stamped.header.nanosec = 1000000000u;
    TU_ERR(ferry_ros2_publish(e.b.pub, &msg, &why), FERRY_EINVAL);
    TU_EQ_STR(why, "stamp");
    TU_CHECK(ferry_ros2_cdr_parse(FERRY_ROS2_POSE_STAMPED, expect, n - 1, &msg) ==
             FERRY_ROS2_CDR_MALFORMED);
    TU_OK(ferry_release(e.a.sub, &s));
    free(cdr);
    close_endpoints(&e);
}

/* --- tensors --------------------------------------------------------------------------------- */

static void test_tensor(void)
{
    endpoints e = open_endpoints(FERRY_ROS2_TENSOR);
    const int64_t shape[3] = {2, 3, 4};
    const int64_t strided[2] = {1, 2};
    ferry_ros2_cdr *cdr = malloc(sizeof *cdr);
    ferry_tensor_view v;
    ferry_tensor t;
    ferry_sample s, r;
    size_t i;

    TU_CHECK(cdr != NULL);
    TU_OK(ferry_tensor_loan(e.a.pub, FERRY_DTYPE_FLOAT32, 3, shape, NULL, &t));
    for (i = 0; i < 24; i++)
        ((float *)t.data)[i] = (float)i * 0.5f;
    t.header->stamp.sec = 9;
    strcpy(t.header->frame_id, "model");
    TU_OK(ferry_tensor_publish(e.a.pub, &t));
    TU_TAKE(e.a.sub, &s);
    round_trip(&e, &s, &r);
    TU_OK(ferry_tensor_view_get(&r, &v));
    TU_EQ_U64(v.dtype, FERRY_DTYPE_FLOAT32);
    TU_EQ_U64(v.header.ndim, 3);
    TU_CMP_I64(v.header.shape[2], ==, 4);
    TU_EQ_STR(v.header.frame_id, "model");
    for (i = 0; i < 24; i++)
        TU_CHECK(((const float *)v.data)[i] == (float)i * 0.5f);
    TU_OK(ferry_release(e.b.sub, &r));
    TU_OK(ferry_release(e.a.sub, &s));

    /* A strided tensor is not serialised as if it were dense. */
    {
        const int64_t two[2] = {3, 2};

        TU_OK(ferry_tensor_loan(e.a.pub, FERRY_DTYPE_UINT8, 2, two, strided, &t));
        TU_OK(ferry_tensor_publish(e.a.pub, &t));
        TU_TAKE(e.a.sub, &s);
        TU_ERR(ferry_ros2_cdr_encode(FERRY_ROS2_TENSOR, &s, cdr), FERRY_ENOTSUP);
        TU_OK(ferry_release(e.a.sub, &s));
    }
    /* A tensor whose elements are on a device: a valid header, nothing here to write. */
    {
        ferry_tensor_header *h = aligned_alloc(64, 512);
        ferry_sample ds;

        TU_CHECK(h != NULL);
        memset(h, 0, 512);
        TU_OK(ferry_tensor_header_init(h, FERRY_DTYPE_FLOAT32, 3, shape, NULL));
        h->device.device_type = 2; /* kDLCUDA */
        memset(&ds, 0, sizeof ds);
        ds.data = h;
        ds.size = 512;
        TU_ERR(ferry_ros2_cdr_encode(FERRY_ROS2_TENSOR, &ds, cdr), FERRY_ENOTSUP);
        free(h);
    }
    free(cdr);
    close_endpoints(&e);
}

/* --- names and definitions ------------------------------------------------------------------- */

static void test_names(void)
{
    int k;

    for (k = FERRY_ROS2_IMAGE; k < FERRY_ROS2_KIND_COUNT_; k++) {
        const char *name = ferry_ros2_name((ferry_ros2_kind)k);
        const char *def = ferry_ros2_definition((ferry_ros2_kind)k);
        char short_name[128];
        const char *msg;

        TU_CHECK(name != NULL && def != NULL);
        TU_EQ_U64(ferry_ros2_kind_of_name(name), (uint64_t)k);
        msg = strstr(name, "/msg/");
        TU_CHECK(msg != NULL);
        snprintf(short_name, sizeof short_name, "%.*s/%s", (int)(msg - name), name, msg + 5);
        TU_EQ_U64(ferry_ros2_kind_of_name(short_name), (uint64_t)k);
        TU_EQ_U64(ferry_ros2_kind_of_ferry(ferry_ros2_ferry_type((ferry_ros2_kind)k),
                                           ferry_ros2_ferry_hash((ferry_ros2_kind)k)),
                  (uint64_t)k);
        TU_EQ_U64(ferry_ros2_ferry_hash((ferry_ros2_kind)k),
                  ferry_hash(ferry_ros2_ferry_type((ferry_ros2_kind)k)));
        /* rosbag2's layout: the fields first, then every used type after its separator. */
        TU_CHECK(strncmp(def, "std_msgs/Header header\n", 23) == 0);
        TU_CHECK(strstr(def, "\n================================================================"
                             "================\nMSG: std_msgs/Header\n") != NULL);
        TU_CHECK(strstr(def, "MSG: builtin_interfaces/Time\nint32 sec\nuint32 nanosec\n") != NULL);
        TU_EQ_U64(def[strlen(def) - 1], '\n');
    }
    TU_CHECK(strstr(ferry_ros2_definition(FERRY_ROS2_CLOUD), "MSG: sensor_msgs/PointField\n"));
    TU_CHECK(strstr(ferry_ros2_definition(FERRY_ROS2_IMU), "MSG: geometry_msgs/Vector3\n"));
    TU_EQ_STR(ferry_ros2_name(FERRY_ROS2_IMAGE), "sensor_msgs/msg/Image");
    TU_EQ_U64(ferry_ros2_kind_of_name("sensor_msgs/msg/Imagex"), FERRY_ROS2_NONE);
    TU_EQ_U64(ferry_ros2_kind_of_name("sensor_msgs/Imag"), FERRY_ROS2_NONE);
    TU_EQ_U64(ferry_ros2_kind_of_name("Image"), FERRY_ROS2_NONE);
    TU_EQ_U64(ferry_ros2_kind_of_name(NULL), FERRY_ROS2_NONE);
    TU_EQ_U64(ferry_ros2_kind_of_ferry(FERRY_IMAGE_TYPE_NAME, 1), FERRY_ROS2_NONE);
    TU_EQ_U64(ferry_ros2_kind_of_ferry("ferry/synthetic_frame", 0), FERRY_ROS2_NONE);
    TU_CHECK(ferry_ros2_name(FERRY_ROS2_NONE) == NULL);
    TU_CHECK(ferry_ros2_definition(FERRY_ROS2_KIND_COUNT_) == NULL);
    TU_CHECK(ferry_ros2_ferry_type(FERRY_ROS2_NONE) == NULL);
}

int main(void)
{
    TU_RUN(test_names);
    TU_RUN(test_image);
    TU_RUN(test_cloud);
    TU_RUN(test_camera_info);
    TU_RUN(test_compressed);
    TU_RUN(test_imu);
    TU_RUN(test_tensor);
    TU_RUN(test_pose_stamped);
    return 0;
}
