// Method `sgd`: non-private fine-tuning (the upper bound, and pretraining). The gradient of a
// batch is the mean of the per-sample losses' gradients by ordinary autograd, or, with
// `clip: true`, the mean of per-sample gradients clipped to privacy.clip_norm (clip-only, no
// noise). Batches are epochs of shuffled rows (`sampling: shuffle`) or Poisson draws at rate
// q = batch_size / N (`sampling: poisson`, DP-SGD's batches). Nothing private is released: the
// ledger records a non-private release, so eps is reported as inf.
#include "core/config/fields.hpp"
#include "core/config/spec.hpp"
#include "core/dist/world.hpp"
#include "core/lm/objective.hpp"
#include "core/train/privatize.hpp"
#include "core/train/trainer.hpp"
#include "core/util/clock.hpp"
#include "methods/method.hpp"

namespace dpft {

namespace {

class SgdMethod : public MethodOf<SgdMethod> {
 public:
  std::string name() const override { return "sgd"; }
  bool trains_encoders() const override { return true; }
  std::string label() const override { return "SGD"; }

  void configure(Fields& f) override {
    // shuffle (epochs of batch_size rows) | poisson (rate batch_size / N)
    f.get_enum("sampling", sampling_, train::kSamplingNames);
    f.get("clip", clip_);  // clip per-sample gradients to privacy.clip_norm (no noise)
  }

  // T non-private releases (sigma 0: the run reports epsilon inf whatever privacy.epsilon
  // says, and so does `dpft account --spec`); keeps the clip-only settings.
  std::vector<privacy::Release> plan(const Spec& spec, int64_t n, const Inheritance&) override {
    dp_ = train::DpSettings();  // clip-only settings: no noise, divisor = realised batch size
    dp_.sigma = 0;
    dp_.q = std::min(1.0, static_cast<double>(spec.train.batch_size) /
                              static_cast<double>(std::max<int64_t>(n, 1)));
    dp_.clip_norm = spec.privacy.clip_norm;
    dp_.clipping = spec.privacy.clipping;
    dp_.divisor = privacy::NoiseDivisor::kRealized;
    dp_.dataset_size = n;
    dp_.steps = spec.train.steps;
    dp_.sigma_source = "non-private";
    return {dp_.release(spec.train.steps)};
  }

  nlohmann::json plan_settings() const override { return dp_.to_json(); }

  nlohmann::json run(RunContext& ctx, train::TrainInputs& in) override {
    const Spec& spec = ctx.spec;
    const train::DpSettings& dp = dp_;
    train::LoopOptions lo;
    lo.sampling = sampling_;
    lo.q = dp.q;
    lo.batch_size = spec.train.batch_size;
    lo.release = dp.release();  // non-private: eps = inf, whatever privacy.epsilon says
    lo.method_info = {{"sampling", enum_name(sampling_, train::kSamplingNames)}, {"clip", clip_}};
    // Each step is a release without noise: recorded as non-private (epsilon inf).
    privacy::NonPrivate& step_release = ctx.privacy.non_private(*lo.release);
    train::Trainer trainer(ctx, in, lo, nullptr);
    std::unique_ptr<grad::PerSampleGrads> psg;
    if (clip_) psg = std::make_unique<grad::PerSampleGrads>(in.model);
    std::vector<torch::Tensor> params = trainer.params();
    in.model->train();
    auto gradient = [&](const std::vector<int64_t>& rows, train::BatchStats& st) {
      double denom = static_cast<double>(std::max<size_t>(rows.size(), 1));
      step_release.release();
      if (psg) {
        auto g = train::clipped_sum(*psg, in.train, dist::shard(rows), spec.train.micro_batch_size,
                                    in.pad_id, dp, &st);
        train::reduce_batch_stats(st);
        dist::all_reduce_sum(g, "the sum of clipped gradients");
        for (auto& t : g) t.div_(denom);
        return g;
      }
      const std::vector<int64_t> mine = dist::shard(rows);  // this rank's share of the batch
      std::vector<torch::Tensor> g = train::mean_gradient(
          *in.model, params, in.train, mine, spec.train.micro_batch_size, in.pad_id, denom, st);
      dist::all_reduce_sum(g, "the batch gradient");
      train::reduce_batch_stats(st);
      return g;
    };
    nlohmann::json out = trainer.run(gradient);
    out["privacy"] = dp.to_json();
    return out;
  }

 private:
  train::Sampling sampling_ = train::Sampling::kShuffle;
  bool clip_ = false;
  train::DpSettings dp_;
};

}  // namespace

std::unique_ptr<Method> make_sgd_method() {
  return std::make_unique<SgdMethod>();
}

}  // namespace dpft
