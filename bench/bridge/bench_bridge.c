/*
 * `ferry bench bridge`: ferry frames carried across a veth pair by two DDS bridges, next to a
 * plain Cyclone DDS publisher and subscriber of the same type over the same link, in one run.
 *
 * The benchmark makes two network namespaces joined by a veth pair (root needed), raises
 * net.core.rmem_max / wmem_max as the bridge documents, and removes and restores all of it on
 * every way out (normal end, error, SIGINT, SIGTERM, SIGHUP). Every endpoint is a process forked
 * from this one that enters its namespace with setns(2):
 *
 *   bridged: ferry publisher (A) -> bridge A, out (A) -> DDS over the veth -> bridge B, in (B)
 *            -> ferry subscriber (B)
 *   plain:   Cyclone DDS writer (A) -> DDS over the veth -> Cyclone DDS reader (B)
 *
 * Both paths carry sensor_msgs::msg::dds_::Image_ with the bridge's Cyclone settings, reliable,
 * KEEP_ALL (readers: at most DEPTH untaken), XCDR1. The namespaces are anonymous, each held by
 * a child process (no /run/netns entry or mount). The publisher writes a bench_wire (sequence,
 * CLOCK_MONOTONIC send time, flags) into the first bytes of the pixels; the subscriber subtracts
 * that from its own clock when it has the sample (CLOCK_MONOTONIC is one clock for all namespaces
 * of a host). Paced rows give latency; flat rows send as fast as a window of messages in flight
 * allows (the subscriber counts what it received in shared memory), which measures throughput
 * without overrunning any queue of either path.
 */
#include "bench.h"
#include "bridge.h"
#include "cli.h"
#include "ros2_sensor_msgs.h"

#include <ferry/ferry.h>
#include <ferry/msg.h>

#include <dds/dds.h>

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NS_PER_S ((int64_t)1000000000)
#define NS_PER_MS ((int64_t)1000000)

/* DDS domains: the bridges on one, the plain baseline on another, so the bridges never see the
 * baseline's writers (and never spend CPU on them). */
#define DDS_DOMAIN_BRIDGE 0u
#define DDS_DOMAIN_PLAIN 1u
#define TOPIC_PREFIX "/fbbench/"
#define DEPTH 16u        /* every queue and DDS history on both paths */
#define WINDOW_SMALL 16u /* flat rows: messages in flight at 64 B */
#define WINDOW_LARGE 4u  /* and for frames (4 x 6.2 MB stays below the writers' WhcHigh) */
#define WARMUP_FRAMES 5u /* warm-up frames the subscriber must see before the measured part */
#define WARMUP_GAP_NS (50 * NS_PER_MS)
#define STALL_NS (300 * NS_PER_MS) /* flat: no progress for this long counts one message lost */
#define SUB_IDLE_END_NS (2 * NS_PER_S)
#define LAT_FLAT_CAP ((size_t)1 << 20)
#define SYSCTL_WANT 67108864L
/* The lock of the global socket limits, shared with the bridge's large-frame tests (lib.sh): a
 * flock on the limit's own file, so that no lock file is left anywhere. */
#define LOCK_PATH "/proc/sys/net/core/rmem_max"

typedef struct size_spec {
    size_t bytes; /* pixel bytes: the DDS data_ length and the ferry image's data_size */
    uint32_t width, height;
    const char *encoding;
    uint32_t hz; /* paced rate */
} size_spec;

static const size_spec sizes[] = {
    {64, 8, 8, "mono8", 100},
    {2764800, 1280, 720, "rgb8", 30},
    {6220800, 1920, 1080, "rgb8", 30},
};
#define SIZE_COUNT (sizeof sizes / sizeof sizes[0])

enum { PATH_PLAIN, PATH_BRIDGED, PATH_COUNT };
static const char *const path_names[PATH_COUNT] = {"plain-dds", "bridged"};
enum { MODE_PACED, MODE_FLAT, MODE_COUNT };
enum { SIDE_A, SIDE_B };

/* One row's control block, shared by the driver and the row's two processes. */
typedef struct row_ctl {
    _Atomic uint32_t received;    /* measured messages the subscriber has (wakes the publisher) */
    _Atomic uint32_t pub_waiting; /* the publisher sleeps on received */
    _Atomic uint32_t warm_seen;
    _Atomic uint32_t pub_done;
    _Atomic uint32_t sub_done;
    uint64_t sent;         /* measured messages the publisher sent */
    uint64_t write_failed; /* of them, dds_write / loan / publish that gave up */
    int64_t first_send_ns;
    uint64_t sub_received, sub_disorder;
    int64_t p50_ns, p99_ns, max_ns, last_recv_ns;
} row_ctl;

typedef struct bridge_ctl {
    _Atomic uint32_t ready; /* 1 created, 2 failed */
    _Atomic uint32_t stop;
    ferry_bridge_stats st;
} bridge_ctl;

typedef struct shared {
    row_ctl row;
    bridge_ctl bridge[2];
} shared;

typedef struct row {
    const size_spec *sz;
    int path, mode;
    bool ok;
    uint64_t sent, received, lost;
    double p50_us, p99_us, max_us, msgs_per_s, mb_per_s;
} row;

typedef struct plan {
    uint32_t paced_small, paced_large; /* measured messages of paced rows */
    int64_t flat_ns;
} plan;

/* Everything the cleanup needs; file scope because atexit and signal handlers take no argument. */
static struct {
    bool active;
    char tag[12];
    char ns[2][32];  /* names for the report; the namespaces are anonymous */
    pid_t ns_pid[2]; /* the process that holds each (also in children: it dies with us) */
    char veth[2][16];
    char ip[2][20];
    char dir[2][256];
    char dds_config[2][600];
    const char *sysctl_path[2];
    long sysctl_old[2];
    bool sysctl_changed[2];
    pid_t children[8];
    shared *sh;
    int lock_fd;
} env = {.lock_fd = -1};

static volatile sig_atomic_t stop_flag;

/* ---------------------------------------------------------------------------------------------
 * Setup and cleanup: namespaces, veth, sysctls, children
 * ------------------------------------------------------------------------------------------- */

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

