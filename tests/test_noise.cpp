// Gaussian noise source: moments (mean, variance, kurtosis, tail mass, neighbour correlation)
// of both modes against N(0, std^2), seeded determinism and independence from torch's global
// RNG, state round trips, secure mode never repeating, and the throughput benchmark
// ([noise-bench], hidden and [slow]: dpft_tests "[noise-bench]").
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <iostream>

#include "core/privacy/noise.hpp"
#include "core/privacy/randomness.hpp"
#include "core/util/error.hpp"

using namespace dpft;
using namespace dpft::privacy;
using Catch::Matchers::Contains;

namespace {

// Sample moments of x (any shape) against N(0, s^2), each within 4.5 of its standard errors:
// mean s/sqrt(N), variance s^2 sqrt(2/N), kurtosis sqrt(24/N), P(|x| > 3s) binomial, and the
// correlation of elements 2j and 2j+1 (Box-Muller siblings) 1/sqrt(N/2).
void check_gaussian(const torch::Tensor& x, double s) {
  torch::Tensor d = x.reshape({-1}).to(torch::kFloat64);
  const double n = static_cast<double>(d.numel());
  double mean = d.mean().item<double>();
  torch::Tensor c = d - mean;
  double m2 = c.pow(2).mean().item<double>();
  double m4 = c.pow(4).mean().item<double>();
  double kurt = m4 / (m2 * m2);
  double tail = (d.abs() > 3 * s).to(torch::kFloat64).mean().item<double>();
  const double p3 = 0.0026997960632601866;  // 2 (1 - Phi(3))
  int64_t half = d.numel() / 2;
  torch::Tensor ev = d.slice(0, 0, 2 * half, 2), od = d.slice(0, 1, 2 * half, 2);
  double corr = ((ev * od).mean() / (s * s)).item<double>();
  INFO("mean " << mean << " var " << m2 << " kurtosis " << kurt << " tail " << tail << " corr "
               << corr);
  CHECK(std::fabs(mean) <= 4.5 * s / std::sqrt(n));
  CHECK(std::fabs(m2 / (s * s) - 1) <= 4.5 * std::sqrt(2 / n));
  CHECK(std::fabs(kurt - 3) <= 4.5 * std::sqrt(24 / n));
  CHECK(std::fabs(tail - p3) <= 4.5 * std::sqrt(p3 * (1 - p3) / n));
  CHECK(std::fabs(corr) <= 4.5 / std::sqrt(static_cast<double>(half)));
}

}  // namespace

TEST_CASE("seeded noise has the moments of N(0, std^2)", "[noise]") {
  NoiseSource src(17, false);
  CHECK_FALSE(src.secure());
  torch::Tensor x = src.normal({1024, 2048}, 2.5);
  CHECK(x.dtype() == torch::kFloat32);
  CHECK(x.sizes() == torch::IntArrayRef({1024, 2048}));
  check_gaussian(x, 2.5);
  check_gaussian(src.normal({200001}, 0.5, torch::kFloat64), 0.5);
}

TEST_CASE("secure noise has the moments of N(0, std^2)", "[noise]") {
  NoiseSource src(17, true);
  CHECK(src.secure());
  torch::Tensor x = src.normal({1 << 21}, 3.0);
  CHECK(x.dtype() == torch::kFloat32);
  check_gaussian(x, 3.0);
  torch::Tensor y = src.normal({333, 601}, 0.1, torch::kFloat64);  // odd count
  CHECK(y.dtype() == torch::kFloat64);
  check_gaussian(y, 0.1);
  torch::Tensor h = src.normal({4, 5, 3}, 1.0, torch::kBFloat16);
  CHECK(h.dtype() == torch::kBFloat16);
  CHECK(h.sizes() == torch::IntArrayRef({4, 5, 3}));
}

TEST_CASE("seeded noise is deterministic per seed and leaves the global RNG alone", "[noise]") {
  NoiseSource a(5, false), b(5, false), c(6, false), hi(5 + (uint64_t{1} << 32), false);
  torch::Tensor x = a.normal({1000}, 1.0);
  CHECK(torch::equal(x, b.normal({1000}, 1.0)));
  CHECK_FALSE(torch::equal(x, c.normal({1000}, 1.0)));
  CHECK_FALSE(torch::equal(x, hi.normal({1000}, 1.0)));
  torch::manual_seed(123);
  torch::Tensor g1 = torch::randn({8});
  torch::manual_seed(123);
  a.normal({5000}, 1.0);
  torch::Tensor g2 = torch::randn({8});
  CHECK(torch::equal(g1, g2));
}

