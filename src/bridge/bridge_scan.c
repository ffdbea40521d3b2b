/*
 * The scans, once a scan interval: the ferry domain's endpoints say which local topics have a
 * publisher other than a bridge (out routes come and go with them), DCPSPublication which DDS
 * writers there are on "rt/..." topics (in routes come and go with those). Of several bridges of
 * one ferry domain, only the one of the lowest pid keeps a topic's out route.
 */
#include "bridge_internal.h"

#include <stdlib.h>
#include <string.h>

/* An out route whose topic lost its last non-bridge publisher goes after this many scans; an in
 * route whose DDS writers all left goes after IN_GRACE_NS. */
#define OUT_MISSING_SCANS 2u
/* A closing route first writes what it still has and waits for its readers to acknowledge it,
 * for at most this many more scans (10 s at the default interval): a reader that never does
 * (stalled, but its lease not expired) does not keep a dead route for ever. */
#define OUT_FINISH_SCANS 40u
#define IN_GRACE_NS (1 * NS_PER_S)
#define RETRY_NS (5 * NS_PER_S)
/* An in route of a type no local node has described yet looks for it again this often. */
#define TYPE_RETRY_NS (1 * NS_PER_S)
#define PUBLICATIONS_MAX 512

/* How long an in route whose opening failed waits before it tries again. */
static int64_t retry_after(const in_route *r)
{
    return r->kind == FERRY_ROS2_NONE && r->raw == NULL ? TYPE_RETRY_NS : RETRY_NS;
}

/* ---------------------------------------------------------------------------------------------
 * Scans
 * ------------------------------------------------------------------------------------------- */

/* The scan's entry of topic, made if new; NULL when the topic is there with another type. A
 * kind FERRY_ROS2_NONE is a ROS 2 type known by its definition, named by ros_type. */
static scan_topic *scan_entry(ferry_bridge *b, const char *topic, ferry_ros2_kind kind,
                              const char *ros_type)
{
    char name[FERRY_TOPIC_MAX + 2];
    scan_topic *t;
    size_t i;

    if (!ferry__bridge_normalise(topic, name))
        return NULL;
    if (kind == FERRY_ROS2_NONE && strlen(ros_type) >= sizeof t->ros_type)
        return NULL;
    for (i = 0; i < b->nscan; i++) {
        t = &b->scan[i];
        if (strcmp(t->topic, name) == 0)
            return t->kind == kind &&
                           (kind != FERRY_ROS2_NONE || strcmp(t->ros_type, ros_type) == 0)
                       ? t
                       : NULL;
    }
    if (b->nscan == SCAN_TOPICS_MAX)
        return NULL;
    t = &b->scan[b->nscan++];
    memset(t, 0, sizeof *t);
    memcpy(t->topic, name, sizeof name);
    t->kind = kind;
    if (kind == FERRY_ROS2_NONE)
        strcpy(t->ros_type, ros_type);
    return t;
}

static bool scan_ferry_endpoint(void *arg, const ferry_endpoint_info *info)
{
    ferry_bridge *b = arg;
    bool bridge = ferry__bridge_is_bridge_node(info->node_name);
    ferry_ros2_kind kind;
    scan_topic *t;

    if (!info->alive)
        return true;
    if (info->kind == FERRY_ENDPOINT_PUBLISHER)
        ferry__bridge_note_publisher(b, info->id, bridge);
    kind = ferry__bridge_kind_of_ferry(info->type_name, info->type_hash);
    if (kind == FERRY_ROS2_NONE) {
        /* A ROS 2 message type by name ("pkg/msg/Name"): an rmw_ferry_cpp node's topic. */
        char dds_type[FERRY_TYPE_NAME_MAX + 16];

        if (!ferry__bridge_dds_type_of(info->type_name, dds_type, sizeof dds_type))
            return true;
    }
    t = scan_entry(b, info->topic, kind, info->type_name);
    if (t == NULL)
        return true;
    if (info->kind == FERRY_ENDPOINT_PUBLISHER && !bridge) {
        t->plain_publisher = true;
        t->hash = info->type_hash;
        if (info->depth > t->latched)
            t->latched = info->depth;
    }
    if (info->kind == FERRY_ENDPOINT_SUBSCRIBER && bridge && info->pid != (int32_t)b->pid &&
        info->pid < (int32_t)b->pid)
        t->other_bridge = true;
    return true;
}

