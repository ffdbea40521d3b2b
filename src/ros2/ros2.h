/*
 * ROS 2's view of ferry's message types, without DDS: for the recorder, the player and the live
 * view (tools/ferry) and for the bridge (src/bridge). One table (msg_table.h) describes every ferry
 * type that has a ROS 2 counterpart: its ROS 2 name, its message definition (ros2msg, as rosbag2
 * stores it) and its fields with their offsets in the view and in the parsed message below; a CDR
 * writer turns a taken ferry sample into ROS 2's serialisation without copying its bulk; a CDR
 * reader parses such a serialisation in place; and a publisher side turns a parsed message into
 * a ferry sample (the one copy, into the loan). The three walk the table.
 *
 * Internal to ferry (the static library ferry_ros2, linked by the CLI and the bridge); not
 * installed. Every input is untrusted: samples come from other processes (their views are
 * validated first), serialisations from the network or from files.
 *
 * CDR here is plain CDR (XCDR1) with the 4-byte encapsulation header in front: the writer emits
 * CDR_LE; the reader takes CDR_LE and CDR_BE and answers FERRY_ROS2_CDR_UNSUPPORTED for any other
 * encapsulation (XCDR2, ...).
 */
#ifndef FERRY_ROS2_H
#define FERRY_ROS2_H

#include <ferry/ferry.h>
#include <ferry/msg.h>
#include <ferry/tensor.h>

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * Kinds and names
 * ------------------------------------------------------------------------------------------- */

/** The ferry types with a ROS 2 message type. */
typedef enum ferry_ros2_kind {
    FERRY_ROS2_NONE = 0,
    FERRY_ROS2_IMAGE,        /**< sensor_msgs/Image <-> sensor_msgs/msg/Image */
    FERRY_ROS2_CLOUD,        /**< sensor_msgs/PointCloud2 <-> sensor_msgs/msg/PointCloud2 */
    FERRY_ROS2_CAMERA_INFO,  /**< sensor_msgs/CameraInfo <-> sensor_msgs/msg/CameraInfo */
    FERRY_ROS2_COMPRESSED,   /**< sensor_msgs/CompressedImage <-> sensor_msgs/msg/CompressedImage */
    FERRY_ROS2_IMU,          /**< sensor_msgs/Imu <-> sensor_msgs/msg/Imu */
    FERRY_ROS2_TENSOR,       /**< ferry/Tensor (host) <-> ferry_msgs/msg/Tensor (ferry's own) */
    FERRY_ROS2_POSE_STAMPED, /**< geometry_msgs/PoseStamped <-> geometry_msgs/msg/PoseStamped */
    FERRY_ROS2_KIND_COUNT_
} ferry_ros2_kind;

/** The kind of a ferry type (name and hash must both match); FERRY_ROS2_NONE for others. */
ferry_ros2_kind ferry_ros2_kind_of_ferry(const char *type_name, uint64_t type_hash);

/** The kind of a ROS 2 type name: "sensor_msgs/msg/Image" (also "sensor_msgs/Image"). */
ferry_ros2_kind ferry_ros2_kind_of_name(const char *ros2_name);

/** The ferry type name and hash of a kind (FERRY_IMAGE_TYPE_NAME, ...); NULL / 0 for NONE. */
const char *ferry_ros2_ferry_type(ferry_ros2_kind kind);
uint64_t ferry_ros2_ferry_hash(ferry_ros2_kind kind);

/** The ROS 2 type name of a kind ("sensor_msgs/msg/Image"); NULL for NONE. */
const char *ferry_ros2_name(ferry_ros2_kind kind);

/**
 * The kind's message definition in ROS 2's .msg syntax, the way rosbag2 and Foxglove store a
 * schema of encoding "ros2msg": the type's own fields, then every type it uses, each after a line
 * of 80 '=' and a line "MSG: package/Name". NULL for NONE.
 */
const char *ferry_ros2_definition(ferry_ros2_kind kind);

/* ---------------------------------------------------------------------------------------------
 * Writing CDR from a taken sample
 * ------------------------------------------------------------------------------------------- */

/** Room for the serialisation in front of the bulk: the largest head any kind writes. */
#define FERRY_ROS2_CDR_HEAD_MAX 4096u

