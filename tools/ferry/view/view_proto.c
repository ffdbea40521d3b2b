/*
 * The messages of the Foxglove WebSocket protocol as ferry view sends and reads them: shared
 * reference-counted buffers with libwebsockets' head room, the JSON of serverInfo, advertise,
 * unadvertise, status and ferryStats, Message Data from a taken sample (ferry_ros2's CDR, or a
 * CompressedImage JPEG-encoded here), and the client's subscribe and unsubscribe parsed with
 * lws's bounded JSON parser.
 */
#include "view.h"

#include "decode.h"

#include <ferry/msg.h>

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

view_msg *view_msg_new(size_t len, bool binary)
{
    view_msg *m;

    if (len > VIEW_MSG_MAX)
        return NULL;
    m = calloc(1, sizeof *m);
    if (m == NULL)
        return NULL;
    m->mem = malloc(LWS_PRE + len);
    if (m->mem == NULL) {
        free(m);
        return NULL;
    }
    m->refs = 1;
    m->binary = binary;
    m->len = len;
    m->body = m->mem + LWS_PRE;
    return m;
}

view_msg *view_msg_ref(view_msg *m)
{
    m->refs++;
    return m;
}

/* Not inlined: gcc cannot see that a caller's reference keeps refs above zero and would
 * report the next use of a shared message as a use after free. */
__attribute__((noinline)) void view_msg_unref(view_msg *m)
{
    if (m == NULL || --m->refs > 0)
        return;
    free(m->mem);
    free(m);
}

bool view_text_open(view_text *t)
{
    static const char pre[LWS_PRE];

    t->buf = NULL;
    t->len = 0;
    t->f = open_memstream(&t->buf, &t->len);
    if (t->f == NULL)
        return false;
    fwrite(pre, 1, sizeof pre, t->f);
    return true;
}

/* Closes the stream; the message, or NULL when out of memory. */
view_msg *view_text_close(view_text *t)
{
    view_msg *m;

    if (fclose(t->f) != 0 || t->buf == NULL || t->len < LWS_PRE) {
        free(t->buf);
        return NULL;
    }
    m = calloc(1, sizeof *m);
    if (m == NULL) {
        free(t->buf);
        return NULL;
    }
    m->refs = 1;
    m->mem = (unsigned char *)t->buf;
    m->body = m->mem + LWS_PRE;
    m->len = t->len - LWS_PRE;
    return m;
}

/* {"op":"status","level":L,"message":"..."} */
view_msg *view_status_msg(int level, const char *fmt, ...)
{
    char text[512];
    view_text t;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (!view_text_open(&t))
        return NULL;
    fprintf(t.f, "{\"op\":\"status\",\"level\":%d,\"message\":", level);
    cli_json_string(t.f, text);
    fputs("}", t.f);
    return view_text_close(&t);
}

static void channel_json(FILE *f, const view_topic *t, int ch)
{
    ferry_ros2_kind kind = ch == CH_JPEG ? FERRY_ROS2_COMPRESSED : t->kind;
    char topic[FERRY_TOPIC_MAX + 16];

    snprintf(topic, sizeof topic, "%s%s", t->name, ch == CH_JPEG ? "/compressed" : "");
    fprintf(f, "{\"id\":%" PRIu32 ",\"topic\":", t->chan[ch]);
    cli_json_string(f, topic);
    fputs(",\"encoding\":\"cdr\",\"schemaName\":", f);
    cli_json_string(f, ferry_ros2_name(kind));
    fputs(",\"schemaEncoding\":\"ros2msg\",\"schema\":", f);
    cli_json_string(f, ferry_ros2_definition(kind));
    fputs("}", f);
}

/* An advertise of the channels of topics[from..); NULL when there is none and not always. */
view_msg *view_advertise_msg(view_server *srv, size_t from, bool always)
{
    bool first = true;
    view_text t;
    size_t i;
    int k;

    if (from >= srv->ntopics && !always)
        return NULL;
    if (!view_text_open(&t))
        return NULL;
    fputs("{\"op\":\"advertise\",\"channels\":[", t.f);
    for (i = from; i < srv->ntopics; i++)
        for (k = 0; k < CH_COUNT; k++) {
            if (srv->topics[i]->chan[k] == 0)
                continue;
            if (!first)
                fputs(",", t.f);
            first = false;
            channel_json(t.f, srv->topics[i], k);
        }
    fputs("]}", t.f);
    return view_text_close(&t);
}

