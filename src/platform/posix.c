/* Linux implementation of the OS seam (platform.h). */
#include "platform/platform.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/vfs.h>
#include <linux/futex.h>
#include <linux/sockios.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <stdlib.h>
#include <unistd.h>

#define FERRY__PREFAULT_PAGE 4096u

#ifndef MFD_NOEXEC_SEAL
#define MFD_NOEXEC_SEAL 0x0008U
#endif
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#ifndef MFD_HUGETLB
#define MFD_HUGETLB 0x0004U
#endif
#ifndef MFD_HUGE_2MB
#define MFD_HUGE_2MB (21U << 26) /* log2 of the page size, at MFD_HUGE_SHIFT */
#endif
#ifndef HUGETLBFS_MAGIC
#define HUGETLBFS_MAGIC 0x958458f6
#endif
#ifndef MCL_ONFAULT
#define MCL_ONFAULT 4
#endif

int64_t ferry__clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int ferry__memfd_create(const char *name)
{
    int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_NOEXEC_SEAL);
    if (fd < 0 && errno == EINVAL) /* kernels before 6.3 do not know MFD_NOEXEC_SEAL */
        fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    return fd;
}

int ferry__memfd_create_hugetlb(const char *name)
{
    unsigned flags = MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_HUGETLB | MFD_HUGE_2MB;
    int fd = memfd_create(name, flags | MFD_NOEXEC_SEAL);
    if (fd < 0 && errno == EINVAL)
        fd = memfd_create(name, flags);
    return fd;
}

int ferry__fd_is_hugetlb(int fd)
{
    struct statfs sf;
    if (fstatfs(fd, &sf) != 0)
        return -1;
    return (unsigned long)sf.f_type == (unsigned long)HUGETLBFS_MAGIC;
}

int ferry__memfd_seal(int fd, unsigned seals)
{
    return fcntl(fd, F_ADD_SEALS, (int)seals);
}

int ferry__memfd_seals(int fd, unsigned *seals)
{
    int v = fcntl(fd, F_GET_SEALS);
    if (v < 0)
        return -1;
    *seals = (unsigned)v;
    return 0;
}

int ferry__fd_reopen_readonly(int fd)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    return open(path, O_RDONLY | O_CLOEXEC);
}

int ferry__fd_size(int fd, uint64_t *size)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return -1;
    *size = (uint64_t)st.st_size;
    return 0;
}

static int fd_link_starts_with(int fd, const char *prefix)
{
    char path[64], target[128];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n < 0)
        return -1;
    target[n] = '\0';
    return strncmp(target, prefix, strlen(prefix)) == 0;
}

int ferry__fd_is_memfd(int fd)
{
    return fd_link_starts_with(fd, "/memfd:");
}

void *ferry__map(int fd, size_t size, bool writable)
{
    int prot = writable ? PROT_READ | PROT_WRITE : PROT_READ;
    void *p = mmap(NULL, size, prot, MAP_SHARED, fd, 0);
    return p == MAP_FAILED ? NULL : p;
}

void *ferry__map_huge(int fd, size_t size, bool writable)
{
    if (size < FERRY__HUGE_PAGE)
        return ferry__map(fd, size, writable);
    /* An address range one huge page longer, reserved without memory, holds an aligned place
     * for the mapping; what is left on either side goes back. */
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t len = (size + page - 1) / page * page, span = len + FERRY__HUGE_PAGE;
    uint8_t *raw = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED)
        return NULL;
    uintptr_t mask = (uintptr_t)FERRY__HUGE_PAGE - 1;
    uint8_t *at = (uint8_t *)(((uintptr_t)raw + mask) & ~mask);
    int prot = writable ? PROT_READ | PROT_WRITE : PROT_READ;
    void *p = mmap(at, size, prot, MAP_SHARED | MAP_FIXED, fd, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        munmap(raw, span);
        errno = e;
        return NULL;
    }
    if (at > raw)
        munmap(raw, (size_t)(at - raw));
    if (raw + span > at + len)
        munmap(at + len, (size_t)(raw + span - (at + len)));
    /* Shmem under shmem_enabled=advise allocates huge pages only for faults through a mapping
     * that asks for them; elsewhere this changes nothing. */
    madvise(p, size, MADV_HUGEPAGE);
    return p;
}

void ferry__unmap(void *addr, size_t size)
{
    if (addr)
        munmap(addr, size);
}

void ferry__prefault_write(void *addr, size_t size)
{
    if (madvise(addr, size, MADV_POPULATE_WRITE) == 0)
        return;
    /* Older kernels: touch one byte per page (the pages are allocated already, so this maps
     * them without changing their content). */
    long page = sysconf(_SC_PAGESIZE);
    for (size_t off = 0; off < size; off += (size_t)page) {
        volatile unsigned char *b = (volatile unsigned char *)addr + off;
        *b = *b;
    }
}

void ferry__prefault_read(const void *addr, size_t size)
{
    if (madvise((void *)addr, size, MADV_POPULATE_READ) == 0 || errno != EINVAL)
        return;
    /* Kernels before 5.14: read one byte per page. */
    long page = sysconf(_SC_PAGESIZE);
    unsigned sum = 0;
    for (size_t off = 0; off < size; off += (size_t)page)
        sum += *((const volatile unsigned char *)addr + off);
    (void)sum;
}

