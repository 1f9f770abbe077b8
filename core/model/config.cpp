#include "core/model/config.hpp"

#include <fmt/format.h>

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
  if (model_type != "gpt2" && model_type != "llama" && model_type != "qwen2" &&
      model_type != "qwen3" && !is_encoder() && !is_seq2seq())
    throw InputError(
        fmt::format("{}: unsupported model_type '{}'; dpft supports gpt2, llama, "
                    "qwen2, qwen3, bert, roberta, bart",
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
  if (activation != "gelu_new" && activation != "gelu" && activation != "silu" && activation != "relu")
    throw InputError(fmt::format("{}: unsupported activation '{}'", what, activation));
}

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
  } else {
    c.vocab_size = get_or<int64_t>(j, "vocab_size", 32000, what);
    c.hidden_size = get_or<int64_t>(j, "hidden_size", 4096, what);
    c.num_layers = get_or<int64_t>(j, "num_hidden_layers", 32, what);
    c.num_heads = get_or<int64_t>(j, "num_attention_heads", 32, what);
    c.num_kv_heads = get_or<int64_t>(j, "num_key_value_heads", c.num_heads, what);
    c.intermediate_size = get_or<int64_t>(j, "intermediate_size", 11008, what);
    c.max_position = get_or<int64_t>(j, "max_position_embeddings", 2048, what);
    c.norm_eps = get_or<double>(j, "rms_norm_eps", 1e-6, what);
    // transformers >= 5 writes rope_parameters {rope_theta, rope_type, factor, ...} in place of
    // the top-level rope_theta and rope_scaling; either form is read.
    const nlohmann::json no_params = nlohmann::json::object();
    const nlohmann::json& rp = j.contains("rope_parameters") && j["rope_parameters"].is_object()
                                   ? j["rope_parameters"]
                                   : no_params;
    c.rope_theta = rp.contains("rope_theta") ? get_or<double>(rp, "rope_theta", 10000.0, what)
                                             : get_or<double>(j, "rope_theta", 10000.0, what);
    if (rp.contains("partial_rotary_factor") &&
        get_or<double>(rp, "partial_rotary_factor", 1.0, what) != 1.0)
      throw InputError(fmt::format(
          "{}: rope_parameters.partial_rotary_factor other than 1 is not supported", what));
    c.activation = get_or<std::string>(j, "hidden_act", "silu", what);
    c.tie_word_embeddings = get_or<bool>(j, "tie_word_embeddings", false, what);  // LlamaConfig/Qwen2Config default
    // Qwen2 always has q/k/v biases (no config key); Llama and Qwen3 read attention_bias.
    c.attention_bias = c.model_type == "qwen2" || get_or<bool>(j, "attention_bias", false, what);
    c.qk_norm = c.model_type == "qwen3";  // Qwen3Attention's q_norm / k_norm (no config key)
    c.head_dim = get_or<int64_t>(j, "head_dim", c.num_heads > 0 ? c.hidden_size / c.num_heads : 0, what);
    const bool legacy = j.contains("rope_scaling") && j["rope_scaling"].is_object();
    const nlohmann::json& r = legacy ? j["rope_scaling"] : rp;
    const std::string type =
        r.value("rope_type", r.value("type", std::string(legacy ? "" : "default")));
    if (type != "default") {
      if (type != "llama3")
        throw InputError(fmt::format("{}: {} type '{}' is not supported (only llama3)", what,
                                     legacy ? "rope_scaling" : "rope_parameters.rope_type", type));
      RopeScaling s;
      s.factor = get_or<double>(r, "factor", 8.0, what);
      s.low_freq_factor = get_or<double>(r, "low_freq_factor", 1.0, what);
      s.high_freq_factor = get_or<double>(r, "high_freq_factor", 4.0, what);
      s.original_max_position_embeddings = get_or<int64_t>(r, "original_max_position_embeddings", 8192, what);
      c.rope_scaling = s;
    }
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
    j["architectures"] = {c.model_type == "qwen2"   ? "Qwen2ForCausalLM"
                          : c.model_type == "qwen3" ? "Qwen3ForCausalLM"
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
    j["tie_word_embeddings"] = c.tie_word_embeddings;
    if (c.model_type != "qwen2") j["attention_bias"] = c.attention_bias;
    if (c.rope_scaling)
      j["rope_scaling"] = {{"rope_type", "llama3"},
                           {"factor", c.rope_scaling->factor},
                           {"low_freq_factor", c.rope_scaling->low_freq_factor},
                           {"high_freq_factor", c.rope_scaling->high_freq_factor},
                           {"original_max_position_embeddings", c.rope_scaling->original_max_position_embeddings}};
    j["attention_dropout"] = 0.0;
  }
  if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
  if (c.eos_token_id) j["eos_token_id"] = *c.eos_token_id;
  if (c.pad_token_id) j["pad_token_id"] = *c.pad_token_id;
  j["torch_dtype"] = "float32";
  return j;
}

}  // namespace dpft::model
