/* The `tools` environment: multi-turn tool use over a SQLite database that a
 * JSON domain spec describes (configs/envs/bank.json, library.json; format in
 * docs/envs.md): tables and rows, tools with typed arguments, preconditions,
 * dependencies on earlier tools and SQL effects, and task templates whose
 * success is a verifiable end state (the spec's `state` query over the final
 * database equals its value after the task's reference solution), plus, for
 * questions, the expected answer in the final reply.
 *
 * Each episode gets its own in-memory database; a tool call is a few SQL
 * statements, so steps run on the loop. */
#include <ctype.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envs/internal.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/json.h"
#include "util/rng.h"

typedef struct {
  char domain[64];
  char path[512];
  cJSON *spec;
  const cJSON *tools, *tasks;
  uint64_t seed;
  double demo_error_rate, eval_fraction;
} tools_state_t;

typedef struct {
  sqlite3 *db;
  cJSON *done_tools; /* names of the tools that have succeeded (dependencies) */
} tools_ep_t;

static const cJSON *get(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

static int spec_error(const tools_state_t *s, const char *what) {
  return lt_error_set(LT_ECONFIG, "envs.%s.params.spec (%s): %s", s->domain, s->path, what);
}

/* A fresh database with the spec's schema and rows. */
static int make_db(const tools_state_t *s, sqlite3 **out) {
  sqlite3 *db;
  *out = NULL;
  if (sqlite3_open(":memory:", &db) != SQLITE_OK) return lt_error_set(LT_ENOMEM, "tools: cannot open a database");
  char msg[512];
  for (const cJSON *q = get(s->spec, "schema")->child; q; q = q->next)
    if (sqlite3_exec(db, q->valuestring, NULL, NULL, NULL) != SQLITE_OK) {
      snprintf(msg, sizeof msg, "schema: %s", sqlite3_errmsg(db));
      sqlite3_close(db);
      return spec_error(s, msg);
    }
  for (const cJSON *t = get(s->spec, "data") ? get(s->spec, "data")->child : NULL; t; t = t->next)
    for (const cJSON *row = t->child; row; row = row->next) {
      lt_buf_t sql = {0};
      lt_buf_printf(&sql, "INSERT INTO \"%s\" VALUES (", t->string);
      for (int i = 0; i < cJSON_GetArraySize(row); i++) lt_buf_puts(&sql, i ? ", ?" : "?");
      lt_buf_puts(&sql, ")");
      sqlite3_stmt *st = NULL;
      int ok = lt_buf_ok(&sql) == 0 && sqlite3_prepare_v2(db, sql.data, -1, &st, NULL) == SQLITE_OK;
      int i = 1;
      for (const cJSON *v = row->child; ok && v; v = v->next, i++) {
        if (cJSON_IsNumber(v)) sqlite3_bind_double(st, i, v->valuedouble);
        else if (cJSON_IsString(v)) sqlite3_bind_text(st, i, v->valuestring, -1, SQLITE_TRANSIENT);
        else sqlite3_bind_null(st, i);
      }
      ok = ok && sqlite3_step(st) == SQLITE_DONE;
      snprintf(msg, sizeof msg, "data.%s: %s", t->string, sqlite3_errmsg(db));
      sqlite3_finalize(st);
      lt_buf_free(&sql);
      if (!ok) {
        sqlite3_close(db);
        return spec_error(s, msg);
      }
    }
  *out = db;
  return 0;
}

/* Binds :name parameters from args (strings, typed by the tool's declaration). */
static void bind_args(sqlite3_stmt *st, const cJSON *args) {
  for (int i = 1; i <= sqlite3_bind_parameter_count(st); i++) {
    const char *n = sqlite3_bind_parameter_name(st, i);
    const cJSON *v = n ? get(args, n + 1) : NULL;
    if (cJSON_IsNumber(v)) sqlite3_bind_double(st, i, v->valuedouble);
    else if (cJSON_IsString(v)) sqlite3_bind_text(st, i, v->valuestring, -1, SQLITE_TRANSIENT);
    else sqlite3_bind_null(st, i);
  }
}

/* Runs one query; rows as an array of objects (or NULL with *err set). */
static cJSON *query(sqlite3 *db, const char *sql, const cJSON *args, char *err, size_t n) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
    snprintf(err, n, "%s", sqlite3_errmsg(db));
    return NULL;
  }
  bind_args(st, args);
  cJSON *rows = cJSON_CreateArray();
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    cJSON *o = cJSON_CreateObject();
    for (int c = 0; c < sqlite3_column_count(st); c++) {
      const char *name = sqlite3_column_name(st, c);
      switch (sqlite3_column_type(st, c)) {
      case SQLITE_INTEGER: cJSON_AddNumberToObject(o, name, (double)sqlite3_column_int64(st, c)); break;
      case SQLITE_FLOAT: cJSON_AddNumberToObject(o, name, sqlite3_column_double(st, c)); break;
      case SQLITE_NULL: cJSON_AddNullToObject(o, name); break;
      default: cJSON_AddStringToObject(o, name, (const char *)sqlite3_column_text(st, c));
      }
    }
    cJSON_AddItemToArray(rows, o);
  }
  if (rc != SQLITE_DONE) {
    snprintf(err, n, "%s", sqlite3_errmsg(db));
    cJSON_Delete(rows);
    rows = NULL;
  }
  sqlite3_finalize(st);
  return rows;
}

