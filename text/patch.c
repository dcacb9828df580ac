/* A unified diff read and applied: git-style sections (diff --git, modes,
 * renames, new and deleted files) and plain ones (--- / +++ with timestamps,
 * diff -N's epoch dates for created and deleted files).  Each hunk applies
 * where its old lines match exactly: at its line number or the nearest offset,
 * after the previous hunk; a hunk cut short by the file's start or end (fewer
 * leading than trailing context lines at line 1, no trailing context) must
 * match there, as in git apply.  No fuzz: a context line that differs is a
 * failure, never a guess. */
#include <stdlib.h>
#include <string.h>

#include "text/diff.h"
#include "util/error.h"

typedef struct {
  char op;       /* ' ', '-', '+' */
  int eol;       /* the line ends with '\n' (else "\ No newline at end of file" followed it) */
  const char *s; /* its text, without the newline */
  size_t n;
} pline_t;

typedef struct {
  int os, on, ns, nn; /* @@ -os,on +ns,nn @@ */
  int first, count;   /* its lines in the patch's array */
  int lineno;         /* of its @@ line */
} hunk_t;

typedef struct {
  lt_patch_file_t f;
  char *oldp, *newp;
  hunk_t *h;
  int caph;
  int git;      /* a `diff --git` section */
  int seen_hdr; /* its --- / +++ pair was read */
  int renamed;  /* rename from / to gave the names */
  int created, deleted, old_mode;
} pfile_t;

struct lt_patch {
  char *text; /* a copy: the lines point into it */
  pfile_t *files;
  int n, cap;
  pline_t *lines;
  int nlines, caplines;
};

typedef struct {
  const char *p, *end;
  int lineno;
} reader_t;

/* The next line (without '\n'); 0 at the end. */
static int next_line(reader_t *r, const char **s, size_t *n) {
  if (r->p >= r->end) return 0;
  const char *nl = memchr(r->p, '\n', (size_t)(r->end - r->p));
  *s = r->p;
  *n = (size_t)((nl ? nl : r->end) - r->p);
  r->p = nl ? nl + 1 : r->end;
  r->lineno++;
  return 1;
}

static int starts(const char *s, size_t n, const char *lit) {
  size_t k = strlen(lit);
  return n >= k && !memcmp(s, lit, k);
}

/* A path as written: "quoted" with C escapes (git) or bare up to a tab (plain diffs' timestamps) or the end.
 * *rest is what follows it.  NULL for malformed quoting. */
static char *read_name(const char *s, size_t n, const char **rest) {
  char *o = malloc(n + 1);
  size_t k = 0, i = 0;
  if (!o) return NULL;
  if (n && s[0] == '"') {
    for (i = 1; i < n && s[i] != '"'; i++) {
      if (s[i] != '\\') {
        o[k++] = s[i];
        continue;
      }
      if (++i >= n) break;
      char c = s[i];
      if (c >= '0' && c <= '7') {
        int v = 0, d = 0;
        for (; d < 3 && i < n && s[i] >= '0' && s[i] <= '7'; d++, i++) v = v * 8 + (s[i] - '0');
        i--;
        o[k++] = (char)v;
      } else {
        o[k++] = c == 'n'   ? '\n'
                 : c == 't' ? '\t'
                 : c == 'r' ? '\r'
                 : c == 'a' ? '\a'
                 : c == 'b' ? '\b'
                 : c == 'f' ? '\f'
                 : c == 'v' ? '\v'
                            : c;
      }
    }
    if (i >= n) {
      free(o);
      return NULL;
    }
    i++;
  } else {
    while (i < n && s[i] != '\t') o[k++] = s[i++];
    while (k && (o[k - 1] == ' ' || o[k - 1] == '\r')) k--;
  }
  o[k] = 0;
  if (rest) *rest = s + i;
  return o;
}

