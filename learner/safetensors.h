/* safetensors files: reading (F32, BF16, F16 → fp32) and writing (F32 or BF16).
 * Format: 8-byte little-endian header length, a JSON header
 * {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
 * then the data.  Every offset, shape and dtype is validated before use. */
#ifndef LT_LEARNER_SAFETENSORS_H
#define LT_LEARNER_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

typedef enum { LT_ST_F32, LT_ST_BF16, LT_ST_F16 } lt_st_dtype;

typedef struct {
  char *name;
  lt_st_dtype dtype;
  int ndim;
  int64_t shape[4];
  size_t begin, end; /* byte offsets in the data section */
} lt_st_entry_t;

typedef struct {
  char *path;
  const uint8_t *map; /* whole file (mmap) */
  size_t size;
  const uint8_t *data; /* start of the data section */
  size_t data_size;
  lt_st_entry_t *entries;
  int n;
  void *meta; /* the __metadata__ object (cJSON), or NULL */
} lt_st_file_t;

int lt_st_open(const char *path, lt_st_file_t **out);
void lt_st_close(lt_st_file_t *f);
const lt_st_entry_t *lt_st_find(const lt_st_file_t *f, const char *name);
int64_t lt_st_numel(const lt_st_entry_t *e);
/* A string value of the header's __metadata__, or NULL. */
const char *lt_st_meta(const lt_st_file_t *f, const char *key);
/* Converts the tensor to fp32 into dst (exactly numel floats). */
int lt_st_read_f32(const lt_st_file_t *f, const lt_st_entry_t *e, float *dst);

typedef struct {
  const char *name;
  int ndim;
  int64_t shape[4];
  const float *data;
} lt_st_tensor_t;

/* Writes F32 tensors atomically (temporary file, fsync, rename). */
int lt_st_write(const char *path, const lt_st_tensor_t *t, int n, const char *metadata_json);
/* The same, every tensor stored as `dtype` (F32, or BF16 rounded to nearest even). */
int lt_st_write_as(const char *path, const lt_st_tensor_t *t, int n, const char *metadata_json, lt_st_dtype dtype);

/* bf16/f16 → f32 conversions (also used by tests). */
float lt_bf16_to_f32(uint16_t h);
float lt_f16_to_f32(uint16_t h);
uint16_t lt_f32_to_bf16(float f); /* round to nearest even */

#endif