static int first_truthy(const cJSON *rows) {
  const cJSON *v = rows && rows->child ? rows->child->child : NULL;
  return cJSON_IsNumber(v) ? v->valuedouble != 0 : cJSON_IsString(v) && *v->valuestring;
}

/* Typed arguments from a call: {name: number|string}; an error text on a bad call. */
static cJSON *typed_args(const cJSON *tool, const lt_tool_call_t *c, char *err, size_t n) {
  const cJSON *decl = get(tool, "args");
  cJSON *a = cJSON_CreateObject();
  for (int i = 0; i < c->nargs; i++) {
    const cJSON *ty = get(decl, c->args[i].name);
    const char *v = c->args[i].value;
    char *end;
    if (!cJSON_IsString(ty)) {
      snprintf(err, n, "%s has no argument '%s'", c->name, c->args[i].name);
    } else if (strcmp(ty->valuestring, "integer") == 0) {
      long long x = strtoll(v, &end, 10);
      if (end == v || *end) snprintf(err, n, "%s: argument '%s' must be an integer", c->name, c->args[i].name);
      else cJSON_AddNumberToObject(a, c->args[i].name, (double)x);
    } else if (strcmp(ty->valuestring, "number") == 0) {
      double x = strtod(v, &end);
      if (end == v || *end) snprintf(err, n, "%s: argument '%s' must be a number", c->name, c->args[i].name);
      else cJSON_AddNumberToObject(a, c->args[i].name, x);
    } else {
      cJSON_AddStringToObject(a, c->args[i].name, v);
    }
    if (*err) break;
  }
  for (const cJSON *d = decl ? decl->child : NULL; d && !*err; d = d->next)
    if (!get(a, d->string)) snprintf(err, n, "%s: missing argument '%s'", c->name, d->string);
  if (*err) {
    cJSON_Delete(a);
    return NULL;
  }
  return a;
}

static int has(const cJSON *names, const char *n) {
  for (const cJSON *x = names ? names->child : NULL; x; x = x->next)
    if (strcmp(x->valuestring, n) == 0) return 1;
  return 0;
}

