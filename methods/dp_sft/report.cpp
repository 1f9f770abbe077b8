#include "methods/dp_sft/report.hpp"

#include <cmath>

#include "core/run/run_dir.hpp"

namespace dpft::dp_sft {

void noise_and_divide(std::vector<torch::Tensor>& g, const train::DpSettings& dp,
                      privacy::GaussianSum& mechanism, int64_t lot, train::BatchStats& st,
                      bool diagnostics) {
  double noise_norm = 0, sum_norm = 0;
  const double div =
      train::noise_and_scale(g, dp, mechanism, lot, &st, diagnostics ? &noise_norm : nullptr,
                             diagnostics ? &sum_norm : nullptr);
  if (!diagnostics) return;
  double sq = 0;
  for (const auto& t : g) sq += t.to(torch::kFloat64).pow(2).sum().item<double>();
  st.extra["dp_sft"] = {{"norm_before_clip_mean", st.grad_norm_mean},
                        {"norm_after_clip_mean", st.clipped_norm_mean},
                        {"sum_norm", sum_norm},
                        {"noise_norm", noise_norm},
                        {"noised_sum_norm", std::sqrt(sq) * div}};
}

namespace {

// Stage 2's residual ||g - P P^T g|| / ||g||: mean, first and last step (null: none recorded).
nlohmann::json residual_summary(const nlohmann::json& history) {
  std::vector<double> r;
  for (const auto& h : history)
    if (h.contains("dp_sft") && h["dp_sft"].contains("residual"))
      r.push_back(h["dp_sft"]["residual"].get<double>());
  if (r.empty()) return nullptr;
  double mean = 0;
  for (double v : r) mean += v / static_cast<double>(r.size());
  return {{"residual_mean", mean},
          {"residual_first", r.front()},
          {"residual_last", r.back()},
          {"steps", r.size()}};
}

}  // namespace

void report(nlohmann::json& out, const Report& r, const SubspaceKeeper& keeper) {
  if (r.o.diagnostics) {
    nlohmann::json s = residual_summary(out[kNonPrivate]["history"]);
    if (!s.is_null()) out[kNonPrivate]["dp_sft_diagnostics"] = s;
  }
  nlohmann::json& p = out["privacy"];
  p = {{"stage2", r.dp2.to_json()}, {"accounting", r.accounting}};
  if (r.dp1.steps > 0) p["stage1"] = r.dp1.to_json();
  if (r.o.source == SubspaceSource::kPublic)
    p["stage1_public"] = {{"data", r.spec.data.public_data.path},
                          {"examples", r.public_examples},
                          {"steps", r.T1},
                          {"batch_size", r.spec.train.batch_size}};
  p["secure_noise"] = r.spec.privacy.secure_noise;
  p["noise_draw"] = privacy::name_of(r.spec.privacy.noise_draw);
  if (keeper.blocks().empty()) return;
  const project::Subspace& sub = keeper.subspace();
  nlohmann::json sv = nlohmann::json::array();
  if (sub.singular_values.defined())
    for (int64_t i = 0; i < sub.singular_values.numel(); ++i)
      sv.push_back(sub.singular_values[i].item<double>());
  out["subspace"] = {{"k", sub.k()},
                     {"dim", sub.dim()},
                     {"source", sub.source},
                     {"energy_top_k", sub.energy_top_k()},
                     {"singular_values", sv}};
  if (r.o.source == SubspaceSource::kFile) {
    out["subspace"]["file"] = r.o.file;
    out["subspace"]["provenance"] = r.source_file;
  }
}

}  // namespace dpft::dp_sft
