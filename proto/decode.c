/* Frames → message, validating everything before use. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/json.h"

typedef struct {
  const cJSON *h;
  const char *type;
  const cJSON *cur; /* the field found last */
} dec_t;

#define BAD(d, ...) lt_error_set(LT_EPROTO, __VA_ARGS__)

/* Fields are mostly asked for in the order the encoder wrote them, so the
 * search starts after the one found last: a header costs about one pass over
 * its fields instead of one per field (that was a sixth of decoding a TRAJ). */
static const cJSON *find(dec_t *d, const char *k) {
  const cJSON *from = d->cur ? d->cur->next : NULL;
  for (int pass = 0; pass < 2; pass++)
    for (const cJSON *c = pass ? d->h->child : from; c && c != (pass ? from : NULL); c = c->next)
      if (c->string && !strcmp(c->string, k)) return d->cur = c;
  return NULL;
}

static const char NOMEM[] = "", TOOMANY[] = "";

/* A key object o holds twice, NULL if none, NOMEM when out of memory, TOOMANY
 * past LT_PROTO_MAX_KEYS (keys a peer chose to collide would make the table
 * quadratic; no protocol object comes near): `prefer` when that one is, else
 * the first found.  A key sent twice means two things
 * at once (which "task_id" was refused?), so a protocol object with one is
 * malformed.  One pass: the keys go into an open-addressing table, on the
 * stack for a header's usual few. */
static const char *dup_key(const cJSON *o, const char *prefer) {
  enum { STACK = 64 };
  const char *stack[STACK], **tab = stack;
  size_t n = 0, cap = STACK;
  for (const cJSON *c = o->child; c; c = c->next) n++;
  if (n > LT_PROTO_MAX_KEYS) return TOOMANY;
  while (cap < 2 * n) cap *= 2;
  if (cap > STACK && !(tab = malloc(sizeof *tab * cap))) return NOMEM;
  memset(tab, 0, sizeof *tab * cap);
  const char *dup = NULL;
  for (const cJSON *c = o->child; c; c = c->next) {
    if (!c->string) continue;
    size_t h = 2166136261u; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)c->string; *p; p++) h = (h ^ *p) * 16777619u;
    size_t i = h & (cap - 1);
    while (tab[i] && strcmp(tab[i], c->string)) i = (i + 1) & (cap - 1);
    if (!tab[i]) tab[i] = c->string;
    else if (!dup || (prefer && !strcmp(c->string, prefer))) dup = c->string;
  }
  if (tab != stack) free((void *)tab);
  return dup;
}

/* 0, or LT_EPROTO naming the key o holds twice and where (a printf format). */
static int unique_keys(const cJSON *o, const char *fmt, ...) {
  const char *k = dup_key(o, NULL);
  if (!k) return 0;
  if (k == NOMEM) return lt_error_set(LT_ENOMEM, "decode: out of memory");
  char where[96];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(where, sizeof where, fmt, ap);
  va_end(ap);
  if (k == TOOMANY) return lt_error_set(LT_EPROTO, "%s: more than %d keys", where, LT_PROTO_MAX_KEYS);
  return lt_error_set(LT_EPROTO, "%s: key \"%.64s\" appears twice", where, k);
}

/* For the ERROR refusing a message: the id under k when it can be told
 * (there once, and valid), else 0. */
static uint64_t told_id(const cJSON *o, const char *k) {
  const cJSON *one = NULL;
  for (const cJSON *c = o->child; c; c = c->next)
    if (c->string && !strcmp(c->string, k)) {
      if (one) return 0;
      one = c;
    }
  if (!cJSON_IsNumber(one) || one->valuedouble != floor(one->valuedouble) || one->valuedouble < 0 ||
      one->valuedouble > (double)LT_PROTO_MAX_ID)
    return 0;
  return (uint64_t)one->valuedouble;
}

static const cJSON *get(dec_t *d, const char *k) {
  const cJSON *n = find(d, k);
  return (n && !cJSON_IsNull(n)) ? n : NULL;
}

static int integer(dec_t *d, const char *k, int64_t lo, int64_t hi, int required, int64_t def, int64_t *out) {
  const cJSON *n = get(d, k);
  if (!n) {
    if (required) return BAD(d, "%s.%s: missing", d->type, k);
    *out = def;
    return 0;
  }
  if (!cJSON_IsNumber(n) || n->valuedouble != floor(n->valuedouble))
    return BAD(d, "%s.%s: expected integer", d->type, k);
  if (n->valuedouble < (double)lo || n->valuedouble > (double)hi)
    return BAD(d, "%s.%s: %.0f out of range [%lld, %lld]", d->type, k, n->valuedouble, (long long)lo, (long long)hi);
  *out = (int64_t)n->valuedouble;
  return 0;
}

static int int32f(dec_t *d, const char *k, int lo, int hi, int required, int def, int *out) {
  int64_t v;
  int rc = integer(d, k, lo, hi, required, def, &v);
  if (rc == 0) *out = (int)v;
  return rc;
}

static int idf(dec_t *d, const char *k, int required, uint64_t *out) {
  int64_t v;
  int rc = integer(d, k, 0, (int64_t)LT_PROTO_MAX_ID, required, 0, &v);
  if (rc == 0) *out = (uint64_t)v;
  return rc;
}

