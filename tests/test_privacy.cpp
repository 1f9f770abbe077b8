// Accountants: exactness at q = 1, agreement between accountants, monotonicity, calibration
// round trips, heterogeneous composition, published noise multipliers, and the independent
// numerical RDP reference (tests/reference/rdp_reference.py).
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>

#include "core/privacy/accountant.hpp"
#include "core/privacy/calibrate.hpp"
#include "core/privacy/normal.hpp"
#include "core/privacy/prv.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "test_util.hpp"

using namespace dpft;
using namespace dpft::privacy;

TEST_CASE("log Phi is accurate in the far tail", "[privacy]") {
  CHECK(log_norm_cdf(0.0) == Approx(std::log(0.5)).epsilon(1e-15));
  CHECK(std::exp(log_norm_cdf(-5.0)) == Approx(2.866515718791933e-07).epsilon(1e-12));
  // Reference values from scipy.special.log_ndtr / ndtr; continuous across the switch at -20.
  CHECK(log_norm_cdf(-30.0) == Approx(-454.32124395634327).epsilon(1e-12));
  CHECK(log_norm_cdf(-20.0 + 1e-9) == Approx(log_norm_cdf(-20.0 - 1e-9)).epsilon(1e-9));
}

TEST_CASE("analytic Gaussian: delta(eps) matches the closed form and inverts", "[privacy]") {
  // delta = Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu), direct evaluation at moderate values.
  double mu = 1.0, eps = 1.0;
  double direct = norm_cdf(mu / 2 - eps / mu) - std::exp(eps) * norm_cdf(-mu / 2 - eps / mu);
  CHECK(gaussian_delta(mu, eps) == Approx(direct).epsilon(1e-12));
  double e = gaussian_epsilon(mu, 1e-5);
  CHECK(gaussian_delta(mu, e) == Approx(1e-5).epsilon(1e-9));
  CHECK(gaussian_epsilon(1e-6, 1e-5) == 0.0);  // tiny mu: already (0, delta)-DP
}

TEST_CASE("q = 1: PRV within eps_error of the analytic Gaussian, RDP never below", "[privacy]") {
  auto prv = make_accountant("prv");
  auto rdp = make_accountant("rdp");
  auto gau = make_accountant("gaussian");
  for (int64_t T : {1, 10, 100}) {
    for (double sigma : {0.5, 1.0, 2.0, 5.0}) {
      std::vector<GaussianBlock> b = {{sigma, 1.0, T}};
      double exact = gau->epsilon(b, 1e-5).epsilon;
      CHECK(exact == Approx(gaussian_epsilon(std::sqrt(double(T)) / sigma, 1e-5)));
      EpsilonResult p = prv->epsilon(b, 1e-5);
      INFO("T=" << T << " sigma=" << sigma << " exact=" << exact << " prv=" << p.epsilon);
      REQUIRE(p.accountant == "prv");
      CHECK(*p.eps_upper >= exact);
      CHECK(*p.eps_lower <= exact);
      CHECK(std::fabs(*p.eps_estimate - exact) <= 0.01);
      CHECK(*p.eps_upper - exact <= 2 * 0.01 + 1e-9);
      CHECK(rdp->epsilon(b, 1e-5).epsilon >= exact);
    }
  }
}

TEST_CASE("Aug-PE PubMed noise gives eps ~ 1 / 2 / 4 under the analytic Gaussian", "[privacy]") {
  double n = 75316;
  double delta = 1.0 / (n * std::log(n));
  auto gau = make_accountant("gaussian");
  CHECK(gau->epsilon({{13.26, 1.0, 10}}, delta).epsilon == Approx(1.0).margin(0.02));
  CHECK(gau->epsilon({{7.01, 1.0, 10}}, delta).epsilon == Approx(2.0).margin(0.02));
  CHECK(gau->epsilon({{3.75, 1.0, 10}}, delta).epsilon == Approx(4.0).margin(0.04));
}

TEST_CASE("gaussian accountant refuses subsampling", "[privacy]") {
  auto gau = make_accountant("gaussian");
  CHECK_THROWS_AS(gau->epsilon({{1.0, 0.5, 10}}, 1e-5), ConfigError);
}

