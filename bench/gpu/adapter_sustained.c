/*
 * `ferry bench gpu --part adapter`: the first user report's comparison as its users run it.
 * Three camera processes publish 1280x720 RGB8 at 30 fps through ferry; three adapter processes,
 * one per camera with a CUDA context each, take every frame, get a device buffer from the
 * allocator under test, copy the frame in (ferry_gpu_sample_copy), run a consumer kernel on
 * their stream, and release the buffer; the sample goes back once that work is done. Sustained
 * (20 s measured by default, --seconds), every variant in the same run:
 *   cudaMalloc            a cudaMalloc per frame and a cudaFree at its release
 *   async-threshold-0     cudaMallocAsync on a pool of its own, release threshold 0 (CUDA's
 * default) async-threshold-max   the same pool configured to keep its memory (threshold UINT64_MAX)
 *   ferry-cache           ferry's device buffer cache
 * and, for the two allocators that keep memory, two more readers per frame on other streams
 * (four reader streams in turn, as consumers with their own streams would): fast (2 ms on the
 * device) and slow (40 ms, longer than the frame period). Reported per variant: frames and fps,
 * driver allocations while measuring, device memory the allocator keeps per process (live and
 * idle, the highest seen) and device-wide (the highest cudaMemGetInfo use above the use once
 * every adapter had its context), latency from publication to the consumer kernel's end
 * (p50/p99/max), frames dropped (the subscriber's drops and sequence gaps), adapter CPU per
 * frame (the whole process), the allocation call's p50, and integrity: every kernel's and every
 * reader's checksum against the pattern the camera wrote, so a buffer handed out again while it
 * is still read shows.
 */
#include "gpu_bench.h"
#include "adapter.h"

#include "bench.h"
#include "cli.h"
#include <ferry/gpu.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define READER_STREAMS 4
#define READS_PER_FRAME 2
#define FRAMES_MAX 8192 /* per adapter and variant: 30 fps for over four minutes */
#define SAMPLE_NS ((int64_t)250 * 1000000)
#define MAX_LIVE 32

typedef struct variant {
    const char *name;
    ferry_gpu_backend backend;
    uint64_t threshold;
    uint64_t read_ns; /* 0: no readers; else two readers per frame, each this long */
} variant;

static const variant variants[] = {
    {"cudaMalloc", FERRY_GPU_BACKEND_MALLOC, 0, 0},
    {"async-threshold-0", FERRY_GPU_BACKEND_ASYNC, 0, 0},
    {"async-threshold-max", FERRY_GPU_BACKEND_ASYNC, UINT64_MAX, 0},
    {"ferry-cache", FERRY_GPU_BACKEND_CACHE, 0, 0},
    {"async-max+readers-2ms", FERRY_GPU_BACKEND_ASYNC, UINT64_MAX, 2000000},
    {"ferry-cache+readers-2ms", FERRY_GPU_BACKEND_CACHE, 0, 2000000},
    {"async-max+readers-40ms", FERRY_GPU_BACKEND_ASYNC, UINT64_MAX, 40000000},
    {"ferry-cache+readers-40ms", FERRY_GPU_BACKEND_CACHE, 0, 40000000},
};
#define NVARIANTS (sizeof variants / sizeof variants[0])

/* One adapter process's results, in memory shared with the driver. */
typedef struct proc_result {
    uint32_t failed;
    uint64_t frames, dropped, gaps, errors;
    uint64_t device_allocs, gpu_waits, busy_skips, backpressure;
    uint64_t kept_max;        /* the allocator's live + idle bytes, highest sample */
    uint64_t device_base;     /* device-wide use once every adapter had its context */
    uint64_t device_used_max; /* device-wide use, highest sample while measuring */
    int64_t cpu_ns;
    size_t nlat, nalloc;
    int64_t lat[FRAMES_MAX], alloc[FRAMES_MAX];
} proc_result;

