/* Unified diffs: written from two versions of a file and applied with exact
 * context (the swe environment's episode diffs, its tasks' test patches and the
 * patches `longtail swe validate` is given; docs/swe.md).
 *
 * Written in git's layout (diff --git a/P b/P, new/deleted file mode, --- a/P,
 * +++ b/P, hunks, "\ No newline at end of file"), so `git apply`, GNU `patch
 * -p1` and lt_patch_* read it.  Read: git-style and plain unified diffs whose
 * paths carry one leading component (a/ b/, or old/ new/ from diff -ru), new,
 * deleted and renamed files, mode changes.  A hunk applies where its lines
 * match exactly (at its line number, or the nearest offset that matches, as
 * git apply and patch do); never with fuzz, never a binary patch. */
#ifndef LT_TEXT_DIFF_H
#define LT_TEXT_DIFF_H

#include <stddef.h>

#include "util/buf.h"

/* One file's change appended to out as a git-style section with `context`
 * lines around each change.  old == NULL: the file is new; new == NULL: it was
 * deleted.  Modes are permission bits (0644, 0755; 0 reads as 0644): a change
 * shows as old mode/new mode.  Returns 0 (nothing appended when the versions
 * are equal), LT_EUNSUPP for a binary version (a NUL byte: a text diff cannot
 * carry it; nothing appended), LT_EINVAL for a path a diff cannot name, or
 * LT_ENOMEM. */
int lt_diff_file(lt_buf_t *out, const char *path, const char *old, size_t olen, int omode, const char *new, size_t nlen,
                 int nmode, int context);

typedef struct lt_patch lt_patch_t;

/* What one file of a patch does.  Paths are relative, without the leading
 * component, never absolute and never through "..". */
typedef struct {
  const char *old_path; /* NULL: the file is created */
  const char *new_path; /* NULL: the file is deleted; differs from old_path for a rename */
  int new_mode;         /* permission bits of the result (0: unchanged, or 0644 for a new file) */
  int nhunks;
} lt_patch_file_t;

/* Parses a patch (text need not be NUL-terminated).  LT_EINVAL with a message
 * naming the line for malformed input or a path that is absolute or leaves the
 * tree; LT_EUNSUPP for a binary patch.  Text outside file sections (a commit
 * message, `index` lines) is ignored. */
int lt_patch_parse(const char *text, size_t len, lt_patch_t **out);
void lt_patch_free(lt_patch_t *p);
int lt_patch_nfiles(const lt_patch_t *p);
const lt_patch_file_t *lt_patch_file(const lt_patch_t *p, int i);
/* File i's hunks applied to its old content (NULL/0 for a created file),
 * the result appended to out.  LT_EINVAL with a message naming the file and
 * the hunk when one does not match (a created file that exists, a deleted one
 * whose content differs, context that is not there). */
int lt_patch_apply(const lt_patch_t *p, int i, const char *old, size_t olen, lt_buf_t *out);

#endif
