/*
 * `ferry bench <benchmark>`: the benchmark driver. `transport` measures one-way latency, CPU per
 * message and throughput between two processes for every transport behind bench_transport:
 * ferry, the copying baselines, the wake-up floor and, where built, iceoryx and Cyclone DDS.
 */
#include "bench.h"
#include "bench_cmd.h"
#include "cli.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#define NS_PER_S ((int64_t)1000000000)

/* Every kind of row. A ferry variant row goes next to ferry-zero-copy, e.g.
 *   {"ferry-zero-copy+spin", &bench_transport_ferry, "spin", false},
 * with transport_ferry.c reading the word in its prepare. */
const bench_entry bench_entries[] = {
    {"ferry-zero-copy", &bench_transport_ferry, "", false},
    /* Variants: sleeping at once (one CPU, FERRY_SPIN_OFF), a subscriber that polls (a core of
     * its own: measure it with --pin), the pool on huge pages (where the machine offers them). */
    {"ferry-no-spin", &bench_transport_ferry, "no-spin", false},
    {"ferry-busy-poll", &bench_transport_ferry, "busy-poll", false},
    {"ferry-huge-pages", &bench_transport_ferry, "huge", false},
    /* A subscriber in an event loop: poll(2) on its descriptor, with and without the
     * anticipation of steady streams (ferry_subscriber_wake_at/catch), and a waitset. */
    {"ferry-fd", &bench_transport_ferry, "fd", false},
    {"ferry-fd-plain", &bench_transport_ferry, "fd-plain", false},
    {"ferry-waitset", &bench_transport_ferry, "waitset", false},
#ifdef FERRY_BENCH_HAVE_ICEORYX
    {"iceoryx", &bench_transport_iceoryx, "", true},
#endif
#ifdef FERRY_BENCH_HAVE_CYCLONE
    {"cyclone-udp", &bench_transport_cyclone, "", true},
    {"cyclone-shm", &bench_transport_cyclone_shm, "", true},
#endif
    {"shm-copy", &bench_transport_shm_copy, "", false},
    {"uds-serialized", &bench_transport_uds, "", false},
    {"wakeup-floor", &bench_transport_wakeup, "", false},
    /* The polling reader's floor, beside ferry-busy-poll (measure it with --pin). */
    {"spin-floor", &bench_transport_wakeup, "spin", false},
};
const size_t bench_entry_count = sizeof bench_entries / sizeof bench_entries[0];

/* Peers of this build and of other builds, for --help. */
static const struct {
    const char *name, *summary, *missing;
    bool built;
} peers[] = {
#ifdef FERRY_BENCH_HAVE_ICEORYX
    {"iceoryx", NULL, NULL, true},
#else
    {"iceoryx", "iceoryx 2.0 C binding", "libiceoryx-binding-c-dev", false},
#endif
#ifdef FERRY_BENCH_HAVE_CYCLONE
    {"cyclone-udp", NULL, NULL, true},
#else
    {"cyclone-udp, cyclone-shm", "Cyclone DDS C API", "cyclonedds-dev, cyclonedds-tools", false},
#endif
};

static const size_t payloads[] = {64, 1048576, 2764800, 6220800};
#define PAYLOAD_COUNT (sizeof payloads / sizeof payloads[0])
#define MAX_RUNS 9
#define MAX_ENTRIES 16
_Static_assert(sizeof bench_entries / sizeof bench_entries[0] <= MAX_ENTRIES,
               "MAX_ENTRIES is too small for the entry table");

static const char *const mode_names[BENCH_MODE_COUNT] = {"paced", "flat", "flood"};
static const char *const touch_names[BENCH_TOUCH_COUNT] = {"none", "page", "full", "camera"};

static const char *entry_name(const bench_row *r)
{
    return bench_entries[r->entry].name;
}

static int entry_index(const char *name)
{
    for (size_t i = 0; i < bench_entry_count; i++)
        if (strcmp(bench_entries[i].name, name) == 0)
            return (int)i;
    return -1;
}

/* ---------------------------------------------------------------------------------------------
 * Output
 * ------------------------------------------------------------------------------------------- */

static void print_header(bool runs)
{
    printf("%s%-15s %8s %-5s %-5s %3s %8s %8s %8s %8s %8s %8s %8s %8s %8s %11s %8s\n",
           runs ? "run " : "", "transport", "payload", "mode", "touch", "pin", "messages", "p50 us",
           "p99 us", "p99.9 us", "max us", "pub call", "pub cpu", "sub call", "sub cpu", "msgs/s",
           "dropped");
}

