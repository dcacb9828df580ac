/* A box's files from the host side (sandbox/image.h): reads and writes through the O_PATH descriptor of its root,
 * resolved inside it (RESOLVE_IN_ROOT: ".." and absolute symlinks stop at the root; RESOLVE_NO_XDEV: never into
 * its /proc, /dev or any other mount), done with the box user's host id as this thread's file-system id, so that
 * what is written belongs to the box's user and what it could not touch is not touched.  What changed is read from
 * the overlay's upper directory: whiteouts (character devices 0/0) are deletions, "user.overlay.opaque" directories
 * hide the image's, anything else there is new or modified (a copy-up that changed nothing is left out). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "sandbox/image.h"
#include "sandbox/internal.h"
#include "util/error.h"

/* This thread acts as the box's user on files until as_self(). */
static void as_box_user(void) {
  setfsgid(lt__box_host_gid());
  setfsuid(lt__box_host_uid());
}

static void as_self(void) {
  setfsuid(geteuid());
  setfsgid(getegid());
}

int lt_box_read_file(lt_box_t *b, const char *path, size_t max, char **out, size_t *len) {
  as_box_user();
  int rc = lt__read_in(b->sb->root_fd, path, max, out, len);
  as_self();
  return rc;
}

/* Replaced whole: written to a temporary file beside it and renamed over it, so that a write that fails (the layer
 * full) leaves the old content.  A symlink as the last component is followed (in the root), as open(2) would. */
int lt_box_write_file(lt_box_t *b, const char *path, const void *data, size_t len, int mode) {
  char rel[4096], link[4096], tmp[64];
  const char *shown = path;
  while (*path == '/') path++;
  if (!*path || snprintf(rel, sizeof rel, "%s", path) >= (int)sizeof rel)
    return lt_error_set(LT_EINVAL, "%s: not a file path", shown);
  as_box_user();
  int rc = 0, dir = -1, fd = -1;
  const char *base = rel;
  for (int hops = 0; rc == 0; hops++) {
    char *slash = strrchr(rel, '/');
    base = slash ? slash + 1 : rel;
    if (slash) *slash = 0;
    if (dir >= 0) close(dir);
    dir = lt__mkdirs_in(b->sb->root_fd, slash ? rel : "", 0, 0, 0);
    if (slash) *slash = '/';
    struct stat st;
    if (dir < 0) rc = lt_error_set(lt_error_from_errno(errno), "%s: its directory: %s", shown, strerror(errno));
    else if (!*base || fstatat(dir, base, &st, AT_SYMLINK_NOFOLLOW) != 0) break; /* a new file */
    else if (S_ISREG(st.st_mode)) {
      if (!mode) mode = (int)(st.st_mode & 07777);
      break;
    } else if (!S_ISLNK(st.st_mode) || hops == 40) rc = lt_error_set(LT_EINVAL, "%s: not a regular file", shown);
    else { /* the link's target, absolute in the root or relative to the link's directory */
      ssize_t k = readlinkat(dir, base, link, sizeof link - 1);
      if (k <= 0) {
        rc = lt_error_set(LT_EIO, "%s: %s", shown, strerror(errno));
        break;
      }
      link[k] = 0;
      size_t keep = link[0] == '/' ? 0 : (size_t)(base - rel);
      if (keep + (size_t)k >= sizeof rel) rc = lt_error_set(LT_ERANGE, "%s: link target too long", shown);
      else snprintf(rel + keep, sizeof rel - keep, "%s", link + (link[0] == '/'));
    }
  }
  static unsigned counter;
  snprintf(tmp, sizeof tmp, ".lt-write-%d-%u", (int)getpid(), __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED));
  if (rc == 0 && (fd = openat(dir, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)) < 0)
    rc = lt_error_set(errno == ENOSPC ? LT_ENOSPC : lt_error_from_errno(errno), "%s: %s", shown, strerror(errno));
  for (size_t off = 0; rc == 0 && off < len;) {
    ssize_t w = write(fd, (const char *)data + off, len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) rc = lt_error_set(errno == ENOSPC ? LT_ENOSPC : LT_EIO, "%s: %s", shown, strerror(errno));
    else off += (size_t)w;
  }
  if (rc == 0 && fchmod(fd, (mode_t)(mode ? mode : 0644)) != 0)
    rc = lt_error_set(LT_EIO, "%s: chmod: %s", shown, strerror(errno));
  if (rc == 0 && renameat(dir, tmp, dir, base) != 0)
    rc = lt_error_set(errno == ENOSPC ? LT_ENOSPC : lt_error_from_errno(errno), "%s: %s", shown, strerror(errno));
  if (fd >= 0) close(fd);
  if (rc < 0 && fd >= 0) unlinkat(dir, tmp, 0);
  if (dir >= 0) close(dir);
  as_self();
  return rc;
}

