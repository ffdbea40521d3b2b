/*
 * Benchmarks of the ferry CLI (`ferry bench`) and what `ferry demo` borrows from them.
 *
 * A transport moves messages from one publisher process to one subscriber process. Every
 * transport the benchmark compares sits behind bench_transport, so one driver measures them all
 * the same way: the parent prepares shared resources, forks, publishes; the child subscribes.
 * The copying shared-memory baseline is also offered as a bus (many rings, many readers) that
 * the demo uses for its camera pipeline.
 *
 * Concurrency: single-threaded processes. A bus is shared by processes forked after it was
 * created; each ring has one writer process, each reader index one reader process.
 */
#ifndef FERRY_BENCH_H
#define FERRY_BENCH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

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

/* ---------------------------------------------------------------------------------------------
 * The copying shared-memory bus (what a shared-memory DDS transport does)
 *
 * One ring of slots per writer in one MAP_SHARED mapping. A writer copies a message into the
 * next slot, overwriting the oldest (keep last: a slow reader loses messages, the writer never
 * waits); each reader copies messages out into its own buffer and counts what it lost. Slots are
 * guarded by a sequence word (a seqlock), so a message overwritten while being copied out is
 * counted as dropped, never delivered torn. Readers sleep on a futex doorbell of their own that
 * writers ring only when the reader is waiting.
 * ------------------------------------------------------------------------------------------- */

typedef struct bench_shm_bus bench_shm_bus;

/* Creates a bus before fork. NULL (after a message) on failure. */
bench_shm_bus *bench_shm_bus_create(uint32_t rings, uint32_t readers, uint32_t slots,
                                    size_t slot_bytes);
void bench_shm_bus_destroy(bench_shm_bus *bus);

/* Writer of ring: copies size bytes (<= slot_bytes) into the ring and wakes waiting readers. */
int bench_shm_send(bench_shm_bus *bus, uint32_t ring, const void *data, size_t size);

/* Reader: copies the next message of any ring into dst (cap bytes). 0: *ring and *size are set;
 * 1: nothing within timeout_ns (negative waits for ever); -1: a message larger than cap. */
int bench_shm_recv(bench_shm_bus *bus, uint32_t reader, void *dst, size_t cap, uint32_t *ring,
                   size_t *size, int64_t timeout_ns);

/* Messages of ring that reader lost (overwritten before it copied them out). */
uint64_t bench_shm_dropped(const bench_shm_bus *bus, uint32_t reader, uint32_t ring);

/* ---------------------------------------------------------------------------------------------
 * Helpers shared by the benchmarks and the demo
 * ------------------------------------------------------------------------------------------- */

/* CLOCK_MONOTONIC in ns. */
int64_t bench_now_ns(void);

/* Futex on a shared word: wait while *word == expected (timeout_ns < 0: for ever); wake all. */
void bench_futex_wait(_Atomic uint32_t *word, uint32_t expected, int64_t timeout_ns);
void bench_futex_wake(_Atomic uint32_t *word);

/* Creates a private directory "<base>/<prefix>XXXXXX" (base /dev/shm, else /tmp); out gets
 * its path. false after a message on failure. */
bool bench_private_dir(const char *prefix, char *out, size_t cap);

/* Removes path and everything below it (no symlinks followed). 0 or -1. */
int bench_rmtree(const char *path);

/* Reads or writes exactly n bytes; waits at most until deadline_ns (CLOCK_MONOTONIC; negative
 * for ever). 0 on success, -1 on error, end of file or timeout (errno ETIMEDOUT). */
int bench_read_full(int fd, void *buf, size_t n, int64_t deadline_ns);
int bench_write_full(int fd, const void *buf, size_t n);

/* In a forked child: die with parent, and exit at once if parent died before this call. */
void bench_child_setup(pid_t parent);

/* Touches every page of a buffer so page faults stay out of measurements. */
void bench_prefault(void *buf, size_t n);

/* `ferry bench gpu` (bench/gpu/): the device buffer cache against CUDA's allocators, host frames
 * into the GPU, and device frames across processes. Built with the GPU module only. */
int bench_gpu_cmd(int argc, char **argv);

/* `ferry bench bridge` (bench/bridge/): ferry frames through two DDS bridges across a veth pair
 * between network namespaces, next to plain Cyclone DDS. Built with the DDS bridge only. */
int bench_bridge_cmd(int argc, char **argv);

#endif
