#include "core/train/dp_sgd_run.hpp"

#include <spdlog/spdlog.h>

#include "core/train/trainer.hpp"
#include "core/util/seed.hpp"

namespace dpft::train {

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
  }
  Trainer trainer(ctx, in, lo, &noise);
  in.model->train();
  nlohmann::json out = trainer.run([&](const std::vector<int64_t>& rows, BatchStats& st) {
    auto g = clipped_sum(psg, in.train, rows, spec.train.micro_batch_size, in.pad_id, dp, &st);
    noise_and_scale(g, dp, noise, static_cast<int64_t>(rows.size()), &st);
    return g;
  });
  out["privacy"] = dp.to_json();
  out["privacy"]["secure_noise"] = spec.privacy.secure_noise;
  if (o.prepare) out[o.prepare_key] = prepared;
  return out;
}

}  // namespace dpft::train
