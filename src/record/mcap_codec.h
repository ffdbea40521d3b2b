/*
 * The little-endian fields of MCAP records, for the writer and the reader (mcap_write.c,
 * mcap_read.c): a growing buffer that serialises, and a bounded cursor that parses. A cursor that
 * runs past its end sets failed and from then on yields zeros and empty strings, so a parser
 * checks once after a record. No state beyond the structs; any thread.
 */
#ifndef FERRY_MCAP_CODEC_H
#define FERRY_MCAP_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The CRC-32 of MCAP (zlib's, the IEEE polynomial, reflected): crc continued over n bytes at p;
 * 0 starts one. ISA-L's folding implementation where the build has it (12 GB/s against zlib's
 * 0.94 GB/s on the benchmark machine), zlib's otherwise; both give the same values. */
uint32_t ferry__mcap_crc32(uint32_t crc, const void *p, size_t n);

/* ---- serialising ---------------------------------------------------------------------------- */

typedef struct ferry__mcap_buf {
    uint8_t *p;
    size_t len, cap;
    bool failed; /* an allocation failed: the contents are incomplete */
} ferry__mcap_buf;

void ferry__mcap_buf_free(ferry__mcap_buf *b);
/* Room for n more bytes; false (and failed set) when out of memory. */
bool ferry__mcap_buf_reserve(ferry__mcap_buf *b, size_t n);
void ferry__mcap_put(ferry__mcap_buf *b, const void *p, size_t n);
void ferry__mcap_put_u8(ferry__mcap_buf *b, uint8_t v);
void ferry__mcap_put_u16(ferry__mcap_buf *b, uint16_t v);
void ferry__mcap_put_u32(ferry__mcap_buf *b, uint32_t v);
void ferry__mcap_put_u64(ferry__mcap_buf *b, uint64_t v);
/* A string: its uint32 length, then its bytes. */
void ferry__mcap_put_str(ferry__mcap_buf *b, const char *s);
/* Starts a record (opcode, a length to patch); returns the position to pass to _end. */
size_t ferry__mcap_record_begin(ferry__mcap_buf *b, uint8_t op);
void ferry__mcap_record_end(ferry__mcap_buf *b, size_t at);
/* Starts a uint32 byte-length prefix (of a map or an array); _end patches it. */
size_t ferry__mcap_len32_begin(ferry__mcap_buf *b);
void ferry__mcap_len32_end(ferry__mcap_buf *b, size_t at);

static inline void ferry__mcap_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* ---- parsing -------------------------------------------------------------------------------- */

typedef struct ferry__mcap_cur {
    const uint8_t *p;
    size_t left;
    bool failed;
} ferry__mcap_cur;

static inline ferry__mcap_cur ferry__mcap_cur_make(const void *p, size_t n)
{
    ferry__mcap_cur c = {(const uint8_t *)p, n, false};
    return c;
}

static inline bool ferry__mcap_need(ferry__mcap_cur *c, size_t n)
{
    if (c->failed || c->left < n) {
        c->failed = true;
        c->left = 0;
        return false;
    }
    return true;
}

static inline uint64_t ferry__mcap_get_le(ferry__mcap_cur *c, unsigned n)
{
    uint64_t v = 0;

    if (!ferry__mcap_need(c, n))
        return 0;
    for (unsigned i = 0; i < n; i++)
        v |= (uint64_t)c->p[i] << (8 * i);
    c->p += n;
    c->left -= n;
    return v;
}

static inline uint8_t ferry__mcap_get_u8(ferry__mcap_cur *c)
{
    return (uint8_t)ferry__mcap_get_le(c, 1);
}
static inline uint16_t ferry__mcap_get_u16(ferry__mcap_cur *c)
{
    return (uint16_t)ferry__mcap_get_le(c, 2);
}
static inline uint32_t ferry__mcap_get_u32(ferry__mcap_cur *c)
{
    return (uint32_t)ferry__mcap_get_le(c, 4);
}
static inline uint64_t ferry__mcap_get_u64(ferry__mcap_cur *c)
{
    return ferry__mcap_get_le(c, 8);
}

/* n bytes in place (NULL when they are not there). */
static inline const uint8_t *ferry__mcap_get_bytes(ferry__mcap_cur *c, uint64_t n)
{
    const uint8_t *p;

    if (n > SIZE_MAX || !ferry__mcap_need(c, (size_t)n))
        return NULL;
    p = c->p;
    c->p += n;
    c->left -= (size_t)n;
    return p;
}

/* A sub-cursor over a uint32-length-prefixed map or array. */
static inline ferry__mcap_cur ferry__mcap_get_len32(ferry__mcap_cur *c)
{
    uint32_t n = ferry__mcap_get_u32(c);
    const uint8_t *p = ferry__mcap_get_bytes(c, n);
    ferry__mcap_cur sub = {p, p != NULL ? n : 0, p == NULL};

    return sub;
}

#endif
