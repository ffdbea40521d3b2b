#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TU_MAX_CHILDREN 64
#define TU_MAX_PIPES 64
#define TU_DOMAIN 3u

static char tu_dir_[256];
static const char *tu_name_ = "?";
static pid_t tu_main_pid_;
static bool tu_child_;
static int tu_fds_at_begin_;
static pid_t tu_children_[TU_MAX_CHILDREN];
static int tu_child_status_[TU_MAX_CHILDREN]; /* wait status once reaped early, else -1 */
static tu_pipe tu_pipes_[TU_MAX_PIPES];

static void tu_rmrf(const char *path);

/* The last line the library logged through tu_log in this process, for tu_fail to print. */
static pthread_mutex_t tu_log_lock_ = PTHREAD_MUTEX_INITIALIZER;
static char tu_last_log_[512];

void tu_log_keep(const char *message)
{
    pthread_mutex_lock(&tu_log_lock_);
    snprintf(tu_last_log_, sizeof tu_last_log_, "%s", message);
    pthread_mutex_unlock(&tu_log_lock_);
}

void tu_log(void *arg, ferry_log_level level, const char *message)
{
    (void)arg;
    (void)level;
    tu_log_keep(message);
    fprintf(stderr, "ferry: %s\n", message);
}

void tu_fail(const char *file, int line, const char *fmt, ...)
{
    int err = errno; /* before anything below can change it */
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s:%d: [%s%s pid %d] FAIL: %s\n", file, line, tu_name_,
            tu_child_ ? " child" : "", (int)getpid(), msg);
    /* errno as the check found it (it may be stale: it is a hint, not a verdict) and the
     * library's last words in this process. */
    char last[sizeof tu_last_log_] = "(another thread is logging)";
    if (pthread_mutex_trylock(&tu_log_lock_) == 0) {
        snprintf(last, sizeof last, "%s", tu_last_log_);
        pthread_mutex_unlock(&tu_log_lock_);
    }
    fprintf(stderr, "    errno %d (%s); the library's last log line here: %s\n", err,
            err ? strerror(err) : "none", last[0] ? last : "(none)");
    fflush(stderr);
    fflush(stdout);
    for (int i = 0; i < TU_MAX_CHILDREN; i++) {
        if (tu_children_[i] > 0 && tu_child_status_[i] == -1) {
            kill(tu_children_[i], SIGKILL);
            waitpid(tu_children_[i], NULL, 0);
            tu_children_[i] = 0;
        }
    }
    if (!tu_child_ && getpid() == tu_main_pid_ && tu_dir_[0] != '\0')
        tu_rmrf(tu_dir_);
    _exit(1);
}

