/*
 * A hostile DDS peer: a plain Cyclone DDS program (no ferry code) that publishes
 * sensor_msgs/Image and sensor_msgs/PointCloud2 on two DDS topics, a good sample (a synthetic
 * frame, pattern.h) between every two bad ones: each bad one breaks one rule (geometry, sizes,
 * overflows, encodings, strings too long or without their NUL, fields outside the point, ...).
 * Its types (ros2_raw_types.idl) carry strings as octet sequences and booleans as octets, so it
 * can put on the wire what a well-behaved writer cannot.
 *
 * Prints one line per bad case with what must happen to it: "bridge" (the bridge must count it
 * as in_invalid, log it and drop it) or "dds" (malformed CDR that Cyclone's deserialiser itself
 * refuses, with a "deserialization ... failed" line of its own: the bridge never sees it; Cyclone
 * 0.10 refuses strings without their NUL and booleans other than 0 / 1). Then a summary:
 *   plain_bad: good_images N good_clouds N bad_bridge N bad_dds N
 * Exits 0 when every sample was written.
 *
 * usage: bridge_plain_bad IMAGE_TOPIC CLOUD_TOPIC [DOMAIN]
 */
#include "pattern.h"
#include "ros2_raw_types.h"

#include <dds/dds.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define IMG_W 64u
#define IMG_H 48u
#define IMG_STEP (IMG_W * 3u)
#define IMG_BYTES (IMG_STEP * IMG_H)
#define PTS 256u
#define PT_STEP 16u
#define CLOUD_BYTES (PTS * PT_STEP)
#define PERIOD_MS 40

typedef sensor_msgs_msg_dds__Image_ image_msg;
typedef sensor_msgs_msg_dds__PointCloud2_ cloud_msg;
typedef sensor_msgs_msg_dds__PointField_ field_msg;

static unsigned char pixels[IMG_BYTES + 64];
static unsigned char points[CLOUD_BYTES + 64];
static field_msg fields[65]; /* FERRY_POINTCLOUD_FIELDS_MAX + 1 */
static int written, failed;

/* A string of n bytes as it goes on the wire: with its NUL when terminated is true. */
static void set_str(dds_sequence_octet *seq, const char *s, size_t n, bool terminated)
{
    seq->_buffer = (uint8_t *)(uintptr_t)s;
    seq->_length = seq->_maximum = (uint32_t)(n + (terminated ? 1 : 0));
    seq->_release = false;
}

/* A string of n < sizeof long_buf 'f's, terminated; valid until the next call. */
static char long_buf[100000];

static const char *long_str(size_t n)
{
    memset(long_buf, 'f', n);
    long_buf[n] = '\0';
    return long_buf;
}

static void stamp_now(builtin_interfaces_msg_dds__Time_ *t)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    t->sec_ = (int32_t)ts.tv_sec;
    t->nanosec_ = (uint32_t)ts.tv_nsec;
}

static int64_t mono_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void good_image(image_msg *m, uint64_t seq)
{
    memset(m, 0, sizeof *m);
    stamp_now(&m->header_.stamp_);
    set_str(&m->header_.frame_id_, "bad_cam", 7, true);
    m->height_ = IMG_H;
    m->width_ = IMG_W;
    set_str(&m->encoding_, "rgb8", 4, true);
    m->step_ = IMG_STEP;
    pat_fill(pixels, IMG_BYTES, seq, mono_ns());
    m->data_._buffer = pixels;
    m->data_._length = m->data_._maximum = IMG_BYTES;
}

static void good_cloud(cloud_msg *m, uint64_t seq)
{
    static const char *const names[4] = {"x", "y", "z", "intensity"};
    uint32_t i;

    memset(m, 0, sizeof *m);
    memset(fields, 0, sizeof fields);
    for (i = 0; i < 65; i++) {
        set_str(&fields[i].name_, names[i % 4], strlen(names[i % 4]), true);
        fields[i].offset_ = 4 * (i % 4);
        fields[i].datatype_ = 7;
        fields[i].count_ = 1;
    }
    stamp_now(&m->header_.stamp_);
    set_str(&m->header_.frame_id_, "bad_lidar", 9, true);
    m->height_ = 1;
    m->width_ = PTS;
    m->fields_._buffer = fields;
    m->fields_._length = m->fields_._maximum = 4;
    m->point_step_ = PT_STEP;
    m->row_step_ = PTS * PT_STEP;
    pat_fill(points, CLOUD_BYTES, seq, mono_ns());
    m->data_._buffer = points;
    m->data_._length = m->data_._maximum = CLOUD_BYTES;
}