/**
 * A sample's serialisation in up to three pieces, ready for writev(): iov[0] in head (the
 * encapsulation header and every field before the bulk), iov[1] the bulk (pixels, points,
 * compressed bytes, tensor elements) pointing into the sample itself, iov[2] in tail (the fields
 * after the bulk, with PointCloud2's is_dense). Kinds without a bulk use iov[0] only.
 */
typedef struct ferry_ros2_cdr {
    struct iovec iov[3];
    unsigned niov;    /**< pieces in use, 1..3 */
    size_t size;      /**< the serialisation's bytes: the sum of the pieces */
    int64_t stamp_ns; /**< the message's header stamp in nanoseconds (sec * 10^9 + nanosec) */
    uint8_t head[FERRY_ROS2_CDR_HEAD_MAX];
    uint8_t tail[16];
} ferry_ros2_cdr;

/**
 * Serialises a taken sample of the given kind, validating it first with the kind's view
 * (ferry_image_view_get, ...). Nothing of the bulk is copied: iov[1] points into s->data, valid
 * while the sample is held.
 *
 * @retval FERRY_OK      *out is filled
 * @retval FERRY_EINVAL  the sample is not a valid message of the kind (or kind is NONE)
 * @retval FERRY_ENOTSUP a device tensor (its elements are not in host memory)
 */
ferry_err ferry_ros2_cdr_encode(ferry_ros2_kind kind, const ferry_sample *s, ferry_ros2_cdr *out);

/**
 * Serialises a CompressedImage made from its fields rather than taken (a JPEG ferry encoded), in
 * the pieces of ferry_ros2_cdr_encode: iov[1] points at data, valid while data is.
 *
 * @retval FERRY_OK      *out is filled
 * @retval FERRY_EINVAL  a string is NULL or longer than its limit (FERRY_MSG_FRAME_ID_MAX,
 *                       FERRY_COMPRESSED_FORMAT_MAX), data is NULL with size > 0, or size does
 *                       not fit in 32 bits
 */
ferry_err ferry_ros2_cdr_encode_compressed(ferry_stamp stamp, const char *frame_id,
                                           const char *format, const void *data, size_t size,
                                           ferry_ros2_cdr *out);

/* ---------------------------------------------------------------------------------------------
 * Reading CDR in place
 * ------------------------------------------------------------------------------------------- */

/** Outcome of a parse. */
typedef enum ferry_ros2_cdr_result {
    FERRY_ROS2_CDR_OK = 0,      /**< the message is filled in */
    FERRY_ROS2_CDR_MALFORMED,   /**< truncated or inconsistent serialisation */
    FERRY_ROS2_CDR_UNSUPPORTED, /**< an encapsulation other than CDR_BE / CDR_LE (XCDR2, ...) */
} ferry_ros2_cdr_result;

/** The std_msgs/Header of every message below; frame_id points into the parsed buffer. */
typedef struct ferry_ros2_header {
    int32_t sec;
    uint32_t nanosec;
    const char *frame_id; /**< NUL-terminated */
} ferry_ros2_header;

/** An Image as serialised; the pointers point into the parsed buffer. */
typedef struct ferry_ros2_image_msg {
    ferry_ros2_header header;
    uint32_t height, width;
    const char *encoding; /**< NUL-terminated */
    uint8_t is_bigendian; /**< the boolean's byte as sent */
    uint32_t step;
    const uint8_t *data;
    uint32_t data_size;
} ferry_ros2_image_msg;

/** A PointField as serialised. */
typedef struct ferry_ros2_field_msg {
    const char *name; /**< NUL-terminated */
    uint32_t offset;
    uint8_t datatype;
    uint32_t count;
} ferry_ros2_field_msg;

/** A PointCloud2 as serialised; the pointers point into the parsed buffer. */
typedef struct ferry_ros2_cloud_msg {
    ferry_ros2_header header;
    uint32_t height, width;
    uint32_t nfields; /**< as sent: only the first FERRY_POINTCLOUD_FIELDS_MAX are in fields */
    ferry_ros2_field_msg fields[FERRY_POINTCLOUD_FIELDS_MAX];
    uint8_t is_bigendian; /**< the boolean's byte as sent */
    uint32_t point_step, row_step;
    const uint8_t *data;
    uint32_t data_size;
    uint8_t is_dense; /**< the boolean's byte as sent */
} ferry_ros2_cloud_msg;

