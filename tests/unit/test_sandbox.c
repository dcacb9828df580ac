/* The sandbox escape suite: each way out is tried for real and must be
 * contained, while legitimate programs (python3, sh) run. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/sandbox.h"
#include "tests/support/box.h"
#include "tests/support/harness.h"
#include "util/error.h"
#include "util/time.h"

static lt_sandbox_limits_t limits(double timeout_s) {
  lt_sandbox_limits_t l;
  lt_sandbox_limits_default(&l);
  l.timeout_s = timeout_s;
  return l;
}

static void need_sandbox(void) {
  lt_sandbox_caps_t c;
  lt_sandbox_probe(&c);
  if (!c.userns) cr_skip_test("this host gives no user namespaces: the sandbox refuses to run (and says so)");
}

/* Runs `sh -c script` (or argv when given) and asserts the sandbox itself worked. */
static lt_sandbox_result_t run_sh(const lt_sandbox_limits_t *l, const char *script) {
  const char *argv[] = {"sh", "-c", script, NULL};
  lt_sandbox_job_t job = {.argv = argv};
  lt_sandbox_result_t r;
  cr_assert_eq(lt_sandbox_run(l, &job, &r), 0, "%s", lt_error_msg());
  return r;
}

Test(sandbox, legitimate_programs_run) {
  need_sandbox();
  lt_sandbox_limits_t l = limits(20);
  const char *argv[] = {"python3", "main.py", "7", NULL};
  const char *code = "import sys\nfrom lib.helper import sq\nprint(sq(int(sys.argv[1])), sys.stdin.read().upper())\n";
  const char *helper = "def sq(x):\n    return x * x\n";
  lt_sandbox_file_t files[] = {{"main.py", code, strlen(code), 0}, {"lib/helper.py", helper, strlen(helper), 0}};
  lt_sandbox_job_t job = {.argv = argv, .files = files, .nfiles = 2, .stdin_data = "abc", .stdin_len = 3};
  lt_sandbox_result_t r;
  cr_assert_eq(lt_sandbox_run(&l, &job, &r), 0, "%s", lt_error_msg());
  cr_expect_eq(r.exit_code, 0, "stderr: %s", r.err);
  cr_expect_str_eq(r.out, "49 ABC\n");
  cr_expect(!r.timed_out && !r.oom && r.signal == 0);
  lt_sandbox_result_free(&r);

  r = run_sh(&l, "echo out; echo err >&2; mkdir -p /tmp/a && echo x > /tmp/a/f && cat /tmp/a/f; exit 3");
  cr_expect_eq(r.exit_code, 3);
  cr_expect_str_eq(r.out, "out\nx\n");
  cr_expect_str_eq(r.err, "err\n");
  lt_sandbox_result_free(&r);

  r = run_sh(&l, "no-such-command-xyz");
  cr_expect_eq(r.exit_code, 127);
  lt_sandbox_result_free(&r);
  const char *missing[] = {"no-such-program-xyz", NULL};
  job = (lt_sandbox_job_t){.argv = missing};
  cr_assert_eq(lt_sandbox_run(&l, &job, &r), 0);
  cr_expect_eq(r.exit_code, 127);
  cr_expect(strstr(r.err, "no-such-program-xyz"), "%s", r.err);
  lt_sandbox_result_free(&r);
}

Test(sandbox, no_privilege_inside) {
  need_sandbox();
  lt_sandbox_limits_t l = limits(10);
  lt_sandbox_result_t r = run_sh(&l,
                                 "grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status; id -u; "
                                 "touch /usr/x /etc/x / 2>/dev/null; echo ro=$?; hostname");
  lt_test_expect_no_privilege(r.out);
  cr_expect(strstr(r.out, "1000\nro=1\nsandbox\n"), "%s", r.out);
  lt_sandbox_result_free(&r);
}

