/*
 * `ferry demo`: the reference workload, self-contained. Simulated cameras (one process each)
 * publish 1280x720 RGB8 images at 30 fps on /camera/<n>/image_raw and a simulated LiDAR
 * publishes 64x1024-point clouds at 10 Hz on /lidar/points; consumer processes take every
 * stream through one waitset, verify every frame and time it; a fusion process pairs camera 0
 * with the LiDAR by stamp (ferry_sync); with a GPU, a process runs a kernel on every frame of
 * camera 0. Then the camera pipeline runs over the copying shared-memory baseline, and one table
 * compares them. No daemon, no configuration: a private domain directory is made and removed.
 *
 * Processes: the parent only orchestrates. Each child reports through its own pipe; the parent
 * reaps every child it forked and kills them all when anything goes wrong or on SIGINT.
 */
#include "commands.h"
#include "demo.h"

#if defined(__has_include)
#if __has_include(<ferry/rt.h>)
#include <ferry/rt.h>
#define DEMO_HAVE_RT 1
#endif
#endif

#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_PROCS (DEMO_MAX_CAMERAS + DEMO_MAX_CONSUMERS + 3)
#define MAX_CPUS 1024

static const char *const pipeline_names[] = {"ferry", "shm-copy"};
static const char *const pipeline_long[] = {"ferry zero-copy", "shm-copy baseline"};

/* ---------------------------------------------------------------------------------------------
 * Children
 * ------------------------------------------------------------------------------------------- */

typedef struct proc {
    pid_t pid;
    int res, ctl;
    demo_role role;
    uint32_t index;
    demo_rt_note rt;
} proc;

typedef struct children {
    proc p[MAX_PROCS];
    size_t count;
} children;

