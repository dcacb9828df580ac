/* File-system helpers (util/fs.h): whole-file reads, crash-safe writes, directories. */
#include "util/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/error.h"

static int sys_err(const char *what, const char *path) {
  int e = errno;
  return lt_error_set(lt_error_from_errno(e), "%s %s: %s", what, path, strerror(e));
}

int lt_fs_read_file(const char *path, size_t max_bytes, char **out, size_t *len) {
  *out = NULL;
  *len = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return sys_err("cannot open", path);
  struct stat st;
  if (fstat(fd, &st) < 0) {
    int rc = sys_err("cannot stat", path);
    close(fd);
    return rc;
  }
  if (S_ISDIR(st.st_mode)) {
    close(fd);
    return lt_error_set(LT_EINVAL, "%s: is a directory, expected a file", path);
  }
  size_t cap = S_ISREG(st.st_mode) ? (size_t)st.st_size + 1 : 4096;
  if (S_ISREG(st.st_mode) && (size_t)st.st_size > max_bytes) {
    close(fd);
    return lt_error_set(LT_ERANGE, "%s: file too large (%lld bytes, limit %zu)", path, (long long)st.st_size,
                        max_bytes);
  }
  char *buf = malloc(cap);
  if (!buf) {
    close(fd);
    return lt_error_set(LT_ENOMEM, "%s: out of memory", path);
  }
  size_t n = 0;
  for (;;) {
    if (n + 1 >= cap) {
      if (cap > max_bytes) {
        free(buf);
        close(fd);
        return lt_error_set(LT_ERANGE, "%s: file too large (limit %zu bytes)", path, max_bytes);
      }
      char *nb = realloc(buf, cap * 2);
      if (!nb) {
        free(buf);
        close(fd);
        return lt_error_set(LT_ENOMEM, "%s: out of memory", path);
      }
      buf = nb;
      cap *= 2;
    }
    ssize_t r = read(fd, buf + n, cap - n - 1);
    if (r < 0) {
      if (errno == EINTR) continue;
      int rc = sys_err("cannot read", path);
      free(buf);
      close(fd);
      return rc;
    }
    if (r == 0) break;
    n += (size_t)r;
  }
  close(fd);
  buf[n] = 0;
  *out = buf;
  *len = n;
  return 0;
}

int lt_fs_sync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return sys_err("cannot open directory", dir);
  int rc = 0;
  if (fsync(fd) < 0 && errno != EINVAL) rc = sys_err("cannot fsync", dir);
  close(fd);
  return rc;
}

int lt_fs_pwrite_sync(int fd, const char *path, const void *data, size_t len, uint64_t off) {
  const char *p = data;
  while (len) {
    ssize_t w = pwrite(fd, p, len, (off_t)off);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return sys_err("cannot write", path);
    p += w, off += (uint64_t)w, len -= (size_t)w;
  }
  return fdatasync(fd) < 0 ? sys_err("cannot fdatasync", path) : 0;
}

int lt_fs_write_atomic(const char *path, const void *data, size_t len) {
  char tmp[4096];
  if (snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof tmp)
    return lt_error_set(LT_ERANGE, "path too long: %s", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return sys_err("cannot create", tmp);
  const char *p = data;
  size_t left = len;
  while (left) {
    ssize_t w = write(fd, p, left);
    if (w < 0) {
      if (errno == EINTR) continue;
      int rc = sys_err("cannot write", tmp);
      close(fd);
      unlink(tmp);
      return rc;
    }
    p += w;
    left -= (size_t)w;
  }
  if (fsync(fd) < 0) {
    int rc = sys_err("cannot fsync", tmp);
    close(fd);
    unlink(tmp);
    return rc;
  }
  if (close(fd) < 0) {
    int rc = sys_err("cannot close", tmp);
    unlink(tmp);
    return rc;
  }
  if (rename(tmp, path) < 0) {
    int rc = sys_err("cannot rename into", path);
    unlink(tmp);
    return rc;
  }
  return lt_fs_sync_parent(path);
}

int lt_fs_sync_parent(const char *path) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  return lt_fs_sync_dir(dirname(dir));
}

int lt_fs_mkdirs(const char *path, int mode) {
  char buf[4096];
  if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
    return lt_error_set(LT_ERANGE, "path too long: %s", path);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(buf, (mode_t)mode) < 0 && errno != EEXIST) return sys_err("cannot create directory", buf);
    *p = '/';
  }
  if (mkdir(buf, (mode_t)mode) < 0 && errno != EEXIST) return sys_err("cannot create directory", buf);
  if (!lt_fs_is_dir(buf)) return lt_error_set(LT_EIO, "%s: exists and is not a directory", buf);
  return 0;
}

int lt_fs_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

int lt_fs_is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(p);
}

