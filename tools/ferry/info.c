/*
 * ferry info: shows every endpoint of one topic as its status file tells, live and dead, with
 * its counters: for publishers the pool (chunks total, free, loaned, in use; bytes; the pages
 * behind it), for subscribers what they received, dropped and hold.
 */
#include "cli.h"
#include "commands.h"
#include "decode.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define CMD "info"

/* Peers refused for QoS (ferry_subscriber_options.require), when there were any. */
static void print_incompatible(const char *peers, uint64_t count, uint32_t policies)
{
    if (count == 0)
        return;
    printf("    %s of incompatible QoS %" PRIu64 " (the last: %s%s%s)\n", peers, count,
           (policies & FERRY_QOS_RELIABLE) ? "reliability" : "",
           (policies & FERRY_QOS_RELIABLE) && (policies & FERRY_QOS_DURABLE) ? " and " : "",
           (policies & FERRY_QOS_DURABLE) ? "durability" : "");
}

static const char about[] =
    "usage: ferry info TOPIC [options]\n"
    "Shows the publishers and subscribers of TOPIC with their counters. Endpoints whose\n"
    "process is gone are listed too, marked dead (\"alive\": false in JSON); `ferry clean`\n"
    "removes them. Exits 1 when the topic has no endpoint at all.\n"
    "\n"
    "options:\n";

static const cli_option options[] = {
    CLI_OPTION_JSON("print one JSON object (ids and hashes as hex strings)"),
    CLI_OPTIONS_WHERE_END,
};

typedef struct endpoint_list {
    ferry_endpoint_info *e;
    size_t count, cap;
    bool out_of_memory;
} endpoint_list;

static bool add_endpoint(void *arg, const ferry_endpoint_info *info)
{
    endpoint_list *l = arg;

    if (l->count == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        ferry_endpoint_info *e = realloc(l->e, cap * sizeof *e);

        if (e == NULL) {
            l->out_of_memory = true;
            return false;
        }
        l->e = e;
        l->cap = cap;
    }
    l->e[l->count++] = *info;
    return true;
}

