#!/usr/bin/env python3
"""Independent numerical reference for the Renyi DP (RDP) of the
Poisson-subsampled Gaussian mechanism, and its (eps, delta) conversion.

What it is
----------
For sensitivity 1, noise multiplier sigma and sampling rate q let

    P = (1 - q) N(0, sigma^2) + q N(1, sigma^2),      Q = N(0, sigma^2).

The RDP of one step at order alpha is

    D_alpha = 1/(alpha - 1) * log( integral Q(x) (P(x)/Q(x))^alpha dx ).

This script evaluates that integral by NUMERICAL QUADRATURE of the
definition.  It deliberately does not use the binomial series or the
erfc series of Mironov, Talwar & Zhang (2019), so that it can serve as an
independent check of an implementation that does.

Numerics
--------
* P/Q = 1 - q + q exp((x - 1/2)/sigma^2), so the log-integrand
  f(x) = log Q(x) + alpha * log(P/Q)(x) is evaluated in log space and the
  integral is computed as exp(fmax) * integral exp(f - fmax).
* All mass lies in [-40 sigma, alpha + 1 + 40 sigma] (f increases for x < 0 and
  decreases for x > alpha, with at least Gaussian decay).  That range is
  screened on a grid of step sigma/8 to find the peak(s) and the window where
  f > fmax - 80; the integral is taken over that window (plus a margin of
  sigma) with composite 20-point Gauss-Legendre panels of width
  min(sigma, sigma^2)/2, halving the panel width until two successive
  results agree to 1e-13 relative.
* When the integral I is close to 1 (log I < 1) the quantity I - 1 is what
  matters, and computing it as I - 1 would cancel catastrophically.  There
  the script integrates instead
      I - 1 = integral Q(x) [ (1 + u)^alpha - 1 - alpha u ] dx,
      u = q (exp((x - 1/2)/sigma^2) - 1),
  which holds because integral Q u dx = 0 exactly; the bracket is >= 0
  (convexity), so there is no cancellation in the integral, and it is
  evaluated with series for expm1(y) - y and log1p(u) - u near 0.
  Then D_alpha = log1p(I - 1)/(alpha - 1).
* Cross-checks done on every run and recorded in "meta":
  - every "orders_check" entry is recomputed with scipy.integrate.quad,
    using a separately written scalar integrand, over the whole range
    [-40 sigma, alpha + 1 + 40 sigma] cut into pieces plus the two infinite
    tails (no screening), and the largest relative difference is recorded;
  - q = 1 values are compared with the exact alpha / (2 sigma^2).
  The integrals are meant to be good to about 1e-10 relative.

(eps, delta) conversion
-----------------------
T compositions give RDP T * D_alpha.  The conversion is the improved bound
of Balle et al. (2020), as Opacus uses it:

    eps(alpha) = T D_alpha - (log(delta) + log(alpha))/(alpha - 1)
                 + log((alpha - 1)/alpha),
    eps = min over the order grid (the argmin order is recorded),

with the order grid {1.1, 1.2, ..., 10.9} U {12, ..., 63} U {128, 256, 512, 1024}.

How to run
----------
From the repository root (needs numpy and scipy, e.g. Debian's
python3-numpy / python3-scipy, which live under /usr/bin/python3):

    python3 tests/reference/rdp_reference.py
    (or /usr/bin/python3 ... where the default python3 lacks numpy/scipy)

It writes tests/reference/rdp_reference.json next to this file (the output
path does not depend on the working directory) in a few seconds.

Tolerance: consumers should compare against the JSON with a RELATIVE
TOLERANCE OF 1e-6 (the reference itself is far more accurate; the tolerance
leaves room for the series/erfc implementations being checked).  In every
eps_check entry the second-best order's eps is at least ~2e-6 (relative)
worse than the best one, so best_order is stable at that tolerance (see
meta.self_checks.min_eps_rel_gap_best_vs_second_order).
"""

import json
import math
import os
import sys
import time
import warnings

import numpy as np
import scipy
from scipy import integrate

LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
GL_N = 20
GL_X, GL_W = np.polynomial.legendre.leggauss(GL_N)
SCREEN_DROP = 80.0      # window keeps f > fmax - SCREEN_DROP (e^-80 ~ 2e-35)
REFINE_RTOL = 1e-13     # Gauss-Legendre panel-halving agreement target
MAX_PANELS = 1 << 20
TOLERANCE = "1e-6 relative"

ORDERS = ([1.0 + x / 10.0 for x in range(1, 100)]
          + [float(a) for a in range(12, 64)]
          + [128.0, 256.0, 512.0, 1024.0])


# ---------------------------------------------------------------------------
# Vectorised integrands (numpy)
# ---------------------------------------------------------------------------

def _log_q(x, s):
    """log density of N(0, s^2)."""
    return -0.5 * (x / s) ** 2 - math.log(s) - LOG_SQRT_2PI


def _log_ratio(x, s, q):
    """log(P/Q)(x) = log(1 - q + q exp(t)), t = (x - 1/2)/s^2, accurate for
    small |t| (log1p/expm1) and for large t (logaddexp)."""
    t = (x - 0.5) / (s * s)
    if q == 1.0:
        return t
    small = t < 30.0
    tc = np.where(small, t, 0.0)
    near = np.log1p(q * np.expm1(tc))
    far = np.logaddexp(math.log1p(-q), math.log(q) + t)
    return np.where(small, near, far)


def _log_integrand(x, s, q, a):
    """log of Q(x) (P(x)/Q(x))^alpha."""
    return _log_q(x, s) + a * _log_ratio(x, s, q)


def _series_e2(y):
    """expm1(y) - y for |y| <= 0.5, by Taylor series (Horner)."""
    acc = np.zeros_like(y)
    for k in range(22, 1, -1):
        acc = acc * y + 1.0 / math.factorial(k)
    return acc * y * y


def _series_l2(u):
    """log1p(u) - u for |u| <= 0.1, by Taylor series (Horner)."""
    acc = np.zeros_like(u)
    for k in range(20, 1, -1):
        acc = acc * u + ((-1.0) ** (k + 1)) / k
    return acc * u * u


def _excess_integrand(x, s, q, a):
    """Q(x) [ (1+u)^alpha - 1 - alpha u ],  u = q expm1((x - 1/2)/s^2).

    Written as Q*(expm1(y) - y) + alpha*Q*(log1p(u) - u), y = alpha log1p(u),
    each piece computed without cancellation where it is small."""
    t = (x - 0.5) / (s * s)
    lq = _log_q(x, s)
    qd = np.exp(lq)
    lr = _log_ratio(x, s, q)
    y = a * lr
    u = q * np.expm1(np.minimum(t, 30.0))   # only used where |u| < 0.1
    small_u = np.abs(u) < 0.1
    qu = q * (np.exp(lq + t) - qd)          # Q*u, with Q e^t = N(1, s^2)
    l2 = _series_l2(np.where(small_u, u, 0.0))
    ql2 = np.where(small_u, qd * l2, qd * lr - qu)
    small_y = np.abs(y) < 0.5
    e2 = _series_e2(np.where(small_y, y, 0.0))
    with np.errstate(over="ignore"):
        qe2 = np.where(small_y, qd * e2, np.exp(lq + y) - qd - qd * y)
    return qe2 + a * ql2


# ---------------------------------------------------------------------------
# Scalar integrands (math module), written separately for the quad check
# ---------------------------------------------------------------------------

def _scalar_log_integrand(x, s, q, a):
    t = (x - 0.5) / (s * s)
    if q == 1.0:
        lr = t
    elif t < 30.0:
        lr = math.log1p(q * math.expm1(t))
    else:
        lr = math.log(q) + t + math.log1p((1.0 - q) / q * math.exp(-t))
    return -0.5 * (x / s) ** 2 - math.log(s) - LOG_SQRT_2PI + a * lr


