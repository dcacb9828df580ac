/* The `code` environment: the policy writes a Python function; its tests run in
 * the sandbox; the score is the fraction passed (a soft reward).
 *
 * Problems come from a bank of parameterised tasks, deterministic in (seed,
 * index, split).  The expected values never enter the sandbox: the harness
 * prints what the function returned for each test's arguments and the
 * comparison happens here, so printing "passed" or reading files earns nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envs/internal.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/rng.h"

#define NTESTS 8

typedef struct {
  const char *name, *signature, *description, *solution;
  /* Fills args (array) and returns the expected value for one test. */
  cJSON *(*make)(lt_rng_t *r, cJSON *args);
} task_t;

static cJSON *int_list(lt_rng_t *r, int maxlen, int lo, int hi, long *vals, int *n) {
  *n = (int)lt_rng_below(r, (uint64_t)maxlen + 1);
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; i < *n; i++) {
    vals[i] = lo + (long)lt_rng_below(r, (uint64_t)(hi - lo + 1));
    cJSON_AddItemToArray(a, cJSON_CreateNumber((double)vals[i]));
  }
  return a;
}

static cJSON *word_string(lt_rng_t *r, int maxwords, char *out, size_t cap) {
  static const char *const words[] = {"alpha", "beta", "queue", "river", "sky", "tree", "union", "io", "moon", "zebra"};
  int n = 1 + (int)lt_rng_below(r, (uint64_t)maxwords);
  out[0] = 0;
  for (int i = 0; i < n; i++) {
    size_t l = strlen(out);
    snprintf(out + l, cap - l, "%s%s", i ? " " : "", words[lt_rng_below(r, 10)]);
  }
  return cJSON_CreateString(out);
}

static cJSON *make_sum_div(lt_rng_t *r, cJSON *args) {
  long v[16];
  int n;
  cJSON_AddItemToArray(args, int_list(r, 12, -50, 50, v, &n));
  long k = 2 + (long)lt_rng_below(r, 6), s = 0;
  cJSON_AddItemToArray(args, cJSON_CreateNumber((double)k));
  for (int i = 0; i < n; i++) s += v[i] % k == 0 ? v[i] : 0;
  return cJSON_CreateNumber((double)s);
}

static cJSON *make_running_max(lt_rng_t *r, cJSON *args) {
  long v[16];
  int n;
  cJSON_AddItemToArray(args, int_list(r, 10, -20, 20, v, &n));
  cJSON *out = cJSON_CreateArray();
  for (int i = 0; i < n; i++) {
    if (i && v[i - 1] > v[i]) v[i] = v[i - 1];
    cJSON_AddItemToArray(out, cJSON_CreateNumber((double)v[i]));
  }
  return out;
}

static cJSON *make_reverse_words(lt_rng_t *r, cJSON *args) {
  char s[256], o[256] = "";
  cJSON_AddItemToArray(args, word_string(r, 6, s, sizeof s));
  for (char *end = s + strlen(s); end > s;) {
    char *b = end;
    while (b > s && b[-1] != ' ') b--;
    size_t l = strlen(o);
    snprintf(o + l, sizeof o - l, "%s%.*s", l ? " " : "", (int)(end - b), b);
    end = b > s ? b - 1 : s;
  }
  return cJSON_CreateString(o);
}

static cJSON *make_count_vowels(lt_rng_t *r, cJSON *args) {
  char s[256];
  cJSON_AddItemToArray(args, word_string(r, 6, s, sizeof s));
  int n = 0;
  for (char *p = s; *p; p++) n += strchr("aeiou", *p) != NULL;
  return cJSON_CreateNumber(n);
}

static cJSON *make_fib_mod(lt_rng_t *r, cJSON *args) {
  long n = (long)lt_rng_below(r, 90), m = 2 + (long)lt_rng_below(r, 1000);
  cJSON_AddItemToArray(args, cJSON_CreateNumber((double)n));
  cJSON_AddItemToArray(args, cJSON_CreateNumber((double)m));
  long a = 0, b = 1;
  for (long i = 0; i < n; i++) {
    long t = (a + b) % m;
    a = b;
    b = t;
  }
  return cJSON_CreateNumber((double)(a % m));
}

static cJSON *make_is_prime(lt_rng_t *r, cJSON *args) {
  long n = (long)lt_rng_below(r, 2000);
  cJSON_AddItemToArray(args, cJSON_CreateNumber((double)n));
  int p = n >= 2;
  for (long d = 2; d * d <= n && p; d++) p = n % d != 0;
  return cJSON_CreateBool(p);
}

