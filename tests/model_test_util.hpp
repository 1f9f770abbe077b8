// Tiny model configurations and random token data shared by the model, generation, parity,
// training and projection tests.
#pragma once
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <string>

#include "core/generate/generate.hpp"
#include "core/model/config.hpp"
#include "core/model/peft.hpp"
#include "core/model/seq2seq.hpp"
#include "core/model/transformer.hpp"
#include "data/lm_dataset.hpp"

namespace dpft::test {

struct TinySize {
  int64_t vocab = 61, hidden = 32, heads = 4, kv_heads = 2, head_dim = 8, mlp = 48, positions = 64;
};

// gpt2: all heads are kv heads, gelu_new; llama: GQA, Llama-3 RoPE scaling, untied head;
// qwen2: GQA with q/k/v biases, tied head; qwen3: GQA, per-head q/k RMSNorm, tied head;
// mistral: a sliding window of 3; gemma: GeGLU, (1 + w) norms, scaled embeddings; gemma2: also
// sandwich norms, soft-capping, a query scale and a local then a global layer; phi3: fused
// projections, longrope.
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
  c.qk_norm = type == "qwen3";
  c.rope_theta = type == "llama" ? 500000.0 : 10000.0;
  if (type == "llama") {
    c.rope_scaling = model::RopeScaling{};
    c.rope_scaling->factor = 8.0;
    c.rope_scaling->original_max_position_embeddings = 16;
  }
  if (type == "mistral") c.sliding_window = 3;  // shorter than the tests' texts
  if (type == "gemma" || type == "gemma2") {
    c.activation = "gelu_pytorch_tanh";
    c.norm_plus_one = true;
    c.scale_embedding = true;
  }
  if (type == "gemma2") {  // caps small enough to bend tiny random scores and logits
    c.sandwich_norms = true;
    c.query_scale = 12.0;
    c.attn_softcap = 0.5;
    c.final_softcap = 0.3;
    c.sliding_window = 3;
    c.local_layers = {true, false};
  }
  if (type == "phi3") {  // longrope with short factors below 32 positions
    c.fused_projections = true;
    c.tie_word_embeddings = false;
    model::RopeScaling r;
    r.type = model::RopeType::kLongRope;
    r.original_max_position_embeddings = 32;
    r.factor = static_cast<double>(s.positions) / 32.0;
    r.short_factor.assign(static_cast<size_t>(s.head_dim / 2), 1.0);
    r.long_factor.assign(static_cast<size_t>(s.head_dim / 2), 1.0);
    for (size_t i = 0; i < r.short_factor.size(); ++i)
      r.short_factor[i] = 1.0 + 0.25 * static_cast<double>(i), r.long_factor[i] = std::pow(2.0, i);
    c.rope_scaling = r;
  }
  return c;
}

// Every decoder family, for the tests that run on each.
inline const std::vector<std::string>& decoder_types() {
  static const std::vector<std::string> t = {"gpt2",    "llama", "qwen2",  "qwen3",
                                             "mistral", "gemma", "gemma2", "phi3"};
  return t;
}

// n examples of 3 + i % 6 random ids in [1, vocab), every id scored but the first; example i
// has index first_index + i. Seeds torch's global generator.
inline lm::LmDataset random_lm_dataset(int64_t n, int64_t vocab, uint64_t seed,
                                       int64_t first_index = 0) {
  torch::manual_seed(seed);
  lm::LmDataset ds;
  for (int64_t i = 0; i < n; ++i) {
    lm::TokenizedExample e;
    e.index = first_index + i;
    int64_t len = 3 + i % 6;
    torch::Tensor ids = torch::randint(1, vocab, {len}, torch::kInt64);
    for (int64_t t = 0; t < len; ++t) e.ids.push_back(static_cast<int32_t>(ids[t].item<int64_t>()));
    e.scored.assign(static_cast<size_t>(len), 1);
    e.scored[0] = 0;
    ds.items.push_back(e);
  }
  return ds;
}

