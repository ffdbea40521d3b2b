/*
 * ferry sync: approximate-time synchronisation of 2..9 topics.
 *
 * A synchroniser takes samples from several subscribers and hands out matched sets, one sample
 * per topic, whose stamps lie close together (the policy of ROS message_filters ApproximateTime;
 * docs/sync.md describes it and how it differs). It holds at most queue_size samples per topic;
 * every sample it drops it releases at once.
 *
 * Concurrency: a synchroniser and its subscribers are used from one thread at a time; the caller
 * serialises. While a synchroniser lives, its subscribers must not be taken from directly.
 */
#ifndef FERRY_SYNC_H
#define FERRY_SYNC_H

#include <ferry/ferry.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Most topics one synchroniser matches. */
#define FERRY_SYNC_MAX_TOPICS 9u
/** Fewest topics one synchroniser matches. */
#define FERRY_SYNC_MIN_TOPICS 2u

/** An approximate-time synchroniser over 2..9 subscribers (ferry_sync_create). */
typedef struct ferry_sync ferry_sync;

/** Gives the stamp of sample s taken from subscriber number index (0..n-1), in nanoseconds.
 *  Stamps of one topic should not decrease; a sample whose stamp is earlier than one already
 *  seen on its topic is discarded. */
typedef int64_t (*ferry_sync_stamp_fn)(void *arg, uint32_t index, const ferry_sample *s);

/** Options of ferry_sync_create; ferry_sync_options_init gives the defaults. */
typedef struct ferry_sync_options {
    /** Samples held per topic, matched sets handed out included. Default 10, at most 4096. */
    uint32_t queue_size;
    /** Largest span (latest stamp minus earliest) of a set that is emitted; sets that would
     *  span more are never formed. 0 (default) means no limit. Negative is invalid. */
    int64_t max_interval_ns;
    /** Stamp of a sample; NULL (default) means its publish_time. */
    ferry_sync_stamp_fn stamp;
    /** Argument passed to stamp. */
    void *stamp_arg;
    /** Node the subscribers live on; needed only by ferry_sync_wait (which builds a waitset on
     *  it). NULL: ferry_sync_wait returns FERRY_ENOTSUP. */
    ferry_node *node;
} ferry_sync_options;

/** Fills o with the defaults. */
FERRY_API void ferry_sync_options_init(ferry_sync_options *o);

/**
 * Creates a synchroniser over n subscribers, one per topic, in the order given; matched sets
 * list their samples in that order. The subscribers stay the caller's: destroy the synchroniser
 * before them. When options->node is set, the subscribers are added to a waitset of the
 * synchroniser's own, so they must not be in another waitset.
 *
 * Each subscriber's max_held must exceed queue_size: the synchroniser holds up to queue_size
 * samples of each topic and, for a moment, one more while it drops the oldest.
 *
 * @retval FERRY_OK       *out is a new synchroniser, destroyed with ferry_sync_destroy
 * @retval FERRY_EINVAL   out or subs is NULL, a subscriber is NULL or given twice, a
 *                        subscriber's max_held is not above queue_size, n is outside 2..9,
 *                        queue_size > 4096 or max_interval_ns < 0
 * @retval FERRY_EBUSY    a subscriber is in another waitset already (options->node set)
 * @retval FERRY_ENOMEM   out of memory
 */
FERRY_API ferry_err ferry_sync_create(ferry_sync **out, ferry_subscriber *const subs[], uint32_t n,
                                      const ferry_sync_options *options);

/**
 * Releases every sample the synchroniser holds (queued or in sets not handed out yet) and frees
 * it. Sets handed out by ferry_sync_take and not released are released too: their samples must
 * not be read afterwards.
 * @retval FERRY_OK       done; the pointer must not be used again
 * @retval FERRY_EINVAL   sync is NULL
 */
FERRY_API ferry_err ferry_sync_destroy(ferry_sync *sync);

/**
 * Takes what the subscribers have queued, runs the policy and hands out the oldest matched set:
 * set[i] receives the sample of subscriber i. The samples belong to the caller until
 * ferry_sync_release(sync, set). Samples the policy drops are released on the way.
 *
 * @retval FERRY_OK       set[0..n-1] is filled
 * @retval FERRY_EAGAIN   no set is complete yet
 * @retval FERRY_EINVAL   sync or set is NULL
 * @retval FERRY_ECLOSED  a subscriber was destroyed under the synchroniser
 * @retval other          an error of ferry_take, passed on (nothing is lost: retry later)
 */
FERRY_API ferry_err ferry_sync_take(ferry_sync *sync, ferry_sample set[]);

/**
 * Gives back a set from ferry_sync_take: releases its n samples and clears them.
 * @retval FERRY_OK       released
 * @retval FERRY_EINVAL   sync or set is NULL
 * @retval FERRY_ESTATE   the set is not one handed out (already released, or never taken)
 * @retval other          the first error of ferry_release; the other samples are released
 */
FERRY_API ferry_err ferry_sync_release(ferry_sync *sync, ferry_sample set[]);

/**
 * Waits until a set is ready or a sample arrives on one of the topics (then ferry_sync_take may
 * still return FERRY_EAGAIN: call it, and wait again). Runs the subscribers' housekeeping.
 * @retval FERRY_OK         a set is ready or a sample is queued
 * @retval FERRY_ETIMEDOUT  nothing within timeout_ns (FERRY_FOREVER waits for ever)
 * @retval FERRY_ENOTSUP    the synchroniser was created without options.node
 * @retval FERRY_EINVAL     sync is NULL
 */
FERRY_API ferry_err ferry_sync_wait(ferry_sync *sync, int64_t timeout_ns);

/** A synchroniser's counters, since creation. */
typedef struct ferry_sync_stats {
    uint32_t topics;                           /**< n */
    uint64_t sets;                             /**< matched sets emitted by the policy */
    uint64_t taken;                            /**< sets handed out by ferry_sync_take */
    uint64_t received[FERRY_SYNC_MAX_TOPICS];  /**< samples taken per topic */
    uint64_t discarded[FERRY_SYNC_MAX_TOPICS]; /**< samples dropped (and released) per topic */
    uint32_t held[FERRY_SYNC_MAX_TOPICS];      /**< samples held now per topic */
} ferry_sync_stats;

/** Copies the counters. @retval FERRY_EINVAL sync or out is NULL. */
FERRY_API ferry_err ferry_sync_stats_get(const ferry_sync *sync, ferry_sync_stats *out);

#ifdef __cplusplus
}
#endif

#endif
