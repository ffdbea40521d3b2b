/*
 * ferry typed frames: camera images, point clouds, camera calibrations, compressed images and
 * inertial measurements laid out in one sample each, with the meanings of sensor_msgs/Image,
 * PointCloud2, CameraInfo, CompressedImage and Imu so that a DDS bridge maps them field by
 * field. A sample holds a fixed header at offset 0 (host byte order; magic, version and header
 * size first) and, for the types with variable data, the data at header.data_offset, a multiple
 * of 64 bytes from the start of the payload. docs/msg.md describes the layouts.
 *
 * The loan functions fill the header from validated arguments; the view functions validate a
 * taken sample as coming from an untrusted process (every size and offset is checked with
 * overflow-safe arithmetic) and copy the header into the view, so a publisher that rewrites its
 * memory after publishing cannot change what was validated. Pixel and point data are not
 * copied: the view points into the sample.
 *
 * Concurrency: the functions keep no state of their own; the rules of the publisher or
 * subscriber they are given apply (one thread at a time per publisher or subscriber).
 */
#ifndef FERRY_MSG_H
#define FERRY_MSG_H

#include <ferry/ferry.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * Common
 * ------------------------------------------------------------------------------------------- */

/** Type names for ferry_publisher_create / ferry_subscriber_create, and their type hashes:
 *  ferry_hash() of the name, written out so that they can be used in constant expressions. */
#define FERRY_IMAGE_TYPE_NAME "sensor_msgs/Image"                /**< type name of images */
#define FERRY_IMAGE_TYPE_HASH UINT64_C(0x3cce13fb76b0c32c)       /**< type hash of images */
#define FERRY_POINTCLOUD_TYPE_NAME "sensor_msgs/PointCloud2"     /**< type name of point clouds */
#define FERRY_POINTCLOUD_TYPE_HASH UINT64_C(0x73690ff41b1b8aba)  /**< type hash of point clouds */
#define FERRY_CAMERA_INFO_TYPE_NAME "sensor_msgs/CameraInfo"     /**< type name of calibrations */
#define FERRY_CAMERA_INFO_TYPE_HASH UINT64_C(0x9c7672bb573d83c4) /**< type hash of calibrations */
#define FERRY_COMPRESSED_IMAGE_TYPE_NAME "sensor_msgs/CompressedImage" /**< compressed images */
#define FERRY_COMPRESSED_IMAGE_TYPE_HASH UINT64_C(0x4cce1d7c5b62f817)  /**< compressed images */
#define FERRY_IMU_TYPE_NAME "sensor_msgs/Imu"                     /**< type name of IMU samples */
#define FERRY_IMU_TYPE_HASH UINT64_C(0xd4539f50b3cee860)          /**< type hash of IMU samples */
#define FERRY_POSE_STAMPED_TYPE_NAME "geometry_msgs/PoseStamped"  /**< type name of poses */
#define FERRY_POSE_STAMPED_TYPE_HASH UINT64_C(0x87c23d1a5f6f5f66) /**< type hash of poses */

/** Version of the sensor_msgs header layouts; a view refuses any other. Version 2 raised the
 *  frame id to 255 bytes and the fields of a point cloud to 64, and added the camera info,
 *  compressed image and IMU headers. */
#define FERRY_MSG_VERSION 2u
/** Header magics: four letters as little-endian 32-bit words. */
#define FERRY_IMAGE_MAGIC 0x474d4946u            /**< "FIMG", of ferry_image_header */
#define FERRY_POINTCLOUD_MAGIC 0x4c435046u       /**< "FPCL", of ferry_pointcloud_header */
#define FERRY_CAMERA_INFO_MAGIC 0x4e494346u      /**< "FCIN", of ferry_camera_info_header */
#define FERRY_COMPRESSED_IMAGE_MAGIC 0x504d4346u /**< "FCMP", of ferry_compressed_image_header */
#define FERRY_IMU_MAGIC 0x554d4946u              /**< "FIMU", of ferry_imu_header */
#define FERRY_POSE_STAMPED_MAGIC 0x534f5046u     /**< "FPOS", of ferry_pose_stamped_header */
/** Alignment of the data from the start of the payload. */
#define FERRY_MSG_DATA_ALIGN 64u

