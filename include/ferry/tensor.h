/*
 * ferry tensors: n-dimensional arrays (dtype, shape, strides) in one sample each, on the host or
 * in a device frame, and their export as DLPack tensors for PyTorch, CuPy, NumPy, JAX and any
 * other DLPack consumer, without a copy.
 *
 * A host tensor sample holds a fixed header (ferry_tensor_header) at offset 0 and the elements at
 * header.data_offset (256 from the loan functions, a multiple of 64 in any case). A device tensor
 * is a device frame (ferry/gpu.h) whose host descriptor carries the same header as its metadata
 * and whose device memory holds the elements. docs/tensor.md describes the layout.
 *
 * The loan functions fill the header from validated arguments; the view functions validate a
 * taken sample as coming from an untrusted process (overflow-safe arithmetic: every element that
 * shape and strides can reach lies inside data_size, which lies inside the sample or the frame)
 * and copy the header into the view, so a publisher that rewrites its memory after publishing
 * cannot change what was validated. Elements are never copied.
 *
 * DLPack: the ferry_dl_* and ferry_dlpack_* types are ABI-identical to DLPack's DLDevice,
 * DLDataType, DLTensor, DLManagedTensor and (DLPack 1.0) DLManagedTensorVersioned, so a pointer
 * to one may be handed to any DLPack consumer (for Python, in a capsule named "dltensor" or
 * "dltensor_versioned"). An export owns the sample (or device frame) it was made from: its
 * deleter gives it back.
 *
 * Concurrency: the functions keep no state of their own beyond a process-wide pool of export
 * records (locked). The rules of the publisher or subscriber they are given apply (one thread at
 * a time per publisher or subscriber). A deleter releases its sample with ferry_release (or
 * ferry_gpu_frame_release), so it must run on the thread that uses the subscriber, or be
 * serialised with that thread's use of the subscriber. A subscriber with live exports holds their
 * samples, so ferry_subscriber_destroy refuses it (FERRY_EBUSY) until every deleter ran.
 */
#ifndef FERRY_TENSOR_H
#define FERRY_TENSOR_H

#include <ferry/ferry.h>
#include <ferry/msg.h> /* ferry_stamp, FERRY_FRAME_ID_MAX */

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * Element types
 * ------------------------------------------------------------------------------------------- */

/** Type name for ferry_publisher_create / ferry_subscriber_create, and its type hash
 *  (ferry_hash() of the name, written out for constant expressions). */
#define FERRY_TENSOR_TYPE_NAME "ferry/Tensor"               /**< type name of tensors */
#define FERRY_TENSOR_TYPE_HASH UINT64_C(0xf3f1a6ca9ba09495) /**< type hash of tensors */

/** Element types. 0 is no type. */
typedef enum ferry_dtype {
    FERRY_DTYPE_INT8 = 1,
    FERRY_DTYPE_UINT8 = 2,
    FERRY_DTYPE_INT16 = 3,
    FERRY_DTYPE_UINT16 = 4,
    FERRY_DTYPE_INT32 = 5,
    FERRY_DTYPE_UINT32 = 6,
    FERRY_DTYPE_INT64 = 7,
    FERRY_DTYPE_UINT64 = 8,
    FERRY_DTYPE_FLOAT16 = 9,
    FERRY_DTYPE_BFLOAT16 = 10,
    FERRY_DTYPE_FLOAT32 = 11,
    FERRY_DTYPE_FLOAT64 = 12,
    FERRY_DTYPE_BOOL = 13, /**< one byte per element, 0 or 1 */
} ferry_dtype;

/** Bytes per element of dtype (1..8); 0 for an unknown dtype. */
FERRY_API size_t ferry_dtype_size(ferry_dtype dtype);

/** The dtype's name as NumPy spells it ("float32", "bfloat16", "bool"); "unknown" for an
 *  unknown dtype. Never NULL. */
