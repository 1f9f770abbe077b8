#include "core/train/setup.hpp"

#include "core/model/encoder.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdlib>
#include <set>

#include "core/dist/world.hpp"
#include "core/model/checkpoint.hpp"
#include "core/model/config.hpp"
#include "core/model/safetensors.hpp"
#include "core/tokenizer/load.hpp"
#include "core/util/error.hpp"
#include "core/util/seed.hpp"
#include "core/util/strings.hpp"
#include "dpft/build_info.hpp"

namespace dpft::train {

namespace fs = std::filesystem;

fs::path resolve_model_dir(const std::string& path) {
  if (!path.empty()) {
    if (!fs::is_directory(path))
      throw InputError(
          fmt::format("model.path: '{}' is not a directory (expected a HF-format checkpoint: "
                      "config.json + model.safetensors + tokenizer files)",
                      path));
    return path;
  }
  std::vector<fs::path> tried;
  if (const char* env = std::getenv("DPFT_DEFAULT_MODEL")) tried.emplace_back(env);
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) tried.push_back(exe.parent_path().parent_path() / "models" / "tiny-gpt2");
  tried.push_back(fs::path(build::kSourceDir) / "models" / "tiny-gpt2");
  for (const auto& p : tried)
    if (fs::exists(p / "config.json")) return p;
  std::string list;
  for (const auto& p : tried) list += "\n  " + p.string();
  throw InputError(
      "the embedded default model was not found; looked in:" + list +
      "\nset model.path to a checkpoint directory or DPFT_DEFAULT_MODEL to models/tiny-gpt2");
}

fs::path tokenizer_dir(const Spec& spec, const fs::path& model_dir) {
  if (spec.model.tokenizer.empty()) return model_dir;
  DPFT_CHECK_AS(InputError, fs::exists(spec.model.tokenizer),
                "model.tokenizer: '{}' does not exist (a directory with tokenizer.json, or "
                "vocab.json + merges.txt, or an encoder's vocab.txt)",
                spec.model.tokenizer);
  return spec.model.tokenizer;
}

model::PeftOptions peft_options(const Spec& spec) {
  model::PeftOptions o;
  o.kind = spec.model.peft.kind;
  o.r = spec.model.peft.r;
  o.alpha = spec.model.peft.alpha;
  o.dropout = spec.model.peft.dropout;
  o.targets = spec.model.peft.targets;
  o.reduction_factor = spec.model.peft.reduction_factor;
  if (spec.model.peft.modules_to_save)
    o.modules_to_save = *spec.model.peft.modules_to_save;
  else if (model::saves_adapter(o.kind) && spec.data.task == Task::kClassification)
    o.modules_to_save = {"classifier"};  // a new head must train (HF peft's SEQ_CLS default)
  return o;
}

Spec with_model_defaults(const Spec& given) {
  Spec spec = given;
  std::vector<std::string>& t = spec.model.peft.targets;
  if (t != std::vector<std::string>{model::kAutoTargets}) return spec;
  std::string model_type;
  try {
    model_type = model::load_model_config(resolve_model_dir(spec.model.path)).model_type;
  } catch (const InputError&) {
    return spec;  // no model to read: its load says so, where one is needed
  }
  t = model::resolved_targets(t, model_type, spec.model.peft.kind);
  return spec;
}

torch::Dtype dtype_named(const std::string& name, const std::string& what) {
  if (name == "float32") return torch::kFloat32;
  if (name == "bfloat16") return torch::kBFloat16;
  if (name == "float16") return torch::kFloat16;
  throw ConfigError(fmt::format("{}: '{}': use float32, bfloat16 or float16", what, name));
}

torch::Dtype torch_dtype(FloatType t) {
  switch (t) {
    case FloatType::kFloat32:
      return torch::kFloat32;
    case FloatType::kBFloat16:
      return torch::kBFloat16;
    case FloatType::kFloat16:
      return torch::kFloat16;
  }
  throw std::logic_error("torch_dtype: a float type without a case");
}

torch::Dtype model_dtype(const Spec& spec) {
  return torch_dtype(spec.model.dtype);
}

