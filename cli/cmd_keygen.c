/* `longtail keygen`: a CURVE key pair for the daemon or a worker. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "cli/commands.h"
#include "util/error.h"

static int write_key(const char *path, const char *key, int mode) {
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  /* Not being able to write where asked is a file-system failure (exit 3),
   * a missing folder included; an existing key is refused as bad input. */
  if (fd < 0) return lt_error_set(errno == EEXIST ? LT_EINVAL : LT_EIO, "cannot create %s: %s", path, strerror(errno));
  char line[64];
  int n = snprintf(line, sizeof line, "%s\n", key);
  int rc = write(fd, line, (size_t)n) == n ? 0 : lt_error_set(LT_EIO, "cannot write %s: %s", path, strerror(errno));
  if (fsync(fd) < 0 && rc == 0) rc = lt_error_set(LT_EIO, "cannot fsync %s: %s", path, strerror(errno));
  close(fd);
  return rc;
}

int lt_cmd_keygen(int argc, char **argv) {
  lt_arg_t args[] = {
      {.name = "--out",
       .kind = LT_ARG_VALUE,
       .metavar = "PREFIX",
       .help = "write PREFIX.key (secret, mode 0600) and PREFIX.pub"},
  };
  lt_cmd_args_t c = {.command = "keygen",
                     .usage = "--out PREFIX",
                     .summary =
                         "Makes a ZeroMQ CURVE key pair (Z85 text). The daemon loads its secret key from "
                         "transport.server_secret_key; workers are admitted when their .pub file is listed "
                         "in transport.client_keys.",
                     .args = args,
                     .nargs = 1,
                     .min_pos = 0,
                     .max_pos = 0};
  int rc = lt_args_parse(&c, argc, argv);
  if (rc) return rc == 1 ? 0 : rc;
  const char *prefix = lt_args_str(&c, "--out", NULL);
  if (!prefix) return lt_args_usage_error(&c, "--out is required");
  if (!zmq_has("curve"))
    return lt_cli_fail("keygen", lt_error_set(LT_EUNSUPP, "this libzmq was built without CURVE support"));
  char pub[41], sec[41];
  if (zmq_curve_keypair(pub, sec) != 0)
    return lt_cli_fail("keygen", lt_error_set(LT_ESYS, "zmq_curve_keypair: %s", zmq_strerror(zmq_errno())));
  char p1[4096], p2[4096];
  if (snprintf(p1, sizeof p1, "%s.key", prefix) >= (int)sizeof p1 ||
      snprintf(p2, sizeof p2, "%s.pub", prefix) >= (int)sizeof p2)
    return lt_args_usage_error(&c, "--out: path too long");
  if ((rc = write_key(p1, sec, 0600)) < 0) return lt_cli_fail("keygen", rc);
  if ((rc = write_key(p2, pub, 0644)) < 0) return lt_cli_fail("keygen", rc);
  printf("%s\n", pub);
  return 0;
}
