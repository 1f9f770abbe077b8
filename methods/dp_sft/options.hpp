// DP-SFT's method options (paper 002, Algorithm 3): the subspace dimension k, where the subspace
// comes from (a DP stage 1, a public stage 1, or a saved file), how the budget is shared
// between the stages (Theorem 3's split or one joint accounting), and stage 1's own settings.
// One field list (DpSftOptions::fields) parses, validates and dumps them.
#pragma once
#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include <array>
#include <optional>
#include <string>

#include "core/config/fields.hpp"
#include "core/grad/per_sample.hpp"

namespace dpft::dp_sft {

enum class SubspaceSource { kPrivate, kPublic, kFile };
inline constexpr std::array<EnumName<SubspaceSource>, 3> kSourceNames = {
    {{SubspaceSource::kPrivate, "private"},
     {SubspaceSource::kPublic, "public"},
     {SubspaceSource::kFile, "file"}}};
enum class Budget { kJoint, kSplit };
inline constexpr std::array<EnumName<Budget>, 2> kBudgetNames = {
    {{Budget::kJoint, "joint"}, {Budget::kSplit, "split"}}};

struct Stage1Options {
  double epochs = 1;                   // E1 (Alg. 3 line 1), used when steps is 0
  int64_t steps = 0;                   // T1 given directly (must be >= k)
  std::optional<double> lr;            // default train.lr
  std::optional<double> clip_norm;     // C1, default privacy.clip_norm
  std::optional<double> warmup_ratio;  // default train.warmup_ratio
};

struct DpSftOptions {
  int64_t k = 32;                                    // subspace dimension
  SubspaceSource source = SubspaceSource::kPrivate;  // private (DP stage 1) | public | file
  std::string file;          // source file: a subspace.safetensors (source: file)
  bool file_public = false;  // a file without provenance, declared made from public data
  torch::ScalarType storage = torch::kFloat32;  // P's entries: float32 | bfloat16
  double split = 0.5;                           // p1: stage 1's share of (epsilon, delta)
  Budget budget = Budget::kJoint;               // joint | split (Theorem 3)
  Stage1Options stage1;
  grad::GradOptions grad;
  double chunk_mb = 256;         // bounds the per-sample blocks materialised for P^T g_i
  bool diagnostics = false;      // analysis only: norms around clipping / noise, residual
  bool keep_trajectory = false;  // false: trajectory/ removed once P is saved
  bool keep_subspace = true;     // false: subspace.safetensors removed at the end

  void configure(Fields& f);  // parse and validate method.*, or write them (Fields::writer)
  const char* storage_name() const { return storage == torch::kBFloat16 ? "bfloat16" : "float32"; }
};

}  // namespace dpft::dp_sft
