/*
 * The live view's shared parts (ferry view: view.c drives the event loop, the topics and the
 * clients; view_proto.c makes and parses the messages of the Foxglove WebSocket protocol).
 * Single-threaded, like the command: nothing here may be used from another thread.
 */
#ifndef FERRY_CLI_VIEW_H
#define FERRY_CLI_VIEW_H

#include "cli.h"
#include "ros2.h"

#include <libwebsockets.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef FERRY_HAVE_TURBOJPEG
#include <turbojpeg.h>
#endif

#define VIEW_TOPIC_PATTERNS_MAX 64
#define VIEW_ORIGINS_MAX 16
#define VIEW_TOPICS_MAX 1024            /* topics offered at once */
#define VIEW_CLIENTS_MAX 64             /* WebSocket clients at once */
#define VIEW_SUBS_MAX 256               /* subscriptions of one client */
#define VIEW_RX_MAX 65536               /* one text message of a client, in bytes */
#define VIEW_OUT_SLOTS 64               /* control messages queued for one client */
#define VIEW_OUT_BYTES (16u << 20)      /* their bytes together */
#define VIEW_MSG_MAX ((size_t)1 << 30)  /* one message sent: far beyond any camera frame */
#define VIEW_OP_ITEMS_MAX VIEW_SUBS_MAX /* entries of one subscribe or unsubscribe */
#define VIEW_DATA_HEAD 13               /* opcode, subscription id, timestamp */
/* A client's socket reports writable only while fewer bytes than this wait unsent in the
 * kernel (TCP_NOTSENT_LOWAT): the next message is chosen when the last one has left. */
#define VIEW_NOTSENT_LOWAT 16384
/* The access token: random bytes from getrandom, printed in hex in the URL (?token=...). */
#define VIEW_TOKEN_BYTES 16
/* A connection that has not made a request the view serves (with the token) this long after it
 * was accepted is closed. */
#define VIEW_REQUEST_NS (5 * 1000000000LL)
/* Descriptors kept for ferry itself (the node, the subscribers, stdio) out of RLIMIT_NOFILE:
 * the event loop never holds more than the rest. */
#define VIEW_FD_RESERVE 64
#define VIEW_CONNS_DEFAULT_MAX 256 /* --max-connections, where RLIMIT_NOFILE allows */

typedef struct view_args {
    cli_opts o; /* --domain, --dir */
    uint64_t port;
    const char *bind;
    const char *patterns[VIEW_TOPIC_PATTERNS_MAX];
    char pattern_buf[VIEW_TOPIC_PATTERNS_MAX][FERRY_TOPIC_MAX + 2];
    unsigned npatterns;
    double max_rate;
    uint64_t jpeg_quality;
    const char *origins[VIEW_ORIGINS_MAX]; /* --origin: the web origins allowed, or none */
    unsigned norigins;
    bool no_token;      /* --no-token: anyone who reaches the port is served */
    uint64_t max_conns; /* --max-connections; 0: the default for the descriptor limit */
} view_args;

/* ---------------------------------------------------------------------------------------------
 * Messages as sent: one allocation, shared by every client it goes to
 * ------------------------------------------------------------------------------------------- */

/* The body is preceded by LWS_PRE bytes, where libwebsockets writes the frame header. A binary
 * message starts with a VIEW_DATA_HEAD slot that each client's subscription id fills just before
 * it is written: single-threaded, and lws_write either sends the frame or copies what it could
 * not send, so sharing the bytes is safe. */
typedef struct view_msg {
    unsigned refs;
    bool binary;
    int64_t recv_ns; /* the Message Data timestamp: wall clock when taken */
    size_t len;
    unsigned char *body;
    unsigned char *mem; /* LWS_PRE + len bytes */
} view_msg;

/* A message of len bytes (binary: Message Data, its head slot first), one reference; NULL when
 * out of memory or over VIEW_MSG_MAX. */
view_msg *view_msg_new(size_t len, bool binary);
view_msg *view_msg_ref(view_msg *m);
void view_msg_unref(view_msg *m); /* NULL is fine */

/* JSON text is written to a memory stream that starts with the LWS_PRE bytes. */
typedef struct view_text {
    FILE *f;
    char *buf;
    size_t len;
} view_text;

