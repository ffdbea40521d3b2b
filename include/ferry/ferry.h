/*
 * ferry — zero-copy transport of large frames between processes on one host.
 *
 * A publisher owns a data segment (a sealed memfd) and hands out chunks of it as writable loans.
 * Publishing a loan passes a reference to every connected subscriber; subscribers map the
 * publisher's segment read-only and take samples that point straight into it. No payload byte is
 * copied. Publishers and subscribers find each other through a domain directory of Unix-domain
 * sockets: there is no daemon and no configuration file.
 *
 * Concurrency: a node may be used from any thread; creating and destroying its publishers,
 * subscribers and waitsets is serialised inside the node. A publisher, a subscriber or a waitset is
 * used by one thread at a time (the caller serialises); different ones may be used concurrently.
 *
 * Errors: every function returns a ferry_err; 0 (FERRY_OK) is success and ferry_strerror() gives a
 * printable message for every code. Where a system call failed the code is FERRY_ESYS and errno
 * still holds the cause when the function returns.
 *
 * Housekeeping (accepting subscribers, taking back returned chunks, noticing dead peers) runs
 * inside the calls the application already makes, bounded and rate-limited, plus the pollable
 * descriptors ferry_publisher_fd() and ferry_subscriber_fd(). ferry starts no thread.
 */
#ifndef FERRY_FERRY_H
#define FERRY_FERRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(FERRY_STATIC)
#define FERRY_API
#elif defined(FERRY_BUILDING)
#define FERRY_API __attribute__((visibility("default")))
#else
#define FERRY_API
#endif

/** Version of the library and of the shared-memory and socket protocol. */
#define FERRY_VERSION_MAJOR 0    /**< library version, major part */
#define FERRY_VERSION_MINOR 1    /**< library version, minor part */
#define FERRY_PROTOCOL_VERSION 4 /**< protocol version; a peer of another version is refused */

/* ---------------------------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------------------------- */

/** Every ferry call returns one of these. 0 is success; the others are positive. */
typedef enum ferry_err {
    FERRY_OK = 0,
    FERRY_EINVAL,    /**< an argument is invalid (NULL, zero, out of range, unknown flag) */
    FERRY_ENOMEM,    /**< out of memory (heap, memfd pages or mappings) */
    FERRY_EAGAIN,    /**< nothing available now (no sample yet); try again later */
    FERRY_ETIMEDOUT, /**< a blocking call's timeout expired */
    FERRY_ETYPE,     /**< the topic is in use with another type name or type hash */
    FERRY_ETOOBIG,   /**< a size exceeds the configured maximum */
    FERRY_EPOOL,     /**< the publisher's pool is exhausted (byte cap or chunk cap reached) */
    FERRY_ESTATE,    /**< the object is not in a state that allows the call (double release, ...) */
    FERRY_ECLOSED,   /**< the handle was destroyed */
    FERRY_EBUSY,     /**< the object still has live children, loans or held samples */
    FERRY_ELIMIT,    /**< a configured limit is reached (held samples, subscribers) */
    FERRY_ENAME,     /**< a topic or node name is not valid */
    FERRY_ESYS,      /**< a system call failed; errno holds the cause */
    FERRY_EPROTO,    /**< a peer broke the protocol or corrupted shared memory */
    FERRY_EPERM,     /**< permission denied (peer credentials, file modes) */
    FERRY_ENODEV,    /**< no such device (no GPU, no CUDA driver) */
    FERRY_ENOTSUP,   /**< not supported by this build or this platform */
    FERRY_EFOREIGN,  /**< the sample or loan belongs to another publisher or subscriber */
    FERRY_EQOS,      /**< the publisher does not offer a policy the subscriber requires */
    FERRY_ERR_COUNT_ /**< number of codes; not an error */
} ferry_err;

/** A static, printable message for err ("invalid argument", ...). Never NULL. */
FERRY_API const char *ferry_strerror(ferry_err err);

/** The enum name of err ("FERRY_EINVAL"), for logs and tests. Never NULL. */
FERRY_API const char *ferry_errname(ferry_err err);

/* ---------------------------------------------------------------------------------------------
 * Time
 * ------------------------------------------------------------------------------------------- */

/** A point on CLOCK_MONOTONIC, in nanoseconds; comparable between processes of one host. */
typedef struct ferry_time {
    int64_t ns; /**< CLOCK_MONOTONIC reading, in nanoseconds */
} ferry_time;

/** The current CLOCK_MONOTONIC time. */
FERRY_API ferry_time ferry_now(void);

/** Timeouts: a negative value waits for ever, 0 polls once. */
#define FERRY_FOREVER ((int64_t)-1)

/* ---------------------------------------------------------------------------------------------
 * Node
 * ------------------------------------------------------------------------------------------- */

/** A context for publishers and subscribers of one domain (ferry_node_create). */
typedef struct ferry_node ferry_node;
/** Publishes samples on one topic (ferry_publisher_create). */
typedef struct ferry_publisher ferry_publisher;
/** Takes samples of one topic from all its publishers (ferry_subscriber_create). */
typedef struct ferry_subscriber ferry_subscriber;
/** Waits on many subscribers at once (ferry_waitset_create). */
typedef struct ferry_waitset ferry_waitset;

/** Log levels of the log callback. */
typedef enum ferry_log_level {
    FERRY_LOG_ERROR = 1,
    FERRY_LOG_WARN = 2,
    FERRY_LOG_INFO = 3,
    FERRY_LOG_DEBUG = 4,
} ferry_log_level;

/** Receives ferry's diagnostics (peer rejected, protocol error, publisher gone). */
typedef void (*ferry_log_fn)(void *arg, ferry_log_level level, const char *message);

/** Largest domain number. */
#define FERRY_DOMAIN_MAX 1023u
/** Longest topic name, in bytes, without the terminating NUL. */
#define FERRY_TOPIC_MAX 200u
/** Longest type name, in bytes, without the terminating NUL. */
#define FERRY_TYPE_NAME_MAX 127u
/** Longest node name, in bytes, without the terminating NUL. */
#define FERRY_NODE_NAME_MAX 63u
/** Longest note an endpoint carries in ferry_endpoint_info.note, NUL excluded. */
#define FERRY_ENDPOINT_NOTE_MAX 191u

