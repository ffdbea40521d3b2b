/*
 * Typed frames (ferry/msg.h): size arithmetic of every encoding, image and point cloud loans
 * published and viewed in one process (pixels identical, resolution changes on one topic),
 * refusal of every invalid argument with nothing loaned, and hostile headers (each field of a
 * valid sample corrupted in turn) refused by the views with FERRY_EPROTO and no partial result.
 */
#include "testutil.h"

#include <ferry/msg.h>

#include <stdlib.h>
#include <string.h>

#define TOPIC_IMAGE "/camera/image"
#define TOPIC_CLOUD "/lidar/points"

typedef struct endpoints {
    ferry_node *node;
    ferry_publisher *pub;
    ferry_subscriber *sub;
} endpoints;

static endpoints open_endpoints(const char *topic, const char *type, uint64_t hash,
                                size_t max_sample_size)
{
    endpoints e;
    e.node = tu_node("msg");
    ferry_publisher_options po;
    ferry_publisher_options_init(&po);
    if (max_sample_size)
        po.max_sample_size = max_sample_size;
    TU_OK(ferry_publisher_create(&e.pub, e.node, topic, type, hash, &po));
    TU_OK(ferry_subscriber_create(&e.sub, e.node, topic, type, hash, NULL));
    tu_connect_local(e.pub, 1, e.sub, 1);
    return e;
}

static void close_endpoints(endpoints *e)
{
    TU_OK(ferry_subscriber_destroy(e->sub));
    TU_OK(ferry_publisher_destroy(e->pub));
    TU_OK(ferry_node_destroy(e->node));
}

static void check_nothing_loaned(ferry_publisher *pub)
{
    ferry_publisher_stats st;
    TU_OK(ferry_publisher_stats_get(pub, &st));
    TU_EQ_U64(st.chunks_loaned, 0);
}

static void *copy_aligned(const void *data, size_t size)
{
    void *buf = aligned_alloc(64, (size + 63) / 64 * 64);
    TU_CHECK(buf != NULL);
    memcpy(buf, data, size);
    return buf;
}

/* --- size arithmetic ------------------------------------------------------------------------ */

static void test_constants(void)
{
    TU_EQ_U64(FERRY_IMAGE_TYPE_HASH, ferry_hash(FERRY_IMAGE_TYPE_NAME));
    TU_EQ_U64(FERRY_POINTCLOUD_TYPE_HASH, ferry_hash(FERRY_POINTCLOUD_TYPE_NAME));
    TU_EQ_U64(sizeof(ferry_image_header), 336);
    TU_EQ_U64(sizeof(ferry_pointcloud_header), 3128);
    TU_EQ_U64(FERRY_MSG_VERSION, 2);
    static const uint32_t dt_size[] = {0, 1, 1, 2, 2, 4, 4, 4, 8, 0};
    for (uint32_t t = 0; t < 10; t++)
        TU_EQ_U64(ferry_point_datatype_size(t), dt_size[t]);
    TU_EQ_U64(ferry_point_datatype_size(UINT32_MAX), 0);
}