typedef struct shared {
    adapter_ctl cams;
    _Atomic uint32_t contexts; /* adapters with their context, streams and kernels loaded */
    _Atomic uint32_t based;    /* the device-wide base is taken: allocators may start */
    _Atomic uint32_t ready;    /* adapters connected, warmed up */
    _Atomic uint32_t measure;  /* the driver's: measuring from now */
    _Atomic uint32_t stop;     /* the driver's: finish */
    proc_result r[CAMERAS];
} shared;

static int fail_cuda(const char *what, cudaError_t e)
{
    return cli_fail("bench gpu", 1, "adapter: %s: %s", what, cudaGetErrorString(e));
}

static int fail_ferry(const char *what, ferry_err e)
{
    return cli_fail("bench gpu", 1, "adapter: %s: %s", what, ferry_strerror(e));
}

/* ---------------------------------------------------------------------------------------------
 * An adapter process: its own CUDA context, one camera.
 * ------------------------------------------------------------------------------------------- */

typedef struct proc {
    const bench_gpu_args *a;
    const variant *v;
    shared *sh;
    proc_result *r;
    int cam;
    cudaStream_t main, readers[READER_STREAMS];
    cudaEvent_t done; /* the consumer kernel's end, for the readers to wait on */
    unsigned next_reader;
    unsigned long long *d_slots; /* FRAMES_MAX x (1 + READS_PER_FRAME) */
    uint64_t seqs[FRAMES_MAX];
    size_t nframes;
    ferry_gpu_cache *cache;
} proc;

static uint64_t device_used(void)
{
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
        return 0;
    return (uint64_t)(total_b - free_b);
}

static void sample_memory(proc *p, bool measuring)
{
    ferry_gpu_cache_stats s;
    if (!measuring || ferry_gpu_cache_stats_get(p->cache, &s) != FERRY_OK)
        return;
    uint64_t kept = s.live_bytes + s.idle_bytes;
    if (kept > p->r->kept_max)
        p->r->kept_max = kept;
    uint64_t used = device_used();
    if (used > p->r->device_used_max)
        p->r->device_used_max = used;
}

/* One frame: buffer, copy, kernel; the readers; release; the sample back once the kernel ran. */
static int frame(proc *p, ferry_subscriber *sub, ferry_sample *smp, bool measuring,
                 uint64_t *last_seq)
{
    frame_header h = {0};
    if (smp->size == FRAME_BYTES)
        memcpy(&h, smp->data, sizeof h);
    if (h.magic != FRAME_MAGIC || h.camera != (uint32_t)p->cam || p->nframes >= FRAMES_MAX) {
        p->r->errors += h.magic != FRAME_MAGIC || h.camera != (uint32_t)p->cam;
        ferry_err err = ferry_release(sub, smp);
        return err ? fail_ferry("release sample", err) : 0;
    }
    if (measuring && *last_seq && h.seq > *last_seq + 1)
        p->r->gaps += h.seq - *last_seq - 1;
    *last_seq = h.seq;
    size_t idx = p->nframes++;
    p->seqs[idx] = h.seq;
    unsigned long long *slots = p->d_slots + idx * (1 + READS_PER_FRAME);

    int64_t t0 = cli_now_ns();
    ferry_gpu_buffer *buf = NULL;
    ferry_err err = ferry_gpu_alloc(p->cache, smp->size, p->main, &buf);
    int64_t t1 = cli_now_ns();
    if (err)
        return fail_ferry("ferry_gpu_alloc", err);
    if (measuring && p->r->nalloc < FRAMES_MAX)
        p->r->alloc[p->r->nalloc++] = t1 - t0;
    void *dptr = ferry_gpu_buffer_ptr(buf);
    if ((err = ferry_gpu_sample_copy(sub, smp, p->a->device, dptr, p->main)))
        return fail_ferry("ferry_gpu_sample_copy", err);
    cudaError_t e = bench_adapter_checksum(dptr, smp->size, slots, p->main);
    if (e != cudaSuccess)
        return fail_cuda("checksum kernel", e);
    if (p->v->read_ns) {
        /* A wait takes the event's state when it is made: one event serves every frame. */
        if ((e = cudaEventRecord(p->done, p->main)) != cudaSuccess)
            return fail_cuda("reader event", e);
        for (int k = 0; k < READS_PER_FRAME; k++) {
            cudaStream_t rs = p->readers[p->next_reader++ % READER_STREAMS];
            if ((e = cudaStreamWaitEvent(rs, p->done, 0)) != cudaSuccess ||
                (e = bench_adapter_read(dptr, smp->size, p->v->read_ns, slots + 1 + k, rs)) !=
                    cudaSuccess)
                return fail_cuda("reader kernel", e);
            if ((err = ferry_gpu_record_use(buf, rs)))
                return fail_ferry("ferry_gpu_record_use", err);
        }
    }
    if ((err = ferry_gpu_release(buf)))
        return fail_ferry("ferry_gpu_release", err);
    if ((e = cudaStreamSynchronize(p->main)) != cudaSuccess)
        return fail_cuda("cudaStreamSynchronize", e);
    int64_t t2 = cli_now_ns();
    if ((err = ferry_release(sub, smp)))
        return fail_ferry("release sample", err);
    if (measuring) {
        p->r->frames++;
        if (p->r->nlat < FRAMES_MAX)
            p->r->lat[p->r->nlat++] = t2 - h.send_ns;
    }
    return 0;
}

