/*
 * The schemas of ros2_types.h: a ros2msg definition parsed into a table of types and fields
 * (cdr_dynamic.h), with each type's C layout worked out. cdr_walk.c walks one message by a schema,
 * in plain CDR (XCDR1) or in the C layout of a fixed-size type, and converts between the two.
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

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

unsigned ferry__ros2_prim_size(uint8_t prim)
{
    size_t i;

    for (i = 0; i < sizeof prims / sizeof prims[0]; i++)
        if (prims[i].prim == prim)
            return prims[i].size;
    return 0;
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
            a = sz = ferry__ros2_prim_size(f->prim);
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
