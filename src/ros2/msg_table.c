/*
 * The table of msg_table.h: each ROS 2 type's .msg text once, and each kind's members with their
 * offsets in the view and in the parsed message. Adding a kind is one entry here (its types'
 * texts, its members, its view function) plus its C layouts and its tests.
 */
#include "msg_table.h"

#include <ferry/msg.h>
#include <ferry/tensor.h>

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * The ROS 2 types: the .msg texts, and the definitions composed of them as rosbag2 composes a
 * "ros2msg" schema (the type's text, then each type it uses, depth first in order of first use,
 * after a line of 80 '=' and "MSG: pkg/Name")
 * ------------------------------------------------------------------------------------------- */

#define TEXT_TIME "int32 sec\nuint32 nanosec\n"
#define TEXT_HEADER "builtin_interfaces/Time stamp\nstring frame_id\n"
#define TEXT_IMAGE                                                                                 \
    "std_msgs/Header header\nuint32 height\nuint32 width\nstring encoding\nuint8 is_bigendian\n"   \
    "uint32 step\nuint8[] data\n"
#define TEXT_POINT_FIELD                                                                           \
    "uint8 INT8=1\nuint8 UINT8=2\nuint8 INT16=3\nuint8 UINT16=4\nuint8 INT32=5\nuint8 UINT32=6\n"  \
    "uint8 FLOAT32=7\nuint8 FLOAT64=8\nstring name\nuint32 offset\nuint8 datatype\nuint32 count\n"
#define TEXT_CLOUD                                                                                 \
    "std_msgs/Header header\nuint32 height\nuint32 width\nPointField[] fields\nbool "              \
    "is_bigendian\n"                                                                               \
    "uint32 point_step\nuint32 row_step\nuint8[] data\nbool is_dense\n"
#define TEXT_ROI "uint32 x_offset\nuint32 y_offset\nuint32 height\nuint32 width\nbool do_rectify\n"
#define TEXT_CAMERA_INFO                                                                           \
    "std_msgs/Header header\nuint32 height\nuint32 width\nstring distortion_model\nfloat64[] d\n"  \
    "float64[9] k\nfloat64[9] r\nfloat64[12] p\nuint32 binning_x\nuint32 binning_y\n"              \
    "RegionOfInterest roi\n"
#define TEXT_COMPRESSED "std_msgs/Header header\nstring format\nuint8[] data\n"
#define TEXT_QUATERNION "float64 x 0\nfloat64 y 0\nfloat64 z 0\nfloat64 w 1\n"
#define TEXT_VECTOR3 "float64 x\nfloat64 y\nfloat64 z\n"
#define TEXT_IMU                                                                                   \
    "std_msgs/Header header\ngeometry_msgs/Quaternion orientation\n"                               \
    "float64[9] orientation_covariance\ngeometry_msgs/Vector3 angular_velocity\n"                  \
    "float64[9] angular_velocity_covariance\ngeometry_msgs/Vector3 linear_acceleration\n"          \
    "float64[9] linear_acceleration_covariance\n"
#define TEXT_POINT "float64 x\nfloat64 y\nfloat64 z\n"
#define TEXT_POSE "Point position\nQuaternion orientation\n"
#define TEXT_POSE_STAMPED "std_msgs/Header header\nPose pose\n"
/* ferry's own type for tensors: the dtype as NumPy names it, the sizes, the elements in C order. */
#define TEXT_TENSOR "std_msgs/Header header\nstring dtype\nint64[] shape\nuint8[] data\n"

/* The separator rosbag2 writes before each type a definition uses. */
#define USES(name, text)                                                                           \
    "================================================================================\n"           \
    "MSG: " name "\n" text
#define USES_HEADER USES("std_msgs/Header", TEXT_HEADER) USES("builtin_interfaces/Time", TEXT_TIME)