int ferry__dir_each(int dirfd, unsigned max, void (*fn)(void *arg, const char *name), void *arg)
{
    /* getdents64 records: u64 inode, s64 offset, u16 length, u8 type, name. */
    _Alignas(8) char buf[2048];
    if (lseek(dirfd, 0, SEEK_SET) != 0)
        return -1;
    unsigned seen = 0;
    for (;;) {
        long n = syscall(SYS_getdents64, dirfd, buf, sizeof buf);
        if (n < 0) /* a removed directory lists nothing, as readdir(3) has it */
            return errno == ENOENT ? 0 : -1;
        if (n == 0)
            return 0;
        for (long off = 0; off < n;) {
            unsigned short reclen;
            memcpy(&reclen, buf + off + 16, sizeof reclen);
            if (reclen < 20 || reclen > n - off)
                return 0;
            if (seen++ >= max)
                return 0;
            fn(arg, buf + off + 19);
            off += reclen;
        }
    }
}

/* Binds through /proc/self/fd/<dirfd>/name so that sun_path stays short however deep the
 * domain directory is. */
static int sockaddr_at(struct sockaddr_un *sa, int dirfd, const char *name)
{
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    int n = snprintf(sa->sun_path, sizeof sa->sun_path, "/proc/self/fd/%d/%s", dirfd, name);
    if (n < 0 || (size_t)n >= sizeof sa->sun_path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return 0;
}

int ferry__listen_at(int dirfd, const char *name, const char *tmp_name, unsigned mode)
{
    struct sockaddr_un sa;
    if (sockaddr_at(&sa, dirfd, tmp_name) != 0)
        return -1;
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    unlinkat(dirfd, tmp_name, 0);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0)
        goto fail;
    /* The socket's mode decides who may connect: failing to set it fails the listen. */
    if (fchmodat(dirfd, tmp_name, (mode_t)mode, 0) != 0)
        goto fail_unlink;
    if (listen(fd, FERRY__LISTEN_BACKLOG) != 0)
        goto fail_unlink;
    /* Only a listening socket becomes visible under its real name: a connect never meets a
     * bound-but-not-listening socket. */
    if (renameat(dirfd, tmp_name, dirfd, name) != 0)
        goto fail_unlink;
    return fd;
fail_unlink: {
    int e = errno;
    unlinkat(dirfd, tmp_name, 0);
    errno = e;
}
fail: {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
}
}

int ferry__connect_at(int dirfd, const char *name)
{
    struct sockaddr_un sa;
    if (sockaddr_at(&sa, dirfd, name) != 0)
        return -1;
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

int ferry__sock_unread(int sock)
{
    int n = 0;
    return ioctl(sock, SIOCOUTQ, &n) == 0 ? n : -1;
}

int ferry__accept(int listen_fd)
{
    return accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
}

int ferry__peer_cred(int sock, pid_t *pid, uid_t *uid, gid_t *gid)
{
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
        return -1;
    *pid = cred.pid;
    *uid = cred.uid;
    *gid = cred.gid;
    return 0;
}

int ferry__peer_in_group(int sock, gid_t gid)
{
    pid_t pid;
    uid_t uid;
    gid_t primary;
    if (ferry__peer_cred(sock, &pid, &uid, &primary) != 0)
        return -1;
    if (primary == gid)
        return 1;
    gid_t groups[256];
    socklen_t len = sizeof groups;
    if (getsockopt(sock, SOL_SOCKET, SO_PEERGROUPS, groups, &len) != 0)
        return errno == ERANGE ? 0 : -1; /* more than 256 groups: only the primary counts */
    for (size_t i = 0; i < len / sizeof(gid_t); i++)
        if (groups[i] == gid)
            return 1;
    return 0;
}

int ferry__send_msg(int sock, const void *buf, size_t len, const int *fds, int nfds)
{
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(4 * sizeof(int))];
    } control;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfds < 0 || nfds > 4) {
        errno = EINVAL;
        return -1;
    }
    if (nfds > 0) {
        memset(&control, 0, sizeof control);
        msg.msg_control = control.buf;
        msg.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
        memcpy(CMSG_DATA(c), fds, (size_t)nfds * sizeof(int));
    }
    ssize_t n;
    do {
        n = sendmsg(sock, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return -1;
    if ((size_t)n != len) {
        errno = EMSGSIZE;
        return -1;
    }
    return 0;
}

/* --- descriptors a peer sent ----------------------------------------------------------------
 * The last close of some descriptors waits: a TCP socket with SO_LINGER and unsent data (up to
 * the linger time, which its owner chooses), a file of a FUSE or network file system (the
 * server's flush), a terminal draining its output, a Unix socket whose queue holds such
 * descriptors in flight. A peer can hand ferry any of them and drop its own reference, so ferry
 * closes what a peer sent only where the close cannot wait, and hands the rest to a disposal
 * thread of the process, started the first time one is needed. */

#ifndef ANON_INODE_FS_MAGIC
#define ANON_INODE_FS_MAGIC 0x09041934
#endif
#ifndef PIPEFS_MAGIC
#define PIPEFS_MAGIC 0x50495045
#endif
#ifndef TMPFS_MAGIC
#define TMPFS_MAGIC 0x01021994
#endif
#ifndef HUGETLBFS_MAGIC
#define HUGETLBFS_MAGIC 0x958458f6
#endif
#ifndef PIDFS_MAGIC
#define PIDFS_MAGIC 0x50494446
#endif

/* At most this many descriptors wait for the disposal threads, and at most this many threads
 * close them (each may wait as long as a peer likes); past both, a descriptor stays open and is
 * counted (ferry__fd_disposal_stats), which costs a slot of the descriptor table, not time. */
#define FERRY__DISPOSE_QUEUE 256
#define FERRY__DISPOSE_THREADS 4
#define FERRY__DISPOSE_STACK (64 * 1024)
/* The most descriptors one message can carry (the kernel's SCM_MAX_FD), and the most messages a
 * closing connection's queue is drained of (a peer's send buffer holds far fewer). */
#define FERRY__SCM_MAX_FD 253
#define FERRY__DRAIN_MAX 4096

int ferry__fd_close_waits(int fd)
{
    struct stat st;
    struct statfs fs;
    if (fstat(fd, &st) != 0 || fstatfs(fd, &fs) != 0)
        return 1; /* cannot tell: as if it could */
    /* The memory devices (/dev/null, zero, full, random, urandom) release nothing. */
    if (S_ISCHR(st.st_mode) && major(st.st_rdev) == 1)
        return 0;
    switch ((unsigned long)fs.f_type) {
    case TMPFS_MAGIC: /* memfds and shared memory; not device nodes (devtmpfs says tmpfs) */
    case HUGETLBFS_MAGIC:
        return !(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode));
    case ANON_INODE_FS_MAGIC: /* eventfd, epoll, timerfd, signalfd, pidfd; io_uring frees later */
    case PIPEFS_MAGIC:
    case PIDFS_MAGIC:
        return 0;
    default:
        return 1;
    }
}

