/* `longtail ui RUN_DIR [--port P] [--bind ADDR]`: the web console of a run, or of a folder of runs (docs/ui.md),
 * read-only, until SIGINT or SIGTERM. */
#include <stdio.h>

#include "cli/commands.h"
#include "net/signals.h"
#include "ui/ui.h"
#include "util/error.h"
#include "util/log.h"

typedef struct {
  lt_http_server_t *http;
  uv_signal_t sigint, sigterm;
} console_t;

static void on_signal(uv_signal_t *h, int sig) {
  console_t *c = h->data;
  LT_INFO("ui", "signal %d: stopping", sig);
  lt_http_close(c->http, NULL, NULL);
  uv_close((uv_handle_t *)&c->sigint, NULL);
  uv_close((uv_handle_t *)&c->sigterm, NULL);
}

int lt_cmd_ui(int argc, char **argv) {
  lt_arg_t args[] = {
      {.name = "--port",
       .kind = LT_ARG_VALUE,
       .metavar = "P",
       .help = "TCP port (default 8300; 0: any free port, printed)"},
      {.name = "--bind", .kind = LT_ARG_VALUE, .metavar = "ADDR", .help = "address to listen on (default 127.0.0.1)"},
  };
  lt_cmd_args_t a = {.command = "ui",
                     .usage = "RUN_DIR [--port P] [--bind ADDR]",
                     .summary =
                         "Serves a read-only web console of a run (overview, curves, trajectories and the "
                         "trajectory inspector), live or finished; a folder of runs lists them.  Prints its "
                         "address.  See docs/ui.md.",
                     .args = args,
                     .nargs = 2,
                     .min_pos = 1,
                     .max_pos = 1};
  int rc = lt_args_parse(&a, argc, argv);
  if (rc) return rc == 1 ? 0 : rc;
  long long port;
  if ((rc = lt_args_long(&a, "--port", 8300, 0, 65535, &port))) return rc;
  const char *bind = lt_args_str(&a, "--bind", "127.0.0.1");
  lt_log_set_process("ui");
  lt_ui_t *u;
  if ((rc = lt_ui_open(a.pos[0], &u)) < 0) return lt_cli_fail("ui", rc);
  lt_ui_set_tokenizer(u, lt_cli_run_tokenizer);
  uv_loop_t loop;
  if ((rc = uv_loop_init(&loop)) != 0) {
    lt_ui_close(u);
    return lt_cli_fail("ui", lt_error_set(LT_ESYS, "its event loop: %s", uv_strerror(rc)));
  }
  console_t c = {0};
  if ((rc = lt_ui_listen(u, &loop, bind, (int)port, &c.http)) < 0 ||
      (rc = lt_signals_watch(&loop, &c.sigint, &c.sigterm, on_signal, &c)) < 0) {
    if (c.http) lt_http_close(c.http, NULL, NULL);
    uv_run(&loop, UV_RUN_DEFAULT); /* the failed listener's handle closes (and frees it), or the loop cannot close */
    uv_loop_close(&loop);
    lt_ui_close(u);
    return lt_cli_fail("ui", rc);
  }
  /* The address on stdout, so a script that asked for port 0 learns the port. */
  printf("http://%s:%d/\n", bind, lt_http_port(c.http));
  fflush(stdout);
  LT_INFO("ui", "%s: %d run%s", a.pos[0], lt_ui_nruns(u), lt_ui_nruns(u) == 1 ? "" : "s");
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  lt_ui_close(u);
  return 0;
}
