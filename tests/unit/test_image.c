/* Task images (sandbox/image.h): references in the three transports unpacked into the cache, compared with what
 * umoci (the OCI reference unpacker) makes of the same layers and with skopeo's own archives; whiteouts, opaque
 * directories, links and modes; corrupt, hostile and half-unpacked images. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/image.h"
#include "tests/support/harness.h"
#include "tests/support/image.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/sha256.h"
#include "util/time.h"

#define E(p, t, m, d) \
  { p, t, m, d, 0 }

/* Three layers exercising what an unpacker must get right (the tests below assert each). */
static const lt_test_entry_t l1[] = {
    E("a", 'd', 0, NULL),
    E("a/b", 'd', 0, NULL),
    E("a/f1", 'f', 0, "one"),
    E("a/b/f2", 'f', 0640, "two"),
    E("a/keep", 'f', 0, "keep"),
    E("a/h", 'h', 0, "a/f1"),
    E("a/l", 'l', 0777, "/etc/passwd"),
    E("d", 'd', 0, NULL),
    E("d/x", 'f', 0, "x"),
    E("d/sub", 'd', 0, NULL),
    E("d/sub/y", 'f', 0, "y"),
    E("bin", 'd', 0, NULL),
    E("bin/su", 'f', 04755, "#!/bin/sh\nid\n"),
    E("esc", 'l', 0777, "../../../../etc"),
    E("etc", 'd', 0, NULL),
    E("p", 'p', 0600, NULL),
    E("nul", 'c', 0666, NULL),
    E("sticky", 'd', 01777, NULL),
};
static const lt_test_entry_t l2[] = {
    E("a/.wh.f1", 'f', 0, ""), E("d/.wh..wh..opq", 'f', 0, ""),         E("d/z", 'f', 0, "z"),
    E("d/sub", 'd', 0, NULL),  E("esc/through-link", 'f', 0, "inside"), E("x/y/z/deep", 'f', 0755, "made parents"),
};
static const lt_test_entry_t l3[] = {
    E("a/b/.wh.f2", 'f', 0, ""),
    E("ro", 'd', 0555, NULL),
    E("ro/f", 'f', 0444, "in a read-only dir"),
    E("a/b2", 'h', 0, "a/keep"),
};

/* zstd: the second layer's compression (umoci 0.4 reads only gzip). */
static char *make_layers_image(const char *dir, char *digest, int zstd) {
  lt_test_layer_t layers[] = {{l1, sizeof l1 / sizeof l1[0], "gzip"},
                              {l2, sizeof l2 / sizeof l2[0], zstd ? "zstd" : "gzip"},
                              {l3, sizeof l3 / sizeof l3[0], NULL}};
  cr_assert_eq(
      lt_test_oci_write(dir, "v1", layers, 3, "{\"Env\":[\"A=1\",\"PATH=/bin\"],\"WorkingDir\":\"/a\"}", digest), 0);
  char *ref = malloc(4200);
  snprintf(ref, 4200, "oci:%s:v1", dir);
  return ref;
}

static lt_image_t *open_ok(const char *cache, const char *ref) {
  lt_image_t *img = NULL;
  int rc = lt_image_open(cache, ref, &img);
  cr_assert_eq(rc, 0, "%s: %s", ref, lt_error_msg());
  return img;
}

static int have(const char *tool) {
  lt_run_t r;
  lt_test_sh(&r, 10, "command -v %s", tool);
  int ok = r.status == 0;
  lt_run_free(&r);
  return ok;
}

/* One line per entry under dir: path, type, permission bits, then the content's hash, the link target, or the
 * first path of its hard-link group. */
