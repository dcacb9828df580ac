/* What a published version holds: the policy's weights, or with learner.lora its adapter in PEFT's layout
 * (checkpoint.lora_publish, docs/lora.md).  And checkpoint.publish_dir: each published version copied to a shared
 * filesystem (NFS, Lustre) as <dir>/<sha256>/, the SHA-256 of its model.safetensors, for workers that read versions
 * there instead of downloading them.  The folder appears whole or not at all (copied under a temporary name, then
 * renamed), and a name that exists already holds the same bytes, so a retry or a second daemon publishing the same
 * weights is harmless. */
#include <dirent.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "learner/lora.h"
#include "train/internal.h"
#include "util/error.h"
#include "util/fs.h"

/* How dir's adapter names its base: "../vB" beside it in the same folder (a run directory moves whole), else the
 * base's absolute path. */
static void base_ref(const char *dir, const char *base, char *out, size_t cap) {
  char a[4096], b[4096], ra[4096], rb[4096];
  snprintf(a, sizeof a, "%s", dir);
  snprintf(b, sizeof b, "%s", base);
  const char *pa = realpath(dirname(a), ra), *pb = realpath(dirname(b), rb);
  snprintf(b, sizeof b, "%s", base);
  if (pa && pb && !strcmp(pa, pb)) snprintf(out, cap, "../%s", basename(b));
  else if (!realpath(base, out)) snprintf(out, cap, "%s", base);
}

int lt__publish_version(const lt_model_t *policy, const char *dir, lt_st_dtype dtype, int merged, const char *base) {
  if (!policy->lora) return lt_model_save_as(policy, dir, dtype);
  if (merged) {
    lt_model_t *m;
    int rc = lt_lora_merged(policy, &m);
    if (rc == 0) rc = lt_model_save_as(m, dir, dtype);
    lt_model_free(m);
    return rc;
  }
  char ref[4096], src[4200], dst[4200];
  base_ref(dir, base, ref, sizeof ref);
  int rc = lt_lora_save(policy->lora, dir, dtype, ref);
  /* config.json beside the adapter: the architecture a worker checks before loading it, without the base's folder. */
  snprintf(src, sizeof src, "%s/config.json", base);
  snprintf(dst, sizeof dst, "%s/config.json", dir);
  return rc == 0 ? lt_fs_copy_file(src, dst) : rc;
}

int lt_train_publish_copy(const char *dir, const char *publish_dir, const char *sha) {
  char dst[4300], tmp[4400];
  snprintf(dst, sizeof dst, "%s/%s", publish_dir, sha);
  if (lt_fs_is_dir(dst)) return 0;
  snprintf(tmp, sizeof tmp, "%s/.%s.tmp.%d", publish_dir, sha, (int)getpid());
  int rc = lt_fs_mkdirs(tmp, 0755);
  if (rc < 0) return lt_error_wrap(rc, "checkpoint.publish_dir");
  DIR *d = opendir(dir);
  if (!d) rc = lt_error_set(LT_EIO, "cannot read %s", dir);
  for (struct dirent *e; rc == 0 && (e = readdir(d));) {
    if (e->d_name[0] == '.' || strstr(e->d_name, ".tmp.")) continue;
    char a[4400], b[4700];
    snprintf(a, sizeof a, "%s/%s", dir, e->d_name);
    snprintf(b, sizeof b, "%s/%s", tmp, e->d_name);
    if (!lt_fs_is_dir(a)) rc = lt_fs_copy_file(a, b);
  }
  if (d) closedir(d);
  if (rc == 0 && rename(tmp, dst) < 0 && !lt_fs_is_dir(dst))
    rc = lt_error_set(LT_EIO, "cannot rename %s into %s", tmp, dst);
  if (rc == 0) rc = lt_fs_sync_dir(publish_dir);
  if (lt_fs_is_dir(tmp)) lt_fs_remove_tree(tmp);
  return rc < 0 ? lt_error_wrap(rc, "checkpoint.publish_dir") : 0;
}
