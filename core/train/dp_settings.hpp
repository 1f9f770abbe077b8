// The DP-SGD parameters of a run, resolved once from the spec and the private data set's size:
// Poisson rate q, noise multiplier sigma (given, or calibrated by the run's accountant so that
// T = train.steps compositions of the subsampled Gaussian meet (epsilon, delta)), clipping bound
// C and mode, and the noise divisor. Abadi et al. 2016, Alg. 1: g~ = (sum_b clip_C(g_b) + N(0,
// sigma^2 C^2 I)) / L, with L = q N ("expected", the lot size the analysis assumes) or the
// realised batch size ("realized", as the PE-SGD reference code does).
//
// DpSettings is the one source of sigma, q, C, the divisor and the noise std that every method
// uses and that metrics.json reports: resolved (sigma calibrated) once per run, by the method's
// plan (methods/method.hpp), from the tokenised private set's size.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/config/spec.hpp"
#include "core/privacy/accountant.hpp"
#include "core/privacy/ledger.hpp"

namespace dpft::train {

// Adaptive clipping (core/train/adaptive_clip.hpp; Andrew et al. 2021): the target quantile
// gamma, the geometric rate eta, and the std sigma_b of the noise on the clipped count.
struct AdaptiveClipSettings {
  double quantile = 0.5;
  double lr = 0.2;
  double count_std = 0;
  // The count's noise multiplier: its sensitivity is 1/2 (a unit adds +-1/2), so 2 sigma_b.
  double count_multiplier() const { return 2 * count_std; }
};

struct DpSettings {
  double sigma = 0;      // noise multiplier; 0 = no noise (eps = inf)
  double q = 1;          // Poisson sampling rate
  double clip_norm = 1;  // C; inf = no clipping (only without noise)
  privacy::Clipping clipping = privacy::Clipping::kClip;
  // which parts of a per-sample gradient are clipped separately (train::clip_groups)
  privacy::ClippingStyle clipping_style = privacy::ClippingStyle::kFlat;
  std::vector<ClipGroupSpec> clip_groups;  // clipping_style groups
  // privacy.adaptive_clip_quantile set: C moves each step (clip_norm is its start)
  std::optional<AdaptiveClipSettings> adaptive;
  privacy::NoiseDivisor divisor = privacy::NoiseDivisor::kExpected;
  int64_t dataset_size = 0;  // N
  int64_t steps = 0;         // T
  std::string sigma_source;  // "given" | "calibrated" | "non-private"
  // Std of each noise coordinate: sigma times the bound on one example's contribution to the
  // noised sum; sigma C (per-sample clipping) unless a method whose noised space has another
  // bound sets it (PE-SGD normalize: sigma; GEP: sigma sqrt(2) C1). The projection loop checks
  // that the noise it drew has this std.
  std::optional<double> noise_std_override;
  double noise_std_residual = 0;  // GEP with residual: std on the residual (0: no second part)
  double noise_std() const;
  double expected_batch() const { return q * static_cast<double>(dataset_size); }
  // What a noised sum of `realized_batch` examples is divided by: q N or max(|B|, 1).
  double divisor_for(int64_t realized_batch) const;
  privacy::Release release(int64_t count = 1) const;  // one step's release, for the ledger
  // Adaptive clipping's count releases ("clip_count": 2 sigma_b at rate q), `count` steps.
  privacy::Release count_release(int64_t count = 1) const;
  nlohmann::json to_json() const;
};

// The one resolver from a spec's privacy block to noise (every method's plan):
//   privacy.noise_multiplier given -> it: "given" (or "non-private" when 0)
//   privacy.epsilon finite         -> calibrate(accountant, epsilon, delta): "calibrated"
//   privacy.epsilon .inf           -> sigma 0: "non-private"
//   neither                        -> ConfigError naming `method` and what it `releases`.
// `calibrate` sets the method's sigmas with the run's accountant (dp-sft calibrates two), which
// composes the run's `inherited` releases (core/run/provenance.hpp) before every question, so
// that they and the method's own releases together meet epsilon (ConfigError when the inherited
// ones alone reach it); `sigma` is the given or non-private one (unused when calibrated).
struct NoiseChoice {
  double sigma = 0;
  std::string source;  // given | calibrated | non-private
  bool calibrated() const { return source == "calibrated"; }
};
using Calibrate =
    std::function<void(privacy::Accountant& accountant, double epsilon, double delta)>;
NoiseChoice choose_noise(const PrivacySpec& p, const std::string& method,
                         const std::string& releases,
                         const std::vector<privacy::Release>& inherited,
                         const Calibrate& calibrate);

// The spec's settings before the noise is chosen: N, T = train.steps, C, clipping, divisor and
// q = privacy.sampling_rate, or train.batch_size / N (capped at 1); sigma 0. ConfigError when
// N = 0. (Methods with several releases, such as dp-sft, calibrate their own sigmas on it.)
DpSettings dp_settings_before_noise(const Spec& spec, int64_t dataset_size);
// The spec with train.epochs converted for N = dataset_size units: steps = ceil(epochs / q),
// q as above (an epoch is 1 / q Poisson steps in expectation); epochs cleared. A spec
// without epochs is returned as it is. ConfigError when the steps exceed 1e8.
Spec with_epochs_as_steps(const Spec& spec, int64_t dataset_size);
// Warnings about the private set's size N (units) for a training run: q capped at 1
// (train.batch_size >= N) and fewer than 50 units. Logged by the caller.
std::vector<std::string> data_size_warnings(const Spec& spec, int64_t dataset_size);
// Adaptive clipping's count releases as accountant blocks ({2 sigma_b, q, T}; none without
// privacy.adaptive_clip_quantile), for resolve_dp's `fixed`.
std::vector<privacy::GaussianBlock> count_blocks(const Spec& spec, int64_t dataset_size);
// The same with sigma: privacy.noise_multiplier, or calibrated to privacy.epsilon over T steps.
// `fixed`: the run's other releases with their noise set (CTCL's topic histogram), composed
// with the T steps when calibrating (privacy::calibrate_sigma); `inherited` as choose_noise.
// Throws ConfigError when clip_norm is inf with noise, or when the target cannot be met.
DpSettings resolve_dp(const Spec& spec, int64_t dataset_size,
                      const std::vector<privacy::Release>& inherited,
                      const std::vector<privacy::GaussianBlock>& fixed = {});

}  // namespace dpft::train
