/* `longtail swe validate TASKS.jsonl [--patch gold|none|FILE.jsonl] [--jobs N] [--json]`: the swe environment's
 * judge on its own, as SWE-bench validates its instances (docs/envs.md, "`swe`"). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "envs/env.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/json.h"
#include "util/time.h"

typedef enum { PATCH_GOLD, PATCH_NONE, PATCH_FILE } patch_mode;

typedef struct {
  char *patch; /* what is judged (NULL: nothing) */
  int run;     /* 0: no prediction for it, not judged */
  int done;
  cJSON *result; /* the verdict, or {"instance_id", "resolved": false, "error"} */
  int failed;    /* the judge failed (the image, the test patch) */
} item_t;

typedef struct {
  lt_swe_harness_t *h;
  item_t *items;
  int n, next;
  pthread_mutex_t mu;
  pthread_cond_t cv;
} job_t;

static void *judge_thread(void *arg) {
  job_t *j = arg;
  for (;;) {
    pthread_mutex_lock(&j->mu);
    int i = j->next < j->n ? j->next++ : -1;
    pthread_mutex_unlock(&j->mu);
    if (i < 0) return NULL;
    item_t *it = &j->items[i];
    cJSON *r = NULL;
    int rc = it->run ? lt_swe_harness_judge(j->h, i, it->patch, &r) : 0;
    if (rc < 0) {
      cJSON *row = NULL;
      lt_swe_harness_row(j->h, i, &row);
      const cJSON *id = cJSON_GetObjectItemCaseSensitive(row, "instance_id");
      r = cJSON_CreateObject();
      cJSON_AddStringToObject(r, "instance_id", cJSON_IsString(id) ? id->valuestring : "");
      cJSON_AddBoolToObject(r, "resolved", 0);
      cJSON_AddStringToObject(r, "error", lt_error_msg());
      cJSON_Delete(row);
    }
    pthread_mutex_lock(&j->mu);
    it->result = r;
    it->failed = rc < 0;
    it->done = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
  }
}

/* SWE-bench predictions: {"instance_id", "model_patch"} per line; the patch of each row (NULL: none). */
static int load_predictions(const char *path, lt_swe_harness_t *h, item_t *items, int n) {
  lt_jsonl_t rd;
  int rc = lt_jsonl_open(&rd, path);
  if (rc < 0) return rc;
  cJSON *by_id = cJSON_CreateObject(), *line;
  while ((rc = lt_jsonl_next(&rd, &line)) > 0) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(line, "instance_id");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(line, "model_patch");
    if (!cJSON_IsString(id) || (p && !cJSON_IsString(p) && !cJSON_IsNull(p))) {
      rc = lt_error_set(LT_EINVAL, "%s:%ld: a prediction is {\"instance_id\": string, \"model_patch\": string}", path,
                        rd.lineno);
      cJSON_Delete(line);
      break;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(by_id, id->valuestring);
    cJSON_AddStringToObject(by_id, id->valuestring, cJSON_IsString(p) ? p->valuestring : "");
    cJSON_Delete(line);
  }
  lt_jsonl_close(&rd);
  for (int i = 0; i < n && rc == 0; i++) {
    cJSON *row = NULL;
    if ((rc = lt_swe_harness_row(h, i, &row)) < 0) break;
    const cJSON *p =
        cJSON_GetObjectItemCaseSensitive(by_id, cJSON_GetObjectItemCaseSensitive(row, "instance_id")->valuestring);
    items[i].run = p != NULL;
    if (p && p->valuestring[0] && !(items[i].patch = strdup(p->valuestring)))
      rc = lt_error_set(LT_ENOMEM, "out of memory");
    cJSON_Delete(row);
  }
  cJSON_Delete(by_id);
  return rc < 0 ? rc : 0;
}

static void print_line(const cJSON *r, int json) {
  if (json) {
    lt_buf_t b = {0};
    lt_json_write(&b, r);
    lt_buf_putc(&b, '\n');
    if (lt_buf_ok(&b) == 0) fwrite(b.data, 1, b.len, stdout);
    lt_buf_free(&b);
    fflush(stdout);
    return;
  }
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(r, "instance_id"),
              *err = cJSON_GetObjectItemCaseSensitive(r, "error");
  const cJSON *tests = cJSON_GetObjectItemCaseSensitive(r, "tests"),
              *secs = cJSON_GetObjectItemCaseSensitive(r, "seconds");
  printf("%-32s %s", cJSON_IsString(id) ? id->valuestring : "?",
         cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "resolved")) ? "resolved" : "not resolved");
  for (const cJSON *list = tests ? tests->child : NULL; list; list = list->next) {
    int pass = 0, all = 0;
    for (const cJSON *t = list->child; t; t = t->next) all++, pass += !strcmp(t->valuestring, "passed");
    printf("  %s %d/%d", list->string, pass, all);
  }
  if (cJSON_IsNumber(secs)) printf("  %.2f s", secs->valuedouble);
  if (cJSON_IsString(err)) printf("  (%s)", err->valuestring);
  printf("\n");
  fflush(stdout);
}

