// Language-model evaluation with the PE-SGD paper's definitions:
//   eval loss   = mean over samples of each sample's mean token cross-entropy
//                 (model::per_sample_loss over the sample's scored tokens);
//   accuracy    = next-token argmax accuracy, micro-averaged over all scored tokens;
//   perplexity  = exp(total token NLL / total scored tokens) (token-weighted, as wikitext
//                 perplexity is reported).
// Samples with no scored token (none in an LmDataset built by data/lm_dataset) count in
// `samples` but not in the loss mean.
// A masked-LM set (lm::Objective::kMaskedLM) is scored the same way at its masked positions
// (lm::masked_token_loss; the fixed draw-0 masks of lm::collate, so evaluations compare):
// accuracy = share of masked ids predicted, perplexity = exp(mean masked-token NLL).
// Classification accuracy for labelled text: each candidate label is scored as a continuation
// of the text (text + "\n" + label) and the label with the lowest summed NLL is predicted.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/lm/examples.hpp"
#include "core/model/transformer.hpp"
#include "core/tokenizer/tokenizer.hpp"

namespace dpft::eval {

struct SampleScore {
  int64_t index;    // TokenizedExample::index
  double loss;      // mean token NLL over the sample's scored tokens (0 if none)
  int64_t tokens;   // scored tokens (classification: 1)
  int64_t correct;  // scored tokens whose argmax prediction is right
  int64_t truth = -1, predicted = -1;  // classification: the class ids
};

struct ClassificationMetrics;

struct LmEvalResult {
  double loss = 0, accuracy = 0, perplexity = 0;
  int64_t samples = 0, tokens = 0;
  double seconds = 0;
  std::vector<SampleScore> per_sample;  // in data set order
  nlohmann::json classification;        // classification sets: ClassificationMetrics::to_json
  nlohmann::json to_json() const;       // without per_sample
};

// A classification set (lm::Objective::kClassification, an encoder with a classifier): loss =
// mean over samples of the cross-entropy at the true class, accuracy = argmax accuracy,
// perplexity = exp(loss), tokens = samples, and `classification` holds accuracy, macro-F1,
// positive-class F1, MCC and the confusion matrix over the model's labels.
// Evaluates under NoGradGuard and model->eval(), restoring the previous train/eval mode;
// batches of micro_batch rows (on the model's device); max_samples > 0: the first max_samples
// items only. pad_id: lm::pad_id_for(tokenizer). ConfigError for micro_batch < 1.
LmEvalResult evaluate_lm(model::CausalLM& model, const lm::LmDataset& ds, int64_t micro_batch,
                         int64_t max_samples, int64_t pad_id);

// Writes one JSON line per sample: {"model": tag, "index", "loss", "tokens", "accuracy"}
// (accuracy = correct / tokens, 0 for a sample without tokens; classification adds "label" and
// "predicted", the class ids), after the lines of other tags;
// earlier lines of the same tag are replaced. The file is rewritten atomically.
void append_per_sample(const std::filesystem::path& file, const std::string& tag,
                       const LmEvalResult& r);

// Classification metrics from true and predicted class indices in [0, K):
//   accuracy;
//   macro-F1 = mean over classes of F1_c = 2 TP_c / (2 TP_c + FP_c + FN_c) (0 for a class that
//     is neither true nor predicted anywhere, as scikit-learn's zero_division=0 does);
//   F1 of class `positive` (binary tasks: GLUE's F1 for QQP/MRPC);
//   Matthews correlation (Gorodkin's R_K, which is the usual MCC for K = 2):
//     (c s - sum_k p_k t_k) / sqrt((s^2 - sum_k p_k^2)(s^2 - sum_k t_k^2)),
//     c correct, s samples, t_k true and p_k predicted counts of class k; 0 when undefined;
//   confusion[t][p] counts.
struct ClassificationMetrics {
  int64_t samples = 0, correct = 0;
  double accuracy = 0, macro_f1 = 0, positive_f1 = 0, mcc = 0;
  std::vector<std::vector<int64_t>> confusion;  // (K, K): [true][predicted]
  nlohmann::json to_json() const;
};
// InputError when the lengths differ or an index is outside [0, K).
ClassificationMetrics classification_metrics(const std::vector<int64_t>& truth,
                                             const std::vector<int64_t>& predicted, int64_t K,
                                             int64_t positive = 1);

struct ClassEvalResult {
  double accuracy = 0;
  int64_t samples = 0, correct = 0;
  double seconds = 0;
  std::vector<int64_t> predicted;  // per sample: index into the label set
  std::vector<int64_t> truth;      // per sample: the true label's index
  ClassificationMetrics metrics;   // of truth and predicted over the label set
  // Per sample, per label: summed NLL of the label's tokens.
  std::vector<std::vector<double>> scores;
  nlohmann::json to_json() const;  // accuracy, samples, correct, seconds, metrics
};

// The distinct non-empty labels of `examples`, sorted: the candidate set for classification.
std::vector<std::string> label_set(const std::vector<lm::Example>& examples);

// The ids of one candidate: [bos] + encode(text) cut so that everything fits max_length,
// + encode("\n") + encode(label); `first_label` is the position of the label's first id.
// InputError when the label alone (with "\n" and bos) does not fit max_length.
std::vector<int32_t> candidate_ids(const tok::Tokenizer& tok, const std::string& text,
                                   const std::string& label, int64_t max_length,
                                   size_t& first_label);

// For each example (max_samples > 0: the first max_samples), scores every label of `labels`
// as a continuation of its text and predicts the one with the lowest summed NLL (ties: the
// first). Each example's label must be in `labels` (InputError otherwise). Same mode handling
// as evaluate_lm; micro_batch rows per forward pass.
ClassEvalResult evaluate_classification(model::CausalLM& model,
                                        const std::vector<lm::Example>& examples,
                                        const tok::Tokenizer& tok,
                                        const std::vector<std::string>& labels, int64_t micro_batch,
                                        int64_t max_length, int64_t max_samples, int64_t pad_id);

}  // namespace dpft::eval
