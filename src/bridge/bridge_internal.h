/*
 * What the parts of the bridge (bridge.h) share, for its own files only: the bridge's state, its
 * routes, the scans' tables, and the functions one part calls in another. bridge.c holds the
 * options, the life cycle and the loop that waits on epoll; bridge_log.c the diagnostics;
 * bridge_names.c names, message kinds and the mark of a ferry domain's bridges; bridge_scan.c
 * the scans that find topics on both sides; bridge_out.c the ferry -> DDS direction; bridge_in.c
 * the DDS -> ferry direction, which reads samples with the CDR reader of src/ros2/ros2.h;
 * bridge_raw.c the ROS 2 types known by their definition only (rmw_ferry_cpp's topics), carried
 * as bytes through a Cyclone sertype of its own; bridge_dds.c the carried kinds' views and
 * messages as Cyclone's generated types, by the table of src/ros2/msg_table.h.
 *
 * Concurrency: the bridge's, one thread at a time. Only the data-available listener (bridge.c)
 * runs on Cyclone's threads, and it touches nothing but the eventfd.
 */
#ifndef FERRY_BRIDGE_INTERNAL_H
#define FERRY_BRIDGE_INTERNAL_H

#include "bridge.h"
#include "ros2.h"
#include "ros2_types.h"

#include <dds/dds.h>

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define NS_PER_MS 1000000LL
#define NS_PER_S 1000000000LL
#define WRITE_BLOCK_MS 100
#define KNOWN_PUBLISHERS_MAX 512u
#define WRITER_CACHE 32u
#define SCAN_TOPICS_MAX 256u
#define SEQ_SEEN_MAX 16u
#define MARK_PREFIX "ferry-bridge;key="

struct ddsi_serdata;
struct ddsi_sertype;

_Static_assert(sizeof(bool) == 1, "a DDS boolean is one byte");

/* A ROS 2 type the bridge knows by its definition only (bridge_raw.c): a topic of an
 * rmw_ferry_cpp node, kind FERRY_ROS2_NONE. */
typedef struct raw_type {
    char ros_name[FERRY_TYPE_NAME_MAX + 1];  /* "pkg/msg/Name", ferry's type name */
    char dds_name[FERRY_TYPE_NAME_MAX + 16]; /* "pkg::msg::dds_::Name_" */
    uint64_t hash;        /* the ferry type hash of its rmw_ferry_cpp endpoints */
    ferry_ros2_wire wire; /* how its samples lie in ferry */
    ferry_ros2_schema *schema;
    size_t plain_size;            /* wire PLAIN: the C layout's bytes */
    uint8_t *scratch;             /* wire PLAIN, out: the sample in CDR */
    struct ddsi_sertype *sertype; /* its DDS topic's (Cyclone's) */
} raw_type;

/* The last sequence handled of one ferry publisher, once two subscribers of a route may both
 * have delivered its samples (see out_route.retiring). */
typedef struct seq_seen {
    uint64_t publisher_id, sequence;
} seq_seen;

typedef struct out_route {
    char topic[FERRY_TOPIC_MAX + 2];
    ferry_ros2_kind kind;
    raw_type *raw;  /* kind FERRY_ROS2_NONE: a type known by its definition */
    bool transient; /* its writer offers TRANSIENT_LOCAL (CameraInfo, latched topics) */
    ferry_subscriber *sub;
    /* A reliable route's subscriber asks to block its publishers when full (lossless); a
     * best-effort one, or a reliable one a publisher refused, drops the oldest sample (counted). */
    bool blocking;
    /* The blocking subscriber that a drop-oldest one replaced, kept until the next scan so that
     * no sample published meanwhile is missed; samples both deliver are written once (seen). */
    ferry_subscriber *retiring;
    bool dedupe; /* it had two subscribers: samples are checked against seen */
    seq_seen seen[SEQ_SEEN_MAX];
    unsigned nseen;
    /* A sample whose reliable write timed out: written again before anything else is taken. */
    ferry_sample pending;
    ferry_subscriber *pending_sub;
    uint64_t dropped_gone; /* queue drops of subscribers already destroyed */
    dds_entity_t dtopic, writer;
    unsigned missing;
    unsigned finishing; /* scans spent closing: writing what is left, awaiting acknowledgements */
    bool active;        /* past its first scan: see ferry__bridge_scan_out */
    bool yield;         /* a bridge of a lower pid sends the topic out */
    uint64_t samples, bytes, failed, invalid;
    bool reliable;
    uint32_t qos_reported; /* offered-incompatible QoS matches logged so far */
} out_route;

typedef struct writer_verdict {
    dds_instance_handle_t handle;
    bool ignore;
} writer_verdict;

