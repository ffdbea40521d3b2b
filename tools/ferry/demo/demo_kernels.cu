// Kernel of `ferry demo`'s GPU consumer: the sum (mod 2^64) of a frame's 64-bit words, which the
// consumer compares with the same sum made on the CPU.
#include <cuda_runtime.h>

__global__ void demo_sum_kernel(const unsigned long long *p, unsigned long long words,
                                unsigned long long *sum)
{
    unsigned long long acc = 0;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < words; i += stride)
        acc += p[i];
    for (int off = 16; off > 0; off >>= 1)
        acc += __shfl_down_sync(0xffffffffu, acc, off);
    if ((threadIdx.x & 31) == 0)
        atomicAdd(sum, acc);
}

// Enqueues the kernel on stream: *sum (device memory, cleared by the caller) receives the sum of
// words 64-bit words at p (8-byte aligned). Returns the launch's cudaError_t as int.
extern "C" int demo_gpu_sum(const void *p, unsigned long long words, unsigned long long *sum,
                            int blocks, cudaStream_t stream)
{
    demo_sum_kernel<<<blocks, 256, 0, stream>>>((const unsigned long long *)p, words, sum);
    return (int)cudaGetLastError();
}
