/* The backend driver: turns queued per session, one batched decode step per
 * loop turn (so the loop stays responsive), weight reloads at token
 * boundaries. */
#include "infer/internal.h"

#include <stdlib.h>
#include <string.h>

#include "util/error.h"
#include "util/grow.h"
#include "util/log.h"
#include "util/time.h"

#define MAX_BATCH 256

int lt__gen_push(lt_gen_t *g, int32_t token, float logprob, int32_t support, const int32_t *support_ids,
                 const uint16_t *rids, const float *rprobs) {
  int R = g->b->info.routing_layers * g->b->info.routing_k;
  if (support > 0) {
    lt_grow_t ids[] = {LT_GROW(g->sids)};
    if (lt_grow(&g->sids_cap, g->nsids + (size_t)support, 1024, ids, 1) < 0) return LT_ENOMEM;
    memcpy(g->sids + g->nsids, support_ids, sizeof *g->sids * (size_t)support);
    g->nsids += (size_t)support;
  }
  lt_grow_t arr[] = {LT_GROW(g->tokens),   LT_GROW(g->logprobs),  LT_GROW(g->support),
                     LT_GROW(g->versions), LT_GROW_K(g->rids, R), LT_GROW_K(g->rprobs, R)};
  if (lt_grow(&g->cap, (size_t)g->n + 1, 64, arr, sizeof arr / sizeof *arr) < 0) return LT_ENOMEM;
  g->tokens[g->n] = token;
  g->logprobs[g->n] = logprob;
  g->support[g->n] = support;
  g->versions[g->n] = (int32_t)g->b->info.version;
  if (R && rids) {
    memcpy(g->rids + (size_t)g->n * R, rids, sizeof *g->rids * (size_t)R);
    memcpy(g->rprobs + (size_t)g->n * R, rprobs, sizeof *g->rprobs * (size_t)R);
  }
  g->n++;
  g->len++;
  return 0;
}

static void unlink_gen(lt_gen_t *g) {
  lt_backend_t *b = g->b;
  if (g->prev) g->prev->next = g->next;
  else b->gens = g->next;
  if (g->next) g->next->prev = g->prev;
  g->prev = g->next = NULL;
  b->ngens--;
}

static void gen_free(lt_gen_t *g) {
  g->b->impl->close(g);
  free(g->append), free(g->tokens), free(g->logprobs), free(g->support), free(g->sids), free(g->versions);
  free(g->rids), free(g->rprobs), free(g->pre_rids), free(g->pre_rprobs);
  free(g);
}

/* Ends g's turn and calls its callback (which may close g or other sessions). */
static void complete(lt_gen_t *g, int err, const char *msg) {
  g->state = LT_GEN_IDLE;
  lt_turn_t t = {.n = g->n,
                 .tokens = g->tokens,
                 .logprobs = g->logprobs,
                 .support = g->support,
                 .support_ids = g->sids,
                 .versions = g->versions,
                 .routing_ids = g->rids,
                 .routing_probs = g->rprobs,
                 .stopped = g->stopped,
                 .error = err,
                 .error_msg = msg};
  lt_prefill_routing_t pre = {g->pre_rids, g->pre_rprobs};
  g->cb(g, &t, &pre, g->ud);
}

static int same_sampling(const lt_sampling_t *a, const lt_sampling_t *b) {
  return a->temperature == b->temperature && a->top_p == b->top_p && a->top_k == b->top_k;
}

static int finished(lt_gen_t *g) {
  if (g->error) return 1;
  if (g->n && lt_tokenizer_is_stop(g->b->tok, g->tokens[g->n - 1])) g->stopped = 1;
  return g->stopped || g->ended || g->n >= g->max_new || g->len >= g->b->info.max_context;
}

/* Reports each token a decode step added (a backend may add several: scripted,
 * openai); the alternatives are known for the last one only.  A watcher that
 * ends the turn ends it at that token: what follows is dropped. */
static void watch(lt_gen_t *g) {
  for (int i = g->watched; i < g->n && !g->ended; i++) {
    int last = i == g->n - 1;
    g->ended = g->watch(g, g->tokens[i], g->logprobs[i], last ? g->ntop : 0, g->top_ids, g->top_lps, g->watch_ud);
    if (g->ended && !last) {
      g->len -= g->n - (i + 1);
      g->n = i + 1;
      g->nsids = 0;
      for (int k = 0; k < g->n; k++) g->nsids += (size_t)g->support[k];
    }
  }
  g->watched = g->n;
}

/* ---- the heap of due times ---- */

