/*
 * Device tensors (ferry/tensor.h, libferry_gpu): a publisher process (tensor_gpu_pub, its path
 * in argv[1]) publishes float32 [3, 480, 640] device tensors; a subscriber process (this
 * program, re-executed with --sub: CUDA does not survive fork) views each one (dtype, shape,
 * strides, device, stamp, frame_id, data pointer), copies its values back and checks them,
 * exports it as DLPack (plain and versioned in turn) and checks the export's fields; the deleter
 * gives the frame back (held count back to 0 after polling), a second call is ignored, and the
 * subscribers refuse destruction while an export lives.
 * Without a device: the constructors return FERRY_ENODEV, the device view validates metadata
 * without touching a device, and the test exits 77 (skipped).
 */
#include "gpu_testutil.h"
#include "testutil.h"

#include <ferry/gpu.h>
#include <ferry/tensor.h>

#include <cuda_runtime.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define TOPIC "/tensor/device"
#define COUNT 8
#define NELEM ((size_t)3 * 480 * 640)

static const char *pub_path;
static const char *self_path;

/* --- without a device ------------------------------------------------------------------------ */

static void test_view_validation(void)
{
    const int64_t shape[] = {3, 480, 640};
    ferry_tensor_header h;
    TU_OK(ferry_tensor_header_init(&h, FERRY_DTYPE_FLOAT32, 3, shape, NULL));
    h.device.device_type = FERRY_DL_CUDA;
    h.data_offset = 0;
    ferry_gpu_frame f;
    memset(&f, 0, sizeof f);
    ferry_tensor_view v;
    TU_ERR(ferry_tensor_gpu_view_get(&f, &v), FERRY_ESTATE);
    TU_ERR(ferry_tensor_gpu_view_get(NULL, &v), FERRY_EINVAL);
    TU_ERR(ferry_tensor_gpu_view_get(&f, NULL), FERRY_EINVAL);
    f.device_ptr = (const void *)(uintptr_t)0x100000;
    f.size = NELEM * 4;
    f.device = 2;
    TU_ERR(ferry_tensor_gpu_view_get(&f, &v), FERRY_EPROTO); /* no metadata */
    f.meta = &h;
    f.meta_size = sizeof h;
    TU_OK(ferry_tensor_gpu_view_get(&f, &v));
    TU_EQ_PTR(v.data, f.device_ptr);
    TU_EQ_U64(v.device.device_type, FERRY_DL_CUDA);
    TU_EQ_U64(v.device.device_id, 2);
    TU_EQ_U64(v.numel, NELEM);
    f.size = NELEM * 4 - 1; /* the frame is smaller than the tensor */
    TU_ERR(ferry_tensor_gpu_view_get(&f, &v), FERRY_EPROTO);
    f.size = NELEM * 4;
    f.meta_size = sizeof h - 1;
    TU_ERR(ferry_tensor_gpu_view_get(&f, &v), FERRY_EPROTO);
    f.meta_size = sizeof h;
    h.device.device_type = FERRY_DL_CPU; /* a host tensor header in a device frame */
    TU_ERR(ferry_tensor_gpu_view_get(&f, &v), FERRY_EPROTO);
    h.device.device_type = FERRY_DL_CUDA;
    h.magic ^= 1;
    TU_ERR(ferry_tensor_gpu_view_get(&f, &v), FERRY_EPROTO);
}

static void test_no_device(void)
{
    ferry_node *node = tu_node("tensor_gpu");
    ferry_publisher *pub;
    ferry_subscriber *sub;
    TU_OK(ferry_publisher_create(&pub, node, TOPIC, FERRY_TENSOR_TYPE_NAME, FERRY_TENSOR_TYPE_HASH,
                                 NULL));
    TU_OK(ferry_subscriber_create(&sub, node, TOPIC, FERRY_TENSOR_TYPE_NAME, FERRY_TENSOR_TYPE_HASH,
                                  NULL));
    ferry_gpu_publisher *gp = NULL;
    ferry_gpu_subscriber *gs = NULL;
    TU_ERR(ferry_gpu_publisher_create(&gp, pub, NULL), FERRY_ENODEV);
    TU_ERR(ferry_gpu_subscriber_create(&gs, sub, NULL), FERRY_ENODEV);
    const int64_t shape[] = {4};
    int dummy;
    TU_ERR(ferry_tensor_gpu_publish(NULL, &dummy, NULL, FERRY_DTYPE_FLOAT32, 1, shape, NULL, NULL,
                                    NULL),
           FERRY_EINVAL);
    ferry_gpu_frame f;
    memset(&f, 0, sizeof f);
    ferry_dlpack_tensor *dl = NULL;
    ferry_dlpack_tensor_versioned *vdl = NULL;
    TU_ERR(ferry_tensor_gpu_to_dlpack(NULL, &f, NULL, &dl), FERRY_EINVAL);
    TU_ERR(ferry_tensor_gpu_to_dlpack_versioned(NULL, &f, NULL, &vdl), FERRY_EINVAL);
    TU_ERR(ferry_gpu_publish_meta(NULL, &dummy, NULL, NULL, 0), FERRY_EINVAL);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
}

