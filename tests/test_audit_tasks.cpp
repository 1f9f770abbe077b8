// `dpft audit` beyond decoder language models (issue 69, part 4): mislabelled canaries for a
// classifier, canary documents for a seq2seq model, canary users at privacy.unit user, canary
// texts for pe / aug-pe. Each:
// power without noise (the lower bound clearly above 0) and, with DP, a bound never above the
// reported epsilon (three seeds in the [slow] cases).
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <numeric>
#include <random>
#include <set>

#include "core/util/atomic_file.hpp"
#include "core/util/strings.hpp"
#include "data/table.hpp"
#include "run_fixture.hpp"

using namespace dpft;

namespace {

struct TaskAudit {
  test::TempDir tmp;
  std::string spec;
  nlohmann::json audit(const std::string& name, std::vector<std::string> extra) {
    const std::string out = (tmp.path / name).string();
    std::vector<std::string> a = {"audit", spec, "--out", out};
    a.insert(a.end(), extra.begin(), extra.end());
    REQUIRE(test::cli(a) == 0);
    return nlohmann::json::parse(read_file(fs::path(out) / "audit.json"));
  }
};

// A tiny random RoBERTa classifier trained in full on 200 SST-2 rows.
bool classifier(TaskAudit& t, const fs::path& roberta, const fs::path& sst2) {
  const std::string model = (t.tmp.path / "model").string();
  if (test::cli({"model", "init", "--arch", "roberta", "--preset", "tiny", "--head",
                 "classification", "--labels", "negative,positive", "--tokenizer", roberta.string(),
                 "--out", model, "--seed", "5"}) != 0)
    return false;
  std::ifstream in(sst2 / "train.tsv");
  std::string rows, line;
  for (int i = 0; i <= 200 && std::getline(in, line); ++i) rows += line + "\n";
  write_file_atomic(t.tmp.path / "train.tsv", rows);
  t.spec = (t.tmp.path / "spec.yaml").string();
  write_file_atomic(
      t.spec, fmt::format("name: cls-audit\nseed: 0\n"
                          "model: {{path: {}, peft: {{kind: full, targets: [all]}}}}\n"
                          "data:\n  task: classification\n  labels: ['0', '1']\n"
                          "  train: {{path: {}, text_column: sentence, label_column: label}}\n"
                          "  max_length: 32\n"
                          "privacy: {{epsilon: .inf, delta: 1.0e-5, sampling_rate: 0.5, "
                          "noise_seed: 0}}\n"
                          "train: {{steps: 40, micro_batch_size: 16, lr: 0.005}}\n"
                          "method: {{name: dp-sgd}}\n",
                          model, (t.tmp.path / "train.tsv").string()));
  return true;
}

// A tiny BART on 60 private pairs: a source of 5 random 4-letter words, its target the words
// reversed; trained in full for 20 steps.
void seq2seq_pairs(TaskAudit& t, const fs::path& roberta) {
  const std::string model = (t.tmp.path / "bart").string();
  REQUIRE(test::cli({"model", "init", "--arch", "bart", "--preset", "tiny", "--tokenizer",
                     roberta.string(), "--out", model, "--seed", "2"}) == 0);
  std::string rows;
  std::mt19937_64 rng(1);
  for (int i = 0; i < 60; ++i) {
    std::vector<std::string> w;
    for (int k = 0; k < 5; ++k) {
      std::string x;
      for (int c = 0; c < 4; ++c) x += static_cast<char>('a' + rng() % 10);
      w.push_back(x);
    }
    const std::vector<std::string> rev(w.rbegin(), w.rend());
    rows += nlohmann::json({{"src", join(w, " ")}, {"text", join(rev, " ")}}).dump() + "\n";
  }
  write_file_atomic(t.tmp.path / "pairs.jsonl", rows);
  t.spec = (t.tmp.path / "spec.yaml").string();
  write_file_atomic(t.spec,
                    fmt::format("name: s2s-audit\nseed: 0\n"
                                "model: {{path: {}, peft: {{kind: full, targets: [all]}}}}\n"
                                "data:\n  task: seq2seq\n"
                                "  train: {{path: {}, text_column: text, prompt_column: src}}\n"
                                "  max_length: 24\n"
                                "privacy: {{epsilon: .inf, delta: 1.0e-5, sampling_rate: "
                                "0.5, noise_seed: 0}}\n"
                                "train: {{steps: 20, micro_batch_size: 16, lr: 0.003}}\n"
                                "method: {{name: dp-sgd}}\n",
                                model, (t.tmp.path / "pairs.jsonl").string()));
}

// 12 users of 4 PubMed rows at privacy.unit user, LoRA, 20 steps.
void canary_users(TaskAudit& t, test::Fixture& f) {
  test::make_fixture(f);
  const std::string users = test::write_user_rows(f, "users.jsonl", 4);
  t.spec = (t.tmp.path / "spec.yaml").string();
  write_file_atomic(t.spec,
                    fmt::format("name: user-audit\nseed: 0\n"
                                "model: {{path: {}, peft: {{kind: lora, r: 8, alpha: 16, targets: "
                                "[c_attn, c_fc]}}}}\n"
                                "data: {{train: {{path: {}, user_column: who, rows: [0, 48]}}, "
                                "max_length: 24}}\n"
                                "privacy: {{epsilon: .inf, delta: 1.0e-5, sampling_rate: 0.5, "
                                "noise_seed: 0, unit: user}}\n"
                                "train: {{steps: 20, micro_batch_size: 16, optimizer: adamw, lr: "
                                "0.02}}\n"
                                "method: {{name: dp-sgd}}\n",
                                f.model, users));
}

}  // namespace

