/* The OS seam on Linux: sockets, and descriptors a peer sent (closed where their close cannot
 * stall the caller). */
#include "platform/posix.h"

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
fail_unlink : {
    int e = errno;
    unlinkat(dirfd, tmp_name, 0);
    errno = e;
}
fail : {
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
