/* Benchmark: the dataset environment on a JSONL file of 1M GSM8K-sized rows
 * (LT_BENCH_ROWS to change): the start (every row checked, the offset index
 * built; goal: seconds) next to a plain line-by-line read of the same file,
 * the cost of sampling a row, and the resident memory the index adds.
 * REPS repetitions; medians and spreads.  Prints one JSON object last. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "bench/bench.h"
#include "cli/commands.h"
#include "envs/env.h"
#include "util/error.h"

#define REPS 3
#define SAMPLES 100000

static long max_rss_kb(void) {
  struct rusage u;
  return getrusage(RUSAGE_SELF, &u) == 0 ? u.ru_maxrss : -1;
}

static double plain_read(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char *line = NULL;
  size_t cap = 0;
  long n = 0;
  double t0 = lt_time_mono_s();
  while (getline(&line, &cap, f) >= 0) n++;
  double dt = lt_time_mono_s() - t0;
  free(line);
  fclose(f);
  return n > 0 ? dt : -1;
}

int main(void) {
  long rows = getenv("LT_BENCH_ROWS") ? atol(getenv("LT_BENCH_ROWS")) : 1000000;
  char path[] = "/tmp/lt-bench-dataset-XXXXXX";
  int fd = mkstemp(path);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!f) return 1;
  for (long i = 0; i < rows; i++)
    fprintf(
        f,
        "{\"id\": \"q%ld\", \"prompt\": \"Tom has %ld apples and buys 7 more. How many apples does Tom have now?\", "
        "\"answer\": \"%ld\", \"metadata\": {\"source\": \"synthetic\"}}\n",
        i, i, i + 7);
  if (fclose(f) != 0) return 1;
  char js[512];
  snprintf(js, sizeof js, "{\"envs\": {\"qa\": {\"type\": \"dataset\", \"params\": {\"train\": \"%s\"}}}}", path);
  double load[REPS], plain[REPS], sample[REPS];
  long rss0 = max_rss_kb(), rss = 0;
  for (int r = 0; r < REPS; r++) {
    plain[r] = plain_read(path);
    lt_config_t cfg;
    if (lt_config_from_json(&cfg, cJSON_Parse(js), NULL, 0, lt_all_schemas, lt_all_nschemas) < 0) return 1;
    double t0 = lt_time_mono_s();
    lt_envs_t *e;
    if (lt_envs_create(&cfg, NULL, &e) < 0) {
      fprintf(stderr, "%s\n", lt_error_msg());
      return 1;
    }
    load[r] = lt_time_mono_s() - t0;
    t0 = lt_time_mono_s();
    for (int i = 0; i < SAMPLES; i++) {
      cJSON *s;
      if (lt_envs_sample(e, "qa", (uint64_t)i, 0, &s) < 0) return 1;
      cJSON_Delete(s);
    }
    sample[r] = (lt_time_mono_s() - t0) / SAMPLES * 1e6;
    if (r == 0) rss = max_rss_kb() - rss0;
    lt_envs_free(e);
    lt_config_free(&cfg);
  }
  unlink(path);
  double lo, hi, plo, phi, slo, shi;
  double l = bench_median(load, REPS, &lo, &hi), p = bench_median(plain, REPS, &plo, &phi),
         s = bench_median(sample, REPS, &slo, &shi);
  printf("dataset: %ld rows: load %.2f s (%.2f-%.2f; plain read %.2f s), sample %.1f us (%.1f-%.1f), index +%ld MB\n",
         rows, l, lo, hi, p, s, slo, shi, rss / 1024);
  printf(
      "{\"dataset_load_1m_rows_s\": %.3f, \"dataset_plain_read_s\": %.3f, \"dataset_sample_us\": %.2f, "
      "\"dataset_index_rss_mb\": %ld}\n",
      l, p, s, rss / 1024);
  return 0;
}
