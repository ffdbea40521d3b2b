/*
 * Internals shared by the core's files: the layouts of shared memory (data segment, connection
 * segment, status file), the control messages, and the private structs behind the public
 * handles.
 *
 * Shared memory holds offsets and indices, never pointers. Every value another process can write
 * is read once into a local, range-checked, then used; walks over shared structures are bounded.
 * Concurrency: node functions lock node->lock; a publisher or subscriber is used by one thread at
 * a time (the caller serialises); the rings are single-producer/single-consumer except the
 * delivery ring's tail, which both ends advance with a CAS (see ring rules below).
 */
#ifndef FERRY_CORE_H
#define FERRY_CORE_H

#include <ferry/ferry.h>

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/conn.h"
#include "core/module.h"
#include "platform/platform.h"

/* Hot paths poll for housekeeping at most this often: a subscriber that found nothing every
 * millisecond (so an application's epoll loop cannot spin on a pending hang-up), a publisher
 * every 50 ms (so a dead subscriber's chunks come back within 100 ms at 30 Hz, and a 30 Hz
 * camera pays the system call on every other frame, after its wake-ups). */
#define FERRY__HOUSEKEEP_NS 1000000
#define FERRY__PUB_HOUSEKEEP_NS 50000000
/* A subscriber whose queue never runs dry (it is slower than its publishers) still looks for
 * new, restarted and dead publishers at least this often. */
#define FERRY__SUB_BUSY_HOUSEKEEP_NS 10000000

/* ---- data segment (publisher RW, subscribers RO) -------------------------------------------- */

#define FERRY__DATA_MAGIC 0x5441445952524546ULL /* "FERRYDAT" */

typedef struct ferry__data_header {
    uint64_t magic;
    uint32_t version;
    uint32_t header_size;
    uint64_t segment_size;   /* bytes of the memfd (the byte cap plus header and table) */
    uint64_t table_offset;   /* ferry__chunk_entry[max_chunks] */
    uint64_t arena_offset;   /* first chunk; page aligned */
    uint64_t payload_offset; /* from a chunk's start to its payload */
    uint64_t publisher_id;
    uint32_t max_chunks;
    uint32_t reserved;
} ferry__data_header;

/* Written once, when the chunk is carved, before it is ever delivered. */
typedef struct ferry__chunk_entry {
    uint64_t offset;   /* chunk start, page aligned */
    uint64_t capacity; /* payload bytes */
} ferry__chunk_entry;

/* At the start of every chunk; rewritten by the publisher for each loan. */
typedef struct ferry__chunk_header {
    uint64_t size;
    uint64_t sequence;
    int64_t publish_ns;
    uint64_t publisher_id;
    uint32_t index;
    uint32_t generation;
    uint64_t reserved[3];
} ferry__chunk_header;

/* ---- control messages (one seqpacket datagram each) ----------------------------------------- */

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
    char type_name[FERRY_TYPE_NAME_MAX + 1];
    char reason[FERRY__REASON_MAX]; /* a refusal's cause, for the refused side to print */
} ferry__welcome;

/* Checks a received message; fills a NUL-terminated copy. FERRY_EPROTO when malformed. */
ferry_err ferry__hello_decode(const void *buf, size_t len, ferry__hello *out);
ferry_err ferry__welcome_decode(const void *buf, size_t len, ferry__welcome *out);
ferry_err ferry__bye_decode(const void *buf, size_t len);
ferry_err ferry__attach_decode(const void *buf, size_t len, int nfds, ferry__attach_msg *out);
void ferry__bye_init(ferry__bye *out);
void ferry__wake_init(ferry__bye *out);
/* The kind of a bodiless message (FERRY__MSG_BYE or FERRY__MSG_WAKE), or 0 when buf is none. */
uint32_t ferry__ctl_decode(const void *buf, size_t len);
/* Checks the geometry a welcome announces against the sizes of the segments received. */
ferry_err ferry__welcome_check(const ferry__welcome *w, uint64_t data_fd_size,
                               uint64_t conn_fd_size);
