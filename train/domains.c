/* Per-domain training settings (seed 001 App. D.2: group counts per domain; seed 002 §3.1: per-domain KL):
 * envs.<d>.group_size, envs.<d>.kl_coef and envs.<d>.batch_share, read once from the config. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/internal.h"
#include "util/error.h"

static const cJSON *domain_key(const lt_config_t *c, const char *domain, const char *key) {
  const cJSON *d = cJSON_GetObjectItemCaseSensitive(lt_config_get(c, "envs"), domain);
  return d ? cJSON_GetObjectItemCaseSensitive(d, key) : NULL;
}

float lt__domain_kl(const lt_config_t *c, const char *domain) {
  const cJSON *k = domain_key(c, domain, "kl_coef");
  return (float)(cJSON_IsNumber(k) ? k->valuedouble : lt_config_num(c, "learner.kl_coef"));
}

int lt__domains_any_kl(const lt_config_t *c) {
  if (lt_config_num(c, "learner.kl_coef") > 0) return 1;
  const cJSON *d;
  cJSON_ArrayForEach(d, lt_config_get(c, "envs")) {
    if (lt__domain_kl(c, d->string) > 0) return 1;
  }
  return 0;
}

int lt__domains_read(const lt_config_t *c, int group_size, lt__domains_t *out) {
  memset(out, 0, sizeof *out);
  const cJSON *map = lt_config_get(c, "envs"), *d;
  int n = cJSON_GetArraySize(map);
  if (n <= 0) return 0;
  if (!(out->d = calloc((size_t)n, sizeof *out->d))) return lt_error_set(LT_ENOMEM, "learner: out of memory");
  double shared = 0;
  int unset = 0, any = 0;
  cJSON_ArrayForEach(d, map) {
    lt__domain_t *x = &out->d[out->n++];
    snprintf(x->name, sizeof x->name, "%s", d->string);
    const cJSON *g = domain_key(c, d->string, "group_size"), *s = domain_key(c, d->string, "batch_share");
    x->group = cJSON_IsNumber(g) ? (int)g->valuedouble : group_size;
    x->share = cJSON_IsNumber(s) ? s->valuedouble : -1;
    any |= x->share >= 0;
    if (x->share >= 0) shared += x->share;
    else unset++;
  }
  if (!any) return 0; /* no quotas: arrival order */
  if (shared > 1 + 1e-9) {
    lt__domains_free(out);
    return lt_error_set(LT_ECONFIG, "envs.*.batch_share: the domains' shares sum to %g, more than 1", shared);
  }
  /* Domains without a share split what the others leave. */
  for (int i = 0; i < out->n; i++)
    if (out->d[i].share < 0) out->d[i].share = (1 - shared) / unset;
  out->quotas = 1;
  return 0;
}

int lt__domains_find(const lt__domains_t *ds, const char *name) {
  for (int i = 0; i < ds->n; i++)
    if (!strcmp(ds->d[i].name, name)) return i;
  return -1;
}

void lt__domains_free(lt__domains_t *ds) {
  free(ds->d);
  memset(ds, 0, sizeof *ds);
}
