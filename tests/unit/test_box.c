/* Boxes (sandbox/image.h): a fresh copy-on-write root over an image per episode, with the sandbox's limits; one-shot
 * commands, a persistent shell, host-side file access that stays in the root, the changes of the writable layer; the
 * escape suite again inside an image root, and the image's own ways out (setuid files, device nodes, symlinks out). */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/image.h"
#include "tests/support/box.h"
#include "tests/support/harness.h"
#include "tests/support/image.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/time.h"

typedef struct {
  char *dir, cache[4200];
  lt_image_t *img;
  lt_sandbox_limits_t lim;
} fix_t;

static void need_box(fix_t *f) {
  lt_sandbox_caps_t c;
  lt_sandbox_probe(&c);
  if (!c.userns) cr_skip_test("this host gives no user namespaces: boxes refuse to run (and say so)");
  const char *ref = lt_test_busybox_image();
  cr_assert(ref, "the busybox test image (Debian's busybox-static)");
  f->dir = lt_test_tmpdir("box");
  snprintf(f->cache, sizeof f->cache, "%s/cache", f->dir);
  cr_assert_eq(lt_image_open(f->cache, ref, &f->img), 0, "%s", lt_error_msg());
  lt_sandbox_limits_default(&f->lim);
  f->lim.timeout_s = 20;
}

static void fix_free(fix_t *f) {
  lt_image_close(f->img);
  lt_test_rmdir(f->dir);
}

static lt_box_t *box(fix_t *f) {
  lt_box_t *b = NULL;
  cr_assert_eq(lt_box_create(f->img, &f->lim, &b), 0, "%s", lt_error_msg());
  return b;
}

Test(box, runs_commands_in_the_image_root_with_its_config) {
  fix_t f;
  need_box(&f);
  lt_box_t *b = box(&f);
  lt_sandbox_result_t r =
      lt_test_box_sh(b, "echo hi; id -u; pwd; echo $HOME $PATH; ls /; cat /etc/passwd | head -1; ls /usr 2>&1; true");
  cr_expect_eq(r.exit_code, 0, "%s", r.err);
  cr_expect(strstr(r.out, "hi\n0\n/\n/root /usr/local/sbin"), "%s", r.out);
  cr_expect(strstr(r.out, "root:x:0:0:root:/root:/bin/sh"), "the image's /etc/passwd: %s", r.out);
  cr_expect(strstr(r.out, "No such file"), "the host's /usr is not there: %s", r.out);
  lt_sandbox_result_free(&r);
  lt_box_destroy(b);
  fix_free(&f);
}

Test(box, each_box_is_a_fresh_root_and_its_writes_are_bounded) {
  fix_t f;
  need_box(&f);
  f.lim.file_mb = 8;
  lt_box_t *a = box(&f), *b = box(&f);
  lt_sandbox_result_t r =
      lt_test_box_sh(a, "echo changed > /etc/passwd && mkdir -p /testbed && echo new > /testbed/x && rm /bin/ls");
  cr_expect_eq(r.exit_code, 0, "%s", r.err);
  lt_sandbox_result_free(&r);
  r = lt_test_box_sh(a, "cat /etc/passwd /testbed/x; ls /bin/ls 2>&1");
  cr_expect(strstr(r.out, "changed\nnew\n") && strstr(r.out, "No such file"), "a box keeps its own writes: %s", r.out);
  lt_sandbox_result_free(&r);
  r = lt_test_box_sh(b, "head -1 /etc/passwd; cat /testbed/x 2>&1; ls /bin/ls");
  cr_expect(strstr(r.out, "root:x:0:0") && strstr(r.out, "No such file") && strstr(r.out, "/bin/ls"),
            "another box sees none: %s", r.out);
  lt_sandbox_result_free(&r);
  /* The writable layer holds file_mb in all: past it, ENOSPC (or the file-size limit), and the box goes on. */
  r = lt_test_box_sh(a, "dd if=/dev/zero of=/tmp/big bs=1M count=20 2>&1; ls -l /tmp/big; echo still here");
  cr_expect(strstr(r.out, "still here"), "%s", r.out);
  lt_sandbox_result_free(&r);
  r = lt_test_box_sh(a, "wc -c < /tmp/big");
  cr_expect_leq(atol(r.out), 8L << 20, "a file past the layer's size: %s", r.out);
  lt_sandbox_result_free(&r);
  lt_box_destroy(a);
  lt_box_destroy(b);
  /* The image itself never changed. */
  char *s = NULL;
  size_t n;
  cr_expect_eq(lt_image_read_file(f.img, "/etc/passwd", 4096, &s, &n), 0);
  cr_expect(s && strstr(s, "root:x:0:0"), "%s", s);
  free(s);
  fix_free(&f);
}

