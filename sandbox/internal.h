/* Internals of sandbox/, shared by its files (nothing outside sandbox/ includes this): the seccomp filter, the
 * network relay, cgroups and the jail's entry point. */
#ifndef LT_SANDBOX_INTERNAL_H
#define LT_SANDBOX_INTERNAL_H

#include "sandbox/sandbox.h"

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
  int version;          /* 0: none, 1, 2 */
  char mem[512];        /* the memory cgroup's directory ("" when none) */
  char pids[512];       /* the pids cgroup's directory (v1; same as mem for v2) */
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
#define LT__JAIL_UID 1000              /* the program's uid and gid inside */
#define LT__JAIL_MAGIC 0x4c54534au     /* job header: magic, length; then argc, argv (u32 len, bytes, NUL) ...,
                                          nfiles, files (u32 len, path, NUL, u32 mode, u64 len, bytes) ...,
                                          nenv, env (u32 len, NAME=VALUE, NUL) ... */
#define LT__JAIL_MAX_ENV 64
#define LT__JAIL_MAX_JOB (256u << 20)

enum { LT__JAIL_EXITED = 1, LT__JAIL_SETUP_ERROR = 2 };
typedef struct {
  int kind;      /* LT__JAIL_* */
  int wstatus;   /* the program's wait status (EXITED) */
  char msg[200]; /* what failed (SETUP_ERROR) */
} lt__jail_status_t;

/* The forked child's whole life, with the channels at LT__JAIL_*.  Talks to the
 * parent on LT__JAIL_SYNC: 'U' once unshared (the parent then writes the id maps
 * and answers 'G'), 'R' when ready, or 'E' + text on failure. */
/* relay_sock: the host path of the relay's socket (limits.port > 0), else NULL. */
_Noreturn void lt__jail_main(const lt_sandbox_limits_t *l, int parent_is_root, int rlimit_memory, const void *filter,
                             const char *relay_sock);

#endif
