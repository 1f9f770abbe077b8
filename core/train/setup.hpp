// What a training method needs, built from the spec: the model (a HF-format checkpoint, or the
// embedded default tiny GPT-2 shipped in models/tiny-gpt2) wrapped per model.peft, its
// tokenizer, and the tokenized private training and evaluation sets.
#pragma once
#include <filesystem>
#include <memory>
#include <string>

#include "core/config/spec.hpp"
#include "core/eval/nlg_eval.hpp"
#include "core/lm/examples.hpp"
#include "core/model/config.hpp"
#include "core/model/peft.hpp"
#include "core/privacy/units.hpp"
#include "core/tokenizer/encoder_tokenizer.hpp"
#include "core/tokenizer/tokenizer.hpp"

namespace dpft::train {

// "" -> the embedded default: $DPFT_DEFAULT_MODEL, else models/tiny-gpt2 next to the
// executable's directory (build/../models) or in the source tree. InputError if none exists.
std::filesystem::path resolve_model_dir(const std::string& path);

// model.tokenizer, or the model directory `model_dir` when it is "".
std::filesystem::path tokenizer_dir(const Spec& spec, const std::filesystem::path& model_dir);

struct TrainInputs {
  std::filesystem::path model_dir;
  std::filesystem::path tokenizer_dir;  // model.tokenizer, or model_dir
  model::CausalLM model;
  std::shared_ptr<tok::Tokenizer> tok;             // decoders (data.task lm); null for encoders
  std::shared_ptr<tok::EncoderTokenizer> enc_tok;  // encoders (then tok is null)
  lm::LmDataset train, eval;  // eval empty when data.eval.path is ""
  privacy::Units units;       // train's privacy units (privacy.unit): N counts them
  // data.public, prepared as train is (empty without it), and how many of its examples are
  // also private training examples (a "public" set that holds private rows is not public).
  lm::LmDataset public_train;
  int64_t public_overlap = 0;
  std::vector<std::pair<std::string, lm::LmDataset>> eval_sets;  // data.eval_sets, by name
  // With data.eval.label_column: the labelled eval examples (same subsample as `eval`) and the
  // candidate labels, for classification accuracy by label likelihood (core/eval/lm_eval.hpp).
  std::vector<lm::Example> eval_examples;
  std::vector<std::string> labels;  // data.task classification: the class names in id order
  std::vector<std::string> model_labels;  // the model's config.json id2label (may be empty)
  int64_t pad_id = 0;
  model::PeftOptions peft;
  // Eval examples whose text is also a training example's (data.eval.exclude_train false):
  // when > 0, eval results are statistics of the private data, reported as non-private.
  int64_t eval_overlap = 0;
  // eval.nlg: data.eval's rows grouped by prompt (the sources to decode, with their references).
  std::vector<eval::NlgSegment> nlg_segments;
};

model::PeftOptions peft_options(const Spec& spec);

// The spec with model.peft.targets: auto replaced by the model family's targets
// (model::resolved_targets, from model.path's config.json model_type), so that the resolved
// spec shows them. Left as auto when the model directory cannot be found (the run's own load
// reports that); ConfigError when auto has no default for the model's type.
Spec with_model_defaults(const Spec& spec);
// model.dtype as a torch dtype: the dtype of the weights and activations. Trainable parameters'
// float32 master copies, optimizer state, per-sample norms, clipped sums and noise stay float32
// (core/train/optimizer.hpp, core/train/privatize.hpp).
torch::Dtype model_dtype(const Spec& spec);
// float32 | bfloat16 | float16 as a torch dtype; ConfigError naming `what` otherwise.
torch::Dtype dtype_named(const std::string& name, const std::string& what);
// The LibTorch type of a spec's float type (model.dtype, output.save_dtype).
torch::Dtype torch_dtype(FloatType t);
// `device` as a torch device: cpu, or cuda:N ("cuda" is cuda:0; with several data-parallel
// ranks on a machine, cuda:<local rank> modulo the GPUs visible). Everything of a step lives
// there: the model, batches, per-sample factors, clipped sums, noise once added, optimizer
// state, projections, evaluation and generation.
torch::Device run_device(const Spec& spec);
// The model in model.dtype (wrapped per model.peft, LoRA initialised from
// derive_seed(seed, "peft") in float32 and then rounded to model.dtype), its
// tokenizer and pad id into `in`; the data sets are the data layer's (data/train_inputs.hpp).
void load_model(const Spec& spec, TrainInputs& in);
// The pre-flight's model (methods/preflight.hpp): what load_model checks and loads but the
// weights' values: the directory, config.json, the head the task needs, the weights' names
// (model.safetensors or its index) against peft.targets, and the tokenizer; in.model stays
// null. The errors are load_model's.
void open_model_unloaded(const Spec& spec, TrainInputs& in);
// ConfigError unless data.task fits the model (config `mc` of directory `dir`): the head it
// trains (an encoder's config.json architecture; the error names `dpft model rehead`),
// seq2seq for an encoder-decoder only, and data.max_length within learned positions.
void check_task_fits(const Spec& spec, const model::ModelConfig& mc,
                     const std::filesystem::path& dir);
// The tokenizer of tokenizer_dir(spec, in.model_dir) (an encoder's or a decoder's, per `mc`)
// and the pad id into `in`; InputError saying how to supply a missing one.
void load_tokenizers(const Spec& spec, TrainInputs& in, const model::ModelConfig& mc);

// One line for the log: model, trainable / total parameters, peft, data set sizes (N is the
// accountant's input, treated as public) and, with non_private_stats, the training tokens.
std::string describe(const TrainInputs& in, bool non_private_stats);

}  // namespace dpft::train
