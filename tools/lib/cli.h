/*
 * The ground floor of the ferry command-line tool (tools/lib): what every command and the
 * benchmarks share (options every command takes, numeric ranges and their messages, where a
 * command works, the synthetic frame format, latency statistics). It calls nothing above it:
 * the commands themselves are declared in tools/ferry/commands.h.
 * Single-threaded; every command returns the process exit status (0 ok, 1 runtime error,
 * 2 usage error) and prints a one-line message on stderr on error.
 */
#ifndef FERRY_CLI_H
#define FERRY_CLI_H

#include <ferry/ferry.h>

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>

/* Where a command works: --dir/--domain on the command line, else FERRY_DIR / FERRY_DOMAIN,
 * else the library's defaults (dir NULL, domain 0). */
typedef struct cli_where {
    const char *dir;
    uint32_t domain;
} cli_where;

/* Fills w from FERRY_DIR and FERRY_DOMAIN. Returns false (after printing a message for cmd) when
 * FERRY_DOMAIN is not a valid domain number or FERRY_DIR is set but empty. */
bool cli_where_from_env(const char *cmd, cli_where *w);

/* Parses --dir PATH. An empty PATH would quietly mean the default directory (a variable that
 * expanded to nothing, `--dir "$D"`), so it is refused: false after a message. */
bool cli_parse_dir(const char *cmd, const char *text, const char **out);

/* Numeric option values. Every range a command accepts is one cli_range, so a check and the
 * message that names its limit cannot drift apart: a row of cli_ranges (common.c), the library's
 * own limits among them (options_resolve in src/core/publisher.c and subscriber.c), or, for a
 * limit that only a command above this floor knows (the demo's process table), a cli_range of
 * that command's own. */
typedef enum cli_value_kind {
    CLI_WHOLE, /* digits only */
    CLI_BYTES, /* digits, then an optional suffix k, K, M or G (powers of 1024) */
    CLI_REAL,  /* a decimal number as strtod reads it; never nan or inf */
    CLI_SIDES, /* WIDTHxHEIGHT, two CLI_WHOLE values, each in the range */
} cli_value_kind;

typedef struct cli_range {
    const char *name; /* as the user writes it: "--history", "FERRY_DOMAIN" */
    cli_value_kind kind;
    uint64_t lo, hi;         /* CLI_WHOLE, CLI_BYTES, CLI_SIDES */
    double real_lo, real_hi; /* CLI_REAL */
    const char *unit;        /* printed after the range ("Hz"), or NULL */
    const char *zero;        /* when 0 is accepted below lo: what it means; else NULL */
    const char *note;        /* what else limits the value, or NULL */
} cli_range;

typedef enum cli_range_id {
    CLI_R_DOMAIN,
    CLI_R_DOMAIN_ENV,
    CLI_R_COUNT,
    CLI_R_TIMEOUT,
    CLI_R_PUB_SIZE,
    CLI_R_PUB_RATE,
    CLI_R_PUB_WAIT_SUBSCRIBERS,
    CLI_R_PUB_HISTORY,
    CLI_R_PUB_CHUNKS,
    CLI_R_PUB_SHARE,
    CLI_R_PUB_SHARE_BYTES,
    CLI_R_PUB_POOL,
    CLI_R_PUB_IMAGE,
    CLI_R_PUB_CLOUD,
    CLI_R_PUB_CLOUD_POINTS,
    CLI_R_SUB_DEPTH,
    CLI_R_SUB_HISTORY,
    CLI_R_HZ_WINDOW,
    CLI_R_DELAY_WINDOW,
    CLI_R_BRIDGE_DDS_DOMAIN,
    CLI_R_BRIDGE_SECONDS,
    CLI_R_DEMO_SECONDS,
    CLI_R_GPU_DEVICE,
    CLI_R_RECORD_SECONDS,
    CLI_R_RECORD_MAX_SIZE,
    CLI_R_RECORD_SPLIT_SIZE,
    CLI_R_RECORD_CHUNK_SIZE,
    CLI_R_RECORD_NICE,
    CLI_R_PLAY_RATE,
    CLI_R_PLAY_TIME,
    CLI_R_VIEW_PORT,
    CLI_R_VIEW_MAX_RATE,
    CLI_R_VIEW_JPEG_QUALITY,
    CLI_R_VIEW_MAX_CONNS,
    CLI_R_END
} cli_range_id;

