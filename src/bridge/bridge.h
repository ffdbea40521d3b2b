/*
 * The DDS bridge: carries ferry image, point-cloud, camera-info, compressed-image and IMU topics
 * (include/ferry/msg.h) to Cyclone DDS and back, with ROS 2's wire conventions (topic "rt" + the
 * ferry topic, type names sensor_msgs::msg::dds_::Image_, PointCloud2_, CameraInfo_,
 * CompressedImage_ and Imu_, plain CDR), so ROS 2 nodes on other hosts
 * see ferry's frames and ferry subscribers see theirs; and the topics of rmw_ferry_cpp's nodes,
 * any ROS 2 message type, as the bytes they are (bridge_raw.c). docs/bridge.md describes the
 * design.
 *
 * Out: every local topic of a supported type that has a live publisher other than a bridge is
 * subscribed to; each taken sample is validated, described to DDS by a sample whose data
 * sequence points into the taken sample (DDS serialises from it: the only copy), written and
 * released. In: DDS writers of supported types on "rt/..." topics found through the
 * DCPSPublication built-in topic get a reader each; each DDS sample is read from the serialised
 * bytes Cyclone received (the reader of src/ros2/ros2.h, no deserialised copy), validated (it
 * comes from the network), its data copied once into a ferry loan, then published.
 *
 * Loops: samples whose ferry publisher belongs to a bridge node (FERRY_BRIDGE_NODE_NAME) are not
 * sent out, DDS writers of the bridge's own participant are ignored, and so are DDS writers of
 * any bridge that serves the same ferry domain directory on the same machine (their user data
 * carries a key of machine, directory and domain). Of several bridges serving one ferry domain,
 * only the one of the lowest pid sends a topic out.
 *
 * Concurrency: a bridge is used by one thread at a time. It runs no thread of its own except
 * Cyclone's; Cyclone's listener only wakes the caller's ferry_bridge_run through an eventfd.
 */
#ifndef FERRY_BRIDGE_H
#define FERRY_BRIDGE_H

#include <ferry/ferry.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The node name of a bridge's ferry endpoints; endpoints of such nodes are never sent out. */
#define FERRY_BRIDGE_NODE_NAME "ferry-bridge"
/** Most --topic patterns. */
#define FERRY_BRIDGE_PATTERNS_MAX 32u
/** Most routes per direction. */
#define FERRY_BRIDGE_ROUTES_MAX 64u

typedef struct ferry_bridge ferry_bridge;

typedef enum ferry_bridge_direction {
    FERRY_BRIDGE_OUT = 1, /**< ferry -> DDS */
    FERRY_BRIDGE_IN = 2,  /**< DDS -> ferry */
    FERRY_BRIDGE_BOTH = 3,
} ferry_bridge_direction;

typedef enum ferry_bridge_reliability {
    FERRY_BRIDGE_RELIABILITY_AUTO = 0, /**< the mapping of docs/bridge.md */
    FERRY_BRIDGE_RELIABLE = 1,
    FERRY_BRIDGE_BEST_EFFORT = 2,
} ferry_bridge_reliability;

typedef struct ferry_bridge_options {
    /** ferry side: root directory (NULL: the library's default) and domain. */
    const char *dir;
    uint32_t domain;
    /** DDS domain id (0..232). */
    uint32_t dds_domain;
    /** fnmatch(3) patterns on ferry topic names with their leading '/' ('*' matches '/' too);
     *  none: every topic. */
    const char *const *patterns;
    size_t npatterns;
    ferry_bridge_direction direction; /**< 0 means both */
    ferry_bridge_reliability reliability;
    /** Queue depth of the bridge's ferry subscribers, DDS KEEP_LAST depth of best-effort writers,
     *  what a transient-local writer (CameraInfo) keeps for late joiners, the most samples an
     *  in route's DDS reader holds untaken and the most its ferry publisher keeps for late
     *  subscribers of a transient-local route; 0: 8. */
    uint32_t depth;
    /** Extra Cyclone configuration, appended after the bridge's own (so it wins): XML text or
     *  a comma-separated list of XML and file:// URIs, as CYCLONEDDS_URI takes. NULL: none. */
    const char *dds_config;
    /** How often both sides are searched for new and vanished topics. 0: 250 ms. */
    int64_t scan_interval_ns;
    /** Diagnostics; NULL: stderr, prefixed "ferry bridge: ". 0 level means FERRY_LOG_INFO. */
    ferry_log_fn log;
    void *log_arg;
    ferry_log_level log_level;
} ferry_bridge_options;

/**
 * Counters since creation, all routes together, closed ones included. Where a frame can be lost,
 * in the order a frame passes (docs/bridge.md, "Where a frame is lost"):
 *   out_queue_dropped   in the bridge's ferry subscriber queue (drop-oldest routes only)
 *   out_invalid         not a valid sample of its type
 *   out_failed          refused by dds_write
 *   in_lost             DDS SAMPLE_LOST of the bridge's readers (Cyclone 0.10 counts only samples
 *                       an instance refused; a best-effort sample lost on the network is not
 *                       reported: between two bridges, the writer's out_written less the
 *                       reader's in_received shows it)
 *   in_rejected         refused by the bridge's full reader (DDS SAMPLE_REJECTED, best effort)
 *   in_invalid          not a valid DDS sample
 *   in_dropped          not published on the ferry side (no chunk in the bridge's pool)
 *   in_subscriber_dropped  in a local subscriber's full queue (its own depth)
 * out_early and out_skipped are not losses: those samples are never meant to go out.
 */
