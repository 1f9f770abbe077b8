// LM evaluation on tiny random models: loss / accuracy / perplexity against a direct
// computation (each sample alone, unpadded, log-softmax in double), padding invariance,
// max_samples, train/eval mode restored, per-sample JSONL; classification picks the label
// with the lowest summed NLL, checked against per-candidate losses computed independently.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "core/eval/lm_eval.hpp"
#include "core/tokenizer/load.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "model_test_util.hpp"
#include "test_util.hpp"

using namespace dpft;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

// Random items of varying length with a random scored pattern (position 0 never matters).
lm::LmDataset random_dataset(int64_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  lm::LmDataset ds;
  for (int64_t i = 0; i < n; ++i) {
    lm::TokenizedExample t;
    t.index = 100 + i;
    size_t len = 2 + rng() % 11;
    for (size_t k = 0; k < len; ++k) {
      t.ids.push_back(static_cast<int32_t>(rng() % vocab));
      t.scored.push_back(k == 1 || rng() % 4 != 0 ? 1 : 0);  // at least one target (position 1)
    }
    ds.items.push_back(std::move(t));
  }
  return ds;
}

struct Direct {
  double loss = 0;
  int64_t tokens = 0, correct = 0;
  double nll_sum = 0;
};

// One sample alone (no padding, no mask): log-softmax in double, scored targets only.
Direct direct(model::CausalLM& m, const lm::TokenizedExample& t) {
  torch::NoGradGuard ng;
  std::vector<int64_t> v(t.ids.begin(), t.ids.end());
  torch::Tensor logits =
      m->forward(torch::tensor(v, torch::kInt64).unsqueeze(0), torch::Tensor())[0];  // (T, V)
  torch::Tensor logp = torch::log_softmax(logits.to(torch::kFloat64), -1);
  Direct d;
  for (size_t p = 0; p + 1 < t.ids.size(); ++p) {
    if (!t.scored[p + 1]) continue;
    d.nll_sum += -logp[p][t.ids[p + 1]].item<double>();
    d.tokens += 1;
    d.correct += logits[p].argmax().item<int64_t>() == t.ids[p + 1];
  }
  d.loss = d.tokens ? d.nll_sum / d.tokens : 0;
  return d;
}

}  // namespace

TEST_CASE("evaluate_lm: loss, accuracy, perplexity as defined, against a direct computation",
          "[eval]") {
  model::CausalLM m = model::make_causal_lm(test::tiny_config("gpt2"), 3);
  lm::LmDataset ds = random_dataset(9, 61, 5);
  m->train();
  eval::LmEvalResult r = eval::evaluate_lm(m, ds, 4, 0, 0);
  CHECK(m->is_training());  // mode restored
  double loss_sum = 0, nll = 0;
  int64_t tokens = 0, correct = 0;
  REQUIRE(r.per_sample.size() == 9);
  for (size_t i = 0; i < 9; ++i) {
    Direct d = direct(m, ds.items[i]);
    INFO("sample " << i);
    CHECK(r.per_sample[i].index == ds.items[i].index);
    CHECK(r.per_sample[i].loss == Approx(d.loss).epsilon(1e-5));
    CHECK(r.per_sample[i].tokens == d.tokens);
    CHECK(r.per_sample[i].correct == d.correct);
    loss_sum += d.loss;
    nll += d.nll_sum;
    tokens += d.tokens;
    correct += d.correct;
  }
  CHECK(r.samples == 9);
  CHECK(r.tokens == tokens);
  CHECK(r.loss == Approx(loss_sum / 9).epsilon(1e-5));
  CHECK(r.accuracy == Approx(static_cast<double>(correct) / tokens));
  CHECK(r.perplexity == Approx(std::exp(nll / tokens)).epsilon(1e-5));
  // a random model over 61 tokens: loss near log(61)
  CHECK(r.loss == Approx(std::log(61.0)).epsilon(0.1));
  nlohmann::json j = r.to_json();
  CHECK(j.at("samples") == 9);
  CHECK(j.at("tokens") == tokens);
  CHECK_FALSE(j.contains("per_sample"));
  m->eval();
  eval::evaluate_lm(m, ds, 4, 0, 0);
  CHECK_FALSE(m->is_training());
  CHECK_THROWS_AS(eval::evaluate_lm(m, ds, 0, 0, 0), ConfigError);
}

