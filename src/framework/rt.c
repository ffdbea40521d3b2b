/*
 * Real-time controls (rt.h): the policy and the messages; the system calls are the platform's.
 * Every refusal says what was refused and what would permit it, because the usual cause is a
 * missing capability or limit in a container or service file, not a bug.
 */
#include "core/module.h"

#include <ferry/rt.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define STACK_MARGIN ((size_t)64 << 10) /* left untouched below a stack prefault */

static const char *errno_name(int e)
{
    switch (e) {
    case EPERM:
        return "EPERM";
    case ENOMEM:
        return "ENOMEM";
    case EINVAL:
        return "EINVAL";
    case ESRCH:
        return "ESRCH";
    case EAGAIN:
        return "EAGAIN";
    default:
        return strerror(e);
    }
}

static void say(ferry_rt_report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(ferry_rt_report *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->message, sizeof r->message, fmt, ap);
    va_end(ap);
}

static ferry_err fail(ferry_rt_report *r, ferry_err err, int e)
{
    r->failed_errno = e;
    errno = e;
    return err;
}

/* "unlimited" or the number. */
static const char *limit_text(uint64_t v, char *buf, size_t cap)
{
    if (v == UINT64_MAX)
        snprintf(buf, cap, "unlimited");
    else
        snprintf(buf, cap, "%llu", (unsigned long long)v);
    return buf;
}

void ferry_rt_options_init(ferry_rt_options *o)
{
    if (o)
        memset(o, 0, sizeof *o);
}

static ferry_err check_options(const ferry_rt_options *o, ferry_rt_report *r)
{
    if (o->ncpus > 0 && !o->cpus) {
        say(r, "ncpus is %zu but cpus is NULL", o->ncpus);
        return fail(r, FERRY_EINVAL, EINVAL);
    }
    for (size_t i = 0; i < o->ncpus; i++) {
        int online = ferry__cpu_online(o->cpus[i]);
        if (online != 1) {
            uint32_t n = 0;
            ferry__cpu_count(&n);
            say(r, "CPU %d is not online (this machine has %u online CPUs)", o->cpus[i], n);
            return fail(r, FERRY_EINVAL, EINVAL);
        }
    }
    int max = ferry__fifo_priority_max();
    if (o->fifo_priority < 0 || o->fifo_priority > 99 || (max > 0 && o->fifo_priority > max)) {
        say(r, "SCHED_FIFO priority %d out of range: 1..%d, or 0 to leave the policy",
            o->fifo_priority, max > 0 ? max : 99);
        return fail(r, FERRY_EINVAL, EINVAL);
    }
    if (o->prefault_stack_bytes > 0) {
        size_t room = 0;
        if (ferry__stack_size(&room) != 0) {
            say(r, "cannot find the calling thread's stack: %s", strerror(errno));
            return fail(r, FERRY_ESYS, errno);
        }
        if (o->prefault_stack_bytes > room || room - o->prefault_stack_bytes < STACK_MARGIN) {
            say(r,
                "stack prefault of %zu bytes does not fit: %zu bytes are left on this "
                "thread's stack, of which %zu must stay free",
                o->prefault_stack_bytes, room, STACK_MARGIN);
            return fail(r, FERRY_EINVAL, EINVAL);
        }
    }
    return FERRY_OK;
}

static ferry_err pin(const ferry_rt_options *o, ferry_rt_report *r)
{
    int e = ferry__thread_pin(o->cpus, o->ncpus);
    if (e == 0) {
        r->pinned = true;
        return FERRY_OK;
    }
    if (e == EINVAL) {
        say(r, "affinity refused: EINVAL; none of the CPUs asked for is allowed to this thread "
               "(its cpuset or container limits it)");
        return fail(r, FERRY_EINVAL, e);
    }
    if (e == EPERM) {
        say(r, "affinity refused: EPERM; needs CAP_SYS_NICE");
        return fail(r, FERRY_EPERM, e);
    }
    say(r, "affinity refused: %s", errno_name(e));
    return fail(r, FERRY_ESYS, e);
}

