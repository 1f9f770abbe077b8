// Generation: KV-cached greedy decoding equals the uncached reference token for token;
// seeded sampling is reproducible; top-k / top-p / repetition penalty / stop conditions.
#include <catch2/catch.hpp>

#include <set>
#include "core/generate/generate.hpp"

#include "core/util/error.hpp"
#include "model_test_util.hpp"

using namespace dpft;
using namespace dpft::model;
using namespace dpft::generate;

namespace {
ModelConfig tiny_gen_config(const std::string& type) {
  test::TinySize s;
  s.vocab = 50;
  s.mlp = 40;
  s.positions = 128;
  return test::tiny_config(type, s);
}
const std::vector<std::vector<int64_t>> kPrompts = {{1, 2, 3}, {7, 8, 9, 10, 11, 12}, {4}};
}  // namespace

TEST_CASE("KV-cached greedy decoding equals recomputing the prefix", "[generate]") {
  for (std::string type : {"gpt2", "llama", "qwen2"}) {
    INFO(type);
    CausalLM m = make_causal_lm(tiny_gen_config(type), 11);
    GenerationOptions o;
    o.max_new_tokens = 24;
    auto cached = generate::generate(*m, kPrompts, o);
    o.use_cache = false;
    auto slow = generate::generate(*m, kPrompts, o);
    for (size_t b = 0; b < kPrompts.size(); ++b) {
      CHECK(cached[b].tokens == slow[b].tokens);
      CHECK(cached[b].tokens.size() == 24);
      CHECK(cached[b].finish_reason == "length");
    }
    // a row's output does not depend on the other rows (padding-invariance)
    auto single = generate::generate(*m, {kPrompts[0]}, GenerationOptions{24});
    CHECK(single[0].tokens == cached[0].tokens);
  }
}

TEST_CASE("seeded sampling is reproducible; top_k = 1 equals greedy", "[generate]") {
  CausalLM m = make_causal_lm(tiny_gen_config("llama"), 12);
  GenerationOptions o;
  o.max_new_tokens = 16;
  o.do_sample = true;
  o.temperature = 1.5;
  o.top_p = 0.95;
  o.seed = 42;
  auto a = generate::generate(*m, kPrompts, o), b = generate::generate(*m, kPrompts, o);
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i].tokens == b[i].tokens);
  o.seed = 43;
  auto c = generate::generate(*m, kPrompts, o);
  bool differs = false;
  for (size_t i = 0; i < a.size(); ++i) differs = differs || a[i].tokens != c[i].tokens;
  CHECK(differs);
  GenerationOptions k1 = o;
  k1.top_k = 1;
  k1.top_p = 1.0;
  auto g = generate::generate(*m, kPrompts, GenerationOptions{16});
  auto s = generate::generate(*m, kPrompts, k1);
  for (size_t i = 0; i < g.size(); ++i) CHECK(g[i].tokens == s[i].tokens);
}

TEST_CASE("choose_next: top-p keeps the nucleus, top-k the k best, penalty as defined",
          "[generate]") {
  auto gen = at::detail::createCPUGenerator(7);
  // probabilities 0.5, 0.3, 0.15, 0.05
  torch::Tensor logits = torch::log(torch::tensor({{0.5f, 0.3f, 0.15f, 0.05f}}));
  GenerationOptions o;
  o.do_sample = true;
  o.top_p = 0.75;  // nucleus = {0, 1} (0.5 < 0.75 <= 0.8)
  std::set<int64_t> got;
  for (int i = 0; i < 400; ++i)
    got.insert(choose_next(logits, torch::Tensor(), o, gen).item<int64_t>());
  CHECK(got == std::set<int64_t>{0, 1});
  o.top_p = 1.0;
  o.top_k = 3;
  got.clear();
  for (int i = 0; i < 400; ++i)
    got.insert(choose_next(logits, torch::Tensor(), o, gen).item<int64_t>());
  CHECK(got == std::set<int64_t>{0, 1, 2});
  // repetition penalty 2 on token 0 (logit log 0.5 < 0: multiplied) makes token 1 the argmax
  GenerationOptions p;
  p.repetition_penalty = 2.0;
  torch::Tensor seen = torch::tensor({{true, false, false, false}});
  CHECK(choose_next(logits, seen, p, gen).item<int64_t>() == 1);
  torch::Tensor pos = torch::tensor({{2.0f, 1.5f}});  // positive logit divided: 1.0 < 1.5
  CHECK(choose_next(pos, torch::tensor({{true, false}}), p, gen).item<int64_t>() == 1);
}

