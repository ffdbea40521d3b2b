/* Introspection and clean-up of a domain directory, for tools. Reads status files only. */
#include "core/core.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define WALK_MAX 4096 /* entries looked at per directory */

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* Called with the domain directory's descriptor, then the topic directory's. */
typedef bool (*topic_fn)(void *arg, int domain_fd, int dirfd, const char *dirname);

static ferry_err walk_topics(const char *dir, uint32_t domain, const char *topic, topic_fn fn,
                             void *arg)
{
    char path[PATH_MAX];
    ferry_err err = ferry__domain_path(dir, domain, path, sizeof path);
    if (err)
        return err;
    char want[FERRY_TOPIC_MAX + 2];
    if (topic && (err = ferry__topic_normalize(topic, NULL, 0, want, sizeof want)))
        return err;
    /* Opened once, not followed through a link; the topics are reached relative to it. */
    int dfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return errno == ENOENT                      ? FERRY_OK
               : errno == ELOOP || errno == ENOTDIR ? FERRY_EPERM
                                                    : FERRY_ESYS;
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return FERRY_ESYS;
    }
    struct dirent *e;
    for (unsigned seen = 0; (e = readdir(d)) != NULL && seen < WALK_MAX; seen++) {
        if (e->d_name[0] == '.')
            continue;
        if (topic && strcmp(e->d_name, want) != 0)
            continue;
        int fd = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            continue;
        bool go_on = fn(arg, dirfd(d), fd, e->d_name);
        close(fd);
        if (!go_on)
            break;
    }
    closedir(d);
    return FERRY_OK;
}

typedef struct inspect_ctx {
    ferry_inspect_fn fn;
    void *arg;
} inspect_ctx;

static bool inspect_topic(void *arg, int domain_fd, int topic_fd, const char *dirname)
{
    (void)domain_fd;
    (void)dirname;
    inspect_ctx *ctx = arg;
    int fd = dup(topic_fd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return true;
    }
    bool go_on = true;
    struct dirent *e;
    for (unsigned seen = 0; go_on && (e = readdir(d)) != NULL && seen < WALK_MAX; seen++) {
        if (e->d_name[0] == '.' || !ends_with(e->d_name, ".status"))
            continue;
        ferry__status st;
        bool alive = false;
        if (ferry__status_read(topic_fd, e->d_name, &st, &alive) != FERRY_OK)
            continue;
        if (st.kind != FERRY_ENDPOINT_PUBLISHER && st.kind != FERRY_ENDPOINT_SUBSCRIBER)
            continue;
        ferry_endpoint_info info;
        memset(&info, 0, sizeof info);
        info.kind = (ferry_endpoint_kind)st.kind;
        info.alive = alive;
        info.pid = st.pid;
        info.id = st.id;
        memcpy(info.topic, st.topic, sizeof info.topic);
        memcpy(info.type_name, st.type_name, sizeof info.type_name);
        memcpy(info.node_name, st.node_name, sizeof info.node_name);
        info.type_hash = st.type_hash;
        info.pub = st.pub;
        info.sub = st.sub;
        info.depth = st.depth;
        memcpy(info.note, st.note, sizeof info.note);
        go_on = ctx->fn(ctx->arg, &info);
    }
    closedir(d);
    return go_on;
}

ferry_err ferry_inspect(const char *dir, uint32_t domain, const char *topic, ferry_inspect_fn fn,
                        void *arg)
{
    if (!fn || domain > FERRY_DOMAIN_MAX)
        return FERRY_EINVAL;
    inspect_ctx ctx = {fn, arg};
    return walk_topics(dir, domain, topic, inspect_topic, &ctx);
}

typedef struct clean_ctx {
    uint32_t removed;
} clean_ctx;

/* A socket nobody listens on any more. */
static bool socket_dead(int dirfd, const char *name)
{
    int fd = ferry__connect_at(dirfd, name);
    if (fd >= 0) {
        close(fd);
        return false;
    }
    return errno == ECONNREFUSED;
}

static bool clean_topic(void *arg, int domain_fd, int topic_fd, const char *dirname)
{
    clean_ctx *ctx = arg;
    int fd = dup(topic_fd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return true;
    }
    unsigned left = 0;
    struct dirent *e;
    for (unsigned seen = 0; (e = readdir(d)) != NULL && seen < WALK_MAX; seen++) {
        const char *n = e->d_name;
        if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0)
            continue;
        bool dead = false;
        if (ends_with(n, ".status")) {
            ferry__status st;
            bool alive = true;
            ferry_err err = ferry__status_read(topic_fd, n, &st, &alive);
            dead = err == FERRY_EPROTO || (err == FERRY_OK && !alive);
        } else if (ends_with(n, ".sock")) {
            dead = socket_dead(topic_fd, n);
        } else if (n[0] == '.' && ends_with(n, ".tmp")) {
            dead = true; /* a creation that died half-way */
        }
        if (dead && unlinkat(topic_fd, n, 0) == 0)
            ctx->removed++;
        else
            left++;
    }
    closedir(d);
    if (left == 0)
        unlinkat(domain_fd, dirname, AT_REMOVEDIR);
    return true;
}

ferry_err ferry_clean(const char *dir, uint32_t domain, uint32_t *removed)
{
    if (domain > FERRY_DOMAIN_MAX)
        return FERRY_EINVAL;
    clean_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ferry_err err = walk_topics(dir, domain, NULL, clean_topic, &ctx);
    if (removed)
        *removed = ctx.removed;
    return err;
}
