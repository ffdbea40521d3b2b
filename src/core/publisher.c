/*
 * Publisher lifecycle: options, creation, attachments, destruction, and the calls that report
 * (poll, wait for subscribers, descriptor, statistics). See publisher.h.
 */
#include "core/publisher.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_PENDING_LIMIT 256

void ferry_publisher_options_init(ferry_publisher_options *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->max_sample_size = (size_t)64 << 20;
    o->pool_bytes = (size_t)256 << 20;
    o->max_chunks = 256;
    o->max_subscribers = 32;
    o->payload_align = 64;
    o->block_timeout_ns = 100000000;
    o->max_pending = 8;
}

static ferry_err options_resolve(ferry_publisher_options *o)
{
    ferry_publisher_options d;
    ferry_publisher_options_init(&d);
    if (!o->max_sample_size)
        o->max_sample_size = d.max_sample_size;
    if (!o->pool_bytes)
        o->pool_bytes = d.pool_bytes;
    if (!o->max_chunks)
        o->max_chunks = d.max_chunks;
    if (!o->max_subscribers)
        o->max_subscribers = d.max_subscribers;
    if (!o->payload_align)
        o->payload_align = d.payload_align;
    if (!o->block_timeout_ns)
        o->block_timeout_ns = d.block_timeout_ns;
    if (!o->max_pending)
        o->max_pending = d.max_pending;
    if (o->max_chunks > 65536 || o->max_subscribers > 1024 || o->history > 4096 ||
        o->max_pending > MAX_PENDING_LIMIT || o->block_timeout_ns < 0 ||
        !ferry__spin_valid(o->spin_ns))
        return FERRY_EINVAL;
    if (o->history >= o->max_chunks)
        return FERRY_EINVAL;
    if (o->payload_align < 64 || o->payload_align > FERRY__PAGE ||
        (o->payload_align & (o->payload_align - 1)))
        return FERRY_EINVAL;
    if (o->max_sample_size > ((size_t)1 << 40) || o->pool_bytes > ((size_t)1 << 42))
        return FERRY_EINVAL;
    if (o->max_sample_size > o->pool_bytes)
        o->max_sample_size = o->pool_bytes - FERRY__PAGE;
    if (o->on_pool_exhausted != FERRY_POOL_ERROR && o->on_pool_exhausted != FERRY_POOL_BLOCK)
        return FERRY_EINVAL;
    if (o->pool_bytes < 2 * FERRY__PAGE)
        return FERRY_EINVAL;
    if ((unsigned)o->huge_pages > FERRY_HUGE_PAGES_AUTO)
        return FERRY_EINVAL;
    /* By default one subscriber may hold seven eighths of the pool: the rest, at least a chunk,
     * stays for the publisher's next loans and its other subscribers. */
    if (!o->max_chunks_per_subscriber) {
        uint32_t keep = o->max_chunks / 8 > 1 ? o->max_chunks / 8 : 1;
        o->max_chunks_per_subscriber = o->max_chunks > keep ? o->max_chunks - keep : 1;
    }
    if (!o->max_bytes_per_subscriber)
        o->max_bytes_per_subscriber = o->pool_bytes - o->pool_bytes / 8;
    if (o->max_chunks_per_subscriber > o->max_chunks)
        return FERRY_EINVAL;
    return FERRY_OK;
}

