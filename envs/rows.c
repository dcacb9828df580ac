/* Task rows from JSON-lines files (the dataset, agent and swe environments, `longtail swe validate`).
 *
 * Every row is checked when the file is opened (a bad one is an error naming file:line and the problem); then
 * only an index of line offsets stays in memory and rows are read back (pread) when sampled, so a file of
 * millions of rows costs 8 bytes a row.  Training index i is row perm_e[i mod n] of epoch e = i / n, with a fresh
 * permutation per epoch drawn from the run seed: without replacement within an epoch.  The daemon derives i from
 * the prompts already in the buffer, so a resumed run continues the same epoch. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "envs/internal.h"
#include "util/error.h"
#include "util/json.h"
#include "util/rng.h"

void lt__rows_close(lt__rows_t *s) {
  if (s->fd >= 0) close(s->fd);
  if (s->path) pthread_mutex_destroy(&s->mu);
  free(s->off);
  free(s->path);
  free(s->perm);
  memset(s, 0, sizeof *s);
  s->fd = -1;
}

int lt__rows_open(const char *ctx, const char *key, const char *path, lt__row_check_fn check, void *check_ud,
                  uint64_t seed, lt__rows_t *s) {
  memset(s, 0, sizeof *s);
  s->fd = -1;
  if (!strcmp(path, "-")) return lt_error_set(LT_ECONFIG, "%s: expected a file, not stdin", key);
  if (!(s->path = strdup(path))) return lt_error_set(LT_ENOMEM, "%s: out of memory", ctx);
  pthread_mutex_init(&s->mu, NULL);
  s->check = check;
  s->check_ud = check_ud;
  s->seed = seed;
  s->perm_epoch = -1;
  lt_jsonl_t rd;
  if (lt_jsonl_open(&rd, s->path) < 0) return lt_error_wrap(LT_ECONFIG, "%s", key);
  size_t cap = 0;
  int rc = 0;
  for (;;) {
    int64_t at = ftello(rd.f);
    cJSON *row;
    if ((rc = lt_jsonl_next(&rd, &row)) <= 0) {
      if (rc < 0) lt_error_wrap(rc, "%s", ctx);
      break;
    }
    char why[512];
    why[0] = 0;
    check(row, check_ud, why, sizeof why);
    cJSON_Delete(row);
    if (why[0]) {
      rc = lt_error_set(LT_EINVAL, "%s: %s:%ld: %s", ctx, path, rd.lineno, why);
      break;
    }
    if (s->n + 2 > cap) {
      if (s->n >= UINT32_MAX - 2) {
        rc = lt_error_set(LT_ERANGE, "%s: %s: more than 2^32-3 rows", ctx, path);
        break;
      }
      cap = cap ? 2 * cap : 1024;
      int64_t *o = realloc(s->off, cap * sizeof *o);
      if (!o) {
        rc = lt_error_set(LT_ENOMEM, "%s: out of memory indexing %s", ctx, path);
        break;
      }
      s->off = o;
    }
    s->off[s->n++] = at;
    s->off[s->n] = ftello(rd.f);
  }
  lt_jsonl_close(&rd);
  if (rc < 0) return rc;
  if (s->n == 0) return lt_error_set(LT_EINVAL, "%s: %s has no rows", key, path);
  if ((s->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
    return lt_error_set(LT_ECONFIG, "%s: %s: %s", key, path, strerror(errno));
  return 0;
}

int lt__rows_read(const lt__rows_t *s, uint32_t row, cJSON **out) {
  *out = NULL;
  if (row >= s->n) return lt_error_set(LT_ERANGE, "%s: no row %u", s->path, row + 1);
  size_t len = (size_t)(s->off[row + 1] - s->off[row]);
  char *text = malloc(len + 1);
  if (!text) return lt_error_set(LT_ENOMEM, "%s: out of memory", s->path);
  ssize_t got = pread(s->fd, text, len, s->off[row]);
  int rc = got == (ssize_t)len ? lt_json_parse(text, len, s->path, out) : LT_EIO;
  free(text);
  char why[512];
  why[0] = 0;
  if (rc == 0) s->check(*out, s->check_ud, why, sizeof why);
  if (rc == 0 && why[0]) {
    cJSON_Delete(*out);
    *out = NULL;
    rc = LT_EIO;
  }
  if (rc < 0) return lt_error_set(LT_EIO, "%s: row %u changed since the start of the run", s->path, row + 1);
  return 0;
}

/* Row `pos` of epoch `epoch`: a Fisher–Yates shuffle seeded by (run seed, epoch), kept for the current epoch. */
static int rows_permuted(lt__rows_t *s, int64_t epoch, uint32_t pos, uint32_t *row) {
  if (s->perm_epoch != epoch) {
    if (!s->perm && !(s->perm = malloc(s->n * sizeof *s->perm)))
      return lt_error_set(LT_ENOMEM, "%s: out of memory", s->path);
    for (uint32_t i = 0; i < s->n; i++) s->perm[i] = i;
    lt_rng_t r;
    lt_rng_seed(&r, lt_rng_mix(s->seed, (uint64_t)epoch));
    for (uint32_t i = s->n - 1; i > 0; i--) {
      uint32_t j = (uint32_t)lt_rng_below(&r, (uint64_t)i + 1), t = s->perm[i];
      s->perm[i] = s->perm[j];
      s->perm[j] = t;
    }
    s->perm_epoch = epoch;
  }
  *row = s->perm[pos];
  return 0;
}

int lt__rows_pick(lt__rows_t *s, uint64_t index, int in_order, uint32_t *row, int64_t *epoch) {
  *epoch = in_order ? -1 : (int64_t)(index / s->n);
  *row = (uint32_t)(index % s->n);
  if (in_order) return 0;
  pthread_mutex_lock(&s->mu);
  int rc = rows_permuted(s, *epoch, *row, row);
  pthread_mutex_unlock(&s->mu);
  return rc;
}
