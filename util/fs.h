/* File-system helpers: whole-file reads, crash-safe writes, directories. */
#ifndef LT_UTIL_FS_H
#define LT_UTIL_FS_H

#include <stddef.h>
#include <stdint.h>

/* Reads a whole file (NUL-terminated) of at most max_bytes. Caller frees. */
int lt_fs_read_file(const char *path, size_t max_bytes, char **out, size_t *len);
/* Writes via a temporary file, fsync and rename, then fsyncs the directory, so
 * readers see the old or the new file, never a torn one. */
int lt_fs_write_atomic(const char *path, const void *data, size_t len);
/* Copies a file (any size, streamed) to dst through a temporary file, fsync and rename. */
int lt_fs_copy_file(const char *src, const char *dst);
/* Writes all of data at offset off of the open file fd (named path, for
 * messages), then fdatasync()s it: durable on return. */
int lt_fs_pwrite_sync(int fd, const char *path, const void *data, size_t len, uint64_t off);
/* mkdir -p; existing directories are fine. */
int lt_fs_mkdirs(const char *path, int mode);
int lt_fs_exists(const char *path);
int lt_fs_is_dir(const char *path);
/* rm -rf of a directory tree (refuses "" and "/"). */
int lt_fs_remove_tree(const char *path);
/* Writes "a/b" into out; returns LT_ERANGE if it does not fit. */
int lt_path_join(char *out, size_t cap, const char *a, const char *b);
/* The last component of a path, trailing slashes ignored ("a/b/" → "b"). */
void lt_path_base(const char *path, char *out, size_t cap);
/* fsyncs a directory so that a rename or create in it is durable. */
int lt_fs_sync_dir(const char *dir);
/* The same for the directory holding path (a file just created or renamed into it). */
int lt_fs_sync_parent(const char *path);
/* Absolute path of the running executable (for spawning helpers). */
int lt_fs_self_exe(char *out, size_t cap);
/* An exclusive lock on path (created if missing), held while *fd stays open
 * and released by the kernel however the process ends; the descriptor is
 * close-on-exec, so child processes never hold it. LT_EBUSY (and *fd = -1)
 * when another process holds it. */
int lt_fs_lock(const char *path, int *fd);
/* lt_fs_lock with this process's PID written inside, so that a refused locker can name the holder: on LT_EBUSY,
 * holder receives the PID found in the file ("unknown" when it cannot be read). */
int lt_fs_lock_pid(const char *path, int *fd, char *holder, size_t cap);
/* 1 when some process holds lt_fs_lock(path), 0 when none does or the file
 * does not exist; taking nothing, so it never gets in a locker's way. */
int lt_fs_lock_held(const char *path);

#endif
