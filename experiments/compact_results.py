#!/usr/bin/env python3
"""Compact committed run directories to what the results pages' tables re-print from.

docs/results/*.md re-print their tables with `dpft report` and experiments/pe_sgd/per_seed.py
over run directories committed beside them (tests/results_reprint.sh checks this). A finished
run writes much more than those read; this rewrites the run directories under the given ROOTs
in place, keeping:

  metrics.json      one line of JSON with only: schema, status, run (identity: label, method,
                    name, run_id, seed, config_hash, dataset, model, label_column), privacy
                    (target_epsilon, epsilon, delta, noise_multiplier, sigma_source; dp-sft's
                    stage1, stage2, stage1_public, accounting), subspace (dp-sft), eval (base,
                    sft, final; steps_to_accuracy, nlg and the per-eval history: the denoise
                    tables and plots read them), train.lr, diagnostics (the summary block),
                    timing (total_s, train_s, generation_s), synthetic and synthetic_eval (the
                    ctcl-* tables: each scored set), in dpft.metrics/2 files from the
                    non_private block; the per-step `history` only in the run
                    directories named by --history-for. Elsewhere a method-denoise run keeps
                    a slim trace (what `dpft report --plot-kind improvement` and the denoise
                    page read): every DENOISE_TRACE_EVERY-th step (and the last) with its
                    step and denoise {fraction_denoised, max_top_over_edge, diagnostics
                    {improvement, cosine_before, cosine_after}}, plus the
                    denoise_diagnostics summary. Numbers are copied as the original
                    text, never re-formatted; key order is kept.
  manifest.json     only where the run came from: git_commit, host, threads, device,
                    libtorch_version, start_time, end_time.
  per_sample.jsonl  only in run directories under a --per-sample-for directory, and only what
                    the pe-sgd-longtail table reads (core/report/report.cpp, longtail_delta):
                    every "base" line and the "final" lines of the ceil(10%) samples with the
                    highest base loss (ties at the cut kept), each with its model, index and
                    loss. Elsewhere per_sample.jsonl is deleted.

and deleting everything else in a run directory and around it (config.resolved.yaml,
log.txt, sweep.log, synthetic/, ...). It reads metrics.json to find the run
directories; files outside them other than sweep.log (e.g. the .md pages) are left alone.
Running it twice gives the same files. The full run files stay in git history. Then
experiments/run_files.py turns each compacted run directory into one *.run.json file.

Usage: experiments/compact_results.py [--per-sample-for DIR]... [--history-for RUN_DIR]...
                                      [--dry-run] ROOT...
"""
import argparse
import json
import math
import os
import shutil
import sys


class Raw(str):
    """A JSON number (or constant) kept as the text it was written as."""


def load(text):
    return json.loads(text, parse_float=Raw, parse_int=Raw, parse_constant=Raw)


