#include "data/encoder_lm.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/util/error.hpp"

namespace dpft::data {

lm::LmDataset build_encoder_lm_dataset(const std::vector<lm::Example>& examples,
                                       const tok::EncoderTokenizer& tok, size_t max_length,
                                       bool packing, lm::Objective objective,
                                       bool within_documents) {
  DPFT_CHECK_AS(ConfigError,
                objective == lm::Objective::kMaskedLM || objective == lm::Objective::kNextToken,
                "an encoder's token-level data set is for masked-LM or next-token training");
  DPFT_CHECK_AS(ConfigError, max_length >= 3,
                "data.max_length = {} leaves no room for text between the special tokens; use "
                "at least 3",
                max_length);
  const bool mlm = objective == lm::Objective::kMaskedLM;
  lm::LmDataset ds;
  ds.objective = objective;
  const tok::PairEncoding empty = tok.encode("");  // [CLS] [SEP] / <s> </s>
  DPFT_CHECK(empty.ids.size() == 2, "the encoder tokenizer wraps an empty text in {} ids, not 2",
             empty.ids.size());
  const int32_t cls = static_cast<int32_t>(empty.ids[0]), sep = static_cast<int32_t>(empty.ids[1]);
  // The ids of a block [CLS] body [SEP]: masked LM scores the body only, next-token every id
  // after the first.
  auto add = [&](int64_t index, const int32_t* body, size_t n) {
    lm::TokenizedExample t;
    t.index = index;
    t.ids.reserve(n + 2);
    t.ids.push_back(cls);
    t.ids.insert(t.ids.end(), body, body + n);
    t.ids.push_back(sep);
    t.scored.assign(t.ids.size(), 1);
    t.scored.front() = 0;
    if (mlm) t.scored.back() = 0;
    ds.items.push_back(std::move(t));
  };
  std::vector<int32_t> stream;
  for (const lm::Example& e : examples) {
    tok::PairEncoding p = tok.encode(e.text, std::nullopt, packing ? 0 : max_length);
    if (p.ids.size() <= 2) {
      ++ds.dropped;
      continue;
    }
    std::vector<int32_t> body(p.ids.begin() + 1, p.ids.end() - 1);
    if (!packing) {
      add(e.index, body.data(), body.size());
      continue;
    }
    if (within_documents) {  // the document's own blocks, indexed by the document
      const size_t block = max_length - 2;
      for (size_t at = 0; at < body.size(); at += block)
        add(e.index, body.data() + at, std::min(block, body.size() - at));
      continue;
    }
    stream.insert(stream.end(), body.begin(), body.end());
    stream.push_back(sep);  // the document boundary
  }
  if (packing) {
    const size_t block = max_length - 2;
    for (size_t k = 0; (k + 1) * block <= stream.size(); ++k)
      add(static_cast<int64_t>(k), stream.data() + k * block, block);
  }
  if (ds.dropped > 0)
    spdlog::warn("{} of {} examples have no text and were dropped", ds.dropped, examples.size());
  return ds;
}

}  // namespace dpft::data
