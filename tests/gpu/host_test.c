/*
 * Host frames to the GPU: a publisher process publishes 1280x720 RGB frames with a known
 * pattern; this process takes them and hands them to the GPU in place (a mapped, read-only
 * registration of the publisher's pages) and by copy. Checks: checksums computed on the GPU
 * match the CPU's; the registration is read-only (a kernel that writes through it faults, in a
 * process of its own since a fault ruins its CUDA context); registration happens once per chunk;
 * it survives the publisher's death while a sample is held and is undone when the connection
 * closes or the subscriber is destroyed; errors.
 *
 * Without a device: the calls return FERRY_ENODEV, then the test exits 77 (skipped).
 */
#include "gpu_testutil.h"
#include "testutil.h"

#include "core/core.h"
#include <ferry/gpu.h>

#include <cuda_runtime.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define TYPE "test/gpu_host"
#define HASH 0x686f73746672616dULL
#define FRAME ((size_t)2764800) /* 1280 x 720 x 3 */
#define DEV 0

/* host_kernels.cu: cudaError_t values as int; they synchronise. */
int host_test_checksum(const void *ptr, size_t n, unsigned long long *out);
void host_test_kernels_done(void);
int host_test_write(const void *ptr, size_t n);

enum { CMD_STOP = 1u << 20 }; /* other commands: publish that many frames */
enum { ACK_READY = 1u << 21 };

static void *dev_buf; /* FRAME bytes of device memory */
static cudaStream_t stream;

static unsigned long long gpu_checksum(const void *ptr, size_t n)
{
    unsigned long long sum = 0;
    int e = host_test_checksum(ptr, n, &sum);
    TU_CHECK_MSG(e == cudaSuccess, "checksum kernel: %s", cudaGetErrorString((cudaError_t)e));
    return sum;
}

typedef struct counts {
    uint64_t reg, unreg, failed;
} counts;

/* Registrations made, undone, and undone with an error, in this process. */
static counts counts_now(void)
{
    ferry_gpu_host_stats st;
    TU_OK(ferry_gpu_host_stats_get(&st));
    counts c = {st.registered, st.unregistered, st.unregister_failed};
    return c;
}

/* --- the publisher process ----------------------------------------------------------------- */

typedef struct peer {
    const char *topic;
    uint32_t nsubs;
    uint32_t max_chunks;
    tu_pipe cmd, ack;
    pid_t pid;
} peer;

static int publisher_main(void *arg)
{
    peer *p = arg;
    ferry_node *node = tu_node("gpupub");
    ferry_publisher_options o;
    ferry_publisher_options_init(&o);
    o.max_sample_size = FRAME;
    o.max_chunks = p->max_chunks;
    ferry_publisher *pub;
    TU_OK(ferry_publisher_create(&pub, node, p->topic, TYPE, HASH, &o));
    TU_OK(ferry_publisher_wait_subscribers(pub, p->nsubs, 3 * TU_WAIT_NS));
    tu_send(&p->ack, ACK_READY);
    uint64_t seq = 1;
    for (;;) {
        uint64_t cmd = tu_serve_until(&pub, 1, &p->cmd, 6 * TU_WAIT_MS);
        if (cmd == CMD_STOP)
            break;
        for (uint64_t i = 0; i < cmd; i++)
            tu_publish_pattern(pub, FRAME, seq++);
        tu_send(&p->ack, cmd);
    }
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    return 0;
}

static void peer_start(peer *p, const char *topic, uint32_t nsubs, uint32_t max_chunks)
{
    memset(p, 0, sizeof *p);
    p->topic = topic;
    p->nsubs = nsubs;
    p->max_chunks = max_chunks;
    p->cmd = tu_pipe_make();
    p->ack = tu_pipe_make();
    p->pid = tu_fork(publisher_main, p, 90);
}

static void peer_publish(peer *p, uint64_t n)
{
    tu_send(&p->cmd, n);
    TU_EQ_U64(tu_recv(&p->ack, TU_WAIT_MS), n);
}

