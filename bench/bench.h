/*
 * Benchmarks of the ferry CLI (`ferry bench`). They build on the CLI's own helpers
 * (tools/ferry/cli.h, util.h, shmbus.h); nothing in tools/ferry depends on them.
 *
 * A transport moves messages from one publisher process to one subscriber process. Every
 * transport the benchmark compares sits behind bench_transport, so one driver measures them all
 * the same way: the parent prepares shared resources, forks, publishes; the child subscribes.
 *
 * Concurrency: single-threaded processes.
 */
#ifndef FERRY_BENCH_H
#define FERRY_BENCH_H

#include "util.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------------------------------------------
 * Transports for `ferry bench transport`
 * ------------------------------------------------------------------------------------------- */

/* What a run asks of a transport. */
typedef struct bench_params {
    size_t payload;     /* bytes per message, the small header included (>= BENCH_MIN_PAYLOAD) */
    uint32_t depth;     /* queue depth or ring slots, for transports that have them */
    const char *dir;    /* ferry domain root for this run (a private directory) */
    uint32_t domain;
} bench_params;

/* The header every transport carries at the start of a message's payload. */
typedef struct bench_wire {
    uint64_t seq;
    int64_t send_ns;    /* CLOCK_MONOTONIC when the publisher started sending */
    uint32_t flags;     /* BENCH_F_* */
    uint32_t reserved;
} bench_wire;

#define BENCH_MIN_PAYLOAD ((size_t)sizeof(bench_wire))
#define BENCH_F_WARMUP 1u /* not measured */
#define BENCH_F_END 2u    /* the last message of a run */

/* A received message: the header fields and when it became available to the subscriber. */
typedef struct bench_msg {
    uint64_t seq;
    int64_t send_ns;
    int64_t recv_ns;
    uint32_t flags;
} bench_msg;

/*
 * One transport. Functions return 0 on success and -1 after printing a message on stderr;
 * sub_recv also returns 1 when nothing came within the timeout.
 *   prepare    parent, before fork: creates what both sides share; *state is the transport's
 *   pub_open   parent, after fork: becomes the publisher (may wait for the subscriber)
 *   pub_idle   parent while waiting (may be NULL): housekeeping, waits up to timeout_ns
 *   pub_send   sends message seq with flags; stamps and returns its send time
 *   sub_open   child, after fork: becomes the subscriber (may wait for the publisher)
 *   sub_recv   waits up to timeout_ns for the next message and fills *m
 *   release    parent, after the child is gone: frees what prepare made
 */
typedef struct bench_transport {
    const char *name;
    const char *summary;
    int (*prepare)(void **state, const bench_params *p);
    int (*pub_open)(void *state);
    int (*pub_idle)(void *state, int64_t timeout_ns);
    int (*pub_send)(void *state, uint64_t seq, uint32_t flags, int64_t *send_ns);
    void (*pub_close)(void *state);
    int (*sub_open)(void *state);
    int (*sub_recv)(void *state, bench_msg *m, int64_t timeout_ns);
    void (*sub_close)(void *state);
    void (*release)(void *state);
} bench_transport;

extern const bench_transport bench_transport_ferry;
extern const bench_transport bench_transport_shm_copy;
extern const bench_transport bench_transport_uds;
extern const bench_transport bench_transport_wakeup;

/* `ferry bench gpu` (bench/gpu/): the device buffer cache against CUDA's allocators, host frames
 * into the GPU, and device frames across processes. Built with the GPU module only. */
int bench_gpu_cmd(int argc, char **argv);

/* `ferry bench bridge` (bench/bridge/): ferry frames through two DDS bridges across a veth pair
 * between network namespaces, next to plain Cyclone DDS. Built with the DDS bridge only. */
int bench_bridge_cmd(int argc, char **argv);

#endif
