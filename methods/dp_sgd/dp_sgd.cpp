// Method `dp-sgd`: DP-SGD (Abadi et al. 2016, Alg. 1) with any optimizer on the privatised
// gradient (DP-AdamW = AdamW on it): Poisson sampling at rate q, per-sample clipping (or
// normalisation) to C, one Gaussian noise draw N(0, sigma^2 C^2) per logical batch, division by
// q N (or the realised size). sigma is calibrated by the ledger's accountant for (epsilon,
// delta, q, T) unless given; with epsilon inf it clips without noise and reports eps = inf.
#include "core/config/fields.hpp"
#include "core/config/spec.hpp"
#include "methods/dp_sgd/dp_sgd_loop.hpp"
#include "methods/method.hpp"

namespace dpft {

namespace {

class DpSgdMethod : public MethodOf<DpSgdMethod, StepReleaseMethod> {
 public:
  std::string name() const override { return "dp-sgd"; }
  bool trains_encoders() const override { return true; }
  std::string label() const override { return "DP-SGD"; }
  bool steps_by_dp_sgd() const override { return true; }  // train::clipped_sum (run_dp_sgd)

  void configure(Fields& f) override {
    f.get_enum("grad_mode", opts_.mode, grad::kGradModeNames);  // auto | materialize | ghost
    // auto uses ghost norms above this block size
    f.get("max_materialize_mb", opts_.max_materialize_mb, Range::above(0));
    f.get("diagnostics", diagnostics_);  // analysis only: per-step cosine / l2 to the true gradient
  }

  nlohmann::json run(RunContext& ctx, train::TrainInputs& in) override {
    dp_sgd::DpSgdOptions o;
    o.grad = opts_;
    o.method_info = {{"grad_mode", enum_name(opts_.mode, grad::kGradModeNames)}};
    o.diagnostics = diagnostics_;
    return dp_sgd::run_dp_sgd(ctx, in, dp(), o);
  }

 private:
  grad::GradOptions opts_;
  bool diagnostics_ = false;
};

}  // namespace

std::unique_ptr<Method> make_dp_sgd_method() {
  return std::make_unique<DpSgdMethod>();
}

}  // namespace dpft
