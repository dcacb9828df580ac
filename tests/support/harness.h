/* Test helpers: running bin/longtail as a real process, temporary directories,
 * files.  Tests find the binary through $LT_BIN and the repository through
 * $LT_ROOT (set by `make test`). */
#ifndef LT_TESTS_HARNESS_H
#define LT_TESTS_HARNESS_H

#include <stddef.h>
#include <sys/types.h>

typedef struct {
  int status;      /* exit code, or 128 + signal */
  char *out;       /* captured stdout (NUL-terminated) */
  char *err;       /* captured stderr */
  double secs;     /* wall time */
  double cpu_secs; /* user + system CPU of the process and of the children it reaped (a daemon's workers): what a
                      time bound should use, as a loaded machine stretches wall time but not this */
} lt_run_t;

const char *lt_test_bin(void);
const char *lt_test_root(void);
/* Runs argv (argv[0] may be "longtail" for the binary under test) with stdin
 * from `input` (NULL: /dev/null), for at most timeout_s. */
int lt_test_run(lt_run_t *r, const char *input, double timeout_s, const char *const *argv);
/* printf-style shell command via /bin/sh -c. */
int lt_test_sh(lt_run_t *r, double timeout_s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void lt_run_free(lt_run_t *r);
/* `longtail init` of configs/models/<model>.json into out with seed; the
 * process's exit status, with its stderr in *err when not NULL (malloc'd). */
int lt_test_init_model(const char *model, const char *out, int seed, char **err);

/* Fresh directory under $TMPDIR; removed by lt_test_rmdir. */
char *lt_test_tmpdir(const char *tag);
void lt_test_rmdir(char *dir);
int lt_test_write(const char *path, const char *content);
char *lt_test_read(const char *path); /* NULL if unreadable */

/* Starts argv in the background (stdout/stderr to files in `logdir`). */
pid_t lt_test_spawn(const char *logdir, const char *name, const char *const *argv);
/* Waits up to timeout_s for pid; returns exit status (128+sig) or -1 on timeout. */
int lt_test_wait(pid_t pid, double timeout_s);
/* A free TCP port on 127.0.0.1 (best effort: bound then released). */
int lt_test_free_port(void);
/* How many processes of this host have a command line matching the extended regex (pgrep -f -c). */
int lt_test_procs_matching(const char *pattern);
/* A listening TCP socket on 127.0.0.1, any port (*port); -1 on failure. */
int lt_test_listen_loopback(int *port);

/* One HTTP/1.1 request to 127.0.0.1:port (body: NULL for none); the whole
 * answer, head included (malloc'd), or NULL when nothing listens. */
char *lt_test_http(int port, const char *method, const char *path, const char *body);
/* Waits up to timeout_s for the first line of a file (a server's address). */
char *lt_test_first_line(const char *path, double timeout_s);

#endif
