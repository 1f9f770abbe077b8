// Collation of tokenised examples into batches (core/lm/examples.hpp).
#include "core/lm/examples.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/util/error.hpp"

namespace dpft::lm {

int64_t LmDataset::num_tokens() const {
  int64_t n = 0;
  for (const auto& it : items) n += static_cast<int64_t>(it.ids.size());
  return n;
}

LmBatch collate(const LmDataset& ds, const std::vector<int64_t>& rows, int64_t pad_id) {
  const int64_t B = static_cast<int64_t>(rows.size());
  int64_t T = 1;
  for (int64_t r : rows) {
    DPFT_CHECK(r >= 0 && r < ds.size(), "collate: row {} is outside the data set (size {})", r,
               ds.size());
    DPFT_CHECK(ds.items[r].scored.size() == ds.items[r].ids.size(),
               "collate: row {} has {} ids but {} scored flags", r, ds.items[r].ids.size(),
               ds.items[r].scored.size());
    T = std::max<int64_t>(T, static_cast<int64_t>(ds.items[r].ids.size()));
  }
  LmBatch b;
  b.objective = ds.objective;
  bool types = false;
  for (int64_t r : rows) {
    const TokenizedExample& ex = ds.items[static_cast<size_t>(r)];
    DPFT_CHECK(ex.type_ids.empty() || ex.type_ids.size() == ex.ids.size(),
               "collate: row {} has {} ids but {} token types", r, ex.ids.size(),
               ex.type_ids.size());
    DPFT_CHECK(ds.objective != Objective::kClassification || ex.class_id >= 0,
               "collate: row {} of a classification set has no class", r);
    types = types || !ex.type_ids.empty();
  }
  if (types) b.token_type_ids = torch::zeros({B, T}, torch::kInt64);
  if (ds.objective == Objective::kClassification) b.class_labels = torch::empty({B}, torch::kInt64);
  b.input_ids = torch::full({B, T}, pad_id, torch::kInt64);
  b.attention_mask = torch::zeros({B, T}, torch::kInt64);
  b.labels = torch::full({B, T}, -100, torch::kInt64);
  auto ids = b.input_ids.accessor<int64_t, 2>();
  auto mask = b.attention_mask.accessor<int64_t, 2>();
  auto labels = b.labels.accessor<int64_t, 2>();
  torch::Tensor tt = types ? b.token_type_ids : torch::zeros({1, 1}, torch::kInt64);
  torch::Tensor cl = b.class_labels.defined() ? b.class_labels : torch::zeros({1}, torch::kInt64);
  auto tta = tt.accessor<int64_t, 2>();
  auto cla = cl.accessor<int64_t, 1>();
  for (int64_t i = 0; i < B; ++i) {
    const TokenizedExample& ex = ds.items[rows[i]];
    for (size_t t = 0; t < ex.ids.size(); ++t) {
      ids[i][t] = ex.ids[t];
      mask[i][t] = 1;
      if (ex.scored[t]) labels[i][t] = ex.ids[t];
      if (!ex.type_ids.empty()) tta[i][static_cast<int64_t>(t)] = ex.type_ids[t];
    }
    if (b.class_labels.defined()) cla[i] = ex.class_id;
    b.index.push_back(ex.index);
  }
  return b;
}

int64_t pad_id_for(const tok::Tokenizer& tok) {
  if (tok.pad_id()) return *tok.pad_id();
  if (tok.eos_id()) return *tok.eos_id();
  throw InputError(fmt::format(
      "{}: the tokenizer has neither a pad nor an eos token to pad batches with", tok.source()));
}

}  // namespace dpft::lm
