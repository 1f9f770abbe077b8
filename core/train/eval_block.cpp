#include "core/train/eval_block.hpp"

#include <spdlog/spdlog.h>

namespace dpft::train {

EvalBlock eval_block(const TrainInputs& in, int64_t batch, int64_t max_samples,
                     int64_t max_length, bool label_likelihood) {
  model::CausalLM m = in.model;  // a handle
  EvalBlock b;
  b.result = eval::evaluate_lm(m, in.eval, batch, max_samples, in.pad_id);
  b.block = b.result.to_json();
  b.block.erase("seconds");  // timing lives in the timing block
  if (label_likelihood && !in.eval_examples.empty() && in.tok) {
    eval::ClassEvalResult c = eval::evaluate_classification(
        m, in.eval_examples, *in.tok, in.labels, batch, max_length, max_samples, in.pad_id);
    b.block["classification"] = c.to_json();
    b.block["classification"].erase("seconds");
    spdlog::info("eval: classification accuracy {:.4f} over {} labels (label likelihood)",
                 c.accuracy, in.labels.size());
  }
  return b;
}

}  // namespace dpft::train
