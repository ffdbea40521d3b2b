/*
 * ferry typed frames: camera images and point clouds laid out in one sample each, with the
 * meanings of sensor_msgs/Image and sensor_msgs/PointCloud2 so that a DDS bridge maps them field
 * by field. A sample holds a fixed header at offset 0 and the data at header.data_offset, a
 * multiple of 64 bytes from the start of the payload. docs/msg.md describes the layouts.
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
#define FERRY_IMAGE_TYPE_NAME "sensor_msgs/Image"               /**< type name of images */
#define FERRY_IMAGE_TYPE_HASH UINT64_C(0x3cce13fb76b0c32c)      /**< type hash of images */
#define FERRY_POINTCLOUD_TYPE_NAME "sensor_msgs/PointCloud2"    /**< type name of point clouds */
#define FERRY_POINTCLOUD_TYPE_HASH UINT64_C(0x73690ff41b1b8aba) /**< type hash of point clouds */

/** Version of both header layouts; a view refuses any other. */
#define FERRY_MSG_VERSION 1u
/** Header magics: "FIMG" and "FPCL" as little-endian 32-bit words. */
#define FERRY_IMAGE_MAGIC 0x474d4946u      /**< "FIMG", of ferry_image_header */
#define FERRY_POINTCLOUD_MAGIC 0x4c435046u /**< "FPCL", of ferry_pointcloud_header */
/** Alignment of the data from the start of the payload. */
#define FERRY_MSG_DATA_ALIGN 64u

/** Longest encoding name, frame id and field name, in bytes, without the terminating NUL. */
#define FERRY_ENCODING_MAX 31u   /**< longest encoding name ("rgb8", ...) */
#define FERRY_FRAME_ID_MAX 63u   /**< longest frame id, of images and point clouds */
#define FERRY_FIELD_NAME_MAX 31u /**< longest field name of a point cloud */
/** Most fields of a point cloud. */
#define FERRY_POINTCLOUD_FIELDS_MAX 16u

/** A time as builtin_interfaces/Time: seconds and nanoseconds (0..999999999) since the epoch
 *  of the sender's choice (ROS uses the system or simulation clock). ferry does not interpret it. */
typedef struct ferry_stamp {
    int32_t sec;      /**< seconds */
    uint32_t nanosec; /**< nanoseconds, 0..999999999 */
} ferry_stamp;

/* ---------------------------------------------------------------------------------------------
 * Images (sensor_msgs/Image)
 * ------------------------------------------------------------------------------------------- */

/** The image header, at offset 0 of the payload (144 bytes, host byte order). */
typedef struct ferry_image_header {
    uint32_t magic;          /**< FERRY_IMAGE_MAGIC */
    uint16_t version;        /**< FERRY_MSG_VERSION */
    uint16_t header_size;    /**< sizeof(ferry_image_header) */
    uint32_t width;          /**< pixels per row */
    uint32_t height;         /**< rows */
    uint32_t step;           /**< bytes per row (of the luma plane for nv12) */
    uint8_t is_bigendian;    /**< byte order of multi-byte pixels: 0 little, 1 big */
    uint8_t reserved_[3];    /**< zero */
    ferry_stamp stamp;       /**< acquisition time; the publisher sets it */
    char encoding[FERRY_ENCODING_MAX + 1]; /**< "rgb8", ..., NUL-terminated */
    char frame_id[FERRY_FRAME_ID_MAX + 1]; /**< NUL-terminated; the publisher may set it */
    uint64_t data_offset;    /**< pixels, from the start of the payload; a multiple of 64 */
    uint64_t data_size;      /**< pixel bytes: exactly what the encoding and geometry need */
} ferry_image_header;

/** Size arithmetic of an encoding for one geometry (see ferry_image_layout_get). */
typedef struct ferry_image_layout {
    uint32_t bytes_per_pixel; /**< bytes per pixel of a row (1 for nv12: its luma plane) */
    uint32_t min_step;        /**< width * bytes_per_pixel */
    uint32_t step;            /**< the step asked for, or min_step when 0 was asked */
    uint64_t data_size;       /**< step * height, or step * height * 3 / 2 for nv12 */
} ferry_image_layout;

/**
 * Computes bytes per pixel, minimum step and data size of an image. Known encodings: rgb8,
 * bgr8 (3 bytes per pixel), rgba8, bgra8, 32FC1 (4), mono8 (1), mono16, 16UC1 (2), yuv422,
 * yuv422_yuy2, yuyv, uyvy (2, width even), nv12 (a luma plane of step * height bytes, then an
 * interleaved chroma plane of step * height / 2 bytes; width and height even).
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

/** The point cloud header, at offset 0 of the payload (824 bytes, host byte order). */
typedef struct ferry_pointcloud_header {
    uint32_t magic;          /**< FERRY_POINTCLOUD_MAGIC */
    uint16_t version;        /**< FERRY_MSG_VERSION */
    uint16_t header_size;    /**< sizeof(ferry_pointcloud_header) */
    uint32_t height;         /**< rows (1 for an unorganised cloud) */
    uint32_t width;          /**< points per row */
    uint32_t point_step;     /**< bytes per point */
    uint32_t row_step;       /**< width * point_step */
    uint32_t nfields;        /**< used entries of fields, 1..FERRY_POINTCLOUD_FIELDS_MAX */
    uint8_t is_bigendian;    /**< 0 little, 1 big */
    uint8_t is_dense;        /**< 1 when no point is invalid; the publisher sets it */
    uint8_t reserved_[2];    /**< zero */
    ferry_stamp stamp;       /**< acquisition time; the publisher sets it */
    char frame_id[FERRY_FRAME_ID_MAX + 1]; /**< NUL-terminated; the publisher may set it */
    ferry_point_field fields[FERRY_POINTCLOUD_FIELDS_MAX]; /**< the first nfields are used */
    uint64_t data_offset;    /**< points, from the start of the payload; a multiple of 64 */
    uint64_t data_size;      /**< row_step * height */
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
 * version, header size, nfields 1..16, every field valid and inside point_step, row_step ==
 * width * point_step without overflow, data_size == row_step * height, data inside the sample.
 *
 * @retval FERRY_OK      *out is filled
 * @retval FERRY_EINVAL  s or out is NULL
 * @retval FERRY_EPROTO  the sample is not a valid point cloud; *out is untouched
 */
FERRY_API ferry_err ferry_pointcloud_view_get(const ferry_sample *s, ferry_pointcloud_view *out);

#ifdef __cplusplus
}
#endif
#endif /* FERRY_MSG_H */
