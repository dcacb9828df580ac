/* Internals of the agent (rollout/agent.h), shared by its files and nothing else: the episode every mode has
 * (rollout/agent.c: its lifecycle), the trajectory record it builds (rollout/record.c), and the two modes that
 * play it, each with its own state: the builtin loop (rollout/loop.c, lt__loop_t) and an agent program through the
 * gateway (rollout/agent_gateway.c, lt__play_t). */
#ifndef LT_ROLLOUT_INTERNAL_H
#define LT_ROLLOUT_INTERNAL_H

#include "rollout/agent.h"

/* The episode's lifecycle (the table of transitions is in rollout/agent.c's opening comment). */
typedef enum {
  LT__EP_OPENING, /* its environment opens (off the loop where that blocks) */
  LT__EP_RUNNING, /* its mode plays it: the loop's turns, or the program's calls */
  LT__EP_JUDGING, /* ended; its environment judges the end state (swe: the diff and the hidden tests) */
  LT__EP_SCORING, /* ended; the reward is in flight */
  LT__EP_ENDED,   /* the outcome is final; the delivery waits on the timer */
  LT__EP_DROPPED, /* discarded while the reward was in flight: closes when it lands */
  LT__EP_CLOSING, /* the timer closes; then the one free (agent_destroy) */
} lt__ep_state;

typedef struct lt__loop lt__loop_t; /* rollout/loop.c */
typedef struct lt__play lt__play_t; /* rollout/agent_gateway.c */

struct lt_agent {
  lt_agent_ctx_t *ctx;
  lt_task_t task; /* copy; spec owned */
  lt_agent_done_cb cb;
  void *ud;
  lt__ep_state state;
  lt_episode_t *ep;
  uv_timer_t timer; /* the delivery, on the loop */
  lt__loop_t *loop; /* exactly one of the modes: the builtin loop, */
  lt__play_t *play; /* or the program of an `agent` domain */
  lt_traj_t traj;   /* the trajectory so far, the TRAJ it becomes: its tokens are one or more contexts one
                               after another (seq_starts: a diverging call or a context rewrite starts one) */
  lt_gen_t *gen;    /* the generation session of the current context */
  int32_t *append;  /* context tokens the next turn prefills */
  int nappend, capappend;
  cJSON *messages; /* the conversation (the reward's and export's) */
  char *last_text; /* the policy's last answer */
  int turns, generated, malformed;
  double temperature; /* what it sampled with (an agent program's own with params.honor_sampling) */
  double t_gen, t_env, t_reward, t0;
  /* outcome */
  lt_traj_status status;
  lt_finish finish;
  const char *reason;
  char *error;
  int has_reward;
  double reward;
  cJSON *components;
};

/* ---- the lifecycle (rollout/agent.c) ---- */

/* The episode ends with this outcome (a no-op once it has ended): what runs stops, then the reward (when it is ok
 * without one) and the delivery follow on the loop. */
void lt__agent_end(lt_agent_t *a, lt_traj_status st, lt_finish fin, const char *reason, const char *err);
/* The episode's context limit: the task's and the backend's. */
int lt__agent_context_room(const lt_agent_t *a);
/* The turn's prefill (the agent's queue, emptied) then what it generated into the record; *gen_at: where the
 * generated tokens start. */
int lt__agent_push_turn(lt_agent_t *a, const lt_turn_t *t, const lt_prefill_routing_t *pre, int *gen_at);

/* ---- the record (rollout/record.c): a trajectory's arrays as contexts one after another ---- */

/* Context tokens (prompt, chat markup, observations): loss mask 0, with their prefill routing (NULL: none). */
int lt__rec_push_context(lt_traj_t *r, const int32_t *t, int n, const uint16_t *rids, const float *rprobs);
/* A turn's prefilled tokens (loss mask 0), then what it generated (mask 1); *gen_at: where those start. */
int lt__rec_push_turn(lt_traj_t *r, const int32_t *pre_ids, int npre, const lt_turn_t *t,
                      const lt_prefill_routing_t *pre, int *gen_at);
/* Where the current context starts. */
int lt__rec_seq0(const lt_traj_t *r);
/* The next tokens start a new context; an empty current context is reused. */
int lt__rec_new_context(lt_traj_t *r);
/* Keeps the first n tokens (and their sampling sets). */
void lt__rec_cut(lt_traj_t *r, int n);
/* Appends src's contexts after dst's, each still a context of its own. */
int lt__rec_append(lt_traj_t *dst, const lt_traj_t *src);

/* ---- the builtin loop (rollout/loop.c) ---- */

int lt__loop_new(lt_agent_t *a);
/* RUNNING from the environment's opening chat (taken). */
void lt__loop_start(lt_agent_t *a, cJSON *opening);
/* The episode ended: its summary's session closes. */
void lt__loop_stop(lt_agent_t *a);
/* Its memory, after lt__loop_stop (rollout/agent.c's agent_destroy). */
void lt__loop_free(lt_agent_t *a);

/* ---- an agent program through the gateway (rollout/agent_gateway.c) ---- */

int lt__play_new(lt_agent_t *a, const lt_envs_agent_t *opts);
/* RUNNING: the program starts (< 0: it could not). */
int lt__play_start(lt_agent_t *a);
/* The episode ended: its token is revoked, its calls in flight fail, its program is killed. */
void lt__play_stop(lt_agent_t *a);
/* Before the delivery: the concurrent calls' contexts go before the record's. */
int lt__play_seal(lt_agent_t *a);
/* Its memory, after lt__play_stop (agent_destroy: the gateway may be closed by then). */
void lt__play_free(lt_agent_t *a);

#endif
