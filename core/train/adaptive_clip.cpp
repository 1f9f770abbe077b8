#include "core/train/adaptive_clip.hpp"

#include <cmath>

#include "core/dist/world.hpp"
#include "core/util/error.hpp"

namespace dpft::train {

AdaptiveClip::AdaptiveClip(const DpSettings& dp, privacy::GaussianSum& mechanism)
    : dp_(dp), mechanism_(mechanism), clip_(dp.clip_norm) {
  DPFT_CHECK(dp.adaptive.has_value(), "AdaptiveClip: the run's settings have no adaptive clip");
  DPFT_CHECK(mechanism.sigma() == dp.adaptive->count_multiplier(),
             "AdaptiveClip: the count mechanism's sigma {} is not the planned {}",
             mechanism.sigma(), dp.adaptive->count_multiplier());
}

DpSettings AdaptiveClip::settings(const DpSettings& dp) const {
  DpSettings d = dp;
  d.clip_norm = clip_;
  return d;
}

double AdaptiveClip::update(const BatchStats& stats) {
  const AdaptiveClipSettings& a = *dp_.adaptive;
  // s = sum (1[unclipped] - 1/2): each counted unit adds +-1/2, a left-out one 0
  std::vector<torch::Tensor> s = {
      torch::tensor({0.5 * static_cast<double>(stats.unclipped - stats.clipped)}, torch::kFloat64)};
  // The release: recorded on every rank, drawn on rank 0 (the count is already the whole lot's)
  mechanism_.release(s, 0.5, dist::is_root(), false);
  if (dist::active()) dist::broadcast(s, "the noisy clipped count");
  const double b = s[0].item<double>() / dp_.expected_batch() + 0.5;  // b~
  clip_ *= std::exp(-a.lr * (b - a.quantile));
  return b;
}

}  // namespace dpft::train
