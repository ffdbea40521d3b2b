/*
 * Message decoders for `ferry echo --json` and `ferry delay`, and the JSON tree they fill. The
 * message types are src/ros2's kinds, each walked by its members (msg_table.h).
 */
#include "decode.h"

#include <ferry/tensor.h>

#include "msg_table.h"

#include <inttypes.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---------------------------------------------------------------------------------------------
 * JSON trees
 * ------------------------------------------------------------------------------------------- */

void cli_json_init(cli_json *j)
{
    memset(j, 0, sizeof *j);
}

static void drop_nodes(cli_json *j)
{
    size_t i;

    for (i = 0; i < j->count; i++)
        free(j->n[i].text);
    j->count = 0;
}

void cli_json_free(cli_json *j)
{
    drop_nodes(j);
    free(j->n);
    cli_json_init(j);
}

void cli_json_truncate(cli_json *j, size_t count)
{
    size_t i;

    if (count == 0 || count >= j->count)
        return;
    for (i = count; i < j->count; i++)
        free(j->n[i].text);
    j->count = count;
    /* Children are added after their parent and siblings in order, so what is left of a
     * sibling chain is a prefix of it. */
    for (i = 0; i < count; i++) {
        cli_jnode *n = &j->n[i];
        int c;

        if (n->first >= (int)count) {
            n->first = n->last = -1;
        } else if (n->last >= (int)count) {
            for (c = n->first; j->n[c].next >= 0 && j->n[c].next < (int)count; c = j->n[c].next) {
            }
            j->n[c].next = -1;
            n->last = c;
        }
    }
}

static int add_node(cli_json *j, int parent, const char *key, cli_jkind kind, char *text)
{
    cli_jnode *n;
    int id;

    if (j->failed || (parent < 0 && j->count != 0) || j->count >= (size_t)INT32_MAX) {
        j->failed = true;
        free(text);
        return -1;
    }
    if (j->count == j->cap) {
        size_t cap = j->cap ? j->cap * 2 : 64;
        cli_jnode *grown = realloc(j->n, cap * sizeof *grown);

        if (grown == NULL) {
            j->failed = true;
            free(text);
            return -1;
        }
        j->n = grown;
        j->cap = cap;
    }
    id = (int)j->count++;
    n = &j->n[id];
    n->key = key;
    n->kind = kind;
    n->text = text;
    n->first = n->last = n->next = -1;
    if (parent >= 0) {
        cli_jnode *p = &j->n[parent];

        if (p->last >= 0)
            j->n[p->last].next = id;
        else
            p->first = id;
        p->last = id;
    }
    return id;
}

void cli_json_reset(cli_json *j)
{
    drop_nodes(j);
    j->failed = false;
    add_node(j, -1, NULL, CLI_J_OBJECT, NULL);
}

int cli_json_object(cli_json *j, int parent, const char *key)
{
    return add_node(j, parent, key, CLI_J_OBJECT, NULL);
}

int cli_json_array(cli_json *j, int parent, const char *key)
{
    return add_node(j, parent, key, CLI_J_ARRAY, NULL);
}

static char *copy(cli_json *j, const char *s)
{
    size_t n = strlen(s) + 1;
    char *c = malloc(n);

    if (c == NULL)
        j->failed = true;
    else
        memcpy(c, s, n);
    return c;
}

void cli_json_str_owned(cli_json *j, int parent, const char *key, char *value)
{
    if (value == NULL) {
        j->failed = true;
        return;
    }
    add_node(j, parent, key, CLI_J_STRING, value);
}

void cli_json_str(cli_json *j, int parent, const char *key, const char *value)
{
    cli_json_str_owned(j, parent, key, copy(j, value));
}

static void number(cli_json *j, int parent, const char *key, cli_jkind kind, const char *text)
{
    char *c = copy(j, text);

    if (c != NULL)
        add_node(j, parent, key, kind, c);
}

void cli_json_u64(cli_json *j, int parent, const char *key, uint64_t value)
{
    char t[32];

    snprintf(t, sizeof t, "%" PRIu64, value);
    number(j, parent, key, CLI_J_NUMBER, t);
}

void cli_json_i64(cli_json *j, int parent, const char *key, int64_t value)
{
    char t[32];

    snprintf(t, sizeof t, "%" PRId64, value);
    number(j, parent, key, CLI_J_NUMBER, t);
}

