// PRV accountant: numerical composition of privacy-loss random variables
// (Gopi, Lee, Wutschitz 2021, "Numerical Composition of Differential Privacy", Alg. 1 and
// Thm 5.5's Hoeffding argument), for Poisson-subsampled Gaussian blocks, with our own error
// bookkeeping so that eps_upper is a certified upper bound.
//
// For one adjacency direction, the privacy loss of one step is Y = log(P/Q)(X), X ~ P, with
//   remove: P = (1-q) N(0, s^2) + q N(1, s^2), Q = N(0, s^2)   (Y >= log(1-q))
//   add:    P = N(0, s^2), Q = (1-q) N(0, s^2) + q N(1, s^2)   (Y <= -log(1-q))
// and delta(eps) = E[(1 - e^(eps - sum_i Y_i))_+] for the composition. Add/remove DP needs the
// max over both directions, each composed over all steps (dp_accounting does the same).
//
// Algorithm, per direction:
//  1. Grid y = j h with h = eps_error * sqrt(2 / (T log(1/delta_h))), T = total steps.
//  2. Each block's Y is clamped to [j_lo h, j_hi h] (P(clamp) <= delta_clamp / T per step, from
//     the exact CDF) and rounded to the nearest grid point D; cell masses come from the exact
//     CDF. The shift s = E[Y_clamped] - E[D] (|s| <= h/2) makes Y~ = D + s mean-preserving, so
//     Y - Y~ is zero-mean with range h and Hoeffding gives P(sum (Y - Y~) > eps_error) <= delta_h.
//     E[Y_clamped] = j_lo h + int SF (Simpson); the quadrature error bound (|Simpson - trapezoid|)
//     times T widens eps_error (bias).
//  3. The composed sum of Y~ lives in a window [w_lo, w_hi] chosen by Chernoff bounds computed
//     from the discrete distributions themselves (outside mass <= delta_window each side);
//     composition is a circular convolution of size N >= (w_hi - w_lo)/h by FFT.
//  4. On the good event G (no clamp, Hoeffding holds, sum inside the window),
//     delta_true(eps) <= delta_grid(eps - eps_err) + P(not G), and
//     delta_true(eps) >= delta_grid(eps + eps_err) - P(not G). Hence
//       eps_upper = eps_grid(delta - P(not G)) + eps_err,  eps_lower = eps_grid(delta + P(not G)) - eps_err.
//     P(not G) also counts FFT round-off (the negative mass the inverse FFT returns).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/privacy/accountant.hpp"

namespace dpft::privacy {

struct PrvEpsilon {
  double eps_lower = 0, eps_estimate = 0, eps_upper = 0;
  int64_t grid_size = 0;          // FFT length N (largest over directions)
  double mesh = 0;                // h
  double delta_bad = 0;           // P(not G) used, largest over directions
};

// Throws RuntimeError (with the reason) when the computation cannot be certified within
// opts.max_grid points or the float range; callers fall back to RDP.
// Results are remembered by their exact inputs for the life of the process (calibrations and
// `account --spec` over many specs repeat them); prv_memo_hits() counts the answers given from
// memory (for tests).
PrvEpsilon prv_epsilon(const std::vector<GaussianBlock>& blocks, double delta,
                       const AccountantOptions& opts);
int64_t prv_memo_hits();

// Single-step privacy-loss distribution of one direction (exposed for tests).
struct PrivacyLoss {
  double q, sigma;
  bool remove;          // true: remove direction; false: add direction
  double cdf(double y) const;
  double sf(double y) const;  // 1 - cdf, accurate in the upper tail
};

}  // namespace dpft::privacy