void ferry__bridge_scan_out(ferry_bridge *b)
{
    size_t i, j;

    b->nscan = 0;
    b->nknown = 0;
    ferry_inspect(b->o.dir, b->o.domain, NULL, scan_ferry_endpoint, b);
    if (!(b->o.direction & FERRY_BRIDGE_OUT))
        return;

    /* A new route sends nothing before the next scan: two bridges of one ferry domain that
     * subscribe to a topic at the same moment see each other by then, and the one of the higher
     * pid leaves without having written a duplicate. */
    for (i = 0; i < b->nouts; i++)
        b->outs[i]->missing++;
    for (j = 0; j < b->nscan; j++) {
        const scan_topic *t = &b->scan[j];
        bool found = false;

        if (!t->plain_publisher || !ferry__bridge_pattern_match(b, t->topic))
            continue;
        for (i = 0; i < b->nouts && !found; i++)
            if (strcmp(b->outs[i]->topic, t->topic) == 0) {
                /* Before the route goes active: a refused blocking subscriber is replaced
                 * while its samples are still out_early. */
                ferry__bridge_out_check(b, b->outs[i]);
                b->outs[i]->missing = 0;
                ferry__bridge_out_check_qos(b, b->outs[i]);
                if (!t->other_bridge)
                    b->outs[i]->finishing = 0;
                b->outs[i]->yield = t->other_bridge;
                if (!t->other_bridge)
                    b->outs[i]->active = true;
                found = true;
            }
        if (found || t->other_bridge)
            continue;
        if (b->nouts == FERRY_BRIDGE_ROUTES_MAX) {
            if (ferry__bridge_rate_ok(&b->log_limit))
                ferry__bridge_log(b, FERRY_LOG_WARN, "out %s: too many routes (%u)", t->topic,
                                  FERRY_BRIDGE_ROUTES_MAX);
            continue;
        }
        {
            out_route *r = ferry__bridge_out_create(b, t);

            if (r != NULL)
                b->outs[b->nouts++] = r;
        }
    }
    for (i = 0; i < b->nouts;) {
        out_route *r = b->outs[i];

        if (r->missing >= OUT_MISSING_SCANS || r->yield) {
            bool finished = ferry__bridge_out_finished(b, r);

            if (!finished && r->finishing++ < OUT_FINISH_SCANS) {
                i++;
                continue;
            }
            if (!finished)
                ferry__bridge_log(b, FERRY_LOG_WARN,
                                  "out %s: closing with samples not yet written or not "
                                  "acknowledged by every DDS reader after %u scans",
                                  r->topic, OUT_FINISH_SCANS);
            ferry__bridge_log(b, FERRY_LOG_INFO, "out %s: route closed (%s)", r->topic,
                              r->yield ? "another bridge of this ferry domain sends it"
                                       : "no publisher left but bridges");
            ferry__bridge_out_destroy(b, r);
            b->outs[i] = b->outs[--b->nouts];
        } else {
            i++;
        }
    }
}

