/*
 * ferry lifecycle node: the managed-node state machine of ROS 2 (unconfigured, inactive, active,
 * finalized) over a ferry node, with managed publishers and subscribers that the lifecycle
 * creates at configure, switches on and off with activate and deactivate, and destroys at
 * cleanup and shutdown.
 *
 *   UNCONFIGURED --configure--> INACTIVE --activate--> ACTIVE
 *   UNCONFIGURED <--cleanup---- INACTIVE <-deactivate- ACTIVE
 *   any but FINALIZED --shutdown--> FINALIZED
 *
 * A managed publisher refuses loans and publications (FERRY_ESTATE) unless the lifecycle is
 * ACTIVE. A managed subscriber is paused unless ACTIVE: its publishers skip it (nothing is
 * queued for it and nothing counted as dropped, on either side), and what was queued when it was
 * paused is given back unread (neither received nor dropped). Its connections stay up while
 * paused, so activation needs no handshake.
 *
 * Concurrency: a lifecycle is used by one thread at a time (the caller serialises), and its
 * managed endpoints follow the rules of ferry.h; transitions must not run while another thread
 * uses one of them. Callbacks run in the thread making the transition; a transition called from
 * inside a callback is refused (FERRY_ESTATE).
 */
#ifndef FERRY_LIFECYCLE_H
#define FERRY_LIFECYCLE_H

#include <ferry/ferry.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The primary states. */
typedef enum ferry_lifecycle_state {
    FERRY_LIFECYCLE_UNCONFIGURED = 1, /**< created, or cleaned up: no managed endpoint exists */
    FERRY_LIFECYCLE_INACTIVE = 2,     /**< configured: endpoints exist, publishers refuse loans,
                                           subscribers are paused */
    FERRY_LIFECYCLE_ACTIVE = 3,       /**< endpoints work as unmanaged ones */
    FERRY_LIFECYCLE_FINALIZED = 4,    /**< shut down: only ferry_lifecycle_destroy remains */
} ferry_lifecycle_state;

/** A lifecycle node: the state machine and its managed endpoints (ferry_lifecycle_create). */
typedef struct ferry_lifecycle ferry_lifecycle;

/**
 * The application's part of each transition. Any may be NULL (the transition then just
 * happens). on_configure runs after the declared endpoints are created (they are usable in it),
 * on_activate after the endpoints are activated, on_deactivate before they are deactivated (a
 * last publication is still possible), on_cleanup and on_shutdown before the endpoints are
 * destroyed.
 *
 * Failure: a failing on_configure or on_activate (any code but FERRY_OK) makes the transition
 * fail: the lifecycle goes back to the source state (a failed configure destroys what it
 * created, a failed activate deactivates again) and the callback's code is returned. A failing
 * on_deactivate, on_cleanup or on_shutdown does not stop its transition, which exists to
 * release resources: the transition completes and the callback's code is returned.
 */
typedef struct ferry_lifecycle_callbacks {
    /** Called by ferry_lifecycle_configure, after the declared endpoints are created. */
    ferry_err (*on_configure)(void *arg, ferry_lifecycle *lc);
    /** Called by ferry_lifecycle_activate, after the endpoints are activated. */
    ferry_err (*on_activate)(void *arg, ferry_lifecycle *lc);
    /** Called by ferry_lifecycle_deactivate, before the endpoints are deactivated. */
    ferry_err (*on_deactivate)(void *arg, ferry_lifecycle *lc);
    /** Called by ferry_lifecycle_cleanup, before the endpoints are destroyed. */
    ferry_err (*on_cleanup)(void *arg, ferry_lifecycle *lc);
    /** Called by ferry_lifecycle_shutdown (and ferry_lifecycle_destroy when the lifecycle is not
     *  FINALIZED), before the endpoints are destroyed. */
    ferry_err (*on_shutdown)(void *arg, ferry_lifecycle *lc);
    void *arg; /**< passed to every callback */
} ferry_lifecycle_callbacks;

/**
 * Creates a lifecycle in UNCONFIGURED over node (which must outlive it). Nothing is created on
 * the node until configure.
 * @param cb  NULL for no callbacks; copied
 * @retval FERRY_OK      *out is a new lifecycle, destroyed with ferry_lifecycle_destroy
 * @retval FERRY_EINVAL  out or node is NULL, or node is not a node
 * @retval FERRY_ECLOSED node was destroyed
 * @retval FERRY_ENOMEM  out of memory
 */
FERRY_API ferry_err ferry_lifecycle_create(ferry_lifecycle **out, ferry_node *node,
                                           const ferry_lifecycle_callbacks *cb);

/**
 * Shuts the lifecycle down when it is not FINALIZED (as ferry_lifecycle_shutdown, including
 * its refusal), then frees it.
 * @retval FERRY_OK      gone; the pointer must not be used again (the callback's code, when
 *                       on_shutdown failed, is not reported: the lifecycle is gone anyway)
 * @retval FERRY_EINVAL  lc is NULL or not a lifecycle
 * @retval FERRY_ESTATE  called from inside one of its callbacks; nothing changed
 * @retval FERRY_EBUSY   the application still holds samples or loans of a managed endpoint;
 *                       nothing changed
 */
FERRY_API ferry_err ferry_lifecycle_destroy(ferry_lifecycle *lc);

/**
 * UNCONFIGURED -> INACTIVE: creates the declared managed endpoints (and makes their
 * reservations), inactive, then calls on_configure. On any failure everything created is
 * destroyed and the state stays UNCONFIGURED.
 * @retval FERRY_OK      INACTIVE
 * @retval FERRY_EINVAL  lc is NULL or not a lifecycle
 * @retval FERRY_ESTATE  not UNCONFIGURED, or inside a callback; nothing changed
 * @retval other         the error of the endpoint creation or reservation that failed, or
 *                       on_configure's code
 */
