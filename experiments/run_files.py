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

Run packs: `--pack DIR PACK [--prefix SUB]` adds every run file under DIR to PACK (a
docs/results/*_runs.jsonl file: one run per line, {"path": "[SUB/]<its path under DIR>", ...the
run file's keys, its text untouched}, sorted by path). A pack is one file where the run files
were hundreds of files and folders, and `dpft report PACK/SUB` reads it as it read DIR/SUB. A
path already in PACK must hold the same run (else it refuses); the run files stay in DIR.
`--unpack PACK DIR` writes them back byte for byte (refusing to change an existing file).
`runs(ARG)` reads runs from a directory, a run file, a pack or PACK/SUB (for the scripts).

Usage: experiments/run_files.py [--dry-run] ROOT...
       experiments/run_files.py --repack FILE...
       experiments/run_files.py --pack DIR PACK [--prefix SUB]
       experiments/run_files.py --unpack PACK DIR
"""
import argparse
import fnmatch
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


PACK_SUFFIX = ".jsonl"  # core/report/report.hpp kRunPackSuffix


def pack_line(path, text):
    """A pack's line for the run file at `path` (relative) whose one line is `text`: the run
    file's own text, its numbers untouched, with "path" put first."""
    text = text.strip()
    if not text.startswith("{") or "\n" in text:
        sys.exit(f"run_files: {path} is not a one-line JSON object")
    body = json.loads(text)
    if not isinstance(body, dict) or "metrics" not in body or "path" in body:
        sys.exit(f"run_files: {path} is not a run file ({{\"metrics\": ...}} without \"path\")")
    line = '{"path":' + json.dumps(path, ensure_ascii=False) + ("," if body else "") + text[1:]
    if json.loads(line) != {"path": path, **body}:  # the check that the splice kept the run
        raise AssertionError(path)
    return line


def unpack_line(line, where):
    """(path, run file text) of a pack's line, as pack_line made it."""
    j = json.loads(line)
    path = j.get("path") if isinstance(j, dict) else None
    head = '{"path":' + json.dumps(path, ensure_ascii=False)
    if not isinstance(path, str) or not line.startswith(head):
        sys.exit(f"run_files: {where}: a pack's line starts with {{\"path\": ...}} "
                 "(written by run_files.py --pack)")
    norm = os.path.normpath(path)
    if os.path.isabs(path) or norm != path or norm.startswith(".."):
        sys.exit(f"run_files: {where}: path {path!r} is not a normal relative path")
    rest = line[len(head):]
    text = "{" + (rest[1:] if rest.startswith(",") else rest)
    body = dict(j)
    del body["path"]
    if json.loads(text) != body:
        raise AssertionError(where)
    return path, text


def read_pack(pack):
    """{path: run file text} of a pack (empty when it does not exist)."""
    out = {}
    if not os.path.exists(pack):
        return out
    with open(pack, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            path, text = unpack_line(line.rstrip("\n"), f"{pack}:{n}")
            if path in out:
                sys.exit(f"run_files: {pack}:{n}: path {path} appears twice")
            out[path] = text
    return out


def pack(src, dest, prefix=""):
    if not dest.endswith(PACK_SUFFIX):
        sys.exit(f"run_files: a pack's name ends in {PACK_SUFFIX} (dpft report knows it by it): {dest}")
    if not os.path.isdir(src):
        sys.exit(f"run_files: {src} is not a directory")
    entries = read_pack(dest)
    files = sorted(glob.glob(os.path.join(src, "**", "*.run.json"), recursive=True))
    if not files:
        sys.exit(f"run_files: no run file (*.run.json) under {src}")
    added = 0
    for f in files:
        rel = os.path.normpath(os.path.join(prefix, os.path.relpath(f, src)))
        text = open(f, encoding="utf-8").read().strip()
        pack_line(rel, text)  # checks it is a run file
        if rel in entries:
            if json.loads(entries[rel]) != json.loads(text):
                sys.exit(f"run_files: {dest} already holds {rel}, a different run; "
                         "move one of them first")
            continue
        entries[rel] = text
        added += 1
    tmp = dest + ".tmp"
    with open(tmp, "w", encoding="utf-8") as out:
        for rel in sorted(entries):
            out.write(pack_line(rel, entries[rel]) + "\n")
    os.replace(tmp, dest)
    print(f"{dest}: {added} runs added, {len(entries)} in all")


def unpack(src, dest):
    entries = read_pack(src)
    if not entries:
        sys.exit(f"run_files: {src} holds no runs")
    for rel, text in sorted(entries.items()):
        p = os.path.join(dest, rel)
        if os.path.exists(p):
            if open(p, encoding="utf-8").read().strip() != text:
                sys.exit(f"run_files: {p} exists and differs from {src}'s {rel}")
            continue
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    print(f"{src}: {len(entries)} runs under {dest}")


def selected(parts, i, pattern):
    """Whether component i of a pack path matches a PACK/SUB pattern; a run file's name also
    matches without its suffix (as in core/report/report.cpp, pack_path_selected)."""
    if fnmatch.fnmatchcase(parts[i], pattern):
        return True
    last = i == len(parts) - 1 and parts[i].endswith(".run.json")
    return last and fnmatch.fnmatchcase(parts[i][:-len(".run.json")], pattern)


def runs(arg):
    """[(path, run file object)] under `arg`: a directory (metrics.json run directories, as
    {"metrics": ...}, and run files), a run file, a pack, or PACK/SUB (SUB's components matched
    against the first components of a run's path with fnmatch, see selected()), as `dpft
    report` reads them.
    Sorted by path."""
    if os.path.isfile(arg) and arg.endswith(".run.json"):
        return [(arg, json.load(open(arg, encoding="utf-8")))]
    p = arg
    while p and not os.path.exists(p):
        p = os.path.dirname(p)
    if p and os.path.isfile(p) and p.endswith(PACK_SUFFIX):
        sub = [c for c in os.path.relpath(arg, p).split(os.sep) if c not in ("", ".")]
        out = []
        for rel, text in read_pack(p).items():
            parts = rel.split("/")
            if len(parts) >= len(sub) and all(selected(parts, i, c) for i, c in enumerate(sub)):
                out.append((os.path.join(p, rel), json.loads(text)))
        if not out:
            sys.exit(f"run_files: no run in {p} under {os.path.relpath(arg, p)!r}")
        return sorted(out, key=lambda r: r[0])
    if not os.path.isdir(arg):
        sys.exit(f"run_files: {arg} is neither a directory, a run file nor a run pack (or PACK/SUB)")
    out = []
    for m in glob.glob(os.path.join(arg, "**", "metrics.json"), recursive=True):
        out.append((os.path.dirname(m), {"metrics": json.load(open(m, encoding="utf-8"))}))
    for f in glob.glob(os.path.join(arg, "**", "*.run.json"), recursive=True):
        out.append((f, json.load(open(f, encoding="utf-8"))))
    return sorted(out, key=lambda r: r[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--repack", action="store_true",
                    help="the arguments are run files: rewrite their per-sample lines as columns")
    ap.add_argument("--pack", action="store_true",
                    help="arguments DIR PACK: add DIR's run files to the pack PACK (*.jsonl)")
    ap.add_argument("--prefix", default="",
                    help="with --pack: the runs' paths in PACK start with this folder (e.g. lr)")
    ap.add_argument("--unpack", action="store_true",
                    help="arguments PACK DIR: write PACK's run files under DIR")
    ap.add_argument("roots", nargs="+")
    a = ap.parse_args()
    if a.repack:
        return repack(a.roots)
    if a.pack or a.unpack:
        if len(a.roots) != 2 or (a.pack and a.unpack):
            sys.exit("run_files: usage: run_files.py --pack DIR PACK | --unpack PACK DIR")
        if a.prefix and not a.pack:
            sys.exit("run_files: --prefix goes with --pack")
        return pack(*a.roots, a.prefix) if a.pack else unpack(*a.roots)
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