static void test_layouts(void)
{
    static const struct {
        const char *enc;
        uint32_t bpp;
    } packed[] = {
        {"rgb8", 3},         {"bgr8", 3},         {"rgba8", 4},        {"bgra8", 4},
        {"rgb16", 6},        {"bgr16", 6},        {"rgba16", 8},       {"bgra16", 8},
        {"mono8", 1},        {"mono16", 2},       {"8UC1", 1},         {"8UC2", 2},
        {"8UC3", 3},         {"8UC4", 4},         {"8SC1", 1},         {"8SC2", 2},
        {"8SC3", 3},         {"8SC4", 4},         {"16UC1", 2},        {"16UC2", 4},
        {"16UC3", 6},        {"16UC4", 8},        {"16SC1", 2},        {"16SC2", 4},
        {"16SC3", 6},        {"16SC4", 8},        {"32SC1", 4},        {"32SC2", 8},
        {"32SC3", 12},       {"32SC4", 16},       {"32FC1", 4},        {"32FC2", 8},
        {"32FC3", 12},       {"32FC4", 16},       {"64FC1", 8},        {"64FC2", 16},
        {"64FC3", 24},       {"64FC4", 32},       {"bayer_rggb8", 1},  {"bayer_bggr8", 1},
        {"bayer_gbrg8", 1},  {"bayer_grbg8", 1},  {"bayer_rggb16", 2}, {"bayer_bggr16", 2},
        {"bayer_gbrg16", 2}, {"bayer_grbg16", 2}, {"yuv422", 2},       {"yuv422_yuy2", 2},
        {"yuyv", 2},         {"uyvy", 2},
    };
    for (size_t i = 0; i < sizeof packed / sizeof packed[0]; i++) {
        ferry_image_layout l;
        TU_OK(ferry_image_layout_get(packed[i].enc, 640, 480, 0, &l));
        TU_EQ_U64(l.bytes_per_pixel, packed[i].bpp);
        TU_EQ_U64(l.min_step, 640u * packed[i].bpp);
        TU_EQ_U64(l.step, 640u * packed[i].bpp);
        TU_EQ_U64(l.data_size, 640ull * 480 * packed[i].bpp);
        /* A padded step. */
        uint32_t step = 640u * packed[i].bpp + 64;
        TU_OK(ferry_image_layout_get(packed[i].enc, 640, 480, step, &l));
        TU_EQ_U64(l.step, step);
        TU_EQ_U64(l.data_size, (uint64_t)step * 480);
        /* One byte short of the minimum. */
        TU_ERR(ferry_image_layout_get(packed[i].enc, 640, 480, 640u * packed[i].bpp - 1, &l),
               FERRY_EINVAL);
    }
    ferry_image_layout l;
    TU_OK(ferry_image_layout_get("nv12", 640, 480, 0, &l));
    TU_EQ_U64(l.bytes_per_pixel, 1);
    TU_EQ_U64(l.min_step, 640);
    TU_EQ_U64(l.data_size, 640ull * 480 * 3 / 2);
    TU_OK(ferry_image_layout_get("nv12", 1920, 1080, 2048, &l));
    TU_EQ_U64(l.data_size, 2048ull * 1080 * 3 / 2);
    TU_ERR(ferry_image_layout_get("nv12", 640, 480, 639, &l), FERRY_EINVAL);
    TU_ERR(ferry_image_layout_get("nv12", 641, 480, 0, &l), FERRY_EINVAL);
    TU_ERR(ferry_image_layout_get("nv12", 640, 481, 0, &l), FERRY_EINVAL);
    /* nv21: nv12's planes with the chroma bytes swapped; nv24: full-resolution chroma. */
    TU_OK(ferry_image_layout_get("nv21", 640, 480, 0, &l));
    TU_EQ_U64(l.bytes_per_pixel, 1);
    TU_EQ_U64(l.data_size, 640ull * 480 * 3 / 2);
    TU_ERR(ferry_image_layout_get("nv21", 641, 480, 0, &l), FERRY_EINVAL);
    TU_ERR(ferry_image_layout_get("nv21", 640, 481, 0, &l), FERRY_EINVAL);
    TU_OK(ferry_image_layout_get("nv24", 641, 481, 0, &l));
    TU_EQ_U64(l.bytes_per_pixel, 1);
    TU_EQ_U64(l.min_step, 641);
    TU_EQ_U64(l.data_size, 641ull * 481 * 3);
    TU_OK(ferry_image_layout_get("nv24", 1920, 1080, 2048, &l));
    TU_EQ_U64(l.data_size, 2048ull * 1080 * 3);
    TU_ERR(ferry_image_layout_get("nv24", 640, 480, 639, &l), FERRY_EINVAL);
    TU_ERR(ferry_image_layout_get("nv24", 0xfffffffeu, 0xfffffffeu, 0, &l), FERRY_EINVAL);
    /* Every packed YUV 4:2:2 name needs an even width. */
    static const char *const yuv422[] = {"yuv422", "yuv422_yuy2", "yuyv", "uyvy"};
    for (size_t i = 0; i < 4; i++) {
        TU_ERR(ferry_image_layout_get(yuv422[i], 641, 480, 0, &l), FERRY_EINVAL);
        TU_OK(ferry_image_layout_get(yuv422[i], 2, 1, 0, &l));
    }
    /* The generic encodings of sensor_msgs/image_encodings take any channel count 1..512: bytes
     * per pixel are the depth's bytes times the channels. */
    static const struct {
        const char *enc;
        uint32_t bpp;
    } generic[] = {{"8UC5", 5},     {"16SC3", 6},  {"32FC5", 20},    {"64FC10", 80},
                   {"8SC512", 512}, {"32SC7", 28}, {"16UC100", 200}, {"64FC512", 4096}};
    for (size_t i = 0; i < sizeof generic / sizeof generic[0]; i++) {
        TU_OK(ferry_image_layout_get(generic[i].enc, 7, 3, 0, &l));
        TU_EQ_U64(l.bytes_per_pixel, generic[i].bpp);
        TU_EQ_U64(l.data_size, 7ull * 3 * generic[i].bpp);
    }
    /* Names close to known ones are not known: no channel count, 0, above 512, a leading zero,
     * trailing characters, depths ROS does not have. */
    static const char *const near[] = {"8UC0",       "8UC513", "8UC05", "8UC5x",  "8UC-1",
                                       "32UC1",      "16FC1",  "64FC",  "64SC1",  "8UC",
                                       "bayer_rggb", "nv",     "NV12",  "mono32", "8uc1"};
    for (size_t i = 0; i < sizeof near / sizeof near[0]; i++)
        TU_ERR(ferry_image_layout_get(near[i], 640, 480, 0, &l), FERRY_EINVAL);
    TU_ERR(ferry_image_layout_get("yuv422", 641, 480, 0, &l), FERRY_EINVAL);
    TU_OK(ferry_image_layout_get("yuv422", 640, 481, 0, &l));
    TU_OK(ferry_image_layout_get("rgb8", 641, 481, 0, &l));
    TU_EQ_U64(l.data_size, 641ull * 3 * 481);
    /* Largest sizes that fit, and the first that do not. */
    TU_OK(ferry_image_layout_get("mono8", UINT32_MAX, UINT32_MAX, 0, &l));
    TU_EQ_U64(l.data_size, (uint64_t)UINT32_MAX * UINT32_MAX);
    TU_ERR(ferry_image_layout_get("mono16", 0x80000000u, 1, 0, &l), FERRY_EINVAL);
    TU_ERR(ferry_image_layout_get("rgba8", UINT32_MAX, 1, 0, &l), FERRY_EINVAL);
    TU_ERR(ferry_image_layout_get("nv12", 0xfffffffeu, 0xfffffffeu, 0, &l), FERRY_EINVAL);
    /* Arguments. */
    TU_ERR(ferry_image_layout_get(NULL, 640, 480, 0, &l), FERRY_EINVAL);
    TU_ERR(ferry_image_layout_get("rgb8", 640, 480, 0, NULL), FERRY_EINVAL);
    TU_ERR(ferry_image_layout_get("rgb9", 640, 480, 0, &l), FERRY_EINVAL);
    TU_ERR(ferry_image_layout_get("", 640, 480, 0, &l), FERRY_EINVAL);
    TU_ERR(ferry_image_layout_get("RGB8", 640, 480, 0, &l), FERRY_EINVAL);
    TU_ERR(ferry_image_layout_get("rgb8", 0, 480, 0, &l), FERRY_EINVAL);
    TU_ERR(ferry_image_layout_get("rgb8", 640, 0, 0, &l), FERRY_EINVAL);
    char longname[64];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    TU_ERR(ferry_image_layout_get(longname, 640, 480, 0, &l), FERRY_EINVAL);
}

/* --- images ------------------------------------------------------------------------------- */