static int earlier(const lt_gen_t *a, const lt_gen_t *b) {
  return a->due_ns < b->due_ns || (a->due_ns == b->due_ns && a->heap_seq < b->heap_seq);
}

static void heap_set(lt_backend_t *b, int i, lt_gen_t *g) {
  b->heap[i] = g;
  g->heap_at = i;
}

static void sift(lt_backend_t *b, int i) {
  lt_gen_t *g = b->heap[i];
  while (i > 0 && earlier(g, b->heap[(i - 1) / 2])) {
    heap_set(b, i, b->heap[(i - 1) / 2]);
    i = (i - 1) / 2;
  }
  for (;;) {
    int c = 2 * i + 1;
    if (c >= b->nheap) break;
    if (c + 1 < b->nheap && earlier(b->heap[c + 1], b->heap[c])) c++;
    if (!earlier(b->heap[c], g)) break;
    heap_set(b, i, b->heap[c]);
    i = c;
  }
  heap_set(b, i, g);
}

/* Puts g in the heap at its due_ns, or moves it there.  Never grows the array:
 * lt_gen_open made room for every session. */
static void heap_put(lt_backend_t *b, lt_gen_t *g) {
  if (g->closed || !b->heap) return; /* closed (or the backend with it), maybe by a step's callback */
  g->heap_seq = ++b->heap_seq;
  if (g->heap_at < 0) heap_set(b, b->nheap++, g);
  sift(b, g->heap_at);
}

static void heap_remove(lt_backend_t *b, lt_gen_t *g) {
  int i = g->heap_at;
  if (i < 0) return;
  g->heap_at = -1;
  lt_gen_t *last = b->heap[--b->nheap];
  if (i == b->nheap) return;
  heap_set(b, i, last);
  sift(b, i);
}

void lt__gen_due(lt_gen_t *g, int64_t due_ns) {
  lt_backend_t *b = g->b;
  g->due_ns = due_ns;
  /* One being stepped goes back in with its new time when the step ends. */
  if (g->state != LT_GEN_IDLE && (g->heap_at >= 0 || !b->stepping)) heap_put(b, g);
  lt__backend_wake(b);
}

static void on_timer(uv_timer_t *t);

/* Runs one step of the sessions that can advance now: the due ones, popped
 * from the heap (O(due · log sessions), not a walk over every session).
 * Returns 1 when some session can advance again at once; else 0, with *next
 * the earliest time a waiting session is due (-1: none). */
static int tick(lt_backend_t *b, int64_t *next) {
  *next = -1;
  if (b->reload_dir) {
    int rc = b->impl->reload(b, b->reload_dir, b->reload_sha);
    if (rc < 0)
      LT_ERROR("backend", "weights %s (version %lld) not loaded: %s", b->reload_dir, (long long)b->reload_version,
               lt_error_msg());
    else b->info.version = b->reload_version;
    free(b->reload_dir);
    b->reload_dir = NULL;
  }
  lt_gen_t *pre[MAX_BATCH], *dec[MAX_BATCH];
  int np = 0, nd = 0;
  int64_t now = (int64_t)lt_time_mono_ns();
  while (b->nheap && b->heap[0]->due_ns <= now && np + nd < MAX_BATCH) {
    lt_gen_t *g = b->heap[0];
    heap_remove(b, g);
    if (g->state == LT_GEN_PREFILL) pre[np++] = g;
    else dec[nd++] = g;
  }
  /* Callbacks below may open, start or close sessions: a closed one is only
   * marked until the step ends, so the pointers above stay valid. */
  b->stepping = 1;
  for (int i = 0; i < np; i++) {
    lt_gen_t *g = pre[i];
    if (g->closed || g->state != LT_GEN_PREFILL) continue;
    int rc = g->nappend ? b->impl->prefill(g) : 0;
    if (rc < 0) {
      complete(g, rc, lt_error_msg());
      continue;
    }
    g->len += g->nappend;
    g->nappend = 0;
    g->state = LT_GEN_DECODE;
    if (g->max_new <= 0 || g->len >= b->info.max_context) complete(g, 0, NULL);
    else heap_put(b, g); /* decode on the next turn: keeps each turn short */
  }
  int ndone = 0;
  lt_gen_t *done[MAX_BATCH];
  if (np) { /* the decoders wait for the next turn */
    for (int i = 0; i < nd; i++)
      if (dec[i]->state == LT_GEN_DECODE && dec[i]->heap_at < 0) heap_put(b, dec[i]);
    nd = 0;
  }
  /* One step per group of sessions with the same sampling parameters. */
  lt_gen_t *grp[MAX_BATCH];
  int used[MAX_BATCH] = {0}, err = 0;
  char msg[512] = "";
  for (int i = 0; i < nd && !err; i++) {
    if (used[i]) continue;
    int ng = 0;
    for (int j = i; j < nd; j++)
      if (!used[j] && same_sampling(&dec[i]->sp, &dec[j]->sp)) {
        grp[ng++] = dec[j];
        used[j] = 1;
      }
    int rc = b->impl->decode(b, grp, ng);
    if (rc < 0) {
      err = rc;
      snprintf(msg, sizeof msg, "%s", lt_error_msg());
    }
    for (int k = 0; k < ng; k++) {
      lt_gen_t *g = grp[k];
      if (rc == 0 && g->watch) watch(g);
      if (rc < 0 || finished(g)) done[ndone++] = g;
      else heap_put(b, g);
    }
  }
  for (int i = 0; i < nd; i++) /* the groups a failure left unstepped */
    if (!used[i]) heap_put(b, dec[i]);
  for (int k = 0; k < ndone; k++) {
    lt_gen_t *g = done[k];
    if (!g->closed && g->state == LT_GEN_DECODE)
      complete(g, err ? err : g->error, err ? msg : g->error ? g->error_msg : NULL);
  }
  b->stepping = 0;
  while (b->dead) {
    lt_gen_t *g = b->dead;
    b->dead = g->next;
    gen_free(g);
  }
  if (!b->nheap) return 0;
  if (b->heap[0]->due_ns <= now) return 1;
  *next = b->heap[0]->due_ns;
  return 0;
}