FERRY_API const char *ferry_dtype_name(ferry_dtype dtype);

/* ---------------------------------------------------------------------------------------------
 * DLPack, ABI-identical
 * ------------------------------------------------------------------------------------------- */

/** DLDeviceType values used by ferry. */
#define FERRY_DL_CPU 1       /**< kDLCPU */
#define FERRY_DL_CUDA 2      /**< kDLCUDA */
#define FERRY_DL_CUDA_HOST 3 /**< kDLCUDAHost */

/** DLDataTypeCode values used by ferry. */
#define FERRY_DL_INT 0u    /**< kDLInt */
#define FERRY_DL_UINT 1u   /**< kDLUInt */
#define FERRY_DL_FLOAT 2u  /**< kDLFloat */
#define FERRY_DL_BFLOAT 4u /**< kDLBfloat */
#define FERRY_DL_BOOL 6u   /**< kDLBool */

/** DLPack version implemented by the versioned export. */
#define FERRY_DLPACK_MAJOR 1u /**< DLPACK_MAJOR_VERSION */
#define FERRY_DLPACK_MINOR 0u /**< DLPACK_MINOR_VERSION */
/** DLPACK_FLAG_BITMASK_READ_ONLY: the consumer must not write the data. */
#define FERRY_DLPACK_FLAG_READ_ONLY (UINT64_C(1) << 0)

/** DLDevice. */
typedef struct ferry_dl_device {
    int32_t device_type; /**< FERRY_DL_CPU, FERRY_DL_CUDA, ... */
    int32_t device_id;   /**< device ordinal (0 for the CPU) */
} ferry_dl_device;

/** DLDataType. */
typedef struct ferry_dl_data_type {
    uint8_t code;   /**< FERRY_DL_INT, ... */
    uint8_t bits;   /**< bits per lane */
    uint16_t lanes; /**< 1 */
} ferry_dl_data_type;

/** DLTensor. */
typedef struct ferry_dl_tensor {
    void *data;               /**< the elements (host or device address) */
    ferry_dl_device device;   /**< where data lies */
    int32_t ndim;             /**< number of dimensions */
    ferry_dl_data_type dtype; /**< the element type */
    int64_t *shape;           /**< ndim entries */
    int64_t *strides;         /**< ndim entries, in elements (never NULL from ferry) */
    uint64_t byte_offset;     /**< 0 from ferry */
} ferry_dl_tensor;

/** DLManagedTensor: the unversioned export. */
typedef struct ferry_dlpack_tensor {
    ferry_dl_tensor dl_tensor;                         /**< the tensor */
    void *manager_ctx;                                 /**< ferry's */
    void (*deleter)(struct ferry_dlpack_tensor *self); /**< gives the sample back; call once */
} ferry_dlpack_tensor;

/** DLPackVersion. */
typedef struct ferry_dl_version {
    uint32_t major; /**< FERRY_DLPACK_MAJOR */
    uint32_t minor; /**< FERRY_DLPACK_MINOR */
} ferry_dl_version;

/** DLManagedTensorVersioned (DLPack 1.0): the versioned export. */
typedef struct ferry_dlpack_tensor_versioned {
    ferry_dl_version version;                                    /**< 1.0 */
    void *manager_ctx;                                           /**< ferry's */
    void (*deleter)(struct ferry_dlpack_tensor_versioned *self); /**< gives the sample back */
    uint64_t flags;                                              /**< FERRY_DLPACK_FLAG_READ_ONLY */
    ferry_dl_tensor dl_tensor;                                   /**< the tensor */
} ferry_dlpack_tensor_versioned;

/** Fills *out with dtype's DLPack data type (lanes 1).
 *  @retval FERRY_EINVAL  out is NULL or dtype is unknown */
FERRY_API ferry_err ferry_dtype_to_dl(ferry_dtype dtype, ferry_dl_data_type *out);

