// The DP-SGD loop (Abadi et al. 2016, Alg. 1) shared by methods `dp-sgd` and `sft+dp-sgd`:
// Poisson batches at rate q, per-sample gradients clipped (or automatically clipped) to C and
// summed (core/train/privatize.hpp), one Gaussian noise draw N(0, sigma^2 C^2) per logical
// batch, division by q N or the realised size, any optimizer on the result; one ledger release
// per step (core/train/trainer.hpp records it).
#pragma once
#include <nlohmann/json.hpp>

#include <functional>
#include <string>

#include "core/grad/per_sample.hpp"
#include "core/run/run_context.hpp"
#include "core/train/dp_settings.hpp"
#include "core/train/privatize.hpp"
#include "core/train/setup.hpp"

namespace dpft::dp_sgd {

struct DpSgdOptions {
  grad::GradOptions grad;
  nlohmann::json method_info;  // metrics["train"]["method"]
  // Optional one-time work before step 1 of a fresh run (never on --resume), e.g. SFT on
  // synthetic data; its JSON result is kept in checkpoints and returned under `prepare_key`.
  std::function<nlohmann::json(train::TrainInputs&)> prepare;
  std::string prepare_key = "prepare";
  std::string eval_after_prepare;  // train::LoopOptions::eval_after_prepare
  // Analysis only (reads the unclipped batch gradient; never feeds back): per step, the l2
  // distance and cosine between the privatised gradient and the true mean gradient of the
  // batch, and ||noise|| / ||clipped sum||; means under metrics "diagnostics"
  // (core/eval/grad_diagnostics.hpp).
  bool diagnostics = false;
  // Post-processing of the released gradient (the denoise method, paper 003): called on the
  // noisy, divided gradient g (params' order) with sigma_e, the per-entry standard deviation of
  // the noise in it (sigma C / divisor); it may change g in place and add to st.extra. Pure
  // post-processing: it never reads the private data.
  // With `clipped_for_post_process` (analysis only, e.g. denoise's diagnostics), `clipped` is
  // the clipped mean gradient of the batch without noise (sum / the same divisor); else null.
  std::function<void(const std::vector<grad::GradParam>& params, std::vector<torch::Tensor>& g,
                     double sigma_e, train::BatchStats& st,
                     const std::vector<torch::Tensor>* clipped)>
      post_process;
  bool clipped_for_post_process = false;
  // train::LoopOptions::after_training (CTCL's generation from the trained model).
  std::function<nlohmann::json()> after_training;
  std::string after_training_key = "after_training";
};

// Trains `in` with the settings `dp` (Method::plan resolved them); returns Trainer::run's
// blocks plus "privacy".
nlohmann::json run_dp_sgd(RunContext& ctx, train::TrainInputs& in, const train::DpSettings& dp,
                          const DpSgdOptions& o);

}  // namespace dpft::dp_sgd
