/* `longtail train CONFIG`: the RL training daemon, and the summary and plot a
 * person reads when it ends. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/commands.h"
#include "learner/dist.h"
#include "learner/ranks.h"
#include "orchestrator/daemon.h"
#include "rewards/reward.h"
#include "train/train.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/log.h"
#include "util/time.h"

/* A metric's mean over all, or the first or last n, of its values; -1 where the run has none. */
static double mean_or_none(lt_buffer_t *b, const char *name, lt_span_t span, int n) {
  double m;
  int64_t count;
  return lt_buffer_metric_mean(b, name, span, n, &m, &count) == 0 && count > 0 ? m : -1;
}

void lt_cli_summarize(const char *command, const char *run_dir, double wall_s, int plotted, cJSON *extra) {
  lt_buffer_t *b;
  char name[128];
  if (lt_cli_open_run(command, run_dir, 0, &b, name, sizeof name)) {
    cJSON_Delete(extra);
    return;
  }
  double steps[1] = {-1}, trajs[2], e0[2] = {-1, -1}, e1[2] = {-1, -1}, r0[1], r1[1], tok[1];
  lt_ckpt_row_t ck;
  if (lt_buffer_weights(b, 0, &ck) > 0) steps[0] = (double)ck.step;
  int64_t ntraj = 0, ntrunc = 0, at;
  lt_buffer_traj_totals(b, &ntraj, &ntrunc);
  /* A retrained run stores no trajectories of its own: what its steps trained on. */
  double trained;
  int64_t nsteps = 0;
  int retrained = ntraj == 0 &&
                  lt_buffer_metric_mean(b, "batch/trajectories", LT_SPAN_ALL, 0, &trained, &nsteps) == 0 && nsteps > 0;
  if (retrained) ntraj = (int64_t)(trained * (double)nsteps + 0.5);
  trajs[0] = (double)ntraj, trajs[1] = (double)ntrunc;
  if (lt_buffer_metric_edge(b, "eval/accuracy", LT_SPAN_FIRST, &e0[0], &at) > 0) e0[1] = (double)at;
  if (lt_buffer_metric_edge(b, "eval/accuracy", LT_SPAN_LAST, &e1[0], &at) > 0) e1[1] = (double)at;
  r0[0] = mean_or_none(b, "reward/mean", LT_SPAN_FIRST, 3);
  r1[0] = mean_or_none(b, "reward/mean", LT_SPAN_LAST, 3);
  tok[0] = mean_or_none(b, "throughput/gen_tokens_per_s", LT_SPAN_ALL, 0);
  lt_buffer_close(b);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "run", name);
  cJSON_AddNumberToObject(o, "wall_s", wall_s);
  cJSON_AddNumberToObject(o, "learner_steps", steps[0] < 0 ? 0 : steps[0]);
  cJSON_AddNumberToObject(o, "trajectories", trajs[0]);
  if (!retrained) cJSON_AddNumberToObject(o, "truncated", trajs[1] < 0 ? 0 : trajs[1]);
  for (cJSON *e = extra ? extra->child : NULL; e; e = e->next) cJSON_AddItemReferenceToObject(o, e->string, e);
  if (retrained)
    printf("\n== %s: %.0f learner steps on %.0f trajectories in %dm%02ds\n", run_dir, steps[0] < 0 ? 0 : steps[0],
           trajs[0], (int)wall_s / 60, (int)wall_s % 60);
  else
    printf("\n== %s: %.0f learner steps, %.0f trajectories (%.1f%% truncated) in %dm%02ds\n", run_dir,
           steps[0] < 0 ? 0 : steps[0], trajs[0], trajs[0] > 0 ? 100 * trajs[1] / trajs[0] : 0, (int)wall_s / 60,
           (int)wall_s % 60);
  if (e0[1] >= 0) {
    cJSON *e = cJSON_AddObjectToObject(o, "eval");
    cJSON_AddNumberToObject(e, "first_step", e0[1]);
    cJSON_AddNumberToObject(e, "first_accuracy", e0[0]);
    cJSON_AddNumberToObject(e, "last_step", e1[1]);
    cJSON_AddNumberToObject(e, "last_accuracy", e1[0]);
    printf("   held-out pass@1   %5.1f%% at step %.0f -> %5.1f%% at step %.0f  (%+.1f points)\n", 100 * e0[0], e0[1],
           100 * e1[0], e1[1], 100 * (e1[0] - e0[0]));
  }
  if (r0[0] >= 0) {
    cJSON_AddNumberToObject(o, "reward_first3", r0[0]);
    cJSON_AddNumberToObject(o, "reward_last3", r1[0]);
    printf("   training reward   %.3f (first 3 steps) -> %.3f (last 3 steps)\n", r0[0], r1[0]);
  }
  if (tok[0] >= 0) {
    cJSON_AddNumberToObject(o, "gen_tokens_per_s", tok[0]);
    printf("   generation        %.0f tokens/s on average\n", tok[0]);
  }
  if (plotted) printf("   plot              %s/plot.png\n", run_dir);
  printf("   console           longtail ui %s   (then open http://127.0.0.1:8300/)\n", run_dir);
  printf("   more              longtail stats %s; longtail plot %s --dashboard -o dash.png\n", run_dir, run_dir);
  char path[4200], *s = cJSON_Print(o);
  snprintf(path, sizeof path, "%s/summary.json", run_dir);
  if (!s || lt_fs_write_atomic(path, s, strlen(s)) < 0)
    fprintf(stderr, "longtail %s: warning: %s not written\n", command, path);
  free(s);
  cJSON_Delete(o);
  cJSON_Delete(extra);
}

