/*
 * Benchmarks of the ferry CLI (`ferry bench`). They build on the CLI's ground floor
 * (tools/lib: cli.h, util.h, shmbus.h) and on nothing else of tools/.
 *
 * A transport moves messages from one publisher process to one subscriber process. Every
 * transport the benchmark compares sits behind bench_transport, so one driver measures them all
 * the same way: the parent prepares shared resources, forks, publishes; the child subscribes.
 * The driver, not the transport, writes the frame (bench_fill) and reads it (bench_consume), so
 * every transport carries the same bytes and pays for them the same way.
 *
 * Concurrency: single-threaded processes (a peer's library may start threads of its own).
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

/* How much of a frame the publisher writes before publishing and the subscriber reads after
 * receiving. The header (bench_wire) is always written and read. */
typedef enum bench_touch {
    BENCH_TOUCH_NONE = 0,   /* the header only */
    BENCH_TOUCH_PAGE = 1,   /* one byte per 4 KiB page: publisher writes, subscriber reads */
    BENCH_TOUCH_FULL = 2,   /* publisher writes every byte, subscriber sums every 64-bit word */
    BENCH_TOUCH_CAMERA = 3, /* publisher writes every byte (a camera's frame), subscriber reads
                               one byte per page */
    BENCH_TOUCH_COUNT
} bench_touch;

/* What a run asks of a transport. */
typedef struct bench_params {
    size_t payload;      /* bytes per message, the small header included (>= BENCH_MIN_PAYLOAD) */
    uint32_t depth;      /* queue depth or ring slots, for transports that have them */
    bool lossless;       /* a full queue makes the publisher wait; nothing is dropped */
    const char *variant; /* the row's transport options ("" for none): see bench_entry */
    const char *dir;     /* ferry domain root for this run (a private directory) */
    uint32_t domain;
} bench_params;

/* The header every transport carries at the start of a message's payload. */
typedef struct bench_wire {
    uint64_t seq;
    int64_t send_ns; /* CLOCK_MONOTONIC when the frame was ready in the sender's buffer */
    uint32_t flags;  /* BENCH_F_* */
    uint32_t reserved;
} bench_wire;

#define BENCH_MIN_PAYLOAD ((size_t)sizeof(bench_wire))
#define BENCH_F_WARMUP 1u /* not measured */
#define BENCH_F_END 2u    /* the last message of a run */
#define BENCH_PAGE ((size_t)4096)

/* Capabilities of a transport (bench_transport.caps). */
#define BENCH_CAP_LOSSLESS 1u /* honours bench_params.lossless */
/* its library keeps per-process state: each row's publisher runs in a fresh process (forked from
 * the driver) */
#define BENCH_CAP_PROCESS 2u
#define BENCH_CAP_ROUDI 4u /* needs an iceoryx RouDi daemon (bench_roudi_start) */

/*
 * One transport. Functions return 0 on success and -1 after printing a message on stderr;
 * sub_recv also returns 1 when nothing came within the timeout.
 *   available  may be NULL; returns NULL when the transport can run here, else why not
 *   prepare    parent, before fork: creates what both sides share; *state is the transport's
 *   pub_open   parent, after fork: becomes the publisher (may wait for the subscriber)
 *   pub_idle   parent while waiting (may be NULL): housekeeping, waits up to timeout_ns
 *   pub_loan   a buffer of *size bytes (at most the payload) for the next message; the driver
 *              fills it, header first, and hands it to pub_send
 *   pub_send   sends the buffer of the last pub_loan (waits for room when lossless)
 *   sub_open   child, after fork: becomes the subscriber (may wait for the publisher)
 *   sub_recv   waits up to timeout_ns for the next message: *data, *size (header included) and
 *              *recv_ns, when the message became usable; valid until sub_done
 *   sub_done   may be NULL: gives back what sub_recv handed out
 *   release    parent, after the child is gone: frees what prepare made
 */
typedef struct bench_transport {
    const char *name;
    const char *summary;
    unsigned caps;
    const char *(*available)(void);
    int (*prepare)(void **state, const bench_params *p);
    int (*pub_open)(void *state);
    int (*pub_idle)(void *state, int64_t timeout_ns);
    int (*pub_loan)(void *state, void **buf, size_t *size);
    int (*pub_send)(void *state, void *buf);
    void (*pub_close)(void *state);
    int (*sub_open)(void *state);
    int (*sub_recv)(void *state, const void **data, size_t *size, int64_t *recv_ns,
                    int64_t timeout_ns);
    int (*sub_done)(void *state);
    void (*sub_close)(void *state);
    void (*release)(void *state);
} bench_transport;