int ferry__fd_backed(int fd, uint64_t offset, uint64_t len)
{
    if (len == 0)
        return 1;
    off_t hole = lseek(fd, (off_t)offset, SEEK_HOLE);
    if (hole < 0)
        return errno == ENXIO ? 0 : -1; /* ENXIO: offset is at or past the end */
    return (uint64_t)hole >= offset + len ? 1 : 0;
}

static struct {
    pthread_mutex_t lock;
    pthread_cond_t more;
    int queue[FERRY__DISPOSE_QUEUE];
    unsigned head, count;
    unsigned threads, idle;
    uint64_t deferred, kept;
} disposal = {.lock = PTHREAD_MUTEX_INITIALIZER, .more = PTHREAD_COND_INITIALIZER};
static pthread_once_t disposal_once = PTHREAD_ONCE_INIT;

static void disposal_prepare(void)
{
    pthread_mutex_lock(&disposal.lock);
}

static void disposal_parent(void)
{
    pthread_mutex_unlock(&disposal.lock);
}

/* The child of a fork has none of the threads: it starts afresh (what was queued stays open in
 * it, close-on-exec). */
static void disposal_child(void)
{
    pthread_mutex_init(&disposal.lock, NULL);
    pthread_cond_init(&disposal.more, NULL);
    disposal.head = disposal.count = disposal.threads = disposal.idle = 0;
}

static void disposal_init(void)
{
    pthread_atfork(disposal_prepare, disposal_parent, disposal_child);
}

static void *disposal_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&disposal.lock);
    for (;;) {
        disposal.idle++;
        while (disposal.count == 0)
            pthread_cond_wait(&disposal.more, &disposal.lock);
        disposal.idle--;
        int fd = disposal.queue[disposal.head];
        disposal.head = (disposal.head + 1) % FERRY__DISPOSE_QUEUE;
        disposal.count--;
        pthread_mutex_unlock(&disposal.lock);
        close(fd); /* may wait as long as the peer chose */
        pthread_mutex_lock(&disposal.lock);
    }
    return NULL;
}

/* With the lock held: one more thread, which takes no signal (the process's handlers run in
 * the threads the application made). */
static bool disposal_start_thread(void)
{
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) != 0)
        return false;
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, FERRY__DISPOSE_STACK);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t t;
    bool ok = pthread_create(&t, &attr, disposal_main, NULL) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (ok)
        disposal.threads++;
    return ok;
}

int ferry__fd_dispose(int fd)
{
    if (fd < 0)
        return 0;
    int e = errno;
    int rc = 0;
    if (!ferry__fd_close_waits(fd)) {
        close(fd);
    } else {
        pthread_once(&disposal_once, disposal_init);
        pthread_mutex_lock(&disposal.lock);
        if (disposal.idle <= disposal.count && disposal.threads < FERRY__DISPOSE_THREADS)
            disposal_start_thread();
        if (disposal.threads > 0 && disposal.count < FERRY__DISPOSE_QUEUE) {
            disposal.queue[(disposal.head + disposal.count) % FERRY__DISPOSE_QUEUE] = fd;
            disposal.count++;
            disposal.deferred++;
            pthread_cond_signal(&disposal.more);
            rc = 1;
        } else {
            disposal.kept++;
            rc = -1;
        }
        pthread_mutex_unlock(&disposal.lock);
    }
    errno = e;
    return rc;
}

void ferry__fd_disposal_stats(uint64_t *deferred, uint64_t *kept, uint32_t *threads)
{
    pthread_once(&disposal_once, disposal_init);
    pthread_mutex_lock(&disposal.lock);
    *deferred = disposal.deferred;
    *kept = disposal.kept;
    *threads = disposal.threads;
    pthread_mutex_unlock(&disposal.lock);
}

/* One recvmsg without waiting, with room for every descriptor a message can carry (those that did
 * not fit would be closed by the kernel on this thread, where a close may wait) and for the
 * sender's credentials: the first *nfds descriptors are kept in fds, the rest disposed of. *cmsgs
 * says whether any control message came. Returns recvmsg's count; *flags gets msg_flags. */
static ssize_t recv_fds(int sock, void *buf, size_t cap, int *fds, int *nfds, bool *cmsgs,
                        int *flags)
{
    struct iovec iov = {.iov_base = buf, .iov_len = cap};
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(FERRY__SCM_MAX_FD * sizeof(int)) + CMSG_SPACE(sizeof(struct ucred))];
    } control;
    struct msghdr msg = {.msg_iov = &iov,
                         .msg_iovlen = 1,
                         .msg_control = control.buf,
                         .msg_controllen = sizeof control.buf};
    int capacity = *nfds;
    *nfds = 0;
    *cmsgs = false;
    ssize_t n;
    do {
        n = recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return n;
    /* Take every descriptor that came, so none leaks, then keep what the caller has room for. */
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        *cmsgs = true;
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
            if (*nfds < capacity)
                fds[(*nfds)++] = fd;
            else
                ferry__fd_dispose(fd);
        }
    }
    *flags = msg.msg_flags;
    return n;
}