/** Options of ferry_node_create; ferry_node_options_init gives the defaults. */
typedef struct ferry_node_options {
    /** Root of the domain directories. NULL: "/dev/shm/ferry-<uid>"; an empty string is
     *  invalid. The root is created when missing, but only when its parent exists. The library
     *  reads no environment variable; the ferry CLI takes this from FERRY_DIR or --dir. */
    const char *dir;
    /** Domain number, 0..FERRY_DOMAIN_MAX. Nodes see only topics of their own domain. */
    uint32_t domain;
    /** Node name for introspection: letters, digits, '_' and '-'. NULL: "node". */
    const char *name;
    /** Diagnostics sink. NULL: messages of level <= log_level go to stderr, prefixed "ferry: ". */
    ferry_log_fn log;
    /** Passed to log as its first argument. */
    void *log_arg;
    /** Most verbose level passed on. 0 (the zeroed default) means FERRY_LOG_WARN. */
    ferry_log_level log_level;
    /** Who may connect. By default processes of the node's own effective uid (and root, which
     *  can read any process's memory anyway); peers are checked with SO_PEERCRED on both ends.
     *  When share_with_group is true, members of group share_gid (primary or supplementary) may
     *  too: directories are then created group share_gid with mode 02770, sockets 0660 and
     *  status files 0640, and a directory of another owner is accepted when it has that group
     *  and mode. All sharing processes set the same dir, since the default dir is per uid. */
    bool share_with_group;
    /** The group that may connect and owns the directories; used only with share_with_group. */
    uint32_t share_gid;
} ferry_node_options;

/** Fills o with the defaults. Fields left zero also mean the default. */
FERRY_API void ferry_node_options_init(ferry_node_options *o);

/**
 * Creates a node: a context for publishers and subscribers of one domain. Creates the root and
 * the domain directory (mode 0700) when missing, and keeps the domain directory open: every
 * later file is made relative to that descriptor, never through its path again. A refusal is
 * logged with the path, what was found there (its type, owner and mode) and what to do.
 *
 * @param out      receives the node; untouched on error
 * @param options  NULL for the defaults
 * @retval FERRY_OK         *out is a new node, owned by the caller until ferry_node_destroy
 * @retval FERRY_EINVAL     out is NULL, domain > FERRY_DOMAIN_MAX or dir is empty
 * @retval FERRY_ENAME      the name has characters outside [A-Za-z0-9_-] or is too long, or
 *                          the directory's path is
 * @retval FERRY_EPERM      the root or domain directory belongs to another user, is open to
 *                          others, or is not a directory (a symbolic link, a file, a FIFO)
 * @retval FERRY_ENOMEM     out of memory
 * @retval FERRY_ESYS       the directory could not be created (errno says why: ENOENT when
 *                          the root's parent does not exist)
 */
FERRY_API ferry_err ferry_node_create(ferry_node **out, const ferry_node_options *options);

/**
 * Destroys a node. Refused while it has publishers, subscribers or waitsets.
 * @retval FERRY_OK      the node is gone; the pointer must not be used again
 * @retval FERRY_EINVAL  node is NULL or not a node
 * @retval FERRY_EBUSY   the node still has live children; nothing changed
 */
FERRY_API ferry_err ferry_node_destroy(ferry_node *node);

/** The domain directory of a node (e.g. "/dev/shm/ferry-1000/0"). NULL for an invalid node. */
FERRY_API const char *ferry_node_dir(const ferry_node *node);

/**
 * Checks a topic name: 1..FERRY_TOPIC_MAX bytes of segments of [A-Za-z0-9_], separated by single
 * '/', optionally with a leading '/' (which is implied when absent: "a/b" and "/a/b" are one
 * topic).
 * @retval FERRY_OK     the name is valid
 * @retval FERRY_ENAME  it is not
 */
FERRY_API ferry_err ferry_topic_validate(const char *topic);

/* ---------------------------------------------------------------------------------------------
 * Publisher
 * ------------------------------------------------------------------------------------------- */

/** A spin budget (spin_ns of the publisher and subscriber options) that never spins nor yields:
 *  every wait sleeps in the kernel at once (a real-time task that must not give its CPU to a
 *  peer of its priority, say). */
#define FERRY_SPIN_OFF (-1)
/** The spin budget that spin_ns 0 means where spinning can help: where the waiting thread may
 *  run on two CPUs or more, or where a peer it waits for runs on another CPU than its one. Where
 *  it and every peer may run only on the same one CPU, 0 means one sched_yield instead (spinning
 *  there only delays the peer it waits for). */
#define FERRY_SPIN_DEFAULT_NS 20000

/** How an endpoint's waits pass the time before they sleep, as decided now (spin_ns 0 decides by
 *  where the endpoint and its peers may run, looked at again every 100 ms; see ferry_spin_stats).
 */
typedef enum ferry_spin_mode {
    FERRY_SPIN_MODE_SPIN = 0,  /**< poll up to budget_ns (adaptive) before sleeping */
    FERRY_SPIN_MODE_YIELD = 1, /**< one sched_yield: it and its peers share its one CPU */
    FERRY_SPIN_MODE_OFF = 2,   /**< sleep at once (FERRY_SPIN_OFF) */
    FERRY_SPIN_MODE_POLL = 3,  /**< never sleep (a subscriber's busy_poll) */
} ferry_spin_mode;

/** Where an endpoint's waits run and how they spin: in ferry_publisher_stats and
 *  ferry_subscriber_stats, and shown by `ferry info`. A peer says which CPU it may run on in the
 *  connection it shares; a peer that lies can make this side spin where it cannot help, and the
 *  adaptive budget bounds what that costs (a spin that finds nothing halves the budget: one full
 *  budget per 32 waits once it ran down). */
