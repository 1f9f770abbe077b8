#include "core/privacy/calibrate.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>

#include "core/util/error.hpp"

namespace dpft::privacy {

namespace {
std::vector<GaussianBlock> with_fixed(const std::vector<GaussianBlock>& fixed, double sigma,
                                      double q, int64_t steps) {
  std::vector<GaussianBlock> b = fixed;
  b.push_back({sigma, q, steps});
  return b;
}
double eps_at(const Accountant& acc, double sigma, double q, int64_t steps, double delta,
              const std::vector<GaussianBlock>& fixed = {}) {
  return acc.epsilon(with_fixed(fixed, sigma, q, steps), delta).epsilon;
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
                                 double delta, double rel_tol,
                                 const std::vector<GaussianBlock>& fixed) {
  if (!(target > 0)) throw ConfigError(fmt::format("target epsilon {} must be > 0", target));
  if (!(rel_tol > 0 && rel_tol < 1)) throw ConfigError("sigma tolerance must be in (0, 1)");
  check_block({1.0, q, steps}, "calibration");
  for (const auto& b : fixed) check_block(b, "a fixed release");
  if (!fixed.empty()) {
    if (has_non_private(fixed))
      throw ConfigError("a fixed release without noise (sigma 0) spends an infinite epsilon");
    const double alone = acc.epsilon(fixed, delta).epsilon;
    if (alone >= target)
      throw ConfigError(fmt::format(
          "the run's other releases alone spend epsilon {:.4g} >= the target {} (delta {}): "
          "raise the target or their noise",
          alone, target, delta));
  }
  double lo = 0.5, hi = 1.0;
  CalibrationProgress progress;
  // Bracket: eps(lo) > target >= eps(hi).
  while (eps_at(acc, hi, q, steps, delta, fixed) > target) {
    lo = hi;
    hi *= 2;
    progress(lo, hi, target);
    if (hi > 1e6)
      throw ConfigError(fmt::format("epsilon {} is unreachable: even sigma = 1e6 spends more "
                                    "(q = {}, steps = {}, delta = {})", target, q, steps, delta));
  }
  while (lo > 1e-3 && eps_at(acc, lo, q, steps, delta, fixed) <= target) {
    hi = lo;
    lo /= 2;
    progress(lo, hi, target);
  }
  while (hi / lo - 1 > rel_tol) {
    double mid = std::sqrt(lo * hi);
    (eps_at(acc, mid, q, steps, delta, fixed) > target ? lo : hi) = mid;
    progress(lo, hi, target);
  }
  SigmaCalibration c;
  c.sigma = hi;
  c.sigma_low = lo;
  c.rel_tol = rel_tol;
  c.detail = acc.epsilon(with_fixed(fixed, hi, q, steps), delta);
  c.epsilon = c.detail.epsilon;
  return c;
}

TwoStageCalibration calibrate_two_stage(const Accountant& acc, double q1, int64_t T1, double q2,
                                        int64_t T2, double target, double delta, double share1,
                                        bool joint, double rel_tol) {
  TwoStageCalibration c;
  if (T1 <= 0) {  // no private stage 1: stage 2 takes the whole budget
    SigmaCalibration s2 = calibrate_sigma(acc, q2, T2, target, delta, rel_tol);
    c.sigma2 = c.split_sigma2 = s2.sigma;
    c.epsilon = c.split_epsilon2 = s2.epsilon;
    return c;
  }
  if (!(share1 > 0 && share1 < 1))
    throw ConfigError(fmt::format(
        "the budget split p1 = {} must be in (0, 1): stage 1 gets (p1 eps, p1 delta), stage 2 "
        "(p2 eps, p2 delta) with p2 = 1 - p1",
        share1));
  const double share2 = 1 - share1;
  SigmaCalibration s1 = calibrate_sigma(acc, q1, T1, share1 * target, share1 * delta, rel_tol);
  SigmaCalibration s2 = calibrate_sigma(acc, q2, T2, share2 * target, share2 * delta, rel_tol);
  c.split_sigma1 = s1.sigma;
  c.split_sigma2 = s2.sigma;
  c.split_epsilon1 = s1.epsilon;
  c.split_epsilon2 = s2.epsilon;
  auto composed = [&](double scale) {
    return acc.epsilon({{scale * s1.sigma, q1, T1}, {scale * s2.sigma, q2, T2}}, delta).epsilon;
  };
  double scale = 1;
  if (joint) {
    // Bracket eps(lo) > target >= eps(hi), then bisect in log-space; keep the upper end.
    double lo = 0.5, hi = 1.0;
    while (composed(hi) > target) {
      lo = hi;
      hi *= 1.25;
      if (hi > 1e3)
        throw ConfigError(
            fmt::format("joint accounting cannot meet epsilon {} (delta {})", target, delta));
    }
    while (lo > 1e-3 && composed(lo) <= target) hi = lo, lo /= 2;
    while (hi / lo - 1 > rel_tol) {
      const double mid = std::sqrt(lo * hi);
      (composed(mid) > target ? lo : hi) = mid;
    }
    scale = hi;
  }
  c.scale = scale;
  c.sigma1 = scale * s1.sigma;
  c.sigma2 = scale * s2.sigma;
  c.epsilon = composed(scale);
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
