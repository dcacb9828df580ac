/* `longtail stats RUN_DIR|DB [--json]`: a run's state from its buffer, live or
 * finished (read-only: it never blocks the daemon's writer). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buffer/buffer.h"
#include "cli/commands.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/time.h"

static int eval_row(const char *name, int64_t step, double value, void *ud) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "step", (double)step);
  cJSON_AddNumberToObject(o, "accuracy", value);
  cJSON_AddItemToArray(ud, o);
  return 0;
}

/* weights/lag/<worker>: the last value of each (the series comes by name, then step and time). */
static int lag_row(const char *name, int64_t step, double value, void *ud) {
  cJSON *o = ud, *old = cJSON_GetObjectItemCaseSensitive(o, name + 12);
  if (old) cJSON_SetNumberValue(old, value);
  else cJSON_AddNumberToObject(o, name + 12, value);
  return 0;
}

/* Weight distribution (docs/operations.md): the daemon's bytes per version, publish → last worker, and each
 * worker's lag in versions; NULL when the run recorded none of it. */
static cJSON *weights_stats(lt_buffer_t *b) {
  double sent = 0, p50 = 0, pmax = 0;
  int64_t nsent = 0, nprop = 0, st;
  lt_buffer_metric_mean(b, "weights/bytes_sent_per_version", LT_SPAN_ALL, 0, &sent, &nsent);
  double unused;
  lt_buffer_metric_mean(b, "weights/propagation_s", LT_SPAN_ALL, 0, &unused, &nprop);
  lt_buffer_metric_edge(b, "weights/propagation_p50_s", LT_SPAN_LAST, &p50, &st);
  lt_buffer_metric_edge(b, "weights/propagation_max_s", LT_SPAN_LAST, &pmax, &st);
  cJSON *lag = cJSON_CreateObject();
  lt_buffer_metric_series(b, "weights/lag/*", lag_row, lag);
  if (!nsent && !nprop && !lag->child) {
    cJSON_Delete(lag);
    return NULL;
  }
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "bytes_sent_per_version", nsent ? sent : 0);
  cJSON *p = cJSON_AddObjectToObject(o, "propagation_s");
  cJSON_AddNumberToObject(p, "p50", p50);
  cJSON_AddNumberToObject(p, "max", pmax);
  cJSON_AddNumberToObject(p, "versions", (double)nprop);
  cJSON_AddItemToObject(o, "lag", lag);
  return o;
}