typedef struct ferry_spin_stats {
    uint32_t mode;     /**< ferry_spin_mode */
    int32_t cpu;       /**< the one CPU the endpoint's thread may run on; -1: more than one */
    int64_t budget_ns; /**< a full spin's length (FERRY_SPIN_MODE_SPIN); 0 otherwise */
    uint32_t peers_elsewhere; /**< peers that may run on another CPU than cpu (cpu >= 0) */
    uint32_t peers_same_cpu;  /**< peers that may run only on cpu */
    uint64_t spins;           /**< waits that spun (or yielded) before sleeping */
    uint64_t spins_found;     /**< of those, the ones that found what they waited for */
    /** A subscriber's anticipations of a steady stream's next sample: ferry_wait sleeps until a
     *  little before it is due and spins across its arrival (mode SPIN only; bounded to 1/32 of
     *  the wall time). 0 for a publisher. */
    uint64_t paced_spins;
    uint64_t paced_found; /**< of those, the ones that caught their sample spinning */
} ferry_spin_stats;

/** What ferry_loan does when no chunk is free and the byte cap or chunk cap is reached. */
typedef enum ferry_pool_policy {
    FERRY_POOL_ERROR = 0, /**< return FERRY_EPOOL at once (default) */
    FERRY_POOL_BLOCK = 1, /**< wait up to block_timeout_ns for a chunk to come back */
} ferry_pool_policy;

/**
 * The pages behind a publisher's data segment. With 4 KiB pages a subscriber that reads every
 * byte of a 6 MB frame takes about 1,500 TLB misses; with 2 MiB pages it takes three. Chunks of
 * 2 MiB and more of a huge-page pool are multiples of 2 MiB and start on a 2 MiB boundary of
 * the segment, and every mapping of the segment, the subscribers' included, starts on a 2 MiB
 * boundary, so that each such page maps with one PMD. What a pool got is in
 * ferry_publisher_stats.huge_pages; a kind the machine does not offer falls back to 4 KiB pages
 * with one FERRY_LOG_WARN line through the node's log saying why (not an error).
 */
typedef enum ferry_huge_pages {
    FERRY_HUGE_PAGES_OFF = 0,     /**< 4 KiB pages (default) */
    FERRY_HUGE_PAGES_THP = 1,     /**< transparent huge pages of shmem: the segment's mappings
                                       ask for them (MADV_HUGEPAGE), which works where
                                       /sys/kernel/mm/transparent_hugepage/shmem_enabled (or
                                       its hugepages-2048kB/shmem_enabled) is advise, always,
                                       within_size or force; the kernel may still give 4 KiB
                                       pages where it finds no free 2 MiB (huge_bytes says) */
    FERRY_HUGE_PAGES_HUGETLB = 2, /**< a hugetlbfs memfd of 2 MiB pages (MFD_HUGETLB), taken
                                       from the pages the administrator set aside
                                       (vm.nr_hugepages): the whole segment, pool_bytes rounded
                                       up to 2 MiB plus 2 MiB of header, is reserved from them
                                       when the publisher is created, so it needs that many
                                       free pages then; the pages are never swapped */
    FERRY_HUGE_PAGES_AUTO = 3,    /**< HUGETLB when enough free pages are set aside, else THP
                                       when shmem allows it, else 4 KiB pages (the last with
                                       the warning); never a value of the stats */
} ferry_huge_pages;

/** Policies that a publisher offers and a subscriber may require
 * (ferry_subscriber_options.require), matched as DDS matches its endpoints: a subscriber connects
 * only to a publisher that offers every policy it requires. */
typedef enum ferry_qos_policy {
    /** Every sample published reaches the subscriber's queue (a full queue drops its oldest, as
     *  a keep-last history does). Offered unless ferry_publisher_options.best_effort. */
    FERRY_QOS_RELIABLE = 1,
    /** The publisher keeps samples for subscribers that join later (its history option). */
    FERRY_QOS_DURABLE = 2,
} ferry_qos_policy;