static uint64_t verify(proc *p)
{
    size_t n = p->nframes * (1 + READS_PER_FRAME);
    unsigned long long *h = malloc(n * sizeof *h);
    if (!h || cudaMemcpy(h, p->d_slots, n * sizeof *h, cudaMemcpyDeviceToHost) != cudaSuccess) {
        free(h);
        return p->nframes ? p->nframes : 1;
    }
    uint64_t fixed = bench_adapter_fixed_sum(), bad = 0;
    int reads = p->v->read_ns ? READS_PER_FRAME : 0;
    for (size_t i = 0; i < p->nframes; i++) {
        uint64_t want = bench_adapter_expected(fixed, p->seqs[i], (uint32_t)p->cam);
        for (int k = 0; k <= reads; k++)
            if (h[i * (1 + READS_PER_FRAME) + (size_t)k] != want) {
                if (bad < 3)
                    fprintf(stderr,
                            "ferry bench gpu: adapter: camera %d seq %" PRIu64 " %s %d: checksum "
                            "%llx, expected %" PRIx64 "\n",
                            p->cam, p->seqs[i], k ? "reader" : "kernel", k,
                            h[i * (1 + READS_PER_FRAME) + (size_t)k], want);
                bad++;
            }
    }
    free(h);
    return bad;
}

