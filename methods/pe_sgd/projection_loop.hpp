// The training loop of the gradient-projection methods of the PE-SGD paper (Zou et al., ICLR
// 2026): pe-sgd (Algorithm 1; Algorithm 2 with a frozen generator), pdp-sgd, gep and inpro.
// run_projection() follows Algorithm 1:
//   line 1     D <- SynDataGeneration(empty, N, L, m)                       initial_set()
//   line 2     m <- m fine-tuned on D (non-private, method.sft_epochs)      initial_set()
//   line 3     sigma from (epsilon, delta, T, q)                            Method::plan
//   line 4-5   for t: B(t) <- PoissonSubSampling(B, q)                      core/train/trainer
//   line 6     G <- per-sample gradients of D on m                          step()
//   line 7     H <- per-sample gradients of B(t) on m                       step()
//              (privacy.unit user: one column per sampled user, its rows' gradients summed)
//   line 8     z <- the method's projection of H onto G, noised             ProjectFn
//   line 9     phi <- phi + lr G z / divisor (the run's optimizer)          core/train/trainer
//   line 10    D <- SynDataGeneration(SampleSelection(z), N, L, m)          evolve(), lazily at
//              the start of step t + 1, so the last step generates no unused set
// The arithmetic of line 8 is in core/project/projection.hpp, the per-sample gradients in
// core/grad/, the diagnostics in core/eval/grad_diagnostics.hpp.
//
// Privacy: per step one subsampled Gaussian release (the method's projection decides where the
// noise goes; its std is DpSettings::noise_std, checked against what it drew); D, its
// generation and SampleSelection only read the model (DP) and z (DP): post-processing.
// Diagnostics (method.diagnostics) read the true private gradients: analysis only.
#pragma once
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <functional>
#include <vector>

#include "core/grad/per_sample.hpp"
#include "core/project/projection.hpp"
#include "core/run/run_context.hpp"
#include "core/train/dp_settings.hpp"
#include "core/train/setup.hpp"
#include "methods/pe_sgd/synthetic_set.hpp"

namespace dpft::pe_sgd {

struct ProjectionInput {
  const torch::Tensor& Gs;  // (N, p) synthetic per-sample gradients
  const torch::Tensor& Hs;  // (M, p) private per-sample gradients of the batch
  int64_t step;             // 0-based
  double divisor;           // q N or max(|B|, 1)
  double sigma;             // noise multiplier (0: eps = inf)
  privacy::GaussianSum& noise;  // the step's release (core/privacy/mechanism.hpp)
};
// Algorithm 1 line 8 (or the baseline's counterpart): the noised update direction.
using ProjectFn = std::function<project::ProjectionResult(const ProjectionInput&)>;

// Runs the loop (resumable) with the settings `dp` (Method::plan resolved them); returns the
// metrics blocks of Trainer::run plus "synthetic" (sizes, generation throughput), "privacy"
// (dp settings + `privacy_extra`) and, with diagnostics, "diagnostics" (means over steps).
nlohmann::json run_projection(RunContext& ctx, train::TrainInputs& in, const train::DpSettings& dp,
                              const SyntheticOptions& so, const nlohmann::json& method_info,
                              const nlohmann::json& privacy_extra, const ProjectFn& project);

// (n, p) per-sample gradient matrix of rows of ds, micro-batched; losses (n) to *losses.
torch::Tensor gradient_matrix(grad::PerSampleGrads& psg, const lm::LmDataset& ds,
                              const std::vector<int64_t>& rows, int64_t micro, int64_t pad_id,
                              torch::Tensor* losses = nullptr);

// Splits a flat (p) vector into tensors shaped like params (PerSampleGrads::params() order).
std::vector<torch::Tensor> unflatten(const torch::Tensor& flat,
                                     const std::vector<grad::GradParam>& params);

}  // namespace dpft::pe_sgd
