/* `longtail retrain`: a run's learner steps trained again, offline, through the learner driver itself
 * (train/learner.c with lt_train_opts_t.source): each step on exactly the trajectories the run's buffer says it
 * consumed, from the run's starting policy, under the run's config.  Without --set every published version is
 * checked against the run's, bit for bit; with --set the same batches train under other choices (docs/replay.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "learner/dist.h"
#include "learner/lora.h"
#include "learner/ops.h"
#include "learner/safetensors.h"
#include "train/internal.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/time.h"

int lt__retrain_batch(lt_buffer_t *src, int64_t step, uint64_t seed, int64_t **out) {
  *out = NULL;
  int64_t *ids = NULL, *q = NULL, *miss = NULL;
  int n = 0, nq = 0, nm = 0;
  /* A member of a trained group gone from the buffer: the step would silently train on fewer. */
  int rc = lt_buffer_step_missing(src, step, &miss, &nm);
  if (rc == 0 && nm > 0)
    rc = lt_error_set(LT_ECORRUPT, "the trajectory of task %lld it trained on is not in the buffer (%d missing)",
                      (long long)miss[0], nm);
  if (rc == 0) rc = lt_buffer_step_batch(src, step, &ids, &n);
  if (rc == 0 && n == 0)
    rc = lt_error_set(LT_ECORRUPT,
                      "the buffer records no trajectory it trained on (they are gone, or the "
                      "guardrails.grad_spike guardrail rolled the step back: retrain does not replay rollbacks)");
  if (rc == 0) rc = lt_buffer_step_quarantined(src, step, &q, &nq);
  int64_t *all = rc == 0 ? realloc(ids, sizeof *ids * (size_t)(n + nq + 1)) : NULL;
  if (rc == 0 && !all) rc = lt_error_set(LT_ENOMEM, "retrain: out of memory");
  if (rc < 0) {
    free(ids), free(q), free(miss);
    return rc;
  }
  /* The learner shuffled the set it chose, quarantined members included, and packed the others in that order. */
  if (nq) memcpy(all + n, q, sizeof *q * (size_t)nq); /* q is NULL when none was quarantined */
  lt__batch_shuffle(all, n + nq, seed, step);
  int k = 0;
  for (int i = 0; i < n + nq; i++) {
    int bad = 0;
    for (int j = 0; j < nq && !bad; j++) bad = all[i] == q[j];
    if (!bad) all[k++] = all[i];
  }
  free(q), free(miss);
  *out = all;
  return k;
}

/* The first tensor whose bytes differ between two safetensors files, into name: 1, 0 when every tensor is equal
 * (only the header differs), or an error. */
static int tensor_differing(const char *a, const char *b, char *name, size_t cap) {
  lt_st_file_t *fa = NULL, *fb = NULL;
  int rc = lt_st_open(a, &fa);
  if (rc == 0) rc = lt_st_open(b, &fb);
  for (int i = 0; rc == 0 && i < fa->n; i++) {
    const lt_st_entry_t *ea = &fa->entries[i], *eb = lt_st_find(fb, ea->name);
    if (!eb || ea->dtype != eb->dtype || ea->end - ea->begin != eb->end - eb->begin ||
        memcmp(fa->data + ea->begin, fb->data + eb->begin, ea->end - ea->begin)) {
      snprintf(name, cap, "%s", ea->name);
      rc = 1;
    }
  }
  if (rc == 0 && fb->n != fa->n) rc = snprintf(name, cap, "(a tensor only the run's version has)") > 0;
  lt_st_close(fa);
  lt_st_close(fb);
  return rc;
}

typedef struct {
  lt_buffer_t *b;
  int64_t step, ms;
  int rc;
} sink_t;

static void put_metric(void *ud, const char *name, double v) {
  sink_t *s = ud;
  if (s->rc == 0) s->rc = lt_buffer_metric(s->b, s->step, name, v, s->ms);
}

/* DIR as a run folder of its own: config.json, checkpoints/, buffer.db with the config it trains under. */
static int open_out(const char *dir, const lt_config_t *cfg, const char *run, lt_buffer_t **out) {
  char p[4200];
  snprintf(p, sizeof p, "%s/buffer.db", dir);
  if (lt_fs_exists(p)) return lt_error_set(LT_EINVAL, "%s already holds a run: give --out a new directory", dir);
  snprintf(p, sizeof p, "%s/checkpoints", dir);
  int rc = lt_fs_mkdirs(p, 0755);
  char *txt = rc == 0 ? lt_config_dump(cfg) : NULL;
  if (rc == 0 && !txt) rc = lt_error_set(LT_ENOMEM, "retrain: out of memory");
  snprintf(p, sizeof p, "%s/config.json", dir);
  if (rc == 0) rc = lt_fs_write_atomic(p, txt, strlen(txt));
  snprintf(p, sizeof p, "%s/buffer.db", dir);
  if (rc == 0) rc = lt_buffer_open(p, LT_BUF_CREATE, out);
  if (rc == 0) rc = lt_buffer_meta_set(*out, "config", txt);
  /* Named after its folder: `compare RUN DIR` tells the two apart. */
  const char *slash = strrchr(dir, '/');
  if (rc == 0) rc = lt_buffer_meta_set(*out, "run", slash && slash[1] ? slash + 1 : dir);
  if (rc == 0) rc = lt_buffer_meta_set(*out, "retrained_from", run);
  free(txt);
  return rc;
}

