/*
 * Device frames across processes (frames.c, frames_pub.c, frames_sub.c): the descriptor a device
 * frame's host sample carries, and what the tensor module asks of a loan. No CUDA header is
 * needed here.
 */
#ifndef FERRY_GPU_FRAMES_INTERNAL_H
#define FERRY_GPU_FRAMES_INTERNAL_H

#include <ferry/gpu.h>

#include <stddef.h>
#include <stdint.h>

#define FERRY__GPU_FRAME_MAGIC 0x4d41524655504746ULL /* "FGPUFRAM" */
#define FERRY__GPU_FRAME_VERSION 3u
/* Bytes at the end of every device chunk that hold its ready word. */
#define FERRY__GPU_READY_BYTES 256u

/*
 * The payload of a device frame's host sample, written by the publisher's CPU before
 * ferry_publish. The frame's ready word lives in device memory, at ready_offset inside the
 * allocation: the publisher's stream writes the generation there (cuStreamWriteValue32) once
 * the frame's work is done, and readers' streams wait on their own mapping of it until it reaches
 * generation (a cyclic comparison). A wait on device memory is served from the GPU's own memory
 * system; one on a word in mapped host memory was measured to cost a fixed ~140 us.
 */
typedef struct ferry__gpu_frame_desc {
    uint64_t magic;
    uint32_t version;
    uint32_t ipc;              /* FERRY_GPU_IPC_VMM or FERRY_GPU_IPC_LEGACY */
    uint64_t key;              /* the allocation: attachment key (VMM), identity (LEGACY) */
    uint64_t offset;           /* frame start inside the allocation */
    uint64_t size;             /* frame bytes */
    uint64_t alloc_size;       /* allocation bytes */
    uint32_t generation;       /* this publication of the chunk */
    uint32_t device;           /* the publisher's device ordinal, for diagnostics */
    uint64_t ready_offset;     /* the ready word, inside the allocation */
    uint8_t legacy_handle[64]; /* cudaIpcMemHandle_t when LEGACY */
    uint32_t meta_offset;      /* the publisher's metadata, from the start of the payload: */
    uint32_t meta_size;        /* FERRY__GPU_META_OFFSET and 0..FERRY_GPU_META_MAX bytes */
} ferry__gpu_frame_desc;

/* Where the metadata follows the descriptor in the host payload (8-byte aligned). */
#define FERRY__GPU_META_OFFSET ((sizeof(ferry__gpu_frame_desc) + 63u) / 64u * 64u)

/* The size asked for at ferry_gpu_loan of a loaned device_ptr, and the publisher's device
 * (FERRY_EFOREIGN, FERRY_ESTATE as ferry_gpu_publish). */
ferry_err ferry__gpu_loan_info(ferry_gpu_publisher *gpub, const void *device_ptr, size_t *size,
                               int *device);

#endif
