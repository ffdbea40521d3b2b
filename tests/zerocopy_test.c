/*
 * Zero copy and read-only mapping: a taken payload lies in the publisher's memfd data segment,
 * mapped read-only and shared in the subscriber; writing to it faults; no other route (the
 * descriptor, a reopened descriptor, mprotect) yields a writable view; nothing is copied.
 */
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define TYPE "test/zerocopy"
#define SIZE ((size_t)1 << 20)
#define DATA_NAME "memfd:ferry-data"

enum { MSG_READY = 1, MSG_DONE };

/* A writable shared mapping of fd must be refused, and so must write(). */
static void expect_not_writable(int fd, const char *what)
{
    void *w = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (w != MAP_FAILED)
        munmap(w, 4096);
    TU_CHECK_MSG(w == MAP_FAILED, "%s: a writable shared mapping of the data segment succeeded",
                 what);
    unsigned char b = 0;
    TU_CHECK_MSG(pread(fd, &b, 1, 0) == 1, "%s: pread: %s", what, strerror(errno));
    ssize_t n = pwrite(fd, &b, 1, 0); /* the same byte back: harmless if it went through */
    TU_CHECK_MSG(n < 0, "%s: write() to the data segment succeeded", what);
}

static int subscriber_main(void *arg)
{
    tu_pipe *to_pub = arg;
    ferry_node *node = tu_node("zcsub");
    ferry_subscriber *sub = NULL;
    TU_OK(ferry_subscriber_create(&sub, node, "/zc", TYPE, ferry_hash(TYPE), NULL));
    TU_OK(ferry_subscriber_wait_publishers(sub, 1, TU_WAIT_NS));
    tu_send(to_pub, MSG_READY);

    ferry_sample s;
    TU_OK(ferry_wait(sub, TU_WAIT_NS));
    TU_OK(ferry_take(sub, &s));
    TU_EQ_U64(s.sequence, 1);
    TU_SAMPLE_INTACT(&s, SIZE);

    /* The payload lies inside one read-only shared mapping of the publisher's memfd. */
    tu_mapping m;
    TU_CHECK(tu_map_of(s.data, &m));
    TU_EQ_STR(m.perms, "r--s");
    TU_CHECK_MSG(strstr(m.path, DATA_NAME) != NULL, "payload mapped from \"%s\"", m.path);
    TU_CMP_U64((uintptr_t)s.data + s.size, <=, m.end);

    /* Writing faults. */
    int st = tu_write_status(s.data);
    TU_CHECK_MSG(WIFSIGNALED(st), "a write to the payload did not fault (exit status %d)",
                 WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    TU_EQ_U64(WTERMSIG(st), SIGSEGV);
    TU_SAMPLE_INTACT(&s, SIZE);

    /* mprotect cannot add write access to a mapping of a read-only descriptor. */
    uintptr_t page = (uintptr_t)s.data & ~(uintptr_t)4095;
    TU_CHECK_MSG(mprotect((void *)page, 4096, PROT_READ | PROT_WRITE) != 0,
                 "mprotect made the payload writable");

    /* Every descriptor of the data segment refuses a writable view, reopened or not. */
    int tried = 0;
    DIR *d = opendir("/proc/self/fd");
    TU_CHECK(d != NULL);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char link[300], target[PATH_MAX];
        snprintf(link, sizeof link, "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(link, target, sizeof target - 1);
        if (n <= 0)
            continue;
        target[n] = '\0';
        if (strstr(target, DATA_NAME) == NULL)
            continue;
        int fd = atoi(e->d_name);
        expect_not_writable(fd, "the received descriptor");
        int again = open(link, O_RDWR);
        if (again >= 0) {
            expect_not_writable(again, "the descriptor reopened O_RDWR");
            close(again);
        }
        tried++;
    }
    closedir(d);
    /* The descriptor may be closed once mapped; the mapping itself can be reopened too. */
    char mf[128];
    snprintf(mf, sizeof mf, "/proc/self/map_files/%lx-%lx", (unsigned long)m.start,
             (unsigned long)m.end);
    int again = open(mf, O_RDWR);
    if (again >= 0) {
        expect_not_writable(again, "the mapping reopened O_RDWR");
        close(again);
        tried++;
    } else if (errno != EPERM && errno != EACCES) {
        TU_FAIL("open %s: %s", mf, strerror(errno));
    }
    TU_CHECK_MSG(tried > 0, "no route to the data segment could be tried");
    TU_SAMPLE_INTACT(&s, SIZE);

    ferry_subscriber_stats ss;
    TU_OK(ferry_subscriber_stats_get(sub, &ss));
    TU_EQ_U64(ss.bytes_copied, 0);
    TU_EQ_U64(ss.received, 1);
    TU_OK(ferry_release(sub, &s));
    tu_send(to_pub, MSG_DONE);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    return 0;
}

static void test_read_only_zero_copy(void)
{
    tu_pipe to_pub = tu_pipe_make();
    pid_t child = tu_fork(subscriber_main, &to_pub, 60);
    ferry_node *node = tu_node("zcpub");
    ferry_publisher *pub = NULL;
    TU_OK(ferry_publisher_create(&pub, node, "/zc", TYPE, ferry_hash(TYPE), NULL));
    TU_OK(ferry_publisher_wait_subscribers(pub, 1, TU_WAIT_NS));
    TU_EQ_U64(tu_serve_until(&pub, 1, &to_pub, TU_WAIT_MS), MSG_READY);

    void *loan = NULL;
    TU_OK(ferry_loan(pub, SIZE, &loan));
    tu_mapping m;
    TU_CHECK(tu_map_of(loan, &m));
    TU_EQ_STR(m.perms, "rw-s");
    TU_CHECK_MSG(strstr(m.path, DATA_NAME) != NULL, "loan mapped from \"%s\"", m.path);
    tu_fill(loan, SIZE, 1);
    TU_OK(ferry_publish(pub, loan, 0));
    TU_EQ_U64(tu_serve_until(&pub, 1, &to_pub, 30000), MSG_DONE);

    ferry_publisher_stats st;
    TU_OK(ferry_publisher_stats_get(pub, &st));
    TU_EQ_U64(st.bytes_copied, 0);
    TU_EQ_U64(st.deliveries, 1);
    /* The counter does move for the copying path. */
    char data[100];
    memset(data, 7, sizeof data);
    TU_OK(ferry_publish_copy(pub, data, sizeof data));
    TU_OK(ferry_publisher_stats_get(pub, &st));
    TU_EQ_U64(st.bytes_copied, sizeof data);
    TU_CHILD_OK(child);
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
}

int main(void)
{
    TU_RUN(test_read_only_zero_copy);
    return 0;
}
