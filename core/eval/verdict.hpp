// A run's closing evaluation line and the warnings that flag a trivial result, from the base
// and final eval blocks of metrics.json (LmEvalResult::to_json: loss, accuracy and, for a
// classifier's set, `classification` with macro_f1, mcc and the confusion matrix).
//   classification (a classifier, or a language model scored by label likelihood): the line
//     shows accuracy, macro-F1 and MCC; warnings when the final model
//     predicts one class for every eval row, or when |MCC| < 2 / sqrt(n) for n eval rows (MCC's
//     standard error under no association is about 1 / sqrt(n), so this is a ~95 % band
//     around chance);
//   language model: the line shows loss and next-token accuracy; also a warning when the final
//     eval loss is above the base model's (fine-tuning made it worse).
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace dpft::eval {

struct EvalVerdict {
  std::string line;                   // "eval loss a -> b, accuracy c -> d[, macro-F1 ..]"
  std::vector<std::string> warnings;  // empty: nothing looks trivial
};

// base / final: eval blocks (null when absent: then an empty verdict). classifier: the sets
// are a classifier's (data.task classification), whose loss is the class cross-entropy; a
// language model's blocks may hold a label-likelihood `classification` too, which adds its
// line and warnings to the loss check.
EvalVerdict eval_verdict(const nlohmann::json& base, const nlohmann::json& final_eval,
                         bool classifier);

// |MCC| below which a classifier over n rows is within noise of chance: 2 / sqrt(n).
double mcc_noise_band(int64_t n);

}  // namespace dpft::eval