/* Opens a stream for one JSON text message; false when out of memory. */
bool view_text_open(view_text *t);
/* Closes it; the message, or NULL when out of memory. */
view_msg *view_text_close(view_text *t);

/* ---------------------------------------------------------------------------------------------
 * Topics, channels, clients
 * ------------------------------------------------------------------------------------------- */

enum { CH_RAW, CH_JPEG, CH_COUNT };

typedef struct view_server view_server;

/* A TCP connection of the view, from its accept to its close (a WebSocket client's too). The
 * open ones are listed oldest first; each holds one of --max-connections slots, and its wsi
 * points at it (opaque user data). A connection without a slot is never served. */
typedef struct view_conn {
    struct lws *wsi;
    struct view_conn *prev, *next; /* the open list; or the free list (next) */
    int64_t since_ns;              /* accepted, on ferry's clock */
    uint64_t pass;                 /* the event loop's pass that accepted it */
    bool kept; /* made a request with the token (or, with --no-token, is a WebSocket client):
                * never closed for a newcomer */
} view_conn;

typedef struct view_topic {
    char name[FERRY_TOPIC_MAX + 2];
    char type_name[FERRY_TYPE_NAME_MAX + 1];
    uint64_t type_hash;
    ferry_ros2_kind kind;
    bool ros2_cdr; /* a ROS 2 node's topic (rmw_ferry_cpp): its samples are the CDR itself */
    uint32_t chan[CH_COUNT]; /* channel ids; 0: not offered */
    unsigned subs[CH_COUNT]; /* client subscriptions to each */
    bool seen;               /* in the last scan */
    ferry_subscriber *sub;   /* while a client subscribes, and LINGER_NS after */
    struct lws *fd_wsi;      /* the subscriber's descriptor in the event loop */
    int64_t next_ns;         /* --max-rate: the publish time the next message may have */
    uint64_t last_pub, last_seq;
    uint64_t gaps;         /* samples of the topic the view never saw (sequence gaps) */
    uint64_t capped;       /* samples skipped for --max-rate */
    bool jpeg_refused;     /* told the clients once that this encoding has no JPEG */
    int64_t idle_until_ns; /* with no client subscribed: when the ferry subscriber ends */
    /* The newest sample, kept (taken, not yet released) until every subscribed channel has its
     * message of it or a newer sample replaces it. Messages are made when the first client is
     * ready to send one, so a sample that no client takes in time costs no serialisation and
     * no JPEG, and what is sent is the newest there is when the socket can take it. */
    uint64_t frames;   /* samples kept for the clients so far: the newest's number */
    ferry_sample held; /* the newest, while has_held */
    bool has_held;
    int64_t held_ns;          /* wall clock when it was taken: its Message Data timestamp */
    int64_t held_at;          /* the same on ferry's clock */
    view_msg *made[CH_COUNT]; /* the newest's message on each channel, once made */
    bool unmade[CH_COUNT];    /* the newest has none there (not valid, no JPEG of it) */
} view_topic;

/* A client's subscription. It is owed a message when its topic's newest sample is newer than
 * the last it sent (frame), unless the client acknowledges messages and has not acknowledged
 * the last one yet. Frames that came and went in between are its drops. */
typedef struct view_sub {
    uint32_t id;
    view_topic *topic;
    int ch;
    uint64_t frame; /* the topic's frame number last sent (or skipped) */
    bool unacked;   /* the client acknowledges messages and owes one for the last */
    uint64_t sent, dropped, gaps_base, capped_base;
} view_sub;

typedef struct view_client {
    view_server *srv;
    struct lws *wsi;
    struct view_client *prev, *next;
    view_sub subs[VIEW_SUBS_MAX];
    unsigned nsubs;
    unsigned rr; /* where the next look for a pending message starts */
    view_msg *out[VIEW_OUT_SLOTS];
    unsigned out_head, out_count;
    size_t out_bytes;
    unsigned char *rx; /* VIEW_RX_MAX bytes, once a message comes in pieces */
    size_t rx_len;
    bool rx_overflow;
    bool stats;
    bool acks;      /* asked to acknowledge each message (ferryAckMode) */
    bool rx_paused; /* not read while libwebsockets holds the rest of a message */
    bool kicked;    /* broke a bound: closing */
} view_client;

