#!/usr/bin/env python3
"""Writes examples/swe-mini: small repositories with one real bug each, their SWE-bench-style task rows and the
supervised warm start's demonstrations (docs/swe.md, "swe-mini").

The repositories are generated from twelve bug shapes (six in Python with unittest, three in POSIX shell, three in C
with make), each instance with its own names, files and numbers: a repository is a package with a correct function
and a buggy one, the tests of the correct one (PASS_TO_PASS), and a hidden test of the buggy one that the task's
test_patch adds (FAIL_TO_PASS).  The gold patch is the one-expression fix.  A demonstration fixes its task with its
shape's `sed` through the bash tool (FIXES), or gives up.  Deterministic: the same files every run.

    python3 examples/swe-mini/make_tasks.py           # rewrites repos/, tasks.jsonl, heldout.jsonl, demos.jsonl
    python3 examples/swe-mini/make_tasks.py --check   # exit 1 if the committed files differ from what it writes
"""
import difflib
import json
import os
import random
import re
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
IMAGE = "oci:images/swe-mini:latest"  # relative to this folder: `make swe-images` writes it
N_TASKS = 132                         # 11 per shape: 8 for training, 3 held out
HELDOUT_EVERY = 3                     # every 3rd instance of each shape is held out
DEMOS_PER_TASK = 4                    # demonstrations of each training task
DEMO_STOP_RATE = 0.6                  # share of demonstrations that stop before editing (for RL to unlearn)
SEED = 40

PY_TEST = "python3 -m unittest {test}"
SH_TEST = "sh tests/run.sh {test}"
C_TEST = "make -s test T={test}"

# Names drawn per instance, so that what a fix must copy differs from one repository to the next.
SYL_A = ["al", "bri", "cor", "dun", "el", "fen", "gar", "hol", "iv", "jas", "kel", "lum", "mor", "nes", "ol", "pra"]
SYL_B = ["ba", "den", "fir", "gon", "ix", "lo", "mar", "nu", "ra", "sol"]
MODULES = ["core", "util", "calc", "mathx", "helpers", "ops", "numeric", "tools", "funcs", "lib"]
PACKAGES = ["mathlib", "numkit", "tally", "metrics", "stats", "figures", "counts", "sums", "arith", "measure"]
NS = ["n", "count", "limit", "upto", "k", "size", "last", "top", "stop", "end"]
XS = ["xs", "values", "nums", "data", "items", "scores", "samples", "readings", "vals", "points"]
PAIRS = [("a", "b"), ("x", "y"), ("left", "right"), ("base", "extra"), ("price", "tax"), ("m", "n"), ("p", "q"),
         ("first", "second"), ("lhs", "rhs"), ("u", "v")]
BESTS = [("x", "best"), ("v", "top"), ("item", "biggest"), ("n", "peak"), ("value", "most"), ("e", "high"),
         ("cur", "champ"), ("y", "record"), ("z", "leader"), ("w", "winner")]
STRS = ["s", "text", "word", "name", "msg", "line", "title", "label", "tag", "note"]
IDX = ["i", "j", "k", "idx", "pos", "at", "step", "c", "r", "t"]
GOOD = [("double", "2 * {v}", 4, 8), ("triple", "3 * {v}", 4, 12), ("square", "{v} * {v}", 5, 25),
        ("succ", "{v} + 1", 9, 10), ("half", "{v} // 2", 10, 5), ("negate", "-{v}", 7, -7)]


def pick(rng, xs):
    return xs[rng.randrange(len(xs))]


# ---- the shapes: each returns (files, buggy path, old, new, statement, good test, hidden test) ----

def py_repo(rng, repo, bug_fn, bug_body, good, hidden_call, hidden_want, symptom):
    pkg, mod = pick(rng, PACKAGES), pick(rng, MODULES)
    gname, gexpr, garg, gwant = good
    src = f"{bug_body}\n\ndef {gname}(v):\n    return {gexpr.format(v='v')}\n"
    cls = repo.capitalize() + "Test"
    tests = (f"import unittest\n\nfrom {pkg}.{mod} import {gname}, {bug_fn}\n\n\n"
             f"class {cls}(unittest.TestCase):\n"
             f"    def test_{gname}(self):\n        self.assertEqual({gname}({garg}), {gwant})\n")
    hidden = tests + (f"\n    def test_{bug_fn}(self):\n        self.assertEqual({hidden_call}, {hidden_want})\n")
    files = {f"{pkg}/__init__.py": "", f"{pkg}/{mod}.py": src, "tests/__init__.py": "",
             f"tests/test_{mod}.py": tests}
    ids = (f"tests.test_{mod}.{cls}.test_{bug_fn}", f"tests.test_{mod}.{cls}.test_{gname}")
    return files, f"{pkg}/{mod}.py", f"tests/test_{mod}.py", hidden, ids, PY_TEST, symptom


