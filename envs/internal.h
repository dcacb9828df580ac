/* Internals of envs/, shared by the registry and the environment implementations (nothing outside envs/
 * includes this): the implementation interface (lt_env_impl_t) an environment fills, the episode record, the
 * noise wrapper, the JSON protocol of external and http environments, and the implementations' tables. */
#ifndef LT_ENVS_INTERNAL_H
#define LT_ENVS_INTERNAL_H

#include <pthread.h>

#include "envs/env.h"
#include "sandbox/image.h"
#include "text/diff.h"
#include "util/buf.h"

/* The noise wrapper (envs/noise.c): envs.<domain>.noise. */
typedef struct {
  int on;
  double instruction, tool_failure, tool_partial, tool_inconsistent; /* probabilities at level 1 */
  double level_start, level_step, max_gap, clean_share, window;      /* the curriculum (docs/envs.md) */
  double level;                                                      /* the curriculum's level now (the daemon's) */
  int clean_n, clean_ok, noisy_n, noisy_ok; /* outcomes at this level: clean tasks and tasks at `level` */
  double last_gap;                          /* clean − noisy success rate at the last decision */
} lt__noise_t;

int lt__noise_parse(const char *domain, const cJSON *noise, lt__noise_t *out);
/* The level of training task `index`: 0 (clean, a clean_share of the indices) or the curriculum's level. */
double lt__noise_level(const lt__noise_t *n, uint64_t index);
/* A training episode dispatched at `level` ended (success: the domain's success); 1 when the level rose. */
int lt__noise_record(lt__noise_t *n, double level, int success);
/* Typos and filler; a word found in spec or reference (what the verifier needs) is never changed. */
char *lt__noise_instruction(const lt__noise_t *n, double level, lt_rng_t *r, const char *text, const cJSON *spec,
                            const cJSON *reference);
int lt__noise_tool_fails(const lt__noise_t *n, double level, lt_rng_t *r);
char *lt__noise_observation(const lt__noise_t *n, double level, lt_rng_t *r, const char *content);

typedef struct lt_env_impl {
  const char *type;
  /* Parses params (a JSON object, may be empty); errors name "envs.<domain>.params.<key>". */
  int (*init)(const char *domain, const cJSON *params, uint64_t seed, void **state);
  void (*free)(void *state);
  int (*sample)(void *state, uint64_t index, int eval, cJSON **spec);
  int (*demo)(void *state, uint64_t index, cJSON **messages, char **response);
  /* Fills *messages and the episode's reference; may set ep->data. */
  int (*open)(void *state, lt_episode_t *ep, const cJSON *spec, uint64_t seed, cJSON **messages);
  /* Synchronous step; the registry delivers the result on the loop. */
  int (*step)(lt_episode_t *ep, const char *text, const lt_tool_call_t *calls, int ncalls, lt_env_step_t *res);
  void (*close)(lt_episode_t *ep);
  int blocking; /* step blocks (sandbox, subprocess): the registry runs it on the thread pool */
  int sandbox;  /* its episodes run code in the sandbox (lt_envs_needs_sandbox) */
  /* Asynchronous open and step on the loop (an HTTP environment): they end by
   * calling lt__episode_opened / lt__episode_stepped, never inside the call;
   * cancel drops what is in flight (no completion follows); shutdown releases
   * the domain's loop resources before the loop's last run. */
  int (*open_async)(void *state, lt_episode_t *ep, const cJSON *spec, uint64_t seed);
  int (*step_async)(lt_episode_t *ep, const char *text, const lt_tool_call_t *calls, int ncalls);
  void (*cancel)(lt_episode_t *ep);
  void (*shutdown)(void *state);
  /* The episode ended (lt_episode_end): judges its end state into the reference; blocks (the thread pool). */
  int (*end)(lt_episode_t *ep, int score);
  int (*max_turns)(void *state);                /* turns per episode of the domain; 0: rollout.max_turns */
  void (*attach)(void *state, lt_envs_t *envs); /* after init: the registry it belongs to (its sandbox settings) */
} lt_env_impl_t;

struct lt_episode {
  lt_envs_t *envs;
  void *domain;     /* registry's domain record */
  void *state;      /* the implementation's per-domain state */
  void *data;       /* the implementation's per-episode data */
  cJSON *reference; /* set by open */
  uv_timer_t timer; /* delivers step results on the next loop turn */
  lt_env_step_t result;
  lt_env_step_cb cb;
  void *ud;
  int pending;
  uv_work_t work; /* a blocking step on the thread pool */
  char *work_text;
  const lt_tool_call_t *work_calls;
  int work_ncalls; /* the calls of the step in flight (blocking or asynchronous) */
  int closed;
  double noise_level; /* < 0: no noise in this episode */
  lt_rng_t noise_rng;
  unsigned char *noise_failed; /* per call of the step in flight: failed by the wrapper, not run */
  char **noise_names;
  int noise_ncalls;
  lt_episode_open_cb open_cb; /* an asynchronous open in flight */
  cJSON *open_spec, *open_messages;
  uint64_t open_seed;
  int open_rc, opening;
  char *open_err;
  int async_op;             /* an open_async/step_async is in flight */
  void *io;                 /* the implementation's in-flight request */
  int judged;               /* set by an open whose end the environment judges (lt_episode_end) */
  lt_episode_end_cb end_cb; /* an end in flight (lt_episode_end) */
  int ending, end_score, end_rc;
  char *end_err;
};