static void peer_stop(peer *p)
{
    tu_send(&p->cmd, CMD_STOP);
    TU_CHILD_OK(p->pid);
}

static ferry_subscriber *make_sub(ferry_node *node, const char *topic)
{
    ferry_subscriber_options o;
    ferry_subscriber_options_init(&o);
    o.depth = 4;
    o.max_held = 8;
    ferry_subscriber *sub;
    TU_OK(ferry_subscriber_create(&sub, node, topic, TYPE, HASH, &o));
    return sub;
}

/* Connects sub to the peer's publisher: both sides wait for each other. */
static void connect_peer(ferry_subscriber *sub, peer *p)
{
    TU_OK(ferry_subscriber_wait_publishers(sub, 1, TU_WAIT_NS));
    TU_EQ_U64(tu_recv(&p->ack, 3 * TU_WAIT_MS), ACK_READY);
}

static void take_one(ferry_subscriber *sub, ferry_sample *s)
{
    TU_OK(ferry_wait(sub, TU_WAIT_NS));
    TU_OK(ferry_take(sub, s));
    TU_SAMPLE_INTACT(s, FRAME);
}

static void check_in_place(ferry_subscriber *sub, const ferry_sample *s, unsigned long long cpu)
{
    const void *dp = NULL;
    TU_OK(ferry_gpu_sample_device_ptr(sub, s, DEV, &dp));
    TU_CHECK(dp != NULL);
    unsigned long long g = gpu_checksum(dp, s->size);
    TU_CHECK_MSG(g == cpu, "in-place GPU checksum %llx, CPU %llx", g, cpu);
}

