// Kernels of host_test: a position-weighted checksum of a buffer read in place (host memory
// mapped into the device, or device memory), and a kernel that writes through a pointer.
// C entry points return a cudaError_t as int; every one synchronises before it returns.
#include <cuda_runtime.h>
#include <stdint.h>

// Word i (little-endian 32-bit) contributes w * (2i + 1) + i; trailing bytes count as words
// of their own after the last full one. A sum modulo 2^64 does not depend on order, so the
// CPU's loop and the GPU's reduction agree exactly.
__device__ __forceinline__ unsigned long long weigh(unsigned long long i, unsigned int w)
{
    return (unsigned long long)w * (2ull * i + 1ull) + i;
}

__global__ void checksum_kernel(const unsigned char *p, unsigned long long n,
                                unsigned long long *out)
{
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
        sum += weigh(i, w);
    }
    if (first < n % 4)
        sum += weigh(words + first, p[4 * words + first]);
    for (int off = 16; off > 0; off >>= 1)
        sum += __shfl_down_sync(0xffffffffu, sum, off);
    if ((threadIdx.x & 31) == 0)
        atomicAdd(out, sum);
}

__global__ void write_kernel(unsigned char *p, unsigned long long n)
{
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] = (unsigned char)(p[i] ^ 0xffu);
}

static unsigned long long *scratch;

extern "C" int host_test_checksum(const void *ptr, size_t n, unsigned long long *out)
{
    cudaError_t e;
    if (!scratch && (e = cudaMalloc((void **)&scratch, sizeof *scratch)) != cudaSuccess)
        return (int)e;
    if ((e = cudaMemset(scratch, 0, sizeof *scratch)) != cudaSuccess)
        return (int)e;
    checksum_kernel<<<264, 256>>>((const unsigned char *)ptr, (unsigned long long)n, scratch);
    if ((e = cudaGetLastError()) != cudaSuccess)
        return (int)e;
    if ((e = cudaDeviceSynchronize()) != cudaSuccess)
        return (int)e;
    return (int)cudaMemcpy(out, scratch, sizeof *out, cudaMemcpyDeviceToHost);
}

// Frees what host_test_checksum kept between calls.
extern "C" void host_test_kernels_done(void)
{
    if (scratch)
        cudaFree(scratch);
    scratch = NULL;
}

// Flips the first n bytes (at most one page is enough to show the mapping is read-only).
extern "C" int host_test_write(const void *ptr, size_t n)
{
    write_kernel<<<(unsigned)((n + 255) / 256), 256>>>((unsigned char *)(uintptr_t)ptr,
                                                      (unsigned long long)n);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return (int)e;
    return (int)cudaDeviceSynchronize();
}
