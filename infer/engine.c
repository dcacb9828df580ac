/* The builtin inference engine on CPU: per-session KV caches, batched decode. */
#include "infer/engine.h"

#include <cblas.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "learner/lora.h"
#include "learner/model.h"
#include "text/tokenizer.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/sha256.h"

#define PREFILL_CHUNK 256

struct lt_engine {
  lt_model_t *m;
  lt_tokenizer_t *tok;
  lt_acts_t *acts;
  lt_engine_opts_t opts;
  float *logits;  /* [max(max_sessions, 1), V] */
  float *scratch; /* sampler: 2·V */
  lt_segment_t *segs;
  int open;            /* sessions open */
  char base[PATH_MAX]; /* the folder the base weights came from: an adapter of this base loads alone (docs/lora.md) */
  struct named *named; /* adapters loaded by name (lt_engine_adapter_load); m->lora is the version's own */
  lt_segment_t *gsegs; /* a decode step's sessions of one adapter */
  int *gidx;
};

/* An adapter a session asks for by name; freed when unloaded and no session uses it any more. */
typedef struct named {
  char name[128];
  lt_lora_t *l;
  int users;    /* sessions using it */
  int unloaded; /* its name is gone */
  struct named *next;
} named_t;

struct lt_session {
  lt_engine_t *e;
  float **k, **v; /* [layers][max_context, KV*hd] */
  int len;
  float *next; /* [V] logits for the next position, valid when has_next */
  int has_next;
  lt_rng_t rng;
  int32_t *support_ids; /* [V] set of the last sampled token */
  int want_top;         /* alternatives to keep per sampled token (top_logprobs) */
  int ntop;
  int32_t top_ids[LT_ENGINE_MAX_TOP];
  float top_lps[LT_ENGINE_MAX_TOP];
  named_t *adapter; /* the adapter it generates with, or NULL: the engine's own version */
};

static int cmp_desc(const void *a, const void *b) {
  float x = ((const float *)a)[0], y = ((const float *)b)[0];
  return x < y ? 1 : x > y ? -1 : 0;
}

void lt_sample_logits(const float *logits, int V, const lt_sampling_t *p, lt_rng_t *rng, float *scratch,
                      lt_sample_t *out) {
  float T = p->temperature > 0 ? p->temperature : 1.0f;
  float mx = logits[0];
  int arg = 0;
  for (int i = 1; i < V; i++)
    if (logits[i] > mx) mx = logits[i], arg = i;
  double sum = 0, ez = 0;
  for (int i = 0; i < V; i++) {
    double z = (logits[i] - mx) / T, e = exp(z);
    sum += e;
    ez += e * z;
  }
  double lse = log(sum);
  out->entropy = (float)(lse - ez / sum);
  if (p->temperature <= 0) { /* greedy */
    out->token = arg;
    out->logprob = (float)(-lse);
    out->support = 0;
    return;
  }
  int topk = p->top_k > 0 && p->top_k < V ? p->top_k : V;
  int32_t tok;
  int support;
  if (topk == V && p->top_p >= 1.0f) {
    double u = lt_rng_uniform(rng) * sum, acc = 0;
    tok = V - 1;
    for (int i = 0; i < V; i++) {
      acc += exp((logits[i] - mx) / T);
      if (acc > u) {
        tok = i;
        break;
      }
    }
    support = 0;
  } else {
    /* (probability, id) pairs sorted by probability: top-k, then top-p on the renormalised rest. */
    float *pr = scratch;
    for (int i = 0; i < V; i++) {
      pr[2 * i] = (float)(exp((logits[i] - mx) / T) / sum);
      memcpy(&pr[2 * i + 1], &i, sizeof i);
    }
    qsort(pr, (size_t)V, 2 * sizeof(float), cmp_desc);
    double mass = 0;
    for (int i = 0; i < topk; i++) mass += pr[2 * i];
    support = topk;
    if (p->top_p < 1.0f) {
      double acc = 0;
      for (int i = 0; i < topk; i++) {
        acc += pr[2 * i] / mass;
        if (acc >= p->top_p) {
          support = i + 1;
          break;
        }
      }
    }
    double kept = 0;
    for (int i = 0; i < support; i++) kept += pr[2 * i];
    double u = lt_rng_uniform(rng) * kept, acc = 0;
    int pick = support - 1;
    for (int i = 0; i < support; i++) {
      acc += pr[2 * i];
      if (acc > u) {
        pick = i;
        break;
      }
    }
    memcpy(&tok, &pr[2 * pick + 1], sizeof tok);
    /* The probability it was drawn with is the truncated, renormalised one
     * (seed 002 §3.1, Keep Sampling Mask); the ids let the learner rebuild
     * exactly this set instead of re-deriving it from its own logits. */
    if (support == V) support = 0; /* nothing was cut */
    else lse += log(kept);
  }
  out->token = tok;
  out->logprob = (float)((logits[tok] - mx) / T - lse);
  out->support = support;
}

