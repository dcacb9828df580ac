/* The swe environment's tools (docs/envs.md, "`swe`"), in the shape SWE-agent and OpenHands give models:
 * bash(command) in the episode's persistent shell; view(path, view_range) of a file with line numbers or of a
 * directory two levels deep; edit(path, old_str, new_str) replacing a unique string, edit(path, file_text)
 * creating a file, edit(path, insert_line, new_str) inserting after a line.  Files are read and written from the
 * host side of the box (lt_box_read_file / lt_box_write_file: resolved inside the root, so a symlink cannot lead
 * out).  What the policy did wrong is an answer it can read ("Error: ..."); only the box's own failures are
 * errors of the environment. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envs/internal.h"
#include "util/error.h"
#include "util/utf8.h"

#define FILE_MAX (16u << 20) /* the largest file view and edit read */
#define SNIPPET 4            /* lines shown around an edit */

static const char *const tool_names[LT__SWE_NTOOLS] = {"bash", "view", "edit"};

int lt__swe_tool_index(const char *name) {
  for (int i = 0; i < LT__SWE_NTOOLS; i++)
    if (!strcmp(name, tool_names[i])) return i;
  return -1;
}

/* Text the policy reads: valid UTF-8 (other bytes, NUL included, become U+FFFD). */
static void swe_clean(lt_buf_t *out, const char *s, size_t n) {
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    int k = s[i] ? lt_utf8_decode(s + i, n - i, &cp) : 0;
    if (k > 0) lt_buf_append(out, s + i, (size_t)k), i += (size_t)k;
    else lt_buf_puts(out, "\xef\xbf\xbd"), i++;
  }
}

/* s cut to cap bytes: its first and last halves around a note of what was cut. */
static void cap_text(lt_buf_t *out, const char *s, size_t n, size_t cap) {
  if (n <= cap) {
    swe_clean(out, s, n);
    return;
  }
  size_t head = cap / 2, tail = cap - head;
  swe_clean(out, s, head);
  lt_buf_printf(out, LT__SWE_CUT_NOTE, n - head - tail);
  swe_clean(out, s + n - tail, tail);
}

static const char *arg(const lt_tool_call_t *c, const char *name) {
  for (int i = 0; i < c->nargs; i++)
    if (!strcmp(c->args[i].name, name)) return c->args[i].value;
  return NULL;
}

/* An absolute path inside the root: as given, or relative to repo_dir; "." and ".." resolved in the text (the box
 * resolves what is left inside the root, so this is for the answers' names, not for safety). */
static char *full_path(const lt__swe_ctx_t *x, const char *p) {
  lt_buf_t in = {0}, b = {0};
  if (p[0] != '/') lt_buf_printf(&in, "%s/", x->repo_dir);
  lt_buf_puts(&in, p);
  for (const char *c = in.data ? in.data : "/"; *c;) {
    while (*c == '/') c++;
    size_t n = strcspn(c, "/");
    if (n == 2 && !strncmp(c, "..", 2)) {
      while (b.len && b.data[b.len - 1] != '/') b.len--;
      if (b.len) b.len--; /* the slash before it */
    } else if (n && !(n == 1 && *c == '.')) {
      lt_buf_putc(&b, '/');
      lt_buf_append(&b, c, n);
    }
    c += n;
  }
  if (!b.len) lt_buf_putc(&b, '/');
  if (b.data) b.data[b.len] = 0;
  lt_buf_free(&in);
  return lt_buf_take(&b);
}

/* A read failure the policy caused (no such file, a directory, too big) is its answer (0); others are the box's. */
static int read_error(const char *path, int rc, lt_buf_t *out) {
  if (rc == LT_ENOENT) lt_buf_printf(out, "Error: %s does not exist.", path);
  else if (rc == LT_ERANGE) lt_buf_printf(out, "Error: %s is larger than %u bytes.", path, FILE_MAX);
  else if (rc == LT_EINVAL) lt_buf_printf(out, "Error: %s is not a regular file.", path);
  else return lt_error_wrap(rc, "swe: reading %s in the box", path);
  return 0;
}

