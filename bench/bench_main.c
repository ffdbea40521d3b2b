/*
 * `ferry bench <benchmark>`: the benchmark driver. `transport` measures one-way latency, CPU per
 * message and throughput between two processes for every transport behind bench_transport.
 */
#include "bench.h"
#include "cli.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#define NS_PER_S ((int64_t)1000000000)
#define NS_PER_MS ((int64_t)1000000)

static const bench_transport *const transports[] = {
    &bench_transport_ferry,
    &bench_transport_shm_copy,
    &bench_transport_uds,
    &bench_transport_wakeup,
};
#define TRANSPORT_COUNT (sizeof transports / sizeof transports[0])

static const size_t payloads[] = {64, 1048576, 2764800, 6220800};
#define PAYLOAD_COUNT (sizeof payloads / sizeof payloads[0])

enum { MODE_PACED, MODE_FLAT, MODE_COUNT };
static const char *const mode_names[MODE_COUNT] = {"paced", "flat"};

#define PACED_HZ 30
#define DEPTH 16
#define DEPTH_FLAT_SMALL 1024 /* a deep queue lets the subscriber batch at 64 B flat out */
#define FLAT_MAX_MESSAGES 4000000u
#define WARMUP_MAX 32u
#define WARMUP_GAP_NS (2 * NS_PER_MS)

typedef struct run_plan {
    uint32_t paced_count;  /* measured messages per paced row */
    int64_t flat_ns;       /* duration of a flat-out row */
} run_plan;

typedef struct row {
    const bench_transport *t;
    size_t payload;
    int mode;
    bool ok;
    uint64_t sent, messages, dropped;
    double p50_us, p99_us, max_us, pub_cpu_us, sub_cpu_us, msgs_per_s;
} row;

/* What the subscriber process sends back through its pipe after its ready byte. */
typedef struct child_result {
    int32_t status;
    uint32_t reserved;
    uint64_t received;
    uint64_t disorder; /* sequences that went backwards */
    int64_t p50_ns, p99_ns, max_ns;
    int64_t cpu_ns;
    uint64_t cpu_msgs;
    int64_t last_recv_ns;
} child_result;

#define READY_OK 'R'
#define READY_FAIL 'F'

/* ---------------------------------------------------------------------------------------------
 * One row: fork, the child subscribes, the parent publishes
 * ------------------------------------------------------------------------------------------- */

