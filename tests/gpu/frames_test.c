/*
 * Device frames across processes. Every GPU role runs in a process of its own, started with
 * fork + exec of this program (CUDA does not survive fork), and reports through pipes and its
 * exit status. Scenarios:
 *   two_readers (VMM, then LEGACY): a publisher fills 1280x720x3 frames with a kernel (pattern of
 *     the sequence number) at ~100 Hz; two readers checksum every frame on the GPU against the
 *     pattern; the second frame of a chunk imports nothing; a VMM import is read-only (access
 *     flags, and a writer process whose write kernel must fault).
 *   slow_reader: readers spin 50 ms in the checking kernel and release the frame before it ran,
 *     while the publisher loans and publishes as fast as it can with a fill kernel that takes
 *     2 ms: no reader sees a frame other than the one published with its sequence.
 *   reader_killed: a reader holding frames is SIGKILLed; the publisher's chunks come back and
 *     the other reader keeps receiving.
 *   publisher_destroyed (VMM): readers hold frames while the publisher destroys everything and
 *     exits; the held frames still checksum right, then are released.
 * Without a device: the constructors return FERRY_ENODEV, then the test exits 77 (skipped).
 */
#include "gpu_testutil.h"
#include "testutil.h"

#include "core/core.h"
#include "gpu/frames_internal.h"
#include <ferry/gpu.h>

#include <cuda.h> /* types only */
#include <cuda_runtime.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TYPE "test/gpu_frame"
#define HASH 0x6770756672616d65ULL
#define TOPIC "/gpu/frames"
#define FRAME ((size_t)2764800) /* 1280 x 720 x 3 */
#define DEV 0

typedef struct frames_result {
    unsigned long long sum, expect, mismatches;
} frames_result;

/* frames_kernels.cu: cudaError_t values as int; asynchronous on stream. */
int frames_fill(void *dst, size_t bytes, uint64_t seq, uint64_t spin_ns, void *stream);
int frames_check(const void *src, size_t bytes, uint64_t seq, uint64_t spin_ns, void *dev_result,
                 void *stream);
int frames_write(const void *dst, void *stream);

enum { MSG_HOLDING = 1, MSG_GO = 2, MSG_DESTROYED = 3, MSG_NOTSUP = 1000 };

static const char *ipc_name(ferry_gpu_ipc ipc)
{
    return ipc == FERRY_GPU_IPC_VMM ? "VMM" : ipc == FERRY_GPU_IPC_LEGACY ? "LEGACY" : "AUTO";
}

static int64_t now_ns(void)
{
    return ferry_now().ns;
}

/* ---- roles (each in an exec'd process) ------------------------------------------------------ */

typedef struct role_env {
    const char *dir;
    uint32_t domain;
    ferry_node *node;
} role_env;

static void role_node(role_env *e, const char *name)
{
    ferry_node_options o;
    ferry_node_options_init(&o);
    o.dir = e->dir;
    o.domain = e->domain;
    o.name = name;
    TU_OK(ferry_node_create(&e->node, &o));
}

/* pub DIR DOMAIN IPC MODE NSUBS PERIOD_US FILL_SPIN_US MIN_FRAMES EXPECT_LOST CTL_R CTL_W
 * MODE "stream": publish until MIN_FRAMES are out and every subscriber left.
 * MODE "destroy": publish MIN_FRAMES, wait for GO, destroy everything, report, exit. */
