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

ClipGroups clip_groups(const DpSettings& dp, const std::vector<grad::GradParam>& params) {
  ClipGroups cg;
  const privacy::ClippingStyle style = dp.clipping_style;
  cg.part_of.assign(params.size(), 0);
  if (style == privacy::ClippingStyle::kFlat) {
    cg.threshold = {dp.clip_norm};
    return cg;
  }
  std::vector<double> share;
  if (style == privacy::ClippingStyle::kPerLayer) {
    for (size_t j = 0; j < params.size(); ++j) {
      cg.part_of[j] = static_cast<int64_t>(j);
      share.push_back(1.0);
    }
  } else {
    std::vector<int64_t> held(dp.clip_groups.size(), 0);
    for (size_t j = 0; j < params.size(); ++j) {
      std::vector<size_t> in;
      for (size_t k = 0; k < dp.clip_groups.size(); ++k)
        if (params[j].name.find(dp.clip_groups[k].params) != std::string::npos) in.push_back(k);
      DPFT_CHECK_AS(
          ConfigError, in.size() == 1,
          "privacy.clip_groups: trainable parameter {} is in {} groups; every trainable "
          "parameter must be in exactly one (its name containing that group's params), "
          "so that the thresholds bound the whole gradient: {}",
          params[j].name, in.size(),
          in.empty() ? "add a group that holds it, e.g. {params: " + params[j].name + ", share: 1}"
                     : "make the groups' params parts more specific");
      cg.part_of[j] = static_cast<int64_t>(in[0]);
      ++held[in[0]];
    }
    for (size_t k = 0; k < dp.clip_groups.size(); ++k) {
      DPFT_CHECK_AS(ConfigError, held[k] > 0,
                    "privacy.clip_groups[{}] (params: {}) holds no trainable parameter, and its "
                    "share of the clipping budget would be lost; remove it",
                    k, dp.clip_groups[k].params);
      share.push_back(dp.clip_groups[k].share);
    }
  }
  double total = 0;
  for (double x : share) total += x;
  for (double x : share) cg.threshold.push_back(dp.clip_norm * std::sqrt(x / total));
  return cg;
}