typedef struct ferry_bridge_stats {
    uint64_t out_taken;             /**< ferry samples taken on out routes */
    uint64_t out_written;           /**< DDS samples written */
    uint64_t out_skipped;           /**< samples of bridge publishers, not sent back */
    uint64_t out_early;             /**< samples taken in a route's first scan period, not sent */
    uint64_t out_invalid;           /**< samples refused by the ferry views */
    uint64_t out_failed;            /**< samples dds_write refused (errors other than a timeout) */
    uint64_t out_bytes;             /**< data bytes written (pixels, points) */
    uint64_t out_queue_dropped;     /**< samples the ferry publishers dropped from the bridge's full
                                         subscriber queues: drop-oldest routes only (best effort, or
                                         a publisher that does not admit blocking subscribers) */
    uint64_t out_write_timeouts;    /**< dds_write calls of reliable writers that timed out (a DDS
                                         reader not acknowledging); the sample is written again,
                                         not lost */
    uint64_t in_received;           /**< valid DDS samples taken on in routes */
    uint64_t in_published;          /**< ferry samples published */
    uint64_t in_ignored;            /**< samples of writers of bridges of this ferry domain */
    uint64_t in_invalid;            /**< DDS samples that could not be carried (bad fields) */
    uint64_t in_dropped;            /**< valid samples not published: no chunk in the pool */
    uint64_t in_bytes;              /**< data bytes published */
    uint64_t in_lost;               /**< samples DDS reports lost to the bridge's readers
                                         (SAMPLE_LOST; see the list above for what Cyclone 0.10
                                         reports) */
    uint64_t in_rejected;           /**< samples the bridge's readers refused, their cache of depth
                                         samples being full (SAMPLE_REJECTED; best effort: a reliable
                                         reader makes the writer send them again instead) */
    uint64_t in_subscriber_dropped; /**< samples the bridge's ferry publishers dropped from
                                         local subscribers' full queues (their own depth) */
    uint32_t routes_out;            /**< out routes now */
    uint32_t routes_in;             /**< in routes now */
    uint32_t routes_out_lossy;      /**< out routes now whose ferry subscriber drops the oldest */
} ferry_bridge_stats;

/** One route, for reports. */
typedef struct ferry_bridge_route_info {
    char topic[FERRY_TOPIC_MAX + 2];  /**< ferry name, with the leading '/' */
    ferry_bridge_direction direction; /**< FERRY_BRIDGE_OUT or FERRY_BRIDGE_IN */
    const char *type_name;            /**< the ferry type name */
    uint64_t samples;                 /**< written to DDS (out) or published to ferry (in) */
    uint64_t bytes;
    bool reliable; /**< the DDS endpoint's reliability */
    /** Out: the ferry subscriber blocks its publishers when full (FERRY_OVERFLOW_BLOCK) rather
     *  than drop. In: the DDS reader is reliable. */
    bool lossless;
    uint32_t depth;
    /** Samples lost on this route, wherever (the categories of ferry_bridge_stats). */
    uint64_t lost;
} ferry_bridge_route_info;

/** Fills o with the defaults. */
void ferry_bridge_options_init(ferry_bridge_options *o);

/** The Cyclone settings the bridge applies before options.dds_config (docs/bridge.md). */
const char *ferry_bridge_dds_defaults(void);

/**
 * Creates a bridge: a ferry node, a Cyclone domain and participant, a reader of DCPSPublication.
 * Routes come with the first ferry_bridge_run calls.
 * @retval FERRY_EINVAL  an option is out of range, or Cyclone refused the configuration
 * @retval FERRY_ENOMEM / FERRY_ESYS / errors of ferry_node_create
 */
ferry_err ferry_bridge_create(ferry_bridge **out, const ferry_bridge_options *options);

/**
 * Moves what is there in both directions, scans for topics when due, then waits up to
 * timeout_ns (0 polls once) for more to move.
 * @retval FERRY_OK      done (routes that failed are logged and retried, not fatal)
 * @retval FERRY_EINVAL  b is NULL
 * @retval FERRY_ESYS    waiting failed (errno)
 */
ferry_err ferry_bridge_run(ferry_bridge *b, int64_t timeout_ns);

ferry_err ferry_bridge_stats_get(const ferry_bridge *b, ferry_bridge_stats *out);

/** Route i (0-based, out routes first). FERRY_EAGAIN when i is past the last. */
ferry_err ferry_bridge_route_get(const ferry_bridge *b, size_t i, ferry_bridge_route_info *out);

/** Destroys every route, the participant, the domain and the node. */
ferry_err ferry_bridge_destroy(ferry_bridge *b);

#ifdef __cplusplus
}
#endif
#endif
