/*
 * ROS 2 message types that ferry knows only by their definition: the types rmw_ferry_cpp's nodes
 * publish. For ferry's tools (echo, record, view), which decode or record such topics without
 * any type support:
 *
 * - the type descriptions rmw_ferry_cpp leaves in a domain's ".ros2" graph files (one line
 *   "D <type> <hash> <cdr|plain> <definition>" per type a context uses:
 * rmw_ferry_cpp/src/graph.hpp), found by type name and ferry type hash;
 * - a ros2msg definition (rosbag2's text: the type's fields, then each type it uses after a line
 *   of '=' and "MSG: pkg/Name") parsed into a schema;
 * - a generic decoder that walks one message by its schema, either plain CDR (XCDR1, after the
 *   4-byte encapsulation header) or rmw_ferry_cpp's "plain" wire form (a fixed-size type as its C
 *   struct lies in memory), and reports each field to a visitor.
 *
 * Everything read is untrusted (graph files are written by other processes of the user, samples
 * by any publisher): file sizes, line lengths, counts, names and nesting are bounded, and every
 * length in a message is checked against the bytes that are left. Single-threaded per object;
 * a schema is immutable once parsed and may be shared by threads that only walk it.
 */
#ifndef FERRY_ROS2_TYPES_H
#define FERRY_ROS2_TYPES_H

#include <ferry/ferry.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * Type descriptions from the graph files
 * ------------------------------------------------------------------------------------------- */

#define FERRY_ROS2_GRAPH_FILE_MAX (4u << 20) /**< a graph file read: 4 MiB at most (as written) */
#define FERRY_ROS2_GRAPH_FILES_MAX 4096u     /**< directory entries looked at per lookup */
#define FERRY_ROS2_DEFINITION_MAX (1u << 20) /**< a definition's text, decoded: 1 MiB at most */

/** How a type's messages lie in a ferry sample. */
typedef enum ferry_ros2_wire {
    FERRY_ROS2_WIRE_CDR = 1, /**< plain CDR with its encapsulation header (rmw_cyclonedds' bytes) */
    FERRY_ROS2_WIRE_PLAIN,   /**< a fixed-size type as its C struct lies in memory */
} ferry_ros2_wire;

/** A type's description from a D line. */
typedef struct ferry_ros2_type_info {
    uint64_t hash; /**< the ferry type hash its publishers use */
    ferry_ros2_wire wire;
    char *definition; /**< ros2msg text, NUL-terminated, malloc'd (ferry_ros2_type_info_free) */
    size_t definition_size; /**< its bytes, without the NUL */
} ferry_ros2_type_info;

/**
 * Finds the description of type_name ("pkg/msg/Name") with ferry type hash hash in the graph
 * files of a domain directory (domain_dir/.ros2/\*.graph, live or left by dead processes: a file
 * torn by a concurrent rewrite is read again, then skipped). On FERRY_OK *out owns a definition
 * that ferry_ros2_type_info_free releases; on error *out is zeroed.
 *
 * @retval FERRY_OK      found
 * @retval FERRY_EAGAIN  no graph file has a valid line for this name and hash (none yet, or the
 *                       publisher is not an rmw_ferry_cpp node)
 * @retval FERRY_EINVAL  an argument is NULL
 * @retval FERRY_ENOMEM  out of memory
 */
ferry_err ferry_ros2_type_find(const char *domain_dir, const char *type_name, uint64_t hash,
                               ferry_ros2_type_info *out);

/** A hash for ferry_ros2_type_find and ferry_ros2_graph_find that takes the first description
 *  of the type name whatever its hash (a type known by name only, as a DDS type name gives it);
 *  info.hash then says which. */
#define FERRY_ROS2_HASH_ANY 0u

/**
 * As ferry_ros2_type_find, in one graph file's bytes (size of them, not NUL-terminated): its
 * header, length and checksum checked first. FERRY_EPROTO when the file is not a complete graph
 * file; FERRY_EAGAIN when it is but has no such line.
 */
ferry_err ferry_ros2_graph_find(const char *text, size_t size, const char *type_name, uint64_t hash,
                                ferry_ros2_type_info *out);

/** Releases what a lookup gave (a zeroed info too); zeroes it. */
void ferry_ros2_type_info_free(ferry_ros2_type_info *info);

/* ---------------------------------------------------------------------------------------------
 * Schemas
 * ------------------------------------------------------------------------------------------- */

#define FERRY_ROS2_SCHEMA_TYPES_MAX 1024u   /**< types in one definition */
#define FERRY_ROS2_SCHEMA_FIELDS_MAX 16384u /**< fields of all of them together */
#define FERRY_ROS2_DEPTH_MAX 32u            /**< nesting of types (and of a walk) */

typedef struct ferry_ros2_schema ferry_ros2_schema;

/**
 * Parses a ros2msg definition of type_name ("pkg/msg/Name" or "pkg/Name"): field lines "TYPE
 * NAME [DEFAULT]" with primitive types (bool byte char int8..uint64 float32 float64 string
 * wstring, string<=N), fixed arrays T[N], bounded T[<=N] and unbounded T[] sequences, and nested
 * types named "Name" (same package) or "pkg/Name" ("pkg/msg/Name"); constants ("TYPE NAME=VALUE")
 * and comments are skipped. Every nested type must be defined in the text, none may contain
 * itself, and nesting is at most FERRY_ROS2_DEPTH_MAX deep. A type with no field is one uint8,
 * as rosidl makes it.
 *
 * @retval FERRY_OK      *out is the schema (ferry_ros2_schema_free)
 * @retval FERRY_EINVAL  the text is not such a definition; why (cap bytes, when not NULL) says
 *                       which line and what is wrong
 * @retval FERRY_ENOMEM  out of memory
 */
