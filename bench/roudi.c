/*
 * iceoryx's daemon for the peer rows, in a private environment. iceoryx 2.0 has fixed names on
 * the host (/tmp/roudi, /tmp/roudi.lock, /dev/shm/iceoryx_mgmt, /dev/shm/<user>), so a second
 * RouDi, or ours next to somebody else's, would clash. The calling process therefore enters a
 * mount namespace of its own (a user namespace too when it lacks the privilege) with fresh
 * tmpfs on /tmp and /dev/shm, and starts iox-roudi there with a configuration written for the
 * run. Everything disappears with the namespace's last process.
 */
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define ROUDI_BIN "iox-roudi"
#define ROUDI_CONFIG "/tmp/ferry-bench-roudi.toml"
#define ROUDI_LOG "/tmp/ferry-bench-roudi.log"
#define ROUDI_READY "RouDi is ready for clients"
#define ROUDI_START_NS ((int64_t)20 * 1000000000)
#define ROUDI_STOP_NS ((int64_t)5 * 1000000000)

static pid_t roudi = -1;

const char *bench_roudi_available(void)
{
    const char *path = getenv("PATH");
    char dirs[4096];
    snprintf(dirs, sizeof dirs, "%s", path ? path : "/usr/bin:/bin");
    for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        char bin[4200];
        snprintf(bin, sizeof bin, "%s/%s", d, ROUDI_BIN);
        if (access(bin, X_OK) == 0)
            return NULL;
    }
    return "iox-roudi not found (Debian package iceoryx)";
}

static int write_text(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, text, strlen(text));
    close(fd);
    return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* A mount namespace of our own: directly with CAP_SYS_ADMIN, else inside a user namespace
 * that maps our uid and gid onto themselves. */
static int private_mounts(void)
{
    uid_t uid = geteuid();
    gid_t gid = getegid();
    if (unshare(CLONE_NEWNS) != 0) {
        if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
            fprintf(stderr, "ferry bench: no private mount namespace for RouDi: %s\n",
                    strerror(errno));
            return -1;
        }
        char map[64];
        snprintf(map, sizeof map, "%u %u 1\n", (unsigned)uid, (unsigned)uid);
        if (write_text("/proc/self/setgroups", "deny") != 0 ||
            write_text("/proc/self/uid_map", map) != 0) {
            fprintf(stderr, "ferry bench: cannot map the uid of the RouDi namespace: %s\n",
                    strerror(errno));
            return -1;
        }
        snprintf(map, sizeof map, "%u %u 1\n", (unsigned)gid, (unsigned)gid);
        if (write_text("/proc/self/gid_map", map) != 0) {
            fprintf(stderr, "ferry bench: cannot map the gid of the RouDi namespace: %s\n",
                    strerror(errno));
            return -1;
        }
    }
    /* Our mounts must not propagate back to the host's namespace. */
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("ferry-bench-tmp", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") != 0 ||
        mount("ferry-bench-shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") != 0) {
        fprintf(stderr, "ferry bench: cannot mount the RouDi namespace's /tmp and /dev/shm: %s\n",
                strerror(errno));
        return -1;
    }
    return 0;
}

/* Mempools for every payload of the run: a chunk is the payload plus iceoryx's chunk header
 * and, for Cyclone DDS over iceoryx, its own sample header; a page of slack covers both. */
static int write_config(size_t max_payload)
{
    static const size_t sizes[] = {64, 1048576, 2764800, 6220800};
    FILE *f = fopen(ROUDI_CONFIG, "w");
    if (!f) {
        fprintf(stderr, "ferry bench: cannot write %s: %s\n", ROUDI_CONFIG, strerror(errno));
        return -1;
    }
    fputs("[general]\nversion = 1\n\n[[segment]]\n\n", f);
    fputs("[[segment.mempool]]\nsize = 1024\ncount = 4096\n\n", f);
    fputs("[[segment.mempool]]\nsize = 16384\ncount = 256\n\n", f);
    bool have_max = false;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        if (sizes[i] <= 4096)
            continue;
        size_t chunk = (sizes[i] + 2 * BENCH_PAGE - 1) / BENCH_PAGE * BENCH_PAGE;
        fprintf(f, "[[segment.mempool]]\nsize = %zu\ncount = 64\n\n", chunk);
        have_max = have_max || sizes[i] >= max_payload;
    }
    if (!have_max) {
        size_t chunk = (max_payload + 2 * BENCH_PAGE - 1) / BENCH_PAGE * BENCH_PAGE;
        fprintf(f, "[[segment.mempool]]\nsize = %zu\ncount = 64\n\n", chunk);
    }
    if (fclose(f) != 0) {
        fprintf(stderr, "ferry bench: cannot write %s: %s\n", ROUDI_CONFIG, strerror(errno));
        return -1;
    }
    return 0;
}

static bool log_says_ready(void)
{
    FILE *f = fopen(ROUDI_LOG, "r");
    if (!f)
        return false;
    char line[512];
    bool ready = false;
    while (!ready && fgets(line, sizeof line, f))
        ready = strstr(line, ROUDI_READY) != NULL;
    fclose(f);
    return ready;
}

static void print_log(void)
{
    FILE *f = fopen(ROUDI_LOG, "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f))
        fprintf(stderr, "  iox-roudi: %s", line);
    fclose(f);
}

int bench_roudi_start(size_t max_payload)
{
    const char *why = bench_roudi_available();
    if (why) {
        fprintf(stderr, "ferry bench: %s\n", why);
        return -1;
    }
    if (private_mounts() != 0 || write_config(max_payload) != 0)
        return -1;
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "ferry bench: fork: %s\n", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        /* RouDi goes when the process that started it goes, whatever happens to it. */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(1);
        int fd = open(ROUDI_LOG, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
            close(fd);
        }
        execlp(ROUDI_BIN, ROUDI_BIN, "-c", ROUDI_CONFIG, "-l", "info", (char *)NULL);
        _exit(127);
    }
    roudi = pid;
    int64_t deadline = cli_now_ns() + ROUDI_START_NS;
    while (!log_says_ready()) {
        int wstatus;
        if (waitpid(roudi, &wstatus, WNOHANG) == roudi) {
            roudi = -1;
            fprintf(stderr, "ferry bench: iox-roudi exited at start:\n");
            print_log();
            return -1;
        }
        if (cli_now_ns() > deadline) {
            fprintf(stderr, "ferry bench: iox-roudi was not ready within 20 s:\n");
            print_log();
            bench_roudi_stop();
            return -1;
        }
        usleep(10000);
    }
    return 0;
}

void bench_roudi_stop(void)
{
    if (roudi < 0)
        return;
    kill(roudi, SIGTERM);
    int64_t deadline = cli_now_ns() + ROUDI_STOP_NS;
    int wstatus;
    while (waitpid(roudi, &wstatus, WNOHANG) == 0) {
        if (cli_now_ns() > deadline) {
            kill(roudi, SIGKILL);
            waitpid(roudi, &wstatus, 0);
            break;
        }
        usleep(10000);
    }
    roudi = -1;
}