/* Runs a command (argv[0] found on PATH), its output discarded when quiet, and waits for it. */
static int run_cmd(char *const argv[], bool quiet)
{
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        if (quiet) {
            int fd = open("/dev/null", O_WRONLY);
            if (fd >= 0) {
                dup2(fd, 1);
                dup2(fd, 2);
            }
        }
        execvp(argv[0], argv);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static bool sysctl_read(const char *path, long *out)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    bool ok = fscanf(f, "%ld", out) == 1;
    fclose(f);
    return ok;
}

static bool sysctl_write(const char *path, long value)
{
    char text[32];
    int n = snprintf(text, sizeof text, "%ld\n", value);
    int fd = open(path, O_WRONLY);
    if (fd < 0)
        return false;
    bool ok = write(fd, text, (size_t)n) == n;
    close(fd);
    return ok;
}

static void kill_children(void)
{
    for (size_t i = 0; i < sizeof env.children / sizeof env.children[0]; i++)
        if (env.children[i] > 0) {
            kill(env.children[i], SIGKILL);
            waitpid(env.children[i], NULL, 0);
            env.children[i] = 0;
        }
}

static void cleanup(void)
{
    if (!env.active)
        return;
    env.active = false;
    /* The namespaces, with the veth pair, go with the last process in them: their holders are
     * children too. */
    kill_children();
    env.ns_pid[0] = env.ns_pid[1] = 0;
    for (int k = 0; k < 2; k++)
        if (env.sysctl_changed[k]) {
            sysctl_write(env.sysctl_path[k], env.sysctl_old[k]);
            env.sysctl_changed[k] = false;
        }
    for (int s = 0; s < 2; s++)
        if (env.dir[s][0]) {
            cli_rmtree(env.dir[s]);
            env.dir[s][0] = '\0';
        }
    if (env.lock_fd >= 0) {
        close(env.lock_fd);
        env.lock_fd = -1;
    }
}

static void track_child(pid_t pid)
{
    for (size_t i = 0; i < sizeof env.children / sizeof env.children[0]; i++)
        if (env.children[i] == 0) {
            env.children[i] = pid;
            return;
        }
}

static void untrack_child(pid_t pid)
{
    for (size_t i = 0; i < sizeof env.children / sizeof env.children[0]; i++)
        if (env.children[i] == pid)
            env.children[i] = 0;
}

/* Runs "ip ARGS..." (a NULL-terminated list), in namespace side's network namespace when side
 * is SIDE_A or SIDE_B, in the benchmark's own for -1. */
static int ip(int side, const char *first, ...) __attribute__((sentinel));

static int ip(int side, const char *first, ...)
{
    char *argv[24] = {"ip"};
    size_t n = 1;
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a && n + 1 < sizeof argv / sizeof argv[0];
         a = va_arg(ap, const char *))
        argv[n++] = (char *)a;
    va_end(ap);
    argv[n] = NULL;
    if (side < 0)
        return run_cmd(argv, false);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/ns/net", (int)env.ns_pid[side]);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
            fprintf(stderr, "ferry bench: cannot enter %s: %s\n", env.ns[side], strerror(errno));
            _exit(127);
        }
        execvp(argv[0], argv);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* A network namespace of its own, held by a child that does nothing else: anonymous (no
 * `ip netns add`, so nothing is mounted on /run/netns), gone when the child is, and the child
 * goes with the benchmark, even one killed outright (PR_SET_PDEATHSIG). */
static int make_namespace(int side)
{
    int ready[2];
    if (pipe2(ready, O_CLOEXEC) != 0)
        return cli_fail("bench", 1, "pipe: %s", strerror(errno));
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        close(ready[0]);
        close(ready[1]);
        return cli_fail("bench", 1, "fork: %s", strerror(errno));
    }
    if (pid == 0) {
        cli_child_setup(parent);
        /* The driver ends it (SIGKILL), after the endpoints. */
        signal(SIGINT, SIG_IGN);
        signal(SIGTERM, SIG_IGN);
        signal(SIGHUP, SIG_IGN);
        char ok = unshare(CLONE_NEWNET) == 0 ? 1 : 0;
        if (write(ready[1], &ok, 1) != 1 || !ok)
            _exit(1);
        close(ready[1]);
        for (;;)
            pause();
    }
    close(ready[1]);
    track_child(pid);
    env.ns_pid[side] = pid;
    char ok = 0;
    ssize_t n;
    while ((n = read(ready[0], &ok, 1)) < 0 && errno == EINTR)
        ;
    close(ready[0]);
    if (n != 1 || !ok)
        return cli_fail("bench", 1, "cannot make a network namespace (unshare CLONE_NEWNET)");
    return 0;
}

