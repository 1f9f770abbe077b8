#include "core/model/config.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"

namespace dpft::model {

namespace {

template <class T>
T get_or(const nlohmann::json& j, const char* key, T def, const std::string& what) {
  if (!j.contains(key) || j[key].is_null()) return def;
  try {
    return j[key].get<T>();
  } catch (const nlohmann::json::exception&) {
    throw InputError(fmt::format("{}: field '{}' has the wrong type ({})", what, key, j[key].dump()));
  }
}

std::optional<int64_t> opt_id(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_number_integer()) return std::nullopt;  // lists of eos ids: first one
  return j[key].get<int64_t>();
}

}  // namespace

namespace {

// HF architecture names of the encoder heads, per model type.
struct HeadName {
  EncoderHead head;
  const char* bert;
  const char* roberta;
};
constexpr HeadName kHeadNames[] = {
    {EncoderHead::kNone, "BertModel", "RobertaModel"},
    {EncoderHead::kSequenceClassification, "BertForSequenceClassification",
     "RobertaForSequenceClassification"},
    {EncoderHead::kMaskedLM, "BertForMaskedLM", "RobertaForMaskedLM"},
    {EncoderHead::kCausalLM, "BertLMHeadModel", "RobertaForCausalLM"},
};

std::string encoder_architecture(const std::string& type, EncoderHead h) {
  for (const auto& n : kHeadNames)
    if (n.head == h) return type == "roberta" ? n.roberta : n.bert;
  return "";
}

}  // namespace