/* A call-CPU figure, "-" where it was not measured (flat out). */
static void fmt_call(char *buf, size_t cap, double us)
{
    if (us < 0)
        snprintf(buf, cap, "-");
    else
        snprintf(buf, cap, "%.2f", us);
}

static void print_row(const bench_row *r, bool runs)
{
    if (runs)
        printf("%3u ", r->run + 1);
    printf("%-15s %8zu %-5s %-5s %3s ", entry_name(r), r->payload, mode_names[r->mode],
           touch_names[r->touch], r->pinned ? "yes" : "no");
    if (!r->ok) {
        printf("%8s\n", "error");
        return;
    }
    char pc[16], sc[16];
    fmt_call(pc, sizeof pc, r->pub_call_us);
    fmt_call(sc, sizeof sc, r->sub_call_us);
    printf("%8llu %8.1f %8.1f %8.1f %8.1f %8s %8.2f %8s %8.2f %11.0f %8llu\n",
           (unsigned long long)r->messages, r->p50_us, r->p99_us, r->p999_us, r->max_us, pc,
           r->pub_cpu_us, sc, r->sub_cpu_us, r->msgs_per_s, (unsigned long long)r->dropped);
}

static int write_csv(const char *path, const bench_row *rows, size_t n)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return cli_fail("bench", 1, "cannot write %s: %s", path, strerror(errno));
    fputs("run,transport,payload_bytes,mode,touch,pinned,messages,p50_us,p99_us,p999_us,max_us,"
          "pub_call_us,pub_cpu_us,sub_call_us,sub_cpu_us,msgs_per_s,dropped\n",
          f);
    for (size_t i = 0; i < n; i++) {
        const bench_row *r = &rows[i];
        if (!r->ok)
            continue;
        char pc[16] = "", sc[16] = "";
        if (r->pub_call_us >= 0)
            snprintf(pc, sizeof pc, "%.3f", r->pub_call_us);
        if (r->sub_call_us >= 0)
            snprintf(sc, sizeof sc, "%.3f", r->sub_call_us);
        fprintf(f, "%u,%s,%zu,%s,%s,%d,%llu,%.3f,%.3f,%.3f,%.3f,%s,%.3f,%s,%.3f,%.0f,%llu\n",
                r->run + 1, entry_name(r), r->payload, mode_names[r->mode], touch_names[r->touch],
                r->pinned ? 1 : 0, (unsigned long long)r->messages, r->p50_us, r->p99_us,
                r->p999_us, r->max_us, pc, r->pub_cpu_us, sc, r->sub_cpu_us, r->msgs_per_s,
                (unsigned long long)r->dropped);
    }
    if (fclose(f) != 0)
        return cli_fail("bench", 1, "cannot write %s: %s", path, strerror(errno));
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Medians over the runs of one cell (entry, payload, mode, touch)
 * ------------------------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median_of(double *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

/* The cell's median row in *out; false when no run of it was measured. */
static bool median_row(const bench_row *rows, size_t n, int entry, size_t payload, int mode,
                       bench_touch touch, bench_row *out)
{
    const bench_row *got[MAX_RUNS];
    size_t k = 0;
    for (size_t i = 0; i < n && k < MAX_RUNS; i++) {
        const bench_row *r = &rows[i];
        if (r->ok && (int)r->entry == entry && r->payload == payload && r->mode == mode &&
            r->touch == touch)
            got[k++] = r;
    }
    if (k == 0)
        return false;
    *out = *got[0];
    double v[MAX_RUNS];
#define MEDIAN(field)                                                                              \
    do {                                                                                           \
        for (size_t j = 0; j < k; j++)                                                             \
            v[j] = (double)got[j]->field;                                                          \
        out->field = median_of(v, k);                                                              \
    } while (0)
    MEDIAN(p50_us);
    MEDIAN(p99_us);
    MEDIAN(p999_us);
    MEDIAN(max_us);
    MEDIAN(pub_call_us);
    MEDIAN(sub_call_us);
    MEDIAN(pub_cpu_us);
    MEDIAN(sub_cpu_us);
    MEDIAN(msgs_per_s);
    /* Counts: the worst run, so that a lossless row that dropped once shows it. */
    for (size_t j = 0; j < k; j++) {
        if (got[j]->dropped > out->dropped)
            out->dropped = got[j]->dropped;
        if (got[j]->messages < out->messages)
            out->messages = got[j]->messages;
    }
#undef MEDIAN
    return true;
}

typedef struct summary {
    const bench_row *rows;
    size_t n;
    bench_touch touch;
} summary;

static bool cell(const summary *s, const char *name, size_t payload, int mode, bench_row *out)
{
    int e = entry_index(name);
    return e >= 0 && median_row(s->rows, s->n, e, payload, mode, s->touch, out);
}

static void fmt_ratio(char *buf, size_t cap, bool have, double a, double b)
{
    if (have && b > 0)
        snprintf(buf, cap, "%.2fx", a / b);
    else
        snprintf(buf, cap, "-");
}

/* The comparison: per payload, every transport's paced latency and CPU, flat drop-oldest and
 * lossless flood rates, then ferry over iceoryx. */
static void print_summary(const summary *s, uint32_t runs)
{
    printf("\nsummary (touch %s; %s of %u run%s): paced 30 Hz latency us, CPU us per message "
           "(call = the transport's calls, cpu = whole process), flat drop-oldest and lossless "
           "flood msgs/s\n",
           touch_names[s->touch], runs > 1 ? "medians" : "one", runs, runs > 1 ? "s" : "");
    printf("%8s %-15s %8s %8s %8s %8s %8s %8s %8s %11s %8s %11s %8s\n", "payload", "transport",
           "p50", "p99", "p99.9", "pub call", "pub cpu", "sub call", "sub cpu", "flat msgs/s",
           "dropped", "flood msg/s", "dropped");
    for (size_t pi = 0; pi < PAYLOAD_COUNT; pi++) {
        bool any = false;
        for (size_t e = 0; e < bench_entry_count; e++) {
            bench_row pc, fl, fd;
            bool hp = cell(s, bench_entries[e].name, payloads[pi], BENCH_MODE_PACED, &pc);
            bool hf = cell(s, bench_entries[e].name, payloads[pi], BENCH_MODE_FLAT, &fl);
            bool hd = cell(s, bench_entries[e].name, payloads[pi], BENCH_MODE_FLOOD, &fd);
            if (!hp && !hf && !hd)
                continue;
            any = true;
            printf("%8zu %-15s ", payloads[pi], bench_entries[e].name);
            if (hp)
                printf("%8.1f %8.1f %8.1f %8.2f %8.2f %8.2f %8.2f ", pc.p50_us, pc.p99_us,
                       pc.p999_us, pc.pub_call_us, pc.pub_cpu_us, pc.sub_call_us, pc.sub_cpu_us);
            else
                printf("%8s %8s %8s %8s %8s %8s %8s ", "-", "-", "-", "-", "-", "-", "-");
            if (hf)
                printf("%11.0f %8llu ", fl.msgs_per_s, (unsigned long long)fl.dropped);
            else
                printf("%11s %8s ", "-", "-");
            if (hd)
                printf("%11.0f %8llu\n", fd.msgs_per_s, (unsigned long long)fd.dropped);
            else
                printf("%11s %8s\n", "-", "-");
        }
        bench_row a, b, fa, fb, da, db;
        bool hp = cell(s, "ferry-zero-copy", payloads[pi], BENCH_MODE_PACED, &a) &&
                  cell(s, "iceoryx", payloads[pi], BENCH_MODE_PACED, &b);
        bool hf = cell(s, "ferry-zero-copy", payloads[pi], BENCH_MODE_FLAT, &fa) &&
                  cell(s, "iceoryx", payloads[pi], BENCH_MODE_FLAT, &fb);
        bool hd = cell(s, "ferry-zero-copy", payloads[pi], BENCH_MODE_FLOOD, &da) &&
                  cell(s, "iceoryx", payloads[pi], BENCH_MODE_FLOOD, &db);
        if (any && (hp || hf || hd)) {
            char r[9][16];
            fmt_ratio(r[0], sizeof r[0], hp, a.p50_us, b.p50_us);
            fmt_ratio(r[1], sizeof r[1], hp, a.p99_us, b.p99_us);
            fmt_ratio(r[2], sizeof r[2], hp, a.p999_us, b.p999_us);
            fmt_ratio(r[3], sizeof r[3], hp, a.pub_call_us, b.pub_call_us);
            fmt_ratio(r[4], sizeof r[4], hp, a.pub_cpu_us, b.pub_cpu_us);
            fmt_ratio(r[5], sizeof r[5], hp, a.sub_call_us, b.sub_call_us);
            fmt_ratio(r[6], sizeof r[6], hp, a.sub_cpu_us, b.sub_cpu_us);
            fmt_ratio(r[7], sizeof r[7], hf, fa.msgs_per_s, fb.msgs_per_s);
            fmt_ratio(r[8], sizeof r[8], hd, da.msgs_per_s, db.msgs_per_s);
            printf("%8zu %-15s %8s %8s %8s %8s %8s %8s %8s %11s %8s %11s\n", payloads[pi],
                   "ferry/iceoryx", r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], "", r[8]);
        }
    }
}

