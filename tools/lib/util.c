/* Process helpers of the CLI (util.h): time, futex, directories, pipes, children. */
#include "util.h"

#include <errno.h>
#include <ftw.h>
#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int64_t cli_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void cli_futex_wait(_Atomic uint32_t *word, uint32_t expected, int64_t timeout_ns)
{
    struct timespec ts, *tsp = NULL;
    if (timeout_ns >= 0) {
        ts.tv_sec = (time_t)(timeout_ns / 1000000000);
        ts.tv_nsec = (long)(timeout_ns % 1000000000);
        tsp = &ts;
    }
    /* Not FUTEX_PRIVATE_FLAG: the word lives in memory shared between processes. */
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, expected, tsp, NULL, 0);
}

void cli_futex_wake(_Atomic uint32_t *word)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, 0x7fffffff, NULL, NULL, 0);
}

bool cli_private_dir(const char *prefix, char *out, size_t cap)
{
    static const char *const bases[] = {"/dev/shm", "/tmp"};
    for (size_t i = 0; i < sizeof bases / sizeof bases[0]; i++) {
        int n = snprintf(out, cap, "%s/%sXXXXXX", bases[i], prefix);
        if (n < 0 || (size_t)n >= cap)
            break;
        if (mkdtemp(out))
            return true;
    }
    fprintf(stderr, "ferry: cannot create a private directory: %s\n", strerror(errno));
    return false;
}

static int rmtree_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    int rc = (type == FTW_DP || type == FTW_D) ? rmdir(path) : unlink(path);
    if (rc != 0 && errno != ENOENT)
        fprintf(stderr, "ferry: cannot remove %s: %s\n", path, strerror(errno));
    return 0;
}

int cli_rmtree(const char *path)
{
    if (nftw(path, rmtree_entry, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT)
        return -1;
    struct stat st;
    return lstat(path, &st) == 0 ? -1 : 0;
}

int cli_read_full(int fd, void *buf, size_t n, int64_t deadline_ns)
{
    char *p = buf;
    while (n > 0) {
        if (deadline_ns >= 0) {
            int64_t left = deadline_ns - cli_now_ns();
            if (left <= 0) {
                errno = ETIMEDOUT;
                return -1;
            }
            struct pollfd pfd = {.fd = fd, .events = POLLIN};
            int ms = (int)(left / 1000000) + 1;
            int r = poll(&pfd, 1, ms);
            if (r < 0 && errno != EINTR)
                return -1;
            if (r <= 0)
                continue;
        }
        ssize_t got = read(fd, p, n);
        if (got < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            return -1;
        }
        if (got == 0) {
            errno = EPIPE;
            return -1;
        }
        p += got;
        n -= (size_t)got;
    }
    return 0;
}

int cli_write_full(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t put = write(fd, p, n);
        if (put < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += put;
        n -= (size_t)put;
    }
    return 0;
}

void cli_child_setup(pid_t parent)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(1);
}

void cli_prefault(void *buf, size_t n)
{
    long page = sysconf(_SC_PAGESIZE);
    volatile char *p = buf;
    for (size_t i = 0; i < n; i += (size_t)page)
        p[i] = p[i];
    if (n > 0)
        p[n - 1] = p[n - 1];
}

sigjmp_buf cli_bus_jump;
static volatile sig_atomic_t bus_armed;

static void on_bus(int sig)
{
    if (bus_armed) {
        bus_armed = 0;
        siglongjmp(cli_bus_jump, 1);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

void cli_catch_signal(int sig, void (*handler)(int))
{
    struct sigaction sa;

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, NULL);
}

void cli_bus_arm(void)
{
    cli_catch_signal(SIGBUS, on_bus);
    bus_armed = 1;
}

void cli_bus_disarm(void)
{
    bus_armed = 0;
    signal(SIGBUS, SIG_DFL);
}
