/*
 * The DDS bridge (bridge.h). One thread drives everything: ferry subscribers and publishers,
 * DDS readers and writers. Cyclone delivers on its own threads; its data-available listener only
 * bumps an eventfd that sits, with the ferry descriptors, in the bridge's epoll set.
 *
 * This file holds the options, the life cycle and that loop (ferry_bridge_run); the parts it
 * drives are listed in bridge_internal.h.
 */
#include "bridge_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* 8 frames: 267 ms at 30 fps of slack for the bridge's one thread, which writes every route's
 * frames in turn (a 2.7 MB frame takes 7 to 40 ms to write on a busy machine); docs/bridge.md. */
#define DEFAULT_DEPTH 8u
/* While a new out route waits for its first scan, the bridge polls its subscriber this often:
 * the first samples of a new connection may come before the subscriber's fd is armed for them. */
#define NEW_ROUTE_POLL_NS (10 * NS_PER_MS)
#define DEFAULT_SCAN_NS (250 * NS_PER_MS)

/* ---------------------------------------------------------------------------------------------
 * Configuration
 * ------------------------------------------------------------------------------------------- */

/* Large samples: 64 kB datagrams cut a 6 MB frame into ~100 fragments instead of ~4600; socket
 * buffers hold a few frames (the kernel caps them at net.core.rmem_max / wmem_max); the writer
 * history may hold several unacknowledged frames before a reliable writer is throttled.
 * A 3 s participant lease (Cyclone's default is 10 s) lets peers drop a dead bridge's routes
 * sooner; Cyclone announces the participant every 2.4 s then (docs/bridge.md). */
static const char dds_defaults[] =
    "<CycloneDDS><Domain Id=\"any\">"
    "<General>"
    "<MaxMessageSize>65500B</MaxMessageSize>"
    "<MaxRexmitMessageSize>65500B</MaxRexmitMessageSize>"
    "<FragmentSize>62KiB</FragmentSize>"
    "</General>"
    "<Discovery><LeaseDuration>3s</LeaseDuration></Discovery>"
    "<Internal>"
    "<SocketReceiveBufferSize min=\"default\" max=\"64MiB\"/>"
    "<SocketSendBufferSize min=\"default\" max=\"16MiB\"/>"
    "<MaxQueuedRexmitBytes>32MiB</MaxQueuedRexmitBytes>"
    "<Watermarks><WhcHigh>48MiB</WhcHigh><WhcHighInit>16MiB</WhcHighInit></Watermarks>"
    "</Internal>"
    "</Domain></CycloneDDS>";

const char *ferry_bridge_dds_defaults(void)
{
    return dds_defaults;
}

void ferry_bridge_options_init(ferry_bridge_options *o)
{
    if (o == NULL)
        return;
    memset(o, 0, sizeof *o);
    o->direction = FERRY_BRIDGE_BOTH;
    o->depth = DEFAULT_DEPTH;
    o->scan_interval_ns = DEFAULT_SCAN_NS;
    o->log_level = FERRY_LOG_INFO;
}

/* ---------------------------------------------------------------------------------------------
 * epoll
 * ------------------------------------------------------------------------------------------- */

void ferry__bridge_watch_fd(ferry_bridge *b, int fd)
{
    struct epoll_event ev;

    memset(&ev, 0, sizeof ev);
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (epoll_ctl(b->epfd, EPOLL_CTL_ADD, fd, &ev) != 0 && errno != EEXIST)
        ferry__bridge_log(b, FERRY_LOG_WARN, "epoll_ctl: %s", strerror(errno));
}

void ferry__bridge_unwatch_fd(ferry_bridge *b, int fd)
{
    epoll_ctl(b->epfd, EPOLL_CTL_DEL, fd, NULL);
}

static void on_data_available(dds_entity_t reader, void *arg)
{
    ferry_bridge *b = arg;
    uint64_t one = 1;
    ssize_t n;

    (void)reader;
    /* Only wakes the bridge's thread; a full counter (impossible in practice) still wakes it. */
    n = write(b->evfd, &one, sizeof one);
    (void)n;
}

/* ---------------------------------------------------------------------------------------------
 * Life cycle
 * ------------------------------------------------------------------------------------------- */

static char *join_config(const char *extra)
{
    size_t a = strlen(dds_defaults), c = extra != NULL ? strlen(extra) : 0;
    char *s = malloc(a + c + 2);

    if (s == NULL)
        return NULL;
    memcpy(s, dds_defaults, a);
    if (c != 0) {
        s[a] = ',';
        memcpy(s + a + 1, extra, c);
        s[a + 1 + c] = '\0';
    } else {
        s[a] = '\0';
    }
    return s;
}