ferry_err ferry_ros2_schema_parse(const char *type_name, const char *text, size_t size,
                                  ferry_ros2_schema **out, char *why, size_t cap);

void ferry_ros2_schema_free(ferry_ros2_schema *schema);

/** The bytes a message of the schema takes in memory as a C struct (its "plain" wire form), or
 *  0 when it has a string or a sequence at some depth (it cannot be plain). */
size_t ferry_ros2_schema_plain_size(const ferry_ros2_schema *schema);

/* ---------------------------------------------------------------------------------------------
 * Walking a message
 * ------------------------------------------------------------------------------------------- */

typedef enum ferry_ros2_event_kind {
    FERRY_ROS2_EV_BEGIN_STRUCT, /**< a nested message starts (not sent for the top one) */
    FERRY_ROS2_EV_END_STRUCT,
    FERRY_ROS2_EV_BEGIN_ARRAY, /**< count: the elements the message has */
    FERRY_ROS2_EV_END_ARRAY,   /**< count: the elements left out (over elements_max) */
    FERRY_ROS2_EV_BOOL,        /**< u: 0 or 1 (any nonzero byte is 1) */
    FERRY_ROS2_EV_INT,         /**< i: int8..int64 */
    FERRY_ROS2_EV_UINT,        /**< u: byte, char, uint8..uint64 */
    FERRY_ROS2_EV_FLOAT32,     /**< f */
    FERRY_ROS2_EV_FLOAT64,     /**< f */
    FERRY_ROS2_EV_STRING,      /**< s, n: the characters (UTF-8; wstrings converted), no NUL
                                *   counted; s is NUL-terminated */
    FERRY_ROS2_EV_BYTES,       /**< p, n: a whole array or sequence of 1-byte integers (byte,
                                *   char, uint8, int8: is_signed for int8), pointing into the
                                *   message; fixed says it was a fixed-size array */
    FERRY_ROS2_EV_EMPTY,       /**< u: the one uint8 rosidl gives a message without fields
                                *   (no field of the definition: a printer skips it) */
} ferry_ros2_event_kind;

typedef struct ferry_ros2_event {
    ferry_ros2_event_kind kind;
    const char *key; /**< the field's name; NULL for an element of an array */
    uint32_t count;
    uint8_t size; /**< BOOL, INT, UINT, FLOAT*: the value's bytes on the wire (1, 2, 4, 8) */
    bool is_signed, fixed;
    int64_t i;
    uint64_t u;
    double f;
    const char *s;
    const uint8_t *p;
    size_t n;
} ferry_ros2_event;

/** Called for each event, in message order; the event's pointers are valid during the call. */
typedef void (*ferry_ros2_visit_fn)(void *arg, const ferry_ros2_event *ev);

/** Outcome of a walk (the ferry_ros2_cdr_result values of ros2.h, the same meaning). */
typedef enum ferry_ros2_walk_result {
    FERRY_ROS2_WALK_OK = 0,      /**< the whole message was walked */
    FERRY_ROS2_WALK_MALFORMED,   /**< truncated or inconsistent (events so far were sent) */
    FERRY_ROS2_WALK_UNSUPPORTED, /**< a CDR encapsulation other than CDR_BE / CDR_LE */
} ferry_ros2_walk_result;

/**
 * Walks one message of schema's top type in buf (size bytes) as wire says it lies, sending each
 * field to visit (may be NULL: the walk then only checks). Arrays and sequences of more than
 * elements_max elements (0: no limit) are walked whole and checked, but only their first
 * elements_max are sent; 1-byte integer arrays come as one FERRY_ROS2_EV_BYTES instead. With
 * FERRY_ROS2_WIRE_PLAIN the size must be the schema's plain size exactly; with CDR, bytes after
 * the message (padding) are allowed.
 */
ferry_ros2_walk_result ferry_ros2_walk(const ferry_ros2_schema *schema, ferry_ros2_wire wire,
                                       const void *buf, size_t size, uint32_t elements_max,
                                       ferry_ros2_visit_fn visit, void *arg);

/**
 * Converts one CDR message (with its encapsulation header, CDR_LE or CDR_BE) of a plain schema
 * to its C layout (FERRY_ROS2_WIRE_PLAIN) in out, which must be exactly the schema's plain size
 * (padding zeroed): the form rmw_ferry_cpp's nodes send a fixed-size type in. Every length is
 * checked as ferry_ros2_walk does; on an error out holds nothing of use.
 *
 * @retval FERRY_ROS2_WALK_OK          converted
 * @retval FERRY_ROS2_WALK_MALFORMED   not a message of the schema, the schema is not plain, or
 *                                     out_size is not its plain size
 * @retval FERRY_ROS2_WALK_UNSUPPORTED an encapsulation other than CDR_BE / CDR_LE
 */
ferry_ros2_walk_result ferry_ros2_cdr_to_plain(const ferry_ros2_schema *schema, const void *buf,
                                               size_t size, void *out, size_t out_size);

/**
 * Converts a message of a plain schema from its C layout (FERRY_ROS2_WIRE_PLAIN, size bytes) to
 * CDR_LE with its encapsulation header, into out (cap bytes; ferry_ros2_schema_plain_size + 8
 * always suffice). *out_size gets the bytes written.
 *
 * @retval FERRY_OK      converted
 * @retval FERRY_EINVAL  the schema is not plain, size is not its plain size, or out is too small
 */
ferry_err ferry_ros2_plain_to_cdr(const ferry_ros2_schema *schema, const void *buf, size_t size,
                                  void *out, size_t cap, size_t *out_size);

#ifdef __cplusplus
}
#endif
#endif
