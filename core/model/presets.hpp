// Named model sizes for `dpft model init` (docs/models.md). The vocabulary size comes from the
// tokenizer the checkpoint is built with.
//   tiny        d 64,  2 layers,  4 heads (llama/qwen2: 2 kv heads), MLP 256,  256 positions
//   small       d 256, 4 layers,  4 heads (llama/qwen2: 2 kv heads), MLP 1024, 512 positions
//   gpt2-124m   GPT-2 small: d 768, 12 layers, 12 heads, MLP 3072, 1024 positions (gpt2 only)
//   qwen2.5-3b  Qwen2.5-3B: d 2048, 36 layers, 16 heads / 2 kv, MLP 11008, rope 1e6, tied (qwen2
//   only)
// Encoders (bert, roberta; head none, set by the caller): tiny d 64 / 2 layers / MLP 256 / 128
// tokens, mini d 128 / 4 / 512 / 512, small d 256 / 4 / 1024 / 512; bert-base and roberta-base
// d 768, 12 layers, 12 heads, MLP 3072, 512 tokens; minilm-l6 (all-MiniLM-L6-v2) d 384, 6
// layers, 12 heads, MLP 1536 (bert only). RoBERTa's position table has 2 more rows (pad + 1).
#pragma once
#include <string>
#include <vector>

#include "core/model/config.hpp"

namespace dpft::model {

const std::vector<std::string>& preset_names();
// Throws ConfigError for an unknown preset or one that does not exist for `arch`.
ModelConfig preset_config(const std::string& arch, const std::string& preset, int64_t vocab_size);

}  // namespace dpft::model