static int child_main(const bench_transport *t, void *st, int mode, uint64_t capacity, int fd)
{
    char ready = READY_OK;
    child_result res = {0};
    cli_lat lat;
    if (!cli_lat_init(&lat, capacity) || t->sub_open(st) != 0) {
        t->sub_close(st);
        ready = READY_FAIL;
        cli_write_full(fd, &ready, 1);
        return 1;
    }
    if (cli_write_full(fd, &ready, 1) != 0)
        return 1;

    int64_t timeout = 15 * NS_PER_S;
    uint64_t last_seq = 0;
    int64_t cpu0 = 0;
    for (;;) {
        bench_msg m;
        int rc = t->sub_recv(st, &m, timeout);
        if (rc != 0) {
            if (rc == 1)
                fprintf(stderr, "ferry bench: %s %s: no message for %.0f s (%llu received)\n",
                        t->name, mode_names[mode], (double)timeout / NS_PER_S,
                        (unsigned long long)res.received);
            res.status = -1;
            break;
        }
        timeout = 3 * NS_PER_S;
        if (m.seq <= last_seq)
            res.disorder++;
        last_seq = m.seq;
        if (m.flags & BENCH_F_WARMUP)
            continue;
        cli_lat_add(&lat, m.recv_ns - m.send_ns);
        res.received++;
        res.last_recv_ns = m.recv_ns;
        /* The CPU window opens after the first measured message, so warm-up is left out. */
        if (res.received == 1)
            cpu0 = cli_cpu_ns();
        if (m.flags & BENCH_F_END) {
            res.cpu_ns = cli_cpu_ns() - cpu0;
            res.cpu_msgs = res.received - 1;
            break;
        }
    }
    t->sub_close(st);
    res.p50_ns = cli_lat_pct(&lat, 50.0);
    res.p99_ns = cli_lat_pct(&lat, 99.0);
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

/* What two back-to-back reads of the CPU clock measure: the cost of the probe itself. */
static int64_t cpu_probe_cost(void)
{
    int64_t best = INT64_MAX;
    for (int i = 0; i < 64; i++) {
        int64_t a = cli_cpu_ns();
        int64_t d = cli_cpu_ns() - a;
        if (d < best)
            best = d;
    }
    return best;
}

static int publish_all(const bench_transport *t, void *st, int mode, uint32_t warmup,
                       const run_plan *plan, row *out, int64_t *first_send)
{
    int64_t ts;
    uint64_t seq = 0;
    int64_t next = cli_now_ns();
    for (uint32_t i = 0; i < warmup; i++) {
        cli_sleep_until(next);
        if (t->pub_send(st, ++seq, BENCH_F_WARMUP, &ts) != 0)
            return -1;
        next += WARMUP_GAP_NS;
    }
    /* Let the subscriber drain the warm-up and go to sleep before the measured part. */
    next += 20 * NS_PER_MS;
    if (mode == MODE_PACED)
        cli_sleep_until(next);

    /* Paced, the process mostly sleeps: only the send calls are counted, less what reading
     * the CPU clock itself costs. Flat out, the whole process is counted over the run. */
    const int64_t period = NS_PER_S / PACED_HZ;
    int64_t probe = cpu_probe_cost();
    int64_t cpu_sends = 0;
    int64_t cpu0 = cli_cpu_ns();
    int64_t start = cli_now_ns();
    uint64_t sent = 0;
    for (;;) {
        bool last;
        int64_t c0 = 0;
        if (mode == MODE_PACED) {
            cli_sleep_until(next + (int64_t)sent * period);
            last = sent + 1 == plan->paced_count;
            c0 = cli_cpu_ns();
        } else {
            last = sent + 1 == FLAT_MAX_MESSAGES ||
                   ((sent & 63) == 0 && cli_now_ns() - start >= plan->flat_ns);
        }
        if (t->pub_send(st, ++seq, last ? BENCH_F_END : 0, &ts) != 0)
            return -1;
        if (mode == MODE_PACED) {
            int64_t d = cli_cpu_ns() - c0 - probe;
            cpu_sends += d > 0 ? d : 0;
        }
        if (sent == 0)
            *first_send = ts;
        sent++;
        if (last)
            break;
    }
    out->sent = sent;
    int64_t cpu = mode == MODE_PACED ? cpu_sends : cli_cpu_ns() - cpu0;
    out->pub_cpu_us = (double)cpu / 1000.0 / (double)sent;
    return 0;
}

static void run_row(const bench_transport *t, size_t payload, int mode, const run_plan *plan,
                    const char *dir, row *out)
{
    memset(out, 0, sizeof *out);
    out->t = t;
    out->payload = payload;
    out->mode = mode;

    bench_params p = {.payload = payload, .depth = DEPTH, .dir = dir, .domain = 0};
    if (mode == MODE_FLAT && payload <= 4096)
        p.depth = DEPTH_FLAT_SMALL;
    uint32_t warmup = p.depth < WARMUP_MAX ? p.depth : WARMUP_MAX;
    uint64_t capacity = mode == MODE_PACED ? plan->paced_count : FLAT_MAX_MESSAGES;

    void *st = NULL;
    if (t->prepare(&st, &p) != 0)
        return;
    int fds[2];
    if (pipe(fds) != 0) {
        fprintf(stderr, "ferry bench: pipe: %s\n", strerror(errno));
        t->release(st);
        return;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "ferry bench: fork: %s\n", strerror(errno));
        close(fds[0]);
        close(fds[1]);
        t->release(st);
        return;
    }
    if (pid == 0) {
        cli_child_setup(parent);
        close(fds[0]);
        _exit(child_main(t, st, mode, capacity, fds[1]));
    }
    close(fds[1]);

    bool ok = false;
    bool opened = t->pub_open(st) == 0;
    char ready = 0;
    int64_t first_send = 0;
    child_result res = {0};
    if (opened &&
        parent_wait(t, st, fds[0], &ready, 1, cli_now_ns() + 20 * NS_PER_S) == 0 &&
        ready == READY_OK && publish_all(t, st, mode, warmup, plan, out, &first_send) == 0) {
        int64_t limit = 30 * NS_PER_S;
        if (parent_wait(t, st, fds[0], &res, sizeof res, cli_now_ns() + limit) == 0 &&
            res.status == 0)
            ok = true;
        else if (res.status == 0)
            fprintf(stderr, "ferry bench: %s: no result from the subscriber: %s\n", t->name,
                    strerror(errno));
    } else if (opened && ready != READY_FAIL) {
        fprintf(stderr, "ferry bench: %s: the subscriber did not get ready\n", t->name);
    }
    if (!ok)
        kill(pid, SIGKILL);
    int wstatus;
    while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
    }
    close(fds[0]);
    t->pub_close(st);
    t->release(st);
    if (!ok)
        return;

    out->ok = true;
    out->messages = res.received;
    out->dropped = out->sent >= res.received ? out->sent - res.received : 0;
    out->p50_us = (double)res.p50_ns / 1000.0;
    out->p99_us = (double)res.p99_ns / 1000.0;
    out->max_us = (double)res.max_ns / 1000.0;
    out->sub_cpu_us = res.cpu_msgs ? (double)res.cpu_ns / 1000.0 / (double)res.cpu_msgs : 0.0;
    int64_t span = res.last_recv_ns - first_send;
    out->msgs_per_s = span > 0 ? (double)res.received * (double)NS_PER_S / (double)span : 0.0;
    if (res.disorder)
        fprintf(stderr, "ferry bench: %s: %llu messages out of order\n", t->name,
                (unsigned long long)res.disorder);
}

