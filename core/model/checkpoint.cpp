#include "core/model/checkpoint.hpp"

#include <fmt/format.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "core/model/config.hpp"
#include "core/model/safetensors.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "core/util/shape.hpp"
#include "core/util/strings.hpp"

namespace dpft::model {

namespace {
const char* kAdapterPrefix = "base_model.model.";

// Stored tensors that no parameter reads: named in one warning (a config that does not match
// its weights, e.g. a bias the config switches off, shows here). Buffers HF writes but computes
// itself (rotary inv_freq, GPT-2's causal-mask buffers, BERT's position_ids) are not counted.
void warn_unused(const std::vector<std::string>& stored, const std::set<std::string>& read,
                 const std::string& what, const std::string& model_type) {
  auto derived = [](const std::string& n) {
    for (const char* end :
         {"rotary_emb.inv_freq", ".attn.bias", ".attn.masked_bias", "embeddings.position_ids"})
      if (n.size() >= strlen(end) && n.compare(n.size() - strlen(end), strlen(end), end) == 0)
        return true;
    return false;
  };
  std::vector<std::string> unused;
  for (const std::string& n : stored)
    if (!read.count(n) && !derived(n)) unused.push_back(n);
  if (unused.empty()) return;
  const size_t shown = std::min<size_t>(unused.size(), 8);
  spdlog::warn("{}: {} stored tensor(s) not used by dpft's {} model: {}{}", what, unused.size(),
               model_type, join({unused.begin(), unused.begin() + static_cast<long>(shown)}, ", "),
               unused.size() > shown ? fmt::format(", ... ({} more)", unused.size() - shown) : "");
}
}  // namespace

CausalLM load_checkpoint(const fs::path& dir, torch::Dtype dtype) {
  if (!fs::is_directory(dir))
    throw InputError(fmt::format("model directory '{}' does not exist", dir.string()));
  ModelConfig cfg = load_model_config(dir);
  TensorStore store = TensorStore::open_dir(dir);
  CausalLM m = make_causal_lm(cfg, 0);
  std::set<std::string> read;
  load_weights(
      m,
      [&](const std::string& n) {
        if (!store.contains(n)) return torch::Tensor();
        read.insert(n);
        return store.load(n);
      },
      dir.string());
  warn_unused(store.names(), read, dir.string(), cfg.model_type);
  m->to(dtype);
  m->eval();
  return m;
}

void save_checkpoint(CausalLM& model, const fs::path& dir, bool merge_lora, torch::Dtype save_dtype) {
  fs::create_directories(dir);
  std::vector<Linear> merged;
  if (merge_lora)
    for (auto& [path, lin] : model->linears())
      if (lin->has_lora() && !lin->merged()) {
        lin->merge_lora();
        merged.push_back(lin);
      }
  std::vector<std::pair<std::string, torch::Tensor>> w = export_weights(model);
  for (auto& l : merged) l->unmerge_lora();
  for (auto& [n, t] : w) t = t.to(save_dtype);
  nlohmann::json cfg = model_config_to_json(model->config());
  cfg["torch_dtype"] = save_dtype == torch::kFloat16 ? "float16" : save_dtype == torch::kBFloat16 ? "bfloat16" : "float32";
  write_file_atomic(dir / "config.json", cfg.dump(2) + "\n");
  save_safetensors(dir / "model.safetensors", w, {{"format", "pt"}});
}

void save_adapter(CausalLM& model, const PeftOptions& o, const fs::path& dir, const std::string& base_model) {
  DPFT_CHECK(saves_adapter(o.kind), "save_adapter: PEFT kind is '{}', not lora or adapter",
             name_of(o.kind));
  fs::create_directories(dir);
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  const ModelConfig& mc = model->config();
  const char* task = mc.head == EncoderHead::kSequenceClassification ? "SEQ_CLS"
                     : mc.head == EncoderHead::kMaskedLM             ? "MASKED_LM"
                                                                     : "CAUSAL_LM";
  if (o.kind ==
      PeftKind::kAdapter) {  // every trainable parameter: the adapters and modules_to_save
    for (auto& [name, t] : trainable_parameters(model))
      tensors.emplace_back(kAdapterPrefix + name, t.detach().to(torch::kCPU).contiguous());
    DPFT_CHECK(!tensors.empty(), "save_adapter: the model has no adapters");
    nlohmann::json cfg = {
        {"peft_type", "BOTTLENECK"},  // dpft's layout (docs/models.md, "PEFT")
        {"task_type", task},
        {"base_model_name_or_path", base_model},
        {"reduction_factor", o.reduction_factor},
        {"bottleneck_size", adapter_width(mc.hidden_size, o.reduction_factor)},
        {"non_linearity", "relu"},
        {"ln_before", true},
        {"placement", "after the attention output and the FFN output projections (Houlsby)"},
        {"modules_to_save",
         o.modules_to_save.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.modules_to_save)},
        {"inference_mode", true}};
    write_file_atomic(dir / "adapter_config.json", cfg.dump(2) + "\n");
    save_safetensors(dir / "adapter_model.safetensors", tensors);
    return;
  }
  for (auto& [path, lin] : model->linears()) {
    if (!lin->has_lora()) continue;
    tensors.emplace_back(kAdapterPrefix + path + ".lora_A.weight", lin->lora_A.detach().to(torch::kCPU).contiguous());
    tensors.emplace_back(kAdapterPrefix + path + ".lora_B.weight", lin->lora_B.detach().to(torch::kCPU).contiguous());
  }
  DPFT_CHECK(!tensors.empty(), "save_adapter: the model has no LoRA layers");
  // modules_to_save: their trained parameters in full, keyed as PEFT saves them
  // (base_model.model.<parameter name>, without PEFT's wrapper path).
  for (auto& [name, t] : trainable_parameters(model))
    if (name.find("lora_") == std::string::npos)
      tensors.emplace_back(kAdapterPrefix + name, t.detach().to(torch::kCPU).contiguous());
  bool gpt2 = mc.is_gpt2();
  nlohmann::json cfg = {
      {"peft_type", "LORA"},
      {"task_type", task},
      {"base_model_name_or_path", base_model},
      {"r", o.r},
      {"lora_alpha", o.alpha},
      {"lora_dropout", o.dropout},
      {"target_modules", resolved_targets(o.targets, mc.model_type, o.kind)},
      {"fan_in_fan_out", gpt2},  // GPT-2's Conv1D stores (in, out)
      {"bias", "none"},
      {"inference_mode", true},
      {"init_lora_weights", true},
      {"modules_to_save",
       o.modules_to_save.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.modules_to_save)},
      {"revision", nullptr},
      {"use_rslora", false},
      {"use_dora", false},
      {"rank_pattern", nlohmann::json::object()},
      {"alpha_pattern", nlohmann::json::object()},
      {"layers_to_transform", nullptr},
      {"layers_pattern", nullptr}};
  write_file_atomic(dir / "adapter_config.json", cfg.dump(2) + "\n");
  save_safetensors(dir / "adapter_model.safetensors", tensors);
}