/* Executes a call; the observation's JSON text (caller frees).  *ok: it succeeded. */
static char *run_tool(const tools_state_t *s, tools_ep_t *e, const lt_tool_call_t *c, int *ok) {
  char err[512] = "";
  cJSON *out = cJSON_CreateObject(), *args = NULL, *rows = NULL;
  const cJSON *tool = NULL;
  for (const cJSON *t = s->tools->child; t && !tool; t = t->next)
    if (strcmp(get(t, "name")->valuestring, c->name) == 0) tool = t;
  if (!tool) snprintf(err, sizeof err, "unknown tool '%s'", c->name);
  else if ((args = typed_args(tool, c, err, sizeof err))) {
    for (const cJSON *r = get(tool, "requires") ? get(tool, "requires")->child : NULL; r && !*err; r = r->next)
      if (!has(e->done_tools, r->valuestring)) snprintf(err, sizeof err, "%s needs %s first", c->name, r->valuestring);
    const cJSON *check = get(tool, "check");
    if (!*err && cJSON_IsString(check)) {
      cJSON *cr = query(e->db, check->valuestring, args, err, sizeof err);
      if (!*err && !first_truthy(cr))
        snprintf(err, sizeof err, "%s", get(tool, "error") ? get(tool, "error")->valuestring : "refused");
      cJSON_Delete(cr);
    }
    const cJSON *upd = get(tool, "update");
    if (!*err && upd) {
      sqlite3_exec(e->db, "BEGIN", NULL, NULL, NULL);
      for (const cJSON *u = upd->child; u && !*err; u = u->next)
        cJSON_Delete(query(e->db, u->valuestring, args, err, sizeof err));
      sqlite3_exec(e->db, *err ? "ROLLBACK" : "COMMIT", NULL, NULL, NULL);
    }
    const cJSON *q = get(tool, "query");
    if (!*err && cJSON_IsString(q)) rows = query(e->db, q->valuestring, args, err, sizeof err);
  }
  *ok = !*err;
  cJSON_AddBoolToObject(out, "ok", *ok);
  if (*err) cJSON_AddStringToObject(out, "error", err);
  else if (rows) cJSON_AddItemToObject(out, "rows", rows), rows = NULL;
  else cJSON_AddStringToObject(out, "result", get(tool, "result") ? get(tool, "result")->valuestring : "done");
  if (*ok && !has(e->done_tools, c->name)) cJSON_AddItemToArray(e->done_tools, cJSON_CreateString(c->name));
  cJSON_Delete(rows);
  cJSON_Delete(args);
  char *text = cJSON_PrintUnformatted(out);
  cJSON_Delete(out);
  return text;
}

/* "{key}" placeholders filled from params. */
static char *fill(const char *tmpl, const cJSON *params) {
  lt_buf_t b = {0};
  for (const char *p = tmpl; *p;) {
    const char *close = *p == '{' ? strchr(p, '}') : NULL;
    const cJSON *v = NULL;
    if (close && close - p < 64) {
      char key[64];
      snprintf(key, sizeof key, "%.*s", (int)(close - p - 1), p + 1);
      v = get(params, key);
    }
    if (cJSON_IsString(v)) lt_buf_puts(&b, v->valuestring), p = close + 1;
    else lt_buf_putc(&b, *p++);
  }
  return lt_buf_take(&b);
}

/* A task's setup: SQL strings, each one statement that prepares against the
 * spec's database, so a broken one stops the run at start, not every episode. */
static int check_setup(const tools_state_t *s, sqlite3 *db, const cJSON *setup) {
  if (setup && !cJSON_IsArray(setup)) return spec_error(s, "a task's \"setup\": expected an array of SQL strings");
  int rc = 0;
  for (const cJSON *q = setup ? setup->child : NULL; q && rc == 0; q = q->next) {
    if (!cJSON_IsString(q)) return spec_error(s, "a task's \"setup\": expected an array of SQL strings");
    sqlite3_stmt *st = NULL;
    const char *tail = NULL;
    char msg[512];
    if (sqlite3_prepare_v2(db, q->valuestring, -1, &st, &tail) != SQLITE_OK) {
      snprintf(msg, sizeof msg, "a task's setup \"%.200s\": %s", q->valuestring, sqlite3_errmsg(db));
      rc = spec_error(s, msg);
    } else if (tail && strspn(tail, " \t\r\n;") != strlen(tail)) {
      snprintf(msg, sizeof msg, "a task's setup \"%.200s\": one statement per string", q->valuestring);
      rc = spec_error(s, msg);
    }
    sqlite3_finalize(st);
  }
  return rc;
}

