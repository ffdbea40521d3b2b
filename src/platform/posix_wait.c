/* The OS seam on Linux: waiting (the poller, notifiers, futexes and directory watches). */
#include "platform/posix.h"

#include <stdatomic.h>

int ferry__poller_create(void)
{
    return epoll_create1(EPOLL_CLOEXEC);
}

int ferry__poller_add(int poller, int fd, uint64_t tag)
{
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.u64 = tag};
    return epoll_ctl(poller, EPOLL_CTL_ADD, fd, &ev);
}

int ferry__poller_del(int poller, int fd)
{
    return epoll_ctl(poller, EPOLL_CTL_DEL, fd, NULL);
}

/* epoll_pwait2 is refused (an older kernel, a seccomp filter): milliseconds from then on. */
static _Atomic bool no_pwait2;

/* The wait itself: with precise, a timeout of under a second to the nanosecond (epoll_pwait2),
 * else rounded up to whole milliseconds. */
static int poller_wait(int poller, struct epoll_event *evs, int capacity, int64_t timeout_ns,
                       bool precise)
{
    if (precise && timeout_ns > 0 && timeout_ns < 1000000000 &&
        !atomic_load_explicit(&no_pwait2, memory_order_relaxed)) {
        struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)timeout_ns};
        int n = epoll_pwait2(poller, evs, capacity, &ts, NULL);
        if (n >= 0 || (errno != ENOSYS && errno != EPERM))
            return n;
        atomic_store_explicit(&no_pwait2, true, memory_order_relaxed);
    }
    int ms;
    if (timeout_ns < 0)
        ms = -1;
    else if (timeout_ns == 0)
        ms = 0;
    else if (timeout_ns > (int64_t)INT_MAX * 1000000)
        ms = INT_MAX;
    else
        ms = (int)((timeout_ns + 999999) / 1000000);
    return epoll_wait(poller, evs, capacity, ms);
}

static int poller_events(int poller, ferry__event *events, int capacity, int64_t timeout_ns,
                         bool precise)
{
    struct epoll_event evs[32];
    if (capacity > 32)
        capacity = 32;
    int n = poller_wait(poller, evs, capacity, timeout_ns, precise);
    if (n < 0)
        return errno == EINTR ? 0 : -1;
    for (int i = 0; i < n; i++) {
        events[i].tag = evs[i].data.u64;
        events[i].in = (evs[i].events & EPOLLIN) != 0;
        events[i].hup = (evs[i].events & (EPOLLHUP | EPOLLRDHUP)) != 0;
        events[i].err = (evs[i].events & EPOLLERR) != 0;
    }
    return n;
}

int ferry__poller_wait(int poller, ferry__event *events, int capacity, int64_t timeout_ns)
{
    return poller_events(poller, events, capacity, timeout_ns, false);
}

int ferry__poller_wait_precise(int poller, ferry__event *events, int capacity, int64_t timeout_ns)
{
    return poller_events(poller, events, capacity, timeout_ns, true);
}

int ferry__notifier_create(void)
{
    return eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
}

void ferry__notifier_signal(int fd)
{
    uint64_t one = 1;
    ssize_t n;
    do {
        n = write(fd, &one, sizeof one);
    } while (n < 0 && errno == EINTR);
}

void ferry__notifier_drain(int fd)
{
    uint64_t v;
    ssize_t n;
    do {
        n = read(fd, &v, sizeof v);
    } while (n < 0 && errno == EINTR);
}

void ferry__futex_wake(void *word)
{
    syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* One word: FUTEX_WAIT, which every kernel has (futex_waitv came with 5.16, after the kernels
 * of Ubuntu 22.04 and of Jetson Linux, and sandboxes may lack it). Its timeout is relative. */
static int futex_wait1(void *word, uint32_t expected, int64_t timeout_ns)
{
    struct timespec ts, *tp = NULL;
    if (timeout_ns >= 0) {
        ts.tv_sec = timeout_ns / 1000000000;
        ts.tv_nsec = timeout_ns % 1000000000;
        tp = &ts;
    }
    long rc = syscall(SYS_futex, word, FUTEX_WAIT, expected, tp, NULL, 0);
    return rc < 0 ? -1 : 0;
}

int ferry__futex_waitv(void *const *words, const uint32_t *expected, unsigned n, int64_t timeout_ns)
{
    if (n == 1)
        return futex_wait1(words[0], expected[0], timeout_ns);
#ifdef SYS_futex_waitv
    struct futex_waitv w[FUTEX_WAITV_MAX];
    if (n == 0 || n > FUTEX_WAITV_MAX) {
        errno = EINVAL;
        return -1;
    }
    memset(w, 0, n * sizeof w[0]);
    for (unsigned i = 0; i < n; i++) {
        w[i].val = expected[i];
        w[i].uaddr = (uint64_t)(uintptr_t)words[i];
        w[i].flags = FUTEX_32; /* shared, not FUTEX_PRIVATE_FLAG: the words live in memfds */
    }
    struct timespec ts, *tp = NULL;
    if (timeout_ns >= 0) {
        int64_t at = ferry__clock_ns() + timeout_ns;
        ts.tv_sec = at / 1000000000;
        ts.tv_nsec = at % 1000000000;
        tp = &ts;
    }
    long rc = syscall(SYS_futex_waitv, w, n, 0, tp, CLOCK_MONOTONIC);
    return rc < 0 ? -1 : 0;
#else
    (void)words;
    (void)expected;
    (void)n;
    (void)timeout_ns;
    errno = ENOSYS;
    return -1;
#endif
}

int ferry__dirwatch_create(int *watch_fd, int dirfd)
{
    /* The magic link names the open directory itself, whatever its path has become since. */
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", dirfd);
    int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd < 0)
        return -1;
    if (inotify_add_watch(
            fd, path, IN_CREATE | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    *watch_fd = fd;
    return 0;
}

int ferry__dirwatch_drain(int watch_fd)
{
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    int gone = 0;
    for (int rounds = 0; rounds < 64; rounds++) {
        ssize_t n = read(watch_fd, buf, sizeof buf);
        if (n <= 0)
            break;
        for (ssize_t off = 0; off + (ssize_t)sizeof(struct inotify_event) <= n;) {
            struct inotify_event ev;
            memcpy(&ev, buf + off, sizeof ev);
            if (ev.mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED))
                gone = 1;
            off += (ssize_t)sizeof ev + ev.len;
        }
    }
    return gone;
}
