/*
 * `ferry bench gpu`, part 2: a taken host frame into the GPU. A publisher process publishes
 * 1280x720 and 1920x1080 RGB frames; this process takes each one and moves it to the device by
 *   pageable    cudaMemcpyAsync from the sample's address, not registered (the runtime stages
 *               it through a pinned buffer of its own)
 *   registered  ferry_gpu_sample_copy: the same copy from the registered publisher pages
 *   mapped      a kernel that reads the frame in place through ferry_gpu_sample_device_ptr
 *   pinned      cudaMemcpyAsync from a cudaMallocHost buffer: the ceiling, no ferry involved
 * each synchronised per frame; plus first_register, the first ferry_gpu_sample_device_ptr on a
 * chunk (the registration). The pageable runs come first: once a chunk is registered, a copy
 * from it is a pinned copy, whatever the caller meant.
 */
#include "gpu_bench.h"

#include "bench.h"
#include "cli.h"
#include <ferry/gpu.h>

#include <cuda_runtime.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define TOPIC "/bench/gpu/ingest"
#define MAX_FRAME ((size_t)6220800)
#define PUB_CHUNKS 8
#define SEEN_MAX 64

/* ingest_kernels.cu */
int bench_ingest_sum(const void *p, size_t n, unsigned long long *sum, int blocks,
                     cudaStream_t stream);

static const size_t frame_sizes[] = {2764800, 6220800}; /* 1280x720x3, 1920x1080x3 */
#define NSIZES (sizeof frame_sizes / sizeof frame_sizes[0])

enum { OP_WAIT_SUBS = 1, OP_PUBLISH = 2, OP_STOP = 3 };
typedef struct ingest_cmd {
    uint64_t op;
    uint64_t arg;
} ingest_cmd;

enum { M_PAGEABLE, M_REGISTERED, M_MAPPED, M_PINNED, M_COUNT };
static const char *const method_names[M_COUNT] = {"pageable", "registered", "mapped", "pinned"};

typedef struct ingest {
    const bench_gpu_args *a;
    int cmd_fd, reply_fd;
    pid_t pub_pid;
    ferry_node *node;
    ferry_subscriber *sub;
    cudaStream_t stream;
    void *dbuf;               /* MAX_FRAME bytes of device memory */
    unsigned long long *dsum; /* the kernel's result */
    void *pinned;             /* MAX_FRAME bytes of cudaMallocHost memory */
    int blocks;
    cli_lat lat;
    cli_lat reg_lat[NSIZES]; /* first sight of a chunk, per frame size */
    double gbps[M_COUNT][NSIZES];
} ingest;

static int fail_cuda(const char *what, cudaError_t e)
{
    return cli_fail("bench gpu", 1, "ingest: %s: %s", what, cudaGetErrorString(e));
}

static int fail_ferry(const char *what, ferry_err e)
{
    return cli_fail("bench gpu", 1, "ingest: %s: %s", what, ferry_strerror(e));
}

/* What the kernel computes, on the CPU: 32-bit words, then trailing bytes. */
static unsigned long long cpu_sum(const void *data, size_t n)
{
    const unsigned char *p = data;
    unsigned long long acc = 0;
    size_t words = n / 4;
    for (size_t i = 0; i < words; i++) {
        uint32_t w;
        memcpy(&w, p + 4 * i, 4);
        acc += w;
    }
    for (size_t j = 0; j < n % 4; j++)
        acc += p[4 * words + j];
    return acc;
}

/* --- the publisher process ----------------------------------------------------------------- */

/* Publishes one frame per command. A chunk's pattern is written the first time it carries a
 * frame of that size; later frames rewrite only the header (cli_frame_fill's contract). */
