/* The worker's spool (rollout/spool.h): finished trajectories kept on disk in segments until the daemon
 * acknowledges them. */
#include "rollout/spool.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/error.h"
#include "util/fs.h"
#include "util/log.h"

#define LT_SPOOL_LOCK_WAIT_S 900
/* A segment takes batches until it passes SEGMENT_BYTES, or IDLE_BYTES at a
 * moment when everything in it is acknowledged (then it is removed at once).
 * A file per batch cost a worker with 800 sessions about half its CPU (ext4's
 * inode allocation under open(O_CREAT)); a segment is created once per tens of
 * trajectories at least. */
#define LT_SPOOL_SEGMENT_BYTES (1u << 20)
#define LT_SPOOL_SEGMENT_IDLE_BYTES (64u << 10)

/* A record (one trajectory): "LTSP1\n", u32 frame count, then per frame u64
 * length + bytes.  A batch: "LTSB1\n", u32 count, then per record u64 task id,
 * u64 length, the record; in a segment ("LTSB2\n") followed by the u64 FNV-1a
 * hash of everything before it, so a batch torn by a crash is told from a
 * whole one.  A segment also holds acknowledgement notes: "LTSA2\n", u32
 * count, the u64 task ids acknowledged (or replaced) since the last batch, the
 * hash; each written ahead of the next batch and at a clean stop, so a restart
 * resends only what was not acknowledged (a crash loses the notes since the
 * last batch: those are resent, and rejected as duplicates).  Files:
 * sNNN.spool, a segment: batches appended one after the other, each written
 * with one fdatasync (a new segment's first also syncs the directory), the
 * file removed when it is no longer appended to and its last record is
 * acknowledged; bNNN.spool (one batch) and NNN.traj (one record) are what
 * older workers left, read at start and removed the same way. */
static const char MAGIC[6] = "LTSP1\n";
static const char BATCH_MAGIC[6] = "LTSB1\n";
static const char SEGMENT_MAGIC[6] = "LTSB2\n";
static const char ACK_MAGIC[6] = "LTSA2\n";

typedef struct {
  uint64_t id;
  char *blob;
  size_t len;
  int file;                      /* index in files[]; IN_MEMORY, or WRITING while its batch is written */
  const lt_spool_batch_t *batch; /* the batch writing it */
} entry_t;

enum { IN_MEMORY = -1, WRITING = -2 };

struct lt_spool_batch {
  char path[4096]; /* its segment */
  int fi, fd,
      fresh;    /* the segment (index, descriptor); fresh: no batch of it is on disk yet (sync its directory too) */
  uint64_t off; /* where in the segment */
  char *buf;
  size_t len;
};

typedef struct {
  char name[64];
  int live;        /* records of it not yet acknowledged */
  int fd, writing; /* a segment: its descriptor while open, batches being written to it */
  int fresh;       /* a segment none of whose batches is on disk yet */
} file_t;

struct lt_spool {
  char *dir;
  int lock; /* flock'ed dir/.lock: one worker per spool */
  entry_t *e;
  int n, cap;
  file_t *f;
  int nf, capf;
  uint64_t seq;     /* next file number */
  int seg;          /* the segment batches are appended to (index in f[], -1: none) */
  uint64_t seg_len; /* bytes appended to it so far */
  uint64_t *acked;  /* task ids whose records in the current segment were acknowledged since its last batch */
  int nacked, capacked;
};

static uint64_t fnv1a(const char *p, size_t n) {
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)p[i]) * 1099511628211ull;
  return h;
}