void cli_json_real(cli_json *j, int parent, const char *key, double value)
{
    char t[48];

    /* JSON has no nan or inf; such a value is reported as null rather than breaking the line. */
    if (value != value || value > 1e300 || value < -1e300)
        snprintf(t, sizeof t, "null");
    else
        snprintf(t, sizeof t, "%.3f", value);
    number(j, parent, key, CLI_J_NUMBER, t);
}

void cli_json_f64(cli_json *j, int parent, const char *key, double value)
{
    char t[48];
    int digits = 15;

    /* The fewest digits, 15 to 17, that read back as the same double, so calibrations and
     * covariances keep every bit and 64.0 prints as 64. value - value is not 0 for nan and inf,
     * which JSON lacks: null. */
    if (value - value != 0.0) {
        snprintf(t, sizeof t, "null");
    } else {
        do
            snprintf(t, sizeof t, "%.*g", digits, value);
        while (strtod(t, NULL) != value && ++digits <= 17);
    }
    number(j, parent, key, CLI_J_NUMBER, t);
}

void cli_json_f32(cli_json *j, int parent, const char *key, float value)
{
    char t[32];
    int digits = 6;

    if (value - value != 0.0f) {
        snprintf(t, sizeof t, "null");
    } else {
        do
            snprintf(t, sizeof t, "%.*g", digits, (double)value);
        while (strtof(t, NULL) != value && ++digits <= 9);
    }
    number(j, parent, key, CLI_J_NUMBER, t);
}

void cli_json_bool(cli_json *j, int parent, const char *key, bool value)
{
    number(j, parent, key, CLI_J_BOOL, value ? "true" : "false");
}

int cli_json_find(const cli_json *j, int from, const char *path)
{
    const char *seg = path;

    while (from >= 0 && from < (int)j->count) {
        const char *dot = strchr(seg, '.');
        size_t len = dot ? (size_t)(dot - seg) : strlen(seg);
        const cli_jnode *n = &j->n[from];
        int c, index = 0;

        if (n->kind != CLI_J_OBJECT && n->kind != CLI_J_ARRAY)
            return -1;
        for (c = n->first; c >= 0; c = j->n[c].next, index++) {
            const cli_jnode *child = &j->n[c];
            char want[16];

            if (n->kind == CLI_J_OBJECT) {
                if (strlen(child->key) == len && strncmp(child->key, seg, len) == 0)
                    break;
            } else if (len > 0 && len < sizeof want) {
                snprintf(want, sizeof want, "%d", index);
                if (strlen(want) == len && strncmp(want, seg, len) == 0)
                    break;
            }
        }
        if (c < 0)
            return -1;
        if (dot == NULL)
            return c;
        from = c;
        seg = dot + 1;
    }
    return -1;
}

void cli_json_string(FILE *to, const char *s)
{
    fputc('"', to);
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;

        if (c == '"' || c == '\\')
            fprintf(to, "\\%c", c);
        else if (c < 0x20)
            fprintf(to, "\\u%04x", c);
        else
            fputc(c, to);
    }
    fputc('"', to);
}

void cli_json_write(const cli_json *j, int node, FILE *to)
{
    const cli_jnode *n = &j->n[node];
    int c;

    switch (n->kind) {
    case CLI_J_STRING:
        cli_json_string(to, n->text);
        return;
    case CLI_J_NUMBER:
    case CLI_J_BOOL:
        fputs(n->text, to);
        return;
    case CLI_J_OBJECT:
    case CLI_J_ARRAY:
        fputc(n->kind == CLI_J_OBJECT ? '{' : '[', to);
        for (c = n->first; c >= 0; c = j->n[c].next) {
            if (c != n->first)
                fputs(", ", to);
            if (n->kind == CLI_J_OBJECT) {
                cli_json_string(to, j->n[c].key);
                fputs(": ", to);
            }
            cli_json_write(j, c, to);
        }
        fputc(n->kind == CLI_J_OBJECT ? '}' : ']', to);
        return;
    }
}

/* ---------------------------------------------------------------------------------------------
 * Bytes and ROS 2 types known by their definition
 * ------------------------------------------------------------------------------------------- */

#define SUMMARY_BYTES 16 /* of the data's head and tail */
#define JSON_DEPTH_MAX (2 * FERRY_ROS2_DEPTH_MAX + 4)

