/*
 * The camera processes of the adapter experiment (adapter.h): 1280x720 RGB8 frames whose body is a
 * fixed pattern with its first words rewritten per frame, so a consumer's checksum tells an intact
 * frame from a stale or overwritten one.
 */
#include "adapter.h"

#include "cli.h"
#include "util.h"
#include <ferry/ferry.h>
#include <ferry/gpu.h>

#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdio.h>
#include <string.h>

static int fail_ferry(const char *what, ferry_err e)
{
    return cli_fail("bench gpu", 1, "adapter: %s: %s", what, ferry_strerror(e));
}

/* ---------------------------------------------------------------------------------------------
 * The frame pattern
 * ------------------------------------------------------------------------------------------- */

uint64_t bench_adapter_fixed_sum(void)
{
    uint64_t sum = 0;
    for (size_t i = SEQ_WORDS; i < BODY_WORDS; i++)
        sum += fixed_word(i);
    return sum;
}

uint64_t bench_adapter_expected(uint64_t fixed_sum, uint64_t seq, uint32_t cam)
{
    uint64_t sum = fixed_sum;
    for (size_t i = 0; i < SEQ_WORDS; i++)
        sum += seq_word(seq, cam, i);
    return sum;
}

static bool pattern_there(const uint32_t *w)
{
    return w[SEQ_WORDS] == fixed_word(SEQ_WORDS) &&
           w[BODY_WORDS / 2] == fixed_word(BODY_WORDS / 2) &&
           w[BODY_WORDS - 1] == fixed_word(BODY_WORDS - 1);
}

int bench_adapter_camera(const char *dir, int cam, bool paced, adapter_ctl *ctl)
{
    char name[32], topic[64];
    snprintf(name, sizeof name, "adapter-cam%d", cam);
    snprintf(topic, sizeof topic, "/bench/gpu/adapter/cam%d", cam);
    ferry_node_options no;
    ferry_node_options_init(&no);
    no.dir = dir;
    no.name = name;
    ferry_node *node = NULL;
    ferry_err err = ferry_node_create(&node, &no);
    if (err)
        return fail_ferry("camera node", err);
    ferry_publisher_options po;
    ferry_publisher_options_init(&po);
    po.admit_blocking = true; /* its subscribers ask to block it */
    po.max_sample_size = FRAME_BYTES;
    po.max_chunks = PUB_CHUNKS;
    po.pool_bytes = (size_t)PUB_CHUNKS * (FRAME_BYTES + ((size_t)1 << 20));
    po.on_pool_exhausted = FERRY_POOL_BLOCK;
    po.block_timeout_ns = 100 * 1000000;
    ferry_publisher *pub = NULL;
    err = ferry_publisher_create(&pub, node, topic, FRAME_TYPE, ferry_hash(FRAME_TYPE), &po);
    if (err) {
        ferry_node_destroy(node);
        return fail_ferry("camera publisher", err);
    }
    int rc = 0;
    int64_t deadline = cli_now_ns() + CONNECT_NS;
    while ((err = ferry_publisher_wait_subscribers(pub, 1, 100 * 1000000)) == FERRY_ETIMEDOUT &&
           !atomic_load_explicit(&ctl->stop, memory_order_relaxed) && cli_now_ns() < deadline) {
    }
    if (err) {
        if (!atomic_load_explicit(&ctl->stop, memory_order_relaxed))
            rc = fail_ferry("camera waiting for the consumer", err);
        goto out;
    }

    void *seen[SEEN_MAX];
    int nseen = 0;
    const int64_t period = 1000000000 / FPS;
    int64_t next = cli_now_ns() + (int64_t)cam * period / CAMERAS;
    uint64_t seq = 0;
    while (!atomic_load_explicit(&ctl->stop, memory_order_relaxed)) {
        if (paced) {
            cli_sleep_until(next);
            next += period;
            int64_t now = cli_now_ns();
            if (next < now)
                next = now; /* late: no burst to catch up */
        }
        void *p = NULL;
        err = ferry_loan(pub, FRAME_BYTES, &p);
        if (err == FERRY_ETIMEDOUT || err == FERRY_EPOOL)
            continue;
        if (err) {
            rc = fail_ferry("camera loan", err);
            break;
        }
        uint32_t *w = (uint32_t *)((char *)p + HEADER_BYTES);
        bool known = false;
        for (int i = 0; i < nseen && !known; i++)
            known = seen[i] == p;
        if (!known || !pattern_there(w)) {
            for (size_t i = SEQ_WORDS; i < BODY_WORDS; i++)
                w[i] = fixed_word(i);
            if (!known && nseen < SEEN_MAX)
                seen[nseen++] = p;
        }
        seq++;
        for (size_t i = 0; i < SEQ_WORDS; i++)
            w[i] = seq_word(seq, (uint32_t)cam, i);
        frame_header h = {
            .magic = FRAME_MAGIC, .seq = seq, .send_ns = cli_now_ns(), .camera = (uint32_t)cam};
        memcpy(p, &h, sizeof h);
        do {
            err = ferry_publish(pub, p, 0);
        } while (err == FERRY_ETIMEDOUT && !atomic_load_explicit(&ctl->stop, memory_order_relaxed));
        if (err) {
            ferry_loan_release(pub, p);
            if (err != FERRY_ETIMEDOUT)
                rc = fail_ferry("camera publish", err);
            break;
        }
    }
out:
    ferry_publisher_destroy(pub);
    ferry_node_destroy(node);
    if (rc)
        atomic_store(&ctl->failed, 1);
    return rc;
}

int bench_adapter_spawn_camera(const char *dir, int cam, bool paced, adapter_ctl *ctl)
{
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return cli_fail("bench gpu", -1, "adapter: fork: %s", strerror(errno));
    if (pid == 0) {
        cli_child_setup(parent);
        int rc = bench_adapter_camera(dir, cam, paced, ctl);
        fflush(NULL);
        _exit(rc ? 1 : 0);
    }
    return pid;
}

int bench_adapter_cache(struct ferry_gpu_cache **out, int device, int backend, uint64_t threshold,
                        uint32_t max_live)
{
    ferry_gpu_cache_options o;
    ferry_gpu_cache_options_init(&o);
    o.device = device;
    o.backend = (ferry_gpu_backend)backend;
    o.own_pool = true;
    o.release_threshold = threshold;
    o.max_live = max_live;
    o.live_wait_ns = 1000000000;
    ferry_err err = ferry_gpu_cache_create(out, &o);
    return err ? fail_ferry("cache create", err) : 0;
}

int bench_adapter_reap(int pid, int64_t timeout_ns, const char *what)
{
    int64_t deadline = cli_now_ns() + timeout_ns;
    int status = 0;
    pid_t r;
    while ((r = waitpid(pid, &status, WNOHANG)) == 0 && cli_now_ns() < deadline)
        usleep(1000);
    if (r == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        fprintf(stderr, "ferry bench gpu: adapter: %s did not stop\n", what);
        return -1;
    }
    return r > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 1 : 0;
}