void lt_sample_support_ids(const float *scratch, int support, int32_t *ids) {
  for (int i = 0; i < support; i++) memcpy(&ids[i], &scratch[2 * i + 1], sizeof(int32_t));
}

/* The folder whose model.safetensors a version's weights are: its own, or an adapter's base. */
static int weights_dir(const char *dir, char out[PATH_MAX]) {
  char base[4096];
  int rc = 0;
  if (strcmp(lt_model_weights_file(dir), "model.safetensors") && (rc = lt_lora_base_dir(dir, base, sizeof base)) == 0)
    dir = base;
  if (rc == 0 && !realpath(dir, out)) rc = lt_error_set(LT_ENOENT, "%s: %s", dir, strerror(errno));
  return rc;
}

int lt_engine_load(const char *dir, const lt_engine_opts_t *opts, lt_engine_t **out) {
  *out = NULL;
  if (opts->device && strcmp(opts->device, "cuda") == 0)
    return lt_error_set(
        LT_EUNSUPP,
        "engine: device 'cuda': the builtin engine generates on the CPU only (the CUDA learner trains; CUDA inference is not implemented yet)");
  lt_engine_t *e = calloc(1, sizeof *e);
  if (!e) return lt_error_set(LT_ENOMEM, "engine: out of memory");
  e->opts = *opts;
  if (e->opts.max_sessions < 1) e->opts.max_sessions = 1;
  int rc = lt_model_load(dir, &e->m);
  if (rc == 0) rc = weights_dir(dir, e->base);
  if (rc < 0) goto fail;
  if (e->m->cfg.critic) {
    rc = lt_error_set(LT_EINVAL, "%s: a value model (critic) cannot generate", dir);
    goto fail;
  }
  if (e->opts.max_context <= 0 || e->opts.max_context > e->m->cfg.max_pos) e->opts.max_context = e->m->cfg.max_pos;
  if ((rc = lt_tokenizer_for_model(dir, e->m->cfg.vocab, &e->tok)) < 0) goto fail;
  int maxtok = e->opts.max_sessions > PREFILL_CHUNK ? e->opts.max_sessions : PREFILL_CHUNK;
  if ((rc = lt_acts_create(&e->m->cfg, maxtok, e->opts.max_context, 0, &e->acts)) < 0) goto fail;
  int V = e->m->cfg.vocab;
  e->logits = malloc(sizeof(float) * (size_t)V * (size_t)e->opts.max_sessions);
  e->scratch = malloc(sizeof(float) * 2 * (size_t)V);
  e->segs = calloc((size_t)e->opts.max_sessions, sizeof *e->segs);
  e->gsegs = calloc((size_t)e->opts.max_sessions, sizeof *e->gsegs);
  e->gidx = calloc((size_t)e->opts.max_sessions, sizeof *e->gidx);
  if (!e->logits || !e->scratch || !e->segs || !e->gsegs || !e->gidx) {
    rc = lt_error_set(LT_ENOMEM, "engine: out of memory");
    goto fail;
  }
  if (e->opts.threads > 0) openblas_set_num_threads(e->opts.threads);
  *out = e;
  return 0;
fail:
  lt_engine_free(e);
  return rc;
}

void lt_engine_free(lt_engine_t *e) {
  if (!e) return;
  lt_model_free(e->m);
  lt_tokenizer_free(e->tok);
  lt_acts_free(e->acts);
  free(e->logits);
  free(e->scratch);
  free(e->segs);
  free(e->gsegs);
  free(e->gidx);
  while (e->named) {
    named_t *a = e->named;
    e->named = a->next;
    lt_lora_free(a->l);
    free(a);
  }
  free(e);
}