static void walk(int dfd, const char *rel, lt_buf_t *out, char (*ino)[2][512], int *nino) {
  DIR *d = fdopendir(dfd);
  cr_assert(d);
  struct dirent *e;
  char *names[4096];
  int n = 0;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && n < 4096) names[n++] = strdup(e->d_name);
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++)
      if (strcmp(names[i], names[j]) > 0) {
        char *t = names[i];
        names[i] = names[j], names[j] = t;
      }
  for (int i = 0; i < n; i++) {
    char p[1024], extra[600] = "";
    snprintf(p, sizeof p, "%s/%s", rel, names[i]);
    struct stat st;
    cr_assert_eq(fstatat(dirfd(d), names[i], &st, AT_SYMLINK_NOFOLLOW), 0);
    if (S_ISLNK(st.st_mode)) {
      ssize_t k = readlinkat(dirfd(d), names[i], extra, sizeof extra - 1);
      extra[k > 0 ? k : 0] = 0;
    } else if (S_ISREG(st.st_mode)) {
      char key[64], hex[65] = "";
      snprintf(key, sizeof key, "%lu", (unsigned long)st.st_ino);
      int k = 0;
      while (k < *nino && strcmp(ino[k][0], key)) k++;
      if (k < *nino) {
        snprintf(extra, sizeof extra, "link=%s", ino[k][1]);
      } else {
        snprintf(ino[*nino][0], 512, "%s", key);
        snprintf(ino[*nino][1], 512, "%s", p);
        (*nino)++;
        int fd = openat(dirfd(d), names[i], O_RDONLY);
        char buf[65536];
        ssize_t k2 = fd >= 0 ? read(fd, buf, sizeof buf) : -1;
        if (fd >= 0) close(fd);
        lt_sha256_buf(buf, k2 > 0 ? (size_t)k2 : 0, hex);
        snprintf(extra, sizeof extra, "%.12s", hex);
      }
    }
    lt_buf_printf(out, "%s %o %s\n", p, (unsigned)st.st_mode, extra);
    if (S_ISDIR(st.st_mode)) walk(openat(dirfd(d), names[i], O_RDONLY | O_DIRECTORY), p, out, ino, nino);
    free(names[i]);
  }
  closedir(d);
}

static char *tree(const char *dir) {
  lt_buf_t b = {0};
  static char ino[4096][2][512];
  int nino = 0;
  int fd = open(dir, O_RDONLY | O_DIRECTORY);
  cr_assert(fd >= 0, "%s", dir);
  walk(fd, "", &b, ino, &nino);
  return lt_buf_take(&b);
}

static char *file_text(const lt_image_t *img, const char *path) {
  char *s = NULL;
  size_t n;
  return lt_image_read_file(img, path, 1 << 20, &s, &n) == 0 ? s : NULL;
}

