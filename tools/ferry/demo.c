/*
 * `ferry demo`: the reference workload, self-contained. Simulated cameras (one process each)
 * publish 1280x720 RGB8 frames at 30 fps on /camera/<n>/image_raw; consumer processes take
 * every camera through one waitset, verify every frame and time it. Then the same pipeline runs
 * over the copying shared-memory baseline, and the two are compared. No daemon, no
 * configuration: a private domain directory is made and removed.
 *
 * Processes: the parent only orchestrates. Each child reports through its own pipe; the parent
 * reaps every child it forked and kills them all when anything goes wrong.
 */
#include "bench.h"
#include "cli.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NS_PER_S ((int64_t)1000000000)
#define NS_PER_MS ((int64_t)1000000)

#define FPS 30
#define FRAME_BYTES ((size_t)1280 * 720 * 3)
#define QUEUE_DEPTH 4
#define MAX_CAMERAS 16
#define MAX_CONSUMERS 16
#define CONNECT_NS (20 * NS_PER_S)
#define FIRST_FRAME_NS (20 * NS_PER_S)
#define IDLE_NS (3 * NS_PER_S)

typedef enum pipeline { PIPE_FERRY, PIPE_SHM } pipeline;

static const char *const pipeline_names[] = {"ferry zero-copy", "shm-copy baseline"};

typedef struct demo_cfg {
    pipeline kind;
    uint32_t cameras, consumers;
    uint64_t frames; /* per camera */
    cli_where where;
    bench_shm_bus *bus;
} demo_cfg;

/* Camera -> parent, after its last frame. */
typedef struct cam_result {
    int32_t status;
    uint32_t camera;
    uint64_t published;
    int64_t xport_cpu_ns; /* loan + publish, or the copy into the ring */
    int64_t fill_cpu_ns;  /* drawing the frame */
} cam_result;

/* Consumer -> parent: a head, then per camera a con_cam followed by its latencies. */
typedef struct con_head {
    int32_t status;
    uint32_t cameras;
    int64_t total_cpu_ns;
    int64_t verify_cpu_ns;
} con_head;

typedef struct con_cam {
    uint64_t received, dropped, corrupt, disorder, lat_count;
} con_cam;

#define MSG_READY 'R'
#define MSG_FAIL 'F'
#define MSG_QUIT 'Q'

/* ---------------------------------------------------------------------------------------------
 * Cameras
 * ------------------------------------------------------------------------------------------- */

static void topic_name(char *out, size_t cap, uint32_t cam)
{
    snprintf(out, cap, "/camera/%u/image_raw", (unsigned)cam);
}

/* Waits for len bytes on the control pipe; a ferry publisher keeps doing housekeeping. */
static int camera_wait_ctl(ferry_publisher *pub, int ctl, void *buf, size_t len)
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
            return bench_read_full(ctl, buf, len, -1);
    }
}

