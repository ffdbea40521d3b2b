/*
 * ROS 2 types the bridge knows by their definition only: the topics of rmw_ferry_cpp's nodes,
 * whatever their message type. Such a topic travels in ferry as rmw_ferry_cpp sends it (plain
 * CDR, or a fixed-size type as its C struct lies in memory) and on DDS as rmw_cyclonedds sends
 * it (plain CDR, type "pkg::msg::dds_::Name_"), so the bridge carries its bytes: no type support,
 * no IDL. What it needs of a type comes from the description rmw_ferry_cpp's nodes leave in the
 * domain's graph files (src/ros2/ros2_types.h): the wire form and the definition, from which the
 * bytes are checked in both directions and a fixed-size type is converted.
 *
 * Cyclone is handed the bytes through a sertype of its own (serialised data only: it never
 * deserialises a sample, and a sample is never built from a C structure): a sample written is
 * copied once into a serdata, a sample received is one as Cyclone reassembled it, read in place.
 *
 * Concurrency: the bridge's thread; the serdata functions run on Cyclone's threads too and touch
 * only the serdata they are given.
 */
#include "bridge_internal.h"

/* Cyclone's atomics header writes the GNU keyword "asm", which strict C11 does not have. */
#define asm __asm__
#include <dds/ddsi/ddsi_serdata.h>
#include <dds/ddsi/ddsi_sertype.h>
#include <dds/ddsi/q_radmin.h>
#undef asm

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * Type names
 * ------------------------------------------------------------------------------------------- */

static bool name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* "pkg/msg/Name" -> "pkg::msg::dds_::Name_"; false for a name that is not a message type's. */
bool ferry__bridge_dds_type_of(const char *ros, char *out, size_t cap)
{
    const char *name = strrchr(ros, '/'), *msg = strstr(ros, "/msg/");
    size_t o = 0, i;

    if (name == NULL || msg == NULL || msg + 4 != name || msg == ros || name[1] == '\0')
        return false;
    for (i = 0; ros[i] != '\0'; i++) {
        if (ros + i == name) {
            if (o + 8 >= cap)
                return false;
            memcpy(out + o, "::dds_::", 8);
            o += 8;
        } else if (ros[i] == '/') {
            if (o + 2 >= cap)
                return false;
            out[o++] = ':';
            out[o++] = ':';
        } else {
            if (!name_char(ros[i]) || o + 1 >= cap)
                return false;
            out[o++] = ros[i];
        }
    }
    if (o + 2 > cap)
        return false;
    out[o++] = '_';
    out[o] = '\0';
    return true;
}

/* "pkg::msg::dds_::Name_" -> "pkg/msg/Name"; false for another form (a service's types,
 * types of other DDS applications). */
bool ferry__bridge_ros_type_of(const char *dds, char *out, size_t cap)
{
    const char *mid = strstr(dds, "::msg::dds_::");
    size_t len = strlen(dds), o = 0, i;

    if (mid == NULL || mid == dds || len < 2 || dds[len - 1] != '_' || len >= cap ||
        strstr(mid + 13, "::") != NULL || mid + 13 >= dds + len - 1)
        return false;
    for (i = 0; dds + i < mid; i++) {
        if (dds[i] == ':' && dds[i + 1] == ':') {
            out[o++] = '/';
            i++;
        } else if (name_char(dds[i])) {
            out[o++] = dds[i];
        } else {
            return false;
        }
    }
    memcpy(out + o, "/msg/", 5);
    o += 5;
    for (i = (size_t)(mid + 13 - dds); i < len - 1; i++) {
        if (!name_char(dds[i]))
            return false;
        out[o++] = dds[i];
    }
    out[o] = '\0';
    return true;
}

const char *ferry__bridge_route_type(ferry_ros2_kind kind, const raw_type *raw)
{
    return raw != NULL ? raw->ros_name : ferry__bridge_ferry_type(kind);
}

/* ---------------------------------------------------------------------------------------------
 * Serialised data for Cyclone
 * ------------------------------------------------------------------------------------------- */

