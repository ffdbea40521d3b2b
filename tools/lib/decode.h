/*
 * What `ferry echo --json` and `ferry delay` know about the message types: a decoder per type
 * name (one per kind of src/ros2's table, msg_table.h) that validates a taken sample with the
 * type's view and reports its header stamp, its data and, for echo, its fields as a JSON tree; and
 * the small JSON tree they are built in, which --field selects from by dotted path.
 * Single-threaded: a tree belongs to one command.
 */
#ifndef FERRY_CLI_DECODE_H
#define FERRY_CLI_DECODE_H

#include <ferry/ferry.h>
#include <ferry/msg.h>

#include "ros2_types.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---------------------------------------------------------------------------------------------
 * JSON trees. Nodes are indices into one growing array; 0 is the root object after
 * cli_json_reset. Adding under a failed (negative) parent, or running out of memory, sets
 * failed and adds nothing, so a builder checks once at the end. Keys are not copied: they must
 * outlive the tree (string literals). String values are copied.
 * ------------------------------------------------------------------------------------------- */

typedef enum cli_jkind {
    CLI_J_OBJECT,
    CLI_J_ARRAY,
    CLI_J_STRING,
    CLI_J_NUMBER,
    CLI_J_BOOL
} cli_jkind;

typedef struct cli_jnode {
    const char *key; /* NULL for array elements and the root */
    cli_jkind kind;
    char *text;      /* string value, or the number or bool as JSON text */
    int first, last; /* children of objects and arrays, -1 when none */
    int next;        /* next sibling, -1 at the end */
} cli_jnode;

typedef struct cli_json {
    cli_jnode *n;
    size_t count, cap;
    bool failed;
} cli_json;

void cli_json_init(cli_json *j);
void cli_json_reset(cli_json *j); /* empties the tree and adds the root object, node 0 */
void cli_json_free(cli_json *j);
/* Removes every node added after the first count (count >= 1): a part that turned out wrong. */
void cli_json_truncate(cli_json *j, size_t count);

int cli_json_object(cli_json *j, int parent, const char *key);
int cli_json_array(cli_json *j, int parent, const char *key);
void cli_json_str(cli_json *j, int parent, const char *key, const char *value);
/* As cli_json_str, taking ownership of value (malloc'd), which may be large (--data). */
void cli_json_str_owned(cli_json *j, int parent, const char *key, char *value);
void cli_json_u64(cli_json *j, int parent, const char *key, uint64_t value);
void cli_json_i64(cli_json *j, int parent, const char *key, int64_t value);
void cli_json_real(cli_json *j, int parent, const char *key, double value);
/* A double at full precision (it reads back as the same value); nan and inf as null. */
void cli_json_f64(cli_json *j, int parent, const char *key, double value);
void cli_json_bool(cli_json *j, int parent, const char *key, bool value);

/* A float32 in the fewest digits that read back as the same float (6 to 9); nan, inf as null. */
void cli_json_f32(cli_json *j, int parent, const char *key, float value);

/* Bytes as echo shows a message's data: {bytes, crc32, head, tail} (the first and last 16 in
 * hex), with base64 also {base64}. */
void cli_json_bytes(cli_json *j, int parent, const char *key, const void *p, size_t n, bool base64);

/* The node at a dotted path from node from ("header.stamp.sec"; array elements by index,
 * "fields.0.name"), or -1. */
int cli_json_find(const cli_json *j, int from, const char *path);

/* Writes node (and what it holds) as compact JSON, on one line, without a newline. */
void cli_json_write(const cli_json *j, int node, FILE *to);

/* Writes s as a JSON string, quotes included. */
void cli_json_string(FILE *to, const char *s);

/* ---------------------------------------------------------------------------------------------
 * Message types
 * ------------------------------------------------------------------------------------------- */

/* What a decoder found in a sample. */
typedef struct cli_msg {
    bool valid;        /* the type's view accepted the sample */
    bool has_stamp;    /* valid, and the type carries a header stamp */
    ferry_stamp stamp; /* when has_stamp */
    const void *data;  /* the message's data (pixels, points, elements), or the whole payload */
    size_t data_size;
} cli_msg;

struct ferry_ros2_kind_desc;

typedef struct cli_msg_type {
    const char *name; /* the type name publishers use; NULL for the opaque type */
    bool stamped;     /* its samples carry a header stamp (what `ferry delay` needs) */
    const struct ferry_ros2_kind_desc *kind; /* its entry in src/ros2's table; NULL: opaque */
} cli_msg_type;

/* The decoder of type_name: one per kind of src/ros2 (ros2.h); for a type without one, the
 * opaque decoder (name NULL, no stamp, the data is the whole payload). Never NULL. */
const cli_msg_type *cli_msg_type_find(const char *type_name);

/* Validates s as type t and fills m; when j is not NULL, also adds the message's fields
 * (everything but the data) under node obj. An invalid sample leaves m->valid false and adds
 * nothing. */
void cli_msg_decode(const cli_msg_type *t, const ferry_sample *s, cli_msg *m, cli_json *j, int obj);

/* The fields of a message of a ROS 2 type known by its definition (ros2_types.h), walked from
 * buf as wire says, added under node obj: arrays over CLI_JSON_ELEMENTS_MAX elements become
 * {length, head} with the first ones, sequences of bytes and long byte arrays what
 * cli_json_bytes makes (base64 as there). Returns the walk's result; on an error what was added
 * so far stays. Keys point into the schema, which must outlive the tree. */
#define CLI_JSON_ELEMENTS_MAX 64u
ferry_ros2_walk_result cli_json_ros2(cli_json *j, int obj, const ferry_ros2_schema *schema,
                                     ferry_ros2_wire wire, const void *buf, size_t size,
                                     bool base64);

/* The names of the stamped types, ", "-separated, for messages. */
void cli_msg_stamped_names(char *buf, size_t cap);

/* The stamp as nanoseconds since the epoch; 0 for a stamp left zero by its publisher. */
int64_t cli_stamp_ns(ferry_stamp stamp);

/* CLOCK_REALTIME in nanoseconds: the clock ROS stamps are on. */
int64_t cli_realtime_ns(void);

/* zlib's CRC-32 (as Python's zlib.crc32) of n bytes. */
uint32_t cli_crc32(const void *p, size_t n);

/* p as base64 (RFC 4648, with padding), malloc'd and NUL-terminated; NULL when out of memory. */
char *cli_base64(const void *p, size_t n);

#endif
