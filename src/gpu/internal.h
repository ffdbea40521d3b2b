/*
 * Internals shared by the GPU module's files: CUDA error mapping, the device check every public
 * call starts with, and driver API functions reached through cudaGetDriverEntryPoint (the module
 * never links libcuda, so its binaries load where no driver is installed).
 * Safe from any thread.
 */
#ifndef FERRY_GPU_INTERNAL_H
#define FERRY_GPU_INTERNAL_H

#include <ferry/gpu.h>

#include <cuda_runtime.h>
#include <stdint.h>

/* Maps a CUDA runtime error to a ferry_err (no device and no driver are FERRY_ENODEV). */
ferry_err ferry__gpu_err(cudaError_t e);

/* FERRY_OK when device is a usable device ordinal, FERRY_ENODEV otherwise. Cheap after the
 * first call (the device count is read once per process). */
ferry_err ferry__gpu_check_device(int device);

/* cudaEventQuery that leaves no cudaErrorNotReady behind in the thread's last-error state, where
 * an application's next cudaGetLastError() would take it for a failure of its own. */
static inline cudaError_t ferry__gpu_event_query(cudaEvent_t event)
{
    cudaError_t e = cudaEventQuery(event);
    if (e == cudaErrorNotReady && cudaPeekAtLastError() == cudaErrorNotReady)
        (void)cudaGetLastError();
    return e;
}

/* A driver API function by name (e.g. "cuMemCreate"), or NULL when there is no driver or no
 * such function. Looked up once per name by the caller and kept. */
void *ferry__gpu_driver_fn(const char *name);

/* CUDA calls a cache has made (tests check that a hit makes none). */
uint64_t ferry__gpu_cache_cuda_calls(const ferry_gpu_cache *cache);

#endif
