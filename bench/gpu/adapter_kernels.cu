// The consumer kernel of the adapter benchmark: a checksum of a frame's body (the 32-bit words
// after its 64-byte header, summed into 64 bits) added into the frame's own slot. The sum does
// not depend on the order of the additions, so the host can check it against the pattern the
// camera wrote. No shared memory: warp shuffles, then one atomic per warp. The readers of other
// consumers (bench_adapter_read) first spin, as long as a slow model would take, on one block
// only (they hold little of the GPU while they wait), then read the frame the same way.
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#define ADAPTER_HEADER_BYTES 64
#define ADAPTER_THREADS 256
#define ADAPTER_BLOCKS 128

static __device__ __forceinline__ unsigned long long now_ns()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

static __global__ void checksum_kernel(const uint32_t *body, size_t words, unsigned long long *slot,
                                       unsigned long long spin_ns)
{
    if (spin_ns) {
        if (threadIdx.x == 0) {
            unsigned long long end = now_ns() + spin_ns;
            while (now_ns() < end) {
            }
        }
        __syncthreads();
    }
    unsigned long long acc = 0;
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    // body is 16-byte aligned (a device buffer plus 64): read four words at a time.
    const uint4 *v = (const uint4 *)body;
    size_t nv = words / 4;
    for (size_t i = tid; i < nv; i += stride) {
        uint4 x = v[i];
        acc += (unsigned long long)x.x + x.y + x.z + x.w;
    }
    for (size_t i = nv * 4 + tid; i < words; i += stride)
        acc += body[i];
    for (int off = 16; off > 0; off /= 2)
        acc += __shfl_down_sync(0xffffffffu, acc, off);
    if ((threadIdx.x & 31) == 0 && acc)
        atomicAdd(slot, acc);
}

extern "C" cudaError_t bench_adapter_checksum(const void *frame, size_t bytes,
                                              unsigned long long *slot, cudaStream_t stream)
{
    if (bytes <= ADAPTER_HEADER_BYTES)
        return cudaSuccess;
    const uint32_t *body = (const uint32_t *)((const char *)frame + ADAPTER_HEADER_BYTES);
    size_t words = (bytes - ADAPTER_HEADER_BYTES) / 4;
    checksum_kernel<<<ADAPTER_BLOCKS, ADAPTER_THREADS, 0, stream>>>(body, words, slot, 0);
    return cudaGetLastError();
}

extern "C" cudaError_t bench_adapter_read(const void *frame, size_t bytes, uint64_t spin_ns,
                                          unsigned long long *slot, cudaStream_t stream)
{
    if (bytes <= ADAPTER_HEADER_BYTES)
        return cudaSuccess;
    const uint32_t *body = (const uint32_t *)((const char *)frame + ADAPTER_HEADER_BYTES);
    size_t words = (bytes - ADAPTER_HEADER_BYTES) / 4;
    checksum_kernel<<<1, ADAPTER_THREADS, 0, stream>>>(body, words, slot, spin_ns);
    return cudaGetLastError();
}
