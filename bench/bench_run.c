/*
 * The rows of `ferry bench transport`: a row forks; the parent publishes, the child subscribes
 * and sends its results back through a pipe. Rows of transports whose libraries keep state per
 * process run in a forked process of their own, and those that need iceoryx's daemon run below
 * a host process that lives in the private RouDi environment for the whole run.
 */
#include "bench.h"
#include "cli.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NS_PER_S ((int64_t)1000000000)
#define NS_PER_MS ((int64_t)1000000)

#define FLAT_MAX_MESSAGES 4000000u
#define WARMUP_MAX 32u
#define WARMUP_GAP_NS (2 * NS_PER_MS)

/* What the subscriber process sends back through its pipe after its ready byte. */
typedef struct child_result {
    int32_t status;
    uint32_t reserved;
    uint64_t received;
    uint64_t disorder; /* sequences that went backwards */
    int64_t p50_ns, p99_ns, p999_ns, max_ns;
    int64_t cpu_ns; /* whole process, first measured message to the last */
    uint64_t cpu_msgs;
    int64_t call_ns; /* receive and release calls of the timed messages */
    uint64_t call_msgs;
    int64_t last_recv_ns;
    uint64_t sink;
} child_result;

#define READY_OK 'R'
#define READY_FAIL 'F'

/* ---------------------------------------------------------------------------------------------
 * Frames, clocks, CPUs
 * ------------------------------------------------------------------------------------------- */

void bench_fill(void *buf, size_t size, bench_touch touch, uint64_t seq)
{
    unsigned char *p = buf;
    if (size <= sizeof(bench_wire))
        return;
    if (touch == BENCH_TOUCH_FULL || touch == BENCH_TOUCH_CAMERA) {
        memset(p + sizeof(bench_wire), (int)(seq & 0xff), size - sizeof(bench_wire));
    } else if (touch == BENCH_TOUCH_PAGE) {
        /* The header covers the first page. */
        for (size_t off = BENCH_PAGE; off < size; off += BENCH_PAGE)
            p[off] = (unsigned char)seq;
    }
}

uint64_t bench_consume(const void *data, size_t size, bench_touch touch)
{
    const unsigned char *p = data;
    uint64_t sum = 0;
    if (touch == BENCH_TOUCH_FULL) {
        size_t i = 0;
        for (; i + 8 <= size; i += 8) {
            uint64_t w;
            memcpy(&w, p + i, 8);
            sum += w;
        }
        for (; i < size; i++)
            sum += p[i];
    } else if (touch == BENCH_TOUCH_PAGE || touch == BENCH_TOUCH_CAMERA) {
        for (size_t off = BENCH_PAGE; off < size; off += BENCH_PAGE)
            sum += p[off];
    }
    return sum;
}

/* CPU time of the calling thread: what the transport's calls cost on it. */
static int64_t thread_cpu_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return 0;
    return (int64_t)ts.tv_sec * NS_PER_S + ts.tv_nsec;
}