/* Writes cmd to the shell, then a marker, and reads until the marker: what the command printed. */
static char *shell(lt_box_proc_t *p, const char *cmd, double timeout_s) {
  char line[4096];
  int n = snprintf(line, sizeof line, "%s\necho __END__$?\n", cmd);
  cr_assert_eq(write(lt_box_proc_stdin(p), line, (size_t)n), n);
  lt_buf_t b = {0};
  for (double end = lt_time_mono_s() + timeout_s; lt_time_mono_s() < end;) {
    struct pollfd pf = {.fd = lt_box_proc_stdout(p), .events = POLLIN};
    poll(&pf, 1, 100);
    char buf[4096];
    ssize_t k = read(lt_box_proc_stdout(p), buf, sizeof buf);
    if (k > 0) lt_buf_append(&b, buf, (size_t)k);
    if (b.data && strstr(b.data, "__END__")) break;
  }
  return lt_buf_take(&b);
}

Test(box, a_persistent_shell_keeps_its_directory_and_variables) {
  fix_t f;
  need_box(&f);
  lt_box_t *b = box(&f);
  const char *argv[] = {"sh", NULL};
  const char *env[] = {"GREETING=hello", NULL};
  lt_sandbox_job_t job = {.argv = argv, .env = env, .cwd = "/tmp"};
  lt_box_spawn_opts_t o = {.merge_stderr = 1};
  lt_box_proc_t *p = NULL;
  cr_assert_eq(lt_box_spawn(b, &job, &o, &p), 0, "%s", lt_error_msg());
  char *out = shell(p, "pwd; echo $GREETING; mkdir -p /w/sub && cd /w/sub && export X=42", 10);
  cr_expect(strstr(out, "/tmp\nhello\n__END__0"), "%s", out);
  free(out);
  out = shell(p, "pwd; echo X=$X; ls /nope", 10);
  cr_expect(strstr(out, "/w/sub\nX=42\n") && strstr(out, "No such file") && strstr(out, "__END__1"), "%s", out);
  free(out);
  /* A one-shot command meanwhile is its own process, and sees the shell's files. */
  lt_sandbox_result_t r = lt_test_box_sh(b, "ls -d /w/sub; pwd");
  cr_expect_str_eq(r.out, "/w/sub\n/\n");
  lt_sandbox_result_free(&r);
  /* A command that hangs is interrupted, the shell stays. */
  const char *hang = "sleep 7791\n";
  cr_assert_eq(write(lt_box_proc_stdin(p), hang, strlen(hang)), (ssize_t)strlen(hang));
  for (double t0 = lt_time_mono_s(); lt_test_procs_matching("sleep 779[1]") == 0 && lt_time_mono_s() - t0 < 10;)
    usleep(10000);
  cr_assert_eq(lt_box_proc_kill(p, SIGKILL, 1), 0, "%s", lt_error_msg());
  out = shell(p, "echo alive; pwd", 10);
  cr_expect(strstr(out, "alive\n/w/sub\n"), "%s", out);
  free(out);
  int st;
  cr_expect_eq(lt_box_proc_wait(p, 0, &st), LT_ETIMEDOUT);
  lt_box_proc_close_stdin(p);
  cr_expect_eq(lt_box_proc_wait(p, 10, &st), 0);
  cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%d", st);
  cr_expect_eq(lt_box_proc_kill(p, SIGKILL, 0), LT_ENOENT);
  lt_box_proc_free(p);
  /* A process never freed goes with its box. */
  cr_assert_eq(lt_box_spawn(b, &job, NULL, &p), 0, "%s", lt_error_msg());
  lt_box_destroy(b);
  fix_free(&f);
}