/* Strips the leading component (a/, b/, old/) when `strip`; refuses what is absolute or climbs out. */
static char *clean_path(reader_t *r, char *p, int strip) {
  if (!p) {
    lt_error_set(LT_EINVAL, "patch: line %d: malformed file name", r->lineno);
    return NULL;
  }
  char *q = p;
  if (strip && strchr(q, '/')) q = strchr(q, '/') + 1;
  int bad = !*q || *q == '/';
  for (const char *c = q; *c && !bad; c = strchr(c, '/') ? strchr(c, '/') + 1 : c + strlen(c))
    bad = !strncmp(c, "..", 2) && (c[2] == '/' || !c[2]);
  if (bad) {
    lt_error_set(LT_EINVAL, "patch: line %d: path '%s' is empty, absolute or leaves the tree", r->lineno, p);
    free(p);
    return NULL;
  }
  memmove(p, q, strlen(q) + 1);
  return p;
}

static int is_devnull(const char *s, size_t n) { return starts(s, n, "/dev/null") && (n == 9 || s[9] == '\t'); }

/* diff -N writes a missing side as its name with the epoch for a date. */
static int epoch_date(const char *s, size_t n) {
  const char *tab = memchr(s, '\t', n);
  if (!tab) return 0;
  size_t k = n - (size_t)(tab + 1 - s);
  return starts(tab + 1, k, "1970-01-01 00:00:00") || starts(tab + 1, k, "1969-12-31 ");
}

static pfile_t *new_file(lt_patch_t *p) {
  if (p->n == p->cap) {
    int cap = p->cap ? 2 * p->cap : 8;
    pfile_t *f = realloc(p->files, sizeof *f * (size_t)cap);
    if (!f) return NULL;
    p->files = f, p->cap = cap;
  }
  pfile_t *f = &p->files[p->n++];
  memset(f, 0, sizeof *f);
  return f;
}

static int add_line(lt_patch_t *p, char op, const char *s, size_t n) {
  if (p->nlines == p->caplines) {
    int cap = p->caplines ? 2 * p->caplines : 64;
    pline_t *l = realloc(p->lines, sizeof *l * (size_t)cap);
    if (!l) return lt_error_set(LT_ENOMEM, "patch: out of memory");
    p->lines = l, p->caplines = cap;
  }
  p->lines[p->nlines++] = (pline_t){op, 1, s, n};
  return 0;
}

static int parse_count(const char **s, const char *end, int *v) {
  const char *q = *s;
  long x = 0;
  while (q < end && *q >= '0' && *q <= '9' && x < 100000000) x = x * 10 + (*q++ - '0');
  if (q == *s || x >= 100000000) return 0;
  *v = (int)x;
  *s = q;
  return 1;
}

/* "@@ -os[,on] +ns[,nn] @@..." */
static int parse_at(const char *s, size_t n, hunk_t *h) {
  const char *q = s + 3, *end = s + n;
  h->on = h->nn = 1;
  if (q >= end || *q++ != '-' || !parse_count(&q, end, &h->os)) return 0;
  if (q < end && *q == ',' && (++q, !parse_count(&q, end, &h->on))) return 0;
  if (q + 1 >= end || *q++ != ' ' || *q++ != '+' || !parse_count(&q, end, &h->ns)) return 0;
  if (q < end && *q == ',' && (++q, !parse_count(&q, end, &h->nn))) return 0;
  return q + 2 < end + 1 && starts(q, (size_t)(end - q), " @@");
}