static int number(dec_t *d, const char *k, double lo, double hi, int required, double def, double *out) {
  const cJSON *n = get(d, k);
  if (!n) {
    if (required) return BAD(d, "%s.%s: missing", d->type, k);
    *out = def;
    return 0;
  }
  if (!cJSON_IsNumber(n) || !isfinite(n->valuedouble)) return BAD(d, "%s.%s: expected finite number", d->type, k);
  if (n->valuedouble < lo || n->valuedouble > hi)
    return BAD(d, "%s.%s: %g out of range [%g, %g]", d->type, k, n->valuedouble, lo, hi);
  *out = n->valuedouble;
  return 0;
}

static int boolean(dec_t *d, const char *k, int *out) {
  const cJSON *n = get(d, k);
  if (!n) {
    *out = 0;
    return 0;
  }
  if (!cJSON_IsBool(n)) return BAD(d, "%s.%s: expected boolean", d->type, k);
  *out = cJSON_IsTrue(n);
  return 0;
}

/* Copies a string field; absent optional strings become "". */
static int string_max(dec_t *d, const char *k, int required, size_t max, char **out) {
  const cJSON *n = get(d, k);
  const char *s = "";
  if (!n) {
    if (required) return BAD(d, "%s.%s: missing", d->type, k);
  } else {
    if (!cJSON_IsString(n)) return BAD(d, "%s.%s: expected string", d->type, k);
    s = n->valuestring;
    if (strlen(s) > max) return BAD(d, "%s.%s: string longer than %zu bytes", d->type, k, max);
  }
  *out = strdup(s);
  if (!*out) return lt_error_set(LT_ENOMEM, "decode: out of memory");
  return 0;
}

static int string(dec_t *d, const char *k, int required, char **out) {
  return string_max(d, k, required, LT_PROTO_MAX_STR, out);
}

static int sha(dec_t *d, const char *k, char out[65]) {
  const cJSON *n = get(d, k);
  out[0] = 0;
  if (!n) return 0;
  if (!cJSON_IsString(n)) return BAD(d, "%s.%s: expected string", d->type, k);
  size_t l = strlen(n->valuestring);
  if (l == 0) return 0;
  if (l != 64 || strspn(n->valuestring, "0123456789abcdef") != 64)
    return BAD(d, "%s.%s: expected 64 lower-case hex digits", d->type, k);
  memcpy(out, n->valuestring, 65);
  return 0;
}

static int subtree(dec_t *d, const char *k, int array, cJSON **out);

/* An optional array of at most 16 http(s) URLs (weights mirrors); *out stays NULL without one. */
static int mirrors(dec_t *d, const char *k, cJSON **out) {
  if (!find(d, k)) return 0;
  int rc = subtree(d, k, 1, out), i = 0;
  if (rc) return rc;
  for (const cJSON *u = (*out)->child; u; u = u->next, i++)
    if (!cJSON_IsString(u) || (strncmp(u->valuestring, "http://", 7) && strncmp(u->valuestring, "https://", 8)) ||
        strlen(u->valuestring) > 2000)
      return BAD(d, "%s.%s[%d]: expected an http(s) URL", d->type, k, i);
  return i > 16 ? BAD(d, "%s.%s: more than 16", d->type, k) : 0;
}

/* Detaches a JSON object/array from the header (takes it over). */
static int subtree(dec_t *d, const char *k, int array, cJSON **out) {
  cJSON *n = (cJSON *)find(d, k);
  *out = NULL;
  if (!n || cJSON_IsNull(n)) {
    *out = array ? cJSON_CreateArray() : cJSON_CreateObject();
    return *out ? 0 : lt_error_set(LT_ENOMEM, "decode: out of memory");
  }
  if (array ? !cJSON_IsArray(n) : !cJSON_IsObject(n))
    return BAD(d, "%s.%s: expected %s", d->type, k, array ? "array" : "object");
  d->cur = n == d->h->child ? NULL : n->prev; /* its neighbour: n leaves the list */
  *out = cJSON_DetachItemViaPointer((cJSON *)d->h, n);
  return 0;
}

static int id_list(dec_t *d, const char *k, uint64_t **out, int *n) {
  const cJSON *a = get(d, k);
  *out = NULL;
  *n = 0;
  if (!a) return 0;
  if (!cJSON_IsArray(a)) return BAD(d, "%s.%s: expected array", d->type, k);
  int len = cJSON_GetArraySize(a);
  if (len > LT_PROTO_MAX_IDS) return BAD(d, "%s.%s: %d ids exceeds %d", d->type, k, len, LT_PROTO_MAX_IDS);
  if (len == 0) return 0;
  uint64_t *v = malloc(sizeof *v * (size_t)len);
  if (!v) return lt_error_set(LT_ENOMEM, "decode: out of memory");
  int i = 0;
  for (const cJSON *c = a->child; c; c = c->next, i++) {
    if (!cJSON_IsNumber(c) || c->valuedouble != floor(c->valuedouble) || c->valuedouble < 0 ||
        c->valuedouble > (double)LT_PROTO_MAX_ID) {
      free(v);
      return BAD(d, "%s.%s[%d]: expected id in [0, %llu]", d->type, k, i, LT_PROTO_MAX_ID);
    }
    v[i] = (uint64_t)c->valuedouble;
  }
  *out = v;
  *n = len;
  return 0;
}

