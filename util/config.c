/* Job configuration (util/config.h): JSON files validated against the layers' schemas, overrides, `extends`. */
#include "util/config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/error.h"
#include "util/json.h"

#define PATH_MAX_LEN 512

static const char *jtype(const cJSON *n) {
  if (cJSON_IsString(n)) return "string";
  if (cJSON_IsNumber(n)) return "number";
  if (cJSON_IsBool(n)) return "boolean";
  if (cJSON_IsNull(n)) return "null";
  if (cJSON_IsArray(n)) return "array";
  if (cJSON_IsObject(n)) return "object";
  return "invalid value";
}

/* Segment-wise match of a concrete path against a schema path with "*". */
static int path_match(const char *schema, const char *path, int prefix_only) {
  const char *s = schema, *p = path;
  for (;;) {
    const char *se = strchr(s, '.');
    const char *pe = strchr(p, '.');
    size_t sl = se ? (size_t)(se - s) : strlen(s);
    size_t pl = pe ? (size_t)(pe - p) : strlen(p);
    if (!(sl == 1 && s[0] == '*') && (sl != pl || strncmp(s, p, sl) != 0)) return 0;
    if (!pe) return prefix_only ? se != NULL : se == NULL;
    if (!se) return 0;
    s = se + 1;
    p = pe + 1;
  }
}

static const lt_cfg_entry_t *find_entry(const lt_cfg_schema_t *const *sc, int ns, const char *path) {
  for (int i = 0; i < ns; i++)
    for (int j = 0; j < sc[i]->n; j++)
      if (path_match(sc[i]->entries[j].path, path, 0)) return &sc[i]->entries[j];
  return NULL;
}

static int is_section(const lt_cfg_schema_t *const *sc, int ns, const char *path) {
  for (int i = 0; i < ns; i++)
    for (int j = 0; j < sc[i]->n; j++)
      if (path_match(sc[i]->entries[j].path, path, 1)) return 1;
  return 0;
}

int lt_edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 64 || lb > 64) return 99;
  int d[65][65];
  for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
  for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
  for (size_t i = 1; i <= la; i++)
    for (size_t j = 1; j <= lb; j++) {
      int c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      if (d[i - 1][j] + 1 < c) c = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < c) c = d[i][j - 1] + 1;
      d[i][j] = c;
    }
  return d[la][lb];
}

/* The best sibling name for an unknown key under `parent` ("" at top). */
static void suggest(const lt_cfg_schema_t *const *sc, int ns, const char *parent, const char *key, char *out,
                    size_t cap) {
  int best = 1 << 30;
  out[0] = 0;
  size_t plen = strlen(parent);
  for (int i = 0; i < ns; i++)
    for (int j = 0; j < sc[i]->n; j++) {
      const char *ep = sc[i]->entries[j].path;
      /* Take the segment of ep right after a prefix that matches parent. */
      char seg[128];
      const char *rest = ep;
      if (plen) {
        /* Walk as many segments as parent has and compare. */
        int nseg = 1;
        for (const char *q = parent; *q; q++) nseg += *q == '.';
        char head[PATH_MAX_LEN];
        const char *q = ep;
        for (int k = 0; k < nseg && q; k++) {
          q = strchr(q, '.');
          if (q) q++;
        }
        if (!q) continue;
        size_t hl = (size_t)(q - ep - 1);
        if (hl >= sizeof head) continue;
        memcpy(head, ep, hl);
        head[hl] = 0;
        if (!path_match(head, parent, 0)) continue;
        rest = q;
      }
      const char *dot = strchr(rest, '.');
      size_t sl = dot ? (size_t)(dot - rest) : strlen(rest);
      if (sl == 0 || sl >= sizeof seg || (sl == 1 && rest[0] == '*')) continue;
      memcpy(seg, rest, sl);
      seg[sl] = 0;
      int d = lt_edit_distance(seg, key);
      if (d < best) {
        best = d;
        snprintf(out, cap, "%s", seg);
      }
    }
  size_t kl = strlen(key);
  if (best > 3 || best * 2 > (int)(kl > 2 ? kl : 2)) out[0] = 0;
}

static int check_num(const lt_cfg_entry_t *e, const char *path, double v) {
  if (e->min <= e->max && (v < e->min || v > e->max)) {
    if (e->max >= 1e300) return lt_error_set(LT_ECONFIG, "%s: %g is below the minimum %g", path, v, e->min);
    return lt_error_set(LT_ECONFIG, "%s: %g is outside [%g, %g]", path, v, e->min, e->max);
  }
  return 0;
}