ferry_err ferry_publisher_create(ferry_publisher **out, ferry_node *node, const char *topic,
                                 const char *type_name, uint64_t type_hash,
                                 const ferry_publisher_options *options)
{
    if (!out || !topic || !type_name)
        return FERRY_EINVAL;
    ferry_err err = ferry__node_check(node);
    if (err)
        return err;
    ferry_publisher_options o;
    if (options)
        o = *options;
    else
        ferry_publisher_options_init(&o);
    if ((err = options_resolve(&o)))
        return err;

    ferry_publisher *pub = calloc(1, sizeof *pub);
    if (!pub)
        return FERRY_ENOMEM;
    pub->opt = o;
    pub->listen_fd = -1;
    ferry__spin_init(&pub->spin, o.spin_ns);
    pub->pool.fd = pub->pool.ro_fd = -1;
    if ((err = ferry__endpoint_open(&pub->ep, node, topic, type_name, type_hash)))
        goto fail;
    pub->words = (o.max_chunks + 63) / 64;
    pub->conns = calloc(o.max_subscribers, sizeof *pub->conns);
    pub->shares = calloc(o.max_subscribers, sizeof *pub->shares);
    pub->pending = calloc(o.max_pending, sizeof *pub->pending);
    pub->active = calloc(o.max_subscribers, sizeof *pub->active);
    pub->bits = calloc((size_t)o.max_subscribers * pub->words, sizeof *pub->bits);
    pub->history = o.history ? calloc(o.history, sizeof *pub->history) : NULL;
    if (!pub->conns || !pub->shares || !pub->pending || !pub->active || !pub->bits ||
        (o.history && !pub->history)) {
        err = FERRY_ENOMEM;
        goto fail;
    }
    for (uint32_t i = 0; i < o.max_pending; i++)
        pub->pending[i].sock = -1;
    for (uint32_t i = 0; i < o.max_subscribers; i++)
        pub->conns[i].bits = pub->bits + (size_t)i * pub->words;

    if ((err = ferry__pool_init(&pub->pool, pub->ep.id, o.pool_bytes, o.max_chunks,
                                o.max_sample_size, o.payload_align, o.huge_pages)))
        goto fail;
    /* Not an error, but not what was asked for: said once, with the reason. */
    if (pub->pool.huge_why[0])
        ferry__log(node, FERRY_LOG_WARN, "%s: huge pages (%s) unavailable: %s; using 4 KiB pages",
                   pub->ep.topic, ferry__huge_name(o.huge_pages), pub->pool.huge_why);

    ferry__status init;
    ferry__endpoint_status_init(&pub->ep, FERRY_ENDPOINT_PUBLISHER, &init);
    init.pub.id = pub->ep.id;
    init.depth = o.history; /* what tools see of a publisher's depth: the history it keeps */
    if ((err = ferry__endpoint_publish_status(&pub->ep, "pub", &init)))
        goto fail;
    pub->st = &pub->ep.status.map->pub;
    pub->stats.id = pub->ep.id;
    ferry__pub_publish_status(pub);

    char tmp[80];
    snprintf(pub->sock_name, sizeof pub->sock_name, "pub.%016llx.sock",
             (unsigned long long)pub->ep.id);
    snprintf(tmp, sizeof tmp, ".%s.tmp", pub->sock_name);
    err = FERRY_ESYS;
    pub->listen_fd =
        ferry__listen_at(pub->ep.dirfd, pub->sock_name, tmp, ferry__node_file_mode(node, true));
    if (pub->listen_fd < 0)
        goto fail;
    if (ferry__poller_add(pub->ep.epfd, pub->listen_fd, ferry__tag(FERRY__TAG_LISTEN, 0, 0)) != 0)
        goto fail;
    if ((err = ferry__node_adopt(node, &pub->ep.obj, FERRY__PUB_MAGIC)))
        goto fail;
    *out = pub;
    return FERRY_OK;
fail : {
    int e = errno;
    if (pub->listen_fd >= 0) {
        unlinkat(pub->ep.dirfd, pub->sock_name, 0);
        close(pub->listen_fd);
    }
    ferry__endpoint_close(&pub->ep);
    ferry__pool_fini(&pub->pool);
    free(pub->conns);
    free(pub->shares);
    free(pub->pending);
    free(pub->active);
    free(pub->bits);
    free(pub->history);
    free(pub);
    errno = e;
    return err;
}
}

ferry_err ferry__publisher_attach(ferry_publisher *pub, uint64_t key, const int *fds, int nfds)
{
    ferry_err err = ferry__pub_check(pub);
    if (err)
        return err;
    if (!fds || nfds < 1 || nfds > FERRY__ATTACH_FDS)
        return FERRY_EINVAL;
    if (pub->nattachments == FERRY__ATTACH_MAX)
        return FERRY_ELIMIT;
    struct attachment *a = &pub->attachments[pub->nattachments];
    a->key = key;
    a->nfds = 0;
    for (int i = 0; i < nfds; i++) {
        a->fds[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 0);
        if (a->fds[i] < 0) {
            for (int j = 0; j < i; j++)
                close(a->fds[j]);
            return FERRY_ESYS;
        }
        a->nfds++;
    }
    pub->nattachments++;
    for (uint32_t k = pub->nactive; k-- > 0;)
        ferry__pub_send_attachment(pub, &pub->conns[pub->active[k]], a);
    return FERRY_OK;
}

