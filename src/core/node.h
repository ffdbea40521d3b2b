/*
 * Names (topics, types, nodes, the directories they map to) and the node: the context of the
 * publishers and subscribers of one domain, which holds the domain directory open (node.c,
 * topic.c), logs, and decides who may connect.
 */
#ifndef FERRY_NODE_H
#define FERRY_NODE_H

#include <ferry/ferry.h>

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/module.h"

/* Normalises a topic ("/a/b") and derives its directory name ("a.b"). */
ferry_err ferry__topic_normalize(const char *topic, char *norm, size_t norm_cap, char *dirname,
                                 size_t dir_cap);
ferry_err ferry__type_name_validate(const char *type_name);
ferry_err ferry__node_name_validate(const char *name);
/* The root: dir, or the default "/dev/shm/ferry-<uid>" for NULL; FERRY_EINVAL for "". */
ferry_err ferry__root_path(const char *dir, char *out, size_t cap);
/* Builds "<root>/<domain>". */
ferry_err ferry__domain_path(const char *dir, uint32_t domain, char *out, size_t cap);

#define FERRY__PUB_MAGIC 0x4255505952524546ULL
#define FERRY__SUB_MAGIC 0x4255535952524546ULL
#define FERRY__WS_MAGIC 0x5357535952524546ULL

struct ferry_node {
    uint64_t magic;
    pthread_mutex_t lock;
    int dirfd;           /* the domain directory, opened once: nothing resolves its path again */
    char path[PATH_MAX]; /* its path, for messages and ferry_node_dir */
    char name[FERRY_NODE_NAME_MAX + 1];
    uint32_t domain;
    ferry_log_fn log;
    void *log_arg;
    ferry_log_level log_level;
    int64_t allow_gid;
    ferry__obj live; /* circular list head */
    uint32_t live_count;
    ferry__obj grave; /* destroyed children, kept so stale handles fail cleanly */
    uint32_t grave_count;
    _Atomic int64_t next_sweep; /* when ferry__node_sweep_domain may run again */
};

/* A bound on how often one endpoint logs what its peers do wrong, so that a peer repeating a
 * fault (a flood of connections, garbage in a loop) cannot flood the log: a bucket of
 * FERRY__PEER_LOG_BURST lines, refilled by FERRY__PEER_LOG_PER_S a second; what does not fit is
 * counted and said in one line when the bucket has room again. */
#define FERRY__PEER_LOG_BURST 64
#define FERRY__PEER_LOG_PER_S 2
typedef struct ferry__ratelimit {
    int64_t last;  /* when the bucket was last refilled */
    uint32_t used; /* lines taken from it (zero-filled: full) */
    uint32_t left_out;
} ferry__ratelimit;
void ferry__log_peer(ferry_node *node, ferry__ratelimit *rl, ferry_log_level level, const char *fmt,
                     ...) __attribute__((format(printf, 4, 5)));
/* Opens (creating when missing) the directory of a normalised topic, relative to the node's
 * domain directory. Returns a dirfd, or -1 with errno (EPERM: not a private directory). */
int ferry__node_topic_dir(ferry_node *node, const char *dirname);
/* How often a creation makes its topic directory again when a sweep removed it, empty, under it. */
#define FERRY__TOPIC_DIR_ATTEMPTS 8
/* Every FERRY__DOMAIN_SWEEP_NS at most, from the creation of an endpoint: sweeps the topic
 * directories of the domain (ferry__status_sweep) and removes those left empty, so that what a
 * crashed or finished process left goes without an operator. Bounded: FERRY__SWEEP_ENTRIES
 * topics a pass. */
#define FERRY__DOMAIN_SWEEP_NS (1000000000LL)
void ferry__node_sweep_domain(ferry_node *node);
/* Removes a topic directory if it is empty (an endpoint's last act, or a sweep's). */
void ferry__node_topic_dir_remove(ferry_node *node, const char *dirname);
/* True when a connecting process with these credentials is allowed. */
bool ferry__node_peer_allowed(const ferry_node *node, int sock, uid_t uid);
/* File modes for sockets and status files under the node's sharing policy. */
unsigned ferry__node_file_mode(const ferry_node *node, bool writable_by_group);

#endif
