/*
 * The kinds of ros2.h: every ferry type with a ROS 2 counterpart, its ROS 2 name, and its message
 * definition as rosbag2 and Foxglove store a "ros2msg" schema.
 */
#include "ros2.h"

#include <stdbool.h>
#include <string.h>

/* The separator rosbag2 writes between a definition and each type it uses. */
#define SEP "================================================================================\n"

#define DEF_TIME SEP "MSG: builtin_interfaces/Time\nint32 sec\nuint32 nanosec\n"
#define DEF_HEADER                                                                                 \
    SEP "MSG: std_msgs/Header\nbuiltin_interfaces/Time stamp\nstring frame_id\n" DEF_TIME

static const char def_image[] = "std_msgs/Header header\n"
                                "uint32 height\n"
                                "uint32 width\n"
                                "string encoding\n"
                                "uint8 is_bigendian\n"
                                "uint32 step\n"
                                "uint8[] data\n" DEF_HEADER;

static const char def_cloud[] = "std_msgs/Header header\n"
                                "uint32 height\n"
                                "uint32 width\n"
                                "PointField[] fields\n"
                                "bool is_bigendian\n"
                                "uint32 point_step\n"
                                "uint32 row_step\n"
                                "uint8[] data\n"
                                "bool is_dense\n" DEF_HEADER SEP "MSG: sensor_msgs/PointField\n"
                                "uint8 INT8=1\n"
                                "uint8 UINT8=2\n"
                                "uint8 INT16=3\n"
                                "uint8 UINT16=4\n"
                                "uint8 INT32=5\n"
                                "uint8 UINT32=6\n"
                                "uint8 FLOAT32=7\n"
                                "uint8 FLOAT64=8\n"
                                "string name\n"
                                "uint32 offset\n"
                                "uint8 datatype\n"
                                "uint32 count\n";

static const char def_camera_info[] =
    "std_msgs/Header header\n"
    "uint32 height\n"
    "uint32 width\n"
    "string distortion_model\n"
    "float64[] d\n"
    "float64[9] k\n"
    "float64[9] r\n"
    "float64[12] p\n"
    "uint32 binning_x\n"
    "uint32 binning_y\n"
    "RegionOfInterest roi\n" DEF_HEADER SEP "MSG: sensor_msgs/RegionOfInterest\n"
    "uint32 x_offset\n"
    "uint32 y_offset\n"
    "uint32 height\n"
    "uint32 width\n"
    "bool do_rectify\n";

static const char def_compressed[] = "std_msgs/Header header\n"
                                     "string format\n"
                                     "uint8[] data\n" DEF_HEADER;

static const char def_imu[] =
    "std_msgs/Header header\n"
    "geometry_msgs/Quaternion orientation\n"
    "float64[9] orientation_covariance\n"
    "geometry_msgs/Vector3 angular_velocity\n"
    "float64[9] angular_velocity_covariance\n"
    "geometry_msgs/Vector3 linear_acceleration\n"
    "float64[9] linear_acceleration_covariance\n" DEF_HEADER SEP "MSG: geometry_msgs/Quaternion\n"
    "float64 x 0\n"
    "float64 y 0\n"
    "float64 z 0\n"
    "float64 w 1\n" SEP "MSG: geometry_msgs/Vector3\n"
    "float64 x\n"
    "float64 y\n"
    "float64 z\n";

/* ferry's own type for tensors: the dtype as NumPy names it, the sizes, the elements in C order. */
static const char def_tensor[] = "std_msgs/Header header\n"
                                 "string dtype\n"
                                 "int64[] shape\n"
                                 "uint8[] data\n" DEF_HEADER;

static const struct kind_entry {
    ferry_ros2_kind kind;
    const char *ferry_type;
    uint64_t ferry_hash;
    const char *ros2_name;
    const char *definition;
} kinds[] = {
    {FERRY_ROS2_IMAGE, FERRY_IMAGE_TYPE_NAME, FERRY_IMAGE_TYPE_HASH, "sensor_msgs/msg/Image",
     def_image},
    {FERRY_ROS2_CLOUD, FERRY_POINTCLOUD_TYPE_NAME, FERRY_POINTCLOUD_TYPE_HASH,
     "sensor_msgs/msg/PointCloud2", def_cloud},
    {FERRY_ROS2_CAMERA_INFO, FERRY_CAMERA_INFO_TYPE_NAME, FERRY_CAMERA_INFO_TYPE_HASH,
     "sensor_msgs/msg/CameraInfo", def_camera_info},
    {FERRY_ROS2_COMPRESSED, FERRY_COMPRESSED_IMAGE_TYPE_NAME, FERRY_COMPRESSED_IMAGE_TYPE_HASH,
     "sensor_msgs/msg/CompressedImage", def_compressed},
    {FERRY_ROS2_IMU, FERRY_IMU_TYPE_NAME, FERRY_IMU_TYPE_HASH, "sensor_msgs/msg/Imu", def_imu},
    {FERRY_ROS2_TENSOR, FERRY_TENSOR_TYPE_NAME, FERRY_TENSOR_TYPE_HASH, "ferry_msgs/msg/Tensor",
     def_tensor},
};

#define NKINDS (sizeof kinds / sizeof kinds[0])
_Static_assert(NKINDS == FERRY_ROS2_KIND_COUNT_ - 1, "one entry per kind");

static const struct kind_entry *entry(ferry_ros2_kind kind)
{
    size_t i;

    for (i = 0; i < NKINDS; i++)
        if (kinds[i].kind == kind)
            return &kinds[i];
    return NULL;
}

ferry_ros2_kind ferry_ros2_kind_of_ferry(const char *type_name, uint64_t type_hash)
{
    size_t i;

    if (type_name == NULL)
        return FERRY_ROS2_NONE;
    for (i = 0; i < NKINDS; i++)
        if (type_hash == kinds[i].ferry_hash && strcmp(type_name, kinds[i].ferry_type) == 0)
            return kinds[i].kind;
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
    for (i = 0; i < NKINDS; i++)
        if (name_matches(ros2_name, kinds[i].ros2_name))
            return kinds[i].kind;
    return FERRY_ROS2_NONE;
}

const char *ferry_ros2_ferry_type(ferry_ros2_kind kind)
{
    const struct kind_entry *e = entry(kind);

    return e != NULL ? e->ferry_type : NULL;
}

uint64_t ferry_ros2_ferry_hash(ferry_ros2_kind kind)
{
    const struct kind_entry *e = entry(kind);

    return e != NULL ? e->ferry_hash : 0;
}

const char *ferry_ros2_name(ferry_ros2_kind kind)
{
    const struct kind_entry *e = entry(kind);

    return e != NULL ? e->ros2_name : NULL;
}

const char *ferry_ros2_definition(ferry_ros2_kind kind)
{
    const struct kind_entry *e = entry(kind);

    return e != NULL ? e->definition : NULL;
}