static int check_spec(tools_state_t *s) {
  const cJSON *sp = s->spec;
  if (!cJSON_IsArray(get(sp, "schema")) || !cJSON_IsArray(get(sp, "tools")) || !cJSON_IsArray(get(sp, "tasks")) ||
      !cJSON_IsString(get(sp, "state")) || !cJSON_IsString(get(sp, "system")))
    return spec_error(
        s, "expected \"system\", \"schema\" (array), \"tools\" (array), \"tasks\" (array), \"state\" (query)");
  for (const cJSON *q = get(sp, "schema")->child; q; q = q->next)
    if (!cJSON_IsString(q)) return spec_error(s, "schema: expected SQL strings");
  for (const cJSON *t = get(sp, "tools")->child; t; t = t->next) {
    if (!cJSON_IsString(get(t, "name")) || !cJSON_IsObject(get(t, "args")))
      return spec_error(s, "each tool needs \"name\" and \"args\" (object of string|integer|number)");
    for (const cJSON *a = get(t, "args")->child; a; a = a->next)
      if (!cJSON_IsString(a) ||
          (strcmp(a->valuestring, "string") && strcmp(a->valuestring, "integer") && strcmp(a->valuestring, "number")))
        return spec_error(s, "tool argument types are string, integer or number");
  }
  if (!get(sp, "tasks")->child) return spec_error(s, "no tasks");
  sqlite3 *db;
  int rc = make_db(s, &db);
  for (const cJSON *t = get(sp, "tasks")->child; t && rc == 0; t = t->next) {
    const cJSON *w = get(t, "weight");
    if (!cJSON_IsString(get(t, "pick")) || !cJSON_IsString(get(t, "instruction")) || !cJSON_IsArray(get(t, "solution")))
      rc = spec_error(s, "each task needs \"pick\" (query), \"instruction\" and \"solution\" (tool calls)");
    else if (w && (!cJSON_IsNumber(w) || !(w->valuedouble > 0) || w->valuedouble > 1e6))
      rc = spec_error(s, "a task's \"weight\": expected a number in (0, 1e6]");
    else rc = check_setup(s, db, get(t, "setup"));
  }
  if (db) sqlite3_close(db);
  return rc;
}

static void tools_free(void *state) {
  tools_state_t *s = state;
  if (!s) return;
  cJSON_Delete(s->spec);
  free(s);
}

/* params.<key>: a fraction in [0, 1] (def when absent). */
static int fraction(const char *dom, const cJSON *p, const char *key, double def, double *out) {
  const cJSON *v = get(p, key);
  *out = v ? v->valuedouble : def;
  if (v && (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1))
    return lt_error_set(LT_ECONFIG, "envs.%s.params.%s: expected a number in [0, 1]", dom, key);
  return 0;
}

