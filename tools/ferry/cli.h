/*
 * The ferry command-line tool: one entry point per command, plus what the commands share
 * (options every command takes, the synthetic frame format, latency statistics).
 * Single-threaded; every command returns the process exit status (0 ok, 1 runtime error,
 * 2 usage error) and prints a one-line message on stderr on error.
 */
#ifndef FERRY_CLI_H
#define FERRY_CLI_H

#include <ferry/ferry.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>

/* Commands: argv[0] is the command name ("pub", ...). */
int ferry_cmd_pub(int argc, char **argv);
int ferry_cmd_echo(int argc, char **argv);
int ferry_cmd_hz(int argc, char **argv);
int ferry_cmd_topics(int argc, char **argv);
int ferry_cmd_info(int argc, char **argv);
int ferry_cmd_clean(int argc, char **argv);
int ferry_cmd_demo(int argc, char **argv);
int ferry_cmd_bench(int argc, char **argv);
/* Built without Cyclone DDS, it says so and returns 2. */
int ferry_cmd_bridge(int argc, char **argv);

/* Where a command works: --dir/--domain on the command line, else FERRY_DIR / FERRY_DOMAIN,
 * else the library's defaults (dir NULL, domain 0). */
typedef struct cli_where {
    const char *dir;
    uint32_t domain;
} cli_where;

/* Fills w from FERRY_DIR and FERRY_DOMAIN. Returns false (after printing a message) when
 * FERRY_DOMAIN is not a valid domain number. */
bool cli_where_from_env(cli_where *w);

/* Parses a domain number ("--domain N"). Returns false (after printing a message) when bad. */
bool cli_parse_domain(const char *text, uint32_t *out);

/* Parses sizes with optional suffix k/K/M/G (powers of 1024) or plain bytes; false when bad. */
bool cli_parse_size(const char *text, size_t *out);
bool cli_parse_u64(const char *text, uint64_t *out);
bool cli_parse_double(const char *text, double *out);

/* After getopt_long (with a ':' optstring) returned c, ':' or '?': says what was wrong with
 * argv[optind - 1] (a missing value, a value given to a flag, an unknown option) in one line;
 * returns 2. */
int cli_option_error(const char *cmd, int c, char **argv);

/* The single TOPIC operand left after the options: true with *topic set, else false after a
 * one-line message. */
bool cli_topic_operand(const char *cmd, int argc, char **argv, const char **topic);

/* Set by SIGINT and SIGTERM once cli_stop_on_signals() ran: long-running commands check it and
 * stop cleanly (every chunk back, every file removed). */
extern volatile sig_atomic_t cli_stop_requested;
/* Installs the handlers, without SA_RESTART: a signal ends the wait it interrupts, so the loop
 * sees the flag promptly. */
void cli_stop_on_signals(void);

/* The type a subscriber of topic uses: given when not NULL, else the type its live endpoints
 * declare (a publisher's first), else the synthetic frame type. */
typedef struct cli_type {
    char name[FERRY_TYPE_NAME_MAX + 1];
    uint64_t hash;
} cli_type;
void cli_topic_type(const cli_where *w, const char *topic, const char *given, cli_type *out);

/* Prints "ferry CMD: message" to stderr; returns the exit status given. */
int cli_fail(const char *cmd, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Creates a node for w with a node name; prints and returns the error on failure. */
ferry_err cli_node(const cli_where *w, const char *name, ferry_node **out);

/* Synthetic frames: a header, then a pattern derived from the sequence number.
 * The type name and hash commands use for them. */
#define CLI_FRAME_TYPE "ferry/synthetic_frame"
#define CLI_FRAME_MAGIC 0x454d4152465952ULL /* "RYFRAME" */

typedef struct cli_frame_header {
    uint64_t magic;
    uint64_t sequence;
    uint64_t size;       /* whole frame, header included */
    int64_t send_ns;     /* CLOCK_MONOTONIC when the sender filled it */
    uint64_t checksum;   /* over bytes [sizeof header, size) */
    uint64_t reserved[3];
} cli_frame_header;

/* Fills a frame of size bytes (>= sizeof(cli_frame_header)) with header and pattern; when
 * full is false only the header is written (the pattern is assumed from an earlier fill of the
 * same buffer with the same size, and the checksum of that fill is kept). Returns the checksum. */
uint64_t cli_frame_fill(void *frame, size_t size, uint64_t sequence, bool full);

/* Checks a received frame: magic, size, checksum. Returns true when intact. */
bool cli_frame_verify(const void *frame, size_t size);

/* Checksum over the payload bytes of a frame of size bytes. */
uint64_t cli_frame_checksum(const void *frame, size_t size);

/* Latency samples and their summary. */
typedef struct cli_lat {
    int64_t *ns;
    size_t count, capacity;
} cli_lat;

bool cli_lat_init(cli_lat *l, size_t capacity);
void cli_lat_add(cli_lat *l, int64_t ns);          /* ignores samples beyond capacity */
void cli_lat_free(cli_lat *l);
/* Percentile p in [0,100] of the samples, in ns (sorts in place); 0 when empty. */
int64_t cli_lat_pct(cli_lat *l, double p);
int64_t cli_lat_max(const cli_lat *l);

/* CPU time of the calling process (user + system), in ns. */
int64_t cli_cpu_ns(void);

/* Sleeps until the absolute CLOCK_MONOTONIC time t_ns. */
void cli_sleep_until(int64_t t_ns);

#endif