/* ---- binary frames ---- */

typedef struct {
  const char *name;
  const char *dtype;
  size_t elem;
  const lt_frame_t *frame; /* set when present */
  size_t count;
} fspec_t;

static int bind_frames(dec_t *d, const lt_frame_t *frames, int n, fspec_t *spec, int nspec) {
  const cJSON *list = get(d, "frames");
  int nlist = 0;
  if (list) {
    if (!cJSON_IsArray(list)) return BAD(d, "%s.frames: expected array", d->type);
    nlist = cJSON_GetArraySize(list);
  }
  if (nlist != n - 1)
    return BAD(d, "%s.frames: header describes %d binary frames but %d arrived", d->type, nlist, n - 1);
  int i = 0;
  for (const cJSON *c = list ? list->child : NULL; c; c = c->next, i++) {
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(c, "name");
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(c, "dtype");
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(c, "count");
    if (!cJSON_IsObject(c) || !cJSON_IsString(nm) || !cJSON_IsString(dt) || !cJSON_IsNumber(ct))
      return BAD(d, "%s.frames[%d]: expected {name, dtype, count}", d->type, i);
    int rc = unique_keys(c, "%s.frames[%d]", d->type, i);
    if (rc) return rc;
    fspec_t *s = NULL;
    for (int k = 0; k < nspec; k++)
      if (strcmp(spec[k].name, nm->valuestring) == 0) s = &spec[k];
    if (!s) return BAD(d, "%s.frames[%d]: unknown frame '%.64s'", d->type, i, nm->valuestring);
    if (s->frame) return BAD(d, "%s.frames[%d]: frame '%s' appears twice", d->type, i, s->name);
    if (strcmp(dt->valuestring, s->dtype) != 0)
      return BAD(d, "%s.frames[%d]: '%s' must have dtype %s, got '%.16s'", d->type, i, s->name, s->dtype,
                 dt->valuestring);
    double cnt = ct->valuedouble;
    if (cnt != floor(cnt) || cnt < 0 || cnt > (double)LT_PROTO_MAX_ROUTING)
      return BAD(d, "%s.frames[%d]: '%s' count %.0f out of range", d->type, i, s->name, cnt);
    s->count = (size_t)cnt;
    const lt_frame_t *f = &frames[i + 1];
    if (f->len != s->count * s->elem)
      return BAD(d, "%s.frames[%d]: '%s' declares %zu × %s (%zu bytes) but the frame has %zu bytes", d->type, i,
                 s->name, s->count, s->dtype, s->count * s->elem, f->len);
    s->frame = f;
  }
  return 0;
}

static int copy_frame(const fspec_t *s, void **out) {
  *out = NULL;
  if (!s->frame) return 0;
  size_t len = s->frame->len;
  *out = malloc(len ? len : 1);
  if (!*out) return lt_error_set(LT_ENOMEM, "decode: out of memory");
  if (len) memcpy(*out, s->frame->data, len);
  return 0;
}

/* The TRAJ's frames: its per-token arrays (LT_TRAJ_TOKEN_ARRAYS, proto.h), then the two of other lengths. */
#define FRAME_ID(m, dtype, elem, routed, required) F_##m,
enum { LT_TRAJ_TOKEN_ARRAYS(FRAME_ID) F_SUPPORT_IDS, F_SEQ_STARTS, F_N };
#undef FRAME_ID
#define FRAME_SPEC(m, dtype, elem, routed, required) [F_##m] = {#m, dtype, elem, NULL, 0},
#define FRAME_ROUTED(m, dtype, elem, routed, required) [F_##m] = routed,
#define FRAME_REQUIRED(m, dtype, elem, routed, required) [F_##m] = required,
static const int routed_frame[F_N] = {LT_TRAJ_TOKEN_ARRAYS(FRAME_ROUTED)};
static const int required_frame[F_N] = {LT_TRAJ_TOKEN_ARRAYS(FRAME_REQUIRED)};
#undef FRAME_ROUTED
#undef FRAME_REQUIRED

