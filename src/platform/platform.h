/*
 * The OS seam: every system facility the core uses, behind a small named set of primitives
 * (memfd segments, Unix-domain sockets with descriptor passing, a poller, a notifier, a directory
 * watch, file locks, clocks). One implementation for Linux (posix.c).
 *
 * Functions return 0 on success and -1 with errno set on failure, unless stated otherwise.
 * All descriptors are created close-on-exec. Safe from any thread.
 */
#ifndef FERRY_PLATFORM_H
#define FERRY_PLATFORM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* CLOCK_MONOTONIC in nanoseconds (vDSO: no system call). */
int64_t ferry__clock_ns(void);

/* Anonymous shared memory. */
int ferry__memfd_create(const char *name);       /* sealable, returns fd or -1 */
int ferry__memfd_seal(int fd, unsigned seals);   /* F_SEAL_* bits */
int ferry__memfd_seals(int fd, unsigned *seals); /* the seals it carries */
int ferry__fd_reopen_readonly(int fd);           /* a new read-only description */
int ferry__fd_size(int fd, uint64_t *size);
int ferry__fd_is_memfd(int fd); /* 1 yes, 0 no, -1 error */
/* Reserves the pages of [offset, offset+len), a range that holds no data yet, so that writing
 * them later cannot fail with SIGBUS, and only while the memory is there to take: in steps of
 * at most 64 MiB, each after checking that what is left to reserve fits in
 * ferry__memory_headroom(). ENOMEM when it does not (checked before the kernel would charge the
 * pages and call its OOM killer), ENOSPC when the file system is full. On failure, the pages
 * this call reserved are given back. No allocation: the files it reads go through the stack. */
int ferry__fd_reserve(int fd, uint64_t offset, uint64_t len);
/* The bytes this process may still take: the least, over MemAvailable (of MemTotal) and over
 * each memory cgroup (v1 and v2) of the process and its ancestors, of the limit less what is
 * used (page cache that is inactive and clean counts as free), less a margin of the larger of
 * 64 MiB and 1/32 of that limit, but no more than a quarter of it. UINT64_MAX when nothing can
 * be read. */
uint64_t ferry__memory_headroom(void);
/* ferry__fd_reserve through a writable shared mapping of the whole of fd at base: the pages are
 * allocated by faulting them in (MADV_POPULATE_WRITE), so that they come as the mapping's advice
 * asks (a MADV_HUGEPAGE mapping of shmem gets huge pages where fallocate would allocate small
 * ones), after the same headroom checks. Falls back to fallocate on kernels before 5.14. */
int ferry__fd_reserve_mapped(int fd, void *base, uint64_t offset, uint64_t len);

/* Huge pages: 2 MiB, the PMD size of x86-64 and of arm64 with 4 KiB pages. */
#define FERRY__HUGE_PAGE ((uint64_t)2 << 20)
/* A sealable memfd of 2 MiB hugetlb pages (MFD_HUGETLB | MFD_HUGE_2MB): fd or -1 (EINVAL where
 * the kernel has none). Its size and every mapping of it are multiples of FERRY__HUGE_PAGE. */
int ferry__memfd_create_hugetlb(const char *name);
int ferry__fd_is_hugetlb(int fd); /* 1 yes, 0 no, -1 error */
/* 2 MiB hugetlb pages not yet taken or promised (free less reserved) and the configured total
 * (vm.nr_hugepages for that size); -1 (ENOENT) when the kernel has none of that size. */
int ferry__hugetlb_pages(uint64_t *available, uint64_t *total);
/* The effective transparent-huge-page policy for shmem (memfd) at 2 MiB: the word selected in
 * hugepages-2048kB/shmem_enabled, or in shmem_enabled where that says inherit or is missing
 * ("never", "advise", "always", "within_size", "deny", "force"); -1 when neither can be read. */
int ferry__thp_shmem_mode(char *word, size_t cap);
/* A shared mapping like ferry__map, at an address that is a multiple of FERRY__HUGE_PAGE when
 * size is at least that, with MADV_HUGEPAGE (best effort): so that the pages of a huge-page
 * segment map with PMDs, one TLB entry per 2 MiB. ferry__unmap undoes it. */
void *ferry__map_huge(int fd, size_t size, bool writable);
/* Bytes of the mapping that starts at addr mapped with huge pages in this process: ShmemPmdMapped,
 * FilePmdMapped, Shared_Hugetlb and Private_Hugetlb of its entry in /proc/self/smaps (the walk
 * stops at that entry). -1 when there is no such entry or smaps cannot be read. */