/** Options of ferry_publisher_create; ferry_publisher_options_init gives the defaults. */
typedef struct ferry_publisher_options {
    /** Largest payload one loan may ask for. Default 64 MiB. */
    size_t max_sample_size;
    /** Byte cap of the data segment; chunks are carved on demand up to it. Default 256 MiB. */
    size_t pool_bytes;
    /** Most chunks the pool may hold, all size classes together. Default 256, at most 65536. */
    uint32_t max_chunks;
    /** Most subscribers connected at once. Default 32, at most 1024. */
    uint32_t max_subscribers;
    /** Samples kept for late joiners (who ask for them with their own history option). Default 0.
     */
    uint32_t history;
    /** Alignment of payloads: a power of two from 64 to 4096. Default 64. */
    size_t payload_align;
    /** Policy when the pool is exhausted. Default FERRY_POOL_ERROR. */
    ferry_pool_policy on_pool_exhausted;
    /** How long ferry_loan (FERRY_POOL_BLOCK) and ferry_publish (a subscriber with
     *  FERRY_OVERFLOW_BLOCK) wait. 0 means the default, 100 ms; negative is invalid (no call
     *  waits for ever on its subscribers). */
    int64_t block_timeout_ns;
    /** Before those waits sleep, poll for up to this long (nanoseconds) for the chunk or the room
     *  to come: a subscriber that keeps up makes room within a microsecond, and a publisher that
     *  sleeps instead pays two context switches and the subscriber's system call to wake it. The
     *  budget adapts: it halves after each spin that found nothing (a paced stream soon spins no
     *  more) and doubles back after one that did. 0 means the default (FERRY_SPIN_DEFAULT_NS
     *  where a subscriber may run on another CPU than this thread; where both may run only on the
     *  same one CPU, one sched_yield instead, which lets the subscriber drain its queue);
     *  FERRY_SPIN_OFF neither spins nor yields; at most 10 ms. */
    int64_t spin_ns;
    /** Admit subscribers that ask for FERRY_OVERFLOW_BLOCK, which make ferry_publish wait up to
     *  block_timeout_ns for room in their queue. Default false: such a subscriber is refused
     *  (it logs "the publisher does not admit blocking subscribers"), so that no subscriber can
     *  slow this publisher. */
    bool admit_blocking;
    /** Most chunk references one subscriber may have at once, queued and held together. A
     *  subscriber here is a peer, whatever number of connections it makes: a process of this
     *  publisher's user, or every process of another user (a member of the share group)
     *  together. A subscriber at the limit receives nothing more until it gives some back; each
     *  publication it misses meanwhile counts as dropped for it (stats dropped and limited),
     *  while the other subscribers carry on. Default 0: seven eighths of max_chunks, so that at
     *  least an eighth (and at least one chunk) stays for the publisher's next loans and its
     *  other subscribers. With k untrusted subscribers, give each less than 1/(k+1) of the
     *  pool. */
    uint32_t max_chunks_per_subscriber;
    /** The same limit in bytes of the chunks referenced, per peer as well. Default 0: seven
     *  eighths of pool_bytes. */
    size_t max_bytes_per_subscriber;
    /** Connections accepted whose hello has not come yet, counted apart from max_subscribers.
     *  A hello must come within a second; when every place is taken, the oldest waiting
     *  connection is dropped for the newcomer. Each housekeeping pass accepts every connection
     *  queued in the listen backlog (256), so honest ones queued behind a flood of silent ones
     *  are admitted in that pass. Default 8, at most 256. */
    uint32_t max_pending;
    /** Pages of the data segment (ferry_huge_pages). Default FERRY_HUGE_PAGES_OFF. A huge-page
     *  pool rounds pool_bytes up to 2 MiB and spends 2 MiB on the segment's header and chunk
     *  table; chunks of 2 MiB and more are rounded up to 2 MiB. */
    ferry_huge_pages huge_pages;
    /** Offer no reliability: subscribers that require FERRY_QOS_RELIABLE are refused
     *  (FERRY_EQOS), as a DDS best-effort writer does not match a reliable reader. What the
     *  others receive is unchanged. Default false: the publisher offers FERRY_QOS_RELIABLE, and
     *  FERRY_QOS_DURABLE when it keeps history. */
    bool best_effort;
} ferry_publisher_options;

/** Fills o with the defaults. Fields left zero also mean the default. */
FERRY_API void ferry_publisher_options_init(ferry_publisher_options *o);

/**
 * Creates a publisher on a topic of type (type_name, type_hash). A topic's type is its
 * publishers': several publishers may share a topic when they agree on both, and a publisher of
 * another type is refused while one lives. Subscribers never claim a topic: one of another type
 * does not keep a publisher from starting (it is refused at its handshake instead, on its side).
 *
 * @retval FERRY_OK       *out is a new publisher, destroyed with ferry_publisher_destroy
 * @retval FERRY_EINVAL   a pointer is NULL or an option is out of range
 * @retval FERRY_ENAME    the topic or type name is not valid
 * @retval FERRY_ETYPE    a live publisher of the topic uses another type
 * @retval FERRY_ECLOSED  node was destroyed
 * @retval FERRY_ENOMEM   out of memory (heap, segment or address space: errno ENOMEM), or the
 *                        domain directory's file system has no room for the status file (errno
 *                        ENOSPC or EDQUOT)
 * @retval FERRY_ESYS     a system call failed (errno says why)
 */
FERRY_API ferry_err ferry_publisher_create(ferry_publisher **out, ferry_node *node,
                                           const char *topic, const char *type_name,
                                           uint64_t type_hash,
                                           const ferry_publisher_options *options);

/**
 * Destroys a publisher: disconnects its subscribers (samples they hold stay readable until they
 * release them), removes its socket and unmaps its segment. Outstanding loans are given up.
 * @retval FERRY_OK       done; the pointer must not be used again
 * @retval FERRY_EINVAL   pub is NULL
 * @retval FERRY_ECLOSED  pub was already destroyed (detected while its node lives)
 */
FERRY_API ferry_err ferry_publisher_destroy(ferry_publisher *pub);

/**
 * Loans a writable payload of size bytes from the publisher's pool. The payload belongs to the
 * caller until ferry_publish() or ferry_loan_release() succeeds.
 *
 * @param size     1..max_sample_size bytes
 * @param payload  receives a pointer aligned to payload_align
 * @retval FERRY_OK         *payload is yours to write
 * @retval FERRY_EINVAL     pub or payload is NULL, or size is 0
 * @retval FERRY_ETOOBIG    size > max_sample_size
 * @retval FERRY_ESTATE     pub is a managed publisher of a lifecycle node that is not ACTIVE
 *                          (lifecycle.h)
 * @retval FERRY_EPOOL      no chunk is free and the pool may not grow (FERRY_POOL_ERROR)
 * @retval FERRY_ETIMEDOUT  none came back in time (FERRY_POOL_BLOCK)
 * @retval FERRY_ENOMEM     a new chunk's memory is not there to take: it would not fit, with a
 *                          margin, in MemAvailable or under a memory cgroup's limit (errno
 *                          ENOMEM; checked before the pages are charged, so that the limit is
 *                          this error and not the OOM killer; nothing is allocated), or the
 *                          kernel refused the pages (a hugetlb cgroup's limit)
 * @retval FERRY_ECLOSED    pub was destroyed
 */
FERRY_API ferry_err ferry_loan(ferry_publisher *pub, size_t size, void **payload);

/**
 * Publishes a loaned payload: every connected subscriber gets a reference to it, none gets a
 * copy. size may be smaller than the loan (a frame that compressed well); 0 means the loaned size.
 * After FERRY_OK the payload belongs to ferry and must not be touched; on an error it is still
 * the caller's, to publish again or release.
 *
 * @retval FERRY_OK         published (subscribers whose queue was full lost their oldest sample,
 *                          counted as dropped, unless they asked to block the publisher)
 * @retval FERRY_EINVAL     pub or payload is NULL, or size exceeds the loan
 * @retval FERRY_EFOREIGN   payload is not a loan of this publisher
 * @retval FERRY_ESTATE     payload is not on loan (already published or released), or pub is a
 *                          managed publisher of a lifecycle node that is not ACTIVE (lifecycle.h;
 *                          the loan stays the caller's)
 * @retval FERRY_ETIMEDOUT  a subscriber with FERRY_OVERFLOW_BLOCK stayed full for block_timeout_ns
 * @retval FERRY_ECLOSED    pub was destroyed
 */