/* What one written step leaves in DIR's buffer (the daemon's metrics and checkpoint row), in one transaction. */
static int record(lt_buffer_t *b, const lt_train_result_t *r) {
  int rc = lt_buffer_begin(b);
  if (rc < 0) return rc;
  sink_t s = {.b = b, .step = r->step, .ms = lt_time_wall_ms()};
  lt_train_result_metrics(r, put_metric, &s);
  if ((rc = s.rc) == 0) rc = lt_buffer_checkpoint(b, r->version, r->step, "weights", r->dir, r->sha);
  if (rc < 0) {
    lt_buffer_rollback(b);
    return rc;
  }
  return lt_buffer_commit(b);
}

/* Step `step`'s version evaluated as the run evaluated it (when it did), into DIR's eval/accuracy. */
static int evaluate(const lt_retrain_opts_t *o, const lt_config_t *cfg, lt_buffer_t *src, lt_buffer_t *ob, int64_t step,
                    const char *dir) {
  double acc;
  int rc = o->eval ? lt_buffer_metric_at(src, step, "eval/accuracy", &acc) : 0;
  if (rc <= 0) return rc;
  if ((rc = o->eval(o->ud, cfg, dir, step, &acc)) < 0)
    return lt_error_wrap(rc, "evaluating version %lld", (long long)step);
  return lt_buffer_metric(ob, step, "eval/accuracy", acc, lt_time_wall_ms());
}

/* Compares step r's weights with the run's version of it: 1 identical, 0 differs (res says where), or an error. */
static int compare(lt_buffer_t *src, const lt_train_result_t *r, lt_retrain_result_t *res) {
  lt_ckpt_row_t ck;
  int rc = lt_buffer_weights_at(src, r->version, &ck);
  if (rc < 0) return rc;
  if (rc == 0 || !ck.sha256[0])
    return lt_error_set(LT_ENOENT, "the run recorded no version %lld", (long long)r->version);
  if (!strcmp(ck.sha256, r->sha)) return 1;
  res->differs = r->step;
  snprintf(res->sha, sizeof res->sha, "%s", r->sha);
  snprintf(res->run_sha, sizeof res->run_sha, "%s", ck.sha256);
  char mine[4200], theirs[4200];
  const char *file = lt_model_weights_file(r->dir); /* an adapter's file in a LoRA run */
  snprintf(mine, sizeof mine, "%s/%s", r->dir, file);
  snprintf(theirs, sizeof theirs, "%s/%s", ck.path, file);
  /* The run keeps its last few versions only: older ones can be told apart by their hash alone. */
  if (lt_fs_exists(theirs) && (rc = tensor_differing(mine, theirs, res->tensor, sizeof res->tensor)) < 0) return rc;
  return 0;
}

static int run_config(lt_buffer_t *src, const char *path, const lt_retrain_opts_t *o, lt_config_t *cfg) {
  char *txt = lt_buffer_meta_get(src, "config");
  cJSON *root = txt ? cJSON_Parse(txt) : NULL;
  free(txt);
  if (!root) return lt_error_set(LT_ECORRUPT, "%s: the run's config is not recorded", path);
  return lt_config_from_json(cfg, root, o->sets, o->nsets, o->schemas, o->nschemas);
}

/* Under mpirun the learner ranks watch each other as the run's did (nothing on one rank). */
static int heartbeats(const lt_config_t *cfg) {
  double hb = (double)lt_config_int(cfg, "transport.heartbeat_ms") / 1000.0;
  return lt_dist_heartbeats(hb, hb * (double)lt_config_int(cfg, "transport.liveness"));
}

int lt_retrain_follow(const lt_retrain_opts_t *o) {
  char path[4200];
  snprintf(path, sizeof path, "%s/buffer.db", o->run);
  lt_buffer_t *src;
  lt_config_t cfg = {0};
  int rc = lt_buffer_open(path, LT_BUF_READONLY, &src);
  if (rc < 0) return rc;
  if ((rc = run_config(src, path, o, &cfg)) == 0) rc = heartbeats(&cfg);
  lt_buffer_close(src);
  if (rc == 0) rc = lt_train_follow(&cfg);
  lt_config_free(&cfg);
  return rc;
}

/* The run's BLAS kernel and thread count against this process's (learner.threads 0: every core, which another
 * machine may not have). */
