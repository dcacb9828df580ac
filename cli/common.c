/* Helpers shared by the commands. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "buffer/buffer.h"
#include "util/error.h"
#include "util/fs.h"
#include "learner/model.h"
#include "util/json.h"

int lt_cli_token_array(const cJSON *line, const char *key, int vocab, int min_len, int max_len, const char *path,
                       long lineno, int32_t **out, int *n) {
  int rc = lt_json_get_i32_array(line, key, out, n);
  if (rc < 0) return lt_error_wrap(rc, "%s:%ld", path, lineno);
  for (int i = 0; i < *n; i++)
    if ((*out)[i] < 0 || (*out)[i] >= vocab) {
      rc = lt_error_set(LT_ERANGE, "%s:%ld: %s[%d] = %d is outside the vocabulary [0, %d)", path, lineno, key, i,
                        (*out)[i], vocab);
      free(*out);
      *out = NULL;
      return rc;
    }
  if (*n < min_len || *n > max_len) {
    rc =
        lt_error_set(LT_ERANGE, "%s:%ld: %s has %d tokens, expected %d to %d", path, lineno, key, *n, min_len, max_len);
    free(*out);
    *out = NULL;
    return rc;
  }
  return 0;
}

int lt_cli_map_lines(const char *input, lt_cli_line_fn fn, void *ud) {
  lt_jsonl_t r;
  int rc = lt_jsonl_open(&r, input);
  if (rc < 0) return rc;
  lt_buf_t out = {0};
  cJSON *line;
  while ((rc = lt_jsonl_next(&r, &line)) == 1) {
    lt_buf_reset(&out);
    rc = fn(line, &out, ud);
    cJSON_Delete(line);
    if (rc < 0) {
      lt_error_wrap(rc, "%s:%ld", r.path, r.lineno);
      break;
    }
    if (lt_buf_ok(&out) < 0) {
      rc = lt_error_set(LT_ENOMEM, "out of memory");
      break;
    }
    if (fwrite(out.data, 1, out.len, stdout) != out.len) {
      rc = lt_error_set(LT_EIO, "cannot write stdout");
      break;
    }
  }
  lt_buf_free(&out);
  lt_jsonl_close(&r);
  return rc < 0 ? rc : 0;
}

int lt_cli_threads(void) {
  const char *s = getenv("LT_THREADS");
  if (s && atoi(s) > 0) return atoi(s);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

int lt_cli_close_run(const char *command, lt_buffer_t *b, int code) {
  int rc = code ? 0 : lt_buffer_damaged(b);
  lt_buffer_close(b);
  return rc < 0 ? lt_cli_fail(command, rc) : code;
}

int lt_cli_open_run(const char *command, const char *arg, int check, lt_buffer_t **b, char *name, size_t cap) {
  char path[4200];
  if (lt_fs_is_dir(arg)) snprintf(path, sizeof path, "%s/buffer.db", arg);
  else snprintf(path, sizeof path, "%s", arg);
  /* (damage the open finds fails here with exit 6; damage a read meets, at lt_cli_close_run) */
  int rc = lt_buffer_open(path, LT_BUF_READONLY | (check ? LT_BUF_CHECK : 0), b);
  if (rc < 0) return lt_cli_fail(command, rc);
  if (!name) return 0;
  char *run = lt_buffer_meta_get(*b, "run");
  if (run && run[0]) snprintf(name, cap, "%s", run);
  else lt_path_base(arg, name, cap); /* runs made before the name was recorded */
  free(run);
  return 0;
}

/* The tokenizer of the run's newest weights still on disk. */
lt_tokenizer_t *lt_cli_run_tokenizer(lt_buffer_t *b) {
  lt_ckpt_row_t ck;
  if (lt_buffer_weights(b, 0, &ck) <= 0) return NULL;
  const char *dir = ck.path;
  char cfgp[4200];
  snprintf(cfgp, sizeof cfgp, "%s/config.json", dir);
  lt_model_config_t mc;
  lt_tokenizer_t *t = NULL;
  if (dir[0] && lt_model_config_load(cfgp, &mc) == 0 && lt_tokenizer_for_model(dir, mc.vocab, &t) == 0) return t;
  return NULL;
}