Test(box, the_deadline_kills_a_commands_group_and_the_box_lives_on) {
  fix_t f;
  need_box(&f);
  lt_box_t *b = box(&f);
  const char *argv[] = {"sh", "-c", "sleep 7781 & while :; do :; done", NULL};
  lt_sandbox_job_t job = {.argv = argv, .timeout_s = 0.5};
  lt_sandbox_result_t r;
  double t0 = lt_time_mono_s();
  cr_assert_eq(lt_box_exec(b, &job, &r), 0, "%s", lt_error_msg());
  cr_expect(r.timed_out && r.signal == 9, "timed_out %d signal %d", r.timed_out, r.signal);
  cr_expect_lt(lt_time_mono_s() - t0, 3);
  lt_sandbox_result_free(&r);
  cr_expect_eq(lt_test_procs_matching("sleep 778[1]"), 0, "the command's group died at the deadline");
  /* What a command leaves in its group dies at its end; a setsid child lives until the box ends. */
  r = lt_test_box_sh(b, "sleep 7782 & setsid sleep 7783 & sleep 0.3; echo started");
  cr_expect_str_eq(r.out, "started\n");
  lt_sandbox_result_free(&r);
  usleep(200000);
  cr_expect_eq(lt_test_procs_matching("sleep 778[2]"), 0);
  cr_expect_eq(lt_test_procs_matching("sleep 778[3]"), 1);
  r = lt_test_box_sh(b, "echo next");
  cr_expect_str_eq(r.out, "next\n");
  lt_sandbox_result_free(&r);
  lt_box_destroy(b);
  for (double t1 = lt_time_mono_s(); lt_test_procs_matching("sleep 778[3]") && lt_time_mono_s() - t1 < 5;)
    usleep(10000);
  cr_expect_eq(lt_test_procs_matching("sleep 778[3]"), 0, "a box's processes end with it");
  fix_free(&f);
}

Test(box, host_side_files_stay_in_the_root) {
  fix_t f;
  need_box(&f);
  f.lim.file_mb = 4;
  lt_box_t *b = box(&f);
  cr_assert_eq(lt_box_write_file(b, "/testbed/pkg/mod.py", "x = 1\n", 6, 0), 0, "%s", lt_error_msg());
  lt_sandbox_result_t r = lt_test_box_sh(b,
                                         "cat /testbed/pkg/mod.py; stat -c '%u %a' /testbed/pkg/mod.py /testbed/pkg; "
                                         "ln -s /etc/hostname /hn; ln -s ../../../../../../../tmp/lt-box-escape /out; "
                                         "mkdir -p /d && ln -s / /d/root");
  cr_expect_str_eq(r.out, "x = 1\n0 644\n0 755\n", "written as the box's user: %s %s", r.out, r.err);
  lt_sandbox_result_free(&r);
  char *s = NULL;
  size_t n;
  cr_expect_eq(lt_box_read_file(b, "/testbed/pkg/mod.py", 100, &s, &n), 0);
  cr_expect_str_eq(s ? s : "", "x = 1\n");
  free(s);
  cr_expect_eq(lt_box_read_file(b, "/testbed/pkg/mod.py", 3, &s, &n), LT_ERANGE, "bounded");
  /* Symlinks resolve in the box's root: the host's /etc/hostname is not the box's (it has none). */
  cr_expect_eq(lt_box_read_file(b, "/hn", 1 << 20, &s, &n), LT_ENOENT);
  cr_expect_eq(lt_box_read_file(b, "/d/root/../../../etc/passwd", 1 << 20, &s, &n), 0);
  cr_expect(s && strstr(s, "user:x:1000"), "the image's passwd: %s", s);
  free(s);
  cr_expect_eq(lt_box_write_file(b, "/out", "escaped", 7, 0), 0, "%s", lt_error_msg());
  cr_expect_eq(access("/tmp/lt-box-escape", F_OK), -1, "a write through a symlink left the root");
  r = lt_test_box_sh(b, "cat /tmp/lt-box-escape");
  cr_expect_str_eq(r.out, "escaped", "it landed in the box's own /tmp");
  lt_sandbox_result_free(&r);
  /* The box's mounts are not the root's files: /proc and /dev are out of reach from the host side. */
  cr_expect_lt(lt_box_read_file(b, "/proc/self/status", 1 << 20, &s, &n), 0);
  cr_expect_lt(lt_box_read_file(b, "/proc/1/environ", 1 << 20, &s, &n), 0);
  cr_expect_lt(lt_box_write_file(b, "/proc/sys/kernel/hostname", "x", 1, 0), 0);
  cr_expect_lt(lt_box_write_file(b, "/dev/null", "x", 1, 0), 0);
  cr_expect_eq(lt_box_read_file(b, "/testbed", 100, &s, &n), LT_EINVAL, "a directory is not a file");
  /* The writable layer's size holds for host-side writes too. */
  char *big = calloc(1, 6 << 20);
  cr_expect_eq(lt_box_write_file(b, "/big", big, 6 << 20, 0), LT_ENOSPC);
  cr_expect_eq(lt_box_write_file(b, "/testbed/pkg/mod.py", big, 6 << 20, 0), LT_ENOSPC);
  free(big);
  cr_expect_eq(lt_box_read_file(b, "/testbed/pkg/mod.py", 100, &s, &n), 0);
  cr_expect_str_eq(s ? s : "", "x = 1\n", "a failed write leaves the old content");
  free(s);
  r = lt_test_box_sh(b, "ls -a /testbed/pkg /big 2>&1");
  cr_expect_str_eq(r.out, "ls: /big: No such file or directory\n/testbed/pkg:\n.\n..\nmod.py\n",
                   "nothing half-written: %s", r.out);
  lt_sandbox_result_free(&r);
  cr_expect_eq(lt_box_write_file(b, "/testbed/run.sh", "#!/bin/sh\necho ran\n", 19, 0755), 0);
  r = lt_test_box_sh(b, "/testbed/run.sh");
  cr_expect_str_eq(r.out, "ran\n");
  lt_sandbox_result_free(&r);
  lt_box_destroy(b);
  fix_free(&f);
}

