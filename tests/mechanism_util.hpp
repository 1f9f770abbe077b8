// Tests' release mechanisms: a run's Mechanisms (core/privacy/mechanism.hpp) with seeded noise,
// and the reference draws of one of its streams, to check what a mechanism added.
#pragma once
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "core/privacy/mechanism.hpp"

namespace dpft::test {

// Mechanisms over seeded randomness (privacy.noise_seed `noise_seed`) for the planned releases
// `plan`; a release of count 0 in `plan` gets an effectively unbounded count.
// `inherited`: releases of artefacts the run builds on (each also in `plan`).
inline std::unique_ptr<privacy::Mechanisms> test_mechanisms(
    uint64_t noise_seed, std::vector<privacy::Release> plan, privacy::LedgerOptions lo = {},
    std::vector<privacy::Release> inherited = {}) {
  for (auto& r : plan)
    if (r.count == 0) r.count = int64_t{1} << 40;
  return std::make_unique<privacy::Mechanisms>(lo, privacy::PrivateRandomness::seeded(noise_seed),
                                               std::move(plan), std::move(inherited));
}

// A fresh source of the draws stream `stream` of those Mechanisms makes, from its start.
inline std::unique_ptr<privacy::NoiseSource> reference_stream(uint64_t noise_seed,
                                                              std::string_view stream) {
  return privacy::PrivateRandomness::seeded(noise_seed).noise(stream);
}

}  // namespace dpft::test

namespace dpft::test {

// A GaussianSum at noise multiplier `sigma` on stream "noise" of seed `seed`, releases without
// bound, kept alive with its Mechanisms; converts to the GaussianSum& the projections take.
struct TestSum {
  std::unique_ptr<privacy::Mechanisms> mechanisms;
  privacy::GaussianSum* sum = nullptr;
  operator privacy::GaussianSum&() { return *sum; }  // NOLINT: implicit by design
};

inline TestSum test_sum(uint64_t seed, double sigma, double q = 1.0,
                        privacy::NoiseDraw draw = privacy::NoiseDraw::kHost) {
  const privacy::Release r{"train", sigma, q, 0};
  TestSum t{test_mechanisms(seed, {r}), nullptr};
  t.sum = &t.mechanisms->gaussian_sum("noise", r, draw);
  return t;
}

}  // namespace dpft::test
