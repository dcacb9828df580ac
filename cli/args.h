/* Command-line flags for subcommands.
 *
 * A command declares its flags in a table; lt_args_parse() fills values,
 * collects positional arguments, handles --help, --log-level, --log-format and
 * "--" (everything after it is positional), and reports unknown flags as usage
 * errors (exit 2) with the command's usage line. */
#ifndef LT_CLI_ARGS_H
#define LT_CLI_ARGS_H

#define LT_ARGS_MAX_POS 64
#define LT_ARGS_MAX_MULTI 64

typedef enum { LT_ARG_FLAG, LT_ARG_VALUE, LT_ARG_MULTI } lt_arg_kind;

typedef struct {
  const char *name; /* "--model" */
  lt_arg_kind kind;
  const char *metavar; /* "DIR" */
  const char *help;
  /* filled by the parser */
  int set;
  const char *value;
  const char *values[LT_ARGS_MAX_MULTI];
  int nvalues;
} lt_arg_t;

typedef struct {
  const char *command; /* "logprobs" */
  const char *usage;   /* "--model DIR --input FILE.jsonl" */
  const char *summary; /* one line */
  const char *details; /* optional paragraphs for --help */
  lt_arg_t *args;
  int nargs;
  int min_pos, max_pos; /* positional count bounds; max_pos < 0: unbounded */
  /* filled by the parser */
  const char *pos[LT_ARGS_MAX_POS];
  int npos;
  int dashdash; /* index in pos[] of the first argument after "--", or -1 */
} lt_cmd_args_t;

/* Returns 0 to proceed, 1 if --help was printed (exit 0), or LT_EXIT_USAGE
 * after printing the usage error. */
int lt_args_parse(lt_cmd_args_t *c, int argc, char **argv);
lt_arg_t *lt_args_get(lt_cmd_args_t *c, const char *name);
const char *lt_args_str(lt_cmd_args_t *c, const char *name, const char *def);
int lt_args_flag(lt_cmd_args_t *c, const char *name);
/* Parses an integer/number flag; prints a usage error and returns
 * LT_EXIT_USAGE on a malformed value. */
int lt_args_long(lt_cmd_args_t *c, const char *name, long long def, long long lo, long long hi, long long *out);
int lt_args_double(lt_cmd_args_t *c, const char *name, double def, double *out);
/* A "LOW,HIGH" flag with 0 < LOW <= HIGH (ratio bounds); *set = 0 and out
 * untouched when absent.  Usage error (LT_EXIT_USAGE) when malformed. */
int lt_args_bounds(lt_cmd_args_t *c, const char *name, double out[2], int *set);
/* Prints "longtail CMD: message" and the usage line; returns LT_EXIT_USAGE. */
int lt_args_usage_error(const lt_cmd_args_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void lt_args_print_help(const lt_cmd_args_t *c);

/* Exit status for an error code, after printing "longtail CMD: error: detail". */
int lt_cli_fail(const char *command, int rc);

#endif
