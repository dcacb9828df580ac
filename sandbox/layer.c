/* One image layer applied to a root directory: a tar (plain, gzip or zstd) read by libarchive, its bytes hashed on
 * the way, every entry written relative to the root's descriptor and resolved inside it (openat2 RESOLVE_IN_ROOT:
 * a symlink an earlier entry made cannot lead a later one out), never through a name with "..".
 *
 * OCI whiteouts: ".wh.NAME" removes NAME of the layers below; ".wh..wh..opq" empties its directory of what the
 * layers below put there (this layer's own entries stay, whatever their order in the tar).  Kept: regular files
 * (sparse ones too), directories, symlinks (targets as written), hard links, FIFOs, permission bits with
 * setuid/setgid/sticky, modification times.  Not kept: owners (every file belongs to the box's one user, see
 * sandbox/image.h), device nodes and sockets (skipped: a root has no use for them and a box mounts its own /dev),
 * extended attributes (file capabilities included). */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sandbox/internal.h"
#include "util/error.h"
#include "util/sha256.h"

int lt__openat_in(int root, const char *path, int flags, int mode) {
  struct open_how how = {.flags = (uint64_t)flags | O_CLOEXEC,
                         .mode = (uint64_t)(flags & O_CREAT ? mode : 0),
                         .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV};
  long fd;
  do fd = syscall(SYS_openat2, root, *path ? path : ".", &how, sizeof how);
  while (fd < 0 && errno == EAGAIN); /* RESOLVE_IN_ROOT answers EAGAIN when a rename raced the lookup */
  return (int)fd;
}

int lt__remove_at(int dir, const char *name) {
  if (unlinkat(dir, name, 0) == 0 || errno == ENOENT) return 0;
  if (errno != EISDIR) return -1;
  int fd = openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  if (!d) {
    if (fd >= 0) close(fd);
    return -1;
  }
  int rc = 0;
  for (struct dirent *e; rc == 0 && (e = readdir(d));)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) rc = lt__remove_at(fd, e->d_name);
  closedir(d);
  return rc == 0 && unlinkat(dir, name, AT_REMOVEDIR) != 0 && errno != ENOENT ? -1 : rc;
}

/* ---- the paths this layer made (an opaque directory keeps them) ------------------ */

typedef struct {
  char **slot;
  size_t cap, n;
} pathset_t;

