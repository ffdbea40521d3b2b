/*
 * The ferry -> DDS direction. An out route subscribes to a ferry topic and writes each sample it
 * takes to a DDS writer, through a DDS sample whose data sequence points into the taken sample:
 * DDS's serialisation is the only copy. Samples of bridge publishers are not sent back; the
 * table of known publisher ids says which publishers those are.
 *
 * A reliable route loses nothing on its way: its subscriber asks to block its publishers when
 * its queue is full (FERRY_OVERFLOW_BLOCK, which a publisher admits with admit_blocking), its
 * DDS writer keeps every unacknowledged sample (KEEP_ALL), and a write that times out is tried
 * again before anything else is taken. A publisher that refuses a blocking subscriber turns the
 * route into a drop-oldest one for good, as a best-effort route is: its queue drops are counted.
 */
#include "bridge_internal.h"

#include <ferry/msg.h>

#include "msg_table.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * Publisher ids: which ferry publishers are bridges
 * ------------------------------------------------------------------------------------------- */

void ferry__bridge_note_publisher(ferry_bridge *b, uint64_t id, bool bridge)
{
    size_t i;

    for (i = 0; i < b->nknown; i++)
        if (b->known[i].id == id) {
            b->known[i].bridge = bridge;
            return;
        }
    if (b->nknown < KNOWN_PUBLISHERS_MAX) {
        b->known[b->nknown].id = id;
        b->known[b->nknown].bridge = bridge;
        b->nknown++;
    }
}

static int publisher_verdict(const ferry_bridge *b, uint64_t id)
{
    size_t i;

    for (i = 0; i < b->nins; i++)
        if (b->ins[i]->pub != NULL && b->ins[i]->pub_id == id)
            return 1;
    for (i = 0; i < b->nknown; i++)
        if (b->known[i].id == id)
            return b->known[i].bridge ? 1 : 0;
    return -1;
}

static bool note_topic_publishers(void *arg, const ferry_endpoint_info *info)
{
    ferry_bridge *b = arg;

    if (info->kind == FERRY_ENDPOINT_PUBLISHER)
        ferry__bridge_note_publisher(b, info->id, ferry__bridge_is_bridge_node(info->node_name));
    return true;
}

/* ---------------------------------------------------------------------------------------------
 * Out routes: ferry -> DDS
 * ------------------------------------------------------------------------------------------- */

static dds_qos_t *writer_qos(const ferry_bridge *b, const out_route *r, bool *reliable)
{
    dds_qos_t *q = dds_create_qos();
    dds_data_representation_id_t rep[1] = {DDS_DATA_REPRESENTATION_XCDR1};

    *reliable = b->o.reliability != FERRY_BRIDGE_BEST_EFFORT;
    dds_qset_reliability(q, *reliable ? DDS_RELIABILITY_RELIABLE : DDS_RELIABILITY_BEST_EFFORT,
                         DDS_MSECS(WRITE_BLOCK_MS));
    /* Reliable: a KEEP_LAST writer forgets an unacknowledged sample once depth newer ones were
     * written, and a reader that acknowledges late loses it; KEEP_ALL keeps it until every
     * reader has it, and Cyclone's write-history watermark (WhcHigh) bounds what it keeps by
     * making dds_write wait. A best-effort writer keeps nothing for its readers. */
    if (*reliable)
        dds_qset_history(q, DDS_HISTORY_KEEP_ALL, 0);
    else
        dds_qset_history(q, DDS_HISTORY_KEEP_LAST, (int32_t)b->o.depth);
    /* A camera's calibration is state, not a stream: offered transient-local, so a subscriber
     * that asks for it (as image pipelines do) matches and gets the last ones on joining; an
     * offer of transient-local matches volatile readers too. The streams stay volatile: a
     * transient-local writer keeps its history of frames for late joiners for ever. Cyclone
     * keeps for late joiners what the durability service history says (its default is KEEP_LAST
     * 1, whatever the writer's history): the last depth samples, also with a KEEP_ALL history,
     * which would otherwise keep every one. A topic whose ferry publishers keep samples for late
     * joiners (an rmw_ferry_cpp node's transient-local publisher: latched) is offered so too. */
    if (r->transient) {
        dds_qset_durability(q, DDS_DURABILITY_TRANSIENT_LOCAL);
        dds_qset_durability_service(q, 0, DDS_HISTORY_KEEP_LAST, (int32_t)b->o.depth,
                                    DDS_LENGTH_UNLIMITED, DDS_LENGTH_UNLIMITED,
                                    DDS_LENGTH_UNLIMITED);
    } else {
        dds_qset_durability(q, DDS_DURABILITY_VOLATILE);
    }
    dds_qset_data_representation(q, 1, rep);
    dds_qset_userdata(q, b->mark, strlen(b->mark));
    return q;
}