/* Publishers first, live before dead, then by pid and id: a stable, readable order. */
static int by_kind_then_pid(const void *pa, const void *pb)
{
    const ferry_endpoint_info *a = pa, *b = pb;

    if (a->kind != b->kind)
        return a->kind < b->kind ? -1 : 1;
    if (a->alive != b->alive)
        return a->alive ? -1 : 1;
    if (a->pid != b->pid)
        return a->pid < b->pid ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

/* The topic's type: a live publisher's, else any live endpoint's, else the first one's. */
static const ferry_endpoint_info *type_source(const endpoint_list *l)
{
    const ferry_endpoint_info *live = NULL;
    size_t i;

    for (i = 0; i < l->count; i++) {
        if (!l->e[i].alive)
            continue;
        if (l->e[i].kind == FERRY_ENDPOINT_PUBLISHER)
            return &l->e[i];
        if (live == NULL)
            live = &l->e[i];
    }
    return live ? live : &l->e[0];
}

static size_t count_kind(const endpoint_list *l, ferry_endpoint_kind kind)
{
    size_t i, n = 0;

    for (i = 0; i < l->count; i++)
        n += l->e[i].kind == kind;
    return n;
}

static const char *huge_pages_name(ferry_huge_pages h)
{
    switch (h) {
    case FERRY_HUGE_PAGES_THP:
        return "thp";
    case FERRY_HUGE_PAGES_HUGETLB:
        return "hugetlb";
    default:
        return "off";
    }
}

static const char *spin_mode_name(uint32_t mode)
{
    switch (mode) {
    case FERRY_SPIN_MODE_SPIN:
        return "spin";
    case FERRY_SPIN_MODE_YIELD:
        return "yield";
    case FERRY_SPIN_MODE_POLL:
        return "poll";
    default:
        return "off";
    }
}

static void json_spin(const ferry_spin_stats *sp)
{
    printf(", \"spin\": {\"mode\": \"%s\", \"cpu\": %" PRId32 ", \"budget_ns\": %" PRId64
           ", \"peers_elsewhere\": %" PRIu32 ", \"peers_same_cpu\": %" PRIu32
           ", \"spins\": %" PRIu64 ", \"spins_found\": %" PRIu64 ", \"paced_spins\": %" PRIu64
           ", \"paced_found\": %" PRIu64 "}",
           spin_mode_name(sp->mode), sp->cpu, sp->budget_ns, sp->peers_elsewhere,
           sp->peers_same_cpu, sp->spins, sp->spins_found, sp->paced_spins, sp->paced_found);
}

/* How its waits pass the time, and why (ferry_spin_stats). */
static void print_spin(const ferry_spin_stats *sp)
{
    printf("    waits: ");
    switch (sp->mode) {
    case FERRY_SPIN_MODE_SPIN:
        printf("spin up to %.1f us", (double)sp->budget_ns / 1e3);
        break;
    case FERRY_SPIN_MODE_YIELD:
        printf("yield, then sleep");
        break;
    case FERRY_SPIN_MODE_POLL:
        printf("poll, never sleep");
        break;
    default:
        printf("sleep at once");
        break;
    }
    if (sp->cpu < 0)
        printf(" (its thread may run on several CPUs)");
    else
        printf(" (its thread on CPU %" PRId32 " only; peers: %" PRIu32 " there, %" PRIu32
               " elsewhere)",
               sp->cpu, sp->peers_same_cpu, sp->peers_elsewhere);
    printf("  spins %" PRIu64 ", %" PRIu64 " found", sp->spins, sp->spins_found);
    if (sp->paced_spins)
        printf("; paced %" PRIu64 ", %" PRIu64 " caught", sp->paced_spins, sp->paced_found);
    putchar('\n');
}

static void json_endpoint_common(const ferry_endpoint_info *e)
{
    printf("{\"id\": \"%" PRIx64 "\", \"pid\": %" PRId32 ", \"alive\": %s, \"node\": ", e->id,
           e->pid, e->alive ? "true" : "false");
    cli_json_string(stdout, e->node_name);
    fputs(", \"type\": ", stdout);
    cli_json_string(stdout, e->type_name);
    printf(", \"type_hash\": \"%016" PRIx64 "\"", e->type_hash);
    if (e->note[0]) {
        fputs(", \"note\": ", stdout);
        cli_json_string(stdout, e->note);
    }
}

static void print_json(const endpoint_list *l, const ferry_endpoint_info *t)
{
    const char *sep = "\n    ";
    size_t i;

    fputs("{\n  \"topic\": ", stdout);
    cli_json_string(stdout, t->topic);
    fputs(",\n  \"type\": ", stdout);
    cli_json_string(stdout, t->type_name);
    printf(",\n  \"type_hash\": \"%016" PRIx64 "\",\n  \"publishers\": [", t->type_hash);
    for (i = 0; i < l->count; i++) {
        const ferry_endpoint_info *e = &l->e[i];
        const ferry_publisher_stats *p = &e->pub;

        if (e->kind != FERRY_ENDPOINT_PUBLISHER)
            continue;
        fputs(sep, stdout);
        sep = ",\n    ";
        json_endpoint_common(e);
        printf(", \"published\": %" PRIu64 ", \"deliveries\": %" PRIu64 ", \"dropped\": %" PRIu64
               ", \"bytes_copied\": %" PRIu64 ", \"chunks_total\": %" PRIu32
               ", \"chunks_free\": %" PRIu32 ", \"chunks_loaned\": %" PRIu32
               ", \"chunks_in_use\": %" PRIu32 ", \"size_classes\": %" PRIu32
               ", \"pool_bytes\": %" PRIu64 ", \"pool_bytes_cap\": %" PRIu64
               ", \"subscribers\": %" PRIu32 ", \"subscribers_lost\": %" PRIu64
               ", \"chunks_reclaimed\": %" PRIu64 ", \"rejected\": %" PRIu64
               ", \"protocol_errors\": %" PRIu64 ", \"huge_pages\": \"%s\""
               ", \"huge_bytes\": %" PRIu64 ", \"incompatible\": %" PRIu64,
               p->published, p->deliveries, p->dropped, p->bytes_copied, p->chunks_total,
               p->chunks_free, p->chunks_loaned, p->chunks_in_use, p->size_classes, p->pool_bytes,
               p->pool_bytes_cap, p->subscribers, p->subscribers_lost, p->chunks_reclaimed,
               p->rejected, p->protocol_errors, huge_pages_name(p->huge_pages), p->huge_bytes,
               p->incompatible);
        json_spin(&p->spin);
        putchar('}');
    }
    if (count_kind(l, FERRY_ENDPOINT_PUBLISHER) != 0)
        fputs("\n  ", stdout);
    fputs("],\n  \"subscribers\": [", stdout);
    sep = "\n    ";
    for (i = 0; i < l->count; i++) {
        const ferry_endpoint_info *e = &l->e[i];
        const ferry_subscriber_stats *s = &e->sub;

        if (e->kind != FERRY_ENDPOINT_SUBSCRIBER)
            continue;
        fputs(sep, stdout);
        sep = ",\n    ";
        json_endpoint_common(e);
        printf(", \"received\": %" PRIu64 ", \"dropped\": %" PRIu64 ", \"held\": %" PRIu32
               ", \"depth\": %" PRIu32 ", \"publishers\": %" PRIu32
               ", \"publishers_lost\": %" PRIu64 ", \"bytes_copied\": %" PRIu64
               ", \"rejected\": %" PRIu64 ", \"protocol_errors\": %" PRIu64
               ", \"incompatible\": %" PRIu64,
               s->received, s->dropped, s->held, e->depth, s->publishers, s->publishers_lost,
               s->bytes_copied, s->rejected, s->protocol_errors, s->incompatible);
        json_spin(&s->spin);
        putchar('}');
    }
    if (count_kind(l, FERRY_ENDPOINT_SUBSCRIBER) != 0)
        fputs("\n  ", stdout);
    fputs("]\n}\n", stdout);
}

static void print_endpoint_head(const ferry_endpoint_info *e, const ferry_endpoint_info *t)
{
    printf("  id %" PRIx64 "  pid %" PRId32 "  node %s  %s", e->id, e->pid, e->node_name,
           e->alive ? "alive" : "dead");
    if (strcmp(e->type_name, t->type_name) != 0 || e->type_hash != t->type_hash)
        printf("  type %s (hash %016" PRIx64 ")", e->type_name, e->type_hash);
    putchar('\n');
    if (e->note[0])
        printf("    %s\n", e->note);
}

static void print_text(const endpoint_list *l, const ferry_endpoint_info *t)
{
    size_t i;

    printf("topic: %s\ntype:  %s (hash %016" PRIx64 ")\n", t->topic, t->type_name, t->type_hash);
    printf("publishers: %zu\n", count_kind(l, FERRY_ENDPOINT_PUBLISHER));
    for (i = 0; i < l->count; i++) {
        const ferry_endpoint_info *e = &l->e[i];
        const ferry_publisher_stats *p = &e->pub;

        if (e->kind != FERRY_ENDPOINT_PUBLISHER)
            continue;
        print_endpoint_head(e, t);
        printf("    published %" PRIu64 "  deliveries %" PRIu64 "  dropped %" PRIu64
               "  subscribers %" PRIu32 "\n",
               p->published, p->deliveries, p->dropped, p->subscribers);
        printf("    chunks total %" PRIu32 "  free %" PRIu32 "  loaned %" PRIu32 "  in use %" PRIu32
               "  size classes %" PRIu32 "\n",
               p->chunks_total, p->chunks_free, p->chunks_loaned, p->chunks_in_use,
               p->size_classes);
        printf("    pool %" PRIu64 " of %" PRIu64 " bytes (%.1f of %.1f MiB)  bytes copied %" PRIu64
               "\n",
               p->pool_bytes, p->pool_bytes_cap, (double)p->pool_bytes / 1048576.0,
               (double)p->pool_bytes_cap / 1048576.0, p->bytes_copied);
        printf("    subscribers lost %" PRIu64 "  chunks reclaimed %" PRIu64 "  rejected %" PRIu64
               "  protocol errors %" PRIu64 "\n",
               p->subscribers_lost, p->chunks_reclaimed, p->rejected, p->protocol_errors);
        print_incompatible("subscribers", p->incompatible, p->incompatible_policies);
        if (p->huge_pages == FERRY_HUGE_PAGES_OFF)
            printf("    pages 4 KiB\n");
        else
            printf("    pages %s: %" PRIu64 " bytes (%.1f MiB) mapped huge\n",
                   huge_pages_name(p->huge_pages), p->huge_bytes,
                   (double)p->huge_bytes / 1048576.0);
        print_spin(&p->spin);
    }
    printf("subscribers: %zu\n", count_kind(l, FERRY_ENDPOINT_SUBSCRIBER));
    for (i = 0; i < l->count; i++) {
        const ferry_endpoint_info *e = &l->e[i];
        const ferry_subscriber_stats *s = &e->sub;

        if (e->kind != FERRY_ENDPOINT_SUBSCRIBER)
            continue;
        print_endpoint_head(e, t);
        printf("    received %" PRIu64 "  dropped %" PRIu64 "  held %" PRIu32 "  depth %" PRIu32
               "  publishers %" PRIu32 "\n",
               s->received, s->dropped, s->held, e->depth, s->publishers);
        printf("    publishers lost %" PRIu64 "  rejected %" PRIu64 "  protocol errors %" PRIu64
               "  bytes copied %" PRIu64 "\n",
               s->publishers_lost, s->rejected, s->protocol_errors, s->bytes_copied);
        print_incompatible("publishers", s->incompatible, s->incompatible_policies);
        print_spin(&s->spin);
    }
}

int ferry_cmd_info(int argc, char **argv)
{
    endpoint_list l = {NULL, 0, 0, false};
    const char *topic;
    cli_opts o;
    ferry_err err;

    cli_parser p = {.cmd = CMD, .table = options, .about = about, .column = 19, .opts = &o};

    cli_opts_init(&o);
    if (cli_getopt(&p, argc, argv) != CLI_OPTS_END)
        return p.status;
    if (!cli_topic_operand(CMD, argc, argv, &topic))
        return 2;
    if (ferry_topic_validate(topic) != FERRY_OK)
        return cli_fail(CMD, 2, "invalid topic name '%s'", topic);
    if (cli_check_root(CMD, &o.where) != 0)
        return 1;

    err = ferry_inspect(o.where.dir, o.where.domain, topic, add_endpoint, &l);
    /* A domain nobody has used yet has no directory: the topic is unknown there. */
    if (err == FERRY_ESYS && errno == ENOENT)
        err = FERRY_OK;
    if (err != FERRY_OK || l.out_of_memory) {
        int saved = errno;

        free(l.e);
        if (l.out_of_memory)
            return cli_fail(CMD, 1, "out of memory");
        return cli_fail(CMD, 1, "cannot inspect '%s': %s%s%s", topic, ferry_strerror(err),
                        err == FERRY_ESYS ? ": " : "", err == FERRY_ESYS ? strerror(saved) : "");
    }
    if (l.count == 0) {
        free(l.e);
        return cli_fail(CMD, 1, "no such topic '%s' in domain %u", topic, (unsigned)o.where.domain);
    }
    qsort(l.e, l.count, sizeof *l.e, by_kind_then_pid);
    if (o.json)
        print_json(&l, type_source(&l));
    else
        print_text(&l, type_source(&l));
    free(l.e);
    if (fflush(stdout) != 0)
        return 1;
    return 0;
}