extern const cli_range cli_ranges[CLI_R_END];

/* Parses text, the value of the option r describes, and checks it against r: true with *out set,
 * else false after one line "ferry CMD: NAME TEXT is out of range: LO..HI ..." (or "is not a
 * number: ..."). cli_parse_whole takes CLI_WHOLE and CLI_BYTES ranges, cli_parse_bytes
 * CLI_BYTES, cli_parse_real CLI_REAL, cli_parse_sides CLI_SIDES (whose hi fits 32 bits). */
bool cli_parse_whole(const char *cmd, const cli_range *r, const char *text, uint64_t *out);
bool cli_parse_bytes(const char *cmd, const cli_range *r, const char *text, size_t *out);
bool cli_parse_real(const char *cmd, const cli_range *r, const char *text, double *out);
bool cli_parse_sides(const char *cmd, const cli_range *r, const char *text, uint32_t *width,
                     uint32_t *height);

/* The message of cli_parse_* for a value text that parsed but is outside r, for checks that
 * depend on other options (r then holds the range those leave); returns 2. */
int cli_range_fail(const char *cmd, const cli_range *r, const char *text);

/* Parses --domain N (cli_ranges[CLI_R_DOMAIN]); false after a message when bad. */
bool cli_parse_domain(const char *cmd, const char *text, uint32_t *out);

/*
 * Options several commands take. Each is parsed in one place (cli_getopt), with one meaning, one
 * range (cli_ranges) and one message, whichever command it is given to. A command lists in its
 * getopt_long table the CLI_OPT_* entries of the shared options it takes next to its own (whose
 * codes start at CLI_O_OWN) and finds their values in a cli_opts.
 */
enum {
    CLI_O_HELP = 'h',
    CLI_O_DOMAIN = 256,
    CLI_O_DIR,
    CLI_O_TYPE,
    CLI_O_DEPTH,
    CLI_O_COUNT,
    CLI_O_TIMEOUT,
    CLI_O_JSON,
    CLI_O_QUIET,
    CLI_O_QUICK,
    CLI_O_CSV,
    CLI_O_OWN = 512, /* the first code of a command's own options */
};

#define CLI_OPT_HELP                                                                               \
    {                                                                                              \
        "help", no_argument, NULL, CLI_O_HELP                                                      \
    }
#define CLI_OPT_DOMAIN                                                                             \
    {                                                                                              \
        "domain", required_argument, NULL, CLI_O_DOMAIN                                            \
    }
#define CLI_OPT_DIR                                                                                \
    {                                                                                              \
        "dir", required_argument, NULL, CLI_O_DIR                                                  \
    }
#define CLI_OPT_TYPE                                                                               \
    {                                                                                              \
        "type", required_argument, NULL, CLI_O_TYPE                                                \
    }
#define CLI_OPT_DEPTH                                                                              \
    {                                                                                              \
        "depth", required_argument, NULL, CLI_O_DEPTH                                              \
    }
#define CLI_OPT_COUNT                                                                              \
    {                                                                                              \
        "count", required_argument, NULL, CLI_O_COUNT                                              \
    }
#define CLI_OPT_TIMEOUT                                                                            \
    {                                                                                              \
        "timeout", required_argument, NULL, CLI_O_TIMEOUT                                          \
    }
#define CLI_OPT_JSON                                                                               \
    {                                                                                              \
        "json", no_argument, NULL, CLI_O_JSON                                                      \
    }
#define CLI_OPT_QUIET                                                                              \
    {                                                                                              \
        "quiet", no_argument, NULL, CLI_O_QUIET                                                    \
    }
#define CLI_OPT_QUICK                                                                              \
    {                                                                                              \
        "quick", no_argument, NULL, CLI_O_QUICK                                                    \
    }
#define CLI_OPT_CSV                                                                                \
    {                                                                                              \
        "csv", required_argument, NULL, CLI_O_CSV                                                  \
    }
#define CLI_OPT_END                                                                                \
    {                                                                                              \
        NULL, 0, NULL, 0                                                                           \
    }