/** A CameraInfo as serialised; the strings point into the parsed buffer. */
typedef struct ferry_ros2_camera_info_msg {
    ferry_ros2_header header;
    uint32_t height, width;
    const char *distortion_model; /**< NUL-terminated */
    uint32_t d_count;             /**< as sent: only the first FERRY_CAMERA_INFO_D_MAX are in d */
    double d[FERRY_CAMERA_INFO_D_MAX];
    double k[9], r[9], p[12];
    uint32_t binning_x, binning_y;
    uint32_t roi_x_offset, roi_y_offset, roi_height, roi_width;
    uint8_t roi_do_rectify; /**< the boolean's byte as sent */
} ferry_ros2_camera_info_msg;

/** A CompressedImage as serialised; the pointers point into the parsed buffer. */
typedef struct ferry_ros2_compressed_msg {
    ferry_ros2_header header;
    const char *format; /**< NUL-terminated */
    const uint8_t *data;
    uint32_t data_size;
} ferry_ros2_compressed_msg;

/** An Imu as serialised. */
typedef struct ferry_ros2_imu_msg {
    ferry_ros2_header header;
    ferry_quaternion orientation;
    double orientation_covariance[9];
    ferry_vector3 angular_velocity;
    double angular_velocity_covariance[9];
    ferry_vector3 linear_acceleration;
    double linear_acceleration_covariance[9];
} ferry_ros2_imu_msg;

/** A ferry_msgs/Tensor as serialised; the pointers point into the parsed buffer. */
typedef struct ferry_ros2_tensor_msg {
    ferry_ros2_header header;
    const char *dtype; /**< NUL-terminated: ferry_dtype_name() ("float32", ...) */
    uint32_t ndim;     /**< as sent: only the first FERRY_TENSOR_DIMS_MAX are in shape */
    int64_t shape[FERRY_TENSOR_DIMS_MAX];
    const uint8_t *data; /**< the elements, C order (the writer sends contiguous tensors only) */
    uint32_t data_size;
} ferry_ros2_tensor_msg;

/** A PoseStamped as serialised. */
typedef struct ferry_ros2_pose_stamped_msg {
    ferry_ros2_header header;
    ferry_pose pose;
} ferry_ros2_pose_stamped_msg;

/** One parsed message of any kind. */
typedef struct ferry_ros2_msg {
    ferry_ros2_kind kind;
    union {
        ferry_ros2_image_msg image;
        ferry_ros2_cloud_msg cloud;
        ferry_ros2_camera_info_msg camera_info;
        ferry_ros2_compressed_msg compressed;
        ferry_ros2_imu_msg imu;
        ferry_ros2_tensor_msg tensor;
        ferry_ros2_pose_stamped_msg pose_stamped;
    } u;
} ferry_ros2_msg;

/**
 * Parses a serialisation of the given kind: ser points to size bytes, the 4-byte encapsulation
 * header first. Every length is checked against size and every result points inside ser; bytes
 * after the message (padding) are allowed. What the fields mean (encodings, geometry) is checked
 * when the message is published (ferry_ros2_publish). *out is valid only with FERRY_ROS2_CDR_OK.
 */
ferry_ros2_cdr_result ferry_ros2_cdr_parse(ferry_ros2_kind kind, const void *ser, size_t size,
                                           ferry_ros2_msg *out);

/* ---------------------------------------------------------------------------------------------
 * Publishing a parsed message on ferry
 * ------------------------------------------------------------------------------------------- */

/**
 * Publishes a parsed message through a loan of pub (a publisher of the kind's ferry type),
 * copying the bulk once, into the loan. The fields are checked as a view would check them: a
 * known encoding whose geometry matches the data, bounded strings, booleans 0 or 1, a stamp's
 * nanoseconds below 10^9, sizes that add up.
 *
 * @retval FERRY_OK      published
 * @retval FERRY_EINVAL  the message is not valid (*why, when not NULL, says which field; an
 *                       image's refused encoding is named, in a buffer of the calling thread
 *                       that its next call overwrites)
 * @retval FERRY_ETOOBIG larger than the publisher's pool allows (*why set)
 * @retval other         the loan's or the publish's error (FERRY_EPOOL, FERRY_EAGAIN, ...); *why
 *                       is ferry_strerror of it
 */
ferry_err ferry_ros2_publish(ferry_publisher *pub, const ferry_ros2_msg *msg, const char **why);

#ifdef __cplusplus
}
#endif
#endif
