/* Node: the context of publishers and subscribers of one domain. */
#include "core/core.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GRAVE_MAX 256 /* destroyed handles remembered per node */

void ferry_node_options_init(ferry_node_options *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->log_level = FERRY_LOG_WARN;
}

static void list_init(ferry__obj *head)
{
    head->next = head->prev = head;
}

static void list_unlink(ferry__obj *o)
{
    o->prev->next = o->next;
    o->next->prev = o->prev;
    o->next = o->prev = o;
}

static void list_push(ferry__obj *head, ferry__obj *o)
{
    o->next = head->next;
    o->prev = head;
    head->next->prev = o;
    head->next = o;
}

static const char *file_kind(uint32_t type)
{
    switch (type) {
    case S_IFLNK:
        return "symbolic link";
    case S_IFREG:
        return "regular file";
    case S_IFIFO:
        return "FIFO";
    case S_IFSOCK:
        return "socket";
    case S_IFCHR:
        return "character device";
    case S_IFBLK:
        return "block device";
    default:
        return "directory";
    }
}

/* Opens (creating when missing) one directory of the domain's path, name relative to at; when it
 * cannot, says what is there and what to do. */
static int open_checked(ferry_node *node, int at, const char *name, const char *path,
                        int64_t share_gid)
{
    ferry__dir_found f;
    int fd = ferry__dir_open_checked(at, name, share_gid, &f);
    if (fd >= 0)
        return fd;
    int e = errno;
    static const char todo[] = "remove it (as its owner, or root) or give ferry another "
                               "directory (the node option dir; FERRY_DIR or --dir for the "
                               "commands)";
    if (e == ENOENT)
        ferry__log(node, FERRY_LOG_ERROR,
                   "cannot create %s: its parent directory does not exist (ferry creates only "
                   "the directory it is given)",
                   path);
    else if (e == ENOTDIR && f.exists)
        ferry__log(node, FERRY_LOG_ERROR,
                   "%s is a %s, not a directory (owner uid %u, mode %04o): %s", path,
                   file_kind(f.type), f.uid, f.mode, todo);
    else if (e == EACCES && f.exists)
        ferry__log(node, FERRY_LOG_ERROR,
                   "%s belongs to uid %u, group %u, mode %04o, and this process (uid %u) may not "
                   "enter it: %s",
                   path, f.uid, f.gid, f.mode, (unsigned)geteuid(), todo);
    else if (e == EPERM && f.exists && share_gid >= 0)
        ferry__log(node, FERRY_LOG_ERROR,
                   "%s belongs to uid %u, group %u, mode %04o; ferry needs one of uid %u or of "
                   "group %lld with rwx, and nothing for others: %s",
                   path, f.uid, f.gid, f.mode, (unsigned)geteuid(), (long long)share_gid, todo);
    else if (e == EPERM && f.exists)
        ferry__log(node, FERRY_LOG_ERROR,
                   "%s belongs to uid %u, group %u, mode %04o; ferry needs a directory of its own "
                   "(uid %u, nothing for others): %s",
                   path, f.uid, f.gid, f.mode, (unsigned)geteuid(), todo);
    else
        ferry__log(node, FERRY_LOG_ERROR, "cannot open %s: %s", path, strerror(e));
    errno = e;
    return -1;
}

ferry_err ferry_node_create(ferry_node **out, const ferry_node_options *options)
{
    if (!out)
        return FERRY_EINVAL;
    ferry_node_options o;
    if (options)
        o = *options;
    else
        ferry_node_options_init(&o);
    if (o.domain > FERRY_DOMAIN_MAX)
        return FERRY_EINVAL;
    const char *name = o.name ? o.name : "node";
    ferry_err err = ferry__node_name_validate(name);
    if (err)
        return err;
    if (o.log_level == 0)
        o.log_level = FERRY_LOG_WARN;
    if (o.log_level < FERRY_LOG_ERROR || o.log_level > FERRY_LOG_DEBUG)
        return FERRY_EINVAL;

    ferry_node *node = calloc(1, sizeof *node);
    if (!node)
        return FERRY_ENOMEM;
    node->dirfd = -1;
    snprintf(node->name, sizeof node->name, "%s", name);
    node->domain = o.domain;
    node->log = o.log;
    node->log_arg = o.log_arg;
    node->log_level = o.log_level;
    node->allow_gid = o.share_with_group ? (int64_t)o.share_gid : -1;
    char root[PATH_MAX], domain[16];
    if ((err = ferry__root_path(o.dir, root, sizeof root)) ||
        (err = ferry__domain_path(o.dir, o.domain, node->path, sizeof node->path)))
        goto fail;
    snprintf(domain, sizeof domain, "%u", o.domain);
    int root_fd = open_checked(node, AT_FDCWD, root, root, node->allow_gid);
    if (root_fd >= 0) {
        node->dirfd = open_checked(node, root_fd, domain, node->path, node->allow_gid);
        int e = errno;
        close(root_fd);
        errno = e;
    }
    if (node->dirfd < 0) {
        err = errno == EPERM || errno == EACCES || errno == ENOTDIR || errno == ELOOP ? FERRY_EPERM
                                                                                      : FERRY_ESYS;
        goto fail;
    }
    pthread_mutex_init(&node->lock, NULL);
    list_init(&node->live);
    list_init(&node->grave);
    node->magic = FERRY__NODE_MAGIC;
    *out = node;
    return FERRY_OK;
fail : {
    int e = errno;
    free(node);
    errno = e;
    return err;
}
}

