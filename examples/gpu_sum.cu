// The kernel of gpu_consumer: the sum of n bytes, one atomic add per warp.
#include <cuda_runtime.h>
#include <stddef.h>

__global__ static void sum_bytes(const unsigned char *p, size_t n, unsigned long long *out)
{
    unsigned long long sum = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        sum += p[i];
    for (int off = 16; off > 0; off >>= 1)
        sum += __shfl_down_sync(0xffffffffu, sum, off);
    if ((threadIdx.x & 31) == 0)
        atomicAdd(out, sum);
}

// Enqueues *out = the sum of p[0..n) on stream; returns the launch's error.
extern "C" cudaError_t gpu_sum_bytes(const void *p, size_t n, unsigned long long *out, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    cudaMemsetAsync(out, 0, sizeof *out, s);
    sum_bytes<<<256, 256, 0, s>>>((const unsigned char *)p, n, out);
    return cudaGetLastError();
}