/* ---------------------------------------------------------------------------------------------
 * Target checks, on the medians of the summary's touch
 * ------------------------------------------------------------------------------------------- */

static void verdict(bool have, bool pass, const char *what)
{
    printf("  [%s] %s\n", !have ? "n/a " : pass ? "pass" : "miss", what);
}

/* Worst ratio a/b over the payloads for field f of mode; text lists each. */
static bool worst_ratio(const summary *s, const char *na, const char *nb, int mode, size_t offset,
                        bool sum_sides, double *worst, char *text, size_t cap)
{
    bool have = true;
    int len = 0;
    *worst = 0.0;
    text[0] = '\0';
    for (size_t i = 0; i < PAYLOAD_COUNT; i++) {
        bench_row a, b;
        if (!cell(s, na, payloads[i], mode, &a) || !cell(s, nb, payloads[i], mode, &b)) {
            have = false;
            continue;
        }
        double va = *(const double *)((const char *)&a + offset);
        double vb = *(const double *)((const char *)&b + offset);
        if (sum_sides) {
            va = a.pub_cpu_us + a.sub_cpu_us;
            vb = b.pub_cpu_us + b.sub_cpu_us;
        }
        if (vb <= 0) {
            have = false;
            continue;
        }
        double ratio = va / vb;
        if (ratio > *worst)
            *worst = ratio;
        if (len >= 0 && (size_t)len < cap)
            len += snprintf(text + len, cap - (size_t)len, "%s%zu B %.2fx", len ? ", " : "",
                            payloads[i], ratio);
    }
    return have;
}