TEST_CASE("evaluate_lm: a sample's loss is the same alone and batched with longer rows", "[eval]") {
  for (std::string type : {"gpt2", "llama"}) {
    INFO(type);
    model::CausalLM m = model::make_causal_lm(test::tiny_config(type), 4);
    lm::LmDataset ds;
    ds.items.push_back({0, {3, 9, 14}, {1, 1, 1}, ""});
    ds.items.push_back(
        {1, {5, 6, 7, 8, 9, 10, 11, 12, 13, 14}, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, ""});
    ds.items.push_back({2, {20, 21, 22, 23, 24, 25, 26}, {0, 0, 0, 1, 1, 1, 1}, ""});
    eval::LmEvalResult batched = eval::evaluate_lm(m, ds, 3, 0, 60);
    for (int64_t k = 0; k < 3; ++k) {
      lm::LmDataset one;
      one.items.push_back(ds.items[k]);
      eval::LmEvalResult alone = eval::evaluate_lm(m, one, 1, 0, 60);
      CHECK(batched.per_sample[k].loss == Approx(alone.per_sample[0].loss).epsilon(1e-5));
      CHECK(batched.per_sample[k].correct == alone.per_sample[0].correct);
    }
    // the pad id is irrelevant
    eval::LmEvalResult other_pad = eval::evaluate_lm(m, ds, 3, 0, 1);
    CHECK(other_pad.loss == Approx(batched.loss).epsilon(1e-6));
  }
}

TEST_CASE("evaluate_lm: max_samples takes the first items; per-sample JSONL lines", "[eval]") {
  model::CausalLM m = model::make_causal_lm(test::tiny_config("gpt2"), 6);
  lm::LmDataset ds = random_dataset(7, 61, 9);
  eval::LmEvalResult all = eval::evaluate_lm(m, ds, 2, 0, 0);
  eval::LmEvalResult first = eval::evaluate_lm(m, ds, 2, 3, 0);
  REQUIRE(first.samples == 3);
  REQUIRE(first.per_sample.size() == 3);
  double sum = 0;
  for (int k = 0; k < 3; ++k) {
    CHECK(first.per_sample[k].index == 100 + k);
    CHECK(first.per_sample[k].loss == Approx(all.per_sample[k].loss).epsilon(1e-6));
    sum += all.per_sample[k].loss;
  }
  CHECK(first.loss == Approx(sum / 3).epsilon(1e-6));
  CHECK(eval::evaluate_lm(m, ds, 2, 100, 0).samples == 7);

  test::TempDir d;
  fs::path f = d.path / "per_sample.jsonl";
  eval::append_per_sample(f, "base", first);
  eval::append_per_sample(f, "final", all);
  std::vector<nlohmann::json> lines = read_jsonl(f);
  REQUIRE(lines.size() == 10);
  CHECK(lines[0].at("model") == "base");
  CHECK(lines[0].at("index") == 100);
  CHECK(lines[0].at("loss").get<double>() == Approx(first.per_sample[0].loss));
  CHECK(lines[0].at("tokens") == first.per_sample[0].tokens);
  CHECK(lines[0].at("accuracy").get<double>() ==
        Approx(static_cast<double>(first.per_sample[0].correct) / first.per_sample[0].tokens));
  CHECK(lines[3].at("model") == "final");
  CHECK(lines[9].at("index") == 106);
  CHECK(lines[9].size() == 5);
}