def _scalar_excess_integrand(x, s, q, a):
    """Q(x) [ (1+u)^a - 1 - a u ], computed directly in the scalar path:
    a truncated binomial series sum_{k>=2} C(a,k) u^k for small |u|, else
    the plain formula with Q (1+u)^a in log form and Q u via N(1, s^2)."""
    t = (x - 0.5) / (s * s)
    lq = -0.5 * (x / s) ** 2 - math.log(s) - LOG_SQRT_2PI
    qd = math.exp(lq)
    u = q * math.expm1(t) if t < 30.0 else math.inf
    if abs(u) < 0.05 and abs(a * u) < 0.05:
        term = a * u
        total = 0.0
        k = 1
        while True:
            term *= (a - k) * u / (k + 1)
            k += 1
            total += term
            if abs(term) <= 1e-18 * abs(total) or k > 200:
                break
        return qd * total
    if q == 1.0:
        lr = t
    elif t < 30.0:
        lr = math.log1p(u)
    else:
        lr = math.log(q) + t + math.log1p((1.0 - q) / q * math.exp(-t))
    return math.exp(lq + a * lr) - qd - a * q * (math.exp(lq + t) - qd)


# ---------------------------------------------------------------------------
# Quadrature
# ---------------------------------------------------------------------------

def _gl_composite(func, lo, hi, n):
    edges = np.linspace(lo, hi, n + 1)
    mid = 0.5 * (edges[:-1] + edges[1:])
    half = 0.5 * (edges[1:] - edges[:-1])
    x = mid[:, None] + half[:, None] * GL_X[None, :]
    vals = func(x)
    return float(np.sum(vals * GL_W[None, :] * half[:, None]))


def _gl_adaptive(func, lo, hi, width, target, floor):
    """Halve the panel width until target(integral) changes by at most
    REFINE_RTOL relative (target maps the integral to the quantity that
    matters: log I for the log form, I - 1 for the excess form), relative
    to max(|target|, floor)."""
    n = max(2, int(math.ceil((hi - lo) / width)))
    prev = target(_gl_composite(func, lo, hi, n))
    while True:
        n *= 2
        raw = _gl_composite(func, lo, hi, n)
        cur = target(raw)
        diff = abs(cur - prev) / max(abs(cur), floor)
        if diff <= REFINE_RTOL or n >= MAX_PANELS:
            if diff > REFINE_RTOL:
                print(f"warning: panel refinement stopped at diff {diff:.3g}",
                      flush=True)
            return raw, diff
        prev = cur


def _screen(logfun, s, a):
    """Peak of logfun on [-40 s, a + 1 + 40 s] and the window around all
    points where logfun > max - SCREEN_DROP."""
    lo, hi = -40.0 * s, a + 1.0 + 40.0 * s
    npts = int(math.ceil((hi - lo) / (s / 8.0))) + 1
    xs = np.linspace(lo, hi, npts)
    with np.errstate(divide="ignore"):
        lv = logfun(xs)
    i = int(np.argmax(lv))
    fmax = float(lv[i])
    keep = np.nonzero(lv >= fmax - SCREEN_DROP)[0]
    wlo = max(lo, xs[max(keep[0] - 1, 0)] - s)
    whi = min(hi, xs[min(keep[-1] + 1, npts - 1)] + s)
    return fmax, float(xs[i]), wlo, whi


def rdp_single(s, q, a):
    """D_alpha for one step.  Returns (value, info dict)."""
    panel = 0.5 * min(s, s * s)
    fmax, xpeak, wlo, whi = _screen(lambda x: _log_integrand(x, s, q, a), s, a)
    scaled, diff = _gl_adaptive(
        lambda x: np.exp(_log_integrand(x, s, q, a) - fmax), wlo, whi, panel,
        lambda v: fmax + math.log(v), 1.0)
    log_i = fmax + math.log(scaled)
    info = {"form": "log", "fmax": fmax, "scale": scaled, "xpeak": xpeak,
            "refine_diff": diff, "window": (wlo, whi)}
    if log_i >= 1.0:
        return log_i / (a - 1.0), info
    # I close to 1: integrate I - 1 directly.
    with np.errstate(divide="ignore"):
        gmax, _, elo, ehi = _screen(
            lambda x: np.log(np.maximum(_excess_integrand(x, s, q, a), 0.0)),
            s, a)
    excess, diff2 = _gl_adaptive(
        lambda x: _excess_integrand(x, s, q, a), elo, ehi, panel, lambda v: v, 1e-300)
    info.update({"form": "excess", "excess": excess, "refine_diff": max(diff, diff2),
                 "log_i_direct": log_i, "window": (elo, ehi)})
    return math.log1p(excess) / (a - 1.0), info


