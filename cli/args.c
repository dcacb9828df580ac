/* Command-line flags of the subcommands (cli/args.h): parsing a command's flag table, --help and usage errors. */
#include "cli/args.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/config.h"
#include "util/error.h"
#include "util/log.h"

void lt_args_print_help(const lt_cmd_args_t *c) {
  printf("usage: longtail %s %s\n\n%s\n", c->command, c->usage, c->summary);
  if (c->details) printf("\n%s\n", c->details);
  printf("\noptions:\n");
  for (int i = 0; i < c->nargs; i++) {
    char left[64];
    snprintf(left, sizeof left, "%s%s%s", c->args[i].name, c->args[i].metavar ? " " : "",
             c->args[i].metavar ? c->args[i].metavar : "");
    printf("  %-28s %s%s\n", left, c->args[i].help, c->args[i].kind == LT_ARG_MULTI ? " (repeatable)" : "");
  }
  printf("  %-28s %s\n", "--log-level LEVEL", "debug|info|warn|error|off (default info)");
  printf("  %-28s %s\n", "--log-format text|json", "format of log records on stderr");
  printf("  %-28s %s\n", "--help", "show this help");
}

int lt_args_usage_error(const lt_cmd_args_t *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "longtail %s: ", c->command);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nusage: longtail %s %s\n(see 'longtail %s --help')\n", c->command, c->usage, c->command);
  return LT_EXIT_USAGE;
}

static lt_arg_t *find(lt_cmd_args_t *c, const char *name, size_t len) {
  for (int i = 0; i < c->nargs; i++)
    if (strlen(c->args[i].name) == len && strncmp(c->args[i].name, name, len) == 0) return &c->args[i];
  return NULL;
}

static int add_pos(lt_cmd_args_t *c, const char *a) {
  if (c->npos >= LT_ARGS_MAX_POS) return lt_args_usage_error(c, "too many arguments");
  c->pos[c->npos++] = a;
  return 0;
}

int lt_args_parse(lt_cmd_args_t *c, int argc, char **argv) {
  c->npos = 0;
  c->dashdash = -1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (c->dashdash >= 0 || a[0] != '-' || a[1] == 0) {
      if (add_pos(c, a)) return LT_EXIT_USAGE;
      continue;
    }
    if (strcmp(a, "--") == 0) {
      c->dashdash = c->npos;
      continue;
    }
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      lt_args_print_help(c);
      return 1;
    }
    const char *eq = strchr(a, '=');
    size_t nlen = eq ? (size_t)(eq - a) : strlen(a);
    const char *val = eq ? eq + 1 : NULL;
    int is_level = nlen == 11 && strncmp(a, "--log-level", 11) == 0;
    int is_format = nlen == 12 && strncmp(a, "--log-format", 12) == 0;
    if (is_level || is_format) {
      if (!val) {
        if (i + 1 >= argc) return lt_args_usage_error(c, "%.*s needs a value", (int)nlen, a);
        val = argv[++i];
      }
      if (is_level) {
        int l = lt_log_level_parse(val);
        if (l < 0) return lt_args_usage_error(c, "--log-level: '%s' is not one of debug|info|warn|error|off", val);
        lt_log_set_level((lt_log_level)l);
      } else if (strcmp(val, "json") == 0) {
        lt_log_set_format(LT_LOG_JSON);
      } else if (strcmp(val, "text") == 0) {
        lt_log_set_format(LT_LOG_TEXT);
      } else {
        return lt_args_usage_error(c, "--log-format: '%s' is not one of text|json", val);
      }
      continue;
    }
    lt_arg_t *f = find(c, a, nlen);
    if (!f) {
      char best[64] = {0};
      int bd = 99;
      char name[64];
      snprintf(name, sizeof name, "%.*s", (int)(nlen < 60 ? nlen : 60), a);
      for (int k = 0; k < c->nargs; k++) {
        int d = lt_edit_distance(c->args[k].name, name);
        if (d < bd) {
          bd = d;
          snprintf(best, sizeof best, "%s", c->args[k].name);
        }
      }
      if (bd <= 2) return lt_args_usage_error(c, "unknown option '%s' (did you mean '%s'?)", name, best);
      return lt_args_usage_error(c, "unknown option '%s'", name);
    }
    if (f->kind == LT_ARG_FLAG) {
      if (val) return lt_args_usage_error(c, "%s takes no value", f->name);
      f->set = 1;
      continue;
    }
    if (!val) {
      if (i + 1 >= argc) return lt_args_usage_error(c, "%s needs a value (%s)", f->name, f->metavar ? f->metavar : "");
      val = argv[++i];
    }
    if (f->kind == LT_ARG_VALUE) {
      if (f->set) return lt_args_usage_error(c, "%s given twice", f->name);
      f->value = val;
    } else {
      if (f->nvalues >= LT_ARGS_MAX_MULTI) return lt_args_usage_error(c, "%s given too often", f->name);
      f->values[f->nvalues++] = val;
      f->value = val;
    }
    f->set = 1;
  }
  if (c->npos < c->min_pos) return lt_args_usage_error(c, "missing argument");
  if (c->max_pos >= 0 && c->npos > c->max_pos)
    return lt_args_usage_error(c, "unexpected argument '%s'", c->pos[c->max_pos]);
  return 0;
}