static ferry_err subscribe(ferry_bridge *b, out_route *r, bool blocking, ferry_subscriber **out)
{
    ferry_subscriber_options so;

    ferry_subscriber_options_init(&so);
    so.depth = b->o.depth;
    so.max_held = 2;
    so.overflow = blocking ? FERRY_OVERFLOW_BLOCK : FERRY_OVERFLOW_DROP_OLDEST;
    if (r->raw != NULL) {
        /* A latched topic's last samples, published before the bridge came, go out too. */
        so.history = r->transient ? b->o.depth : 0;
        return ferry_subscriber_create(out, b->node, r->topic, r->raw->ros_name, r->raw->hash, &so);
    }
    return ferry_subscriber_create(out, b->node, r->topic, ferry__bridge_ferry_type(r->kind),
                                   ferry__bridge_ferry_hash_of(r->kind), &so);
}

static uint64_t sub_dropped(ferry_subscriber *sub)
{
    ferry_subscriber_stats st;

    if (sub == NULL || ferry_subscriber_stats_get(sub, &st) != FERRY_OK)
        return 0;
    return st.dropped;
}

uint64_t ferry__bridge_out_queue_dropped(const out_route *r)
{
    return r->dropped_gone + sub_dropped(r->sub) + sub_dropped(r->retiring);
}

static void unsubscribe(ferry_bridge *b, out_route *r, ferry_subscriber *sub)
{
    ferry_err err;
    int fd;

    if (sub == NULL)
        return;
    if (r->pending_sub == sub) {
        /* Only when the route closes: a sample DDS had no room for, given up. */
        r->failed++;
        b->st.out_failed++;
        ferry_release(sub, &r->pending);
        r->pending_sub = NULL;
    }
    r->dropped_gone += sub_dropped(sub);
    if (ferry_subscriber_fd(sub, &fd) == FERRY_OK)
        ferry__bridge_unwatch_fd(b, fd);
    err = ferry_subscriber_destroy(sub);
    if (err != FERRY_OK)
        ferry__bridge_log(b, FERRY_LOG_ERROR, "out %s: ferry_subscriber_destroy: %s", r->topic,
                          ferry_strerror(err));
}

void ferry__bridge_out_destroy(ferry_bridge *b, out_route *r)
{
    unsubscribe(b, r, r->retiring);
    r->retiring = NULL;
    unsubscribe(b, r, r->sub);
    r->sub = NULL;
    b->st.out_queue_dropped += r->dropped_gone;
    if (r->writer > 0)
        dds_delete(r->writer);
    if (r->dtopic > 0)
        dds_delete(r->dtopic);
    ferry__bridge_raw_close(r->raw);
    free(r);
}