static int spool_add(lt_spool_t *s, uint64_t id, char *blob, size_t len, int file) {
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
  for (int i = 0; i < s->nf; i++)
    if (s->f[i].live == 0 && s->f[i].fd < 0) { /* a file removed since: its slot serves again */
      s->f[i] = (file_t){.live = live, .fd = -1};
      snprintf(s->f[i].name, sizeof s->f[0].name, "%s", name);
      return i;
    }
  if (s->nf == s->capf) {
    int cap = s->capf ? 2 * s->capf : 16;
    file_t *f = realloc(s->f, sizeof *f * (size_t)cap);
    if (!f) return lt_error_set(LT_ENOMEM, "spool: out of memory");
    s->f = f;
    s->capf = cap;
  }
  s->f[s->nf] = (file_t){.live = live, .fd = -1};
  snprintf(s->f[s->nf].name, sizeof s->f[0].name, "%s", name);
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

/* The batch at b[off..len) starting with magic: where its records end (a
 * segment's hash follows there), or 0 when it does not parse. */
static size_t batch_end(const char *b, size_t len, size_t off, const char *magic, uint32_t *count) {
  if (len - off < 10 || memcmp(b + off, magic, 6)) return 0;
  memcpy(count, b + off + 6, 4);
  size_t p = off + 10;
  for (uint32_t k = 0; k < *count; k++) {
    uint64_t l;
    if (len - p < 16) return 0;
    memcpy(&l, b + p + 8, 8);
    p += 16;
    if (l > len - p || !valid(b + p, (size_t)l)) return 0;
    p += (size_t)l;
  }
  return *count ? p : 0;
}

/* Whether the u64 after b[off..end) is the FNV-1a hash of that span (a segment's batch or note is whole). */
static int hashed(const char *b, size_t len, size_t off, size_t end) {
  uint64_t h;
  if (len - end < 8) return 0;
  memcpy(&h, b + end, 8);
  return h == fnv1a(b + off, end - off);
}

/* Keeps a parsed batch's records, as entries of file fi. */
static int load_batch(lt_spool_t *s, const char *b, size_t off, uint32_t count, int fi) {
  size_t p = off + 10;
  for (uint32_t k = 0; k < count; k++) {
    uint64_t tid, l;
    memcpy(&tid, b + p, 8);
    memcpy(&l, b + p + 8, 8);
    p += 16;
    char *rec = malloc((size_t)l);
    if (!rec) return lt_error_set(LT_ENOMEM, "spool: out of memory");
    memcpy(rec, b + p, (size_t)l);
    p += (size_t)l;
    int rc = spool_add(s, tid, rec, (size_t)l, fi);
    if (rc < 0) {
      free(rec);
      return rc;
    }
    s->f[fi].live++;
  }
  return 0;
}

static void unlink_file(lt_spool_t *s, int fi) {
  char path[4096];
  if (lt_path_join(path, sizeof path, s->dir, s->f[fi].name) == 0 && unlink(path) < 0 && errno != ENOENT)
    LT_WARN("spool", "cannot remove %s: %s (a restart resends what it holds, as duplicates)", path, strerror(errno));
}

/* A note read back: the records of file fi under these ids were acknowledged. */
static void forget(lt_spool_t *s, const char *ids, uint32_t count, int fi) {
  for (uint32_t k = 0; k < count; k++) {
    uint64_t id;
    memcpy(&id, ids + 8 * (size_t)k, 8);
    for (int i = s->n - 1; i >= 0; i--)
      if (s->e[i].id == id && s->e[i].file == fi) {
        free(s->e[i].blob);
        s->e[i] = s->e[--s->n];
        s->f[fi].live--;
        break;
      }
  }
}

/* Reads one file an earlier run left: kind 's' a segment, 'b' a batch file,
 * 't' a single record (id its task).  Returns 0 or an error; a file that holds
 * nothing to deliver is removed. */
static int spool_load_file(lt_spool_t *s, const char *path, const char *name, int kind, uint64_t id) {
  char *blob;
  size_t len;
  if (lt_fs_read_file(path, 1u << 30, &blob, &len) < 0) {
    LT_WARN("spool", "%s: cannot read it, its trajectories are not resent: %s", path, lt_error_msg());
    return 0;
  }
  int fi = add_file(s, name, 0), rc = 0;
  if (fi < 0) {
    free(blob);
    return fi;
  }
  size_t off = 0; /* how far the file is whole */
  if (kind == 't') {
    if (valid(blob, len) && (rc = spool_add(s, id, blob, len, fi)) == 0) {
      s->f[fi].live = 1;
      blob = NULL;
      off = len;
    }
  } else {
    /* A segment is read batch by batch up to the first that is torn (a crash
     * while it was written: it was never sent); a batch file is one batch. */
    for (uint32_t cnt = 0; off < len && rc == 0;) {
      int note = kind == 's' && len - off >= 10 && !memcmp(blob + off, ACK_MAGIC, 6);
      if (note) memcpy(&cnt, blob + off + 6, 4);
      size_t end = !note ? batch_end(blob, len, off, kind == 's' ? SEGMENT_MAGIC : BATCH_MAGIC, &cnt)
                   : cnt <= (len - off - 10) / 8 ? off + 10 + 8 * (size_t)cnt
                                                 : 0;
      if (!end || (kind == 's' && !hashed(blob, len, off, end))) break;
      if (note) forget(s, blob + off + 10, cnt, fi);
      else rc = load_batch(s, blob, off, cnt, fi);
      off = kind == 's' ? end + 8 : len;
    }
  }
  free(blob);
  if (rc == 0 && off < len)
    LT_WARN(
        "spool", "%s: %s at byte %zu (%zu bytes ignored)", path,
        kind == 's' ? "a torn or damaged batch (a crash while it was written, or the disk)" : "not a valid spool file",
        off, len - off);
  if (s->f[fi].live == 0) unlink_file(s, fi);
  return rc;
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
  s->seg = -1;
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
    char *end, c = de->d_name[0], path[4096];
    unsigned long long id = strtoull(c == 'b' || c == 's' ? de->d_name + 1 : de->d_name, &end, 10);
    int num = c == 'b' || c == 's';
    int kind = !isdigit((unsigned char)de->d_name[num]) ? 0 /* not ours: "s-1.spool" would wrap the numbering */
               : num && !strcmp(end, ".spool")          ? c
               : !num && !strcmp(end, ".traj")          ? 't'
                                                        : 0;
    if (!kind || lt_path_join(path, sizeof path, dir, de->d_name) < 0) continue;
    if (kind != 't' && id >= s->seq) s->seq = id + 1;
    rc = spool_load_file(s, path, de->d_name, kind, id);
  }
  closedir(d);
  if (rc < 0) {
    lt_spool_close(s);
    return rc;
  }
  *out = s;
  return 0;
}