static int setup(void)
{
    static const char *const keys[2] = {"/proc/sys/net/core/rmem_max",
                                        "/proc/sys/net/core/wmem_max"};
    pid_t pid = getpid();
    srand((unsigned)(pid ^ time(NULL)));
    snprintf(env.tag, sizeof env.tag, "fbb%d", (int)(pid % 10000000));
    env.active = true;

    /* The net.core limits are global: wait for another benchmark or large-frame test to end. */
    env.lock_fd = open(LOCK_PATH, O_RDONLY | O_CLOEXEC);
    if (env.lock_fd >= 0) {
        int64_t until = cli_now_ns() + 60 * NS_PER_S;
        while (flock(env.lock_fd, LOCK_EX | LOCK_NB) != 0) {
            if (cli_now_ns() > until || stop_flag)
                return cli_fail("bench", 1, "another run holds %s", LOCK_PATH);
            usleep(200000);
        }
    }
    for (int k = 0; k < 2; k++) {
        env.sysctl_path[k] = keys[k];
        if (!sysctl_read(keys[k], &env.sysctl_old[k]))
            return cli_fail("bench", 1, "cannot read %s: %s", keys[k], strerror(errno));
        if (env.sysctl_old[k] < SYSCTL_WANT) {
            if (!sysctl_write(keys[k], SYSCTL_WANT))
                return cli_fail("bench", 1, "cannot set %s: %s", keys[k], strerror(errno));
            env.sysctl_changed[k] = true;
        }
    }

    int net2 = 20 + rand() % 200, net3 = 1 + rand() % 250;
    for (int s = 0; s < 2; s++) {
        snprintf(env.ns[s], sizeof env.ns[s], "%s%c", env.tag, s == SIDE_A ? 'A' : 'B');
        snprintf(env.veth[s], sizeof env.veth[s], "%s%c", env.tag, s == SIDE_A ? 'a' : 'b');
        snprintf(env.ip[s], sizeof env.ip[s], "10.%d.%d.%d", net2, net3, s + 1);
        if (make_namespace(s) != 0)
            return 1;
        if (ip(s, "link", "set", "lo", "up", NULL) != 0)
            return cli_fail("bench", 1, "ip link set lo up failed in %s", env.ns[s]);
    }
    char pid_a[16], pid_b[16];
    snprintf(pid_a, sizeof pid_a, "%d", (int)env.ns_pid[0]);
    snprintf(pid_b, sizeof pid_b, "%d", (int)env.ns_pid[1]);
    if (ip(-1, "link", "add", env.veth[0], "netns", pid_a, "type", "veth", "peer", "name",
           env.veth[1], "netns", pid_b, NULL) != 0)
        return cli_fail("bench", 1, "cannot create the veth pair");
    for (int s = 0; s < 2; s++) {
        char cidr[32];
        snprintf(cidr, sizeof cidr, "%s/24", env.ip[s]);
        if (ip(s, "addr", "add", cidr, "dev", env.veth[s], NULL) != 0 ||
            ip(s, "link", "set", env.veth[s], "up", "multicast", "on", NULL) != 0)
            return cli_fail("bench", 1, "cannot configure %s", env.veth[s]);
        /* Unicast discovery over the veth only, as tests/bridge/lib.sh does. */
        snprintf(env.dds_config[s], sizeof env.dds_config[s],
                 "<CycloneDDS><Domain Id=\"any\"><General><Interfaces><NetworkInterface "
                 "name=\"%s\"/></Interfaces></General><Discovery><Peers><Peer address=\"%s\"/>"
                 "<Peer address=\"%s\"/></Peers><ParticipantIndex>auto</ParticipantIndex>"
                 "<MaxAutoParticipantIndex>30</MaxAutoParticipantIndex></Discovery></Domain>"
                 "</CycloneDDS>",
                 env.veth[s], env.ip[0], env.ip[1]);
    }
    for (int s = 0; s < 2; s++)
        if (!cli_private_dir(s == SIDE_A ? "ferry-bbench-a-" : "ferry-bbench-b-", env.dir[s],
                             sizeof env.dir[s]))
            return 1;
    env.sh = mmap(NULL, sizeof(shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (env.sh == MAP_FAILED) {
        env.sh = NULL;
        return cli_fail("bench", 1, "mmap: %s", strerror(errno));
    }
    memset(env.sh, 0, sizeof *env.sh);
    return 0;
}

/* Forks a process that enters namespace side and runs fn(side, arg); it exits with fn's value. */
static pid_t spawn(int side, int (*fn)(int, const void *), const void *arg)
{
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "ferry bench: fork: %s\n", strerror(errno));
        return -1;
    }
    if (pid > 0) {
        track_child(pid);
        return pid;
    }
    cli_child_setup(parent);
    env.active = false; /* the driver cleans up, never a child */
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/ns/net", (int)env.ns_pid[side]);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
        fprintf(stderr, "ferry bench: cannot enter %s: %s\n", env.ns[side], strerror(errno));
        _exit(1);
    }
    close(fd);
    _exit(fn(side, arg));
}

/* ---------------------------------------------------------------------------------------------
 * Endpoints: a publisher and a subscriber per path
 * ------------------------------------------------------------------------------------------- */

typedef struct row_args {
    const size_spec *sz;
    int path, mode;
    uint32_t paced_count;
    int64_t flat_ns;
    char topic[64]; /* ferry name; DDS gets "rt" + it */
} row_args;

typedef struct endpoint {
    const row_args *a;
    /* plain */
    dds_entity_t domain, participant, topic, writer, reader, waitset;
    sensor_msgs_msg_dds__Image_ msg;
    unsigned char *pixels;
    /* bridged */
    ferry_node *node;
    ferry_publisher *pub;
    ferry_subscriber *sub;
} endpoint;

static int dds_fail(const char *what, dds_return_t rc)
{
    fprintf(stderr, "ferry bench: %s: %s\n", what, dds_strretcode(rc));
    return -1;
}

static int ferry_fail(const char *what, ferry_err err)
{
    fprintf(stderr, "ferry bench: %s: %s\n", what, ferry_strerror(err));
    return -1;
}

static dds_qos_t *plain_qos(void)
{
    dds_qos_t *q = dds_create_qos();
    dds_data_representation_id_t rep = DDS_DATA_REPRESENTATION_XCDR1;
    /* What the bridge's reliable writer and its in route's reader use (bridge_out.c writer_qos,
     * bridge_in.c): the same terms for both paths. A writer ignores the resource limits. */
    dds_qset_reliability(q, DDS_RELIABILITY_RELIABLE, DDS_MSECS(100));
    dds_qset_history(q, DDS_HISTORY_KEEP_ALL, 0);
    dds_qset_resource_limits(q, (int32_t)DEPTH, DDS_LENGTH_UNLIMITED, (int32_t)DEPTH);
    dds_qset_durability(q, DDS_DURABILITY_VOLATILE);
    dds_qset_data_representation(q, 1, &rep);
    return q;
}

static int plain_open(endpoint *e, int side)
{
    const char *defaults = ferry_bridge_dds_defaults();
    size_t n = strlen(defaults) + strlen(env.dds_config[side]) + 2;
    char *cfg = malloc(n);
    if (!cfg)
        return -1;
    snprintf(cfg, n, "%s,%s", defaults, env.dds_config[side]);
    e->domain = dds_create_domain(DDS_DOMAIN_PLAIN, cfg);
    free(cfg);
    if (e->domain < 0)
        return dds_fail("dds_create_domain", e->domain);
    e->participant = dds_create_participant(DDS_DOMAIN_PLAIN, NULL, NULL);
    if (e->participant < 0)
        return dds_fail("dds_create_participant", e->participant);
    char name[80];
    snprintf(name, sizeof name, "rt%s", e->a->topic);
    e->topic =
        dds_create_topic(e->participant, &sensor_msgs_msg_dds__Image__desc, name, NULL, NULL);
    if (e->topic < 0)
        return dds_fail("dds_create_topic", e->topic);
    return 0;
}

static void plain_close(endpoint *e)
{
    if (e->participant > 0)
        dds_delete(e->participant);
    if (e->domain > 0)
        dds_delete(e->domain);
    free(e->pixels);
}