ferry_err ferry_bridge_create(ferry_bridge **out, const ferry_bridge_options *options)
{
    ferry_node_options no;
    ferry_bridge *b;
    ferry_err err;
    size_t i;

    if (out == NULL || options == NULL)
        return FERRY_EINVAL;
    if (options->npatterns > FERRY_BRIDGE_PATTERNS_MAX || options->dds_domain > 232 ||
        (options->npatterns != 0 && options->patterns == NULL) || options->direction > 3 ||
        options->depth > 4096 || options->reliability > FERRY_BRIDGE_BEST_EFFORT)
        return FERRY_EINVAL;
    b = calloc(1, sizeof *b);
    if (b == NULL)
        return FERRY_ENOMEM;
    b->o = *options;
    b->epfd = -1;
    b->evfd = -1;
    if (b->o.direction == 0)
        b->o.direction = FERRY_BRIDGE_BOTH;
    if (b->o.depth == 0)
        b->o.depth = DEFAULT_DEPTH;
    if (b->o.scan_interval_ns <= 0)
        b->o.scan_interval_ns = DEFAULT_SCAN_NS;
    if (b->o.log_level == 0)
        b->o.log_level = FERRY_LOG_INFO;
    b->pid = getpid();
    err = FERRY_ENOMEM;
    for (i = 0; i < b->o.npatterns; i++) {
        /* Patterns are matched against names with their leading '/'. */
        if (options->patterns[i] == NULL)
            goto fail_einval;
        b->patterns[i] = malloc(strlen(options->patterns[i]) + 2);
        if (b->patterns[i] == NULL)
            goto fail;
        sprintf(b->patterns[i], "%s%s", options->patterns[i][0] == '/' ? "" : "/",
                options->patterns[i]);
    }
    b->dds_config = join_config(options->dds_config);
    if (b->dds_config == NULL)
        goto fail;

    ferry_node_options_init(&no);
    no.dir = b->o.dir;
    no.domain = b->o.domain;
    no.name = FERRY_BRIDGE_NODE_NAME;
    no.log = b->o.log;
    no.log_arg = b->o.log_arg;
    err = ferry_node_create(&b->node, &no);
    if (err != FERRY_OK)
        goto fail;
    if (realpath(ferry_node_dir(b->node), b->dir_real) == NULL)
        snprintf(b->dir_real, sizeof b->dir_real, "%s", ferry_node_dir(b->node));
    ferry__bridge_make_mark(b);

    err = FERRY_ESYS;
    b->epfd = epoll_create1(EPOLL_CLOEXEC);
    b->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (b->epfd < 0 || b->evfd < 0)
        goto fail;
    ferry__bridge_watch_fd(b, b->evfd);

    err = FERRY_EINVAL;
    b->domain = dds_create_domain(b->o.dds_domain, b->dds_config);
    if (b->domain < 0) {
        ferry__bridge_log(b, FERRY_LOG_ERROR,
                          "cannot create DDS domain %" PRIu32 ": %s (check the config)",
                          b->o.dds_domain, dds_strretcode(b->domain));
        goto fail;
    }
    b->participant = dds_create_participant(b->o.dds_domain, NULL, NULL);
    if (b->participant < 0) {
        ferry__bridge_log(b, FERRY_LOG_ERROR, "dds_create_participant: %s",
                          dds_strretcode(b->participant));
        goto fail;
    }
    if (dds_get_guid(b->participant, &b->participant_guid) != DDS_RETCODE_OK)
        goto fail;
    b->listener = dds_create_listener(b);
    if (b->listener == NULL)
        goto fail;
    dds_lset_data_available(b->listener, on_data_available);
    if (b->o.direction & FERRY_BRIDGE_IN) {
        b->pubreader =
            dds_create_reader(b->participant, DDS_BUILTIN_TOPIC_DCPSPUBLICATION, NULL, NULL);
        if (b->pubreader < 0) {
            ferry__bridge_log(b, FERRY_LOG_ERROR, "cannot read DCPSPublication: %s",
                              dds_strretcode(b->pubreader));
            goto fail;
        }
    }
    *out = b;
    return FERRY_OK;
fail_einval:
    err = FERRY_EINVAL;
fail:
    ferry_bridge_destroy(b);
    return err;
}

