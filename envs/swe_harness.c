/* The swe judge on its own (`longtail swe validate`, docs/envs.md, "`swe`"): a tasks file checked as the swe
 * environment checks it, and any patch judged as an episode's diff is, so that a task set is validated with its
 * gold patches (every task resolves) and without a patch (none does) before a run trains on it. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envs/internal.h"
#include "util/error.h"

struct lt_swe_harness {
  lt__rows_t rows;
  char *base_dir;
  double test_timeout_s;
  lt__swe_images_t *images;
};

int lt_swe_harness_open(const lt_config_t *cfg, const char *tasks, int pool, double test_timeout_s,
                        lt_swe_harness_t **out) {
  *out = NULL;
  lt_swe_harness_t *h = calloc(1, sizeof *h);
  if (!h) return lt_error_set(LT_ENOMEM, "swe: out of memory");
  h->rows.fd = -1;
  h->test_timeout_s = test_timeout_s;
  lt_sandbox_limits_t l;
  lt_sandbox_limits_from_config(cfg, &l);
  if (l.timeout_s < test_timeout_s) l.timeout_s = test_timeout_s; /* the CPU limit follows the default deadline */
  char cache[4096];
  lt_sandbox_image_cache(cfg, cache, sizeof cache);
  int rc = (h->base_dir = lt__swe_base_dir(tasks)) ? 0 : lt_error_set(LT_ENOMEM, "swe: out of memory");
  if (rc == 0) rc = lt__rows_open("swe", "swe validate", tasks, lt__swe_row_check, NULL, 0, &h->rows);
  if (rc == 0) rc = lt__swe_images_create(cache, &l, pool, &h->images);
  if (rc < 0) {
    lt_swe_harness_close(h);
    return rc;
  }
  *out = h;
  return 0;
}

int lt_swe_harness_count(const lt_swe_harness_t *h) { return (int)h->rows.n; }

int lt_swe_harness_row(lt_swe_harness_t *h, int i, cJSON **row) { return lt__rows_read(&h->rows, (uint32_t)i, row); }

int lt_swe_harness_judge(lt_swe_harness_t *h, int i, const char *patch, cJSON **result) {
  *result = NULL;
  cJSON *row;
  int rc = lt__rows_read(&h->rows, (uint32_t)i, &row);
  if (rc < 0) return rc;
  lt__swe_task_t t;
  char why[512], *image = NULL;
  if (lt__swe_task_parse(row, NULL, &t, why, sizeof why) < 0)
    rc = lt_error_set(LT_EINVAL, "swe: row %d: %s", i + 1, why);
  else if (!(image = lt__swe_image_ref(t.image, h->base_dir))) rc = lt_error_set(LT_ENOMEM, "swe: out of memory");
  if (rc == 0) {
    t.image = image;
    rc = lt__swe_judge(h->images, &t, patch, h->test_timeout_s, result);
  }
  lt__swe_task_free(&t); /* (zeroed by a failed parse) */
  free(image);
  cJSON_Delete(row);
  return rc;
}

void lt_swe_harness_close(lt_swe_harness_t *h) {
  if (!h) return;
  lt__rows_close(&h->rows);
  lt__swe_images_free(h->images);
  free(h->base_dir);
  free(h);
}
