/* `longtail sandbox run [--image REF] [--timeout S] [--memory MB] [--json] -- CMD ...`: one command in the
 * sandbox the environments and rewards use, or in a fresh root made from a task image (sandbox/image.h). */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "sandbox/image.h"
#include "sandbox/sandbox.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"

#define EXIT_TIMEOUT 124 /* as timeout(1) */

static void print_json(const lt_sandbox_result_t *r) {
  lt_buf_t b = {0};
  lt_buf_puts(&b, "{\"exit_code\":");
  lt_json_int(&b, r->exit_code);
  lt_buf_puts(&b, ",\"signal\":");
  lt_json_int(&b, r->signal);
  lt_buf_printf(&b, ",\"timed_out\":%s,\"oom\":%s,\"stdout\":", r->timed_out ? "true" : "false",
                r->oom ? "true" : "false");
  lt_json_quote_n(&b, r->out, r->out_len);
  lt_buf_puts(&b, ",\"stderr\":");
  lt_json_quote_n(&b, r->err, r->err_len);
  lt_buf_printf(&b,
                ",\"stdout_truncated\":%s,\"stderr_truncated\":%s,\"wall_ms\":", r->out_truncated ? "true" : "false",
                r->err_truncated ? "true" : "false");
  lt_json_num(&b, round(r->wall_ms * 1000) / 1000);
  lt_buf_puts(&b, "}\n");
  if (lt_buf_ok(&b) == 0) fwrite(b.data, 1, b.len, stdout);
  lt_buf_free(&b);
}

/* Our stdin to its end: read, not opened as /dev/stdin, which a socket (an agent's, from libuv) refuses. */
static int read_stdin(char **out, size_t *len) {
  lt_buf_t b = {0};
  char tmp[65536];
  for (;;) {
    ssize_t n = read(0, tmp, sizeof tmp);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      lt_buf_free(&b);
      return lt_error_set(LT_EIO, "cannot read stdin: %s", strerror(errno));
    }
    if (n == 0) break;
    lt_buf_append(&b, tmp, (size_t)n);
    if (b.len > (256u << 20)) {
      lt_buf_free(&b);
      return lt_error_set(LT_ERANGE, "stdin: over 256 MiB");
    }
  }
  if (lt_buf_ok(&b) < 0) return lt_error_set(LT_ENOMEM, "stdin: out of memory");
  *len = b.len;
  *out = lt_buf_take(&b);
  return *out ? 0 : lt_error_set(LT_ENOMEM, "stdin: out of memory");
}

/* One command in a fresh root of the image, every limit of the sandbox applying. */
static int run_in_image(const char *ref, const char *cache, const lt_sandbox_limits_t *lim, const lt_sandbox_job_t *job,
                        lt_sandbox_result_t *r) {
  lt_image_t *img = NULL;
  lt_box_t *box = NULL;
  int rc = lt_image_open(cache, ref, &img);
  if (rc == 0) rc = lt_box_create(img, lim, &box);
  if (rc == 0) rc = lt_box_exec(box, job, r);
  if (box) lt_box_destroy(box);
  lt_image_close(img);
  return rc;
}