/* ---- changes -------------------------------------------------------------------------- */

typedef struct {
  const char *dir; /* only paths at or below it */
  size_t dirlen;
  lt_box_change_t *v;
  int n, cap, err;
} changes_t;

static int wanted(const changes_t *c, const char *path) {
  return c->dirlen <= 1 || (strncmp(path, c->dir, c->dirlen) == 0 && (path[c->dirlen] == 0 || path[c->dirlen] == '/'));
}

/* At or below dir, or on the way down to it: elsewhere nothing is read (a test run's __pycache__ in the image's
 * library directories can be thousands of files). */
static int on_way(const changes_t *c, const char *path) {
  size_t n = strlen(path);
  return wanted(c, path) || (n < c->dirlen && strncmp(c->dir, path, n) == 0 && c->dir[n] == '/');
}

static void emit(changes_t *c, const char *path, lt_box_change_kind kind, uint32_t old_mode, uint32_t new_mode) {
  if (c->err || !wanted(c, path)) return;
  if (c->n == c->cap) {
    int cap = c->cap ? c->cap * 2 : 32;
    lt_box_change_t *v = realloc(c->v, (size_t)cap * sizeof *v);
    if (!v) {
      c->err = LT_ENOMEM;
      return;
    }
    c->v = v, c->cap = cap;
  }
  if (!(c->v[c->n].path = strdup(path))) {
    c->err = LT_ENOMEM;
    return;
  }
  c->v[c->n].kind = kind, c->v[c->n].old_mode = old_mode, c->v[c->n].new_mode = new_mode;
  c->n++;
}

static int open_dir(int at, const char *name) {
  return openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

/* Every non-directory under the image's `name` (in lower), as deleted; `name` itself when it is not a directory. */
static void deleted(changes_t *c, int lower, const char *name, const char *path, const struct stat *st) {
  if (!S_ISDIR(st->st_mode)) {
    emit(c, path, LT_BOX_DELETED, st->st_mode, 0);
    return;
  }
  int fd = open_dir(lower, name);
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  if (!d) {
    if (fd >= 0) close(fd);
    c->err = LT_EIO;
    return;
  }
  char p[4096];
  struct stat s;
  for (struct dirent *e; (e = readdir(d));) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(p, sizeof p, "%s/%s", path, e->d_name);
    if (on_way(c, p) && fstatat(dirfd(d), e->d_name, &s, AT_SYMLINK_NOFOLLOW) == 0)
      deleted(c, dirfd(d), e->d_name, p, &s);
  }
  closedir(d);
}

