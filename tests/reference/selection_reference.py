#!/usr/bin/python3
"""Independent reference for `dpft select`'s total epsilon (core/privacy/selection.hpp).

Papernot & Steinke 2022 ("Hyperparameter Tuning with Renyi Differential Privacy",
Theorem 2): if one trial Q is (lam, e)-RDP and (lam^, e^)-RDP, the best of
K ~ D_{eta,gamma} trials (the truncated negative binomial, their Definition 1) is
(lam, e')-RDP with

    e' = e + (1 + eta)(1 - 1/lam^) e^ + (1 + eta) log(1/gamma) / lam^
           + log(E[K]) / (lam - 1).

This script computes, for a few plans, everything from sources other than dpft's code:
  * the trial's RDP: the subsampled Gaussian by numerical integration of the Renyi
    divergence (rdp_reference.py's rdp_single), times the steps, summed over the
    releases; the largest over the candidates at each order; plus the score's Gaussian,
    lam / (2 s^2);
  * D_{eta,gamma}'s pmf and mean from scipy.stats (the negative binomial nbinom(eta,
    gamma) conditioned on K >= 1; for eta = 0 the logarithmic distribution logser(1 -
    gamma)), the mean as a sum of k P[K = k], and gamma for a given mean by brentq;
  * e' minimised over lam^ in {1} U the order grid, then Balle et al. 2020's conversion
    minimised over lam (rdp_reference.py's order grid).

Run: /usr/bin/python3 tests/reference/selection_reference.py > tests/reference/selection_reference.json
(Debian's python3-numpy and python3-scipy.)
"""
import json
import math
import os
import sys

import numpy as np
import scipy
from scipy import optimize, special, stats

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rdp_reference as rr  # noqa: E402

ORDERS = rr.ORDERS

CASES = [
    {"name": "one candidate, geometric",
     "candidates": [[{"sigma": 1.0, "q": 0.05, "steps": 10}]],
     "score_sigma": 5.0, "eta": 1.0, "mean": 6.0, "delta": 1e-5},
    {"name": "two candidates, logarithmic",
     "candidates": [[{"sigma": 1.0, "q": 0.05, "steps": 10}],
                    [{"sigma": 1.5, "q": 0.05, "steps": 40}]],
     "score_sigma": 10.0, "eta": 0.0, "mean": 4.0, "delta": 1e-5},
    {"name": "full batch, eta 0.5",
     "candidates": [[{"sigma": 2.0, "q": 1.0, "steps": 3}]],
     "score_sigma": 3.0, "eta": 0.5, "mean": 10.0, "delta": 1e-6},
    {"name": "two releases per trial, eta 2",
     "candidates": [[{"sigma": 1.0, "q": 0.05, "steps": 10},
                     {"sigma": 2.0, "q": 1.0, "steps": 3}]],
     "score_sigma": 5.0, "eta": 2.0, "mean": 3.0, "delta": 1e-5},
]


def tnb(eta, gamma):
    """D_{eta,gamma} as a scipy distribution on {1, 2, ...}: (pmf, survival at 0)."""
    if eta < 0:  # scipy's nbinom takes eta > 0: C(k+eta-1, k) by log-gamma functions
        def pmf(k):
            k = np.asarray(k, dtype=float)
            return np.exp(special.gammaln(k + eta) - special.gammaln(eta)
                          - special.gammaln(k + 1) + k * np.log1p(-gamma)
                          + eta * np.log(gamma))
        return pmf, 1.0 - gamma ** eta  # both signs flip: |1 - gamma^eta| below
    if eta == 0:
        d = stats.logser(1.0 - gamma)  # support starts at 1 already
        return d.pmf, 1.0
    d = stats.nbinom(eta, gamma)  # P[k] = C(k+eta-1, k) gamma^eta (1-gamma)^k, k >= 0
    return d.pmf, 1.0 - d.pmf(0)


def tnb_pmf(eta, gamma, k):
    pmf, z = tnb(eta, gamma)
    return float(pmf(k) / abs(z))


def tnb_mean(eta, gamma):
    """E[K] as a sum over the support, until the terms are negligible."""
    total, k, tail = 0.0, 1, 1.0
    while tail > 1e-17 and k < 10_000_000:
        block = np.arange(k, k + 10000)
        p = tnb_pmf_vec(eta, gamma, block)
        total += float(np.sum(block * p))
        tail = float(p[-1]) * (k + 10000)
        k += 10000
    return total


def tnb_pmf_vec(eta, gamma, ks):
    pmf, z = tnb(eta, gamma)
    return pmf(ks) / abs(z)


def gamma_for_mean(eta, mean):
    return optimize.brentq(lambda g: tnb_mean(eta, g) - mean, 1e-6, 1 - 1e-9, xtol=1e-15,
                           rtol=1e-15)


_cache = {}


def release_rdp(sigma, q, a):
    if q >= 1.0:
        return a / (2.0 * sigma * sigma)
    key = (sigma, q, a)
    if key not in _cache:
        _cache[key] = rr.rdp_single(sigma, q, a)[0]
    return _cache[key]


def trial_curve(case):
    curve = []
    for a in ORDERS:
        worst = max(sum(r["steps"] * release_rdp(r["sigma"], r["q"], a) for r in cand)
                    for cand in case["candidates"])
        curve.append(worst + a / (2.0 * case["score_sigma"] ** 2))
    return curve


def balle(curve, delta):
    best = (math.inf, None)
    for a, r in zip(ORDERS, curve):
        e = r - (math.log(delta) + math.log(a)) / (a - 1.0) + math.log((a - 1.0) / a)
        if e < best[0]:
            best = (e, a)
    return max(0.0, best[0]), best[1]


def main():
    out = {"meta": {"generator": "/usr/bin/python3 tests/reference/selection_reference.py",
                    "description": __doc__.strip().splitlines()[0],
                    "tolerance": "1e-6 relative",
                    "python": sys.version.split()[0], "numpy": np.__version__,
                    "scipy": scipy.__version__},
           "pmf": [], "cases": []}
    for eta, gamma in [(1.0, 0.2), (0.0, 0.3), (0.5, 0.1), (2.0, 0.4), (-0.5, 0.05)]:
        out["pmf"].append({"eta": eta, "gamma": gamma,
                           "pmf": [tnb_pmf(eta, gamma, k) for k in range(1, 11)],
                           "mean": tnb_mean(eta, gamma)})
    for case in CASES:
        eta, mean, delta = case["eta"], case["mean"], case["delta"]
        gamma = gamma_for_mean(eta, mean)
        curve = trial_curve(case)
        hat = min([(1 + eta) * math.log(1 / gamma)]
                  + [(1 + eta) * ((1 - 1 / l) * e + math.log(1 / gamma) / l)
                     for l, e in zip(ORDERS, curve)])
        sel = [e + hat + math.log(mean) / (a - 1.0) for a, e in zip(ORDERS, curve)]
        eps, order = balle(sel, delta)
        trial_eps, _ = balle(curve, delta)
        out["cases"].append(dict(case, gamma=gamma, epsilon=eps, order=order,
                                 trial_epsilon=trial_eps))
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