def rdp_quad_check(s, q, a, info):
    """Recompute D_alpha with scipy.integrate.quad over the full range, cut
    into pieces, with the separately written scalar integrands.  Returns
    (D_alpha, relative difference of the raw integral vs. Gauss-Legendre):
    the scaled integral exp(-fmax) I for the log form, I - 1 for the excess
    form."""
    lo, hi = -40.0 * s, a + 1.0 + 40.0 * s
    width = 2.0 * min(s, s * s)
    npieces = int(math.ceil((hi - lo) / width))
    edges = np.linspace(lo, hi, npieces + 1)
    if info["form"] == "log":
        fmax = info["fmax"]

        def g(x):
            return math.exp(_scalar_log_integrand(x, s, q, a) - fmax)
        est = info["scale"]
    else:
        def g(x):
            return _scalar_excess_integrand(x, s, q, a)
        est = info["excess"]
    epsabs = 1e-16 * est / (npieces + 2)
    total = 0.0
    pieces = [(-np.inf, lo)] + list(zip(edges[:-1], edges[1:])) + [(hi, np.inf)]
    with warnings.catch_warnings():
        # Where log I is large the integrand carries rounding noise of about
        # 1e-16 * |log I| relative, so quad may report that it cannot reach
        # epsrel; that noise is irrelevant for D_alpha.
        warnings.simplefilter("ignore", integrate.IntegrationWarning)
        for p_lo, p_hi in pieces:
            val, _err = integrate.quad(g, float(p_lo), float(p_hi),
                                       epsabs=epsabs, epsrel=1e-13, limit=200)
            total += val
    integral_rel_diff = abs(total - est) / est
    if info["form"] == "log":
        return (info["fmax"] + math.log(total)) / (a - 1.0), integral_rel_diff
    return math.log1p(total) / (a - 1.0), integral_rel_diff


# ---------------------------------------------------------------------------
# (eps, delta)
# ---------------------------------------------------------------------------

def eps_from_rdp(rdp_per_step, steps, delta):
    """Balle et al. 2020 conversion, minimised over ORDERS.  Returns
    (eps, argmin order, relative gap to the second-best order's eps)."""
    vals = []
    for a, d in zip(ORDERS, rdp_per_step):
        e = (steps * d - (math.log(delta) + math.log(a)) / (a - 1.0)
             + math.log((a - 1.0) / a))
        vals.append((e, a))
    ranked = sorted(vals, key=lambda v: v[0])
    (e1, a1), (e2, _a2) = ranked[0], ranked[1]
    return e1, a1, (e2 - e1) / abs(e1)


# ---------------------------------------------------------------------------