static int publisher_proc(const char *dir, int cmd_fd, int reply_fd)
{
    ferry_node_options no;
    ferry_node_options_init(&no);
    no.dir = dir;
    no.name = "ingest-pub";
    ferry_node *node;
    ferry_err err = ferry_node_create(&node, &no);
    if (err)
        return fail_ferry("publisher node", err);
    ferry_publisher_options po;
    ferry_publisher_options_init(&po);
    po.max_sample_size = MAX_FRAME;
    po.max_chunks = PUB_CHUNKS;
    po.pool_bytes = (size_t)PUB_CHUNKS * (MAX_FRAME + (1u << 20));
    ferry_publisher *pub;
    if ((err = ferry_publisher_create(&pub, node, TOPIC, CLI_FRAME_TYPE, CLI_FRAME_MAGIC, &po))) {
        ferry_node_destroy(node);
        return fail_ferry("publisher", err);
    }
    int pub_fd = -1;
    ferry_publisher_fd(pub, &pub_fd);
    struct {
        void *p;
        size_t size;
    } seen[SEEN_MAX];
    int nseen = 0;
    uint64_t seq = 0;
    int rc = 0;
    for (;;) {
        struct pollfd pf[2] = {{.fd = cmd_fd, .events = POLLIN}, {.fd = pub_fd, .events = POLLIN}};
        int r = poll(pf, pub_fd >= 0 ? 2 : 1, 100);
        ferry_publisher_poll(pub, 0);
        if (r <= 0 || !(pf[0].revents & (POLLIN | POLLHUP)))
            continue;
        ingest_cmd c;
        if (cli_read_full(cmd_fd, &c, sizeof c, cli_now_ns() + 1000000000LL) != 0) {
            rc = 1; /* the benchmark went away */
            break;
        }
        uint64_t reply = FERRY_OK;
        if (c.op == OP_STOP) {
            cli_write_full(reply_fd, &reply, sizeof reply);
            break;
        } else if (c.op == OP_WAIT_SUBS) {
            reply = (uint64_t)ferry_publisher_wait_subscribers(pub, (uint32_t)c.arg, 10000000000LL);
        } else if (c.op == OP_PUBLISH) {
            void *frame;
            err = ferry_loan(pub, (size_t)c.arg, &frame);
            if (!err) {
                bool full = true;
                for (int i = 0; i < nseen && full; i++)
                    full = !(seen[i].p == frame && seen[i].size == c.arg);
                if (full && nseen < SEEN_MAX) {
                    seen[nseen].p = frame;
                    seen[nseen++].size = (size_t)c.arg;
                }
                cli_frame_fill(frame, (size_t)c.arg, ++seq, full);
                err = ferry_publish(pub, frame, (size_t)c.arg);
                if (err)
                    ferry_loan_release(pub, frame);
            }
            reply = (uint64_t)err;
        }
        if (cli_write_full(reply_fd, &reply, sizeof reply) != 0) {
            rc = 1;
            break;
        }
    }
    ferry_publisher_destroy(pub);
    ferry_node_destroy(node);
    return rc;
}

static ferry_err command(ingest *g, uint64_t op, uint64_t arg)
{
    ingest_cmd c = {op, arg};
    uint64_t reply;
    if (cli_write_full(g->cmd_fd, &c, sizeof c) != 0 ||
        cli_read_full(g->reply_fd, &reply, sizeof reply, cli_now_ns() + 20000000000LL) != 0)
        return FERRY_ESYS;
    return (ferry_err)reply;
}

static int take_frame(ingest *g, size_t size, ferry_sample *s)
{
    ferry_err err = command(g, OP_PUBLISH, size);
    if (err)
        return fail_ferry("publish", err);
    if ((err = ferry_wait(g->sub, 5000000000LL)) || (err = ferry_take(g->sub, s)))
        return fail_ferry("take", err);
    if (s->size != size)
        return cli_fail("bench gpu", 1, "ingest: took %zu bytes, expected %zu", s->size, size);
    return 0;
}

/* --- measurements -------------------------------------------------------------------------- */

