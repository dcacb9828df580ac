/* examples/swe-mini (docs/swe.md, "swe-mini") checked against the real swe environment in seconds: its shell tasks
 * (the ones busybox can run) in an image of the test suite's busybox with their repositories at their repo_dir,
 * validated with their gold patches (every one resolves) and without (none does); and its demonstrations (one
 * `sed` per bug shape, through the bash tool), rendered by the environment after the task's real opening, answered
 * by the real tool with the same text, and resolving their task.  The whole task set in the Debian image is `make swe-check`. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <uv.h>

#include "cli/commands.h"
#include "envs/env.h"
#include "rewards/reward.h"
#include "sandbox/sandbox.h"
#include "tests/support/harness.h"
#include "tests/support/image.h"
#include "text/toolcall.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/json.h"

#define SHELL_CMD "sh tests/run.sh {test}"
#define PER_SHAPE 2 /* shell tasks validated per bug shape: seconds, not minutes */

static int swe_mini_have_boxes(void) {
  lt_sandbox_caps_t c;
  lt_sandbox_probe(&c);
  return c.userns;
}

typedef struct {
  lt_test_entry_t e[512];
  char *paths[512], *hosts[512];
  int n;
} swe_mini_layer_t;

/* testbed/NAME/... entries for every file of examples/swe-mini/repos/NAME (their content read from the host). */
static void swe_mini_add_repo(swe_mini_layer_t *l, const char *host, const char *in_image) {
  cr_assert_lt(l->n, 500);
  l->paths[l->n] = strdup(in_image);
  l->e[l->n] = (lt_test_entry_t){l->paths[l->n], 'd', 0, NULL, 0};
  l->n++;
  DIR *d = opendir(host);
  cr_assert_not_null(d, "%s", host);
  for (struct dirent *de; (de = readdir(d));) {
    if (de->d_name[0] == '.') continue;
    char h[4096], i[4096];
    struct stat st;
    snprintf(h, sizeof h, "%s/%s", host, de->d_name);
    snprintf(i, sizeof i, "%s/%s", in_image, de->d_name);
    cr_assert_eq(stat(h, &st), 0, "%s", h);
    if (S_ISDIR(st.st_mode)) {
      swe_mini_add_repo(l, h, i);
      continue;
    }
    cr_assert_lt(l->n, 500);
    l->paths[l->n] = strdup(i), l->hosts[l->n] = strdup(h);
    l->e[l->n] = (lt_test_entry_t){l->paths[l->n], 'F', 0644, l->hosts[l->n], 0};
    l->n++;
  }
  closedir(d);
}

static void swe_mini_layer_free(swe_mini_layer_t *l) {
  for (int i = 0; i < l->n; i++) free(l->paths[i]), free(l->hosts[i]);
}

/* Rows of examples/swe-mini/NAME.jsonl run by `sh` (PER_SHAPE of each shell shape, or only `id`), their image
 * rewritten to `image`; their repositories added to the layer.  The JSON lines, caller frees. */
static char *swe_mini_rows(const char *name, const char *image, const char *id, swe_mini_layer_t *l) {
  char path[4096];
  snprintf(path, sizeof path, "%s/examples/swe-mini/%s.jsonl", lt_test_root(), name);
  lt_jsonl_t rd;
  cr_assert_eq(lt_jsonl_open(&rd, path), 0, "%s", lt_error_msg());
  cJSON *row, *seen = cJSON_CreateObject();
  lt_buf_t out = {0};
  while (lt_jsonl_next(&rd, &row) == 1) {
    const char *shape = cJSON_GetObjectItem(row, "shape")->valuestring;
    const char *iid = cJSON_GetObjectItem(row, "instance_id")->valuestring;
    cJSON *k = cJSON_GetObjectItem(seen, shape);
    int take = strcmp(cJSON_GetObjectItem(row, "test_cmd")->valuestring, SHELL_CMD) == 0 &&
               (id ? strcmp(iid, id) == 0 : !k || k->valueint < PER_SHAPE);
    if (take) {
      if (!k) k = cJSON_AddNumberToObject(seen, shape, 0);
      cJSON_SetNumberValue(k, k->valueint + 1);
      cJSON_ReplaceItemInObject(row, "image", cJSON_CreateString(image));
      char host[4096];
      snprintf(host, sizeof host, "%s/examples/swe-mini/repos/%s", lt_test_root(),
               cJSON_GetObjectItem(row, "repo_dir")->valuestring + strlen("/testbed/"));
      swe_mini_add_repo(l, host, cJSON_GetObjectItem(row, "repo_dir")->valuestring + 1);
      lt_json_write(&out, row);
      lt_buf_putc(&out, '\n');
    }
    cJSON_Delete(row);
  }
  lt_jsonl_close(&rd);
  cJSON_Delete(seen);
  return lt_buf_take(&out);
}

