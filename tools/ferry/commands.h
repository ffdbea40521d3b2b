/*
 * The commands of the ferry command-line tool, one entry point each, dispatched by main.c. A
 * command parses its own options (on tools/lib/cli.h) and returns the process exit status (0 ok,
 * 1 runtime error, 2 usage error); argv[0] is the command name ("pub", ...). `ferry bench` is
 * the benchmark library's entry point (bench/include/bench_cmd.h).
 */
#ifndef FERRY_CLI_COMMANDS_H
#define FERRY_CLI_COMMANDS_H

int ferry_cmd_pub(int argc, char **argv);
int ferry_cmd_echo(int argc, char **argv);
int ferry_cmd_hz(int argc, char **argv);
int ferry_cmd_delay(int argc, char **argv);
int ferry_cmd_topics(int argc, char **argv);
int ferry_cmd_info(int argc, char **argv);
int ferry_cmd_clean(int argc, char **argv);
int ferry_cmd_demo(int argc, char **argv);
int ferry_cmd_record(int argc, char **argv);
int ferry_cmd_play(int argc, char **argv);
int ferry_cmd_bag(int argc, char **argv);
/* Built without Cyclone DDS, it says so and returns 2. */
int ferry_cmd_bridge(int argc, char **argv);
/* Built without libwebsockets, it says so and returns 2. */
int ferry_cmd_view(int argc, char **argv);

#endif