static int tools_init(const char *dom, const cJSON *p, uint64_t seed, void **state) {
  for (const cJSON *c = p ? p->child : NULL; c; c = c->next)
    if (strcmp(c->string, "spec") && strcmp(c->string, "demo_error_rate") && strcmp(c->string, "eval_fraction"))
      return lt_error_set(LT_ECONFIG,
                          "envs.%s.params.%s: unknown key (tools takes spec, demo_error_rate, eval_fraction)", dom,
                          c->string);
  const cJSON *path = get(p, "spec");
  if (!cJSON_IsString(path))
    return lt_error_set(LT_ECONFIG,
                        "envs.%s.params.spec: the domain spec's path is required (e.g. configs/envs/bank.json)", dom);
  tools_state_t *s = calloc(1, sizeof *s);
  if (!s) return lt_error_set(LT_ENOMEM, "tools: out of memory");
  snprintf(s->domain, sizeof s->domain, "%s", dom);
  snprintf(s->path, sizeof s->path, "%s", path->valuestring);
  s->seed = seed;
  int rc = fraction(dom, p, "demo_error_rate", 0, &s->demo_error_rate);
  if (rc == 0) rc = fraction(dom, p, "eval_fraction", 0.2, &s->eval_fraction);
  if (rc == 0) rc = lt_json_parse_file(s->path, &s->spec);
  if (rc < 0) rc = lt_error_wrap(LT_ECONFIG, "envs.%s.params.spec", dom);
  if (rc == 0) rc = check_spec(s);
  if (rc < 0) {
    tools_free(s);
    return rc;
  }
  s->tools = get(s->spec, "tools");
  s->tasks = get(s->spec, "tasks");
  *state = s;
  return 0;
}

static double task_weight(const cJSON *t) {
  const cJSON *w = get(t, "weight");
  return cJSON_IsNumber(w) ? w->valuedouble : 1;
}

/* One task instance drawn with r: a task template and its parameters. */
static int draw(const tools_state_t *s, lt_rng_t *r, cJSON **spec) {
  /* A task template is drawn in proportion to its weight (default 1). */
  double total = 0, at;
  for (const cJSON *t = s->tasks->child; t; t = t->next) total += task_weight(t);
  at = lt_rng_uniform(r) * total;
  int ti = 0;
  const cJSON *t = s->tasks->child;
  for (; t->next && at >= task_weight(t); t = t->next, ti++) at -= task_weight(t);
  sqlite3 *db;
  int rc = make_db(s, &db);
  if (rc < 0) return rc;
  char err[512] = "";
  cJSON *rows = query(db, get(t, "pick")->valuestring, NULL, err, sizeof err);
  sqlite3_close(db);
  if (!rows || !rows->child) {
    cJSON_Delete(rows);
    return spec_error(s, *err ? err : "a task's pick query returned no rows");
  }
  const cJSON *row = cJSON_GetArrayItem(rows, (int)lt_rng_below(r, (uint64_t)cJSON_GetArraySize(rows)));
  cJSON *params = cJSON_CreateObject();
  for (const cJSON *c = row->child; c; c = c->next) { /* every value as text: it fills templates and tool args */
    char num[64];
    if (cJSON_IsNumber(c)) snprintf(num, sizeof num, "%.15g", c->valuedouble);
    cJSON_AddStringToObject(params, c->string, cJSON_IsNumber(c) ? num : cJSON_IsString(c) ? c->valuestring : "");
  }
  for (const cJSON *i = get(t, "ints") ? get(t, "ints")->child : NULL; i; i = i->next) {
    long lo = (long)cJSON_GetArrayItem(i, 0)->valuedouble, hi = (long)cJSON_GetArrayItem(i, 1)->valuedouble;
    char num[32];
    snprintf(num, sizeof num, "%ld", lo + (long)lt_rng_below(r, (uint64_t)(hi >= lo ? hi - lo + 1 : 1)));
    cJSON_AddStringToObject(params, i->string, num);
  }
  cJSON_Delete(rows);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "task", ti);
  cJSON_AddItemToObject(o, "params", params);
  *spec = o;
  return 0;
}

/* Whether an instance is held out: a hash of its text (task and parameters),
 * so the split is a property of the instance, the same for every run. */
