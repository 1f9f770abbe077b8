#!/usr/bin/env python3
"""Turn run directories into run files, one file per run, for the results pages.

Each run directory under the ROOTs (a directory holding metrics.json) becomes one file
{"metrics": <metrics.json>, "per_sample": <per_sample.jsonl, by columns>, "manifest": <manifest.json>}
(per_sample and manifest only when the directory has them; compact_results.py keeps where the
run came from of its manifest), written on one line, and the directory is removed.
per_sample holds the lines of per_sample.jsonl by model tag, one list per field, in line order
(a file's lines are ~4x longer than their numbers):
  {"layout": "columns/1", "float32": ["loss"],
   "models": {"base": {"index": [3, 53, ...], "loss": [8.236778, ...]}, "final": {...}}}
Fields named in "float32" held only float32 values (dpft scores in float32) and are written as
the shortest decimal that rounds to the same float32; readers round them back to float32, which
gives the lines' numbers bit for bit (core/report/report.cpp, per_sample_lines). Every other
number is written as Python's repr (round-trips the double). `--repack FILE...` rewrites run
files whose per_sample is still a list of lines. `dpft report` and
experiments/pe_sgd/per_seed.py read run files where they read run directories. Run after
experiments/compact_results.py, which decides what a run keeps. Where the file goes:
  .../X/<name>/<run-id>/   (dpft's layout: run-id YYYYmmdd-HHMMSS-sN) -> .../X.run.json
  .../X/                   (any other run directory)                  -> .../X.run.json
so the paths the pages' commands name (e.g. .../pubmed-pe_sgd/eps1/s0) gain ".run.json".
Refuses to overwrite a file. The full run directories stay in git history.

Usage: experiments/run_files.py [--dry-run] ROOT...
       experiments/run_files.py --repack FILE...
"""
import argparse
import glob
import json
import math
import os
import re
import struct
import sys

RUN_ID = re.compile(r"^\d{8}-\d{6}-s\d+(-\d+)?$")


def target(run_dir):
    d = os.path.normpath(run_dir)
    if RUN_ID.match(os.path.basename(d)):
        d = os.path.dirname(os.path.dirname(d))
    return d + ".run.json"


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def short_f32(x):
    """The shortest decimal that rounds (as a float32) to the float32 x, as a Number."""
    for p in range(1, 10):
        t = "%.*g" % (p, x)
        if f32(float(t)) == x:
            return Number(t)
    raise AssertionError(x)  # 9 significant digits always round-trip a float32


class Number(str):
    """A JSON number to be written as this text (dumps)."""


def columns(lines, where):
    """per_sample.jsonl lines -> the columns layout (see the module docstring); exact."""
    models = {}
    for line in lines:
        if not isinstance(line.get("model"), str):
            sys.exit(f"run_files: {where}: a per-sample line without a model tag: {line}")
        fields = {k: v for k, v in line.items() if k != "model"}
        m = models.setdefault(line["model"], {k: [] for k in fields})
        if set(m) != set(fields):
            sys.exit(f"run_files: {where}: per-sample lines of model {line['model']} have "
                     f"different fields ({sorted(m)} and {sorted(fields)})")
        for k, v in fields.items():
            if not (isinstance(v, (int, float)) and not isinstance(v, bool)):
                sys.exit(f"run_files: {where}: per-sample field {k} is not a number: {v}")
            m[k].append(v)
    names = sorted({k for m in models.values() for k in m})
    narrow = [k for k in names
              if all(isinstance(v, float) and math.isfinite(v) and f32(v) == v
                     for m in models.values() for v in m.get(k, []))]
    for m in models.values():
        for k in narrow:
            if k in m:
                m[k] = [short_f32(v) for v in m[k]]
    out = {"layout": "columns/1", "float32": narrow, "models": models}
    by_model = {}
    for line in lines:
        by_model.setdefault(line["model"], []).append(line)
    if expand(json.loads(dumps(out))) != by_model:  # what readers get must be the lines
        sys.exit(f"run_files: {where}: the columns do not give back the per-sample lines")
    return out


def expand(cols):
    """The columns layout -> the lines, as core/report/report.cpp reads them (for the check)."""
    per_model = {}
    for tag, m in cols["models"].items():
        n = len(next(iter(m.values()), []))
        per_model[tag] = [{"model": tag, **{k: (f32(v[i]) if k in cols["float32"] else v[i])
                                            for k, v in m.items()}} for i in range(n)]
    return per_model


NUMBER = re.compile(r'"\\u0000([-+.0-9eE]+)"')


def dumps(obj):
    """One line of JSON; a Number is written as its text."""
    def mark(o):
        if isinstance(o, Number):
            return "\0" + o
        if isinstance(o, str) and "\0" in o:
            sys.exit(f"run_files: a string holds a NUL character: {o!r}")
        if isinstance(o, dict):
            return {k: mark(v) for k, v in o.items()}
        if isinstance(o, list):
            return [mark(v) for v in o]
        return o
    return NUMBER.sub(r"\1", json.dumps(mark(obj), ensure_ascii=False, separators=(",", ":")))


def repack(paths):
    for p in paths:
        run = json.load(open(p))
        ps = run.get("per_sample")
        if not isinstance(ps, list):
            print(f"{p}: nothing to repack")
            continue
        run["per_sample"] = columns(ps, p)
        tmp = p + ".tmp"
        with open(tmp, "w") as f:
            f.write(dumps(run) + "\n")
        os.replace(tmp, p)
        print(f"{p}: repacked")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--repack", action="store_true",
                    help="the arguments are run files: rewrite their per-sample lines as columns")
    ap.add_argument("roots", nargs="+")
    a = ap.parse_args()
    if a.repack:
        return repack(a.roots)
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
            out["per_sample"] = columns([json.loads(l) for l in open(ps) if l.strip()], ps)
        man = os.path.join(d, "manifest.json")
        if os.path.exists(man):
            out["manifest"] = json.load(open(man))
        print(f"{d} -> {targets[d]}")
        if a.dry_run:
            continue
        with open(targets[d], "w") as f:
            f.write(dumps(out) + "\n")
        for name in os.listdir(d):
            p = os.path.join(d, name)
            if os.path.isdir(p):
                sys.exit(f"run_files: {p} is a directory inside a run; remove it first")
            os.remove(p)
        os.removedirs(d)


if __name__ == "__main__":
    main()