FERRY_API ferry_err ferry_publish(ferry_publisher *pub, void *payload, size_t size);

/**
 * Prepares the pool for loans of up to size bytes: carves, when needed, chunks of the size class
 * serving size until that class holds count chunks, and touches every page of them writable. Later
 * loans of up to size bytes then neither carve nor page-fault as long as no more than count of
 * them are out at once (on loan, queued or held by subscribers). Call it after creation, before
 * the stream starts. The caps are respected: nothing is carved when they forbid the whole
 * reservation, and the log says which cap.
 *
 * @param size     bytes of the largest sample to come, 1..max_sample_size
 * @param count    chunks the size class must hold, at least 1
 * @retval FERRY_OK       the size class holds count chunks or more, all touched
 * @retval FERRY_EINVAL   pub is NULL, or size or count is 0
 * @retval FERRY_ETOOBIG  size > max_sample_size
 * @retval FERRY_EPOOL    pool_bytes, max_chunks or the number of size classes (64) would be
 *                        exceeded; nothing was carved
 * @retval FERRY_ENOMEM   the chunks' memory is not there to take (as for ferry_loan); nothing
 *                        was carved
 * @retval FERRY_ECLOSED  pub was destroyed
 */
FERRY_API ferry_err ferry_publisher_reserve(ferry_publisher *pub, size_t size, uint32_t count);

/**
 * Gives an unpublished loan back. Same errors as ferry_publish (but never FERRY_ETIMEDOUT), except
 * that an inactive lifecycle node does not refuse it.
 */
FERRY_API ferry_err ferry_loan_release(ferry_publisher *pub, void *payload);

/**
 * Convenience for small or foreign data: loans size bytes, copies data in and publishes. The copy
 * is counted in the bytes_copied statistic; the zero-copy path is ferry_loan + ferry_publish.
 */
FERRY_API ferry_err ferry_publish_copy(ferry_publisher *pub, const void *data, size_t size);

/**
 * Runs housekeeping (accepts subscribers, takes back returned chunks, drops dead subscribers) and
 * waits up to timeout_ns for something to happen. Use it in a publisher's idle time, or when
 * ferry_publisher_fd() is readable.
 * @retval FERRY_OK         something was handled, or the timeout passed (0 polls once)
 * @retval FERRY_EINVAL / FERRY_ECLOSED as usual
 */
FERRY_API ferry_err ferry_publisher_poll(ferry_publisher *pub, int64_t timeout_ns);

/**
 * Waits, running housekeeping, until at least count subscribers are connected.
 * @retval FERRY_OK         count or more are connected
 * @retval FERRY_ETIMEDOUT  fewer are connected after timeout_ns
 */
FERRY_API ferry_err ferry_publisher_wait_subscribers(ferry_publisher *pub, uint32_t count,
                                                     int64_t timeout_ns);

/**
 * A descriptor that becomes readable when the publisher has housekeeping to do (a subscriber
 * connects or leaves, a blocked publish may go on). Add it to your epoll set, call
 * ferry_publisher_poll(pub, 0) when it fires. Owned by the publisher: do not close it.
 */
FERRY_API ferry_err ferry_publisher_fd(ferry_publisher *pub, int *fd);

/** A publisher's counters. All are since creation. */
typedef struct ferry_publisher_stats {
    uint64_t id;             /**< this publisher's id, as in ferry_sample.publisher_id */
    uint64_t published;      /**< samples published */
    uint64_t deliveries;     /**< references handed to subscribers */
    uint64_t dropped;        /**< references taken back from full subscriber queues */
    uint64_t bytes_copied;   /**< payload bytes ferry copied (ferry_publish_copy only) */
    uint64_t pool_bytes;     /**< bytes carved into chunks so far (in a huge-page pool with the
                                  padding that puts 2 MiB chunks on 2 MiB boundaries) */
    uint64_t pool_bytes_cap; /**< the byte cap */
    uint32_t chunks_total;   /**< chunks carved */
    uint32_t chunks_free;    /**< chunks ready to loan */
    uint32_t chunks_loaned;  /**< chunks on loan to the application */
    uint32_t chunks_in_use; /**< chunks published and still referenced (queues, holders, history) */
    uint32_t subscribers;   /**< subscribers connected now */
    uint32_t size_classes;  /**< size classes created */
    uint64_t subscribers_lost;   /**< subscribers that hung up or died while connected */
    uint64_t chunks_reclaimed;   /**< chunk references taken back from subscribers that went away */
    uint64_t rejected;           /**< connections refused (type, credentials, protocol) */
    uint64_t protocol_errors;    /**< subscribers disconnected for breaking the protocol */
    uint64_t limited;            /**< deliveries skipped for a subscriber at its per-subscriber
                                      limit (max_chunks/bytes_per_subscriber); also in dropped */
    uint64_t pending_dropped;    /**< connections dropped before their hello (deadline or budget) */
    ferry_huge_pages huge_pages; /**< the pages the data segment uses: OFF, THP or HUGETLB */
    uint64_t huge_bytes;         /**< bytes of the segment this process maps with 2 MiB pages
                                      (ShmemPmdMapped or Hugetlb of its entry in /proc/self/smaps),
                                      as of the last carve or ferry_publisher_stats_get; 0 with
                                      4 KiB pages */
    ferry_spin_stats spin;       /**< how its blocking waits spin (loans, blocking subscribers) */
    uint64_t incompatible;       /**< subscribers refused for requiring a policy this publisher
                                      does not offer (FERRY_EQOS; also in rejected) */
    uint32_t incompatible_policies; /**< the FERRY_QOS_* bits the last of them lacked */
} ferry_publisher_stats;