static int write_file(const lt__swe_ctx_t *x, const char *path, const char *data, size_t len, lt_buf_t *out) {
  int rc = lt_box_write_file(x->box, path, data, len, 0);
  if (rc == LT_ENOSPC) lt_buf_printf(out, "Error: no space left for %s (the episode's writes are limited).", path);
  else if (rc == LT_EINVAL || rc == LT_ENOENT)
    lt_buf_printf(out, "Error: %s cannot be written (%s).", path, lt_error_msg());
  else if (rc < 0) return lt_error_wrap(rc, "swe: writing %s in the box", path);
  return rc < 0 ? 1 : 0;
}

/* Lines [from, to] (1-based) of s, numbered as cat -n numbers them. */
static void numbered(lt_buf_t *out, const char *s, size_t n, int from, int to) {
  int line = 1;
  for (size_t i = 0; i < n && line <= to; line++) {
    const char *nl = memchr(s + i, '\n', n - i);
    size_t e = nl ? (size_t)(nl - s) : n;
    if (line >= from) {
      lt_buf_printf(out, "%6d\t", line);
      swe_clean(out, s + i, e - i);
      lt_buf_putc(out, '\n');
    }
    i = nl ? e + 1 : n;
  }
}

static int count_lines(const char *s, size_t n) {
  int k = 0;
  for (size_t i = 0; i < n; i++) k += s[i] == '\n';
  return k + (n && s[n - 1] != '\n');
}

/* "[a, b]", "a,b", "a b": two integers. */
static int parse_range(const char *v, long *a, long *b) {
  const char *p = v;
  char *end;
  while (*p == ' ' || *p == '[') p++;
  *a = strtol(p, &end, 10);
  if (end == p) return -1;
  p = end;
  while (*p == ' ' || *p == ',') p++;
  *b = strtol(p, &end, 10);
  if (end == p) return -1;
  for (p = end; *p == ' ' || *p == ']';) p++;
  return *p ? -1 : 0;
}

static int list_dir(const lt__swe_ctx_t *x, const char *path, lt_buf_t *out) {
  /* Only the shell's builtins: an image needs nothing but /bin/sh.  Hidden entries are left out, as OpenHands does. */
  static const char script[] =
      "cd -- \"$1\" 2>/dev/null || { echo \"Error: $1 is not a directory or file.\"; exit 1; }\n"
      "for f in *; do [ -e \"$f\" ] || [ -L \"$f\" ] || continue\n"
      "  if [ -d \"$f\" ] && [ ! -L \"$f\" ]; then echo \"$1/$f/\"\n"
      "    for g in \"$f\"/*; do [ -e \"$g\" ] || [ -L \"$g\" ] || continue\n"
      "      if [ -d \"$g\" ] && [ ! -L \"$g\" ]; then echo \"$1/$g/\"; else echo \"$1/$g\"; fi; done\n"
      "  else echo \"$1/$f\"; fi\ndone\n";
  const char *argv[] = {"/bin/sh", "-c", script, "sh", path, NULL};
  lt_sandbox_job_t job = {.argv = argv, .timeout_s = x->tool_timeout_s};
  lt_sandbox_result_t res = {0};
  int rc = lt_box_exec(x->box, &job, &res);
  if (rc < 0) return lt_error_wrap(rc, "swe: listing %s in the box", path);
  if (res.exit_code == 0)
    lt_buf_printf(out, "Here are the files and directories up to 2 levels deep in %s, excluding hidden items:\n", path);
  cap_text(out, res.out ? res.out : "", res.out_len, x->output_bytes);
  lt_sandbox_result_free(&res);
  return 0;
}