/* The hunk's lines after its @@ line: exactly on old and nn new ones, then an optional no-newline marker. */
static int read_hunk(lt_patch_t *p, reader_t *r, hunk_t *h) {
  int olds = h->on, news = h->nn;
  h->first = p->nlines;
  while (olds > 0 || news > 0) {
    const char *s;
    size_t n;
    if (!next_line(r, &s, &n))
      return lt_error_set(LT_EINVAL, "patch: hunk at line %d ends early (the patch is cut short)", h->lineno);
    if (n && s[n - 1] == '\r' && n == 1) n = 0; /* an empty context line from a CRLF editor */
    char op = n ? s[0] : ' ';                   /* an empty line is an empty context line whose space was trimmed */
    if (op == '\\') {
      if (p->nlines == h->first)
        return lt_error_set(LT_EINVAL, "patch: line %d: a no-newline marker first in a hunk", r->lineno);
      p->lines[p->nlines - 1].eol = 0;
      continue;
    }
    if ((op != ' ' && op != '-' && op != '+') || (op != '+' && olds == 0) || (op != '-' && news == 0))
      return lt_error_set(LT_EINVAL, "patch: line %d: hunk at line %d holds other lines than its header counts",
                          r->lineno, h->lineno);
    olds -= op != '+', news -= op != '-';
    int rc = add_line(p, op, n ? s + 1 : s, n ? n - 1 : 0);
    if (rc < 0) return rc;
  }
  reader_t peek = *r;
  const char *s;
  size_t n;
  if (next_line(&peek, &s, &n) && n && s[0] == '\\') {
    p->lines[p->nlines - 1].eol = 0;
    *r = peek;
  }
  h->count = p->nlines - h->first;
  return 0;
}

/* The two names of "diff --git a/X b/Y": quoted, or split where the halves name the same path (the names of
 * a section without --- / +++: a mode change, an empty file created or deleted). */
static int git_names(reader_t *r, pfile_t *f, const char *s, size_t n) {
  const char *rest = NULL;
  s += 11, n -= 11;
  if (n && s[0] == '"') {
    char *a = read_name(s, n, &rest), *b = NULL;
    if (a && rest < s + n && *rest == ' ') b = read_name(rest + 1, (size_t)(s + n - rest - 1), NULL);
    if (!b) free(a);
    return b && (f->oldp = clean_path(r, a, 1)) && (f->newp = clean_path(r, b, 1)) ? 0 : LT_EINVAL;
  }
  for (size_t i = 1; i + 1 < n; i++) { /* "a/P b/P": the split whose halves agree past their first component */
    if (s[i] != ' ') continue;
    const char *x = memchr(s, '/', i), *y = memchr(s + i + 1, '/', n - i - 1);
    if (x && y && (size_t)(s + i - x) == (size_t)(s + n - y) && !memcmp(x, y, (size_t)(s + i - x)))
      return (f->oldp = clean_path(r, strndup(s, i), 1)) && (f->newp = clean_path(r, strndup(s + i + 1, n - i - 1), 1))
                 ? 0
                 : LT_EINVAL;
  }
  return 0; /* names from the --- / +++ lines or the rename header */
}

/* A git mode ("100644", "100755"): its permission bits; 0 for what a text patch cannot make (symlinks, submodules). */
static int git_mode(const char *s, size_t n) {
  int m = 0;
  size_t i = 0;
  while (i < n && s[i] >= '0' && s[i] <= '7' && m < 01000000) m = m * 8 + (s[i++] - '0');
  return (m & 0170000) == 0100000 ? m & 0777 : 0;
}

static const char *const hdr_kw[] = {"old mode ",    "new mode ",  "deleted file mode ", "new file mode ",
                                     "rename from ", "rename to ", "copy from ",         "copy to "};

