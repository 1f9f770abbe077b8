// Generation evaluation of a data-to-text model (paper 003, Tables 4-5): every source is
// decoded by beam search (core/generate) from the ids training saw before its response
// ([bos where the tokenizer adds one] + encode(prompt), as data/lm_dataset.hpp encodes a pair
// without a chat format), the new tokens up to the stop token are decoded to text, and the
// outputs are scored against each source's references (core/eval/nlg_metrics.hpp).
#pragma once
#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

#include "core/eval/nlg_metrics.hpp"
#include "core/generate/generate.hpp"
#include "core/model/transformer.hpp"
#include "core/tokenizer/tokenizer.hpp"

namespace dpft::eval {

// One multi-reference segment: a prompt (the linearised source) with every reference it has.
struct NlgSegment {
  std::string source;
  std::vector<std::string> refs;
};

struct NlgEvalOptions {
  generate::BeamOptions beam;  // stop_ids and pad_id are the tokenizer's
  int64_t batch = 8;           // sources per beam_search call
  int64_t max_sources = 0;     // the first N segments only (0 = all)
  // Called after each batch with (sources done, total).
  std::function<void(int64_t, int64_t)> on_batch;
};

struct NlgEvalResult {
  nlg::Scores scores;
  std::vector<std::string> sources, hyps;
  std::vector<std::vector<std::string>> refs;
  std::vector<std::string> finish_reasons;
  double seconds = 0;
  // {"bleu", "nist", "meteor", "rouge_l", "cider", "segments", "references", "stopped"}
  nlohmann::json to_json() const;
  // One JSON line per segment: {"source", "hypothesis", "references", "finish_reason"}.
  std::string generations_jsonl() const;
};

NlgEvalResult evaluate_nlg(model::CausalLMImpl& model, const tok::Tokenizer& tok,
                           const std::vector<NlgSegment>& segments, const NlgEvalOptions& o);

}  // namespace dpft::eval
