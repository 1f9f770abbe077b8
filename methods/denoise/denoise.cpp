// Method `denoise`: DP-SGD whose released gradient is post-processed layer by layer by RMT
// shrinkage of its singular values before the optimizer sees it (paper 003, Algorithm 1; the
// shrinker is core/denoise/rmt.hpp, Eqs. 3, 7-9). Everything of dp-sgd is unchanged (Poisson
// sampling, clipping, noise sigma C, division, one ledger release per step): denoising reads
// only the released gradient, so it is post-processing and spends no privacy.
//   Alg. 1, "Denoise the gradient": for each 2-D block W (n x m) of the trainable linears
//   (full fine-tuning: each weight; LoRA: A and B separately), g~_W <- Denoise(g~_W) with
//   sigma_e = sigma C / divisor, the per-entry noise std of the released (divided) gradient
//   (docs/denoise.md). Embeddings and heads are left out unless apply_to names them (Sec. 3.2).
#include <cmath>

#include <spdlog/spdlog.h>

#include "core/config/fields.hpp"
#include "core/config/spec.hpp"
#include "core/denoise/rmt.hpp"
#include "core/model/peft.hpp"
#include "core/run/run_dir.hpp"
#include "core/util/enum_names.hpp"
#include "core/util/error.hpp"
#include "core/util/strings.hpp"
#include "methods/dp_sgd/dp_sgd_loop.hpp"
#include "methods/method.hpp"

namespace dpft {

namespace {

class DenoiseMethod : public MethodOf<DenoiseMethod, StepReleaseMethod> {
 public:
  std::string name() const override { return "denoise"; }
  bool trains_encoders() const override { return true; }
  std::string label() const override { return "DP-SGD+Denoise"; }
  bool steps_by_dp_sgd() const override { return true; }  // train::clipped_sum (run_dp_sgd)

  void configure(Fields& f) override {
    f.get_enum("grad_mode", grad_.mode, grad::kGradModeNames);
    f.get("kappa", opts_.kappa, Range::at_least(1));   // denoise when lambda_1 >= kappa * edge
    f.get("norm_correction", opts_.norm_correction);   // Eq. 9's rescaling (false: "unscaled")
    f.get_enum("svd", opts_.svd, denoise::kSvdNames);  // exact | randomized (top-k)
    f.get("rank", opts_.rank, Range::closed(0, 1e5));  // randomized SVD's k (0 = adaptive)
    // module names; [] = every trainable linear block except embeddings and heads
    f.get("apply_to", apply_to_);
    f.get("diagnostics", diagnostics_);  // analysis only: per-block Improvement vs the clipped mean
    // The diagnostics report every block's lambda~_1 / edge: eigvalsh; otherwise the cheaper
    // Cholesky certificate makes the same decisions (core/denoise/rmt.hpp).
    opts_.screen = diagnostics_ ? denoise::Screen::kEigen : denoise::Screen::kCholesky;
  }

  std::vector<privacy::Release> plan(const Spec& spec, int64_t n,
                                     const Inheritance& inherited) override {
    auto r = StepReleaseMethod::plan(spec, n, inherited);
    DPFT_CHECK_AS(ConfigError, dp().sigma > 0,
                  "method denoise shrinks the noise of DP-SGD's gradient, and this run adds none "
                  "(sigma 0: privacy.epsilon is inf); use method dp-sgd (or sgd) for a "
                  "non-private run");
    return r;
  }

  nlohmann::json run(RunContext& ctx, train::TrainInputs& in) override {
    dp_sgd::DpSgdOptions o;
    o.grad = grad_;
    o.method_info = {{"kappa", opts_.kappa},
                     {"norm_correction", opts_.norm_correction},
                     {"svd", enum_name(opts_.svd, denoise::kSvdNames)}};
    std::vector<size_t>& blocks = blocks_;  // indices (params order) of the 2-D blocks
    bool chosen = false;
    o.clipped_for_post_process = diagnostics_;
    o.post_process = [&](const std::vector<grad::GradParam>& params, std::vector<torch::Tensor>& g,
                         double sigma_e, train::BatchStats& st,
                         const std::vector<torch::Tensor>* clipped) {
      if (!chosen) {
        blocks = choose(params);
        chosen = true;
      }
      std::vector<torch::Tensor> ys;
      for (size_t i : blocks) ys.push_back(g[i]);
      std::vector<denoise::Outcome> out;
      std::vector<torch::Tensor> d =
          denoise::denoise_batched(ys, std::vector<double>(ys.size(), sigma_e), opts_, &out);
      int64_t done = 0;
      double top_max = -1;  // over the blocks whose lambda~_1 was computed
      nlohmann::json diag;
      if (clipped) diag = diagnostics(params, g, d, *clipped, out);  // before g changes
      for (size_t j = 0; j < blocks.size(); ++j) {
        g[blocks[j]] = d[j];
        done += out[j].denoised;
        if (!std::isnan(out[j].top_over_edge)) top_max = std::max(top_max, out[j].top_over_edge);
      }
      st.extra["denoise"] = {
          {"blocks", blocks.size()},
          {"denoised", done},
          {"fraction_denoised", blocks.empty() ? 0.0 : double(done) / double(blocks.size())},
          {"sigma_e", sigma_e},
          // null: every block was certified below kappa by the screen
          {"max_top_over_edge", top_max >= 0 ? nlohmann::json(top_max) : nlohmann::json()}};
      if (clipped) st.extra["denoise"]["diagnostics"] = diag;
    };
    nlohmann::json res = dp_sgd::run_dp_sgd(ctx, in, dp(), o);
    if (diagnostics_) {  // means over steps of the whole-gradient numbers
      double imp = 0, frac = 0;
      int64_t n = 0;
      for (const auto& h : res[kNonPrivate]["history"]) {
        const auto* d = h.contains("denoise") ? &h["denoise"] : nullptr;
        if (!d || !d->contains("diagnostics")) continue;
        imp += (*d)["diagnostics"]["improvement"].get<double>();
        frac += (*d)["fraction_denoised"].get<double>();
        ++n;
      }
      if (n > 0)
        res[kNonPrivate]["denoise_diagnostics"] = {{"improvement_mean", imp / double(n)},
                                                   {"fraction_denoised_mean", frac / double(n)},
                                                   {"steps", n}};
    }
    return res;
  }

