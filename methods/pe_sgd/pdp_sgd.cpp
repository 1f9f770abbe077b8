// Method `pdp-sgd`: projected DP-SGD (Zhou et al. 2021, "Bypassing the ambient dimension"), as
// the PE-SGD paper compares it (Sec. 4.1, 5.1): per-sample gradients clipped to C, summed,
// Gaussian noise N(0, (sigma C)^2 I_p) added, then projected onto the top-k eigenspace E of
// G G^T of a fixed synthetic set D: g = E E^T (sum_j clip(h_j) + noise) / divisor, k = 50.
// G is recomputed on the current model every step.
#include "core/config/fields.hpp"
#include "core/config/spec.hpp"
#include "core/util/error.hpp"
#include "methods/method.hpp"
#include "methods/pe_sgd/projection_loop.hpp"

namespace dpft {

namespace {

class PdpSgdMethod : public MethodOf<PdpSgdMethod, StepReleaseMethod> {
 public:
  std::string name() const override { return "pdp-sgd"; }
  std::string label() const override { return "PDP-SGD"; }
  void configure(Fields& f) override {
    so_.configure(f, /*evolution=*/false);
    f.get("k", k_, Range::at_least(1));  // eigenspace dimension
  }
  nlohmann::json run(RunContext& ctx, train::TrainInputs& in) override {
    const double C = ctx.spec.privacy.clip_norm;
    nlohmann::json info = {{"name", name()}, {"label", label()}, {"k", k_}};
    nlohmann::json priv = {
        {"sensitivity", "clip"}, {"sensitivity_bound", C}, {"noise_space", "R^p"}};
    return pe_sgd::run_projection(
        ctx, in, dp(), so_, info, priv, [&](const pe_sgd::ProjectionInput& x) {
          torch::Tensor E = project::top_basis(x.Gs, k_);
          return project::pdp_project(
              E, x.Hs, {x.sigma, privacy::ColumnScaling::kClip, C, x.divisor}, x.noise);
        });
  }

 protected:
  void set_noise_std(train::DpSettings& dp, const Spec& spec) const override {
    DPFT_CHECK_AS(ConfigError, std::isfinite(spec.privacy.clip_norm),
                  "pdp-sgd needs a finite privacy.clip_norm");
    dp.noise_std_override = dp.sigma * spec.privacy.clip_norm;  // N(0, (sigma C)^2 I_p)
  }

 private:
  pe_sgd::SyntheticOptions so_;
  int64_t k_ = 50;
};

}  // namespace

std::unique_ptr<Method> make_pdp_sgd_method() {
  return std::make_unique<PdpSgdMethod>();
}

}  // namespace dpft
