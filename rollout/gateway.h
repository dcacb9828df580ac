/* The agent gateway (docs/agent-gateway.md): an `agent` environment's episode
 * is played by an unmodified agent program that talks to an OpenAI-compatible
 * endpoint.  Each worker serves one such endpoint on loopback (the shared
 * OpenAI layer, infer/oai.h), authenticates every call by its episode's
 * token and hands it to that episode (rollout/agent_gateway.c), which generates with
 * the worker's backend and records the exact tokens it returned. */
#ifndef LT_ROLLOUT_GATEWAY_H
#define LT_ROLLOUT_GATEWAY_H

#include <uv.h>

#include "envs/env.h" /* lt_sandbox_limits_t */
#include "infer/oai.h"

/* ---- the program of an episode (rollout/program.c) ---- */

typedef struct lt_program lt_program_t;

typedef struct {
  int exit_code; /* -1 when a signal ended it */
  int signal;
  int timed_out;         /* the deadline killed it */
  const char *last_line; /* its stdout's last non-empty line ("" if none) */
  const char *err_tail;  /* the end of its stderr */
  const char *out_tail;  /* the end of its stdout (agent CLIs may write their errors there) */
} lt_program_result_t;

/* Called once, on the loop, when the program ended (never after lt_program_kill). */
typedef void (*lt_program_exit_cb)(lt_program_t *p, const lt_program_result_t *r, void *ud);

/* Starts argv (argv[0] looked up in PATH) in its own process group with the
 * worker's environment plus env_set ("NAME=value", NULL-terminated), writes
 * stdin_line to its stdin and closes it.  After timeout_s seconds the whole
 * group is killed (timed_out): timeout_s of the program's own time after its first call (lt_program_hold),
 * held time not counted; until its first call, timeout_s + 60 s of start-up.  sandbox != NULL: argv runs in
 * longtail's sandbox instead (`longtail sandbox run`, a child of the group) under those limits, with only
 * env_set's variables, its 127.0.0.1:sandbox->port its one network path (at most sandbox->max_conns connections
 * open at once), sandbox->ro_dirs bound read-only, and the other files argv names copied into its /work
 * (docs/agent-gateway.md). */
int lt_program_start(uv_loop_t *loop, char *const *argv, const char *const *env_set, const char *stdin_line,
                     double timeout_s, const lt_sandbox_limits_t *sandbox, lt_program_exit_cb cb, void *ud,
                     lt_program_t **out);
/* A program started elsewhere (an agent program inside a task's root, lt_episode_program): its pipes fds
 * (stdin, stdout, stderr: taken over, closed by this module) watched as lt_program_start's, its end found by
 * polling ops->wait (0 and a wait status once ended), its processes killed by ops->kill. */
typedef struct {
  int (*wait)(void *ctx, int *wstatus);
  void (*kill)(void *ctx);
} lt_program_ops_t;
int lt_program_attach(uv_loop_t *loop, const int fds[3], const lt_program_ops_t *ops, void *ops_ctx,
                      const char *stdin_line, double timeout_s, lt_program_exit_cb cb, void *ud, lt_program_t **out);
/* Kills the group and frees (no callback). */
void lt_program_kill(lt_program_t *p);
/* The program waits on the gateway's answer to one of its calls: until the matching release its deadline's
 * clock stands still (holds nest), so an engine slow to answer never eats the program's timeout_s.  The first
 * hold ends the start-up deadline: timeout_s starts counting at the first release. */
void lt_program_hold(lt_program_t *p);
void lt_program_release(lt_program_t *p);
/* Its episode is over (a limit ended it): the group is killed in ms unless the program exits first (timed_out). */
void lt_program_end_after(lt_program_t *p, uint64_t ms);

/* ---- the worker's endpoint (rollout/gateway.c) ---- */

typedef struct lt_gateway lt_gateway_t;

/* What a token names: an episode, as its owner defines it (rollout/agent_gateway.c); the gateway only hands it on. */
typedef struct lt_gateway_session lt_gateway_session_t;

/* What the gateway needs of a session's owner: the OpenAI layer's hooks, called with the session the call's token
 * names; prepare() may hand the call's later hooks another (plan->session). */
typedef struct {
  int (*prepare)(lt_gateway_session_t *session, lt_oai_plan_t *plan);
  int (*generate)(lt_gateway_session_t *session, lt_oai_gen_t *g, const lt_oai_job_t *job);
  void (*cancel)(lt_gateway_session_t *session);
  void (*context_limit)(lt_gateway_session_t *session, int need, int max_context);
  void (*answered)(lt_gateway_session_t *session, const lt_oai_result_t *r);
} lt_gateway_session_ops_t;

typedef struct {
  const lt_tokenizer_t *tok;
  const lt_chat_template_t *chat;
  lt_tool_format tool_format;
  int vocab, max_context;
  int slots; /* episodes at once: connections are sized from it */
  lt_gateway_session_ops_t ops;
} lt_gateway_opts_t;

int lt_gateway_create(uv_loop_t *loop, const lt_gateway_opts_t *o, lt_gateway_t **out);
/* The loopback port it listens on. */
int lt_gateway_port(const lt_gateway_t *gw);
enum { LT_GATEWAY_URL_MAX = 64 };
/* A fresh token (OPENAI_API_KEY) and base URL (OPENAI_BASE_URL,
 * "http://127.0.0.1:PORT/e/ID/v1") naming `session` until lt_gateway_revoke;
 * a call is served only with both. */
int lt_gateway_admit(lt_gateway_t *gw, lt_gateway_session_t *session, char token[65], char url[LT_GATEWAY_URL_MAX]);
/* The token no longer authenticates: later calls get 401. */
void lt_gateway_revoke(lt_gateway_t *gw, lt_gateway_session_t *session);
void lt_gateway_set_version(lt_gateway_t *gw, int64_t version);
void lt_gateway_close(lt_gateway_t *gw);

#endif
