/*
 * The CDR reader of src/ros2/ros2.h: Image, PointCloud2, CameraInfo, CompressedImage, Imu and
 * Tensor serialisations written here by hand in both byte orders, with the alignment rules of plain
 * CDR, are read back field by field; then every truncation of them, corrupted lengths and counts,
 * strings without their NUL, other encapsulations, and many randomly corrupted copies. Each input
 * lies in a heap block of exactly its size, so that a read past it shows under ASan. A result that
 * is accepted must point inside its input.
 */
#include "ros2.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUF_MAX 4096

/* The reader of one kind, as the tests below call it. */
#define PARSER(name, kind, member)                                                                 \
    static ferry_ros2_cdr_result cdr_##name(const void *p, size_t n, ferry_ros2_##name##_msg *out) \
    {                                                                                              \
        ferry_ros2_msg msg;                                                                        \
        ferry_ros2_cdr_result r = ferry_ros2_cdr_parse(kind, p, n, out != NULL ? &msg : NULL);     \
                                                                                                   \
        if (out != NULL)                                                                           \
            *out = msg.u.member;                                                                   \
        return r;                                                                                  \
    }
PARSER(image, FERRY_ROS2_IMAGE, image)
PARSER(cloud, FERRY_ROS2_CLOUD, cloud)
PARSER(camera_info, FERRY_ROS2_CAMERA_INFO, camera_info)
PARSER(compressed, FERRY_ROS2_COMPRESSED, compressed)
PARSER(imu, FERRY_ROS2_IMU, imu)

static int failures;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

/* A CDR writer: 4-byte encapsulation header, then data aligned relative to its end. */
typedef struct writer {
    uint8_t b[BUF_MAX];
    size_t n;
    bool be;
} writer;

static void w_init(writer *w, bool be)
{
    memset(w, 0, sizeof *w);
    w->be = be;
    w->b[1] = be ? 0x00 : 0x01;
    w->n = 4;
}

static void w_u8(writer *w, uint8_t v)
{
    w->b[w->n++] = v;
}

/* Returns the offset of the value, for tests that corrupt it. */
static size_t w_u32(writer *w, uint32_t v)
{
    size_t at;

    while ((w->n - 4) % 4 != 0)
        w->b[w->n++] = 0;
    at = w->n;
    if (w->be) {
        w->b[w->n++] = (uint8_t)(v >> 24);
        w->b[w->n++] = (uint8_t)(v >> 16);
        w->b[w->n++] = (uint8_t)(v >> 8);
        w->b[w->n++] = (uint8_t)v;
    } else {
        w->b[w->n++] = (uint8_t)v;
        w->b[w->n++] = (uint8_t)(v >> 8);
        w->b[w->n++] = (uint8_t)(v >> 16);
        w->b[w->n++] = (uint8_t)(v >> 24);
    }
    return at;
}

static void w_f64(writer *w, double d)
{
    uint64_t v;
    int i;

    memcpy(&v, &d, sizeof v);
    while ((w->n - 4) % 8 != 0)
        w->b[w->n++] = 0;
    for (i = 0; i < 8; i++)
        w->b[w->n++] = (uint8_t)(v >> (w->be ? 56 - 8 * i : 8 * i));
}

static size_t w_str(writer *w, const char *s)
{
    size_t len = strlen(s) + 1, at = w_u32(w, (uint32_t)len);

    memcpy(w->b + w->n, s, len);
    w->n += len;
    return at;
}

static size_t w_octets(writer *w, const uint8_t *d, uint32_t n)
{
    size_t at = w_u32(w, n);

    memcpy(w->b + w->n, d, n);
    w->n += n;
    return at;
}

static void put_u32(writer *w, size_t at, uint32_t v);

static uint8_t pixels[3 * 5 * 2];
static uint8_t points[4 * 16];

/* Offsets of length fields in the last serialisation written, for corruption tests. */
static size_t at_frame_id, at_encoding, at_data, at_nfields, at_name0;

