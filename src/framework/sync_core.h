/*
 * The approximate-time synchroniser's policy, without I/O (sync.c): what ferry_sync runs, and
 * what the tests drive directly. Single-threaded; fixed storage allocated at creation.
 */
#ifndef FERRY_FRAMEWORK_SYNC_CORE_H
#define FERRY_FRAMEWORK_SYNC_CORE_H

#include <ferry/sync.h>

/*
 * A core holds up to cap (stamp, token) pairs per topic in fixed storage allocated at creation.
 * ferry__sync_core_add feeds one and fills the core's output: matched sets (n tokens each, in
 * topic order) and discarded (topic, token) pairs, valid until the next add or drain. Every
 * token added comes out exactly once, in a set or discarded.
 */

typedef struct ferry__sync_core ferry__sync_core;

ferry_err ferry__sync_core_create(ferry__sync_core **out, uint32_t n, uint32_t cap,
                                  int64_t max_interval_ns);
void ferry__sync_core_destroy(ferry__sync_core *c);
/* Adds one; returns FERRY_EINVAL for a topic out of range (nothing changes). */
ferry_err ferry__sync_core_add(ferry__sync_core *c, uint32_t topic, int64_t stamp, uint64_t token);
/* Discards everything queued (into the output). */
void ferry__sync_core_drain(ferry__sync_core *c);
/* Output of the last add or drain. */
uint32_t ferry__sync_core_nsets(const ferry__sync_core *c);
const uint64_t *ferry__sync_core_set(const ferry__sync_core *c, uint32_t i);
uint32_t ferry__sync_core_ndiscarded(const ferry__sync_core *c);
void ferry__sync_core_discarded(const ferry__sync_core *c, uint32_t i, uint32_t *topic,
                                uint64_t *token);
/* Messages queued now on topic. */
uint32_t ferry__sync_core_queued(const ferry__sync_core *c, uint32_t topic);

#endif
