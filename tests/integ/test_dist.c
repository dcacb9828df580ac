/* Learner ranks for real: `mpirun -np 2 longtail grad …` against one process
 * (gradients, and the state after one full learner step, per objective). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buffer/buffer.h"
#include "learner/loss.h"
#include "learner/safetensors.h"
#include "tests/support/harness.h"
#include "util/json.h"

/* Open MPI keeps allocations past MPI_Finalize, many in components it has unloaded, and LeakSanitizer
 * takes minutes to symbolize them at exit under make test-asan: the ranks check memory errors, not leaks. */
#define MPIRUN \
  "ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 mpirun --allow-run-as-root --oversubscribe -np"

static char *dir;
static char model[4096];

/* Six sequences of different lengths with rewards, in groups of two trajectories but the fourth's; the second
 * and third are two contexts of one trajectory, which a token-balanced split of --step-out's first mini-batch
 * into sequences would cut between the ranks: they must keep it whole to match one process (GRPO and GSPO
 * differ otherwise).  The second mini-batch is split between the ranks. */
static void write_batch(const char *path) {
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  unsigned x = 7;
  for (int s = 0; s < 6; s++) {
    int n = 5 + (s * 5) % 9;
    fprintf(f, "{\"tokens\": [");
    for (int i = 0; i < n; i++) fprintf(f, "%s%u", i ? ", " : "", 1 + (x = x * 1103515245u + 12345u) % 250);
    fprintf(f, "], \"loss_mask\": [");
    for (int i = 0; i < n; i++) fprintf(f, "%s%d", i ? ", " : "", i >= 2);
    fprintf(f, "], \"rollout_logprobs\": [");
    for (int i = 0; i < n; i++)
      fprintf(f, "%s%.4f", i ? ", " : "", i >= 2 ? -3.0 - (x = x * 1103515245u + 12345u) % 400 / 100.0 : 0.0);
    fprintf(f, "], \"advantages\": [");
    for (int i = 0; i < n; i++) fprintf(f, "%s%.2f", i ? ", " : "", i >= 2 ? (s % 3 - 1) * 0.7 : 0.0);
    int t = s == 2 ? 1 : s;
    fprintf(f, "], \"reward\": %.2f, \"group\": %d, \"trajectory\": %d}\n", (t * 37 % 10) / 10.0, t / 2, t);
  }
  fclose(f);
}

static void setup(void) {
  dir = lt_test_tmpdir("dist");
  snprintf(model, sizeof model, "%s/m", dir);
  char *err = NULL;
  int st = lt_test_init_model("tiny-moe", model, 3, &err);
  cr_assert_eq(st, 0, "%s", err ? err : "");
  free(err);
  char b[4200];
  snprintf(b, sizeof b, "%s/b.jsonl", dir);
  write_batch(b);
}

static void teardown(void) { lt_test_rmdir(dir); }

TestSuite(dist, .init = setup, .fini = teardown, .timeout = 240);