/* A line of a git section's extended header; 1 when it was one, < 0 on error. */
static int git_header(reader_t *r, pfile_t *f, const char *s, size_t n) {
  if (starts(s, n, "Binary files ") || starts(s, n, "GIT binary patch"))
    return lt_error_set(LT_EUNSUPP, "patch: line %d: a binary patch (a text patch cannot carry it)", r->lineno);
  size_t k = 0;
  while (k < sizeof hdr_kw / sizeof hdr_kw[0] && !starts(s, n, hdr_kw[k])) k++;
  if (k == sizeof hdr_kw / sizeof hdr_kw[0]) return 0;
  const char *v = s + strlen(hdr_kw[k]);
  size_t vn = n - strlen(hdr_kw[k]);
  if (k >= 6) return lt_error_set(LT_EUNSUPP, "patch: line %d: a copy (apply it as a new file)", r->lineno);
  if (k >= 4) {
    char **slot = k == 4 ? &f->oldp : &f->newp;
    free(*slot);
    f->renamed = 1;
    if (!(*slot = clean_path(r, read_name(v, vn, NULL), 0))) return LT_EINVAL;
    return 1;
  }
  int m = git_mode(v, vn);
  if (!m) return lt_error_set(LT_EUNSUPP, "patch: line %d: mode %.*s (only regular files)", r->lineno, (int)vn, v);
  if (k == 0) f->old_mode = m;
  else if (k == 1) f->f.new_mode = m;
  else if (k == 2) f->deleted = 1;
  else f->created = 1, f->f.new_mode = m;
  return 1;
}

/* "--- A" then "+++ B": the file's names (unless a rename header gave them), created or deleted by /dev/null
 * or diff -N's epoch date. */
static int name_pair(reader_t *r, pfile_t *f, const char *a, size_t an, const char *b, size_t bn) {
  int anull = is_devnull(a, an), bnull = is_devnull(b, bn);
  if (anull && bnull) return lt_error_set(LT_EINVAL, "patch: line %d: both sides are /dev/null", r->lineno);
  f->created |= anull || (!f->git && epoch_date(a, an));
  f->deleted |= bnull || (!f->git && epoch_date(b, bn));
  if (!anull && (!f->git || !f->oldp || !f->renamed)) {
    free(f->oldp);
    if (!(f->oldp = clean_path(r, read_name(a, an, NULL), 1))) return LT_EINVAL;
  }
  if (!bnull && (!f->git || !f->newp || !f->renamed)) {
    free(f->newp);
    if (!(f->newp = clean_path(r, read_name(b, bn, NULL), 1))) return LT_EINVAL;
  }
  f->seen_hdr = 1;
  return 0;
}

static void file_free(pfile_t *f) { free(f->oldp), free(f->newp), free(f->h); }

void lt_patch_free(lt_patch_t *p) {
  if (!p) return;
  for (int i = 0; i < p->n; i++) file_free(&p->files[i]);
  free(p->files), free(p->lines), free(p->text), free(p);
}

static int add_hunk(lt_patch_t *p, pfile_t *f, reader_t *r, const char *s, size_t n) {
  hunk_t h = {.lineno = r->lineno};
  if (!parse_at(s, n, &h)) return lt_error_set(LT_EINVAL, "patch: line %d: malformed hunk header", r->lineno);
  if (f->f.nhunks == f->caph) {
    int cap = f->caph ? 2 * f->caph : 4;
    hunk_t *nh = realloc(f->h, sizeof *nh * (size_t)cap);
    if (!nh) return lt_error_set(LT_ENOMEM, "patch: out of memory");
    f->h = nh, f->caph = cap;
  }
  int rc = read_hunk(p, r, &h);
  if (rc == 0) f->h[f->f.nhunks++] = h;
  return rc;
}

/* The file's final shape: which side exists, its mode; a section that changes nothing is an error. */
static int file_finish(pfile_t *f, int lineno) {
  if (!f->oldp && !f->newp) return lt_error_set(LT_EINVAL, "patch: the section at line %d names no file", lineno);
  if (f->created && f->deleted)
    return lt_error_set(LT_EINVAL, "patch: the section at line %d both creates and deletes", lineno);
  if (!f->oldp) f->oldp = strdup(f->newp);
  if (!f->newp) f->newp = strdup(f->oldp);
  if (!f->oldp || !f->newp) return lt_error_set(LT_ENOMEM, "patch: out of memory");
  f->f.old_path = f->created ? NULL : f->oldp;
  f->f.new_path = f->deleted ? NULL : f->newp;
  if (f->created && !f->f.new_mode) f->f.new_mode = 0644;
  if (f->f.new_mode && f->f.new_mode == f->old_mode && !f->created) f->f.new_mode = 0;
  int renamed = f->f.old_path && f->f.new_path && strcmp(f->f.old_path, f->f.new_path);
  if (!f->f.nhunks && !f->created && !f->deleted && !renamed && !f->f.new_mode)
    return lt_error_set(LT_EINVAL, "patch: the section of %s at line %d changes nothing", f->newp, lineno);
  return 0;
}