static int adapter_run(proc *p)
{
    cudaError_t e = cudaSetDevice(p->a->device);
    if (e != cudaSuccess)
        return fail_cuda("cudaSetDevice", e);
    /* Waits for the GPU sleep, as an adapter sharing its CPU with cameras would: the CPU per
     * frame is the work's, not a spin while other processes' kernels hold the GPU. */
    if ((e = cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync)) != cudaSuccess)
        return fail_cuda("cudaSetDeviceFlags", e);
    if ((e = cudaStreamCreateWithFlags(&p->main, cudaStreamNonBlocking)) != cudaSuccess)
        return fail_cuda("cudaStreamCreate", e);
    for (int i = 0; i < READER_STREAMS; i++)
        if ((e = cudaStreamCreateWithFlags(&p->readers[i], cudaStreamNonBlocking)) != cudaSuccess)
            return fail_cuda("cudaStreamCreate", e);
    if ((e = cudaEventCreateWithFlags(&p->done, cudaEventDisableTiming)) != cudaSuccess)
        return fail_cuda("cudaEventCreate", e);
    size_t slot_bytes = (size_t)FRAMES_MAX * (1 + READS_PER_FRAME) * sizeof *p->d_slots;
    if ((e = cudaMalloc((void **)&p->d_slots, slot_bytes)) != cudaSuccess ||
        (e = cudaMemset(p->d_slots, 0, slot_bytes)) != cudaSuccess ||
        (e = cudaDeviceSynchronize()) != cudaSuccess)
        return fail_cuda("checksum slots", e);

    /* The kernels loaded (CUDA loads modules lazily) and every adapter's context made before
     * the device-wide base is read: what grows after it is the allocators'. */
    if ((e = bench_adapter_checksum(p->d_slots, 128, p->d_slots, p->main)) != cudaSuccess ||
        (e = bench_adapter_read(p->d_slots, 128, 0, p->d_slots, p->main)) != cudaSuccess ||
        (e = cudaMemsetAsync(p->d_slots, 0, slot_bytes, p->main)) != cudaSuccess ||
        (e = cudaStreamSynchronize(p->main)) != cudaSuccess)
        return fail_cuda("loading the kernels", e);
    atomic_fetch_add(&p->sh->contexts, 1);
    int64_t until = cli_now_ns() + CONNECT_NS;
    while (atomic_load(&p->sh->contexts) < CAMERAS && cli_now_ns() < until)
        usleep(1000);
    if (p->cam == 0) {
        p->r->device_base = device_used();
        atomic_store(&p->sh->based, 1);
    }
    while (!atomic_load(&p->sh->based) && cli_now_ns() < until)
        usleep(1000);

    if (bench_adapter_cache(&p->cache, p->a->device, p->v->backend, p->v->threshold, MAX_LIVE) != 0)
        return 1;
    ferry_err err;

    char name[32], topic[64];
    snprintf(name, sizeof name, "adapter%d", p->cam);
    snprintf(topic, sizeof topic, "/bench/gpu/adapter/cam%d", p->cam);
    ferry_node_options no;
    ferry_node_options_init(&no);
    no.dir = p->a->dir;
    no.name = name;
    ferry_node *node = NULL;
    if ((err = ferry_node_create(&node, &no)))
        return fail_ferry("node", err);
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = SUB_DEPTH;
    so.overflow = FERRY_OVERFLOW_DROP_OLDEST; /* a camera never waits for its consumer */
    ferry_subscriber *sub = NULL;
    int rc = 0;
    if ((err =
             ferry_subscriber_create(&sub, node, topic, FRAME_TYPE, ferry_hash(FRAME_TYPE), &so)) ||
        (err = ferry_subscriber_wait_publishers(sub, 1, CONNECT_NS))) {
        rc = fail_ferry("subscriber", err);
        goto out;
    }

    uint64_t last_seq = 0;
    bool measuring = false, told_ready = false;
    ferry_gpu_cache_stats s0 = {0}, s1 = {0};
    ferry_subscriber_stats ss0 = {0}, ss1 = {0};
    int64_t cpu0 = 0, next_sample = 0, start = cli_now_ns();
    while (rc == 0 && !atomic_load(&p->sh->stop)) {
        int64_t now = cli_now_ns();
        if (!told_ready && now - start > 500000000) {
            /* Warm: the allocator has what it keeps. The base of the device-wide figure is
             * taken by the first adapter once all are here. */
            told_ready = true;
            atomic_fetch_add(&p->sh->ready, 1);
        }
        if (!measuring && atomic_load(&p->sh->measure)) {
            /* The highest figures are those of the measured window. */
            measuring = true;
            ferry_gpu_cache_stats_get(p->cache, &s0);
            ferry_subscriber_stats_get(sub, &ss0);
            cpu0 = cli_cpu_ns();
        }
        if (now >= next_sample) {
            sample_memory(p, measuring);
            next_sample = now + SAMPLE_NS;
        }
        err = ferry_wait(sub, 50 * 1000000);
        if (err == FERRY_ETIMEDOUT)
            continue;
        if (err) {
            rc = fail_ferry("wait", err);
            break;
        }
        ferry_sample smp;
        while (rc == 0 && (err = ferry_take(sub, &smp)) == FERRY_OK)
            rc = frame(p, sub, &smp, measuring, &last_seq);
        if (rc == 0 && err != FERRY_EAGAIN)
            rc = fail_ferry("take", err);
    }
    if (rc == 0) {
        p->r->cpu_ns = cli_cpu_ns() - cpu0;
        sample_memory(p, measuring);
        ferry_gpu_cache_stats_get(p->cache, &s1);
        ferry_subscriber_stats_get(sub, &ss1);
        p->r->device_allocs = s1.device_allocs - s0.device_allocs;
        p->r->gpu_waits = s1.gpu_waits - s0.gpu_waits;
        p->r->busy_skips = s1.busy_skips - s0.busy_skips;
        p->r->backpressure = s1.backpressure_waits - s0.backpressure_waits;
        p->r->dropped = ss1.dropped - ss0.dropped;
        if ((e = cudaDeviceSynchronize()) != cudaSuccess)
            rc = fail_cuda("cudaDeviceSynchronize", e);
        else
            p->r->errors += verify(p);
    }