ferry_err ferry__publisher_detach(ferry_publisher *pub, uint64_t key)
{
    ferry_err err = ferry__pub_check(pub);
    if (err)
        return err;
    for (uint32_t k = 0; k < pub->nattachments; k++) {
        struct attachment *a = &pub->attachments[k];
        if (a->key != key)
            continue;
        for (int i = 0; i < a->nfds; i++)
            close(a->fds[i]);
        pub->attachments[k] = pub->attachments[--pub->nattachments];
        struct attachment none = {.key = key, .nfds = 0};
        for (uint32_t j = pub->nactive; j-- > 0;)
            ferry__pub_send_attachment(pub, &pub->conns[pub->active[j]], &none);
        return FERRY_OK;
    }
    return FERRY_ESTATE;
}

ferry_err ferry_publisher_destroy(ferry_publisher *pub)
{
    ferry_err err = ferry__pub_check(pub);
    if (err)
        return err;
    for (uint32_t k = 0; k < pub->nattachments; k++)
        for (int i = 0; i < pub->attachments[k].nfds; i++)
            close(pub->attachments[k].fds[i]);
    /* The socket goes first, so no subscriber connects to a publisher on its way out. */
    unlinkat(pub->ep.dirfd, pub->sock_name, 0);
    close(pub->listen_fd);
    for (uint32_t i = 0; i < pub->opt.max_subscribers; i++)
        ferry__pub_conn_close(pub, &pub->conns[i], false);
    for (uint32_t i = 0; i < pub->opt.max_pending; i++)
        ferry__pub_pending_close(pub, &pub->pending[i]);
    ferry__endpoint_close(&pub->ep);
    ferry__pool_fini(&pub->pool);
    free(pub->conns);
    free(pub->shares);
    free(pub->pending);
    free(pub->active);
    free(pub->bits);
    free(pub->history);
    pub->conns = NULL;
    pub->pending = NULL;
    pub->active = NULL;
    pub->bits = NULL;
    pub->history = NULL;
    ferry__node_bury(pub->ep.node, &pub->ep.obj);
    return FERRY_OK;
}

ferry_err ferry__publisher_set_active(ferry_publisher *pub, bool active)
{
    ferry_err err = ferry__pub_check(pub);
    if (err)
        return err;
    pub->inactive = !active;
    return FERRY_OK;
}

ferry_err ferry_publisher_poll(ferry_publisher *pub, int64_t timeout_ns)
{
    ferry_err err = ferry__pub_check(pub);
    if (err)
        return err;
    ferry__pub_housekeep(pub, timeout_ns);
    ferry__pub_sync_stats(pub);
    return FERRY_OK;
}

ferry_err ferry_publisher_wait_subscribers(ferry_publisher *pub, uint32_t count, int64_t timeout_ns)
{
    ferry_err err = ferry__pub_check(pub);
    if (err)
        return err;
    int64_t deadline = ferry__deadline(timeout_ns);
    ferry__pub_housekeep(pub, 0);
    while (pub->nactive < count) {
        int64_t left = ferry__remaining(deadline);
        if (left == 0)
            return FERRY_ETIMEDOUT;
        ferry__pub_housekeep(pub, left);
    }
    ferry__pub_sync_stats(pub);
    return FERRY_OK;
}

ferry_err ferry_publisher_fd(ferry_publisher *pub, int *fd)
{
    ferry_err err = ferry__pub_check(pub);
    if (err)
        return err;
    if (!fd)
        return FERRY_EINVAL;
    *fd = pub->ep.epfd;
    return FERRY_OK;
}

ferry_err ferry_publisher_stats_get(ferry_publisher *pub, ferry_publisher_stats *out)
{
    ferry_err err = ferry__pub_check(pub);
    if (err)
        return err;
    if (!out)
        return FERRY_EINVAL;
    ferry__pub_drain_all_returns(pub);
    ferry__pool_huge_refresh(&pub->pool);
    ferry__pub_publish_status(pub);
    *out = pub->stats;
    return FERRY_OK;
}