/**
 * Fills *out with the publisher's counters, after taking back the chunks its subscribers returned.
 * @retval FERRY_OK      *out is filled
 * @retval FERRY_EINVAL  pub or out is NULL
 * @retval FERRY_ECLOSED pub was destroyed
 */
FERRY_API ferry_err ferry_publisher_stats_get(ferry_publisher *pub, ferry_publisher_stats *out);

/* ---------------------------------------------------------------------------------------------
 * Subscriber
 * ------------------------------------------------------------------------------------------- */

/** What happens when a sample arrives and this subscriber's queue holds depth samples already. */
typedef enum ferry_overflow {
    FERRY_OVERFLOW_DROP_OLDEST = 0, /**< the publisher drops the oldest queued sample (default) */
    FERRY_OVERFLOW_BLOCK = 1,       /**< the publisher waits up to its block_timeout_ns; only a
                                         publisher with admit_blocking accepts it */
} ferry_overflow;

/** Options of ferry_subscriber_create; ferry_subscriber_options_init gives the defaults. */
typedef struct ferry_subscriber_options {
    /** Queue depth per publisher: samples delivered and not yet taken. Default 2, at most 4096. */
    uint32_t depth;
    /** Overflow policy. Default FERRY_OVERFLOW_DROP_OLDEST. */
    ferry_overflow overflow;
    /** On joining, ask each publisher for up to this many of its last samples. Default 0. */
    uint32_t history;
    /** Most samples taken and not released at once. Default 16. */
    uint32_t max_held;
    /** Most publishers connected at once. Default 16, at most 256. */
    uint32_t max_publishers;
    /** Populate a publisher chunk's pages in this process (MADV_POPULATE_READ, or reading one
     *  byte per page where the kernel lacks it) the first time a sample in that chunk is taken,
     *  before ferry_take returns it: the first sample of each chunk pays that once per
     *  connection, later ones read without a page fault. Default false. */
    bool prefault;
    /** Before ferry_wait sleeps, poll the queues for up to this long (nanoseconds): a publisher
     *  flooding small messages then never has to wake this subscriber through the kernel. The
     *  budget adapts as the publisher's spin_ns does (it halves after each spin that found
     *  nothing, so a 30 Hz camera's subscriber soon spins no more). 0 means the default
     *  (FERRY_SPIN_DEFAULT_NS where a publisher may run on another CPU than this thread; where
     *  both may run only on the same one CPU, one sched_yield instead, which lets the publisher
     *  fill the queue); FERRY_SPIN_OFF neither spins nor yields; at most 10 ms. Where it spins,
     *  ferry_wait also anticipates a steady stream's next sample (ferry_spin_stats.paced_spins):
     *  FERRY_SPIN_OFF turns that off too. */
    int64_t spin_ns;
    /** Poll instead of sleeping: ferry_wait never sleeps in the kernel and returns within
     *  nanoseconds of a delivery, for a subscriber that has a CPU to itself (pinned, isolated).
     *  It uses that whole CPU while it waits; spin_ns does not apply. Housekeeping still runs
     *  every millisecond, and the descriptor of ferry_subscriber_fd works as before. Default
     *  false. */
    bool busy_poll;
    /** A subscriber that must not cost the others anything, such as a recorder or a logger:
     *  its publishers queue each sample for it after every other subscriber and never make a
     *  system call to wake it. It learns of samples by looking: ferry_wait and waitsets look at
     *  its queues at least every FERRY_BACKGROUND_POLL_NS, and ferry_subscriber_fd() does not
     *  become readable for its samples (wait on it with a timeout no longer than that). Delivery
     *  and QoS are unchanged; with FERRY_OVERFLOW_BLOCK a full queue may hold its publisher up
     *  to that long. Default false. */
    bool background;
    /** Policies a publisher must offer for this subscriber to connect to it, FERRY_QOS_*
     *  bits: the request-offered rule of DDS. A publisher that lacks one refuses the subscriber
     *  (FERRY_EQOS); both sides count it (stats incompatible, incompatible_policies) and neither
     *  counts the other as connected. Default 0: any publisher. */
    uint32_t require;
} ferry_subscriber_options;

/** How often ferry_wait and waitsets look at a background subscriber's queues, at most. */
#define FERRY_BACKGROUND_POLL_NS 5000000LL

/** Fills o with the defaults. Fields left zero also mean the default. */
FERRY_API void ferry_subscriber_options_init(ferry_subscriber_options *o);

/**
 * Creates a subscriber and connects it to the topic's publishers, now and as they come.
 *
 * type_name NULL makes an untyped subscriber (type_hash is ignored): it takes the type of the
 * first publisher it connects to (ferry_subscriber_type tells which) and from then on refuses
 * publishers of another type, as a typed one does. A typed subscriber is refused here when a
 * live publisher has another type; a publisher of another type that starts later refuses it at
 * the handshake, which it logs, and ferry_subscriber_wait_publishers then says FERRY_ETYPE.
 *
 * @retval FERRY_OK       *out is a new subscriber, destroyed with ferry_subscriber_destroy
 * @retval FERRY_EINVAL   a pointer other than type_name is NULL, or an option is out of range
 * @retval FERRY_ENAME    the topic or type name is not valid
 * @retval FERRY_ETYPE    a live publisher of the topic uses another type
 * @retval FERRY_ECLOSED  node was destroyed
 * @retval FERRY_ENOMEM   out of memory, or the domain directory's file system has no room for
 *                        the status file (errno ENOSPC or EDQUOT)
 * @retval FERRY_ESYS     a system call failed (errno says why)
 */
FERRY_API ferry_err ferry_subscriber_create(ferry_subscriber **out, ferry_node *node,
                                            const char *topic, const char *type_name,
                                            uint64_t type_hash,
                                            const ferry_subscriber_options *options);

/**
 * Destroys a subscriber. Refused while it holds samples: release them first.
 * @retval FERRY_OK       done
 * @retval FERRY_EBUSY    samples are still held; nothing changed
 * @retval FERRY_EINVAL / FERRY_ECLOSED as usual
 */