static int held_out(const tools_state_t *s, const cJSON *spec) {
  char *txt = cJSON_PrintUnformatted(spec);
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (const char *c = txt ? txt : ""; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
  free(txt);
  return (double)(lt_rng_mix(h, 0x5e1d) >> 11) / 9007199254740992.0 < s->eval_fraction;
}

/* Draws until the instance falls on the asked side of the split, so that
 * evaluation never sees a training instance. */
static int tools_sample(void *state, uint64_t index, int eval, cJSON **spec) {
  tools_state_t *s = state;
  lt_rng_t r;
  lt_rng_seed(&r, lt_rng_mix(s->seed, index * 2 + (eval ? 1 : 0)));
  for (int tries = 0; tries < 1000; tries++) {
    int rc = draw(s, &r, spec);
    if (rc < 0 || s->eval_fraction == 0 || held_out(s, *spec) == !!eval) return rc; /* 0: no split */
    cJSON_Delete(*spec);
  }
  *spec = NULL;
  return spec_error(s, eval ? "no held-out task instance in 1000 draws: raise params.eval_fraction or add rows"
                            : "no training task instance in 1000 draws: lower params.eval_fraction or add rows");
}

static char *state_of(sqlite3 *db, const tools_state_t *s) {
  char err[256] = "";
  cJSON *rows = query(db, get(s->spec, "state")->valuestring, NULL, err, sizeof err);
  char *txt = rows ? cJSON_PrintUnformatted(rows) : NULL;
  cJSON_Delete(rows);
  return txt;
}

static lt_tool_call_t *solution_call(const cJSON *step, const cJSON *params) {
  lt_tool_call_t *c = calloc(1, sizeof *c);
  const cJSON *args = get(step, "args");
  c->name = strdup(get(step, "tool")->valuestring);
  c->nargs = cJSON_GetArraySize(args);
  c->args = calloc((size_t)c->nargs + 1, sizeof *c->args);
  int i = 0;
  for (const cJSON *a = args ? args->child : NULL; a; a = a->next, i++) {
    c->args[i].name = strdup(a->string);
    c->args[i].value = fill(a->valuestring, params);
  }
  return c;
}

static void call_free(lt_tool_call_t *c) {
  for (int i = 0; i < c->nargs; i++) free(c->args[i].name), free(c->args[i].value);
  free(c->args), free(c->name), free(c);
}

static void ep_free(tools_ep_t *e) {
  if (!e) return;
  sqlite3_close(e->db);
  cJSON_Delete(e->done_tools);
  free(e);
}

/* An episode's database: the spec's rows, then task t's setup statements with
 * its parameters bound (state the instruction does not reveal, e.g. a secret). */
static int new_ep(const tools_state_t *s, const cJSON *t, const cJSON *params, tools_ep_t **out) {
  tools_ep_t *e = calloc(1, sizeof *e);
  if (!e) return lt_error_set(LT_ENOMEM, "tools: out of memory");
  e->done_tools = cJSON_CreateArray();
  int rc = make_db(s, &e->db);
  const cJSON *setup = get(t, "setup");
  for (const cJSON *q = setup ? setup->child : NULL; q && rc == 0; q = q->next) {
    char err[512] = "";
    cJSON *rows = query(e->db, q->valuestring, params, err, sizeof err);
    if (!rows)
      rc = lt_error_set(LT_EINVAL, "tools (%s): a task's setup fails: %s", s->path, *err ? err : "out of memory");
    cJSON_Delete(rows);
  }
  if (rc < 0) ep_free(e), e = NULL;
  *out = e;
  return rc;
}

static char *tool_list(const tools_state_t *s) {
  lt_buf_t b = {0};
  lt_buf_printf(&b, "%s\n\nTools:\n", get(s->spec, "system")->valuestring);
  for (const cJSON *t = s->tools->child; t; t = t->next) {
    lt_buf_printf(&b, "- %s(", get(t, "name")->valuestring);
    for (const cJSON *a = get(t, "args")->child; a; a = a->next)
      lt_buf_printf(&b, "%s%s: %s", a == get(t, "args")->child ? "" : ", ", a->string, a->valuestring);
    lt_buf_printf(&b, "): %s\n", get(t, "description") ? get(t, "description")->valuestring : "");
  }
  lt_buf_puts(&b,
              "\nCall a tool with <tool_call><name>TOOL</name><arg name=\"ARG\">VALUE</arg></tool_call>; "
              "results come back as tool messages.");
  return lt_buf_take(&b);
}

static void add_message(cJSON *messages, const char *role, const char *content) {
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "role", role);
  cJSON_AddStringToObject(m, "content", content ? content : "");
  cJSON_AddItemToArray(messages, m);
}