/* m's forward under adapter a (NULL: the version's own). */
static int forward_with(lt_engine_t *e, const named_t *a, const lt_segment_t *segs, int n, float *logits) {
  lt_lora_t *own = e->m->lora;
  if (a) e->m->lora = a->l;
  int rc = lt_model_forward_segments(e->m, e->acts, segs, n, logits);
  e->m->lora = own;
  return rc;
}

static named_t *named_find(const lt_engine_t *e, const char *name) {
  for (named_t *a = e->named; a; a = a->next)
    if (!a->unloaded && !strcmp(a->name, name)) return a;
  return NULL;
}

/* Frees an unloaded adapter once no session uses it. */
static void named_release(lt_engine_t *e, named_t *a) {
  if (!a->unloaded || a->users) return;
  for (named_t **p = &e->named; *p; p = &(*p)->next)
    if (*p == a) {
      *p = a->next;
      break;
    }
  lt_lora_free(a->l);
  free(a);
}

int lt_engine_adapter_load(lt_engine_t *e, const char *name, const char *dir) {
  if (!name[0] || strlen(name) >= sizeof e->named->name) return lt_error_set(LT_EINVAL, "adapter name: 1 to 127 bytes");
  if (named_find(e, name)) return lt_error_set(LT_EDUP, "the adapter '%s' is already loaded", name);
  if (!lt_lora_is_dir(dir)) return lt_error_set(LT_ENOENT, "%s: no adapter_config.json (not a LoRA adapter)", dir);
  named_t *a = calloc(1, sizeof *a);
  if (!a) return lt_error_set(LT_ENOMEM, "out of memory");
  int rc = lt_lora_load(dir, e->m, &a->l);
  if (rc < 0) {
    free(a);
    return rc;
  }
  snprintf(a->name, sizeof a->name, "%s", name);
  a->next = e->named;
  e->named = a;
  return 0;
}

int lt_engine_adapter_unload(lt_engine_t *e, const char *name) {
  named_t *a = named_find(e, name);
  if (!a) return lt_error_set(LT_ENOENT, "the adapter '%s' is not loaded", name);
  a->unloaded = 1;
  named_release(e, a);
  return 0;
}

int lt_engine_adapter_known(const lt_engine_t *e, const char *name) { return named_find(e, name) != NULL; }

void lt_engine_info(const lt_engine_t *e, lt_engine_info_t *info) {
  const lt_model_config_t *c = &e->m->cfg;
  info->vocab = c->vocab;
  info->layers = c->layers;
  info->moe_layers = lt_model_moe_layers(c);
  info->experts = c->experts;
  info->topk = info->moe_layers ? c->topk : 0;
  info->max_context = e->opts.max_context;
  info->params = (int64_t)e->m->nparams;
}

const struct lt_tokenizer *lt_engine_tokenizer(const lt_engine_t *e) { return e->tok; }

int lt_engine_reload(lt_engine_t *e, const char *dir, const char *sha256) {
  char path[4096];
  int rc = lt_path_join(path, sizeof path, dir, lt_model_weights_file(dir));
  if (rc < 0) return rc;
  if (sha256 && sha256[0]) {
    char got[65];
    if ((rc = lt_sha256_file(path, got)) < 0) return rc;
    if (strcmp(got, sha256) != 0)
      return lt_error_set(LT_ECORRUPT, "%s: sha256 %s does not match the announced %s", path, got, sha256);
  }
  lt_model_config_t c;
  if ((rc = lt_path_join(path, sizeof path, dir, "config.json")) < 0) return rc;
  if ((rc = lt_model_config_load(path, &c)) < 0) return rc;
  const lt_model_config_t *o = &e->m->cfg;
  if (c.vocab != o->vocab || c.hidden != o->hidden || c.layers != o->layers || c.experts != o->experts ||
      c.heads != o->heads || c.kv_heads != o->kv_heads || c.head_dim != o->head_dim || c.critic)
    return lt_error_set(LT_EINVAL, "%s: new weights have a different architecture", dir);
  /* A version switch within one base loads the adapter alone: the base's weights stay. */
  char base[PATH_MAX];
  if ((rc = weights_dir(dir, base)) < 0) return rc;
  if (strcmp(base, e->base)) {
    lt_model_detach_lora(e->m);
    if ((rc = lt_model_load_weights(e->m, base)) < 0) return rc;
    memcpy(e->base, base, sizeof base);
  }
  lt_lora_t *l = NULL;
  if (lt_lora_is_dir(dir) && (rc = lt_lora_load(dir, e->m, &l)) < 0) return rc;
  if (l) lt_model_attach_lora(e->m, l);
  else lt_model_detach_lora(e->m);
  return 0;
}