/* Breaks good image m as bad case i; its name and fate, or false past the last case. */
static bool bad_image(image_msg *m, int i, const char **name, const char **fate)
{
    *fate = "bridge";
    switch (i) {
    case 0:
        *name = "step below width * 3";
        m->step_ = IMG_STEP - 1;
        break;
    case 1:
        *name = "data shorter than step * height";
        m->data_._length = IMG_BYTES - 1;
        break;
    case 2:
        *name = "data longer than step * height";
        m->data_._length = IMG_BYTES + 1;
        break;
    case 3:
        *name = "unknown encoding";
        set_str(&m->encoding_, "rgb9", 4, true);
        break;
    case 4:
        *name = "empty encoding";
        set_str(&m->encoding_, "", 0, true);
        break;
    case 5:
        *name = "height * step overflows 32 bits";
        m->width_ = 0x5555;
        m->step_ = 0x10000;
        m->height_ = 0x10000;
        break;
    case 6:
        *name = "huge width";
        m->width_ = 0xffffffffu;
        m->step_ = 0xffffffffu;
        m->height_ = 1;
        break;
    case 7:
        *name = "huge height";
        m->height_ = 0xffffffffu;
        break;
    case 8:
        *name = "frame_id of 256 bytes";
        set_str(&m->header_.frame_id_, long_str(256), 256, true);
        break;
    case 9:
        *name = "frame_id of 99999 bytes";
        set_str(&m->header_.frame_id_, long_str(99999), 99999, true);
        break;
    case 10:
        *name = "encoding of 32 bytes";
        set_str(&m->encoding_, long_str(32), 32, true);
        break;
    case 11:
        *name = "is_bigendian 2";
        m->is_bigendian_ = 2;
        break;
    case 12:
        *name = "nanosec 10^9";
        m->header_.stamp_.nanosec_ = 1000000000u;
        break;
    case 13:
        *name = "frame_id without its NUL";
        *fate = "dds";
        set_str(&m->header_.frame_id_, "bad_cam", 7, false);
        break;
    case 14:
        *name = "encoding without its NUL";
        *fate = "dds";
        set_str(&m->encoding_, "rgb8", 4, false);
        break;
    case 15:
        *name = "encoding of length 0 (no NUL either)";
        *fate = "dds";
        set_str(&m->encoding_, "", 0, false);
        break;
    default:
        return false;
    }
    return true;
}

static bool bad_cloud(cloud_msg *m, int i, const char **name, const char **fate)
{
    *fate = "bridge";
    switch (i) {
    case 0:
        *name = "field outside point_step";
        fields[3].offset_ = 14;
        break;
    case 1:
        *name = "row_step != width * point_step";
        m->row_step_ = PTS * PT_STEP - 1;
        break;
    case 2:
        *name = "data shorter than row_step * height";
        m->data_._length = CLOUD_BYTES - 1;
        break;
    case 3:
        *name = "point_step 0";
        m->point_step_ = 0;
        m->row_step_ = 0;
        break;
    case 4:
        *name = "no field";
        m->fields_._length = 0;
        break;
    case 5:
        *name = "65 fields";
        m->fields_._length = 65;
        break;
    case 6:
        *name = "empty field name";
        set_str(&fields[1].name_, "", 0, true);
        break;
    case 7:
        *name = "unknown datatype 9";
        fields[2].datatype_ = 9;
        break;
    case 8:
        *name = "datatype 0";
        fields[2].datatype_ = 0;
        break;
    case 9:
        *name = "field count 0";
        fields[0].count_ = 0;
        break;
    case 10:
        *name = "field offset near 2^32";
        fields[0].offset_ = 0xfffffffcu;
        break;
    case 11:
        *name = "field count * size overflows 32 bits";
        fields[0].count_ = 0x40000001u;
        break;
    case 12:
        *name = "duplicate field names";
        set_str(&fields[1].name_, "x", 1, true);
        break;
    case 13:
        *name = "field name of 32 bytes";
        set_str(&fields[0].name_, long_str(32), 32, true);
        break;
    case 14:
        *name = "frame_id of 256 bytes";
        set_str(&m->header_.frame_id_, long_str(256), 256, true);
        break;
    case 15:
        *name = "width * point_step overflows 32 bits";
        m->width_ = 0x10000000u;
        m->row_step_ = 0;
        break;
    case 16:
        *name = "row_step * height far beyond the data";
        m->height_ = 0x100000u;
        break;
    case 17:
        *name = "nanosec 10^9";
        m->header_.stamp_.nanosec_ = 1000000000u;
        break;
    case 18:
        *name = "is_bigendian 2";
        *fate = "dds";
        m->is_bigendian_ = 2;
        break;
    case 19:
        *name = "is_dense 7";
        *fate = "dds";
        m->is_dense_ = 7;
        break;
    case 20:
        *name = "field name without its NUL";
        *fate = "dds";
        set_str(&fields[0].name_, "x", 1, false);
        break;
    case 21:
        *name = "frame_id without its NUL";
        *fate = "dds";
        set_str(&m->header_.frame_id_, "bad_lidar", 9, false);
        break;
    default:
        return false;
    }
    return true;
}

