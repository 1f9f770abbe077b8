#!/usr/bin/env python3
"""Per-seed view of finished PE-SGD Table 1 runs, with each method paired against a reference.

`dpft report --table pe-sgd-table1` prints mean +- std over seeds; this prints what those means
hide when the seeds differ more than the methods do: each seed's final test loss / token
accuracy, and each method's loss minus the reference method's loss of the same seed (same
private set, eval set and noise seed), with the mean +- sample std of those differences.

Usage: experiments/pe_sgd/per_seed.py --eps 1|inf|2|... [--ref DP-SGD] RUN_ROOT...
Runs are found under the roots as scripts/sweep.sh lays them out (.../eps<E>/s<S>/.../metrics.json,
or run files .../eps<E>/s<S>.run.json; non-private specs in .../noeps/... count for --eps inf); a
root may also be a run pack (docs/results/*_runs.jsonl) or PACK/SUB, read as `dpft report` reads
them (experiments/run_files.py); only runs with status "ok" are read.
A (label, seed) pair found twice is an error: pass roots that hold one run per pair.
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from run_files import runs as runs_under  # noqa: E402

ORDER = ["SGD", "DP-SGD", "SFT+DP-SGD", "PDP-SGD", "GEP", "InPro", "PE-SGD-FixSample", "PE-SGD"]


def load(roots, eps):
    runs = {}
    for root in roots:
        for path, run in runs_under(root):
            in_column = f"/eps{eps}/" in path or (eps == "inf" and "/noeps/" in path)
            if not in_column:
                continue
            m = run["metrics"]
            if m.get("status") != "ok":
                continue
            key = (m["run"]["label"], m["run"]["seed"])
            if key in runs:
                sys.exit(f"per_seed: two runs for {key}: {runs[key][0]} and {path}")
            runs[key] = (path, m)
    return {k: m for k, (_, m) in runs.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--eps", required=True, help="the epsilon column, as in the sweep's eps<E> directories")
    ap.add_argument("--ref", default="DP-SGD", help="label of the method to pair against")
    ap.add_argument("roots", nargs="+")
    a = ap.parse_args()
    runs = load(a.roots, a.eps)
    if not runs:
        sys.exit(f"per_seed: no finished runs for eps {a.eps} under {' '.join(a.roots)}")
    seeds = sorted({s for _, s in runs})
    labels = [l for l in ORDER if any((l, s) in runs for s in seeds)]
    labels += sorted({l for l, _ in runs} - set(ORDER))
    final = lambda m: m["eval"]["final"]

    print("| seed | base | " + " | ".join(labels) + " |")
    print("|---" * (len(labels) + 2) + "|")
    for s in seeds:
        base = next(runs[(l, s)]["eval"]["base"]["loss"] for l in labels if (l, s) in runs)
        cells = ["%.4f / %.4f" % (final(runs[(l, s)])["loss"], final(runs[(l, s)])["accuracy"])
                 if (l, s) in runs else "-" for l in labels]
        print("| %d | %.4f | %s |" % (s, base, " | ".join(cells)))

    print()
    print(f"| method | lr | mean loss | mean acc | loss - {a.ref} per seed | mean ± std |")
    print("|---|---|---|---|---|---|")
    for l in labels:
        if not all((l, s) in runs and (a.ref, s) in runs for s in seeds):
            print(f"| {l} | incomplete: seeds {[s for s in seeds if (l, s) in runs]} | | | | |")
            continue
        ms = [runs[(l, s)] for s in seeds]
        d = [final(runs[(l, s)])["loss"] - final(runs[(a.ref, s)])["loss"] for s in seeds]
        sd = statistics.stdev(d) if len(d) > 1 else 0.0
        print("| %s | %g | %.4f | %.4f | %s | %+.4f ± %.4f |" % (
            l, ms[0]["train"]["lr"], statistics.mean(final(m)["loss"] for m in ms),
            statistics.mean(final(m)["accuracy"] for m in ms), " / ".join("%+.4f" % x for x in d),
            statistics.mean(d), sd))


if __name__ == "__main__":
    main()