/* A segment no batch goes to any more is closed once none is being written
 * to it, and removed once nothing in it waits for an ACK either. */
static void spool_retire(lt_spool_t *s, int fi) {
  file_t *f = &s->f[fi];
  if (fi == s->seg || f->writing) return;
  if (f->fd >= 0) close(f->fd);
  f->fd = -1;
  if (f->live == 0) unlink_file(s, fi);
}

static void seal(lt_spool_t *s) {
  int fi = s->seg;
  s->seg = -1;
  s->nacked = 0; /* notes concern the segment they would be written to */
  if (fi >= 0) spool_retire(s, fi);
}

static int segment_new(lt_spool_t *s) {
  char name[64], path[4096];
  snprintf(name, sizeof name, "s%llu.spool", (unsigned long long)s->seq);
  if (lt_path_join(path, sizeof path, s->dir, name) < 0)
    return lt_error_set(LT_ERANGE, "spool %s: path too long", s->dir);
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return lt_error_set(lt_error_from_errno(errno), "spool: cannot create %s: %s", path, strerror(errno));
  int fi = add_file(s, name, 0);
  if (fi < 0) {
    close(fd);
    unlink(path);
    return fi;
  }
  s->seq++;
  s->f[fi].fd = fd, s->f[fi].fresh = 1;
  s->seg = fi, s->seg_len = 0;
  return 0;
}