/* Receives the next message queued on sock, disposing of the descriptors it carries. With
 * SO_PASSCRED on sock every message comes with its sender's credentials, an empty one too, so
 * 1: a message was there, 0: the queue is empty (end of stream), -1: an error. */
static int drain_one(int sock)
{
    char byte[64];
    int nfds = 0, flags;
    bool cmsgs;
    ssize_t n = recv_fds(sock, byte, sizeof byte, NULL, &nfds, &cmsgs, &flags);
    if (n < 0)
        return -1;
    return n > 0 || cmsgs ? 1 : 0;
}

void ferry__sock_dispose(int sock)
{
    if (sock < 0)
        return;
    int e = errno;
    /* Shut to input first, so that the peer can queue nothing more (its sends fail with EPIPE);
     * then what it queued before is received and its descriptors disposed of, so that the close
     * releases none of them on this thread. A peer's send buffer holds a few hundred messages
     * at most: one that holds more than FERRY__DRAIN_MAX, or a socket that cannot be drained,
     * is closed by the disposal thread. */
    int one = 1, drained = 0;
    if (shutdown(sock, SHUT_RD) != 0 && errno == ENOTCONN) {
        drained = 1; /* never connected: nothing was queued */
    } else if (setsockopt(sock, SOL_SOCKET, SO_PASSCRED, &one, sizeof one) == 0) {
        for (int i = 0; i < FERRY__DRAIN_MAX && drained == 0; i++) {
            int r = drain_one(sock);
            /* ECONNRESET: the peer closed with our messages unread; said once, then the queue
             * reads on. */
            if (r < 0 && errno != ECONNRESET)
                drained = -1;
            else if (r == 0)
                drained = 1;
        }
    }
    if (drained == 1)
        close(sock);
    else
        ferry__fd_dispose(sock);
    errno = e;
}

ssize_t ferry__recv_msg(int sock, void *buf, size_t cap, int *fds, int *nfds)
{
    bool cmsgs;
    int flags = 0;
    ssize_t n = recv_fds(sock, buf, cap, fds, nfds, &cmsgs, &flags);
    if (n < 0)
        return -1;
    if (flags & (MSG_TRUNC | MSG_CTRUNC)) {
        for (int i = 0; i < *nfds; i++)
            ferry__fd_dispose(fds[i]);
        *nfds = 0;
        errno = EMSGSIZE;
        return -1;
    }
    return n;
}

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

int ferry__poller_wait(int poller, ferry__event *events, int capacity, int64_t timeout_ns)
{
    struct epoll_event evs[32];
    if (capacity > 32)
        capacity = 32;
    int ms;
    if (timeout_ns < 0)
        ms = -1;
    else if (timeout_ns == 0)
        ms = 0;
    else if (timeout_ns > (int64_t)INT_MAX * 1000000)
        ms = INT_MAX;
    else
        ms = (int)((timeout_ns + 999999) / 1000000);
    int n = epoll_wait(poller, evs, capacity, ms);
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

int ferry__futex_waitv(void *const *words, const uint32_t *expected, unsigned n,
                       int64_t timeout_ns)
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
    if (inotify_add_watch(fd, path, IN_CREATE | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF |
                                        IN_ONLYDIR) < 0) {
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

int ferry__lock_exclusive(int fd)
{
    return flock(fd, LOCK_EX | LOCK_NB);
}

int ferry__lock_held_by_other(int fd)
{
    if (flock(fd, LOCK_SH | LOCK_NB) == 0) {
        flock(fd, LOCK_UN);
        return 0;
    }
    return errno == EWOULDBLOCK ? 1 : -1;
}

uint64_t ferry__random64(void)
{
    uint64_t v = 0;
    while (v == 0) {
        if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v)
            v = (uint64_t)ferry__clock_ns() * 0x9e3779b97f4a7c15ULL ^ (uint64_t)getpid();
    }
    return v;
}

int ferry__dir_open_checked(int dirfd, const char *name, int64_t share_gid,
                            ferry__dir_found *found)
{
    ferry__dir_found none = {0};
    if (!found)
        found = &none;
    memset(found, 0, sizeof *found);
    mode_t mode = share_gid >= 0 ? 02770 : 0700;
    bool made = mkdirat(dirfd, name, mode) == 0;
    if (!made && errno != EEXIST)
        return -1;
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        struct stat st;
        if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
            found->exists = true;
            found->type = (uint32_t)(st.st_mode & S_IFMT);
            found->uid = (uint32_t)st.st_uid;
            found->gid = (uint32_t)st.st_gid;
            found->mode = (uint32_t)(st.st_mode & 07777);
            if (!S_ISDIR(st.st_mode))
                e = ENOTDIR; /* O_NOFOLLOW says ELOOP for a link */
        }
        errno = e;
        return -1;
    }
    struct stat st;
    if (made && share_gid >= 0) {
        /* mkdir applies the umask; the group must be able to enter and create. */
        if (fchown(fd, (uid_t)-1, (gid_t)share_gid) != 0 || fchmod(fd, mode) != 0)
            goto fail;
    }
    if (fstat(fd, &st) != 0)
        goto fail;
    found->exists = true;
    found->type = (uint32_t)(st.st_mode & S_IFMT);
    found->uid = (uint32_t)st.st_uid;
    found->gid = (uint32_t)st.st_gid;
    found->mode = (uint32_t)(st.st_mode & 07777);
    if (st.st_mode & (S_IWOTH | S_IXOTH | S_IROTH)) {
        errno = EPERM;
        goto fail;
    }
    if (st.st_uid == geteuid())
        return fd;
    if (share_gid >= 0 && st.st_gid == (gid_t)share_gid && (st.st_mode & S_IRWXG) == S_IRWXG)
        return fd;
    errno = EPERM;