void ModelConfig::validate(const std::string& what) const {
  if (!is_gpt2() && !is_llama_family() && !is_encoder() && !is_seq2seq())
    throw InputError(
        fmt::format("{}: unsupported model_type '{}'; dpft supports gpt2, llama, qwen2, qwen3, "
                    "mistral, gemma, gemma2, phi3, bert, roberta, bart",
                    what, model_type));
  auto pos = [&](const char* name, int64_t v) {
    if (v < 1) throw InputError(fmt::format("{}: {} must be >= 1, got {}", what, name, v));
  };
  pos("vocab_size", vocab_size);
  pos("hidden_size", hidden_size);
  pos("num_layers", num_layers);
  pos("num_heads", num_heads);
  pos("num_kv_heads", num_kv_heads);
  pos("head_dim", head_dim);
  pos("intermediate_size", intermediate_size);
  pos("max_position", max_position);
  // Before anything is allocated: a damaged or hostile config.json (n_layer: 1e9) must not
  // make dpft reserve gigabytes before the weights are found missing.
  auto at_most = [&](const char* name, int64_t v, int64_t limit) {
    if (v > limit)
      throw InputError(fmt::format("{}: {} = {} is beyond any model dpft can load (at most {}); "
                                   "config.json is damaged",
                                   what, name, v, limit));
  };
  constexpr int64_t kDim = int64_t{1} << 24;
  at_most("vocab_size", vocab_size, kDim);
  at_most("hidden_size", hidden_size, kDim);
  at_most("num_layers", num_layers, 4096);
  at_most("num_heads", num_heads, kDim);
  at_most("num_kv_heads", num_kv_heads, kDim);
  at_most("head_dim", head_dim, kDim);
  at_most("intermediate_size", intermediate_size, kDim);
  at_most("max_position", max_position, kDim);
  const double params = static_cast<double>(vocab_size) * static_cast<double>(hidden_size) +
                        static_cast<double>(num_layers) * static_cast<double>(hidden_size) *
                            (4.0 * static_cast<double>(hidden_size) +
                             3.0 * static_cast<double>(intermediate_size));
  if (params > 1e12)
    throw InputError(fmt::format("{}: config.json describes ~{:.3g} parameters, beyond any model "
                                 "dpft can load; config.json is damaged",
                                 what, params));
  if (num_heads % num_kv_heads != 0)
    throw InputError(fmt::format("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", what,
                                 num_heads, num_kv_heads));
  if (learned_positions() && head_dim * num_heads != hidden_size)
    throw InputError(fmt::format("{}: hidden size {} is not divisible by the {} heads", what,
                                 hidden_size, num_heads));
  if (is_encoder()) {
    if (type_vocab_size < 1 || type_vocab_size > 1024)
      throw InputError(
          fmt::format("{}: type_vocab_size must be in [1, 1024], got {}", what, type_vocab_size));
    if (head == EncoderHead::kSequenceClassification && (labels.empty() || labels.size() > 100000))
      throw InputError(
          fmt::format("{}: a sequence classifier needs 1 to 100000 labels "
                      "(num_labels / id2label), got {}",
                      what, labels.size()));
    if (head == EncoderHead::kCausalLM && !is_decoder)
      throw InputError(fmt::format("{}: {} needs \"is_decoder\": true (a causal mask)", what,
                                   encoder_architecture(model_type, head)));
    if (head != EncoderHead::kCausalLM && is_decoder)
      throw InputError(
          fmt::format("{}: \"is_decoder\": true with {}: only {} trains with a "
                      "causal mask",
                      what, encoder_architecture(model_type, head),
                      encoder_architecture(model_type, EncoderHead::kCausalLM)));
    if (usable_positions() < 1)
      throw InputError(
          fmt::format("{}: max_position_embeddings {} leaves no position after "
                      "RoBERTa's padding offset (pad_token_id {})",
                      what, max_position, pad_token_id.value_or(1)));
    if (pad_token_id && (*pad_token_id < 0 || *pad_token_id >= vocab_size))
      throw InputError(fmt::format("{}: pad_token_id {} is outside the vocabulary of {}", what,
                                   *pad_token_id, vocab_size));
  }
  if (is_seq2seq()) {
    pos("decoder_layers", decoder_layers);
    at_most("decoder_layers", decoder_layers, 4096);
    for (auto [name, id] :
         {std::pair<const char*, std::optional<int64_t>>{"pad_token_id", pad_token_id},
          {"decoder_start_token_id", decoder_start_token_id}})
      if (!id || *id < 0 || *id >= vocab_size)
        throw InputError(fmt::format("{}: {} {} is outside the vocabulary of {}", what, name,
                                     id ? std::to_string(*id) : "(none)", vocab_size));
    if (!tie_word_embeddings)
      throw InputError(
          fmt::format("{}: tie_word_embeddings false: dpft's BART ties lm_head to "
                      "model.shared, as BartForConditionalGeneration does",
                      what));
  }
  if (!learned_positions() && head_dim % 2 != 0)
    throw InputError(fmt::format("{}: head_dim {} must be even for rotary embeddings", what, head_dim));
  if (!(norm_eps > 0)) throw InputError(fmt::format("{}: norm epsilon must be > 0", what));
  if (activation != "gelu_new" && activation != "gelu" && activation != "silu" &&
      activation != "relu" && activation != "gelu_pytorch_tanh")
    throw InputError(fmt::format(
        "{}: unsupported activation '{}' (dpft knows gelu, gelu_new, gelu_pytorch_tanh, silu, "
        "relu)",
        what, activation));
  if (sliding_window && *sliding_window < 1)
    throw InputError(fmt::format(
        "{}: sliding_window {} must be >= 1 (null or absent: attention over every earlier token)",
        what, *sliding_window));
  if (!local_layers.empty() && static_cast<int64_t>(local_layers.size()) != num_layers)
    throw InputError(fmt::format("{}: layer_types names {} layers but num_hidden_layers is {}",
                                 what, local_layers.size(), num_layers));
  if (!(query_scale >= 0) || !(attn_softcap >= 0) || !(final_softcap >= 0))
    throw InputError(fmt::format(
        "{}: query_pre_attn_scalar and the soft-capping values must be positive (null: off)",
        what));
  if (rope_scaling && rope_scaling->type == RopeType::kLongRope) {
    const RopeScaling& r = *rope_scaling;
    for (const auto* f : {&r.short_factor, &r.long_factor}) {
      if (static_cast<int64_t>(f->size()) != head_dim / 2)
        throw InputError(fmt::format(
            "{}: rope_scaling.{} has {} entries; longrope needs head_dim / 2 = {}", what,
            f == &r.short_factor ? "short_factor" : "long_factor", f->size(), head_dim / 2));
      for (double v : *f)
        if (!(v > 0))
          throw InputError(fmt::format("{}: rope_scaling factors must be > 0, got {}", what, v));
    }
    if (r.original_max_position_embeddings < 1)
      throw InputError(
          fmt::format("{}: original_max_position_embeddings must be >= 1 for longrope", what));
  }
}