/* One frame by method m; *ns is the time from the first call to the end of the stream's work. */
static int one_frame(ingest *g, int m, const ferry_sample *s, size_t size, int64_t *ns)
{
    cudaError_t e = cudaSuccess;
    ferry_err err = FERRY_OK;
    if (m == M_MAPPED) {
        if ((e = cudaMemsetAsync(g->dsum, 0, sizeof *g->dsum, g->stream)) != cudaSuccess ||
            (e = cudaStreamSynchronize(g->stream)) != cudaSuccess)
            return fail_cuda("reset", e);
    }
    int64_t t0 = cli_now_ns();
    switch (m) {
    case M_PAGEABLE:
        e = cudaMemcpyAsync(g->dbuf, s->data, size, cudaMemcpyHostToDevice, g->stream);
        break;
    case M_REGISTERED:
        err = ferry_gpu_sample_copy(g->sub, s, g->a->device, g->dbuf, g->stream);
        break;
    case M_MAPPED: {
        const void *dp;
        err = ferry_gpu_sample_device_ptr(g->sub, s, g->a->device, &dp);
        if (!err)
            e = (cudaError_t)bench_ingest_sum(dp, size, g->dsum, g->blocks, g->stream);
        break;
    }
    case M_PINNED:
        e = cudaMemcpyAsync(g->dbuf, g->pinned, size, cudaMemcpyHostToDevice, g->stream);
        break;
    }
    if (err)
        return fail_ferry(method_names[m], err);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(g->stream);
    *ns = cli_now_ns() - t0;
    if (e != cudaSuccess)
        return fail_cuda(method_names[m], e);
    return 0;
}

/* Checks what reached the device: the kernel's sum of the frame (in place), or of the copy. */
static int verify(ingest *g, int m, const void *host, size_t size)
{
    unsigned long long got = 0;
    cudaError_t e;
    if (m != M_MAPPED) {
        if ((e = cudaMemsetAsync(g->dsum, 0, sizeof *g->dsum, g->stream)) != cudaSuccess ||
            (e = (cudaError_t)bench_ingest_sum(g->dbuf, size, g->dsum, g->blocks, g->stream)) !=
                cudaSuccess)
            return fail_cuda("verify", e);
    }
    if ((e = cudaMemcpyAsync(&got, g->dsum, sizeof got, cudaMemcpyDeviceToHost, g->stream)) !=
            cudaSuccess ||
        (e = cudaStreamSynchronize(g->stream)) != cudaSuccess)
        return fail_cuda("verify", e);
    unsigned long long want = cpu_sum(host, size);
    if (got != want)
        return cli_fail("bench gpu", 1, "ingest: %s, %zu B: the device saw sum %llx, the host %llx",
                        method_names[m], size, got, want);
    return 0;
}

static void report(ingest *g, const char *method, size_t size, cli_lat *l, double *gbps_out)
{
    size_t n = l->count;
    double p50 = (double)cli_lat_pct(l, 50) / 1e3, p99 = (double)cli_lat_pct(l, 99) / 1e3;
    double gbps = p50 > 0 ? (double)size / (p50 * 1e3) : 0;
    if (gbps_out)
        *gbps_out = gbps;
    printf("  %-14s %11zu %7zu %10.1f %10.1f %8.2f\n", method, size, n, p50, p99, gbps);
    if (g->a->csv)
        fprintf(g->a->csv, "%s,%zu,%zu,%.3f,%.3f,%.3f\n", method, size, n, p50, p99, gbps);
}

