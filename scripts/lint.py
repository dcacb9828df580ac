#!/usr/bin/env python3
"""`make lint`'s layering check: the include rule of docs/architecture.md ("Folders and includes"), read from that
table, which is its only copy.  Fails naming file:line for

- an #include "FOLDER/..." of a folder that the including file's row does not name (util/ and its own folder are
  always allowed; `everything` allows all), or of another folder's internal.h;
- a folder holding C files that has no row in the table;
- a row naming a folder of a later row (an include points down the layers, never up);
- a Makefile LAYERS that is not the table's folders in the table's order.

Usage: scripts/lint.py [ROOT]   (exit 0 clean, 1 with findings, 2 if the table cannot be read)
"""
import os
import re
import sys

TABLE = "docs/architecture.md"
HEADING = "## Folders and includes"
SKIP = {"tests", "bench", "examples", "scripts", "build", "bin", "docs", "configs", "node_modules"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"/]+)/([^"]+)"')


def read_table(root):
    """[(folder, [allowed folders] or None for everything, line number)] in table order."""
    rows, inside = [], False
    with open(os.path.join(root, TABLE), encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.startswith("## "):
                inside = line.strip() == HEADING
                continue
            m = re.match(r"^\|\s*`([a-z_]+)/`\s*\|[^|]*\|([^|]*)\|", line) if inside else None
            if not m:
                continue
            may = re.sub(r"\([^)]*\)", "", m.group(2)).strip()
            if may == "everything":
                rows.append((m.group(1), None, n))
                continue
            names = [x.strip().strip("`").rstrip("/") for x in may.split(",")]
            rows.append((m.group(1), [x for x in names if x and x != "—"], n))
    return rows


def c_files(root, folder):
    for d, _, files in os.walk(os.path.join(root, folder)):
        for name in sorted(files):
            if name.endswith((".c", ".h", ".cu")):
                yield os.path.relpath(os.path.join(d, name), root)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    try:
        rows = read_table(root)
    except OSError as e:
        print(f"lint: cannot read {TABLE}: {e}", file=sys.stderr)
        return 2
    if not rows:
        print(f"lint: {TABLE} has no folder table under '{HEADING}'", file=sys.stderr)
        return 2
    order = [r[0] for r in rows]
    where = {r[0]: r[2] for r in rows}
    bad = []
    for folder, may, n in rows:
        for other in may or []:
            if other not in where:
                bad.append(f"{TABLE}:{n}: {folder}/ may include {other}/, which has no row in the table")
            elif order.index(other) > order.index(folder):
                bad.append(f"{TABLE}:{n}: {folder}/ may include {other}/, a later row: an include points down the "
                           "layers, never up")
    with open(os.path.join(root, "Makefile"), encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.startswith("LAYERS") and line.split(":=", 1)[1].split() != order:
                bad.append(f"Makefile:{n}: LAYERS is not the folders of {TABLE} in its order: {' '.join(order)}")
    for entry in sorted(os.listdir(root)):
        if entry in where or entry in SKIP or entry.startswith(".") or not os.path.isdir(os.path.join(root, entry)):
            continue
        if any(True for _ in c_files(root, entry)):
            bad.append(f"{entry}/: C files in a folder that has no row in {TABLE}")
    for folder, may, _ in rows:
        allowed = None if may is None else {folder, "util", *may}
        for path in c_files(root, folder):
            with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
                for n, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m or m.group(1) not in where:
                        continue
                    target = f'"{m.group(1)}/{m.group(2)}"'
                    if m.group(1) != folder and m.group(2) == "internal.h":
                        bad.append(f"{path}:{n}: includes {target}: another folder's internals (use its public "
                                   "header)")
                    elif allowed is not None and m.group(1) not in allowed:
                        named = ", ".join(may) if may else "nothing"
                        bad.append(f"{path}:{n}: includes {target}, but {folder}/ may include only util/ and: "
                                   f"{named} ({TABLE}:{where[folder]})")
    for b in bad:
        print(b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