static void print_checks(const summary *s)
{
    char text[512], line[800];
    double worst;
    bench_row a, b;
    printf("\ntarget checks (informational; touch %s, medians):\n", touch_names[s->touch]);

    bool have = worst_ratio(s, "ferry-zero-copy", "wakeup-floor", BENCH_MODE_PACED,
                            offsetof(bench_row, p50_us), false, &worst, text, sizeof text);
    snprintf(line, sizeof line,
             "zero-copy p50 at 30 Hz within 1.5x of wakeup-floor p50 (worst %.2fx: %s)", worst,
             text);
    verdict(have, worst <= 1.5, line);

    have = true;
    worst = 0.0;
    int len = 0;
    for (size_t i = 0; i < PAYLOAD_COUNT; i++) {
        if (!cell(s, "ferry-zero-copy", payloads[i], BENCH_MODE_PACED, &a) || a.p50_us <= 0) {
            have = false;
            continue;
        }
        double ratio = a.p99_us / a.p50_us;
        if (ratio > worst)
            worst = ratio;
        if (len >= 0 && (size_t)len < sizeof text)
            len += snprintf(text + len, sizeof text - (size_t)len, "%s%zu B %.2fx", len ? ", " : "",
                            payloads[i], ratio);
    }
    snprintf(line, sizeof line, "zero-copy p99 within 2x of its p50 at 30 Hz (worst %.2fx: %s)",
             worst, text);
    verdict(have, worst <= 2.0, line);

    bench_row small, big, uds, shm;
    bool hs = cell(s, "ferry-zero-copy", 64, BENCH_MODE_PACED, &small);
    bool hb = cell(s, "ferry-zero-copy", 6220800, BENCH_MODE_PACED, &big);
    bool hu = cell(s, "uds-serialized", 6220800, BENCH_MODE_PACED, &uds);
    bool hm = cell(s, "shm-copy", 6220800, BENCH_MODE_PACED, &shm);
    bool ok2 = hs && hb && small.p50_us > 0;
    snprintf(line, sizeof line,
             "zero-copy p50 at 6,220,800 B within 1.5x of its p50 at 64 B (%.1f us vs %.1f us)",
             hb ? big.p50_us : 0.0, hs ? small.p50_us : 0.0);
    verdict(ok2, ok2 && big.p50_us <= 1.5 * small.p50_us, line);

    ok2 = hb && hu && big.p50_us > 0;
    double f = ok2 ? uds.p50_us / big.p50_us : 0.0;
    snprintf(line, sizeof line,
             "at 6,220,800 B zero-copy p50 >= 100x below uds-serialized (%.0fx: %.1f us vs %.1f "
             "us)",
             f, hb ? big.p50_us : 0.0, hu ? uds.p50_us : 0.0);
    verdict(ok2, f >= 100.0, line);

    ok2 = hb && hm && big.p50_us > 0;
    f = ok2 ? shm.p50_us / big.p50_us : 0.0;
    snprintf(line, sizeof line,
             "at 6,220,800 B zero-copy p50 >= 20x below shm-copy (%.0fx: %.1f us vs %.1f us)", f,
             hb ? big.p50_us : 0.0, hm ? shm.p50_us : 0.0);
    verdict(ok2, f >= 20.0, line);

    /* Whole-process CPU of both sides divided by messages, flat out (nobody sleeps). */
    bench_row flat;
    bool hf = cell(s, "ferry-zero-copy", 64, BENCH_MODE_FLAT, &flat);
    double cpu = hf ? flat.pub_cpu_us + flat.sub_cpu_us : 0.0;
    snprintf(line, sizeof line,
             "publish+take+release CPU under 5 us per message (flat 64 B, whole processes: %.2f "
             "+ %.2f = %.2f us; paced 64 B: %.2f + %.2f us)",
             hf ? flat.pub_cpu_us : 0.0, hf ? flat.sub_cpu_us : 0.0, cpu,
             hs ? small.pub_cpu_us : 0.0, hs ? small.sub_cpu_us : 0.0);
    verdict(hf, cpu < 5.0, line);

    snprintf(line, sizeof line, "flat out at 64 B >= 1,000,000 msgs/s (%.0f msgs/s, %llu dropped)",
             hf ? flat.msgs_per_s : 0.0, hf ? (unsigned long long)flat.dropped : 0ULL);
    verdict(hf, hf && flat.msgs_per_s >= 1e6, line);

    /* Against iceoryx, in the same run. */
    have = cell(s, "ferry-zero-copy", 64, BENCH_MODE_FLOOD, &a) &&
           cell(s, "iceoryx", 64, BENCH_MODE_FLOOD, &b) && b.msgs_per_s > 0;
    snprintf(line, sizeof line,
             "lossless flood at 64 B, depth 8: >= 1.5x iceoryx's rate (%.2fx: %.0f vs %.0f "
             "msgs/s, %llu dropped)",
             have ? a.msgs_per_s / b.msgs_per_s : 0.0, have ? a.msgs_per_s : 0.0,
             have ? b.msgs_per_s : 0.0, have ? (unsigned long long)a.dropped : 0ULL);
    verdict(have, have && a.msgs_per_s >= 1.5 * b.msgs_per_s && a.dropped == 0, line);

    have = worst_ratio(s, "ferry-zero-copy", "iceoryx", BENCH_MODE_PACED, 0, true, &worst, text,
                       sizeof text);
    snprintf(line, sizeof line,
             "CPU per message (publisher + subscriber, whole processes, 30 Hz) <= iceoryx "
             "(worst %.2fx: %s)",
             worst, text);
    verdict(have, worst <= 1.0, line);

    bool h720 = cell(s, "ferry-zero-copy", 2764800, BENCH_MODE_PACED, &a) &&
                cell(s, "iceoryx", 2764800, BENCH_MODE_PACED, &b) && b.p50_us > 0;
    double r720 = h720 ? a.p50_us / b.p50_us : 0.0;
    bench_row c, d;
    bool h1080 = cell(s, "ferry-zero-copy", 6220800, BENCH_MODE_PACED, &c) &&
                 cell(s, "iceoryx", 6220800, BENCH_MODE_PACED, &d) && d.p50_us > 0;
    double r1080 = h1080 ? c.p50_us / d.p50_us : 0.0;
    snprintf(line, sizeof line,
             "paced p50 at 2,764,800 B and 6,220,800 B <= 0.8x iceoryx (%.2fx: %.1f vs %.1f us; "
             "%.2fx: %.1f vs %.1f us)",
             r720, h720 ? a.p50_us : 0.0, h720 ? b.p50_us : 0.0, r1080, h1080 ? c.p50_us : 0.0,
             h1080 ? d.p50_us : 0.0);
    verdict(h720 && h1080, r720 <= 0.8 && r1080 <= 0.8, line);
}