TEST_CASE("dpft audit: mislabelled canaries find a classifier's leakage",
          "[train-engine][audit-run]") {
  SHARED_DATA_OR_SKIP(roberta, "roberta_tokenizer");
  SHARED_DATA_OR_SKIP(sst2, "glue_sst2");
  TaskAudit t;
  REQUIRE(classifier(t, roberta, sst2));
  const nlohmann::json j = t.audit("inf", {"--canaries", "100", "--canary-tokens", "6"});
  CHECK(j["task"] == "classification");
  // Every canary carries a label of the label set, both labels occur.
  std::set<std::string> labels;
  for (const auto& r : read_jsonl(t.tmp.path / "inf" / "canaries.jsonl")) {
    labels.insert(r.at("label").get<std::string>());
    CHECK(!r.at("text").get<std::string>().empty());
  }
  CHECK(labels == std::set<std::string>{"0", "1"});
  // Without noise the included canaries' labels were learnt: measured 0.84 on the 2-core dev VM
  // (35 of 40 guesses right at K = 20).
  CHECK(j["score_mean_included"].get<double>() > j["score_mean_excluded"].get<double>());
  CHECK(j["eps_lower_bound"].get<double>() > 0.3);  // with DP: the [slow] case below
}

TEST_CASE("dpft audit: canary documents find a seq2seq model's leakage",
          "[train-engine][audit-run]") {
  SHARED_DATA_OR_SKIP(roberta, "roberta_tokenizer");
  TaskAudit t;
  seq2seq_pairs(t, roberta);
  const nlohmann::json j = t.audit("inf", {"--canaries", "60", "--canary-tokens", "5"});
  CHECK(j["task"] == "seq2seq");
  for (const auto& r : read_jsonl(t.tmp.path / "inf" / "canaries.jsonl"))
    CHECK(r.contains("source"));  // each canary document has its own source
  WARN("seq2seq canary documents, no noise: lower bound " << j["eps_lower_bound"]);
  CHECK(j["score_mean_included"].get<double>() > j["score_mean_excluded"].get<double>());
  CHECK(j["eps_lower_bound"].get<double>() > 0.5);
  CHECK(test::cli({"audit", t.spec, "--canaries", "60", "--score", "gradient", "--out",
                   (t.tmp.path / "grad").string()}) == 2);
}

