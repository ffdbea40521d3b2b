/*
 * Who may reach a publisher's data, and teardown in any order.
 *
 * - Default modes: domain and topic directories 0700, sockets and status files 0600, owned by
 *   the user, whatever the umask.
 * - A process of another uid is refused by default: ferry_node_create gives FERRY_EPERM (the
 *   domain directory belongs to another user) and the kernel refuses the socket (EACCES).
 * - The publisher's SO_PEERCRED check on its own: a subscriber of another uid that can reach
 *   the shared directory through its filesystem gid, but whose credentials (uid, gid,
 *   supplementary groups) are not in the share group, is refused (stats.rejected) and gets
 *   nothing.
 * - Opt-in sharing with a group: a subscriber of another uid in that group is admitted,
 *   receives intact frames, still cannot write them (r--s mapping, mprotect refused, a write
 *   dies with SIGSEGV); modes are 02770 group G for directories, 0660 socket, 0640 status.
 * - Teardown in any order: subscriber or publisher first, in one process or across processes;
 *   a node with live children and a subscriber holding samples refuse with FERRY_EBUSY.
 * - The domain's directories: only the root given is made, and only when its parent exists; a
 *   root squatted by another uid (a directory, a link, a file, a FIFO) is refused with a message
 *   that names it, its owner and mode; a domain directory swapped for a link by a member of the
 *   share group after the node was made is not followed.
 *
 * The parts that switch uids need root; without root they are skipped and the program exits 77
 * after running the rest.
 */
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <sys/fsuid.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define TYPE "test/security"
#define TOPIC "/sec/cam"
#define SIZE ((size_t)64 * 1024)
#define FRAMES 5

enum { MSG_READY = 1, MSG_HELD, MSG_GO, MSG_DONE, MSG_FINISH };

static uid_t other_uid;
static gid_t other_gid; /* the other uid's primary group, not the share group */
static gid_t share_gid;

/* --- helpers ------------------------------------------------------------------------------ */

static uid_t free_uid(uid_t from)
{
    for (uid_t u = from; u < from + 1000; u++)
        if (getpwuid(u) == NULL)
            return u;
    TU_FAIL("no unused uid from %u", (unsigned)from);
}

static gid_t free_gid(gid_t from, gid_t not )
{
    for (gid_t g = from; g < from + 1000; g++)
        if (g != not &&getgrgid(g) == NULL)
            return g;
    TU_FAIL("no unused gid from %u", (unsigned)from);
}

/* Drops to uid with primary gid and the supplementary groups given; saved ids follow, so there
 * is no way back. */
static void become(uid_t uid, gid_t gid, const gid_t *groups, size_t ngroups)
{
    TU_CHECK_MSG(setgroups(ngroups, groups) == 0, "setgroups: %s", strerror(errno));
    TU_CHECK_MSG(setresgid(gid, gid, gid) == 0, "setresgid: %s", strerror(errno));
    TU_CHECK_MSG(setresuid(uid, uid, uid) == 0, "setresuid: %s", strerror(errno));
    TU_CHECK(geteuid() == uid && getegid() == gid);
}

/* Asserts the permission bits (with setgid/sticky), owner and group of path. */
#define CHECK_MODE(path, mode, uid, gid)                                                           \
    check_mode(__FILE__, __LINE__, (path), (mode), (uid), (gid))
static void check_mode(const char *file, int line, const char *path, unsigned mode, uid_t uid,
                       gid_t gid)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        tu_fail(file, line, "lstat %s: %s", path, strerror(errno));
    if ((st.st_mode & 07777) != mode || st.st_uid != uid || st.st_gid != gid)
        tu_fail(file, line, "%s: mode %04o uid %u gid %u, expected mode %04o uid %u gid %u", path,
                (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid, (unsigned)st.st_gid, mode,
                (unsigned)uid, (unsigned)gid);
}

/* Path of the first entry of dir named prefix*suffix; false when there is none. */
static bool find_entry(const char *dir, const char *prefix, const char *suffix, char *out,
                       size_t cap)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return false;
    struct dirent *e;
    bool found = false;
    while (!found && (e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name), ns = strlen(suffix);
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0 && n > ns &&
            strcmp(e->d_name + n - ns, suffix) == 0) {
            snprintf(out, cap, "%s/%s", dir, e->d_name);
            found = true;
        }
    }
    closedir(d);
    return found;
}

#define MUST_FIND(dir, prefix, suffix, out)                                                        \
    TU_CHECK_MSG(find_entry((dir), (prefix), (suffix), (out), sizeof(out)), "no %s*%s in %s",      \
                 (prefix), (suffix), (dir))

static void domain_path(char *out, size_t cap)
{
    snprintf(out, cap, "%s/%u", tu_dir(), tu_domain());
}

/* Log sink that counts messages containing "not allowed". */
typedef struct log_count {
    int not_allowed;
    int total;
} log_count;