def dump(v):
    if isinstance(v, Raw):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if v is True:
        return "true"
    if v is False:
        return "false"
    if v is None:
        return "null"
    if isinstance(v, dict):
        return "{" + ",".join(dump(k) + ":" + dump(x) for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ",".join(dump(x) for x in v) + "]"
    raise TypeError(f"unexpected {type(v)}")


# key -> None (keep the whole value) or a tuple of the sub-keys to keep.
METRICS_KEEP = {
    "schema": None,
    "status": None,
    "run": ("label", "method", "name", "run_id", "seed", "config_hash", "dataset",
            "dataset_name", "model", "label_column"),
    "privacy": ("target_epsilon", "epsilon", "delta", "noise_multiplier", "sigma_source",
                "stage1", "stage2", "stage1_public", "accounting"),
    "subspace": None,
    "eval": ("base", "sft", "final", "steps_to_accuracy", "nlg", "history"),
    "train": ("lr",),
    "diagnostics": None,
    "timing": ("total_s", "train_s", "generation_s"),
    "synthetic": None,       # ctcl / PE: the set's size, drops and subsets
    "synthetic_eval": None,  # dpft eval-synthetic --run: what the ctcl-* tables read
}
DENOISE_TRACE_EVERY = 10
DENOISE_STEP_KEEP = ("fraction_denoised", "max_top_over_edge")
DENOISE_DIAG_KEEP = ("improvement", "cosine_before", "cosine_after")
MANIFEST_KEEP = ("git_commit", "host", "threads", "device", "libtorch_version", "start_time",
                 "end_time")


def denoise_trace(history):
    """The slim per-step denoise trace of a run's non_private history ([] if none)."""
    steps = [h for h in history if isinstance(h, dict) and isinstance(h.get("denoise"), dict)]
    out = []
    for i, h in enumerate(steps):
        if int(h.get("step", 0)) % DENOISE_TRACE_EVERY != 0 and i != len(steps) - 1:
            continue
        d = h["denoise"]
        slim = {k: d[k] for k in DENOISE_STEP_KEEP if k in d}
        if isinstance(d.get("diagnostics"), dict):
            slim["diagnostics"] = {k: d["diagnostics"][k] for k in DENOISE_DIAG_KEEP
                                   if k in d["diagnostics"]}
        out.append({"step": h["step"], "denoise": slim})
    return out


def compact_metrics(m, keep_history):
    out = {}
    for key, value in m.items():
        if key == "history":
            if keep_history:
                out[key] = value
            continue
        if key == "non_private" and isinstance(value, dict):  # dpft.metrics/2
            np = {}
            for k, x in value.items():
                if k in ("diagnostics", "denoise_diagnostics") or (k == "history" and keep_history):
                    np[k] = x
                elif k == "history" and isinstance(x, list) and denoise_trace(x):
                    np[k] = denoise_trace(x)
                elif k == "timing" and isinstance(x, dict):
                    np[k] = {t: y for t, y in x.items() if t in METRICS_KEEP["timing"]}
            out[key] = np
            continue
        if key not in METRICS_KEEP:
            continue
        sub = METRICS_KEEP[key]
        if sub is None or not isinstance(value, dict):
            out[key] = value
        else:
            out[key] = {k: x for k, x in value.items() if k in sub}
    return out


def compact_per_sample(lines):
    """The base lines and the final lines of the top ceil(10%) base losses (ties kept)."""
    recs = [load(l) for l in lines if l.strip()]
    base = {}
    for r in recs:
        if r.get("model") == "base":
            base[int(r["index"])] = float(r["loss"])  # the last line wins, as in the report
    if not base:
        raise SystemExit("compact_results: a per_sample.jsonl without base lines")
    order = sorted(base.items(), key=lambda kv: (-kv[1], kv[0]))
    k = math.ceil(len(order) / 10)
    cut = order[k - 1][1]
    top = {i for i, loss in order if loss >= cut}
    out = []
    for r in recs:
        if r.get("model") == "base" or (r.get("model") == "final" and int(r["index"]) in top):
            out.append({f: r[f] for f in r if f in ("index", "loss", "model")})
    return out


def longtail(recs):
    """longtail_delta of core/report/report.cpp, for the self-check."""
    base, fin = {}, {}
    for r in recs:
        (base if r["model"] == "base" else fin if r["model"] == "final" else {})[int(r["index"])] = float(r["loss"])
    order = sorted(base.items(), key=lambda kv: (-kv[1], kv[0]))
    k = (len(order) + 9) // 10
    s = 0.0
    for i in range(k):
        s += fin[order[i][0]] - order[i][1]
    return s / k


def under(path, dirs):
    path = os.path.realpath(path)
    return any(path == os.path.realpath(d) or path.startswith(os.path.realpath(d) + os.sep)
               for d in dirs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-sample-for", action="append", default=[], metavar="DIR")
    ap.add_argument("--history-for", action="append", default=[], metavar="RUN_DIR")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("roots", nargs="+")
    a = ap.parse_args()
    for d in a.per_sample_for + a.history_for:
        if not os.path.isdir(d):
            sys.exit(f"compact_results: {d} is not a directory")

    run_dirs = set()
    for root in a.roots:
        for dirpath, _, files in os.walk(root):
            if "metrics.json" in files:
                run_dirs.add(dirpath)
    for d in a.history_for:
        if os.path.realpath(d) not in {os.path.realpath(r) for r in run_dirs}:
            sys.exit(f"compact_results: --history-for {d} is not a run directory under the roots")

    def remove(path):
        print(("would remove " if a.dry_run else "removed ") + path)
        if a.dry_run:
            return
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)

    for root in a.roots:
        for dirpath, dirs, files in os.walk(root):
            if "sweep.log" in files:
                remove(os.path.join(dirpath, "sweep.log"))

    for rd in sorted(run_dirs):
        with open(os.path.join(rd, "metrics.json")) as f:
            m = load(f.read())
        keep_history = any(os.path.realpath(rd) == os.path.realpath(h) for h in a.history_for)
        text = dump(compact_metrics(m, keep_history)) + "\n"
        ps = os.path.join(rd, "per_sample.jsonl")
        ps_text = None
        if os.path.exists(ps) and under(rd, a.per_sample_for):
            with open(ps) as f:
                lines = f.read().splitlines()
            kept = compact_per_sample(lines)
            before = longtail([load(l) for l in lines if l.strip()])
            after = longtail(kept)
            if before != after:
                sys.exit(f"compact_results: {ps}: long-tail delta changed ({before!r} -> {after!r})")
            ps_text = "".join(dump(r) + "\n" for r in kept)
        manifest = os.path.join(rd, "manifest.json")
        man_text = None
        if os.path.exists(manifest):
            with open(manifest) as f:
                man = load(f.read())
            man_text = dump({k: v for k, v in man.items() if k in MANIFEST_KEEP}) + "\n"
        for name in sorted(os.listdir(rd)):
            if name == "metrics.json" or (name == "per_sample.jsonl" and ps_text is not None):
                continue
            if name == "manifest.json" and man_text is not None:
                continue
            path = os.path.join(rd, name)
            if os.path.isdir(path) and any(r == path or r.startswith(path + os.sep) for r in run_dirs):
                continue  # holds another run directory
            remove(path)
        if not a.dry_run:
            with open(os.path.join(rd, "metrics.json"), "w") as f:
                f.write(text)
            if ps_text is not None:
                with open(ps, "w") as f:
                    f.write(ps_text)
            if man_text is not None:
                with open(manifest, "w") as f:
                    f.write(man_text)
    print(f"compact_results: {len(run_dirs)} run directories")


if __name__ == "__main__":
    main()