/** Longest strings, in bytes, without the terminating NUL. */
#define FERRY_ENCODING_MAX 31u          /**< longest encoding name ("rgb8", ...) */
#define FERRY_MSG_FRAME_ID_MAX 255u     /**< longest frame id of the sensor_msgs types below */
#define FERRY_FRAME_ID_MAX 63u          /**< longest frame id of a tensor (tensor.h) */
#define FERRY_FIELD_NAME_MAX 31u        /**< longest field name of a point cloud */
#define FERRY_DISTORTION_MODEL_MAX 63u  /**< longest distortion model ("plumb_bob", ...) */
#define FERRY_COMPRESSED_FORMAT_MAX 63u /**< longest compressed format ("jpeg", ...) */
/** Most fields of a point cloud. */
#define FERRY_POINTCLOUD_FIELDS_MAX 64u
/** Most distortion coefficients of a camera info (D); plumb_bob has 5, rational_polynomial 8. */
#define FERRY_CAMERA_INFO_D_MAX 16u

/** A time as builtin_interfaces/Time: seconds and nanoseconds (0..999999999) since the epoch
 *  of the sender's choice (ROS uses the system or simulation clock). ferry does not interpret it.
 *  With a frame_id of at most FERRY_MSG_FRAME_ID_MAX bytes it is the std_msgs/Header of every
 *  type: each header below holds the two as the fields stamp and frame_id. */
typedef struct ferry_stamp {
    int32_t sec;      /**< seconds */
    uint32_t nanosec; /**< nanoseconds, 0..999999999 */
} ferry_stamp;

/** A rotation as geometry_msgs/Quaternion (the identity is x = y = z = 0, w = 1). */
typedef struct ferry_quaternion {
    double x; /**< x */
    double y; /**< y */
    double z; /**< z */
    double w; /**< w */
} ferry_quaternion;

/** A vector in free space as geometry_msgs/Vector3. */
typedef struct ferry_vector3 {
    double x; /**< x */
    double y; /**< y */
    double z; /**< z */
} ferry_vector3;

/* ---------------------------------------------------------------------------------------------
 * Images (sensor_msgs/Image)
 * ------------------------------------------------------------------------------------------- */

/** The image header, at offset 0 of the payload (336 bytes, host byte order). */
typedef struct ferry_image_header {
    uint32_t magic;       /**< FERRY_IMAGE_MAGIC */
    uint16_t version;     /**< FERRY_MSG_VERSION */
    uint16_t header_size; /**< sizeof(ferry_image_header) */
    uint32_t width;       /**< pixels per row */
    uint32_t height;      /**< rows */
    uint32_t step;        /**< bytes per row (of the luma plane for nv12, nv21, nv24) */
    uint8_t is_bigendian; /**< byte order of multi-byte pixels: 0 little, 1 big */
    uint8_t reserved_[3]; /**< zero */
    ferry_stamp stamp;    /**< acquisition time; the publisher sets it */
    char encoding[FERRY_ENCODING_MAX + 1];     /**< "rgb8", ..., NUL-terminated */
    char frame_id[FERRY_MSG_FRAME_ID_MAX + 1]; /**< NUL-terminated; the publisher may set it */
    uint64_t data_offset; /**< pixels, from the start of the payload; a multiple of 64 */
    uint64_t data_size;   /**< pixel bytes: exactly what the encoding and geometry need */
} ferry_image_header;

/** Size arithmetic of an encoding for one geometry (see ferry_image_layout_get). */
typedef struct ferry_image_layout {
    uint32_t bytes_per_pixel; /**< bytes per pixel of a row (1 for nv12, nv21, nv24: luma) */
    uint32_t min_step;        /**< width * bytes_per_pixel */
    uint32_t step;            /**< the step asked for, or min_step when 0 was asked */
    uint64_t data_size;       /**< step * height; * 3 / 2 for nv12 and nv21, * 3 for nv24 */
} ferry_image_layout;

/**
 * Computes bytes per pixel, minimum step and data size of an image. Known encodings, every name
 * of sensor_msgs/image_encodings and nv12:
 * - rgb8, bgr8 (3 bytes per pixel), rgba8, bgra8 (4), rgb16, bgr16 (6), rgba16, bgra16 (8),
 *   mono8 (1), mono16 (2);
 * - the OpenCV types 8UC1..8UC4, 8SC1..8SC4 (1 to 4 bytes), 16UC1..16UC4, 16SC1..16SC4 (2 to 8),
 *   32SC1..32SC4, 32FC1..32FC4 (4 to 16), 64FC1..64FC4 (8 to 32);
 * - bayer_rggb8, bayer_bggr8, bayer_gbrg8, bayer_grbg8 (1), the same with 16 (2);
 * - yuv422, yuv422_yuy2, uyvy, yuyv (2, width even);
 * - nv12, nv21 (a luma plane of step * height bytes, then an interleaved chroma plane of
 *   step * height / 2 bytes; width and height even), nv24 (a luma plane of step * height bytes,
 *   then an interleaved chroma plane of full resolution, 2 * step * height bytes).
 *
 * @param step     bytes per row; 0 for the minimum
 * @retval FERRY_OK      *out is filled
 * @retval FERRY_EINVAL  encoding or out is NULL, the encoding is unknown, width or height is 0,
 *                       width or height is odd where the encoding needs it even, step is below
 *                       the minimum, or a size does not fit (min_step in 32 bits, data_size in
 *                       a size_t)
 */