Test(image, layers_apply_whiteouts_opaque_dirs_links_and_modes) {
  char *dir = lt_test_tmpdir("img"), layout[4200], cache[4200];
  snprintf(layout, sizeof layout, "%s/layout", dir);
  snprintf(cache, sizeof cache, "%s/cache", dir);
  char *ref = make_layers_image(layout, NULL, 1);
  lt_image_t *img = open_ok(cache, ref);
  const char *root = lt_image_rootfs(img);
  char p[4400];
  struct stat st;
#define AT(rel) (snprintf(p, sizeof p, "%s/%s", root, rel), p)
  cr_expect_neq(lstat(AT("a/f1"), &st), 0, "a whiteout removes a file of the layer below");
  cr_expect_neq(lstat(AT("a/b/f2"), &st), 0);
  char *h = file_text(img, "/a/h");
  cr_expect_str_eq(h ? h : "", "one", "a hard link keeps the content its removed twin had");
  free(h);
  cr_expect_eq(lstat(AT("a/b2"), &st), 0);
  struct stat k;
  cr_expect_eq(lstat(AT("a/keep"), &k), 0);
  cr_expect_eq(st.st_ino, k.st_ino, "a hard link is a hard link");
  cr_expect_neq(lstat(AT("d/x"), &st), 0, "an opaque directory hides what was below");
  cr_expect_neq(lstat(AT("d/sub/y"), &st), 0, "in its subdirectories too");
  cr_expect_eq(lstat(AT("d/z"), &st), 0, "and keeps its own layer's files");
  cr_expect_eq(lstat(AT("d/sub"), &st), 0);
  cr_expect_eq(lstat(AT("bin/su"), &st), 0);
  cr_expect_eq(st.st_mode & 07777, 04755, "setuid bit kept: %o", st.st_mode);
  cr_expect_eq(lstat(AT("sticky"), &st), 0);
  cr_expect_eq(st.st_mode & 07777, 01777);
  cr_expect_eq(lstat(AT("ro"), &st), 0);
  cr_expect_eq(st.st_mode & 07777, 0555, "a read-only directory got its child and then its mode");
  cr_expect_eq(lstat(AT("p"), &st), 0);
  cr_expect(S_ISFIFO(st.st_mode));
  cr_expect_neq(lstat(AT("nul"), &st), 0, "no device nodes");
  char *t = file_text(img, "/etc/through-link");
  cr_expect_str_eq(t ? t : "", "inside", "a file written through a symlink out of the root lands inside it");
  free(t);
  cr_expect_eq(lstat(AT("x/y/z/deep"), &st), 0);
  cr_expect_eq(st.st_uid, geteuid() == 0 ? 65534u : geteuid(), "files belong to the box's host id");
  /* Host-side reads resolve in the root: /a/l -> /etc/passwd is the image's (there is none), not the host's. */
  char *s = NULL;
  size_t n;
  cr_expect_eq(lt_image_read_file(img, "/a/l", 1 << 20, &s, &n), LT_ENOENT);
  cr_expect_eq(lt_image_read_file(img, "/esc/../../../../etc/hostname", 1 << 20, &s, &n), LT_ENOENT);
  const lt_image_config_t *c = lt_image_config(img);
  cr_expect_str_eq(c->workdir, "/a");
  cr_expect_str_eq(c->env[0], "A=1");
  cr_expect_eq(c->uid, 0);
  lt_image_close(img);
  free(ref);
  lt_test_rmdir(dir);
}

Test(image, same_tree_as_umoci) {
  if (!have("umoci")) cr_skip_test("umoci is not installed (Debian's umoci: the OCI reference unpacker)");
  char *dir = lt_test_tmpdir("img"), layout[4200], cache[4200], bundle[4200];
  snprintf(layout, sizeof layout, "%s/layout", dir);
  snprintf(cache, sizeof cache, "%s/cache", dir);
  snprintf(bundle, sizeof bundle, "%s/bundle", dir);
  char *ref = make_layers_image(layout, NULL, 0);
  lt_run_t r;
  lt_test_sh(&r, 60, "umoci unpack --rootless --image '%s:v1' '%s' 2>&1", layout, bundle);
  cr_assert_eq(r.status, 0, "umoci: %s", r.out);
  lt_run_free(&r);
  lt_image_t *img = open_ok(cache, ref);
  char theirs[4300];
  snprintf(theirs, sizeof theirs, "%s/rootfs", bundle);
  snprintf(layout, sizeof layout, "%s/nul",
           theirs); /* umoci --rootless leaves an empty file for a device; we skip it */
  unlink(layout);
  char *a = tree(lt_image_rootfs(img)), *b = tree(theirs);
  cr_expect_str_eq(a, b, "ours:\n%s\numoci's:\n%s", a, b);
  free(a);
  free(b);
  lt_image_close(img);
  free(ref);
  lt_test_rmdir(dir);
}

/* The first directory of dir whose name starts with prefix (not its ".lock" file), or "". */
static void find_prefixed(const char *dir, const char *prefix, char *out, size_t cap) {
  out[0] = 0;
  DIR *d = opendir(dir);
  for (struct dirent *e; d && (e = readdir(d));)
    if (strncmp(e->d_name, prefix, strlen(prefix)) == 0 && !strstr(e->d_name, ".lock")) {
      snprintf(out, cap, "%s/%s", dir, e->d_name);
      break;
    }
  if (d) closedir(d);
}

static int count_entries(const char *dir) {
  int n = 0;
  DIR *d = opendir(dir);
  for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
  if (d) closedir(d);
  return n;
}