out_route *ferry__bridge_out_create(ferry_bridge *b, const scan_topic *t)
{
    char dds_name[FERRY_TOPIC_MAX + 8];
    out_route *r = calloc(1, sizeof *r);
    dds_qos_t *q;
    ferry_err err;
    int fd;

    if (r == NULL)
        return NULL;
    memcpy(r->topic, t->topic, sizeof r->topic);
    r->kind = t->kind;
    r->transient = t->kind == FERRY_ROS2_CAMERA_INFO || t->latched > 0;
    if (t->kind == FERRY_ROS2_NONE) {
        err = ferry__bridge_raw_open(b, t->ros_type, t->hash, &r->raw);
        if (err != FERRY_OK) {
            /* Not described (yet): not an rmw_ferry_cpp node's, or one that just started. */
            if (err != FERRY_EAGAIN || ferry__bridge_rate_ok(&b->log_limit))
                ferry__bridge_log(b, err == FERRY_EAGAIN ? FERRY_LOG_DEBUG : FERRY_LOG_WARN,
                                  "out %s: no description of %s in the domain's graph files "
                                  "(%s): not sent out",
                                  r->topic, t->ros_type, ferry_strerror(err));
            free(r);
            return NULL;
        }
    }
    r->blocking = b->o.reliability != FERRY_BRIDGE_BEST_EFFORT;
    err = subscribe(b, r, r->blocking, &r->sub);
    if (err != FERRY_OK) {
        ferry__bridge_log(b, FERRY_LOG_WARN, "out %s: cannot subscribe: %s", r->topic,
                          ferry_strerror(err));
        ferry__bridge_raw_close(r->raw);
        free(r);
        return NULL;
    }
    snprintf(dds_name, sizeof dds_name, "rt%s", r->topic);
    r->dtopic = r->raw != NULL ? ferry__bridge_raw_topic(b, r->raw, dds_name)
                               : dds_create_topic(b->participant, ferry__bridge_descriptor(r->kind),
                                                  dds_name, NULL, NULL);
    if (r->dtopic < 0) {
        ferry__bridge_log(b, FERRY_LOG_WARN, "out %s: dds_create_topic: %s", r->topic,
                          dds_strretcode(r->dtopic));
        ferry__bridge_out_destroy(b, r);
        return NULL;
    }
    q = writer_qos(b, r, &r->reliable);
    r->writer = dds_create_writer(b->participant, r->dtopic, q, NULL);
    dds_delete_qos(q);
    if (r->writer < 0) {
        ferry__bridge_log(b, FERRY_LOG_WARN, "out %s: dds_create_writer: %s", r->topic,
                          dds_strretcode(r->writer));
        ferry__bridge_out_destroy(b, r);
        return NULL;
    }
    if (ferry_subscriber_fd(r->sub, &fd) == FERRY_OK)
        ferry__bridge_watch_fd(b, fd);
    ferry__bridge_log(b, FERRY_LOG_INFO, "out %s -> %s (%s, %s, depth %" PRIu32 ")", r->topic,
                      dds_name, ferry__bridge_route_type(r->kind, r->raw),
                      r->reliable ? "reliable, lossless: blocks a publisher that admits it"
                                  : "best effort, drop-oldest",
                      b->o.depth);
    return r;
}

/* A blocking subscriber that a publisher refused (most often because it does not admit blocking
 * subscribers: the library logs why) gets nothing from that publisher. The route goes on with a
 * drop-oldest subscriber; the blocking one stays until the next check, so that what it still
 * gets is written too. Called at every scan. */
void ferry__bridge_out_check(ferry_bridge *b, out_route *r)
{
    ferry_subscriber_stats st;
    ferry_subscriber *lossy = NULL;
    ferry_err err;
    int fd;

    if (r->retiring != NULL) {
        ferry__bridge_out_pump(b, r);
        /* What it still has queued, its successor has too (it was connected by then). */
        if (r->pending_sub != r->retiring) {
            unsubscribe(b, r, r->retiring);
            r->retiring = NULL;
        }
    }
    if (!r->blocking || ferry_subscriber_stats_get(r->sub, &st) != FERRY_OK || st.rejected == 0)
        return;
    err = subscribe(b, r, false, &lossy);
    if (err != FERRY_OK) {
        if (ferry__bridge_rate_ok(&b->log_limit))
            ferry__bridge_log(b, FERRY_LOG_WARN, "out %s: cannot subscribe: %s (retrying)",
                              r->topic, ferry_strerror(err));
        return;
    }
    ferry__bridge_log(b, FERRY_LOG_WARN,
                      "out %s: a publisher refused the bridge's blocking subscriber (most often: "
                      "it does not admit blocking subscribers; ferry pub --admit-blocking, "
                      "admit_blocking in the API): this route now drops the oldest sample when "
                      "its queue of %" PRIu32 " is full, counted in out_queue_dropped",
                      r->topic, b->o.depth);
    r->retiring = r->sub;
    r->sub = lossy;
    r->blocking = false;
    r->dedupe = true;
    if (ferry_subscriber_fd(r->sub, &fd) == FERRY_OK)
        ferry__bridge_watch_fd(b, fd);
}

