/*
 * Memory is reserved before it is touched, and limits give errors, never signals. Each case runs
 * in a forked child, and the parent checks that the child exited normally (a full file system
 * once meant SIGBUS, a memory cgroup's limit the OOM killer's SIGKILL):
 *
 *   full tmpfs            the domain directory's file system is full: creating a publisher or
 *                         a subscriber gives FERRY_ENOMEM (errno ENOSPC) and leaves nothing
 *                         behind; endpoints made before go on working; once space is back,
 *                         creation works again
 *   memory cgroup limit   in a child cgroup of 96 MiB: a 256 MiB loan and a reserve of 4 x 32
 *                         MiB give FERRY_ENOMEM, the reserve leaves the pool as it was, a 1 MiB
 *                         loan still works, and nothing is OOM-killed
 *   growing at once       four processes of a cgroup of 96 MiB each reserve 32 MiB at the same
 *                         moment, eight rounds: some get FERRY_ENOMEM, none is OOM-killed
 *   more than available   a loan of twice MemAvailable gives FERRY_ENOMEM at once, without
 *                         allocating: the segment's allocated blocks and the process's resident
 *                         set stay as they were
 *
 * The first two need root (a mount namespace, a cgroup); without it they are skipped.
 */
#include "testutil.h"

#include "platform/platform.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#define TYPE "test/memory"
#define TOPIC "/mem/cam"
#define MIB ((size_t)1 << 20)

/* --- helpers ------------------------------------------------------------------------------ */

/* Bytes allocated to this process's ferry data segments (st_blocks of each memfd). */
static uint64_t data_bytes_allocated(void)
{
    DIR *d = opendir("/proc/self/fd");
    TU_CHECK(d != NULL);
    uint64_t bytes = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char path[300], target[128];
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(path, target, sizeof target - 1);
        if (n < 0)
            continue;
        target[n] = '\0';
        struct stat st;
        if (strncmp(target, "/memfd:ferry-data", 17) == 0 && stat(path, &st) == 0)
            bytes += (uint64_t)st.st_blocks * 512;
    }
    closedir(d);
    return bytes;
}

/* A field of /proc/self/status or /proc/meminfo, in kB. */
static uint64_t kb_field(const char *file, const char *name)
{
    FILE *f = fopen(file, "r");
    TU_CHECK(f != NULL);
    char line[256];
    unsigned long long kb = 0;
    size_t n = strlen(name);
    while (fgets(line, sizeof line, f) != NULL)
        if (strncmp(line, name, n) == 0 && line[n] == ':') {
            kb = strtoull(line + n + 1, NULL, 10);
            break;
        }
    fclose(f);
    TU_CHECK_MSG(kb > 0, "%s: no %s", file, name);
    return kb;
}

static int topic_entries(const char *root)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%u/mem.cam", root, tu_domain());
    return tu_dir_entries(path);
}

#define CHECK_ENOMEM(err, saved_errno, want_errno)                                                 \
    TU_CHECK_MSG((err) == FERRY_ENOMEM && (saved_errno) == (want_errno),                           \
                 "got %s, errno %d (%s); expected FERRY_ENOMEM, errno %d (%s)",                    \
                 ferry_errname(err), (saved_errno), strerror(saved_errno), (want_errno),           \
                 strerror(want_errno))

/* Children end by SIGALRM after 20 s: waiting longer always sees how they ended. */
#define CHILD_WAIT_MS 25000

/* How a child ended (its wait status): 0 success, TU_SKIP skipped; a signal fails the test. */
static int child_result(int st, const char *what)
{
    TU_CHECK_MSG(!WIFSIGNALED(st), "%s: the child was killed by signal %d (%s)", what, WTERMSIG(st),
                 strsignal(WTERMSIG(st)));
    TU_CHECK_MSG(WIFEXITED(st) && (WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == TU_SKIP),
                 "%s: the child failed (status 0x%x)", what, (unsigned)st);
    return WEXITSTATUS(st);
}

/* --- a full tmpfs under the domain directory ---------------------------------------------- */

