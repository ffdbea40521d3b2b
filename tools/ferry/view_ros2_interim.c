/*
 * Interim stand-in for src/ros2 while it is not on this branch: Image and CompressedImage only,
 * enough for `ferry view` to build and be tested. Removed when ferry_ros2 lands.
 */
#include "ros2/ros2.h"

#include <string.h>

#define SEP "================================================================================\n"
#define HEADER_DEPS                                                                            \
    SEP "MSG: std_msgs/Header\nbuiltin_interfaces/Time stamp\nstring frame_id\n" SEP            \
        "MSG: builtin_interfaces/Time\nint32 sec\nuint32 nanosec\n"

ferry_ros2_kind ferry_ros2_kind_of_ferry(const char *type_name, uint64_t type_hash)
{
    if (strcmp(type_name, FERRY_IMAGE_TYPE_NAME) == 0 && type_hash == FERRY_IMAGE_TYPE_HASH)
        return FERRY_ROS2_IMAGE;
    return FERRY_ROS2_NONE;
}

const char *ferry_ros2_name(ferry_ros2_kind kind)
{
    return kind == FERRY_ROS2_IMAGE        ? "sensor_msgs/msg/Image"
           : kind == FERRY_ROS2_COMPRESSED ? "sensor_msgs/msg/CompressedImage"
                                           : NULL;
}

const char *ferry_ros2_definition(ferry_ros2_kind kind)
{
    if (kind == FERRY_ROS2_IMAGE)
        return "std_msgs/Header header\nuint32 height\nuint32 width\nstring encoding\n"
               "uint8 is_bigendian\nuint32 step\nuint8[] data\n" HEADER_DEPS;
    if (kind == FERRY_ROS2_COMPRESSED)
        return "std_msgs/Header header\nstring format\nuint8[] data\n" HEADER_DEPS;
    return NULL;
}

static size_t put_u32(uint8_t *p, size_t at, uint32_t v)
{
    at = (at + 3) & ~(size_t)3;
    memcpy(p + 4 + at, &v, 4);
    return at + 4;
}

static size_t put_str(uint8_t *p, size_t at, const char *s)
{
    size_t n = strlen(s) + 1;

    at = put_u32(p, at, (uint32_t)n);
    memcpy(p + 4 + at, s, n);
    return at + n;
}

ferry_err ferry_ros2_cdr_encode(ferry_ros2_kind kind, const ferry_sample *s, ferry_ros2_cdr *out)
{
    ferry_image_view v;
    size_t at = 0;
    uint8_t *p = out->head;

    if (kind != FERRY_ROS2_IMAGE || ferry_image_view_get(s, &v) != FERRY_OK) return FERRY_EINVAL;
    memset(p, 0, 4);
    p[1] = 1;
    at = put_u32(p, at, (uint32_t)v.header.stamp.sec);
    at = put_u32(p, at, v.header.stamp.nanosec);
    at = put_str(p, at, v.header.frame_id);
    at = put_u32(p, at, v.header.height);
    at = put_u32(p, at, v.header.width);
    at = put_str(p, at, v.header.encoding);
    p[4 + at++] = v.header.is_bigendian;
    at = put_u32(p, at, v.header.step);
    at = put_u32(p, at, (uint32_t)v.data_size);
    out->iov[0].iov_base = p;
    out->iov[0].iov_len = 4 + at;
    out->iov[1].iov_base = (void *)v.data;
    out->iov[1].iov_len = v.data_size;
    out->niov = 2;
    out->size = 4 + at + v.data_size;
    out->stamp.ns = 0;
    return FERRY_OK;
}