FERRY_API ferry_err ferry_lifecycle_configure(ferry_lifecycle *lc);

/**
 * INACTIVE -> ACTIVE: managed publishers accept loans, managed subscribers are resumed (samples
 * published from now on reach them), then on_activate is called.
 * @retval FERRY_OK      ACTIVE
 * @retval FERRY_ESTATE  not INACTIVE, or inside a callback; nothing changed
 * @retval other         on_activate's code; the endpoints are deactivated again, INACTIVE
 * @retval FERRY_EINVAL  lc is NULL or not a lifecycle
 */
FERRY_API ferry_err ferry_lifecycle_activate(ferry_lifecycle *lc);

/**
 * ACTIVE -> INACTIVE: calls on_deactivate, then managed publishers refuse loans (loans already
 * out stay the application's: publishing them is refused, releasing them works) and managed
 * subscribers are paused: what was queued for them is given back unread, and samples already
 * taken stay valid until released.
 * @retval FERRY_OK      INACTIVE
 * @retval FERRY_ESTATE  not ACTIVE, or inside a callback; nothing changed
 * @retval other         on_deactivate's code; the transition was made anyway
 * @retval FERRY_EINVAL  lc is NULL or not a lifecycle
 */
FERRY_API ferry_err ferry_lifecycle_deactivate(ferry_lifecycle *lc);

/**
 * INACTIVE -> UNCONFIGURED: calls on_cleanup, then destroys the managed endpoints (their
 * handles must not be used again) and forgets those created from inside callbacks; endpoints
 * declared before configure are created again at the next configure.
 * Refused while the application holds samples taken from a managed subscriber or loans of a
 * managed publisher: release them first (on_deactivate is a good place).
 * @retval FERRY_OK      UNCONFIGURED
 * @retval FERRY_ESTATE  not INACTIVE, or inside a callback; nothing changed
 * @retval FERRY_EBUSY   samples or loans still held; nothing changed, on_cleanup not called
 * @retval other         on_cleanup's code; the transition was made anyway
 * @retval FERRY_EINVAL  lc is NULL or not a lifecycle
 */
FERRY_API ferry_err ferry_lifecycle_cleanup(ferry_lifecycle *lc);

/**
 * UNCONFIGURED, INACTIVE or ACTIVE -> FINALIZED: calls on_shutdown, then destroys the managed
 * endpoints. Refused, like cleanup, while samples or loans of them are held.
 * @retval FERRY_OK      FINALIZED
 * @retval FERRY_ESTATE  FINALIZED already, or inside a callback; nothing changed
 * @retval FERRY_EBUSY   samples or loans still held; nothing changed, on_shutdown not called
 * @retval other         on_shutdown's code; the transition was made anyway
 * @retval FERRY_EINVAL  lc is NULL or not a lifecycle
 */
FERRY_API ferry_err ferry_lifecycle_shutdown(ferry_lifecycle *lc);

/** The current state; 0 for NULL. */
FERRY_API ferry_lifecycle_state ferry_lifecycle_state_get(const ferry_lifecycle *lc);

/** "unconfigured", "inactive", "active", "finalized"; "unknown" for anything else. Never NULL. */
FERRY_API const char *ferry_lifecycle_state_name(ferry_lifecycle_state s);

/**
 * A managed publisher. Called in UNCONFIGURED outside a configure, it declares the publisher:
 * configure creates it (every time, after each cleanup too) and writes it to *out, and cleanup
 * and shutdown set *out to NULL, so *out must stay valid as long as the lifecycle. Called
 * during configure (from on_configure) or later (INACTIVE, ACTIVE), it creates the publisher at
 * once, in the lifecycle's current activation, and writes *out; cleanup destroys it and forgets
 * it (on_configure declares it again next time).
 *
 * @param o               publisher options, NULL for the defaults; copied
 * @param reserve_size    with reserve_count > 0: ferry_publisher_reserve(pub, reserve_size,
 *                        reserve_count) at creation; 0 for none
 * @retval FERRY_OK       declared or created
 * @retval FERRY_EINVAL   lc, topic, type_name or out is NULL; reserve_count > 0 with
 *                        reserve_size 0
 * @retval FERRY_ESTATE   FINALIZED, or UNCONFIGURED inside a callback other than on_configure
 * @retval FERRY_ENOMEM   out of memory
 * @retval other          when created at once: the error of ferry_publisher_create or
 *                        ferry_publisher_reserve (nothing is left behind)
 */
FERRY_API ferry_err ferry_lifecycle_publisher(ferry_lifecycle *lc, const char *topic,
                                              const char *type_name, uint64_t type_hash,
                                              const ferry_publisher_options *o, size_t reserve_size,
                                              uint32_t reserve_count, ferry_publisher **out);

/**
 * A managed subscriber; declared or created as ferry_lifecycle_publisher says. It is paused
 * unless the lifecycle is ACTIVE.
 * @retval FERRY_OK       declared or created
 * @retval FERRY_EINVAL   lc, topic, type_name or out is NULL
 * @retval FERRY_ESTATE   FINALIZED, or UNCONFIGURED inside a callback other than on_configure
 * @retval FERRY_ENOMEM   out of memory
 * @retval other          when created at once: the error of ferry_subscriber_create
 */
FERRY_API ferry_err ferry_lifecycle_subscriber(ferry_lifecycle *lc, const char *topic,
                                               const char *type_name, uint64_t type_hash,
                                               const ferry_subscriber_options *o,
                                               ferry_subscriber **out);

#ifdef __cplusplus
}
#endif
#endif /* FERRY_LIFECYCLE_H */