/* The size of the pending acknowledgement note, 0 when there is none. */
static size_t note_len(const lt_spool_t *s) { return s->nacked ? 10 + 8 * (size_t)s->nacked + 8 : 0; }

/* Writes the pending acknowledgement note into b (note_len bytes) and empties the list. */
static void note_write(lt_spool_t *s, char *b) {
  uint32_t cnt = (uint32_t)s->nacked;
  memcpy(b, ACK_MAGIC, 6);
  memcpy(b + 6, &cnt, 4);
  memcpy(b + 10, s->acked, 8 * (size_t)cnt);
  uint64_t h = fnv1a(b, 10 + 8 * (size_t)cnt);
  memcpy(b + 10 + 8 * (size_t)cnt, &h, 8);
  s->nacked = 0;
}

void lt_spool_close(lt_spool_t *s) {
  if (!s) return;
  /* A clean stop leaves no acknowledged record of the current segment behind
   * to resend: it goes if it holds only such records, else gets its last
   * notes.  (Acknowledged records in earlier segments that still hold others
   * are resent after a restart, as duplicates.) */
  if (s->seg >= 0 && s->nacked && s->f[s->seg].live && !s->f[s->seg].writing) {
    size_t len = note_len(s);
    char *b = malloc(len), path[4096];
    if (b && lt_path_join(path, sizeof path, s->dir, s->f[s->seg].name) == 0) {
      note_write(s, b);
      if (lt_fs_pwrite_sync(s->f[s->seg].fd, path, b, len, s->seg_len) < 0) LT_WARN("spool", "%s", lt_error_msg());
    }
    free(b);
  }
  seal(s);
  for (int i = 0; i < s->nf; i++)
    if (s->f[i].fd >= 0) close(s->f[i].fd);
  for (int i = 0; i < s->n; i++) free(s->e[i].blob);
  if (s->lock >= 0) close(s->lock);
  free(s->e);
  free(s->acked);
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
  int rc = spool_add(s, id, b, len, IN_MEMORY);
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
  int k = lt_spool_pending(s), rc;
  if (k == 0) return 0;
  /* Also while a batch is still being written to it (a reconnect's flush beside the writer thread's): one
   * appended behind it would be lost on a restart should that one fail or never reach the disk. */
  if (s->seg >= 0 && (s->seg_len >= LT_SPOOL_SEGMENT_BYTES || s->f[s->seg].writing)) seal(s);
  if (s->seg < 0 && (rc = segment_new(s)) < 0) return rc;
  lt_spool_batch_t *b = calloc(1, sizeof *b);
  size_t note = note_len(s), len = note + 10 + 8;
  for (int i = 0; i < s->n; i++)
    if (s->e[i].file == IN_MEMORY) len += 16 + s->e[i].len;
  if (!b || !(b->buf = malloc(len))) {
    free(b);
    return lt_error_set(LT_ENOMEM, "spool: out of memory");
  }
  file_t *f = &s->f[s->seg];
  lt_path_join(b->path, sizeof b->path, s->dir, f->name); /* fits: segment_new joined it */
  b->fi = s->seg, b->fd = f->fd, b->fresh = f->fresh, b->off = s->seg_len;
  f->writing++;
  if (note) note_write(s, b->buf); /* the notes first, in the same write */
  char *rec = b->buf + note;
  memcpy(rec, SEGMENT_MAGIC, 6);
  uint32_t cnt = (uint32_t)k;
  memcpy(rec + 6, &cnt, 4);
  size_t off = 10;
  for (int i = 0; i < s->n; i++) {
    entry_t *e = &s->e[i];
    if (e->file != IN_MEMORY) continue;
    uint64_t l = e->len;
    memcpy(rec + off, &e->id, 8);
    memcpy(rec + off + 8, &l, 8);
    memcpy(rec + off + 16, e->blob, e->len);
    off += 16 + e->len;
    e->file = WRITING;
    e->batch = b;
  }
  uint64_t h = fnv1a(rec, off);
  memcpy(rec + off, &h, 8);
  b->len = len;
  s->seg_len += len; /* reserved: the next batch goes after it, whether or not this one is written */
  *out = b;
  return k;
}