static const ferry_ros2_msg_def def_time = {"builtin_interfaces/msg/Time", TEXT_TIME};
static const ferry_ros2_msg_def def_header = {"std_msgs/msg/Header", TEXT_HEADER};
static const ferry_ros2_msg_def def_image = {"sensor_msgs/msg/Image", TEXT_IMAGE};
static const ferry_ros2_msg_def def_point_field = {"sensor_msgs/msg/PointField", TEXT_POINT_FIELD};
static const ferry_ros2_msg_def def_cloud = {"sensor_msgs/msg/PointCloud2", TEXT_CLOUD};
static const ferry_ros2_msg_def def_roi = {"sensor_msgs/msg/RegionOfInterest", TEXT_ROI};
static const ferry_ros2_msg_def def_camera_info = {"sensor_msgs/msg/CameraInfo", TEXT_CAMERA_INFO};
static const ferry_ros2_msg_def def_compressed = {"sensor_msgs/msg/CompressedImage",
                                                  TEXT_COMPRESSED};
static const ferry_ros2_msg_def def_quaternion = {"geometry_msgs/msg/Quaternion", TEXT_QUATERNION};
static const ferry_ros2_msg_def def_vector3 = {"geometry_msgs/msg/Vector3", TEXT_VECTOR3};
static const ferry_ros2_msg_def def_imu = {"sensor_msgs/msg/Imu", TEXT_IMU};
static const ferry_ros2_msg_def def_tensor = {"ferry_msgs/msg/Tensor", TEXT_TENSOR};
static const ferry_ros2_msg_def def_point = {"geometry_msgs/msg/Point", TEXT_POINT};
static const ferry_ros2_msg_def def_pose = {"geometry_msgs/msg/Pose", TEXT_POSE};
static const ferry_ros2_msg_def def_pose_stamped = {"geometry_msgs/msg/PoseStamped",
                                                    TEXT_POSE_STAMPED};

const ferry_ros2_msg_def *const ferry_ros2_msg_defs[] = {
    &def_time,        &def_header,     &def_image,      &def_point_field, &def_cloud, &def_roi,
    &def_camera_info, &def_compressed, &def_quaternion, &def_vector3,     &def_imu,   &def_tensor,
};
const size_t ferry_ros2_msg_defs_count = sizeof ferry_ros2_msg_defs / sizeof ferry_ros2_msg_defs[0];

/* ---------------------------------------------------------------------------------------------
 * Members
 * ------------------------------------------------------------------------------------------- */

#define NMEMBERS(a) ((uint32_t)(sizeof(a) / sizeof((a)[0])))

/* A primitive at offsets v (view) and m (message). */
#define PRIM(n, t, v, m)                                                                           \
    {                                                                                              \
        .name = (n), .type = (t), .view = (v), .msg = (m)                                          \
    }
/* A string of at most max bytes in the view. */
#define STRING(n, mx, v, m)                                                                        \
    {                                                                                              \
        .name = (n), .type = FERRY_ROS2_M_STRING, .max = (mx), .view = (v), .msg = (m)             \
    }
/* T[len] of a primitive. */
#define FIXED(n, t, l, v, m)                                                                       \
    {                                                                                              \
        .name = (n), .type = (t), .array = FERRY_ROS2_A_FIXED, .len = (l), .view = (v), .msg = (m) \
    }
/* T[] of a primitive, up to l elements, counted at vc and mc. */
#define SEQ(n, t, l, v, vc, m, mc)                                                                 \
    {                                                                                              \
        .name = (n), .type = (t), .array = FERRY_ROS2_A_SEQ, .len = (l), .view = (v), .msg = (m),  \
        .view_count = (vc), .msg_count = (mc)                                                      \
    }
/* A nested message. */
#define NESTED(n, d, mem, v, m)                                                                    \
    {                                                                                              \
        .name = (n), .type = FERRY_ROS2_M_STRUCT, .def = &(d), .members = (mem),                   \
        .nmembers = NMEMBERS(mem), .view = (v), .msg = (m)                                         \
    }
/* uint8[] data: the pointer and size of a view, those of a message. */
#define BULK(V, M)                                                                                 \
    {                                                                                              \
        .name = "data", .type = FERRY_ROS2_M_BULK, .view = offsetof(V, data),                      \
        .view_count = offsetof(V, data_size), .msg = offsetof(M, data),                            \
        .msg_count = offsetof(M, data_size)                                                        \
    }

