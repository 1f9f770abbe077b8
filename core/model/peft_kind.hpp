// model.peft.kind: what a fine-tuning run trains (core/model/peft.hpp applies it), and its spec
// spellings.
#pragma once
#include <array>
#include <string>
#include <vector>

#include "core/util/enum_names.hpp"

namespace dpft::model {

enum class PeftKind {
  kLora,     // LoRA factors on the targeted linears (and modules_to_save)
  kAdapter,  // Houlsby bottleneck adapters (encoders; and modules_to_save)
  kFull,     // the targeted modules' parameters ("all": every parameter)
  kNone,     // nothing (evaluation only)
};
inline constexpr std::array<EnumName<PeftKind>, 4> kPeftKindNames = {
    {{PeftKind::kLora, "lora"},
     {PeftKind::kAdapter, "adapter"},
     {PeftKind::kFull, "full"},
     {PeftKind::kNone, "none"}}};
inline const char* name_of(PeftKind k) {
  return enum_name(k, kPeftKindNames);
}
// lora and adapter save an adapter directory (PEFT layout); full and none the whole model.
inline bool saves_adapter(PeftKind k) {
  return k == PeftKind::kLora || k == PeftKind::kAdapter;
}

// model.peft.targets: auto (the default): resolved from the model's config.json model_type.
inline constexpr const char* kAutoTargets = "auto";

// The targets `auto` stands for: kind full trains every parameter ("all"); the other kinds
// wrap each family's usual LoRA targets, those of HF peft's default mapping
// (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING): the query and value projections,
// GPT-2's fused c_attn and Phi-3's fused qkv_proj. Empty for a model_type without an entry.
inline std::vector<std::string> auto_targets(const std::string& model_type, PeftKind kind) {
  if (kind == PeftKind::kFull) return {"all"};
  if (model_type == "gpt2") return {"c_attn"};
  if (model_type == "phi3") return {"qkv_proj"};
  if (model_type == "bert" || model_type == "roberta") return {"query", "value"};
  for (const char* t : {"llama", "qwen2", "qwen3", "mistral", "gemma", "gemma2", "bart"})
    if (model_type == t) return {"q_proj", "v_proj"};
  return {};
}

}  // namespace dpft::model