static int camera_main(const demo_cfg *c, uint32_t cam, int res, int ctl)
{
    cam_result out = {.status = -1, .camera = cam};
    char topic[64];
    topic_name(topic, sizeof topic, cam);
    ferry_node *node = NULL;
    ferry_publisher *pub = NULL;
    char *own = NULL;
    char msg = MSG_FAIL;
    ferry_err err;

    if (c->kind == PIPE_FERRY) {
        char name[32];
        snprintf(name, sizeof name, "camera%u", (unsigned)cam);
        if (cli_node(&c->where, name, &node) != FERRY_OK)
            goto fail;
        ferry_publisher_options po;
        ferry_publisher_options_init(&po);
        po.max_sample_size = FRAME_BYTES;
        err = ferry_publisher_create(&pub, node, topic, CLI_FRAME_TYPE, ferry_hash(CLI_FRAME_TYPE),
                                     &po);
        if (err) {
            cli_fail("demo", 1, "%s: publisher: %s", topic, ferry_strerror(err));
            goto fail;
        }
        err = ferry_publisher_wait_subscribers(pub, c->consumers, CONNECT_NS);
        if (err) {
            cli_fail("demo", 1, "%s: waiting for %u consumers: %s", topic, c->consumers,
                     ferry_strerror(err));
            goto fail;
        }
    } else {
        own = malloc(FRAME_BYTES);
        if (!own)
            goto fail;
        bench_prefault(own, FRAME_BYTES);
    }
    msg = MSG_READY;
    if (bench_write_full(res, &msg, 1) != 0)
        goto out;
    int64_t start;
    if (camera_wait_ctl(pub, ctl, &start, sizeof start) != 0)
        goto out;

    const int64_t period = NS_PER_S / FPS;
    for (uint64_t k = 0; k < c->frames; k++) {
        cli_sleep_until(start + (int64_t)k * period);
        int64_t c0 = cli_cpu_ns(), c1, c2;
        if (c->kind == PIPE_FERRY) {
            void *buf;
            err = ferry_loan(pub, FRAME_BYTES, &buf);
            if (err) {
                cli_fail("demo", 1, "%s: loan: %s", topic, ferry_strerror(err));
                goto out;
            }
            c1 = cli_cpu_ns();
            cli_frame_fill(buf, FRAME_BYTES, k + 1, true);
            c2 = cli_cpu_ns();
            err = ferry_publish(pub, buf, 0);
            if (err) {
                ferry_loan_release(pub, buf);
                cli_fail("demo", 1, "%s: publish: %s", topic, ferry_strerror(err));
                goto out;
            }
        } else {
            c1 = c0;
            cli_frame_fill(own, FRAME_BYTES, k + 1, true);
            c2 = cli_cpu_ns();
            bench_shm_send(c->bus, cam, own, FRAME_BYTES);
        }
        int64_t c3 = cli_cpu_ns();
        out.xport_cpu_ns += (c1 - c0) + (c3 - c2);
        out.fill_cpu_ns += c2 - c1;
        out.published++;
    }
    out.status = 0;
    if (bench_write_full(res, &out, sizeof out) != 0)
        goto out;
    /* Stay alive until every consumer is done: queued frames live in this process's pool. */
    camera_wait_ctl(pub, ctl, &msg, 1);
    goto done;

fail:
    bench_write_full(res, &msg, 1);
    goto done;
out:
    if (out.status != 0)
        bench_write_full(res, &out, sizeof out);
done:
    if (pub && (err = ferry_publisher_destroy(pub)) != FERRY_OK)
        cli_fail("demo", 1, "%s: publisher destroy: %s", topic, ferry_strerror(err));
    if (node && (err = ferry_node_destroy(node)) != FERRY_OK)
        cli_fail("demo", 1, "camera node destroy: %s", ferry_strerror(err));
    free(own);
    return out.status == 0 ? 0 : 1;
}

/* ---------------------------------------------------------------------------------------------
 * Consumers
 * ------------------------------------------------------------------------------------------- */

typedef struct consumer {
    const demo_cfg *c;
    con_cam cam[MAX_CAMERAS];
    cli_lat lat[MAX_CAMERAS];
    uint64_t last_seq[MAX_CAMERAS];
    bool done[MAX_CAMERAS];
    uint32_t done_count;
    int64_t verify_cpu_ns;
    int64_t last_frame_ns;
} consumer;

static void consumer_frame(consumer *k, uint32_t cam, const void *data, size_t size,
                           int64_t recv_ns)
{
    cli_frame_header h;
    k->last_frame_ns = recv_ns;
    int64_t v0 = cli_cpu_ns();
    bool ok = size == FRAME_BYTES && cli_frame_verify(data, size);
    k->verify_cpu_ns += cli_cpu_ns() - v0;
    con_cam *s = &k->cam[cam];
    if (!ok) {
        s->corrupt++;
        return;
    }
    memcpy(&h, data, sizeof h);
    s->received++;
    cli_lat_add(&k->lat[cam], recv_ns - h.send_ns);
    if (h.sequence <= k->last_seq[cam])
        s->disorder++;
    k->last_seq[cam] = h.sequence;
    if (h.sequence == k->c->frames && !k->done[cam]) {
        k->done[cam] = true;
        k->done_count++;
    }
}

/* true while frames are still expected and have not stopped coming. */
static bool consumer_waiting(const consumer *k, int64_t started)
{
    if (k->done_count == k->c->cameras)
        return false;
    int64_t now = bench_now_ns();
    if (k->last_frame_ns == 0)
        return now - started < FIRST_FRAME_NS;
    return now - k->last_frame_ns < IDLE_NS;
}

