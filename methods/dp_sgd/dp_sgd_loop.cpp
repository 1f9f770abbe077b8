#include "methods/dp_sgd/dp_sgd_loop.hpp"

#include <spdlog/spdlog.h>

#include <optional>

#include "core/dist/world.hpp"
#include "core/eval/grad_diagnostics.hpp"
#include "core/run/run_dir.hpp"
#include "core/train/adaptive_clip.hpp"
#include "core/train/privatize.hpp"
#include "core/train/trainer.hpp"
#include "core/util/seed.hpp"

namespace dpft::dp_sgd {

namespace {

torch::Tensor flatten(const std::vector<torch::Tensor>& ts) {  // -> (p) float32
  std::vector<torch::Tensor> parts;
  for (const auto& t : ts) parts.push_back(t.reshape(-1).to(torch::kFloat32));
  return torch::cat(parts);
}

// The checkpoint's method state: what was prepared (as before adaptive clipping), and with it
// C_t and the count's noise stream.
void keep_state(train::LoopOptions& lo, nlohmann::json& prepared,
                std::optional<train::AdaptiveClip>& adapt) {
  lo.save_state = [&] {
    return adapt ? nlohmann::json{{"prepared", prepared}, {"adaptive_clip", adapt->save_state()}}
                 : prepared;
  };
  lo.load_state = [&](const nlohmann::json& j) {
    prepared = adapt ? j.at("prepared") : j;
    if (adapt) adapt->load_state(j.at("adaptive_clip"));
  };
}

}  // namespace

nlohmann::json run_dp_sgd(RunContext& ctx, train::TrainInputs& in, const train::DpSettings& dp,
                          const DpSgdOptions& o) {
  const Spec& spec = ctx.spec;
  spdlog::info("dp-sgd: sigma {:.4f} ({}), q {:.5f}, T {}, C {}, {} clipping, divisor {} ({:.1f})",
               dp.sigma, dp.sigma_source, dp.q, dp.steps, dp.clip_norm,
               privacy::name_of(dp.clipping), privacy::name_of(dp.divisor), dp.expected_batch());
  // Alg. 1's "add noise": the subsampled Gaussian mechanism on the clipped sum, one release a step
  privacy::GaussianSum& noise =
      ctx.privacy.gaussian_sum("noise", dp.release(), spec.privacy.noise_draw);
  grad::PerSampleGrads psg(in.model, o.grad);
  train::clip_groups(dp, psg.params());      // privacy.clip_groups cover every parameter (exit 2)
  std::optional<train::AdaptiveClip> adapt;  // privacy.adaptive_clip_quantile: C_t moves
  if (dp.adaptive) adapt.emplace(dp, ctx.privacy.gaussian_sum("clip-count", dp.count_release()));
  train::LoopOptions lo;
  lo.sampling = train::Sampling::kPoisson;  // line 4: Poisson lots at rate q
  lo.q = dp.q;
  lo.release = dp.release();
  lo.method_info = o.method_info;
  lo.after_training = o.after_training;
  lo.after_training_key = o.after_training_key;
  nlohmann::json prepared;
  if (o.prepare) {
    lo.before_training = [&] { prepared = o.prepare(in); };
    lo.eval_after_prepare = o.eval_after_prepare;
  }
  if (o.prepare || adapt) keep_state(lo, prepared, adapt);
  train::Trainer trainer(ctx, in, lo, &noise);
  in.model->train();
  nlohmann::json out = trainer.run([&](const std::vector<int64_t>& rows, train::BatchStats& st) {
    // Abadi et al. 2016, Alg. 1: per-sample gradients, clipped and summed ("clip gradient");
    // with several ranks, each sums its shard of the lot, whole units (core/dist/world.hpp)
    // (privacy.unit user: each sampled user's rows summed, then clipped as one; clipped_sum
    // follows st.unit_starts)
    const train::DpSettings d = adapt ? adapt->settings(dp) : dp;  // C_t, when it adapts
    std::vector<torch::Tensor> raw;
    auto g =
        train::clipped_sum(psg, in.train, train::rank_rows(rows, st), spec.train.micro_batch_size,
                           in.pad_id, d, &st, o.diagnostics ? &raw : nullptr);
    train::reduce_batch_stats(st);
    if (st.extra.contains("rows")) st.extra["rows"] = static_cast<int64_t>(rows.size());
    if (o.diagnostics) dist::all_reduce_sum(raw, "the unclipped sum (diagnostics)");
    // "add noise": N(0, sigma^2 C^2 I) once (rank 0), the shards summed, divided by the lot size
    std::vector<torch::Tensor> clipped;  // analysis only: the noise-free clipped mean
    if (o.post_process && o.clipped_for_post_process) {
      for (const auto& t : g) clipped.push_back(t.clone());
      dist::all_reduce_sum(clipped, "the clipped sum (post-processing diagnostics)");
    }
    double noise_norm = 0, signal_norm = 0;
    const int64_t units = st.batch_size;  // |B| of the whole lot, in privacy units
    const double divisor =
        train::noise_and_scale(g, d, noise, units, &st, o.diagnostics ? &noise_norm : nullptr,
                               o.diagnostics ? &signal_norm : nullptr);
    if (adapt) {  // Andrew et al. 2021: the noisy unclipped count released, C moved
      st.extra["clip_norm"] = d.clip_norm;
      st.extra["unclipped_fraction_noisy"] = adapt->update(st);
    }
    for (auto& t : clipped) t.div_(divisor);
    if (o.post_process)
      o.post_process(psg.params(), g, d.noise_std() / divisor, st,
                     o.clipped_for_post_process ? &clipped : nullptr);
    if (o.diagnostics && !rows.empty() && dist::is_root())
      st.extra["diagnostics"] = eval::dp_sgd_step(
          flatten(g), flatten(raw) / static_cast<double>(units), signal_norm, noise_norm);
    return g;  // "descent": the trainer's optimizer step
  });
  if (o.diagnostics)
    out[kNonPrivate]["diagnostics"] = eval::summarize_history(out[kNonPrivate]["history"]);
  out["privacy"] = dp.to_json();
  out["privacy"]["secure_noise"] = spec.privacy.secure_noise;
  out["privacy"]["noise_draw"] = privacy::name_of(spec.privacy.noise_draw);
  if (o.prepare) out[o.prepare_key] = prepared;
  return out;
}

}  // namespace dpft::dp_sgd