/* frame_id "ab" (3 bytes with its NUL) leaves height unaligned: padding is needed. */
static void write_image(writer *w, bool be)
{
    size_t i;

    for (i = 0; i < sizeof pixels; i++)
        pixels[i] = (uint8_t)(i * 7 + 1);
    w_init(w, be);
    w_u32(w, (uint32_t)-5); /* sec */
    w_u32(w, 123456789);    /* nanosec */
    at_frame_id = w_str(w, "ab");
    w_u32(w, 2); /* height */
    w_u32(w, 5); /* width */
    at_encoding = w_str(w, "rgb8");
    w_u8(w, 1);   /* is_bigendian */
    w_u32(w, 15); /* step */
    at_data = w_octets(w, pixels, sizeof pixels);
}

static void write_cloud(writer *w, bool be, uint32_t nfields)
{
    static const char *const names[] = {"x", "y", "z", "intensity"};
    uint32_t i;

    for (i = 0; i < sizeof points; i++)
        points[i] = (uint8_t)(255 - i);
    w_init(w, be);
    w_u32(w, 1700000000);
    w_u32(w, 999999999);
    at_frame_id = w_str(w, "lidar_top");
    w_u32(w, 1); /* height */
    w_u32(w, 4); /* width */
    at_nfields = w_u32(w, nfields);
    for (i = 0; i < nfields; i++) {
        size_t at = w_str(w, names[i % 4]);

        if (i == 0)
            at_name0 = at;
        w_u32(w, 4 * (i % 4)); /* offset */
        w_u8(w, 7);            /* datatype FLOAT32 */
        w_u32(w, 1);           /* count */
    }
    w_u8(w, 0);   /* is_bigendian */
    w_u32(w, 16); /* point_step */
    w_u32(w, 64); /* row_step */
    at_data = w_octets(w, points, sizeof points);
    w_u8(w, 1); /* is_dense */
}

/* The value of element i of a double array, distinct for every array (base) and element. */
static double val(int base, int i)
{
    return base * 1000.0 + i + 0.125;
}

static size_t at_d;

/* frame_id "cam" (4 bytes) leaves the doubles of d to be aligned to 8 after their count. */
static void write_camera_info(writer *w, bool be, uint32_t d_count)
{
    uint32_t i;

    w_init(w, be);
    w_u32(w, 1700000000);
    w_u32(w, 5);
    at_frame_id = w_str(w, "cam");
    w_u32(w, 480); /* height */
    w_u32(w, 640); /* width */
    at_encoding = w_str(w, "plumb_bob");
    at_d = w_u32(w, d_count);
    for (i = 0; i < d_count; i++)
        w_f64(w, val(1, (int)i));
    for (i = 0; i < 9; i++)
        w_f64(w, val(2, (int)i));
    for (i = 0; i < 9; i++)
        w_f64(w, val(3, (int)i));
    for (i = 0; i < 12; i++)
        w_f64(w, val(4, (int)i));
    w_u32(w, 2);  /* binning_x */
    w_u32(w, 3);  /* binning_y */
    w_u32(w, 10); /* roi */
    w_u32(w, 20);
    w_u32(w, 30);
    w_u32(w, 40);
    w_u8(w, 1); /* do_rectify */
}

static void write_compressed(writer *w, bool be)
{
    w_init(w, be);
    w_u32(w, 12);
    w_u32(w, 34);
    at_frame_id = w_str(w, "camera_optical");
    at_encoding = w_str(w, "jpeg");
    at_data = w_octets(w, pixels, sizeof pixels);
}

static void write_imu(writer *w, bool be)
{
    int i;

    w_init(w, be);
    w_u32(w, (uint32_t)-1);
    w_u32(w, 999);
    at_frame_id = w_str(w, "imu");
    for (i = 0; i < 4; i++)
        w_f64(w, val(5, i));
    for (i = 0; i < 9; i++)
        w_f64(w, val(6, i));
    for (i = 0; i < 3; i++)
        w_f64(w, val(7, i));
    for (i = 0; i < 9; i++)
        w_f64(w, val(8, i));
    for (i = 0; i < 3; i++)
        w_f64(w, val(9, i));
    for (i = 0; i < 9; i++)
        w_f64(w, val(10, i));
}