/* Whole-process CPU, user + system, every thread (a peer library's own threads included). */
static int64_t rusage_cpu_ns(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return ((int64_t)ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * NS_PER_S +
           ((int64_t)ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000;
}

/* What two back-to-back reads of the thread CPU clock measure: the probe's own cost. */
static int64_t cpu_probe_cost(void)
{
    int64_t best = INT64_MAX;
    for (int i = 0; i < 64; i++) {
        int64_t a = thread_cpu_ns();
        int64_t d = thread_cpu_ns() - a;
        if (d < best)
            best = d;
    }
    return best;
}

static void pin_to(const bench_plan *plan, int side, const char *name)
{
    if (!plan->pin)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(plan->cpus[side], &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
        fprintf(stderr, "ferry bench: %s: cannot pin to CPU %d: %s\n", name, plan->cpus[side],
                strerror(errno));
}

static int64_t nonneg(int64_t v)
{
    return v > 0 ? v : 0;
}

/* Forks a child joined to this process by a pipe: the child (0 returned) gets the pipe's write
 * end in *fd and dies with us, the parent (the child's pid returned) its read end. -1 after a
 * message. */
static pid_t fork_piped(int *fd)
{
    int fds[2];
    if (pipe(fds) != 0) {
        fprintf(stderr, "ferry bench: pipe: %s\n", strerror(errno));
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "ferry bench: fork: %s\n", strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        cli_child_setup(parent);
        close(fds[0]);
        *fd = fds[1];
        return 0;
    }
    close(fds[1]);
    *fd = fds[0];
    return pid;
}

static void reap(pid_t pid)
{
    int wstatus;
    while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
    }
}

/* ---------------------------------------------------------------------------------------------
 * One row: fork, the child subscribes, the parent publishes
 * ------------------------------------------------------------------------------------------- */

typedef struct row_ctx {
    const bench_plan *plan;
    const bench_entry *e;
    const bench_transport *t;
    void *st;
    int mode;
    bench_touch touch;
    uint64_t capacity;
} row_ctx;

static const char *const mode_names[BENCH_MODE_COUNT] = {"paced", "flat", "flood"};

static int child_main(const row_ctx *c, int fd)
{
    const bench_transport *t = c->t;
    void *st = c->st;
    char ready = READY_OK;
    child_result res = {0};
    cli_lat lat;
    pin_to(c->plan, 1, c->e->name);
    if (!cli_lat_init(&lat, c->capacity) || t->sub_open(st) != 0) {
        t->sub_close(st);
        ready = READY_FAIL;
        cli_write_full(fd, &ready, 1);
        return 1;
    }
    if (cli_write_full(fd, &ready, 1) != 0)
        return 1;

    /* Paced, the calls of every message are timed. Flat out they are not: the process does
     * nothing else, and a clock read (a system call) around each call would perturb it. */
    bool timed = c->mode == BENCH_MODE_PACED;
    int64_t probe = cpu_probe_cost();
    int64_t timeout = 15 * NS_PER_S;
    uint64_t last_seq = 0;
    int64_t cpu0 = 0;
    for (;;) {
        const void *data;
        size_t size;
        int64_t recv_ns;
        int64_t c0 = timed ? thread_cpu_ns() : 0;
        int rc = t->sub_recv(st, &data, &size, &recv_ns, timeout);
        int64_t c1 = timed ? thread_cpu_ns() : 0;
        if (rc != 0) {
            if (rc == 1)
                fprintf(stderr, "ferry bench: %s %s: no message for %.0f s (%llu received)\n",
                        c->e->name, mode_names[c->mode], (double)timeout / NS_PER_S,
                        (unsigned long long)res.received);
            res.status = -1;
            break;
        }
        bench_wire w;
        if (size < sizeof w) {
            fprintf(stderr, "ferry bench: %s: message of %zu bytes\n", c->e->name, size);
            res.status = -1;
            break;
        }
        memcpy(&w, data, sizeof w);
        res.sink += bench_consume(data, size, c->touch);
        int64_t c2 = timed ? thread_cpu_ns() : 0;
        if (t->sub_done && t->sub_done(st) != 0) {
            res.status = -1;
            break;
        }
        timeout = 3 * NS_PER_S;
        if (w.seq <= last_seq)
            res.disorder++;
        last_seq = w.seq;
        if (w.flags & BENCH_F_WARMUP)
            continue;
        if (timed && res.received > 0) {
            res.call_ns += nonneg(c1 - c0 - probe) + nonneg(thread_cpu_ns() - c2 - probe);
            res.call_msgs++;
        }
        cli_lat_add(&lat, recv_ns - w.send_ns);
        res.received++;
        res.last_recv_ns = recv_ns;
        /* The CPU window opens after the first measured message, so warm-up is left out. */
        if (res.received == 1)
            cpu0 = rusage_cpu_ns();
        if (w.flags & BENCH_F_END) {
            res.cpu_ns = rusage_cpu_ns() - cpu0;
            res.cpu_msgs = res.received - 1;
            break;
        }
    }
    t->sub_close(st);
    res.p50_ns = cli_lat_pct(&lat, 50.0);
    res.p99_ns = cli_lat_pct(&lat, 99.0);
    res.p999_ns = cli_lat_pct(&lat, 99.9);
    res.max_ns = cli_lat_max(&lat);
    cli_lat_free(&lat);
    if (cli_write_full(fd, &res, sizeof res) != 0)
        return 1;
    return res.status == 0 ? 0 : 1;
}

/* Waits for n bytes from the child, running the publisher's housekeeping meanwhile. */
static int parent_wait(const bench_transport *t, void *st, int fd, void *buf, size_t n,
                       int64_t deadline)
{
    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int r = poll(&pfd, 1, t->pub_idle ? 0 : 10);
        if (r > 0)
            return cli_read_full(fd, buf, n, deadline);
        if (r < 0 && errno != EINTR)
            return -1;
        if (cli_now_ns() > deadline) {
            errno = ETIMEDOUT;
            return -1;
        }
        if (t->pub_idle && t->pub_idle(st, NS_PER_MS) != 0)
            return -1;
    }
}

/* Loans, fills, stamps and sends message seq. *call_ns gets the CPU of the loan and send calls
 * when timed (the fill is the application's work, left out). */
static int send_one(const row_ctx *c, uint64_t seq, uint32_t flags, bool timed, int64_t probe,
                    int64_t *send_ns, int64_t *call_ns)
{
    const bench_transport *t = c->t;
    void *buf;
    size_t size;
    int64_t c0 = timed ? thread_cpu_ns() : 0;
    if (t->pub_loan(c->st, &buf, &size) != 0)
        return -1;
    int64_t c1 = timed ? thread_cpu_ns() : 0;
    bench_fill(buf, size, c->touch, seq);
    /* The clock starts when the frame is ready in the sender's buffer, as a camera's would be. */
    bench_wire w = {.seq = seq, .send_ns = cli_now_ns(), .flags = flags};
    memcpy(buf, &w, sizeof w);
    *send_ns = w.send_ns;
    int64_t c2 = timed ? thread_cpu_ns() : 0;
    if (t->pub_send(c->st, buf) != 0)
        return -1;
    if (timed)
        *call_ns = nonneg(c1 - c0 - probe) + nonneg(thread_cpu_ns() - c2 - probe);
    return 0;
}

static int publish_all(const row_ctx *c, uint32_t warmup, bench_row *out, int64_t *first_send)
{
    const bench_plan *plan = c->plan;
    int64_t ts, call;
    uint64_t seq = 0;
    int64_t next = cli_now_ns();
    for (uint32_t i = 0; i < warmup; i++) {
        cli_sleep_until(next);
        if (send_one(c, ++seq, BENCH_F_WARMUP, false, 0, &ts, &call) != 0)
            return -1;
        next += WARMUP_GAP_NS;
    }
    /* Let the subscriber drain the warm-up and go to sleep before the measured part. */
    next += 20 * NS_PER_MS;
    if (c->mode == BENCH_MODE_PACED)
        cli_sleep_until(next);

    const int64_t period = NS_PER_S / BENCH_PACED_HZ;
    bool timed = c->mode == BENCH_MODE_PACED; /* as in child_main */
    int64_t probe = cpu_probe_cost();
    int64_t call_sum = 0;
    uint64_t call_msgs = 0;
    int64_t cpu0 = rusage_cpu_ns();
    int64_t start = cli_now_ns();
    uint64_t sent = 0;
    for (;;) {
        bool last;
        if (c->mode == BENCH_MODE_PACED) {
            cli_sleep_until(next + (int64_t)sent * period);
            last = sent + 1 == plan->paced_count;
        } else {
            last = sent + 1 == FLAT_MAX_MESSAGES ||
                   ((sent & 63) == 0 && cli_now_ns() - start >= plan->flat_ns);
        }
        call = 0;
        if (send_one(c, ++seq, last ? BENCH_F_END : 0, timed, probe, &ts, &call) != 0)
            return -1;
        if (timed) {
            call_sum += call;
            call_msgs++;
        }
        if (sent == 0)
            *first_send = ts;
        sent++;
        if (last)
            break;
    }
    out->sent = sent;
    out->pub_cpu_us = (double)(rusage_cpu_ns() - cpu0) / 1000.0 / (double)sent;
    out->pub_call_us = call_msgs ? (double)call_sum / 1000.0 / (double)call_msgs : -1.0;
    return 0;
}

static void run_here(const bench_plan *plan, uint32_t entry, size_t payload, int mode,
                     bench_touch touch, bench_row *out)
{
    const bench_entry *e = &bench_entries[entry];
    const bench_transport *t = e->t;
    bench_params p = {.payload = payload,
                      .depth = BENCH_DEPTH,
                      .variant = e->variant,
                      .dir = plan->dir,
                      .domain = 0};
    if (mode == BENCH_MODE_FLAT && payload <= 4096)
        p.depth = BENCH_DEPTH_FLAT_SMALL;
    if (mode == BENCH_MODE_FLOOD) {
        p.depth = BENCH_DEPTH_FLOOD;
        p.lossless = true;
    }
    uint32_t warmup = p.depth < WARMUP_MAX ? p.depth : WARMUP_MAX;
    row_ctx c = {.plan = plan,
                 .e = e,
                 .t = t,
                 .mode = mode,
                 .touch = touch,
                 .capacity = mode == BENCH_MODE_PACED ? plan->paced_count : FLAT_MAX_MESSAGES};

    if (t->prepare(&c.st, &p) != 0)
        return;
    int fd;
    pid_t pid = fork_piped(&fd);
    if (pid < 0) {
        t->release(c.st);
        return;
    }
    if (pid == 0)
        _exit(child_main(&c, fd));

    pin_to(plan, 0, e->name);
    bool ok = false;
    bool opened = t->pub_open(c.st) == 0;
    char ready = 0;
    int64_t first_send = 0;
    child_result res = {0};
    if (opened && parent_wait(t, c.st, fd, &ready, 1, cli_now_ns() + 20 * NS_PER_S) == 0 &&
        ready == READY_OK && publish_all(&c, warmup, out, &first_send) == 0) {
        int64_t limit = 30 * NS_PER_S;
        if (parent_wait(t, c.st, fd, &res, sizeof res, cli_now_ns() + limit) == 0 &&
            res.status == 0)
            ok = true;
        else if (res.status == 0)
            fprintf(stderr, "ferry bench: %s: no result from the subscriber: %s\n", e->name,
                    strerror(errno));
    } else if (opened && ready != READY_FAIL) {
        fprintf(stderr, "ferry bench: %s: the subscriber did not get ready\n", e->name);
    }
    if (!ok)
        kill(pid, SIGKILL);
    reap(pid);
    close(fd);
    t->pub_close(c.st);
    t->release(c.st);
    if (!ok)
        return;

    out->ok = true;
    out->messages = res.received;
    out->dropped = out->sent >= res.received ? out->sent - res.received : 0;
    out->p50_us = (double)res.p50_ns / 1000.0;
    out->p99_us = (double)res.p99_ns / 1000.0;
    out->p999_us = (double)res.p999_ns / 1000.0;
    out->max_us = (double)res.max_ns / 1000.0;
    out->sub_cpu_us = res.cpu_msgs ? (double)res.cpu_ns / 1000.0 / (double)res.cpu_msgs : 0.0;
    out->sub_call_us = res.call_msgs ? (double)res.call_ns / 1000.0 / (double)res.call_msgs : -1.0;
    int64_t span = res.last_recv_ns - first_send;
    out->msgs_per_s = span > 0 ? (double)res.received * (double)NS_PER_S / (double)span : 0.0;
    if (res.disorder)
        fprintf(stderr, "ferry bench: %s: %llu messages out of order\n", e->name,
                (unsigned long long)res.disorder);
}

/* ---------------------------------------------------------------------------------------------
 * Rows in processes of their own, and the RouDi host
 * ------------------------------------------------------------------------------------------- */

typedef struct row_request {
    uint32_t entry;
    uint32_t touch;
    int32_t mode;
    uint32_t reserved;
    uint64_t payload;
} row_request;

/* Runs the row in a forked process and reads its result back; *out keeps ok false when the
 * process gave none. */
static void run_forked(const bench_plan *plan, const row_request *q, bench_row *out)
{
    int fd;
    pid_t pid = fork_piped(&fd);
    if (pid < 0)
        return;
    if (pid == 0) {
        bench_row r = *out;
        run_here(plan, q->entry, q->payload, q->mode, q->touch, &r);
        int rc = cli_write_full(fd, &r, sizeof r) == 0 ? 0 : 1;
        fflush(stdout);
        fflush(stderr);
        _exit(rc);
    }
    bench_row r;
    if (cli_read_full(fd, &r, sizeof r, cli_now_ns() + 120 * NS_PER_S) == 0)
        *out = r;
    else
        kill(pid, SIGKILL);
    close(fd);
    reap(pid);
}

/* The host: a process in the private RouDi environment that runs the rows asked of it, each
 * in a process of its own, until its request pipe closes. */
static struct {
    pid_t pid;
    int req, res; /* our ends of its pipes */
    bool failed;  /* it could not start: rows that need it are not measured */
} host = {.pid = -1, .req = -1, .res = -1};

static void host_main(const bench_plan *plan, int req, int res)
{
    char ready = bench_roudi_start(plan->max_payload) == 0 ? READY_OK : READY_FAIL;
    if (cli_write_full(res, &ready, 1) != 0 || ready != READY_OK) {
        bench_roudi_stop();
        return;
    }
    row_request q;
    while (cli_read_full(req, &q, sizeof q, -1) == 0) {
        bench_row r;
        if (cli_read_full(req, &r, sizeof r, -1) != 0)
            break;
        run_forked(plan, &q, &r);
        if (cli_write_full(res, &r, sizeof r) != 0)
            break;
    }
    bench_roudi_stop();
}

static int host_start(const bench_plan *plan)
{
    int req[2], res;
    if (pipe(req) != 0) {
        fprintf(stderr, "ferry bench: pipe: %s\n", strerror(errno));
        return -1;
    }
    pid_t pid = fork_piped(&res);
    if (pid < 0) {
        close(req[0]);
        close(req[1]);
        return -1;
    }
    if (pid == 0) {
        close(req[1]);
        host_main(plan, req[0], res);
        fflush(stdout);
        fflush(stderr);
        _exit(0);
    }
    close(req[0]);
    host.pid = pid;
    host.req = req[1];
    host.res = res;
    char ready = 0;
    if (cli_read_full(host.res, &ready, 1, cli_now_ns() + 30 * NS_PER_S) != 0 ||
        ready != READY_OK) {
        fprintf(stderr, "ferry bench: the iceoryx rows are not measured: RouDi did not start\n");
        return -1;
    }
    return 0;
}

void bench_run_finish(void)
{
    if (host.pid < 0)
        return;
    close(host.req);
    /* The host stops RouDi once its request pipe closes, then exits. */
    char c;
    cli_read_full(host.res, &c, 1, cli_now_ns() + 20 * NS_PER_S);
    close(host.res);
    reap(host.pid);
    host.pid = -1;
}

void bench_run_row(const bench_plan *plan, uint32_t entry, size_t payload, int mode,
                   bench_touch touch, bench_row *out)
{
    memset(out, 0, sizeof *out);
    out->entry = entry;
    out->payload = payload;
    out->mode = mode;
    out->touch = touch;
    out->pinned = plan->pin;
    const bench_transport *t = bench_entries[entry].t;
    row_request q = {.entry = entry, .touch = touch, .mode = mode, .payload = payload};
    if (t->caps & BENCH_CAP_ROUDI) {
        if (host.failed)
            return;
        if (host.pid < 0 && host_start(plan) != 0) {
            host.failed = true;
            bench_run_finish();
            return;
        }
        bench_row r;
        if (cli_write_full(host.req, &q, sizeof q) != 0 ||
            cli_write_full(host.req, out, sizeof *out) != 0 ||
            cli_read_full(host.res, &r, sizeof r, cli_now_ns() + 180 * NS_PER_S) != 0) {
            fprintf(stderr, "ferry bench: the RouDi host is gone\n");
            host.failed = true;
            return;
        }
        *out = r;
    } else if (t->caps & BENCH_CAP_PROCESS) {
        run_forked(plan, &q, out);
    } else {
        run_here(plan, entry, payload, mode, touch, out);
    }
}