FERRY_API ferry_err ferry_subscriber_destroy(ferry_subscriber *sub);

/** A taken sample: a read-only view of the publisher's own memory. */
typedef struct ferry_sample {
    const void *data;        /**< the payload, read-only (writing to it faults) */
    size_t size;             /**< payload bytes */
    uint64_t sequence;       /**< the publisher's count: 1 for its first sample */
    ferry_time publish_time; /**< when ferry_publish was called */
    uint64_t publisher_id;   /**< the publisher (ferry_publisher_stats.id) */
    uint64_t private_[3];    /**< ferry's; do not touch */
} ferry_sample;

/**
 * Takes the oldest queued sample (across publishers: the earliest publish time). The sample is
 * the caller's until ferry_release(); its data stays valid and unchanged until then, even when
 * its publisher dies.
 *
 * @retval FERRY_OK       *sample is filled
 * @retval FERRY_EAGAIN   no sample is queued; ferry_subscriber_fd() fires when one comes
 * @retval FERRY_ELIMIT   max_held samples are held already; release one first
 * @retval FERRY_EINVAL / FERRY_ECLOSED as usual
 */
FERRY_API ferry_err ferry_take(ferry_subscriber *sub, ferry_sample *sample);

/**
 * Releases a taken sample; its data must not be read afterwards. The sample is cleared.
 * @retval FERRY_OK       released
 * @retval FERRY_EFOREIGN the sample was taken by another subscriber
 * @retval FERRY_ESTATE   the sample was already released (or never taken)
 * @retval FERRY_EINVAL / FERRY_ECLOSED as usual
 */
FERRY_API ferry_err ferry_release(ferry_subscriber *sub, ferry_sample *sample);

/**
 * Waits until a sample is queued (ferry_take would not return FERRY_EAGAIN), running
 * housekeeping meanwhile. It spins before it sleeps where spinning can help (spin_ns), and for
 * a steady stream sleeps until a little before the next sample is due, then spins across its
 * arrival (ferry_spin_stats.paced_spins).
 * @retval FERRY_OK         a sample is queued
 * @retval FERRY_ETIMEDOUT  none came within timeout_ns
 */
FERRY_API ferry_err ferry_wait(ferry_subscriber *sub, int64_t timeout_ns);

/**
 * Waits, running housekeeping, until at least count publishers are connected.
 * @retval FERRY_OK         count publishers are connected
 * @retval FERRY_ETYPE      fewer came within timeout_ns, and a publisher of another type
 *                          refused this subscriber (or it that publisher)
 * @retval FERRY_ETIMEDOUT  fewer came within timeout_ns; a publisher found but stuck in the
 *                          handshake for half a second or more is logged (FERRY_LOG_WARN) with
 *                          why: its listen backlog full, or our hello unread or unanswered (a
 *                          stalled publisher, or one flooded with connections)
 */
FERRY_API ferry_err ferry_subscriber_wait_publishers(ferry_subscriber *sub, uint32_t count,
                                                     int64_t timeout_ns);

/**
 * The subscriber's type: the one it was created with, or for an untyped subscriber the one its
 * first publisher gave it. *type_name stays valid while the subscriber lives.
 * @retval FERRY_OK      *type_name and *type_hash are filled
 * @retval FERRY_EAGAIN  an untyped subscriber that has met no publisher yet
 * @retval FERRY_EINVAL  a pointer is NULL
 */
FERRY_API ferry_err ferry_subscriber_type(ferry_subscriber *sub, const char **type_name,
                                          uint64_t *type_hash);

/**
 * A descriptor that becomes readable when a sample may be queued or housekeeping is due. It is
 * armed by a ferry_take that returned FERRY_EAGAIN: take until FERRY_EAGAIN, then wait on the fd.
 * The first call arms it too (as if a take had just found nothing). Until then no take arms it:
 * a subscriber that only waits in ferry_wait costs its publishers no wake-up messages while it
 * spins or polls. Owned by the subscriber: do not close it.
 */
FERRY_API ferry_err ferry_subscriber_fd(ferry_subscriber *sub, int *fd);

/**
 * For a loop that sleeps on ferry_subscriber_fd() (poll, epoll, an executor): when to stop
 * sleeping to catch the next sample of a steady stream (a paced camera) awake, as ferry_wait does
 * on its own. A sleeping reader pays a wake-up per sample (80-180 us on an idle core); one that
 * sleeps until *wake_at_ns and then calls ferry_subscriber_catch() spins across the sample's
 * arrival instead. The stream is learned from the takes that follow an empty one (the loop's
 * wake-ups). *wake_at_ns is a CLOCK_MONOTONIC time (ferry_now), or 0 when nothing is anticipated:
 * the stream is not steady yet, its next sample is not due within a period, this second's spin
 * budget (1/32 of the time) is spent, or spinning cannot help (this thread and its publishers
 * on one CPU, or spin_ns FERRY_SPIN_OFF).
 * @retval FERRY_OK      *wake_at_ns is filled
 * @retval FERRY_EINVAL  a pointer is NULL
 */
FERRY_API ferry_err ferry_subscriber_wake_at(ferry_subscriber *sub, int64_t *wake_at_ns);

/**
 * Spins across the arrival of the sample ferry_subscriber_wake_at() anticipated, called when the
 * loop's sleep until wake_at_ns ended. It polls the queues, with the publishers asked to make no
 * system call meanwhile, for at most FERRY_PACE_SPIN_MAX_NS past the time the sample was due,
 * then arms the descriptor again. How late the sleep ended (now less wake_at_ns) teaches how
 * early to wake next time.
 * @retval FERRY_OK         a sample is queued: ferry_take gives it
 * @retval FERRY_ETIMEDOUT  none came within the spin (or wake_at_ns is 0); wait on the
 *                          descriptor as before
 * @retval FERRY_EINVAL     sub is NULL
 */
FERRY_API ferry_err ferry_subscriber_catch(ferry_subscriber *sub, int64_t wake_at_ns);

