#include "core/privacy/audit_bound.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/util/error.hpp"

namespace dpft::privacy {

namespace {

void check_counts(const AuditCounts& c, double delta) {
  DPFT_CHECK_AS(ConfigError, c.m >= 1, "audit: need at least one canary (m = {})", c.m);
  DPFT_CHECK_AS(ConfigError, c.guesses >= 0 && c.guesses <= c.m,
                "audit: {} guesses for {} canaries; at most one guess per canary", c.guesses, c.m);
  DPFT_CHECK_AS(ConfigError, c.correct >= 0 && c.correct <= c.guesses,
                "audit: {} correct guesses out of {}", c.correct, c.guesses);
  DPFT_CHECK_AS(ConfigError, delta >= 0 && delta < 1, "audit: delta {} outside [0, 1)", delta);
}

// pmf[j] = P[Binomial(r, p) = j], p = e^eps / (1 + e^eps), in log space (r up to millions).
std::vector<double> binomial_pmf(int64_t r, double epsilon) {
  const double log_p = -std::log1p(std::exp(-epsilon));            // log(e^eps / (1 + e^eps))
  const double log_q = -epsilon - std::log1p(std::exp(-epsilon));  // log(1 / (1 + e^eps))
  std::vector<double> pmf(static_cast<size_t>(r) + 1);
  const double lr = std::lgamma(static_cast<double>(r) + 1);
  for (int64_t j = 0; j <= r; ++j) {
    const double jd = static_cast<double>(j), kd = static_cast<double>(r - j);
    pmf[static_cast<size_t>(j)] =
        std::exp(lr - std::lgamma(jd + 1) - std::lgamma(kd + 1) + jd * log_p + kd * log_q);
  }
  return pmf;
}

}  // namespace

double audit_p_value(const AuditCounts& c, double epsilon, double delta) {
  check_counts(c, delta);
  DPFT_CHECK_AS(ConfigError, epsilon >= 0 && !std::isnan(epsilon), "audit: epsilon {} < 0",
                epsilon);
  const int64_t r = c.guesses, v = c.correct;
  if (v == 0) return 1.0;
  const std::vector<double> pmf = binomial_pmf(r, epsilon);
  // f(v) = sum_{j >= v} pmf[j], summed from the small tail up.
  double f_v = 0;
  for (int64_t j = r; j >= v; --j) f_v += pmf[static_cast<size_t>(j)];
  // alpha = max_i (f(v - i) - f(v)) / i; f(v - i) - f(v) = sum_{j = v-i}^{v-1} pmf[j], and for
  // i >= v the difference stays 1 - f(v) while i grows, so i = 1..v decides the maximum.
  double alpha = 0, gap = 0;
  if (delta > 0)
    for (int64_t i = 1; i <= v; ++i) {
      gap += pmf[static_cast<size_t>(v - i)];
      alpha = std::max(alpha, gap / static_cast<double>(i));
    }
  return std::min(1.0, f_v + 2.0 * static_cast<double>(c.m) * delta * alpha);
}

double audit_epsilon_lower_bound(const AuditCounts& c, double delta, double beta, double tol) {
  check_counts(c, delta);
  DPFT_CHECK_AS(ConfigError, beta > 0 && beta < 1, "audit: beta {} outside (0, 1)", beta);
  DPFT_CHECK_AS(ConfigError, tol > 0, "audit: tolerance {} <= 0", tol);
  auto refuted = [&](double eps) { return audit_p_value(c, eps, delta) < beta; };
  if (!refuted(0)) return 0;
  double lo = 0, hi = 1;
  while (refuted(hi)) {  // p-value -> 1 as epsilon grows, so this ends
    lo = hi;
    hi *= 2;
    DPFT_CHECK(hi < 1e6, "audit: no epsilon bracket below 1e6 (p-value {} at {})",
               audit_p_value(c, lo, delta), lo);
  }
  while (hi - lo > tol) {
    const double mid = 0.5 * (lo + hi);
    (refuted(mid) ? lo : hi) = mid;
  }
  return lo;
}

std::vector<int> audit_guesses(const std::vector<double>& scores, int64_t k_plus,
                               int64_t k_minus) {
  const int64_t m = static_cast<int64_t>(scores.size());
  DPFT_CHECK_AS(ConfigError, k_plus >= 0 && k_minus >= 0 && k_plus + k_minus <= m,
                "audit: {} + {} guesses for {} canaries; at most one guess per canary", k_plus,
                k_minus, m);
  for (double s : scores)
    DPFT_CHECK_AS(RuntimeError, std::isfinite(s), "audit: a canary's score is {}", s);
  std::vector<int64_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return scores[a] > scores[b]; });
  std::vector<int> t(scores.size(), 0);
  for (int64_t i = 0; i < k_plus; ++i) t[order[i]] = 1;
  for (int64_t i = 0; i < k_minus; ++i) t[order[m - 1 - i]] = -1;
  return t;
}

}  // namespace dpft::privacy
