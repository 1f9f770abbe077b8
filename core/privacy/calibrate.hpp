// Calibration: the smallest noise multiplier (or the largest number of steps or sampling rate)
// whose certified epsilon stays within a target.
//
// Unlike a search that stops when eps is within an absolute tolerance of the target (which
// can over-noise by ~15%: Opacus issue #566), calibrate_sigma brackets sigma and bisects in
// log-space until the bracket's relative width is below `rel_tol`; it returns the upper end,
// whose certified epsilon is <= target by construction.
#pragma once
#include <cstdint>

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
SigmaCalibration calibrate_sigma(const Accountant& acc, double q, int64_t steps, double target_eps,
                                 double delta, double rel_tol = 1e-3);

// Largest steps T with eps(sigma, q, T) <= target (0 if even one step exceeds it).
int64_t max_steps(const Accountant& acc, double sigma, double q, double target_eps, double delta,
                  int64_t limit = kMaxSteps);
// Largest q in (0, 1] with eps(sigma, q, T) <= target, to relative precision rel_tol (0 if none).
double max_sampling_rate(const Accountant& acc, double sigma, int64_t steps, double target_eps,
                         double delta, double rel_tol = 1e-4);

}  // namespace dpft::privacy