TEST_CASE("monotonicity: eps decreases in sigma, increases in q and T", "[privacy]") {
  for (std::string name : {"prv", "rdp"}) {
    auto acc = make_accountant(name);
    INFO(name);
    double prev = INFINITY;
    for (double s : {0.7, 0.9, 1.2, 2.0}) {
      double e = acc->epsilon({{s, 0.05, 100}}, 1e-5).epsilon;
      CHECK(e < prev);
      prev = e;
    }
    prev = 0;
    for (double q : {0.001, 0.01, 0.1, 0.5}) {
      double e = acc->epsilon({{1.0, q, 100}}, 1e-5).epsilon;
      CHECK(e > prev);
      prev = e;
    }
    prev = 0;
    for (int64_t T : {1, 10, 100, 1000}) {
      double e = acc->epsilon({{1.0, 0.05, T}}, 1e-5).epsilon;
      CHECK(e > prev);
      prev = e;
    }
  }
}

TEST_CASE("PRV: lower < estimate < upper, a bracket of 2 eps_error plus the delta-error terms",
          "[privacy]") {
  // By construction (docs/privacy.md) upper = eps_grid(delta - delta_bad) + eps_error + bias and
  // lower = eps_grid(delta + delta_bad) - eps_error - bias: the bracket is at least 2 eps_error
  // wide (three equal numbers fail), and the delta_error terms (delta / 1000) add little: here
  // 0.0001 to 0.0024 (measured 2026-11-25), bounded loosely by eps_error. The lower bound must
  // stay below RDP's independent upper bound on the true epsilon.
  auto prv = make_accountant("prv");
  auto rdp = make_accountant("rdp");
  for (double q : {0.01, 0.2, 0.7}) {
    CAPTURE(q);
    EpsilonResult r = prv->epsilon({{1.1, q, 50}}, 1e-5);
    REQUIRE(r.accountant == "prv");
    CHECK(*r.eps_lower < *r.eps_estimate);
    CHECK(*r.eps_estimate < *r.eps_upper);
    CHECK(*r.eps_upper - *r.eps_lower >= 2 * 0.01 - 1e-12);
    CHECK(*r.eps_upper - *r.eps_lower <= 3 * 0.01);
    CHECK(*r.eps_lower <= rdp->epsilon({{1.1, q, 50}}, 1e-5).epsilon);
    CHECK(r.epsilon == *r.eps_upper);
  }
}

TEST_CASE("PRV answers a repeated question from memory, and only an identical one", "[privacy]") {
  AccountantOptions o;
  const std::vector<GaussianBlock> b = {{0.93, 0.0123, 77}, {1.7, 1.0, 1}};
  const int64_t h0 = prv_memo_hits();
  const PrvEpsilon first = prv_epsilon(b, 1.3e-5, o);
  const PrvEpsilon again = prv_epsilon(b, 1.3e-5, o);
  CHECK(prv_memo_hits() == h0 + 1);
  CHECK(again.eps_upper == first.eps_upper);
  CHECK(again.eps_lower == first.eps_lower);
  CHECK(again.grid_size == first.grid_size);
  // Every input is part of the key: a change in any is a new computation with its own answer.
  auto changed = [&](std::vector<GaussianBlock> bb, double delta, AccountantOptions oo) {
    const int64_t h = prv_memo_hits();
    const PrvEpsilon r = prv_epsilon(bb, delta, oo);
    CHECK(prv_memo_hits() == h);
    CHECK(r.eps_upper != first.eps_upper);
  };
  auto with = [&](int i, auto edit) {
    std::vector<GaussianBlock> bb = b;
    edit(bb[static_cast<size_t>(i)]);
    return bb;
  };
  changed(with(0, [](GaussianBlock& x) { x.sigma = 0.931; }), 1.3e-5, o);
  changed(with(0, [](GaussianBlock& x) { x.q = 0.0124; }), 1.3e-5, o);
  changed(with(0, [](GaussianBlock& x) { x.steps = 78; }), 1.3e-5, o);
  changed(with(1, [](GaussianBlock& x) { x.sigma = 1.8; }), 1.3e-5, o);
  changed(b, 1.4e-5, o);
  AccountantOptions coarse = o;
  coarse.eps_error = 0.02;
  changed(b, 1.3e-5, coarse);
  AccountantOptions derr = o;
  derr.delta_error = 1e-9;
  changed(b, 1.3e-5, derr);
  // Block order is part of the question (the key does not sort): asked the other way round it
  // is computed again, and composition being commutative, the answer agrees to rounding.
  const int64_t h = prv_memo_hits();
  const PrvEpsilon swapped = prv_epsilon({b[1], b[0]}, 1.3e-5, o);
  CHECK(prv_memo_hits() == h);
  CHECK(swapped.eps_upper == Approx(first.eps_upper).epsilon(1e-9));
}