/* Loans, fills, publishes, takes and checks one image; returns with the sample released. */
static void image_round_trip(endpoints *e, uint32_t width, uint32_t height, const char *encoding,
                             uint32_t step, uint64_t seed)
{
    ferry_image img;
    TU_OK(ferry_image_loan(e->pub, width, height, encoding, step, &img));
    ferry_image_layout l;
    TU_OK(ferry_image_layout_get(encoding, width, height, step, &l));
    TU_EQ_PTR(img.payload, img.header);
    TU_EQ_U64((uintptr_t)img.data % 64, 0);
    TU_EQ_U64(img.data_size, l.data_size);
    TU_EQ_U64(img.header->data_offset, 384);
    TU_EQ_U64(img.payload_size, 384 + l.data_size);
    TU_EQ_U64(img.header->step, l.step);
    TU_EQ_STR(img.header->encoding, encoding);
    TU_EQ_STR(img.header->frame_id, "");
    tu_fill(img.data, img.data_size, seed);
    img.header->stamp.sec = 1700000000 + (int32_t)(seed % 1000);
    img.header->stamp.nanosec = 123456789;
    snprintf(img.header->frame_id, sizeof img.header->frame_id, "camera_%u", (unsigned)seed);
    TU_OK(ferry_image_publish(e->pub, &img));
    TU_CHECK(img.payload == NULL && img.header == NULL && img.data == NULL);
    check_nothing_loaned(e->pub);

    ferry_sample s;
    TU_TAKE(e->sub, &s);
    ferry_image_view v;
    TU_OK(ferry_image_view_get(&s, &v));
    TU_EQ_U64(v.header.width, width);
    TU_EQ_U64(v.header.height, height);
    TU_EQ_U64(v.header.step, l.step);
    TU_EQ_STR(v.header.encoding, encoding);
    char frame[32];
    snprintf(frame, sizeof frame, "camera_%u", (unsigned)seed);
    TU_EQ_STR(v.header.frame_id, frame);
    TU_CMP_I64(v.header.stamp.sec, ==, 1700000000 + (int32_t)(seed % 1000));
    TU_EQ_U64(v.header.stamp.nanosec, 123456789);
    TU_EQ_U64(v.header.is_bigendian, 0); /* the build hosts are little-endian */
    TU_EQ_U64(v.data_size, l.data_size);
    TU_EQ_U64(v.layout.data_size, l.data_size);
    TU_EQ_U64(v.layout.min_step, l.min_step);
    /* Zero copy: the pixels are read in place, 384 bytes into the sample. */
    TU_EQ_PTR(v.data, (const unsigned char *)s.data + 384);
    TU_EQ_U64(tu_verify(v.data, v.data_size, seed), SIZE_MAX);
    TU_OK(ferry_release(e->sub, &s));
}

static void test_image_round_trip(void)
{
    endpoints e = open_endpoints(TOPIC_IMAGE, FERRY_IMAGE_TYPE_NAME, FERRY_IMAGE_TYPE_HASH, 0);
    /* Resolution and encoding change from sample to sample on one topic. */
    image_round_trip(&e, 1280, 720, "rgb8", 0, 1);
    image_round_trip(&e, 1920, 1080, "bgr8", 0, 2);
    image_round_trip(&e, 640, 480, "nv12", 0, 3);
    image_round_trip(&e, 641, 3, "mono8", 704, 4);
    /* Every encoding there is, through a loan, a publish and a view. */
    static const char *const all[] = {
        "rgb8",         "bgr8",        "rgba8",        "bgra8",        "rgb16",
        "bgr16",        "rgba16",      "bgra16",       "mono8",        "mono16",
        "8UC1",         "8UC2",        "8UC3",         "8UC4",         "8SC1",
        "8SC2",         "8SC3",        "8SC4",         "16UC1",        "16UC2",
        "16UC3",        "16UC4",       "16SC1",        "16SC2",        "16SC3",
        "16SC4",        "32SC1",       "32SC2",        "32SC3",        "32SC4",
        "32FC1",        "32FC2",       "32FC3",        "32FC4",        "64FC1",
        "64FC2",        "64FC3",       "64FC4",        "bayer_rggb8",  "bayer_bggr8",
        "bayer_gbrg8",  "bayer_grbg8", "bayer_rggb16", "bayer_bggr16", "bayer_gbrg16",
        "bayer_grbg16", "yuv422",      "yuv422_yuy2",  "yuyv",         "uyvy",
        "nv12",         "nv21",        "nv24",         "8UC5",         "32FC9",
        "16SC3",        "64FC12",
    };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        image_round_trip(&e, 320, 240, all[i], 0, 10 + i);
    image_round_trip(&e, 2, 2, "nv12", 64, 70);
    image_round_trip(&e, 3, 5, "nv24", 64, 71);
    check_nothing_loaned(e.pub);
    close_endpoints(&e);
}

static void expect_image_loan_refused(endpoints *e, ferry_publisher *pub, uint32_t w, uint32_t h,
                                      const char *enc, uint32_t step, bool pass_out,
                                      ferry_err expected)
{
    ferry_image img;
    memset(&img, 0xab, sizeof img);
    TU_ERR(ferry_image_loan(pub, w, h, enc, step, pass_out ? &img : NULL), expected);
    if (pass_out)
        TU_CHECK(img.payload == NULL && img.header == NULL && img.data == NULL &&
                 img.data_size == 0 && img.payload_size == 0);
    check_nothing_loaned(e->pub);
}