/* ‖a − b‖ / ‖a‖ over every tensor of two safetensors files of one layout. */
static double rel_diff(const char *pa, const char *pb) {
  lt_st_file_t *a, *b;
  cr_assert_eq(lt_st_open(pa, &a), 0, "%s", pa);
  cr_assert_eq(lt_st_open(pb, &b), 0, "%s", pb);
  cr_assert_eq(a->n, b->n);
  double num = 0, den = 0;
  for (int i = 0; i < a->n; i++) {
    const lt_st_entry_t *ea = &a->entries[i], *eb = lt_st_find(b, ea->name);
    cr_assert_not_null(eb, "%s missing in %s", ea->name, pb);
    int64_t n = lt_st_numel(ea);
    cr_assert_eq(n, lt_st_numel(eb));
    float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
    cr_assert_eq(lt_st_read_f32(a, ea, x), 0);
    cr_assert_eq(lt_st_read_f32(b, eb, y), 0);
    for (int64_t k = 0; k < n; k++) {
      num += ((double)x[k] - y[k]) * ((double)x[k] - y[k]);
      den += (double)x[k] * x[k];
    }
    free(x), free(y);
  }
  lt_st_close(a), lt_st_close(b);
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Runs grad (and one learner step) under `ranks` ranks (0: no launcher) into
 * DIR/<tag>.grads and DIR/<tag>/; returns the JSON line. */
static cJSON *run_grad(int ranks, const char *loss, const char *opt, const char *tag) {
  lt_run_t r;
  char launch[128] = "";
  if (ranks) snprintf(launch, sizeof launch, MPIRUN " %d", ranks);
  cr_assert_eq(lt_test_sh(&r, 200,
                          "%s %s grad --model %s --batch %s/b.jsonl --loss %s --out %s/%s.grads --step-out %s/%s "
                          "--optimizer %s --minibatches 2 --traj-bounds 0.001,1000",
                          launch, lt_test_bin(), model, dir, loss, dir, tag, dir, tag, opt),
               0);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cJSON *j = cJSON_Parse(r.out);
  cr_assert_not_null(j, "%s", r.out);
  lt_run_free(&r);
  return j;
}

static void same_as_one_process(const char *loss, const char *opt) {
  cJSON *one = run_grad(0, loss, opt, "one"), *two = run_grad(2, loss, opt, "two");
  cr_expect_eq(cJSON_GetObjectItem(one, "ranks")->valueint, 1);
  cr_expect_eq(cJSON_GetObjectItem(two, "ranks")->valueint, 2);
  const char *same[] = {"tokens", "trajectories", "tokens_kept", "trajectories_kept"};
  for (int i = 0; i < 4; i++)
    cr_expect_eq(cJSON_GetObjectItem(one, same[i])->valueint, cJSON_GetObjectItem(two, same[i])->valueint, "%s",
                 same[i]);
  double l1 = cJSON_GetObjectItem(one, "loss")->valuedouble, l2 = cJSON_GetObjectItem(two, "loss")->valuedouble;
  cr_expect(fabs(l1 - l2) <= 1e-5 * fabs(l1) + 1e-7, "loss %g vs %g", l1, l2);
  /* ZeRO-1: each of two ranks holds about half of the optimizer state. */
  double b1 = cJSON_GetObjectItem(one, "optimizer_bytes")->valuedouble,
         b2 = cJSON_GetObjectItem(two, "optimizer_bytes")->valuedouble;
  cr_expect(b2 < 0.6 * b1 && b2 > 0.4 * b1, "optimizer bytes %g on 1 rank, %g on rank 0 of 2", b1, b2);
  char a[4200], b[4200];
  const char *files[] = {".grads", "/policy/model.safetensors", "/actor_optim.safetensors"};
  for (int i = 0; i < 3; i++) {
    snprintf(a, sizeof a, "%s/one%s", dir, files[i]);
    snprintf(b, sizeof b, "%s/two%s", dir, files[i]);
    double d = rel_diff(a, b);
    cr_expect(d <= 1e-5, "%s %s: %s differs by %.3g relative", loss, opt, files[i], d);
  }
  if (strcmp(loss, "grpo") != 0) {
    snprintf(a, sizeof a, "%s/one/critic/model.safetensors", dir);
    snprintf(b, sizeof b, "%s/two/critic/model.safetensors", dir);
    cr_expect(rel_diff(a, b) <= 1e-5, "%s: critic differs", loss);
  }
  cJSON_Delete(one);
  cJSON_Delete(two);
}

Test(dist, mispo_two_ranks_match_one_process) { same_as_one_process("mispo", "adamw"); }
Test(dist, ppo_two_ranks_match_one_process) { same_as_one_process("ppo", "adamw"); }
Test(dist, grpo_two_ranks_match_one_process) { same_as_one_process("grpo", "muon"); }
Test(dist, gspo_two_ranks_match_one_process) { same_as_one_process("gspo", "muon"); }

/* More ranks than a mini-batch has sequences: some shares are empty. */
Test(dist, ranks_with_empty_shares_still_match) {
  lt_run_t r;
  cr_assert_eq(
      lt_test_sh(&r, 60, "head -n 2 %s/b.jsonl > %s/b2.jsonl && mv %s/b2.jsonl %s/b.jsonl", dir, dir, dir, dir), 0);
  lt_run_free(&r);
  cJSON *one = run_grad(0, "mispo", "adamw", "one"), *three = run_grad(3, "mispo", "adamw", "three");
  cr_expect_eq(cJSON_GetObjectItem(three, "ranks")->valueint, 3);
  char a[4200], b[4200];
  snprintf(a, sizeof a, "%s/one/policy/model.safetensors", dir);
  snprintf(b, sizeof b, "%s/three/policy/model.safetensors", dir);
  cr_expect(rel_diff(a, b) <= 1e-5);
  cJSON_Delete(one);
  cJSON_Delete(three);
}

/* A rank that fails stops the whole job with its error, not a hang. */
Test(dist, a_failing_rank_stops_every_rank) {
  lt_run_t r;
  cr_assert_eq(
      lt_test_sh(&r, 100, MPIRUN " 2 %s grad --model %s/nonexistent --batch %s/b.jsonl --loss mispo --out %s/x",
                 lt_test_bin(), dir, dir, dir),
      0);
  cr_expect_neq(r.status, 0);
  cr_expect(r.secs < 60, "took %.1f s", r.secs);
  cr_expect(strstr(r.err, "nonexistent"), "%s", r.err);
  lt_run_free(&r);
}

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = hay; (p = strstr(p, needle)); p++) n++;
  return n;
}