/* Writes a file until the file system says ENOSPC; returns its descriptor. */
static int fill(const char *dir)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/filler", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    TU_CHECK_MSG(fd >= 0, "%s: %s", path, strerror(errno));
    static char block[64 * 1024];
    memset(block, 0x5a, sizeof block);
    for (size_t size = sizeof block; size >= 512; size /= 2) {
        ssize_t n;
        while ((n = write(fd, block, size)) > 0) {
        }
        TU_CHECK_MSG(n < 0 && errno == ENOSPC, "filling %s: %s", path, strerror(errno));
    }
    struct statfs sf;
    TU_CHECK(fstatfs(fd, &sf) == 0);
    TU_EQ_U64(sf.f_bavail, 0);
    return fd;
}

static void unfill(const char *dir, int fd)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/filler", dir);
    TU_CHECK(close(fd) == 0);
    TU_CHECK(unlink(path) == 0);
}

static void connect_both(ferry_publisher *a, ferry_publisher *b, ferry_subscriber *sub)
{
    ferry_time t0 = ferry_now();
    for (;;) {
        TU_OK(ferry_publisher_poll(a, TU_MS));
        TU_OK(ferry_publisher_poll(b, TU_MS));
        ferry_err e = ferry_subscriber_wait_publishers(sub, 2, TU_MS);
        if (e == FERRY_OK)
            break;
        TU_ERR(e, FERRY_ETIMEDOUT);
        TU_CHECK_MSG(tu_since(t0) < TU_WAIT_NS, "the subscriber did not connect to both");
    }
    uint32_t subs = 0;
    while (subs < 2 && tu_since(t0) < TU_WAIT_NS) {
        ferry_publisher_stats sa, sb;
        TU_OK(ferry_publisher_poll(a, TU_MS));
        TU_OK(ferry_publisher_poll(b, TU_MS));
        TU_OK(ferry_publisher_stats_get(a, &sa));
        TU_OK(ferry_publisher_stats_get(b, &sb));
        subs = sa.subscribers + sb.subscribers;
    }
    TU_CMP_U64(subs, >=, 2);
}

static int full_tmpfs_main(void *arg)
{
    const char *dir = arg;
    if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
        printf("    no mount namespace (%s): skipped\n", strerror(errno));
        return TU_SKIP;
    }
    if (mount("ferry-test", dir, "tmpfs", MS_NOSUID | MS_NODEV, "size=4m,mode=0700") != 0) {
        printf("    cannot mount a tmpfs (%s): skipped\n", strerror(errno));
        return TU_SKIP;
    }
    ferry_node_options o = tu_node_options("full");
    o.dir = dir;
    ferry_node *node = NULL;
    TU_OK(ferry_node_create(&node, &o));

    /* Made while there is room: a publisher and its subscriber. */
    ferry_publisher *early_pub = NULL, *pub = NULL;
    ferry_subscriber *early_sub = NULL, *sub = NULL;
    int e = 0;
    TU_OK(tu_try_publisher(node, TOPIC, TYPE, 4 * MIB, 64 * 1024, &early_pub, &e));
    TU_OK(tu_try_subscriber(node, TOPIC, TYPE, &early_sub, &e));
    tu_connect_local(early_pub, 1, early_sub, 1);
    tu_publish_pattern(early_pub, 64 * 1024, 1);
    TU_TAKE_INTACT(early_sub, 64 * 1024);

    int filler = fill(dir);
    int fds = tu_fd_count(), entries = topic_entries(dir);
    TU_CMP_I64(entries, >=, 3); /* the two status files and the publisher's socket */

    /* New endpoints need a page of the full file system for their status file: an error,
     * not SIGBUS at its first write, and nothing is left behind. */
    ferry_err err = tu_try_publisher(node, TOPIC, TYPE, 4 * MIB, 64 * 1024, &pub, &e);
    CHECK_ENOMEM(err, e, ENOSPC);
    TU_CHECK(pub == NULL);
    err = tu_try_subscriber(node, TOPIC, TYPE, &sub, &e);
    CHECK_ENOMEM(err, e, ENOSPC);
    TU_CHECK(sub == NULL);
    TU_CMP_I64(tu_fd_count(), ==, fds);
    TU_CMP_I64(topic_entries(dir), ==, entries);
    printf("    full tmpfs: creation gives %s (%s)\n", ferry_errname(err), strerror(e));

    /* The pair made before goes on: its status pages were reserved when it was made. */
    for (uint64_t seq = 2; seq < 10; seq++) {
        tu_publish_pattern(early_pub, 64 * 1024, seq);
        TU_TAKE_INTACT(early_sub, 64 * 1024);
        TU_OK(ferry_publisher_poll(early_pub, 0));
    }
    ferry_publisher_stats ps;
    TU_OK(ferry_publisher_stats_get(early_pub, &ps));
    TU_EQ_U64(ps.published, 9);
    TU_EQ_U64(ps.subscribers, 1);

    /* Room again: creation works, and the new subscriber gets both publishers. */
    unfill(dir, filler);
    TU_OK(tu_try_publisher(node, TOPIC, TYPE, 4 * MIB, 64 * 1024, &pub, &e));
    TU_OK(tu_try_subscriber(node, TOPIC, TYPE, &sub, &e));
    connect_both(early_pub, pub, sub);
    tu_publish_pattern(pub, 64 * 1024, 1);
    TU_TAKE_INTACT(sub, 64 * 1024);

    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_subscriber_destroy(early_sub));
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_publisher_destroy(early_pub));
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    TU_CHECK(umount(dir) == 0);
    return 0;
}