/* The opening chat of task t: the system message with the tools, the instruction. */
static cJSON *opening(const tools_state_t *s, const cJSON *t, const cJSON *params) {
  char *sys = tool_list(s), *user = fill(get(t, "instruction")->valuestring, params);
  cJSON *messages = cJSON_CreateArray();
  add_message(messages, "system", sys);
  add_message(messages, "user", user);
  free(sys), free(user);
  return messages;
}

static int tools_open(void *state, lt_episode_t *ep, const cJSON *spec, uint64_t seed, cJSON **messages) {
  tools_state_t *s = state;
  const cJSON *ti = get(spec, "task"), *params = get(spec, "params");
  const cJSON *t = cJSON_IsNumber(ti) ? cJSON_GetArrayItem(s->tasks, ti->valueint) : NULL;
  if (!t || !cJSON_IsObject(params))
    return lt_error_set(LT_EINVAL, "tools: the task spec names no task of %s", s->path);
  /* The expected end state: the reference solution applied to a fresh database. */
  tools_ep_t *ref;
  int rc = new_ep(s, t, params, &ref);
  if (rc < 0) return rc;
  for (const cJSON *st = get(t, "solution")->child; st && rc == 0; st = st->next) {
    lt_tool_call_t *c = solution_call(st, params);
    int ok;
    char *obs = run_tool(s, ref, c, &ok);
    if (!ok) rc = lt_error_set(LT_EINVAL, "tools (%s): the reference solution fails: %s", s->path, obs);
    free(obs);
    call_free(c);
  }
  char *want = rc == 0 ? state_of(ref->db, s) : NULL;
  ep_free(ref);
  if (rc < 0) return rc;
  tools_ep_t *e;
  if ((rc = new_ep(s, t, params, &e)) < 0) {
    free(want);
    return rc;
  }
  ep->data = e;
  ep->reference = cJSON_CreateObject();
  cJSON_AddStringToObject(ep->reference, "expected_state", want ? want : "");
  /* Not yet succeeded: an episode cut before its final reply (token or turn
   * limit) still has a verdict, so its trajectory trains with a bootstrapped
   * return instead of failing its reward. */
  cJSON_AddBoolToObject(ep->reference, "success", 0);
  free(want);
  if (cJSON_IsString(get(t, "answer"))) {
    char *a = fill(get(t, "answer")->valuestring, params);
    cJSON_AddStringToObject(ep->reference, "answer", a ? a : "");
    free(a);
  }
  *messages = opening(s, t, params);
  return 0;
}

/* The answer appears in the reply as a whole token (so "14" is not found in "140"). */
static int mentions(const char *text, const char *answer) {
  size_t n = strlen(answer);
  for (const char *p = strstr(text, answer); p; p = strstr(p + 1, answer)) {
    int before = p == text || !isalnum((unsigned char)p[-1]), after = !isalnum((unsigned char)p[n]);
    if (before && after) return 1;
  }
  return 0;
}

