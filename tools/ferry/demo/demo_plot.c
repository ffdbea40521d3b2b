/*
 * `ferry demo --plot`: latency over time and the latency CDF of each transport, drawn by
 * gnuplot into a PNG. The data goes to files in a private temporary directory, removed after.
 */
#include "demo.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

bool demo_plot_available(void)
{
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/local/bin:/usr/bin:/bin";
    char dir[4096];
    while (*path) {
        size_t n = strcspn(path, ":");
        if (n > 0 && n < sizeof dir - 16) {
            memcpy(dir, path, n);
            snprintf(dir + n, sizeof dir - n, "/gnuplot");
            if (access(dir, X_OK) == 0)
                return true;
        }
        path += n;
        if (*path == ':')
            path++;
    }
    return false;
}

static int cmp_rec_lat(const void *a, const void *b)
{
    int64_t x = ((const demo_lat_rec *)a)->lat_ns, y = ((const demo_lat_rec *)b)->lat_ns;
    return (x > y) - (x < y);
}

/* series<i>.dat: "seconds latency_us" in arrival order; cdf<i>.dat: "latency_us fraction". */
static bool write_series(const char *tmp, size_t i, const demo_series *s)
{
    char path[512];
    snprintf(path, sizeof path, "%s/series%zu.dat", tmp, i);
    FILE *f = fopen(path, "w");
    if (!f)
        return false;
    for (size_t k = 0; k < s->count; k++)
        fprintf(f, "%.6f %.3f\n", (double)(s->recs[k].sent_ns - s->t0_ns) / 1e9,
                (double)s->recs[k].lat_ns / 1e3);
    bool ok = fclose(f) == 0;

    demo_lat_rec *sorted = malloc((s->count ? s->count : 1) * sizeof *sorted);
    snprintf(path, sizeof path, "%s/cdf%zu.dat", tmp, i);
    f = sorted ? fopen(path, "w") : NULL;
    if (!f) {
        free(sorted);
        return false;
    }
    if (s->count)
        memcpy(sorted, s->recs, s->count * sizeof *sorted);
    qsort(sorted, s->count, sizeof *sorted, cmp_rec_lat);
    for (size_t k = 0; k < s->count; k++)
        fprintf(f, "%.3f %.6f\n", (double)sorted[k].lat_ns / 1e3,
                (double)(k + 1) / (double)s->count);
    free(sorted);
    return fclose(f) == 0 && ok;
}

/* gnuplot strings are in single quotes: a quote is doubled. */
static void put_quoted(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'')
            fputc('\'', f);
        fputc(*s, f);
    }
    fputc('\'', f);
}

static bool write_script(const char *tmp, const char *png, const demo_series *series, size_t n,
                         const char *subtitle)
{
    char path[512];
    snprintf(path, sizeof path, "%s/plot.gp", tmp);
    FILE *f = fopen(path, "w");
    if (!f)
        return false;
    fputs("if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
          "  set terminal pngcairo size 1280,960 font 'sans,10'\n"
          "} else {\n"
          "  set terminal png size 1280,960\n"
          "}\n",
          f);
    fputs("set output ", f);
    put_quoted(f, png);
    fputs("\nset multiplot layout 2,1 title ", f);
    put_quoted(f, subtitle);
    fputs("\nset grid\nset key outside right top\nset logscale y\n"
          "set title 'latency over time'\nset xlabel 'time since the first frame (s)'\n"
          "set ylabel 'latency (us)'\n",
          f);
    fputs("plot ", f);
    for (size_t i = 0; i < n; i++) {
        fprintf(f, "%s'%s/series%zu.dat' using 1:2 with points pt 7 ps 0.4 title ", i ? ", " : "",
                tmp, i);
        put_quoted(f, series[i].title);
    }
    fputs("\nunset logscale y\nset logscale x\nset yrange [0:1]\n"
          "set title 'latency CDF'\nset xlabel 'latency (us)'\nset ylabel 'fraction of frames'\n"
          "plot ",
          f);
    for (size_t i = 0; i < n; i++) {
        fprintf(f, "%s'%s/cdf%zu.dat' using 1:2 with steps lw 2 title ", i ? ", " : "", tmp, i);
        put_quoted(f, series[i].title);
    }
    fputs("\nunset multiplot\n", f);
    return fclose(f) == 0;
}

static int run_gnuplot(const char *tmp)
{
    char script[512];
    snprintf(script, sizeof script, "%s/plot.gp", tmp);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        char *argv[] = {"gnuplot", script, NULL};
        execvp("gnuplot", argv);
        _exit(127);
    }
    int st;
    pid_t r;
    while ((r = waitpid(pid, &st, 0)) < 0 && errno == EINTR) {
    }
    if (r < 0 || !WIFEXITED(st))
        return -1;
    return WEXITSTATUS(st);
}

int demo_plot(const char *png, const demo_series *series, size_t n, const char *subtitle)
{
    char tmp[] = "/tmp/ferry-plot-XXXXXX";
    size_t used = 0;
    demo_series kept[8];
    for (size_t i = 0; i < n && used < 8; i++)
        if (series[i].count > 0)
            kept[used++] = series[i];
    if (used == 0)
        return cli_fail("demo", 1, "--plot: no latency samples to draw");
    if (!mkdtemp(tmp))
        return cli_fail("demo", 1, "--plot: cannot make a temporary directory: %s",
                        strerror(errno));
    int status = 1;
    bool ok = true;
    for (size_t i = 0; i < used && ok; i++)
        ok = write_series(tmp, i, &kept[i]);
    ok = ok && write_script(tmp, png, kept, used, subtitle);
    if (!ok) {
        cli_fail("demo", 1, "--plot: cannot write the data in %s: %s", tmp, strerror(errno));
    } else {
        unlink(png);
        int rc = run_gnuplot(tmp);
        struct stat sb;
        if (rc == 127)
            cli_fail("demo", 1,
                     "--plot: cannot run gnuplot: install gnuplot-nox "
                     "(apt-get install gnuplot-nox) or run 'make demo'");
        else if (rc != 0)
            cli_fail("demo", 1, "--plot: gnuplot failed (exit %d)", rc);
        else if (stat(png, &sb) != 0 || sb.st_size == 0)
            cli_fail("demo", 1, "--plot: gnuplot wrote no %s", png);
        else
            status = 0;
    }
    cli_rmtree(tmp);
    return status;
}