/* The daemon as rank 0 of two: the smoke run completes, every step records
 * learner/ranks 2, and the run resumes from its full checkpoint under a
 * single process. */
/* configs/smoke.json under two ranks into dir/NAME (extra: more --set options); its metrics.jsonl, malloc'ed. */
static char *smoke_two_ranks(const char *name, const char *extra, char *rd, size_t cap) {
  lt_run_t r;
  char p[4300];
  snprintf(rd, cap, "%s/%s", dir, name);
  cr_assert_eq(
      lt_test_sh(&r, 200, "cd %s && " MPIRUN " 2 %s train configs/smoke.json --run-dir %s --set monitor.plot=false %s",
                 lt_test_root(), lt_test_bin(), rd, extra),
      0);
  cr_assert_eq(r.status, 0, "%s", r.err);
  lt_run_free(&r);
  snprintf(p, sizeof p, "%s/metrics.jsonl", rd);
  char *m = lt_test_read(p);
  cr_assert_not_null(m);
  return m;
}

Test(dist, smoke_run_under_two_ranks_completes_and_resumes_on_one, .timeout = 300) {
  lt_run_t r;
  char rd[4200], p[4300];
  char *m = smoke_two_ranks("run", "", rd, sizeof rd);
  int steps = count(m, "\"name\": \"actor/loss\"");
  cr_expect_geq(steps, 2);
  cr_expect_eq(count(m, "\"name\": \"learner/ranks\", \"value\": 2}"), steps, "%s", m);
  free(m);
  /* The stored per-token values are the whole batch's, each rank's share gathered: every trajectory has its
   * verdicts and its geometric-mean ratio, whichever rank computed them. */
  snprintf(p, sizeof p, "%s/buffer.db", rd);
  lt_buffer_t *b;
  int64_t *ids;
  int n;
  cr_assert_eq(lt_buffer_open(p, LT_BUF_READONLY, &b), 0);
  cr_assert_eq(lt_buffer_step_batch(b, 1, &ids, &n), 0);
  cr_assert_gt(n, 1);
  for (int i = 0; i < n; i++) {
    lt_token_values_row_t v;
    cr_assert_eq(lt_buffer_token_values_get(b, ids[i], &v), 1, "task %lld", (long long)ids[i]);
    int loss = 0;
    for (int t = 0; t < v.n; t++) loss += (v.flags[t] & LT_TOKV_LOSS) != 0;
    cr_expect(loss > 0 && v.traj_ratio > 0, "task %lld: %d loss tokens, ratio %g", (long long)ids[i], loss,
              v.traj_ratio);
    lt_buffer_token_values_free(&v);
  }
  free(ids);
  lt_buffer_close(b);
  snprintf(p, sizeof p, "%s/checkpoints/full-%06d/actor_optim.safetensors", rd, steps);
  lt_st_file_t *f;
  cr_assert_eq(lt_st_open(p, &f), 0, "%s", p);
  lt_st_close(f);
  cr_assert_eq(
      lt_test_sh(&r, 200, "cd %s && %s train configs/smoke.json --run-dir %s --resume --set monitor.plot=false",
                 lt_test_root(), lt_test_bin(), rd),
      0);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect(strstr(r.err, "resuming at learner step"), "%s", r.err);
  lt_run_free(&r);
}

/* Each rank scores its share under the distribution the rollout sampled from: the temperature and the
 * kept top-k sets travel with the batch to the other ranks, so a fresh policy's first step accepts every
 * trajectory (a rank that scored its share at temperature 1 would reject about half of them). */
Test(dist, ranks_score_the_rollout_temperature_and_kept_sets, .timeout = 300) {
  char rd[4200];
  char *m = smoke_two_ranks(
      "run-sampling", "--set rollout.temperature=0.7 --set rollout.top_k=20 --set learner.keep_sampling_mask=true", rd,
      sizeof rd);
  const char *key = "\"name\": \"mis/traj_accept\", \"value\": ";
  const char *at = strstr(m, key);
  cr_assert_not_null(at, "%s", m);
  double first = strtod(at + strlen(key), NULL);
  cr_expect_geq(first, 0.9, "step 1 mis/traj_accept %g under two ranks", first);
  cr_expect_gt(count(m, "\"name\": \"learner/ranks\", \"value\": 2}"), 0);
  free(m);
}

