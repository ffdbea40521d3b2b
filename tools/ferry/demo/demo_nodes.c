/*
 * `ferry demo`: the processes. Cameras publish ferry images whose pixels carry the CLI's
 * verifiable frame (cli_frame_fill over the pixel bytes), the LiDAR publishes point clouds whose
 * intensities encode the sequence, consumers take every stream and verify and time every frame,
 * and the fusion process pairs one camera with the LiDAR through ferry_sync. In the baseline
 * pipeline the cameras copy plain frames into the shared-memory bus and consumers copy them out.
 */
#include "demo.h"

#include <ferry/msg.h>
#include <ferry/sync.h>

#if defined(__has_include)
#if __has_include(<ferry/rt.h>)
#define DEMO_HAVE_RT 1
#endif
#endif

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const lidar_field_names[4] = {"x", "y", "z", "intensity"};

void demo_camera_topic(char *out, size_t cap, uint32_t cam)
{
    snprintf(out, cap, "/camera/%u/image_raw", (unsigned)cam);
}

static ferry_stamp to_stamp(int64_t ns)
{
    ferry_stamp s = {.sec = (int32_t)(ns / DEMO_NS_PER_S),
                     .nanosec = (uint32_t)(ns % DEMO_NS_PER_S)};
    return s;
}

static int64_t from_stamp(ferry_stamp s)
{
    return (int64_t)s.sec * DEMO_NS_PER_S + (int64_t)s.nanosec;
}

static size_t image_sample_bytes(void)
{
    size_t head = (sizeof(ferry_image_header) + FERRY_MSG_DATA_ALIGN - 1) / FERRY_MSG_DATA_ALIGN *
                  FERRY_MSG_DATA_ALIGN;
    return head + DEMO_FRAME_BYTES;
}

static size_t cloud_sample_bytes(void)
{
    size_t head = (sizeof(ferry_pointcloud_header) + FERRY_MSG_DATA_ALIGN - 1) /
                  FERRY_MSG_DATA_ALIGN * FERRY_MSG_DATA_ALIGN;
    return head + (size_t)DEMO_LIDAR_ROWS * DEMO_LIDAR_COLS * 16;
}

/* Subscribers of a camera in the ferry pipeline. */
static uint32_t camera_subscribers(const demo_cfg *c, uint32_t cam)
{
    return c->consumers + (c->fusion && cam == DEMO_FUSION_CAMERA) +
           (c->gpu && cam == DEMO_GPU_CAMERA);
}

/* ---------------------------------------------------------------------------------------------
 * Sources
 * ------------------------------------------------------------------------------------------- */

/* Waits for len bytes on the control pipe; a ferry publisher keeps doing housekeeping. */
static int wait_ctl(ferry_publisher *pub, int ctl, void *buf, size_t len)
{
    int pub_fd = -1;
    if (pub && ferry_publisher_fd(pub, &pub_fd) != FERRY_OK)
        pub_fd = -1;
    for (;;) {
        struct pollfd pfd[2] = {{.fd = ctl, .events = POLLIN}, {.fd = pub_fd, .events = POLLIN}};
        int r = poll(pfd, pub_fd >= 0 ? 2 : 1, 100);
        if (r < 0 && errno != EINTR)
            return -1;
        if (pub)
            ferry_publisher_poll(pub, 0);
        if (r > 0 && (pfd[0].revents & (POLLIN | POLLHUP)))
            return cli_read_full(ctl, buf, len, -1);
    }
}

/* Creates a source's node and publisher and waits for its subscribers. */
static bool source_open(const demo_cfg *c, const char *name, const char *topic, const char *type,
                        uint64_t hash, size_t sample, uint32_t subscribers, ferry_node **node,
                        ferry_publisher **pub)
{
    if (cli_node(&c->where, name, node) != FERRY_OK)
        return false;
    ferry_publisher_options po;
    ferry_publisher_options_init(&po);
    po.max_sample_size = sample;
    ferry_err err = ferry_publisher_create(pub, *node, topic, type, hash, &po);
    if (err) {
        cli_fail("demo", 1, "%s: publisher: %s", topic, ferry_strerror(err));
        return false;
    }
#ifdef DEMO_HAVE_RT
    if (c->rt) {
        /* Every chunk a queue can hold, carved and touched now: no page fault while running. */
        uint32_t count = subscribers * DEMO_QUEUE_DEPTH + 2 +
                         (c->fusion && strcmp(name, "camera0") == 0 ? DEMO_SYNC_QUEUE : 0);
        if ((err = ferry_publisher_reserve(*pub, sample, count)) != FERRY_OK)
            cli_fail("demo", 1, "%s: reserving %u chunks: %s (going on)", topic, count,
                     ferry_strerror(err));
    }
#endif
    err = ferry_publisher_wait_subscribers(*pub, subscribers, DEMO_CONNECT_NS);
    if (err) {
        cli_fail("demo", 1, "%s: waiting for %u subscribers: %s", topic, subscribers,
                 ferry_strerror(err));
        return false;
    }
    return true;
}