int lt_cmd_sandbox(int argc, char **argv) {
  lt_arg_t args[] = {
      {.name = "--timeout",
       .kind = LT_ARG_VALUE,
       .metavar = "S",
       .help = "wall-clock deadline in seconds (default sandbox.timeout_s)"},
      {.name = "--memory", .kind = LT_ARG_VALUE, .metavar = "MB", .help = "memory limit (default sandbox.memory_mb)"},
      {.name = "--json",
       .kind = LT_ARG_FLAG,
       .help = "print {exit_code, signal, timed_out, oom, stdout, stderr, wall_ms}"},
      {.name = "--stdin",
       .kind = LT_ARG_VALUE,
       .metavar = "FILE",
       .help = "the program's stdin ('-': ours); default empty"},
      {.name = "--config",
       .kind = LT_ARG_VALUE,
       .metavar = "CFG",
       .help = "take the other limits from CFG's sandbox section"},
      {.name = "--set", .kind = LT_ARG_MULTI, .metavar = "PATH=VALUE", .help = "override a config key"},
      {.name = "--port",
       .kind = LT_ARG_VALUE,
       .metavar = "P",
       .help = "the program's 127.0.0.1:P reaches this host's 127.0.0.1:P (its only network)"},
      {.name = "--env",
       .kind = LT_ARG_MULTI,
       .metavar = "NAME",
       .help = "pass our environment variable NAME to the program"},
      {.name = "--file",
       .kind = LT_ARG_MULTI,
       .metavar = "PATH",
       .help = "copy the file PATH into /work (with --image: the image's WorkingDir) under its base name"},
      {.name = "--image",
       .kind = LT_ARG_VALUE,
       .metavar = "REF",
       .help =
           "run in a fresh copy-on-write root of this image: oci:DIR[:TAG], oci-archive:FILE[:TAG], docker-archive:FILE"},
      {.name = "--cache",
       .kind = LT_ARG_VALUE,
       .metavar = "DIR",
       .help = "the image cache (default sandbox.image_cache)"},
      {.name = "--ro",
       .kind = LT_ARG_MULTI,
       .metavar = "DIR",
       .help = "bind the host directory DIR (absolute) read-only at the same path (a program's node_modules)"},
  };
  lt_cmd_args_t c = {.command = "sandbox",
                     .usage =
                         "run [--image REF] [--timeout S] [--memory MB] [--json] [--port P] [--env NAME] [--file PATH] "
                         "[--ro DIR] -- CMD ...",
                     .summary =
                         "Runs CMD isolated: new user/pid/net/mount/ipc/uts namespaces, seccomp, rlimits, a "
                         "read-only system, a private /tmp and /work, no network, a deadline that kills the "
                         "whole process tree. With --image, the root is a fresh copy-on-write view of the "
                         "image (its Env, WorkingDir and User apply), discarded at the end.",
                     .details =
                         "Without --json the program's output is passed through and its exit status is ours "
                         "(128+N for signal N, 124 at the deadline). With --json the exit status is 0 whenever "
                         "the sandbox itself worked; docs/sandbox.md lists what is isolated.",
                     .args = args,
                     .nargs = 12,
                     .min_pos = 2,
                     .max_pos = -1};
  int rc = lt_args_parse(&c, argc, argv);
  if (rc) return rc == 1 ? 0 : rc;
  if (strcmp(c.pos[0], "run") != 0) return lt_args_usage_error(&c, "unknown subcommand '%s' (expected run)", c.pos[0]);
  lt_config_t cfg;
  if ((rc = lt_cli_load_config("sandbox", lt_args_str(&c, "--config", NULL), lt_args_get(&c, "--set"), &cfg)))
    return rc;
  lt_sandbox_limits_t lim;
  lt_sandbox_limits_from_config(&cfg, &lim);
  char cache[4096];
  lt_sandbox_image_cache(&cfg, cache, sizeof cache);
  lt_config_free(&cfg);
  long long mem, port;
  if ((rc = lt_args_double(&c, "--timeout", lim.timeout_s, &lim.timeout_s)) ||
      (rc = lt_args_long(&c, "--memory", lim.memory_mb, 1, 1 << 20, &mem)) ||
      (rc = lt_args_long(&c, "--port", 0, 1, 65535, &port)))
    return rc;
  lim.port = (int)port;
  if (!(lim.timeout_s > 0)) return lt_args_usage_error(&c, "--timeout must be positive");
  lim.memory_mb = (int)mem;
  lt_arg_t *ro = lt_args_get(&c, "--ro");
  const char *ro_dirs[LT_SANDBOX_MAX_RO + 1] = {0};
  if (ro->nvalues > LT_SANDBOX_MAX_RO)
    return lt_args_usage_error(&c, "--ro: at most %d directories", LT_SANDBOX_MAX_RO);
  for (int i = 0; i < ro->nvalues; i++) ro_dirs[i] = ro->values[i];
  lim.ro_dirs = ro_dirs;
  lt_sandbox_caps_t caps;
  lt_sandbox_probe(&caps);
  if (!caps.seccomp) fprintf(stderr, "longtail sandbox: warning: this host has no seccomp; running without a filter\n");
  char *in = NULL;
  size_t in_len = 0;
  const char *stdin_path = lt_args_str(&c, "--stdin", NULL);
  if (stdin_path && (rc = strcmp(stdin_path, "-") ? lt_fs_read_file(stdin_path, 256u << 20, &in, &in_len)
                                                  : read_stdin(&in, &in_len)) < 0)
    return lt_cli_fail("sandbox", rc);
  const char *cmd[LT_ARGS_MAX_POS + 1] = {0}; /* the positionals after "run", NULL-terminated */
  for (int i = 1; i < c.npos; i++) cmd[i - 1] = c.pos[i];
  lt_sandbox_job_t job = {.argv = cmd, .stdin_data = in, .stdin_len = in_len};
  lt_sandbox_result_t r;
  lt_arg_t *envs = lt_args_get(&c, "--env"), *files = lt_args_get(&c, "--file");
  char *env[LT_ARGS_MAX_MULTI + 1] = {0};
  lt_sandbox_file_t fs[LT_ARGS_MAX_MULTI];
  for (int i = 0; rc == 0 && i < envs->nvalues; i++) {
    const char *v = getenv(envs->values[i]);
    if (!v) rc = lt_args_usage_error(&c, "--env %s: no such variable in our environment", envs->values[i]);
    else if (!(env[i] = malloc(strlen(envs->values[i]) + strlen(v) + 2))) rc = lt_cli_fail("sandbox", LT_ENOMEM);
    else sprintf(env[i], "%s=%s", envs->values[i], v);
  }
  int nf = 0;
  for (; rc == 0 && nf < files->nvalues; nf++) {
    const char *path = files->values[nf], *slash = strrchr(path, '/');
    char *data = NULL;
    size_t len = 0;
    int e = lt_fs_read_file(path, 256u << 20, &data, &len);
    if (e < 0) {
      rc = lt_cli_fail("sandbox", e);
      break;
    }
    fs[nf] = (lt_sandbox_file_t){.path = slash ? slash + 1 : path, .data = data, .len = len, .mode = 0755};
  }
  job.env = (const char *const *)env;
  job.files = fs;
  job.nfiles = nf;
  const char *image = lt_args_str(&c, "--image", NULL);
  if (rc == 0 && image) rc = run_in_image(image, lt_args_str(&c, "--cache", cache), &lim, &job, &r);
  else if (rc == 0) rc = lt_sandbox_run(&lim, &job, &r);
  free(in);
  for (int i = 0; i < envs->nvalues; i++) free(env[i]);
  for (int i = 0; i < nf; i++) free((char *)fs[i].data);
  if (rc > 0) return rc; /* a usage error, said already */
  if (rc < 0) return lt_cli_fail("sandbox", rc);
  if (lt_args_flag(&c, "--json")) {
    print_json(&r);
    lt_sandbox_result_free(&r);
    return 0;
  }
  fwrite(r.out, 1, r.out_len, stdout);
  fwrite(r.err, 1, r.err_len, stderr);
  int status = r.timed_out ? EXIT_TIMEOUT : r.signal ? 128 + r.signal : r.exit_code;
  if (r.timed_out) fprintf(stderr, "longtail sandbox: killed at the deadline (%g s)\n", lim.timeout_s);
  else if (r.oom) fprintf(stderr, "longtail sandbox: killed at the memory limit (%d MB)\n", lim.memory_mb);
  if (r.out_truncated || r.err_truncated)
    fprintf(stderr, "longtail sandbox: output truncated at %zu bytes\n", lim.output_bytes);
  lt_sandbox_result_free(&r);
  return status;
}