int lt_patch_parse(const char *text, size_t len, lt_patch_t **out) {
  *out = NULL;
  lt_patch_t *p = calloc(1, sizeof *p);
  if (!p || !(p->text = malloc(len + 1))) {
    free(p);
    return lt_error_set(LT_ENOMEM, "patch: out of memory");
  }
  memcpy(p->text, text, len);
  p->text[len] = 0;
  reader_t r = {p->text, p->text + len, 0};
  pfile_t *cur = NULL;
  int rc = 0, cur_line = 0;
  const char *s;
  size_t n;
  while (rc == 0 && next_line(&r, &s, &n)) {
    if (starts(s, n, "diff --git ")) {
      if (cur && (rc = file_finish(cur, cur_line)) < 0) break;
      if (!(cur = new_file(p))) rc = lt_error_set(LT_ENOMEM, "patch: out of memory");
      else cur->git = 1, cur_line = r.lineno, rc = git_names(&r, cur, s, n);
    } else if (cur && cur->git && !cur->seen_hdr && (rc = git_header(&r, cur, s, n)) != 0) {
      rc = rc < 0 ? rc : 0;
    } else if (starts(s, n, "--- ")) {
      reader_t peek = r;
      const char *b;
      size_t bn;
      if (!next_line(&peek, &b, &bn) || !starts(b, bn, "+++ ")) continue; /* prose, not a header */
      if (!cur || !cur->git || cur->seen_hdr) {
        if (cur && (rc = file_finish(cur, cur_line)) < 0) break;
        if (!(cur = new_file(p))) {
          rc = lt_error_set(LT_ENOMEM, "patch: out of memory");
          break;
        }
        cur_line = r.lineno;
      }
      rc = name_pair(&r, cur, s + 4, n - 4, b + 4, bn - 4);
      r = peek;
    } else if (starts(s, n, "@@ -")) {
      if (!cur || (!cur->seen_hdr))
        rc = lt_error_set(LT_EINVAL, "patch: line %d: a hunk outside a file's --- / +++ header", r.lineno);
      else rc = add_hunk(p, cur, &r, s, n);
    }
  }
  if (rc == 0 && cur) rc = file_finish(cur, cur_line);
  if (rc == 0 && p->n == 0) rc = lt_error_set(LT_EINVAL, "patch: no file in it (no --- / +++ header or diff --git)");
  if (rc < 0) {
    lt_patch_free(p);
    return rc;
  }
  *out = p;
  return 0;
}

int lt_patch_nfiles(const lt_patch_t *p) { return p->n; }
const lt_patch_file_t *lt_patch_file(const lt_patch_t *p, int i) { return &p->files[i].f; }

typedef struct {
  const char *s;
  size_t n; /* its '\n' included */
} fline_t;

static int line_is(const fline_t *fl, const pline_t *l) {
  return fl->n == l->n + (size_t)l->eol && !memcmp(fl->s, l->s, l->n) && (!l->eol || fl->s[l->n] == '\n');
}

/* Whether the hunk's old side (context and deletions) is the file's lines from `at`. */
static int hunk_at(const pline_t *hl, int count, const fline_t *fl, int nfl, int at) {
  for (int i = 0, k = at; i < count; i++) {
    if (hl[i].op == '+') continue;
    if (k >= nfl || !line_is(&fl[k], &hl[i])) return 0;
    k++;
  }
  return 1;
}

