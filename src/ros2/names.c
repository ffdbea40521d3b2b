/*
 * The kinds of ros2.h looked up in the table of msg_table.h: every ferry type with a ROS 2
 * counterpart, its ROS 2 name, and its message definition as rosbag2 and Foxglove store a
 * "ros2msg" schema.
 */
#include "msg_table.h"

#include <stdbool.h>
#include <string.h>

ferry_ros2_kind ferry_ros2_kind_of_ferry(const char *type_name, uint64_t type_hash)
{
    size_t i;

    if (type_name == NULL)
        return FERRY_ROS2_NONE;
    for (i = 0; i < FERRY_ROS2_KIND_COUNT_ - 1; i++)
        if (type_hash == ferry_ros2_kind_descs[i].ferry_hash &&
            strcmp(type_name, ferry_ros2_kind_descs[i].ferry_type) == 0)
            return ferry_ros2_kind_descs[i].kind;
    return FERRY_ROS2_NONE;
}

/* "pkg/msg/Name" or "pkg/Name" against an entry's "pkg/msg/Name". */
static bool name_matches(const char *name, const char *full)
{
    const char *slash = strchr(full, '/');
    size_t pkg = (size_t)(slash - full);

    if (strcmp(name, full) == 0)
        return true;
    return strncmp(name, full, pkg + 1) == 0 && strcmp(name + pkg + 1, slash + 5) == 0;
}

ferry_ros2_kind ferry_ros2_kind_of_name(const char *ros2_name)
{
    size_t i;

    if (ros2_name == NULL)
        return FERRY_ROS2_NONE;
    for (i = 0; i < FERRY_ROS2_KIND_COUNT_ - 1; i++)
        if (name_matches(ros2_name, ferry_ros2_kind_descs[i].def->name))
            return ferry_ros2_kind_descs[i].kind;
    return FERRY_ROS2_NONE;
}

const char *ferry_ros2_ferry_type(ferry_ros2_kind kind)
{
    const ferry_ros2_kind_desc *e = ferry_ros2_kind_desc_of(kind);

    return e != NULL ? e->ferry_type : NULL;
}

uint64_t ferry_ros2_ferry_hash(ferry_ros2_kind kind)
{
    const ferry_ros2_kind_desc *e = ferry_ros2_kind_desc_of(kind);

    return e != NULL ? e->ferry_hash : 0;
}

const char *ferry_ros2_name(ferry_ros2_kind kind)
{
    const ferry_ros2_kind_desc *e = ferry_ros2_kind_desc_of(kind);

    return e != NULL ? e->def->name : NULL;
}

const char *ferry_ros2_definition(ferry_ros2_kind kind)
{
    const ferry_ros2_kind_desc *e = ferry_ros2_kind_desc_of(kind);

    return e != NULL ? e->definition : NULL;
}