/* What dds_write and dds_take would exchange with this sertype (the bridge uses neither). */
typedef struct raw_sample {
    void *data;
    size_t size;
} raw_sample;

typedef struct raw_serdata {
    struct ddsi_serdata c;
    size_t size;         /* with the encapsulation header and the padding to 4 */
    unsigned char *data; /* = bytes, or NULL for a key-only serdata */
    unsigned char bytes[];
} raw_serdata;

/* A serdata of size bytes (padded with zeros to a multiple of 4, as DDSI sends them), filled
 * by the caller; NULL when out of memory. */
static raw_serdata *serdata_new(const struct ddsi_sertype *type, enum ddsi_serdata_kind kind,
                                size_t size)
{
    size_t padded = kind == SDK_DATA ? (size + 3) & ~(size_t)3 : 0;
    raw_serdata *d;

    if (padded < size || padded > UINT32_MAX)
        return NULL;
    d = malloc(sizeof *d + padded);
    if (d == NULL)
        return NULL;
    memset(d, 0, sizeof *d);
    ddsi_serdata_init(&d->c, type, kind);
    d->size = padded;
    d->data = padded ? d->bytes : NULL;
    if (padded > size)
        memset(d->bytes + size, 0, padded - size);
    return d;
}

static uint32_t serdata_size(const struct ddsi_serdata *dc)
{
    return (uint32_t)((const raw_serdata *)dc)->size;
}

static void serdata_free(struct ddsi_serdata *dc)
{
    free(dc);
}

static struct ddsi_serdata *serdata_from_ser(const struct ddsi_sertype *type,
                                             enum ddsi_serdata_kind kind,
                                             const struct nn_rdata *frag, size_t size)
{
    raw_serdata *d = serdata_new(type, kind, size);
    size_t off = 0;

    if (d == NULL)
        return NULL;
    /* The fragments in order, overlapping where they were resent: each adds what lies past the
     * bytes copied so far. */
    for (; frag != NULL && off < size; frag = frag->nextfrag) {
        if (frag->maxp1 > off && frag->min <= off) {
            const unsigned char *payload =
                NN_RMSG_PAYLOADOFF(frag->rmsg, NN_RDATA_PAYLOAD_OFF(frag));
            size_t end = frag->maxp1 < size ? frag->maxp1 : size;

            memcpy(d->bytes + off, payload + (off - frag->min), end - off);
            off = end;
        }
    }
    if (off != size && kind == SDK_DATA) {
        free(d);
        return NULL;
    }
    return &d->c;
}

static struct ddsi_serdata *serdata_from_ser_iov(const struct ddsi_sertype *type,
                                                 enum ddsi_serdata_kind kind,
                                                 ddsrt_msg_iovlen_t niov, const ddsrt_iovec_t *iov,
                                                 size_t size)
{
    raw_serdata *d = serdata_new(type, kind, size);
    size_t off = 0;
    ddsrt_msg_iovlen_t i;

    if (d == NULL)
        return NULL;
    for (i = 0; i < niov && kind == SDK_DATA; i++) {
        size_t n = iov[i].iov_len < size - off ? iov[i].iov_len : size - off;

        memcpy(d->bytes + off, iov[i].iov_base, n);
        off += n;
    }
    return &d->c;
}

static struct ddsi_serdata *serdata_from_keyhash(const struct ddsi_sertype *type,
                                                 const struct ddsi_keyhash *keyhash)
{
    raw_serdata *d = serdata_new(type, SDK_KEY, 0);

    (void)keyhash; /* ROS 2 types have no key */
    return d != NULL ? &d->c : NULL;
}

static struct ddsi_serdata *serdata_from_sample(const struct ddsi_sertype *type,
                                                enum ddsi_serdata_kind kind, const void *sample)
{
    const raw_sample *s = sample;
    raw_serdata *d = serdata_new(type, kind, kind == SDK_DATA ? s->size : 0);

    if (d == NULL)
        return NULL;
    if (kind == SDK_DATA)
        memcpy(d->bytes, s->data, s->size);
    return &d->c;
}

