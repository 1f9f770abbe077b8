// Method `dp-sgd`: DP-SGD (Abadi et al. 2016, Alg. 1) with any optimizer on the privatised
// gradient (DP-AdamW = AdamW on it): Poisson sampling at rate q, per-sample clipping (or
// normalisation) to C, one Gaussian noise draw N(0, sigma^2 C^2) per logical batch, division by
// q N (or the realised size). sigma is calibrated by the ledger's accountant for (epsilon,
// delta, q, T) unless given; with epsilon inf it clips without noise and reports eps = inf.
#include "core/config/fields.hpp"
#include "core/config/spec.hpp"
#include "core/run/run_context.hpp"
#include "core/train/trainer.hpp"
#include "core/util/seed.hpp"
#include "methods/method.hpp"

namespace dpft {

namespace {

class DpSgdMethod : public Method {
 public:
  std::string name() const override { return "dp-sgd"; }
  std::string label() const override { return "DP-SGD"; }

  void configure(Fields& f) override {
    f.get_choice("grad_mode", opts_.mode, {"auto", "materialize", "ghost"});
    f.get("max_materialize_mb", opts_.max_materialize_mb, Range::above(0));
  }

  YAML::Node options_yaml() const override {
    YAML::Node n;
    n["grad_mode"] = opts_.mode;  // per-sample norms: auto (by cost) | materialize | ghost
    n["max_materialize_mb"] =
        opts_.max_materialize_mb;  // auto uses ghost norms above this block size
    return n;
  }

  std::vector<privacy::Release> planned_releases(const Spec& spec,
                                                 const PlanInputs& in) const override {
    if (in.dataset_size <= 0) return {};
    return {train::resolve_dp(spec, in.dataset_size).release(spec.train.steps)};
  }

  nlohmann::json run(RunContext& ctx) override {
    const Spec& spec = ctx.spec;
    train::TrainInputs in = train::load_train_inputs(spec);
    train::DpSettings dp = train::resolve_dp(spec, in.train.size());
    spdlog::info(
        "dp-sgd: sigma {:.4f} ({}), q {:.5f}, T {}, C {}, {} clipping, divisor {} ({:.1f})",
        dp.sigma, dp.sigma_source, dp.q, dp.steps, dp.clip_norm, dp.clipping, dp.divisor,
        dp.expected_batch());
    privacy::NoiseSource noise(derive_seed(static_cast<uint64_t>(spec.seed), "noise"),
                               spec.privacy.secure_noise);
    grad::PerSampleGrads psg(in.model, opts_);
    train::LoopOptions lo;
    lo.sampling = "poisson";
    lo.q = dp.q;
    lo.release = dp.release();
    lo.method_info = {{"grad_mode", opts_.mode}};
    train::Trainer trainer(ctx, in, lo, &noise);
    in.model->train();
    auto gradient = [&](const std::vector<int64_t>& rows, train::BatchStats& st) {
      auto g =
          train::clipped_sum(psg, in.train, rows, spec.train.micro_batch_size, in.pad_id, dp, &st);
      train::noise_and_scale(g, dp, noise, static_cast<int64_t>(rows.size()), &st);
      return g;
    };
    nlohmann::json out = trainer.run(gradient);
    out["privacy"] = dp.to_json();
    out["privacy"]["secure_noise"] = spec.privacy.secure_noise;
    return out;
  }

 private:
  grad::GradOptions opts_;
};

}  // namespace

std::unique_ptr<Method> make_dp_sgd_method() {
  return std::make_unique<DpSgdMethod>();
}

}  // namespace dpft
