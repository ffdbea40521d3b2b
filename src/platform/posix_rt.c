/* The OS seam on Linux: real-time controls (CPUs, scheduling, locked memory, limits) and the
 * readers of small /proc and /sys files the other families share. */
#include "platform/posix.h"

int ferry__read_small(const char *path, char *buf, size_t cap)
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

int ferry__each_line(const char *path, int (*fn)(void *arg, char *line), void *arg)
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

bool ferry__parse_u64(const char *s, uint64_t *v)
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

int ferry__cpu_online(int cpu)
{
    if (cpu < 0)
        return 0;
    char list[512];
    if (ferry__read_small("/sys/devices/system/cpu/online", list, sizeof list) != 0) {
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
    if (ferry__read_small("/proc/self/statm", buf, sizeof buf) != 0)
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
