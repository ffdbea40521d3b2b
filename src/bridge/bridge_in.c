/*
 * The DDS -> ferry direction. An in route reads a DDS topic and publishes each sample on the
 * ferry topic of the same name. A sample is read from the serialised bytes Cyclone received
 * (the CDR reader of src/ros2/ros2.h), validated (it comes from the network) and its data (pixels,
 * points, compressed bytes; the whole message for camera infos and IMU samples) copied once into a
 * ferry loan; an encapsulation the CDR reader does not take is deserialised by Cyclone first.
 * Samples of DDS writers of bridges of this ferry domain are dropped.
 */
#include "bridge_internal.h"

#include <ferry/msg.h>

/* Cyclone's atomics header writes the GNU keyword "asm", which strict C11 does not have. */
#define asm __asm__
#include <dds/ddsi/ddsi_serdata.h>
#undef asm

#include "msg_table.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAKE_BATCH 8
/* Each invalid DDS sample is logged, up to this many lines a second. */
#define IN_INVALID_LINES_PER_S 20u

/* ---------------------------------------------------------------------------------------------
 * In routes: DDS -> ferry
 * ------------------------------------------------------------------------------------------- */

void ferry__bridge_in_losses(const in_route *r, in_losses *out)
{
    dds_sample_lost_status_t lost;
    dds_sample_rejected_status_t rejected;
    ferry_publisher_stats ps;

    memset(out, 0, sizeof *out);
    out->lost = r->lost_gone;
    out->rejected = r->rejected_gone;
    if (r->reader > 0 && dds_get_sample_lost_status(r->reader, &lost) == DDS_RETCODE_OK)
        out->lost += lost.total_count;
    /* A reliable reader's refusals are not losses: Cyclone offers the sample again (every
     * millisecond) until the bridge has taken enough, and counts each refusal. */
    if (r->reader > 0 && !r->reliable &&
        dds_get_sample_rejected_status(r->reader, &rejected) == DDS_RETCODE_OK)
        out->rejected += rejected.total_count;
    if (r->pub != NULL && ferry_publisher_stats_get(r->pub, &ps) == FERRY_OK)
        out->subscriber_dropped = ps.dropped;
}

void ferry__bridge_in_destroy(ferry_bridge *b, in_route *r)
{
    in_losses l;
    int fd;

    ferry__bridge_in_losses(r, &l);
    b->st.in_lost += l.lost;
    b->st.in_rejected += l.rejected;
    b->st.in_subscriber_dropped += l.subscriber_dropped;
    if (r->reader > 0)
        dds_delete(r->reader);
    if (r->dtopic > 0)
        dds_delete(r->dtopic);
    if (r->pub != NULL) {
        if (ferry_publisher_fd(r->pub, &fd) == FERRY_OK)
            ferry__bridge_unwatch_fd(b, fd);
        ferry_publisher_destroy(r->pub);
    }
    ferry__bridge_raw_close(r->raw);
    free(r);
}

/* r's DDS reader: the reliability and durability of r (the remote writers' at its making, or
 * forced), KEEP_ALL with at most depth samples untaken. */
static dds_entity_t create_reader(ferry_bridge *b, in_route *r)
{
    dds_data_representation_id_t rep[2] = {DDS_DATA_REPRESENTATION_XCDR1,
                                           DDS_DATA_REPRESENTATION_XCDR2};
    dds_entity_t reader;
    dds_qos_t *q = dds_create_qos();

    dds_qset_reliability(q, r->reliable ? DDS_RELIABILITY_RELIABLE : DDS_RELIABILITY_BEST_EFFORT,
                         DDS_MSECS(WRITE_BLOCK_MS));
    /* At most depth samples wait to be taken, and none is pushed out by a newer one (which
     * KEEP_LAST does without a trace): a reliable reader that has depth refuses the next sample
     * until the bridge takes some, and the writer sends it again (flow control); a best-effort
     * one refuses it for good, counted as SAMPLE_REJECTED (in_rejected). */
    dds_qset_history(q, DDS_HISTORY_KEEP_ALL, 0);
    dds_qset_resource_limits(q, (int32_t)b->o.depth, DDS_LENGTH_UNLIMITED, (int32_t)b->o.depth);
    /* Transient local when every writer offered it (a latched topic): the reader then gets what
     * they kept from before it came. A transient-local reader does not match a volatile writer,
     * which is why one that joins later makes the route volatile (bridge_scan.c). */
    dds_qset_durability(q, r->transient ? DDS_DURABILITY_TRANSIENT_LOCAL : DDS_DURABILITY_VOLATILE);
    /* A type known by its definition takes plain CDR only (XCDR1: what ROS 2 nodes send). */
    dds_qset_data_representation(q, r->raw != NULL ? 1 : 2, rep);
    dds_qset_ignorelocal(q, DDS_IGNORELOCAL_PARTICIPANT);
    reader = dds_create_reader(b->participant, r->dtopic, q, b->listener);
    dds_delete_qos(q);
    return reader;
}