/* The busybox image with /testbed and the layer's repositories, at DIR/images/mini; "oci:DIR/images/mini:latest". */
static void swe_mini_image(const char *dir, swe_mini_layer_t *l, char *ref, size_t n) {
  lt_test_layer_t layers[2] = {lt_test_busybox_layer(), {l->e, l->n, "gzip"}};
  char img[4200];
  snprintf(img, sizeof img, "%s/images/mini", dir);
  cr_assert_eq(
      lt_test_oci_write(img, "latest", layers, 2, "{\"Env\":[\"PATH=/bin\"],\"WorkingDir\":\"/testbed\"}", NULL), 0);
  snprintf(ref, n, "oci:%s:latest", img);
}

static int swe_mini_count(const char *s, const char *needle) {
  int k = 0;
  for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle)) k++;
  return k;
}

Test(swe_mini, shell_tasks_resolve_with_gold_and_not_without, .timeout = 240) {
  if (!swe_mini_have_boxes()) cr_skip_test("no user namespaces: no boxes here");
  if (!lt_test_busybox_image()) cr_skip_test("no static busybox: no test image");
  char *dir = lt_test_tmpdir("swe_mini_validate"), ref[4300], tasks[4300], set[4400];
  swe_mini_layer_t l = {0};
  l.e[l.n++] = (lt_test_entry_t){"testbed", 'd', 0, NULL, 0};
  /* the image's reference is only known once its path is: rows first into a buffer, with the path fixed below */
  snprintf(ref, sizeof ref, "oci:%s/images/mini:latest", dir);
  char *train = swe_mini_rows("tasks", ref, NULL, &l), *held = swe_mini_rows("heldout", ref, NULL, &l);
  char rebuilt[4300];
  swe_mini_image(dir, &l, rebuilt, sizeof rebuilt);
  cr_assert_str_eq(rebuilt, ref);
  lt_buf_t all = {0};
  lt_buf_printf(&all, "%s%s", train, held);
  int rows = swe_mini_count(all.data, "\"instance_id\"");
  cr_assert_eq(rows, 3 * PER_SHAPE * 2, "%d shell rows: three shell shapes, PER_SHAPE each from both files", rows);
  snprintf(tasks, sizeof tasks, "%s/tasks.jsonl", dir);
  cr_assert_eq(lt_test_write(tasks, all.data), 0);
  snprintf(set, sizeof set, "sandbox.image_cache=%s/cache", dir);
  lt_run_t r;
  const char *gold[] = {"longtail", "swe", "validate", tasks, "--jobs", "2", "--json", "--set", set, NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 200, gold), 0);
  cr_expect_eq(r.status, 0, "%s%s", r.out, r.err);
  cr_expect_eq(swe_mini_count(r.out, "\"resolved\":true"), rows, "%s%s", r.out, r.err);
  cr_expect_eq(swe_mini_count(r.out, "\"FAIL_TO_PASS\":{\"test_"), rows, "%s", r.out);
  lt_run_free(&r);
  const char *none[] = {"longtail", "swe", "validate", tasks,   "--patch", "none",
                        "--jobs",   "2",   "--json",   "--set", set,       NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 200, none), 0);
  cr_expect_eq(r.status, 0, "%s%s", r.out, r.err);
  cr_expect_eq(swe_mini_count(r.out, "\"resolved\":false"), rows, "%s%s", r.out, r.err);
  /* unpatched, the hidden test fails and the old one passes: the bug is real and the test shows it */
  cr_expect_eq(swe_mini_count(r.out, "\"fail_to_pass\":0"), rows, "%s", r.out);
  cr_expect_eq(swe_mini_count(r.out, "\"pass_to_pass\":1"), rows, "%s", r.out);
  lt_run_free(&r);
  lt_buf_free(&all);
  free(train), free(held);
  swe_mini_layer_free(&l);
  lt_test_rmdir(dir);
}

/* ---- demonstrations (envs.<d>.params.demos) ---- */

static void swe_mini_on_opened(lt_episode_t *ep, int rc, cJSON *messages, void *ud) {
  cJSON **out = ud;
  cr_assert_eq(rc, 0, "%s", lt_error_msg());
  *out = messages;
}

