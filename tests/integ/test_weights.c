/* Weights to many machines (docs/operations.md): versions published in bf16 with their fp32 master, deltas that
 * rebuild each version bit for bit from the one before, a real nginx cache in front of the daemon as the workers'
 * mirror, a shared folder, and the daemon as the fallback when a mirror is down.  The local workers are made to
 * download (transport.weights_serve: all), as remote ones would. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "learner/safetensors.h"
#include "tests/support/harness.h"
#include "util/delta.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/sha256.h"

/* Trains the smoke job with weights over HTTP and the extra --set options; returns the run directory. */
static void smoke_run(const char *dir, char *rd, size_t cap, const char *const *sets, int nsets) {
  snprintf(rd, cap, "%s/run", dir);
  char port[64];
  snprintf(port, sizeof port, "transport.weights_port=%d", lt_test_free_port());
  char cfg[4200];
  snprintf(cfg, sizeof cfg, "%s/configs/smoke.json", lt_test_root());
  /* Six learner steps: versions enough to see deltas, however fast the machine ends the run. */
  const char *argv[32] = {"longtail",
                          "train",
                          cfg,
                          "--run-dir",
                          rd,
                          "--set",
                          port,
                          "--set",
                          "transport.weights_serve=all",
                          "--set",
                          "scheduler.max_tasks=192"};
  int n = 11;
  for (int i = 0; i < nsets && n < 30; i++) {
    argv[n++] = "--set";
    argv[n++] = sets[i];
  }
  argv[n] = NULL;
  lt_run_t r;
  cr_assert_eq(lt_test_run(&r, NULL, 120, argv), 0);
  cr_assert_eq(r.status, 0, "%s", r.err);
  lt_run_free(&r);
}

static char *worker_log(const char *rd, int k) {
  char p[4300];
  snprintf(p, sizeof p, "%s/logs/local-%d.log", rd, k);
  char *s = lt_test_read(p);
  cr_assert(s, "no log %s", p);
  return s;
}

static int count(const char *s, const char *what) {
  int n = 0;
  for (const char *p = s; (p = strstr(p, what)); p += strlen(what)) n++;
  return n;
}

static int same_sha(const char *a, const char *b) {
  char x[65], y[65];
  return lt_sha256_file(a, x) == 0 && lt_sha256_file(b, y) == 0 && !strcmp(x, y);
}

/* The newest version every worker holds (a download cut by the end of the run aside) is the daemon's, byte for
 * byte. */
static void workers_hold_the_last_version(const char *rd) {
  lt_run_t r;
  for (int k = 0; k < 2; k++) {
    cr_assert_eq(lt_test_sh(&r, 30,
                            "cd %s/spool/local-%d.weights && v=$(ls -d v*/model.safetensors | sort -V | tail -1) && "
                            "cmp $v %s/checkpoints/$v && echo SAME",
                            rd, k, rd),
                 0);
    cr_expect(strstr(r.out, "SAME"), "local-%d: %s %s", k, r.out, r.err);
    lt_run_free(&r);
  }
}

Test(weights, bf16_versions_travel_as_deltas_that_rebuild_them_bit_for_bit, .timeout = 180) {
  char *dir = lt_test_tmpdir("wbf16");
  char rd[4200];
  const char *sets[] = {"checkpoint.publish_dtype=bf16"};
  smoke_run(dir, rd, sizeof rd, sets, 1);
  /* What workers load is bf16, v0 included; the learner's fp32 weights are beside it. */
  int checked = 0;
  for (int v = 0; v < 8; v++) {
    char m[4400], ms[4400], prev[4400], delta[4400], out[4400];
    snprintf(m, sizeof m, "%s/checkpoints/v%d/model.safetensors", rd, v);
    snprintf(ms, sizeof ms, "%s/checkpoints/v%d/master.safetensors", rd, v);
    if (!lt_fs_exists(m)) continue;
    lt_st_file_t *f;
    cr_assert_eq(lt_st_open(m, &f), 0, "%s", lt_error_msg());
    for (int i = 0; i < f->n; i++) cr_assert_eq(f->entries[i].dtype, LT_ST_BF16, "v%d %s", v, f->entries[i].name);
    lt_st_close(f);
    cr_assert_eq(lt_st_open(ms, &f), 0, "v%d: %s", v, lt_error_msg());
    for (int i = 0; i < f->n; i++) cr_assert_eq(f->entries[i].dtype, LT_ST_F32);
    lt_st_close(f);
    /* A real learner update: version v rebuilt from v-1 and its delta. */
    snprintf(prev, sizeof prev, "%s/checkpoints/v%d/model.safetensors", rd, v - 1);
    snprintf(delta, sizeof delta, "%s/checkpoints/v%d/delta.zst", rd, v);
    snprintf(out, sizeof out, "%s/rebuilt-v%d", dir, v);
    if (v == 0 || !lt_fs_exists(prev)) continue;
    cr_assert(lt_fs_exists(delta), "v%d has no delta.zst", v);
    cr_assert_eq(lt_delta_apply(prev, delta, out), 0, "v%d: %s", v, lt_error_msg());
    cr_expect(same_sha(out, m), "v%d rebuilt differs", v);
    checked++;
  }
  cr_expect_geq(checked, 2, "deltas of at least two learner steps checked");
  /* Every worker took each version after the first as a delta. */
  for (int k = 0; k < 2; k++) {
    char *log = worker_log(rd, k);
    cr_expect_geq(count(log, "(a delta against the version before)"), 2, "local-%d:\n%s", k, log);
    free(log);
  }
  workers_hold_the_last_version(rd);
  lt_test_rmdir(dir);
}

