/*
 * ferry view: a live view of a domain. One port serves the Foxglove WebSocket protocol
 * (subprotocol foxglove.websocket.v1), so that Foxglove connects to it as to its own bridge, and
 * over plain HTTP a small page (view_page.html, built in) that shows every image topic live.
 *
 * Every ferry topic whose type has a ROS 2 counterpart (src/ros2/ros2.h) is a channel of
 * encoding "cdr"; an image topic is offered a second time as a sensor_msgs/msg/CompressedImage
 * channel "<topic>/compressed", JPEG-encoded here. A topic is subscribed on ferry while at least
 * one client subscribes to one of its channels, with a drop-oldest subscriber (no viewer can
 * slow a publisher) whose samples are taken as they come, thinned to --max-rate and serialised
 * once for all the clients. Each client keeps at most one message waiting per subscription: a
 * newer one replaces it (counted as dropped for that client), so a client that stops reading
 * costs one message per subscription and nothing more.
 *
 * Clients are untrusted: their text messages are bounded (VIEW_RX_MAX), their subscriptions
 * (VIEW_SUBS_MAX), the control messages queued for them (VIEW_OUT_*) and their number
 * (VIEW_CLIENTS_MAX); one that breaks a bound is told why and disconnected, the others carry on.
 *
 * Single-threaded: one libwebsockets event loop drives the clients, the subscribers'
 * descriptors (adopted as raw files) and a 100 ms tick (rescans, housekeeping, statistics).
 * This file holds the command, the loop, the topics and the clients; view_proto.c makes and
 * parses the protocol's messages (view.h between them).
 */
#include "cli.h"

#ifndef FERRY_HAVE_WEBSOCKETS

int ferry_cmd_view(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_fail("view", 2,
                    "not built: this ferry was built without libwebsockets (libwebsockets-dev)");
}

#else

#include "decode.h"
#include "view.h"
#include "view_page.h"

#include <ferry/msg.h>

#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <getopt.h>
#include <inttypes.h>
#include <libwebsockets.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef FERRY_HAVE_TURBOJPEG
#include <turbojpeg.h>
#endif

#define CMD "view"
#define NS_PER_S 1000000000LL
#define TICK_US (100 * LWS_US_PER_MS)
#define SCAN_PERIOD_NS NS_PER_S
#define STATS_PERIOD_NS NS_PER_S
#define LINGER_NS (2 * NS_PER_S) /* a ferry subscriber no client wants lives this long */

static void usage(FILE *to)
{
    fputs("usage: ferry view [options]\n"
          "Serves a live view of the domain on one port: the Foxglove WebSocket protocol\n"
          "(foxglove.websocket.v1; in Foxglove: Open connection, Foxglove WebSocket,\n"
          "ws://localhost:8765) and, at http://localhost:8765/, a page that shows every image\n"
          "topic live with its rate, latency and drops. Every topic whose type has a ROS 2\n"
          "counterpart is a channel of CDR messages; each image topic is also offered as\n"
          "<topic>/compressed, a sensor_msgs/msg/CompressedImage in JPEG. A slow or stalled\n"
          "viewer never slows a publisher: the view subscribes drop-oldest and keeps at most\n"
          "one message waiting per subscription of a client. SIGINT or SIGTERM stops it.\n"
          "\n"
          "options:\n"
          "  --port N          TCP port, 0..65535; 0 picks a free one (default 8765)\n"
          "  --bind ADDR       address to listen on (default 127.0.0.1; 0.0.0.0 opens the\n"
          "                    view, unauthenticated, to the network)\n"
          "  --topic PATTERN   offer only topics matching PATTERN (a name or a shell\n"
          "                    pattern such as '/cam/*'); may be repeated (default: all)\n"
          "  --max-rate HZ     most messages a second sent per topic, 0.1..10000; 0 sends\n"
          "                    every sample (default 30)\n"
          "  --jpeg-quality Q  JPEG quality of the compressed channels, 1..100 (default 80)\n"
          "  --origin PATTERN  let browsers connect only from pages of these origins (a\n"
          "                    shell pattern such as 'https://app.foxglove.dev'), besides\n"
          "                    the view's own page; may be repeated. Clients that send no\n"
          "                    Origin (not browsers) are let in. (default: any origin)\n"
          "  --domain N        domain number 0..1023 (default $FERRY_DOMAIN, else 0)\n"
          "  --dir PATH        root of the domain directories (default $FERRY_DIR, else\n"
          "                    /dev/shm/ferry-<uid>)\n"
          "  -h, --help        print this help\n",
          to);
}