int lt_fs_remove_tree(const char *path) {
  if (!path[0] || strcmp(path, "/") == 0) return lt_error_set(LT_EINVAL, "refusing to remove '%s'", path);
  if (!lt_fs_exists(path)) return 0;
  if (nftw(path, rm_cb, 16, FTW_DEPTH | FTW_PHYS) < 0) return sys_err("cannot remove", path);
  return 0;
}

int lt_path_join(char *out, size_t cap, const char *a, const char *b) {
  size_t la = strlen(a);
  int n = snprintf(out, cap, "%s%s%s", a, (la && a[la - 1] == '/') ? "" : "/", b);
  if (n < 0 || (size_t)n >= cap) return lt_error_set(LT_ERANGE, "path too long: %s/%s", a, b);
  return 0;
}

void lt_path_base(const char *path, char *out, size_t cap) {
  size_t n = strlen(path);
  while (n > 1 && path[n - 1] == '/') n--; /* "runs/x/" names x */
  size_t b = n;
  while (b > 0 && path[b - 1] != '/') b--;
  snprintf(out, cap, "%.*s", (int)(n - b), path + b);
}

int lt_fs_self_exe(char *out, size_t cap) {
  ssize_t n = readlink("/proc/self/exe", out, cap - 1);
  if (n < 0) return sys_err("cannot resolve", "/proc/self/exe");
  out[n] = 0;
  return 0;
}

/* Open-file-description locks: like flock they belong to the open file (not
 * the process, unlike POSIX record locks), and unlike flock they can be
 * queried (F_OFD_GETLK) without being taken. */
int lt_fs_lock(const char *path, int *fd) {
  *fd = -1;
  int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (f < 0) return lt_error_set(lt_error_from_errno(errno), "%s: %s", path, strerror(errno));
  struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
  if (fcntl(f, F_OFD_SETLK, &l) < 0) {
    int e = errno;
    close(f);
    if (e == EAGAIN || e == EACCES) return lt_error_set(LT_EBUSY, "%s: locked by another process", path);
    return lt_error_set(lt_error_from_errno(e), "%s: lock: %s", path, strerror(e));
  }
  *fd = f;
  return 0;
}

int lt_fs_lock_pid(const char *path, int *fd, char *holder, size_t cap) {
  int rc = lt_fs_lock(path, fd);
  if (rc == LT_EBUSY) {
    char *pid = NULL;
    size_t n;
    if (lt_fs_read_file(path, 64, &pid, &n) == 0) pid[strcspn(pid, "\n")] = 0;
    snprintf(holder, cap, "%s", pid && pid[0] ? pid : "unknown");
    free(pid);
  }
  if (rc < 0) return rc;
  char line[32];
  int len = snprintf(line, sizeof line, "%d\n", (int)getpid());
  if (ftruncate(*fd, 0) < 0 || pwrite(*fd, line, (size_t)len, 0) != len) {
    close(*fd);
    *fd = -1;
    return lt_error_set(LT_EIO, "%s: cannot write the pid", path);
  }
  return 0;
}

int lt_fs_lock_held(const char *path) {
  int f = open(path, O_RDONLY | O_CLOEXEC);
  if (f < 0) return errno == ENOENT ? 0 : lt_error_set(lt_error_from_errno(errno), "%s: %s", path, strerror(errno));
  struct flock l = {.l_type = F_RDLCK, .l_whence = SEEK_SET};
  int rc = fcntl(f, F_OFD_GETLK, &l);
  int e = errno;
  close(f);
  if (rc < 0) return lt_error_set(lt_error_from_errno(e), "%s: lock query: %s", path, strerror(e));
  return l.l_type != F_UNLCK;
}

int lt_fs_copy_file(const char *src, const char *dst) {
  int in = open(src, O_RDONLY | O_CLOEXEC);
  if (in < 0) return sys_err("cannot open", src);
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp.%d", dst, (int)getpid());
  int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) {
    int rc = sys_err("cannot create", tmp);
    close(in);
    return rc;
  }
  static __thread char buf[1 << 16];
  int rc = 0;
  for (ssize_t n; rc == 0;) {
    n = read(in, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) rc = sys_err("cannot read", src);
    if (n <= 0) break;
    for (ssize_t off = 0; rc == 0 && off < n;) {
      ssize_t w = write(out, buf + off, (size_t)(n - off));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) rc = sys_err("cannot write", tmp);
      else off += w;
    }
  }
  if (rc == 0 && fsync(out) < 0) rc = sys_err("cannot sync", tmp);
  if (close(out) < 0 && rc == 0) rc = sys_err("cannot write", tmp);
  close(in);
  if (rc == 0 && rename(tmp, dst) < 0) rc = sys_err("cannot rename into", dst);
  if (rc < 0) {
    unlink(tmp);
    return rc;
  }
  return lt_fs_sync_parent(dst);
}