/* nginx (Debian's) as the workers' mirror, with the cache configuration docs/operations.md gives. */
static pid_t start_nginx(const char *dir, int port, int daemon_port) {
  char conf[4300], cache[4300];
  snprintf(cache, sizeof cache, "%s/nginx-cache", dir);
  snprintf(conf, sizeof conf, "%s/nginx.conf", dir);
  lt_fs_mkdirs(cache, 0755);
  char *text;
  int n =
      asprintf(&text,
               "%s"
               "worker_processes 1;\nerror_log %s/nginx-error.log;\npid %s/nginx.pid;\n"
               "events { worker_connections 256; }\n"
               "http {\n"
               "  log_format cache '$uri $upstream_cache_status $status';\n"
               "  access_log %s/nginx-access.log cache;\n"
               "  keepalive_timeout 0;\n" /* lt_test_http reads to the end of the connection */
               "  proxy_cache_path %s levels=1:2 keys_zone=weights:10m max_size=10g inactive=7d use_temp_path=off;\n"
               "  client_body_temp_path %s/tmp; proxy_temp_path %s/tmp; fastcgi_temp_path %s/tmp;\n"
               "  uwsgi_temp_path %s/tmp; scgi_temp_path %s/tmp;\n"
               "  server {\n"
               "    listen 127.0.0.1:%d;\n"
               "    location /weights/sha256/ {\n"
               "      proxy_pass http://127.0.0.1:%d;\n"
               "      proxy_cache weights;\n"
               "      proxy_cache_valid 200 7d;\n"
               "      proxy_cache_lock on;\n"
               "      proxy_cache_lock_timeout 600s;\n"
               "      proxy_cache_revalidate on;\n"
               "      add_header X-Cache-Status $upstream_cache_status;\n"
               "    }\n"
               "  }\n"
               "}\n",
               getuid() == 0 ? "user root;\n" : "", dir, dir, dir, cache, dir, dir, dir, dir, dir, port, daemon_port);
  cr_assert_gt(n, 0);
  cr_assert_eq(lt_test_write(conf, text), 0);
  free(text);
  const char *argv[] = {"/usr/sbin/nginx", "-p", dir, "-c", conf, "-g", "daemon off;", NULL};
  return lt_test_spawn(dir, "nginx", argv);
}