lt_arg_t *lt_args_get(lt_cmd_args_t *c, const char *name) {
  lt_arg_t *a = find(c, name, strlen(name));
  LT_ASSERT(a, "flag %s not declared by '%s'", name, c->command);
  return a;
}

const char *lt_args_str(lt_cmd_args_t *c, const char *name, const char *def) {
  lt_arg_t *a = lt_args_get(c, name);
  return a->set ? a->value : def;
}

int lt_args_flag(lt_cmd_args_t *c, const char *name) { return lt_args_get(c, name)->set; }

int lt_args_long(lt_cmd_args_t *c, const char *name, long long def, long long lo, long long hi, long long *out) {
  lt_arg_t *a = lt_args_get(c, name);
  if (!a->set) {
    *out = def;
    return 0;
  }
  char *end;
  errno = 0;
  long long v = strtoll(a->value, &end, 10);
  if (errno || end == a->value || *end) return lt_args_usage_error(c, "%s: '%s' is not an integer", name, a->value);
  if (v < lo || v > hi) return lt_args_usage_error(c, "%s: %lld is outside [%lld, %lld]", name, v, lo, hi);
  *out = v;
  return 0;
}

int lt_args_double(lt_cmd_args_t *c, const char *name, double def, double *out) {
  lt_arg_t *a = lt_args_get(c, name);
  if (!a->set) {
    *out = def;
    return 0;
  }
  char *end;
  errno = 0;
  double v = strtod(a->value, &end);
  if (errno || end == a->value || *end) return lt_args_usage_error(c, "%s: '%s' is not a number", name, a->value);
  *out = v;
  return 0;
}

int lt_args_bounds(lt_cmd_args_t *c, const char *name, double out[2], int *set) {
  const char *v = lt_args_str(c, name, NULL);
  if (set) *set = v != NULL;
  if (!v) return 0;
  char *end;
  double x = strtod(v, &end);
  if (*end != ',') return lt_args_usage_error(c, "%s: expected LOW,HIGH, got '%s'", name, v);
  double y = strtod(end + 1, &end);
  if (*end || !(x > 0) || !(y >= x)) return lt_args_usage_error(c, "%s: expected 0 < LOW <= HIGH, got '%s'", name, v);
  out[0] = x;
  out[1] = y;
  return 0;
}

int lt_cli_fail(const char *command, int rc) {
  fprintf(stderr, "longtail %s: error: %s\n", command, lt_error_msg());
  return lt_error_exit_code(rc);
}
