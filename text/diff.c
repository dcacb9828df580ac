/* A unified diff of two versions of a file: Myers' O((N+M)D) algorithm in
 * linear space (the middle snake, bisected recursively), lines compared by
 * hash then bytes, hunks laid out as git and GNU diff lay them out. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/diff.h"
#include "util/error.h"

/* A bisection explores at most this many edit steps before it gives the region up as all deleted and all
 * inserted: still a correct diff, only not a minimal one, and the cost stays bounded on wholesale rewrites. */
#define DIFF_MAX_D 8192

typedef struct {
  const char *p;
  size_t n; /* bytes, its '\n' included when it has one */
  uint64_t h;
} dline_t;

typedef struct {
  const dline_t *a, *b;
  unsigned char *da, *db; /* 1: line deleted (a) / inserted (b) */
  int *v;                 /* the bisection's two frontiers */
} myers_t;

/* The lines of s (the last one may lack its newline), hashed. */
static dline_t *diff_lines(const char *s, size_t len, int *n) {
  int cnt = 0;
  for (size_t i = 0; i < len; i++) cnt += s[i] == '\n';
  cnt += len && s[len - 1] != '\n';
  dline_t *l = malloc(sizeof *l * (size_t)(cnt + 1));
  if (!l) return NULL;
  int k = 0;
  for (size_t i = 0; i < len;) {
    size_t j = i;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    while (j < len && s[j] != '\n') h = (h ^ (unsigned char)s[j++]) * 1099511628211ull;
    if (j < len) j++, h ^= 0x9e3779b97f4a7c15ull; /* "x" and "x\n" differ */
    l[k++] = (dline_t){s + i, j - i, h};
    i = j;
  }
  *n = k;
  return l;
}

static int line_eq(const dline_t *x, const dline_t *y) {
  return x->h == y->h && x->n == y->n && !memcmp(x->p, y->p, x->n);
}

static void myers_region(myers_t *m, int a0, int a1, int b0, int b1);

/* The middle snake of a[a0,a1) against b[b0,b1) (both non-empty, no common ends): recurses on the two halves
 * it splits the region into, or marks everything changed when none is found within DIFF_MAX_D steps. */
static void myers_bisect(myers_t *m, int a0, int a1, int b0, int b1) {
  int n1 = a1 - a0, n2 = b1 - b0, maxd = (n1 + n2 + 1) / 2, off = maxd, vlen = 2 * maxd + 2;
  int *v1 = m->v, *v2 = m->v + vlen;
  for (int i = 0; i < vlen; i++) v1[i] = v2[i] = -1;
  v1[off + 1] = v2[off + 1] = 0;
  int delta = n1 - n2, front = delta & 1, k1s = 0, k1e = 0, k2s = 0, k2e = 0;
  for (int d = 0; d < maxd && d < DIFF_MAX_D; d++) {
    for (int k1 = -d + k1s; k1 <= d - k1e; k1 += 2) { /* forward from the start */
      int ko = off + k1;
      int x1 = k1 == -d || (k1 != d && v1[ko - 1] < v1[ko + 1]) ? v1[ko + 1] : v1[ko - 1] + 1, y1 = x1 - k1;
      while (x1 < n1 && y1 < n2 && line_eq(&m->a[a0 + x1], &m->b[b0 + y1])) x1++, y1++;
      v1[ko] = x1;
      if (x1 > n1) k1e += 2;
      else if (y1 > n2) k1s += 2;
      else if (front) {
        int k2o = off + delta - k1;
        if (k2o >= 0 && k2o < vlen && v2[k2o] != -1 && x1 >= n1 - v2[k2o]) {
          myers_region(m, a0, a0 + x1, b0, b0 + y1);
          myers_region(m, a0 + x1, a1, b0 + y1, b1);
          return;
        }
      }
    }
    for (int k2 = -d + k2s; k2 <= d - k2e; k2 += 2) { /* backward from the end */
      int ko = off + k2;
      int x2 = k2 == -d || (k2 != d && v2[ko - 1] < v2[ko + 1]) ? v2[ko + 1] : v2[ko - 1] + 1, y2 = x2 - k2;
      while (x2 < n1 && y2 < n2 && line_eq(&m->a[a1 - x2 - 1], &m->b[b1 - y2 - 1])) x2++, y2++;
      v2[ko] = x2;
      if (x2 > n1) k2e += 2;
      else if (y2 > n2) k2s += 2;
      else if (!front) {
        int k1o = off + delta - k2;
        if (k1o >= 0 && k1o < vlen && v1[k1o] != -1) {
          int x1 = v1[k1o], y1 = off + x1 - k1o;
          if (x1 >= n1 - x2) {
            myers_region(m, a0, a0 + x1, b0, b0 + y1);
            myers_region(m, a0 + x1, a1, b0 + y1, b1);
            return;
          }
        }
      }
    }
  }
  memset(m->da + a0, 1, (size_t)n1);
  memset(m->db + b0, 1, (size_t)n2);
}

