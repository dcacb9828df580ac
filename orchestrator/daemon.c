/* The daemon: run directory, sockets, the loop, the cron, signals, shutdown. */
#include "orchestrator/internal.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "net/signals.h"
#include "train/train.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/log.h"
#include "util/time.h"

#define CRON_MS 100

/* ---- metrics and events ---- */

typedef struct {
  int64_t step, time_ms;
  char name[96];
  double value;
  char *detail;
} row_op_t;

static int metric_write(lt_buffer_t *b, void *arg) {
  row_op_t *r = arg;
  return lt_buffer_metric(b, r->step, r->name, r->value, r->time_ms);
}

static int event_write(lt_buffer_t *b, void *arg) {
  row_op_t *r = arg;
  return lt_buffer_event(b, r->time_ms, r->name, r->detail);
}

static void row_done(void *arg, int rc) {
  row_op_t *r = arg;
  free(r->detail);
  free(r);
}

void lt__metric(lt_daemon_t *d, const char *name, double value) {
  lt__prom_set(d, name, value);
  row_op_t *r = calloc(1, sizeof *r);
  if (!r) return;
  int64_t t_ms = lt_time_wall_ms();
  r->step = d->step;
  r->time_ms = t_ms;
  snprintf(r->name, sizeof r->name, "%s", name);
  r->value = value;
  if (lt_writer_submit(d->writer, metric_write, row_done, r) < 0) free(r); /* the writer is stopping */
  if (d->metrics) { /* a failing file is said once; the buffer's metrics table keeps every value regardless */
    int rc = lt_jsonl_write_metric(d->metrics, d->step, t_ms, name, value);
    if (rc < 0 && !d->metrics_failing) LT_ERROR("daemon", "metrics.jsonl: %s", lt_error_msg());
    d->metrics_failing = rc < 0;
  }
}

