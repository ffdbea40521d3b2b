/*
 * Subscriber lifecycle: options, creation, destruction, the calls that report (wait for
 * publishers, descriptor, statistics) and the hooks the waitset, the lifecycle layer and the GPU
 * module use. See subscriber.h.
 */
#include "core/subscriber.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ferry_subscriber_wait_publishers, timing out, logs why each handshake this old is stuck. */
#define STUCK_SAY_NS 500000000LL

void ferry_subscriber_options_init(ferry_subscriber_options *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->depth = 2;
    o->max_held = 16;
    o->max_publishers = 16;
}

static ferry_err options_resolve(ferry_subscriber_options *o)
{
    ferry_subscriber_options d;
    ferry_subscriber_options_init(&d);
    if (!o->depth)
        o->depth = d.depth;
    if (!o->max_held)
        o->max_held = d.max_held;
    if (!o->max_publishers)
        o->max_publishers = d.max_publishers;
    if (o->depth > 4096 || o->history > 4096 || o->max_publishers > 256 || o->max_held > 65536)
        return FERRY_EINVAL;
    if (o->overflow != FERRY_OVERFLOW_DROP_OLDEST && o->overflow != FERRY_OVERFLOW_BLOCK)
        return FERRY_EINVAL;
    if (o->require & ~FERRY__QOS_ALL)
        return FERRY_EINVAL;
    if (!ferry__spin_valid(o->spin_ns))
        return FERRY_EINVAL;
    return FERRY_OK;
}

ferry_err ferry__subscriber_check(ferry_subscriber *sub)
{
    return ferry__endpoint_check(sub ? &sub->ep : NULL, FERRY__SUB_MAGIC);
}

ferry_err ferry_subscriber_create(ferry_subscriber **out, ferry_node *node, const char *topic,
                                  const char *type_name, uint64_t type_hash,
                                  const ferry_subscriber_options *options)
{
    if (!out || !topic)
        return FERRY_EINVAL;
    ferry_err err = ferry__node_check(node);
    if (err)
        return err;
    ferry_subscriber_options o;
    if (options)
        o = *options;
    else
        ferry_subscriber_options_init(&o);
    if ((err = options_resolve(&o)))
        return err;
    ferry_subscriber *sub = calloc(1, sizeof *sub);
    if (!sub)
        return FERRY_ENOMEM;
    sub->opt = o;
    sub->cookie = ferry__random64();
    sub->watch_fd = -1;
    sub->untyped = type_name == NULL;
    ferry__spin_init(&sub->spin, o.spin_ns);
    if ((err = ferry__endpoint_open(&sub->ep, node, topic, type_name, type_hash)))
        goto fail;
    sub->conns = calloc(o.max_publishers, sizeof *sub->conns);
    sub->live = calloc(o.max_publishers, sizeof *sub->live);
    if (!sub->conns || !sub->live) {
        err = FERRY_ENOMEM;
        goto fail;
    }
    for (uint32_t i = 0; i < o.max_publishers; i++)
        sub->conns[i].sock = -1;

    ferry__status init;
    ferry__endpoint_status_init(&sub->ep, FERRY_ENDPOINT_SUBSCRIBER, &init);
    init.depth = o.depth;
    if ((err = ferry__endpoint_publish_status(&sub->ep, "sub", &init)))
        goto fail;
    /* Watched once the status file is in it: the directory it watches stays (see
     * ferry__endpoint_publish_status). Without a watch (the user's inotify instances or watches
     * are all taken, which any process of the user can do) publishers are found by the rescan,
     * within RESCAN_NS: slower, said once, not an error. */
    if (ferry__dirwatch_create(&sub->watch_fd, sub->ep.dirfd) != 0) {
        if (errno != EMFILE && errno != ENFILE && errno != ENOSPC && errno != ENOMEM) {
            err = FERRY_ESYS;
            goto fail;
        }
        ferry__log(node, FERRY_LOG_WARN,
                   "%s: cannot watch the topic directory (inotify: %s; see fs.inotify."
                   "max_user_instances and max_user_watches): new publishers are found within "
                   "a second instead of at once",
                   sub->ep.topic, strerror(errno));
    } else if (ferry__poller_add(sub->ep.epfd, sub->watch_fd, ferry__tag(FERRY__TAG_WATCH, 0, 0)) !=
               0) {
        err = FERRY_ESYS;
        goto fail;
    }
    sub->st = &sub->ep.status.map->sub;
    if ((err = ferry__node_adopt(node, &sub->ep.obj, FERRY__SUB_MAGIC)))
        goto fail;
    ferry__sub_scan(sub);
    *out = sub;
    return FERRY_OK;
fail : {
    int e = errno;
    if (sub->watch_fd >= 0)
        close(sub->watch_fd);
    ferry__endpoint_close(&sub->ep);
    free(sub->conns);
    free(sub->live);
    free(sub);
    errno = e;
    return err;
}
}

ferry_err ferry_subscriber_destroy(ferry_subscriber *sub)
{
    ferry_err err = ferry__subscriber_check(sub);
    if (err)
        return err;
    if (sub->held > 0 || sub->waitset)
        return FERRY_EBUSY;
    ferry__bye bye;
    ferry__bye_init(&bye);
    for (uint32_t i = 0; i < sub->opt.max_publishers; i++) {
        if (sub->conns[i].state == SC_ACTIVE)
            ferry__send_msg(sub->conns[i].sock, &bye, sizeof bye, NULL, 0);
        ferry__sub_conn_close(sub, &sub->conns[i]);
    }
    for (int h = 0; h < FERRY__CLOSE_HOOKS; h++)
        if (sub->hooks[h].fn)
            sub->hooks[h].fn(sub->hooks[h].arg, UINT32_MAX, 0);
    close(sub->watch_fd);
    ferry__endpoint_close(&sub->ep);
    free(sub->conns);
    free(sub->live);
    sub->conns = NULL;
    sub->live = NULL;
    ferry__node_bury(sub->ep.node, &sub->ep.obj);
    return FERRY_OK;
}

