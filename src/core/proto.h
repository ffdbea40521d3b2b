/*
 * The control messages (one seqpacket datagram each) and their checks (proto.c): everything a
 * peer sends on a socket is decoded and range-checked here before use.
 */
#ifndef FERRY_PROTO_H
#define FERRY_PROTO_H

#include <ferry/ferry.h>

#include <stddef.h>
#include <stdint.h>

#include "core/conn.h"

#define FERRY__MSG_MAGIC 0x47534d5952524546ULL /* "FERRYMSG" */
enum {
    FERRY__MSG_HELLO = 1,
    FERRY__MSG_WELCOME = 2,
    FERRY__MSG_BYE = 3,
    FERRY__MSG_ATTACH = 4,
    FERRY__MSG_WAKE = 5,
};

/*
 * Wake-ups travel as datagrams on the connection's own socket (FERRY__MSG_WAKE), sent with
 * MSG_DONTWAIT: a per-call guarantee that the send never blocks, whatever the peer does. No
 * eventfd or other descriptor is exchanged for them, so there is no shared file description
 * whose O_NONBLOCK a peer could clear and no counter it could fill. A full socket means wake-ups
 * are pending already (EAGAIN is ignored).
 */

/* Descriptors a module of the publisher hands to every subscriber (device memory export
 * handles), sent after the welcome and whenever the publisher attaches more. Carries 1..4
 * descriptors; with none it withdraws the key. */
typedef struct ferry__attach_msg {
    uint64_t magic;
    uint32_t version;
    uint32_t kind;
    uint64_t key;
    uint32_t nfds;
    uint32_t reserved;
} ferry__attach_msg;

#define FERRY__ATTACH_MAX 256 /* attachments per publisher */

/* A message without a body: a subscriber leaving on purpose says so (FERRY__MSG_BYE), so that
 * its hang-up does not count as a death; either side wakes the other (FERRY__MSG_WAKE). */
typedef struct ferry__bye {
    uint64_t magic;
    uint32_t version;
    uint32_t kind;
} ferry__bye;

/* Most wake-ups one side may find queued at once before the other counts as flooding. An honest
 * peer sends one per doorbell the other set; the doorbell is set again only after a look. */
#define FERRY__WAKE_FLOOD 8

typedef struct ferry__hello {
    uint64_t magic;
    uint32_t version;
    uint32_t kind;
    uint64_t subscriber_id;
    uint64_t type_hash;
    int32_t pid;
    uint32_t depth;
    uint32_t overflow;
    uint32_t history;
    uint32_t require; /* FERRY_QOS_* bits the publisher must offer */
    uint32_t reserved;
    char topic[FERRY_TOPIC_MAX + 2];
    char type_name[FERRY_TYPE_NAME_MAX + 1];
    char node_name[FERRY_NODE_NAME_MAX + 1];
} ferry__hello; /* carries no descriptor */

#define FERRY__REASON_MAX 192

typedef struct ferry__welcome {
    uint64_t magic;
    uint32_t version;
    uint32_t kind;
    int32_t status; /* ferry_err; FERRY_OK: two descriptors follow (data RO, connection) */
    int32_t pid;
    uint64_t publisher_id;
    uint64_t type_hash;
    uint64_t data_size;
    uint64_t table_offset;
    uint64_t arena_offset;
    uint64_t payload_offset;
    uint64_t conn_size;
    uint32_t max_chunks;
    uint32_t depth;
    uint32_t deliver_capacity;
    uint32_t return_capacity;
    uint32_t offered; /* FERRY_QOS_* bits the publisher offers, also in a refusal */
    char type_name[FERRY_TYPE_NAME_MAX + 1];
    char reason[FERRY__REASON_MAX]; /* a refusal's cause, for the refused side to print */
} ferry__welcome;

/* Every FERRY_QOS_* bit a hello may require. */
#define FERRY__QOS_ALL ((uint32_t)(FERRY_QOS_RELIABLE | FERRY_QOS_DURABLE))
/* The policies of FERRY_QOS_* bits, for a log line: "reliability", "durability" or both. */
const char *ferry__qos_names(uint32_t bits);

/* Checks a received message; fills a NUL-terminated copy. FERRY_EPROTO when malformed. */
ferry_err ferry__hello_decode(const void *buf, size_t len, ferry__hello *out);
ferry_err ferry__welcome_decode(const void *buf, size_t len, ferry__welcome *out);
ferry_err ferry__bye_decode(const void *buf, size_t len);
ferry_err ferry__attach_decode(const void *buf, size_t len, int nfds, ferry__attach_msg *out);
/* Zeroes a message of size bytes and fills the head every message starts with (magic, version,
 * kind: the fields of ferry__bye). */
void ferry__msg_init(void *msg, size_t size, uint32_t kind);
void ferry__bye_init(ferry__bye *out);
void ferry__wake_init(ferry__bye *out);
/* The kind of a bodiless message (FERRY__MSG_BYE or FERRY__MSG_WAKE), or 0 when buf is none. */
uint32_t ferry__ctl_decode(const void *buf, size_t len);
/* Checks the geometry a welcome announces against the sizes of the segments received. */
ferry_err ferry__welcome_check(const ferry__welcome *w, uint64_t data_fd_size,
                               uint64_t conn_fd_size);
/* Checks a connection segment's header against what the welcome announced. */
ferry_err ferry__conn_check(const ferry__conn_header *h, const ferry__welcome *w);

#endif