/* Where the run lives: --run-dir DIR (which --resume needs to exist: created by a typo'd resume, it would only
 * hide the mistake), else run.root/<run.name, or the config file's name and the time>, with run.root/latest
 * pointing at it.  Created; its path goes to out. */
static int run_dir_of(const lt_config_t *cfg, const char *given, int resume, const char *config_path, char *out,
                      size_t cap) {
  if (given) {
    snprintf(out, cap, "%s", given);
    if (resume && !lt_fs_exists(out)) return lt_error_set(LT_ENOENT, "--resume: %s does not exist", out);
    return lt_fs_mkdirs(out, 0755);
  }
  const char *root = lt_config_str(cfg, "run.root"), *n = lt_config_str(cfg, "run.name");
  char name[256];
  if (n[0]) {
    snprintf(name, sizeof name, "%s", n);
  } else {
    const char *base = strrchr(config_path, '/');
    char stem[128];
    snprintf(stem, sizeof stem, "%s", base ? base + 1 : config_path);
    char *dot = strrchr(stem, '.');
    if (dot) *dot = 0;
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    snprintf(name, sizeof name, "%s-%04d%02d%02d-%02d%02d%02d", stem, tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
             tm.tm_hour, tm.tm_min, tm.tm_sec);
  }
  int rc = lt_path_join(out, cap, root, name);
  if (rc == 0) rc = lt_fs_mkdirs(out, 0755);
  if (rc < 0) return rc;
  char latest[4200];
  snprintf(latest, sizeof latest, "%s/latest", root);
  unlink(latest);
  if (symlink(name, latest) < 0) LT_WARN("train", "cannot update %s: %s", latest, strerror(errno));
  return 0;
}