static int tools_step(lt_episode_t *ep, const char *text, const lt_tool_call_t *calls, int ncalls, lt_env_step_t *res) {
  tools_state_t *s = ep->state;
  tools_ep_t *e = ep->data;
  res->observations = cJSON_CreateArray();
  if (ncalls == 0) { /* the final reply: judge the end state (and the answer, for questions) */
    char *now = state_of(e->db, s);
    const cJSON *want = get(ep->reference, "expected_state"), *ans = get(ep->reference, "answer");
    int ok = now && strcmp(now, want->valuestring) == 0 && (!cJSON_IsString(ans) || mentions(text, ans->valuestring));
    free(now);
    cJSON_DeleteItemFromObjectCaseSensitive(ep->reference, "success");
    cJSON_AddBoolToObject(ep->reference, "success", ok);
    res->done = 1;
    return 0;
  }
  for (int i = 0; i < ncalls; i++) {
    int ok;
    char *obs = run_tool(s, e, &calls[i], &ok);
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "tool");
    cJSON_AddStringToObject(m, "name", calls[i].name);
    cJSON_AddStringToObject(m, "content", obs ? obs : "{\"ok\":false}");
    cJSON_AddItemToArray(res->observations, m);
    free(obs);
  }
  return 0;
}

/* A call in the format the system message teaches. */
static char *call_text(const lt_tool_call_t *c) {
  lt_buf_t b = {0};
  lt_buf_printf(&b, "<tool_call><name>%s</name>", c->name);
  for (int i = 0; i < c->nargs; i++) lt_buf_printf(&b, "<arg name=\"%s\">%s</arg>", c->args[i].name, c->args[i].value);
  lt_buf_puts(&b, "</tool_call>");
  return lt_buf_take(&b);
}

/* A demonstration is the reference solution of training instance `index` as a
 * whole episode: the opening chat, each call with its real result, and the
 * final reply (the answer for a question, else "Done."); the warm start
 * trains on every assistant turn of it.  With probability demo_error_rate
 * the episode is imperfect: it replies one call early (the systematic
 * mistake RL has to unlearn). */
static int tools_demo(void *state, uint64_t index, cJSON **messages, char **response) {
  tools_state_t *s = state;
  cJSON *spec;
  int rc = tools_sample(s, index, 0, &spec);
  if (rc < 0) return rc;
  const cJSON *t = cJSON_GetArrayItem(s->tasks, get(spec, "task")->valueint), *params = get(spec, "params");
  lt_rng_t r;
  lt_rng_seed(&r, lt_rng_mix(s->seed ^ 0xde30, index));
  int n = cJSON_GetArraySize(get(t, "solution"));
  int early = lt_rng_uniform(&r) < s->demo_error_rate;
  tools_ep_t *e;
  if ((rc = new_ep(s, t, params, &e)) < 0) {
    cJSON_Delete(spec);
    return rc;
  }
  *messages = opening(s, t, params);
  const cJSON *st = get(t, "solution")->child;
  for (int k = 0; k < n - early && rc == 0; k++, st = st->next) {
    lt_tool_call_t *c = solution_call(st, params);
    int ok;
    char *call = call_text(c), *obs = run_tool(s, e, c, &ok);
    if (!ok) rc = lt_error_set(LT_EINVAL, "tools (%s): the reference solution fails: %s", s->path, obs);
    add_message(*messages, "assistant", call);
    add_message(*messages, "tool", obs);
    free(call), free(obs);
    call_free(c);
  }
  *response = rc < 0                             ? NULL
              : cJSON_IsString(get(t, "answer")) ? fill(get(t, "answer")->valuestring, params)
                                                 : strdup("Done.");
  ep_free(e);
  cJSON_Delete(spec);
  if (rc == 0 && !*response) rc = lt_error_set(LT_ENOMEM, "tools: out of memory");
  if (rc < 0) {
    cJSON_Delete(*messages);
    *messages = NULL;
  }
  return rc;
}

static void tools_close(lt_episode_t *ep) {
  ep_free(ep->data);
  ep->data = NULL;
}

const lt_env_impl_t lt__env_tools = {
    .type = "tools",
    .init = tools_init,
    .free = tools_free,
    .sample = tools_sample,
    .demo = tools_demo,
    .open = tools_open,
    .step = tools_step,
    .close = tools_close,
};
