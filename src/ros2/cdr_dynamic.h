/*
 * What the two halves of the ROS 2 schema code share (for src/ros2/cdr_dynamic.c, which parses
 * definitions into schemas, and src/ros2/cdr_walk.c, which walks messages by them): the table of
 * types and fields a schema is. A schema is immutable once parsed; see ros2_types.h.
 */
#ifndef FERRY_ROS2_CDR_DYNAMIC_H
#define FERRY_ROS2_CDR_DYNAMIC_H

#include "ros2_types.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum prim {
    P_BOOL = 1,
    P_BYTE,
    P_CHAR,
    P_INT8,
    P_UINT8,
    P_INT16,
    P_UINT16,
    P_INT32,
    P_UINT32,
    P_INT64,
    P_UINT64,
    P_FLOAT32,
    P_FLOAT64,
    P_STRING,
    P_WSTRING,
    P_STRUCT,
};

enum arr { A_NONE, A_FIXED, A_BOUNDED, A_SEQ };

#define NAME_MAX_ 255u       /* a field's or a type's name */
#define LINE_MAX_ 4096u      /* one line of a definition */
#define FIXED_MAX (1u << 28) /* elements of a fixed array */
#define PLAIN_MAX ((size_t)1 << 30)

typedef struct dyn_field {
    char *name;
    char *type_name; /* P_STRUCT: "pkg/Name", until resolved */
    uint8_t prim, arr;
    uint32_t bound;     /* A_FIXED: the elements; A_BOUNDED: the most */
    uint32_t str_bound; /* string<=N, wstring<=N; 0: none */
    uint32_t sub;       /* P_STRUCT: the type's index, once resolved */
} dyn_field;

typedef struct dyn_type {
    char *name;          /* "pkg/Name" */
    size_t first, count; /* its fields in the schema's table */
    uint8_t state;       /* 0 not looked at, 1 being resolved, 2 resolved */
    bool plain;
    size_t plain_size, plain_align;
} dyn_type;

struct ferry_ros2_schema {
    dyn_type *types;
    size_t ntypes, types_cap;
    dyn_field *fields;
    size_t nfields, fields_cap;
};

/* A primitive's bytes in CDR and in the C layout (0 for strings and structures). */
unsigned ferry__ros2_prim_size(uint8_t prim);

/* 1-byte integers: an array of them is sent as one FERRY_ROS2_EV_BYTES. */
static inline bool ferry__ros2_is_byte(uint8_t prim)
{
    return prim == P_BYTE || prim == P_CHAR || prim == P_INT8 || prim == P_UINT8;
}

#endif