/* Checks a connection segment's header against what the welcome announced. */
ferry_err ferry__conn_check(const ferry__conn_header *h, const ferry__welcome *w);

/* ---- status files: one per endpoint, in the topic directory --------------------------------- */

#define FERRY__STATUS_MAGIC 0x5441545359525246ULL /* "FRRYSTAT" */
#define FERRY__STATUS_SIZE 4096u

typedef struct ferry__status {
    uint64_t magic;
    uint32_t version;
    uint32_t kind; /* ferry_endpoint_kind */
    int32_t pid;
    uint32_t depth;
    uint64_t id;
    uint64_t type_hash;
    char topic[FERRY_TOPIC_MAX + 2];
    char type_name[FERRY_TYPE_NAME_MAX + 1];
    char node_name[FERRY_NODE_NAME_MAX + 1];
    ferry_publisher_stats pub;
    ferry_subscriber_stats sub;
} ferry__status;

typedef struct ferry__status_file {
    int fd;
    ferry__status *map;
    char name[48];
} ferry__status_file;

ferry_err ferry__status_create(ferry__status_file *sf, int topic_dirfd, const char *prefix,
                               const ferry__status *initial, unsigned mode);
void ferry__status_remove(ferry__status_file *sf, int topic_dirfd);
/* Reads a status file (copy, strings terminated) and whether its owner is alive. */
ferry_err ferry__status_read(int topic_dirfd, const char *name, ferry__status *out, bool *alive);
/* Removes a dead endpoint's status file (and a publisher's socket). */
void ferry__status_remove_dead(int topic_dirfd, const char *name);
/* FERRY_ETYPE when a live endpoint of the topic directory has another type. Removes the files
 * of dead endpoints it meets. */
ferry_err ferry__status_check_type(int topic_dirfd, const char *type_name, uint64_t type_hash);

/* ---- names and directories ------------------------------------------------------------------ */

/* Normalises a topic ("/a/b") and derives its directory name ("a.b"). */
ferry_err ferry__topic_normalize(const char *topic, char *norm, size_t norm_cap, char *dirname,
                                 size_t dir_cap);
ferry_err ferry__type_name_validate(const char *type_name);
ferry_err ferry__node_name_validate(const char *name);
/* The root: dir, or the default "/dev/shm/ferry-<uid>" for NULL; FERRY_EINVAL for "". */
ferry_err ferry__root_path(const char *dir, char *out, size_t cap);
/* Builds "<root>/<domain>". */
ferry_err ferry__domain_path(const char *dir, uint32_t domain, char *out, size_t cap);