static int parse_args(int argc, char **argv, view_args *a)
{
    enum { O_PORT = CLI_O_OWN, O_BIND, O_TOPIC, O_MAX_RATE, O_JPEG_QUALITY, O_ORIGIN };
    static const struct option options[] = {
        {"port", required_argument, NULL, O_PORT},
        {"bind", required_argument, NULL, O_BIND},
        {"topic", required_argument, NULL, O_TOPIC},
        {"max-rate", required_argument, NULL, O_MAX_RATE},
        {"jpeg-quality", required_argument, NULL, O_JPEG_QUALITY},
        {"origin", required_argument, NULL, O_ORIGIN},
        CLI_OPT_DOMAIN,
        CLI_OPT_DIR,
        CLI_OPT_HELP,
        CLI_OPT_END,
    };
    cli_parser p = {.cmd = CMD, .options = options, .usage = usage, .opts = &a->o};
    int c;

    memset(a, 0, sizeof *a);
    cli_opts_init(&a->o);
    a->port = 8765;
    a->bind = "127.0.0.1";
    a->max_rate = 30.0;
    a->jpeg_quality = 80;
    while ((c = cli_getopt(&p, argc, argv)) >= CLI_O_OWN) {
        switch (c) {
        case O_PORT:
            if (!cli_parse_whole(CMD, &cli_ranges[CLI_R_VIEW_PORT], optarg, &a->port)) return 2;
            break;
        case O_BIND:
            if (optarg[0] == '\0') return cli_fail(CMD, 2, "--bind: empty address");
            a->bind = optarg;
            break;
        case O_TOPIC: {
            char *buf;

            if (a->npatterns == VIEW_TOPIC_PATTERNS_MAX)
                return cli_fail(CMD, 2, "--topic: at most %d patterns", VIEW_TOPIC_PATTERNS_MAX);
            if (optarg[0] == '\0' || strlen(optarg) > FERRY_TOPIC_MAX)
                return cli_fail(CMD, 2, "--topic '%s': 1..%u bytes", optarg,
                                (unsigned)FERRY_TOPIC_MAX);
            /* Topics are matched with their leading '/', which a pattern may leave out. */
            buf = a->pattern_buf[a->npatterns];
            snprintf(buf, FERRY_TOPIC_MAX + 2, "%s%s", optarg[0] == '/' ? "" : "/", optarg);
            a->patterns[a->npatterns++] = buf;
            break;
        }
        case O_MAX_RATE:
            if (!cli_parse_real(CMD, &cli_ranges[CLI_R_VIEW_MAX_RATE], optarg, &a->max_rate))
                return 2;
            break;
        case O_ORIGIN:
            if (a->norigins == VIEW_ORIGINS_MAX)
                return cli_fail(CMD, 2, "--origin: at most %d", VIEW_ORIGINS_MAX);
            if (optarg[0] == '\0' || strlen(optarg) > 255)
                return cli_fail(CMD, 2, "--origin '%s': 1..255 bytes", optarg);
            a->origins[a->norigins++] = optarg;
            break;
        case O_JPEG_QUALITY:
            if (!cli_parse_whole(CMD, &cli_ranges[CLI_R_VIEW_JPEG_QUALITY], optarg,
                                 &a->jpeg_quality))
                return 2;
            break;
        }
    }
    if (c == CLI_OPTS_EXIT) return p.status;
    if (optind < argc) return cli_fail(CMD, 2, "unexpected argument '%s'", argv[optind]);
    return -1;
}

/* ---------------------------------------------------------------------------------------------
 * Topics, channels, clients
 * ------------------------------------------------------------------------------------------- */

static void client_queue(view_client *c, view_msg *m);

static bool topic_wanted(const view_args *a, const char *topic)
{
    unsigned i;

    if (a->npatterns == 0) return true;
    for (i = 0; i < a->npatterns; i++)
        if (fnmatch(a->patterns[i], topic, 0) == 0) return true;
    return false;
}

static view_topic *topic_by_channel(view_server *srv, uint32_t chan, int *ch)
{
    size_t i;
    int k;

    for (i = 0; i < srv->ntopics; i++)
        for (k = 0; k < CH_COUNT; k++)
            if (srv->topics[i]->chan[k] == chan && chan != 0) {
                *ch = k;
                return srv->topics[i];
            }
    return NULL;
}

static void broadcast(view_server *srv, view_msg *m)
{
    view_client *c;

    if (m == NULL) return;
    for (c = srv->clients; c != NULL; c = c->next)
        client_queue(c, view_msg_ref(m));
    view_msg_unref(m);
}

/* ---------------------------------------------------------------------------------------------
 * Topic subscribers and what they bring
 * ------------------------------------------------------------------------------------------- */

static void topic_drain(view_server *srv, view_topic *t);

static void topic_unsubscribe(view_server *srv, view_topic *t)
{
    ferry_err err;

    if (t->sub == NULL) return;
    if (t->fd_wsi != NULL) {
        /* The adopted descriptor is a duplicate: closing it leaves the subscriber's own. */
        lws_set_opaque_user_data(t->fd_wsi, NULL);
        if (!srv->stopping)
            lws_set_timeout(t->fd_wsi, PENDING_TIMEOUT_KILLED_BY_PARENT, LWS_TO_KILL_ASYNC);
        t->fd_wsi = NULL;
    }
    err = ferry_subscriber_destroy(t->sub);
    if (err != FERRY_OK)
        fprintf(stderr, "ferry view: %s: ferry_subscriber_destroy: %s\n", t->name,
                ferry_strerror(err));
    t->sub = NULL;
}

