// `dpft eval`: a trained model (a checkpoint, a run's saved model, or an adapter on its base:
// model::resolve_model_source) evaluated on one data file, without training: the data read and
// tokenised as a run reads data.eval, and the block a run writes under eval.final
// (train::eval_block: loss, next-token or class accuracy, perplexity, samples, tokens; a
// classifier's macro-F1, MCC and confusion; a language model's label-likelihood classification
// when the file has labels).
#pragma once
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "core/config/spec.hpp"

namespace dpft {

struct EvalRequest {
  std::string model, adapter;  // as `dpft generate` takes them
  DatasetSpec data;            // the file and its columns
  std::optional<Task> task;    // unset: classification for a classifier, seq2seq for bart, else lm
  std::vector<std::string> labels;  // classification: class names (default: the model's)
  int64_t max_length = 128, max_samples = 0, batch = 32;
};

// {"model", "adapter", "data", "task", "eval": block, "note", "warnings": [...]}: non-private,
// statistics of the file as given (the note says so); ConfigError /
// InputError as a run's data.eval would raise them.
nlohmann::json evaluate_model(const EvalRequest& request);

}  // namespace dpft