static void test_image_invalid_arguments(void)
{
    endpoints e =
        open_endpoints(TOPIC_IMAGE, FERRY_IMAGE_TYPE_NAME, FERRY_IMAGE_TYPE_HASH, (size_t)4 << 20);
    expect_image_loan_refused(&e, NULL, 640, 480, "rgb8", 0, true, FERRY_EINVAL);
    expect_image_loan_refused(&e, e.pub, 640, 480, NULL, 0, true, FERRY_EINVAL);
    expect_image_loan_refused(&e, e.pub, 640, 480, "rgb8", 0, false, FERRY_EINVAL);
    expect_image_loan_refused(&e, e.pub, 640, 480, "rgb9", 0, true, FERRY_EINVAL);
    expect_image_loan_refused(&e, e.pub, 640, 480, "", 0, true, FERRY_EINVAL);
    expect_image_loan_refused(&e, e.pub, 0, 480, "rgb8", 0, true, FERRY_EINVAL);
    expect_image_loan_refused(&e, e.pub, 640, 0, "rgb8", 0, true, FERRY_EINVAL);
    expect_image_loan_refused(&e, e.pub, 640, 480, "rgb8", 1919, true, FERRY_EINVAL);
    expect_image_loan_refused(&e, e.pub, 641, 480, "nv12", 0, true, FERRY_EINVAL);
    expect_image_loan_refused(&e, e.pub, 640, 479, "nv12", 0, true, FERRY_EINVAL);
    expect_image_loan_refused(&e, e.pub, 641, 480, "yuv422", 0, true, FERRY_EINVAL);
    expect_image_loan_refused(&e, e.pub, UINT32_MAX, 1, "rgba8", 0, true, FERRY_EINVAL);
    expect_image_loan_refused(&e, e.pub, 0xfffffffeu, 0xfffffffeu, "nv12", 0, true, FERRY_EINVAL);
    /* Valid geometry beyond max_sample_size: the loan's own error. */
    expect_image_loan_refused(&e, e.pub, 1920, 1080, "rgb8", 0, true, FERRY_ETOOBIG);
    expect_image_loan_refused(&e, e.pub, 65536, 65536, "mono8", 0, true, FERRY_ETOOBIG);

    /* Publish and release of nothing. */
    ferry_image img;
    memset(&img, 0, sizeof img);
    TU_ERR(ferry_image_publish(NULL, &img), FERRY_EINVAL);
    TU_ERR(ferry_image_publish(e.pub, NULL), FERRY_EINVAL);
    TU_ERR(ferry_image_publish(e.pub, &img), FERRY_EINVAL);
    TU_ERR(ferry_image_loan_release(NULL, &img), FERRY_EINVAL);
    TU_ERR(ferry_image_loan_release(e.pub, NULL), FERRY_EINVAL);
    TU_ERR(ferry_image_loan_release(e.pub, &img), FERRY_EINVAL);

    /* A header the caller broke is refused at publish; the loan stays the caller's. */
    TU_OK(ferry_image_loan(e.pub, 64, 48, "rgb8", 0, &img));
    memset(img.header->frame_id, 'x', sizeof img.header->frame_id);
    TU_ERR(ferry_image_publish(e.pub, &img), FERRY_EINVAL);
    img.header->frame_id[FERRY_MSG_FRAME_ID_MAX] = '\0';
    img.header->width = 65;
    TU_ERR(ferry_image_publish(e.pub, &img), FERRY_EINVAL);
    img.header->width = 64;
    ferry_publisher_stats st;
    TU_OK(ferry_publisher_stats_get(e.pub, &st));
    TU_EQ_U64(st.chunks_loaned, 1);
    TU_EQ_U64(st.published, 0);
    TU_OK(ferry_image_loan_release(e.pub, &img));
    TU_CHECK(img.payload == NULL);
    check_nothing_loaned(e.pub);

    /* A released loan cannot be published; the library's own check answers. */
    TU_OK(ferry_image_loan(e.pub, 64, 48, "rgb8", 0, &img));
    ferry_image stale = img;
    TU_OK(ferry_image_loan_release(e.pub, &img));
    TU_CHECK(ferry_image_publish(e.pub, &stale) != FERRY_OK);
    check_nothing_loaned(e.pub);

    /* Views of nothing. */
    ferry_image_view v;
    ferry_sample s;
    memset(&s, 0, sizeof s);
    TU_ERR(ferry_image_view_get(NULL, &v), FERRY_EINVAL);
    TU_ERR(ferry_image_view_get(&s, NULL), FERRY_EINVAL);
    TU_ERR(ferry_image_view_get(&s, &v), FERRY_EPROTO);
    close_endpoints(&e);
}

typedef void (*image_corruption)(ferry_image_header *h, size_t *size);

static void ci_magic(ferry_image_header *h, size_t *size)
{
    (void)size;
    h->magic ^= 1;
}
static void ci_version(ferry_image_header *h, size_t *size)
{
    (void)size;
    h->version = 3;
}
static void ci_version1(ferry_image_header *h, size_t *size)
{
    (void)size;
    h->version = 1;
}
static void ci_version0(ferry_image_header *h, size_t *size)
{
    (void)size;
    h->version = 0;
}
static void ci_header_size(ferry_image_header *h, size_t *size)
{
    (void)size;
    h->header_size = 128;
}
static void ci_header_big(ferry_image_header *h, size_t *size)
{
    (void)size;
    h->header_size = 0xffff;
}
static void ci_width0(ferry_image_header *h, size_t *size)
{
    (void)size;
    h->width = 0;
}
static void ci_height0(ferry_image_header *h, size_t *size)
{
    (void)size;
    h->height = 0;
}
static void ci_width_overflow(ferry_image_header *h, size_t *size)
{
    (void)size;
    h->width = UINT32_MAX; /* width * 3 does not fit the step */
}
static void ci_step_overflow(ferry_image_header *h, size_t *size)
{
    (void)size;
    h->step = UINT32_MAX;
    h->height = UINT32_MAX; /* step * height is huge, the data is not */
}
static void ci_height_big(ferry_image_header *h, size_t *size)
{
    (void)size;
    h->height++;
}
static void ci_step_small(ferry_image_header *h, size_t *size)
{
    (void)size;
    h->step = h->width * 3 - 1;
}
static void ci_step_zero(ferry_image_header *h, size_t *size)
{
    (void)size;
    h->step = 0;
}
static void ci_step_bigger(ferry_image_header *h, size_t *size)
{
    (void)size;
    h->step += 1;
}
static void ci_data_size_plus(ferry_image_header *h, size_t *size)
{
    (void)size;
    h->data_size++;
}
static void ci_data_size_minus(ferry_image_header *h, size_t *size)
{
    (void)size;
    h->data_size--;
}
static void ci_data_size_max(ferry_image_header *h, size_t *size)
{
    (void)size;
    h->data_size = UINT64_MAX;
}
static void ci_offset_beyond(ferry_image_header *h, size_t *size)
{
    h->data_offset = *size + 64;
}
static void ci_offset_end(ferry_image_header *h, size_t *size)
{
    h->data_offset = (*size + 63) / 64 * 64;
}
static void ci_offset_max(ferry_image_header *h, size_t *size)
{
    (void)size;
    h->data_offset = UINT64_MAX - 63; /* offset + size wraps */
}
static void ci_offset_in_header(ferry_image_header *h, size_t *size)
{
    (void)size;
    h->data_offset = 64;
}
static void ci_offset_zero(ferry_image_header *h, size_t *size)
{
    (void)size;
    h->data_offset = 0;
}
static void ci_offset_unaligned(ferry_image_header *h, size_t *size)
{
    (void)size;
    h->data_offset = 385;
}
static void ci_offset_shifted(ferry_image_header *h, size_t *size)
{
    (void)size;
    h->data_offset = 448;
}
static void ci_encoding_unterminated(ferry_image_header *h, size_t *size)
{
    (void)size;
    memset(h->encoding, 'a', sizeof h->encoding);
}
static void ci_encoding_rgb8_unterminated(ferry_image_header *h, size_t *size)
{
    (void)size;
    memset(h->encoding + 4, ' ', sizeof h->encoding - 4); /* "rgb8   ..." without a NUL */
}
static void ci_encoding_unknown(ferry_image_header *h, size_t *size)
{
    (void)size;
    memcpy(h->encoding, "rgb9", 5);
}
static void ci_encoding_empty(ferry_image_header *h, size_t *size)
{
    (void)size;
    h->encoding[0] = '\0';
}
static void ci_encoding_other(ferry_image_header *h, size_t *size)
{
    (void)size;
    memcpy(h->encoding, "rgba8", 6);
}
static void ci_frame_unterminated(ferry_image_header *h, size_t *size)
{
    (void)size;
    memset(h->frame_id, 'f', sizeof h->frame_id);
}
static void ci_bigendian(ferry_image_header *h, size_t *size)
{
    (void)size;
    h->is_bigendian = 2;
}
static void ci_truncated(ferry_image_header *h, size_t *size)
{
    (void)h;
    *size -= 1;
}
static void ci_truncated_header(ferry_image_header *h, size_t *size)
{
    (void)h;
    *size = sizeof *h - 1;
}
static void ci_empty(ferry_image_header *h, size_t *size)
{
    (void)h;
    *size = 0;
}