static int test_full_tmpfs(void)
{
    char dir[] = "/tmp/ferry-tmpfs-XXXXXX";
    TU_CHECK(mkdtemp(dir) != NULL);
    int st = tu_wait_status(tu_fork(full_tmpfs_main, dir, 20), CHILD_WAIT_MS);
    /* Removed before anything is asserted; the tmpfs went with the child's mount namespace. */
    int removed = rmdir(dir), e = errno;
    int rc = child_result(st, "full tmpfs");
    TU_CHECK_MSG(removed == 0, "rmdir %s: %s", dir, strerror(e));
    return rc;
}

/* --- a memory cgroup's limit -------------------------------------------------------------- */

#define CGROUP_LIMIT (96 * MIB)

typedef struct cgroup {
    char dir[PATH_MAX];
    bool v2;
} cgroup;

/* The mount point of the v2 hierarchy, or of the v1 one with the memory controller. */
static bool cgroup_mount(bool v2, char *out, size_t cap)
{
    FILE *f = fopen("/proc/self/mountinfo", "r");
    if (f == NULL)
        return false;
    char line[4096];
    bool found = false;
    while (!found && fgets(line, sizeof line, f) != NULL) {
        char root[PATH_MAX], point[PATH_MAX];
        const char *dash = strstr(line, " - ");
        if (dash == NULL || sscanf(line, "%*s %*s %*s %4095s %4095s", root, point) != 2)
            continue;
        char fstype[64], super[1024];
        if (sscanf(dash + 3, "%63s %*s %1023s", fstype, super) != 2)
            continue;
        bool match = v2 ? strcmp(fstype, "cgroup2") == 0
                        : strcmp(fstype, "cgroup") == 0 && (strstr(super, ",memory") != NULL ||
                                                            strncmp(super, "memory", 6) == 0);
        if (match && strcmp(root, "/") == 0 && strlen(point) < cap) {
            snprintf(out, cap, "%s", point);
            found = true;
        }
    }
    fclose(f);
    return found;
}

/* This process's path in the v2 hierarchy or under the v1 memory controller. */
static bool cgroup_path(bool v2, char *out, size_t cap)
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (f == NULL)
        return false;
    char line[4096];
    bool found = false;
    while (!found && fgets(line, sizeof line, f) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        char *controllers = strchr(line, ':');
        char *path = controllers ? strchr(controllers + 1, ':') : NULL;
        if (path == NULL)
            continue;
        *controllers++ = '\0';
        *path++ = '\0';
        bool match = v2 ? strcmp(line, "0") == 0 : strstr(controllers, "memory") != NULL;
        if (match && strlen(path) < cap) {
            snprintf(out, cap, "%s", strcmp(path, "/") == 0 ? "" : path);
            found = true;
        }
    }
    fclose(f);
    return found;
}

static bool write_file(const char *dir, const char *name, const char *value)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = write(fd, value, strlen(value));
    close(fd);
    return n == (ssize_t)strlen(value);
}

