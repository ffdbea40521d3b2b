/*
 * ferry: inspect and exercise ferry topics from the shell. `ferry <command> [options]`; each
 * command parses its own options and prints its own usage for --help.
 */
#include "bench_cmd.h"
#include "cli.h"
#include "commands.h"

#include <signal.h>
#include <stdbool.h>
#include <string.h>

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"pub", ferry_cmd_pub, "publish synthetic frames at a rate"},
    {"echo", ferry_cmd_echo, "print the samples of a topic (sequence, size, latency)"},
    {"hz", ferry_cmd_hz, "print the rate, period and bandwidth of a topic once a second"},
    {"delay", ferry_cmd_delay, "print how old a topic's samples are on arrival (header stamp)"},
    {"topics", ferry_cmd_topics, "list the topics of a domain that have live endpoints"},
    {"info", ferry_cmd_info, "show a topic's publishers and subscribers and their counters"},
    {"clean", ferry_cmd_clean, "remove what dead processes left in a domain directory"},
    {"demo", ferry_cmd_demo, "run a self-contained demonstration"},
    {"bench", ferry_cmd_bench, "run the benchmarks"},
    {"record", ferry_cmd_record, "record topics into an MCAP file (ROS 2 bag format)"},
    {"play", ferry_cmd_play, "publish the messages of an MCAP file at their recorded pace"},
    {"bag", ferry_cmd_bag, "show what an MCAP file holds (bag info)"},
    {"bridge", ferry_cmd_bridge, "carry image and point-cloud topics to and from DDS (ROS 2)"},
    {"view", ferry_cmd_view, "serve a live view: Foxglove WebSocket and a web page"},
};

static void usage(FILE *to)
{
    size_t i;

    fputs("usage: ferry <command> [options]\n"
          "       ferry <command> --help\n"
          "       ferry --version\n"
          "\n"
          "commands:\n",
          to);
    for (i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(to, "  %-8s %s\n", commands[i].name, commands[i].summary);
    fputs("\n"
          "Every command takes --domain N and --dir PATH, after the command name (ferry\n"
          "topics --domain 3); their defaults come from the environment variables FERRY_DOMAIN\n"
          "(else 0) and FERRY_DIR (else /dev/shm/ferry-<uid>).\n",
          to);
}

static const command *find_command(const char *name)
{
    size_t i;

    for (i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(name, commands[i].name) == 0)
            return &commands[i];
    return NULL;
}

/* Whether option, a word of the command line, takes the next word as its value: one of the
 * options every command shares that take a value (cli.h), written without '='. */
static bool takes_value(const char *option)
{
    static const char *const with_value[] = {"--domain", "--dir",     "--type", "--depth",
                                             "--count",  "--timeout", "--csv"};
    size_t i;

    for (i = 0; i < sizeof with_value / sizeof with_value[0]; i++)
        if (strcmp(option, with_value[i]) == 0)
            return true;
    return false;
}

/* A word as the shell reads it back: quoted when it holds anything but plain characters. */
static void put_word(FILE *to, const char *word)
{
    const char *p;

    if (word[0] != '\0' && strspn(word, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                        "0123456789_-+=/.,:@%") == strlen(word)) {
        fputs(word, to);
        return;
    }
    fputc('\'', to);
    for (p = word; *p != '\0'; p++) {
        if (*p == '\'')
            fputs("'\\''", to);
        else
            fputc(*p, to);
    }
    fputc('\'', to);
}

/* `ferry --domain 3 topics`: options given before the command. When a command follows them, says
 * where they go, with the command line rewritten (the command, its own words, then the options
 * given before it), and returns 2; returns 0 when no command follows. */
static int options_before_command(int argc, char **argv)
{
    int i, at = 0, j;

    for (i = 1; i < argc && at == 0; i++) {
        if (find_command(argv[i]) != NULL)
            at = i;
        else if (argv[i][0] == '-' && takes_value(argv[i]))
            i++; /* its value, which may be a command's name: `--dir pub` */
    }
    if (at == 0)
        return 0;
    fputs("ferry: options go after the command: ferry ", stderr);
    put_word(stderr, argv[at]);
    for (j = at + 1; j < argc; j++) {
        fputc(' ', stderr);
        put_word(stderr, argv[j]);
    }
    for (j = 1; j < at; j++) {
        fputc(' ', stderr);
        put_word(stderr, argv[j]);
    }
    fputc('\n', stderr);
    return 2;
}

int main(int argc, char **argv)
{
    const command *cmd;
    const char *name;

    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 || strcmp(name, "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(name, "--version") == 0 || strcmp(name, "-V") == 0) {
        printf("ferry %d.%d (protocol %d)\n", FERRY_VERSION_MAJOR, FERRY_VERSION_MINOR,
               FERRY_PROTOCOL_VERSION);
        return 0;
    }
    /* A reader that goes away (`ferry echo ... | head`) must not kill a command before it
     * destroys its endpoints: writes fail with EPIPE instead and the command stops. */
    signal(SIGPIPE, SIG_IGN);
    cmd = find_command(name);
    if (cmd != NULL)
        return cmd->run(argc - 1, argv + 1);
    if (name[0] == '-') {
        if (options_before_command(argc, argv) != 0)
            return 2;
        return cli_fail(NULL, 2, "unknown option '%s' (try 'ferry --help')", name);
    }
    return cli_fail(NULL, 2, "unknown command '%s' (try 'ferry --help')", name);
}