static int role_pub(role_env *e, char **a)
{
    ferry_gpu_ipc want = (ferry_gpu_ipc)atoi(a[0]);
    const char *mode = a[1];
    uint32_t nsubs = (uint32_t)atoi(a[2]);
    int64_t period = atoll(a[3]) * 1000;
    uint64_t fill_spin = (uint64_t)atoll(a[4]) * 1000;
    uint64_t min_frames = (uint64_t)atoll(a[5]);
    bool expect_lost = atoi(a[6]) != 0;
    tu_pipe ctl = {atoi(a[7]), atoi(a[8])};

    role_node(e, "gpu_pub");
    ferry_publisher_options po;
    ferry_publisher_options_init(&po);
    po.max_chunks = 48; /* bounds the device memory: 48 frames */
    ferry_publisher *pub;
    TU_OK(ferry_publisher_create(&pub, e->node, TOPIC, TYPE, HASH, &po));
    ferry_gpu_publisher_options go;
    ferry_gpu_publisher_options_init(&go);
    go.device = DEV;
    go.ipc = want;
    ferry_gpu_publisher *gp;
    ferry_err err = ferry_gpu_publisher_create(&gp, pub, &go);
    if (err == FERRY_ENOTSUP) {
        tu_send(&ctl, MSG_NOTSUP);
        TU_OK(ferry_publisher_destroy(pub));
        TU_OK(ferry_node_destroy(e->node));
        return 0;
    }
    TU_OK(err);
    ferry_gpu_ipc ipc;
    TU_OK(ferry_gpu_publisher_ipc(gp, &ipc));
    tu_send(&ctl, (uint64_t)ipc);
    cudaStream_t stream;
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

    /* Flat out, the CPU would queue seconds of fills ahead of the GPU; a window of 8 frames
     * keeps readers taking frames whose fill is still running, without that backlog. */
    cudaEvent_t window[8];
    for (int i = 0; i < 8; i++)
        CUDA_OK(cudaEventCreateWithFlags(&window[i], cudaEventDisableTiming));
    TU_OK(ferry_publisher_wait_subscribers(pub, nsubs, 60 * TU_SEC));
    uint64_t published = 0, pool_waits = 0;
    int64_t deadline = now_ns() + 60 * TU_SEC, next = now_ns();
    ferry_publisher_stats st;
    for (;;) {
        TU_OK(ferry_publisher_stats_get(pub, &st));
        if (published >= min_frames && (strcmp(mode, "destroy") == 0 || st.subscribers == 0))
            break;
        TU_CHECK_MSG(now_ns() < deadline, "publisher: readers did not finish (%u left)",
                     st.subscribers);
        if (period) {
            int64_t left = next - now_ns();
            if (left > 0)
                tu_sleep_ns(left);
            next += period;
        }
        CUDA_OK(cudaEventSynchronize(window[published % 8]));
        void *dptr;
        err = ferry_gpu_loan(gp, FRAME, stream, &dptr);
        if (err == FERRY_EPOOL) { /* every chunk is held: the readers are slow */
            pool_waits++;
            ferry_publisher_poll(pub, TU_MS);
            continue;
        }
        TU_OK(err);
        uint64_t seq = st.published + 1; /* the sample's sequence number */
        CUDA_OK(frames_fill(dptr, FRAME, seq, fill_spin, stream));
        TU_OK(ferry_gpu_publish(gp, dptr, stream));
        CUDA_OK(cudaEventRecord(window[published % 8], stream));
        published++;
    }
    ferry_gpu_publisher_stats gst;
    TU_OK(ferry_gpu_publisher_stats_get(gp, &gst));
    printf("publisher (%s): %llu frames, %llu device chunks exported, %llu reuse waits on the "
           "GPU, %llu pool waits\n",
           ipc_name(ipc), (unsigned long long)published, (unsigned long long)gst.exports,
           (unsigned long long)gst.reuse_waits, (unsigned long long)pool_waits);
    TU_CMP_U64(gst.exports, <=, po.max_chunks);
    for (int i = 0; i < 8; i++)
        CUDA_OK(cudaEventDestroy(window[i]));
    if (strcmp(mode, "destroy") == 0) {
        TU_EQ_U64(tu_recv(&ctl, 60000), MSG_GO);
        TU_OK(ferry_gpu_publisher_destroy(gp));
        TU_OK(ferry_publisher_destroy(pub));
        CUDA_OK(cudaStreamDestroy(stream));
        TU_OK(ferry_node_destroy(e->node));
        tu_send(&ctl, MSG_DESTROYED);
        return 0;
    }
    /* Every reference came back, from the readers that left and from any that died. */
    TU_OK(ferry_publisher_stats_get(pub, &st));
    printf("publisher: subscribers lost %llu, chunks reclaimed %llu, chunks in use %u\n",
           (unsigned long long)st.subscribers_lost, (unsigned long long)st.chunks_reclaimed,
           st.chunks_in_use);
    TU_EQ_U64(st.chunks_in_use, 0);
    TU_EQ_U64(st.chunks_loaned, 0);
    if (expect_lost) {
        TU_CMP_U64(st.subscribers_lost, >=, 1);
        TU_CMP_U64(st.chunks_reclaimed, >=, 3);
    }
    TU_OK(ferry_gpu_publisher_destroy(gp));
    TU_OK(ferry_publisher_destroy(pub));
    CUDA_OK(cudaStreamDestroy(stream));
    TU_OK(ferry_node_destroy(e->node));
    return 0;
}

typedef struct reader {
    ferry_subscriber *sub;
    ferry_gpu_subscriber *gs;
    cudaStream_t stream;
    frames_result *dres, *hres;
} reader;

static void reader_open(role_env *e, reader *r, uint32_t max_held)
{
    role_node(e, "gpu_reader");
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = 4;
    so.max_held = max_held;
    TU_OK(ferry_subscriber_create(&r->sub, e->node, TOPIC, TYPE, HASH, &so));
    ferry_gpu_subscriber_options go;
    ferry_gpu_subscriber_options_init(&go);
    go.device = DEV;
    TU_OK(ferry_gpu_subscriber_create(&r->gs, r->sub, &go));
    CUDA_OK(cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking));
    CUDA_OK(cudaMalloc((void **)&r->dres, sizeof *r->dres));
    CUDA_OK(cudaMallocHost((void **)&r->hres, sizeof *r->hres));
    TU_OK(ferry_subscriber_wait_publishers(r->sub, 1, 60 * TU_SEC));
}

