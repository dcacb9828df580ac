#include "rollout/spool.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/error.h"
#include "util/fs.h"
#include "util/log.h"

#define LT_SPOOL_LOCK_WAIT_S 900

/* File layout: "LTSP1\n", u32 frame count, then per frame u64 length + bytes. */
static const char MAGIC[6] = "LTSP1\n";

typedef struct {
  uint64_t id;
  char *blob;
  size_t len;
} entry_t;

struct lt_spool {
  char *dir;
  int lock;            /* flock'ed dir/.lock: one worker per spool */
  entry_t *e;
  int n, cap;
};

static int add(lt_spool_t *s, uint64_t id, char *blob, size_t len) {
  if (s->n == s->cap) {
    int cap = s->cap ? 2 * s->cap : 16;
    entry_t *e = realloc(s->e, sizeof *e * (size_t)cap);
    if (!e) return lt_error_set(LT_ENOMEM, "spool: out of memory");
    s->e = e;
    s->cap = cap;
  }
  s->e[s->n++] = (entry_t){id, blob, len};
  return 0;
}

static int valid(const char *b, size_t len) {
  if (len < 10 || memcmp(b, MAGIC, 6)) return 0;
  uint32_t n;
  memcpy(&n, b + 6, 4);
  if (n < 1 || n > LT_PROTO_MAX_FRAMES) return 0;
  size_t off = 10;
  for (uint32_t i = 0; i < n; i++) {
    uint64_t l;
    if (off + 8 > len) return 0;
    memcpy(&l, b + off, 8);
    off += 8;
    if (l > len - off) return 0;
    off += (size_t)l;
  }
  return off == len;
}

int lt_spool_open(const char *dir, lt_spool_t **out) {
  *out = NULL;
  int rc = lt_fs_mkdirs(dir, 0700);
  if (rc < 0) return rc;
  lt_spool_t *s = calloc(1, sizeof *s);
  if (!s || !(s->dir = strdup(dir))) {
    free(s);
    return lt_error_set(LT_ENOMEM, "spool: out of memory");
  }
  /* A worker of the same name still running (e.g. one that outlived a killed
   * daemon) owns the spool: wait for it rather than share its files. */
  char lp[4096];
  s->lock = lt_path_join(lp, sizeof lp, dir, ".lock") == 0 ? open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0600) : -1;
  if (s->lock < 0) {
    lt_spool_close(s);
    return lt_error_set(LT_EIO, "spool %s: cannot create its lock: %s", dir, strerror(errno));
  }
  for (int waited = 0; flock(s->lock, LOCK_EX | LOCK_NB) != 0; waited++) {
    if (errno != EWOULDBLOCK || waited >= LT_SPOOL_LOCK_WAIT_S) {
      lt_spool_close(s);
      return lt_error_set(LT_EBUSY, "spool %s: held by another worker for %d s", dir, waited);
    }
    if (waited == 0) LT_WARN("spool", "%s is in use by another worker of this name: waiting for it", dir);
    sleep(1);
  }
  DIR *d = opendir(dir);
  if (!d) {
    lt_spool_close(s);
    return lt_error_set(LT_EIO, "spool %s: cannot list", dir);
  }
  for (struct dirent *de; (de = readdir(d));) {
    char *end;
    unsigned long long id = strtoull(de->d_name, &end, 10);
    if (strcmp(end, ".traj") != 0) continue;
    char path[4096], *blob;
    size_t len;
    if (lt_path_join(path, sizeof path, dir, de->d_name) < 0 || lt_fs_read_file(path, 1u << 30, &blob, &len) < 0) continue;
    /* A torn or foreign file cannot be a trajectory we promised to deliver. */
    if (!valid(blob, len)) {
      LT_WARN("spool", "%s: not a valid spooled trajectory, removed", path);
      free(blob);
      unlink(path);
      continue;
    }
    if ((rc = add(s, id, blob, len)) < 0) {
      free(blob);
      break;
    }
  }
  closedir(d);
  if (rc < 0) {
    lt_spool_close(s);
    return rc;
  }
  *out = s;
  return 0;
}

void lt_spool_close(lt_spool_t *s) {
  if (!s) return;
  for (int i = 0; i < s->n; i++) free(s->e[i].blob);
  if (s->lock >= 0) close(s->lock);
  free(s->e);
  free(s->dir);
  free(s);
}

int lt_spool_put(lt_spool_t *s, uint64_t id, const lt_frames_t *fr) {
  size_t len = 10;
  for (int i = 0; i < fr->n; i++) len += 8 + fr->f[i].len;
  char *b = malloc(len);
  if (!b) return lt_error_set(LT_ENOMEM, "spool: out of memory");
  memcpy(b, MAGIC, 6);
  uint32_t n = (uint32_t)fr->n;
  memcpy(b + 6, &n, 4);
  size_t off = 10;
  for (int i = 0; i < fr->n; i++) {
    uint64_t l = fr->f[i].len;
    memcpy(b + off, &l, 8);
    off += 8;
    if (l) memcpy(b + off, fr->f[i].data, l);
    off += l;
  }
  char path[4096], name[64];
  snprintf(name, sizeof name, "%llu.traj", (unsigned long long)id);
  int rc = lt_path_join(path, sizeof path, s->dir, name);
  if (rc == 0) rc = lt_fs_write_atomic(path, b, len);
  if (rc == 0) {
    lt_spool_drop(s, id); /* replaces an older copy of the same task */
    rc = add(s, id, b, len);
  }
  if (rc < 0) free(b);
  return rc;
}

int lt_spool_drop(lt_spool_t *s, uint64_t id) {
  for (int i = 0; i < s->n; i++) {
    if (s->e[i].id != id) continue;
    char path[4096], name[64];
    snprintf(name, sizeof name, "%llu.traj", (unsigned long long)id);
    if (lt_path_join(path, sizeof path, s->dir, name) == 0) unlink(path);
    free(s->e[i].blob);
    s->e[i] = s->e[--s->n];
    return 1;
  }
  return 0;
}

int lt_spool_count(const lt_spool_t *s) { return s->n; }
uint64_t lt_spool_id(const lt_spool_t *s, int i) { return s->e[i].id; }

int lt_spool_frames(const lt_spool_t *s, int i, lt_frame_t *fr, int *n) {
  const char *b = s->e[i].blob;
  uint32_t k;
  memcpy(&k, b + 6, 4);
  size_t off = 10;
  for (uint32_t j = 0; j < k; j++) {
    uint64_t l;
    memcpy(&l, b + off, 8);
    off += 8;
    fr[j] = (lt_frame_t){(void *)(b + off), (size_t)l, 0};
    off += (size_t)l;
  }
  *n = (int)k;
  return 0;
}
