/* Local worker processes (workers.spawn_local): started with uv_spawn, logs in
 * RUN_DIR/logs/, restarted when they die unexpectedly. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "orchestrator/internal.h"
#include "util/cpus.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/log.h"

typedef struct {
  struct lt__spawn *s;
  int index;
  uv_process_t proc;
  uv_timer_t restart;
  int running, restarts;
} child_t;

struct lt__spawn {
  lt_daemon_t *d;
  child_t *c;
  int n, stopping, closing;
  lt_cpus_t cpus; /* workers.cpus */
};

static void start_child(child_t *c);

static void on_restart(uv_timer_t *t) { start_child(t->data); }

static void on_exit_cb(uv_process_t *p, int64_t status, int sig) {
  child_t *c = p->data;
  c->running = 0;
  uv_close((uv_handle_t *)p, NULL);
  lt_daemon_t *d = c->s->d;
  if (c->s->stopping) return;
  lt__event(d, "worker_exit", "local-%d exited (status %lld, signal %d)", c->index, (long long)status, sig);
  if (!lt_config_bool(d->cfg, "workers.restart")) return;
  /* Back off a little more after each crash, so a worker that cannot start does not spin. */
  int64_t delay = 500 * (1 << (c->restarts < 6 ? c->restarts : 6));
  c->restarts++;
  uv_timer_start(&c->restart, on_restart, (uint64_t)delay, 0);
}