FERRY_API ferry_err ferry_image_layout_get(const char *encoding, uint32_t width, uint32_t height,
                                           uint32_t step, ferry_image_layout *out);

/** A loaned image: filled by ferry_image_loan, given to ferry_image_publish. */
typedef struct ferry_image {
    ferry_image_header *header; /**< writable: set stamp, frame_id (and is_bigendian) only */
    void *data;                 /**< writable pixels, header->data_size bytes */
    size_t data_size;           /**< header->data_size */
    void *payload;              /**< the loan (== header), as ferry_loan gave it */
    size_t payload_size;        /**< header plus padding plus data */
} ferry_image;

/**
 * Loans one sample of exactly header, padding and pixel bytes and fills the header (magic,
 * version, geometry, encoding, host byte order, data offset and size; stamp zero, frame_id
 * empty). The pixels are not cleared. The loan belongs to the caller until ferry_image_publish
 * or ferry_image_loan_release succeeds. Nothing is loaned on error.
 *
 * @param step  bytes per row; 0 for the minimum (ferry_image_layout_get)
 * @param out   receives the loan; cleared on error
 * @retval FERRY_OK       *out holds the loan
 * @retval FERRY_EINVAL   pub, encoding or out is NULL, or ferry_image_layout_get refuses the
 *                        encoding and geometry, or the sample size does not fit in a size_t
 * @retval FERRY_ETOOBIG  the sample exceeds the publisher's max_sample_size
 * @retval FERRY_ESTATE, FERRY_EPOOL, FERRY_ETIMEDOUT, FERRY_ENOMEM, FERRY_ECLOSED  as ferry_loan
 */
FERRY_API ferry_err ferry_image_loan(ferry_publisher *pub, uint32_t width, uint32_t height,
                                     const char *encoding, uint32_t step, ferry_image *out);

/**
 * Publishes a loaned image (ferry_publish of the whole loan). The header is checked first as a
 * subscriber's view would check it, so an image whose header the caller broke (an unterminated
 * frame_id, a changed geometry) is refused and stays on loan. After FERRY_OK the sample belongs
 * to ferry and *img is cleared; on an error it is still the caller's.
 *
 * @retval FERRY_OK       published
 * @retval FERRY_EINVAL   pub or img is NULL, img holds no loan, or its header is not valid
 * @retval FERRY_EFOREIGN, FERRY_ESTATE, FERRY_ETIMEDOUT, FERRY_ECLOSED  as ferry_publish
 */
FERRY_API ferry_err ferry_image_publish(ferry_publisher *pub, ferry_image *img);

/**
 * Gives an unpublished image loan back (ferry_loan_release); *img is cleared on success.
 * @retval FERRY_EINVAL  pub or img is NULL, or img holds no loan
 * @retval others        as ferry_loan_release
 */
FERRY_API ferry_err ferry_image_loan_release(ferry_publisher *pub, ferry_image *img);

/** A validated image in a taken sample. */
typedef struct ferry_image_view {
    ferry_image_header header; /**< a validated copy of the sample's header; strings terminated */
    const void *data;          /**< the pixels inside the sample, header.data_size bytes */
    size_t data_size;          /**< header.data_size */
    ferry_image_layout layout; /**< the arithmetic of header's encoding and geometry */
} ferry_image_view;

/**
 * Validates a taken sample as an image and describes it. The sample comes from another process:
 * every field is checked (magic, version, header size, known and NUL-terminated encoding,
 * terminated frame_id, is_bigendian 0 or 1, step at least the minimum, data_offset a multiple of
 * 64 at or after the header, data inside the sample, data_size exactly what the encoding needs).
 * The view stays valid while the sample is held; its pixels must not be read after ferry_release.
 *
 * @param s    a sample from ferry_take (or any buffer described by data and size)
 * @param out  receives the view; untouched on error
 * @retval FERRY_OK      *out is filled
 * @retval FERRY_EINVAL  s or out is NULL
 * @retval FERRY_EPROTO  the sample is not a valid image
 */
FERRY_API ferry_err ferry_image_view_get(const ferry_sample *s, ferry_image_view *out);

/* ---------------------------------------------------------------------------------------------
 * Point clouds (sensor_msgs/PointCloud2)
 * ------------------------------------------------------------------------------------------- */