static int tu_rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static void tu_rmrf(const char *path)
{
    nftw(path, tu_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

const char *tu_dir(void)
{
    return tu_dir_;
}

uint32_t tu_domain(void)
{
    return TU_DOMAIN;
}

bool tu_in_child(void)
{
    return tu_child_;
}

ferry_node_options tu_node_options(const char *name)
{
    ferry_node_options o;
    ferry_node_options_init(&o);
    o.dir = tu_dir_;
    o.domain = TU_DOMAIN;
    o.name = name;
    o.log = tu_log;
    return o;
}

ferry_node *tu_node(const char *name)
{
    ferry_node_options o = tu_node_options(name);
    ferry_node *node = NULL;
    TU_OK(ferry_node_create(&node, &o));
    TU_CHECK(node != NULL);
    return node;
}

void tu_topic_path(const char *topic, char *out, size_t cap)
{
    char t[FERRY_TOPIC_MAX + 2];
    if (topic[0] == '/')
        topic++;
    snprintf(t, sizeof t, "%s", topic);
    for (char *c = t; *c; c++)
        if (*c == '/')
            *c = '.';
    snprintf(out, cap, "%s/%u/%s", tu_dir_, TU_DOMAIN, t);
}

int tu_fd_count(void)
{
    DIR *d = opendir("/proc/self/fd");
    TU_CHECK_MSG(d != NULL, "opendir /proc/self/fd: %s", strerror(errno));
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

/* Calls fn for each line of /proc/self/maps, parsed, until it returns false. The one parser of
 * that file in the tests. */
static void maps_each(bool (*fn)(void *arg, const char *line, const tu_mapping *m), void *arg)
{
    FILE *f = fopen("/proc/self/maps", "r");
    TU_CHECK_MSG(f != NULL, "fopen /proc/self/maps: %s", strerror(errno));
    char line[PATH_MAX + 256];
    while (fgets(line, sizeof line, f) != NULL) {
        tu_mapping m;
        unsigned long start, end;
        int off = 0;
        memset(&m, 0, sizeof m);
        if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %n", &start, &end, m.perms, &off) < 3)
            continue;
        m.start = start;
        m.end = end;
        if (off > 0)
            snprintf(m.path, sizeof m.path, "%.*s", (int)strcspn(line + off, "\n"), line + off);
        if (!fn(arg, line, &m))
            break;
    }
    fclose(f);
}

typedef struct maps_query {
    const char *needle, *perms;
    const void *addr;
    tu_mapping *out;
    int cap, n;
} maps_query;

static bool maps_match(void *arg, const char *line, const tu_mapping *m)
{
    maps_query *q = arg;
    if (q->addr) {
        if ((uintptr_t)q->addr < m->start || (uintptr_t)q->addr >= m->end)
            return true;
    } else if ((q->needle && strstr(line, q->needle) == NULL) ||
               (q->perms && strcmp(m->perms, q->perms) != 0)) {
        return true;
    }
    if (q->n < q->cap)
        q->out[q->n] = *m;
    q->n++;
    return q->addr == NULL;
}

int tu_maps_find(const char *needle, const char *perms, tu_mapping *out, int cap)
{
    maps_query q = {needle, perms, NULL, out, cap, 0};
    maps_each(maps_match, &q);
    return q.n;
}

bool tu_map_of(const void *addr, tu_mapping *out)
{
    maps_query q = {NULL, NULL, addr, out, 1, 0};
    maps_each(maps_match, &q);
    return q.n > 0;
}

int tu_dir_entries(const char *path)
{
    DIR *d = opendir(path);
    if (d == NULL)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            n++;
    closedir(d);
    return n;
}

int tu_maps_count(const char *needle)
{
    return tu_maps_find(needle, NULL, NULL, 0);
}

static bool tu_is_endpoint_file(const char *name)
{
    size_t n = strlen(name);
    return strncmp(name, "pub.", 4) == 0 || strncmp(name, "sub.", 4) == 0 ||
           (n > 5 && strcmp(name + n - 5, ".sock") == 0) ||
           (n > 7 && strcmp(name + n - 7, ".status") == 0);
}

int tu_domain_files(void)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%u", tu_dir_, TU_DOMAIN);
    DIR *d = opendir(path);
    if (d == NULL)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (tu_is_endpoint_file(e->d_name)) {
            fprintf(stderr, "    left over: %s/%s\n", path, e->d_name);
            n++;
            continue;
        }
        char sub[PATH_MAX + 256];
        snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
        DIR *t = opendir(sub);
        if (t == NULL)
            continue;
        struct dirent *f;
        while ((f = readdir(t)) != NULL) {
            if (f->d_name[0] != '.' && tu_is_endpoint_file(f->d_name)) {
                fprintf(stderr, "    left over: %s/%s\n", sub, f->d_name);
                n++;
            }
        }
        closedir(t);
    }
    closedir(d);
    return n;
}

typedef struct tu_inspect_acc {
    int total, alive;
} tu_inspect_acc;

static bool tu_inspect_cb(void *arg, const ferry_endpoint_info *info)
{
    tu_inspect_acc *acc = arg;
    acc->total++;
    if (info->alive)
        acc->alive++;
    return true;
}

int tu_inspect_count(const char *topic, int *alive)
{
    tu_inspect_acc acc = {0, 0};
    TU_OK(ferry_inspect(tu_dir_, TU_DOMAIN, topic, tu_inspect_cb, &acc));
    if (alive != NULL)
        *alive = acc.alive;
    return acc.total;
}

void tu_check_no_mappings(void)
{
    TU_CMP_I64(tu_maps_count("memfd:ferry-data"), ==, 0);
}

void tu_begin(const char *name)
{
    tu_name_ = name;
    tu_main_pid_ = getpid();
    tu_child_ = false;
    snprintf(tu_dir_, sizeof tu_dir_, "/tmp/ferry-test-XXXXXX");
    if (mkdtemp(tu_dir_) == NULL) {
        tu_dir_[0] = '\0';
        TU_FAIL("mkdtemp: %s", strerror(errno));
    }
    for (int i = 0; i < TU_MAX_PIPES; i++)
        tu_pipes_[i].r = tu_pipes_[i].w = -1;
    tu_fds_at_begin_ = tu_fd_count();
    printf("--- %s (%s)\n", name, tu_dir_);
    fflush(stdout);
}

void tu_end(void)
{
    for (int i = 0; i < TU_MAX_PIPES; i++)
        tu_pipe_close(&tu_pipes_[i]);
    for (int i = 0; i < TU_MAX_CHILDREN; i++)
        TU_CHECK_MSG(tu_children_[i] == 0, "child %d was not waited for", (int)tu_children_[i]);
    TU_CMP_I64(tu_fd_count(), ==, tu_fds_at_begin_);
    tu_check_no_mappings();
    TU_CMP_I64(tu_domain_files(), ==, 0);
    int alive = -1;
    int total = tu_inspect_count(NULL, &alive);
    TU_CMP_I64(alive, ==, 0);
    TU_CMP_I64(total, ==, 0);
    tu_rmrf(tu_dir_);
    printf("ok  %s\n", tu_name_);
    fflush(stdout);
    tu_dir_[0] = '\0';
    tu_name_ = "?";
}

void tu_run(const char *name, void (*fn)(void))
{
    tu_begin(name);
    fn();
    tu_end();
}

/* --- processes ---------------------------------------------------------------------------- */

pid_t tu_fork(int (*fn)(void *arg), void *arg, unsigned seconds)
{
    int slot = -1;
    for (int i = 0; i < TU_MAX_CHILDREN && slot < 0; i++)
        if (tu_children_[i] == 0)
            slot = i;
    TU_CHECK_MSG(slot >= 0, "too many children");
    fflush(NULL);
    pid_t pid = fork();
    TU_CHECK_MSG(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        tu_child_ = true;
        memset(tu_children_, 0, sizeof tu_children_);
        alarm(seconds);
        tu_fds_at_begin_ = tu_fd_count();
        int rc = fn(arg);
        fflush(NULL);
        _exit(rc);
    }
    tu_children_[slot] = pid;
    tu_child_status_[slot] = -1;
    return pid;
}

void tu_check_child_teardown(void)
{
    TU_CMP_I64(tu_fd_count(), ==, tu_fds_at_begin_);
    tu_check_no_mappings();
}

static void tu_forget_child(pid_t pid)
{
    for (int i = 0; i < TU_MAX_CHILDREN; i++)
        if (tu_children_[i] == pid)
            tu_children_[i] = 0;
}

/* A child that failed while this process waits for a message from it (or from another child
 * that now never comes) fails the test at once instead of after the timeout. */
static void tu_check_children(void)
{
    for (int i = 0; i < TU_MAX_CHILDREN; i++) {
        if (tu_children_[i] <= 0 || tu_child_status_[i] != -1)
            continue;
        int st = 0;
        if (waitpid(tu_children_[i], &st, WNOHANG) != tu_children_[i])
            continue;
        tu_child_status_[i] = st;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            pid_t pid = tu_children_[i];
            tu_children_[i] = 0;
            if (WIFSIGNALED(st))
                TU_FAIL("child %d was killed by signal %d (%s)", (int)pid, WTERMSIG(st),
                        strsignal(WTERMSIG(st)));
            TU_FAIL("child %d exited with status %d", (int)pid,
                    WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        }
    }
}

int tu_wait_status(pid_t pid, int timeout_ms)
{
    for (int i = 0; i < TU_MAX_CHILDREN; i++) {
        if (tu_children_[i] == pid && tu_child_status_[i] != -1) {
            int st = tu_child_status_[i];
            tu_children_[i] = 0;
            return st;
        }
    }
    int fd = pidfd_open(pid, 0);
    if (fd >= 0) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r;
        do
            r = poll(&p, 1, timeout_ms);
        while (r < 0 && errno == EINTR);
        close(fd);
        if (r == 0) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            tu_forget_child(pid);
            TU_FAIL("child %d still running after %d ms (killed)", (int)pid, timeout_ms);
        }
    }
    int status = 0;
    pid_t r;
    do
        r = waitpid(pid, &status, 0);
    while (r < 0 && errno == EINTR);
    TU_CHECK_MSG(r == pid, "waitpid(%d): %s", (int)pid, strerror(errno));
    tu_forget_child(pid);
    return status;
}

