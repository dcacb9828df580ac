/* Task images and boxes (docs/sandbox.md, "Images and boxes"): the second public header of sandbox/.
 *
 * An image is an OCI or Docker image a user already has, named the way skopeo and podman name it:
 *
 *   oci:DIR[:TAG]             an OCI image layout directory (TAG: its org.opencontainers.image.ref.name)
 *   oci-archive:FILE[:TAG]    that layout as a tar file
 *   docker-archive:FILE       what `docker save` / `podman save` write
 *
 * DIR and FILE may be http:// or https:// URLs (an image served from another machine; TAG is split at the last
 * ':' after the last '/').  An image is unpacked once, flattened (layers applied in order, whiteouts and opaque
 * directories honoured), into a content-addressed cache; every digest the manifest names is checked.
 *
 * A box is a long-lived sandbox whose root is a fresh copy-on-write view of an image: an overlayfs mounted in
 * the box's own user namespace, its writable layer a tmpfs of limits.file_mb, discarded with the box.  Every limit
 * and refusal of lt_sandbox_* holds (namespaces, seccomp, cgroup, rlimits, no network but limits.port, no host
 * path).  A box runs any number of commands over its life: one-shot ones with a deadline and captured output
 * (lt_box_exec), and long-running ones whose stdin/stdout the caller holds (lt_box_spawn: a persistent shell).
 * The caller reads and writes files of the root from the host side (lt_box_read_file, lt_box_write_file) and asks
 * what changed under a directory (lt_box_changes), which with the image's own files gives a unified diff.
 *
 * Every call blocks; a box is used by one thread at a time, except that a spawned process's fds may be read and
 * written from any thread.  A box lives until lt_box_destroy, at most as long as this process: its processes are
 * forked by the jail maker (sandbox/zygote.c), which dies with the process (where the maker cannot start, a box
 * dies with the thread that made it, as a sandbox does). */
#ifndef LT_SANDBOX_IMAGE_H
#define LT_SANDBOX_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "sandbox/sandbox.h"

/* ---- images ---------------------------------------------------------------------- */

typedef struct lt_image lt_image_t;

typedef struct {
  char digest[72]; /* "sha256:<hex>": the cache key (an OCI manifest's digest; a Docker image's config digest) */
  char **env;      /* the config's Env, NAME=VALUE, NULL-terminated (never NULL), with PATH and HOME (the user's in
                       the image's /etc/passwd, else "/") added where it names none, as docker does */
  char *workdir;   /* WorkingDir; "/" when the image names none */
  char *user;      /* User as written; "" when none */
  int uid, gid;    /* what User maps to (a name through the image's /etc/passwd and /etc/group); 0 for none.
                       A box's processes run as this uid/gid, and every file of the root appears owned by it
                       (ownership inside an image is not kept: the box's user namespace maps one id) */
  char **cmd;      /* Entrypoint then Cmd, NULL-terminated (never NULL; informational: boxes run what they are told) */
} lt_image_config_t;

/* Opens an image, unpacking it into the cache under cache_dir the first time (one unpacker at a time per image,
 * across processes; the others wait, then use its result).  An entry is trusted only once complete: a layer is
 * unpacked into a temporary directory, checked, and renamed into place, and what a killed unpacker left behind is
 * removed by the next one.  LT_ENOENT (missing), LT_ECORRUPT (a digest that does not match), LT_EFORMAT (malformed
 * manifest, config or tar), LT_EUNSUPP (an encrypted layer, an unknown media type or transport), LT_EINVAL (an
 * entry that leaves the root: "../", an absolute hard link out) with a message naming the reference and, where
 * one is at fault, the layer ("oci:img:latest: layer sha256:ab12…: digest mismatch").  An open image holds a
 * shared lock on its entry, released by lt_image_close. */
int lt_image_open(const char *cache_dir, const char *ref, lt_image_t **out);
void lt_image_close(lt_image_t *img);
const lt_image_config_t *lt_image_config(const lt_image_t *img);
/* The reference it was opened with, and the host path of its unpacked root (read it, never write it). */
const char *lt_image_ref(const lt_image_t *img);
const char *lt_image_rootfs(const lt_image_t *img);
/* A regular file of the image's root, resolved inside it (absolute symlinks and ".." stay in the root), of at most
 * max bytes (LT_ERANGE past it; LT_ENOENT; LT_EINVAL for a directory or special file); NUL-terminated, caller
 * frees.  `path` is absolute inside the root ("/testbed/setup.py"). */
int lt_image_read_file(const lt_image_t *img, const char *path, size_t max, char **out, size_t *len);

/* ---- boxes ----------------------------------------------------------------------- */

typedef struct lt_box lt_box_t;

/* A fresh root over img with the limits (timeout_s: the default deadline of lt_box_exec; file_mb: the writable
 * layer's size, as for a sandbox's /tmp).  The image must stay open while the box lives.  LT_EUNSUPP (with the
 * reason) where the host lacks user namespaces or overlayfs in them. */