def shape_py_range(rng, repo):
    n, fn = pick(rng, NS), pick(rng, ["sum_to", "total_upto", "triangle", "series", "running"])
    body = (f"def {fn}({n}):\n    total = 0\n    for i in range(1, {n}):\n        total += i\n    return total\n")
    m = rng.randrange(3, 9)
    r = py_repo(rng, repo, fn, body, pick(rng, GOOD), f"{fn}({m})", m * (m + 1) // 2,
                f"{fn}({m}) returns {m * (m - 1) // 2}, expected {m * (m + 1) // 2}")
    return r, f"range(1, {n})", f"range(1, {n} + 1)"


def shape_py_mean(rng, repo):
    xs, fn = pick(rng, XS), pick(rng, ["mean", "average", "avg", "mean_of", "centre"])
    body = f"def {fn}({xs}):\n    return sum({xs}) / (len({xs}) - 1)\n"
    a, b = rng.randrange(1, 6), rng.randrange(6, 10)
    r = py_repo(rng, repo, fn, body, pick(rng, GOOD), f"{fn}([{a}, {b}])", (a + b) / 2,
                f"{fn}([{a}, {b}]) returns {float(a + b)}, expected {(a + b) / 2}")
    return r, f"(len({xs}) - 1)", f"len({xs})"


def shape_py_max(rng, repo):
    (x, best), fn = pick(rng, BESTS), pick(rng, ["largest", "biggest", "maximum", "top_of", "peak"])
    body = (f"def {fn}(seq):\n    {best} = seq[0]\n    for {x} in seq:\n        if {x} < {best}:\n"
            f"            {best} = {x}\n    return {best}\n")
    a, b = rng.randrange(1, 5), rng.randrange(5, 10)
    r = py_repo(rng, repo, fn, body, pick(rng, GOOD), f"{fn}([{a}, {b}])", b, f"{fn}([{a}, {b}]) returns {a}, expected {b}")
    return r, f"if {x} < {best}:", f"if {x} > {best}:"


def shape_py_sub(rng, repo):
    (a, b), fn = pick(rng, PAIRS), pick(rng, ["add", "plus", "combine", "sum_two", "join_sum"])
    body = f"def {fn}({a}, {b}):\n    return {a} - {b}\n"
    p, q = rng.randrange(5, 10), rng.randrange(1, 5)
    r = py_repo(rng, repo, fn, body, pick(rng, GOOD), f"{fn}({p}, {q})", p + q, f"{fn}({p}, {q}) returns {p - q}, expected {p + q}")
    return r, f"{a} - {b}", f"{a} + {b}"


def shape_py_upper(rng, repo):
    s, fn = pick(rng, STRS), pick(rng, ["shout", "loud", "caps", "yell", "upper_of"])
    body = f"def {fn}({s}):\n    return {s}.lower()\n"
    w = pick(rng, ["Hi", "Ok", "Yes", "Go", "Abc"])
    r = py_repo(rng, repo, fn, body, pick(rng, GOOD), f"{fn}('{w}')", repr(w.upper()),
                f"{fn}('{w}') returns '{w.lower()}', expected '{w.upper()}'")
    return r, f"{s}.lower()", f"{s}.upper()"


def shape_py_last(rng, repo):
    xs, fn = pick(rng, XS), pick(rng, ["last", "final", "tail_item", "newest", "latest"])
    body = f"def {fn}({xs}):\n    return {xs}[0]\n"
    a, b = rng.randrange(1, 5), rng.randrange(5, 10)
    r = py_repo(rng, repo, fn, body, pick(rng, GOOD), f"{fn}([{a}, {b}])", b, f"{fn}([{a}, {b}]) returns {a}, expected {b}")
    return r, f"{xs}[0]", f"{xs}[-1]"


def sh_repo(rng, repo, bug_fn, bug_body, hidden_case, symptom):
    gname, gexpr, garg, gwant = pick(rng, GOOD[:5])
    gexpr = gexpr.replace("//", "/")  # Python's floor division is the shell's and C's /
    lib = pick(rng, MODULES)
    src = (f"# {repo}: small shell helpers (POSIX sh)\n\n{gname}() {{\n  echo $(({gexpr.format(v='$1')}))\n}}\n\n{bug_body}")
    cases = f'test_{gname}() {{ [ "$({gname} {garg})" = {gwant} ]; }}\n'
    run = f'# runs one test: sh tests/run.sh TEST\n. ./lib/{lib}.sh\n. ./tests/cases.sh\n"$1"\n'
    files = {f"lib/{lib}.sh": src, "tests/cases.sh": cases, "tests/run.sh": run}
    return files, f"lib/{lib}.sh", "tests/cases.sh", cases + hidden_case, (f"test_{bug_fn}", f"test_{gname}"), SH_TEST, symptom


