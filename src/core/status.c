/*
 * Status files: one small shared file per endpoint in its topic directory, holding identity,
 * type and counters. The owner keeps an exclusive lock on it for as long as it lives, so anyone
 * can tell a live endpoint from one whose process died (the lock goes with the process), with no
 * pid guessing. The owner writes counters with plain stores; readers copy and tolerate tearing.
 */
#include "core/core.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(sizeof(ferry__status) <= FERRY__STATUS_SIZE, "status must fit its file");

ferry_err ferry__status_create(ferry__status_file *sf, int topic_dirfd, const char *prefix,
                               const ferry__status *initial, unsigned mode)
{
    char tmp[64];
    snprintf(sf->name, sizeof sf->name, "%s.%016llx.status", prefix,
             (unsigned long long)initial->id);
    snprintf(tmp, sizeof tmp, ".%s.tmp", sf->name);
    int fd = openat(topic_dirfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return errno == ENOSPC || errno == ENOMEM ? FERRY_ENOMEM : FERRY_ESYS;
    ferry_err err = FERRY_ESYS;
    if (fchmod(fd, (mode_t)mode) != 0) /* not subject to the umask */
        goto fail;
    /* Its page is reserved before it is mapped and written: on a full tmpfs (anyone can fill
     * /dev/shm) the write would otherwise end the process with SIGBUS. */
    if (ftruncate(fd, FERRY__STATUS_SIZE) != 0 ||
        ferry__fd_reserve(fd, 0, FERRY__STATUS_SIZE) != 0) {
        err = errno == ENOSPC || errno == ENOMEM || errno == EDQUOT ? FERRY_ENOMEM : FERRY_ESYS;
        goto fail;
    }
    if (ferry__lock_exclusive(fd) != 0)
        goto fail;
    sf->map = ferry__map(fd, FERRY__STATUS_SIZE, true);
    if (!sf->map)
        goto fail;
    memcpy(sf->map, initial, sizeof *initial);
    /* Appears under its real name complete and locked. */
    if (renameat(topic_dirfd, tmp, topic_dirfd, sf->name) != 0) {
        ferry__unmap(sf->map, FERRY__STATUS_SIZE);
        goto fail;
    }
    sf->fd = fd;
    return FERRY_OK;
fail : {
    int e = errno;
    unlinkat(topic_dirfd, tmp, 0);
    close(fd);
    sf->map = NULL;
    errno = e;
    return err;
}
}

void ferry__status_remove(ferry__status_file *sf, int topic_dirfd)
{
    if (!sf->map)
        return;
    unlinkat(topic_dirfd, sf->name, 0);
    ferry__unmap(sf->map, FERRY__STATUS_SIZE);
    close(sf->fd);
    sf->map = NULL;
    sf->fd = -1;
}

static void terminate(char *s, size_t cap)
{
    s[cap - 1] = '\0';
}

/* Text another process wrote, shown on terminals: control characters become '?'. */
static void printable(char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            *s = '?';
}

ferry_err ferry__status_read(int topic_dirfd, const char *name, ferry__status *out, bool *alive)
{
    int fd = openat(topic_dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return FERRY_ESYS;
    ferry_err err = FERRY_EPROTO;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < (off_t)sizeof *out)
        goto done;
    if (pread(fd, out, sizeof *out, 0) != (ssize_t)sizeof *out)
        goto done;
    if (out->magic != FERRY__STATUS_MAGIC || out->version != FERRY_PROTOCOL_VERSION)
        goto done;
    terminate(out->topic, sizeof out->topic);
    terminate(out->type_name, sizeof out->type_name);
    terminate(out->node_name, sizeof out->node_name);
    terminate(out->note, sizeof out->note);
    printable(out->note);
    int held = ferry__lock_held_by_other(fd);
    *alive = held == 1;
    err = FERRY_OK;
done:
    close(fd);
    return err;
}

void ferry__status_remove_dead(int topic_dirfd, const char *name)
{
    size_t len = strlen(name);
    if (len < 8 || len >= 64 || strcmp(name + len - 7, ".status") != 0)
        return;
    unlinkat(topic_dirfd, name, 0);
    if (strncmp(name, "pub.", 4) == 0) {
        char sock[72];
        snprintf(sock, sizeof sock, "%.*s.sock", (int)(len - 7), name);
        unlinkat(topic_dirfd, sock, 0);
    }
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* Whether a file is older than FERRY__SWEEP_ORPHAN_NS (by its modification time, which only its
 * owner can set back; false when it is gone or not a plain file or socket). */
static bool orphan_old(int topic_dirfd, const char *name)
{
    struct stat st;
    struct timespec now;
    if (fstatat(topic_dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        !(S_ISREG(st.st_mode) || S_ISSOCK(st.st_mode)) || clock_gettime(CLOCK_REALTIME, &now) != 0)
        return false;
    int64_t age = (int64_t)(now.tv_sec - st.st_mtim.tv_sec) * 1000000000LL +
                  (now.tv_nsec - st.st_mtim.tv_nsec);
    return age > FERRY__SWEEP_ORPHAN_NS;
}

/* A publisher's socket whose status file is not there ("pub.<id>.sock" without
 * "pub.<id>.status"). */
static bool socket_without_status(int topic_dirfd, const char *name)
{
    size_t len = strlen(name);
    char status[80];
    if (strncmp(name, "pub.", 4) != 0 || len < 10 || len >= 64)
        return false;
    snprintf(status, sizeof status, "%.*s.status", (int)(len - 5), name);
    return faccessat(topic_dirfd, status, F_OK, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT;
}

/* What a sweep needs of a status file, read with little stack (it runs in housekeeping, deep in
 * a take or a wait): whether it starts as a status file of this version, and whether another
 * process holds its lock (true when that cannot be told). */
static void status_probe(int topic_dirfd, const char *name, bool *ours, bool *locked)
{
    *ours = false;
    *locked = true;
    int fd = openat(topic_dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return;
    /* No fstat: a FIFO or a directory fails the read, and a short file has no last byte. */
    struct {
        uint64_t magic;
        uint32_t version, kind;
    } head;
    char last;
    if (pread(fd, &head, sizeof head, 0) == (ssize_t)sizeof head &&
        pread(fd, &last, 1, (off_t)sizeof(ferry__status) - 1) == 1)
        *ours = head.magic == FERRY__STATUS_MAGIC && head.version == FERRY_PROTOCOL_VERSION;
    *locked = ferry__lock_held_by_other(fd) != 0;
    close(fd);
}

typedef struct sweep_ctx {
    int dirfd;
    unsigned removed;
    const char *own; /* the sweeper's status file name up to ".status", or NULL */
    size_t own_len;
} sweep_ctx;

static void sweep_entry(void *arg, const char *n)
{
    sweep_ctx *ctx = arg;
    if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0)
        return;
    /* The sweeper's own status file and socket: alive while it runs. */
    if (ctx->own && strncmp(n, ctx->own, ctx->own_len) == 0 && n[ctx->own_len] == '.')
        return;
    if (n[0] == '.') {
        if (ends_with(n, ".tmp") && orphan_old(ctx->dirfd, n) && unlinkat(ctx->dirfd, n, 0) == 0)
            ctx->removed++;
    } else if (ends_with(n, ".status")) {
        bool ours, locked;
        status_probe(ctx->dirfd, n, &ours, &locked);
        /* Unlocked: its process is gone. Ours at once; one that does not read as ours (another
         * version's, a peer's garbage) only when old. */
        if (!locked && (ours || orphan_old(ctx->dirfd, n))) {
            ferry__status_remove_dead(ctx->dirfd, n);
            ctx->removed++;
        }
    } else if (ends_with(n, ".sock") && socket_without_status(ctx->dirfd, n) &&
               orphan_old(ctx->dirfd, n) && unlinkat(ctx->dirfd, n, 0) == 0) {
        ctx->removed++;
    }
}

unsigned ferry__status_sweep(int topic_dirfd, const char *own)
{
    /* Without allocating (ferry__dir_each): it runs in housekeeping, also of a real-time loop. */
    sweep_ctx ctx = {topic_dirfd, 0, NULL, 0};
    if (own && ends_with(own, ".status")) {
        ctx.own = own;
        ctx.own_len = strlen(own) - strlen(".status");
    }
    ferry__dir_each(topic_dirfd, FERRY__SWEEP_ENTRIES, sweep_entry, &ctx);
    return ctx.removed;
}

ferry_err ferry__status_check_type(int topic_dirfd, const char *type_name, uint64_t type_hash)
{
    /* The topic's type is its publishers': only they are compared. */
    int fd = dup(topic_dirfd);
    if (fd < 0)
        return FERRY_ESYS;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return FERRY_ESYS;
    }
    rewinddir(d);
    ferry_err result = FERRY_OK;
    struct dirent *e;
    for (unsigned seen = 0; (e = readdir(d)) != NULL && seen < 4096; seen++) {
        if (e->d_name[0] == '.' || !ends_with(e->d_name, ".status"))
            continue;
        ferry__status st;
        bool alive = false;
        if (ferry__status_read(topic_dirfd, e->d_name, &st, &alive) != FERRY_OK)
            continue;
        if (!alive) {
            /* Its process died (the lock went with it): whoever finds the remains removes them,
             * so a crash loop cannot fill the directory. */
            ferry__status_remove_dead(topic_dirfd, e->d_name);
            continue;
        }
        if (st.kind == FERRY_ENDPOINT_PUBLISHER &&
            (st.type_hash != type_hash || strcmp(st.type_name, type_name) != 0)) {
            result = FERRY_ETYPE;
            break;
        }
    }
    closedir(d);
    return result;
}