TEST_CASE("dpft audit: canary users at privacy.unit user", "[train-engine][audit-run]") {
  test::Fixture f;
  TaskAudit t;
  canary_users(t, f);
  const std::vector<std::string> args = {"--canaries",    "40", "--canary-tokens", "8",
                                         "--canary-rows", "2"};
  const nlohmann::json j = t.audit("inf", args);
  CHECK(j["unit"] == "user");
  CHECK(j["canary_rows"] == 2);
  // Two rows per canary user, both in the training file when the user is in.
  const std::vector<nlohmann::json> all = read_jsonl(t.tmp.path / "inf" / "canaries.jsonl"),
                                    in = read_jsonl(t.tmp.path / "inf" / "canaries_in.jsonl");
  REQUIRE(all.size() == 80);
  CHECK(all[0]["user"] == all[1]["user"]);
  CHECK(all[1]["user"] != all[2]["user"]);
  CHECK(static_cast<int64_t>(in.size()) == 2 * j["included"].get<int64_t>());
  WARN("canary users, no noise: lower bound " << j["eps_lower_bound"]);
  CHECK(j["eps_lower_bound"].get<double>() > 0.5);
  // With DP: the [slow] 3-seed case below.
  // A canary user has at most privacy.max_examples_per_user (16) rows.
  std::vector<std::string> bad = {
      "audit",         t.spec, "--canaries", "40",
      "--canary-rows", "17",   "--out",      (t.tmp.path / "bad").string()};
  CHECK(test::cli(bad) == 2);
}

TEST_CASE(
    "dpft audit of seq2seq canary documents and canary users over 3 seeds: the DP bound never "
    "exceeds the reported epsilon",
    "[slow][audit-run]") {
  SHARED_DATA_OR_SKIP(roberta, "roberta_tokenizer");
  TaskAudit s2s, users;
  test::Fixture f;
  seq2seq_pairs(s2s, roberta);
  canary_users(users, f);
  for (int seed = 0; seed < 3; ++seed) {
    CAPTURE(seed);
    const std::vector<std::string> seeds = {"--set", fmt::format("seed={}", seed), "--set",
                                            fmt::format("privacy.noise_seed={}", seed)};
    std::vector<std::string> a = {"--canaries", "60",    "--canary-tokens",
                                  "5",          "--set", "privacy.epsilon=4"};
    a.insert(a.end(), seeds.begin(), seeds.end());
    const nlohmann::json j = s2s.audit(fmt::format("s{}", seed), a);
    WARN("seq2seq, epsilon 4, seed " << seed << ": lower bound " << j["eps_lower_bound"]);
    CHECK(j["eps_lower_bound"].get<double>() <= j["reported_epsilon"].get<double>());
    std::vector<std::string> b = {"--canaries",    "40", "--canary-tokens", "8",
                                  "--canary-rows", "2",  "--set",           "privacy.epsilon=2"};
    b.insert(b.end(), seeds.begin(), seeds.end());
    const nlohmann::json u = users.audit(fmt::format("u{}", seed), b);
    WARN("canary users, epsilon 2, seed " << seed << ": lower bound " << u["eps_lower_bound"]);
    CHECK(u["eps_lower_bound"].get<double>() <= u["reported_epsilon"].get<double>());
  }
}

TEST_CASE(
    "dpft audit of a classifier over 3 seeds: the DP bound never exceeds the "
    "reported epsilon",
    "[slow][audit-run]") {
  SHARED_DATA_OR_SKIP(roberta, "roberta_tokenizer");
  SHARED_DATA_OR_SKIP(sst2, "glue_sst2");
  TaskAudit t;
  REQUIRE(classifier(t, roberta, sst2));
  for (int seed = 0; seed < 3; ++seed) {
    CAPTURE(seed);
    const nlohmann::json j = t.audit(
        fmt::format("s{}", seed),
        {"--canaries", "100", "--canary-tokens", "6", "--set", "privacy.epsilon=4", "--set",
         fmt::format("seed={}", seed), "--set", fmt::format("privacy.noise_seed={}", seed)});
    WARN("classifier, epsilon 4, seed " << seed << ": lower bound " << j["eps_lower_bound"]);
    CHECK(j["eps_lower_bound"].get<double>() <= j["reported_epsilon"].get<double>());
  }
}