TEST_CASE("PRV is tighter than RDP for subsampled compositions", "[privacy]") {
  auto prv = make_accountant("prv");
  auto rdp = make_accountant("rdp");
  double e_prv = prv->epsilon({{1.0, 0.01, 1000}}, 1e-5).epsilon;
  double e_rdp = rdp->epsilon({{1.0, 0.01, 1000}}, 1e-5).epsilon;
  CHECK(e_prv < e_rdp);
}

TEST_CASE("heterogeneous composition lies between each block alone and their sum", "[privacy]") {
  for (std::string name : {"prv", "rdp"}) {
    auto acc = make_accountant(name);
    INFO(name);
    GaussianBlock a{1.0, 0.05, 200}, b{2.0, 0.2, 50};
    double ea = acc->epsilon({a}, 1e-5).epsilon, eb = acc->epsilon({b}, 1e-5).epsilon;
    double eab = acc->epsilon({a, b}, 1e-5).epsilon;
    CHECK(eab >= std::max(ea, eb));
    CHECK(eab <= ea + eb);
    // Splitting a block in two is the same mechanism.
    double whole = acc->epsilon({{1.0, 0.05, 200}}, 1e-5).epsilon;
    double split = acc->epsilon({{1.0, 0.05, 120}, {1.0, 0.05, 80}}, 1e-5).epsilon;
    CHECK(split == Approx(whole).margin(name == "prv" ? 0.02 : 1e-9));
  }
}

TEST_CASE("non-private releases make epsilon infinite", "[privacy]") {
  for (std::string name : {"prv", "rdp", "gaussian"}) {
    auto acc = make_accountant(name);
    CHECK(std::isinf(acc->epsilon({{0.0, 1.0, 1}}, 1e-5).epsilon));
  }
}

TEST_CASE("calibration round-trips and lands within tolerance", "[privacy]") {
  for (std::string name : {"prv", "rdp"}) {
    auto acc = make_accountant(name);
    INFO(name);
    double sigma = 1.3;
    double eps = acc->epsilon({{sigma, 0.1, 100}}, 1e-5).epsilon;
    SigmaCalibration c = calibrate_sigma(*acc, 0.1, 100, eps, 1e-5, 1e-3);
    CHECK(c.epsilon <= eps);
    CHECK(c.sigma == Approx(sigma).epsilon(2e-3));
    CHECK(acc->epsilon({{c.sigma_low, 0.1, 100}}, 1e-5).epsilon > eps);
  }
}

namespace {
// Wraps an accountant and counts its evaluations; `step` replaces it by a staircase in sigma
// (a curve the secant steps cannot use) to exercise the bisection fallback.
struct CountingAccountant : Accountant {
  const Accountant* inner = nullptr;
  bool step = false;
  mutable int calls = 0;
  std::string name() const override { return "counting"; }
  EpsilonResult epsilon(const std::vector<GaussianBlock>& b, double delta) const override {
    ++calls;
    if (!step) return inner->epsilon(b, delta);
    EpsilonResult r;
    r.epsilon = 10.0 / std::ceil(b.back().sigma * 8);  // piecewise constant, decreasing
    return r;
  }
};
}  // namespace

TEST_CASE("calibration: secant steps keep the bracket and need few accountant calls", "[privacy]") {
  auto prv = make_accountant("prv");
  auto rdp = make_accountant("rdp");
  CountingAccountant count;
  for (const Accountant* inner : {prv.get(), rdp.get()}) {
    count.inner = inner;
    for (double target : {0.5, 1.0, 4.0, 8.0}) {
      INFO(inner->name() << " target " << target);
      count.calls = 0;
      const SigmaCalibration c = calibrate_sigma(count, 0.01, 2000, target, 1e-5, 1e-3);
      // The guarantee: eps(sigma) <= target < eps(sigma_low), sigma / sigma_low - 1 <= 1e-3.
      CHECK(c.epsilon <= target);
      CHECK(c.epsilon == inner->epsilon({{c.sigma, 0.01, 2000}}, 1e-5).epsilon);
      CHECK(inner->epsilon({{c.sigma_low, 0.01, 2000}}, 1e-5).epsilon > target);
      CHECK(c.sigma / c.sigma_low - 1 <= 1e-3);
      // Bisection from the bracket takes 10 steps plus 2-4 to bracket; the secant steps ~4.
      CHECK(count.calls <= 9);
    }
  }
  // A staircase: eps = 10 / ceil(8 sigma) <= 2 exactly when sigma > 1 / 2 (ceil >= 5): the
  // fallback still closes the bracket on that edge, from above.
  count.step = true;
  count.calls = 0;
  const SigmaCalibration s = calibrate_sigma(count, 0.01, 2000, 2.0, 1e-5, 1e-3);
  CHECK(s.sigma >= 0.5);
  CHECK(s.sigma <= 0.5 * (1 + 1e-3));
  CHECK(std::ceil(s.sigma_low * 8) == 4);
  CHECK(count.calls <= 40);
}

