/*
 * The one description of each ROS 2 message type ferry maps onto a type of its own, after rosidl's
 * introspection (MessageMembers: a name, a type, an offset and array information per field, walked
 * by generic code). For every kind of ros2.h, msg_table.c holds one entry:
 *
 * - the ROS 2 types it is made of (ferry_ros2_msg_def): each type's name and its .msg text as
 *   rosbag2 stores it (the field and constant lines of /opt/ros/<distro>/share/<pkg>/msg/<Name>.msg
 *   without comments), from which the kind's ros2msg definition is composed;
 * - its members (ferry_ros2_member): the ROS fields in message order, each with its type, its
 *   array kind, and its offsets in the two C layouts that carry it: the kind's view (the public
 *   ferry_*_view of msg.h or tensor.h, a validated copy of a sample) and the parsed message of
 *   ros2.h (ferry_ros2_*_msg, pointing into a serialisation).
 *
 * The CDR writer, the CDR reader, the definitions, the decoder of `ferry echo --json`, the
 * republication of the fixed-size kinds (publish.c) and the bridge's conversions to and from
 * Cyclone's types (src/bridge/bridge_dds.c) walk these members; tests/ros2/msg_table_test.c
 * checks them against the .msg texts, and the texts against ROS 2's own files where ROS 2 is
 * installed. What is genuinely particular to a kind stays explicit
 * beside its entry: the view function that validates a sample, the bulk (pixels, points, compressed
 * bytes, elements) that the writer leaves in the sample, and the tensor's dtype and strides.
 *
 * Immutable, so safe from any thread.
 */
#ifndef FERRY_ROS2_MSG_TABLE_H
#define FERRY_ROS2_MSG_TABLE_H

#include "ros2.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** A ROS 2 message type as its .msg file describes it. */
typedef struct ferry_ros2_msg_def {
    const char *name; /**< "sensor_msgs/msg/Image" */
    const char *text; /**< its field and constant lines, each ending in '\n', without comments,
                       *   blank lines or runs of blanks ("uint8 INT8=1", "float64 w 1") */
} ferry_ros2_msg_def;

/** What a member is on the wire and in its C layouts. */
typedef enum ferry_ros2_mtype {
    FERRY_ROS2_M_BOOL = 1, /**< bool: uint8_t in both layouts, sent as it is */
    FERRY_ROS2_M_U8,       /**< uint8 */
    FERRY_ROS2_M_I32,      /**< int32 */
    FERRY_ROS2_M_U32,      /**< uint32 */
    FERRY_ROS2_M_I64,      /**< int64 */
    FERRY_ROS2_M_F64,      /**< float64 */
    FERRY_ROS2_M_STRING,   /**< string: char[max + 1] in the view, const char * in the message */
    FERRY_ROS2_M_STRUCT,   /**< a nested message (def, members) */
    FERRY_ROS2_M_BULK,     /**< uint8[] data left in the sample: in the view a const void * at
                            *   view and a size_t at view_count; in the message a const uint8_t *
                            *   at msg and a uint32_t at msg_count */
    FERRY_ROS2_M_DTYPE,    /**< string dtype: a ferry_dtype in the view (ferry_dtype_name), a
                            *   const char * in the message */
} ferry_ros2_mtype;

/** How a member repeats. */
typedef enum ferry_ros2_array {
    FERRY_ROS2_A_NONE = 0,
    FERRY_ROS2_A_FIXED, /**< T[len] */
    FERRY_ROS2_A_SEQ,   /**< T[]: a uint32_t count at view_count and msg_count; the layouts keep
                         *   the first len elements (the view never has more; the reader checks
                         *   every element sent and keeps len) */
} ferry_ros2_array;

/** How `ferry echo --json` shows a member, where it differs from its type. */
#define FERRY_ROS2_J_NUMBER 1u /**< a bool shown as a number (0 or 1) */

