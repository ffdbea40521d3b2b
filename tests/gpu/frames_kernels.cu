// Kernels of the device-frame test: a frame pattern derived from the sequence number, a checksum
// of a frame beside the checksum the pattern should give (optionally after a spin, to play a slow
// reader), and a write through a frame pointer (which must fault on a read-only import).
#include <cuda_runtime.h>
#include <stdint.h>

struct frames_result {
    unsigned long long sum;        // over the frame's words
    unsigned long long expect;     // over the pattern of seq
    unsigned long long mismatches; // words that differ
};

static __device__ uint32_t pattern(uint64_t seq, uint64_t j)
{
    uint64_t x = seq * 0x9E3779B97F4A7C15ull + (j + 1) * 0xBF58476D1CE4E5B9ull;
    x ^= x >> 31;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 29;
    return (uint32_t)x;
}

static __device__ uint64_t now_ns()
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

static __device__ void spin(uint64_t ns)
{
    if (!ns)
        return;
    if (threadIdx.x == 0) {
        uint64_t t0 = now_ns();
        while (now_ns() - t0 < ns) {
        }
    }
    __syncthreads();
}

static __global__ void fill_kernel(uint32_t *dst, size_t words, uint64_t seq, uint64_t spin_ns)
{
    spin(spin_ns);
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < words;
         j += (size_t)gridDim.x * blockDim.x)
        dst[j] = pattern(seq, j);
}

static __global__ void check_kernel(const uint32_t *src, size_t words, uint64_t seq,
                                    uint64_t spin_ns, frames_result *out)
{
    spin(spin_ns);
    unsigned long long s = 0, e = 0, m = 0;
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < words;
         j += (size_t)gridDim.x * blockDim.x) {
        uint32_t w = src[j];
        uint32_t p = pattern(seq, j);
        s += (unsigned long long)w * (2 * j + 1);
        e += (unsigned long long)p * (2 * j + 1);
        m += w != p;
    }
    atomicAdd(&out->sum, s);
    atomicAdd(&out->expect, e);
    atomicAdd(&out->mismatches, m);
}

static __global__ void write_kernel(uint32_t *dst)
{
    dst[threadIdx.x] = 0xdeadbeefu;
}

// 264 blocks of 256 threads: resident at once on an H100/H200, so a spin lasts spin_ns once.
#define GRID 264
#define BLOCK 256

extern "C" int frames_fill(void *dst, size_t bytes, uint64_t seq, uint64_t spin_ns, void *stream)
{
    fill_kernel<<<GRID, BLOCK, 0, (cudaStream_t)stream>>>((uint32_t *)dst, bytes / 4, seq, spin_ns);
    return (int)cudaGetLastError();
}

extern "C" int frames_check(const void *src, size_t bytes, uint64_t seq, uint64_t spin_ns,
                            void *dev_result, void *stream)
{
    cudaError_t e = cudaMemsetAsync(dev_result, 0, sizeof(frames_result), (cudaStream_t)stream);
    if (e != cudaSuccess)
        return (int)e;
    check_kernel<<<GRID, BLOCK, 0, (cudaStream_t)stream>>>((const uint32_t *)src, bytes / 4, seq,
                                                           spin_ns, (frames_result *)dev_result);
    return (int)cudaGetLastError();
}

extern "C" int frames_write(const void *dst, void *stream)
{
    write_kernel<<<1, 32, 0, (cudaStream_t)stream>>>((uint32_t *)(uintptr_t)dst);
    return (int)cudaGetLastError();
}
