// CTCL (paper 004) pieces: the DP topic histogram (noise, rounding, clamping, one ledger entry of
// sensitivity 1), largest-remainder apportionment, the post-filter on hand-made cases, the
// generator's condition.
#include <catch2/catch.hpp>

#include <cmath>
#include <numeric>
#include <random>

#include "core/privacy/accountant.hpp"
#include "core/privacy/histogram.hpp"
#include "core/util/error.hpp"
#include "methods/ctcl/synthesis.hpp"

using namespace dpft;

TEST_CASE("DP histogram: true counts + N(0, sigma^2), rounded, clamped, one ledger entry",
          "[ctcl][privacy]") {
  privacy::LedgerOptions lo;
  lo.accountant = "gaussian";
  lo.delta = 1e-6;
  privacy::PrivacyLedger ledger(lo);
  privacy::NoiseSource noise(11, false);
  const int64_t K = 20000;
  std::vector<int64_t> bin;  // bins 0..K/2-1 hold 1000 records each, the rest none
  for (int64_t k = 0; k < K / 2; ++k)
    for (int i = 0; i < 1000; ++i) bin.push_back(k);
  const auto r = privacy::release_histogram(bin, K, 10.0, noise, ledger, "topic_histogram");
  REQUIRE(r.counts.size() == static_cast<size_t>(K));
  // The same draws, made again from the same seed: released = max(0, round(true + z)).
  privacy::NoiseSource again(11, false);
  const torch::Tensor z = again.normal({K}, 10.0, torch::kFloat64);
  for (int64_t k = 0; k < K; k += 997) {
    const double t = k < K / 2 ? 1000 : 0;
    CHECK(r.counts[static_cast<size_t>(k)] ==
          std::max<int64_t>(0, std::llround(t + z[k].item<double>())));
  }
  // Noise std 10 on the full bins; empty bins clamped: P(round(z) <= 0) = Phi(0.05) ~ 0.52.
  double s = 0, s2 = 0;
  int64_t zeros = 0, negative = 0;
  for (int64_t k = 0; k < K; ++k) {
    const double c = static_cast<double>(r.counts[static_cast<size_t>(k)]);
    if (k < K / 2) {
      s += c - 1000;
      s2 += (c - 1000) * (c - 1000);
    } else {
      zeros += c == 0;
    }
    negative += c < 0;
  }
  const double n = K / 2.0, mean = s / n, sd = std::sqrt(s2 / n - mean * mean);
  CHECK(std::fabs(mean) < 0.5);                                  // 5 standard errors
  CHECK(sd == Approx(std::sqrt(100 + 1.0 / 12)).epsilon(0.03));  // noise + rounding
  CHECK(negative == 0);
  CHECK(static_cast<double>(zeros) / n == Approx(0.5199).margin(0.03));
  // One Gaussian release of sensitivity 1: the ledger's epsilon is the analytic Gaussian's at
  // mu = 1 / 10.
  const auto spent = ledger.spent();
  CHECK(spent.epsilon == Approx(privacy::gaussian_epsilon(0.1, 1e-6)).epsilon(1e-6));
  const auto j = ledger.to_json();
  REQUIRE(j["releases"].size() == 1);
  CHECK(j["releases"][0]["label"] == "topic_histogram");
  CHECK(j["releases"][0]["noise_multiplier"] == 10.0);
  CHECK(j["releases"][0]["sampling_rate"] == 1.0);
  CHECK(j["releases"][0]["count"] == 1);
  // Bad input, and nothing recorded for it.
  CHECK_THROWS_AS(privacy::release_histogram({0, 3}, 3, 10.0, noise, ledger), RuntimeError);
  CHECK_THROWS_AS(privacy::release_histogram({0}, 3, 0.0, noise, ledger), ConfigError);
  CHECK_THROWS_AS(privacy::release_histogram({0}, 0, 1.0, noise, ledger), ConfigError);
  CHECK(ledger.to_json()["releases"].size() == 1);
}

