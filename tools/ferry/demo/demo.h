/*
 * `ferry demo`: what its files share. demo.c parses the options, forks the processes, collects
 * their reports and prints the table; demo_nodes.c holds the bodies of the processes (cameras,
 * LiDAR, consumers, fusion); demo_plot.c draws latency plots with gnuplot; demo_gpu.c is the
 * GPU consumer (its kernel in demo_kernels.cu), built with the GPU module only.
 *
 * Processes talk to the parent over pipes: each child writes its reports on its own result pipe
 * (an rt_note first, then a status byte, then its result), sources read their start time and the
 * quit byte from a control pipe. Single-threaded processes.
 */
#ifndef FERRY_DEMO_H
#define FERRY_DEMO_H

#include "cli.h"
#include "shmbus.h"
#include "util.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DEMO_NS_PER_S ((int64_t)1000000000)
#define DEMO_NS_PER_MS ((int64_t)1000000)

#define DEMO_FPS 30
#define DEMO_WIDTH 1280u
#define DEMO_HEIGHT 720u
#define DEMO_FRAME_BYTES ((size_t)DEMO_WIDTH * DEMO_HEIGHT * 3)
#define DEMO_LIDAR_HZ 10
#define DEMO_LIDAR_ROWS 64u
#define DEMO_LIDAR_COLS 1024u
#define DEMO_LIDAR_PHASE_NS (4 * DEMO_NS_PER_MS) /* the LiDAR's own phase against the cameras */
#define DEMO_QUEUE_DEPTH 4
#define DEMO_SYNC_QUEUE 10
#define DEMO_MAX_CAMERAS 16
#define DEMO_MAX_CONSUMERS 16
#define DEMO_MAX_STREAMS (DEMO_MAX_CAMERAS + 1)
#define DEMO_CONNECT_NS (20 * DEMO_NS_PER_S)
#define DEMO_FIRST_FRAME_NS (20 * DEMO_NS_PER_S)
#define DEMO_IDLE_NS (3 * DEMO_NS_PER_S)
#define DEMO_FIFO_PRIORITY 10
#define DEMO_LIDAR_TOPIC "/lidar/points"
#define DEMO_FUSION_CAMERA 0u
#define DEMO_GPU_CAMERA 0u

/* Status bytes on a result pipe. */
#define DEMO_MSG_READY 'R'
#define DEMO_MSG_FAIL 'F'
#define DEMO_MSG_SKIP 'S' /* the GPU consumer found no device: a demo_gpu_skip follows */
#define DEMO_MSG_GPU 'G'  /* the GPU consumer found a device and sets up */
#define DEMO_MSG_QUIT 'Q'

typedef enum demo_pipeline { DEMO_FERRY, DEMO_SHM } demo_pipeline;

/* What a process is. */
typedef enum demo_role {
    DEMO_CAMERA,
    DEMO_LIDAR,
    DEMO_CONSUMER,
    DEMO_FUSION,
    DEMO_GPU,
} demo_role;

typedef struct demo_cfg {
    demo_pipeline kind;
    uint32_t cameras, consumers;
    uint64_t frames;       /* per camera */
    uint64_t lidar_frames; /* 0: no LiDAR (the baseline) */
    bool fusion;           /* a fusion process (ferry only) */
    bool gpu;              /* a GPU consumer process is running (ferry only) */
    bool pin, rt;          /* real-time controls asked for */
    const int *cpus;       /* CPUs to pin to, round-robin by process slot */
    size_t ncpus;
    cli_where where;
    cli_shm_bus *bus;
} demo_cfg;

/* Every child's first report: what real-time control it got. */
typedef struct demo_rt_note {
    int32_t asked; /* 0 none, 1 pinning, 2 pinning + FIFO + lock + prefault */
    int32_t pinned, fifo, locked, prefaulted;
    int32_t cpu;
    int32_t failed_errno;
    int32_t available; /* the build has the real-time controls */
    char message[256];
} demo_rt_note;

/* A source (camera or LiDAR) -> parent, after its last frame. */
typedef struct demo_src_result {
    int32_t status;
    uint32_t index;
    uint64_t published;
    int64_t xport_cpu_ns; /* loan + publish, or the copy into the ring */
    int64_t fill_cpu_ns;  /* drawing the frame */
} demo_src_result;

/* One latency sample: when the frame was sent and how long it took. */
typedef struct demo_lat_rec {
    int64_t sent_ns;
    int64_t lat_ns;
} demo_lat_rec;

/* Consumer -> parent: a head, then per stream a demo_stream_result and its latency records. */
typedef struct demo_con_head {
    int32_t status;
    uint32_t streams;
    int64_t total_cpu_ns;
    int64_t verify_cpu_ns;
} demo_con_head;

typedef struct demo_stream_result {
    uint64_t received, dropped, corrupt, disorder, lat_count;
} demo_stream_result;

/* Fusion -> parent: the result, then skew_count int64 skews (ns, absolute). */
typedef struct demo_fusion_result {
    int32_t status;
    uint32_t reserved;
    uint64_t pairs;
    uint64_t camera_taken, lidar_taken;
    uint64_t camera_discarded, lidar_discarded;
    uint64_t corrupt;
    uint64_t skew_count;
    int64_t cpu_ns;
} demo_fusion_result;

/* GPU consumer -> parent: after DEMO_MSG_SKIP. */
typedef struct demo_gpu_skip {
    char reason[128];
} demo_gpu_skip;

/* GPU consumer -> parent: the result, then lat_count demo_lat_rec. */
typedef struct demo_gpu_result {
    int32_t status;
    uint32_t reserved;
    uint64_t received, dropped, corrupt, mismatches, disorder;
    uint64_t device_allocs, cache_hits;
    int64_t cpu_ns;       /* the whole process, while running */
    int64_t check_cpu_ns; /* the CPU's own sum, for the self-check */
    uint64_t lat_count;
    char device[64];
} demo_gpu_result;

/* The topic of camera cam. */
void demo_camera_topic(char *out, size_t cap, uint32_t cam);

/* Process bodies (demo_nodes.c); each returns the exit status of the child. res: result pipe,
 * ctl: control pipe (sources only, else -1). */
int demo_camera_main(const demo_cfg *c, uint32_t cam, int res, int ctl);
int demo_lidar_main(const demo_cfg *c, int res, int ctl);
int demo_consumer_main(const demo_cfg *c, uint32_t index, int res);
int demo_fusion_main(const demo_cfg *c, int res);

/* The GPU consumer (demo_gpu.c): takes every frame of camera DEMO_GPU_CAMERA, copies
 * it into a device buffer of a ferry_gpu_cache, sums its pixels with a kernel and checks the sum
 * against the CPU's. Writes DEMO_MSG_SKIP and a demo_gpu_skip when there is no device, else
 * DEMO_MSG_GPU at once and DEMO_MSG_READY (or DEMO_MSG_FAIL) once connected to the camera. */
#ifdef FERRY_HAVE_GPU
int demo_gpu_main(const demo_cfg *c, int res);
#endif

/* Plotting (demo_plot.c). */
typedef struct demo_series {
    const char *title;
    const demo_lat_rec *recs;
    size_t count;
    int64_t t0_ns; /* time 0 of the plot's x axis for this series */
} demo_series;

/* true when a gnuplot executable is on PATH. */
bool demo_plot_available(void);
/* Draws latency over time and the latency CDF of each series into png. Returns 0, or 1 after a
 * message. */
int demo_plot(const char *png, const demo_series *series, size_t n, const char *subtitle);

#endif
