// Poisson sampler: batch-size moments, per-index inclusion rates, pairwise independence, the
// rate of empty batches, the documented stream, determinism and exact resumption.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "core/privacy/sampler.hpp"
#include "core/util/error.hpp"

using namespace dpft;
using namespace dpft::privacy;
using Catch::Matchers::Contains;

namespace {
// Draws K batches from s, checks each is ascending and inside [0, n), adds each index's inclusions
// to count (size n) and returns the summed batch size.
double draw_and_count(PoissonSampler& s, int64_t n, int64_t K, std::vector<int64_t>& count) {
  double sum = 0;
  for (int64_t k = 0; k < K; ++k) {
    auto b = s.next();
    for (size_t i = 0; i < b.size(); ++i) {
      REQUIRE(b[i] >= 0);
      REQUIRE(b[i] < n);
      if (i) REQUIRE(b[i - 1] < b[i]);
      ++count[b[i]];
    }
    sum += static_cast<double>(b.size());
  }
  return sum;
}
}  // namespace

TEST_CASE("Poisson sampler: batches are ascending, in range, and of mean size q n", "[sampler]") {
  const int64_t n = 1000, K = 2000;
  const double q = 0.05;
  PoissonSampler s(n, q, 42);
  std::vector<int64_t> count(n, 0);
  double sum = draw_and_count(s, n, K, count);
  CHECK(s.draws() == K);
  // Mean batch size: Binomial(n, q) per draw, K draws.
  double mean = sum / K, sd_mean = std::sqrt(n * q * (1 - q) / K);
  CHECK(std::fabs(mean - q * n) <= 4 * sd_mean);
  // Per-index inclusion: each count ~ Binomial(K, q); every index within 5 sigma, and the
  // chi-square statistic (~ chi2 with n degrees of freedom) within 4 of its sds.
  double var = K * q * (1 - q), chi2 = 0;
  for (int64_t i = 0; i < n; ++i) {
    double d = count[i] - K * q;
    CHECK(std::fabs(d) <= 5 * std::sqrt(var));
    chi2 += d * d / var;
  }
  CHECK(std::fabs(chi2 - n) <= 4 * std::sqrt(2.0 * n));
}

TEST_CASE("Poisson sampler: two indices are included independently", "[sampler]") {
  const int64_t n = 10, K = 20000;
  const double q = 0.3;
  PoissonSampler s(n, q, 7);
  // Pairs: neighbours (0, 1) and far apart (2, 9).
  int64_t both01 = 0, both29 = 0, only0 = 0;
  for (int64_t k = 0; k < K; ++k) {
    std::vector<bool> in(n, false);
    for (int64_t i : s.next()) in[i] = true;
    both01 += in[0] && in[1];
    both29 += in[2] && in[9];
    only0 += in[0] && !in[1];
  }
  auto within = [&](int64_t c, double p) {
    return std::fabs(c / double(K) - p) <= 4 * std::sqrt(p * (1 - p) / K);
  };
  CHECK(within(both01, q * q));
  CHECK(within(both29, q * q));
  CHECK(within(only0, q * (1 - q)));
}

TEST_CASE("Poisson sampler: empty batches occur with probability (1 - q)^n", "[sampler]") {
  const int64_t n = 20, K = 20000;
  const double q = 0.05;
  PoissonSampler s(n, q, 11);
  int64_t empty = 0;
  for (int64_t k = 0; k < K; ++k) empty += s.next().empty();
  double p = std::pow(1 - q, n);  // 0.3585
  CHECK(std::fabs(empty / double(K) - p) <= 4 * std::sqrt(p * (1 - p) / K));
}

TEST_CASE("Poisson sampler follows its documented stream, and q = 1 takes everything",
          "[sampler]") {
  // sampler.hpp: one mt19937_64 output per index, u = (x >> 11) 2^-53, include iff u < q.
  std::mt19937_64 ref(123);
  PoissonSampler s(500, 0.1, 123);
  for (int k = 0; k < 3; ++k) {
    std::vector<int64_t> want;
    for (int64_t i = 0; i < 500; ++i)
      if (static_cast<double>(ref() >> 11) * 0x1.0p-53 < 0.1) want.push_back(i);
    CHECK(s.next() == want);
  }
  PoissonSampler all(7, 1.0, 5);
  CHECK(all.next() == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6});
}