static void count_log(void *arg, ferry_log_level level, const char *message)
{
    log_count *c = arg;
    (void)level;
    c->total++;
    if (strstr(message, "not allowed") != NULL)
        c->not_allowed++;
}

static ferry_node *node_with(const char *name, bool share, ferry_log_fn log, void *log_arg)
{
    ferry_node_options o = tu_node_options(name);
    o.share_with_group = share;
    o.share_gid = share ? share_gid : 0;
    o.log = log;
    o.log_arg = log_arg;
    ferry_node *node = NULL;
    TU_OK(ferry_node_create(&node, &o));
    return node;
}

static ferry_publisher *make_pub(ferry_node *node)
{
    ferry_publisher_options po;
    ferry_publisher_options_init(&po);
    po.pool_bytes = 16 * SIZE;
    po.max_sample_size = SIZE;
    ferry_publisher *pub = NULL;
    TU_OK(ferry_publisher_create(&pub, node, TOPIC, TYPE, ferry_hash(TYPE), &po));
    return pub;
}

static ferry_subscriber *make_sub(ferry_node *node, uint32_t depth)
{
    ferry_subscriber_options so;
    ferry_subscriber_options_init(&so);
    so.depth = depth;
    ferry_subscriber *sub = NULL;
    TU_OK(ferry_subscriber_create(&sub, node, TOPIC, TYPE, ferry_hash(TYPE), &so));
    return sub;
}

/* Housekeeping until the publisher has no subscriber and every chunk is back. */
static void pub_wait_all_back(ferry_publisher *pub)
{
    ferry_time t0 = ferry_now();
    ferry_publisher_stats ps;
    for (;;) {
        TU_OK(ferry_publisher_poll(pub, 5 * TU_MS));
        TU_OK(ferry_publisher_stats_get(pub, &ps));
        if (ps.subscribers == 0 && ps.chunks_in_use == 0 && ps.chunks_loaned == 0)
            return;
        TU_CHECK_MSG(tu_since(t0) < TU_WAIT_NS,
                     "publisher still has %u subscribers, %u chunks "
                     "in use, %u loaned",
                     ps.subscribers, ps.chunks_in_use, ps.chunks_loaned);
    }
}

/* --- default modes ------------------------------------------------------------------------ */

static void test_default_modes(void)
{
    /* A permissive umask: the modes must come from the library, not from the umask. */
    mode_t old = umask(0);
    ferry_node *node = tu_node("modes");
    ferry_publisher *pub = make_pub(node);
    ferry_subscriber *sub = make_sub(node, 2);
    umask(old);
    tu_connect_local(pub, 1, sub, 1);

    char dom[PATH_MAX], topic[PATH_MAX], f[PATH_MAX + 300];
    domain_path(dom, sizeof dom);
    tu_topic_path(TOPIC, topic, sizeof topic);
    TU_EQ_STR(ferry_node_dir(node), dom);
    CHECK_MODE(dom, 0700, geteuid(), getegid());
    CHECK_MODE(topic, 0700, geteuid(), getegid());
    MUST_FIND(topic, "pub.", ".sock", f);
    struct stat st;
    TU_CHECK(lstat(f, &st) == 0 && S_ISSOCK(st.st_mode));
    CHECK_MODE(f, 0600, geteuid(), getegid());
    MUST_FIND(topic, "pub.", ".status", f);
    CHECK_MODE(f, 0600, geteuid(), getegid());
    MUST_FIND(topic, "sub.", ".status", f);
    CHECK_MODE(f, 0600, geteuid(), getegid());

    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
}

/* A domain directory open to others is refused rather than used. */
static void test_open_directory_refused(void)
{
    char dom[PATH_MAX];
    domain_path(dom, sizeof dom);
    TU_CHECK_MSG(mkdir(dom, 0700) == 0, "mkdir %s: %s", dom, strerror(errno));
    TU_CHECK(chmod(dom, 0755) == 0);
    ferry_node_options o = tu_node_options("open");
    ferry_node *node = NULL;
    TU_ERR(ferry_node_create(&node, &o), FERRY_EPERM);
    TU_CHECK(node == NULL);
    TU_CHECK(chmod(dom, 0700) == 0);
    TU_OK(ferry_node_create(&node, &o));
    TU_OK(ferry_node_destroy(node));
}

/* --- another uid, default: refused -------------------------------------------------------- */

typedef struct intruder {
    tu_pipe to_main;
    char sock_path[PATH_MAX + 300];
    char topic_dir[PATH_MAX];
} intruder;

