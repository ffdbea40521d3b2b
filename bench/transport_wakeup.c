/*
 * The floor: a bare futex wake of a blocked process, no payload. The publisher stores the send
 * time and a sequence in a shared page and wakes the subscriber; no transport that wakes a
 * sleeping reader can be faster. Flat out, stores coalesce: the subscriber sees the newest one.
 * There is no frame: the buffer the driver fills is the header alone, whatever the payload.
 *
 * Variant "spin" (the spin-floor row): the subscriber never sleeps but spins on the page, so the
 * publisher never wakes it: the floor of a polling reader on this machine (one cache line moving
 * between CPUs, and the publisher's own cold start after its pause).
 */
#include "bench.h"
#include "platform/platform.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

typedef struct wake_shared {
    _Atomic uint64_t gen; /* odd while the fields below are being written */
    _Atomic uint64_t seq;
    _Atomic int64_t send_ns;
    _Atomic uint32_t flags;
    _Atomic uint32_t bell; /* futex word, bumped after each store */
    _Atomic uint32_t waiting;
} wake_shared;

typedef struct wake_state {
    wake_shared *sh;
    bool spin;      /* variant "spin": the subscriber polls and never sleeps */
    uint64_t last;  /* subscriber: the last sequence seen */
    bench_wire own; /* the header the publisher fills, or the subscriber's copy of the fields */
} wake_state;

static int wake_prepare(void **state, const bench_params *p)
{
    const char *v = p->variant ? p->variant : "";
    if (v[0] && strcmp(v, "spin") != 0) {
        fprintf(stderr, "ferry bench: wakeup-floor: unknown variant '%s'\n", v);
        return -1;
    }
    wake_state *s = calloc(1, sizeof *s);
    if (!s)
        return -1;
    s->spin = v[0] != 0;
    void *map = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) {
        fprintf(stderr, "ferry bench: mmap: %s\n", strerror(errno));
        free(s);
        return -1;
    }
    s->sh = map;
    atomic_init(&s->sh->gen, 0);
    atomic_init(&s->sh->seq, 0);
    atomic_init(&s->sh->send_ns, 0);
    atomic_init(&s->sh->flags, 0);
    atomic_init(&s->sh->bell, 0);
    atomic_init(&s->sh->waiting, 0);
    *state = s;
    return 0;
}

static int wake_open(void *state)
{
    (void)state;
    return 0;
}

static int wake_pub_loan(void *state, void **buf, size_t *size)
{
    wake_state *s = state;
    *buf = &s->own;
    *size = sizeof s->own;
    return 0;
}

static int wake_pub_send(void *state, void *buf)
{
    wake_shared *sh = ((wake_state *)state)->sh;
    const bench_wire *w = buf;
    int64_t t = w->send_ns;
    uint32_t flags = w->flags;
    uint64_t seq = w->seq;
    uint64_t g = atomic_load_explicit(&sh->gen, memory_order_relaxed);
    atomic_store_explicit(&sh->gen, g + 1, memory_order_relaxed);
    /* Orders the odd generation before the field stores (seqlock writer). */
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&sh->send_ns, t, memory_order_relaxed);
    atomic_store_explicit(&sh->flags, flags, memory_order_relaxed);
    atomic_store_explicit(&sh->seq, seq, memory_order_relaxed);
    /* Publishes the fields with the even generation. */
    atomic_store_explicit(&sh->gen, g + 2, memory_order_release);
    /* seq_cst pairs with the subscriber's store of waiting and load of bell. */
    atomic_fetch_add_explicit(&sh->bell, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&sh->waiting, memory_order_seq_cst))
        cli_futex_wake(&sh->bell);
    return 0;
}

static void wake_close(void *state)
{
    (void)state;
}

/* Reads a consistent snapshot of the fields. */
static void wake_read(wake_shared *sh, bench_wire *m)
{
    for (;;) {
        uint64_t g1 = atomic_load_explicit(&sh->gen, memory_order_acquire);
        if (g1 & 1)
            continue;
        m->seq = atomic_load_explicit(&sh->seq, memory_order_relaxed);
        m->send_ns = atomic_load_explicit(&sh->send_ns, memory_order_relaxed);
        m->flags = atomic_load_explicit(&sh->flags, memory_order_relaxed);
        /* Orders the field loads before the second look at the generation. */
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&sh->gen, memory_order_relaxed) == g1)
            return;
    }
}

static int wake_sub_recv(void *state, const void **data, size_t *size, int64_t *recv_ns,
                         int64_t timeout_ns)
{
    wake_state *s = state;
    wake_shared *sh = s->sh;
    int64_t deadline = timeout_ns >= 0 ? cli_now_ns() + timeout_ns : -1;
    for (;;) {
        uint32_t bell = atomic_load_explicit(&sh->bell, memory_order_acquire);
        wake_read(sh, &s->own);
        if (s->own.seq != s->last) {
            *recv_ns = cli_now_ns();
            s->last = s->own.seq;
            *data = &s->own;
            *size = sizeof s->own;
            return 0;
        }
        int64_t left = -1;
        if (deadline >= 0) {
            left = deadline - cli_now_ns();
            if (left <= 0)
                return 1;
        }
        if (s->spin) {
            ferry__cpu_relax();
            continue;
        }
        atomic_store_explicit(&sh->waiting, 1, memory_order_seq_cst);
        if (atomic_load_explicit(&sh->bell, memory_order_seq_cst) == bell)
            cli_futex_wait(&sh->bell, bell, left);
        atomic_store_explicit(&sh->waiting, 0, memory_order_relaxed);
    }
}

static void wake_release(void *state)
{
    wake_state *s = state;
    munmap(s->sh, 4096);
    free(s);
}

const bench_transport bench_transport_wakeup = {
    .name = "wakeup-floor",
    .summary = "bare futex wake of a blocked process, no payload (the floor; spin: it polls)",
    .prepare = wake_prepare,
    .pub_open = wake_open,
    .pub_idle = NULL,
    .pub_loan = wake_pub_loan,
    .pub_send = wake_pub_send,
    .pub_close = wake_close,
    .sub_open = wake_open,
    .sub_recv = wake_sub_recv,
    .sub_close = wake_close,
    .release = wake_release,
};
