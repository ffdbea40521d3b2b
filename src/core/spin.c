/* Bounded, adaptive spinning before a sleep (spin.h). */
#include "core/core.h"

#include <sched.h>

#define SPIN_MIN_NS 1000    /* below this a budget is 0 */
#define SPIN_PROBE_EVERY 32 /* waits between probes of a budget that ran down */
#define SPIN_CLOCK_EVERY 16 /* polls between looks at the clock */

bool ferry__spin_valid(int64_t option_ns)
{
    return option_ns == FERRY_SPIN_OFF || (option_ns >= 0 && option_ns <= FERRY__SPIN_MAX_NS);
}

void ferry__spin_init(ferry__spin *s, int64_t option_ns)
{
    *s = (ferry__spin){
        .budget = option_ns == 0  ? FERRY_SPIN_DEFAULT_NS
                  : option_ns < 0 ? 0
                                  : option_ns,
        .by_cpus = option_ns == 0,
        .cpu = ferry__cpu_only(),
        .next_look = ferry__clock_ns() + FERRY__SPIN_LOOK_NS,
    };
    ferry__spin_decide(s);
}

bool ferry__spin_look(ferry__spin *s, int64_t now)
{
    if (now < s->next_look)
        return false;
    s->next_look = now + FERRY__SPIN_LOOK_NS;
    s->cpu = ferry__cpu_only();
    s->elsewhere = 0;
    s->same = 0;
    return true;
}

uint32_t ferry__spin_word(const ferry__spin *s)
{
    return s->cpu < 0 ? FERRY__SPIN_SEVERAL : (uint32_t)s->cpu + 1;
}

void ferry__spin_peer(ferry__spin *s, uint32_t word)
{
    if (word == 0)
        return; /* has not said */
    if (s->cpu >= 0 && word == (uint32_t)s->cpu + 1)
        s->same++;
    else
        s->elsewhere++;
}

void ferry__spin_decide(ferry__spin *s)
{
    bool spin = s->budget > 0 && (!s->by_cpus || s->cpu < 0 || s->elsewhere > 0);
    int64_t max = spin ? s->budget : 0;
    if (max != s->max) {
        s->max = max;
        s->cur = max;
        s->idle = 0;
    }
    s->yield = !spin && s->by_cpus;
}

void ferry__spin_stats(const ferry__spin *s, ferry_spin_stats *out)
{
    *out = (ferry_spin_stats){
        .mode = s->max > 0 ? FERRY_SPIN_MODE_SPIN
                : s->yield ? FERRY_SPIN_MODE_YIELD
                           : FERRY_SPIN_MODE_OFF,
        .cpu = s->cpu,
        .budget_ns = s->max,
        .peers_elsewhere = s->cpu >= 0 ? s->elsewhere : 0,
        .peers_same_cpu = s->cpu >= 0 ? s->same : 0,
        .spins = s->spins,
        .spins_found = s->found,
    };
}

/* It and its peers on one CPU: lets a runnable peer run before we sleep (spin.h). */
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

/* ---- paced streams (spin.h) ------------------------------------------------------------------ */

/* How far an interval may stray from the period and still count as steady. */
static int64_t pace_tolerance(int64_t period)
{
    int64_t t = period / 16;
    return t < 100000 ? 100000 : t;
}

void ferry__pace_arrived(ferry__pace *p, int64_t now)
{
    int64_t interval = now - p->last;
    if (p->last == 0 || interval < FERRY__PACE_MIN_NS || interval > FERRY__PACE_MAX_NS) {
        p->steady = 0;
        p->period = 0;
        p->dev = 0;
    } else if (p->period == 0) {
        p->period = interval;
    } else {
        int64_t off = interval - p->period;
        if (off < 0)
            off = -off;
        p->steady = off <= pace_tolerance(p->period) ? p->steady + 1 : 0;
        p->period += (interval - p->period) / 8;
        p->dev += (off - p->dev) / 8;
    }
    p->last = now;
}

int64_t ferry__pace_wake_at(ferry__pace *p, int64_t now)
{
    if (p->steady < FERRY__PACE_STEADY || p->period == 0)
        return 0;
    if (now - p->second >= 1000000000LL) {
        p->second = now;
        p->spent = 0;
    }
    if (p->spent >= 1000000000LL / 32)
        return 0;
    int64_t due = p->last + p->period;
    /* Early enough for a late wake-up and for a sample that comes as early as they stray. */
    int64_t lead = 2 * p->late + 2 * p->dev + 30000;
    if (lead > FERRY__PACE_LEAD_MAX_NS)
        lead = FERRY__PACE_LEAD_MAX_NS;
    int64_t at = due - lead;
    /* Due already, or not within a period (the stream paused): nothing to anticipate. */
    if (at <= now || due - now > p->period)
        return 0;
    return at;
}

int64_t ferry__pace_spin_until(ferry__pace *p, int64_t wake_at, int64_t now)
{
    int64_t late = now - wake_at;
    if (late < 0)
        late = 0;
    p->late += (late - p->late) / 4;
    int64_t after = p->period / 64;
    if (after < 50000)
        after = 50000;
    if (after > FERRY__PACE_SPIN_MAX_NS)
        after = FERRY__PACE_SPIN_MAX_NS;
    return p->last + p->period + after;
}

void ferry__pace_spent(ferry__pace *p, int64_t start, int64_t end, bool found)
{
    p->spins++;
    p->found += found;
    p->spent += end - start;
    if (!found)
        p->steady = 0; /* it did not come: learn the stream again before the next spin */
}
