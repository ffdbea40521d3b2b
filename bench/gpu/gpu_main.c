/* `ferry bench gpu` driver. */
#include "bench.h"
#include "cli.h"

int bench_gpu_cmd(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_fail("bench gpu", 1, "not built yet");
}
