#include "core/generate/generate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/model/seq2seq.hpp"
#include "core/util/error.hpp"
#include "core/util/shape.hpp"
#include "core/util/system.hpp"

namespace dpft::generate {

namespace {

void validate(const GenerationOptions& o) {
  if (o.min_new_tokens < 0 || o.min_new_tokens > o.max_new_tokens)
    throw ConfigError(fmt::format("min_new_tokens {} must be in [0, max_new_tokens {}]",
                                  o.min_new_tokens, o.max_new_tokens));
  if (o.max_new_tokens < 0)
    throw ConfigError(fmt::format("max_new_tokens {} must be >= 0", o.max_new_tokens));
  if (!(o.temperature > 0))
    throw ConfigError(fmt::format("temperature {} must be > 0", o.temperature));
  if (o.top_k < 0) throw ConfigError(fmt::format("top_k {} must be >= 0", o.top_k));
  if (!(o.top_p > 0 && o.top_p <= 1))
    throw ConfigError(fmt::format("top_p {} must be in (0, 1]", o.top_p));
  if (!(o.repetition_penalty >= 1.0))
    throw ConfigError(fmt::format("repetition_penalty {} must be >= 1", o.repetition_penalty));
  if (o.no_repeat_ngram_size < 0)
    throw ConfigError(fmt::format("no_repeat_ngram_size {} must be >= 0", o.no_repeat_ngram_size));
}

// Prompts left-padded into one batch on the model's device, with the new-token limits GPT-2's
// position table allows.
struct Padded {
  torch::Tensor ids, mask;  // (B, T0) int64
  int64_t max_new = 0, min_new = 0;
};

Padded pad_prompts(model::CausalLMImpl& model, const std::vector<std::vector<int64_t>>& prompts,
                   int64_t pad_id, int64_t max_new, int64_t min_new) {
  auto B = static_cast<int64_t>(prompts.size());
  int64_t T0 = 0;
  for (const auto& p : prompts) {
    if (p.empty()) throw ConfigError("generate: every prompt needs at least one token");
    T0 = std::max<int64_t>(T0, static_cast<int64_t>(p.size()));
  }
  // GPT-2's learned positions end at max_position: a longer sequence would index past its
  // position table. Generation stops there (finish_reason "length"); rotary models go on.
  if (model.config().is_gpt2()) {
    const int64_t P = model.config().max_position;
    if (T0 >= P)
      throw InputError(
          fmt::format("generate: a prompt of {} tokens leaves no room in the model's "
                      "{} positions; shorten the prompt",
                      T0, P));
    max_new = std::min(max_new, P - T0);
    min_new = std::min(min_new, max_new);
  }
  const int64_t V = model.config().vocab_size;
  torch::Tensor ids = torch::full({B, T0}, pad_id, torch::kInt64);
  torch::Tensor mask = torch::zeros({B, T0}, torch::kInt64);
  for (int64_t b = 0; b < B; ++b) {
    const auto& p = prompts[static_cast<size_t>(b)];
    auto n = static_cast<int64_t>(p.size());
    for (int64_t i = 0; i < n; ++i) {
      int64_t t = p[static_cast<size_t>(i)];
      if (t < 0 || t >= V)
        throw InputError(
            fmt::format("prompt {} has token id {} outside the vocabulary [0, {})", b, t, V));
      ids[b][T0 - n + i] = t;
    }
    mask.slice(1, T0 - n, T0)[b].fill_(1);
  }
  auto dev = model.parameters().front().device();
  return {ids.to(dev), mask.to(dev), max_new, min_new};
}

}  // namespace

namespace {

// The floor among x[0, n) (permuted in place) when the values above all of them, already kept,
// have mass `above` (< top_p): three-way partitions on mass, expected O(n).
float floor_by_partition(float* x, size_t n, double above, double top_p) {
  // Invariant: every value outside [lo, hi) that is above the range is kept, and `above` is
  // their mass (< top_p); every value below the range is dropped.
  size_t lo = 0, hi = n;
  float floor = 0;
  while (lo < hi) {
    const size_t m = hi - lo;
    float a = x[lo], b = x[lo + m / 2], c = x[hi - 1];  // median of three
    const float v = std::max(std::min(a, b), std::min(std::max(a, b), c));
    // Three-way partition of [lo, hi): [lo, gt) > v, [gt, i) == v, [lt, hi) < v.
    size_t gt = lo, i = lo, lt = hi;
    double mass_gt = 0, mass_eq = 0;
    while (i < lt) {
      const float y = x[i];
      if (y > v) {
        mass_gt += y;
        std::swap(x[gt++], x[i++]);
      } else if (y < v) {
        std::swap(x[i], x[--lt]);
      } else {
        mass_eq += y;
        ++i;
      }
    }
    if (above + mass_gt >= top_p) {  // v (and all below it) dropped: the floor is above v
      hi = gt;
      continue;
    }
    floor = v;  // mass strictly above v < top_p: v is kept
    above += mass_gt + mass_eq;
    if (above >= top_p) break;  // everything below v is dropped
    lo = lt;                    // on to the values below v
  }
  return floor;
}

}  // namespace

float nucleus_floor(const float* p, int64_t V, double top_p, std::vector<float>& scratch) {
  DPFT_CHECK(V > 0 && top_p > 0, "nucleus_floor: needs V > 0 and top_p > 0, got {} and {}", V,
             top_p);
  // Positive floats order as their bit patterns: bucket by sign, exponent and the top 4 mantissa
  // bits (8,192 buckets, each 1/16 of an octave), sum each bucket's mass, and walk down from the
  // top. Buckets above the one where the mass reaches top_p are kept whole, those below dropped,
  // and only the boundary bucket's values are partitioned. Non-positive values share bucket 0.
  constexpr int kShift = 19;
  constexpr size_t kBuckets = size_t{1} << (32 - kShift);
  auto bucket = [](float y) -> size_t {
    if (!(y > 0)) return 0;
    uint32_t bits;
    std::memcpy(&bits, &y, sizeof bits);
    return bits >> kShift;
  };
  std::vector<double> mass(kBuckets, 0.0);
  for (int64_t i = 0; i < V; ++i) mass[bucket(p[i])] += p[i];
  double above = 0;
  size_t edge = kBuckets;
  for (size_t k = kBuckets; k-- > 0;) {
    if (above + mass[k] >= top_p) {
      edge = k;
      break;
    }
    above += mass[k];
  }
  scratch.clear();
  if (edge == kBuckets) {  // every value kept (the row's mass rounds below top_p)
    scratch.assign(p, p + V);
    return floor_by_partition(scratch.data(), scratch.size(), 0.0, top_p);
  }
  for (int64_t i = 0; i < V; ++i)
    if (bucket(p[i]) == edge) scratch.push_back(p[i]);
  return floor_by_partition(scratch.data(), scratch.size(), above, top_p);
}

torch::Tensor apply_repetition_penalty(const torch::Tensor& logits, const torch::Tensor& seen,
                                       double penalty) {
  // Only the seen tokens change: gather them, penalise, scatter back (a dense pass over the
  // B x V logits cost ~4.5 ms a step for 16 rows on the CPU).
  torch::Tensor at = seen.nonzero();  // (K, 2): row, token
  if (at.size(0) == 0) return logits;
  torch::Tensor r = at.select(1, 0), t = at.select(1, 1);
  torch::Tensor v = logits.index({r, t});  // (K)
  torch::Tensor pen = torch::where(v > 0, v / penalty, v * penalty);
  torch::Tensor out = logits.clone();  // the caller's logits stay as they were
  out.index_put_({r, t}, pen);
  return out;
}

int64_t draw_token(const float* p, int64_t V, float floor, double u) {
  DPFT_CHECK(V > 0 && u >= 0 && u < 1, "draw_token: needs V > 0 and u in [0, 1), got {} and {}", V,
             u);
  double mass = 0;
  for (int64_t i = 0; i < V; ++i)
    if (p[i] >= floor && p[i] > 0) mass += p[i];
  DPFT_CHECK(mass > 0, "draw_token: no token has positive probability (every logit -inf or NaN)");
  const double target = u * mass;
  double acc = 0;
  int64_t last = -1;
  for (int64_t i = 0; i < V; ++i) {
    if (!(p[i] >= floor && p[i] > 0)) continue;
    acc += p[i];
    last = i;
    if (acc > target) return i;
  }
  return last;  // u * mass rounded up past the last partial sum
}

torch::Tensor draw_tokens(const torch::Tensor& p, const torch::Tensor& u, double top_p) {
  DPFT_CHECK(p.dim() == 2 && u.dim() == 1 && u.size(0) == p.size(0) && p.size(1) > 0,
             "draw_tokens: p (B, V) and u (B) expected, got {} and {}", shape_str(p.sizes()),
             shape_str(u.sizes()));
  const int64_t V = p.size(1);
  const auto f64 = p.options().dtype(torch::kFloat64);
  const torch::Tensor p64 = p.to(torch::kFloat64);  // (B, V)
  torch::Tensor floor = torch::zeros({p.size(0), 1}, f64);
  if (top_p < 1.0) {
    // Sorted descending, a token's exclusive prefix mass at the first of its ties is the mass of
    // the strictly more probable tokens: keep the sorted prefix where it is < top_p (at least
    // the first) and every token as probable as its last.
    const torch::Tensor sorted = std::get<0>(p64.sort(-1, /*descending=*/true));  // (B, V)
    const torch::Tensor before = sorted.cumsum(-1) - sorted;                      // (B, V)
    const torch::Tensor n = (before < top_p).sum(-1, /*keepdim=*/true).clamp_min(1);
    floor = sorted.gather(-1, n - 1);  // (B, 1)
  }
  const torch::Tensor keep = (p64 >= floor) & (p64 > 0);  // (B, V)
  const torch::Tensor cum = torch::where(keep, p64, torch::zeros_like(p64)).cumsum(-1);
  const torch::Tensor mass = cum.select(-1, V - 1).unsqueeze(-1);  // (B, 1)
  DPFT_CHECK((mass > 0).all().item<bool>(),
             "draw_tokens: a row has no token of positive probability (every logit -inf or NaN)");
  const torch::Tensor target = u.to(f64).unsqueeze(-1) * mass;  // (B, 1)
  torch::Tensor tok = torch::searchsorted(cum, target, /*out_int32=*/false, /*right=*/true);
  // u * mass rounded up past the last partial sum: the last kept token, as draw_token.
  const torch::Tensor last =
      (keep.to(torch::kInt64) * torch::arange(V, p.options().dtype(torch::kInt64))).amax(-1, true);
  return torch::where(tok >= V, last, tok).squeeze(-1);
}

torch::Tensor choose_next(torch::Tensor logits, const torch::Tensor& seen,
                          const GenerationOptions& o, torch::Generator& gen) {
  logits = logits.to(torch::kFloat32);
  if (o.repetition_penalty != 1.0 && seen.defined())
    logits = apply_repetition_penalty(logits, seen, o.repetition_penalty);
  if (!o.do_sample) return logits.argmax(-1);
  logits = logits / o.temperature;
  const float neg = -std::numeric_limits<float>::infinity();
  if (o.top_k > 0 && o.top_k < logits.size(-1)) {
    torch::Tensor kth = std::get<0>(logits.topk(o.top_k, -1)).select(-1, o.top_k - 1).unsqueeze(-1);
    logits = logits.masked_fill(logits < kth, neg);
  }
  // The nucleus per row by a selection on mass (nucleus_floor), not a sort of the vocabulary,
  // and the draw by inverse CDF over the kept tokens (draw_token), one uniform per row from the
  // caller's generator: the sort and torch::multinomial were most of a CPU sampling step
  // (docs/BENCHMARKS.md). The generator is a CPU one, seeded per run; a run on a GPU takes its
  // uniforms from it too and chooses on the device by the same rule (draw_tokens).
  torch::Tensor probs = torch::softmax(logits, -1);  // (B, V)
  const int64_t B = probs.size(0), V = probs.size(1);
  torch::Tensor u =
      torch::rand({B}, gen, torch::TensorOptions(torch::kFloat64).device(gen.device()))
          .to(torch::kCPU);  // (B)
  if (!probs.is_cpu()) {
    // On a GPU: the same choice by a sort per row there (draw_tokens), not a copy of B x V
    // probabilities to the host; the uniforms are still the run's generator's.
    const torch::Tensor bad = torch::isnan(probs).any(-1).cpu();  // (B)
    DPFT_CHECK(!bad.any().item<bool>(),
               "sampling: row {} of the next-token probabilities holds NaN (the model's logits "
               "are not finite: check the checkpoint and the dtype)",
               bad.to(torch::kInt64).argmax().item<int64_t>());
    return draw_tokens(probs, u.to(probs.device()), o.top_p);
  }
  torch::Tensor host = probs.contiguous();                // (B, V)
  torch::Tensor next = torch::empty({B}, torch::kInt64);  // (B)
  std::vector<float> scratch;
  const float* rows = host.data_ptr<float>();
  const double* ub = u.data_ptr<double>();
  int64_t* out = next.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    const float* p = rows + b * V;
    DPFT_CHECK(std::none_of(p, p + V, [](float x) { return std::isnan(x); }),
               "sampling: row {} of the next-token probabilities holds NaN (the model's logits are "
               "not finite: check the checkpoint and the dtype)",
               b);
    const float floor = o.top_p < 1.0 ? nucleus_floor(p, V, o.top_p, scratch) : 0.0f;
    out[b] = draw_token(p, V, floor, ub[b]);
  }
  return next.to(logits.device());
}