fail: {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
}
}

/* ---- real-time controls ------------------------------------------------------------------ */

/* Reads a small text file into buf (terminated); no allocation. */
static int read_small(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, cap - 1);
    int e = errno;
    close(fd);
    if (n < 0) {
        errno = e;
        return -1;
    }
    buf[n] = '\0';
    return 0;
}

int ferry__cpu_online(int cpu)
{
    if (cpu < 0)
        return 0;
    char list[512];
    if (read_small("/sys/devices/system/cpu/online", list, sizeof list) != 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        return n < 0 ? -1 : cpu < n;
    }
    /* A CPU list: "0-3,6,8-9". */
    for (const char *p = list; *p >= '0' && *p <= '9';) {
        char *end;
        long lo = strtol(p, &end, 10), hi = lo;
        if (*end == '-')
            hi = strtol(end + 1, &end, 10);
        if (cpu >= lo && cpu <= hi)
            return 1;
        if (*end != ',')
            break;
        p = end + 1;
    }
    return 0;
}

int ferry__cpu_count(uint32_t *count)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        return -1;
    *count = (uint32_t)n;
    return 0;
}

int32_t ferry__cpu_only(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0 || CPU_COUNT(&set) != 1)
        return -1;
    for (int i = 0; i < CPU_SETSIZE; i++) {
        if (CPU_ISSET(i, &set))
            return i;
    }
    return -1;
}

int ferry__thread_pin(const int *cpus, size_t n)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    for (size_t i = 0; i < n; i++) {
        if (cpus[i] < 0 || cpus[i] >= CPU_SETSIZE)
            return EINVAL;
        CPU_SET(cpus[i], &set);
    }
    return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

int ferry__thread_fifo(int priority)
{
    struct sched_param sp;
    memset(&sp, 0, sizeof sp);
    sp.sched_priority = priority;
    return pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
}

int ferry__fifo_priority_max(void)
{
    return sched_get_priority_max(SCHED_FIFO);
}

int ferry__lock_memory(void)
{
    return mlockall(MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT) == 0 ? 0 : errno;
}

int ferry__rlimit(char which, uint64_t *soft)
{
    struct rlimit rl;
    if (getrlimit(which == 'r' ? RLIMIT_RTPRIO : RLIMIT_MEMLOCK, &rl) != 0)
        return -1;
    *soft = rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_cur;
    return 0;
}

int ferry__vm_size(uint64_t *bytes)
{
    char buf[256];
    if (read_small("/proc/self/statm", buf, sizeof buf) != 0)
        return -1;
    *bytes = (uint64_t)strtoull(buf, NULL, 10) * (uint64_t)sysconf(_SC_PAGESIZE);
    return 0;
}

int ferry__stack_size(size_t *bytes)
{
    pthread_attr_t attr;
    void *lo = NULL;
    size_t size = 0;
    if (pthread_getattr_np(pthread_self(), &attr) != 0)
        return -1;
    int rc = pthread_attr_getstack(&attr, &lo, &size);
    pthread_attr_destroy(&attr);
    if (rc != 0)
        return -1;
    /* What is left below this frame. */
    uintptr_t here = (uintptr_t)&attr;
    *bytes = here > (uintptr_t)lo ? (size_t)(here - (uintptr_t)lo) : 0;
    return 0;
}

__attribute__((noinline)) void ferry__prefault_stack(size_t bytes)
{
    if (bytes == 0)
        return;
    volatile unsigned char area[bytes];
    /* From the top down, so the main thread's stack grows one page at a time. */
    for (size_t off = bytes; off > 0;) {
        off = off > FERRY__PREFAULT_PAGE ? off - FERRY__PREFAULT_PAGE : 0;
        area[off] = 0;
    }
    __asm__ __volatile__("" : : "r"(area) : "memory");
}

int ferry__prefault_heap(size_t bytes)
{
    /* No trimming of the heap's top and no mmap'd blocks: freed memory stays mapped. Best
     * effort (a sanitizer's allocator ignores these). */
    mallopt(M_TRIM_THRESHOLD, -1);
    mallopt(M_MMAP_MAX, 0);
    volatile unsigned char *p = malloc(bytes);
    if (!p)
        return -1;
    long page = sysconf(_SC_PAGESIZE);
    for (size_t off = 0; off < bytes; off += (size_t)page)
        p[off] = 0;
    free((void *)p);
    return 0;
}

int ferry__page_faults(uint64_t *minor, uint64_t *major)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return -1;
    if (minor)
        *minor = (uint64_t)ru.ru_minflt;
    if (major)
        *major = (uint64_t)ru.ru_majflt;
    return 0;
}

/* ---- memory reservation ------------------------------------------------------------------ */

#define FERRY__RESERVE_STEP ((uint64_t)64 << 20)
#define FERRY__MARGIN_MIN ((uint64_t)64 << 20)
/* Limits at or above this mean none: cgroup v1 writes 2^63 - 4096, v2 "max". */
#define FERRY__NO_LIMIT ((uint64_t)1 << 62)

/* Calls fn(arg, line) for each line of a file, terminated and without its newline, reading
 * through a buffer on the stack; a line longer than the buffer is skipped. fn returns nonzero
 * to stop. */
