/* Each host's image cache filling from one place (docs/swe.md, "Scale and distribution"): an OCI layout and an
 * OCI archive served over HTTP by Python's http.server give the entry the local layout gives; a blob changed on the
 * server is refused naming the layer, and nothing of it is kept. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/image.h"
#include "tests/support/harness.h"
#include "tests/support/image.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/time.h"

static pid_t server;

/* python3 -m http.server over dir on a free port, answering; the port. */
static int serve(const char *dir, const char *logdir) {
  int port = lt_test_free_port();
  char p[16];
  snprintf(p, sizeof p, "%d", port);
  const char *argv[] = {"python3", "-m", "http.server", p, "--bind", "127.0.0.1", "--directory", dir, NULL};
  server = lt_test_spawn(logdir, "http", argv);
  for (double t0 = lt_time_mono_s(); lt_time_mono_s() - t0 < 20; usleep(50000)) {
    char *r = lt_test_http(port, "GET", "/", NULL);
    if (r) {
      free(r);
      return port;
    }
  }
  cr_assert_fail("python3 -m http.server did not answer");
  return -1;
}

static void stop(void) {
  if (server > 0) kill(server, SIGKILL), waitpid(server, NULL, 0);
  server = 0;
}

TestSuite(image_remote, .fini = stop);

static lt_image_t *open_ok(const char *cache, const char *ref) {
  lt_image_t *img = NULL;
  cr_assert_eq(lt_image_open(cache, ref, &img), 0, "%s: %s", ref, lt_error_msg());
  return img;
}

Test(image_remote, layout_and_archive_over_http_fill_the_cache) {
  lt_run_t r;
  lt_test_sh(&r, 10, "command -v python3");
  int have = r.status == 0;
  lt_run_free(&r);
  if (!have) cr_skip_test("python3 is not installed (its http.server serves the images)");
  const char *local = lt_test_busybox_image();
  if (!local) cr_skip_test("no static busybox here (Debian's busybox-static) for the test image");
  char *dir = lt_test_tmpdir("img-remote"), served[4200], ref[4400], c1[4200], c2[4200], c3[4200], path[4400];
  snprintf(served, sizeof served, "%s/www", dir);
  /* The layout and an archive of it, served from one directory (a copy: the shared test image stays intact). */
  char layout[4200];
  snprintf(layout, sizeof layout, "%s", local + 4);
  *strrchr(layout, ':') = 0;
  lt_test_sh(&r, 30, "mkdir -p '%s' && cp -r '%s' '%s/py' && tar -C '%s/py' -cf '%s/py.tar' .", served, layout, served,
             served, served);
  cr_assert_eq(r.status, 0, "%s", r.err);
  lt_run_free(&r);
  int port = serve(served, dir);
  snprintf(c1, sizeof c1, "%s/host-a", dir);
  snprintf(c2, sizeof c2, "%s/host-b", dir);
  snprintf(c3, sizeof c3, "%s/host-c", dir);
  lt_image_t *want = open_ok(c1, local);
  snprintf(ref, sizeof ref, "oci:http://127.0.0.1:%d/py:latest", port);
  lt_image_t *a = open_ok(c2, ref);
  cr_expect_str_eq(lt_image_config(a)->digest, lt_image_config(want)->digest);
  lt_test_sh(&r, 30, "diff -r --no-dereference '%s' '%s' && echo same", lt_image_rootfs(want), lt_image_rootfs(a));
  cr_expect_str_eq(r.out, "same\n", "%s %s", r.out, r.err);
  lt_run_free(&r);
  cr_expect_str_eq(lt_image_config(a)->env[0], lt_image_config(want)->env[0]);
  snprintf(ref, sizeof ref, "oci-archive:http://127.0.0.1:%d/py.tar:latest", port);
  lt_image_t *b = open_ok(c3, ref);
  cr_expect_str_eq(lt_image_rootfs(b) + strlen(c3), lt_image_rootfs(a) + strlen(c2), "the same entry, its own cache");
  lt_image_close(b);
  lt_image_close(a);
  /* Nothing downloaded is left beside the entries. */
  snprintf(path, sizeof path, "%s/tmp", c2);
  lt_test_sh(&r, 10, "find '%s' -mindepth 1", path);
  cr_expect_str_eq(r.out, "", "%s", r.out);
  lt_run_free(&r);
  /* A layer changed on the server: refused, naming the reference and the layer; no entry is made. */
  lt_test_sh(&r, 10,
             "cd '%s/py/blobs/sha256' && for f in *; do s=$(stat -c %%s $f); [ $s -gt 100000 ] && "
             "printf 'X' | dd of=$f bs=1 seek=5000 conv=notrunc 2>/dev/null && echo $f; done",
             served);
  cr_assert(r.out && strlen(r.out) >= 64, "no layer blob found: %s", r.err);
  char layer[80];
  snprintf(layer, sizeof layer, "sha256:%.64s", r.out);
  lt_run_free(&r);
  snprintf(c2, sizeof c2, "%s/host-d", dir);
  snprintf(ref, sizeof ref, "oci:http://127.0.0.1:%d/py:latest", port);
  lt_image_t *bad = NULL;
  cr_expect_lt(lt_image_open(c2, ref, &bad), 0);
  cr_expect(strstr(lt_error_msg(), ref) && strstr(lt_error_msg(), layer), "%s", lt_error_msg());
  snprintf(path, sizeof path, "%s/images", c2);
  lt_test_sh(&r, 10, "find '%s' '%s/tmp' -mindepth 1 2>/dev/null", path, c2);
  cr_expect_str_eq(r.out ? r.out : "", "", "%s", r.out);
  lt_run_free(&r);
  /* Nothing listening: the reference is named. */
  stop();
  cr_expect_lt(lt_image_open(c2, ref, &bad), 0);
  cr_expect(strstr(lt_error_msg(), ref), "%s", lt_error_msg());
  lt_image_close(want);
  lt_test_rmdir(dir);
}