namespace {

// A number or null (off): soft-capping values, sliding_window.
std::optional<double> opt_number(const nlohmann::json& j, const char* key,
                                 const std::string& what) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  if (!j[key].is_number())
    throw InputError(
        fmt::format("{}: field '{}' must be a number or null, got {}", what, key, j[key].dump()));
  return j[key].get<double>();
}

std::vector<double> factor_list(const nlohmann::json& r, const char* key, const std::string& what) {
  if (!r.contains(key) || !r[key].is_array())
    throw InputError(
        fmt::format("{}: rope_scaling of type longrope needs the list '{}'", what, key));
  std::vector<double> out;
  for (const auto& v : r[key]) {
    if (!v.is_number())
      throw InputError(
          fmt::format("{}: rope_scaling.{} holds a non-number {}", what, key, v.dump()));
    out.push_back(v.get<double>());
  }
  return out;
}

// The rope scaling block (legacy rope_scaling, or transformers >= 5 rope_parameters): llama3 or
// longrope ("su"), else an error naming the type.
void parse_rope_scaling(const nlohmann::json& j, const nlohmann::json& rp, ModelConfig& c,
                        const std::string& what) {
  const bool legacy = j.contains("rope_scaling") && j["rope_scaling"].is_object();
  const nlohmann::json& r = legacy ? j["rope_scaling"] : rp;
  const std::string type =
      r.value("rope_type", r.value("type", std::string(legacy ? "" : "default")));
  if (type == "default") return;
  RopeScaling s;
  if (type == "llama3") {
    s.factor = get_or<double>(r, "factor", 8.0, what);
    s.low_freq_factor = get_or<double>(r, "low_freq_factor", 1.0, what);
    s.high_freq_factor = get_or<double>(r, "high_freq_factor", 4.0, what);
    s.original_max_position_embeddings =
        get_or<int64_t>(r, "original_max_position_embeddings", 8192, what);
  } else if ((type == "longrope" || type == "su") && c.model_type == "phi3") {
    s.type = RopeType::kLongRope;
    s.short_factor = factor_list(r, "short_factor", what);
    s.long_factor = factor_list(r, "long_factor", what);
    s.attention_factor = opt_number(r, "attention_factor", what);
    s.original_max_position_embeddings = get_or<int64_t>(
        r, "original_max_position_embeddings",
        get_or<int64_t>(j, "original_max_position_embeddings", c.max_position, what), what);
    s.factor = static_cast<double>(c.max_position) /
               static_cast<double>(std::max<int64_t>(1, s.original_max_position_embeddings));
  } else {
    throw InputError(fmt::format("{}: {} type '{}' is not supported for {} (dpft knows llama3{})",
                                 what, legacy ? "rope_scaling" : "rope_parameters.rope_type", type,
                                 c.model_type, c.model_type == "phi3" ? " and longrope" : ""));
  }
  c.rope_scaling = s;
}

