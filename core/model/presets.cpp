#include "core/model/presets.hpp"

#include <fmt/format.h>

#include "core/util/error.hpp"
#include "core/util/strings.hpp"

namespace dpft::model {

const std::vector<std::string>& preset_names() {
  static const std::vector<std::string> n = {"tiny",         "mini",       "small",
                                             "gpt2-124m",    "qwen2.5-3b", "bert-base",
                                             "roberta-base", "minilm-l6",  "bart-base"};
  return n;
}

namespace {

// BERT / RoBERTa shapes (HF's bert-base-uncased, roberta-base, all-MiniLM-L6-v2 configs): GELU,
// learned positions (RoBERTa's table has pad + 1 more rows), token types 2 (RoBERTa 1).
ModelConfig encoder_preset(const std::string& arch, const std::string& preset, int64_t vocab) {
  ModelConfig c;
  c.model_type = arch;
  c.vocab_size = vocab;
  c.activation = "gelu";
  c.attention_bias = true;
  c.tie_word_embeddings = true;
  const bool roberta = arch == "roberta";
  c.norm_eps = roberta ? 1e-5 : 1e-12;
  c.type_vocab_size = roberta ? 1 : 2;
  c.pad_token_id = roberta ? 1 : 0;
  auto set = [&](int64_t d, int64_t layers, int64_t heads, int64_t mlp, int64_t tokens) {
    c.hidden_size = d;
    c.num_layers = layers;
    c.num_heads = c.num_kv_heads = heads;
    c.head_dim = d / heads;
    c.intermediate_size = mlp;
    c.max_position = tokens + (roberta ? 2 : 0);  // RoBERTa: positions pad + 1 .. pad + tokens
  };
  if (preset == "tiny")
    set(64, 2, 4, 256, 128);
  else if (preset == "mini")
    set(128, 4, 4, 512, 512);
  else if (preset == "small")
    set(256, 4, 4, 1024, 512);
  else if (preset == "bert-base" || preset == "roberta-base") {
    if (preset != arch + "-base")
      throw ConfigError(fmt::format("--preset {} exists only for --arch {}", preset,
                                    preset.substr(0, preset.find('-'))));
    set(768, 12, 12, 3072, 512);
  } else if (preset == "minilm-l6") {
    if (roberta) throw ConfigError("--preset minilm-l6 exists only for --arch bert");
    set(384, 6, 12, 1536, 512);
  } else {
    throw ConfigError(
        fmt::format("--preset '{}' does not exist for --arch {}; use tiny, mini, "
                    "small, {}-base{}",
                    preset, arch, arch, roberta ? "" : " or minilm-l6"));
  }
  return c;
}

// BART shapes (HF's facebook/bart-base config): as many decoder as encoder layers, GELU, learned
// positions (the table holds max_position + 2 rows), lm_head tied to the shared embeddings.
ModelConfig bart_preset(const std::string& preset, int64_t vocab) {
  ModelConfig c;
  c.model_type = "bart";
  c.vocab_size = vocab;
  c.activation = "gelu";
  c.attention_bias = true;
  c.tie_word_embeddings = true;
  c.norm_eps = 1e-5;
  c.pad_token_id = 1, c.bos_token_id = 0, c.eos_token_id = 2;  // BART's ids; the tokenizer's win
  auto set = [&](int64_t d, int64_t layers, int64_t heads, int64_t mlp, int64_t tokens) {
    c.hidden_size = d;
    c.num_layers = c.decoder_layers = layers;
    c.num_heads = c.num_kv_heads = heads;
    c.head_dim = d / heads;
    c.intermediate_size = mlp;
    c.max_position = tokens;
  };
  if (preset == "tiny")
    set(64, 2, 4, 256, 256);
  else if (preset == "mini")
    set(128, 4, 4, 512, 512);
  else if (preset == "small")
    set(256, 4, 4, 1024, 512);
  else if (preset == "bart-base")
    set(768, 6, 12, 3072, 1024);
  else
    throw ConfigError(fmt::format(
        "--preset '{}' does not exist for --arch bart; use tiny, mini, small or bart-base",
        preset));
  return c;
}

// The families' own parts on a Llama-shaped preset: Mistral's sliding window, Gemma's GeGLU,
// (1 + w) norms and scaled embeddings, Gemma-2's sandwich norms, soft-capping and alternating
// local layers (its released values), Phi-3's fused projections (the window is set per preset).
void family_options(ModelConfig& c) {
  const std::string& t = c.model_type;
  if (t == "mistral" || t == "gemma2") c.sliding_window = 1;
  if (t == "gemma" || t == "gemma2") {
    c.activation = "gelu_pytorch_tanh";
    c.norm_plus_one = true;
    c.scale_embedding = true;
  }
  if (t == "gemma2") {
    c.sandwich_norms = true;
    c.attn_softcap = 50.0;
    c.final_softcap = 30.0;
  }
  if (t == "phi3") {
    c.fused_projections = true;
    c.tie_word_embeddings = false;
  }
}

}  // namespace

ModelConfig preset_config(const std::string& arch, const std::string& preset, int64_t vocab) {
  if (arch == "bert" || arch == "roberta") {
    ModelConfig c = encoder_preset(arch, preset, vocab);
    c.validate(fmt::format("preset {}/{}", arch, preset));
    return c;
  }
  if (arch == "bart") {
    ModelConfig c = bart_preset(preset, vocab);
    c.validate(fmt::format("preset bart/{}", preset));
    return c;
  }
  ModelConfig c;
  c.model_type = arch;
  if (arch != "gpt2" && !c.is_llama_family())
    throw ConfigError(fmt::format(
        "--arch '{}': use gpt2, llama, qwen2, qwen3, mistral, gemma, gemma2, phi3, bert, roberta "
        "or bart",
        arch));
  c.vocab_size = vocab;
  bool gpt2 = arch == "gpt2";
  c.activation = gpt2 ? "gelu_new" : "silu";
  c.attention_bias = arch == "qwen2";
  c.qk_norm = arch == "qwen3";
  c.tie_word_embeddings = true;
  c.norm_eps = gpt2 ? 1e-5 : 1e-6;
  family_options(c);
  auto set = [&](int64_t d, int64_t layers, int64_t heads, int64_t kv, int64_t mlp, int64_t pos) {
    c.hidden_size = d;
    c.num_layers = layers;
    c.num_heads = heads;
    c.num_kv_heads = gpt2 ? heads : kv;
    c.head_dim = d / heads;
    c.intermediate_size = mlp;
    c.max_position = pos;
  };
  if (preset == "tiny") set(64, 2, 4, 2, 256, 256);
  else if (preset == "mini") set(128, 4, 4, 4, 512, 512);
  else if (preset == "small") set(256, 4, 4, 2, 1024, 512);
  else if (preset == "gpt2-124m") {
    if (!gpt2) throw ConfigError("--preset gpt2-124m exists only for --arch gpt2");
    set(768, 12, 12, 12, 3072, 1024);
  } else if (preset == "qwen2.5-3b") {
    if (arch != "qwen2") throw ConfigError("--preset qwen2.5-3b exists only for --arch qwen2");
    set(2048, 36, 16, 2, 11008, 32768);
    c.rope_theta = 1e6;
  } else if (preset == "bart-base") {
    throw ConfigError("--preset bart-base is an encoder-decoder shape: use --arch bart");
  } else if (preset == "bert-base" || preset == "roberta-base" || preset == "minilm-l6") {
    throw ConfigError(
        fmt::format("--preset {} is an encoder shape: use --arch bert or roberta", preset));
  } else {
    auto m = closest_match(preset, preset_names());
    throw ConfigError(fmt::format("--preset '{}': use one of {}{}", preset, join(preset_names(), ", "),
                                  m ? fmt::format(" (did you mean '{}'?)", *m) : ""));
  }
  if (!gpt2 && preset != "qwen2.5-3b") c.rope_theta = 10000.0;
  if (c.sliding_window) c.sliding_window = c.max_position / 2;  // the window acts on long texts
  if (c.model_type == "gemma2") {
    c.query_scale = static_cast<double>(c.head_dim);
    for (int64_t l = 0; l < c.num_layers; ++l) c.local_layers.push_back(l % 2 == 0);
  }
  c.validate(fmt::format("preset {}/{}", arch, preset));
  return c;
}

}  // namespace dpft::model