static void source_close(const char *topic, ferry_node *node, ferry_publisher *pub)
{
    ferry_err err;
    if (pub && (err = ferry_publisher_destroy(pub)) != FERRY_OK)
        cli_fail("demo", 1, "%s: publisher destroy: %s", topic, ferry_strerror(err));
    if (node && (err = ferry_node_destroy(node)) != FERRY_OK)
        cli_fail("demo", 1, "%s: node destroy: %s", topic, ferry_strerror(err));
}

/* Draws camera frame number seq (from 1) into an image loan. */
static ferry_err camera_frame(ferry_publisher *pub, uint32_t cam, uint64_t seq, int64_t capture,
                              int64_t *fill_ns)
{
    ferry_image img;
    ferry_err err = ferry_image_loan(pub, DEMO_WIDTH, DEMO_HEIGHT, "rgb8", 0, &img);
    if (err)
        return err;
    int64_t c0 = cli_cpu_ns();
    img.header->stamp = to_stamp(capture);
    snprintf(img.header->frame_id, sizeof img.header->frame_id, "camera%u", (unsigned)cam);
    cli_frame_fill(img.data, img.data_size, seq, true);
    *fill_ns = cli_cpu_ns() - c0;
    err = ferry_image_publish(pub, &img);
    if (err)
        ferry_image_loan_release(pub, &img);
    return err;
}

int demo_camera_main(const demo_cfg *c, uint32_t cam, int res, int ctl)
{
    demo_src_result out = {.status = -1, .index = cam};
    char topic[64], name[32];
    demo_camera_topic(topic, sizeof topic, cam);
    snprintf(name, sizeof name, "camera%u", (unsigned)cam);
    ferry_node *node = NULL;
    ferry_publisher *pub = NULL;
    char *own = NULL;
    char msg = DEMO_MSG_FAIL;
    ferry_err err;

    if (c->kind == DEMO_FERRY) {
        if (!source_open(c, name, topic, FERRY_IMAGE_TYPE_NAME, FERRY_IMAGE_TYPE_HASH,
                         image_sample_bytes(), camera_subscribers(c, cam), &node, &pub))
            goto fail;
    } else {
        own = malloc(DEMO_FRAME_BYTES);
        if (!own)
            goto fail;
        cli_prefault(own, DEMO_FRAME_BYTES);
    }
    msg = DEMO_MSG_READY;
    if (cli_write_full(res, &msg, 1) != 0)
        goto done;
    int64_t start;
    if (wait_ctl(pub, ctl, &start, sizeof start) != 0)
        goto done;

    const int64_t period = DEMO_NS_PER_S / DEMO_FPS;
    for (uint64_t k = 0; k < c->frames; k++) {
        cli_sleep_until(start + (int64_t)k * period);
        int64_t capture = ferry_now().ns;
        int64_t c0 = cli_cpu_ns(), fill = 0;
        if (c->kind == DEMO_FERRY) {
            if ((err = camera_frame(pub, cam, k + 1, capture, &fill)) != FERRY_OK) {
                cli_fail("demo", 1, "%s: frame %llu: %s", topic, (unsigned long long)k + 1,
                         ferry_strerror(err));
                goto report;
            }
        } else {
            int64_t f0 = cli_cpu_ns();
            cli_frame_fill(own, DEMO_FRAME_BYTES, k + 1, true);
            fill = cli_cpu_ns() - f0;
            cli_shm_send(c->bus, cam, own, DEMO_FRAME_BYTES);
        }
        out.xport_cpu_ns += cli_cpu_ns() - c0 - fill;
        out.fill_cpu_ns += fill;
        out.published++;
    }
    out.status = 0;
report:
    if (cli_write_full(res, &out, sizeof out) == 0 && out.status == 0)
        wait_ctl(pub, ctl, &msg, 1); /* queued frames live in this process's pool */
    goto done;
fail:
    cli_write_full(res, &msg, 1);
done:
    source_close(topic, node, pub);
    free(own);
    return out.status == 0 ? 0 : 1;
}

