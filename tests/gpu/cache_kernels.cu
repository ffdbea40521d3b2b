// Kernels of the device buffer cache test: writers, and readers that first spin for a while so
// that a buffer handed out again too early is overwritten under them.
#include "cache_kernels.h"

static __device__ __forceinline__ unsigned long long now_ns()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

static __device__ void spin(unsigned long long ns)
{
    if (threadIdx.x == 0) {
        unsigned long long end = now_ns() + ns;
        while (now_ns() < end) {
        }
    }
    __syncthreads();
}

static __global__ void fill_kernel(uint32_t *p, size_t words, uint32_t value)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < words; i += stride)
        p[i] = value;
}

static __global__ void spin_check_kernel(const uint32_t *p, size_t words, uint32_t expect,
                                         unsigned long long spin_ns, unsigned int *errors)
{
    spin(spin_ns);
    unsigned int bad = 0;
    for (size_t i = threadIdx.x; i < words; i += blockDim.x)
        bad += ((volatile const uint32_t *)p)[i] != expect;
    if (bad)
        atomicAdd(errors, bad);
}

static __global__ void spin_flag_kernel(const uint32_t *p, size_t words, unsigned long long spin_ns,
                                        int *flag)
{
    spin(spin_ns);
    uint32_t sum = 0;
    for (size_t i = threadIdx.x; i < words; i += blockDim.x)
        sum += ((volatile const uint32_t *)p)[i];
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence_system();
        // sum | 1 is never 0: the read cannot be optimised away and the flag always becomes
        // non-zero.
        *(volatile int *)flag = (int)(sum | 1u);
        __threadfence_system();
    }
}

extern "C" cudaError_t ck_fill(uint32_t *p, size_t words, uint32_t value, cudaStream_t stream)
{
    unsigned blocks = (unsigned)((words + 255) / 256);
    if (blocks > 1024)
        blocks = 1024;
    if (blocks == 0)
        blocks = 1;
    fill_kernel<<<blocks, 256, 0, stream>>>(p, words, value);
    return cudaGetLastError();
}

extern "C" cudaError_t ck_spin_check(const uint32_t *p, size_t words, uint32_t expect,
                                     uint64_t spin_ns, unsigned int *errors, cudaStream_t stream)
{
    spin_check_kernel<<<1, 256, 0, stream>>>(p, words, expect, spin_ns, errors);
    return cudaGetLastError();
}

extern "C" cudaError_t ck_spin_flag(const uint32_t *p, size_t words, uint64_t spin_ns, int *flag,
                                    cudaStream_t stream)
{
    spin_flag_kernel<<<1, 256, 0, stream>>>(p, words, spin_ns, flag);
    return cudaGetLastError();
}
