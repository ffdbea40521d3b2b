/*
 * Status files: one per endpoint, in the topic directory (status.c): identity, type and counters
 * for tools and peers, and liveness through the lock its owner holds.
 */
#ifndef FERRY_STATUS_H
#define FERRY_STATUS_H

#include <ferry/ferry.h>

#include <stdbool.h>
#include <stdint.h>

#define FERRY__STATUS_MAGIC 0x5441545359525246ULL /* "FRRYSTAT" */
#define FERRY__STATUS_SIZE 4096u

typedef struct ferry__status {
    uint64_t magic;
    uint32_t version;
    uint32_t kind; /* ferry_endpoint_kind */
    int32_t pid;
    uint32_t depth;
    uint64_t id;
    uint64_t type_hash;
    char topic[FERRY_TOPIC_MAX + 2];
    char type_name[FERRY_TYPE_NAME_MAX + 1];
    char node_name[FERRY_NODE_NAME_MAX + 1];
    ferry_publisher_stats pub;
    ferry_subscriber_stats sub;
    char note[FERRY_ENDPOINT_NOTE_MAX + 1]; /* ferry__endpoint_note; zero in a fresh file */
} ferry__status;

typedef struct ferry__status_file {
    int fd;
    ferry__status *map;
    char name[48];
} ferry__status_file;

ferry_err ferry__status_create(ferry__status_file *sf, int topic_dirfd, const char *prefix,
                               const ferry__status *initial, unsigned mode);
void ferry__status_remove(ferry__status_file *sf, int topic_dirfd);
/* Reads a status file (copy, strings terminated) and whether its owner is alive. */
ferry_err ferry__status_read(int topic_dirfd, const char *name, ferry__status *out, bool *alive);
/* Removes a dead endpoint's status file (and a publisher's socket). */
void ferry__status_remove_dead(int topic_dirfd, const char *name);
/* Entries one sweep looks at: a directory a hostile peer filled costs a bounded pass, and what
 * it does not reach is reached once the dead files before it are gone. */
#define FERRY__SWEEP_ENTRIES 256u
/* How old a temporary file or a socket without a status file must be before a sweep takes it
 * for the remains of a creation that died half-way: far longer than a creation takes. */
#define FERRY__SWEEP_ORPHAN_NS (10 * 1000000000LL)
/* Removes what dead endpoints left in a topic directory: status files whose lock went with their
 * process (with a dead publisher's socket), and temporary files and sockets without a status
 * file older than FERRY__SWEEP_ORPHAN_NS. Nothing of a live endpoint: its status file is locked
 * from before it appears. own (NULL for none): the sweeping endpoint's status file, whose files
 * are not looked at (each look at a status file is five system calls). Returns the files
 * removed. */
unsigned ferry__status_sweep(int topic_dirfd, const char *own);
/* FERRY_ETYPE when a live publisher of the topic directory has another type (subscribers do not
 * claim a topic). Removes the files of dead endpoints it meets. */
ferry_err ferry__status_check_type(int topic_dirfd, const char *type_name, uint64_t type_hash);

#endif
