// Hugging Face-format checkpoint directories: config.json + model.safetensors (or shards),
// plus tokenizer files, and PEFT adapter directories (adapter_config.json +
// adapter_model.safetensors). Loading validates names and shapes against config.json.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "core/model/peft.hpp"
#include "core/model/transformer.hpp"

namespace dpft::model {

namespace fs = std::filesystem;

// Load config + weights into a fresh model (fp32 unless `dtype` says otherwise).
CausalLM load_checkpoint(const fs::path& dir, torch::Dtype dtype = torch::kFloat32);

// Write config.json and model.safetensors (base weights; LoRA merged in first when
// `merge_lora`, and unmerged again afterwards). `save_dtype`: kFloat32, kFloat16 or kBFloat16.
void save_checkpoint(CausalLM& model, const fs::path& dir, bool merge_lora = false,
                     torch::Dtype save_dtype = torch::kFloat32);

// PEFT-layout adapter of the model's LoRA layers. `base_model` goes to base_model_name_or_path.
void save_adapter(CausalLM& model, const PeftOptions& opts, const fs::path& dir, const std::string& base_model);
// Read adapter_config.json, wrap the targeted layers, load lora_A/lora_B (every key must match
// a wrapped layer and every wrapped layer must have its keys). Returns the options read.
PeftOptions load_adapter(CausalLM& model, const fs::path& dir);

// A pretrained encoder with another head (HF's from_pretrained(..., num_labels=K) on a
// checkpoint of a different ...For... class): `to` receives every parameter of `from` with the
// same name and shape (the body: embeddings, layers; the pooler when both have one); the rest of
// `to` keeps its own (seeded) initialisation. Returns the names of `to` that kept their init
// (the new head) and those of `from` that were left out (the old head). RuntimeError when the
// bodies differ (a shared name with another shape), or when nothing is shared.
struct ReheadReport {
  std::vector<std::string> fresh, dropped;
  int64_t copied = 0;
};
ReheadReport copy_shared_parameters(CausalLM& to, const CausalLM& from);

// Copy the tokenizer files found in `from` (tokenizer.json, vocab.json, merges.txt, vocab.bpe,
// tokenizer_config.json, special_tokens_map.json, *.tiktoken, tokenizer.model) into `to`; a
// single tokenizer file as tokenizer.json (.json), itself (*.tiktoken) or tokenizer.model (a
// SentencePiece or tiktoken model). Returns how many were copied.
int copy_tokenizer_files(const fs::path& from, const fs::path& to);

}  // namespace dpft::model
