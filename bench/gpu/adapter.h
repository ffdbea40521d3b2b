/*
 * The adapter experiment's shared pieces (adapter.c: one process, every strategy and mode;
 * adapter_sustained.c: the users' comparison as separate processes): the frame and its pattern,
 * the camera processes (adapter_camera.c) and the kernels (adapter_kernels.cu).
 */
#ifndef FERRY_BENCH_GPU_ADAPTER_H
#define FERRY_BENCH_GPU_ADAPTER_H

#include <cuda_runtime.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* adapter_kernels.cu */
cudaError_t bench_adapter_checksum(const void *frame, size_t bytes, unsigned long long *slot,
                                   cudaStream_t stream);
/* A reader of another consumer: spins spin_ns on the device, then checksums the frame as
 * bench_adapter_checksum does; a buffer reused while read shows as a wrong sum. */
cudaError_t bench_adapter_read(const void *frame, size_t bytes, uint64_t spin_ns,
                               unsigned long long *slot, cudaStream_t stream);

#define CAMERAS 3
#define FRAME_BYTES ((size_t)2764800) /* 1280 x 720 x 3 */
#define HEADER_BYTES 64
#define BODY_WORDS ((FRAME_BYTES - HEADER_BYTES) / 4)
#define SEQ_WORDS 1024 /* body words rewritten per frame; the rest is a fixed pattern */
#define FRAME_TYPE "ferry/bench_gpu_adapter_frame"
#define FRAME_MAGIC 0x4d52464144505946ULL /* "FYPDAFRM" */
#define RING 8                            /* pipeline depth = max_live */
#define SLOTS ((size_t)1 << 20)           /* checksum slots: frames per row at most */
#define SUB_DEPTH 4
#define PUB_CHUNKS 24
#define SEEN_MAX 64
#define FPS 30
#define CONNECT_NS ((int64_t)20 * 1000000000)
#define IDLE_CAP ((size_t)64 << 20) /* the cache's default idle cap */

typedef struct frame_header {
    uint64_t magic;
    uint64_t seq;
    int64_t send_ns;
    uint32_t camera;
    uint32_t reserved0;
    uint64_t reserved[4];
} frame_header;

_Static_assert(sizeof(frame_header) == HEADER_BYTES, "frame header is 64 bytes");

/* Shared with the camera processes (MAP_SHARED before fork). */
typedef struct adapter_ctl {
    _Atomic uint32_t stop;
    _Atomic uint32_t failed;
} adapter_ctl;

static inline uint32_t fixed_word(size_t i)
{
    return (uint32_t)(i * 2654435761u) ^ 0xa5a5a5a5u;
}

static inline uint32_t seq_word(uint64_t seq, uint32_t cam, size_t i)
{
    return ((uint32_t)seq * 0x9e3779b1u) ^ ((uint32_t)i * 0x85ebca6bu) ^ (cam << 29);
}

/* The sum of a frame's fixed words; a frame's checksum is it plus its sequence words. */
uint64_t bench_adapter_fixed_sum(void);
uint64_t bench_adapter_expected(uint64_t fixed_sum, uint64_t seq, uint32_t cam);

/* A camera process: publishes frames on "/bench/gpu/adapter/cam<cam>", 30 fps when paced, until
 * ctl->stop. No CUDA (a child may not use its parent's context). 0 or 1 (ctl->failed set). */
int bench_adapter_camera(const char *dir, int cam, bool paced, adapter_ctl *ctl);
/* Forks bench_adapter_camera as a child of this process: its pid, or -1 after a message. */
int bench_adapter_spawn_camera(const char *dir, int cam, bool paced, adapter_ctl *ctl);
/* Waits up to timeout_ns for a child: 1 when it exited 0, 0 when it failed, -1 when it did not
 * end in time (then killed, and said so naming what). */
int bench_adapter_reap(int pid, int64_t timeout_ns, const char *what);

/* A ferry_gpu_cache for one strategy: its own pool, the given bound on live buffers, a second's
 * wait at that bound. */
struct ferry_gpu_cache;
int bench_adapter_cache(struct ferry_gpu_cache **out, int device, int backend, uint64_t threshold,
                        uint32_t max_live);

#endif