/* Applies each corruption to a fresh copy of a valid sample; every view must fail. */
static void image_corruptions(const ferry_sample *valid, const image_corruption *list, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char *buf = copy_aligned(valid->data, valid->size);
        ferry_sample fake = *valid;
        fake.data = buf;
        size_t size = valid->size;
        ferry_image_view v;
        TU_OK(ferry_image_view_get(&fake, &v)); /* the copy itself is valid */
        list[i]((ferry_image_header *)(void *)buf, &size);
        fake.size = size;
        memset(&v, 0x5a, sizeof v);
        ferry_err err = ferry_image_view_get(&fake, &v);
        TU_CHECK_MSG(err == FERRY_EPROTO, "image corruption %zu: got %s, expected FERRY_EPROTO", i,
                     ferry_errname(err));
        const unsigned char *p = (const unsigned char *)&v;
        for (size_t k = 0; k < sizeof v; k++)
            TU_CHECK_MSG(p[k] == 0x5a, "image corruption %zu: view written at byte %zu", i, k);
        free(buf);
    }
}

static void test_image_hostile(void)
{
    endpoints e = open_endpoints(TOPIC_IMAGE, FERRY_IMAGE_TYPE_NAME, FERRY_IMAGE_TYPE_HASH, 0);
    static const image_corruption rgb[] = {
        ci_magic,
        ci_version,
        ci_version0,
        ci_version1,
        ci_header_size,
        ci_header_big,
        ci_width0,
        ci_height0,
        ci_width_overflow,
        ci_step_overflow,
        ci_height_big,
        ci_step_small,
        ci_step_zero,
        ci_step_bigger,
        ci_data_size_plus,
        ci_data_size_minus,
        ci_data_size_max,
        ci_offset_beyond,
        ci_offset_end,
        ci_offset_max,
        ci_offset_in_header,
        ci_offset_zero,
        ci_offset_unaligned,
        ci_offset_shifted,
        ci_encoding_unterminated,
        ci_encoding_rgb8_unterminated,
        ci_encoding_unknown,
        ci_encoding_empty,
        ci_encoding_other,
        ci_frame_unterminated,
        ci_bigendian,
        ci_truncated,
        ci_truncated_header,
        ci_empty,
    };
    ferry_image img;
    TU_OK(ferry_image_loan(e.pub, 64, 48, "rgb8", 0, &img));
    tu_fill(img.data, img.data_size, 7);
    TU_OK(ferry_image_publish(e.pub, &img));
    ferry_sample s;
    TU_TAKE(e.sub, &s);
    image_corruptions(&s, rgb, sizeof rgb / sizeof rgb[0]);
    TU_OK(ferry_release(e.sub, &s));

    /* nv12 with an odd width or height (data_size and step kept consistent otherwise). */
    TU_OK(ferry_image_loan(e.pub, 64, 48, "nv12", 0, &img));
    TU_OK(ferry_image_publish(e.pub, &img));
    TU_TAKE(e.sub, &s);
    unsigned char *buf = copy_aligned(s.data, s.size);
    ferry_image_header *h = (ferry_image_header *)(void *)buf;
    ferry_sample fake = s;
    fake.data = buf;
    ferry_image_view v;
    TU_OK(ferry_image_view_get(&fake, &v));
    h->width = 63; /* step 64 still >= width, data size unchanged */
    TU_ERR(ferry_image_view_get(&fake, &v), FERRY_EPROTO);
    h->width = 64;
    h->height = 47;
    h->data_size = 64u * 47 * 3 / 2;
    TU_ERR(ferry_image_view_get(&fake, &v), FERRY_EPROTO);
    h->height = 48;
    h->data_size = 64u * 48; /* a luma plane without its chroma */
    TU_ERR(ferry_image_view_get(&fake, &v), FERRY_EPROTO);
    h->data_size = 64u * 48 * 3 / 2;
    TU_OK(ferry_image_view_get(&fake, &v));
    free(buf);
    TU_OK(ferry_release(e.sub, &s));
    close_endpoints(&e);
}

/* --- point clouds ------------------------------------------------------------------------- */

static ferry_point_field field(const char *name, uint32_t offset, uint8_t datatype, uint32_t count)
{
    ferry_point_field f;
    memset(&f, 0, sizeof f);
    snprintf(f.name, sizeof f.name, "%s", name);
    f.offset = offset;
    f.datatype = datatype;
    f.count = count;
    return f;
}

static void xyzir(ferry_point_field *f)
{
    f[0] = field("x", 0, FERRY_POINT_FLOAT32, 1);
    f[1] = field("y", 4, FERRY_POINT_FLOAT32, 1);
    f[2] = field("z", 8, FERRY_POINT_FLOAT32, 1);
    f[3] = field("intensity", 12, FERRY_POINT_FLOAT32, 1);
    f[4] = field("ring", 16, FERRY_POINT_UINT16, 1);
}

