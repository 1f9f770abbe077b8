#include "core/privacy/calibrate.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <limits>

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

// g(x) = log(eps(x) / target): > 0 over the target, <= 0 within it; smooth and nearly linear in
// log(sigma), which the secant steps below exploit.
double excess(double eps, double target) {
  if (std::isinf(eps)) return std::numeric_limits<double>::infinity();
  return eps <= 0 ? -std::numeric_limits<double>::infinity() : std::log(eps / target);
}

// A bracket of a decreasing g: g(lo) > 0 >= g(hi), lo < hi.
struct Bracket {
  double lo, g_lo, hi, g_hi;
};

// Shrinks b until hi / lo - 1 <= rel_tol, keeping g(lo) > 0 >= g(hi) (so hi is a certified
// answer however g behaves). Each step is a secant step on (log x, g), Illinois-weighted when the
// same end survives twice, and nudged by rel_tol / 3 toward the end that did not move last, so
// that a good root estimate closes the bracket from both sides. Bisection in log space instead
// when g is not finite at an end, or when two steps have not halved the bracket's log-width (so
// the worst case stays within ~2x bisection's count). On the smooth log-epsilon curves of the
// accountants this takes ~4 evaluations after the bracket where bisection takes ~10 (rel_tol
// 1e-3 from a bracket of ratio 2).
template <class G, class OnEval>
void shrink(Bracket& b, double rel_tol, G&& g, OnEval&& on_eval) {
  int side = 0;               // which end moved last: -1 lo, +1 hi, 0 none yet
  double w_lo = 1, w_hi = 1;  // Illinois weights on the stale end's g
  const double nudge = 1 + rel_tol / 3;
  double width[2] = {std::numeric_limits<double>::infinity(),
                     std::numeric_limits<double>::infinity()};  // log-widths 1 and 2 steps ago
  while (b.hi / b.lo - 1 > rel_tol) {
    const double a = std::log(b.lo), c = std::log(b.hi);
    const double ga = w_lo * b.g_lo, gc = w_hi * b.g_hi;
    const bool slow = c - a > 0.5 * width[1];
    width[1] = width[0], width[0] = c - a;
    double u = 0.5 * (a + c);
    if (!slow && std::isfinite(ga) && std::isfinite(gc) && ga > gc)
      u = a + (c - a) * ga / (ga - gc);
    double x = std::exp(u) * (side == -1 ? nudge : side == 1 ? 1 / nudge : 1.0);
    // Strictly inside, at least a factor `nudge` from each end (possible: width > rel_tol).
    x = std::min(std::max(x, b.lo * nudge), b.hi / nudge);
    const double gx = g(x);
    if (gx > 0) {
      b.lo = x, b.g_lo = gx;
      w_hi = side == -1 ? w_hi * 0.5 : 1, w_lo = 1, side = -1;
    } else {
      b.hi = x, b.g_hi = gx;
      w_lo = side == 1 ? w_lo * 0.5 : 1, w_hi = 1, side = 1;
    }
    on_eval(b);
  }
}

// Starting from [1 / factor, 1], multiplies hi by `factor` (up to max_hi) or divides lo by it
// (down to 1e-3) until g(lo) > 0 >= g(hi); lo = 0 when even 1e-3 satisfies g <= 0 (nothing to
// shrink then). False when g > 0 at max_hi.
template <class G, class OnEval>
bool find_bracket(Bracket& b, double factor, double max_hi, G&& g, OnEval&& on_eval) {
  const double start = 1 / factor;
  b = {start, 0.0, 1.0, g(1.0)};
  while (b.g_hi > 0) {
    b.lo = b.hi, b.g_lo = b.g_hi;
    b.hi *= factor;
    on_eval(b);
    if (b.hi > max_hi) return false;
    b.g_hi = g(b.hi);
  }
  if (b.lo == start) b.g_lo = g(b.lo);
  while (b.lo > 1e-3 && b.g_lo <= 0) {
    b.hi = b.lo, b.g_hi = b.g_lo;
    b.lo /= factor;
    on_eval(b);
    b.g_lo = g(b.lo);
  }
  if (b.g_lo <= 0) b.lo = 0;
  return true;
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
  CalibrationProgress progress;
  EpsilonResult at_hi;  // the accountant's answer at the bracket's upper end (reused below)
  double at_hi_sigma = -1;
  auto g = [&](double sigma) {
    EpsilonResult r = acc.epsilon(with_fixed(fixed, sigma, q, steps), delta);
    if (r.epsilon <= target) at_hi = r, at_hi_sigma = sigma;  // it becomes the upper end
    return excess(r.epsilon, target);
  };
  auto on_eval = [&](const Bracket& x) { progress(x.lo, x.hi, target); };
  Bracket b{};
  if (!find_bracket(b, 2.0, 1e6, g, on_eval))
    throw ConfigError(
        fmt::format("epsilon {} is unreachable: even sigma = 1e6 spends more "
                    "(q = {}, steps = {}, delta = {})",
                    target, q, steps, delta));
  if (b.lo > 0) shrink(b, rel_tol, g, on_eval);
  const double lo = b.lo, hi = b.hi;
  SigmaCalibration c;
  c.sigma = hi;
  c.sigma_low = lo;
  c.rel_tol = rel_tol;
  c.detail = at_hi_sigma == hi ? at_hi : acc.epsilon(with_fixed(fixed, hi, q, steps), delta);
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
  double eps_hi = std::numeric_limits<double>::quiet_NaN(), eps_hi_scale = -1;
  auto composed = [&](double scale) {
    const double e =
        acc.epsilon({{scale * s1.sigma, q1, T1}, {scale * s2.sigma, q2, T2}}, delta).epsilon;
    if (e <= target) eps_hi = e, eps_hi_scale = scale;  // it becomes the upper end
    return e;
  };
  double scale = 1;
  if (joint) {
    // Bracket eps(lo) > target >= eps(hi) (the scale is a little below 1 in practice: start
    // at [0.8, 1]), then shrink it; keep the upper end.
    auto g = [&](double x) { return excess(composed(x), target); };
    Bracket br{};
    auto quiet = [](const Bracket&) {};
    if (!find_bracket(br, 1.25, 1e3, g, quiet))
      throw ConfigError(
          fmt::format("joint accounting cannot meet epsilon {} (delta {})", target, delta));
    if (br.lo > 0) shrink(br, rel_tol, g, quiet);
    scale = br.hi;
  }
  c.scale = scale;
  c.sigma1 = scale * s1.sigma;
  c.sigma2 = scale * s2.sigma;
  c.epsilon = eps_hi_scale == scale ? eps_hi : composed(scale);
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