static cJSON *make_digital_root(lt_rng_t *r, cJSON *args) {
  long n = (long)lt_rng_below(r, 1000000000);
  cJSON_AddItemToArray(args, cJSON_CreateNumber((double)n));
  while (n >= 10) {
    long s = 0;
    for (; n; n /= 10) s += n % 10;
    n = s;
  }
  return cJSON_CreateNumber((double)n);
}

static cJSON *make_second_largest(lt_rng_t *r, cJSON *args) {
  long v[16];
  int n;
  cJSON_AddItemToArray(args, int_list(r, 8, 0, 9, v, &n));
  long best = -1, second = -1;
  for (int i = 0; i < n; i++) {
    if (v[i] > best) second = best, best = v[i];
    else if (v[i] < best && v[i] > second) second = v[i];
  }
  return second < 0 ? cJSON_CreateNull() : cJSON_CreateNumber((double)second);
}

static const task_t tasks[] = {
    {"sum_divisible",
     "def solve(xs, k):", "Return the sum of the elements of the integer list xs that are divisible by k.",
     "def solve(xs, k):\n    return sum(x for x in xs if x % k == 0)\n", make_sum_div},
    {"running_max", "def solve(xs):", "Return the list whose i-th element is the largest of xs[0..i].",
     "def solve(xs):\n    out, m = [], None\n    for x in xs:\n        m = x if m is None else max(m, x)\n        out.append(m)\n    return out\n",
     make_running_max},
    {"reverse_words",
     "def solve(s):", "Return the words of s (separated by single spaces) in reverse order, joined by single spaces.",
     "def solve(s):\n    return ' '.join(reversed(s.split(' ')))\n", make_reverse_words},
    {"count_vowels",
     "def solve(s):", "Return how many of the characters of the lowercase string s are vowels (a, e, i, o, u).",
     "def solve(s):\n    return sum(c in 'aeiou' for c in s)\n", make_count_vowels},
    {"fib_mod", "def solve(n, m):", "Return F(n) mod m, where F(0) = 0, F(1) = 1 and F(n) = F(n-1) + F(n-2).",
     "def solve(n, m):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, (a + b) % m\n    return a % m\n",
     make_fib_mod},
    {"is_prime", "def solve(n):", "Return True if the non-negative integer n is prime, else False.",
     "def solve(n):\n    if n < 2:\n        return False\n    d = 2\n    while d * d <= n:\n        if n % d == 0:\n            return False\n        d += 1\n    return True\n",
     make_is_prime},
    {"digital_root", "def solve(n):", "Sum the decimal digits of n repeatedly until one digit remains; return it.",
     "def solve(n):\n    while n >= 10:\n        n = sum(int(c) for c in str(n))\n    return n\n", make_digital_root},
    {"second_largest", "def solve(xs):", "Return the second largest distinct value of xs, or None if there is none.",
     "def solve(xs):\n    v = sorted(set(xs))\n    return v[-2] if len(v) > 1 else None\n", make_second_largest},
};
#define NTASKS (int)(sizeof tasks / sizeof tasks[0])

/* The harness: calls `solve` on each test's arguments, printing "R <i> <json>"
 * (or "E <i> <error>") on the real stdout; the function's own prints go nowhere. */
static const char harness[] =
    "import io, json, signal, sys\n"
    "out = sys.stdout\n"
    "tests = json.load(open('tests.json'))\n"
    "limit = float(sys.argv[1])\n"
    "def alarm(*a):\n"
    "    raise TimeoutError('test timed out')\n"
    "signal.signal(signal.SIGALRM, alarm)\n"
    "ns = {'__name__': 'solution'}\n"
    "sys.stdout = io.StringIO()\n"
    "try:\n"
    "    exec(compile(open('solution.py').read(), 'solution.py', 'exec'), ns)\n"
    "    f = ns['solve']\n"
    "except BaseException as e:\n"
    "    out.write('L %s\\n' % type(e).__name__); out.flush(); sys.exit(0)\n"
    "for i, args in enumerate(tests):\n"
    "    sys.stdout = io.StringIO()\n"
    "    try:\n"
    "        signal.setitimer(signal.ITIMER_REAL, limit)\n"
    "        r = json.dumps(f(*args))\n"
    "        signal.setitimer(signal.ITIMER_REAL, 0)\n"
    "        out.write('R %d %s\\n' % (i, r))\n"
    "    except BaseException as e:\n"
    "        signal.setitimer(signal.ITIMER_REAL, 0)\n"
    "        out.write('E %d %s\\n' % (i, type(e).__name__))\n"
    "    out.flush()\n";

