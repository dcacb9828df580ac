/* Weight deltas: XOR of two versions of a file, streamed through zstd (util/delta.h). */
#include "util/delta.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "util/error.h"
#include "util/fs.h"

#define MAGIC "LTDELTA1"
#define HEAD_LEN (8 + 32 + 32 + 8)
#define CHUNK (1 << 20)

static void hex(const unsigned char *d, char out[65]) {
  for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static int io_err(const char *what, const char *path) {
  int e = errno;
  return lt_error_set(lt_error_from_errno(e), "%s %s: %s", what, path, strerror(e));
}

/* Reads up to n bytes (fewer only at the end); a missing tail reads as zeros when `pad`. */
static size_t read_full(FILE *f, unsigned char *b, size_t n, int pad) {
  size_t got = f ? fread(b, 1, n, f) : 0;
  if (pad && got < n) memset(b + got, 0, n - got);
  return got;
}

/* A temporary file beside `out`, renamed into place by finish(). */
typedef struct {
  char tmp[4200];
  const char *out;
  FILE *f;
} outfile_t;

static int out_open(outfile_t *o, const char *out) {
  o->out = out;
  snprintf(o->tmp, sizeof o->tmp, "%s.tmp.%d", out, (int)getpid());
  if (!(o->f = fopen(o->tmp, "wb"))) return io_err("cannot create", o->tmp);
  return 0;
}

static int out_finish(outfile_t *o, int keep) {
  int ok = keep && fflush(o->f) == 0 && fsync(fileno(o->f)) == 0;
  int e = errno;
  if (fclose(o->f) != 0 && ok) ok = 0, e = errno;
  if (ok && rename(o->tmp, o->out) == 0) return lt_fs_sync_parent(o->out);
  if (ok) e = errno; /* the rename failed */
  unlink(o->tmp);
  if (!keep) return 0;
  errno = e ? e : EIO;
  return io_err("cannot write", o->out);
}

static int file_sha(const char *path, unsigned char out[32], int64_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return io_err("cannot open", path);
  unsigned char *b = malloc(CHUNK);
  if (!b) {
    fclose(f);
    return lt_error_set(LT_ENOMEM, "out of memory");
  }
  crypto_hash_sha256_state st;
  crypto_hash_sha256_init(&st);
  size_t n;
  *size = 0;
  while ((n = fread(b, 1, CHUNK, f)) > 0) {
    crypto_hash_sha256_update(&st, b, n);
    *size += (int64_t)n;
  }
  int bad = ferror(f);
  fclose(f);
  free(b);
  if (bad) return lt_error_set(LT_EIO, "cannot read %s", path);
  crypto_hash_sha256_final(&st, out);
  return 0;
}

int lt_delta_create(const char *base, const char *target, const char *out, lt_delta_info_t *info) {
  unsigned char bsha[32], tsha[32];
  int64_t bsize, tsize;
  int rc = file_sha(base, bsha, &bsize);
  if (rc == 0) rc = file_sha(target, tsha, &tsize);
  if (rc < 0) return rc;
  FILE *fb = fopen(base, "rb"), *ft = fopen(target, "rb");
  unsigned char *a = malloc(CHUNK), *b = malloc(CHUNK);
  size_t zcap = ZSTD_CStreamOutSize();
  unsigned char *z = malloc(zcap);
  ZSTD_CCtx *cx = ZSTD_createCCtx();
  outfile_t o = {0};
  if (!fb || !ft) rc = io_err("cannot open", fb ? target : base);
  else if (!a || !b || !z || !cx) rc = lt_error_set(LT_ENOMEM, "out of memory");
  else rc = out_open(&o, out);
  if (rc == 0) {
    unsigned char head[HEAD_LEN];
    memcpy(head, MAGIC, 8);
    memcpy(head + 8, bsha, 32);
    memcpy(head + 40, tsha, 32);
    for (int i = 0; i < 8; i++) head[72 + i] = (unsigned char)((uint64_t)tsize >> (8 * i));
    if (fwrite(head, 1, HEAD_LEN, o.f) != HEAD_LEN) rc = io_err("cannot write", o.tmp);
    /* Level 3 with long-distance matching off: the XOR is mostly zero runs, which any level compresses well. */
    ZSTD_CCtx_setParameter(cx, ZSTD_c_compressionLevel, 3);
    ZSTD_CCtx_setPledgedSrcSize(cx, (unsigned long long)tsize);
    for (int64_t done = 0; rc == 0;) {
      size_t n = read_full(ft, a, CHUNK, 0);
      read_full(fb, b, n, 1);
      for (size_t i = 0; i < n; i++) a[i] ^= b[i];
      done += (int64_t)n;
      int last = n < CHUNK || done == tsize;
      ZSTD_inBuffer in = {a, n, 0};
      size_t left;
      do {
        ZSTD_outBuffer zo = {z, zcap, 0};
        left = ZSTD_compressStream2(cx, &zo, &in, last ? ZSTD_e_end : ZSTD_e_continue);
        if (ZSTD_isError(left)) rc = lt_error_set(LT_EIO, "%s: zstd: %s", out, ZSTD_getErrorName(left));
        else if (fwrite(z, 1, zo.pos, o.f) != zo.pos) rc = io_err("cannot write", o.tmp);
      } while (rc == 0 && (last ? left != 0 : in.pos < in.size));
      if (last) break;
    }
    if (rc == 0 && (ferror(fb) || ferror(ft))) rc = lt_error_set(LT_EIO, "cannot read %s or %s", base, target);
    int frc = out_finish(&o, rc == 0);
    if (rc == 0) rc = frc;
  }
  if (fb) fclose(fb);
  if (ft) fclose(ft);
  free(a);
  free(b);
  free(z);
  ZSTD_freeCCtx(cx);
  if (rc == 0 && info) {
    hex(bsha, info->base_sha);
    hex(tsha, info->target_sha);
    info->target_size = tsize;
  }
  return rc;
}

static int read_head(FILE *f, const char *path, unsigned char bsha[32], unsigned char tsha[32], int64_t *size) {
  unsigned char h[HEAD_LEN];
  if (fread(h, 1, HEAD_LEN, f) != HEAD_LEN || memcmp(h, MAGIC, 8))
    return lt_error_set(LT_ECORRUPT, "%s: not a longtail weight delta (no %s header)", path, MAGIC);
  memcpy(bsha, h + 8, 32);
  memcpy(tsha, h + 40, 32);
  uint64_t s = 0;
  for (int i = 0; i < 8; i++) s |= (uint64_t)h[72 + i] << (8 * i);
  if (s > (uint64_t)INT64_MAX) return lt_error_set(LT_ECORRUPT, "%s: target size %llu", path, (unsigned long long)s);
  *size = (int64_t)s;
  return 0;
}

int lt_delta_info(const char *delta, lt_delta_info_t *info) {
  FILE *f = fopen(delta, "rb");
  if (!f) return io_err("cannot open", delta);
  unsigned char b[32], t[32];
  int rc = read_head(f, delta, b, t, &info->target_size);
  fclose(f);
  if (rc == 0) {
    hex(b, info->base_sha);
    hex(t, info->target_sha);
  }
  return rc;
}

int lt_delta_apply(const char *base, const char *delta, const char *out) {
  FILE *fd = fopen(delta, "rb"), *fb = fopen(base, "rb");
  unsigned char bsha[32], tsha[32], got[32];
  int64_t tsize = 0;
  int rc = !fd   ? io_err("cannot open", delta)
           : !fb ? io_err("cannot open", base)
                 : read_head(fd, delta, bsha, tsha, &tsize);
  size_t zcap = ZSTD_DStreamInSize(), ocap = ZSTD_DStreamOutSize();
  unsigned char *z = malloc(zcap), *x = malloc(ocap), *b = malloc(ocap);
  ZSTD_DCtx *dx = ZSTD_createDCtx();
  outfile_t o = {0};
  if (rc == 0 && (!z || !x || !b || !dx)) rc = lt_error_set(LT_ENOMEM, "out of memory");
  if (rc == 0) rc = out_open(&o, out);
  if (rc == 0) {
    /* The base is not hashed: XOR with any other base cannot give the announced target's hash. */
    crypto_hash_sha256_state st;
    crypto_hash_sha256_init(&st);
    int64_t written = 0;
    size_t zret = 1, n;
    while (rc == 0 && (n = fread(z, 1, zcap, fd)) > 0) {
      ZSTD_inBuffer in = {z, n, 0};
      while (rc == 0 && in.pos < in.size) {
        ZSTD_outBuffer xo = {x, ocap, 0};
        zret = ZSTD_decompressStream(dx, &xo, &in);
        if (ZSTD_isError(zret)) {
          rc = lt_error_set(LT_ECORRUPT, "%s: damaged delta (zstd: %s)", delta, ZSTD_getErrorName(zret));
          break;
        }
        if (written + (int64_t)xo.pos > tsize) {
          rc = lt_error_set(LT_ECORRUPT, "%s: the delta holds more than the %lld bytes it announces", delta,
                            (long long)tsize);
          break;
        }
        read_full(fb, b, xo.pos, 1);
        for (size_t i = 0; i < xo.pos; i++) x[i] ^= b[i];
        crypto_hash_sha256_update(&st, x, xo.pos);
        if (fwrite(x, 1, xo.pos, o.f) != xo.pos) rc = io_err("cannot write", o.tmp);
        written += (int64_t)xo.pos;
      }
    }
    if (rc == 0 && (ferror(fd) || ferror(fb))) rc = lt_error_set(LT_EIO, "cannot read %s or %s", delta, base);
    if (rc == 0 && (zret != 0 || written != tsize))
      rc =
          lt_error_set(LT_ECORRUPT, "%s: torn delta (%lld of %lld bytes)", delta, (long long)written, (long long)tsize);
    if (rc == 0) {
      crypto_hash_sha256_final(&st, got);
      if (memcmp(got, tsha, 32)) {
        char want[65], have[65], from[65];
        hex(tsha, want);
        hex(got, have);
        hex(bsha, from);
        rc = lt_error_set(LT_ECORRUPT,
                          "%s: reconstructed sha256 %.12s, announced %.12s (a delta against sha256 %.12s: "
                          "is %s that file?)",
                          delta, have, want, from, base);
      }
    }
    int frc = out_finish(&o, rc == 0);
    if (rc == 0) rc = frc;
  }
  if (fd) fclose(fd);
  if (fb) fclose(fb);
  free(z);
  free(x);
  free(b);
  ZSTD_freeDCtx(dx);
  return rc;
}

void lt_delta_offer(const char *dir, const char *sha, char base[65], int64_t *bytes) {
  /* The delta's header (80 bytes) says which model file it applies to; a version without one has none. */
  char p[4200];
  lt_delta_info_t di;
  struct stat st;
  snprintf(p, sizeof p, "%s/delta.zst", dir);
  base[0] = 0;
  *bytes = 0;
  if (lt_fs_exists(p) && lt_delta_info(p, &di) == 0 && !strcmp(di.target_sha, sha)) {
    memcpy(base, di.base_sha, 65);
    *bytes = stat(p, &st) == 0 ? (int64_t)st.st_size : 0;
  }
  lt_error_clear();
}