TEST_CASE("seeded noise state round trip continues exactly", "[noise]") {
  NoiseSource a(99, false);
  a.normal({7}, 1.0);  // a small draw: torch caches a spare normal in the generator state
  a.normal({7}, 1.0, torch::kFloat64);
  std::string st = a.state();
  CHECK(st.find_first_not_of("0123456789abcdef") == std::string::npos);
  torch::Tensor x1 = a.normal({7}, 1.0), x2 = a.normal({1000}, 2.0),
                x3 = a.normal({3}, 1.0, torch::kFloat64);
  NoiseSource b(1, false);
  b.set_state(st);
  CHECK(torch::equal(x1, b.normal({7}, 1.0)));
  CHECK(torch::equal(x2, b.normal({1000}, 2.0)));
  CHECK(torch::equal(x3, b.normal({3}, 1.0, torch::kFloat64)));
  CHECK(b.state() == a.state());

  CHECK_THROWS_WITH(b.set_state(""), Contains("secure_noise"));
  CHECK_THROWS_AS(b.set_state(st.substr(2)), InputError);
  std::string bad = st;
  bad[10] = 'z';
  CHECK_THROWS_AS(b.set_state(bad), InputError);
  CHECK(b.state() == a.state());  // failed restores change nothing
}

TEST_CASE("secure noise never repeats and has no state", "[noise]") {
  NoiseSource a(5, true), b(5, true);
  torch::Tensor x = a.normal({4096}, 1.0), y = b.normal({4096}, 1.0), z = a.normal({4096}, 1.0);
  // Independent continuous draws: float32 coincidences are rare (well under 1%).
  CHECK((x == y).sum().item<int64_t>() < 40);
  CHECK((x == z).sum().item<int64_t>() < 40);
  CHECK(a.state().empty());
  CHECK_NOTHROW(a.set_state(""));
  CHECK_THROWS_WITH(a.set_state("00ff"), Contains("noise mode is os"));
  uint64_t r1 = 0, r2 = 0;
  NoiseSource::os_random(&r1, 8);
  NoiseSource::os_random(&r2, 8);
  CHECK(r1 != r2);
}

TEST_CASE("noise: std 0 gives zeros, bad std or dtype is refused", "[noise]") {
  for (bool secure : {false, true}) {
    NoiseSource s(1, secure);
    CHECK(torch::equal(s.normal({3, 2}, 0.0), torch::zeros({3, 2})));
    CHECK(s.normal({0}, 1.0).numel() == 0);
    CHECK_THROWS_AS(s.normal({3}, -1.0), RuntimeError);
    CHECK_THROWS_AS(s.normal({3}, std::nan("")), RuntimeError);
    CHECK_THROWS_AS(s.normal({3}, 1.0, torch::kInt32), RuntimeError);
  }
}

TEST_CASE("noise throughput", "[.][slow][noise-bench]") {
  const int64_t n = 1 << 24;
  for (NoiseMode mode : {NoiseMode::kSeeded, NoiseMode::kKeyed, NoiseMode::kOs}) {
    auto s = PrivateRandomness::for_benchmark(mode).noise("noise");
    s->normal({1024}, 1.0);  // warm up
    auto t0 = std::chrono::steady_clock::now();
    int reps = mode == NoiseMode::kSeeded ? 4 : 1;
    for (int r = 0; r < reps; ++r) s->normal({n}, 1.0);
    double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cout << name_of(mode) << " noise: " << reps * n / sec / 1e6 << " M float32/s (" << n
              << " floats x " << reps << ", " << sec << " s, " << at::get_num_threads()
              << " torch threads)\n";
  }
}

TEST_CASE("noise draw modes: GPU tensors only are drawn on the device; CPU tensors by normal()",
          "[noise]") {
  // The device path itself runs in tests/test_cuda.cpp (a GPU is needed).
  const torch::Device cpu(torch::kCPU), gpu(torch::kCUDA, 0);
  NoiseSource d(17, false, NoiseDraw::kDevice), h(17, false, NoiseDraw::kHost),
      a(17, false, NoiseDraw::kAuto), s(17, true, NoiseDraw::kAuto);
  CHECK(d.draws_on(gpu));
  CHECK(a.draws_on(gpu));  // auto: the GPU for seeded noise
  CHECK_FALSE(h.draws_on(gpu));
  CHECK_FALSE(s.draws_on(gpu));  // secure noise: always the host's CSPRNG
  // CPU tensors: never (a CPU generator keeps 32 bits of a seed: per-tensor keys would repeat).
  for (NoiseSource* n : {&d, &h, &a, &s}) CHECK_FALSE(n->draws_on(cpu));
  CHECK_THROWS_AS(NoiseSource(1, true, NoiseDraw::kDevice), ConfigError);
  for (NoiseDraw mode : {NoiseDraw::kAuto, NoiseDraw::kHost, NoiseDraw::kDevice}) {
    CAPTURE(name_of(mode));
    NoiseSource x(21, false, mode), ref(21, false);
    const torch::Tensor z = x.normal_on({300, 7}, 1.5, cpu);
    CHECK(z.dtype() == torch::kFloat32);
    CHECK(torch::equal(z, ref.normal({300, 7}, 1.5)));
    CHECK(x.state() == ref.state());
  }
}
