/* The training driver on its own, without the daemon: a step's batch (staleness, complete groups, the dynamic
 * filter), what it marks in the buffer, the version it publishes, and the events its guardrails send out. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "tests/support/harness.h"
#include "train/train.h"
#include "util/error.h"
#include "util/fs.h"

enum { T = 8 };

static int32_t tokens[T] = {1, 2, 3, 4, 5, 6, 7, 8}, versions[T] = {-1, -1, 5, 5, 5, 5, 5, 5};
static float logp[T] = {0, 0, -5, -5, -5, -5, -5, -5};
static uint8_t mask[T] = {0, 0, 1, 1, 1, 1, 1, 1};

static void add(lt_buffer_t *b, int64_t task, int64_t group, double reward, int64_t vmin) {
  lt_traj_rec_t r = {.task_id = task, .group_id = group, .domain = "arith", .outcome = "ok", .finish = "terminated",
                     .reason = "stop", .has_reward = 1, .reward = reward, .ntokens = T, .tokens = tokens,
                     .logprobs = logp, .loss_mask = mask, .versions = versions};
  lt_traj_meta_t m = {.worker = "w", .version_min = vmin, .version_max = vmin, .eval_round = -1, .time_ms = task,
                      .status = LT_SAMPLE_READY};
  int dup;
  cr_assert_eq(lt_buffer_traj_insert(b, &r, &m, &dup), 0, "%s", lt_error_msg());
}

typedef struct {
  int n;
  char kinds[512];
} events_t;

static void on_event(void *ud, const char *kind, const char *detail) {
  events_t *e = ud;
  e->n++;
  strncat(e->kinds, kind, sizeof e->kinds - strlen(e->kinds) - 2);
  strcat(e->kinds, " ");
}

/* A run directory with a tiny policy and a buffer holding: a complete group of equal rewards (filtered), a
 * complete group with a reward spread (trainable), a trajectory too old for the staleness bound and a lone member of
 * an unfinished group. */
static void setup(const char *dir, const char *extra, lt_config_t *cfg, char *policy, size_t cap) {
  char json[1024];
  snprintf(json, sizeof json,
           "{\"model\": {\"init\": \"%s/configs/models/tiny-moe.json\"}, \"learner\": {\"batch\": {\"trajectories\": "
           "2}, \"threads\": 1, \"device\": \"cpu\"}, \"scheduler\": {\"dynamic_filter\": true, \"max_staleness\": 1}%s}",
           lt_test_root(), extra);
  cr_assert_eq(lt_config_from_json(cfg, cJSON_Parse(json), NULL, 0, lt_all_schemas, lt_all_nschemas), 0, "%s",
               lt_error_msg());
  char init[4200], db[4200];
  snprintf(init, sizeof init, "%s/init", dir);
  cr_assert_eq(lt_policy_source(cfg, init, policy, cap), 0, "%s", lt_error_msg());
  snprintf(db, sizeof db, "%s/buffer.db", dir);
  lt_buffer_t *b;
  cr_assert_eq(lt_buffer_open(db, LT_BUF_CREATE, &b), 0);
  add(b, 1, 1, 1, 5);
  add(b, 2, 1, 1, 5);
  add(b, 3, 2, 1, 5);
  add(b, 4, 2, 0, 5);
  add(b, 5, 3, 1, 2); /* version 2 at version 5: older than max_staleness 1 */
  add(b, 6, 4, 0, 5); /* its group has one member of two */
  lt_buffer_close(b);
}

/* The driver at policy version 5, learner step 7, over setup()'s buffer. */
static lt_train_t *open_driver(const char *dir, const char *extra, lt_config_t *cfg, events_t *ev) {
  char policy[4096];
  setup(dir, extra, cfg, policy, sizeof policy);
  lt_train_opts_t o = {.cfg = cfg, .run_dir = dir, .weights_dir = policy, .version = 5, .step = 7, .group_size = 2,
                       .event = on_event, .ud = ev};
  lt_train_t *t;
  cr_assert_eq(lt_train_open(&o, &t), 0, "%s", lt_error_msg());
  return t;
}

Test(train, a_step_selects_marks_and_publishes) {
  char *dir = lt_test_tmpdir("train");
  lt_config_t cfg;
  events_t ev = {0};
  lt_train_t *t = open_driver(dir, "", &cfg, &ev);
  cr_assert_eq(lt_train_ready(t), 6);
  lt_train_result_t r;
  cr_assert_eq(lt_train_step(t, 0, &r), 1, "%s", lt_error_msg());
  cr_assert_eq(r.step, 8);
  cr_assert_eq(r.version, 6);
  cr_assert_eq(r.st.trajectories, 2);
  cr_assert_eq(r.marked_stale, 1);
  cr_assert_eq(r.filtered, 2);
  cr_assert_float_eq(r.reward_mean, 0.5, 1e-9);
  cr_assert_eq(r.ndom, 1);
  cr_assert_str_eq(r.dom[0], "arith");
  cr_assert_eq(strlen(r.sha), 64);
  char v[4300];
  snprintf(v, sizeof v, "%s/checkpoints/v6", dir);
  cr_assert(lt_fs_is_dir(v));
  cr_assert_str_eq(r.dir, v);
  /* Only the unfinished group is left, and without a flush it waits. */
  cr_assert_eq(lt_train_ready(t), 1);
  cr_assert_eq(lt_train_step(t, 0, &r), 0);
  cr_assert_eq(lt_train_steps_done(t), 8);
  /* The end of the run: a full checkpoint to resume from. */
  cr_assert_eq(lt_train_checkpoint(t), 0, "%s", lt_error_msg());
  lt_train_close(t);
  snprintf(v, sizeof v, "%s/checkpoints/full-000008/scheduler.json", dir);
  cr_assert(lt_fs_exists(v));
  lt_config_free(&cfg);
  lt_test_rmdir(dir);
}

Test(train, guardrails_report_through_the_sink) {
  char *dir = lt_test_tmpdir("train");
  lt_config_t cfg;
  events_t ev = {0};
  /* A mismatch bound no fresh policy meets: the guardrail acts on the first step. */
  lt_train_t *t = open_driver(dir, ", \"guardrails\": {\"max_mismatch\": 1e-9}", &cfg, &ev);
  lt_train_result_t r;
  cr_assert_eq(lt_train_step(t, 0, &r), 1, "%s", lt_error_msg());
  cr_assert(strstr(ev.kinds, "guardrail"), "events: %s", ev.kinds);
  cr_assert_eq(r.max_staleness, 0); /* tightened from 1 */
  lt_train_close(t);
  lt_config_free(&cfg);
  lt_test_rmdir(dir);
}
