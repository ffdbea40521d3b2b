/*
 * ferry clean: removes what dead processes left in a domain directory (ferry_clean).
 */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <string.h>

#define CMD "clean"

static void usage(FILE *to)
{
    fputs("usage: ferry clean [options]\n"
          "Removes the status files, sockets and topic directories that dead processes left in\n"
          "the domain directory, and prints \"removed N files\". Live endpoints are untouched.\n"
          "\n"
          "options:\n"
          "  --domain N       domain number 0..1023 (default $FERRY_DOMAIN, else 0)\n"
          "  --dir PATH       root of the domain directories (default $FERRY_DIR, else\n"
          "                   /dev/shm/ferry-<uid>)\n"
          "  -h, --help       print this help\n",
          to);
}

int ferry_cmd_clean(int argc, char **argv)
{
    enum { O_DOMAIN = 256, O_DIR };
    static const struct option options[] = {
        {"domain", required_argument, NULL, O_DOMAIN},
        {"dir", required_argument, NULL, O_DIR},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    uint32_t removed = 0;
    cli_where where;
    ferry_err err;
    int c;

    if (!cli_where_from_env(CMD, &where)) return 2;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
        switch (c) {
        case O_DOMAIN:
            if (!cli_parse_domain(CMD, optarg, &where.domain)) return 2;
            break;
        case O_DIR:
            if (!cli_parse_dir(CMD, optarg, &where.dir)) return 2;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case ':':
        default:
            return cli_option_error(CMD, c, argv);
        }
    }
    if (optind < argc) return cli_fail(CMD, 2, "unexpected argument '%s'", argv[optind]);

    err = ferry_clean(where.dir, where.domain, &removed);
    /* A domain directory that does not exist holds nothing to remove. */
    if (err == FERRY_ESYS && errno == ENOENT) {
        err = FERRY_OK;
        removed = 0;
    }
    if (err != FERRY_OK) {
        int saved = errno;

        return cli_fail(CMD, 1, "cannot clean domain %u: %s%s%s", (unsigned)where.domain,
                        ferry_strerror(err), err == FERRY_ESYS ? ": " : "",
                        err == FERRY_ESYS ? strerror(saved) : "");
    }
    printf("removed %u files\n", (unsigned)removed);
    return fflush(stdout) == 0 ? 0 : 1;
}