namespace {

// Tokens that would complete an n-gram already in `g` (a row's new tokens).
std::vector<int64_t> banned_by_ngrams(const std::vector<int64_t>& g, int64_t n) {
  std::vector<int64_t> out;
  auto N = static_cast<size_t>(n);
  if (n <= 0 || g.size() + 1 < N) return out;
  const size_t k = N - 1;  // the prefix length an n-gram shares with the next token
  for (size_t i = 0; i + N <= g.size(); ++i)
    if (std::equal(g.begin() + static_cast<std::ptrdiff_t>(i),
                   g.begin() + static_cast<std::ptrdiff_t>(i + k),
                   g.end() - static_cast<std::ptrdiff_t>(k)))
      out.push_back(g[i + k]);
  return out;
}

// What generate() asks of the model: the next-token logits of every running row, (B', 1, V).
class Stepper {
 public:
  virtual ~Stepper() = default;
  virtual torch::Tensor first() = 0;
  virtual torch::Tensor next(const torch::Tensor& nt) = 0;  // nt (B', 1): the tokens just chosen
  virtual void keep(const torch::Tensor& rows) = 0;         // rows (B'') int64: the rows going on
};

// A decoder-only model: the left-padded prompts, then each new token appended (with the KV
// cache, or recomputing the whole prefix: the reference path).
class CausalStepper : public Stepper {
 public:
  CausalStepper(model::CausalLMImpl& m, torch::Tensor ids, torch::Tensor mask, bool use_cache)
      : m_(m), all_(std::move(ids)), mask_(std::move(mask)), use_cache_(use_cache) {}
  torch::Tensor first() override { return m_.forward(all_, mask_, cache(), 1); }
  torch::Tensor next(const torch::Tensor& nt) override {
    all_ = torch::cat({all_, nt}, 1);
    mask_ = torch::cat({mask_, torch::ones({nt.size(0), 1}, mask_.options())}, 1);
    return use_cache_ ? m_.forward(nt, mask_, &cache_, 1) : m_.forward(all_, mask_, nullptr, 1);
  }
  void keep(const torch::Tensor& rows) override {
    if (use_cache_) cache_.select_rows(rows);
    all_ = all_.index_select(0, rows);
    mask_ = mask_.index_select(0, rows);
  }