int ferry__map_huge_bytes(const void *addr, uint64_t *bytes);
void *ferry__map(int fd, size_t size, bool writable); /* shared mapping or NULL */
void ferry__unmap(void *addr, size_t size);
void ferry__prefault_write(void *addr, size_t size); /* best effort */
/* Maps the pages of a readable range into this process (MADV_POPULATE_READ, or reading one byte
 * per page on kernels before 5.14). Best effort. */
void ferry__prefault_read(const void *addr, size_t size);
/* Calls fn(arg, name) for each entry of the directory dirfd (from its start), up to max entries,
 * without allocating (getdents64 into a buffer on the stack). */
int ferry__dir_each(int dirfd, unsigned max, void (*fn)(void *arg, const char *name), void *arg);

/* Seqpacket Unix-domain sockets named relative to a directory descriptor. A listening socket
 * queues up to FERRY__LISTEN_BACKLOG connections not accepted yet (fewer where the system's
 * somaxconn is lower); a connect to a full queue fails with EAGAIN. */
#define FERRY__LISTEN_BACKLOG 256
int ferry__listen_at(int dirfd, const char *name, const char *tmp_name,
                     unsigned mode);                /* fd or -1 */
int ferry__connect_at(int dirfd, const char *name); /* fd (non-blocking) or -1 */
/* Bytes this end sent that the peer has not read yet (SIOCOUTQ), or -1. */
int ferry__sock_unread(int sock);
int ferry__accept(int listen_fd); /* fd (non-blocking) or -1 */
int ferry__peer_cred(int sock, pid_t *pid, uid_t *uid, gid_t *gid);
/* 1 when the peer's primary or supplementary groups include gid, 0 when not, -1 on error. */
int ferry__peer_in_group(int sock, gid_t gid);
/* Sends one datagram with up to 4 descriptors; never blocks (EAGAIN when the peer is full). */
int ferry__send_msg(int sock, const void *buf, size_t len, const int *fds, int nfds);
/* Descriptors a peer sent. Their last close may wait as long as the peer likes (a TCP socket
 * with SO_LINGER and unsent data, a FUSE or network file, a terminal, a socket with such
 * descriptors in flight), so they are closed only where that cannot happen and otherwise by a
 * disposal thread of the process, started the first time one is needed (at most 4 threads and
 * 256 queued descriptors; past those a descriptor stays open and is counted as kept).
 * ferry__fd_close_waits: 1 when the close of fd could wait (or that cannot be told), 0 not.
 * ferry__fd_dispose: closes fd without waiting; 0 closed, 1 handed to the disposal thread, -1
 * kept open. errno is left as it was.
 * ferry__sock_dispose: closes a connection socket of ours: shut to input, what the peer queued
 * received and its descriptors disposed of, then closed (by the disposal thread when its queue
 * cannot be emptied). */
int ferry__fd_close_waits(int fd);
/* 1 when every page of [offset, offset + len) of fd is allocated (no hole: reading it through a
 * shared mapping allocates nothing), 0 when there is a hole, -1 when it cannot be told. */
int ferry__fd_backed(int fd, uint64_t offset, uint64_t len);
int ferry__fd_dispose(int fd);
void ferry__sock_dispose(int sock);
void ferry__fd_disposal_stats(uint64_t *deferred, uint64_t *kept, uint32_t *threads);
/* Receives one datagram; *nfds in: capacity of fds, out: received (extra ones are disposed of).
 * Returns the byte count, 0 at end of stream, -1 on error (EAGAIN when nothing is there).
 * A truncated datagram fails with EMSGSIZE after closing the descriptors it carried. */
ssize_t ferry__recv_msg(int sock, void *buf, size_t cap, int *fds, int *nfds);

/* Poller (epoll): level-triggered, 64-bit tag per descriptor. */
typedef struct ferry__event {
    uint64_t tag;
    uint32_t in : 1, hup : 1, err : 1;
} ferry__event;
int ferry__poller_create(void);
int ferry__poller_add(int poller, int fd, uint64_t tag);
int ferry__poller_del(int poller, int fd);
/* Waits up to timeout_ns (negative: for ever); returns the number of events, 0 on timeout,
 * -1 on error. EINTR is returned as 0 events. */