static void swe_mini_on_step(lt_episode_t *ep, lt_env_step_t *res, void *ud) { *(lt_env_step_t *)ud = *res; }

static void swe_mini_on_end(lt_episode_t *ep, int rc, void *ud) { *(int *)ud = rc < 0 ? rc : 1; }

static lt_envs_t *swe_mini_envs(const char *dir, const char *tasks, const char *demos, uv_loop_t *loop, int *rc) {
  char json[13000];
  snprintf(
      json, sizeof json,
      "{\"sandbox\": {\"image_cache\": \"%s/cache\", \"pool\": 1}, \"envs\": {\"swe\": {\"type\": \"swe\", \"params\": "
      "{\"tasks\": \"%s\", \"demos\": \"%s\", \"tools\": [\"bash\"], \"max_turns\": 2}}}, "
      "\"rewards\": {\"type\": \"rule\", \"domains\": {\"swe\": {\"type\": \"env\"}}}}",
      dir, tasks, demos);
  lt_config_t cfg;
  cJSON *root = cJSON_Parse(json);
  cr_assert_eq(lt_config_from_json(&cfg, root, NULL, 0, lt_all_schemas, lt_all_nschemas), 0, "%s", lt_error_msg());
  lt_envs_t *e = NULL;
  *rc = lt_envs_create(&cfg, loop, &e);
  lt_config_free(&cfg);
  return e;
}

/* One demonstration in its task's root: the environment renders it after the task's real opening, its call made for
 * real answers what it says, and the task resolves.  dir holds the task's image and files. */
static void swe_mini_check_demo(const char *dir, const cJSON *demo) {
  const char *id = cJSON_GetObjectItem(demo, "instance_id")->valuestring;
  const cJSON *turns = cJSON_GetObjectItem(demo, "turns");
  char ref[4300], tasks[4300], demos[4300], built[4300];
  swe_mini_layer_t l = {0};
  l.e[l.n++] = (lt_test_entry_t){"testbed", 'd', 0, NULL, 0};
  snprintf(ref, sizeof ref, "oci:%s/images/mini:latest", dir);
  char *rows = swe_mini_rows("tasks", ref, id, &l);
  swe_mini_image(dir, &l, built, sizeof built);
  snprintf(tasks, sizeof tasks, "%s/tasks.jsonl", dir);
  snprintf(demos, sizeof demos, "%s/demos.jsonl", dir);
  cr_assert_eq(lt_test_write(tasks, rows), 0);
  char *line = cJSON_PrintUnformatted(demo), body[16384];
  snprintf(body, sizeof body, "%s\n", line);
  cr_assert_eq(lt_test_write(demos, body), 0);

  uv_loop_t loop;
  uv_loop_init(&loop);
  int rc;
  lt_envs_t *e = swe_mini_envs(dir, tasks, demos, &loop, &rc);
  cr_assert_eq(rc, 0, "%s", lt_error_msg());
  cJSON *dm;
  char *resp;
  cr_assert_eq(lt_envs_demo(e, "swe", 7, &dm, &resp), 0, "%s", lt_error_msg());
  cr_expect_str_eq(resp, cJSON_GetArrayItem(turns, 2)->valuestring);
  cr_assert_eq(cJSON_GetArraySize(dm), 4, "system, user, the call, its answer");
  /* the episode opens with the same chat the demonstration starts from */
  cJSON *spec, *opened = NULL;
  cr_assert_eq(lt_envs_sample(e, "swe", 0, 0, &spec), 0, "%s", lt_error_msg());
  lt_episode_t *ep;
  cr_assert_eq(lt_episode_open_async(e, "swe", spec, 1, swe_mini_on_opened, &opened, &ep), 0, "%s", lt_error_msg());
  while (!opened) uv_run(&loop, UV_RUN_ONCE);
  for (int i = 0; i < 2; i++)
    cr_expect(cJSON_Compare(cJSON_GetArrayItem(dm, i), cJSON_GetArrayItem(opened, i), 1), "message %d differs", i);
  /* the demonstration's call, made for real, answers what the demonstration says it answers */
  const char *call = cJSON_GetObjectItem(cJSON_GetArrayItem(dm, 2), "content")->valuestring;
  lt_toolcalls_t calls;
  cr_assert_eq(lt_toolcall_parse(call, strlen(call), &calls), 0);
  cr_assert_eq(calls.ncalls, 1, "%s", call);
  lt_env_step_t r = {.done = -1};
  cr_assert_eq(lt_episode_step(ep, call, calls.calls, 1, swe_mini_on_step, &r), 0, "%s", lt_error_msg());
  while (r.done == -1) uv_run(&loop, UV_RUN_ONCE);
  cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(r.observations, 0), "content")->valuestring,
                   cJSON_GetObjectItem(cJSON_GetArrayItem(dm, 3), "content")->valuestring, "%s", call);
  cJSON_Delete(r.observations);
  lt_toolcalls_free(&calls);
  /* and resolves the task */
  int done = 0;
  cr_assert_eq(lt_episode_end(ep, 1, swe_mini_on_end, &done), 0, "%s", lt_error_msg());
  while (!done) uv_run(&loop, UV_RUN_ONCE);
  cr_expect_eq(done, 1);
  cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(lt_episode_reference(ep), "success")),
            "the demonstration's %s did not resolve %s", call, id);
  lt_episode_close(ep);
  cJSON_Delete(opened), cJSON_Delete(spec), cJSON_Delete(dm);
  free(resp);
  uv_run(&loop, UV_RUN_DEFAULT);
  lt_envs_free(e);
  cr_expect_eq(uv_loop_close(&loop), 0);
  free(line), free(rows);
  swe_mini_layer_free(&l);
}

