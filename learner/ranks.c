/* Rank 0's commands to the other learner ranks: see ranks.h. */
#include "learner/ranks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "learner/dist.h"
#include "util/error.h"
#include "util/log.h"
#include "util/time.h"

enum { CMD_INIT = 1, CMD_STEP, CMD_SAVE, CMD_LOAD, CMD_SCALE_LR, CMD_NOOP, CMD_STOP };

/* One command; a step's arrays follow in their own broadcasts. */
typedef struct {
  int32_t op;
  int32_t nseq, ntok, route_len; /* CMD_STEP: sequences, tokens, route ids per token */
  int32_t has_support, has_route, has_kl, has_temp, has_skip;
  int32_t has_values; /* CMD_STEP: rank 0 collects token values, so every rank gathers the marks */
  int64_t nsids;      /* CMD_STEP: Keep-Sampling-Mask ids (Σ support), 0: none */
  double factor;      /* CMD_SCALE_LR */
  char path[4096];    /* CMD_INIT, CMD_SAVE, CMD_LOAD */
} cmd_t;

static int g_stopped;
static double g_last_sent;

static int send_cmd(cmd_t *c) {
  if (lt_dist_size() < 2 || g_stopped) return 0;
  g_last_sent = lt_time_mono_s();
  if (c->op == CMD_STOP) g_stopped = 1;
  return lt_dist_bcast(c, sizeof *c);
}

static int path_cmd(int op, const char *path) {
  cmd_t c = {.op = op};
  if (snprintf(c.path, sizeof c.path, "%s", path) >= (int)sizeof c.path)
    return lt_error_set(LT_EINVAL, "learner ranks: path too long: %s", path);
  return send_cmd(&c);
}

int lt_ranks_init(const char *policy_dir) { return path_cmd(CMD_INIT, policy_dir); }

int lt_ranks_keepalive(void) {
  if (lt_dist_size() < 2 || lt_time_mono_s() - g_last_sent < 5) return 0;
  cmd_t c = {.op = CMD_NOOP};
  return send_cmd(&c);
}

int lt_ranks_stop(void) {
  cmd_t c = {.op = CMD_STOP};
  return send_cmd(&c);
}

/* The batch's arrays, from rank 0 to all (receivers allocate them). */
static int bcast_batch(const cmd_t *c, lt_train_batch_t *b, void **own, int recv) {
  size_t n = (size_t)c->ntok, s = (size_t)c->nseq;
  struct {
    const void **p;
    size_t bytes;
    int on;
  } a[] = {
      {(const void **)&b->start, sizeof(int) * (s + 1), 1},
      {(const void **)&b->tokens, sizeof(int32_t) * n, 1},
      {(const void **)&b->logp_rollout, sizeof(float) * n, 1},
      {(const void **)&b->mask, n, 1},
      {(const void **)&b->support, sizeof(int32_t) * n, c->has_support},
      {(const void **)&b->support_ids, sizeof(int32_t) * (size_t)c->nsids, c->nsids > 0},
      {(const void **)&b->temperature, sizeof(float) * n, c->has_temp},
      {(const void **)&b->actor_skip, s, c->has_skip},
      {(const void **)&b->route_ids, sizeof(uint16_t) * n * (size_t)c->route_len, c->has_route},
      {(const void **)&b->reward, sizeof(double) * s, 1},
      {(const void **)&b->truncated, s, 1},
      {(const void **)&b->group, sizeof(int64_t) * s, 1},
      {(const void **)&b->kl_coef, sizeof(float) * s, c->has_kl},
  };
  for (size_t i = 0; i < sizeof a / sizeof a[0]; i++) {
    if (!a[i].on) {
      *a[i].p = NULL;
      continue;
    }
    if (recv) {
      if (!(own[i] = malloc(a[i].bytes + 1))) return lt_error_set(LT_ENOMEM, "learner rank: out of memory for a batch");
      *a[i].p = own[i];
    }
    int rc = lt_dist_bcast((void *)*a[i].p, a[i].bytes);
    if (rc < 0) return rc;
  }
  return 0;
}

