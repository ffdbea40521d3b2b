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
 */
#include "core/module.h"

#include <ferry/exec.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXEC_MAGIC 0x4345584559525246ULL  /* "FRRYEXEC" */
#define GROUP_MAGIC 0x5052474559525246ULL /* "FRRYGRP" */
#define DEFAULT_BATCH 8u
#define WAKE_TAG 0u
#define EVENTS 32

typedef struct entry entry;
typedef struct timer timer;

typedef struct work {
    struct work *next;
    entry *entry; /* a sample's work, or NULL */
    timer *timer; /* a timer's work, or NULL */
    ferry_executor *ex;
    ferry_callback_group *group;
    ferry_sample sample;
    ferry_time when;
    bool kept;
} work;

struct ferry_callback_group {
    uint64_t magic;
    ferry_executor *ex;
    ferry_group_kind kind;
    work *head, *tail;   /* queued, in take order */
    uint32_t running;
    bool listed;         /* on the runnable list */
    ferry_callback_group *next_runnable;
    ferry_callback_group *next; /* every group of the executor */
};

struct entry {
    ferry_subscriber *sub;
    ferry_callback_group *group;
    ferry_sample_fn fn;
    void *arg;
    uint64_t tag; /* poller tag; never reused, so a stale event finds nothing */
    int fd;
    pthread_mutex_t mutex; /* serialises take and release on sub */
    work *items;
    work *free;
    uint32_t nfree;
    uint32_t running;
    uint32_t kept;
    bool pending;  /* may have samples queued: take next round */
    bool blocked;  /* no item free or max_held reached: take again after a release */
    bool taking;   /* spin's thread is taking from it without ex->lock */
    bool removing; /* removed; freed when its last callback and take are over */
    bool orphan;   /* removed by its own callback: the last one out frees it */
};

struct timer {
    uint32_t id;
    int64_t period;
    int64_t next;
    ferry_callback_group *group;
    ferry_timer_fn fn;
    void *arg;
    work item;
    bool busy; /* item queued or running */
    bool running;
    bool removing;
    bool orphan;
};

struct ferry_executor {
    ferry__obj obj; /* first: the node frees buried objects with free() */
    ferry_node *node;
    uint32_t threads;
    uint32_t max_batch;
    pthread_mutex_t lock;
    pthread_cond_t work_cv; /* workers: a group became runnable, or quit */
    pthread_cond_t done_cv; /* a callback finished, a take ended, inflight reached 0 */
    int epfd;
    int wake_fd;
    _Atomic int stop;
    bool spinning;
    bool quit;
    entry **subs;
    uint32_t nsubs, subs_cap;
    timer **timers;
    uint32_t ntimers, timers_cap;
    uint32_t next_timer_id;
    uint64_t next_tag;
    ferry_callback_group *groups;
    ferry_callback_group *default_group;
    ferry_callback_group *run_head, *run_tail;
    uint32_t inflight; /* items queued or running */
    ferry_executor_stats stats;
    pthread_t *workers;
    uint32_t nworkers;
};

/* The item whose callback this thread is running (NULL outside callbacks); saved and restored
 * around each call so that nested executors work. */
static _Thread_local work *current;

static ferry_err check(const ferry_executor *ex)
{
    if (!ex)
        return FERRY_EINVAL;
    if (ex->obj.magic == FERRY__DEAD_MAGIC)
        return FERRY_ECLOSED;
    return ex->obj.magic == EXEC_MAGIC ? FERRY_OK : FERRY_EINVAL;
}

static void wake_spinner(ferry_executor *ex)
{
    ferry__notifier_signal(ex->wake_fd);
}

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

static void group_push(ferry_executor *ex, ferry_callback_group *g, work *w)
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

/* The next item a worker may start, marked running in its group; NULL when none. */
static work *next_work(ferry_executor *ex)
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

