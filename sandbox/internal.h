/* Internals of sandbox/, shared by its files (nothing outside sandbox/ includes this): the seccomp filter, the
 * network relay, cgroups and the jail's entry point. */
#ifndef LT_SANDBOX_INTERNAL_H
#define LT_SANDBOX_INTERNAL_H

#include <stdint.h>
#include <sys/types.h>

#include "sandbox/sandbox.h"
#include "util/buf.h"

/* The seccomp program, compiled once in the parent (children must not allocate); `inet`:
 * AF_INET and AF_INET6 sockets allowed too (a sandbox with a port). */
const void *lt__sandbox_seccomp_prog(int inet); /* struct sock_fprog *, NULL when unavailable */

/* The port relay (sandbox/relay.c).  Inside, the socket is bind-mounted at LT__RELAY_SOCK. */
#define LT__RELAY_SOCK "/run/longtail-relay.sock"
typedef struct lt__relay lt__relay_t;
/* max_conns: connections carried at once; one more is closed at once. */
int lt__relay_start(int port, int max_conns, lt__relay_t **out);
const char *lt__relay_path(const lt__relay_t *r);
void lt__relay_stop(lt__relay_t *r);
/* In init, inside the namespaces: raises lo and forks the forwarder on 127.0.0.1:port.  -1 with errno. */
int lt__relay_inside(int port);

typedef struct {
  int version;    /* 0: none, 1, 2 */
  char mem[512];  /* the memory cgroup's directory ("" when none) */
  char pids[512]; /* the pids cgroup's directory (v1; same as mem for v2) */
} lt__cgroup_t;

/* Makes a cgroup with the limits; version 0 (and no error) where the host has none we may use. */
void lt__cgroup_create(lt__cgroup_t *cg, const lt_sandbox_limits_t *l);
int lt__cgroup_attach(const lt__cgroup_t *cg, int pid);
int lt__cgroup_oom_kills(const lt__cgroup_t *cg);
void lt__cgroup_remove(lt__cgroup_t *cg);
/* Which cgroup version this host lets us create limits in (0: none). */
int lt__cgroup_probe(void);

/* The fds the jail's processes find their channels on (sandbox/jail.c). */
enum { LT__JAIL_CTL = 3, LT__JAIL_SYNC, LT__JAIL_STATUS, LT__JAIL_IN, LT__JAIL_OUT, LT__JAIL_ERR };
#define LT__JAIL_UID 1000 /* a sandbox program's uid and gid inside */
#define LT__JAIL_MAGIC 0x4c54534au
#define LT__JAIL_MAX_ENV 1024
#define LT__JAIL_MAX_JOB (256u << 20)

/* A request to init on LT__JAIL_CTL.  RUN: `len` bytes of job follow: argc, argv (u32 len, bytes, NUL) ..., nfiles,
 * files (u32 len, path, NUL, u32 mode, u64 len, bytes) ..., nenv, env (u32 len, NAME=VALUE, NUL) ..., cwd (u32 len,
 * path, NUL; empty: /work).  In a box the request carries the program's stdin, stdout and stderr as SCM_RIGHTS (a
 * sandbox's program uses LT__JAIL_IN/OUT/ERR), its env is complete (a sandbox's is added to its base), and several
 * requests come over the box's life.  KILL: signal `sig` to job `id`'s process group, or (LT__REQ_DESCENDANTS)
 * to every process below it. */
enum { LT__REQ_RUN = 1, LT__REQ_KILL = 2 };
enum { LT__REQ_ONESHOT = 1, LT__REQ_DESCENDANTS = 2 }; /* flags; ONESHOT: its group is killed when it ends */
typedef struct {
  uint32_t magic, op, id, flags, len;
  int32_t sig;
} lt__jail_req_t;

enum { LT__JAIL_EXITED = 1, LT__JAIL_SETUP_ERROR = 2, LT__JAIL_STARTED = 3 };
/* init's answers on LT__JAIL_STATUS: one write each (atomic: smaller than PIPE_BUF). */
typedef struct {
  int kind;      /* LT__JAIL_* */
  uint32_t id;   /* the request's */
  int wstatus;   /* the program's wait status (EXITED) */
  char msg[200]; /* what failed (SETUP_ERROR) */
} lt__jail_status_t;

/* What the jail is made of. */
typedef struct {
  const lt_sandbox_limits_t *l;
  int parent_is_root, rlimit_memory;
  const void *filter;     /* seccomp */
  const char *relay_sock; /* the host path of the relay's socket (limits.port > 0), else NULL */
  const char *lower;      /* NULL: a sandbox (the host's system directories); else a box over this image root */
  int uid, gid;           /* the programs' ids inside */
} lt__jail_t;