out:
    ferry_subscriber_destroy(sub);
    ferry_node_destroy(node);
    if (p->cache && (err = ferry_gpu_cache_destroy(p->cache)) && rc == 0)
        rc = fail_ferry("cache destroy", err);
    cudaFree(p->d_slots);
    return rc;
}

/* `ferry bench gpu --adapter-proc DIR DEVICE VARIANT CAMERA FD`: an adapter, exec'd by the driver
 * (a process may not use CUDA in a child of a process that initialised it), its results in the
 * shared memory of FD. */
int bench_gpu_adapter_proc(int argc, char **argv)
{
    if (argc != 6)
        return cli_fail("bench gpu", 2, "--adapter-proc takes 5 arguments");
    bench_gpu_args a = {.dir = argv[1], .device = atoi(argv[2])};
    int v = atoi(argv[3]), cam = atoi(argv[4]), fd = atoi(argv[5]);
    if (v < 0 || (size_t)v >= NVARIANTS || cam < 0 || cam >= CAMERAS)
        return cli_fail("bench gpu", 2, "--adapter-proc: no variant %d or camera %d", v, cam);
    shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (sh == MAP_FAILED)
        return cli_fail("bench gpu", 1, "adapter: mmap: %s", strerror(errno));
    proc *p = calloc(1, sizeof *p);
    int rc = 1;
    if (p) {
        p->a = &a;
        p->v = &variants[v];
        p->sh = sh;
        p->r = &sh->r[cam];
        p->cam = cam;
        rc = adapter_run(p);
        free(p);
    }
    if (rc)
        sh->r[cam].failed = 1;
    munmap(sh, sizeof *sh);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * The driver: no CUDA in this process (its children make their own contexts).
 * ------------------------------------------------------------------------------------------- */

typedef struct row {
    uint64_t frames, dallocs, gpu_waits, busy_skips, dropped, errors;
    double fps, kept_mib, device_mib, p50, p99, max, cpu_us, alloc_p50;
} row;

static int64_t pct(int64_t *v, size_t n, double p)
{
    if (n == 0)
        return 0;
    cli_lat l = {.ns = v, .count = n, .capacity = n};
    return cli_lat_pct(&l, p);
}

static int run_variant(const bench_gpu_args *a, shared *sh, int shm_fd, const variant *v,
                       int64_t measure_ns, row *out)
{
    memset(sh, 0, sizeof *sh);
    pid_t cams[CAMERAS] = {0}, adapters[CAMERAS] = {0};
    pid_t parent = getpid();
    int rc = 0;
    for (int i = 0; i < CAMERAS && rc == 0; i++)
        if ((cams[i] = bench_adapter_spawn_camera(a->dir, i, true, &sh->cams)) < 0)
            rc = 1;
    for (int i = 0; i < CAMERAS && rc == 0; i++) {
        char sdev[16], svar[16], scam[16], sfd[16];
        snprintf(sdev, sizeof sdev, "%d", a->device);
        snprintf(svar, sizeof svar, "%d", (int)(v - variants));
        snprintf(scam, sizeof scam, "%d", i);
        snprintf(sfd, sizeof sfd, "%d", shm_fd);
        char *argv[] = {"ferry", "bench", "gpu", "--adapter-proc", (char *)a->dir, sdev, svar,
                        scam,    sfd,     NULL};
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0) {
            rc = cli_fail("bench gpu", 1, "adapter: fork: %s", strerror(errno));
            break;
        }
        if (pid == 0) {
            cli_child_setup(parent);
            fcntl(shm_fd, F_SETFD, 0);
            alarm(600);
            execv("/proc/self/exe", argv);
            _exit(127);
        }
        adapters[i] = pid;
    }
    int64_t deadline = cli_now_ns() + CONNECT_NS;
    while (rc == 0 && atomic_load(&sh->ready) < CAMERAS) {
        if (cli_now_ns() > deadline || atomic_load(&sh->cams.failed))
            rc = cli_fail("bench gpu", 1, "adapter: %s: the processes did not start", v->name);
        for (int i = 0; i < CAMERAS && rc == 0; i++)
            if (sh->r[i].failed)
                rc = 1;
        usleep(10000);
    }
    int64_t t_meas = cli_now_ns();
    if (rc == 0) {
        atomic_store(&sh->measure, 1);
        cli_sleep_until(t_meas + measure_ns);
    }
    int64_t t_end = cli_now_ns();
    atomic_store(&sh->stop, 1);
    bool ok = rc == 0;
    for (int i = 0; i < CAMERAS; i++)
        if (adapters[i] > 0)
            ok = bench_adapter_reap(adapters[i], (int64_t)20 * 1000000000, "an adapter") == 1 && ok;
    atomic_store(&sh->cams.stop, 1);
    for (int i = 0; i < CAMERAS; i++)
        if (cams[i] > 0)
            ok = bench_adapter_reap(cams[i], (int64_t)5 * 1000000000, "a camera") == 1 && ok;
    if (!ok)
        return rc ? rc : cli_fail("bench gpu", 1, "adapter: %s: a process failed", v->name);

    memset(out, 0, sizeof *out);
    size_t nlat = 0, nalloc = 0;
    int64_t cpu = 0;
    uint64_t kept = 0, used = 0;
    for (int i = 0; i < CAMERAS; i++)
        nlat += sh->r[i].nlat, nalloc += sh->r[i].nalloc;
    int64_t *lat = malloc((nlat + 1) * sizeof *lat), *alloc = malloc((nalloc + 1) * sizeof *alloc);
    if (!lat || !alloc) {
        free(lat);
        free(alloc);
        return cli_fail("bench gpu", 1, "adapter: out of memory");
    }
    nlat = nalloc = 0;
    for (int i = 0; i < CAMERAS; i++) {
        const proc_result *r = &sh->r[i];
        memcpy(lat + nlat, r->lat, r->nlat * sizeof *lat);
        nlat += r->nlat;
        memcpy(alloc + nalloc, r->alloc, r->nalloc * sizeof *alloc);
        nalloc += r->nalloc;
        out->frames += r->frames;
        out->dallocs += r->device_allocs;
        out->gpu_waits += r->gpu_waits;
        out->busy_skips += r->busy_skips;
        out->dropped += r->dropped + r->gaps;
        out->errors += r->errors;
        cpu += r->cpu_ns;
        if (r->kept_max > kept)
            kept = r->kept_max;
        if (r->device_used_max > used)
            used = r->device_used_max;
    }
    double secs = (double)(t_end - t_meas) / 1e9;
    out->fps = secs > 0 ? (double)out->frames / CAMERAS / secs : 0;
    out->kept_mib = (double)kept / (1024.0 * 1024.0);
    out->device_mib =
        used > sh->r[0].device_base ? (double)(used - sh->r[0].device_base) / (1024.0 * 1024.0) : 0;
    out->p50 = (double)pct(lat, nlat, 50) / 1e3;
    out->p99 = (double)pct(lat, nlat, 99) / 1e3;
    out->max = (double)pct(lat, nlat, 100) / 1e3;
    out->cpu_us = out->frames ? (double)cpu / 1e3 / (double)out->frames : 0;
    out->alloc_p50 = (double)pct(alloc, nalloc, 50) / 1e3;
    free(lat);
    free(alloc);
    return 0;
}