/* Unlinks the queued items of entry e (or of timer t) from group g; returns them as a list. */
static work *group_purge(ferry_executor *ex, ferry_callback_group *g, const entry *e,
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

static entry *entry_find(ferry_executor *ex, const ferry_subscriber *sub, uint32_t *index)
{
    for (uint32_t i = 0; i < ex->nsubs; i++)
        if (ex->subs[i]->sub == sub) {
            if (index)
                *index = i;
            return ex->subs[i];
        }
    return NULL;
}

static void entry_put(entry *e, work *w)
{
    w->kept = false;
    w->next = e->free;
    e->free = w;
    e->nfree++;
}

static void entry_free(entry *e)
{
    *ferry__subscriber_waitset_slot(e->sub) = NULL;
    pthread_mutex_destroy(&e->mutex);
    free(e->items);
    free(e);
}

/* Frees a removed entry once nothing uses it; wakes a remover that waits for that. */
static void entry_settle(ferry_executor *ex, entry *e)
{
    if (!e->removing || e->running > 0 || e->taking)
        return;
    if (e->orphan)
        entry_free(e);
    else
        pthread_cond_broadcast(&ex->done_cv);
}

/* Releases taken samples that will not reach their callback (their entry is being removed). */
static void release_unrun(ferry_executor *ex, entry *e, work *list)
{
    if (!list)
        return;
    pthread_mutex_lock(&e->mutex);
    while (list) {
        work *w = list;
        list = w->next;
        if (ferry_release(e->sub, &w->sample) == FERRY_OK)
            ex->stats.samples_released++;
        entry_put(e, w);
    }
    pthread_mutex_unlock(&e->mutex);
}

/* ---- running one item (ex->lock held on entry and on return) ------------------------------ */

static void run_work(ferry_executor *ex, work *w)
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

    work *saved = current;
    current = w;
    if (e)
        e->fn(e->arg, e->sub, &w->sample);
    else
        t->fn(t->arg, w->when);
    current = saved;
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
        entry_put(e, w);
        e->running--;
        if (e->blocked && !e->removing) {
            e->blocked = false;
            e->pending = true;
            if (ex->threads)
                wake_spinner(ex);
        }
        entry_settle(ex, e);
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

static void *worker_main(void *arg)
{
    ferry_executor *ex = arg;
    pthread_mutex_lock(&ex->lock);
    for (;;) {
        work *w = next_work(ex);
        if (w) {
            run_work(ex, w);
            continue;
        }
        if (ex->quit)
            break;
        pthread_cond_wait(&ex->work_cv, &ex->lock);
    }
    pthread_mutex_unlock(&ex->lock);
    return NULL;
}

/* ---- create / destroy --------------------------------------------------------------------- */

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
        entry_free(ex->subs[i]);
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
        int rc = pthread_create(&ex->workers[i], NULL, worker_main, ex);
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
    ferry_err err = check(ex);
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

static ferry_err group_check(ferry_executor *ex, ferry_callback_group **g)
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
    ferry_err err = check(ex);
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

/* ---- subscribers and timers --------------------------------------------------------------- */

ferry_err ferry_executor_add_subscriber(ferry_executor *ex, ferry_subscriber *sub,
                                        ferry_callback_group *g, ferry_sample_fn fn,
                                        void *arg)
{
    ferry_err err = check(ex);
    if (err)
        return err;
    if (!sub || !fn)
        return FERRY_EINVAL;
    if ((err = ferry__subscriber_check(sub)))
        return err;
    if ((err = group_check(ex, &g)))
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
        entry_put(e, &items[i]);
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
            wake_spinner(ex);
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
    ferry_err err = check(ex);
    if (err)
        return err;
    if (!sub)
        return FERRY_EINVAL;
    pthread_mutex_lock(&ex->lock);
    uint32_t index;
    entry *e = entry_find(ex, sub, &index);
    if (!e) {
        pthread_mutex_unlock(&ex->lock);
        return FERRY_ESTATE;
    }
    ex->subs[index] = ex->subs[--ex->nsubs];
    ferry__poller_del(ex->epfd, e->fd);
    e->removing = true;
    release_unrun(ex, e, group_purge(ex, e->group, e, NULL));
    if (ex->inflight == 0)
        pthread_cond_broadcast(&ex->done_cv);
    if (current && current->entry == e) {
        /* From one of its own callbacks: waiting would wait for ourselves. */
        e->orphan = true;
    } else {
        while (e->running > 0 || e->taking)
            pthread_cond_wait(&ex->done_cv, &ex->lock);
        entry_free(e);
    }
    pthread_mutex_unlock(&ex->lock);
    return FERRY_OK;
}

ferry_err ferry_executor_add_timer(ferry_executor *ex, int64_t period_ns, ferry_callback_group *g,
                                   ferry_timer_fn fn, void *arg, uint32_t *timer_id)
{
    ferry_err err = check(ex);
    if (err)
        return err;
    if (!fn || period_ns <= 0)
        return FERRY_EINVAL;
    if ((err = group_check(ex, &g)))
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
        wake_spinner(ex);
    pthread_mutex_unlock(&ex->lock);
    if (timer_id)
        *timer_id = t->id;
    return FERRY_OK;
}

ferry_err ferry_executor_remove_timer(ferry_executor *ex, uint32_t timer_id)
{
    ferry_err err = check(ex);
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
    if (group_purge(ex, t->group, NULL, t)) {
        t->busy = false;
        if (ex->inflight == 0)
            pthread_cond_broadcast(&ex->done_cv);
    }
    if (t->running && current == &t->item) {
        t->orphan = true;
    } else {
        while (t->running)
            pthread_cond_wait(&ex->done_cv, &ex->lock);
        free(t);
    }
    pthread_mutex_unlock(&ex->lock);
    return FERRY_OK;
}

/* ---- spinning ----------------------------------------------------------------------------- */

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
                entry_put(e, w);
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
            release_unrun(ex, e, ordered);
            entry_settle(ex, e);
            continue;
        }
        while (ordered) {
            work *w = ordered;
            ordered = w->next;
            group_push(ex, e->group, w);
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
                group_push(ex, t->group, &t->item);
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
    ferry_err err = check(ex);
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
            while ((w = next_work(ex)))
                run_work(ex, w);
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
    ferry_err err = check(ex);
    if (err)
        return err;
    int saved = errno;
    /* Release: whoever sees the flag also sees what the stopping thread did before. */
    atomic_store_explicit(&ex->stop, 1, memory_order_release);
    ferry__notifier_signal(ex->wake_fd);
    errno = saved;
    return FERRY_OK;
}

