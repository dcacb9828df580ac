/* Environments behind one interface (docs/envs.md).  The daemon asks an
 * environment for problems (lt_envs_sample); a worker runs episodes on them
 * (lt_episode_*), driven by the agent loop in rollout/.
 *
 * CONTRACT (shared by envs/, rollout/ and orchestrator/; extend, do not break). */
#ifndef LT_ENVS_ENV_H
#define LT_ENVS_ENV_H

#include <cjson/cJSON.h>
#include <stdint.h>
#include <uv.h>

#include "sandbox/sandbox.h"
#include "text/toolcall.h"
#include "util/config.h"
#include "util/rng.h"

typedef struct lt_envs lt_envs_t;
typedef struct lt_episode lt_episode_t;

/* The domains of config section "envs" (and "sandbox" for those that run
 * code).  loop: the worker's loop for asynchronous steps; NULL on the daemon,
 * which only samples problems. */
int lt_envs_create(const lt_config_t *cfg, uv_loop_t *loop, lt_envs_t **out);
void lt_envs_free(lt_envs_t *envs);
/* Releases what the environments hold on the loop (HTTP clients): call before
 * the loop's last run, then lt_envs_free after it. */
void lt_envs_shutdown(lt_envs_t *envs);
int lt_envs_count(const lt_envs_t *envs);
const char *lt_envs_name(const lt_envs_t *envs, int i); /* the domain name */
double lt_envs_weight(const lt_envs_t *envs, int i);
/* Samples per prompt of domain i (its group): envs.<d>.group_size, else dflt (scheduler.group_size). */
int lt_envs_group_size(const lt_envs_t *envs, int i, int dflt);
/* The reward at which a trajectory without a verifier's verdict passes (lt_traj_correct): envs.<d>.pass_threshold,
 * else 0.5, also for i = -1 (no such domain). */
double lt_envs_pass_threshold(const lt_envs_t *envs, int i);
/* The index of a domain, -1 when the run has none of that name. */
int lt_envs_index(const lt_envs_t *envs, const char *domain);

/* Problem `index` of `domain`: deterministic in (run seed, domain, index,
 * eval).  eval = 1 draws from a held-out set disjoint from the training
 * problems.  *spec (caller deletes) travels in TASK.spec. */
int lt_envs_sample(lt_envs_t *envs, const char *domain, uint64_t index, int eval, cJSON **spec);
/* The noise curriculum (envs.<d>.noise, docs/envs.md), on the side that samples: a training episode of domain i with
 * this spec ended, a success or not.  Returns 1 when that raised the domain's level (*level, and *gap the clean −
 * noisy success rate that allowed it), else 0 (also for a domain or spec without noise). */
int lt_envs_noise_record(lt_envs_t *envs, int i, const cJSON *spec, int success, double *level, double *gap);
/* A resumed run goes on from the highest level it dispatched. */
void lt_envs_noise_resume(lt_envs_t *envs, int i, double level);

/* Starts an episode.  *messages (caller deletes) receives the opening chat:
 * an array of {"role": "system"|"user", "content": "..."}. */
int lt_episode_open(lt_envs_t *envs, const char *domain, const cJSON *spec, uint64_t seed, lt_episode_t **out,
                    cJSON **messages);

/* Opens without blocking the loop (environments whose open runs a program):
 * cb gets the episode, 0 or the error (lt_error_msg() has the detail) and the
 * opening chat (callee deletes), on the loop, never inside this call.  On an
 * error the caller still closes *out.  Closing before cb cancels it. */
typedef void (*lt_episode_open_cb)(lt_episode_t *ep, int rc, cJSON *messages, void *ud);
int lt_episode_open_async(lt_envs_t *envs, const char *domain, const cJSON *spec, uint64_t seed, lt_episode_open_cb cb,
                          void *ud, lt_episode_t **out);

typedef struct {
  cJSON *observations; /* array of {"role":"tool","name":N,"content":C} to append; owned by the result */
  int done;            /* the environment ended the episode (terminated) */
  const char
      *timeout;    /* "tool_timeout" | "sandbox_timeout" | NULL: a timeout ended the episode (the policy's failure) */
  int error;       /* 0, or an LT_E* code: the environment failed (status env_error) */
  char *error_msg; /* detail when error != 0 */
} lt_env_step_t;

/* Called on the loop thread; the callee takes ownership of res's fields. */
typedef void (*lt_env_step_cb)(lt_episode_t *ep, lt_env_step_t *res, void *ud);

/* The policy's turn ended with `text` and the tool calls parsed from it (none:
 * a final answer).  Completes through cb on the loop, never synchronously
 * inside this call. */
int lt_episode_step(lt_episode_t *ep, const char *text, const lt_tool_call_t *calls, int ncalls, lt_env_step_cb cb,
                    void *ud);

/* What the reward layer needs from the environment: reference answer, tests,
 * end-state verdict ({"answer": "42"}, {"tests": [...]}, {"success": true}...).
 * Borrowed; valid until close. */
const cJSON *lt_episode_reference(const lt_episode_t *ep);
/* The episode ended by the policy's final answer, a budget or a timeout (not an environment failure): an
 * environment that judges the end state does it now, off the loop, into the reference (swe: the episode's diff,
 * reference.diff, and with `score` its hidden tests, reference.success and reference.components).  Returns 1
 * when the environment has nothing to do (cb is not called), 0 when cb follows on the loop (rc < 0: the
 * environment failed, lt_error_msg() has the detail), < 0 when it cannot start. */
