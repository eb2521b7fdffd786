#!/usr/bin/env python3
"""Rewrites the flag table of docs/flags.md from `cifar --help` (read on stdin).

    bazel-bin/examples/cifar/cifar --help | tools/flags_table.py docs/flags.md
"""

import re
import sys

TYPES = {"STRING": "string", "INT": "int", "FLOAT": "float"}


def rows(help_text):
    out = []
    lines = help_text.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^  --([a-z0-9-]+)(?:=([A-Z]+))?$", line)
        if not m or i + 1 >= len(lines):
            continue
        meaning = lines[i + 1].strip()
        default = ""
        d = re.search(r"\s*\(default: (.*)\)$", meaning)
        if d:
            default = f"`{d.group(1)}`"
            meaning = meaning[: d.start()]
        kind = TYPES.get(m.group(2), "bool") if m.group(2) else "bool"
        out.append(f"| `--{m.group(1)}` | {kind} | {default} | {meaning} |")
    return out


def main():
    path = sys.argv[1]
    table = rows(sys.stdin.read())
    if not table:
        sys.exit("no flags found on stdin: pipe `cifar --help` in")
    doc = open(path).read().splitlines()
    start = next(i for i, l in enumerate(doc) if l.startswith("| flag |")) + 2
    end = start
    while end < len(doc) and doc[end].startswith("| `--"):
        end += 1
    doc[start:end] = table
    with open(path, "w") as f:
        f.write("\n".join(doc) + "\n")
    print(f"{path}: {len(table)} flags")


if __name__ == "__main__":
    main()
