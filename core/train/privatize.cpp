#include "core/train/privatize.hpp"

#include <chrono>
#include <cmath>
#include <functional>

#include <spdlog/spdlog.h>

#include "core/dist/world.hpp"
#include "core/lm/objective.hpp"
#include "core/util/clock.hpp"
#include "core/util/error.hpp"
#include "core/util/shape.hpp"

namespace dpft::train {

torch::Tensor clip_weights(const torch::Tensor& norms, double C, privacy::Clipping clipping) {
  if (clipping == privacy::Clipping::kAutoClip) return C / (norms + privacy::kAutoClipGamma);
  if (!std::isfinite(C)) return torch::ones_like(norms);
  // min(1, C / ||g||), with ||g|| = 0 -> 1
  return torch::where(norms > C, C / norms.clamp_min(1e-30), torch::ones_like(norms));
}

namespace {

// The micro-batch loop of both clipped sums: per micro-batch, the per-sample gradients,
// `norms_of()` (B) the per-sample norms in the released space, and `add(w)` the weighted sum
// with the clipping weights w (B). A micro-batch with a non-finite norm is recomputed without
// those rows: an example whose per-sample gradient is NaN or Inf contributes nothing (a clip
// weight of 0 would not do: 0 * NaN = NaN, and one example would then decide the whole
// release). 0 is within the clip bound, so the sensitivity and the accounting are unchanged;
// per-sample gradients depend on their own example only, so the rest stay finite.
void clipped_loop(grad::PerSampleGrads& psg, const lm::LmDataset& ds,
                  const std::vector<int64_t>& rows, int64_t micro_batch, int64_t pad_id,
                  const DpSettings& dp, BatchStats* stats,
                  const std::function<torch::Tensor()>& norms_of,
                  const std::function<void(const torch::Tensor& w)>& add) {
  auto t0 = std::chrono::steady_clock::now();
  double loss = 0, norm_sum = 0, clipped_norm_sum = 0;
  int64_t clipped = 0, dropped = 0;
  const uint64_t draw = stats ? batch_draw(*stats) : 1;
  for (size_t i = 0; i < rows.size(); i += static_cast<size_t>(micro_batch)) {
    std::vector<int64_t> chunk(rows.begin() + i,
                               rows.begin() + std::min(rows.size(), i + micro_batch));
    lm::LmBatch b = lm::collate(ds, chunk, pad_id, draw);
    torch::Tensor losses = psg.compute(b);
    torch::Tensor norms = norms_of();
    if (!torch::isfinite(norms).all().item<bool>()) {
      std::vector<int64_t> kept;
      torch::Tensor ok = torch::isfinite(norms).to(torch::kCPU);
      for (size_t j = 0; j < chunk.size(); ++j)
        if (ok[static_cast<int64_t>(j)].item<bool>()) kept.push_back(chunk[j]);
      spdlog::warn(
          "{} private example(s) had a non-finite per-sample gradient and were left out "
          "of this step (lower train.lr, or check the data and model)",
          chunk.size() - kept.size());
      dropped += static_cast<int64_t>(chunk.size() - kept.size());
      if (kept.empty()) continue;
      chunk = kept;
      b = lm::collate(ds, chunk, pad_id, draw);
      losses = psg.compute(b);
      norms = norms_of();
      DPFT_CHECK(torch::isfinite(norms).all().item<bool>(),
                 "per-sample gradient norms stayed non-finite after dropping the non-finite rows");
    }
    const torch::Tensor w = clip_weights(norms, dp.clip_norm, dp.clipping);
    add(w);
    loss += losses.sum().item<double>();
    norm_sum += norms.sum().item<double>();
    clipped_norm_sum += (norms * w).sum().item<double>();
    clipped += (norms > dp.clip_norm).sum().item<int64_t>();
  }
  psg.release();
  if (stats) {
    double n = static_cast<double>(std::max<size_t>(rows.size(), 1));
    stats->batch_size = static_cast<int64_t>(rows.size());
    stats->loss = loss / n;
    stats->clipped_norm_mean = clipped_norm_sum / n;
    stats->grad_norm_mean = norm_sum / n;
    stats->clipped_fraction = static_cast<double>(clipped) / n;
    stats->dropped += dropped;
    stats->grad_seconds += seconds_since(t0);
  }
}

}  // namespace

std::vector<torch::Tensor> clipped_sum(grad::PerSampleGrads& psg, const lm::LmDataset& ds,
                                       const std::vector<int64_t>& rows, int64_t micro_batch,
                                       int64_t pad_id, const DpSettings& dp, BatchStats* stats,
                                       std::vector<torch::Tensor>* unclipped) {
  std::vector<torch::Tensor> sum;
  for (auto& p : psg.params())  // float32 whatever model.dtype is: the release is a float32 sum
    sum.push_back(torch::zeros_like(p.param, torch::kFloat32));
  if (unclipped) {
    unclipped->clear();
    for (auto& t : sum) unclipped->push_back(torch::zeros_like(t));
  }
  clipped_loop(
      psg, ds, rows, micro_batch, pad_id, dp, stats, [&] { return psg.sq_norms().sqrt(); },
      [&](const torch::Tensor& w) {
        std::vector<torch::Tensor> part = psg.weighted_sum(w);
        for (size_t k = 0; k < sum.size(); ++k) sum[k] += part[k];
        if (unclipped) {
          std::vector<torch::Tensor> raw = psg.weighted_sum(torch::ones_like(w));
          for (size_t k = 0; k < raw.size(); ++k) (*unclipped)[k] += raw[k];
        }
      });
  return sum;
}

std::vector<torch::Tensor> mean_gradient(model::CausalLMImpl& model,
                                         const std::vector<torch::Tensor>& params,
                                         const lm::LmDataset& ds, const std::vector<int64_t>& rows,
                                         int64_t micro_batch, int64_t pad_id, double denom,
                                         BatchStats& stats) {
  auto t0 = std::chrono::steady_clock::now();
  for (auto p : params) p.mutable_grad() = torch::Tensor();
  double loss = 0;
  const auto step = static_cast<size_t>(std::max<int64_t>(1, micro_batch));
  for (size_t i = 0; i < rows.size(); i += step) {
    std::vector<int64_t> chunk(
        rows.begin() + static_cast<std::ptrdiff_t>(i),
        rows.begin() + static_cast<std::ptrdiff_t>(std::min(rows.size(), i + step)));
    lm::LmBatch b = lm::collate(ds, chunk, pad_id, batch_draw(stats));
    torch::Tensor losses = lm::sample_losses(model, b);  // (B), the batch's objective
    (losses.sum() / denom).backward();
    loss += losses.sum().item<double>();
  }
  std::vector<torch::Tensor> g;
  for (auto p : params) {
    g.push_back(p.grad().defined() ? p.grad().to(torch::kFloat32, false, true)
                                   : torch::zeros_like(p, torch::kFloat32));
    p.mutable_grad() = torch::Tensor();
  }
  stats.batch_size = static_cast<int64_t>(rows.size());
  stats.loss = rows.empty() ? 0.0 : loss / static_cast<double>(rows.size());
  stats.grad_seconds += seconds_since(t0);
  return g;
}

torch::Tensor projected_clipped_sum(grad::PerSampleGrads& psg, const lm::LmDataset& ds,
                                    const std::vector<int64_t>& rows, int64_t micro_batch,
                                    int64_t pad_id, const std::vector<torch::Tensor>& blocks,
                                    const DpSettings& dp, BatchStats* stats) {
  DPFT_CHECK(!blocks.empty(), "projected_clipped_sum: no blocks of P");
  const torch::TensorOptions f32 = psg.params()[0].param.options().dtype(torch::kFloat32);
  torch::Tensor sum = torch::zeros({blocks[0].size(1)}, f32), gs;
  clipped_loop(
      psg, ds, rows, micro_batch, pad_id, dp, stats,
      [&] {
        gs = psg.project(blocks);  // (B, k): g^s_i = P^T g_i
        return gs.norm(2, 1);
      },
      [&](const torch::Tensor& w) { sum += (gs * w.unsqueeze(1)).sum(0); });
  return sum;
}

void check_step_gradients(const std::vector<torch::Tensor>& grads,
                          const std::vector<torch::Tensor>& like,
                          const std::vector<std::string>& names) {
  DPFT_CHECK(grads.size() == like.size() && names.size() == like.size(),
             "step: the method returned {} gradients for {} trainable parameters", grads.size(),
             like.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined()) continue;
    const torch::Tensor& m = like[i];
    DPFT_CHECK(grads[i].scalar_type() == torch::kFloat32 && grads[i].device() == m.device() &&
                   grads[i].sizes() == m.sizes(),
               "step: the gradient of {} is {} {} on {}; the step needs float32 {} on {} (the "
               "model's device; sums and noise stay float32 whatever model.dtype is)",
               names[i], std::string(c10::toString(grads[i].scalar_type())),
               shape_str(grads[i].sizes()), grads[i].device().str(), shape_str(m.sizes()),
               m.device().str());
  }
}