// A tiny GPT-2 with rank-4 LoRA on c_attn and c_fc whose lora_B is N(0, 0.05^2) rather than
// zero, so every LoRA factor has a nonzero gradient.
inline model::CausalLM tiny_lora_gpt2(uint64_t seed) {
  model::CausalLM m = model::make_causal_lm(tiny_config("gpt2"), seed);
  model::PeftOptions o;
  o.targets = {"c_attn", "c_fc"};
  model::apply_peft(m, o, 4);
  torch::NoGradGuard ng;
  for (auto& kv : model::trainable_parameters(m))
    if (kv.first.find("lora_B") != std::string::npos) kv.second.normal_(0, 0.05);
  return m;
}

// The Python with torch (Debian's python3-torch), or "" (parity tests then skip).
inline std::string python_with_torch() {
  for (const char* py : {"/usr/bin/python3", "python3"}) {
    std::string cmd = std::string(py) + " -c 'import torch' >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0) return py;
  }
  return "";
}

// Nested JSON lists of numbers (a reference script's output) -> a float32 tensor of that shape.
inline torch::Tensor json_tensor(const nlohmann::json& j) {
  std::vector<int64_t> shape;
  for (const nlohmann::json* p = &j; p->is_array() && !p->empty(); p = &(*p)[0])
    shape.push_back(static_cast<int64_t>(p->size()));
  std::vector<float> flat;
  std::function<void(const nlohmann::json&)> walk = [&](const nlohmann::json& x) {
    if (x.is_array())
      for (const auto& y : x) walk(y);
    else
      flat.push_back(x.get<float>());
  };
  walk(j);
  return torch::tensor(flat).view(shape);
}

inline double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat32) - b.to(torch::kFloat32)).abs().max().item<double>();
}

// HF config.json of a tiny random encoder (48 wide, 6 heads, 2 layers, vocabulary 83).
inline nlohmann::json encoder_json(const std::string& type, const std::string& arch,
                                   bool decoder = false) {
  nlohmann::json j = {{"model_type", type},
                      {"architectures", {arch}},
                      {"vocab_size", 83},
                      {"hidden_size", 48},
                      {"num_hidden_layers", 2},
                      {"num_attention_heads", 6},
                      {"intermediate_size", 72},
                      {"max_position_embeddings", 40},
                      {"type_vocab_size", type == "roberta" ? 1 : 2},
                      {"layer_norm_eps", 1e-12},
                      {"hidden_act", "gelu"},
                      {"is_decoder", decoder},
                      {"pad_token_id", type == "roberta" ? 1 : 0}};
  if (arch.find("SequenceClassification") != std::string::npos)
    j["id2label"] = {{"0", "negative"}, {"1", "neutral"}, {"2", "positive"}};
  return j;
}

// A random encoder of that config, norms and biases moved away from 1 / 0 so they are tested.
inline model::CausalLM random_encoder(const nlohmann::json& j, uint64_t seed) {
  model::CausalLM m = model::make_causal_lm(model::parse_model_config(j, "test config"), seed);
  torch::NoGradGuard ng;
  for (auto& p : m->named_parameters(true))
    if (p.key().find("Norm") != std::string::npos || p.key().find("norm") != std::string::npos ||
        p.key().find("bias") != std::string::npos)
      p.value().add_(torch::randn_like(p.value()) * 0.1);
  return m;
}