static int each_line(const char *path, int (*fn)(void *arg, char *line), void *arg)
{
    char buf[1024];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t have = 0;
    bool skipping = false, stop = false;
    while (!stop) {
        ssize_t n = read(fd, buf + have, sizeof buf - 1 - have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (have > 0 && !skipping) {
                buf[have] = '\0';
                fn(arg, buf);
            }
            break;
        }
        have += (size_t)n;
        size_t start = 0;
        char *nl;
        while (!stop && (nl = memchr(buf + start, '\n', have - start)) != NULL) {
            *nl = '\0';
            if (!skipping)
                stop = fn(arg, buf + start) != 0;
            skipping = false;
            start = (size_t)(nl - buf) + 1;
        }
        memmove(buf, buf + start, have - start);
        have -= start;
        if (have == sizeof buf - 1) {
            skipping = true;
            have = 0;
        }
    }
    close(fd);
    return 0;
}

static bool parse_u64(const char *s, uint64_t *v)
{
    while (*s == ' ' || *s == '\t')
        s++;
    if (strncmp(s, "max", 3) == 0) {
        *v = UINT64_MAX;
        return true;
    }
    if (*s < '0' || *s > '9')
        return false;
    *v = (uint64_t)strtoull(s, NULL, 10);
    return true;
}

/* True when the comma-separated list holds word. */
static bool list_has(const char *list, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = list; p; p = strchr(p, ',')) {
        if (*p == ',')
            p++;
        if (strncmp(p, word, n) == 0 && (p[n] == ',' || p[n] == '\0'))
            return true;
    }
    return false;
}

/* Lowers *least to what is left below limit after used and the margin. */
static void headroom_under(uint64_t limit, uint64_t used, uint64_t *least)
{
    if (limit >= FERRY__NO_LIMIT)
        return;
    uint64_t margin = limit / 32 > FERRY__MARGIN_MIN ? limit / 32 : FERRY__MARGIN_MIN;
    if (margin > limit / 4) /* a small cgroup stays usable */
        margin = limit / 4;
    uint64_t room = used < limit && limit - used > margin ? limit - used - margin : 0;
    if (room < *least)
        *least = room;
}

typedef struct meminfo {
    uint64_t total_kb, available_kb;
    int found;
} meminfo;

static int meminfo_line(void *arg, char *line)
{
    meminfo *m = arg;
    if (strncmp(line, "MemTotal:", 9) == 0 && parse_u64(line + 9, &m->total_kb))
        m->found |= 1;
    else if (strncmp(line, "MemAvailable:", 13) == 0 && parse_u64(line + 13, &m->available_kb))
        m->found |= 2;
    return m->found == 3;
}

/* The process's path in one cgroup hierarchy, from /proc/self/cgroup: "0::/path" for v2,
 * "N:...,memory,...:/path" for the v1 memory controller. */
typedef struct cgroup_find {
    bool v2;
    char path[1024];
    bool found;
} cgroup_find;

static int cgroup_line(void *arg, char *line)
{
    cgroup_find *f = arg;
    char *controllers = strchr(line, ':');
    char *path = controllers ? strchr(controllers + 1, ':') : NULL;
    if (!path)
        return 0;
    *controllers++ = '\0';
    *path++ = '\0';
    bool match = f->v2 ? strcmp(line, "0") == 0 && controllers[0] == '\0'
                       : list_has(controllers, "memory");
    if (!match || strlen(path) >= sizeof f->path)
        return 0;
    strcpy(f->path, path);
    f->found = true;
    return 1;
}

/* Undoes mountinfo's octal escapes (\040 for a space) in place. */
static void unescape(char *s)
{
    char *out = s;
    for (; *s; s++) {
        if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
            s[3] >= '0' && s[3] <= '7') {
            *out++ = (char)((s[1] - '0') << 6 | (s[2] - '0') << 3 | (s[3] - '0'));
            s += 3;
        } else {
            *out++ = *s;
        }
    }
    *out = '\0';
}

/* The directory of the process's cgroup, from the mount of its hierarchy in
 * /proc/self/mountinfo ("id parent dev root mountpoint options [tags] - fstype source super"):
 * the mount point, then the cgroup's path below the mount's root. */
typedef struct mount_find {
    bool v2;
    const char *cgroup;
    char dir[PATH_MAX];
    size_t base; /* length of the mount point: the walk up stops there */
    bool found;
} mount_find;

static int mount_line(void *arg, char *line)
{
    mount_find *f = arg;
    char *field[6], *s = line, *t;
    for (int i = 0; i < 6; i++)
        if ((field[i] = strsep(&s, " ")) == NULL)
            return 0;
    while ((t = strsep(&s, " ")) != NULL && strcmp(t, "-") != 0) {
    }
    char *fstype = strsep(&s, " ");
    char *source = strsep(&s, " ");
    char *super = strsep(&s, " ");
    if (!t || !fstype || !source || !super)
        return 0;
    if (f->v2 ? strcmp(fstype, "cgroup2") != 0
              : strcmp(fstype, "cgroup") != 0 || !list_has(super, "memory"))
        return 0;
    unescape(field[3]);
    unescape(field[4]);
    const char *root = field[3], *below = f->cgroup;
    if (strcmp(root, "/") != 0) {
        size_t n = strlen(root);
        if (strncmp(below, root, n) != 0 || (below[n] != '/' && below[n] != '\0'))
            return 0; /* this mount does not show the process's cgroup */
        below += n;
    }
    if (strcmp(below, "/") == 0)
        below = "";
    int n = snprintf(f->dir, sizeof f->dir, "%s%s", field[4], below);
    if (n < 0 || (size_t)n >= sizeof f->dir)
        return 0;
    f->base = strlen(field[4]);
    f->found = true;
    return 1;
}

/* Reads the number in the file name of directory dir (of length len, capacity PATH_MAX). */
static bool read_u64_in(char *dir, size_t len, const char *name, uint64_t *v)
{
    char buf[64];
    int n = snprintf(dir + len, PATH_MAX - len, "/%s", name);
    bool ok = n > 0 && (size_t)n < PATH_MAX - len && read_small(dir, buf, sizeof buf) == 0 &&
              parse_u64(buf, v);
    dir[len] = '\0';
    return ok;
}

