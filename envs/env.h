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
#include "util/config.h"
#include "util/rng.h"

/* A tool call parsed from the policy's text (rollout/ parses the XML format
 * <tool_call><name>N</name><arg name="K">V</arg>…</tool_call>). */
typedef struct {
  char *name;
  char *value;
} lt_tool_arg_t;

typedef struct {
  char *name;
  lt_tool_arg_t *args;
  int nargs;
} lt_tool_call_t;

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
const char *lt_envs_name(const lt_envs_t *envs, int i);  /* the domain name */
double lt_envs_weight(const lt_envs_t *envs, int i);
/* The index of a domain, -1 when the run has none of that name. */
int lt_envs_index(const lt_envs_t *envs, const char *domain);

/* Problem `index` of `domain`: deterministic in (run seed, domain, index,
 * eval).  eval = 1 draws from a held-out set disjoint from the training
 * problems.  *spec (caller deletes) travels in TASK.spec. */
int lt_envs_sample(lt_envs_t *envs, const char *domain, uint64_t index, int eval, cJSON **spec);

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
  const char *truncated; /* "tool_timeout" | "sandbox_timeout" | NULL */
  int error;           /* 0, or an LT_E* code: the environment failed (status env_error) */
  char *error_msg;     /* detail when error != 0 */
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

/* An `agent` domain's program (docs/agent-gateway.md): the worker's gateway
 * runs it per episode instead of stepping the environment. */
typedef struct {
  char **argv;        /* NULL-terminated */
  double timeout_s;   /* the program is killed after it (truncated: agent_timeout) */
  int sandbox;        /* run it in the sandbox */
  int pass_answer;    /* LONGTAIL_TASK and stdin carry the row's answer */
  int honor_sampling; /* requests' temperature/top_p are used (and recorded) */
} lt_envs_agent_t;

/* The settings of an `agent` domain; NULL for other types and unknown domains. */
const lt_envs_agent_t *lt_envs_agent(const lt_envs_t *envs, const char *domain);
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

/* ---- internal: shared by the environment implementations ---- */

/* The noise wrapper (envs/noise.c): envs.<domain>.noise. */
typedef struct {
  int on;
  double instruction, tool_failure, tool_partial, tool_inconsistent; /* probabilities at level 1 */
  double level_start, ramp_tasks;
} lt__noise_t;

int lt__noise_parse(const char *domain, const cJSON *noise, lt__noise_t *out);
double lt__noise_level(const lt__noise_t *n, uint64_t index);
char *lt__noise_instruction(const lt__noise_t *n, double level, lt_rng_t *r, const char *text);
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
  /* Asynchronous open and step on the loop (an HTTP environment): they end by
   * calling lt__episode_opened / lt__episode_stepped, never inside the call;
   * cancel drops what is in flight (no completion follows); shutdown releases
   * the domain's loop resources before the loop's last run. */
  int (*open_async)(void *state, lt_episode_t *ep, const cJSON *spec, uint64_t seed);
  int (*step_async)(lt_episode_t *ep, const char *text, const lt_tool_call_t *calls, int ncalls);
  void (*cancel)(lt_episode_t *ep);
  void (*shutdown)(void *state);
} lt_env_impl_t;

struct lt_episode {
  lt_envs_t *envs;
  void *domain;          /* registry's domain record */
  void *state;           /* the implementation's per-domain state */
  void *data;            /* the implementation's per-episode data */
  cJSON *reference;      /* set by open */
  uv_timer_t timer;      /* delivers step results on the next loop turn */
  lt_env_step_t result;
  lt_env_step_cb cb;
  void *ud;
  int pending;
  uv_work_t work;        /* a blocking step on the thread pool */
  char *work_text;
  const lt_tool_call_t *work_calls;
  int work_ncalls;          /* the calls of the step in flight (blocking or asynchronous) */
  int closed;
  double noise_level;       /* < 0: no noise in this episode */
  lt_rng_t noise_rng;
  unsigned char *noise_failed; /* per call of the step in flight: failed by the wrapper, not run */
  char **noise_names;
  int noise_ncalls;
  lt_episode_open_cb open_cb; /* an asynchronous open in flight */
  cJSON *open_spec, *open_messages;
  uint64_t open_seed;
  int open_rc, opening;
  char *open_err;
  int async_op;          /* an open_async/step_async is in flight */
  void *io;              /* the implementation's in-flight request */
};

void lt__episode_opened(lt_episode_t *ep, int rc, cJSON *messages); /* rc < 0: lt_error_msg() has the detail */
void lt__episode_stepped(lt_episode_t *ep, int rc);                  /* ep->result filled */
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

/* The step of single-turn environments: the first response ends the episode. */
int lt__step_single_turn(lt_episode_t *ep, const char *text, const lt_tool_call_t *calls, int ncalls, lt_env_step_t *res);

/* The worker's sandbox pool (the config's sandbox section), made on first use. */
int lt__envs_pool(lt_envs_t *envs, lt_sandbox_pool_t **out);

extern const lt_env_impl_t lt__env_arith;
extern const lt_env_impl_t lt__env_code;
extern const lt_env_impl_t lt__env_tools;
extern const lt_env_impl_t lt__env_external;
extern const lt_env_impl_t lt__env_http;
extern const lt_env_impl_t lt__env_dataset;
extern const lt_env_impl_t lt__env_agent;
const lt_envs_agent_t *lt__agent_params(void *state); /* envs/agent.c */

#endif
