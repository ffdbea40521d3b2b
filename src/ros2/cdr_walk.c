/*
 * Walking one message by a schema of ros2_types.h (cdr_dynamic.c parses them), in plain CDR
 * (XCDR1) or in the C layout of a fixed-size type, reporting each field to a visitor; and the two
 * conversions between those forms (a fixed-size type's C layout to CDR and back), which walk one
 * form and write the other.
 *
 * CDR: primitives aligned to their size (8 at most) from the byte after the 4-byte encapsulation
 * header; a string is a uint32 length counting its NUL (0 is taken as empty, as rmw_cyclonedds
 * takes it), the bytes and the NUL; a wstring a uint32 count of UTF-16 units, each widened to 4
 * bytes (rmw_cyclonedds' encoding); a sequence a uint32 count then its elements; a structure is
 * its fields, with no alignment of its own; an empty structure one uint8.
 *
 * C layout (rmw_ferry_cpp's "plain" types: no string or sequence at any depth): every
 * primitive aligned to its size, a nested structure to its largest member's alignment, each
 * structure padded at its end to a multiple of that alignment, the host's byte order.
 *
 * Every element takes at least one byte in either form, so a walk does at most as many steps as
 * the message has bytes, whatever counts it claims; nesting is bounded when the schema is parsed.
 */
#include "cdr_dynamic.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * Walking
 * ------------------------------------------------------------------------------------------- */

typedef struct walker {
    const ferry_ros2_schema *s;
    const uint8_t *p; /* CDR: after the encapsulation header; plain: the struct */
    size_t size, pos; /* pos <= size always */
    bool swap, plain;
    uint32_t max;
    unsigned quiet; /* > 0: inside elements left out, nothing is sent */
    ferry_ros2_visit_fn visit;
    void *arg;
    char *text; /* a wstring as UTF-8 */
    size_t text_cap;
    /* Set: each value is also written at its place in a C struct of the (plain) schema, out
     * (out_size bytes, the schema's plain size); see ferry_ros2_cdr_to_plain. */
    uint8_t *out;
    size_t out_pos, out_size;
} walker;

static void emit(walker *w, ferry_ros2_event *ev)
{
    if (w->quiet == 0 && w->visit != NULL)
        w->visit(w->arg, ev);
}

static void emit_mark(walker *w, ferry_ros2_event_kind kind, const char *key, uint32_t count)
{
    ferry_ros2_event ev;

    memset(&ev, 0, sizeof ev);
    ev.kind = kind;
    ev.key = key;
    ev.count = count;
    emit(w, &ev);
}

static bool align(walker *w, size_t a)
{
    size_t pad;

    if (!w->plain && a > 8)
        a = 8;
    pad = (a - (w->pos & (a - 1))) & (a - 1);
    if (pad > w->size - w->pos)
        return false;
    w->pos += pad;
    return true;
}

/* The C layout being written (w->out): aligned to a, then n bytes of v (NULL: left zero). */
static bool put_plain(walker *w, size_t a, const void *v, size_t n)
{
    size_t pad = (a - (w->out_pos & (a - 1))) & (a - 1);

    if (w->out_size - w->out_pos < pad || w->out_size - w->out_pos - pad < n)
        return false;
    w->out_pos += pad;
    if (v != NULL)
        memcpy(w->out + w->out_pos, v, n);
    w->out_pos += n;
    return true;
}

/* n bytes aligned to n, as an unsigned value in the host's order. */
static bool take(walker *w, unsigned n, uint64_t *v)
{
    uint8_t b[8];
    unsigned i;

    if (!align(w, n) || w->size - w->pos < n)
        return false;
    if (w->swap)
        for (i = 0; i < n; i++)
            b[i] = w->p[w->pos + n - 1 - i];
    else
        memcpy(b, w->p + w->pos, n);
    w->pos += n;
    switch (n) {
    case 1:
        *v = b[0];
        break;
    case 2: {
        uint16_t x;
        memcpy(&x, b, 2);
        *v = x;
        break;
    }
    case 4: {
        uint32_t x;
        memcpy(&x, b, 4);
        *v = x;
        break;
    }
    default:
        memcpy(v, b, 8);
        break;
    }
    return true;
}

