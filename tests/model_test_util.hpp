// Tiny model configurations shared by the model, generation and parity tests.
#pragma once
#include <string>

#include "core/model/config.hpp"

namespace dpft::test {

struct TinySize {
  int64_t vocab = 61, hidden = 32, heads = 4, kv_heads = 2, head_dim = 8, mlp = 48, positions = 64;
};

// gpt2: all heads are kv heads, gelu_new; llama: GQA, Llama-3 RoPE scaling, untied head;
// qwen2: GQA with q/k/v biases, tied head.
inline model::ModelConfig tiny_config(const std::string& type, TinySize s = {}) {
  model::ModelConfig c;
  c.model_type = type;
  c.vocab_size = s.vocab;
  c.hidden_size = s.hidden;
  c.num_layers = 2;
  c.num_heads = s.heads;
  c.num_kv_heads = type == "gpt2" ? s.heads : s.kv_heads;
  c.head_dim = s.head_dim;
  c.intermediate_size = s.mlp;
  c.max_position = s.positions;
  c.activation = type == "gpt2" ? "gelu_new" : "silu";
  c.tie_word_embeddings = type != "llama";
  c.attention_bias = type == "qwen2";
  c.rope_theta = type == "llama" ? 500000.0 : 10000.0;
  if (type == "llama") c.rope_scaling = model::RopeScaling{8.0, 1.0, 4.0, 16};
  return c;
}

}  // namespace dpft::test
