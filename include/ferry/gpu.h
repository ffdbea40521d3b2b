/*
 * ferry GPU module: a device buffer cache that replaces per-frame cudaMallocAsync/cudaFreeAsync,
 * and taken host frames handed to the GPU without copies (or with one copy at pinned speed).
 *
 * Built when a CUDA toolkit is found (CMake option FERRY_GPU=AUTO|ON|OFF), as libferry_gpu
 * beside libferry. Binaries load without a CUDA driver: then, and without a device, every call
 * returns FERRY_ENODEV. Streams are passed as ferry_gpu_stream (a cudaStream_t); NULL is the
 * legacy default stream.
 *
 * Concurrency: a cache is safe from any thread (one lock, held for list operations only, never
 * across a CUDA call that may block). The host-frame calls follow their subscriber's rule: one
 * thread at a time.
 */
#ifndef FERRY_GPU_H
#define FERRY_GPU_H

#include <ferry/ferry.h>

#ifdef __cplusplus
extern "C" {
#endif

/** A CUDA stream (cudaStream_t); NULL is the legacy default stream. */
typedef void *ferry_gpu_stream;

/**
 * Number of usable CUDA devices.
 * @retval FERRY_OK      *count >= 1
 * @retval FERRY_ENODEV  no driver or no device (*count is 0)
 * @retval FERRY_EINVAL  count is NULL
 */
FERRY_API ferry_err ferry_gpu_device_count(int *count);

/* ---------------------------------------------------------------------------------------------
 * Device buffer cache
 * ------------------------------------------------------------------------------------------- */

/** A cache of device buffers of one device (ferry_gpu_cache_create). */
typedef struct ferry_gpu_cache ferry_gpu_cache;
/** A device buffer of a cache (ferry_gpu_alloc), live until its last hold is released. */
typedef struct ferry_gpu_buffer ferry_gpu_buffer;

/** Where buffers come from; one interface, so comparing strategies is one option. */
typedef enum ferry_gpu_backend {
    /** ferry's cache: size classes over cudaMalloc, O(1) reuse, idle cap, bound on live buffers. */
    FERRY_GPU_BACKEND_CACHE = 0,
    /** cudaMallocAsync / cudaFreeAsync on a memory pool with a settable release threshold. */
    FERRY_GPU_BACKEND_ASYNC = 1,
    /** cudaMalloc / cudaFree for every buffer (the naive baseline). */
    FERRY_GPU_BACKEND_MALLOC = 2,
} ferry_gpu_backend;

/** idle_cap_bytes value that keeps no idle buffer at all. */
#define FERRY_GPU_IDLE_NONE ((size_t)1)

/** Options of ferry_gpu_cache_create; ferry_gpu_cache_options_init gives the defaults. */
typedef struct ferry_gpu_cache_options {
    /** CUDA device ordinal. Default 0. */
    int device;
    /** Default FERRY_GPU_BACKEND_CACHE. */
    ferry_gpu_backend backend;
    /** CACHE: most idle bytes kept for reuse; beyond it the least recently used idle buffers
     *  are freed. 0 means the default, 64 MiB; FERRY_GPU_IDLE_NONE keeps none. */
    size_t idle_cap_bytes;
    /** Most buffers live (allocated and not yet released) at once, every backend. Default 64. */
    uint32_t max_live;
    /** When max_live buffers are live, how long ferry_gpu_alloc waits for a release:
     *  0 (default) fails at once with FERRY_ELIMIT, negative waits for ever. */
    int64_t live_wait_ns;
    /** ASYNC: the pool's cudaMemPoolAttrReleaseThreshold in bytes (0 is CUDA's default: memory
     *  goes back to the system at every synchronisation; UINT64_MAX keeps it). */
    uint64_t release_threshold;
    /** ASYNC: a pool of the cache's own instead of the device's default pool. */
    bool own_pool;
} ferry_gpu_cache_options;

/** Fills o with the defaults. */
FERRY_API void ferry_gpu_cache_options_init(ferry_gpu_cache_options *o);

/**
 * Creates a cache for one device.
 * @retval FERRY_OK       *out is yours until ferry_gpu_cache_destroy
 * @retval FERRY_EINVAL   out is NULL or an option is out of range
 * @retval FERRY_ENODEV   no driver, no device, or no such device ordinal
 * @retval FERRY_ENOTSUP  the backend is not supported on this device (ASYNC without pools)
 * @retval FERRY_ENOMEM   out of host memory
 */
FERRY_API ferry_err ferry_gpu_cache_create(ferry_gpu_cache **out,
                                           const ferry_gpu_cache_options *options);

/**
 * Destroys a cache: waits for the GPU work recorded on its idle buffers, then frees them.
 * Refused while buffers are live (not released).
 * @retval FERRY_OK      done; the pointer must not be used again
 * @retval FERRY_EBUSY   buffers are live; nothing changed
 * @retval FERRY_EINVAL  cache is NULL
 */
FERRY_API ferry_err ferry_gpu_cache_destroy(ferry_gpu_cache *cache);

/**
 * Gives a device buffer of at least size bytes, to be used first on stream. A buffer whose last
 * uses were on that same stream is reused at once (stream order protects it); one used on other
 * streams is reused only when those uses completed. When every idle buffer of the size is still
 * read on other streams, a new one is allocated while the idle cap leaves room to keep them, so
 * that a slow reader never holds the producer back (stats busy_skips); only beyond the cap is
 * stream made to wait for those uses, on the GPU (never a CPU wait; stats gpu_waits). Only at
 * max_live does the caller wait or hear FERRY_ELIMIT. The buffer is the caller's, with one hold,
 * until released.
 *
 * @retval FERRY_OK         *out is a live buffer
 * @retval FERRY_EINVAL     a pointer is NULL or size is 0
 * @retval FERRY_ELIMIT     max_live buffers are live and live_wait_ns is 0
 * @retval FERRY_ETIMEDOUT  none was released within live_wait_ns
 * @retval FERRY_ENOMEM     the device has no memory for it
 * @retval FERRY_ENODEV     the device is gone
 */
FERRY_API ferry_err ferry_gpu_alloc(ferry_gpu_cache *cache, size_t size, ferry_gpu_stream stream,
                                    ferry_gpu_buffer **out);

/** The buffer's device pointer (NULL for NULL). */
FERRY_API void *ferry_gpu_buffer_ptr(const ferry_gpu_buffer *buffer);
/** The size asked for at ferry_gpu_alloc (0 for NULL). */
FERRY_API size_t ferry_gpu_buffer_size(const ferry_gpu_buffer *buffer);

/**
 * Adds a hold: another consumer in this process keeps the buffer. Each hold is released once.
 * @retval FERRY_ESTATE  the buffer is not live
 */
FERRY_API ferry_err ferry_gpu_retain(ferry_gpu_buffer *buffer);

/**
 * Records that work using the buffer was enqueued on stream (call it after enqueuing). Every
 * reader or writer on a stream other than the allocation's must record its use, or the buffer
 * could be reused under it.
 * @retval FERRY_ESTATE  the buffer is not live
 * @retval FERRY_ELIMIT  more than 8 other streams used it
 */
FERRY_API ferry_err ferry_gpu_record_use(ferry_gpu_buffer *buffer, ferry_gpu_stream stream);

/**
 * Drops one hold. When the last goes, the buffer returns to the cache (reused as described at
 * ferry_gpu_alloc) or, for the other backends, is freed in stream order (ASYNC: cudaFreeAsync on
 * the allocation's stream, or, when other streams recorded uses, on a stream of the cache's own
 * made to wait for every use, so the allocation's stream never waits for a reader) or at once
 * (MALLOC). The pointer must not be used after the last release.
 * @retval FERRY_ESTATE  the buffer is not live (double release)
 */
FERRY_API ferry_err ferry_gpu_release(ferry_gpu_buffer *buffer);

/**
 * Frees idle buffers, least recently used first, until at most keep_idle_bytes stay idle.
 * Buffers whose recorded work is still running are waited for.
 */
FERRY_API ferry_err ferry_gpu_trim(ferry_gpu_cache *cache, size_t keep_idle_bytes);

/** A cache's counters: totals since creation, and the live and idle amounts now. */
typedef struct ferry_gpu_cache_stats {
    uint64_t device_allocs;      /**< device allocations made (cudaMalloc / cudaMallocAsync) */
    uint64_t device_frees;       /**< device frees made */
    uint64_t hits;               /**< allocations served by reuse */
    uint64_t misses;             /**< allocations that needed a device allocation */
    uint64_t gpu_waits;          /**< reuses that made the new stream wait on earlier uses */
    uint64_t backpressure_waits; /**< allocations that waited for a release (max_live) */
    uint64_t live_bytes;         /**< capacity of live buffers */
    uint64_t idle_bytes;         /**< capacity of idle buffers kept for reuse */
    uint64_t peak_bytes;         /**< highest live + idle */
    uint32_t live_buffers;       /**< buffers allocated and not yet released */
    uint32_t idle_buffers;       /**< buffers kept for reuse (CACHE) */
    uint64_t busy_skips; /**< allocations that took a new buffer because every idle one of the size
                              was still read on other streams */
} ferry_gpu_cache_stats;

/**
 * Fills *out with the cache's counters. With ASYNC, idle_bytes and peak_bytes come from the
 * memory pool.
 * @retval FERRY_OK      *out is filled
 * @retval FERRY_EINVAL  cache or out is NULL
 * @retval other         ASYNC: the memory pool could not be queried
 */
FERRY_API ferry_err ferry_gpu_cache_stats_get(ferry_gpu_cache *cache, ferry_gpu_cache_stats *out);

/* ---------------------------------------------------------------------------------------------
 * Host frames to the GPU
 * ------------------------------------------------------------------------------------------- */

/**
 * The device address of a taken sample's payload, for a kernel to read in place. The first time
 * a chunk of a publisher is seen, its pages are registered with CUDA (read-only, mapped,
 * portable; a few milliseconds for a large frame); later samples in that chunk cost a lookup.
 * Registrations are undone when the publisher's connection closes or the subscriber is
 * destroyed. On integrated GPUs (Jetson) this is the zero-copy path; on discrete GPUs kernels
 * read over the bus. The address is valid while the sample is held.
 *
 * @retval FERRY_OK       *device_ptr is set
 * @retval FERRY_EINVAL   a pointer is NULL
 * @retval FERRY_ESTATE   the sample is not held by sub
 * @retval FERRY_EFOREIGN the sample was taken by another subscriber
 * @retval FERRY_ENODEV   no device
 * @retval FERRY_ENOTSUP  the device cannot map host memory
 */
FERRY_API ferry_err ferry_gpu_sample_device_ptr(ferry_subscriber *sub, const ferry_sample *sample,
                                                int device, const void **device_ptr);

/**
 * Copies a taken sample's payload to device memory dst, asynchronously on stream, from the
 * registered (pinned) pages: the host-to-device copy runs at pinned speed with no staging copy.
 * The sample must stay held until the copy completed on stream.
 * Same errors as ferry_gpu_sample_device_ptr.
 */
FERRY_API ferry_err ferry_gpu_sample_copy(ferry_subscriber *sub, const ferry_sample *sample,
                                          int device, void *dst, ferry_gpu_stream stream);

/** Host-frame registrations of this process: totals since it started, over all subscribers. */
typedef struct ferry_gpu_host_stats {
    uint64_t registered;        /**< chunks registered with CUDA (first sight of a chunk) */
    uint64_t unregistered;      /**< registrations undone (connection closed, subscriber
                                     destroyed) */
    uint64_t unregister_failed; /**< registrations whose undoing CUDA refused (a failed
                                     context); not in unregistered */
} ferry_gpu_host_stats;

/**
 * Fills *out with the host-frame registration counters of the process. They are the process's,
 * not a subscriber's: registered pages are a resource of the process, and what a subscriber's
 * destroy undid can only be read after it. Safe from any thread.
 * @retval FERRY_OK      *out is filled
 * @retval FERRY_EINVAL  out is NULL
 */
FERRY_API ferry_err ferry_gpu_host_stats_get(ferry_gpu_host_stats *out);

/* ---------------------------------------------------------------------------------------------
 * Device frames across processes
 *
 * A publisher loans device memory, fills it with kernels and publishes; subscribers in other
 * processes read the same device memory, no copy. A device frame travels as an ordinary ferry
 * sample holding a small descriptor, so queues, QoS, history and crash recovery are those of the
 * host transport. Device memory is exported once per chunk (a VMM allocation exported as a POSIX
 * file descriptor and handed to subscribers as an attachment, or a legacy CUDA IPC handle) and
 * imported once per chunk by each subscriber. Ordering is on the GPU: the publisher's stream
 * writes the frame's ready word when its work is done, a reader's stream waits for that word;
 * a reader's release takes effect (the host sample goes back) only when the work it enqueued on
 * the frame completed, so the publisher reuses a chunk only after every reader finished with it.
 * A reader that dies gives its frames back like any subscriber.
 * ------------------------------------------------------------------------------------------- */

/** How device memory crosses processes. */
typedef enum ferry_gpu_ipc {
    FERRY_GPU_IPC_AUTO = 0,   /**< VMM when the device supports POSIX-fd export, else legacy */
    FERRY_GPU_IPC_VMM = 1,    /**< cuMemCreate + POSIX file descriptors over the control socket */
    FERRY_GPU_IPC_LEGACY = 2, /**< cudaIpcGetMemHandle / cudaIpcOpenMemHandle */
} ferry_gpu_ipc;

/**
 * Whether contexts on the device are shared through MPS (the CUDA Multi-Process Service), which
 * decides what a device frame's handoff costs (docs/gpu.md, "Device frames across processes"):
 * without MPS every process has a context of its own and a reader's first look at each frame waits
 * on the driver. The GPU publisher and subscriber say at creation, in their node's log, which path
 * they use and whether MPS is on.
 * @retval FERRY_OK      *out is filled
 * @retval FERRY_EINVAL  out is NULL
 * @retval FERRY_ENODEV  no such device, or no driver
 */
FERRY_API ferry_err ferry_gpu_mps_enabled(int device, bool *out);

/** A publisher of device frames over a host publisher (ferry_gpu_publisher_create). */
typedef struct ferry_gpu_publisher ferry_gpu_publisher;
/** A subscriber of device frames over a host subscriber (ferry_gpu_subscriber_create). */
typedef struct ferry_gpu_subscriber ferry_gpu_subscriber;

/** Options of ferry_gpu_publisher_create; ferry_gpu_publisher_options_init gives the defaults. */
typedef struct ferry_gpu_publisher_options {
    int device;        /**< CUDA device ordinal; default 0 */
    ferry_gpu_ipc ipc; /**< default FERRY_GPU_IPC_AUTO */
    /** true (the default): ferry_gpu_loan wakes the subscribers asleep in ferry_wait, so that
     *  their wake-up overlaps the kernel launches up to ferry_gpu_publish instead of following
     *  it; each polls for the publication up to 100 us (and not at all where its spin budget is
     *  0: FERRY_SPIN_OFF, one CPU), then sleeps again. false: they are woken by the
     *  publication, as any subscriber. Subscribers waiting on ferry_subscriber_fd() are woken by
     *  the publication either way. */
    bool early_wake;
} ferry_gpu_publisher_options;

/** Fills o with the defaults. */
FERRY_API void ferry_gpu_publisher_options_init(ferry_gpu_publisher_options *o);

/**
 * Makes pub a publisher of device frames (its host samples then carry device-frame
 * descriptors; plain ferry_loan on it is still possible but its subscribers should all be
 * device-frame subscribers). pub must outlive the returned object.
 * @retval FERRY_OK       *out is yours until ferry_gpu_publisher_destroy
 * @retval FERRY_ENODEV   no device
 * @retval FERRY_ENOTSUP  the chosen IPC mechanism is not supported here
 */
FERRY_API ferry_err ferry_gpu_publisher_create(ferry_gpu_publisher **out, ferry_publisher *pub,
                                               const ferry_gpu_publisher_options *options);
/** Waits for the publisher's own outstanding work, frees its device memory. */
FERRY_API ferry_err ferry_gpu_publisher_destroy(ferry_gpu_publisher *gpub);
/** The IPC mechanism in use (AUTO resolved). */
FERRY_API ferry_err ferry_gpu_publisher_ipc(ferry_gpu_publisher *gpub, ferry_gpu_ipc *ipc);

/**
 * Loans size bytes of device memory to be filled by work on stream. When that memory's previous
 * frame may still be being written (published with no reader), stream is made to wait for it on
 * the GPU. Publish with the stream that did (or waited for) the filling work.
 * Errors as ferry_loan, plus FERRY_ENOMEM when the device has no memory for a new chunk.
 */
FERRY_API ferry_err ferry_gpu_loan(ferry_gpu_publisher *gpub, size_t size, ferry_gpu_stream stream,
                                   void **device_ptr);

/**
 * Publishes a loaned device frame. Readers see it once the work enqueued on stream before this
 * call completed; the CPU does not wait. After FERRY_OK the frame is ferry's.
 * Errors as ferry_publish.
 */
FERRY_API ferry_err ferry_gpu_publish(ferry_gpu_publisher *gpub, void *device_ptr,
                                      ferry_gpu_stream stream);

/** Most bytes of metadata a device frame may carry (ferry_gpu_publish_meta). */
#define FERRY_GPU_META_MAX 1024u

/**
 * ferry_gpu_publish with up to FERRY_GPU_META_MAX bytes of metadata, copied into the frame's
 * host descriptor sample (a tensor header, a camera's exposure): readers find it in
 * ferry_gpu_frame.meta, 8-byte aligned. meta_size 0 (meta may then be NULL) is
 * ferry_gpu_publish.
 * @retval FERRY_EINVAL  meta is NULL with meta_size > 0, or meta_size > FERRY_GPU_META_MAX
 * @retval others        as ferry_gpu_publish
 */
FERRY_API ferry_err ferry_gpu_publish_meta(ferry_gpu_publisher *gpub, void *device_ptr,
                                           ferry_gpu_stream stream, const void *meta,
                                           size_t meta_size);

/** Gives an unpublished device loan back. */
FERRY_API ferry_err ferry_gpu_loan_release(ferry_gpu_publisher *gpub, void *device_ptr);

/** A device-frame publisher's counters. All are since creation. */
typedef struct ferry_gpu_publisher_stats {
    uint64_t exports;     /**< device allocations made and exported: one per chunk, and one more
                               each time a frame outgrows its chunk's memory */
    uint64_t reuse_waits; /**< loans whose stream was made to wait (on the GPU) for the work of
                               the chunk's previous frame */
} ferry_gpu_publisher_stats;

/**
 * Fills *out with the publisher's counters.
 * @retval FERRY_OK      *out is filled
 * @retval FERRY_EINVAL  gpub or out is NULL
 * @retval FERRY_ECLOSED gpub was destroyed
 */
FERRY_API ferry_err ferry_gpu_publisher_stats_get(ferry_gpu_publisher *gpub,
                                                  ferry_gpu_publisher_stats *out);

/** A taken device frame: read-only device memory of another process. */
typedef struct ferry_gpu_frame {
    const void *device_ptr;  /**< valid on the subscriber's device until released */
    size_t size;             /**< bytes, as loaned with ferry_gpu_loan */
    uint64_t sequence;       /**< the host sample's sequence */
    ferry_time publish_time; /**< the host sample's publish time */
    uint64_t publisher_id;   /**< the host publisher (ferry_publisher_stats.id) */
    ferry_sample host;       /**< the carrying host sample; ferry's */
    const void *meta;        /**< the publisher's metadata inside host (NULL when none),
                                  meta_size bytes; written by another process: validate it */
    size_t meta_size;        /**< 0..FERRY_GPU_META_MAX */
    int device;              /**< the subscriber's device ordinal: device_ptr is valid there */
} ferry_gpu_frame;

/** Options of ferry_gpu_subscriber_create; ferry_gpu_subscriber_options_init gives the
 *  defaults. */
typedef struct ferry_gpu_subscriber_options {
    int device; /**< CUDA device ordinal the frames are imported to; default 0 */
} ferry_gpu_subscriber_options;

/** Fills o with the defaults. */
FERRY_API void ferry_gpu_subscriber_options_init(ferry_gpu_subscriber_options *o);

/**
 * Makes sub a subscriber of device frames. sub must outlive the returned object.
 * @param options  NULL for the defaults
 * @retval FERRY_ENODEV  no such device
 */
FERRY_API ferry_err ferry_gpu_subscriber_create(ferry_gpu_subscriber **out, ferry_subscriber *sub,
                                                const ferry_gpu_subscriber_options *options);
/** Waits for the work enqueued on frames released but not yet completed, then frees
 *  everything. Refused (FERRY_EBUSY) while frames are taken and not released. */
FERRY_API ferry_err ferry_gpu_subscriber_destroy(ferry_gpu_subscriber *gsub);

/**
 * Takes the next device frame and makes stream wait (on the GPU) until the publisher's work on
 * it completed: kernels enqueued on stream afterwards read it safely. Imports the publisher's
 * memory the first time a chunk is seen (tens of microseconds), later frames cost a lookup.
 * @retval FERRY_OK      *frame is filled
 * @retval FERRY_EAGAIN  no frame queued (wait with ferry_wait on the host subscriber)
 * @retval FERRY_EPROTO  the sample is not a valid device-frame descriptor (it is released)
 */
FERRY_API ferry_err ferry_gpu_take(ferry_gpu_subscriber *gsub, ferry_gpu_stream stream,
                                   ferry_gpu_frame *frame);

/**
 * Releases a frame once the work enqueued on stream so far completes (an event is recorded; the
 * host sample goes back to the publisher when it has fired, checked in later calls and in
 * ferry_gpu_subscriber_poll). The frame must not be used by work enqueued later.
 */
FERRY_API ferry_err ferry_gpu_frame_release(ferry_gpu_subscriber *gsub, ferry_gpu_frame *frame,
                                            ferry_gpu_stream stream);

/** Gives back the host samples of released frames whose work completed. */
FERRY_API ferry_err ferry_gpu_subscriber_poll(ferry_gpu_subscriber *gsub);

/** A device-frame subscriber's counters. All are since creation. */
typedef struct ferry_gpu_subscriber_stats {
    uint64_t imports;            /**< allocations imported: one per (connection, chunk,
                                      allocation), on the first frame that names it */
    uint64_t unimports;          /**< imports undone (connection closed, memory replaced) */
    uint64_t readonly_fallbacks; /**< VMM imports mapped read-write because the driver refused
                                      read-only access */
} ferry_gpu_subscriber_stats;

/**
 * Fills *out with the subscriber's counters. The imports still in place are imports -
 * unimports; ferry_gpu_subscriber_destroy undoes them.
 * @retval FERRY_OK      *out is filled
 * @retval FERRY_EINVAL  gsub or out is NULL
 * @retval FERRY_ECLOSED gsub was destroyed, or its subscriber was
 */
FERRY_API ferry_err ferry_gpu_subscriber_stats_get(ferry_gpu_subscriber *gsub,
                                                   ferry_gpu_subscriber_stats *out);

#ifdef __cplusplus
}
#endif
#endif /* FERRY_GPU_H */
