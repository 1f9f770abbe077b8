// A training-run fixture for CLI-level tests: a tiny random GPT-2 with the real GPT-2
// tokenizer (the embedded model's, models/tiny-gpt2), the PubMed rows shipped in
// experiments/data/pubmed_sample, an empty spec, and `dpft run` arguments that train it for 6
// steps in seconds. Everything it needs is in the repository: the tests that use it always run.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "core/util/atomic_file.hpp"
#include "data/table.hpp"
#include "test_util.hpp"

namespace dpft::test {

struct Fixture {
  test::TempDir tmp;
  std::string model, train, eval, spec;
};

// A tiny random GPT-2 with the real GPT-2 tokenizer and PubMed rows, all shipped in the
// repository.
inline void make_fixture(Fixture& f) {
  const fs::path src(DPFT_SOURCE_DIR);
  const fs::path tok = src / "models" / "tiny-gpt2", pub = src / "experiments" / "data" / "pubmed_sample";
  REQUIRE(fs::exists(tok / "vocab.json"));
  REQUIRE(fs::exists(pub / "train.csv"));
  f.model = (f.tmp.path / "model").string();
  REQUIRE(test::cli({"model", "init", "--arch", "gpt2", "--preset", "tiny", "--tokenizer",
                     tok.string(), "--out", f.model}) == 0);
  f.train = (pub / "train.csv").string();
  f.eval = (pub / "eval.csv").string();
  f.spec = (f.tmp.path / "spec.yaml").string();
  write_file_atomic(f.spec, "name: engine-test\n");
}

// The runs are compared with each other (resumed against uninterrupted, diagnostics off
// against on), and the same noise needs a noise seed: privacy.noise_seed is set. Keyed noise,
// the default, is tested by tests/noise_replay_test.sh and tests/test_keyed_noise.cpp.
inline std::vector<std::string> run_args(const Fixture& f, const std::string& out,
                                         std::vector<std::string> extra) {
  std::vector<std::string> a = {"run",   f.spec,
                                "--out", out,
                                "--set", "model.path=" + f.model,
                                "--set", "model.peft.targets=[c_attn, c_fc]",
                                "--set", "data.train.path=" + f.train,
                                "--set", "data.train.num_samples=24",
                                "--set", "data.eval.path=" + f.eval,
                                "--set", "data.eval.num_samples=8",
                                "--set", "data.max_length=24",
                                "--set", "train.steps=6",
                                "--set", "train.batch_size=6",
                                "--set", "train.micro_batch_size=4",
                                "--set", "train.lr=0.05",
                                "--set", "seed=3",
                                "--set", "privacy.noise_seed=3"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

inline nlohmann::json run_metrics(const Fixture& f, const std::string& out,
                                  std::vector<std::string> extra, std::string* dir = nullptr) {
  std::string printed;
  int rc = test::cli(run_args(f, out, std::move(extra)), &printed);
  REQUIRE(rc == 0);
  std::string d = printed.substr(0, printed.find_last_not_of('\n') + 1);
  d = d.substr(d.find_last_of('\n') + 1);
  if (dir) *dir = d;
  return nlohmann::json::parse(read_file(fs::path(d) / "metrics.json"));
}

// How many releases labelled `label` a run's metrics.json ledger holds.
inline int64_t release_count(const nlohmann::json& m, const std::string& label) {
  int64_t n = 0;
  for (const auto& r : m["privacy"]["releases"])
    if (r["label"] == label) n += r["count"].get<int64_t>();
  return n;
}

// The fixture's training rows as JSONL with a user column `who`, rows_per_user rows per user
// (rows k r .. k r + r - 1 under user p<k>), written to <tmp>/<name>; returns its path. Train on
// every row: --set data.train.num_samples=0.
inline std::string write_user_rows(const Fixture& f, const std::string& name, int rows_per_user) {
  const data::Table t = data::read_table(f.train);
  std::string lines;
  for (size_t i = 0; i < t.rows.size(); ++i)
    lines += nlohmann::json{{"text", t.rows[i][0]},
                            {"who", fmt::format("p{}", i / static_cast<size_t>(rows_per_user))}}
                 .dump() +
             "\n";
  const std::string file = (f.tmp.path / name).string();
  write_file_atomic(file, lines);
  return file;
}

// The --set arguments of a user-level run on write_user_rows's file.
inline std::vector<std::string> user_level_args(const std::string& file) {
  return {"--set", "privacy.unit=user",       "--set", "data.train.user_column=who",
          "--set", "data.train.path=" + file, "--set", "data.train.num_samples=0"};
}

}  // namespace dpft::test
