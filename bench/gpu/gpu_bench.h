/*
 * `ferry bench gpu`: shared pieces of the GPU benchmarks. gpu_main.c parses the options and runs
 * each part in order, printing a table per part and appending rows to the CSV files asked for.
 * Single-threaded driver; parts may fork processes of their own.
 */
#ifndef FERRY_BENCH_GPU_H
#define FERRY_BENCH_GPU_H

#include <stdbool.h>
#include <stdio.h>

typedef struct bench_gpu_args {
    bool quick;      /* finish each part in seconds, for a smoke run */
    int device;      /* CUDA device ordinal */
    FILE *csv;       /* rows of the part's own CSV layout, or NULL */
    const char *dir; /* a private domain directory for the part's processes */
    int seconds;     /* measured seconds per row where a part takes it; 0: its default */
} bench_gpu_args;

/* 1. The users' comparison, sustained, as separate processes (adapter_sustained.c): three
 *    cameras, three adapter processes, per allocator variant and with readers on other streams.
 *    CSV: variant,seconds,frames,fps,device_allocs,gpu_waits,busy_skips,kept_bytes_per_process,
 *         device_bytes,p50_us,p99_us,max_us,dropped,cpu_us_per_frame,alloc_p50_us,errors */
int bench_gpu_adapter_sustained(const bench_gpu_args *a);
/* Its adapter process: `ferry bench gpu --adapter-proc ...`, exec'd by it. */
int bench_gpu_adapter_proc(int argc, char **argv);

/* 1b. The first report's adapter experiment in one process (--part adapter-matrix): taken ferry
 * frame -> device buffer -> consumer kernel -> release, per allocation strategy, synced per frame
 * and pipelined. CSV: strategy,mode,frames,device_allocs,retained_bytes,p50_us,p99_us,max_us,
 *         cpu_us_per_frame,dropped */
int bench_gpu_adapter(const bench_gpu_args *a);

/* 2. Ingest: a taken host frame into the GPU by pageable copy, registered-segment copy and
 *    in-place mapped read. CSV: method,frame_bytes,frames,p50_us,p99_us,gbps */
int bench_gpu_ingest(const bench_gpu_args *a);

#endif
