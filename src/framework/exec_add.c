/* Subscribers and timers added to an executor and removed from it, from any thread, a callback
 * of the executor included: a removal from the entry's or timer's own callback leaves it to be
 * freed by the last one out; any other waits on ex->lock's condition until its callbacks and
 * takes are over. */
#include "framework/exec_internal.h"

ferry_err ferry_executor_add_subscriber(ferry_executor *ex, ferry_subscriber *sub,
                                        ferry_callback_group *g, ferry_sample_fn fn, void *arg)
{
    ferry_err err = ferry__exec_check(ex);
    if (err)
        return err;
    if (!sub || !fn)
        return FERRY_EINVAL;
    if ((err = ferry__subscriber_check(sub)))
        return err;
    if ((err = ferry__exec_group_check(ex, &g)))
        return err;
    int fd = -1;
    if ((err = ferry_subscriber_fd(sub, &fd)))
        return err;
    uint32_t nitems = ferry__subscriber_max_held(sub);
    entry *e = calloc(1, sizeof *e);
    work *items = calloc(nitems ? nitems : 1, sizeof *items);
    if (!e || !items) {
        free(e);
        free(items);
        return FERRY_ENOMEM;
    }
    e->sub = sub;
    e->group = g;
    e->fn = fn;
    e->arg = arg;
    e->fd = fd;
    e->items = items;
    e->pending = true;
    pthread_mutex_init(&e->mutex, NULL);
    for (uint32_t i = 0; i < nitems; i++) {
        items[i].entry = e;
        items[i].ex = ex;
        ferry__exec_entry_put(e, &items[i]);
    }

    pthread_mutex_lock(&ex->lock);
    void **slot = ferry__subscriber_waitset_slot(sub);
    if (*slot) {
        err = FERRY_EBUSY;
    } else if (ex->nsubs == ex->subs_cap) {
        uint32_t cap = ex->subs_cap ? ex->subs_cap * 2 : 8;
        entry **grown = realloc(ex->subs, cap * sizeof *grown);
        if (!grown) {
            err = FERRY_ENOMEM;
        } else {
            ex->subs = grown;
            ex->subs_cap = cap;
        }
    }
    if (err == FERRY_OK) {
        e->tag = ex->next_tag++;
        if (ferry__poller_add(ex->epfd, fd, e->tag) != 0)
            err = FERRY_ESYS;
    }
    if (err == FERRY_OK) {
        *slot = ex;
        ex->subs[ex->nsubs++] = e;
        if (ex->spinning)
            ferry__exec_wake_spinner(ex);
    }
    pthread_mutex_unlock(&ex->lock);
    if (err) {
        int saved = errno;
        pthread_mutex_destroy(&e->mutex);
        free(items);
        free(e);
        errno = saved;
    }
    return err;
}

ferry_err ferry_executor_remove_subscriber(ferry_executor *ex, ferry_subscriber *sub)
{
    ferry_err err = ferry__exec_check(ex);
    if (err)
        return err;
    if (!sub)
        return FERRY_EINVAL;
    pthread_mutex_lock(&ex->lock);
    uint32_t index;
    entry *e = ferry__exec_entry_find(ex, sub, &index);
    if (!e) {
        pthread_mutex_unlock(&ex->lock);
        return FERRY_ESTATE;
    }
    ex->subs[index] = ex->subs[--ex->nsubs];
    ferry__poller_del(ex->epfd, e->fd);
    e->removing = true;
    ferry__exec_release_unrun(ex, e, ferry__exec_group_purge(ex, e->group, e, NULL));
    if (ex->inflight == 0)
        pthread_cond_broadcast(&ex->done_cv);
    if (ferry__exec_current && ferry__exec_current->entry == e) {
        /* From one of its own callbacks: waiting would wait for ourselves. */
        e->orphan = true;
    } else {
        while (e->running > 0 || e->taking)
            pthread_cond_wait(&ex->done_cv, &ex->lock);
        ferry__exec_entry_free(e);
    }
    pthread_mutex_unlock(&ex->lock);
    return FERRY_OK;
}

ferry_err ferry_executor_add_timer(ferry_executor *ex, int64_t period_ns, ferry_callback_group *g,
                                   ferry_timer_fn fn, void *arg, uint32_t *timer_id)
{
    ferry_err err = ferry__exec_check(ex);
    if (err)
        return err;
    if (!fn || period_ns <= 0)
        return FERRY_EINVAL;
    if ((err = ferry__exec_group_check(ex, &g)))
        return err;
    timer *t = calloc(1, sizeof *t);
    if (!t)
        return FERRY_ENOMEM;
    t->period = period_ns;
    t->group = g;
    t->fn = fn;
    t->arg = arg;
    t->item.timer = t;
    t->item.ex = ex;
    t->next = ferry__clock_ns() + period_ns;

    pthread_mutex_lock(&ex->lock);
    if (ex->ntimers == ex->timers_cap) {
        uint32_t cap = ex->timers_cap ? ex->timers_cap * 2 : 8;
        timer **grown = realloc(ex->timers, cap * sizeof *grown);
        if (!grown) {
            pthread_mutex_unlock(&ex->lock);
            free(t);
            return FERRY_ENOMEM;
        }
        ex->timers = grown;
        ex->timers_cap = cap;
    }
    t->id = ex->next_timer_id++;
    if (ex->next_timer_id == 0)
        ex->next_timer_id = 1;
    ex->timers[ex->ntimers++] = t;
    if (ex->spinning)
        ferry__exec_wake_spinner(ex);
    pthread_mutex_unlock(&ex->lock);
    if (timer_id)
        *timer_id = t->id;
    return FERRY_OK;
}

ferry_err ferry_executor_remove_timer(ferry_executor *ex, uint32_t timer_id)
{
    ferry_err err = ferry__exec_check(ex);
    if (err)
        return err;
    pthread_mutex_lock(&ex->lock);
    timer *t = NULL;
    for (uint32_t i = 0; i < ex->ntimers; i++)
        if (ex->timers[i]->id == timer_id) {
            t = ex->timers[i];
            ex->timers[i] = ex->timers[--ex->ntimers];
            break;
        }
    if (!t) {
        pthread_mutex_unlock(&ex->lock);
        return FERRY_ESTATE;
    }
    t->removing = true;
    if (ferry__exec_group_purge(ex, t->group, NULL, t)) {
        t->busy = false;
        if (ex->inflight == 0)
            pthread_cond_broadcast(&ex->done_cv);
    }
    if (t->running && ferry__exec_current == &t->item) {
        t->orphan = true;
    } else {
        while (t->running)
            pthread_cond_wait(&ex->done_cv, &ex->lock);
        free(t);
    }
    pthread_mutex_unlock(&ex->lock);
    return FERRY_OK;
}