static void start_child(child_t *c) {
  lt_daemon_t *d = c->s->d;
  if (c->s->stopping) return;
  char name[64], spool[4200], logp[4200], slots[32], threads[32];
  snprintf(name, sizeof name, "local-%d", c->index);
  snprintf(spool, sizeof spool, "%s/spool/%s", d->run_dir, name);
  snprintf(logp, sizeof logp, "%s/logs/%s.log", d->run_dir, name);
  snprintf(slots, sizeof slots, "%lld", (long long)lt_config_int(d->cfg, "workers.slots"));
  snprintf(threads, sizeof threads, "%lld", (long long)lt_config_int(d->cfg, "workers.threads"));
  const char *device = lt_config_str(d->cfg, "workers.device");
  if (!strcmp(device, "auto")) device = "cpu";
  char skey[4200], wkey[4200];
  snprintf(skey, sizeof skey, "%s/curve/server.pub", d->run_dir);
  snprintf(wkey, sizeof wkey, "%s/curve/local-worker", d->run_dir);
  char *args[32] = {(char *)d->o.self_exe,
                    "worker",
                    "--connect",
                    d->endpoint,
                    "--name",
                    name,
                    "--slots",
                    slots,
                    "--threads",
                    threads,
                    "--backend",
                    (char *)lt_config_str(d->cfg, "workers.backend"),
                    "--device",
                    (char *)device,
                    "--spool",
                    spool,
                    "--daemon-gone",
                    "30"};
  int na = 18;
  if (lt_config_bool(d->cfg, "transport.curve")) {
    args[na++] = "--server-key", args[na++] = skey;
    args[na++] = "--key", args[na++] = wkey;
  }
  /* A worker on this machine sees checkpoint.publish_dir: it reads versions there when it downloads them. */
  const char *pd = lt_config_str(d->cfg, "checkpoint.publish_dir");
  if (pd[0]) args[na++] = "--weights-dir", args[na++] = (char *)pd;
  args[na] = NULL;
  int fd = open(logp, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  uv_stdio_container_t io[3] = {{.flags = UV_IGNORE},
                                {.flags = fd >= 0 ? UV_INHERIT_FD : UV_IGNORE, .data.fd = fd},
                                {.flags = fd >= 0 ? UV_INHERIT_FD : UV_IGNORE, .data.fd = fd}};
  /* Its own session: a terminal's Ctrl-C reaches the daemon only, which then
   * says BYE; and workers outlive a killed daemon to deliver to its restart. */
  uv_process_options_t po = {.file = d->o.self_exe,
                             .args = args,
                             .exit_cb = on_exit_cb,
                             .stdio = io,
                             .stdio_count = 3,
                             .flags = UV_PROCESS_DETACHED};
  c->proc.data = c;
  /* fork() runs OpenBLAS's pre-fork handler, which joins its thread pool: it
   * must not happen while the learner is inside a BLAS call. */
  if (!lt__trainer_fork_lock(d)) {
    if (fd >= 0) close(fd);
    uv_timer_start(&c->restart, on_restart, 50, 0);
    return;
  }
  /* A child starts on the CPUs of the thread that forks it: the loop's, on workers.cpus for the fork alone. */
  lt_cpus_t loop_cpus;
  int moved = c->s->cpus.n && lt_cpus_get_self(&loop_cpus) == 0 && lt_cpus_pin_self(&c->s->cpus) == 0;
  if (c->s->cpus.n && !moved) LT_WARN("spawn", "%s starts unpinned: workers.cpus: %s", name, lt_error_msg());
  int rc = uv_spawn(&d->loop, &c->proc, &po);
  if (moved && lt_cpus_pin_self(&loop_cpus) < 0) LT_WARN("spawn", "the loop's CPUs back: %s", lt_error_msg());
  lt__trainer_fork_unlock(d);
  if (fd >= 0) close(fd);
  if (rc != 0) {
    LT_ERROR("spawn", "cannot start %s: %s", name, uv_strerror(rc));
    uv_timer_start(&c->restart, on_restart, 2000, 0);
    return;
  }
  c->running = 1;
  LT_DEBUG("spawn", "%s started (pid %d)", name, c->proc.pid);
}

int lt__spawn_start(lt_daemon_t *d, int n) {
  struct lt__spawn *s = calloc(1, sizeof *s);
  if (!s) return lt_error_set(LT_ENOMEM, "spawn: out of memory");
  s->d = d;
  s->n = n;
  s->c = calloc((size_t)(n ? n : 1), sizeof *s->c);
  if (!s->c) {
    free(s);
    return lt_error_set(LT_ENOMEM, "spawn: out of memory");
  }
  d->spawn = s;
  lt_cpus_t here;
  int rc = lt_cpus_config(d->cfg, "workers.cpus", &s->cpus);
  /* Refused now, not at each start, when this process may not run there (a cgroup's cpuset). */
  if (rc == 0 && s->cpus.n && (rc = lt_cpus_get_self(&here)) == 0 && (rc = lt_cpus_pin_self(&s->cpus)) == 0)
    rc = lt_cpus_pin_self(&here);
  if (rc < 0) return rc == LT_ECONFIG ? rc : lt_error_wrap(LT_ECONFIG, "workers.cpus");
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/logs", d->run_dir);
  rc = lt_fs_mkdirs(dir, 0755);
  if (rc < 0) return rc;
  for (int i = 0; i < n; i++) {
    child_t *c = &s->c[i];
    c->s = s;
    c->index = i;
    LT_ASSERT(uv_timer_init(&d->loop, &c->restart) == 0, "uv_timer_init");
    c->restart.data = c;
    start_child(c);
  }
  return 0;
}

/* Workers leave on BYE; this stops restarts and ends any that linger. */
void lt__spawn_stop(lt_daemon_t *d) {
  struct lt__spawn *s = d->spawn;
  if (!s || s->closing) return;
  s->stopping = 1;
  s->closing = 1;
  for (int i = 0; i < s->n; i++) {
    uv_timer_stop(&s->c[i].restart);
    uv_close((uv_handle_t *)&s->c[i].restart, NULL);
    if (s->c[i].running) uv_process_kill(&s->c[i].proc, SIGTERM);
  }
}

void lt__spawn_free(lt_daemon_t *d) {
  if (!d->spawn) return;
  free(d->spawn->c);
  free(d->spawn);
  d->spawn = NULL;
}
