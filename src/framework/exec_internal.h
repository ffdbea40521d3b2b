/*
 * What the executor's files share (exec.c, exec_work.c, exec_add.c, exec_spin.c, exec_keep.c):
 * the executor, its callback groups, subscriber entries, timers and work items, and the helpers
 * one part calls in another. Private to src/framework/. The rules are exec.c's: ex->lock guards
 * everything mutable, each entry's mutex serialises take and release on its subscriber, ex->lock
 * is taken before an entry's mutex, and callbacks run with no lock held.
 */
#ifndef FERRY_FRAMEWORK_EXEC_INTERNAL_H
#define FERRY_FRAMEWORK_EXEC_INTERNAL_H

#include "core/module.h"

#include <ferry/exec.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXEC_MAGIC 0x4345584559525246ULL /* "FRRYEXEC" */
#define WAKE_TAG 0u

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
    work *head, *tail; /* queued, in take order */
    uint32_t running;
    bool listed; /* on the runnable list */
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
extern _Thread_local work *ferry__exec_current;

static inline ferry_err ferry__exec_check(const ferry_executor *ex)
{
    if (!ex)
        return FERRY_EINVAL;
    if (ex->obj.magic == FERRY__DEAD_MAGIC)
        return FERRY_ECLOSED;
    return ex->obj.magic == EXEC_MAGIC ? FERRY_OK : FERRY_EINVAL;
}

static inline void ferry__exec_wake_spinner(ferry_executor *ex)
{
    ferry__notifier_signal(ex->wake_fd);
}

/* ---- groups, entries, running one item (exec_work.c; ex->lock held) -------------------------- */

/* Queues w at the back of group g, which goes on the runnable list when it may start it. */
void ferry__exec_group_push(ferry_executor *ex, ferry_callback_group *g, work *w);

/* The next item a worker may start, marked running in its group; NULL when none. */
work *ferry__exec_next_work(ferry_executor *ex);

/* Unlinks the queued items of entry e (or of timer t) from group g; returns them as a list. */
work *ferry__exec_group_purge(ferry_executor *ex, ferry_callback_group *g, const entry *e,
                              const timer *t);

/* The entry of sub, and its index in ex->subs; NULL when sub was not added. */
entry *ferry__exec_entry_find(ferry_executor *ex, const ferry_subscriber *sub, uint32_t *index);

/* An item back on its entry's free list; an entry freed with its items. */
void ferry__exec_entry_put(entry *e, work *w);
void ferry__exec_entry_free(entry *e);

/* Frees a removed entry once nothing uses it; wakes a remover that waits for that. */
void ferry__exec_entry_settle(ferry_executor *ex, entry *e);

/* Releases taken samples that will not reach their callback (their entry is being removed). */
void ferry__exec_release_unrun(ferry_executor *ex, entry *e, work *list);

/* ex->lock held on entry and on return, dropped while the callback runs. */
void ferry__exec_run_work(ferry_executor *ex, work *w);

/* A worker thread: runs items until the executor quits. */
void *ferry__exec_worker_main(void *arg);

/* ---- create / destroy (exec.c) --------------------------------------------------------------- */

/* *g, or the default group when *g is NULL; FERRY_EINVAL for a group of another executor. */
ferry_err ferry__exec_group_check(ferry_executor *ex, ferry_callback_group **g);

#endif