static int intruder_main(void *arg)
{
    intruder *in = arg;
    /* Forked while the test's publisher lives: its mapping is inherited, so only descriptors
     * are checked at the end. */
    int fds = tu_fd_count();
    become(other_uid, other_gid, NULL, 0);

    /* The library refuses a domain directory of another owner, before touching anything. */
    ferry_node_options o = tu_node_options("intruder");
    ferry_node *node = NULL;
    TU_ERR(ferry_node_create(&node, &o), FERRY_EPERM);
    TU_CHECK(node == NULL);
    o.share_with_group = true; /* claiming a group does not help: the directory is not its */
    o.share_gid = share_gid;
    TU_ERR(ferry_node_create(&node, &o), FERRY_EPERM);
    TU_CHECK(strlen(ferry_strerror(FERRY_EPERM)) > 0);

    /* Going around the library: the kernel refuses the directory and the socket. */
    errno = 0;
    TU_CHECK(opendir(in->topic_dir) == NULL && errno == EACCES);
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    TU_CHECK(s >= 0);
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    if (strlen(in->sock_path) < sizeof sa.sun_path) {
        memcpy(sa.sun_path, in->sock_path, strlen(in->sock_path));
        errno = 0;
        TU_CHECK(connect(s, (struct sockaddr *)&sa, sizeof sa) != 0);
        TU_CMP_I64(errno, ==, EACCES);
    }
    close(s);
    TU_CMP_I64(tu_fd_count(), ==, fds);
    tu_send(&in->to_main, MSG_DONE);
    return 0;
}

static void test_other_uid_refused_by_default(void)
{
    ferry_node *node = tu_node("owner");
    ferry_publisher *pub = make_pub(node);
    intruder in;
    memset(&in, 0, sizeof in);
    in.to_main = tu_pipe_make();
    tu_topic_path(TOPIC, in.topic_dir, sizeof in.topic_dir);
    MUST_FIND(in.topic_dir, "pub.", ".sock", in.sock_path);
    int before = tu_inspect_count(NULL, NULL);

    pid_t pid = tu_fork(intruder_main, &in, 30);
    TU_EQ_U64(tu_serve_until(&pub, 1, &in.to_main, TU_WAIT_MS), MSG_DONE);
    TU_CHILD_OK(pid);
    TU_OK(ferry_publisher_poll(pub, 0));
    ferry_publisher_stats ps;
    TU_OK(ferry_publisher_stats_get(pub, &ps));
    TU_EQ_U64(ps.subscribers, 0);
    TU_EQ_U64(ps.rejected, 0); /* it never got as far as the socket */
    TU_CMP_I64(tu_inspect_count(NULL, NULL), ==, before);

    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
}

/* --- another uid that can reach the files: the credential check alone -------------------- */

typedef struct outsider {
    tu_pipe to_main, to_child;
} outsider;

/* Reads the filesystem gid from /proc/self/status ("Gid: real effective saved fs"). */
static gid_t fs_gid(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    TU_CHECK(f != NULL);
    char line[256];
    unsigned r = 0, e = 0, s = 0, fs = 0;
    bool found = false;
    while (!found && fgets(line, sizeof line, f) != NULL)
        found = sscanf(line, "Gid: %u %u %u %u", &r, &e, &s, &fs) == 4;
    fclose(f);
    TU_CHECK(found);
    return (gid_t)fs;
}

static int outsider_main(void *arg)
{
    outsider *o = arg;
    /* Credentials: uid other_uid, gid other_gid, no supplementary group: not in the share
     * group. Files: the filesystem gid is the share group (kept as the saved gid), so the
     * directory and socket modes let it through and only SO_PEERCRED/SO_PEERGROUPS can stop it. */
    TU_CHECK(setgroups(0, NULL) == 0);
    TU_CHECK_MSG(setresgid(other_gid, other_gid, share_gid) == 0, "setresgid: %s", strerror(errno));
    TU_CHECK_MSG(setresuid(other_uid, other_uid, other_uid) == 0, "setresuid: %s", strerror(errno));
    setfsgid(share_gid);
    TU_CMP_I64(fs_gid(), ==, share_gid);
    TU_CMP_I64(getegid(), ==, other_gid);

    log_count logs = {0, 0};
    ferry_node *node = node_with("outsider", true, count_log, &logs);
    ferry_subscriber *sub = make_sub(node, 4);
    tu_send(&o->to_main, MSG_READY);
    /* Keep trying to connect until the publisher says it refused us. */
    ferry_time t0 = ferry_now();
    while (!tu_readable(&o->to_child)) {
        TU_ERR(ferry_subscriber_wait_publishers(sub, 1, 20 * TU_MS), FERRY_ETIMEDOUT);
        TU_CHECK(tu_since(t0) < 2 * TU_WAIT_NS);
    }
    TU_EQ_U64(tu_recv(&o->to_child, 0), MSG_GO);
    TU_ERR(ferry_subscriber_wait_publishers(sub, 1, 300 * TU_MS), FERRY_ETIMEDOUT);
    ferry_sample s;
    TU_ERR(ferry_take(sub, &s), FERRY_EAGAIN);
    ferry_subscriber_stats ss;
    TU_OK(ferry_subscriber_stats_get(sub, &ss));
    TU_EQ_U64(ss.received, 0);
    TU_EQ_U64(ss.publishers, 0);
    TU_CMP_I64(tu_maps_count("memfd:ferry-data"), ==, 0);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    tu_send(&o->to_main, MSG_DONE);
    return 0;
}

