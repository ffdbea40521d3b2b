/*
 * `ferry bench gpu`, part 3: device frames across processes against the copy path.
 */
#ifndef FERRY_BENCH_GPU_XPROC_H
#define FERRY_BENCH_GPU_XPROC_H

#include "gpu_bench.h"

/* 3. Cross-process handoff of 1280x720x3 frames: a device frame (ferry_gpu_loan/publish, the
 *    reader's stream waits on the GPU) against the copy path (D2H into a ferry host sample,
 *    shared memory, H2D on the reader). Latency from the producer's stream work done to the
 *    reader's kernel start, on the GPU's global timer. The reader is this program again, run
 *    as `ferry bench gpu --xproc-reader ...` (see xproc.c).
 *    CSV: path,frame_bytes,frames,p50_us,p99_us */
int bench_gpu_xproc(const bench_gpu_args *a);
/* The reader process: argv[1..7] as bench_gpu_xproc passes them. */
int bench_gpu_xproc_reader(int argc, char **argv);

#endif