/* The layout at `layout` as one tar, dir/img.tar (as `tar` writes an oci-archive). */
static void archive_of(const char *layout, const char *dir, char *arch, size_t cap) {
  snprintf(arch, cap, "%s/img.tar", dir);
  lt_run_t r;
  lt_test_sh(&r, 30, "tar -C '%s' -cf '%s' .", layout, arch);
  cr_assert_eq(r.status, 0, "tar: %s", r.out);
  lt_run_free(&r);
}

Test(image, transports_give_the_same_root) {
  char *dir = lt_test_tmpdir("img"), layout[4200], cache[4200], arch[4200], ref2[8500];
  snprintf(layout, sizeof layout, "%s/layout", dir);
  snprintf(cache, sizeof cache, "%s/cache", dir);
  char *ref = make_layers_image(layout, NULL, 0);
  lt_image_t *a = open_ok(cache, ref);
  char *ta = tree(lt_image_rootfs(a));
  /* oci-archive: the layout as a tar (as `tar` writes it, then as skopeo does) */
  archive_of(layout, dir, arch, sizeof arch);
  snprintf(ref2, sizeof ref2, "oci-archive:%s:v1", arch);
  lt_run_t r;
  lt_image_t *b = open_ok(cache, ref2);
  cr_expect_str_eq(lt_image_config(b)->digest, lt_image_config(a)->digest, "the same manifest, the same entry");
  cr_expect_str_eq(lt_image_rootfs(b), lt_image_rootfs(a));
  lt_image_close(b);
  cr_expect_eq(count_entries(cache), 3, "images, locks, tmp");
  snprintf(ref2, sizeof ref2, "%s/tmp", cache);
  cr_expect_eq(count_entries(ref2), 0, "the unpacked archive is gone");
  snprintf(ref2, sizeof ref2, "oci-archive:%s:nope", arch);
  lt_image_t *c = NULL;
  cr_expect_eq(lt_image_open(cache, ref2, &c), LT_ENOENT);
  cr_expect(strstr(lt_error_msg(), "no manifest tagged 'nope'"), "%s", lt_error_msg());
  if (have("skopeo")) { /* Debian's skopeo writes the archives podman and docker would */
    const char *kinds[] = {"docker-archive", "oci-archive"};
    for (int i = 0; i < 2; i++) {
      snprintf(arch, sizeof arch, "%s/skopeo-%d.tar", dir, i);
      lt_test_sh(&r, 60, "skopeo copy -q 'oci:%s:v1' '%s:%s%s' 2>&1", layout, kinds[i], arch, i ? ":v1" : "");
      cr_assert_eq(r.status, 0, "skopeo: %s", r.out);
      lt_run_free(&r);
      snprintf(ref2, sizeof ref2, "%s:%s%s", kinds[i], arch, i ? ":v1" : "");
      lt_image_t *d = open_ok(cache, ref2);
      char *td = tree(lt_image_rootfs(d));
      cr_expect_str_eq(td, ta, "%s", ref2);
      cr_expect_str_eq(lt_image_config(d)->workdir, "/a");
      free(td);
      lt_image_close(d);
    }
  }
  free(ta);
  lt_image_close(a);
  free(ref);
  lt_test_rmdir(dir);
}