/** The ferry dtype of a DLPack data type.
 *  @retval FERRY_EINVAL  out is NULL, or no ferry dtype has that code, bits and lanes */
FERRY_API ferry_err ferry_dtype_from_dl(ferry_dl_data_type dl, ferry_dtype *out);

/* ---------------------------------------------------------------------------------------------
 * Tensor samples
 * ------------------------------------------------------------------------------------------- */

/** Version of the header layout; a view refuses any other. */
#define FERRY_TENSOR_VERSION 1u
/** Header magic: "FTNS" as a little-endian 32-bit word. */
#define FERRY_TENSOR_MAGIC 0x534e5446u
/** Most dimensions. */
#define FERRY_TENSOR_DIMS_MAX 8u
/** Alignment of data_offset that every view requires. */
#define FERRY_TENSOR_DATA_ALIGN 64u
/** Offset of the elements in host tensors from ferry_tensor_loan. */
#define FERRY_TENSOR_DATA_OFFSET 256u

/** The tensor header (248 bytes, host byte order): at offset 0 of a host tensor's payload, or
 *  the metadata of a device tensor's frame. */
typedef struct ferry_tensor_header {
    uint32_t magic;           /**< FERRY_TENSOR_MAGIC */
    uint16_t version;         /**< FERRY_TENSOR_VERSION */
    uint16_t header_size;     /**< sizeof(ferry_tensor_header) */
    ferry_dl_data_type dtype; /**< as DLPack: one of the ferry dtypes, lanes 1 */
    uint32_t ndim;            /**< 0..FERRY_TENSOR_DIMS_MAX (0: a scalar, one element) */
    ferry_dl_device device;   /**< FERRY_DL_CPU (id 0) for host tensors; FERRY_DL_CUDA and the
                                   publisher's device ordinal for device tensors */
    ferry_stamp stamp;        /**< acquisition time; the publisher sets it */
    int64_t shape[FERRY_TENSOR_DIMS_MAX];   /**< ndim entries >= 0, the rest 0 */
    int64_t strides[FERRY_TENSOR_DIMS_MAX]; /**< in elements, ndim entries >= 0, the rest 0 */
    char frame_id[FERRY_FRAME_ID_MAX + 1];  /**< NUL-terminated; the publisher may set it */
    uint64_t data_offset; /**< host: elements from the start of the payload, a multiple of
                               64 at or after the header; device: from the frame's start */
    uint64_t data_size;   /**< element bytes: at least the extent of shape and strides */
    uint64_t reserved_;   /**< zero */
} ferry_tensor_header;

/** A loaned host tensor: filled by ferry_tensor_loan, given to ferry_tensor_publish. */
typedef struct ferry_tensor {
    ferry_tensor_header *header; /**< writable: set stamp and frame_id only */
    void *data;                  /**< writable elements, data_size bytes */
    size_t data_size;            /**< header->data_size */
    void *payload;               /**< the loan (== header), as ferry_loan gave it */
    size_t payload_size;         /**< header, padding and data */
} ferry_tensor;

/**
 * Loans one sample for a tensor and fills its header (magic, version, dtype, shape, strides,
 * host device, data offset FERRY_TENSOR_DATA_OFFSET and size; stamp zero, frame_id empty). The
 * elements are not cleared. data_size is the extent of shape and strides: numel * element size
 * when C-contiguous, (sum of (shape[i] - 1) * strides[i] + 1) * element size otherwise, 0 when a
 * dimension is 0. The loan belongs to the caller until ferry_tensor_publish or
 * ferry_tensor_loan_release succeeds. Nothing is loaned on error.
 *
 * @param ndim     0..FERRY_TENSOR_DIMS_MAX
 * @param shape    ndim sizes >= 0 (may be NULL when ndim is 0)
 * @param strides  ndim strides >= 0 in elements, or NULL for C-contiguous (row-major)
 * @param out      receives the loan; cleared on error
 * @retval FERRY_OK       *out holds the loan
 * @retval FERRY_EINVAL   pub or out is NULL, dtype is unknown, ndim is above the maximum, shape
 *                        is NULL with ndim > 0, a size or stride is negative, or the extent does
 *                        not fit in 64 bits or the sample size in a size_t
 * @retval FERRY_ETOOBIG  the sample exceeds the publisher's max_sample_size
 * @retval FERRY_ESTATE, FERRY_EPOOL, FERRY_ETIMEDOUT, FERRY_ENOMEM, FERRY_ECLOSED  as ferry_loan
 */
