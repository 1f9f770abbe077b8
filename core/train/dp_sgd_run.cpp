#include "core/train/dp_sgd_run.hpp"

#include <spdlog/spdlog.h>

#include <map>

#include "core/train/trainer.hpp"
#include "core/util/seed.hpp"

namespace dpft::train {

namespace {

torch::Tensor flatten(const std::vector<torch::Tensor>& ts) {  // -> (p) float32
  std::vector<torch::Tensor> parts;
  for (const auto& t : ts) parts.push_back(t.reshape(-1).to(torch::kFloat32));
  return torch::cat(parts);
}

// Means over the steps of the history (resumed runs included) of each per-step diagnostic.
nlohmann::json summarize_diagnostics(const nlohmann::json& history) {
  std::map<std::string, std::pair<double, int64_t>> acc;
  int64_t steps = 0;
  for (const auto& h : history) {
    if (!h.contains("diagnostics")) continue;
    ++steps;
    for (const auto& [k, v] : h["diagnostics"].items()) {
      acc[k].first += v.get<double>();
      ++acc[k].second;
    }
  }
  nlohmann::json out = {{"steps", steps}};
  const std::map<std::string, std::string> names = {{"l2", "l2_mean"}, {"cosine", "cosine_mean"}};
  for (const auto& [k, s] : acc)
    out[names.count(k) ? names.at(k) : k] = s.first / static_cast<double>(s.second);
  return out;
}

}  // namespace

nlohmann::json run_dp_sgd(RunContext& ctx, const DpSgdRunOptions& o) {
  const Spec& spec = ctx.spec;
  TrainInputs in = load_train_inputs(spec);
  DpSettings dp = resolve_dp(spec, in.train.size());
  spdlog::info("dp-sgd: sigma {:.4f} ({}), q {:.5f}, T {}, C {}, {} clipping, divisor {} ({:.1f})",
               dp.sigma, dp.sigma_source, dp.q, dp.steps, dp.clip_norm, dp.clipping, dp.divisor,
               dp.expected_batch());
  privacy::NoiseSource noise(derive_seed(static_cast<uint64_t>(spec.seed), "noise"),
                             spec.privacy.secure_noise);
  grad::PerSampleGrads psg(in.model, o.grad);
  LoopOptions lo;
  lo.sampling = "poisson";
  lo.q = dp.q;
  lo.release = dp.release();
  lo.method_info = o.method_info;
  nlohmann::json prepared;
  if (o.prepare) {
    lo.before_training = [&] { prepared = o.prepare(in); };
    lo.save_state = [&] { return prepared; };
    lo.load_state = [&](const nlohmann::json& j) { prepared = j; };
    lo.eval_after_prepare = o.eval_after_prepare;
  }
  Trainer trainer(ctx, in, lo, &noise);
  in.model->train();
  nlohmann::json out = trainer.run([&](const std::vector<int64_t>& rows, BatchStats& st) {
    std::vector<torch::Tensor> raw;
    auto g = clipped_sum(psg, in.train, rows, spec.train.micro_batch_size, in.pad_id, dp, &st,
                         o.diagnostics ? &raw : nullptr);
    torch::Tensor signal = o.diagnostics ? flatten(g) : torch::Tensor();
    double noise_norm = 0;
    noise_and_scale(g, dp, noise, static_cast<int64_t>(rows.size()), &st,
                    o.diagnostics ? &noise_norm : nullptr);
    if (o.diagnostics && !rows.empty()) {
      torch::Tensor d = flatten(g);  // (p) the privatised gradient the optimizer gets
      DirectionError de = direction_error(d, flatten(raw) / static_cast<double>(rows.size()));
      const double s = signal.norm().item<double>();
      const double nts = s > 0 ? noise_norm / s : 0.0;
      st.extra["diagnostics"] = {{"l2", de.l2}, {"cosine", de.cosine}, {"noise_to_signal", nts}};
    }
    return g;
  });
  if (o.diagnostics) out["diagnostics"] = summarize_diagnostics(out["history"]);
  out["privacy"] = dp.to_json();
  out["privacy"]["secure_noise"] = spec.privacy.secure_noise;
  if (o.prepare) out[o.prepare_key] = prepared;
  return out;
}

}  // namespace dpft::train
