/*
 * Reading sensor_msgs Image_, PointCloud2_, CameraInfo_, CompressedImage_ and Imu_ straight from
 * their plain-CDR (XCDR1) serialisation, as DDS received it, without deserialising them into a
 * heap sample: the in path of the bridge (bridge_in.c) copies the pixel, point or compressed
 * bytes from there into a ferry loan.
 * Declared here for the bridge and its tests only; the reader is in bridge_cdr.c.
 *
 * The serialised bytes are untrusted: every length is checked against the serialised size, and
 * a result points only inside the given buffer. Strings are checked for their terminating NUL;
 * what the fields mean (geometry, encodings, field layout) is checked by the bridge afterwards,
 * by the same rules as for a deserialised sample.
 */
#ifndef FERRY_BRIDGE_CDR_H
#define FERRY_BRIDGE_CDR_H

#include <ferry/msg.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Outcome of a parse. */
typedef enum ferry_bridge_cdr_result {
    FERRY_BRIDGE_CDR_OK = 0,      /**< the message is filled in */
    FERRY_BRIDGE_CDR_MALFORMED,   /**< truncated or inconsistent serialisation */
    FERRY_BRIDGE_CDR_UNSUPPORTED, /**< an encapsulation other than CDR_BE / CDR_LE (XCDR2, ...) */
} ferry_bridge_cdr_result;

/** An Image_ as serialised; the pointers point into the parsed buffer. */
typedef struct ferry_bridge_image_msg {
    int32_t sec;
    uint32_t nanosec;
    const char *frame_id; /**< NUL-terminated */
    uint32_t height, width;
    const char *encoding; /**< NUL-terminated */
    uint8_t is_bigendian;
    uint32_t step;
    const uint8_t *data;
    uint32_t data_size;
} ferry_bridge_image_msg;

/** A PointField_ as serialised. */
typedef struct ferry_bridge_field_msg {
    const char *name; /**< NUL-terminated */
    uint32_t offset;
    uint8_t datatype;
    uint32_t count;
} ferry_bridge_field_msg;

/** A PointCloud2_ as serialised; the pointers point into the parsed buffer. */
typedef struct ferry_bridge_cloud_msg {
    int32_t sec;
    uint32_t nanosec;
    const char *frame_id; /**< NUL-terminated */
    uint32_t height, width;
    uint32_t nfields;     /**< as sent: only the first FERRY_POINTCLOUD_FIELDS_MAX are in fields */
    ferry_bridge_field_msg fields[FERRY_POINTCLOUD_FIELDS_MAX];
    uint8_t is_bigendian; /**< the boolean's byte as sent */
    uint32_t point_step, row_step;
    const uint8_t *data;
    uint32_t data_size;
    uint8_t is_dense;     /**< the boolean's byte as sent */
} ferry_bridge_cloud_msg;

/** A CameraInfo_ as serialised; the strings point into the parsed buffer. */
typedef struct ferry_bridge_camera_info_msg {
    int32_t sec;
    uint32_t nanosec;
    const char *frame_id; /**< NUL-terminated */
    uint32_t height, width;
    const char *distortion_model; /**< NUL-terminated */
    uint32_t d_count;     /**< as sent: only the first FERRY_CAMERA_INFO_D_MAX are in d */
    double d[FERRY_CAMERA_INFO_D_MAX];
    double k[9], r[9], p[12];
    uint32_t binning_x, binning_y;
    uint32_t roi_x_offset, roi_y_offset, roi_height, roi_width;
    uint8_t roi_do_rectify; /**< the boolean's byte as sent */
} ferry_bridge_camera_info_msg;

/** A CompressedImage_ as serialised; the pointers point into the parsed buffer. */
typedef struct ferry_bridge_compressed_msg {
    int32_t sec;
    uint32_t nanosec;
    const char *frame_id; /**< NUL-terminated */
    const char *format;   /**< NUL-terminated */
    const uint8_t *data;
    uint32_t data_size;
} ferry_bridge_compressed_msg;

/** An Imu_ as serialised. */
typedef struct ferry_bridge_imu_msg {
    int32_t sec;
    uint32_t nanosec;
    const char *frame_id; /**< NUL-terminated, in the parsed buffer */
    ferry_quaternion orientation;
    double orientation_covariance[9];
    ferry_vector3 angular_velocity;
    double angular_velocity_covariance[9];
    ferry_vector3 linear_acceleration;
    double linear_acceleration_covariance[9];
} ferry_bridge_imu_msg;

/**
 * Parses a serialised Image_: ser points to size bytes, the 4-byte encapsulation header first.
 * Bytes after the message (padding) are allowed. *out is valid only with FERRY_BRIDGE_CDR_OK.
 */
ferry_bridge_cdr_result ferry_bridge_cdr_image(const void *ser, size_t size,
                                               ferry_bridge_image_msg *out);

/** Parses a serialised PointCloud2_, as ferry_bridge_cdr_image does. */
ferry_bridge_cdr_result ferry_bridge_cdr_cloud(const void *ser, size_t size,
                                               ferry_bridge_cloud_msg *out);

/** Parses a serialised CameraInfo_, as ferry_bridge_cdr_image does. */
ferry_bridge_cdr_result ferry_bridge_cdr_camera_info(const void *ser, size_t size,
                                                     ferry_bridge_camera_info_msg *out);

/** Parses a serialised CompressedImage_, as ferry_bridge_cdr_image does. */
ferry_bridge_cdr_result ferry_bridge_cdr_compressed(const void *ser, size_t size,
                                                    ferry_bridge_compressed_msg *out);

/** Parses a serialised Imu_, as ferry_bridge_cdr_image does. */
ferry_bridge_cdr_result ferry_bridge_cdr_imu(const void *ser, size_t size,
                                             ferry_bridge_imu_msg *out);

#ifdef __cplusplus
}
#endif
#endif