int lt_ranks_step(lt_trainer_t *t, const lt_train_batch_t *b, lt_step_stats_t *st) {
  if (lt_dist_size() > 1) {
    const lt_model_config_t *mc = lt_trainer_model_config(t);
    cmd_t c = {.op = CMD_STEP,
               .nseq = b->nseq,
               .ntok = b->start[b->nseq],
               .has_support = b->support != NULL,
               .has_route = b->route_ids != NULL,
               .has_kl = b->kl_coef != NULL,
               .route_len = lt_model_moe_layers(mc) * mc->topk,
               .has_temp = b->temperature != NULL,
               .has_skip = b->actor_skip != NULL,
               .has_values = b->values != NULL};
    /* Every rank scores its share under the rollout's own sampling distribution (docs/losses.md). */
    for (int i = 0; b->support && b->support_ids && i < c.ntok; i++) c.nsids += b->support[i] > 0 ? b->support[i] : 0;
    lt_train_batch_t copy = *b;
    int rc = send_cmd(&c);
    if (rc == 0) rc = bcast_batch(&c, &copy, NULL, 0);
    if (rc < 0) return rc;
  }
  return lt_trainer_step(t, b, st);
}

int lt_ranks_save(lt_trainer_t *t, const char *dir) {
  int rc = path_cmd(CMD_SAVE, dir);
  return rc < 0 ? rc : lt_trainer_save(t, dir);
}

int lt_ranks_load(lt_trainer_t *t, const char *dir) {
  int rc = path_cmd(CMD_LOAD, dir);
  return rc < 0 ? rc : lt_trainer_load(t, dir);
}

int lt_ranks_scale_lr(lt_trainer_t *t, double factor) {
  cmd_t c = {.op = CMD_SCALE_LR, .factor = factor};
  int rc = send_cmd(&c);
  if (rc == 0) lt_trainer_scale_lr(t, factor);
  return rc;
}

/* Runs one received step on this rank's share. */
static int follow_step(lt_trainer_t *t, const cmd_t *c) {
  enum { NARR = 13 }; /* the arrays bcast_batch sends */
  void *own[NARR] = {0};
  lt_train_batch_t b = {.nseq = c->nseq};
  int rc = c->nseq > 0 && c->ntok >= 0 && c->route_len >= 0 && c->nsids >= 0
               ? 0
               : lt_error_set(LT_EPROTO, "learner rank: malformed step command");
  if (rc == 0) rc = bcast_batch(c, &b, own, 1);
  lt_token_values_t v = {0};
  if (rc == 0 && c->has_values && (rc = lt_token_values_alloc(&v, c->ntok, c->nseq)) == 0) b.values = &v;
  lt_step_stats_t st;
  if (rc == 0) rc = lt_trainer_step(t, &b, &st);
  lt_token_values_free(&v);
  for (int i = 0; i < NARR; i++) free(own[i]);
  return rc;
}

int lt_ranks_follow(lt_ranks_build_fn build, void *ud) {
  lt_trainer_t *t = NULL;
  int rc = 0;
  while (rc == 0) {
    cmd_t c;
    if ((rc = lt_dist_bcast(&c, sizeof c)) < 0) break;
    c.path[sizeof c.path - 1] = 0;
    if (c.op == CMD_STOP) break;
    if (c.op == CMD_NOOP) continue;
    if (c.op == CMD_INIT) {
      lt_trainer_free(t);
      t = NULL;
      rc = build(c.path, ud, &t);
      continue;
    }
    if (!t) {
      rc = lt_error_set(LT_EPROTO, "learner rank %d: command %d before the trainer was built", lt_dist_rank(), c.op);
      break;
    }
    switch (c.op) {
    case CMD_STEP: rc = follow_step(t, &c); break;
    case CMD_SAVE: rc = lt_trainer_save(t, c.path); break;
    case CMD_LOAD: rc = lt_trainer_load(t, c.path); break;
    case CMD_SCALE_LR: lt_trainer_scale_lr(t, c.factor); break;
    default: rc = lt_error_set(LT_EPROTO, "learner rank %d: unknown command %d", lt_dist_rank(), c.op);
    }
  }
  if (rc < 0) lt_error_wrap(rc, "learner rank %d of %d", lt_dist_rank(), lt_dist_size());
  lt_trainer_free(t);
  return rc;
}
