// Kernel of lifecycle_gpu_test: a position-weighted checksum of a buffer read on the device
// (device memory, or host pages mapped into the device), launched on a stream into a result
// word the caller owns, so the per-frame path allocates nothing.
#include <cuda_runtime.h>
#include <stdint.h>

#include "checksum.cuh"

// Zeroes *out, then adds the checksum of n bytes at p to it, on stream (asynchronous).
// out == NULL launches nothing but an empty kernel: the module is loaded and nothing is read.
extern "C" int lcg_checksum(const void *p, size_t n, unsigned long long *out, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    cudaError_t e;
    if (out && (e = cudaMemsetAsync(out, 0, sizeof *out, s)) != cudaSuccess)
        return (int)e;
    checksum_kernel<<<out ? 132 : 1, 256, 0, s>>>((const unsigned char *)p, (unsigned long long)n,
                                                  out);
    return (int)cudaGetLastError();
}