static void serdata_to_ser(const struct ddsi_serdata *dc, size_t off, size_t sz, void *buf)
{
    memcpy(buf, ((const raw_serdata *)dc)->bytes + off, sz);
}

static struct ddsi_serdata *serdata_to_ser_ref(const struct ddsi_serdata *dc, size_t off, size_t sz,
                                               ddsrt_iovec_t *ref)
{
    ref->iov_base = ((raw_serdata *)(uintptr_t)dc)->bytes + off;
    ref->iov_len = (ddsrt_iov_len_t)sz;
    return ddsi_serdata_ref(dc);
}

static void serdata_to_ser_unref(struct ddsi_serdata *dc, const ddsrt_iovec_t *ref)
{
    (void)ref;
    ddsi_serdata_unref(dc);
}

static bool serdata_to_sample(const struct ddsi_serdata *dc, void *sample, void **bufptr,
                              void *buflim)
{
    (void)dc, (void)sample, (void)bufptr, (void)buflim;
    return false; /* samples are read as serialised data only (dds_takecdr) */
}

static struct ddsi_serdata *serdata_to_untyped(const struct ddsi_serdata *dc)
{
    raw_serdata *d = serdata_new(dc->type, SDK_KEY, 0);

    if (d == NULL)
        return NULL;
    d->c.type = NULL;
    return &d->c;
}

static bool serdata_untyped_to_sample(const struct ddsi_sertype *type,
                                      const struct ddsi_serdata *dc, void *sample, void **bufptr,
                                      void *buflim)
{
    (void)type, (void)dc, (void)sample, (void)bufptr, (void)buflim;
    return true; /* no key: nothing to fill */
}

static bool serdata_eqkey(const struct ddsi_serdata *a, const struct ddsi_serdata *b)
{
    (void)a, (void)b;
    return true; /* one instance: no key */
}

static size_t serdata_print(const struct ddsi_sertype *type, const struct ddsi_serdata *dc,
                            char *buf, size_t size)
{
    int n = snprintf(buf, size, "%s: %zu bytes", type->type_name, ((const raw_serdata *)dc)->size);

    return n < 0 ? 0 : (size_t)n;
}

static void serdata_get_keyhash(const struct ddsi_serdata *dc, struct ddsi_keyhash *buf,
                                bool force_md5)
{
    (void)dc, (void)force_md5;
    memset(buf, 0, sizeof *buf);
}

static const struct ddsi_serdata_ops serdata_ops = {
    .eqkey = serdata_eqkey,
    .get_size = serdata_size,
    .from_ser = serdata_from_ser,
    .from_ser_iov = serdata_from_ser_iov,
    .from_keyhash = serdata_from_keyhash,
    .from_sample = serdata_from_sample,
    .to_ser = serdata_to_ser,
    .to_ser_ref = serdata_to_ser_ref,
    .to_ser_unref = serdata_to_ser_unref,
    .to_sample = serdata_to_sample,
    .to_untyped = serdata_to_untyped,
    .untyped_to_sample = serdata_untyped_to_sample,
    .free = serdata_free,
    .print = serdata_print,
    .get_keyhash = serdata_get_keyhash,
};

static void sertype_free(struct ddsi_sertype *tp)
{
    ddsi_sertype_fini(tp);
    free(tp);
}

static void sertype_zero_samples(const struct ddsi_sertype *tp, void *samples, size_t count)
{
    (void)tp;
    memset(samples, 0, count * sizeof(raw_sample));
}

static void sertype_realloc_samples(void **ptrs, const struct ddsi_sertype *tp, void *old,
                                    size_t oldcount, size_t count)
{
    raw_sample *s = realloc(old, count * sizeof *s);
    size_t i;

    (void)tp;
    if (s != NULL && count > oldcount)
        memset(s + oldcount, 0, (count - oldcount) * sizeof *s);
    for (i = 0; i < count && s != NULL; i++)
        ptrs[i] = &s[i];
}

