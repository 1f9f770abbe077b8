// Adaptive clipping to a quantile of the per-unit gradient norms (Andrew et al. 2021,
// "Differentially Private Learning with Adaptive Clipping", Alg. 1 with the geometric update):
// each step, after the clipped sum at the current threshold C_t,
//   s      = sum_{i in B} (1[||g_i|| <= C_t] - 1/2)           (each unit moves s by at most 1/2)
//   s~     = s + N(0, sigma_b^2)                                a release: sensitivity 1/2, so
//                                                               noise multiplier 2 sigma_b
//   b~     = s~ / (q N) + 1/2                                   the noisy unclipped fraction
//   C_t+1  = C_t exp(-eta (b~ - gamma))                         the geometric update
// with gamma = privacy.adaptive_clip_quantile, eta = privacy.adaptive_clip_lr and sigma_b =
// privacy.adaptive_clip_count_std (default q N / 20, the paper's). The count's release is one
// subsampled Gaussian per step in the ledger ("clip_count", multiplier 2 sigma_b, rate q),
// planned and composed with the steps' (Method::plan calibrates the gradient noise with it);
// C_t is a function of released values only (post-processing), so the gradient release of
// step t+1 at sensitivity C_t+1 stays a Gaussian of multiplier sigma: its noise is sigma C_t+1.
// A unit left out for a non-finite gradient counts 0 (within the bound).
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>

#include "core/privacy/mechanism.hpp"
#include "core/train/dp_settings.hpp"
#include "core/train/privatize.hpp"

namespace dpft::train {

class AdaptiveClip {
 public:
  // Starting at dp.clip_norm; `mechanism`: the planned "clip_count" release (its sigma must be
  // dp.adaptive->count_multiplier()).
  AdaptiveClip(const DpSettings& dp, privacy::GaussianSum& mechanism);
  double clip_norm() const { return clip_; }
  // The step's settings: dp with clip_norm = C_t.
  DpSettings settings(const DpSettings& dp) const;
  // After a step's clipped sum (stats: batch_size, dropped, clipped of the whole lot): releases
  // s~ through the mechanism (every rank records; rank 0 draws) and moves C. Returns b~.
  double update(const BatchStats& stats);
  // C_t and the count's noise stream (a resumed run draws on where it stopped).
  nlohmann::json save_state() const {
    return {{"clip_norm", clip_}, {"noise", mechanism_.state()}};
  }
  void load_state(const nlohmann::json& j) {
    clip_ = j.at("clip_norm").get<double>();
    mechanism_.set_state(j.at("noise").get<std::string>());
  }

 private:
  const DpSettings& dp_;
  privacy::GaussianSum& mechanism_;
  double clip_;
};

}  // namespace dpft::train