/* A heap copy of exactly n bytes (at least one, so that malloc gives a block). */
static uint8_t *exact(const uint8_t *b, size_t n)
{
    uint8_t *p = malloc(n != 0 ? n : 1);

    if (p == NULL) {
        perror("malloc");
        exit(1);
    }
    if (n != 0)
        memcpy(p, b, n);
    return p;
}

static bool inside(const void *p, size_t n, const uint8_t *buf, size_t size)
{
    const uint8_t *q = p;

    return q >= buf && q <= buf + size && n <= (size_t)(buf + size - q);
}

static bool string_inside(const char *s, const uint8_t *buf, size_t size)
{
    size_t room;

    if (!inside(s, 1, buf, size))
        return false;
    room = (size_t)(buf + size - (const uint8_t *)s);
    return memchr(s, '\0', room) != NULL;
}

/* Parses b[0..n) as an image and, when accepted, checks that the result lies inside it. */
static ferry_ros2_cdr_result parse_image(const uint8_t *b, size_t n)
{
    uint8_t *p = exact(b, n);
    ferry_ros2_image_msg m;
    ferry_ros2_cdr_result res = cdr_image(p, n, &m);

    if (res == FERRY_ROS2_CDR_OK) {
        CHECK(string_inside(m.header.frame_id, p, n));
        CHECK(string_inside(m.encoding, p, n));
        CHECK(inside(m.data, m.data_size, p, n));
    }
    free(p);
    return res;
}

static ferry_ros2_cdr_result parse_cloud(const uint8_t *b, size_t n)
{
    uint8_t *p = exact(b, n);
    ferry_ros2_cloud_msg m;
    ferry_ros2_cdr_result res = cdr_cloud(p, n, &m);
    uint32_t i;

    if (res == FERRY_ROS2_CDR_OK) {
        CHECK(string_inside(m.header.frame_id, p, n));
        for (i = 0; i < m.nfields && i < FERRY_POINTCLOUD_FIELDS_MAX; i++)
            CHECK(string_inside(m.fields[i].name, p, n));
        CHECK(inside(m.data, m.data_size, p, n));
    }
    free(p);
    return res;
}

static ferry_ros2_cdr_result parse_camera_info(const uint8_t *b, size_t n)
{
    uint8_t *p = exact(b, n);
    ferry_ros2_camera_info_msg m;
    ferry_ros2_cdr_result res = cdr_camera_info(p, n, &m);

    if (res == FERRY_ROS2_CDR_OK) {
        CHECK(string_inside(m.header.frame_id, p, n));
        CHECK(string_inside(m.distortion_model, p, n));
    }
    free(p);
    return res;
}

static ferry_ros2_cdr_result parse_compressed(const uint8_t *b, size_t n)
{
    uint8_t *p = exact(b, n);
    ferry_ros2_compressed_msg m;
    ferry_ros2_cdr_result res = cdr_compressed(p, n, &m);

    if (res == FERRY_ROS2_CDR_OK) {
        CHECK(string_inside(m.header.frame_id, p, n));
        CHECK(string_inside(m.format, p, n));
        CHECK(inside(m.data, m.data_size, p, n));
    }
    free(p);
    return res;
}

static ferry_ros2_cdr_result parse_imu(const uint8_t *b, size_t n)
{
    uint8_t *p = exact(b, n);
    ferry_ros2_imu_msg m;
    ferry_ros2_cdr_result res = cdr_imu(p, n, &m);

    if (res == FERRY_ROS2_CDR_OK)
        CHECK(string_inside(m.header.frame_id, p, n));
    free(p);
    return res;
}

static bool doubles_are(const double *v, int n, int base)
{
    int i;

    for (i = 0; i < n; i++)
        if (v[i] != val(base, i))
            return false;
    return true;
}