TEST_CASE("two-stage budget (DP-SFT): split is basic composition, joint is tighter", "[privacy]") {
  auto acc = make_accountant("prv");
  const double q = 32.0 / 2000, eps = 4, delta = 1e-5;
  const int64_t T1 = 64, T2 = 120;
  TwoStageCalibration split = calibrate_two_stage(*acc, q, T1, q, T2, eps, delta, 0.5, false);
  // Each stage alone is the ordinary calibration at (p_i eps, p_i delta).
  CHECK(split.sigma1 == calibrate_sigma(*acc, q, T1, 2.0, 0.5e-5).sigma);
  CHECK(split.sigma2 == calibrate_sigma(*acc, q, T2, 2.0, 0.5e-5).sigma);
  CHECK(split.split_epsilon1 <= 2.0);
  CHECK(split.split_epsilon2 <= 2.0);
  CHECK(split.split_epsilon1 + split.split_epsilon2 <= eps);  // Theorem 3's arithmetic
  CHECK(split.scale == 1.0);
  // The composed certified epsilon of the split's noise is below the basic-composition total.
  CHECK(split.epsilon < eps);
  CHECK(split.epsilon ==
        acc->epsilon({{split.sigma1, q, T1}, {split.sigma2, q, T2}}, delta).epsilon);

  TwoStageCalibration joint = calibrate_two_stage(*acc, q, T1, q, T2, eps, delta, 0.5, true);
  CHECK(joint.epsilon <= eps);
  CHECK(joint.epsilon <= 0.5 * eps + 0.5 * eps);  // the split accounting's claimed total
  CHECK(joint.scale < 1.0);                       // less noise for the same guarantee
  CHECK(joint.sigma1 == Approx(joint.scale * split.sigma1));
  CHECK(joint.sigma2 == Approx(joint.scale * split.sigma2));
  CHECK(joint.epsilon ==
        acc->epsilon({{joint.sigma1, q, T1}, {joint.sigma2, q, T2}}, delta).epsilon);
  // The smallest such scale: 0.2 % less noise already exceeds the target.
  CHECK(
      acc->epsilon({{joint.sigma1 / 1.002, q, T1}, {joint.sigma2 / 1.002, q, T2}}, delta).epsilon >
      eps);

  // No private stage 1: stage 2 takes the whole budget.
  TwoStageCalibration only2 = calibrate_two_stage(*acc, q, 0, q, T2, eps, delta, 0.5, true);
  CHECK(only2.sigma1 == 0.0);
  CHECK(only2.sigma2 == calibrate_sigma(*acc, q, T2, eps, delta).sigma);
  CHECK_THROWS_AS(calibrate_two_stage(*acc, q, T1, q, T2, eps, delta, 1.0, true), ConfigError);
  CHECK_THROWS_AS(calibrate_two_stage(*acc, q, T1, q, T2, eps, delta, 0.0, false), ConfigError);
}

TEST_CASE("solving for steps and sampling rate", "[privacy]") {
  auto acc = make_accountant("rdp");
  int64_t T = max_steps(*acc, 1.0, 0.01, 2.0, 1e-5);
  CHECK(acc->epsilon({{1.0, 0.01, T}}, 1e-5).epsilon <= 2.0);
  CHECK(acc->epsilon({{1.0, 0.01, T + 1}}, 1e-5).epsilon > 2.0);
  double q = max_sampling_rate(*acc, 1.0, 1000, 2.0, 1e-5);
  CHECK(acc->epsilon({{1.0, q, 1000}}, 1e-5).epsilon <= 2.0);
  CHECK(acc->epsilon({{1.0, q * 1.001, 1000}}, 1e-5).epsilon > 2.0);
}