Test(sandbox, no_network_not_even_host_loopback) {
  need_sandbox();
  int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  cr_assert_eq(bind(s, (struct sockaddr *)&a, sizeof a), 0);
  cr_assert_eq(listen(s, 4), 0);
  getsockname(s, (struct sockaddr *)&a, &al);
  char script[512];
  snprintf(script, sizeof script,
           "python3 -c 'import socket\ns = socket.create_connection((\"127.0.0.1\", %d), 2)\nprint(\"connected\")'; "
           "cat /proc/net/dev | tail -n +3 | cut -d: -f1",
           ntohs(a.sin_port));
  lt_sandbox_limits_t l = limits(10);
  lt_sandbox_result_t r = run_sh(&l, script);
  cr_expect(!strstr(r.out, "connected"), "%s", r.out);
  /* Isolation holds without the filter too: the namespace has only a loopback of its own. */
  cr_expect_str_eq(r.out, "    lo\n", "interfaces: %s", r.out);
  cr_expect_lt(accept(s, NULL, NULL), 0, "the host listener got a connection from the sandbox");
  close(s);
  lt_sandbox_result_free(&r);
}

static void *answer_once(void *arg) {
  int c = accept(*(int *)arg, NULL, NULL);
  char buf[16] = {0};
  if (c >= 0 && read(c, buf, 4) == 4 && !strcmp(buf, "ping")) cr_assert_eq(write(c, "pong", 4), 4);
  if (c >= 0) close(c);
  return NULL;
}

/* limits.port: that one host port is reachable at the same address, nothing else is. */
Test(sandbox, port_reaches_only_its_host_port) {
  need_sandbox();
  int pa, pb, a = lt_test_listen_loopback(&pa), b = lt_test_listen_loopback(&pb);
  cr_assert(a >= 0 && b >= 0);
  fcntl(b, F_SETFL, O_NONBLOCK);
  pthread_t th;
  pthread_create(&th, NULL, answer_once, &a);
  const char *code =
      "import os, socket\n"
      "s = socket.create_connection(('127.0.0.1', int(os.environ['PA'])), 5); s.sendall(b'ping'); print(s.recv(4).decode())\n"
      "for host, port in (('127.0.0.1', int(os.environ['PB'])), ('1.1.1.1', 80)):\n"
      "    try: socket.create_connection((host, port), 2); print('reached', host)\n"
      "    except OSError as e: print('refused')\n";
  char pa_env[32], pb_env[32];
  snprintf(pa_env, sizeof pa_env, "PA=%d", pa);
  snprintf(pb_env, sizeof pb_env, "PB=%d", pb);
  const char *env[] = {pa_env, pb_env, NULL}, *argv[] = {"python3", "net.py", NULL};
  lt_sandbox_file_t f = {"net.py", code, strlen(code), 0};
  lt_sandbox_job_t job = {.argv = argv, .files = &f, .nfiles = 1, .env = env};
  lt_sandbox_limits_t l = limits(20);
  l.port = pa;
  lt_sandbox_result_t r;
  cr_assert_eq(lt_sandbox_run(&l, &job, &r), 0, "%s", lt_error_msg());
  pthread_join(th, NULL);
  cr_expect_str_eq(r.out, "pong\nrefused\nrefused\n", "stdout %s stderr %s", r.out, r.err);
  cr_expect_lt(accept(b, NULL, NULL), 0, "the other host listener got a connection from the sandbox");
  lt_sandbox_result_free(&r);
  close(a), close(b);
}

/* A host server that echoes on every connection until told to stop (echo_stop), closing each at its client's end. */
typedef struct {
  int listener;
  volatile int stop;
} echo_t;

