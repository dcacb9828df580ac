/* Error codes and the per-thread error detail (util/error.h). */
#include "util/error.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define LT_ERRMSG_MAX 1024

static _Thread_local char errmsg[LT_ERRMSG_MAX];

const char *lt_strerror(int code) {
  switch (code) {
  case LT_OK: return "success";
  case LT_EINVAL: return "invalid argument";
  case LT_ENOMEM: return "out of memory";
  case LT_EIO: return "I/O error";
  case LT_ENOSPC: return "no space left on device";
  case LT_ENOENT: return "not found";
  case LT_EPROTO: return "malformed message";
  case LT_EVERSION: return "unsupported version";
  case LT_ECONFIG: return "configuration error";
  case LT_ERANGE: return "value out of range";
  case LT_EFORMAT: return "malformed file";
  case LT_EUNSUPP: return "not supported";
  case LT_ETIMEDOUT: return "timed out";
  case LT_EUNREACH: return "unreachable";
  case LT_EREMOTE: return "remote error";
  case LT_EBUSY: return "busy";
  case LT_ECORRUPT: return "integrity check failed";
  case LT_EDUP: return "duplicate";
  case LT_EDEVICE: return "device error";
  case LT_ESYS: return "system error";
  case LT_ECANCELED: return "canceled";
  default: return "unknown error";
  }
}

int lt_error_setv(int code, const char *fmt, va_list ap) {
  vsnprintf(errmsg, sizeof errmsg, fmt, ap);
  return code;
}

int lt_error_set(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  lt_error_setv(code, fmt, ap);
  va_end(ap);
  return code;
}

int lt_error_wrap(int code, const char *fmt, ...) {
  char prefix[LT_ERRMSG_MAX], old[LT_ERRMSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  memcpy(old, errmsg, sizeof old);
  if (old[0]) snprintf(errmsg, sizeof errmsg, "%s: %s", prefix, old);
  else snprintf(errmsg, sizeof errmsg, "%s: %s", prefix, lt_strerror(code));
  return code;
}

const char *lt_error_msg(void) { return errmsg[0] ? errmsg : "(no detail)"; }

void lt_error_clear(void) { errmsg[0] = 0; }

int lt_error_exit_code(int code) {
  switch (code) {
  case LT_OK: return LT_EXIT_OK;
  case LT_EINVAL:
  case LT_ECONFIG:
  case LT_ERANGE:
  case LT_EFORMAT:
  case LT_EUNSUPP:
  case LT_EVERSION:
  case LT_EPROTO:
  case LT_ENOENT: /* a named file or key that is not there is bad input */ return LT_EXIT_USAGE;
  case LT_EIO:
  case LT_ENOSPC: return LT_EXIT_IO;
  case LT_EUNREACH:
  case LT_ETIMEDOUT:
  case LT_EREMOTE: return LT_EXIT_UNREACH;
  case LT_EDEVICE: return LT_EXIT_DEVICE;
  case LT_ECORRUPT: return LT_EXIT_CORRUPT;
  default: return LT_EXIT_FAIL;
  }
}

int lt_error_from_errno(int err) {
  switch (err) {
  case 0: return LT_OK;
  case ENOMEM: return LT_ENOMEM;
  case ENOSPC:
  case EDQUOT: return LT_ENOSPC;
  case ENOENT:
  case ENOTDIR: return LT_ENOENT;
  case EIO:
  case EROFS:
  case EACCES:
  case EPERM:
  case EISDIR: return LT_EIO;
  case EINVAL: return LT_EINVAL;
  case ETIMEDOUT: return LT_ETIMEDOUT;
  case ECONNREFUSED:
  case EHOSTUNREACH:
  case ENETUNREACH: return LT_EUNREACH;
  case EBUSY:
  case EAGAIN: return LT_EBUSY;
  default: return LT_ESYS;
  }
}

void lt_assert_fail(const char *file, int line, const char *cond, const char *fmt, ...) {
  fflush(stdout);
  fprintf(stderr, "longtail: internal error at %s:%d: ", file, line);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, " (%s)\n", cond);
  /* _exit: a broken invariant must not run atexit handlers (a leak report would replace the code) */
  _exit(LT_EXIT_INTERNAL);
}