 private:
  model::KVCache* cache() { return use_cache_ ? &cache_ : nullptr; }
  model::CausalLMImpl& m_;
  torch::Tensor all_, mask_;  // (B', T) prompt + new tokens
  bool use_cache_;
  model::KVCache cache_;
};

// An encoder-decoder: the prompts are the sources (right-padded, encoded once); the decoder
// starts from decoder_start_token_id and sees only its own tokens.
class Seq2SeqStepper : public Stepper {
 public:
  Seq2SeqStepper(model::Seq2SeqImpl& m, const torch::Tensor& src, const torch::Tensor& src_mask,
                 bool use_cache)
      : m_(m), src_mask_(src_mask), use_cache_(use_cache) {
    enc_ = m_.encode(src, src_mask);
    dec_ = torch::full({src.size(0), 1}, m_.config().decoder_start_token_id,
                       src.options().dtype(torch::kInt64));
  }
  torch::Tensor first() override {
    return m_.decode(dec_, torch::Tensor(), enc_, src_mask_, use_cache_ ? &cache_ : nullptr, 1);
  }
  torch::Tensor next(const torch::Tensor& nt) override {
    dec_ = torch::cat({dec_, nt}, 1);
    return use_cache_ ? m_.decode(nt, torch::Tensor(), enc_, src_mask_, &cache_, 1)
                      : m_.decode(dec_, torch::Tensor(), enc_, src_mask_, nullptr, 1);
  }
  void keep(const torch::Tensor& rows) override {
    if (use_cache_) cache_.select_rows(rows);
    enc_ = enc_.index_select(0, rows);
    src_mask_ = src_mask_.index_select(0, rows);
    dec_ = dec_.index_select(0, rows);
  }