int lt_cmd_train(int argc, char **argv) {
  lt_arg_t args[] = {
      {.name = "--run-dir",
       .kind = LT_ARG_VALUE,
       .metavar = "DIR",
       .help = "where the run lives (default: run.root/<name>, and runs/latest)"},
      {.name = "--resume", .kind = LT_ARG_FLAG, .help = "continue the run in --run-dir from its last checkpoint"},
      {.name = "--set", .kind = LT_ARG_MULTI, .metavar = "PATH=VALUE", .help = "override a config key"},
  };
  lt_cmd_args_t c = {.command = "train",
                     .usage = "CONFIG [--run-dir DIR] [--resume] [--set PATH=VALUE ...]",
                     .summary =
                         "Runs the training daemon: dispatches rollouts to workers (it starts "
                         "workers.spawn_local of them itself), buffers trajectories in RUN_DIR/buffer.db and "
                         "trains the policy. SIGINT/SIGTERM stop it cleanly; a second signal exits at once. "
                         "At the end it prints a summary (also RUN_DIR/summary.json) and draws RUN_DIR/plot.png.",
                     .args = args,
                     .nargs = 3,
                     .min_pos = 1,
                     .max_pos = 1};
  int rc = lt_args_parse(&c, argc, argv);
  if (rc) return rc == 1 ? 0 : rc;
  const char *run_dir = lt_args_str(&c, "--run-dir", NULL);
  if (lt_args_flag(&c, "--resume") && !run_dir) return lt_args_usage_error(&c, "--resume needs --run-dir");
  lt_config_t cfg;
  if ((rc = lt_cli_load_config("train", c.pos[0], lt_args_get(&c, "--set"), &cfg))) return rc;
  /* Learner ranks watch each other within the workers' liveness window. */
  double hb = (double)lt_config_int(&cfg, "transport.heartbeat_ms") / 1000.0;
  if ((rc = lt_dist_heartbeats(hb, hb * (double)lt_config_int(&cfg, "transport.liveness"))) < 0) {
    lt_config_free(&cfg);
    return lt_cli_fail("train", rc);
  }
  if (lt_dist_rank() > 0) {
    /* Under mpirun/srun: rank 0 is the daemon, this rank only learns. */
    rc = lt_train_follow(&cfg);
    lt_config_free(&cfg);
    return rc < 0 ? lt_cli_fail("train", rc) : 0;
  }
  char exe[4096];
  if ((rc = lt_fs_self_exe(exe, sizeof exe)) < 0) {
    lt_config_free(&cfg);
    return lt_cli_fail("train", rc);
  }
  char used[4096] = "";
  int resume = lt_args_flag(&c, "--resume");
  rc = run_dir_of(&cfg, run_dir, resume, c.pos[0], used, sizeof used);
  lt_daemon_opts_t o = {.reward_range = lt_reward_range,
                        .ui_tokenizer = lt_cli_run_tokenizer,
                        .cfg = &cfg,
                        .run_dir = used,
                        .resume = resume,
                        .self_exe = exe};
  double t0 = lt_time_mono_s();
  int code = rc < 0 ? lt_cli_fail("train", rc) : lt_daemon_run(&o);
  /* The other learner ranks stop even when the learner never started. */
  if (lt_ranks_stop() < 0) fprintf(stderr, "longtail train: stopping the other learner ranks: %s\n", lt_error_msg());
  int plot = lt_config_bool(&cfg, "monitor.plot");
  /* A multi-turn run's plot adds what shapes its rollouts: turns, truncation and staleness. */
  int npanels = lt_config_int(&cfg, "rollout.max_turns") > 1 ? 5 : 2;
  lt_config_free(&cfg);
  char db[4200];
  snprintf(db, sizeof db, "%s/buffer.db", used);
  if (!used[0] || !lt_fs_exists(db)) return code;
  int plotted = 0;
  if (plot) {
    static const char *const panels[] = {"reward/mean", "eval/accuracy", "rollout/turns_mean",
                                         "rollout/truncation_rate", "staleness/hist_*"};
    char png[4200];
    snprintf(png, sizeof png, "%s/plot.png", used);
    const char *runs[] = {used};
    /* A missing gnuplot or an empty run costs the picture, not the exit code. */
    plotted = lt_cli_plot("train", runs, 1, panels, npanels, used, png, 0, 0) == 0;
  }
  lt_cli_summarize("train", used, lt_time_mono_s() - t0, plotted, NULL);
  return code;
}
