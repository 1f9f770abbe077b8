#include "core/train/setup.hpp"

#include "core/model/encoder.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdlib>

#include "core/dist/world.hpp"
#include "core/model/checkpoint.hpp"
#include "core/tokenizer/load.hpp"
#include "core/util/error.hpp"
#include "core/util/seed.hpp"
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
  const bool classify = spec.data.task == Task::kClassification, mlm = spec.data.task == Task::kMlm;
  DPFT_CHECK_AS(ConfigError, (spec.data.task == Task::kSeq2seq) == mc.is_seq2seq(),
                "data.task: {} with model.path {}, a {} model: an encoder-decoder (bart) trains "
                "with data.task: seq2seq, and only it does",
                name_of(spec.data.task), in.model_dir.string(), mc.model_type);
  // Which head each task trains (an encoder's head is its config.json architecture).
  const model::EncoderHead need = classify ? model::EncoderHead::kSequenceClassification
                                  : mlm    ? model::EncoderHead::kMaskedLM
                                           : model::EncoderHead::kCausalLM;
  const char* arch = classify ? "BertForSequenceClassification or RobertaForSequenceClassification"
                     : mlm    ? "BertForMaskedLM or RobertaForMaskedLM"
                              : "BertLMHeadModel or RobertaForCausalLM, is_decoder true";
  const char* init = classify ? "--head classification" : mlm ? "--head mlm" : "--head causal";
  DPFT_CHECK_AS(ConfigError,
                (mc.is_encoder() && mc.head == need) || (!mc.is_encoder() && !classify && !mlm),
                "data.task: {} needs {} (config.json architectures {}); model.path {} is a {}{}",
                name_of(spec.data.task),
                classify ? "an encoder with a sequence-classification head"
                : mlm    ? "an encoder with a masked-LM head"
                         : "a decoder, or an encoder with a causal-LM head",
                arch, in.model_dir.string(), mc.model_type,
                mc.is_encoder() ? fmt::format(" encoder with another head (dpft model init {} "
                                              "makes one)",
                                              init)
                                : " decoder");
  if (spec.data.max_length > mc.usable_positions()) {
    DPFT_CHECK_AS(ConfigError, !mc.learned_positions(),
                  "data.max_length = {} exceeds the {} positions the model has (config.json of "
                  "{}); set data.max_length <= {}",
                  spec.data.max_length, mc.usable_positions(), in.model_dir.string(),
                  mc.usable_positions());
    spdlog::warn("data.max_length = {} exceeds the model's max_position_embeddings {}: rotary "
                 "positions beyond it were never trained",
                 spec.data.max_length, mc.max_position);
  }
  in.peft = peft_options(spec);
  model::apply_peft(in.model, in.peft, derive_seed(spec.seed, "peft"));
  in.model->to(run_device(spec));  // after LoRA: its factors are initialised on the CPU
  if (mc.is_encoder()) {
    in.enc_tok = std::make_shared<tok::EncoderTokenizer>(tok::EncoderTokenizer::load(in.model_dir));
    DPFT_CHECK_AS(InputError, in.enc_tok->vocab_size() <= in.model->config().vocab_size,
                  "tokenizer in {} has {} ids but the model only {} embeddings",
                  in.model_dir.string(), in.enc_tok->vocab_size(), in.model->config().vocab_size);
    in.pad_id = in.enc_tok->pad_id();
    return;
  }
  in.tok = std::make_shared<tok::Tokenizer>(tok::load_tokenizer(in.model_dir));
  DPFT_CHECK_AS(InputError, in.tok->vocab_size() <= in.model->config().vocab_size,
                "tokenizer in {} has {} ids but the model only {} embeddings",
                in.model_dir.string(), in.tok->vocab_size(), in.model->config().vocab_size);
  auto pad = in.tok->pad_id() ? in.tok->pad_id() : in.tok->eos_id();
  in.pad_id = pad ? *pad : 0;
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
