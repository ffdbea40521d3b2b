/* Linux implementation of the OS seam (platform.h): the clock, memory objects and their
 * mappings, directories, locks and randomness. The other families are in posix_*.c beside it. */
#include "platform/posix.h"

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

int ferry__dir_open_checked(int dirfd, const char *name, int64_t share_gid, ferry__dir_found *found)
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
fail : {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
}
}