static ferry_err fifo(const ferry_rt_options *o, ferry_rt_report *r)
{
    int e = ferry__thread_fifo(o->fifo_priority);
    if (e == 0) {
        r->fifo = true;
        return FERRY_OK;
    }
    if (e == EPERM) {
        uint64_t lim = 0;
        char buf[32] = "unknown";
        if (ferry__rlimit('r', &lim) == 0)
            limit_text(lim, buf, sizeof buf);
        say(r,
            "SCHED_FIFO priority %d refused: EPERM; needs CAP_SYS_NICE or an RLIMIT_RTPRIO "
            ">= %d (ulimit -r), which is %s%s",
            o->fifo_priority, o->fifo_priority, buf,
            lim >= (uint64_t)o->fifo_priority
                ? "; the cgroup may have no real-time budget (cpu.rt_runtime_us)"
                : "");
        return fail(r, FERRY_EPERM, e);
    }
    say(r, "SCHED_FIFO priority %d refused: %s", o->fifo_priority, errno_name(e));
    return fail(r, e == EINVAL ? FERRY_EINVAL : FERRY_ESYS, e);
}

static ferry_err lock(ferry_rt_report *r)
{
    int e = ferry__lock_memory();
    if (e == 0) {
        r->locked = true;
        return FERRY_OK;
    }
    if (e == ENOMEM || e == EPERM) {
        uint64_t lim = 0, vm = 0;
        char buf[32] = "unknown";
        if (ferry__rlimit('l', &lim) == 0)
            limit_text(lim, buf, sizeof buf);
        ferry__vm_size(&vm);
        say(r,
            "memory lock refused: %s; needs CAP_IPC_LOCK or an RLIMIT_MEMLOCK (ulimit -l) "
            "covering the whole address space, now %llu KiB and growing with every segment "
            "mapped; it is %s bytes",
            errno_name(e), (unsigned long long)(vm >> 10), buf);
        return fail(r, FERRY_EPERM, e);
    }
    if (e == EINVAL) {
        say(r, "memory lock refused: EINVAL; the kernel lacks MCL_ONFAULT (Linux 4.4)");
        return fail(r, FERRY_ENOTSUP, e);
    }
    say(r, "memory lock refused: %s", errno_name(e));
    return fail(r, FERRY_ESYS, e);
}

ferry_err ferry_rt_apply(const ferry_rt_options *o, ferry_rt_report *report)
{
    ferry_rt_report local;
    ferry_rt_report *r = report ? report : &local;
    memset(r, 0, sizeof *r);
    if (!o) {
        say(r, "no options");
        return fail(r, FERRY_EINVAL, EINVAL);
    }
    ferry_err err = check_options(o, r);
    if (err)
        return err;
    if (o->ncpus > 0 && (err = pin(o, r)))
        return err;
    if (o->fifo_priority > 0 && (err = fifo(o, r)))
        return err;
    if (o->lock_memory && (err = lock(r)))
        return err;
    /* After the lock: the pages touched now stay. */
    ferry__prefault_stack(o->prefault_stack_bytes);
    if (o->prefault_heap_bytes > 0 && ferry__prefault_heap(o->prefault_heap_bytes) != 0) {
        say(r, "heap prefault of %zu bytes: %s", o->prefault_heap_bytes, errno_name(ENOMEM));
        return fail(r, FERRY_ENOMEM, ENOMEM);
    }
    r->prefaulted = o->prefault_stack_bytes > 0 || o->prefault_heap_bytes > 0;
    say(r, "applied:%s%s%s%s%s", r->pinned ? " pinned" : "", r->fifo ? " SCHED_FIFO" : "",
        r->locked ? " memory locked" : "", r->prefaulted ? " prefaulted" : "",
        r->pinned || r->fifo || r->locked || r->prefaulted ? "" : " nothing asked for");
    return FERRY_OK;
}

ferry_err ferry_rt_page_faults(uint64_t *minor, uint64_t *major)
{
    return ferry__page_faults(minor, major) == 0 ? FERRY_OK : FERRY_ESYS;
}

ferry_err ferry_rt_cpu_count(uint32_t *count)
{
    if (!count)
        return FERRY_EINVAL;
    return ferry__cpu_count(count) == 0 ? FERRY_OK : FERRY_ESYS;
}
