/* What the learner computed for each token of the trajectories it trained (lt_token_values_t), stored through
 * the buffer (its token_values table, docs/buffer.md) for the web console's inspector: by the step driver
 * after each step, and by `replay --fill-token-values` for runs that have none. */
#include <stdio.h>
#include <stdlib.h>

#include "train/internal.h"
#include "util/error.h"

void lt__loss_json(const lt_loss_cfg_t *c, char *out, size_t cap) {
  snprintf(out, cap,
           "{\"objective\":\"%s\",\"token_bounds\":[%g,%g],\"traj_bounds\":[%g,%g],\"clip\":[%g,%g],"
           "\"tis_cap\":%g,\"delta\":%g}",
           lt_objective_name(c->obj), (double)c->tok_lo, (double)c->tok_hi, (double)c->traj_lo, (double)c->traj_hi,
           (double)c->clip_lo, (double)c->clip_hi, (double)c->tis_cap, (double)c->delta);
}

int lt__token_values_store(lt_buffer_t *b, const lt__packed_t *p, const lt_token_values_t *v, int64_t step,
                           int recomputed, const char *loss_json) {
  int ntraj = 0;
  for (int s = 0; s < p->n; s = lt_traj_end(p->traj, p->n, s)) ntraj++;
  lt_token_values_row_t *rows = calloc((size_t)(ntraj ? ntraj : 1), sizeof *rows);
  int32_t *spans = malloc(sizeof(int32_t) * 2 * (size_t)(p->n ? p->n : 1));
  if (!rows || !spans) {
    free(rows);
    free(spans);
    return lt_error_set(LT_ENOMEM, "token values: out of memory");
  }
  int k = 0;
  for (int s0 = 0, s1; s0 < p->n; s0 = s1, k++) {
    s1 = lt_traj_end(p->traj, p->n, s0);
    int a = p->start[s0], traj_ok = 0;
    for (int s = s0; s < s1; s++) {
      spans[2 * s] = p->off[s];
      spans[2 * s + 1] = p->start[s + 1] - p->start[s];
    }
    for (int t = a; t < p->start[s1]; t++) traj_ok |= (v->flags[t] & LT_TOKV_TRAJ_OK) != 0;
    rows[k] = (lt_token_values_row_t){.task_id = p->ids[s0],
                                      .step = step,
                                      .recomputed = recomputed,
                                      .loss = loss_json,
                                      .traj_ratio = v->traj_ratio[s0],
                                      .traj_ok = traj_ok,
                                      .ntokens = p->tlen[s0],
                                      .nspans = s1 - s0,
                                      .spans = spans + 2 * s0,
                                      .ratio = v->ratio + a,
                                      .logp_old = v->logp_old + a,
                                      .adv = v->adv + a,
                                      .entropy = v->entropy + a,
                                      .flags = v->flags + a};
  }
  int rc = lt_buffer_token_values_put(b, rows, ntraj);
  free(rows);
  free(spans);
  return rc;
}
