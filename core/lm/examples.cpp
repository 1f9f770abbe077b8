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

namespace {

// SplitMix64 (Steele et al. 2014): a small, platform-independent stream for the masking draws.
struct SplitMix64 {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
};

// BERT's masking of one row (MaskingOptions) in place: ids (T), labels (T).
void mask_row(const TokenizedExample& ex, const MaskingOptions& m, uint64_t draw, int64_t* ids,
              int64_t* labels) {
  SplitMix64 rng{m.seed};
  rng.s = rng.next() ^ static_cast<uint64_t>(ex.index);
  rng.s = rng.next() ^ draw;
  for (size_t t = 0; t < ex.ids.size(); ++t) {
    labels[t] = -100;
    if (!ex.scored[t]) continue;
    const double select = rng.uniform(), how = rng.uniform();
    const uint64_t random_id = rng.next();
    if (select >= m.rate) continue;
    labels[t] = ex.ids[t];
    if (how < 0.8)
      ids[t] = m.mask_id;
    else if (how < 0.9)
      ids[t] = static_cast<int64_t>(random_id % static_cast<uint64_t>(m.vocab_size));
  }
}

}  // namespace

LmBatch collate(const LmDataset& ds, const std::vector<int64_t>& rows, int64_t pad_id,
                uint64_t draw) {
  const bool masked = ds.objective == Objective::kMaskedLM;
  DPFT_CHECK(!masked || (ds.masking.mask_id >= 0 && ds.masking.vocab_size > 0 &&
                         ds.masking.rate > 0 && ds.masking.rate <= 1),
             "collate: a masked-LM set needs a mask id, a vocabulary size and a rate in (0, 1]; "
             "got mask id {}, vocabulary {}, rate {}",
             ds.masking.mask_id, ds.masking.vocab_size, ds.masking.rate);
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
  if (ds.objective == Objective::kSeq2Seq) {
    int64_t S = 1;
    for (int64_t r : rows) {
      DPFT_CHECK(!ds.items[r].src_ids.empty(), "collate: row {} of a seq2seq set has no source", r);
      S = std::max<int64_t>(S, static_cast<int64_t>(ds.items[r].src_ids.size()));
    }
    b.src_ids = torch::full({B, S}, pad_id, torch::kInt64);
    b.src_mask = torch::zeros({B, S}, torch::kInt64);
    auto si = b.src_ids.accessor<int64_t, 2>();
    auto sm = b.src_mask.accessor<int64_t, 2>();
    for (int64_t i = 0; i < B; ++i) {
      const auto& src = ds.items[static_cast<size_t>(rows[i])].src_ids;
      for (size_t t = 0; t < src.size(); ++t)
        si[i][static_cast<int64_t>(t)] = src[t], sm[i][static_cast<int64_t>(t)] = 1;
    }
  }
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
    if (masked)
      mask_row(ex, ds.masking, draw, b.input_ids.data_ptr<int64_t>() + i * T,
               b.labels.data_ptr<int64_t>() + i * T);
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