static void backend_on_idle(uv_idle_t *h) {
  lt_backend_t *b = h->data;
  unsigned wakes = b->wakes;
  int64_t next;
  /* Keep ticking while some session can advance now (or a turn was asked for
   * during the step: a callback may start one); otherwise sleep until the
   * earliest due session (scripted backend) or the next turn request. */
  int busy = tick(b, &next) || b->wakes != wakes || b->reload_dir != NULL;
  if (!busy) {
    int64_t now = (int64_t)lt_time_mono_ns();
    uv_idle_stop(&b->idle);
    if (next >= 0) uv_timer_start(&b->timer, on_timer, (uint64_t)(next > now ? (next - now) / 1000000 + 1 : 0), 0);
  }
}

static void on_timer(uv_timer_t *t) {
  lt_backend_t *b = t->data;
  uv_idle_start(&b->idle, backend_on_idle);
}

void lt__backend_wake(lt_backend_t *b) {
  b->wakes++;
  uv_timer_stop(&b->timer);
  uv_idle_start(&b->idle, backend_on_idle);
}

int lt_backend_create(uv_loop_t *loop, const lt_backend_opts_t *o, lt_backend_t **out) {
  *out = NULL;
  lt_backend_t *b = calloc(1, sizeof *b);
  if (!b) return lt_error_set(LT_ENOMEM, "backend: out of memory");
  b->loop = loop;
  if (!strcmp(o->kind, "builtin")) b->impl = &lt__backend_builtin;
  else if (!strcmp(o->kind, "scripted")) b->impl = &lt__backend_scripted;
  else if (!strcmp(o->kind, "openai")) b->impl = &lt__backend_openai;
  else {
    free(b);
    return lt_error_set(LT_EUNSUPP, "backend '%s' is not available in this build", o->kind);
  }
  int rc = b->impl->init(b, o);
  if (rc < 0) {
    free(b);
    return rc;
  }
  b->info.version = o->version;
  LT_ASSERT(uv_idle_init(loop, &b->idle) == 0, "uv_idle_init");
  LT_ASSERT(uv_timer_init(loop, &b->timer) == 0, "uv_timer_init");
  b->idle.data = b->timer.data = b;
  b->handles = 2;
  *out = b;
  return 0;
}

void lt_backend_info(const lt_backend_t *b, lt_backend_info_t *info) { *info = b->info; }
const lt_tokenizer_t *lt_backend_tokenizer(const lt_backend_t *b) { return b->tok; }

int lt_backend_reload(lt_backend_t *b, const char *dir, const char *sha256, int64_t version) {
  char *d = strdup(dir);
  if (!d) return lt_error_set(LT_ENOMEM, "backend: out of memory");
  free(b->reload_dir);
  b->reload_dir = d;
  snprintf(b->reload_sha, sizeof b->reload_sha, "%s", sha256 ? sha256 : "");
  b->reload_version = version;
  lt__backend_wake(b);
  return 0;
}

static int no_adapters(void) {
  return lt_error_set(LT_EUNSUPP, "this backend has no LoRA adapters by name (the builtin engine has them)");
}