static void *echo_all(void *arg) {
  echo_t *e = arg;
  struct pollfd p[64] = {{.fd = e->listener, .events = POLLIN}};
  int n = 1;
  while (!e->stop) {
    if (poll(p, (nfds_t)n, 100) <= 0) continue;
    for (int i = n - 1; i >= 0; i--) {
      if (!p[i].revents) continue;
      if (i == 0) {
        int c = accept(e->listener, NULL, NULL);
        if (c >= 0 && n < 64) p[n++] = (struct pollfd){.fd = c, .events = POLLIN};
        else if (c >= 0) close(c);
        continue;
      }
      char buf[64];
      ssize_t r = read(p[i].fd, buf, sizeof buf);
      if (r <= 0 || write(p[i].fd, buf, (size_t)r) != r) {
        close(p[i].fd);
        p[i] = p[--n];
      }
    }
  }
  for (int i = 1; i < n; i++) close(p[i].fd);
  return NULL;
}

/* limits.max_conns (sandbox.max_connections): a program holds at most that many connections open through its
 * port at once; one more is closed at once without reaching the host, the others keep working, and a slot
 * freed by a close is usable again (issue 32: the agent gateway faces programs nobody vetted). */
Test(sandbox, port_connections_past_the_cap_are_refused, .timeout = 60) {
  need_sandbox();
  echo_t e = {.listener = -1};
  int pa;
  e.listener = lt_test_listen_loopback(&pa);
  cr_assert(e.listener >= 0);
  pthread_t th;
  pthread_create(&th, NULL, echo_all, &e);
  const char *code =
      "import os, socket, time\n"
      "port = int(os.environ['PA'])\n"
      "def ask(s):\n"
      "    try:\n"
      "        s.settimeout(5); s.sendall(b'ping'); return s.recv(4).decode() or 'closed'\n"
      "    except OSError: return 'closed'\n"
      "socks = []\n"
      "for i in range(4):\n"
      "    socks.append(socket.create_connection(('127.0.0.1', port), 5)); time.sleep(0.3)\n"
      "for i, s in enumerate(socks): print(i, ask(s))\n"
      "socks[0].close(); socks[3].close()\n"
      "for attempt in range(30):\n"
      "    time.sleep(0.1); s = socket.create_connection(('127.0.0.1', port), 5); got = ask(s); s.close()\n"
      "    if got != 'closed': break\n"
      "print('again', got)\n";
  char pa_env[32];
  snprintf(pa_env, sizeof pa_env, "PA=%d", pa);
  const char *env[] = {pa_env, NULL}, *argv[] = {"python3", "conns.py", NULL};
  lt_sandbox_file_t f = {"conns.py", code, strlen(code), 0};
  lt_sandbox_job_t job = {.argv = argv, .files = &f, .nfiles = 1, .env = env};
  lt_sandbox_limits_t l = limits(30);
  l.port = pa;
  l.max_conns = 3;
  lt_sandbox_result_t r;
  cr_assert_eq(lt_sandbox_run(&l, &job, &r), 0, "%s", lt_error_msg());
  e.stop = 1;
  pthread_join(th, NULL);
  cr_expect_str_eq(r.out, "0 ping\n1 ping\n2 ping\n3 closed\nagain ping\n", "stdout %s stderr %s", r.out, r.err);
  cr_expect_eq(r.exit_code, 0, "stderr %s", r.err);
  lt_sandbox_result_free(&r);
  close(e.listener);
}

