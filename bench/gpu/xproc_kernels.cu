// Kernels of the cross-process benchmark: a frame fill followed by a stamp of the GPU's global
// timer in the frame's first 8 bytes (the producer's work is done), and a probe, the reader's
// first kernel, that reads the timer at its start and subtracts the stamp.
#include <cuda_runtime.h>
#include <stdint.h>

static __device__ uint64_t global_ns()
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

static __global__ void xproc_fill_kernel(uint32_t *dst, size_t words, uint32_t seq)
{
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < words;
         j += (size_t)gridDim.x * blockDim.x)
        dst[j] = seq ^ (uint32_t)j;
}

static __global__ void xproc_stamp_kernel(uint64_t *dst)
{
    dst[0] = global_ns();
}

static __global__ void xproc_probe_kernel(const uint64_t *frame, int64_t *out)
{
    uint64_t start = global_ns();
    *out = (int64_t)(start - frame[0]);
}

extern "C" int bench_xproc_fill(void *dst, size_t bytes, uint32_t seq, void *stream)
{
    xproc_fill_kernel<<<264, 256, 0, (cudaStream_t)stream>>>((uint32_t *)dst, bytes / 4, seq);
    xproc_stamp_kernel<<<1, 1, 0, (cudaStream_t)stream>>>((uint64_t *)dst);
    return (int)cudaGetLastError();
}

extern "C" int bench_xproc_probe(const void *frame, int64_t *out, void *stream)
{
    xproc_probe_kernel<<<1, 1, 0, (cudaStream_t)stream>>>((const uint64_t *)frame, out);
    return (int)cudaGetLastError();
}