static void reader_close(role_env *e, reader *r)
{
    TU_OK(ferry_gpu_subscriber_destroy(r->gs));
    CUDA_OK(cudaFree(r->dres));
    CUDA_OK(cudaFreeHost(r->hres));
    CUDA_OK(cudaStreamDestroy(r->stream));
    TU_OK(ferry_subscriber_destroy(r->sub));
    TU_OK(ferry_node_destroy(e->node));
}

static void reader_take(reader *r, ferry_gpu_frame *f)
{
    int64_t deadline = now_ns() + 30 * TU_SEC;
    for (;;) {
        ferry_err err = ferry_gpu_take(r->gs, r->stream, f);
        if (err == FERRY_OK)
            return;
        TU_ERR(err, FERRY_EAGAIN);
        TU_CHECK_MSG(now_ns() < deadline, "reader: no frame for 30 s");
        ferry_err w = ferry_wait(r->sub, 20 * TU_MS);
        TU_CHECK_MSG(w == FERRY_OK || w == FERRY_ETIMEDOUT || w == FERRY_EAGAIN, "ferry_wait: %s",
                     ferry_strerror(w));
        TU_OK(ferry_gpu_subscriber_poll(r->gs));
    }
}

static ferry_gpu_ipc frame_ipc(const ferry_gpu_frame *f)
{
    const ferry__gpu_frame_desc *d = f->host.data;
    return (ferry_gpu_ipc)d->ipc;
}

static ferry_gpu_subscriber_stats reader_stats(reader *r)
{
    ferry_gpu_subscriber_stats st;
    TU_OK(ferry_gpu_subscriber_stats_get(r->gs, &st));
    return st;
}

/* Whether dptr lies in memory mapped in this process, through the driver. */
static bool device_mapped(const void *dptr)
{
    typedef CUresult (*get_range_fn)(CUdeviceptr *, size_t *, CUdeviceptr);
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q;
    CUDA_OK(cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault,
                                             &q));
    TU_CHECK(q == cudaDriverEntryPointSuccess && fn);
    get_range_fn get;
    memcpy(&get, &fn, sizeof fn);
    CUdeviceptr base = 0;
    size_t size = 0;
    return get(&base, &size, (CUdeviceptr)(uintptr_t)dptr) == CUDA_SUCCESS;
}

/* Access flags of this device on an imported frame (VMM), through the driver. */
static unsigned long long access_flags(const void *dptr)
{
    typedef CUresult (*get_access_fn)(unsigned long long *, const CUmemLocation *, CUdeviceptr);
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q;
    CUDA_OK(cudaGetDriverEntryPointByVersion("cuMemGetAccess", &fn, 12000, cudaEnableDefault, &q));
    TU_CHECK(q == cudaDriverEntryPointSuccess && fn);
    get_access_fn get;
    memcpy(&get, &fn, sizeof fn);
    CUmemLocation loc;
    memset(&loc, 0, sizeof loc);
    loc.type = CU_MEM_LOCATION_TYPE_DEVICE;
    loc.id = DEV;
    unsigned long long flags = 0;
    CUresult res = get(&flags, &loc, (CUdeviceptr)(uintptr_t)dptr);
    TU_CHECK_MSG(res == CUDA_SUCCESS, "cuMemGetAccess: %d", (int)res);
    return flags;
}

