/* The web console's hand-made run (tests/support/uirun.h). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buffer/buffer.h"
#include "tests/support/uirun.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/json.h"

const char *const lt_uirun_hostile[2] = {
    "<script>document.title='pwned'</script><b id=\"injected\">bold?</b>",
    "</textarea></pre><img id=\"injected\" src=x onerror=\"alert(1)\">\xff\xfe bad bytes \x1b[31mred\x1b[0m",
};

const char *const lt_uirun_hostile_diff =
    "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1 +1 @@\n-x = '</pre><img id=\"injected\">'\n"
    "+x = '<script>document.title=\"pwned\"</script>'\n";

/* What learner step 5 computed for task LT_UIRUN_VALUES (the rollout's logprobs are add()'s): token 3's x_t is
 * outside the token bounds, the trajectory's geometric mean (1 · 0.9 · 3.5)^(1/3) inside its bounds. */
static void add_values(lt_buffer_t *b) {
  static const float ratio[4] = {0, 1, 0.9f, (float)LT_UIRUN_REJECTED_X}, lpo[4] = {-3, -0.5f, -0.355361f, -0.747237f},
                     adv[4] = {0, 0.25f, 0.25f, 0.25f}, ent[4] = {0.5f, 1.25f, 0.75f, 2};
  static const uint8_t flags[4] = {0, 1 | 2 | 4 | 16, 1 | 2 | 4 | 16, 1 | 4}; /* LT_TOKV_* of learner/loss.h */
  static const int32_t spans[4] = {0, 2, 2, 2};
  lt_token_values_row_t v = {.task_id = LT_UIRUN_VALUES,
                             .step = 5,
                             .traj_ratio = 1.4658972,
                             .traj_ok = 1,
                             .ntokens = 4,
                             .loss = "{\"objective\":\"mispo\",\"token_bounds\":[0.5,2],\"traj_bounds\":[0.5,2]}",
                             .nspans = 2,
                             .spans = spans,
                             .ratio = ratio,
                             .logp_old = lpo,
                             .adv = adv,
                             .entropy = ent,
                             .flags = flags};
  cr_assert_eq(lt_buffer_token_values_put(b, &v, 1), 0, "%s", lt_error_msg());
}

static void add(lt_buffer_t *b, int64_t task, const char *domain, double reward, const char *messages) {
  static int32_t tokens[4] = {'h', 'i', '<', '\n'}, versions[4] = {-1, 3, 3, 4}, seq_starts[2] = {0, 2};
  static float logp[4] = {0, -0.5f, -0.25f, -2};
  static uint8_t mask[4] = {0, 1, 1, 1};
  lt_traj_t r = {.task_id = (uint64_t)task,
                 .group_id = (uint64_t)task,
                 .domain = (char *)domain,
                 .status = LT_TRAJ_OK,
                 .finish = task % 4 ? LT_FINISH_TERMINATED : LT_FINISH_TRUNCATED,
                 .reason = task % 4 ? "" : "max_new_tokens",
                 .error = "",
                 .has_reward = 1,
                 .reward = reward,
                 .components = cJSON_Parse("{\"correct\":1}"),
                 .messages = cJSON_Parse(messages),
                 .turns = 2,
                 .ntokens = 4,
                 .tokens = tokens,
                 .logprobs = logp,
                 .loss_mask = mask,
                 .versions = versions,
                 .temperature = 1};
  if (task == LT_UIRUN_VALUES) r.nseqs = 2, r.seq_starts = seq_starts; /* an agent program's two contexts */
  if (task == LT_UIRUN_HOSTILE) r.diff = (char *)lt_uirun_hostile_diff;
  cr_assert(r.components && r.messages, "%s", messages);
  lt_traj_meta_t m = {.worker = "w1",
                      .version_min = 3,
                      .version_max = 4,
                      .truncated = task % 4 == 0,
                      .eval_round = -1,
                      .time_ms = 1000 + task,
                      .status = LT_SAMPLE_READY};
  int dup;
  cr_assert_eq(lt_buffer_traj_insert(b, &r, &m, &dup), 0, "%s", lt_error_msg());
  cJSON_Delete(r.components);
  cJSON_Delete(r.messages);
}

