#!/usr/bin/env python3
"""Independent reference for core/eval/distribution.cpp (tests/test_distribution.cpp).

Reads a JSON file {"real": [[...]], "synth": [[...]], "k": int, "p_hist": [...], "q_hist": [...]}
and prints JSON with
  fid        ||mu_r - mu_s||^2 + Tr(S_r + S_s - 2 sqrtm(S_r S_s)) with scipy.linalg.sqrtm
             (Heusel et al. 2017), numpy covariances (ddof 1);
  precision, recall   Kynkaenniemi et al. 2019 by explicit loops over pairwise distances
             (scipy.spatial.distance.cdist), k-th neighbour radii excluding the point itself;
  mauve, frontier_integral   MAUVE of the two histograms as Pillutla et al. 2021 define it with
             the official package's defaults (25 mixture weights in [1e-6, 1 - 1e-6], c = 5, the
             end points, numpy.trapz over points sorted by each axis);
  pca_dims   the number of leading principal components of the L2-normalised, centred union
             (synth rows first) whose cumulative explained variance first reaches 0.9.
"""
import json
import sys

import numpy as np
import scipy.linalg
from scipy.spatial.distance import cdist


def fid(r, s):
    mr, ms = r.mean(0), s.mean(0)
    cr, cs = np.cov(r, rowvar=False), np.cov(s, rowvar=False)
    root = scipy.linalg.sqrtm(cr.dot(cs))
    return float(((mr - ms) ** 2).sum() + np.trace(cr) + np.trace(cs) - 2 * np.trace(root).real)


def radii(x, k):
    d = cdist(x, x)
    return np.array([np.sort(row)[k] for row in d])  # index 0 is the point itself


def inside_share(a, b, rb):
    d = cdist(a, b)
    count = 0
    for i in range(a.shape[0]):
        if any(d[i, j] <= rb[j] for j in range(b.shape[0])):
            count += 1
    return count / a.shape[0]


def kl(p, q):
    total = 0.0
    for a, b in zip(p, q):
        if a == 0:
            continue
        if b == 0:
            return float("inf")
        total += a * np.log(a / b)
    return total


def mauve(p, q, c=5.0, n=25):
    pts = [(0.0, float("inf"))]
    for w in np.linspace(1e-6, 1 - 1e-6, n):
        r = w * p + (1 - w) * q
        pts.append((kl(q, r), kl(p, r)))
    pts.append((float("inf"), 0.0))
    pts = np.exp(-c * np.array(pts))
    x, y = pts[:, 0], pts[:, 1]
    return 0.5 * (envelope_area(x, y) + envelope_area(y, x))


def envelope_area(x, y):
    # numpy.trapz over the points sorted by x, keeping the highest y among points with the same x
    best = {}
    for a, b in zip(x, y):
        best[a] = max(b, best.get(a, -1.0))
    xs = np.array(sorted(best))
    return float(np.trapz([best[a] for a in xs], xs))


def frontier(p, q):
    total = 0.0
    for a, b in zip(p, q):
        if a == 0 and b == 0:
            continue
        if a == 0 or b == 0:
            total += (a + b) / 4
        elif abs(a - b) > 1e-8:
            total += 0.25 * (a + b) - 0.5 * a * b * (np.log(a) - np.log(b)) / (a - b)
    return 2 * total


def pca_dims(r, s, explained=0.9):
    x = np.vstack([s, r])
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    x = x - x.mean(0)
    sv = np.linalg.svd(x, compute_uv=False)
    ratio = np.cumsum(sv ** 2) / (sv ** 2).sum()
    return int(np.argmax(ratio >= explained)) + 1


def main():
    with open(sys.argv[1]) as f:
        j = json.load(f)
    r, s, k = np.array(j["real"], float), np.array(j["synth"], float), int(j["k"])
    p, q = np.array(j["p_hist"], float), np.array(j["q_hist"], float)
    out = {
        "fid": fid(r, s),
        "precision": inside_share(s, r, radii(r, k)),
        "recall": inside_share(r, s, radii(s, k)),
        "mauve": float(mauve(p, q)),
        "frontier_integral": frontier(p, q),
        "pca_dims": pca_dims(r, s),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