namespace {
// `method` (pe | aug-pe) on 10 private PubMed abstracts at `epsilon`, with `options` (a YAML
// flow map's entries), tiny-gpt2 writing 8-token texts, tiny-roberta embedding them.
void pe_spec(TaskAudit& t, const std::string& method, const std::string& epsilon,
             const std::string& options) {
  const fs::path root(DPFT_SOURCE_DIR);
  const data::Table train = data::read_table(root / "experiments/data/pubmed_sample/train.csv");
  std::string priv;
  for (int i = 0; i < 10; ++i) priv += nlohmann::json({{"text", train.rows[i][0]}}).dump() + "\n";
  write_file_atomic(t.tmp.path / "private.jsonl", priv);
  t.spec = (t.tmp.path / "spec.yaml").string();
  write_file_atomic(
      t.spec,
      fmt::format("name: pe-audit\nseed: 4\n"
                  "model: {{path: {}, peft: {{kind: none}}}}\n"
                  "data: {{train: {{path: {}, text_column: text}}, max_length: 64}}\n"
                  "privacy: {{epsilon: {}, delta: 1.0e-5, noise_seed: 4}}\n"
                  "method: {{name: {}, embedder: {}, prompts: {}, {},\n"
                  "  generation: {{max_new_tokens: 8, min_new_tokens: 2, batch: 16}}}}\n",
                  (root / "models/tiny-gpt2").string(), (t.tmp.path / "private.jsonl").string(),
                  epsilon, method, (root / "models/tiny-roberta").string(),
                  (root / "experiments/prompts/pubmed.yaml").string(), options));
}
}  // namespace

TEST_CASE(
    "dpft audit of pe: canary texts from --canary-file join the private file, scored by "
    "the nearest released text",
    "[train-engine][audit-run]") {
  const fs::path root(DPFT_SOURCE_DIR);
  TaskAudit t;
  // 10 private abstracts; 40 canaries from the shipped eval split (public, not in the file).
  const data::Table held = data::read_table(root / "experiments/data/pubmed_sample/eval.csv");
  std::string pub;
  for (const auto& r : held.rows)
    pub += nlohmann::json({{"text", r[0].substr(0, 200)}}).dump() + "\n";
  write_file_atomic(t.tmp.path / "canaries.jsonl", pub);
  pe_spec(t, "pe", "2", "iterations: 2, num_synthetic: 20");
  const nlohmann::json j = t.audit(
      "dp", {"--canaries", "40", "--canary-file", (t.tmp.path / "canaries.jsonl").string()});
  CHECK(j["score_formula"] == "cosine similarity of the nearest released synthetic text");
  // The run's private file: the 10 rows, then exactly the included canaries.
  const std::vector<nlohmann::json> used =
                                        read_jsonl(t.tmp.path / "dp" / "train_with_canaries.jsonl"),
                                    in = read_jsonl(t.tmp.path / "dp" / "canaries_in.jsonl"),
                                    all = read_jsonl(t.tmp.path / "dp" / "canaries.jsonl");
  REQUIRE(used.size() == 10 + in.size());
  CHECK(used[10]["text"] == in[0]["text"]);
  std::set<std::string> pool;
  for (const auto& r : held.rows) pool.insert(r[0].substr(0, 200));
  for (const auto& c : all) CHECK(pool.count(c["text"].get<std::string>()) == 1);
  for (const auto& s : read_jsonl(t.tmp.path / "dp" / "scores.jsonl")) {
    CHECK(s["score"].get<double>() <= 1.0 + 1e-6);
    CHECK(s["score"].get<double>() >= -1.0 - 1e-6);
  }
  CHECK(j["eps_lower_bound"].get<double>() <= j["reported_epsilon"].get<double>());
}

