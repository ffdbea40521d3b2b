// Kernels of host_test: a position-weighted checksum of a buffer read in place (host memory
// mapped into the device, or device memory), and a kernel that writes through a pointer.
// C entry points return a cudaError_t as int; every one synchronises before it returns.
#include <cuda_runtime.h>
#include <stdint.h>

#include "checksum.cuh"

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