void lt__event(lt_daemon_t *d, const char *kind, const char *fmt, ...) {
  char detail[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  LT_INFO("event", "%s: %s", kind, detail);
  row_op_t *r = calloc(1, sizeof *r);
  if (!r || !(r->detail = strdup(detail))) {
    free(r);
    return;
  }
  r->time_ms = lt_time_wall_ms();
  snprintf(r->name, sizeof r->name, "%s", kind);
  if (!d->writer || lt_writer_submit(d->writer, event_write, row_done, r) < 0) row_done(r, 0);
}

/* ---- weights ---- */

typedef struct {
  int64_t version, step;
  char path[4096], sha[65];
} ckpt_op_t;

static int ckpt_write(lt_buffer_t *b, void *arg) {
  ckpt_op_t *c = arg;
  return lt_buffer_checkpoint(b, c->version, c->step, "weights", c->path, c->sha);
}

static void ckpt_done(void *arg, int rc) { free(arg); }

void lt__publish_weights(lt_daemon_t *d, int64_t version, const char *dir, const char *sha) {
  ckpt_op_t *c = calloc(1, sizeof *c);
  if (c) {
    c->version = version;
    c->step = d->step;
    snprintf(c->path, sizeof c->path, "%s", dir);
    snprintf(c->sha, sizeof c->sha, "%s", sha);
    if (lt_writer_submit(d->writer, ckpt_write, ckpt_done, c) < 0) free(c);
  }
  lt__weights_published(d, version, dir, sha);
  for (int w = 0; w < d->nworkers; w++) {
    if (!d->workers[w].alive) continue;
    char url[1024];
    lt_msg_t m;
    lt__weights_msg(d, w, &m, url, sizeof url);
    lt__send(d, w, &m);
  }
  if (!strcmp(lt_config_str(d->cfg, "scheduler.on_update"), "abort")) {
    /* In-flight generations restart under the new weights. */
    lt_msg_t a = {.type = LT_MSG_ABORT, .u.abort = {.task_id = 0, .reason = "new weights"}};
    lt__broadcast(d, &a);
  }
}

/* The policy every worker starts from (train/: the configured checkpoint or a random initialisation, after the
 * warm start when sft.enabled), recorded as version 0. */
static int initial_weights(lt_daemon_t *d) {
  char dir[4096], sha[65];
  double sft_loss;
  int rc = lt_train_initial_policy(d->cfg, d->envs, d->run_dir, d->metrics, d->buf, dir, sizeof dir, sha, &sft_loss);
  if (rc < 0) return rc;
  if (sft_loss >= 0) lt__event(d, "sft", "warm start done: final loss %.4f", sft_loss);
  lt__weights_published(d, 0, dir, sha);
  return lt_buffer_checkpoint(d->buf, 0, 0, "weights", dir, sha);
}

/* ---- messages ---- */

/* An ERROR answering message `ref` of the peer rid. */
static void answer_error(lt_daemon_t *d, const void *rid, size_t rlen, uint64_t ref, int code, const char *why) {
  lt_msg_t e = {.type = LT_MSG_ERROR, .u.error = {.code = code, .message = (char *)why, .ref = ref}};
  lt__send_to(d, rid, rlen, &e);
}

/* Each element as the TRAJ it stands for: refused alone when malformed,
 * ingested (and ACKed after its commit) otherwise. */
static void on_trajs(lt_daemon_t *d, int w, const void *rid, size_t rlen, uint64_t id, lt_trajs_t *x) {
  if (w < 0 || !d->workers[w].batch) { /* only after a WELCOME that said batch */
    d->malformed++;
    answer_error(d, rid, rlen, id, LT_EPROTO, "TRAJS from a worker whose HELLO did not say batch");
    return;
  }
  d->dispatch_held = 1;
  for (int i = 0; i < x->n; i++) {
    if (!x->rc[i]) {
      lt__on_traj(d, rid, rlen, id, &x->trajs[i]);
    } else if (x->trajs[i].task_id) {
      lt__traj_refuse(d, rid, rlen, id, x->trajs[i].task_id, x->rc[i], x->why[i]);
    } else {
      d->malformed++;
      answer_error(d, rid, rlen, id, x->rc[i], x->why[i]);
    }
  }
  d->dispatch_held = 0;
  if (d->dispatch_wanted) {
    d->dispatch_wanted = 0;
    lt__scheduler_dispatch(d);
  }
}

static void daemon_on_recv(lt_zsock_t *z, const lt_frame_t *frames, int n, void *ud) {
  lt_daemon_t *d = ud;
  if (n < 2) {
    d->malformed++;
    return;
  }
  const void *rid = frames[0].data;
  size_t rlen = frames[0].len;
  lt_msg_t m;
  int rc = lt_proto_decode(frames + 1, n - 1, &m);
  if (rc < 0) {
    /* Counted, answered (naming the message, and a TRAJ's task, when they
     * could be read), never fatal: a bad peer cannot stop the daemon. */
    LT_DEBUG("daemon", "malformed message: %s", lt_error_msg());
    if (rc == LT_ENOMEM) {
      /* Our failure, not the peer's: unanswered, the worker's spool keeps the message for its next resend. */
      LT_WARN("daemon", "%s", lt_error_msg());
      return;
    }
    if (m.type == LT_MSG_TRAJ && m.u.traj.task_id) {
      lt__traj_refuse(d, rid, rlen, m.id, m.u.traj.task_id, rc, lt_error_msg());
      return;
    }
    d->malformed++;
    answer_error(d, rid, rlen, m.id, rc, lt_error_msg());
    return;
  }
  int w = lt__worker_find(d, rid, rlen);
  if (w >= 0) d->workers[w].last_seen_ms = lt_time_mono_ms();
  switch (m.type) {
  case LT_MSG_HELLO: lt__on_hello(d, rid, rlen, &m.u.hello); break;
  case LT_MSG_TRAJ: lt__on_traj(d, rid, rlen, m.id, &m.u.traj); break;
  case LT_MSG_TRAJS: on_trajs(d, w, rid, rlen, m.id, &m.u.trajs); break;
  case LT_MSG_HEARTBEAT:
    if (w < 0 || !d->workers[w].alive) { /* we do not know it (any more): it must say HELLO */
      answer_error(d, rid, rlen, m.id, LT_EPROTO, "unknown worker: send HELLO");
    } else {
      d->workers[w].policy_version = m.u.heartbeat.policy_version;
      lt__worker_sync_inflight(d, w, m.u.heartbeat.inflight);
      lt__weights_heartbeat(d);
    }
    break;
  case LT_MSG_BYE:
    if (w >= 0 && d->workers[w].alive) {
      d->workers[w].alive = 0;
      lt__worker_requeue_all(d, w, 1, "worker left", NULL, 0);
      lt__event(d, "worker_bye", "%s: %s", d->workers[w].name, m.u.bye.reason);
      lt__scheduler_dispatch(d);
    }
    break;
  case LT_MSG_ERROR: {
    lt__task_t *t = m.u.error.task_id ? lt__task_get(d, (int64_t)m.u.error.task_id) : NULL;
    if (t && t->status == LT_TASK_DISPATCHED && t->worker == w) {
      /* A busy worker is full until its next heartbeat says otherwise (no
       * TASK/ERROR ping-pong); other errors count as an attempt. */
      if (m.u.error.code == LT_EBUSY) d->workers[w].inflight = d->workers[w].slots;
      lt__requeue(d, t, m.u.error.code != LT_EBUSY, m.u.error.message);
      lt__scheduler_dispatch(d);
    } else {
      LT_WARN("daemon", "error from %s: %s", w >= 0 ? d->workers[w].name : "?", m.u.error.message);
    }
    break;
  }
  default: d->malformed++; answer_error(d, rid, rlen, m.id, LT_EPROTO, "unexpected message type");
  }
  lt_msg_free(&m);
}

/* ---- lifecycle ---- */

static void close_walk(uv_handle_t *h, void *arg) {
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

static void on_writer_stopped(void *ud) {
  lt_daemon_t *d = ud;
  d->writer = NULL;
  lt_msg_t m = {.type = LT_MSG_BYE, .u.bye = {.reason = d->exit_code ? "daemon failed" : "run finished"}};
  lt__broadcast(d, &m);
  lt__spawn_stop(d);
  uv_stop(&d->loop);
}

static void on_trainer_stopped(void *ud) {
  lt_daemon_t *d = ud;
  if (d->writer) lt_writer_stop(d->writer, on_writer_stopped, d);
}

void lt__outcomes_report(lt_daemon_t *d, int step) {
  char name[64];
  for (int s = LT_TRAJ_OK + 1; s < LT_TRAJ_NSTATUS; s++) {
    if (d->failed[s] == d->failed_told[s]) continue;
    snprintf(name, sizeof name, "rollout/failed/%s", lt_traj_status_name(s));
    lt__metric(d, name, (double)(d->failed[s] - d->failed_told[s]));
    d->failed_told[s] = d->failed[s];
  }
  if (!d->mask_timeouts || (!step && d->timeouts_masked == d->timeouts_masked_told)) return;
  lt__metric(d, "rollout/timeouts_masked", (double)(d->timeouts_masked - d->timeouts_masked_told));
  d->timeouts_masked_told = d->timeouts_masked;
}

void lt__finish(lt_daemon_t *d, int code) {
  if (d->finishing) return;
  d->finishing = 1;
  lt__outcomes_report(d, 0); /* those stored since the last step */
  d->exit_code = code;
  LT_INFO("daemon", "finishing: %lld learner steps, %lld trajectories, %lld duplicates rejected", (long long)d->step,
          (long long)d->trajs_in, (long long)d->dups);
  lt__trainer_stop(d, on_trainer_stopped, d);
}

void lt__check_done(lt_daemon_t *d) {
  if (d->finishing) return;
  int learned = d->steps > 0 && d->step >= d->steps;
  /* Out of tasks: done once the learner has taken (or dropped) what is left. */
  int exhausted = d->steps == 0 && d->max_tasks > 0 && d->tasks_created >= d->max_tasks && d->open_train == 0 &&
                  (d->ready_pending <= 0 || !d->trainer);
  if ((learned || exhausted) && d->eval_round < 0 && !d->stopping) {
    if (lt__eval_last(d)) { /* a last evaluation at the end */
      lt__scheduler_dispatch(d);
      return;
    }
    if (d->tasks_failed > 0 && d->tasks_done == 0 && d->tasks_done_before == 0) {
      /* Nothing came of the run: say why rather than exit 0 (an impossible
       * limit, a broken environment, workers that refuse every task). */
      fprintf(stderr, "longtail train: error: all %lld tasks failed; the last: %s\n", (long long)d->tasks_failed,
              d->last_failure);
      lt__event(d, "run_failed", "all %lld tasks failed; the last: %s", (long long)d->tasks_failed, d->last_failure);
      lt__finish(d, LT_EXIT_FAIL);
      return;
    }
    if (d->tasks_done > 0 && d->trainable == 0 && d->tasks_done_before == 0) { /* nothing to learn from */
      fprintf(stderr,
              "longtail train: error: no trainable trajectory: of %lld episodes, %lld env_error, %lld reward_failed, "
              "%lld masked; the last failure: %s\n",
              (long long)d->tasks_done, (long long)d->failed[LT_TRAJ_ENV_ERROR],
              (long long)d->failed[LT_TRAJ_REWARD_FAILED], (long long)d->timeouts_masked, d->last_failure);
      lt__finish(d, LT_EXIT_UNTRAINED);
      return;
    }
    lt__finish(d, 0);
  }
  if (d->stopping) {
    int busy = 0;
    for (size_t i = 0; i < d->tcap && !busy; i++) busy = d->tasks[i] && d->tasks[i]->status == LT_TASK_DISPATCHED;
    if (!busy) lt__finish(d, 0);
  }
}

static void progress(lt_daemon_t *d, int64_t now) {
  static int64_t last;
  const char *mode = lt_config_str(d->cfg, "monitor.progress");
  int tty = isatty(2);
  if (!strcmp(mode, "off")) return;
  /* A terminal gets a live line; a log file a plain line now and then. */
  if (now - last < (tty ? 1000 : !strcmp(mode, "auto") ? 30000 : 10000)) return;
  last = now;
  double el = (now - d->started_ms) / 1000.0;
  char eta[32] = "?";
  if (d->steps && d->step > 0) {
    double left = el / d->step * (d->steps - d->step);
    snprintf(eta, sizeof eta, "%dm%02ds", (int)left / 60, (int)left % 60);
  }
  int alive = 0;
  for (int i = 0; i < d->nworkers; i++) alive += d->workers[i].alive;
  char acc[16] = "-";
  if (d->last_accuracy >= 0) snprintf(acc, sizeof acc, "%.1f%%", 100 * d->last_accuracy);
  fprintf(stderr,
          "%sstep %lld/%lld | v%lld | reward %.3f | eval %s%s | %.0f tok/s | trajectories %lld | workers %d | ETA %s%s",
          tty ? "\r" : "", (long long)d->step, (long long)d->steps, (long long)d->version,
          d->step       ? d->last_reward
          : d->reward_n ? d->reward_sum / d->reward_n
                        : 0,
          acc, d->eval_round >= 0 ? " (evaluating)" : "", d->last_tokens_per_s, (long long)d->trajs_in, alive, eta,
          tty ? "   " : "\n");
}

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

void lt__sort_floats(float *v, int n) { qsort(v, (size_t)n, sizeof *v, cmp_float); }

/* Every few seconds: the pipeline overhead's quantiles and the daemon's
 * resident memory, so that a long run shows whether either drifts. */
static void report_health(lt_daemon_t *d, int64_t now) {
  if (now - d->last_report_ms < 5000) return;
  d->last_report_ms = now;
  int n = d->noverhead < 4096 ? d->noverhead : 4096;
  if (n > 0) {
    static float tmp[4096];
    memcpy(tmp, d->overhead_ms, sizeof *tmp * (size_t)n);
    lt__sort_floats(tmp, n);
    lt__metric(d, "dispatch/overhead_p50_ms", tmp[n / 2]);
    lt__metric(d, "dispatch/overhead_p99_ms", tmp[(int)(n * 0.99)]);
    d->noverhead = 0;
  }
  long pages = 0, resident = 0;
  FILE *f = fopen("/proc/self/statm", "re");
  if (f && fscanf(f, "%ld %ld", &pages, &resident) == 2)
    lt__metric(d, "daemon/rss_mb", resident * (sysconf(_SC_PAGESIZE) / 1024.0) / 1024.0);
  if (f) fclose(f);
  lt__weights_report(d);
}

static void on_before_sleep(uv_prepare_t *p) { lt__acks_flush(p->data, 0); }

static void on_cron(uv_timer_t *t) {
  lt_daemon_t *d = t->data;
  int64_t now = lt_time_mono_ms();
  report_health(d, now);
  lt__workers_cron(d, now);
  lt__scheduler_cron(d, now);
  progress(d, now);
  if (!d->accepting && d->writer && lt_writer_disk_full(d->writer) == 0 && lt_writer_backlog(d->writer) == 0) {
    d->accepting = 1;
    lt__event(d, "disk_ok", "space is back: accepting trajectories again");
    lt__scheduler_dispatch(d);
  } else if (!d->accepting && d->writer && lt_writer_backlog(d->writer) == 0) {
    lt__metric(d, "buffer/disk_probe", 0); /* a small write tells when space returns */
  }
  if (d->stopping && !d->finishing && now > d->stop_deadline_ms) {
    lt__event(d, "shutdown", "drain deadline passed: aborting in-flight tasks");
    lt_msg_t a = {.type = LT_MSG_ABORT, .u.abort = {.task_id = 0, .reason = "daemon shutting down"}};
    lt__broadcast(d, &a);
    lt__finish(d, 0);
  }
}

static void on_signal(uv_signal_t *s, int sig) {
  lt_daemon_t *d = s->data;
  if (++d->signals > 1) {
    /* Second signal: leave now.  SQLite's WAL keeps the buffer consistent
     * whatever the writer thread was doing. */
    fprintf(stderr, "\nlongtail train: second signal, exiting now\n");
    _exit(128 + sig);
  }
  d->stopping = 1;
  int drain = !strcmp(lt_config_str(d->cfg, "scheduler.on_shutdown"), "drain");
  d->stop_deadline_ms = lt_time_mono_ms() + (drain ? (int64_t)(lt_config_num(d->cfg, "scheduler.drain_s") * 1000) : 0);
  lt__event(d, "shutdown", "signal %d: %s in-flight tasks", sig, drain ? "draining" : "aborting");
  lt__check_done(d);
}

static int open_socket(lt_daemon_t *d) {
  const char *ep = lt_config_str(d->cfg, "transport.endpoint");
  int curve = lt_config_bool(d->cfg, "transport.curve");
  char secret[41] = "", dir[4200];
  snprintf(dir, sizeof dir, "%s/curve", d->run_dir); /* the local workers' keys (spawn.c) */
  int rc = 0;
  if (curve)
    rc = lt_curve_serve(&d->loop, d->zctx, lt_config_str(d->cfg, "transport.server_secret_key"),
                        lt_config_str(d->cfg, "transport.client_keys"),
                        lt_config_int(d->cfg, "workers.spawn_local") > 0 ? dir : NULL, secret, &d->zap);
  else if (!lt_endpoint_is_loopback(ep) && !lt_config_bool(d->cfg, "transport.allow_insecure_remote"))
    return lt_error_set(LT_ECONFIG,
                        "transport.endpoint: %s is not loopback; use transport.curve (docs/operations.md), "
                        "tunnel to a loopback endpoint, or set transport.allow_insecure_remote on a trusted network",
                        ep);
  if (rc == 0)
    rc = lt_zsock_listen(&d->loop, d->zctx, ep, lt_config_int(d->cfg, "transport.max_message_mb") << 20,
                         curve ? secret : NULL, "transport.endpoint", &d->z, d->endpoint, sizeof d->endpoint);
  memset(secret, 0, sizeof secret);
  if (rc < 0) return rc;
  char p[4200];
  snprintf(p, sizeof p, "%s/endpoint", d->run_dir);
  char line[600];
  snprintf(line, sizeof line, "%s\n", d->endpoint);
  if ((rc = lt_fs_write_atomic(p, line, strlen(line))) < 0) return rc;
  return lt_zsock_start(d->z, daemon_on_recv, d);
}

/* monitor.ui_port: the console of this run, answered off the loop (ui/ lt_ui_serve_start). */
static int ui_start(lt_daemon_t *d) {
  int port = (int)lt_config_int(d->cfg, "monitor.ui_port"), rc;
  const char *host = lt_config_str(d->cfg, "monitor.ui_bind");
  if (port <= 0 || (rc = lt_ui_serve_start(d->run_dir, host, port, d->o.ui_tokenizer, &d->ui)) == 0) return 0;
  char why[512];
  snprintf(why, sizeof why, "%s", lt_error_msg());
  return lt_error_set(rc, "monitor.ui_port %d: %s", port, why);
}

static int setup(lt_daemon_t *d) {
  int rc;
  snprintf(d->run_dir, sizeof d->run_dir, "%s", d->o.run_dir);
  /* One daemon per run directory, for the daemon's lifetime; never inherited, so the local workers a killed
   * daemon leaves behind do not hold it against its resume.  `longtail stats` asks whether it is held. */
  char p[4200], holder[64];
  snprintf(p, sizeof p, "%s/daemon.lock", d->run_dir);
  if ((rc = lt_fs_lock_pid(p, &d->lock_fd, holder, sizeof holder)) == LT_EBUSY)
    return lt_error_set(LT_EBUSY, "%s is in use by another daemon (pid %s); stop it first, or use another --run-dir",
                        d->run_dir, holder);
  if (rc < 0) return rc;
  snprintf(p, sizeof p, "%s/buffer.db", d->run_dir);
  if (!d->o.resume && lt_fs_exists(p))
    return lt_error_set(LT_EINVAL, "%s already holds a run: use --resume to continue it, or another --run-dir",
                        d->run_dir);
  if (d->o.resume && !lt_fs_exists(p))
    return lt_error_set(LT_ENOENT, "--resume: %s holds no run (no buffer.db)", d->run_dir);
  snprintf(p, sizeof p, "%s/checkpoints", d->run_dir);
  if ((rc = lt_fs_mkdirs(p, 0755)) < 0) return rc;
  snprintf(p, sizeof p, "%s/buffer.db", d->run_dir);
  if ((rc = lt_buffer_open(p, LT_BUF_CREATE | LT_BUF_CHECK, &d->buf)) < 0) return rc;
  char *cfg = lt_config_dump(d->cfg);
  if (!cfg) return lt_error_set(LT_ENOMEM, "out of memory");
  snprintf(p, sizeof p, "%s/config.json", d->run_dir);
  rc = d->o.resume ? 0 : lt_fs_write_atomic(p, cfg, strlen(cfg));
  if (rc == 0 && !d->o.resume) rc = lt_buffer_meta_set(d->buf, "config", cfg);
  free(cfg);
  if (rc == 0 && !d->o.resume) rc = lt_buffer_meta_set(d->buf, "run", lt_config_str(d->cfg, "run.name"));
  if (rc < 0) return rc;
  snprintf(p, sizeof p, "%s/metrics.jsonl", d->run_dir);
  if (!(d->metrics = fopen(p, "a")))
    return lt_error_set(lt_error_from_errno(errno), "cannot open %s: %s", p, strerror(errno));
  if ((rc = lt_envs_create(d->cfg, NULL, &d->envs)) < 0) return rc;
  int ndom = lt_envs_count(d->envs);
  d->domain_index = calloc((size_t)ndom, sizeof *d->domain_index);
  d->domain_weight = calloc((size_t)ndom, sizeof *d->domain_weight);
  d->reward_range = calloc((size_t)ndom, sizeof *d->reward_range);
  d->reward_bounded = calloc((size_t)ndom, sizeof *d->reward_bounded);
  d->eval_dom = calloc((size_t)ndom, sizeof *d->eval_dom);
  if (!d->domain_index || !d->domain_weight || !d->reward_range || !d->reward_bounded || !d->eval_dom)
    return lt_error_set(LT_ENOMEM, "out of memory");
  const cJSON *ratios = lt_config_get(d->cfg, "scheduler.domain_ratios");
  for (int i = 0; i < ndom; i++) {
    const cJSON *r = ratios ? cJSON_GetObjectItemCaseSensitive(ratios, lt_envs_name(d->envs, i)) : NULL;
    d->domain_weight[i] = cJSON_IsNumber(r) ? r->valuedouble : lt_envs_weight(d->envs, i);
    rc = d->o.reward_range
             ? d->o.reward_range(d->cfg, lt_envs_name(d->envs, i), &d->reward_range[i][0], &d->reward_range[i][1])
             : 0;
    if (rc < 0) return rc;
    d->reward_bounded[i] = rc;
  }
  if (d->o.resume) {
    lt_ckpt_row_t ck;
    if ((rc = lt_buffer_weights(d->buf, 0, &ck)) < 0) return rc;
    if (rc == 0 || !ck.path[0]) return lt_error_set(LT_ECORRUPT, "%s: no weights checkpoint recorded", d->run_dir);
    d->step = ck.step;
    lt__weights_published(d, ck.version, ck.path, ck.sha256);
    if ((rc = lt__scheduler_resume(d)) < 0) return rc;
    LT_INFO("daemon", "resuming %s at learner step %lld (policy v%lld), %d open tasks", d->run_dir, (long long)d->step,
            (long long)d->version, d->open_train);
  } else if ((rc = initial_weights(d)) < 0) {
    return rc;
  }
  if ((rc = lt_policy_model_info(d->weights_dir, &d->vocab, &d->model_info)) < 0) return rc;
  if ((rc = open_socket(d)) < 0) return rc;
  if ((rc = lt__prom_start(d)) < 0) return rc;
  if ((rc = ui_start(d)) < 0) return rc;
  if ((rc = lt__weights_start(d)) < 0) return rc;
  if ((rc = lt_writer_start(&d->loop, d->buf, &d->writer)) < 0) return rc;
  /* Collect-only runs (data generation, load tests) have no trainer thread. */
  if (lt_config_bool(d->cfg, "learner.enabled") && (rc = lt__trainer_start(d)) < 0) return rc;
  return lt__spawn_start(d, (int)lt_config_int(d->cfg, "workers.spawn_local"));
}

/* The endpoints: the socket (its linger lets BYE leave), ZAP, Prometheus, weights over HTTP. */
static void close_listeners(lt_daemon_t *d) {
  lt__prom_stop(d);
  lt_ui_serve_stop(d->ui);
  d->ui = NULL;
  lt__weights_stop(d);
  if (d->z) lt_zsock_close(d->z, NULL, NULL);
  d->z = NULL;
  lt_zap_close(d->zap);
  d->zap = NULL;
}

int lt_daemon_run(const lt_daemon_opts_t *o) {
  lt_daemon_t *d = calloc(1, sizeof *d);
  if (!d) return LT_EXIT_FAIL;
  d->o = *o;
  d->cfg = o->cfg;
  d->accepting = 1;
  d->lock_fd = -1;
  d->eval_round = -1;
  d->last_accuracy = -1;
  d->started_ms = lt_time_mono_ms();
  d->hb_ms = (int)lt_config_int(d->cfg, "transport.heartbeat_ms");
  d->liveness = (int)lt_config_int(d->cfg, "transport.liveness");
  d->group_size = (int)lt_config_int(d->cfg, "scheduler.group_size");
  d->oversample_max = (int)lt_config_int(d->cfg, "scheduler.pass_rate_oversample.max_groups");
  d->oversample_min_history = lt_config_int(d->cfg, "scheduler.pass_rate_oversample.min_history");
  d->max_tasks = lt_config_int(d->cfg, "scheduler.max_tasks");
  d->max_context = lt_config_int(d->cfg, "rollout.max_context");
  d->run_seed = (uint64_t)lt_config_int(d->cfg, "run.seed");
  d->batch = (int)lt_config_int(d->cfg, "learner.batch.trajectories");
  d->max_attempts = (int)lt_config_int(d->cfg, "scheduler.max_attempts");
  d->task_timeout_ms = (int64_t)(lt_config_num(d->cfg, "scheduler.task_timeout_s") * 1000);
  d->eval_every = lt_config_int(d->cfg, "eval.every");
  int64_t depth = lt_config_int(d->cfg, "scheduler.queue_depth");
  d->open_target = (int)((depth ? depth : 2 * d->batch) * lt_config_num(d->cfg, "scheduler.oversample"));
  lt_task_settings(d->cfg, &d->task_base);
  d->steps = lt_config_int(d->cfg, "learner.steps");
  d->sync = !strcmp(lt_config_str(d->cfg, "scheduler.mode"), "sync");
  d->mask_timeouts = !strcmp(lt_config_str(d->cfg, "rollout.on_timeout"), "mask");
  lt_log_set_process("daemon");
  int rc = uv_loop_init(&d->loop);
  if (rc != 0) {
    fprintf(stderr, "longtail train: error: its event loop: %s\n", uv_strerror(rc));
    free(d);
    return LT_EXIT_FAIL;
  }
  d->zctx = zmq_ctx_new();
  rc = d->zctx ? setup(d) : lt_error_set(LT_ESYS, "zmq_ctx_new failed");
  if (rc < 0) {
    fprintf(stderr, "longtail train: error: %s\n", lt_error_msg());
    d->exit_code = lt_error_exit_code(rc);
    /* Whatever setup opened before the failure would keep the loop alive
     * while the writer drains: close it first. */
    lt__spawn_stop(d);
    close_listeners(d);
    if (d->writer) {
      lt_writer_stop(d->writer, NULL, NULL);
      uv_run(&d->loop, UV_RUN_DEFAULT);
    }
  } else {
    LT_INFO("daemon", "run %s: listening on %s, policy v%lld", d->run_dir, d->endpoint, (long long)d->version);
    LT_ASSERT(uv_timer_init(&d->loop, &d->cron) == 0, "uv_timer_init");
    d->cron.data = d;
    uv_timer_start(&d->cron, on_cron, CRON_MS, CRON_MS);
    LT_ASSERT(uv_prepare_init(&d->loop, &d->before_sleep) == 0, "uv_prepare_init");
    d->before_sleep.data = d;
    uv_prepare_start(&d->before_sleep, on_before_sleep);
    /* A client that closes while its weights or metrics download is being written (a worker cancelling a version
     * for a newer one) is an EPIPE for that connection, not a signal that kills the daemon. */
    signal(SIGPIPE, SIG_IGN);
    if ((rc = lt_signals_watch(&d->loop, &d->sigint, &d->sigterm, on_signal, d)) < 0) { /* ends the ordinary way */
      fprintf(stderr, "longtail train: error: %s\n", lt_error_msg());
      lt__finish(d, lt_error_exit_code(rc));
    } else {
      lt__eval_first(d);
      lt__scheduler_dispatch(d);
    }
    uv_run(&d->loop, UV_RUN_DEFAULT);
    if (isatty(2) && strcmp(lt_config_str(d->cfg, "monitor.progress"), "off")) fputc('\n', stderr);
  }
  lt__acks_flush(d, 0); /* results committed in the last turn */
  /* Give BYE time to leave (the socket lingers), then close everything the loop still holds. */
  close_listeners(d);
  uv_walk(&d->loop, close_walk, NULL);
  uv_run(&d->loop, UV_RUN_DEFAULT);
  lt__acks_flush(d, 1); /* the socket is closed: whatever came later is only freed */
  uv_loop_close(&d->loop);
  if (d->zctx) zmq_ctx_term(d->zctx);
  lt__tasks_free(d);
  free(d->workers);
  free(d->domain_index);
  free(d->domain_weight);
  free(d->reward_range);
  free(d->reward_bounded);
  free(d->eval_dom);
  lt__spawn_free(d);
  if (d->metrics) fclose(d->metrics);
  lt_envs_free(d->envs);
  lt_buffer_close(d->buf);
  cJSON_Delete(d->model_info);
  cJSON_Delete(d->mirrors);
  if (d->lock_fd >= 0) close(d->lock_fd); /* the file stays: removing it would race a daemon about to lock it */
  int code = d->exit_code;
  free(d);
  return code;
}