/** Field datatypes, as the constants of sensor_msgs/PointField. */
typedef enum ferry_point_datatype {
    FERRY_POINT_INT8 = 1,
    FERRY_POINT_UINT8 = 2,
    FERRY_POINT_INT16 = 3,
    FERRY_POINT_UINT16 = 4,
    FERRY_POINT_INT32 = 5,
    FERRY_POINT_UINT32 = 6,
    FERRY_POINT_FLOAT32 = 7,
    FERRY_POINT_FLOAT64 = 8,
} ferry_point_datatype;

/** Size in bytes of one element of datatype (1..8); 0 for an unknown datatype. */
FERRY_API uint32_t ferry_point_datatype_size(uint32_t datatype);

/** One field of a point, as sensor_msgs/PointField (44 bytes). */
typedef struct ferry_point_field {
    char name[FERRY_FIELD_NAME_MAX + 1]; /**< non-empty, NUL-terminated, unique in the cloud */
    uint32_t offset;                     /**< from the start of the point */
    uint8_t datatype;                    /**< a ferry_point_datatype */
    uint8_t reserved_[3];                /**< zero */
    uint32_t count;                      /**< elements, at least 1 */
} ferry_point_field;

/** The point cloud header, at offset 0 of the payload (3128 bytes, host byte order). */
typedef struct ferry_pointcloud_header {
    uint32_t magic;       /**< FERRY_POINTCLOUD_MAGIC */
    uint16_t version;     /**< FERRY_MSG_VERSION */
    uint16_t header_size; /**< sizeof(ferry_pointcloud_header) */
    uint32_t height;      /**< rows (1 for an unorganised cloud) */
    uint32_t width;       /**< points per row */
    uint32_t point_step;  /**< bytes per point */
    uint32_t row_step;    /**< width * point_step */
    uint32_t nfields;     /**< used entries of fields, 1..FERRY_POINTCLOUD_FIELDS_MAX */
    uint8_t is_bigendian; /**< 0 little, 1 big */
    uint8_t is_dense;     /**< 1 when no point is invalid; the publisher sets it */
    uint8_t reserved_[2]; /**< zero */
    ferry_stamp stamp;    /**< acquisition time; the publisher sets it */
    char frame_id[FERRY_MSG_FRAME_ID_MAX + 1]; /**< NUL-terminated; the publisher may set it */
    ferry_point_field fields[FERRY_POINTCLOUD_FIELDS_MAX]; /**< the first nfields are used */
    uint64_t data_offset; /**< points, from the start of the payload; a multiple of 64 */
    uint64_t data_size;   /**< row_step * height */
} ferry_pointcloud_header;

/** A loaned point cloud: filled by ferry_pointcloud_loan, given to ferry_pointcloud_publish. */
typedef struct ferry_pointcloud {
    ferry_pointcloud_header *header; /**< writable: set stamp, frame_id, is_dense only */
    void *data;                      /**< writable points, header->data_size bytes */
    size_t data_size;                /**< header->data_size */
    void *payload;                   /**< the loan (== header) */
    size_t payload_size;             /**< header plus padding plus data */
} ferry_pointcloud;

/**
 * Loans one sample for height rows of width points and fills the header. Each field must have
 * a non-empty terminated name unique among the fields, a known datatype, count >= 1, and lie
 * inside the point: offset + size(datatype) * count <= point_step (fields may overlap). A cloud
 * of no point (width or height 0) is allowed. The loan belongs to the caller until
 * ferry_pointcloud_publish or ferry_pointcloud_loan_release succeeds. Nothing is loaned on error.
 *
 * @param fields      nfields entries, copied into the header (reserved bytes cleared)
 * @param point_step  bytes per point; 0 for packed: the end of the field that ends last
 * @param out         receives the loan; cleared on error
 * @retval FERRY_OK       *out holds the loan
 * @retval FERRY_EINVAL   pub, fields or out is NULL; nfields is 0 or above
 *                        FERRY_POINTCLOUD_FIELDS_MAX; a field is not valid as said above;
 *                        width * point_step does not fit in 32 bits; the size does not fit
 * @retval FERRY_ETOOBIG  the sample exceeds the publisher's max_sample_size
 * @retval FERRY_ESTATE, FERRY_EPOOL, FERRY_ETIMEDOUT, FERRY_ENOMEM, FERRY_ECLOSED  as ferry_loan
 */
FERRY_API ferry_err ferry_pointcloud_loan(ferry_publisher *pub, uint32_t width, uint32_t height,
                                          const ferry_point_field *fields, uint32_t nfields,
                                          uint32_t point_step, ferry_pointcloud *out);

/**
 * Publishes a loaned point cloud, checking its header first as ferry_image_publish does. After
 * FERRY_OK the sample belongs to ferry and *pc is cleared; on an error it is still the caller's.
 * @retval FERRY_EINVAL  pub or pc is NULL, pc holds no loan, or its header is not valid
 * @retval others        as ferry_publish
 */