static void print_machine(void)
{
    char model[256] = "unknown CPU";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f)) {
            char *colon = strchr(line, ':');
            if (strncmp(line, "model name", 10) == 0 && colon) {
                snprintf(model, sizeof model, "%s", colon + 2);
                model[strcspn(model, "\n")] = '\0';
                break;
            }
        }
        fclose(f);
    }
    struct utsname u;
    if (uname(&u) != 0)
        snprintf(u.release, sizeof u.release, "?");
    printf("machine: %ld CPUs, %s, Linux %s\n", sysconf(_SC_NPROCESSORS_ONLN), model, u.release);
}

/* ---------------------------------------------------------------------------------------------
 * Commands
 * ------------------------------------------------------------------------------------------- */

static void transport_usage(FILE *to)
{
    fputs("usage: ferry bench transport [--quick] [--csv FILE] [--transport NAME] [--mode M]\n"
          "                             [--touch T] [--pin] [--peers | --no-peers] [--runs N]\n"
          "                             [--messages N]\n"
          "\n"
          "One-way latency, CPU per message and throughput between two processes, for payloads\n"
          "of 64 B, 1 MiB, 2,764,800 B and 6,220,800 B: paced at 30 Hz, flat out with\n"
          "drop-oldest queues, and flooded losslessly at depth 8.\n"
          "  --quick           fewer messages, no peers unless --peers and no ferry variants\n"
          "                    (well under 30 s)\n"
          "  --csv FILE        also write the results as CSV\n"
          "  --transport NAME  only this transport (repeatable)\n"
          "  --mode M          only paced, flat or flood (repeatable)\n"
          "  --touch T         what of each frame is written and read: none (the header only),\n"
          "                    page (a byte per 4 KiB page; the default), full (every byte;\n"
          "                    the subscriber sums it) or camera (every byte written, a byte\n"
          "                    per page read: a camera and a consumer); repeatable\n"
          "  --pin             publisher and subscriber on two different CPUs\n"
          "  --peers           include iceoryx and Cyclone DDS (the default of a full run\n"
          "                    without --transport); --no-peers leaves them out\n"
          "  --runs N          every row N times, in alternating rounds; the summary and the\n"
          "                    checks use the medians (1 to 9, default 1)\n"
          "  --messages N      measured messages per paced row (default 300, --quick 20)\n"
          "transports:\n",
          to);
    for (size_t i = 0; i < bench_entry_count; i++) {
        const bench_entry *e = &bench_entries[i];
        const char *why = e->t->available ? e->t->available() : NULL;
        fprintf(to, "  %-16s %s%s%s%s%s\n", e->name, e->t->summary, e->variant[0] ? " [" : "",
                e->variant, e->variant[0] ? "]" : "", why ? " (cannot run here: " : "");
        if (why)
            fprintf(to, "  %-16s   %s)\n", "", why);
    }
    for (size_t i = 0; i < sizeof peers / sizeof peers[0]; i++)
        if (!peers[i].built)
            fprintf(to, "  %-16s %s: not built (needs %s when ferry is built)\n", peers[i].name,
                    peers[i].summary, peers[i].missing);
}