static const char *reader_kind(const in_route *r)
{
    return r->reliable
               ? (r->transient ? "reliable, lossless, transient local" : "reliable, lossless")
               : (r->transient ? "best effort, transient local" : "best effort");
}

/* Creates the DDS reader and the ferry publisher of r; false (logged) when one is refused. */
bool ferry__bridge_in_open(ferry_bridge *b, in_route *r, bool log)
{
    ferry_publisher_options po;
    ferry_publisher_stats ps;
    char dds_name[FERRY_TOPIC_MAX + 8];
    ferry_err err;
    int fd;

    if (r->kind == FERRY_ROS2_NONE && r->raw == NULL) {
        /* A type known by its definition only: a local rmw_ferry_cpp node must have described
         * it (as one that subscribes to it has); until then the route waits. */
        err = ferry__bridge_raw_open(b, r->ros_type, FERRY_ROS2_HASH_ANY, &r->raw);
        if (err != FERRY_OK) {
            if (log)
                ferry__bridge_log(b, err == FERRY_EAGAIN ? FERRY_LOG_INFO : FERRY_LOG_WARN,
                                  "in rt%s: %s is not described by a local node yet (%s): "
                                  "the route waits for one",
                                  r->topic, r->ros_type, ferry_strerror(err));
            return false;
        }
    }
    ferry_publisher_options_init(&po);
    /* A latched topic stays latched on the ferry side: a ferry subscriber that asks for history
     * gets the last samples however late it comes. */
    po.history = r->transient ? r->history : 0;
    if (r->raw != NULL)
        err =
            ferry_publisher_create(&r->pub, b->node, r->topic, r->raw->ros_name, r->raw->hash, &po);
    else
        err = ferry_publisher_create(&r->pub, b->node, r->topic, ferry__bridge_ferry_type(r->kind),
                                     ferry__bridge_ferry_hash_of(r->kind), &po);
    if (err != FERRY_OK) {
        if (log)
            ferry__bridge_log(b, FERRY_LOG_WARN,
                              "in %s: cannot publish on the ferry topic: %s (retrying)", r->topic,
                              ferry_strerror(err));
        r->pub = NULL;
        return false;
    }
    memset(&ps, 0, sizeof ps);
    ferry_publisher_stats_get(r->pub, &ps);
    r->pub_id = ps.id;
    snprintf(dds_name, sizeof dds_name, "rt%s", r->topic);
    r->dtopic = r->raw != NULL ? ferry__bridge_raw_topic(b, r->raw, dds_name)
                               : dds_create_topic(b->participant, ferry__bridge_descriptor(r->kind),
                                                  dds_name, NULL, NULL);
    if (r->dtopic < 0) {
        if (log)
            ferry__bridge_log(b, FERRY_LOG_WARN, "in %s: dds_create_topic: %s", r->topic,
                              dds_strretcode(r->dtopic));
        goto fail;
    }
    r->reader = create_reader(b, r);
    if (r->reader < 0) {
        if (log)
            ferry__bridge_log(b, FERRY_LOG_WARN, "in %s: dds_create_reader: %s", r->topic,
                              dds_strretcode(r->reader));
        goto fail;
    }
    if (ferry_publisher_fd(r->pub, &fd) == FERRY_OK)
        ferry__bridge_watch_fd(b, fd);
    if (r->transient)
        ferry__bridge_log(b, FERRY_LOG_INFO,
                          "in %s -> %s (%s, %s, depth %" PRIu32 "; the last %" PRIu32
                          " kept for late ferry subscribers)",
                          dds_name, r->topic, ferry__bridge_route_type(r->kind, r->raw),
                          reader_kind(r), b->o.depth, r->history);
    else
        ferry__bridge_log(b, FERRY_LOG_INFO, "in %s -> %s (%s, %s, depth %" PRIu32 ")", dds_name,
                          r->topic, ferry__bridge_route_type(r->kind, r->raw), reader_kind(r),
                          b->o.depth);
    return true;
fail:
    if (r->dtopic > 0)
        dds_delete(r->dtopic);
    r->dtopic = 0;
    r->reader = 0;
    ferry_publisher_destroy(r->pub);
    r->pub = NULL;
    return false;
}

