/* checkpoint.publish_dir: each published version copied to a shared filesystem (NFS, Lustre) as <dir>/<sha256>/,
 * the SHA-256 of its model.safetensors, for workers that read versions there instead of downloading them.  The
 * folder appears whole or not at all (copied under a temporary name, then renamed), and a name that exists
 * already holds the same bytes, so a retry or a second daemon publishing the same weights is harmless. */
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "train/train.h"
#include "util/error.h"
#include "util/fs.h"

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
  if (rc == 0 && rename(tmp, dst) < 0 && !lt_fs_is_dir(dst)) rc = lt_error_set(LT_EIO, "cannot rename %s into %s", tmp, dst);
  if (rc == 0) rc = lt_fs_sync_dir(publish_dir);
  if (lt_fs_is_dir(tmp)) lt_fs_remove_tree(tmp);
  return rc < 0 ? lt_error_wrap(rc, "checkpoint.publish_dir") : 0;
}
