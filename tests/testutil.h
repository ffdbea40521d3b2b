/*
 * Test support shared by the ferry test programs: assertions that print both values and
 * file:line, a private domain directory per test, forked peer processes with pipes to talk to
 * them, payload patterns, and the teardown checks every test ends with (no leaked descriptors,
 * no mapping of a ferry data segment, no status or socket file left, no live endpoint).
 *
 * A failed assertion prints its message and ends the process with status 1. In the test's own
 * process it first kills the children it forked and removes the test's domain directory, so a
 * failing test leaves nothing behind. Single-threaded.
 */
#ifndef FERRY_TESTUTIL_H
#define FERRY_TESTUTIL_H

#include <ferry/ferry.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

/* Exit status that ctest reports as "skipped". */
#define TU_SKIP 77

#define TU_MS ((int64_t)1000000)
#define TU_SEC ((int64_t)1000000000)

/* Generous timeout for anything that should happen "at once" on a loaded 2-core machine. */
#define TU_WAIT_NS (10 * TU_SEC)
#define TU_WAIT_MS 10000

/* How much slower a sanitizer makes the code: bounds on how long something may take scale by
 * it (a stall that a bound is there to catch is far longer still). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TU_SLOWDOWN 5
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TU_SLOWDOWN 5
#endif
#endif
#ifndef TU_SLOWDOWN
#define TU_SLOWDOWN 1
#endif

/* Prints "file:line: [test pid] FAIL: message", then errno as the failed check found it and the
 * last line the library logged in this process through tu_log, and ends the process. */
_Noreturn void tu_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The log callback of tu_node_options: prints as the library's default does ("ferry: ...") and
 * keeps the line for tu_fail. A test with a log callback of its own may call it from there. */
void tu_log(void *arg, ferry_log_level level, const char *message);
/* Keeps message as the library's last log line for tu_fail (what tu_log does besides printing). */
void tu_log_keep(const char *message);

#define TU_FAIL(...) tu_fail(__FILE__, __LINE__, __VA_ARGS__)