static void warn_blas(lt_buffer_t *src, const lt_config_t *cfg) {
  char *blas = lt_buffer_meta_get(src, "learner_blas"), mine[640];
  lt_cpus_t cpus;
  lt_cpus_config(cfg, "learner.cpus", &cpus); /* checked when the config was loaded */
  snprintf(mine, sizeof mine, "%s; %d threads", lt_ops_blas(),
           lt_ops_threads((int)lt_config_int(cfg, "learner.threads"), &cpus));
  if (blas && strcmp(blas, mine))
    LT_WARN("retrain",
            "the run's learner ran on %s, this one on %s: its steps may not be reproduced bit for bit "
            "(OPENBLAS_CORETYPE picks a kernel, learner.threads the threads)",
            blas, mine);
  free(blas);
}

/* The run's starting policy (the SFT warm start's, when it had one: all the weights retrain needs) and the steps
 * to write, --steps within the run's. */
static int span(lt_buffer_t *src, const lt_retrain_opts_t *o, lt_ckpt_row_t *v0, int64_t *first, int64_t *last) {
  lt_ckpt_row_t vn;
  int rc = lt_buffer_weights(src, 1, v0);
  if (rc <= 0) return rc < 0 ? rc : lt_error_set(LT_ENOENT, "%s: no weights recorded", o->run);
  if (v0->version != 0 || !lt_fs_is_dir(v0->path))
    return lt_error_set(LT_ENOENT, "%s: the run's starting policy (version 0, %s) is gone", o->run, v0->path);
  if ((rc = lt_buffer_weights(src, 0, &vn)) < 0) return rc;
  if (vn.step == 0) return lt_error_set(LT_ENOENT, "%s: the run has no learner step to retrain", o->run);
  *first = o->first > 0 ? o->first : 1;
  *last = o->last > 0 && o->last < vn.step ? o->last : vn.step;
  if (*first > *last) return lt_error_set(LT_EINVAL, "--steps: the run has learner steps 1..%lld", (long long)vn.step);
  return 0;
}

int lt_retrain(const lt_retrain_opts_t *o, lt_retrain_result_t *res) {
  memset(res, 0, sizeof *res);
  char path[4200];
  snprintf(path, sizeof path, "%s/buffer.db", o->run);
  lt_buffer_t *src = NULL, *ob = NULL;
  lt_train_t *t = NULL;
  lt_config_t cfg = {0};
  lt_ckpt_row_t v0 = {0};
  /* Checked first, as every offline reader does: a damaged file is told apart from a changed run. */
  int rc = lt_buffer_open(path, LT_BUF_READONLY | LT_BUF_CHECK, &src);
  if (rc == 0) rc = run_config(src, path, o, &cfg);
  if (rc == 0) rc = heartbeats(&cfg);
  if (rc == 0) warn_blas(src, &cfg);
  int64_t first = 0, last = 0;
  if (rc == 0) rc = span(src, o, &v0, &first, &last);
  if (rc == 0) rc = open_out(o->out, &cfg, o->run, &ob);
  if (rc == 0) rc = lt_buffer_checkpoint(ob, 0, 0, "weights", v0.path, v0.sha256);
  if (rc == 0 && first == 1) rc = evaluate(o, &cfg, src, ob, 0, v0.path);
  lt_train_opts_t to = {.cfg = &cfg, .run_dir = o->out, .weights_dir = v0.path, .group_size = 1, .source = src};
  if (rc == 0) to.group_size = (int)lt_config_int(&cfg, "scheduler.group_size");
  if (rc == 0) rc = lt_train_open(&to, &t);
  for (int64_t s = 1; rc == 0 && s <= last; s++) {
    lt_train_result_t r;
    int got = lt_train_step(t, 1, &r);
    if (got <= 0) {
      rc = got < 0 ? got : lt_error_set(LT_EINVAL, "nothing to train on");
      lt_error_wrap(rc, "step %lld", (long long)s);
      break;
    }
    int same = -1;
    if (s >= first) {
      double run_s;
      res->learner_s += r.step_s;
      if (lt_buffer_metric_at(src, s, "learner/step_s", &run_s) > 0) res->run_learner_s += run_s;
      res->steps++;
      if ((rc = record(ob, &r)) == 0 && o->nsets == 0 && (same = compare(src, &r, res)) < 0) rc = same;
      if (rc < 0) lt_error_wrap(rc, "step %lld", (long long)s);
      else if (o->step) o->step(o->ud, &r, same);
      if (rc == 0) rc = evaluate(o, &cfg, src, ob, s, r.dir);
    }
    lt_train_result_free(&r);
    if (same == 0) break; /* the first step that differs is the one to look at */
  }
  lt_train_close(t);
  /* The other learner ranks stop even when no step ran. */
  int stop = lt_train_stop_ranks();
  if (rc == 0 && stop < 0) rc = stop;
  lt_buffer_close(ob);
  lt_buffer_close(src);
  lt_config_free(&cfg);
  return rc < 0 ? lt_error_wrap(rc, "retrain %s", o->run) : 0;
}