torch::Device run_device(const Spec& spec) {
  if (spec.device == "cpu") return torch::Device(torch::kCPU);
  torch::Device d(spec.device);  // the spec parser allows cpu, cuda and cuda:N only
  if (d.has_index()) return d;
  // `device: cuda` with several ranks on a machine: rank r uses its local GPU r (modulo the
  // GPUs it sees, e.g. one each under CUDA_VISIBLE_DEVICES).
  const int n = std::max(1, static_cast<int>(torch::cuda::device_count()));
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(dist::options().local_rank % n));
}

// The head data.task trains must be the model's (an encoder's head is its config.json
// architecture); ConfigError naming the fix.
void check_task_fits(const Spec& spec, const model::ModelConfig& mc, const fs::path& dir) {
  const bool classify = spec.data.task == Task::kClassification, mlm = spec.data.task == Task::kMlm;
  DPFT_CHECK_AS(ConfigError, (spec.data.task == Task::kSeq2seq) == mc.is_seq2seq(),
                "data.task: {} with model.path {}, a {} model: an encoder-decoder (bart) trains "
                "with data.task: seq2seq, and only it does",
                name_of(spec.data.task), dir.string(), mc.model_type);
  const model::EncoderHead need = classify ? model::EncoderHead::kSequenceClassification
                                  : mlm    ? model::EncoderHead::kMaskedLM
                                           : model::EncoderHead::kCausalLM;
  const char* arch = classify ? "BertForSequenceClassification or RobertaForSequenceClassification"
                     : mlm    ? "BertForMaskedLM or RobertaForMaskedLM"
                              : "BertLMHeadModel or RobertaForCausalLM, is_decoder true";
  const char* head = classify ? "--head classification" : mlm ? "--head mlm" : "--head causal";
  DPFT_CHECK_AS(
      ConfigError, (mc.is_encoder() && mc.head == need) || (!mc.is_encoder() && !classify && !mlm),
      "data.task: {} needs {} (config.json architectures {}); model.path {} is a {}{}",
      name_of(spec.data.task),
      classify ? "an encoder with a sequence-classification head"
      : mlm    ? "an encoder with a masked-LM head"
               : "a decoder, or an encoder with a causal-LM head",
      arch, dir.string(), mc.model_type,
      mc.is_encoder() ? fmt::format(" encoder with another head; give a pretrained encoder the "
                                    "head it needs, keeping its body: dpft model rehead --from {} "
                                    "{}{} --out DIR, then set model.path to DIR",
                                    dir.string(), head, classify ? " --labels a,b" : "")
                      : " decoder");
  if (spec.data.max_length > mc.usable_positions()) {
    DPFT_CHECK_AS(ConfigError, !mc.learned_positions(),
                  "data.max_length = {} exceeds the {} positions the model has (config.json of "
                  "{}); set data.max_length <= {}",
                  spec.data.max_length, mc.usable_positions(), dir.string(), mc.usable_positions());
    spdlog::warn("data.max_length = {} exceeds the model's max_position_embeddings {}: rotary "
                 "positions beyond it were never trained",
                 spec.data.max_length, mc.max_position);
  }
}

// The tokenizer in `in.tokenizer_dir` (an encoder's or a decoder's) and the pad id; a missing
// or unreadable one is an InputError that says how to supply it.
void load_tokenizers(const Spec& spec, TrainInputs& in, const model::ModelConfig& mc) {
  in.tokenizer_dir = tokenizer_dir(spec, in.model_dir);
  const std::string dir = in.tokenizer_dir.string();
  try {
    if (mc.is_encoder())
      in.enc_tok = std::make_shared<tok::EncoderTokenizer>(tok::EncoderTokenizer::load(dir));
    else
      in.tok = std::make_shared<tok::Tokenizer>(tok::load_tokenizer(dir));
  } catch (const InputError& e) {
    throw InputError(fmt::format(
        "{}\n{}: copy the tokenizer files of the model's base checkpoint into {} (dpft model "
        "init --tokenizer and rehead copy them), or set model.tokenizer to a directory that "
        "holds them",
        e.what(), spec.model.tokenizer.empty() ? "model.path" : "model.tokenizer", dir));
  }
  const int64_t ids = in.enc_tok ? in.enc_tok->vocab_size() : in.tok->vocab_size();
  DPFT_CHECK_AS(InputError, ids <= mc.vocab_size,
                "tokenizer in {} has {} ids but the model only {} embeddings", dir, ids,
                mc.vocab_size);
  if (in.enc_tok) {
    in.pad_id = in.enc_tok->pad_id();
    return;
  }
  auto pad = in.tok->pad_id() ? in.tok->pad_id() : in.tok->eos_id();
  in.pad_id = pad ? *pad : 0;
}