static int tool_view(const lt__swe_ctx_t *x, const lt_tool_call_t *c, lt_buf_t *out) {
  const char *p = arg(c, "path"), *vr = arg(c, "view_range");
  if (!p || !*p) {
    lt_buf_puts(out, "Error: view needs a path.");
    return 0;
  }
  char *path = full_path(x, p), *data = NULL;
  size_t len = 0;
  int rc = lt_box_read_file(x->box, path, FILE_MAX, &data, &len);
  if (rc == LT_EINVAL && !vr) rc = list_dir(x, path, out); /* a directory (or a special file: it says so) */
  else if (rc < 0) rc = read_error(path, rc, out);
  if (data && memchr(data, 0, len)) {
    lt_buf_printf(out, "Error: %s is a binary file (%zu bytes): not shown.", path, len);
  } else if (data) {
    int n = count_lines(data, len);
    long a = 1, b = n;
    if (vr && (parse_range(vr, &a, &b) < 0 || a < 1 || (n && a > n) || (b != -1 && b < a))) {
      lt_buf_printf(out, "Error: view_range %s: expected [start, end] with 1 <= start <= %d and end >= start or -1.",
                    vr, n);
    } else {
      if (b == -1 || b > n) b = n;
      lt_buf_t body = {0};
      numbered(&body, data, len, (int)a, (int)b);
      lt_buf_printf(out, "Here's the result of running `cat -n` on %s:\n", path);
      cap_text(out, body.data ? body.data : "", body.len, x->output_bytes);
      lt_buf_free(&body);
    }
  }
  free(data);
  free(path);
  return rc;
}

/* The lines around [first, last] of the new content, as an edit's answer. */
static void snippet(lt_buf_t *out, const char *path, const char *s, size_t n, int first, int last, size_t cap) {
  lt_buf_t body = {0};
  numbered(&body, s, n, first - SNIPPET > 1 ? first - SNIPPET : 1, last + SNIPPET);
  lt_buf_printf(out, "The file %s has been edited. Here's the result of running `cat -n` on a snippet of %s:\n", path,
                path);
  cap_text(out, body.data ? body.data : "", body.len, cap);
  lt_buf_puts(out, "Review the changes and make sure they are as expected. Edit the file again if necessary.");
  lt_buf_free(&body);
}

static int line_of(const char *s, size_t off) {
  int k = 1;
  for (size_t i = 0; i < off; i++) k += s[i] == '\n';
  return k;
}