typedef void (*lt_episode_end_cb)(lt_episode_t *ep, int rc, void *ud);
int lt_episode_end(lt_episode_t *ep, int score, lt_episode_end_cb cb, void *ud);

/* Closes; an in-flight step is cancelled and its callback is not called. */
void lt_episode_close(lt_episode_t *ep);

/* A demonstration for supervised warm-up: the chat and a response for problem
 * `index` (training split).  Assistant turns inside the chat (a multi-turn
 * episode's earlier calls) are trained on like the response.  Environments may inject the configured
 * demonstration errors (params.demo_error_rate).  LT_EUNSUPP where an
 * environment has no demonstrations.  Caller frees both. */
int lt_envs_demo(lt_envs_t *envs, const char *domain, uint64_t index, cJSON **messages, char **response);

/* The environment type of a domain ("arith", ...), NULL if unknown. */
const char *lt_envs_type(const lt_envs_t *envs, const char *domain);
/* Turns per episode a domain sets for itself (swe's params.max_turns), 0 when rollout.max_turns applies. */
int lt_envs_max_turns(const lt_envs_t *envs, const char *domain);
/* 1 when a domain's episodes run code in the sandbox (its environment says so), 0 otherwise. */
int lt_envs_needs_sandbox(const lt_envs_t *envs, const char *domain);

/* An `agent` domain's program (docs/agent-gateway.md): the worker's gateway
 * runs it per episode instead of stepping the environment. */
typedef struct {
  char **argv; /* NULL-terminated */
  double
      timeout_s; /* seconds of its own after its first call (not waiting on the gateway), then killed (agent_timeout) */
  int sandbox;   /* run it in the sandbox */
  int memory_mb; /* its sandbox's memory limit; 0: the run's sandbox.memory_mb */
  char **read_only;   /* host directories bound read-only into its sandbox (absolute, NULL-terminated); NULL: none */
  int stdin_prompt;   /* stdin carries the task's prompt text (an agent CLI's -p), not the task's JSON */
  int pass_answer;    /* LONGTAIL_TASK and stdin carry the row's answer */
  int honor_sampling; /* requests' temperature/top_p are used (and recorded) */
  int image;          /* params.image: it runs inside the task's root (lt_episode_program), judged as a swe episode */
  const char *const *hidden; /* keys of the task row the program never sees (NULL-terminated; the judge's) */
} lt_envs_agent_t;

/* The settings of an `agent` domain; NULL for other types and unknown domains. */
const lt_envs_agent_t *lt_envs_agent(const lt_envs_t *envs, const char *domain);
/* The port agent programs inside a task's root reach (the worker's gateway, 127.0.0.1:port): set before the first
 * episode of an `agent` domain with an image opens. */
void lt_envs_set_gateway(lt_envs_t *envs, int port);
/* An `agent` domain with an image: its program starts inside the episode's root (the task's repo_dir its working
 * directory, env added to the image's, the gateway's port its only network).  fds[0..2]: its stdin, stdout and
 * stderr (non-blocking, the caller's: close them).  One per episode; it ends with the episode, or by
 * lt_episode_program_kill.  lt_episode_program_wait: 0 and its wait status once it ended, LT_ETIMEDOUT while it
 * runs (never blocks).  LT_EUNSUPP for an episode without a root. */
int lt_episode_program(lt_episode_t *ep, char *const *argv, const char *const *env, int fds[3]);
int lt_episode_program_wait(lt_episode_t *ep, int *wstatus);
void lt_episode_program_kill(lt_episode_t *ep);
/* The run's sandbox limits (its `sandbox` section). */
const lt_sandbox_limits_t *lt_envs_sandbox(const lt_envs_t *envs);

/* The code environment's test runner, shared with the code reward: runs
 * `code` (Python defining solve) on each test's args in the sandbox and
 * compares the results with the expected values outside it.  Blocks. */
typedef struct {
  int passed, total;
  int timed_out;  /* the sandbox's deadline ended the run */
  int load_error; /* the program did not load (syntax error, no solve) */
} lt_envs_code_result_t;

int lt_envs_code_test(lt_sandbox_pool_t *pool, const char *code, const cJSON *tests, double test_timeout_s,
                      lt_envs_code_result_t *res);
/* The last fenced code block of a response (caller frees); NULL if none. */
char *lt_envs_code_extract(const char *text);

/* ---- the swe judge on its own: `longtail swe validate` (docs/envs.md, "`swe`") ---- */
typedef struct lt_swe_harness lt_swe_harness_t;
/* The tasks of a swe tasks file, every row checked (a bad one: LT_EINVAL naming file:line and the field; relative
 * images are the file's folder's); boxes with cfg's sandbox section, `pool` kept warm per image. */
int lt_swe_harness_open(const lt_config_t *cfg, const char *tasks, int pool, double test_timeout_s,
                        lt_swe_harness_t **out);
int lt_swe_harness_count(const lt_swe_harness_t *h);
/* Row i of the file (caller deletes). */
int lt_swe_harness_row(lt_swe_harness_t *h, int i, cJSON **row);
/* Judges patch (NULL or "": none) for row i in a fresh box: *result as the swe environment's verdict
 * ({"instance_id", "resolved", "applied", "fail_to_pass", "pass_to_pass", "tests", "seconds", "error"?}); < 0
 * when the image cannot start or the row's test_patch does not apply to it.  Thread-safe. */
int lt_swe_harness_judge(lt_swe_harness_t *h, int i, const char *patch, cJSON **result);
void lt_swe_harness_close(lt_swe_harness_t *h);

#endif
