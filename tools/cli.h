/* What the kvik tool's subcommands share: exit codes and error printing. */
#ifndef KVIK_CLI_H
#define KVIK_CLI_H

#include <stddef.h>

/* Exit codes: success, runtime failure, bad command line. */
enum { CLI_OK = 0, CLI_ERROR = 1, CLI_USAGE = 2 };

/* 1 if arg asks for help ("-h" or "--help"). */
int cli_is_help(const char *arg);

/* Print "kvik COMMAND: <kvik_last_error()>" on stderr; returns CLI_ERROR. Call it right after
 * the failing kvik call, on the same thread, since the message is per thread. */
int cli_fail(const char *command);

/* Print "kvik COMMAND: MESSAGE 'ARG'" and a hint to --help on stderr; returns CLI_USAGE. */
int cli_usage_error(const char *command, const char *message, const char *arg);

/* Option parsing that the subcommands share. A decimal integer in [1, INT_MAX] at text, *end
 * getting what follows it; -1 if there is none. */
int cli_parse_positive(const char *text, char **end);

/* BYTES (at least 1) with an optional K, M or G suffix (binary units): 0, or -1 if invalid. */
int cli_parse_size(const char *text, size_t *size);

/* The value of option `name` given as "NAME VALUE" or "NAME=VALUE" at argv[*i] ("" if the value
 * is missing; *i moves past it), else NULL. */
const char *cli_option_value(const char *name, int argc, char **argv, int *i);

/* The whole `kvik` command: argv[0] is the program's name, argv[1] the subcommand. Returns the
 * exit code. The Python package's `python -m kvik` calls it too, so both run the same code. */
int cli_main(int argc, char **argv);

/* `kvik bench ARGS...`; argv[0] is "bench". Returns the exit code. */
int cli_bench(int argc, char **argv);

/* `kvik bench URL ARGS...` and `kvik cat URL ARGS...` (remote.c); argv[0] is the command's
 * name. Return the exit code. */
int cli_bench_remote(int argc, char **argv);
int cli_cat(int argc, char **argv);

#endif /* KVIK_CLI_H */