TEST_CASE("Poisson sampler: deterministic per seed, state round trip continues exactly",
          "[sampler]") {
  PoissonSampler a(300, 0.2, 9), b(300, 0.2, 9), c(300, 0.2, 10);
  auto a1 = a.next();
  CHECK(a1 == b.next());
  CHECK(a1 != c.next());
  for (int k = 0; k < 3; ++k) a.next();
  std::string st = a.state();
  std::vector<std::vector<int64_t>> want;
  for (int k = 0; k < 5; ++k) want.push_back(a.next());
  PoissonSampler r(300, 0.2, 999);
  r.set_state(st);
  CHECK(r.draws() == 4);
  for (int k = 0; k < 5; ++k) CHECK(r.next() == want[k]);
  CHECK(r.state() == a.state());

  PoissonSampler other_n(301, 0.2, 9), other_q(300, 0.25, 9);
  CHECK_THROWS_WITH(other_n.set_state(st), Contains("N = 300"));
  CHECK_THROWS_AS(other_q.set_state(st), InputError);
  CHECK_THROWS_AS(r.set_state("poisson-v1 300 0x1.999999999999ap-3 4 1 2 3"), InputError);
  CHECK_THROWS_AS(r.set_state("garbage"), InputError);
  CHECK_THROWS_AS(r.set_state(st + " 17"), InputError);
  // A failed restore changes nothing.
  PoissonSampler fresh(300, 0.2, 9);
  fresh.next();
  CHECK_THROWS(fresh.set_state("garbage"));
  CHECK(fresh.draws() == 1);
}

TEST_CASE("Poisson sampler rejects q <= 0, q > 1 and empty data", "[sampler]") {
  CHECK_THROWS_AS(PoissonSampler(10, 0.0, 1), ConfigError);
  CHECK_THROWS_WITH(PoissonSampler(10, 1.5, 1), Contains("privacy.sampling_rate = 1.5"));
  CHECK_THROWS_AS(PoissonSampler(10, std::nan(""), 1), ConfigError);
  CHECK_THROWS_AS(PoissonSampler(0, 0.5, 1), ConfigError);
}

TEST_CASE("secure Poisson sampler: OS randomness, same inclusion law, mode-checked state",
          "[sampler]") {
  // n spans two getrandom blocks (4096 words each), so the block boundary is exercised.
  const int64_t n = 5000, K = 400;
  const double q = 0.05;
  PoissonSampler s(n, q, 42, true);
  CHECK(s.secure());
  std::vector<int64_t> count(n, 0);
  double sum = draw_and_count(s, n, K, count);
  CHECK(std::fabs(sum / K - q * n) <= 4 * std::sqrt(n * q * (1 - q) / K));
  double var = K * q * (1 - q), chi2 = 0, tail = 0;
  for (int64_t i = 0; i < n; ++i) {
    chi2 += (count[i] - K * q) * (count[i] - K * q) / var;
    if (i >= 4096) tail += count[i];
  }
  CHECK(std::fabs(chi2 - n) <= 4 * std::sqrt(2.0 * n));
  // Indices of the second block are included at rate q as well.
  const double tn = n - 4096;
  CHECK(std::fabs(tail / (K * tn) - q) <= 4 * std::sqrt(q * (1 - q) / (K * tn)));

  // The seed predicts nothing: two secure samplers with one seed differ (P(equal) = 2^-300),
  // and neither follows the seeded stream.
  PoissonSampler a(300, 0.5, 9, true), b(300, 0.5, 9, true), seeded(300, 0.5, 9);
  auto a1 = a.next();
  CHECK(a1 != b.next());
  CHECK(a1 != seeded.next());

  // State: n, q and the draw count only; the other mode's state is refused, naming the setting.
  std::string st = a.state();
  CHECK_THAT(st, Catch::Matchers::StartsWith("poisson-secure-v1 300 "));
  PoissonSampler r(300, 0.5, 1, true);
  r.set_state(st);
  CHECK(r.draws() == 1);
  CHECK(r.state() == st);
  CHECK_THROWS_WITH(r.set_state(seeded.state()), Contains("written with seeded"));
  CHECK_THROWS_WITH(seeded.set_state(st), Contains("secure_noise: true"));
  CHECK_THROWS_AS(r.set_state(st + " 17"), InputError);
  PoissonSampler other_q(300, 0.25, 1, true);
  CHECK_THROWS_AS(other_q.set_state(st), InputError);
}
