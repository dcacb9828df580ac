/* Benchmark: LoRA against full training, each next to its baseline in the same run (docs/lora.md).
 *   lora_step_vs_full         one learner step (MIS-PO, critic included) on the same batch (2 × 256 tokens) of the
 *                             moe-100m shape (a 32k vocabulary, as real models have large ones): adapters r16 on all
 *                             linear layers against full training, CPU seconds of the process (median of alternated
 *                             repetitions; goal ≤ 0.7);
 *   lora_publish_bytes_ratio  the adapter file a version publishes for the Qwen3-0.6B shape with r16 (a real init:
 *                             Kaiming-uniform A, B = 0, written in PEFT's layout) against that model's fp32
 *                             model.safetensors bytes;
 *   lora_version_switch_ms    a worker's builtin engine (moe-10m) moving to the next version: an adapter of the base
 *                             it holds (an adapter load) against a whole version (full_version_switch_ms).
 * Prints a table on stderr and one JSON object on the last stdout line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "bench/bench.h"
#include "infer/engine.h"
#include "learner/lora.h"
#include "learner/ops.h"
#include "learner/trainer.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/sha256.h"
#include "util/time.h"

#define REPS 3

static double cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what) {
  fprintf(stderr, "bench lora: %s: %s\n", what, lt_error_msg());
  exit(1);
}

static lt_model_t *shape(const char *root, const char *name, uint64_t seed) {
  char p[4096];
  snprintf(p, sizeof p, "%s/configs/models/%s.json", root, name);
  lt_model_config_t c;
  lt_model_t *m;
  if (lt_model_config_load(p, &c) < 0 || lt_model_create(&c, &m) < 0) die(name);
  lt_model_init_random(m, seed, 0.02f);
  return m;
}

/* A batch of 2 sequences of 256 tokens, half of each on the loss mask, rewards 0 and 1 in one group. */
enum { NS = 2, T = 256 };
static int32_t tok[NS * T];
static float lp[NS * T];
static uint8_t mask[NS * T];
static int start[NS + 1];
static double reward[NS];
static uint8_t trunc_[NS];
static int64_t group[NS];

static lt_train_batch_t batch(void) {
  for (int i = 0; i < NS * T; i++) tok[i] = (int32_t)((i * 7919) % 250), lp[i] = -5.5f, mask[i] = i % T >= T / 2;
  for (int s = 0; s <= NS; s++) start[s] = s * T;
  for (int s = 0; s < NS; s++) reward[s] = s % 2, group[s] = 0;
  return (lt_train_batch_t){.nseq = NS,
                            .start = start,
                            .tokens = tok,
                            .logp_rollout = lp,
                            .mask = mask,
                            .reward = reward,
                            .truncated = trunc_,
                            .group = group};
}

/* CPU seconds of one learner step of a trainer made for this repetition (its first step, after a warm-up step). */
static double step_cpu(const char *root, int lora) {
  lt_trainer_cfg_t c = {.actor_minibatches = 1, .critic_minibatches = 1, .threads = 1};
  lt_loss_cfg_default(&c.loss, LT_OBJ_MISPO);
  lt_optim_cfg_default(&c.actor_opt, LT_OPT_ADAMW);
  lt_optim_cfg_default(&c.critic_opt, LT_OPT_ADAMW);
  c.actor_opt.lr = c.critic_opt.lr = 1e-5f;
  if (lora) c.lora = c.critic_lora = (lt_lora_cfg_t){.rank = 16, .alpha = 32, .targets = 0x7f, .init_seed = 1};
  lt_trainer_t *tr;
  if (lt_trainer_create(&c, shape(root, "moe-100m", 1), NULL, NULL, &tr) < 0) die("trainer");
  lt_train_batch_t b = batch();
  lt_step_stats_t st;
  if (lt_trainer_step(tr, &b, &st) < 0) die("warm-up step"); /* workspaces, gradients, moments */
  double t0 = cpu_seconds();
  if (lt_trainer_step(tr, &b, &st) < 0) die("step");
  double dt = cpu_seconds() - t0;
  lt_trainer_free(tr);
  return dt;
}

static long file_bytes(const char *dir, const char *name) {
  char p[4200];
  struct stat s;
  snprintf(p, sizeof p, "%s/%s", dir, name);
  return stat(p, &s) == 0 ? (long)s.st_size : -1;
}

/* The Qwen3-0.6B shape's adapter file (r16, all linear layers) over its whole fp32 weights (the shapes alone: the
 * 600M parameters are not allocated). */
