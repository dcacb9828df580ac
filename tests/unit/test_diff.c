/* Unified diffs (text/diff.h) against their real counterparts: what lt_diff_file writes, GNU patch and git apply
 * apply to the same result and GNU diff --minimal finds no shorter; what GNU diff and git diff write, lt_patch
 * applies; where the context is not there, lt_patch refuses as patch --fuzz=0 does. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/support/harness.h"
#include "text/diff.h"
#include "util/error.h"
#include "util/rng.h"

/* A shell command's exit status (its output in *rr). */
#define SH(rr, ...) (lt_test_sh((rr), 10, __VA_ARGS__) == 0 ? (rr)->status : -1)

/* A random text over a few distinct lines (so that versions share lines), with or without its last newline. */
static char *random_text(lt_rng_t *r, int maxlines) {
  static const char *const words[] = {"alpha", "beta", "gamma", "delta", "", "    return x;", "}", "if (a) {"};
  int n = (int)lt_rng_below(r, (uint64_t)maxlines + 1);
  lt_buf_t b = {0};
  for (int i = 0; i < n; i++) lt_buf_printf(&b, "%s\n", words[lt_rng_below(r, 8)]);
  if (b.len && lt_rng_below(r, 4) == 0) b.data[--b.len] = 0; /* no newline at the end */
  lt_buf_putc(&b, 0);
  b.len--;
  return lt_buf_take(&b);
}

/* new from old by a few random line edits. */
static char *mutate(lt_rng_t *r, const char *old) {
  lt_buf_t b = {0};
  for (const char *p = old; *p;) {
    const char *nl = strchr(p, '\n');
    size_t n = nl ? (size_t)(nl - p) + 1 : strlen(p);
    uint64_t x = lt_rng_below(r, 10);
    if (x == 0) lt_buf_puts(&b, "inserted line\n");
    if (x != 1) lt_buf_append(&b, p, x == 2 ? (n > 1 ? n - 1 : n) : n); /* 1: deleted; 2: cut short */
    if (x == 2 && n > 1) lt_buf_puts(&b, "!\n");
    p += n;
  }
  if (lt_rng_below(r, 3) == 0) lt_buf_puts(&b, "tail");
  lt_buf_putc(&b, 0);
  return lt_buf_take(&b);
}

static int count_changes(const char *diff, int *del, int *ins) {
  *del = *ins = 0;
  int in_hunk = 0;
  for (const char *p = diff; p && *p;) {
    if (!strncmp(p, "@@", 2)) in_hunk = 1;
    else if (in_hunk && *p == '-') ++*del;
    else if (in_hunk && *p == '+') ++*ins;
    const char *nl = strchr(p, '\n');
    p = nl ? nl + 1 : NULL;
  }
  return *del + *ins;
}

static char *apply_mine(const char *diff, const char *old) {
  lt_patch_t *p;
  cr_assert_eq(lt_patch_parse(diff, strlen(diff), &p), 0, "%s\n%s", lt_error_msg(), diff);
  cr_assert_eq(lt_patch_nfiles(p), 1);
  lt_buf_t out = {0};
  int rc = lt_patch_apply(p, 0, old, old ? strlen(old) : 0, &out);
  lt_patch_free(p);
  if (rc < 0) {
    lt_buf_free(&out);
    return NULL;
  }
  lt_buf_putc(&out, 0);
  return lt_buf_take(&out);
}