static uint64_t fnv(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static int set_has(const pathset_t *s, const char *p) {
  if (!s->cap) return 0;
  for (size_t i = fnv(p) & (s->cap - 1); s->slot[i]; i = (i + 1) & (s->cap - 1))
    if (strcmp(s->slot[i], p) == 0) return 1;
  return 0;
}

static int set_add(pathset_t *s, const char *p) {
  if (set_has(s, p)) return 0;
  if ((s->n + 1) * 2 > s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 256;
    char **slot = calloc(cap, sizeof *slot);
    if (!slot) return -1;
    for (size_t i = 0; i < s->cap; i++) {
      if (!s->slot[i]) continue;
      size_t j = fnv(s->slot[i]) & (cap - 1);
      while (slot[j]) j = (j + 1) & (cap - 1);
      slot[j] = s->slot[i];
    }
    free(s->slot);
    s->slot = slot, s->cap = cap;
  }
  size_t i = fnv(p) & (s->cap - 1);
  while (s->slot[i]) i = (i + 1) & (s->cap - 1);
  if (!(s->slot[i] = strdup(p))) return -1;
  s->n++;
  return 0;
}

static void set_free(pathset_t *s) {
  for (size_t i = 0; i < s->cap; i++) free(s->slot[i]);
  free(s->slot);
  memset(s, 0, sizeof *s);
}

/* ---- reading the blob ------------------------------------------------------------ */

typedef struct {
  int fd;
  lt_sha256_t h;
  char buf[1 << 16];
} src_t;

static la_ssize_t src_read(struct archive *a, void *ud, const void **out) {
  src_t *s = ud;
  ssize_t n;
  do n = read(s->fd, s->buf, sizeof s->buf);
  while (n < 0 && errno == EINTR);
  if (n < 0) {
    archive_set_error(a, errno, "read: %s", strerror(errno));
    return -1;
  }
  lt_sha256_update(&s->h, s->buf, (size_t)n);
  *out = s->buf;
  return n;
}

/* Hashes what libarchive left unread (a tar's trailing blocks), so the digest covers the whole blob. */
static int src_drain(src_t *s) {
  const void *p;
  for (;;) {
    la_ssize_t n = src_read(NULL, s, &p);
    if (n <= 0) return (int)n;
  }
}

/* ---- applying entries ------------------------------------------------------------ */

typedef struct {
  int root;
  const char *what; /* "REF: layer DIGEST", for messages */
  int chown;        /* 1: every file to uid:gid (longtail runs as root) */
  uid_t uid;
  gid_t gid;
  pathset_t made;
  lt__dirmode_t *dirs; /* directories whose mode is applied at the end (see lt__layer_apply) */
} apply_t;

/* "./a//b/" → "a/b"; "" for the root; -1 for a name with a ".." component. */
static int clean_path(const char *in, char *out, size_t cap) {
  size_t n = 0;
  for (const char *s = in; *s;) {
    while (*s == '/') s++;
    size_t len = strcspn(s, "/");
    if (len == 0) break;
    if (len == 2 && s[0] == '.' && s[1] == '.') return -1;
    if (!(len == 1 && s[0] == '.')) {
      if (n + len + 2 > cap) return -1;
      if (n) out[n++] = '/';
      memcpy(out + n, s, len);
      n += len;
    }
    s += len;
  }
  out[n] = 0;
  return 0;
}

int lt__mkdirs_in(int root, char *path, int chown, unsigned uid, unsigned gid) {
  int fd = lt__openat_in(root, path, O_PATH | O_DIRECTORY, 0);
  if (fd >= 0 || errno != ENOENT || !*path) return fd;
  char *slash = strrchr(path, '/');
  const char *name = slash ? slash + 1 : path;
  int pfd;
  if (slash) {
    *slash = 0;
    pfd = lt__mkdirs_in(root, path, chown, uid, gid);
    *slash = '/';
  } else {
    pfd = fcntl(root, F_DUPFD_CLOEXEC, 0);
  }
  if (pfd < 0) return -1;
  int ok = (mkdirat(pfd, name, 0755) == 0 || errno == EEXIST) &&
           (!chown || fchownat(pfd, name, uid, gid, AT_SYMLINK_NOFOLLOW) == 0);
  close(pfd);
  return ok ? lt__openat_in(root, path, O_PATH | O_DIRECTORY, 0) : -1;
}

/* The parent directory of `path` (made where missing), and the last component in *base. */
static int open_parent(apply_t *ap, char *path, const char **base) {
  char *slash = strrchr(path, '/');
  *base = slash ? slash + 1 : path;
  if (!slash) return fcntl(ap->root, F_DUPFD_CLOEXEC, 0);
  *slash = 0;
  int fd = lt__mkdirs_in(ap->root, path, ap->chown, ap->uid, ap->gid); /* a tar may name a file before its directory */
  *slash = '/';
  return fd;
}

/* Empties `dir` (relative to the root) of what this layer did not make, in its subdirectories too: an opaque
 * directory hides everything the layers below put under it. */
static int make_opaque(apply_t *ap, const char *dir) {
  int fd = lt__openat_in(ap->root, dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0);
  if (fd < 0) return errno == ENOENT || errno == ENOTDIR || errno == ELOOP ? 0 : -1;
  DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return -1;
  }
  int rc = 0;
  char p[4096];
  for (struct dirent *e; rc == 0 && (e = readdir(d));) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(p, sizeof p, "%s%s%s", dir, *dir ? "/" : "", e->d_name);
    if (!set_has(&ap->made, p)) rc = lt__remove_at(fd, e->d_name);
    else if (e->d_type == DT_DIR) rc = make_opaque(ap, p);
  }
  closedir(d);
  return rc;
}

