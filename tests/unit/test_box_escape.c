/* The escape suite again, inside a task image's root (sandbox/image.h): the ways out tests/unit/test_sandbox.c tries,
 * with the image's busybox instead of the host's programs, plus what an image brings: setuid files, device nodes,
 * symlinks pointing out of the root, a layer writing through them, and a box's writes reaching the cached image
 * that every box shares.  Every case runs for real in a box over the test suite's busybox image. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/image.h"
#include "tests/support/box.h"
#include "tests/support/harness.h"
#include "tests/support/image.h"
#include "util/error.h"
#include "util/time.h"

static char *cache_dir;

static void need_box(void) {
  lt_sandbox_caps_t c;
  lt_sandbox_probe(&c);
  if (!c.userns) cr_skip_test("this host gives no user namespaces: boxes refuse to run (and say so)");
  if (!lt_test_busybox_image()) cr_skip_test("no static busybox here (Debian's busybox-static) for the test image");
}

static lt_image_t *open_image(const char *ref) {
  if (!cache_dir) cache_dir = lt_test_tmpdir("box-cache");
  lt_image_t *img = NULL;
  cr_assert_eq(lt_image_open(cache_dir, ref, &img), 0, "%s", lt_error_msg());
  return img;
}

static lt_box_t *new_box(lt_image_t *img, const lt_sandbox_limits_t *l) {
  lt_box_t *b = NULL;
  cr_assert_eq(lt_box_create(img, l, &b), 0, "%s", lt_error_msg());
  return b;
}

static lt_sandbox_limits_t limits(double timeout_s) {
  lt_sandbox_limits_t l;
  lt_sandbox_limits_default(&l);
  l.timeout_s = timeout_s;
  return l;
}

/* A fresh box over the busybox image running one script. */
static lt_sandbox_result_t run_sh(const lt_sandbox_limits_t *l, const char *script) {
  lt_image_t *img = open_image(lt_test_busybox_image());
  lt_box_t *b = new_box(img, l);
  lt_sandbox_result_t r = lt_test_box_sh(b, script);
  lt_box_destroy(b);
  lt_image_close(img);
  return r;
}

static void cleanup(void) {
  if (cache_dir) lt_test_rmdir(cache_dir);
  cache_dir = NULL;
}

TestSuite(box_escape, .fini = cleanup);

Test(box_escape, no_privilege_inside) {
  need_box();
  lt_sandbox_limits_t l = limits(10);
  lt_sandbox_result_t r = run_sh(&l,
                                 "grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status; id -u; "
                                 "mount -t tmpfs none /tmp 2>/dev/null; echo mount=$?; "
                                 "unshare -r true 2>/dev/null; echo unshare=$?; "
                                 "mknod /tmp/mem c 1 1 2>/dev/null; echo mknod=$?; hostname");
  lt_test_expect_no_privilege(r.out);
  /* uid 0 of the image (it names no User) is the box's one id: root inside, no capability, nobody outside. */
  cr_expect(strstr(r.out, "\n0\nmount="), "%s", r.out);
  cr_expect(!strstr(r.out, "mount=0") && !strstr(r.out, "unshare=0") && !strstr(r.out, "mknod=0"), "%s", r.out);
  lt_sandbox_result_free(&r);
}

Test(box_escape, no_network_not_even_host_loopback) {
  need_box();
  int port, s = lt_test_listen_loopback(&port);
  cr_assert(s >= 0);
  char script[512];
  snprintf(script, sizeof script,
           "echo hi | nc -w 2 127.0.0.1 %d && echo connected; cat /proc/net/dev | tail -n +3 | cut -d: -f1", port);
  lt_sandbox_limits_t l = limits(10);
  lt_sandbox_result_t r = run_sh(&l, script);
  cr_expect(!strstr(r.out, "connected"), "%s", r.out);
  cr_expect_str_eq(r.out, "    lo\n", "interfaces: %s", r.out);
  fcntl(s, F_SETFL, O_NONBLOCK);
  cr_expect_lt(accept(s, NULL, NULL), 0, "the host listener got a connection from the box");
  close(s);
  lt_sandbox_result_free(&r);
}