TEST_CASE("rows that stop early leave the batch; the others decode exactly as alone",
          "[generate]") {
  for (std::string type : {"gpt2", "llama"}) {
    INFO(type);
    CausalLM m = make_causal_lm(tiny_gen_config(type), 21);
    // Stop each row at a token its free run emits at a different step, so the batch shrinks
    // from 3 rows to 2 to 1 while decoding goes on.
    std::vector<std::vector<int64_t>> free;
    for (const auto& p : kPrompts)
      free.push_back(generate::generate(*m, {p}, GenerationOptions{20})[0].tokens);
    GenerationOptions o{20};
    o.stop_ids = {free[0][2], free[1][6]};
    for (bool cache : {true, false}) {
      INFO("use_cache " << cache);
      o.use_cache = cache;
      auto batch = generate::generate(*m, kPrompts, o);
      std::set<size_t> lengths;
      for (size_t b = 0; b < kPrompts.size(); ++b) {
        auto alone = generate::generate(*m, {kPrompts[b]}, o);
        CHECK(batch[b].tokens == alone[0].tokens);
        CHECK(batch[b].finish_reason == alone[0].finish_reason);
        lengths.insert(batch[b].tokens.size());
      }
      CHECK(lengths.size() >= 2);  // rows did finish at different steps
    }
  }
}

TEST_CASE("forward with keep_last returns the last positions' logits of the full forward",
          "[generate]") {
  for (std::string type : {"gpt2", "qwen2"}) {
    CausalLM m = make_causal_lm(tiny_gen_config(type), 22);
    torch::NoGradGuard ng;
    torch::Tensor ids = torch::tensor({{1, 2, 3, 4, 5}, {0, 0, 6, 7, 8}}, torch::kInt64);
    torch::Tensor mask = torch::tensor({{1, 1, 1, 1, 1}, {0, 0, 1, 1, 1}}, torch::kInt64);
    torch::Tensor full = m->forward(ids, mask);
    torch::Tensor last2 = m->forward(ids, mask, nullptr, 2);
    REQUIRE(last2.sizes() == torch::IntArrayRef({2, 2, full.size(2)}));
    CHECK(torch::allclose(last2, full.slice(1, 3), 1e-5, 1e-6));
    CHECK(m->forward(ids, mask, nullptr, 9).sizes() == full.sizes());  // more than T: all
  }
}

TEST_CASE("stop ids end a row early and bad options are rejected", "[generate]") {
  CausalLM m = make_causal_lm(tiny_gen_config("gpt2"), 13);
  auto free_run = generate::generate(*m, {{1, 2}}, GenerationOptions{10});
  GenerationOptions o{10};
  o.stop_ids = {free_run[0].tokens[3]};
  auto stopped = generate::generate(*m, {{1, 2}}, o);
  // stops at the first occurrence of that token, which it keeps
  auto first = std::find(free_run[0].tokens.begin(), free_run[0].tokens.end(), o.stop_ids[0]);
  size_t n = static_cast<size_t>(first - free_run[0].tokens.begin()) + 1;
  CHECK(stopped[0].tokens.size() == n);
  CHECK(stopped[0].finish_reason == "stop_id");
  // min_new_tokens: the stop id cannot come before the minimum (here it was the first choice).
  GenerationOptions mo{10};
  mo.stop_ids = {free_run[0].tokens[0]};
  mo.min_new_tokens = 4;
  auto held = generate::generate(*m, {{1, 2}}, mo);
  REQUIRE(held[0].tokens.size() >= 5);
  for (size_t i = 0; i < 4; ++i) CHECK(held[0].tokens[i] != mo.stop_ids[0]);
  mo.min_new_tokens = 11;
  CHECK_THROWS_AS(generate::generate(*m, {{1, 2}}, mo), ConfigError);
  GenerationOptions bad;
  bad.temperature = 0;
  CHECK_THROWS_AS(generate::generate(*m, {{1}}, bad), ConfigError);
  CHECK_THROWS_AS(generate::generate(*m, {{}}, GenerationOptions{}), ConfigError);
  CHECK_THROWS_AS(generate::generate(*m, {{99}}, GenerationOptions{}), InputError);
}

TEST_CASE("GPT-2 generation stops at the last learned position; a prompt that fills it is refused",
          "[generate]") {
  test::TinySize s;
  s.vocab = 50;
  s.mlp = 40;
  s.positions = 16;
  CausalLM m = make_causal_lm(test::tiny_config("gpt2", s), 13);
  GenerationOptions o{100};  // far past the 16 positions
  for (bool cache : {true, false}) {
    CAPTURE(cache);
    o.use_cache = cache;
    auto g = generate::generate(*m, kPrompts, o);  // longest prompt: 6 tokens
    for (const auto& x : g) {
      CHECK(x.tokens.size() == 16 - 6);
      CHECK(x.finish_reason == "length");
    }
  }
  CHECK_THROWS_AS(generate::generate(*m, {std::vector<int64_t>(16, 1)}, o), InputError);
}