/* The values of the shared options; cli_opts_init fills what a command gets when they are left
 * out, and a command may set its own defaults before cli_getopt runs. */
typedef struct cli_opts {
    cli_where where;  /* --domain, --dir, over FERRY_DOMAIN and FERRY_DIR */
    bool where_given; /* --domain or --dir was given */
    const char *type; /* --type NAME (1..FERRY_TYPE_NAME_MAX bytes), or NULL */
    uint64_t depth;   /* --depth N (cli_ranges[CLI_R_SUB_DEPTH]), or 0 */
    uint64_t count;   /* --count N (cli_ranges[CLI_R_COUNT]); 0 when left out */
    double timeout_s; /* --timeout SEC (cli_ranges[CLI_R_TIMEOUT]), or negative */
    bool json, quiet, quick;
    const char *csv; /* --csv FILE, or NULL */
} cli_opts;

void cli_opts_init(cli_opts *o);

/*
 * Option tables: a command declares each option once, as a row of a cli_option table (its
 * names, the value it takes, where the value goes and how it is checked, its help), and the
 * parser (cli_getopt) and --help (cli_usage) both come from the table: a value is parsed and
 * checked against its range (cli_parse_*) or its choices, with the one message for each, and the
 * help lists the rows in order. A command keeps code of its own only for what a row cannot say
 * (options that depend on each other, values with checks of their own): a row's code brings it
 * back to the command after its value is stored.
 */
typedef enum cli_option_kind {
    CLI_K_CODE,   /* the command handles it: cli_getopt returns .code, optarg set */
    CLI_K_FLAG,   /* no value: the bool at .dest becomes true */
    CLI_K_STRING, /* the value as given, into the const char * at .dest */
    CLI_K_WHOLE,  /* cli_parse_whole against .range, into the uint64_t at .dest */
    CLI_K_BYTES,  /* cli_parse_bytes against .range, into the size_t at .dest */
    CLI_K_REAL,   /* cli_parse_real against .range, into the double at .dest */
    CLI_K_CHOICE, /* one of .choices: its value into the int at .dest */
    CLI_K_SHARED, /* a shared option (.code CLI_O_*): its value into the parser's cli_opts */
} cli_option_kind;

/* One word a CLI_K_CHOICE option takes, and the value it stands for. */
typedef struct cli_choice {
    const char *word;
    int value;
} cli_choice;

typedef struct cli_option {
    const char *name;  /* "--size" */
    char short_name;   /* 'o': the word "-o" alone stands for name; 0 for none */
    const char *value; /* its value as the help names it ("BYTES"); NULL: takes none */
    cli_option_kind kind;
    size_t dest;               /* where its value goes in the parser's dest (CLI_*_AT) */
    const cli_range *range;    /* CLI_K_WHOLE, CLI_K_BYTES, CLI_K_REAL */
    const cli_choice *choices; /* CLI_K_CHOICE: ending in {NULL, 0} */
    const char *bad_choice;    /* CLI_K_CHOICE: the message for another word, a format with the
                                * word, then the choices ("a, b or c") */
    int code;                  /* CLI_K_SHARED: its CLI_O_*; else a code >= CLI_O_OWN that
                                * cli_getopt returns once the value is stored, or 0 */
    const char *help;          /* its help, lines separated by '\n'; NULL: not listed */
    const char *label;         /* what the help shows instead of its names and value, or NULL
                                * (one line for two options: "--dir, --domain") */
} cli_option;

/* The offset of field in the struct type, checked to be a ctype (a distinct pointer type does
 * not compile). */
#define CLI_AT(type, field, ctype)                                                                 \
    (offsetof(type, field) + 0 * sizeof(&((type *)0)->field == (ctype *)0))
/* A row's kind and destination together, so that they cannot disagree: {.name = "--rate",
 * .value = "HZ", CLI_REAL_AT(pub_args, rate), .range = ...}. */