/* reader DIR DOMAIN FRAMES CHECK_SPIN_US: takes FRAMES frames, checks each on the GPU. */
static int role_reader(role_env *e, char **a)
{
    uint64_t frames = (uint64_t)atoll(a[0]);
    uint64_t spin = (uint64_t)atoll(a[1]) * 1000;
    reader r;
    reader_open(e, &r, 8);
    uint8_t seen[4096];
    memset(seen, 0, sizeof seen);
    uint64_t bad = 0, cached = 0, last_seq = 0, distinct = 0;
    const void *imported[sizeof seen]; /* each chunk's frame address, at its import */
    ferry_gpu_subscriber_stats c0 = reader_stats(&r), c1;
    ferry_gpu_ipc ipc = FERRY_GPU_IPC_AUTO;
    int64_t first_import_ns = 0, worst_cached_take_ns = 0;
    for (uint64_t n = 0; n < frames; n++) {
        ferry_gpu_frame f;
        ferry_gpu_subscriber_stats before = reader_stats(&r);
        int64_t t0 = now_ns();
        reader_take(&r, &f);
        int64_t took = now_ns() - t0;
        ferry_gpu_subscriber_stats after = reader_stats(&r);
        TU_EQ_U64(f.size, FRAME);
        TU_CMP_U64(f.sequence, >, last_seq);
        last_seq = f.sequence;
        ferry__sample_where w;
        TU_OK(ferry__sample_where_get(r.sub, &f.host, &w));
        TU_CHECK(w.chunk < sizeof seen);
        if (seen[w.chunk]) {
            /* The second frame of a chunk: a lookup, no import. */
            TU_EQ_U64(after.imports, before.imports);
            cached++;
            if (took > worst_cached_take_ns)
                worst_cached_take_ns = took;
        } else {
            seen[w.chunk] = 1;
            imported[distinct++] = f.device_ptr;
            TU_EQ_U64(after.imports, before.imports + 1);
            if (!first_import_ns)
                first_import_ns = took;
        }
        if (n == 0) {
            ipc = frame_ipc(&f);
            if (ipc == FERRY_GPU_IPC_VMM) {
                unsigned long long fl = access_flags(f.device_ptr);
                TU_CHECK_MSG(fl == CU_MEM_ACCESS_FLAGS_PROT_READ,
                             "the imported frame is not read-only: access flags %llu "
                             "(read-only fallbacks %llu)",
                             fl, (unsigned long long)after.readonly_fallbacks);
            }
        }
        CUDA_OK(frames_check(f.device_ptr, f.size, f.sequence, spin, r.dres, r.stream));
        /* Released before the check ran: it takes effect when the check completed. */
        TU_OK(ferry_gpu_frame_release(r.gs, &f, r.stream));
        TU_ERR(ferry_gpu_frame_release(r.gs, &f, r.stream), FERRY_ESTATE);
        CUDA_OK(cudaMemcpyAsync(r.hres, r.dres, sizeof *r.hres, cudaMemcpyDeviceToHost, r.stream));
        CUDA_OK(cudaStreamSynchronize(r.stream));
        if (r.hres->mismatches || r.hres->sum != r.hres->expect) {
            if (bad < 5)
                fprintf(stderr,
                        "reader %d: frame %llu: %llu words differ, checksum %llu, "
                        "expected %llu\n",
                        (int)getpid(), (unsigned long long)f.sequence, r.hres->mismatches,
                        r.hres->sum, r.hres->expect);
            bad++;
        }
    }
    c1 = reader_stats(&r);
    printf("reader %d (%s): %llu frames checked, %llu bad, %llu chunks imported, %llu frames "
           "served from the import cache; first take with import %.1f us, slowest cached take "
           "%.1f us\n",
           (int)getpid(), ipc_name(ipc), (unsigned long long)frames, (unsigned long long)bad,
           (unsigned long long)(c1.imports - c0.imports), (unsigned long long)cached,
           (double)first_import_ns / 1e3, (double)worst_cached_take_ns / 1e3);
    TU_EQ_U64(bad, 0);
    TU_EQ_U64(c1.imports - c0.imports, distinct);
    for (uint64_t i = 0; i < distinct; i++)
        TU_CHECK_MSG(device_mapped(imported[i]), "import %llu is not mapped",
                     (unsigned long long)i);
    reader_close(e, &r);
    /* Destroy undid every import: none of the imported allocations is mapped any more. */
    uint64_t unmapped = 0;
    for (uint64_t i = 0; i < distinct; i++)
        unmapped += !device_mapped(imported[i]);
    TU_EQ_U64(unmapped, c1.imports);
    return 0;
}

/* holder DIR DOMAIN K CTL_R CTL_W: takes K frames and keeps them; reports HOLDING; on GO
 * checks them (the publisher may be gone by then), releases them and leaves. */
static int role_holder(role_env *e, char **a)
{
    uint32_t k = (uint32_t)atoi(a[0]);
    tu_pipe ctl = {atoi(a[1]), atoi(a[2])};
    reader r;
    reader_open(e, &r, 8);
    ferry_gpu_frame f[8];
    TU_CHECK(k <= 8);
    for (uint32_t i = 0; i < k; i++)
        reader_take(&r, &f[i]);
    CUDA_OK(cudaStreamSynchronize(r.stream)); /* the frames are ready */
    tu_send(&ctl, MSG_HOLDING);
    TU_EQ_U64(tu_recv(&ctl, 60000), MSG_GO);
    TU_ERR(ferry_gpu_subscriber_destroy(r.gs), FERRY_EBUSY);
    for (uint32_t i = 0; i < k; i++) {
        CUDA_OK(frames_check(f[i].device_ptr, f[i].size, f[i].sequence, 0, r.dres, r.stream));
        TU_OK(ferry_gpu_frame_release(r.gs, &f[i], r.stream));
        CUDA_OK(cudaMemcpyAsync(r.hres, r.dres, sizeof *r.hres, cudaMemcpyDeviceToHost, r.stream));
        CUDA_OK(cudaStreamSynchronize(r.stream));
        TU_CHECK_MSG(r.hres->mismatches == 0 && r.hres->sum == r.hres->expect,
                     "held frame %llu after the publisher left: %llu words differ",
                     (unsigned long long)f[i].sequence, r.hres->mismatches);
    }
    printf("holder %d: %u held frames intact after the publisher's destroy\n", (int)getpid(), k);
    reader_close(e, &r);
    return 0;
}