static void sertype_free_samples(const struct ddsi_sertype *tp, void **ptrs, size_t count,
                                 dds_free_op_t op)
{
    (void)tp, (void)count;
    if ((op & DDS_FREE_ALL_BIT) && count > 0)
        free(ptrs[0]);
}

static bool sertype_equal(const struct ddsi_sertype *a, const struct ddsi_sertype *b)
{
    (void)a, (void)b;
    return true; /* Cyclone compares the type names and the ops already */
}

static uint32_t sertype_hash(const struct ddsi_sertype *tp)
{
    (void)tp;
    return 0x72617721u;
}

static size_t sertype_serialized_size(const struct ddsi_sertype *tp, const void *sample)
{
    (void)tp;
    return ((const raw_sample *)sample)->size;
}

static bool sertype_serialize_into(const struct ddsi_sertype *tp, const void *sample, void *dst,
                                   size_t dst_size)
{
    const raw_sample *s = sample;

    (void)tp;
    if (dst_size < s->size)
        return false;
    memcpy(dst, s->data, s->size);
    return true;
}

static const struct ddsi_sertype_ops sertype_ops = {
    .version = ddsi_sertype_v0,
    .arg = NULL,
    .free = sertype_free,
    .zero_samples = sertype_zero_samples,
    .realloc_samples = sertype_realloc_samples,
    .free_samples = sertype_free_samples,
    .equal = sertype_equal,
    .hash = sertype_hash,
    /* no type information: DDS matches by type name, as with rmw_cyclonedds's own writers */
    .type_id = NULL,
    .type_map = NULL,
    .type_info = NULL,
    .derive_sertype = NULL,
    .get_serialized_size = sertype_serialized_size,
    .serialize_into = sertype_serialize_into,
};

/* ---------------------------------------------------------------------------------------------
 * Types and topics
 * ------------------------------------------------------------------------------------------- */

ferry_err ferry__bridge_raw_open(ferry_bridge *b, const char *ros_name, uint64_t hash,
                                 raw_type **out)
{
    ferry_ros2_type_info info;
    char why[160];
    raw_type *t;
    ferry_err err;

    *out = NULL;
    t = calloc(1, sizeof *t);
    if (t == NULL)
        return FERRY_ENOMEM;
    if (strlen(ros_name) >= sizeof t->ros_name ||
        !ferry__bridge_dds_type_of(ros_name, t->dds_name, sizeof t->dds_name)) {
        free(t);
        return FERRY_EINVAL;
    }
    strcpy(t->ros_name, ros_name);
    err = ferry_ros2_type_find(ferry_node_dir(b->node), ros_name, hash, &info);
    if (err != FERRY_OK) {
        free(t);
        return err;
    }
    t->hash = info.hash;
    t->wire = info.wire;
    err = ferry_ros2_schema_parse(ros_name, info.definition, info.definition_size, &t->schema, why,
                                  sizeof why);
    ferry_ros2_type_info_free(&info);
    if (err != FERRY_OK) {
        ferry__bridge_log(b, FERRY_LOG_WARN,
                          "%s: its description in the graph files is not "
                          "usable: %s",
                          ros_name, why);
        free(t);
        return err;
    }
    t->plain_size = ferry_ros2_schema_plain_size(t->schema);
    if (t->wire == FERRY_ROS2_WIRE_PLAIN) {
        if (t->plain_size == 0) {
            ferry__bridge_log(b, FERRY_LOG_WARN,
                              "%s: described as fixed-size, but its "
                              "definition is not",
                              ros_name);
            ferry__bridge_raw_close(t);
            return FERRY_EINVAL;
        }
        /* CDR is never longer than the C layout: no padding between structures. */
        t->scratch = malloc(t->plain_size + 8);
        if (t->scratch == NULL) {
            ferry__bridge_raw_close(t);
            return FERRY_ENOMEM;
        }
    }
    *out = t;
    return FERRY_OK;
}

void ferry__bridge_raw_close(raw_type *t)
{
    if (t == NULL)
        return;
    ferry_ros2_schema_free(t->schema);
    free(t->scratch);
    free(t);
}

