// DP-SFT's diagnostics and metrics blocks, apart from its algorithm (methods/dp_sft/dp_sft.cpp):
// the per-step norms around clipping and noise and the subspace residual (method.diagnostics:
// non-private statistics of the batch, under metrics' non_private block), and the run's
// privacy and subspace blocks.
#pragma once
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <vector>

#include "core/config/spec.hpp"
#include "core/privacy/mechanism.hpp"
#include "core/train/privatize.hpp"
#include "methods/dp_sft/options.hpp"
#include "methods/dp_sft/subspace_keeper.hpp"

namespace dpft::dp_sft {

// Alg. 1 lines 9-10 / Alg. 2 lines 9-10: N(0, sigma^2 C^2 I) added to the clipped sum g (one
// release of `mechanism`), divided by the lot size; with `diagnostics`, the step's norms
// around the noise recorded in st.extra["dp_sft"].
void noise_and_divide(std::vector<torch::Tensor>& g, const train::DpSettings& dp,
                      privacy::GaussianSum& mechanism, int64_t lot, train::BatchStats& st,
                      bool diagnostics);

// What a run reports besides the trainer's blocks.
struct Report {
  const Spec& spec;
  const DpSftOptions& o;
  const train::DpSettings &dp1, &dp2;
  const nlohmann::json& accounting;   // plan()'s: budget, split, composed epsilon
  const nlohmann::json& source_file;  // method.file's provenance decision
  int64_t T1 = 0;
  int64_t public_examples = 0;  // data.public's size (method.source: public)
};

// Adds to the trainer's metrics `out`: stage 2's residual summary (diagnostics), the privacy
// block (both stages, the accounting, a public stage 1's data) and the subspace block.
void report(nlohmann::json& out, const Report& r, const SubspaceKeeper& keeper);

}  // namespace dpft::dp_sft
