// `dpft audit` beyond decoder language models (issue 69, part 4): mislabelled canaries for a
// classifier, canary documents for a seq2seq model, canary users at privacy.unit user. Each:
// power without noise (the lower bound clearly above 0) and, with DP, a bound never above the
// reported epsilon (one seed here; three in the [slow] case).
#include <catch2/catch.hpp>

#include <fstream>
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
  const std::string model = (t.tmp.path / "bart").string();
  REQUIRE(test::cli({"model", "init", "--arch", "bart", "--preset", "tiny", "--tokenizer",
                     roberta.string(), "--out", model, "--seed", "2"}) == 0);
  // 60 private pairs: a source of 5 random 4-letter words, its target the words reversed.
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
  test::make_fixture(f);
  const std::string users = test::write_user_rows(f, "users.jsonl", 4);
  TaskAudit t;
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
  std::vector<std::string> dp_args = args;
  dp_args.insert(dp_args.end(), {"--set", "privacy.epsilon=2"});
  const nlohmann::json dp = t.audit("dp", dp_args);
  CHECK(dp["eps_lower_bound"].get<double>() <= dp["reported_epsilon"].get<double>());
  // A canary user has at most privacy.max_examples_per_user (16) rows.
  std::vector<std::string> bad = {
      "audit",         t.spec, "--canaries", "40",
      "--canary-rows", "17",   "--out",      (t.tmp.path / "bad").string()};
  CHECK(test::cli(bad) == 2);
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

TEST_CASE(
    "dpft audit of pe: canary texts from --canary-file join the private file, scored by "
    "the nearest released text",
    "[train-engine][audit-run]") {
  const fs::path root(DPFT_SOURCE_DIR);
  TaskAudit t;
  // 10 private abstracts; 40 canaries from the shipped eval split (public, not in the file).
  const data::Table train = data::read_table(root / "experiments/data/pubmed_sample/train.csv");
  const data::Table held = data::read_table(root / "experiments/data/pubmed_sample/eval.csv");
  std::string priv, pub;
  for (int i = 0; i < 10; ++i) priv += nlohmann::json({{"text", train.rows[i][0]}}).dump() + "\n";
  for (const auto& r : held.rows)
    pub += nlohmann::json({{"text", r[0].substr(0, 200)}}).dump() + "\n";
  write_file_atomic(t.tmp.path / "private.jsonl", priv);
  write_file_atomic(t.tmp.path / "canaries.jsonl", pub);
  t.spec = (t.tmp.path / "spec.yaml").string();
  write_file_atomic(
      t.spec,
      fmt::format("name: pe-audit\nseed: 4\n"
                  "model: {{path: {}, peft: {{kind: none}}}}\n"
                  "data: {{train: {{path: {}, text_column: text}}, max_length: 64}}\n"
                  "privacy: {{epsilon: 2, delta: 1.0e-5, noise_seed: 4}}\n"
                  "method:\n  name: pe\n  embedder: {}\n  prompts: {}\n  iterations: 2\n"
                  "  num_synthetic: 20\n"
                  "  generation: {{max_new_tokens: 8, min_new_tokens: 2, batch: 8}}\n",
                  (root / "models/tiny-gpt2").string(), (t.tmp.path / "private.jsonl").string(),
                  (root / "models/tiny-roberta").string(),
                  (root / "experiments/prompts/pubmed.yaml").string()));
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