int lt_box_create(lt_image_t *img, const lt_sandbox_limits_t *l, lt_box_t **out);
/* Kills every process of the box, unmounts its root (the writable layer is gone), removes its cgroup. */
void lt_box_destroy(lt_box_t *b);
lt_image_t *lt_box_image(const lt_box_t *b);

/* Runs one command to its end and keeps the box: like lt_sandbox_exec, with job->cwd (NULL: the image's
 * WorkingDir), job->files written relative to it first, job->env added to the image's Env, the program in its own
 * process group.  At the deadline (job->timeout_s, else the limits') that process group is killed and
 * res->timed_out set; the box lives on (a process that left the group, by setsid, lives until the box ends). */
int lt_box_exec(lt_box_t *b, const lt_sandbox_job_t *job, lt_sandbox_result_t *res);

/* A long-running process in the box (a persistent shell): started like lt_box_exec's (argv, env, cwd, files;
 * job->stdin_data and job->timeout_s are not used), its stdin, stdout and stderr are pipes whose host ends the
 * caller reads and writes (non-blocking; the box does not read them).  RLIMIT_CPU applies per process as for a
 * job (limits.cpu_s, else the default deadline rounded up). */
typedef struct lt_box_proc lt_box_proc_t;
typedef struct {
  int merge_stderr; /* 1: stderr goes to the stdout pipe (lt_box_proc_stderr is then -1) */
} lt_box_spawn_opts_t;
int lt_box_spawn(lt_box_t *b, const lt_sandbox_job_t *job, const lt_box_spawn_opts_t *o, lt_box_proc_t **out);
int lt_box_proc_stdin(const lt_box_proc_t *p);  /* write end; -1 once lt_box_proc_close_stdin */
int lt_box_proc_stdout(const lt_box_proc_t *p); /* read end */
int lt_box_proc_stderr(const lt_box_proc_t *p); /* read end, or -1 with merge_stderr */
void lt_box_proc_close_stdin(lt_box_proc_t *p);
/* Signals the process (descendants 0) or every process below it, not itself (descendants 1: interrupts the command
 * a shell is running and keeps the shell).  LT_ENOENT once it has ended. */
int lt_box_proc_kill(lt_box_proc_t *p, int sig, int descendants);
/* Waits at most timeout_s (0: only looks; < 0: no limit) for the process to end: 0 with its wait status in
 * *wstatus, LT_ETIMEDOUT while it runs. */
int lt_box_proc_wait(lt_box_proc_t *p, double timeout_s, int *wstatus);
/* Kills the process's group if it still runs, closes the caller's ends, frees. */
void lt_box_proc_free(lt_box_proc_t *p);

/* Files of the box's root from the host side: `path` is absolute inside the root and resolved in it (symlinks
 * cannot lead out, nor into the box's /proc or /dev).  Reading: a regular file of at most max bytes (as
 * lt_image_read_file).  Writing: creates the missing parent directories (0755) and replaces the file whole (a
 * temporary file beside it renamed over it: a write that fails leaves the old content), mode 0 keeping an existing
 * file's mode (0644 for a new one); a symlink as the last component is followed, in the root.  Both act as the
 * box's user (what it may not read or write, they may not either); writes count against limits.file_mb like the
 * box's own (LT_ENOSPC past it). */
int lt_box_read_file(lt_box_t *b, const char *path, size_t max, char **out, size_t *len);
int lt_box_write_file(lt_box_t *b, const char *path, const void *data, size_t len, int mode);

/* What the box's writable layer changed under `dir` (absolute inside the root), as paths in byte order: files and
 * symlinks added, modified (content, target, mode or type differ from the image's) or deleted (a directory removed
 * lists the image's files under it).  Directories themselves are not listed.  The old side is the image's
 * (lt_image_read_file), the new side the box's (lt_box_read_file). */
typedef enum { LT_BOX_ADDED = 'A', LT_BOX_MODIFIED = 'M', LT_BOX_DELETED = 'D' } lt_box_change_kind;
typedef struct {
  char *path; /* absolute inside the root */
  lt_box_change_kind kind;
  uint32_t old_mode, new_mode; /* st_mode (type and permission bits); 0 on the side where it does not exist */
} lt_box_change_t;
int lt_box_changes(lt_box_t *b, const char *dir, lt_box_change_t **out, int *n);
void lt_box_changes_free(lt_box_change_t *c, int n);

/* ---- a warm pool per image ------------------------------------------------------- */

/* Keeps `size` boxes over img ready, made by a background thread (sandbox.pool).  Thread-safe.  A box taken is the
 * taker's; lt_box_pool_free destroys those still waiting. */
typedef struct lt_box_pool lt_box_pool_t;
int lt_box_pool_create(lt_image_t *img, const lt_sandbox_limits_t *l, int size, lt_box_pool_t **out);
/* A warm box, or one made now when none is ready; the caller destroys it (lt_box_destroy). */
int lt_box_pool_take(lt_box_pool_t *p, lt_box_t **out);
void lt_box_pool_free(lt_box_pool_t *p);

#endif
