#include "core/privacy/normal.hpp"

#include <cmath>
#include <limits>

namespace dpft::privacy {

double norm_cdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

double log_norm_cdf(double x) {
  if (x > -20.0) return std::log(0.5 * std::erfc(-x / std::sqrt(2.0)));
  // Asymptotic series: Phi(x) = phi(x)/|x| * (1 - 1/x^2 + 3/x^4 - 15/x^6 + ...). At x <= -20
  // the 12-term partial sum is accurate to far below double precision.
  double x2 = x * x, term = 1.0, sum = 1.0;
  for (int k = 1; k <= 12; ++k) {
    term *= -(2.0 * k - 1.0) / x2;
    sum += term;
  }
  return -0.5 * x2 - std::log(-x) - 0.5 * std::log(2.0 * M_PI) + std::log(sum);
}

double log_erfc(double x) { return std::log(2.0) + log_norm_cdf(-std::sqrt(2.0) * x); }

double log_sub_exp(double a, double b) {
  if (b == -std::numeric_limits<double>::infinity()) return a;
  if (a == b) return -std::numeric_limits<double>::infinity();
  return a + std::log1p(-std::exp(b - a));
}

double log_add_exp(double a, double b) {
  if (a < b) std::swap(a, b);
  if (b == -std::numeric_limits<double>::infinity()) return a;
  return a + std::log1p(std::exp(b - a));
}

}  // namespace dpft::privacy