#define CLI_FLAG_AT(type, field) .kind = CLI_K_FLAG, .dest = CLI_AT(type, field, bool)
#define CLI_STRING_AT(type, field) .kind = CLI_K_STRING, .dest = CLI_AT(type, field, const char *)
#define CLI_WHOLE_AT(type, field) .kind = CLI_K_WHOLE, .dest = CLI_AT(type, field, uint64_t)
#define CLI_BYTES_AT(type, field) .kind = CLI_K_BYTES, .dest = CLI_AT(type, field, size_t)
#define CLI_REAL_AT(type, field) .kind = CLI_K_REAL, .dest = CLI_AT(type, field, double)
#define CLI_CHOICE_AT(type, field) .kind = CLI_K_CHOICE, .dest = CLI_AT(type, field, int)

/* The rows of the shared options: each one's name, value and code declared once, with the help
 * a command gives it (what --count counts, what --quiet leaves out). */
#define CLI_SHARED_ROW(name_, value_, code_, help_)                                                \
    {                                                                                              \
        .name = name_, .value = value_, .kind = CLI_K_SHARED, .code = code_, .help = help_         \
    }
#define CLI_OPTION_TYPE(help) CLI_SHARED_ROW("--type", "NAME", CLI_O_TYPE, help)
#define CLI_OPTION_DEPTH(help) CLI_SHARED_ROW("--depth", "N", CLI_O_DEPTH, help)
#define CLI_OPTION_COUNT(help) CLI_SHARED_ROW("--count", "N", CLI_O_COUNT, help)
#define CLI_OPTION_TIMEOUT(help) CLI_SHARED_ROW("--timeout", "SEC", CLI_O_TIMEOUT, help)
#define CLI_OPTION_JSON(help) CLI_SHARED_ROW("--json", NULL, CLI_O_JSON, help)
#define CLI_OPTION_QUIET(help) CLI_SHARED_ROW("--quiet", NULL, CLI_O_QUIET, help)

/* --domain, --dir and --help, with the help every command gives them, declared once; most tables
 * end with them (CLI_OPTIONS_WHERE_END). */
extern const char cli_help_domain[];
extern const char cli_help_dir[];
#define CLI_OPTION_DOMAIN CLI_SHARED_ROW("--domain", "N", CLI_O_DOMAIN, cli_help_domain)
#define CLI_OPTION_DIR CLI_SHARED_ROW("--dir", "PATH", CLI_O_DIR, cli_help_dir)
#define CLI_OPTION_HELP                                                                            \
    {                                                                                              \
        .name = "--help", .short_name = 'h', .kind = CLI_K_SHARED, .code = CLI_O_HELP,             \
        .help = "print this help"                                                                  \
    }
#define CLI_OPTION_END                                                                             \
    {                                                                                              \
        .name = NULL                                                                               \
    }
#define CLI_OPTIONS_WHERE_END CLI_OPTION_DOMAIN, CLI_OPTION_DIR, CLI_OPTION_HELP, CLI_OPTION_END

/* The most rows a table may have. */
#define CLI_OPTIONS_MAX 40

/* One command's option parsing. The command sets cmd and opts, and either table, about, column
 * and dest (an option table) or options and usage (a getopt_long table and its help). */
typedef struct cli_parser {
    const char *cmd;              /* as messages name it: "hz", "bench transport" */
    const cli_option *table;      /* its option table, ending in CLI_OPTION_END */
    const char *about;            /* with table: the help above the options, "options:" last */
    const char *epilogue;         /* with table: the help below the options, or NULL */
    int column;                   /* with table: where the options' help starts */
    void *dest;                   /* with table: the struct the rows' dest are offsets into */
    const struct option *options; /* without table: its getopt_long table, ending in
                                   * CLI_OPT_END */
    void (*usage)(FILE *to);      /* without table: prints the text of --help */
    cli_opts *opts;               /* where the shared options' values go */
    bool where_from_option;       /* FERRY_DIR and FERRY_DOMAIN count only with --dir or
                                   * --domain (the demo: else a private directory) */
    int status;                   /* see CLI_OPTS_EXIT */
    bool started;
    struct option longopts[CLI_OPTIONS_MAX + 1]; /* made from table */
} cli_parser;

/* The text of --help of a parser with a table: about, then per row "  -o, --output FILE" (or
 * its label) and its help from column on (two spaces after a name too wide for it), its further
 * lines below that column, then the epilogue. */