static double num(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

/* The folder of a buffer.db given by its path. */
static const char *dirname_of(const char *path, char *out, size_t cap) {
  const char *slash = strrchr(path, '/');
  snprintf(out, cap, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
  return out;
}

/* Counts by status and their total (every status present, 0 when the run has none yet). */
static cJSON *counts(const char *const *keys, const int64_t *n, int nkeys) {
  cJSON *o = cJSON_CreateObject();
  double total = 0;
  for (int i = 0; i < nkeys; i++) total += (double)n[i];
  cJSON_AddNumberToObject(o, "total", total);
  for (int i = 0; i < nkeys; i++) cJSON_AddNumberToObject(o, keys[i], (double)n[i]);
  return o;
}

int lt_cmd_stats(int argc, char **argv) {
  lt_arg_t args[] = {{.name = "--json", .kind = LT_ARG_FLAG, .help = "one JSON object instead of the table"},
                     LT_CLI_CHECK_ARG};
  lt_cmd_args_t c = {.command = "stats",
                     .usage = "RUN_DIR|DB [--json] [--check]",
                     .summary =
                         "Shows a run's policy version, learner step, tasks, trajectories by status, mean "
                         "reward, workers and evaluations. Works on a live run.",
                     .args = args,
                     .nargs = 2,
                     .min_pos = 1,
                     .max_pos = 1};
  int rc = lt_args_parse(&c, argc, argv);
  if (rc) return rc == 1 ? 0 : rc;
  lt_buffer_t *b;
  char run[128], run_dir[4096];
  if ((rc = lt_cli_open_run("stats", c.pos[0], lt_args_flag(&c, "--check"), &b, run, sizeof run))) return rc;
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "run", run);
  int64_t dups = lt_buffer_counter(b, "duplicates_rejected");
  lt_ckpt_row_t ck = {0}; /* no weights recorded yet: version 0, step 0 */
  lt_buffer_weights(b, 0, &ck);
  cJSON_AddNumberToObject(o, "policy_version", (double)ck.version);
  cJSON_AddNumberToObject(o, "learner_step", (double)ck.step);
  static const char *tk[] = {"queued", "dispatched", "done", "failed"};
  int64_t tn[4], rn[LT_SAMPLE_NSTATES];
  for (int i = 0; i < 4; i++) tn[i] = lt_buffer_count_tasks(b, (lt_task_status)i);
  cJSON_AddItemToObject(o, "tasks", counts(tk, tn, 4));
  for (int i = 0; i < LT_SAMPLE_NSTATES; i++) rn[i] = lt_buffer_count_status(b, (lt_sample_state)i);
  const char *rk[LT_SAMPLE_NSTATES];
  for (int i = 0; i < LT_SAMPLE_NSTATES; i++)
    rk[i] = lt_sample_state_name((lt_sample_state)i); /* every state, named once */
  cJSON *tr = counts(rk, rn, LT_SAMPLE_NSTATES);
  cJSON_AddNumberToObject(tr, "duplicates_rejected", (double)dups);
  cJSON_AddItemToObject(o, "trajectories", tr);
  double reward = lt_buffer_reward_mean(b);
  cJSON_AddNumberToObject(o, "reward_mean", reward);
  /* Alive: seen within the liveness window of the run's heartbeat settings. */
  double hb = 1000, live = 5;
  char *cfgtxt = lt_buffer_meta_get(b, "config");
  cJSON *cfg = NULL;
  if (cfgtxt && lt_json_parse(cfgtxt, strlen(cfgtxt), "config", &cfg) == 0) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(cfg, "transport");
    if (num(t, "heartbeat_ms") > 0) hb = num(t, "heartbeat_ms");
    if (num(t, "liveness") > 0) live = num(t, "liveness");
  }
  cJSON_Delete(cfg);
  free(cfgtxt);
  double seen = (double)lt_buffer_count_workers(b, INT64_MIN);
  int64_t alive = 0;
  /* Alive: heard from within liveness (the daemon refreshes last_ms every
   * 5 s), not gone since, and a daemon still holds the run (no one hears
   * heartbeats after it stopped). */
  char lock[4200];
  if (lt_fs_is_dir(c.pos[0])) snprintf(lock, sizeof lock, "%s/daemon.lock", c.pos[0]);
  else lt_path_join(lock, sizeof lock, dirname_of(c.pos[0], run_dir, sizeof run_dir), "daemon.lock");
  if (lt_fs_lock_held(lock) == 1) alive = lt_buffer_workers_alive(b, lt_time_wall_ms() - (int64_t)(hb * live) - 5000);
  cJSON *w = cJSON_AddObjectToObject(o, "workers");
  cJSON_AddNumberToObject(w, "seen", seen);
  cJSON_AddNumberToObject(w, "alive", (double)alive);
  cJSON *ev = cJSON_AddArrayToObject(o, "eval");
  lt_buffer_metric_series(b, "eval/accuracy", eval_row, ev);
  cJSON *wt = weights_stats(b);
  if (wt) cJSON_AddItemToObject(o, "weights", wt);
  if ((rc = lt_cli_close_run("stats", b, 0))) {
    cJSON_Delete(o);
    return rc;
  }
  if (lt_args_flag(&c, "--json")) {
    char *s = cJSON_PrintUnformatted(o);
    printf("%s\n", s ? s : "{}");
    free(s);
  } else {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "tasks");
    printf("run             %s\n", cJSON_GetObjectItemCaseSensitive(o, "run")->valuestring);
    printf("policy version  %.0f (learner step %.0f)\n", num(o, "policy_version"), num(o, "learner_step"));
    printf("tasks           %.0f: %.0f queued, %.0f dispatched, %.0f done, %.0f failed\n", num(t, "total"),
           num(t, "queued"), num(t, "dispatched"), num(t, "done"), num(t, "failed"));
    printf(
        "trajectories    %.0f: %.0f ready, %.0f consumed, %.0f stale, %.0f filtered, %.0f failed, %.0f eval, "
        "%.0f masked; %.0f duplicates rejected\n",
        num(tr, "total"), num(tr, "ready"), num(tr, "consumed"), num(tr, "stale"), num(tr, "filtered"),
        num(tr, "failed"), num(tr, "eval"), num(tr, "masked"), num(tr, "duplicates_rejected"));
    printf("reward mean     %.4f\n", reward);
    printf("workers         %.0f seen, %lld alive\n", seen, (long long)alive);
    printf("eval (pass@1)  ");
    for (const cJSON *e = ev->child; e; e = e->next)
      printf(" step %.0f: %.1f%%%s", num(e, "step"), 100 * num(e, "accuracy"), e->next ? "," : "");
    printf("%s\n", ev->child ? "" : " none yet");
    if (wt) {
      const cJSON *p = cJSON_GetObjectItemCaseSensitive(wt, "propagation_s");
      printf(
          "weights         %.0f versions reached every live worker (publish → last worker: p50 %.2f s, max %.2f s); "
          "%.1f MB sent per version by the daemon; lag:",
          num(p, "versions"), num(p, "p50"), num(p, "max"), num(wt, "bytes_sent_per_version") / 1e6);
      int lagging = 0;
      for (const cJSON *l = cJSON_GetObjectItemCaseSensitive(wt, "lag")->child; l; l = l->next)
        if (l->valuedouble > 0) {
          printf(" %s %.0f", l->string, l->valuedouble);
          lagging++;
        }
      printf("%s\n", lagging ? "" : " none");
    }
  }
  cJSON_Delete(o);
  return 0;
}
