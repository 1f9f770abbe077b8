// Artefacts a run builds on (core/run/provenance.hpp, docs/privacy.md "Provenance"): a model
// trained by an earlier run, or a set beside its provenance.json, read by model.path or a data
// option. Made by a DP run: its releases are inherited (composed into the plan and the ledger,
// the run's own noise calibrated with them, once across a resume), whichever data it came
// from; by a non-private run from this run's private data: refused for a DP run; from other
// data: nothing.
#include <catch2/catch.hpp>

#include "core/run/provenance.hpp"
#include "core/util/atomic_file.hpp"
#include "run_fixture.hpp"

using namespace dpft;
using test::Fixture;
using test::make_fixture;
using test::run_metrics;

namespace {

// dp-sgd on the whole model (its output: model/, with provenance.json).
std::vector<std::string> full_args(const std::string& eps, std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {"--set", "method.name=dp-sgd",    "--set", "model.peft.kind=full",
                                "--set", "privacy.epsilon=" + eps};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

}  // namespace

TEST_CASE(
    "a model or a data set a run builds on: its releases inherited, refused, or nothing, "
    "said in metrics.json",
    "[privacy][provenance]") {
  Fixture f;
  make_fixture(f);
  const std::string out = (f.tmp.path / "runs").string();
  std::string a_dir, np_dir;
  const auto a = run_metrics(f, out, full_args("2"), &a_dir);  // 6 steps at epsilon 2
  REQUIRE(a["status"] == "ok");
  const std::string a_model = (fs::path(a_dir) / "model").string();
  REQUIRE(fs::exists(fs::path(a_model) / "provenance.json"));
  const double eps_a = a["privacy"]["epsilon"].get<double>();

  // Fine-tuned again on the same private data: A's 6 steps are this run's too; its own sigma
  // is calibrated so that both together meet epsilon 4 (more noise than alone).
  auto alone = run_metrics(f, out, full_args("4"));
  auto b = run_metrics(f, out, full_args("4", {"--set", "model.path=" + a_model}));
  CHECK(test::release_count(b, "source: train") == 6);
  CHECK(test::release_count(b, "train") == 6);
  CHECK(b["privacy"]["epsilon"].get<double>() <= 4.0);
  CHECK(b["privacy"]["epsilon"].get<double>() > 3.9);
  CHECK(b["privacy"]["epsilon"].get<double>() > eps_a);
  CHECK(b["privacy"]["noise_multiplier"].get<double>() >
        alone["privacy"]["noise_multiplier"].get<double>());
  REQUIRE(b["privacy"]["inherited"].size() == 1);
  const auto& d = b["privacy"]["inherited"][0];
  CHECK(d["option"] == "model.path");
  CHECK(d["run_id"] == a["run"]["run_id"]);
  CHECK_THAT(d["decision"].get<std::string>(), Catch::Contains("made by a DP run"));
  // Stopped and resumed: inherited once (the checkpoint's ledger holds them), the same numbers.
  std::string part;
  auto stop = full_args("4", {"--set", "model.path=" + a_model, "--set",
                              "output.checkpoint_every=1", "--stop-after", "2"});
  REQUIRE(run_metrics(f, out, stop, &part)["status"] == "stopped");
  REQUIRE(test::cli({"run", "--resume", part}) == 0);
  const auto resumed = nlohmann::json::parse(read_file(fs::path(part) / "metrics.json"));
  CHECK(test::release_count(resumed, "source: train") == 6);
  CHECK(resumed["privacy"]["epsilon"] == b["privacy"]["epsilon"]);
  CHECK(resumed["eval"] == b["eval"]);
  // The new model's provenance embodies both runs' releases.
  std::string b_dir;
  run_metrics(f, out, full_args("4", {"--set", "model.path=" + a_model}), &b_dir);
  const auto bp = nlohmann::json::parse(read_file(fs::path(b_dir) / "model" / "provenance.json"));
  CHECK(bp["releases"].size() == 2);

  // Another private data set: A's releases composed all the same (one record changed would make
  // "other" data of the same people), and nothing in metrics.json tells the two cases apart.
  auto other = run_metrics(
      f, out,
      full_args("4", {"--set", "model.path=" + a_model, "--set", "data.train.path=" + f.eval}));
  CHECK(test::release_count(other, "source: train") == 6);
  CHECK(other["privacy"]["inherited"][0]["decision"] == d["decision"]);

  // A set beside a provenance.json (a synthetic set's synthetic/) read as data.eval: inherited.
  const fs::path syn = f.tmp.path / "syn";
  fs::create_directories(syn);
  fs::copy_file(f.eval, syn / "eval.csv");
  fs::copy_file(fs::path(a_model) / "provenance.json", syn / "provenance.json");
  auto e = run_metrics(f, out,
                       full_args("4", {"--set", "data.eval.path=" + (syn / "eval.csv").string()}));
  CHECK(test::release_count(e, "source: train") == 6);
  CHECK(e["privacy"]["inherited"][0]["option"] == "data.eval.path");
  // The same source run through two inputs: counted once.
  auto twice = run_metrics(f, out,
                           full_args("4", {"--set", "model.path=" + a_model, "--set",
                                           "data.eval.path=" + (syn / "eval.csv").string()}));
  CHECK(test::release_count(twice, "source: train") == 6);
  CHECK(twice["privacy"]["inherited"].size() == 2);

  // A model trained without noise on the same data: a DP run is refused (exit 2) before it
  // writes anything; a non-private run may build on it.
  run_metrics(f, out, full_args("inf"), &np_dir);
  const std::string np_model = (fs::path(np_dir) / "model").string();
  std::string printed;
  const fs::path runs = fs::path(out) / "engine-test";
  const auto before = std::distance(fs::directory_iterator(runs), fs::directory_iterator());
  CHECK(test::cli(test::run_args(f, out, full_args("4", {"--set", "model.path=" + np_model})),
                  &printed) == 2);
  CHECK(std::distance(fs::directory_iterator(runs), fs::directory_iterator()) == before);
  auto np = run_metrics(f, out, full_args("inf", {"--set", "model.path=" + np_model}));
  CHECK(np["status"] == "ok");
  CHECK(test::release_count(np, "source: train") == 6);

  // The budget cannot hold what is inherited: refused, naming the inherited releases.
  CHECK(test::cli(test::run_args(f, out, full_args("0.5", {"--set", "model.path=" + a_model})),
                  &printed) == 2);
}

TEST_CASE("what a DP artefact passes on does not depend on the private data; refusals may",
          "[privacy][provenance]") {
  test::TempDir tmp;
  test::SetEnv key("DPFT_DATA_KEY", (tmp.path / "data.key").string());
  // This run's file, and its neighbour: the same file with one record changed.
  const nlohmann::json mine = {{{"path", "/d/train.csv"}, {"sha256", std::string(64, 'a')}}};
  const nlohmann::json neighbour = {{{"path", "/d/train.csv"}, {"sha256", std::string(64, 'b')}}};
  auto made_from_mine = [&](double sigma) {
    return parse_provenance({{"schema", kProvenanceSchema},
                             {"run_id", "r1"},
                             {"data", provenance_data(mine, 100)},
                             {"accountant", "prv"},
                             {"delta", 1e-5},
                             {"releases",
                              {{{"label", "train"},
                                {"noise_multiplier", sigma},
                                {"sampling_rate", 0.1},
                                {"count", 10}}}}},
                            "test");
  };
  const InputArtefact dp{"model.path", "/m", made_from_mine(1.0)};
  const Inheritance same = inherit({dp}, mine, true), other = inherit({dp}, neighbour, true);
  CHECK(same.decisions == other.decisions);
  REQUIRE(other.releases.size() == 1);
  CHECK(other.releases[0].count == 10);
  CHECK(other.releases[0].noise_multiplier == same.releases[0].noise_multiplier);
  // Declared not this run's data: nothing composed, unless it names this run's files (refused).
  InputArtefact declared = dp;
  declared.declared_public = true;
  CHECK(inherit({declared}, neighbour, true).releases.empty());
  CHECK_THROWS_WITH(inherit({declared}, mine, true), Catch::Contains("drop the declaration"));
  // Non-private: refused for a DP run on the same files, nothing on other files.
  const InputArtefact np{"model.path", "/m", made_from_mine(0.0)};
  CHECK_THROWS_WITH(inherit({np}, mine, true), Catch::Contains("without noise"));
  CHECK(inherit({np}, neighbour, true).releases.empty());
  CHECK(inherit({np}, mine, false).releases.size() == 1);
}