int lt_session_open(lt_engine_t *e, lt_session_t **out) {
  *out = NULL;
  if (e->open >= e->opts.max_sessions)
    return lt_error_set(LT_EBUSY, "engine: %d sessions already open (max_sessions)", e->open);
  const lt_model_config_t *c = &e->m->cfg;
  lt_session_t *s = calloc(1, sizeof *s);
  if (!s) return lt_error_set(LT_ENOMEM, "session: out of memory");
  s->e = e;
  size_t kv = (size_t)e->opts.max_context * (size_t)c->kv_heads * (size_t)c->head_dim;
  s->k = calloc((size_t)c->layers, sizeof *s->k);
  s->v = calloc((size_t)c->layers, sizeof *s->v);
  s->next = malloc(sizeof(float) * (size_t)c->vocab);
  s->support_ids = malloc(sizeof(int32_t) * (size_t)c->vocab);
  int ok = s->k && s->v && s->next && s->support_ids;
  for (int l = 0; l < c->layers && ok; l++)
    ok = (s->k[l] = malloc(sizeof(float) * kv)) && (s->v[l] = malloc(sizeof(float) * kv));
  lt_rng_seed(&s->rng, 0);
  e->open++;
  *out = s;
  if (!ok) {
    lt_session_close(s);
    *out = NULL;
    return lt_error_set(LT_ENOMEM, "session KV cache: out of memory");
  }
  return 0;
}

void lt_session_close(lt_session_t *s) {
  if (!s) return;
  int L = s->e->m->cfg.layers;
  for (int l = 0; l < L; l++) {
    if (s->k) free(s->k[l]);
    if (s->v) free(s->v[l]);
  }
  free(s->k);
  free(s->v);
  free(s->next);
  free(s->support_ids);
  s->e->open--;
  if (s->adapter) {
    s->adapter->users--;
    named_release(s->e, s->adapter);
  }
  free(s);
}

int lt_session_adapter(lt_session_t *s, const char *name) {
  named_t *a = name && name[0] ? named_find(s->e, name) : NULL;
  if (name && name[0] && !a) return lt_error_set(LT_ENOENT, "the adapter '%s' is not loaded", name);
  if (s->len) return lt_error_set(LT_EINVAL, "session: the adapter is chosen before its first token");
  if (a) a->users++;
  s->adapter = a;
  return 0;
}

void lt_session_seed(lt_session_t *s, uint64_t seed) { lt_rng_seed(&s->rng, seed); }

const int32_t *lt_session_support_ids(const lt_session_t *s) { return s->support_ids; }

int lt_session_len(const lt_session_t *s) { return s->len; }

void lt_session_want_top(lt_session_t *s, int k) {
  s->want_top = k < 0 ? 0 : k > LT_ENGINE_MAX_TOP ? LT_ENGINE_MAX_TOP : k;
  s->ntop = 0;
}

int lt_session_top(const lt_session_t *s, const int32_t **ids, const float **logprobs) {
  *ids = s->top_ids;
  *logprobs = s->top_lps;
  return s->ntop;
}

/* The most likely tokens of the distribution `o` was drawn from, with their
 * log-probabilities in it: within the distribution every logprob differs
 * from the sampled token's by (logit_j - logit_tok) / T, so no normaliser is
 * recomputed.  A truncated set (support > 0) is sorted already in scratch. */