/* --- with a device: the subscriber process --------------------------------------------------- */

static uint32_t held(ferry_subscriber *sub)
{
    ferry_subscriber_stats st;
    TU_OK(ferry_subscriber_stats_get(sub, &st));
    return st.held;
}

/* Frames released to the GPU module go back once their work completed. */
static void wait_released(ferry_gpu_subscriber *gs, ferry_subscriber *sub)
{
    CUDA_OK(cudaDeviceSynchronize());
    ferry_time t0 = ferry_now();
    while (held(sub) != 0) {
        TU_CHECK_MSG(tu_since(t0) < TU_WAIT_NS, "samples still held: %u", held(sub));
        TU_OK(ferry_gpu_subscriber_poll(gs));
        tu_sleep_ns(TU_MS);
    }
}

static void take_frame(ferry_gpu_subscriber *gs, ferry_subscriber *sub, ferry_gpu_frame *f)
{
    for (;;) {
        ferry_err err = ferry_gpu_take(gs, NULL, f);
        if (err == FERRY_OK)
            return;
        TU_ERR(err, FERRY_EAGAIN);
        TU_OK(ferry_wait(sub, 60 * TU_SEC));
    }
}

static void check_dl(const ferry_dl_tensor *t, const void *data)
{
    TU_EQ_PTR(t->data, data);
    TU_EQ_U64(t->device.device_type, FERRY_DL_CUDA);
    TU_EQ_U64(t->device.device_id, 0);
    TU_EQ_U64(t->ndim, 3);
    TU_CHECK(t->dtype.code == FERRY_DL_FLOAT && t->dtype.bits == 32 && t->dtype.lanes == 1);
    TU_CHECK(t->shape[0] == 3 && t->shape[1] == 480 && t->shape[2] == 640);
    TU_CHECK(t->strides[0] == 480 * 640 && t->strides[1] == 640 && t->strides[2] == 1);
    TU_EQ_U64(t->byte_offset, 0);
}

