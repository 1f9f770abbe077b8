#include "core/generate/generate.hpp"

#include <fmt/format.h>

#include <limits>

#include "core/util/error.hpp"
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
}

}  // namespace

torch::Tensor choose_next(torch::Tensor logits, const torch::Tensor& seen,
                          const GenerationOptions& o, torch::Generator& gen) {
  logits = logits.to(torch::kFloat32);
  if (o.repetition_penalty != 1.0 && seen.defined()) {
    torch::Tensor pen =
        torch::where(logits > 0, logits / o.repetition_penalty, logits * o.repetition_penalty);
    logits = torch::where(seen, pen, logits);
  }
  if (!o.do_sample) return logits.argmax(-1);
  logits = logits / o.temperature;
  const float neg = -std::numeric_limits<float>::infinity();
  if (o.top_k > 0 && o.top_k < logits.size(-1)) {
    torch::Tensor kth = std::get<0>(logits.topk(o.top_k, -1)).select(-1, o.top_k - 1).unsqueeze(-1);
    logits = logits.masked_fill(logits < kth, neg);
  }
  if (o.top_p < 1.0) {
    auto [sorted, idx] = logits.sort(-1, /*descending=*/true);
    torch::Tensor probs = torch::softmax(sorted, -1);
    torch::Tensor before = probs.cumsum(-1) - probs;  // mass of strictly better tokens
    torch::Tensor drop_sorted = before >= o.top_p;    // the best token is never dropped
    torch::Tensor drop = torch::zeros_like(drop_sorted).scatter(-1, idx, drop_sorted);
    logits = logits.masked_fill(drop, neg);
  }
  torch::Tensor probs = torch::softmax(logits, -1);
  return torch::multinomial(probs, 1, false, gen).squeeze(-1);
}

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
  int64_t T0 = 0;
  for (const auto& p : prompts) {
    if (p.empty()) throw ConfigError("generate: every prompt needs at least one token");
    T0 = std::max<int64_t>(T0, static_cast<int64_t>(p.size()));
  }
  // GPT-2's learned positions end at max_position: a longer sequence would index past its
  // position table. Generation stops there (finish_reason "length"); rotary models go on.
  int64_t max_new = o.max_new_tokens, min_new = o.min_new_tokens;
  if (model.config().is_gpt2()) {
    const int64_t P = model.config().max_position;
    if (T0 >= P)
      throw InputError(fmt::format("generate: a prompt of {} tokens leaves no room in the model's "
                                   "{} positions; shorten the prompt",
                                   T0, P));
    max_new = std::min(max_new, P - T0);
    min_new = std::min(min_new, max_new);
  }
  auto dev = model.parameters().front().device();
  int64_t V = model.config().vocab_size;
  torch::Tensor ids = torch::full({B, T0}, o.pad_id, torch::kInt64);
  torch::Tensor mask = torch::zeros({B, T0}, torch::kInt64);
  torch::Tensor seen = torch::zeros({B, V}, torch::kBool);
  for (int64_t b = 0; b < B; ++b) {
    int64_t n = static_cast<int64_t>(prompts[b].size());
    for (int64_t i = 0; i < n; ++i) {
      int64_t t = prompts[b][i];
      if (t < 0 || t >= V)
        throw InputError(
            fmt::format("prompt {} has token id {} outside the vocabulary [0, {})", b, t, V));
      ids[b][T0 - n + i] = t;
      seen[b][t] = true;
    }
    mask.slice(1, T0 - n, T0)[b].fill_(1);
  }
  ids = ids.to(dev);
  mask = mask.to(dev);
  seen = seen.to(dev);

  torch::NoGradGuard ng;
  BlasThreadsGuard blas(1);  // decoding is small-matrix work: see core/util/system.hpp
  bool was_training = model.is_training();
  model.eval();
  auto gen = at::detail::createCPUGenerator(o.seed);
  model::KVCache cache;
  // rows[i]: the prompt of batch row i. Finished rows leave the batch (and the KV cache), so
  // decoding costs what the unfinished rows need.
  std::vector<int64_t> rows(B);
  for (int64_t b = 0; b < B; ++b) rows[b] = b;
  torch::Tensor all = ids;  // (B', T0 + t)
  torch::Tensor logits = model.forward(ids, mask, o.use_cache ? &cache : nullptr, 1);  // (B, 1, V)
  for (int64_t step = 0; step < max_new; ++step) {
    torch::Tensor last = logits.select(1, logits.size(1) - 1);
    if (step < min_new && !o.stop_ids.empty()) {  // no stop token before the minimum
      last = last.clone();
      for (int64_t id : o.stop_ids)
        last.select(1, id).fill_(-std::numeric_limits<float>::infinity());
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
    if (keep.empty()) break;
    if (keep.size() < rows.size()) {
      torch::Tensor k = torch::tensor(keep, torch::kInt64);
      next = next.index_select(0, k);
      k = k.to(dev);
      if (o.use_cache) cache.select_rows(k);
      all = all.index_select(0, k);
      mask = mask.index_select(0, k);
      seen = seen.index_select(0, k);
      std::vector<int64_t> kept;
      for (int64_t i : keep) kept.push_back(rows[static_cast<size_t>(i)]);
      rows = std::move(kept);
    }
    torch::Tensor nt = next.to(dev).unsqueeze(1);
    seen.scatter_(1, nt, true);
    all = torch::cat({all, nt}, 1);
    mask =
        torch::cat({mask, torch::ones({static_cast<int64_t>(rows.size()), 1}, mask.options())}, 1);
    logits =
        o.use_cache ? model.forward(nt, mask, &cache, 1) : model.forward(all, mask, nullptr, 1);
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

}  // namespace dpft::generate