FERRY_API ferry_err ferry_pointcloud_publish(ferry_publisher *pub, ferry_pointcloud *pc);

/** Gives an unpublished point cloud loan back; errors as ferry_image_loan_release. */
FERRY_API ferry_err ferry_pointcloud_loan_release(ferry_publisher *pub, ferry_pointcloud *pc);

/** A validated point cloud in a taken sample. */
typedef struct ferry_pointcloud_view {
    ferry_pointcloud_header header; /**< a validated copy; strings terminated */
    const void *data;               /**< the points inside the sample, data_size bytes */
    size_t data_size;               /**< header.data_size */
} ferry_pointcloud_view;

/**
 * Validates a taken sample as a point cloud, with the rigour of ferry_image_view_get: magic,
 * version, header size, nfields 1..FERRY_POINTCLOUD_FIELDS_MAX, every field valid and inside
 * point_step, row_step ==
 * width * point_step without overflow, data_size == row_step * height, data inside the sample.
 *
 * @retval FERRY_OK      *out is filled
 * @retval FERRY_EINVAL  s or out is NULL
 * @retval FERRY_EPROTO  the sample is not a valid point cloud; *out is untouched
 */
FERRY_API ferry_err ferry_pointcloud_view_get(const ferry_sample *s, ferry_pointcloud_view *out);

/* ---------------------------------------------------------------------------------------------
 * Camera calibrations (sensor_msgs/CameraInfo)
 * ------------------------------------------------------------------------------------------- */

/** A region of interest as sensor_msgs/RegionOfInterest (20 bytes); all zero: the full image. */
typedef struct ferry_roi {
    uint32_t x_offset;    /**< leftmost pixel of the region */
    uint32_t y_offset;    /**< topmost pixel of the region */
    uint32_t height;      /**< rows; 0 with width 0: the full image */
    uint32_t width;       /**< columns */
    uint8_t do_rectify;   /**< 0 or 1: whether a rectified region is wanted */
    uint8_t reserved_[3]; /**< zero */
} ferry_roi;

/** The camera info header: the whole sample (744 bytes, host byte order); no data follows. */
typedef struct ferry_camera_info_header {
    uint32_t magic;       /**< FERRY_CAMERA_INFO_MAGIC */
    uint16_t version;     /**< FERRY_MSG_VERSION */
    uint16_t header_size; /**< sizeof(ferry_camera_info_header), also the sample's size */
    uint32_t height;      /**< rows of the calibrated image */
    uint32_t width;       /**< columns of the calibrated image */
    uint32_t binning_x;   /**< horizontal binning; 0 and 1 both mean none */
    uint32_t binning_y;   /**< vertical binning; 0 and 1 both mean none */
    ferry_roi roi;        /**< the region of the image that was captured */
    uint32_t d_count;     /**< used entries of d, 0..FERRY_CAMERA_INFO_D_MAX */
    ferry_stamp stamp;    /**< acquisition time of the image it calibrates */
    char frame_id[FERRY_MSG_FRAME_ID_MAX + 1];             /**< NUL-terminated; the camera's */
    char distortion_model[FERRY_DISTORTION_MODEL_MAX + 1]; /**< "plumb_bob", ..., terminated */
    double d[FERRY_CAMERA_INFO_D_MAX]; /**< distortion coefficients; those past d_count zero */
    double k[9];                       /**< intrinsic matrix, row-major 3x3 */
    double r[9];                       /**< rectification matrix, row-major 3x3 */
    double p[12];                      /**< projection matrix, row-major 3x4 */
} ferry_camera_info_header;

/** A loaned camera info: filled by ferry_camera_info_loan, given to ferry_camera_info_publish. */
typedef struct ferry_camera_info {
    ferry_camera_info_header *header; /**< writable: every field but magic, version, header_size */
    void *payload;                    /**< the loan (== header) */
    size_t payload_size;              /**< sizeof(ferry_camera_info_header) */
} ferry_camera_info;

/**
 * Loans one sample of exactly sizeof(ferry_camera_info_header) bytes and fills its header with
 * magic, version and size, everything else zero (no distortion model, d_count 0). The caller
 * fills the calibration. The loan belongs to the caller until ferry_camera_info_publish or
 * ferry_camera_info_loan_release succeeds. Nothing is loaned on error.
 *
 * @param out  receives the loan; cleared on error
 * @retval FERRY_OK       *out holds the loan
 * @retval FERRY_EINVAL   pub or out is NULL
 * @retval FERRY_ETOOBIG  the sample exceeds the publisher's max_sample_size
 * @retval FERRY_ESTATE, FERRY_EPOOL, FERRY_ETIMEDOUT, FERRY_ENOMEM, FERRY_ECLOSED  as ferry_loan
 */