/* writer DIR DOMAIN: takes a frame and writes to it from a kernel; the write must fault. */
static int role_writer(role_env *e, char **a)
{
    (void)a;
    reader r;
    reader_open(e, &r, 8);
    ferry_gpu_frame f;
    reader_take(&r, &f);
    CUDA_OK(cudaStreamSynchronize(r.stream));
    cudaError_t launch = (cudaError_t)frames_write(f.device_ptr, r.stream);
    cudaError_t done = cudaStreamSynchronize(r.stream);
    printf("writer %d: write kernel through the frame pointer: launch %s, completion %s\n",
           (int)getpid(), cudaGetErrorName(launch), cudaGetErrorName(done));
    fflush(stdout);
    /* A faulted context cannot be torn down cleanly: leave at once; the socket's hang-up gives
     * the frame back. */
    _exit(launch == cudaSuccess && done == cudaSuccess ? 1 : 0);
}

/* The path report: at creation the publisher and the subscriber say, in their node's log, how
 * device frames travel and whether MPS is on, as ferry_gpu_mps_enabled tells. */
static char path_log[2048];
static void collect_log(void *arg, ferry_log_level level, const char *message)
{
    (void)arg;
    (void)level;
    size_t n = strlen(path_log);
    snprintf(path_log + n, sizeof path_log - n, "%s\n", message);
}

typedef struct path_notes {
    char pub[FERRY_ENDPOINT_NOTE_MAX + 1], sub[FERRY_ENDPOINT_NOTE_MAX + 1];
} path_notes;

static bool path_note_cb(void *arg, const ferry_endpoint_info *info)
{
    path_notes *n = arg;
    memcpy(info->kind == FERRY_ENDPOINT_PUBLISHER ? n->pub : n->sub, info->note, sizeof info->note);
    return true;
}

/* path DIR DOMAIN: in a process of its own, as CUDA's descriptors must not count against the
 * test's. Exit 0 when every check held. */
static int role_path(role_env *e)
{
    bool mps = true;
    TU_ERR(ferry_gpu_mps_enabled(DEV, NULL), FERRY_EINVAL);
    TU_ERR(ferry_gpu_mps_enabled(-1, &mps), FERRY_ENODEV);
    TU_ERR(ferry_gpu_mps_enabled(1 << 20, &mps), FERRY_ENODEV);
    TU_OK(ferry_gpu_mps_enabled(DEV, &mps));
    ferry_node_options no;
    ferry_node_options_init(&no);
    no.dir = e->dir;
    no.domain = e->domain;
    no.name = "gpu_path";
    no.log = collect_log;
    no.log_level = FERRY_LOG_INFO;
    ferry_node *node;
    TU_OK(ferry_node_create(&node, &no));
    ferry_publisher *pub;
    ferry_subscriber *sub;
    TU_OK(ferry_publisher_create(&pub, node, TOPIC, TYPE, HASH, NULL));
    TU_OK(ferry_subscriber_create(&sub, node, TOPIC, TYPE, HASH, NULL));
    path_log[0] = '\0';
    ferry_gpu_publisher *gp;
    ferry_gpu_subscriber *gs;
    TU_OK(ferry_gpu_publisher_create(&gp, pub, NULL));
    TU_OK(ferry_gpu_subscriber_create(&gs, sub, NULL));
    ferry_gpu_ipc ipc;
    TU_OK(ferry_gpu_publisher_ipc(gp, &ipc));
    printf("  %s", path_log);
    TU_CHECK(strstr(path_log, ipc == FERRY_GPU_IPC_VMM ? "by VMM allocations"
                                                       : "by legacy CUDA IPC handles") != NULL);
    TU_CHECK(strstr(path_log, TOPIC ": device frames on device 0") != NULL);
    TU_CHECK(strstr(path_log, TOPIC ": device frames into device 0") != NULL);
    TU_CHECK(strstr(path_log, mps ? "MPS on" : "MPS off") != NULL);
    TU_CHECK(strstr(path_log, mps ? "MPS off" : "MPS on") == NULL);
    /* The same report in what ferry_inspect (ferry info) shows. */
    path_notes notes = {{0}, {0}};
    TU_OK(ferry_inspect(e->dir, e->domain, TOPIC, path_note_cb, &notes));
    printf("  notes: %s | %s\n", notes.pub, notes.sub);
    TU_CHECK(strncmp(notes.pub, "device frames on device 0 by ", 29) == 0);
    TU_CHECK(strstr(path_log, notes.pub) != NULL);
    TU_CHECK(strncmp(notes.sub, "device frames into device 0; MPS ", 33) == 0);
    TU_CHECK(strstr(path_log, notes.sub) != NULL);
    TU_OK(ferry_gpu_subscriber_destroy(gs));
    TU_OK(ferry_gpu_publisher_destroy(gp));
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
    return 0;
}