Test(sandbox, host_home_run_dir_and_tmp_are_invisible) {
  need_sandbox();
  const char *home = getenv("HOME") ? getenv("HOME") : "/root";
  char secret[512], rundir_file[512], probe[1600];
  snprintf(secret, sizeof secret, "%s/.lt-sandbox-secret-%d", home, (int)getpid());
  cr_assert_eq(lt_test_write(secret, "TOPSECRET-home\n"), 0);
  char *dir = lt_test_tmpdir("sandbox-run");
  snprintf(rundir_file, sizeof rundir_file, "%s/buffer.db", dir);
  cr_assert_eq(lt_test_write(rundir_file, "TOPSECRET-run\n"), 0);
  char host_tmp[128];
  snprintf(host_tmp, sizeof host_tmp, "/tmp/lt-sandbox-wrote-%d", (int)getpid());
  snprintf(probe, sizeof probe, "cat %s; cat %s; ls /root /home /work/main 2>&1; echo pwned > %s; ls %s", secret,
           rundir_file, host_tmp, host_tmp);
  lt_sandbox_limits_t l = limits(10);
  lt_sandbox_result_t r = run_sh(&l, probe);
  cr_expect(!strstr(r.out, "TOPSECRET"), "%s", r.out);
  cr_expect(strstr(r.out, host_tmp), "the sandbox's own /tmp is writable: %s %s", r.out, r.err);
  cr_expect_eq(access(host_tmp, F_OK), -1, "the sandbox wrote the host's /tmp");
  unlink(host_tmp);
  unlink(secret);
  lt_test_rmdir(dir);
  lt_sandbox_result_free(&r);
}

/* limits.ro_dirs: a host directory (here under the host's /tmp, which the sandbox's root covers) is visible at its
 * own path with its subdirectories, read-only, and nothing beside it is; a path the sandbox keeps for itself is
 * refused before anything runs. */
Test(sandbox, read_only_directories_are_visible_and_read_only) {
  need_sandbox();
  char *dir = lt_test_tmpdir("sandbox-ro"), *other = lt_test_tmpdir("sandbox-ro-other"), path[600], probe[2400];
  snprintf(path, sizeof path, "%s/lib", dir);
  cr_assert_eq(mkdir(path, 0755), 0);
  snprintf(path, sizeof path, "%s/lib/sub", dir);
  cr_assert_eq(mkdir(path, 0755), 0);
  snprintf(path, sizeof path, "%s/lib/sub/mod.txt", dir);
  cr_assert_eq(lt_test_write(path, "VISIBLE-module\n"), 0);
  snprintf(path, sizeof path, "%s/secret.txt", other);
  cr_assert_eq(lt_test_write(path, "TOPSECRET-beside\n"), 0);
  chmod(dir, 0755);
  snprintf(probe, sizeof probe, "cat %s/lib/sub/mod.txt; cat %s/secret.txt; touch %s/lib/new && echo WROTE", dir, other,
           dir);
  lt_sandbox_limits_t l = limits(10);
  const char *ro[] = {dir, NULL};
  l.ro_dirs = ro;
  lt_sandbox_result_t r = run_sh(&l, probe);
  cr_expect(strstr(r.out, "VISIBLE-module"), "%s %s", r.out, r.err);
  cr_expect(!strstr(r.out, "TOPSECRET") && !strstr(r.out, "WROTE"), "%s", r.out);
  cr_expect(strstr(r.err, "Read-only file system"), "%s", r.err);
  lt_sandbox_result_free(&r);
  const char *proc[] = {"/proc/self", NULL};
  l.ro_dirs = proc;
  lt_sandbox_job_t job = {.argv = (const char *[]){"true", NULL}};
  cr_assert_eq(lt_sandbox_run(&l, &job, &r), LT_EINVAL);
  cr_expect(strstr(lt_error_msg(), "/proc/self: a read-only directory is neither / nor under /proc or /dev"), "%s",
            lt_error_msg());
  lt_test_rmdir(dir);
  lt_test_rmdir(other);
}