static int run_method(ingest *g, int m, size_t size, int warmup, int frames)
{
    g->lat.count = 0;
    int si = size == frame_sizes[0] ? 0 : 1;
    for (int i = -warmup; i < frames; i++) {
        ferry_sample s;
        memset(&s, 0, sizeof s);
        bool sample = m != M_PINNED;
        if (sample && take_frame(g, size, &s) != 0)
            return 1;
        if (m == M_PINNED && i == -warmup) {
            cli_frame_fill(g->pinned, size, 1, true);
            cli_prefault(g->pinned, size);
        }
        /* The first ferry call on a chunk registers it: timed on its own, outside the rows. */
        if (m == M_REGISTERED || m == M_MAPPED) {
            ferry_gpu_host_stats before, after;
            ferry_gpu_host_stats_get(&before);
            const void *dp;
            int64_t t0 = cli_now_ns();
            ferry_err err = ferry_gpu_sample_device_ptr(g->sub, &s, g->a->device, &dp);
            int64_t took = cli_now_ns() - t0;
            ferry_gpu_host_stats_get(&after);
            if (err) {
                ferry_release(g->sub, &s);
                return fail_ferry("device pointer", err);
            }
            if (after.registered != before.registered)
                cli_lat_add(&g->reg_lat[si], took);
        }
        int64_t ns = 0;
        int rc = one_frame(g, m, &s, size, &ns);
        if (rc == 0 && i == 0)
            rc = verify(g, m, sample ? s.data : g->pinned, size);
        if (sample)
            ferry_release(g->sub, &s);
        if (rc)
            return rc;
        if (i >= 0)
            cli_lat_add(&g->lat, ns);
    }
    report(g, method_names[m], size, &g->lat, &g->gbps[m][si]);
    return 0;
}

static int setup_cuda(ingest *g)
{
    cudaError_t e;
    int sms = 0;
    if ((e = cudaSetDevice(g->a->device)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaMalloc(&g->dbuf, MAX_FRAME)) != cudaSuccess ||
        (e = cudaMalloc((void **)&g->dsum, sizeof *g->dsum)) != cudaSuccess ||
        (e = cudaMallocHost(&g->pinned, MAX_FRAME)) != cudaSuccess ||
        (e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, g->a->device)) !=
            cudaSuccess)
        return fail_cuda("setup", e);
    g->blocks = sms > 0 ? 4 * sms : 128;
    return 0;
}

static void teardown_cuda(ingest *g)
{
    if (g->stream)
        cudaStreamSynchronize(g->stream);
    cudaFreeHost(g->pinned);
    cudaFree(g->dsum);
    cudaFree(g->dbuf);
    if (g->stream)
        cudaStreamDestroy(g->stream);
    (void)cudaGetLastError();
}

