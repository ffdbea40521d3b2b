/* Devices, errors and driver entry points of the GPU module. */
#include "gpu/internal.h"

#include <pthread.h>

static pthread_once_t count_once = PTHREAD_ONCE_INIT;
static int device_count; /* read once: CUDA's own count does not change in a process */

static void read_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess)
        n = 0;
    device_count = n;
}

ferry_err ferry__gpu_err(cudaError_t e)
{
    switch (e) {
    case cudaSuccess:
        return FERRY_OK;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorStubLibrary:
        return FERRY_ENODEV;
    case cudaErrorMemoryAllocation:
        return FERRY_ENOMEM;
    case cudaErrorInvalidValue:
        return FERRY_EINVAL;
    case cudaErrorNotSupported:
        return FERRY_ENOTSUP;
    default:
        return FERRY_ESYS;
    }
}

ferry_err ferry__gpu_check_device(int device)
{
    pthread_once(&count_once, read_count);
    if (device_count == 0)
        return FERRY_ENODEV;
    if (device < 0 || device >= device_count)
        return FERRY_ENODEV;
    return FERRY_OK;
}

ferry_err ferry_gpu_device_count(int *count)
{
    if (!count)
        return FERRY_EINVAL;
    pthread_once(&count_once, read_count);
    *count = device_count;
    return device_count > 0 ? FERRY_OK : FERRY_ENODEV;
}

ferry_err ferry_gpu_mps_enabled(int device, bool *out)
{
    if (!out)
        return FERRY_EINVAL;
    ferry_err err = ferry__gpu_check_device(device);
    if (err)
        return err;
    int mps = 0;
    cudaError_t e = cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, device);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return ferry__gpu_err(e);
    }
    *out = mps != 0;
    return FERRY_OK;
}

void *ferry__gpu_driver_fn(const char *name)
{
    if (ferry__gpu_check_device(0) != FERRY_OK)
        return NULL;
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult status;
    /* The ABI of version 12.0 of each function: the prototypes this module declares. */
    if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &status) !=
            cudaSuccess ||
        status != cudaDriverEntryPointSuccess)
        return NULL;
    return fn;
}
