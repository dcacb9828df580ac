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

/* A record (one trajectory): "LTSP1\n", u32 frame count, then per frame u64
 * length + bytes.  Files: NNN.traj holds one record (older workers); bNNN.spool
 * holds a batch: "LTSB1\n", u32 count, then per record u64 task id, u64
 * length, the record.  A batch file is written once, fsync'ed with its
 * directory, and removed when its last record is acknowledged. */
static const char MAGIC[6] = "LTSP1\n";
static const char BATCH_MAGIC[6] = "LTSB1\n";

typedef struct {
  uint64_t id;
  char *blob;
  size_t len;
  int file;            /* index in files[]; IN_MEMORY, or WRITING while its batch is written */
  const lt_spool_batch_t *batch; /* the batch writing it */
} entry_t;

enum { IN_MEMORY = -1, WRITING = -2 };

struct lt_spool_batch {
  char name[64], path[4096];
  char *buf;
  size_t len;
};

typedef struct {
  char name[64];
  int live;            /* records of it not yet acknowledged */
} file_t;

struct lt_spool {
  char *dir;
  int lock;            /* flock'ed dir/.lock: one worker per spool */
  entry_t *e;
  int n, cap;
  file_t *f;
  int nf, capf;
  uint64_t seq;        /* next batch file number */
};

static int add(lt_spool_t *s, uint64_t id, char *blob, size_t len, int file) {
  if (s->n == s->cap) {
    int cap = s->cap ? 2 * s->cap : 16;
    entry_t *e = realloc(s->e, sizeof *e * (size_t)cap);
    if (!e) return lt_error_set(LT_ENOMEM, "spool: out of memory");
    s->e = e;
    s->cap = cap;
  }
  s->e[s->n++] = (entry_t){.id = id, .blob = blob, .len = len, .file = file};
  return 0;
}