/* Subscribes t on ferry when the first client wants it. false after a status for the client. */
static bool topic_subscribe(view_server *srv, view_topic *t, view_client *c)
{
    ferry_subscriber_options o;
    ferry_err err;
    int fd, dupfd;

    if (t->sub != NULL) return true;
    ferry_subscriber_options_init(&o);
    o.depth = 2; /* drop-oldest (the default policy): the publisher never waits for a viewer */
    o.max_held = 4;
    o.spin_ns = FERRY_SPIN_OFF; /* a viewer is not worth a spinning CPU */
    err = ferry_subscriber_create(&t->sub, srv->node, t->name, t->type_name, t->type_hash, &o);
    if (err != FERRY_OK) {
        t->sub = NULL;
        client_queue(
            c, view_status_msg(2, "cannot subscribe to %s: %s", t->name, ferry_strerror(err)));
        return false;
    }
    t->last_pub = 0;
    t->next_ns = 0;
    /* The event loop watches a duplicate of the subscriber's descriptor, so that closing its
     * wsi (which closes the descriptor) never closes the subscriber's own. Without it the tick
     * still drains the subscriber every 100 ms. */
    if (ferry_subscriber_fd(t->sub, &fd) == FERRY_OK &&
        (dupfd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) >= 0) {
        lws_sock_file_fd_type u;

        u.filefd = dupfd;
        t->fd_wsi = lws_adopt_descriptor_vhost(srv->vh, LWS_ADOPT_RAW_FILE_DESC, u,
                                               "ferry-subscriber", NULL);
        if (t->fd_wsi != NULL) lws_set_opaque_user_data(t->fd_wsi, t);
    }
    return true;
}

static void deliver(view_server *srv, view_topic *t, int ch, view_msg *m)
{
    view_client *c;
    unsigned i;

    for (c = srv->clients; c != NULL; c = c->next)
        for (i = 0; i < c->nsubs; i++) {
            view_sub *s = &c->subs[i];

            if (s->topic != t || s->ch != ch) continue;
            if (s->pending != NULL) {
                /* Newest wins: the client has not taken the last one yet. */
                view_msg_unref(s->pending);
                s->dropped++;
                srv->messages_dropped++;
            }
            s->pending = view_msg_ref(m);
            lws_callback_on_writable(c->wsi);
        }
    view_msg_unref(m);
}

/* One sample: thinned to --max-rate, then serialised once per channel that has a subscriber. */
static void topic_sample(view_server *srv, view_topic *t, const ferry_sample *s)
{
    int64_t pt = s->publish_time.ns, now;

    if (t->last_pub == s->publisher_id && s->sequence > t->last_seq + 1)
        t->gaps += s->sequence - t->last_seq - 1;
    t->last_pub = s->publisher_id;
    t->last_seq = s->sequence;
    if (srv->period_ns > 0) {
        /* A quarter period of slack keeps a source at exactly --max-rate, with its jitter,
         * from losing every other frame; the schedule stays on its grid, so the long-run rate
         * never exceeds the cap. */
        if (t->next_ns != 0 && pt + srv->period_ns / 4 < t->next_ns) {
            t->capped++;
            return;
        }
        t->next_ns = (t->next_ns != 0 && t->next_ns + srv->period_ns > pt)
                         ? t->next_ns + srv->period_ns
                         : pt + srv->period_ns;
    }
    now = cli_realtime_ns();
    if (t->subs[CH_RAW] > 0) {
        view_msg *m = view_raw_msg(srv, t, s, now);

        if (m != NULL) deliver(srv, t, CH_RAW, m);
    }
#ifdef FERRY_HAVE_TURBOJPEG
    if (t->subs[CH_JPEG] > 0) {
        view_msg *refusal = NULL;
        view_msg *m = view_jpeg_msg(srv, t, s, now, &refusal);

        if (refusal != NULL) broadcast(srv, refusal);
        if (m != NULL) deliver(srv, t, CH_JPEG, m);
    }
#endif
}

/* Takes what is queued (bounded per call: a fast stream cannot starve the clients). */
static void topic_drain(view_server *srv, view_topic *t)
{
    unsigned n;

    for (n = 0; t->sub != NULL && n < 64; n++) {
        ferry_sample s;
        ferry_err err = ferry_take(t->sub, &s);

        if (err == FERRY_EAGAIN) {
            /* Nothing queued: what woke the descriptor was housekeeping. */
            if (n == 0) ferry_wait(t->sub, 0);
            return;
        }
        if (err != FERRY_OK) {
            fprintf(stderr, "ferry view: %s: ferry_take: %s\n", t->name, ferry_strerror(err));
            return;
        }
        topic_sample(srv, t, &s);
        err = ferry_release(t->sub, &s);
        if (err != FERRY_OK)
            fprintf(stderr, "ferry view: %s: ferry_release: %s\n", t->name, ferry_strerror(err));
    }
}

/* ---------------------------------------------------------------------------------------------
 * Clients: subscriptions and what is queued for them
 * ------------------------------------------------------------------------------------------- */