static int in_choices(const char *choices, const char *s) {
  size_t n = strlen(s);
  const char *c = choices;
  while (c && *c) {
    const char *bar = strchr(c, '|');
    size_t l = bar ? (size_t)(bar - c) : strlen(c);
    if (l == n && strncmp(c, s, n) == 0) return 1;
    c = bar ? bar + 1 : NULL;
  }
  return 0;
}

static int choices_error(const lt_cfg_entry_t *e, const char *path, const char *got) {
  char sug[64] = {0};
  int best = 99;
  const char *c = e->choices;
  while (c && *c) {
    const char *bar = strchr(c, '|');
    size_t l = bar ? (size_t)(bar - c) : strlen(c);
    char opt[64];
    if (l < sizeof opt) {
      memcpy(opt, c, l);
      opt[l] = 0;
      int d = lt_edit_distance(opt, got);
      if (d < best) {
        best = d;
        snprintf(sug, sizeof sug, "%s", opt);
      }
    }
    c = bar ? bar + 1 : NULL;
  }
  if (best <= 2)
    return lt_error_set(LT_ECONFIG, "%s: '%s' is not one of %s (did you mean '%s'?)", path, got, e->choices, sug);
  return lt_error_set(LT_ECONFIG, "%s: '%s' is not one of %s", path, got, e->choices);
}

static int check_value(const lt_cfg_entry_t *e, const char *path, const cJSON *n) {
  switch (e->type) {
  case LT_CFG_BOOL:
    if (!cJSON_IsBool(n)) return lt_error_set(LT_ECONFIG, "%s: expected boolean, got %s", path, jtype(n));
    return 0;
  case LT_CFG_INT:
    if (!cJSON_IsNumber(n)) return lt_error_set(LT_ECONFIG, "%s: expected integer, got %s", path, jtype(n));
    if (n->valuedouble != floor(n->valuedouble) || fabs(n->valuedouble) > 9007199254740992.0)
      return lt_error_set(LT_ECONFIG, "%s: expected integer, got %g", path, n->valuedouble);
    return check_num(e, path, n->valuedouble);
  case LT_CFG_NUM:
    if (!cJSON_IsNumber(n)) return lt_error_set(LT_ECONFIG, "%s: expected number, got %s", path, jtype(n));
    return check_num(e, path, n->valuedouble);
  case LT_CFG_STR:
  case LT_CFG_PATH:
    if (!cJSON_IsString(n)) return lt_error_set(LT_ECONFIG, "%s: expected string, got %s", path, jtype(n));
    return 0;
  case LT_CFG_ENUM:
    if (!cJSON_IsString(n))
      return lt_error_set(LT_ECONFIG, "%s: expected one of %s, got %s", path, e->choices, jtype(n));
    if (!in_choices(e->choices, n->valuestring)) return choices_error(e, path, n->valuestring);
    return 0;
  case LT_CFG_INT_OR_ENUM:
    if (cJSON_IsString(n)) {
      if (!in_choices(e->choices, n->valuestring)) return choices_error(e, path, n->valuestring);
      return 0;
    }
    if (!cJSON_IsNumber(n) || n->valuedouble != floor(n->valuedouble))
      return lt_error_set(LT_ECONFIG, "%s: expected integer or one of %s, got %s", path, e->choices, jtype(n));
    return check_num(e, path, n->valuedouble);
  case LT_CFG_NUM_LIST:
  case LT_CFG_STR_LIST: {
    if (!cJSON_IsArray(n)) return lt_error_set(LT_ECONFIG, "%s: expected array, got %s", path, jtype(n));
    int i = 0;
    for (const cJSON *c = n->child; c; c = c->next, i++) {
      if (e->type == LT_CFG_NUM_LIST) {
        if (!cJSON_IsNumber(c)) return lt_error_set(LT_ECONFIG, "%s[%d]: expected number, got %s", path, i, jtype(c));
        char p[PATH_MAX_LEN];
        snprintf(p, sizeof p, "%s[%d]", path, i);
        int rc = check_num(e, p, c->valuedouble);
        if (rc < 0) return rc;
      } else if (!cJSON_IsString(c)) {
        return lt_error_set(LT_ECONFIG, "%s[%d]: expected string, got %s", path, i, jtype(c));
      }
    }
    return 0;
  }
  case LT_CFG_MAP:
    if (!cJSON_IsObject(n)) return lt_error_set(LT_ECONFIG, "%s: expected object, got %s", path, jtype(n));
    return 0;
  case LT_CFG_JSON: return 0;
  case LT_CFG_REMOVED: return lt_error_set(LT_ECONFIG, "%s: %s", path, e->doc);
  }
  return 0;
}

