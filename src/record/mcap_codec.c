/*
 * The serialising half of mcap_codec.h (a growing byte buffer of little-endian fields) and the
 * CRC both halves check.
 */
#include "mcap_codec.h"

#include <stdlib.h>
#ifdef FERRY_HAVE_ISAL
#include <isa-l/crc.h>
#else
#include <zlib.h>
#endif

uint32_t ferry__mcap_crc32(uint32_t crc, const void *p, size_t n)
{
#ifdef FERRY_HAVE_ISAL
    return crc32_gzip_refl(crc, p, (uint64_t)n);
#else
    const uint8_t *b = p;

    /* zlib takes uInt lengths. */
    while (n > 0) {
        uInt step = n > (1u << 30) ? (1u << 30) : (uInt)n;

        crc = (uint32_t)crc32(crc, b, step);
        b += step;
        n -= step;
    }
    return crc;
#endif
}

void ferry__mcap_buf_free(ferry__mcap_buf *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

bool ferry__mcap_buf_reserve(ferry__mcap_buf *b, size_t n)
{
    size_t cap;
    uint8_t *p;

    if (b->failed)
        return false;
    if (b->cap - b->len >= n)
        return true;
    if (n > SIZE_MAX / 2 - b->len) {
        b->failed = true;
        return false;
    }
    cap = b->cap ? b->cap : 256;
    while (cap - b->len < n)
        cap *= 2;
    p = realloc(b->p, cap);
    if (p == NULL) {
        b->failed = true;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

void ferry__mcap_put(ferry__mcap_buf *b, const void *p, size_t n)
{
    if (n == 0 || !ferry__mcap_buf_reserve(b, n))
        return;
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

static void put_le(ferry__mcap_buf *b, uint64_t v, unsigned n)
{
    uint8_t tmp[8];

    for (unsigned i = 0; i < n; i++)
        tmp[i] = (uint8_t)(v >> (8 * i));
    ferry__mcap_put(b, tmp, n);
}

void ferry__mcap_put_u8(ferry__mcap_buf *b, uint8_t v)
{
    put_le(b, v, 1);
}

void ferry__mcap_put_u16(ferry__mcap_buf *b, uint16_t v)
{
    put_le(b, v, 2);
}

void ferry__mcap_put_u32(ferry__mcap_buf *b, uint32_t v)
{
    put_le(b, v, 4);
}

void ferry__mcap_put_u64(ferry__mcap_buf *b, uint64_t v)
{
    put_le(b, v, 8);
}

void ferry__mcap_put_str(ferry__mcap_buf *b, const char *s)
{
    size_t n = strlen(s);

    ferry__mcap_put_u32(b, (uint32_t)n);
    ferry__mcap_put(b, s, n);
}

size_t ferry__mcap_record_begin(ferry__mcap_buf *b, uint8_t op)
{
    size_t at;

    ferry__mcap_put_u8(b, op);
    at = b->len;
    ferry__mcap_put_u64(b, 0);
    return at;
}

void ferry__mcap_record_end(ferry__mcap_buf *b, size_t at)
{
    if (b->failed)
        return;
    ferry__mcap_le64(b->p + at, (uint64_t)(b->len - at - 8));
}

size_t ferry__mcap_len32_begin(ferry__mcap_buf *b)
{
    size_t at = b->len;

    ferry__mcap_put_u32(b, 0);
    return at;
}

void ferry__mcap_len32_end(ferry__mcap_buf *b, size_t at)
{
    uint32_t n;

    if (b->failed)
        return;
    n = (uint32_t)(b->len - at - 4);
    for (int i = 0; i < 4; i++)
        b->p[at + (size_t)i] = (uint8_t)(n >> (8 * i));
}