static void test_peercred_refuses_outsider(void)
{
    /* The root of the domain is the share group's, so both sides can reach it. */
    TU_CHECK(chown(tu_dir(), (uid_t)-1, share_gid) == 0 && chmod(tu_dir(), 02770) == 0);
    log_count logs = {0, 0};
    ferry_node *node = node_with("guarded", true, count_log, &logs);
    outsider o = {tu_pipe_make(), tu_pipe_make()};
    pid_t pid = tu_fork(outsider_main, &o, 30);
    TU_EQ_U64(tu_recv(&o.to_main, TU_WAIT_MS), MSG_READY);
    ferry_publisher *pub = make_pub(node);
    ferry_publisher_stats ps;
    ferry_time t0 = ferry_now();
    do {
        TU_OK(ferry_publisher_poll(pub, 5 * TU_MS));
        TU_OK(ferry_publisher_stats_get(pub, &ps));
        TU_CHECK_MSG(tu_since(t0) < TU_WAIT_NS, "the outsider was never refused");
    } while (ps.rejected == 0);
    TU_EQ_U64(ps.subscribers, 0);
    TU_CMP_I64(logs.not_allowed, >=, 1);
    for (uint64_t i = 1; i <= FRAMES; i++)
        tu_publish_pattern(pub, SIZE, i);
    tu_send(&o.to_child, MSG_GO);
    TU_EQ_U64(tu_serve_until(&pub, 1, &o.to_main, TU_WAIT_MS), MSG_DONE);
    TU_CHILD_OK(pid);
    TU_OK(ferry_publisher_stats_get(pub, &ps));
    TU_EQ_U64(ps.subscribers, 0);
    TU_EQ_U64(ps.deliveries, 0);
    TU_CMP_U64(ps.rejected, >=, 1);
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
}

/* --- opt-in sharing with a group ---------------------------------------------------------- */

typedef struct sharing {
    tu_pipe pub_to_main, main_to_pub, sub_to_main, main_to_sub;
} sharing;

static int share_publisher_main(void *arg)
{
    sharing *s = arg;
    gid_t g = share_gid;
    TU_CHECK_MSG(setgroups(1, &g) == 0, "setgroups: %s", strerror(errno));
    umask(077); /* a strict umask must not keep the group out */
    ferry_node *node = node_with("sharepub", true, NULL, NULL);
    ferry_publisher *pub = make_pub(node);
    tu_send(&s->pub_to_main, MSG_READY);
    TU_OK(ferry_publisher_wait_subscribers(pub, 1, TU_WAIT_NS));
    for (uint64_t i = 1; i <= FRAMES; i++)
        tu_publish_pattern(pub, SIZE, i);
    TU_EQ_U64(tu_serve_until(&pub, 1, &s->main_to_pub, 20000), MSG_FINISH);
    /* The subscriber left first: everything came back. */
    pub_wait_all_back(pub);
    ferry_publisher_stats ps;
    TU_OK(ferry_publisher_stats_get(pub, &ps));
    TU_EQ_U64(ps.rejected, 0);
    TU_EQ_U64(ps.published, FRAMES);
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    return 0;
}

static int share_subscriber_main(void *arg)
{
    sharing *s = arg;
    gid_t g = share_gid;
    become(other_uid, other_gid, &g, 1);
    ferry_node *node = node_with("sharesub", true, NULL, NULL);
    ferry_subscriber *sub = make_sub(node, FRAMES);
    TU_OK(ferry_subscriber_wait_publishers(sub, 1, TU_WAIT_NS));
    ferry_sample smp[FRAMES];
    for (int i = 0; i < FRAMES; i++) {
        TU_TAKE(sub, &smp[i]);
        TU_SAMPLE_INTACT(&smp[i], SIZE);
    }
    tu_send(&s->sub_to_main, MSG_HELD);
    TU_EQ_U64(tu_recv(&s->main_to_sub, TU_WAIT_MS), MSG_GO);

    /* Read-only all the way down: the mapping, its protection, a write. */
    tu_mapping m;
    TU_CHECK_MSG(tu_map_of(smp[0].data, &m), "no mapping covers %p", smp[0].data);
    TU_CHECK_MSG(strcmp(m.perms, "r--s") == 0 && strstr(m.path, "memfd:ferry-data") != NULL,
                 "sample mapping: %s %s", m.perms, m.path);
    uintptr_t page = (uintptr_t)smp[0].data & ~(uintptr_t)4095;
    errno = 0;
    TU_CHECK(mprotect((void *)page, 4096, PROT_READ | PROT_WRITE) != 0);
    TU_CMP_I64(errno, ==, EACCES);
    int st = tu_write_status(smp[0].data);
    TU_CHECK_MSG(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV,
                 "a write into a taken sample did not fault (status 0x%x)", st);
    TU_SAMPLE_INTACT(&smp[0], SIZE);

    TU_ERR(ferry_subscriber_destroy(sub), FERRY_EBUSY);
    for (int i = 0; i < FRAMES; i++)
        TU_OK(ferry_release(sub, &smp[i]));
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    return 0;
}