view_msg *view_unadvertise_msg(const uint32_t *ids, size_t n)
{
    view_text t;
    size_t i;

    if (!view_text_open(&t))
        return NULL;
    fputs("{\"op\":\"unadvertise\",\"channelIds\":[", t.f);
    for (i = 0; i < n; i++)
        fprintf(t.f, "%s%" PRIu32, i ? "," : "", ids[i]);
    fputs("]}", t.f);
    return view_text_close(&t);
}

/* {"op":"ferryStats","subscriptions":[{"id","sent","dropped","gaps","capped"}]}, since each
 * subscription began: messages sent, messages passed over because a newer one came before the
 * client could take them, samples the view never saw, samples left out for --max-rate. The page
 * shows dropped + gaps as its drops; only for clients that asked (Foxglove's client refuses unknown
 * ops). */
view_msg *view_stats_msg(view_client *c)
{
    view_text t;
    unsigned i;

    if (!view_text_open(&t))
        return NULL;
    fputs("{\"op\":\"ferryStats\",\"subscriptions\":[", t.f);
    for (i = 0; i < c->nsubs; i++) {
        const view_sub *s = &c->subs[i];

        fprintf(t.f,
                "%s{\"id\":%" PRIu32 ",\"sent\":%" PRIu64 ",\"dropped\":%" PRIu64
                ",\"gaps\":%" PRIu64 ",\"capped\":%" PRIu64 "}",
                i ? "," : "", s->id, s->sent, view_sub_dropped(s), s->topic->gaps - s->gaps_base,
                s->topic->capped - s->capped_base);
    }
    fputs("]}", t.f);
    return view_text_close(&t);
}

view_msg *view_server_info_msg(view_server *srv)
{
    view_text t;

    if (!view_text_open(&t))
        return NULL;
    fputs("{\"op\":\"serverInfo\",\"name\":\"ferry view\",\"capabilities\":[],"
          "\"metadata\":{\"domain\":",
          t.f);
    fprintf(t.f, "\"%" PRIu32 "\"", srv->a->o.where.domain);
    fputs(",\"dir\":", t.f);
    cli_json_string(t.f, srv->node ? ferry_node_dir(srv->node) : "");
    fputs("},\"sessionId\":", t.f);
    cli_json_string(t.f, srv->session);
    fputs("}", t.f);
    return view_text_close(&t);
}

view_msg *view_raw_msg(view_server *srv, view_topic *t, const ferry_sample *s, int64_t now)
{
    ferry_ros2_cdr *cdr = &srv->cdr;
    unsigned char *p;
    view_msg *m;
    unsigned i;

    if (t->ros2_cdr) {
        ferry_ros2_msg msg;

        /* A ROS 2 node's sample is the serialisation: sent as it is, once it parses. */
        if (ferry_ros2_cdr_parse(t->kind, s->data, s->size, &msg) != FERRY_ROS2_CDR_OK)
            return NULL;
        m = view_msg_new(VIEW_DATA_HEAD + s->size, true);
        if (m == NULL)
            return NULL;
        m->recv_ns = now;
        memcpy(m->body + VIEW_DATA_HEAD, s->data, s->size);
        return m;
    }
    if (ferry_ros2_cdr_encode(t->kind, s, cdr) != FERRY_OK)
        return NULL;
    m = view_msg_new(VIEW_DATA_HEAD + cdr->size, true);
    if (m == NULL)
        return NULL;
    m->recv_ns = now;
    p = m->body + VIEW_DATA_HEAD;
    for (i = 0; i < cdr->niov && i < 3; i++) {
        memcpy(p, cdr->iov[i].iov_base, cdr->iov[i].iov_len);
        p += cdr->iov[i].iov_len;
    }
    return m;
}

#ifdef FERRY_HAVE_TURBOJPEG
static int jpeg_format(const char *encoding, int *subsamp)
{
    *subsamp = TJSAMP_420;
    if (strcmp(encoding, "rgb8") == 0)
        return TJPF_RGB;
    if (strcmp(encoding, "bgr8") == 0)
        return TJPF_BGR;
    if (strcmp(encoding, "rgba8") == 0)
        return TJPF_RGBA;
    if (strcmp(encoding, "bgra8") == 0)
        return TJPF_BGRA;
    if (strcmp(encoding, "mono8") == 0 || strcmp(encoding, "8UC1") == 0) {
        *subsamp = TJSAMP_GRAY;
        return TJPF_GRAY;
    }
    return -1;
}

