/*
 * Internals shared by the GPU module's files: CUDA error mapping, the device check every public
 * call starts with, and driver API functions reached through cudaGetDriverEntryPoint (the module
 * never links libcuda, so its binaries load where no driver is installed); the driver table and
 * helpers the device-frame files share.
 * Safe from any thread.
 */
#ifndef FERRY_GPU_INTERNAL_H
#define FERRY_GPU_INTERNAL_H

#include <ferry/gpu.h>

#include <cuda.h> /* types and enums only: the driver is reached through ferry__gpu_driver_fn */
#include <cuda_runtime.h>
#include <stdbool.h>
#include <stddef.h>
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

/* ---- device frames (frames.c, frames_pub.c, frames_sub.c) ---------------------------------- */

/* The driver API functions device frames call, filled once per process by ferry__gpu_drv_load.
 * base: device queries and stream memory operations; vmm: every VMM function. */
typedef struct ferry__gpu_drv_table {
    CUresult (*device_get)(CUdevice *, int);
    CUresult (*device_get_attribute)(int *, CUdevice_attribute, CUdevice);
    CUresult (*granularity)(size_t *, const CUmemAllocationProp *,
                            CUmemAllocationGranularity_flags);
    CUresult (*mem_create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                           unsigned long long);
    CUresult (*mem_release)(CUmemGenericAllocationHandle);
    CUresult (*address_reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*address_free)(CUdeviceptr, size_t);
    CUresult (*mem_map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                        unsigned long long);
    CUresult (*mem_unmap)(CUdeviceptr, size_t);
    CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
    CUresult (*export_handle)(void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
                              unsigned long long);
    CUresult (*import_handle)(CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType);
    CUresult (*props_from_handle)(CUmemAllocationProp *, CUmemGenericAllocationHandle);
    CUresult (*write_value32)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
    CUresult (*wait_value32)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
    CUresult (*address_range)(CUdeviceptr *, size_t *, CUdeviceptr);
    bool base;
    bool vmm;
} ferry__gpu_drv_table;

/* Read only after ferry__gpu_drv_load returned (every constructor calls it first). */
extern ferry__gpu_drv_table ferry__gpu_drv;

/* Fills ferry__gpu_drv the first time it is called in the process. Safe from any thread. */
void ferry__gpu_drv_load(void);

/* Maps a runtime error and clears it from the runtime's last-error slot. */
ferry_err ferry__gpu_rt_fail(cudaError_t e);

/* Maps a driver API result to a ferry_err. */
ferry_err ferry__gpu_cu_err(CUresult r);

/* Makes device current and its primary context bound to this thread (driver calls need it;
 * since CUDA 12 cudaSetDevice initialises and binds the context). *prev gets the device to
 * restore with ferry__gpu_device_leave. */
ferry_err ferry__gpu_device_enter(int device, int *prev);
void ferry__gpu_device_leave(int device, int prev);

/* Grows an array of elements of size elem to hold at least want entries (zeroed); false when out
 * of memory, the array unchanged. */
bool ferry__gpu_grow(void **arr, uint32_t *cap, uint32_t want, size_t elem);

/* ---- the cache (cache.c) -------------------------------------------------------------------- */

/* CUDA calls a cache has made (tests check that a hit makes none). */
uint64_t ferry__gpu_cache_cuda_calls(const ferry_gpu_cache *cache);

#endif
