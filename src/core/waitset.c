/*
 * Waitset: one poller over the pollers of many subscribers. A member is ready when a sample is
 * queued for it; waiting arms every member's doorbells first, so a delivery that lands between
 * the check and the sleep still wakes us. Used by one thread at a time.
 */
#include "core/core.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WS_MAX 256

typedef struct member {
    ferry_subscriber *sub;
    void *context;
} member;

struct ferry_waitset {
    ferry__obj obj;
    ferry_node *node;
    int epfd;
    member members[WS_MAX];
    uint32_t count;
};

static ferry_err check(ferry_waitset *ws)
{
    if (!ws)
        return FERRY_EINVAL;
    if (ws->obj.magic == FERRY__DEAD_MAGIC)
        return FERRY_ECLOSED;
    return ws->obj.magic == FERRY__WS_MAGIC ? FERRY_OK : FERRY_EINVAL;
}

ferry_err ferry_waitset_create(ferry_waitset **out, ferry_node *node)
{
    if (!out || !node)
        return FERRY_EINVAL;
    if (node->magic != FERRY__NODE_MAGIC)
        return node->magic == FERRY__DEAD_MAGIC ? FERRY_ECLOSED : FERRY_EINVAL;
    ferry_waitset *ws = calloc(1, sizeof *ws);
    if (!ws)
        return FERRY_ENOMEM;
    ws->node = node;
    ws->epfd = ferry__poller_create();
    if (ws->epfd < 0) {
        free(ws);
        return FERRY_ESYS;
    }
    ferry_err err = ferry__node_adopt(node, &ws->obj, FERRY__WS_MAGIC);
    if (err) {
        close(ws->epfd);
        free(ws);
        return err;
    }
    *out = ws;
    return FERRY_OK;
}

ferry_err ferry_waitset_destroy(ferry_waitset *ws)
{
    ferry_err err = check(ws);
    if (err)
        return err;
    for (uint32_t i = 0; i < ws->count; i++)
        *ferry__subscriber_waitset_slot(ws->members[i].sub) = NULL;
    close(ws->epfd);
    ws->count = 0;
    ferry__node_bury(ws->node, &ws->obj);
    return FERRY_OK;
}

ferry_err ferry_waitset_add(ferry_waitset *ws, ferry_subscriber *sub, void *context)
{
    ferry_err err = check(ws);
    if (err)
        return err;
    if ((err = ferry__subscriber_check(sub)))
        return err;
    void **slot = ferry__subscriber_waitset_slot(sub);
    if (*slot)
        return FERRY_EBUSY;
    if (ws->count == WS_MAX)
        return FERRY_ELIMIT;
    if (ferry__poller_add(ws->epfd, ferry__subscriber_poll_fd(sub), ws->count) != 0)
        return FERRY_ESYS;
    ws->members[ws->count].sub = sub;
    ws->members[ws->count].context = context;
    ws->count++;
    *slot = ws;
    return FERRY_OK;
}

ferry_err ferry_waitset_remove(ferry_waitset *ws, ferry_subscriber *sub)
{
    ferry_err err = check(ws);
    if (err)
        return err;
    if ((err = ferry__subscriber_check(sub)))
        return err;
    for (uint32_t i = 0; i < ws->count; i++) {
        if (ws->members[i].sub != sub)
            continue;
        ferry__poller_del(ws->epfd, ferry__subscriber_poll_fd(sub));
        *ferry__subscriber_waitset_slot(sub) = NULL;
        /* Keep the array dense; the moved member's poller tag is its index, so re-register it. */
        ws->count--;
        if (i != ws->count) {
            ws->members[i] = ws->members[ws->count];
            int fd = ferry__subscriber_poll_fd(ws->members[i].sub);
            ferry__poller_del(ws->epfd, fd);
            ferry__poller_add(ws->epfd, fd, i);
        }
        return FERRY_OK;
    }
    return FERRY_ESTATE;
}

/* The members with a sample queued; after a sleep (waited), each of them saw its sample come,
 * which paces its anticipation (spin.h). */
static size_t collect(ferry_waitset *ws, void **ready, size_t capacity, bool waited)
{
    size_t n = 0;
    for (uint32_t i = 0; i < ws->count && n < capacity; i++)
        if (ferry__subscriber_ready(ws->members[i].sub)) {
            if (waited)
                ferry__subscriber_arrived(ws->members[i].sub);
            ready[n++] = ws->members[i].context;
        }
    return n;
}

/* The member whose steady stream's next sample is anticipated first, and when to wake for it
 * (ferry_subscriber_wake_at); NULL when none is. */
static ferry_subscriber *soonest(ferry_waitset *ws, int64_t *at)
{
    ferry_subscriber *first = NULL;
    *at = 0;
    for (uint32_t i = 0; i < ws->count; i++) {
        int64_t a = 0;
        if (!ferry__subscriber_background(ws->members[i].sub) &&
            ferry_subscriber_wake_at(ws->members[i].sub, &a) == FERRY_OK && a != 0 &&
            (first == NULL || a < *at)) {
            first = ws->members[i].sub;
            *at = a;
        }
    }
    return first;
}

ferry_err ferry_waitset_wait(ferry_waitset *ws, int64_t timeout_ns, void **ready, size_t capacity,
                             size_t *count)
{
    ferry_err err = check(ws);
    if (err)
        return err;
    if (!ready || !count || capacity == 0)
        return FERRY_EINVAL;
    *count = 0;
    int64_t deadline = ferry__deadline(timeout_ns);
    for (bool waited = false;; waited = true) {
        size_t n = collect(ws, ready, capacity, waited);
        if (n == 0) {
            for (uint32_t i = 0; i < ws->count; i++)
                ferry__subscriber_arm(ws->members[i].sub);
            n = collect(ws, ready, capacity, waited);
        }
        if (n > 0) {
            *count = n;
            return FERRY_OK;
        }
        int64_t left = ferry__remaining(deadline), sleep = left;
        /* A background member is not woken by its samples: look at it again soon. */
        for (uint32_t i = 0; i < ws->count; i++)
            if (ferry__subscriber_background(ws->members[i].sub) &&
                (sleep < 0 || sleep > FERRY_BACKGROUND_POLL_NS))
                sleep = FERRY_BACKGROUND_POLL_NS;
        /* A steady stream's next sample: awake a little before it is due, and spin across its
         * arrival rather than pay a wake-up for it. */
        int64_t at = 0, now = ferry__clock_ns();
        ferry_subscriber *soon = left != 0 ? soonest(ws, &at) : NULL;
        if (soon && (sleep < 0 || at - now < sleep))
            sleep = at > now ? at - now : 0;
        else
            soon = NULL;
        ferry__event ev[32];
        int got = soon ? ferry__poller_wait_precise(ws->epfd, ev, 32, sleep)
                       : ferry__poller_wait(ws->epfd, ev, 32, sleep);
        if (soon && got == 0)
            ferry_subscriber_catch(soon, at);
        for (int i = 0; i < got; i++)
            if (ev[i].tag < ws->count && !ferry__subscriber_ready(ws->members[ev[i].tag].sub))
                ferry__subscriber_housekeep(ws->members[ev[i].tag].sub);
        if (left == 0) {
            *count = collect(ws, ready, capacity, false);
            return *count ? FERRY_OK : FERRY_ETIMEDOUT;
        }
    }
}
