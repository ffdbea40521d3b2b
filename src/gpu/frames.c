/*
 * Device frames across processes. A device frame travels as an ordinary host sample whose
 * payload is a descriptor (frames_internal.h); the device memory behind host chunk i is device
 * chunk i of the publisher. The core loans host chunk i again only after every reference to it
 * came back, so device chunk i is free exactly when host chunk i is loaned again: no bookkeeping
 * of readers is needed here.
 *
 * Export: VMM allocations (cuMemCreate, POSIX file descriptor) handed to subscribers as core
 * attachments under a key unique in the process, or legacy IPC handles carried in the
 * descriptor. Subscribers import once per (connection, chunk, key) and undo the import in a close
 * hook, before the core unmaps the connection.
 *
 * Ordering stays on the GPU: at publish the publisher's stream writes the chunk's generation
 * into the chunk's ready word (device memory, the last bytes of the device chunk, so it travels
 * with the allocation), after a memory barrier; a reader's stream waits until the word reaches
 * that generation. A reader's release records an
 * event; the host sample goes back only when it completed.
 *
 * One thread at a time per object, as for the core's publisher and subscriber.
 *
 * This file: the driver functions both sides call and the helpers they share. The publisher is in
 * frames_pub.c, the subscriber in frames_sub.c.
 */
#include "gpu/internal.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(cudaIpcMemHandle_t) == 64, "legacy IPC handle is 64 bytes");

/* ---- driver entry points -------------------------------------------------------------------- */

ferry__gpu_drv_table ferry__gpu_drv;

static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

static void drv_load(void)
{
    ferry__gpu_drv_table t;
    memset(&t, 0, sizeof t);
    /* Object pointers to function pointers through memcpy: ISO C has no direct conversion. */
#define LOAD(field, name)                                                                          \
    do {                                                                                           \
        void *fn_ = ferry__gpu_driver_fn(name);                                                    \
        memcpy(&t.field, &fn_, sizeof fn_);                                                        \
    } while (0)
    LOAD(device_get, "cuDeviceGet");
    LOAD(device_get_attribute, "cuDeviceGetAttribute");
    LOAD(granularity, "cuMemGetAllocationGranularity");
    LOAD(mem_create, "cuMemCreate");
    LOAD(mem_release, "cuMemRelease");
    LOAD(address_reserve, "cuMemAddressReserve");
    LOAD(address_free, "cuMemAddressFree");
    LOAD(mem_map, "cuMemMap");
    LOAD(mem_unmap, "cuMemUnmap");
    LOAD(set_access, "cuMemSetAccess");
    LOAD(export_handle, "cuMemExportToShareableHandle");
    LOAD(import_handle, "cuMemImportFromShareableHandle");
    LOAD(props_from_handle, "cuMemGetAllocationPropertiesFromHandle");
    LOAD(write_value32, "cuStreamWriteValue32");
    LOAD(wait_value32, "cuStreamWaitValue32");
    LOAD(address_range, "cuMemGetAddressRange");
#undef LOAD
    t.base = t.device_get && t.device_get_attribute && t.write_value32 && t.wait_value32 &&
             t.address_range;
    t.vmm = t.granularity && t.mem_create && t.mem_release && t.address_reserve && t.address_free &&
            t.mem_map && t.mem_unmap && t.set_access && t.export_handle && t.import_handle &&
            t.props_from_handle;
    ferry__gpu_drv = t;
}

void ferry__gpu_drv_load(void)
{
    pthread_once(&drv_once, drv_load);
}

/* ---- helpers -------------------------------------------------------------------------------- */

ferry_err ferry__gpu_rt_fail(cudaError_t e)
{
    (void)cudaGetLastError();
    return ferry__gpu_err(e);
}

ferry_err ferry__gpu_cu_err(CUresult r)
{
    switch (r) {
    case CUDA_SUCCESS:
        return FERRY_OK;
    case CUDA_ERROR_OUT_OF_MEMORY:
        return FERRY_ENOMEM;
    case CUDA_ERROR_NOT_SUPPORTED:
        return FERRY_ENOTSUP;
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
        return FERRY_ENODEV;
    case CUDA_ERROR_INVALID_VALUE:
        return FERRY_EINVAL;
    default:
        return FERRY_ESYS;
    }
}

ferry_err ferry__gpu_device_enter(int device, int *prev)
{
    cudaError_t e = cudaGetDevice(prev);
    if (e != cudaSuccess)
        return ferry__gpu_rt_fail(e);
    if ((e = cudaSetDevice(device)) != cudaSuccess)
        return ferry__gpu_rt_fail(e);
    return FERRY_OK;
}

void ferry__gpu_device_leave(int device, int prev)
{
    if (prev != device && cudaSetDevice(prev) != cudaSuccess)
        (void)cudaGetLastError();
}

bool ferry__gpu_grow(void **arr, uint32_t *cap, uint32_t want, size_t elem)
{
    if (want <= *cap)
        return true;
    uint32_t n = *cap ? *cap : 8;
    while (n < want)
        n *= 2;
    void *p = realloc(*arr, (size_t)n * elem);
    if (!p)
        return false;
    memset((uint8_t *)p + (size_t)*cap * elem, 0, (size_t)(n - *cap) * elem);
    *arr = p;
    *cap = n;
    return true;
}