Test(box_escape, host_paths_are_invisible) {
  need_box();
  const char *home = getenv("HOME") ? getenv("HOME") : "/root";
  char secret[512], probe[2000], host_tmp[128];
  snprintf(secret, sizeof secret, "%s/.lt-box-secret-%d", home, (int)getpid());
  cr_assert_eq(lt_test_write(secret, "TOPSECRET-home\n"), 0);
  snprintf(host_tmp, sizeof host_tmp, "/tmp/lt-box-wrote-%d", (int)getpid());
  /* The cache's own path, the repository, the host's system: none of it is there. */
  snprintf(probe, sizeof probe,
           "cat %s; ls %s %s /usr/lib /lib/x86_64-linux-gnu 2>&1 | head -3; echo pwned > %s; ls %s; "
           "cat /etc/passwd; grep -c overlay /proc/self/mounts",
           secret, cache_dir ? cache_dir : "/nonexistent", lt_test_root(), host_tmp, host_tmp);
  lt_sandbox_limits_t l = limits(10);
  lt_sandbox_result_t r = run_sh(&l, probe);
  cr_expect(!strstr(r.out, "TOPSECRET"), "%s", r.out);
  cr_expect(strstr(r.out, host_tmp), "the image's /tmp is writable: %s %s", r.out, r.err);
  cr_expect_eq(access(host_tmp, F_OK), -1, "the box wrote the host's /tmp");
  cr_expect(strstr(r.out, "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\n"),
            "/etc/passwd is the image's: %s", r.out);
  cr_expect(!strstr(r.out, "Makefile") && !strstr(r.out, "libc.so"), "host files visible: %s", r.out);
  unlink(host_tmp);
  unlink(secret);
  lt_sandbox_result_free(&r);
}

/* The deadline, the command's group and setsid children: tests/unit/test_box.c.  CPU time is limited per process
 * apart from the deadline, as in a sandbox. */
Test(box_escape, cpu_limit_holds) {
  need_box();
  lt_sandbox_limits_t l = limits(30); /* wall time is not CPU time on a loaded machine */
  l.cpu_s = 1;
  lt_sandbox_result_t r = run_sh(&l, "while :; do :; done");
  cr_expect(!r.timed_out, "the CPU limit, not the 30 s deadline, should stop it");
  cr_expect(r.signal == 24 /* SIGXCPU */ || r.signal == 9, "signal %d exit %d", r.signal, r.exit_code);
  lt_sandbox_result_free(&r);
}

Test(box_escape, fork_bomb_and_memory_are_contained) {
  need_box();
  lt_image_t *img = open_image(lt_test_busybox_image());
  lt_sandbox_limits_t l = limits(2);
  l.memory_mb = 128;
  lt_box_t *b = new_box(img, &l);
  double t0 = lt_time_mono_s();
  lt_sandbox_result_t r = lt_test_box_sh(b, "f() { f | f & }; f; sleep 100 # lt-box-bomb-7803");
  cr_expect(r.timed_out);
  cr_expect(lt_time_mono_s() - t0 < 6);
  lt_sandbox_result_free(&r);
  /* A string doubled past the limit: killed by the memory cgroup (or refused by the address-space limit). */
  l.timeout_s = 20;
  lt_box_destroy(b);
  b = new_box(img, &l);
  r = lt_test_box_sh(b, "awk 'BEGIN { s = \"xxxxxxxxxxxxxxxx\"; while (1) s = s s }'; echo survived");
  cr_expect(r.exit_code != 0 || r.signal != 0 || strstr(r.out, "survived"), "exit %d", r.exit_code);
  lt_sandbox_caps_t c;
  lt_sandbox_probe(&c);
  if (c.cgroup) cr_expect(r.oom, "oom %d signal %d exit %d: %s", r.oom, r.signal, r.exit_code, r.err);
  lt_sandbox_result_free(&r);
  r = lt_test_box_sh(b, "echo ok");
  cr_expect_str_eq(r.out, "ok\n", "the box lives on after its command's OOM: %s", r.err);
  lt_sandbox_result_free(&r);
  lt_box_destroy(b);
  cr_expect_eq(lt_test_procs_matching("lt-box-bomb-780[3]"), 0, "fork bomb processes survived");
  lt_image_close(img);
}

/* One budget for every write of a box: the root and its /tmp share the writable layer's file_mb. */
Test(box_escape, the_root_and_tmp_share_one_write_budget) {
  need_box();
  lt_sandbox_limits_t l = limits(20);
  l.file_mb = 4;
  lt_sandbox_result_t r = run_sh(&l,
                                 "head -c 3000000 /dev/zero > /a; head -c 3000000 /dev/zero > /tmp/b; echo rc=$?; "
                                 "cat /a /tmp/b | wc -c");
  const char *rc = strstr(r.out, "rc=1\n");
  long total = rc ? atol(rc + 5) : -1;
  cr_expect(total > 3000000 && total <= 4 << 20, "%ld bytes written in a 4 MB layer: %s %s", total, r.out, r.err);
  lt_sandbox_result_free(&r);
}

/* ---- what an image brings ----------------------------------------------------------- */