void ferry__bridge_out_check_qos(ferry_bridge *b, out_route *r)
{
    dds_offered_incompatible_qos_status_t st;

    if (r->writer <= 0 ||
        dds_get_offered_incompatible_qos_status(r->writer, &st) != DDS_RETCODE_OK ||
        st.total_count <= r->qos_reported || !ferry__bridge_rate_ok_n(&b->log_qos, 10))
        return;
    ferry__bridge_log(b, FERRY_LOG_WARN,
                      "out %s: %" PRIu32 " DDS reader(s) of rt%s ask for QoS that the bridge's "
                      "writer (%s, %s) does not offer, and get nothing (incompatible policy: %s)",
                      r->topic, st.total_count - r->qos_reported, r->topic,
                      r->reliable ? "reliable" : "best effort",
                      r->transient ? "transient local" : "volatile",
                      ferry__bridge_qos_policy_name(st.last_policy_id));
    r->qos_reported = st.total_count;
}

/* Validates a taken sample as r's kind and writes it to DDS; false when it is not valid.
 * *bytes: the data bytes carried (pixels, points, compressed bytes; the header for the rest). */
/* Room for a carried kind's DDS sample and for its sequences of structs (a cloud's fields). */
#define DDS_SAMPLE_MAX 1024u
#define DDS_ROOM_MAX 4096u

static bool write_sample(out_route *r, const ferry_sample *s, dds_return_t *rc, size_t *bytes)
{
    const ferry_ros2_kind_desc *d = ferry_ros2_kind_desc_of(r->kind);
    _Alignas(max_align_t) uint8_t view[FERRY_ROS2_VIEW_MAX], sample[DDS_SAMPLE_MAX];
    _Alignas(max_align_t) uint8_t room[DDS_ROOM_MAX];
    uint32_t i;

    if (d == NULL) { /* FERRY_ROS2_NONE: a type known by its definition */
        if (r->raw == NULL)
            return false;
        *bytes = s->size;
        return ferry__bridge_raw_write(r, s, rc);
    }
    /* The view is the bridge's own validated copy; the DDS sample points into it and into the
     * ferry sample's bulk, and Cyclone's serialisation is the one copy. */
    if (d->view_size > sizeof view || d->view_get(s, view) != FERRY_OK ||
        !ferry__bridge_dds_from_view(r->kind, view, sample, sizeof sample, room, sizeof room))
        return false;
    *rc = dds_write(r->writer, sample);
    /* The data bytes carried: the bulk, or the whole sample of a kind without one. */
    *bytes = s->size;
    for (i = 0; i < d->nmembers; i++)
        if (d->members[i].type == FERRY_ROS2_M_BULK)
            memcpy(bytes, view + d->members[i].view_count, sizeof *bytes);
    return true;
}

/* True when the sample came from a bridge and must not go back to DDS. */
static bool from_bridge(ferry_bridge *b, const out_route *r, uint64_t publisher_id)
{
    int v = publisher_verdict(b, publisher_id);

    if (v < 0) {
        /* A publisher that appeared since the last scan: look at its status file now rather
         * than let one of another bridge's samples through. */
        ferry_inspect(b->o.dir, b->o.domain, r->topic, note_topic_publishers, b);
        v = publisher_verdict(b, publisher_id);
        if (v < 0)
            ferry__bridge_note_publisher(b, publisher_id, false);
    }
    return v > 0;
}

/* Once a route has had two subscribers, both of which may deliver a publisher's sample: true
 * when this one was handled already (or is older than one that was), else it is noted. */
static bool seen_before(out_route *r, const ferry_sample *s)
{
    unsigned i;

    if (!r->dedupe)
        return false;
    for (i = 0; i < r->nseen; i++)
        if (r->seen[i].publisher_id == s->publisher_id) {
            if (s->sequence <= r->seen[i].sequence)
                return true;
            r->seen[i].sequence = s->sequence;
            return false;
        }
    if (r->nseen < SEQ_SEEN_MAX) {
        r->seen[r->nseen].publisher_id = s->publisher_id;
        r->seen[r->nseen].sequence = s->sequence;
        r->nseen++;
    }
    return false;
}

/* Handles a taken sample; false when a reliable write timed out and the sample is kept (in
 * r->pending) to be written again. */
