/*
 * ferry view: a live view of a domain. One port serves the Foxglove WebSocket protocol
 * (subprotocol foxglove.websocket.v1, or foxglove.sdk.v1 as the Foxglove SDK names it), so that
 * Foxglove connects to it as to its own bridge, and over plain HTTP a small page
 * (view_page.html, built in) that shows every image topic live.
 *
 * Every ferry topic whose type has a ROS 2 counterpart (src/ros2/ros2.h) is a channel of
 * encoding "cdr"; an image topic is offered a second time as a sensor_msgs/msg/CompressedImage
 * channel "<topic>/compressed", JPEG-encoded here. A topic is subscribed on ferry while at least
 * one client subscribes to one of its channels, with a drop-oldest subscriber (no viewer can
 * slow a publisher) whose samples are taken as they come and thinned to --max-rate; the newest
 * is kept, and serialised (or JPEG-encoded) once for all the clients when the first of them can
 * send it. A client's socket reports writable only when the last message has nearly left the
 * kernel (TCP_NOTSENT_LOWAT), so frames never queue there; each subscription is then sent the
 * newest message of its topic, and the ones that came and went meanwhile are its drops. A
 * client that asks (ferryAckMode, the page does) acknowledges each message and gets the next
 * only then: no frame waits in its own buffers either.
 *
 * Clients are untrusted: their text messages are bounded (VIEW_RX_MAX), their subscriptions
 * (VIEW_SUBS_MAX), the control messages queued for them (VIEW_OUT_*) and their number
 * (VIEW_CLIENTS_MAX); one that breaks a bound is told why and disconnected, the others carry on.
 * Every request needs the per-start token (?token=, printed in the URL) unless --no-token, and a
 * browser's WebSocket the view's own origin or an --origin. Connections are bounded
 * (--max-connections, within RLIMIT_NOFILE less VIEW_FD_RESERVE for ferry): past the bound the
 * oldest that has made no request with the token is closed for a newcomer, one that makes none
 * within VIEW_REQUEST_NS is closed, and what is shed is said once a second at most.
 *
 * Single-threaded: one libwebsockets event loop drives the clients, the subscribers'
 * descriptors (adopted as raw files) and a 100 ms tick (rescans, housekeeping, statistics).
 * This file holds the command, the loop, the topics and the clients; view_proto.c makes and
 * parses the protocol's messages (view.h between them).
 */
#include "cli.h"
#include "commands.h"

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
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#ifdef FERRY_HAVE_TURBOJPEG
#include <turbojpeg.h>
#endif

#define CMD "view"
#define NS_PER_S 1000000000LL
#define TICK_US (100 * LWS_US_PER_MS)
#define TICK_NS ((int64_t)TICK_US * 1000)
#define SCAN_PERIOD_NS NS_PER_S
#define STATS_PERIOD_NS NS_PER_S
#define LINGER_NS (2 * NS_PER_S) /* a ferry subscriber no client wants lives this long */

/* Codes of the options that need more than their row: cli_getopt returns them. */
enum { O_BIND = CLI_O_OWN, O_TOPIC, O_ORIGIN };

static const char about[] =
    "usage: ferry view [options]\n"
    "Serves a live view of the domain on one port: the Foxglove WebSocket protocol\n"
    "(subprotocol foxglove.websocket.v1 or foxglove.sdk.v1; in Foxglove: Open\n"
    "connection, Foxglove WebSocket, the ws:// URL it prints) and, at the http:// URL\n"
    "it prints, a page that shows every image topic live with its rate, latency and\n"
    "drops. Every topic whose type has a ROS 2 counterpart is a channel of CDR\n"
    "messages; each image topic is also offered as <topic>/compressed, a\n"
    "sensor_msgs/msg/CompressedImage in JPEG. A slow or stalled viewer never slows a\n"
    "publisher: the view subscribes drop-oldest, and a client gets the newest frame\n"
    "when its socket has sent the last one; the frames it could not take are counted\n"
    "as dropped. SIGINT or SIGTERM stops it.\n"
    "\n"
    "Access: each start makes a random token, which the printed URLs carry\n"
    "(?token=...); a request without it is refused (403), so that other users of the\n"
    "host and web pages cannot watch. A browser's WebSocket is let in only from the\n"
    "view's own page or an --origin.\n"
    "\n"
    "options:\n";

static const cli_option options[] = {
    {.name = "--port",
     .value = "N",
     CLI_WHOLE_AT(view_args, port),
     .range = &cli_ranges[CLI_R_VIEW_PORT],
     .help = "TCP port, 0..65535; 0 picks a free one (default 8765)"},
    {.name = "--bind",
     .value = "ADDR",
     CLI_STRING_AT(view_args, bind),
     .code = O_BIND,
     .help = "address to listen on (default 127.0.0.1; 0.0.0.0 opens the\n"
             "view to the network, over plain HTTP: the token is seen by\n"
             "anyone on the path)"},
    {.name = "--topic",
     .value = "PATTERN",
     .kind = CLI_K_CODE,
     .code = O_TOPIC,
     .help = "offer only topics matching PATTERN (a name or a shell\n"
             "pattern such as '/cam/*'); may be repeated (default: all)"},
    {.name = "--max-rate",
     .value = "HZ",
     CLI_REAL_AT(view_args, max_rate),
     .range = &cli_ranges[CLI_R_VIEW_MAX_RATE],
     .help = "most messages a second sent per topic, 0.1..10000; 0 sends\n"
             "every sample (default 30)"},
    {.name = "--jpeg-quality",
     .value = "Q",
     CLI_WHOLE_AT(view_args, jpeg_quality),
     .range = &cli_ranges[CLI_R_VIEW_JPEG_QUALITY],
     .help = "JPEG quality of the compressed channels, 1..100 (default 80)"},
    {.name = "--origin",
     .value = "PATTERN",
     .kind = CLI_K_CODE,
     .code = O_ORIGIN,
     .help = "also let browsers connect from pages of these origins (a\n"
             "shell pattern such as 'https://app.foxglove.dev'); may be\n"
             "repeated. They still need the token. (default: the view's\n"
             "own page only)"},
    {.name = "--no-token",
     CLI_FLAG_AT(view_args, no_token),
     .help = "serve anyone who reaches the port, without a token (every\n"
             "user of this host; the network with --bind): says so on\n"
             "stderr"},
    {.name = "--max-connections",
     .value = "N",
     CLI_WHOLE_AT(view_args, max_conns),
     .range = &cli_ranges[CLI_R_VIEW_MAX_CONNS],
     .help = "connections open at once, 1..65535 and at most half of\n"
             "ulimit -n less 64 (default 256, or a quarter of ulimit -n\n"
             "less 64 where that is less); past it the oldest connection\n"
             "that has made no request with the token is closed for a\n"
             "newcomer"},
    CLI_OPTIONS_WHERE_END,
};