void lt__episode_opened(lt_episode_t *ep, int rc, cJSON *messages); /* rc < 0: lt_error_msg() has the detail */
void lt__episode_stepped(lt_episode_t *ep, int rc);                 /* ep->result filled */
uv_loop_t *lt__envs_loop(lt_envs_t *envs);

/* The JSON protocol of external and http environments (envs/protocol.c). */
int lt__envproto_sample(void *state, uint64_t index, int eval, cJSON **spec);
cJSON *lt__envproto_reset(const cJSON *spec, uint64_t seed);
cJSON *lt__envproto_step(const lt_episode_t *ep, const char *text, const lt_tool_call_t *calls, int ncalls);
/* An answer's JSON object; {"error"} and non-objects are errors naming the domain. */
int lt__envproto_parse(const char *domain, const char *text, size_t len, cJSON **answer);
int lt__envproto_opened(lt_episode_t *ep, const char *domain, cJSON *answer, cJSON **messages);
void lt__envproto_stepped(lt_episode_t *ep, cJSON *answer, int ncalls, lt_env_step_t *res);
void lt__envproto_close(lt_episode_t *ep);

/* Rows of a JSON-lines file (envs/rows.c): checked when opened, then an index of line offsets; rows read back
 * (pread) when sampled.  A check writes the row's problem into why (left "" for a good row). */
typedef void (*lt__row_check_fn)(const cJSON *row, void *ud, char *why, size_t n);
typedef struct {
  char *path;
  int fd;       /* rows are read back with pread: no shared file position */
  int64_t *off; /* byte offset of each row's line; off[n] is where the last one ends */
  uint32_t n;
  lt__row_check_fn check;
  void *check_ud;
  uint64_t seed;      /* the epochs' permutations */
  pthread_mutex_t mu; /* the cached permutation */
  uint32_t *perm;     /* the permutation of epoch perm_epoch */
  int64_t perm_epoch;
} lt__rows_t;

/* ctx names the owner in a bad row's error ("envs.gsm8k: data.jsonl:3: ..."), key the file's setting in file
 * errors ("envs.gsm8k.params.train: ..."). */
int lt__rows_open(const char *ctx, const char *key, const char *path, lt__row_check_fn check, void *check_ud,
                  uint64_t seed, lt__rows_t *s);
void lt__rows_close(lt__rows_t *s);
/* Row `row` (0-based), checked again: a file changed since the start is an error. */
int lt__rows_read(const lt__rows_t *s, uint32_t row, cJSON **out);
/* The row of sample `index`: in file order (wrapping; *epoch -1), or row perm_e[index mod n] of epoch e. */
int lt__rows_pick(lt__rows_t *s, uint64_t index, int in_order, uint32_t *row, int64_t *epoch);

/* ---- swe (docs/envs.md, "`swe`") ---- */

/* What a domain gives rows that leave a field out. */
typedef struct {
  const char *image, *test_cmd;
} lt__swe_defaults_t;

/* A task row's fields (envs/swe_task.c): strings point into the row (or the defaults), which must outlive it. */
typedef struct {
  const char *instance_id, *problem_statement, *image, *repo_dir, *patch, *test_patch, *test_cmd;
  const char **f2p, **p2p; /* FAIL_TO_PASS, PASS_TO_PASS */
  int nf2p, np2p;
  cJSON *lists; /* the lists parsed from JSON strings */
} lt__swe_task_t;

/* 0, or LT_EINVAL with why naming the field ("\"FAIL_TO_PASS\": ..."). */
int lt__swe_task_parse(const cJSON *row, const lt__swe_defaults_t *dflt, lt__swe_task_t *t, char *why, size_t n);
void lt__swe_task_free(lt__swe_task_t *t);
void lt__swe_row_check(const cJSON *row, void *dflt, char *why, size_t n); /* an lt__row_check_fn */
/* The absolute folder of a tasks file, which relative image paths in it are taken against (caller frees; NULL:
 * out of memory). */
char *lt__swe_base_dir(const char *tasks);
/* test_cmd with each {test} replaced by the id quoted for sh (caller frees). */
char *lt__swe_test_command(const char *test_cmd, const char *id);

/* The persistent shell of an episode (envs/swe_shell.c). */
typedef struct lt__swe_shell lt__swe_shell_t;
typedef struct {
  int status;      /* the command's exit status; -1 when it did not finish (timed out, or the shell ended) */
  int timed_out;   /* its deadline passed: its processes were killed */
  int restarted;   /* the shell had ended before this call: a new one started in the task's directory */
  int shell_ended; /* the command ended the shell (exit, exec, set -e): shell_exit its status */
  int shell_exit;
} lt__swe_run_t;