#define TU_CHECK(cond)                                                                             \
    do {                                                                                           \
        if (!(cond))                                                                               \
            tu_fail(__FILE__, __LINE__, "check failed: %s", #cond);                                \
    } while (0)

#define TU_CHECK_MSG(cond, ...)                                                                    \
    do {                                                                                           \
        if (!(cond))                                                                               \
            tu_fail(__FILE__, __LINE__, __VA_ARGS__);                                              \
    } while (0)

/* expr must return `expected` (ferry_err values, printed by name and message). */
#define TU_ERR(expr, expected)                                                                     \
    do {                                                                                           \
        ferry_err tu_got_ = (expr);                                                                \
        ferry_err tu_exp_ = (expected);                                                            \
        if (tu_got_ != tu_exp_)                                                                    \
            tu_fail(__FILE__, __LINE__, "%s\n    got      %s (%s)\n    expected %s (%s)", #expr,   \
                    ferry_errname(tu_got_), ferry_strerror(tu_got_), ferry_errname(tu_exp_),       \
                    ferry_strerror(tu_exp_));                                                      \
    } while (0)

#define TU_OK(expr) TU_ERR((expr), FERRY_OK)

/* Comparisons of integers: both sides are printed. */
#define TU_CMP_U64(a, op, b)                                                                       \
    do {                                                                                           \
        uint64_t tu_a_ = (uint64_t)(a);                                                            \
        uint64_t tu_b_ = (uint64_t)(b);                                                            \
        if (!(tu_a_ op tu_b_))                                                                     \
            tu_fail(__FILE__, __LINE__, "%s %s %s\n    left  = %" PRIu64 "\n    right = %" PRIu64, \
                    #a, #op, #b, tu_a_, tu_b_);                                                    \
    } while (0)

#define TU_CMP_I64(a, op, b)                                                                       \
    do {                                                                                           \
        int64_t tu_a_ = (int64_t)(a);                                                              \
        int64_t tu_b_ = (int64_t)(b);                                                              \
        if (!(tu_a_ op tu_b_))                                                                     \
            tu_fail(__FILE__, __LINE__, "%s %s %s\n    left  = %" PRId64 "\n    right = %" PRId64, \
                    #a, #op, #b, tu_a_, tu_b_);                                                    \
    } while (0)

#define TU_EQ_U64(a, b) TU_CMP_U64(a, ==, b)

#define TU_EQ_PTR(a, b)                                                                            \
    do {                                                                                           \
        const void *tu_a_ = (const void *)(a);                                                     \
        const void *tu_b_ = (const void *)(b);                                                     \
        if (tu_a_ != tu_b_)                                                                        \
            tu_fail(__FILE__, __LINE__, "%s == %s\n    left  = %p\n    right = %p", #a, #b, tu_a_, \
                    tu_b_);                                                                        \
    } while (0)

#define TU_EQ_STR(a, b)                                                                            \
    do {                                                                                           \
        const char *tu_a_ = (a);                                                                   \
        const char *tu_b_ = (b);                                                                   \
        if (tu_a_ == NULL || tu_b_ == NULL || strcmp(tu_a_, tu_b_) != 0)                           \
            tu_fail(__FILE__, __LINE__, "%s == %s\n    left  = \"%s\"\n    right = \"%s\"", #a,    \
                    #b, tu_a_ ? tu_a_ : "(null)", tu_b_ ? tu_b_ : "(null)");                       \
    } while (0)

/* --- one test: private domain directory, teardown checks ------------------------------------ */

/* Runs fn as one test: a fresh domain directory, then the teardown checks, then removal. */
#define TU_RUN(fn) tu_run(#fn, fn)
void tu_run(const char *name, void (*fn)(void));
/* Runs fn, a test that returns 0 or TU_SKIP, in a process of its own (between tu_begin and
 * tu_end), so that a failure does not hide the tests after it. Returns 0 (passed), TU_SKIP
 * (skipped) or 1 (failed, killed included). */
int tu_run_isolated(const char *name, int (*fn)(void));
#define TU_RUN_ISOLATED(fn) tu_run_isolated(#fn, fn)

/* Starts and ends the test `name` by hand (what TU_RUN does around fn). */
void tu_begin(const char *name);
void tu_end(void);

/* The test's domain root (mkdtemp under /tmp) and domain number. */
const char *tu_dir(void);
uint32_t tu_domain(void);

/* Node options pointing at the test's private domain. */
ferry_node_options tu_node_options(const char *name);
/* Creates a node on the test's domain (asserts success). */
ferry_node *tu_node(const char *name);

/* Topic directory of topic in the test's domain ("/a/b" -> "<dir>/<domain>/a.b"). */
void tu_topic_path(const char *topic, char *out, size_t cap);

/* Number of entries in /proc/self/fd. */
int tu_fd_count(void);
/* Entries of the directory path, dot files included (not . and ..); 0 when it is missing. */
int tu_dir_entries(const char *path);
/* A mapping of this process, as its line of /proc/self/maps gives it. */
typedef struct tu_mapping {
    uintptr_t start, end;
    char perms[8];  /* "r--s", "rw-p", ... */
    char path[256]; /* what is mapped ("/memfd:ferry-data (deleted)"), cut to fit; "" for none */
} tu_mapping;
/* The mappings whose line contains needle (NULL: any) and whose permissions are perms (NULL:
 * any): up to cap of them into out (which may be NULL with cap 0); returns how many there are. */
int tu_maps_find(const char *needle, const char *perms, tu_mapping *out, int cap);
/* The mapping that covers addr; false when there is none. */
bool tu_map_of(const void *addr, tu_mapping *out);
/* Number of lines of /proc/self/maps that contain needle. */
int tu_maps_count(const char *needle);
/* Number of status or socket files under the domain directory (every topic). */
int tu_domain_files(void);
/* Number of endpoints ferry_inspect finds in the test's domain; *alive receives the live ones. */
int tu_inspect_count(const char *topic, int *alive);

/* Checks this process holds no mapping of a ferry data segment. */
void tu_check_no_mappings(void);

/* --- processes and pipes ---------------------------------------------------------------------- */

/* Forks a child that runs fn(arg) and exits with its return value (0 = success). The child
 * is killed by SIGALRM after `seconds`. Returns the child's pid. */
pid_t tu_fork(int (*fn)(void *arg), void *arg, unsigned seconds);
/* Waits up to timeout_ms for pid; returns its wait status. Fails the test on timeout. */
int tu_wait_status(pid_t pid, int timeout_ms);
/* Waits for pid and asserts it exited with status 0. */
#define TU_CHILD_OK(pid) tu_child_ok(__FILE__, __LINE__, (pid))
void tu_child_ok(const char *file, int line, pid_t pid);
/* In a child, after destroying its node: no descriptor more than when it started, no mapping
 * of a ferry data segment. */
void tu_check_child_teardown(void);
/* Writes one byte at addr in a child (no core dump, the default SIGSEGV action rather than a
 * sanitizer's handler) and returns its wait status: a read-only mapping gives SIGSEGV. */
int tu_write_status(const void *addr);
/* The exit status of a program of TU_RUN_ISOLATED cases: 1 when one failed, TU_SKIP when all
 * but the first `always` were skipped (cases that test nothing of the machine), else 0; prints
 * the counts. */
int tu_results(const int *results, int n, int always);
/* True while running in a process made by tu_fork. */
bool tu_in_child(void);

/* A pipe, closed by tu_end in the test's process when still open. */
typedef struct tu_pipe {
    int r, w;
} tu_pipe;
tu_pipe tu_pipe_make(void);
void tu_pipe_close(tu_pipe *p);
/* Sends/receives one 64-bit value; receive fails the test after timeout_ms or on EOF. */
void tu_send(const tu_pipe *p, uint64_t v);
uint64_t tu_recv(const tu_pipe *p, int timeout_ms);
/* True when p has data to read now. */
bool tu_readable(const tu_pipe *p);

/* Runs the housekeeping of n publishers (ferry_publisher_poll) until p is readable; then
 * receives and returns the value. Fails after timeout_ms. */
uint64_t tu_serve_until(ferry_publisher **pubs, size_t n, const tu_pipe *p, int timeout_ms);

/* Connects publisher and subscriber living in this process: alternates their housekeeping
 * until pub has nsubs subscribers and sub has npubs publishers. */
void tu_connect_local(ferry_publisher *pub, uint32_t nsubs, ferry_subscriber *sub, uint32_t npubs);

/* --- payloads ----------------------------------------------------------------------------- */

/* Fills n bytes with a pattern derived from seq. */
void tu_fill(void *p, size_t n, uint64_t seq);
/* Returns the offset of the first byte that differs from tu_fill's pattern, or SIZE_MAX. */
size_t tu_verify(const void *p, size_t n, uint64_t seq);
/* Asserts a sample holds the pattern of its own sequence number and the expected size. */
#define TU_SAMPLE_INTACT(s, expected_size)                                                         \
    tu_sample_intact(__FILE__, __LINE__, (s), (expected_size))
void tu_sample_intact(const char *file, int line, const ferry_sample *s, size_t expected_size);

/* Loans size bytes, fills the pattern of the publisher's next sequence (seq) and publishes. */
void tu_publish_pattern(ferry_publisher *pub, size_t size, uint64_t seq);

/* ferry_publisher_create with pool_bytes and max_sample_size set, and ferry_subscriber_create
 * with the defaults: *saved_errno gets errno as the call left it, for tests of refusals. */
ferry_err tu_try_publisher(ferry_node *node, const char *topic, const char *type, size_t pool_bytes,
                           size_t max_sample, ferry_publisher **out, int *saved_errno);
ferry_err tu_try_subscriber(ferry_node *node, const char *topic, const char *type,
                            ferry_subscriber **out, int *saved_errno);

/* Takes one sample into *s, waiting for it when none is queued. */
#define TU_TAKE(sub, s) tu_take(__FILE__, __LINE__, (sub), (s))
void tu_take(const char *file, int line, ferry_subscriber *sub, ferry_sample *s);

/* Takes one sample (waiting for it), checks it is intact (and of size bytes unless size is 0)
 * and releases it. */
#define TU_TAKE_INTACT(sub, size) tu_take_intact(__FILE__, __LINE__, (sub), (size))
void tu_take_intact(const char *file, int line, ferry_subscriber *sub, size_t size);

/* Elapsed ns since t. */
int64_t tu_since(ferry_time t);

/* Sleeps ns; used only to let time pass, never to wait for another process. */
void tu_sleep_ns(int64_t ns);

#endif
