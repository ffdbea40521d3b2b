/*
 * Kernels of the device buffer cache test (cache_kernels.cu), callable from C. Each launches
 * asynchronously on stream and returns the launch error.
 */
#ifndef FERRY_TEST_CACHE_KERNELS_H
#define FERRY_TEST_CACHE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Writes value to words 32-bit words at p. */
cudaError_t ck_fill(uint32_t *p, size_t words, uint32_t value, cudaStream_t stream);

/* Spins for spin_ns of GPU time, then counts the words at p that differ from expect and adds
 * the count to *errors. One block: it occupies one SM, so other streams' work runs beside it. */
cudaError_t ck_spin_check(const uint32_t *p, size_t words, uint32_t expect, uint64_t spin_ns,
                          unsigned int *errors, cudaStream_t stream);

/* Spins for spin_ns, reads the words at p, then sets *flag (host-mapped memory) to 1 with a
 * system-wide fence: the host sees the flag once the kernel is over. */
cudaError_t ck_spin_flag(const uint32_t *p, size_t words, uint64_t spin_ns, int *flag,
                         cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
