/*
 * What dead and finished endpoints leave goes without an operator: forked endpoints are killed
 * with SIGKILL, and a live endpoint of the topic removes their status files and sockets within a
 * bounded time (its housekeeping sweeps every second); a topic whose only endpoint was killed loses
 * its directory at the next creation of any endpoint of the domain; the last endpoint of a topic
 * takes the directory with it; and processes creating and destroying endpoints of one topic side
 * by side, each removing the directory it leaves empty, never fail a creation.
 */
#include "testutil.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>

#define TYPE "test/sweep"

static bool dir_exists(const char *topic)
{
    char path[PATH_MAX];
    struct stat st;
    tu_topic_path(topic, path, sizeof path);
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int files_in(const char *topic)
{
    char path[PATH_MAX];
    tu_topic_path(topic, path, sizeof path);
    return tu_dir_entries(path);
}

typedef struct child_arg {
    const char *topic;
    bool publisher;
    tu_pipe up;
} child_arg;

/* Creates one endpoint, says so, and waits to be killed. */
static int endpoint_main(void *arg)
{
    child_arg *a = arg;
    ferry_node *node = tu_node(a->publisher ? "sweep-pub" : "sweep-sub");
    ferry_publisher *pub = NULL;
    ferry_subscriber *sub = NULL;
    if (a->publisher)
        TU_OK(ferry_publisher_create(&pub, node, a->topic, TYPE, ferry_hash(TYPE), NULL));
    else
        TU_OK(ferry_subscriber_create(&sub, node, a->topic, TYPE, ferry_hash(TYPE), NULL));
    tu_send(&a->up, 1);
    for (;;)
        pause();
    return 0;
}

static pid_t start_killable(child_arg *a, const char *topic, bool publisher)
{
    a->topic = topic;
    a->publisher = publisher;
    a->up = tu_pipe_make();
    pid_t pid = tu_fork(endpoint_main, a, 30);
    TU_EQ_U64(tu_recv(&a->up, TU_WAIT_MS), 1);
    return pid;
}

static void kill_child(pid_t pid)
{
    TU_CHECK(kill(pid, SIGKILL) == 0);
    int st = tu_wait_status(pid, TU_WAIT_MS);
    TU_CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
}

/* Waits up to limit_ms for the topic directory to hold want entries; the time it took, or -1.
 * The publisher polls, or with camera set only loans and publishes, every 10 ms. */
static int64_t wait_files_as(const char *topic, int want, int limit_ms, ferry_publisher *pub,
                             ferry_subscriber *sub, bool camera)
{
    ferry_time t0 = ferry_now();
    for (;;) {
        int64_t ms = (ferry_now().ns - t0.ns) / TU_MS;
        if (files_in(topic) == want)
            return ms;
        if (ms > limit_ms)
            return -1;
        if (pub && camera) {
            tu_publish_pattern(pub, 4096, (uint64_t)ms + 1);
            tu_sleep_ns(10 * TU_MS);
        } else if (pub) {
            ferry_publisher_poll(pub, 20 * TU_MS);
        }
        if (sub) {
            ferry_sample s;
            ferry_wait(sub, 20 * TU_MS);
            if (ferry_take(sub, &s) == FERRY_OK)
                ferry_release(sub, &s);
        }
    }
}

static int64_t wait_files(const char *topic, int want, int limit_ms, ferry_publisher *pub,
                          ferry_subscriber *sub)
{
    return wait_files_as(topic, want, limit_ms, pub, sub, false);
}

/* A killed subscriber's status file goes within the live publisher's next sweeps: one that
 * polls, and one that only loans and publishes as a camera does (its sweep comes with a loan,
 * never right after a publication). */
static void test_dead_subscriber(void)
{
    for (int camera = 0; camera <= 1; camera++) {
        ferry_node *node = tu_node("sweep");
        ferry_publisher *pub;
        TU_OK(ferry_publisher_create(&pub, node, "/sweep/a", TYPE, ferry_hash(TYPE), NULL));
        TU_EQ_U64(files_in("/sweep/a"), 2); /* its status file and its socket */
        child_arg a;
        pid_t pid = start_killable(&a, "/sweep/a", false);
        TU_EQ_U64(files_in("/sweep/a"), 3);
        kill_child(pid);
        TU_EQ_U64(files_in("/sweep/a"), 3); /* nobody has looked yet */
        int64_t ms = wait_files_as("/sweep/a", 2, 3000 * TU_SLOWDOWN, pub, NULL, camera);
        TU_CHECK_MSG(ms >= 0, "the dead subscriber's status file is still there");
        printf("  dead subscriber's status file removed by the publisher (%s) after %lld ms\n",
               camera ? "loans and publications only" : "polling", (long long)ms);
        TU_OK(ferry_publisher_destroy(pub));
        TU_CHECK(!dir_exists("/sweep/a")); /* the last endpoint took the directory */
        TU_OK(ferry_node_destroy(node));
    }
}

/* A killed publisher's status file and socket go within the live subscriber's next sweeps. */
static void test_dead_publisher(void)
{
    ferry_node *node = tu_node("sweep");
    ferry_subscriber *sub;
    TU_OK(ferry_subscriber_create(&sub, node, "/sweep/b", TYPE, ferry_hash(TYPE), NULL));
    child_arg a;
    pid_t pid = start_killable(&a, "/sweep/b", true);
    TU_EQ_U64(files_in("/sweep/b"), 3);
    kill_child(pid);
    int64_t ms = wait_files("/sweep/b", 1, 3000 * TU_SLOWDOWN, NULL, sub);
    TU_CHECK_MSG(ms >= 0, "the dead publisher's files are still there");
    printf("  dead publisher's status file and socket removed by the subscriber after %lld ms\n",
           (long long)ms);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_CHECK(!dir_exists("/sweep/b"));
    TU_OK(ferry_node_destroy(node));
}

/* Nobody is left on a topic: the next endpoint created in the domain, on any topic, removes the
 * dead endpoints' files and the directory. Files of a live endpoint of another topic stay. */
static void test_abandoned_topic(void)
{
    child_arg a, b;
    pid_t dead_pub = start_killable(&a, "/sweep/abandoned", true);
    pid_t live_sub = start_killable(&b, "/sweep/lives", false);
    kill_child(dead_pub);
    TU_CHECK(dir_exists("/sweep/abandoned"));
    TU_EQ_U64(files_in("/sweep/abandoned"), 2);
    ferry_node *node = tu_node("sweep");
    ferry_publisher *pub;
    TU_OK(ferry_publisher_create(&pub, node, "/sweep/other", TYPE, ferry_hash(TYPE), NULL));
    TU_CHECK(!dir_exists("/sweep/abandoned"));
    TU_EQ_U64(files_in("/sweep/lives"), 1); /* alive: untouched */
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
    /* And once that one is killed too, the next process's first endpoint takes it. */
    kill_child(live_sub);
    node = tu_node("sweep-next");
    TU_OK(ferry_publisher_create(&pub, node, "/sweep/other", TYPE, ferry_hash(TYPE), NULL));
    TU_CHECK(!dir_exists("/sweep/lives"));
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
}

/* Remains that are not a dead endpoint's are left alone, or removed only when old: a status
 * file locked by a live process that does not read as ferry's, a young temporary file. */
static void test_foreign_files(void)
{
    ferry_node *node = tu_node("sweep");
    ferry_publisher *pub;
    TU_OK(ferry_publisher_create(&pub, node, "/sweep/c", TYPE, ferry_hash(TYPE), NULL));
    char dir[PATH_MAX], path[PATH_MAX + 32];
    tu_topic_path("/sweep/c", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/.young.tmp", dir);
    FILE *f = fopen(path, "w");
    TU_CHECK(f != NULL);
    fclose(f);
    snprintf(path, sizeof path, "%s/sub.00000000000000aa.status", dir);
    f = fopen(path, "w");
    TU_CHECK(f != NULL);
    fputs("not a status file", f);
    fclose(f);
    /* Two sweeps pass: neither file is old enough to be taken for remains. */
    TU_CHECK(wait_files("/sweep/c", 2, 2200, pub, NULL) < 0);
    TU_EQ_U64(files_in("/sweep/c"), 4);
    /* An hour old, nobody holding a lock on them: remains, removed by the next sweep. */
    struct timespec old[2] = {{time(NULL) - 3600, 0}, {time(NULL) - 3600, 0}};
    snprintf(path, sizeof path, "%s/.young.tmp", dir);
    TU_CHECK(utimensat(AT_FDCWD, path, old, 0) == 0);
    snprintf(path, sizeof path, "%s/sub.00000000000000aa.status", dir);
    TU_CHECK(utimensat(AT_FDCWD, path, old, 0) == 0);
    int64_t ms = wait_files("/sweep/c", 2, 3000 * TU_SLOWDOWN, pub, NULL);
    TU_CHECK_MSG(ms >= 0, "old remains are still there");
    TU_OK(ferry_publisher_destroy(pub));
    TU_CHECK(!dir_exists("/sweep/c"));
    TU_OK(ferry_node_destroy(node));
}

/* Creates and destroys endpoints of one topic as fast as it can; each destruction of the last
 * endpoint removes the directory while the other process may be creating in it. */
static int churn_main(void *arg)
{
    (void)arg;
    ferry_node *node = tu_node("churn");
    for (int i = 0; i < 300; i++) {
        if (i % 2) {
            ferry_subscriber *sub;
            TU_OK(
                ferry_subscriber_create(&sub, node, "/sweep/churn", TYPE, ferry_hash(TYPE), NULL));
            TU_OK(ferry_subscriber_destroy(sub));
        } else {
            ferry_publisher *pub;
            TU_OK(ferry_publisher_create(&pub, node, "/sweep/churn", TYPE, ferry_hash(TYPE), NULL));
            TU_OK(ferry_publisher_destroy(pub));
        }
    }
    TU_OK(ferry_node_destroy(node));
    return 0;
}

static void test_churn(void)
{
    pid_t p[3];
    for (int i = 0; i < 3; i++)
        p[i] = tu_fork(churn_main, NULL, 60);
    for (int i = 0; i < 3; i++)
        TU_CHILD_OK(p[i]);
    TU_CHECK(!dir_exists("/sweep/churn"));
}

int main(void)
{
    TU_RUN(test_dead_subscriber);
    TU_RUN(test_dead_publisher);
    TU_RUN(test_abandoned_topic);
    TU_RUN(test_foreign_files);
    TU_RUN(test_churn);
    return 0;
}
