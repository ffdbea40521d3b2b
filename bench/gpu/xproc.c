/*
 * `ferry bench gpu`, part 3: a 1280x720x3 frame made by a kernel in one process and read by a
 * kernel in another, as a device frame (no copy: the reader's stream waits on the GPU for the
 * producer's ready word) and by the copy path (D2H into a ferry host sample, shared memory, H2D
 * on the reader).
 *
 * Latency: the producer's last kernel stamps the GPU's global timer into the frame (its work is
 * done); the reader's first kernel reads the timer at its start and subtracts the stamp. Both
 * readings come from the one device-wide timer, so no host clock enters the figure. Between the
 * two lie, for a device frame: the ready-word write, the reader's wake-up, take, lookup and wait
 * (whichever finishes last). For the copy path: the D2H copy, the producer's synchronisation,
 * publish, the reader's wake-up, take and H2D copy. One frame at a time: the producer sends the
 * next one after the reader acknowledged the last, so queues stay empty.
 *
 * The floor (switch_floor): no frame travels. The producer's stamp goes to host memory, the
 * producer waits on the CPU for its stream, publishes the stamp in an 8-byte host sample, and a
 * polling reader launches a probe given that stamp. What it measures is what any handoff between
 * two processes' CUDA contexts costs at least: a CPU-side completion, one host sample, a launch
 * and the GPU's switch from one context to the other (without MPS, the GPU time-slices them).
 *
 * The reader is a process of its own. CUDA cannot be used in a child forked after the parent
 * initialised it, so the reader is this program exec'd again as
 * `ferry bench gpu --xproc-reader ...`.
 */
#include "xproc.h"
#include "cli.h"

#include "bench.h"
#include <ferry/ferry.h>
#include <ferry/gpu.h>

#include <cuda_runtime.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define XPROC_FRAME ((size_t)2764800)
#define XPROC_TYPE_DEV "bench/xproc_device"
#define XPROC_TYPE_COPY "bench/xproc_copy"
#define XPROC_TYPE_FLOOR "bench/xproc_floor"

/* xproc_kernels.cu: cudaError_t values as int; asynchronous. */
int bench_xproc_fill(void *dst, size_t bytes, uint32_t seq, void *stream);
int bench_xproc_probe(const void *frame, int64_t *out, void *stream);
int bench_xproc_stamp_host(void *mapped, void *stream);
int bench_xproc_probe_at(uint64_t stamp, int64_t *out, void *stream);

/* PATH_POLLED: device frames to a reader that polls ferry_take instead of sleeping in
 * ferry_wait, which separates the GPU-side handoff from the host's wake-up. PATH_FLOOR: the
 * floor above, with a polling reader. PATH_LATE: PATH_DEVICE with the publisher's early wake-up
 * off (ferry_gpu_publisher_options.early_wake): the sleeping reader is woken by the
 * publication, not by the loan. */
enum { PATH_DEVICE = 0, PATH_COPY = 1, PATH_POLLED = 2, PATH_FLOOR = 3, PATH_LATE = 4, NPATHS = 5 };

static bool is_device(int path)
{
    return path == PATH_DEVICE || path == PATH_POLLED || path == PATH_LATE;
}

static const char *path_type(int path)
{
    return is_device(path)      ? XPROC_TYPE_DEV
           : path == PATH_FLOOR ? XPROC_TYPE_FLOOR
                                : XPROC_TYPE_COPY;
}

static bool polls(int path)
{
    return path == PATH_POLLED || path == PATH_FLOOR;
}

typedef struct xproc_result {
    int32_t status; /* 0 when the reader measured every frame */
    uint32_t frames;
    double p50_us, p99_us;
    double take_p50_us; /* host clock: the publication to the reader's take returning it */
} xproc_result;

static const char *path_name(int path)
{
    return path == PATH_DEVICE   ? "device_frame"
           : path == PATH_POLLED ? "device_polled"
           : path == PATH_LATE   ? "device_woken_late"
           : path == PATH_FLOOR  ? "switch_floor"
                                 : "copy";
}

