/* Evaluation rounds: when one runs (at the start, every eval.every learner steps, and once at the end), its
 * held-out prompts (eval.prompts, the same problems every round so that rounds compare), the learner held
 * while it runs so that every held-out sample comes from the policy being evaluated, pass@1 from each result,
 * and eval/accuracy (and eval/accuracy/<domain>) recorded for that policy's step. */
#include <stdio.h>
#include <string.h>

#include "orchestrator/internal.h"
#include "util/error.h"
#include "util/log.h"

/* A round of held-out prompts on the current policy, the learner held meanwhile. */
static void eval_start(lt_daemon_t *d) {
  if (d->eval_round >= 0 || d->stopping) return;
  d->eval_round = d->step;
  d->eval_total = d->eval_correct = d->eval_pending = 0;
  int n = (int)lt_config_int(d->cfg, "eval.prompts"), ndom = lt_envs_count(d->envs);
  memset(d->eval_dom, 0, (size_t)ndom * sizeof *d->eval_dom);
  for (int i = 0; i < n; i++)
    if (lt__prompt_create(d, i % ndom, 1, 1) < 0) {
      LT_ERROR("eval", "%s", lt_error_msg());
      break;
    }
  lt__event(d, "eval_start", "step %lld, %d held-out prompts", (long long)d->step, d->eval_total);
  if (d->eval_pending > 0) lt__trainer_pause(d, 1);
  else d->eval_round = -1;
}

void lt__eval_task_done(lt_daemon_t *d, int dom, int correct) {
  d->eval_pending--;
  d->eval_correct += correct;
  if (dom >= 0) d->eval_dom[dom][0] += correct, d->eval_dom[dom][1]++;
  if (d->eval_pending > 0 || d->eval_round < 0) return;
  double acc = d->eval_total ? (double)d->eval_correct / d->eval_total : 0;
  int64_t saved = d->step;
  d->step = d->eval_round; /* the metric belongs to the policy that was evaluated */
  lt__metric(d, "eval/accuracy", acc);
  for (int i = 0; i < lt_envs_count(d->envs); i++) {
    char name[160];
    snprintf(name, sizeof name, "eval/accuracy/%s", lt_envs_name(d->envs, i));
    if (d->eval_dom[i][1]) lt__metric(d, name, (double)d->eval_dom[i][0] / d->eval_dom[i][1]);
  }
  d->step = saved;
  d->last_accuracy = acc;
  lt__event(d, "eval", "step %lld: pass@1 %.3f on %d held-out prompts", (long long)d->eval_round, acc, d->eval_total);
  LT_INFO("eval", "step %lld: held-out accuracy %.1f%% (%d/%d)", (long long)d->eval_round, 100 * acc, d->eval_correct,
          d->eval_total);
  d->eval_round = -1;
  lt__trainer_pause(d, 0);
  lt__check_done(d);
}

/* The first round, at the start of a fresh run (a resumed one waits for its next step). */
void lt__eval_first(lt_daemon_t *d) {
  d->eval_next = d->step + d->eval_every;
  if (d->eval_every > 0 && !d->o.resume) eval_start(d);
}

void lt__eval_after_step(lt_daemon_t *d) {
  if (d->eval_every > 0 && d->step >= d->eval_next && !(d->steps && d->step >= d->steps)) {
    d->eval_next = d->step + d->eval_every;
    eval_start(d);
  }
}

int lt__eval_last(lt_daemon_t *d) {
  if (d->eval_every <= 0 || d->eval_next > d->step) return 0; /* this step was just evaluated */
  d->eval_next = d->step + 1;
  eval_start(d);
  return 1;
}

/* pass@1 credit: the domain's success at its envs.<d>.pass_threshold (lt_traj_correct). */
int lt__eval_passed(const lt_daemon_t *d, int dom, const lt_traj_t *t) {
  return lt_traj_correct(t, lt_envs_pass_threshold(d->envs, dom));
}