Test(diff, random_edits_agree_with_gnu_patch_git_apply_and_gnu_diff) {
  char *dir = lt_test_tmpdir("diff"), path[512];
  lt_rng_t r;
  lt_rng_seed(&r, 42);
  for (int t = 0; t < 16; t++) {
    char *a = random_text(&r, t % 2 ? 60 : 12), *b = t % 7 == 3 ? strdup(a) : mutate(&r, a);
    lt_buf_t d = {0};
    cr_assert_eq(lt_diff_file(&d, "src/f.txt", a, strlen(a), 0644, b, strlen(b), 0644, 3), 0);
    lt_buf_putc(&d, 0);
    if (!strcmp(a, b)) {
      cr_expect_eq(d.len, 1, "equal versions give no diff");
    } else {
      /* ours applied by GNU patch and by git apply */
      snprintf(path, sizeof path, "%s/w/src/f.txt", dir);
      lt_run_t rr;
      cr_assert_eq(SH(&rr, "rm -rf %s/w %s/g && mkdir -p %s/w/src %s/g/src", dir, dir, dir, dir), 0);
      lt_run_free(&rr);
      cr_assert_eq(lt_test_write(path, a), 0);
      snprintf(path, sizeof path, "%s/g/src/f.txt", dir);
      cr_assert_eq(lt_test_write(path, a), 0);
      snprintf(path, sizeof path, "%s/d.patch", dir);
      cr_assert_eq(lt_test_write(path, d.data), 0);
      cr_assert_eq(SH(&rr, "cd %s/w && patch -p1 -s --fuzz=0 < ../d.patch", dir), 0, "%s%s\n%s", rr.out, rr.err,
                   d.data);
      lt_run_free(&rr);
      cr_assert_eq(SH(&rr, "cd %s/g && git apply --unsafe-paths ../d.patch", dir), 0, "%s\n%s", rr.err, d.data);
      lt_run_free(&rr);
      snprintf(path, sizeof path, "%s/w/src/f.txt", dir);
      char *pw = lt_test_read(path);
      snprintf(path, sizeof path, "%s/g/src/f.txt", dir);
      char *gw = lt_test_read(path);
      cr_expect_str_eq(pw, b, "patch:\n%s", d.data);
      cr_expect_str_eq(gw, b, "git apply:\n%s", d.data);
      free(pw), free(gw);
      /* minimal: GNU diff --minimal finds no shorter edit */
      snprintf(path, sizeof path, "%s/a/src/f.txt", dir);
      SH(&rr, "rm -rf %s/a %s/b && mkdir -p %s/a/src %s/b/src", dir, dir, dir, dir), lt_run_free(&rr);
      lt_test_write(path, a);
      snprintf(path, sizeof path, "%s/b/src/f.txt", dir);
      lt_test_write(path, b);
      SH(&rr, "cd %s && diff --minimal -u a/src/f.txt b/src/f.txt", dir);
      int gd, gi, md, mi;
      count_changes(rr.out, &gd, &gi);
      count_changes(d.data, &md, &mi);
      cr_expect_eq(md + mi, gd + gi, "ours %d+%d lines, GNU diff --minimal %d+%d:\n%s\n%s", md, mi, gd, gi, d.data,
                   rr.out);
      /* GNU diff's and git diff's output applied by ours */
      char *mine = apply_mine(rr.out, a);
      cr_expect_str_eq(mine ? mine : "(refused)", b, "%s\n%s", lt_error_msg(), rr.out);
      free(mine);
      lt_run_free(&rr);
      SH(&rr, "cd %s && git diff --no-index a/src/f.txt b/src/f.txt", dir);
      mine = apply_mine(rr.out, a);
      cr_expect_str_eq(mine ? mine : "(refused)", b, "%s\n%s", lt_error_msg(), rr.out);
      free(mine);
      lt_run_free(&rr);
      /* and ours by ours */
      mine = apply_mine(d.data, a);
      cr_expect_str_eq(mine ? mine : "(refused)", b, "%s\n%s", lt_error_msg(), d.data);
      free(mine);
    }
    lt_buf_free(&d);
    free(a), free(b);
  }
  lt_test_rmdir(dir);
}