namespace {

// Per-sample clipping of the parts of ClipGroups, from their norms (B, K): W (B, K) each part's
// weight (clip_weights at its threshold), and the statistics of each whole gradient: its norm,
// its clipped norm and whether some part was clipped. One part: exactly the flat computation.
struct PartClip {
  torch::Tensor W;             // (B, K)
  torch::Tensor total;         // (B) ||g_b||
  torch::Tensor clipped_norm;  // (B) ||clipped g_b||
  torch::Tensor clipped;       // (B) bool
};
PartClip clip_parts(const torch::Tensor& norms, const ClipGroups& cg, privacy::Clipping clipping) {
  if (cg.threshold.size() == 1) {
    const torch::Tensor n = norms.select(1, 0);
    const torch::Tensor w = clip_weights(n, cg.threshold[0], clipping);
    return {w.unsqueeze(1), n, n * w, n > cg.threshold[0]};
  }
  std::vector<torch::Tensor> ws;
  for (size_t k = 0; k < cg.threshold.size(); ++k)
    ws.push_back(clip_weights(norms.select(1, static_cast<int64_t>(k)), cg.threshold[k], clipping));
  const torch::Tensor W = torch::stack(ws, 1);
  const torch::Tensor thr = torch::tensor(cg.threshold, norms.options());
  return {W, norms.pow(2).sum(1).sqrt(), (norms * W).pow(2).sum(1).sqrt(),
          (norms > thr.unsqueeze(0)).any(1)};
}

// (B, K) part norms from (B, P) per-parameter squared norms.
torch::Tensor part_norms(const torch::Tensor& sq, const ClipGroups& cg) {
  return torch::zeros({sq.size(0), static_cast<int64_t>(cg.threshold.size())}, sq.options())
      .index_add_(1, torch::tensor(cg.part_of, torch::kLong).to(sq.device()), sq)
      .sqrt();
}

// The micro-batch loop of both clipped sums: per micro-batch, the per-sample gradients,
// `norms_of()` (B, K) the per-sample norms of the K parts of `cg` in the released space, and
// `add(W)` the weighted sum with the parts' clipping weights W (B, K). A micro-batch with a
// non-finite norm is recomputed without those rows: an example whose per-sample gradient is NaN or
// Inf contributes nothing (a clip weight of 0 would not do: 0 * NaN = NaN, and one example would
// then decide the whole release). 0 is within the clip bound, so the sensitivity and the accounting
// are unchanged; per-sample gradients depend on their own example only, so the rest stay finite.
void clipped_loop(grad::PerSampleGrads& psg, const lm::LmDataset& ds,
                  const std::vector<int64_t>& rows, int64_t micro_batch, int64_t pad_id,
                  const DpSettings& dp, const ClipGroups& cg, BatchStats* stats,
                  const std::function<torch::Tensor()>& norms_of,
                  const std::function<void(const torch::Tensor& W)>& add) {
  auto t0 = std::chrono::steady_clock::now();
  double loss = 0, norm_sum = 0, clipped_norm_sum = 0;
  int64_t clipped = 0, dropped = 0, counted = 0;
  const uint64_t draw = stats ? batch_draw(*stats) : 1;
  for (size_t i = 0; i < rows.size(); i += static_cast<size_t>(micro_batch)) {
    std::vector<int64_t> chunk(rows.begin() + i,
                               rows.begin() + std::min(rows.size(), i + micro_batch));
    lm::LmBatch b = lm::collate(ds, chunk, pad_id, draw);
    torch::Tensor losses = psg.compute(b);
    torch::Tensor norms = norms_of();
    if (!torch::isfinite(norms).all().item<bool>()) {
      std::vector<int64_t> kept;
      torch::Tensor ok = torch::isfinite(norms).all(1).to(torch::kCPU);
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
    const PartClip c = clip_parts(norms, cg, dp.clipping);
    add(c.W);
    loss += losses.sum().item<double>();
    norm_sum += c.total.sum().item<double>();
    clipped_norm_sum += c.clipped_norm.sum().item<double>();
    clipped += c.clipped.sum().item<int64_t>();
    counted += static_cast<int64_t>(chunk.size());
  }
  psg.release();
  if (stats) {
    double n = static_cast<double>(std::max<size_t>(rows.size(), 1));
    stats->batch_size = static_cast<int64_t>(rows.size());
    stats->loss = loss / n;
    stats->clipped_norm_mean = clipped_norm_sum / n;
    stats->grad_norm_mean = norm_sum / n;
    stats->clipped_fraction = static_cast<double>(clipped) / n;
    stats->clipped = clipped;
    stats->unclipped = counted - clipped;
    stats->dropped += dropped;
    stats->grad_seconds += seconds_since(t0);
  }
}

}  // namespace

namespace {

// The unit of each row position: unit_of[i] = u for starts[u] <= i < starts[u + 1].
std::vector<int64_t> unit_index(const std::vector<int64_t>& starts, size_t n_rows) {
  const auto U = static_cast<int64_t>(starts.size());
  std::vector<int64_t> unit_of(n_rows);
  for (int64_t u = 0; u < U; ++u) {
    const size_t end = u + 1 < U ? static_cast<size_t>(starts[u + 1]) : n_rows;
    DPFT_CHECK(static_cast<size_t>(starts[u]) <= end && end <= n_rows,
               "unit sums: unit {} starts at {} (rows {})", u, starts[u], n_rows);
    for (size_t i = static_cast<size_t>(starts[u]); i < end; ++i) unit_of[i] = u;
  }
  return unit_of;
}

// Both unit clipped sums: the (U, d) matrix of the units' summed per-sample rows (`rows_of()`:
// the current micro-batch's (B, d) rows in the released space; linear in the gradients, so a
// unit's row is the released-space image of its summed gradient), a unit whose row is not
// finite zeroed, and the unit clipping weights of the parts of `cg` (several parts: `widths`,
// each trainable parameter's columns in order). Returns sum_u clip(G_u) (d); fills stats.
torch::Tensor unit_weighted_sum(grad::PerSampleGrads& psg, const lm::LmDataset& ds,
                                const std::vector<int64_t>& rows,
                                const std::vector<int64_t>& starts, int64_t micro_batch,
                                int64_t pad_id, const DpSettings& dp, const ClipGroups& cg,
                                const std::vector<int64_t>& widths, BatchStats* stats, int64_t d,
                                const std::function<torch::Tensor()>& rows_of,
                                torch::Tensor* unclipped) {
  auto t0 = std::chrono::steady_clock::now();
  const auto U = static_cast<int64_t>(starts.size());
  DPFT_CHECK_AS(ConfigError, static_cast<double>(U) * static_cast<double>(d) * 4 <= 0x1p31,
                "privacy.unit user: the step's {} unit gradients of {} values would take {:.1f} "
                "GiB; lower train.batch_size (units per step) or train fewer parameters (LoRA)",
                U, d, static_cast<double>(U) * static_cast<double>(d) * 4 / 0x1p30);
  const std::vector<int64_t> unit_of = unit_index(starts, rows.size());
  const torch::TensorOptions f32 = psg.params()[0].param.options().dtype(torch::kFloat32);
  torch::Tensor G = torch::zeros({U, d}, f32);  // (U, d) the units' summed rows
  double loss = 0;
  const uint64_t draw = stats ? batch_draw(*stats) : 1;
  const auto step = static_cast<size_t>(std::max<int64_t>(1, micro_batch));
  for (size_t i = 0; i < rows.size(); i += step) {
    const size_t end = std::min(rows.size(), i + step);
    std::vector<int64_t> chunk(rows.begin() + static_cast<std::ptrdiff_t>(i),
                               rows.begin() + static_cast<std::ptrdiff_t>(end));
    std::vector<int64_t> units(unit_of.begin() + static_cast<std::ptrdiff_t>(i),
                               unit_of.begin() + static_cast<std::ptrdiff_t>(end));
    torch::Tensor losses = psg.compute(lm::collate(ds, chunk, pad_id, draw));
    G.index_add_(0, torch::tensor(units, torch::kLong).to(G.device()),
                 rows_of().to(torch::kFloat32));
    loss += losses.sum().item<double>();
  }
  psg.release();
  const torch::Tensor finite = torch::isfinite(G).all(1);  // (U)
  const auto bad = (~finite).sum().item<int64_t>();
  int64_t dropped = 0;
  if (bad > 0) {
    const torch::Tensor ok = finite.to(torch::kCPU);
    for (size_t i = 0; i < rows.size(); ++i)
      if (!ok[unit_of[i]].item<bool>()) ++dropped;
    spdlog::warn(
        "{} unit(s) ({} rows) had a non-finite gradient and were left out of this step (lower "
        "train.lr, or check the data and model)",
        bad, dropped);
    G.masked_fill_(~finite.unsqueeze(1), 0.0);  // 0 is within the bound: the sensitivity holds
  }
  if (unclipped) *unclipped = G.sum(0);                 // (d)
  torch::Tensor out, total, clipped_norm, was_clipped;  // (d), (U) x 3
  if (cg.threshold.size() == 1) {
    total = G.norm(2, 1);
    const torch::Tensor w = clip_weights(total, cg.threshold[0], dp.clipping) * finite;  // (U)
    clipped_norm = total * w;
    was_clipped = total > cg.threshold[0];
    out = (w.unsqueeze(1) * G).sum(0);
  } else {  // each parameter's columns clipped with its part's weight
    DPFT_CHECK(widths.size() == cg.part_of.size(), "unit sums: {} column widths for {} parameters",
               widths.size(), cg.part_of.size());
    std::vector<torch::Tensor> sq, parts;
    int64_t at = 0;
    for (int64_t w : widths) {
      sq.push_back(G.narrow(1, at, w).pow(2).sum(1));
      at += w;
    }
    const PartClip c = clip_parts(part_norms(torch::stack(sq, 1), cg), cg, dp.clipping);
    const torch::Tensor W = c.W * finite.unsqueeze(1);  // (U, K)
    at = 0;
    for (size_t j = 0; j < widths.size(); ++j) {
      parts.push_back(
          (W.select(1, cg.part_of[j]).unsqueeze(1) * G.narrow(1, at, widths[j])).sum(0));
      at += widths[j];
    }
    out = torch::cat(parts);
    total = c.total;
    clipped_norm = c.clipped_norm * finite;
    was_clipped = c.clipped;
  }
  if (stats) {
    const double n = static_cast<double>(std::max<int64_t>(U - bad, 1));
    stats->batch_size = U;
    stats->loss = loss / static_cast<double>(std::max<size_t>(rows.size(), 1));
    stats->grad_norm_mean = (total * finite).sum().item<double>() / n;
    stats->clipped_norm_mean = clipped_norm.sum().item<double>() / n;
    stats->clipped_fraction = (was_clipped & finite).sum().item<double>() / n;
    stats->clipped = (was_clipped & finite).sum().item<int64_t>();
    stats->unclipped = (~was_clipped & finite).sum().item<int64_t>();
    stats->dropped += dropped;
    stats->extra["rows"] = static_cast<int64_t>(rows.size());
    stats->grad_seconds += seconds_since(t0);
  }
  return out;  // (d)
}

// The one part of flat clipping; ConfigError naming `what` under another clipping_style.
ClipGroups flat_only(const DpSettings& dp, const char* what) {
  DPFT_CHECK_AS(ConfigError, dp.clipping_style == privacy::ClippingStyle::kFlat,
                "privacy.clipping_style: {} clips parts of the full gradient; {} clips in another "
                "space: use clipping_style: flat",
                privacy::name_of(dp.clipping_style), what);
  ClipGroups cg;
  cg.threshold = {dp.clip_norm};
  return cg;
}

// Whether the step's units (stats->unit_starts) group several of `rows`: then the clipped sums
// clip units, not rows.
bool groups_rows(const BatchStats* stats, const std::vector<int64_t>& rows) {
  return stats && !stats->unit_starts.empty() && stats->unit_starts.size() != rows.size();
}

// (p) -> one tensor per trainable parameter (PerSampleGrads::params() order).
std::vector<torch::Tensor> per_param(const torch::Tensor& flat, grad::PerSampleGrads& psg) {
  std::vector<torch::Tensor> out;
  int64_t at = 0;
  for (const auto& gp : psg.params()) {
    const int64_t n = gp.param.numel();
    out.push_back(flat.narrow(0, at, n).view(gp.param.sizes()).clone());
    at += n;
  }
  return out;
}

}  // namespace

std::vector<torch::Tensor> unit_clipped_sum(grad::PerSampleGrads& psg, const lm::LmDataset& ds,
                                            const std::vector<int64_t>& rows,
                                            const std::vector<int64_t>& starts, int64_t micro_batch,
                                            int64_t pad_id, const DpSettings& dp, BatchStats* stats,
                                            std::vector<torch::Tensor>* unclipped) {
  torch::Tensor raw;
  std::vector<int64_t> widths;
  for (const auto& gp : psg.params()) widths.push_back(gp.param.numel());
  const torch::Tensor flat = unit_weighted_sum(
      psg, ds, rows, starts, micro_batch, pad_id, dp, clip_groups(dp, psg.params()), widths, stats,
      psg.dim(), [&] { return psg.matrix(); }, unclipped ? &raw : nullptr);
  if (unclipped) *unclipped = per_param(raw, psg);
  return per_param(flat, psg);
}

torch::Tensor unit_rows_sum(const torch::Tensor& per_row, const std::vector<int64_t>& starts) {
  DPFT_CHECK(per_row.dim() == 2, "unit_rows_sum: a (rows, d) matrix, not {}-d", per_row.dim());
  const std::vector<int64_t> unit_of = unit_index(starts, static_cast<size_t>(per_row.size(0)));
  return torch::zeros({static_cast<int64_t>(starts.size()), per_row.size(1)}, per_row.options())
      .index_add_(0, torch::tensor(unit_of, torch::kLong).to(per_row.device()), per_row);
}

std::vector<torch::Tensor> clipped_sum(grad::PerSampleGrads& psg, const lm::LmDataset& ds,
                                       const std::vector<int64_t>& rows, int64_t micro_batch,
                                       int64_t pad_id, const DpSettings& dp, BatchStats* stats,
                                       std::vector<torch::Tensor>* unclipped) {
  if (groups_rows(stats, rows))
    return unit_clipped_sum(psg, ds, rows, stats->unit_starts, micro_batch, pad_id, dp, stats,
                            unclipped);
  std::vector<torch::Tensor> sum;
  for (auto& p : psg.params())  // float32 whatever model.dtype is: the release is a float32 sum
    sum.push_back(torch::zeros_like(p.param, torch::kFloat32));
  if (unclipped) {
    unclipped->clear();
    for (auto& t : sum) unclipped->push_back(torch::zeros_like(t));
  }
  const ClipGroups cg = clip_groups(dp, psg.params());
  const bool flat = cg.threshold.size() == 1;
  clipped_loop(
      psg, ds, rows, micro_batch, pad_id, dp, cg, stats,
      [&] {
        return flat ? psg.sq_norms().sqrt().unsqueeze(1) : part_norms(psg.sq_norms_by_param(), cg);
      },
      [&](const torch::Tensor& W) {  // (B, 1) flat; per parameter: its part's column
        std::vector<torch::Tensor> part = psg.weighted_sum(
            flat ? W.select(1, 0)
                 : W.index_select(1, torch::tensor(cg.part_of, torch::kLong).to(W.device())));
        for (size_t k = 0; k < sum.size(); ++k) sum[k] += part[k];
        if (unclipped) {
          std::vector<torch::Tensor> raw = psg.weighted_sum(torch::ones({W.size(0)}, W.options()));
          for (size_t k = 0; k < raw.size(); ++k) (*unclipped)[k] += raw[k];
        }
      });
  return sum;
}

std::vector<int64_t> rank_rows(const std::vector<int64_t>& rows, BatchStats& stats) {
  if (!dist::active()) return rows;
  if (stats.unit_starts.empty()) return dist::shard(rows);
  std::vector<int64_t> units(stats.unit_starts.size()), mine, starts;
  for (size_t u = 0; u < units.size(); ++u) units[u] = static_cast<int64_t>(u);
  for (int64_t u : dist::shard(units)) {  // whole units: units r, r + W, ...
    const auto b = static_cast<size_t>(stats.unit_starts[static_cast<size_t>(u)]);
    const size_t e = static_cast<size_t>(u) + 1 < units.size()
                         ? static_cast<size_t>(stats.unit_starts[static_cast<size_t>(u) + 1])
                         : rows.size();
    starts.push_back(static_cast<int64_t>(mine.size()));
    mine.insert(mine.end(), rows.begin() + static_cast<std::ptrdiff_t>(b),
                rows.begin() + static_cast<std::ptrdiff_t>(e));
  }
  stats.unit_starts = starts;
  return mine;
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
  if (groups_rows(stats, rows))  // P^T is linear: P^T sum_{b in u} g_b = sum_{b in u} P^T g_b
    return unit_weighted_sum(
        psg, ds, rows, stats->unit_starts, micro_batch, pad_id, dp,
        flat_only(dp, "DP-SFT's projected sum"), {}, stats, blocks[0].size(1),
        [&] { return psg.project(blocks); }, nullptr);
  const torch::TensorOptions f32 = psg.params()[0].param.options().dtype(torch::kFloat32);
  torch::Tensor sum = torch::zeros({blocks[0].size(1)}, f32), gs;
  clipped_loop(
      psg, ds, rows, micro_batch, pad_id, dp, flat_only(dp, "DP-SFT's projected sum"), stats,
      [&] {
        gs = psg.project(blocks);  // (B, k): g^s_i = P^T g_i
        return gs.norm(2, 1).unsqueeze(1);
      },
      [&](const torch::Tensor& W) { sum += (gs * W).sum(0); });
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
                     static_cast<double>(st.dropped), st.clipped_norm_mean * n,
                     static_cast<double>(st.clipped), static_cast<double>(st.unclipped)},
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
  st.clipped = static_cast<int64_t>(std::llround(a[6]));
  st.unclipped = static_cast<int64_t>(std::llround(a[7]));
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