/* builtin_interfaces/Time: a ferry_stamp in the view, the start of a ferry_ros2_header. */
static const ferry_ros2_member time_members[] = {
    PRIM("sec", FERRY_ROS2_M_I32, offsetof(ferry_stamp, sec), offsetof(ferry_ros2_header, sec)),
    PRIM("nanosec", FERRY_ROS2_M_U32, offsetof(ferry_stamp, nanosec),
         offsetof(ferry_ros2_header, nanosec)),
};

/* std_msgs/Header: scattered in a view's header (stamp and frame_id), so it takes view offset 0
 * and its members the view's own offsets. */
#define HEADER_MEMBERS(V, frame_max)                                                               \
    {                                                                                              \
        NESTED("stamp", def_time, time_members, offsetof(V, header.stamp), 0),                     \
            STRING("frame_id", frame_max, offsetof(V, header.frame_id),                            \
                   offsetof(ferry_ros2_header, frame_id)),                                         \
    }
#define HEADER(V, M, members) NESTED("header", def_header, members, 0, offsetof(M, header))

/* sensor_msgs/Image */
typedef ferry_ros2_image_msg image_msg;
static const ferry_ros2_member image_header[] =
    HEADER_MEMBERS(ferry_image_view, FERRY_MSG_FRAME_ID_MAX);
static const ferry_ros2_member image_members[] = {
    HEADER(ferry_image_view, image_msg, image_header),
    PRIM("height", FERRY_ROS2_M_U32, offsetof(ferry_image_view, header.height),
         offsetof(image_msg, height)),
    PRIM("width", FERRY_ROS2_M_U32, offsetof(ferry_image_view, header.width),
         offsetof(image_msg, width)),
    STRING("encoding", FERRY_ENCODING_MAX, offsetof(ferry_image_view, header.encoding),
           offsetof(image_msg, encoding)),
    PRIM("is_bigendian", FERRY_ROS2_M_U8, offsetof(ferry_image_view, header.is_bigendian),
         offsetof(image_msg, is_bigendian)),
    PRIM("step", FERRY_ROS2_M_U32, offsetof(ferry_image_view, header.step),
         offsetof(image_msg, step)),
    BULK(ferry_image_view, image_msg),
};

/* sensor_msgs/PointCloud2 */
typedef ferry_ros2_cloud_msg cloud_msg;
static const ferry_ros2_member point_field_members[] = {
    STRING("name", FERRY_FIELD_NAME_MAX, offsetof(ferry_point_field, name),
           offsetof(ferry_ros2_field_msg, name)),
    PRIM("offset", FERRY_ROS2_M_U32, offsetof(ferry_point_field, offset),
         offsetof(ferry_ros2_field_msg, offset)),
    PRIM("datatype", FERRY_ROS2_M_U8, offsetof(ferry_point_field, datatype),
         offsetof(ferry_ros2_field_msg, datatype)),
    PRIM("count", FERRY_ROS2_M_U32, offsetof(ferry_point_field, count),
         offsetof(ferry_ros2_field_msg, count)),
};
static const ferry_ros2_member cloud_header[] =
    HEADER_MEMBERS(ferry_pointcloud_view, FERRY_MSG_FRAME_ID_MAX);
static const ferry_ros2_member cloud_members[] = {
    HEADER(ferry_pointcloud_view, cloud_msg, cloud_header),
    PRIM("height", FERRY_ROS2_M_U32, offsetof(ferry_pointcloud_view, header.height),
         offsetof(cloud_msg, height)),
    PRIM("width", FERRY_ROS2_M_U32, offsetof(ferry_pointcloud_view, header.width),
         offsetof(cloud_msg, width)),
    {.name = "fields",
     .type = FERRY_ROS2_M_STRUCT,
     .array = FERRY_ROS2_A_SEQ,
     .len = FERRY_POINTCLOUD_FIELDS_MAX,
     .view = offsetof(ferry_pointcloud_view, header.fields),
     .view_count = offsetof(ferry_pointcloud_view, header.nfields),
     .view_stride = sizeof(ferry_point_field),
     .msg = offsetof(cloud_msg, fields),
     .msg_count = offsetof(cloud_msg, nfields),
     .msg_stride = sizeof(ferry_ros2_field_msg),
     .def = &def_point_field,
     .members = point_field_members,
     .nmembers = NMEMBERS(point_field_members)},
    /* echo has always shown it as a number */
    {.name = "is_bigendian",
     .type = FERRY_ROS2_M_BOOL,
     .json = FERRY_ROS2_J_NUMBER,
     .view = offsetof(ferry_pointcloud_view, header.is_bigendian),
     .msg = offsetof(cloud_msg, is_bigendian)},
    PRIM("point_step", FERRY_ROS2_M_U32, offsetof(ferry_pointcloud_view, header.point_step),
         offsetof(cloud_msg, point_step)),
    PRIM("row_step", FERRY_ROS2_M_U32, offsetof(ferry_pointcloud_view, header.row_step),
         offsetof(cloud_msg, row_step)),
    BULK(ferry_pointcloud_view, cloud_msg),
    PRIM("is_dense", FERRY_ROS2_M_BOOL, offsetof(ferry_pointcloud_view, header.is_dense),
         offsetof(cloud_msg, is_dense)),
};