Test(sandbox, deadline_kills_setsid_orphans_and_cpu_spin) {
  need_sandbox();
  lt_sandbox_limits_t l = limits(1);
  double t0 = lt_time_mono_s();
  lt_sandbox_result_t r = run_sh(&l, "setsid sh -c 'exec sleep 7771' & python3 -c 'while True: pass'");
  double secs = lt_time_mono_s() - t0;
  cr_expect(r.timed_out);
  cr_expect_eq(r.signal, 9);
  cr_expect(secs < 3.5, "took %.2f s past a 1 s deadline", secs);
  cr_expect_eq(lt_test_procs_matching("sleep 777[1]"), 0, "a setsid child outlived the deadline");
  lt_sandbox_result_free(&r);
  /* Orphans left by a program that ends in time die with it. */
  l.timeout_s = 10;
  r = run_sh(&l, "setsid sh -c 'exec sleep 7772' & echo started");
  cr_expect(!r.timed_out && r.exit_code == 0);
  cr_expect_eq(lt_test_procs_matching("sleep 777[2]"), 0, "an orphan outlived its program");
  lt_sandbox_result_free(&r);
  /* CPU time is limited per process apart from the deadline. */
  l.cpu_s = 1;
  t0 = lt_time_mono_s();
  r = run_sh(&l, "exec python3 -c 'while True: pass'");
  cr_expect(!r.timed_out, "the CPU limit, not the 10 s deadline, should stop it");
  cr_expect(r.signal == 24 /* SIGXCPU */ || r.signal == 9, "signal %d", r.signal);
  cr_expect(lt_time_mono_s() - t0 < 5);
  lt_sandbox_result_free(&r);
}

Test(sandbox, fork_bomb_is_contained) {
  need_sandbox();
  lt_sandbox_limits_t l = limits(2);
  double t0 = lt_time_mono_s();
  lt_sandbox_result_t r = run_sh(&l,
                                 "exec python3 -c '\nimport os\nwhile True:\n    try:\n        os.fork()\n"
                                 "    except OSError:\n        pass\n' lt-forkbomb-7773");
  cr_expect(r.timed_out);
  cr_expect(lt_time_mono_s() - t0 < 6);
  cr_expect_eq(lt_test_procs_matching("lt-forkbomb-777[3]"), 0, "fork bomb processes survived");
  lt_sandbox_result_free(&r);
  /* The host can still make processes, and the next sandbox works. */
  l.timeout_s = 10;
  r = run_sh(&l, "echo ok");
  cr_expect_str_eq(r.out, "ok\n");
  lt_sandbox_result_free(&r);
}

Test(sandbox, memory_limit_holds) {
  need_sandbox();
  lt_sandbox_limits_t l = limits(20);
  l.memory_mb = 256;
  lt_sandbox_result_t r = run_sh(&l, "exec python3 -c 'x = b\"a\" * (4 << 30); print(\"allocated\", len(x))'");
  cr_expect(!strstr(r.out, "allocated"), "a 4 GiB allocation succeeded under 256 MiB: %s", r.out);
  cr_expect(r.exit_code != 0 || r.signal != 0);
  lt_sandbox_caps_t c;
  lt_sandbox_probe(&c);
  if (c.cgroup) cr_expect(r.oom && r.signal == 9, "oom %d signal %d exit %d", r.oom, r.signal, r.exit_code);
  else cr_expect(strstr(r.err, "MemoryError"), "%s", r.err);
  lt_sandbox_result_free(&r);
  /* Within the limit, memory is usable. */
  r = run_sh(&l, "exec python3 -c 'x = b\"a\" * (64 << 20); print(len(x))'");
  cr_expect_str_eq(r.out, "67108864\n", "%s", r.err);
  lt_sandbox_result_free(&r);
}

Test(sandbox, output_and_file_size_are_capped) {
  need_sandbox();
  lt_sandbox_limits_t l = limits(20);
  l.output_bytes = 1000;
  l.file_mb = 4;
  lt_sandbox_result_t r = run_sh(&l, "head -c 50000000 /dev/zero | tr '\\0' x; echo done >&2");
  cr_expect_eq(r.out_len, 1000);
  cr_expect(r.out_truncated && !r.err_truncated);
  cr_expect_str_eq(r.err, "done\n");
  lt_sandbox_result_free(&r);
  r = run_sh(&l, "head -c 8000000 /dev/zero > /work/big; echo rc=$?; wc -c < /work/big");
  cr_expect(strstr(r.out, "4194304"), "a file grew past 4 MB: %s %s", r.out, r.err);
  lt_sandbox_result_free(&r);
}

