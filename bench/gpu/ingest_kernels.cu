// Kernel of the ingest benchmark: reads a frame once, wherever it lies (device memory, or host
// pages mapped into the device), and adds its 32-bit words (then its trailing bytes) into *sum.
// Wide loads and many blocks keep enough reads in flight to fill the bus when the frame is in
// host memory.
#include <cuda_runtime.h>
#include <stdint.h>

__global__ void ingest_sum_kernel(const unsigned char *p, unsigned long long n,
                                  unsigned long long *sum)
{
    unsigned long long acc = 0;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long first = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long vectors = ((uintptr_t)p & 15u) == 0 ? n / 16 : 0;
    const uint4 *v = (const uint4 *)p;
    for (unsigned long long i = first; i < vectors; i += stride) {
        uint4 x = v[i];
        acc += (unsigned long long)x.x + x.y + x.z + x.w;
    }
    // What the vectors did not cover: whole words, then bytes.
    unsigned long long words = n / 4;
    for (unsigned long long i = vectors * 4 + first; i < words; i += stride) {
        const unsigned char *w = p + 4 * i;
        acc += (unsigned long long)((unsigned int)w[0] | (unsigned int)w[1] << 8 |
                                    (unsigned int)w[2] << 16 | (unsigned int)w[3] << 24);
    }
    if (first < n % 4)
        acc += p[4 * words + first];
    for (int off = 16; off > 0; off >>= 1)
        acc += __shfl_down_sync(0xffffffffu, acc, off);
    if ((threadIdx.x & 31) == 0 && acc)
        atomicAdd(sum, acc);
}

// Enqueues the kernel on stream; returns the launch's cudaError_t as int.
extern "C" int bench_ingest_sum(const void *p, size_t n, unsigned long long *sum, int blocks,
                                cudaStream_t stream)
{
    ingest_sum_kernel<<<blocks, 256, 0, stream>>>((const unsigned char *)p, (unsigned long long)n,
                                                  sum);
    return (int)cudaGetLastError();
}