 private:
  std::vector<size_t> choose(const std::vector<grad::GradParam>& params) const {
    std::vector<size_t> out;
    for (size_t i = 0; i < params.size(); ++i) {
      const auto& p = params[i];
      if (p.param.dim() != 2) continue;
      const std::string module = p.name.substr(0, p.name.rfind('.'));
      bool hit = false;
      if (apply_to_.empty()) {
        hit = !denoise::excluded_by_default(p.name);
      } else {
        for (const auto& t : apply_to_)
          for (std::string q = module;; q = q.substr(0, q.rfind('.'))) {
            hit = hit || model::module_matches(q, t);
            if (q.find('.') == std::string::npos) break;
          }
      }
      if (hit) out.push_back(i);
    }
    DPFT_CHECK_AS(ConfigError, !out.empty(),
                  "method.apply_to {}: no trainable 2-D gradient block to denoise (check "
                  "model.peft and method.apply_to)",
                  apply_to_.empty() ? std::string("(default)") : "[" + join(apply_to_, ", ") + "]");
    spdlog::info("denoise: {} gradient blocks (kappa {}, {} SVD, norm correction {})", out.size(),
                 opts_.kappa, enum_name(opts_.svd, denoise::kSvdNames), opts_.norm_correction);
    return out;
  }

  // Analysis only (never feeds back): per block i, Improvement_i = cos(Denoise(g~_i), gbar_i) -
  // cos(g~_i, gbar_i) against the clipped mean gradient gbar (the paper's formula repeats g~ by
  // a typo; its text says clipped), lambda_1 / edge and whether it was denoised; and the
  // whole-gradient Improvement over every trainable parameter (Figs. 3, 10-12).
  nlohmann::json diagnostics(const std::vector<grad::GradParam>& params,
                             const std::vector<torch::Tensor>& g,
                             const std::vector<torch::Tensor>& denoised,
                             const std::vector<torch::Tensor>& clipped,
                             const std::vector<denoise::Outcome>& out) const {
    auto cosine = [](const torch::Tensor& a, const torch::Tensor& b) {
      const double na = a.norm().item<double>(), nb = b.norm().item<double>();
      return na > 0 && nb > 0 ? (a * b).sum().item<double>() / (na * nb) : 0.0;
    };
    nlohmann::json layers = nlohmann::json::array();
    double dot_before = 0, dot_after = 0, nn_before = 0, nn_after = 0, nn_bar = 0;
    std::vector<int64_t> where(g.size(), -1);
    for (size_t j = 0; j < blocks_.size(); ++j) where[blocks_[j]] = static_cast<int64_t>(j);
    for (size_t i = 0; i < g.size(); ++i) {
      const torch::Tensor b = g[i].to(torch::kFloat64), c = clipped[i].to(torch::kFloat64);
      const torch::Tensor a = where[i] >= 0 ? denoised[where[i]].to(torch::kFloat64) : b;
      dot_before += (b * c).sum().item<double>();
      dot_after += (a * c).sum().item<double>();
      nn_before += b.pow(2).sum().item<double>();
      nn_after += a.pow(2).sum().item<double>();
      nn_bar += c.pow(2).sum().item<double>();
      if (where[i] >= 0) {
        const auto& oc = out[where[i]];
        layers.push_back({{"name", params[i].name},
                          {"denoised", oc.denoised},
                          {"top_over_edge", oc.top_over_edge},
                          {"improvement", cosine(a, c) - cosine(b, c)}});
      }
    }
    auto cos = [&](double dot, double nn) {
      return nn > 0 && nn_bar > 0 ? dot / std::sqrt(nn * nn_bar) : 0.0;
    };
    return {{"improvement", cos(dot_after, nn_after) - cos(dot_before, nn_before)},
            {"cosine_before", cos(dot_before, nn_before)},
            {"cosine_after", cos(dot_after, nn_after)},
            {"layers", layers}};
  }

  grad::GradOptions grad_;
  denoise::Options opts_;
  bool diagnostics_ = false;
  std::vector<size_t> blocks_;
  std::vector<std::string> apply_to_;
};

}  // namespace

std::unique_ptr<Method> make_denoise_method() {
  return std::make_unique<DenoiseMethod>();
}

}  // namespace dpft