/* The last ```python (or ```) block of a response; NULL if none. */
char *lt_envs_code_extract(const char *text) {
  const char *best = NULL, *best_end = NULL;
  for (const char *p = strstr(text, "```"); p; p = strstr(p, "```")) {
    const char *body = strchr(p + 3, '\n');
    if (!body) break;
    const char *end = strstr(body + 1, "```");
    if (!end) break;
    best = body + 1;
    best_end = end;
    p = end + 3;
  }
  if (!best) return NULL;
  char *s = malloc((size_t)(best_end - best) + 1);
  if (s) {
    memcpy(s, best, (size_t)(best_end - best));
    s[best_end - best] = 0;
  }
  return s;
}

int lt_envs_code_test(lt_sandbox_pool_t *pool, const char *code, const cJSON *tests, double test_timeout_s,
                      lt_envs_code_result_t *res) {
  memset(res, 0, sizeof *res);
  if (!cJSON_IsArray(tests))
    return lt_error_set(LT_EINVAL, "code tests: expected an array of {\"args\", \"expected\"}");
  res->total = cJSON_GetArraySize(tests);
  cJSON *args = cJSON_CreateArray();
  for (const cJSON *t = tests->child; t; t = t->next) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(t, "args");
    if (!cJSON_IsArray(a) || !cJSON_GetObjectItemCaseSensitive(t, "expected")) {
      cJSON_Delete(args);
      return lt_error_set(LT_EINVAL, "code tests: each test needs \"args\" (array) and \"expected\"");
    }
    cJSON_AddItemToArray(args, cJSON_Duplicate(a, 1));
  }
  char *args_json = cJSON_PrintUnformatted(args);
  cJSON_Delete(args);
  char limit[32];
  snprintf(limit, sizeof limit, "%g", test_timeout_s);
  const char *argv[] = {"python3", "harness.py", limit, NULL};
  lt_sandbox_file_t files[] = {{"harness.py", harness, sizeof harness - 1, 0},
                               {"solution.py", code, strlen(code), 0},
                               {"tests.json", args_json ? args_json : "[]", args_json ? strlen(args_json) : 2, 0}};
  lt_sandbox_job_t job = {
      .argv = argv, .files = files, .nfiles = 3, .timeout_s = 2 + test_timeout_s * (res->total + 1)};
  lt_sandbox_result_t r;
  int rc = args_json ? lt_sandbox_pool_run(pool, &job, &r) : lt_error_set(LT_ENOMEM, "out of memory");
  free(args_json);
  if (rc < 0) return rc;
  res->timed_out = r.timed_out;
  char *seen = calloc((size_t)res->total + 1, 1);
  for (char *line = r.out; line && *line;) {
    char *nl = strchr(line, '\n');
    if (nl) *nl = 0;
    int i, off = 0;
    if (sscanf(line, "R %d %n", &i, &off) == 1 && off > 0 && i >= 0 && i < res->total) {
      cJSON *got = cJSON_Parse(line + off);
      const cJSON *want = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(tests, i), "expected");
      if (got && seen && !seen[i] && cJSON_Compare(got, want, 1)) res->passed++;
      if (seen) seen[i] = 1; /* each test counts once, whatever the program printed */
      cJSON_Delete(got);
    } else if (line[0] == 'L') {
      res->load_error = 1;
    }
    line = nl ? nl + 1 : NULL;
  }
  free(seen);
  lt_sandbox_result_free(&r);
  return 0;
}

/* ---- the environment ---------------------------------------------------------------- */

typedef struct {
  uint64_t seed;
  double test_timeout_s;
} code_state_t;

static int code_init(const char *dom, const cJSON *p, uint64_t seed, void **state) {
  code_state_t *s = calloc(1, sizeof *s);
  if (!s) return lt_error_set(LT_ENOMEM, "envs.%s: out of memory", dom);
  s->seed = seed;
  s->test_timeout_s = 2;
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "test_timeout_s");
  if (t && (!cJSON_IsNumber(t) || t->valuedouble <= 0)) {
    free(s);
    return lt_error_set(LT_ECONFIG, "envs.%s.params.test_timeout_s: expected a positive number", dom);
  }
  if (t) s->test_timeout_s = t->valuedouble;
  *state = s;
  return 0;
}

static void code_free(void *state) { free(state); }

static int code_sample(void *state, uint64_t index, int eval, cJSON **spec) {
  code_state_t *s = state;
  lt_rng_t r;
  lt_rng_seed(&r, lt_rng_mix(s->seed, index * 2 + (eval ? 1 : 0)));
  const task_t *t = &tasks[lt_rng_below(&r, NTASKS)];
  cJSON *o = cJSON_CreateObject(), *tests = cJSON_CreateArray();
  cJSON_AddStringToObject(o, "task", t->name);
  for (int i = 0; i < NTESTS; i++) {
    cJSON *one = cJSON_CreateObject(), *args = cJSON_AddArrayToObject(one, "args");
    cJSON_AddItemToObject(one, "expected", t->make(&r, args));
    cJSON_AddItemToArray(tests, one);
  }
  cJSON_AddItemToObject(o, "tests", tests);
  *spec = o;
  return 0;
}