static const char *path_topic(int path)
{
    return path == PATH_DEVICE   ? "/bench/xproc/device"
           : path == PATH_POLLED ? "/bench/xproc/polled"
           : path == PATH_LATE   ? "/bench/xproc/late"
           : path == PATH_FLOOR  ? "/bench/xproc/floor"
                                 : "/bench/xproc/copy";
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static double pct_us(const int64_t *sorted, uint32_t n, double p)
{
    if (!n)
        return 0;
    uint32_t i = (uint32_t)(p * (n - 1) + 0.5);
    return (double)sorted[i] / 1e3;
}

/* ---- the reader (an exec'd process) --------------------------------------------------------- */

#define XFAIL(...)                                                                                 \
    do {                                                                                           \
        fprintf(stderr, "ferry bench gpu xproc reader: " __VA_ARGS__);                             \
        fputc('\n', stderr);                                                                       \
        goto out;                                                                                  \
    } while (0)

/* argv: NAME PATH DIR DOMAIN FRAMES WARMUP DEVICE UP_FD */
static int xproc_reader(char **argv)
{
    int path = atoi(argv[1]);
    const char *dir = argv[2];
    uint32_t domain = (uint32_t)atoi(argv[3]);
    uint32_t frames = (uint32_t)atoi(argv[4]);
    uint32_t warm = (uint32_t)atoi(argv[5]);
    int device = atoi(argv[6]);
    int up = atoi(argv[7]);
    xproc_result res = {1, 0, 0, 0, 0};
    ferry_node *node = NULL;
    ferry_subscriber *sub = NULL;
    ferry_gpu_subscriber *gs = NULL;
    cudaStream_t stream = NULL;
    int64_t *dlat = NULL, *lat = NULL, *hlat = NULL;
    void *dcopy = NULL;
    ferry_err err;
    cudaError_t ce;

    if ((ce = cudaSetDevice(device)) != cudaSuccess ||
        (ce = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (ce = cudaMalloc((void **)&dlat, (size_t)frames * sizeof *dlat)) != cudaSuccess ||
        (path == PATH_COPY && (ce = cudaMalloc(&dcopy, XPROC_FRAME)) != cudaSuccess))
        XFAIL("CUDA setup: %s", cudaGetErrorString(ce));
    if (!(lat = malloc((size_t)frames * sizeof *lat)) ||
        !(hlat = malloc((size_t)frames * sizeof *hlat)))
        XFAIL("out of memory");
    ferry_node_options no;
    ferry_node_options_init(&no);
    no.dir = dir;
    no.domain = domain;
    no.name = "xproc_reader";
    if ((err = ferry_node_create(&node, &no)))
        XFAIL("node: %s", ferry_strerror(err));
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = 2;
    const char *type = path_type(path);
    if ((err = ferry_subscriber_create(&sub, node, path_topic(path), type, ferry_hash(type), &so)))
        XFAIL("subscriber: %s", ferry_strerror(err));
    ferry_gpu_subscriber_options go;
    ferry_gpu_subscriber_options_init(&go);
    go.device = device;
    if (is_device(path) && (err = ferry_gpu_subscriber_create(&gs, sub, &go)))
        XFAIL("device-frame subscriber: %s", ferry_strerror(err));
    if ((err = ferry_subscriber_wait_publishers(sub, 1, 30 * (int64_t)1000000000)))
        XFAIL("no producer: %s", ferry_strerror(err));
    char ready = 'r';
    if (cli_write_full(up, &ready, 1) != 0)
        XFAIL("pipe: %s", strerror(errno));

    for (uint32_t i = 0; i < frames; i++) {
        int64_t deadline = cli_now_ns() + 10 * (int64_t)1000000000;
        for (;;) {
            if (is_device(path)) {
                ferry_gpu_frame f;
                err = ferry_gpu_take(gs, stream, &f);
                if (err == FERRY_OK) {
                    hlat[i] = ferry_now().ns - f.publish_time.ns;
                    int pe = bench_xproc_probe(f.device_ptr, dlat + i, stream);
                    if (pe != 0)
                        XFAIL("probe launch at frame %u: %s", i, cudaGetErrorName((cudaError_t)pe));
                    if ((err = ferry_gpu_frame_release(gs, &f, stream)))
                        XFAIL("release: %s", ferry_strerror(err));
                    break;
                }
            } else if (path == PATH_FLOOR) {
                ferry_sample s;
                err = ferry_take(sub, &s);
                if (err == FERRY_OK) {
                    hlat[i] = ferry_now().ns - s.publish_time.ns;
                    uint64_t stamp = 0;
                    if (s.size == sizeof stamp)
                        memcpy(&stamp, s.data, sizeof stamp);
                    ferry_release(sub, &s);
                    int pe = bench_xproc_probe_at(stamp, dlat + i, stream);
                    if (pe != 0)
                        XFAIL("probe launch at frame %u: %s", i, cudaGetErrorName((cudaError_t)pe));
                    break;
                }
            } else {
                ferry_sample s;
                err = ferry_take(sub, &s);
                if (err == FERRY_OK) {
                    hlat[i] = ferry_now().ns - s.publish_time.ns;
                    err = ferry_gpu_sample_copy(sub, &s, device, dcopy, stream);
                    if (err)
                        XFAIL("sample copy: %s", ferry_strerror(err));
                    int pe = bench_xproc_probe(dcopy, dlat + i, stream);
                    if (pe != 0)
                        XFAIL("probe launch at frame %u: %s", i, cudaGetErrorName((cudaError_t)pe));
                    /* The copy read the sample's pages: they stay held until it completed. */
                    if ((ce = cudaStreamSynchronize(stream)) != cudaSuccess)
                        XFAIL("copy: %s", cudaGetErrorString(ce));
                    ferry_release(sub, &s);
                    break;
                }
            }
            if (err != FERRY_EAGAIN)
                XFAIL("take: %s", ferry_strerror(err));
            if (cli_now_ns() > deadline)
                XFAIL("no frame %u within 10 s", i);
            if (!polls(path))
                ferry_wait(sub, 100000000);
        }
        if ((ce = cudaStreamSynchronize(stream)) != cudaSuccess)
            XFAIL("stream: %s", cudaGetErrorString(ce));
        if (gs)
            ferry_gpu_subscriber_poll(gs); /* the host sample goes back before the ack */
        char ack = 'a';
        if (cli_write_full(up, &ack, 1) != 0)
            XFAIL("pipe: %s", strerror(errno));
    }
    if ((ce = cudaMemcpy(lat, dlat, (size_t)frames * sizeof *lat, cudaMemcpyDeviceToHost)) !=
        cudaSuccess)
        XFAIL("latencies: %s", cudaGetErrorString(ce));
    uint32_t n = frames > warm ? frames - warm : 0;
    for (uint32_t i = 0; i < n; i++)
        if (lat[warm + i] < 0)
            lat[warm + i] = 0; /* the timer's granularity */
    qsort(lat + warm, n, sizeof *lat, cmp_i64);
    qsort(hlat + warm, n, sizeof *hlat, cmp_i64);
    res.take_p50_us = pct_us(hlat + warm, n, 0.50);
    res.status = 0;
    res.frames = n;
    res.p50_us = pct_us(lat + warm, n, 0.50);
    res.p99_us = pct_us(lat + warm, n, 0.99);
out:
    if (gs)
        ferry_gpu_subscriber_destroy(gs);
    if (sub)
        ferry_subscriber_destroy(sub);
    if (node)
        ferry_node_destroy(node);
    if (stream)
        cudaStreamDestroy(stream);
    cudaFree(dlat);
    cudaFree(dcopy);
    free(lat);
    free(hlat);
    cli_write_full(up, &res, sizeof res);
    return res.status;
}

/* `ferry bench gpu --xproc-reader PATH DIR DOMAIN FRAMES WARM DEVICE FD`: the reader, run from
 * main like any command, so that every CUDA module of the program is registered first (static
 * constructors run in no fixed order). */
int bench_gpu_xproc_reader(int argc, char **argv)
{
    if (argc != 8)
        return cli_fail("bench gpu", 2, "--xproc-reader takes 7 arguments");
    return xproc_reader(argv);
}

/* ---- the producer (this process) ------------------------------------------------------------ */

typedef struct reg_cache {
    void *pages[64];
    uint32_t n;
} reg_cache;

/* The copy path's D2H writes straight into the loaned sample: its pages are registered once. */
static bool loan_registered(reg_cache *rc, void *payload)
{
    uintptr_t start = (uintptr_t)payload & ~(uintptr_t)4095;
    for (uint32_t i = 0; i < rc->n; i++)
        if (rc->pages[i] == (void *)start)
            return true;
    if (rc->n == 64)
        return false;
    uintptr_t end = ((uintptr_t)payload + XPROC_FRAME + 4095) & ~(uintptr_t)4095;
    if (cudaHostRegister((void *)start, end - start, cudaHostRegisterPortable) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    rc->pages[rc->n++] = (void *)start;
    return true;
}

static pid_t spawn_reader(const bench_gpu_args *a, int path, uint32_t frames, uint32_t warm,
                          int *up_r)
{
    int up[2];
    if (pipe2(up, O_CLOEXEC) != 0)
        return -1;
    char spath[8], sdom[8], sframes[16], swarm[16], sdev[8], sfd[16];
    snprintf(spath, sizeof spath, "%d", path);
    snprintf(sdom, sizeof sdom, "%d", 0);
    snprintf(sframes, sizeof sframes, "%u", frames);
    snprintf(swarm, sizeof swarm, "%u", warm);
    snprintf(sdev, sizeof sdev, "%d", a->device);
    snprintf(sfd, sizeof sfd, "%d", up[1]);
    char *argv[] = {"ferry", "bench",        "gpu", "--xproc-reader",
                    spath,   (char *)a->dir, sdom,  sframes,
                    swarm,   sdev,           sfd,   NULL};
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        fcntl(up[1], F_SETFD, 0);
        alarm(120);
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    close(up[1]);
    if (pid < 0) {
        close(up[0]);
        return -1;
    }
    *up_r = up[0];
    return pid;
}

/* One path: the producer here, the reader in its own process. */
static int run_path(const bench_gpu_args *a, int path, uint32_t frames, uint32_t warm,
                    xproc_result *res)
{
    int rc = 1, up = -1;
    ferry_node *node = NULL;
    ferry_publisher *pub = NULL;
    ferry_gpu_publisher *gp = NULL;
    cudaStream_t stream = NULL;
    void *dbuf = NULL, *dstamp = NULL;
    volatile uint64_t *hstamp = NULL;
    reg_cache regs = {{NULL}, 0};
    ferry_err err;
    cudaError_t ce;
    memset(res, 0, sizeof *res);

    ferry_node_options no;
    ferry_node_options_init(&no);
    no.dir = a->dir;
    no.domain = 0;
    no.name = "xproc_producer";
    if ((err = ferry_node_create(&node, &no)))
        return fprintf(stderr, "xproc: node: %s\n", ferry_strerror(err)), 1;
    ferry_publisher_options po;
    ferry_publisher_options_init(&po);
    po.payload_align = 4096;
    po.max_chunks = 16;
    const char *type = path_type(path);
    if ((err = ferry_publisher_create(&pub, node, path_topic(path), type, ferry_hash(type), &po))) {
        fprintf(stderr, "xproc: publisher: %s\n", ferry_strerror(err));
        goto out;
    }
    if (is_device(path)) {
        ferry_gpu_publisher_options go;
        ferry_gpu_publisher_options_init(&go);
        go.device = a->device;
        go.early_wake = path != PATH_LATE;
        if ((err = ferry_gpu_publisher_create(&gp, pub, &go))) {
            fprintf(stderr, "xproc: device-frame publisher: %s\n", ferry_strerror(err));
            goto out;
        }
        ferry_gpu_ipc ipc;
        ferry_gpu_publisher_ipc(gp, &ipc);
        printf("device frames over %s IPC\n", ipc == FERRY_GPU_IPC_VMM ? "VMM" : "legacy");
    }
    if ((ce = cudaSetDevice(a->device)) != cudaSuccess ||
        (ce = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (!is_device(path) && (ce = cudaMalloc(&dbuf, XPROC_FRAME)) != cudaSuccess) ||
        (path == PATH_FLOOR &&
         ((ce = cudaHostAlloc((void **)&hstamp, sizeof *hstamp, cudaHostAllocMapped)) !=
              cudaSuccess ||
          (ce = cudaHostGetDevicePointer(&dstamp, (void *)hstamp, 0)) != cudaSuccess))) {
        fprintf(stderr, "xproc: CUDA setup: %s\n", cudaGetErrorString(ce));
        goto out;
    }
    pid_t pid = spawn_reader(a, path, frames, warm, &up);
    if (pid < 0) {
        fprintf(stderr, "xproc: cannot start the reader: %s\n", strerror(errno));
        goto out;
    }
    char c;
    int64_t deadline = cli_now_ns() + 60 * (int64_t)1000000000;
    if ((err = ferry_publisher_wait_subscribers(pub, 1, 60 * (int64_t)1000000000)) ||
        cli_read_full(up, &c, 1, deadline) != 0) {
        fprintf(stderr, "xproc: the reader did not start\n");
        goto reap;
    }
    for (uint32_t i = 0; i < frames; i++) {
        void *p;
        if (is_device(path)) {
            if ((err = ferry_gpu_loan(gp, XPROC_FRAME, stream, &p)) ||
                bench_xproc_fill(p, XPROC_FRAME, i, stream) != 0 ||
                (err = ferry_gpu_publish(gp, p, stream))) {
                fprintf(stderr, "xproc: frame %u: %s\n", i, ferry_strerror(err));
                goto reap;
            }
        } else if (path == PATH_FLOOR) {
            if (bench_xproc_fill(dbuf, XPROC_FRAME, i, stream) != 0 ||
                bench_xproc_stamp_host(dstamp, stream) != 0) {
                fprintf(stderr, "xproc: floor frame %u: launch failed\n", i);
                goto reap;
            }
            while ((ce = cudaStreamQuery(stream)) == cudaErrorNotReady)
                ;
            uint64_t stamp = *hstamp;
            if (ce != cudaSuccess || (err = ferry_loan(pub, sizeof stamp, &p))) {
                fprintf(stderr, "xproc: floor frame %u failed\n", i);
                goto reap;
            }
            memcpy(p, &stamp, sizeof stamp);
            if ((err = ferry_publish(pub, p, sizeof stamp))) {
                fprintf(stderr, "xproc: floor publish: %s\n", ferry_strerror(err));
                goto reap;
            }
        } else {
            if ((err = ferry_loan(pub, XPROC_FRAME, &p))) {
                fprintf(stderr, "xproc: loan: %s\n", ferry_strerror(err));
                goto reap;
            }
            if (!loan_registered(&regs, p) || bench_xproc_fill(dbuf, XPROC_FRAME, i, stream) ||
                cudaMemcpyAsync(p, dbuf, XPROC_FRAME, cudaMemcpyDeviceToHost, stream) ||
                cudaStreamSynchronize(stream) || (err = ferry_publish(pub, p, XPROC_FRAME))) {
                fprintf(stderr, "xproc: copy frame %u failed\n", i);
                ferry_loan_release(pub, p);
                goto reap;
            }
        }
        if (cli_read_full(up, &c, 1, cli_now_ns() + 10 * (int64_t)1000000000) != 0) {
            fprintf(stderr, "xproc: the reader stopped at frame %u\n", i);
            goto reap;
        }
        ferry_publisher_poll(pub, 0);
        /* Idle GPU and CPUs between frames: the figure is a handoff's, not a queue's. */
        int64_t until = cli_now_ns() + 200000;
        while (cli_now_ns() < until)
            ferry_publisher_poll(pub, 50000);
    }
    if (cli_read_full(up, res, sizeof *res, cli_now_ns() + 30 * (int64_t)1000000000) == 0 &&
        res->status == 0)
        rc = 0;
    else
        fprintf(stderr, "xproc: the reader failed\n");
reap:
    if (rc)
        kill(pid, SIGKILL);
    int st;
    waitpid(pid, &st, 0);
out:
    if (up >= 0)
        close(up);
    if (gp)
        ferry_gpu_publisher_destroy(gp);
    if (stream)
        cudaStreamSynchronize(stream);
    for (uint32_t i = 0; i < regs.n; i++)
        cudaHostUnregister(regs.pages[i]);
    if (pub)
        ferry_publisher_destroy(pub);
    if (node)
        ferry_node_destroy(node);
    if (stream)
        cudaStreamDestroy(stream);
    cudaFree(dbuf);
    if (hstamp)
        cudaFreeHost((void *)hstamp);
    (void)cudaGetLastError();
    return rc;
}

int bench_gpu_xproc(const bench_gpu_args *a)
{
    uint32_t frames = a->quick ? 400 : 5000, warm = 50;
    xproc_result r[NPATHS];
    printf("%-14s %12s %8s %10s %10s %12s\n", "path", "frame_bytes", "frames", "p50_us", "p99_us",
           "take_p50_us");
    if (a->csv && ftell(a->csv) == 0)
        fprintf(a->csv, "path,frame_bytes,frames,p50_us,p99_us,take_p50_us\n");
    for (int path = 0; path < NPATHS; path++) {
        if (run_path(a, path, frames, warm, &r[path]) != 0)
            return 1;
        size_t bytes = path == PATH_FLOOR ? sizeof(uint64_t) : XPROC_FRAME;
        printf("%-14s %12zu %8u %10.1f %10.1f %12.1f\n", path_name(path), bytes, r[path].frames,
               r[path].p50_us, r[path].p99_us, r[path].take_p50_us);
        if (a->csv)
            fprintf(a->csv, "%s,%zu,%u,%.1f,%.1f,%.1f\n", path_name(path), bytes, r[path].frames,
                    r[path].p50_us, r[path].p99_us, r[path].take_p50_us);
        fflush(stdout);
    }
    bool mps = false;
    ferry_gpu_mps_enabled(a->device, &mps);
    double ratio = r[PATH_DEVICE].p50_us > 0 ? r[PATH_COPY].p50_us / r[PATH_DEVICE].p50_us : 0;
    double vs_polled =
        r[PATH_POLLED].p50_us > 0 ? r[PATH_DEVICE].p50_us / r[PATH_POLLED].p50_us : 0;
    printf("MPS %s; the sleeping reader (device_frame) is %.1fx the polling one, %.1fx faster than "
           "the copy path; woken by the publication instead of the loan: %.1f us\n",
           mps ? "on" : "off", vs_polled, ratio, r[PATH_LATE].p50_us);
    if (mps) {
        printf("target (MPS): a sleeping reader p50 <= 40 us: %.1f us: %s\n", r[PATH_DEVICE].p50_us,
               r[PATH_DEVICE].p50_us <= 40.0 ? "met" : "MISSED");
        printf("target (MPS): a sleeping reader within 2x of a polling one: %.1fx: %s\n", vs_polled,
               vs_polled <= 2.0 ? "met" : "MISSED");
    } else {
        printf("target (no MPS): >= 3x faster than the copy path: %.1fx: %s\n", ratio,
               ratio >= 3.0 ? "met" : "MISSED");
    }
    printf("with a polling reader (no host wake-up in the path): %.1f us, %.1fx the copy path\n",
           r[PATH_POLLED].p50_us,
           r[PATH_POLLED].p50_us > 0 ? r[PATH_COPY].p50_us / r[PATH_POLLED].p50_us : 0.0);
    printf("floor of any handoff between two contexts (switch_floor): %.1f us; the polled device "
           "frame is %+.1f us from it, the copy path %+.1f us\n",
           r[PATH_FLOOR].p50_us, r[PATH_POLLED].p50_us - r[PATH_FLOOR].p50_us,
           r[PATH_COPY].p50_us - r[PATH_FLOOR].p50_us);
    return 0;
}
