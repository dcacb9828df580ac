/* safetensors files (learner/safetensors.h): reading F32/BF16/F16 as fp32, writing F32, every offset checked. */
#include "learner/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"

float lt_bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

uint16_t lt_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
  u += 0x7fff + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}

float lt_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else { /* subnormal */
      float f = ldexpf((float)man, -24);
      return sign ? -f : f;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000 | (man << 13);
  } else {
    u = sign | ((exp + 112) << 23) | (man << 13);
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static size_t dtype_size(lt_st_dtype d) { return d == LT_ST_F32 ? 4 : 2; }

int64_t lt_st_numel(const lt_st_entry_t *e) {
  int64_t n = 1;
  for (int i = 0; i < e->ndim; i++) n *= e->shape[i];
  return n;
}

void lt_st_close(lt_st_file_t *f) {
  if (!f) return;
  if (f->map) munmap((void *)f->map, f->size);
  for (int i = 0; i < f->n; i++) free(f->entries[i].name);
  free(f->entries);
  free(f->path);
  cJSON_Delete(f->meta);
  free(f);
}

static int parse_entry(lt_st_file_t *f, const cJSON *j, lt_st_entry_t *e) {
  const char *p = f->path, *nm = j->string;
  const cJSON *dt = cJSON_GetObjectItemCaseSensitive(j, "dtype");
  const cJSON *sh = cJSON_GetObjectItemCaseSensitive(j, "shape");
  const cJSON *off = cJSON_GetObjectItemCaseSensitive(j, "data_offsets");
  if (!cJSON_IsObject(j) || !cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(off) ||
      cJSON_GetArraySize(off) != 2)
    return lt_error_set(LT_EFORMAT, "%s: tensor '%s': expected {dtype, shape, data_offsets}", p, nm);
  if (strcmp(dt->valuestring, "F32") == 0) e->dtype = LT_ST_F32;
  else if (strcmp(dt->valuestring, "BF16") == 0) e->dtype = LT_ST_BF16;
  else if (strcmp(dt->valuestring, "F16") == 0) e->dtype = LT_ST_F16;
  else
    return lt_error_set(LT_EUNSUPP, "%s: tensor '%s': dtype %s is not supported (F32, BF16, F16)", p, nm,
                        dt->valuestring);
  e->ndim = cJSON_GetArraySize(sh);
  if (e->ndim > 4) return lt_error_set(LT_EFORMAT, "%s: tensor '%s': more than 4 dimensions", p, nm);
  int64_t numel = 1;
  int i = 0;
  for (const cJSON *d = sh->child; d; d = d->next, i++) {
    if (!cJSON_IsNumber(d) || d->valuedouble < 0 || d->valuedouble > 1e12 || d->valuedouble != floor(d->valuedouble))
      return lt_error_set(LT_EFORMAT, "%s: tensor '%s': bad shape", p, nm);
    e->shape[i] = (int64_t)d->valuedouble;
    numel *= e->shape[i];
    if (numel > ((int64_t)1 << 40)) return lt_error_set(LT_EFORMAT, "%s: tensor '%s': too large", p, nm);
  }
  double b = off->child->valuedouble, en = off->child->next->valuedouble;
  if (!cJSON_IsNumber(off->child) || !cJSON_IsNumber(off->child->next) || b < 0 || en < b ||
      en > (double)f->data_size || b != floor(b) || en != floor(en))
    return lt_error_set(LT_EFORMAT,
                        "%s: tensor '%s': data_offsets [%.0f, %.0f] outside the %zu-byte data section "
                        "(truncated file?)",
                        p, nm, b, en, f->data_size);
  e->begin = (size_t)b;
  e->end = (size_t)en;
  if ((int64_t)(e->end - e->begin) != numel * (int64_t)dtype_size(e->dtype))
    return lt_error_set(LT_EFORMAT, "%s: tensor '%s': %zu bytes do not match its shape and dtype", p, nm,
                        e->end - e->begin);
  e->name = strdup(nm);
  return e->name ? 0 : lt_error_set(LT_ENOMEM, "out of memory");
}

int lt_st_open(const char *path, lt_st_file_t **out) {
  *out = NULL;
  lt_st_file_t *f = calloc(1, sizeof *f);
  if (!f || !(f->path = strdup(path))) {
    free(f);
    return lt_error_set(LT_ENOMEM, "out of memory");
  }
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int rc = lt_error_set(lt_error_from_errno(errno), "cannot open %s: %s", path, strerror(errno));
    lt_st_close(f);
    return rc;
  }
  struct stat st;
  if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    lt_st_close(f);
    return lt_error_set(LT_EFORMAT, "%s: not a regular file", path);
  }
  f->size = (size_t)st.st_size;
  if (f->size < 8) {
    close(fd);
    lt_st_close(f);
    return lt_error_set(LT_EFORMAT, "%s: truncated safetensors file (%zu bytes)", path, (size_t)st.st_size);
  }
  void *map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED) {
    lt_st_close(f);
    return lt_error_set(LT_EIO, "cannot map %s: %s", path, strerror(errno));
  }
  f->map = map;
  uint64_t hlen = 0;
  for (int i = 0; i < 8; i++) hlen |= (uint64_t)f->map[i] << (8 * i);
  if (hlen > f->size - 8 || hlen > (100u << 20)) {
    lt_st_close(f);
    return lt_error_set(LT_EFORMAT, "%s: header length %llu exceeds the file (truncated or not safetensors)", path,
                        (unsigned long long)hlen);
  }
  f->data = f->map + 8 + hlen;
  f->data_size = f->size - 8 - hlen;
  cJSON *h;
  int rc = lt_json_parse((const char *)f->map + 8, hlen, path, &h);
  if (rc < 0) {
    lt_st_close(f);
    return rc;
  }
  if (!cJSON_IsObject(h)) {
    cJSON_Delete(h);
    lt_st_close(f);
    return lt_error_set(LT_EFORMAT, "%s: header is not a JSON object", path);
  }
  int n = cJSON_GetArraySize(h);
  f->entries = calloc((size_t)(n ? n : 1), sizeof *f->entries);
  if (!f->entries) rc = lt_error_set(LT_ENOMEM, "out of memory");
  for (const cJSON *j = h->child; j && rc == 0; j = j->next) {
    if (strcmp(j->string, "__metadata__") == 0) {
      if (!cJSON_IsObject(j) || f->meta) {
        rc = lt_error_set(LT_EFORMAT, "%s: __metadata__ is %s", path, f->meta ? "given twice" : "not an object");
        break;
      }
      if (!(f->meta = cJSON_Duplicate(j, 1))) rc = lt_error_set(LT_ENOMEM, "out of memory");
      continue;
    }
    rc = parse_entry(f, j, &f->entries[f->n]);
    if (rc == 0) f->n++;
  }
  cJSON_Delete(h);
  if (rc < 0) {
    lt_st_close(f);
    return rc;
  }
  *out = f;
  return 0;
}

