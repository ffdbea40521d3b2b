/*
 * What the GPU tests share: a check of CUDA runtime calls, and the position-weighted checksum
 * that the CPU computes to compare with the device's (tests/gpu/checksum.cuh).
 */
#ifndef FERRY_TESTS_GPU_TESTUTIL_H
#define FERRY_TESTS_GPU_TESTUTIL_H

#include "testutil.h"

#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

/* Fails the test, naming the call and the error, unless expr returns cudaSuccess. */
#define CUDA_OK(expr)                                                                              \
    do {                                                                                           \
        cudaError_t cu_e_ = (cudaError_t)(expr);                                                   \
        TU_CHECK_MSG(cu_e_ == cudaSuccess, "%s: %s (%s)", #expr, cudaGetErrorName(cu_e_),          \
                     cudaGetErrorString(cu_e_));                                                   \
    } while (0)

/* Word i (little-endian 32-bit) contributes w * (2i + 1) + i; trailing bytes count as words of
 * their own after the last full one. A sum modulo 2^64 does not depend on order, so this loop
 * and the device's reduction agree exactly. */
static inline unsigned long long tu_weighted_checksum(const void *data, size_t n)
{
    const unsigned char *p = data;
    unsigned long long words = n / 4, sum = 0;
    for (unsigned long long i = 0; i < words; i++) {
        uint32_t w;
        memcpy(&w, p + 4 * i, 4);
        sum += (unsigned long long)w * (2 * i + 1) + i;
    }
    for (unsigned long long j = 0; j < n % 4; j++)
        sum += (unsigned long long)p[4 * words + j] * (2 * (words + j) + 1) + words + j;
    return sum;
}

#endif