int ferry__poller_wait(int poller, ferry__event *events, int capacity, int64_t timeout_ns);
/* The same, with a timeout of under a second kept to the nanosecond rather than rounded up to a
 * millisecond: for a wait that must end just before an anticipated sample (spin.h). */
int ferry__poller_wait_precise(int poller, ferry__event *events, int capacity, int64_t timeout_ns);

/* Notifier (eventfd). */
int ferry__notifier_create(void);
void ferry__notifier_signal(int fd);
void ferry__notifier_drain(int fd);

/* Futexes on 32-bit words of shared mappings (process-shared). */
void ferry__futex_wake(void *word);
/* Sleeps until a wake-up on one of the n words (n <= 128), a word differs from its expected
 * value, or timeout_ns passes (negative: for ever). Returns 0, or -1 with errno ETIMEDOUT,
 * EAGAIN (a word differed), EINTR, or ENOSYS (two words or more, and the kernel has no
 * vectored futex wait; one word is waited for with FUTEX_WAIT, which every kernel has). */
int ferry__futex_waitv(void *const *words, const uint32_t *expected, unsigned n,
                       int64_t timeout_ns);

/* Directory watch (inotify) for entries created or moved in and the directory going away, on
 * the directory open as dirfd (no path is resolved again). */
int ferry__dirwatch_create(int *watch_fd, int dirfd);
/* Drains the watch; returns 1 when the watched directory itself went away, else 0. */
int ferry__dirwatch_drain(int watch_fd);

/* Liveness locks on status files (whole-file, per open file description). */
int ferry__lock_exclusive(int fd); /* non-blocking */
/* 1: someone holds a lock (the owner is alive); 0: nobody; -1: error. */
int ferry__lock_held_by_other(int fd);

/* Random 64-bit value (not zero). */
uint64_t ferry__random64(void);

/* What ferry__dir_open_checked found where it wanted a directory of its own. */
typedef struct ferry__dir_found {
    bool exists;
    uint32_t type; /* S_IFMT bits */
    uint32_t uid, gid;
    uint32_t mode; /* permission bits, with set-group-id */
} ferry__dir_found;

/* Opens the directory name relative to dirfd (AT_FDCWD: a path), creating it when it is missing
 * (its parent must exist: nothing above it is made), without following a symbolic link in its
 * last component, and checks the open directory: not open to others, and owned by the caller's
 * effective uid. With share_gid >= 0 a new one is made group share_gid, mode 02770 (new entries
 * inherit the group), and one of another owner is accepted when it has that group with rwx.
 * Returns a descriptor (O_DIRECTORY, close-on-exec), or -1 with errno ENOTDIR (not a directory,
 * a symbolic link included), EPERM (owner or mode) or the cause mkdir or open gave; *found, when
 * not NULL, describes what was there. */
int ferry__dir_open_checked(int dirfd, const char *name, int64_t share_gid,
                            ferry__dir_found *found);

/* Real-time controls for the calling thread and process (rt.c gives them their policy).
 * Thread functions return 0 or an errno value (they do not set errno). */
int ferry__cpu_online(int cpu);        /* 1 online, 0 not, -1 error */
int ferry__cpu_count(uint32_t *count); /* online CPUs */
/* The one CPU the calling thread may run on now (sched_getaffinity); -1 when it may run on
 * more than one or its affinity cannot be read. */
int32_t ferry__cpu_only(void);
/* One step of a spin loop: tells the CPU (and a hypervisor) that this is a busy wait. */
static inline void ferry__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}
int ferry__thread_pin(const int *cpus, size_t n); /* pthread_setaffinity_np */
int ferry__thread_fifo(int priority);             /* SCHED_FIFO, pthread_setschedparam */
int ferry__fifo_priority_max(void);
int ferry__lock_memory(void); /* mlockall(CURRENT|FUTURE|ONFAULT) */
/* Soft limits, UINT64_MAX for unlimited; which: 'r' RLIMIT_RTPRIO, 'l' RLIMIT_MEMLOCK. */
int ferry__rlimit(char which, uint64_t *soft);
int ferry__vm_size(uint64_t *bytes);  /* VmSize of this process */
int ferry__stack_size(size_t *bytes); /* the calling thread's stack left below the caller */
void ferry__prefault_stack(size_t bytes);
/* Keeps freed heap memory in the process (no trimming, no mmap'd blocks), then allocates and
 * touches bytes and frees them: later allocations up to that size do not fault. */
int ferry__prefault_heap(size_t bytes);
int ferry__page_faults(uint64_t *minor, uint64_t *major);

#endif
