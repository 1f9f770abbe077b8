// Method `sft+dp-sgd`: the "SFT + DP-SGD" baseline of the PE-SGD paper (App. D.8, Table 9):
// generate a synthetic set D with the untrained model (RANDOM_API, as PE-SGD's initial set),
// fine-tune on it without privacy (sft_epochs), then run DP-SGD exactly as method `dp-sgd`.
// D is generated from the model alone (no private data), so the SFT stage releases nothing.
#include "core/config/fields.hpp"
#include "core/config/spec.hpp"
#include "core/project/projection_run.hpp"
#include "core/run/run_context.hpp"
#include "core/train/trainer.hpp"
#include "core/util/seed.hpp"
#include "methods/method.hpp"

namespace dpft {

namespace {

class SftDpSgdMethod : public Method {
 public:
  std::string name() const override { return "sft+dp-sgd"; }
  std::string label() const override { return "SFT+DP-SGD"; }

  void configure(Fields& f) override {
    so_.sft_epochs = 1;
    so_.configure(f, /*evolution=*/false);
  }
  YAML::Node options_yaml() const override { return so_.to_yaml(false); }

  std::vector<privacy::Release> planned_releases(const Spec& spec,
                                                 const PlanInputs& in) const override {
    if (in.dataset_size <= 0) return {};
    return {train::resolve_dp(spec, in.dataset_size).release(spec.train.steps)};
  }

  nlohmann::json run(RunContext& ctx) override {
    const Spec& spec = ctx.spec;
    train::TrainInputs in = train::load_train_inputs(spec);
    train::DpSettings dp = train::resolve_dp(spec, in.train.size());
    privacy::NoiseSource noise(derive_seed(static_cast<uint64_t>(spec.seed), "noise"),
                               spec.privacy.secure_noise);
    grad::PerSampleGrads psg(in.model, so_.grad);
    nlohmann::json synthetic;
    train::LoopOptions lo;
    lo.sampling = "poisson";
    lo.q = dp.q;
    lo.release = dp.release();
    lo.method_info = {{"name", name()}, {"label", label()}, {"sft_epochs", so_.sft_epochs}};
    lo.before_training = [&] { synthetic = project::synthetic_sft(ctx, in, so_); };
    lo.save_state = [&] { return synthetic; };
    lo.load_state = [&](const nlohmann::json& j) { synthetic = j; };
    train::Trainer trainer(ctx, in, lo, &noise);
    in.model->train();
    nlohmann::json out = trainer.run([&](const std::vector<int64_t>& rows, train::BatchStats& st) {
      auto g =
          train::clipped_sum(psg, in.train, rows, spec.train.micro_batch_size, in.pad_id, dp, &st);
      train::noise_and_scale(g, dp, noise, static_cast<int64_t>(rows.size()), &st);
      return g;
    });
    out["privacy"] = dp.to_json();
    out["privacy"]["secure_noise"] = spec.privacy.secure_noise;
    out["synthetic"] = synthetic;
    return out;
  }

 private:
  project::SyntheticOptions so_;
};

}  // namespace

std::unique_ptr<Method> make_sft_dp_sgd_method() {
  return std::make_unique<SftDpSgdMethod>();
}

}  // namespace dpft
