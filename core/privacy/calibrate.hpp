// Calibration: the smallest noise multiplier (or the largest number of steps or sampling rate)
// whose certified epsilon stays within a target.
//
// Unlike a search that stops when eps is within an absolute tolerance of the target (which
// can over-noise by ~15%: Opacus issue #566), calibrate_sigma brackets sigma and shrinks the
// bracket (safeguarded secant steps on log epsilon against log sigma, bisection as the fallback)
// until its relative width is below `rel_tol`; it returns the upper end, whose certified epsilon
// is <= target by construction.
#pragma once
#include <cstdint>
#include <vector>

#include "core/privacy/accountant.hpp"

namespace dpft::privacy {

struct SigmaCalibration {
  double sigma;       // smallest found sigma with eps(sigma) <= target (within rel_tol)
  double epsilon;     // certified eps at sigma
  double sigma_low;   // bracket end with eps > target
  double rel_tol;
  EpsilonResult detail;
};

// Throws ConfigError when the target cannot be met (e.g. eps so small that sigma > 1e6).
// `fixed`: other releases of the same run with their noise already set (CTCL's topic histogram:
// {10, 1, 1}), composed with the calibrated block; the certified epsilon of all of them together
// is <= target. ConfigError when the fixed releases alone reach the target or one is
// non-private.
SigmaCalibration calibrate_sigma(const Accountant& acc, double q, int64_t steps, double target_eps,
                                 double delta, double rel_tol = 1e-3,
                                 const std::vector<GaussianBlock>& fixed = {});

// DP-SFT (paper 002, Theorem 3 and Algorithm 3): two stages of subsampled Gaussian steps,
// stage 1 (q1, T1) then stage 2 (q2, T2), sharing one (epsilon, delta) budget by the split
// p1 + p2 = 1 (p1 = share1).
//   split (joint = false): the paper's accounting. Stage i alone is calibrated to
//     (p_i epsilon, p_i delta); basic composition makes the pair (epsilon, delta)-DP.
//   joint: both stages accounted as the one heterogeneous composition they are. The split's
//     noise multipliers are scaled by the smallest common factor c whose composed certified
//     epsilon at delta is <= epsilon (c <= 1 in practice: less noise for the same guarantee).
// T1 = 0 (a subspace from public data or a file): stage 2 alone gets the whole budget (share1
// is then ignored). Throws ConfigError when share1 is not in (0, 1) with T1 > 0.
struct TwoStageCalibration {
  double sigma1 = 0, sigma2 = 0;  // the noise multipliers to use (sigma1 = 0 without stage 1)
  double scale = 1;               // joint: c; split: 1
  double epsilon = 0;             // certified epsilon of both stages composed at delta
  // Split mode's per-stage guarantees: stage i alone at delta_i = p_i delta has epsilon_i
  // (<= p_i epsilon); their sums are the Theorem-3 total.
  double split_sigma1 = 0, split_sigma2 = 0, split_epsilon1 = 0, split_epsilon2 = 0;
};
TwoStageCalibration calibrate_two_stage(const Accountant& acc, double q1, int64_t T1, double q2,
                                        int64_t T2, double target_eps, double delta, double share1,
                                        bool joint, double rel_tol = 1e-3);

// Largest steps T with eps(sigma, q, T) <= target (0 if even one step exceeds it).
int64_t max_steps(const Accountant& acc, double sigma, double q, double target_eps, double delta,
                  int64_t limit = kMaxSteps);
// Largest q in (0, 1] with eps(sigma, q, T) <= target, to relative precision rel_tol (0 if none).
double max_sampling_rate(const Accountant& acc, double sigma, int64_t steps, double target_eps,
                         double delta, double rel_tol = 1e-4);

}  // namespace dpft::privacy
