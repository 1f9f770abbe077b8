// The DP-SGD parameters of a run, resolved once from the spec and the private data set's size:
// Poisson rate q, noise multiplier sigma (given, or calibrated by the run's accountant so that
// T = train.steps compositions of the subsampled Gaussian meet (epsilon, delta)), clipping bound
// C and mode, and the noise divisor. Abadi et al. 2016, Alg. 1: g~ = (sum_b clip_C(g_b) + N(0,
// sigma^2 C^2 I)) / L, with L = q N ("expected", the lot size the analysis assumes) or the
// realised batch size ("realized", as the PE-SGD reference code does).
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "core/config/spec.hpp"
#include "core/privacy/ledger.hpp"

namespace dpft::train {

struct DpSettings {
  double sigma = 0;                  // noise multiplier; 0 = no noise (eps = inf)
  double q = 1;                      // Poisson sampling rate
  double clip_norm = 1;              // C; inf = no clipping (only without noise)
  std::string clipping = "clip";     // clip | normalize
  std::string divisor = "expected";  // expected | realized
  int64_t dataset_size = 0;          // N
  int64_t steps = 0;                 // T
  std::string sigma_source;          // "given" | "calibrated" | "non-private"
  double expected_batch() const { return q * static_cast<double>(dataset_size); }
  privacy::Release release(int64_t count = 1) const;  // one step's release, for the ledger
  nlohmann::json to_json() const;
};

// q = privacy.sampling_rate, or train.batch_size / N (capped at 1). Throws ConfigError when
// N = 0, when clip_norm is inf with noise, or when the target cannot be met.
DpSettings resolve_dp(const Spec& spec, int64_t dataset_size);

// The plan of every method that releases one subsampled Gaussian per step (dp-sgd and the
// projection methods): T = train.steps releases of resolve_dp's settings; {} when the data set's
// size is unknown (<= 0).
std::vector<privacy::Release> planned_step_releases(const Spec& spec, int64_t dataset_size);

}  // namespace dpft::train