static void test_share_with_group(void)
{
    TU_CHECK(chown(tu_dir(), (uid_t)-1, share_gid) == 0 && chmod(tu_dir(), 02770) == 0);
    sharing s = {tu_pipe_make(), tu_pipe_make(), tu_pipe_make(), tu_pipe_make()};
    pid_t pp = tu_fork(share_publisher_main, &s, 40);
    TU_EQ_U64(tu_recv(&s.pub_to_main, TU_WAIT_MS), MSG_READY);
    pid_t sp = tu_fork(share_subscriber_main, &s, 40);
    TU_EQ_U64(tu_recv(&s.sub_to_main, 20000), MSG_HELD);

    char dom[PATH_MAX], topic[PATH_MAX], f[PATH_MAX + 300];
    domain_path(dom, sizeof dom);
    tu_topic_path(TOPIC, topic, sizeof topic);
    CHECK_MODE(dom, 02770, 0, share_gid);
    CHECK_MODE(topic, 02770, 0, share_gid);
    MUST_FIND(topic, "pub.", ".sock", f);
    CHECK_MODE(f, 0660, 0, share_gid);
    MUST_FIND(topic, "pub.", ".status", f);
    CHECK_MODE(f, 0640, 0, share_gid);
    MUST_FIND(topic, "sub.", ".status", f);
    CHECK_MODE(f, 0640, other_uid, share_gid);

    tu_send(&s.main_to_sub, MSG_GO);
    TU_CHILD_OK(sp);
    tu_send(&s.main_to_pub, MSG_FINISH);
    TU_CHILD_OK(pp);
}

/* --- teardown in any order ---------------------------------------------------------------- */

static void test_teardown_subscriber_first(void)
{
    ferry_node *pn = tu_node("tdpub");
    ferry_node *sn = tu_node("tdsub");
    ferry_publisher *pub = make_pub(pn);
    ferry_subscriber *sub = make_sub(sn, 4);
    ferry_waitset *ws = NULL;
    TU_OK(ferry_waitset_create(&ws, sn));
    TU_OK(ferry_waitset_add(ws, sub, NULL));
    tu_connect_local(pub, 1, sub, 1);
    tu_publish_pattern(pub, SIZE, 1);
    tu_publish_pattern(pub, SIZE, 2);
    ferry_sample s;
    TU_TAKE(sub, &s);
    TU_SAMPLE_INTACT(&s, SIZE);

    /* Refusals change nothing. */
    TU_ERR(ferry_node_destroy(sn), FERRY_EBUSY);
    TU_ERR(ferry_node_destroy(pn), FERRY_EBUSY);
    TU_ERR(ferry_subscriber_destroy(sub), FERRY_EBUSY); /* holds a sample, is in a waitset */
    TU_OK(ferry_waitset_remove(ws, sub));
    TU_ERR(ferry_subscriber_destroy(sub), FERRY_EBUSY); /* still holds a sample */
    TU_SAMPLE_INTACT(&s, SIZE);
    TU_OK(ferry_release(sub, &s));
    TU_ERR(ferry_node_destroy(sn), FERRY_EBUSY); /* subscriber and waitset live */
    TU_OK(ferry_subscriber_destroy(sub));        /* one sample still queued: fine */
    TU_ERR(ferry_node_destroy(sn), FERRY_EBUSY); /* the waitset */
    TU_OK(ferry_waitset_destroy(ws));
    TU_OK(ferry_node_destroy(sn));

    pub_wait_all_back(pub);
    ferry_publisher_stats ps;
    TU_OK(ferry_publisher_stats_get(pub, &ps));
    TU_EQ_U64(ps.chunks_free, ps.chunks_total);
    TU_ERR(ferry_node_destroy(pn), FERRY_EBUSY);
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(pn));
}

