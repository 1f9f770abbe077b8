// RDP accountant for the Poisson-subsampled Gaussian mechanism.
//  - Integer orders: A_a = sum_k C(a,k) (1-q)^(a-k) q^k exp((k^2-k)/(2 sigma^2)),
//    RDP = log(A_a)/(a-1)  (Mironov, Talwar, Zhang 2019, Sec. 3.3, integer case).
//  - Fractional orders: the two-sided series with erfc tails of the same paper (Sec. 3.3),
//    z0 = sigma^2 log(1/q - 1) + 1/2, summed in log space with the signs of C(a, i).
//  - q = 1: a / (2 sigma^2) (Mironov 2017, Prop. 7).
//  - Conversion: Balle et al. 2020 ("Hypothesis testing interpretations and Renyi DP", Thm 21).
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "core/privacy/accountant.hpp"
#include "core/privacy/normal.hpp"
#include "core/util/error.hpp"

namespace dpft::privacy {

namespace {


// log |C(a, i)| and its sign, for real a and integer i >= 0.
double log_abs_binom(double a, double i, int* sign) {
  int s1 = 1, s2 = 1, s3 = 1;
  double l = lgamma_r(a + 1, &s1) - lgamma_r(i + 1, &s2) - lgamma_r(a - i + 1, &s3);
  *sign = s1 * s2 * s3;
  return l;
}

double log_a_integer(double q, double sigma, int a) {
  double acc = -kInf;
  for (int k = 0; k <= a; ++k) {
    int sign = 1;
    double t = log_abs_binom(a, k, &sign) + (a - k) * std::log1p(-q) + k * std::log(q) +
               (static_cast<double>(k) * k - k) / (2 * sigma * sigma);
    acc = log_add_exp(acc, t);
  }
  return acc;
}

double log_a_fractional(double q, double sigma, double a) {
  double pos = -kInf, neg = -kInf;  // sums of positive and negative terms, in log space
  double z0 = sigma * sigma * std::log(1.0 / q - 1.0) + 0.5;
  double lq = std::log(q), l1q = std::log1p(-q);
  for (int i = 0; i < 100000; ++i) {
    int sign = 1;
    double lc = log_abs_binom(a, i, &sign);
    double j = a - i;
    double t0 = lc + i * lq + j * l1q + (double(i) * i - i) / (2 * sigma * sigma) +
                std::log(0.5) + log_erfc((i - z0) / (std::sqrt(2.0) * sigma));
    double t1 = lc + j * lq + i * l1q + (j * j - j) / (2 * sigma * sigma) + std::log(0.5) +
                log_erfc((z0 - j) / (std::sqrt(2.0) * sigma));
    double t = log_add_exp(t0, t1);
    if (sign > 0) pos = log_add_exp(pos, t);
    else neg = log_add_exp(neg, t);
    // For i > a the signs of C(a, i) alternate and the terms decrease (polynomially), so the
    // truncation error is below the first omitted term: stop at 1e-12 relative.
    double total = neg == -kInf ? pos : (pos > neg ? log_sub_exp(pos, neg) : -kInf);
    if (i > a + 1 && t < total - 27.7) break;
  }
  if (!(pos > neg)) return kInf;  // lost to cancellation: no certificate at this order
  return log_sub_exp(pos, neg);
}

}  // namespace

double rdp_subsampled_gaussian(double q, double sigma, double alpha) {
  if (sigma <= 0) return kInf;
  if (q >= 1.0) return alpha / (2 * sigma * sigma);
  double la = (alpha == std::floor(alpha) && alpha < 1e6)
                  ? log_a_integer(q, sigma, static_cast<int>(alpha))
                  : log_a_fractional(q, sigma, alpha);
  return std::max(0.0, la / (alpha - 1));
}

const std::vector<double>& default_rdp_orders() {
  static const std::vector<double> orders = [] {
    std::vector<double> o;
    for (int x = 1; x < 100; ++x) o.push_back(1.0 + x / 10.0);
    for (int a = 12; a <= 63; ++a) o.push_back(a);
    for (double a : {128.0, 256.0, 512.0, 1024.0}) o.push_back(a);
    return o;
  }();
  return orders;
}

RdpCurve rdp_curve(const std::vector<GaussianBlock>& blocks, const std::vector<double>& orders) {
  RdpCurve c{orders, std::vector<double>(orders.size(), 0.0)};
  for (size_t i = 0; i < orders.size(); ++i)
    for (const GaussianBlock& b : blocks)
      c.eps[i] += b.sigma > 0 ? static_cast<double>(b.steps) *
                                    rdp_subsampled_gaussian(b.q, b.sigma, orders[i])
                              : kInf;
  return c;
}

RdpEpsilon curve_epsilon(const RdpCurve& curve, double delta) {
  RdpEpsilon best{kInf, curve.orders.empty() ? 0 : curve.orders.front(), false};
  for (size_t i = 0; i < curve.orders.size(); ++i) {
    const double a = curve.orders[i];
    const double eps =
        curve.eps[i] - (std::log(delta) + std::log(a)) / (a - 1) + std::log((a - 1) / a);
    if (std::isfinite(eps) && eps < best.epsilon) {
      best.epsilon = eps;
      best.order = a;
      best.at_edge = (i == 0 || i + 1 == curve.orders.size());
    }
  }
  best.epsilon = std::max(0.0, best.epsilon);
  return best;
}

RdpEpsilon rdp_epsilon(const std::vector<GaussianBlock>& blocks, double delta,
                       const std::vector<double>& orders) {
  return curve_epsilon(rdp_curve(blocks, orders), delta);
}

namespace {

class RdpAccountant : public Accountant {
 public:
  std::string name() const override { return "rdp"; }
  EpsilonResult epsilon(const std::vector<GaussianBlock>& blocks, double delta) const override {
    for (const auto& b : blocks) check_block(b);
    EpsilonResult r;
    r.accountant = "rdp";
    RdpEpsilon e = rdp_epsilon(blocks, delta);
    r.epsilon = e.epsilon;
    if (std::isfinite(e.epsilon)) {
      r.best_order = e.order;
      if (e.at_edge)
        r.warnings.push_back(fmt::format("RDP: the best order {} is at the edge of the order grid; "
                                         "epsilon may be loose", e.order));
    }
    return r;
  }
};

}  // namespace

std::unique_ptr<Accountant> make_rdp_accountant() { return std::make_unique<RdpAccountant>(); }

}  // namespace dpft::privacy