/* ---- keeping samples ---------------------------------------------------------------------- */

ferry_err ferry_executor_keep(ferry_executor *ex, const ferry_sample *sample, ferry_sample *kept)
{
    ferry_err err = check(ex);
    if (err)
        return err;
    if (!sample || !kept)
        return FERRY_EINVAL;
    work *w = current;
    if (!w || w->ex != ex || !w->entry || &w->sample != sample || w->kept)
        return FERRY_ESTATE;
    /* Only this thread touches w until its callback returns. */
    w->kept = true;
    *kept = *sample;
    return FERRY_OK;
}

ferry_err ferry_executor_release(ferry_executor *ex, ferry_sample *kept)
{
    ferry_err err = check(ex);
    if (err)
        return err;
    if (!kept)
        return FERRY_EINVAL;
    if (!kept->data)
        return FERRY_ESTATE; /* ferry_release cleared it */
    pthread_mutex_lock(&ex->lock);
    err = FERRY_EFOREIGN;
    for (uint32_t i = 0; i < ex->nsubs && err == FERRY_EFOREIGN; i++) {
        entry *e = ex->subs[i];
        /* A sample taken by another subscriber is refused with FERRY_EFOREIGN untouched. */
        pthread_mutex_lock(&e->mutex);
        err = ferry_release(e->sub, kept);
        pthread_mutex_unlock(&e->mutex);
        if (err == FERRY_OK) {
            ex->stats.samples_released++;
            if (e->kept)
                e->kept--;
            if (e->blocked) {
                e->blocked = false;
                e->pending = true;
                if (ex->spinning)
                    wake_spinner(ex);
            }
        }
    }
    pthread_mutex_unlock(&ex->lock);
    return err;
}

ferry_err ferry_executor_stats_get(ferry_executor *ex, ferry_executor_stats *out)
{
    ferry_err err = check(ex);
    if (err)
        return err;
    if (!out)
        return FERRY_EINVAL;
    pthread_mutex_lock(&ex->lock);
    *out = ex->stats;
    pthread_mutex_unlock(&ex->lock);
    return FERRY_OK;
}