static void cloud_round_trip(endpoints *e, uint32_t width, uint32_t height, uint32_t point_step,
                             uint32_t expected_step, uint64_t seed)
{
    ferry_point_field f[5];
    xyzir(f);
    ferry_pointcloud pc;
    TU_OK(ferry_pointcloud_loan(e->pub, width, height, f, 5, point_step, &pc));
    TU_EQ_PTR(pc.payload, pc.header);
    TU_EQ_U64((uintptr_t)pc.data % 64, 0);
    TU_EQ_U64(pc.header->point_step, expected_step);
    TU_EQ_U64(pc.header->row_step, (uint64_t)width * expected_step);
    TU_EQ_U64(pc.data_size, (uint64_t)width * expected_step * height);
    TU_EQ_U64(pc.header->data_offset, 3136);
    TU_EQ_U64(pc.payload_size, 3136 + pc.data_size);
    tu_fill(pc.data, pc.data_size, seed);
    pc.header->is_dense = 1;
    pc.header->stamp.sec = 42;
    pc.header->stamp.nanosec = 999999999;
    snprintf(pc.header->frame_id, sizeof pc.header->frame_id, "lidar");
    TU_OK(ferry_pointcloud_publish(e->pub, &pc));
    TU_CHECK(pc.payload == NULL);
    check_nothing_loaned(e->pub);

    ferry_sample s;
    TU_TAKE(e->sub, &s);
    ferry_pointcloud_view v;
    TU_OK(ferry_pointcloud_view_get(&s, &v));
    TU_EQ_U64(v.header.width, width);
    TU_EQ_U64(v.header.height, height);
    TU_EQ_U64(v.header.point_step, expected_step);
    TU_EQ_U64(v.header.nfields, 5);
    for (int i = 0; i < 5; i++) {
        TU_EQ_STR(v.header.fields[i].name, f[i].name);
        TU_EQ_U64(v.header.fields[i].offset, f[i].offset);
        TU_EQ_U64(v.header.fields[i].datatype, f[i].datatype);
        TU_EQ_U64(v.header.fields[i].count, f[i].count);
    }
    TU_EQ_U64(v.header.is_dense, 1);
    TU_EQ_U64(v.header.is_bigendian, 0);
    TU_CMP_I64(v.header.stamp.sec, ==, 42);
    TU_EQ_U64(v.header.stamp.nanosec, 999999999);
    TU_EQ_STR(v.header.frame_id, "lidar");
    TU_EQ_PTR(v.data, (const unsigned char *)s.data + 3136);
    TU_EQ_U64(v.data_size, (uint64_t)width * expected_step * height);
    TU_EQ_U64(tu_verify(v.data, v.data_size, seed), SIZE_MAX);
    TU_OK(ferry_release(e->sub, &s));
}

static void test_cloud_round_trip(void)
{
    endpoints e =
        open_endpoints(TOPIC_CLOUD, FERRY_POINTCLOUD_TYPE_NAME, FERRY_POINTCLOUD_TYPE_HASH, 0);
    cloud_round_trip(&e, 100000, 1, 0, 18, 1); /* packed */
    cloud_round_trip(&e, 1024, 64, 32, 32, 2); /* organised, padded */
    cloud_round_trip(&e, 0, 1, 0, 18, 3);      /* empty */
    /* Fields that overlap and an array field. */
    ferry_point_field f[3] = {field("rgb", 0, FERRY_POINT_FLOAT32, 1),
                              field("rgba", 0, FERRY_POINT_UINT32, 1),
                              field("normal", 8, FERRY_POINT_FLOAT64, 3)};
    ferry_pointcloud pc;
    TU_OK(ferry_pointcloud_loan(e.pub, 10, 1, f, 3, 0, &pc));
    TU_EQ_U64(pc.header->point_step, 32);
    TU_OK(ferry_pointcloud_publish(e.pub, &pc));
    ferry_sample s;
    TU_TAKE(e.sub, &s);
    ferry_pointcloud_view v;
    TU_OK(ferry_pointcloud_view_get(&s, &v));
    TU_EQ_U64(v.header.nfields, 3);
    TU_EQ_U64(v.data_size, 320);
    TU_OK(ferry_release(e.sub, &s));
    close_endpoints(&e);
}

static void expect_cloud_loan_refused(endpoints *e, ferry_publisher *pub, uint32_t w, uint32_t h,
                                      const ferry_point_field *f, uint32_t n, uint32_t step,
                                      bool pass_out, ferry_err expected)
{
    ferry_pointcloud pc;
    memset(&pc, 0xab, sizeof pc);
    TU_ERR(ferry_pointcloud_loan(pub, w, h, f, n, step, pass_out ? &pc : NULL), expected);
    if (pass_out)
        TU_CHECK(pc.payload == NULL && pc.header == NULL && pc.data == NULL && pc.data_size == 0 &&
                 pc.payload_size == 0);
    check_nothing_loaned(e->pub);
}