TEST_CASE("CTCL Appendix E: PubMed DP fine-tuning noise multipliers (PLD) within 1%", "[privacy]") {
  // batch 4096, 2000 steps, N = 75,316, delta = 1/(N ln N); sigma 3.01 / 5.49 / 10.3 for
  // eps 4 / 2 / 1, computed by the paper with dp_accounting's PLD accountant.
  double n = 75316, q = 4096 / n, delta = 1.0 / (n * std::log(n));
  auto prv = make_accountant("prv");
  struct Case {
    double eps, sigma;
  };
  for (Case c : {Case{4, 3.01}, Case{2, 5.49}, Case{1, 10.3}}) {
    SigmaCalibration cal = calibrate_sigma(*prv, q, 2000, c.eps, delta);
    INFO("eps " << c.eps << ": dpft PRV sigma " << cal.sigma << ", paper " << c.sigma);
    CHECK(std::fabs(cal.sigma / c.sigma - 1) <= 0.01);
  }
  // RDP is looser there: at sigma = 3.01 it certifies about 4.28.
  auto rdp = make_accountant("rdp");
  CHECK(rdp->epsilon({{3.01, q, 2000}}, delta).epsilon == Approx(4.28).margin(0.03));
}

TEST_CASE("calibration with fixed releases: CTCL's histogram composed with the steps",
          "[privacy]") {
  // q = 1 everywhere: T Gaussians of sigma and one of 10 compose exactly to one Gaussian with
  // mu^2 = T / sigma^2 + 1 / 100 (Dong, Roth, Su 2019); solve that by hand and compare.
  auto g = make_accountant("gaussian");
  const double target = 2.0, delta = 1e-5;
  const int64_t T = 50;
  const double mu = [&] {
    double lo = 1e-3, hi = 50;
    for (int i = 0; i < 200; ++i) {
      const double mid = 0.5 * (lo + hi);
      (gaussian_delta(mid, target) > delta ? hi : lo) = mid;
    }
    return lo;
  }();
  const double want = std::sqrt(static_cast<double>(T) / (mu * mu - 1.0 / 100));
  SigmaCalibration c = calibrate_sigma(*g, 1.0, T, target, delta, 1e-4, {{10.0, 1.0, 1}});
  CHECK(c.sigma == Approx(want).epsilon(2e-4));
  CHECK(c.sigma >= want * (1 - 1e-9));  // never less noise than the exact answer
  CHECK(c.epsilon <= target);
  CHECK(c.sigma > calibrate_sigma(*g, 1.0, T, target, delta, 1e-4).sigma);

  // Appendix E, "Ours" on PubMed (N 75,316, batch 4096, 2000 steps, delta 1/(N ln N)).
  const double n = 75316, q = 4096 / n, d = 1.0 / (n * std::log(n));
  auto prv = make_accountant("prv");
  for (auto [eps, paper] : {std::pair{4.0, 3.03}, std::pair{2.0, 5.63}}) {
    SigmaCalibration cal = calibrate_sigma(*prv, q, 2000, eps, d, 1e-3, {{10.0, 1.0, 1}});
    INFO("eps " << eps << ": dpft " << cal.sigma << ", paper " << paper);
    CHECK(std::fabs(cal.sigma / paper - 1) <= 0.01);
    CHECK(prv->epsilon({{10.0, 1.0, 1}, {cal.sigma, q, 2000}}, d).epsilon <= eps);
  }
  // The fixed releases alone at or over the target, or without noise: refused.
  CHECK_THROWS_AS(calibrate_sigma(*g, 1.0, T, 0.3, delta, 1e-3, {{10.0, 1.0, 1}}), ConfigError);
  CHECK_THROWS_AS(calibrate_sigma(*g, 1.0, T, 2.0, delta, 1e-3, {{0.0, 1.0, 1}}), ConfigError);
}