// The Llama family's keys (LlamaConfig, Qwen2/3Config, MistralConfig, GemmaConfig, Gemma2Config,
// Phi3Config), with each family's defaults where the file is silent.
void parse_llama_family(const nlohmann::json& j, ModelConfig& c, const std::string& what) {
  const std::string& t = c.model_type;
  const bool gemma = t == "gemma" || t == "gemma2", phi3 = t == "phi3";
  struct Defaults {
    int64_t vocab, hidden, layers, heads, inter, positions;
    double eps;
    bool tie;
  };
  const Defaults d = t == "gemma"     ? Defaults{256000, 3072, 28, 16, 24576, 8192, 1e-6, true}
                     : t == "gemma2"  ? Defaults{256000, 2304, 26, 8, 9216, 8192, 1e-6, true}
                     : phi3           ? Defaults{32064, 3072, 32, 32, 8192, 4096, 1e-5, false}
                     : t == "mistral" ? Defaults{32000, 4096, 32, 32, 14336, 131072, 1e-6, false}
                                      : Defaults{32000, 4096, 32, 32, 11008, 2048, 1e-6, false};
  c.vocab_size = get_or<int64_t>(j, "vocab_size", d.vocab, what);
  c.hidden_size = get_or<int64_t>(j, "hidden_size", d.hidden, what);
  c.num_layers = get_or<int64_t>(j, "num_hidden_layers", d.layers, what);
  c.num_heads = get_or<int64_t>(j, "num_attention_heads", d.heads, what);
  c.num_kv_heads = get_or<int64_t>(j, "num_key_value_heads",
                                   t == "gemma2"    ? 4
                                   : t == "mistral" ? 8
                                                    : c.num_heads,
                                   what);
  c.intermediate_size = get_or<int64_t>(j, "intermediate_size", d.inter, what);
  c.max_position = get_or<int64_t>(j, "max_position_embeddings", d.positions, what);
  c.norm_eps = get_or<double>(j, "rms_norm_eps", d.eps, what);
  // transformers >= 5 writes rope_parameters {rope_theta, rope_type, factor, ...} in place of
  // the top-level rope_theta and rope_scaling; either form is read.
  const nlohmann::json no_params = nlohmann::json::object();
  const nlohmann::json& rp = j.contains("rope_parameters") && j["rope_parameters"].is_object()
                                 ? j["rope_parameters"]
                                 : no_params;
  c.rope_theta = rp.contains("rope_theta") ? get_or<double>(rp, "rope_theta", 10000.0, what)
                                           : get_or<double>(j, "rope_theta", 10000.0, what);
  for (const nlohmann::json* o : {&rp, &j})
    if (o->contains("partial_rotary_factor") &&
        get_or<double>(*o, "partial_rotary_factor", 1.0, what) != 1.0)
      throw InputError(
          fmt::format("{}: partial_rotary_factor other than 1 is not supported (dpft rotates every "
                      "dimension of each head)",
                      what));
  // Gemma reads hidden_activation (default the tanh GELU of its paper's GeGLU); an early Gemma
  // config's hidden_act "gelu" is ignored, as transformers does since 4.40.
  c.activation = gemma ? get_or<std::string>(j, "hidden_activation", "gelu_pytorch_tanh", what)
                       : get_or<std::string>(j, "hidden_act", "silu", what);
  c.tie_word_embeddings = get_or<bool>(j, "tie_word_embeddings", d.tie, what);
  // Qwen2 always has q/k/v biases and no o_proj bias (no config key); Mistral and Phi-3 have no
  // biases; Llama, Qwen3 and Gemma read attention_bias for q, k, v and o.
  const bool reads_bias = t == "llama" || t == "qwen3" || gemma;
  c.attention_bias = t == "qwen2" || (reads_bias && get_or<bool>(j, "attention_bias", false, what));
  c.o_bias = reads_bias && c.attention_bias;
  c.mlp_bias = t == "llama" && get_or<bool>(j, "mlp_bias", false, what);
  c.qk_norm = t == "qwen3";  // Qwen3Attention's q_norm / k_norm (no config key)
  c.head_dim = get_or<int64_t>(j, "head_dim",
                               gemma             ? 256
                               : c.num_heads > 0 ? c.hidden_size / c.num_heads
                                                 : 0,
                               what);
  if (t == "mistral" || t == "gemma2" || phi3) {
    const auto w = opt_number(j, "sliding_window", what);
    if (w) c.sliding_window = static_cast<int64_t>(*w);
    if ((t == "gemma2" || t == "mistral") && !j.contains("sliding_window"))
      c.sliding_window = 4096;  // Gemma2Config's and MistralConfig's default
  }
  if (gemma) {
    c.norm_plus_one = true;
    c.scale_embedding = true;
  }
  if (t == "gemma2") {
    c.sandwich_norms = true;
    c.query_scale = opt_number(j, "query_pre_attn_scalar", what).value_or(256.0);
    c.attn_softcap = j.contains("attn_logit_softcapping")
                         ? opt_number(j, "attn_logit_softcapping", what).value_or(0.0)
                         : 50.0;
    c.final_softcap = j.contains("final_logit_softcapping")
                          ? opt_number(j, "final_logit_softcapping", what).value_or(0.0)
                          : 30.0;
    // transformers >= 4.5x: layer_types; before: even layers local (Gemma-2's alternation).
    if (j.contains("layer_types") && j["layer_types"].is_array()) {
      for (const auto& v : j["layer_types"]) {
        const std::string lt = v.is_string() ? v.get<std::string>() : v.dump();
        if (lt != "sliding_attention" && lt != "full_attention")
          throw InputError(fmt::format(
              "{}: layer_types entry '{}' is not sliding_attention or full_attention", what, lt));
        c.local_layers.push_back(lt == "sliding_attention");
      }
    } else {
      for (int64_t l = 0; l < c.num_layers; ++l) c.local_layers.push_back(l % 2 == 0);
    }
  }
  c.fused_projections = phi3;
  parse_rope_scaling(j, rp, c, what);
}

}  // namespace

