// Generation: KV-cached greedy decoding equals the uncached reference token for token;
// seeded sampling is reproducible; top-k / top-p / repetition penalty / stop conditions.
#include <catch2/catch.hpp>

#include <limits>
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
  for (const std::string& type : test::decoder_types()) {
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

TEST_CASE("sampling refuses logits that are not finite", "[generate]") {
  auto gen = at::detail::createCPUGenerator(3);
  GenerationOptions o;
  o.do_sample = true;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  // A NaN anywhere in a row makes its softmax NaN: refused, whether or not top-p is on.
  torch::Tensor bad = torch::tensor({{0.1f, 0.2f, 0.3f}, {0.1f, nan, 0.3f}});
  for (double top_p : {1.0, 0.9}) {
    o.top_p = top_p;
    CHECK_THROWS_WITH(choose_next(bad, torch::Tensor(), o, gen),
                      Catch::Matchers::Contains("row 1") && Catch::Matchers::Contains("NaN"));
  }
  // Every logit -inf: nothing to draw from (softmax of -inf is NaN too).
  torch::Tensor none = torch::full({1, 4}, -inf);
  CHECK_THROWS(choose_next(none, torch::Tensor(), o, gen));
  // Some -inf logits are fine: the draw is among the finite ones.
  torch::Tensor ok = torch::tensor({{0.0f, -inf, 0.0f}});
  int64_t t = choose_next(ok, torch::Tensor(), o, gen).item<int64_t>();
  CHECK((t == 0 || t == 2));
}

namespace {
// The slow, obvious nucleus: sort descending, keep a token while the mass strictly above its
// probability (float64) is < top_p. Returns the smallest kept probability.
float nucleus_floor_by_sort(std::vector<float> p, double top_p) {
  std::sort(p.begin(), p.end(), std::greater<float>());
  double above = 0;  // mass of the values strictly greater than the current group's
  float floor = p[0];
  for (size_t i = 0; i < p.size();) {
    size_t j = i;
    double group = 0;
    while (j < p.size() && p[j] == p[i]) group += p[j++];
    if (above >= top_p) break;
    floor = p[i];
    above += group;
    i = j;
  }
  return floor;
}
}  // namespace

TEST_CASE("nucleus_floor equals a full sort's nucleus", "[generate]") {
  torch::manual_seed(3);
  std::vector<float> scratch;
  int checked = 0;
  for (int64_t V : {1, 2, 5, 97, 4096, 50257})
    for (double scale : {0.1, 1.0, 4.0, 12.0})  // flat to peaked distributions
      for (double top_p : {0.05, 0.5, 0.9, 0.95, 0.999}) {
        torch::Tensor p = torch::softmax(torch::randn({V}) * scale, 0).contiguous();
        std::vector<float> v(p.data_ptr<float>(), p.data_ptr<float>() + V);
        INFO("V " << V << " scale " << scale << " top_p " << top_p);
        CHECK(nucleus_floor(v.data(), V, top_p, scratch) == nucleus_floor_by_sort(v, top_p));
        ++checked;
      }
  CHECK(checked == 120);
  // Ties share a fate; zeros (tokens masked by top-k) are never the floor unless all else fails.
  std::vector<float> tied = {0.25f, 0.25f, 0.25f, 0.25f, 0.0f};
  CHECK(nucleus_floor(tied.data(), 5, 0.3, scratch) == 0.25f);
  CHECK(nucleus_floor_by_sort(tied, 0.3) == 0.25f);
  std::vector<float> skew = {0.05f, 0.6f, 0.0f, 0.35f};
  CHECK(nucleus_floor(skew.data(), 4, 0.5, scratch) == 0.6f);  // 0.6 alone reaches 0.5
  CHECK(nucleus_floor(skew.data(), 4, 0.6, scratch) == 0.6f);  // 0.6f > 0.6: 0.35 dropped
  CHECK(nucleus_floor(skew.data(), 4, 0.61, scratch) == 0.35f);
  CHECK(nucleus_floor(skew.data(), 4, 0.96, scratch) == 0.05f);
}

TEST_CASE("draw_token is the inverse CDF of the kept tokens", "[generate]") {
  const std::vector<float> p = {0.1f, 0.0f, 0.4f, 0.2f, 0.3f};
  // Slow reference: the kept tokens' cumulative masses, normalised; the first exceeding u.
  auto reference = [&](float floor, double u) {
    std::vector<int64_t> kept;
    double mass = 0;
    for (int64_t i = 0; i < 5; ++i)
      if (p[i] > 0 && p[i] >= floor) kept.push_back(i), mass += p[i];
    double acc = 0;
    for (int64_t i : kept)
      if ((acc += p[i] / mass) > u) return i;
    return kept.back();
  };
  for (float floor : {0.0f, 0.2f, 0.3f, 0.4f})
    for (double u : {0.0, 0.05, 0.1, 0.24, 0.26, 0.5, 0.74, 0.76, 0.999999})
      CHECK(draw_token(p.data(), 5, floor, u) == reference(floor, u));
  CHECK(draw_token(p.data(), 5, 0.0f, 0.0) == 0);  // the first positive token
  CHECK(draw_token(p.data(), 5, 0.4f, 0.7) == 2);  // only token 2 kept
  const std::vector<float> none = {0.0f, 0.0f};
  CHECK_THROWS(draw_token(none.data(), 2, 0.0f, 0.5));
  CHECK_THROWS(draw_token(p.data(), 5, 0.0f, 1.0));
}

TEST_CASE("draw_tokens (the GPU's sort-based choice) equals nucleus_floor + draw_token",
          "[generate]") {
  torch::manual_seed(21);
  std::vector<float> scratch;
  int rows = 0;
  for (int64_t V : {1, 2, 5, 97, 4096, 50257})
    for (double scale : {0.1, 1.0, 4.0, 12.0})
      for (double top_p : {0.05, 0.5, 0.95, 1.0}) {
        const int64_t B = 6;
        torch::Tensor p = torch::softmax(torch::randn({B, V}) * scale, 1).contiguous();  // (B, V)
        // Tokens masked by top-k (probability 0) and ties in the last row.
        if (V >= 5) p[0].slice(0, 0, V / 3).zero_();
        if (V >= 5) p[B - 1].fill_(1.0f / static_cast<float>(V));
        torch::Tensor u = torch::rand({B}, torch::kFloat64);  // (B)
        u[1] = 0.0;
        u[2] = 1.0 - 1e-12;
        const torch::Tensor got = draw_tokens(p, u, top_p);
        REQUIRE(got.sizes() == torch::IntArrayRef({B}));
        for (int64_t b = 0; b < B; ++b) {
          const float* row = p[b].data_ptr<float>();
          const float floor = top_p < 1.0 ? nucleus_floor(row, V, top_p, scratch) : 0.0f;
          INFO("V " << V << " scale " << scale << " top_p " << top_p << " row " << b);
          CHECK(got[b].item<int64_t>() == draw_token(row, V, floor, u[b].item<double>()));
          ++rows;
        }
      }
  CHECK(rows == 576);
  // choose_next on CPU logits never takes this path; a row with nothing to draw is refused.
  CHECK_THROWS(draw_tokens(torch::zeros({2, 4}), torch::full({2}, 0.5, torch::kFloat64), 0.9));
}

TEST_CASE("sampling draws each token with its renormalised probability", "[generate]") {
  auto gen = at::detail::createCPUGenerator(11);
  torch::Tensor logits = torch::log(torch::tensor({{0.5f, 0.3f, 0.15f, 0.05f}})).repeat({8, 1});
  GenerationOptions o;
  o.do_sample = true;
  for (double top_p : {1.0, 0.9}) {  // 0.9: nucleus {0, 1, 2}, mass 0.95
    o.top_p = top_p;
    std::vector<double> want = {0.5, 0.3, 0.15, 0.05};
    if (top_p < 1) want = {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0.0};
    std::vector<int64_t> count(4, 0);
    const int n = 2500 * 8;
    for (int i = 0; i < 2500; ++i) {
      torch::Tensor t = choose_next(logits, torch::Tensor(), o, gen);
      for (int64_t b = 0; b < 8; ++b) ++count[t[b].item<int64_t>()];
    }
    for (int k = 0; k < 4; ++k) {
      INFO("top_p " << top_p << " token " << k << " count " << count[k]);
      const double sd = std::sqrt(want[k] * (1 - want[k]) / n);
      CHECK(std::abs(static_cast<double>(count[k]) / n - want[k]) <= 4 * sd + 1e-12);
    }
  }
}

TEST_CASE("the repetition penalty on the seen tokens equals the dense formula", "[generate]") {
  torch::manual_seed(5);
  torch::Tensor logits = torch::randn({6, 300}) * 3;  // (B, V)
  torch::Tensor before = logits.clone();
  for (double r : {1.7, 1.5, 1.1}) {
    torch::Tensor seen = torch::rand({6, 300}) < 0.05;
    seen[2].fill_(false);  // a row with nothing seen
    torch::Tensor dense =
        torch::where(seen, torch::where(logits > 0, logits / r, logits * r), logits);
    CHECK(torch::equal(apply_repetition_penalty(logits, seen, r), dense));
    CHECK(torch::equal(apply_repetition_penalty(logits, torch::zeros_like(seen), r), logits));
  }
  CHECK(torch::equal(logits, before));  // the caller's logits are left as they were
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

// ---- beam search ----------------------------------------------------------------------------

namespace {

// The exhaustive optimum of beam_search's objective: every continuation of up to max_new
// tokens, scored from full (uncached) forwards of each prefix, with the same bans.
struct Best {
  std::vector<int64_t> tokens;
  double score = -std::numeric_limits<double>::infinity();
};

void exhaustive(CausalLMImpl& m, std::vector<int64_t> prefix, std::vector<int64_t> gen, double sum,
                const BeamOptions& o, Best& best) {
  torch::NoGradGuard ng;
  torch::Tensor ids = torch::tensor(prefix, torch::kInt64).unsqueeze(0);
  torch::Tensor logp = torch::log_softmax(
      m.forward(ids, torch::Tensor(), nullptr, 1).select(1, 0).to(torch::kFloat64), -1)[0];
  const int64_t V = logp.size(0);
  std::set<int64_t> banned;
  const auto n = static_cast<size_t>(o.no_repeat_ngram_size);
  if (n > 0 && gen.size() + 1 >= n)
    for (size_t i = 0; i + n <= gen.size(); ++i)
      if (std::equal(gen.begin() + i, gen.begin() + i + n - 1, gen.end() - (n - 1)))
        banned.insert(gen[i + n - 1]);
  for (int64_t t = 0; t < V; ++t) {
    bool stop = std::find(o.stop_ids.begin(), o.stop_ids.end(), t) != o.stop_ids.end();
    if (banned.count(t) || (stop && static_cast<int64_t>(gen.size()) < o.min_new_tokens)) continue;
    double s = sum + logp[t].item<double>();
    std::vector<int64_t> g = gen, p = prefix;
    g.push_back(t);
    p.push_back(t);
    if (stop || static_cast<int64_t>(g.size()) == o.max_new_tokens) {
      double sc = s / std::pow(static_cast<double>(g.size()), o.length_penalty);
      if (sc > best.score) best = {g, sc};
    } else {
      exhaustive(m, p, g, s, o, best);
    }
  }
}

}  // namespace

TEST_CASE("beam search with enough beams finds the exhaustive optimum", "[generate][beam]") {
  test::TinySize s;
  s.vocab = 6;
  s.positions = 32;
  CausalLM m = make_causal_lm(test::tiny_config("gpt2", s), 5);
  {  // sharpen the random model so that scores differ clearly
    torch::NoGradGuard ng;
    for (auto& p : m->parameters()) p.mul_(2.0);
  }
  const std::vector<std::vector<int64_t>> prompts = {{1, 2}, {3}, {4, 5, 1}};
  struct Case {
    double lp;
    int64_t no_repeat, min_new;
    bool early;
  };
  int greedy_misses = 0;  // the cases must be ones a narrow beam gets wrong
  for (Case c : {Case{0.0, 0, 0, false}, Case{0.8, 0, 0, false}, Case{1.5, 2, 0, false},
                 Case{-0.5, 0, 1, false}, Case{0.8, 2, 1, false}}) {
    INFO("lp " << c.lp << " no_repeat " << c.no_repeat << " min_new " << c.min_new);
    BeamOptions o;
    o.num_beams = 220;  // >= 6^3 prefixes before the last step
    o.length_penalty = c.lp;
    o.no_repeat_ngram_size = c.no_repeat;
    o.min_new_tokens = c.min_new;
    o.early_stopping = c.early;
    o.max_new_tokens = 4;
    o.stop_ids = {0};
    auto got = beam_search(*m, prompts, o);
    BeamOptions narrow = o;
    narrow.num_beams = 1;
    auto greedy = beam_search(*m, prompts, narrow);
    for (size_t b = 0; b < prompts.size(); ++b) {
      Best best;
      exhaustive(*m, prompts[b], {}, 0.0, o, best);
      CHECK(got[b].tokens == best.tokens);
      greedy_misses += greedy[b].tokens != best.tokens;
      CHECK(got[b].score == Approx(best.score).epsilon(1e-5));  // float32 forwards
      CHECK(got[b].finish_reason == (best.tokens.back() == 0 ? "stop_id" : "length"));
    }
  }
  CHECK(greedy_misses >= 3);
}

TEST_CASE("beam search: one beam is greedy; batched, cached and alone agree; n-grams never repeat",
          "[generate][beam]") {
  for (std::string type : {"gpt2", "llama"}) {
    INFO(type);
    CausalLM m = make_causal_lm(tiny_gen_config(type), 13);
    GenerationOptions g;
    g.max_new_tokens = 12;
    auto greedy = generate::generate(*m, kPrompts, g);
    BeamOptions o;
    o.num_beams = 1;
    o.length_penalty = 0.0;
    o.max_new_tokens = 12;
    auto one = beam_search(*m, kPrompts, o);
    for (size_t b = 0; b < kPrompts.size(); ++b) CHECK(one[b].tokens == greedy[b].tokens);

    o.num_beams = 5;
    o.length_penalty = 0.8;
    o.no_repeat_ngram_size = 2;
    o.stop_ids = {3, 17};
    o.max_new_tokens = 20;
    auto batched = beam_search(*m, kPrompts, o);
    BeamOptions slow = o;
    slow.use_cache = false;
    auto uncached = beam_search(*m, kPrompts, slow);
    for (size_t b = 0; b < kPrompts.size(); ++b) {
      auto alone = beam_search(*m, {kPrompts[b]}, o);
      CHECK(batched[b].tokens == alone[0].tokens);
      CHECK(batched[b].tokens == uncached[b].tokens);
      CHECK(batched[b].score == Approx(alone[0].score).epsilon(1e-6));
      // no bigram of the new tokens occurs twice
      std::set<std::pair<int64_t, int64_t>> seen;
      const auto& t = batched[b].tokens;
      for (size_t i = 0; i + 1 < t.size(); ++i) CHECK(seen.insert({t[i], t[i + 1]}).second);
    }
    // early stopping returns a finished hypothesis no better than the exact rule's
    BeamOptions early = o;
    early.early_stopping = true;
    auto e = beam_search(*m, kPrompts, early);
    for (size_t b = 0; b < kPrompts.size(); ++b) CHECK(e[b].score <= batched[b].score + 1e-9);
  }
  CausalLM m = make_causal_lm(tiny_gen_config("gpt2"), 13);
  BeamOptions bad;
  bad.num_beams = 0;
  CHECK_THROWS_AS(beam_search(*m, kPrompts, bad), ConfigError);
  bad.num_beams = 2;
  bad.stop_ids = {999};
  CHECK_THROWS_AS(beam_search(*m, kPrompts, bad), ConfigError);
}