static void keep_top(lt_session_t *s, const float *logits, const float *scratch, const lt_sampling_t *p,
                     const lt_sample_t *o, int V) {
  int k = s->want_top;
  float T = p->temperature > 0 ? p->temperature : 1.0f;
  s->ntop = 0;
  if (o->support > 0) {
    int m = k < o->support ? k : o->support;
    lt_sample_support_ids(scratch, m, s->top_ids);
    s->ntop = m;
  } else {
    for (int i = 0; i < V; i++) { /* insertion into the k best so far */
      int at = s->ntop;
      while (at > 0 && logits[s->top_ids[at - 1]] < logits[i]) at--;
      if (at >= k) continue;
      int last = s->ntop < k ? s->ntop : k - 1;
      memmove(&s->top_ids[at + 1], &s->top_ids[at], sizeof *s->top_ids * (size_t)(last - at));
      s->top_ids[at] = i;
      if (s->ntop < k) s->ntop++;
    }
  }
  for (int i = 0; i < s->ntop; i++) s->top_lps[i] = (logits[s->top_ids[i]] - logits[o->token]) / T + o->logprob;
}

int lt_session_prefill(lt_session_t *s, const int32_t *tokens, int n, uint16_t *rids, float *rprobs) {
  lt_engine_t *e = s->e;
  if (n <= 0) return 0;
  if (s->len + n > e->opts.max_context)
    return lt_error_set(LT_ERANGE, "session: %d + %d tokens exceed the context of %d", s->len, n, e->opts.max_context);
  int nml = lt_model_moe_layers(&e->m->cfg), K = e->m->cfg.topk;
  for (int off = 0; off < n; off += PREFILL_CHUNK) {
    int m = n - off < PREFILL_CHUNK ? n - off : PREFILL_CHUNK;
    size_t ro = (size_t)off * nml * K;
    lt_segment_t seg = {.tokens = tokens + off,
                        .n = m,
                        .pos0 = s->len,
                        .k = s->k,
                        .v = s->v,
                        .route_out_ids = rids && nml ? rids + ro : NULL,
                        .route_out_probs = rprobs && nml ? rprobs + ro : NULL};
    int rc = forward_with(e, s->adapter, &seg, 1, s->next);
    if (rc < 0) return rc;
    s->len += m;
  }
  s->has_next = 1;
  return 0;
}

int lt_engine_decode(lt_engine_t *e, lt_session_t *const *ss, int n, const lt_sampling_t *params, lt_sample_t *out,
                     uint16_t *rids, float *rprobs) {
  if (n > e->opts.max_sessions) return lt_error_set(LT_EINVAL, "decode: %d sessions exceed max_sessions", n);
  int V = e->m->cfg.vocab, nml = lt_model_moe_layers(&e->m->cfg), K = e->m->cfg.topk;
  for (int i = 0; i < n; i++) {
    lt_session_t *s = ss[i];
    if (!s->has_next) return lt_error_set(LT_EINVAL, "decode: session %d has no context (prefill first)", i);
    if (s->len + 1 > e->opts.max_context)
      return lt_error_set(LT_ERANGE, "decode: session %d is at the context limit (%d)", i, e->opts.max_context);
  }
  for (int i = 0; i < n; i++) {
    lt_session_t *s = ss[i];
    lt_sample_logits(s->next, V, params, &s->rng, e->scratch, &out[i]);
    lt_sample_support_ids(e->scratch, out[i].support, s->support_ids);
    if (s->want_top) keep_top(s, s->next, e->scratch, params, &out[i], V);
    size_t ro = (size_t)i * nml * K;
    e->segs[i] = (lt_segment_t){.tokens = &out[i].token,
                                .n = 1,
                                .pos0 = s->len,
                                .k = s->k,
                                .v = s->v,
                                .route_out_ids = rids && nml ? rids + ro : NULL,
                                .route_out_probs = rprobs && nml ? rprobs + ro : NULL};
  }
  /* One forward per adapter among the sessions (one in all when they share theirs). */
  for (int i = 0; i < n; i++) {
    int seen = 0;
    for (int j = 0; j < i && !seen; j++) seen = ss[j]->adapter == ss[i]->adapter;
    if (seen) continue;
    int g = 0;
    for (int j = i; j < n; j++)
      if (ss[j]->adapter == ss[i]->adapter) e->gidx[g] = j, e->gsegs[g++] = e->segs[j];
    int rc = forward_with(e, ss[i]->adapter, e->gsegs, g, e->logits);
    if (rc < 0) return rc;
    for (int k = 0; k < g; k++) {
      memcpy(ss[e->gidx[k]]->next, e->logits + (size_t)k * V, sizeof(float) * (size_t)V);
      ss[e->gidx[k]]->len++;
    }
  }
  return 0;
}