/** The longest spin of ferry_subscriber_catch past the time the anticipated sample was due. */
#define FERRY_PACE_SPIN_MAX_NS 300000

/** A subscriber's counters. All are since creation. */
typedef struct ferry_subscriber_stats {
    uint64_t received;        /**< samples taken */
    uint64_t dropped;         /**< samples the publishers dropped from this subscriber's queues */
    uint64_t bytes_copied;    /**< payload bytes ferry copied (always 0 for the zero-copy path) */
    uint32_t held;            /**< samples taken and not yet released */
    uint32_t publishers;      /**< publishers connected now */
    uint64_t publishers_lost; /**< publishers that went away (destroyed, crashed) */
    uint64_t rejected;        /**< connections refused (type, credentials, protocol) */
    uint64_t protocol_errors; /**< publishers disconnected for breaking the protocol */
    ferry_spin_stats spin;    /**< how ferry_wait spins */
    uint64_t incompatible;    /**< publishers that refused us for lacking a required policy
                                   (FERRY_EQOS; also in rejected) */
    uint32_t incompatible_policies; /**< the FERRY_QOS_* bits the last of them lacked */
} ferry_subscriber_stats;

/**
 * Fills *out with the subscriber's counters.
 * @retval FERRY_OK      *out is filled
 * @retval FERRY_EINVAL  sub or out is NULL
 * @retval FERRY_ECLOSED sub was destroyed
 */
FERRY_API ferry_err ferry_subscriber_stats_get(ferry_subscriber *sub, ferry_subscriber_stats *out);

/* ---------------------------------------------------------------------------------------------
 * Waitset: wait on many subscribers at once
 * ------------------------------------------------------------------------------------------- */

/** Creates an empty waitset on node. */
FERRY_API ferry_err ferry_waitset_create(ferry_waitset **out, ferry_node *node);

/** Destroys a waitset (its subscribers are untouched). */
FERRY_API ferry_err ferry_waitset_destroy(ferry_waitset *ws);

/**
 * Adds sub with a caller's pointer returned by ferry_waitset_wait. A subscriber may be in one
 * waitset at a time and must be removed before it is destroyed.
 * @retval FERRY_EBUSY  sub is in a waitset already
 * @retval FERRY_ELIMIT the waitset holds 256 subscribers already
 */
FERRY_API ferry_err ferry_waitset_add(ferry_waitset *ws, ferry_subscriber *sub, void *context);

/** Removes sub. @retval FERRY_ESTATE sub is not in ws. */
FERRY_API ferry_err ferry_waitset_remove(ferry_waitset *ws, ferry_subscriber *sub);

/**
 * Waits until at least one member has a queued sample; writes the contexts of up to capacity such
 * members to ready[] and their number to *count.
 * @retval FERRY_OK         *count >= 1
 * @retval FERRY_ETIMEDOUT  none within timeout_ns (*count is 0)
 */
FERRY_API ferry_err ferry_waitset_wait(ferry_waitset *ws, int64_t timeout_ns, void **ready,
                                       size_t capacity, size_t *count);

/* ---------------------------------------------------------------------------------------------
 * Introspection of a domain (for tools): what lives in the domain directory
 * ------------------------------------------------------------------------------------------- */

/** What an endpoint of ferry_endpoint_info is. */
typedef enum ferry_endpoint_kind {
    FERRY_ENDPOINT_PUBLISHER = 1,  /**< a publisher */
    FERRY_ENDPOINT_SUBSCRIBER = 2, /**< a subscriber */
} ferry_endpoint_kind;

/** One publisher or subscriber as its status file shows it. */
typedef struct ferry_endpoint_info {
    ferry_endpoint_kind kind;                /**< publisher or subscriber */
    bool alive;                              /**< its process still holds it */
    int32_t pid;                             /**< the process that created it */
    uint64_t id;                             /**< random; a publisher's equals pub.id */
    char topic[FERRY_TOPIC_MAX + 2];         /**< with its leading '/', NUL-terminated */
    char type_name[FERRY_TYPE_NAME_MAX + 1]; /**< NUL-terminated */
    uint64_t type_hash;                      /**< the type hash given at creation */
    char node_name[FERRY_NODE_NAME_MAX + 1]; /**< its node's name, NUL-terminated */
    ferry_publisher_stats pub;               /**< kind == FERRY_ENDPOINT_PUBLISHER */
    ferry_subscriber_stats sub;              /**< kind == FERRY_ENDPOINT_SUBSCRIBER */
    uint32_t depth;                          /**< subscriber's queue depth; a publisher's
                                                  history (samples kept for late joiners) */
    /** How its data travel where a module says so (the GPU module: device-frame path and MPS),
     *  NUL-terminated; empty otherwise. */
    char note[FERRY_ENDPOINT_NOTE_MAX + 1];
} ferry_endpoint_info;

/** Called once per endpoint; return false to stop. */
typedef bool (*ferry_inspect_fn)(void *arg, const ferry_endpoint_info *info);

/**
 * Lists the endpoints of a domain, live and dead (info.alive tells). dir as in ferry_node_options
 * (NULL for the default). topic NULL lists every topic. Nothing is changed.
 * @retval FERRY_OK      the walk finished (possibly over no endpoint)
 * @retval FERRY_EINVAL  fn is NULL or domain out of range
 * @retval FERRY_ENAME   topic is not valid
 */
FERRY_API ferry_err ferry_inspect(const char *dir, uint32_t domain, const char *topic,
                                  ferry_inspect_fn fn, void *arg);

/**
 * Removes what dead processes left in a domain directory: status files, sockets and topic
 * directories with nothing alive. *removed (may be NULL) receives the number of files removed.
 */
FERRY_API ferry_err ferry_clean(const char *dir, uint32_t domain, uint32_t *removed);

/** A 64-bit FNV-1a hash of a string: a convenient type hash for type names. */
FERRY_API uint64_t ferry_hash(const char *text);

#ifdef __cplusplus
}
#endif
#endif /* FERRY_FERRY_H */
