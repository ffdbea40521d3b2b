/*
 * The copying shared-memory bus of the ferry CLI (what a shared-memory DDS transport does): the
 * baseline of `ferry demo`'s camera pipeline and, with one ring and one reader, the shm-copy
 * transport of `ferry bench transport`.
 *
 * One ring of slots per writer in one MAP_SHARED mapping. A writer copies a message into the
 * next slot, overwriting the oldest (keep last: a slow reader loses messages, the writer never
 * waits); each reader copies messages out into its own buffer and counts what it lost. Slots are
 * guarded by a sequence word (a seqlock), so a message overwritten while being copied out is
 * counted as dropped, never delivered torn. Readers sleep on a futex doorbell of their own that
 * writers ring only when the reader is waiting.
 *
 * Concurrency: a bus is shared by processes forked after it was created; each ring has one
 * writer process, each reader index one reader process.
 */
#ifndef FERRY_CLI_SHMBUS_H
#define FERRY_CLI_SHMBUS_H

#include <stddef.h>
#include <stdint.h>

typedef struct cli_shm_bus cli_shm_bus;

/* Creates a bus before fork. NULL (after a message) on failure. */
cli_shm_bus *cli_shm_bus_create(uint32_t rings, uint32_t readers, uint32_t slots,
                                size_t slot_bytes);
void cli_shm_bus_destroy(cli_shm_bus *bus);

/* Writer of ring: copies size bytes (<= slot_bytes) into the ring and wakes waiting readers. */
int cli_shm_send(cli_shm_bus *bus, uint32_t ring, const void *data, size_t size);

/* Reader: copies the next message of any ring into dst (cap bytes). 0: *ring and *size are set;
 * 1: nothing within timeout_ns (negative waits for ever); -1: a message larger than cap. */
int cli_shm_recv(cli_shm_bus *bus, uint32_t reader, void *dst, size_t cap, uint32_t *ring,
                 size_t *size, int64_t timeout_ns);

/* Messages of ring that reader lost (overwritten before it copied them out). */
uint64_t cli_shm_dropped(const cli_shm_bus *bus, uint32_t reader, uint32_t ring);

/* Writes every slot now (zeros), so first-touch faults stay out of the first laps. */
void cli_shm_bus_prefault(cli_shm_bus *bus);

#endif