static void test_cloud_invalid_arguments(void)
{
    endpoints e = open_endpoints(TOPIC_CLOUD, FERRY_POINTCLOUD_TYPE_NAME,
                                 FERRY_POINTCLOUD_TYPE_HASH, (size_t)1 << 20);
    ferry_point_field f[FERRY_POINTCLOUD_FIELDS_MAX + 1];
    for (uint32_t i = 0; i < FERRY_POINTCLOUD_FIELDS_MAX + 1; i++) {
        char name[8];
        snprintf(name, sizeof name, "f%u", i);
        f[i] = field(name, i, FERRY_POINT_UINT8, 1);
    }
    expect_cloud_loan_refused(&e, NULL, 10, 1, f, 1, 0, true, FERRY_EINVAL);
    expect_cloud_loan_refused(&e, e.pub, 10, 1, NULL, 1, 0, true, FERRY_EINVAL);
    expect_cloud_loan_refused(&e, e.pub, 10, 1, f, 1, 0, false, FERRY_EINVAL);
    expect_cloud_loan_refused(&e, e.pub, 10, 1, f, 0, 0, true, FERRY_EINVAL);
    expect_cloud_loan_refused(&e, e.pub, 10, 1, f, FERRY_POINTCLOUD_FIELDS_MAX + 1, 0, true,
                              FERRY_EINVAL);
    expect_cloud_loan_refused(&e, e.pub, 10, 1, f, UINT32_MAX, 0, true, FERRY_EINVAL);
    /* FERRY_POINTCLOUD_FIELDS_MAX fields are fine, published and viewed. */
    ferry_pointcloud pc;
    TU_OK(ferry_pointcloud_loan(e.pub, 10, 1, f, FERRY_POINTCLOUD_FIELDS_MAX, 0, &pc));
    TU_EQ_U64(pc.header->point_step, FERRY_POINTCLOUD_FIELDS_MAX);
    TU_OK(ferry_pointcloud_publish(e.pub, &pc));
    {
        ferry_sample many;
        TU_TAKE(e.sub, &many);
        ferry_pointcloud_view mv;
        TU_OK(ferry_pointcloud_view_get(&many, &mv));
        TU_EQ_U64(mv.header.nfields, FERRY_POINTCLOUD_FIELDS_MAX);
        TU_EQ_STR(mv.header.fields[FERRY_POINTCLOUD_FIELDS_MAX - 1].name, "f63");
        TU_OK(ferry_release(e.sub, &many));
    }

    ferry_point_field bad[2];
    bad[0] = field("x", 0, FERRY_POINT_FLOAT32, 1);
    bad[1] = field("", 4, FERRY_POINT_FLOAT32, 1);
    expect_cloud_loan_refused(&e, e.pub, 10, 1, bad, 2, 0, true, FERRY_EINVAL);
    memset(bad[1].name, 'n', sizeof bad[1].name);
    expect_cloud_loan_refused(&e, e.pub, 10, 1, bad, 2, 0, true, FERRY_EINVAL);
    bad[1] = field("x", 4, FERRY_POINT_FLOAT32, 1);
    expect_cloud_loan_refused(&e, e.pub, 10, 1, bad, 2, 0, true, FERRY_EINVAL);
    bad[1] = field("y", 4, 0, 1);
    expect_cloud_loan_refused(&e, e.pub, 10, 1, bad, 2, 0, true, FERRY_EINVAL);
    bad[1] = field("y", 4, 9, 1);
    expect_cloud_loan_refused(&e, e.pub, 10, 1, bad, 2, 0, true, FERRY_EINVAL);
    bad[1] = field("y", 4, FERRY_POINT_FLOAT32, 0);
    expect_cloud_loan_refused(&e, e.pub, 10, 1, bad, 2, 0, true, FERRY_EINVAL);
    bad[1] = field("y", 4, FERRY_POINT_FLOAT32, 1);
    expect_cloud_loan_refused(&e, e.pub, 10, 1, bad, 2, 7, true, FERRY_EINVAL);
    bad[1] = field("y", UINT32_MAX, FERRY_POINT_FLOAT64, UINT32_MAX);
    expect_cloud_loan_refused(&e, e.pub, 10, 1, bad, 2, 0, true, FERRY_EINVAL);
    bad[1] = field("y", 4, FERRY_POINT_FLOAT32, 1);
    /* row_step must fit 32 bits; then the size must fit max_sample_size. */
    expect_cloud_loan_refused(&e, e.pub, 0x20000000u, 1, bad, 2, 8, true, FERRY_EINVAL);
    expect_cloud_loan_refused(&e, e.pub, 0x1fffffffu, UINT32_MAX, bad, 2, 8, true, FERRY_ETOOBIG);
    TU_OK(ferry_pointcloud_loan(e.pub, 10, 1, bad, 2, 8, &pc));
    TU_OK(ferry_pointcloud_loan_release(e.pub, &pc));

    memset(&pc, 0, sizeof pc);
    TU_ERR(ferry_pointcloud_publish(NULL, &pc), FERRY_EINVAL);
    TU_ERR(ferry_pointcloud_publish(e.pub, NULL), FERRY_EINVAL);
    TU_ERR(ferry_pointcloud_publish(e.pub, &pc), FERRY_EINVAL);
    TU_ERR(ferry_pointcloud_loan_release(NULL, &pc), FERRY_EINVAL);
    TU_ERR(ferry_pointcloud_loan_release(e.pub, NULL), FERRY_EINVAL);
    TU_ERR(ferry_pointcloud_loan_release(e.pub, &pc), FERRY_EINVAL);

    /* A header the caller broke is refused at publish and stays on loan. */
    TU_OK(ferry_pointcloud_loan(e.pub, 10, 1, bad, 2, 0, &pc));
    pc.header->nfields = 3;
    TU_ERR(ferry_pointcloud_publish(e.pub, &pc), FERRY_EINVAL);
    pc.header->nfields = 2;
    memset(pc.header->frame_id, 'f', sizeof pc.header->frame_id);
    TU_ERR(ferry_pointcloud_publish(e.pub, &pc), FERRY_EINVAL);
    TU_OK(ferry_pointcloud_loan_release(e.pub, &pc));
    check_nothing_loaned(e.pub);

    ferry_pointcloud_view v;
    ferry_sample s;
    memset(&s, 0, sizeof s);
    TU_ERR(ferry_pointcloud_view_get(NULL, &v), FERRY_EINVAL);
    TU_ERR(ferry_pointcloud_view_get(&s, NULL), FERRY_EINVAL);
    TU_ERR(ferry_pointcloud_view_get(&s, &v), FERRY_EPROTO);
    close_endpoints(&e);
}

typedef void (*cloud_corruption)(ferry_pointcloud_header *h, size_t *size);

