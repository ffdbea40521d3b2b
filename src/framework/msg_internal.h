/*
 * What the typed frames' files (msg.c: images and point clouds; msg_sensor.c: camera infos,
 * compressed images, IMU samples) share: the checks every header goes through. No state;
 * callable from any thread.
 */
#ifndef FERRY_MSG_INTERNAL_H
#define FERRY_MSG_INTERNAL_H

#include <ferry/msg.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* v rounded up to FERRY_MSG_DATA_ALIGN. */
uint64_t ferry__msg_align_up(uint64_t v);
/* Whether s holds a NUL within its cap bytes. */
bool ferry__msg_terminated(const char *s, size_t cap);
/* Whether n bytes at p are all zero. */
bool ferry__msg_zero(const void *p, size_t n);
/* The placement of data_offset / data_size in a payload of size bytes. */
bool ferry__msg_data_inside(uint64_t header_size, uint64_t data_offset, uint64_t data_size,
                            size_t size);
/* Whether a header starts with magic, FERRY_MSG_VERSION and header_size == expected. */
bool ferry__msg_prefix_ok(const void *header, uint32_t magic, size_t expected);
/* Clears n bytes of out unless out is NULL. */
void ferry__msg_clear(void *out, size_t n);
/* Gives back an unpublished loan of any typed frame: loan points at its struct (loan_size
 * bytes, cleared on success), payload at the loaned chunk (NULL: FERRY_EINVAL). */
ferry_err ferry__msg_loan_release(ferry_publisher *pub, void *loan, size_t loan_size,
                                  void *payload);

#endif