PeftOptions load_adapter(CausalLM& model, const fs::path& dir) {
  fs::path cfg_path = dir / "adapter_config.json", w_path = dir / "adapter_model.safetensors";
  if (!fs::exists(cfg_path)) throw InputError(fmt::format("{}: no adapter_config.json (not a PEFT adapter directory)", dir.string()));
  if (!fs::exists(w_path)) throw InputError(fmt::format("{}: no adapter_model.safetensors", dir.string()));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(cfg_path));
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: invalid JSON: {}", cfg_path.string(), e.what()));
  }
  const std::string type = j.value("peft_type", "");
  if (type != "LORA" && type != "BOTTLENECK")
    throw InputError(fmt::format("{}: peft_type '{}' is not supported (LORA, or dpft's BOTTLENECK)",
                                 cfg_path.string(), type));
  if (j.value("use_dora", false) || j.value("use_rslora", false))
    throw InputError(fmt::format("{}: DoRA / rsLoRA adapters are not supported", cfg_path.string()));
  PeftOptions o;
  try {
    if (j.contains("modules_to_save") && !j["modules_to_save"].is_null())
      o.modules_to_save = j["modules_to_save"].get<std::vector<std::string>>();
    if (type == "BOTTLENECK") {
      o.kind = PeftKind::kAdapter;
      o.reduction_factor = j.at("reduction_factor").get<int64_t>();
      if (j.value("non_linearity", "relu") != "relu" || !j.value("ln_before", true))
        throw InputError(fmt::format("{}: only relu adapters with a LayerNorm before are built",
                                     cfg_path.string()));
      if (j.contains("bottleneck_size") &&
          j["bottleneck_size"].get<int64_t>() !=
              adapter_width(model->config().hidden_size, o.reduction_factor))
        throw InputError(
            fmt::format("{}: bottleneck_size {} does not follow from hidden size {} "
                        "and reduction_factor {} (another base model?)",
                        cfg_path.string(), j["bottleneck_size"].get<int64_t>(),
                        model->config().hidden_size, o.reduction_factor));
    }
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: {}", cfg_path.string(), e.what()));
  }
  if (o.kind == PeftKind::kLora) try {
      o.r = j.at("r").get<int64_t>();
      o.alpha = j.at("lora_alpha").get<double>();
      o.dropout = j.value("lora_dropout", 0.0);
      if (j.at("target_modules").is_string())
        o.targets = {j["target_modules"].get<std::string>()};
      else
        o.targets = j.at("target_modules").get<std::vector<std::string>>();
    } catch (const nlohmann::json::exception& e) {
      throw InputError(fmt::format("{}: {}", cfg_path.string(), e.what()));
    }
  apply_peft(model, o, 0);
  auto file = SafetensorsFile::open(w_path);
  std::map<std::string, bool> used;
  for (const auto& t : file->tensors()) used[t.name] = false;
  torch::NoGradGuard ng;
  for (auto& [path, lin] : model->linears()) {
    if (!lin->has_lora()) continue;
    for (auto [suffix, param] : {std::pair<const char*, torch::Tensor>{".lora_A.weight", lin->lora_A},
                                 std::pair<const char*, torch::Tensor>{".lora_B.weight", lin->lora_B}}) {
      std::string key = kAdapterPrefix + path + suffix;
      if (!file->find(key)) throw InputError(fmt::format("{}: missing tensor '{}'", w_path.string(), key));
      torch::Tensor t = file->load(key);
      if (t.sizes() != param.sizes())
        throw InputError(fmt::format("{}: '{}' has shape {}, expected {}", w_path.string(), key,
                                     shape_str(t.sizes()), shape_str(param.sizes())));
      if (!t.is_floating_point())
        throw InputError(fmt::format("{}: '{}' has dtype {}; adapter weights must be F32, F16 or BF16",
                                     w_path.string(), key, c10::toString(t.scalar_type())));
      param.copy_(t.to(param.scalar_type()));
      used[key] = true;
    }
  }
  for (auto& [name, param] : trainable_parameters(model)) {  // adapters, modules_to_save
    if (name.find("lora_") != std::string::npos) continue;
    const std::string key = kAdapterPrefix + name;
    if (!file->find(key))
      throw InputError(fmt::format("{}: missing tensor '{}' ({})", w_path.string(), key,
                                   peft_parameter(name) ? "adapter" : "modules_to_save"));
    torch::Tensor t = file->load(key);
    if (t.sizes() != param.sizes() || !t.is_floating_point())
      throw InputError(fmt::format("{}: '{}' has shape {} and dtype {}, expected {} floating",
                                   w_path.string(), key, shape_str(t.sizes()),
                                   c10::toString(t.scalar_type()), shape_str(param.sizes())));
    param.copy_(t.to(param.scalar_type()));
    used[key] = true;
  }
  for (const auto& [k, u] : used)
    if (!u)
      throw InputError(
          fmt::format("{}: tensor '{}' matches no LoRA layer, adapter or module to save of this "
                      "model",
                      w_path.string(), k));
  return o;
}