static const task_t *find_task(const cJSON *spec) {
  const cJSON *n = cJSON_GetObjectItemCaseSensitive(spec, "task");
  for (int i = 0; cJSON_IsString(n) && i < NTASKS; i++)
    if (strcmp(tasks[i].name, n->valuestring) == 0) return &tasks[i];
  return NULL;
}

static cJSON *opening(const task_t *t, const cJSON *tests) {
  lt_buf_t b = {0};
  lt_buf_printf(&b, "%s\n\nWrite it in Python 3 as\n\n    %s\n\nExamples:\n", t->description, t->signature);
  for (int i = 0; i < 2 && i < cJSON_GetArraySize(tests); i++) {
    const cJSON *one = cJSON_GetArrayItem(tests, i);
    char *a = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(one, "args"));
    char *e = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(one, "expected"));
    lt_buf_printf(&b, "  solve(*%s) == %s\n", a ? a : "", e ? e : "");
    free(a), free(e);
  }
  lt_buf_puts(&b, "\nAnswer with the whole function in a ```python code block.");
  cJSON *msgs = cJSON_CreateArray(), *u = cJSON_CreateObject();
  cJSON_AddStringToObject(u, "role", "user");
  cJSON_AddStringToObject(u, "content", b.data ? b.data : "");
  cJSON_AddItemToArray(msgs, u);
  lt_buf_free(&b);
  return msgs;
}

static int code_demo(void *state, uint64_t index, cJSON **messages, char **response) {
  cJSON *spec;
  code_sample(state, index, 0, &spec);
  const task_t *t = find_task(spec);
  *messages = opening(t, cJSON_GetObjectItemCaseSensitive(spec, "tests"));
  lt_buf_t b = {0};
  lt_buf_printf(&b, "```python\n%s```", t->solution);
  *response = lt_buf_take(&b);
  cJSON_Delete(spec);
  return *response ? 0 : lt_error_set(LT_ENOMEM, "out of memory");
}

static int code_open(void *state, lt_episode_t *ep, const cJSON *spec, uint64_t seed, cJSON **messages) {
  const task_t *t = find_task(spec);
  const cJSON *tests = cJSON_GetObjectItemCaseSensitive(spec, "tests");
  if (!t || !cJSON_IsArray(tests)) return lt_error_set(LT_EINVAL, "code: the task spec has no known task or no tests");
  *messages = opening(t, tests);
  ep->reference = cJSON_CreateObject();
  cJSON_AddItemToObject(ep->reference, "tests", cJSON_Duplicate(tests, 1));
  return 0;
}

/* Runs on the thread pool (lt_env_impl_t.blocking): the tests take a sandbox. */
static int code_step(lt_episode_t *ep, const char *text, const lt_tool_call_t *calls, int ncalls, lt_env_step_t *res) {
  code_state_t *s = ep->state;
  res->done = 1;
  char *code = lt_envs_code_extract(text);
  int found = code != NULL;
  lt_envs_code_result_t cr = {0};
  const cJSON *tests = cJSON_GetObjectItemCaseSensitive(ep->reference, "tests");
  cr.total = cJSON_GetArraySize(tests);
  if (code) {
    lt_sandbox_pool_t *pool;
    int rc = lt__envs_pool(ep->envs, &pool);
    if (rc == 0) rc = lt_envs_code_test(pool, code, tests, s->test_timeout_s, &cr);
    free(code);
    if (rc < 0) return rc; /* the sandbox failed, not the policy: an environment error */
  }
  cJSON_DeleteItemFromObjectCaseSensitive(ep->reference, "score");
  cJSON_AddNumberToObject(ep->reference, "score", cr.total ? (double)cr.passed / cr.total : 0);
  cJSON_AddNumberToObject(ep->reference, "tests_passed", cr.passed);
  cJSON_AddNumberToObject(ep->reference, "tests_total", cr.total);
  cJSON_AddBoolToObject(ep->reference, "code_found", found);
  return 0;
}

const lt_env_impl_t lt__env_code = {
    .type = "code",
    .init = code_init,
    .free = code_free,
    .sample = code_sample,
    .demo = code_demo,
    .open = code_open,
    .step = code_step,
    .blocking = 1,
    .sandbox = 1,
};