/* A 64-beam spinning LiDAR: unit directions are computed once, each scan scales them by a range
 * that moves with the scan. Intensity i of scan seq is (seq * 7 + i) mod 4096, exact in a float,
 * so a consumer checks every point cheaply. */
static float *lidar_directions(void)
{
    size_t n = (size_t)DEMO_LIDAR_ROWS * DEMO_LIDAR_COLS;
    float *d = malloc(n * 3 * sizeof *d);
    if (!d)
        return NULL;
    for (uint32_t r = 0; r < DEMO_LIDAR_ROWS; r++) {
        double el = (-25.0 + 40.0 * r / (DEMO_LIDAR_ROWS - 1)) * M_PI / 180.0;
        for (uint32_t col = 0; col < DEMO_LIDAR_COLS; col++) {
            double az = 2.0 * M_PI * col / DEMO_LIDAR_COLS;
            float *p = d + ((size_t)r * DEMO_LIDAR_COLS + col) * 3;
            p[0] = (float)(cos(el) * cos(az));
            p[1] = (float)(cos(el) * sin(az));
            p[2] = (float)sin(el);
        }
    }
    return d;
}

static float lidar_intensity(uint64_t seq, size_t i)
{
    return (float)((seq * 7 + i) % 4096);
}

static void lidar_fields(ferry_point_field f[4])
{
    memset(f, 0, 4 * sizeof *f);
    for (uint32_t i = 0; i < 4; i++) {
        snprintf(f[i].name, sizeof f[i].name, "%s", lidar_field_names[i]);
        f[i].offset = 4 * i;
        f[i].datatype = FERRY_POINT_FLOAT32;
        f[i].count = 1;
    }
}

static ferry_err lidar_scan(ferry_publisher *pub, const float *dirs, uint64_t seq, int64_t capture,
                            int64_t *fill_ns)
{
    ferry_point_field f[4];
    lidar_fields(f);
    ferry_pointcloud pc;
    ferry_err err = ferry_pointcloud_loan(pub, DEMO_LIDAR_COLS, DEMO_LIDAR_ROWS, f, 4, 16, &pc);
    if (err)
        return err;
    int64_t c0 = cli_cpu_ns();
    pc.header->stamp = to_stamp(capture);
    pc.header->is_dense = 1;
    snprintf(pc.header->frame_id, sizeof pc.header->frame_id, "lidar");
    float *pt = pc.data;
    size_t n = (size_t)DEMO_LIDAR_ROWS * DEMO_LIDAR_COLS;
    for (size_t i = 0; i < n; i++) {
        float range = 5.0f + (float)((i % DEMO_LIDAR_COLS + seq * 16) % 1024) / 64.0f;
        pt[4 * i + 0] = dirs[3 * i + 0] * range;
        pt[4 * i + 1] = dirs[3 * i + 1] * range;
        pt[4 * i + 2] = dirs[3 * i + 2] * range;
        pt[4 * i + 3] = lidar_intensity(seq, i);
    }
    *fill_ns = cli_cpu_ns() - c0;
    err = ferry_pointcloud_publish(pub, &pc);
    if (err)
        ferry_pointcloud_loan_release(pub, &pc);
    return err;
}

