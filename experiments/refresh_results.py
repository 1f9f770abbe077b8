#!/usr/bin/env python3
"""Rewrite the tables of a results page from its run files: every `<!-- reprint: COMMAND -->`
marker's command (`dpft report ...`, paths relative to the repository root, globs expanded and
sorted as tests/results_reprint.sh expands them) is run and the report that follows the marker
(its caption, tables and the blank lines between them, up to the page's next paragraph) is
replaced by its output. tests/results_reprint.sh then checks the
page. Only markers whose line contains FILTER are refreshed when FILTER is given.

Usage: experiments/refresh_results.py PAGE.md [--dpft build/dpft] [--filter TEXT]
"""
import argparse
import glob
import os
import re
import subprocess
import sys

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("page")
ap.add_argument("--dpft", default="build/dpft")
ap.add_argument("--filter", default="")
a = ap.parse_args()
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
dpft = os.path.abspath(a.dpft)
lines = open(a.page, encoding="utf-8").read().split("\n")
out, i, done = [], 0, 0
while i < len(lines):
    line = lines[i]
    out.append(line)
    i += 1
    m = re.match(r"<!-- reprint: dpft (report .*) -->$", line)
    if not m or a.filter not in line:
        continue
    argv = [dpft]
    for word in m.group(1).split():
        pack = word.split(".jsonl/")[0] + ".jsonl"
        if ".jsonl/" in word and os.path.isfile(os.path.join(root, pack)):
            argv.append(word)  # PACK/SUB: dpft report reads SUB's globs inside the pack
        elif any(c in word for c in "*?["):
            hits = sorted(glob.glob(word, root_dir=root), key=lambda s: s.encode())
            if not hits:
                sys.exit(f"refresh_results: {word} matches nothing")
            argv += hits
        else:
            argv.append(word)
    res = subprocess.run(argv, cwd=root, capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"refresh_results: {' '.join(argv[:3])} ... exited {res.returncode}: {res.stderr.strip()[-400:]}")
    # The old output, as `dpft report` writes markdown: a bold caption line, a blank line, a
    # table, and possibly a blank line, "Runs per cell:", a blank line and a second table.
    def table_at(k):  # the index after the table rows starting at k
        while k < len(lines) and lines[k].startswith("|"):
            k += 1
        return k
    if i < len(lines) and lines[i].startswith("**"):
        i += 1
        if i < len(lines) and lines[i] == "":
            i += 1
    i = table_at(i)
    if lines[i:i + 3] == ["", "Runs per cell:", ""]:
        i = table_at(i + 3)
    out.extend(res.stdout.rstrip("\n").split("\n"))
    done += 1
open(a.page, "w", encoding="utf-8").write("\n".join(out))
print(f"refresh_results: {done} tables rewritten in {a.page}")
