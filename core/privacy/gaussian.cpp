// Analytic Gaussian accountant (Balle & Wang 2018, "Improving the Gaussian mechanism for
// differential privacy", Theorem 8): exact privacy profile of the Gaussian mechanism.
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "core/privacy/accountant.hpp"
#include "core/privacy/normal.hpp"
#include "core/util/error.hpp"

namespace dpft::privacy {

double gaussian_delta(double mu, double eps) {
  if (mu <= 0) return 0.0;
  if (std::isinf(mu)) return 1.0;
  // delta = Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu), evaluated in log space.
  double la = log_norm_cdf(mu / 2 - eps / mu);
  double lb = eps + log_norm_cdf(-mu / 2 - eps / mu);
  if (lb >= la) return 0.0;
  return std::exp(log_sub_exp(la, lb));
}

double gaussian_epsilon(double mu, double delta) {
  if (gaussian_delta(mu, 0.0) <= delta) return 0.0;
  double lo = 0.0, hi = 1.0;
  while (gaussian_delta(mu, hi) > delta) {
    lo = hi;
    hi *= 2;
    if (hi > 1e12) return std::numeric_limits<double>::infinity();
  }
  for (int i = 0; i < 200 && hi - lo > 1e-14 * hi; ++i) {
    double mid = 0.5 * (lo + hi);
    (gaussian_delta(mu, mid) > delta ? lo : hi) = mid;
  }
  return hi;  // delta(hi) <= delta: an upper bound on the exact epsilon
}

namespace {

class GaussianAccountant : public Accountant {
 public:
  std::string name() const override { return "gaussian"; }
  EpsilonResult epsilon(const std::vector<GaussianBlock>& blocks, double delta) const override {
    EpsilonResult r;
    r.accountant = "gaussian";
    if (has_non_private(blocks)) {
      r.epsilon = std::numeric_limits<double>::infinity();
      return r;
    }
    double mu2 = 0;
    for (const auto& b : blocks) {
      check_block(b);
      if (b.q != 1.0)
        throw ConfigError(fmt::format("the gaussian accountant is exact only without subsampling "
                                      "(q = 1), got q = {}; use --accountant prv or rdp", b.q));
      mu2 += static_cast<double>(b.steps) / (b.sigma * b.sigma);
    }
    r.epsilon = gaussian_epsilon(std::sqrt(mu2), delta);
    return r;
  }
};

}  // namespace

std::unique_ptr<Accountant> make_gaussian_accountant() { return std::make_unique<GaussianAccountant>(); }

}  // namespace dpft::privacy