/* ---- node ----------------------------------------------------------------------------------- */

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
    ferry__obj live;      /* circular list head */
    uint32_t live_count;
    ferry__obj grave;     /* destroyed children, kept so stale handles fail cleanly */
    uint32_t grave_count;
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
void ferry__log_peer(ferry_node *node, ferry__ratelimit *rl, ferry_log_level level,
                     const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Opens (creating when missing) the directory of a normalised topic, relative to the node's
 * domain directory. Returns a dirfd, or -1 with errno (EPERM: not a private directory). */
int ferry__node_topic_dir(ferry_node *node, const char *dirname);
/* True when a connecting process with these credentials is allowed. */
bool ferry__node_peer_allowed(const ferry_node *node, int sock, uid_t uid);
/* File modes for sockets and status files under the node's sharing policy. */
unsigned ferry__node_file_mode(const ferry_node *node, bool writable_by_group);

/* ---- publisher ------------------------------------------------------------------------------ */

enum { FERRY__CHUNK_FREE = 0, FERRY__CHUNK_LOANED = 1, FERRY__CHUNK_PUBLISHED = 2 };
#define FERRY__NONE UINT32_MAX

typedef struct ferry__chunk {
    uint64_t offset;    /* chunk start in the segment */
    uint64_t capacity;  /* payload bytes */
    uint64_t loan_size;
    uint32_t refs;      /* queued or held by subscribers, plus history */
    uint32_t gen;
    uint32_t next_free;
    uint16_t cls;
    uint8_t state;
} ferry__chunk;

typedef struct ferry__class {
    uint64_t chunk_bytes; /* chunk size, page multiple */
    uint32_t free_head;
    uint32_t count;
    uint32_t free_count;
} ferry__class;

#define FERRY__MAX_CLASSES 64

/* The pool: size classes carved on demand from one sealed memfd (pool.c). */
typedef struct ferry__pool {
    int fd;
    int ro_fd;
    uint8_t *base;
    uint64_t size;
    uint64_t arena_offset;
    uint64_t arena_used;
    uint64_t arena_cap;
    uint64_t payload_offset;
    uint64_t max_sample;
    ferry__chunk_entry *table; /* in the segment */
    ferry__chunk *chunks;      /* private */
    uint32_t max_chunks;
    uint32_t nchunks;
    uint32_t loaned;
    uint32_t nfree;
    ferry__class classes[FERRY__MAX_CLASSES];
    uint32_t nclasses;
} ferry__pool;

ferry_err ferry__pool_init(ferry__pool *p, uint64_t publisher_id, uint64_t pool_bytes,
                           uint32_t max_chunks, uint64_t max_sample, uint64_t align);
void ferry__pool_fini(ferry__pool *p);
/* A free chunk of capacity >= size (carving when needed), or FERRY__NONE with *err set. */
uint32_t ferry__pool_get(ferry__pool *p, uint64_t size, ferry_err *err);
/* Makes the size class serving size hold at least count chunks (carving what is missing, all or
 * nothing as far as the caps go) and touches every page of its chunks writable. *chunk_bytes
 * receives the class's chunk size; FERRY_EPOOL when the byte cap, the chunk cap or the number of
 * classes forbids it, FERRY_ENOMEM when the system refused the pages. */
ferry_err ferry__pool_reserve(ferry__pool *p, uint64_t size, uint32_t count, uint64_t *chunk_bytes);
void ferry__pool_put(ferry__pool *p, uint32_t index);
/* Index of the chunk whose payload starts at ptr, or FERRY__NONE. */
uint32_t ferry__pool_find(const ferry__pool *p, const void *payload);
static inline ferry__chunk_header *ferry__pool_header(const ferry__pool *p, uint32_t index)
{
    return (ferry__chunk_header *)(p->base + p->chunks[index].offset);
}
static inline uint8_t *ferry__pool_payload(const ferry__pool *p, uint32_t index)
{
    return p->base + p->chunks[index].offset + p->payload_offset;
}

/* ---- helpers -------------------------------------------------------------------------------- */


/* Epoll tags: kind in the top byte, slot and connection generation below. */
enum {
    FERRY__TAG_LISTEN = 1,
    FERRY__TAG_WATCH = 3,
    FERRY__TAG_CONN = 4,
    FERRY__TAG_PENDING = 5, /* a publisher's accepted connection whose hello has not come */
};
static inline uint64_t ferry__tag(unsigned kind, uint32_t slot, uint32_t gen)
{
    return (uint64_t)kind << 56 | (uint64_t)(slot & 0xffffffu) << 32 | gen;
}
static inline unsigned ferry__tag_kind(uint64_t t)
{
    return (unsigned)(t >> 56);
}
static inline uint32_t ferry__tag_slot(uint64_t t)
{
    return (uint32_t)(t >> 32) & 0xffffffu;
}
static inline uint32_t ferry__tag_gen(uint64_t t)
{
    return (uint32_t)t;
}


/* Subscriber internals the waitset needs. */
bool ferry__subscriber_ready(ferry_subscriber *sub);
/* Arms the doorbells and runs housekeeping; true when a sample is queued. */
bool ferry__subscriber_arm(ferry_subscriber *sub);
void ferry__subscriber_housekeep(ferry_subscriber *sub);
int ferry__subscriber_poll_fd(const ferry_subscriber *sub);

#endif