static int run_role(int argc, char **argv)
{
    /* argv: --role NAME DIR DOMAIN args... */
    TU_CHECK(argc >= 5);
    role_env e = {argv[3], (uint32_t)atoi(argv[4]), NULL};
    char **a = argv + 5;
    if (strcmp(argv[2], "pub") == 0)
        return role_pub(&e, a);
    if (strcmp(argv[2], "reader") == 0)
        return role_reader(&e, a);
    if (strcmp(argv[2], "holder") == 0)
        return role_holder(&e, a);
    if (strcmp(argv[2], "writer") == 0)
        return role_writer(&e, a);
    if (strcmp(argv[2], "path") == 0)
        return role_path(&e);
    return 2;
}

/* ---- the test's process ------------------------------------------------------------------- */

typedef struct child {
    pid_t pid;
    tu_pipe ctl; /* parent side: r from the child, w to the child; -1 when none */
    const char *what;
} child;

/* Starts this program as ROLE with args (NULL-terminated); with_ctl adds two pipe ends. */
static child spawn(const char *what, const char *role, bool with_ctl, const char *const *args)
{
    child c = {0, {-1, -1}, what};
    int down[2] = {-1, -1}, up[2] = {-1, -1};
    char dbuf[16], rfd[16], wfd[16];
    if (with_ctl) {
        TU_CHECK(pipe2(down, O_CLOEXEC) == 0 && pipe2(up, O_CLOEXEC) == 0);
        snprintf(rfd, sizeof rfd, "%d", down[0]);
        snprintf(wfd, sizeof wfd, "%d", up[1]);
    }
    snprintf(dbuf, sizeof dbuf, "%u", tu_domain());
    const char *argv[32];
    int n = 0;
    argv[n++] = "frames_test";
    argv[n++] = "--role";
    argv[n++] = role;
    argv[n++] = tu_dir();
    argv[n++] = dbuf;
    for (int i = 0; args && args[i]; i++)
        argv[n++] = args[i];
    if (with_ctl) {
        argv[n++] = rfd;
        argv[n++] = wfd;
    }
    argv[n] = NULL;
    fflush(NULL);
    c.pid = fork();
    TU_CHECK_MSG(c.pid >= 0, "fork: %s", strerror(errno));
    if (c.pid == 0) {
        if (with_ctl) { /* the child's ends survive exec */
            fcntl(down[0], F_SETFD, 0);
            fcntl(up[1], F_SETFD, 0);
        }
        alarm(100);
        execv("/proc/self/exe", (char *const *)argv);
        _exit(127);
    }
    if (with_ctl) {
        close(down[0]);
        close(up[1]);
        c.ctl.r = up[0];
        c.ctl.w = down[1];
    }
    return c;
}

static int child_wait(child *c, int timeout_ms)
{
    int status = 0;
    for (int waited = 0;; waited += 10) {
        pid_t got = waitpid(c->pid, &status, WNOHANG);
        if (got == c->pid)
            break;
        if (waited >= timeout_ms) {
            kill(c->pid, SIGKILL);
            waitpid(c->pid, &status, 0);
            TU_FAIL("%s (pid %d) did not finish in %d ms", c->what, (int)c->pid, timeout_ms);
        }
        tu_sleep_ns(10 * TU_MS);
    }
    if (c->ctl.r >= 0)
        close(c->ctl.r);
    if (c->ctl.w >= 0)
        close(c->ctl.w);
    c->ctl.r = c->ctl.w = -1;
    c->pid = 0;
    return status;
}

static void child_ok(child *c)
{
    const char *what = c->what;
    pid_t pid = c->pid;
    int st = child_wait(c, 90000);
    TU_CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s (pid %d) failed: %s %d", what, (int)pid,
                 WIFEXITED(st) ? "exit" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
}

static void kill_all(child *cs, int n)
{
    for (int i = 0; i < n; i++)
        if (cs[i].pid > 0) {
            kill(cs[i].pid, SIGKILL);
            child_wait(&cs[i], 10000);
        }
}

static char numbuf[16][24];
static const char *num(int slot, long long v)
{
    snprintf(numbuf[slot], sizeof numbuf[slot], "%lld", v);
    return numbuf[slot];
}

