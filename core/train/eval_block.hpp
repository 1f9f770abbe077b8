// The evaluation block a run writes for one model on its eval set (metrics.json's eval.base,
// eval.final and eval.history entries), shared by the trainer and `dpft eval`:
// eval::LmEvalResult::to_json without its timing (so blocks are reproducible), and for a
// decoder with labelled eval examples (in.eval_examples) the label-likelihood
// `classification` (core/eval/lm_eval.hpp).
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>

#include "core/eval/lm_eval.hpp"
#include "core/train/setup.hpp"

namespace dpft::train {

struct EvalBlock {
  nlohmann::json block;        // as metrics.json holds it (without "step")
  eval::LmEvalResult result;   // with per_sample, for per_sample.jsonl
};

// batch: examples per forward; max_samples > 0: the first that many only; max_length: the
// label-likelihood scoring's (data.max_length). label_likelihood: also classify labelled eval
// examples by label likelihood (a run does so for its base and final models).
EvalBlock eval_block(const TrainInputs& in, int64_t batch, int64_t max_samples,
                     int64_t max_length, bool label_likelihood);

}  // namespace dpft::train