 private:
  model::Seq2SeqImpl& m_;
  torch::Tensor enc_, src_mask_, dec_;  // (B', S, d), (B', S), (B', 1 + new)
  bool use_cache_;
  model::Seq2SeqCache cache_;
};

// Sources right-padded into one batch (BART's positions ignore padding, so it goes last).
std::pair<torch::Tensor, torch::Tensor> pad_sources(model::CausalLMImpl& model,
                                                    const std::vector<std::vector<int64_t>>& src,
                                                    int64_t pad_id) {
  const auto B = static_cast<int64_t>(src.size());
  int64_t S = 0;
  for (const auto& p : src) {
    if (p.empty()) throw ConfigError("generate: every source needs at least one token");
    S = std::max<int64_t>(S, static_cast<int64_t>(p.size()));
  }
  const int64_t V = model.config().vocab_size;
  torch::Tensor ids = torch::full({B, S}, pad_id, torch::kInt64);
  torch::Tensor mask = torch::zeros({B, S}, torch::kInt64);
  for (int64_t b = 0; b < B; ++b) {
    const auto& p = src[static_cast<size_t>(b)];
    for (size_t i = 0; i < p.size(); ++i) {
      if (p[i] < 0 || p[i] >= V)
        throw InputError(
            fmt::format("source {} has token id {} outside the vocabulary [0, {})", b, p[i], V));
      ids[b][static_cast<int64_t>(i)] = p[i];
    }
    mask[b].slice(0, 0, static_cast<int64_t>(p.size())).fill_(1);
  }
  auto dev = model.parameters().front().device();
  return {ids.to(dev), mask.to(dev)};
}

}  // namespace