FERRY_API ferry_err ferry_camera_info_loan(ferry_publisher *pub, ferry_camera_info *out);

/**
 * Publishes a loaned camera info, checking its header first as ferry_camera_info_view_get
 * would. After FERRY_OK the sample belongs to ferry and *ci is cleared; on an error it is still
 * the caller's.
 * @retval FERRY_OK      published
 * @retval FERRY_EINVAL  pub or ci is NULL, ci holds no loan, or its header is not valid
 * @retval others        as ferry_publish
 */
FERRY_API ferry_err ferry_camera_info_publish(ferry_publisher *pub, ferry_camera_info *ci);

/** Gives an unpublished camera info loan back; errors as ferry_image_loan_release. */
FERRY_API ferry_err ferry_camera_info_loan_release(ferry_publisher *pub, ferry_camera_info *ci);

/** A validated camera info: a copy of the sample's header (it is small), strings terminated. */
typedef struct ferry_camera_info_view {
    ferry_camera_info_header header; /**< the validated copy */
} ferry_camera_info_view;

/**
 * Validates a taken sample as a camera info and copies it: magic, version, header size, a
 * sample of exactly the header's size, terminated frame_id and distortion_model, d_count at most
 * FERRY_CAMERA_INFO_D_MAX with the entries past it zero, roi.do_rectify 0 or 1, reserved bytes
 * zero. The numbers themselves are not judged (ROS allows any).
 *
 * @retval FERRY_OK      *out is filled
 * @retval FERRY_EINVAL  s or out is NULL
 * @retval FERRY_EPROTO  the sample is not a valid camera info; *out is untouched
 */
FERRY_API ferry_err ferry_camera_info_view_get(const ferry_sample *s, ferry_camera_info_view *out);

/* ---------------------------------------------------------------------------------------------
 * Compressed images (sensor_msgs/CompressedImage)
 * ------------------------------------------------------------------------------------------- */

/** The compressed image header, at offset 0 of the payload (352 bytes, host byte order). */
typedef struct ferry_compressed_image_header {
    uint32_t magic;                               /**< FERRY_COMPRESSED_IMAGE_MAGIC */
    uint16_t version;                             /**< FERRY_MSG_VERSION */
    uint16_t header_size;                         /**< sizeof(ferry_compressed_image_header) */
    ferry_stamp stamp;                            /**< acquisition time; the publisher sets it */
    char frame_id[FERRY_MSG_FRAME_ID_MAX + 1];    /**< NUL-terminated; the publisher may set it */
    char format[FERRY_COMPRESSED_FORMAT_MAX + 1]; /**< "jpeg", "png", ..., NUL-terminated */
    uint64_t data_offset; /**< the compressed bytes, from the payload's start; a multiple of 64 */
    uint64_t data_size;   /**< compressed bytes; the sample ends right after them */
} ferry_compressed_image_header;

/** A loaned compressed image: filled by ferry_compressed_image_loan. */
typedef struct ferry_compressed_image {
    ferry_compressed_image_header *header; /**< writable: stamp, frame_id, data_size only */
    void *data;                            /**< writable, capacity bytes */
    size_t capacity;                       /**< the most compressed bytes the loan holds */
    void *payload;                         /**< the loan (== header) */
    size_t payload_size;                   /**< header plus padding plus capacity */
} ferry_compressed_image;

/**
 * Loans one sample for up to capacity compressed bytes and fills the header (format copied,
 * data_size = capacity, stamp zero, frame_id empty). Compress into data, then lower
 * header->data_size to the bytes written: ferry_compressed_image_publish publishes only those.
 * The loan belongs to the caller until ferry_compressed_image_publish or
 * ferry_compressed_image_loan_release succeeds. Nothing is loaned on error.
 *
 * @param format    NUL-terminated, at most FERRY_COMPRESSED_FORMAT_MAX bytes (may be empty)
 * @param capacity  most compressed bytes (0 is allowed: an empty image)
 * @param out       receives the loan; cleared on error
 * @retval FERRY_OK       *out holds the loan
 * @retval FERRY_EINVAL   pub, format or out is NULL, format is too long, or the size does not
 *                        fit in a size_t
 * @retval FERRY_ETOOBIG  the sample exceeds the publisher's max_sample_size
 * @retval FERRY_ESTATE, FERRY_EPOOL, FERRY_ETIMEDOUT, FERRY_ENOMEM, FERRY_ECLOSED  as ferry_loan
 */
FERRY_API ferry_err ferry_compressed_image_loan(ferry_publisher *pub, const char *format,
                                                size_t capacity, ferry_compressed_image *out);