static int parse_choice(const char *arg, const char *const *names, int count)
{
    for (int i = 0; i < count; i++)
        if (strcmp(arg, names[i]) == 0)
            return i;
    return -1;
}

/* The first two CPUs this process may run on; false when there are fewer. */
static bool two_cpus(int cpus[2])
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return false;
    int k = 0;
    for (int i = 0; i < CPU_SETSIZE && k < 2; i++)
        if (CPU_ISSET(i, &set))
            cpus[k++] = i;
    return k == 2;
}

static int bench_transport_cmd(int argc, char **argv)
{
    enum {
        O_TRANSPORT = CLI_O_OWN,
        O_MODE,
        O_TOUCH,
        O_PIN,
        O_PEERS,
        O_NO_PEERS,
        O_RUNS,
        O_MESSAGES
    };
    static const struct option options[] = {
        CLI_OPT_QUICK,
        CLI_OPT_CSV,
        {"transport", required_argument, NULL, O_TRANSPORT},
        {"mode", required_argument, NULL, O_MODE},
        {"touch", required_argument, NULL, O_TOUCH},
        {"pin", no_argument, NULL, O_PIN},
        {"peers", no_argument, NULL, O_PEERS},
        {"no-peers", no_argument, NULL, O_NO_PEERS},
        {"runs", required_argument, NULL, O_RUNS},
        {"messages", required_argument, NULL, O_MESSAGES},
        CLI_OPT_HELP,
        CLI_OPT_END,
    };
    cli_opts o;
    cli_parser p = {
        .cmd = "bench transport", .options = options, .usage = transport_usage, .opts = &o};
    bool want_t[MAX_ENTRIES] = {false};
    bool want_m[BENCH_MODE_COUNT] = {false};
    bool want_touch[BENCH_TOUCH_COUNT] = {false};
    bool any_t = false, any_m = false, any_touch = false, pin = false;
    int peers_opt = -1; /* -1: the default, 0: --no-peers, 1: --peers */
    long runs = 1, messages = 0;
    int c;
    cli_opts_init(&o);
    while ((c = cli_getopt(&p, argc, argv)) >= CLI_O_OWN) {
        char *end;
        switch (c) {
        case O_TRANSPORT: {
            int k = entry_index(optarg);
            if (k < 0)
                return cli_fail("bench", 2,
                                "unknown transport '%s' (see 'ferry bench transport "
                                "--help')",
                                optarg);
            want_t[k] = any_t = true;
            break;
        }
        case O_MODE: {
            int m = parse_choice(optarg, mode_names, BENCH_MODE_COUNT);
            if (m < 0)
                return cli_fail("bench", 2, "unknown mode '%s' (paced, flat or flood)", optarg);
            want_m[m] = any_m = true;
            break;
        }
        case O_TOUCH: {
            int t = parse_choice(optarg, touch_names, BENCH_TOUCH_COUNT);
            if (t < 0)
                return cli_fail("bench", 2, "unknown touch '%s' (none, page, full or camera)",
                                optarg);
            want_touch[t] = any_touch = true;
            break;
        }
        case O_PIN:
            pin = true;
            break;
        case O_PEERS:
            peers_opt = 1;
            break;
        case O_NO_PEERS:
            peers_opt = 0;
            break;
        case O_RUNS:
            runs = strtol(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0' || runs < 1 || runs > MAX_RUNS)
                return cli_fail("bench", 2, "--runs %s is out of range: 1..%d", optarg, MAX_RUNS);
            break;
        case O_MESSAGES:
            messages = strtol(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0' || messages < 2 || messages > 100000)
                return cli_fail("bench", 2, "--messages %s is out of range: 2..100000", optarg);
            break;
        }
    }
    if (c == CLI_OPTS_EXIT)
        return p.status;
    if (optind < argc)
        return cli_fail("bench transport", 2,
                        "unexpected argument '%s' (try 'ferry bench "
                        "transport --help')",
                        argv[optind]);
    if (!any_touch)
        want_touch[BENCH_TOUCH_PAGE] = true;
    bool with_peers = peers_opt == 1 || (peers_opt < 0 && !any_t && !o.quick);

    bench_plan plan = {.paced_count = messages  ? (uint32_t)messages
                                      : o.quick ? 20
                                                : 300,
                       .flat_ns = o.quick ? NS_PER_S / 4 : 2 * NS_PER_S,
                       .max_payload = payloads[PAYLOAD_COUNT - 1]};
    if (pin && !two_cpus(plan.cpus))
        fprintf(stderr, "ferry bench: --pin needs two CPUs this process may use; running "
                        "unpinned\n");
    else
        plan.pin = pin;

    /* Which entries run: the selection, and the peers that can run here. */
    bool run_e[MAX_ENTRIES] = {false};
    for (size_t i = 0; i < bench_entry_count && i < MAX_ENTRIES; i++) {
        const bench_entry *e = &bench_entries[i];
        /* Variant rows are for a full run, or asked for by name: --quick is a smoke test. */
        run_e[i] =
            any_t ? want_t[i] : (!e->peer || with_peers) && !(o.quick && e->variant[0] != '\0');
        const char *why = run_e[i] && e->t->available ? e->t->available() : NULL;
        if (why) {
            fprintf(stderr, "ferry bench: %s is left out: %s\n", e->name, why);
            run_e[i] = false;
        }
    }

    char dir[256];
    if (!cli_private_dir("ferry-bench-", dir, sizeof dir))
        return 1;
    plan.dir = dir;

    print_machine();
    printf("paced: %d Hz, %u messages per row, drop-oldest depth %u; flat: as fast as possible "
           "for %.2f s per row, drop-oldest depth %u (%u at 64 B); flood: the same, lossless at "
           "depth %u; %s\n",
           BENCH_PACED_HZ, plan.paced_count, BENCH_DEPTH, (double)plan.flat_ns / NS_PER_S,
           BENCH_DEPTH, BENCH_DEPTH_FLAT_SMALL, BENCH_DEPTH_FLOOD,
           plan.pin ? "pinned to two CPUs" : "unpinned");
    printf("call = CPU of the transport's calls per message; cpu = whole-process CPU "
           "(getrusage) per message\n\n");
    print_header(runs > 1);
    fflush(stdout);

    size_t cap =
        (size_t)runs * BENCH_MODE_COUNT * BENCH_TOUCH_COUNT * PAYLOAD_COUNT * bench_entry_count;
    bench_row *rows = calloc(cap, sizeof *rows);
    if (!rows) {
        cli_rmtree(dir);
        return cli_fail("bench", 1, "out of memory");
    }
    size_t n = 0;
    int status = 0;
    for (long run = 0; run < runs; run++)
        for (int mode = 0; mode < BENCH_MODE_COUNT; mode++) {
            if (any_m && !want_m[mode])
                continue;
            for (int touch = 0; touch < BENCH_TOUCH_COUNT; touch++) {
                if (!want_touch[touch])
                    continue;
                for (size_t pi = 0; pi < PAYLOAD_COUNT; pi++)
                    for (size_t e = 0; e < bench_entry_count; e++) {
                        if (!run_e[e])
                            continue;
                        /* Flood is lossless: only transports that can be. */
                        if (mode == BENCH_MODE_FLOOD &&
                            !(bench_entries[e].t->caps & BENCH_CAP_LOSSLESS))
                            continue;
                        bench_row *r = &rows[n++];
                        bench_run_row(&plan, (uint32_t)e, payloads[pi], mode, (bench_touch)touch,
                                      r);
                        r->run = (uint32_t)run;
                        if (!r->ok)
                            status = 1;
                        print_row(r, runs > 1);
                        fflush(stdout);
                    }
            }
        }
    bench_run_finish();
    if (cli_rmtree(dir) != 0)
        fprintf(stderr, "ferry bench: could not remove %s\n", dir);
    /* The summary and the checks use the page-touched rows, else the first touch asked for. */
    summary s = {.rows = rows, .n = n, .touch = BENCH_TOUCH_PAGE};
    for (int t = BENCH_TOUCH_COUNT - 1; t >= 0 && !want_touch[BENCH_TOUCH_PAGE]; t--)
        if (want_touch[t])
            s.touch = (bench_touch)t;
    print_summary(&s, (uint32_t)runs);
    print_checks(&s);
    if (o.csv && write_csv(o.csv, rows, n) != 0)
        status = 1;
    free(rows);
    return status;
}

int ferry_cmd_bench(int argc, char **argv)
{
    static const char usage[] =
        "usage: ferry bench <benchmark> [options]\n"
        "benchmarks:\n"
        "  transport   one-way latency, CPU and throughput: ferry vs iceoryx, Cyclone DDS, copies\n"
        "  gpu         device buffer cache vs CUDA allocators, host frames into the GPU\n"
        "  bridge      ferry frames through DDS bridges across a veth pair vs plain DDS\n";
    if (argc < 2) {
        fputs(usage, stderr);
        return 2;
    }
    const char *which = argv[1];
    if (strcmp(which, "--help") == 0 || strcmp(which, "-h") == 0) {
        fputs(usage, stdout);
        return 0;
    }
    if (strcmp(which, "transport") == 0)
        return bench_transport_cmd(argc - 1, argv + 1);
    if (strcmp(which, "gpu") == 0) {
#ifdef FERRY_HAVE_GPU
        return bench_gpu_cmd(argc - 1, argv + 1);
#else
        return cli_fail("bench", 1, "this ferry was built without the CUDA module");
#endif
    }
    if (strcmp(which, "bridge") == 0) {
#ifdef FERRY_HAVE_BRIDGE
        return bench_bridge_cmd(argc - 1, argv + 1);
#else
        return cli_fail("bench", 2, "this ferry was built without the DDS bridge");
#endif
    }
    return cli_fail("bench", 2, "unknown benchmark '%s' (known: transport, gpu, bridge)", which);
}