static int tool_edit(const lt__swe_ctx_t *x, const lt_tool_call_t *c, lt_buf_t *out) {
  const char *p = arg(c, "path"), *old = arg(c, "old_str"), *new = arg(c, "new_str"), *text = arg(c, "file_text"),
             *ins = arg(c, "insert_line");
  if (!p || !*p || (!old && !text && !ins)) {
    lt_buf_puts(out,
                "Error: edit needs a path and one of old_str (with new_str), file_text (a new file), or "
                "insert_line (with new_str).");
    return 0;
  }
  char *path = full_path(x, p), *data = NULL;
  size_t len = 0;
  int rc = 0;
  if (text && !old && !ins) { /* a new file */
    rc = lt_box_read_file(x->box, path, FILE_MAX, &data, &len);
    if (rc < 0 && rc != LT_ENOENT && rc != LT_EINVAL && rc != LT_ERANGE) {
      rc = lt_error_wrap(rc, "swe: reading %s in the box", path);
    } else if (rc != LT_ENOENT) {
      lt_buf_printf(out, "Error: %s already exists; change it with old_str and new_str.", path);
      rc = 0;
    } else if ((rc = write_file(x, path, text, strlen(text), out)) == 0) {
      lt_buf_printf(out, "File created successfully at: %s", path);
    }
    rc = rc > 0 ? 0 : rc;
  } else if ((rc = lt_box_read_file(x->box, path, FILE_MAX, &data, &len)) < 0) {
    rc = read_error(path, rc, out);
  } else if (memchr(data, 0, len)) {
    lt_buf_printf(out, "Error: %s is a binary file: not edited.", path);
  } else if (ins) {
    char *end;
    long at = strtol(ins, &end, 10);
    int n = count_lines(data, len);
    if (end == ins || *end || at < 0 || at > n || !new) {
      lt_buf_printf(out, "Error: insert_line must be a line number from 0 to %d, with new_str.", n);
    } else {
      size_t off = 0;
      for (long k = 0; k < at; k++) {
        const char *nl = memchr(data + off, '\n', len - off);
        off = nl ? (size_t)(nl - data) + 1 : len;
      }
      lt_buf_t b = {0};
      lt_buf_append(&b, data, off);
      if (off == len && len && data[len - 1] != '\n') lt_buf_putc(&b, '\n');
      lt_buf_puts(&b, new);
      if (!*new || new[strlen(new) - 1] != '\n') lt_buf_putc(&b, '\n');
      lt_buf_append(&b, data + off, len - off);
      if ((rc = lt_buf_ok(&b)) == 0 && (rc = write_file(x, path, b.data, b.len, out)) == 0)
        snippet(out, path, b.data, b.len, (int)at + 1, (int)at + count_lines(new, strlen(new)), x->output_bytes);
      rc = rc > 0 ? 0 : rc;
      lt_buf_free(&b);
    }
  } else if (!*old) {
    lt_buf_puts(out, "Error: old_str is empty; to add text use insert_line, to create a file file_text.");
  } else {
    size_t ol = strlen(old);
    int hits = 0;
    const char *first = NULL;
    lt_buf_t lines = {0};
    for (const char *q = memmem(data, len, old, ol); q; q = memmem(q + 1, len - (size_t)(q + 1 - data), old, ol)) {
      if (!hits++) first = q;
      lt_buf_printf(&lines, "%s%d", hits > 1 ? ", " : "", line_of(data, (size_t)(q - data)));
    }
    if (hits == 0) {
      lt_buf_printf(out, "Error: no replacement was performed: old_str did not appear verbatim in %s.", path);
    } else if (hits > 1) {
      lt_buf_printf(out,
                    "Error: no replacement was performed: old_str occurs %d times in %s (lines %s); make it unique "
                    "with more context.",
                    hits, path, lines.data);
    } else {
      const char *rep = new ? new : "";
      lt_buf_t b = {0};
      lt_buf_append(&b, data, (size_t)(first - data));
      lt_buf_puts(&b, rep);
      lt_buf_append(&b, first + ol, len - (size_t)(first - data) - ol);
      int l0 = line_of(data, (size_t)(first - data));
      if ((rc = lt_buf_ok(&b)) == 0 && (rc = write_file(x, path, b.data, b.len, out)) == 0)
        snippet(out, path, b.data, b.len, l0, l0 + count_lines(rep, strlen(rep)), x->output_bytes);
      rc = rc > 0 ? 0 : rc;
      lt_buf_free(&b);
    }
    lt_buf_free(&lines);
  }
  free(data);
  free(path);
  return rc;
}

static int tool_bash(lt__swe_ctx_t *x, const lt_tool_call_t *c, lt_buf_t *out, int *timed_out) {
  const char *cmd = arg(c, "command");
  if (!cmd) {
    lt_buf_puts(out, "Error: bash needs a command.");
    return 0;
  }
  int rc = x->shell ? 0 : lt__swe_shell_start(x->box, x->repo_dir, &x->shell);
  if (rc < 0) return rc;
  lt_buf_t raw = {0};
  lt__swe_run_t r;
  if ((rc = lt__swe_shell_run(x->shell, cmd, x->tool_timeout_s, x->output_bytes, &raw, &r)) < 0) {
    lt_buf_free(&raw);
    return rc;
  }
  if (r.restarted) lt_buf_printf(out, "[the shell had exited: a new shell started in %s]\n", x->repo_dir);
  swe_clean(out, raw.data ? raw.data : "", raw.len);
  lt_buf_free(&raw);
  if (out->len && out->data[out->len - 1] != '\n') lt_buf_putc(out, '\n');
  if (r.timed_out) lt_buf_printf(out, "[killed after %g s: the command's time ran out]", x->tool_timeout_s);
  else if (r.shell_ended)
    lt_buf_printf(out, "[the shell exited with status %d; the next command starts a new one in %s]", r.shell_exit,
                  x->repo_dir);
  else lt_buf_printf(out, "[exit status %d]", r.status);
  *timed_out = r.timed_out;
  return 0;
}

