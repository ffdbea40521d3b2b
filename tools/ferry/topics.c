/*
 * ferry topics: lists the topics of a domain that have at least one live endpoint, with their
 * type and how many live publishers and subscribers each has.
 */
#include "cli.h"
#include "commands.h"
#include "decode.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define CMD "topics"

static const char about[] =
    "usage: ferry topics [options]\n"
    "Lists the topics that have a live publisher or subscriber: name, type, publishers,\n"
    "subscribers (live ones only), sorted by name. Prints nothing for an empty domain;\n"
    "exits 1 when the directory does not exist or holds no domain.\n"
    "\n"
    "options:\n";

static const cli_option options[] = {
    CLI_OPTION_JSON("print a JSON array of\n"
                    "{\"topic\", \"type\", \"publishers\", \"subscribers\"} ([] when empty)"),
    CLI_OPTIONS_WHERE_END,
};

typedef struct topic_row {
    char topic[FERRY_TOPIC_MAX + 2];
    char type[FERRY_TYPE_NAME_MAX + 1];
    bool type_from_publisher;
    uint32_t publishers;
    uint32_t subscribers;
} topic_row;

typedef struct topic_list {
    topic_row *rows;
    size_t count, cap;
    bool out_of_memory;
} topic_list;

static bool add_endpoint(void *arg, const ferry_endpoint_info *info)
{
    topic_list *l = arg;
    topic_row *r = NULL;
    size_t i;

    if (!info->alive)
        return true;
    for (i = 0; i < l->count; i++) {
        if (strcmp(l->rows[i].topic, info->topic) == 0) {
            r = &l->rows[i];
            break;
        }
    }
    if (r == NULL) {
        if (l->count == l->cap) {
            size_t cap = l->cap ? l->cap * 2 : 16;
            topic_row *rows = realloc(l->rows, cap * sizeof *rows);

            if (rows == NULL) {
                l->out_of_memory = true;
                return false;
            }
            l->rows = rows;
            l->cap = cap;
        }
        r = &l->rows[l->count++];
        memset(r, 0, sizeof *r);
        snprintf(r->topic, sizeof r->topic, "%s", info->topic);
    }
    /* Live endpoints of one topic share a type; a publisher's word is taken first anyway. */
    if (r->type[0] == '\0' || (!r->type_from_publisher && info->kind == FERRY_ENDPOINT_PUBLISHER)) {
        snprintf(r->type, sizeof r->type, "%s", info->type_name);
        r->type_from_publisher = info->kind == FERRY_ENDPOINT_PUBLISHER;
    }
    if (info->kind == FERRY_ENDPOINT_PUBLISHER)
        r->publishers++;
    else if (info->kind == FERRY_ENDPOINT_SUBSCRIBER)
        r->subscribers++;
    return true;
}

static int by_topic(const void *a, const void *b)
{
    return strcmp(((const topic_row *)a)->topic, ((const topic_row *)b)->topic);
}

static void print_json(const topic_list *l)
{
    size_t i;

    fputs("[", stdout);
    for (i = 0; i < l->count; i++) {
        const topic_row *r = &l->rows[i];

        fputs(i == 0 ? "\n  {\"topic\": " : ",\n  {\"topic\": ", stdout);
        cli_json_string(stdout, r->topic);
        fputs(", \"type\": ", stdout);
        cli_json_string(stdout, r->type);
        printf(", \"publishers\": %" PRIu32 ", \"subscribers\": %" PRIu32 "}", r->publishers,
               r->subscribers);
    }
    fputs(l->count ? "\n]\n" : "]\n", stdout);
}

static void print_table(const topic_list *l)
{
    int wt = (int)strlen("TOPIC"), wy = (int)strlen("TYPE");
    size_t i;

    if (l->count == 0)
        return;
    for (i = 0; i < l->count; i++) {
        int t = (int)strlen(l->rows[i].topic), y = (int)strlen(l->rows[i].type);

        wt = t > wt ? t : wt;
        wy = y > wy ? y : wy;
    }
    printf("%-*s  %-*s  %10s  %11s\n", wt, "TOPIC", wy, "TYPE", "PUBLISHERS", "SUBSCRIBERS");
    for (i = 0; i < l->count; i++)
        printf("%-*s  %-*s  %10" PRIu32 "  %11" PRIu32 "\n", wt, l->rows[i].topic, wy,
               l->rows[i].type, l->rows[i].publishers, l->rows[i].subscribers);
}

int ferry_cmd_topics(int argc, char **argv)
{
    topic_list l = {NULL, 0, 0, false};
    cli_opts o;
    ferry_err err;

    cli_parser p = {.cmd = CMD, .table = options, .about = about, .column = 19, .opts = &o};

    cli_opts_init(&o);
    if (cli_getopt(&p, argc, argv) != CLI_OPTS_END)
        return p.status;
    if (optind < argc)
        return cli_fail(CMD, 2, "unexpected argument '%s'", argv[optind]);
    if (cli_check_root(CMD, &o.where) != 0)
        return 1;

    err = ferry_inspect(o.where.dir, o.where.domain, NULL, add_endpoint, &l);
    /* A domain nobody has used yet has no directory: it is simply empty. */
    if (err == FERRY_ESYS && errno == ENOENT)
        err = FERRY_OK;
    if (err != FERRY_OK || l.out_of_memory) {
        int saved = errno;

        free(l.rows);
        if (l.out_of_memory)
            return cli_fail(CMD, 1, "out of memory");
        return cli_fail(CMD, 1, "cannot list domain %u: %s%s%s", (unsigned)o.where.domain,
                        ferry_strerror(err), err == FERRY_ESYS ? ": " : "",
                        err == FERRY_ESYS ? strerror(saved) : "");
    }
    if (l.count > 1)
        qsort(l.rows, l.count, sizeof *l.rows, by_topic);
    if (o.json)
        print_json(&l);
    else
        print_table(&l);
    free(l.rows);
    if (fflush(stdout) != 0)
        return 1;
    return 0;
}
