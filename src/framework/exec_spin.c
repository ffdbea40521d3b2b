/* Spinning: the one thread that spins takes from pending subscribers into their groups' queues
 * (ex->lock dropped around each subscriber's takes, made under its mutex), queues due timers,
 * runs the items itself when there are no workers, and waits on the poller. ferry_executor_stop
 * may be called from any thread, a signal handler included. */
#include "framework/exec_internal.h"

#define EVENTS 32

/* Takes up to max_batch samples from every pending subscriber into its group's queue.
 * ex->lock held; dropped around each subscriber's takes. True when something was taken. */
static bool take_round(ferry_executor *ex)
{
    bool took = false;
    for (uint32_t i = 0; i < ex->nsubs; i++) {
        entry *e = ex->subs[i];
        if (!e->pending || e->blocked)
            continue;
        if (e->nfree == 0) {
            e->blocked = true;
            continue;
        }
        uint32_t n = e->nfree < ex->max_batch ? e->nfree : ex->max_batch;
        work *batch = NULL;
        for (uint32_t k = 0; k < n; k++) {
            work *w = e->free;
            e->free = w->next;
            e->nfree--;
            w->next = batch;
            batch = w;
        }
        e->taking = true;
        pthread_mutex_unlock(&ex->lock);

        ferry_err err = FERRY_OK;
        uint32_t got = 0;
        pthread_mutex_lock(&e->mutex);
        for (work *w = batch; w && err == FERRY_OK; w = w->next) {
            err = ferry_take(e->sub, &w->sample);
            if (err == FERRY_OK)
                got++;
        }
        pthread_mutex_unlock(&e->mutex);

        pthread_mutex_lock(&ex->lock);
        e->taking = false;
        ex->stats.samples_taken += got;
        /* The first got items of the batch hold samples, in take order. */
        work *taken = NULL;
        for (uint32_t k = 0; k < n; k++) {
            work *w = batch;
            batch = w->next;
            if (k < got) {
                w->next = taken;
                taken = w;
            } else {
                ferry__exec_entry_put(e, w);
            }
        }
        work *ordered = NULL; /* taken is reversed: turn it back into take order */
        while (taken) {
            work *w = taken;
            taken = w->next;
            w->next = ordered;
            ordered = w;
        }
        if (e->removing) {
            ferry__exec_release_unrun(ex, e, ordered);
            ferry__exec_entry_settle(ex, e);
            continue;
        }
        while (ordered) {
            work *w = ordered;
            ordered = w->next;
            ferry__exec_group_push(ex, e->group, w);
        }
        took |= got > 0;
        if (err == FERRY_EAGAIN) {
            e->pending = false; /* the descriptor is armed */
        } else if (err == FERRY_ELIMIT) {
            e->blocked = true;
        } else if (err != FERRY_OK) {
            e->pending = false;
            ferry__log(ex->node, FERRY_LOG_WARN, "executor: taking failed: %s",
                       ferry_strerror(err));
        }
    }
    return took;
}

/* Queues the due timers; returns whether any was, and the time of the next one in *next. */
static bool fire_timers(ferry_executor *ex, int64_t now, int64_t *next)
{
    bool fired = false;
    *next = INT64_MAX;
    for (uint32_t i = 0; i < ex->ntimers; i++) {
        timer *t = ex->timers[i];
        if (now >= t->next) {
            if (!t->busy) {
                t->busy = true;
                t->item.when.ns = now;
                ferry__exec_group_push(ex, t->group, &t->item);
                fired = true;
            }
            t->next += t->period;
            if (t->next <= now)
                t->next = now + t->period;
        }
        if (t->next < *next)
            *next = t->next;
    }
    return fired;
}

static bool any_ready(const ferry_executor *ex)
{
    for (uint32_t i = 0; i < ex->nsubs; i++)
        if (ex->subs[i]->pending && !ex->subs[i]->blocked)
            return true;
    return false;
}

static ferry_err spin(ferry_executor *ex, int64_t timeout_ns, bool once)
{
    ferry_err err = ferry__exec_check(ex);
    if (err)
        return err;
    pthread_mutex_lock(&ex->lock);
    if (ex->spinning) {
        pthread_mutex_unlock(&ex->lock);
        return FERRY_EBUSY;
    }
    ex->spinning = true;
    for (uint32_t i = 0; i < ex->nsubs; i++)
        ex->subs[i]->pending = true;
    pthread_mutex_unlock(&ex->lock);

    int64_t deadline = ferry__deadline(timeout_ns);
    ferry_err result = FERRY_OK;
    for (;;) {
        if (atomic_load_explicit(&ex->stop, memory_order_acquire))
            break;
        pthread_mutex_lock(&ex->lock);
        bool did = take_round(ex);
        int64_t now = ferry__clock_ns();
        int64_t next_timer;
        did |= fire_timers(ex, now, &next_timer);
        if (ex->threads == 0) {
            work *w;
            while ((w = ferry__exec_next_work(ex)))
                ferry__exec_run_work(ex, w);
        }
        bool ready = any_ready(ex);
        pthread_mutex_unlock(&ex->lock);

        if (once && did)
            break;
        int64_t left = ferry__remaining(deadline);
        if (left == 0) {
            result = FERRY_ETIMEDOUT;
            break;
        }
        if (atomic_load_explicit(&ex->stop, memory_order_acquire))
            break;
        int64_t wait = left;
        if (ready) {
            wait = 0;
        } else if (next_timer != INT64_MAX) {
            int64_t until = next_timer - ferry__clock_ns();
            if (until < 0)
                until = 0;
            if (wait < 0 || until < wait)
                wait = until;
        }
        ferry__event ev[EVENTS];
        int n = ferry__poller_wait(ex->epfd, ev, EVENTS, wait);
        if (n < 0) {
            result = FERRY_ESYS;
            break;
        }
        if (n == 0)
            continue;
        pthread_mutex_lock(&ex->lock);
        for (int k = 0; k < n; k++) {
            if (ev[k].tag == WAKE_TAG) {
                ferry__notifier_drain(ex->wake_fd);
                continue;
            }
            for (uint32_t i = 0; i < ex->nsubs; i++)
                if (ex->subs[i]->tag == ev[k].tag)
                    ex->subs[i]->pending = true;
        }
        pthread_mutex_unlock(&ex->lock);
    }

    int saved = errno;
    pthread_mutex_lock(&ex->lock);
    while (ex->inflight > 0)
        pthread_cond_wait(&ex->done_cv, &ex->lock);
    ex->spinning = false;
    atomic_store_explicit(&ex->stop, 0, memory_order_release);
    pthread_mutex_unlock(&ex->lock);
    errno = saved;
    return result;
}

ferry_err ferry_executor_spin(ferry_executor *ex, int64_t timeout_ns)
{
    return spin(ex, timeout_ns, false);
}

ferry_err ferry_executor_spin_once(ferry_executor *ex, int64_t timeout_ns)
{
    return spin(ex, timeout_ns, true);
}

ferry_err ferry_executor_stop(ferry_executor *ex)
{
    ferry_err err = ferry__exec_check(ex);
    if (err)
        return err;
    int saved = errno;
    /* Release: whoever sees the flag also sees what the stopping thread did before. */
    atomic_store_explicit(&ex->stop, 1, memory_order_release);
    ferry__notifier_signal(ex->wake_fd);
    errno = saved;
    return FERRY_OK;
}
