/*
 * ferry clean: removes what dead processes left in a domain directory (ferry_clean).
 */
#include "cli.h"
#include "commands.h"

#include <errno.h>
#include <getopt.h>
#include <string.h>

#define CMD "clean"

static const char about[] =
    "usage: ferry clean [options]\n"
    "Removes the status files, sockets and topic directories that dead processes left in\n"
    "the domain directory, and prints \"removed N files\". Live endpoints are untouched.\n"
    "\n"
    "options:\n";

static const cli_option options[] = {
    CLI_OPTIONS_WHERE_END,
};

int ferry_cmd_clean(int argc, char **argv)
{
    uint32_t removed = 0;
    cli_opts o;
    ferry_err err;

    cli_parser p = {.cmd = CMD, .table = options, .about = about, .column = 19, .opts = &o};

    cli_opts_init(&o);
    if (cli_getopt(&p, argc, argv) != CLI_OPTS_END)
        return p.status;
    if (optind < argc)
        return cli_fail(CMD, 2, "unexpected argument '%s'", argv[optind]);

    err = ferry_clean(o.where.dir, o.where.domain, &removed);
    /* A domain directory that does not exist holds nothing to remove. */
    if (err == FERRY_ESYS && errno == ENOENT) {
        err = FERRY_OK;
        removed = 0;
    }
    if (err != FERRY_OK) {
        int saved = errno;

        return cli_fail(CMD, 1, "cannot clean domain %u: %s%s%s", (unsigned)o.where.domain,
                        ferry_strerror(err), err == FERRY_ESYS ? ": " : "",
                        err == FERRY_ESYS ? strerror(saved) : "");
    }
    printf("removed %u files\n", (unsigned)removed);
    return fflush(stdout) == 0 ? 0 : 1;
}