static bool take_u32(walker *w, uint32_t *v)
{
    uint64_t x;

    if (!take(w, 4, &x))
        return false;
    *v = (uint32_t)x;
    return true;
}

static bool put_utf8(walker *w, size_t *o, uint32_t c)
{
    char *t = w->text + *o;

    if (c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
        c = 0xfffd;
    if (c < 0x80) {
        t[0] = (char)c;
        *o += 1;
    } else if (c < 0x800) {
        t[0] = (char)(0xc0 | c >> 6);
        t[1] = (char)(0x80 | (c & 0x3f));
        *o += 2;
    } else if (c < 0x10000) {
        t[0] = (char)(0xe0 | c >> 12);
        t[1] = (char)(0x80 | ((c >> 6) & 0x3f));
        t[2] = (char)(0x80 | (c & 0x3f));
        *o += 3;
    } else {
        t[0] = (char)(0xf0 | c >> 18);
        t[1] = (char)(0x80 | ((c >> 12) & 0x3f));
        t[2] = (char)(0x80 | ((c >> 6) & 0x3f));
        t[3] = (char)(0x80 | (c & 0x3f));
        *o += 4;
    }
    return true;
}

static bool walk_string(walker *w, const dyn_field *f, const char *key)
{
    ferry_ros2_event ev;
    uint32_t n;

    memset(&ev, 0, sizeof ev);
    ev.kind = FERRY_ROS2_EV_STRING;
    ev.key = key;
    if (!take_u32(w, &n))
        return false;
    if (f->prim == P_STRING) {
        if (n > w->size - w->pos || (n > 0 && w->p[w->pos + n - 1] != '\0'))
            return false;
        if (f->str_bound != 0 && n > 0 && n - 1 > f->str_bound)
            return false;
        ev.s = n > 0 ? (const char *)(w->p + w->pos) : "";
        ev.n = n > 0 ? n - 1 : 0;
        w->pos += n;
        emit(w, &ev);
        return true;
    }
    /* A wstring: n units of 4 bytes, UTF-16 code units widened; 4 bytes of UTF-8 at most each. */
    if (n > (w->size - w->pos) / 4 || (f->str_bound != 0 && n > f->str_bound))
        return false;
    if (w->quiet == 0 && w->visit != NULL) {
        size_t need = (size_t)n * 4 + 1, o = 0;
        uint32_t i;

        if (need > w->text_cap) {
            char *t = realloc(w->text, need);

            if (t == NULL)
                return false;
            w->text = t;
            w->text_cap = need;
        }
        for (i = 0; i < n; i++) {
            uint64_t u, u2;

            take(w, 4, &u);
            /* A surrogate pair is one character. */
            if (u >= 0xd800 && u < 0xdc00 && i + 1 < n) {
                size_t at = w->pos;

                take(w, 4, &u2);
                if (u2 >= 0xdc00 && u2 < 0xe000) {
                    put_utf8(w, &o, 0x10000 + (uint32_t)((u - 0xd800) << 10 | (u2 - 0xdc00)));
                    i++;
                    continue;
                }
                w->pos = at;
            }
            put_utf8(w, &o, (uint32_t)u);
        }
        w->text[o] = '\0';
        ev.s = w->text;
        ev.n = o;
        emit(w, &ev);
    } else {
        w->pos += (size_t)n * 4;
    }
    return true;
}

static bool walk_struct(walker *w, size_t t);

/* One value of a field (an element, when the field is an array). */
static bool walk_value(walker *w, const dyn_field *f, const char *key)
{
    ferry_ros2_event ev;
    uint64_t v;
    unsigned size;

    if (f->prim == P_STRING || f->prim == P_WSTRING)
        return walk_string(w, f, key);
    if (f->prim == P_STRUCT) {
        emit_mark(w, FERRY_ROS2_EV_BEGIN_STRUCT, key, 0);
        if (!walk_struct(w, f->sub))
            return false;
        emit_mark(w, FERRY_ROS2_EV_END_STRUCT, key, 0);
        return true;
    }
    size = ferry__ros2_prim_size(f->prim);
    if (!take(w, size, &v))
        return false;
    if (w->out != NULL) {
        uint8_t b = f->prim == P_BOOL ? v != 0 : (uint8_t)v;
        uint16_t v16 = (uint16_t)v;
        uint32_t v32 = (uint32_t)v;
        const void *src = size == 1   ? (const void *)&b
                          : size == 2 ? (const void *)&v16
                          : size == 4 ? (const void *)&v32
                                      : (const void *)&v;

        if (!put_plain(w, size, src, size))
            return false;
    }
    memset(&ev, 0, sizeof ev);
    ev.key = key;
    ev.size = (uint8_t)size;
    switch (f->prim) {
    case P_BOOL:
        ev.kind = FERRY_ROS2_EV_BOOL;
        ev.u = v != 0;
        break;
    case P_INT8:
        ev.kind = FERRY_ROS2_EV_INT;
        ev.i = (int8_t)v;
        break;
    case P_INT16:
        ev.kind = FERRY_ROS2_EV_INT;
        ev.i = (int16_t)v;
        break;
    case P_INT32:
        ev.kind = FERRY_ROS2_EV_INT;
        ev.i = (int32_t)v;
        break;
    case P_INT64:
        ev.kind = FERRY_ROS2_EV_INT;
        memcpy(&ev.i, &v, 8);
        break;
    case P_FLOAT32: {
        uint32_t x = (uint32_t)v;
        float fl;

        memcpy(&fl, &x, 4);
        ev.kind = FERRY_ROS2_EV_FLOAT32;
        ev.f = fl;
        break;
    }
    case P_FLOAT64:
        ev.kind = FERRY_ROS2_EV_FLOAT64;
        memcpy(&ev.f, &v, 8);
        break;
    default:
        ev.kind = FERRY_ROS2_EV_UINT;
        ev.u = v;
        break;
    }
    emit(w, &ev);
    return true;
}

static bool walk_field(walker *w, const dyn_field *f)
{
    uint32_t n, i, shown;
    unsigned size;

    if (f->arr == A_NONE)
        return walk_value(w, f, f->name);
    if (f->arr == A_FIXED) {
        n = f->bound;
    } else {
        if (!take_u32(w, &n) || (f->arr == A_BOUNDED && n > f->bound))
            return false;
        /* Every element takes a byte at least. */
        if (n > w->size - w->pos)
            return false;
    }
    if (ferry__ros2_is_byte(f->prim)) {
        ferry_ros2_event ev;

        if (n > w->size - w->pos)
            return false;
        memset(&ev, 0, sizeof ev);
        ev.kind = FERRY_ROS2_EV_BYTES;
        ev.key = f->name;
        ev.count = n;
        ev.is_signed = f->prim == P_INT8;
        ev.fixed = f->arr == A_FIXED;
        ev.p = w->p + w->pos;
        ev.n = n;
        if (w->out != NULL && !put_plain(w, 1, ev.p, n))
            return false;
        w->pos += n;
        emit(w, &ev);
        return true;
    }
    shown = w->max != 0 && n > w->max ? w->max : n;
    emit_mark(w, FERRY_ROS2_EV_BEGIN_ARRAY, f->name, n);
    size = f->prim != P_STRUCT ? ferry__ros2_prim_size(f->prim) : 0;
    if (size > 0 && n > 0) {
        /* Primitives: one check for all, then only the ones shown are read. */
        if (!align(w, size) || (w->size - w->pos) / size < n)
            return false;
        for (i = 0; i < shown; i++)
            walk_value(w, f, NULL);
        w->pos += (size_t)(n - shown) * size;
    } else {
        for (i = 0; i < n; i++) {
            bool ok;

            if (i == shown)
                w->quiet++;
            ok = walk_value(w, f, NULL);
            if (!ok) {
                if (i >= shown)
                    w->quiet--;
                return false;
            }
        }
        if (n > shown)
            w->quiet--;
    }
    emit_mark(w, FERRY_ROS2_EV_END_ARRAY, f->name, n - shown);
    return true;
}

static bool walk_struct(walker *w, size_t t)
{
    const dyn_type *ty = &w->s->types[t];
    size_t i;

    if (w->plain && !align(w, ty->plain_align))
        return false;
    if (w->out != NULL && !put_plain(w, ty->plain_align, NULL, 0))
        return false;
    if (ty->count == 0) {
        /* rosidl's one uint8 of an empty message */
        ferry_ros2_event ev;

        if (w->pos == w->size)
            return false;
        memset(&ev, 0, sizeof ev);
        ev.kind = FERRY_ROS2_EV_EMPTY;
        ev.size = 1;
        ev.u = w->p[w->pos++];
        if (w->out != NULL && !put_plain(w, 1, &w->p[w->pos - 1], 1))
            return false;
        emit(w, &ev);
    }
    for (i = ty->first; i < ty->first + ty->count; i++)
        if (!walk_field(w, &w->s->fields[i]))
            return false;
    if (w->out != NULL && !put_plain(w, ty->plain_align, NULL, 0))
        return false;
    return !w->plain || align(w, ty->plain_align);
}

static ferry_ros2_walk_result walk(const ferry_ros2_schema *schema, ferry_ros2_wire wire,
                                   const void *buf, size_t size, uint32_t elements_max,
                                   ferry_ros2_visit_fn visit, void *arg, void *out, size_t out_size)
{
    const uint8_t *b = buf;
    walker w;
    bool ok;

    if (schema == NULL || schema->ntypes == 0 || (buf == NULL && size > 0))
        return FERRY_ROS2_WALK_MALFORMED;
    memset(&w, 0, sizeof w);
    w.s = schema;
    w.max = elements_max;
    w.visit = visit;
    w.arg = arg;
    w.out = out;
    w.out_size = out_size;
    if (wire == FERRY_ROS2_WIRE_PLAIN) {
        if (schema->types[0].plain_size == 0 || size != schema->types[0].plain_size)
            return FERRY_ROS2_WALK_MALFORMED;
        w.plain = true;
        w.p = b;
        w.size = size;
    } else {
        bool little;

        if (size < 4)
            return FERRY_ROS2_WALK_MALFORMED;
        if (b[0] != 0 || b[1] > 1)
            return FERRY_ROS2_WALK_UNSUPPORTED;
        little = b[1] == 1;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        w.swap = little;
#else
        w.swap = !little;
#endif
        w.p = b + 4;
        w.size = size - 4;
    }
    ok = walk_struct(&w, 0) && (out == NULL || w.out_pos == out_size);
    free(w.text);
    return ok ? FERRY_ROS2_WALK_OK : FERRY_ROS2_WALK_MALFORMED;
}

ferry_ros2_walk_result ferry_ros2_walk(const ferry_ros2_schema *schema, ferry_ros2_wire wire,
                                       const void *buf, size_t size, uint32_t elements_max,
                                       ferry_ros2_visit_fn visit, void *arg)
{
    return walk(schema, wire, buf, size, elements_max, visit, arg, NULL, 0);
}

/* ---------------------------------------------------------------------------------------------
 * CDR to C layout
 * ------------------------------------------------------------------------------------------- */

ferry_ros2_walk_result ferry_ros2_cdr_to_plain(const ferry_ros2_schema *schema, const void *buf,
                                               size_t size, void *out, size_t out_size)
{
    size_t plain = ferry_ros2_schema_plain_size(schema);

    if (plain == 0 || out == NULL || out_size != plain)
        return FERRY_ROS2_WALK_MALFORMED;
    /* The padding between fields is zero, as a zero-initialised C struct has it. */
    memset(out, 0, out_size);
    return walk(schema, FERRY_ROS2_WIRE_CDR, buf, size, 0, NULL, NULL, out, out_size);
}

/* ---------------------------------------------------------------------------------------------
 * C layout to CDR
 * ------------------------------------------------------------------------------------------- */

typedef struct cdr_out {
    uint8_t *p; /* after the encapsulation header */
    size_t cap, pos;
    bool failed;
} cdr_out;

static void cdr_put(cdr_out *o, const void *v, size_t n, size_t a)
{
    size_t pad = (a - (o->pos & (a - 1))) & (a - 1);

    if (o->failed || o->cap - o->pos < pad || o->cap - o->pos - pad < n) {
        o->failed = true;
        return;
    }
    memset(o->p + o->pos, 0, pad);
    memcpy(o->p + o->pos + pad, v, n);
    o->pos += pad + n;
}

/* Each primitive in message order at its CDR alignment, in the host's order (CDR_LE on the
 * little-endian hosts rmw_ferry_cpp runs on; the header below says which). */
static void to_cdr_event(void *arg, const ferry_ros2_event *ev)
{
    cdr_out *o = arg;
    uint8_t b;

    switch (ev->kind) {
    case FERRY_ROS2_EV_BOOL:
        b = ev->u != 0;
        cdr_put(o, &b, 1, 1);
        return;
    case FERRY_ROS2_EV_INT: {
        int8_t i8 = (int8_t)ev->i;
        int16_t i16 = (int16_t)ev->i;
        int32_t i32 = (int32_t)ev->i;

        if (ev->size == 1)
            cdr_put(o, &i8, 1, 1);
        else if (ev->size == 2)
            cdr_put(o, &i16, 2, 2);
        else if (ev->size == 4)
            cdr_put(o, &i32, 4, 4);
        else
            cdr_put(o, &ev->i, 8, 8);
        return;
    }
    case FERRY_ROS2_EV_UINT: {
        uint8_t u8 = (uint8_t)ev->u;
        uint16_t u16 = (uint16_t)ev->u;
        uint32_t u32 = (uint32_t)ev->u;

        if (ev->size == 1)
            cdr_put(o, &u8, 1, 1);
        else if (ev->size == 2)
            cdr_put(o, &u16, 2, 2);
        else if (ev->size == 4)
            cdr_put(o, &u32, 4, 4);
        else
            cdr_put(o, &ev->u, 8, 8);
        return;
    }
    case FERRY_ROS2_EV_FLOAT32: {
        float f = (float)ev->f;

        cdr_put(o, &f, 4, 4);
        return;
    }
    case FERRY_ROS2_EV_FLOAT64:
        cdr_put(o, &ev->f, 8, 8);
        return;
    case FERRY_ROS2_EV_BYTES:
        cdr_put(o, ev->p, ev->n, 1);
        return;
    case FERRY_ROS2_EV_EMPTY:
        b = (uint8_t)ev->u;
        cdr_put(o, &b, 1, 1);
        return;
    default: /* structures and fixed arrays have no bytes of their own in CDR */
        return;
    }
}

ferry_err ferry_ros2_plain_to_cdr(const ferry_ros2_schema *schema, const void *buf, size_t size,
                                  void *out, size_t cap, size_t *out_size)
{
    uint8_t *h = out;
    cdr_out o;

    if (schema == NULL || out == NULL || out_size == NULL || cap < 4 ||
        ferry_ros2_schema_plain_size(schema) == 0)
        return FERRY_EINVAL;
    o.p = h + 4;
    o.cap = cap - 4;
    o.pos = 0;
    o.failed = false;
    if (ferry_ros2_walk(schema, FERRY_ROS2_WIRE_PLAIN, buf, size, 0, to_cdr_event, &o) !=
            FERRY_ROS2_WALK_OK ||
        o.failed)
        return FERRY_EINVAL;
    h[0] = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    h[1] = 0;
#else
    h[1] = 1;
#endif
    h[2] = h[3] = 0;
    *out_size = 4 + o.pos;
    return FERRY_OK;
}
