// Parameter-efficient fine-tuning on a CausalLM: which parameters train, LoRA wrapping, and
// adapters in the PEFT layout (huggingface/peft docs/source/developer_guides/checkpoint.md,
// read at commit 1948110): adapter_config.json + adapter_model.safetensors with keys
// "base_model.model.<module path>.lora_A.weight" (r, in) and "...lora_B.weight" (out, r).
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "core/model/peft_kind.hpp"
#include "core/model/transformer.hpp"

namespace dpft::model {

struct PeftOptions {
  PeftKind kind = PeftKind::kLora;
  int64_t r = 8;
  double alpha = 16;
  double dropout = 0.0;
  // module names (suffix match), "all" (kind full), or [auto]: the family's (resolved_targets)
  std::vector<std::string> targets = {kAutoTargets};
  // lora: modules trained in full besides the LoRA factors (HF peft's modules_to_save, e.g. a
  // classifier head: "classifier"); linears inside them get no LoRA.
  std::vector<std::string> modules_to_save;
  // adapter: bottleneck width = max(1, hidden_size / reduction_factor) (DP-SFT's Adapter-DP: 48)
  int64_t reduction_factor = 48;
};

// The bottleneck width of kind adapter on a model of hidden size d.
int64_t adapter_width(int64_t hidden_size, int64_t reduction_factor);

// targets as given, or for [auto] the model family's (auto_targets in peft_kind.hpp; kinds
// adapter and none keep [auto], which they do not read). ConfigError when auto has no
// default for model_type.
std::vector<std::string> resolved_targets(const std::vector<std::string>& targets,
                                          const std::string& model_type, PeftKind kind);

// True if module path `path` is selected by `target` (equal, or ends with "." + target).
bool module_matches(const std::string& path, const std::string& target);

// lora: wraps each targeted Linear with LoRA (B = 0), freezes everything else.
// adapter: adds Houlsby bottleneck adapters to every layer (encoders; CausalLMImpl::add_adapters,
// up-projection 0 so the model starts equal to the base), trains only them (targets unused).
// lora and adapter also train modules_to_save in full.
// full: trains the parameters of targeted modules ("all" = every parameter), freezes the rest.
// none: freezes everything. Throws ConfigError naming a target that matches nothing, with the
// model's module names.
void apply_peft(CausalLM& model, const PeftOptions& opts, uint64_t seed = 0);

// Trainable parameters by name, in a stable order (the order of named_parameters()).
std::vector<std::pair<std::string, torch::Tensor>> trainable_parameters(CausalLM& model);
int64_t count_parameters(CausalLM& model, bool trainable_only);

}  // namespace dpft::model
