/*
 * Lifecycle node (lifecycle.h): a state machine over a node and a list of managed endpoints.
 * Endpoints declared before configure are kept as declarations and created at every configure;
 * those asked for from on_configure or later are created at once and forgotten at cleanup.
 * Activation is the core's: an inactive publisher refuses loans, a paused subscriber has its
 * publishers skip it (ferry__publisher_set_active, ferry__subscriber_set_paused).
 *
 * Single-threaded: the caller serialises.
 */
#include "core/module.h"

#include <ferry/lifecycle.h>

#include <stdlib.h>
#include <string.h>

#define LC_MAGIC 0x4359434c59525246ULL /* "FRRYLCYC" */

typedef struct managed {
    struct managed *next;
    bool is_pub;
    bool transient; /* created at or after configure: forgotten at cleanup */
    char *topic;
    char *type_name;
    uint64_t type_hash;
    bool has_options;
    ferry_publisher_options popt;
    ferry_subscriber_options sopt;
    size_t reserve_size;
    uint32_t reserve_count;
    ferry_publisher **pout;
    ferry_subscriber **sout;
    ferry_publisher *pub; /* live handles, NULL when not created */
    ferry_subscriber *sub;
} managed;

struct ferry_lifecycle {
    uint64_t magic;
    ferry_node *node;
    ferry_lifecycle_callbacks cb;
    ferry_lifecycle_state state;
    bool in_transition; /* a callback is running: transitions are refused */
    bool configuring;
    bool endpoints_active;
    managed *list; /* in declaration order */
};

static ferry_err check(const ferry_lifecycle *lc)
{
    if (!lc || lc->magic != LC_MAGIC)
        return FERRY_EINVAL;
    return FERRY_OK;
}

const char *ferry_lifecycle_state_name(ferry_lifecycle_state s)
{
    switch (s) {
    case FERRY_LIFECYCLE_UNCONFIGURED:
        return "unconfigured";
    case FERRY_LIFECYCLE_INACTIVE:
        return "inactive";
    case FERRY_LIFECYCLE_ACTIVE:
        return "active";
    case FERRY_LIFECYCLE_FINALIZED:
        return "finalized";
    }
    return "unknown";
}

ferry_lifecycle_state ferry_lifecycle_state_get(const ferry_lifecycle *lc)
{
    return check(lc) == FERRY_OK ? lc->state : (ferry_lifecycle_state)0;
}

ferry_err ferry_lifecycle_create(ferry_lifecycle **out, ferry_node *node,
                                 const ferry_lifecycle_callbacks *cb)
{
    if (!out || !node)
        return FERRY_EINVAL;
    ferry_err node_err = ferry__node_check(node);
    if (node_err)
        return node_err;
    ferry_lifecycle *lc = calloc(1, sizeof *lc);
    if (!lc)
        return FERRY_ENOMEM;
    lc->magic = LC_MAGIC;
    lc->node = node;
    if (cb)
        lc->cb = *cb;
    lc->state = FERRY_LIFECYCLE_UNCONFIGURED;
    *out = lc;
    return FERRY_OK;
}

/* ---- managed endpoints -------------------------------------------------------------------- */

static void managed_free(managed *m)
{
    free(m->topic);
    free(m->type_name);
    free(m);
}

static void apply_activation(ferry_lifecycle *lc, managed *m)
{
    if (m->pub)
        ferry__publisher_set_active(m->pub, lc->endpoints_active);
    if (m->sub)
        ferry__subscriber_set_paused(m->sub, !lc->endpoints_active);
}

static ferry_err create_one(ferry_lifecycle *lc, managed *m)
{
    ferry_err err;
    if (m->is_pub) {
        err = ferry_publisher_create(&m->pub, lc->node, m->topic, m->type_name, m->type_hash,
                                     m->has_options ? &m->popt : NULL);
        if (err)
            return err;
        /* Inactive before anything else can see it. */
        apply_activation(lc, m);
        if (m->reserve_count > 0 &&
            (err = ferry_publisher_reserve(m->pub, m->reserve_size, m->reserve_count))) {
            ferry_publisher_destroy(m->pub);
            m->pub = NULL;
            return err;
        }
        *m->pout = m->pub;
    } else {
        err = ferry_subscriber_create(&m->sub, lc->node, m->topic, m->type_name, m->type_hash,
                                      m->has_options ? &m->sopt : NULL);
        if (err)
            return err;
        /* Paused before its first handshake completes: every connection starts paused. */
        apply_activation(lc, m);
        *m->sout = m->sub;
    }
    return FERRY_OK;
}