// A tiny tokenised classification set for the encoder tests: pairs with token types, padding.
inline lm::LmDataset encoder_grad_set(bool types = true) {
  lm::LmDataset ds;
  ds.objective = lm::Objective::kClassification;
  const std::vector<std::vector<int32_t>> ids = {
      {2, 17, 5, 3, 42, 8, 3}, {2, 11, 12, 13, 14, 15, 16, 17, 3}, {2, 50, 3}, {2, 9, 9, 3, 4, 3}};
  const std::vector<int64_t> cls = {0, 2, 1, 2};
  for (size_t i = 0; i < ids.size(); ++i) {
    lm::TokenizedExample t;
    t.index = static_cast<int64_t>(i);
    t.ids = ids[i];
    t.scored.assign(ids[i].size(), 0);
    const uint8_t second = types ? 1 : 0;  // RoBERTa has one token type
    if (i == 0) t.type_ids = {0, 0, 0, 0, second, second, second};
    if (i == 3) t.type_ids = {0, 0, 0, 0, second, second};
    t.class_id = cls[i];
    ds.items.push_back(t);
  }
  return ds;
}

// HF config.json of a tiny random BART (48 wide, 6 heads, 2 + 2 layers, vocabulary 83).
inline nlohmann::json bart_json() {
  return {{"model_type", "bart"},
          {"architectures", {"BartForConditionalGeneration"}},
          {"vocab_size", 83},
          {"d_model", 48},
          {"encoder_layers", 2},
          {"decoder_layers", 2},
          {"encoder_attention_heads", 6},
          {"decoder_attention_heads", 6},
          {"encoder_ffn_dim", 72},
          {"decoder_ffn_dim", 72},
          {"max_position_embeddings", 40},
          {"activation_function", "gelu"},
          {"pad_token_id", 1},
          {"bos_token_id", 0},
          {"eos_token_id", 2},
          {"decoder_start_token_id", 2}};
}

// A random BART, norms, biases and final_logits_bias moved away from 1 / 0 so they are tested.
inline model::Seq2Seq random_bart(const nlohmann::json& j, uint64_t seed) {
  model::CausalLM m = model::make_causal_lm(model::parse_model_config(j, "test config"), seed);
  torch::NoGradGuard ng;
  for (auto& p : m->named_parameters(true))
    if (p.key().find("norm") != std::string::npos || p.key().find("bias") != std::string::npos)
      p.value().add_(torch::randn_like(p.value()) * 0.1);
  m->named_buffers(true)["final_logits_bias"].normal_(0, 0.5);
  model::Seq2Seq s = model::as_seq2seq(m);
  if (!s) throw std::logic_error("random_bart: the config did not make a BART");
  return s;
}

// Three BART sources of different lengths, and CTCL's sampling settings (top-p 0.95, repetition
// penalty 1.5; greedy when !sample), 12 new tokens, stop at </s>.
inline const std::vector<std::vector<int64_t>>& bart_sources() {
  static const std::vector<std::vector<int64_t>> src = {
      {0, 17, 5, 42, 2}, {0, 11, 2}, {0, 9, 8, 7, 6, 5, 2}};
  return src;
}
inline generate::GenerationOptions bart_generation(bool sample) {
  generate::GenerationOptions o;
  o.max_new_tokens = 12;
  o.do_sample = sample;
  o.top_p = 0.95;
  o.repetition_penalty = 1.5;
  o.seed = 4;
  o.pad_id = 1;
  o.stop_ids = {2};
  return o;
}

// Three (source, target) pairs of different lengths (right padding in the batch).
inline lm::LmDataset bart_grad_set() {
  lm::LmDataset ds;
  ds.objective = lm::Objective::kSeq2Seq;
  const std::vector<std::vector<int32_t>> src = {{0, 17, 5, 42, 8, 2}, {0, 11, 2}, {0, 9, 8, 7, 2}};
  const std::vector<std::vector<int32_t>> tgt = {
      {0, 33, 34, 2}, {0, 60, 61, 62, 63, 64, 2}, {0, 7, 2}};
  for (size_t i = 0; i < src.size(); ++i) {
    lm::TokenizedExample t;
    t.index = static_cast<int64_t>(i);
    t.ids = tgt[i];
    t.scored.assign(tgt[i].size(), 1);
    t.src_ids = src[i];
    ds.items.push_back(t);
  }
  return ds;
}

}  // namespace dpft::test
