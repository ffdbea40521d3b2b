/*
 * The module contract: what the layers built on the core transport may call beyond the public
 * headers. The GPU module (src/gpu, its own libferry_gpu) and the framework layer (src/framework:
 * typed frames, tensors, the synchroniser, the executor, the lifecycle node, real-time controls)
 * include this header, plus the OS seam (platform/platform.h), and never core.h: the layouts of
 * shared memory, the wire format, the pool and the private structs behind the handles stay the
 * core's own.
 *
 * Functions marked FERRY_MODULE_API are visible in libferry.so so that a module's own shared
 * library links against them; none is declared in a public header.
 */
#ifndef FERRY_MODULE_H
#define FERRY_MODULE_H

#include <ferry/ferry.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "platform/platform.h"

#define FERRY_MODULE_API __attribute__((visibility("default")))

#define FERRY__PAGE 4096u
#define FERRY__CACHELINE 64

/* ---- invariants ------------------------------------------------------------------------------ */

/* Checks of the library's own bookkeeping (the pool's counts and free lists, the references a
 * connection holds), written next to the data they guard. Compiled in with -DFERRY_CHECKS=ON
 * (CI's sanitizer stage builds so), out of every other build: some walk a whole table. Never
 * for what a peer wrote: that is input, checked in every build. A failure prints the check and
 * both values, then aborts. */
