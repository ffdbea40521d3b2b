// Kernels of the cross-process benchmark: a frame fill followed by a stamp of the GPU's global
// timer in the frame's first 8 bytes (the producer's work is done), and a probe, the reader's
// first kernel, that reads the timer at its start and subtracts the stamp; for the floor row, a
// stamp into host memory and a probe given the stamp.
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

// The floor's stamp: written to mapped host memory, which the producer reads once its stream is
// done, and the floor's probe, which gets the stamp as an argument.
static __global__ void xproc_stamp_host_kernel(volatile uint64_t *dst)
{
    *dst = global_ns();
}

static __global__ void xproc_probe_at_kernel(uint64_t stamp, int64_t *out)
{
    *out = (int64_t)(global_ns() - stamp);
}

extern "C" int bench_xproc_stamp_host(void *mapped, void *stream)
{
    xproc_stamp_host_kernel<<<1, 1, 0, (cudaStream_t)stream>>>((volatile uint64_t *)mapped);
    return (int)cudaGetLastError();
}

extern "C" int bench_xproc_probe_at(uint64_t stamp, int64_t *out, void *stream)
{
    xproc_probe_at_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(stamp, out);
    return (int)cudaGetLastError();
}

extern "C" int bench_xproc_probe(const void *frame, int64_t *out, void *stream)
{
    xproc_probe_kernel<<<1, 1, 0, (cudaStream_t)stream>>>((const uint64_t *)frame, out);
    return (int)cudaGetLastError();
}
