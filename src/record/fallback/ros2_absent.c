/*
 * A stand-in for the ferry_ros2 library (src/ros2/ros2.h) where the build has none: no ferry
 * type has a ROS 2 kind, so the recorder stores every topic as raw ferry samples and the player
 * republishes them as such. Linked only when the target ferry_ros2 does not exist.
 */
#include "ros2/ros2.h"

#include <string.h>

ferry_ros2_kind ferry_ros2_kind_of_ferry(const char *type_name, uint64_t type_hash)
{
    (void)type_name;
    (void)type_hash;
    return FERRY_ROS2_NONE;
}

ferry_ros2_kind ferry_ros2_kind_of_name(const char *ros2_name)
{
    (void)ros2_name;
    return FERRY_ROS2_NONE;
}

const char *ferry_ros2_ferry_type(ferry_ros2_kind kind)
{
    (void)kind;
    return NULL;
}

uint64_t ferry_ros2_ferry_hash(ferry_ros2_kind kind)
{
    (void)kind;
    return 0;
}

const char *ferry_ros2_name(ferry_ros2_kind kind)
{
    (void)kind;
    return NULL;
}

const char *ferry_ros2_definition(ferry_ros2_kind kind)
{
    (void)kind;
    return NULL;
}

ferry_err ferry_ros2_cdr_encode(ferry_ros2_kind kind, const ferry_sample *s, ferry_ros2_cdr *out)
{
    (void)kind;
    (void)s;
    (void)out;
    return FERRY_EINVAL;
}

ferry_ros2_cdr_result ferry_ros2_cdr_parse(ferry_ros2_kind kind, const void *ser, size_t size,
                                           ferry_ros2_msg *out)
{
    (void)kind;
    (void)ser;
    (void)size;
    memset(out, 0, sizeof *out);
    return FERRY_ROS2_CDR_MALFORMED;
}

ferry_err ferry_ros2_publish(ferry_publisher *pub, const ferry_ros2_msg *msg, const char **why)
{
    (void)pub;
    (void)msg;
    if (why != NULL) *why = "this build has no ROS 2 types";
    return FERRY_EINVAL;
}