static int parse_args(int argc, char **argv, view_args *a)
{
    cli_parser p = {
        .cmd = CMD, .table = options, .about = about, .column = 20, .dest = a, .opts = &a->o};
    int c;

    memset(a, 0, sizeof *a);
    cli_opts_init(&a->o);
    a->port = 8765;
    a->bind = "127.0.0.1";
    a->max_rate = 30.0;
    a->jpeg_quality = 80;
    while ((c = cli_getopt(&p, argc, argv)) >= CLI_O_OWN) {
        switch (c) {
        case O_BIND:
            if (optarg[0] == '\0')
                return cli_fail(CMD, 2, "--bind: empty address");
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
        case O_ORIGIN:
            if (a->norigins == VIEW_ORIGINS_MAX)
                return cli_fail(CMD, 2, "--origin: at most %d", VIEW_ORIGINS_MAX);
            if (optarg[0] == '\0' || strlen(optarg) > 255)
                return cli_fail(CMD, 2, "--origin '%s': 1..255 bytes", optarg);
            a->origins[a->norigins++] = optarg;
            break;
        }
    }
    if (c == CLI_OPTS_EXIT)
        return p.status;
    if (optind < argc)
        return cli_fail(CMD, 2, "unexpected argument '%s'", argv[optind]);
    return -1;
}

/* ---------------------------------------------------------------------------------------------
 * Topics, channels, clients
 * ------------------------------------------------------------------------------------------- */

static void client_queue(view_client *c, view_msg *m);

static bool topic_wanted(const view_args *a, const char *topic)
{
    unsigned i;

    if (a->npatterns == 0)
        return true;
    for (i = 0; i < a->npatterns; i++)
        if (fnmatch(a->patterns[i], topic, 0) == 0)
            return true;
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

    if (m == NULL)
        return;
    for (c = srv->clients; c != NULL; c = c->next)
        client_queue(c, view_msg_ref(m));
    view_msg_unref(m);
}

/* ---------------------------------------------------------------------------------------------
 * Topic subscribers and what they bring
 * ------------------------------------------------------------------------------------------- */

static void topic_drain(view_server *srv, view_topic *t);

/* Lets go of the newest sample (the messages made of it stay until the next sample). */
static void topic_release_held(view_topic *t)
{
    ferry_err err;

    if (!t->has_held)
        return;
    t->has_held = false;
    err = ferry_release(t->sub, &t->held);
    if (err != FERRY_OK)
        fprintf(stderr, "ferry view: %s: ferry_release: %s\n", t->name, ferry_strerror(err));
}

/* Forgets the newest sample and its messages: a newer one comes, or the subscriber ends. */
static void topic_forget(view_topic *t)
{
    int k;

    topic_release_held(t);
    for (k = 0; k < CH_COUNT; k++) {
        view_msg_unref(t->made[k]);
        t->made[k] = NULL;
        t->unmade[k] = false;
    }
}

static void topic_unsubscribe(view_server *srv, view_topic *t)
{
    ferry_err err;

    if (t->sub == NULL)
        return;
    topic_forget(t);
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

    if (t->sub != NULL)
        return true;
    ferry_subscriber_options_init(&o);
    o.depth = 2;    /* drop-oldest (the default policy): the publisher never waits for a viewer */
    o.max_held = 4; /* the newest, kept for the clients, and the one being taken */
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
        if (t->fd_wsi != NULL)
            lws_set_opaque_user_data(t->fd_wsi, t);
    }
    return true;
}

/* Whether s is owed a message: its topic has a newer sample and the client may take one. */
static bool sub_owed(const view_sub *s)
{
    return s->topic->frames > s->frame && !s->unacked;
}

/* The newest sample's message on channel ch (a new reference), made now if it is not yet; NULL
 * when there is none. The sample is let go once every subscribed channel has its message. */
static view_msg *topic_message(view_server *srv, view_topic *t, int ch)
{
    int k;

    if (t->made[ch] == NULL && !t->unmade[ch] && t->has_held) {
        if (ch == CH_RAW) {
            t->made[ch] = view_raw_msg(srv, t, &t->held, t->held_ns);
        }
#ifdef FERRY_HAVE_TURBOJPEG
        else {
            view_msg *refusal = NULL;

            t->made[ch] = view_jpeg_msg(srv, t, &t->held, t->held_ns, &refusal);
            if (refusal != NULL)
                broadcast(srv, refusal);
        }
#endif
        t->unmade[ch] = t->made[ch] == NULL;
        for (k = 0; k < CH_COUNT; k++)
            if (t->subs[k] > 0 && t->made[k] == NULL && !t->unmade[k])
                break;
        if (k == CH_COUNT)
            topic_release_held(t);
    }
    return t->made[ch] != NULL ? view_msg_ref(t->made[ch]) : NULL;
}