ferry_err ferry_node_destroy(ferry_node *node)
{
    if (!node || node->magic != FERRY__NODE_MAGIC)
        return FERRY_EINVAL;
    pthread_mutex_lock(&node->lock);
    if (node->live_count > 0) {
        pthread_mutex_unlock(&node->lock);
        return FERRY_EBUSY;
    }
    while (node->grave.next != &node->grave) {
        ferry__obj *o = node->grave.next;
        list_unlink(o);
        free(o);
    }
    node->magic = FERRY__DEAD_MAGIC;
    pthread_mutex_unlock(&node->lock);
    pthread_mutex_destroy(&node->lock);
    close(node->dirfd);
    free(node);
    return FERRY_OK;
}

const char *ferry_node_dir(const ferry_node *node)
{
    if (!node || node->magic != FERRY__NODE_MAGIC)
        return NULL;
    return node->path;
}

void ferry__log(ferry_node *node, ferry_log_level level, const char *fmt, ...)
{
    if (!node || level > node->log_level)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (node->log)
        node->log(node->log_arg, level, msg);
    else
        fprintf(stderr, "ferry: %s\n", msg);
}

void ferry__log_peer(ferry_node *node, ferry__ratelimit *rl, ferry_log_level level, const char *fmt,
                     ...)
{
    if (!node || level > node->log_level)
        return;
    /* used counts lines taken from a full bucket, so that a zeroed limiter starts full. */
    int64_t now = ferry__clock_ns();
    int64_t refill = (now - rl->last) / (1000000000 / FERRY__PEER_LOG_PER_S);
    if (refill > 0) {
        rl->used = refill >= rl->used ? 0 : rl->used - (uint32_t)refill;
        rl->last = now;
    }
    if (rl->used >= FERRY__PEER_LOG_BURST) {
        rl->left_out++;
        return;
    }
    rl->used++;
    if (rl->left_out) {
        ferry__log(node, FERRY_LOG_WARN, "%u messages about misbehaving peers were left out",
                   rl->left_out);
        rl->left_out = 0;
    }
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ferry__log(node, level, "%s", msg);
}

ferry_err ferry__node_check(const ferry_node *node)
{
    if (!node)
        return FERRY_EINVAL;
    if (node->magic == FERRY__DEAD_MAGIC)
        return FERRY_ECLOSED;
    return node->magic == FERRY__NODE_MAGIC ? FERRY_OK : FERRY_EINVAL;
}

ferry_err ferry__node_adopt(ferry_node *node, ferry__obj *obj, uint64_t magic)
{
    if (!node || node->magic != FERRY__NODE_MAGIC)
        return FERRY_ECLOSED;
    pthread_mutex_lock(&node->lock);
    obj->magic = magic;
    list_push(&node->live, obj);
    node->live_count++;
    pthread_mutex_unlock(&node->lock);
    return FERRY_OK;
}

void ferry__node_bury(ferry_node *node, ferry__obj *obj)
{
    pthread_mutex_lock(&node->lock);
    list_unlink(obj);
    node->live_count--;
    obj->magic = FERRY__DEAD_MAGIC;
    list_push(&node->grave, obj);
    if (++node->grave_count > GRAVE_MAX) {
        ferry__obj *oldest = node->grave.prev;
        list_unlink(oldest);
        free(oldest);
        node->grave_count--;
    }
    pthread_mutex_unlock(&node->lock);
}

int ferry__node_topic_dir(ferry_node *node, const char *dirname)
{
    /* A sweep may remove the directory, empty, between its mkdir and its open: made again. */
    for (int attempt = 0;; attempt++) {
        int fd = ferry__dir_open_checked(node->dirfd, dirname, node->allow_gid, NULL);
        if (fd >= 0 || errno != ENOENT || attempt == FERRY__TOPIC_DIR_ATTEMPTS)
            return fd;
    }
}

void ferry__node_topic_dir_remove(ferry_node *node, const char *dirname)
{
    int e = errno;
    unlinkat(node->dirfd, dirname, AT_REMOVEDIR); /* ENOTEMPTY: someone is there */
    errno = e;
}

/* A topic directory of the domain: its dead endpoints' files go, then the directory if that left
 * it empty. Names that are not directories fail the open. */
static void sweep_topic(void *arg, const char *name)
{
    ferry_node *node = arg;
    if (name[0] == '.')
        return;
    int tfd = openat(node->dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (tfd < 0)
        return;
    ferry__status_sweep(tfd, NULL);
    close(tfd);
    ferry__node_topic_dir_remove(node, name);
}

void ferry__node_sweep_domain(ferry_node *node)
{
    int64_t now = ferry__clock_ns();
    int64_t next = atomic_load_explicit(&node->next_sweep, memory_order_relaxed);
    /* One thread of the process sweeps at a time; the others go on. */
    if (now < next || !atomic_compare_exchange_strong_explicit(
                          &node->next_sweep, &next, now + FERRY__DOMAIN_SWEEP_NS,
                          memory_order_relaxed, memory_order_relaxed))
        return;
    /* On a descriptor of its own: ferry__dir_each moves the offset of the one it reads. */
    int fd = openat(node->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return;
    ferry__dir_each(fd, FERRY__SWEEP_ENTRIES, sweep_topic, node);
    close(fd);
}

bool ferry__node_peer_allowed(const ferry_node *node, int sock, uid_t uid)
{
    /* The same user, or root (which can read any process's memory anyway), or, when the node
     * shares, a member of its group. */
    if (uid == geteuid() || uid == 0)
        return true;
    return node->allow_gid >= 0 && ferry__peer_in_group(sock, (gid_t)node->allow_gid) == 1;
}

unsigned ferry__node_file_mode(const ferry_node *node, bool writable_by_group)
{
    if (node->allow_gid < 0)
        return 0600;
    return writable_by_group ? 0660 : 0640;
}