static void close_all(children *ch)
{
    for (size_t i = 0; i < ch->count; i++) {
        if (ch->p[i].res >= 0)
            close(ch->p[i].res);
        if (ch->p[i].ctl >= 0)
            close(ch->p[i].ctl);
        ch->p[i].res = ch->p[i].ctl = -1;
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
        for (size_t i = 0; i < ch->count; i++)
            if (ch->p[i].pid > 0)
                kill(ch->p[i].pid, SIGKILL);
}

static const char *role_name(demo_role r)
{
    switch (r) {
    case DEMO_CAMERA:
        return "camera";
    case DEMO_LIDAR:
        return "lidar";
    case DEMO_CONSUMER:
        return "consumer";
    case DEMO_FUSION:
        return "fusion";
    case DEMO_GPU:
        return "GPU consumer";
    }
    return "process";
}

/* In the child: the real-time controls asked for, applied to the process's only thread. When
 * something is refused the rest is applied without it, and the note says what. */
static void child_rt(const demo_cfg *c, size_t slot, demo_rt_note *n)
{
    memset(n, 0, sizeof *n);
    n->asked = c->rt ? 2 : c->pin ? 1 : 0;
    n->cpu = -1;
#ifdef DEMO_HAVE_RT
    n->available = 1;
    if (!n->asked || c->ncpus == 0)
        return;
    int cpu = c->cpus[slot % c->ncpus];
    ferry_rt_options o;
    ferry_rt_options_init(&o);
    o.cpus = &cpu;
    o.ncpus = 1;
    if (c->rt) {
        o.fifo_priority = DEMO_FIFO_PRIORITY;
        o.lock_memory = true;
        o.prefault_stack_bytes = (size_t)256 << 10;
        o.prefault_heap_bytes = (size_t)8 << 20;
    }
    /* ferry_rt_apply stops at the first refusal: leave that step out and apply the rest. */
    for (int attempt = 0; attempt < 3; attempt++) {
        ferry_rt_report rep;
        memset(&rep, 0, sizeof rep);
        ferry_err err = ferry_rt_apply(&o, &rep);
        n->pinned |= rep.pinned;
        n->fifo |= rep.fifo;
        n->locked |= rep.locked;
        n->prefaulted |= rep.prefaulted;
        if (err == FERRY_OK)
            break;
        if (!n->failed_errno) {
            n->failed_errno = rep.failed_errno ? rep.failed_errno : -1;
            snprintf(n->message, sizeof n->message, "%s",
                     rep.message[0] ? rep.message : ferry_strerror(err));
        }
        if (o.ncpus && !rep.pinned)
            o.ncpus = 0;
        else if (o.fifo_priority && !rep.fifo)
            o.fifo_priority = 0;
        else if (o.lock_memory && !rep.locked)
            o.lock_memory = false;
        else
            break;
    }
    if (n->pinned)
        n->cpu = cpu;
#else
    (void)slot;
    (void)c;
#endif
}

/* Forks the next child; returns false when it could not. */
static bool spawn(const demo_cfg *c, children *ch, demo_role role, uint32_t index)
{
    if (ch->count >= MAX_PROCS)
        return false;
    int res[2], ctl[2] = {-1, -1};
    bool source = role == DEMO_CAMERA || role == DEMO_LIDAR;
    if (pipe(res) != 0)
        return false;
    if (source && pipe(ctl) != 0) {
        close(res[0]);
        close(res[1]);
        return false;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid();
    size_t slot = ch->count;
    pid_t pid = fork();
    if (pid < 0) {
        close(res[0]);
        close(res[1]);
        if (source) {
            close(ctl[0]);
            close(ctl[1]);
        }
        return false;
    }
    if (pid == 0) {
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        cli_child_setup(parent);
        /* Other children's pipe ends stay with the parent. */
        close_all(ch);
        close(res[0]);
        if (source)
            close(ctl[1]);
        demo_rt_note note;
        child_rt(c, slot, &note);
        if (cli_write_full(res[1], &note, sizeof note) != 0)
            _exit(1);
        int rc = 1;
        switch (role) {
        case DEMO_CAMERA:
            rc = demo_camera_main(c, index, res[1], ctl[0]);
            break;
        case DEMO_LIDAR:
            rc = demo_lidar_main(c, res[1], ctl[0]);
            break;
        case DEMO_CONSUMER:
            rc = demo_consumer_main(c, index, res[1]);
            break;
        case DEMO_FUSION:
            rc = demo_fusion_main(c, res[1]);
            break;
        case DEMO_GPU:
#ifdef FERRY_HAVE_GPU
            rc = demo_gpu_main(c, res[1]);
#endif
            break;
        }
        _exit(rc);
    }
    close(res[1]);
    if (source)
        close(ctl[0]);
    proc *p = &ch->p[slot];
    memset(p, 0, sizeof *p);
    p->pid = pid;
    p->res = res[0];
    p->ctl = source ? ctl[1] : -1;
    p->role = role;
    p->index = index;
    ch->count = slot + 1;
    return true;
}

/* Reaps every child; kills them first when kill_first. true when all exited 0. */
static bool reap(children *ch, bool kill_first)
{
    bool ok = true;
    for (size_t i = 0; i < ch->count; i++)
        if (kill_first && ch->p[i].pid > 0)
            kill(ch->p[i].pid, SIGKILL);
    for (size_t i = 0; i < ch->count; i++) {
        if (ch->p[i].pid <= 0)
            continue;
        int st;
        pid_t r;
        while ((r = waitpid(ch->p[i].pid, &st, 0)) < 0 && errno == EINTR) {
        }
        if (r < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            ok = false;
        ch->p[i].pid = 0;
    }
    return ok;
}

/* ---------------------------------------------------------------------------------------------
 * What the parent keeps
 * ------------------------------------------------------------------------------------------- */

typedef struct row {
    char name[64];
    uint64_t published, expected, received, dropped, corrupt, disorder;
    int64_t missing;
    double p50_us, p99_us, max_us; /* frames sent once the start-up was over */
    uint64_t startup_n;            /* frames sent before, left out of those */
    double startup_max_us;
    double pub_cpu_us, sub_cpu_us;
    int64_t device_allocs; /* -1: not relevant */
    demo_lat_rec *recs;
    size_t nrecs, caprecs;
} row;

typedef struct report {
    demo_pipeline kind;
    bool ran, verified;
    int64_t start_ns;
    uint32_t nstreams; /* cameras, then the LiDAR */
    row s[DEMO_MAX_STREAMS];
    row cams; /* every camera together */
    double fill_cpu_us, verify_cpu_us;
    /* GPU consumer */
    bool gpu_asked, gpu_ran;
    char gpu_skip[128];
    row gpu;
    demo_gpu_result gr;
    /* fusion */
    bool fusion_ran;
    demo_fusion_result fr;
    double skew_p50_ms, skew_max_ms;
    /* real-time controls */
    uint32_t procs, pinned, fifo, locked, prefaulted;
    bool rt_available;
    char rt_message[256];
} report;

static bool row_alloc(row *r, size_t cap)
{
    r->caprecs = cap;
    r->nrecs = 0;
    r->recs = cap ? malloc(cap * sizeof *r->recs) : NULL;
    return cap == 0 || r->recs != NULL;
}

static void row_add(row *r, const demo_lat_rec *rec)
{
    if (r->nrecs < r->caprecs)
        r->recs[r->nrecs++] = *rec;
}

/* The first DEMO_SETTLE_NS of a run is its start-up (connections made, pages touched for the
 * first time): the latency columns leave those frames out, and the table says what they were.
 * A run too short to have frames after it keeps them all. */
#define DEMO_SETTLE_NS (500 * DEMO_NS_PER_MS)

static void row_latency(row *r, int64_t settled_ns)
{
    cli_lat l;
    if (!cli_lat_init(&l, r->nrecs))
        return;
    uint64_t startup_n = 0;
    int64_t startup_max = 0;
    for (size_t i = 0; i < r->nrecs; i++) {
        if (r->recs[i].sent_ns < settled_ns) {
            startup_n++;
            if (r->recs[i].lat_ns > startup_max)
                startup_max = r->recs[i].lat_ns;
        } else {
            cli_lat_add(&l, r->recs[i].lat_ns);
        }
    }
    if (startup_n == r->nrecs) { /* nothing after the start-up: all of them */
        for (size_t i = 0; i < r->nrecs; i++)
            cli_lat_add(&l, r->recs[i].lat_ns);
        startup_n = 0;
        startup_max = 0;
    }
    r->p50_us = (double)cli_lat_pct(&l, 50.0) / 1000.0;
    r->p99_us = (double)cli_lat_pct(&l, 99.0) / 1000.0;
    r->max_us = (double)cli_lat_max(&l) / 1000.0;
    r->startup_n = startup_n;
    r->startup_max_us = (double)startup_max / 1000.0;
    cli_lat_free(&l);
}

static void report_free(report *rep)
{
    for (uint32_t i = 0; i < DEMO_MAX_STREAMS; i++)
        free(rep->s[i].recs);
    free(rep->cams.recs);
    free(rep->gpu.recs);
}

/* ---------------------------------------------------------------------------------------------
 * Progress (a terminal only)
 * ------------------------------------------------------------------------------------------- */

typedef struct progress {
    bool on;
    const demo_cfg *c;
    int64_t start_ns, end_ns, last_ns;
    bool shown;
} progress;

typedef struct counts {
    uint64_t published, taken, dropped;
} counts;

static bool count_endpoint(void *arg, const ferry_endpoint_info *info)
{
    counts *n = arg;
    if (info->kind == FERRY_ENDPOINT_PUBLISHER) {
        n->published += info->pub.published;
    } else {
        n->taken += info->sub.received;
        n->dropped += info->sub.dropped;
    }
    return true;
}

static void progress_tick(progress *pg, bool force)
{
    if (!pg->on)
        return;
    int64_t now = cli_now_ns();
    if (!force && now - pg->last_ns < 250 * DEMO_NS_PER_MS)
        return;
    pg->last_ns = now;
    double t = now < pg->start_ns ? 0.0 : (double)(now - pg->start_ns) / 1e9;
    double total = (double)(pg->end_ns - pg->start_ns) / 1e9;
    if (t > total)
        t = total;
    printf("\r\033[K  %s: %.1f / %.1f s", pipeline_long[pg->c->kind], t, total);
    if (pg->c->kind == DEMO_FERRY) {
        counts n = {0, 0, 0};
        ferry_inspect(pg->c->where.dir, pg->c->where.domain, NULL, count_endpoint, &n);
        printf("   frames published %llu, taken %llu, dropped %llu",
               (unsigned long long)n.published, (unsigned long long)n.taken,
               (unsigned long long)n.dropped);
    }
    fflush(stdout);
    pg->shown = true;
}

static void progress_clear(progress *pg)
{
    if (pg->on && pg->shown) {
        printf("\r\033[K");
        fflush(stdout);
        pg->shown = false;
    }
}

/* Waits until fd is readable (or closed), ticking the progress line; false at the deadline. */
static bool wait_readable(int fd, int64_t deadline, progress *pg)
{
    for (;;) {
        progress_tick(pg, false);
        int64_t left = deadline - cli_now_ns();
        if (left <= 0)
            return false;
        int ms = left > 250 * DEMO_NS_PER_MS ? 250 : (int)(left / DEMO_NS_PER_MS) + 1;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int r = poll(&pfd, 1, ms);
        if (r < 0 && errno != EINTR)
            return false;
        if (interrupted)
            return false;
        if (r > 0)
            return true;
    }
}

/* ---------------------------------------------------------------------------------------------
 * Reading the children's reports
 * ------------------------------------------------------------------------------------------- */

static int read_consumer(const demo_cfg *c, int fd, int64_t deadline, report *rep, double *xport_ns,
                         double *verify_ns, uint64_t *frames)
{
    demo_con_head head;
    if (cli_read_full(fd, &head, sizeof head, deadline) != 0 || head.streams != rep->nstreams)
        return -1;
    uint64_t got = 0;
    for (uint32_t i = 0; i < rep->nstreams; i++) {
        demo_stream_result s;
        uint64_t expect = i < c->cameras ? c->frames : c->lidar_frames;
        if (cli_read_full(fd, &s, sizeof s, deadline) != 0 || s.lat_count > expect)
            return -1;
        row *r = &rep->s[i];
        for (uint64_t k = 0; k < s.lat_count; k++) {
            demo_lat_rec rec;
            if (cli_read_full(fd, &rec, sizeof rec, deadline) != 0)
                return -1;
            row_add(r, &rec);
            if (i < c->cameras)
                row_add(&rep->cams, &rec);
        }
        r->received += s.received;
        r->dropped += s.dropped;
        r->corrupt += s.corrupt;
        r->disorder += s.disorder;
        got += s.received + s.corrupt;
    }
    *xport_ns += (double)(head.total_cpu_ns - head.verify_cpu_ns);
    *verify_ns += (double)head.verify_cpu_ns;
    *frames += got;
    return head.status;
}

static int read_fusion(const demo_cfg *c, int fd, int64_t deadline, report *rep)
{
    demo_fusion_result *f = &rep->fr;
    if (cli_read_full(fd, f, sizeof *f, deadline) != 0 || f->skew_count > c->lidar_frames)
        return -1;
    cli_lat l;
    if (!cli_lat_init(&l, f->skew_count))
        return -1;
    int rc = 0;
    for (uint64_t i = 0; i < f->skew_count && rc == 0; i++) {
        int64_t ns;
        rc = cli_read_full(fd, &ns, sizeof ns, deadline);
        cli_lat_add(&l, ns);
    }
    rep->skew_p50_ms = (double)cli_lat_pct(&l, 50.0) / 1e6;
    rep->skew_max_ms = (double)cli_lat_max(&l) / 1e6;
    cli_lat_free(&l);
    rep->fusion_ran = rc == 0 && f->status == 0;
    return rc == 0 ? f->status : -1;
}

static int read_gpu(const demo_cfg *c, int fd, int64_t deadline, report *rep)
{
    demo_gpu_result *g = &rep->gr;
    if (cli_read_full(fd, g, sizeof *g, deadline) != 0 || g->lat_count > c->frames)
        return -1;
    g->device[sizeof g->device - 1] = '\0';
    for (uint64_t i = 0; i < g->lat_count; i++) {
        demo_lat_rec rec;
        if (cli_read_full(fd, &rec, sizeof rec, deadline) != 0)
            return -1;
        row_add(&rep->gpu, &rec);
    }
    row *r = &rep->gpu;
    r->received = g->received;
    r->dropped = g->dropped;
    r->corrupt = g->corrupt + g->mismatches;
    r->disorder = g->disorder;
    r->device_allocs = (int64_t)g->device_allocs;
    r->sub_cpu_us =
        g->received ? (double)(g->cpu_ns - g->check_cpu_ns) / 1000.0 / (double)g->received : 0;
    rep->gpu_ran = g->status == 0;
    return g->status;
}

/* Reads a child's rt note and its first status byte. */
static char read_start(proc *p, int64_t deadline, progress *pg)
{
    char msg = 0;
    if (!wait_readable(p->res, deadline, pg) ||
        cli_read_full(p->res, &p->rt, sizeof p->rt, deadline) != 0 ||
        cli_read_full(p->res, &msg, 1, deadline) != 0)
        return 0;
    p->rt.message[sizeof p->rt.message - 1] = '\0';
    return msg;
}

static void note_rt(report *rep, const proc *p)
{
    const demo_rt_note *n = &p->rt;
    rep->procs++;
    rep->rt_available = n->available != 0;
    rep->pinned += n->pinned != 0;
    rep->fifo += n->fifo != 0;
    rep->locked += n->locked != 0;
    rep->prefaulted += n->prefaulted != 0;
    if (n->failed_errno && !rep->rt_message[0]) {
        snprintf(rep->rt_message, sizeof rep->rt_message, "%s", n->message);
        cli_fail("demo", 1, "real-time controls: %s; going on without it", n->message);
    }
}

/* ---------------------------------------------------------------------------------------------
 * One pipeline
 * ------------------------------------------------------------------------------------------- */

static void run_pipeline(demo_cfg *c, report *rep, bool want_gpu, progress *pg)
{
    rep->kind = c->kind;
    rep->nstreams = c->cameras + (c->lidar_frames ? 1 : 0);
    rep->gpu.device_allocs = -1;
    rep->gpu_asked = want_gpu;
    bool ok = !interrupted;
    for (uint32_t i = 0; i < rep->nstreams; i++) {
        row *r = &rep->s[i];
        if (i < c->cameras)
            demo_camera_topic(r->name, sizeof r->name, i);
        else
            snprintf(r->name, sizeof r->name, "%s", DEMO_LIDAR_TOPIC);
        r->device_allocs = -1;
        ok &= row_alloc(r, (i < c->cameras ? c->frames : c->lidar_frames) * c->consumers);
    }
    snprintf(rep->cams.name, sizeof rep->cams.name, "all cameras");
    rep->cams.device_allocs = -1;
    ok &= row_alloc(&rep->cams, c->frames * c->consumers * c->cameras);
    snprintf(rep->gpu.name, sizeof rep->gpu.name, "GPU <- /camera/%u", DEMO_GPU_CAMERA);
    ok &= row_alloc(&rep->gpu, want_gpu ? c->frames : 0);

    children ch;
    memset(&ch, 0, sizeof ch);
    running = &ch;
    int64_t deadline = cli_now_ns() + DEMO_CONNECT_NS + 40 * DEMO_NS_PER_S;
    pg->start_ns = cli_now_ns();
    pg->end_ns = pg->start_ns + (int64_t)c->frames * (DEMO_NS_PER_S / DEMO_FPS);

    /* The GPU consumer first: whether it found a device decides how many subscribers camera 0
     * waits for. CUDA is never touched in this process, so forking stays safe. */
    c->gpu = false;
    if (ok && want_gpu) {
        if (!spawn(c, &ch, DEMO_GPU, 0)) {
            cli_fail("demo", 1, "cannot start a process: %s", strerror(errno));
            ok = false;
        } else {
            proc *p = &ch.p[ch.count - 1];
            char msg = read_start(p, deadline, pg);
            note_rt(rep, p);
            if (msg == DEMO_MSG_GPU) {
                c->gpu = true;
            } else if (msg == DEMO_MSG_SKIP) {
                demo_gpu_skip skip;
                if (cli_read_full(p->res, &skip, sizeof skip, deadline) == 0) {
                    skip.reason[sizeof skip.reason - 1] = '\0';
                    snprintf(rep->gpu_skip, sizeof rep->gpu_skip, "%s", skip.reason);
                } else {
                    snprintf(rep->gpu_skip, sizeof rep->gpu_skip, "no GPU");
                }
            } else {
                cli_fail("demo", 1, "the GPU consumer did not start");
                ok = false;
            }
        }
    }

    size_t first = ch.count;
    bool spawned = true;
    for (uint32_t i = 0; ok && spawned && i < c->cameras; i++)
        spawned = spawn(c, &ch, DEMO_CAMERA, i);
    if (ok && spawned && c->lidar_frames)
        spawned = spawn(c, &ch, DEMO_LIDAR, 0);
    for (uint32_t i = 0; ok && spawned && i < c->consumers; i++)
        spawned = spawn(c, &ch, DEMO_CONSUMER, i);
    if (ok && spawned && c->fusion)
        spawned = spawn(c, &ch, DEMO_FUSION, 0);
    if (!spawned) {
        cli_fail("demo", 1, "cannot start a process: %s", strerror(errno));
        ok = false;
    }

    /* Everyone connected: sources saw their subscribers, subscribers their sources. */
    for (size_t i = first; ok && i < ch.count; i++) {
        char msg = read_start(&ch.p[i], deadline, pg);
        if (msg != DEMO_MSG_READY) {
            cli_fail("demo", 1, "%s %u did not start", role_name(ch.p[i].role),
                     (unsigned)ch.p[i].index);
            ok = false;
        } else {
            note_rt(rep, &ch.p[i]);
        }
    }
    for (size_t i = 0; ok && c->gpu && i < first; i++) {
        char msg = 0;
        if (cli_read_full(ch.p[i].res, &msg, 1, deadline) != 0 || msg != DEMO_MSG_READY) {
            cli_fail("demo", 1, "the GPU consumer did not start");
            ok = false;
        }
    }

    /* Sources are free-running: cameras staggered across one frame period, like real ones. */
    int64_t start = cli_now_ns() + 100 * DEMO_NS_PER_MS;
    rep->start_ns = start;
    pg->start_ns = start;
    pg->end_ns = start + (int64_t)c->frames * (DEMO_NS_PER_S / DEMO_FPS);
    for (size_t i = 0; ok && i < ch.count; i++) {
        proc *p = &ch.p[i];
        if (p->role != DEMO_CAMERA && p->role != DEMO_LIDAR)
            continue;
        int64_t t = start;
        if (p->role == DEMO_CAMERA)
            t += (int64_t)p->index * (DEMO_NS_PER_S / DEMO_FPS) / (int64_t)c->cameras;
        if (cli_write_full(p->ctl, &t, sizeof t) != 0)
            ok = false;
    }

    /* Results: consumers, fusion and the GPU consumer end by themselves once the last frames
     * came (or stopped coming). */
    double xport_ns = 0, verify_ns = 0;
    uint64_t frames = 0;
    deadline = pg->end_ns + DEMO_FIRST_FRAME_NS + 10 * DEMO_NS_PER_S;
    for (size_t i = 0; ok && i < ch.count; i++) {
        proc *p = &ch.p[i];
        int st;
        if (p->role == DEMO_CAMERA || p->role == DEMO_LIDAR)
            continue;
        if (p->role == DEMO_GPU && !c->gpu)
            continue;
        if (!wait_readable(p->res, deadline, pg))
            st = -1;
        else if (p->role == DEMO_CONSUMER)
            st = read_consumer(c, p->res, deadline, rep, &xport_ns, &verify_ns, &frames);
        else if (p->role == DEMO_FUSION)
            st = read_fusion(c, p->res, deadline, rep);
        else
            st = read_gpu(c, p->res, deadline, rep);
        if (st != 0) {
            progress_clear(pg);
            if (!interrupted)
                cli_fail("demo", 1, "%s %u failed", role_name(p->role), (unsigned)p->index);
            ok = false;
        }
    }
    progress_clear(pg);

    double fill_ns = 0;
    uint64_t published = 0;
    for (size_t i = 0; ok && i < ch.count; i++) {
        proc *p = &ch.p[i];
        if (p->role != DEMO_CAMERA && p->role != DEMO_LIDAR)
            continue;
        char quit = DEMO_MSG_QUIT;
        demo_src_result sr;
        if (cli_write_full(p->ctl, &quit, 1) != 0 ||
            cli_read_full(p->res, &sr, sizeof sr, cli_now_ns() + 10 * DEMO_NS_PER_S) != 0 ||
            sr.status != 0 || sr.index != p->index) {
            cli_fail("demo", 1, "%s %u failed", role_name(p->role), (unsigned)p->index);
            ok = false;
            break;
        }
        row *r = p->role == DEMO_CAMERA ? &rep->s[p->index] : &rep->s[c->cameras];
        r->published = sr.published;
        r->pub_cpu_us = sr.published ? (double)sr.xport_cpu_ns / 1000.0 / (double)sr.published : 0;
        if (p->role == DEMO_CAMERA) {
            fill_ns += (double)sr.fill_cpu_ns;
            published += sr.published;
            rep->cams.published += sr.published;
            rep->cams.pub_cpu_us += (double)sr.xport_cpu_ns;
        }
    }
    if (!reap(&ch, !ok || interrupted)) {
        if (ok)
            cli_fail("demo", 1, "a process exited with an error");
        ok = false;
    }
    running = NULL;
    close_all(&ch);
    ok = ok && !interrupted;
    if (!ok)
        return;

    rep->ran = true;
    rep->verified = true;
    double sub_cpu_us = frames ? xport_ns / 1000.0 / (double)frames : 0;
    rep->verify_cpu_us = frames ? verify_ns / 1000.0 / (double)frames : 0;
    rep->fill_cpu_us = published ? fill_ns / 1000.0 / (double)published : 0;
    row *a = &rep->cams;
    a->pub_cpu_us = published ? a->pub_cpu_us / 1000.0 / (double)published : 0;
    a->sub_cpu_us = sub_cpu_us;
    for (uint32_t i = 0; i < rep->nstreams; i++) {
        row *r = &rep->s[i];
        uint64_t want = i < c->cameras ? c->frames : c->lidar_frames;
        r->expected = r->published * c->consumers;
        r->missing = (int64_t)r->expected - (int64_t)(r->received + r->dropped + r->corrupt);
        r->sub_cpu_us = sub_cpu_us;
        row_latency(r, rep->start_ns + DEMO_SETTLE_NS);
        if (r->corrupt || r->missing || r->disorder || r->published != want)
            rep->verified = false;
        if (i < c->cameras) {
            a->expected += r->expected;
            a->received += r->received;
            a->dropped += r->dropped;
            a->corrupt += r->corrupt;
            a->disorder += r->disorder;
            a->missing += r->missing;
        }
    }
    row_latency(a, rep->start_ns + DEMO_SETTLE_NS);
    if (c->gpu) {
        row *g = &rep->gpu;
        g->published = rep->s[DEMO_GPU_CAMERA].published;
        g->expected = g->published;
        g->missing = (int64_t)g->expected - (int64_t)(g->received + g->dropped + g->corrupt);
        row_latency(g, rep->start_ns + DEMO_SETTLE_NS);
        if (!rep->gpu_ran || g->corrupt || g->missing || g->disorder)
            rep->verified = false;
    }
    if (c->fusion && (!rep->fusion_ran || rep->fr.corrupt || rep->fr.pairs == 0))
        rep->verified = false;
}

/* ---------------------------------------------------------------------------------------------
 * Output
 * ------------------------------------------------------------------------------------------- */

static void print_row(demo_pipeline kind, const row *r)
{
    char allocs[24] = "-";
    if (r->device_allocs >= 0)
        snprintf(allocs, sizeof allocs, "%lld", (long long)r->device_allocs);
    printf("%-9s %-22s %6llu %6llu %7llu %4lld %9.1f %9.1f %9.1f %10.1f %10.1f %10s\n",
           pipeline_names[kind], r->name, (unsigned long long)r->published,
           (unsigned long long)r->received, (unsigned long long)r->dropped,
           (long long)(r->missing + (int64_t)r->corrupt), r->p50_us, r->p99_us, r->max_us,
           r->pub_cpu_us, r->sub_cpu_us, allocs);
}

static void print_rows(const report *rep)
{
    if (!rep->ran) {
        printf("%-9s did not complete (see the messages above)\n", pipeline_names[rep->kind]);
        return;
    }
    for (uint32_t i = 0; i < rep->nstreams; i++)
        print_row(rep->kind, &rep->s[i]);
    print_row(rep->kind, &rep->cams);
    if (rep->gpu_ran)
        print_row(rep->kind, &rep->gpu);
}

static void print_rt(const demo_cfg *c, const report *rep)
{
    if (!c->pin && !c->rt) {
        printf("real-time controls: off (--pin, --rt)\n");
        return;
    }
    if (!rep->rt_available) {
        printf("real-time controls: not in this build; ran without them\n");
        return;
    }
    printf("real-time controls: %u of %u processes pinned (round-robin over %zu CPUs)", rep->pinned,
           rep->procs, c->ncpus);
    if (c->rt)
        printf(", %u SCHED_FIFO %d, %u memory-locked, %u prefaulted", rep->fifo, DEMO_FIFO_PRIORITY,
               rep->locked, rep->prefaulted);
    printf("\n");
    if (rep->rt_message[0])
        printf("  not all applied: %s; the demo went on without it\n", rep->rt_message);
}

static void print_table(const demo_cfg *c, const report *zc, const report *base, bool baseline,
                        bool gpu_built)
{
    printf("\n%u camera%s x %llu frames of 1280x720 RGB8 (%zu B) at %d fps", c->cameras,
           c->cameras == 1 ? "" : "s", (unsigned long long)c->frames, DEMO_FRAME_BYTES, DEMO_FPS);
    if (c->lidar_frames)
        printf(", a %ux%u-point LiDAR at %d Hz", DEMO_LIDAR_ROWS, DEMO_LIDAR_COLS, DEMO_LIDAR_HZ);
    printf("; %u consumer%s\n", c->consumers, c->consumers == 1 ? "" : "s");
    printf("%-9s %-22s %6s %6s %7s %4s %9s %9s %9s %10s %10s %10s\n", "transport", "stream",
           "frames", "recv", "dropped", "bad", "p50 us", "p99 us", "max us", "pub cpu us",
           "sub cpu us", "dev allocs");
    print_rows(zc);
    if (baseline)
        print_rows(base);

    if (!gpu_built)
        printf("GPU consumer: skipped (built without the GPU module)\n");
    else if (!zc->gpu_asked)
        printf("GPU consumer: skipped (--no-gpu)\n");
    else if (zc->gpu_skip[0])
        printf("GPU consumer: skipped (%s)\n", zc->gpu_skip);
    else if (zc->gpu_ran)
        printf("GPU consumer (%s): every frame of /camera/%u copied from the publisher's "
               "registered pages into a cached device buffer and summed by a kernel: %llu sums "
               "equal to the CPU's, %llu not; %llu device allocations (warm-up), %llu cache "
               "hits\n",
               zc->gr.device, DEMO_GPU_CAMERA, (unsigned long long)zc->gr.received,
               (unsigned long long)zc->gr.mismatches, (unsigned long long)zc->gr.device_allocs,
               (unsigned long long)zc->gr.cache_hits);
    else if (zc->ran)
        printf("GPU consumer: failed (see the messages above)\n");

    if (zc->fusion_ran)
        printf("fusion: /camera/%u/image_raw + %s paired by stamp (ferry_sync): %llu pairs of "
               "%llu clouds; stamp skew p50 %.1f ms, max %.1f ms%s\n",
               DEMO_FUSION_CAMERA, DEMO_LIDAR_TOPIC, (unsigned long long)zc->fr.pairs,
               (unsigned long long)zc->s[c->cameras].published, zc->skew_p50_ms, zc->skew_max_ms,
               zc->fr.corrupt ? "; SOME PAIRS CORRUPT" : "");

    if (baseline && zc->ran && base->ran && zc->cams.p50_us > 0) {
        double zcpu = zc->cams.pub_cpu_us + zc->cams.sub_cpu_us;
        double bcpu = base->cams.pub_cpu_us + base->cams.sub_cpu_us;
        printf("ferry vs shm-copy (cameras): latency p50 %.1f vs %.1f us (%.1fx lower), p99 %.1f "
               "vs %.1f us; transport CPU per frame (camera + consumer) %.1f vs %.1f us (%.1fx "
               "lower)\n",
               zc->cams.p50_us, base->cams.p50_us, base->cams.p50_us / zc->cams.p50_us,
               zc->cams.p99_us, base->cams.p99_us, zcpu, bcpu, zcpu > 0 ? bcpu / zcpu : 0.0);
    }
    printf("frames: published; recv: taken and verified by the consumers; bad: corrupt or "
           "missing.\n");
    if (zc->cams.startup_n || (baseline && base->cams.startup_n)) {
        printf("p50/p99/max us: publish to take, frames sent after the first %.1f s; the start-up "
               "(connections,\nfirst touch of the pages) is left out: cameras' max there %.1f us "
               "(ferry)",
               (double)DEMO_SETTLE_NS / 1e9, zc->cams.startup_max_us);
        if (baseline && base->ran)
            printf(", %.1f us (shm-copy)", base->cams.startup_max_us);
        printf(".\n");
    }
    printf("cpu us = transport work per frame (ferry: loan + publish, wait + take + release; "
           "shm-copy: copy\ninto the ring + wake, wait + copy out); drawing a frame (%.0f us) "
           "and verifying it (%.0f us)\nare left out. The GPU row's sub cpu is its process's "
           "CPU per frame, its own check left out.\n",
           zc->fill_cpu_us, zc->verify_cpu_us);
    print_rt(c, zc);
    if ((zc->ran && zc->cams.disorder) || (baseline && base->ran && base->cams.disorder))
        printf("Frames arrived out of order!\n");
}

/* The CPUs this process may run on, for --pin. */
static size_t usable_cpus(int *cpus, size_t cap)
{
    cpu_set_t set;
    size_t n = 0;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return 0;
    for (int i = 0; i < CPU_SETSIZE && n < cap; i++)
        if (CPU_ISSET(i, &set))
            cpus[n++] = i;
    return n;
}

/* The demo's own ranges: its process table holds at most this many cameras and consumers. */
static const cli_range cameras_range = {
    .name = "--cameras", .kind = CLI_WHOLE, .lo = 1, .hi = DEMO_MAX_CAMERAS};
static const cli_range consumers_range = {
    .name = "--consumers", .kind = CLI_WHOLE, .lo = 1, .hi = DEMO_MAX_CONSUMERS};

typedef struct demo_args {
    cli_opts o; /* --dir, --domain */
    uint64_t seconds, cameras, consumers;
    bool no_baseline, no_lidar, no_gpu, pin, rt;
    const char *plot;
} demo_args;

static const char about[] =
    "usage: ferry demo [--seconds N] [--cameras N] [--consumers N] [--no-baseline]\n"
    "                  [--no-lidar] [--no-gpu] [--plot FILE.png] [--pin] [--rt]\n"
    "                  [--dir PATH] [--domain N]\n"
    "\n"
    "Simulated cameras (one process each, 1280x720 RGB8 at 30 fps) publish images on\n"
    "/camera/<n>/image_raw and a simulated LiDAR (64x1024 points, 10 Hz) point clouds on\n"
    "/lidar/points; consumer processes verify every frame and time it, a fusion process\n"
    "pairs camera 0 with the LiDAR by stamp, and with a GPU a process runs a kernel on\n"
    "every frame of camera 0. Then the camera pipeline runs over a copying shared-memory\n"
    "transport for comparison, and one table shows both.\n";

static const cli_option options[] = {
    {.name = "--seconds",
     .value = "N",
     CLI_WHOLE_AT(demo_args, seconds),
     .range = &cli_ranges[CLI_R_DEMO_SECONDS],
     .help = "how long the sensors run, 1..3600 (default 5)"},
    {.name = "--cameras",
     .value = "N",
     CLI_WHOLE_AT(demo_args, cameras),
     .range = &cameras_range,
     .help = "camera processes, 1..16 (default 3)"},
    {.name = "--consumers",
     .value = "N",
     CLI_WHOLE_AT(demo_args, consumers),
     .range = &consumers_range,
     .help = "consumer processes, 1..16 (default 1)"},
    {.name = "--no-baseline",
     CLI_FLAG_AT(demo_args, no_baseline),
     .help = "skip the shm-copy comparison"},
    {.name = "--no-lidar", CLI_FLAG_AT(demo_args, no_lidar), .help = "no LiDAR, no fusion"},
    {.name = "--no-gpu",
     CLI_FLAG_AT(demo_args, no_gpu),
     .help = "no GPU consumer, even with a GPU"},
    {.name = "--plot",
     .value = "FILE",
     CLI_STRING_AT(demo_args, plot),
     .help = "draw latency over time and its CDF per transport (needs gnuplot)"},
    {.name = "--pin",
     CLI_FLAG_AT(demo_args, pin),
     .help = "pin each process to one CPU, round-robin over the usable CPUs"},
    {.name = "--rt",
     CLI_FLAG_AT(demo_args, rt),
     .help = "--pin, plus SCHED_FIFO priority 10, locked and prefaulted memory\n"
             "(what is not permitted is reported and left out)"},
    {.name = "--dir",
     .value = "PATH",
     .kind = CLI_K_SHARED,
     .code = CLI_O_DIR,
     .label = "--dir, --domain",
     .help = "use this domain instead of a private directory"},
    {.name = "--domain", .value = "N", .kind = CLI_K_SHARED, .code = CLI_O_DOMAIN},
    {.name = "--help", .short_name = 'h', .kind = CLI_K_SHARED, .code = CLI_O_HELP},
    CLI_OPTION_END,
};

int ferry_cmd_demo(int argc, char **argv)
{
    demo_args a = {.seconds = 5, .cameras = 3, .consumers = 1};
    /* Without --dir and --domain the demo runs in a private directory, whatever FERRY_DIR and
     * FERRY_DOMAIN say. */
    cli_parser p = {.cmd = "demo",
                    .table = options,
                    .about = about,
                    .column = 18,
                    .epilogue = "Exits 0 when every frame arrived intact (or was counted as "
                                "dropped).\n",
                    .dest = &a,
                    .opts = &a.o,
                    .where_from_option = true};
    cli_opts_init(&a.o);
    if (cli_getopt(&p, argc, argv) != CLI_OPTS_END)
        return p.status;
    uint64_t seconds = a.seconds, cameras = a.cameras, consumers = a.consumers;
    bool baseline = !a.no_baseline, lidar = !a.no_lidar, want_gpu = !a.no_gpu;
    bool pin = a.pin || a.rt, rt = a.rt;
    const char *plot = a.plot;
    if (optind < argc)
        return cli_fail("demo", 2, "unexpected argument '%s' (try 'ferry demo --help')",
                        argv[optind]);
    if (plot && !plot[0])
        return cli_fail("demo", 2, "--plot needs a file name");
    if (plot && !demo_plot_available())
        return cli_fail("demo", 1,
                        "--plot needs gnuplot, which is not installed: install "
                        "gnuplot-nox (apt-get install gnuplot-nox) or run 'make demo'");
#ifdef FERRY_HAVE_GPU
    const bool gpu_built = true;
#else
    const bool gpu_built = false;
    want_gpu = false;
#endif

    static int cpus[MAX_CPUS];
    demo_cfg cfg = {.kind = DEMO_FERRY,
                    .cameras = (uint32_t)cameras,
                    .consumers = (uint32_t)consumers,
                    .frames = seconds * DEMO_FPS,
                    .lidar_frames = lidar ? seconds * DEMO_LIDAR_HZ : 0,
                    .fusion = lidar,
                    .pin = pin,
                    .rt = rt,
                    .cpus = cpus};
    if (pin)
        cfg.ncpus = usable_cpus(cpus, MAX_CPUS);
    char private_dir[256] = "";
    if (a.o.where_given) {
        cfg.where = a.o.where;
    } else {
        if (!cli_private_dir("ferry-demo-", private_dir, sizeof private_dir))
            return 1;
        cfg.where.dir = private_dir;
        cfg.where.domain = 0;
    }

    printf("ferry demo: %u camera processes, %s%u consumer process%s, %llu s; domain %u in %s\n",
           cfg.cameras, lidar ? "a LiDAR process, a fusion process, " : "", cfg.consumers,
           cfg.consumers == 1 ? "" : "es", (unsigned long long)seconds, (unsigned)cfg.where.domain,
           cfg.where.dir ? cfg.where.dir : "the default directory");
    fflush(stdout);

    cli_catch_signal(SIGINT, on_signal);
    cli_catch_signal(SIGTERM, on_signal);

    progress pg = {.on = isatty(STDOUT_FILENO) != 0, .c = &cfg};
    report *zc = calloc(1, sizeof *zc), *base = calloc(1, sizeof *base);
    if (!zc || !base) {
        free(zc);
        free(base);
        if (private_dir[0])
            cli_rmtree(private_dir);
        return cli_fail("demo", 1, "out of memory");
    }
    run_pipeline(&cfg, zc, want_gpu, &pg);
    bool ok = zc->ran && zc->verified;

    if (baseline && !interrupted) {
        demo_cfg bc = cfg;
        bc.kind = DEMO_SHM;
        bc.lidar_frames = 0;
        bc.fusion = false;
        bc.bus = cli_shm_bus_create(bc.cameras, bc.consumers, DEMO_QUEUE_DEPTH, DEMO_FRAME_BYTES);
        pg.c = &bc;
        if (bc.bus) {
            run_pipeline(&bc, base, false, &pg);
            cli_shm_bus_destroy(bc.bus);
        }
        base->kind = DEMO_SHM;
        ok = ok && base->ran && base->verified;
    }

    if (!interrupted) {
        print_table(&cfg, zc, base, baseline, gpu_built);
        if (plot && (zc->ran || base->ran)) {
            demo_series series[4];
            size_t n = 0;
            if (zc->ran) {
                series[n++] =
                    (demo_series){"ferry: cameras", zc->cams.recs, zc->cams.nrecs, zc->start_ns};
                if (lidar)
                    series[n++] = (demo_series){"ferry: LiDAR", zc->s[cfg.cameras].recs,
                                                zc->s[cfg.cameras].nrecs, zc->start_ns};
                if (zc->gpu_ran)
                    series[n++] = (demo_series){"ferry: GPU (copy + kernel)", zc->gpu.recs,
                                                zc->gpu.nrecs, zc->start_ns};
            }
            if (baseline && base->ran)
                series[n++] = (demo_series){"shm-copy: cameras", base->cams.recs, base->cams.nrecs,
                                            base->start_ns};
            char title[160];
            snprintf(title, sizeof title,
                     "ferry demo: %u x 1280x720 RGB8 at %d fps, %llu s, %u consumer%s", cfg.cameras,
                     DEMO_FPS, (unsigned long long)seconds, cfg.consumers,
                     cfg.consumers == 1 ? "" : "s");
            if (demo_plot(plot, series, n, title) == 0)
                printf("plot: %s\n", plot);
            else
                ok = false;
        }
    }
    report_free(zc);
    report_free(base);
    free(zc);
    free(base);

    if (private_dir[0] && cli_rmtree(private_dir) != 0)
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