static void myers_region(myers_t *m, int a0, int a1, int b0, int b1) {
  while (a0 < a1 && b0 < b1 && line_eq(&m->a[a0], &m->b[b0])) a0++, b0++;
  while (a0 < a1 && b0 < b1 && line_eq(&m->a[a1 - 1], &m->b[b1 - 1])) a1--, b1--;
  if (a0 == a1 || b0 == b1) {
    memset(m->da + a0, 1, (size_t)(a1 - a0));
    memset(m->db + b0, 1, (size_t)(b1 - b0));
    return;
  }
  myers_bisect(m, a0, a1, b0, b1);
}

/* One edit of the script: ' ', '-' or '+', with the line it shows. */
typedef struct {
  char op;
  const dline_t *l;
} edit_t;

/* Paths are quoted the way git quotes them when they hold anything but plain printable ASCII other than a
 * quote or a backslash (git's parser, GNU patch and lt_patch_parse read this form). */
static void put_path(lt_buf_t *out, const char *prefix, const char *path) {
  int plain = 1;
  for (const unsigned char *c = (const unsigned char *)path; *c && plain; c++)
    plain = *c > ' ' && *c < 0x7f && *c != '"' && *c != '\\';
  if (plain) {
    lt_buf_printf(out, "%s%s", prefix, path);
    return;
  }
  lt_buf_printf(out, "\"%s", prefix);
  for (const unsigned char *c = (const unsigned char *)path; *c; c++) {
    if (*c == '"' || *c == '\\') lt_buf_printf(out, "\\%c", *c);
    else if (*c == '\t') lt_buf_puts(out, "\\t");
    else if (*c >= ' ' && *c < 0x7f) lt_buf_putc(out, (char)*c);
    else lt_buf_printf(out, "\\%03o", *c);
  }
  lt_buf_putc(out, '"');
}

static void put_range(lt_buf_t *out, char sign, int before, int count) {
  lt_buf_printf(out, " %c%d", sign, count ? before + 1 : before);
  if (count != 1) lt_buf_printf(out, ",%d", count);
}