bool ferry__bridge_in_reopen_reader(ferry_bridge *b, in_route *r, bool reliable, bool transient)
{
    dds_sample_lost_status_t lost;
    dds_sample_rejected_status_t rejected;

    if (r->reader > 0) {
        ferry__bridge_in_pump(b, r);
        if (dds_get_sample_lost_status(r->reader, &lost) == DDS_RETCODE_OK)
            r->lost_gone += lost.total_count;
        if (!r->reliable && dds_get_sample_rejected_status(r->reader, &rejected) == DDS_RETCODE_OK)
            r->rejected_gone += rejected.total_count;
        dds_delete(r->reader);
    }
    r->reliable = reliable;
    r->transient = transient;
    r->reader = 0;
    r->qos_reported = 0;
    r->nwriters = r->next_writer = 0;
    if (r->dtopic <= 0)
        return false;
    r->reader = create_reader(b, r);
    if (r->reader < 0) {
        ferry__bridge_log(b, FERRY_LOG_WARN, "in rt%s: dds_create_reader: %s", r->topic,
                          dds_strretcode(r->reader));
        r->reader = 0;
        return false;
    }
    return true;
}

void ferry__bridge_in_check_qos(ferry_bridge *b, in_route *r)
{
    dds_requested_incompatible_qos_status_t st;

    if (r->reader <= 0 ||
        dds_get_requested_incompatible_qos_status(r->reader, &st) != DDS_RETCODE_OK ||
        st.total_count <= r->qos_reported || !ferry__bridge_rate_ok_n(&b->log_qos, 10))
        return;
    ferry__bridge_log(b, FERRY_LOG_WARN,
                      "in rt%s: %" PRIu32 " DDS writer(s) offer QoS that the bridge's reader "
                      "(%s) cannot match: their samples are not received (incompatible policy: "
                      "%s)",
                      r->topic, st.total_count - r->qos_reported, reader_kind(r),
                      ferry__bridge_qos_policy_name(st.last_policy_id));
    r->qos_reported = st.total_count;
}

/* Whether samples of this DDS writer are dropped: writers of bridges of this ferry domain. */
static bool writer_ignored(ferry_bridge *b, in_route *r, dds_instance_handle_t h)
{
    dds_builtintopic_endpoint_t *ep;
    unsigned i;
    bool ignore = false;

    for (i = 0; i < r->nwriters; i++)
        if (r->writers[i].handle == h)
            return r->writers[i].ignore;
    ep = dds_get_matched_publication_data(r->reader, h);
    if (ep != NULL) {
        ignore =
            ferry__bridge_has_mark(b, ep->qos) ||
            memcmp(&ep->participant_key, &b->participant_guid, sizeof ep->participant_key) == 0;
        dds_builtintopic_free_endpoint(ep);
    }
    i = r->nwriters < WRITER_CACHE ? r->nwriters++ : (r->next_writer++ % WRITER_CACHE);
    r->writers[i].handle = h;
    r->writers[i].ignore = ignore;
    return ignore;
}

typedef enum carry { CARRY_OK, CARRY_INVALID, CARRY_DROPPED } carry;

/* The bytes a message carries for the counters: its bulk, or the whole header of the kinds
 * without one. */
static size_t carried_bytes(const ferry_ros2_msg *m)
{
    const ferry_ros2_kind_desc *d = ferry_ros2_kind_desc_of(m->kind);
    uint32_t i, size;

    for (i = 0; i < d->nmembers; i++)
        if (d->members[i].type == FERRY_ROS2_M_BULK) {
            memcpy(&size, (const uint8_t *)&m->u + d->members[i].msg_count, sizeof size);
            return size;
        }
    return d->view_size;
}

/* Publishes a parsed message; what an error means for the sample: too big or refused is the
 * sample's fault, a full pool or a blocked subscriber is the moment's. */
static carry carry_of(ferry_err err, const char **why)
{
    if (err == FERRY_OK)
        return CARRY_OK;
    if (**why == '\0')
        *why = ferry_strerror(err);
    return err == FERRY_EINVAL || err == FERRY_ETOOBIG ? CARRY_INVALID : CARRY_DROPPED;
}

static carry carry_msg(in_route *r, const ferry_ros2_msg *m, const char **why)
{
    return carry_of(ferry_ros2_publish(r->pub, m, why), why);
}

/* The slow path, for encapsulations the CDR reader does not take (XCDR2): Cyclone deserialises
 * the sample onto the heap, and it is carried from there. */