def shape_sh_ge(rng, repo):
    fn, lim = pick(rng, ["at_least", "old_enough", "can_vote", "big_enough", "passes"]), rng.randrange(10, 20)
    var = pick(rng, ["$1", "$n", "$age", "$v"])
    pre = "" if var == "$1" else f"  {var[1:]}=$1\n"
    body = f'{fn}() {{\n{pre}  if [ "{var}" -gt {lim} ]; then echo yes; else echo no; fi\n}}\n'
    hidden = f'test_{fn}() {{ [ "$({fn} {lim})" = yes ]; }}\n'
    r = sh_repo(rng, repo, fn, body, hidden, f"{fn} {lim} prints no, expected yes")
    return r, f'[ "{var}" -gt {lim} ]', f'[ "{var}" -ge {lim} ]'


def shape_sh_sum(rng, repo):
    (a, b), fn = pick(rng, PAIRS[:7]), pick(rng, ["add", "plus", "total", "sum2", "combine"])
    body = f"{fn}() {{\n  {a}=$1 {b}=$2\n  echo $((${a} - ${b}))\n}}\n"
    p, q = rng.randrange(5, 10), rng.randrange(1, 5)
    hidden = f'test_{fn}() {{ [ "$({fn} {p} {q})" = {p + q} ]; }}\n'
    r = sh_repo(rng, repo, fn, body, hidden, f"{fn} {p} {q} prints {p - q}, expected {p + q}")
    return r, f"${a} - ${b}", f"${a} + ${b}"


def shape_sh_upper(rng, repo):
    fn = pick(rng, ["shout", "loud", "caps", "yell", "upcase"])
    body = f"{fn}() {{\n  printf '%s\\n' \"$1\" | tr 'A-Z' 'a-z'\n}}\n"
    w = pick(rng, ["Hi", "Ok", "Yes", "Go", "Abc"])
    hidden = f'test_{fn}() {{ [ "$({fn} {w})" = {w.upper()} ]; }}\n'
    r = sh_repo(rng, repo, fn, body, hidden, f"{fn} {w} prints {w.lower()}, expected {w.upper()}")
    return r, "tr 'A-Z' 'a-z'", "tr 'a-z' 'A-Z'"


def c_repo(rng, repo, bug_fn, bug_sig, bug_body, hidden_expr, symptom):
    gname, gexpr, garg, gwant = pick(rng, GOOD)
    gname = "twice" if gname == "double" else gname  # `double` is a C keyword: such a repository does not build
    gexpr = gexpr.replace("//", "/")
    name = pick(rng, MODULES)
    hdr = f"/* {repo}: the integer helpers of src/{name}.c */\n#ifndef {name.upper()}_H\n#define {name.upper()}_H\nint {gname}(int v);\n{bug_sig};\n#endif\n"
    src = f'/* {repo}: small integer helpers */\n#include "{name}.h"\n\nint {gname}(int v) {{ return {gexpr.format(v="v")}; }}\n\n{bug_body}'
    def test(extra_fn, extra_case):
        return (f'/* {repo}: tests of src/{name}.c; argv[1] names the one to run */\n'
                f'#include <stdio.h>\n#include <string.h>\n\n#include "{name}.h"\n\n'
                f"static int test_{gname}(void) {{ return {gname}({garg}) == {gwant}; }}\n{extra_fn}\n"
                f"int main(int argc, char **argv) {{\n  if (argc < 2) return 2;\n"
                f'  if (!strcmp(argv[1], "test_{gname}")) return !test_{gname}();\n{extra_case}'
                f'  fprintf(stderr, "unknown test %s\\n", argv[1]);\n  return 2;\n}}\n')
    tests = test("", "")
    hidden = test(f"static int test_{bug_fn}(void) {{ return {hidden_expr}; }}\n",
                  f'  if (!strcmp(argv[1], "test_{bug_fn}")) return !test_{bug_fn}();\n')
    mk = (f"CC = cc\nCFLAGS = -Isrc\n\nbuild/test_{name}: src/{name}.c src/{name}.h tests/test_{name}.c\n"
          f"\tmkdir -p build\n\t$(CC) $(CFLAGS) -o $@ src/{name}.c tests/test_{name}.c\n\n"
          f"test: build/test_{name}\n\t./build/test_{name} $(T)\n\n.PHONY: test\n")
    files = {"Makefile": mk, f"src/{name}.h": hdr, f"src/{name}.c": src, f"tests/test_{name}.c": tests}
    return files, f"src/{name}.c", f"tests/test_{name}.c", hidden, (f"test_{bug_fn}", f"test_{gname}"), C_TEST, symptom