/* Creation, deletion, a mode change and a name git must quote, all in one patch that git apply takes whole. */
Test(diff, new_deleted_mode_and_quoted_files_apply_with_git) {
  char *dir = lt_test_tmpdir("diff_files"), path[512];
  lt_buf_t d = {0};
  cr_assert_eq(lt_diff_file(&d, "pkg/new.py", NULL, 0, 0, "print(1)\n", 9, 0755, 3), 0);
  cr_assert_eq(lt_diff_file(&d, "old.txt", "bye\nnow", 7, 0644, NULL, 0, 0, 3), 0);
  cr_assert_eq(lt_diff_file(&d, "run.sh", "echo\n", 5, 0644, "echo\n", 5, 0755, 3), 0);
  cr_assert_eq(lt_diff_file(&d, "dir with space/\xc3\xa9t\xc3\xa9.txt", "a\n", 2, 0644, "b\n", 2, 0644, 3), 0);
  cr_assert_eq(lt_diff_file(&d, "empty", NULL, 0, 0, "", 0, 0, 3), 0);
  lt_buf_putc(&d, 0);
  cr_expect(strstr(d.data, "new file mode 100755\n--- /dev/null\n+++ b/pkg/new.py\n@@ -0,0 +1 @@\n+print(1)\n"), "%s",
            d.data);
  cr_expect(strstr(
      d.data, "deleted file mode 100644\n--- a/old.txt\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-bye\n-now\n\\ No newline"));
  cr_expect(strstr(d.data, "old mode 100644\nnew mode 100755\n"));
  lt_run_t rr;
  cr_assert_eq(SH(&rr,
                  "cd %s && mkdir -p 'dir with space' && printf 'bye\\nnow' > old.txt && echo > run.sh && "
                  "printf 'a\\n' > 'dir with space/\xc3\xa9t\xc3\xa9.txt'",
                  dir),
               0);
  lt_run_free(&rr);
  snprintf(path, sizeof path, "%s/d.patch", dir);
  lt_test_write(path, d.data);
  cr_assert_eq(SH(&rr,
                  "cd %s && git apply d.patch && test -x run.sh && test -x pkg/new.py && ! test -e old.txt "
                  "&& test -e empty && cat 'dir with space/\xc3\xa9t\xc3\xa9.txt'",
                  dir),
               0, "%s\n%s", rr.err, d.data);
  cr_expect_str_eq(rr.out, "b\n");
  lt_run_free(&rr);
  /* ours reads the same five sections */
  lt_patch_t *p;
  cr_assert_eq(lt_patch_parse(d.data, d.len, &p), 0, "%s", lt_error_msg());
  cr_assert_eq(lt_patch_nfiles(p), 5);
  const lt_patch_file_t *f = lt_patch_file(p, 0);
  cr_expect_null(f->old_path);
  cr_expect_str_eq(f->new_path, "pkg/new.py");
  cr_expect_eq(f->new_mode, 0755);
  f = lt_patch_file(p, 1);
  cr_expect_str_eq(f->old_path, "old.txt");
  cr_expect_null(f->new_path);
  lt_buf_t out = {0};
  cr_expect_eq(lt_patch_apply(p, 1, "bye\nnow", 7, &out), 0, "%s", lt_error_msg());
  cr_expect_eq(out.len, 0);
  cr_expect_lt(lt_patch_apply(p, 1, "bye\nnow\n", 8, &out), 0, "a deleted file whose content differs");
  f = lt_patch_file(p, 2);
  cr_expect_eq(f->new_mode, 0755);
  cr_expect_eq(f->nhunks, 0);
  cr_expect_str_eq(lt_patch_file(p, 3)->new_path, "dir with space/\xc3\xa9t\xc3\xa9.txt");
  cr_expect_lt(lt_patch_apply(p, 0, "exists\n", 7, &out), 0, "a created file that exists");
  lt_buf_free(&out);
  lt_patch_free(p);
  lt_buf_free(&d);
  cr_expect_eq(lt_diff_file(&d, "x.bin", "a\0b", 3, 0, "a\0c", 3, 0, 3), LT_EUNSUPP);
  cr_expect_eq(d.len, 0);
  lt_test_rmdir(dir);
}

/* The same patch and file to GNU patch --fuzz=0 and to ours: both apply at an offset, both refuse a changed
 * context line, and an anchored hunk (stated at line 1) never moves. */