/* Queues a control message (takes the reference). A client that lets too much pile up is not
 * reading: it is disconnected rather than buffered for. */
static void client_queue(view_client *c, view_msg *m)
{
    if (m == NULL || c->kicked) {
        view_msg_unref(m);
        return;
    }
    if (c->out_count == VIEW_OUT_SLOTS || c->out_bytes + m->len > VIEW_OUT_BYTES) {
        view_msg_unref(m);
        c->kicked = true;
        lws_close_reason(c->wsi, LWS_CLOSE_STATUS_POLICY_VIOLATION, (unsigned char *)"not reading",
                         11);
        lws_set_timeout(c->wsi, PENDING_TIMEOUT_KILLED_BY_PARENT, LWS_TO_KILL_ASYNC);
        return;
    }
    c->out[(c->out_head + c->out_count) % VIEW_OUT_SLOTS] = m;
    c->out_count++;
    c->out_bytes += m->len;
    lws_callback_on_writable(c->wsi);
}

static void sub_remove(view_client *c, unsigned i)
{
    view_sub *s = &c->subs[i];
    view_topic *t = s->topic;

    view_msg_unref(s->pending);
    t->subs[s->ch]--;
    c->subs[i] = c->subs[--c->nsubs];
    /* The ferry subscriber lingers a while (the tick ends it), so that a client that subscribes
     * and unsubscribes in a loop cannot make the publisher accept a subscriber for each. */
    if (t->subs[CH_RAW] == 0 && t->subs[CH_JPEG] == 0)
        t->idle_until_ns = ferry_now().ns + LINGER_NS;
}

static view_sub *sub_find(view_client *c, uint32_t id, unsigned *at)
{
    unsigned i;

    for (i = 0; i < c->nsubs; i++)
        if (c->subs[i].id == id) {
            if (at != NULL) *at = i;
            return &c->subs[i];
        }
    return NULL;
}

static void client_subscribe(view_client *c, uint32_t id, uint32_t chan)
{
    view_server *srv = c->srv;
    view_topic *t;
    view_sub *s;
    unsigned i;
    int ch;

    if (sub_find(c, id, NULL) != NULL) {
        client_queue(c, view_status_msg(2, "subscription id %" PRIu32 " is in use", id));
        return;
    }
    t = topic_by_channel(srv, chan, &ch);
    if (t == NULL) {
        client_queue(c, view_status_msg(2, "no channel %" PRIu32, chan));
        return;
    }
    for (i = 0; i < c->nsubs; i++)
        if (c->subs[i].topic == t && c->subs[i].ch == ch) {
            client_queue(c, view_status_msg(2, "channel %" PRIu32 " is subscribed already", chan));
            return;
        }
    if (c->nsubs == VIEW_SUBS_MAX) {
        client_queue(c, view_status_msg(2, "at most %d subscriptions", VIEW_SUBS_MAX));
        return;
    }
    if (!topic_subscribe(srv, t, c)) return;
    s = &c->subs[c->nsubs++];
    memset(s, 0, sizeof *s);
    s->id = id;
    s->topic = t;
    s->ch = ch;
    s->gaps_base = t->gaps;
    s->capped_base = t->capped;
    t->subs[ch]++;
}

static void client_unsubscribe(view_client *c, uint32_t id)
{
    unsigned i;

    if (sub_find(c, id, &i) == NULL) {
        client_queue(c, view_status_msg(1, "no subscription %" PRIu32, id));
        return;
    }
    sub_remove(c, i);
}

static void client_text(view_client *c, const unsigned char *text, size_t len)
{
    view_op *o = malloc(sizeof *o);
    const char *why;
    char buf[160];
    unsigned i;

    if (o == NULL) return;
    why = view_op_parse(text, len, o, buf, sizeof buf);
    if (why != NULL) {
        client_queue(c, view_status_msg(2, "%s", why));
    } else if (strcmp(o->op, "subscribe") == 0) {
        for (i = 0; i < o->nitems; i++) {
            if (!o->items[i].has_id || !o->items[i].has_chan)
                client_queue(c, view_status_msg(2, "a subscription needs id and channelId"));
            else
                client_subscribe(c, o->items[i].id, o->items[i].chan);
        }
    } else if (strcmp(o->op, "unsubscribe") == 0) {
        for (i = 0; i < o->nids; i++)
            client_unsubscribe(c, o->ids[i]);
    } else if (strcmp(o->op, "ferrySubscribeStats") == 0) {
        c->stats = true;
    } else {
        /* Printable and short, whatever the client sent. */
        for (i = 0; o->op[i] != '\0'; i++)
            if (o->op[i] < 0x20 || o->op[i] > 0x7e) o->op[i] = '?';
        client_queue(c, view_status_msg(2, "unsupported op '%.40s'", o->op));
    }
    free(o);
}

/* One message to the socket per writeable callback, as libwebsockets wants: control messages
 * first, then the subscriptions' pending messages in turn. */
