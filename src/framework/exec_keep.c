/* Samples kept past their callback: ferry_executor_keep from inside the callback (only that
 * thread touches the item until the callback returns), ferry_executor_release from any thread,
 * under ex->lock and each entry's mutex in turn; and the executor's counters. */
#include "framework/exec_internal.h"

ferry_err ferry_executor_keep(ferry_executor *ex, const ferry_sample *sample, ferry_sample *kept)
{
    ferry_err err = ferry__exec_check(ex);
    if (err)
        return err;
    if (!sample || !kept)
        return FERRY_EINVAL;
    work *w = ferry__exec_current;
    if (!w || w->ex != ex || !w->entry || &w->sample != sample || w->kept)
        return FERRY_ESTATE;
    /* Only this thread touches w until its callback returns. */
    w->kept = true;
    *kept = *sample;
    return FERRY_OK;
}

ferry_err ferry_executor_release(ferry_executor *ex, ferry_sample *kept)
{
    ferry_err err = ferry__exec_check(ex);
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
                    ferry__exec_wake_spinner(ex);
            }
        }
    }
    pthread_mutex_unlock(&ex->lock);
    return err;
}

ferry_err ferry_executor_stats_get(ferry_executor *ex, ferry_executor_stats *out)
{
    ferry_err err = ferry__exec_check(ex);
    if (err)
        return err;
    if (!out)
        return FERRY_EINVAL;
    pthread_mutex_lock(&ex->lock);
    *out = ex->stats;
    pthread_mutex_unlock(&ex->lock);
    return FERRY_OK;
}