#ifdef FERRY_CHECKS
#define FERRY__CHECK_EQ(a, b)                                                                      \
    ((uint64_t)(a) == (uint64_t)(b)                                                                \
         ? (void)0                                                                                 \
         : ferry__check_failed(__FILE__, __LINE__, #a " == " #b, (uint64_t)(a), (uint64_t)(b)))
#define FERRY__CHECK(cond) ((cond) ? (void)0 : ferry__check_failed(__FILE__, __LINE__, #cond, 0, 0))
#else
#define FERRY__CHECK_EQ(a, b) ((void)0)
#define FERRY__CHECK(cond) ((void)0)
#endif
FERRY_MODULE_API _Noreturn void ferry__check_failed(const char *file, int line, const char *what,
                                                    uint64_t left, uint64_t right);

/* ---- handles and their node ---------------------------------------------------------------- */

#define FERRY__NODE_MAGIC 0x45444f4e59525246ULL
#define FERRY__DEAD_MAGIC 0x444145445952524ULL

/* The head of every object a node owns (publishers, subscribers, waitsets, executors): magic
 * first, so that a destroyed handle is told from a live one while its node lives. */
typedef struct ferry__obj {
    uint64_t magic;
    struct ferry__obj *next; /* in the node's live list or graveyard */
    struct ferry__obj *prev;
} ferry__obj;

/* FERRY_OK for a live node, FERRY_ECLOSED for a destroyed one, FERRY_EINVAL otherwise. */
ferry_err ferry__node_check(const ferry_node *node);
/* Registers a child object; fails with FERRY_ECLOSED when the node is not valid. */
ferry_err ferry__node_adopt(ferry_node *node, ferry__obj *obj, uint64_t magic);
/* Marks the child dead and keeps its memory (up to a bound) so stale handles are detected. */
void ferry__node_bury(ferry_node *node, ferry__obj *obj);
/* One line to the node's log sink (or stderr), when level passes its log level. */
void ferry__log(ferry_node *node, ferry_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* One line to the log of an endpoint's node, after its topic: endpoint is a ferry_publisher or a
 * ferry_subscriber (both begin with their ferry__endpoint). For modules, which cannot reach
 * ferry__log across the shared library's boundary. */
FERRY_MODULE_API void ferry__endpoint_log(const void *endpoint, ferry_log_level level,
                                          const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Says once, at creation, how an endpoint's data travel (a module's path and why): one INFO line
 * to its node's log, as ferry__endpoint_log, and the same text, cut to FERRY_ENDPOINT_NOTE_MAX,
 * in its status file, where ferry_inspect (ferry info) shows it as ferry_endpoint_info.note. */
FERRY_MODULE_API void ferry__endpoint_note(const void *endpoint, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- deadlines ------------------------------------------------------------------------------- */

/* A deadline on the monotonic clock; a negative timeout means none (INT64_MAX). */
static inline int64_t ferry__deadline(int64_t timeout_ns)
{
    if (timeout_ns < 0)
        return INT64_MAX;
    return ferry__clock_ns() + timeout_ns;
}

/* Nanoseconds left until deadline: -1 for none, 0 once passed. */
static inline int64_t ferry__remaining(int64_t deadline)
{
    if (deadline == INT64_MAX)
        return -1;
    int64_t left = deadline - ferry__clock_ns();
    return left > 0 ? left : 0;
}

/* ---- publishers and subscribers, as modules see them --------------------------------------- */

/* Descriptors per attachment. */
#define FERRY__ATTACH_FDS 4

/* Where a held sample lives, for modules that work on whole chunks (the GPU registration). */
typedef struct ferry__sample_where {
    uint32_t slot;                /* the publisher's connection */
    uint32_t gen;                 /* that connection's generation */
    uint32_t chunk;               /* chunk index in the publisher's pool */
    const uint8_t *chunk_payload; /* the chunk's payload area, in the subscriber's mapping */
    uint64_t chunk_capacity;      /* its bytes */
} ferry__sample_where;

/* Checks that sample is held by sub (FERRY_EFOREIGN, FERRY_ESTATE otherwise) and locates it. */
FERRY_MODULE_API ferry_err ferry__sample_where_get(ferry_subscriber *sub,
                                                   const ferry_sample *sample,
                                                   ferry__sample_where *out);

/* Called before a connection's mappings go away (slot, gen), and once with slot UINT32_MAX when
 * the subscriber is destroyed. Up to FERRY__CLOSE_HOOKS per subscriber, one per function (each
 * module keeps its own state as the hook's argument). */
typedef void (*ferry__close_hook)(void *arg, uint32_t slot, uint32_t gen);
#define FERRY__CLOSE_HOOKS 4
/* FERRY_EBUSY when fn is installed already, FERRY_ELIMIT when all places are taken. */
FERRY_MODULE_API ferry_err ferry__subscriber_add_close_hook(ferry_subscriber *sub,
                                                            ferry__close_hook fn, void *arg);
/* The argument installed with fn, or NULL when fn is not installed. */
FERRY_MODULE_API void *ferry__subscriber_close_hook_arg(ferry_subscriber *sub,
                                                        ferry__close_hook fn);

/* The pool index of the chunk behind a loaned payload (modules pair their own per-chunk state
 * with it: a chunk is loaned again only after every reference to it came back). */
FERRY_MODULE_API ferry_err ferry__publisher_loan_index(ferry_publisher *pub, void *payload,
                                                       uint32_t *index);

/* Wakes the subscribers asleep in ferry_wait (futex doorbells; not background ones, not those
 * in an epoll loop) ahead of a publication the caller is about to make, so that their wake-up
 * overlaps the caller's work up to it rather than following the publication: each then polls
 * for it up to FERRY__SOON_SPIN_NS and sleeps again if it does not come. For a device frame's
 * loan, whose publication follows within microseconds of kernel launches; a subscriber that
 * may not spin (FERRY_SPIN_OFF, one CPU) sleeps again at once. */
FERRY_MODULE_API void ferry__publisher_wake_soon(ferry_publisher *pub);

/* Attachments. The publisher keeps a duplicate of each descriptor and sends the set to every
 * subscriber, now and at each later handshake, before any sample that refers to it. */
FERRY_MODULE_API ferry_err ferry__publisher_attach(ferry_publisher *pub, uint64_t key,
                                                   const int *fds, int nfds);
/* Withdraws key: the publisher closes its duplicates and every subscriber closes its copies
 * (samples already taken keep whatever their module imported from them). */
FERRY_MODULE_API ferry_err ferry__publisher_detach(ferry_publisher *pub, uint64_t key);
/* The descriptors attached under key by the publisher of connection (slot, gen), borrowed (the
 * subscriber closes them when the connection closes). Reads pending control messages once when
 * the key is not there yet. FERRY_EAGAIN when it still is not. */
FERRY_MODULE_API ferry_err ferry__subscriber_attachment(ferry_subscriber *sub, uint32_t slot,
                                                        uint32_t gen, uint64_t key, int *fds,
                                                        int *nfds);

/* Lifecycle hooks. An inactive publisher refuses loans and publications (FERRY_ESTATE). A paused
 * subscriber asks its publishers, through sub_paused in each connection segment, to skip it; on
 * pausing it gives back what was queued, unread (counted in *discarded only, neither received
 * nor dropped); connections made while paused start paused; whatever a publisher delivered
 * before it saw the word is given back the same way at the next take, wait or housekeeping. */
ferry_err ferry__publisher_set_active(ferry_publisher *pub, bool active);
ferry_err ferry__subscriber_set_paused(ferry_subscriber *sub, bool paused);
ferry_err ferry__subscriber_discarded(ferry_subscriber *sub, uint64_t *discarded);

/* DLPack export records (src/framework/tensor.c), for host tensors and the GPU module's device
 * tensors alike. A record keeps a copy of what the exporter held (a sample, a device frame: up to
 * FERRY__EXPORT_ITEM_MAX bytes) and hands it to release once, when the consumer's deleter runs;
 * a second deleter call is ignored. *out is the record's ferry_dlpack_tensor, or its
 * ferry_dlpack_tensor_versioned (read-only flag set) when versioned. */
#define FERRY__EXPORT_ITEM_MAX 256u
struct ferry_tensor_view;
typedef void (*ferry__export_release_fn)(void *owner, void *item, void *arg);
FERRY_MODULE_API ferry_err ferry__tensor_export(const struct ferry_tensor_view *view,
                                                bool versioned, ferry__export_release_fn release,
                                                void *owner, void *arg, const void *item,
                                                size_t item_size, void **out);

/* The most samples sub may hold at once (its max_held option); 0 for an invalid sub. */
FERRY_MODULE_API uint32_t ferry__subscriber_max_held(ferry_subscriber *sub);

FERRY_MODULE_API ferry_err ferry__subscriber_check(ferry_subscriber *sub);
/* The waitset or executor a subscriber belongs to (NULL when none): one at a time. */
void **ferry__subscriber_waitset_slot(ferry_subscriber *sub);

#endif
