/*
 * `ferry bench <benchmark>`: the one entry point of the benchmark library (bench/, ferry_bench),
 * all that the ferry executable's main.c knows of it. argv[0] is "bench"; returns the process
 * exit status (0 ok, 1 runtime error, 2 usage error), like every command.
 */
#ifndef FERRY_BENCH_CMD_H
#define FERRY_BENCH_CMD_H

int ferry_cmd_bench(int argc, char **argv);

#endif
