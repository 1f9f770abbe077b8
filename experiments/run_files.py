#!/usr/bin/env python3
"""Turn run directories into run files, one file per run, for the results pages.

Each run directory under the ROOTs (a directory holding metrics.json) becomes one file
{"metrics": <metrics.json>, "per_sample": [<per_sample.jsonl lines>], "manifest": <manifest.json>}
(per_sample and manifest only when the directory has them; compact_results.py keeps where the
run came from of its manifest), written on one line, and the directory is removed. `dpft report` and
experiments/pe_sgd/per_seed.py read run files where they read run directories. Run after
experiments/compact_results.py, which decides what a run keeps. Where the file goes:
  .../X/<name>/<run-id>/   (dpft's layout: run-id YYYYmmdd-HHMMSS-sN) -> .../X.run.json
  .../X/                   (any other run directory)                  -> .../X.run.json
so the paths the pages' commands name (e.g. .../pubmed-pe_sgd/eps1/s0) gain ".run.json".
Refuses to overwrite a file. The full run directories stay in git history.

Usage: experiments/run_files.py [--dry-run] ROOT...
"""
import argparse
import glob
import json
import os
import re
import sys

RUN_ID = re.compile(r"^\d{8}-\d{6}-s\d+(-\d+)?$")


def target(run_dir):
    d = os.path.normpath(run_dir)
    if RUN_ID.match(os.path.basename(d)):
        d = os.path.dirname(os.path.dirname(d))
    return d + ".run.json"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("roots", nargs="+")
    a = ap.parse_args()
    runs = sorted({os.path.dirname(p) for r in a.roots
                   for p in glob.glob(os.path.join(r, "**", "metrics.json"), recursive=True)})
    targets = {d: target(d) for d in runs}
    if len(set(targets.values())) != len(runs):
        by_target = {}
        for d, t in targets.items():
            by_target.setdefault(t, []).append(d)
        clash = next(ds for ds in by_target.values() if len(ds) > 1)
        sys.exit("run_files: two runs would share a file: " + " and ".join(clash) +
                 "; move one of them first (a run left 'running' by a killed process and "
                 "started again in the same combination is the usual case: remove the stale one)")
    for d, t in targets.items():
        if os.path.exists(t):
            sys.exit(f"run_files: {t} exists")
    for d in runs:
        out = {"metrics": json.load(open(os.path.join(d, "metrics.json")))}
        ps = os.path.join(d, "per_sample.jsonl")
        if os.path.exists(ps):
            out["per_sample"] = [json.loads(l) for l in open(ps) if l.strip()]
        man = os.path.join(d, "manifest.json")
        if os.path.exists(man):
            out["manifest"] = json.load(open(man))
        print(f"{d} -> {targets[d]}")
        if a.dry_run:
            continue
        with open(targets[d], "w") as f:
            f.write(json.dumps(out, ensure_ascii=False, separators=(",", ":")) + "\n")
        for name in os.listdir(d):
            p = os.path.join(d, name)
            if os.path.isdir(p):
                sys.exit(f"run_files: {p} is a directory inside a run; remove it first")
            os.remove(p)
        os.removedirs(d)


if __name__ == "__main__":
    main()