int demo_lidar_main(const demo_cfg *c, int res, int ctl)
{
    demo_src_result out = {.status = -1, .index = 0};
    ferry_node *node = NULL;
    ferry_publisher *pub = NULL;
    char msg = DEMO_MSG_FAIL;
    float *dirs = lidar_directions();
    ferry_err err;

    if (!dirs || !source_open(c, "lidar", DEMO_LIDAR_TOPIC, FERRY_POINTCLOUD_TYPE_NAME,
                              FERRY_POINTCLOUD_TYPE_HASH, cloud_sample_bytes(),
                              c->consumers + (c->fusion ? 1 : 0), &node, &pub))
        goto fail;
    msg = DEMO_MSG_READY;
    if (cli_write_full(res, &msg, 1) != 0)
        goto done;
    int64_t start;
    if (wait_ctl(pub, ctl, &start, sizeof start) != 0)
        goto done;
    const int64_t period = DEMO_NS_PER_S / DEMO_LIDAR_HZ;
    for (uint64_t k = 0; k < c->lidar_frames; k++) {
        cli_sleep_until(start + DEMO_LIDAR_PHASE_NS + (int64_t)k * period);
        int64_t capture = ferry_now().ns;
        int64_t c0 = cli_cpu_ns(), fill = 0;
        if ((err = lidar_scan(pub, dirs, k + 1, capture, &fill)) != FERRY_OK) {
            cli_fail("demo", 1, "%s: scan %llu: %s", DEMO_LIDAR_TOPIC, (unsigned long long)k + 1,
                     ferry_strerror(err));
            goto report;
        }
        out.xport_cpu_ns += cli_cpu_ns() - c0 - fill;
        out.fill_cpu_ns += fill;
        out.published++;
    }
    out.status = 0;
report:
    if (cli_write_full(res, &out, sizeof out) == 0 && out.status == 0)
        wait_ctl(pub, ctl, &msg, 1);
    goto done;
fail:
    cli_write_full(res, &msg, 1);
done:
    source_close(DEMO_LIDAR_TOPIC, node, pub);
    free(dirs);
    return out.status == 0 ? 0 : 1;
}

/* ---------------------------------------------------------------------------------------------
 * Verification
 * ------------------------------------------------------------------------------------------- */

/* Checks a camera image; on success *seq and *sent_ns come from the frame in its pixels. */
static bool image_check(const ferry_sample *s, uint32_t cam, uint64_t *seq, int64_t *sent_ns,
                        int64_t *stamp_ns)
{
    ferry_image_view v;
    char id[32];
    if (ferry_image_view_get(s, &v) != FERRY_OK || v.header.width != DEMO_WIDTH ||
        v.header.height != DEMO_HEIGHT || strcmp(v.header.encoding, "rgb8") != 0)
        return false;
    snprintf(id, sizeof id, "camera%u", (unsigned)cam);
    if (strcmp(v.header.frame_id, id) != 0 || !cli_frame_verify(v.data, v.data_size))
        return false;
    cli_frame_header h;
    memcpy(&h, v.data, sizeof h);
    *seq = h.sequence;
    *sent_ns = h.send_ns;
    if (stamp_ns)
        *stamp_ns = from_stamp(v.header.stamp);
    return true;
}

/* Checks a LiDAR scan: layout, and every point's intensity against the sample's sequence. */
static bool cloud_check(const ferry_sample *s, int64_t *stamp_ns)
{
    ferry_pointcloud_view v;
    if (ferry_pointcloud_view_get(s, &v) != FERRY_OK || v.header.width != DEMO_LIDAR_COLS ||
        v.header.height != DEMO_LIDAR_ROWS || v.header.point_step != 16 || v.header.nfields != 4)
        return false;
    for (uint32_t i = 0; i < 4; i++)
        if (strcmp(v.header.fields[i].name, lidar_field_names[i]) != 0 ||
            v.header.fields[i].offset != 4 * i ||
            v.header.fields[i].datatype != FERRY_POINT_FLOAT32)
            return false;
    size_t n = (size_t)DEMO_LIDAR_ROWS * DEMO_LIDAR_COLS;
    const unsigned char *p = v.data;
    for (size_t i = 0; i < n; i++) {
        float in;
        memcpy(&in, p + 16 * i + 12, sizeof in);
        if (in != lidar_intensity(s->sequence, i))
            return false;
    }
    if (stamp_ns)
        *stamp_ns = from_stamp(v.header.stamp);
    return true;
}

/* ---------------------------------------------------------------------------------------------
 * Consumers
 * ------------------------------------------------------------------------------------------- */

typedef struct consumer {
    const demo_cfg *c;
    uint32_t streams; /* cameras, then the LiDAR when there is one */
    demo_stream_result st[DEMO_MAX_STREAMS];
    demo_lat_rec *lat[DEMO_MAX_STREAMS];
    uint64_t expect[DEMO_MAX_STREAMS];
    uint64_t last_seq[DEMO_MAX_STREAMS];
    bool done[DEMO_MAX_STREAMS];
    uint32_t done_count;
    int64_t verify_cpu_ns;
    int64_t last_frame_ns;
} consumer;