/* One sample, thinned to --max-rate: true when it is kept as the topic's newest (then it is no
 * longer the caller's to release) and the clients that are owed it are told to write. */
static bool topic_sample(view_server *srv, view_topic *t, const ferry_sample *s)
{
    int64_t pt = s->publish_time.ns;
    view_client *c;
    unsigned i;

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
            return false;
        }
        t->next_ns = (t->next_ns != 0 && t->next_ns + srv->period_ns > pt)
                         ? t->next_ns + srv->period_ns
                         : pt + srv->period_ns;
    }
    if (t->subs[CH_RAW] == 0 && t->subs[CH_JPEG] == 0)
        return false;
    topic_forget(t);
    t->held = *s;
    t->has_held = true;
    t->held_ns = cli_realtime_ns();
    t->held_at = ferry_now().ns;
    t->frames++;
    for (c = srv->clients; c != NULL; c = c->next)
        for (i = 0; i < c->nsubs; i++)
            if (c->subs[i].topic == t && sub_owed(&c->subs[i])) {
                lws_callback_on_writable(c->wsi);
                break;
            }
    return true;
}

/* Takes what is queued (bounded per call: a fast stream cannot starve the clients). Each sample
 * kept replaces the last, so a burst costs takes and releases only. */
static void topic_drain(view_server *srv, view_topic *t)
{
    unsigned n;

    for (n = 0; t->sub != NULL && n < 64; n++) {
        ferry_sample s;
        ferry_err err = ferry_take(t->sub, &s);

        if (err == FERRY_EAGAIN) {
            /* Nothing queued: what woke the descriptor was housekeeping. */
            if (n == 0)
                ferry_wait(t->sub, 0);
            return;
        }
        if (err != FERRY_OK) {
            fprintf(stderr, "ferry view: %s: ferry_take: %s\n", t->name, ferry_strerror(err));
            return;
        }
        if (topic_sample(srv, t, &s))
            continue;
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

    t->subs[s->ch]--;
    c->subs[i] = c->subs[--c->nsubs];
    /* The ferry subscriber lingers a while (the tick ends it), so that a client that subscribes
     * and unsubscribes in a loop cannot make the publisher accept a subscriber for each. */
    if (t->subs[CH_RAW] == 0 && t->subs[CH_JPEG] == 0) {
        t->idle_until_ns = ferry_now().ns + LINGER_NS;
        topic_forget(t);
    }
}

uint64_t view_sub_dropped(const view_sub *s)
{
    uint64_t passed = s->topic->frames > s->frame + 1 ? s->topic->frames - s->frame - 1 : 0;

    return s->dropped + passed;
}

static view_sub *sub_find(view_client *c, uint32_t id, unsigned *at)
{
    unsigned i;

    for (i = 0; i < c->nsubs; i++)
        if (c->subs[i].id == id) {
            if (at != NULL)
                *at = i;
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
    if (!topic_subscribe(srv, t, c))
        return;
    s = &c->subs[c->nsubs++];
    memset(s, 0, sizeof *s);
    s->id = id;
    s->topic = t;
    s->ch = ch;
    s->gaps_base = t->gaps;
    s->capped_base = t->capped;
    /* Owed the newest sample when its message can still be had, else the next one. */
    s->frame = t->frames;
    if (t->frames > 0 && (t->has_held || t->made[ch] != NULL)) {
        s->frame--;
        lws_callback_on_writable(c->wsi);
    }
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

/* The client took the last message of subscription id: the next may go. Acknowledgements of
 * subscriptions that are gone (or owe none) are late, not wrong: ignored. */
static void client_ack(view_client *c, uint32_t id)
{
    view_sub *s = sub_find(c, id, NULL);

    if (s == NULL || !s->unacked)
        return;
    s->unacked = false;
    if (sub_owed(s))
        lws_callback_on_writable(c->wsi);
}

static void client_text(view_client *c, const unsigned char *text, size_t len)
{
    view_op *o = malloc(sizeof *o);
    const char *why;
    char buf[160];
    unsigned i;

    if (o == NULL)
        return;
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
    } else if (strcmp(o->op, "ferryAckMode") == 0) {
        c->acks = true;
    } else if (strcmp(o->op, "ferryAck") == 0) {
        for (i = 0; i < o->nids; i++)
            client_ack(c, o->ids[i]);
    } else {
        /* Printable and short, whatever the client sent. */
        for (i = 0; o->op[i] != '\0'; i++)
            if (o->op[i] < 0x20 || o->op[i] > 0x7e)
                o->op[i] = '?';
        client_queue(c, view_status_msg(2, "unsupported op '%.40s'", o->op));
    }
    free(o);
}

/* Whether c has anything to write. */
static bool client_owed(const view_client *c)
{
    unsigned i;

    if (c->out_count > 0)
        return true;
    for (i = 0; i < c->nsubs; i++)
        if (sub_owed(&c->subs[i]))
            return true;
    return false;
}

/* One message to the socket per writeable callback, as libwebsockets wants: control messages
 * first, then the subscriptions that are owed one, in turn, each the newest of its topic. The
 * socket reports writable only once the last message has nearly left it (VIEW_NOTSENT_LOWAT),
 * so nothing waits in the kernel for a client that reads slowly: the newer frames replace it. */
static int client_write(view_client *c)
{
    view_msg *m = NULL;
    unsigned i;
    int n;

    /* Called only once what libwebsockets held of the last message has gone. */
    if (c->rx_paused) {
        c->rx_paused = false;
        lws_rx_flow_control(c->wsi, 1);
    }
    if (c->out_count > 0) {
        m = c->out[c->out_head];
        c->out_head = (c->out_head + 1) % VIEW_OUT_SLOTS;
        c->out_count--;
        c->out_bytes -= m->len;
        n = lws_write(c->wsi, m->body, m->len, LWS_WRITE_TEXT);
    } else {
        view_sub *s = NULL;
        uint64_t passed;

        for (i = 0; i < c->nsubs && s == NULL; i++) {
            view_sub *cand = &c->subs[(c->rr + i) % c->nsubs];

            if (!sub_owed(cand))
                continue;
            m = topic_message(c->srv, cand->topic, cand->ch);
            if (m == NULL) {
                cand->frame = cand->topic->frames; /* none to be had of this sample */
                continue;
            }
            s = cand;
            c->rr = (c->rr + i + 1) % c->nsubs;
        }
        if (s == NULL)
            return 0;
        passed = s->topic->frames - s->frame - 1;
        s->dropped += passed;
        c->srv->messages_dropped += passed;
        s->frame = s->topic->frames;
        s->unacked = c->acks;
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
    if (n < 0)
        return -1;
    /* What the kernel did not take, libwebsockets keeps and sends as the socket drains. Until
     * then the client's messages are not read: libwebsockets 4.1, reading the end of a
     * connection while it holds such a rest, defers the close to flush it and reads the end
     * again, for ever, without returning to its event loop. A client that goes away then
     * shows as a hang-up, which closes at once. */
    if (lws_partial_buffered(c->wsi)) {
        c->rx_paused = true;
        lws_rx_flow_control(c->wsi, 0);
    }
    if (c->rx_paused || client_owed(c))
        lws_callback_on_writable(c->wsi);
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
    if (c->next != NULL)
        c->next->prev = c->prev;
    if (c->srv != NULL)
        srv->nclients--;
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
    bool ros2_cdr;
    view_topic *t;
    size_t i;

    if (!info->alive || info->kind != FERRY_ENDPOINT_PUBLISHER)
        return true;
    kind = ferry_ros2_kind_of_ferry(info->type_name, info->type_hash);
    /* The images of a ROS 2 node on rmw_ferry_cpp (type "sensor_msgs/msg/Image", whatever hash
     * its node computed) are CDR already: each sample is parsed before it is sent. */
    ros2_cdr = kind == FERRY_ROS2_NONE && strstr(info->type_name, "/msg/") != NULL &&
               (ferry_ros2_kind_of_name(info->type_name) == FERRY_ROS2_IMAGE ||
                ferry_ros2_kind_of_name(info->type_name) == FERRY_ROS2_COMPRESSED);
    if (ros2_cdr)
        kind = ferry_ros2_kind_of_name(info->type_name);
    if (kind == FERRY_ROS2_NONE || ferry_ros2_name(kind) == NULL)
        return true;
    if (!topic_wanted(srv->a, info->topic))
        return true;
    for (i = 0; i < srv->ntopics; i++) {
        t = srv->topics[i];
        if (strcmp(t->name, info->topic) != 0)
            continue;
        if (strcmp(t->type_name, info->type_name) == 0 && t->type_hash == info->type_hash) {
            t->seen = true;
            return true;
        }
    }
    for (i = 0; i < sc->nfound; i++)
        if (strcmp(sc->found[i]->name, info->topic) == 0)
            return true;
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
    t->ros2_cdr = ros2_cdr;
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
            if (c->subs[i].topic == t)
                sub_remove(c, i);
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

    if (sc == NULL)
        return;
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

        if (t->seen)
            continue;
        for (k = 0; k < CH_COUNT; k++)
            if (t->chan[k] != 0)
                gone[ngone++] = t->chan[k];
        topic_remove(srv, i);
    }
    if (ngone > 0)
        broadcast(srv, view_unadvertise_msg(gone, ngone));
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

        if (t->kind != FERRY_ROS2_IMAGE)
            continue;
        snprintf(name, sizeof name, "%s/compressed", t->name);
        for (j = 0; j < srv->ntopics && !taken; j++)
            taken = strcmp(srv->topics[j]->name, name) == 0;
        if (!taken)
            t->chan[CH_JPEG] = ++srv->next_chan;
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

/* ---------------------------------------------------------------------------------------------
 * Access (the token, the origin) and the descriptor budget
 * ------------------------------------------------------------------------------------------- */

/* Whether the request carries the token (?token=HEX): compared in constant time. */
static bool token_ok(view_server *srv, struct lws *wsi)
{
    char buf[128];
    const char *v;
    unsigned char diff = 0;
    size_t i, n = sizeof srv->token - 1;

    if (srv->a->no_token)
        return true;
    v = lws_get_urlarg_by_name(wsi, "token=", buf, (int)sizeof buf);
    if (v == NULL || strlen(v) != n)
        return false;
    for (i = 0; i < n; i++)
        diff |= (unsigned char)(v[i] ^ srv->token[i]);
    return diff == 0;
}

/* A browser's WebSocket (browsers always send Origin) is let in only from the view's own page
 * (http:// and the Host the request names) or an origin --origin allows: any web page the user
 * opens could otherwise try. A client that sends no Origin is no browser; it needs the token
 * like any other. */
static bool origin_allowed(view_server *srv, struct lws *wsi)
{
    char origin[256], host[256], own[300];
    unsigned i;

    if (lws_hdr_total_length(wsi, WSI_TOKEN_ORIGIN) <= 0)
        return true;
    if (lws_hdr_copy(wsi, origin, sizeof origin, WSI_TOKEN_ORIGIN) < 0)
        return false;
    if (lws_hdr_copy(wsi, host, sizeof host, WSI_TOKEN_HOST) > 0) {
        snprintf(own, sizeof own, "http://%s", host);
        if (strcmp(origin, own) == 0)
            return true;
    }
    for (i = 0; i < srv->a->norigins; i++)
        if (fnmatch(srv->a->origins[i], origin, 0) == 0)
            return true;
    return false;
}

static view_conn *conn_of(struct lws *wsi)
{
    return lws_get_opaque_user_data(wsi);
}

static void conn_unlink(view_server *srv, view_conn *c)
{
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        srv->conn_head = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    else
        srv->conn_tail = c->prev;
    lws_set_opaque_user_data(c->wsi, NULL);
    c->wsi = NULL;
    c->prev = NULL;
    c->next = srv->conn_free;
    srv->conn_free = c;
    srv->nconns--;
}

/* The connection to close for a newcomer: the oldest that has made no request with the token,
 * among those accepted in an earlier pass of the event loop (a burst of accepts never closes one
 * of its own: past the limit, the rest of the burst is refused). NULL when there is none. */
static view_conn *conn_victim(view_server *srv)
{
    view_conn *c;

    for (c = srv->conn_head; c != NULL; c = c->next)
        if (!c->kept)
            return c->pass < srv->pass ? c : NULL;
    return NULL;
}

/* Closes c's connection: it loses its slot now, and so is never served again; the socket is shut
 * down at once (the client sees the end) and libwebsockets closes the wsi on its next pass. */
static void conn_close(view_server *srv, view_conn *c)
{
    struct lws *wsi = c->wsi;

    conn_unlink(srv, c);
    shutdown(lws_get_socket_fd(wsi), SHUT_RDWR);
    lws_set_timeout(wsi, PENDING_TIMEOUT_KILLED_BY_PARENT, LWS_TO_KILL_ASYNC);
}

/* A newly accepted connection takes a slot: a free one, or that of conn_victim. false when
 * neither is there: the newcomer is refused. */
static bool conn_open(view_server *srv, struct lws *wsi)
{
    view_conn *c;

    if (srv->conn_free == NULL) {
        c = conn_victim(srv);
        if (c == NULL)
            return false;
        conn_close(srv, c);
        srv->n_shed++;
    }
    c = srv->conn_free;
    srv->conn_free = c->next;
    memset(c, 0, sizeof *c);
    c->wsi = wsi;
    c->since_ns = ferry_now().ns;
    c->pass = srv->pass;
    c->prev = srv->conn_tail;
    if (srv->conn_tail != NULL)
        srv->conn_tail->next = c;
    else
        srv->conn_head = c;
    srv->conn_tail = c;
    srv->nconns++;
    lws_set_opaque_user_data(wsi, c);
    return true;
}

/* Every second at most (and when the view stops): what the budget cost since the last such
 * line, in one line. */
static void conn_note(view_server *srv, int64_t now, bool now_anyway)
{
    if (now < srv->next_note_ns && !now_anyway)
        return;
    if (srv->n_shed + srv->n_refused + srv->n_failed + srv->n_lws_lines == 0)
        return;
    if (srv->n_shed + srv->n_refused + srv->n_failed > 0)
        fprintf(stderr,
                "ferry view: at --max-connections %u: %" PRIu64
                " connections that made no request closed for newer ones, %" PRIu64
                " refused, %" PRIu64
                " accepts failed for want of descriptors (since the last such line)\n",
                srv->max_conns, srv->n_shed, srv->n_refused, srv->n_failed);
    if (srv->n_lws_lines > 0)
        fprintf(stderr, "ferry view: libwebsockets: %" PRIu64 " more lines left out\n",
                srv->n_lws_lines);
    srv->n_shed = srv->n_refused = srv->n_failed = srv->n_lws_lines = 0;
    srv->next_note_ns = now + NS_PER_S;
}

/* Connections that made no request the view serves within VIEW_REQUEST_NS of their accept are
 * closed (the list is in accept order: the walk stops at the first that is young enough). */
static void conn_expire(view_server *srv, int64_t now)
{
    view_conn *c = srv->conn_head, *next;

    for (; c != NULL && now - c->since_ns >= VIEW_REQUEST_NS; c = next) {
        next = c->next;
        if (!c->kept)
            conn_close(srv, c);
    }
}

/* libwebsockets could not accept (its line "accept: errno N" said so): the process is out of
 * descriptors, although the event loop keeps within its budget (ferry itself took more than
 * VIEW_FD_RESERVE). libwebsockets would try again at once, for ever, while the connection waits
 * in the kernel's queue. One connection that made no request is closed instead, so that the
 * next accept finds a descriptor; where there is none to close, the waiting connection is taken
 * with the spare descriptor kept for this and closed. */
static void accept_failed(view_server *srv)
{
    view_conn *c = conn_victim(srv);
    int fd;

    srv->accept_failures = 0;
    srv->n_failed++;
    if (c != NULL) {
        conn_close(srv, c);
        srv->n_shed++;
        return;
    }
    if (srv->listen_fd < 0 || srv->spare_fd < 0)
        return;
    close(srv->spare_fd);
    fd = accept4(srv->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
        close(fd);
        srv->n_refused++;
    }
    srv->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

/* The listening socket libwebsockets made (it does not say which it is): the one of ours that
 * listens on the port. -1 when none is found. */
static int find_listen_fd(int port)
{
    struct rlimit rl;
    int fd, top = 1024;

    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < 65536)
        top = (int)rl.rlim_cur;
    for (fd = 0; fd < top; fd++) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        int on = 0;
        socklen_t olen = sizeof on;

        if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &on, &olen) != 0 || !on)
            continue;
        if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
            continue;
        if (ss.ss_family == AF_INET && ntohs(((struct sockaddr_in *)&ss)->sin_port) == port)
            return fd;
        if (ss.ss_family == AF_INET6 && ntohs(((struct sockaddr_in6 *)&ss)->sin6_port) == port)
            return fd;
    }
    return -1;
}

