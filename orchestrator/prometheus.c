/* What the daemon exposes to Prometheus (monitor.prometheus_port): the loop's live counters, and the latest value
 * of every learner and rollout metric under the names docs/metrics.md gives them.  The endpoint and its text
 * format are net/prom.c. */
#include <stdio.h>
#include <string.h>

#include "orchestrator/internal.h"
#include "net/prom.h"
#include "util/error.h"
#include "util/log.h"
#include "util/time.h"

/* Run metrics that are one family in Prometheus, labelled by the part between prefix and suffix: reward/<domain>
 * and its spread reward/<domain>/min and /max (reward/mean, /min and /max are metrics of their own),
 * eval/accuracy/<domain>, weights/lag/<worker>, staleness/hist_<K>, rollout/failed/<status>; every other metric is longtail_<name>.  The
 * first entry that matches wins, so a suffixed form comes before its plain one. */
static const struct {
  const char *prefix, *suffix, *family, *label;
} labelled[] = {{"reward/", "/min", "reward_min_by_domain", "domain"},
                {"reward/", "/max", "reward_max_by_domain", "domain"},
                {"reward/", "", "reward_by_domain", "domain"},
                {"eval/accuracy/", "", "eval_accuracy_by_domain", "domain"},
                {"weights/lag/", "", "worker_policy_lag", "worker"},
                {"staleness/hist_", "", "staleness_trajectories", "staleness"},
                {"rollout/failed/", "", "rollout_failed", "status"}};

void lt__prom_set(lt_daemon_t *d, const char *name, double v) {
  if (!d->prom) return;
  size_t len = strlen(name);
  if (strcmp(name, "reward/mean") && strcmp(name, "reward/min") && strcmp(name, "reward/max"))
    for (size_t i = 0; i < sizeof labelled / sizeof *labelled; i++) {
      size_t n = strlen(labelled[i].prefix), k = strlen(labelled[i].suffix);
      if (len > n + k && !strncmp(name, labelled[i].prefix, n) && !strcmp(name + len - k, labelled[i].suffix)) {
        char label[96];
        snprintf(label, sizeof label, "%.*s", (int)(len - n - k), name + n);
        lt_prom_set(d->prom, labelled[i].family, labelled[i].label, label, v);
        return;
      }
    }
  lt_prom_set(d->prom, name, NULL, NULL, v);
}

/* The loop's own counters, read at each scrape. */
static void counters(lt_buf_t *b, void *ud) {
  lt_daemon_t *d = ud;
  int alive = 0, inflight = 0;
  for (int i = 0; i < d->nworkers; i++)
    if (d->workers[i].alive) {
      alive++;
      inflight += d->workers[i].inflight;
    }
  const struct {
    const char *family, *type, *help;
    double v;
  } live[] = {
      {"longtail_policy_version", "gauge", "Newest policy version published to the workers.", (double)d->version},
      {"longtail_learner_steps_total", "counter", "Learner steps done.", (double)d->step},
      {"longtail_trajectories_ingested_total", "counter", "Trajectories accepted into the buffer.",
       (double)d->trajs_in},
      {"longtail_duplicates_rejected_total", "counter", "Results for tasks already stored, dropped.", (double)d->dups},
      {"longtail_malformed_messages_total", "counter", "Peer messages that failed validation.", (double)d->malformed},
      {"longtail_trajectories_refused_total", "counter",
       "Trajectories refused before the commit (invalid for this run: vocabulary, limits, versions).",
       (double)d->refused},
      {"longtail_tasks_created_total", "counter", "Tasks generated.", (double)d->tasks_created},
      {"longtail_tasks_done_total", "counter", "Tasks that ended with a stored trajectory.", (double)d->tasks_done},
      {"longtail_tasks_failed_total", "counter", "Tasks given up after their attempts.", (double)d->tasks_failed},
      {"longtail_tasks_inflight", "gauge", "Tasks running on workers.", (double)inflight},
      {"longtail_workers_alive", "gauge", "Workers within their heartbeat liveness.", (double)alive},
      {"longtail_accepting", "gauge", "1 while results are accepted (0: disk full).", (double)d->accepting},
      {"longtail_uptime_seconds", "gauge", "Seconds since the daemon started.",
       (lt_time_mono_ms() - d->started_ms) / 1000.0},
  };
  for (size_t i = 0; i < sizeof live / sizeof *live; i++)
    lt_prom_sample(b, live[i].family, live[i].type, live[i].help, live[i].v);
}

int lt__prom_start(lt_daemon_t *d) {
  int port = (int)lt_config_int(d->cfg, "monitor.prometheus_port");
  if (port <= 0) return 0;
  const char *host = lt_config_str(d->cfg, "monitor.prometheus_host");
  int rc = lt_prom_listen(&d->loop, host, port, "longtail_", counters, d, &d->prom);
  if (rc < 0) {
    char why[512];
    snprintf(why, sizeof why, "%s", lt_error_msg());
    return lt_error_set(rc, "monitor.prometheus_port %d: %s", port, why);
  }
  LT_INFO("daemon", "prometheus metrics at http://%s:%d/metrics", host, lt_prom_port(d->prom));
  return 0;
}

void lt__prom_stop(lt_daemon_t *d) {
  lt_prom_close(d->prom);
  d->prom = NULL;
}
