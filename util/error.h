/* Error codes and the per-thread error detail.
 *
 * Functions that can fail return 0 (or a non-negative value) on success and a
 * negative LT_E* code on failure.  Where a caller needs more than the code (which
 * file, which JSON path, which tensor) the failing function records a message with
 * lt_error_set(); lt_error_msg() returns the last one recorded on this thread. */
#ifndef LT_UTIL_ERROR_H
#define LT_UTIL_ERROR_H

#include <stdarg.h>

enum {
  LT_OK = 0,
  LT_EINVAL = -1,     /* invalid argument or input data */
  LT_ENOMEM = -2,     /* allocation failed */
  LT_EIO = -3,        /* read/write/fsync failed */
  LT_ENOSPC = -4,     /* disk full */
  LT_ENOENT = -5,     /* file or key not found */
  LT_EPROTO = -6,     /* malformed wire message */
  LT_EVERSION = -7,   /* unsupported protocol/schema version */
  LT_ECONFIG = -8,    /* invalid configuration */
  LT_ERANGE = -9,     /* value out of range */
  LT_EFORMAT = -10,   /* malformed file (JSON, safetensors, tokenizer) */
  LT_EUNSUPP = -11,   /* valid but not supported by this build */
  LT_ETIMEDOUT = -12, /* deadline passed */
  LT_EUNREACH = -13,  /* remote peer or server unreachable */
  LT_EREMOTE = -14,   /* remote answered with an error */
  LT_EBUSY = -15,     /* resource busy or locked */
  LT_ECORRUPT = -16,  /* data failed an integrity check */
  LT_EDUP = -17,      /* duplicate (already present) */
  LT_EDEVICE = -18,   /* accelerator error */
  LT_ESYS = -19,      /* other system call failure (errno in the message) */
  LT_ECANCELED = -20, /* operation aborted */
  LT_ECODE_MIN = -20
};

/* Exit codes of the longtail binary (docs/exit-codes.md). */
enum {
  LT_EXIT_OK = 0,
  LT_EXIT_FAIL = 1,      /* runtime failure not covered below */
  LT_EXIT_USAGE = 2,     /* bad command line, config or input data */
  LT_EXIT_IO = 3,        /* file system: unreadable, unwritable, disk full */
  LT_EXIT_UNREACH = 4,   /* a server or peer could not be reached */
  LT_EXIT_DEVICE = 5,    /* accelerator failure */
  LT_EXIT_CORRUPT = 6,   /* a data file failed its integrity check */
  LT_EXIT_AUTH = 7,      /* the daemon refused this worker's CURVE handshake (its key, or the daemon's) */
  LT_EXIT_UNTRAINED = 8, /* a training run ended without one trainable trajectory (every episode failed) */
  LT_EXIT_INTERNAL = 70  /* a bug: an invariant did not hold */
};

const char *lt_strerror(int code);

/* Records a formatted detail message for this thread and returns `code`, so that
 * `return lt_error_set(LT_EINVAL, "…", …);` reads naturally. */
int lt_error_set(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int lt_error_setv(int code, const char *fmt, va_list ap);
/* Prepends "prefix: " to the current detail (adds context on the way up). */
int lt_error_wrap(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *lt_error_msg(void);
void lt_error_clear(void);

/* Maps an error code to the exit code the binary uses for it. */
int lt_error_exit_code(int code);

/* Maps errno to an LT_E* code. */
int lt_error_from_errno(int err);

/* A programmer error (an invariant that does not hold, a config path or flag read that nothing declares, a call
 * libuv defines as infallible failing: uv_timer_init, uv_idle_init, uv_prepare_init, uv_pipe_init), not a runtime
 * failure: prints "longtail: internal error at FILE:LINE: MESSAGE (COND)" on stderr and exits LT_EXIT_INTERNAL
 * (70) at once, without atexit handlers; the one place such errors end.  cond is always evaluated (no NDEBUG). */
#define LT_ASSERT(cond, ...) ((cond) ? (void)0 : lt_assert_fail(__FILE__, __LINE__, #cond, __VA_ARGS__))
void lt_assert_fail(const char *file, int line, const char *cond, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 4, 5)));

#endif