/* The forked child's whole life, with the channels at LT__JAIL_*.  Talks to the parent on LT__JAIL_SYNC: 'U' once
 * unshared (the parent then writes the id maps and answers 'G'), 'R' when ready (a box's 'R' carries the fds of its
 * root and of its writable layer), or 'E' + text on failure. */
_Noreturn void lt__jail_main(const lt__jail_t *j);
/* In the forked child: the six channels (parent's order: ctl, sync, status, in, out, err) moved to LT__JAIL_*,
 * every other fd closed, then lt__jail_main. */
_Noreturn void lt__jail_start(const lt__jail_t *j, const int fds[6]);
/* Forks the jail in the jail maker (sandbox/zygote.c): *pid, and *pidfd to signal it and see it end.  LT_EUNSUPP
 * (no message) where there is no maker: the caller forks itself. */
int lt__zygote_fork(const lt__jail_t *j, const int fds[6], pid_t *pid, int *pidfd);

/* A sandbox's parent side (sandbox/exec.c), which a box is too. */
struct lt_sandbox {
  pid_t pid; /* the jail process; init dies with it */
  int pidfd; /* the jail's, when the jail maker forked it (not our child then); else -1 */
  int ctl, status, in, out, err;
  int root_fd, upper_fd; /* a box's (O_PATH): its root, and the upper directory of its overlay */
  lt__cgroup_t cg;
  lt_sandbox_limits_t lim;
  lt__relay_t *relay; /* limits.port > 0 */
};
/* Makes the jail: lower NULL for a sandbox, else a box over that image root (root_fd, upper_fd set) with the given
 * inside ids. */
int lt__sandbox_start(const lt_sandbox_limits_t *l, const char *lower, int uid, int gid, lt_sandbox_t **out);
/* Encodes a RUN request (header included) for job with env as given (NULL: job->env). */
int lt__job_encode(const lt_sandbox_job_t *job, const char *const *env, uint32_t id, uint32_t flags, lt_buf_t *b);
/* sandbox/fdpass.c.  Sends all of p (the first send carries fds, nfds of them: at most LT__MAX_FDS, else -1). */
#define LT__MAX_FDS 8
int lt__send_fds(int sock, const void *p, size_t n, const int *fds, int nfds);
/* One recvmsg of at most n bytes (EINTR retried): the bytes read (0 at the peer's end, -1 on error), and in *nfds
 * the fds that came with them (close-on-exec), at most maxfds: any beyond are closed. */
ssize_t lt__recv_fds(int sock, void *p, size_t n, int *fds, int maxfds, int *nfds);

/* The I/O of one running job: stdin fed, stdout and stderr captured (capped), the deadline enforced through
 * kill(ud), its end seen through on_status (which returns 1 for the job's own EXITED or SETUP_ERROR). */
typedef struct {
  int in, out, err, status; /* closed (set to -1) as they end */
  const char *stdin_data;
  size_t stdin_len, cap;
  double t0, deadline;
  void (*kill)(void *ud);
  int (*on_status)(void *ud, const lt__jail_status_t *st);
  void *ud;
} lt__io_t;
/* rc 0 with res filled (out, err, timed_out, wall_ms; exit_code and signal from *st) and *st the job's last
 * status; killed: the deadline passed. */
int lt__io_run(lt__io_t *io, lt_sandbox_result_t *res, lt__jail_status_t *st);

/* ---- a warm pool (sandbox/pool.c): made by a background thread ---------------------- */
typedef struct lt__warm lt__warm_t;
int lt__warm_create(int size, int (*make)(void *ud, void **out), void (*destroy)(void *item), void *ud,
                    lt__warm_t **out);
/* A warm item, or NULL when none is ready. */
void *lt__warm_take(lt__warm_t *w);
void lt__warm_free(lt__warm_t *w);

/* ---- images (sandbox/image.c, source.c, layer.c) ---------------------------------- */

/* The host id every file of an unpacked image belongs to, and that a box's one inside id maps to: nobody when
 * longtail runs as root, else longtail's own. */
#define LT__NOBODY 65534u
unsigned lt__box_host_uid(void);
unsigned lt__box_host_gid(void);

/* openat2 inside `root` (RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV): ".." and absolute symlinks
 * stop at root, no mount point is crossed; "" is root itself.  -1 with errno. */