dds_entity_t ferry__bridge_raw_topic(ferry_bridge *b, raw_type *t, const char *dds_topic)
{
    struct ddsi_sertype *st = calloc(1, sizeof *st);
    dds_entity_t topic;

    if (st == NULL)
        return DDS_RETCODE_OUT_OF_RESOURCES;
    ddsi_sertype_init_flags(st, t->dds_name, &sertype_ops, &serdata_ops,
                            DDSI_SERTYPE_FLAG_TOPICKIND_NO_KEY);
    st->allowed_data_representation = DDS_DATA_REPRESENTATION_FLAG_XCDR1;
    topic = dds_create_topic_sertype(b->participant, dds_topic, &st, NULL, NULL, NULL);
    if (topic < 0) {
        sertype_free(st); /* not handed over */
        return topic;
    }
    /* The domain's sertype of this name (ours or an equal one it had): the serdata's type. */
    t->sertype = st;
    return topic;
}

/* ---------------------------------------------------------------------------------------------
 * Carrying
 * ------------------------------------------------------------------------------------------- */

bool ferry__bridge_raw_write(out_route *r, const ferry_sample *s, dds_return_t *rc)
{
    raw_type *t = r->raw;
    const void *bytes = s->data;
    size_t size = s->size;
    raw_serdata *d;

    if (t->wire == FERRY_ROS2_WIRE_PLAIN) {
        if (ferry_ros2_plain_to_cdr(t->schema, s->data, s->size, t->scratch, t->plain_size + 8,
                                    &size) != FERRY_OK)
            return false;
        bytes = t->scratch;
    } else if (ferry_ros2_walk(t->schema, FERRY_ROS2_WIRE_CDR, s->data, s->size, 0, NULL, NULL) !=
               FERRY_ROS2_WALK_OK) {
        /* A DDS reader would refuse it, or worse: checked here, as the in direction does. */
        return false;
    }
    d = serdata_new(t->sertype, SDK_DATA, size);
    if (d == NULL) {
        *rc = DDS_RETCODE_OUT_OF_RESOURCES;
        return true;
    }
    memcpy(d->bytes, bytes, size);
    /* dds_writecdr takes the reference, written or not. */
    *rc = dds_writecdr(r->writer, &d->c);
    return true;
}

ferry_err ferry__bridge_raw_publish(in_route *r, struct ddsi_serdata *sd, const char **why)
{
    raw_type *t = r->raw;
    uint32_t size = ddsi_serdata_size(sd);
    size_t out_size = t->wire == FERRY_ROS2_WIRE_PLAIN ? t->plain_size : size;
    struct ddsi_serdata *ref;
    ddsrt_iovec_t iov;
    ferry_ros2_walk_result res;
    void *loan = NULL;
    ferry_err err;

    if (size < 4)
        return (*why = "malformed CDR", FERRY_EINVAL);
    err = ferry_loan(r->pub, out_size, &loan);
    if (err != FERRY_OK)
        return err;
    ref = ddsi_serdata_to_ser_ref(sd, 0, size, &iov);
    if (t->wire == FERRY_ROS2_WIRE_PLAIN) {
        res = ferry_ros2_cdr_to_plain(t->schema, iov.iov_base, iov.iov_len, loan, out_size);
    } else {
        res = ferry_ros2_walk(t->schema, FERRY_ROS2_WIRE_CDR, iov.iov_base, iov.iov_len, 0, NULL,
                              NULL);
        if (res == FERRY_ROS2_WALK_OK)
            memcpy(loan, iov.iov_base, iov.iov_len);
    }
    ddsi_serdata_to_ser_unref(ref, &iov);
    if (res != FERRY_ROS2_WALK_OK) {
        ferry_loan_release(r->pub, loan);
        *why = res == FERRY_ROS2_WALK_UNSUPPORTED ? "an encapsulation other than plain CDR"
                                                  : "malformed CDR";
        return FERRY_EINVAL;
    }
    return ferry_publish(r->pub, loan, out_size);
}