/* ---------------------------------------------------------------------------------------------
 * Output
 * ------------------------------------------------------------------------------------------- */

static void print_header(void)
{
    printf("%-16s %9s %-6s %8s %10s %10s %10s %10s %10s %12s %9s\n", "transport", "payload",
           "mode", "messages", "p50 us", "p99 us", "max us", "pub cpu us", "sub cpu us",
           "msgs/s", "dropped");
}

static void print_row(const row *r)
{
    if (!r->ok) {
        printf("%-16s %9zu %-6s %8s\n", r->t->name, r->payload, mode_names[r->mode], "error");
        return;
    }
    printf("%-16s %9zu %-6s %8llu %10.1f %10.1f %10.1f %10.2f %10.2f %12.0f %9llu\n",
           r->t->name, r->payload, mode_names[r->mode], (unsigned long long)r->messages,
           r->p50_us, r->p99_us, r->max_us, r->pub_cpu_us, r->sub_cpu_us, r->msgs_per_s,
           (unsigned long long)r->dropped);
}

static int write_csv(const char *path, const row *rows, size_t n)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return cli_fail("bench", 1, "cannot write %s: %s", path, strerror(errno));
    fputs("transport,payload_bytes,mode,messages,p50_us,p99_us,max_us,pub_cpu_us,sub_cpu_us,"
          "msgs_per_s,dropped\n",
          f);
    for (size_t i = 0; i < n; i++) {
        const row *r = &rows[i];
        if (!r->ok)
            continue;
        fprintf(f, "%s,%zu,%s,%llu,%.3f,%.3f,%.3f,%.3f,%.3f,%.0f,%llu\n", r->t->name, r->payload,
                mode_names[r->mode], (unsigned long long)r->messages, r->p50_us, r->p99_us,
                r->max_us, r->pub_cpu_us, r->sub_cpu_us, r->msgs_per_s,
                (unsigned long long)r->dropped);
    }
    if (fclose(f) != 0)
        return cli_fail("bench", 1, "cannot write %s: %s", path, strerror(errno));
    return 0;
}

