/*
 * The schemas and the generic decoder of ros2_types.h: a ros2msg definition parsed into a table
 * of types and fields, and a walk of one message by it, in plain CDR (XCDR1) or in the C layout
 * of a fixed-size type.
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
#include "ros2_types.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static const struct prim_name {
    const char *name;
    uint8_t prim, size;
} prims[] = {
    {"bool", P_BOOL, 1},       {"byte", P_BYTE, 1},     {"char", P_CHAR, 1},
    {"int8", P_INT8, 1},       {"uint8", P_UINT8, 1},   {"int16", P_INT16, 2},
    {"uint16", P_UINT16, 2},   {"int32", P_INT32, 4},   {"uint32", P_UINT32, 4},
    {"int64", P_INT64, 8},     {"uint64", P_UINT64, 8}, {"float32", P_FLOAT32, 4},
    {"float64", P_FLOAT64, 8}, {"string", P_STRING, 0}, {"wstring", P_WSTRING, 0},
};

static unsigned prim_size(uint8_t prim)
{
    size_t i;

    for (i = 0; i < sizeof prims / sizeof prims[0]; i++)
        if (prims[i].prim == prim)
            return prims[i].size;
    return 0;
}

static bool is_byte(uint8_t prim)
{
    return prim == P_BYTE || prim == P_CHAR || prim == P_INT8 || prim == P_UINT8;
}

/* ---------------------------------------------------------------------------------------------
 * Parsing
 * ------------------------------------------------------------------------------------------- */

typedef struct parser {
    ferry_ros2_schema *s;
    char *why;
    size_t cap;
    unsigned line;
    const char *package; /* of the type being read */
    size_t package_len;
} parser;

