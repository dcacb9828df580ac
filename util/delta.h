/* Weight deltas between two versions of one file (issue 36): what a worker that holds version N-1 downloads
 * instead of version N.  The delta is the byte-wise XOR of the two files, zstd-compressed.  Versions of one model
 * share their safetensors header and layout, so this is, per tensor, the XOR of the bit patterns: zero wherever
 * a weight did not change, which is most of a bf16 checkpoint after a small step.
 *
 * File layout: "LTDELTA1" | base SHA-256 (32 raw bytes) | target SHA-256 (32) | target size (u64 LE) |
 * one zstd frame of target[i] ^ base[i], the base read as zeros past its end.  Applying hashes the result while
 * it streams: a delta for another base, a torn or altered delta, or a wrong result cannot give the announced
 * hash, and is refused (LT_ECORRUPT) leaving no output file. */
#ifndef LT_UTIL_DELTA_H
#define LT_UTIL_DELTA_H

#include <stdint.h>

typedef struct {
  char base_sha[65];   /* of the file the delta applies to */
  char target_sha[65]; /* of the file it reconstructs */
  int64_t target_size;
} lt_delta_info_t;

/* Writes `out` (atomically) as the delta turning `base` into `target`; *info receives what its header says. */
int lt_delta_create(const char *base, const char *target, const char *out, lt_delta_info_t *info);
/* Reads a delta's header. */
int lt_delta_info(const char *delta, lt_delta_info_t *info);
/* Reconstructs the target from `base` and `delta` into `out` (atomically).  LT_ECORRUPT when the delta is
 * damaged or the result's SHA-256 is not the announced one (which a base other than the delta's gives). */
int lt_delta_apply(const char *base, const char *delta, const char *out);
/* What a version folder offers a downloader: when dir/delta.zst rebuilds the model file whose SHA-256 is sha, the
 * SHA-256 of the file it applies to goes to base and the delta's size to *bytes; else "" and 0. */
void lt_delta_offer(const char *dir, const char *sha, char base[65], int64_t *bytes);

#endif