static const row *find(const row *rows, size_t n, const bench_transport *t, size_t payload,
                       int mode)
{
    for (size_t i = 0; i < n; i++)
        if (rows[i].t == t && rows[i].payload == payload && rows[i].mode == mode && rows[i].ok)
            return &rows[i];
    return NULL;
}

static void verdict(bool have, bool pass, const char *what)
{
    printf("  [%s] %s\n", !have ? "n/a " : pass ? "pass" : "miss", what);
}

static void print_checks(const row *rows, size_t n)
{
    const bench_transport *zc = &bench_transport_ferry;
    char text[512];
    printf("\ntarget checks (informational):\n");

    /* Zero-copy p50 at 30 Hz within 1.5x of the wake-up floor, every payload. */
    double worst = 0.0;
    bool have = true;
    int len = 0;
    for (size_t i = 0; i < PAYLOAD_COUNT; i++) {
        const row *a = find(rows, n, zc, payloads[i], MODE_PACED);
        const row *b = find(rows, n, &bench_transport_wakeup, payloads[i], MODE_PACED);
        if (!a || !b || b->p50_us <= 0) {
            have = false;
            continue;
        }
        double ratio = a->p50_us / b->p50_us;
        if (ratio > worst)
            worst = ratio;
        len += snprintf(text + len, sizeof text - (size_t)len, "%s%zu B %.2fx", i ? ", " : "",
                        payloads[i], ratio);
    }
    char line[700];
    snprintf(line, sizeof line,
             "zero-copy p50 at 30 Hz within 1.5x of wakeup-floor p50 (worst %.2fx: %s)", worst,
             text);
    verdict(have, worst <= 1.5, line);

    /* p99 within 2x of p50 at 30 Hz. */
    worst = 0.0;
    have = true;
    len = 0;
    for (size_t i = 0; i < PAYLOAD_COUNT; i++) {
        const row *a = find(rows, n, zc, payloads[i], MODE_PACED);
        if (!a || a->p50_us <= 0) {
            have = false;
            continue;
        }
        double ratio = a->p99_us / a->p50_us;
        if (ratio > worst)
            worst = ratio;
        len += snprintf(text + len, sizeof text - (size_t)len, "%s%zu B %.2fx", i ? ", " : "",
                        payloads[i], ratio);
    }
    snprintf(line, sizeof line, "zero-copy p99 within 2x of its p50 at 30 Hz (worst %.2fx: %s)",
             worst, text);
    verdict(have, worst <= 2.0, line);

    const row *small = find(rows, n, zc, 64, MODE_PACED);
    const row *big = find(rows, n, zc, 6220800, MODE_PACED);
    const row *uds = find(rows, n, &bench_transport_uds, 6220800, MODE_PACED);
    const row *shm = find(rows, n, &bench_transport_shm_copy, 6220800, MODE_PACED);
    bool ok2 = small && big && small->p50_us > 0;
    snprintf(line, sizeof line,
             "zero-copy p50 at 6,220,800 B within 1.5x of its p50 at 64 B (%.1f us vs %.1f us)",
             big ? big->p50_us : 0.0, small ? small->p50_us : 0.0);
    verdict(ok2, ok2 && big->p50_us <= 1.5 * small->p50_us, line);

    ok2 = big && uds && big->p50_us > 0;
    double f = ok2 ? uds->p50_us / big->p50_us : 0.0;
    snprintf(line, sizeof line,
             "at 6,220,800 B zero-copy p50 >= 100x below uds-serialized (%.0fx: %.1f us vs %.1f "
             "us)",
             f, big ? big->p50_us : 0.0, uds ? uds->p50_us : 0.0);
    verdict(ok2, f >= 100.0, line);

    ok2 = big && shm && big->p50_us > 0;
    f = ok2 ? shm->p50_us / big->p50_us : 0.0;
    snprintf(line, sizeof line,
             "at 6,220,800 B zero-copy p50 >= 20x below shm-copy (%.0fx: %.1f us vs %.1f us)", f,
             big ? big->p50_us : 0.0, shm ? shm->p50_us : 0.0);
    verdict(ok2, f >= 20.0, line);

    /* CPU of publish + take + release, from the flat-out 64 B run: whole-process CPU of both
     * sides divided by messages, wake-ups included. */
    const row *flat = find(rows, n, zc, 64, MODE_FLAT);
    double cpu = flat ? flat->pub_cpu_us + flat->sub_cpu_us : 0.0;
    snprintf(line, sizeof line,
             "publish+take+release CPU under 5 us per message (flat 64 B: %.2f + %.2f = %.2f us; "
             "paced 64 B: %.2f + %.2f us)",
             flat ? flat->pub_cpu_us : 0.0, flat ? flat->sub_cpu_us : 0.0, cpu,
             small ? small->pub_cpu_us : 0.0, small ? small->sub_cpu_us : 0.0);
    verdict(flat != NULL, cpu < 5.0, line);

    snprintf(line, sizeof line, "flat out at 64 B >= 1,000,000 msgs/s (%.0f msgs/s, %llu dropped)",
             flat ? flat->msgs_per_s : 0.0, flat ? (unsigned long long)flat->dropped : 0ULL);
    verdict(flat != NULL, flat && flat->msgs_per_s >= 1e6, line);
}