namespace {

// peft.targets against the checkpoint's weight names (HF names: a module path + ".weight"):
// LoRA wraps linears (2-D weights), full trains the parameters of the modules it names.
void check_targets(const model::PeftOptions& o, const model::TensorStore& w,
                   const model::ModelConfig& mc) {
  if (o.kind != model::PeftKind::kLora && o.kind != model::PeftKind::kFull) return;
  if (o.kind == model::PeftKind::kFull && o.targets == std::vector<std::string>{"all"}) return;
  std::set<std::string> linears, last;
  std::vector<std::string> modules;
  for (const std::string& n : w.names()) {
    const size_t dot = n.rfind('.');
    if (dot == std::string::npos) continue;
    modules.push_back(n.substr(0, dot));
    if (n.compare(dot, std::string::npos, ".weight") == 0 && w.info(n).shape.size() == 2) {
      linears.insert(n.substr(0, dot));
      last.insert(n.substr(n.rfind('.', dot - 1) + 1, dot - n.rfind('.', dot - 1) - 1));
    }
  }
  const std::vector<std::string>& pool =
      o.kind == model::PeftKind::kLora ? std::vector<std::string>(linears.begin(), linears.end())
                                       : modules;
  for (const std::string& t : o.targets) {
    const bool hit = std::any_of(pool.begin(), pool.end(),
                                 [&](const std::string& m) { return model::module_matches(m, t); });
    DPFT_CHECK_AS(ConfigError, hit,
                  "model.peft.targets: '{}' matches no {} of this {} model; its linear modules "
                  "are: {}",
                  t, o.kind == model::PeftKind::kLora ? "linear module" : "module", mc.model_type,
                  join({last.begin(), last.end()}, ", "));
  }
}

}  // namespace

void load_model(const Spec& spec, TrainInputs& in) {
  in.model_dir = resolve_model_dir(spec.model.path);
  in.model = model::load_checkpoint(in.model_dir, model_dtype(spec));
  {
    torch::NoGradGuard ng;
    for (const auto& p : in.model->named_parameters())
      DPFT_CHECK_AS(InputError, torch::isfinite(p.value()).all().item<bool>(),
                    "model.path {}: weight {} has NaN or infinite values; the checkpoint is "
                    "damaged (training on it would only drop every example)",
                    in.model_dir.string(), p.key());
  }
  const model::ModelConfig& mc = in.model->config();
  in.model_labels = mc.labels;
  check_task_fits(spec, mc, in.model_dir);
  in.peft = peft_options(spec);
  in.peft.targets = model::resolved_targets(in.peft.targets, mc.model_type, in.peft.kind);
  model::apply_peft(in.model, in.peft, derive_seed(spec.seed, "peft"));
  in.model->to(run_device(spec));  // after LoRA: its factors are initialised on the CPU
  load_tokenizers(spec, in, mc);
}

void open_model_unloaded(const Spec& spec, TrainInputs& in) {
  in.model_dir = resolve_model_dir(spec.model.path);
  const model::ModelConfig mc = model::load_model_config(in.model_dir);
  in.model_labels = mc.labels;
  check_task_fits(spec, mc, in.model_dir);
  const model::TensorStore weights = model::TensorStore::open_dir(in.model_dir);
  in.peft = peft_options(spec);
  in.peft.targets = model::resolved_targets(in.peft.targets, mc.model_type, in.peft.kind);
  check_targets(in.peft, weights, mc);
  load_tokenizers(spec, in, mc);
}

std::string describe(const TrainInputs& in, bool non_private_stats) {
  model::CausalLM m = in.model;  // a handle: counting reads the parameters
  return fmt::format(
      "model {} ({} trainable of {} parameters, peft {}); train {} examples{}, eval {}",
      in.model_dir.string(), model::count_parameters(m, true), model::count_parameters(m, false),
      model::name_of(in.peft.kind), in.train.size(),
      non_private_stats ? fmt::format(" ({} tokens)", in.train.num_tokens()) : "", in.eval.size());
}

}  // namespace dpft::train
