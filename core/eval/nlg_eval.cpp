#include "core/eval/nlg_eval.hpp"

#include <fmt/format.h>

#include <chrono>

#include "core/util/error.hpp"

namespace dpft::eval {

nlohmann::json NlgEvalResult::to_json() const {
  int64_t stopped = 0;
  for (const auto& f : finish_reasons) stopped += f == "stop_id";
  return {{"bleu", scores.bleu},
          {"nist", scores.nist},
          {"meteor", scores.meteor},
          {"rouge_l", scores.rouge_l},
          {"cider", scores.cider},
          {"segments", scores.segments},
          {"references", scores.references},
          {"stopped", stopped}};
}

std::string NlgEvalResult::generations_jsonl() const {
  std::string out;
  for (size_t i = 0; i < hyps.size(); ++i) {
    nlohmann::json j = {{"source", sources[i]},
                        {"hypothesis", hyps[i]},
                        {"references", refs[i]},
                        {"finish_reason", finish_reasons[i]}};
    out += j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  }
  return out;
}

NlgEvalResult evaluate_nlg(model::CausalLMImpl& model, const tok::Tokenizer& tok,
                           const std::vector<NlgSegment>& segments, const NlgEvalOptions& o) {
  if (o.batch < 1) throw ConfigError(fmt::format("eval.nlg.batch {} must be >= 1", o.batch));
  const auto t0 = std::chrono::steady_clock::now();
  size_t n = segments.size();
  if (o.max_sources > 0) n = std::min(n, static_cast<size_t>(o.max_sources));
  if (n == 0) throw InputError("generation evaluation: the eval set has no sources");
  generate::BeamOptions beam = o.beam;
  beam.stop_ids.clear();
  if (tok.eos_id()) beam.stop_ids.push_back(*tok.eos_id());
  if (tok.pad_id()) beam.pad_id = *tok.pad_id();
  auto decode = [&tok](const std::vector<int64_t>& v) {
    return tok.decode(std::vector<tok::TokenId>(v.begin(), v.end()), /*skip_special=*/true);
  };
  NlgEvalResult r;
  for (size_t at = 0; at < n; at += static_cast<size_t>(o.batch)) {
    const size_t end = std::min(n, at + static_cast<size_t>(o.batch));
    std::vector<std::vector<int64_t>> prompts;
    for (size_t i = at; i < end; ++i) {
      std::vector<int64_t> ids;
      if (tok.add_bos() && tok.bos_id()) ids.push_back(*tok.bos_id());
      for (auto t : tok.encode(segments[i].source)) ids.push_back(t);
      prompts.push_back(std::move(ids));
    }
    auto gens = generate::beam_search(model, prompts, beam, decode);
    for (size_t i = at; i < end; ++i) {
      const auto& g = gens[i - at];
      r.sources.push_back(segments[i].source);
      r.hyps.push_back(g.text);
      r.refs.push_back(segments[i].refs);
      r.finish_reasons.push_back(g.finish_reason);
    }
    if (o.on_batch) o.on_batch(static_cast<int64_t>(end), static_cast<int64_t>(n));
  }
  r.scores = nlg::score_all(nlg::make_corpus(r.hyps, r.refs));
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace dpft::eval
