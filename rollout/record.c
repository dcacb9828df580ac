/* The trajectory record an agent builds (rollout/internal.h): its per-token arrays as one or more contexts one
 * after another (seq_starts), context tokens with loss mask 0, generated ones with their log-probabilities,
 * versions, sampling sets and routing.  Every per-token array is walked through LT_TRAJ_TOKEN_ARRAYS
 * (proto/proto.h), so a new field is copied where contexts are joined without an edit here. */
#include <string.h>

#include "rollout/internal.h"
#include "util/error.h"
#include "util/grow.h"

/* Routing entries per token (layers x experts), 0 without. */
static size_t rec_routed(const lt_traj_t *r) { return (size_t)r->routing_layers * (size_t)r->routing_k; }

int lt__rec_push_context(lt_traj_t *r, const int32_t *t, int n, const uint16_t *rids, const float *rprobs) {
  int rc = lt_traj_reserve(r, n);
  if (rc < 0) return rc;
  size_t R = rec_routed(r);
  for (int i = 0; i < n; i++) {
    r->tokens[r->ntokens] = t[i];
    r->versions[r->ntokens] = -1;
    r->support[r->ntokens] = 0;
    r->logprobs[r->ntokens] = 0;
    r->loss_mask[r->ntokens] = 0;
    if (R) {
      if (rids) {
        memcpy(r->routing_ids + (size_t)r->ntokens * R, rids + (size_t)i * R, sizeof *rids * R);
        memcpy(r->routing_probs + (size_t)r->ntokens * R, rprobs + (size_t)i * R, sizeof *rprobs * R);
      } else {
        memset(r->routing_ids + (size_t)r->ntokens * R, 0, sizeof *rids * R);
        memset(r->routing_probs + (size_t)r->ntokens * R, 0, sizeof *rprobs * R);
      }
    }
    r->ntokens++;
  }
  return 0;
}

int lt__rec_seq0(const lt_traj_t *r) { return r->nseqs ? r->seq_starts[r->nseqs - 1] : 0; }

static int rec_push_seq(lt_traj_t *r, int at) {
  lt_grow_t arr[] = {LT_GROW(r->seq_starts)};
  int rc = lt_grow(&r->cap_seqs, (size_t)r->nseqs + 1, 4, arr, 1);
  if (rc < 0) return rc;
  r->seq_starts[r->nseqs++] = at;
  return 0;
}

int lt__rec_new_context(lt_traj_t *r) {
  int rc = r->nseqs ? 0 : rec_push_seq(r, 0);
  if (rc == 0 && r->ntokens > lt__rec_seq0(r)) rc = rec_push_seq(r, r->ntokens);
  return rc;
}

void lt__rec_cut(lt_traj_t *r, int n) {
  int k = 0;
  for (int i = 0; i < n; i++) k += r->support[i];
  r->ntokens = n;
  r->nsupport_ids = k;
}

/* Room for n more sampling-set ids. */
static int rec_reserve_support_ids(lt_traj_t *r, size_t n) {
  lt_grow_t arr[] = {LT_GROW(r->support_ids)};
  return lt_grow(&r->cap_support_ids, (size_t)r->nsupport_ids + n, 1024, arr, 1);
}

int lt__rec_append(lt_traj_t *dst, const lt_traj_t *src) {
  int base = dst->ntokens, rc = dst->nseqs || !base ? 0 : rec_push_seq(dst, 0);
  for (int k = 0; rc == 0 && src->ntokens && k < (src->nseqs ? src->nseqs : 1); k++)
    rc = rec_push_seq(dst, base + (src->nseqs ? src->seq_starts[k] : 0));
  if (rc == 0) rc = lt_traj_reserve(dst, src->ntokens);
  if (rc == 0) rc = rec_reserve_support_ids(dst, (size_t)src->nsupport_ids);
  if (rc < 0 || !src->ntokens) return rc;
  size_t n = (size_t)src->ntokens, R = rec_routed(dst);
#define COPY_ARRAY(m, dtype, elem, is_routed, required) \
  if (dst->m) memcpy(dst->m + (size_t)base * ((is_routed) ? R : 1), src->m, sizeof *src->m * n * ((is_routed) ? R : 1));
  LT_TRAJ_TOKEN_ARRAYS(COPY_ARRAY)
#undef COPY_ARRAY
  if (src->nsupport_ids)
    memcpy(dst->support_ids + dst->nsupport_ids, src->support_ids,
           sizeof *src->support_ids * (size_t)src->nsupport_ids);
  dst->nsupport_ids += src->nsupport_ids;
  dst->ntokens += src->ntokens;
  return 0;
}

/* Appends the turn's sampling sets to the record's. */
static int rec_push_support_ids(lt_traj_t *r, const lt_turn_t *t) {
  size_t n = 0;
  for (int i = 0; i < t->n; i++) n += (size_t)t->support[i];
  if (!n) return 0;
  int rc = rec_reserve_support_ids(r, n);
  if (rc < 0) return rc;
  memcpy(r->support_ids + r->nsupport_ids, t->support_ids, sizeof *r->support_ids * n);
  r->nsupport_ids += (int)n;
  return 0;
}

int lt__rec_push_turn(lt_traj_t *r, const int32_t *pre_ids, int npre, const lt_turn_t *t,
                      const lt_prefill_routing_t *pre, int *gen_at) {
  int rc = lt__rec_push_context(r, pre_ids, npre, pre->ids, pre->probs);
  *gen_at = r->ntokens;
  if (rc == 0 && t->error) rc = lt_error_set(t->error, "%s", t->error_msg ? t->error_msg : lt_strerror(t->error));
  if (rc == 0) rc = lt_traj_reserve(r, t->n);
  if (rc == 0) rc = rec_push_support_ids(r, t);
  if (rc < 0) return rc;
  size_t R = rec_routed(r);
  for (int i = 0; i < t->n; i++) {
    r->tokens[r->ntokens] = t->tokens[i];
    r->logprobs[r->ntokens] = t->logprobs[i];
    r->support[r->ntokens] = t->support[i];
    r->versions[r->ntokens] = t->versions[i];
    r->loss_mask[r->ntokens] = 1;
    if (R && t->routing_ids) {
      memcpy(r->routing_ids + (size_t)r->ntokens * R, t->routing_ids + (size_t)i * R, sizeof *r->routing_ids * R);
      memcpy(r->routing_probs + (size_t)r->ntokens * R, t->routing_probs + (size_t)i * R, sizeof *r->routing_probs * R);
    }
    r->ntokens++;
  }
  return 0;
}