int lt__swe_shell_start(lt_box_t *box, const char *cwd, lt__swe_shell_t **out);
/* Runs cmd for at most timeout_s; its output (stdout and stderr in order, at most cap bytes: the first and last
 * halves, a note of what was cut between them) is appended to out.  < 0 only for the shell's own failures. */
int lt__swe_shell_run(lt__swe_shell_t *sh, const char *cmd, double timeout_s, size_t cap, lt_buf_t *out,
                      lt__swe_run_t *r);
void lt__swe_shell_free(lt__swe_shell_t *sh);

/* The tools (envs/swe_tools.c): bash, view, edit, in that order (bit i of a tool set is tool i). */
enum { LT__SWE_NTOOLS = 3 };
#define LT__SWE_CUT_NOTE "\n[... %zu bytes of output cut here ...]\n"
typedef struct {
  lt_box_t *box;
  lt__swe_shell_t *shell; /* started by the first bash call */
  const char *repo_dir;
  double tool_timeout_s;
  size_t output_bytes;
  unsigned tools;
} lt__swe_ctx_t;

int lt__swe_tool_index(const char *name); /* -1: not a tool */
/* One call: the answer appended to out (an error of the policy's is an answer); *timed_out for a bash call past
 * its deadline.  < 0 only for the box's own failures. */
int lt__swe_tool(lt__swe_ctx_t *x, const lt_tool_call_t *c, lt_buf_t *out, int *timed_out);
cJSON *lt__swe_tool_schemas(unsigned tools, double timeout_s);

/* Images, their boxes and the judge (envs/swe_judge.c). */
typedef struct lt__swe_images lt__swe_images_t;
/* The images of one domain (or of swe validate): each opened into cache_dir and pooled (pool boxes kept warm) on
 * first use, its boxes with the limits l. */
int lt__swe_images_create(const char *cache_dir, const lt_sandbox_limits_t *l, int pool, lt__swe_images_t **out);
void lt__swe_images_free(lt__swe_images_t *im);
/* A fresh box over image ref; the caller destroys it.  An image that cannot be opened or started is the error. */
int lt__swe_box(lt__swe_images_t *im, const char *ref, lt_box_t **out);
/* ref with a relative DIR or FILE taken from base_dir (the tasks file's folder); caller frees. */
char *lt__swe_image_ref(const char *ref, const char *base_dir);
/* The box's changes under repo_dir as a unified diff (paths relative to it) appended to out; files a text diff
 * cannot carry (binary, symlinks, past 4 MB) are left out and their paths added to skipped (may be NULL). */
int lt__swe_diff(lt_box_t *b, const char *repo_dir, lt_buf_t *out, cJSON *skipped);
/* Applies a patch (paths relative to repo_dir) in the box, all of it or nothing, leaving out the files `except`
 * touches (NULL: none).  0 applied; 1 it does not apply (why says where); < 0 the box failed. */
int lt__swe_apply(lt_box_t *b, const char *repo_dir, const char *patch, const lt_patch_t *except, char *why, size_t n);
/* Judges diff (NULL or "": no change) for task t in a fresh box: *result {"instance_id", "resolved", "applied",
 * "error"?, "timed_out"?, "fail_to_pass", "pass_to_pass", "tests": {"FAIL_TO_PASS": {id: passed|failed|timeout},
 * "PASS_TO_PASS": {...}}, "seconds"}.  A diff that does not apply and tests that fail or time out are results;
 * < 0 when the image cannot start or the task's test_patch does not apply to it (the environment's fault). */
int lt__swe_judge(lt__swe_images_t *im, const lt__swe_task_t *t, const char *diff, double test_timeout_s,
                  cJSON **result);

/* The step of single-turn environments: the first response ends the episode. */
int lt__step_single_turn(lt_episode_t *ep, const char *text, const lt_tool_call_t *calls, int ncalls,
                         lt_env_step_t *res);

/* What boxes over images are made with: the sandbox section's limits, sandbox.pool, the image cache. */
const lt_sandbox_limits_t *lt__envs_boxes(const lt_envs_t *envs, int *pool, const char **cache_dir, int *gateway_port);
const lt_env_impl_t *lt__episode_impl(const lt_episode_t *ep);
/* The worker's sandbox pool (the config's sandbox section), made on first use. */
int lt__envs_pool(lt_envs_t *envs, lt_sandbox_pool_t **out);

extern const lt_env_impl_t lt__env_arith;
extern const lt_env_impl_t lt__env_code;
extern const lt_env_impl_t lt__env_tools;
extern const lt_env_impl_t lt__env_external;
extern const lt_env_impl_t lt__env_http;
extern const lt_env_impl_t lt__env_dataset;
extern const lt_env_impl_t lt__env_agent;
extern const lt_env_impl_t lt__env_swe;
/* An agent domain with an image (envs/agent.c) takes its tasks, roots and verdicts from a swe state in this mode:
 * its boxes reach the worker's gateway port. */
void lt__swe_agent_mode(void *swe_state);
const lt_envs_agent_t *lt__agent_params(void *state); /* envs/agent.c */

#endif