static char *changes_text(lt_box_t *b, const char *dir) {
  lt_box_change_t *c;
  int n;
  cr_assert_eq(lt_box_changes(b, dir, &c, &n), 0, "%s", lt_error_msg());
  lt_buf_t t = {0};
  for (int i = 0; i < n; i++) lt_buf_printf(&t, "%c %s %o %o\n", c[i].kind, c[i].path, c[i].old_mode, c[i].new_mode);
  lt_box_changes_free(c, n);
  char *s = lt_buf_take(&t);
  return s ? s : strdup("");
}

Test(box, changes_of_the_writable_layer) {
  fix_t f;
  need_box(&f);
  lt_box_t *b = box(&f);
  lt_sandbox_result_t r =
      lt_test_box_sh(b,
                     "echo 'root:x:0:0:root:/root:/bin/ash' > /etc/passwd; " /* modified */
                     "touch /etc/group; " /* copied up, content unchanged: not a change */
                     "mkdir -p /new/deep && echo hi > /new/deep/f && ln -s f /new/deep/l; " /* added, a symlink too */
                     "rm /bin/ls /bin/cat; "                             /* deleted (symlinks of the image) */
                     "chmod 600 /etc/passwd; chmod 700 /bin/busybox; "   /* mode changes */
                     "echo tmp > /tmp/t && rm /tmp/t; "                  /* made and removed: nothing */
                     "rm -rf /home; mkdir /home; echo again > /home/x; " /* a directory replaced: opaque */
                     "ln -sf sh /bin/ash");                              /* a symlink retargeted: modified */
  cr_expect_eq(r.exit_code, 0, "%s", r.err);
  lt_sandbox_result_free(&r);
  char *all = changes_text(b, "/");
  cr_expect_str_eq(all,
                   "M /bin/ash 120777 120777\n"
                   "M /bin/busybox 100755 100700\n"
                   "D /bin/cat 120777 0\n"
                   "D /bin/ls 120777 0\n"
                   "M /etc/passwd 100644 100600\n"
                   "A /home/x 0 100644\n"
                   "A /new/deep/f 0 100644\n"
                   "A /new/deep/l 0 120777\n",
                   "%s", all);
  free(all);
  char *bin = changes_text(b, "/bin/");
  cr_expect_str_eq(bin,
                   "M /bin/ash 120777 120777\nM /bin/busybox 100755 100700\nD /bin/cat 120777 0\nD /bin/ls 120777 0\n",
                   "%s", bin);
  free(bin);
  char *none = changes_text(b, "/bi");
  cr_expect_str_eq(none, "", "a prefix is not a directory: %s", none);
  free(none);
  /* A file in an image directory removed with its directory. */
  r = lt_test_box_sh(b, "rm -rf /etc");
  lt_sandbox_result_free(&r);
  char *etc = changes_text(b, "/etc");
  cr_expect_str_eq(etc, "D /etc/group 100644 0\nD /etc/passwd 100644 0\n", "%s", etc);
  free(etc);
  lt_box_destroy(b);
  fix_free(&f);
}

