/*
 * The synthetic frame of the ferry CLI (docs/cli.md), written out again for the plain DDS test
 * programs, which link no ferry code: a 64-byte header (magic, sequence, size, send time,
 * checksum), then words seed ^ (i * K) with the seed mixed from the sequence, and a 64-bit
 * checksum over everything after the header. Header-only; for tests.
 */
#ifndef BRIDGE_TEST_PATTERN_H
#define BRIDGE_TEST_PATTERN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define PAT_MAGIC 0x454d4152465952ULL
#define PAT_K 0x9e3779b97f4a7c15ULL
#define PAT_P1 0x9e3779b185ebca87ULL
#define PAT_P2 0xc2b2ae3d27d4eb4fULL
#define PAT_P3 0x165667b19e3779f9ULL
#define PAT_P4 0x85ebca77c2b2ae63ULL
#define PAT_P5 0x27d4eb2f165667c5ULL
#define PAT_HEADER 64u

static inline uint64_t pat_rotl(uint64_t x, unsigned r)
{
    return (x << r) | (x >> (64u - r));
}

static inline uint64_t pat_round(uint64_t acc, uint64_t in)
{
    return pat_rotl(acc + in * PAT_P2, 31) * PAT_P1;
}

static inline uint64_t pat_load(const unsigned char *p)
{
    uint64_t v;

    memcpy(&v, p, sizeof v);
    return v;
}

static inline uint64_t pat_mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

static inline uint64_t pat_sum(const unsigned char *p, size_t n)
{
    uint64_t v[4] = {PAT_P1 + PAT_P2, PAT_P2, 0, 0 - PAT_P1}, h;
    const unsigned char *end;
    size_t b;
    int k;

    for (b = 0; b < n / 32; b++, p += 32)
        for (k = 0; k < 4; k++)
            v[k] = pat_round(v[k], pat_load(p + 8 * k));
    if (n >= 32) {
        h = pat_rotl(v[0], 1) + pat_rotl(v[1], 7) + pat_rotl(v[2], 12) + pat_rotl(v[3], 18);
        for (k = 0; k < 4; k++)
            h = (h ^ pat_round(0, v[k])) * PAT_P1 + PAT_P4;
    } else {
        h = PAT_P5;
    }
    h += (uint64_t)n;
    end = p + n % 32;
    for (; p + 8 <= end; p += 8)
        h = pat_rotl(h ^ pat_round(0, pat_load(p)), 27) * PAT_P1 + PAT_P4;
    if (p < end) {
        uint64_t tail = 0;

        memcpy(&tail, p, (size_t)(end - p));
        h = pat_rotl(h ^ tail * PAT_P5, 23) * PAT_P2 + PAT_P3;
    }
    h ^= h >> 33;
    h *= PAT_P2;
    h ^= h >> 29;
    h *= PAT_P3;
    h ^= h >> 32;
    return h;
}

/* Fills a frame of n >= 64 bytes for sequence seq. */
static inline void pat_fill(unsigned char *f, size_t n, uint64_t seq, int64_t send_ns)
{
    uint64_t hdr[8] = {0}, seed = pat_mix(seq ^ PAT_MAGIC), step = 0;
    size_t i;

    for (i = PAT_HEADER; i + 8 <= n; i += 8, step += PAT_K) {
        uint64_t w = seed ^ step;

        memcpy(f + i, &w, 8);
    }
    if (i < n) {
        uint64_t w = seed ^ step;

        memcpy(f + i, &w, n - i);
    }
    hdr[0] = PAT_MAGIC;
    hdr[1] = seq;
    hdr[2] = (uint64_t)n;
    hdr[3] = (uint64_t)send_ns;
    hdr[4] = pat_sum(f + PAT_HEADER, n - PAT_HEADER);
    memcpy(f, hdr, sizeof hdr);
}

/* Checks magic, size, checksum and every pattern word; *seq receives the frame's sequence. */
static inline bool pat_verify(const unsigned char *f, size_t n, uint64_t *seq)
{
    uint64_t hdr[8], seed, step = 0;
    size_t i;

    if (f == NULL || n < PAT_HEADER)
        return false;
    memcpy(hdr, f, sizeof hdr);
    if (hdr[0] != PAT_MAGIC || hdr[2] != (uint64_t)n)
        return false;
    if (hdr[4] != pat_sum(f + PAT_HEADER, n - PAT_HEADER))
        return false;
    seed = pat_mix(hdr[1] ^ PAT_MAGIC);
    for (i = PAT_HEADER; i + 8 <= n; i += 8, step += PAT_K)
        if (pat_load(f + i) != (seed ^ step))
            return false;
    *seq = hdr[1];
    return true;
}

#endif