static void print_machine(void)
{
    char model[256] = "unknown CPU";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f)) {
            char *colon = strchr(line, ':');
            if (strncmp(line, "model name", 10) == 0 && colon) {
                snprintf(model, sizeof model, "%s", colon + 2);
                model[strcspn(model, "\n")] = '\0';
                break;
            }
        }
        fclose(f);
    }
    struct utsname u;
    if (uname(&u) != 0)
        snprintf(u.release, sizeof u.release, "?");
    printf("machine: %ld CPUs, %s, Linux %s\n", sysconf(_SC_NPROCESSORS_ONLN), model, u.release);
}

/* ---------------------------------------------------------------------------------------------
 * Commands
 * ------------------------------------------------------------------------------------------- */

static void transport_usage(FILE *to)
{
    fputs("usage: ferry bench transport [--quick] [--csv FILE] [--transport NAME] [--mode M]\n"
          "\n"
          "One-way latency, CPU per message and throughput between two processes, for payloads\n"
          "of 64 B, 1 MiB, 2,764,800 B and 6,220,800 B, paced at 30 Hz and flat out.\n"
          "  --quick           fewer messages (whole run well under 30 s)\n"
          "  --csv FILE        also write the results as CSV\n"
          "  --transport NAME  only this transport (repeatable)\n"
          "  --mode M          only paced or only flat\n"
          "transports:\n",
          to);
    for (size_t i = 0; i < TRANSPORT_COUNT; i++)
        fprintf(to, "  %-16s %s\n", transports[i]->name, transports[i]->summary);
}

