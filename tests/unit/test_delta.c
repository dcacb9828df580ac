/* util/delta: a version rebuilt bit for bit from the one before and its delta; anything else refused. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "learner/safetensors.h"
#include "tests/support/harness.h"
#include "util/delta.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/sha256.h"

static void write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  cr_assert(f);
  cr_assert_eq(fwrite(data, 1, n, f), n);
  fclose(f);
}

static int same_file(const char *a, const char *b) {
  char x[65], y[65];
  return lt_sha256_file(a, x) == 0 && lt_sha256_file(b, y) == 0 && !strcmp(x, y);
}

/* Two bf16 versions of a 1M-weight tensor, the second after a small update of every 50th weight. */
static void two_versions(const char *dir, char *a, char *b, size_t cap) {
  int n = 1 << 20;
  float *w = malloc((size_t)n * sizeof *w);
  for (int i = 0; i < n; i++) w[i] = sinf((float)i) * 0.02f;
  lt_st_tensor_t t = {.name = "model.w", .ndim = 2, .shape = {1024, 1024}, .data = w};
  snprintf(a, cap, "%s/a.safetensors", dir);
  snprintf(b, cap, "%s/b.safetensors", dir);
  cr_assert_eq(lt_st_write_as(a, &t, 1, NULL, LT_ST_BF16), 0, "%s", lt_error_msg());
  for (int i = 0; i < n; i += 50) w[i] += 1e-3f;
  cr_assert_eq(lt_st_write_as(b, &t, 1, NULL, LT_ST_BF16), 0, "%s", lt_error_msg());
  free(w);
}

Test(delta, rebuilds_the_next_version_bit_for_bit_and_is_small) {
  char *dir = lt_test_tmpdir("delta");
  char a[512], b[512], d[512], out[512];
  two_versions(dir, a, b, sizeof a);
  snprintf(d, sizeof d, "%s/b.delta.zst", dir);
  snprintf(out, sizeof out, "%s/b.rebuilt", dir);
  lt_delta_info_t info;
  cr_assert_eq(lt_delta_create(a, b, d, &info), 0, "%s", lt_error_msg());
  char sa[65], sb[65];
  lt_sha256_file(a, sa);
  lt_sha256_file(b, sb);
  cr_expect_str_eq(info.base_sha, sa);
  cr_expect_str_eq(info.target_sha, sb);
  lt_delta_info_t again;
  cr_assert_eq(lt_delta_info(d, &again), 0);
  cr_expect_str_eq(again.target_sha, sb);
  struct stat sd, sf;
  stat(d, &sd);
  stat(b, &sf);
  cr_expect_lt(sd.st_size, sf.st_size / 5, "a 2%% change: %lld of %lld bytes", (long long)sd.st_size,
               (long long)sf.st_size);
  cr_assert_eq(lt_delta_apply(a, d, out), 0, "%s", lt_error_msg());
  cr_expect(same_file(out, b), "the rebuilt file is the target");
  lt_test_rmdir(dir);
}

Test(delta, refuses_another_base_a_torn_or_altered_delta_and_leaves_nothing) {
  char *dir = lt_test_tmpdir("delta-bad");
  char a[512], b[512], d[512], out[512], bad[512];
  two_versions(dir, a, b, sizeof a);
  snprintf(d, sizeof d, "%s/b.delta.zst", dir);
  snprintf(out, sizeof out, "%s/b.rebuilt", dir);
  snprintf(bad, sizeof bad, "%s/bad.zst", dir);
  cr_assert_eq(lt_delta_create(a, b, d, NULL), 0, "%s", lt_error_msg());
  /* Against another base (the target itself). */
  cr_expect_eq(lt_delta_apply(b, d, out), LT_ECORRUPT);
  cr_expect(strstr(lt_error_msg(), "reconstructed sha256") && strstr(lt_error_msg(), "a delta against sha256"), "%s",
            lt_error_msg());
  cr_expect(!lt_fs_exists(out), "no output from a refused delta");
  char *buf;
  size_t len;
  cr_assert_eq(lt_fs_read_file(d, 1 << 26, &buf, &len), 0);
  /* Torn: the last third missing. */
  write_file(bad, buf, len * 2 / 3);
  cr_expect_eq(lt_delta_apply(a, bad, out), LT_ECORRUPT, "%s", lt_error_msg());
  cr_expect(!lt_fs_exists(out));
  /* One byte of the compressed stream altered. */
  buf[len / 2] ^= 0x5a;
  write_file(bad, buf, len);
  cr_expect_eq(lt_delta_apply(a, bad, out), LT_ECORRUPT, "%s", lt_error_msg());
  cr_expect(!lt_fs_exists(out));
  buf[len / 2] ^= 0x5a;
  /* The announced result's hash altered: the rebuilt file does not match it. */
  buf[40] ^= 1;
  write_file(bad, buf, len);
  cr_expect_eq(lt_delta_apply(a, bad, out), LT_ECORRUPT);
  cr_expect(strstr(lt_error_msg(), "reconstructed sha256"), "%s", lt_error_msg());
  cr_expect(!lt_fs_exists(out));
  /* Not a delta at all. */
  write_file(bad, "hello", 5);
  cr_expect_eq(lt_delta_apply(a, bad, out), LT_ECORRUPT);
  cr_expect(strstr(lt_error_msg(), "not a longtail weight delta"), "%s", lt_error_msg());
  free(buf);
  lt_test_rmdir(dir);
}

Test(delta, bases_of_another_size_still_rebuild) {
  char *dir = lt_test_tmpdir("delta-size");
  char a[512], b[512], d[512], out[512];
  snprintf(a, sizeof a, "%s/a", dir);
  snprintf(b, sizeof b, "%s/b", dir);
  snprintf(d, sizeof d, "%s/d", dir);
  snprintf(out, sizeof out, "%s/o", dir);
  char x[3000], y[5000];
  for (size_t i = 0; i < sizeof x; i++) x[i] = (char)(i * 7);
  for (size_t i = 0; i < sizeof y; i++) y[i] = (char)(i * 5);
  write_file(a, x, sizeof x);
  write_file(b, y, sizeof y);
  cr_assert_eq(lt_delta_create(a, b, d, NULL), 0);
  cr_assert_eq(lt_delta_apply(a, d, out), 0, "%s", lt_error_msg());
  cr_expect(same_file(out, b));
  cr_assert_eq(lt_delta_create(b, a, d, NULL), 0); /* shorter target */
  cr_assert_eq(lt_delta_apply(b, d, out), 0, "%s", lt_error_msg());
  cr_expect(same_file(out, a));
  lt_test_rmdir(dir);
}
