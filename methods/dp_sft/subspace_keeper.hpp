// DP-SFT's subspace state in the run directory (paper 002, Alg. 3 lines 2-3):
//   Theta_0 (theta0.safetensors), the trajectory A of stage 1, one row flat(Theta_t - Theta_0)
//   every y = T1 / k steps (Alg. 1 lines 12-14; core/project/subspace.hpp streams it to
//   <run>/trajectory/), and P = the top-k right singular vectors of A (Eq. 4), saved as
//   <run>/subspace.safetensors with its provenance, then split into one block per parameter
//   for P^T g (Eq. 5) and P g~ (Eq. 7).
// Every file a resume reads back (Theta_0, the rows, P) is hashed into the checkpoint; a
// changed or missing one refuses the resume, naming it (a forged trajectory would be a subspace
// nobody released). Rows may be gone only as P's saving removes them.
#pragma once
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/project/subspace.hpp"
#include "core/run/run_context.hpp"
#include "methods/dp_sft/options.hpp"

namespace dpft::dp_sft {

using NamedParams = std::vector<std::pair<std::string, torch::Tensor>>;

class SubspaceKeeper {
 public:
  // Loads Theta_0 on --resume (or takes it from `params` and, with T1 > 0, saves it), checks the
  // memory P needs, and opens the trajectory when stage 1 runs (T1 > 0).
  SubspaceKeeper(RunContext& ctx, NamedParams params, const DpSftOptions& o, int64_t T1);
  ~SubspaceKeeper();

  // Alg. 1 lines 12-14: after step `done` (1-based) with y | done and done <= T1, append
  // flat(Theta_done - Theta_0).
  void record(int64_t done);
  // Alg. 3 line 3: P from the k trajectory rows (post-processing of stage 1), saved with
  // `provenance` (what P embodies); on a resume after P was saved and the rows removed, the
  // saved P.
  void compute(nlohmann::json provenance);
  // A saved subspace (method.source: file), checked against this model and method.k.
  void use(project::Subspace s);

  const std::vector<torch::Tensor>& blocks() const { return blocks_; }  // P's rows per parameter
  const project::Subspace& subspace() const { return sub_; }
  int64_t every() const { return y_; }  // y

  // g~ = P g~^s (Alg. 2 lines 12-13), reshaped to the parameters. gs: (k).
  std::vector<torch::Tensor> lift(const torch::Tensor& gs) const;
  // ||g - P P^T g|| / ||g|| of a full-space gradient g (one tensor per parameter).
  double residual(const std::vector<torch::Tensor>& g) const;

  nlohmann::json save_state() const;
  void load_state(const nlohmann::json& j);  // InputError on a changed or missing file
  // At the end of a complete run: the trajectory and (method.keep_subspace: false) P removed.
  void finish();

 private:
  RunContext& ctx_;
  NamedParams params_;
  const DpSftOptions& o_;
  int64_t T1_ = 0, y_ = 0;
  std::vector<project::ParamEntry> entries_;
  torch::Tensor theta0_;  // (d) float32 CPU
  std::string base_sha_;  // the base weights' identity: P applies to this model only
  std::filesystem::path theta0_file_, sub_file_;
  std::unique_ptr<project::Trajectory> traj_;
  project::Subspace sub_;
  std::vector<torch::Tensor> blocks_;
  nlohmann::json state_files() const;
};

}  // namespace dpft::dp_sft