std::vector<Generation> generate(
    model::CausalLMImpl& model, const std::vector<std::vector<int64_t>>& prompts,
    const GenerationOptions& o,
    const std::function<std::string(const std::vector<int64_t>&)>& decode) {
  validate(o);
  if (!o.stop_strings.empty() && !decode)
    throw ConfigError("stop strings need a tokenizer to decode with");
  int64_t B = static_cast<int64_t>(prompts.size());
  std::vector<Generation> out(B);
  if (B == 0) return out;
  const int64_t V = model.config().vocab_size;
  auto* s2s = dynamic_cast<model::Seq2SeqImpl*>(&model);
  torch::NoGradGuard ng;
  BlasThreadsGuard blas(1);  // decoding is small-matrix work: see core/util/system.hpp
  bool was_training = model.is_training();
  model.eval();
  int64_t max_new = o.max_new_tokens, min_new = o.min_new_tokens;
  std::unique_ptr<Stepper> stepper;
  torch::Tensor seen = torch::zeros({B, V}, torch::kBool);  // for the repetition penalty
  if (s2s) {
    // The decoder's positions: the start token and max_position - 1 new ones.
    const int64_t P = model.config().max_position;
    max_new = std::min(max_new, P - 1);
    min_new = std::min(min_new, max_new);
    auto [src, src_mask] = pad_sources(model, prompts, o.pad_id);
    stepper = std::make_unique<Seq2SeqStepper>(*s2s, src, src_mask, o.use_cache);
    // HF penalises the decoder's own ids only: the start token, then what it generates.
    seen.select(1, model.config().decoder_start_token_id).fill_(true);
  } else {
    Padded pp = pad_prompts(model, prompts, o.pad_id, o.max_new_tokens, o.min_new_tokens);
    max_new = pp.max_new, min_new = pp.min_new;
    stepper = std::make_unique<CausalStepper>(model, pp.ids, pp.mask, o.use_cache);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t : prompts[static_cast<size_t>(b)]) seen[b][t] = true;
  }
  auto dev = model.parameters().front().device();
  seen = seen.to(dev);
  auto gen = at::detail::createCPUGenerator(o.seed);
  // rows[i]: the prompt of batch row i. Finished rows leave the batch (and the cache), so
  // decoding costs what the unfinished rows need.
  std::vector<int64_t> rows(B);
  for (int64_t b = 0; b < B; ++b) rows[b] = b;
  torch::Tensor logits = stepper->first();  // (B, 1, V)
  const float neg = -std::numeric_limits<float>::infinity();
  for (int64_t step = 0; step < max_new; ++step) {
    torch::Tensor last = logits.select(1, logits.size(1) - 1);
    if ((step < min_new && !o.stop_ids.empty()) || o.no_repeat_ngram_size > 0) {
      last = last.clone();
      if (step < min_new)  // no stop token before the minimum
        for (int64_t id : o.stop_ids) last.select(1, id).fill_(neg);
      for (size_t i = 0; i < rows.size(); ++i)
        for (int64_t t : banned_by_ngrams(out[rows[i]].tokens, o.no_repeat_ngram_size))
          last[static_cast<int64_t>(i)][t] = neg;
    }
    torch::Tensor next = choose_next(last, seen, o, gen).to(torch::kCPU);  // (B')
    std::vector<int64_t> keep;  // batch rows still running after this token
    for (size_t i = 0; i < rows.size(); ++i) {
      Generation& g = out[rows[i]];
      int64_t t = next[static_cast<int64_t>(i)].item<int64_t>();
      g.tokens.push_back(t);
      if (std::find(o.stop_ids.begin(), o.stop_ids.end(), t) != o.stop_ids.end()) {
        g.finish_reason = "stop_id";
      } else if (!o.stop_strings.empty()) {
        std::string text = decode(g.tokens);
        for (const auto& s : o.stop_strings)
          if (!s.empty() && text.find(s) != std::string::npos) g.finish_reason = "stop_string";
      }
      if (g.finish_reason.empty()) keep.push_back(static_cast<int64_t>(i));
    }
    if (keep.empty() || step + 1 == max_new) break;
    if (keep.size() < rows.size()) {
      torch::Tensor k = torch::tensor(keep, torch::kInt64);
      next = next.index_select(0, k);
      k = k.to(dev);
      stepper->keep(k);
      seen = seen.index_select(0, k);
      std::vector<int64_t> kept;
      for (int64_t i : keep) kept.push_back(rows[static_cast<size_t>(i)]);
      rows = std::move(kept);
    }
    torch::Tensor nt = next.to(dev).unsqueeze(1);
    seen.scatter_(1, nt, true);
    logits = stepper->next(nt);
  }
  for (auto& g : out) {
    if (g.finish_reason.empty()) g.finish_reason = "length";
    if (decode) {
      g.text = decode(g.tokens);
      size_t cut = std::string::npos;
      for (const auto& s : o.stop_strings)
        if (!s.empty()) cut = std::min(cut, g.text.find(s));
      if (cut != std::string::npos) g.text = g.text.substr(0, cut);
    }
  }
  if (was_training) model.train();
  return out;
}