static void put(dds_entity_t wr, const void *m)
{
    if (dds_write(wr, m) == DDS_RETCODE_OK)
        written++;
    else
        failed++;
    dds_sleepfor(DDS_MSECS(PERIOD_MS));
}

static dds_entity_t make_writer(dds_entity_t pp, const dds_topic_descriptor_t *d, const char *name)
{
    dds_data_representation_id_t rep = DDS_DATA_REPRESENTATION_XCDR1;
    dds_qos_t *q = dds_create_qos();
    dds_entity_t tp = dds_create_topic(pp, d, name, NULL, NULL), wr;

    dds_qset_reliability(q, DDS_RELIABILITY_RELIABLE, DDS_SECS(1));
    dds_qset_history(q, DDS_HISTORY_KEEP_LAST, 100);
    dds_qset_data_representation(q, 1, &rep);
    wr = tp < 0 ? tp : dds_create_writer(pp, tp, q, NULL);
    dds_delete_qos(q);
    return wr;
}

static void wait_match(dds_entity_t wr)
{
    dds_publication_matched_status_t st;
    int i;

    for (i = 0; i < 150; i++) {
        if (dds_get_publication_matched_status(wr, &st) == DDS_RETCODE_OK && st.current_count > 0)
            return;
        dds_sleepfor(DDS_MSECS(100));
    }
}

int main(int argc, char **argv)
{
    image_msg im;
    cloud_msg cm;
    dds_entity_t pp, wi, wc;
    uint32_t domain = argc > 3 ? (uint32_t)strtoul(argv[3], NULL, 10) : 0;
    long good_images = 0, good_clouds = 0, bad_bridge = 0, bad_dds = 0;
    const char *name, *fate;
    int i;

    if (argc < 3) {
        fprintf(stderr, "usage: %s IMAGE_TOPIC CLOUD_TOPIC [DOMAIN]\n", argv[0]);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    pp = dds_create_participant(domain, NULL, NULL);
    wi = pp < 0 ? pp : make_writer(pp, &sensor_msgs_msg_dds__Image__desc, argv[1]);
    wc = pp < 0 ? pp : make_writer(pp, &sensor_msgs_msg_dds__PointCloud2__desc, argv[2]);
    if (pp < 0 || wi < 0 || wc < 0) {
        fprintf(stderr, "plain_bad: cannot create the writers\n");
        return 1;
    }
    wait_match(wi);
    wait_match(wc);
    /* The far side's ferry subscribers connect to the bridge's new publishers meanwhile. */
    dds_sleepfor(DDS_MSECS(1500));

    for (i = 0;; i++) {
        good_image(&im, (uint64_t)++good_images);
        put(wi, &im);
        good_image(&im, 0);
        if (!bad_image(&im, i, &name, &fate))
            break;
        printf("case image: %s: %s\n", name, fate);
        put(wi, &im);
        strcmp(fate, "dds") == 0 ? bad_dds++ : bad_bridge++;
    }
    for (i = 0;; i++) {
        good_cloud(&cm, (uint64_t)++good_clouds);
        put(wc, &cm);
        good_cloud(&cm, 0);
        if (!bad_cloud(&cm, i, &name, &fate))
            break;
        printf("case cloud: %s: %s\n", name, fate);
        put(wc, &cm);
        strcmp(fate, "dds") == 0 ? bad_dds++ : bad_bridge++;
    }
    /* Let the reliable protocol deliver the last samples before the writers go. */
    dds_sleepfor(DDS_MSECS(500));
    printf("plain_bad: good_images %ld good_clouds %ld bad_bridge %ld bad_dds %ld\n", good_images,
           good_clouds, bad_bridge, bad_dds);
    dds_delete(pp);
    return failed == 0 ? 0 : 1;
}