Test(weights, a_real_nginx_cache_fans_versions_out_and_the_daemon_is_the_fallback, .timeout = 240) {
  if (access("/usr/sbin/nginx", X_OK) != 0) {
    cr_skip_test("nginx is not installed (scripts/deps.sh installs nginx-light)");
  }
  char *dir = lt_test_tmpdir("wnginx");
  int nport = lt_test_free_port(), dport = lt_test_free_port();
  char tmp[4300];
  snprintf(tmp, sizeof tmp, "%s/tmp", dir);
  lt_fs_mkdirs(tmp, 0755);
  pid_t ng = start_nginx(dir, nport, dport);
  cr_assert_gt(ng, 0);
  char *up = NULL;
  for (int i = 0; i < 100 && !(up = lt_test_http(nport, "GET", "/weights/sha256/none", NULL)); i++) usleep(50000);
  cr_assert(up, "nginx did not start (see %s/nginx.err)", dir);
  free(up);
  /* The first mirror answers nothing (a rack cache that is down): the workers go on to nginx. */
  char mirrors[512], port[64], cfg[4200], rd[4200];
  snprintf(mirrors, sizeof mirrors,
           "transport.weights_mirrors=[\"http://127.0.0.1:%d/weights\", \"http://127.0.0.1:%d/weights\"]",
           lt_test_free_port(), nport);
  snprintf(port, sizeof port, "transport.weights_port=%d", dport);
  snprintf(cfg, sizeof cfg, "%s/configs/smoke.json", lt_test_root());
  snprintf(rd, sizeof rd, "%s/run", dir);
  const char *argv[] = {"longtail",
                        "train",
                        cfg,
                        "--run-dir",
                        rd,
                        "--set",
                        port,
                        "--set",
                        "transport.weights_serve=all",
                        "--set",
                        "checkpoint.publish_dtype=bf16",
                        "--set",
                        mirrors,
                        "--set",
                        "scheduler.max_tasks=192",
                        NULL};
  lt_run_t r;
  cr_assert_eq(lt_test_run(&r, NULL, 150, argv), 0);
  cr_assert_eq(r.status, 0, "%s", r.err);
  lt_run_free(&r);
  kill(ng, SIGTERM);
  lt_test_wait(ng, 10);
  char p[4300];
  snprintf(p, sizeof p, "%s/nginx-access.log", dir);
  char *acc = lt_test_read(p);
  cr_assert(acc, "no nginx access log");
  /* The workers took their versions through the cache; each file left the daemon once (one MISS per address),
   * the other worker's copy came from the cache (proxy_cache_lock holds it back until the first is cached).  How
   * many versions the workers fetch before the run ends depends on the machine's speed: the test counts what
   * they did. */
  int miss = count(acc, "delta.zst MISS 200"), hit = count(acc, "delta.zst HIT 200");
  cr_expect_geq(miss, 1, "%s", acc);
  cr_expect_geq(hit, 1, "a delta served from the cache:\n%s", acc);
  for (char *l = acc; l && *l;) { /* one MISS per file at most */
    char *e = strchr(l, '\n'), uri[512];
    if (e) *e = 0;
    if (strstr(l, " MISS 200") && (strstr(l, "delta.zst") || strstr(l, "model.safetensors")) &&
        sscanf(l, "%511s", uri) == 1) {
      char again[600];
      snprintf(again, sizeof again, "%s MISS 200", uri);
      char *next = e ? e + 1 : NULL;
      cr_expect(!next || !strstr(next, again), "%s left the daemon twice", uri);
    }
    l = e ? e + 1 : NULL;
  }
  free(acc);
  for (int k = 0; k < 2; k++) {
    char *log = worker_log(rd, k), from[128];
    snprintf(from, sizeof from, "from http://127.0.0.1:%d/weights/sha256/", nport);
    cr_expect_geq(count(log, from), 2, "local-%d took its versions from nginx:\n%s", k, log);
    cr_expect(strstr(log, "trying http://127.0.0.1:"), "the dead mirror was passed over:\n%s", log);
    free(log);
  }
  workers_hold_the_last_version(rd);
  lt_test_rmdir(dir);
}

Test(weights, workers_read_versions_from_the_shared_folder, .timeout = 180) {
  char *dir = lt_test_tmpdir("wshared");
  char rd[4200], shared[4300], set[4400];
  snprintf(shared, sizeof shared, "%s/shared", dir);
  snprintf(set, sizeof set, "checkpoint.publish_dir=%s", shared);
  /* The spawned workers are on the daemon's machine: they are given the folder (--weights-dir). */
  const char *sets[] = {set};
  smoke_run(dir, rd, sizeof rd, sets, 1);
  lt_run_t r;
  cr_assert_eq(lt_test_sh(&r, 10, "ls %s | wc -l", shared), 0);
  cr_expect_geq(atoi(r.out), 3, "a folder per version: %s", r.out);
  lt_run_free(&r);
  for (int k = 0; k < 2; k++) {
    char *log = worker_log(rd, k), from[4400];
    snprintf(from, sizeof from, "from %s/", shared);
    cr_expect_geq(count(log, from), 2, "local-%d:\n%s", k, log);
    free(log);
  }
  lt_test_rmdir(dir);
}