ferry_err ferry_bridge_run(ferry_bridge *b, int64_t timeout_ns)
{
    struct epoll_event ev[16];
    int64_t now, wait_ns;
    size_t i;
    int n, ms;

    if (b == NULL)
        return FERRY_EINVAL;
    now = ferry_now().ns;
    if (now >= b->next_scan_ns) {
        ferry__bridge_scan_out(b);
        if (b->o.direction & FERRY_BRIDGE_IN)
            ferry__bridge_scan_in(b);
        b->next_scan_ns = now + b->o.scan_interval_ns;
    }
    for (i = 0; i < b->nouts; i++)
        ferry__bridge_out_pump(b, b->outs[i]);
    for (i = 0; i < b->nins; i++)
        ferry__bridge_in_pump(b, b->ins[i]);

    wait_ns = b->next_scan_ns - ferry_now().ns;
    if (timeout_ns >= 0 && timeout_ns < wait_ns)
        wait_ns = timeout_ns;
    /* A new route, and a sample whose write timed out, give no event of their own. */
    for (i = 0; i < b->nouts; i++)
        if ((!b->outs[i]->active || b->outs[i]->pending_sub != NULL) && wait_ns > NEW_ROUTE_POLL_NS)
            wait_ns = NEW_ROUTE_POLL_NS;
    if (wait_ns < 0)
        wait_ns = 0;
    ms = (int)((wait_ns + NS_PER_MS - 1) / NS_PER_MS);
    n = epoll_wait(b->epfd, ev, (int)(sizeof ev / sizeof ev[0]), ms);
    if (n < 0)
        return errno == EINTR ? FERRY_OK : FERRY_ESYS;
    for (i = 0; i < (size_t)n; i++)
        if (ev[i].data.fd == b->evfd) {
            uint64_t count;
            ssize_t r = read(b->evfd, &count, sizeof count);

            (void)r;
        }
    if (n > 0) {
        for (i = 0; i < b->nouts; i++)
            ferry__bridge_out_pump(b, b->outs[i]);
        for (i = 0; i < b->nins; i++)
            ferry__bridge_in_pump(b, b->ins[i]);
    }
    return FERRY_OK;
}

ferry_err ferry_bridge_stats_get(const ferry_bridge *b, ferry_bridge_stats *out)
{
    size_t i;

    if (b == NULL || out == NULL)
        return FERRY_EINVAL;
    *out = b->st;
    out->routes_out = (uint32_t)b->nouts;
    out->routes_in = (uint32_t)b->nins;
    out->routes_out_lossy = 0;
    /* b->st holds what closed routes counted; the live ones' counters are in their endpoints. */
    for (i = 0; i < b->nouts; i++) {
        out->out_queue_dropped += ferry__bridge_out_queue_dropped(b->outs[i]);
        if (!b->outs[i]->blocking)
            out->routes_out_lossy++;
    }
    for (i = 0; i < b->nins; i++) {
        in_losses l;

        ferry__bridge_in_losses(b->ins[i], &l);
        out->in_lost += l.lost;
        out->in_rejected += l.rejected;
        out->in_subscriber_dropped += l.subscriber_dropped;
    }
    return FERRY_OK;
}

ferry_err ferry_bridge_route_get(const ferry_bridge *b, size_t i, ferry_bridge_route_info *out)
{
    if (b == NULL || out == NULL)
        return FERRY_EINVAL;
    memset(out, 0, sizeof *out);
    out->depth = b->o.depth;
    if (i < b->nouts) {
        const out_route *r = b->outs[i];

        memcpy(out->topic, r->topic, sizeof out->topic);
        out->direction = FERRY_BRIDGE_OUT;
        out->type_name = ferry__bridge_route_type(r->kind, r->raw);
        out->samples = r->samples;
        out->bytes = r->bytes;
        out->reliable = r->reliable;
        out->lossless = r->blocking;
        out->lost = ferry__bridge_out_queue_dropped(r) + r->failed + r->invalid;
        return FERRY_OK;
    }
    i -= b->nouts;
    if (i < b->nins) {
        const in_route *r = b->ins[i];
        in_losses l;

        ferry__bridge_in_losses(r, &l);
        memcpy(out->topic, r->topic, sizeof out->topic);
        out->direction = FERRY_BRIDGE_IN;
        out->type_name =
            r->kind == FERRY_ROS2_NONE ? r->ros_type : ferry__bridge_ferry_type(r->kind);
        out->samples = r->samples;
        out->bytes = r->bytes;
        out->reliable = r->reliable;
        out->lossless = r->reliable;
        out->lost = l.lost + l.rejected + l.subscriber_dropped + r->invalid + r->dropped;
        return FERRY_OK;
    }
    return FERRY_EAGAIN;
}

ferry_err ferry_bridge_destroy(ferry_bridge *b)
{
    size_t i;

    if (b == NULL)
        return FERRY_EINVAL;
    for (i = 0; i < b->nouts; i++)
        ferry__bridge_out_destroy(b, b->outs[i]);
    for (i = 0; i < b->nins; i++)
        ferry__bridge_in_destroy(b, b->ins[i]);
    b->nouts = b->nins = 0;
    /* Deleting the domain deletes the participant and everything in it. */
    if (b->domain > 0)
        dds_delete(b->domain);
    if (b->listener != NULL)
        dds_delete_listener(b->listener);
    if (b->node != NULL)
        ferry_node_destroy(b->node);
    if (b->evfd >= 0)
        close(b->evfd);
    if (b->epfd >= 0)
        close(b->epfd);
    for (i = 0; i < FERRY_BRIDGE_PATTERNS_MAX; i++)
        free(b->patterns[i]);
    free(b->dds_config);
    free(b);
    return FERRY_OK;
}
