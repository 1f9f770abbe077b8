#include "core/privacy/calibrate.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>

#include "core/util/error.hpp"

namespace dpft::privacy {

namespace {
double eps_at(const Accountant& acc, double sigma, double q, int64_t steps, double delta) {
  return acc.epsilon({{sigma, q, steps}}, delta).epsilon;
}

// A log line every 5 s of a long calibration (millions of steps take minutes), so a caller
// sees it working and where the bracket stands.
struct CalibrationProgress {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now(), last = start;
  int evaluations = 0;
  void operator()(double lo, double hi, double target) {
    ++evaluations;
    auto now = std::chrono::steady_clock::now();
    if (now - last < std::chrono::seconds(5)) return;
    last = now;
    spdlog::info("calibrating sigma for epsilon {}: sigma in [{:.6g}, {:.6g}] after {} "
                 "accountant evaluations ({:.0f} s)",
                 target, lo, hi, evaluations,
                 std::chrono::duration<double>(now - start).count());
  }
};
}  // namespace

SigmaCalibration calibrate_sigma(const Accountant& acc, double q, int64_t steps, double target,
                                 double delta, double rel_tol) {
  if (!(target > 0)) throw ConfigError(fmt::format("target epsilon {} must be > 0", target));
  if (!(rel_tol > 0 && rel_tol < 1)) throw ConfigError("sigma tolerance must be in (0, 1)");
  check_block({1.0, q, steps}, "calibration");
  double lo = 0.5, hi = 1.0;
  CalibrationProgress progress;
  // Bracket: eps(lo) > target >= eps(hi).
  while (eps_at(acc, hi, q, steps, delta) > target) {
    lo = hi;
    hi *= 2;
    progress(lo, hi, target);
    if (hi > 1e6)
      throw ConfigError(fmt::format("epsilon {} is unreachable: even sigma = 1e6 spends more "
                                    "(q = {}, steps = {}, delta = {})", target, q, steps, delta));
  }
  while (lo > 1e-3 && eps_at(acc, lo, q, steps, delta) <= target) {
    hi = lo;
    lo /= 2;
    progress(lo, hi, target);
  }
  while (hi / lo - 1 > rel_tol) {
    double mid = std::sqrt(lo * hi);
    (eps_at(acc, mid, q, steps, delta) > target ? lo : hi) = mid;
    progress(lo, hi, target);
  }
  SigmaCalibration c;
  c.sigma = hi;
  c.sigma_low = lo;
  c.rel_tol = rel_tol;
  c.detail = acc.epsilon({{hi, q, steps}}, delta);
  c.epsilon = c.detail.epsilon;
  return c;
}

int64_t max_steps(const Accountant& acc, double sigma, double q, double target, double delta, int64_t limit) {
  if (eps_at(acc, sigma, q, 1, delta) > target) return 0;
  int64_t lo = 1, hi = 2;
  while (hi <= limit && eps_at(acc, sigma, q, hi, delta) <= target) {
    lo = hi;
    hi *= 2;
  }
  if (hi > limit) {
    if (eps_at(acc, sigma, q, limit, delta) <= target) return limit;
    hi = limit;
  }
  while (hi - lo > 1) {  // eps(lo) <= target < eps(hi)
    int64_t mid = lo + (hi - lo) / 2;
    (eps_at(acc, sigma, q, mid, delta) <= target ? lo : hi) = mid;
  }
  return lo;
}

double max_sampling_rate(const Accountant& acc, double sigma, int64_t steps, double target, double delta,
                         double rel_tol) {
  if (eps_at(acc, sigma, 1.0, steps, delta) <= target) return 1.0;
  double lo = 1e-9, hi = 1.0;
  if (eps_at(acc, sigma, lo, steps, delta) > target) return 0.0;
  while (hi / lo - 1 > rel_tol) {  // eps(lo) <= target < eps(hi)
    double mid = std::sqrt(lo * hi);
    (eps_at(acc, sigma, mid, steps, delta) <= target ? lo : hi) = mid;
  }
  return lo;
}

}  // namespace dpft::privacy
