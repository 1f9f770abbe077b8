// Method `inpro`: the "InPro" baseline of the PE-SGD paper (Sec. 5.1): the biased projection
// g = G (sum_j normalize(G^T H)_j + N(0, sigma^2 I_N)) / divisor, no (G^T G)^-1, over a fixed
// synthetic set D (the same D as PE-SGD-FixSample for a seed).
#include "core/config/fields.hpp"
#include "core/config/spec.hpp"
#include "methods/method.hpp"
#include "methods/pe_sgd/projection_loop.hpp"

namespace dpft {

namespace {

class InProMethod : public MethodOf<InProMethod, StepReleaseMethod> {
 public:
  std::string name() const override { return "inpro"; }
  std::string label() const override { return "InPro"; }
  void configure(Fields& f) override { so_.configure(f, /*evolution=*/false); }
  nlohmann::json run(RunContext& ctx, train::TrainInputs& in) override {
    nlohmann::json info = {{"name", name()}, {"label", label()}};
    nlohmann::json priv = {
        {"sensitivity", "normalize"}, {"sensitivity_bound", 1.0}, {"noise_space", "R^N"}};
    return pe_sgd::run_projection(
        ctx, in, dp(), so_, info, priv, [](const pe_sgd::ProjectionInput& x) {
          return project::inpro_project(
              x.Gs, x.Hs, {x.sigma, privacy::ColumnScaling::kUnitNorm, 1.0, x.divisor}, x.noise);
        });
  }

 protected:
  void set_noise_std(train::DpSettings& dp, const Spec&) const override {
    dp.noise_std_override = dp.sigma;  // unit-norm columns: N(0, sigma^2 I_N)
  }

 private:
  pe_sgd::SyntheticOptions so_;
};

}  // namespace

std::unique_ptr<Method> make_inpro_method() {
  return std::make_unique<InProMethod>();
}

}  // namespace dpft