ModelConfig parse_model_config(const nlohmann::json& j, const std::string& what) {
  if (!j.is_object()) throw InputError(fmt::format("{}: config.json must be a JSON object", what));
  ModelConfig c;
  if (!j.contains("model_type") || !j["model_type"].is_string())
    throw InputError(fmt::format("{}: config.json has no 'model_type'", what));
  c.model_type = j["model_type"].get<std::string>();
  if (c.model_type == "bert" || c.model_type == "roberta") {
    const bool roberta = c.model_type == "roberta";
    c.vocab_size = get_or<int64_t>(j, "vocab_size", roberta ? 50265 : 30522, what);
    c.hidden_size = get_or<int64_t>(j, "hidden_size", 768, what);
    c.num_layers = get_or<int64_t>(j, "num_hidden_layers", 12, what);
    c.num_heads = get_or<int64_t>(j, "num_attention_heads", 12, what);
    c.num_kv_heads = c.num_heads;
    c.intermediate_size = get_or<int64_t>(j, "intermediate_size", 3072, what);
    c.max_position = get_or<int64_t>(j, "max_position_embeddings", 512, what);
    c.type_vocab_size = get_or<int64_t>(j, "type_vocab_size", 2, what);
    c.norm_eps = get_or<double>(j, "layer_norm_eps", 1e-12, what);
    c.activation = get_or<std::string>(j, "hidden_act", "gelu", what);
    c.is_decoder = get_or<bool>(j, "is_decoder", false, what);
    c.tie_word_embeddings = get_or<bool>(j, "tie_word_embeddings", true, what);
    c.attention_bias = true;
    c.head_dim = c.num_heads > 0 ? c.hidden_size / c.num_heads : 0;
    const std::string pet = get_or<std::string>(j, "position_embedding_type", "absolute", what);
    if (pet != "absolute")
      throw InputError(
          fmt::format("{}: position_embedding_type '{}' is not supported (only "
                      "absolute)",
                      what, pet));
    std::string arch = roberta ? "RobertaModel" : "BertModel";
    if (j.contains("architectures") && j["architectures"].is_array() &&
        !j["architectures"].empty() && j["architectures"][0].is_string())
      arch = j["architectures"][0].get<std::string>();
    bool known = false;
    for (const auto& n : kHeadNames)
      if (arch == (roberta ? n.roberta : n.bert)) c.head = n.head, known = true;
    if (!known)
      throw InputError(fmt::format(
          "{}: architecture '{}' is not supported for {}; dpft knows {}, "
          "{}, {} and {}",
          what, arch, c.model_type, encoder_architecture(c.model_type, EncoderHead::kNone),
          encoder_architecture(c.model_type, EncoderHead::kSequenceClassification),
          encoder_architecture(c.model_type, EncoderHead::kMaskedLM),
          encoder_architecture(c.model_type, EncoderHead::kCausalLM)));
    if (c.head == EncoderHead::kSequenceClassification) {
      // id2label {"0": "negative", "1": "positive"} names the labels; else num_labels (HF: 2).
      if (j.contains("id2label") && j["id2label"].is_object() && !j["id2label"].empty()) {
        const auto& m = j["id2label"];
        c.labels.assign(m.size(), "");
        for (auto it = m.begin(); it != m.end(); ++it) {
          size_t id = 0;
          try {
            size_t used = 0;
            id = static_cast<size_t>(std::stoul(it.key(), &used));
            if (used != it.key().size()) throw std::invalid_argument(it.key());
          } catch (const std::exception&) {
            throw InputError(
                fmt::format("{}: id2label key '{}' is not a label id", what, it.key()));
          }
          if (id >= c.labels.size() || !it.value().is_string() || !c.labels[id].empty())
            throw InputError(
                fmt::format("{}: id2label must map 0..{} to names, once each; "
                            "'{}' breaks that",
                            what, m.size() - 1, it.key()));
          c.labels[id] = it.value().get<std::string>();
        }
      } else {
        const int64_t n = get_or<int64_t>(j, "num_labels", 2, what);
        if (n < 1 || n > 100000)
          throw InputError(fmt::format("{}: num_labels must be in [1, 100000], got {}", what, n));
        for (int64_t i = 0; i < n; ++i) c.labels.push_back(fmt::format("LABEL_{}", i));
      }
      if (j.contains("num_labels") && j["num_labels"].is_number_integer() &&
          j["num_labels"].get<int64_t>() != c.num_labels())
        throw InputError(fmt::format("{}: num_labels {} but id2label names {} labels", what,
                                     j["num_labels"].get<int64_t>(), c.num_labels()));
    }
  } else if (c.model_type == "bart") {
    // BartConfig's defaults (bart-large); the decoder must be as wide as the encoder.
    c.vocab_size = get_or<int64_t>(j, "vocab_size", 50265, what);
    c.hidden_size = get_or<int64_t>(j, "d_model", 1024, what);
    c.num_layers = get_or<int64_t>(j, "encoder_layers", 12, what);
    c.decoder_layers = get_or<int64_t>(j, "decoder_layers", 12, what);
    c.num_heads = get_or<int64_t>(j, "encoder_attention_heads", 16, what);
    c.num_kv_heads = c.num_heads;
    c.intermediate_size = get_or<int64_t>(j, "encoder_ffn_dim", 4096, what);
    for (auto [key, enc] : {std::pair<const char*, int64_t>{"decoder_attention_heads", c.num_heads},
                            {"decoder_ffn_dim", c.intermediate_size}}) {
      const int64_t dec = get_or<int64_t>(j, key, enc, what);
      if (dec != enc)
        throw InputError(
            fmt::format("{}: {} {} differs from the encoder's {}; dpft's BART needs "
                        "them equal (as every released BART)",
                        what, key, dec, enc));
    }
    c.max_position = get_or<int64_t>(j, "max_position_embeddings", 1024, what);
    c.activation = get_or<std::string>(j, "activation_function", "gelu", what);
    c.scale_embedding = get_or<bool>(j, "scale_embedding", false, what);
    c.decoder_start_token_id = get_or<int64_t>(j, "decoder_start_token_id", 2, what);
    c.tie_word_embeddings = get_or<bool>(j, "tie_word_embeddings", true, what);
    c.norm_eps = 1e-5;  // torch.nn.LayerNorm's default; BartConfig has no epsilon
    c.attention_bias = true;
    c.head_dim = c.num_heads > 0 ? c.hidden_size / c.num_heads : 0;
    const std::string arch = j.contains("architectures") && j["architectures"].is_array() &&
                                     !j["architectures"].empty() &&
                                     j["architectures"][0].is_string()
                                 ? j["architectures"][0].get<std::string>()
                                 : "BartForConditionalGeneration";
    if (arch != "BartForConditionalGeneration" && arch != "BartModel")
      throw InputError(
          fmt::format("{}: architecture '{}' is not supported for bart; dpft knows "
                      "BartForConditionalGeneration (and BartModel's weights)",
                      what, arch));
  } else if (c.model_type == "gpt2") {
    c.vocab_size = get_or<int64_t>(j, "vocab_size", 50257, what);
    c.hidden_size = get_or<int64_t>(j, "n_embd", 768, what);
    c.num_layers = get_or<int64_t>(j, "n_layer", 12, what);
    c.num_heads = get_or<int64_t>(j, "n_head", 12, what);
    c.num_kv_heads = c.num_heads;
    c.intermediate_size = get_or<int64_t>(j, "n_inner", 4 * c.hidden_size, what);
    c.max_position = get_or<int64_t>(j, "n_positions", 1024, what);
    c.norm_eps = get_or<double>(j, "layer_norm_epsilon", 1e-5, what);
    c.activation = get_or<std::string>(j, "activation_function", "gelu_new", what);
    c.tie_word_embeddings = get_or<bool>(j, "tie_word_embeddings", true, what);
    c.attention_bias = true;
    c.head_dim = c.num_heads > 0 ? c.hidden_size / c.num_heads : 0;
  } else if (c.is_llama_family()) {
    parse_llama_family(j, c, what);
  } else {
    throw InputError(
        fmt::format("{}: unsupported model_type '{}'; dpft supports gpt2, llama, qwen2, qwen3, "
                    "mistral, gemma, gemma2, phi3, bert, roberta, bart",
                    what, c.model_type));
  }
  c.bos_token_id = opt_id(j, "bos_token_id");
  c.eos_token_id = opt_id(j, "eos_token_id");
  c.pad_token_id = opt_id(j, "pad_token_id");
  if (c.is_encoder() && !c.pad_token_id) c.pad_token_id = c.model_type == "roberta" ? 1 : 0;
  if (c.is_seq2seq()) {  // BART's ids: <s> 0, <pad> 1, </s> 2
    if (!c.pad_token_id) c.pad_token_id = 1;
    if (!c.bos_token_id) c.bos_token_id = 0;
    if (!c.eos_token_id) c.eos_token_id = 2;
  }
  c.validate(what);
  return c;
}

