/* One daemon per run directory: RUN_DIR/daemon.lock (lt_fs_lock) for the
 * daemon's lifetime, with its PID inside for the refusal message. The kernel
 * releases it when the daemon dies however it dies, and it is never inherited,
 * so the local workers a killed daemon leaves behind do not hold it against
 * its resume. `longtail stats` asks whether it is held (a live daemon). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "orchestrator/internal.h"
#include "util/error.h"
#include "util/fs.h"

int lt__runlock_acquire(lt_daemon_t *d) {
  char p[4200];
  snprintf(p, sizeof p, "%s/daemon.lock", d->run_dir);
  int fd, rc = lt_fs_lock(p, &fd);
  if (rc == LT_EBUSY) {
    char *pid = NULL;
    size_t n;
    if (lt_fs_read_file(p, 64, &pid, &n) == 0) pid[strcspn(pid, "\n")] = 0;
    rc = lt_error_set(LT_EBUSY, "%s is in use by another daemon (pid %s); stop it first, or use another --run-dir",
                      d->run_dir, pid && pid[0] ? pid : "unknown");
    free(pid);
    return rc;
  }
  if (rc < 0) return rc;
  char line[32];
  int len = snprintf(line, sizeof line, "%d\n", (int)getpid());
  if (ftruncate(fd, 0) < 0 || pwrite(fd, line, (size_t)len, 0) != len) {
    close(fd);
    return lt_error_set(LT_EIO, "%s: cannot write the pid", p);
  }
  d->lock_fd = fd;
  return 0;
}

void lt__runlock_release(lt_daemon_t *d) {
  if (d->lock_fd < 0) return;
  close(d->lock_fd); /* the file stays: removing it would race a daemon about to lock it */
  d->lock_fd = -1;
}