static void consumer_note(consumer *k, uint32_t i, bool ok, uint64_t seq, int64_t sent,
                          int64_t recv)
{
    demo_stream_result *s = &k->st[i];
    k->last_frame_ns = recv;
    if (!ok) {
        s->corrupt++;
        return;
    }
    s->received++;
    if (s->lat_count < k->expect[i])
        k->lat[i][s->lat_count++] = (demo_lat_rec){sent, recv - sent};
    if (seq <= k->last_seq[i])
        s->disorder++;
    k->last_seq[i] = seq;
    if (seq == k->expect[i] && !k->done[i]) {
        k->done[i] = true;
        k->done_count++;
    }
}

/* true while frames are still expected and have not stopped coming. */
static bool consumer_waiting(const consumer *k, int64_t started)
{
    if (k->done_count == k->streams)
        return false;
    int64_t now = cli_now_ns();
    if (k->last_frame_ns == 0)
        return now - started < DEMO_FIRST_FRAME_NS;
    return now - k->last_frame_ns < DEMO_IDLE_NS;
}

static void subscriber_options(const demo_cfg *c, ferry_subscriber_options *so)
{
    ferry_subscriber_options_init(so);
    so->depth = DEMO_QUEUE_DEPTH;
    so->overflow = FERRY_OVERFLOW_DROP_OLDEST;
#ifdef DEMO_HAVE_RT
    so->prefault = c->rt;
#else
    (void)c;
#endif
}

static void consumer_sample(consumer *k, uint32_t i, const ferry_sample *s)
{
    int64_t recv = ferry_now().ns;
    int64_t v0 = cli_cpu_ns();
    uint64_t seq = 0;
    int64_t sent = 0;
    bool ok;
    if (i < k->c->cameras) {
        ok = image_check(s, i, &seq, &sent, NULL);
    } else {
        ok = cloud_check(s, NULL);
        seq = s->sequence;
        sent = s->publish_time.ns;
    }
    k->verify_cpu_ns += cli_cpu_ns() - v0;
    consumer_note(k, i, ok, seq, sent, recv);
}