static int client_write(view_client *c)
{
    view_msg *m = NULL;
    unsigned i;
    int n;

    if (c->out_count > 0) {
        m = c->out[c->out_head];
        c->out_head = (c->out_head + 1) % VIEW_OUT_SLOTS;
        c->out_count--;
        c->out_bytes -= m->len;
        n = lws_write(c->wsi, m->body, m->len, LWS_WRITE_TEXT);
    } else {
        view_sub *s = NULL;

        for (i = 0; i < c->nsubs; i++) {
            view_sub *cand = &c->subs[(c->rr + i) % c->nsubs];

            if (cand->pending != NULL) {
                s = cand;
                c->rr = (c->rr + i + 1) % c->nsubs;
                break;
            }
        }
        if (s == NULL) return 0;
        m = s->pending;
        s->pending = NULL;
        m->body[0] = 0x01; /* Message Data */
        m->body[1] = (unsigned char)s->id;
        m->body[2] = (unsigned char)(s->id >> 8);
        m->body[3] = (unsigned char)(s->id >> 16);
        m->body[4] = (unsigned char)(s->id >> 24);
        for (i = 0; i < 8; i++)
            m->body[5 + i] = (unsigned char)((uint64_t)m->recv_ns >> (8 * i));
        n = lws_write(c->wsi, m->body, m->len, LWS_WRITE_BINARY);
        s->sent++;
        c->srv->messages_sent++;
    }
    view_msg_unref(m);
    if (n < 0) return -1;
    for (i = 0; i < c->nsubs && c->out_count == 0; i++)
        if (c->subs[i].pending != NULL) break;
    if (c->out_count > 0 || i < c->nsubs) lws_callback_on_writable(c->wsi);
    return 0;
}