/**
 * Publishes the header and the first header->data_size compressed bytes of a loan, checking
 * the header first. After FERRY_OK the sample belongs to ferry and *ci is cleared; on an error
 * it is still the caller's.
 * @retval FERRY_OK      published
 * @retval FERRY_EINVAL  pub or ci is NULL, ci holds no loan, its header is not valid or
 *                       data_size exceeds the capacity
 * @retval others        as ferry_publish
 */
FERRY_API ferry_err ferry_compressed_image_publish(ferry_publisher *pub,
                                                   ferry_compressed_image *ci);

/** Gives an unpublished compressed image loan back; errors as ferry_image_loan_release. */
FERRY_API ferry_err ferry_compressed_image_loan_release(ferry_publisher *pub,
                                                        ferry_compressed_image *ci);

/** A validated compressed image in a taken sample. */
typedef struct ferry_compressed_image_view {
    ferry_compressed_image_header header; /**< a validated copy; strings terminated */
    const void *data; /**< the compressed bytes inside the sample, data_size bytes */
    size_t data_size; /**< header.data_size */
} ferry_compressed_image_view;

/**
 * Validates a taken sample as a compressed image: magic, version, header size, terminated
 * frame_id and format, data_offset a multiple of 64 at or after the header, and the sample
 * ending exactly at data_offset + data_size. The compressed bytes are not decoded.
 *
 * @retval FERRY_OK      *out is filled
 * @retval FERRY_EINVAL  s or out is NULL
 * @retval FERRY_EPROTO  the sample is not a valid compressed image; *out is untouched
 */
FERRY_API ferry_err ferry_compressed_image_view_get(const ferry_sample *s,
                                                    ferry_compressed_image_view *out);

/* ---------------------------------------------------------------------------------------------
 * Inertial measurements (sensor_msgs/Imu)
 * ------------------------------------------------------------------------------------------- */

/** The IMU header: the whole sample (568 bytes, host byte order); no data follows. Covariances
 *  are row-major 3x3 about x, y, z; as in ROS, all zero means unknown and a first element of -1
 *  means that the estimate is not provided. */
typedef struct ferry_imu_header {
    uint32_t magic;       /**< FERRY_IMU_MAGIC */
    uint16_t version;     /**< FERRY_MSG_VERSION */
    uint16_t header_size; /**< sizeof(ferry_imu_header), also the sample's size */
    ferry_stamp stamp;    /**< measurement time */
    char frame_id[FERRY_MSG_FRAME_ID_MAX + 1]; /**< NUL-terminated; the sensor's */
    ferry_quaternion orientation;              /**< orientation */
    double orientation_covariance[9];          /**< its covariance */
    ferry_vector3 angular_velocity;            /**< rad/s */
    double angular_velocity_covariance[9];     /**< its covariance */
    ferry_vector3 linear_acceleration;         /**< m/s^2 */
    double linear_acceleration_covariance[9];  /**< its covariance */
} ferry_imu_header;

/** A loaned IMU sample: filled by ferry_imu_loan, given to ferry_imu_publish. */
typedef struct ferry_imu {
    ferry_imu_header *header; /**< writable: every field but magic, version, header_size */
    void *payload;            /**< the loan (== header) */
    size_t payload_size;      /**< sizeof(ferry_imu_header) */
} ferry_imu;

/**
 * Loans one sample of exactly sizeof(ferry_imu_header) bytes and fills magic, version and size;
 * the orientation is the identity (w = 1), everything else zero. The loan belongs to the caller
 * until ferry_imu_publish or ferry_imu_loan_release succeeds. Nothing is loaned on error.
 *
 * @param out  receives the loan; cleared on error
 * @retval FERRY_OK       *out holds the loan
 * @retval FERRY_EINVAL   pub or out is NULL
 * @retval FERRY_ETOOBIG  the sample exceeds the publisher's max_sample_size
 * @retval FERRY_ESTATE, FERRY_EPOOL, FERRY_ETIMEDOUT, FERRY_ENOMEM, FERRY_ECLOSED  as ferry_loan
 */
FERRY_API ferry_err ferry_imu_loan(ferry_publisher *pub, ferry_imu *out);

/**
 * Publishes a loaned IMU sample, checking its header first. After FERRY_OK the sample belongs
 * to ferry and *imu is cleared; on an error it is still the caller's.
 * @retval FERRY_OK      published
 * @retval FERRY_EINVAL  pub or imu is NULL, imu holds no loan, or its header is not valid
 * @retval others        as ferry_publish
 */
FERRY_API ferry_err ferry_imu_publish(ferry_publisher *pub, ferry_imu *imu);