static int consumer_ferry(consumer *k, uint32_t index, int res)
{
    const demo_cfg *c = k->c;
    ferry_node *node = NULL;
    ferry_waitset *ws = NULL;
    ferry_subscriber *subs[MAX_CAMERAS] = {NULL};
    bool in_ws[MAX_CAMERAS] = {false};
    char name[32], topic[64];
    ferry_err err = FERRY_OK;
    int status = -1;

    snprintf(name, sizeof name, "consumer%u", (unsigned)index);
    if (cli_node(&c->where, name, &node) != FERRY_OK)
        goto fail;
    if ((err = ferry_waitset_create(&ws, node)) != FERRY_OK) {
        cli_fail("demo", 1, "waitset: %s", ferry_strerror(err));
        goto fail;
    }
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = QUEUE_DEPTH;
    so.overflow = FERRY_OVERFLOW_DROP_OLDEST;
    for (uint32_t cam = 0; cam < c->cameras; cam++) {
        topic_name(topic, sizeof topic, cam);
        err = ferry_subscriber_create(&subs[cam], node, topic, CLI_FRAME_TYPE,
                                      ferry_hash(CLI_FRAME_TYPE), &so);
        if (err == FERRY_OK) {
            err = ferry_waitset_add(ws, subs[cam], (void *)(uintptr_t)(cam + 1));
            in_ws[cam] = err == FERRY_OK;
        }
        if (err) {
            cli_fail("demo", 1, "%s: subscriber: %s", topic, ferry_strerror(err));
            goto fail;
        }
    }
    for (uint32_t cam = 0; cam < c->cameras; cam++) {
        err = ferry_subscriber_wait_publishers(subs[cam], 1, CONNECT_NS);
        if (err) {
            topic_name(topic, sizeof topic, cam);
            cli_fail("demo", 1, "%s: waiting for the camera: %s", topic, ferry_strerror(err));
            goto fail;
        }
    }
    char msg = MSG_READY;
    if (bench_write_full(res, &msg, 1) != 0)
        goto out;

    int64_t started = bench_now_ns();
    while (consumer_waiting(k, started)) {
        void *ready[MAX_CAMERAS];
        size_t n = 0;
        err = ferry_waitset_wait(ws, 100 * NS_PER_MS, ready, MAX_CAMERAS, &n);
        if (err == FERRY_ETIMEDOUT)
            continue;
        if (err) {
            cli_fail("demo", 1, "waitset wait: %s", ferry_strerror(err));
            goto out;
        }
        for (size_t i = 0; i < n; i++) {
            uint32_t cam = (uint32_t)((uintptr_t)ready[i] - 1);
            if (cam >= c->cameras)
                continue;
            /* Take until EAGAIN: that re-arms the subscriber's descriptor. */
            for (;;) {
                ferry_sample s;
                err = ferry_take(subs[cam], &s);
                if (err == FERRY_EAGAIN)
                    break;
                if (err) {
                    cli_fail("demo", 1, "take: %s", ferry_strerror(err));
                    goto out;
                }
                consumer_frame(k, cam, s.data, s.size, ferry_now().ns);
                if ((err = ferry_release(subs[cam], &s)) != FERRY_OK) {
                    cli_fail("demo", 1, "release: %s", ferry_strerror(err));
                    goto out;
                }
            }
        }
    }
    status = 0;
out:
    for (uint32_t cam = 0; cam < c->cameras; cam++) {
        ferry_subscriber_stats st;
        if (subs[cam] && ferry_subscriber_stats_get(subs[cam], &st) == FERRY_OK)
            k->cam[cam].dropped = st.dropped;
    }
    goto teardown;
fail:
    msg = MSG_FAIL;
    bench_write_full(res, &msg, 1);
teardown:
    for (uint32_t cam = 0; cam < c->cameras; cam++) {
        if (in_ws[cam])
            ferry_waitset_remove(ws, subs[cam]);
        if (subs[cam] && (err = ferry_subscriber_destroy(subs[cam])) != FERRY_OK)
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
    char *own = malloc(FRAME_BYTES);
    char msg = own ? MSG_READY : MSG_FAIL;
    if (bench_write_full(res, &msg, 1) != 0 || !own) {
        free(own);
        return -1;
    }
    bench_prefault(own, FRAME_BYTES);
    int status = 0;
    int64_t started = bench_now_ns();
    while (consumer_waiting(k, started)) {
        uint32_t cam;
        size_t size;
        int rc = bench_shm_recv(c->bus, index, own, FRAME_BYTES, &cam, &size, 100 * NS_PER_MS);
        if (rc == 1)
            continue;
        if (rc != 0) {
            status = -1;
            break;
        }
        consumer_frame(k, cam, own, size, bench_now_ns());
    }
    for (uint32_t cam = 0; cam < c->cameras; cam++)
        k->cam[cam].dropped = bench_shm_dropped(c->bus, index, cam);
    free(own);
    return status;
}

static int consumer_main(const demo_cfg *c, uint32_t index, int res)
{
    consumer *k = calloc(1, sizeof *k);
    if (!k)
        return 1;
    k->c = c;
    for (uint32_t cam = 0; cam < c->cameras; cam++)
        if (!cli_lat_init(&k->lat[cam], c->frames)) {
            char msg = MSG_FAIL;
            bench_write_full(res, &msg, 1);
            return 1;
        }
    int64_t cpu0 = cli_cpu_ns();
    int status = c->kind == PIPE_FERRY ? consumer_ferry(k, index, res)
                                       : consumer_shm(k, index, res);
    con_head head = {.status = status, .cameras = c->cameras,
                     .total_cpu_ns = cli_cpu_ns() - cpu0, .verify_cpu_ns = k->verify_cpu_ns};
    int rc = bench_write_full(res, &head, sizeof head);
    for (uint32_t cam = 0; cam < c->cameras && rc == 0; cam++) {
        k->cam[cam].lat_count = k->lat[cam].count;
        rc = bench_write_full(res, &k->cam[cam], sizeof k->cam[cam]);
        if (rc == 0 && k->lat[cam].count)
            rc = bench_write_full(res, k->lat[cam].ns, k->lat[cam].count * sizeof(int64_t));
        cli_lat_free(&k->lat[cam]);
    }
    free(k);
    return rc == 0 && status == 0 ? 0 : 1;
}

/* ---------------------------------------------------------------------------------------------
 * The parent: fork, start, collect, reap
 * ------------------------------------------------------------------------------------------- */

typedef struct cam_report {
    uint64_t published, expected, received, dropped, corrupt, disorder;
    int64_t missing;
    double p50_us, p99_us, max_us;
    double pub_cpu_us, fill_cpu_us;
} cam_report;

typedef struct demo_report {
    cam_report cam[MAX_CAMERAS];
    cam_report all;
    double sub_cpu_us, verify_cpu_us;
    bool ran;      /* the pipeline ran to the end */
    bool verified; /* every frame verified, none missing */
} demo_report;

typedef struct children {
    pid_t pid[MAX_CAMERAS + MAX_CONSUMERS];
    int res[MAX_CAMERAS + MAX_CONSUMERS]; /* cameras first, then consumers */
    int ctl[MAX_CAMERAS];
    size_t count;
} children;

static void close_all(children *ch)
{
    for (size_t i = 0; i < MAX_CAMERAS + MAX_CONSUMERS; i++)
        if (ch->res[i] >= 0) {
            close(ch->res[i]);
            ch->res[i] = -1;
        }
    for (size_t i = 0; i < MAX_CAMERAS; i++)
        if (ch->ctl[i] >= 0) {
            close(ch->ctl[i]);
            ch->ctl[i] = -1;
        }
}

/* SIGINT/SIGTERM end the run early: the handler kills the children (async-signal-safe), the
 * pipeline then fails its reads, reaps them, and the private directory is removed as usual. */
static volatile sig_atomic_t interrupted;
static children *volatile running;

static void on_signal(int sig)
{
    (void)sig;
    interrupted = 1;
    children *ch = running;
    if (ch)
        for (size_t i = 0; i < MAX_CAMERAS + MAX_CONSUMERS; i++)
            if (ch->pid[i] > 0)
                kill(ch->pid[i], SIGKILL);
}

/* Forks child number slot (cameras first); returns false when it could not. */
static bool spawn(const demo_cfg *c, children *ch, size_t slot)
{
    int res[2], ctl[2] = {-1, -1};
    bool camera = slot < c->cameras;
    if (pipe(res) != 0)
        return false;
    if (camera && pipe(ctl) != 0) {
        close(res[0]);
        close(res[1]);
        return false;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        close(res[0]);
        close(res[1]);
        if (camera) {
            close(ctl[0]);
            close(ctl[1]);
        }
        return false;
    }
    if (pid == 0) {
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        bench_child_setup(parent);
        /* Other children's pipe ends stay with the parent. */
        close_all(ch);
        close(res[0]);
        if (camera)
            close(ctl[1]);
        int rc = camera ? camera_main(c, (uint32_t)slot, res[1], ctl[0])
                        : consumer_main(c, (uint32_t)(slot - c->cameras), res[1]);
        _exit(rc);
    }
    close(res[1]);
    ch->res[slot] = res[0];
    if (camera) {
        close(ctl[0]);
        ch->ctl[slot] = ctl[1];
    }
    ch->pid[slot] = pid;
    ch->count = slot + 1;
    return true;
}

/* Reaps every child; kills them first when kill_first. true when all exited 0. */
static bool reap(children *ch, bool kill_first)
{
    bool ok = true;
    for (size_t i = 0; i < ch->count; i++) {
        if (ch->pid[i] <= 0)
            continue;
        if (kill_first)
            kill(ch->pid[i], SIGKILL);
    }
    for (size_t i = 0; i < ch->count; i++) {
        if (ch->pid[i] <= 0)
            continue;
        int st;
        pid_t r;
        while ((r = waitpid(ch->pid[i], &st, 0)) < 0 && errno == EINTR) {
        }
        if (r < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            ok = false;
        ch->pid[i] = 0;
    }
    return ok;
}

static int read_consumer(const demo_cfg *c, int fd, int64_t deadline, cli_lat *lat,
                         demo_report *rep, double *xport_ns, double *verify_ns, uint64_t *frames)
{
    con_head head;
    if (bench_read_full(fd, &head, sizeof head, deadline) != 0 || head.cameras != c->cameras)
        return -1;
    int status = head.status;
    uint64_t got = 0;
    for (uint32_t cam = 0; cam < c->cameras; cam++) {
        con_cam s;
        if (bench_read_full(fd, &s, sizeof s, deadline) != 0 || s.lat_count > c->frames)
            return -1;
        for (uint64_t i = 0; i < s.lat_count; i++) {
            int64_t ns;
            if (bench_read_full(fd, &ns, sizeof ns, deadline) != 0)
                return -1;
            cli_lat_add(&lat[cam], ns);
            cli_lat_add(&lat[MAX_CAMERAS], ns);
        }
        cam_report *r = &rep->cam[cam];
        r->received += s.received;
        r->dropped += s.dropped;
        r->corrupt += s.corrupt;
        r->disorder += s.disorder;
        got += s.received + s.corrupt;
    }
    *xport_ns += (double)(head.total_cpu_ns - head.verify_cpu_ns);
    *verify_ns += (double)head.verify_cpu_ns;
    *frames += got;
    return status;
}

static void fill_latency(cam_report *r, cli_lat *l)
{
    r->p50_us = (double)cli_lat_pct(l, 50.0) / 1000.0;
    r->p99_us = (double)cli_lat_pct(l, 99.0) / 1000.0;
    r->max_us = (double)cli_lat_max(l) / 1000.0;
}

static void run_pipeline(const demo_cfg *c, demo_report *rep)
{
    memset(rep, 0, sizeof *rep);
    children ch;
    memset(&ch, 0, sizeof ch);
    for (size_t i = 0; i < MAX_CAMERAS + MAX_CONSUMERS; i++)
        ch.res[i] = -1;
    for (size_t i = 0; i < MAX_CAMERAS; i++)
        ch.ctl[i] = -1;
    cli_lat lat[MAX_CAMERAS + 1];
    bool lat_ok = true;
    /* lat[cam] per camera, lat[MAX_CAMERAS] for all of them together. */
    for (size_t i = 0; i <= MAX_CAMERAS; i++) {
        size_t cap = 0;
        if (i < c->cameras)
            cap = c->frames * c->consumers;
        else if (i == MAX_CAMERAS)
            cap = c->frames * c->consumers * c->cameras;
        lat_ok &= cli_lat_init(&lat[i], cap);
    }
    bool ok = lat_ok && !interrupted;
    running = &ch;
    size_t total = c->cameras + c->consumers;
    for (size_t i = 0; ok && i < total; i++)
        if (!spawn(c, &ch, i)) {
            cli_fail("demo", 1, "cannot start a process: %s", strerror(errno));
            ok = false;
        }

    /* Everyone connected: cameras saw all consumers, consumers saw all cameras. */
    int64_t deadline = bench_now_ns() + CONNECT_NS + 10 * NS_PER_S;
    for (size_t i = 0; ok && i < total; i++) {
        char msg = 0;
        if (bench_read_full(ch.res[i], &msg, 1, deadline) != 0 || msg != MSG_READY) {
            cli_fail("demo", 1, "%s %zu did not start", i < c->cameras ? "camera" : "consumer",
                     i < c->cameras ? i : i - c->cameras);
            ok = false;
        }
    }

    /* Cameras are free-running: staggered across one frame period, like real ones. */
    int64_t start = bench_now_ns() + 100 * NS_PER_MS;
    for (uint32_t cam = 0; ok && cam < c->cameras; cam++) {
        int64_t t = start + (int64_t)cam * (NS_PER_S / FPS) / (int64_t)c->cameras;
        if (bench_write_full(ch.ctl[cam], &t, sizeof t) != 0)
            ok = false;
    }

    double xport_ns = 0, verify_ns = 0;
    uint64_t frames = 0;
    deadline = start + (int64_t)c->frames * (NS_PER_S / FPS) + FIRST_FRAME_NS + 10 * NS_PER_S;
    for (uint32_t i = 0; ok && i < c->consumers; i++) {
        int st = read_consumer(c, ch.res[c->cameras + i], deadline, lat, rep, &xport_ns,
                               &verify_ns, &frames);
        if (st != 0) {
            cli_fail("demo", 1, "consumer %u failed", (unsigned)i);
            ok = false;
        }
    }

    double pub_ns = 0, fill_ns = 0;
    uint64_t published = 0;
    for (uint32_t cam = 0; ok && cam < c->cameras; cam++) {
        char quit = MSG_QUIT;
        cam_result cr;
        if (bench_write_full(ch.ctl[cam], &quit, 1) != 0 ||
            bench_read_full(ch.res[cam], &cr, sizeof cr, bench_now_ns() + 10 * NS_PER_S) != 0 ||
            cr.status != 0 || cr.camera != cam) {
            cli_fail("demo", 1, "camera %u failed", (unsigned)cam);
            ok = false;
            break;
        }
        cam_report *r = &rep->cam[cam];
        r->published = cr.published;
        r->pub_cpu_us = cr.published ? (double)cr.xport_cpu_ns / 1000.0 / (double)cr.published : 0;
        r->fill_cpu_us = cr.published ? (double)cr.fill_cpu_ns / 1000.0 / (double)cr.published : 0;
        pub_ns += (double)cr.xport_cpu_ns;
        fill_ns += (double)cr.fill_cpu_ns;
        published += cr.published;
    }
    if (!reap(&ch, !ok || interrupted)) {
        if (ok)
            cli_fail("demo", 1, "a process exited with an error");
        ok = false;
    }
    running = NULL;
    close_all(&ch);
    ok = ok && !interrupted;

    if (ok) {
        rep->ran = true;
        rep->verified = true;
        cam_report *a = &rep->all;
        for (uint32_t cam = 0; cam < c->cameras; cam++) {
            cam_report *r = &rep->cam[cam];
            r->expected = r->published * c->consumers;
            r->missing = (int64_t)r->expected - (int64_t)(r->received + r->dropped + r->corrupt);
            fill_latency(r, &lat[cam]);
            if (r->corrupt || r->missing || r->disorder || r->published != c->frames)
                rep->verified = false;
            a->published += r->published;
            a->expected += r->expected;
            a->received += r->received;
            a->dropped += r->dropped;
            a->corrupt += r->corrupt;
            a->disorder += r->disorder;
            a->missing += r->missing;
        }
        fill_latency(a, &lat[MAX_CAMERAS]);
        a->pub_cpu_us = published ? pub_ns / 1000.0 / (double)published : 0;
        a->fill_cpu_us = published ? fill_ns / 1000.0 / (double)published : 0;
        rep->sub_cpu_us = frames ? xport_ns / 1000.0 / (double)frames : 0;
        rep->verify_cpu_us = frames ? verify_ns / 1000.0 / (double)frames : 0;
    }
    for (size_t i = 0; i <= MAX_CAMERAS; i++)
        cli_lat_free(&lat[i]);
}

/* ---------------------------------------------------------------------------------------------
 * Output and the command
 * ------------------------------------------------------------------------------------------- */

static void print_report(const demo_cfg *c, const demo_report *rep)
{
    printf("\n%s: %u camera%s x %llu frames of %zu B (1280x720 RGB8) at %d fps, %u consumer%s\n",
           pipeline_names[c->kind], c->cameras, c->cameras == 1 ? "" : "s",
           (unsigned long long)c->frames, FRAME_BYTES, FPS, c->consumers,
           c->consumers == 1 ? "" : "s");
    if (!rep->ran) {
        printf("  did not complete (see the messages above)\n");
        return;
    }
    printf("%-22s %7s %8s %7s %7s %7s %9s %9s %9s %12s %12s\n", "topic", "frames", "received",
           "dropped", "missing", "corrupt", "p50 us", "p99 us", "max us", "pub cpu us",
           "sub cpu us");
    for (uint32_t cam = 0; cam <= c->cameras; cam++) {
        const cam_report *r = cam < c->cameras ? &rep->cam[cam] : &rep->all;
        char topic[64];
        if (cam < c->cameras)
            topic_name(topic, sizeof topic, cam);
        else
            snprintf(topic, sizeof topic, "all");
        printf("%-22s %7llu %8llu %7llu %7lld %7llu %9.1f %9.1f %9.1f %12.1f %12.1f\n", topic,
               (unsigned long long)r->published, (unsigned long long)r->received,
               (unsigned long long)r->dropped, (long long)r->missing,
               (unsigned long long)r->corrupt, r->p50_us, r->p99_us, r->max_us, r->pub_cpu_us,
               rep->sub_cpu_us);
    }
    printf("cpu us = transport work per frame (camera: %s; consumer: %s, all cameras);\n"
           "drawing a frame (%.0f us) and verifying it (%.0f us) are left out.%s\n",
           c->kind == PIPE_FERRY ? "loan + publish" : "copy into the ring + wake",
           c->kind == PIPE_FERRY ? "wait + take + release" : "wait + copy out",
           rep->all.fill_cpu_us, rep->verify_cpu_us,
           rep->all.disorder ? " Frames arrived out of order!" : "");
}

static void usage(FILE *to)
{
    fputs("usage: ferry demo [--seconds N] [--cameras N] [--consumers N] [--no-baseline]\n"
          "                  [--dir PATH] [--domain N]\n"
          "\n"
          "Simulated cameras (one process each, 1280x720 RGB8 at 30 fps) publish on\n"
          "/camera/<n>/image_raw; consumer processes verify every frame and time it. Then the\n"
          "same pipeline runs over a copying shared-memory transport for comparison.\n"
          "  --seconds N     how long the cameras run (default 5)\n"
          "  --cameras N     camera processes, 1..16 (default 3)\n"
          "  --consumers N   consumer processes, 1..16 (default 1)\n"
          "  --no-baseline   skip the shm-copy comparison\n"
          "  --dir, --domain use this domain instead of a private directory\n"
          "Exits 0 when every frame arrived intact (or was counted as dropped).\n",
          to);
}

static bool parse_count(const char *opt, const char *text, uint64_t lo, uint64_t hi,
                        uint64_t *out)
{
    if (!text || !cli_parse_u64(text, out) || *out < lo || *out > hi) {
        cli_fail("demo", 2, "%s takes a number from %llu to %llu", opt, (unsigned long long)lo,
                 (unsigned long long)hi);
        return false;
    }
    return true;
}

int ferry_cmd_demo(int argc, char **argv)
{
    uint64_t seconds = 5, cameras = 3, consumers = 1;
    bool baseline = true;
    const char *dir = NULL;
    const char *domain = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--seconds") == 0) {
            if (!parse_count(a, v, 1, 3600, &seconds))
                return 2;
            i++;
        } else if (strcmp(a, "--cameras") == 0) {
            if (!parse_count(a, v, 1, MAX_CAMERAS, &cameras))
                return 2;
            i++;
        } else if (strcmp(a, "--consumers") == 0) {
            if (!parse_count(a, v, 1, MAX_CONSUMERS, &consumers))
                return 2;
            i++;
        } else if (strcmp(a, "--no-baseline") == 0) {
            baseline = false;
        } else if (strcmp(a, "--dir") == 0 && v) {
            dir = v;
            i++;
        } else if (strcmp(a, "--domain") == 0 && v) {
            domain = v;
            i++;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else {
            return cli_fail("demo", 2, "unknown option '%s' (try 'ferry demo --help')", a);
        }
    }

    demo_cfg cfg = {.kind = PIPE_FERRY, .cameras = (uint32_t)cameras,
                    .consumers = (uint32_t)consumers, .frames = seconds * FPS};
    char private_dir[256] = "";
    if (dir || domain) {
        if (!cli_where_from_env(&cfg.where))
            return 2;
        if (dir)
            cfg.where.dir = dir;
        if (domain && !cli_parse_domain(domain, &cfg.where.domain))
            return 2;
    } else {
        if (!bench_private_dir("ferry-demo-", private_dir, sizeof private_dir))
            return 1;
        cfg.where.dir = private_dir;
        cfg.where.domain = 0;
    }

    printf("ferry demo: %u camera processes, %u consumer process%s, %llu s; domain %u in %s\n",
           cfg.cameras, cfg.consumers, cfg.consumers == 1 ? "" : "es",
           (unsigned long long)seconds, (unsigned)cfg.where.domain,
           cfg.where.dir ? cfg.where.dir : "the default directory");
    fflush(stdout);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    demo_report zc, base;
    run_pipeline(&cfg, &zc);
    print_report(&cfg, &zc);
    bool ok = zc.ran && zc.verified;

    if (baseline && !interrupted) {
        demo_cfg bc = cfg;
        bc.kind = PIPE_SHM;
        bc.bus = bench_shm_bus_create(bc.cameras, bc.consumers, QUEUE_DEPTH, FRAME_BYTES);
        if (bc.bus) {
            run_pipeline(&bc, &base);
            bench_shm_bus_destroy(bc.bus);
        } else {
            memset(&base, 0, sizeof base);
        }
        print_report(&bc, &base);
        ok = ok && base.ran && base.verified;
        if (zc.ran && base.ran && zc.all.p50_us > 0) {
            double zcpu = zc.all.pub_cpu_us + zc.sub_cpu_us;
            double bcpu = base.all.pub_cpu_us + base.sub_cpu_us;
            printf("\nferry vs shm-copy: latency p50 %.1f vs %.1f us (%.1fx lower), p99 %.1f vs "
                   "%.1f us; transport CPU per frame (camera + consumer) %.1f vs %.1f us "
                   "(%.1fx lower)\n",
                   zc.all.p50_us, base.all.p50_us, base.all.p50_us / zc.all.p50_us,
                   zc.all.p99_us, base.all.p99_us, zcpu, bcpu, zcpu > 0 ? bcpu / zcpu : 0.0);
        }
    }

    if (private_dir[0] && bench_rmtree(private_dir) != 0)
        cli_fail("demo", 1, "could not remove %s", private_dir);
    if (interrupted) {
        printf("\nresult: interrupted; every process stopped, %s removed\n",
               private_dir[0] ? private_dir : "nothing left to remove");
        return 130;
    }
    printf("\n%s\n", ok ? "result: every frame arrived intact (or was counted as dropped)"
                        : "result: FAILED (frames corrupt or missing, or a process failed)");
    return ok ? 0 : 1;
}
