// Model hyper-parameters, parsed from (and written to) a Hugging Face `config.json`.
// Supported `model_type`s: gpt2; the Llama family llama, qwen2, qwen3, mistral, gemma, gemma2,
// phi3 (decoders, core/model/llama.cpp); bert, roberta (encoders, with the head named by
// `architectures[0]`) and bart (encoder-decoder, BartForConditionalGeneration). Field names follow
// HF; GPT-2's short names (n_embd, n_layer, ...) map onto the common fields.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace dpft::model {

// Rotary scaling: Llama-3's "rope_type": "llama3" (factor, low/high_freq_factor) or Phi-3's
// "longrope" ("su"): per-frequency divisors short_factor / long_factor (head_dim / 2 each), the
// long ones once a forward's positions reach original_max_position_embeddings, and cos / sin
// times attention_factor (default sqrt(1 + ln(s) / ln(original)), s = max_position / original).
enum class RopeType { kLlama3, kLongRope };
struct RopeScaling {
  RopeType type = RopeType::kLlama3;
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
  std::vector<double> short_factor, long_factor;  // longrope
  std::optional<double> attention_factor;         // longrope; unset: the default above
};

// The head an encoder carries (HF's architectures[0]): BertModel / RobertaModel (none: hidden
// states and sentence embeddings), ...ForSequenceClassification, ...ForMaskedLM, and
// BertLMHeadModel / RobertaForCausalLM (a causal-mask BERT trained as a language model).
enum class EncoderHead { kNone, kSequenceClassification, kMaskedLM, kCausalLM };

struct ModelConfig {
  std::string model_type = "gpt2";  // gpt2 | llama-family types | bert | roberta | bart
  int64_t vocab_size = 50257;
  int64_t hidden_size = 768;        // gpt2: n_embd
  int64_t num_layers = 12;          // gpt2: n_layer
  int64_t num_heads = 12;           // gpt2: n_head
  int64_t num_kv_heads = 12;        // llama/qwen2: num_key_value_heads (GQA); gpt2: = num_heads
  int64_t head_dim = 64;            // hidden_size / num_heads unless given
  int64_t intermediate_size = 3072;  // gpt2: n_inner (null = 4 * n_embd)
  int64_t max_position = 1024;      // gpt2: n_positions; llama: max_position_embeddings
  double norm_eps = 1e-5;           // gpt2: layer_norm_epsilon; llama: rms_norm_eps
  double rope_theta = 10000.0;
  std::optional<RopeScaling> rope_scaling;
  bool tie_word_embeddings = true;
  bool attention_bias = false;      // q/k/v biases (qwen2: true; gpt2: always biased)
  bool qk_norm = false;             // per-head RMSNorm of queries and keys before RoPE (qwen3)
  std::string activation = "gelu_new";  // gpt2: activation_function; llama/qwen2: hidden_act (silu)
  // The Llama family's options (llama.cpp says where each acts).
  bool o_bias = false;                    // o_proj bias (llama, qwen3, gemma: attention_bias)
  bool mlp_bias = false;                  // gate/up/down biases (llama: mlp_bias)
  std::optional<int64_t> sliding_window;  // local layers: query i sees keys j with i - j < W
  std::vector<bool> local_layers;         // which layers use the window (empty: all)
  bool norm_plus_one = false;             // gemma: RMSNorm scales by (1 + weight)
  double query_scale = 0;                 // gemma2 query_pre_attn_scalar: scores / sqrt(it)
  double attn_softcap = 0;                // gemma2: scores = cap tanh(scores / cap); 0 = off
  double final_softcap = 0;               // gemma2: the same on the logits
  bool sandwich_norms = false;            // gemma2: norms after attention and MLP too
  bool fused_projections = false;         // phi3: qkv_proj and gate_up_proj
  std::optional<int64_t> bos_token_id, eos_token_id, pad_token_id;
  // Encoders (bert, roberta) only.
  EncoderHead head = EncoderHead::kNone;
  int64_t type_vocab_size = 2;      // token types (BERT 2, RoBERTa 1)
  bool is_decoder = false;          // causal self-attention (BertLMHeadModel)
  std::vector<std::string> labels;  // id2label in id order (classification); size = num_labels
  // Encoder-decoders (bart) only: num_layers, num_heads and intermediate_size are the encoder's
  // (encoder_layers, encoder_attention_heads, encoder_ffn_dim; the decoder's heads and FFN width
  // must equal them).
  int64_t decoder_layers = 0;
  int64_t decoder_start_token_id = 2;  // the first decoder input (BART: </s>)
  bool scale_embedding = false;        // token embeddings times sqrt(d_model) (bart, gemma)

  bool is_gpt2() const { return model_type == "gpt2"; }
  bool is_llama_family() const {
    for (const char* t : {"llama", "qwen2", "qwen3", "mistral", "gemma", "gemma2", "phi3"})
      if (model_type == t) return true;
    return false;
  }
  // Whether layer `l` attends within sliding_window.
  bool local_layer(int64_t l) const {
    return sliding_window && (local_layers.empty() || local_layers.at(static_cast<size_t>(l)));
  }
  bool is_encoder() const { return model_type == "bert" || model_type == "roberta"; }
  bool is_seq2seq() const { return model_type == "bart"; }
  // Learned absolute positions (a sequence may not outgrow the table), as opposed to rotary.
  bool learned_positions() const { return is_gpt2() || is_encoder() || is_seq2seq(); }
  // Tokens per sequence the position table allows: RoBERTa's positions start at pad + 1.
  int64_t usable_positions() const {
    return model_type == "roberta" ? max_position - pad_token_id.value_or(1) - 1 : max_position;
  }
  int64_t num_labels() const { return static_cast<int64_t>(labels.size()); }
  // Throws InputError (naming `what`) for unknown model types or inconsistent sizes.
  void validate(const std::string& what) const;
};

ModelConfig parse_model_config(const nlohmann::json& j, const std::string& what);
ModelConfig load_model_config(const std::filesystem::path& dir);  // <dir>/config.json
nlohmann::json model_config_to_json(const ModelConfig& c);         // HF layout for model_type

}  // namespace dpft::model