static int ferry_open(endpoint *e, int side, const char *node_name)
{
    ferry_node_options o;
    ferry_node_options_init(&o);
    o.dir = env.dir[side];
    o.domain = 0;
    o.name = node_name;
    ferry_err err = ferry_node_create(&e->node, &o);
    return err ? ferry_fail("node", err) : 0;
}

static void ferry_close(endpoint *e)
{
    if (e->pub)
        ferry_publisher_destroy(e->pub);
    if (e->sub)
        ferry_subscriber_destroy(e->sub);
    if (e->node)
        ferry_node_destroy(e->node);
}

/* Publisher: open, wait for a match. */
static int pub_open(endpoint *e, int side)
{
    const row_args *a = e->a;
    int64_t until = cli_now_ns() + 20 * NS_PER_S;
    if (a->path == PATH_PLAIN) {
        if (plain_open(e, side) != 0)
            return -1;
        dds_qos_t *q = plain_qos();
        e->writer = dds_create_writer(e->participant, e->topic, q, NULL);
        dds_delete_qos(q);
        if (e->writer < 0)
            return dds_fail("dds_create_writer", e->writer);
        e->pixels = malloc(a->sz->bytes);
        if (!e->pixels)
            return -1;
        for (size_t i = 0; i < a->sz->bytes; i++)
            e->pixels[i] = (unsigned char)(i * 31u);
        memset(&e->msg, 0, sizeof e->msg);
        e->msg.header_.frame_id_ = "bench";
        e->msg.width_ = a->sz->width;
        e->msg.height_ = a->sz->height;
        e->msg.encoding_ = (char *)a->sz->encoding;
        e->msg.step_ = (uint32_t)(a->sz->bytes / a->sz->height);
        e->msg.data_._buffer = e->pixels;
        e->msg.data_._length = e->msg.data_._maximum = (uint32_t)a->sz->bytes;
        e->msg.data_._release = false;
        for (;;) {
            dds_publication_matched_status_t st;
            if (dds_get_publication_matched_status(e->writer, &st) == 0 && st.current_count > 0)
                return 0;
            if (cli_now_ns() > until) {
                fprintf(stderr, "ferry bench: plain writer: no reader matched in 20 s\n");
                return -1;
            }
            usleep(10000);
        }
    }
    if (ferry_open(e, side, "bench_pub") != 0)
        return -1;
    ferry_publisher_options o;
    ferry_publisher_options_init(&o);
    /* Bridge A's reliable route subscribes with a blocking subscriber: the lossless path. */
    o.admit_blocking = true;
    ferry_err err = ferry_publisher_create(&e->pub, e->node, a->topic, FERRY_IMAGE_TYPE_NAME,
                                           FERRY_IMAGE_TYPE_HASH, &o);
    if (err)
        return ferry_fail("publisher", err);
    /* Bridge A subscribes at its next scan. */
    err = ferry_publisher_wait_subscribers(e->pub, 1, 20 * NS_PER_S);
    return err ? ferry_fail("waiting for bridge A's subscriber", err) : 0;
}

/* Sends one message; 1 when the transport gave up on it (counted lost), -1 on error. */
static int pub_send(endpoint *e, uint64_t seq, uint32_t flags, int64_t *send_ns)
{
    const row_args *a = e->a;
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    if (a->path == PATH_PLAIN) {
        bench_wire w = {.seq = seq, .flags = flags};
        e->msg.header_.stamp_.sec_ = (int32_t)wall.tv_sec;
        e->msg.header_.stamp_.nanosec_ = (uint32_t)wall.tv_nsec;
        w.send_ns = *send_ns = cli_now_ns();
        memcpy(e->pixels, &w, sizeof w);
        dds_return_t rc = dds_write(e->writer, &e->msg);
        if (rc == DDS_RETCODE_TIMEOUT)
            return 1;
        return rc < 0 ? dds_fail("dds_write", rc) : 0;
    }
    ferry_image img;
    ferry_err err = ferry_image_loan(e->pub, a->sz->width, a->sz->height, a->sz->encoding, 0, &img);
    int64_t until = cli_now_ns() + 200 * NS_PER_MS;
    while (err == FERRY_EPOOL && cli_now_ns() < until) {
        ferry_publisher_poll(e->pub, 100000);
        err = ferry_image_loan(e->pub, a->sz->width, a->sz->height, a->sz->encoding, 0, &img);
    }
    if (err == FERRY_EPOOL)
        return 1;
    if (err)
        return ferry_fail("image loan", err);
    /* Warm-up frames touch every page of the chunk once, as a camera's first frames would. */
    if (flags & BENCH_F_WARMUP)
        memset(img.data, 0x5a, img.data_size);
    img.header->stamp.sec = (int32_t)wall.tv_sec;
    img.header->stamp.nanosec = (uint32_t)wall.tv_nsec;
    snprintf(img.header->frame_id, sizeof img.header->frame_id, "bench");
    /* As for the plain path: the clock starts when the frame is in the sender's buffer. */
    bench_wire w = {.seq = seq, .send_ns = cli_now_ns(), .flags = flags};
    *send_ns = w.send_ns;
    memcpy(img.data, &w, sizeof w);
    err = ferry_image_publish(e->pub, &img);
    if (err) {
        ferry_image_loan_release(e->pub, &img);
        /* Bridge A's blocking subscriber stayed full for the publisher's block timeout (100 ms):
         * the frame is not published, as a plain writer's dds_write that times out. */
        if (err == FERRY_ETIMEDOUT)
            return 1;
        return ferry_fail("image publish", err);
    }
    return 0;
}

static void pub_idle(endpoint *e, int64_t ns)
{
    if (e->a->path == PATH_BRIDGED)
        ferry_publisher_poll(e->pub, ns);
    else
        usleep((useconds_t)(ns / 1000));
}