Test(image, corrupt_or_missing_layers_are_refused_naming_them) {
  char *dir = lt_test_tmpdir("img"), layout[4200], cache[4200], blob[4400];
  snprintf(layout, sizeof layout, "%s/layout", dir);
  snprintf(cache, sizeof cache, "%s/cache", dir);
  char *ref = make_layers_image(layout, NULL, 1);
  /* The third layer is a plain tar: a changed byte of a file's content leaves a valid tar with another digest. */
  char *man = NULL, *idx = NULL;
  size_t n;
  snprintf(blob, sizeof blob, "%s/index.json", layout);
  cr_assert_eq(lt_fs_read_file(blob, 1 << 20, &idx, &n), 0);
  char *md = strstr(idx, "sha256:") + 7;
  snprintf(blob, sizeof blob, "%s/blobs/sha256/%.64s", layout, md);
  cr_assert_eq(lt_fs_read_file(blob, 1 << 20, &man, &n), 0);
  char *last = strrchr(man, '"'), *ld = NULL;
  for (char *s = man; (s = strstr(s, "sha256:")); s++) ld = s; /* the last digest: the third layer */
  (void)last;
  char digest[72];
  snprintf(digest, sizeof digest, "%.71s", ld);
  snprintf(blob, sizeof blob, "%s/blobs/sha256/%s", layout, digest + 7);
  char *tar = NULL;
  cr_assert_eq(lt_fs_read_file(blob, 1 << 20, &tar, &n), 0);
  char *text = memmem(tar, n, "read-only", 9);
  cr_assert(text);
  text[0] = 'R';
  cr_assert_eq(lt_fs_write_atomic(blob, tar, n), 0);
  lt_image_t *img = NULL;
  cr_expect_eq(lt_image_open(cache, ref, &img), LT_ECORRUPT);
  cr_expect(strstr(lt_error_msg(), ref) && strstr(lt_error_msg(), digest) && strstr(lt_error_msg(), "digest mismatch"),
            "%s", lt_error_msg());
  snprintf(blob, sizeof blob, "%s/images", cache);
  cr_expect_eq(count_entries(blob), 0, "nothing half-made is kept");
  snprintf(blob, sizeof blob, "%s/tmp", cache);
  cr_expect_eq(count_entries(blob), 0);
  /* A layer that is gone */
  snprintf(blob, sizeof blob, "%s/blobs/sha256/%s", layout, digest + 7);
  unlink(blob);
  cr_expect_eq(lt_image_open(cache, ref, &img), LT_ENOENT);
  cr_expect(strstr(lt_error_msg(), ref) && strstr(lt_error_msg(), digest), "%s", lt_error_msg());
  free(tar);
  free(man);
  free(idx);
  free(ref);
  lt_test_rmdir(dir);
}

Test(image, entries_leaving_the_root_are_refused) {
  char *dir = lt_test_tmpdir("img"), layout[4200], cache[4200], ref[4400];
  snprintf(cache, sizeof cache, "%s/cache", dir);
  static const lt_test_entry_t dotdot[] = {E("ok", 'f', 0, "fine"), E("../../../evil", 'f', 0, "out")};
  static const lt_test_entry_t deep[] = {E("a/b/../../../evil2", 'f', 0, "out")};
  static const lt_test_entry_t hard[] = {E("h", 'h', 0, "../../../../../../etc/passwd")};
  const lt_test_entry_t *cases[] = {dotdot, deep, hard};
  const int ns[] = {2, 1, 1};
  for (int i = 0; i < 3; i++) {
    snprintf(layout, sizeof layout, "%s/layout%d", dir, i);
    lt_test_layer_t l = {cases[i], ns[i], NULL};
    char digest[72];
    cr_assert_eq(lt_test_oci_write(layout, "t", &l, 1, NULL, digest), 0);
    snprintf(ref, sizeof ref, "oci:%s:t", layout);
    lt_image_t *img = NULL;
    cr_expect_eq(lt_image_open(cache, ref, &img), LT_EINVAL, "case %d", i);
    cr_expect(strstr(lt_error_msg(), "leaves the root") && strstr(lt_error_msg(), ref) &&
                  strstr(lt_error_msg(), "layer sha256:"),
              "%s", lt_error_msg());
  }
  lt_run_t r;
  lt_test_sh(&r, 10, "find '%s' / -maxdepth 3 -name 'evil*' 2>/dev/null | head -1", dir);
  cr_expect_str_eq(r.out, "", "nothing was written outside: %s", r.out);
  lt_run_free(&r);
  lt_test_rmdir(dir);
}