int bench_gpu_ingest(const bench_gpu_args *a)
{
    int ndev = 0;
    ferry_err err = ferry_gpu_device_count(&ndev);
    if (err)
        return fail_ferry("no CUDA device", err);
    if (a->device < 0 || a->device >= ndev)
        return cli_fail("bench gpu", 2, "ingest: no device %d (%d found)", a->device, ndev);
    ingest g;
    memset(&g, 0, sizeof g);
    g.a = a;
    g.cmd_fd = g.reply_fd = -1;
    int frames = a->quick ? 40 : 400;
    int warmup = a->quick ? 8 : 24; /* the chunks the publisher cycles through get registered */
    char own_dir[256] = "";
    const char *dir = a->dir;
    if (!dir) {
        if (!cli_private_dir("ferry-ingest-", own_dir, sizeof own_dir))
            return 1;
        dir = own_dir;
    }
    int rc = 1;
    /* A publisher that died must not take this process with it at the next command. */
    struct sigaction ign, old_pipe;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ign, &old_pipe);
    bool lat_ok = cli_lat_init(&g.lat, (size_t)frames);
    for (size_t i = 0; i < NSIZES; i++)
        lat_ok = cli_lat_init(&g.reg_lat[i], 64) && lat_ok;
    if (!lat_ok) {
        cli_fail("bench gpu", 1, "ingest: out of memory");
        goto out;
    }
    if (setup_cuda(&g) != 0)
        goto out;

    /* The publisher runs in a process of its own; it never touches CUDA (a child may not use
     * a CUDA context its parent created) and leaves with _exit. */
    int to_pub[2], from_pub[2];
    if (pipe(to_pub) != 0 || pipe(from_pub) != 0) {
        cli_fail("bench gpu", 1, "ingest: pipe: %s", strerror(errno));
        goto out;
    }
    pid_t parent = getpid();
    fflush(NULL);
    g.pub_pid = fork();
    if (g.pub_pid == 0) {
        cli_child_setup(parent);
        close(to_pub[1]);
        close(from_pub[0]);
        int r = publisher_proc(dir, to_pub[0], from_pub[1]);
        fflush(NULL);
        _exit(r);
    }
    close(to_pub[0]);
    close(from_pub[1]);
    g.cmd_fd = to_pub[1];
    g.reply_fd = from_pub[0];
    if (g.pub_pid < 0) {
        cli_fail("bench gpu", 1, "ingest: fork: %s", strerror(errno));
        goto out;
    }

    ferry_node_options no;
    ferry_node_options_init(&no);
    no.dir = dir;
    no.name = "ingest-sub";
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = 2;
    if ((err = ferry_node_create(&g.node, &no)) ||
        (err = ferry_subscriber_create(&g.sub, g.node, TOPIC, CLI_FRAME_TYPE, CLI_FRAME_MAGIC,
                                       &so))) {
        fail_ferry("subscriber", err);
        goto out;
    }
    ingest_cmd wait_cmd = {OP_WAIT_SUBS, 1};
    uint64_t reply = 0;
    if (cli_write_full(g.cmd_fd, &wait_cmd, sizeof wait_cmd) != 0 ||
        (err = ferry_subscriber_wait_publishers(g.sub, 1, 10000000000LL)) ||
        cli_read_full(g.reply_fd, &reply, sizeof reply, cli_now_ns() + 20000000000LL) != 0 ||
        reply != FERRY_OK) {
        fail_ferry("connect", err ? err : reply ? (ferry_err)reply : FERRY_ETIMEDOUT);
        goto out;
    }

    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, a->device) == cudaSuccess)
        printf("ingest: device %d %s (%s), %d frames per row%s\n", a->device, prop.name,
               prop.integrated ? "integrated: mapped is the zero-copy path"
                               : "discrete: mapped reads cross the bus",
               frames, a->quick ? " (quick)" : "");
    printf("  %-14s %11s %7s %10s %10s %8s\n", "method", "frame_bytes", "frames", "p50_us",
           "p99_us", "GB/s");
    if (a->csv && ftell(a->csv) == 0)
        fprintf(a->csv, "method,frame_bytes,frames,p50_us,p99_us,gbps\n");
    /* Method-major, pageable first: nothing is registered while it runs. */
    for (int m = 0; m < M_COUNT; m++)
        for (size_t i = 0; i < NSIZES; i++)
            if (run_method(&g, m, frame_sizes[i], warmup, frames) != 0)
                goto out;
    for (size_t i = 0; i < NSIZES; i++)
        if (g.reg_lat[i].count)
            report(&g, "first_register", frame_sizes[i], &g.reg_lat[i], NULL);
    rc = 0;
    for (size_t i = 0; i < NSIZES; i++) {
        double reg = g.gbps[M_REGISTERED][i], pin = g.gbps[M_PINNED][i];
        double pct = pin > 0 ? 100.0 * reg / pin : 0;
        printf("  target %zu B: registered copy %.2f GB/s = %.0f%% of pinned %.2f GB/s "
               "(>= 90%%): %s\n",
               frame_sizes[i], reg, pct, pin, pct >= 90.0 ? "PASS" : "FAIL");
    }

out:
    if (g.sub)
        ferry_subscriber_destroy(g.sub);
    if (g.node)
        ferry_node_destroy(g.node);
    if (g.pub_pid > 0) {
        if (command(&g, OP_STOP, 0) != FERRY_OK)
            kill(g.pub_pid, SIGKILL);
        int st;
        waitpid(g.pub_pid, &st, 0);
    }
    if (g.cmd_fd >= 0)
        close(g.cmd_fd);
    if (g.reply_fd >= 0)
        close(g.reply_fd);
    teardown_cuda(&g);
    cli_lat_free(&g.lat);
    for (size_t i = 0; i < NSIZES; i++)
        cli_lat_free(&g.reg_lat[i]);
    if (own_dir[0])
        cli_rmtree(own_dir);
    sigaction(SIGPIPE, &old_pipe, NULL);
    return rc;
}