typedef struct in_route {
    char topic[FERRY_TOPIC_MAX + 2];
    ferry_ros2_kind kind;
    char ros_type[FERRY_TYPE_NAME_MAX + 1]; /* kind FERRY_ROS2_NONE: "pkg/msg/Name" */
    raw_type *raw;                          /* once a local node described that type */
    dds_entity_t dtopic, reader;
    ferry_publisher *pub;
    uint64_t pub_id;
    int64_t last_wanted_ns;
    int64_t retry_ns; /* when creation failed: not before then */
    bool reliable;
    /* The reader asks for TRANSIENT_LOCAL (every writer offered it when the reader was made);
     * the ferry publisher then keeps history samples for late ferry subscribers. */
    bool transient;
    uint32_t history;
    uint32_t qos_reported;             /* requested-incompatible QoS matches logged so far */
    uint64_t lost_gone, rejected_gone; /* counted by readers replaced since */
    writer_verdict writers[WRITER_CACHE];
    unsigned nwriters, next_writer;
    uint64_t samples, bytes, invalid, dropped;
} in_route;

typedef struct known_publisher {
    uint64_t id;
    bool bridge;
} known_publisher;

typedef struct scan_topic {
    char topic[FERRY_TOPIC_MAX + 2];
    ferry_ros2_kind kind;
    /* kind FERRY_ROS2_NONE: a ROS 2 type known by its definition ("pkg/msg/Name"), with the
     * ferry type hash of its publishers (out) */
    char ros_type[FERRY_TYPE_NAME_MAX + 1];
    uint64_t hash;
    uint32_t latched;     /* out: the most a publisher keeps for late joiners */
    bool plain_publisher; /* a live publisher that is not a bridge */
    bool other_bridge;    /* a bridge of a lower pid sends it out already */
    bool best_effort;     /* in: some DDS writer is best effort */
    bool transient;       /* in: some DDS writer offers TRANSIENT_LOCAL (or more) */
    bool volatile_writer; /* in: some DDS writer is VOLATILE */
    uint32_t history;     /* in: the most that the transient writers keep for late joiners */
} scan_topic;

typedef struct rate_log {
    int64_t last_ns; /* start of the current one-second window */
    unsigned lines;  /* said in that window */
    uint64_t suppressed;
} rate_log;

struct ferry_bridge {
    ferry_bridge_options o;
    char *patterns[FERRY_BRIDGE_PATTERNS_MAX];
    char *dds_config;
    ferry_node *node;
    char dir_real[PATH_MAX];
    char mark[sizeof MARK_PREFIX + 17];
    pid_t pid;
    dds_entity_t domain, participant, pubreader;
    dds_guid_t participant_guid;
    dds_listener_t *listener;
    int epfd, evfd;
    int64_t next_scan_ns;
    out_route *outs[FERRY_BRIDGE_ROUTES_MAX];
    size_t nouts;
    in_route *ins[FERRY_BRIDGE_ROUTES_MAX];
    size_t nins;
    known_publisher known[KNOWN_PUBLISHERS_MAX];
    size_t nknown;
    scan_topic scan[SCAN_TOPICS_MAX];
    size_t nscan;
    ferry_bridge_stats st; /* the routes' own counters are added in ferry_bridge_stats_get */
    rate_log log_out_invalid, log_in_invalid, log_in_dropped, log_out_failed, log_limit, log_qos;
};