static void test_sensor_fields(bool be)
{
    ferry_ros2_camera_info_msg ci;
    ferry_ros2_compressed_msg cm;
    ferry_ros2_imu_msg im;
    writer w;
    uint8_t *p;

    write_camera_info(&w, be, 5);
    p = exact(w.b, w.n);
    CHECK(cdr_camera_info(p, w.n, &ci) == FERRY_ROS2_CDR_OK);
    CHECK(ci.header.sec == 1700000000 && ci.header.nanosec == 5);
    CHECK(strcmp(ci.header.frame_id, "cam") == 0);
    CHECK(ci.height == 480 && ci.width == 640);
    CHECK(strcmp(ci.distortion_model, "plumb_bob") == 0);
    CHECK(ci.d_count == 5 && doubles_are(ci.d, 5, 1) && ci.d[5] == 0.0);
    CHECK(doubles_are(ci.k, 9, 2) && doubles_are(ci.r, 9, 3) && doubles_are(ci.p, 12, 4));
    CHECK(ci.binning_x == 2 && ci.binning_y == 3);
    CHECK(ci.roi_x_offset == 10 && ci.roi_y_offset == 20 && ci.roi_height == 30 &&
          ci.roi_width == 40 && ci.roi_do_rectify == 1);
    free(p);
    /* No coefficients; more than a ferry camera info holds (read, the first kept). */
    write_camera_info(&w, be, 0);
    CHECK(parse_camera_info(w.b, w.n) == FERRY_ROS2_CDR_OK);
    write_camera_info(&w, be, FERRY_CAMERA_INFO_D_MAX + 3);
    p = exact(w.b, w.n);
    CHECK(cdr_camera_info(p, w.n, &ci) == FERRY_ROS2_CDR_OK);
    CHECK(ci.d_count == FERRY_CAMERA_INFO_D_MAX + 3 && doubles_are(ci.d, 16, 1));
    CHECK(doubles_are(ci.p, 12, 4) && ci.roi_width == 40);
    free(p);

    write_compressed(&w, be);
    p = exact(w.b, w.n);
    CHECK(cdr_compressed(p, w.n, &cm) == FERRY_ROS2_CDR_OK);
    CHECK(cm.header.sec == 12 && cm.header.nanosec == 34);
    CHECK(strcmp(cm.header.frame_id, "camera_optical") == 0 && strcmp(cm.format, "jpeg") == 0);
    CHECK(cm.data_size == sizeof pixels && memcmp(cm.data, pixels, sizeof pixels) == 0);
    free(p);

    write_imu(&w, be);
    p = exact(w.b, w.n);
    CHECK(cdr_imu(p, w.n, &im) == FERRY_ROS2_CDR_OK);
    CHECK(im.header.sec == -1 && im.header.nanosec == 999 &&
          strcmp(im.header.frame_id, "imu") == 0);
    CHECK(im.orientation.x == val(5, 0) && im.orientation.y == val(5, 1) &&
          im.orientation.z == val(5, 2) && im.orientation.w == val(5, 3));
    CHECK(doubles_are(im.orientation_covariance, 9, 6));
    CHECK(im.angular_velocity.x == val(7, 0) && im.angular_velocity.z == val(7, 2));
    CHECK(doubles_are(im.angular_velocity_covariance, 9, 8));
    CHECK(im.linear_acceleration.y == val(9, 1));
    CHECK(doubles_are(im.linear_acceleration_covariance, 9, 10));
    free(p);
}

/* Every proper prefix refused; lengths and counts the data cannot hold refused; strings without
 * their NUL refused. */