/* sensor_msgs/msg/CompressedImage of a JPEG made here: serialised by the CDR writer from its
 * fields (ferry_ros2_cdr_encode_compressed), copied once into the message. */
view_msg *view_jpeg_msg(view_server *srv, view_topic *t, const ferry_sample *s, int64_t now,
                        view_msg **refusal)
{
    unsigned long size, need;
    ferry_image_view v;
    int pf, subsamp;
    unsigned char *p;
    view_msg *m;

    if (t->ros2_cdr) {
        /* A ROS 2 node's Image, read in place from its CDR; a step that the rows do not fill
         * or data short of height * step is refused, as ferry's view refuses it. */
        ferry_ros2_msg msg;
        const ferry_ros2_image_msg *im = &msg.u.image;

        if (ferry_ros2_cdr_parse(FERRY_ROS2_IMAGE, s->data, s->size, &msg) != FERRY_ROS2_CDR_OK ||
            im->height == 0 || im->width == 0 || (uint64_t)im->step * im->height > im->data_size ||
            strlen(im->encoding) >= sizeof v.header.encoding ||
            strlen(im->header.frame_id) >= sizeof v.header.frame_id)
            return NULL;
        memset(&v, 0, sizeof v);
        v.header.stamp.sec = im->header.sec;
        v.header.stamp.nanosec = im->header.nanosec;
        snprintf(v.header.frame_id, sizeof v.header.frame_id, "%s", im->header.frame_id);
        snprintf(v.header.encoding, sizeof v.header.encoding, "%s", im->encoding);
        v.header.width = im->width;
        v.header.height = im->height;
        v.header.step = im->step;
        v.data = im->data;
        v.data_size = im->data_size;
        pf = jpeg_format(v.header.encoding, &subsamp);
        if (pf >= 0 && (uint64_t)v.header.width * (uint64_t)tjPixelSize[pf] > v.header.step)
            return NULL;
    } else if (ferry_image_view_get(s, &v) != FERRY_OK) {
        return NULL;
    }
    pf = jpeg_format(v.header.encoding, &subsamp);
    if (pf < 0 || v.header.width > 65535 || v.header.height > 65535) {
        if (!t->jpeg_refused)
            *refusal = view_status_msg(1,
                                       "%s: no JPEG for %s images of %" PRIu32 "x%" PRIu32
                                       " (rgb8, bgr8, rgba8, bgra8 and mono8 up to 65535 a"
                                       " side only)",
                                       t->name, v.header.encoding, v.header.width, v.header.height);
        t->jpeg_refused = true;
        return NULL;
    }
    /* A buffer of the worst case for the geometry, kept between frames: TurboJPEG then never
     * reallocates it (TJFLAG_NOREALLOC). */
    need = tjBufSize((int)v.header.width, (int)v.header.height, subsamp);
    if (need == (unsigned long)-1 || need > INT_MAX)
        return NULL;
    if (need > srv->jpeg_cap) {
        tjFree(srv->jpeg);
        srv->jpeg = tjAlloc((int)need);
        srv->jpeg_cap = srv->jpeg != NULL ? need : 0;
        if (srv->jpeg == NULL)
            return NULL;
    }
    size = srv->jpeg_cap;
    if (tjCompress2(srv->tj, v.data, (int)v.header.width, (int)v.header.step, (int)v.header.height,
                    pf, &srv->jpeg, &size, subsamp, (int)srv->a->jpeg_quality,
                    TJFLAG_FASTDCT | TJFLAG_NOREALLOC) != 0)
        return NULL;
    if (ferry_ros2_cdr_encode_compressed(v.header.stamp, v.header.frame_id, "jpeg", srv->jpeg, size,
                                         &srv->cdr) != FERRY_OK)
        return NULL;
    m = view_msg_new(VIEW_DATA_HEAD + srv->cdr.size, true);
    if (m == NULL)
        return NULL;
    m->recv_ns = now;
    p = m->body + VIEW_DATA_HEAD;
    for (unsigned i = 0; i < srv->cdr.niov; i++) {
        memcpy(p, srv->cdr.iov[i].iov_base, srv->cdr.iov[i].iov_len);
        p += srv->cdr.iov[i].iov_len;
    }
    return m;
}
#endif

