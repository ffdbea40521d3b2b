/*
 * ROS 2 types known by their definition (src/ros2/ros2_types.h): definitions parsed (constants,
 * comments, defaults, nested types by short and full names, every array kind) and refused (unknown
 * types, cycles, nesting too deep, bad suffixes); messages written here by hand in CDR, both byte
 * orders, walked back field by field; then every truncation, corrupted lengths, counts and
 * bounds, another encapsulation and randomly corrupted copies; arrays cut at elements_max; a plain
 * type walked from a real C struct of the same fields and converted to CDR; graph files with D
 * lines found, torn and foreign. Each input lies in a heap block of exactly its size, so that a
 * read past it shows under ASan.
 */
#include "ros2_types.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int failures;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

#define CHECK_STR(got, want)                                                                       \
    do {                                                                                           \
        if (strcmp((got), (want)) != 0) {                                                          \
            fprintf(stderr, "%s:%d: got\n  %s\nwant\n  %s\n", __FILE__, __LINE__, (got), (want));  \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

/* ---------------------------------------------------------------------------------------------
 * The events as compact text: key:value, {...} for structures, [n ... -k] for arrays (n the
 * count, -k the elements left out), bytes as b<hex>.
 * ------------------------------------------------------------------------------------------- */

typedef struct text {
    char buf[8192];
    size_t len;
} text;

static void add(text *t, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(t->buf + t->len, sizeof t->buf - t->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        t->len += (size_t)n < sizeof t->buf - t->len ? (size_t)n : 0;
}

static void on_event(void *arg, const ferry_ros2_event *ev)
{
    text *t = arg;
    size_t i;

    if (ev->key != NULL && ev->kind != FERRY_ROS2_EV_END_STRUCT &&
        ev->kind != FERRY_ROS2_EV_END_ARRAY)
        add(t, "%s:", ev->key);
    switch (ev->kind) {
    case FERRY_ROS2_EV_BEGIN_STRUCT:
        add(t, "{");
        break;
    case FERRY_ROS2_EV_END_STRUCT:
        add(t, "} ");
        break;
    case FERRY_ROS2_EV_BEGIN_ARRAY:
        add(t, "[%" PRIu32 " ", ev->count);
        break;
    case FERRY_ROS2_EV_END_ARRAY:
        add(t, "-%" PRIu32 "] ", ev->count);
        break;
    case FERRY_ROS2_EV_BOOL:
        add(t, "%s ", ev->u ? "true" : "false");
        break;
    case FERRY_ROS2_EV_INT:
        add(t, "%" PRId64 " ", ev->i);
        break;
    case FERRY_ROS2_EV_UINT:
        add(t, "%" PRIu64 " ", ev->u);
        break;
    case FERRY_ROS2_EV_FLOAT32:
    case FERRY_ROS2_EV_FLOAT64:
        add(t, "%g ", ev->f);
        break;
    case FERRY_ROS2_EV_STRING:
        add(t, "'%s' ", ev->s);
        break;
    case FERRY_ROS2_EV_BYTES:
        add(t, "b%s", ev->is_signed ? "s" : "");
        for (i = 0; i < ev->n; i++)
            add(t, "%02x", ev->p[i]);
        add(t, " ");
        break;
    case FERRY_ROS2_EV_EMPTY:
        add(t, "empty ");
        break;
    }
}

/* ---------------------------------------------------------------------------------------------
 * A CDR writer for the tests
 * ------------------------------------------------------------------------------------------- */

typedef struct cdr {
    uint8_t b[4096];
    size_t pos; /* after the header */
    bool be;
} cdr;

static void cdr_begin(cdr *c, bool be)
{
    memset(c, 0, sizeof *c);
    c->be = be;
    c->b[1] = be ? 0 : 1;
}

static void put(cdr *c, uint64_t v, unsigned n)
{
    unsigned i;

    while (c->pos % n != 0)
        c->b[4 + c->pos++] = 0;
    for (i = 0; i < n; i++)
        c->b[4 + c->pos + i] = (uint8_t)(v >> (8 * (c->be ? n - 1 - i : i)));
    c->pos += n;
}

static void put_f64(cdr *c, double d)
{
    uint64_t v;

    memcpy(&v, &d, 8);
    put(c, v, 8);
}

static void put_f32(cdr *c, float f)
{
    uint32_t v;

    memcpy(&v, &f, 4);
    put(c, v, 4);
}

static void put_str(cdr *c, const char *s)
{
    size_t n = strlen(s) + 1;

    put(c, n, 4);
    memcpy(c->b + 4 + c->pos, s, n);
    c->pos += n;
}

static size_t cdr_size(const cdr *c)
{
    return 4 + c->pos;
}

/* A copy of n bytes in a block of exactly n. */
static uint8_t *exact(const void *p, size_t n)
{
    uint8_t *b = malloc(n ? n : 1);

    if (b != NULL && n > 0)
        memcpy(b, p, n);
    return b;
}

static ferry_ros2_walk_result walk(const ferry_ros2_schema *s, ferry_ros2_wire wire, const void *p,
                                   size_t n, uint32_t max, text *t)
{
    uint8_t *b = exact(p, n);
    ferry_ros2_walk_result r;

    if (t != NULL)
        t->len = 0, t->buf[0] = '\0';
    r = ferry_ros2_walk(s, wire, b, n, max, t != NULL ? on_event : NULL, t);
    free(b);
    return r;
}

static ferry_ros2_schema *parse(const char *type, const char *def)
{
    ferry_ros2_schema *s = NULL;
    char why[256];
    ferry_err err = ferry_ros2_schema_parse(type, def, strlen(def), &s, why, sizeof why);

    if (err != FERRY_OK) {
        fprintf(stderr, "parse %s: %s (%s)\n", type, ferry_strerror(err), why);
        failures++;
    }
    return s;
}

static void refused(const char *type, const char *def, const char *why_has)
{
    ferry_ros2_schema *s = NULL;
    char why[256];
    ferry_err err = ferry_ros2_schema_parse(type, def, strlen(def), &s, why, sizeof why);

    if (err != FERRY_EINVAL || s != NULL || strstr(why, why_has) == NULL) {
        fprintf(stderr, "definition of %s: got %s, why '%s'; want FERRY_EINVAL saying '%s'\n", type,
                ferry_strerror(err), why, why_has);
        failures++;
    }
    ferry_ros2_schema_free(s);
}

/* ---------------------------------------------------------------------------------------------
 * Definitions
 * ------------------------------------------------------------------------------------------- */

#define SEP "================================================================================\n"

static const char def_all[] = "# a comment line\n"
                              "int32 FOO=3\n"
                              "string NAME = \"x=y\"   # a constant with blanks\n"
                              "uint8 a 7              # a default value\n"
                              "float64 b\r\n"
                              "string s\n"
                              "int16[3] arr\n"
                              "geometry_msgs/Point[] pts\n"
                              "Inner inner\n"
                              "wstring w\n"
                              "uint8[] data\n"
                              "string<=5 bs\n"
                              "bool[<=2] flags\n"
                              "int8[2] small\n"
                              "float32 f\n" SEP "MSG: geometry_msgs/Point\n"
                              "float64 x\n"
                              "float64 y\n"
                              "float64 z\n" SEP "MSG: test_msgs/msg/Inner\n"
                              "int64 v\n"
                              "Empty e\n" SEP "MSG: test_msgs/Empty\n";

static void write_all(cdr *c, bool be, const char *bs, uint32_t nflags)
{
    cdr_begin(c, be);
    put(c, 200, 1);          /* a */
    put_f64(c, 1.5);         /* b */
    put_str(c, "hello");     /* s */
    put(c, (uint16_t)-1, 2); /* arr */
    put(c, 2, 2);
    put(c, 3, 2);
    put(c, 2, 4); /* pts: 2 */
    put_f64(c, 1), put_f64(c, 2), put_f64(c, 3);
    put_f64(c, 4), put_f64(c, 5), put_f64(c, 6);
    put(c, (uint64_t)-42, 8); /* inner.v */
    put(c, 9, 1);             /* inner.e: its one byte */
    put(c, 3, 4);             /* w: 3 units, a surrogate pair among them */
    put(c, 'h', 4);
    put(c, 0xd83d, 4);
    put(c, 0xde00, 4);
    put(c, 3, 4); /* data */
    put(c, 0xaa, 1), put(c, 0xbb, 1), put(c, 0xcc, 1);
    put_str(c, bs);    /* bs */
    put(c, nflags, 4); /* flags */
    for (uint32_t i = 0; i < nflags; i++)
        put(c, i == 0 ? 1 : 0, 1);
    put(c, 0xff, 1); /* small: -1, 2 */
    put(c, 2, 1);
    put_f32(c, 0.25f); /* f */
}

static const char want_all[] =
    "a:200 b:1.5 s:'hello' arr:[3 -1 2 3 -0] pts:[2 {x:1 y:2 z:3 } {x:4 y:5 z:6 } -0] "
    "inner:{v:-42 e:{empty } } w:'h\xf0\x9f\x98\x80' data:baabbcc bs:'abc' "
    "flags:[1 true -0] small:bsff02 f:0.25 ";

static void test_walk(void)
{
    ferry_ros2_schema *s = parse("test_msgs/msg/All", def_all);
    ferry_ros2_walk_result r;
    cdr le, be, bad;
    text t;
    size_t n, i;

    if (s == NULL)
        return;
    CHECK(ferry_ros2_schema_plain_size(s) == 0);
    write_all(&le, false, "abc", 1);
    write_all(&be, true, "abc", 1);
    r = walk(s, FERRY_ROS2_WIRE_CDR, le.b, cdr_size(&le), 0, &t);
    CHECK(r == FERRY_ROS2_WALK_OK);
    CHECK_STR(t.buf, want_all);
    r = walk(s, FERRY_ROS2_WIRE_CDR, be.b, cdr_size(&be), 0, &t);
    CHECK(r == FERRY_ROS2_WALK_OK);
    CHECK_STR(t.buf, want_all);
    /* Padding after the message is allowed. */
    CHECK(walk(s, FERRY_ROS2_WIRE_CDR, le.b, cdr_size(&le) + 3, 0, NULL) == FERRY_ROS2_WALK_OK);

    /* Every truncation fails (the last field ends the message). */
    n = cdr_size(&le);
    for (i = 0; i < n; i++) {
        r = walk(s, FERRY_ROS2_WIRE_CDR, le.b, i, 0, NULL);
        if (r != FERRY_ROS2_WALK_MALFORMED) {
            fprintf(stderr, "a message cut to %zu of %zu bytes: result %d\n", i, n, (int)r);
            failures++;
        }
    }
    /* Bounds: a string<=5 of 6 characters, a bool[<=2] of 3. */
    write_all(&bad, false, "abcdef", 1);
    CHECK(walk(s, FERRY_ROS2_WIRE_CDR, bad.b, cdr_size(&bad), 0, NULL) ==
          FERRY_ROS2_WALK_MALFORMED);
    write_all(&bad, false, "abcde", 3);
    CHECK(walk(s, FERRY_ROS2_WIRE_CDR, bad.b, cdr_size(&bad), 0, NULL) ==
          FERRY_ROS2_WALK_MALFORMED);
    write_all(&bad, false, "abcde", 2);
    CHECK(walk(s, FERRY_ROS2_WIRE_CDR, bad.b, cdr_size(&bad), 0, NULL) == FERRY_ROS2_WALK_OK);
    /* The string s (at offset 16 after the header: a, pad, b) without its NUL, with a length
     * past the end, and of length 0 (read as empty, as rmw_cyclonedds reads it, which shifts
     * what follows: malformed here). */
    bad = le;
    bad.b[4 + 16 + 4 + 5] = 'x';
    CHECK(walk(s, FERRY_ROS2_WIRE_CDR, bad.b, cdr_size(&bad), 0, NULL) ==
          FERRY_ROS2_WALK_MALFORMED);
    bad = le;
    bad.b[4 + 16 + 3] = 0x7f;
    CHECK(walk(s, FERRY_ROS2_WIRE_CDR, bad.b, cdr_size(&bad), 0, NULL) ==
          FERRY_ROS2_WALK_MALFORMED);
    /* The count of pts (offset 32) huge: refused before any element is walked. */
    bad = le;
    memset(bad.b + 4 + 32, 0xff, 4);
    CHECK(walk(s, FERRY_ROS2_WIRE_CDR, bad.b, cdr_size(&bad), 0, NULL) ==
          FERRY_ROS2_WALK_MALFORMED);
    /* Other encapsulations. */
    bad = le;
    bad.b[1] = 7; /* D_CDR2_LE */
    CHECK(walk(s, FERRY_ROS2_WIRE_CDR, bad.b, cdr_size(&bad), 0, NULL) ==
          FERRY_ROS2_WALK_UNSUPPORTED);
    CHECK(walk(s, FERRY_ROS2_WIRE_CDR, le.b, 3, 0, NULL) == FERRY_ROS2_WALK_MALFORMED);
    /* The C layout of a type with strings does not exist. */
    CHECK(walk(s, FERRY_ROS2_WIRE_PLAIN, le.b, cdr_size(&le), 0, NULL) ==
          FERRY_ROS2_WALK_MALFORMED);

    /* Random corruption: anything may come out, nothing may be read outside the input. */
    srand(7);
    for (i = 0; i < 20000; i++) {
        bad = (i & 1) ? be : le;
        n = cdr_size(&bad);
        for (int k = rand() % 4; k >= 0; k--)
            bad.b[4 + (size_t)rand() % (n - 4)] = (uint8_t)rand();
        walk(s, FERRY_ROS2_WIRE_CDR, bad.b, n - (size_t)(rand() % 3), (uint32_t)(rand() % 3), &t);
    }
    ferry_ros2_schema_free(s);
}

/* Long arrays: the first elements_max are sent, the rest walked and counted. */
static void test_elements_max(void)
{
    ferry_ros2_schema *s = parse("test_msgs/Long", "float32[] v\nstring[] names\nuint8 end\n");
    cdr c;
    text t;
    int i;

    if (s == NULL)
        return;
    cdr_begin(&c, false);
    put(&c, 100, 4);
    for (i = 0; i < 100; i++)
        put_f32(&c, (float)i);
    put(&c, 5, 4);
    for (i = 0; i < 5; i++)
        put_str(&c, i == 4 ? "last" : "n");
    put(&c, 77, 1);
    CHECK(walk(s, FERRY_ROS2_WIRE_CDR, c.b, cdr_size(&c), 2, &t) == FERRY_ROS2_WALK_OK);
    CHECK_STR(t.buf, "v:[100 0 1 -98] names:[5 'n' 'n' -3] end:77 ");
    CHECK(walk(s, FERRY_ROS2_WIRE_CDR, c.b, cdr_size(&c), 0, &t) == FERRY_ROS2_WALK_OK);
    CHECK(strstr(t.buf, "'last' -0] end:77 ") != NULL);
    /* A bad string among the ones left out is still found. */
    c.b[cdr_size(&c) - 2] = 'X'; /* the NUL of "last" */
    CHECK(walk(s, FERRY_ROS2_WIRE_CDR, c.b, cdr_size(&c), 2, &t) == FERRY_ROS2_WALK_MALFORMED);
    ferry_ros2_schema_free(s);
}

/* ---------------------------------------------------------------------------------------------
 * Plain types: the C layout
 * ------------------------------------------------------------------------------------------- */

struct inner_c {
    uint16_t c;
    uint8_t d;
};

struct plain_c {
    uint8_t a;
    double b;
    struct inner_c in[2];
    int32_t e[2];
    bool flag;
    uint8_t empty; /* an empty message's one byte */
    float f;
    int8_t tail;
};

static const char def_plain[] = "uint8 a\n"
                                "float64 b\n"
                                "Inner[2] in\n"
                                "int32[2] e\n"
                                "bool flag\n"
                                "std_msgs/Empty empty\n"
                                "float32 f\n"
                                "int8 tail\n" SEP "MSG: test_msgs/Inner\n"
                                "uint16 c\n"
                                "uint8 d\n" SEP "MSG: std_msgs/Empty\n";

static void test_plain(void)
{
    ferry_ros2_schema *s = parse("test_msgs/msg/Plain", def_plain), *e;
    struct plain_c m;
    uint8_t out[256];
    size_t out_size = 0;
    text t, t2;
    cdr c;

    if (s == NULL)
        return;
    CHECK(ferry_ros2_schema_plain_size(s) == sizeof m);
    memset(&m, 0xee, sizeof m); /* padding is not read */
    m.a = 1;
    m.b = -2.5;
    m.in[0].c = 300, m.in[0].d = 4;
    m.in[1].c = 5, m.in[1].d = 6;
    m.e[0] = -7, m.e[1] = 8;
    m.flag = true;
    m.empty = 0;
    m.f = 0.5f;
    m.tail = -9;
    CHECK(walk(s, FERRY_ROS2_WIRE_PLAIN, &m, sizeof m, 0, &t) == FERRY_ROS2_WALK_OK);
    CHECK_STR(t.buf, "a:1 b:-2.5 in:[2 {c:300 d:4 } {c:5 d:6 } -0] e:[2 -7 8 -0] flag:true "
                     "empty:{empty } f:0.5 tail:-9 ");
    /* Only its exact size is a message of it. */
    CHECK(walk(s, FERRY_ROS2_WIRE_PLAIN, &m, sizeof m - 1, 0, NULL) == FERRY_ROS2_WALK_MALFORMED);
    memcpy(out, &m, sizeof m);
    CHECK(walk(s, FERRY_ROS2_WIRE_PLAIN, out, sizeof m + 1, 0, NULL) == FERRY_ROS2_WALK_MALFORMED);
    /* Converted to CDR, it reads the same; CDR packs it tighter (no structure padding). */
    CHECK(ferry_ros2_plain_to_cdr(s, &m, sizeof m, out, sizeof out, &out_size) == FERRY_OK);
    CHECK(out_size > 4 && out_size <= sizeof m + 4 && out[1] == 1);
    CHECK(walk(s, FERRY_ROS2_WIRE_CDR, out, out_size, 0, &t2) == FERRY_ROS2_WALK_OK);
    CHECK_STR(t2.buf, t.buf);
    /* The same bytes written by hand. */
    cdr_begin(&c, false);
    put(&c, 1, 1);
    put_f64(&c, -2.5);
    put(&c, 300, 2), put(&c, 4, 1), put(&c, 5, 2), put(&c, 6, 1);
    put(&c, (uint32_t)-7, 4), put(&c, 8, 4);
    put(&c, 1, 1), put(&c, 0, 1);
    put_f32(&c, 0.5f);
    put(&c, 0xf7, 1);
    CHECK(out_size == cdr_size(&c) && memcmp(out, c.b, out_size) == 0);
    CHECK(ferry_ros2_plain_to_cdr(s, &m, sizeof m, out, 8, &out_size) == FERRY_EINVAL);
    /* And back: the same fields at their C places, the padding zero (a sender's 0xee gone). */
    {
        struct plain_c back, want;
        uint8_t big[256];

        memset(&want, 0, sizeof want);
        want.a = m.a, want.b = m.b;
        want.in[0].c = m.in[0].c, want.in[0].d = m.in[0].d;
        want.in[1].c = m.in[1].c, want.in[1].d = m.in[1].d;
        want.e[0] = m.e[0], want.e[1] = m.e[1], want.flag = m.flag, want.empty = m.empty;
        want.f = m.f, want.tail = m.tail;
        memset(&back, 0xee, sizeof back);
        CHECK(ferry_ros2_cdr_to_plain(s, out, out_size, &back, sizeof back) == FERRY_ROS2_WALK_OK);
        CHECK(memcmp(&back, &want, sizeof back) == 0);
        /* Big-endian CDR converts to the host's order. */
        cdr_begin(&c, true);
        put(&c, 1, 1);
        put_f64(&c, -2.5);
        put(&c, 300, 2), put(&c, 4, 1), put(&c, 5, 2), put(&c, 6, 1);
        put(&c, (uint32_t)-7, 4), put(&c, 8, 4);
        put(&c, 1, 1), put(&c, 0, 1);
        put_f32(&c, 0.5f);
        put(&c, 0xf7, 1);
        memset(&back, 0, sizeof back);
        CHECK(ferry_ros2_cdr_to_plain(s, c.b, cdr_size(&c), &back, sizeof back) ==
              FERRY_ROS2_WALK_OK);
        CHECK(memcmp(&back, &want, sizeof back) == 0);
        /* Truncated, or into a buffer of another size: refused. */
        CHECK(ferry_ros2_cdr_to_plain(s, out, out_size - 1, &back, sizeof back) ==
              FERRY_ROS2_WALK_MALFORMED);
        CHECK(ferry_ros2_cdr_to_plain(s, out, out_size, big, sizeof back + 1) ==
              FERRY_ROS2_WALK_MALFORMED);
    }
    ferry_ros2_schema_free(s);

    /* An empty message: one byte in either form. */
    e = parse("std_msgs/msg/Empty", "");
    if (e != NULL) {
        uint8_t one = 0, cdr_one[5] = {0, 1, 0, 0, 0};

        CHECK(ferry_ros2_schema_plain_size(e) == 1);
        CHECK(walk(e, FERRY_ROS2_WIRE_PLAIN, &one, 1, 0, &t) == FERRY_ROS2_WALK_OK);
        CHECK(walk(e, FERRY_ROS2_WIRE_CDR, cdr_one, 5, 0, &t) == FERRY_ROS2_WALK_OK);
        CHECK(walk(e, FERRY_ROS2_WIRE_CDR, cdr_one, 4, 0, &t) == FERRY_ROS2_WALK_MALFORMED);
        one = 9;
        CHECK(ferry_ros2_cdr_to_plain(e, cdr_one, 5, &one, 1) == FERRY_ROS2_WALK_OK && one == 0);
        ferry_ros2_schema_free(e);
    }
}

static void test_refused(void)
{
    char deep[8192];
    size_t n = 0;
    int i;

    refused("test_msgs/msg/A", "Nope x\n", "no definition of test_msgs/Nope");
    refused("test_msgs/msg/A",
            "B b\n" SEP "MSG: test_msgs/B\nA a\n" SEP "MSG: test_msgs/A\nint8 x\n",
            "defined twice");
    refused("test_msgs/msg/A",
            "B b\n" SEP "MSG: test_msgs/B\nC[2] c\n" SEP "MSG: test_msgs/C\nB b\n",
            "contains itself");
    refused("test_msgs/msg/A", "int8[0] x\n", "bad array size");
    refused("test_msgs/msg/A", "int8[x] x\n", "bad array size");
    refused("test_msgs/msg/A", "int8[<=] x\n", "bad sequence bound");
    refused("test_msgs/msg/A", "int8[3 x\n", "bad array suffix");
    refused("test_msgs/msg/A", "int8<=3 x\n", "a bound on a type other than string");
    refused("test_msgs/msg/A", "string<=0 x\n", "bad string bound");
    refused("test_msgs/msg/A", "int8\n", "no field name");
    refused("test_msgs/msg/A", "int8 9x\n", "bad field name");
    refused("test_msgs/msg/A", "a/b/c x\n", "unknown type");
    refused("test_msgs/msg/A", "MSG: \n", "bad type name after MSG:");
    refused("not a type", "int8 x\n", "bad type name");
    /* 40 types, each holding the next: nesting beyond the bound. */
    for (i = 0; i < 40; i++)
        n += (size_t)snprintf(deep + n, sizeof deep - n, "%sMSG: p/T%d\nT%d t\n",
                              i ? SEP : "T0 t\n" SEP, i, i + 1);
    snprintf(deep + n, sizeof deep - n, SEP "MSG: p/T40\nint8 x\n");
    refused("p/msg/Top", deep, "nested more than");
}

/* ---------------------------------------------------------------------------------------------
 * Graph files
 * ------------------------------------------------------------------------------------------- */

static uint64_t fnv(const char *p, size_t n)
{
    uint64_t h = 14695981039346656037ull;

    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)p[i];
        h *= 1099511628211ull;
    }
    return h;
}

static size_t graph_file(char *out, size_t cap, const char *body)
{
    int n = snprintf(out, cap, "ferry-ros2-graph 1 %zu %016" PRIx64 "\n%s", strlen(body),
                     fnv(body, strlen(body)), body);

    return n > 0 ? (size_t)n : 0;
}

static const char graph_body[] = "ctx 1234 /\n"
                                 "N 1 / talker\n"
                                 "P 2 1 /chatter std_msgs/msg/String 00 1 10 1 2 0 0 1 0\n"
                                 "D std_msgs/msg/String 00000000000000ab cdr string%20data%0A\n"
                                 "D std_msgs/msg/String 00000000000000ac cdr bad%2\n"
                                 "D test_msgs/msg/P 0123456789abcdef plain uint8%20a%0A%25%0D\n"
                                 "D test_msgs/msg/Q 0000000000000001 xcdr2 uint8%20a%0A\n";

static void test_graph(void)
{
    char file[2048], dir[] = "/tmp/ferry-cdr-dynamic-XXXXXX", path[512];
    ferry_ros2_type_info info;
    size_t n = graph_file(file, sizeof file, graph_body);
    FILE *f;

    CHECK(ferry_ros2_graph_find(file, n, "std_msgs/msg/String", 0xab, &info) == FERRY_OK);
    CHECK(info.wire == FERRY_ROS2_WIRE_CDR && info.hash == 0xab);
    CHECK(info.definition != NULL && strcmp(info.definition, "string data\n") == 0);
    ferry_ros2_type_info_free(&info);
    CHECK(info.definition == NULL);
    CHECK(ferry_ros2_graph_find(file, n, "test_msgs/msg/P", 0x0123456789abcdefull, &info) ==
          FERRY_OK);
    CHECK(info.wire == FERRY_ROS2_WIRE_PLAIN && info.definition_size == 10 &&
          memcmp(info.definition, "uint8 a\n%\r", 10) == 0);
    ferry_ros2_type_info_free(&info);
    /* Another hash, a bad escape, an unknown encoding, a prefix of a name: not found. */
    CHECK(ferry_ros2_graph_find(file, n, "std_msgs/msg/String", 0xad, &info) == FERRY_EAGAIN);
    CHECK(ferry_ros2_graph_find(file, n, "std_msgs/msg/String", 0xac, &info) == FERRY_EAGAIN);
    CHECK(ferry_ros2_graph_find(file, n, "test_msgs/msg/Q", 1, &info) == FERRY_EAGAIN);
    CHECK(ferry_ros2_graph_find(file, n, "std_msgs/msg/Str", 0xab, &info) == FERRY_EAGAIN);
    CHECK(info.definition == NULL);
    /* Torn (the checksum fails), cut, foreign. */
    file[n - 3] ^= 1;
    CHECK(ferry_ros2_graph_find(file, n, "std_msgs/msg/String", 0xab, &info) == FERRY_EPROTO);
    file[n - 3] ^= 1;
    CHECK(ferry_ros2_graph_find(file, n - 1, "std_msgs/msg/String", 0xab, &info) == FERRY_EPROTO);
    CHECK(ferry_ros2_graph_find("hello\n", 6, "std_msgs/msg/String", 0xab, &info) == FERRY_EPROTO);
    for (size_t i = 0; i < n; i++) {
        char *cut = (char *)exact(file, i);

        ferry_ros2_graph_find(cut, i, "std_msgs/msg/String", 0xab, &info);
        ferry_ros2_type_info_free(&info);
        free(cut);
    }

    /* In a domain directory: a foreign file and a good one. */
    if (mkdtemp(dir) == NULL) {
        fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
        failures++;
        return;
    }
    CHECK(ferry_ros2_type_find(dir, "std_msgs/msg/String", 0xab, &info) == FERRY_EAGAIN);
    snprintf(path, sizeof path, "%s/.ros2", dir);
    CHECK(mkdir(path, 0700) == 0);
    snprintf(path, sizeof path, "%s/.ros2/1.aaaa.graph", dir);
    f = fopen(path, "w");
    CHECK(f != NULL);
    if (f != NULL)
        fputs("not a graph file\n", f), fclose(f);
    CHECK(ferry_ros2_type_find(dir, "std_msgs/msg/String", 0xab, &info) == FERRY_EAGAIN);
    snprintf(path, sizeof path, "%s/.ros2/2.bbbb.graph", dir);
    f = fopen(path, "w");
    CHECK(f != NULL);
    if (f != NULL)
        fwrite(file, 1, n, f), fclose(f);
    CHECK(ferry_ros2_type_find(dir, "std_msgs/msg/String", 0xab, &info) == FERRY_OK);
    CHECK(info.definition != NULL && strcmp(info.definition, "string data\n") == 0);
    ferry_ros2_type_info_free(&info);
    unlink(path);
    snprintf(path, sizeof path, "%s/.ros2/1.aaaa.graph", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/.ros2", dir);
    rmdir(path);
    rmdir(dir);
}

int main(void)
{
    test_walk();
    test_elements_max();
    test_plain();
    test_refused();
    test_graph();
    if (failures != 0) {
        fprintf(stderr, "cdr_dynamic_test: %d check(s) failed\n", failures);
        return 1;
    }
    printf("cdr_dynamic_test: passed\n");
    return 0;
}
