// Where a trained model is: what `dpft generate`, `dpft eval` and `dpft model logits` load for
// --model X [--adapter A]. X may be a checkpoint directory (config.json), a run directory (its
// saved adapter/ or model/), or an adapter directory (adapter_config.json, whose
// base_model_name_or_path names the base checkpoint); --adapter A alone loads A on its base.
#pragma once
#include <filesystem>
#include <string>

namespace dpft::model {

struct ModelSource {
  std::filesystem::path base;     // the checkpoint loaded first (config.json, weights, tokenizer)
  std::filesystem::path adapter;  // a PEFT adapter loaded on it; empty = none
  std::string describe() const;   // "BASE + adapter ADAPTER", for the log
};

// InputError naming what was expected: a directory that is none of the three, a run without a
// saved model (output.save_model false, or unfinished), an adapter whose base is not found
// (give --model BASE), or --model and --adapter both naming adapters.
ModelSource resolve_model_source(const std::string& model, const std::string& adapter);

}  // namespace dpft::model