FERRY_API ferry_err ferry_tensor_loan(ferry_publisher *pub, ferry_dtype dtype, uint32_t ndim,
                                      const int64_t *shape, const int64_t *strides,
                                      ferry_tensor *out);

/**
 * Publishes a loaned tensor (ferry_publish of the whole loan). The header is checked first as a
 * view would check it, so a tensor whose header the caller broke is refused and stays on loan.
 * After FERRY_OK the sample belongs to ferry and *t is cleared; on an error it is still the
 * caller's.
 * @retval FERRY_OK       published
 * @retval FERRY_EINVAL   pub or t is NULL, t holds no loan, or its header is not valid
 * @retval FERRY_EFOREIGN, FERRY_ESTATE, FERRY_ETIMEDOUT, FERRY_ECLOSED  as ferry_publish
 */
FERRY_API ferry_err ferry_tensor_publish(ferry_publisher *pub, ferry_tensor *t);

/**
 * Gives an unpublished tensor loan back (ferry_loan_release); *t is cleared on success.
 * @retval FERRY_EINVAL  pub or t is NULL, or t holds no loan
 * @retval others        as ferry_loan_release
 */
FERRY_API ferry_err ferry_tensor_loan_release(ferry_publisher *pub, ferry_tensor *t);

/** A validated tensor. */
typedef struct ferry_tensor_view {
    ferry_tensor_header header; /**< a validated copy of the header; frame_id terminated */
    ferry_dtype dtype;          /**< header.dtype as a ferry dtype */
    size_t elem_size;           /**< bytes per element */
    uint64_t numel;             /**< elements: the product of the sizes (1 for ndim 0) */
    ferry_dl_device device;     /**< where data lives: the CPU, or the subscriber's device */
    const void *data;           /**< the elements: inside the sample, or device memory */
    size_t data_size;           /**< header.data_size */
} ferry_tensor_view;

/**
 * Validates the tensor arguments and fills *h for them: magic, version, header size, dtype,
 * ndim, shape, strides (C-contiguous when strides is NULL, unused entries 0), a host device,
 * data_offset FERRY_TENSOR_DATA_OFFSET and data_size the extent: numel * element size when
 * C-contiguous, (sum of (shape[i] - 1) * strides[i] + 1) * element size otherwise, 0 when a size
 * is 0. Stamp, frame_id and the rest are zero. ferry_tensor_loan uses it; so can a publisher of
 * its own layouts (set device and data_offset after it).
 *
 * @param ndim     0..FERRY_TENSOR_DIMS_MAX (0: a scalar, one element)
 * @param shape    ndim sizes >= 0 (may be NULL when ndim is 0)
 * @param strides  ndim strides >= 0 in elements, or NULL for C-contiguous (row-major)
 * @retval FERRY_OK      *h is filled
 * @retval FERRY_EINVAL  h is NULL, dtype is unknown, ndim is above the maximum, shape is NULL
 *                       with ndim > 0, a size or stride is negative, or a stride, the element
 *                       count or the extent in bytes exceeds INT64_MAX
 */
FERRY_API ferry_err ferry_tensor_header_init(ferry_tensor_header *h, ferry_dtype dtype,
                                             uint32_t ndim, const int64_t *shape,
                                             const int64_t *strides);

