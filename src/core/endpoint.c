/*
 * The part of a publisher and a subscriber that is the same: names checked, the topic directory,
 * the type claim, the poller and the status file (see endpoint.h).
 */
#include "core/core.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

ferry_err ferry__endpoint_check(const ferry__endpoint *ep, uint64_t magic)
{
    if (!ep)
        return FERRY_EINVAL;
    if (ep->obj.magic == FERRY__DEAD_MAGIC)
        return FERRY_ECLOSED;
    return ep->obj.magic == magic ? FERRY_OK : FERRY_EINVAL;
}

ferry_err ferry__endpoint_open(ferry__endpoint *ep, ferry_node *node, const char *topic,
                               const char *type_name, uint64_t type_hash)
{
    ep->node = node;
    ep->dirfd = ep->epfd = -1;
    ep->status.fd = -1;
    ferry_err err = FERRY_OK;
    if ((err = ferry__topic_normalize(topic, ep->topic, sizeof ep->topic, ep->dirname,
                                      sizeof ep->dirname)) ||
        (type_name && (err = ferry__type_name_validate(type_name))))
        return err;
    snprintf(ep->type_name, sizeof ep->type_name, "%s", type_name ? type_name : "");
    ep->type_hash = type_name ? type_hash : 0;
    ep->id = ferry__random64();

    ferry__node_sweep_domain(node);
    /* The first housekeeping sweeps at once: it then runs while the endpoint is being set up,
     * and the stack it needs is touched before any steady state. */
    ep->next_sweep = 0;
    ep->dirfd = ferry__node_topic_dir(node, ep->dirname);
    if (ep->dirfd < 0)
        return errno == EPERM ? FERRY_EPERM : FERRY_ESYS;
    if (!type_name ||
        (err = ferry__status_check_type(ep->dirfd, type_name, type_hash)) == FERRY_OK) {
        if ((ep->epfd = ferry__poller_create()) >= 0)
            return FERRY_OK;
        err = FERRY_ESYS;
    }
    int e = errno;
    close(ep->dirfd);
    ep->dirfd = -1;
    errno = e;
    return err;
}

void ferry__endpoint_status_init(const ferry__endpoint *ep, ferry_endpoint_kind kind,
                                 ferry__status *init)
{
    memset(init, 0, sizeof *init);
    init->magic = FERRY__STATUS_MAGIC;
    init->version = FERRY_PROTOCOL_VERSION;
    init->kind = kind;
    init->pid = (int32_t)getpid();
    init->id = ep->id;
    init->type_hash = ep->type_hash;
    memcpy(init->topic, ep->topic, sizeof init->topic);
    memcpy(init->type_name, ep->type_name, sizeof init->type_name);
    memcpy(init->node_name, ep->node->name, sizeof init->node_name);
}

ferry_err ferry__endpoint_publish_status(ferry__endpoint *ep, const char *prefix,
                                         const ferry__status *init)
{
    for (int attempt = 0;; attempt++) {
        ferry_err err = ferry__status_create(&ep->status, ep->dirfd, prefix, init,
                                             ferry__node_file_mode(ep->node, false));
        if (err != FERRY_ESYS || errno != ENOENT || attempt == FERRY__TOPIC_DIR_ATTEMPTS)
            return err;
        /* The directory was empty until now, and a sweep removed it: made again. Once the
         * status file is in it, it is not empty any more. */
        int fd = ferry__node_topic_dir(ep->node, ep->dirname);
        if (fd < 0)
            return errno == EPERM ? FERRY_EPERM : FERRY_ESYS;
        close(ep->dirfd);
        ep->dirfd = fd;
    }
}

void ferry__endpoint_sweep(ferry__endpoint *ep, int64_t now)
{
    if (now < ep->next_sweep)
        return;
    ep->next_sweep = now + FERRY__ENDPOINT_SWEEP_NS;
    ferry__status_sweep(ep->dirfd, ep->status.fd >= 0 ? ep->status.name : NULL);
}

void ferry__endpoint_adopt_type(ferry__endpoint *ep, const char *type_name, uint64_t type_hash)
{
    snprintf(ep->type_name, sizeof ep->type_name, "%s", type_name);
    ep->type_hash = type_hash;
    if (ep->status.map) {
        memcpy(ep->status.map->type_name, ep->type_name, sizeof ep->status.map->type_name);
        ep->status.map->type_hash = type_hash;
    }
}

void ferry__endpoint_close(ferry__endpoint *ep)
{
    int e = errno;
    if (ep->dirfd >= 0)
        ferry__status_remove(&ep->status, ep->dirfd);
    if (ep->epfd >= 0)
        close(ep->epfd);
    if (ep->dirfd >= 0) {
        close(ep->dirfd);
        ferry__node_topic_dir_remove(ep->node, ep->dirname);
    }
    ep->dirfd = ep->epfd = -1;
    errno = e;
}

/* One line to the node's log after the endpoint's topic; with note, also into its status file
 * (ferry__endpoint_note). */
__attribute__((format(printf, 4, 0))) static void endpoint_say(const ferry__endpoint *ep,
                                                               ferry_log_level level, bool note,
                                                               const char *fmt, va_list ap)
{
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    ferry__log(ep->node, level, "%s: %s", ep->topic, line);
    if (note && ep->status.map) {
        /* Readers copy the whole field and terminate it: a read racing this write sees a
         * mixture of two notes, never more than the field. */
        char *field = ep->status.map->note;
        size_t n = strnlen(line, FERRY_ENDPOINT_NOTE_MAX);
        memcpy(field, line, n);
        memset(field + n, 0, FERRY_ENDPOINT_NOTE_MAX + 1 - n);
    }
}

void ferry__endpoint_log(const void *endpoint, ferry_log_level level, const char *fmt, ...)
{
    va_list ap;
    if (!endpoint)
        return;
    va_start(ap, fmt);
    endpoint_say(endpoint, level, false, fmt, ap);
    va_end(ap);
}

void ferry__endpoint_note(const void *endpoint, const char *fmt, ...)
{
    va_list ap;
    if (!endpoint)
        return;
    va_start(ap, fmt);
    endpoint_say(endpoint, FERRY_LOG_INFO, true, fmt, ap);
    va_end(ap);
}