void cli_usage(const cli_parser *p, FILE *to);

enum {
    CLI_OPTS_END = -1,  /* the options are over; the operands start at optind */
    CLI_OPTS_EXIT = -2, /* the command returns p->status now: 0 after --help printed the
                         * usage, 2 after a one-line message about a bad option or value */
};

/* The next option of argv for p: handles the shared ones itself (their values in p->opts) and,
 * with a table, every row with a kind (its value at p->dest); returns the code of each of the
 * command's own, optarg set, for the command to handle; else CLI_OPTS_END or CLI_OPTS_EXIT. The
 * first call reads FERRY_DIR and FERRY_DOMAIN (cli_where_from_env) unless p->where_from_option,
 * resets getopt (optind) for argv and, with a table, puts each row's name in place of the word
 * of its short name in argv ("-o" becomes "--output"). */
int cli_getopt(cli_parser *p, int argc, char **argv);

/* The single TOPIC operand left after the options: true with *topic set, else false after a
 * one-line message. */
bool cli_topic_operand(const char *cmd, int argc, char **argv, const char **topic);

/* Whether an fnmatch pattern on topic names (with their leading '/', flags 0: '*' matches '/'
 * too) can match some valid topic name; false after a one-line message naming the pattern and
 * why none can (a character no topic has, an empty segment, a trailing '/'). */
bool cli_topic_pattern_check(const char *cmd, const char *pattern);

/* Set by SIGINT and SIGTERM once cli_stop_on_signals() ran: long-running commands check it and
 * stop cleanly (every chunk back, every file removed). */
extern volatile sig_atomic_t cli_stop_requested;
/* Installs the handlers, without SA_RESTART: a signal ends the wait it interrupts, so the loop
 * sees the flag promptly. */
void cli_stop_on_signals(void);

/* Whether anything publishes on a topic: a command that waits for samples (echo, hz, delay) says
 * so once, a while after it started, when nothing does (the topic or the directory is likely
 * wrong), and exits 1 when its --timeout ends with no publisher ever seen. */
typedef struct cli_watch {
    const char *cmd;
    const cli_opts *opts; /* where, and whether --domain or --dir was given (for the hint) */
    const char *topic;
    int64_t notice_ns; /* ferry_now() from which the notice is due */
    bool noticed;      /* looked at notice_ns already (and said so when nothing published) */
    bool seen;         /* a live publisher of the topic was seen */
} cli_watch;

/* After CLI_WATCH_NOTICE_NS without a publisher: "ferry CMD: no publisher on /t yet ...". */
#define CLI_WATCH_NOTICE_NS 1000000000LL

void cli_watch_init(cli_watch *wa, const char *cmd, const cli_opts *o, const char *topic);
/* Whether a live publisher of the topic exists now (ferry_inspect); sets wa->seen when one does. */
bool cli_watch_look(cli_watch *wa);
/* Once CLI_WATCH_NOTICE_NS has passed, looks once (unless a publisher was seen already, or
 * received is nonzero) and prints the notice when nothing publishes. Cheap before that. */
void cli_watch_tick(cli_watch *wa, uint64_t received);
/* For the end of a --timeout: true when no publisher was ever seen and nothing was received
 * (it looks once more). The caller then fails with cli_watch_fail. */
bool cli_watch_none(cli_watch *wa, uint64_t received);
/* "ferry CMD: timed out after SEC s: no publisher on /t (domain N in DIR)"; returns 1. */
int cli_watch_fail(const cli_watch *wa, double timeout_s);

/* The type a subscriber of the topic uses: o->type when given, else the type its live publishers
 * declare. Subscribing with a type of the command's own choosing would claim the topic for that
 * type and lock out the publisher that comes later, so with no publisher yet cli_topic_type
 * waits for one, polling the domain every 100 ms (cli_watch_tick says so after a second), until
 * deadline_ns (ferry_now; negative for never) or cli_stop_requested. */
typedef struct cli_type {
    char name[FERRY_TYPE_NAME_MAX + 1];
    uint64_t hash;
} cli_type;
typedef enum cli_type_found {
    CLI_TYPE_FOUND,   /* *out is set */
    CLI_TYPE_TIMEOUT, /* no publisher came before the deadline */
    CLI_TYPE_STOPPED, /* cli_stop_requested was set while waiting */
} cli_type_found;
cli_type_found cli_topic_type(cli_watch *wa, int64_t deadline_ns, cli_type *out);