static int add_file(lt_spool_t *s, const char *name, int live) {
  if (s->nf == s->capf) {
    int cap = s->capf ? 2 * s->capf : 16;
    file_t *f = realloc(s->f, sizeof *f * (size_t)cap);
    if (!f) return lt_error_set(LT_ENOMEM, "spool: out of memory");
    s->f = f;
    s->capf = cap;
  }
  snprintf(s->f[s->nf].name, sizeof s->f[0].name, "%s", name);
  s->f[s->nf].live = live;
  return s->nf++;
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
  for (struct dirent *de; (de = readdir(d)) && rc == 0;) {
    char *end;
    unsigned long long id = strtoull(de->d_name[0] == 'b' ? de->d_name + 1 : de->d_name, &end, 10);
    int batch = de->d_name[0] == 'b' && !strcmp(end, ".spool");
    if (!batch && strcmp(end, ".traj") != 0) continue;
    if (batch && id >= s->seq) s->seq = id + 1;
    char path[4096], *blob;
    size_t len;
    if (lt_path_join(path, sizeof path, dir, de->d_name) < 0 || lt_fs_read_file(path, 1u << 30, &blob, &len) < 0) continue;
    int fi = add_file(s, de->d_name, 0);
    if (fi < 0) {
      free(blob);
      rc = fi;
      break;
    }
    /* A torn or foreign file cannot hold a trajectory we promised to deliver. */
    int ok = 1;
    if (!batch) {
      ok = valid(blob, len);
      if (ok && (rc = add(s, id, blob, len, fi)) == 0) s->f[fi].live = 1;
      if (!ok || rc < 0) free(blob);
    } else if (len < 10 || memcmp(blob, BATCH_MAGIC, 6)) {
      ok = 0;
      free(blob);
    } else {
      uint32_t cnt;
      memcpy(&cnt, blob + 6, 4);
      size_t off = 10;
      for (uint32_t k = 0; k < cnt && ok && rc == 0; k++) {
        uint64_t tid, l;
        if (off + 16 > len) {
          ok = 0;
          break;
        }
        memcpy(&tid, blob + off, 8);
        memcpy(&l, blob + off + 8, 8);
        off += 16;
        char *rec = l <= len - off && valid(blob + off, (size_t)l) ? malloc((size_t)l) : NULL;
        if (!rec) {
          ok = 0;
          break;
        }
        memcpy(rec, blob + off, (size_t)l);
        off += (size_t)l;
        if ((rc = add(s, tid, rec, (size_t)l, fi)) < 0) free(rec);
        else s->f[fi].live++;
      }
      free(blob);
    }
    if (!ok) {
      LT_WARN("spool", "%s: not a valid spool file, removed", path);
      /* Records read before the damage are still delivered; the file goes when they are acknowledged. */
      if (s->f[fi].live == 0) unlink(path);
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
  free(s->f);
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
  lt_spool_drop(s, id); /* replaces an older copy of the same task */
  int rc = add(s, id, b, len, IN_MEMORY);
  if (rc < 0) free(b);
  return rc;
}

int lt_spool_pending(const lt_spool_t *s) {
  int k = 0;
  for (int i = 0; i < s->n; i++) k += s->e[i].file == IN_MEMORY;
  return k;
}

int lt_spool_batch_take(lt_spool_t *s, lt_spool_batch_t **out) {
  *out = NULL;
  int k = lt_spool_pending(s);
  if (k == 0) return 0;
  lt_spool_batch_t *b = calloc(1, sizeof *b);
  size_t len = 10;
  for (int i = 0; i < s->n; i++)
    if (s->e[i].file == IN_MEMORY) len += 16 + s->e[i].len;
  if (!b || !(b->buf = malloc(len))) {
    free(b);
    return lt_error_set(LT_ENOMEM, "spool: out of memory");
  }
  snprintf(b->name, sizeof b->name, "b%llu.spool", (unsigned long long)s->seq);
  if (lt_path_join(b->path, sizeof b->path, s->dir, b->name) < 0) {
    free(b->buf);
    free(b);
    return lt_error_set(LT_ERANGE, "spool %s: path too long", s->dir);
  }
  s->seq++;
  memcpy(b->buf, BATCH_MAGIC, 6);
  uint32_t cnt = (uint32_t)k;
  memcpy(b->buf + 6, &cnt, 4);
  size_t off = 10;
  for (int i = 0; i < s->n; i++) {
    entry_t *e = &s->e[i];
    if (e->file != IN_MEMORY) continue;
    uint64_t l = e->len;
    memcpy(b->buf + off, &e->id, 8);
    memcpy(b->buf + off + 8, &l, 8);
    memcpy(b->buf + off + 16, e->blob, e->len);
    off += 16 + e->len;
    e->file = WRITING;
    e->batch = b;
  }
  b->len = len;
  *out = b;
  return k;
}

int lt_spool_batch_write(lt_spool_batch_t *b) {
  return lt_fs_write_atomic(b->path, b->buf, b->len); /* one fsync of the file, one of the directory */
}

int lt_spool_batch_done(lt_spool_t *s, lt_spool_batch_t *b, int rc, lt_spool_durable_fn durable, void *ud) {
  /* Records dropped or replaced while it was written no longer count. */
  int live = 0;
  for (int i = 0; i < s->n; i++) live += s->e[i].file == WRITING && s->e[i].batch == b;
  int fi = rc;
  if (rc == 0 && live) fi = add_file(s, b->name, live);
  if (rc == 0 && (fi < 0 || !live)) unlink(b->path);
  for (int i = 0; i < s->n; i++) {
    entry_t *e = &s->e[i];
    if (e->file != WRITING || e->batch != b) continue;
    e->batch = NULL;
    e->file = fi < 0 ? IN_MEMORY : fi; /* not on disk: it goes with the next batch */
    if (fi >= 0 && durable) {
      lt_frame_t fr[LT_PROTO_MAX_FRAMES];
      int n;
      lt_spool_frames(s, i, fr, &n);
      durable(e->id, fr, n, ud);
    }
  }
  if (fi >= 0 && durable && live) durable(0, NULL, 0, ud); /* the batch is complete */
  free(b->buf);
  free(b);
  return fi < 0 ? fi : live;
}

int lt_spool_flush(lt_spool_t *s, lt_spool_durable_fn durable, void *ud) {
  lt_spool_batch_t *b;
  int k = lt_spool_batch_take(s, &b);
  if (k <= 0) return k;
  return lt_spool_batch_done(s, b, lt_spool_batch_write(b), durable, ud);
}

int lt_spool_durable(const lt_spool_t *s, int i) { return s->e[i].file >= 0; }

int lt_spool_drop(lt_spool_t *s, uint64_t id) {
  for (int i = 0; i < s->n; i++) {
    if (s->e[i].id != id) continue;
    int fi = s->e[i].file;
    if (fi >= 0 && --s->f[fi].live == 0) {
      char path[4096];
      if (lt_path_join(path, sizeof path, s->dir, s->f[fi].name) == 0) unlink(path);
    }
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