static int sub_open(endpoint *e, int side)
{
    const row_args *a = e->a;
    if (a->path == PATH_PLAIN) {
        if (plain_open(e, side) != 0)
            return -1;
        dds_qos_t *q = plain_qos();
        e->reader = dds_create_reader(e->participant, e->topic, q, NULL);
        dds_delete_qos(q);
        if (e->reader < 0)
            return dds_fail("dds_create_reader", e->reader);
        e->waitset = dds_create_waitset(e->participant);
        dds_entity_t rc = dds_create_readcondition(e->reader, DDS_ANY_STATE);
        if (e->waitset < 0 || rc < 0)
            return dds_fail("waitset", e->waitset < 0 ? e->waitset : rc);
        dds_return_t r = dds_waitset_attach(e->waitset, rc, 0);
        return r < 0 ? dds_fail("dds_waitset_attach", r) : 0;
    }
    if (ferry_open(e, side, "bench_sub") != 0)
        return -1;
    ferry_subscriber_options o;
    ferry_subscriber_options_init(&o);
    o.depth = DEPTH;
    ferry_err err = ferry_subscriber_create(&e->sub, e->node, a->topic, FERRY_IMAGE_TYPE_NAME,
                                            FERRY_IMAGE_TYPE_HASH, &o);
    return err ? ferry_fail("subscriber", err) : 0;
}

/* The next message: 0 and *w, *recv_ns filled; 1 when none came within timeout_ns; -1 error. */
static int sub_recv(endpoint *e, bench_wire *w, int64_t *recv_ns, int64_t timeout_ns)
{
    if (e->a->path == PATH_PLAIN) {
        bool waited = false;
        for (;;) {
            void *buf[1] = {NULL};
            dds_sample_info_t info[1];
            dds_return_t n = dds_take(e->reader, buf, info, 1, 1);
            if (n < 0)
                return dds_fail("dds_take", n);
            if (n > 0) {
                *recv_ns = cli_now_ns();
                const sensor_msgs_msg_dds__Image_ *m = buf[0];
                bool ok = info[0].valid_data && m->data_._length >= sizeof *w;
                if (ok)
                    memcpy(w, m->data_._buffer, sizeof *w);
                dds_return_loan(e->reader, buf, n);
                if (ok)
                    return 0;
                continue; /* a state change, not data */
            }
            if (waited)
                return 1;
            dds_return_t r = dds_waitset_wait(e->waitset, NULL, 0, timeout_ns);
            if (r < 0)
                return dds_fail("dds_waitset_wait", r);
            if (r == 0)
                return 1;
            waited = true;
        }
    }
    ferry_sample s;
    ferry_err err = ferry_take(e->sub, &s);
    if (err == FERRY_EAGAIN) {
        err = ferry_wait(e->sub, timeout_ns);
        if (err == FERRY_ETIMEDOUT)
            return 1;
        if (err)
            return ferry_fail("wait", err);
        err = ferry_take(e->sub, &s);
        if (err == FERRY_EAGAIN)
            return 1;
    }
    if (err)
        return ferry_fail("take", err);
    *recv_ns = cli_now_ns();
    ferry_image_view v;
    err = ferry_image_view_get(&s, &v);
    bool ok = err == FERRY_OK && v.data_size >= sizeof *w;
    if (ok)
        memcpy(w, v.data, sizeof *w);
    ferry_release(e->sub, &s);
    if (!ok) {
        fprintf(stderr, "ferry bench: a sample that is not a valid image\n");
        return -1;
    }
    return 0;
}

static int sub_main(int side, const void *arg)
{
    const row_args *a = arg;
    row_ctl *c = &env.sh->row;
    endpoint e = {.a = a};
    cli_lat lat;
    size_t cap = a->mode == MODE_PACED ? a->paced_count : LAT_FLAT_CAP;
    int status = 1;
    int64_t start = cli_now_ns(), done_seen = 0;
    uint64_t last_seq = 0;
    if (!cli_lat_init(&lat, cap))
        return 1;
    if (sub_open(&e, side) != 0)
        goto out;

    for (;;) {
        bench_wire w;
        int64_t now;
        int rc = sub_recv(&e, &w, &now, 100 * NS_PER_MS);
        if (rc < 0)
            goto out;
        if (rc == 1) {
            now = cli_now_ns();
            if (atomic_load(&c->pub_done)) {
                if (done_seen == 0)
                    done_seen = now;
                else if (now - done_seen > SUB_IDLE_END_NS)
                    break;
            } else if (atomic_load(&c->warm_seen) == 0 && now - start > 60 * NS_PER_S) {
                fprintf(stderr, "ferry bench: %s: nothing received in 60 s\n", a->topic);
                goto out;
            }
            continue;
        }
        if (w.seq <= last_seq)
            c->sub_disorder++;
        last_seq = w.seq;
        if (w.flags & BENCH_F_WARMUP) {
            atomic_fetch_add(&c->warm_seen, 1);
            continue;
        }
        cli_lat_add(&lat, now - w.send_ns);
        c->sub_received++;
        c->last_recv_ns = now;
        atomic_fetch_add(&c->received, 1);
        if (atomic_load(&c->pub_waiting))
            cli_futex_wake(&c->received);
        if (w.flags & BENCH_F_END)
            break;
    }
    c->p50_ns = cli_lat_pct(&lat, 50.0);
    c->p99_ns = cli_lat_pct(&lat, 99.0);
    c->max_ns = cli_lat_max(&lat);
    status = 0;
out:
    atomic_store(&c->sub_done, 1);
    cli_lat_free(&lat);
    if (a->path == PATH_PLAIN)
        plain_close(&e);
    else
        ferry_close(&e);
    return status;
}

/* Flat rows: waits until fewer than window measured messages are in flight. A message that
 * does not arrive within STALL_NS is written off (forgiven), so a loss cannot stall the run. */
static void pub_window(endpoint *e, uint64_t sent, uint32_t window, uint64_t *forgiven)
{
    row_ctl *c = &env.sh->row;
    int64_t since = 0;
    for (;;) {
        uint32_t got = atomic_load(&c->received);
        if (sent - got - *forgiven < window)
            return;
        int64_t now = cli_now_ns();
        if (since == 0)
            since = now;
        else if (now - since > STALL_NS) {
            (*forgiven)++;
            since = 0;
            continue;
        }
        /* Order: waiting is set before received is read again, and the subscriber increments
         * received before it reads waiting, so one of the two sees the other. */
        atomic_store(&c->pub_waiting, 1);
        if (atomic_load(&c->received) == got)
            cli_futex_wait(&c->received, got, 20 * NS_PER_MS);
        atomic_store(&c->pub_waiting, 0);
        if (e->a->path == PATH_BRIDGED)
            ferry_publisher_poll(e->pub, 0);
    }
}