static const char *const op_paths[] = {
    "op", "subscriptions[]", "subscriptions[].id", "subscriptions[].channelId", "subscriptionIds[]",
};

static bool json_u32(struct lejp_ctx *ctx, char reason, uint32_t *out)
{
    char *end;
    unsigned long long v;

    if (reason != LEJPCB_VAL_NUM_INT || ctx->buf[0] == '-')
        return false;
    errno = 0;
    v = strtoull(ctx->buf, &end, 10);
    if (errno != 0 || *end != '\0' || v > UINT32_MAX)
        return false;
    *out = (uint32_t)v;
    return true;
}

/* lejp's own path matching misses array elements, so the path is compared here. */
static int op_path(const struct lejp_ctx *ctx)
{
    size_t i;

    for (i = 0; i < sizeof op_paths / sizeof *op_paths; i++)
        if (strcmp(ctx->path, op_paths[i]) == 0)
            return (int)i;
    return -1;
}

static signed char op_cb(struct lejp_ctx *ctx, char reason)
{
    view_op *o = ctx->user;
    int path = op_path(ctx);

    if (o->bad || path < 0)
        return 0;
    switch (path) {
    case 0: /* op */
        if (reason == LEJPCB_VAL_STR_CHUNK) {
            o->bad = true;
            o->why = "op too long";
        } else if (reason == LEJPCB_VAL_STR_END) {
            memcpy(o->op, ctx->buf, sizeof o->op - 1);
            o->op[sizeof o->op - 1] = '\0';
            o->op_set = true;
        }
        break;
    case 1: /* an element of subscriptions: a new entry when it is an object */
        if (reason == LEJPCB_OBJECT_START) {
            if (o->nitems == VIEW_OP_ITEMS_MAX) {
                o->bad = true;
                o->why = "too many subscriptions in one message";
                break;
            }
            memset(&o->items[o->nitems++], 0, sizeof o->items[0]);
        } else if (reason & LEJP_FLAG_CB_IS_VALUE) {
            o->bad = true;
            o->why = "subscriptions must hold objects";
        }
        break;
    case 2: /* subscriptions[].id */
    case 3: /* subscriptions[].channelId */
        if (!(reason & LEJP_FLAG_CB_IS_VALUE))
            break;
        if (o->nitems == 0) {
            o->bad = true;
            break;
        }
        if (!json_u32(ctx, reason,
                      path == 2 ? &o->items[o->nitems - 1].id : &o->items[o->nitems - 1].chan)) {
            o->bad = true;
            o->why = "ids must be whole numbers 0..4294967295";
            break;
        }
        if (path == 2)
            o->items[o->nitems - 1].has_id = true;
        else
            o->items[o->nitems - 1].has_chan = true;
        break;
    case 4: /* subscriptionIds[] */
        if (!(reason & LEJP_FLAG_CB_IS_VALUE))
            break;
        if (o->nids == VIEW_OP_ITEMS_MAX) {
            o->bad = true;
            o->why = "too many ids in one message";
        } else if (!json_u32(ctx, reason, &o->ids[o->nids++])) {
            o->bad = true;
            o->why = "ids must be whole numbers 0..4294967295";
        }
        break;
    }
    return 0;
}

/* Parses one text message of a client into *o: NULL when it is well formed (o->op is set),
 * else why not, in why (cap bytes). */
const char *view_op_parse(const unsigned char *text, size_t len, view_op *o, char *why, size_t cap)
{
    struct lejp_ctx ctx;
    int r;

    memset(o, 0, sizeof *o);
    lejp_construct(&ctx, op_cb, o, op_paths, (unsigned char)(sizeof op_paths / sizeof *op_paths));
    r = lejp_parse(&ctx, text, (int)len);
    lejp_destruct(&ctx);
    if (r == LEJP_CONTINUE)
        snprintf(why, cap, "incomplete JSON");
    else if (r < 0)
        snprintf(why, cap, "invalid JSON (parser error %d)", r);
    else if (o->bad)
        snprintf(why, cap, "invalid message: %s", o->why ? o->why : "bad field");
    else if (!o->op_set)
        snprintf(why, cap, "a message without op");
    else
        return NULL;
    return why;
}
