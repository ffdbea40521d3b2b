/* Bounded, adaptive spinning before a sleep (spin.h). */
#include "core/core.h"

#include <sched.h>

#define SPIN_MIN_NS 1000     /* below this a budget is 0 */
#define SPIN_PROBE_EVERY 32  /* waits between probes of a budget that ran down */
#define SPIN_CLOCK_EVERY 16  /* polls between looks at the clock */

bool ferry__spin_valid(int64_t option_ns)
{
    return option_ns == FERRY_SPIN_OFF || (option_ns >= 0 && option_ns <= FERRY__SPIN_MAX_NS);
}

void ferry__spin_init(ferry__spin *s, int64_t option_ns)
{
    int64_t max = option_ns;
    bool one_cpu = false;
    if (max == 0) {
        one_cpu = ferry__cpus_allowed() <= 1;
        max = one_cpu ? 0 : FERRY_SPIN_DEFAULT_NS;
    } else if (max < 0) {
        max = 0;
    }
    *s = (ferry__spin){.max = max, .cur = max, .yield = one_cpu};
}

/* One CPU: lets a runnable peer run before we sleep (spin.h). */
static bool yield_until(ferry__spin *s, bool (*ready)(void *), void *arg)
{
    if (s->yield_off) {
        if (++s->idle < SPIN_PROBE_EVERY)
            return false;
        s->idle = 0;
        s->yield_off = false;
    }
    s->spins++;
    sched_yield();
    if (ready(arg)) {
        s->found++;
        return true;
    }
    s->yield_off = true;
    return false;
}

bool ferry__spin_until(ferry__spin *s, bool (*ready)(void *), void *arg, int64_t deadline)
{
    if (s->max == 0)
        return s->yield && ferry__remaining(deadline) != 0 && yield_until(s, ready, arg);
    if (s->cur == 0) {
        if (s->max == 0 || ++s->idle < SPIN_PROBE_EVERY)
            return false;
        s->idle = 0;
        s->cur = s->max;
    }
    s->spins++;
    int64_t start = ferry__clock_ns();
    int64_t end = start + s->cur;
    if (deadline < end)
        end = deadline;
    for (unsigned i = 1;; i++) {
        if (ready(arg)) {
            s->found++;
            s->cur = s->max;
            return true;
        }
        ferry__cpu_relax();
        if (i % SPIN_CLOCK_EVERY == 0 && ferry__clock_ns() >= end)
            break;
    }
    s->cur /= 2;
    if (s->cur < SPIN_MIN_NS)
        s->cur = 0;
    return false;
}