typedef struct ferry_ros2_member ferry_ros2_member;

/**
 * A field of a ROS 2 message and where it lies. Offsets are from the base the enclosing member
 * list is walked from: the view or the message itself at the top; base + view (and base + msg) for
 * a nested message, so that a nested type whose fields ferry's layout scatters (std_msgs/Header:
 * the stamp and frame_id of a view header) takes view 0 and gives its own members the offsets.
 */
struct ferry_ros2_member {
    const char *name;
    uint8_t type;                  /**< ferry_ros2_mtype */
    uint8_t array;                 /**< ferry_ros2_array */
    uint8_t json;                  /**< FERRY_ROS2_J_* */
    uint32_t len;                  /**< FIXED: elements; SEQ: the most elements the layouts hold */
    uint32_t max;                  /**< STRING: the view's capacity less its NUL */
    size_t view, msg;              /**< the member's offsets */
    size_t view_count;             /**< SEQ: the count's offset; BULK: the size's */
    size_t msg_count;              /**< SEQ, BULK: the count's offset */
    size_t view_stride;            /**< STRUCT in an array: an element's size in the view */
    size_t msg_stride;             /**< STRUCT in an array: an element's size in the message */
    const ferry_ros2_msg_def *def; /**< STRUCT: the nested type */
    const ferry_ros2_member *members; /**< STRUCT: its members, nmembers of them */
    uint32_t nmembers;
};

/** The largest view of a kind (view_size), for a caller's buffer aligned as max_align_t. */
#define FERRY_ROS2_VIEW_MAX 4096u

/** A kind: the ferry type, the ROS 2 type, how to view a sample, the members. */
typedef struct ferry_ros2_kind_desc {
    ferry_ros2_kind kind;
    const char *ferry_type;
    uint64_t ferry_hash;
    const ferry_ros2_msg_def *def; /**< the top ROS 2 type */
    const char *definition;        /**< the ros2msg definition (ferry_ros2_definition) */
    size_t view_size;              /**< sizeof the kind's view */
    size_t msg_size;               /**< sizeof the kind's parsed message */
    size_t stamp;                  /**< the header stamp's offset (ferry_stamp) in the view */
    size_t msg_header;             /**< the ferry_ros2_header's offset in the parsed message */
    /** The magic of a kind whose sample is its view's header alone, without a bulk (camera
     *  infos, IMU samples): ferry_ros2_publish fills such a header by walking the members. 0
     *  for the others, which are published by their own functions. */
    uint32_t fixed_magic;
    /** Validates s into view (view_size bytes): the kind's ferry_*_view_get. */
    ferry_err (*view_get)(const ferry_sample *s, void *view);
    /** Where the writer needs more than the view's check (NULL: nothing more): may refuse the
     *  view (the error is the writer's) and set the bulk's bytes (*bulk_size, the view's
     *  data_size when not changed). */
    ferry_err (*write_check)(const void *view, size_t *bulk_size);
    const ferry_ros2_member *members;
    uint32_t nmembers;
} ferry_ros2_kind_desc;

/** The bytes an element of m takes in the view (in_view) or in the parsed message: its
 *  primitive's size, or the stride of a nested message. */
size_t ferry_ros2_elem_size(const ferry_ros2_member *m, bool in_view);

/** The entry of a kind; NULL for FERRY_ROS2_NONE and others. */
const ferry_ros2_kind_desc *ferry_ros2_kind_desc_of(ferry_ros2_kind kind);

/** The entries, FERRY_ROS2_KIND_COUNT_ - 1 of them, in kind order. */
extern const ferry_ros2_kind_desc ferry_ros2_kind_descs[];

/** The ROS 2 types the entries are made of, ferry_ros2_msg_defs_count of them. */
extern const ferry_ros2_msg_def *const ferry_ros2_msg_defs[];
extern const size_t ferry_ros2_msg_defs_count;

#ifdef __cplusplus
}
#endif
#endif