int bench_gpu_adapter_sustained(const bench_gpu_args *a)
{
    int64_t seconds = a->seconds > 0 ? a->seconds : (a->quick ? 3 : 20);
    int shm_fd = memfd_create("ferry-bench-adapter", MFD_CLOEXEC);
    if (shm_fd < 0 || ftruncate(shm_fd, (off_t)sizeof(shared)) != 0) {
        if (shm_fd >= 0)
            close(shm_fd);
        return cli_fail("bench gpu", 1, "adapter: memfd: %s", strerror(errno));
    }
    shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED, shm_fd, 0);
    if (sh == MAP_FAILED) {
        close(shm_fd);
        return cli_fail("bench gpu", 1, "adapter: mmap: %s", strerror(errno));
    }
    struct sigaction ign, old_pipe;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ign, &old_pipe);

    printf("adapter: %d cameras x 1280x720 RGB8 at %d fps -> %d adapter processes (a CUDA context "
           "each) -> device buffer -> copy -> kernel; %" PRId64 " s measured per variant\n",
           CAMERAS, FPS, CAMERAS, seconds);
    printf("  latency: publication -> the consumer kernel's end; kept: the allocator's live + idle "
           "bytes per process (highest); device: device-wide use above the start (highest);\n"
           "  cpu: an adapter process per frame; readers: two per frame on other streams\n");
    printf("  %-25s %6s %6s %7s %6s %8s %8s %8s %8s %8s %7s %7s %8s %4s\n", "variant", "frames",
           "fps", "dallocs", "waits", "kept_MiB", "dev_MiB", "p50_us", "p99_us", "max_us",
           "dropped", "cpu_us", "alloc_us", "err");
    if (a->csv && ftell(a->csv) == 0)
        fprintf(a->csv, "variant,seconds,frames,fps,device_allocs,gpu_waits,busy_skips,"
                        "kept_bytes_per_process,device_bytes,p50_us,p99_us,max_us,dropped,"
                        "cpu_us_per_frame,alloc_p50_us,errors\n");
    int rc = 0;
    uint64_t errors = 0;
    for (size_t i = 0; i < NVARIANTS && rc == 0; i++) {
        row r;
        rc = run_variant(a, sh, shm_fd, &variants[i], seconds * 1000000000, &r);
        if (rc)
            break;
        errors += r.errors;
        printf("  %-25s %6" PRIu64 " %6.1f %7" PRIu64 " %6" PRIu64 " %8.1f %8.1f %8.1f %8.1f "
               "%8.1f %7" PRIu64 " %7.1f %8.3f %4" PRIu64 "\n",
               variants[i].name, r.frames, r.fps, r.dallocs, r.gpu_waits, r.kept_mib, r.device_mib,
               r.p50, r.p99, r.max, r.dropped, r.cpu_us, r.alloc_p50, r.errors);
        fflush(stdout);
        if (a->csv) {
            fprintf(a->csv,
                    "%s,%" PRId64 ",%" PRIu64 ",%.2f,%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%.0f,%.0f,"
                    "%.1f,%.1f,%.1f,%" PRIu64 ",%.1f,%.3f,%" PRIu64 "\n",
                    variants[i].name, seconds, r.frames, r.fps, r.dallocs, r.gpu_waits,
                    r.busy_skips, r.kept_mib * 1048576.0, r.device_mib * 1048576.0, r.p50, r.p99,
                    r.max, r.dropped, r.cpu_us, r.alloc_p50, r.errors);
            fflush(a->csv);
        }
    }
    if (rc == 0) {
        if (errors) {
            printf("  integrity: %" PRIu64 " wrong checksums: FAIL\n", errors);
            rc = 1;
        } else {
            printf("  integrity: every kernel's and every reader's checksum matched\n");
        }
    }
    sigaction(SIGPIPE, &old_pipe, NULL);
    munmap(sh, sizeof *sh);
    close(shm_fd);
    return rc;
}
