// Method `pe-sgd`: PE-SGD (Zou et al., ICLR 2026, Alg. 1 with Alg. 3's functions; Alg. 2 with
// `generator_model`). Each step projects the private per-sample gradients H of a Poisson batch
// onto the span of the per-sample gradients G of a synthetic set D:
//   Z = (G^T G + eta I)^-1 G^T H, columns normalised (or clipped to C), z = sum + N(0, sigma^2
//   I_N), update direction G z / divisor (Eq. 2-3, Alg. 1 lines 8-9); then SampleSelection on z and
//   regeneration of D by the updated model (line 10). Variants: noise_placement (Sec. 5.4),
//   evolve: false (PE-SGD-FixSample), sensitivity normalize | clip, N, L, eta.
// The arithmetic lives in core/project/projection.hpp, the loop in projection_loop.hpp.
#include <cmath>

#include "core/config/fields.hpp"
#include "core/config/spec.hpp"
#include "core/util/error.hpp"
#include "methods/method.hpp"
#include "methods/pe_sgd/projection_loop.hpp"

namespace dpft {

namespace {

using privacy::ColumnScaling;
using privacy::NoisePlacement;

class PeSgdMethod : public MethodOf<PeSgdMethod, StepReleaseMethod> {
 public:
  PeSgdMethod() {  // PE-SGD's defaults: D evolves, L = 2
    so_.evolve = true;
    so_.fold = 2;
  }
  std::string name() const override { return "pe-sgd"; }

  std::string label() const override {
    std::string l = so_.evolve ? "PE-SGD" : "PE-SGD-FixSample";
    if (placement_ == NoisePlacement::kInnerProduct) l += "-NoisyInnerproduct";
    if (placement_ == NoisePlacement::kPrivateGradient) l += "-NoisyRealGrad";
    return l;
  }

  void configure(Fields& f) override {
    so_.configure(f, /*evolution=*/true);
    f.get("eta", eta_, Range::at_least(0));  // ridge term of G^T G + eta I (footnote 1)
    // coefficients | inner_product | private_gradient
    f.get_enum("noise_placement", placement_, privacy::kNoisePlacementNames);
    // normalize (bound 1) | clip (privacy.clip_norm)
    f.get_enum("sensitivity", scaling_, privacy::kColumnScalingNames);
  }

  nlohmann::json run(RunContext& ctx, train::TrainInputs& in) override {
    const double C = ctx.spec.privacy.clip_norm;
    nlohmann::json info = {{"name", name()},
                           {"label", label()},
                           {"noise_placement", privacy::name_of(placement_)},
                           {"sensitivity", privacy::name_of(scaling_)},
                           {"eta", eta_},
                           {"evolve", so_.evolve}};
    nlohmann::json priv = {
        {"sensitivity", privacy::name_of(scaling_)},
        {"sensitivity_bound", project::column_bound(scaling_, C)},
        {"noise_space", placement_ == NoisePlacement::kPrivateGradient ? "R^p" : "R^N"}};
    return pe_sgd::run_projection(
        ctx, in, dp(), so_, info, priv, [&](const pe_sgd::ProjectionInput& x) {
          project::GramSolver solver(x.Gs, eta_);
          project::NoiseOptions o{x.sigma, scaling_, C, x.divisor};
          return project::pe_project(x.Gs, x.Hs, solver, placement_, o, x.noise);
        });
  }

 protected:
  void set_noise_std(train::DpSettings& dp, const Spec& spec) const override {
    const double C = spec.privacy.clip_norm;
    DPFT_CHECK_AS(ConfigError, scaling_ == ColumnScaling::kUnitNorm || std::isfinite(C),
                  "method.sensitivity clip needs a finite privacy.clip_norm, got {}", C);
    dp.noise_std_override = dp.sigma * project::column_bound(scaling_, C);
  }

 private:
  pe_sgd::SyntheticOptions so_;
  double eta_ = 1e-6;
  NoisePlacement placement_ = NoisePlacement::kCoefficients;
  ColumnScaling scaling_ = ColumnScaling::kUnitNorm;
};

}  // namespace

std::unique_ptr<Method> make_pe_sgd_method() {
  return std::make_unique<PeSgdMethod>();
}

}  // namespace dpft