int lt_spool_batch_write(lt_spool_batch_t *b) {
  int rc = lt_fs_pwrite_sync(b->fd, b->path, b->buf, b->len, b->off);
  struct stat st;
  /* A segment removed from under the worker (its spool directory deleted) takes writes nobody can read back. */
  if (rc == 0 && fstat(b->fd, &st) < 0)
    rc = lt_error_set(LT_EIO, "spool: cannot stat %s: %s", b->path, strerror(errno));
  else if (rc == 0 && st.st_nlink == 0)
    rc = lt_error_set(LT_EIO, "spool: %s was removed while the worker wrote to it", b->path);
  if (rc == 0 && b->fresh) rc = lt_fs_sync_parent(b->path); /* the segment's directory entry, once */
  return rc;
}

int lt_spool_batch_done(lt_spool_t *s, lt_spool_batch_t *b, int rc, lt_spool_durable_fn durable, void *ud) {
  /* Records dropped or replaced while it was written no longer count. */
  int live = 0;
  for (int i = 0; i < s->n; i++) live += s->e[i].file == WRITING && s->e[i].batch == b;
  int fi = b->fi;
  s->f[fi].writing--;
  if (rc < 0 && fi == s->seg) seal(s); /* what a failed write left in it is garbage: the next batch starts anew */
  if (rc == 0) s->f[fi].live += live, s->f[fi].fresh = 0;
  spool_retire(s, fi);
  for (int i = 0; i < s->n; i++) {
    entry_t *e = &s->e[i];
    if (e->file != WRITING || e->batch != b) continue;
    e->batch = NULL;
    e->file = rc < 0 ? IN_MEMORY : fi; /* not on disk: it goes with the next batch */
    if (rc == 0 && durable) {
      lt_frame_t fr[LT_PROTO_MAX_FRAMES];
      int n;
      lt_spool_frames(s, i, fr, &n);
      durable(e->id, fr, n, ud);
    }
  }
  if (rc == 0 && durable && live) durable(0, NULL, 0, ud); /* the batch is complete */
  free(b->buf);
  free(b);
  return rc < 0 ? rc : live;
}

int lt_spool_flush(lt_spool_t *s, lt_spool_durable_fn durable, void *ud) {
  lt_spool_batch_t *b;
  int k = lt_spool_batch_take(s, &b);
  if (k <= 0) return k;
  return lt_spool_batch_done(s, b, lt_spool_batch_write(b), durable, ud);
}

int lt_spool_durable(const lt_spool_t *s, int i) { return s->e[i].file >= 0; }

/* Remembers that the record of task id in the current segment is acknowledged, for its next note. */
static void note(lt_spool_t *s, uint64_t id) {
  if (s->nacked == s->capacked) {
    int cap = s->capacked ? 2 * s->capacked : 64;
    uint64_t *a = realloc(s->acked, sizeof *a * (size_t)cap);
    if (!a) return; /* without the note a restart resends it: a duplicate, not a loss */
    s->acked = a;
    s->capacked = cap;
  }
  s->acked[s->nacked++] = id;
}

int lt_spool_drop(lt_spool_t *s, uint64_t id) {
  for (int i = 0; i < s->n; i++) {
    if (s->e[i].id != id) continue;
    int fi = s->e[i].file;
    if (s->seg >= 0 && (fi == s->seg || (fi == WRITING && s->e[i].batch->fi == s->seg))) note(s, id);
    if (fi >= 0 && --s->f[fi].live == 0) {
      if (fi == s->seg && !s->f[fi].writing && s->seg_len >= LT_SPOOL_SEGMENT_IDLE_BYTES) seal(s);
      spool_retire(s, fi); /* the current segment stays until sealed */
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