static int consumer_ferry(consumer *k, uint32_t index, int res)
{
    const demo_cfg *c = k->c;
    ferry_node *node = NULL;
    ferry_waitset *ws = NULL;
    ferry_subscriber *subs[DEMO_MAX_STREAMS] = {NULL};
    bool in_ws[DEMO_MAX_STREAMS] = {false};
    char name[32], topic[64];
    ferry_err err = FERRY_OK;
    int status = -1;
    char msg;

    snprintf(name, sizeof name, "consumer%u", (unsigned)index);
    if (cli_node(&c->where, name, &node) != FERRY_OK)
        goto fail;
    if ((err = ferry_waitset_create(&ws, node)) != FERRY_OK) {
        cli_fail("demo", 1, "waitset: %s", ferry_strerror(err));
        goto fail;
    }
    ferry_subscriber_options so;
    subscriber_options(c, &so);
    for (uint32_t i = 0; i < k->streams; i++) {
        bool cam = i < c->cameras;
        if (cam)
            demo_camera_topic(topic, sizeof topic, i);
        else
            snprintf(topic, sizeof topic, "%s", DEMO_LIDAR_TOPIC);
        err = ferry_subscriber_create(
            &subs[i], node, topic, cam ? FERRY_IMAGE_TYPE_NAME : FERRY_POINTCLOUD_TYPE_NAME,
            cam ? FERRY_IMAGE_TYPE_HASH : FERRY_POINTCLOUD_TYPE_HASH, &so);
        if (err == FERRY_OK) {
            err = ferry_waitset_add(ws, subs[i], (void *)(uintptr_t)(i + 1));
            in_ws[i] = err == FERRY_OK;
        }
        if (err) {
            cli_fail("demo", 1, "%s: subscriber: %s", topic, ferry_strerror(err));
            goto fail;
        }
    }
    for (uint32_t i = 0; i < k->streams; i++) {
        err = ferry_subscriber_wait_publishers(subs[i], 1, DEMO_CONNECT_NS);
        if (err) {
            cli_fail("demo", 1, "consumer %u: waiting for stream %u: %s", (unsigned)index,
                     (unsigned)i, ferry_strerror(err));
            goto fail;
        }
    }
    msg = DEMO_MSG_READY;
    if (cli_write_full(res, &msg, 1) != 0)
        goto out;

    int64_t started = cli_now_ns();
    while (consumer_waiting(k, started)) {
        void *ready[DEMO_MAX_STREAMS];
        size_t n = 0;
        err = ferry_waitset_wait(ws, 100 * DEMO_NS_PER_MS, ready, DEMO_MAX_STREAMS, &n);
        if (err == FERRY_ETIMEDOUT)
            continue;
        if (err) {
            cli_fail("demo", 1, "waitset wait: %s", ferry_strerror(err));
            goto out;
        }
        for (size_t r = 0; r < n; r++) {
            uint32_t i = (uint32_t)((uintptr_t)ready[r] - 1);
            if (i >= k->streams)
                continue;
            /* Take until EAGAIN: that re-arms the subscriber's descriptor. */
            for (;;) {
                ferry_sample s;
                err = ferry_take(subs[i], &s);
                if (err == FERRY_EAGAIN)
                    break;
                if (err) {
                    cli_fail("demo", 1, "take: %s", ferry_strerror(err));
                    goto out;
                }
                consumer_sample(k, i, &s);
                if ((err = ferry_release(subs[i], &s)) != FERRY_OK) {
                    cli_fail("demo", 1, "release: %s", ferry_strerror(err));
                    goto out;
                }
            }
        }
    }
    status = 0;
out:
    for (uint32_t i = 0; i < k->streams; i++) {
        ferry_subscriber_stats st;
        if (subs[i] && ferry_subscriber_stats_get(subs[i], &st) == FERRY_OK)
            k->st[i].dropped = st.dropped;
    }
    goto teardown;
fail:
    msg = DEMO_MSG_FAIL;
    cli_write_full(res, &msg, 1);
teardown:
    for (uint32_t i = 0; i < k->streams; i++) {
        if (in_ws[i])
            ferry_waitset_remove(ws, subs[i]);
        if (subs[i] && (err = ferry_subscriber_destroy(subs[i])) != FERRY_OK)
            cli_fail("demo", 1, "subscriber destroy: %s", ferry_strerror(err));
    }
    if (ws && (err = ferry_waitset_destroy(ws)) != FERRY_OK)
        cli_fail("demo", 1, "waitset destroy: %s", ferry_strerror(err));
    if (node && (err = ferry_node_destroy(node)) != FERRY_OK)
        cli_fail("demo", 1, "consumer node destroy: %s", ferry_strerror(err));
    return status;
}

static int consumer_shm(consumer *k, uint32_t index, int res)
{
    const demo_cfg *c = k->c;
    char *own = malloc(DEMO_FRAME_BYTES);
    char msg = own ? DEMO_MSG_READY : DEMO_MSG_FAIL;
    if (cli_write_full(res, &msg, 1) != 0 || !own) {
        free(own);
        return -1;
    }
    cli_prefault(own, DEMO_FRAME_BYTES);
    int status = 0;
    int64_t started = cli_now_ns();
    while (consumer_waiting(k, started)) {
        uint32_t cam;
        size_t size;
        int rc =
            cli_shm_recv(c->bus, index, own, DEMO_FRAME_BYTES, &cam, &size, 100 * DEMO_NS_PER_MS);
        if (rc == 1)
            continue;
        if (rc != 0 || cam >= c->cameras) {
            status = -1;
            break;
        }
        int64_t recv = cli_now_ns();
        int64_t v0 = cli_cpu_ns();
        bool ok = size == DEMO_FRAME_BYTES && cli_frame_verify(own, size);
        k->verify_cpu_ns += cli_cpu_ns() - v0;
        cli_frame_header h;
        memcpy(&h, own, sizeof h);
        consumer_note(k, cam, ok, h.sequence, h.send_ns, recv);
    }
    for (uint32_t cam = 0; cam < c->cameras; cam++)
        k->st[cam].dropped = cli_shm_dropped(c->bus, index, cam);
    free(own);
    return status;
}

