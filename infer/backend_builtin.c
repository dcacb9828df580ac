/* The builtin engine as a worker backend. */
#include <stdlib.h>
#include <string.h>

#include "infer/internal.h"
#include "util/error.h"

static int b_init(lt_backend_t *b, const lt_backend_opts_t *o) {
  lt_engine_opts_t eo = {
      .device = o->device, .threads = o->threads, .max_sessions = o->max_sessions, .max_context = o->max_context};
  lt_engine_t *e;
  int rc = lt_engine_load(o->model_dir, &eo, &e);
  if (rc < 0) return rc;
  lt_engine_info_t info;
  lt_engine_info(e, &info);
  b->state = e;
  b->tok = lt_engine_tokenizer(e);
  b->info.vocab = info.vocab;
  b->info.routing_layers = info.moe_layers;
  b->info.routing_k = info.topk;
  b->info.routing_experts = info.experts;
  b->info.max_context = info.max_context;
  b->info.support_known = 1;
  return 0;
}

static void b_fini(lt_backend_t *b) { lt_engine_free(b->state); }

static int b_open(lt_backend_t *b, lt_gen_t *g, uint64_t seed) {
  lt_session_t *s;
  int rc = lt_session_open(b->state, &s);
  if (rc < 0) return rc;
  lt_session_seed(s, seed);
  g->impl = s;
  return 0;
}

static void b_close(lt_gen_t *g) { lt_session_close(g->impl); }

static int b_prefill(lt_gen_t *g) {
  size_t R = (size_t)g->b->info.routing_layers * (size_t)g->b->info.routing_k * (size_t)g->nappend;
  free(g->pre_rids);
  free(g->pre_rprobs);
  g->pre_rids = NULL;
  g->pre_rprobs = NULL;
  if (R && (!(g->pre_rids = malloc(sizeof *g->pre_rids * R)) || !(g->pre_rprobs = malloc(sizeof *g->pre_rprobs * R))))
    return lt_error_set(LT_ENOMEM, "backend: out of memory");
  return lt_session_prefill(g->impl, g->append, g->nappend, g->pre_rids, g->pre_rprobs);
}

static int b_decode(lt_backend_t *b, lt_gen_t **gens, int n) {
  if (n > 256) return lt_error_set(LT_EINVAL, "backend: batch of %d sessions", n);
  lt_session_t *ss[256] = {0};
  lt_sample_t out[256];
  size_t R = (size_t)b->info.routing_layers * (size_t)b->info.routing_k;
  uint16_t *rids = R ? malloc(sizeof *rids * R * (size_t)n) : NULL;
  float *rprobs = R ? malloc(sizeof *rprobs * R * (size_t)n) : NULL;
  if (R && (!rids || !rprobs)) {
    free(rids), free(rprobs);
    return lt_error_set(LT_ENOMEM, "backend: out of memory");
  }
  for (int i = 0; i < n; i++) {
    ss[i] = gens[i]->impl;
    lt_session_want_top(ss[i], gens[i]->want_top);
  }
  int rc = lt_engine_decode(b->state, ss, n, &gens[0]->sp, out, rids, rprobs);
  for (int i = 0; i < n && rc == 0; i++) {
    rc = lt__gen_push(gens[i], out[i].token, out[i].logprob, out[i].support, lt_session_support_ids(ss[i]),
                      R ? rids + i * R : NULL, R ? rprobs + i * R : NULL);
    const int32_t *ti;
    const float *tl;
    gens[i]->ntop = lt_session_top(ss[i], &ti, &tl);
    memcpy(gens[i]->top_ids, ti, sizeof *ti * (size_t)gens[i]->ntop);
    memcpy(gens[i]->top_lps, tl, sizeof *tl * (size_t)gens[i]->ntop);
  }
  free(rids);
  free(rprobs);
  return rc;
}

static int b_reload(lt_backend_t *b, const char *dir, const char *sha) { return lt_engine_reload(b->state, dir, sha); }

static int b_adapter_load(lt_backend_t *b, const char *name, const char *dir) {
  return lt_engine_adapter_load(b->state, name, dir);
}

static int b_adapter_unload(lt_backend_t *b, const char *name) { return lt_engine_adapter_unload(b->state, name); }

static int b_gen_adapter(lt_gen_t *g, const char *name) { return lt_session_adapter(g->impl, name); }

const lt_backend_impl_t lt__backend_builtin = {b_init,   b_fini,   b_open,         b_close,          b_prefill,
                                               b_decode, b_reload, b_adapter_load, b_adapter_unload, b_gen_adapter};