/* The busybox image with a layer of hostile entries over it. */
static char *hostile_image(char **dir) {
  *dir = lt_test_tmpdir("box-hostile");
  static char host_file[128];
  snprintf(host_file, sizeof host_file, "/tmp/lt-box-hostfile-%d", (int)getpid());
  cr_assert_eq(lt_test_write(host_file, "HOST-ONLY\n"), 0);
  static const lt_test_entry_t evil[] = {
      {"opt", 'd', 0, NULL, 0},
      {"opt/suid", 'd', 0, NULL, 0},
      {"opt/suid/busybox", 'F', 04755, "/bin/busybox", 0}, /* named busybox: it takes its applet from argv[1] */
      {"dev", 'd', 0, NULL, 0},
      {"dev/evil-null", 'c', 0666, NULL, 0},
      {"evil-dev", 'c', 0666, NULL, 0},
      {"up", 'l', 0777, "../../../../../../../../tmp", 0},
      {"abs", 'l', 0777, "/tmp", 0},
      {"etc/hostfile", 'l', 0777, NULL, 0}, /* target set below: the host file's absolute path */
      {"up/lt-box-through-link", 'f', 0, "landed", 0},
  };
  lt_test_entry_t e[sizeof evil / sizeof evil[0]];
  memcpy(e, evil, sizeof e);
  e[8].data = host_file;
  lt_test_layer_t layers[] = {lt_test_busybox_layer(), {e, (int)(sizeof e / sizeof e[0]), "gzip"}};
  char layout[4200];
  snprintf(layout, sizeof layout, "%s/layout", *dir);
  cr_assert_eq(lt_test_oci_write(layout, "t", layers, 2, "{\"Env\":[\"PATH=/bin\"],\"User\":\"user\"}", NULL), 0);
  char *ref = malloc(4300);
  snprintf(ref, 4300, "oci:%s:t", layout);
  return ref;
}

Test(box_escape, image_setuid_devices_and_symlinks_out) {
  need_box();
  char *dir, *ref = hostile_image(&dir);
  char host_file[128], host_landed[128];
  snprintf(host_file, sizeof host_file, "/tmp/lt-box-hostfile-%d", (int)getpid());
  snprintf(host_landed, sizeof host_landed, "/tmp/lt-box-through-link");
  unlink(host_landed);
  lt_image_t *img = open_image(ref);
  cr_expect_eq(access(host_landed, F_OK), -1, "a layer wrote through a symlink onto the host");
  lt_sandbox_limits_t l = limits(10);
  lt_box_t *b = new_box(img, &l);
  lt_sandbox_result_t r = lt_test_box_sh(b,
                                         "id -u; stat -c %a /opt/suid/busybox; /opt/suid/busybox id -u; "
                                         "/opt/suid/busybox grep -E '^(Uid|CapEff):' /proc/self/status; "
                                         "ls /evil-dev /dev/evil-null 2>&1; cat /dev/evil-null 2>&1; "
                                         "cat /etc/hostfile 2>&1; ls /up/ /abs/; cat /up/lt-box-through-link; "
                                         "echo written > /up/lt-box-written; echo written > /abs/lt-box-written2");
  /* The setuid bit is kept (images need it), but gives nothing: nosuid, no_new_privs, one id mapped. */
  cr_expect(strstr(r.out, "1000\n4755\n1000\n"), "%s", r.out);
  cr_expect(strstr(r.out, "Uid:\t1000\t1000\t1000\t1000\n") && strstr(r.out, "CapEff:\t0000000000000000"), "%s", r.out);
  /* Device nodes are not made; the image's /dev is the box's own. */
  cr_expect(strstr(r.out, "/evil-dev: No such file") && strstr(r.out, "/dev/evil-null: No such file"), "%s", r.out);
  cr_expect(!strstr(r.out, "HOST-ONLY"), "an absolute symlink read the host: %s", r.out);
  cr_expect(strstr(r.out, "lt-box-through-link\nlanded"), "the layer's file through its symlink lands in the root: %s",
            r.out);
  lt_sandbox_result_free(&r);
  cr_expect_eq(access("/tmp/lt-box-written", F_OK), -1, "the box wrote the host's /tmp by a symlink");
  cr_expect_eq(access("/tmp/lt-box-written2", F_OK), -1);
  /* From the host side too, every path resolves inside the root. */
  char *s = NULL;
  size_t n;
  cr_expect_lt(lt_box_read_file(b, "/etc/hostfile", 1 << 20, &s, &n), 0, "read the host through a symlink");
  cr_expect_eq(lt_image_read_file(img, "/etc/hostfile", 1 << 20, &s, &n) < 0, 1);
  cr_assert_eq(lt_box_read_file(b, "/up/lt-box-written", 1 << 20, &s, &n), 0, "%s", lt_error_msg());
  cr_expect_str_eq(s, "written\n");
  free(s);
  cr_expect_eq(lt_box_write_file(b, "/up/lt-box-host-write", "x", 1, 0), 0, "%s", lt_error_msg());
  cr_expect_eq(lt_box_write_file(b, "/etc/hostfile", "overwritten", 11, 0), 0, "%s", lt_error_msg());
  cr_expect_eq(access("/tmp/lt-box-host-write", F_OK), -1, "a host-side write left the root");
  char *host = lt_test_read(host_file);
  cr_expect_str_eq(host ? host : "", "HOST-ONLY\n", "a host-side write through a symlink reached the host");
  free(host);
  r = lt_test_box_sh(b, "cat /tmp/lt-box-host-write");
  cr_expect_str_eq(r.out, "x", "%s", r.err);
  lt_sandbox_result_free(&r);
  lt_box_destroy(b);
  /* The cache is root's alone: a host user cannot reach the setuid copy (owned by the box's host id). */
  struct stat st;
  cr_expect_eq(stat(cache_dir, &st), 0);
  if (geteuid() == 0) cr_expect_eq(st.st_mode & 077, 0, "cache mode %o", st.st_mode & 0777);
  lt_image_close(img);
  unlink(host_file);
  free(ref);
  lt_test_rmdir(dir);
}