int demo_consumer_main(const demo_cfg *c, uint32_t index, int res)
{
    consumer *k = calloc(1, sizeof *k);
    char fail_msg = DEMO_MSG_FAIL;
    int rc = -1;
    if (!k)
        goto fail;
    k->c = c;
    k->streams = c->cameras + (c->lidar_frames ? 1 : 0);
    for (uint32_t i = 0; i < k->streams; i++) {
        k->expect[i] = i < c->cameras ? c->frames : c->lidar_frames;
        k->lat[i] = malloc(k->expect[i] * sizeof *k->lat[i]);
        if (!k->lat[i])
            goto fail;
    }
    int64_t cpu0 = cli_cpu_ns();
    int status =
        c->kind == DEMO_FERRY ? consumer_ferry(k, index, res) : consumer_shm(k, index, res);
    demo_con_head head = {.status = status,
                          .streams = k->streams,
                          .total_cpu_ns = cli_cpu_ns() - cpu0,
                          .verify_cpu_ns = k->verify_cpu_ns};
    rc = cli_write_full(res, &head, sizeof head);
    for (uint32_t i = 0; i < k->streams && rc == 0; i++) {
        rc = cli_write_full(res, &k->st[i], sizeof k->st[i]);
        if (rc == 0 && k->st[i].lat_count)
            rc = cli_write_full(res, k->lat[i], k->st[i].lat_count * sizeof *k->lat[i]);
    }
    if (status != 0)
        rc = -1;
    goto done;
fail:
    cli_write_full(res, &fail_msg, 1);
done:
    if (k)
        for (uint32_t i = 0; i < DEMO_MAX_STREAMS; i++)
            free(k->lat[i]);
    free(k);
    return rc == 0 ? 0 : 1;
}

/* ---------------------------------------------------------------------------------------------
 * Fusion: one camera and the LiDAR, paired by stamp
 * ------------------------------------------------------------------------------------------- */

/* The sensor's acquisition stamp; a sample that is not a valid message gets 0 (and is then
 * discarded as older than what was seen). */
static int64_t fusion_stamp(void *arg, uint32_t index, const ferry_sample *s)
{
    (void)arg;
    if (index == 0) {
        ferry_image_view v;
        return ferry_image_view_get(s, &v) == FERRY_OK ? from_stamp(v.header.stamp) : 0;
    }
    ferry_pointcloud_view v;
    return ferry_pointcloud_view_get(s, &v) == FERRY_OK ? from_stamp(v.header.stamp) : 0;
}

typedef struct fusion {
    ferry_node *node;
    ferry_subscriber *subs[2];
    ferry_sync *sync;
    int64_t *skew;
    demo_fusion_result r;
} fusion;

/* Samples taken or dropped so far, both topics; *all when every frame was seen. */
static uint64_t fusion_seen(const demo_cfg *c, fusion *f, bool *all)
{
    uint64_t sum = 0;
    uint64_t expect[2] = {c->frames, c->lidar_frames};
    *all = true;
    for (int i = 0; i < 2; i++) {
        ferry_subscriber_stats st;
        if (ferry_subscriber_stats_get(f->subs[i], &st) != FERRY_OK)
            continue;
        sum += st.received + st.dropped;
        if (st.received + st.dropped < expect[i])
            *all = false;
    }
    return sum;
}

