/*
 * The CDR reader of ros2.h: ROS 2's messages read straight from their plain-CDR (XCDR1)
 * serialisation into the parsed messages of ros2.h by walking the kind's members (msg_table.h),
 * every length checked against the bytes there are.
 */
#include "msg_table.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * Plain CDR (XCDR1)
 *
 * Primitives, doubles included, are aligned to their size relative to the start of the data
 * after the 4-byte encapsulation header; a string is a uint32 length counting its NUL, then the
 * bytes and the NUL; a sequence is a uint32 count, then its elements; booleans and octets are
 * one byte.
 * ------------------------------------------------------------------------------------------- */

typedef struct cdr_reader {
    const uint8_t *p; /* the data after the encapsulation header */
    size_t size;
    size_t pos; /* always <= size */
    bool swap;  /* the data's byte order is not the host's */
} cdr_reader;

static bool cdr_u8(cdr_reader *c, uint8_t *v)
{
    if (c->pos >= c->size)
        return false;
    *v = c->p[c->pos++];
    return true;
}

static bool cdr_u32(cdr_reader *c, uint32_t *v)
{
    size_t pad = (4u - (c->pos & 3u)) & 3u;
    uint32_t x;

    if (c->size - c->pos < pad || c->size - c->pos - pad < 4)
        return false;
    c->pos += pad;
    memcpy(&x, c->p + c->pos, 4);
    c->pos += 4;
    *v = c->swap ? __builtin_bswap32(x) : x;
    return true;
}

/* Eight bytes aligned to eight, in the host's order. */
static bool cdr_u64(cdr_reader *c, uint64_t *v)
{
    size_t pad = (8u - (c->pos & 7u)) & 7u;
    uint64_t x;

    if (c->size - c->pos < pad || c->size - c->pos - pad < 8)
        return false;
    c->pos += pad;
    memcpy(&x, c->p + c->pos, 8);
    c->pos += 8;
    *v = c->swap ? __builtin_bswap64(x) : x;
    return true;
}

/* A string: at least its NUL, which must be the last of its bytes. */
static bool cdr_string(cdr_reader *c, const char **s)
{
    uint32_t n;

    if (!cdr_u32(c, &n) || n == 0 || n > c->size - c->pos || c->p[c->pos + n - 1] != '\0')
        return false;
    *s = (const char *)(c->p + c->pos);
    c->pos += n;
    return true;
}

static bool cdr_octets(cdr_reader *c, const uint8_t **data, uint32_t *n)
{
    if (!cdr_u32(c, n) || *n > c->size - c->pos)
        return false;
    *data = c->p + c->pos;
    c->pos += *n;
    return true;
}

/* The encapsulation header: CDR_BE (0x0000) or CDR_LE (0x0001), big-endian on the wire; the two
 * option bytes (padding at the end) are not needed. */
static ferry_ros2_cdr_result cdr_open(cdr_reader *c, const void *ser, size_t size)
{
    const uint8_t *h = ser;
    bool little;

    if (ser == NULL || size < 4 || size - 4 > UINT32_MAX)
        return FERRY_ROS2_CDR_MALFORMED;
    if (h[0] != 0 || h[1] > 1)
        return FERRY_ROS2_CDR_UNSUPPORTED;
    little = h[1] == 1;
    c->p = h + 4;
    c->size = size - 4;
    c->pos = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    c->swap = little;
#else
    c->swap = !little;
#endif
    return FERRY_ROS2_CDR_OK;
}

static size_t wire_elem_min(const ferry_ros2_member *m)
{
    return m->type == FERRY_ROS2_M_STRUCT ? 1 : ferry_ros2_elem_size(m, false);
}

/* Room for an element past those a message keeps: read and checked, then dropped. */
#define SCRATCH_MAX 256u

static bool get_members(cdr_reader *c, const ferry_ros2_member *m, uint32_t n, uint8_t *msg);

