// The device side of tu_weighted_checksum (tests/gpu/gpu_testutil.h): a grid-stride kernel that
// adds the checksum of n bytes at p to *out. p may be device memory or host pages mapped into
// the device, aligned or not.
#ifndef FERRY_TESTS_GPU_CHECKSUM_CUH
#define FERRY_TESTS_GPU_CHECKSUM_CUH

#include <cuda_runtime.h>
#include <stdint.h>

__device__ __forceinline__ unsigned long long checksum_weigh(unsigned long long i, unsigned int w)
{
    return (unsigned long long)w * (2ull * i + 1ull) + i;
}

// out == nullptr returns at once: a launch that only loads the module.
static __global__ void checksum_kernel(const unsigned char *p, unsigned long long n,
                                       unsigned long long *out)
{
    if (out == nullptr)
        return;
    unsigned long long words = n / 4;
    unsigned long long sum = 0;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long first = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    bool aligned = ((uintptr_t)p & 3u) == 0;
    for (unsigned long long i = first; i < words; i += stride) {
        unsigned int w;
        if (aligned)
            w = ((const unsigned int *)p)[i];
        else
            w = (unsigned int)p[4 * i] | (unsigned int)p[4 * i + 1] << 8 |
                (unsigned int)p[4 * i + 2] << 16 | (unsigned int)p[4 * i + 3] << 24;
        sum += checksum_weigh(i, w);
    }
    if (first < n % 4)
        sum += checksum_weigh(words + first, p[4 * words + first]);
    for (int off = 16; off > 0; off >>= 1)
        sum += __shfl_down_sync(0xffffffffu, sum, off);
    if ((threadIdx.x & 31) == 0)
        atomicAdd(out, sum);
}

#endif