/** Gives an unpublished IMU loan back; errors as ferry_image_loan_release. */
FERRY_API ferry_err ferry_imu_loan_release(ferry_publisher *pub, ferry_imu *imu);

/** A validated IMU sample: a copy of the sample's header, frame_id terminated. */
typedef struct ferry_imu_view {
    ferry_imu_header header; /**< the validated copy */
} ferry_imu_view;

/**
 * Validates a taken sample as an IMU sample and copies it: magic, version, header size, a sample
 * of exactly the header's size, a terminated frame_id. The numbers are not judged.
 *
 * @retval FERRY_OK      *out is filled
 * @retval FERRY_EINVAL  s or out is NULL
 * @retval FERRY_EPROTO  the sample is not a valid IMU sample; *out is untouched
 */
FERRY_API ferry_err ferry_imu_view_get(const ferry_sample *s, ferry_imu_view *out);

/* ---------------------------------------------------------------------------------------------
 * Poses (geometry_msgs/PoseStamped)
 * ------------------------------------------------------------------------------------------- */

/** A position and an orientation (geometry_msgs/Pose: its Point is a ferry_vector3). */
typedef struct ferry_pose {
    ferry_vector3 position;       /**< x, y, z */
    ferry_quaternion orientation; /**< x, y, z, w */
} ferry_pose;

/** The pose header: the whole sample (328 bytes, host byte order); no data follows. */
typedef struct ferry_pose_stamped_header {
    uint32_t magic;       /**< FERRY_POSE_STAMPED_MAGIC */
    uint16_t version;     /**< FERRY_MSG_VERSION */
    uint16_t header_size; /**< sizeof(ferry_pose_stamped_header), also the sample's size */
    ferry_stamp stamp;    /**< the time of the pose */
    char frame_id[FERRY_MSG_FRAME_ID_MAX + 1]; /**< NUL-terminated; the frame it is in */
    ferry_pose pose;                           /**< the pose */
} ferry_pose_stamped_header;

/** A loaned pose: filled by ferry_pose_stamped_loan, given to ferry_pose_stamped_publish. */
typedef struct ferry_pose_stamped {
    ferry_pose_stamped_header *header; /**< writable: every field but magic, version, header_size */
    void *payload;                     /**< the loan (== header) */
    size_t payload_size;               /**< sizeof(ferry_pose_stamped_header) */
} ferry_pose_stamped;

/**
 * Loans one sample of exactly sizeof(ferry_pose_stamped_header) bytes and fills magic, version
 * and size; the orientation is the identity (w = 1), everything else zero. The loan belongs to
 * the caller until ferry_pose_stamped_publish or ferry_pose_stamped_loan_release succeeds.
 * Nothing is loaned on error.
 *
 * @param out  receives the loan; cleared on error
 * @retval FERRY_OK       *out holds the loan
 * @retval FERRY_EINVAL   pub or out is NULL
 * @retval FERRY_ETOOBIG  the sample exceeds the publisher's max_sample_size
 * @retval FERRY_ESTATE, FERRY_EPOOL, FERRY_ETIMEDOUT, FERRY_ENOMEM, FERRY_ECLOSED  as ferry_loan
 */
FERRY_API ferry_err ferry_pose_stamped_loan(ferry_publisher *pub, ferry_pose_stamped *out);

/**
 * Publishes a loaned pose, checking its header first. After FERRY_OK the sample belongs to
 * ferry and *pose is cleared; on an error it is still the caller's.
 * @retval FERRY_OK      published
 * @retval FERRY_EINVAL  pub or pose is NULL, pose holds no loan, or its header is not valid
 * @retval others        as ferry_publish
 */
FERRY_API ferry_err ferry_pose_stamped_publish(ferry_publisher *pub, ferry_pose_stamped *pose);

/** Gives an unpublished pose loan back; errors as ferry_image_loan_release. */
FERRY_API ferry_err ferry_pose_stamped_loan_release(ferry_publisher *pub, ferry_pose_stamped *pose);

/** A validated pose: a copy of the sample's header, frame_id terminated. */
typedef struct ferry_pose_stamped_view {
    ferry_pose_stamped_header header; /**< the validated copy */
} ferry_pose_stamped_view;

/**
 * Validates a taken sample as a pose and copies it: magic, version, header size, a sample of
 * exactly the header's size, a terminated frame_id. The numbers are not judged.
 *
 * @retval FERRY_OK      *out is filled
 * @retval FERRY_EINVAL  s or out is NULL
 * @retval FERRY_EPROTO  the sample is not a valid pose; *out is untouched
 */
FERRY_API ferry_err ferry_pose_stamped_view_get(const ferry_sample *s,
                                                ferry_pose_stamped_view *out);

#ifdef __cplusplus
}
#endif
#endif /* FERRY_MSG_H */