extern const bench_transport bench_transport_ferry;
extern const bench_transport bench_transport_shm_copy;
extern const bench_transport bench_transport_uds;
extern const bench_transport bench_transport_wakeup;
/* Peers, built when their libraries are found (FERRY_BENCH_HAVE_ICEORYX, _CYCLONE). */
extern const bench_transport bench_transport_iceoryx;
extern const bench_transport bench_transport_cyclone;
extern const bench_transport bench_transport_cyclone_shm;

/* ---------------------------------------------------------------------------------------------
 * The driver of `ferry bench transport` (bench_main.c: the command; bench_run.c: the rows)
 * ------------------------------------------------------------------------------------------- */

/* One kind of row: a transport, with the options of a variant. Variant rows of ferry (a spin
 * budget, huge pages) are entries with the same transport and their own name and variant;
 * transport_ferry.c reads the variant in its prepare. */
typedef struct bench_entry {
    const char *name; /* the row's label, unique */
    const bench_transport *t;
    const char *variant; /* bench_params.variant: "" for none */
    bool peer;           /* another middleware: run with --peers or a full run */
} bench_entry;

/* paced: 30 Hz, drop-oldest depth 16. flat: flat out, drop-oldest depth 16 (256 at 64 B, so the
 * subscriber can batch). flood: flat out, lossless at depth 8. */
enum { BENCH_MODE_PACED, BENCH_MODE_FLAT, BENCH_MODE_FLOOD, BENCH_MODE_COUNT };
#define BENCH_PACED_HZ 30
#define BENCH_DEPTH 16u
#define BENCH_DEPTH_FLAT_SMALL 256u /* iceoryx 2.0's largest subscriber queue */
#define BENCH_DEPTH_FLOOD 8u

/* What every row of a run shares. */
typedef struct bench_plan {
    uint32_t paced_count; /* measured messages per paced row */
    int64_t flat_ns;      /* duration of a flat-out (flat or flood) row */
    bool pin;             /* publisher on cpus[0], subscriber on cpus[1] */
    int cpus[2];
    const char *dir;    /* private ferry domain root */
    size_t max_payload; /* the largest payload of the run (RouDi's mempools) */
} bench_plan;

/* One measured row; plain data, so that it can cross a pipe. */
typedef struct bench_row {
    uint32_t entry; /* index into the entry table */
    uint32_t run;   /* 0-based round of --runs */
    size_t payload;
    int mode;
    bench_touch touch;
    bool pinned;
    bool ok;
    uint64_t sent, messages, dropped;
    double p50_us, p99_us, p999_us, max_us;
    double pub_call_us, sub_call_us; /* CPU of the transport's calls per message (paced rows;
                                      * negative when not measured) */
    double pub_cpu_us, sub_cpu_us;   /* whole-process CPU (getrusage) per message */
    double msgs_per_s;
} bench_row;

extern const bench_entry bench_entries[];
extern const size_t bench_entry_count;

/* Measures one row into *out (out->ok false after a message on stderr when it could not).
 * Rows of transports with BENCH_CAP_PROCESS or _ROUDI run in processes of their own. */
void bench_run_row(const bench_plan *plan, uint32_t entry, size_t payload, int mode,
                   bench_touch touch, bench_row *out);
/* Ends what bench_run_row started for the whole run (the RouDi environment). */
void bench_run_finish(void);

/* Writes the frame a publisher sends (the header excluded: the driver writes it last). */
void bench_fill(void *buf, size_t size, bench_touch touch, uint64_t seq);
/* Reads a received frame as a consumer would; returns a sum so that the reads stay. */
uint64_t bench_consume(const void *data, size_t size, bench_touch touch);

/* The iceoryx daemon for the peers that need one (bench/roudi.c). bench_roudi_start makes the
 * calling process a private environment first (its own mount namespace, with fresh /tmp and
 * /dev/shm, where the daemon's fixed names cannot clash with another RouDi), then starts
 * iox-roudi there with mempools for payloads up to max_payload; every process forked from the
 * caller afterwards sees it. 0, or -1 after a message. bench_roudi_stop ends it. */
int bench_roudi_start(size_t max_payload);
void bench_roudi_stop(void);
/* NULL when iox-roudi can be run, else why not. */
const char *bench_roudi_available(void);

/* `ferry bench gpu` (bench/gpu/): the device buffer cache against CUDA's allocators, host frames
 * into the GPU, and device frames across processes. Built with the GPU module only. */
int bench_gpu_cmd(int argc, char **argv);

/* `ferry bench bridge` (bench/bridge/): ferry frames through two DDS bridges across a veth pair
 * between network namespaces, next to plain Cyclone DDS. Built with the DDS bridge only. */
int bench_bridge_cmd(int argc, char **argv);

#endif