TEST_CASE("largest-remainder apportionment sums to the total and follows the histogram", "[ctcl]") {
  using V = std::vector<int64_t>;
  // 7 seats for 5:3:2: shares 3.5, 2.1, 1.4 -> floors 3, 2, 1; the last seat to remainder .5.
  CHECK(ctcl::apportion({5, 3, 2}, 7) == V{4, 2, 1});
  CHECK(ctcl::apportion({1, 1, 1}, 2) == V{1, 1, 0});  // ties: lower index
  CHECK(ctcl::apportion({1, 2, 1}, 1) == V{0, 1, 0});  // equal remainders: larger weight
  CHECK(ctcl::apportion({0, 4, 0}, 5) == V{0, 5, 0});
  CHECK(ctcl::apportion({3, 1}, 0) == V{0, 0});
  bool uniform = false;
  CHECK(ctcl::apportion({0, 0, 0, 0}, 6, &uniform) == V{2, 2, 1, 1});
  CHECK(uniform);
  ctcl::apportion({1, 0}, 6, &uniform);
  CHECK_FALSE(uniform);
  CHECK_THROWS_AS(ctcl::apportion({1, -1}, 3), ConfigError);
  CHECK_THROWS_AS(ctcl::apportion({}, 3), ConfigError);
  CHECK_THROWS_AS(ctcl::apportion({1}, -1), ConfigError);
  std::mt19937_64 rng(5);
  for (int t = 0; t < 200; ++t) {
    V w(1 + rng() % 50);
    for (auto& x : w) x = static_cast<int64_t>(rng() % 1000) * (rng() % 4 != 0);
    if (std::accumulate(w.begin(), w.end(), int64_t{0}) == 0) w[0] = 1;
    const int64_t total = static_cast<int64_t>(rng() % 100000);
    const V seats = ctcl::apportion(w, total);
    const double W = static_cast<double>(std::accumulate(w.begin(), w.end(), int64_t{0}));
    CHECK(std::accumulate(seats.begin(), seats.end(), int64_t{0}) == total);
    for (size_t k = 0; k < w.size(); ++k) {
      const double share = static_cast<double>(total) * static_cast<double>(w[k]) / W;
      CHECK(std::fabs(static_cast<double>(seats[k]) - share) < 1.0);
      if (w[k] == 0) CHECK(seats[k] == 0);
    }
  }
}

TEST_CASE("post-filter: overlong words, no alphabetic word, repetition beyond 20", "[ctcl]") {
  CHECK(ctcl::filter_reason("The patients were treated with aspirin.") == "");
  auto rep = [](const std::string& w, int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += w + " ";
    return s;
  };
  CHECK(ctcl::filter_reason(rep("cell", 20)) == "");
  CHECK(ctcl::filter_reason(rep("cell", 21)).find("'cell' repeated 21 times") == 0);
  CHECK(ctcl::filter_reason(rep("Cell cell CELL", 7)).find("'cell' repeated 21") == 0);  // case
  CHECK(ctcl::filter_reason(rep("cell,", 21)).find("'cell' repeated 21") == 0);  // punctuation off
  CHECK(ctcl::filter_reason(rep("the a , .", 30) + " study") == "");             // exempt words
  CHECK(ctcl::filter_reason(rep("the", 5)) == "no word besides the, a, commas and full stops");
  CHECK(ctcl::filter_reason("123 456 !! 7.5%") == "no alphabetic word");
  CHECK(ctcl::filter_reason("") == "no alphabetic word");
  CHECK(ctcl::filter_reason("a " + std::string(25, 'x')) == "");
  CHECK(ctcl::filter_reason("a " + std::string(26, 'x')) == "a word longer than 25 characters");
  CHECK(ctcl::filter_reason("(" + std::string(25, 'x') + ").") == "");  // brackets split off
  CHECK(ctcl::filter_reason("well-known result") == "");
}

TEST_CASE("the generator's condition", "[ctcl]") {
  CHECK(ctcl::condition("medical paper abstract", "cell, tumor") ==
        "Document Type: medical paper abstract\nKeywords: cell, tumor");
  CHECK(ctcl::condition("", "cell") == "Keywords: cell");
}