static void destroy_one(managed *m)
{
    if (m->pub) {
        ferry_publisher_destroy(m->pub);
        m->pub = NULL;
        if (!m->transient)
            *m->pout = NULL;
    }
    if (m->sub) {
        ferry_subscriber_destroy(m->sub);
        m->sub = NULL;
        if (!m->transient)
            *m->sout = NULL;
    }
}

/* Destroys every live endpoint and forgets the transient ones. */
static void destroy_all(ferry_lifecycle *lc)
{
    managed **link = &lc->list;
    while (*link) {
        managed *m = *link;
        destroy_one(m);
        if (m->transient) {
            *link = m->next;
            managed_free(m);
        } else {
            link = &m->next;
        }
    }
}

/* FERRY_EBUSY when the application holds samples or loans of a managed endpoint, or one of its
 * subscribers is in a waitset: destroying it would be refused or pull memory from under it. */
static ferry_err check_idle(ferry_lifecycle *lc)
{
    for (managed *m = lc->list; m; m = m->next) {
        if (m->pub) {
            ferry_publisher_stats ps;
            if (ferry_publisher_stats_get(m->pub, &ps) == FERRY_OK && ps.chunks_loaned > 0) {
                ferry__log(lc->node, FERRY_LOG_WARN,
                           "lifecycle: the managed publisher on %s still has %u loans out",
                           m->topic, ps.chunks_loaned);
                return FERRY_EBUSY;
            }
        }
        if (m->sub) {
            ferry_subscriber_stats ss;
            if (ferry_subscriber_stats_get(m->sub, &ss) == FERRY_OK && ss.held > 0) {
                ferry__log(lc->node, FERRY_LOG_WARN,
                           "lifecycle: %u samples taken from the managed subscriber on %s are "
                           "still held",
                           ss.held, m->topic);
                return FERRY_EBUSY;
            }
            if (*ferry__subscriber_waitset_slot(m->sub)) {
                ferry__log(lc->node, FERRY_LOG_WARN,
                           "lifecycle: the managed subscriber on %s is still in a waitset",
                           m->topic);
                return FERRY_EBUSY;
            }
        }
    }
    return FERRY_OK;
}

static void set_activation(ferry_lifecycle *lc, bool active)
{
    lc->endpoints_active = active;
    for (managed *m = lc->list; m; m = m->next)
        apply_activation(lc, m);
}

static ferry_err add_managed(ferry_lifecycle *lc, managed *m)
{
    ferry_err err = check(lc);
    if (err) {
        managed_free(m);
        return err;
    }
    if (lc->state == FERRY_LIFECYCLE_FINALIZED ||
        (lc->state == FERRY_LIFECYCLE_UNCONFIGURED && lc->in_transition && !lc->configuring)) {
        managed_free(m);
        return FERRY_ESTATE;
    }
    bool now = lc->configuring || lc->state != FERRY_LIFECYCLE_UNCONFIGURED;
    m->transient = now;
    if (now && (err = create_one(lc, m))) {
        managed_free(m);
        return err;
    }
    managed **link = &lc->list;
    while (*link)
        link = &(*link)->next;
    *link = m;
    return FERRY_OK;
}

static managed *managed_new(const char *topic, const char *type_name, uint64_t type_hash)
{
    managed *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->topic = strdup(topic);
    m->type_name = strdup(type_name);
    m->type_hash = type_hash;
    if (!m->topic || !m->type_name) {
        managed_free(m);
        return NULL;
    }
    return m;
}

ferry_err ferry_lifecycle_publisher(ferry_lifecycle *lc, const char *topic, const char *type_name,
                                    uint64_t type_hash, const ferry_publisher_options *o,
                                    size_t reserve_size, uint32_t reserve_count,
                                    ferry_publisher **out)
{
    if (check(lc) != FERRY_OK || !topic || !type_name || !out ||
        (reserve_count > 0 && reserve_size == 0))
        return FERRY_EINVAL;
    managed *m = managed_new(topic, type_name, type_hash);
    if (!m)
        return FERRY_ENOMEM;
    m->is_pub = true;
    if (o) {
        m->has_options = true;
        m->popt = *o;
    }
    m->reserve_size = reserve_size;
    m->reserve_count = reserve_count;
    m->pout = out;
    return add_managed(lc, m);
}

ferry_err ferry_lifecycle_subscriber(ferry_lifecycle *lc, const char *topic, const char *type_name,
                                     uint64_t type_hash, const ferry_subscriber_options *o,
                                     ferry_subscriber **out)
{
    if (check(lc) != FERRY_OK || !topic || !type_name || !out)
        return FERRY_EINVAL;
    managed *m = managed_new(topic, type_name, type_hash);
    if (!m)
        return FERRY_ENOMEM;
    if (o) {
        m->has_options = true;
        m->sopt = *o;
    }
    m->sout = out;
    return add_managed(lc, m);
}

