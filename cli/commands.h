/* The subcommands of bin/longtail and what they share. */
#ifndef LT_CLI_COMMANDS_H
#define LT_CLI_COMMANDS_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "buffer/buffer.h"
#include "cli/args.h"
#include "text/tokenizer.h"
#include "util/buf.h"
#include "util/config.h"

typedef int (*lt_cmd_fn)(int argc, char **argv);

typedef struct {
  const char *name;
  lt_cmd_fn fn;
  const char *summary;
} lt_command_t;

/* Every command: argv[0] is the command name. Returns the process exit code. */
int lt_cmd_train(int argc, char **argv);
int lt_cmd_worker(int argc, char **argv);
int lt_cmd_serve(int argc, char **argv);
int lt_cmd_sft(int argc, char **argv);
int lt_cmd_init(int argc, char **argv);
int lt_cmd_lora(int argc, char **argv);
int lt_cmd_stats(int argc, char **argv);
int lt_cmd_export(int argc, char **argv);
int lt_cmd_plot(int argc, char **argv);
int lt_cmd_replay(int argc, char **argv);
int lt_cmd_inspect(int argc, char **argv);
int lt_cmd_compare(int argc, char **argv);
int lt_cmd_ui(int argc, char **argv);
int lt_cmd_logprobs(int argc, char **argv);
int lt_cmd_grad(int argc, char **argv);
int lt_cmd_generate(int argc, char **argv);
int lt_cmd_tokenize(int argc, char **argv);
int lt_cmd_template(int argc, char **argv);
int lt_cmd_reward(int argc, char **argv);
int lt_cmd_sandbox(int argc, char **argv);
int lt_cmd_swe(int argc, char **argv);
int lt_cmd_keygen(int argc, char **argv);
int lt_cmd_config(int argc, char **argv);
int lt_cmd_retrain(int argc, char **argv);

extern const lt_command_t lt_commands[];
extern const int lt_ncommands;

/* Every config fragment of every layer, in documentation order. */
extern const lt_cfg_schema_t *const lt_all_schemas[];
extern const int lt_all_nschemas;

/* Loads a job config with the --set overrides of `sets` (may be NULL).  On
 * failure prints "longtail CMD: config error: <path>: <problem>" and returns
 * the exit code (2 for config and syntax errors). */
int lt_cli_load_config(const char *command, const char *path, const lt_arg_t *sets, lt_config_t *cfg);

/* Reads an integer array field of a JSONL input line, checking every id is in
 * [0, vocab) and the length is in [min_len, max_len]; errors name path:line. */
int lt_cli_token_array(const cJSON *line, const char *key, int vocab, int min_len, int max_len, const char *path,
                       long lineno, int32_t **out, int *n);
/* Runs fn on every line of the JSON-lines file `input` ("-": stdin), writing
 * what it appends to `out` to stdout line by line.  A failure stops the loop;
 * its detail gains "PATH:LINE".  Returns 0 or the error code. */
typedef int (*lt_cli_line_fn)(const cJSON *line, lt_buf_t *out, void *ud);
int lt_cli_map_lines(const char *input, lt_cli_line_fn fn, void *ud);
/* The tokenizer of a run's newest weights still on disk (inspect, ui), NULL when there is none. */
lt_tokenizer_t *lt_cli_run_tokenizer(lt_buffer_t *b);
/* Opens a run read-only: ARG is a run directory or its buffer.db.  Fills NAME
 * (when given) with the run's recorded name or the directory's.  CHECK: run
 * SQLite's full integrity check first (the command's --check); without it the
 * open checks cheaply (docs/buffer.md, "Damage").  On failure prints
 * "longtail COMMAND: error: ..." and returns the exit code. */
int lt_cli_open_run(const char *command, const char *arg, int check, lt_buffer_t **b, char *name, size_t cap);
/* Closes a run opened by lt_cli_open_run.  CODE is the command's exit code so far; when it is 0 and a read met a
 * damaged page (lt_buffer_damaged), prints the damage and returns 6 instead (the report built from it is not
 * printed).  Returns the exit code. */
int lt_cli_close_run(const char *command, lt_buffer_t *b, int code);
/* The offline readers' --check: SQLite's full integrity check before reading (without it the open checks
 * cheaply; damage met while reading still exits 6). */
#define LT_CLI_CHECK_ARG                                                                                   \
  {                                                                                                        \
    .name = "--check", .kind = LT_ARG_FLAG,                                                                \
    .help = "first run SQLite's full integrity check of the buffer (reads all of it; exit 6 when damaged)" \
  }

/* What a run achieved, on stdout and in RUN_DIR/summary.json (`train`, `retrain`); EXTRA's members (taken
 * over, may be NULL) join the JSON. */
void lt_cli_summarize(const char *command, const char *run_dir, double wall_s, int plotted, cJSON *extra);

/* Plots metrics of runs through gnuplot: one panel per entry of PANELS (a
 * comma-separated list of metric names or GLOB patterns drawn together), every
 * run's curve overlaid in each panel.  OUT ends in .png or .svg.  STRICT: a
 * panel no run has data for is an error (naming the recorded metrics) rather
 * than an empty panel.  CHECK as for lt_cli_open_run.  Returns 0 or an exit
 * code after printing "longtail COMMAND: error: ...". */
int lt_cli_plot(const char *command, const char *const *runs, int nruns, const char *const *panels, int npanels,
                const char *title, const char *out, int strict, int check);
/* The dashboard's panels (reward, accuracy, acceptance, mismatch, routing
 * confidence, staleness, throughput, gradient norm, entropy). */
extern const char *const lt_cli_dashboard[];
extern const int lt_cli_ndashboard;

/* The learner's thread count from LT_THREADS or all cores. */
int lt_cli_threads(void);

/* The version banner with build features, as `longtail --version` prints it. */
void lt_cli_print_version(void);

#endif
