#include "methods/dp_sft/options.hpp"

#include "core/util/error.hpp"

namespace dpft::dp_sft {

namespace {

inline constexpr std::array<EnumName<torch::ScalarType>, 2> kStorageNames = {
    {{torch::kFloat32, "float32"}, {torch::kBFloat16, "bfloat16"}}};

}  // namespace

void DpSftOptions::configure(Fields& f) {
  f.get("k", k, Range::at_least(1));
  f.get_enum("source", source, kSourceNames);
  f.get("file", file);
  f.get("file_public", file_public);
  f.get_enum("storage", storage, kStorageNames);
  f.get("split", split, Range::open(0, 1));
  f.get_enum("budget", budget, kBudgetNames);
  Fields s1 = f.child("stage1");
  s1.get("epochs", stage1.epochs, Range::above(0));
  s1.get("steps", stage1.steps, Range::at_least(0));  // 0: ceil(E1 N / (B k)) k
  s1.get("lr", stage1.lr, Range::at_least(0));
  s1.get("clip_norm", stage1.clip_norm, Range::above(0));
  s1.get("warmup_ratio", stage1.warmup_ratio, Range::closed(0, 1));
  s1.finish();
  f.get_enum("grad_mode", grad.mode, grad::kGradModeNames);
  f.get("max_materialize_mb", grad.max_materialize_mb, Range::above(0));
  f.get("chunk_mb", chunk_mb, Range::above(0));
  f.get("diagnostics", diagnostics);
  f.get("keep_trajectory", keep_trajectory);
  f.get("keep_subspace", keep_subspace);
  if (source == SubspaceSource::kFile)
    DPFT_CHECK_AS(ConfigError, !file.empty(),
                  "method.source: file needs method.file (a subspace.safetensors written by a "
                  "dp-sft run)");
  if (source != SubspaceSource::kFile && stage1.steps > 0)
    DPFT_CHECK_AS(ConfigError, stage1.steps >= k,
                  "method.stage1.steps = {} records fewer than k = {} trajectory rows (one "
                  "every floor(T1 / k) steps); give at least k steps or lower method.k",
                  stage1.steps, k);
}

}  // namespace dpft::dp_sft