Test(swe_mini, demonstrations_are_what_the_environment_answers, .timeout = 120) {
  if (!swe_mini_have_boxes()) cr_skip_test("no user namespaces: no boxes here");
  if (!lt_test_busybox_image()) cr_skip_test("no static busybox: no test image");
  /* the first fixing demonstration of each shell shape (busybox runs them; make swe-check's image runs the rest) */
  char path[4096], seen[3][512];
  int nseen = 0;
  snprintf(path, sizeof path, "%s/examples/swe-mini/demos.jsonl", lt_test_root());
  lt_jsonl_t rd;
  cr_assert_eq(lt_jsonl_open(&rd, path), 0, "%s", lt_error_msg());
  char *dir = lt_test_tmpdir("swe_mini_demos");
  cJSON *demo = NULL, *last = NULL;
  while (nseen < 3 && lt_jsonl_next(&rd, &demo) == 1) {
    const cJSON *turns = cJSON_GetObjectItem(demo, "turns");
    const char *first = cJSON_GetArrayItem(turns, 0)->valuestring;
    int fresh = cJSON_GetArraySize(turns) == 3 && strstr(first, " lib/*.sh</arg>");
    for (int i = 0; fresh && i < nseen; i++) fresh = strcmp(seen[i], first) != 0;
    if (fresh) {
      snprintf(seen[nseen++], sizeof seen[0], "%s", first);
      swe_mini_check_demo(dir, demo);
      cJSON_Delete(last);
      last = demo;
    } else {
      cJSON_Delete(demo);
    }
    demo = NULL;
  }
  lt_jsonl_close(&rd);
  cr_assert_eq(nseen, 3, "demos.jsonl has fixing demonstrations of %d of the 3 shell shapes", nseen);
  char tasks[4300], demos[4300], body[16384];
  char *line = cJSON_PrintUnformatted(last);
  const char *id = cJSON_GetObjectItem(last, "instance_id")->valuestring;
  snprintf(tasks, sizeof tasks, "%s/tasks.jsonl", dir);
  snprintf(demos, sizeof demos, "%s/demos.jsonl", dir);
  lt_envs_t *e;
  int rc;

  /* a demonstration of a task that is not a training task's stops the start, naming file:line */
  snprintf(body, sizeof body, "%s\n{\"instance_id\": \"nope\", \"turns\": [\"x\"]}\n", line);
  cr_assert_eq(lt_test_write(demos, body), 0);
  e = swe_mini_envs(dir, tasks, demos, NULL, &rc);
  char want[4400];
  snprintf(want, sizeof want, "envs.swe.params.demos: %s:2: \"instance_id\": not a training task's", demos);
  cr_expect(rc < 0 && strstr(lt_error_msg(), want), "'%s' does not say '%s'", lt_error_msg(), want);
  lt_envs_free(e);
  snprintf(body, sizeof body, "{\"instance_id\": \"%s\", \"turns\": [\"a\", \"b\"]}\n", id);
  cr_assert_eq(lt_test_write(demos, body), 0);
  e = swe_mini_envs(dir, tasks, demos, NULL, &rc);
  cr_expect(rc < 0 && strstr(lt_error_msg(), ":1: \"turns\": expected an odd-length list"), "%s", lt_error_msg());
  lt_envs_free(e);
  free(line);
  cJSON_Delete(last);
  lt_test_rmdir(dir);
}