static int bench_transport_cmd(int argc, char **argv)
{
    enum { O_TRANSPORT = CLI_O_OWN, O_MODE };
    static const struct option options[] = {
        CLI_OPT_QUICK,
        CLI_OPT_CSV,
        {"transport", required_argument, NULL, O_TRANSPORT},
        {"mode", required_argument, NULL, O_MODE},
        CLI_OPT_HELP,
        CLI_OPT_END,
    };
    cli_opts o;
    cli_parser p = {.cmd = "bench transport", .options = options, .usage = transport_usage,
                    .opts = &o};
    bool want_t[TRANSPORT_COUNT] = {false};
    bool any_t = false;
    int only_mode = -1;
    int c;
    cli_opts_init(&o);
    while ((c = cli_getopt(&p, argc, argv)) >= CLI_O_OWN) {
        switch (c) {
        case O_TRANSPORT: {
            size_t k = 0;
            while (k < TRANSPORT_COUNT && strcmp(transports[k]->name, optarg) != 0)
                k++;
            if (k == TRANSPORT_COUNT)
                return cli_fail("bench", 2, "unknown transport '%s'", optarg);
            want_t[k] = any_t = true;
            break;
        }
        case O_MODE:
            only_mode = strcmp(optarg, "paced") == 0 ? MODE_PACED
                        : strcmp(optarg, "flat") == 0 ? MODE_FLAT
                                                      : -2;
            if (only_mode == -2)
                return cli_fail("bench", 2, "unknown mode '%s' (paced or flat)", optarg);
            break;
        }
    }
    if (c == CLI_OPTS_EXIT)
        return p.status;
    if (optind < argc)
        return cli_fail("bench transport", 2, "unexpected argument '%s' (try 'ferry bench "
                        "transport --help')", argv[optind]);

    run_plan plan = {.paced_count = o.quick ? 20 : 300,
                     .flat_ns = o.quick ? NS_PER_S / 4 : 2 * NS_PER_S};
    char dir[256];
    if (!cli_private_dir("ferry-bench-", dir, sizeof dir))
        return 1;

    print_machine();
    printf("paced: %d Hz, %u messages per row; flat: as fast as possible for %.2f s per row; "
           "queue depth %d (%d for flat 64 B)\n\n",
           PACED_HZ, plan.paced_count, (double)plan.flat_ns / NS_PER_S, DEPTH, DEPTH_FLAT_SMALL);
    print_header();
    fflush(stdout);

    row rows[MODE_COUNT * PAYLOAD_COUNT * TRANSPORT_COUNT];
    size_t n = 0;
    int status = 0;
    for (int mode = 0; mode < MODE_COUNT; mode++) {
        if (only_mode >= 0 && mode != only_mode)
            continue;
        for (size_t pi = 0; pi < PAYLOAD_COUNT; pi++)
            for (size_t ti = 0; ti < TRANSPORT_COUNT; ti++) {
                if (any_t && !want_t[ti])
                    continue;
                row *r = &rows[n++];
                run_row(transports[ti], payloads[pi], mode, &plan, dir, r);
                if (!r->ok)
                    status = 1;
                print_row(r);
                fflush(stdout);
            }
    }
    if (cli_rmtree(dir) != 0)
        fprintf(stderr, "ferry bench: could not remove %s\n", dir);
    print_checks(rows, n);
    if (o.csv && write_csv(o.csv, rows, n) != 0)
        status = 1;
    return status;
}

int ferry_cmd_bench(int argc, char **argv)
{
    static const char usage[] =
        "usage: ferry bench <benchmark> [options]\n"
        "benchmarks:\n"
        "  transport   one-way latency, CPU and throughput: ferry vs copying transports\n"
        "  gpu         device buffer cache vs CUDA allocators, host frames into the GPU\n"
        "  bridge      ferry frames through DDS bridges across a veth pair vs plain DDS\n";
    if (argc < 2) {
        fputs(usage, stderr);
        return 2;
    }
    const char *which = argv[1];
    if (strcmp(which, "--help") == 0 || strcmp(which, "-h") == 0) {
        fputs(usage, stdout);
        return 0;
    }
    if (strcmp(which, "transport") == 0)
        return bench_transport_cmd(argc - 1, argv + 1);
    if (strcmp(which, "gpu") == 0) {
#ifdef FERRY_HAVE_GPU
        return bench_gpu_cmd(argc - 1, argv + 1);
#else
        return cli_fail("bench", 1, "this ferry was built without the CUDA module");
#endif
    }
    if (strcmp(which, "bridge") == 0) {
#ifdef FERRY_HAVE_BRIDGE
        return bench_bridge_cmd(argc - 1, argv + 1);
#else
        return cli_fail("bench", 2, "this ferry was built without the DDS bridge");
#endif
    }
    return cli_fail("bench", 2, "unknown benchmark '%s' (known: transport, gpu, bridge)", which);
}