def shape_c_loop(rng, repo):
    i, n = pick(rng, IDX), pick(rng, ["n", "len", "count", "size", "num"])
    fn = pick(rng, ["sum", "total", "sum_all", "add_up", "tally"])
    sig = f"int {fn}(const int *a, int {n})"
    body = f"{sig} {{\n  int s = 0;\n  for (int {i} = 0; {i} < {n} - 1; {i}++) s += a[{i}];\n  return s;\n}}\n"
    p, q, r3 = rng.randrange(1, 5), rng.randrange(1, 5), rng.randrange(5, 9)
    r = c_repo(rng, repo, fn, sig, body, f"{fn}((int[]){{{p}, {q}, {r3}}}, 3) == {p + q + r3}",
               f"{fn} of {{{p}, {q}, {r3}}} is {p + q}, expected {p + q + r3}")
    return r, f"{i} < {n} - 1", f"{i} < {n}"


def shape_c_max(rng, repo):
    (a, b), fn = pick(rng, PAIRS), pick(rng, ["max2", "larger", "bigger", "maxof", "greater"])
    sig = f"int {fn}(int {a}, int {b})"
    body = f"{sig} {{ return {a} > {b} ? {b} : {a}; }}\n"
    p, q = rng.randrange(5, 10), rng.randrange(1, 5)
    r = c_repo(rng, repo, fn, sig, body, f"{fn}({p}, {q}) == {p}", f"{fn}({p}, {q}) returns {q}, expected {p}")
    return r, f"{a} > {b} ? {b} : {a}", f"{a} > {b} ? {a} : {b}"


def shape_c_abs(rng, repo):
    x, fn = pick(rng, ["x", "v", "n", "d", "delta", "val", "z"]), pick(rng, ["absval", "magnitude", "dist0", "size_of", "norm1"])
    sig = f"int {fn}(int {x})"
    body = f"{sig} {{ return {x} < 0 ? {x} : -{x}; }}\n"
    p = rng.randrange(2, 10)
    r = c_repo(rng, repo, fn, sig, body, f"{fn}(-{p}) == {p} && {fn}({p}) == {p}",
               f"{fn}(-{p}) returns -{p}, expected {p}")
    return r, f"{x} < 0 ? {x} : -{x}", f"{x} < 0 ? -{x} : {x}"


SHAPES = [shape_py_range, shape_py_mean, shape_py_max, shape_py_sub, shape_py_upper, shape_py_last,
          shape_sh_ge, shape_sh_sum, shape_sh_upper, shape_c_loop, shape_c_max, shape_c_abs]


def udiff(path, before, after):
    lines = difflib.unified_diff(before.splitlines(True), after.splitlines(True), f"a/{path}", f"b/{path}", n=3)
    body = "".join(lines)
    return f"diff --git a/{path} b/{path}\n{body}" if body else ""


def statement(path, symptom, old, new):
    return f"{path}: {symptom}. The faulty expression is `{old}`; it should be `{new}`."


# What a demonstration runs: one `sed` per bug shape, written against the shape and not the repository (its
# pattern names no file, function or variable of any one task), so that a policy that learns it solves held-out
# repositories of the same shape it has never seen.  Each is the fix an engineer who knows the bug would type; the
# generator checks that on every repository it rewrites exactly the gold patch's expression and nothing else.
FIXES = {
    "py_range": (r"range\(1, ([a-z]+)\)", r"range(1, \1 + 1)", "*/*.py"),
    "py_mean": (r"\(len\(([a-z]+)\) - 1\)", r"len(\1)", "*/*.py"),
    "py_max": (r" < ", r" > ", "*/*.py"),
    "py_sub": (r" - ", r" + ", "*/*.py"),
    "py_upper": (r"lower\(\)", r"upper()", "*/*.py"),
    "py_last": (r"\[0\]", r"[-1]", "*/*.py"),
    "sh_ge": (r"-gt", r"-ge", "lib/*.sh"),
    "sh_sum": (r" - ", r" + ", "lib/*.sh"),
    "sh_upper": (r"tr 'A-Z' 'a-z'", r"tr 'a-z' 'A-Z'", "lib/*.sh"),
    "c_loop": (r" - 1;", r";", "src/*.c"),
    "c_max": (r"\? ([a-z]+) : ([a-z]+)", r"? \2 : \1", "src/*.c"),
    "c_abs": (r"\? ([a-z]+) : -", r"? -\1 : ", "src/*.c"),
}


