/*
 * `ferry bench gpu`: options, a private domain directory, then each part in order (gpu_bench.h,
 * xproc.h). With --csv FILE the adapter rows go to FILE, the one-process adapter matrix's to FILE
 * with "-matrix" before its extension (gpu.csv -> gpu-matrix.csv), the ingest rows with
 * "-ingest" and the cross-process rows with "-xproc"; each part writes its header line into an
 * empty file.
 */
#include "gpu_bench.h"
#include "xproc.h"

#include "bench.h"
#include "cli.h"
#include <ferry/gpu.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: ferry bench gpu [--quick] [--csv FILE] [--device N] [--seconds S]\n"
    "                       [--part adapter|adapter-matrix|ingest|xproc|all]\n"
    "  adapter  3 cameras x 1280x720 RGB8 at 30 fps -> 3 adapter processes -> device buffer ->\n"
    "           kernel, sustained (--seconds, default 20): cudaMalloc, cudaMallocAsync (release\n"
    "           threshold 0 and max) and ferry's cache, and with two readers per frame on other\n"
    "           streams (2 ms and 40 ms)\n"
    "  adapter-matrix  the same in one process: synced and pipelined, 30 fps and flat out,\n"
    "           against a preallocated floor\n"
    "  ingest   a taken host frame into the GPU: pageable, registered and mapped\n"
    "  xproc    device frames across processes against the copy path\n"
    "  --quick  seconds per row instead of tens (under a minute per part)\n"
    "  --csv    adapter rows to FILE, ingest and xproc rows to FILE with -ingest or -xproc\n"
    "           before the extension\n";

static void usage(FILE *to)
{
    fputs(usage_text, to);
}

/* "dir/gpu.csv" -> "dir/gpu-ingest.csv"; "gpu" -> "gpu-ingest". */
static bool part_path(const char *file, const char *suffix, char *out, size_t cap)
{
    const char *slash = strrchr(file, '/');
    const char *dot = strrchr(file, '.');
    if (dot && ((slash && dot < slash) || dot == (slash ? slash + 1 : file)))
        dot = NULL; /* a dot in a directory name, or a hidden file's leading dot */
    size_t stem = dot ? (size_t)(dot - file) : strlen(file);
    int n = snprintf(out, cap, "%.*s%s%s", (int)stem, file, suffix, dot ? dot : "");
    return n > 0 && (size_t)n < cap;
}

static int run_part(int (*fn)(const bench_gpu_args *), bench_gpu_args *a, const char *csv_path)
{
    FILE *f = NULL;
    if (csv_path) {
        f = fopen(csv_path, "w");
        if (!f)
            return cli_fail("bench gpu", 1, "cannot write %s: %s", csv_path, strerror(errno));
    }
    a->csv = f;
    int rc = fn(a);
    a->csv = NULL;
    if (f && fclose(f) != 0)
        rc = cli_fail("bench gpu", 1, "writing %s: %s", csv_path, strerror(errno));
    fflush(stdout);
    return rc;
}

int bench_gpu_cmd(int argc, char **argv)
{
    /* The cross-process part's reader: this program exec'd again (not listed in the usage). */
    if (argc >= 2 && strcmp(argv[1], "--xproc-reader") == 0)
        return bench_gpu_xproc_reader(argc - 1, argv + 1);
    /* The sustained adapter's processes, the same way. */
    if (argc >= 2 && strcmp(argv[1], "--adapter-proc") == 0)
        return bench_gpu_adapter_proc(argc - 1, argv + 1);
    enum { O_DEVICE = CLI_O_OWN, O_PART, O_SECONDS };
    static const struct option options[] = {
        CLI_OPT_QUICK,
        CLI_OPT_CSV,
        {"device", required_argument, NULL, O_DEVICE},
        {"part", required_argument, NULL, O_PART},
        {"seconds", required_argument, NULL, O_SECONDS},
        CLI_OPT_HELP,
        CLI_OPT_END,
    };
    bench_gpu_args a = {.quick = false, .device = 0, .csv = NULL, .dir = NULL, .seconds = 0};
    const char *part = "all";
    cli_opts o;
    cli_parser p = {.cmd = "bench gpu", .options = options, .usage = usage, .opts = &o};
    int c;
    cli_opts_init(&o);
    while ((c = cli_getopt(&p, argc, argv)) >= CLI_O_OWN) {
        switch (c) {
        case O_DEVICE: {
            uint64_t d;
            if (!cli_parse_whole("bench gpu", &cli_ranges[CLI_R_GPU_DEVICE], optarg, &d))
                return 2;
            a.device = (int)d;
            break;
        }
        case O_SECONDS: {
            uint64_t secs;
            if (!cli_parse_whole("bench gpu", &cli_ranges[CLI_R_DEMO_SECONDS], optarg, &secs))
                return 2;
            a.seconds = (int)secs;
            break;
        }
        case O_PART:
            part = optarg;
            if (strcmp(part, "adapter") != 0 && strcmp(part, "adapter-matrix") != 0 &&
                strcmp(part, "ingest") != 0 && strcmp(part, "xproc") != 0 &&
                strcmp(part, "all") != 0)
                return cli_fail("bench gpu", 2,
                                "--part: unknown part '%s' (adapter, adapter-matrix, ingest, "
                                "xproc, all)",
                                part);
            break;
        }
    }
    if (c == CLI_OPTS_EXIT)
        return p.status;
    if (optind < argc)
        return cli_fail("bench gpu", 2, "unexpected argument '%s' (try 'ferry bench gpu --help')",
                        argv[optind]);
    a.quick = o.quick;

    int count = 0;
    ferry_err err = ferry_gpu_device_count(&count);
    if (err)
        return cli_fail("bench gpu", 1, "no CUDA device: %s", ferry_strerror(err));
    if (a.device >= count)
        return cli_fail("bench gpu", 2, "no device %d (%d found)", a.device, count);

    char matrix_csv[4096], ingest_csv[4096], xproc_csv[4096];
    if (o.csv && (!part_path(o.csv, "-matrix", matrix_csv, sizeof matrix_csv) ||
                  !part_path(o.csv, "-ingest", ingest_csv, sizeof ingest_csv) ||
                  !part_path(o.csv, "-xproc", xproc_csv, sizeof xproc_csv)))
        return cli_fail("bench gpu", 2, "csv path too long");
    char dir[256];
    if (!cli_private_dir("ferry-bench-gpu-", dir, sizeof dir))
        return 1;
    a.dir = dir;

    int rc = 0;
    bool all = strcmp(part, "all") == 0;
    if (all || strcmp(part, "adapter") == 0) {
        printf("== adapter ==\n");
        rc |= run_part(bench_gpu_adapter_sustained, &a, o.csv) != 0;
    }
    if (all || strcmp(part, "adapter-matrix") == 0) {
        printf("== adapter-matrix ==\n");
        rc |= run_part(bench_gpu_adapter, &a, o.csv ? matrix_csv : NULL) != 0;
    }
    if (all || strcmp(part, "ingest") == 0) {
        printf("== ingest ==\n");
        rc |= run_part(bench_gpu_ingest, &a, o.csv ? ingest_csv : NULL) != 0;
    }
    if (all || strcmp(part, "xproc") == 0) {
        printf("== xproc ==\n");
        rc |= run_part(bench_gpu_xproc, &a, o.csv ? xproc_csv : NULL) != 0;
    }
    if (cli_rmtree(dir) != 0)
        fprintf(stderr, "ferry bench gpu: could not remove %s\n", dir);
    return rc ? 1 : 0;
}