namespace {

struct Hyp {
  std::vector<int64_t> tokens;
  double sum = 0;  // summed log-probabilities
};

double normalised(double sum, size_t len, double length_penalty) {
  return sum / std::pow(static_cast<double>(len), length_penalty);
}

}  // namespace

std::vector<Generation> beam_search(
    model::CausalLMImpl& model, const std::vector<std::vector<int64_t>>& prompts,
    const BeamOptions& o, const std::function<std::string(const std::vector<int64_t>&)>& decode) {
  if (o.num_beams < 1) throw ConfigError(fmt::format("num_beams {} must be >= 1", o.num_beams));
  if (dynamic_cast<model::Seq2SeqImpl*>(&model))
    throw ConfigError(
        "beam search decodes decoder-only models; for an encoder-decoder (bart) use sampling or "
        "greedy generation");
  if (o.no_repeat_ngram_size < 0)
    throw ConfigError(fmt::format("no_repeat_ngram_size {} must be >= 0", o.no_repeat_ngram_size));
  if (o.max_new_tokens < 1)
    throw ConfigError(fmt::format("max_new_tokens {} must be >= 1", o.max_new_tokens));
  if (o.min_new_tokens < 0 || o.min_new_tokens > o.max_new_tokens)
    throw ConfigError(fmt::format("min_new_tokens {} must be in [0, max_new_tokens {}]",
                                  o.min_new_tokens, o.max_new_tokens));
  if (!std::isfinite(o.length_penalty)) throw ConfigError("length_penalty must be a finite number");
  const auto B = static_cast<int64_t>(prompts.size());
  std::vector<Generation> out(static_cast<size_t>(B));
  if (B == 0) return out;
  const int64_t V = model.config().vocab_size;
  for (int64_t id : o.stop_ids)
    if (id < 0 || id >= V)
      throw ConfigError(fmt::format("stop id {} is outside the vocabulary [0, {})", id, V));
  Padded pp = pad_prompts(model, prompts, o.pad_id, o.max_new_tokens, o.min_new_tokens);
  const int64_t max_new = pp.max_new, min_new = pp.min_new, K = o.num_beams;
  const auto dev = pp.ids.device();
  const double neg_inf = -std::numeric_limits<double>::infinity();
  const int64_t pool = std::min<int64_t>((1 + static_cast<int64_t>(o.stop_ids.size())) * K, K * V);
  auto is_stop = [&](int64_t t) {
    return std::find(o.stop_ids.begin(), o.stop_ids.end(), t) != o.stop_ids.end();
  };

  torch::NoGradGuard ng;
  BlasThreadsGuard blas(1);
  const bool was_training = model.is_training();
  model.eval();
  model::KVCache cache;
  // Each active prompt holds K rows (beams); a dead beam (fewer than K live extensions) has
  // score -inf and is never extended.
  std::vector<int64_t> active(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) active[static_cast<size_t>(b)] = b;
  std::vector<std::vector<Hyp>> beams(static_cast<size_t>(B),
                                      std::vector<Hyp>(static_cast<size_t>(K)));
  for (auto& bs : beams)
    for (int64_t k = 1; k < K; ++k) bs[static_cast<size_t>(k)].sum = neg_inf;  // one live start
  struct Finished {
    Hyp h;
    double score;
    bool stopped;
  };
  std::vector<std::vector<Finished>> finished(static_cast<size_t>(B));
  auto add_finished = [&](int64_t b, Hyp h, bool stopped) {
    double sc = normalised(h.sum, h.tokens.size(), o.length_penalty);
    auto& f = finished[static_cast<size_t>(b)];
    f.push_back({std::move(h), sc, stopped});
    std::stable_sort(f.begin(), f.end(),
                     [](const auto& x, const auto& y) { return x.score > y.score; });
    if (static_cast<int64_t>(f.size()) > K) f.resize(static_cast<size_t>(K));
  };

  // Rows: prompt-major, K per prompt. The prompt pass runs once per prompt; its cache and mask
  // are then repeated K times.
  torch::Tensor rep = torch::arange(B, torch::kInt64).repeat_interleave(K).to(dev);
  torch::Tensor all = pp.ids.index_select(0, rep), mask = pp.mask.index_select(0, rep);
  torch::Tensor logits = model.forward(pp.ids, pp.mask, o.use_cache ? &cache : nullptr, 1);
  logits = logits.index_select(0, rep);
  if (o.use_cache) cache.select_rows(rep);
  for (int64_t step = 0; step < max_new && !active.empty(); ++step) {
    const auto A = static_cast<int64_t>(active.size());
    torch::Tensor logp =
        torch::log_softmax(logits.select(1, logits.size(1) - 1).to(torch::kFloat64), -1)
            .to(torch::kCPU);  // (A K, V)
    if (step < min_new)
      for (int64_t id : o.stop_ids) logp.select(1, id).fill_(neg_inf);
    std::vector<double> base(static_cast<size_t>(A * K));
    for (int64_t a = 0; a < A; ++a)
      for (int64_t k = 0; k < K; ++k) {
        const Hyp& h =
            beams[static_cast<size_t>(active[static_cast<size_t>(a)])][static_cast<size_t>(k)];
        base[static_cast<size_t>(a * K + k)] = h.sum;
        for (int64_t t : banned_by_ngrams(h.tokens, o.no_repeat_ngram_size))
          logp[a * K + k][t] = neg_inf;
      }
    torch::Tensor cand =
        (logp + torch::tensor(base, torch::kFloat64).unsqueeze(1)).view({A, K * V});
    auto [top_v, top_i] = cand.topk(pool, 1);
    auto tv = top_v.accessor<double, 2>();
    auto ti = top_i.accessor<int64_t, 2>();
    const bool last = step + 1 == max_new;
    std::vector<int64_t> next_active, rows, next_tokens;
    for (int64_t a = 0; a < A; ++a) {
      const int64_t b = active[static_cast<size_t>(a)];
      auto& cur = beams[static_cast<size_t>(b)];
      std::vector<Hyp> next;
      std::vector<int64_t> src;
      for (int64_t j = 0; j < pool && static_cast<int64_t>(next.size()) < K; ++j) {
        if (tv[a][j] == neg_inf) break;
        const int64_t k = ti[a][j] / V, t = ti[a][j] % V;
        Hyp h{cur[static_cast<size_t>(k)].tokens, tv[a][j]};
        h.tokens.push_back(t);
        if (is_stop(t)) {
          add_finished(b, std::move(h), true);
        } else if (last) {
          add_finished(b, std::move(h), false);  // running hypotheses end at the limit
        } else {
          next.push_back(std::move(h));
          src.push_back(k);
        }
      }
      // Is this prompt done? A running hypothesis of sum s and length L can at best reach
      // s / L'^lp for a longer L' (s only falls): at the longest L' when lp > 0, else at L + 1.
      bool done = last || next.empty();
      const auto& f = finished[static_cast<size_t>(b)];
      if (!done && !f.empty()) {
        if (o.early_stopping) {
          done = static_cast<int64_t>(f.size()) >= K;
        } else {
          double best_possible = neg_inf;
          for (const auto& h : next) {
            size_t L = o.length_penalty > 0 ? static_cast<size_t>(max_new) : h.tokens.size() + 1;
            best_possible = std::max(best_possible, normalised(h.sum, L, o.length_penalty));
          }
          done = f.front().score >= best_possible;
        }
      }
      if (done) continue;
      while (static_cast<int64_t>(next.size()) < K) {  // dead beams keep the batch rectangular
        next.push_back({next.front().tokens, neg_inf});
        src.push_back(src.front());
      }
      cur = std::move(next);
      next_active.push_back(b);
      for (int64_t k = 0; k < K; ++k) {
        rows.push_back(a * K + src[static_cast<size_t>(k)]);
        next_tokens.push_back(cur[static_cast<size_t>(k)].tokens.back());
      }
    }
    active = std::move(next_active);
    if (active.empty()) break;
    torch::Tensor r = torch::tensor(rows, torch::kInt64).to(dev);
    torch::Tensor nt = torch::tensor(next_tokens, torch::kInt64).to(dev).unsqueeze(1);
    if (o.use_cache) cache.select_rows(r);
    all = torch::cat({all.index_select(0, r), nt}, 1);
    mask = mask.index_select(0, r);
    mask = torch::cat({mask, torch::ones({mask.size(0), 1}, mask.options())}, 1);
    logits =
        o.use_cache ? model.forward(nt, mask, &cache, 1) : model.forward(all, mask, nullptr, 1);
  }
  for (int64_t b = 0; b < B; ++b) {
    Generation& g = out[static_cast<size_t>(b)];
    const auto& f = finished[static_cast<size_t>(b)];
    if (f.empty()) {  // every extension was banned from the first step
      g.finish_reason = "length";
      g.score = neg_inf;
      continue;
    }
    g.tokens = f.front().h.tokens;
    g.score = f.front().score;
    g.finish_reason = f.front().stopped ? "stop_id" : "length";
    if (decode) g.text = decode(g.tokens);
  }
  if (was_training) model.train();
  return out;
}

}  // namespace dpft::generate
