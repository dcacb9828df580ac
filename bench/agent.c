/* Benchmark: the worker's per-token cost in the agent loop.
 *
 * SESSIONS concurrent arith episodes through the real agent loop and backend
 * driver with the scripted policy answering at once (token_us 0), turns of
 * TOKENS tokens, in this process; the CPU the process used per generated
 * token, next to the baseline of the same tokens only copied into the
 * trajectory's arrays (what any agent loop must do with a token; a floor,
 * not a goal: the loop's cost includes each episode's prompt, reward and
 * messages, spread over its tokens).  REPS
 * repetitions, medians.  Prints one JSON object on the last stdout line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "bench/bench.h"
#include "cli/commands.h"
#include "rollout/agent.h"
#include "util/error.h"

#define SESSIONS 64
#define EPISODES 2000
#define TOKENS 512
#define REPS 3

static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

typedef struct {
  lt_agent_ctx_t *ctx;
  lt_envs_t *envs;
  int started, finished;
  long long generated;
} run_t;

static void start_one(run_t *r);

static void on_done(lt_agent_t *a, lt_msg_t *traj, void *ud) {
  run_t *r = ud;
  for (int i = 0; i < traj->u.traj.ntokens; i++) r->generated += traj->u.traj.loss_mask[i];
  lt_msg_free(traj);
  r->finished++;
  if (r->started < EPISODES) start_one(r);
}

static void start_one(run_t *r) {
  cJSON *spec;
  if (lt_envs_sample(r->envs, "arith", (uint64_t)r->started, 0, &spec) < 0) {
    fprintf(stderr, "bench agent: %s\n", lt_error_msg());
    exit(1);
  }
  lt_task_t task = {.task_id = (uint64_t)r->started + 1,
                    .group_id = 1,
                    .domain = "arith",
                    .env = "arith",
                    .session = "",
                    .seed = (int64_t)r->started,
                    .temperature = 1,
                    .top_p = 1,
                    .max_new_tokens = 2 * TOKENS,
                    .max_turns = 1,
                    .max_context = 4 * TOKENS,
                    .spec = spec};
  lt_agent_t *a;
  r->started++;
  if (lt_agent_start(r->ctx, &task, on_done, r, &a) < 0) {
    fprintf(stderr, "bench agent: %s\n", lt_error_msg());
    exit(1);
  }
  cJSON_Delete(spec);
}

/* CPU ns per generated token through the agent loop. */
static double agent_ns_per_token(void) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  lt_config_t cfg;
  if (lt_config_from_json(&cfg, cJSON_Parse("{\"envs\": {\"arith\": {\"type\": \"arith\"}}}"), NULL, 0, lt_all_schemas,
                          lt_all_nschemas) < 0)
    return -1;
  lt_envs_t *envs;
  lt_rewarder_t *rw;
  lt_backend_t *be;
  lt_backend_opts_t bo = {.kind = "scripted",
                          .mean_tokens = TOKENS,
                          .tail_fraction = 0,
                          .tail_factor = 1,
                          .max_sessions = SESSIONS,
                          .max_context = 4 * TOKENS};
  if (lt_envs_create(&cfg, &loop, &envs) < 0 || lt_rewarder_create(&loop, &cfg, &rw) < 0 ||
      lt_backend_create(&loop, &bo, &be) < 0) {
    fprintf(stderr, "bench agent: %s\n", lt_error_msg());
    return -1;
  }
  lt_agent_ctx_t ctx = {.loop = &loop, .envs = envs, .rewarder = rw, .backend = be};
  run_t r = {.ctx = &ctx, .envs = envs};
  double c0 = cpu_s();
  for (int i = 0; i < SESSIONS; i++) start_one(&r);
  while (r.finished < EPISODES) uv_run(&loop, UV_RUN_ONCE);
  double ns = 1e9 * (cpu_s() - c0) / (double)r.generated;
  lt_envs_shutdown(envs);
  lt_rewarder_close(rw, NULL, NULL);
  lt_backend_close(be, NULL, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  lt_envs_free(envs);
  lt_config_free(&cfg);
  return ns;
}

/* The baseline: each token copied into the four per-token arrays of a trajectory. */
static double copy_ns_per_token(void) {
  enum { N = 1 << 16 };
  int32_t *src = calloc(N, 4), *tok = calloc(N, 4), *ver = calloc(N, 4);
  float *lp = calloc(N, 4);
  uint8_t *mask = calloc(N, 1);
  volatile int32_t sink = 0;
  double c0 = cpu_s();
  long long n = 0;
  for (int rep = 0; rep < 2000; rep++, n += N) {
    for (int i = 0; i < N; i++) {
      tok[i] = src[i] + rep;
      lp[i] = -0.5f;
      mask[i] = 1;
      ver[i] = rep;
    }
    sink += tok[rep % N];
  }
  double ns = 1e9 * (cpu_s() - c0) / (double)n;
  free(src), free(tok), free(ver), free(lp), free(mask);
  return ns;
}

int main(void) {
  double a[REPS], c[REPS];
  for (int r = 0; r < REPS; r++) {
    a[r] = agent_ns_per_token();
    c[r] = copy_ns_per_token();
    if (a[r] < 0) return 1;
    fprintf(stderr, "rep %d: agent loop %.1f ns of CPU per generated token, copying it %.2f ns\n", r, a[r], c[r]);
  }
  double am = bench_median(a, REPS, NULL, NULL), cm = bench_median(c, REPS, NULL, NULL);
  fprintf(stderr,
          "agent loop: %.1f ns per token (%d sessions, turns of ~%d tokens, scripted policy answering at once); "
          "copying a token into a trajectory: %.2f ns\n",
          am, SESSIONS, TOKENS, cm);
  printf("{\"agent_cpu_ns_per_token\": %.4g, \"token_copy_ns\": %.4g}\n", am, cm);
  return 0;
}