static void check_copy(ferry_subscriber *sub, const ferry_sample *s, unsigned long long cpu)
{
    CUDA_OK(cudaMemsetAsync(dev_buf, 0, FRAME, stream));
    TU_OK(ferry_gpu_sample_copy(sub, s, DEV, dev_buf, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    unsigned long long g = gpu_checksum(dev_buf, s->size);
    TU_CHECK_MSG(g == cpu, "copied frame's GPU checksum %llx, CPU %llx", g, cpu);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* --- (a) in place, (b) copy, (d) one registration per chunk -------------------------------- */

#define FRAMES 12

static void test_in_place_and_copy(void)
{
    peer p;
    peer_start(&p, "/gpu/frames", 1, 3);
    ferry_node *node = tu_node("gpusub");
    ferry_subscriber *sub = make_sub(node, "/gpu/frames");
    connect_peer(sub, &p);
    counts c0 = counts_now();
    bool seen[64] = {false};
    uint32_t distinct = 0, conn_slot = UINT32_MAX;
    int64_t first_ns[FRAMES], later_ns[FRAMES];
    int nfirst = 0, nlater = 0;
    for (int i = 0; i < FRAMES; i++) {
        peer_publish(&p, 1);
        ferry_sample s;
        take_one(sub, &s);
        unsigned long long cpu = tu_weighted_checksum(s.data, s.size);
        ferry__sample_where w;
        TU_OK(ferry__sample_where_get(sub, &s, &w));
        TU_CMP_U64(w.chunk, <, 64);
        if (conn_slot == UINT32_MAX)
            conn_slot = w.slot;
        TU_EQ_U64(w.slot, conn_slot);
        bool fresh = !seen[w.chunk];
        counts before = counts_now();
        /* Even frames register through the device pointer, odd ones through the copy. */
        ferry_time t0 = ferry_now();
        if (i % 2 == 0) {
            const void *dp;
            TU_OK(ferry_gpu_sample_device_ptr(sub, &s, DEV, &dp));
        } else {
            TU_OK(ferry_gpu_sample_copy(sub, &s, DEV, dev_buf, stream));
            CUDA_OK(cudaStreamSynchronize(stream));
        }
        int64_t took = tu_since(t0);
        counts after = counts_now();
        if (fresh) {
            TU_EQ_U64(after.reg, before.reg + 1);
            seen[w.chunk] = true;
            distinct++;
            if (i % 2 == 0)
                first_ns[nfirst++] = took;
        } else {
            TU_EQ_U64(after.reg, before.reg);
            if (i % 2 == 0)
                later_ns[nlater++] = took;
        }
        /* The same address every time for the same sample, and no registration more. */
        const void *d1, *d2;
        TU_OK(ferry_gpu_sample_device_ptr(sub, &s, DEV, &d1));
        TU_OK(ferry_gpu_sample_device_ptr(sub, &s, DEV, &d2));
        TU_EQ_PTR(d1, d2);
        check_in_place(sub, &s, cpu);
        check_copy(sub, &s, cpu);
        TU_EQ_U64(counts_now().reg, after.reg);
        TU_EQ_U64(counts_now().unreg, c0.unreg);
        TU_OK(ferry_release(sub, &s));
    }
    /* Three chunks at most for twelve frames: chunks were seen again, and registered once. */
    TU_CMP_U64(distinct, <, FRAMES);
    TU_EQ_U64(counts_now().reg - c0.reg, distinct);
    qsort(first_ns, (size_t)nfirst, sizeof first_ns[0], cmp_i64);
    qsort(later_ns, (size_t)nlater, sizeof later_ns[0], cmp_i64);
    if (nfirst && nlater)
        printf("    %u chunks registered for %d frames; device pointer: first sight of a chunk "
               "%.1f us (median of %d), later %.2f us (median of %d)%s\n",
               distinct, FRAMES, first_ns[nfirst / 2] / 1e3, nfirst, later_ns[nlater / 2] / 1e3,
               nlater, first_ns[nfirst / 2] > 10 * later_ns[nlater / 2] ? "" : " (NOTE: < 10x)");

    /* Destroying the subscriber undoes every registration it made. */
    TU_OK(ferry_subscriber_destroy(sub));
    counts c1 = counts_now();
    TU_EQ_U64(c1.unreg - c0.unreg, distinct);
    TU_EQ_U64(c1.failed, c0.failed);
    peer_stop(&p);
    TU_OK(ferry_node_destroy(node));
}

/* --- (c) the registration is read-only ----------------------------------------------------- */

/* The program run again as "host_test --write-child DIR DOMAIN TOPIC FD": it subscribes, checks
 * it can read a frame in place, sends 1 on FD, then writes through the device pointer.
 * Exit 0: the write failed with a CUDA error and the frame is unchanged; 2: the write went
 * through; 3: something before the write failed; 77: no device. */
static int write_child(char **argv)
{
    int n = 0;
    if (ferry_gpu_device_count(&n) != FERRY_OK)
        return 77;
    ferry_node_options no;
    ferry_node_options_init(&no);
    no.dir = argv[0];
    no.domain = (uint32_t)strtoul(argv[1], NULL, 10);
    no.name = "gpuwriter";
    const char *topic = argv[2];
    int fd = atoi(argv[3]);
    ferry_node *node;
    ferry_subscriber *sub;
    ferry_sample s;
    ferry_err err;
    if ((err = ferry_node_create(&node, &no)) ||
        (err = ferry_subscriber_create(&sub, node, topic, TYPE, HASH, NULL)) ||
        (err = ferry_subscriber_wait_publishers(sub, 1, 3 * TU_WAIT_NS)) ||
        (err = ferry_wait(sub, 6 * TU_WAIT_NS)) || (err = ferry_take(sub, &s))) {
        fprintf(stderr, "write child: setup: %s\n", ferry_strerror(err));
        return 3;
    }
    unsigned long long cpu = tu_weighted_checksum(s.data, s.size), gpu = 0;
    const void *dp = NULL;
    if ((err = ferry_gpu_sample_device_ptr(sub, &s, DEV, &dp))) {
        fprintf(stderr, "write child: device pointer: %s\n", ferry_strerror(err));
        return 3;
    }
    int e = host_test_checksum(dp, s.size, &gpu);
    if (e != cudaSuccess || gpu != cpu) {
        fprintf(stderr, "write child: reading in place failed (%s, %llx vs %llx)\n",
                cudaGetErrorString((cudaError_t)e), gpu, cpu);
        return 3;
    }
    uint64_t one = 1;
    if (write(fd, &one, sizeof one) != (ssize_t)sizeof one)
        return 3;
    e = host_test_write(dp, 4096);
    int rc;
    if (tu_weighted_checksum(s.data, s.size) != cpu) {
        fprintf(stderr, "write child: the frame changed under a read-only registration\n");
        rc = 2;
    } else if (e == cudaSuccess) {
        fprintf(stderr, "write child: a kernel wrote through the read-only registration\n");
        rc = 2;
    } else {
        printf("    write child: the write faulted as expected: %s (%s)\n",
               cudaGetErrorName((cudaError_t)e), cudaGetErrorString((cudaError_t)e));
        rc = 0;
    }
    /* The context is unusable now: undoing the registration fails, which is expected. */
    ferry_release(sub, &s);
    ferry_subscriber_destroy(sub);
    ferry_node_destroy(node);
    return rc;
}

typedef struct exec_args {
    char *argv[8];
} exec_args;

static int exec_child(void *arg)
{
    exec_args *a = arg;
    execv("/proc/self/exe", a->argv);
    fprintf(stderr, "execv: %s\n", strerror(errno));
    return 3;
}

static void test_write_faults(void)
{
    peer p;
    peer_start(&p, "/gpu/ro", 1, 2);
    tu_pipe reached = tu_pipe_make();
    char domain[16], fd[16];
    snprintf(domain, sizeof domain, "%u", tu_domain());
    snprintf(fd, sizeof fd, "%d", reached.w);
    exec_args a = {{(char *)"host_test", (char *)"--write-child", (char *)tu_dir(), domain,
                    (char *)"/gpu/ro", fd, NULL}};
    pid_t child = tu_fork(exec_child, &a, 60);
    TU_EQ_U64(tu_recv(&p.ack, 3 * TU_WAIT_MS), ACK_READY);
    peer_publish(&p, 1);
    int st = tu_wait_status(child, 6 * TU_WAIT_MS);
    bool got_there = tu_readable(&reached) && tu_recv(&reached, TU_WAIT_MS) == 1;
    if (WIFEXITED(st)) {
        TU_CHECK_MSG(WEXITSTATUS(st) != 2, "a kernel could write through the registration");
        TU_CHECK_MSG(WEXITSTATUS(st) == 0, "write child exited with %d before the write",
                     WEXITSTATUS(st));
        TU_CHECK(got_there);
    } else {
        TU_CHECK_MSG(WIFSIGNALED(st) && got_there,
                     "write child died (signal %d) before it tried to write",
                     WIFSIGNALED(st) ? WTERMSIG(st) : 0);
        TU_CHECK_MSG(WTERMSIG(st) != SIGALRM, "write child timed out");
        printf("    write child died by signal %d while writing: the write faulted\n",
               WTERMSIG(st));
    }
    peer_stop(&p);
    /* The child's subscriber is gone; a child killed by a signal leaves its files behind. */
    uint32_t removed = 0;
    TU_OK(ferry_clean(tu_dir(), tu_domain(), &removed));
}

/* --- (e) the publisher dies while a registered sample is held ------------------------------ */

static void test_publisher_dies(void)
{
    peer p;
    peer_start(&p, "/gpu/dies", 1, 2);
    ferry_node *node = tu_node("gpusub");
    ferry_subscriber *sub = make_sub(node, "/gpu/dies");
    connect_peer(sub, &p);
    peer_publish(&p, 1);
    ferry_sample s;
    take_one(sub, &s);
    unsigned long long cpu = tu_weighted_checksum(s.data, s.size);
    counts c0 = counts_now();
    const void *dp;
    TU_OK(ferry_gpu_sample_device_ptr(sub, &s, DEV, &dp));
    TU_EQ_U64(counts_now().reg, c0.reg + 1);
    check_in_place(sub, &s, cpu);

    TU_CHECK(kill(p.pid, SIGKILL) == 0);
    int st = tu_wait_status(p.pid, TU_WAIT_MS);
    TU_CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    ferry_time t0 = ferry_now();
    ferry_subscriber_stats ss;
    for (;;) {
        ferry_sample none;
        TU_ERR(ferry_take(sub, &none), FERRY_EAGAIN);
        ferry_err e = ferry_wait(sub, 10 * TU_MS);
        TU_CHECK(e == FERRY_OK || e == FERRY_ETIMEDOUT);
        TU_OK(ferry_subscriber_stats_get(sub, &ss));
        if (ss.publishers_lost >= 1)
            break;
        TU_CHECK_MSG(tu_since(t0) < TU_WAIT_NS, "the publisher's death went unnoticed");
    }
    /* Gone, but the held sample and its registration stay valid until released. */
    const void *again;
    TU_OK(ferry_gpu_sample_device_ptr(sub, &s, DEV, &again));
    TU_EQ_PTR(again, dp);
    unsigned long long g = gpu_checksum(dp, s.size);
    TU_CHECK_MSG(g == cpu, "after the publisher died: GPU checksum %llx, CPU %llx", g, cpu);
    check_copy(sub, &s, cpu);
    TU_SAMPLE_INTACT(&s, FRAME);
    TU_EQ_U64(counts_now().reg, c0.reg + 1);
    TU_EQ_U64(counts_now().unreg, c0.unreg);

    /* The last release closes the connection: the registration goes before the mapping. */
    TU_OK(ferry_release(sub, &s));
    counts c1 = counts_now();
    TU_EQ_U64(c1.unreg, c0.unreg + 1);
    TU_EQ_U64(c1.failed, c0.failed);
    tu_check_no_mappings();

    TU_OK(ferry_subscriber_destroy(sub));
    TU_EQ_U64(counts_now().unreg, c1.unreg);
    TU_OK(ferry_node_destroy(node));
    uint32_t removed = 0;
    TU_OK(ferry_clean(tu_dir(), tu_domain(), &removed));
}

/* --- (f) destroying the subscriber undoes its registrations -------------------------------- */

static void test_destroy_undoes(void)
{
    peer p;
    peer_start(&p, "/gpu/destroy", 1, 4);
    ferry_node *node = tu_node("gpusub");
    ferry_subscriber *sub = make_sub(node, "/gpu/destroy");
    connect_peer(sub, &p);
    counts c0 = counts_now();
    peer_publish(&p, 3);
    ferry_sample s[3];
    for (int i = 0; i < 3; i++) {
        take_one(sub, &s[i]);
        check_in_place(sub, &s[i], tu_weighted_checksum(s[i].data, s[i].size));
    }
    /* Held together, so three chunks. */
    TU_EQ_U64(counts_now().reg, c0.reg + 3);
    for (int i = 0; i < 3; i++)
        TU_OK(ferry_release(sub, &s[i]));
    /* Released samples keep their chunks registered for the next frames. */
    TU_EQ_U64(counts_now().unreg, c0.unreg);
    TU_OK(ferry_subscriber_destroy(sub));
    counts c1 = counts_now();
    TU_EQ_U64(c1.unreg, c0.unreg + 3);
    TU_EQ_U64(c1.failed, c0.failed);
    peer_stop(&p);
    TU_OK(ferry_node_destroy(node));
}

/* --- (g) errors ---------------------------------------------------------------------------- */

static void test_errors(void)
{
    peer p;
    peer_start(&p, "/gpu/errors", 2, 4);
    ferry_node *node = tu_node("gpusub");
    ferry_subscriber *a = make_sub(node, "/gpu/errors");
    ferry_subscriber *b = make_sub(node, "/gpu/errors");
    TU_OK(ferry_subscriber_wait_publishers(a, 1, TU_WAIT_NS));
    TU_OK(ferry_subscriber_wait_publishers(b, 1, TU_WAIT_NS));
    TU_EQ_U64(tu_recv(&p.ack, 3 * TU_WAIT_MS), ACK_READY);
    peer_publish(&p, 1);
    ferry_sample sa, sb;
    take_one(a, &sa);
    take_one(b, &sb);
    const void *dp = NULL;
    counts c0 = counts_now();

    TU_ERR(ferry_gpu_sample_device_ptr(NULL, &sa, DEV, &dp), FERRY_EINVAL);
    TU_ERR(ferry_gpu_sample_device_ptr(a, NULL, DEV, &dp), FERRY_EINVAL);
    TU_ERR(ferry_gpu_sample_device_ptr(a, &sa, DEV, NULL), FERRY_EINVAL);
    TU_ERR(ferry_gpu_sample_copy(NULL, &sa, DEV, dev_buf, stream), FERRY_EINVAL);
    TU_ERR(ferry_gpu_sample_copy(a, NULL, DEV, dev_buf, stream), FERRY_EINVAL);
    TU_ERR(ferry_gpu_sample_copy(a, &sa, DEV, NULL, stream), FERRY_EINVAL);

    TU_ERR(ferry_gpu_sample_device_ptr(a, &sb, DEV, &dp), FERRY_EFOREIGN);
    TU_ERR(ferry_gpu_sample_copy(b, &sa, DEV, dev_buf, stream), FERRY_EFOREIGN);

    int ndev = 0;
    TU_OK(ferry_gpu_device_count(&ndev));
    TU_ERR(ferry_gpu_sample_device_ptr(a, &sa, ndev, &dp), FERRY_ENODEV);
    TU_ERR(ferry_gpu_sample_device_ptr(a, &sa, -1, &dp), FERRY_ENODEV);
    TU_ERR(ferry_gpu_sample_copy(a, &sa, ndev, dev_buf, stream), FERRY_ENODEV);

    ferry_sample tampered = sa;
    tampered.size = (size_t)1 << 40;
    TU_ERR(ferry_gpu_sample_copy(a, &tampered, DEV, dev_buf, stream), FERRY_EINVAL);
    tampered = sa;
    tampered.data = (const uint8_t *)sa.data + 4096;
    TU_ERR(ferry_gpu_sample_device_ptr(a, &tampered, DEV, &dp), FERRY_EPROTO);
    TU_EQ_U64(counts_now().reg, c0.reg); /* nothing registered by a refused call */

    /* Valid calls on both, then released samples are refused. */
    check_in_place(a, &sa, tu_weighted_checksum(sa.data, sa.size));
    check_copy(b, &sb, tu_weighted_checksum(sb.data, sb.size));
    TU_EQ_U64(counts_now().reg, c0.reg + 2); /* each subscriber maps the segment on its own */
    ferry_sample stale = sa;
    TU_OK(ferry_release(a, &sa));
    TU_ERR(ferry_gpu_sample_device_ptr(a, &stale, DEV, &dp), FERRY_ESTATE);
    TU_ERR(ferry_gpu_sample_device_ptr(a, &sa, DEV, &dp), FERRY_ESTATE); /* zeroed by release */
    TU_ERR(ferry_gpu_sample_copy(a, &stale, DEV, dev_buf, stream), FERRY_ESTATE);
    TU_OK(ferry_release(b, &sb));
    TU_ERR(ferry_gpu_sample_copy(b, &sb, DEV, dev_buf, stream), FERRY_ESTATE);

    TU_OK(ferry_subscriber_destroy(a));
    TU_OK(ferry_subscriber_destroy(b));
    TU_EQ_U64(counts_now().unreg, c0.unreg + 2);
    TU_EQ_U64(counts_now().failed, c0.failed);
    peer_stop(&p);
    TU_OK(ferry_node_destroy(node));
}

/* --- no device --------------------------------------------------------------------------- */

static void test_no_device(void)
{
    ferry_node *node = tu_node("nodev");
    ferry_publisher_options o;
    ferry_publisher_options_init(&o);
    o.max_sample_size = FRAME;
    ferry_publisher *pub;
    TU_OK(ferry_publisher_create(&pub, node, "/gpu/nodev", TYPE, HASH, &o));
    ferry_subscriber *sub = make_sub(node, "/gpu/nodev");
    tu_connect_local(pub, 1, sub, 1);
    tu_publish_pattern(pub, FRAME, 1);
    ferry_sample s;
    take_one(sub, &s);
    const void *dp = NULL;
    char dummy[16];
    TU_ERR(ferry_gpu_sample_device_ptr(sub, &s, 0, &dp), FERRY_ENODEV);
    TU_ERR(ferry_gpu_sample_copy(sub, &s, 0, dummy, NULL), FERRY_ENODEV);
    TU_ERR(ferry_gpu_sample_device_ptr(NULL, &s, 0, &dp), FERRY_EINVAL);
    TU_ERR(ferry_gpu_sample_device_ptr(sub, &s, 0, NULL), FERRY_EINVAL);
    TU_ERR(ferry_gpu_sample_copy(sub, &s, 0, NULL, NULL), FERRY_EINVAL);
    TU_CHECK(dp == NULL);
    TU_OK(ferry_release(sub, &s));
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
}

/* Everything CUDA opens or maps once per process happens here, before the first test counts
 * this process's descriptors. */
static void warm_up(void)
{
    CUDA_OK(cudaSetDevice(DEV));
    CUDA_OK(cudaFree(0));
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CUDA_OK(cudaMalloc(&dev_buf, FRAME));
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    void *host = aligned_alloc(page, 4 * page);
    TU_CHECK(host != NULL);
    memset(host, 7, 4 * page);
    CUDA_OK(cudaHostRegister(host, 4 * page,
                             cudaHostRegisterMapped | cudaHostRegisterPortable |
                                 cudaHostRegisterReadOnly));
    void *dhost;
    CUDA_OK(cudaHostGetDevicePointer(&dhost, host, 0));
    TU_CHECK(gpu_checksum(dhost, 4 * page) == tu_weighted_checksum(host, 4 * page));
    CUDA_OK(cudaMemcpyAsync(dev_buf, host, 4 * page, cudaMemcpyHostToDevice, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    TU_CHECK(gpu_checksum(dev_buf, 4 * page) == tu_weighted_checksum(host, 4 * page));
    CUDA_OK(cudaHostUnregister(host));
    free(host);
}

int main(int argc, char **argv)
{
    if (argc == 6 && strcmp(argv[1], "--write-child") == 0) {
        /* No exit handlers: the runtime's own would tear down a context the fault ruined. */
        int rc = write_child(argv + 2);
        fflush(NULL);
        _exit(rc);
    }
    int ndev = 0;
    if (ferry_gpu_device_count(&ndev) != FERRY_OK) {
        TU_RUN(test_no_device);
        printf("no CUDA device: the calls return FERRY_ENODEV; skipped\n");
        return TU_SKIP;
    }
    struct cudaDeviceProp prop;
    CUDA_OK(cudaGetDeviceProperties(&prop, DEV));
    printf("device %d: %s, integrated %d, canUseHostPointerForRegisteredMem %d\n", DEV, prop.name,
           prop.integrated, prop.canUseHostPointerForRegisteredMem);
    warm_up();
    TU_RUN(test_in_place_and_copy);
    /* Under compute-sanitizer the deliberate fault would be reported as an error. */
    if (!getenv("FERRY_GPU_NO_DELIBERATE_FAULTS"))
        TU_RUN(test_write_faults);
    TU_RUN(test_publisher_dies);
    TU_RUN(test_destroy_undoes);
    TU_RUN(test_errors);
    CUDA_OK(cudaFree(dev_buf));
    CUDA_OK(cudaStreamDestroy(stream));
    host_test_kernels_done();
    return 0;
}