/* Starts the publisher; false (and the publisher is waited for) when ipc is not supported. */
static bool start_pub(child *pub, ferry_gpu_ipc ipc, const char *mode, int nsubs, int period_us,
                      int fill_spin_us, int min_frames, bool expect_lost)
{
    const char *args[] = {num(0, ipc),          mode,
                          num(1, nsubs),        num(2, period_us),
                          num(3, fill_spin_us), num(4, min_frames),
                          num(5, expect_lost),  NULL};
    *pub = spawn("publisher", "pub", true, args);
    uint64_t got = tu_recv(&pub->ctl, 60000);
    if (got == MSG_NOTSUP) {
        child_ok(pub);
        printf("%s IPC is not supported on this device: skipped\n", ipc_name(ipc));
        return false;
    }
    printf("publisher uses %s IPC\n", ipc_name((ferry_gpu_ipc)got));
    if (ipc != FERRY_GPU_IPC_AUTO)
        TU_EQ_U64(got, ipc);
    return true;
}

static ferry_gpu_ipc scenario_ipc;

static void test_two_readers(void)
{
    child c[4];
    /* Under compute-sanitizer the writer's deliberate fault would be reported as an error, and
     * under MPS it would bring down every client. */
    bool writer = scenario_ipc == FERRY_GPU_IPC_VMM && !getenv("FERRY_GPU_NO_DELIBERATE_FAULTS");
    if (!start_pub(&c[0], scenario_ipc, "stream", writer ? 3 : 2, 10000, 0, 150, false))
        return;
    const char *rargs[] = {"150", "0", NULL};
    c[1] = spawn("reader 1", "reader", false, rargs);
    c[2] = spawn("reader 2", "reader", false, rargs);
    int n = 3;
    if (writer)
        c[n++] = spawn("writer", "writer", false, NULL);
    for (int i = 1; i < n; i++)
        child_ok(&c[i]);
    child_ok(&c[0]);
    kill_all(c, n);
    /* The writer leaves at once after its fault, as a crashed process would: its status file
     * stays for whoever cleans up. */
    uint32_t removed = 0;
    TU_OK(ferry_clean(tu_dir(), tu_domain(), &removed));
    TU_CMP_U64(removed, <=, 1);
}

static void test_two_readers_vmm(void)
{
    scenario_ipc = FERRY_GPU_IPC_VMM;
    test_two_readers();
}

static void test_two_readers_legacy(void)
{
    scenario_ipc = FERRY_GPU_IPC_LEGACY;
    test_two_readers();
}

static void test_slow_reader(void)
{
    child c[3];
    /* As fast as it can, each fill taking 2 ms on the GPU. */
    if (!start_pub(&c[0], FERRY_GPU_IPC_AUTO, "stream", 2, 0, 2000, 100, false))
        return;
    const char *rargs[] = {"30", "50000", NULL};
    c[1] = spawn("slow reader 1", "reader", false, rargs);
    c[2] = spawn("slow reader 2", "reader", false, rargs);
    child_ok(&c[1]);
    child_ok(&c[2]);
    child_ok(&c[0]);
}

static void test_reader_killed(void)
{
    child c[3];
    if (!start_pub(&c[0], FERRY_GPU_IPC_AUTO, "stream", 2, 10000, 0, 100, true))
        return;
    const char *rargs[] = {"200", "0", NULL};
    c[1] = spawn("reader", "reader", false, rargs);
    const char *hargs[] = {"3", NULL};
    c[2] = spawn("holder", "holder", true, hargs);
    TU_EQ_U64(tu_recv(&c[2].ctl, 60000), MSG_HOLDING);
    kill(c[2].pid, SIGKILL);
    int st = child_wait(&c[2], 10000);
    TU_CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    printf("holder SIGKILLed while holding 3 frames\n");
    child_ok(&c[1]); /* kept receiving: 200 frames at 100 Hz outlast the kill */
    child_ok(&c[0]); /* its chunks came back (checked there) */
    uint32_t removed = 0;
    TU_OK(ferry_clean(tu_dir(), tu_domain(), &removed)); /* the killed reader's status file */
}

static void test_publisher_destroyed(void)
{
    child c[3];
    if (!start_pub(&c[0], FERRY_GPU_IPC_VMM, "destroy", 2, 10000, 0, 6, false))
        return;
    const char *hargs[] = {"3", NULL};
    c[1] = spawn("holder 1", "holder", true, hargs);
    c[2] = spawn("holder 2", "holder", true, hargs);
    TU_EQ_U64(tu_recv(&c[1].ctl, 60000), MSG_HOLDING);
    TU_EQ_U64(tu_recv(&c[2].ctl, 60000), MSG_HOLDING);
    tu_send(&c[0].ctl, MSG_GO);
    TU_EQ_U64(tu_recv(&c[0].ctl, 60000), MSG_DESTROYED);
    child_ok(&c[0]); /* the publisher's process is gone too */
    printf("publisher destroyed and exited while readers hold frames\n");
    tu_send(&c[1].ctl, MSG_GO);
    tu_send(&c[2].ctl, MSG_GO);
    child_ok(&c[1]);
    child_ok(&c[2]);
}

