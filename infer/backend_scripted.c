/* The scripted backend: a fake policy for load tests and orchestration
 * benchmarks, clearly not a model.  Each turn writes filler and a fixed
 * ending (" #### 0", or opts.answer: a tool call, say), with synthetic logprobs; turn lengths are long-tailed
 * (tail_fraction of turns are tail_factor times longer) and each token
 * takes token_us of simulated time (a turn arrives whole once its time has
 * passed), so many sessions cost no CPU. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "infer/internal.h"
#include "util/error.h"
#include "util/rng.h"
#include "util/time.h"

typedef struct {
  lt_backend_opts_t o;
} scripted_t;

typedef struct {
  lt_rng_t rng;
  int target; /* tokens this turn will produce */
} sgen_t;

static const char *DEFAULT_ANSWER = " #### 0";

static int s_init(lt_backend_t *b, const lt_backend_opts_t *o) {
  scripted_t *s = calloc(1, sizeof *s);
  if (!s) return lt_error_set(LT_ENOMEM, "backend: out of memory");
  s->o = *o;
  if (s->o.mean_tokens <= 0) s->o.mean_tokens = 32;
  int rc = lt_tokenizer_byte(o->vocab >= 259 ? o->vocab : LT_TOKENIZER_BYTE_VOCAB, &b->own_tok);
  if (rc < 0) {
    free(s);
    return rc;
  }
  b->tok = b->own_tok;
  b->state = s;
  b->info.max_context = o->max_context > 0 ? o->max_context : 4096;
  b->info.vocab = lt_tokenizer_vocab(b->own_tok);
  b->info.support_known = 1;
  return 0;
}

static void s_fini(lt_backend_t *b) { free(b->state); }

static int s_open(lt_backend_t *b, lt_gen_t *g, uint64_t seed) {
  sgen_t *s = calloc(1, sizeof *s);
  if (!s) return lt_error_set(LT_ENOMEM, "backend: out of memory");
  lt_rng_seed(&s->rng, seed);
  g->impl = s;
  return 0;
}

static void s_close(lt_gen_t *g) { free(g->impl); }

static const char *answer_of(const scripted_t *c) { return c->o.answer && *c->o.answer ? c->o.answer : DEFAULT_ANSWER; }

static int s_prefill(lt_gen_t *g) {
  scripted_t *c = g->b->state;
  sgen_t *s = g->impl;
  /* Draw this turn's length: exponential around the mean, with a long tail. */
  double len = -log(1.0 - lt_rng_uniform(&s->rng)) * c->o.mean_tokens;
  if (lt_rng_uniform(&s->rng) < c->o.tail_fraction) len *= c->o.tail_factor;
  s->target = (int)len + (int)strlen(answer_of(c)) + 2;
  return 0;
}

/* A turn is answered the way a remote inference server answers: nothing for
 * the turn's generation time (its tokens × token_us), then all its tokens at
 * once.  One wake-up per turn instead of one per token keeps thousands of
 * sessions per worker cheap; with token_us 0 the turn is written at once. */
static int s_decode(lt_backend_t *b, lt_gen_t **gens, int n) {
  scripted_t *c = b->state;
  int64_t now = (int64_t)lt_time_mono_ns();
  int32_t stop = lt_tokenizer_special(b->tok, "<|im_end|>");
  const char *answer = answer_of(c);
  int alen = (int)strlen(answer);
  for (int i = 0; i < n; i++) {
    lt_gen_t *g = gens[i];
    sgen_t *s = g->impl;
    int len = s->target - g->n, room = b->info.max_context - g->len;
    if (len > g->max_new - g->n) len = g->max_new - g->n;
    if (len > room) len = room;
    if (c->o.token_us > 0 && g->due_ns == 0) { /* the turn starts: answer after its generation time */
      g->due_ns = now + (int64_t)c->o.token_us * 1000 * (len > 0 ? len : 1);
      continue;
    }
    if (g->due_ns > now) continue;
    for (int k = 0; k < len; k++) {
      int left = s->target - g->n;
      int32_t tok = left <= 1          ? stop
                    : left <= alen + 1 ? (unsigned char)answer[alen + 1 - left]
                                       : 'a' + (int32_t)lt_rng_below(&s->rng, 26);
      int rc = lt__gen_push(g, tok, -0.5f, 0, NULL, NULL, NULL);
      if (rc < 0) return rc;
    }
  }
  return 0;
}

static int s_reload(lt_backend_t *b, const char *dir, const char *sha) { return 0; }

const lt_backend_impl_t lt__backend_scripted = {.init = s_init,
                                                .fini = s_fini,
                                                .open = s_open,
                                                .close = s_close,
                                                .prefill = s_prefill,
                                                .decode = s_decode,
                                                .reload = s_reload};