void ferry__bridge_scan_in(ferry_bridge *b)
{
    void *buf[PUBLICATIONS_MAX];
    dds_sample_info_t info[PUBLICATIONS_MAX];
    int64_t now = ferry_now().ns;
    dds_return_t n, k;
    size_t i, j;

    /* Publications that went away: drop them so that reads see live ones only. */
    for (;;) {
        buf[0] = NULL;
        n = dds_take_mask(b->pubreader, buf, info, PUBLICATIONS_MAX, PUBLICATIONS_MAX,
                          DDS_ANY_SAMPLE_STATE | DDS_ANY_VIEW_STATE |
                              DDS_NOT_ALIVE_DISPOSED_INSTANCE_STATE |
                              DDS_NOT_ALIVE_NO_WRITERS_INSTANCE_STATE);
        if (n <= 0)
            break;
        dds_return_loan(b->pubreader, buf, n);
    }
    buf[0] = NULL;
    n = dds_read_mask(b->pubreader, buf, info, PUBLICATIONS_MAX, PUBLICATIONS_MAX,
                      DDS_ANY_SAMPLE_STATE | DDS_ANY_VIEW_STATE | DDS_ALIVE_INSTANCE_STATE);
    b->nscan = 0;
    for (k = 0; k < n; k++) {
        const dds_builtintopic_endpoint_t *ep = buf[k];
        char ros_type[FERRY_TYPE_NAME_MAX + 1] = "";
        ferry_ros2_kind kind;
        scan_topic *t;

        if (!info[k].valid_data || ep->topic_name == NULL)
            continue;
        if (strncmp(ep->topic_name, "rt/", 3) != 0)
            continue;
        kind = ferry__bridge_kind_of_dds(ep->type_name);
        if (kind == FERRY_ROS2_NONE &&
            (ep->type_name == NULL ||
             !ferry__bridge_ros_type_of(ep->type_name, ros_type, sizeof ros_type)))
            continue;
        if (memcmp(&ep->participant_key, &b->participant_guid, sizeof ep->participant_key) == 0)
            continue;
        if (ferry__bridge_has_mark(b, ep->qos))
            continue;
        if (ferry_topic_validate(ep->topic_name + 2) != FERRY_OK)
            continue;
        t = scan_entry(b, ep->topic_name + 2, kind, ros_type);
        if (t == NULL)
            continue;
        if (!ferry__bridge_qos_reliable(ep->qos))
            t->best_effort = true;
        {
            uint32_t depth = 0;

            if (ferry__bridge_qos_transient(ep->qos, &depth)) {
                t->transient = true;
                if (depth > t->history)
                    t->history = depth;
            } else {
                t->volatile_writer = true;
            }
        }
    }
    if (n > 0)
        dds_return_loan(b->pubreader, buf, n);

    for (j = 0; j < b->nscan; j++) {
        const scan_topic *t = &b->scan[j];
        /* The reader asks for what every writer offers: reliable when none is best effort (a
         * reliable reader does not match a best-effort writer), transient local when all are
         * (a transient-local reader does not match a volatile writer). */
        bool reliable = b->o.reliability == FERRY_BRIDGE_RELIABILITY_AUTO
                            ? !t->best_effort
                            : b->o.reliability == FERRY_BRIDGE_RELIABLE;
        bool transient = t->transient && !t->volatile_writer;
        in_route *r = NULL;

        if (!ferry__bridge_pattern_match(b, t->topic))
            continue;
        for (i = 0; i < b->nins; i++)
            if (strcmp(b->ins[i]->topic, t->topic) == 0)
                r = b->ins[i];
        if (r != NULL && (r->kind != t->kind || strcmp(r->ros_type, t->ros_type) != 0))
            continue; /* the topic's writers changed their type: the route goes once they left */
        if (r == NULL) {
            if (b->nins == FERRY_BRIDGE_ROUTES_MAX) {
                if (ferry__bridge_rate_ok(&b->log_limit))
                    ferry__bridge_log(b, FERRY_LOG_WARN, "in %s: too many routes (%u)", t->topic,
                                      FERRY_BRIDGE_ROUTES_MAX);
                continue;
            }
            r = calloc(1, sizeof *r);
            if (r == NULL)
                continue;
            memcpy(r->topic, t->topic, sizeof r->topic);
            r->kind = t->kind;
            memcpy(r->ros_type, t->ros_type, sizeof r->ros_type);
            r->reliable = reliable;
            r->transient = transient;
            r->history = t->history < b->o.depth ? t->history : b->o.depth;
            b->ins[b->nins++] = r;
            if (!ferry__bridge_in_open(b, r, true))
                r->retry_ns = now + retry_after(r);
        } else if (r->pub == NULL) {
            if (now >= r->retry_ns) {
                r->reliable = reliable;
                r->transient = transient;
                r->history = t->history < b->o.depth ? t->history : b->o.depth;
                if (!ferry__bridge_in_open(b, r, false))
                    r->retry_ns = now + retry_after(r);
            }
        } else if ((r->reliable && !reliable &&
                    b->o.reliability == FERRY_BRIDGE_RELIABILITY_AUTO) ||
                   (r->transient && !transient)) {
            /* A writer joined that the reader cannot match: the reader is made again, weaker,
             * so that it receives every writer; it stays so until the route closes. */
            bool weaker_rel = r->reliable && !reliable;
            bool weaker_dur = r->transient && !transient;

            ferry__bridge_log(
                b, FERRY_LOG_WARN,
                "in rt%s: a%s%s%s DDS writer joined, which the bridge's %s%s%s "
                "reader cannot match (policy %s%s%s): the reader is made again, "
                "%s, %s, until the route closes%s",
                r->topic, weaker_rel ? " best-effort" : "", weaker_rel && weaker_dur ? "," : "",
                weaker_dur ? " volatile" : "", r->reliable ? "reliable" : "best-effort",
                r->reliable && r->transient ? ", " : "", r->transient ? "transient-local" : "",
                weaker_rel ? "RELIABILITY" : "", weaker_rel && weaker_dur ? ", " : "",
                weaker_dur ? "DURABILITY" : "",
                weaker_rel    ? "best effort"
                : r->reliable ? "reliable"
                              : "best effort",
                weaker_dur     ? "volatile"
                : r->transient ? "transient local"
                               : "volatile",
                weaker_rel ? " (samples of the reliable writers may now be lost)" : "");
            ferry__bridge_in_reopen_reader(b, r, r->reliable && !weaker_rel,
                                           r->transient && !weaker_dur);
        } else if (r->reader <= 0 && now >= r->retry_ns) {
            if (!ferry__bridge_in_reopen_reader(b, r, r->reliable, r->transient))
                r->retry_ns = now + RETRY_NS;
        }
        r->last_wanted_ns = now;
    }
    for (i = 0; i < b->nins; i++)
        ferry__bridge_in_check_qos(b, b->ins[i]);
    for (i = 0; i < b->nins;) {
        in_route *r = b->ins[i];

        if (now - r->last_wanted_ns > IN_GRACE_NS) {
            ferry__bridge_in_pump(b, r);
            ferry__bridge_log(b, FERRY_LOG_INFO, "in rt%s: no DDS writer left; route closed",
                              r->topic);
            ferry__bridge_in_destroy(b, r);
            b->ins[i] = b->ins[--b->nins];
        } else {
            i++;
        }
    }
}
