/*
 * ferry exec: an executor that takes samples from subscribers and runs callbacks on them, and
 * runs periodic timers.
 *
 * ferry_executor_spin waits on every added subscriber's descriptor (ferry_subscriber_fd), takes
 * up to max_batch samples per subscriber per round (so one busy topic cannot starve the others),
 * calls the subscriber's callback with each sample and releases the sample when the callback
 * returns. With threads = 0 the callbacks run in the thread that calls spin; with threads = N a
 * pool of N workers, started by ferry_executor_create, runs them while spin's thread keeps
 * waiting and taking. Callbacks belong to callback groups: an EXCLUSIVE group runs at most one
 * of its callbacks at a time, in the order the samples were taken; a REENTRANT group runs its
 * callbacks concurrently, even several of one subscriber. docs/exec.md has an example.
 *
 * Concurrency: one thread spins at a time. ferry_executor_stop may be called from any thread and
 * from a signal handler. Adding and removing subscribers, timers and groups, keeping and
 * releasing samples and reading the statistics are safe from any thread, callbacks included
 * (the exceptions are stated at each function). While a subscriber is added, the executor is its
 * only user: do not take from it, wait on it or destroy it (ferry_subscriber_destroy refuses with
 * FERRY_EBUSY); the executor serialises its takes and releases with a lock of its own while
 * callbacks run in parallel. No heap allocation happens per sample or per callback: work items
 * are allocated when a subscriber or timer is added.
 */
#ifndef FERRY_EXEC_H
#define FERRY_EXEC_H

#include <ferry/ferry.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Most worker threads one executor may start. */
#define FERRY_EXEC_MAX_THREADS 256u

/** Takes samples from subscribers and runs their callbacks and timers (ferry_executor_create). */
typedef struct ferry_executor ferry_executor;
/** Callbacks whose overlap one ferry_group_kind rules (ferry_callback_group_create). */
typedef struct ferry_callback_group ferry_callback_group;

/** How the callbacks of a group may overlap. */
typedef enum ferry_group_kind {
    FERRY_GROUP_EXCLUSIVE = 0, /**< one callback of the group at a time, samples in take order */
    FERRY_GROUP_REENTRANT = 1, /**< callbacks of the group run concurrently on the workers */
} ferry_group_kind;

/**
 * Called with each sample taken from sub. The sample belongs to the executor, which releases it
 * when the callback returns, unless the callback calls ferry_executor_keep. sample and its data
 * must not be used after the callback returns otherwise.
 */
typedef void (*ferry_sample_fn)(void *arg, ferry_subscriber *sub, const ferry_sample *sample);

/** Called each period of a timer; now is when the executor found the timer due. */
typedef void (*ferry_timer_fn)(void *arg, ferry_time now);

/** Options of ferry_executor_create; ferry_executor_options_init gives the defaults. */
typedef struct ferry_executor_options {
    /** 0 (default): callbacks run in the thread that calls ferry_executor_spin. N (1 to
     *  FERRY_EXEC_MAX_THREADS): a pool of N workers runs them and spin's thread dispatches. */
    uint32_t threads;
    /** Samples taken from one subscriber per dispatch round. 0 means the default, 8. */
    uint32_t max_batch;
} ferry_executor_options;

/** Fills o with the defaults. Fields left zero also mean the default. */
FERRY_API void ferry_executor_options_init(ferry_executor_options *o);

/**
 * Creates an executor on node (which then refuses to be destroyed before it) and starts its
 * worker threads, which sleep until there is work. Workers run with every signal blocked, so
 * signals go to the application's threads.
 *
 * @param out      receives the executor; untouched on error
 * @param options  NULL for the defaults
 * @retval FERRY_OK       *out is a new executor, destroyed with ferry_executor_destroy
 * @retval FERRY_EINVAL   out or node is NULL, node is not a node, or threads >
 *                        FERRY_EXEC_MAX_THREADS
 * @retval FERRY_ECLOSED  node was destroyed
 * @retval FERRY_ENOMEM   out of memory
 * @retval FERRY_ESYS     a descriptor or a thread could not be created (errno says why)
 */
FERRY_API ferry_err ferry_executor_create(ferry_executor **out, ferry_node *node,
                                          const ferry_executor_options *options);