/* sensor_msgs/CameraInfo; its RegionOfInterest is a ferry_roi in the view and five consecutive
 * roi_* fields of the same types in the message. */
typedef ferry_ros2_camera_info_msg camera_info_msg;
#define ROI_MSG(f) (offsetof(camera_info_msg, f) - offsetof(camera_info_msg, roi_x_offset))
static const ferry_ros2_member roi_members[] = {
    PRIM("x_offset", FERRY_ROS2_M_U32, offsetof(ferry_roi, x_offset), ROI_MSG(roi_x_offset)),
    PRIM("y_offset", FERRY_ROS2_M_U32, offsetof(ferry_roi, y_offset), ROI_MSG(roi_y_offset)),
    PRIM("height", FERRY_ROS2_M_U32, offsetof(ferry_roi, height), ROI_MSG(roi_height)),
    PRIM("width", FERRY_ROS2_M_U32, offsetof(ferry_roi, width), ROI_MSG(roi_width)),
    PRIM("do_rectify", FERRY_ROS2_M_BOOL, offsetof(ferry_roi, do_rectify), ROI_MSG(roi_do_rectify)),
};
static const ferry_ros2_member camera_info_header[] =
    HEADER_MEMBERS(ferry_camera_info_view, FERRY_MSG_FRAME_ID_MAX);
#define CI(f) offsetof(ferry_camera_info_view, header.f)
static const ferry_ros2_member camera_info_members[] = {
    HEADER(ferry_camera_info_view, camera_info_msg, camera_info_header),
    PRIM("height", FERRY_ROS2_M_U32, CI(height), offsetof(camera_info_msg, height)),
    PRIM("width", FERRY_ROS2_M_U32, CI(width), offsetof(camera_info_msg, width)),
    STRING("distortion_model", FERRY_DISTORTION_MODEL_MAX, CI(distortion_model),
           offsetof(camera_info_msg, distortion_model)),
    SEQ("d", FERRY_ROS2_M_F64, FERRY_CAMERA_INFO_D_MAX, CI(d), CI(d_count),
        offsetof(camera_info_msg, d), offsetof(camera_info_msg, d_count)),
    FIXED("k", FERRY_ROS2_M_F64, 9, CI(k), offsetof(camera_info_msg, k)),
    FIXED("r", FERRY_ROS2_M_F64, 9, CI(r), offsetof(camera_info_msg, r)),
    FIXED("p", FERRY_ROS2_M_F64, 12, CI(p), offsetof(camera_info_msg, p)),
    PRIM("binning_x", FERRY_ROS2_M_U32, CI(binning_x), offsetof(camera_info_msg, binning_x)),
    PRIM("binning_y", FERRY_ROS2_M_U32, CI(binning_y), offsetof(camera_info_msg, binning_y)),
    NESTED("roi", def_roi, roi_members, CI(roi), offsetof(camera_info_msg, roi_x_offset)),
};

/* sensor_msgs/CompressedImage */
typedef ferry_ros2_compressed_msg compressed_msg;
static const ferry_ros2_member compressed_header[] =
    HEADER_MEMBERS(ferry_compressed_image_view, FERRY_MSG_FRAME_ID_MAX);