TEST_CASE("evaluate_classification: argmin of per-candidate summed NLL; accuracy", "[eval]") {
  fs::path root = test::shared_data_dir();
  if (root.empty() || !fs::exists(root / "gpt2_tokenizer")) {
    WARN("skipped: ../shared/data/gpt2_tokenizer is absent");
    return;
  }
  tok::Tokenizer tk = tok::load_tokenizer(root / "gpt2_tokenizer");
  test::TinySize size;
  size.vocab = 50257;
  model::CausalLM m = model::make_causal_lm(test::tiny_config("gpt2", size), 7);
  std::vector<std::string> labels = {"positive", "negative", "neutral"};
  std::vector<lm::Example> ex = {
      {0, "a great film", "positive", {}},
      {1, "dull and slow", "negative", {}},
      {2, "it was a movie with some scenes", "neutral", {}},
      {3, "", "positive", {}},
      {4, "wonderful acting throughout the whole story", "negative", {}}};
  eval::ClassEvalResult r = eval::evaluate_classification(m, ex, tk, labels, 4, 32, 0, 50256);
  REQUIRE(r.samples == 5);
  REQUIRE(r.predicted.size() == 5);
  int64_t correct = 0;
  for (size_t i = 0; i < ex.size(); ++i) {
    std::vector<double> nll;
    for (const std::string& l : labels) {
      // the candidate: text, "\n", label; only the label's tokens are targets
      std::vector<int32_t> head = tk.encode(ex[i].text), nl = tk.encode("\n"), lab = tk.encode(l);
      head.insert(head.end(), nl.begin(), nl.end());
      lm::TokenizedExample t{0, head, std::vector<uint8_t>(head.size(), 0), ""};
      t.ids.insert(t.ids.end(), lab.begin(), lab.end());
      t.scored.insert(t.scored.end(), lab.size(), 1);
      nll.push_back(direct(m, t).nll_sum);
    }
    int64_t best = std::min_element(nll.begin(), nll.end()) - nll.begin();
    INFO("example " << i);
    for (size_t c = 0; c < labels.size(); ++c)
      CHECK(r.scores[i][c] == Approx(nll[c]).epsilon(1e-5));
    CHECK(r.predicted[i] == best);
    correct += labels[best] == ex[i].label;
  }
  CHECK(r.correct == correct);
  CHECK(r.accuracy == Approx(correct / 5.0));
  CHECK(r.to_json().at("samples") == 5);
  CHECK(eval::label_set(ex) == std::vector<std::string>{"negative", "neutral", "positive"});
  // truncation keeps the label whole
  size_t first = 0;
  std::vector<int32_t> cut = eval::candidate_ids(tk, std::string(400, 'x'), "negative", 12, first);
  CHECK(cut.size() == 12);
  std::vector<int32_t> lab = tk.encode("negative");
  CHECK(std::vector<int32_t>(cut.begin() + first, cut.end()) == lab);
  CHECK(eval::evaluate_classification(m, ex, tk, labels, 4, 32, 2, 50256).samples == 2);
  std::vector<lm::Example> bad = {{0, "x", "mixed", {}}};
  CHECK_THROWS_WITH(eval::evaluate_classification(m, bad, tk, labels, 4, 32, 0, 50256),
                    Contains("label 'mixed', which is not in the label set"));
  CHECK_THROWS_AS(eval::candidate_ids(tk, "x", "negative", 1, first), InputError);
}

TEST_CASE("classification metrics: accuracy, macro-F1, positive F1, MCC by hand", "[eval]") {
  // 3 classes; confusion rows (true) [2 1 0], [1 3 0], [0 0 1]
  eval::ClassificationMetrics m =
      eval::classification_metrics({0, 0, 0, 1, 1, 1, 1, 2}, {0, 0, 1, 1, 1, 0, 1, 2}, 3);
  CHECK(m.confusion == std::vector<std::vector<int64_t>>{{2, 1, 0}, {1, 3, 0}, {0, 0, 1}});
  CHECK(m.correct == 6);
  CHECK(m.accuracy == Approx(0.75));
  CHECK(m.macro_f1 == Approx((4.0 / 6 + 6.0 / 8 + 1.0) / 3));  // F1_c = 2 TP / (2 TP + FP + FN)
  CHECK(m.positive_f1 == Approx(0.75));                        // class 1
  CHECK(m.mcc == Approx(22.0 / 38));  // (c s - sum p t) / sqrt((s^2 - sum p^2)(s^2 - sum t^2))
  // binary: TP 2, FN 1, TN 1, FP 1 -> MCC (TP TN - FP FN) / sqrt(3 * 3 * 2 * 2) = 1/6
  eval::ClassificationMetrics b = eval::classification_metrics({1, 1, 0, 0, 1}, {1, 0, 0, 1, 1}, 2);
  CHECK(b.mcc == Approx(1.0 / 6));
  CHECK(b.positive_f1 == Approx(4.0 / 6));
  // a constant predictor: MCC undefined -> 0; a class never seen nor predicted has F1 0
  eval::ClassificationMetrics k = eval::classification_metrics({0, 1, 1}, {1, 1, 1}, 3);
  CHECK(k.mcc == 0.0);
  CHECK(k.macro_f1 == Approx((0.0 + 2 * 2.0 / (2 * 2 + 1) + 0.0) / 3));
  CHECK(k.to_json()["confusion"] == nlohmann::json({{0, 1, 0}, {0, 2, 0}, {0, 0, 0}}));
  CHECK_THROWS_AS(eval::classification_metrics({0, 3}, {0, 1}, 3), InputError);
  CHECK_THROWS_AS(eval::classification_metrics({0}, {0, 1}, 3), InputError);
}
