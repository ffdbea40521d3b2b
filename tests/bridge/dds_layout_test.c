/*
 * src/bridge/bridge_dds.c in one process, without a network: for every kind the bridge carries, a
 * sample published on ferry is viewed, made a sample of its Cyclone type by walking the table
 * alongside the type's ops, and that sample made a parsed message again; republished, it is
 * byte for byte what the same sample gives through the CDR writer and reader of src/ros2. The
 * DDS samples' pointers point into the view and the sample (nothing copied), booleans are 0 or 1,
 * and a bulk or a count the DDS type cannot hold is refused.
 */
#include "testutil.h"

#include "../ros2/pair.h"

#include "bridge_internal.h"
#include "msg_table.h"

#include "ros2_sensor_msgs.h"

#include <ferry/msg.h>

#include <stdlib.h>
#include <string.h>

static _Alignas(max_align_t) uint8_t view[FERRY_ROS2_VIEW_MAX];
static _Alignas(max_align_t) uint8_t sample[1024];
static _Alignas(max_align_t) uint8_t room[4096];

/* Republishes msg on p and gives back a copy of what p's subscriber takes (*size bytes). */
static uint8_t *republished(pair *p, const ferry_ros2_msg *msg, size_t *size)
{
    const char *why = NULL;
    ferry_sample s;
    uint8_t *copy;

    TU_ERR(ferry_ros2_publish(p->pub, msg, &why), FERRY_OK);
    TU_TAKE(p->sub, &s);
    copy = malloc(s.size);
    TU_CHECK(copy != NULL);
    memcpy(copy, s.data, s.size);
    *size = s.size;
    TU_OK(ferry_release(p->sub, &s));
    return copy;
}

/* The sample taken from a through DDS and through CDR, republished on b: the same bytes. */
static void check_kind(ferry_node *node, pair *a, ferry_ros2_kind kind)
{
    const ferry_ros2_kind_desc *d = ferry_ros2_kind_desc_of(kind);
    ferry_ros2_cdr *cdr = malloc(sizeof *cdr);
    pair b = open_pair(node, "/dds/b", kind);
    ferry_ros2_msg via_dds, via_cdr;
    uint8_t *flat, *x, *y;
    size_t nx, ny, at = 0;
    ferry_sample s;
    unsigned i;

    TU_CHECK(cdr != NULL);
    TU_TAKE(a->sub, &s);
    TU_OK(d->view_get(&s, view));
    TU_CHECK(ferry__bridge_dds_from_view(kind, view, sample, sizeof sample, room, sizeof room));
    TU_CHECK(ferry__bridge_dds_to_msg(kind, sample, &via_dds));
    TU_EQ_U64(via_dds.kind, kind);
    TU_OK(ferry_ros2_cdr_encode(kind, &s, cdr));
    flat = malloc(cdr->size);
    TU_CHECK(flat != NULL);
    for (i = 0; i < cdr->niov; i++) {
        memcpy(flat + at, cdr->iov[i].iov_base, cdr->iov[i].iov_len);
        at += cdr->iov[i].iov_len;
    }
    TU_CHECK(ferry_ros2_cdr_parse(kind, flat, at, &via_cdr) == FERRY_ROS2_CDR_OK);
    x = republished(&b, &via_dds, &nx);
    y = republished(&b, &via_cdr, &ny);
    TU_EQ_U64(nx, ny);
    TU_CHECK_MSG(memcmp(x, y, nx) == 0, "%s: through DDS and through CDR differ",
                 ferry_ros2_name(kind));
    /* Too little room, or none, for the DDS sample: refused, not overrun. */
    TU_CHECK(!ferry__bridge_dds_from_view(kind, view, sample, 8, room, sizeof room));
    free(x);
    free(y);
    free(flat);
    free(cdr);
    TU_OK(ferry_release(a->sub, &s));
    close_pair(&b);
}

static void test_image(void)
{
    ferry_node *node = tu_node("dds");
    pair a = open_pair(node, "/dds/a", FERRY_ROS2_IMAGE);
    const sensor_msgs_msg_dds__Image_ *m = (const void *)sample;
    ferry_image_view *v = (ferry_image_view *)(void *)view;
    ferry_image img;

    TU_OK(ferry_image_loan(a.pub, 6, 2, "mono16", 0, &img));
    for (size_t i = 0; i < img.data_size; i++)
        ((uint8_t *)img.data)[i] = (uint8_t)(i * 7);
    img.header->stamp.sec = 1700000000;
    img.header->stamp.nanosec = 999999999;
    strcpy(img.header->frame_id, "camera_optical");
    img.header->is_bigendian = 1;
    TU_OK(ferry_image_publish(a.pub, &img));
    check_kind(node, &a, FERRY_ROS2_IMAGE);
    /* What the DDS sample was: pointers into the view, the bulk in place. */
    TU_EQ_PTR(m->header_.frame_id_, v->header.frame_id);
    TU_EQ_PTR(m->encoding_, v->header.encoding);
    TU_EQ_PTR(m->data_._buffer, v->data);
    TU_EQ_U64(m->data_._length, 24);
    TU_CHECK(!m->data_._release);
    TU_EQ_U64(m->header_.stamp_.nanosec_, 999999999);
    TU_EQ_U64(m->step_, 12);
    TU_EQ_U64(m->is_bigendian_, 1);
    close_pair(&a);
    TU_OK(ferry_node_destroy(node));
}

