// What a training method needs, built from the spec: the model (a HF-format checkpoint, or the
// embedded default tiny GPT-2 shipped in models/tiny-gpt2) wrapped per model.peft, its
// tokenizer, and the tokenized private training and evaluation sets.
#pragma once
#include <filesystem>
#include <memory>
#include <string>

#include "core/config/spec.hpp"
#include "core/model/peft.hpp"
#include "core/tokenizer/tokenizer.hpp"
#include "data/lm_dataset.hpp"

namespace dpft::train {

// "" -> the embedded default: $DPFT_DEFAULT_MODEL, else models/tiny-gpt2 next to the
// executable's directory (build/../models) or in the source tree. InputError if none exists.
std::filesystem::path resolve_model_dir(const std::string& path);

struct TrainInputs {
  std::filesystem::path model_dir;
  model::CausalLM model;
  std::shared_ptr<tok::Tokenizer> tok;
  data::LmDataset train, eval;  // eval empty when data.eval.path is ""
  // With data.eval.label_column: the labelled eval examples (same subsample as `eval`) and the
  // candidate labels, for classification accuracy by label likelihood (core/eval/lm_eval.hpp).
  std::vector<data::Example> eval_examples;
  std::vector<std::string> labels;
  int64_t pad_id = 0;
  model::PeftOptions peft;
};

model::PeftOptions peft_options(const Spec& spec);
// Loads everything (LoRA initialised from derive_seed(seed, "peft"); subsamples from
// derive_seed(seed, "data")). Logs sizes.
TrainInputs load_train_inputs(const Spec& spec);
// Rows of the training set without loading the model (planning, `dpft account --spec`):
// num_samples when set and smaller, else the number of examples the file holds.
int64_t count_train_examples(const Spec& spec);

}  // namespace dpft::train