int lt__openat_in(int root, const char *path, int flags, int mode);
/* A regular file inside root (lt__openat_in) of at most max bytes, NUL-terminated. */
int lt__read_in(int root, const char *path, size_t max, char **out, size_t *len);
typedef struct lt_image lt_image_t;
int lt__image_rootfs_fd(const lt_image_t *img);
/* The directory path (relative to root, resolved in it) opened O_PATH, made (0755, like its missing parents, given
 * to uid:gid with chown) where missing; the slashes of path are restored.  -1 with errno. */
int lt__mkdirs_in(int root, char *path, int chown, unsigned uid, unsigned gid);
/* rm -rf of dir/name without following symlinks; a missing name is fine.  -1 with errno. */
int lt__remove_at(int dir, const char *name);

/* Directories whose permission bits are set once every layer is in (a read-only one may still get children). */
typedef struct {
  struct {
    char *path;
    unsigned mode;
  } * v;
  size_t n, cap;
} lt__dirmode_t;
int lt__dirmode_add(lt__dirmode_t *d, const char *path, unsigned mode);
int lt__dirmode_apply(lt__dirmode_t *d, int root);
void lt__dirmode_free(lt__dirmode_t *d);

typedef struct {
  int fd;           /* the blob, read to its end */
  const char *what; /* "REF: layer sha256:…", for messages */
  int chown;        /* 1: every file to uid:gid */
  unsigned uid, gid;
  /* 0: every entry.  > 0: what a reader of an archive's metadata needs, every entry but hard links and regular
   * files over `split` bytes; < 0: only those (the same split, negated), for a second pass when they are wanted. */
  int64_t split;
} lt__layer_t;
/* Applies a layer (tar, gzip or zstd) to the directory root; raw_hex: the SHA-256 of the blob's bytes. */
int lt__layer_apply(const lt__layer_t *l, int root, lt__dirmode_t *dirs, char raw_hex[65]);

/* Where an image's manifest, config and layers are, once its reference is resolved (sandbox/source.c). */
typedef struct {
  char path[256];  /* the blob inside the layout (checked: no "..") */
  char digest[72]; /* what its bytes must hash to: the manifest's digest (OCI) or the config's diff_id (Docker) */
  char alt[72];    /* Docker: a layer stored compressed is named by its own digest, which may match instead */
} lt__blob_t;

typedef struct {
  const char *ref;
  char key[72];   /* "sha256:<hex>": the OCI manifest's digest, a Docker image's config digest */
  int dir_fd;     /* the layout: the user's directory, or the archive unpacked in tmp */
  char url[2048]; /* oci:http(s)://…: the layout's URL; its files are downloaded into tmp when first opened */
  /* oci-archive:/docker-archive:: the archive file (downloaded into tmp where it is a URL); its small files are
   * unpacked at open, the larger ones (layers) only when a blob is first missed, so a cache hit writes no layer. */
  char archive[4200];
  int archive_whole;
  char tmp[4096]; /* a temporary directory this source made ("" for none); removed by lt__source_close */
  int tmp_lock;
  lt__blob_t config;
  lt__blob_t *layers;
  int nlayers;
} lt__source_t;

/* Resolves ref (transport, tag, index, manifest) to its config and layers; archives and URLs are unpacked or
 * downloaded into a temporary directory under cache_dir/tmp. */
int lt__source_open(const char *cache_dir, const char *ref, lt__source_t *s);
void lt__source_close(lt__source_t *s);
/* A blob of the source, opened for reading (O_RDONLY). */
int lt__source_blob(lt__source_t *s, const lt__blob_t *b);
/* A blob read whole (at most max bytes) and checked against its digest. */
int lt__source_read(lt__source_t *s, const lt__blob_t *b, const char *what, size_t max, char **out, size_t *len);

/* A temporary directory under dir: path filled, *lock held (an OFD lock on PATH.lock) while it is in use;
 * lt__tmp_sweep removes those whose maker died (no lock held). */
int lt__tmp_make(const char *dir, const char *prefix, char *path, size_t cap, int *lock);
void lt__tmp_drop(const char *path, int lock);
void lt__tmp_sweep(const char *dir);

/* A box (sandbox/box.c, boxfs.c): a jail over an image root serving requests. */
typedef struct lt_box lt_box_t;
typedef struct lt_box_proc lt_box_proc_t;
struct lt_box {
  lt_sandbox_t *sb;
  lt_image_t *img;
  uint32_t next_id;      /* of requests */
  lt_box_proc_t **procs; /* spawned and not freed */
  int nprocs;
};

#endif