typedef struct view_http {
    size_t sent;
} view_http;

static int fd_cb(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                 size_t len);

/* Refuses a request: 403 (best effort: the caller closes the connection in any case). */
static void forbid(struct lws *wsi)
{
    if (lws_return_http_status(wsi, HTTP_STATUS_FORBIDDEN, NULL) != 0)
        return;
}

static int http_cb(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                   size_t len)
{
    view_http *h = user;
    view_server *srv = server_of(wsi);

    switch (reason) {
    case LWS_CALLBACK_FILTER_NETWORK_CONNECTION:
        /* Just accepted (wsi is the listener's): refused at once, before libwebsockets spends
         * anything on it, when every slot is held by a connection that may not be closed. */
        if (srv->conn_free == NULL && conn_victim(srv) == NULL) {
            srv->n_refused++;
            return 1;
        }
        return 0;
    case LWS_CALLBACK_SERVER_NEW_CLIENT_INSTANTIATED:
        if (!conn_open(srv, wsi)) {
            /* Not expected after the filter above; without a slot it is never served. */
            srv->n_refused++;
            shutdown(lws_get_socket_fd(wsi), SHUT_RDWR);
            lws_set_timeout(wsi, PENDING_TIMEOUT_KILLED_BY_PARENT, LWS_TO_KILL_ASYNC);
        }
        return 0;
    case LWS_CALLBACK_WSI_DESTROY: {
        /* Every wsi ends here (this is the vhost's first protocol); the subscribers' own
         * carry their topic, not a connection. */
        const struct lws_protocols *pr = lws_get_protocol(wsi);
        view_conn *c = conn_of(wsi);

        if (c != NULL && (pr == NULL || pr->callback != fd_cb) && c->wsi == wsi)
            conn_unlink(srv, c);
        return 0;
    }
    case LWS_CALLBACK_HTTP: {
        unsigned char buf[LWS_PRE + 1024], *start = buf + LWS_PRE, *p = start,
                                           *end = buf + sizeof buf - 1;
        const char *uri = in;
        view_conn *c = conn_of(wsi);

        (void)len;
        if (c == NULL)
            return -1;
        if (!token_ok(srv, wsi)) {
            forbid(wsi);
            return -1;
        }
        if (!srv->a->no_token)
            c->kept = true;
        if (uri == NULL || (strcmp(uri, "/") != 0 && strcmp(uri, "/index.html") != 0)) {
            if (lws_return_http_status(wsi, HTTP_STATUS_NOT_FOUND, NULL))
                return -1;
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

        if (n > sizeof buf - LWS_PRE)
            n = sizeof buf - LWS_PRE;
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

static int ws_cb(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                 size_t len)
{
    view_client *c = user;
    view_server *srv = server_of(wsi);

    switch (reason) {
    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION: {
        /* The upgrade: a connection with a slot, the token, and no foreign Origin. */
        view_conn *k = conn_of(wsi);

        if (k == NULL)
            return 1;
        if (!token_ok(srv, wsi) || !origin_allowed(srv, wsi)) {
            forbid(wsi);
            return 1;
        }
        k->kept = true;
        return 0;
    }
    case LWS_CALLBACK_ESTABLISHED: {
        int lowat = VIEW_NOTSENT_LOWAT;

        memset(c, 0, sizeof *c);
        c->wsi = wsi;
        if (srv->nclients >= VIEW_CLIENTS_MAX) {
            lws_close_reason(wsi, LWS_CLOSE_STATUS_POLICY_VIOLATION,
                             (unsigned char *)"too many clients", 16);
            return -1;
        }
        c->srv = srv;
        c->next = srv->clients;
        if (srv->clients != NULL)
            srv->clients->prev = c;
        srv->clients = c;
        srv->nclients++;
        srv->clients_total++;
        /* Without it the kernel takes megabytes of frames (the send buffer grows to
         * net.ipv4.tcp_wmem's maximum) that a slow client then reads seconds late. Best effort:
         * where it fails, frames queue there as they did. */
        if (setsockopt(lws_get_socket_fd(wsi), IPPROTO_TCP, TCP_NOTSENT_LOWAT, &lowat,
                       sizeof lowat) != 0 &&
            !srv->told_lowat) {
            fprintf(stderr, "ferry view: TCP_NOTSENT_LOWAT: %s: slow clients get frames late\n",
                    strerror(errno));
            srv->told_lowat = true;
        }
        client_queue(c, view_server_info_msg(srv));
        client_queue(c, view_advertise_msg(srv, 0, true));
        return 0;
    }
    case LWS_CALLBACK_RECEIVE: {
        bool final = lws_is_final_fragment(wsi) && lws_remaining_packet_payload(wsi) == 0;

        if (c->srv == NULL || c->kicked)
            return 0;
        if (lws_frame_is_binary(wsi)) {
            /* Client Message Data and service calls: not offered (no such capability). */
            if (final)
                client_queue(c, view_status_msg(2, "binary messages are not supported"));
            return 0;
        }
        if (final && c->rx_len == 0 && !c->rx_overflow) {
            if (len > VIEW_RX_MAX)
                goto too_large;
            client_text(c, in, len);
            return 0;
        }
        if (c->rx_overflow || c->rx_len + len > VIEW_RX_MAX)
            goto too_large;
        if (c->rx == NULL && (c->rx = malloc(VIEW_RX_MAX)) == NULL)
            return -1;
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
        if (c->srv == NULL)
            return -1;
        if (c->kicked && c->out_count == 0)
            return -1;
        return client_write(c);
    case LWS_CALLBACK_CLOSED:
        if (c->srv != NULL)
            client_close(c);
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
    if (reason != LWS_CALLBACK_RAW_RX_FILE)
        return 0;
    t = lws_get_opaque_user_data(wsi);
    if (t == NULL)
        return -1;
    topic_drain(server_of(wsi), t);
    return 0;
}

/* The WebSocket subprotocols: the Foxglove WebSocket protocol's name, and the name that the
 * Foxglove SDK's servers use for the same messages; a client offering either is served. */
static const struct lws_protocols protocols[] = {
    {"http", http_cb, sizeof(view_http), 0, 0, NULL, 0},
    {"foxglove.websocket.v1", ws_cb, sizeof(view_client), 4096, 0, NULL, 0},
    {"foxglove.sdk.v1", ws_cb, sizeof(view_client), 4096, 0, NULL, 0},
    {"ferry-subscriber", fd_cb, 0, 0, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

static void tick(lws_sorted_usec_list_t *sul)
{
    view_server *srv = lws_container_of(sul, view_server, tick);
    int64_t now = ferry_now().ns;
    view_client *c;
    size_t i;
    int k;

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

        if (t->sub == NULL)
            continue;
        if (t->subs[CH_RAW] == 0 && t->subs[CH_JPEG] == 0 && now >= t->idle_until_ns) {
            topic_unsubscribe(srv, t);
            continue;
        }
        topic_drain(srv, t);
        /* A sample that no client could take for a tick (a slow topic, or one that stopped,
         * and clients that are slow): its messages are made now, so that the publisher gets
         * its memory back and the clients still get it when they can. */
        if (t->has_held && now - t->held_at >= TICK_NS)
            for (k = 0; k < CH_COUNT; k++)
                if (t->subs[k] > 0)
                    view_msg_unref(topic_message(srv, t, k));
    }
    if (now >= srv->next_stats_ns) {
        for (c = srv->clients; c != NULL; c = c->next)
            if (c->stats && !c->kicked)
                client_queue(c, view_stats_msg(c));
        srv->next_stats_ns = now + STATS_PERIOD_NS;
    }
    conn_expire(srv, now);
    conn_note(srv, now, false);
    lws_sul_schedule(srv->ctx, 0, &srv->tick, tick, TICK_US);
}

/* libwebsockets' log has no context pointer: the one server of the process. */
static view_server *log_srv;

/* libwebsockets' errors, a few a second at most (the rest are counted, and conn_note says how
 * many): a stream of hostile connections must not become a stream of lines. Its "accept:
 * errno N" is not printed but acted on (accept_failed). */
static void lws_log_line(int level, const char *line)
{
    view_server *srv = log_srv;
    int64_t now;

    (void)level;
    if (srv != NULL) {
        if (strncmp(line, "accept: errno ", 14) == 0) {
            srv->accept_failures++;
            return;
        }
        now = ferry_now().ns;
        if (now - srv->lws_second_ns >= NS_PER_S) {
            srv->lws_second_ns = now;
            srv->lws_lines = 0;
        }
        if (srv->lws_lines >= 5) {
            srv->n_lws_lines++;
            return;
        }
        srv->lws_lines++;
    }
    fprintf(stderr, "ferry view: libwebsockets: %s", line);
}

/* While the context is made, libwebsockets' errors are kept, not printed: a port in use would
 * otherwise print three lines of its own before ours. Its log has no context pointer. */
static char lws_first_error[160];

static void lws_log_keep(int level, const char *line)
{
    size_t n;

    (void)level;
    if (lws_first_error[0] != '\0')
        return;
    snprintf(lws_first_error, sizeof lws_first_error, "%s", line);
    n = strlen(lws_first_error);
    while (n > 0 && (lws_first_error[n - 1] == '\n' || lws_first_error[n - 1] == '\r'))
        lws_first_error[--n] = '\0';
}

/* Why the context could not listen, in one line: the bind is tried again here, on a socket of
 * our own (as libwebsockets makes it: SO_REUSEADDR), for its errno. */
static int listen_fail(const view_args *a)
{
    struct addrinfo hints, *ai = NULL;
    char port[16];
    int fd, one = 1, err = 0;

    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV | AI_NUMERICHOST;
    snprintf(port, sizeof port, "%" PRIu64, a->port);
    if (getaddrinfo(a->bind, port, &hints, &ai) != 0 || ai == NULL) {
        /* libwebsockets also takes an interface's name: its own words then. */
        if (if_nametoindex(a->bind) != 0)
            return cli_fail(CMD, 1, "cannot listen on %s port %" PRIu64 "%s%s", a->bind, a->port,
                            lws_first_error[0] != '\0' ? ": libwebsockets: " : "", lws_first_error);
        return cli_fail(CMD, 1, "cannot listen on %s: not an IP address or interface of this host",
                        a->bind);
    }
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
        err = errno;
    } else {
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0)
            err = errno;
        close(fd);
    }
    freeaddrinfo(ai);
    if (err == EADDRINUSE)
        return cli_fail(CMD, 1, "port %" PRIu64 " is in use on %s", a->port, a->bind);
    if (err == EADDRNOTAVAIL)
        return cli_fail(CMD, 1, "cannot listen on %s: not an IP address or interface of this host",
                        a->bind);
    if (err == EACCES)
        return cli_fail(CMD, 1, "port %" PRIu64 " needs privileges (ports below 1024 do)", a->port);
    if (err != 0)
        return cli_fail(CMD, 1, "cannot listen on %s port %" PRIu64 ": %s", a->bind, a->port,
                        strerror(err));
    return cli_fail(CMD, 1, "cannot listen on %s port %" PRIu64 "%s%s", a->bind, a->port,
                    lws_first_error[0] != '\0' ? ": libwebsockets: " : "", lws_first_error);
}

/* The descriptor budget (--max-connections against RLIMIT_NOFILE), the connection slots, the
 * spare descriptor and the token: -1 when all is well, else the exit status after a line. */
static int budget(view_server *srv, view_args *a)
{
    unsigned char raw[VIEW_TOKEN_BYTES];
    struct rlimit rl;
    uint64_t avail;
    unsigned i;

    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        rl.rlim_cur = 1024;
    avail = rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > (1u << 20) ? (1u << 20) : rl.rlim_cur;
    if (avail < VIEW_FD_RESERVE + 16)
        return cli_fail(CMD, 1, "the descriptor limit (ulimit -n) is %" PRIu64 ": at least %d",
                        avail, VIEW_FD_RESERVE + 16);
    avail -= VIEW_FD_RESERVE;
    if (a->max_conns == 0)
        a->max_conns = avail / 4 < VIEW_CONNS_DEFAULT_MAX ? avail / 4 : VIEW_CONNS_DEFAULT_MAX;
    else if (a->max_conns > avail / 2)
        return cli_fail(CMD, 2,
                        "--max-connections %" PRIu64
                        ": the descriptor limit (ulimit -n) of %" PRIu64 " allows at most %" PRIu64,
                        a->max_conns, avail + VIEW_FD_RESERVE, avail / 2);
    srv->max_conns = (unsigned)a->max_conns;
    srv->fd_limit = 2 * srv->max_conns + VIEW_TOPICS_MAX + 16;
    if (srv->fd_limit > avail)
        srv->fd_limit = (unsigned)avail;
    srv->conns = calloc(srv->max_conns, sizeof *srv->conns);
    if (srv->conns == NULL)
        return cli_fail(CMD, 1, "out of memory");
    for (i = srv->max_conns; i-- > 0;) {
        srv->conns[i].next = srv->conn_free;
        srv->conn_free = &srv->conns[i];
    }
    srv->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (srv->spare_fd < 0)
        return cli_fail(CMD, 1, "/dev/null: %s", strerror(errno));
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw)
        return cli_fail(CMD, 1, "getrandom: %s", strerror(errno));
    for (i = 0; i < VIEW_TOKEN_BYTES; i++)
        snprintf(srv->token + 2 * i, 3, "%02x", raw[i]);
    return -1;
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
    srv->listen_fd = srv->spare_fd = -1;
    status = parse_args(argc, argv, a);
    if (status >= 0)
        goto out;
    status = budget(srv, a);
    if (status >= 0)
        goto out;
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

    lws_first_error[0] = '\0';
    lws_set_log_level(LLL_ERR, lws_log_keep);
    memset(&info, 0, sizeof info);
    info.port = (int)a->port;
    info.iface = a->bind;
    info.protocols = protocols;
    info.user = srv;
    info.vhost_name = "ferry";
    info.options = LWS_SERVER_OPTION_VALIDATE_UTF8 | LWS_SERVER_OPTION_FAIL_UPON_UNABLE_TO_BIND;
    if (strchr(a->bind, ':') == NULL)
        info.options |= LWS_SERVER_OPTION_DISABLE_IPV6;
    /* The largest message libwebsockets reads of a client in one piece; longer ones come in
     * pieces and are bounded by VIEW_RX_MAX. */
    info.pt_serv_buf_size = 16384;
    info.timeout_secs = 10;
    /* The event loop's descriptors: the listener and its own, the subscribers' and the
     * connections, twice --max-connections of them so that those closed for newcomers in one
     * pass of the loop fit until the next; never more than RLIMIT_NOFILE leaves past
     * VIEW_FD_RESERVE. Once full, libwebsockets stops accepting until one closes. */
    info.fd_limit_per_thread = srv->fd_limit;
    srv->ctx = lws_create_context(&info);
    srv->vh = srv->ctx != NULL ? lws_get_vhost_by_name(srv->ctx, "ferry") : NULL;
    if (srv->vh == NULL || lws_get_vhost_listen_port(srv->vh) <= 0) {
        status = listen_fail(a);
        goto out;
    }
    log_srv = srv;
    lws_set_log_level(LLL_ERR, lws_log_line);
    cli_stop_on_signals();
    setvbuf(stdout, NULL, _IOLBF, 0);
    {
        /* An IPv6 address goes in brackets in a URL. */
        bool v6 = strchr(a->bind, ':') != NULL;
        int port = lws_get_vhost_listen_port(srv->vh);
        char query[sizeof srv->token + 8] = "";

        srv->listen_fd = find_listen_fd(port);
        if (!a->no_token)
            snprintf(query, sizeof query, "?token=%s", srv->token);
        printf("ferry view: serving http://%s%s%s:%d/%s (Foxglove: ws://%s%s%s:%d/%s)\n",
               v6 ? "[" : "", a->bind, v6 ? "]" : "", port, query, v6 ? "[" : "", a->bind,
               v6 ? "]" : "", port, query);
        if (a->no_token)
            fprintf(stderr,
                    "ferry view: --no-token: whoever reaches port %d on %s gets every camera "
                    "(every user of this host%s)\n",
                    port, a->bind,
                    strcmp(a->bind, "127.0.0.1") == 0 || strcmp(a->bind, "::1") == 0
                        ? ""
                        : ", and the network");
    }
    scan(srv);
    srv->next_scan_ns = ferry_now().ns + SCAN_PERIOD_NS;
    lws_sul_schedule(srv->ctx, 0, &srv->tick, tick, TICK_US);
    while (!cli_stop_requested) {
        srv->pass++;
        if (lws_service(srv->ctx, 0) < 0) {
            status = cli_fail(CMD, 1, "the event loop failed");
            break;
        }
        if (srv->accept_failures > 0)
            accept_failed(srv);
    }
    conn_note(srv, ferry_now().ns, true);
    printf("ferry view: %" PRIu64 " clients, %" PRIu64 " messages sent, %" PRIu64
           " dropped for slow clients\n",
           srv->clients_total, srv->messages_sent, srv->messages_dropped);

out:
    srv->stopping = true;
    if (srv->ctx != NULL) {
        lws_sul_cancel(&srv->tick);
        lws_context_destroy(srv->ctx);
    }
    log_srv = NULL;
    free(srv->conns);
    if (srv->spare_fd >= 0)
        close(srv->spare_fd);
    for (i = 0; i < srv->ntopics; i++) {
        srv->topics[i]->fd_wsi = NULL;
        topic_unsubscribe(srv, srv->topics[i]);
        free(srv->topics[i]);
    }
#ifdef FERRY_HAVE_TURBOJPEG
    if (srv->tj != NULL)
        tjDestroy(srv->tj);
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