void reduce_batch_stats(BatchStats& st) {
  if (!dist::active()) return;
  const double n = static_cast<double>(st.batch_size);
  std::vector<torch::Tensor> v{
      torch::tensor({n, st.loss * n, st.grad_norm_mean * n, st.clipped_fraction * n,
                     static_cast<double>(st.dropped), st.clipped_norm_mean * n},
                    torch::kFloat64)};
  dist::all_reduce_sum(v, "the batch statistics");
  const auto a = v[0].accessor<double, 1>();
  const double total = std::max(a[0], 1.0);
  st.batch_size = static_cast<int64_t>(std::llround(a[0]));
  st.loss = a[1] / total;
  st.grad_norm_mean = a[2] / total;
  st.clipped_fraction = a[3] / total;
  st.dropped = static_cast<int64_t>(std::llround(a[4]));
  st.clipped_norm_mean = a[5] / total;
}

double noise_and_scale(std::vector<torch::Tensor>& grads, const DpSettings& dp,
                       privacy::GaussianSum& mechanism, int64_t realized_batch, BatchStats* stats,
                       double* noise_norm, double* signal_norm) {
  auto t0 = std::chrono::steady_clock::now();
  DPFT_CHECK(mechanism.sigma() == dp.sigma,
             "noise_and_scale: the mechanism's sigma {} is not the step's {}", mechanism.sigma(),
             dp.sigma);
  double before = 0;  // || the summed clipped gradients || (diagnostics only)
  if (signal_norm) {
    std::vector<torch::Tensor> total;
    for (const auto& g : grads) total.push_back(g.to(torch::kFloat64));
    dist::all_reduce_sum(total, "the sum of clipped gradients (diagnostics)");
    for (const auto& t : total) before += t.pow(2).sum().item<double>();
  }
  // The release: recorded on every rank, noised on rank 0 only, so that the noise enters the
  // sum over ranks exactly once. Noise drawn in float32 onto the float32 sum, on the host and
  // copied or on a GPU from a host-drawn key (NoiseSource::normal_on).
  const double z = mechanism.release(grads, dp.clip_norm, dist::is_root(), noise_norm != nullptr);
  dist::all_reduce_sum(grads, "the sum of clipped gradients");  // nothing with one rank
  if (signal_norm) *signal_norm = std::sqrt(before);
  if (noise_norm) *noise_norm = z;
  const double div = dp.divisor_for(realized_batch);
  for (auto& g : grads) g.div_(div);
  if (stats) stats->noise_seconds += seconds_since(t0);
  return div;
}

}  // namespace dpft::train