const char *lt_st_meta(const lt_st_file_t *f, const char *key) {
  const cJSON *v = f->meta ? cJSON_GetObjectItemCaseSensitive(f->meta, key) : NULL;
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

const lt_st_entry_t *lt_st_find(const lt_st_file_t *f, const char *name) {
  for (int i = 0; i < f->n; i++)
    if (strcmp(f->entries[i].name, name) == 0) return &f->entries[i];
  return NULL;
}

int lt_st_read_f32(const lt_st_file_t *f, const lt_st_entry_t *e, float *dst) {
  const uint8_t *p = f->data + e->begin;
  int64_t n = lt_st_numel(e);
  if (e->dtype == LT_ST_F32) {
    memcpy(dst, p, (size_t)n * 4);
    return 0;
  }
  for (int64_t i = 0; i < n; i++) {
    uint16_t h = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
    dst[i] = e->dtype == LT_ST_BF16 ? lt_bf16_to_f32(h) : lt_f16_to_f32(h);
  }
  return 0;
}

/* Tensor i's data in `dtype`, written through a small buffer (BF16: rounded to nearest even). */
static int write_data(FILE *fp, const float *x, int64_t numel, lt_st_dtype dtype) {
  if (dtype == LT_ST_F32) return fwrite(x, 4, (size_t)numel, fp) == (size_t)numel;
  uint8_t buf[8192];
  for (int64_t i = 0; i < numel;) {
    size_t k = 0;
    for (; k < sizeof buf / 2 && i < numel; k++, i++) {
      uint16_t h = lt_f32_to_bf16(x[i]);
      buf[2 * k] = (uint8_t)h;
      buf[2 * k + 1] = (uint8_t)(h >> 8);
    }
    if (fwrite(buf, 2, k, fp) != k) return 0;
  }
  return 1;
}

int lt_st_write(const char *path, const lt_st_tensor_t *t, int n, const char *metadata_json) {
  return lt_st_write_as(path, t, n, metadata_json, LT_ST_F32);
}

int lt_st_write_as(const char *path, const lt_st_tensor_t *t, int n, const char *metadata_json, lt_st_dtype dtype) {
  if (dtype != LT_ST_F32 && dtype != LT_ST_BF16)
    return lt_error_set(LT_EUNSUPP, "%s: only F32 and BF16 are written", path);
  size_t esz = dtype_size(dtype);
  lt_buf_t h = {0};
  lt_buf_putc(&h, '{');
  if (metadata_json) lt_buf_printf(&h, "\"__metadata__\":%s", metadata_json);
  size_t off = 0;
  for (int i = 0; i < n; i++) {
    int64_t numel = 1;
    if (i || metadata_json) lt_buf_putc(&h, ',');
    lt_json_quote(&h, t[i].name);
    lt_buf_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", dtype == LT_ST_F32 ? "F32" : "BF16");
    for (int d = 0; d < t[i].ndim; d++) {
      lt_buf_printf(&h, d ? ",%lld" : "%lld", (long long)t[i].shape[d]);
      numel *= t[i].shape[d];
    }
    lt_buf_printf(&h, "],\"data_offsets\":[%zu,%zu]}", off, off + (size_t)numel * esz);
    off += (size_t)numel * esz;
  }
  lt_buf_putc(&h, '}');
  while (h.len % 8) lt_buf_putc(&h, ' '); /* keeps the data section 8-byte aligned */
  if (lt_buf_ok(&h) < 0) {
    lt_buf_free(&h);
    return lt_error_set(LT_ENOMEM, "%s: out of memory", path);
  }
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
  FILE *fp = fopen(tmp, "wb");
  if (!fp) {
    lt_buf_free(&h);
    return lt_error_set(lt_error_from_errno(errno), "cannot create %s: %s", tmp, strerror(errno));
  }
  uint8_t len8[8];
  for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)h.len >> (8 * i));
  int ok = fwrite(len8, 1, 8, fp) == 8 && fwrite(h.data, 1, h.len, fp) == h.len;
  for (int i = 0; i < n && ok; i++) {
    int64_t numel = 1;
    for (int d = 0; d < t[i].ndim; d++) numel *= t[i].shape[d];
    ok = write_data(fp, t[i].data, numel, dtype);
  }
  int err = errno;
  lt_buf_free(&h);
  if (ok && fflush(fp) != 0) ok = 0, err = errno;
  if (ok && fsync(fileno(fp)) != 0) ok = 0, err = errno;
  if (fclose(fp) != 0 && ok) ok = 0, err = errno;
  if (!ok) {
    unlink(tmp);
    return lt_error_set(lt_error_from_errno(err), "cannot write %s: %s", path, strerror(err));
  }
  if (rename(tmp, path) < 0) {
    err = errno;
    unlink(tmp);
    return lt_error_set(lt_error_from_errno(err), "cannot rename into %s: %s", path, strerror(err));
  }
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = 0;
  return lt_fs_sync_dir(slash ? dir : ".");
}