static void put_hunks(lt_buf_t *out, const edit_t *e, int ne, int context) {
  int oldpos = 0, newpos = 0; /* lines of each side before e[i] */
  for (int i = 0; i < ne;) {
    int c = i;
    while (c < ne && e[c].op == ' ') c++;
    if (c == ne) break;
    int start = c - context > i ? c - context : i, end = c; /* the hunk is e[start, end) */
    for (int k = i; k < start; k++) oldpos++, newpos++;
    for (;;) { /* take the changes; end at the first run of more than 2 * context equal lines */
      while (end < ne && e[end].op != ' ') end++;
      int eq = end;
      while (eq < ne && e[eq].op == ' ') eq++;
      if (eq == ne || eq - end > 2 * context) {
        end = end + context < eq ? end + context : eq;
        break;
      }
      end = eq;
    }
    int na = 0, nb = 0;
    for (int k = start; k < end; k++) na += e[k].op != '+', nb += e[k].op != '-';
    lt_buf_puts(out, "@@");
    put_range(out, '-', oldpos, na);
    put_range(out, '+', newpos, nb);
    lt_buf_puts(out, " @@\n");
    for (int k = start; k < end; k++) {
      lt_buf_putc(out, e[k].op);
      lt_buf_append(out, e[k].l->p, e[k].l->n);
      if (e[k].l->n == 0 || e[k].l->p[e[k].l->n - 1] != '\n') lt_buf_puts(out, "\n\\ No newline at end of file\n");
    }
    oldpos += na, newpos += nb;
    i = end;
  }
}

static int binary(const char *s, size_t n) { return s && memchr(s, 0, n) != NULL; }

int lt_diff_file(lt_buf_t *out, const char *path, const char *old, size_t olen, int omode, const char *new, size_t nlen,
                 int nmode, int context) {
  if (binary(old, olen) || binary(new, nlen)) return LT_EUNSUPP;
  if (!path || !*path || strchr(path, '\n')) return lt_error_set(LT_EINVAL, "diff: a path a diff cannot name");
  omode = omode ? omode & 0777 : 0644, nmode = nmode ? nmode & 0777 : 0644;
  int same = old && new &&olen == nlen && !memcmp(old, new, olen);
  if (same && omode == nmode) return 0;
  int na = 0, nb = 0, rc = 0;
  dline_t *a = diff_lines(old ? old : "", old ? olen : 0, &na), *b = diff_lines(new ? new : "", new ? nlen : 0, &nb);
  myers_t m = {a, b, calloc((size_t)na + 1, 1), calloc((size_t)nb + 1, 1), NULL};
  edit_t *e = malloc(sizeof *e * (size_t)(na + nb + 1));
  if (!a || !b || !m.da || !m.db || !e || !(m.v = malloc(sizeof *m.v * 2 * (size_t)(na + nb + 4)))) {
    rc = lt_error_set(LT_ENOMEM, "diff: out of memory");
    goto done;
  }
  myers_region(&m, 0, na, 0, nb);
  int ne = 0;
  for (int i = 0, j = 0; i < na || j < nb;) { /* deletions before insertions within a change */
    if (i < na && m.da[i]) e[ne++] = (edit_t){'-', &a[i++]};
    else if (j < nb && m.db[j]) e[ne++] = (edit_t){'+', &b[j++]};
    else e[ne++] = (edit_t){' ', &a[i++]}, j++;
  }
  lt_buf_puts(out, "diff --git ");
  put_path(out, "a/", path);
  lt_buf_putc(out, ' ');
  put_path(out, "b/", path);
  lt_buf_putc(out, '\n');
  if (!old) lt_buf_printf(out, "new file mode 100%o\n", nmode);
  else if (!new) lt_buf_printf(out, "deleted file mode 100%o\n", omode);
  else if (omode != nmode) lt_buf_printf(out, "old mode 100%o\nnew mode 100%o\n", omode, nmode);
  if (!same && (na || nb)) {
    lt_buf_puts(out, "--- ");
    if (old) put_path(out, "a/", path);
    else lt_buf_puts(out, "/dev/null");
    lt_buf_puts(out, "\n+++ ");
    if (new) put_path(out, "b/", path);
    else lt_buf_puts(out, "/dev/null");
    lt_buf_putc(out, '\n');
    put_hunks(out, e, ne, context < 0 ? 0 : context);
  }
  rc = lt_buf_ok(out) < 0 ? lt_error_set(LT_ENOMEM, "diff: out of memory") : 0;
done:
  free(a), free(b), free(m.da), free(m.db), free(m.v), free(e);
  return rc;
}
