#include "core/train/dp_settings.hpp"

#include <cmath>

#include "core/privacy/calibrate.hpp"
#include "core/run/runner.hpp"
#include "core/util/error.hpp"

namespace dpft::train {

privacy::Release DpSettings::release(int64_t count) const {
  return {"train", sigma, q, count};
}

nlohmann::json DpSettings::to_json() const {
  nlohmann::json clip =
      std::isfinite(clip_norm) ? nlohmann::json(clip_norm) : nlohmann::json("inf");
  return {{"noise_multiplier", sigma},
          {"sigma_source", sigma_source},
          {"sampling_rate", q},
          {"steps", steps},
          {"dataset_size", dataset_size},
          {"expected_batch_size", expected_batch()},
          {"clip_norm", clip},
          {"clipping", clipping},
          {"noise_divisor", divisor},
          {"noise_std", sigma * (std::isfinite(clip_norm) ? clip_norm : 0.0)}};
}

DpSettings resolve_dp(const Spec& spec, int64_t n) {
  const PrivacySpec& p = spec.privacy;
  DPFT_CHECK_AS(ConfigError, n > 0, "the private training set is empty (data.train.path = '{}')",
                spec.data.train.path);
  DpSettings s;
  s.dataset_size = n;
  s.steps = spec.train.steps;
  s.clip_norm = p.clip_norm;
  s.clipping = p.clipping;
  s.divisor = p.noise_divisor;
  s.q = p.sampling_rate
            ? *p.sampling_rate
            : std::min(1.0, static_cast<double>(spec.train.batch_size) / static_cast<double>(n));
  if (p.noise_multiplier) {
    s.sigma = *p.noise_multiplier;
    s.sigma_source = s.sigma > 0 ? "given" : "non-private";
  } else if (p.epsilon && std::isfinite(*p.epsilon)) {
    auto acc = privacy::make_accountant(p.accountant, ledger_options(spec).accountant_options);
    s.sigma = privacy::calibrate_sigma(*acc, s.q, s.steps, *p.epsilon, p.delta).sigma;
    s.sigma_source = "calibrated";
  } else {
    s.sigma = 0;
    s.sigma_source = "non-private";
  }
  if (s.sigma > 0 && !std::isfinite(s.clip_norm))
    throw ConfigError(
        "privacy.clip_norm: inf (no clipping) leaves the sensitivity unbounded; set a finite "
        "clip_norm, or make the run non-private (privacy.epsilon: inf)");
  return s;
}

std::vector<privacy::Release> planned_step_releases(const Spec& spec, int64_t dataset_size) {
  if (dataset_size <= 0) return {};
  return {resolve_dp(spec, dataset_size).release(spec.train.steps)};
}

}  // namespace dpft::train