/* Page cache of a cgroup that reclaim can drop without writing: inactive, not dirty. */
typedef struct cgroup_stat {
    const char *keys[3]; /* inactive file, dirty, writeback */
    uint64_t values[3];
} cgroup_stat;

static int stat_line(void *arg, char *line)
{
    cgroup_stat *c = arg;
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(c->keys[i]);
        if (strncmp(line, c->keys[i], n) == 0 && line[n] == ' ')
            parse_u64(line + n, &c->values[i]);
    }
    return 0;
}

static uint64_t cgroup_reclaimable(char *dir, size_t len, bool v2)
{
    cgroup_stat c = {{"total_inactive_file", "total_dirty", "total_writeback"}, {0, 0, 0}};
    if (v2) {
        c.keys[0] = "inactive_file";
        c.keys[1] = "file_dirty";
        c.keys[2] = "file_writeback";
    }
    int n = snprintf(dir + len, PATH_MAX - len, "/memory.stat");
    if (n > 0 && (size_t)n < PATH_MAX - len)
        each_line(dir, stat_line, &c);
    dir[len] = '\0';
    uint64_t busy = c.values[1] + c.values[2];
    return c.values[0] > busy ? c.values[0] - busy : 0;
}

/* Walks from the process's cgroup up to the root of the hierarchy's mount. With limited, opens
 * the innermost cgroup with a memory limit into *limited when it is still -1. */
static void cgroup_headroom(bool v2, uint64_t *least, int *limited)
{
    cgroup_find cg = {.v2 = v2};
    if (each_line("/proc/self/cgroup", cgroup_line, &cg) != 0 || !cg.found)
        return;
    mount_find m = {.v2 = v2, .cgroup = cg.path};
    if (each_line("/proc/self/mountinfo", mount_line, &m) != 0 || !m.found)
        return;
    const char *limit_name = v2 ? "memory.max" : "memory.limit_in_bytes";
    const char *usage_name = v2 ? "memory.current" : "memory.usage_in_bytes";
    size_t len = strlen(m.dir);
    for (;;) {
        uint64_t limit, usage;
        if (read_u64_in(m.dir, len, limit_name, &limit) && limit < FERRY__NO_LIMIT &&
            read_u64_in(m.dir, len, usage_name, &usage)) {
            uint64_t reclaimable = cgroup_reclaimable(m.dir, len, v2);
            headroom_under(limit, usage > reclaimable ? usage - reclaimable : 0, least);
            if (limited && *limited < 0)
                *limited = open(m.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        }
        if (len <= m.base)
            break;
        while (len > m.base && m.dir[len - 1] != '/')
            len--;
        if (len > m.base)
            len--;
        m.dir[len] = '\0';
    }
}

uint64_t ferry__memory_headroom(void)
{
    uint64_t least = UINT64_MAX;
    meminfo mi = {0, 0, 0};
    if (each_line("/proc/meminfo", meminfo_line, &mi) == 0 && mi.found == 3 &&
        mi.available_kb <= mi.total_kb)
        headroom_under(mi.total_kb * 1024, (mi.total_kb - mi.available_kb) * 1024, &least);
    cgroup_headroom(true, &least, NULL);
    cgroup_headroom(false, &least, NULL);
    return least;
}

/* Growth of the processes of one memory cgroup takes turns: each checks the headroom and takes
 * what it checked under an exclusive lock of the innermost limited cgroup's directory, so that
 * two steps that each fit cannot together pass the limit (whose charge the kernel answers with
 * its OOM killer). The wait is bounded: a holder that keeps it longer (a step of 64 MiB takes
 * milliseconds) gets the caller ENOMEM rather than a wait without end (*refused). Returns the
 * locked descriptor (closing it unlocks), or -1: no limited cgroup, nothing to take turns for,
 * or not had. */
#define FERRY__GROWTH_LOCK_NS (2 * 1000000000LL)

static int growth_lock(bool *refused)
{
    uint64_t least = UINT64_MAX;
    int fd = -1;
    *refused = false;
    cgroup_headroom(true, &least, &fd);
    cgroup_headroom(false, &least, &fd);
    if (fd < 0)
        return -1;
    int64_t deadline = ferry__clock_ns() + FERRY__GROWTH_LOCK_NS;
    while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK && errno != EINTR) {
            close(fd); /* a file system without locks: unserialised, as it must */
            return -1;
        }
        if (ferry__clock_ns() >= deadline) {
            close(fd);
            *refused = true;
            errno = ENOMEM;
            return -1;
        }
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return fd;
}

static int allocate(int fd, int mode, uint64_t offset, uint64_t len)
{
    int rc;
    do {
        rc = fallocate(fd, mode, (off_t)offset, (off_t)len);
    } while (rc != 0 && errno == EINTR);
    return rc;
}

/* For file systems without fallocate: writing the range allocates it (or fails with ENOSPC). */
static int write_zeros(int fd, uint64_t offset, uint64_t len)
{
    static const char zeros[FERRY__PREFAULT_PAGE];
    while (len > 0) {
        size_t n = len < sizeof zeros ? (size_t)len : sizeof zeros;
        ssize_t w = pwrite(fd, zeros, n, (off_t)offset);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        offset += (uint64_t)w;
        len -= (uint64_t)w;
    }
    return 0;
}

/* One step of a reservation: faulting the pages in through the mapping at base where there is
 * one and the kernel can (MADV_POPULATE_WRITE fails with ENOMEM, or EFAULT where a fault would
 * have been SIGBUS, rather than killing), else fallocate, else writing zeros. */