static void test_sensor_hostile(void)
{
    static const uint32_t bad[] = {0, 0xffffffffu, 0xfffffffcu, 0x80000000u, 0x20000000u, 4096};
    writer w;
    size_t n, i;
    int be;

    for (be = 0; be < 2; be++) {
        write_camera_info(&w, be != 0, 5);
        for (n = 0; n < w.n; n++)
            CHECK(parse_camera_info(w.b, n) == FERRY_ROS2_CDR_MALFORMED);
        write_compressed(&w, be != 0);
        for (n = 0; n < w.n; n++)
            CHECK(parse_compressed(w.b, n) == FERRY_ROS2_CDR_MALFORMED);
        write_imu(&w, be != 0);
        for (n = 0; n < w.n; n++)
            CHECK(parse_imu(w.b, n) == FERRY_ROS2_CDR_MALFORMED);
    }
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_camera_info(&w, false, 5);
        put_u32(&w, at_frame_id, bad[i]);
        CHECK(parse_camera_info(w.b, w.n) == FERRY_ROS2_CDR_MALFORMED);
        write_camera_info(&w, true, 5);
        put_u32(&w, at_encoding, bad[i]);
        CHECK(parse_camera_info(w.b, w.n) == FERRY_ROS2_CDR_MALFORMED);
        if (bad[i] != 0) {
            write_camera_info(&w, false, 5);
            put_u32(&w, at_d, bad[i]);
            CHECK(parse_camera_info(w.b, w.n) == FERRY_ROS2_CDR_MALFORMED);
            write_compressed(&w, true);
            put_u32(&w, at_data, bad[i]);
            CHECK(parse_compressed(w.b, w.n) == FERRY_ROS2_CDR_MALFORMED);
        }
        write_compressed(&w, false);
        put_u32(&w, at_encoding, bad[i]);
        CHECK(parse_compressed(w.b, w.n) == FERRY_ROS2_CDR_MALFORMED);
        write_imu(&w, false);
        put_u32(&w, at_frame_id, bad[i]);
        CHECK(parse_imu(w.b, w.n) == FERRY_ROS2_CDR_MALFORMED);
    }
    write_camera_info(&w, false, 5);
    w.b[at_encoding + 4 + 9] = 'x';
    CHECK(parse_camera_info(w.b, w.n) == FERRY_ROS2_CDR_MALFORMED);
    write_compressed(&w, false);
    w.b[at_encoding + 4 + 4] = 'x';
    CHECK(parse_compressed(w.b, w.n) == FERRY_ROS2_CDR_MALFORMED);
    write_imu(&w, true);
    w.b[at_frame_id + 4 + 3] = 'x';
    CHECK(parse_imu(w.b, w.n) == FERRY_ROS2_CDR_MALFORMED);
    /* XCDR2 goes to Cyclone's deserialiser. */
    write_imu(&w, false);
    w.b[1] = 0x07;
    CHECK(parse_imu(w.b, w.n) == FERRY_ROS2_CDR_UNSUPPORTED);
    CHECK(cdr_camera_info(w.b, w.n, NULL) == FERRY_ROS2_CDR_MALFORMED);
    CHECK(cdr_compressed(NULL, 10, NULL) == FERRY_ROS2_CDR_MALFORMED);
}

static void test_image_fields(bool be)
{
    writer w;
    ferry_ros2_image_msg m;
    uint8_t *p;

    write_image(&w, be);
    p = exact(w.b, w.n);
    CHECK(cdr_image(p, w.n, &m) == FERRY_ROS2_CDR_OK);
    CHECK(m.header.sec == -5);
    CHECK(m.header.nanosec == 123456789u);
    CHECK(strcmp(m.header.frame_id, "ab") == 0);
    CHECK(m.height == 2 && m.width == 5);
    CHECK(strcmp(m.encoding, "rgb8") == 0);
    CHECK(m.is_bigendian == 1);
    CHECK(m.step == 15);
    CHECK(m.data_size == sizeof pixels && memcmp(m.data, pixels, sizeof pixels) == 0);
    CHECK(m.data == p + w.n - sizeof pixels);
    free(p);
    /* Padding after the message (the encapsulation options say how much) is allowed. */
    w.b[w.n++] = 0;
    w.b[w.n++] = 0;
    CHECK(parse_image(w.b, w.n) == FERRY_ROS2_CDR_OK);
}