static void cc_magic(ferry_pointcloud_header *h, size_t *size)
{
    (void)size;
    h->magic = FERRY_IMAGE_MAGIC;
}
static void cc_version(ferry_pointcloud_header *h, size_t *size)
{
    (void)size;
    h->version = 7;
}
static void cc_header_size(ferry_pointcloud_header *h, size_t *size)
{
    (void)size;
    h->header_size = 144;
}
static void cc_nfields0(ferry_pointcloud_header *h, size_t *size)
{
    (void)size;
    h->nfields = 0;
}
static void cc_nfields_over(ferry_pointcloud_header *h, size_t *size)
{
    (void)size;
    h->nfields = FERRY_POINTCLOUD_FIELDS_MAX + 1;
}
static void cc_nfields_huge(ferry_pointcloud_header *h, size_t *size)
{
    (void)size;
    h->nfields = UINT32_MAX;
}
static void cc_nfields_more(ferry_pointcloud_header *h, size_t *size)
{
    (void)size;
    h->nfields = 6; /* the sixth entry is zeroed: empty name */
}
static void cc_field_beyond(ferry_pointcloud_header *h, size_t *size)
{
    (void)size;
    h->fields[4].offset = h->point_step - 1;
}
static void cc_field_offset_huge(ferry_pointcloud_header *h, size_t *size)
{
    (void)size;
    h->fields[0].offset = UINT32_MAX;
}
static void cc_field_count_huge(ferry_pointcloud_header *h, size_t *size)
{
    (void)size;
    h->fields[2].count = UINT32_MAX;
}
static void cc_field_count0(ferry_pointcloud_header *h, size_t *size)
{
    (void)size;
    h->fields[2].count = 0;
}
static void cc_field_type0(ferry_pointcloud_header *h, size_t *size)
{
    (void)size;
    h->fields[1].datatype = 0;
}
static void cc_field_type9(ferry_pointcloud_header *h, size_t *size)
{
    (void)size;
    h->fields[1].datatype = 9;
}
static void cc_field_type255(ferry_pointcloud_header *h, size_t *size)
{
    (void)size;
    h->fields[1].datatype = 255;
}
static void cc_field_name_unterminated(ferry_pointcloud_header *h, size_t *size)
{
    (void)size;
    memset(h->fields[3].name, 'i', sizeof h->fields[3].name);
}
static void cc_field_name_empty(ferry_pointcloud_header *h, size_t *size)
{
    (void)size;
    h->fields[0].name[0] = '\0';
}
static void cc_field_name_dup(ferry_pointcloud_header *h, size_t *size)
{
    (void)size;
    memcpy(h->fields[1].name, "x", 2);
}
static void cc_point_step0(ferry_pointcloud_header *h, size_t *size)
{
    (void)size;
    h->point_step = 0;
    h->row_step = 0;
    h->data_size = 0;
}
static void cc_point_step_small(ferry_pointcloud_header *h, size_t *size)
{
    (void)size;
    h->point_step = 17; /* ring ends at 18 */
    h->row_step = h->width * 17;
    h->data_size = (uint64_t)h->row_step * h->height;
}
static void cc_row_step(ferry_pointcloud_header *h, size_t *size)
{
    (void)size;
    h->row_step += 1;
}
static void cc_row_overflow(ferry_pointcloud_header *h, size_t *size)
{
    (void)size;
    h->width = 0x10000000u; /* width * 18 wraps 32 bits */
    h->row_step = (uint32_t)(h->width * 18u);
    h->data_size = h->row_step;
}
static void cc_width_big(ferry_pointcloud_header *h, size_t *size)
{
    (void)size;
    h->width = 0x0e000000u; /* consistent, but the data is not in the sample */
    h->row_step = h->width * 18u;
    h->data_size = (uint64_t)h->row_step * h->height;
}
static void cc_height_big(ferry_pointcloud_header *h, size_t *size)
{
    (void)size;
    h->height = UINT32_MAX;
}
static void cc_data_size(ferry_pointcloud_header *h, size_t *size)
{
    (void)size;
    h->data_size += 1;
}
static void cc_data_size_max(ferry_pointcloud_header *h, size_t *size)
{
    (void)size;
    h->data_size = UINT64_MAX;
}
static void cc_offset_beyond(ferry_pointcloud_header *h, size_t *size)
{
    h->data_offset = (*size + 63) / 64 * 64 + 64;
}
static void cc_offset_max(ferry_pointcloud_header *h, size_t *size)
{
    (void)size;
    h->data_offset = UINT64_MAX - 63;
}
static void cc_offset_in_header(ferry_pointcloud_header *h, size_t *size)
{
    (void)size;
    h->data_offset = 3072;
}
static void cc_offset_unaligned(ferry_pointcloud_header *h, size_t *size)
{
    (void)size;
    h->data_offset = 3201;
}
static void cc_frame_unterminated(ferry_pointcloud_header *h, size_t *size)
{
    (void)size;
    memset(h->frame_id, 'f', sizeof h->frame_id);
}
static void cc_bigendian(ferry_pointcloud_header *h, size_t *size)
{
    (void)size;
    h->is_bigendian = 255;
}
static void cc_dense(ferry_pointcloud_header *h, size_t *size)
{
    (void)size;
    h->is_dense = 2;
}
static void cc_truncated(ferry_pointcloud_header *h, size_t *size)
{
    (void)h;
    *size -= 1;
}
static void cc_truncated_header(ferry_pointcloud_header *h, size_t *size)
{
    (void)h;
    *size = sizeof *h - 1;
}

static void test_cloud_hostile(void)
{
    endpoints e =
        open_endpoints(TOPIC_CLOUD, FERRY_POINTCLOUD_TYPE_NAME, FERRY_POINTCLOUD_TYPE_HASH, 0);
    static const cloud_corruption list[] = {
        cc_magic,
        cc_version,
        cc_header_size,
        cc_nfields0,
        cc_nfields_over,
        cc_nfields_huge,
        cc_nfields_more,
        cc_field_beyond,
        cc_field_offset_huge,
        cc_field_count_huge,
        cc_field_count0,
        cc_field_type0,
        cc_field_type9,
        cc_field_type255,
        cc_field_name_unterminated,
        cc_field_name_empty,
        cc_field_name_dup,
        cc_point_step0,
        cc_point_step_small,
        cc_row_step,
        cc_row_overflow,
        cc_width_big,
        cc_height_big,
        cc_data_size,
        cc_data_size_max,
        cc_offset_beyond,
        cc_offset_max,
        cc_offset_in_header,
        cc_offset_unaligned,
        cc_frame_unterminated,
        cc_bigendian,
        cc_dense,
        cc_truncated,
        cc_truncated_header,
    };
    ferry_point_field f[5];
    xyzir(f);
    ferry_pointcloud pc;
    TU_OK(ferry_pointcloud_loan(e.pub, 100, 4, f, 5, 0, &pc));
    tu_fill(pc.data, pc.data_size, 9);
    TU_OK(ferry_pointcloud_publish(e.pub, &pc));
    ferry_sample s;
    TU_TAKE(e.sub, &s);
    for (size_t i = 0; i < sizeof list / sizeof list[0]; i++) {
        unsigned char *buf = copy_aligned(s.data, s.size);
        ferry_sample fake = s;
        fake.data = buf;
        size_t size = s.size;
        ferry_pointcloud_view v;
        TU_OK(ferry_pointcloud_view_get(&fake, &v));
        list[i]((ferry_pointcloud_header *)(void *)buf, &size);
        fake.size = size;
        memset(&v, 0x5a, sizeof v);
        ferry_err err = ferry_pointcloud_view_get(&fake, &v);
        TU_CHECK_MSG(err == FERRY_EPROTO, "cloud corruption %zu: got %s, expected FERRY_EPROTO", i,
                     ferry_errname(err));
        const unsigned char *p = (const unsigned char *)&v;
        for (size_t k = 0; k < sizeof v; k++)
            TU_CHECK_MSG(p[k] == 0x5a, "cloud corruption %zu: view written at byte %zu", i, k);
        free(buf);
    }
    /* An image is not a point cloud, nor the other way round. */
    ferry_image_view iv;
    TU_ERR(ferry_image_view_get(&s, &iv), FERRY_EPROTO);
    TU_OK(ferry_release(e.sub, &s));
    close_endpoints(&e);
}

int main(void)
{
    TU_RUN(test_constants);
    TU_RUN(test_layouts);
    TU_RUN(test_image_round_trip);
    TU_RUN(test_image_invalid_arguments);
    TU_RUN(test_image_hostile);
    TU_RUN(test_cloud_round_trip);
    TU_RUN(test_cloud_invalid_arguments);
    TU_RUN(test_cloud_hostile);
    return 0;
}