Test(sandbox, pool_gives_fresh_sandboxes) {
  need_sandbox();
  lt_sandbox_limits_t l = limits(10);
  lt_sandbox_pool_t *p;
  cr_assert_eq(lt_sandbox_pool_create(&l, 2, &p), 0);
  for (int i = 0; i < 5; i++) {
    const char *argv[] = {"sh", "-c", "ls /tmp /work; echo $$ > /tmp/mark; echo > /work/mark; echo ran", NULL};
    lt_sandbox_job_t job = {.argv = argv};
    lt_sandbox_result_t r;
    cr_assert_eq(lt_sandbox_pool_run(p, &job, &r), 0, "%s", lt_error_msg());
    cr_expect_str_eq(r.out, "/tmp:\n\n/work:\nran\n", "run %d saw a used sandbox: %s", i, r.out);
    lt_sandbox_result_free(&r);
  }
  lt_sandbox_pool_free(p);
}

/* --env passes one of our variables by name, --file copies a host file into /work; a variable we lack is a usage error. */
Test(sandbox, cli_env_and_file) {
  need_sandbox();
  char *dir = lt_test_tmpdir("sbfile"), script[4200];
  snprintf(script, sizeof script, "%s/show.sh", dir);
  cr_assert_eq(lt_test_write(script, "echo \"$LT_SB_VAR $LT_SB_OTHER\"\n"), 0);
  setenv("LT_SB_VAR", "from-host", 1);
  setenv("LT_SB_OTHER", "not-passed", 1);
  lt_run_t r;
  const char *a1[] = {"longtail", "sandbox", "run", "--env",   "LT_SB_VAR", "--file",
                      script,     "--",      "sh",  "show.sh", NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 30, a1), 0);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect_str_eq(r.out, "from-host \n");
  lt_run_free(&r);
  const char *a2[] = {"longtail", "sandbox", "run", "--env", "LT_SB_NO_SUCH_VAR", "--", "true", NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 30, a2), 0);
  cr_expect_eq(r.status, 2);
  cr_expect(strstr(r.err, "LT_SB_NO_SUCH_VAR"), "%s", r.err);
  lt_run_free(&r);
  lt_test_rmdir(dir);
}

Test(sandbox, cli_json_and_exit_status) {
  need_sandbox();
  lt_run_t r;
  const char *a1[] = {"longtail", "sandbox", "run", "--json", "--", "sh", "-c", "echo hi; exit 4", NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 30, a1), 0);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cJSON *j = cJSON_Parse(r.out);
  cr_assert_not_null(j, "%s", r.out);
  const char *keys[] = {"exit_code", "signal", "timed_out", "oom", "stdout", "stderr", "wall_ms"};
  for (int i = 0; i < 7; i++) cr_expect_not_null(cJSON_GetObjectItem(j, keys[i]), "missing %s", keys[i]);
  cr_expect_eq(cJSON_GetObjectItem(j, "exit_code")->valueint, 4);
  cr_expect_str_eq(cJSON_GetObjectItem(j, "stdout")->valuestring, "hi\n");
  cJSON_Delete(j);
  lt_run_free(&r);
  const char *a2[] = {"longtail", "sandbox", "run", "--", "sh", "-c", "exit 5", NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 30, a2), 0);
  cr_expect_eq(r.status, 5);
  lt_run_free(&r);
  const char *a3[] = {"longtail", "sandbox", "run", "--timeout", "0.5", "--", "sleep", "30", NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 30, a3), 0);
  cr_expect_eq(r.status, 124);
  cr_expect(strstr(r.err, "deadline"), "%s", r.err);
  lt_run_free(&r);
  const char *a4[] = {"longtail", "sandbox", "walk", "--", "true", NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 30, a4), 0);
  cr_expect_eq(r.status, 2);
  lt_run_free(&r);
}