static int decode_traj(dec_t *d, const lt_frame_t *frames, int n, lt_traj_t *t) {
  int rc, v;
  if ((rc = idf(d, "task_id", 1, &t->task_id)) || (rc = idf(d, "group_id", 1, &t->group_id)) ||
      (rc = string(d, "domain", 0, &t->domain)) || (rc = string(d, "reason", 0, &t->reason)) ||
      (rc = string(d, "error", 0, &t->error)))
    return rc;
  char *s = NULL;
  if ((rc = string(d, "status", 1, &s))) return rc;
  v = lt_traj_status_parse(s);
  free(s);
  if (v < 0) return BAD(d, "TRAJ.status: unknown status");
  t->status = (lt_traj_status)v;
  if ((rc = string(d, "finish", 1, &s))) return rc;
  v = lt_finish_parse(s);
  free(s);
  if (v < 0) return BAD(d, "TRAJ.finish: expected terminated|truncated|timeout|none");
  t->finish = (lt_finish)v;
  t->has_reward = get(d, "reward") != NULL;
  if (t->has_reward && (rc = number(d, "reward", -1e9, 1e9, 1, 0, &t->reward))) return rc;
  if (t->status == LT_TRAJ_OK && !t->has_reward) return BAD(d, "TRAJ.reward: status ok requires a reward");
  if (t->status != LT_TRAJ_OK && t->has_reward)
    return BAD(d, "TRAJ.reward: a %s trajectory carries no reward", lt_traj_status_name(t->status));
  if ((rc = int32f(d, "turns", 0, 1 << 20, 0, 0, &t->turns)) || (rc = boolean(d, "eval", &t->eval)) ||
      (rc = number(d, "gen_ms", 0, 1e12, 0, 0, &t->gen_ms)) || (rc = number(d, "env_ms", 0, 1e12, 0, 0, &t->env_ms)) ||
      (rc = number(d, "reward_ms", 0, 1e12, 0, 0, &t->reward_ms)))
    return rc;
  if ((rc = subtree(d, "components", 0, &t->components)) || (rc = unique_keys(t->components, "%s.components", d->type)))
    return rc;
  for (const cJSON *c = t->components->child; c; c = c->next)
    if (!cJSON_IsNumber(c) || !isfinite(c->valuedouble))
      return BAD(d, "TRAJ.components.%.64s: expected finite number", c->string ? c->string : "?");
  if ((rc = subtree(d, "messages", 1, &t->messages))) return rc;
  if (get(d, "diff") && (rc = string_max(d, "diff", 0, LT_PROTO_MAX_DIFF, &t->diff))) return rc;
  for (const cJSON *c = t->messages->child; c; c = c->next) {
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(c, "role");
    if (!cJSON_IsObject(c) || !cJSON_IsString(role)) return BAD(d, "TRAJ.messages: each message needs a role");
  }

  fspec_t sp[F_N] = {
      LT_TRAJ_TOKEN_ARRAYS(FRAME_SPEC)[F_SUPPORT_IDS] = {"support_ids", "i32", 4, NULL, 0}, [F_SEQ_STARTS] = {
                                                                                                "seq_starts", "i32", 4,
                                                                                                NULL, 0}};
#undef FRAME_SPEC
  if ((rc = bind_frames(d, frames, n, sp, F_N))) return rc;
  for (int k = 0; k < F_N; k++)
    if (required_frame[k] && !sp[k].frame) return BAD(d, "TRAJ: frame '%s' missing", sp[k].name);
  size_t T = sp[F_tokens].count;
  if (T > LT_PROTO_MAX_TOKENS) return BAD(d, "TRAJ.tokens: %zu tokens exceeds %d", T, LT_PROTO_MAX_TOKENS);
  for (int k = 0; k < F_SUPPORT_IDS; k++)
    if (!routed_frame[k] && sp[k].frame && sp[k].count != T)
      return BAD(d, "TRAJ: frame '%s' has %zu entries, tokens has %zu", sp[k].name, sp[k].count, T);
  t->ntokens = (int)T;
  if ((rc = int32f(d, "routing_layers", 0, 4096, 0, 0, &t->routing_layers))) return rc;
  if (t->routing_layers > 0) {
    if ((rc = int32f(d, "routing_k", 1, 256, 1, 0, &t->routing_k)) ||
        (rc = int32f(d, "routing_experts", 1, 65535, 1, 0, &t->routing_experts)))
      return rc;
    if (t->routing_k > t->routing_experts) return BAD(d, "TRAJ.routing_k: exceeds routing_experts");
    size_t r = T * (size_t)t->routing_layers * (size_t)t->routing_k;
    for (int k = 0; k < F_SUPPORT_IDS; k++)
      if (routed_frame[k] && !sp[k].frame) return BAD(d, "TRAJ: routing_layers set but routing frames missing");
    for (int k = 0; k < F_SUPPORT_IDS; k++)
      if (routed_frame[k] && sp[k].count != r)
        return BAD(d, "TRAJ: routing frames must have tokens × routing_layers × routing_k = %zu entries", r);
  } else {
    for (int k = 0; k < F_SUPPORT_IDS; k++)
      if (routed_frame[k] && sp[k].frame) return BAD(d, "TRAJ: routing frames without routing_layers");
  }
  if ((rc = number(d, "temperature", 0, 100, 0, -1, &t->temperature))) return rc;
  if (sp[F_SUPPORT_IDS].frame && !sp[F_support].frame) return BAD(d, "TRAJ: frame 'support_ids' without 'support'");
  if (sp[F_SUPPORT_IDS].count > (size_t)INT32_MAX) return BAD(d, "TRAJ.support_ids: too many entries");
  t->nsupport_ids = (int)sp[F_SUPPORT_IDS].count;
  if ((rc = copy_frame(&sp[F_SUPPORT_IDS], (void **)&t->support_ids))) return rc;
  if (sp[F_SEQ_STARTS].count > T) return BAD(d, "TRAJ.seq_starts: more sequences than tokens");
  t->nseqs = (int)sp[F_SEQ_STARTS].count;
  if ((rc = copy_frame(&sp[F_SEQ_STARTS], (void **)&t->seq_starts))) return rc;
  for (int i = 0; i < t->nseqs; i++)
    if (i == 0 ? t->seq_starts[0] != 0 : t->seq_starts[i] <= t->seq_starts[i - 1] || (size_t)t->seq_starts[i] >= T)
      return BAD(d, "TRAJ.seq_starts[%d]: expected 0 first, then increasing token indices below %zu", i, T);
#define COPY_FRAME(m, dtype, elem, routed, required) \
  if ((rc = copy_frame(&sp[F_##m], (void **)&t->m))) return rc;
  LT_TRAJ_TOKEN_ARRAYS(COPY_FRAME)
#undef COPY_FRAME
  for (size_t i = 0; i < T; i++) {
    if (t->tokens[i] < 0) return BAD(d, "TRAJ.tokens[%zu]: negative token id", i);
    if (t->loss_mask[i] > 1) return BAD(d, "TRAJ.loss_mask[%zu]: expected 0 or 1", i);
    if (!isfinite(t->logprobs[i]) || t->logprobs[i] > 1e-3f)
      return BAD(d, "TRAJ.logprobs[%zu]: expected a finite log-probability ≤ 0", i);
    if (t->versions[i] < -1) return BAD(d, "TRAJ.versions[%zu]: expected ≥ -1", i);
    if (t->loss_mask[i] && t->versions[i] < 0)
      return BAD(d, "TRAJ.versions[%zu]: generated token without a version", i);
    if (t->support && t->support[i] < 0) return BAD(d, "TRAJ.support[%zu]: negative", i);
  }
  if (t->support_ids) { /* the sets must tile the ids frame exactly */
    size_t sum = 0;
    for (size_t i = 0; i < T; i++) sum += (size_t)t->support[i];
    if (sum != (size_t)t->nsupport_ids)
      return BAD(d, "TRAJ.support_ids: %d entries, the support sizes add up to %zu", t->nsupport_ids, sum);
    for (int i = 0; i < t->nsupport_ids; i++)
      if (t->support_ids[i] < 0) return BAD(d, "TRAJ.support_ids[%d]: negative token id", i);
  }
  size_t r = T * (size_t)t->routing_layers * (size_t)t->routing_k;
  for (size_t i = 0; i < r; i++) {
    if (t->routing_ids[i] >= t->routing_experts) return BAD(d, "TRAJ.routing_ids[%zu]: expert id out of range", i);
    float p = t->routing_probs[i];
    if (!(p >= 0.0f && p <= 1.0f + 1e-4f)) return BAD(d, "TRAJ.routing_probs[%zu]: expected a probability", i);
  }
  return 0;
}

/* A batch's list (TASKS.tasks, TRAJS.trajs): an array of 1..max; returns its length. */
static int elements(dec_t *d, const char *k, const char *noun, int max, const cJSON **out) {
  *out = get(d, k);
  if (!*out || !cJSON_IsArray(*out)) return BAD(d, "%s.%s: expected array", d->type, k);
  int len = cJSON_GetArraySize(*out);
  if (len < 1 || len > max) return BAD(d, "%s.%s: %d %s, expected 1..%d", d->type, k, len, noun, max);
  return len;
}

/* Bytes per element of a frame's dtype, 0 if unknown. */
static size_t dtype_size(const char *dt) {
  return !strcmp(dt, "u8") ? 1 : !strcmp(dt, "u16") ? 2 : !strcmp(dt, "i32") || !strcmp(dt, "f32") ? 4 : 0;
}

/* One element of a TRAJS: its `frames` cut its slices out of the blob at *off
 * (into sl[1..], sl[0] standing for the header); returns how many frames, or
 * LT_EPROTO when the slices cannot be told (then no later element can be). */
static int trajs_slices(dec_t *d, const lt_frame_t *blob, size_t *off, lt_frame_t *sl) {
  const cJSON *list = get(d, "frames");
  if (!list || !cJSON_IsArray(list)) return BAD(d, "%s.frames: expected array", d->type);
  int n = 1;
  for (const cJSON *c = list->child; c; c = c->next, n++) {
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(c, "dtype"), *ct = cJSON_GetObjectItemCaseSensitive(c, "count");
    if (n >= LT_PROTO_MAX_FRAMES) return BAD(d, "%s.frames: more than %d frames", d->type, LT_PROTO_MAX_FRAMES - 1);
    int rc = cJSON_IsObject(c) ? unique_keys(c, "%s.frames[%d]", d->type, n - 1) : 0;
    if (rc) return rc;
    size_t elem = cJSON_IsString(dt) ? dtype_size(dt->valuestring) : 0;
    if (!elem || !cJSON_IsNumber(ct) || ct->valuedouble != floor(ct->valuedouble) || ct->valuedouble < 0 ||
        ct->valuedouble > (double)LT_PROTO_MAX_ROUTING)
      return BAD(d, "%s.frames[%d]: expected a known dtype and a count in range", d->type, n - 1);
    size_t len = elem * (size_t)ct->valuedouble;
    if (len > blob->len - *off)
      return BAD(d, "%s.frames[%d]: the arrays run past the binary frame's %zu bytes", d->type, n - 1, blob->len);
    sl[n] = (lt_frame_t){.data = (char *)blob->data + *off, .len = len};
    *off += len;
  }
  return n;
}

/* Elements are decoded one by one, each as strictly as a TRAJ; one that fails
 * is recorded (rc, why) and the others stand.  The layout itself (the list,
 * the slices adding up to the blob) must hold for the message to be read. */
static int decode_trajs(dec_t *d, const lt_frame_t *blob, lt_trajs_t *x) {
  const cJSON *a;
  int len = elements(d, "trajs", "trajectories", LT_PROTO_MAX_TRAJS, &a);
  if (len < 0) return len;
  x->trajs = calloc((size_t)len, sizeof *x->trajs);
  x->rc = calloc((size_t)len, sizeof *x->rc);
  x->why = calloc((size_t)len, sizeof *x->why);
  if (!x->trajs || !x->rc || !x->why) return lt_error_set(LT_ENOMEM, "decode: out of memory");
  x->n = len; /* freed with the message whatever happens */
  size_t off = 0;
  int i = 0;
  for (const cJSON *c = a->child; c; c = c->next, i++) {
    char where[32];
    snprintf(where, sizeof where, "TRAJS.trajs[%d]", i);
    if (!cJSON_IsObject(c)) return BAD(d, "%s: expected object", where);
    dec_t one = {.h = c, .type = where};
    /* A key twice refuses the element; "frames" twice, the message (which
     * arrays are whose could not be told). */
    const char *dup = dup_key(c, "frames");
    if (dup == NOMEM) return lt_error_set(LT_ENOMEM, "decode: out of memory");
    if (dup == TOOMANY) return BAD(d, "%s: more than %d keys", where, LT_PROTO_MAX_KEYS);
    if (dup && !strcmp(dup, "frames")) return BAD(d, "%s: key \"frames\" appears twice", where);
    lt_frame_t sl[LT_PROTO_MAX_FRAMES];
    int nf = trajs_slices(&one, blob, &off, sl);
    if (nf < 0) return nf;
    /* An element is a TRAJ's header: its own v, type and id may stay. */
    const cJSON *ty = get(&one, "type");
    int64_t v = LT_PROTO_VERSION;
    uint64_t tid;
    int rc = dup ? BAD(&one, "%s: key \"%.64s\" appears twice", where, dup)
                 : integer(&one, "v", LT_PROTO_VERSION, LT_PROTO_VERSION, 0, LT_PROTO_VERSION, &v);
    if (!rc && ty && (!cJSON_IsString(ty) || strcmp(ty->valuestring, "TRAJ")))
      rc = BAD(&one, "%s.type: expected \"TRAJ\"", where);
    if (!rc) rc = idf(&one, "id", 0, &tid);
    if (!rc) rc = decode_traj(&one, sl, nf, &x->trajs[i]);
    if (rc == LT_ENOMEM) return rc;
    if (rc < 0) {
      const char *msg = lt_error_msg();
      size_t wl = strlen(where);
      lt_buf_t b = {0};
      lt_buf_printf(&b, "%s%s", strncmp(msg, where, wl) ? where : "", strncmp(msg, where, wl) ? ": " : "");
      lt_buf_puts(&b, msg);
      lt_traj_free(&x->trajs[i]);
      x->trajs[i].task_id = told_id(c, "task_id");
      x->rc[i] = rc;
      x->why[i] = lt_buf_take(&b);
      if (!x->why[i]) return lt_error_set(LT_ENOMEM, "decode: out of memory");
    }
  }
  if (off != blob->len)
    return BAD(d, "TRAJS: the elements describe %zu bytes of arrays, the binary frame has %zu", off, blob->len);
  return 0;
}

static int decode_task(dec_t *d, lt_task_t *x) {
  int rc;
  if ((rc = idf(d, "task_id", 1, &x->task_id)) || (rc = idf(d, "group_id", 1, &x->group_id)) ||
      (rc = integer(d, "prompt_id", -1, (int64_t)LT_PROTO_MAX_ID, 0, -1, &x->prompt_id)) ||
      (rc = string(d, "domain", 0, &x->domain)) || (rc = string(d, "env", 1, &x->env)) ||
      (rc = string(d, "session", 0, &x->session)) ||
      (rc = integer(d, "policy_version", -1, INT32_MAX, 1, 0, &x->policy_version)) ||
      (rc = int32f(d, "attempt", 0, 1000000, 0, 0, &x->attempt)) ||
      (rc = integer(d, "seed", -(int64_t)LT_PROTO_MAX_ID, (int64_t)LT_PROTO_MAX_ID, 0, 0, &x->seed)) ||
      (rc = number(d, "temperature", 0, 100, 0, 1.0, &x->temperature)) ||
      (rc = number(d, "top_p", 0, 1, 0, 1.0, &x->top_p)) || (rc = int32f(d, "top_k", 0, 1 << 24, 0, 0, &x->top_k)) ||
      (rc = int32f(d, "max_new_tokens", 1, LT_PROTO_MAX_TOKENS, 1, 0, &x->max_new_tokens)) ||
      (rc = int32f(d, "max_turns", 1, 1 << 20, 0, 1, &x->max_turns)) ||
      (rc = int32f(d, "max_context", 1, LT_PROTO_MAX_TOKENS, 1, 0, &x->max_context)) ||
      (rc = boolean(d, "eval", &x->eval)) || (rc = subtree(d, "spec", 0, &x->spec)))
    return rc;
  if (!x->env[0]) return BAD(d, "%s.env: empty", d->type);
  return 0;
}

/* Each element is checked as a TASK would be; an error names its index. */
static int decode_tasks(dec_t *d, lt_tasks_t *x) {
  const cJSON *a;
  int len = elements(d, "tasks", "tasks", LT_PROTO_MAX_BATCH, &a);
  if (len < 0) return len;
  x->tasks = calloc((size_t)len, sizeof *x->tasks);
  if (!x->tasks) return lt_error_set(LT_ENOMEM, "decode: out of memory");
  int i = 0;
  for (const cJSON *c = a->child; c; c = c->next, i++) {
    char where[32];
    snprintf(where, sizeof where, "TASKS.tasks[%d]", i);
    if (!cJSON_IsObject(c)) return BAD(d, "%s: expected object", where);
    dec_t one = {.h = c, .type = where};
    x->n = i + 1; /* what was read so far is freed with the message */
    int rc = unique_keys(c, "%s", where);
    if (!rc) rc = decode_task(&one, &x->tasks[i]);
    if (rc) return rc;
  }
  return 0;
}

static int decode_body(dec_t *d, const lt_frame_t *frames, int n, lt_msg_t *m) {
  int rc = 0;
  int64_t v;
  if (m->type == LT_MSG_TRAJS && n != 2) return BAD(d, "TRAJS: expected one binary frame, got %d", n - 1);
  if (m->type != LT_MSG_TRAJ && m->type != LT_MSG_TRAJS && n != 1)
    return BAD(d, "%s: carries no binary frames, got %d", d->type, n - 1);
  switch (m->type) {
  case LT_MSG_HELLO: {
    lt_hello_t *x = &m->u.hello;
    if ((rc = string(d, "name", 1, &x->name)) || (rc = int32f(d, "slots", 1, 65536, 1, 0, &x->slots)) ||
        (rc = string(d, "backend", 0, &x->backend)) || (rc = string(d, "device", 0, &x->device)) ||
        (rc = string(d, "host", 0, &x->host)) || (rc = integer(d, "pid", 0, INT32_MAX, 0, 0, &x->pid)) ||
        (rc = integer(d, "policy_version", -1, INT32_MAX, 0, -1, &x->policy_version)) ||
        (rc = id_list(d, "pending", &x->pending, &x->npending)) ||
        (rc = id_list(d, "running", &x->running, &x->nrunning)) || (rc = boolean(d, "batch", &x->batch)))
      return rc;
    if (!x->name[0]) return BAD(d, "HELLO.name: empty");
    return 0;
  }
  case LT_MSG_WELCOME: {
    lt_welcome_t *x = &m->u.welcome;
    if ((rc = string(d, "worker_id", 1, &x->worker_id)) || (rc = string(d, "run", 0, &x->run)) ||
        (rc = int32f(d, "heartbeat_ms", 10, 3600000, 1, 0, &x->heartbeat_ms)) ||
        (rc = int32f(d, "liveness", 1, 1000, 1, 0, &x->liveness)) ||
        (rc = integer(d, "policy_version", -1, INT32_MAX, 1, 0, &x->policy_version)) ||
        (rc = string(d, "weights_location", 0, &x->weights_location)) || (rc = sha(d, "sha256", x->sha256)) ||
        (rc = subtree(d, "settings", 0, &x->settings)) || (rc = subtree(d, "model", 0, &x->model)) ||
        (rc = boolean(d, "batch", &x->batch)) || (rc = mirrors(d, "weights_mirrors", &x->weights_mirrors)))
      return rc;
    return 0;
  }
  case LT_MSG_TASK: return decode_task(d, &m->u.task);
  case LT_MSG_TASKS: return decode_tasks(d, &m->u.tasks);
  case LT_MSG_TRAJ: return decode_traj(d, frames, n, &m->u.traj);
  case LT_MSG_TRAJS: return decode_trajs(d, &frames[1], &m->u.trajs);
  case LT_MSG_ACK: {
    lt_ack_t *x = &m->u.ack;
    if ((rc = id_list(d, "task_ids", &x->task_ids, &x->n))) return rc;
    const cJSON *dup = get(d, "duplicate");
    if (dup) {
      if (!cJSON_IsArray(dup) || cJSON_GetArraySize(dup) != x->n)
        return BAD(d, "ACK.duplicate: expected an array as long as task_ids");
      x->duplicate = calloc((size_t)(x->n ? x->n : 1), 1);
      if (!x->duplicate) return lt_error_set(LT_ENOMEM, "decode: out of memory");
      int i = 0;
      for (const cJSON *c = dup->child; c; c = c->next, i++) {
        if (!cJSON_IsBool(c)) return BAD(d, "ACK.duplicate[%d]: expected boolean", i);
        x->duplicate[i] = (uint8_t)cJSON_IsTrue(c);
      }
    }
    return 0;
  }
  case LT_MSG_HEARTBEAT: {
    lt_heartbeat_t *x = &m->u.heartbeat;
    if ((rc = integer(d, "t_ms", 0, INT64_MAX / 2, 0, 0, &x->t_ms)) ||
        (rc = int32f(d, "inflight", 0, 1 << 20, 0, 0, &x->inflight)) ||
        (rc = int32f(d, "slots", 0, 65536, 0, 0, &x->slots)) ||
        (rc = integer(d, "policy_version", -1, INT32_MAX, 0, -1, &x->policy_version)) ||
        (rc = int32f(d, "unacked", 0, 1 << 24, 0, 0, &x->unacked)))
      return rc;
    return 0;
  }
  case LT_MSG_WEIGHTS: {
    lt_weights_t *x = &m->u.weights;
    if ((rc = integer(d, "version", 0, INT32_MAX, 1, 0, &x->version)) ||
        (rc = string(d, "location", 1, &x->location)) || (rc = sha(d, "sha256", x->sha256)) ||
        (rc = integer(d, "bytes", 0, INT64_MAX / 2, 0, 0, &x->bytes)) || (rc = sha(d, "delta_base", x->delta_base)) ||
        (rc = integer(d, "delta_bytes", 0, INT64_MAX / 2, 0, 0, &x->delta_bytes)))
      return rc;
    if (!x->location[0]) return BAD(d, "WEIGHTS.location: empty");
    return mirrors(d, "mirrors", &x->mirrors);
  }
  case LT_MSG_ABORT:
    if ((rc = idf(d, "task_id", 0, &m->u.abort.task_id)) || (rc = string(d, "reason", 0, &m->u.abort.reason)))
      return rc;
    return 0;
  case LT_MSG_ERROR:
    if ((rc = integer(d, "code", LT_ECODE_MIN, 0, 1, 0, &v))) return rc;
    m->u.error.code = (int)v;
    if ((rc = string(d, "message", 0, &m->u.error.message)) || (rc = idf(d, "ref", 0, &m->u.error.ref))) return rc;
    return idf(d, "task_id", 0, &m->u.error.task_id);
  case LT_MSG_BYE: return string(d, "reason", 0, &m->u.bye.reason);
  default: return BAD(d, "unknown type");
  }
}

int lt_proto_decode(const lt_frame_t *frames, int n, lt_msg_t *out) {
  memset(out, 0, sizeof *out);
  if (n < 1) return lt_error_set(LT_EPROTO, "empty message");
  if (n > LT_PROTO_MAX_FRAMES)
    return lt_error_set(LT_EPROTO, "%d frames exceeds the limit of %d", n, LT_PROTO_MAX_FRAMES);
  const lt_frame_t *f0 = &frames[0];
  if (f0->len == 0) return lt_error_set(LT_EPROTO, "empty header frame");
  if (f0->len > LT_PROTO_MAX_HEADER) return lt_error_set(LT_EPROTO, "header of %zu bytes exceeds the limit", f0->len);
  if (memchr(f0->data, 0, f0->len)) return lt_error_set(LT_EPROTO, "header contains a NUL byte");
  /* JSON is UTF-8 (RFC 8259); the encoder would turn each stray byte into a
   * 3-byte U+FFFD, so accepting them would make a message that does not
   * survive its own re-encoding (a 4096-byte name becomes too long). */
  size_t bad = lt_json_utf8_check(f0->data, f0->len);
  if (bad < f0->len) return lt_error_set(LT_EPROTO, "header is not valid UTF-8 (byte %zu)", bad);
  cJSON *h = cJSON_ParseWithLength(f0->data, f0->len);
  if (!h) return lt_error_set(LT_EPROTO, "header is not JSON");
  dec_t d = {.h = h, .type = "message"};
  int rc;
  if (!cJSON_IsObject(h)) {
    rc = lt_error_set(LT_EPROTO, "header is not a JSON object");
    goto out;
  }
  int64_t v;
  if ((rc = integer(&d, "v", 0, INT32_MAX, 1, 0, &v))) goto out;
  if (v != LT_PROTO_VERSION) {
    rc = lt_error_set(LT_EVERSION, "protocol version %lld is not supported (this build speaks %d)", (long long)v,
                      LT_PROTO_VERSION);
    goto out;
  }
  const cJSON *ty = cJSON_GetObjectItemCaseSensitive(h, "type");
  int t = cJSON_IsString(ty) ? lt_msg_type_parse(ty->valuestring) : -1;
  if (t < 0) {
    rc = lt_error_set(LT_EPROTO, "header.type: missing or unknown message type");
    goto out;
  }
  out->type = (lt_msg_type)t;
  d.type = lt_msg_type_name(out->type);
  if ((rc = unique_keys(h, "%s", d.type)) || (rc = idf(&d, "id", 1, &out->id))) goto out;
  rc = decode_body(&d, frames, n, out);
out:
  if (rc < 0) {
    /* What could be read of a refused message stays, so that the answer can
     * name it: its type, its id, and a TRAJ's task. */
    lt_msg_type type = out->type;
    if (out->type) lt_msg_free(out);
    memset(out, 0, sizeof *out);
    out->type = type;
    out->id = told_id(h, "id");
    if (type == LT_MSG_TRAJ) out->u.traj.task_id = told_id(h, "task_id");
  }
  cJSON_Delete(h);
  return rc;
}

uint64_t lt_proto_header_id(const lt_frame_t *header) {
  /* What lt_proto_decode reads before the id, or it could not name the message either. */
  int ok = header->len && header->len <= LT_PROTO_MAX_HEADER && !memchr(header->data, 0, header->len) &&
           lt_json_utf8_check(header->data, header->len) == header->len;
  cJSON *h = ok ? cJSON_ParseWithLength(header->data, header->len) : NULL;
  uint64_t id = h ? told_id(h, "id") : 0;
  cJSON_Delete(h);
  return id;
}