def main():
    t0 = time.time()
    here = os.path.dirname(os.path.abspath(__file__))
    out_path = os.path.join(here, "rdp_reference.json")
    cache = {}
    stats = {"max_refine_diff": 0.0, "max_quad_rel_diff": 0.0,
             "max_quad_integral_rel_diff": 0.0,
             "max_q1_exact_rel_diff": 0.0, "n_excess_form": 0,
             "max_excess_vs_direct_abs_diff_logI": 0.0}

    def get(s, q, a):
        key = (s, q, a)
        if key not in cache:
            val, info = rdp_single(s, q, a)
            stats["max_refine_diff"] = max(stats["max_refine_diff"], info["refine_diff"])
            if info["form"] == "excess":
                stats["n_excess_form"] += 1
                stats["max_excess_vs_direct_abs_diff_logI"] = max(
                    stats["max_excess_vs_direct_abs_diff_logI"],
                    abs(math.log1p(info["excess"]) - info["log_i_direct"]))
            if q == 1.0:
                exact = a / (2.0 * s * s)
                stats["max_q1_exact_rel_diff"] = max(
                    stats["max_q1_exact_rel_diff"], abs(val - exact) / exact)
            cache[key] = (val, info)
        return cache[key]

    # ---- orders_check -----------------------------------------------------
    sigmas = [0.5, 0.8, 1.0, 2.0, 5.0]
    qs = [0.001, 0.01, 0.1, 0.5, 1.0]
    alphas = [1.5, 2.0, 3.0, 4.5, 8.0, 16.0, 32.0, 63.0, 256.0]
    orders_check = []
    skipped = []
    for s in sigmas:
        for q in qs:
            for a in alphas:
                val, info = get(s, q, a)
                if not math.isfinite(val) or val > 1e6:
                    skipped.append({"sigma": s, "q": q, "alpha": a})
                    continue
                qv, irel = rdp_quad_check(s, q, a, info)
                rel = abs(qv - val) / abs(val)
                stats["max_quad_rel_diff"] = max(stats["max_quad_rel_diff"], rel)
                stats["max_quad_integral_rel_diff"] = max(
                    stats["max_quad_integral_rel_diff"], irel)
                orders_check.append({"sigma": s, "q": q, "alpha": a, "rdp": val})
            print(f"[orders_check] sigma={s} q={q} done "
                  f"({len(orders_check)} entries, {time.time() - t0:.1f}s)",
                  flush=True)

    # ---- eps_check --------------------------------------------------------
    eps_sigmas = [0.6, 1.0, 2.0, 4.0]
    eps_qs = [0.001, 0.01, 0.05, 0.2, 1.0]
    steps_list = [1, 10, 1000, 100000]
    deltas = [1e-5, 1e-8]
    eps_check = []
    min_gap = math.inf
    for s in eps_sigmas:
        for q in eps_qs:
            curve = [get(s, q, a)[0] for a in ORDERS]
            for steps in steps_list:
                for delta in deltas:
                    eps, best, gap = eps_from_rdp(curve, steps, delta)
                    min_gap = min(min_gap, gap)
                    eps_check.append({"sigma": s, "q": q, "steps": steps,
                                      "delta": delta, "eps": eps,
                                      "best_order": best})
            print(f"[eps_check] sigma={s} q={q} done "
                  f"({len(eps_check)} entries, {time.time() - t0:.1f}s)",
                  flush=True)

    meta = {
        "generator": "python3 tests/reference/rdp_reference.py",
        "description": ("RDP of the Poisson-subsampled Gaussian mechanism "
                        "(sensitivity 1) by numerical integration of the "
                        "Renyi divergence definition; eps via Balle et al. "
                        "2020 conversion minimised over the order grid"),
        "tolerance": TOLERANCE,
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "orders": ORDERS,
        "orders_check_skipped": len(skipped),
        "orders_check_skipped_list": skipped,
        "n_orders_check": len(orders_check),
        "n_eps_check": len(eps_check),
        "self_checks": {
            "max_quad_vs_gauss_legendre_rel_diff": stats["max_quad_rel_diff"],
            "max_quad_vs_gauss_legendre_integral_rel_diff":
                stats["max_quad_integral_rel_diff"],
            "max_q1_vs_exact_rel_diff": stats["max_q1_exact_rel_diff"],
            "max_panel_refinement_rel_diff": stats["max_refine_diff"],
            "n_integrals_excess_form": stats["n_excess_form"],
            "max_excess_vs_direct_abs_diff_logI":
                stats["max_excess_vs_direct_abs_diff_logI"],
            "n_integrals": len(cache),
            "min_eps_rel_gap_best_vs_second_order": min_gap,
        },
    }
    with open(out_path, "w") as fh:
        json.dump({"meta": meta, "orders_check": orders_check,
                   "eps_check": eps_check}, fh, indent=1)
        fh.write("\n")
    print(json.dumps(meta["self_checks"], indent=1))
    print(f"wrote {out_path}: {len(orders_check)} orders_check "
          f"({len(skipped)} skipped), {len(eps_check)} eps_check entries "
          f"in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