/**
 * Validates a copy of a tensor header whose data_offset and data_size count from the start of a
 * region of region_size bytes (a host tensor's payload, or a device frame), and fills out's
 * header, dtype, elem_size, numel and data_size (out->data and out->device are left NULL and
 * zero: the caller knows where the region is). The checks: magic, version, header size, a
 * known dtype with lanes 1, ndim at most 8, sizes and strides >= 0 and unused entries 0, device
 * FERRY_DL_CPU with id 0 or FERRY_DL_CUDA with id >= 0, terminated frame_id, reserved zero,
 * data_offset a multiple of 64 (and at or after the header for a CPU tensor), data inside the
 * region, and the extent of shape and strides at most data_size (overflow-safe).
 *
 * @retval FERRY_OK      *out is filled
 * @retval FERRY_EINVAL  h or out is NULL
 * @retval FERRY_EPROTO  the header is not valid; *out is untouched
 */
FERRY_API ferry_err ferry_tensor_header_check(const ferry_tensor_header *h, uint64_t region_size,
                                              ferry_tensor_view *out);

/**
 * Validates a taken sample as a host tensor and describes it: magic, version, header size, a
 * known dtype with lanes 1, ndim at most 8, sizes and strides >= 0 and unused entries 0, a
 * host device, terminated frame_id, reserved 0, data_offset a multiple of 64 at or after the
 * header, data inside the sample, and every element reachable through shape and strides inside
 * data_size (overflow-safe). The view stays valid while the sample is held.
 *
 * @param s    a sample from ferry_take (or any buffer described by data and size)
 * @param out  receives the view; untouched on error
 * @retval FERRY_OK      *out is filled
 * @retval FERRY_EINVAL  s or out is NULL
 * @retval FERRY_EPROTO  the sample is not a valid host tensor
 */
FERRY_API ferry_err ferry_tensor_view_get(const ferry_sample *s, ferry_tensor_view *out);

/**
 * Exports a taken host tensor as a DLPack DLManagedTensor and takes ownership of the sample:
 * on FERRY_OK *sample is cleared and the caller must not release it; the export's deleter
 * releases it with ferry_release (on the subscriber's thread: see the top of this file). The
 * export points at the sample's read-only mapping: consumers must not write the data. One export
 * record is taken from a process-wide pool (a heap allocation only when the pool is empty; it
 * grows to the most exports alive at once and is never given back). The deleter must be called
 * exactly once; a second call on an export whose record was not yet reused is ignored. On error
 * nothing changes and the sample is still the caller's.
 *
 * @retval FERRY_OK       *out is an export; call (*out)->deleter(*out) when done
 * @retval FERRY_EINVAL   a pointer is NULL
 * @retval FERRY_ESTATE   the sample is not held (already released)
 * @retval FERRY_EFOREIGN the sample was taken by another subscriber
 * @retval FERRY_EPROTO   the sample is not a valid host tensor
 * @retval FERRY_ENOMEM   no memory for an export record
 */
FERRY_API ferry_err ferry_tensor_to_dlpack(ferry_subscriber *sub, ferry_sample *sample,
                                           ferry_dlpack_tensor **out);

/** ferry_tensor_to_dlpack as a DLPack 1.0 DLManagedTensorVersioned, version 1.0, with
 *  FERRY_DLPACK_FLAG_READ_ONLY set. Same ownership, threading and errors. */
FERRY_API ferry_err ferry_tensor_to_dlpack_versioned(ferry_subscriber *sub, ferry_sample *sample,
                                                     ferry_dlpack_tensor_versioned **out);

/* ---------------------------------------------------------------------------------------------
 * Device tensors. These need libferry_gpu (and ferry/gpu.h); they are declared here so that
 * one header describes tensors. Without a CUDA driver or device they return FERRY_ENODEV.
 * ------------------------------------------------------------------------------------------- */

struct ferry_gpu_publisher;
struct ferry_gpu_subscriber;
struct ferry_gpu_frame;