ferry_err ferry_subscriber_wait_publishers(ferry_subscriber *sub, uint32_t count,
                                           int64_t timeout_ns)
{
    ferry_err err = ferry__subscriber_check(sub);
    if (err)
        return err;
    int64_t deadline = ferry__deadline(timeout_ns);
    ferry__sub_housekeep(sub, 0);
    while (sub->nactive < count) {
        int64_t left = ferry__remaining(deadline);
        if (left == 0) {
            if (sub->type_refused)
                return FERRY_ETYPE;
            /* Why nothing came: a publisher found but stuck in its handshake says so (once; a
             * publisher answers within its housekeeping, 50 ms while it publishes). */
            ferry__sub_say_stuck(sub, STUCK_SAY_NS);
            return FERRY_ETIMEDOUT;
        }
        /* Short sleeps: a publisher answers during its own calls, which we cannot see. */
        ferry__sub_housekeep(sub, left < 0 || left > 5000000 ? 5000000 : left);
    }
    return FERRY_OK;
}

ferry_err ferry_subscriber_type(ferry_subscriber *sub, const char **type_name, uint64_t *type_hash)
{
    ferry_err err = ferry__subscriber_check(sub);
    if (err)
        return err;
    if (!type_name || !type_hash)
        return FERRY_EINVAL;
    if (sub->ep.type_name[0] == '\0')
        return FERRY_EAGAIN;
    *type_name = sub->ep.type_name;
    *type_hash = sub->ep.type_hash;
    return FERRY_OK;
}

ferry_err ferry_subscriber_fd(ferry_subscriber *sub, int *fd)
{
    ferry_err err = ferry__subscriber_check(sub);
    if (err)
        return err;
    if (!fd)
        return FERRY_EINVAL;
    if (!sub->fd_given) {
        /* As if the last take had found nothing: the descriptor fires on the next sample. */
        sub->fd_given = true;
        ferry__subscriber_arm(sub);
    }
    *fd = sub->ep.epfd;
    return FERRY_OK;
}

ferry_err ferry__subscriber_set_paused(ferry_subscriber *sub, bool paused)
{
    ferry_err err = ferry__subscriber_check(sub);
    if (err)
        return err;
    sub->paused = paused;
    for (uint32_t k = 0; k < sub->nlive; k++) {
        sconn *c = &sub->conns[sub->live[k]];
        if (c->state == SC_ACTIVE)
            atomic_store_explicit(&c->ring.hdr->sub_paused, paused ? 1u : 0u, memory_order_seq_cst);
    }
    /* After the words: what a publisher queues from now on is a straggler, given back later. */
    if (paused)
        ferry__sub_discard_queued(sub);
    ferry__sub_update_stats(sub);
    return FERRY_OK;
}

ferry_err ferry__subscriber_discarded(ferry_subscriber *sub, uint64_t *discarded)
{
    ferry_err err = ferry__subscriber_check(sub);
    if (err)
        return err;
    if (!discarded)
        return FERRY_EINVAL;
    *discarded = sub->discarded;
    return FERRY_OK;
}

uint32_t ferry__subscriber_max_held(ferry_subscriber *sub)
{
    return ferry__subscriber_check(sub) == FERRY_OK ? sub->opt.max_held : 0;
}

int ferry__subscriber_poll_fd(const ferry_subscriber *sub)
{
    return sub->ep.epfd;
}

void **ferry__subscriber_waitset_slot(ferry_subscriber *sub)
{
    return &sub->waitset;
}

ferry_err ferry__subscriber_add_close_hook(ferry_subscriber *sub, ferry__close_hook fn, void *arg)
{
    ferry_err err = ferry__subscriber_check(sub);
    if (err)
        return err;
    if (!fn)
        return FERRY_EINVAL;
    for (int h = 0; h < FERRY__CLOSE_HOOKS; h++)
        if (sub->hooks[h].fn == fn)
            return FERRY_EBUSY;
    for (int h = 0; h < FERRY__CLOSE_HOOKS; h++)
        if (!sub->hooks[h].fn) {
            sub->hooks[h].fn = fn;
            sub->hooks[h].arg = arg;
            return FERRY_OK;
        }
    return FERRY_ELIMIT;
}

void *ferry__subscriber_close_hook_arg(ferry_subscriber *sub, ferry__close_hook fn)
{
    if (ferry__subscriber_check(sub) != FERRY_OK)
        return NULL;
    for (int h = 0; h < FERRY__CLOSE_HOOKS; h++)
        if (sub->hooks[h].fn == fn)
            return sub->hooks[h].arg;
    return NULL;
}

ferry_err ferry_subscriber_stats_get(ferry_subscriber *sub, ferry_subscriber_stats *out)
{
    ferry_err err = ferry__subscriber_check(sub);
    if (err)
        return err;
    if (!out)
        return FERRY_EINVAL;
    ferry__sub_publish_status(sub);
    *out = sub->stats;
    return FERRY_OK;
}