static int sub_role(const char *dir, uint32_t domain)
{
    ferry_node_options no;
    ferry_node_options_init(&no);
    no.name = "tensor_sub";
    no.dir = dir;
    no.domain = domain;
    ferry_node *node;
    TU_OK(ferry_node_create(&node, &no));
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = 4;
    so.overflow = FERRY_OVERFLOW_BLOCK;
    ferry_subscriber *sub;
    TU_OK(ferry_subscriber_create(&sub, node, TOPIC, FERRY_TENSOR_TYPE_NAME, FERRY_TENSOR_TYPE_HASH,
                                  &so));
    ferry_gpu_subscriber *gs;
    TU_OK(ferry_gpu_subscriber_create(&gs, sub, NULL));
    float *host = malloc(NELEM * sizeof(float));
    TU_CHECK(host != NULL);

    for (uint64_t k = 0; k < COUNT; k++) {
        ferry_gpu_frame f;
        take_frame(gs, sub, &f);
        TU_CHECK(f.meta != NULL);
        TU_EQ_U64(f.meta_size, sizeof(ferry_tensor_header));
        ferry_tensor_view v;
        TU_OK(ferry_tensor_gpu_view_get(&f, &v));
        TU_EQ_U64(v.dtype, FERRY_DTYPE_FLOAT32);
        TU_EQ_U64(v.header.ndim, 3);
        TU_EQ_U64(v.numel, NELEM);
        TU_EQ_U64(v.data_size, NELEM * 4);
        TU_EQ_PTR(v.data, f.device_ptr);
        TU_EQ_U64(v.device.device_type, FERRY_DL_CUDA);
        TU_EQ_U64(v.device.device_id, 0);
        TU_EQ_U64(v.header.stamp.sec, k);
        TU_EQ_U64(v.header.stamp.nanosec, k * 1000);
        char id[32];
        snprintf(id, sizeof id, "frame%u", (unsigned)k);
        TU_EQ_STR(v.header.frame_id, id);
        CUDA_OK(cudaMemcpy(host, v.data, NELEM * sizeof(float), cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < NELEM; i++)
            TU_CHECK_MSG(host[i] == (float)(k * 1000 + i % 1000), "tensor %u element %zu: %g",
                         (unsigned)k, i, (double)host[i]);

        const void *data = v.data;
        if (k % 2 == 0) {
            ferry_dlpack_tensor *dl;
            TU_OK(ferry_tensor_gpu_to_dlpack(gs, &f, NULL, &dl));
            TU_CHECK(f.device_ptr == NULL); /* the export owns the frame */
            check_dl(&dl->dl_tensor, data);
            if (k == 0) {
                TU_ERR(ferry_gpu_subscriber_destroy(gs), FERRY_EBUSY);
                TU_ERR(ferry_subscriber_destroy(sub), FERRY_EBUSY);
            }
            dl->deleter(dl);
            wait_released(gs, sub);
            dl->deleter(dl); /* ignored */
        } else {
            ferry_dlpack_tensor_versioned *vdl;
            TU_OK(ferry_tensor_gpu_to_dlpack_versioned(gs, &f, NULL, &vdl));
            TU_EQ_U64(vdl->version.major, 1);
            TU_EQ_U64(vdl->flags, FERRY_DLPACK_FLAG_READ_ONLY);
            check_dl(&vdl->dl_tensor, data);
            vdl->deleter(vdl);
            wait_released(gs, sub);
            vdl->deleter(vdl);
        }
        TU_EQ_U64(held(sub), 0);
        printf("  device tensor %u: view, values, DLPack and release checked\n", (unsigned)k);
    }
    free(host);
    TU_OK(ferry_gpu_subscriber_destroy(gs));
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
    return 0;
}

static pid_t spawn(char *const argv[])
{
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], NULL, NULL, argv, environ);
    TU_CHECK_MSG(rc == 0, "posix_spawn %s: %s", argv[0], strerror(rc));
    return pid;
}

static void expect_exit0(pid_t pid, const char *what)
{
    int st = tu_wait_status(pid, 110 * 1000);
    TU_CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: wait status 0x%x", what, st);
}

static void test_device_tensors(void)
{
    char domain[16], count[16];
    snprintf(domain, sizeof domain, "%u", tu_domain());
    snprintf(count, sizeof count, "%d", COUNT);
    char *sub_argv[] = {(char *)self_path, "--sub", (char *)tu_dir(), domain, NULL};
    char *pub_argv[] = {(char *)pub_path, (char *)tu_dir(), domain, count, TOPIC, "-", NULL};
    pid_t sub = spawn(sub_argv);
    pid_t pub = spawn(pub_argv);
    int st = tu_wait_status(sub, 110 * 1000);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        kill(pub, SIGKILL); /* it would wait for its subscriber */
        waitpid(pub, NULL, 0);
        TU_FAIL("subscriber process: wait status 0x%x", st);
    }
    expect_exit0(pub, "publisher process (tensor_gpu_pub)");
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 4 && strcmp(argv[1], "--sub") == 0)
        return sub_role(argv[2], (uint32_t)strtoul(argv[3], NULL, 10));
    if (argc < 2) {
        fprintf(stderr, "usage: tensor_gpu_test PATH_OF_tensor_gpu_pub\n");
        return 2;
    }
    pub_path = argv[1];
    self_path = "/proc/self/exe";
    TU_RUN(test_view_validation);
    int ndev = 0;
    if (ferry_gpu_device_count(&ndev) != FERRY_OK) {
        TU_RUN(test_no_device);
        printf("no CUDA device: the calls return FERRY_ENODEV; skipped\n");
        return TU_SKIP;
    }
    TU_RUN(test_device_tensors);
    printf("tensor_gpu_test: all passed\n");
    return 0;
}