static void test_teardown_publisher_first(void)
{
    ferry_node *node = tu_node("td2");
    ferry_publisher *pub = make_pub(node);
    ferry_subscriber *sub = make_sub(node, 4);
    tu_connect_local(pub, 1, sub, 1);
    for (uint64_t i = 1; i <= 3; i++)
        tu_publish_pattern(pub, SIZE, i);
    ferry_sample s;
    TU_TAKE(sub, &s);
    TU_OK(ferry_publisher_destroy(pub));
    TU_ERR(ferry_node_destroy(node), FERRY_EBUSY);
    /* Held and queued samples of a destroyed publisher stay readable. */
    TU_SAMPLE_INTACT(&s, SIZE);
    TU_OK(ferry_release(sub, &s));
    for (int i = 0; i < 2; i++) {
        TU_OK(ferry_take(sub, &s));
        TU_SAMPLE_INTACT(&s, SIZE);
        TU_OK(ferry_release(sub, &s));
    }
    ferry_subscriber_stats ss;
    TU_OK(ferry_subscriber_wait_publishers(sub, 0, 0));
    TU_OK(ferry_subscriber_stats_get(sub, &ss));
    TU_EQ_U64(ss.received, 3);
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
}

typedef struct td_peer {
    tu_pipe to_main, to_child;
} td_peer;

static int td_subscriber_main(void *arg)
{
    td_peer *p = arg;
    ferry_node *node = tu_node("tdchild");
    ferry_subscriber *sub = make_sub(node, 4);
    TU_OK(ferry_subscriber_wait_publishers(sub, 1, TU_WAIT_NS));
    tu_send(&p->to_main, MSG_READY);
    ferry_sample s[2];
    TU_TAKE(sub, &s[0]);
    TU_TAKE(sub, &s[1]);
    TU_SAMPLE_INTACT(&s[0], SIZE);
    tu_send(&p->to_main, MSG_HELD);
    TU_EQ_U64(tu_recv(&p->to_child, TU_WAIT_MS), MSG_GO);
    /* The publisher may be gone by now; the samples are still ours to read. */
    TU_SAMPLE_INTACT(&s[1], SIZE);
    TU_ERR(ferry_node_destroy(node), FERRY_EBUSY);
    TU_ERR(ferry_subscriber_destroy(sub), FERRY_EBUSY);
    TU_OK(ferry_release(sub, &s[0]));
    TU_OK(ferry_release(sub, &s[1]));
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_node_destroy(node));
    tu_check_child_teardown();
    tu_send(&p->to_main, MSG_DONE);
    return 0;
}

/* Across processes, both orders: the subscriber leaves first, then the publisher does. */
static void test_teardown_across_processes(void)
{
    for (int publisher_first = 0; publisher_first <= 1; publisher_first++) {
        td_peer p = {tu_pipe_make(), tu_pipe_make()};
        pid_t pid = tu_fork(td_subscriber_main, &p, 30);
        ferry_node *node = tu_node("tdparent");
        ferry_publisher *pub = make_pub(node);
        TU_EQ_U64(tu_serve_until(&pub, 1, &p.to_main, TU_WAIT_MS), MSG_READY);
        TU_OK(ferry_publisher_wait_subscribers(pub, 1, TU_WAIT_NS));
        tu_publish_pattern(pub, SIZE, 1);
        tu_publish_pattern(pub, SIZE, 2);
        TU_EQ_U64(tu_serve_until(&pub, 1, &p.to_main, TU_WAIT_MS), MSG_HELD);
        if (publisher_first) {
            TU_OK(ferry_publisher_destroy(pub));
            TU_OK(ferry_node_destroy(node));
            tu_send(&p.to_child, MSG_GO);
            TU_EQ_U64(tu_recv(&p.to_main, TU_WAIT_MS), MSG_DONE);
            TU_CHILD_OK(pid);
        } else {
            tu_send(&p.to_child, MSG_GO);
            TU_EQ_U64(tu_serve_until(&pub, 1, &p.to_main, TU_WAIT_MS), MSG_DONE);
            TU_CHILD_OK(pid);
            pub_wait_all_back(pub);
            ferry_publisher_stats ps;
            TU_OK(ferry_publisher_stats_get(pub, &ps));
            TU_EQ_U64(ps.chunks_free, ps.chunks_total);
            TU_OK(ferry_publisher_destroy(pub));
            TU_OK(ferry_node_destroy(node));
        }
        tu_pipe_close(&p.to_main);
        tu_pipe_close(&p.to_child);
    }
}

/* --- the domain's directories ------------------------------------------------------------- */

static char dir_log[4096];

static void keep_log(void *arg, ferry_log_level level, const char *message)
{
    (void)arg;
    (void)level;
    snprintf(dir_log, sizeof dir_log, "%s", message);
}

/* ferry_node_create with root dir; the error it gives, its last log line in dir_log. */
static ferry_err try_node(const char *dir, ferry_node **out)
{
    ferry_node_options o = tu_node_options("dirs");
    o.dir = dir;
    o.log = keep_log;
    dir_log[0] = '\0';
    *out = NULL;
    return ferry_node_create(out, &o);
}

#define CHECK_LOG(needle) TU_CHECK_MSG(strstr(dir_log, (needle)) != NULL, "log: %s", dir_log)