static int fusion_run(const demo_cfg *c, fusion *f, int res)
{
    char topic[64];
    char msg = DEMO_MSG_FAIL;
    ferry_err err;
    if (cli_node(&c->where, "fusion", &f->node) != FERRY_OK)
        goto fail;
    ferry_subscriber_options so;
    subscriber_options(c, &so);
    so.max_held = DEMO_SYNC_QUEUE + 4;
    demo_camera_topic(topic, sizeof topic, DEMO_FUSION_CAMERA);
    if ((err = ferry_subscriber_create(&f->subs[0], f->node, topic, FERRY_IMAGE_TYPE_NAME,
                                       FERRY_IMAGE_TYPE_HASH, &so)) != FERRY_OK ||
        (err = ferry_subscriber_create(&f->subs[1], f->node, DEMO_LIDAR_TOPIC,
                                       FERRY_POINTCLOUD_TYPE_NAME, FERRY_POINTCLOUD_TYPE_HASH,
                                       &so)) != FERRY_OK) {
        cli_fail("demo", 1, "fusion: subscriber: %s", ferry_strerror(err));
        goto fail;
    }
    ferry_sync_options o;
    ferry_sync_options_init(&o);
    o.queue_size = DEMO_SYNC_QUEUE;
    o.max_interval_ns = DEMO_NS_PER_S / DEMO_FPS / 2;
    o.stamp = fusion_stamp;
    o.node = f->node;
    if ((err = ferry_sync_create(&f->sync, f->subs, 2, &o)) != FERRY_OK) {
        cli_fail("demo", 1, "fusion: synchroniser: %s", ferry_strerror(err));
        goto fail;
    }
    for (int i = 0; i < 2; i++)
        if ((err = ferry_subscriber_wait_publishers(f->subs[i], 1, DEMO_CONNECT_NS)) != FERRY_OK) {
            cli_fail("demo", 1, "fusion: waiting for its publishers: %s", ferry_strerror(err));
            goto fail;
        }
    msg = DEMO_MSG_READY;
    if (cli_write_full(res, &msg, 1) != 0)
        return -1;

    int64_t started = cli_now_ns(), last = 0;
    uint64_t seen = 0;
    for (;;) {
        bool all;
        uint64_t now_seen = fusion_seen(c, f, &all);
        int64_t now = cli_now_ns();
        if (now_seen != seen) {
            seen = now_seen;
            last = now;
        }
        if (all || (last == 0 && now - started > DEMO_FIRST_FRAME_NS) ||
            (last != 0 && now - last > DEMO_IDLE_NS))
            break;
        err = ferry_sync_wait(f->sync, 100 * DEMO_NS_PER_MS);
        if (err != FERRY_OK && err != FERRY_ETIMEDOUT) {
            cli_fail("demo", 1, "fusion: wait: %s", ferry_strerror(err));
            return -1;
        }
        for (;;) {
            ferry_sample set[2];
            err = ferry_sync_take(f->sync, set);
            if (err == FERRY_EAGAIN)
                break;
            if (err) {
                cli_fail("demo", 1, "fusion: take: %s", ferry_strerror(err));
                return -1;
            }
            uint64_t seq;
            int64_t sent, st_cam = 0, st_lidar = 0;
            if (!image_check(&set[0], DEMO_FUSION_CAMERA, &seq, &sent, &st_cam) ||
                !cloud_check(&set[1], &st_lidar))
                f->r.corrupt++;
            else if (f->r.skew_count < c->lidar_frames)
                f->skew[f->r.skew_count++] =
                    st_cam > st_lidar ? st_cam - st_lidar : st_lidar - st_cam;
            f->r.pairs++;
            if ((err = ferry_sync_release(f->sync, set)) != FERRY_OK) {
                cli_fail("demo", 1, "fusion: release: %s", ferry_strerror(err));
                return -1;
            }
        }
    }
    ferry_sync_stats ss;
    if (ferry_sync_stats_get(f->sync, &ss) == FERRY_OK) {
        f->r.camera_taken = ss.received[0];
        f->r.lidar_taken = ss.received[1];
        f->r.camera_discarded = ss.discarded[0];
        f->r.lidar_discarded = ss.discarded[1];
    }
    return 0;
fail:
    cli_write_full(res, &msg, 1);
    return -1;
}

int demo_fusion_main(const demo_cfg *c, int res)
{
    fusion f;
    memset(&f, 0, sizeof f);
    f.r.status = -1;
    f.skew = malloc((c->lidar_frames + 1) * sizeof *f.skew);
    int64_t cpu0 = cli_cpu_ns();
    int rc = -1;
    if (!f.skew) {
        char msg = DEMO_MSG_FAIL;
        cli_write_full(res, &msg, 1);
    } else {
        f.r.status = fusion_run(c, &f, res);
        f.r.cpu_ns = cli_cpu_ns() - cpu0;
        rc = cli_write_full(res, &f.r, sizeof f.r);
        if (rc == 0 && f.r.skew_count)
            rc = cli_write_full(res, f.skew, f.r.skew_count * sizeof *f.skew);
    }
    ferry_err err;
    if (f.sync && (err = ferry_sync_destroy(f.sync)) != FERRY_OK)
        cli_fail("demo", 1, "fusion: synchroniser destroy: %s", ferry_strerror(err));
    for (int i = 0; i < 2; i++)
        if (f.subs[i] && (err = ferry_subscriber_destroy(f.subs[i])) != FERRY_OK)
            cli_fail("demo", 1, "fusion: subscriber destroy: %s", ferry_strerror(err));
    if (f.node && (err = ferry_node_destroy(f.node)) != FERRY_OK)
        cli_fail("demo", 1, "fusion: node destroy: %s", ferry_strerror(err));
    free(f.skew);
    return rc == 0 && f.r.status == 0 ? 0 : 1;
}