static const ferry_ros2_member compressed_members[] = {
    HEADER(ferry_compressed_image_view, compressed_msg, compressed_header),
    STRING("format", FERRY_COMPRESSED_FORMAT_MAX,
           offsetof(ferry_compressed_image_view, header.format), offsetof(compressed_msg, format)),
    BULK(ferry_compressed_image_view, compressed_msg),
};

/* sensor_msgs/Imu; geometry_msgs' Quaternion and Vector3 are ferry's in both layouts. */
typedef ferry_ros2_imu_msg imu_msg;
static const ferry_ros2_member quaternion_members[] = {
    PRIM("x", FERRY_ROS2_M_F64, offsetof(ferry_quaternion, x), offsetof(ferry_quaternion, x)),
    PRIM("y", FERRY_ROS2_M_F64, offsetof(ferry_quaternion, y), offsetof(ferry_quaternion, y)),
    PRIM("z", FERRY_ROS2_M_F64, offsetof(ferry_quaternion, z), offsetof(ferry_quaternion, z)),
    PRIM("w", FERRY_ROS2_M_F64, offsetof(ferry_quaternion, w), offsetof(ferry_quaternion, w)),
};
static const ferry_ros2_member vector3_members[] = {
    PRIM("x", FERRY_ROS2_M_F64, offsetof(ferry_vector3, x), offsetof(ferry_vector3, x)),
    PRIM("y", FERRY_ROS2_M_F64, offsetof(ferry_vector3, y), offsetof(ferry_vector3, y)),
    PRIM("z", FERRY_ROS2_M_F64, offsetof(ferry_vector3, z), offsetof(ferry_vector3, z)),
};
static const ferry_ros2_member imu_header[] =
    HEADER_MEMBERS(ferry_imu_view, FERRY_MSG_FRAME_ID_MAX);
#define IMU_V(f) offsetof(ferry_imu_view, header.f)
#define IMU_M(f) offsetof(imu_msg, f)
static const ferry_ros2_member imu_members[] = {
    HEADER(ferry_imu_view, imu_msg, imu_header),
    NESTED("orientation", def_quaternion, quaternion_members, IMU_V(orientation),
           IMU_M(orientation)),
    FIXED("orientation_covariance", FERRY_ROS2_M_F64, 9, IMU_V(orientation_covariance),
          IMU_M(orientation_covariance)),
    NESTED("angular_velocity", def_vector3, vector3_members, IMU_V(angular_velocity),
           IMU_M(angular_velocity)),
    FIXED("angular_velocity_covariance", FERRY_ROS2_M_F64, 9, IMU_V(angular_velocity_covariance),
          IMU_M(angular_velocity_covariance)),
    NESTED("linear_acceleration", def_vector3, vector3_members, IMU_V(linear_acceleration),
           IMU_M(linear_acceleration)),
    FIXED("linear_acceleration_covariance", FERRY_ROS2_M_F64, 9,
          IMU_V(linear_acceleration_covariance), IMU_M(linear_acceleration_covariance)),
};

/* ferry_msgs/Tensor: the dtype is the view's ferry_dtype by name; the strides are not sent (the
 * writer sends contiguous tensors only). */
typedef ferry_ros2_tensor_msg tensor_msg;
static const ferry_ros2_member tensor_header[] =
    HEADER_MEMBERS(ferry_tensor_view, FERRY_FRAME_ID_MAX);
static const ferry_ros2_member tensor_members[] = {
    HEADER(ferry_tensor_view, tensor_msg, tensor_header),
    {.name = "dtype",
     .type = FERRY_ROS2_M_DTYPE,
     .view = offsetof(ferry_tensor_view, dtype),
     .msg = offsetof(tensor_msg, dtype)},
    SEQ("shape", FERRY_ROS2_M_I64, FERRY_TENSOR_DIMS_MAX, offsetof(ferry_tensor_view, header.shape),
        offsetof(ferry_tensor_view, header.ndim), offsetof(tensor_msg, shape),
        offsetof(tensor_msg, ndim)),
    BULK(ferry_tensor_view, tensor_msg),
};

