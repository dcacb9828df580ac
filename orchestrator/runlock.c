/* One daemon per run directory: RUN_DIR/daemon.lock, flock'ed for the
 * daemon's lifetime. The kernel releases it when the daemon dies however it
 * dies, and the descriptor is close-on-exec, so the local workers a daemon
 * spawns (which outlive a killed daemon) never hold it against a resume. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "orchestrator/daemon.h"
#include "util/error.h"

int lt__runlock_acquire(lt_daemon_t *d) {
  char p[4200];
  snprintf(p, sizeof p, "%s/daemon.lock", d->run_dir);
  int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return lt_error_set(lt_error_from_errno(errno), "%s: %s", p, strerror(errno));
  if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
    int e = errno;
    char pid[32] = "";
    ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
    pid[n > 0 ? n : 0] = 0;
    pid[strcspn(pid, "\n")] = 0;
    close(fd);
    if (e != EWOULDBLOCK) return lt_error_set(LT_ESYS, "%s: flock: %s", p, strerror(e));
    return lt_error_set(LT_EBUSY, "%s is in use by another daemon (pid %s); stop it first, or use another --run-dir",
                        d->run_dir, pid[0] ? pid : "unknown");
  }
  char line[32];
  int len = snprintf(line, sizeof line, "%d\n", (int)getpid());
  if (ftruncate(fd, 0) < 0 || pwrite(fd, line, (size_t)len, 0) != len) {
    int e = errno;
    close(fd);
    return lt_error_set(lt_error_from_errno(e), "%s: %s", p, strerror(e));
  }
  d->lock_fd = fd;
  return 0;
}

void lt__runlock_release(lt_daemon_t *d) {
  if (d->lock_fd < 0) return;
  close(d->lock_fd); /* the file stays: removing it would race a daemon about to lock it */
  d->lock_fd = -1;
}
