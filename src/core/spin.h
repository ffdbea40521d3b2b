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
 * Where spinning can help is decided by where the waiting thread and its peers may run: when it
 * may run on one CPU only and so may every peer it waits for, on that same CPU, spinning cannot
 * help (the peer cannot run while we spin), but giving the CPU away can: the default budget
 * there is one sched_yield before the sleep. A peer that floods runs until its queue is full or
 * empty instead of answering each message through the kernel; a yield that found nothing stops
 * the yielding as a spin that found nothing stops the spinning, with the same probe every 32nd
 * wait. Where either may run on another CPU (each pinned to a core of its own, say), the default
 * spins. FERRY_SPIN_OFF neither spins nor yields.
 *
 * Each side writes the one CPU its thread may run on into every connection segment it shares
 * (ferry__spin_word) and reads its peers' there; both look again every FERRY__SPIN_LOOK_NS from
 * their housekeeping (ferry__spin_look), so a thread pinned after it made its endpoints is seen
 * within that time. A peer's word is a hint: one that lies costs at most a budget that halves at
 * each spin that finds nothing.
 */
#ifndef FERRY_SPIN_H
#define FERRY_SPIN_H

#include <stdbool.h>
#include <stdint.h>

#include <ferry/ferry.h>

#define FERRY__SPIN_MAX_NS 10000000LL /* the largest budget an option may ask for */

#define FERRY__SPIN_LOOK_NS 100000000LL /* how often the CPUs are looked at again */
/* A side's word in a connection segment: 1 + the one CPU it may run on; FERRY__SPIN_SEVERAL
 * when it may run on more than one; 0 when it has not said (a peer of an older ferry). */
#define FERRY__SPIN_SEVERAL 0xffffffffu

typedef struct ferry__spin {
    int64_t budget;        /* a full spin where spinning can help; 0: never spin (FERRY_SPIN_OFF) */
    bool by_cpus;          /* the option was 0: where the endpoint and its peers run decides */
    int64_t max;           /* the budget now; 0: never spin */
    int64_t cur;           /* what the next wait spins */
    bool yield;            /* max is 0 because spinning cannot help: yield once instead */
    bool yield_off;        /* the last yield found nothing: none until the next probe */
    uint32_t idle;         /* waits since the budget ran down to 0 */
    uint64_t spins, found; /* spins made and spins that found what they waited for */
    int32_t cpu; /* the one CPU this thread may run on, -1: several (as of the last look) */
    uint32_t elsewhere, same; /* peers that may run elsewhere, and on cpu only */
    int64_t next_look;
} ferry__spin;

/*
 * Paced streams (a 30 Hz camera): the adaptive budget soon stops spinning there, and every frame
 * then costs the subscriber a wake-up from sleep, which is the whole of its latency where its
 * CPU idles between frames (a pinned core: 80-180 us here, against 2-6 us for a reader that is
 * already awake). A subscriber whose samples have come at a steady period for a few frames
 * sleeps until a little before the next one is due and spins across its arrival instead
 * (ferry_wait). How early is learned: twice how late a timed sleep has woken, plus a margin.
 * Where spinning cannot help (it and its peers on one CPU) or is off, nothing changes. What it
 * costs is bounded: at most FERRY__PACE_SPIN_MAX_NS past the time the frame was due, and at most
 * 1/32 of the wall time in all (a publisher that keeps a steady period and then stops, or lies
 * about nothing it could: arrival times are this side's own clock).
 */
#define FERRY__PACE_STEADY 4            /* intervals within tolerance before it anticipates */
#define FERRY__PACE_MIN_NS 250000LL     /* periods shorter than this: the budget handles them */
#define FERRY__PACE_MAX_NS 1000000000LL /* longer: not a stream worth a spin */
#define FERRY__PACE_SPIN_MAX_NS ((int64_t)FERRY_PACE_SPIN_MAX_NS) /* the longest spin past due */
#define FERRY__PACE_LEAD_MAX_NS 500000LL                          /* the earliest wake before it */

typedef struct ferry__pace {
    int64_t last;          /* when the last sample was seen arriving; 0: none yet */
    int64_t period;        /* the intervals' moving average */
    int64_t dev;           /* how far they stray from it (moving average of the difference) */
    uint32_t steady;       /* intervals in a row within tolerance of it */
    int64_t late;          /* how late timed sleeps woke (moving average) */
    int64_t second, spent; /* the one-second window and the spin spent in it */
    uint64_t spins, found; /* anticipations, and those that caught their sample spinning */
} ferry__pace;

/* A sample arrived at now (found by a wait, not already queued). */
void ferry__pace_arrived(ferry__pace *p, int64_t now);
/* When to be awake for the next sample; 0 when it is not anticipated (not steady, not due within
 * a period, or the time budget of this second is spent). */
int64_t ferry__pace_wake_at(ferry__pace *p, int64_t now);
/* After the timed sleep ended at now (it had asked to wake at wake_at): the deadline of the
 * spin across the sample's arrival. */
int64_t ferry__pace_spin_until(ferry__pace *p, int64_t wake_at, int64_t now);
/* The spin ran from start to end; found: it caught the sample. */
void ferry__pace_spent(ferry__pace *p, int64_t start, int64_t end, bool found);

/* True when an option's spin_ns is one ferry__spin_init takes. */
bool ferry__spin_valid(int64_t option_ns);
/* Resolves the option (0: FERRY_SPIN_DEFAULT_NS where spinning can help, else one yield;
 * FERRY_SPIN_OFF: off) for this thread's CPUs and no peer yet. */
void ferry__spin_init(ferry__spin *s, int64_t option_ns);
/* True when the CPUs are due to be looked at again (every FERRY__SPIN_LOOK_NS); then reads this
 * thread's CPUs into s->cpu and starts a new count of peers. The caller then gives every peer's
 * word to ferry__spin_peer and ends with ferry__spin_decide. */
bool ferry__spin_look(ferry__spin *s, int64_t now);
/* This side's word for the connection segments (as of the last look). */
uint32_t ferry__spin_word(const ferry__spin *s);
/* Counts a peer by the word it wrote. Any value is safe: it only counts. */
void ferry__spin_peer(ferry__spin *s, uint32_t word);
/* Sets the budget from this thread's CPUs and the peers counted. */
void ferry__spin_decide(ferry__spin *s);
/* The public view of s (mode POLL is the caller's). */
void ferry__spin_stats(const ferry__spin *s, ferry_spin_stats *out);
/* Polls ready(arg) until it is true, the budget is spent or deadline (ferry__deadline's) passes,
 * then adapts the budget. True when ready(arg) was. */
bool ferry__spin_until(ferry__spin *s, bool (*ready)(void *), void *arg, int64_t deadline);

#endif