static double publish_ratio(const char *root, const char *tmp, long *adapter, long *full) {
  char p[4096];
  snprintf(p, sizeof p, "%s/configs/models/qwen3-0.6b.json", root);
  lt_model_t m = {0};
  if (lt_model_config_load(p, &m.cfg) < 0) die("qwen3-0.6b");
  lt_lora_cfg_t c = {.rank = 16, .alpha = 32, .targets = 0x7f, .init_seed = 1};
  lt_lora_t *l;
  if (lt_lora_create(&m, &c, &l) < 0) die("adapter");
  lt_lora_init(l);
  snprintf(p, sizeof p, "%s/qwen3-0.6b-r16", tmp);
  if (lt_lora_save(l, p, LT_ST_F32, "Qwen/Qwen3-0.6B") < 0) die("adapter files");
  lt_lora_free(l);
  *adapter = file_bytes(p, "adapter_model.safetensors");
  *full = (long)lt_model_nparams(&m.cfg) * 4;
  return (double)*adapter / (double)*full;
}

/* Milliseconds of an engine's move to `dir` (median of REPS, the engine moved back to `back` between). */
static double switch_ms(lt_engine_t *e, const char *dir, const char *back) {
  char sha[65], p[4200];
  double v[REPS];
  snprintf(p, sizeof p, "%s/%s", dir, lt_model_weights_file(dir));
  if (lt_sha256_file(p, sha) < 0) die("sha256");
  for (int r = 0; r < REPS; r++) {
    if (lt_engine_reload(e, back, NULL) < 0) die("reload back");
    double t0 = lt_time_mono_s();
    if (lt_engine_reload(e, dir, sha) < 0) die("reload");
    v[r] = (lt_time_mono_s() - t0) * 1e3;
  }
  return bench_median(v, REPS, NULL, NULL);
}

int main(void) {
  const char *root = getenv("LT_ROOT") ? getenv("LT_ROOT") : ".";
  char tmp[] = "/tmp/lt-bench-lora-XXXXXX", base[4200], v1[4200], v2[4200], full[4200];
  if (!mkdtemp(tmp)) return 1;
  lt_ops_blas_threads(1);
  double lo[REPS], fu[REPS];
  for (int r = 0; r < REPS; r++) { /* alternated, so a load change hits both */
    fu[r] = step_cpu(root, 0);
    lo[r] = step_cpu(root, 1);
    fprintf(stderr, "rep %d: full step %.3f s, LoRA r16 step %.3f s (CPU)\n", r, fu[r], lo[r]);
  }
  double fm = bench_median(fu, REPS, NULL, NULL), lm = bench_median(lo, REPS, NULL, NULL);
  long ab, fb;
  double ratio = publish_ratio(root, tmp, &ab, &fb);
  fprintf(stderr, "qwen3-0.6b r16 adapter %ld bytes, fp32 model %ld bytes\n", ab, fb);
  /* A worker's versions: the base (v0), two adapters of it, and a whole version. */
  lt_model_t *m = shape(root, "moe-10m", 5);
  lt_lora_cfg_t c = {.rank = 16, .alpha = 32, .targets = 0x7f, .init_seed = 2};
  lt_lora_t *l;
  snprintf(base, sizeof base, "%s/v0", tmp);
  snprintf(v1, sizeof v1, "%s/v1", tmp);
  snprintf(v2, sizeof v2, "%s/v2", tmp);
  snprintf(full, sizeof full, "%s/full", tmp);
  if (lt_model_save(m, base) < 0 || lt_lora_create(m, &c, &l) < 0) die("versions");
  char from[4300], to[4300];
  snprintf(from, sizeof from, "%s/config.json", base);
  for (int k = 0; k < 2; k++) { /* as a run publishes them: the adapter and the base's config.json */
    const char *v = k ? v2 : v1;
    l->cfg.init_seed = (uint64_t)k + 2;
    lt_lora_init(l);
    snprintf(to, sizeof to, "%s/config.json", v);
    if (lt_lora_save(l, v, LT_ST_F32, "../v0") < 0 || lt_fs_copy_file(from, to) < 0) die("adapter version");
  }
  lt_lora_free(l);
  lt_model_init_random(m, 6, 0.02f);
  if (lt_model_save(m, full) < 0) die("full");
  lt_model_free(m);
  lt_engine_opts_t eo = {.device = "cpu", .threads = 1, .max_sessions = 8, .max_context = 512};
  lt_engine_t *e;
  if (lt_engine_load(base, &eo, &e) < 0) die("engine");
  double sw = switch_ms(e, v2, v1), swf = switch_ms(e, full, base);
  lt_engine_free(e);
  fprintf(stderr, "version switch: adapter %.2f ms, whole version %.2f ms\n", sw, swf);
  lt_fs_remove_tree(tmp);
  printf(
      "{\"lora_step_vs_full\": %.4g, \"lora_step_cpu_s\": %.4g, \"full_step_cpu_s\": %.4g, "
      "\"lora_publish_bytes_ratio\": %.4g, \"lora_publish_bytes\": %ld, \"full_publish_bytes\": %ld, "
      "\"lora_version_switch_ms\": %.4g, \"full_version_switch_ms\": %.4g}\n",
      lm / fm, lm, fm, ratio, ab, fb, sw, swf);
  return 0;
}
