/* The OS seam on Linux: memory reservation (headroom from meminfo and cgroups, tmpfs space
 * reserved before it is used) and huge pages. */
#include "platform/posix.h"

#define FERRY__RESERVE_STEP ((uint64_t)64 << 20)
#define FERRY__MARGIN_MIN ((uint64_t)64 << 20)
/* Limits at or above this mean none: cgroup v1 writes 2^63 - 4096, v2 "max". */
#define FERRY__NO_LIMIT ((uint64_t)1 << 62)

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
    if (strncmp(line, "MemTotal:", 9) == 0 && ferry__parse_u64(line + 9, &m->total_kb))
        m->found |= 1;
    else if (strncmp(line, "MemAvailable:", 13) == 0 &&
             ferry__parse_u64(line + 13, &m->available_kb))
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
    bool match =
        f->v2 ? strcmp(line, "0") == 0 && controllers[0] == '\0' : list_has(controllers, "memory");
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
    bool ok = n > 0 && (size_t)n < PATH_MAX - len && ferry__read_small(dir, buf, sizeof buf) == 0 &&
              ferry__parse_u64(buf, v);
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
            ferry__parse_u64(line + n, &c->values[i]);
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
        ferry__each_line(dir, stat_line, &c);
    dir[len] = '\0';
    uint64_t busy = c.values[1] + c.values[2];
    return c.values[0] > busy ? c.values[0] - busy : 0;
}

/* Walks from the process's cgroup up to the root of the hierarchy's mount. With limited, opens
 * the innermost cgroup with a memory limit into *limited when it is still -1. */
static void cgroup_headroom(bool v2, uint64_t *least, int *limited)
{
    cgroup_find cg = {.v2 = v2};
    if (ferry__each_line("/proc/self/cgroup", cgroup_line, &cg) != 0 || !cg.found)
        return;
    mount_find m = {.v2 = v2, .cgroup = cg.path};
    if (ferry__each_line("/proc/self/mountinfo", mount_line, &m) != 0 || !m.found)
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
    if (ferry__each_line("/proc/meminfo", meminfo_line, &mi) == 0 && mi.found == 3 &&
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
fail : {
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
    return ferry__read_small(path, buf, sizeof buf) == 0 && ferry__parse_u64(buf, v);
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
    if (ferry__read_small(path, buf, sizeof buf) != 0)
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
    static const char *const keys[] = {
        "ShmemPmdMapped:", "FilePmdMapped:", "Shared_Hugetlb:", "Private_Hugetlb:"};
    uint64_t v;
    if (f->in)
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
            size_t n = strlen(keys[i]);
            if (strncmp(line, keys[i], n) == 0 && ferry__parse_u64(line + n, &v))
                f->kb += v;
        }
    return 0;
}

int ferry__map_huge_bytes(const void *addr, uint64_t *bytes)
{
    smaps_find f = {.start = (uintptr_t)addr};
    if (ferry__each_line("/proc/self/smaps", smaps_line, &f) != 0)
        return -1;
    if (!f.found) {
        errno = ENOENT;
        return -1;
    }
    *bytes = f.kb * 1024;
    return 0;
}
