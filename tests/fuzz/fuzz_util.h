/*
 * Support shared by the fuzz targets: a private domain directory, the mappings of this process
 * (/proc/self/maps), descriptor counts, a byte reader over the input, the counters of a
 * connection segment, and a hard failure that libFuzzer reports as a crash. Single-threaded,
 * like the targets.
 */
#ifndef FERRY_FUZZ_UTIL_H
#define FERRY_FUZZ_UTIL_H

#include <ferry/ferry.h>

#include "core/conn.h"

#include <dirent.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* An invariant of the library broke: report it and crash, so the fuzzer keeps the input. */
#define FZ_ASSERT(cond)                                                                            \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond);           \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* Reads the input front to back; past the end it yields zeros. */
typedef struct fz_reader {
    const uint8_t *p;
    size_t left;
} fz_reader;

static inline bool fz_more(const fz_reader *r)
{
    return r->left > 0;
}

static inline uint8_t fz_u8(fz_reader *r)
{
    if (r->left == 0)
        return 0;
    r->left--;
    return *r->p++;
}

static inline uint16_t fz_u16(fz_reader *r)
{
    uint16_t lo = fz_u8(r);
    return (uint16_t)(lo | (uint16_t)fz_u8(r) << 8);
}

static inline uint64_t fz_u64(fz_reader *r)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)fz_u8(r) << (8 * i);
    return v;
}

/* Up to n bytes into out; returns how many there were. */
static inline size_t fz_bytes(fz_reader *r, void *out, size_t n)
{
    if (n > r->left)
        n = r->left;
    memcpy(out, r->p, n);
    r->p += n;
    r->left -= n;
    return n;
}

#include <unistd.h>

/* Lists this process's descriptors on stderr, to tell which one leaked. */
static inline void fz_fd_dump(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char path[300], target[300];
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(path, target, sizeof target - 1);
        target[n > 0 ? n : 0] = '\0';
        fprintf(stderr, "  fd %s -> %s\n", e->d_name, target);
    }
    closedir(d);
}

static inline int fz_fd_count(void)
{
    DIR *d = opendir("/proc/self/fd");
    FZ_ASSERT(d != NULL);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

typedef struct fz_map {
    uint8_t *start;
    size_t len;
} fz_map;

/* Finds up to cap mappings whose line in /proc/self/maps contains needle and has permissions
 * perms ("rw-s", "r--s"); returns how many there are. */
static inline int fz_find_maps(const char *needle, const char *perms, fz_map *out, int cap)
{
    FILE *f = fopen("/proc/self/maps", "r");
    FZ_ASSERT(f != NULL);
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        unsigned long start, end;
        char p[8];
        if (strstr(line, needle) == NULL || sscanf(line, "%lx-%lx %7s", &start, &end, p) != 3 ||
            strcmp(p, perms) != 0)
            continue;
        if (n < cap) {
            out[n].start = (uint8_t *)start;
            out[n].len = end - start;
        }
        n++;
    }
    fclose(f);
    return n;
}

static inline int fz_rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static inline void fz_rmrf(const char *path)
{
    nftw(path, fz_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* One of a connection segment's five ring counters, by number (any value picks one). */
static inline _Atomic uint64_t *fz_conn_counter(ferry__conn_header *h, unsigned which)
{
    switch (which % 5) {
    case 0:
        return &h->deliver_head;
    case 1:
        return &h->deliver_tail;
    case 2:
        return &h->return_head;
    case 3:
        return &h->return_tail;
    default:
        return &h->dropped;
    }
}

/* Swallows the library's diagnostics: hostile input makes many, by design. */
static inline void fz_log_quiet(void *arg, ferry_log_level level, const char *message)
{
    (void)arg;
    (void)level;
    (void)message;
}

/* A node of its own in a new private root (root receives its path, 64 bytes), logging nowhere:
 * each fuzz mode makes one, once, and removes the root at exit. */
static inline ferry_node *fz_node(char *root, uint32_t domain, const char *name)
{
    snprintf(root, 64, "/tmp/ferry-fuzz-XXXXXX");
    FZ_ASSERT(mkdtemp(root) != NULL);
    ferry_node_options no;
    ferry_node_options_init(&no);
    no.dir = root;
    no.domain = domain;
    no.name = name;
    no.log = fz_log_quiet;
    ferry_node *node = NULL;
    FZ_ASSERT(ferry_node_create(&node, &no) == FERRY_OK);
    return node;
}

#endif
