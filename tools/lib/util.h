/*
 * Process helpers of the ferry CLI that `ferry demo` and `ferry bench` share: the monotonic
 * clock, a futex on a shared word, private directories, whole reads and writes on pipes, forked
 * children and prefaulted buffers. Each call is safe from any thread; none keeps state.
 */
#ifndef FERRY_CLI_UTIL_H
#define FERRY_CLI_UTIL_H

#include <setjmp.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* CLOCK_MONOTONIC in ns. */
int64_t cli_now_ns(void);

/* Futex on a shared word: wait while *word == expected (timeout_ns < 0: for ever); wake all. */
void cli_futex_wait(_Atomic uint32_t *word, uint32_t expected, int64_t timeout_ns);
void cli_futex_wake(_Atomic uint32_t *word);

/* Creates a private directory "<base>/<prefix>XXXXXX" (base /dev/shm, else /tmp); out gets
 * its path. false after a message on failure. */
bool cli_private_dir(const char *prefix, char *out, size_t cap);

/* Removes path and everything below it (no symlinks followed). 0 or -1. */
int cli_rmtree(const char *path);

/* Reads or writes exactly n bytes; waits at most until deadline_ns (CLOCK_MONOTONIC; negative
 * for ever). 0 on success, -1 on error, end of file or timeout (errno ETIMEDOUT). */
int cli_read_full(int fd, void *buf, size_t n, int64_t deadline_ns);
int cli_write_full(int fd, const void *buf, size_t n);

/* In a forked child: die with parent, and exit at once if parent died before this call. */
void cli_child_setup(pid_t parent);

/* Installs handler for sig without SA_RESTART, so that the signal ends the wait it interrupts
 * (the caller's loop then sees what the handler set), and with no other signal blocked. */
void cli_catch_signal(int sig, void (*handler)(int));

/* Touches every page of a buffer so page faults stay out of measurements. */
void cli_prefault(void *buf, size_t n);

/* A mapped file that another process shrinks under its reader raises SIGBUS. Between
 * cli_bus_arm() and cli_bus_disarm() (one thread), SIGBUS jumps back to the sigsetjmp the caller
 * made on cli_bus_jump, which then returns nonzero: the command reports the file and exits with
 * an error instead of dying of the signal. Outside, SIGBUS keeps its default. Objects the caller
 * changes after its sigsetjmp and uses after the jump must not be automatic (static, or heap). */
extern sigjmp_buf cli_bus_jump;
void cli_bus_arm(void);
void cli_bus_disarm(void);

#endif