/**
 * Stops and joins the workers, forgets every subscriber (which the caller may then use or
 * destroy again), timer and group, and frees the executor. Samples kept with
 * ferry_executor_keep and not released stay held by their subscribers: release them with
 * ferry_release(sub, &kept).
 * @retval FERRY_OK       done; the pointer and its groups must not be used again
 * @retval FERRY_EINVAL   ex is NULL or not an executor
 * @retval FERRY_ECLOSED  ex was already destroyed (detected while its node lives)
 * @retval FERRY_EBUSY    a thread is in ferry_executor_spin (a callback included); nothing changed
 */
FERRY_API ferry_err ferry_executor_destroy(ferry_executor *ex);

/**
 * Creates a callback group of the executor. Groups are owned by the executor and freed with it.
 * Every executor has a default exclusive group, used when an add call passes NULL.
 * @retval FERRY_OK       *out is the group
 * @retval FERRY_EINVAL   ex or out is NULL, or kind is not a ferry_group_kind
 * @retval FERRY_ECLOSED  ex was destroyed
 * @retval FERRY_ENOMEM   out of memory
 */
FERRY_API ferry_err ferry_callback_group_create(ferry_executor *ex, ferry_group_kind kind,
                                                ferry_callback_group **out);

/**
 * Adds sub: from the next dispatch round on, fn(arg, sub, sample) is called for every sample
 * taken from it, in group g (NULL: the default exclusive group). Allowed while spinning and from
 * callbacks. Samples queued in sub before it was added are taken too. Allocates sub's work
 * items (one per sample it may hold, its max_held option).
 * @retval FERRY_OK       added
 * @retval FERRY_EINVAL   ex, sub or fn is NULL, sub is not a subscriber, or g is not a group
 *                        of ex
 * @retval FERRY_EBUSY    sub is in this or another executor, or in a waitset, already
 * @retval FERRY_ECLOSED  ex or sub was destroyed
 * @retval FERRY_ENOMEM   out of memory
 * @retval FERRY_ESYS     sub's descriptor could not be added to the executor's poller
 */
FERRY_API ferry_err ferry_executor_add_subscriber(ferry_executor *ex, ferry_subscriber *sub,
                                                  ferry_callback_group *g, ferry_sample_fn fn,
                                                  void *arg);

/**
 * Removes sub. Samples taken from it whose callbacks have not started are released without a
 * call; the function waits for its callbacks that are running, so that after it returns the
 * callback is never called again and sub is the caller's again. Samples still queued in sub
 * stay there. Samples kept from sub and not released are the caller's to release with
 * ferry_release(sub, &kept).
 *
 * From a callback: removing another subscriber works like from any thread (it waits for that
 * subscriber's running callbacks, so two callbacks must not remove each other's subscribers at
 * the same moment). A callback of sub may remove sub itself: no further call starts, but the
 * call does not wait for sub's callbacks still running (its own included) and the executor
 * keeps using sub until the last of them returns.
 * @retval FERRY_OK       removed
 * @retval FERRY_EINVAL   ex or sub is NULL
 * @retval FERRY_ECLOSED  ex was destroyed
 * @retval FERRY_ESTATE   sub is not in ex
 */
FERRY_API ferry_err ferry_executor_remove_subscriber(ferry_executor *ex, ferry_subscriber *sub);

/**
 * Adds a periodic timer: fn(arg, now) is called about every period_ns while the executor spins,
 * in group g (NULL: the default exclusive group), first period_ns after this call. A timer due
 * while its previous call is still queued or running skips that period; a timer that fell more
 * than a period behind (the executor was not spinning) fires once and goes on a period later.
 * Timers are checked with a resolution of about a millisecond.
 * @param timer_id  receives the timer's id (never 0), for ferry_executor_remove_timer; may be NULL
 * @retval FERRY_OK       added
 * @retval FERRY_EINVAL   ex or fn is NULL, period_ns <= 0, or g is not a group of ex
 * @retval FERRY_ECLOSED  ex was destroyed
 * @retval FERRY_ENOMEM   out of memory
 */
FERRY_API ferry_err ferry_executor_add_timer(ferry_executor *ex, int64_t period_ns,
                                             ferry_callback_group *g, ferry_timer_fn fn, void *arg,
                                             uint32_t *timer_id);

/**
 * Removes a timer; like ferry_executor_remove_subscriber, it waits for the timer's running call
 * unless called from that call, and the timer is never called after it returns.
 * @retval FERRY_OK       removed
 * @retval FERRY_EINVAL   ex is NULL
 * @retval FERRY_ECLOSED  ex was destroyed
 * @retval FERRY_ESTATE   no timer of ex has that id
 */
FERRY_API ferry_err ferry_executor_remove_timer(ferry_executor *ex, uint32_t timer_id);