static int write_data(struct archive *a, int fd) {
  const void *buf;
  size_t len;
  la_int64_t off;
  int r;
  while ((r = archive_read_data_block(a, &buf, &len, &off)) == ARCHIVE_OK) {
    for (size_t done = 0; done < len;) {
      ssize_t w = pwrite(fd, (const char *)buf + done, len - done, (off_t)off + (off_t)done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return -1;
      done += (size_t)w;
    }
  }
  if (r != ARCHIVE_EOF) {
    errno = EIO;
    return -1;
  }
  return 0;
}

#define FAIL(code, ...) (rc = lt_error_set(code, __VA_ARGS__))

static int apply_entry(apply_t *ap, struct archive *a, struct archive_entry *e) {
  char path[4096], target[4096];
  const char *name = archive_entry_pathname(e), *base;
  int rc = 0;
  if (!name || clean_path(name, path, sizeof path) != 0)
    return lt_error_set(LT_EINVAL, "%s: entry '%s' leaves the root", ap->what, name ? name : "(no name)");
  if (!path[0]) return 0; /* the root itself */
  const char *last = strrchr(path, '/');
  last = last ? last + 1 : path;
  if (strncmp(last, ".wh.", 4) == 0) {
    if (strcmp(last, ".wh..wh..opq") == 0) {
      path[last - path ? last - path - 1 : 0] = 0;
      if (make_opaque(ap, path) != 0)
        FAIL(lt_error_from_errno(errno), "%s: opaque directory '%s': %s", ap->what, path, strerror(errno));
      return rc;
    }
    snprintf(target, sizeof target, "%.*s%s", (int)(last - path), path, last + 4);
    int pfd = open_parent(ap, target, &base);
    if (pfd < 0)
      return errno == ENOENT ? 0 : lt_error_set(LT_EIO, "%s: whiteout '%s': %s", ap->what, name, strerror(errno));
    if (lt__remove_at(pfd, base) != 0) FAIL(LT_EIO, "%s: whiteout '%s': %s", ap->what, name, strerror(errno));
    close(pfd);
    return rc;
  }
  mode_t type = archive_entry_filetype(e), perm = archive_entry_perm(e) & 07777;
  const char *hard = archive_entry_hardlink(e);
  if (!hard && (type == AE_IFCHR || type == AE_IFBLK || type == AE_IFSOCK)) return 0; /* no devices, no sockets */
  int pfd = open_parent(ap, path, &base);
  if (pfd < 0) return lt_error_set(LT_EIO, "%s: '%s': its directory: %s", ap->what, name, strerror(errno));
  struct stat st;
  int exists = fstatat(pfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0;
  if (exists && !(type == AE_IFDIR && !hard && S_ISDIR(st.st_mode)) && lt__remove_at(pfd, base) != 0)
    FAIL(LT_EIO, "%s: '%s': cannot replace: %s", ap->what, name, strerror(errno));
  if (rc == 0 && hard) {
    if (clean_path(hard, target, sizeof target) != 0 || !target[0])
      FAIL(LT_EINVAL, "%s: hard link '%s' to '%s' leaves the root", ap->what, name, hard);
    const char *tbase;
    int tfd = rc == 0 ? open_parent(ap, target, &tbase) : -1;
    if (rc == 0 && (tfd < 0 || linkat(tfd, tbase, pfd, base, 0) != 0))
      FAIL(LT_EFORMAT, "%s: hard link '%s' to '%s': %s", ap->what, name, hard, strerror(errno));
    if (tfd >= 0) close(tfd);
    close(pfd);
    return rc == 0 ? set_add(&ap->made, path) : rc;
  }
  if (rc == 0) {
    int fd = -1, ok = 1;
    switch (type) {
    case AE_IFDIR:
      ok = (exists && S_ISDIR(st.st_mode)) || mkdirat(pfd, base, 0700) == 0;
      if (ok && ap->dirs) ok = lt__dirmode_add(ap->dirs, path, perm) == 0; /* a read-only directory may get children */
      break;
    case AE_IFLNK: ok = symlinkat(archive_entry_symlink(e) ? archive_entry_symlink(e) : "", pfd, base) == 0; break;
    case AE_IFIFO: ok = mkfifoat(pfd, base, 0600) == 0; break;
    default:
      fd = openat(pfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
      ok = fd >= 0 && write_data(a, fd) == 0 && ftruncate(fd, archive_entry_size(e)) == 0;
      break;
    }
    if (ok && ap->chown) ok = fchownat(pfd, base, ap->uid, ap->gid, AT_SYMLINK_NOFOLLOW) == 0;
    if (ok && type != AE_IFLNK && type != AE_IFDIR)
      ok = (fd >= 0 ? fchmod(fd, perm) : fchmodat(pfd, base, perm, 0)) == 0;
    if (ok && type != AE_IFDIR) {
      struct timespec t[2] = {{archive_entry_mtime(e), archive_entry_mtime_nsec(e)},
                              {archive_entry_mtime(e), archive_entry_mtime_nsec(e)}};
      ok = utimensat(pfd, base, t, AT_SYMLINK_NOFOLLOW) == 0;
    }
    if (!ok) FAIL(errno == ENOSPC ? LT_ENOSPC : LT_EIO, "%s: '%s': %s", ap->what, name, strerror(errno));
    if (fd >= 0) close(fd);
  }
  close(pfd);
  return rc == 0 ? set_add(&ap->made, path) : rc;
}

int lt__dirmode_add(lt__dirmode_t *d, const char *path, unsigned mode) {
  if (d->n == d->cap) {
    size_t cap = d->cap ? d->cap * 2 : 64;
    void *p = realloc(d->v, cap * sizeof *d->v);
    if (!p) return -1;
    d->v = p, d->cap = cap;
  }
  if (!(d->v[d->n].path = strdup(path))) return -1;
  d->v[d->n++].mode = mode;
  return 0;
}

int lt__dirmode_apply(lt__dirmode_t *d, int root) {
  int rc = 0;
  for (size_t i = d->n; i-- > 0;) { /* children before parents: a later entry of the same directory wins */
    int fd = lt__openat_in(root, d->v[i].path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0);
    if (fd < 0) continue; /* removed by a later layer */
    if (fchmod(fd, d->v[i].mode) != 0) rc = -1;
    close(fd);
  }
  return rc;
}

void lt__dirmode_free(lt__dirmode_t *d) {
  for (size_t i = 0; i < d->n; i++) free(d->v[i].path);
  free(d->v);
  memset(d, 0, sizeof *d);
}

static int in_pass(const lt__layer_t *l, struct archive_entry *e) {
  if (!l->split) return 1;
  int64_t over = l->split > 0 ? l->split : -l->split;
  int small = !archive_entry_hardlink(e) && (archive_entry_filetype(e) != AE_IFREG || archive_entry_size(e) <= over);
  return l->split > 0 ? small : !small;
}

int lt__layer_apply(const lt__layer_t *l, int root, lt__dirmode_t *dirs, char raw_hex[65]) {
  src_t *s = malloc(sizeof *s);
  if (!s) return lt_error_set(LT_ENOMEM, "%s: out of memory", l->what);
  s->fd = l->fd;
  lt_sha256_init(&s->h);
  apply_t ap = {.root = root, .what = l->what, .chown = l->chown, .uid = l->uid, .gid = l->gid, .dirs = dirs};
  struct archive *a = archive_read_new();
  int rc = 0;
  if (!a || archive_read_support_filter_gzip(a) != ARCHIVE_OK || archive_read_support_filter_zstd(a) != ARCHIVE_OK ||
      archive_read_support_format_tar(a) != ARCHIVE_OK || archive_read_open(a, s, NULL, src_read, NULL) != ARCHIVE_OK)
    FAIL(LT_EFORMAT, "%s: not a tar: %s", l->what, a ? archive_error_string(a) : "out of memory");
  struct archive_entry *e;
  int r = ARCHIVE_OK;
  while (rc == 0 && (r = archive_read_next_header(a, &e)) == ARCHIVE_OK) /* (the next header skips unread data) */
    rc = in_pass(l, e) ? apply_entry(&ap, a, e) : 0;
  if (rc == 0 && r != ARCHIVE_EOF) FAIL(LT_EFORMAT, "%s: not a valid tar: %s", l->what, archive_error_string(a));
  if (rc == 0 && src_drain(s) < 0) FAIL(LT_EIO, "%s: read: %s", l->what, strerror(errno));
  if (a) archive_read_free(a);
  set_free(&ap.made);
  if (rc == 0) lt_sha256_final(&s->h, raw_hex);
  free(s);
  return rc;
}