/* ---- transitions -------------------------------------------------------------------------- */

typedef ferry_err (*callback)(void *arg, ferry_lifecycle *lc);

static ferry_err run_callback(ferry_lifecycle *lc, callback fn)
{
    return fn ? fn(lc->cb.arg, lc) : FERRY_OK;
}

/* Refuses a transition from anything but `from` (or, for shutdown, from FINALIZED), and any
 * transition while a callback runs. */
static ferry_err begin(ferry_lifecycle *lc, ferry_lifecycle_state from, const char *what)
{
    ferry_err err = check(lc);
    if (err)
        return err;
    bool ok = from ? lc->state == from : lc->state != FERRY_LIFECYCLE_FINALIZED;
    if (lc->in_transition || !ok) {
        ferry__log(lc->node, FERRY_LOG_DEBUG, "lifecycle: %s refused in state %s%s", what,
                   ferry_lifecycle_state_name(lc->state),
                   lc->in_transition ? " (inside a transition)" : "");
        return FERRY_ESTATE;
    }
    return FERRY_OK;
}

ferry_err ferry_lifecycle_configure(ferry_lifecycle *lc)
{
    ferry_err err = begin(lc, FERRY_LIFECYCLE_UNCONFIGURED, "configure");
    if (err)
        return err;
    lc->in_transition = lc->configuring = true;
    lc->endpoints_active = false;
    for (managed *m = lc->list; m && !err; m = m->next)
        if (!m->transient)
            err = create_one(lc, m);
    if (!err)
        err = run_callback(lc, lc->cb.on_configure);
    if (err) {
        ferry__log(lc->node, FERRY_LOG_WARN, "lifecycle: configure failed: %s",
                   ferry_strerror(err));
        destroy_all(lc);
    } else {
        lc->state = FERRY_LIFECYCLE_INACTIVE;
    }
    lc->in_transition = lc->configuring = false;
    return err;
}

ferry_err ferry_lifecycle_activate(ferry_lifecycle *lc)
{
    ferry_err err = begin(lc, FERRY_LIFECYCLE_INACTIVE, "activate");
    if (err)
        return err;
    lc->in_transition = true;
    set_activation(lc, true);
    err = run_callback(lc, lc->cb.on_activate);
    if (err) {
        ferry__log(lc->node, FERRY_LOG_WARN, "lifecycle: activate failed: %s", ferry_strerror(err));
        set_activation(lc, false);
    } else {
        lc->state = FERRY_LIFECYCLE_ACTIVE;
    }
    lc->in_transition = false;
    return err;
}

ferry_err ferry_lifecycle_deactivate(ferry_lifecycle *lc)
{
    ferry_err err = begin(lc, FERRY_LIFECYCLE_ACTIVE, "deactivate");
    if (err)
        return err;
    lc->in_transition = true;
    err = run_callback(lc, lc->cb.on_deactivate);
    set_activation(lc, false);
    lc->state = FERRY_LIFECYCLE_INACTIVE;
    lc->in_transition = false;
    return err;
}

ferry_err ferry_lifecycle_cleanup(ferry_lifecycle *lc)
{
    ferry_err err = begin(lc, FERRY_LIFECYCLE_INACTIVE, "cleanup");
    if (err)
        return err;
    if ((err = check_idle(lc)))
        return err;
    lc->in_transition = true;
    err = run_callback(lc, lc->cb.on_cleanup);
    destroy_all(lc);
    lc->state = FERRY_LIFECYCLE_UNCONFIGURED;
    lc->in_transition = false;
    return err;
}

ferry_err ferry_lifecycle_shutdown(ferry_lifecycle *lc)
{
    ferry_err err = begin(lc, 0, "shutdown");
    if (err)
        return err;
    if ((err = check_idle(lc)))
        return err;
    lc->in_transition = true;
    err = run_callback(lc, lc->cb.on_shutdown);
    set_activation(lc, false);
    destroy_all(lc);
    lc->state = FERRY_LIFECYCLE_FINALIZED;
    lc->in_transition = false;
    return err;
}

ferry_err ferry_lifecycle_destroy(ferry_lifecycle *lc)
{
    ferry_err err = check(lc);
    if (err)
        return err;
    if (lc->in_transition)
        return FERRY_ESTATE;
    if (lc->state != FERRY_LIFECYCLE_FINALIZED) {
        err = ferry_lifecycle_shutdown(lc);
        if (err == FERRY_EBUSY)
            return err;
    }
    while (lc->list) {
        managed *m = lc->list;
        lc->list = m->next;
        managed_free(m);
    }
    lc->magic = 0;
    free(lc);
    return FERRY_OK;
}