Test(image, config_user_maps_through_the_image_passwd) {
  const char *users[] = {"user", "1234:55", "root:user", "ghost"};
  const int uid[] = {1000, 1234, 0, -1}, gid[] = {1000, 55, 1000, -1};
  char *dir = lt_test_tmpdir("img"), layout[4200], cache[4200], ref[4400], cfg[256];
  snprintf(cache, sizeof cache, "%s/cache", dir);
  static const lt_test_entry_t etc[] = {
      E("etc", 'd', 0, NULL),
      E("etc/passwd", 'f', 0, "root:x:0:0::/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n"),
      E("etc/group", 'f', 0, "root:x:0:\nuser:x:1000:\n")};
  lt_test_layer_t l = {etc, 3, NULL};
  for (int i = 0; i < 4; i++) {
    snprintf(layout, sizeof layout, "%s/layout%d", dir, i);
    snprintf(cfg, sizeof cfg, "{\"User\":\"%s\"}", users[i]);
    cr_assert_eq(lt_test_oci_write(layout, "t", &l, 1, cfg, NULL), 0);
    snprintf(ref, sizeof ref, "oci:%s:t", layout);
    lt_image_t *img = NULL;
    int rc = lt_image_open(cache, ref, &img);
    if (uid[i] < 0) {
      cr_expect_eq(rc, LT_EFORMAT);
      cr_expect(strstr(lt_error_msg(), "'ghost' is not in the image's /etc/passwd"), "%s", lt_error_msg());
      continue;
    }
    cr_assert_eq(rc, 0, "%s", lt_error_msg());
    cr_expect_eq(lt_image_config(img)->uid, uid[i], "%s", users[i]);
    cr_expect_eq(lt_image_config(img)->gid, gid[i], "%s", users[i]);
    cr_expect_str_eq(lt_image_config(img)->workdir, "/");
    lt_image_close(img);
  }
  lt_test_rmdir(dir);
}

/* An unpacker killed halfway leaves a temporary directory, never an entry; the next one sweeps it and unpacks.  The
 * layer's blob is a FIFO fed by the test, so the kill lands mid-layer for certain. */
Test(image, killed_unpack_leaves_nothing_trusted, .timeout = 60) {
  char *dir = lt_test_tmpdir("img"), layout[4200], cache[4200], ref[4400], tmp[4400], found[4400], blob[4400];
  snprintf(layout, sizeof layout, "%s/layout", dir);
  snprintf(cache, sizeof cache, "%s/cache", dir);
  enum { N = 200 };
  lt_test_entry_t e[N + 1];
  char names[N][32], data[8192];
  memset(data, 'x', sizeof data);
  e[0] = (lt_test_entry_t)E("many", 'd', 0, NULL);
  for (int i = 0; i < N; i++) {
    snprintf(names[i], 32, "many/f%03d", i);
    e[i + 1] = (lt_test_entry_t){names[i], 'f', 0, data, sizeof data};
  }
  lt_test_layer_t l = {e, N + 1, NULL};
  char digest[72], *man = NULL, *tar = NULL;
  size_t n, tn;
  cr_assert_eq(lt_test_oci_write(layout, "t", &l, 1, NULL, digest), 0);
  snprintf(blob, sizeof blob, "%s/blobs/sha256/%s", layout, digest + 7);
  cr_assert_eq(lt_fs_read_file(blob, 1 << 20, &man, &n), 0);
  snprintf(blob, sizeof blob, "%s/blobs/sha256/%.64s", layout, strstr(strstr(man, "\"layers\""), "sha256:") + 7);
  cr_assert_eq(lt_fs_read_file(blob, 16 << 20, &tar, &tn), 0);
  unlink(blob);
  cr_assert_eq(mkfifo(blob, 0600), 0);
  snprintf(ref, sizeof ref, "oci:%s:t", layout);
  snprintf(tmp, sizeof tmp, "%s/tmp", cache);
  pid_t pid = fork();
  if (pid == 0) {
    lt_image_t *img;
    _exit(lt_image_open(cache, ref, &img) == 0 ? 0 : 1);
  }
  int fifo = open(blob, O_WRONLY);
  cr_assert(fifo >= 0);
  cr_assert_eq(write(fifo, tar, tn / 2), (ssize_t)(tn / 2));
  char many[4500];
  int seen = 0;
  for (double t0 = lt_time_mono_s(); lt_time_mono_s() - t0 < 30 && !seen;) {
    find_prefixed(tmp, "img-", found, sizeof found);
    snprintf(many, sizeof many, "%s/rootfs/many", found);
    seen = found[0] && count_entries(many) > 10;
    if (!seen) usleep(1000);
  }
  cr_assert(seen, "the unpack never started");
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  close(fifo);
  snprintf(many, sizeof many, "%s/images", cache);
  cr_expect_eq(count_entries(many), 0, "no entry from a killed unpack");
  cr_expect(lt_fs_is_dir(found), "its temporary directory is what is left");
  unlink(blob);
  cr_assert_eq(lt_fs_write_atomic(blob, tar, tn), 0);
  lt_image_t *img = open_ok(cache, ref);
  snprintf(many, sizeof many, "%s/many", lt_image_rootfs(img));
  cr_expect_eq(count_entries(many), N);
  cr_expect(!lt_fs_is_dir(found), "swept by the next unpacker");
  cr_expect_eq(count_entries(tmp), 0);
  lt_image_close(img);
  free(man);
  free(tar);
  lt_test_rmdir(dir);
}