def fix_command(shape):
    pat, rep, glob = FIXES[shape]
    q = '"' if "'" in pat else "'"
    return f"sed -i -E {q}s/{pat}/{rep}/{q} {glob}"


def fix_applied(shape, files):
    """What fix_command does to the repository's files: sed -E's first match on each line, as Python's re sees it
    (the patterns use nothing the two read differently)."""
    pat, rep, glob = FIXES[shape]
    d, ext = glob.split("/*")
    out = {}
    for p, c in files.items():
        top, _, name = p.partition("/")
        if "/" in name or not name.endswith(ext) or (d != "*" and top != d):
            continue
        out[p] = "".join(re.sub(pat, rep, line, count=1) for line in c.splitlines(True))
    return out


def bash_call(command):
    return f'<tool_call><name>bash</name><arg name="command">{command}</arg></tool_call>'


def main():
    check = "--check" in sys.argv[1:]
    rng = random.Random(SEED)
    words = [a + b for a in SYL_A for b in SYL_B]
    rng.shuffle(words)
    out = {}  # relative path -> content
    rows = {"tasks.jsonl": [], "heldout.jsonl": []}
    demos = []
    counts = [0] * len(SHAPES)
    keys = {True: set(), False: set()}  # the edits (path, old, new) of held-out and of training tasks
    for t in range(N_TASKS):
        s = t % len(SHAPES)
        repo = words[t]
        held = counts[s] % HELDOUT_EVERY == HELDOUT_EVERY - 1
        counts[s] += 1
        # No held-out task's edit is a training task's: evaluation asks for an edit never demonstrated.
        while True:
            (files, path, test_path, hidden, ids, test_cmd, symptom), old, new = SHAPES[s](rng, repo)
            if (path, old, new) not in keys[not held]:
                break
        keys[held].add((path, old, new))
        src = files[path]
        assert src.count(old) == 1, (repo, old)
        fixed = src.replace(old, new)
        for p, c in files.items():
            out[f"repos/{repo}/{p}"] = c
        row = {"instance_id": f"swe-mini__{repo}-{t + 1}", "repo": f"swe-mini/{repo}",
               "problem_statement": statement(path, symptom, old, new), "image": IMAGE, "repo_dir": f"/testbed/{repo}",
               "patch": udiff(path, src, fixed), "test_patch": udiff(test_path, files[test_path], hidden),
               "FAIL_TO_PASS": [ids[0]], "PASS_TO_PASS": [ids[1]], "test_cmd": test_cmd,
               "shape": SHAPES[s].__name__[len("shape_"):]}
        rows["heldout.jsonl" if held else "tasks.jsonl"].append(row)
        changed = {p: c for p, c in fix_applied(row["shape"], files).items() if c != files[p]}
        assert changed == {path: fixed}, (repo, row["shape"], sorted(changed))
        if held:
            continue
        for d in range(DEMOS_PER_TASK):
            stop = rng.random() < DEMO_STOP_RATE
            demos.append({"instance_id": row["instance_id"], "stops_early": stop,
                          "turns": ["I could not find the bug." if stop else bash_call(fix_command(row["shape"]))]
                          + ([] if stop else ["[exit status 0]", "Fixed."])})
    for name, rs in rows.items():
        out[name] = "".join(json.dumps(r) + "\n" for r in rs)
    out["demos.jsonl"] = "".join(json.dumps(d) + "\n" for d in demos)
    differs = [p for p, c in out.items() if not os.path.isfile(os.path.join(HERE, p)) or open(os.path.join(HERE, p)).read() != c]
    on_disk = set()
    for dp, _, fs in os.walk(os.path.join(HERE, "repos")):
        on_disk.update(os.path.relpath(os.path.join(dp, f), HERE) for f in fs)
    extra = sorted(on_disk - set(out))
    if check:
        for p in differs + extra:
            print(f"make_tasks.py: {p} is not what the script writes", file=sys.stderr)
        return 1 if differs or extra else 0
    shutil.rmtree(os.path.join(HERE, "repos"), ignore_errors=True)
    for p, c in out.items():
        full = os.path.join(HERE, p)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as f:
            f.write(c)
    print(f"make_tasks.py: {len(rows['tasks.jsonl'])} training and {len(rows['heldout.jsonl'])} held-out tasks, "
          f"{len(demos)} demonstrations ({sum(d['stops_early'] for d in demos)} stop before editing)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