static int pub_main(int side, const void *arg)
{
    const row_args *a = arg;
    row_ctl *c = &env.sh->row;
    endpoint e = {.a = a};
    int status = 1;
    int64_t ts, until;
    uint64_t seq = 0;
    if (pub_open(&e, side) != 0)
        goto out;

    /* Warm-up until the subscriber has seen a few: routes, discovery and first touches done. */
    until = cli_now_ns() + 40 * NS_PER_S;
    while (atomic_load(&c->warm_seen) < WARMUP_FRAMES) {
        if (atomic_load(&c->sub_done) || cli_now_ns() > until) {
            fprintf(stderr, "ferry bench: %s %s: warm-up frames do not arrive\n",
                    path_names[a->path], a->topic);
            goto out;
        }
        if (pub_send(&e, ++seq, BENCH_F_WARMUP, &ts) < 0)
            goto out;
        pub_idle(&e, WARMUP_GAP_NS);
    }
    pub_idle(&e, 200 * NS_PER_MS);

    uint32_t window = a->sz->bytes <= 4096 ? WINDOW_SMALL : WINDOW_LARGE;
    int64_t period = NS_PER_S / a->sz->hz;
    int64_t start = cli_now_ns();
    uint64_t sent = 0, forgiven = 0;
    for (;;) {
        bool last;
        if (a->mode == MODE_PACED) {
            cli_sleep_until(start + (int64_t)sent * period);
            last = sent + 1 == a->paced_count;
        } else {
            pub_window(&e, sent, window, &forgiven);
            last = cli_now_ns() - start >= a->flat_ns;
        }
        int rc = pub_send(&e, ++seq, last ? BENCH_F_END : 0, &ts);
        if (rc < 0)
            goto out;
        if (rc == 1)
            c->write_failed++;
        if (sent == 0)
            c->first_send_ns = ts;
        sent++;
        if (last)
            break;
    }
    c->sent = sent;
    status = 0;
out:
    atomic_store(&c->pub_done, 1);
    /* Stay until the subscriber is done: a reliable writer that goes early loses what it has
     * not delivered yet, and bridge A may not have taken everything. */
    until = cli_now_ns() + 30 * NS_PER_S;
    while (!atomic_load(&c->sub_done) && cli_now_ns() < until)
        pub_idle(&e, 10 * NS_PER_MS);
    if (a->path == PATH_PLAIN)
        plain_close(&e);
    else
        ferry_close(&e);
    return status;
}

/* ---------------------------------------------------------------------------------------------
 * Bridges
 * ------------------------------------------------------------------------------------------- */

static void bridge_log(void *arg, ferry_log_level level, const char *message)
{
    fprintf(stderr, "ferry bench: bridge %c: %s%s\n", *(const char *)arg,
            level == FERRY_LOG_ERROR ? "error: " : "", message);
}

static int bridge_main(int side, const void *arg)
{
    (void)arg;
    bridge_ctl *c = &env.sh->bridge[side];
    static const char *const patterns[] = {TOPIC_PREFIX "*"};
    static const char names[2] = {'A', 'B'};
    ferry_bridge_options o;
    ferry_bridge *b;
    ferry_bridge_options_init(&o);
    o.dir = env.dir[side];
    o.domain = 0;
    o.dds_domain = DDS_DOMAIN_BRIDGE;
    o.patterns = patterns;
    o.npatterns = 1;
    o.direction = side == SIDE_A ? FERRY_BRIDGE_OUT : FERRY_BRIDGE_IN;
    o.depth = DEPTH;
    o.dds_config = env.dds_config[side];
    o.log = bridge_log;
    o.log_arg = (void *)&names[side];
    o.log_level = FERRY_LOG_WARN;
    ferry_err err = ferry_bridge_create(&b, &o);
    if (err) {
        fprintf(stderr, "ferry bench: bridge %c: %s\n", names[side], ferry_strerror(err));
        atomic_store(&c->ready, 2);
        return 1;
    }
    atomic_store(&c->ready, 1);
    while (!atomic_load(&c->stop)) {
        err = ferry_bridge_run(b, 100 * NS_PER_MS);
        if (err) {
            fprintf(stderr, "ferry bench: bridge %c: %s\n", names[side], ferry_strerror(err));
            break;
        }
        ferry_bridge_stats_get(b, &c->st);
    }
    ferry_bridge_stats_get(b, &c->st);
    ferry_bridge_destroy(b);
    return err ? 1 : 0;
}

/* ---------------------------------------------------------------------------------------------
 * Driver
 * ------------------------------------------------------------------------------------------- */

/* Waits for a child until deadline (or a stop request); kills it then. Its exit status, or -1. */
static int reap(pid_t pid, int64_t deadline)
{
    for (;;) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) {
            untrack_child(pid);
            return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        }
        if (r < 0 && errno != EINTR) {
            untrack_child(pid);
            return -1;
        }
        if (stop_flag || cli_now_ns() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            untrack_child(pid);
            return -1;
        }
        usleep(20000);
    }
}

static void run_row(const size_spec *sz, int path, int mode, const plan *p, int index, row *out)
{
    memset(out, 0, sizeof *out);
    out->sz = sz;
    out->path = path;
    out->mode = mode;
    row_args a = {.sz = sz, .path = path, .mode = mode, .flat_ns = p->flat_ns};
    a.paced_count = sz->bytes <= 4096 ? p->paced_small : p->paced_large;
    snprintf(a.topic, sizeof a.topic, TOPIC_PREFIX "r%d_%s", index,
             path == PATH_PLAIN ? "plain" : "bridged");
    memset(&env.sh->row, 0, sizeof env.sh->row);

    pid_t sub = spawn(SIDE_B, sub_main, &a);
    if (sub < 0)
        return;
    pid_t pub = spawn(SIDE_A, pub_main, &a);
    if (pub < 0) {
        reap(sub, 0);
        return;
    }
    int64_t measured = mode == MODE_PACED ? (int64_t)a.paced_count * NS_PER_S / sz->hz : p->flat_ns;
    int64_t deadline = cli_now_ns() + 120 * NS_PER_S + measured;
    int prc = reap(pub, deadline);
    int src = reap(sub, prc == 0 ? deadline : cli_now_ns() + 5 * NS_PER_S);
    if (prc != 0 || src != 0)
        return;

    const row_ctl *c = &env.sh->row;
    out->ok = true;
    out->sent = c->sent;
    out->received = c->sub_received;
    out->lost = c->sent > c->sub_received ? c->sent - c->sub_received : 0;
    out->p50_us = (double)c->p50_ns / 1e3;
    out->p99_us = (double)c->p99_ns / 1e3;
    out->max_us = (double)c->max_ns / 1e3;
    int64_t span = c->last_recv_ns - c->first_send_ns;
    out->msgs_per_s = span > 0 ? (double)c->sub_received * (double)NS_PER_S / (double)span : 0.0;
    out->mb_per_s = out->msgs_per_s * (double)sz->bytes / 1e6;
    if (c->sub_received > c->sent)
        fprintf(stderr, "ferry bench: %s: %llu received for %llu sent (duplicates)\n", a.topic,
                (unsigned long long)c->sub_received, (unsigned long long)c->sent);
    if (c->sub_disorder)
        fprintf(stderr, "ferry bench: %s: %llu messages out of order\n", a.topic,
                (unsigned long long)c->sub_disorder);
}