struct view_server {
    const view_args *a;
    struct lws_context *ctx;
    struct lws_vhost *vh;
    ferry_node *node;
    view_topic *topics[VIEW_TOPICS_MAX];
    size_t ntopics;
    uint32_t next_chan;
    view_client *clients;
    unsigned nclients;
    lws_sorted_usec_list_t tick;
    int64_t next_scan_ns, next_stats_ns;
    int64_t period_ns; /* --max-rate; 0: none */
    bool stopping;
    bool told_full;  /* said once that VIEW_TOPICS_MAX was reached */
    bool told_lowat; /* said once that TCP_NOTSENT_LOWAT failed */
    char session[48];
    ferry_ros2_cdr cdr;
#ifdef FERRY_HAVE_TURBOJPEG
    tjhandle tj;
    unsigned char *jpeg;
    unsigned long jpeg_cap;
#endif
    uint64_t clients_total, messages_sent, messages_dropped;
    /* Access and the descriptor budget. */
    char token[2 * VIEW_TOKEN_BYTES + 1];
    view_conn *conns; /* max_conns slots */
    view_conn *conn_head, *conn_tail, *conn_free;
    unsigned nconns, max_conns;
    unsigned fd_limit;       /* libwebsockets' fd_limit_per_thread */
    uint64_t pass;           /* lws_service calls so far */
    int listen_fd, spare_fd; /* for accepts that fail for want of descriptors */
    uint64_t accept_failures;
    /* Counted since the last line that says so (at most one a second). */
    uint64_t n_shed, n_refused, n_failed, n_lws_lines;
    int64_t next_note_ns;
    unsigned lws_lines; /* libwebsockets' lines printed in this second */
    int64_t lws_second_ns;
};

/* A client's text message, parsed with lws's bounded streaming JSON parser (lejp): nesting,
 * path and string lengths are capped by it; the entries are capped here. */
typedef struct view_op {
    char op[LEJP_STRING_CHUNK + 1];
    bool op_set, bad;
    const char *why;
    struct {
        uint32_t id, chan;
        bool has_id, has_chan;
    } items[VIEW_OP_ITEMS_MAX];
    unsigned nitems;
    uint32_t ids[VIEW_OP_ITEMS_MAX];
    unsigned nids;
} view_op;

/* ---------------------------------------------------------------------------------------------
 * The protocol's messages (view_proto.c)
 * ------------------------------------------------------------------------------------------- */

/* {"op":"status"}: level 0 info, 1 warning, 2 error. */
view_msg *view_status_msg(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* {"op":"serverInfo"} for a new client. */
view_msg *view_server_info_msg(view_server *srv);
/* {"op":"advertise"} of the channels of srv->topics[from..); NULL when there is none, unless
 * always (a new client gets one in any case, as the protocol says). */
view_msg *view_advertise_msg(view_server *srv, size_t from, bool always);
/* {"op":"unadvertise"} of n channel ids. */
view_msg *view_unadvertise_msg(const uint32_t *ids, size_t n);
/* Messages of s's topic that s will never send: dropped, and those passed over since its last. */
uint64_t view_sub_dropped(const view_sub *s);
/* {"op":"ferryStats"} of a client's subscriptions. */
view_msg *view_stats_msg(view_client *c);
/* Message Data of a taken sample of t, serialised by ferry_ros2 (NULL when it is not valid). */
view_msg *view_raw_msg(view_server *srv, view_topic *t, const ferry_sample *s, int64_t now);
#ifdef FERRY_HAVE_TURBOJPEG
/* Message Data of a CompressedImage, the image sample s in JPEG; NULL when it cannot be, and
 * the first time for t a warning status in *refusal for the clients. */
view_msg *view_jpeg_msg(view_server *srv, view_topic *t, const ferry_sample *s, int64_t now,
                        view_msg **refusal);
#endif
const char *view_op_parse(const unsigned char *text, size_t len, view_op *o, char *why, size_t cap);

#endif