/**
 * Runs the executor until ferry_executor_stop or until timeout_ns passes (negative: for ever).
 * When it returns, for either reason, no callback of the executor is running and every sample
 * it took has been passed to its callback and released (kept ones excepted): samples already
 * taken when the stop came are still delivered, nothing more is taken, and samples queued in
 * the subscribers stay there for the next spin. A stop requested while no spin runs makes the
 * next spin return at once; each return clears the request.
 * @retval FERRY_OK         stopped by ferry_executor_stop
 * @retval FERRY_ETIMEDOUT  timeout_ns passed
 * @retval FERRY_EINVAL     ex is NULL or not an executor
 * @retval FERRY_ECLOSED    ex was destroyed
 * @retval FERRY_EBUSY      another thread is spinning ex, or this is a callback of ex
 * @retval FERRY_ESYS       waiting on the poller failed (errno says why)
 */
FERRY_API ferry_err ferry_executor_spin(ferry_executor *ex, int64_t timeout_ns);

/**
 * Waits up to timeout_ns for work, runs one dispatch round (takes up to max_batch samples per
 * subscriber and fires the due timers) and returns when those callbacks have returned.
 * @retval FERRY_OK         at least one callback ran, or a stop was requested
 * @retval FERRY_ETIMEDOUT  there was nothing to do within timeout_ns
 * @retval FERRY_EINVAL / FERRY_ECLOSED / FERRY_EBUSY / FERRY_ESYS as for ferry_executor_spin
 */
FERRY_API ferry_err ferry_executor_spin_once(ferry_executor *ex, int64_t timeout_ns);

/**
 * Asks the spinning thread to return (or the next spin, when none runs). Async-signal-safe: it
 * sets an atomic flag and writes to an eventfd, and keeps errno.
 * @retval FERRY_OK       requested
 * @retval FERRY_EINVAL   ex is NULL or not an executor
 * @retval FERRY_ECLOSED  ex was destroyed
 */
FERRY_API ferry_err ferry_executor_stop(ferry_executor *ex);

/**
 * Called from a sample callback, with the sample it received: the executor does not release
 * the sample when the callback returns. *kept receives a copy of it, which stays valid (and
 * its data readable) until ferry_executor_release(ex, kept), from any thread. A kept sample
 * counts against its subscriber's max_held: keeping max_held samples stops the executor from
 * taking from that subscriber until one is released.
 * @retval FERRY_OK       kept
 * @retval FERRY_EINVAL   ex, sample or kept is NULL
 * @retval FERRY_ECLOSED  ex was destroyed
 * @retval FERRY_ESTATE   the calling thread is not in the callback of ex that received sample,
 *                        or the sample was kept already
 */
FERRY_API ferry_err ferry_executor_keep(ferry_executor *ex, const ferry_sample *sample,
                                        ferry_sample *kept);

/**
 * Releases a sample kept with ferry_executor_keep, from any thread, callbacks included. The
 * sample is cleared and its data must not be read afterwards.
 * @retval FERRY_OK        released
 * @retval FERRY_EINVAL    ex or kept is NULL
 * @retval FERRY_ECLOSED   ex was destroyed
 * @retval FERRY_ESTATE    kept was released already (or was never taken)
 * @retval FERRY_EFOREIGN  no subscriber of ex holds it (its subscriber was removed: use
 *                         ferry_release)
 */
FERRY_API ferry_err ferry_executor_release(ferry_executor *ex, ferry_sample *kept);

/** An executor's counters, since creation. */
typedef struct ferry_executor_stats {
    uint64_t callbacks;        /**< sample callbacks that returned */
    uint64_t timer_callbacks;  /**< timer callbacks that returned */
    uint64_t samples_taken;    /**< samples taken from the subscribers */
    uint64_t samples_released; /**< samples released: after their callback, unrun at removal,
                                    or kept and given to ferry_executor_release */
    uint32_t max_concurrency;  /**< most callbacks that ran at once */
    uint32_t running;          /**< callbacks running now */
} ferry_executor_stats;

/**
 * Reads the counters.
 * @retval FERRY_OK       *out is filled
 * @retval FERRY_EINVAL   ex or out is NULL
 * @retval FERRY_ECLOSED  ex was destroyed
 */
FERRY_API ferry_err ferry_executor_stats_get(ferry_executor *ex, ferry_executor_stats *out);

#ifdef __cplusplus
}
#endif
#endif /* FERRY_EXEC_H */
