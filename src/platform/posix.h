/* What the Linux files of the OS seam (posix*.c) share: their includes, the flags older libc
 * headers lack, and the readers of small /proc and /sys files. Private to src/platform/. */
#ifndef FERRY_PLATFORM_POSIX_H
#define FERRY_PLATFORM_POSIX_H

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

/* Reads a small text file into buf (terminated); no allocation. */
int ferry__read_small(const char *path, char *buf, size_t cap);
/* Calls fn(arg, line) for each line of a file, terminated and without its newline, reading
 * through a buffer on the stack; a line longer than the buffer is skipped. fn returns nonzero
 * to stop. */
int ferry__each_line(const char *path, int (*fn)(void *arg, char *line), void *arg);
/* A decimal number after blanks, or "max" (UINT64_MAX); false when there is neither. */
bool ferry__parse_u64(const char *s, uint64_t *v);

#endif