static ferry_err failf(parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static ferry_err failf(parser *ps, const char *fmt, ...)
{
    va_list ap;
    int n = 0;

    if (ps->why == NULL || ps->cap == 0)
        return FERRY_EINVAL;
    if (ps->line > 0)
        n = snprintf(ps->why, ps->cap, "line %u: ", ps->line);
    if (n < 0 || (size_t)n >= ps->cap)
        return FERRY_EINVAL;
    va_start(ap, fmt);
    vsnprintf(ps->why + n, ps->cap - (size_t)n, fmt, ap);
    va_end(ap);
    return FERRY_EINVAL;
}

static bool ident_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

static bool ident(const char *p, size_t n)
{
    size_t i;

    if (n == 0 || n > NAME_MAX_ || (p[0] >= '0' && p[0] <= '9'))
        return false;
    for (i = 0; i < n; i++)
        if (!ident_char(p[i]))
            return false;
    return true;
}

static char *dup_n(const char *p, size_t n)
{
    char *d = malloc(n + 1);

    if (d == NULL)
        return NULL;
    memcpy(d, p, n);
    d[n] = '\0';
    return d;
}

/* "pkg/Name" from "pkg/Name", "pkg/msg/Name" or, with a package, "Name"; NULL when it is none
 * of them (or out of memory: *oom). */
static char *type_full_name(const char *p, size_t n, const char *pkg, size_t pkg_len, bool *oom)
{
    const char *slash = memchr(p, '/', n);
    char *d;

    *oom = false;
    if (slash == NULL) {
        if (pkg == NULL || !ident(p, n) || !ident(pkg, pkg_len))
            return NULL;
        d = malloc(pkg_len + 1 + n + 1);
        if (d == NULL)
            goto oom;
        memcpy(d, pkg, pkg_len);
        d[pkg_len] = '/';
        memcpy(d + pkg_len + 1, p, n);
        d[pkg_len + 1 + n] = '\0';
        return d;
    }
    {
        size_t plen = (size_t)(slash - p);
        const char *rest = slash + 1;
        size_t rlen = n - plen - 1;

        if (rlen > 4 && memcmp(rest, "msg/", 4) == 0) {
            rest += 4;
            rlen -= 4;
        }
        if (!ident(p, plen) || !ident(rest, rlen))
            return NULL;
        d = malloc(plen + 1 + rlen + 1);
        if (d == NULL)
            goto oom;
        memcpy(d, p, plen + 1);
        memcpy(d + plen + 1, rest, rlen);
        d[plen + 1 + rlen] = '\0';
        return d;
    }
oom:
    *oom = true;
    return NULL;
}

static bool parse_u32(const char *p, size_t n, uint32_t max, uint32_t *out)
{
    uint64_t v = 0;
    size_t i;

    if (n == 0 || n > 10)
        return false;
    for (i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return false;
        v = v * 10 + (uint64_t)(p[i] - '0');
    }
    if (v > max)
        return false;
    *out = (uint32_t)v;
    return true;
}

static ferry_err new_type(parser *ps, char *name)
{
    ferry_ros2_schema *s = ps->s;
    size_t i;

    for (i = 0; i < s->ntypes; i++)
        if (strcmp(s->types[i].name, name) == 0) {
            free(name);
            return failf(ps, "type defined twice");
        }
    if (s->ntypes == FERRY_ROS2_SCHEMA_TYPES_MAX) {
        free(name);
        return failf(ps, "more than %u types", FERRY_ROS2_SCHEMA_TYPES_MAX);
    }
    if (s->ntypes == s->types_cap) {
        size_t cap = s->types_cap ? s->types_cap * 2 : 8;
        dyn_type *t = realloc(s->types, cap * sizeof *t);

        if (t == NULL) {
            free(name);
            return FERRY_ENOMEM;
        }
        s->types = t;
        s->types_cap = cap;
    }
    memset(&s->types[s->ntypes], 0, sizeof s->types[0]);
    s->types[s->ntypes].name = name;
    s->types[s->ntypes].first = s->nfields;
    s->ntypes++;
    ps->package = name;
    ps->package_len = (size_t)(strchr(name, '/') - name);
    return FERRY_OK;
}

/* The type token of a field line: base type, then an optional [N], [<=N] or []. */
static ferry_err parse_type(parser *ps, const char *p, size_t n, dyn_field *f)
{
    const char *br = memchr(p, '[', n);
    size_t base = br != NULL ? (size_t)(br - p) : n;
    const char *lt;
    size_t i;
    bool oom;

    if (br != NULL) {
        const char *in = br + 1;
        size_t in_len = n - base - 1;

        if (in_len == 0 || in[in_len - 1] != ']')
            return failf(ps, "bad array suffix");
        in_len--;
        if (in_len == 0) {
            f->arr = A_SEQ;
        } else if (in_len >= 2 && in[0] == '<' && in[1] == '=') {
            f->arr = A_BOUNDED;
            if (!parse_u32(in + 2, in_len - 2, UINT32_MAX, &f->bound))
                return failf(ps, "bad sequence bound");
        } else {
            f->arr = A_FIXED;
            if (!parse_u32(in, in_len, FIXED_MAX, &f->bound) || f->bound == 0)
                return failf(ps, "bad array size (1..%u)", FIXED_MAX);
        }
    }
    lt = memchr(p, '<', base);
    if (lt != NULL) {
        size_t blen = (size_t)(lt - p);

        if ((blen == 6 && memcmp(p, "string", 6) == 0) ||
            (blen == 7 && memcmp(p, "wstring", 7) == 0)) {
            f->prim = blen == 6 ? P_STRING : P_WSTRING;
            if (base - blen < 3 || lt[1] != '=' ||
                !parse_u32(lt + 2, base - blen - 2, UINT32_MAX, &f->str_bound) || f->str_bound == 0)
                return failf(ps, "bad string bound");
            return FERRY_OK;
        }
        return failf(ps, "a bound on a type other than string");
    }
    for (i = 0; i < sizeof prims / sizeof prims[0]; i++)
        if (strlen(prims[i].name) == base && memcmp(prims[i].name, p, base) == 0) {
            f->prim = prims[i].prim;
            return FERRY_OK;
        }
    f->prim = P_STRUCT;
    f->type_name = type_full_name(p, base, ps->package, ps->package_len, &oom);
    if (oom)
        return FERRY_ENOMEM;
    if (f->type_name == NULL)
        return failf(ps, "unknown type '%.*s'", (int)(base > 64 ? 64 : base), p);
    return FERRY_OK;
}

static ferry_err add_field(parser *ps, const dyn_field *f)
{
    ferry_ros2_schema *s = ps->s;

    if (s->nfields == FERRY_ROS2_SCHEMA_FIELDS_MAX)
        return failf(ps, "more than %u fields", FERRY_ROS2_SCHEMA_FIELDS_MAX);
    if (s->nfields == s->fields_cap) {
        size_t cap = s->fields_cap ? s->fields_cap * 2 : 16;
        dyn_field *g = realloc(s->fields, cap * sizeof *g);

        if (g == NULL)
            return FERRY_ENOMEM;
        s->fields = g;
        s->fields_cap = cap;
    }
    s->fields[s->nfields++] = *f;
    s->types[s->ntypes - 1].count++;
    return FERRY_OK;
}

static bool space(char c)
{
    return c == ' ' || c == '\t';
}

/* One line, comment and surrounding blanks removed. */
static ferry_err parse_line(parser *ps, const char *p, size_t n)
{
    const char *t, *name;
    size_t tlen, nlen, i;
    dyn_field f;
    ferry_err err;
    bool oom;

    if (n >= 4 && memcmp(p, "MSG:", 4) == 0) {
        char *full;

        p += 4;
        n -= 4;
        while (n > 0 && space(*p))
            p++, n--;
        full = type_full_name(p, n, NULL, 0, &oom);
        if (oom)
            return FERRY_ENOMEM;
        if (full == NULL)
            return failf(ps, "bad type name after MSG:");
        return new_type(ps, full);
    }
    for (i = 0; i < n && p[i] == '='; i++) {
    }
    if (i == n)
        return FERRY_OK; /* the separator before a MSG: line */
    t = p;
    for (tlen = 0; tlen < n && !space(t[tlen]); tlen++) {
    }
    name = t + tlen;
    while (name < p + n && space(*name))
        name++;
    for (nlen = 0; name + nlen < p + n && ident_char(name[nlen]); nlen++) {
    }
    if (nlen == 0)
        return failf(ps, "no field name");
    /* A constant: "TYPE NAME=VALUE", blanks allowed around '='. */
    for (i = nlen; name + i < p + n && space(name[i]); i++) {
    }
    if (name + i < p + n && name[i] == '=')
        return FERRY_OK;
    if (name + nlen < p + n && !space(name[nlen]))
        return failf(ps, "bad field name");
    if (!ident(name, nlen))
        return failf(ps, "bad field name");
    memset(&f, 0, sizeof f);
    err = parse_type(ps, t, tlen, &f);
    if (err == FERRY_OK) {
        f.name = dup_n(name, nlen);
        err = f.name != NULL ? add_field(ps, &f) : FERRY_ENOMEM;
    }
    if (err != FERRY_OK) {
        free(f.name);
        free(f.type_name);
    }
    return err;
}

static size_t round_up(size_t v, size_t a)
{
    return (v + a - 1) / a * a;
}

/* Resolves the nested types of type t (and theirs), refusing cycles and nesting beyond the
 * bound, and works out whether it can be plain and its C layout. */
static ferry_err resolve(parser *ps, size_t t, unsigned depth)
{
    ferry_ros2_schema *s = ps->s;
    dyn_type *ty = &s->types[t];
    size_t i, off = 0, align = 1;
    bool plain = true;

    if (ty->state == 2)
        return FERRY_OK;
    if (ty->state == 1)
        return failf(ps, "%s contains itself", ty->name);
    if (depth >= FERRY_ROS2_DEPTH_MAX)
        return failf(ps, "types nested more than %u deep", FERRY_ROS2_DEPTH_MAX);
    ty->state = 1;
    for (i = ty->first; i < ty->first + ty->count; i++) {
        dyn_field *f = &s->fields[i];
        size_t a, sz, k;

        if (f->prim == P_STRUCT) {
            for (k = 0; k < s->ntypes; k++)
                if (strcmp(s->types[k].name, f->type_name) == 0)
                    break;
            if (k == s->ntypes)
                return failf(ps, "%s: no definition of %s", ty->name, f->type_name);
            f->sub = (uint32_t)k;
            if (resolve(ps, k, depth + 1) != FERRY_OK)
                return FERRY_EINVAL;
            ty = &s->types[t];
            if (!s->types[k].plain)
                plain = false;
            a = s->types[k].plain_align;
            sz = s->types[k].plain_size;
        } else {
            a = sz = prim_size(f->prim);
            if (sz == 0)
                plain = false;
        }
        if (f->arr == A_BOUNDED || f->arr == A_SEQ)
            plain = false;
        if (!plain)
            continue;
        off = round_up(off, a);
        if (f->arr == A_FIXED)
            sz *= f->bound; /* both below 2^30: no overflow */
        if (sz > PLAIN_MAX || off + sz > PLAIN_MAX) {
            plain = false;
            continue;
        }
        off += sz;
        if (a > align)
            align = a;
    }
    if (ty->count == 0)
        off = 1; /* rosidl's structure_needs_at_least_one_member */
    ty->plain = plain;
    ty->plain_align = align;
    ty->plain_size = plain ? round_up(off, align) : 0;
    ty->state = 2;
    return FERRY_OK;
}

void ferry_ros2_schema_free(ferry_ros2_schema *s)
{
    size_t i;

    if (s == NULL)
        return;
    for (i = 0; i < s->ntypes; i++)
        free(s->types[i].name);
    for (i = 0; i < s->nfields; i++) {
        free(s->fields[i].name);
        free(s->fields[i].type_name);
    }
    free(s->types);
    free(s->fields);
    free(s);
}

ferry_err ferry_ros2_schema_parse(const char *type_name, const char *text, size_t size,
                                  ferry_ros2_schema **out, char *why, size_t cap)
{
    parser ps = {NULL, why, cap, 0, NULL, 0};
    const char *p = text, *end = text + size;
    ferry_err err;
    char *top;
    bool oom;

    if (why != NULL && cap > 0)
        why[0] = '\0';
    if (out == NULL)
        return FERRY_EINVAL;
    *out = NULL;
    if (type_name == NULL || (text == NULL && size > 0))
        return failf(&ps, "no type name or text");
    if (size > FERRY_ROS2_DEFINITION_MAX)
        return failf(&ps, "definition over %u bytes", FERRY_ROS2_DEFINITION_MAX);
    ps.s = calloc(1, sizeof *ps.s);
    if (ps.s == NULL)
        return FERRY_ENOMEM;
    top = type_full_name(type_name, strlen(type_name), NULL, 0, &oom);
    if (top == NULL) {
        err = oom ? FERRY_ENOMEM : failf(&ps, "bad type name '%.64s'", type_name);
        goto fail;
    }
    err = new_type(&ps, top);
    while (err == FERRY_OK && p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl != NULL ? nl : end;
        const char *hash = memchr(p, '#', (size_t)(le - p));
        const char *b = p, *e = hash != NULL ? hash : le;

        ps.line++;
        if ((size_t)(le - p) > LINE_MAX_) {
            err = failf(&ps, "line over %u bytes", LINE_MAX_);
            break;
        }
        while (b < e && (space(*b) || *b == '\r'))
            b++;
        while (e > b && (space(e[-1]) || e[-1] == '\r'))
            e--;
        if (memchr(b, '\0', (size_t)(e - b)) != NULL)
            err = failf(&ps, "a NUL byte");
        else if (e > b)
            err = parse_line(&ps, b, (size_t)(e - b));
        p = le + (nl != NULL);
    }
    ps.line = 0;
    if (err == FERRY_OK)
        err = resolve(&ps, 0, 0);
    if (err != FERRY_OK)
        goto fail;
    *out = ps.s;
    return FERRY_OK;
fail:
    ferry_ros2_schema_free(ps.s);
    return err;
}

size_t ferry_ros2_schema_plain_size(const ferry_ros2_schema *s)
{
    return s != NULL && s->ntypes > 0 ? s->types[0].plain_size : 0;
}

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
    size = prim_size(f->prim);
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
    if (is_byte(f->prim)) {
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
    size = f->prim != P_STRUCT ? prim_size(f->prim) : 0;
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
