/* libFuzzer target: the web console's request handling (lt_ui_answer) on a small run made at start.  Any request
 * target gets a status the API documents (200, 400, 404, 503), and a JSON answer is valid UTF-8 that parses. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buffer/buffer.h"
#include "ui/ui.h"
#include "util/json.h"

static lt_ui_t *ui;

/* A run with two trajectories (one holding markup and invalid UTF-8), metrics and an event. */
static void make_run(void) {
  char dir[] = "/tmp/lt-fuzz-ui-XXXXXX", path[64];
  if (!mkdtemp(dir)) abort();
  snprintf(path, sizeof path, "%s/buffer.db", dir);
  lt_buffer_t *b;
  if (lt_buffer_open(path, LT_BUF_CREATE, &b) < 0) abort();
  int32_t tok[2] = {1, 2}, ver[2] = {0, 1};
  float lp[2] = {-1, -2};
  uint8_t mask[2] = {0, 1};
  const char *msgs[2] = {"[{\"role\":\"user\",\"content\":\"<script>x</script>\xff\"}]", "not json \xc3"};
  for (int i = 0; i < 2; i++) {
    /* the second's text is no JSON: the record has no messages, as the buffer reads damaged text */
    lt_traj_t t = {.task_id = (uint64_t)i + 1,
                   .group_id = 1,
                   .domain = "arith",
                   .status = LT_TRAJ_OK,
                   .finish = LT_FINISH_TERMINATED,
                   .reason = "",
                   .error = "",
                   .components = cJSON_Parse("{\"correct\":1}"),
                   .messages = cJSON_Parse(msgs[i]),
                   .has_reward = 1,
                   .reward = i,
                   .ntokens = 2,
                   .tokens = tok,
                   .logprobs = lp,
                   .loss_mask = mask,
                   .versions = ver,
                   .temperature = 1};
    lt_traj_meta_t m = {.worker = "w", .eval_round = -1, .version_max = 1, .status = LT_SAMPLE_READY};
    int dup;
    if (lt_buffer_traj_insert(b, &t, &m, &dup) < 0) abort();
    cJSON_Delete(t.components);
    cJSON_Delete(t.messages);
  }
  lt_buffer_metric(b, 0, "reward/mean", 0.5, 1);
  lt_buffer_metric(b, 0, "staleness/hist_0", 2, 1);
  lt_buffer_event(b, 1, "guardrail", "step 0");
  lt_buffer_close(b);
  if (lt_ui_open(dir, &ui) < 0) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!ui) make_run();
  char *target = malloc(size + 2);
  if (!target) return 0;
  target[0] = '/';
  memcpy(target + 1, data, size);
  target[size + 1] = 0;
  lt_http_target_t t; /* what the server hands the console; one that does not parse is the server's 400 */
  if (lt_http_target_parse(target, &t) < 0) {
    free(target);
    return 0;
  }
  lt_ui_resp_t r;
  lt_ui_answer(ui, "GET", &t, &r);
  if (r.status != 200 && r.status != 400 && r.status != 404 && r.status != 503) abort();
  if (strstr(r.type, "json")) {
    if (lt_json_utf8_check(r.body, r.len) != r.len) abort();
    cJSON *j = cJSON_ParseWithLength(r.body, r.len);
    if (!j) abort();
    cJSON_Delete(j);
  }
  lt_ui_resp_free(&r);
  free(target);
  return 0;
}
