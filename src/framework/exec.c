/*
 * Executor: subscriber callbacks and timers, run by the spinning thread or by a pool of workers.
 *
 * ex->lock guards everything mutable: the subscriber and timer tables, the group queues, the
 * runnable list, the free lists and the counters. Each added subscriber has its own mutex that
 * serialises ferry_take and ferry_release on it (a subscriber is used by one thread at a time),
 * so that spin's thread may take while workers release. Lock order: ex->lock before an entry's
 * mutex; spin and the workers take and release holding the entry's mutex alone. Callbacks run
 * with no lock held.
 *
 * Work items are preallocated: one per sample a subscriber may hold (its max_held) and one per
 * timer. An item is on its entry's free list, or owned by spin's thread while it takes, or
 * queued in its group's FIFO, or running. A group is on the runnable list while it has queued
 * items and may start one (reentrant, or exclusive and idle); workers pop groups from it.
 *
 * This file creates and destroys an executor and its callback groups. The group queues, the
 * entries' items and the running of one item are in exec_work.c, adding and removing subscribers
 * and timers in exec_add.c, spinning in exec_spin.c, keeping samples in exec_keep.c, on the
 * private exec_internal.h.
 */
#include "framework/exec_internal.h"

#define GROUP_MAGIC 0x5052474559525246ULL /* "FRRYGRP" */
#define DEFAULT_BATCH 8u

void ferry_executor_options_init(ferry_executor_options *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->max_batch = DEFAULT_BATCH;
}

static ferry_callback_group *group_new(ferry_executor *ex, ferry_group_kind kind)
{
    ferry_callback_group *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->magic = GROUP_MAGIC;
    g->ex = ex;
    g->kind = kind;
    g->next = ex->groups;
    ex->groups = g;
    return g;
}

static void free_all(ferry_executor *ex)
{
    for (uint32_t i = 0; i < ex->nsubs; i++) {
        ferry__poller_del(ex->epfd, ex->subs[i]->fd);
        ferry__exec_entry_free(ex->subs[i]);
    }
    for (uint32_t i = 0; i < ex->ntimers; i++)
        free(ex->timers[i]);
    while (ex->groups) {
        ferry_callback_group *g = ex->groups;
        ex->groups = g->next;
        g->magic = 0;
        free(g);
    }
    free(ex->subs);
    free(ex->timers);
    free(ex->workers);
    if (ex->epfd >= 0)
        close(ex->epfd);
    if (ex->wake_fd >= 0)
        close(ex->wake_fd);
    pthread_cond_destroy(&ex->work_cv);
    pthread_cond_destroy(&ex->done_cv);
    pthread_mutex_destroy(&ex->lock);
}

static void stop_workers(ferry_executor *ex)
{
    pthread_mutex_lock(&ex->lock);
    ex->quit = true;
    pthread_cond_broadcast(&ex->work_cv);
    pthread_mutex_unlock(&ex->lock);
    for (uint32_t i = 0; i < ex->nworkers; i++)
        pthread_join(ex->workers[i], NULL);
    ex->nworkers = 0;
}

ferry_err ferry_executor_create(ferry_executor **out, ferry_node *node,
                                const ferry_executor_options *options)
{
    if (!out || !node)
        return FERRY_EINVAL;
    ferry_err node_err = ferry__node_check(node);
    if (node_err)
        return node_err;
    ferry_executor_options o;
    ferry_executor_options_init(&o);
    if (options)
        o = *options;
    if (o.threads > FERRY_EXEC_MAX_THREADS)
        return FERRY_EINVAL;
    if (o.max_batch == 0)
        o.max_batch = DEFAULT_BATCH;

    ferry_executor *ex = calloc(1, sizeof *ex);
    if (!ex)
        return FERRY_ENOMEM;
    ex->node = node;
    ex->threads = o.threads;
    ex->max_batch = o.max_batch;
    ex->next_tag = 1;
    ex->next_timer_id = 1;
    atomic_init(&ex->stop, 0);
    pthread_mutex_init(&ex->lock, NULL);
    pthread_cond_init(&ex->work_cv, NULL);
    pthread_cond_init(&ex->done_cv, NULL);
    ex->epfd = ferry__poller_create();
    ex->wake_fd = ferry__notifier_create();
    ferry_err err = FERRY_OK;
    if (ex->epfd < 0 || ex->wake_fd < 0 || ferry__poller_add(ex->epfd, ex->wake_fd, WAKE_TAG))
        err = FERRY_ESYS;
    else if (!(ex->default_group = group_new(ex, FERRY_GROUP_EXCLUSIVE)))
        err = FERRY_ENOMEM;
    else if (o.threads && !(ex->workers = calloc(o.threads, sizeof *ex->workers)))
        err = FERRY_ENOMEM;
    /* Workers start with every signal blocked, so that signals reach the application's own
     * threads (a handler that calls ferry_executor_stop, a thread in sigwait). */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (uint32_t i = 0; err == FERRY_OK && i < o.threads; i++) {
        int rc = pthread_create(&ex->workers[i], NULL, ferry__exec_worker_main, ex);
        if (rc != 0) {
            errno = rc;
            err = FERRY_ESYS;
        } else {
            ex->nworkers++;
        }
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err == FERRY_OK)
        err = ferry__node_adopt(node, &ex->obj, EXEC_MAGIC);
    if (err) {
        int saved = errno;
        stop_workers(ex);
        free_all(ex);
        free(ex);
        errno = saved;
        return err;
    }
    *out = ex;
    return FERRY_OK;
}

ferry_err ferry_executor_destroy(ferry_executor *ex)
{
    ferry_err err = ferry__exec_check(ex);
    if (err)
        return err;
    pthread_mutex_lock(&ex->lock);
    bool busy = ex->spinning;
    pthread_mutex_unlock(&ex->lock);
    if (busy)
        return FERRY_EBUSY;
    stop_workers(ex);
    free_all(ex);
    ferry__node_bury(ex->node, &ex->obj);
    return FERRY_OK;
}

ferry_err ferry__exec_group_check(ferry_executor *ex, ferry_callback_group **g)
{
    if (!*g) {
        *g = ex->default_group;
        return FERRY_OK;
    }
    return (*g)->magic == GROUP_MAGIC && (*g)->ex == ex ? FERRY_OK : FERRY_EINVAL;
}

ferry_err ferry_callback_group_create(ferry_executor *ex, ferry_group_kind kind,
                                      ferry_callback_group **out)
{
    ferry_err err = ferry__exec_check(ex);
    if (err)
        return err;
    if (!out || (kind != FERRY_GROUP_EXCLUSIVE && kind != FERRY_GROUP_REENTRANT))
        return FERRY_EINVAL;
    pthread_mutex_lock(&ex->lock);
    ferry_callback_group *g = group_new(ex, kind);
    pthread_mutex_unlock(&ex->lock);
    if (!g)
        return FERRY_ENOMEM;
    *out = g;
    return FERRY_OK;
}