/* Without a device: the constructors say so; the other calls need an object that cannot exist,
 * and refuse a NULL one. */
static void test_no_device(void)
{
    ferry_node *node = tu_node("gpu_frames");
    ferry_publisher *pub;
    ferry_subscriber *sub;
    TU_OK(ferry_publisher_create(&pub, node, TOPIC, TYPE, HASH, NULL));
    TU_OK(ferry_subscriber_create(&sub, node, TOPIC, TYPE, HASH, NULL));
    ferry_gpu_publisher *gp = (ferry_gpu_publisher *)1;
    ferry_gpu_subscriber *gs = (ferry_gpu_subscriber *)1;
    ferry_gpu_publisher_options o;
    ferry_gpu_publisher_options_init(&o);
    TU_EQ_U64(o.ipc, FERRY_GPU_IPC_AUTO);
    TU_ERR(ferry_gpu_publisher_create(&gp, pub, &o), FERRY_ENODEV);
    TU_EQ_PTR(gp, NULL);
    TU_ERR(ferry_gpu_publisher_create(&gp, pub, NULL), FERRY_ENODEV);
    o.ipc = FERRY_GPU_IPC_LEGACY;
    TU_ERR(ferry_gpu_publisher_create(&gp, pub, &o), FERRY_ENODEV);
    TU_ERR(ferry_gpu_subscriber_create(&gs, sub, NULL), FERRY_ENODEV);
    TU_EQ_PTR(gs, NULL);
    ferry_gpu_subscriber_options so1;
    ferry_gpu_subscriber_options_init(&so1);
    so1.device = 1;
    TU_ERR(ferry_gpu_subscriber_create(&gs, sub, &so1), FERRY_ENODEV);
    TU_ERR(ferry_gpu_publisher_create(NULL, pub, NULL), FERRY_EINVAL);
    TU_ERR(ferry_gpu_subscriber_create(NULL, sub, NULL), FERRY_EINVAL);
    void *dp = NULL;
    ferry_gpu_frame f;
    memset(&f, 0, sizeof f);
    ferry_gpu_ipc ipc;
    TU_ERR(ferry_gpu_loan(NULL, FRAME, NULL, &dp), FERRY_EINVAL);
    TU_ERR(ferry_gpu_publish(NULL, dp, NULL), FERRY_EINVAL);
    TU_ERR(ferry_gpu_loan_release(NULL, dp), FERRY_EINVAL);
    TU_ERR(ferry_gpu_publisher_ipc(NULL, &ipc), FERRY_EINVAL);
    TU_ERR(ferry_gpu_publisher_destroy(NULL), FERRY_EINVAL);
    TU_ERR(ferry_gpu_take(NULL, NULL, &f), FERRY_EINVAL);
    TU_ERR(ferry_gpu_frame_release(NULL, &f, NULL), FERRY_EINVAL);
    TU_ERR(ferry_gpu_subscriber_poll(NULL), FERRY_EINVAL);
    TU_ERR(ferry_gpu_subscriber_destroy(NULL), FERRY_EINVAL);
    /* The host transport is untouched. */
    ferry_publisher_stats st;
    TU_OK(ferry_publisher_stats_get(pub, &st));
    TU_EQ_U64(st.published, 0);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
}

static void test_path_report(void)
{
    child c = spawn("path report", "path", false, NULL);
    TU_EQ_U64(child_wait(&c, 30000), 0);
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "--role") == 0) {
        int rc = run_role(argc, argv);
        fflush(NULL);
        return rc;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    int ndev = 0;
    if (ferry_gpu_device_count(&ndev) != FERRY_OK) {
        TU_RUN(test_no_device);
        bool mps;
        TU_ERR(ferry_gpu_mps_enabled(0, &mps), FERRY_ENODEV);
        printf("no CUDA device: the calls return FERRY_ENODEV; skipped\n");
        return TU_SKIP;
    }
    struct cudaDeviceProp prop;
    CUDA_OK(cudaGetDeviceProperties(&prop, DEV));
    printf("device %d: %s (%d devices)\n", DEV, prop.name, ndev);
    TU_RUN(test_path_report);
    TU_RUN(test_two_readers_vmm);
    TU_RUN(test_two_readers_legacy);
    TU_RUN(test_slow_reader);
    TU_RUN(test_reader_killed);
    TU_RUN(test_publisher_destroyed);
    return 0;
}
