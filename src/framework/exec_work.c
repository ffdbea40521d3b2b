/* The executor's work items: the queue of each callback group and the runnable list workers pop
 * groups from, each subscriber entry's free items, and the running of one item, with the worker
 * threads' loop. All of it with ex->lock held, but for the callback itself (no lock held) and
 * the release after it (the entry's mutex alone). */
#include "framework/exec_internal.h"

_Thread_local work *ferry__exec_current;

/* ---- groups and the runnable list (ex->lock held) ----------------------------------------- */

static bool group_can_start(const ferry_callback_group *g)
{
    return g->head && (g->kind == FERRY_GROUP_REENTRANT || g->running == 0);
}

static void group_update(ferry_executor *ex, ferry_callback_group *g)
{
    if (g->listed || !group_can_start(g))
        return;
    g->listed = true;
    g->next_runnable = NULL;
    if (ex->run_tail)
        ex->run_tail->next_runnable = g;
    else
        ex->run_head = g;
    ex->run_tail = g;
    if (ex->threads)
        pthread_cond_signal(&ex->work_cv);
}

void ferry__exec_group_push(ferry_executor *ex, ferry_callback_group *g, work *w)
{
    w->next = NULL;
    w->group = g;
    if (g->tail)
        g->tail->next = w;
    else
        g->head = w;
    g->tail = w;
    ex->inflight++;
    group_update(ex, g);
}

work *ferry__exec_next_work(ferry_executor *ex)
{
    while (ex->run_head) {
        ferry_callback_group *g = ex->run_head;
        ex->run_head = g->next_runnable;
        if (!ex->run_head)
            ex->run_tail = NULL;
        g->listed = false;
        if (!group_can_start(g))
            continue; /* its items were removed meanwhile */
        work *w = g->head;
        g->head = w->next;
        if (!g->head)
            g->tail = NULL;
        g->running++;
        /* A reentrant group goes to the back of the list, so another worker may start its
         * next item while this one runs and other groups get their turn. */
        group_update(ex, g);
        return w;
    }
    return NULL;
}

work *ferry__exec_group_purge(ferry_executor *ex, ferry_callback_group *g, const entry *e,
                              const timer *t)
{
    work *out = NULL, *prev = NULL, *w = g->head;
    while (w) {
        work *next = w->next;
        if ((e && w->entry == e) || (t && w->timer == t)) {
            if (prev)
                prev->next = next;
            else
                g->head = next;
            if (g->tail == w)
                g->tail = prev;
            w->next = out;
            out = w;
            ex->inflight--;
        } else {
            prev = w;
        }
        w = next;
    }
    return out;
}

/* ---- entries (ex->lock held) -------------------------------------------------------------- */

entry *ferry__exec_entry_find(ferry_executor *ex, const ferry_subscriber *sub, uint32_t *index)
{
    for (uint32_t i = 0; i < ex->nsubs; i++)
        if (ex->subs[i]->sub == sub) {
            if (index)
                *index = i;
            return ex->subs[i];
        }
    return NULL;
}

void ferry__exec_entry_put(entry *e, work *w)
{
    w->kept = false;
    w->next = e->free;
    e->free = w;
    e->nfree++;
}

void ferry__exec_entry_free(entry *e)
{
    *ferry__subscriber_waitset_slot(e->sub) = NULL;
    pthread_mutex_destroy(&e->mutex);
    free(e->items);
    free(e);
}

void ferry__exec_entry_settle(ferry_executor *ex, entry *e)
{
    if (!e->removing || e->running > 0 || e->taking)
        return;
    if (e->orphan)
        ferry__exec_entry_free(e);
    else
        pthread_cond_broadcast(&ex->done_cv);
}

void ferry__exec_release_unrun(ferry_executor *ex, entry *e, work *list)
{
    if (!list)
        return;
    pthread_mutex_lock(&e->mutex);
    while (list) {
        work *w = list;
        list = w->next;
        if (ferry_release(e->sub, &w->sample) == FERRY_OK)
            ex->stats.samples_released++;
        ferry__exec_entry_put(e, w);
    }
    pthread_mutex_unlock(&e->mutex);
}

/* ---- running one item (ex->lock held on entry and on return) ------------------------------ */

void ferry__exec_run_work(ferry_executor *ex, work *w)
{
    ferry_callback_group *g = w->group;
    entry *e = w->entry;
    timer *t = w->timer;
    if (e)
        e->running++;
    else
        t->running = true;
    ex->stats.running++;
    if (ex->stats.running > ex->stats.max_concurrency)
        ex->stats.max_concurrency = ex->stats.running;
    pthread_mutex_unlock(&ex->lock);

    work *saved = ferry__exec_current;
    ferry__exec_current = w;
    if (e)
        e->fn(e->arg, e->sub, &w->sample);
    else
        t->fn(t->arg, w->when);
    ferry__exec_current = saved;
    bool released = false;
    if (e && !w->kept) {
        pthread_mutex_lock(&e->mutex);
        ferry_err err = ferry_release(e->sub, &w->sample);
        pthread_mutex_unlock(&e->mutex);
        released = err == FERRY_OK;
        if (!released)
            ferry__log(ex->node, FERRY_LOG_WARN, "executor: releasing a sample failed: %s",
                       ferry_strerror(err));
    }

    pthread_mutex_lock(&ex->lock);
    ex->stats.running--;
    g->running--;
    group_update(ex, g);
    if (e) {
        ex->stats.callbacks++;
        if (released)
            ex->stats.samples_released++;
        if (w->kept)
            e->kept++;
        ferry__exec_entry_put(e, w);
        e->running--;
        if (e->blocked && !e->removing) {
            e->blocked = false;
            e->pending = true;
            if (ex->threads)
                ferry__exec_wake_spinner(ex);
        }
        ferry__exec_entry_settle(ex, e);
    } else {
        ex->stats.timer_callbacks++;
        t->running = false;
        t->busy = false;
        if (t->removing) {
            if (t->orphan)
                free(t);
            else
                pthread_cond_broadcast(&ex->done_cv);
        }
    }
    if (--ex->inflight == 0)
        pthread_cond_broadcast(&ex->done_cv);
}

void *ferry__exec_worker_main(void *arg)
{
    ferry_executor *ex = arg;
    pthread_mutex_lock(&ex->lock);
    for (;;) {
        work *w = ferry__exec_next_work(ex);
        if (w) {
            ferry__exec_run_work(ex, w);
            continue;
        }
        if (ex->quit)
            break;
        pthread_cond_wait(&ex->work_cv, &ex->lock);
    }
    pthread_mutex_unlock(&ex->lock);
    return NULL;
}
