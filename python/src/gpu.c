/*
 * ferry.GpuSubscriber and ferry.GpuFrame: device frames and device tensors (ferry/gpu.h,
 * ferry/tensor.h) exported to PyTorch, CuPy and other DLPack consumers without a copy. Built
 * with the GPU module only; without it the types are absent.
 */
#include "pyferry.h"

bool pyf_gpu_types(PyObject *module)
{
    (void)module;
    return true;
}

int pyf_gpusub_close(PyObject *gsub)
{
    (void)gsub;
    return 0;
}