static carry carry_deserialised(in_route *r, const struct ddsi_serdata *sd, size_t *bytes,
                                const char **why)
{
    const dds_topic_descriptor_t *desc = ferry__bridge_descriptor(r->kind);
    carry c = (*why = "cannot deserialise", CARRY_INVALID);
    void *s = calloc(1, desc->m_size);
    ferry_ros2_msg msg;

    if (s == NULL)
        return (*why = "out of memory", CARRY_DROPPED);
    if (ddsi_serdata_to_sample(sd, s, NULL, NULL) && ferry__bridge_dds_to_msg(r->kind, s, &msg)) {
        *bytes = carried_bytes(&msg);
        c = carry_msg(r, &msg, why);
    }
    dds_sample_free(s, desc, DDS_FREE_ALL);
    return c;
}

/* The fast path: the message is read from the serialised bytes Cyclone received (already
 * reassembled from their fragments and checked by its normaliser), and the pixels or points
 * are copied once, from there into the ferry loan. */
static carry carry_serdata(in_route *r, struct ddsi_serdata *sd, size_t *bytes, const char **why)
{
    uint32_t size = ddsi_serdata_size(sd);
    ferry_ros2_cdr_result res;
    struct ddsi_serdata *ref;
    ferry_ros2_msg msg;
    ddsrt_iovec_t iov;
    carry c = CARRY_INVALID;

    if (r->raw != NULL) {
        /* A type known by its definition: its bytes, checked, into the loan. */
        *bytes = size;
        return carry_of(ferry__bridge_raw_publish(r, sd, why), why);
    }
    if (size < 4)
        return (*why = "malformed CDR", CARRY_INVALID);
    ref = ddsi_serdata_to_ser_ref(sd, 0, size, &iov);
    res = ferry_ros2_cdr_parse(r->kind, iov.iov_base, iov.iov_len, &msg);
    if (res == FERRY_ROS2_CDR_OK) {
        *bytes = carried_bytes(&msg);
        c = carry_msg(r, &msg, why);
    } else if (res == FERRY_ROS2_CDR_UNSUPPORTED) {
        c = carry_deserialised(r, sd, bytes, why);
    } else {
        c = (*why = "malformed CDR", CARRY_INVALID);
    }
    ddsi_serdata_to_ser_unref(ref, &iov);
    return c;
}

void ferry__bridge_in_pump(ferry_bridge *b, in_route *r)
{
    if (r->pub == NULL || r->reader <= 0)
        return;
    ferry_publisher_poll(r->pub, 0);
    for (;;) {
        struct ddsi_serdata *sd[TAKE_BATCH];
        dds_sample_info_t info[TAKE_BATCH];
        dds_return_t n = dds_takecdr(r->reader, sd, TAKE_BATCH, info, DDS_ANY_STATE);
        dds_return_t i;

        if (n <= 0) {
            if (n < 0 && ferry__bridge_rate_ok(&b->log_limit))
                ferry__bridge_log(b, FERRY_LOG_WARN, "in %s: dds_takecdr: %s", r->topic,
                                  dds_strretcode(n));
            return;
        }
        for (i = 0; i < n; i++) {
            const char *why = "";
            size_t bytes = 0;
            carry c;

            if (!info[i].valid_data) {
                ddsi_serdata_unref(sd[i]);
                continue;
            }
            if (writer_ignored(b, r, info[i].publication_handle)) {
                b->st.in_ignored++;
                ddsi_serdata_unref(sd[i]);
                continue;
            }
            b->st.in_received++;
            c = carry_serdata(r, sd[i], &bytes, &why);
            ddsi_serdata_unref(sd[i]);
            if (c == CARRY_OK) {
                b->st.in_published++;
                b->st.in_bytes += bytes;
                r->samples++;
                r->bytes += bytes;
            } else if (c == CARRY_INVALID) {
                b->st.in_invalid++;
                r->invalid++;
                if (ferry__bridge_rate_ok_n(&b->log_in_invalid, IN_INVALID_LINES_PER_S))
                    ferry__bridge_log(
                        b, FERRY_LOG_WARN,
                        "in rt%s: dropped a sample that cannot be carried (%s); %" PRIu64 " so far",
                        r->topic, why, b->st.in_invalid);
            } else {
                b->st.in_dropped++;
                r->dropped++;
                if (ferry__bridge_rate_ok(&b->log_in_dropped))
                    ferry__bridge_log(b, FERRY_LOG_WARN,
                                      "in rt%s: dropped a sample, not published on the ferry "
                                      "side (%s); %" PRIu64 " so far",
                                      r->topic, why, b->st.in_dropped);
            }
        }
    }
}
