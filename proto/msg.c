/* Message names, ownership, and the growth of a trajectory's arrays. */
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"
#include "util/grow.h"

static const char *type_names[LT_MSG_NTYPES] = {NULL,      "HELLO", "WELCOME", "TASK", "TRAJ",  "ACK",  "HEARTBEAT",
                                                "WEIGHTS", "ABORT", "ERROR",   "BYE",  "TASKS", "TRAJS"};

static const char *status_names[LT_TRAJ_NSTATUS] = {"ok", "reward_failed", "env_error", "aborted", "error"};

static const char *finish_names[LT_FINISH_N] = {"terminated", "truncated", "none", "timeout"};

static int parse_in(const char *const *names, int n, int first, const char *s) {
  if (!s) return -1;
  for (int i = first; i < n; i++)
    if (names[i] && strcmp(names[i], s) == 0) return i;
  return -1;
}

const char *lt_msg_type_name(lt_msg_type t) { return (t > 0 && t < LT_MSG_NTYPES) ? type_names[t] : "?"; }
int lt_msg_type_parse(const char *s) { return parse_in(type_names, LT_MSG_NTYPES, 1, s); }

const char *lt_traj_status_name(lt_traj_status s) {
  return ((int)s >= 0 && s < LT_TRAJ_NSTATUS) ? status_names[s] : "?";
}
int lt_traj_status_parse(const char *s) { return parse_in(status_names, LT_TRAJ_NSTATUS, 0, s); }

const char *lt_finish_name(lt_finish f) { return ((int)f >= 0 && f < LT_FINISH_N) ? finish_names[f] : "?"; }
int lt_finish_parse(const char *s) { return parse_in(finish_names, LT_FINISH_N, 0, s); }

void lt_traj_free(lt_traj_t *t) {
  free(t->domain);
  free(t->reason);
  free(t->error);
  cJSON_Delete(t->components);
  cJSON_Delete(t->messages);
  free(t->diff);
#define FREE_ARRAY(m, dtype, elem, routed, required) free(t->m);
  LT_TRAJ_TOKEN_ARRAYS(FREE_ARRAY)
#undef FREE_ARRAY
  free(t->support_ids);
  free(t->seq_starts);
  memset(t, 0, sizeof *t);
}

int lt_traj_reserve(lt_traj_t *t, int more) {
  size_t k = (size_t)t->routing_layers * (size_t)t->routing_k;
#define GROW_ARRAY(m, dtype, elem, routed, required) {&t->m, sizeof *t->m * ((routed) ? k : 1)},
  lt_grow_t arr[] = {LT_TRAJ_TOKEN_ARRAYS(GROW_ARRAY)};
#undef GROW_ARRAY
  return lt_grow(&t->cap_tokens, (size_t)t->ntokens + (size_t)more, 256, arr, sizeof arr / sizeof *arr);
}

static void task_free(lt_task_t *t) {
  free(t->domain);
  free(t->env);
  free(t->session);
  cJSON_Delete(t->spec);
}

void lt_msg_free(lt_msg_t *m) {
  switch (m->type) {
  case LT_MSG_HELLO:
    free(m->u.hello.name);
    free(m->u.hello.backend);
    free(m->u.hello.device);
    free(m->u.hello.host);
    free(m->u.hello.pending);
    free(m->u.hello.running);
    break;
  case LT_MSG_WELCOME:
    free(m->u.welcome.worker_id);
    free(m->u.welcome.run);
    free(m->u.welcome.weights_location);
    cJSON_Delete(m->u.welcome.weights_mirrors);
    cJSON_Delete(m->u.welcome.settings);
    cJSON_Delete(m->u.welcome.model);
    break;
  case LT_MSG_TASK: task_free(&m->u.task); break;
  case LT_MSG_TASKS:
    for (int i = 0; i < m->u.tasks.n; i++) task_free(&m->u.tasks.tasks[i]);
    free(m->u.tasks.tasks);
    break;
  case LT_MSG_TRAJ: lt_traj_free(&m->u.traj); break;
  case LT_MSG_TRAJS:
    for (int i = 0; i < m->u.trajs.n; i++) {
      lt_traj_free(&m->u.trajs.trajs[i]);
      if (m->u.trajs.why) free(m->u.trajs.why[i]);
    }
    free(m->u.trajs.trajs);
    free(m->u.trajs.rc);
    free(m->u.trajs.why);
    break;
  case LT_MSG_ACK:
    free(m->u.ack.task_ids);
    free(m->u.ack.duplicate);
    break;
  case LT_MSG_WEIGHTS:
    free(m->u.weights.location);
    cJSON_Delete(m->u.weights.mirrors);
    break;
  case LT_MSG_ABORT: free(m->u.abort.reason); break;
  case LT_MSG_ERROR: free(m->u.error.message); break;
  case LT_MSG_BYE: free(m->u.bye.reason); break;
  default: break;
  }
  memset(m, 0, sizeof *m);
}

void lt_frames_free(lt_frames_t *fr) {
  for (int i = 0; i < fr->n; i++)
    if (fr->f[i].owned) free(fr->f[i].data);
  fr->n = 0;
}

void lt_task_settings(const lt_config_t *cfg, lt_task_t *k) {
  *k = (lt_task_t){.session = "",
                   .temperature = lt_config_num(cfg, "rollout.temperature"),
                   .top_p = lt_config_num(cfg, "rollout.top_p"),
                   .top_k = (int)lt_config_int(cfg, "rollout.top_k"),
                   .max_new_tokens = (int)lt_config_int(cfg, "rollout.max_new_tokens"),
                   .max_turns = (int)lt_config_int(cfg, "rollout.max_turns"),
                   .max_context = (int)lt_config_int(cfg, "rollout.max_context")};
}