void lt_test_uirun(const char *dir, int hostile_only) {
  char path[4200];
  snprintf(path, sizeof path, "%s/buffer.db", dir);
  lt_buffer_t *b;
  cr_assert_eq(lt_buffer_open(path, LT_BUF_CREATE, &b), 0, "%s", lt_error_msg());
  cr_assert_eq(lt_buffer_begin(b), 0);
  int64_t consumed[10];
  for (int i = 1; i <= (hostile_only ? 0 : LT_UIRUN_N); i++) {
    char msg[128];
    snprintf(msg, sizeof msg,
             "[{\"role\":\"user\",\"content\":\"question %d\"},{\"role\":\"assistant\",\"content\":\"answer %d\"}]", i,
             i);
    add(b, i, i % 2 ? "arith" : "code", i / 20.0, msg);
    if (i <= 10) consumed[i - 1] = i;
  }
  if (!hostile_only) {
    cr_assert_eq(lt_buffer_traj_mark(b, consumed, 10, LT_SAMPLE_CONSUMED, 5), 0);
    add_values(b);
  }
  /* the hostile texts as JSON strings: the invalid bytes stay raw inside them, as a worker may send them */
  lt_buf_t m = {0};
  lt_buf_puts(&m, "[{\"role\":\"user\",\"content\":");
  lt_json_quote(&m, lt_uirun_hostile[0]);
  lt_buf_puts(&m, "},{\"role\":\"assistant\",\"content\":\"");
  for (const char *p = lt_uirun_hostile[1]; *p; p++) {
    if (*p == '"' || *p == '\\') lt_buf_putc(&m, '\\');
    if (*p == '\x1b') lt_buf_puts(&m, "\\u001b");
    else lt_buf_putc(&m, *p);
  }
  lt_buf_puts(&m, "\"}]");
  cr_assert_eq(lt_buf_ok(&m), 0);
  add(b, LT_UIRUN_HOSTILE, "arith", 0, m.data);
  lt_buf_reset(&m);
  lt_buf_puts(&m, "[{\"role\":\"tool\",\"content\":\"");
  for (int i = 0; i < LT_UIRUN_HUGE_BYTES / 2; i++) lt_buf_puts(&m, "\xc3\xa9"); /* é */
  lt_buf_puts(&m, "\"}]");
  cr_assert_eq(lt_buf_ok(&m), 0);
  add(b, LT_UIRUN_HUGE, "code", 0.25, m.data);
  lt_buf_free(&m);
  if (hostile_only) {
    cr_assert_eq(lt_buffer_commit(b), 0, "%s", lt_error_msg());
    lt_buffer_close(b);
    return;
  }
  for (int s = 0; s < 10; s++) {
    lt_buffer_metric(b, s, "ui_test/reward", s * 0.1, 2000 + s);
    lt_buffer_metric(b, s, "ui_test/loss", 1.0 / (s + 1), 2000 + s);
    /* a spread at steps 1..9 only (step 0 has no companions): the console's band */
    lt_buffer_metric(b, s, "ui_test/spread/mean", s, 2000 + s);
    if (s) lt_buffer_metric(b, s, "ui_test/spread/min", s - 0.5, 2000 + s);
    if (s) lt_buffer_metric(b, s, "ui_test/spread/max", s + 1, 2000 + s);
    /* a domain's reward, whose spread is named without /mean (train/metrics.c) */
    lt_buffer_metric(b, s, "reward/code", 0.5, 2000 + s);
    lt_buffer_metric(b, s, "reward/code/min", 0.25, 2000 + s);
    lt_buffer_metric(b, s, "reward/code/max", 0.75 + s * 0.01, 2000 + s);
  }
  lt_buffer_metric(b, 0, "eval/accuracy", 0.25, 2000);
  lt_buffer_metric(b, 5, "eval/accuracy", 0.5, 2005);
  lt_buffer_metric(b, 9, "throughput/trajectories_per_s", 12.5, 2009);
  lt_buffer_metric(b, 9, "staleness/hist_0", 3, 2009);
  lt_buffer_metric(b, 9, "staleness/hist_1", 2, 2009);
  lt_buffer_metric(b, 9, "staleness/hist_2+", 1, 2009);
  lt_buffer_event(b, 2003, "worker_up", "w1 (host, 4 slots, 0 pending)");
  lt_buffer_event(b, 2004, "guardrail", "step 4: MIS token acceptance 0.1 < 0.5: tightening staleness");
  lt_buffer_worker_seen(b, "w1", "host", 4, "scripted", 2001);
  lt_task_row_t k = {.prompt_id = 1, .domain = "arith", .eval_round = -1, .status = LT_TASK_DISPATCHED, .worker = "w1"};
  for (k.id = 1; k.id <= 3; k.id++) cr_assert_eq(lt_buffer_task_insert(b, &k), 0, "%s", lt_error_msg());
  k.status = LT_TASK_DONE; /* done: not in flight */
  cr_assert_eq(lt_buffer_task_insert(b, &k), 0, "%s", lt_error_msg());
  lt_buffer_checkpoint(b, 9, 9, "weights", "/nonexistent/ckpt-9", "");
  cr_assert_eq(lt_buffer_commit(b), 0, "%s", lt_error_msg());
  lt_buffer_close(b);
}
