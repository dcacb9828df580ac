/* The math verifier's LaTeX normalisation: removes what does not change an
 * answer's value (sizing and spacing commands, \text wrappers, units, degree
 * and percent signs, dollar signs, thousands separators) so that the parser
 * (math_expr.c) only sees mathematics. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "rewards/internal.h"
#include "util/buf.h"

#define MAX_BRACES 64

/* Replaced by nothing (or a space, for the spacing ones). */
static const char *const dropped[] = {
    "\\displaystyle",
    "\\textstyle",
    "\\bigl",
    "\\bigr",
    "\\Bigl",
    "\\Bigr",
    "\\biggl",
    "\\biggr",
    "\\big",
    "\\Big",
    "\\bigg",
    "\\Bigg",
    "\\degree",
    "\\circ",
    "\\%",
    "\\$",
    "\\!",
    "\\(",
    "\\)",
    "\\[",
    "\\]",
};
static const char *const spaces[] = {"\\quad", "\\qquad", "\\,", "\\;", "\\:", "\\ ", "~", "\\enspace"};
/* Wrappers whose braces are dropped and whose content is kept. */
static const char *const wrappers[] = {"\\text{",   "\\textbf{", "\\textrm{", "\\textit{", "\\mathrm{", "\\mathbf{",
                                       "\\mathit{", "\\mbox{",   "\\textup{", "\\boxed{",  "\\mathsf{"};
