// Method `gep`: gradient embedding perturbation (Yu et al. 2021, "Do not let privacy overbill
// utility"), as the PE-SGD paper compares it (Sec. 4.1, 5.1, C.3): E = top-k left singular
// vectors of the synthetic gradients G (power iteration, k = 50, fixed D); each private
// gradient splits into coefficients c_j = E^T h_j and residual r_j = h_j - E c_j, clipped to
// C1 = privacy.clip_norm (1.0) and C2 = residual_clip (0.2); Gaussian noise on both sums with
// std sigma sqrt(2) C1 and sigma sqrt(2) C2, so that the pair is one Gaussian mechanism of
// multiplier sigma (one ledger release per step); g = (E c + r) / divisor. residual: false is
// the no-residual variant (c alone, std sigma C1).
#include "core/config/fields.hpp"
#include "core/config/spec.hpp"
#include "core/util/error.hpp"
#include "core/util/seed.hpp"
#include "methods/method.hpp"
#include "methods/pe_sgd/projection_loop.hpp"

namespace dpft {

namespace {

class GepMethod : public MethodOf<GepMethod, StepReleaseMethod> {
 public:
  std::string name() const override { return "gep"; }
  std::string label() const override { return g_.residual ? "GEP" : "GEP-NoResidual"; }
  void configure(Fields& f) override {
    so_.configure(f, /*evolution=*/false);
    f.get("k", k_, Range::at_least(1));                // embedding dimension
    f.get("power_iters", iters_, Range::at_least(1));  // subspace-iteration products per step
    f.get("residual", g_.residual);                    // release the clipped residual too
    f.get("residual_clip", g_.residual_clip, Range::above(0));  // C2
  }
  nlohmann::json run(RunContext& ctx, train::TrainInputs& in) override {
    const project::GepOptions g = gep_options(ctx.spec);
    const uint64_t seed = derive_seed(static_cast<uint64_t>(ctx.spec.seed), "gep-basis");
    nlohmann::json info = {
        {"name", name()},        {"label", label()},       {"k", k_},
        {"power_iters", iters_}, {"residual", g.residual}, {"residual_clip", g.residual_clip}};
    nlohmann::json priv = {
        {"sensitivity", "clip"},
        {"coefficient_clip", g.coef_clip},
        {"residual_clip", g.residual ? nlohmann::json(g.residual_clip) : nlohmann::json(nullptr)},
        {"noise_split", g.residual ? "coefficients and residual each sigma*sqrt(2) times their "
                                     "clip bound: one Gaussian mechanism of multiplier sigma"
                                   : "coefficients only, sigma times their clip bound"}};
    return pe_sgd::run_projection(
        ctx, in, dp(), so_, info, priv, [&, g, seed](const pe_sgd::ProjectionInput& x) {
          torch::Tensor E =
              project::power_basis(x.Gs, k_, iters_, seed + static_cast<uint64_t>(x.step));
          return project::gep_project(
              E, x.Hs, g, {x.sigma, privacy::ColumnScaling::kClip, g.coef_clip, x.divisor},
              x.noise);
        });
  }

 protected:
  void set_noise_std(train::DpSettings& dp, const Spec& spec) const override {
    auto [std_c, std_r] = project::gep_noise_stds(gep_options(spec), dp.sigma);
    dp.noise_std_override = std_c;
    dp.noise_std_residual = std_r;
  }

 private:
  // The options with C1 = privacy.clip_norm (ConfigError unless finite).
  project::GepOptions gep_options(const Spec& spec) const {
    project::GepOptions g = g_;
    g.coef_clip = spec.privacy.clip_norm;
    DPFT_CHECK_AS(ConfigError, std::isfinite(g.coef_clip), "gep needs a finite privacy.clip_norm");
    return g;
  }

  pe_sgd::SyntheticOptions so_;
  project::GepOptions g_;
  int64_t k_ = 50, iters_ = 20;
};

}  // namespace

std::unique_ptr<Method> make_gep_method() {
  return std::make_unique<GepMethod>();
}

}  // namespace dpft