/* Bytes this process has written (write(2) and the like) so far: /proc/self/io's wchar. */
static long long written(void) {
  char *io = NULL;
  size_t n;
  cr_assert_eq(lt_fs_read_file("/proc/self/io", 4096, &io, &n), 0);
  const char *w = strstr(io, "wchar:");
  long long v = w ? atoll(w + 6) : -1;
  free(io);
  return v;
}

/* An archive's layers are unpacked from it only when a root is made: opening an image the cache already holds
 * reads its index, manifest and config and writes no layer (it wrote the whole archive before, each time). */
Test(image, an_archive_in_the_cache_is_opened_without_unpacking_its_layers, .timeout = 60) {
  char *dir = lt_test_tmpdir("img"), layout[4200], cache[4200], arch[4200], ref[4400];
  snprintf(layout, sizeof layout, "%s/layout", dir);
  snprintf(cache, sizeof cache, "%s/cache", dir);
  enum { BIG = 6 << 20 }; /* over the 4 MiB of metadata the open unpacks */
  char *big = malloc(BIG);
  cr_assert(big);
  for (size_t i = 0; i < BIG; i++) big[i] = (char)('a' + (i * 7 + i / 4096) % 26);
  lt_test_entry_t e[] = {E("data", 'd', 0, NULL), {"data/big", 'f', 0, big, BIG}};
  lt_test_layer_t layers[] = {{l1, sizeof l1 / sizeof l1[0], "gzip"}, {e, 2, NULL}}; /* the big one a plain tar */
  cr_assert_eq(lt_test_oci_write(layout, "v1", layers, 2, NULL, NULL), 0);
  archive_of(layout, dir, arch, sizeof arch);
  snprintf(ref, sizeof ref, "oci-archive:%s:v1", arch);
  long long w0 = written();
  lt_image_t *img = open_ok(cache, ref); /* cold: the root is made, its layers unpacked from the archive */
  long long cold = written() - w0;
  char p[4500], *got = NULL;
  size_t n = 0;
  snprintf(p, sizeof p, "%s/data/big", lt_image_rootfs(img));
  cr_assert_eq(lt_fs_read_file(p, 2 * BIG, &got, &n), 0, "%s", lt_error_msg());
  cr_expect(n == BIG && memcmp(got, big, BIG) == 0, "the big layer's file differs (%zu bytes)", n);
  free(got);
  lt_image_close(img);
  w0 = written();
  img = open_ok(cache, ref);
  long long warm = written() - w0;
  lt_image_close(img);
  cr_expect_gt(cold, 2LL * BIG, "a cold open wrote %lld bytes (the layer twice: unpacked from the archive, applied)",
               cold);
  cr_expect_lt(warm, 1 << 20, "a cache hit wrote %lld bytes", warm);
  snprintf(p, sizeof p, "%s/tmp", cache);
  cr_expect_eq(count_entries(p), 0, "the unpacked archive is gone");
  free(big);
  lt_test_rmdir(dir);
}
