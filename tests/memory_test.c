/*
 * Memory is reserved before it is touched, and limits give errors, never signals. Each case runs
 * in a forked child, and the parent checks that the child exited normally (a full file system
 * once meant SIGBUS at the first write of a status file):
 *
 *   full tmpfs            the domain directory's file system is full: creating a publisher or
 *                         a subscriber gives FERRY_ENOMEM (errno ENOSPC) and leaves nothing
 *                         behind; endpoints made before go on working; once space is back,
 *                         creation works again
 *
 * It needs root (a mount namespace and a tmpfs); without it, it is skipped.
 */
#include "testutil.h"

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

static int topic_entries(const char *root)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%u/mem.cam", root, tu_domain());
    DIR *d = opendir(path);
    if (d == NULL)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            n++;
    closedir(d);
    return n;
}

static ferry_err try_publisher(ferry_node *node, size_t pool_bytes, size_t max_sample,
                               ferry_publisher **out, int *saved_errno)
{
    ferry_publisher_options po;
    ferry_publisher_options_init(&po);
    po.pool_bytes = pool_bytes;
    po.max_sample_size = max_sample;
    *out = NULL;
    errno = 0;
    ferry_err err = ferry_publisher_create(out, node, TOPIC, TYPE, ferry_hash(TYPE), &po);
    *saved_errno = errno;
    return err;
}

static ferry_err try_subscriber(ferry_node *node, ferry_subscriber **out, int *saved_errno)
{
    *out = NULL;
    errno = 0;
    ferry_err err = ferry_subscriber_create(out, node, TOPIC, TYPE, ferry_hash(TYPE), NULL);
    *saved_errno = errno;
    return err;
}

static void take_intact(ferry_subscriber *sub, size_t size)
{
    ferry_sample s;
    ferry_err e = ferry_take(sub, &s);
    if (e == FERRY_EAGAIN) {
        TU_OK(ferry_wait(sub, TU_WAIT_NS));
        e = ferry_take(sub, &s);
    }
    TU_OK(e);
    TU_SAMPLE_INTACT(&s, size);
    TU_OK(ferry_release(sub, &s));
}

#define CHECK_ENOMEM(err, saved_errno, want_errno)                                             \
    TU_CHECK_MSG((err) == FERRY_ENOMEM && (saved_errno) == (want_errno),                       \
                 "got %s, errno %d (%s); expected FERRY_ENOMEM, errno %d (%s)",               \
                 ferry_errname(err), (saved_errno), strerror(saved_errno), (want_errno),       \
                 strerror(want_errno))

/* Waits for a child and says how it ended: 0 success, TU_SKIP skipped; a signal fails. */
static int child_result(pid_t pid, const char *what)
{
    int st = tu_wait_status(pid, 20000);
    TU_CHECK_MSG(!WIFSIGNALED(st), "%s: the child was killed by signal %d (%s)", what,
                 WTERMSIG(st), strsignal(WTERMSIG(st)));
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
    TU_OK(try_publisher(node, 4 * MIB, 64 * 1024, &early_pub, &e));
    TU_OK(try_subscriber(node, &early_sub, &e));
    tu_connect_local(early_pub, 1, early_sub, 1);
    tu_publish_pattern(early_pub, 64 * 1024, 1);
    take_intact(early_sub, 64 * 1024);

    int filler = fill(dir);
    int fds = tu_fd_count(), entries = topic_entries(dir);
    TU_CMP_I64(entries, >=, 3); /* the two status files and the publisher's socket */

    /* New endpoints need a page of the full file system for their status file: an error,
     * not SIGBUS at its first write, and nothing is left behind. */
    ferry_err err = try_publisher(node, 4 * MIB, 64 * 1024, &pub, &e);
    CHECK_ENOMEM(err, e, ENOSPC);
    TU_CHECK(pub == NULL);
    err = try_subscriber(node, &sub, &e);
    CHECK_ENOMEM(err, e, ENOSPC);
    TU_CHECK(sub == NULL);
    TU_CMP_I64(tu_fd_count(), ==, fds);
    TU_CMP_I64(topic_entries(dir), ==, entries);
    printf("    full tmpfs: creation gives %s (%s)\n", ferry_errname(err), strerror(e));

    /* The pair made before goes on: its status pages were reserved when it was made. */
    for (uint64_t seq = 2; seq < 10; seq++) {
        tu_publish_pattern(early_pub, 64 * 1024, seq);
        take_intact(early_sub, 64 * 1024);
        TU_OK(ferry_publisher_poll(early_pub, 0));
    }
    ferry_publisher_stats ps;
    TU_OK(ferry_publisher_stats_get(early_pub, &ps));
    TU_EQ_U64(ps.published, 9);
    TU_EQ_U64(ps.subscribers, 1);

    /* Room again: creation works, and the new subscriber gets both publishers. */
    unfill(dir, filler);
    TU_OK(try_publisher(node, 4 * MIB, 64 * 1024, &pub, &e));
    TU_OK(try_subscriber(node, &sub, &e));
    connect_both(early_pub, pub, sub);
    tu_publish_pattern(pub, 64 * 1024, 1);
    take_intact(sub, 64 * 1024);

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
    int rc = child_result(tu_fork(full_tmpfs_main, dir, 20), "full tmpfs");
    TU_CHECK_MSG(rmdir(dir) == 0, "rmdir %s: %s", dir, strerror(errno));
    return rc;
}

/* --- main --------------------------------------------------------------------------------- */

/* Runs one test in a process of its own, so that a failure does not hide the others. Returns
 * 0 (passed), TU_SKIP or 1 (failed). */
static int run_isolated(const char *name, int (*fn)(void))
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        tu_begin(name);
        int rc = fn();
        tu_end();
        fflush(NULL);
        _exit(rc);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(st))
        return 1;
    return WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == TU_SKIP ? WEXITSTATUS(st) : 1;
}

#define RUN_ISOLATED(fn) run_isolated(#fn, fn)

int main(void)
{
    int results[] = {
        RUN_ISOLATED(test_full_tmpfs),
    };
    int n = (int)(sizeof results / sizeof results[0]), failed = 0, skipped = 0;
    for (int i = 0; i < n; i++) {
        failed += results[i] == 1;
        skipped += results[i] == TU_SKIP;
    }
    if (failed != 0)
        fprintf(stderr, "%d test(s) failed\n", failed);
    if (skipped != 0)
        printf("%d of %d test(s) skipped\n", skipped, n);
    return failed != 0 ? 1 : skipped == n ? TU_SKIP : 0;
}