int lt_backend_adapter_load(lt_backend_t *b, const char *name, const char *dir) {
  return b->impl->adapter_load ? b->impl->adapter_load(b, name, dir) : no_adapters();
}

int lt_backend_adapter_unload(lt_backend_t *b, const char *name) {
  return b->impl->adapter_unload ? b->impl->adapter_unload(b, name) : no_adapters();
}

int lt_gen_adapter(lt_gen_t *g, const char *name) {
  return g->b->impl->gen_adapter ? g->b->impl->gen_adapter(g, name) : no_adapters();
}

static void on_closed(uv_handle_t *h) {
  lt_backend_t *b = h->data;
  if (--b->handles) return;
  void (*done)(void *) = b->done;
  void *ud = b->done_ud;
  b->impl->fini(b);
  lt_tokenizer_free(b->own_tok);
  free(b->reload_dir);
  free(b);
  if (done) done(ud);
}

void lt_backend_close(lt_backend_t *b, void (*done)(void *), void *ud) {
  while (b->gens) lt_gen_close(b->gens); /* from a step's callback too: its sessions are freed when it ends */
  free(b->heap);
  b->heap = NULL;
  b->nheap = b->capheap = 0;
  b->done = done;
  b->done_ud = ud;
  uv_idle_stop(&b->idle);
  uv_timer_stop(&b->timer);
  uv_close((uv_handle_t *)&b->idle, on_closed);
  uv_close((uv_handle_t *)&b->timer, on_closed);
}

int lt_gen_open(lt_backend_t *b, uint64_t seed, lt_gen_t **out) {
  *out = NULL;
  lt_gen_t *g = calloc(1, sizeof *g);
  if (!g) return lt_error_set(LT_ENOMEM, "backend: out of memory");
  g->b = b;
  g->heap_at = -1;
  if (b->ngens + 1 > b->capheap) { /* room in the heap for every session, so putting one there cannot fail */
    int cap = b->capheap ? 2 * b->capheap : 64;
    lt_gen_t **h = realloc(b->heap, sizeof *h * (size_t)cap);
    if (!h) {
      free(g);
      return lt_error_set(LT_ENOMEM, "backend: out of memory");
    }
    b->heap = h;
    b->capheap = cap;
  }
  int rc = b->impl->open(b, g, seed);
  if (rc < 0) {
    free(g);
    return rc;
  }
  g->next = b->gens;
  if (b->gens) b->gens->prev = g;
  b->gens = g;
  b->ngens++;
  *out = g;
  return 0;
}

int lt_gen_turn(lt_gen_t *g, const int32_t *append, int nappend, int max_new, const lt_sampling_t *sp, lt_turn_cb cb,
                void *ud) {
  if (g->state != LT_GEN_IDLE) return lt_error_set(LT_EBUSY, "backend: a turn is already running");
  if (g->len + nappend > g->b->info.max_context)
    return lt_error_set(LT_ERANGE, "backend: %d + %d tokens exceed the context of %d", g->len, nappend,
                        g->b->info.max_context);
  free(g->append);
  g->append = NULL;
  if (nappend) {
    if (!(g->append = malloc(sizeof *append * (size_t)nappend)))
      return lt_error_set(LT_ENOMEM, "backend: out of memory");
    memcpy(g->append, append, sizeof *append * (size_t)nappend);
  }
  g->nappend = nappend;
  g->max_new = max_new;
  g->sp = *sp;
  g->cb = cb;
  g->ud = ud;
  g->n = 0;
  g->watched = 0;
  g->nsids = 0;
  g->stopped = 0;
  g->ended = 0;
  g->error = 0;
  g->error_msg[0] = 0;
  g->due_ns = 0;
  g->state = LT_GEN_PREFILL;
  heap_put(g->b, g);
  lt__backend_wake(g->b);
  return 0;
}

int lt_gen_len(const lt_gen_t *g) { return g->len; }

void lt_gen_watch(lt_gen_t *g, int top, lt_token_cb cb, void *ud) {
  g->watch = cb;
  g->watch_ud = ud;
  g->want_top = !cb ? 0 : top < 0 ? 0 : top > LT_ENGINE_MAX_TOP ? LT_ENGINE_MAX_TOP : top;
  g->ntop = 0;
}

void lt_gen_close(lt_gen_t *g) {
  if (!g) return;
  lt_backend_t *b = g->b;
  heap_remove(b, g);
  unlink_gen(g);
  if (b->stepping) { /* a step still holds it (its callbacks close sessions) */
    g->closed = 1;
    g->next = b->dead;
    b->dead = g;
    return;
  }
  gen_free(g);
}