static void hex_bytes(char *out, const unsigned char *p, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    size_t i;

    for (i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = '\0';
}

void cli_json_bytes(cli_json *j, int parent, const char *key, const void *data, size_t size,
                    bool base64)
{
    const unsigned char *p = data;
    size_t n = size < SUMMARY_BYTES ? size : SUMMARY_BYTES;
    char hex[2 * SUMMARY_BYTES + 1];
    int d = cli_json_object(j, parent, key);

    cli_json_u64(j, d, "bytes", size);
    cli_json_u64(j, d, "crc32", cli_crc32(p, size));
    hex_bytes(hex, p, n);
    cli_json_str(j, d, "head", hex);
    hex_bytes(hex, p + size - n, n);
    cli_json_str(j, d, "tail", hex);
    if (base64)
        cli_json_str_owned(j, d, "base64", cli_base64(p, size));
}

typedef struct ros2_json {
    cli_json *j;
    bool base64;
    int stack[JSON_DEPTH_MAX]; /* the node elements go under, innermost last */
    unsigned depth;
} ros2_json;

static void ros2_json_event(void *arg, const ferry_ros2_event *ev)
{
    ros2_json *r = arg;
    cli_json *j = r->j;
    int parent = r->stack[r->depth - 1], node;
    uint32_t i;

    switch (ev->kind) {
    case FERRY_ROS2_EV_BEGIN_STRUCT:
    case FERRY_ROS2_EV_BEGIN_ARRAY:
        if (ev->kind == FERRY_ROS2_EV_BEGIN_STRUCT) {
            node = cli_json_object(j, parent, ev->key);
        } else if (ev->count > CLI_JSON_ELEMENTS_MAX) {
            node = cli_json_object(j, parent, ev->key);
            cli_json_u64(j, node, "length", ev->count);
            node = cli_json_array(j, node, "head");
        } else {
            node = cli_json_array(j, parent, ev->key);
        }
        if (r->depth == JSON_DEPTH_MAX) { /* the walk's own bound keeps below this */
            j->failed = true;
            return;
        }
        r->stack[r->depth++] = node;
        return;
    case FERRY_ROS2_EV_END_STRUCT:
    case FERRY_ROS2_EV_END_ARRAY:
        if (r->depth > 1)
            r->depth--;
        return;
    case FERRY_ROS2_EV_EMPTY:
        return;
    case FERRY_ROS2_EV_BOOL:
        cli_json_bool(j, parent, ev->key, ev->u != 0);
        return;
    case FERRY_ROS2_EV_INT:
        cli_json_i64(j, parent, ev->key, ev->i);
        return;
    case FERRY_ROS2_EV_UINT:
        cli_json_u64(j, parent, ev->key, ev->u);
        return;
    case FERRY_ROS2_EV_FLOAT32:
        cli_json_f32(j, parent, ev->key, (float)ev->f);
        return;
    case FERRY_ROS2_EV_FLOAT64:
        cli_json_f64(j, parent, ev->key, ev->f);
        return;
    case FERRY_ROS2_EV_STRING:
        cli_json_str(j, parent, ev->key, ev->s);
        return;
    case FERRY_ROS2_EV_BYTES:
        /* Short fixed arrays (a UUID) read as numbers; sequences (the data of an image) and long
         * arrays as echo shows data. */
        if (!ev->fixed || ev->n > CLI_JSON_ELEMENTS_MAX) {
            cli_json_bytes(j, parent, ev->key, ev->p, ev->n, r->base64);
            return;
        }
        node = cli_json_array(j, parent, ev->key);
        for (i = 0; i < ev->n; i++) {
            if (ev->is_signed)
                cli_json_i64(j, node, NULL, (int8_t)ev->p[i]);
            else
                cli_json_u64(j, node, NULL, ev->p[i]);
        }
        return;
    }
}

ferry_ros2_walk_result cli_json_ros2(cli_json *j, int obj, const ferry_ros2_schema *schema,
                                     ferry_ros2_wire wire, const void *buf, size_t size,
                                     bool base64)
{
    ros2_json r;

    r.j = j;
    r.base64 = base64;
    r.stack[0] = obj;
    r.depth = 1;
    return ferry_ros2_walk(schema, wire, buf, size, CLI_JSON_ELEMENTS_MAX, ros2_json_event, &r);
}

/* ---------------------------------------------------------------------------------------------
 * Decoders
 *
 * The ROS 2 kinds walk their members (src/ros2/msg_table.h) over the sample's view: the fields of
 * the ROS 2 message in the message's order, under the names ROS 2 gives them, so that `--field
 * header.stamp` means what it means to `ros2 topic echo`; the bulk is the data, not a field.
 * ------------------------------------------------------------------------------------------- */

static void add_members(cli_json *j, int obj, const ferry_ros2_member *m, uint32_t n,
                        const uint8_t *view);

static void add_one(cli_json *j, int obj, const char *key, const ferry_ros2_member *m,
                    const uint8_t *at)
{
    ferry_dtype dtype;
    uint32_t u32;
    int32_t i32;
    int64_t i64;
    double f64;

    switch (m->type) {
    case FERRY_ROS2_M_BOOL:
        if (m->json & FERRY_ROS2_J_NUMBER)
            cli_json_u64(j, obj, key, *at);
        else
            cli_json_bool(j, obj, key, *at != 0);
        return;
    case FERRY_ROS2_M_U8:
        cli_json_u64(j, obj, key, *at);
        return;
    case FERRY_ROS2_M_I32:
        memcpy(&i32, at, sizeof i32);
        cli_json_i64(j, obj, key, i32);
        return;
    case FERRY_ROS2_M_U32:
        memcpy(&u32, at, sizeof u32);
        cli_json_u64(j, obj, key, u32);
        return;
    case FERRY_ROS2_M_I64:
        memcpy(&i64, at, sizeof i64);
        cli_json_i64(j, obj, key, i64);
        return;
    case FERRY_ROS2_M_F64:
        memcpy(&f64, at, sizeof f64);
        cli_json_f64(j, obj, key, f64);
        return;
    case FERRY_ROS2_M_STRING:
        cli_json_str(j, obj, key, (const char *)at);
        return;
    case FERRY_ROS2_M_DTYPE:
        memcpy(&dtype, at, sizeof dtype);
        cli_json_str(j, obj, key, ferry_dtype_name(dtype));
        return;
    case FERRY_ROS2_M_STRUCT:
        add_members(j, cli_json_object(j, obj, key), m->members, m->nmembers, at);
        return;
    default:
        return;
    }
}

static void add_members(cli_json *j, int obj, const ferry_ros2_member *m, uint32_t n,
                        const uint8_t *view)
{
    uint32_t i, k, count;

    for (i = 0; i < n; i++, m++) {
        const uint8_t *at = view + m->view;
        int a;

        if (m->type == FERRY_ROS2_M_BULK)
            continue;
        if (m->array == FERRY_ROS2_A_NONE) {
            add_one(j, obj, m->name, m, at);
            continue;
        }
        count = m->len;
        if (m->array == FERRY_ROS2_A_SEQ) {
            memcpy(&count, view + m->view_count, sizeof count);
            if (count > m->len) /* a view never has more */
                count = m->len;
        }
        a = cli_json_array(j, obj, m->name);
        for (k = 0; k < count; k++)
            add_one(j, a, NULL, m, at + k * ferry_ros2_elem_size(m, true));
    }
}

/* What a tensor shows beyond its ROS 2 message: its strides. */
static void add_tensor_strides(cli_json *j, int obj, const void *view)
{
    const ferry_tensor_view *v = view;
    int strides = cli_json_array(j, obj, "strides");
    uint32_t i;

    for (i = 0; i < v->header.ndim; i++)
        cli_json_i64(j, strides, NULL, v->header.strides[i]);
}

void cli_msg_decode(const cli_msg_type *t, const ferry_sample *s, cli_msg *m, cli_json *j, int obj)
{
    const ferry_ros2_kind_desc *d = t->kind;
    _Alignas(max_align_t) uint8_t view[FERRY_ROS2_VIEW_MAX];
    const void *data = s->data;
    size_t size = s->size;
    uint32_t i;

    memset(m, 0, sizeof *m);
    if (d == NULL) { /* any other type: the payload as it is */
        m->valid = true;
        m->data = s->data;
        m->data_size = s->size;
        return;
    }
    if (d->view_size > sizeof view || d->view_get(s, view) != FERRY_OK)
        return;
    /* A kind without a bulk (a camera info, an IMU sample) has no data of its own: data covers
     * the whole sample. */
    for (i = 0; i < d->nmembers; i++)
        if (d->members[i].type == FERRY_ROS2_M_BULK) {
            memcpy(&data, view + d->members[i].view, sizeof data);
            memcpy(&size, view + d->members[i].view_count, sizeof size);
        }
    m->valid = m->has_stamp = true;
    memcpy(&m->stamp, view + d->stamp, sizeof m->stamp);
    m->data = data;
    m->data_size = size;
    if (j == NULL)
        return;
    add_members(j, obj, d->members, d->nmembers, view);
    if (d->kind == FERRY_ROS2_TENSOR)
        add_tensor_strides(j, obj, view);
}

/* One type per kind of src/ros2, then the opaque type. */
static cli_msg_type msg_types[FERRY_ROS2_KIND_COUNT_];
static pthread_once_t msg_types_once = PTHREAD_ONCE_INIT;

static void msg_types_init(void)
{
    int k;

    for (k = FERRY_ROS2_NONE + 1; k < FERRY_ROS2_KIND_COUNT_; k++) {
        const ferry_ros2_kind_desc *d = ferry_ros2_kind_desc_of((ferry_ros2_kind)k);

        msg_types[k - 1].name = d->ferry_type;
        msg_types[k - 1].stamped = true; /* every kind has a std_msgs/Header */
        msg_types[k - 1].kind = d;
    }
}

const cli_msg_type *cli_msg_type_find(const char *type_name)
{
    size_t i;

    pthread_once(&msg_types_once, msg_types_init);
    for (i = 0; i + 1 < FERRY_ROS2_KIND_COUNT_; i++)
        if (type_name != NULL && strcmp(type_name, msg_types[i].name) == 0)
            return &msg_types[i];
    return &msg_types[FERRY_ROS2_KIND_COUNT_ - 1];
}

void cli_msg_stamped_names(char *buf, size_t cap)
{
    size_t i, used = 0;

    if (cap == 0)
        return;
    buf[0] = '\0';
    pthread_once(&msg_types_once, msg_types_init);
    for (i = 0; i + 1 < FERRY_ROS2_KIND_COUNT_; i++) {
        int n;

        if (!msg_types[i].stamped)
            continue;
        n = snprintf(buf + used, cap - used, "%s%s", used ? ", " : "", msg_types[i].name);
        if (n < 0 || (size_t)n >= cap - used)
            return;
        used += (size_t)n;
    }
}

/* ---------------------------------------------------------------------------------------------
 * Clocks, checksums, encodings
 * ------------------------------------------------------------------------------------------- */

int64_t cli_stamp_ns(ferry_stamp stamp)
{
    return (int64_t)stamp.sec * 1000000000 + (int64_t)stamp.nanosec;
}

int64_t cli_realtime_ns(void)
{
    struct timespec ts;

    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return 0;
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

uint32_t cli_crc32(const void *p, size_t n)
{
    static uint32_t table[256];
    const unsigned char *b = p;
    uint32_t c = 0xffffffffu;
    size_t i;

    if (table[1] == 0) {
        uint32_t k;

        for (k = 0; k < 256; k++) {
            uint32_t v = k;
            int bit;

            for (bit = 0; bit < 8; bit++)
                v = (v & 1u) ? 0xedb88320u ^ (v >> 1) : v >> 1;
            table[k] = v;
        }
    }
    for (i = 0; i < n; i++)
        c = table[(c ^ b[i]) & 0xffu] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

char *cli_base64(const void *p, size_t n)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *b = p;
    size_t i, o = 0;
    char *out;

    if (n / 3 >= (SIZE_MAX - 5) / 4)
        return NULL;
    out = malloc((n + 2) / 3 * 4 + 1);
    if (out == NULL)
        return NULL;
    for (i = 0; i + 2 < n; i += 3) {
        uint32_t v = (uint32_t)b[i] << 16 | (uint32_t)b[i + 1] << 8 | b[i + 2];

        out[o++] = alphabet[v >> 18];
        out[o++] = alphabet[(v >> 12) & 63];
        out[o++] = alphabet[(v >> 6) & 63];
        out[o++] = alphabet[v & 63];
    }
    if (i < n) {
        uint32_t v = (uint32_t)b[i] << 16 | (i + 1 < n ? (uint32_t)b[i + 1] << 8 : 0);

        out[o++] = alphabet[v >> 18];
        out[o++] = alphabet[(v >> 12) & 63];
        out[o++] = i + 1 < n ? alphabet[(v >> 6) & 63] : '=';
        out[o++] = '=';
    }
    out[o] = '\0';
    return out;
}