static pid_t bridge_pid[2];

static int start_bridges(void)
{
    for (int s = 0; s < 2; s++) {
        bridge_pid[s] = spawn(s, bridge_main, NULL);
        if (bridge_pid[s] < 0)
            return -1;
    }
    int64_t until = cli_now_ns() + 20 * NS_PER_S;
    for (int s = 0; s < 2; s++) {
        uint32_t r;
        while ((r = atomic_load(&env.sh->bridge[s].ready)) == 0) {
            if (stop_flag || cli_now_ns() > until)
                return cli_fail("bench", 1, "bridge %c did not start", s ? 'B' : 'A');
            usleep(20000);
        }
        if (r != 1)
            return cli_fail("bench", 1, "bridge %c did not start", s ? 'B' : 'A');
    }
    return 0;
}

static void stop_bridges(void)
{
    for (int s = 0; s < 2; s++)
        atomic_store(&env.sh->bridge[s].stop, 1);
    for (int s = 0; s < 2; s++)
        if (bridge_pid[s] > 0)
            reap(bridge_pid[s], cli_now_ns() + 10 * NS_PER_S);
}

static char *image_name(const size_spec *sz, char *buf, size_t cap)
{
    snprintf(buf, cap, "%ux%u %s", sz->width, sz->height, sz->encoding);
    return buf;
}

static void mode_name(const row *r, char *buf, size_t cap)
{
    if (r->mode == MODE_PACED)
        snprintf(buf, cap, "%u Hz", r->sz->hz);
    else
        snprintf(buf, cap, "flat/%u", r->sz->bytes <= 4096 ? WINDOW_SMALL : WINDOW_LARGE);
}

static void print_header(void)
{
    printf("%9s %-16s %-10s %-8s %7s %10s %10s %10s %10s %9s %6s\n", "size B", "image", "path",
           "mode", "msgs", "p50 us", "p99 us", "max us", "msgs/s", "MB/s", "lost");
}

static void print_row(const row *r)
{
    char img[32], mode[16];
    image_name(r->sz, img, sizeof img);
    mode_name(r, mode, sizeof mode);
    if (!r->ok) {
        printf("%9zu %-16s %-10s %-8s %7s\n", r->sz->bytes, img, path_names[r->path], mode,
               "error");
        return;
    }
    printf("%9zu %-16s %-10s %-8s %7llu %10.1f %10.1f %10.1f %10.1f %9.1f %6llu\n", r->sz->bytes,
           img, path_names[r->path], mode, (unsigned long long)r->received, r->p50_us, r->p99_us,
           r->max_us, r->msgs_per_s, r->mb_per_s, (unsigned long long)r->lost);
}

static const row *find(const row *rows, size_t n, size_t bytes, int path, int mode)
{
    for (size_t i = 0; i < n; i++)
        if (rows[i].ok && rows[i].sz->bytes == bytes && rows[i].path == path &&
            rows[i].mode == mode)
            return &rows[i];
    return NULL;
}

static void print_ratios(const row *rows, size_t n)
{
    printf("\nbridged / plain DDS:\n");
    for (size_t i = 0; i < SIZE_COUNT; i++) {
        const row *bp = find(rows, n, sizes[i].bytes, PATH_BRIDGED, MODE_PACED);
        const row *pp = find(rows, n, sizes[i].bytes, PATH_PLAIN, MODE_PACED);
        const row *bf = find(rows, n, sizes[i].bytes, PATH_BRIDGED, MODE_FLAT);
        const row *pf = find(rows, n, sizes[i].bytes, PATH_PLAIN, MODE_FLAT);
        printf("  %9zu B: ", sizes[i].bytes);
        if (bp && pp && pp->p50_us > 0)
            printf("p50 %.2fx (%.1f vs %.1f us), p99 %.2fx", bp->p50_us / pp->p50_us, bp->p50_us,
                   pp->p50_us, pp->p99_us > 0 ? bp->p99_us / pp->p99_us : 0.0);
        else
            printf("p50 n/a");
        if (bf && pf && pf->msgs_per_s > 0)
            printf("; flat msgs/s %.2fx (%.0f vs %.0f)", bf->msgs_per_s / pf->msgs_per_s,
                   bf->msgs_per_s, pf->msgs_per_s);
        printf("\n");
    }
    const row *bp = find(rows, n, 2764800, PATH_BRIDGED, MODE_PACED);
    const row *pp = find(rows, n, 2764800, PATH_PLAIN, MODE_PACED);
    if (bp && pp && pp->p50_us > 0) {
        double add = (bp->p50_us / pp->p50_us - 1.0) * 100.0;
        printf("  [%s] the bridge adds under 10%% to plain DDS p50 latency at 2,764,800 B "
               "(%+.1f%%)\n",
               add < 10.0 ? "pass" : "miss", add);
    } else {
        printf("  [n/a ] the bridge adds under 10%% to plain DDS p50 latency at 2,764,800 B\n");
    }
}