int lt_patch_apply(const lt_patch_t *p, int i, const char *old, size_t olen, lt_buf_t *out) {
  const pfile_t *f = &p->files[i];
  const char *name = f->newp;
  if (!f->f.old_path && old) return lt_error_set(LT_EINVAL, "patch: %s: already exists (the patch creates it)", name);
  if (f->f.old_path && !old) return lt_error_set(LT_EINVAL, "patch: %s: no such file", f->oldp);
  int nfl = 0;
  for (size_t k = 0; k < olen; k++) nfl += old[k] == '\n';
  nfl += olen && old[olen - 1] != '\n';
  fline_t *fl = malloc(sizeof *fl * (size_t)(nfl + 1));
  if (!fl) return lt_error_set(LT_ENOMEM, "patch: out of memory");
  for (size_t k = 0, j = 0; k < olen; j++) {
    const char *nl = memchr(old + k, '\n', olen - k);
    size_t e = nl ? (size_t)(nl - old) + 1 : olen;
    fl[j] = (fline_t){old + k, e - k};
    k = e;
  }
  size_t out0 = out->len;
  int cursor = 0, offset = 0, rc = 0;
  for (int hi = 0; hi < f->f.nhunks && rc == 0; hi++) {
    const hunk_t *h = &f->h[hi];
    const pline_t *hl = p->lines + h->first;
    int npre = 0, lead = 0, trail = 0;
    for (int k = 0; k < h->count; k++) npre += hl[k].op != '+';
    while (lead < h->count && hl[lead].op == ' ') lead++;
    while (trail < h->count - lead && hl[h->count - 1 - trail].op == ' ') trail++;
    /* git apply's anchors: a hunk stated at the file's start matches there; one whose trailing context was
     * cut by the file's end matches at the end (a zero-context hunk, lead = trail = 0, floats) */
    int stated = h->on ? h->os - 1 : h->os, want = stated + offset;
    int beg = h->os == 0 || (h->os == 1 && h->on > 0), end = trail == 0 && lead > 0, at = -1;
    for (int d = 0; at < 0 && (want - d >= cursor || want + d <= nfl - npre); d++) {
      int c[2] = {want + d, want - d};
      for (int k = 0; k < (d ? 2 : 1) && at < 0; k++)
        if (c[k] >= cursor && c[k] <= nfl - npre && (!beg || c[k] == 0) && (!end || c[k] == nfl - npre) &&
            hunk_at(hl, h->count, fl, nfl, c[k]))
          at = c[k];
    }
    if (at < 0) {
      rc = lt_error_set(LT_EINVAL,
                        "patch: %s: hunk %d (@@ -%d,%d +%d,%d @@, patch line %d) does not apply: its lines "
                        "are not in the file",
                        name, hi + 1, h->os, h->on, h->ns, h->nn, h->lineno);
      break;
    }
    for (int k = cursor; k < at; k++) lt_buf_append(out, fl[k].s, fl[k].n);
    for (int k = 0; k < h->count; k++) {
      if (hl[k].op == '-') continue;
      lt_buf_append(out, hl[k].s, hl[k].n);
      if (hl[k].eol) lt_buf_putc(out, '\n');
    }
    cursor = at + npre;
    offset = at - stated;
  }
  for (int k = cursor; rc == 0 && k < nfl; k++) lt_buf_append(out, fl[k].s, fl[k].n);
  free(fl);
  if (rc == 0 && !f->f.new_path && out->len != out0)
    rc = lt_error_set(LT_EINVAL, "patch: %s: the file to delete holds lines the patch does not delete", name);
  if (rc == 0 && lt_buf_ok(out) < 0) rc = lt_error_set(LT_ENOMEM, "patch: out of memory");
  if (rc < 0) out->len = out0;
  if (out->data) out->data[out->len] = 0;
  return rc;
}