Test(box, the_working_directory_is_made_and_files_land_in_it) {
  fix_t f;
  need_box(&f);
  lt_box_t *b = box(&f);
  const char *argv[] = {"sh", "-c", "pwd; cat sub/in.txt; ls -l sub/in.txt | cut -c1-10", NULL};
  lt_sandbox_file_t files[] = {{"sub/in.txt", "given\n", 6, 0600}};
  lt_sandbox_job_t job = {.argv = argv, .cwd = "/testbed/repo", .files = files, .nfiles = 1};
  lt_sandbox_result_t r;
  cr_assert_eq(lt_box_exec(b, &job, &r), 0, "%s", lt_error_msg());
  cr_expect_str_eq(r.out, "/testbed/repo\ngiven\n-rw-------\n", "%s", r.err);
  lt_sandbox_result_free(&r);
  lt_sandbox_file_t bad[] = {{"../escape", "x", 1, 0}};
  job.files = bad;
  cr_expect_eq(lt_box_exec(b, &job, &r), LT_EINVAL, "a file path with '..' is refused");
  lt_box_destroy(b);
  fix_free(&f);
}

Test(box, a_pool_hands_out_fresh_warm_boxes) {
  fix_t f;
  need_box(&f);
  lt_box_pool_t *p;
  cr_assert_eq(lt_box_pool_create(f.img, &f.lim, 2, &p), 0, "%s", lt_error_msg());
  for (int i = 0; i < 3; i++) {
    lt_box_t *b;
    if (i == 0) usleep(500000); /* let the pool fill once: the first boxes are warm ones */
    cr_assert_eq(lt_box_pool_take(p, &b), 0, "%s", lt_error_msg());
    lt_sandbox_result_t r = lt_test_box_sh(b, "cat /tmp/mark 2>/dev/null || echo fresh; echo used > /tmp/mark");
    cr_expect_str_eq(r.out, "fresh\n", "box %d saw an earlier episode's write", i);
    lt_sandbox_result_free(&r);
    lt_box_destroy(b);
  }
  lt_box_pool_free(p);
  fix_free(&f);
}

/* limits.port in a box: that host port answers at the same address, another host port does not, and the relay's
 * socket is no change of the episode's. */
Test(box, a_port_reaches_only_its_host_port) {
  fix_t f;
  need_box(&f);
  int port, other_port;
  int l = lt_test_listen_loopback(&port), other = lt_test_listen_loopback(&other_port);
  cr_assert(l >= 0 && other >= 0);
  f.lim.port = port;
  lt_box_t *b = box(&f);
  char script[256];
  snprintf(script, sizeof script,
           "echo ping | nc -w 2 127.0.0.1 %d; echo rc=$?; echo x | nc -w 1 127.0.0.1 %d; echo rc=$?", port, other_port);
  const char *argv[] = {"sh", "-c", script, NULL};
  lt_sandbox_job_t job = {.argv = argv};
  lt_sandbox_result_t r;
  pid_t pid = fork();
  if (pid == 0) { /* the host side: answer one connection */
    int c = accept(l, NULL, NULL);
    char buf[16] = {0};
    if (c >= 0 && read(c, buf, 5) > 0 && write(c, "pong\n", 5) == 5) close(c);
    _exit(0);
  }
  cr_assert_eq(lt_box_exec(b, &job, &r), 0, "%s", lt_error_msg());
  waitpid(pid, NULL, 0);
  cr_expect(strstr(r.out, "pong\nrc=0\n") && strstr(r.out, "rc=1"), "%s %s", r.out, r.err);
  lt_sandbox_result_free(&r);
  lt_box_change_t *c;
  int n;
  cr_assert_eq(lt_box_changes(b, "/", &c, &n), 0);
  cr_expect_eq(n, 0, "changes: %d, first %s", n, n ? c[0].path : "");
  lt_box_changes_free(c, n);
  lt_box_destroy(b);
  close(l);
  close(other);
  fix_free(&f);
}

/* A box's processes are forked by the jail maker, not copied from the process asking: a worker holding a model
 * (here 192 MB touched) does not hand its pages and page tables to every root's init. */
Test(box, a_box_is_not_a_copy_of_a_large_asker) {
  fix_t f;
  need_box(&f);
  size_t big = 192u << 20;
  char *heap = malloc(big);
  cr_assert(heap);
  for (size_t i = 0; i < big; i += 4096) heap[i] = 1;
  lt_box_t *b = box(&f);
  lt_sandbox_result_t r = lt_test_box_sh(b, "grep VmRSS /proc/1/status");
  long kb = 0;
  cr_assert(sscanf(r.out, "VmRSS: %ld", &kb) == 1, "%s", r.out);
  cr_expect_lt(kb, 48 << 10, "the box's init holds %ld kB: a copy of this process's 192 MB", kb);
  lt_sandbox_result_free(&r);
  lt_box_destroy(b);
  free(heap);
  fix_free(&f);
}