int copy_tokenizer_files(const fs::path& from, const fs::path& to) {
  static const char* names[] = {"tokenizer.json",
                                "vocab.json",
                                "merges.txt",
                                "vocab.bpe",
                                "vocab.txt",
                                "tokenizer_config.json",
                                "special_tokens_map.json",
                                "tokenizer.model"};
  fs::create_directories(to);
  if (fs::is_regular_file(from)) {
    // One tokenizer file: under the name a checkpoint directory's loader looks for (a
    // SentencePiece or tiktoken model file becomes tokenizer.model; *.tiktoken keeps its name).
    const std::string ext = from.extension().string();
    const fs::path name = ext == ".json"       ? fs::path("tokenizer.json")
                          : ext == ".tiktoken" ? from.filename()
                                               : fs::path("tokenizer.model");
    fs::copy_file(from, to / name, fs::copy_options::overwrite_existing);
    return 1;
  }
  int n = 0;
  for (const char* name : names)
    if (fs::exists(from / name)) {
      fs::copy_file(from / name, to / name, fs::copy_options::overwrite_existing);
      ++n;
    }
  for (const auto& e : fs::directory_iterator(from))
    if (e.path().extension() == ".tiktoken") {
      fs::copy_file(e.path(), to / e.path().filename(), fs::copy_options::overwrite_existing);
      ++n;
    }
  return n;
}

ReheadReport copy_shared_parameters(CausalLM& to, const CausalLM& from) {
  ReheadReport r;
  auto src = from->named_parameters(true);
  torch::NoGradGuard ng;
  for (auto& p : to->named_parameters(true)) {
    const torch::Tensor* s = src.find(p.key());
    if (!s) {
      r.fresh.push_back(p.key());
      continue;
    }
    DPFT_CHECK(s->sizes() == p.value().sizes(),
               "{}: shape {} in the source checkpoint but {} in the new model: the bodies "
               "differ (another preset or vocabulary?)",
               p.key(), shape_str(s->sizes()), shape_str(p.value().sizes()));
    p.value().copy_(*s);
    ++r.copied;
  }
  auto dst = to->named_parameters(true);
  for (const auto& p : src)
    if (!dst.find(p.key())) r.dropped.push_back(p.key());
  DPFT_CHECK(r.copied > 0, "the source checkpoint shares no parameter with the new model");
  return r;
}

}  // namespace dpft::model