int lt__swe_tool(lt__swe_ctx_t *x, const lt_tool_call_t *c, lt_buf_t *out, int *timed_out) {
  *timed_out = 0;
  int t = lt__swe_tool_index(c->name);
  if (t < 0 || !(x->tools & (1u << t))) {
    lt_buf_printf(out, "Error: there is no tool '%s' (the tools are", c->name);
    for (int i = 0; i < LT__SWE_NTOOLS; i++)
      if (x->tools & (1u << i)) lt_buf_printf(out, " %s", tool_names[i]);
    lt_buf_puts(out, ").");
    return 0;
  }
  return t == 0 ? tool_bash(x, c, out, timed_out) : t == 1 ? tool_view(x, c, out) : tool_edit(x, c, out);
}

/* The tools as OpenAI function schemas (the spec's "tools": a chat template renders them). */
cJSON *lt__swe_tool_schemas(unsigned tools, double timeout_s) {
  char bash_desc[256];
  snprintf(bash_desc, sizeof bash_desc,
           "Run a shell command in a persistent shell (the working directory and variables persist between calls); "
           "%g seconds per call.",
           timeout_s);
  static const char *const view_desc = "Show a file with line numbers, or the lines of view_range; list a directory.";
  static const char *const edit_desc =
      "Replace old_str, which must occur exactly once, with new_str; or create a file "
      "with file_text; or insert new_str after line insert_line.";
  struct {
    const char *name, *desc, *props, *required;
  } defs[LT__SWE_NTOOLS] = {
      {"bash", bash_desc, "{\"command\":{\"type\":\"string\",\"description\":\"the command\"}}", "[\"command\"]"},
      {"view", view_desc,
       "{\"path\":{\"type\":\"string\",\"description\":\"absolute, or relative to the repository\"},"
       "\"view_range\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"description\":\"[start, end], end -1 for the last line\"}}",
       "[\"path\"]"},
      {"edit", edit_desc,
       "{\"path\":{\"type\":\"string\"},\"old_str\":{\"type\":\"string\"},\"new_str\":{\"type\":\"string\"},"
       "\"file_text\":{\"type\":\"string\"},\"insert_line\":{\"type\":\"integer\"}}",
       "[\"path\"]"},
  };
  cJSON *arr = cJSON_CreateArray();
  for (int i = 0; arr && i < LT__SWE_NTOOLS; i++) {
    if (!(tools & (1u << i))) continue;
    cJSON *f = cJSON_CreateObject(), *fn = cJSON_CreateObject(), *params = cJSON_CreateObject();
    cJSON_AddStringToObject(f, "type", "function");
    cJSON_AddStringToObject(fn, "name", defs[i].name);
    cJSON_AddStringToObject(fn, "description", defs[i].desc);
    cJSON_AddStringToObject(params, "type", "object");
    cJSON_AddItemToObject(params, "properties", cJSON_Parse(defs[i].props));
    cJSON_AddItemToObject(params, "required", cJSON_Parse(defs[i].required));
    cJSON_AddItemToObject(fn, "parameters", params);
    cJSON_AddItemToObject(f, "function", fn);
    cJSON_AddItemToArray(arr, f);
  }
  return arr;
}
