/* Isolated execution of untrusted code (docs/sandbox.md).
 *
 * A sandbox is a process tree in new user, pid, net, mount, ipc and uts
 * namespaces: a read-only view of the host's system directories (no /root,
 * /home, /work or run directory), a private /tmp and scratch /work, no network
 * interface at all, a seccomp filter, rlimits and, where the host lets us, a
 * memory and pids cgroup.  It is made ready ("warm") before its job arrives and
 * used for exactly one job: nothing leaks from one execution to the next.
 *
 * Every call here blocks; the event-loop paths run them on libuv's thread pool. */
#ifndef LT_SANDBOX_SANDBOX_H
#define LT_SANDBOX_SANDBOX_H

#include <stddef.h>

#include "util/config.h"

/* What the host lets the sandbox use; probed once, cached. */
typedef struct {
  int userns;  /* unprivileged user + pid/net/mount/ipc/uts namespaces */
  int seccomp; /* seccomp filters */
  int cgroup;  /* 0: none (memory by RLIMIT_AS, no OOM report); 1: cgroup v1; 2: cgroup v2 */
} lt_sandbox_caps_t;

void lt_sandbox_probe(lt_sandbox_caps_t *caps);
/* One line for humans ("userns=yes seccomp=yes memory=cgroup-v1"). */
void lt_sandbox_caps_describe(const lt_sandbox_caps_t *caps, char *buf, size_t n);

typedef struct {
  double timeout_s;           /* wall-clock deadline: the whole tree is killed after it */
  int memory_mb;              /* resident memory (cgroup) or address space (rlimit) */
  int cpu_s;                  /* RLIMIT_CPU per process; 0: the deadline rounded up */
  int nproc;                  /* processes and threads */
  int file_mb;                /* largest file written; also the size of /tmp and /work */
  int nofile;                 /* open files per process */
  size_t output_bytes;        /* kept of stdout and of stderr each; the rest is read and dropped */
  int port;                   /* > 0: the program's 127.0.0.1:port reaches the host's 127.0.0.1:port, and nothing
                          else does (the loopback is up, AF_INET/AF_INET6 sockets allowed); 0: no network */
  int max_conns;              /* with a port: connections open through it at once; one past it is closed at once */
  const char *const *ro_dirs; /* host directories bound read-only at their own path (an agent's node_modules),
                                 NULL-terminated, absolute, at most LT_SANDBOX_MAX_RO; NULL: none */
} lt_sandbox_limits_t;

enum { LT_SANDBOX_MAX_RO = 16 };
/* Can `dir` be bound read-only (ro_dirs)?  Absolute, of up to 400 bytes, not /, not under /proc or /dev (the
 * sandbox's own); LT_EINVAL saying which rule it breaks. */
int lt_sandbox_ro_check(const char *dir);

void lt_sandbox_limits_default(lt_sandbox_limits_t *l);
/* The "sandbox" section of a config. */
void lt_sandbox_limits_from_config(const lt_config_t *cfg, lt_sandbox_limits_t *l);
/* Where task images are unpacked on this host (sandbox/image.h): sandbox.image_cache when set (cfg may be NULL),
 * else $XDG_CACHE_HOME/longtail/images, ~/.cache/longtail/images, or /tmp/longtail-images-UID. */
void lt_sandbox_image_cache(const lt_config_t *cfg, char *out, size_t cap);

typedef struct {
  const char *path; /* relative to /work; subdirectories are made; no ".." */
  const char *data;
  size_t len;
  int mode; /* 0: 0644 */
} lt_sandbox_file_t;

typedef struct {
  const char *const *argv;        /* argv[0] is looked up in PATH=/usr/local/bin:/usr/bin:/bin */
  const lt_sandbox_file_t *files; /* written to /work (the working directory) first */
  int nfiles;
  const char *const *env; /* NAME=VALUE added to the program's environment; NULL: none */
  const char *stdin_data; /* NULL: empty stdin */
  size_t stdin_len;
  double timeout_s; /* > 0: overrides the limits' deadline for this job */
  const char *cwd;  /* the working directory (absolute); NULL: /work, or a box's image's WorkingDir;
                                      `files` are written relative to it */
} lt_sandbox_job_t;

typedef struct {
  int exit_code;   /* -1 when killed by a signal */
  int signal;      /* 0 unless killed by a signal */
  int timed_out;   /* the deadline killed it */
  int oom;         /* the memory cgroup killed it (only reported where a cgroup is used) */
  char *out, *err; /* NUL-terminated, at most output_bytes each */
  size_t out_len, err_len;
  int out_truncated, err_truncated;
  double wall_ms; /* from the job's start to the program's end */
} lt_sandbox_result_t;

void lt_sandbox_result_free(lt_sandbox_result_t *r);

typedef struct lt_sandbox lt_sandbox_t;

/* Makes a warm sandbox: namespaces, mounts and cgroup ready, waiting for a job.
 * LT_EUNSUPP (with the reason) where the host lacks user namespaces. */
int lt_sandbox_create(const lt_sandbox_limits_t *l, lt_sandbox_t **out);
/* Runs one job and consumes the sandbox (freed, whatever the outcome).  A
 * failing program is a result, not an error: errors are the sandbox's own. */
int lt_sandbox_exec(lt_sandbox_t *sb, const lt_sandbox_job_t *job, lt_sandbox_result_t *res);
/* Frees a sandbox that ran nothing. */
void lt_sandbox_destroy(lt_sandbox_t *sb);
/* Create + exec: the cold path. */
int lt_sandbox_run(const lt_sandbox_limits_t *l, const lt_sandbox_job_t *job, lt_sandbox_result_t *res);

/* A pool keeps `size` warm sandboxes made by a background thread, so that
 * making one is off the caller's path.  Thread-safe. */
typedef struct lt_sandbox_pool lt_sandbox_pool_t;

int lt_sandbox_pool_create(const lt_sandbox_limits_t *l, int size, lt_sandbox_pool_t **out);
/* Takes a warm sandbox (or makes one when none is ready) and runs the job. */
int lt_sandbox_pool_run(lt_sandbox_pool_t *p, const lt_sandbox_job_t *job, lt_sandbox_result_t *res);
void lt_sandbox_pool_free(lt_sandbox_pool_t *p);

#endif