/* Unicode symbols a model may write instead of LaTeX. */
static const char *const unicode[][2] = {
    {"\xcf\x80", "\\pi "},       {"\xe2\x88\x9a", "\\sqrt"}, {"\xc3\x97", "\\times "},  {"\xc2\xb7", "\\cdot "},
    {"\xe2\x8b\x85", "\\cdot "}, {"\xe2\x88\x92", "-"},      {"\xc3\xb7", "\\div "},    {"\xe2\x88\x9e", "\\infty "},
    {"\xe2\x88\xaa", "\\cup "},  {"\xe2\x89\xa4", "\\le "},  {"\xe2\x89\xa5", "\\ge "}, {"\xc2\xb1", "\\pm "},
};
/* Trailing words that name a unit, not a value. */
static const char *const units[] = {
    "cm",      "mm",     "km",     "meter", "meters", "metre",   "metres", "centimeters", "kilometers",
    "inch",    "inches", "ft",     "feet",  "foot",   "yard",    "yards",  "mile",        "miles",
    "units",   "unit",   "square", "sq",    "cubic",  "degrees", "degree", "dollars",     "dollar",
    "cents",   "cent",   "hours",  "hour",  "hrs",    "minutes", "minute", "min",         "seconds",
    "second",  "sec",    "kg",     "grams", "gram",   "pounds",  "pound",  "lbs",         "lb",
    "mph",     "days",   "day",    "weeks", "week",   "years",   "year",   "months",      "month",
    "percent", "liters", "litres", "liter", "ml",     "m",       "s",      "g",
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* 1 if s starts with the command c not followed by more letters (\le is not \left). */
static size_t starts_cmd(const char *s, const char *c) {
  size_t n = strlen(c);
  if (strncmp(s, c, n) != 0) return 0;
  if (c[0] == '\\' && isalpha((unsigned char)c[n - 1]) && isalpha((unsigned char)s[n])) return 0;
  return n;
}

static int is_unit(const char *w, size_t n) {
  for (size_t i = 0; i < COUNT(units); i++)
    if (strlen(units[i]) == n && strncasecmp(units[i], w, n) == 0) return 1;
  return 0;
}

/* Whether the word s[w, end) is a unit to drop: one from the list, after a
 * number or a space; a one-letter unit only after a space, so that 5m (5 times
 * m) stays. */
static int unit_at(const char *s, size_t w, size_t end) {
  if (w == 0 || w == end || !is_unit(s + w, end - w)) return 0;
  char before = s[w - 1];
  if (end - w == 1) return before == ' ';
  return before == ' ' || isdigit((unsigned char)before) || before == ')' || before == '}';
}

/* Removes trailing unit words ("5 cm", "12 square units", "24 cm^2"). */
static void strip_units(char *s) {
  for (;;) {
    size_t n = strlen(s), w;
    while (n && isspace((unsigned char)s[n - 1])) s[--n] = 0;
    size_t pw = n >= 2 && s[n - 2] == '^' && isdigit((unsigned char)s[n - 1])                                   ? 2
                : n >= 4 && !strncmp(s + n - 4, "^{", 2) && isdigit((unsigned char)s[n - 2]) && s[n - 1] == '}' ? 4
                                                                                                                : 0;
    size_t end = n - pw;
    while (pw && end && s[end - 1] == ' ') end--;
    for (w = end; w && isalpha((unsigned char)s[w - 1]); w--) {}
    if (!unit_at(s, w, end)) return;
    s[w] = 0;
  }
}

/* " or " and " and " between answers ("x = 2 or x = 3") separate them like commas. */
static void words_to_commas(char *s) {
  static const char *const seps[] = {" or ", " and "};
  for (size_t i = 0; i < COUNT(seps); i++) {
    size_t n = strlen(seps[i]);
    for (char *p = strstr(s, seps[i]); p; p = strstr(p, seps[i])) {
      *p = ',';
      memmove(p + 1, p + n, strlen(p + n) + 1);
    }
  }
}

char *lt__math_normalize(const char *s) {
  lt_buf_t b = {0};
  int drop[MAX_BRACES]; /* per open brace: drop its closing one */
  int depth = 0;
  lt_buf_reserve(&b, strlen(s) + 1);
  while (*s) {
    size_t n = 0;
    if ((n = starts_cmd(s, "\\left")) || (n = starts_cmd(s, "\\right"))) {
      s += n;
      if (*s == '.') s++; /* \left. is an invisible delimiter */
      continue;
    }
    if ((n = starts_cmd(s, "\\dfrac")) || (n = starts_cmd(s, "\\tfrac"))) {
      lt_buf_puts(&b, "\\frac");
      s += n;
      continue;
    }
    if ((n = starts_cmd(s, "\\lbrace"))) {
      lt_buf_puts(&b, "\\{"), s += n;
      continue;
    }
    if ((n = starts_cmd(s, "\\rbrace"))) {
      lt_buf_puts(&b, "\\}"), s += n;
      continue;
    }
    if ((n = starts_cmd(s, "\\lvert")) || (n = starts_cmd(s, "\\rvert")) || (n = starts_cmd(s, "\\vert"))) {
      lt_buf_putc(&b, '|'), s += n;
      continue;
    }
    if (!strncmp(s, "{,}", 3)) { /* 1{,}000 */
      s += 3;
      continue;
    }
    if (!strncmp(s, "\\,", 2) && b.len && isdigit((unsigned char)b.data[b.len - 1]) && isdigit((unsigned char)s[2]) &&
        isdigit((unsigned char)s[3]) && isdigit((unsigned char)s[4]) && !isdigit((unsigned char)s[5])) {
      s += 2; /* 1\,000: a thin space between digit groups */
      continue;
    }
    if (!strncmp(s, "^\\circ", 6) || !strncmp(s, "^{\\circ}", 8)) {
      s += s[1] == '{' ? 8 : 6;
      continue;
    }
    if (!strncmp(s, "\xc2\xb0", 2)) { /* ° */
      s += 2;
      continue;
    }
    size_t i;
    for (i = 0; i < COUNT(unicode) && strncmp(s, unicode[i][0], strlen(unicode[i][0])); i++) {}
    if (i < COUNT(unicode)) {
      lt_buf_puts(&b, unicode[i][1]);
      s += strlen(unicode[i][0]);
      continue;
    }
    for (i = 0; i < COUNT(dropped) && !(n = starts_cmd(s, dropped[i])); i++) {}
    if (i < COUNT(dropped)) {
      s += n;
      continue;
    }
    for (i = 0; i < COUNT(spaces) && !(n = starts_cmd(s, spaces[i])); i++) {}
    if (i < COUNT(spaces)) {
      lt_buf_putc(&b, ' '), s += n;
      continue;
    }
    for (i = 0; i < COUNT(wrappers) && strncmp(s, wrappers[i], strlen(wrappers[i])); i++) {}
    if (i < COUNT(wrappers) && depth < MAX_BRACES) {
      drop[depth++] = 1;
      lt_buf_putc(&b, ' ');
      s += strlen(wrappers[i]);
      continue;
    }
    if (*s == '$' || *s == '%') {
      s++;
      continue;
    }
    if (*s == '\\' && (s[1] == '{' || s[1] == '}')) { /* set braces are not grouping braces */
      lt_buf_append(&b, s, 2);
      s += 2;
      continue;
    }
    if (*s == '{') {
      if (depth < MAX_BRACES) drop[depth++] = 0;
    } else if (*s == '}' && depth > 0 && drop[--depth]) {
      lt_buf_putc(&b, ' ');
      s++;
      continue;
    }
    lt_buf_putc(&b, *s++);
  }
  if (lt_buf_ok(&b) < 0) {
    lt_buf_free(&b);
    return NULL;
  }
  char *o = lt_buf_take(&b);
  if (!o) return NULL;
  words_to_commas(o);
  strip_units(o);
  /* Trim, and drop a sentence's final period ("12." is 12). */
  size_t len = strlen(o);
  while (len && (isspace((unsigned char)o[len - 1]) || o[len - 1] == '.')) o[--len] = 0;
  size_t lead = strspn(o, " \t\r\n");
  memmove(o, o + lead, len - lead + 1);
  return o;
}
