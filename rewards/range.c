/* The rewards a domain's reward can produce: what the daemon accepts in a TRAJ (docs/rewards.md, "Range"). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "rewards/reward.h"
#include "util/error.h"

/* rewards.domains.<d>.<key>, else rewards.<key>; NULL when neither is set. */
static const cJSON *domain_key(const lt_config_t *cfg, const char *domain, const char *key, char *path, size_t cap) {
  const cJSON *doms = lt_config_get(cfg, "rewards.domains");
  const cJSON *d = domain && doms ? cJSON_GetObjectItemCaseSensitive(doms, domain) : NULL;
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(d, key);
  if (v) {
    snprintf(path, cap, "rewards.domains.%s.%s", domain, key);
    return v;
  }
  snprintf(path, cap, "rewards.%s", key);
  return lt_config_get(cfg, path);
}

int lt_reward_range(const lt_config_t *cfg, const char *domain, double *lo, double *hi) {
  char path[256];
  const cJSON *r = domain_key(cfg, domain, "range", path, sizeof path);
  if (cJSON_IsArray(r) && cJSON_GetArraySize(r) > 0) {
    const cJSON *a = cJSON_GetArrayItem(r, 0), *b = cJSON_GetArrayItem(r, 1);
    if (cJSON_GetArraySize(r) != 2 || !cJSON_IsNumber(a) || !cJSON_IsNumber(b) || !isfinite(a->valuedouble) ||
        !isfinite(b->valuedouble) || a->valuedouble > b->valuedouble)
      return lt_error_set(LT_ECONFIG, "%s: expected [lowest, highest] with lowest <= highest", path);
    *lo = a->valuedouble;
    *hi = b->valuedouble;
    return 1;
  }
  const cJSON *t = domain_key(cfg, domain, "type", path, sizeof path);
  /* An environment's own score has no range unless the config declares one. */
  if (cJSON_IsString(t) && !strcmp(t->valuestring, "env")) return 0;
  /* Every other verifier and judge scores in [0, 1]; shaping widens it by at most what its terms can add. */
  *lo = 0;
  *hi = 1;
  double ctx = (double)lt_config_int(cfg, "rollout.max_context");
  double target = (double)lt_config_int(cfg, "rewards.length_penalty.target");
  if (target > 0 && ctx > target) *lo -= lt_config_num(cfg, "rewards.length_penalty.coef") * (ctx - target) / target;
  if (strcmp(lt_config_str(cfg, "rewards.language.script"), "none")) *hi += lt_config_num(cfg, "rewards.language.coef");
  /* A malformed tool call takes at least one generated token. */
  *lo -= lt_config_num(cfg, "rewards.format_penalty") * ctx;
  return 1;
}

double lt_reward_failure(const lt_config_t *cfg, const char *domain) {
  double lo = 0, hi = 0;
  return cfg && lt_reward_range(cfg, domain, &lo, &hi) == 1 ? lo : 0;
}

int lt_reward_ranges_check(const lt_config_t *cfg) {
  double lo, hi;
  int rc = lt_reward_range(cfg, NULL, &lo, &hi);
  const cJSON *doms = lt_config_get(cfg, "rewards.domains");
  for (const cJSON *d = doms ? doms->child : NULL; d && rc >= 0; d = d->next)
    rc = lt_reward_range(cfg, d->string, &lo, &hi);
  return rc < 0 ? rc : 0;
}