static void test_cloud(void)
{
    ferry_node *node = tu_node("dds");
    pair a = open_pair(node, "/dds/a", FERRY_ROS2_CLOUD);
    const sensor_msgs_msg_dds__PointCloud2_ *m = (const void *)sample;
    ferry_point_field f[3] = {{"x", 0, FERRY_POINT_FLOAT32, {0}, 1},
                              {"y", 4, FERRY_POINT_FLOAT32, {0}, 1},
                              {"rgb", 8, FERRY_POINT_UINT8, {0}, 3}};
    ferry_pointcloud pc;

    TU_OK(ferry_pointcloud_loan(a.pub, 5, 2, f, 3, 12, &pc));
    memset(pc.data, 0x3c, pc.data_size);
    strcpy(pc.header->frame_id, "lidar");
    pc.header->is_dense = 1;
    TU_OK(ferry_pointcloud_publish(a.pub, &pc));
    check_kind(node, &a, FERRY_ROS2_CLOUD);
    TU_EQ_U64(m->fields_._length, 3);
    TU_EQ_STR(m->fields_._buffer[2].name_, "rgb");
    TU_EQ_U64(m->fields_._buffer[2].offset_, 8);
    TU_EQ_U64(m->fields_._buffer[2].datatype_, FERRY_POINT_UINT8);
    TU_EQ_U64(m->fields_._buffer[2].count_, 3);
    TU_CHECK(m->is_dense_ && !m->is_bigendian_);
    TU_EQ_U64(m->data_._length, 120);
    /* No room for the fields: refused. */
    TU_CHECK(!ferry__bridge_dds_from_view(FERRY_ROS2_CLOUD, view, sample, sizeof sample, room, 16));
    close_pair(&a);
    TU_OK(ferry_node_destroy(node));
}

static void test_camera_info(void)
{
    ferry_node *node = tu_node("dds");
    pair a = open_pair(node, "/dds/a", FERRY_ROS2_CAMERA_INFO);
    const sensor_msgs_msg_dds__CameraInfo_ *m = (const void *)sample;
    ferry_camera_info ci;

    TU_OK(ferry_camera_info_loan(a.pub, &ci));
    ci.header->stamp.sec = -3;
    strcpy(ci.header->frame_id, "cam");
    strcpy(ci.header->distortion_model, "rational_polynomial");
    ci.header->d_count = 8;
    for (int i = 0; i < 8; i++)
        ci.header->d[i] = 0.5 - i;
    for (int i = 0; i < 12; i++)
        ci.header->p[i] = i * 1.25;
    ci.header->k[8] = 1;
    ci.header->r[4] = -1;
    ci.header->width = 1280;
    ci.header->binning_y = 2;
    ci.header->roi = (ferry_roi){1, 2, 3, 4, 1, {0}};
    TU_OK(ferry_camera_info_publish(a.pub, &ci));
    check_kind(node, &a, FERRY_ROS2_CAMERA_INFO);
    TU_EQ_U64(m->d_._length, 8);
    TU_CHECK(m->d_._buffer[7] == -6.5 && m->p_[11] == 13.75 && m->k_[8] == 1 && m->r_[4] == -1);
    TU_CHECK(m->roi_.do_rectify_ && m->roi_.width_ == 4 && m->roi_.x_offset_ == 1);
    TU_EQ_U64(m->binning_y_, 2);
    close_pair(&a);
    TU_OK(ferry_node_destroy(node));
}

static void test_compressed(void)
{
    ferry_node *node = tu_node("dds");
    pair a = open_pair(node, "/dds/a", FERRY_ROS2_COMPRESSED);
    ferry_compressed_image c;

    TU_OK(ferry_compressed_image_loan(a.pub, "jpeg", 100, &c));
    memset(c.data, 0xd8, 37);
    c.header->data_size = 37;
    strcpy(c.header->frame_id, "cam");
    TU_OK(ferry_compressed_image_publish(a.pub, &c));
    check_kind(node, &a, FERRY_ROS2_COMPRESSED);
    close_pair(&a);
    TU_OK(ferry_node_destroy(node));
}

static void test_imu(void)
{
    ferry_node *node = tu_node("dds");
    pair a = open_pair(node, "/dds/a", FERRY_ROS2_IMU);
    const sensor_msgs_msg_dds__Imu_ *m = (const void *)sample;
    ferry_imu imu;

    TU_OK(ferry_imu_loan(a.pub, &imu));
    strcpy(imu.header->frame_id, "imu_link");
    imu.header->orientation = (ferry_quaternion){0.5, -0.5, 0.5, -0.5};
    imu.header->angular_velocity.y = 3.5;
    imu.header->linear_acceleration.z = 9.81;
    imu.header->linear_acceleration_covariance[8] = 0.01;
    imu.header->orientation_covariance[0] = -1;
    TU_OK(ferry_imu_publish(a.pub, &imu));
    check_kind(node, &a, FERRY_ROS2_IMU);
    TU_CHECK(m->orientation_.w_ == -0.5 && m->angular_velocity_.y_ == 3.5);
    TU_CHECK(m->linear_acceleration_.z_ == 9.81 && m->linear_acceleration_covariance_[8] == 0.01);
    close_pair(&a);
    TU_OK(ferry_node_destroy(node));
}

int main(void)
{
    TU_RUN(test_image);
    TU_RUN(test_cloud);
    TU_RUN(test_camera_info);
    TU_RUN(test_compressed);
    TU_RUN(test_imu);
    return 0;
}