/* Only the directory given is made, and only when its parent exists; an empty one is no root. */
static void test_root_created_alone(void)
{
    char root[PATH_MAX + 16], parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%s/missing", tu_dir());
    snprintf(root, sizeof root, "%s/root", parent);
    ferry_node *node;
    TU_ERR(try_node(root, &node), FERRY_ESYS);
    TU_CMP_I64(errno, ==, ENOENT);
    CHECK_LOG("parent directory does not exist");
    CHECK_LOG(root);
    struct stat st;
    TU_CHECK(stat(parent, &st) != 0 && errno == ENOENT);
    TU_ERR(try_node("", &node), FERRY_EINVAL);
    TU_CHECK(node == NULL);

    snprintf(root, sizeof root, "%s/root", tu_dir());
    TU_OK(try_node(root, &node));
    CHECK_MODE(root, 0700, geteuid(), getegid());
    TU_OK(ferry_node_destroy(node));
}

/* What is in the way of the root, and the fix the message must name. */
enum { SQUAT_DIR, SQUAT_OPEN_DIR, SQUAT_LINK, SQUAT_FILE, SQUAT_FIFO, SQUAT_COUNT };
static const char *const squat_names[SQUAT_COUNT] = {
    "a directory of another uid",
    "a directory open to others",
    "a symbolic link",
    "a regular file",
    "a FIFO",
};

typedef struct squat {
    char path[PATH_MAX + 16];
    char target[PATH_MAX + 16];
    int kind;
    bool as_other;
} squat;