/* Creates a node named cmd and a subscriber of topic with type and options o; on failure prints
 * one line naming the topic and the type (with FERRY_ETYPE, the type in use too:
 * cli_endpoint_fail), destroys what it made and returns 1, else 0. */
int cli_subscribe(const char *cmd, const cli_where *w, const char *topic, const cli_type *type,
                  const ferry_subscriber_options *o, ferry_node **node, ferry_subscriber **sub);

/* The message of a failed ferry_publisher_create or ferry_subscriber_create (what: "publish on",
 * "subscribe to"), err and saved_errno as the call left them: "ferry CMD: cannot WHAT '/t' as
 * TYPE: REASON". With FERRY_ETYPE the reason names the type a live publisher uses (from
 * ferry_inspect), with its pid and node; with FERRY_ESYS, errno's text. Returns 1. */
int cli_endpoint_fail(const char *cmd, const cli_where *w, const char *what, const char *topic,
                      const char *type_name, uint64_t type_hash, ferry_err err, int saved_errno);

/* For commands that read a domain (topics, info): 0 when the root directory of w exists and
 * holds at least one domain directory, else 1 after a message naming the path. */
int cli_check_root(const char *cmd, const cli_where *w);

/* Prints "ferry CMD: message" to stderr; returns the exit status given. */
int cli_fail(const char *cmd, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Like cli_fail, with ": " and ferry_strerror(err) after the message, and for FERRY_ESYS errno's
 * text (errno as it was when cli_fail_err was called): "ferry hz: ferry_wait: system call failed
 * (Bad file descriptor)". */
/* What FERRY_ENOMEM ran out of, from the errno the library left: a full file system (ENOSPC,
 * EDQUOT) or memory. */
const char *cli_memory_why(int e);
int cli_fail_err(const char *cmd, int status, ferry_err err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Creates a node for w with a node name; prints and returns the error on failure. */
ferry_err cli_node(const cli_where *w, const char *name, ferry_node **out);

/* An image file decoded for `ferry pub --from` (imgfile.c): packed rows of 8-bit pixels. */
typedef struct cli_image_file {
    uint32_t width, height;
    const char *encoding;  /* "mono8", "rgb8" or "rgba8", as the file has it */
    unsigned char *pixels; /* width * height pixels, rows without padding */
    size_t size;
} cli_image_file;

/* Decodes a PNG, JPEG, PPM (P6) or PGM (P5) file, told by its first bytes: 0, or the exit
 * status after a one-line message naming --from and path (2 for a format this build lacks). */
int cli_image_load(const char *cmd, const char *path, cli_image_file *img);
void cli_image_file_free(cli_image_file *img);

/* Synthetic frames: a header, then a pattern derived from the sequence number.
 * The type name and hash commands use for them. */
#define CLI_FRAME_TYPE "ferry/synthetic_frame"
#define CLI_FRAME_MAGIC 0x454d4152465952ULL /* "RYFRAME" */
/* The points of `ferry pub --cloud`: x, y, z and intensity, float32 each. */
#define CLI_CLOUD_POINT_STEP 16u

typedef struct cli_frame_header {
    uint64_t magic;
    uint64_t sequence;
    uint64_t size;     /* whole frame, header included */
    int64_t send_ns;   /* CLOCK_MONOTONIC when the sender filled it */
    uint64_t checksum; /* over bytes [sizeof header, size) */
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
void cli_lat_add(cli_lat *l, int64_t ns); /* ignores samples beyond capacity */
void cli_lat_free(cli_lat *l);
/* Percentile p in [0,100] of the samples, in ns (sorts in place); 0 when empty. */
int64_t cli_lat_pct(cli_lat *l, double p);
int64_t cli_lat_max(const cli_lat *l);

/* CPU time of the calling process (user + system), in ns. */
int64_t cli_cpu_ns(void);

/* Sleeps until the absolute CLOCK_MONOTONIC time t_ns. */
void cli_sleep_until(int64_t t_ns);

#endif
