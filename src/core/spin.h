/*
 * Bounded, adaptive spinning before a sleep (spin.c): the waits of ferry_wait, of a blocking
 * ferry_loan and of ferry_publish for a blocking subscriber poll for what they wait for, for at
 * most a budget, before they sleep in the kernel. A peer that keeps up answers within a
 * microsecond; sleeping instead costs both sides a context switch and the peer a system call to
 * wake us.
 *
 * The budget adapts to the stream: a spin that found nothing halves it (below a microsecond it
 * is 0), one that found what it waited for restores it in full. A stream paced slower than the
 * budget (a 30 Hz camera) therefore stops spinning within a few frames, and every 32nd wait
 * probes with the full budget again in case the stream sped up.
 *
 * On one CPU spinning cannot help (the peer cannot run while we spin), but giving the CPU away
 * can: the default budget there is one sched_yield before the sleep. A peer that floods runs
 * until its queue is full or empty instead of answering each message through the kernel; a
 * yield that found nothing stops the yielding as a spin that found nothing stops the spinning,
 * with the same probe every 32nd wait. FERRY_SPIN_OFF neither spins nor yields.
 */
#ifndef FERRY_SPIN_H
#define FERRY_SPIN_H

#include <stdbool.h>
#include <stdint.h>

#define FERRY__SPIN_MAX_NS 10000000LL /* the largest budget an option may ask for */

typedef struct ferry__spin {
    int64_t max;   /* the budget resolved from the option; 0: never spin */
    int64_t cur;   /* what the next wait spins */
    bool yield;    /* max is 0 by default on one CPU: yield once instead */
    bool yield_off; /* the last yield found nothing: none until the next probe */
    uint32_t idle; /* waits since the budget ran down to 0 */
    uint64_t spins, found; /* spins made and spins that found what they waited for */
} ferry__spin;

/* True when an option's spin_ns is one ferry__spin_init takes. */
bool ferry__spin_valid(int64_t option_ns);
/* Resolves the option (0: FERRY_SPIN_DEFAULT_NS where the caller may run on two CPUs or more,
 * else one yield; FERRY_SPIN_OFF: off). */
void ferry__spin_init(ferry__spin *s, int64_t option_ns);
/* Polls ready(arg) until it is true, the budget is spent or deadline (ferry__deadline's) passes,
 * then adapts the budget. True when ready(arg) was. */
bool ferry__spin_until(ferry__spin *s, bool (*ready)(void *), void *arg, int64_t deadline);

#endif
