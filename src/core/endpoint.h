/*
 * What a publisher and a subscriber share (endpoint.c): the node they belong to, their identity,
 * topic and type, the topic directory they live in, their poller and status file, and the bound
 * on how often they log their peers' faults. Each endpoint embeds one as its first member, so the
 * node's list entry is the start of the allocation.
 *
 * Creation runs in two steps around the endpoint's own set-up: ferry__endpoint_open (names
 * checked, directory opened, type claim checked, poller made) and, once the endpoint has what
 * its status file shows, ferry__endpoint_publish_status (the file created with the common fields
 * filled in). ferry__endpoint_close undoes both, whichever were done.
 */
#ifndef FERRY_ENDPOINT_H
#define FERRY_ENDPOINT_H

#include <ferry/ferry.h>

#include <stdint.h>

#include "core/module.h"
#include "core/node.h"
#include "core/status.h"

typedef struct ferry__endpoint {
    ferry__obj obj; /* first: the node's list holds the endpoint by it */
    ferry_node *node;
    uint64_t id;
    char topic[FERRY_TOPIC_MAX + 2];   /* normalised: "/a/b" */
    char dirname[FERRY_TOPIC_MAX + 2]; /* its directory under the node's: "a.b" */
    char type_name[FERRY_TYPE_NAME_MAX + 1];
    uint64_t type_hash;
    int dirfd; /* the topic directory */
    int epfd;  /* the endpoint's poller */
    ferry__status_file status;
    ferry__ratelimit peer_log;
    int64_t next_sweep; /* when ferry__endpoint_sweep looks at the directory again */
} ferry__endpoint;

/* How often an endpoint's housekeeping sweeps its topic directory for dead endpoints' files. */
#define FERRY__ENDPOINT_SWEEP_NS (1000000000LL)

/* FERRY_OK for a live endpoint of this kind, FERRY_ECLOSED for a destroyed one, FERRY_EINVAL for
 * NULL or anything else. */
ferry_err ferry__endpoint_check(const ferry__endpoint *ep, uint64_t magic);

/* Checks the names, opens (creating when missing) the topic directory, refuses a topic whose
 * live publishers have another type (FERRY_ETYPE) and makes the poller. type_name NULL makes an
 * untyped endpoint (a subscriber that adopts its first publisher's type): no type is checked and
 * its type stays "" until ferry__endpoint_adopt_type. On failure *ep holds nothing open. */
ferry_err ferry__endpoint_open(ferry__endpoint *ep, ferry_node *node, const char *topic,
                               const char *type_name, uint64_t type_hash);

/* Fills the fields of a status every endpoint shows (magic, version, kind, pid, id, names, type),
 * zeroing the rest for the caller to add its own. */
void ferry__endpoint_status_init(const ferry__endpoint *ep, ferry_endpoint_kind kind,
                                 ferry__status *init);

/* Creates the status file ("<prefix>.<id>") from init, readable under the node's policy. */
ferry_err ferry__endpoint_publish_status(ferry__endpoint *ep, const char *prefix,
                                         const ferry__status *init);

/* An untyped endpoint takes a type (its status file shows it from now on). */
void ferry__endpoint_adopt_type(ferry__endpoint *ep, const char *type_name, uint64_t type_hash);

/* From housekeeping: every FERRY__ENDPOINT_SWEEP_NS, removes what dead endpoints of the topic
 * left (ferry__status_sweep). */
void ferry__endpoint_sweep(ferry__endpoint *ep, int64_t now);

/* Removes the status file, closes the poller and the directory, whichever are there, and removes
 * the topic directory when it is left empty. */
void ferry__endpoint_close(ferry__endpoint *ep);

#endif