Test(diff, exact_context_with_offsets_no_fuzz_like_gnu_patch) {
  char *dir = lt_test_tmpdir("diff_fuzz"), path[512];
  const char *patch = "--- a/f\n+++ b/f\n@@ -3,7 +3,7 @@\n c\n d\n e\n-f\n+F\n g\n h\n i\n";
  const char *cases[][2] = {
      {"a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n", "a\nb\nc\nd\ne\nF\ng\nh\ni\nj\n"},                   /* in place */
      {"0\n1\n2\na\nb\nc\nd\ne\nf\ng\nh\ni\nj\n", "0\n1\n2\na\nb\nc\nd\ne\nF\ng\nh\ni\nj\n"}, /* offset +3 */
      {"a\nb\nc\nd\nE\nf\ng\nh\ni\nj\n", NULL},  /* a context line differs */
      {"a\nb\nc\nd\ne\nf \ng\nh\ni\nj\n", NULL}, /* the deleted line differs */
  };
  snprintf(path, sizeof path, "%s/p", dir);
  lt_test_write(path, patch);
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    snprintf(path, sizeof path, "%s/f", dir);
    lt_test_write(path, cases[k][0]);
    lt_run_t rr;
    int st = SH(&rr, "cd %s && patch -p1 -s --fuzz=0 --no-backup-if-mismatch -r - < p && cat f", dir);
    char *mine = apply_mine(patch, cases[k][0]);
    if (cases[k][1]) {
      cr_expect_eq(st, 0, "case %zu: %s", k, rr.out);
      cr_expect_str_eq(rr.out, cases[k][1], "case %zu", k);
      cr_expect_str_eq(mine ? mine : "(refused)", cases[k][1], "case %zu: %s", k, lt_error_msg());
    } else {
      cr_expect_neq(st, 0, "case %zu: GNU patch refuses", k);
      cr_expect_null(mine, "case %zu: ours refuses too", k);
      cr_expect(strstr(lt_error_msg(), "f: hunk 1 (@@ -3,7 +3,7 @@"), "%s", lt_error_msg());
    }
    free(mine);
    lt_run_free(&rr);
  }
  /* stated at line 1: the file's start, not wherever its lines appear later */
  char *mine = apply_mine("--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n-x\n+y\n z\n", "q\nx\nz\n");
  cr_expect_null(mine, "an anchored hunk does not move");
  mine = apply_mine("--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n-x\n+y\n z\n", "x\nz\nq\n");
  cr_expect_str_eq(mine, "y\nz\nq\n");
  free(mine);
  lt_test_rmdir(dir);
}

Test(diff, malformed_binary_and_escaping_patches_are_refused) {
  static const struct {
    const char *patch;
    int rc;
    const char *msg;
  } bad[] = {
      {"--- a/../etc/passwd\n+++ b/../etc/passwd\n@@ -1 +1 @@\n-x\n+y\n", LT_EINVAL, "leaves the tree"},
      {"diff --git a/x b/x\nrename from x\nrename to /etc/passwd\n", LT_EINVAL, "absolute"},
      {"diff --git a/x b/x\nrename from x\nrename to ../../y\n", LT_EINVAL, "leaves the tree"},
      {"--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n-b\n+c\n", LT_EINVAL, "hunk at line 3 ends early"},
      {"--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n-b\n+c\n", LT_EINVAL, "line 5: hunk at line 3 holds other lines"},
      {"diff --git a/f.png b/f.png\nindex 1..2 100644\nBinary files a/f.png and b/f.png differ\n", LT_EUNSUPP,
       "binary"},
      {"diff --git a/l b/l\nnew file mode 120000\n--- /dev/null\n+++ b/l\n@@ -0,0 +1 @@\n+t\n", LT_EUNSUPP,
       "mode 120000"},
      {"just some text\n", LT_EINVAL, "no file in it"},
      {"--- a/f\n+++ b/f\n@@ -x +1 @@\n", LT_EINVAL, "malformed hunk header"},
  };
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    lt_patch_t *p = NULL;
    cr_expect_eq(lt_patch_parse(bad[k].patch, strlen(bad[k].patch), &p), bad[k].rc, "case %zu", k);
    cr_expect(strstr(lt_error_msg(), bad[k].msg), "case %zu: %s", k, lt_error_msg());
    cr_expect_null(p);
  }
  /* a rename with a change; prose before and after sections is ignored */
  const char *ren =
      "From: someone\nSubject: move it\n\ndiff --git a/old name.py b/new.py\nsimilarity index 80%\n"
      "rename from old name.py\nrename to new.py\nindex 1..2 100644\n--- a/old name.py\n+++ b/new.py\n"
      "@@ -1,2 +1,2 @@\n a\n-b\n+c\n-- \n2.39.2\n";
  lt_patch_t *p;
  cr_assert_eq(lt_patch_parse(ren, strlen(ren), &p), 0, "%s", lt_error_msg());
  cr_expect_str_eq(lt_patch_file(p, 0)->old_path, "old name.py");
  cr_expect_str_eq(lt_patch_file(p, 0)->new_path, "new.py");
  lt_buf_t out = {0};
  cr_expect_eq(lt_patch_apply(p, 0, "a\nb\n", 4, &out), 0, "%s", lt_error_msg());
  cr_expect_str_eq(out.data, "a\nc\n");
  lt_buf_free(&out);
  lt_patch_free(p);
}