ModelConfig load_model_config(const std::filesystem::path& dir) {
  auto path = dir / "config.json";
  if (!std::filesystem::exists(path))
    throw InputError(fmt::format("{}: no config.json (is this a Hugging Face checkpoint directory?)", dir.string()));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError(fmt::format("{}: invalid JSON: {}", path.string(), e.what()));
  }
  return parse_model_config(j, path.string());
}

nlohmann::json model_config_to_json(const ModelConfig& c) {
  nlohmann::json j;
  j["model_type"] = c.model_type;
  j["vocab_size"] = c.vocab_size;
  if (c.is_encoder()) {
    j["architectures"] = {encoder_architecture(c.model_type, c.head)};
    j["hidden_size"] = c.hidden_size;
    j["num_hidden_layers"] = c.num_layers;
    j["num_attention_heads"] = c.num_heads;
    j["intermediate_size"] = c.intermediate_size;
    j["max_position_embeddings"] = c.max_position;
    j["type_vocab_size"] = c.type_vocab_size;
    j["layer_norm_eps"] = c.norm_eps;
    j["hidden_act"] = c.activation;
    j["is_decoder"] = c.is_decoder;
    j["tie_word_embeddings"] = c.tie_word_embeddings;
    j["position_embedding_type"] = "absolute";
    j["hidden_dropout_prob"] =
        0.1;  // HF's defaults; dpft's forward has no dropout (docs/models.md)
    j["attention_probs_dropout_prob"] = 0.1;
    if (c.head == EncoderHead::kSequenceClassification) {
      nlohmann::json id2label = nlohmann::json::object(), label2id = nlohmann::json::object();
      for (size_t i = 0; i < c.labels.size(); ++i) {
        id2label[std::to_string(i)] = c.labels[i];
        label2id[c.labels[i]] = i;
      }
      j["id2label"] = id2label;
      j["label2id"] = label2id;
      j["num_labels"] = c.num_labels();
    }
  } else if (c.is_seq2seq()) {
    j["architectures"] = {"BartForConditionalGeneration"};
    j["d_model"] = c.hidden_size;
    j["encoder_layers"] = c.num_layers;
    j["decoder_layers"] = c.decoder_layers;
    j["encoder_attention_heads"] = c.num_heads;
    j["decoder_attention_heads"] = c.num_heads;
    j["encoder_ffn_dim"] = c.intermediate_size;
    j["decoder_ffn_dim"] = c.intermediate_size;
    j["max_position_embeddings"] = c.max_position;
    j["activation_function"] = c.activation;
    j["scale_embedding"] = c.scale_embedding;
    j["decoder_start_token_id"] = c.decoder_start_token_id;
    j["tie_word_embeddings"] = c.tie_word_embeddings;
    j["is_encoder_decoder"] = true;
    j["dropout"] = 0.1;  // HF's defaults; dpft's forward has no dropout (docs/models.md)
    j["attention_dropout"] = 0.0;
    j["activation_dropout"] = 0.0;
  } else if (c.is_gpt2()) {
    j["architectures"] = {"GPT2LMHeadModel"};
    j["n_embd"] = c.hidden_size;
    j["n_layer"] = c.num_layers;
    j["n_head"] = c.num_heads;
    j["n_inner"] = c.intermediate_size;
    j["n_positions"] = c.max_position;
    j["n_ctx"] = c.max_position;
    j["layer_norm_epsilon"] = c.norm_eps;
    j["activation_function"] = c.activation;
    j["tie_word_embeddings"] = c.tie_word_embeddings;
    j["attn_pdrop"] = 0.0;
    j["embd_pdrop"] = 0.0;
    j["resid_pdrop"] = 0.0;
  } else {
    const std::string& t = c.model_type;
    j["architectures"] = {t == "qwen2"     ? "Qwen2ForCausalLM"
                          : t == "qwen3"   ? "Qwen3ForCausalLM"
                          : t == "mistral" ? "MistralForCausalLM"
                          : t == "gemma"   ? "GemmaForCausalLM"
                          : t == "gemma2"  ? "Gemma2ForCausalLM"
                          : t == "phi3"    ? "Phi3ForCausalLM"
                                           : "LlamaForCausalLM"};
    j["hidden_size"] = c.hidden_size;
    j["num_hidden_layers"] = c.num_layers;
    j["num_attention_heads"] = c.num_heads;
    j["num_key_value_heads"] = c.num_kv_heads;
    j["head_dim"] = c.head_dim;
    j["intermediate_size"] = c.intermediate_size;
    j["max_position_embeddings"] = c.max_position;
    j["rms_norm_eps"] = c.norm_eps;
    j["rope_theta"] = c.rope_theta;
    j["hidden_act"] = c.activation;
    if (t == "gemma" || t == "gemma2") j["hidden_activation"] = c.activation;
    j["tie_word_embeddings"] = c.tie_word_embeddings;
    if (t == "llama" || t == "qwen3" || t == "gemma" || t == "gemma2")
      j["attention_bias"] = c.attention_bias;
    if (t == "llama") j["mlp_bias"] = c.mlp_bias;
    if (t == "mistral" || t == "gemma2" || t == "phi3")
      j["sliding_window"] =
          c.sliding_window ? nlohmann::json(*c.sliding_window) : nlohmann::json(nullptr);
    if (t == "gemma2") {
      j["query_pre_attn_scalar"] = c.query_scale;
      j["attn_logit_softcapping"] =
          c.attn_softcap > 0 ? nlohmann::json(c.attn_softcap) : nlohmann::json(nullptr);
      j["final_logit_softcapping"] =
          c.final_softcap > 0 ? nlohmann::json(c.final_softcap) : nlohmann::json(nullptr);
      nlohmann::json types = nlohmann::json::array();
      for (int64_t l = 0; l < c.num_layers; ++l)
        types.push_back(c.local_layer(l) ? "sliding_attention" : "full_attention");
      j["layer_types"] = types;
    }
    if (c.rope_scaling && c.rope_scaling->type == RopeType::kLlama3)
      j["rope_scaling"] = {{"rope_type", "llama3"},
                           {"factor", c.rope_scaling->factor},
                           {"low_freq_factor", c.rope_scaling->low_freq_factor},
                           {"high_freq_factor", c.rope_scaling->high_freq_factor},
                           {"original_max_position_embeddings", c.rope_scaling->original_max_position_embeddings}};
    if (c.rope_scaling && c.rope_scaling->type == RopeType::kLongRope) {
      j["rope_scaling"] = {{"type", "longrope"},
                           {"short_factor", c.rope_scaling->short_factor},
                           {"long_factor", c.rope_scaling->long_factor}};
      if (c.rope_scaling->attention_factor)
        j["rope_scaling"]["attention_factor"] = *c.rope_scaling->attention_factor;
      j["original_max_position_embeddings"] = c.rope_scaling->original_max_position_embeddings;
    }
    j["attention_dropout"] = 0.0;
  }
  if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
  if (c.eos_token_id) j["eos_token_id"] = *c.eos_token_id;
  if (c.pad_token_id) j["pad_token_id"] = *c.pad_token_id;
  j["torch_dtype"] = "float32";
  return j;
}

}  // namespace dpft::model