static void test_cloud_fields(bool be)
{
    writer w;
    ferry_ros2_cloud_msg m;
    uint8_t *p;

    write_cloud(&w, be, 4);
    p = exact(w.b, w.n);
    CHECK(cdr_cloud(p, w.n, &m) == FERRY_ROS2_CDR_OK);
    CHECK(m.header.sec == 1700000000 && m.header.nanosec == 999999999u);
    CHECK(strcmp(m.header.frame_id, "lidar_top") == 0);
    CHECK(m.height == 1 && m.width == 4);
    CHECK(m.nfields == 4);
    CHECK(strcmp(m.fields[0].name, "x") == 0 && m.fields[0].offset == 0);
    CHECK(strcmp(m.fields[3].name, "intensity") == 0 && m.fields[3].offset == 12);
    CHECK(m.fields[2].datatype == 7 && m.fields[2].count == 1);
    CHECK(m.is_bigendian == 0 && m.is_dense == 1);
    CHECK(m.point_step == 16 && m.row_step == 64);
    CHECK(m.data_size == sizeof points && memcmp(m.data, points, sizeof points) == 0);
    free(p);

    /* More fields than a ferry cloud holds: all are read, the first ones kept, the count
     * reported as sent (the bridge refuses it). */
    write_cloud(&w, be, FERRY_POINTCLOUD_FIELDS_MAX + 1);
    p = exact(w.b, w.n);
    CHECK(cdr_cloud(p, w.n, &m) == FERRY_ROS2_CDR_OK);
    CHECK(m.nfields == FERRY_POINTCLOUD_FIELDS_MAX + 1 &&
          strcmp(m.fields[FERRY_POINTCLOUD_FIELDS_MAX - 1].name, "intensity") == 0);
    CHECK(m.is_dense == 1 && m.data_size == sizeof points);
    free(p);

    write_cloud(&w, be, 0);
    CHECK(parse_cloud(w.b, w.n) == FERRY_ROS2_CDR_OK);
}

/* Every proper prefix of a serialisation is refused. */
static void test_truncations(void)
{
    writer w;
    size_t n;
    int be;

    for (be = 0; be < 2; be++) {
        write_image(&w, be != 0);
        for (n = 0; n < w.n; n++)
            CHECK(parse_image(w.b, n) == FERRY_ROS2_CDR_MALFORMED);
        write_cloud(&w, be != 0, 4);
        for (n = 0; n < w.n; n++)
            CHECK(parse_cloud(w.b, n) == FERRY_ROS2_CDR_MALFORMED);
    }
}

static void put_u32(writer *w, size_t at, uint32_t v)
{
    size_t end = w->n;

    w->n = at;
    w_u32(w, v);
    w->n = end;
}

static void test_lengths(void)
{
    static const uint32_t bad[] = {0, 0xffffffffu, 0xfffffffcu, 0x80000000u, 4096, 1000};
    writer w;
    size_t i;

    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_image(&w, false);
        put_u32(&w, at_frame_id, bad[i]);
        CHECK(parse_image(w.b, w.n) == FERRY_ROS2_CDR_MALFORMED);
        write_image(&w, true);
        put_u32(&w, at_encoding, bad[i]);
        CHECK(parse_image(w.b, w.n) == FERRY_ROS2_CDR_MALFORMED);
        if (bad[i] != 0) {
            write_image(&w, false);
            put_u32(&w, at_data, bad[i]);
            CHECK(parse_image(w.b, w.n) == FERRY_ROS2_CDR_MALFORMED);
            write_cloud(&w, false, 4);
            put_u32(&w, at_nfields, bad[i]);
            CHECK(parse_cloud(w.b, w.n) == FERRY_ROS2_CDR_MALFORMED);
            write_cloud(&w, true, 4);
            put_u32(&w, at_data, bad[i]);
            CHECK(parse_cloud(w.b, w.n) == FERRY_ROS2_CDR_MALFORMED);
        }
        write_cloud(&w, true, 4);
        put_u32(&w, at_name0, bad[i]);
        CHECK(parse_cloud(w.b, w.n) == FERRY_ROS2_CDR_MALFORMED);
    }
    /* A data length one short leaves a byte over: accepted as padding, but the bridge then
     * sees a data size that its geometry does not give. */
    write_image(&w, false);
    put_u32(&w, at_data, (uint32_t)sizeof pixels - 1);
    CHECK(parse_image(w.b, w.n) == FERRY_ROS2_CDR_OK);

    /* A string without its NUL. */
    write_image(&w, false);
    w.b[at_frame_id + 4 + 2] = 'c';
    CHECK(parse_image(w.b, w.n) == FERRY_ROS2_CDR_MALFORMED);
    write_cloud(&w, false, 2);
    w.b[at_name0 + 4 + 1] = 'x';
    CHECK(parse_cloud(w.b, w.n) == FERRY_ROS2_CDR_MALFORMED);
}