TEST_CASE("CTCL Appendix E: all noise multipliers, vanilla and with the histogram, within 1%",
          "[privacy][slow]") {
  // Table 9: N per data set (Table 7), batch 4096, 2000 steps, delta 1/(N ln N), histogram
  // sigma 10; dp_accounting's PLD. eps_error 0.001 (the default 0.01 is 1 % of eps = 1 and
  // lifts sigma by about that). The one cell off by more: Yelp, eps 1, with the histogram
  // (paper 0.94, dpft 0.923, -1.8 %; its vanilla cell agrees to 0.6 %): allowed 2 %.
  struct Row {
    double n;
    double vanilla[3], ours[3];  // eps 4, 2, 1
  };
  const Row rows[] = {{75316, {3.01, 5.49, 10.3}, {3.03, 5.63, 11.33}},
                      {180000, {1.47, 2.5, 4.58}, {1.48, 2.57, 5.08}},
                      {17940, {11.38, 21.01, 39.41}, {11.45, 21.47, 42.7}},
                      {1939290, {0.63, 0.77, 0.91}, {0.63, 0.77, 0.94}},
                      {8396, {23.3, 42.87, 80.05}, {23.44, 43.72, 86.05}}};
  AccountantOptions ao;
  ao.eps_error = 0.001;
  auto prv = make_accountant("prv", ao);
  const double eps[3] = {4, 2, 1};
  for (const Row& r : rows)
    for (int i = 0; i < 3; ++i) {
      const double q = 4096 / r.n, d = 1.0 / (r.n * std::log(r.n));
      const double v = calibrate_sigma(*prv, q, 2000, eps[i], d).sigma;
      const double o = calibrate_sigma(*prv, q, 2000, eps[i], d, 1e-3, {{10.0, 1.0, 1}}).sigma;
      INFO("N " << r.n << " eps " << eps[i] << ": vanilla " << v << " (paper " << r.vanilla[i]
                << "), with histogram " << o << " (paper " << r.ours[i] << ")");
      CHECK(std::fabs(v / r.vanilla[i] - 1) <= 0.01);
      CHECK(std::fabs(o / r.ours[i] - 1) <= (r.n == 1939290 && i == 2 ? 0.02 : 0.01));
    }
}

TEST_CASE("RDP matches the independent numerical-integration reference to 1e-6", "[privacy]") {
  fs::path ref = fs::path(DPFT_SOURCE_DIR) / "tests" / "reference" / "rdp_reference.json";
  REQUIRE(fs::exists(ref));
  auto j = nlohmann::json::parse(read_file(ref));
  int checked = 0;
  for (const auto& e : j["orders_check"]) {
    double got = rdp_subsampled_gaussian(e["q"], e["sigma"], e["alpha"]);
    double want = e["rdp"];
    INFO("sigma " << e["sigma"] << " q " << e["q"] << " alpha " << e["alpha"]);
    CHECK(got == Approx(want).epsilon(1e-6));
    ++checked;
  }
  for (const auto& e : j["eps_check"]) {
    auto r = rdp_epsilon({{e["sigma"], e["q"], e["steps"]}}, e["delta"]);
    INFO("sigma " << e["sigma"] << " q " << e["q"] << " T " << e["steps"] << " delta " << e["delta"]);
    CHECK(r.epsilon == Approx(e["eps"].get<double>()).epsilon(1e-6));
    CHECK(r.order == e["best_order"].get<double>());
    ++checked;
  }
  CHECK(checked > 300);
}

TEST_CASE("PRV guard rails: tiny delta works; huge epsilon falls back to RDP with a warning", "[privacy]") {
  auto prv = make_accountant("prv");
  EpsilonResult tiny = prv->epsilon({{1.0, 0.01, 1000}}, 1e-10);
  CHECK(tiny.accountant == "prv");
  CHECK(std::isfinite(tiny.epsilon));
  CHECK(tiny.epsilon > prv->epsilon({{1.0, 0.01, 1000}}, 1e-5).epsilon);
  EpsilonResult huge = prv->epsilon({{0.05, 1.0, 1000}}, 1e-5);
  CHECK(huge.accountant == "rdp");
  CHECK(std::isfinite(huge.epsilon));
  CHECK(huge.epsilon > 700);
  REQUIRE_FALSE(huge.warnings.empty());
}

TEST_CASE("bad accountant inputs are config errors", "[privacy]") {
  auto acc = make_accountant("rdp");
  CHECK_THROWS_AS(acc->epsilon({{1.0, 0.0, 10}}, 1e-5), ConfigError);
  CHECK_THROWS_AS(acc->epsilon({{1.0, 1.5, 10}}, 1e-5), ConfigError);
  CHECK_THROWS_AS(acc->epsilon({{-1.0, 0.5, 10}}, 1e-5), ConfigError);
  CHECK_THROWS_AS(acc->epsilon({{1.0, 0.5, 0}}, 1e-5), ConfigError);
  CHECK_THROWS_AS(make_accountant("pld"), ConfigError);
}
