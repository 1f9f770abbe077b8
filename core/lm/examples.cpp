// Collation of tokenised examples into batches (core/lm/examples.hpp).
#include "core/lm/examples.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

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

// Poisson(lambda) by inversion of products of uniforms (Knuth); lambda is small here.
int64_t poisson_draw(SplitMix64& rng, double lambda) {
  const double limit = std::exp(-lambda);
  int64_t k = 0;
  for (double p = rng.uniform(); p > limit; p *= rng.uniform()) ++k;
  return k;
}

}  // namespace

std::vector<int32_t> text_infilling(const std::vector<int32_t>& body, const InfillingOptions& o,
                                    int64_t index, uint64_t draw, int64_t* hidden) {
  DPFT_CHECK(o.mask_id >= 0 && o.ratio > 0 && o.ratio < 1 && o.lambda > 0,
             "text_infilling: mask id {}, ratio {}, lambda {}", o.mask_id, o.ratio, o.lambda);
  SplitMix64 rng{o.seed};
  rng.s = rng.next() ^ static_cast<uint64_t>(index);
  rng.s = rng.next() ^ draw;
  const int64_t n = static_cast<int64_t>(body.size());
  const int64_t target = std::llround(o.ratio * static_cast<double>(n));
  std::vector<uint8_t> covered(static_cast<size_t>(n), 0);
  std::vector<uint8_t> insert(static_cast<size_t>(n) + 1, 0);  // a mask before position i
  int64_t masked = 0;
  for (int64_t tries = 0; masked < target && tries < 4 * n + 16; ++tries) {
    const int64_t len = std::min(poisson_draw(rng, o.lambda), target - masked);
    const uint64_t u = rng.next();
    if (len == 0) {
      insert[u % static_cast<uint64_t>(n + 1)] = 1;
      continue;
    }
    const int64_t start = static_cast<int64_t>(u % static_cast<uint64_t>(n - len + 1));
    bool free = true;  // the span and its two neighbours are kept ids
    for (int64_t i = std::max<int64_t>(0, start - 1); i < std::min(n, start + len + 1); ++i)
      free = free && !covered[static_cast<size_t>(i)];
    if (!free) continue;
    for (int64_t i = start; i < start + len; ++i) covered[static_cast<size_t>(i)] = 1;
    masked += len;
  }
  std::vector<int32_t> out;
  out.reserve(body.size());
  const auto mask = static_cast<int32_t>(o.mask_id);
  for (int64_t i = 0; i <= n; ++i) {
    if (insert[static_cast<size_t>(i)]) out.push_back(mask);
    if (i == n) break;
    if (!covered[static_cast<size_t>(i)])
      out.push_back(body[static_cast<size_t>(i)]);
    else if (i == 0 || !covered[static_cast<size_t>(i - 1)])
      out.push_back(mask);  // one mask per span
  }
  if (hidden) *hidden = masked;
  return out;
}

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
    // The sources: stored, or infilled from the targets (<s> body </s> -> <s> infill </s>).
    const bool infill = ds.infilling.mask_id >= 0;
    std::vector<std::vector<int32_t>> made(infill ? rows.size() : 0);
    auto source = [&](size_t i) -> const std::vector<int32_t>& {
      return infill ? made[i] : ds.items[static_cast<size_t>(rows[i])].src_ids;
    };
    int64_t S = 1;
    for (size_t i = 0; i < rows.size(); ++i) {
      const TokenizedExample& ex = ds.items[static_cast<size_t>(rows[i])];
      if (infill) {
        DPFT_CHECK(ex.ids.size() >= 2, "collate: row {} of a seq2seq set has no target body",
                   rows[i]);
        std::vector<int32_t> body(ex.ids.begin() + 1, ex.ids.end() - 1);
        made[i].push_back(ex.ids.front());
        if (!body.empty())
          for (int32_t id : text_infilling(body, ds.infilling, ex.index, draw))
            made[i].push_back(id);
        made[i].push_back(ex.ids.back());
      }
      DPFT_CHECK(!source(i).empty(), "collate: row {} of a seq2seq set has no source", rows[i]);
      S = std::max<int64_t>(S, static_cast<int64_t>(source(i).size()));
    }
    b.src_ids = torch::full({B, S}, pad_id, torch::kInt64);
    b.src_mask = torch::zeros({B, S}, torch::kInt64);
    auto si = b.src_ids.accessor<int64_t, 2>();
    auto sm = b.src_mask.accessor<int64_t, 2>();
    for (int64_t i = 0; i < B; ++i) {
      const auto& src = source(static_cast<size_t>(i));
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
