// A training run's inputs built from the spec: the model and tokenizer (core/train/setup.hpp)
// and the tokenised private training and evaluation sets, each file read once.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>

#include "core/config/spec.hpp"
#include "core/train/setup.hpp"

namespace dpft::data {

// Loads everything (LoRA initialised from derive_seed(seed, "peft"); subsamples from
// derive_seed(seed, "data") and "eval-data"). ConfigError without data.train.path.
train::TrainInputs load_train_inputs(const Spec& spec);
// The same without the model's weights (the pre-flight, methods/preflight.hpp): the model
// directory checked (train::open_model_unloaded; in.model null) and every data set built as
// load_train_inputs builds it, with its errors and warnings.
train::TrainInputs check_train_inputs(const Spec& spec);
// data.eval alone into `in` (model and tokenizer loaded: `dpft eval`), read and tokenised as
// load_train_inputs reads it, without a training set (classification: labels from data.labels
// or the model's).
void build_eval_inputs(const Spec& spec, train::TrainInputs& in);

// N, the number of privacy units of the tokenised private set a run of this spec trains on (its
// examples; its users at privacy.unit user) for `dpft account --spec`, computed as
// load_train_inputs does but with only the model's tokenizer loaded. InputError when the data or
// the tokenizer cannot be read.
int64_t count_train_examples(const Spec& spec);

// The private training files' identity for the run's privacy lock: [{path, bytes, sha256}] for
// data.train and each data.train_extra file, in order.
nlohmann::json train_file_identity(const Spec& spec);

}  // namespace dpft::data
