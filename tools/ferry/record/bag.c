/*
 * ferry bag info: what an MCAP file holds, the way `ros2 bag info` prints it (size, duration,
 * start and end, messages, one line per topic), plus what ferry knows: profile and library,
 * chunks and their compression, per-topic bytes and the recorder's losses (the Metadata record
 * "ferry.record.stats" that `ferry record` writes), and whether the file was cut short. The file
 * is anyone's: the reader bounds what it holds (src/record/mcap.h), SIGINT and SIGTERM stop its
 * scan, and the recorder's statistics are looked up in a sorted table, so that a file of many
 * channels and statistics costs n log n, not n times m.
 */
#include "cli.h"
#include "commands.h"
#include "decode.h"
#include "mcap.h"
#include "util.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define STATS_NAME "ferry.record.stats"

/* The entries of every "ferry.record.stats" record, sorted by key (strcmp); and the channels'
 * topics, sorted. */
typedef struct stats {
    const ferry_mcap_kv **kv;
    size_t n;
    const char **topics;
    size_t ntopics;
} stats;

static void usage(FILE *to)
{
    fputs("usage: ferry bag info FILE.mcap [--json]\n"
          "Prints what FILE holds, as `ros2 bag info` does: size, duration, start, end, message\n"
          "count and one line per topic (type, count, serialisation), then the chunks and\n"
          "their compression, per-topic bytes and the samples `ferry record` lost. Exits 1\n"
          "when FILE is not a readable MCAP file, or needs more than the reader's limits\n"
          "(docs/record.md); a file cut short is read up to its last complete chunk and\n"
          "reported as truncated.\n"
          "\n"
          "options:\n"
          "  --json           print one JSON object instead\n"
          "  -h, --help       print this help\n",
          to);
}