static bool read_file(const char *dir, const char *name, char *buf, size_t cap)
{
    char path[PATH_MAX + 64];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
        return false;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, cap - 1);
    close(fd);
    if (n < 0)
        return false;
    buf[n] = '\0';
    return true;
}

/* Makes a child of this process's memory cgroup with CGROUP_LIMIT: v2 when the memory
 * controller is enabled for children there, else v1. */
static bool cgroup_make(cgroup *cg)
{
    char limit[32];
    snprintf(limit, sizeof limit, "%zu", CGROUP_LIMIT);
    for (int v2 = 1; v2 >= 0; v2--) {
        char mount_point[PATH_MAX], path[PATH_MAX], control[256];
        if (!cgroup_mount(v2, mount_point, sizeof mount_point) ||
            !cgroup_path(v2, path, sizeof path))
            continue;
        int n = snprintf(cg->dir, sizeof cg->dir, "%s%s/ferry-test-%d", mount_point, path,
                         (int)getpid());
        if (n < 0 || (size_t)n >= sizeof cg->dir)
            continue;
        if (v2) {
            char parent[2 * PATH_MAX];
            snprintf(parent, sizeof parent, "%s%s", mount_point, path);
            if (!read_file(parent, "cgroup.subtree_control", control, sizeof control) ||
                strstr(control, "memory") == NULL)
                continue;
        }
        if (mkdir(cg->dir, 0755) != 0)
            continue;
        cg->v2 = v2;
        if (write_file(cg->dir, v2 ? "memory.max" : "memory.limit_in_bytes", limit))
            return true;
        rmdir(cg->dir);
    }
    return false;
}

/* OOM kills in the cgroup: v2 memory.events, v1 memory.oom_control ("oom_kill N"). */
static long cgroup_oom_kills(const cgroup *cg)
{
    char buf[1024];
    if (!read_file(cg->dir, cg->v2 ? "memory.events" : "memory.oom_control", buf, sizeof buf))
        return -1;
    const char *k = strstr(buf, "oom_kill ");
    return k ? strtol(k + 9, NULL, 10) : -1;
}

static void cgroup_remove(const cgroup *cg)
{
    /* The last charges of a process that just exited may take a moment to go. */
    for (int i = 0; i < 200 && rmdir(cg->dir) != 0; i++)
        tu_sleep_ns(10 * TU_MS);
}

static int cgroup_main(void *arg)
{
    const cgroup *cg = arg;
    char pid[32];
    snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    TU_CHECK_MSG(write_file(cg->dir, "cgroup.procs", pid), "joining %s: %s", cg->dir,
                 strerror(errno));
    uint64_t room = ferry__memory_headroom();
    TU_CMP_U64(room, <, CGROUP_LIMIT);

    ferry_node *node = tu_node("cgroup");
    ferry_publisher *pub = NULL;
    ferry_subscriber *sub = NULL;
    int e = 0;
    TU_OK(tu_try_publisher(node, TOPIC, TYPE, 1024 * MIB, 512 * MIB, &pub, &e));
    TU_OK(tu_try_subscriber(node, TOPIC, TYPE, &sub, &e));
    tu_connect_local(pub, 1, sub, 1);

    /* More than the cgroup may hold: an error, where the kernel's charge would have called the
     * OOM killer. */
    void *p = NULL;
    errno = 0;
    ferry_err err = ferry_loan(pub, 256 * MIB, &p);
    e = errno;
    CHECK_ENOMEM(err, e, ENOMEM);
    TU_CHECK(p == NULL);

    /* A reserve that does not fit leaves the pool as it was. */
    ferry_publisher_stats before, after;
    TU_OK(ferry_publisher_stats_get(pub, &before));
    uint64_t allocated = data_bytes_allocated();
    TU_ERR(ferry_publisher_reserve(pub, 32 * MIB, 4), FERRY_ENOMEM);
    TU_OK(ferry_publisher_stats_get(pub, &after));
    TU_EQ_U64(after.pool_bytes, before.pool_bytes);
    TU_EQ_U64(after.chunks_total, before.chunks_total);
    TU_EQ_U64(after.size_classes, before.size_classes);
    TU_EQ_U64(data_bytes_allocated(), allocated);

    /* What fits still works. */
    tu_publish_pattern(pub, MIB, 1);
    TU_TAKE_INTACT(sub, MIB);
    TU_OK(ferry_publisher_reserve(pub, 4 * MIB, 2));
    tu_publish_pattern(pub, 4 * MIB, 2);
    TU_TAKE_INTACT(sub, 4 * MIB);
    printf("    in a cgroup of %zu MiB (%s): headroom %" PRIu64 " MiB; 256 MiB loan and 4 x 32 "
           "MiB reserve refused, 1 and 4 MiB samples delivered\n",
           CGROUP_LIMIT / MIB, cg->v2 ? "v2" : "v1", room / MIB);

    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    return 0;
}