int lt_cmd_swe(int argc, char **argv) {
  lt_arg_t args[] = {
      {.name = "--patch",
       .kind = LT_ARG_VALUE,
       .metavar = "gold|none|FILE.jsonl",
       .help = "what each instance is judged with: its gold patch (default), nothing, or SWE-bench predictions "
               "({\"instance_id\", \"model_patch\"} per line)"},
      {.name = "--jobs", .kind = LT_ARG_VALUE, .metavar = "N", .help = "instances judged at once (default 1)"},
      {.name = "--json", .kind = LT_ARG_FLAG, .help = "one JSON object per instance"},
      {.name = "--test-timeout", .kind = LT_ARG_VALUE, .metavar = "S", .help = "seconds per test id (default 60)"},
      {.name = "--config",
       .kind = LT_ARG_VALUE,
       .metavar = "CFG",
       .help = "take the boxes' limits from CFG's sandbox section"},
      {.name = "--set", .kind = LT_ARG_MULTI, .metavar = "PATH=VALUE", .help = "override a config key"},
  };
  lt_cmd_args_t c = {.command = "swe",
                     .usage = "validate TASKS.jsonl [--patch gold|none|FILE.jsonl] [--jobs N] [--json]",
                     .summary =
                         "Judges a swe task set as the swe environment judges an episode: each instance's "
                         "patch applied in a fresh root from its image, then its test_patch, then every "
                         "FAIL_TO_PASS and PASS_TO_PASS test.",
                     .details =
                         "The exit status is 0 when every instance did what the mode expects (gold: resolved; "
                         "none: not resolved; predictions: judged), 1 otherwise, 2 for a bad command line or "
                         "tasks file. docs/envs.md (\"swe\") describes the rows and the verdict.",
                     .args = args,
                     .nargs = (int)(sizeof args / sizeof args[0]),
                     .min_pos = 2,
                     .max_pos = 2};
  int rc = lt_args_parse(&c, argc, argv);
  if (rc) return rc == 1 ? 0 : rc;
  if (strcmp(c.pos[0], "validate"))
    return lt_args_usage_error(&c, "unknown subcommand '%s' (expected validate)", c.pos[0]);
  long long jobs;
  double tt;
  if ((rc = lt_args_long(&c, "--jobs", 1, 1, 256, &jobs)) || (rc = lt_args_double(&c, "--test-timeout", 60, &tt)))
    return rc;
  if (!(tt > 0)) return lt_args_usage_error(&c, "--test-timeout must be positive");
  const char *pm = lt_args_str(&c, "--patch", "gold");
  patch_mode mode = !strcmp(pm, "gold") ? PATCH_GOLD : !strcmp(pm, "none") ? PATCH_NONE : PATCH_FILE;
  lt_config_t cfg;
  if ((rc = lt_cli_load_config("swe", lt_args_str(&c, "--config", NULL), lt_args_get(&c, "--set"), &cfg))) return rc;
  lt_swe_harness_t *h = NULL;
  rc = lt_swe_harness_open(&cfg, c.pos[1], (int)jobs, tt, &h);
  lt_config_free(&cfg);
  if (rc < 0) return lt_cli_fail("swe", rc);
  int n = lt_swe_harness_count(h);
  job_t j = {.h = h, .n = n, .items = calloc((size_t)n, sizeof *j.items)};
  if (!j.items) rc = LT_ENOMEM;
  if (rc == 0 && mode == PATCH_FILE) rc = load_predictions(pm, h, j.items, n);
  for (int i = 0; rc == 0 && mode != PATCH_FILE && i < n; i++) {
    j.items[i].run = 1;
    cJSON *row = NULL;
    if ((rc = lt_swe_harness_row(h, i, &row)) < 0) break;
    const cJSON *gold = cJSON_GetObjectItemCaseSensitive(row, "patch");
    if (mode == PATCH_GOLD && cJSON_IsString(gold) && gold->valuestring[0] &&
        !(j.items[i].patch = strdup(gold->valuestring)))
      rc = lt_error_set(LT_ENOMEM, "out of memory");
    cJSON_Delete(row);
  }
  if (rc < 0) {
    free(j.items);
    lt_swe_harness_close(h);
    return lt_cli_fail("swe", rc);
  }
  pthread_mutex_init(&j.mu, NULL);
  pthread_cond_init(&j.cv, NULL);
  double t0 = lt_time_mono_s();
  pthread_t th[256];
  int nth = 0;
  for (; nth < jobs && nth < n; nth++)
    if (pthread_create(&th[nth], NULL, judge_thread, &j) != 0) break;
  if (nth == 0 && n > 0) judge_thread(&j); /* no thread could start: judge here */
  int resolved = 0, judged = 0, errors = 0, wrong = 0;
  for (int i = 0; i < n; i++) { /* in file order, each as soon as it is known */
    pthread_mutex_lock(&j.mu);
    while (!j.items[i].done) pthread_cond_wait(&j.cv, &j.mu);
    pthread_mutex_unlock(&j.mu);
    item_t *it = &j.items[i];
    if (!it->run) continue;
    int res = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it->result, "resolved"));
    judged++, resolved += res, errors += it->failed;
    wrong += it->failed || (mode == PATCH_GOLD && !res) || (mode == PATCH_NONE && res);
    print_line(it->result, lt_args_flag(&c, "--json"));
  }
  for (int i = 0; i < nth; i++) pthread_join(th[i], NULL);
  fprintf(stderr,
          "longtail swe: %d of %d instances judged (--patch %s): %d resolved, %d not, %d failed to run; %.1f s\n",
          judged, n, pm, resolved, judged - resolved - errors, errors, lt_time_mono_s() - t0);
  if (mode == PATCH_GOLD && wrong)
    fprintf(stderr, "longtail swe: %d instances do not resolve with their gold patch\n", wrong);
  if (mode == PATCH_NONE && wrong)
    fprintf(stderr, "longtail swe: %d instances resolve (or fail) without a patch\n", wrong);
  for (int i = 0; i < n; i++) free(j.items[i].patch), cJSON_Delete(j.items[i].result);
  free(j.items);
  pthread_mutex_destroy(&j.mu);
  pthread_cond_destroy(&j.cv);
  lt_swe_harness_close(h);
  return wrong ? LT_EXIT_FAIL : LT_EXIT_OK;
}