/* geometry_msgs/PoseStamped; its Point is a ferry_vector3. */
typedef ferry_ros2_pose_stamped_msg pose_stamped_msg;
static const ferry_ros2_member pose_members[] = {
    NESTED("position", def_point, vector3_members, offsetof(ferry_pose, position),
           offsetof(ferry_pose, position)),
    NESTED("orientation", def_quaternion, quaternion_members, offsetof(ferry_pose, orientation),
           offsetof(ferry_pose, orientation)),
};
static const ferry_ros2_member pose_stamped_header[] =
    HEADER_MEMBERS(ferry_pose_stamped_view, FERRY_MSG_FRAME_ID_MAX);
static const ferry_ros2_member pose_stamped_members[] = {
    HEADER(ferry_pose_stamped_view, pose_stamped_msg, pose_stamped_header),
    NESTED("pose", def_pose, pose_members, offsetof(ferry_pose_stamped_view, header.pose),
           offsetof(pose_stamped_msg, pose)),
};

/* ---------------------------------------------------------------------------------------------
 * Views: each kind's validation, its error made the writer's (FERRY_EINVAL)
 * ------------------------------------------------------------------------------------------- */

#define VIEW_FN(name, get, V)                                                                      \
    static ferry_err name(const ferry_sample *s, void *v)                                          \
    {                                                                                              \
        return get(s, (V *)v) == FERRY_OK ? FERRY_OK : FERRY_EINVAL;                               \
    }

VIEW_FN(view_image, ferry_image_view_get, ferry_image_view)
VIEW_FN(view_cloud, ferry_pointcloud_view_get, ferry_pointcloud_view)
VIEW_FN(view_camera_info, ferry_camera_info_view_get, ferry_camera_info_view)
VIEW_FN(view_compressed, ferry_compressed_image_view_get, ferry_compressed_image_view)
VIEW_FN(view_imu, ferry_imu_view_get, ferry_imu_view)
VIEW_FN(view_pose_stamped, ferry_pose_stamped_view_get, ferry_pose_stamped_view)

/* A device tensor is a valid sample whose elements are not here to write: FERRY_ENOTSUP. */
static ferry_err view_tensor(const ferry_sample *s, void *v)
{
    ferry_tensor_header h;

    if (ferry_tensor_view_get(s, v) == FERRY_OK)
        return FERRY_OK;
    if (s->data != NULL && s->size >= sizeof h) {
        memcpy(&h, s->data, sizeof h);
        if (h.magic == FERRY_TENSOR_MAGIC && h.device.device_type != FERRY_DL_CPU)
            return FERRY_ENOTSUP;
    }
    return FERRY_EINVAL;
}

/* Whether a tensor's strides are C order over its shape (any stride of a size-1 or empty
 * dimension goes). */
static bool tensor_contiguous(const ferry_tensor_header *h)
{
    int64_t expect = 1;
    uint32_t i;

    for (i = h->ndim; i-- > 0;) {
        if (h->shape[i] == 0)
            return true;
        if (h->shape[i] != 1 && h->strides[i] != expect)
            return false;
        expect *= h->shape[i];
    }
    return true;
}

/* Only contiguous tensors are sent, their extent rather than all of data_size. */
static ferry_err write_check_tensor(const void *view, size_t *bulk_size)
{
    const ferry_tensor_view *v = view;

    if (!tensor_contiguous(&v->header))
        return FERRY_ENOTSUP;
    *bulk_size = (size_t)v->numel * v->elem_size; /* inside data_size: the view checked it */
    return FERRY_OK;
}

/* ---------------------------------------------------------------------------------------------
 * The kinds
 * ------------------------------------------------------------------------------------------- */

#define KIND(k, ftype, fhash, d, definition_, V, M, magic, view_fn, check_fn, mem)                 \
    {                                                                                              \
        .kind = (k), .ferry_type = (ftype), .ferry_hash = (fhash), .def = &(d),                    \
        .definition = (definition_), .view_size = sizeof(V), .msg_size = sizeof(M),                \
        .stamp = offsetof(V, header.stamp), .msg_header = offsetof(M, header),                     \
        .fixed_magic = (magic), .view_get = (view_fn), .write_check = (check_fn),                  \
        .members = (mem), .nmembers = NMEMBERS(mem)                                                \
    }