static int test_cgroup_limit(void)
{
    cgroup cg;
    if (!cgroup_make(&cg)) {
        printf("    no writable memory cgroup (v1 or v2): skipped\n");
        return TU_SKIP;
    }
    int st = tu_wait_status(tu_fork(cgroup_main, &cg, 20), CHILD_WAIT_MS);
    long kills = cgroup_oom_kills(&cg);
    cgroup_remove(&cg);
    TU_CHECK_MSG(!WIFSIGNALED(st), "the child in the cgroup was killed by signal %d (%s)",
                 WTERMSIG(st), strsignal(WTERMSIG(st)));
    TU_CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child failed (status 0x%x)",
                 (unsigned)st);
    TU_CMP_I64(kills, ==, 0);
    return 0;
}

/* Four processes of one cgroup grow their pools at the same moment, each by 32 MiB a round, in
 * a cgroup of 96 MiB: every step that fits alone, together more than the limit. Some get
 * FERRY_ENOMEM; none is OOM-killed. */
#define GROWERS 4
#define GROW_ROUNDS 8

typedef struct grower {
    const cgroup *cg;
    tu_pipe go, done;
} grower;

static int grower_main(void *arg)
{
    grower *g = arg;
    char pid[32];
    snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    TU_CHECK_MSG(write_file(g->cg->dir, "cgroup.procs", pid), "joining %s: %s", g->cg->dir,
                 strerror(errno));
    ferry_node *node = tu_node("grower");
    for (int round = 0; round < GROW_ROUNDS; round++) {
        ferry_publisher *pub = NULL;
        int e = 0;
        TU_OK(tu_try_publisher(node, TOPIC, TYPE, 256 * MIB, 64 * MIB, &pub, &e));
        uint64_t go = tu_recv(&g->go, CHILD_WAIT_MS);
        TU_EQ_U64(go, 1);
        ferry_err err = ferry_publisher_reserve(pub, 32 * MIB, 1);
        TU_CHECK_MSG(err == FERRY_OK || err == FERRY_ENOMEM, "reserve: %s", ferry_errname(err));
        TU_OK(ferry_publisher_destroy(pub));
        tu_send(&g->done, err == FERRY_OK ? 1 : 2);
    }
    TU_OK(ferry_node_destroy(node));
    return 0;
}

static int test_cgroup_concurrent_growth(void)
{
    cgroup cg;
    if (!cgroup_make(&cg)) {
        printf("    no writable memory cgroup (v1 or v2): skipped\n");
        return TU_SKIP;
    }
    grower g[GROWERS];
    pid_t pid[GROWERS];
    for (int i = 0; i < GROWERS; i++) {
        g[i].cg = &cg;
        g[i].go = tu_pipe_make();
        g[i].done = tu_pipe_make();
        pid[i] = tu_fork(grower_main, &g[i], 60);
    }
    uint64_t granted = 0, refused = 0;
    for (int round = 0; round < GROW_ROUNDS; round++) {
        for (int i = 0; i < GROWERS; i++)
            tu_send(&g[i].go, 1);
        for (int i = 0; i < GROWERS; i++) {
            uint64_t r = tu_recv(&g[i].done, CHILD_WAIT_MS);
            granted += r == 1;
            refused += r == 2;
        }
    }
    int st[GROWERS];
    for (int i = 0; i < GROWERS; i++)
        st[i] = tu_wait_status(pid[i], CHILD_WAIT_MS);
    long kills = cgroup_oom_kills(&cg);
    cgroup_remove(&cg);
    printf("    %d processes x %d rounds of 32 MiB at once in %zu MiB (%s): %" PRIu64
           " granted, %" PRIu64 " refused, %ld OOM kills\n",
           GROWERS, GROW_ROUNDS, CGROUP_LIMIT / MIB, cg.v2 ? "v2" : "v1", granted, refused, kills);
    for (int i = 0; i < GROWERS; i++) {
        TU_CHECK_MSG(!WIFSIGNALED(st[i]), "grower %d was killed by signal %d (%s)", i,
                     WTERMSIG(st[i]), strsignal(WTERMSIG(st[i])));
        TU_CHECK_MSG(WIFEXITED(st[i]) && WEXITSTATUS(st[i]) == 0, "grower %d failed (status 0x%x)",
                     i, (unsigned)st[i]);
        tu_pipe_close(&g[i].go);
        tu_pipe_close(&g[i].done);
    }
    TU_CMP_I64(kills, ==, 0);
    TU_CMP_U64(granted + refused, ==, GROWERS * GROW_ROUNDS);
    TU_CMP_U64(granted, >, 0);
    TU_CMP_U64(refused, >, 0); /* four at once never fit */
    return 0;
}