/* A map's keys are domain names, which become Prometheus label values, metric-name parts and file names: 1 to 64
 * ASCII letters, digits, '_' and '-', starting with a letter or digit. */
static int check_name(const char *path, const char *key) {
  size_t n = strspn(key, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-");
  if (key[n] == 0 && n >= 1 && n <= 64 && key[0] != '_' && key[0] != '-') return 0;
  lt_buf_t b = {0};
  lt_json_quote(&b, key);
  int rc = lt_error_set(LT_ECONFIG,
                        "%s: %.80s is not a name: 1 to 64 letters, digits, '_' and '-', starting with a "
                        "letter or digit (it becomes a Prometheus label and a file name)",
                        path, b.data ? b.data : "");
  lt_buf_free(&b);
  return rc;
}

static int validate(const lt_config_t *cfg, const cJSON *obj, const char *path) {
  for (const cJSON *c = obj->child; c; c = c->next) {
    char p[PATH_MAX_LEN];
    if (!c->string) continue;
    if (strchr(c->string, '.') || !c->string[0])
      return lt_error_set(LT_ECONFIG, "%s%s'%s': keys may not be empty or contain '.'", path, path[0] ? "." : "",
                          c->string);
    if (snprintf(p, sizeof p, "%s%s%s", path, path[0] ? "." : "", c->string) >= (int)sizeof p)
      return lt_error_set(LT_ECONFIG, "%s: key path too long", path);
    const lt_cfg_entry_t *e = find_entry(cfg->schemas, cfg->nschemas, p);
    if (e) {
      int rc = check_value(e, p, c);
      if (rc < 0) return rc;
      if (e->type == LT_CFG_MAP) {
        for (const cJSON *k = c->child; k && rc == 0; k = k->next) rc = check_name(p, k->string);
        if (rc == 0) rc = validate(cfg, c, p);
        if (rc < 0) return rc;
      }
      continue;
    }
    if (is_section(cfg->schemas, cfg->nschemas, p)) {
      if (!cJSON_IsObject(c)) return lt_error_set(LT_ECONFIG, "%s: expected object, got %s", p, jtype(c));
      int rc = validate(cfg, c, p);
      if (rc < 0) return rc;
      continue;
    }
    char sug[128];
    suggest(cfg->schemas, cfg->nschemas, path, c->string, sug, sizeof sug);
    if (sug[0]) return lt_error_set(LT_ECONFIG, "%s: unknown key (did you mean '%s'?)", p, sug);
    return lt_error_set(LT_ECONFIG, "%s: unknown key", p);
  }
  return 0;
}

/* Walks/creates objects along path; returns the parent and the last segment. */
static cJSON *walk(cJSON *root, const char *path, char *last, size_t cap, int create) {
  cJSON *cur = root;
  const char *p = path;
  for (;;) {
    const char *dot = strchr(p, '.');
    size_t l = dot ? (size_t)(dot - p) : strlen(p);
    if (l == 0 || l >= cap) return NULL;
    memcpy(last, p, l);
    last[l] = 0;
    if (!dot) return cur;
    cJSON *next = cJSON_GetObjectItemCaseSensitive(cur, last);
    if (!next) {
      if (!create) return NULL;
      next = cJSON_AddObjectToObject(cur, last);
      if (!next) return NULL;
    } else if (!cJSON_IsObject(next)) {
      return NULL;
    }
    cur = next;
    p = dot + 1;
  }
}

static int put(cJSON *root, const char *path, cJSON *val) {
  char last[128];
  cJSON *parent = walk(root, path, last, sizeof last, 1);
  if (!parent) {
    cJSON_Delete(val);
    return lt_error_set(LT_ECONFIG, "%s: a parent of this key is not an object", path);
  }
  if (cJSON_GetObjectItemCaseSensitive(parent, last)) cJSON_ReplaceItemInObjectCaseSensitive(parent, last, val);
  else cJSON_AddItemToObject(parent, last, val);
  return 0;
}

static int apply_set(const lt_config_t *cfg, const char *set) {
  const char *eq = strchr(set, '=');
  if (!eq || eq == set) return lt_error_set(LT_ECONFIG, "--set '%s': expected path=value", set);
  char path[PATH_MAX_LEN];
  size_t pl = (size_t)(eq - set);
  if (pl >= sizeof path) return lt_error_set(LT_ECONFIG, "--set: path too long");
  memcpy(path, set, pl);
  path[pl] = 0;
  const char *v = eq + 1;
  /* The whole value must be JSON ("1-3" is text, not 1); a text key takes it as written (run.name=2024,
   * learner.cpus=3). */
  cJSON *val = cJSON_ParseWithOpts(v, NULL, 1);
  const lt_cfg_entry_t *e = find_entry(cfg->schemas, cfg->nschemas, path);
  if (val && !cJSON_IsString(val) && e && (e->type == LT_CFG_STR || e->type == LT_CFG_PATH)) {
    cJSON_Delete(val);
    val = NULL;
  }
  if (!val) val = cJSON_CreateString(v);
  if (!val) return lt_error_set(LT_ENOMEM, "--set: out of memory");
  int rc = put(cfg->root, path, val);
  if (rc < 0) return lt_error_wrap(rc, "--set");
  return 0;
}

static int fill_defaults(lt_config_t *cfg) {
  for (int i = 0; i < cfg->nschemas; i++)
    for (int j = 0; j < cfg->schemas[i]->n; j++) {
      const lt_cfg_entry_t *e = &cfg->schemas[i]->entries[j];
      if (!e->def || strchr(e->path, '*')) continue;
      if (lt_config_get(cfg, e->path)) continue;
      cJSON *v = cJSON_Parse(e->def);
      if (!v) return lt_error_set(LT_EINVAL, "schema bug: default of %s is not JSON: %s", e->path, e->def);
      int rc = put(cfg->root, e->path, v);
      if (rc < 0) return rc;
    }
  return 0;
}

int lt_config_from_json(lt_config_t *cfg, cJSON *root, const char *const *sets, int nsets,
                        const lt_cfg_schema_t *const *schemas, int nschemas) {
  char src[sizeof cfg->source];
  memcpy(src, cfg->source, sizeof src);
  memset(cfg, 0, sizeof *cfg);
  memcpy(cfg->source, src, sizeof src);
  cfg->schemas = schemas;
  cfg->nschemas = nschemas;
  if (!cJSON_IsObject(root)) {
    const char *t = jtype(root);
    cJSON_Delete(root);
    return lt_error_set(LT_ECONFIG, "top level: expected object, got %s", t);
  }
  cfg->root = root;
  int rc = 0;
  for (int i = 0; i < nsets && rc == 0; i++) rc = apply_set(cfg, sets[i]);
  if (rc < 0) goto fail;
  rc = validate(cfg, cfg->root, "");
  if (rc < 0) goto fail;
  rc = fill_defaults(cfg);
  if (rc < 0) goto fail;
  return 0;
fail:
  cJSON_Delete(cfg->root);
  cfg->root = NULL;
  return rc;
}

/* Child keys override the base's; objects merge key by key. */
static void merge_into(cJSON *base, cJSON *child) {
  while (child->child) {
    cJSON *c = cJSON_DetachItemViaPointer(child, child->child);
    cJSON *b = cJSON_GetObjectItemCaseSensitive(base, c->string);
    if (b && cJSON_IsObject(b) && cJSON_IsObject(c)) {
      merge_into(b, c);
      cJSON_Delete(c);
    } else if (b) {
      cJSON_ReplaceItemViaPointer(base, b, c);
    } else {
      cJSON_AddItemToObject(base, c->string, c);
    }
  }
}

/* The path-valued keys of one file (LT_CFG_PATH) made relative to its folder,
 * as "extends" is, so that a config runs from any working directory. A path
 * that names nothing there is left as written (taken from the working
 * directory: configs written before paths were resolved). */
static void resolve_paths(cJSON *obj, const char *prefix, const char *dir, const lt_cfg_schema_t *const *sc, int ns) {
  for (cJSON *c = obj->child; c; c = c->next) {
    char p[PATH_MAX_LEN];
    if (!c->string || snprintf(p, sizeof p, "%s%s%s", prefix, prefix[0] ? "." : "", c->string) >= (int)sizeof p)
      continue;
    if (cJSON_IsObject(c)) {
      resolve_paths(c, p, dir, sc, ns);
      continue;
    }
    const lt_cfg_entry_t *e = find_entry(sc, ns, p);
    if (!e || e->type != LT_CFG_PATH || !cJSON_IsString(c) || !c->valuestring[0] || c->valuestring[0] == '/') continue;
    char full[4096];
    if (snprintf(full, sizeof full, "%s/%s", dir, c->valuestring) >= (int)sizeof full || access(full, F_OK) != 0)
      continue;
    cJSON_SetValuestring(c, full);
  }
}

/* A config file with its "extends" chain resolved: "extends" names a base
 * config (relative to this file's directory) that this file overrides. */
static int load_file(const char *path, int depth, const lt_cfg_schema_t *const *sc, int ns, cJSON **out) {
  cJSON *root;
  int rc = lt_json_parse_file(path, &root);
  if (rc < 0) return rc;
  const char *sl = strrchr(path, '/');
  char dir[4096];
  snprintf(dir, sizeof dir, "%.*s", sl ? (int)(sl - path) + (sl == path) : 1, sl ? path : ".");
  if (cJSON_IsObject(root)) resolve_paths(root, "", dir, sc, ns);
  cJSON *ext = cJSON_DetachItemFromObjectCaseSensitive(root, "extends");
  if (!ext) {
    *out = root;
    return 0;
  }
  if (!cJSON_IsString(ext) || !ext->valuestring[0]) {
    cJSON_Delete(ext);
    cJSON_Delete(root);
    return lt_error_set(LT_ECONFIG, "%s: extends: expected the path of a base config file", path);
  }
  if (depth >= 8) {
    cJSON_Delete(ext);
    cJSON_Delete(root);
    return lt_error_set(LT_ECONFIG, "%s: extends: more than 8 levels (a cycle?)", path);
  }
  char base[4096];
  const char *slash = strrchr(path, '/');
  if (ext->valuestring[0] == '/' || !slash) snprintf(base, sizeof base, "%s", ext->valuestring);
  else snprintf(base, sizeof base, "%.*s/%s", (int)(slash - path), path, ext->valuestring);
  cJSON_Delete(ext);
  cJSON *b;
  if ((rc = load_file(base, depth + 1, sc, ns, &b)) < 0) {
    char why[1024];
    snprintf(why, sizeof why, "%s", lt_error_msg());
    cJSON_Delete(root);
    return lt_error_set(rc, "%s: extends: %s", path, why);
  }
  merge_into(b, root);
  cJSON_Delete(root);
  *out = b;
  return 0;
}

int lt_config_load(lt_config_t *cfg, const char *path, const char *const *sets, int nsets,
                   const lt_cfg_schema_t *const *schemas, int nschemas) {
  cJSON *root;
  memset(cfg, 0, sizeof *cfg);
  if (path) {
    int rc = load_file(path, 0, schemas, nschemas, &root);
    if (rc < 0) return rc;
    snprintf(cfg->source, sizeof cfg->source, "%s", path);
  } else {
    root = cJSON_CreateObject();
    if (!root) return lt_error_set(LT_ENOMEM, "out of memory");
  }
  return lt_config_from_json(cfg, root, sets, nsets, schemas, nschemas);
}

void lt_config_free(lt_config_t *cfg) {
  cJSON_Delete(cfg->root);
  cfg->root = NULL;
}

const cJSON *lt_config_get(const lt_config_t *cfg, const char *path) {
  char last[128];
  cJSON *parent = walk(cfg->root, path, last, sizeof last, 0);
  if (!parent) return NULL;
  const cJSON *n = cJSON_GetObjectItemCaseSensitive(parent, last);
  return (n && !cJSON_IsNull(n)) ? n : NULL;
}

/* A path read with an accessor must be declared with a default of that type: anything else is a bug. */
static const cJSON *need(const lt_config_t *cfg, const char *path, cJSON_bool (*is)(const cJSON *), const char *want) {
  const cJSON *n = lt_config_get(cfg, path);
  LT_ASSERT(n && is(n), "config path '%s' read as %s is not declared with a default", path, want);
  return n;
}

int64_t lt_config_int(const lt_config_t *cfg, const char *path) {
  return (int64_t)need(cfg, path, cJSON_IsNumber, "integer")->valuedouble;
}

double lt_config_num(const lt_config_t *cfg, const char *path) {
  return need(cfg, path, cJSON_IsNumber, "number")->valuedouble;
}

int lt_config_bool(const lt_config_t *cfg, const char *path) {
  return cJSON_IsTrue(need(cfg, path, cJSON_IsBool, "boolean"));
}

const char *lt_config_str(const lt_config_t *cfg, const char *path) {
  return need(cfg, path, cJSON_IsString, "string")->valuestring;
}

char *lt_config_dump(const lt_config_t *cfg) { return cJSON_Print(cfg->root); }

static const char *type_doc(const lt_cfg_entry_t *e, char *buf, size_t cap) {
  const char *base = "";
  switch (e->type) {
  case LT_CFG_BOOL: base = "boolean"; break;
  case LT_CFG_INT: base = "integer"; break;
  case LT_CFG_NUM: base = "number"; break;
  case LT_CFG_STR: base = "string"; break;
  case LT_CFG_PATH: base = "path (relative: from the config file's folder)"; break;
  case LT_CFG_ENUM: base = "enum"; break;
  case LT_CFG_INT_OR_ENUM: base = "integer or enum"; break;
  case LT_CFG_NUM_LIST: base = "list of numbers"; break;
  case LT_CFG_STR_LIST: base = "list of strings"; break;
  case LT_CFG_MAP: base = "map"; break;
  case LT_CFG_JSON: base = "JSON"; break;
  case LT_CFG_REMOVED: base = "removed"; break;
  }
  int n = snprintf(buf, cap, "%s", base);
  if (e->choices && n >= 0 && (size_t)n + 4 < cap) {
    /* '|' would split a Markdown table cell. */
    buf[n++] = ':';
    buf[n++] = ' ';
    for (const char *c = e->choices; *c && (size_t)n + 3 < cap; c++) {
      if (*c == '|') {
        buf[n++] = ',';
        buf[n++] = ' ';
      } else {
        buf[n++] = *c;
      }
    }
    buf[n] = 0;
  }
  if ((e->type == LT_CFG_INT || e->type == LT_CFG_NUM || e->type == LT_CFG_INT_OR_ENUM || e->type == LT_CFG_NUM_LIST) &&
      e->min <= e->max && n >= 0 && (size_t)n < cap) {
    if (e->max >= 1e300) snprintf(buf + n, cap - (size_t)n, ", ≥ %g", e->min);
    else snprintf(buf + n, cap - (size_t)n, ", in [%g, %g]", e->min, e->max);
  }
  return buf;
}

void lt_config_doc_markdown(const lt_cfg_schema_t *const *schemas, int nschemas, lt_buf_t *out) {
  lt_buf_puts(out,
              "# Configuration reference\n\n"
              "Generated by `bin/longtail config --schema-md` from the schema in the code; "
              "`make docs` rewrites this file and a test fails when it is stale.\n\n"
              "A config is a JSON object. Every key below is optional and takes its default when absent; "
              "unknown keys are errors. `--set path=value` overrides any key from the command line "
              "(the value is parsed as JSON, and taken as a string when it is not JSON). "
              "A `*` in a path stands for a name you choose (a domain, a map key). "
              "`\"extends\": \"base.json\"` (relative to the file) starts from another config and "
              "overrides its keys, objects merged key by key (configs/ablation-*.json extend "
              "configs/default.json). Keys of type *path* given as relative paths are taken from the "
              "folder of the config file that sets them, as `extends` is, so a config runs from any working "
              "directory (a relative path that names nothing there is taken from the working directory; "
              "`--set` values are taken from the working directory).\n\n");
  for (int i = 0; i < nschemas; i++) {
    const lt_cfg_schema_t *s = schemas[i];
    lt_buf_printf(out, "## %s\n\n", s->section);
    if (s->doc && s->doc[0]) lt_buf_printf(out, "%s\n\n", s->doc);
    lt_buf_puts(out, "| key | type | default | meaning |\n|---|---|---|---|\n");
    for (int j = 0; j < s->n; j++) {
      const lt_cfg_entry_t *e = &s->entries[j];
      char t[256];
      lt_buf_printf(out, "| `%s` | %s | %s%s%s | %s |\n", e->path, type_doc(e, t, sizeof t), e->def ? "`" : "",
                    e->def ? e->def : "—", e->def ? "`" : "", e->doc ? e->doc : "");
    }
    lt_buf_puts(out, "\n");
  }
}