static int squatter_main(void *arg)
{
    squat *q = arg;
    if (q->as_other)
        become(other_uid, other_gid, NULL, 0);
    switch (q->kind) {
    case SQUAT_DIR:
        TU_CHECK(mkdir(q->path, 0700) == 0);
        break;
    case SQUAT_OPEN_DIR:
        TU_CHECK(mkdir(q->path, 0777) == 0 && chmod(q->path, 0777) == 0);
        break;
    case SQUAT_LINK:
        TU_CHECK(symlink(q->target, q->path) == 0);
        break;
    case SQUAT_FILE: {
        int fd = open(q->path, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
        TU_CHECK(fd >= 0);
        close(fd);
        break;
    }
    default:
        TU_CHECK(mkfifo(q->path, 0666) == 0);
        break;
    }
    return 0;
}

/* A process of a third user meets another user's 0700 squat, which it may not even enter: the
 * message still names the owner and the mode. */
static int third_user_main(void *arg)
{
    const squat *q = arg;
    become(free_uid(other_uid + 1), other_gid, NULL, 0);
    ferry_node *node;
    TU_ERR(try_node(q->path, &node), FERRY_EPERM);
    printf("    %-28s %s\n", "(to a third user)", dir_log);
    char owner[64];
    snprintf(owner, sizeof owner, "belongs to uid %u", (unsigned)other_uid);
    CHECK_LOG(owner);
    CHECK_LOG("mode 0700");
    CHECK_LOG("may not enter it");
    CHECK_LOG("remove it");
    return 0;
}

/* Another user took the root's name first (as anyone can in /dev/shm, sticky and open to all):
 * whatever it is, every node refuses it with a message that names the path, the owner, the mode
 * and what to do, and touches nothing there. Without root the squatter is the same user. */
static void test_squatted_root(void)
{
    char base[PATH_MAX];
    snprintf(base, sizeof base, "%s/shm", tu_dir());
    TU_CHECK(mkdir(base, 01777) == 0 && chmod(base, 01777) == 0);
    TU_CHECK(chmod(tu_dir(), 0711) == 0); /* the squatter passes through to base */
    bool as_other = geteuid() == 0;
    for (int k = 0; k < SQUAT_COUNT; k++) {
        squat q;
        memset(&q, 0, sizeof q);
        snprintf(q.path, sizeof q.path, "%s/ferry-%d", base, k);
        snprintf(q.target, sizeof q.target, "%s/target-%d", base, k);
        TU_CHECK(mkdir(q.target, 0700) == 0); /* a link to a directory that would pass */
        q.kind = k;
        q.as_other = as_other && k != SQUAT_OPEN_DIR;
        TU_CHILD_OK(tu_fork(squatter_main, &q, 10));
        ferry_node *node;
        TU_ERR(try_node(q.path, &node), FERRY_EPERM);
        TU_CHECK(node == NULL);
        printf("    %-28s %s\n", squat_names[k], dir_log);
        CHECK_LOG(q.path);
        CHECK_LOG("remove it");
        CHECK_LOG("another directory");
        char owner[64];
        snprintf(owner, sizeof owner, "uid %u", (unsigned)(q.as_other ? other_uid : geteuid()));
        CHECK_LOG(owner);
        if (k == SQUAT_LINK)
            CHECK_LOG("symbolic link");
        if (k == SQUAT_FILE)
            CHECK_LOG("regular file");
        if (k == SQUAT_FIFO)
            CHECK_LOG("FIFO");
        if (k == SQUAT_OPEN_DIR)
            CHECK_LOG("mode 0777");
        /* Nothing was made through it. */
        char domain[PATH_MAX + 32];
        snprintf(domain, sizeof domain, "%s/%u", q.target, tu_domain());
        struct stat st;
        TU_CHECK(stat(domain, &st) != 0);
        if (k == SQUAT_DIR && as_other)
            TU_CHILD_OK(tu_fork(third_user_main, &q, 10));
    }
}

/* A member of the share group swaps the domain directory for a link to a directory of its own
 * between a node's creation and its publisher's: the node holds the directory it checked as a
 * descriptor, so the publisher's files land there and nothing is made through the link; a new
 * node refuses the link. */
typedef struct swap {
    char root[PATH_MAX];
    tu_pipe done;
} swap;

static int swapper_main(void *arg)
{
    swap *w = arg;
    gid_t g = share_gid;
    become(other_uid, other_gid, &g, 1);
    char dom[PATH_MAX + 16], moved[PATH_MAX + 16], evil[PATH_MAX + 16];
    snprintf(dom, sizeof dom, "%s/%u", w->root, tu_domain());
    snprintf(moved, sizeof moved, "%s/moved", w->root);
    snprintf(evil, sizeof evil, "%s/evil", w->root);
    TU_CHECK_MSG(mkdir(evil, 02770) == 0, "mkdir %s: %s", evil, strerror(errno));
    TU_CHECK(chmod(evil, 02770) == 0);
    TU_CHECK_MSG(rename(dom, moved) == 0, "rename: %s", strerror(errno));
    TU_CHECK(symlink("evil", dom) == 0);
    tu_send(&w->done, MSG_DONE);
    return 0;
}

static void test_symlink_swap(void)
{
    swap w;
    snprintf(w.root, sizeof w.root, "%s/shared", tu_dir());
    TU_CHECK(mkdir(w.root, 02770) == 0 && chown(w.root, (uid_t)-1, share_gid) == 0 &&
             chmod(w.root, 02770) == 0);
    TU_CHECK(chmod(tu_dir(), 0711) == 0); /* the group member passes through to the root */
    w.done = tu_pipe_make();
    ferry_node_options o = tu_node_options("swapped");
    o.dir = w.root;
    o.share_with_group = true;
    o.share_gid = share_gid;
    ferry_node *node = NULL;
    TU_OK(ferry_node_create(&node, &o));
    TU_CHILD_OK(tu_fork(swapper_main, &w, 10));
    TU_EQ_U64(tu_recv(&w.done, TU_WAIT_MS), MSG_DONE);

    ferry_publisher *pub = make_pub(node);
    ferry_subscriber *sub = make_sub(node, 2);
    tu_connect_local(pub, 1, sub, 1);
    char evil[PATH_MAX + 16], moved[PATH_MAX + 32];
    snprintf(evil, sizeof evil, "%s/evil", w.root);
    snprintf(moved, sizeof moved, "%s/moved/sec.cam", w.root);
    DIR *d = opendir(evil);
    TU_CHECK(d != NULL);
    int entries = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        entries += e->d_name[0] != '.';
    closedir(d);
    TU_EQ_U64(entries, 0);
    char f[PATH_MAX + 300];
    MUST_FIND(moved, "pub.", ".sock", f);

    ferry_node *other = NULL;
    TU_ERR(try_node(w.root, &other), FERRY_EPERM);
    o.log = keep_log;
    TU_ERR(ferry_node_create(&other, &o), FERRY_EPERM);
    CHECK_LOG("symbolic link");
    TU_OK(ferry_subscriber_destroy(sub));
    TU_OK(ferry_publisher_destroy(pub));
    TU_OK(ferry_node_destroy(node));
    tu_pipe_close(&w.done);
}

int main(void)
{
    TU_RUN(test_default_modes);
    TU_RUN(test_open_directory_refused);
    TU_RUN(test_root_created_alone);
    TU_RUN(test_teardown_subscriber_first);
    TU_RUN(test_teardown_publisher_first);
    TU_RUN(test_teardown_across_processes);
    if (geteuid() != 0) {
        printf("skipped: the tests that run a peer as another uid need root\n");
        return TU_SKIP;
    }
    other_uid = free_uid(61000);
    other_gid = free_gid(61000, (gid_t)-1);
    share_gid = free_gid(4242, other_gid);
    printf("other uid %u (gid %u), share group %u\n", (unsigned)other_uid, (unsigned)other_gid,
           (unsigned)share_gid);
    TU_RUN(test_other_uid_refused_by_default);
    TU_RUN(test_peercred_refuses_outsider);
    TU_RUN(test_share_with_group);
    TU_RUN(test_squatted_root);
    TU_RUN(test_symlink_swap);
    return 0;
}