void tu_child_ok(const char *file, int line, pid_t pid)
{
    int st = tu_wait_status(pid, 60000);
    if (WIFSIGNALED(st))
        tu_fail(file, line, "child %d killed by signal %d (%s)", (int)pid, WTERMSIG(st),
                strsignal(WTERMSIG(st)));
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        tu_fail(file, line, "child %d exited with status %d, expected 0", (int)pid,
                WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

/* --- pipes -------------------------------------------------------------------------------- */

tu_pipe tu_pipe_make(void)
{
    int fds[2];
    TU_CHECK_MSG(pipe(fds) == 0, "pipe: %s", strerror(errno));
    tu_pipe p = {fds[0], fds[1]};
    if (!tu_child_) {
        for (int i = 0; i < TU_MAX_PIPES; i++) {
            if (tu_pipes_[i].r < 0 && tu_pipes_[i].w < 0) {
                tu_pipes_[i] = p;
                return p;
            }
        }
    }
    return p;
}

void tu_pipe_close(tu_pipe *p)
{
    for (int i = 0; i < TU_MAX_PIPES; i++) {
        if (&tu_pipes_[i] != p && tu_pipes_[i].r == p->r && tu_pipes_[i].w == p->w && p->r >= 0) {
            tu_pipes_[i].r = tu_pipes_[i].w = -1;
        }
    }
    if (p->r >= 0)
        close(p->r);
    if (p->w >= 0)
        close(p->w);
    p->r = p->w = -1;
}

void tu_send(const tu_pipe *p, uint64_t v)
{
    ssize_t n;
    do
        n = write(p->w, &v, sizeof v);
    while (n < 0 && errno == EINTR);
    TU_CHECK_MSG(n == (ssize_t)sizeof v, "pipe write: %s", strerror(errno));
}

uint64_t tu_recv(const tu_pipe *p, int timeout_ms)
{
    struct pollfd pf = {.fd = p->r, .events = POLLIN};
    int r, waited = 0;
    for (;;) {
        int slice = timeout_ms - waited < 50 ? timeout_ms - waited : 50;
        r = poll(&pf, 1, slice);
        if (r < 0 && errno == EINTR)
            continue;
        if (r != 0 || waited >= timeout_ms)
            break;
        waited += slice;
        tu_check_children();
    }
    TU_CHECK_MSG(r == 1, "no message from the peer process within %d ms", timeout_ms);
    uint64_t v = 0;
    ssize_t n;
    do
        n = read(p->r, &v, sizeof v);
    while (n < 0 && errno == EINTR);
    TU_CHECK_MSG(n == (ssize_t)sizeof v, "pipe read returned %zd (peer gone?)", n);
    return v;
}

bool tu_readable(const tu_pipe *p)
{
    struct pollfd pf = {.fd = p->r, .events = POLLIN};
    return poll(&pf, 1, 0) == 1;
}

uint64_t tu_serve_until(ferry_publisher **pubs, size_t n, const tu_pipe *p, int timeout_ms)
{
    ferry_time t0 = ferry_now();
    unsigned rounds = 0;
    for (;;) {
        for (size_t i = 0; i < n; i++)
            TU_OK(ferry_publisher_poll(pubs[i], n == 1 ? 2 * TU_MS : 0));
        if (n != 1) {
            struct pollfd pf = {.fd = p->r, .events = POLLIN};
            poll(&pf, 1, 1);
        }
        if (tu_readable(p))
            return tu_recv(p, 0);
        if (++rounds % 16 == 0)
            tu_check_children();
        TU_CHECK_MSG(tu_since(t0) < timeout_ms * TU_MS,
                     "no message from the peer process within %d ms", timeout_ms);
    }
}

void tu_connect_local(ferry_publisher *pub, uint32_t nsubs, ferry_subscriber *sub, uint32_t npubs)
{
    ferry_time t0 = ferry_now();
    for (;;) {
        TU_OK(ferry_publisher_poll(pub, 0));
        ferry_err e = ferry_subscriber_wait_publishers(sub, npubs, TU_MS);
        TU_CHECK_MSG(e == FERRY_OK || e == FERRY_ETIMEDOUT, "ferry_subscriber_wait_publishers: %s",
                     ferry_strerror(e));
        ferry_publisher_stats ps;
        ferry_subscriber_stats ss;
        TU_OK(ferry_publisher_stats_get(pub, &ps));
        TU_OK(ferry_subscriber_stats_get(sub, &ss));
        if (ps.subscribers >= nsubs && ss.publishers >= npubs)
            return;
        TU_CHECK_MSG(tu_since(t0) < TU_WAIT_NS,
                     "not connected after 10 s: publisher has %u subscribers (want %u), "
                     "subscriber has %u publishers (want %u)",
                     ps.subscribers, nsubs, ss.publishers, npubs);
    }
}

/* --- payloads ----------------------------------------------------------------------------- */

static uint64_t tu_word(uint64_t seq, uint64_t i)
{
    uint64_t x = (seq * 0x9E3779B97F4A7C15ull) ^ ((i + 1) * 0xD1B54A32D192ED03ull);
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    return x;
}

void tu_fill(void *p, size_t n, uint64_t seq)
{
    unsigned char *b = p;
    size_t words = n / 8;
    for (size_t i = 0; i < words; i++) {
        uint64_t w = tu_word(seq, i);
        memcpy(b + i * 8, &w, 8);
    }
    uint64_t w = tu_word(seq, words);
    memcpy(b + words * 8, &w, n % 8);
}

size_t tu_verify(const void *p, size_t n, uint64_t seq)
{
    const unsigned char *b = p;
    size_t words = n / 8;
    for (size_t i = 0; i <= words; i++) {
        uint64_t w = tu_word(seq, i);
        size_t len = i < words ? 8 : n % 8;
        if (memcmp(b + i * 8, &w, len) != 0) {
            const unsigned char *wb = (const unsigned char *)&w;
            for (size_t k = 0; k < len; k++)
                if (b[i * 8 + k] != wb[k])
                    return i * 8 + k;
        }
    }
    return SIZE_MAX;
}

void tu_sample_intact(const char *file, int line, const ferry_sample *s, size_t expected_size)
{
    if (s->data == NULL)
        tu_fail(file, line, "sample seq %" PRIu64 " has no data", s->sequence);
    if (s->size != expected_size)
        tu_fail(file, line, "sample seq %" PRIu64 ": size %zu, expected %zu", s->sequence, s->size,
                expected_size);
    size_t bad = tu_verify(s->data, s->size, s->sequence);
    if (bad != SIZE_MAX)
        tu_fail(file, line, "sample seq %" PRIu64 " size %zu: byte %zu differs from the pattern",
                s->sequence, s->size, bad);
}

void tu_publish_pattern(ferry_publisher *pub, size_t size, uint64_t seq)
{
    void *p = NULL;
    TU_OK(ferry_loan(pub, size, &p));
    TU_CHECK(p != NULL);
    tu_fill(p, size, seq);
    TU_OK(ferry_publish(pub, p, 0));
}

int64_t tu_since(ferry_time t)
{
    return ferry_now().ns - t.ns;
}

void tu_sleep_ns(int64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / TU_SEC), .tv_nsec = (long)(ns % TU_SEC)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

ferry_err tu_try_publisher(ferry_node *node, const char *topic, const char *type, size_t pool_bytes,
                           size_t max_sample, ferry_publisher **out, int *saved_errno)
{
    ferry_publisher_options po;
    ferry_publisher_options_init(&po);
    po.pool_bytes = pool_bytes;
    po.max_sample_size = max_sample;
    *out = NULL;
    errno = 0;
    ferry_err err = ferry_publisher_create(out, node, topic, type, ferry_hash(type), &po);
    *saved_errno = errno;
    return err;
}

ferry_err tu_try_subscriber(ferry_node *node, const char *topic, const char *type,
                            ferry_subscriber **out, int *saved_errno)
{
    *out = NULL;
    errno = 0;
    ferry_err err = ferry_subscriber_create(out, node, topic, type, ferry_hash(type), NULL);
    *saved_errno = errno;
    return err;
}

void tu_take(const char *file, int line, ferry_subscriber *sub, ferry_sample *s)
{
    ferry_err e = ferry_take(sub, s);
    if (e == FERRY_EAGAIN) {
        e = ferry_wait(sub, TU_WAIT_NS);
        if (e != FERRY_OK)
            tu_fail(file, line, "no sample within %d ms: %s", TU_WAIT_MS, ferry_strerror(e));
        e = ferry_take(sub, s);
    }
    if (e != FERRY_OK)
        tu_fail(file, line, "ferry_take: %s", ferry_strerror(e));
}

void tu_take_intact(const char *file, int line, ferry_subscriber *sub, size_t size)
{
    ferry_sample s;
    ferry_err e;
    tu_take(file, line, sub, &s);
    tu_sample_intact(file, line, &s, size ? size : s.size);
    if ((e = ferry_release(sub, &s)) != FERRY_OK)
        tu_fail(file, line, "ferry_release: %s", ferry_strerror(e));
}

static int write_byte(void *arg)
{
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGSEGV, &dfl, NULL);
    volatile unsigned char *p = arg;
    p[0] = (unsigned char)(p[0] + 1);
    return 0;
}

int tu_write_status(const void *addr)
{
    return tu_wait_status(tu_fork(write_byte, (void *)(uintptr_t)addr, 10), TU_WAIT_MS);
}

int tu_results(const int *results, int n, int always)
{
    int failed = 0, skipped = 0;
    for (int i = 0; i < n; i++) {
        failed += results[i] == 1;
        skipped += results[i] == TU_SKIP;
    }
    if (failed != 0)
        fprintf(stderr, "%d test(s) failed\n", failed);
    if (skipped != 0)
        printf("%d of %d test(s) skipped\n", skipped, n);
    return failed != 0 ? 1 : skipped == n - always ? TU_SKIP : 0;
}

int tu_run_isolated(const char *name, int (*fn)(void))
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        tu_begin(name);
        int rc = fn();
        tu_end();
        fflush(NULL);
        _exit(rc);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(st))
        return 1;
    return WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == TU_SKIP ? WEXITSTATUS(st) : 1;
}