namespace {
// aug-pe on 10 private PubMed abstracts, one iteration, the selection released: an included
// candidate canary is a candidate's copy and votes for it.
void augpe(TaskAudit& t) {
  pe_spec(t, "aug-pe", ".inf", "iterations: 1, num_synthetic: 100");
}
// The audit of aug-pe at epsilon 2 with this seed (and noise seed): never above epsilon.
void augpe_dp(TaskAudit& t, const std::string& seed) {
  const nlohmann::json dp =
      t.audit("dp" + seed, {"--canaries", "100", "--set", "privacy.epsilon=2", "--set",
                            "seed=" + seed, "--set", "privacy.noise_seed=" + seed});
  WARN("aug-pe candidate canaries, epsilon 2, seed " << seed << ": lower bound "
                                                     << dp["eps_lower_bound"]);
  CHECK(dp["eps_lower_bound"].get<double>() <= dp["reported_epsilon"].get<double>());
}
}  // namespace

TEST_CASE(
    "dpft audit of aug-pe: canaries drawn from its initial population find the first "
    "selection's leak; with DP never above epsilon",
    "[train-engine][audit-run]") {
  TaskAudit t;
  augpe(t);
  const nlohmann::json inf = t.audit("inf", {"--canaries", "100"});
  // Every canary is a text of the run's initial population (pe_state.json keeps P_0: no
  // variation follows the last selection).
  const nlohmann::json state = nlohmann::json::parse(
      read_file(fs::path(inf["run_dir"].get<std::string>()) / "pe_state.json"));
  std::set<std::string> p0;
  for (const auto& x : state.at("population").at(0)) p0.insert(x.get<std::string>());
  REQUIRE(p0.size() >= 100);
  std::set<std::string> canaries;
  for (const auto& c : read_jsonl(t.tmp.path / "inf" / "canaries.jsonl")) {
    CHECK(p0.count(c["text"].get<std::string>()) == 1);
    canaries.insert(c["text"].get<std::string>());
  }
  CHECK(canaries.size() == 100);
  // Each score is the cosine of the nearest released text, recomputed from `dpft embed`.
  const fs::path run(inf["run_dir"].get<std::string>());
  auto embed = [&](const fs::path& in, const std::string& name) {
    const fs::path out = t.tmp.path / name;
    REQUIRE(
        test::cli({"embed", "--model", (fs::path(DPFT_SOURCE_DIR) / "models/tiny-roberta").string(),
                   "--input", in.string(), "--out", out.string()}) == 0);
    std::vector<std::vector<double>> rows;
    for (const auto& e : read_jsonl(out)) {
      std::vector<double> v = e.at("embedding").get<std::vector<double>>();
      double n = 0;
      for (double x : v) n += x * x;
      for (double& x : v) x /= std::sqrt(n);
      rows.push_back(v);
    }
    return rows;
  };
  const auto ce = embed(t.tmp.path / "inf" / "canaries.jsonl", "c.jsonl"),
             se = embed(run / "synthetic" / "synthetic.jsonl", "s.jsonl");
  const std::vector<nlohmann::json> scores = read_jsonl(t.tmp.path / "inf" / "scores.jsonl");
  REQUIRE(scores.size() == ce.size());
  for (size_t i = 0; i < ce.size(); i += 7) {
    double best = -2;
    for (const auto& s : se)
      best = std::max(best, std::inner_product(s.begin(), s.end(), ce[i].begin(), 0.0));
    CHECK(scores[i]["score"].get<double>() == Approx(best).margin(1e-4));
  }
  // Without noise: 1.18 measured on the 2-core dev VM (the included canaries' mean score 1.0,
  // the excluded ones' 0.88).
  WARN("aug-pe candidate canaries, no noise: lower bound " << inf["eps_lower_bound"]);
  CHECK(inf["score_mean_included"].get<double>() > inf["score_mean_excluded"].get<double>());
  CHECK(inf["eps_lower_bound"].get<double>() > 0.5);
  augpe_dp(t, "0");
  // More canaries than the population's distinct texts: refused, naming the fix.
  CHECK(test::cli(
            {"audit", t.spec, "--canaries", "450", "--out", (t.tmp.path / "many").string()}) == 2);
}

TEST_CASE("dpft audit of aug-pe over 3 seeds: the DP bound never exceeds the reported epsilon",
          "[slow][audit-run]") {
  TaskAudit t;
  augpe(t);
  for (const std::string seed : {"0", "1", "2"}) augpe_dp(t, seed);
}