/* 1 when two regular files or symlinks of the same mode differ in content or target. */
static int differ(int ua, const char *name, int la, const struct stat *us, const struct stat *ls) {
  if (us->st_mode != ls->st_mode || us->st_size != ls->st_size) return 1;
  if (S_ISLNK(us->st_mode)) {
    char a[4096], b[4096];
    ssize_t na = readlinkat(ua, name, a, sizeof a), nb = readlinkat(la, name, b, sizeof b);
    return na != nb || na < 0 || memcmp(a, b, (size_t)na) != 0;
  }
  if (!S_ISREG(us->st_mode)) return 0;
  int fa = openat(ua, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC),
      fb = openat(la, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  int diff = fa < 0 || fb < 0;
  static _Thread_local char x[65536], y[65536];
  while (!diff) {
    ssize_t na = read(fa, x, sizeof x), nb = read(fb, y, sizeof y);
    if (na != nb || na < 0 || memcmp(x, y, (size_t)na) != 0) diff = 1;
    if (na <= 0) break;
  }
  if (fa >= 0) close(fa);
  if (fb >= 0) close(fb);
  return diff;
}

/* upper: a directory of the writable layer; lower: the image's directory at the same path (-1: none); hidden: the
 * upper one is opaque (what lower holds and upper does not is deleted). */
static void walk(changes_t *c, int upper, int lower, int hidden, const char *path) {
  DIR *d = fdopendir(upper);
  if (!d) {
    close(upper);
    if (lower >= 0) close(lower);
    c->err = LT_EIO;
    return;
  }
  char p[4096];
  struct stat us, ls;
  for (struct dirent *e; !c->err && (e = readdir(d));) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(p, sizeof p, "%s/%s", path, e->d_name);
    if (!on_way(c, p) || fstatat(dirfd(d), e->d_name, &us, AT_SYMLINK_NOFOLLOW) != 0) continue;
    int in_lower = lower >= 0 && fstatat(lower, e->d_name, &ls, AT_SYMLINK_NOFOLLOW) == 0;
    if (S_ISCHR(us.st_mode) && us.st_rdev == makedev(0, 0)) { /* a whiteout */
      if (in_lower) deleted(c, lower, e->d_name, p, &ls);
      continue;
    }
    if (S_ISDIR(us.st_mode)) {
      if (in_lower && !S_ISDIR(ls.st_mode)) deleted(c, lower, e->d_name, p, &ls);
      int sub = open_dir(dirfd(d), e->d_name);
      if (sub < 0) continue;
      char v[2] = "";
      int opaque = fgetxattr(sub, "user.overlay.opaque", v, 1) == 1 && v[0] == 'y';
      int lsub = in_lower && S_ISDIR(ls.st_mode) ? open_dir(lower, e->d_name) : -1;
      walk(c, sub, lsub, opaque, p);
      continue;
    }
    if (!in_lower) emit(c, p, LT_BOX_ADDED, 0, us.st_mode);
    else if (S_ISDIR(ls.st_mode)) deleted(c, lower, e->d_name, p, &ls), emit(c, p, LT_BOX_ADDED, 0, us.st_mode);
    else if (differ(dirfd(d), e->d_name, lower, &us, &ls)) emit(c, p, LT_BOX_MODIFIED, ls.st_mode, us.st_mode);
  }
  if (hidden && lower >= 0 && !c->err) { /* an opaque directory: the image's entries it does not hold are gone */
    int fd = dup(lower);
    DIR *l = fd >= 0 ? fdopendir(fd) : NULL;
    for (struct dirent *e; l && (e = readdir(l));) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
          fstatat(dirfd(d), e->d_name, &us, AT_SYMLINK_NOFOLLOW) == 0)
        continue;
      snprintf(p, sizeof p, "%s/%s", path, e->d_name);
      if (on_way(c, p) && fstatat(lower, e->d_name, &ls, AT_SYMLINK_NOFOLLOW) == 0)
        deleted(c, lower, e->d_name, p, &ls);
    }
    if (l) closedir(l);
    else if (fd >= 0) close(fd);
  }
  closedir(d);
  if (lower >= 0) close(lower);
}

static int by_path(const void *a, const void *b) {
  return strcmp(((const lt_box_change_t *)a)->path, ((const lt_box_change_t *)b)->path);
}

int lt_box_changes(lt_box_t *b, const char *dir, lt_box_change_t **out, int *n) {
  *out = NULL;
  *n = 0;
  char d[4096];
  size_t len = strlen(dir ? dir : "/");
  snprintf(d, sizeof d, "%s", dir && *dir ? dir : "/");
  while (len > 1 && d[len - 1] == '/') d[--len] = 0;
  if (d[0] != '/') return lt_error_set(LT_EINVAL, "box: changes under '%s': not an absolute path", d);
  changes_t c = {.dir = d, .dirlen = strlen(d)};
  int upper = open_dir(b->sb->upper_fd, "."), lower = open_dir(lt__image_rootfs_fd(b->img), ".");
  if (upper < 0 || lower < 0) {
    if (upper >= 0) close(upper);
    if (lower >= 0) close(lower);
    return lt_error_set(LT_EIO, "box: its layers: %s", strerror(errno));
  }
  walk(&c, upper, lower, 0, "");
  if (c.err) {
    lt_box_changes_free(c.v, c.n);
    return lt_error_set(c.err, "box: reading its writable layer: %s",
                        c.err == LT_ENOMEM ? "out of memory" : strerror(errno));
  }
  if (c.n) qsort(c.v, (size_t)c.n, sizeof *c.v, by_path);
  *out = c.v;
  *n = c.n;
  return 0;
}

void lt_box_changes_free(lt_box_change_t *c, int n) {
  for (int i = 0; i < n; i++) free(c[i].path);
  free(c);
}