/**
 * Publishes a device tensor whose elements are at device_ptr, a loan of
 * ferry_gpu_loan(gpub, size, stream, &device_ptr) with size at least the extent of shape and
 * strides (computed as for ferry_tensor_loan). The header (device FERRY_DL_CUDA with the
 * publisher's device, data_offset 0, data_size the extent) travels as the frame's metadata
 * (ferry_gpu_publish_meta). Readers see the frame once the work enqueued on stream before this
 * call completed. After FERRY_OK the frame is ferry's; on an error it is still the caller's loan.
 *
 * @param stamp     acquisition time, or NULL for zero
 * @param frame_id  up to FERRY_FRAME_ID_MAX bytes, or NULL for empty
 * @retval FERRY_OK      published
 * @retval FERRY_EINVAL  gpub or device_ptr is NULL, the tensor arguments are invalid (as
 *                       ferry_tensor_loan), frame_id is too long, or the extent exceeds the loan
 * @retval FERRY_ENODEV  no device
 * @retval others        as ferry_gpu_publish
 */
FERRY_API ferry_err ferry_tensor_gpu_publish(struct ferry_gpu_publisher *gpub, void *device_ptr,
                                             void *stream, ferry_dtype dtype, uint32_t ndim,
                                             const int64_t *shape, const int64_t *strides,
                                             const ferry_stamp *stamp, const char *frame_id);

/**
 * Validates a taken device frame's metadata as a device tensor (the checks of
 * ferry_tensor_view_get, with a CUDA device, and data_offset + data_size inside the frame) and
 * describes it: view.data is the device address, view.device is FERRY_DL_CUDA with the
 * subscriber's device ordinal (a reader on another device than the publisher's sees the frame
 * through its own mapping).
 *
 * @retval FERRY_OK      *out is filled
 * @retval FERRY_EINVAL  frame or out is NULL
 * @retval FERRY_ESTATE  the frame holds nothing (released)
 * @retval FERRY_EPROTO  the frame's metadata is not a valid device tensor
 * @retval FERRY_ENODEV  no device
 */
FERRY_API ferry_err ferry_tensor_gpu_view_get(const struct ferry_gpu_frame *frame,
                                              ferry_tensor_view *out);

/**
 * Exports a taken device tensor as a DLManagedTensor on device (FERRY_DL_CUDA, the subscriber's
 * device) and takes ownership of the frame: on FERRY_OK *frame is cleared; the deleter calls
 * ferry_gpu_frame_release(gsub, frame, stream), so the frame goes back once the work enqueued on
 * stream before the deleter ran completed. Consumers must order their work on stream (or
 * synchronise with it): the frame was made ready for stream by ferry_gpu_take. Threading and
 * pool as ferry_tensor_to_dlpack; the consumer must not write the data.
 *
 * @retval FERRY_OK      *out is an export
 * @retval FERRY_EINVAL  a pointer is NULL
 * @retval FERRY_ESTATE  the frame holds nothing (released)
 * @retval FERRY_EPROTO  the frame's metadata is not a valid device tensor
 * @retval FERRY_ENOMEM  no memory for an export record
 * @retval FERRY_ENODEV  no device
 */
FERRY_API ferry_err ferry_tensor_gpu_to_dlpack(struct ferry_gpu_subscriber *gsub,
                                               struct ferry_gpu_frame *frame, void *stream,
                                               ferry_dlpack_tensor **out);

/** ferry_tensor_gpu_to_dlpack as a DLPack 1.0 versioned export with
 *  FERRY_DLPACK_FLAG_READ_ONLY set. */
FERRY_API ferry_err ferry_tensor_gpu_to_dlpack_versioned(struct ferry_gpu_subscriber *gsub,
                                                         struct ferry_gpu_frame *frame,
                                                         void *stream,
                                                         ferry_dlpack_tensor_versioned **out);

#ifdef __cplusplus
}
#endif
#endif /* FERRY_TENSOR_H */