/* bridge_log.c */
void ferry__bridge_log(ferry_bridge *b, ferry_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
bool ferry__bridge_rate_ok_n(rate_log *r, unsigned per_second);
bool ferry__bridge_rate_ok(rate_log *r);

/* bridge_names.c */
ferry_ros2_kind ferry__bridge_kind_of_ferry(const char *type_name, uint64_t hash);
ferry_ros2_kind ferry__bridge_kind_of_dds(const char *type_name);
const char *ferry__bridge_ferry_type(ferry_ros2_kind k);
uint64_t ferry__bridge_ferry_hash_of(ferry_ros2_kind k);
const dds_topic_descriptor_t *ferry__bridge_descriptor(ferry_ros2_kind k);

/* bridge_dds.c: a carried kind's view (ferry_ros2_kind_desc.view_get's) as a sample of its DDS
 * type in sample (sample_cap bytes, at least the descriptor's m_size, aligned as max_align_t),
 * pointing into the view and into room (room_cap bytes, for sequences of structs); and a sample
 * Cyclone deserialised as a parsed message pointing into it. False when the view does not fit
 * (a bulk over 4 GiB, no room) or the kind's members and its DDS type disagree. */
bool ferry__bridge_dds_from_view(ferry_ros2_kind k, const void *view, void *sample,
                                 size_t sample_cap, void *room, size_t room_cap);
bool ferry__bridge_dds_to_msg(ferry_ros2_kind k, const void *sample, ferry_ros2_msg *msg);
bool ferry__bridge_normalise(const char *topic, char out[FERRY_TOPIC_MAX + 2]);
bool ferry__bridge_pattern_match(const ferry_bridge *b, const char *topic);
bool ferry__bridge_is_bridge_node(const char *name);
void ferry__bridge_make_mark(ferry_bridge *b);
bool ferry__bridge_has_mark(const ferry_bridge *b, const dds_qos_t *qos);
bool ferry__bridge_qos_reliable(const dds_qos_t *qos);
/* Whether an endpoint offers or asks for TRANSIENT_LOCAL durability (or more); *depth (may be
 * NULL): what its durability service keeps for late joiners (UINT32_MAX: KEEP_ALL). */
bool ferry__bridge_qos_transient(const dds_qos_t *qos, uint32_t *depth);
/* The name of a dds_qos_policy_id_t, as the incompatible-QoS statuses give it. */
const char *ferry__bridge_qos_policy_name(uint32_t id);

/* bridge.c: the epoll set */
void ferry__bridge_watch_fd(ferry_bridge *b, int fd);
void ferry__bridge_unwatch_fd(ferry_bridge *b, int fd);

/* bridge_out.c */
void ferry__bridge_note_publisher(ferry_bridge *b, uint64_t id, bool bridge);
out_route *ferry__bridge_out_create(ferry_bridge *b, const scan_topic *t);
void ferry__bridge_out_destroy(ferry_bridge *b, out_route *r);
/* Takes and writes what the route's subscribers have queued; false when a write timed out
 * (the sample is kept and written again at the next call). */
bool ferry__bridge_out_pump(ferry_bridge *b, out_route *r);
/* Pumps; true when nothing is left to write nor to be acknowledged by the DDS readers. */
bool ferry__bridge_out_finished(ferry_bridge *b, out_route *r);
void ferry__bridge_out_check(ferry_bridge *b, out_route *r);
/* Logs the DDS readers r's writer could not match since the last call (rate-limited). */
void ferry__bridge_out_check_qos(ferry_bridge *b, out_route *r);
uint64_t ferry__bridge_out_queue_dropped(const out_route *r);

/* bridge_in.c */
bool ferry__bridge_in_open(ferry_bridge *b, in_route *r, bool log);
/* Replaces r's DDS reader by one of this reliability and durability (after taking what the old
 * one holds; its loss counters stay in r's); false (logged) when the new one is refused: the
 * route then has no reader until the next scan retries. */
bool ferry__bridge_in_reopen_reader(ferry_bridge *b, in_route *r, bool reliable, bool transient);
/* Logs the DDS writers r's reader could not match since the last call (rate-limited). */
void ferry__bridge_in_check_qos(ferry_bridge *b, in_route *r);
void ferry__bridge_in_destroy(ferry_bridge *b, in_route *r);
void ferry__bridge_in_pump(ferry_bridge *b, in_route *r);
/* The losses DDS and the local subscribers report for r (see ferry_bridge_stats). */
typedef struct in_losses {
    uint64_t lost, rejected, subscriber_dropped;
} in_losses;
void ferry__bridge_in_losses(const in_route *r, in_losses *out);

/* bridge_raw.c */
/* "pkg/msg/Name" <-> "pkg::msg::dds_::Name_"; false for a name of another form. */
bool ferry__bridge_dds_type_of(const char *ros, char *out, size_t cap);
bool ferry__bridge_ros_type_of(const char *dds, char *out, size_t cap);
/* The ferry type name a route carries, for the logs. */
const char *ferry__bridge_route_type(ferry_ros2_kind kind, const raw_type *raw);
/* The type ros_name as the domain's graph files describe it (hash FERRY_ROS2_HASH_ANY: any);
 * FERRY_EAGAIN when no local node described it (yet). */
ferry_err ferry__bridge_raw_open(ferry_bridge *b, const char *ros_name, uint64_t hash,
                                 raw_type **out);
void ferry__bridge_raw_close(raw_type *t);
/* A DDS topic of t's DDS type name, through the bridge's sertype for bytes; sets t->sertype. */
dds_entity_t ferry__bridge_raw_topic(ferry_bridge *b, raw_type *t, const char *dds_topic);
/* Checks (and converts, for a fixed-size type) a taken sample and writes it to r's writer;
 * false when it is not a valid message of r's type. */
bool ferry__bridge_raw_write(out_route *r, const ferry_sample *s, dds_return_t *rc);
/* Checks (and converts) a DDS sample and publishes it on r's ferry publisher. FERRY_EINVAL (why
 * says what) when it is not a valid message of r's type; the publisher's errors otherwise. */
ferry_err ferry__bridge_raw_publish(in_route *r, struct ddsi_serdata *sd, const char **why);

/* bridge_scan.c */
void ferry__bridge_scan_out(ferry_bridge *b);
void ferry__bridge_scan_in(ferry_bridge *b);

#endif