/* --- more than the machine has ------------------------------------------------------------ */

static int huge_loan_main(void *arg)
{
    (void)arg;
    uint64_t available = kb_field("/proc/meminfo", "MemAvailable") * 1024;
    uint64_t size = 2 * available;
    if (size > ((uint64_t)1 << 40)) { /* max_sample_size's cap */
        printf("    MemAvailable above 512 GiB: skipped\n");
        return TU_SKIP;
    }
    /* Never try it where the check would let it through: it would really be allocated. */
    uint64_t room = ferry__memory_headroom();
    TU_CMP_U64(room, <, size);

    ferry_node *node = tu_node("huge");
    ferry_publisher *pub = NULL;
    ferry_subscriber *sub = NULL;
    int e = 0;
    /* The pool's byte cap leaves room for the loan's size class (up to 1/8 above it). */
    TU_OK(tu_try_publisher(node, TOPIC, TYPE, (size_t)(size + size / 4), (size_t)size, &pub, &e));
    TU_OK(tu_try_subscriber(node, TOPIC, TYPE, &sub, &e));
    tu_connect_local(pub, 1, sub, 1);
    uint64_t allocated = data_bytes_allocated();
    uint64_t rss = kb_field("/proc/self/status", "VmRSS") * 1024;

    void *p = NULL;
    ferry_time t0 = ferry_now();
    errno = 0;
    ferry_err err = ferry_loan(pub, (size_t)size, &p);
    e = errno;
    int64_t took = tu_since(t0);
    CHECK_ENOMEM(err, e, ENOMEM);
    TU_CHECK(p == NULL);
    TU_ERR(ferry_publisher_reserve(pub, (size_t)size, 1), FERRY_ENOMEM);
    TU_CMP_I64(took, <, TU_SEC);
    TU_EQ_U64(data_bytes_allocated(), allocated);
    TU_CMP_U64(kb_field("/proc/self/status", "VmRSS") * 1024, <, rss + 16 * MIB);
    printf("    a %" PRIu64 " MiB loan (MemAvailable %" PRIu64 " MiB, headroom %" PRIu64
           " MiB): FERRY_ENOMEM in %" PRId64 " us, nothing allocated\n",
           size / MIB, available / MIB, room / MIB, took / 1000);

    tu_publish_pattern(pub, MIB, 1);
    TU_TAKE_INTACT(sub, MIB);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    return 0;
}

static int test_huge_loan(void)
{
    return child_result(tu_wait_status(tu_fork(huge_loan_main, NULL, 20), CHILD_WAIT_MS),
                        "huge loan");
}

/* --- main --------------------------------------------------------------------------------- */

int main(void)
{
    int results[] = {
        TU_RUN_ISOLATED(test_full_tmpfs),
        TU_RUN_ISOLATED(test_cgroup_limit),
        TU_RUN_ISOLATED(test_cgroup_concurrent_growth),
        TU_RUN_ISOLATED(test_huge_loan),
    };
    return tu_results(results, (int)(sizeof results / sizeof results[0]), 0);
}