static void human(char *out, size_t cap, uint64_t bytes)
{
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;

    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    snprintf(out, cap, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
}

static void when(char *out, size_t cap, uint64_t ns)
{
    time_t sec = (time_t)(ns / 1000000000u);
    struct tm tm;
    char date[64];

    if (localtime_r(&sec, &tm) == NULL ||
        strftime(date, sizeof date, "%b %e %Y %H:%M:%S", &tm) == 0)
        snprintf(date, sizeof date, "?");
    snprintf(out, cap, "%s.%09" PRIu64 " (%" PRIu64 ".%09" PRIu64 ")", date, ns % 1000000000u,
             ns / 1000000000u, ns % 1000000000u);
}

static int kv_order(const void *a, const void *b)
{
    return strcmp((*(const ferry_mcap_kv *const *)a)->key, (*(const ferry_mcap_kv *const *)b)->key);
}

static int str_order(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static bool stats_make(stats *st, const ferry_mcap_info *in)
{
    size_t n = 0;

    memset(st, 0, sizeof *st);
    for (size_t i = 0; i < in->nmetadata; i++)
        if (strcmp(in->metadata[i].name, STATS_NAME) == 0)
            n += in->metadata[i].n;
    st->kv = malloc((n ? n : 1) * sizeof *st->kv);
    st->topics = malloc((in->nchannels ? in->nchannels : 1) * sizeof *st->topics);
    if (st->kv == NULL || st->topics == NULL)
        return false;
    for (size_t i = 0; i < in->nmetadata; i++)
        if (strcmp(in->metadata[i].name, STATS_NAME) == 0)
            for (size_t k = 0; k < in->metadata[i].n; k++)
                st->kv[st->n++] = &in->metadata[i].kv[k];
    qsort(st->kv, st->n, sizeof *st->kv, kv_order);
    for (size_t c = 0; c < in->nchannels; c++)
        st->topics[st->ntopics++] = in->channels[c].topic;
    qsort(st->topics, st->ntopics, sizeof *st->topics, str_order);
    return true;
}

static void stats_free(stats *st)
{
    free(st->kv);
    free(st->topics);
}

/* The first entry of st whose key is key, or st->n. */
static size_t stats_find(const stats *st, const char *key)
{
    size_t lo = 0, hi = st->n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (strcmp(st->kv[mid]->key, key) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < st->n && strcmp(st->kv[lo]->key, key) == 0 ? lo : st->n;
}

/* A value of the recorder's statistics for topic, summed over its records; -1 when absent. */
static int64_t stat_of(const stats *st, const char *topic, const char *what)
{
    char key[FERRY_MCAP_NAME_MAX + 32];
    int64_t sum = -1;

    snprintf(key, sizeof key, "%s.%s", topic, what);
    for (size_t i = stats_find(st, key); i < st->n && strcmp(st->kv[i]->key, key) == 0; i++)
        sum = (sum < 0 ? 0 : sum) + strtoll(st->kv[i]->value, NULL, 10);
    return sum;
}

static const char *type_of(const ferry_mcap_reader *r, const ferry_mcap_channel *c)
{
    const ferry_mcap_schema *s = ferry_mcap_reader_schema(r, c->schema_id);

    return s != NULL ? s->name : "";
}

static void compression_of(const ferry_mcap_info *in, char *out, size_t cap)
{
    out[0] = '\0';
    for (size_t i = 0; i < in->nchunks; i++) {
        const char *c = in->chunks[i].compression[0] ? in->chunks[i].compression : "none";

        if (strstr(out, c) == NULL)
            snprintf(out + strlen(out), cap - strlen(out), "%s%s", out[0] ? ", " : "", c);
    }
    if (out[0] == '\0')
        snprintf(out, cap, "none");
}

/* The samples the recorder took but could not store: invalid ones, device tensors. */
static void print_losses(const stats *st, const char *topic)
{
    int64_t invalid = stat_of(st, topic, "invalid"), skipped = stat_of(st, topic, "skipped");

    if (invalid > 0)
        printf("  invalid %" PRId64, invalid);
    if (skipped > 0)
        printf("  skipped %" PRId64 " (device tensors)", skipped);
}

/* Topics the recorder subscribed to that have no channel: none of their samples was stored.
 * Each once, in key order. */
static void print_unrecorded(const stats *st)
{
    for (size_t i = 0; i < st->n; i++) {
        const char *key = st->kv[i]->key, *dot = strrchr(key, '.'), *t;
        char topic[FERRY_MCAP_NAME_MAX + 2];

        if (dot == NULL || strcmp(dot, ".recorded") != 0 || (size_t)(dot - key) >= sizeof topic ||
            (i > 0 && strcmp(st->kv[i - 1]->key, key) == 0))
            continue;
        snprintf(topic, sizeof topic, "%.*s", (int)(dot - key), key);
        t = topic;
        if (bsearch(&t, st->topics, st->ntopics, sizeof *st->topics, str_order) != NULL)
            continue;
        printf("Not stored:        %s  recorder dropped %" PRId64, topic,
               stat_of(st, topic, "dropped"));
        print_losses(st, topic);
        putchar('\n');
    }
}

/* The "Complete:" line's words. */
static const char *completeness(const ferry_mcap_info *in, char *buf, size_t cap)
{
    if (in->truncated)
        return "no: truncated, read up to its last complete chunk";
    if (in->has_summary)
        return "yes (summary and footer)";
    if (in->summary_ignored[0] == '\0')
        return "yes (no summary: scanned)";
    snprintf(buf, cap, "yes (summary ignored: %s; scanned)", in->summary_ignored);
    return buf;
}

static void print_text(const char *file, const ferry_mcap_reader *r, const stats *st)
{
    const ferry_mcap_info *in = ferry_mcap_reader_info(r);
    uint64_t csize = 0, usize = 0;
    char size[32], a[160], b[160], comp[32], complete[sizeof in->summary_ignored + 64];
    int wt = 0, wy = 0;

    for (size_t i = 0; i < in->nchunks; i++) {
        csize += in->chunks[i].compressed_size;
        usize += in->chunks[i].uncompressed_size;
    }
    human(size, sizeof size, in->file_size);
    compression_of(in, comp, sizeof comp);
    printf("Files:             %s\n", file);
    printf("Bag size:          %s\n", size);
    printf("Storage id:        mcap\n");
    printf("Duration:          %.9fs\n",
           in->message_count ? (double)(in->end_time - in->start_time) / 1e9 : 0.0);
    when(a, sizeof a, in->start_time);
    when(b, sizeof b, in->end_time);
    printf("Start:             %s\n", in->message_count ? a : "-");
    printf("End:               %s\n", in->message_count ? b : "-");
    printf("Messages:          %" PRIu64 "\n", in->message_count);
    for (size_t i = 0; i < in->nchannels; i++) {
        int t = (int)strlen(in->channels[i].topic), y = (int)strlen(type_of(r, &in->channels[i]));

        wt = t > wt ? t : wt;
        wy = y > wy ? y : wy;
    }
    for (size_t i = 0; i < in->nchannels; i++) {
        const ferry_mcap_channel *c = &in->channels[i];

        printf("%s Topic: %-*s | Type: %-*s | Count: %" PRIu64 " | Serialization Format: %s\n",
               i == 0 ? "Topic information:" : "                  ", wt, c->topic, wy,
               type_of(r, c), c->messages, c->message_encoding);
    }
    if (in->nchannels == 0)
        printf("Topic information:\n");
    printf("Profile:           %s\n", in->profile);
    printf("Library:           %s\n", in->library);
    human(a, sizeof a, csize);
    human(b, sizeof b, usize);
    printf("Chunks:            %" PRIu32 " (compression %s, %s of %s)\n", in->chunk_count, comp, a,
           b);
    printf("Complete:          %s\n", completeness(in, complete, sizeof complete));
    for (size_t i = 0; i < in->nchannels; i++) {
        const ferry_mcap_channel *c = &in->channels[i];
        int64_t bytes = stat_of(st, c->topic, "bytes"), dropped = stat_of(st, c->topic, "dropped");

        if (bytes < 0 && c->bytes > 0)
            bytes = (int64_t)c->bytes;
        if (bytes >= 0)
            human(a, sizeof a, (uint64_t)bytes);
        printf("%s %-*s  size %s", i == 0 ? "Per topic:        " : "                  ", wt,
               c->topic, bytes >= 0 ? a : "?");
        if (dropped >= 0)
            printf("  recorder dropped %" PRId64, dropped);
        print_losses(st, c->topic);
        putchar('\n');
    }
    print_unrecorded(st);
}

static void print_json(const char *file, const ferry_mcap_reader *r, const stats *st)
{
    const ferry_mcap_info *in = ferry_mcap_reader_info(r);
    char comp[32];

    compression_of(in, comp, sizeof comp);
    fputs("{\"file\": ", stdout);
    cli_json_string(stdout, file);
    printf(", \"size\": %" PRIu64 ", \"storage\": \"mcap\", \"profile\": ", in->file_size);
    cli_json_string(stdout, in->profile);
    fputs(", \"library\": ", stdout);
    cli_json_string(stdout, in->library);
    printf(", \"messages\": %" PRIu64 ", \"start_ns\": %" PRIu64 ", \"end_ns\": %" PRIu64
           ", \"duration_ns\": %" PRIu64 ", \"chunks\": %" PRIu32 ", \"compression\": ",
           in->message_count, in->start_time, in->end_time,
           in->message_count ? in->end_time - in->start_time : 0, in->chunk_count);
    cli_json_string(stdout, comp);
    printf(", \"truncated\": %s, \"summary\": %s, \"summary_ignored\": ",
           in->truncated ? "true" : "false", in->has_summary ? "true" : "false");
    cli_json_string(stdout, in->summary_ignored);
    fputs(", \"topics\": [", stdout);
    for (size_t i = 0; i < in->nchannels; i++) {
        const ferry_mcap_channel *c = &in->channels[i];
        int64_t bytes = stat_of(st, c->topic, "bytes"), dropped = stat_of(st, c->topic, "dropped");

        if (bytes < 0 && c->bytes > 0)
            bytes = (int64_t)c->bytes;
        fputs(i ? ", {\"topic\": " : "{\"topic\": ", stdout);
        cli_json_string(stdout, c->topic);
        fputs(", \"type\": ", stdout);
        cli_json_string(stdout, type_of(r, c));
        fputs(", \"serialization\": ", stdout);
        cli_json_string(stdout, c->message_encoding);
        fputs(", \"metadata\": {", stdout);
        for (size_t k = 0; k < c->nmetadata; k++) {
            if (k)
                fputs(", ", stdout);
            cli_json_string(stdout, c->metadata[k].key);
            fputs(": ", stdout);
            cli_json_string(stdout, c->metadata[k].value);
        }
        fputs("}", stdout);
        printf(", \"count\": %" PRIu64 ", \"bytes\": %" PRId64 ", \"dropped\": %" PRId64 "}",
               c->messages, bytes, dropped);
    }
    fputs("]}\n", stdout);
}

int ferry_cmd_bag(int argc, char **argv)
{
    static const struct option options[] = {CLI_OPT_JSON, CLI_OPT_HELP, CLI_OPT_END};
    cli_opts o;
    cli_parser p = {.cmd = "bag info", .options = options, .usage = usage, .opts = &o};
    static ferry_mcap_reader *reader;
    static stats st;
    ferry_mcap_reader_options ro;
    char why[256];
    int c;

    if (argc < 2 || strcmp(argv[1], "info") != 0) {
        if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
            usage(stdout);
            return 0;
        }
        usage(stderr);
        return 2;
    }
    argc--;
    argv++;
    cli_opts_init(&o);
    while ((c = cli_getopt(&p, argc, argv)) >= CLI_O_OWN) {
    }
    if (c == CLI_OPTS_EXIT)
        return p.status;
    if (optind + 1 != argc)
        return cli_fail("bag info", 2, optind >= argc ? "no FILE.mcap given" : "one FILE only");
    /* A file without a usable summary is scanned, every chunk decompressed: a signal stops
     * that (a file of many large chunks takes a while). */
    cli_stop_on_signals();
    memset(&ro, 0, sizeof ro);
    ro.cancel = &cli_stop_requested;
    /* reader and st are not automatic: used after a jump back from SIGBUS (cli_bus_arm). */
    if (sigsetjmp(cli_bus_jump, 1) != 0) {
        cli_bus_disarm();
        fflush(stdout);
        return cli_fail("bag info", 1, "%s: the file shrank while it was read", argv[optind]);
    }
    cli_bus_arm();
    if (ferry_mcap_reader_open_with(&reader, argv[optind], &ro, why, sizeof why) != FERRY_OK) {
        cli_bus_disarm();
        return cli_fail("bag info", 1, "%s: %s", argv[optind], why);
    }
    if (!stats_make(&st, ferry_mcap_reader_info(reader))) {
        cli_bus_disarm();
        stats_free(&st);
        ferry_mcap_reader_close(reader);
        return cli_fail("bag info", 1, "out of memory");
    }
    if (o.json)
        print_json(argv[optind], reader, &st);
    else
        print_text(argv[optind], reader, &st);
    cli_bus_disarm();
    stats_free(&st);
    ferry_mcap_reader_close(reader);
    reader = NULL;
    return 0;
}
