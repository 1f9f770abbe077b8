#include "core/train/dp_settings.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "core/config/ledger_options.hpp"
#include "core/privacy/calibrate.hpp"
#include "core/util/error.hpp"

namespace dpft::train {

privacy::Release DpSettings::release(int64_t count) const {
  return {"train", sigma, q, count};
}

privacy::Release DpSettings::count_release(int64_t count) const {
  DPFT_CHECK(adaptive.has_value(), "count_release: the run does not clip adaptively");
  return {"clip_count", adaptive->count_multiplier(), q, count};
}

double DpSettings::noise_std() const {
  if (noise_std_override) return *noise_std_override;
  return sigma * (std::isfinite(clip_norm) ? clip_norm : 0.0);
}

double DpSettings::divisor_for(int64_t realized_batch) const {
  return divisor == privacy::NoiseDivisor::kRealized
             ? static_cast<double>(std::max<int64_t>(realized_batch, 1))
             : expected_batch();
}

nlohmann::json DpSettings::to_json() const {
  nlohmann::json clip =
      std::isfinite(clip_norm) ? nlohmann::json(clip_norm) : nlohmann::json("inf");
  nlohmann::json j = {{"noise_multiplier", sigma},
                      {"sigma_source", sigma_source},
                      {"sampling_rate", q},
                      {"steps", steps},
                      {"dataset_size", dataset_size},
                      {"expected_batch_size", expected_batch()},
                      {"clip_norm", clip},
                      {"clipping", privacy::name_of(clipping)},
                      {"noise_divisor", privacy::name_of(divisor)},
                      {"noise_std", noise_std()}};
  if (noise_std_residual > 0) j["noise_std_residual"] = noise_std_residual;
  if (clipping_style != privacy::ClippingStyle::kFlat) {  // flat: as before the option existed
    j["clipping_style"] = privacy::name_of(clipping_style);
    for (const ClipGroupSpec& g : clip_groups)
      j["clip_groups"].push_back({{"params", g.params}, {"share", g.share}});
  }
  if (adaptive)  // clip_norm above is the start; the history has each step's
    j["adaptive_clip"] = {{"quantile", adaptive->quantile},
                          {"lr", adaptive->lr},
                          {"count_std", adaptive->count_std},
                          {"count_noise_multiplier", adaptive->count_multiplier()}};
  return j;
}

NoiseChoice choose_noise(const PrivacySpec& p, const std::string& method,
                         const std::string& releases,
                         const std::vector<privacy::Release>& inherited,
                         const Calibrate& calibrate) {
  if (p.noise_multiplier)
    return {*p.noise_multiplier, *p.noise_multiplier > 0 ? "given" : "non-private"};
  if (p.epsilon && std::isfinite(*p.epsilon)) {
    auto acc =
        privacy::make_accountant(p.accountant, privacy::ledger_options(p).accountant_options);
    std::vector<privacy::GaussianBlock> fixed;
    for (const privacy::Release& r : inherited)
      fixed.push_back({r.noise_multiplier, r.sampling_rate, r.count});
    if (!fixed.empty()) {
      const double spent = acc->epsilon(fixed, p.delta).epsilon;
      DPFT_CHECK_AS(ConfigError, spent < *p.epsilon,
                    "privacy.epsilon {}: the releases this run inherits from the artefacts it "
                    "builds on (metrics.json's privacy.inherited) already spend epsilon {:.4g} "
                    "at delta {:g}, so nothing is left for its own; raise privacy.epsilon or "
                    "build on artefacts of other data",
                    *p.epsilon, spent, p.delta);
    }
    privacy::ComposedAccountant composed(*acc, fixed);
    calibrate(composed, *p.epsilon, p.delta);
    return {0, "calibrated"};
  }
  if (p.epsilon) return {0, "non-private"};  // epsilon: .inf, a deliberate non-private run
  throw ConfigError(fmt::format(
      "privacy: method {} releases {} but neither privacy.epsilon (sigma is calibrated to it) "
      "nor privacy.noise_multiplier (epsilon is computed) is set; give one (epsilon: .inf for "
      "a deliberately non-private run)",
      method, releases));
}

DpSettings dp_settings_before_noise(const Spec& spec, int64_t n) {
  const PrivacySpec& p = spec.privacy;
  DPFT_CHECK_AS(InputError, n > 0, "the private training set is empty (data.train.path = '{}')",
                spec.data.train.path);
  DpSettings s;
  s.dataset_size = n;
  s.steps = spec.train.steps;
  s.clip_norm = p.clip_norm;
  s.clipping = p.clipping;
  s.clipping_style = p.clipping_style;
  s.clip_groups = p.clip_groups;
  s.divisor = p.noise_divisor;
  s.q = p.sampling_rate
            ? *p.sampling_rate
            : std::min(1.0, static_cast<double>(spec.train.batch_size) / static_cast<double>(n));
  if (p.adaptive_clip_quantile) {
    AdaptiveClipSettings a;
    a.quantile = *p.adaptive_clip_quantile;
    a.lr = p.adaptive_clip_lr;
    a.count_std = p.adaptive_clip_count_std.value_or(s.expected_batch() / 20);  // the paper's
    s.adaptive = a;
  }
  return s;
}

Spec with_epochs_as_steps(const Spec& given, int64_t n) {
  if (!given.train.epochs) return given;
  Spec spec = given;
  const double q = dp_settings_before_noise(spec, n).q, epochs = *spec.train.epochs;
  const double steps = std::ceil(epochs / q * (1 - 1e-12));  // 1 epoch at q = 0.1: 10 steps
  DPFT_CHECK_AS(ConfigError, steps <= 1e8,
                "train.epochs = {} at q = {:.4g} (N = {}) is {:.3g} steps, over the 1e8 "
                "allowed; lower it",
                epochs, q, n, steps);
  spec.train.steps = std::max<int64_t>(1, static_cast<int64_t>(steps));
  spec.train.epochs.reset();
  spdlog::info("train.epochs: {} at q = {:.4g} (N = {} {}s) = {} steps", epochs, q, n,
               privacy::name_of(spec.privacy.unit), spec.train.steps);
  return spec;
}

std::vector<std::string> data_size_warnings(const Spec& spec, int64_t n) {
  std::vector<std::string> w;
  const std::string units = fmt::format("{}s", privacy::name_of(spec.privacy.unit));
  if (!spec.privacy.sampling_rate && spec.train.batch_size >= n)
    w.push_back(fmt::format(
        "train.batch_size = {} is at least the {} private {}: q is capped at 1, so every "
        "step sees the whole set and the noise is not amortised by subsampling; lower "
        "train.batch_size or set privacy.sampling_rate",
        spec.train.batch_size, n, units));
  if (n < 50)
    w.push_back(fmt::format(
        "only {} usable private {}: at this size the DP noise swamps the signal at any useful "
        "epsilon; check data.train (blank rows, num_samples, the text column)",
        n, units));
  return w;
}

std::vector<privacy::GaussianBlock> count_blocks(const Spec& spec, int64_t n) {
  const DpSettings s = dp_settings_before_noise(spec, n);
  if (!s.adaptive || !spec.privacy.is_private()) return {};
  return {{s.adaptive->count_multiplier(), s.q, s.steps}};
}

DpSettings resolve_dp(const Spec& spec, int64_t n, const std::vector<privacy::Release>& inherited,
                      const std::vector<privacy::GaussianBlock>& fixed) {
  const PrivacySpec& p = spec.privacy;
  DpSettings s = dp_settings_before_noise(spec, n);
  const NoiseChoice c = choose_noise(
      p, spec.method.name, "a DP model", inherited,
      [&](privacy::Accountant& acc, double eps, double delta) {
        s.sigma = privacy::calibrate_sigma(acc, s.q, s.steps, eps, delta, 1e-3, fixed).sigma;
      });
  if (!c.calibrated()) s.sigma = c.sigma;
  s.sigma_source = c.source;
  if (s.adaptive && s.sigma == 0) s.adaptive->count_std = 0;  // non-private: the count too
  if (s.sigma > 0 && !std::isfinite(s.clip_norm))
    throw ConfigError(
        "privacy.clip_norm: inf (no clipping) leaves the sensitivity unbounded; set a finite "
        "clip_norm, or make the run non-private (privacy.epsilon: inf)");
  return s;
}

}  // namespace dpft::train