static bool carry(ferry_bridge *b, out_route *r, ferry_subscriber *sub, ferry_sample *s, bool retry)
{
    dds_return_t rc = DDS_RETCODE_OK;
    size_t bytes = 0;
    bool valid = true, skipped = false;
    ferry_err err;

    if (retry) {
        valid = write_sample(r, s, &rc, &bytes);
    } else if (seen_before(r, s)) {
        /* the route's other subscriber delivered it already: not counted twice */
        skipped = true;
    } else {
        b->st.out_taken++;
        if (!r->active) {
            b->st.out_early++;
            skipped = true;
        } else if (from_bridge(b, r, s->publisher_id)) {
            b->st.out_skipped++;
            skipped = true;
        } else {
            valid = write_sample(r, s, &rc, &bytes);
        }
    }
    if (skipped) {
        /* counted above */
    } else if (!valid) {
        b->st.out_invalid++;
        r->invalid++;
        if (ferry__bridge_rate_ok(&b->log_out_invalid))
            ferry__bridge_log(b, FERRY_LOG_WARN,
                              "out %s: dropped an invalid sample (%zu bytes, publisher %" PRIx64
                              "); %" PRIu64 " so far",
                              r->topic, s->size, s->publisher_id, b->st.out_invalid);
    } else if (rc == DDS_RETCODE_OK) {
        b->st.out_written++;
        b->st.out_bytes += bytes;
        r->samples++;
        r->bytes += bytes;
    } else if (rc == DDS_RETCODE_TIMEOUT && r->reliable) {
        /* A reader has not acknowledged enough: the writer had no room for WRITE_BLOCK_MS. The
         * sample stays taken and is written again at the next pump; meanwhile the queue fills
         * and, for a blocking subscriber, holds the publisher back. */
        b->st.out_write_timeouts++;
        r->pending = *s;
        r->pending_sub = sub;
        if (ferry__bridge_rate_ok(&b->log_out_failed))
            ferry__bridge_log(b, FERRY_LOG_INFO,
                              "out %s: dds_write: no room for %d ms (a reliable DDS reader is "
                              "behind); writing the sample again; %" PRIu64 " times so far",
                              r->topic, WRITE_BLOCK_MS, b->st.out_write_timeouts);
        return false;
    } else {
        b->st.out_failed++;
        r->failed++;
        if (ferry__bridge_rate_ok(&b->log_out_failed))
            ferry__bridge_log(b, FERRY_LOG_WARN,
                              "out %s: dds_write: %s; the sample is lost; %" PRIu64
                              " failed so far",
                              r->topic, dds_strretcode(rc), b->st.out_failed);
    }
    err = ferry_release(sub, s);
    if (err != FERRY_OK)
        ferry__bridge_log(b, FERRY_LOG_ERROR, "out %s: ferry_release: %s", r->topic,
                          ferry_strerror(err));
    return true;
}

/* Takes and carries what sub has queued; false when a write timed out (stop for now). */
static bool pump_sub(ferry_bridge *b, out_route *r, ferry_subscriber *sub)
{
    for (;;) {
        ferry_sample s;
        ferry_err err = ferry_take(sub, &s);

        if (err != FERRY_OK) {
            if (err != FERRY_EAGAIN && ferry__bridge_rate_ok(&b->log_limit))
                ferry__bridge_log(b, FERRY_LOG_WARN, "out %s: ferry_take: %s", r->topic,
                                  ferry_strerror(err));
            return true;
        }
        if (!carry(b, r, sub, &s, false))
            return false;
    }
}

bool ferry__bridge_out_pump(ferry_bridge *b, out_route *r)
{
    if (r->pending_sub != NULL) {
        ferry_subscriber *sub = r->pending_sub;
        ferry_sample s = r->pending;

        r->pending_sub = NULL;
        if (!carry(b, r, sub, &s, true))
            return false;
    }
    /* The retiring subscriber first: it holds the older samples of the publishers both have. */
    if (r->retiring != NULL && !pump_sub(b, r, r->retiring))
        return false;
    return pump_sub(b, r, r->sub);
}

bool ferry__bridge_out_finished(ferry_bridge *b, out_route *r)
{
    /* Every queued sample written, and every written one in the readers' hands: a writer
     * deleted sooner would take unacknowledged samples with it. A best-effort writer keeps
     * none. dds_wait_for_acks with no timeout only looks. */
    return ferry__bridge_out_pump(b, r) &&
           (!r->reliable || dds_wait_for_acks(r->writer, 0) == DDS_RETCODE_OK);
}