const ferry_ros2_kind_desc ferry_ros2_kind_descs[] = {
    KIND(FERRY_ROS2_IMAGE, FERRY_IMAGE_TYPE_NAME, FERRY_IMAGE_TYPE_HASH, def_image,
         TEXT_IMAGE USES_HEADER, ferry_image_view, image_msg, 0, view_image, NULL, image_members),
    KIND(FERRY_ROS2_CLOUD, FERRY_POINTCLOUD_TYPE_NAME, FERRY_POINTCLOUD_TYPE_HASH, def_cloud,
         TEXT_CLOUD USES_HEADER USES("sensor_msgs/PointField", TEXT_POINT_FIELD),
         ferry_pointcloud_view, cloud_msg, 0, view_cloud, NULL, cloud_members),
    KIND(FERRY_ROS2_CAMERA_INFO, FERRY_CAMERA_INFO_TYPE_NAME, FERRY_CAMERA_INFO_TYPE_HASH,
         def_camera_info,
         TEXT_CAMERA_INFO USES_HEADER USES("sensor_msgs/RegionOfInterest", TEXT_ROI),
         ferry_camera_info_view, camera_info_msg, FERRY_CAMERA_INFO_MAGIC, view_camera_info, NULL,
         camera_info_members),
    KIND(FERRY_ROS2_COMPRESSED, FERRY_COMPRESSED_IMAGE_TYPE_NAME, FERRY_COMPRESSED_IMAGE_TYPE_HASH,
         def_compressed, TEXT_COMPRESSED USES_HEADER, ferry_compressed_image_view, compressed_msg,
         0, view_compressed, NULL, compressed_members),
    KIND(FERRY_ROS2_IMU, FERRY_IMU_TYPE_NAME, FERRY_IMU_TYPE_HASH, def_imu,
         TEXT_IMU USES_HEADER USES("geometry_msgs/Quaternion", TEXT_QUATERNION)
             USES("geometry_msgs/Vector3", TEXT_VECTOR3),
         ferry_imu_view, imu_msg, FERRY_IMU_MAGIC, view_imu, NULL, imu_members),
    KIND(FERRY_ROS2_TENSOR, FERRY_TENSOR_TYPE_NAME, FERRY_TENSOR_TYPE_HASH, def_tensor,
         TEXT_TENSOR USES_HEADER, ferry_tensor_view, tensor_msg, 0, view_tensor, write_check_tensor,
         tensor_members),
    KIND(FERRY_ROS2_POSE_STAMPED, FERRY_POSE_STAMPED_TYPE_NAME, FERRY_POSE_STAMPED_TYPE_HASH,
         def_pose_stamped,
         TEXT_POSE_STAMPED USES_HEADER USES("geometry_msgs/Pose", TEXT_POSE) USES(
             "geometry_msgs/Point", TEXT_POINT) USES("geometry_msgs/Quaternion", TEXT_QUATERNION),
         ferry_pose_stamped_view, pose_stamped_msg, FERRY_POSE_STAMPED_MAGIC, view_pose_stamped,
         NULL, pose_stamped_members),
};

_Static_assert(sizeof ferry_ros2_kind_descs / sizeof ferry_ros2_kind_descs[0] ==
                   FERRY_ROS2_KIND_COUNT_ - 1,
               "one entry per kind");

size_t ferry_ros2_elem_size(const ferry_ros2_member *m, bool in_view)
{
    switch (m->type) {
    case FERRY_ROS2_M_BOOL:
    case FERRY_ROS2_M_U8:
        return 1;
    case FERRY_ROS2_M_I32:
    case FERRY_ROS2_M_U32:
        return 4;
    case FERRY_ROS2_M_I64:
    case FERRY_ROS2_M_F64:
        return 8;
    default:
        return in_view ? m->view_stride : m->msg_stride;
    }
}

const ferry_ros2_kind_desc *ferry_ros2_kind_desc_of(ferry_ros2_kind kind)
{
    if (kind <= FERRY_ROS2_NONE || kind >= FERRY_ROS2_KIND_COUNT_)
        return NULL;
    return &ferry_ros2_kind_descs[kind - 1];
}