/* Only CDR_BE and CDR_LE are read; XCDR2 and the others go to Cyclone's deserialiser. */
static void test_encapsulations(void)
{
    static const uint8_t ids[][2] = {{0x00, 0x02}, {0x00, 0x03}, {0x00, 0x06}, {0x00, 0x07},
                                     {0x00, 0x08}, {0x00, 0x0a}, {0x01, 0x00}, {0xff, 0xff}};
    ferry_ros2_image_msg m;
    writer w;
    size_t i;

    for (i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        write_image(&w, false);
        w.b[0] = ids[i][0];
        w.b[1] = ids[i][1];
        CHECK(parse_image(w.b, w.n) == FERRY_ROS2_CDR_UNSUPPORTED);
        write_cloud(&w, false, 1);
        w.b[0] = ids[i][0];
        w.b[1] = ids[i][1];
        CHECK(parse_cloud(w.b, w.n) == FERRY_ROS2_CDR_UNSUPPORTED);
    }
    CHECK(cdr_image(NULL, 100, &m) == FERRY_ROS2_CDR_MALFORMED);
    write_image(&w, false);
    CHECK(cdr_image(w.b, w.n, NULL) == FERRY_ROS2_CDR_MALFORMED);
    CHECK(cdr_cloud(w.b, w.n, NULL) == FERRY_ROS2_CDR_MALFORMED);
}

static uint32_t rng_state = 0x2545f491u;

static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 17;
    rng_state ^= rng_state << 5;
    return rng_state;
}

/* Random corruption: a few bytes set to random or boundary values, sometimes cut short. */
static void test_random(void)
{
    static const uint8_t values[] = {0x00, 0x01, 0x7f, 0x80, 0xfe, 0xff};
    writer w, c;
    int iter, ok = 0;

    for (iter = 0; iter < 200000; iter++) {
        int kind = iter % 5;
        bool be = (iter / 5) % 2 != 0;
        int k, flips = 1 + (int)(rnd() % 4);
        ferry_ros2_cdr_result res;

        if (kind == 0)
            write_image(&w, be);
        else if (kind == 1)
            write_cloud(&w, be, 1 + rnd() % 5);
        else if (kind == 2)
            write_camera_info(&w, be, rnd() % 20);
        else if (kind == 3)
            write_compressed(&w, be);
        else
            write_imu(&w, be);
        c = w;
        for (k = 0; k < flips; k++) {
            size_t at = 4 + rnd() % (c.n - 4);

            c.b[at] = (rnd() & 1) ? values[rnd() % sizeof values] : (uint8_t)rnd();
        }
        if (rnd() % 8 == 0)
            c.n = rnd() % (c.n + 1);
        if (kind == 0)
            res = parse_image(c.b, c.n);
        else if (kind == 1)
            res = parse_cloud(c.b, c.n);
        else if (kind == 2)
            res = parse_camera_info(c.b, c.n);
        else if (kind == 3)
            res = parse_compressed(c.b, c.n);
        else
            res = parse_imu(c.b, c.n);
        if (res == FERRY_ROS2_CDR_OK)
            ok++;
    }
    printf(
        "ros2_cdr_read_test: %d of 200000 corrupted inputs parsed (and lay inside their buffer)\n",
        ok);
}

int main(void)
{
    test_image_fields(false);
    test_image_fields(true);
    test_cloud_fields(false);
    test_cloud_fields(true);
    test_sensor_fields(false);
    test_sensor_fields(true);
    test_truncations();
    test_lengths();
    test_sensor_hostile();
    test_encapsulations();
    test_random();
    if (failures != 0) {
        printf("ros2_cdr_read_test: %d checks failed\n", failures);
        return 1;
    }
    printf("ros2_cdr_read_test: PASS\n");
    return 0;
}