/* Retrain under mpirun (docs/replay.md): a run trained by two learner ranks retrains bit for bit on two ranks; on
 * one the gradient all-reduce sums in another order, and the first step already differs (and says so). */
Test(dist, a_two_rank_run_retrains_bit_identical_on_two_ranks_not_on_one, .timeout = 300) {
  char rd[4200];
  /* A length penalty: the advantages are not all 0, so the steps carry real gradients. */
  free(smoke_two_ranks("run-retrain", "--set rewards.length_penalty.target=4", rd, sizeof rd));
  lt_run_t r;
  cr_assert_eq(lt_test_sh(&r, 200, MPIRUN " 2 %s retrain %s --out %s-two", lt_test_bin(), rd, rd), 0);
  cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
  cr_expect(strstr(r.out, "3 steps bit-identical"), "%s", r.out);
  lt_run_free(&r);
  cr_assert_eq(lt_test_sh(&r, 200, "%s retrain %s --out %s-one", lt_test_bin(), rd, rd), 0);
  cr_expect_eq(r.status, 1, "%s%s", r.out, r.err);
  cr_expect(strstr(r.out, "step 1 differs from the run's version"), "%s", r.out);
  lt_run_free(&r);
}

/* A learner rank that hangs (SIGSTOP) fails the step within the liveness
 * window with an error naming it; the daemon stops and every rank exits. */
Test(dist, a_hung_rank_is_named_within_the_liveness_window, .timeout = 200) {
  lt_run_t r;
  char rd[4200];
  snprintf(rd, sizeof rd, "%s/hang", dir);
  cr_assert_eq(
      lt_test_sh(
          &r, 150,
          "cd %s && (" MPIRUN " 2 %s train configs/smoke.json --run-dir %s --set monitor.plot=false "
          "--set scheduler.max_tasks=100000 > %s.out 2> %s.err & echo $! > %s.pid); "
          "for i in $(seq 100); do sleep 0.2; grep -q 'learner/ranks' %s/metrics.jsonl 2>/dev/null && break; done; "
          "for p in $(pgrep -f -- '--run-dir %s '); do "
          "tr '\\0' '\\n' < /proc/$p/environ 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && kill -STOP $p; done; "
          "t0=$(date +%%s); while kill -0 $(cat %s.pid) 2>/dev/null; do sleep 0.2; done; "
          "echo $(( $(date +%%s) - t0 )); cat %s.err >&2",
          lt_test_root(), lt_test_bin(), rd, rd, rd, rd, rd, rd, rd, rd),
      0);
  int secs = atoi(r.out);
  cr_expect_leq(secs, 30, "the job took %d s to end after the rank stopped", secs);
  cr_expect(strstr(r.err, "rank 1 sent no heartbeat"), "%s", r.err);
  lt_run_free(&r);
}

/* LoRA under two learner ranks (docs/lora.md): the ranks build the same adapters, all-reduce their gradients alone
 * and shard only their moments (the whole file holds the adapters' two moments, nothing of the frozen base), and the
 * run retrains bit for bit on two ranks. */
Test(dist, a_lora_run_under_two_ranks_trains_the_adapters_alone, .timeout = 300) {
  char rd[4200], p[4300];
  free(smoke_two_ranks("run-lora",
                       "--set rewards.length_penalty.target=4 --set learner.lora.rank=8 --set learner.lr=1e-3", rd,
                       sizeof rd));
  snprintf(p, sizeof p, "%s/checkpoints/v3/adapter_model.safetensors", rd);
  lt_st_file_t *f;
  cr_assert_eq(lt_st_open(p, &f), 0, "%s", p);
  int64_t adapters = 0;
  for (int i = 0; i < f->n; i++) adapters += lt_st_numel(&f->entries[i]);
  lt_st_close(f);
  snprintf(p, sizeof p, "%s/checkpoints/full-000003/actor_optim.safetensors", rd);
  cr_assert_eq(lt_st_open(p, &f), 0, "%s", p);
  const lt_st_entry_t *m = lt_st_find(f, "exp_avg");
  cr_assert_not_null(m);
  cr_expect_eq(lt_st_numel(m), adapters, "moments for %lld values, the adapters have %lld", (long long)lt_st_numel(m),
               (long long)adapters);
  lt_st_close(f);
  lt_run_t r;
  cr_assert_eq(lt_test_sh(&r, 200, MPIRUN " 2 %s retrain %s --out %s-two", lt_test_bin(), rd, rd), 0);
  cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
  cr_expect(strstr(r.out, "3 steps bit-identical"), "%s", r.out);
  lt_run_free(&r);
}
