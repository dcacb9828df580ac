/* Benchmark: one full learner step on 1 rank with all the cores next to 2
 * ranks (mpirun) with half the cores each, and the gradient all-reduce's
 * share of the 2-rank step.  The program runs itself as the ranks
 * (--rank THREADS).  Prints a table on stderr and one JSON object on the last
 * stdout line. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench.h"
#include "learner/dist.h"
#include "learner/model.h"
#include "learner/trainer.h"
#include "util/error.h"
#include "util/time.h"

#define REPS 3
#define NSEQ 16
#define SEQ 96

static void die(const char *what) {
  fprintf(stderr, "bench ranks: %s: %s\n", what, lt_error_msg());
  lt_dist_finalize(1);
  exit(1);
}

/* One rank: REPS learner steps on the same batch and REPS all-reduces of the
 * gradient buffer; rank 0 prints "step_s allreduce_s allreduces_per_step". */
static int rank_main(int threads) {
  if (lt_dist_init() < 0) die("MPI");
  openblas_set_num_threads(threads);
  const char *root = getenv("LT_ROOT") ? getenv("LT_ROOT") : ".";
  char path[4096];
  snprintf(path, sizeof path, "%s/configs/models/moe-10m.json", root);
  lt_model_config_t mc;
  lt_model_t *m;
  if (lt_model_config_load(path, &mc) < 0 || lt_model_create(&mc, &m) < 0) die(path);
  lt_model_init_random(m, 1, 0.02f);
  lt_trainer_cfg_t tc = {.actor_minibatches = 1, .critic_minibatches = 1, .threads = threads};
  lt_loss_cfg_default(&tc.loss, LT_OBJ_MISPO);
  lt_optim_cfg_default(&tc.actor_opt, LT_OPT_ADAMW);
  lt_optim_cfg_default(&tc.critic_opt, LT_OPT_ADAMW);
  lt_trainer_t *tr;
  if (lt_trainer_create(&tc, m, NULL, NULL, &tr) < 0) die("trainer");
  int N = NSEQ * SEQ, start[NSEQ + 1];
  int32_t *tok = malloc(sizeof(int32_t) * N);
  float *lp = malloc(sizeof(float) * N);
  uint8_t *mask = malloc((size_t)N), trunc[NSEQ] = {0};
  double reward[NSEQ];
  int64_t group[NSEQ];
  for (int i = 0; i < N; i++) tok[i] = (i * 7919) % 250, lp[i] = -5.5f, mask[i] = i % SEQ >= SEQ / 4;
  for (int s = 0; s <= NSEQ; s++) start[s] = s * SEQ;
  for (int s = 0; s < NSEQ; s++) reward[s] = s % 2, group[s] = s / 4;
  lt_train_batch_t b = {.nseq = NSEQ,
                        .start = start,
                        .tokens = tok,
                        .logp_rollout = lp,
                        .mask = mask,
                        .reward = reward,
                        .truncated = trunc,
                        .group = group};
  lt_step_stats_t st;
  if (lt_trainer_step(tr, &b, &st) < 0) die("warm-up step");
  double steps[REPS], reds[REPS];
  for (int r = 0; r < REPS; r++) {
    double t0 = lt_time_mono_s();
    if (lt_trainer_step(tr, &b, &st) < 0) die("step");
    steps[r] = lt_time_mono_s() - t0;
  }
  lt_model_t *p = lt_trainer_policy(tr);
  for (int r = 0; r < REPS; r++) {
    double t0 = lt_time_mono_s();
    if (lt_dist_sum_f32(p->grads, p->nparams) < 0) die("all-reduce");
    reds[r] = lt_time_mono_s() - t0;
  }
  /* Actor and critic: one all-reduce each per mini-batch. */
  if (lt_dist_rank() == 0)
    printf("%.6f %.6f %d %zu\n", bench_median(steps, REPS, NULL, NULL), bench_median(reds, REPS, NULL, NULL), 2,
           p->nparams);
  lt_trainer_free(tr);
  free(tok), free(lp), free(mask);
  lt_dist_finalize(0);
  return 0;
}

static int read_result(const char *out, double *step, double *red, int *per_step, size_t *nparams) {
  FILE *f = fopen(out, "r");
  int ok = f && fscanf(f, "%lf %lf %d %zu", step, red, per_step, nparams) == 4;
  if (f) fclose(f);
  return ok;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--rank") == 0) return rank_main(atoi(argv[2]));
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (cores < 2) cores = 2;
  char self[4096], all[32], half[32];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return 1;
  self[n] = 0;
  snprintf(all, sizeof all, "%ld", cores);
  snprintf(half, sizeof half, "%ld", cores / 2);
  char *one[] = {self, "--rank", all, NULL};
  char *two[] = {"mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", self, "--rank", half, NULL};
  double s1, r1, s2, r2;
  int k1, k2;
  size_t np;
  if (bench_run(one, "bench/out/ranks-1.txt") < 0 || !read_result("bench/out/ranks-1.txt", &s1, &r1, &k1, &np)) {
    fprintf(stderr, "bench ranks: the 1-rank run failed\n");
    return 1;
  }
  if (bench_run(two, "bench/out/ranks-2.txt") < 0 || !read_result("bench/out/ranks-2.txt", &s2, &r2, &k2, &np)) {
    fprintf(stderr, "bench ranks: the 2-rank run (mpirun) failed\n");
    return 1;
  }
  double share = r2 * k2 / s2;
  fprintf(stderr, "learner step, moe-10m (%zu parameters), %d x %d tokens, MIS-PO + critic, AdamW:\n", np, NSEQ, SEQ);
  fprintf(stderr, "  1 rank  x %ld threads   %8.1f ms\n", cores, s1 * 1e3);
  fprintf(stderr, "  2 ranks x %ld threads   %8.1f ms  (%.2fx), all-reduce %.1f ms x %d = %.1f%% of the step\n",
          cores / 2, s2 * 1e3, s1 / s2, r2 * 1e3, k2, 100 * share);
  printf(
      "{\"ranks_step_ms_1\": %.3f, \"ranks_step_ms_2\": %.3f, \"ranks_speedup_2\": %.4f, \"ranks_allreduce_ms_2\": %.3f, "
      "\"ranks_allreduce_share_2\": %.4f}\n",
      s1 * 1e3, s2 * 1e3, s1 / s2, r2 * 1e3, share);
  return 0;
}