static int write_csv(const char *path, const row *rows, size_t n)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return cli_fail("bench", 1, "cannot write %s: %s", path, strerror(errno));
    fputs("size_bytes,image,path,mode,rate_hz,window,sent,received,lost,p50_us,p99_us,max_us,"
          "msgs_per_s,mb_per_s\n",
          f);
    for (size_t i = 0; i < n; i++) {
        const row *r = &rows[i];
        if (!r->ok)
            continue;
        char img[32];
        fprintf(f, "%zu,%s,%s,%s,%u,%u,%llu,%llu,%llu,%.3f,%.3f,%.3f,%.1f,%.3f\n", r->sz->bytes,
                image_name(r->sz, img, sizeof img), path_names[r->path],
                r->mode == MODE_PACED ? "paced" : "flat", r->mode == MODE_PACED ? r->sz->hz : 0,
                r->mode == MODE_FLAT ? (r->sz->bytes <= 4096 ? WINDOW_SMALL : WINDOW_LARGE) : 0,
                (unsigned long long)r->sent, (unsigned long long)r->received,
                (unsigned long long)r->lost, r->p50_us, r->p99_us, r->max_us, r->msgs_per_s,
                r->mb_per_s);
    }
    if (fclose(f) != 0)
        return cli_fail("bench", 1, "cannot write %s: %s", path, strerror(errno));
    return 0;
}

static void usage(FILE *to)
{
    fputs("usage: ferry bench bridge [--quick] [--csv FILE]\n"
          "\n"
          "Latency and throughput of ferry frames across a veth pair between two network\n"
          "namespaces (made and removed by the benchmark; root needed): ferry publisher ->\n"
          "bridge (out) -> DDS -> bridge (in) -> ferry subscriber, next to a plain Cyclone DDS\n"
          "writer -> reader of the same type (sensor_msgs::msg::dds_::Image_) over the same\n"
          "link, for 64 B, 2,764,800 B (1280x720 rgb8) and 6,220,800 B (1920x1080 rgb8).\n"
          "  --quick     fewer messages (about half a minute)\n"
          "  --csv FILE  also write the results as CSV\n",
          to);
}

int bench_bridge_cmd(int argc, char **argv)
{
    static const struct option options[] = {
        CLI_OPT_QUICK,
        CLI_OPT_CSV,
        CLI_OPT_HELP,
        CLI_OPT_END,
    };
    cli_opts o;
    cli_parser op = {.cmd = "bench bridge", .options = options, .usage = usage, .opts = &o};
    cli_opts_init(&o);
    if (cli_getopt(&op, argc, argv) != CLI_OPTS_END)
        return op.status;
    if (optind < argc)
        return cli_fail("bench bridge", 2,
                        "unexpected argument '%s' (try 'ferry bench bridge "
                        "--help')",
                        argv[optind]);
    if (geteuid() != 0)
        return cli_fail("bench", 1, "bridge: needs root (it makes network namespaces)");

    plan p = o.quick ? (plan){.paced_small = 200, .paced_large = 60, .flat_ns = NS_PER_S}
                     : (plan){.paced_small = 1000, .paced_large = 300, .flat_ns = 3 * NS_PER_S};
    cli_catch_signal(SIGINT, on_signal);
    cli_catch_signal(SIGTERM, on_signal);
    cli_catch_signal(SIGHUP, on_signal);
    atexit(cleanup);
    setvbuf(stdout, NULL, _IOLBF, 0);

    int status = setup();
    if (status == 0)
        status = start_bridges();
    if (status != 0) {
        cleanup();
        return status;
    }

    struct utsname u;
    if (uname(&u) != 0)
        snprintf(u.release, sizeof u.release, "?");
    printf("machine: %ld CPUs, Linux %s\n", sysconf(_SC_NPROCESSORS_ONLN), u.release);
    printf("veth %s (%s, ns %s) <-> %s (%s, ns %s); paced: %u msgs at 100 Hz (64 B), %u at "
           "30 Hz (frames); flat: %.0f s per row\n\n",
           env.veth[0], env.ip[0], env.ns[0], env.veth[1], env.ip[1], env.ns[1], p.paced_small,
           p.paced_large, (double)p.flat_ns / NS_PER_S);
    print_header();

    row rows[SIZE_COUNT * PATH_COUNT * MODE_COUNT];
    size_t n = 0;
    for (int mode = 0; mode < MODE_COUNT && !stop_flag; mode++)
        for (size_t i = 0; i < SIZE_COUNT && !stop_flag; i++)
            for (int path = 0; path < PATH_COUNT && !stop_flag; path++) {
                row *r = &rows[n];
                run_row(&sizes[i], path, mode, &p, (int)n, r);
                n++;
                if (!r->ok)
                    status = 1;
                print_row(r);
            }
    stop_bridges();
    const ferry_bridge_stats *a = &env.sh->bridge[SIDE_A].st, *b = &env.sh->bridge[SIDE_B].st;
    printf("\nmsgs: measured messages received; lost: sent - received (reliable DDS on both "
           "paths, KEEP_ALL, readers at most %u untaken).\n"
           "flat/N: as fast as N messages in flight allow (the subscriber's count, shared "
           "memory, paces the publisher);\n"
           "its latency includes waiting behind the other messages in flight.\n"
           "Both paths use the bridge's Cyclone settings (ferry_bridge_dds_defaults: 65500 B "
           "messages, 62 KiB fragments,\n"
           "socket buffers up to 64/16 MiB, WhcHigh 48 MiB) and unicast discovery over the "
           "veth; rmem_max/wmem_max raised to 64 MiB.\n"
           "bridge A: out_taken=%llu out_written=%llu out_early=%llu out_failed=%llu "
           "out_queue_dropped=%llu out_write_timeouts=%llu; "
           "bridge B: in_received=%llu in_published=%llu in_dropped=%llu in_lost=%llu\n",
           DEPTH, (unsigned long long)a->out_taken, (unsigned long long)a->out_written,
           (unsigned long long)a->out_early, (unsigned long long)a->out_failed,
           (unsigned long long)a->out_queue_dropped, (unsigned long long)a->out_write_timeouts,
           (unsigned long long)b->in_received, (unsigned long long)b->in_published,
           (unsigned long long)b->in_dropped, (unsigned long long)b->in_lost);
    print_ratios(rows, n);
    if (stop_flag) {
        fprintf(stderr, "ferry bench: stopped by a signal\n");
        status = 130;
    }
    cleanup();
    if (o.csv && write_csv(o.csv, rows, n) != 0 && status == 0)
        status = 1;
    return status;
}