/* Writing, truncating, chmod-ing and removing the image's files in a box (its own busybox, in use) changes the box's
 * view only: the cache's files, shared by every box over the image, keep their bytes and modes. */
Test(box_escape, the_cached_image_is_never_written) {
  need_box();
  lt_image_t *img = open_image(lt_test_busybox_image());
  char p[4200];
  snprintf(p, sizeof p, "%s/bin/busybox", lt_image_rootfs(img));
  struct stat before, after;
  cr_assert_eq(stat(p, &before), 0);
  lt_sandbox_limits_t l = limits(10);
  lt_box_t *b = new_box(img, &l);
  lt_sandbox_result_t r = lt_test_box_sh(b,
                                         "chmod 777 /etc /etc/passwd; echo x > /etc/passwd; rm -rf /home; "
                                         "mkdir /tmp/b; cat /bin/busybox > /tmp/b/busybox; "
                                         "chmod 755 /tmp/b/busybox; export PATH=/tmp/b; "
                                         "exec /tmp/b/busybox sh -c 'busybox truncate -s 0 /bin/busybox; "
                                         "busybox chmod 4777 /bin/busybox; "
                                         "busybox ls -l /bin/busybox'");
  cr_expect(strstr(r.out, " 0 "), "the box's busybox is truncated in its view: %s %s", r.out, r.err);
  lt_sandbox_result_free(&r);
  lt_box_destroy(b);
  cr_assert_eq(stat(p, &after), 0);
  cr_expect_eq(after.st_size, before.st_size, "the cache's busybox changed size");
  cr_expect_eq(after.st_mode, before.st_mode, "the cache's busybox changed mode");
  char *s = NULL;
  size_t n;
  cr_expect_eq(lt_image_read_file(img, "/etc/passwd", 4096, &s, &n), 0);
  cr_expect(s && strstr(s, "root:x:0:0"), "%s", s);
  free(s);
  snprintf(p, sizeof p, "%s/home/user", lt_image_rootfs(img));
  cr_expect_eq(access(p, F_OK), 0, "a box's rm -rf reached the cache");
  lt_image_close(img);
}

/* ---- the command line ------------------------------------------------------------------ */

Test(box_escape, cli_image_run) {
  need_box();
  char *cache = lt_test_tmpdir("box-cli");
  lt_run_t r;
  lt_test_sh(&r, 60, "'%s' sandbox run --image '%s' --cache '%s' --timeout 5 -- sh -c 'id -u; pwd; echo $PATH; exit 3'",
             lt_test_bin(), lt_test_busybox_image(), cache);
  cr_expect_eq(r.status, 3, "%s %s", r.out, r.err);
  cr_expect_str_eq(r.out, "0\n/\n/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n", "%s", r.err);
  lt_run_free(&r);
  lt_test_sh(&r, 60, "'%s' sandbox run --json --image '%s' --cache '%s' --timeout 1 -- sh -c 'while :; do :; done'",
             lt_test_bin(), lt_test_busybox_image(), cache);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect(strstr(r.out, "\"timed_out\":true"), "%s", r.out);
  lt_run_free(&r);
  lt_test_sh(&r, 60, "'%s' sandbox run --image 'oci:/nonexistent/layout:x' --cache '%s' -- true", lt_test_bin(), cache);
  cr_expect_neq(r.status, 0);
  cr_expect(strstr(r.err, "oci:/nonexistent/layout:x"), "the error names the reference: %s", r.err);
  lt_run_free(&r);
  lt_test_rmdir(cache);
}