static int reserve_step(int fd, void *base, uint64_t offset, uint64_t len)
{
    if (base) {
        if (madvise((uint8_t *)base + offset, (size_t)len, MADV_POPULATE_WRITE) == 0)
            return 0;
        if (errno != EINVAL) {
            if (errno == EFAULT)
                errno = ENOMEM;
            return -1;
        }
    }
    int rc = allocate(fd, 0, offset, len);
    if (rc != 0 && errno == EOPNOTSUPP)
        rc = write_zeros(fd, offset, len);
    return rc;
}

static int reserve(int fd, void *base, uint64_t offset, uint64_t len)
{
    /* Hugetlb pages are a pool of their own, outside MemAvailable and the memory cgroups: the
     * kernel reserved the file's pages from it when the file was first mapped (a shared
     * mapping of hugetlbfs reserves its whole range, or fails with ENOMEM), so allocating them
     * here takes what is promised to this file and cannot fail for want of memory. */
    bool hugetlb = ferry__fd_is_hugetlb(fd) == 1;
    uint64_t done = 0;
    bool refused = false;
    int lock = hugetlb ? -1 : growth_lock(&refused);
    if (refused)
        return -1;
    while (done < len) {
        /* Checked again before each step: others take memory meanwhile, and so did the step
         * before. Memory a cgroup would have to find is refused here, before the charge, because
         * the kernel answers a charge it cannot meet with its OOM killer, not with an error. */
        if (!hugetlb && ferry__memory_headroom() < len - done) {
            errno = ENOMEM;
            goto fail;
        }
        uint64_t step = len - done < FERRY__RESERVE_STEP ? len - done : FERRY__RESERVE_STEP;
        if (reserve_step(fd, base, offset + done, step) != 0)
            goto fail;
        done += step;
    }
    if (lock >= 0)
        close(lock); /* the lock goes with it */
    return 0;
fail: {
    int e = errno;
    if (done > 0)
        allocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset, done);
    if (lock >= 0)
        close(lock);
    errno = e;
    return -1;
}
}

int ferry__fd_reserve(int fd, uint64_t offset, uint64_t len)
{
    return reserve(fd, NULL, offset, len);
}

int ferry__fd_reserve_mapped(int fd, void *base, uint64_t offset, uint64_t len)
{
    return reserve(fd, base, offset, len);
}

/* ---- huge pages -------------------------------------------------------------------------- */

#define HUGETLB_2M_DIR "/sys/kernel/mm/hugepages/hugepages-2048kB/"

static bool read_u64_file(const char *path, uint64_t *v)
{
    char buf[64];
    return read_small(path, buf, sizeof buf) == 0 && parse_u64(buf, v);
}

int ferry__hugetlb_pages(uint64_t *available, uint64_t *total)
{
    uint64_t free_pages, reserved;
    if (!read_u64_file(HUGETLB_2M_DIR "nr_hugepages", total) ||
        !read_u64_file(HUGETLB_2M_DIR "free_hugepages", &free_pages) ||
        !read_u64_file(HUGETLB_2M_DIR "resv_hugepages", &reserved)) {
        errno = ENOENT;
        return -1;
    }
    *available = free_pages > reserved ? free_pages - reserved : 0;
    return 0;
}

/* The word between brackets of a sysfs choice list ("always [advise] never"). */
static int selected_word(const char *path, char *word, size_t cap)
{
    char buf[256];
    if (read_small(path, buf, sizeof buf) != 0)
        return -1;
    const char *open = strchr(buf, '[');
    const char *close = open ? strchr(open, ']') : NULL;
    if (!close || (size_t)(close - open - 1) >= cap) {
        errno = EINVAL;
        return -1;
    }
    memcpy(word, open + 1, (size_t)(close - open - 1));
    word[close - open - 1] = '\0';
    return 0;
}

int ferry__thp_shmem_mode(char *word, size_t cap)
{
    /* Kernels since 6.11 have a policy per size, which may defer to the global one. */
    if (selected_word("/sys/kernel/mm/transparent_hugepage/hugepages-2048kB/shmem_enabled", word,
                      cap) == 0 &&
        strcmp(word, "inherit") != 0)
        return 0;
    return selected_word("/sys/kernel/mm/transparent_hugepage/shmem_enabled", word, cap);
}

typedef struct smaps_find {
    uintptr_t start;
    bool in, found;
    uint64_t kb;
} smaps_find;

static int smaps_line(void *arg, char *line)
{
    smaps_find *f = arg;
    /* An entry opens with its range in hex ("7f0000000000-7f0000600000 r--s ..."); the fields
     * that follow begin with a capital. */
    if ((line[0] >= '0' && line[0] <= '9') || (line[0] >= 'a' && line[0] <= 'f')) {
        if (f->in)
            return 1;
        char *end;
        f->in = (uintptr_t)strtoull(line, &end, 16) == f->start && *end == '-';
        f->found |= f->in;
        return 0;
    }
    static const char *const keys[] = {"ShmemPmdMapped:", "FilePmdMapped:", "Shared_Hugetlb:",
                                       "Private_Hugetlb:"};
    uint64_t v;
    if (f->in)
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
            size_t n = strlen(keys[i]);
            if (strncmp(line, keys[i], n) == 0 && parse_u64(line + n, &v))
                f->kb += v;
        }
    return 0;
}

int ferry__map_huge_bytes(const void *addr, uint64_t *bytes)
{
    smaps_find f = {.start = (uintptr_t)addr};
    if (each_line("/proc/self/smaps", smaps_line, &f) != 0)
        return -1;
    if (!f.found) {
        errno = ENOENT;
        return -1;
    }
    *bytes = f.kb * 1024;
    return 0;
}