static bool get_one(cdr_reader *c, const ferry_ros2_member *m, uint8_t *at)
{
    const char *s;
    uint64_t u64;
    uint32_t u32;

    switch (m->type) {
    case FERRY_ROS2_M_BOOL:
    case FERRY_ROS2_M_U8:
        return cdr_u8(c, at);
    case FERRY_ROS2_M_I32:
    case FERRY_ROS2_M_U32:
        if (!cdr_u32(c, &u32))
            return false;
        memcpy(at, &u32, sizeof u32);
        return true;
    case FERRY_ROS2_M_I64:
    case FERRY_ROS2_M_F64:
        if (!cdr_u64(c, &u64))
            return false;
        memcpy(at, &u64, sizeof u64);
        return true;
    case FERRY_ROS2_M_STRING:
    case FERRY_ROS2_M_DTYPE:
        if (!cdr_string(c, &s))
            return false;
        memcpy(at, &s, sizeof s);
        return true;
    case FERRY_ROS2_M_STRUCT:
        return get_members(c, m->members, m->nmembers, at);
    default:
        return false;
    }
}

/* A sequence: its count as sent, then every element, of which the first m->len are kept. Each
 * element takes at least wire_elem_min bytes, so a count that the data cannot hold fails at
 * once. */
static bool get_seq(cdr_reader *c, const ferry_ros2_member *m, uint8_t *msg)
{
    _Alignas(max_align_t) uint8_t scratch[SCRATCH_MAX];
    uint32_t count, k;

    if (!cdr_u32(c, &count) || count > (c->size - c->pos) / wire_elem_min(m) ||
        ferry_ros2_elem_size(m, false) > sizeof scratch)
        return false;
    memcpy(msg + m->msg_count, &count, sizeof count);
    for (k = 0; k < count; k++)
        if (!get_one(c, m,
                     k < m->len ? msg + m->msg + k * ferry_ros2_elem_size(m, false) : scratch))
            return false;
    return true;
}

static bool get_members(cdr_reader *c, const ferry_ros2_member *m, uint32_t n, uint8_t *msg)
{
    const uint8_t *data;
    uint32_t i, k, size;

    for (i = 0; i < n; i++, m++) {
        uint8_t *at = msg + m->msg;

        switch (m->array) {
        case FERRY_ROS2_A_NONE:
            if (m->type == FERRY_ROS2_M_BULK) {
                if (!cdr_octets(c, &data, &size))
                    return false;
                memcpy(at, &data, sizeof data);
                memcpy(msg + m->msg_count, &size, sizeof size);
            } else if (!get_one(c, m, at)) {
                return false;
            }
            break;
        case FERRY_ROS2_A_FIXED:
            for (k = 0; k < m->len; k++)
                if (!get_one(c, m, at + k * ferry_ros2_elem_size(m, false)))
                    return false;
            break;
        default:
            if (!get_seq(c, m, msg))
                return false;
            break;
        }
    }
    return true;
}

ferry_ros2_cdr_result ferry_ros2_cdr_parse(ferry_ros2_kind kind, const void *ser, size_t size,
                                           ferry_ros2_msg *out)
{
    const ferry_ros2_kind_desc *d = ferry_ros2_kind_desc_of(kind);
    ferry_ros2_cdr_result res;
    cdr_reader c;

    if (out == NULL || d == NULL || d->msg_size > sizeof out->u)
        return FERRY_ROS2_CDR_MALFORMED;
    memset(out, 0, sizeof *out);
    res = cdr_open(&c, ser, size);
    if (res != FERRY_ROS2_CDR_OK)
        return res;
    if (!get_members(&c, d->members, d->nmembers, (uint8_t *)&out->u)) {
        memset(out, 0, sizeof *out);
        return FERRY_ROS2_CDR_MALFORMED;
    }
    out->kind = kind;
    return FERRY_ROS2_CDR_OK;
}