static void client_close(view_client *c)
{
    view_server *srv = c->srv;

    while (c->nsubs > 0)
        sub_remove(c, c->nsubs - 1);
    while (c->out_count > 0) {
        view_msg_unref(c->out[c->out_head]);
        c->out_head = (c->out_head + 1) % VIEW_OUT_SLOTS;
        c->out_count--;
    }
    free(c->rx);
    c->rx = NULL;
    if (c->prev != NULL)
        c->prev->next = c->next;
    else if (srv->clients == c)
        srv->clients = c->next;
    if (c->next != NULL) c->next->prev = c->prev;
    if (c->srv != NULL) srv->nclients--;
    c->srv = NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Scanning the domain: topics come and go
 * ------------------------------------------------------------------------------------------- */

/* One pass over the domain's status files: the known topics that still have a live publisher of
 * their type are marked seen; topics new to the view are collected, as many as there is room. */
typedef struct view_scan {
    view_server *srv;
    view_topic *found[VIEW_TOPICS_MAX];
    size_t nfound;
    bool full, failed;
} view_scan;

static bool scan_endpoint(void *arg, const ferry_endpoint_info *info)
{
    view_scan *sc = arg;
    view_server *srv = sc->srv;
    ferry_ros2_kind kind;
    view_topic *t;
    size_t i;

    if (!info->alive || info->kind != FERRY_ENDPOINT_PUBLISHER) return true;
    kind = ferry_ros2_kind_of_ferry(info->type_name, info->type_hash);
    if (kind == FERRY_ROS2_NONE || ferry_ros2_name(kind) == NULL) return true;
    if (!topic_wanted(srv->a, info->topic)) return true;
    for (i = 0; i < srv->ntopics; i++) {
        t = srv->topics[i];
        if (strcmp(t->name, info->topic) != 0) continue;
        if (strcmp(t->type_name, info->type_name) == 0 && t->type_hash == info->type_hash) {
            t->seen = true;
            return true;
        }
    }
    for (i = 0; i < sc->nfound; i++)
        if (strcmp(sc->found[i]->name, info->topic) == 0) return true;
    if (srv->ntopics + sc->nfound >= VIEW_TOPICS_MAX) {
        sc->full = true;
        return true;
    }
    t = calloc(1, sizeof *t);
    if (t == NULL) {
        sc->failed = true;
        return false;
    }
    snprintf(t->name, sizeof t->name, "%s", info->topic);
    snprintf(t->type_name, sizeof t->type_name, "%s", info->type_name);
    t->type_hash = info->type_hash;
    t->kind = kind;
    sc->found[sc->nfound++] = t;
    return true;
}

static void topic_remove(view_server *srv, size_t at)
{
    view_topic *t = srv->topics[at];
    view_client *c;
    unsigned i;

    for (c = srv->clients; c != NULL; c = c->next)
        for (i = c->nsubs; i-- > 0;)
            if (c->subs[i].topic == t) sub_remove(c, i);
    topic_unsubscribe(srv, t);
    srv->topics[at] = srv->topics[--srv->ntopics];
    free(t);
}

static void scan(view_server *srv)
{
    view_scan *sc = calloc(1, sizeof *sc);
    uint32_t gone[CH_COUNT * VIEW_TOPICS_MAX];
    size_t ngone = 0, i, j, from;
    ferry_err err;
    int k;

    if (sc == NULL) return;
    sc->srv = srv;
    for (i = 0; i < srv->ntopics; i++)
        srv->topics[i]->seen = false;
    err = ferry_inspect(srv->a->o.where.dir, srv->a->o.where.domain, NULL, scan_endpoint, sc);
    if (sc->failed || (err != FERRY_OK && !(err == FERRY_ESYS && errno == ENOENT))) {
        /* A pass that did not finish says nothing about what is gone. */
        for (i = 0; i < sc->nfound; i++)
            free(sc->found[i]);
        free(sc);
        return;
    }
    /* Gone: no live publisher any more, or one of another type now (then it is new below). */
    for (i = srv->ntopics; i-- > 0;) {
        view_topic *t = srv->topics[i];

        if (t->seen) continue;
        for (k = 0; k < CH_COUNT; k++)
            if (t->chan[k] != 0) gone[ngone++] = t->chan[k];
        topic_remove(srv, i);
    }
    if (ngone > 0) broadcast(srv, view_unadvertise_msg(gone, ngone));
    /* New: channel ids are never reused, so a client cannot confuse a topic that came back
     * (perhaps with another type) with the one it knew. */
    from = srv->ntopics;
    for (j = 0; j < sc->nfound; j++) {
        sc->found[j]->chan[CH_RAW] = ++srv->next_chan;
        srv->topics[srv->ntopics++] = sc->found[j];
    }
    /* The JPEG channel of an image topic, unless a topic of that name exists on its own. */
#ifdef FERRY_HAVE_TURBOJPEG
    for (i = from; i < srv->ntopics; i++) {
        view_topic *t = srv->topics[i];
        char name[FERRY_TOPIC_MAX + 16];
        bool taken = false;

        if (t->kind != FERRY_ROS2_IMAGE) continue;
        snprintf(name, sizeof name, "%s/compressed", t->name);
        for (j = 0; j < srv->ntopics && !taken; j++)
            taken = strcmp(srv->topics[j]->name, name) == 0;
        if (!taken) t->chan[CH_JPEG] = ++srv->next_chan;
    }
#endif
    broadcast(srv, view_advertise_msg(srv, from, false));
    if (sc->full && !srv->told_full) {
        fprintf(stderr, "ferry view: more than %d topics: the others are not offered\n",
                VIEW_TOPICS_MAX);
        srv->told_full = true;
    }
    free(sc);
}

/* ---------------------------------------------------------------------------------------------
 * libwebsockets callbacks
 * ------------------------------------------------------------------------------------------- */

static view_server *server_of(struct lws *wsi)
{
    return lws_context_user(lws_get_context(wsi));
}

typedef struct view_http {
    size_t sent;
} view_http;

static int http_cb(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                   size_t len)
{
    view_http *h = user;

    switch (reason) {
    case LWS_CALLBACK_HTTP: {
        unsigned char buf[LWS_PRE + 1024], *start = buf + LWS_PRE, *p = start,
                                           *end = buf + sizeof buf - 1;
        const char *uri = in;

        (void)len;
        if (uri == NULL || (strcmp(uri, "/") != 0 && strcmp(uri, "/index.html") != 0)) {
            if (lws_return_http_status(wsi, HTTP_STATUS_NOT_FOUND, NULL)) return -1;
            return lws_http_transaction_completed(wsi) ? -1 : 0;
        }
        h->sent = 0;
        if (lws_add_http_common_headers(wsi, HTTP_STATUS_OK, "text/html; charset=utf-8",
                                        (lws_filepos_t)view_page_len, &p, end) ||
            lws_add_http_header_by_name(wsi, (const unsigned char *)"cache-control:",
                                        (const unsigned char *)"no-store", 8, &p, end) ||
            lws_finalize_write_http_header(wsi, start, &p, end))
            return -1;
        lws_callback_on_writable(wsi);
        return 0;
    }
    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
        /* A WebSocket upgrade that asked for no subprotocol of ours lands here: refused. */
        return 1;
    case LWS_CALLBACK_HTTP_WRITEABLE: {
        unsigned char buf[LWS_PRE + 4096];
        size_t n = view_page_len - h->sent;
        bool last;

        if (n > sizeof buf - LWS_PRE) n = sizeof buf - LWS_PRE;
        last = h->sent + n == view_page_len;
        memcpy(buf + LWS_PRE, view_page + h->sent, n);
        if (lws_write(wsi, buf + LWS_PRE, n, last ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP) !=
            (int)n)
            return -1;
        h->sent += n;
        if (!last) {
            lws_callback_on_writable(wsi);
            return 0;
        }
        return lws_http_transaction_completed(wsi) ? -1 : 0;
    }
    default:
        break;
    }
    return lws_callback_http_dummy(wsi, reason, user, in, len);
}

/* With --origin, a browser's WebSocket (it always sends Origin) is let in only from the listed
 * origins or from the view's own page (http:// and the Host the request names): any web page
 * the user opens could otherwise watch the cameras. */
static bool origin_allowed(view_server *srv, struct lws *wsi)
{
    char origin[256], host[256], own[300];
    unsigned i;

    if (srv->a->norigins == 0) return true;
    if (lws_hdr_total_length(wsi, WSI_TOKEN_ORIGIN) <= 0) return true;
    if (lws_hdr_copy(wsi, origin, sizeof origin, WSI_TOKEN_ORIGIN) < 0) return false;
    if (lws_hdr_copy(wsi, host, sizeof host, WSI_TOKEN_HOST) > 0) {
        snprintf(own, sizeof own, "http://%s", host);
        if (strcmp(origin, own) == 0) return true;
    }
    for (i = 0; i < srv->a->norigins; i++)
        if (fnmatch(srv->a->origins[i], origin, 0) == 0) return true;
    return false;
}

static int ws_cb(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                 size_t len)
{
    view_client *c = user;
    view_server *srv = server_of(wsi);

    switch (reason) {
    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
        return origin_allowed(srv, wsi) ? 0 : 1;
    case LWS_CALLBACK_ESTABLISHED:
        memset(c, 0, sizeof *c);
        c->wsi = wsi;
        if (srv->nclients >= VIEW_CLIENTS_MAX) {
            lws_close_reason(wsi, LWS_CLOSE_STATUS_POLICY_VIOLATION,
                             (unsigned char *)"too many clients", 16);
            return -1;
        }
        c->srv = srv;
        c->next = srv->clients;
        if (srv->clients != NULL) srv->clients->prev = c;
        srv->clients = c;
        srv->nclients++;
        srv->clients_total++;
        client_queue(c, view_server_info_msg(srv));
        client_queue(c, view_advertise_msg(srv, 0, true));
        return 0;
    case LWS_CALLBACK_RECEIVE: {
        bool final = lws_is_final_fragment(wsi) && lws_remaining_packet_payload(wsi) == 0;

        if (c->srv == NULL || c->kicked) return 0;
        if (lws_frame_is_binary(wsi)) {
            /* Client Message Data and service calls: not offered (no such capability). */
            if (final) client_queue(c, view_status_msg(2, "binary messages are not supported"));
            return 0;
        }
        if (final && c->rx_len == 0 && !c->rx_overflow) {
            if (len > VIEW_RX_MAX) goto too_large;
            client_text(c, in, len);
            return 0;
        }
        if (c->rx_overflow || c->rx_len + len > VIEW_RX_MAX) goto too_large;
        if (c->rx == NULL && (c->rx = malloc(VIEW_RX_MAX)) == NULL) return -1;
        memcpy(c->rx + c->rx_len, in, len);
        c->rx_len += len;
        if (final) {
            client_text(c, c->rx, c->rx_len);
            c->rx_len = 0;
        }
        return 0;
    too_large:
        c->rx_overflow = true;
        c->kicked = true;
        lws_close_reason(wsi, LWS_CLOSE_STATUS_MESSAGE_TOO_LARGE, (unsigned char *)"too large", 9);
        return -1;
    }
    case LWS_CALLBACK_SERVER_WRITEABLE:
        if (c->srv == NULL) return -1;
        if (c->kicked && c->out_count == 0) return -1;
        return client_write(c);
    case LWS_CALLBACK_CLOSED:
        if (c->srv != NULL) client_close(c);
        return 0;
    default:
        break;
    }
    return 0;
}

static int fd_cb(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                 size_t len)
{
    view_topic *t;

    (void)user;
    (void)in;
    (void)len;
    if (reason != LWS_CALLBACK_RAW_RX_FILE) return 0;
    t = lws_get_opaque_user_data(wsi);
    if (t == NULL) return -1;
    topic_drain(server_of(wsi), t);
    return 0;
}

static const struct lws_protocols protocols[] = {
    {"http", http_cb, sizeof(view_http), 0, 0, NULL, 0},
    {"foxglove.websocket.v1", ws_cb, sizeof(view_client), 4096, 0, NULL, 0},
    {"ferry-subscriber", fd_cb, 0, 0, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

static void tick(lws_sorted_usec_list_t *sul)
{
    view_server *srv = lws_container_of(sul, view_server, tick);
    int64_t now = ferry_now().ns;
    view_client *c;
    size_t i;

    if (cli_stop_requested) {
        lws_cancel_service(srv->ctx);
        return;
    }
    if (now >= srv->next_scan_ns) {
        scan(srv);
        srv->next_scan_ns = now + SCAN_PERIOD_NS;
    }
    /* Housekeeping, samples a missed wake-up would leave queued, and the end of subscribers no
     * client has wanted for LINGER_NS. */
    for (i = 0; i < srv->ntopics; i++) {
        view_topic *t = srv->topics[i];

        if (t->sub == NULL) continue;
        if (t->subs[CH_RAW] == 0 && t->subs[CH_JPEG] == 0 && now >= t->idle_until_ns)
            topic_unsubscribe(srv, t);
        else
            topic_drain(srv, t);
    }
    if (now >= srv->next_stats_ns) {
        for (c = srv->clients; c != NULL; c = c->next)
            if (c->stats && !c->kicked) client_queue(c, view_stats_msg(c));
        srv->next_stats_ns = now + STATS_PERIOD_NS;
    }
    lws_sul_schedule(srv->ctx, 0, &srv->tick, tick, TICK_US);
}

static void lws_log_line(int level, const char *line)
{
    (void)level;
    fprintf(stderr, "ferry view: libwebsockets: %s", line);
}

int ferry_cmd_view(int argc, char **argv)
{
    struct lws_context_creation_info info;
    view_server *srv;
    ferry_node_options no;
    ferry_err err;
    view_args *a;
    int status;
    size_t i;

    a = calloc(1, sizeof *a);
    srv = calloc(1, sizeof *srv);
    if (a == NULL || srv == NULL) {
        free(a);
        free(srv);
        return cli_fail(CMD, 1, "out of memory");
    }
    status = parse_args(argc, argv, a);
    if (status >= 0) goto out;
    status = 0;
    srv->a = a;
    srv->period_ns = a->max_rate > 0.0 ? (int64_t)(1e9 / a->max_rate) : 0;
    snprintf(srv->session, sizeof srv->session, "%ld-%" PRId64, (long)getpid(), cli_realtime_ns());

    ferry_node_options_init(&no);
    no.dir = a->o.where.dir;
    no.domain = a->o.where.domain;
    no.name = "ferry_view";
    err = ferry_node_create(&srv->node, &no);
    if (err != FERRY_OK) {
        status = cli_fail(CMD, 1, "cannot open domain %u: %s", (unsigned)a->o.where.domain,
                          ferry_strerror(err));
        goto out;
    }
#ifdef FERRY_HAVE_TURBOJPEG
    srv->tj = tjInitCompress();
    if (srv->tj == NULL) {
        status = cli_fail(CMD, 1, "tjInitCompress: %s", tjGetErrorStr());
        goto out;
    }
#endif

    lws_set_log_level(LLL_ERR, lws_log_line);
    memset(&info, 0, sizeof info);
    info.port = (int)a->port;
    info.iface = a->bind;
    info.protocols = protocols;
    info.user = srv;
    info.vhost_name = "ferry";
    info.options = LWS_SERVER_OPTION_VALIDATE_UTF8 | LWS_SERVER_OPTION_FAIL_UPON_UNABLE_TO_BIND;
    if (strchr(a->bind, ':') == NULL) info.options |= LWS_SERVER_OPTION_DISABLE_IPV6;
    /* The largest message libwebsockets reads of a client in one piece; longer ones come in
     * pieces and are bounded by VIEW_RX_MAX. */
    info.pt_serv_buf_size = 16384;
    info.timeout_secs = 10;
    srv->ctx = lws_create_context(&info);
    if (srv->ctx == NULL) {
        status = cli_fail(CMD, 1,
                          "cannot listen on %s port %" PRIu64
                          " (in use, or not an address of this host?)",
                          a->bind, a->port);
        goto out;
    }
    srv->vh = lws_get_vhost_by_name(srv->ctx, "ferry");
    if (srv->vh == NULL || lws_get_vhost_listen_port(srv->vh) <= 0) {
        status = cli_fail(CMD, 1, "cannot listen on %s port %" PRIu64, a->bind, a->port);
        goto out;
    }
    cli_stop_on_signals();
    setvbuf(stdout, NULL, _IOLBF, 0);
    {
        /* An IPv6 address goes in brackets in a URL. */
        bool v6 = strchr(a->bind, ':') != NULL;
        int port = lws_get_vhost_listen_port(srv->vh);

        printf("ferry view: serving http://%s%s%s:%d/ (Foxglove: ws://%s%s%s:%d)\n", v6 ? "[" : "",
               a->bind, v6 ? "]" : "", port, v6 ? "[" : "", a->bind, v6 ? "]" : "", port);
    }
    scan(srv);
    srv->next_scan_ns = ferry_now().ns + SCAN_PERIOD_NS;
    lws_sul_schedule(srv->ctx, 0, &srv->tick, tick, TICK_US);
    while (!cli_stop_requested)
        if (lws_service(srv->ctx, 0) < 0) {
            status = cli_fail(CMD, 1, "the event loop failed");
            break;
        }
    printf("ferry view: %" PRIu64 " clients, %" PRIu64 " messages sent, %" PRIu64
           " dropped for slow clients\n",
           srv->clients_total, srv->messages_sent, srv->messages_dropped);

out:
    srv->stopping = true;
    if (srv->ctx != NULL) {
        lws_sul_cancel(&srv->tick);
        lws_context_destroy(srv->ctx);
    }
    for (i = 0; i < srv->ntopics; i++) {
        srv->topics[i]->fd_wsi = NULL;
        topic_unsubscribe(srv, srv->topics[i]);
        free(srv->topics[i]);
    }
#ifdef FERRY_HAVE_TURBOJPEG
    if (srv->tj != NULL) tjDestroy(srv->tj);
    tjFree(srv->jpeg);
#endif
    if (srv->node != NULL) {
        err = ferry_node_destroy(srv->node);
        if (err != FERRY_OK && status == 0)
            status = cli_fail(CMD, 1, "ferry_node_destroy: %s", ferry_strerror(err));
    }
    free(srv);
    free(a);
    return status;
}

#endif
