// Private hyper-parameter selection (core/privacy/selection.hpp, `dpft select`): the truncated
// negative binomial and the total epsilon against tests/reference/selection_reference.json (an
// independent computation of Papernot & Steinke 2022's Theorem 2 with scipy and numerical
// integration), the mechanism's draws, and a whole selection on the run fixture: its total is
// the theorem applied to the releases its trials' ledgers recorded, only the winner exports.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <cstdlib>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "core/privacy/selection.hpp"
#include "core/util/atomic_file.hpp"
#include "run_fixture.hpp"

using namespace dpft;
using privacy::TruncatedNegativeBinomial;

namespace {

nlohmann::json selection_reference() {
  return nlohmann::json::parse(
      read_file(fs::path(DPFT_SOURCE_DIR) / "tests" / "reference" / "selection_reference.json"));
}

privacy::SelectionPlan plan_of(const nlohmann::json& c) {
  privacy::SelectionPlan p;
  for (const auto& cand : c["candidates"]) {
    std::vector<privacy::GaussianBlock> blocks;
    for (const auto& r : cand)
      blocks.push_back({r["sigma"].get<double>(), r["q"].get<double>(), r["steps"].get<int64_t>()});
    p.candidates.push_back(blocks);
  }
  p.score_sigma = c["score_sigma"];
  p.trials = TruncatedNegativeBinomial::with_mean(c["eta"], c["mean"]);
  p.delta = c["delta"];
  return p;
}

}  // namespace

TEST_CASE("selection: D_{eta,gamma}'s pmf and mean equal scipy's", "[selection]") {
  for (const auto& r : selection_reference()["pmf"]) {
    const TruncatedNegativeBinomial d{r["eta"].get<double>(), r["gamma"].get<double>()};
    INFO("eta " << d.eta << " gamma " << d.gamma);
    for (int k = 1; k <= 10; ++k)
      CHECK(d.pmf(k) == Approx(r["pmf"][k - 1].get<double>()).epsilon(1e-9));
    CHECK(d.mean() == Approx(r["mean"].get<double>()).epsilon(1e-9));
  }
  // eta = 1 is the geometric distribution.
  const TruncatedNegativeBinomial g{1.0, 0.25};
  CHECK(g.pmf(3) == Approx(0.25 * 0.75 * 0.75).epsilon(1e-12));
  CHECK(g.mean() == Approx(4.0).epsilon(1e-12));
}

TEST_CASE("selection: K drawn by inversion has D's distribution (slow reference)", "[selection]") {
  for (const auto& [eta, gamma] :
       std::vector<std::pair<double, double>>{{1.0, 0.2}, {0.0, 0.3}, {0.5, 0.1}, {-0.5, 0.05}}) {
    const TruncatedNegativeBinomial d{eta, gamma};
    // The slow reference: the smallest k whose summed pmf reaches u.
    auto slow = [&](double u) {
      double cdf = 0;
      for (int64_t k = 1;; ++k) {
        cdf += d.pmf(k);
        if (cdf >= u) return k;
      }
    };
    std::map<int64_t, int64_t> counts;
    const int m = 20000;
    for (int i = 0; i < m; ++i) {
      const double u = (i + 0.5) / m;
      const int64_t k = d.quantile(u);
      if (u < 0.999) REQUIRE(k == slow(u));
      ++counts[k];
    }
    for (int64_t k = 1; k <= 5; ++k)
      CHECK(std::abs(static_cast<double>(counts[k]) / m - d.pmf(k)) <= 1.0 / m + 1e-12);
  }
}

TEST_CASE("selection: the total epsilon equals an independent computation of Theorem 2",
          "[selection]") {
  for (const auto& c : selection_reference()["cases"]) {
    INFO(c["name"].get<std::string>());
    const privacy::SelectionPlan p = plan_of(c);
    CHECK(p.trials.gamma == Approx(c["gamma"].get<double>()).epsilon(1e-9));
    const privacy::SelectionBudget b = privacy::selection_budget(p);
    CHECK(b.epsilon == Approx(c["epsilon"].get<double>()).epsilon(1e-6));
    CHECK(b.trial_epsilon == Approx(c["trial_epsilon"].get<double>()).epsilon(1e-6));
    CHECK(b.order == c["order"].get<double>());
    // The selection costs more than one trial, and more trials cost more.
    CHECK(b.epsilon > b.trial_epsilon);
    privacy::SelectionPlan more = p;
    more.trials = TruncatedNegativeBinomial::with_mean(p.trials.eta, 2 * p.trials.mean());
    CHECK(privacy::selection_budget(more).epsilon > b.epsilon);
  }
}

TEST_CASE("selection: a plan with a non-private trial or noiseless scores is refused",
          "[selection]") {
  privacy::SelectionPlan p = plan_of(selection_reference()["cases"][0]);
  privacy::SelectionPlan open = p;
  open.candidates[0][0].sigma = 0;
  CHECK_THROWS_WITH(privacy::selection_budget(open), Catch::Contains("non-private"));
  privacy::SelectionPlan loud = p;
  loud.score_sigma = 0;
  CHECK_THROWS_WITH(privacy::selection_budget(loud), Catch::Contains("--score-noise"));
  CHECK_THROWS_WITH(TruncatedNegativeBinomial::with_mean(1.0, 1.0),
                    Catch::Contains("--mean-trials"));
  CHECK_THROWS_WITH(TruncatedNegativeBinomial::with_mean(-1.5, 3.0), Catch::Contains("--eta"));
}

TEST_CASE("selection: its draws follow D, repeat under one key, and a key is secret",
          "[selection]") {
  test::TempDir tmp;
  privacy::SelectionPlan p = plan_of(selection_reference()["cases"][1]);  // two candidates
  // Seeded draws over many seeds: K's mean and the candidates' shares.
  double sum_k = 0, sum_k2 = 0;
  int64_t first = 0, trials = 0;
  const int n = 600;
  for (int s = 0; s < n; ++s) {
    privacy::PrivateSelection sel(p, tmp.path, false, s, false);
    const double k = static_cast<double>(sel.trials());
    sum_k += k;
    sum_k2 += k * k;
    for (int64_t t = 0; t < sel.trials(); ++t, ++trials) first += sel.candidate(t) == 0;
  }
  const double mean = sum_k / n, sd = std::sqrt(sum_k2 / n - mean * mean);
  CHECK(std::abs(mean - p.trials.mean()) < 4 * sd / std::sqrt(n));
  const double share = static_cast<double>(first) / static_cast<double>(trials);
  CHECK(std::abs(share - 0.5) < 4 * 0.5 / std::sqrt(static_cast<double>(trials)));

  // Keyed (the default): the key file is written; a resumed selection draws the same K,
  // candidates and score noise; a fresh one another key.
  const fs::path a = tmp.path / "a";
  fs::create_directories(a);
  privacy::PrivateSelection one(p, a, false, std::nullopt, false);
  REQUIRE(fs::exists(a / "selection.key"));
  std::vector<int64_t> cands;
  std::vector<double> scores;
  for (int64_t t = 0; t < one.trials(); ++t) {
    cands.push_back(one.candidate(t));
    scores.push_back(one.release_score(10.0));
  }
  privacy::PrivateSelection again(p, a, false, std::nullopt, true);
  REQUIRE(again.trials() == one.trials());
  for (int64_t t = 0; t < again.trials(); ++t) {
    CHECK(again.candidate(t) == cands[t]);
    CHECK(again.release_score(10.0) == scores[t]);
  }
  CHECK(scores[0] != 10.0);
  CHECK(again.noise_json()["mode"] == "keyed");
  CHECK_THROWS_WITH(privacy::PrivateSelection(p, a, true, std::nullopt, true),
                    Catch::Contains("cannot be drawn again"));
}

TEST_CASE(
    "dpft select: the total is Theorem 2 on the trials' recorded releases, and only the "
    "winner exports, with it",
    "[train-engine][selection-run]") {
  test::Fixture f;
  test::make_fixture(f);
  const std::string out = (f.tmp.path / "sel").string();
  std::vector<std::string> args = test::run_args(
      f, out, {"--set", "method.name=dp-sgd", "--set", "privacy.noise_multiplier=1"});
  args[0] = "select";
  args.erase(args.begin() + 2, args.begin() + 4);  // select takes --out as an option below
  std::vector<std::string> sel = {
      "--grid", "train.lr=0.01,0.05", "--metric", "eval.loss", "--mean-trials",
      "3",      "--score-noise",      "2",        "--out",     out};
  args.insert(args.end(), sel.begin(), sel.end());
  REQUIRE(test::cli(args) == 0);
  const nlohmann::json s = nlohmann::json::parse(read_file(fs::path(out) / "selection.json"));
  const std::vector<nlohmann::json> trials = read_jsonl(fs::path(out) / "selection_trials.jsonl");
  REQUIRE(!trials.empty());

  // The winner: the best noisy score (eval.loss: the lowest), first among equals.
  size_t best = 0;
  for (size_t i = 1; i < trials.size(); ++i)
    if (trials[i]["noisy_score"].get<double>() < trials[best]["noisy_score"].get<double>())
      best = i;
  const fs::path winner = trials[best]["run_dir"].get<std::string>();
  CHECK(s["winner"]["noisy_score"] == trials[best]["noisy_score"]);
  CHECK(fs::path(out) / s["winner"]["run_dir"].get<std::string>() == winner);
  CHECK(s["winner"]["sets"][0] ==
        (trials[best]["candidate"] == 0 ? "train.lr=0.01" : "train.lr=0.05"));
  CHECK(s.dump().find("\"trial\"") == std::string::npos);  // K is not in the output

  // The total from what the trials' ledgers recorded (each candidate's own releases; a
  // candidate no trial ran is planned alike: the grid varies the lr only).
  privacy::SelectionPlan p;
  const nlohmann::json m = nlohmann::json::parse(read_file(winner / "metrics.json"));
  std::vector<privacy::GaussianBlock> blocks;
  for (const auto& r : m["privacy"]["releases"])
    blocks.push_back({r["noise_multiplier"].get<double>(), r["sampling_rate"].get<double>(),
                      r["count"].get<int64_t>()});
  p.candidates = {blocks};
  p.score_sigma = 2;
  p.trials = TruncatedNegativeBinomial::with_mean(1.0, 3.0);
  p.delta = m["privacy"]["delta"];
  CHECK(s["privacy"]["epsilon"].get<double>() ==
        Approx(privacy::selection_budget(p).epsilon).epsilon(1e-12));
  CHECK(s["privacy"]["epsilon"].get<double>() > m["privacy"]["epsilon"].get<double>());

  // Export: the winner with the selection's epsilon and without its private eval; a trial that
  // did not win (here: the winner without the selection's mark) is refused.
  REQUIRE(test::cli({"export", winner.string(), "--out", (f.tmp.path / "exp").string(),
                     "--allow-seeded-noise"}) == 0);
  const nlohmann::json man =
      nlohmann::json::parse(read_file(f.tmp.path / "exp" / "export_manifest.json"));
  CHECK(man["privacy"]["epsilon"] == s["privacy"]["epsilon"]);
  const nlohmann::json em = nlohmann::json::parse(read_file(f.tmp.path / "exp" / "metrics.json"));
  CHECK(!em.contains("eval"));
  CHECK(em["privacy"]["epsilon"] == s["privacy"]["epsilon"]);
  CHECK(fs::exists(f.tmp.path / "exp" / "selection.json"));
  // Nothing exported tells when the winner ran or how many trials came before it: a random run
  // name, the trial mark without the trial's number.
  CHECK(em["run"]["run_id"].get<std::string>().rfind("trial-", 0) == 0);
  CHECK(winner.filename().string() == em["run"]["run_id"].get<std::string>());
  const nlohmann::json mark =
      nlohmann::json::parse(read_file(f.tmp.path / "exp" / "selection_trial.json"));
  CHECK(mark.size() == 1);
  CHECK(mark.contains("selection"));
  CHECK(nlohmann::json::parse(read_file(winner / "selection_trial.json")).contains("trial"));
  const fs::path loser = f.tmp.path / "loser";
  fs::copy(winner, loser, fs::copy_options::recursive);
  fs::remove(loser / "selection.json");
  CHECK(test::cli({"export", loser.string(), "--out", (f.tmp.path / "exp2").string(),
                   "--allow-seeded-noise"}) == 2);

  // --resume of a finished selection repeats its draws: the same winner, no new trial; a
  // changed option is refused.
  std::vector<std::string> resume = args;
  resume.push_back("--resume");
  REQUIRE(test::cli(resume) == 0);
  CHECK(read_jsonl(fs::path(out) / "selection_trials.jsonl").size() == trials.size());
  CHECK(nlohmann::json::parse(read_file(fs::path(out) / "selection.json"))["winner"] ==
        s["winner"]);
  std::vector<std::string> changed = resume;
  *(std::find(changed.begin(), changed.end(), "--score-noise") + 1) = "3";
  CHECK(test::cli(changed) == 2);
}

TEST_CASE("dpft select at privacy.unit user: a user's held-out rows score as one unit",
          "[train-engine][selection-run]") {
  test::Fixture f;
  test::make_fixture(f);
  const std::string users = test::write_user_rows(f, "users.jsonl", 4);  // 100 users of 4 rows
  const std::string out = (f.tmp.path / "sel").string();
  std::vector<std::string> args = test::run_args(
      f, out, {"--set", "method.name=dp-sgd", "--set", "privacy.noise_multiplier=1"});
  args[0] = "select";
  args.erase(args.begin() + 2, args.begin() + 4);
  const std::vector<std::string> user = test::user_level_args(users);
  args.insert(args.end(), user.begin(), user.end());
  const std::vector<std::string> sel = {
      "--grid", "train.lr=0.05", "--metric", "eval.loss", "--mean-trials",
      "2",      "--holdout",     "0.2",      "--out",     out};
  args.insert(args.end(), sel.begin(), sel.end());
  REQUIRE(test::cli(args) == 0);
  const nlohmann::json s = nlohmann::json::parse(read_file(fs::path(out) / "selection.json"));
  CHECK(s["privacy"]["unit"] == "user");
  // The units scored: the distinct users of the winner's held-out rows (its per_sample.jsonl,
  // each row's user from the file), fewer than the rows.
  const fs::path winner = fs::path(out) / s["winner"]["run_dir"].get<std::string>();
  const std::vector<nlohmann::json> file = read_jsonl(users);
  std::set<std::string> held;
  int64_t rows = 0;
  for (const auto& e : read_jsonl(winner / "per_sample.jsonl"))
    if (e["model"] == "final") {
      held.insert(file.at(e["index"].get<size_t>())["who"].get<std::string>());
      ++rows;
    }
  CHECK(s["winner"]["held_out_units"] == static_cast<int64_t>(held.size()));
  CHECK(static_cast<int64_t>(held.size()) < rows);
}

TEST_CASE(
    "dpft select --resume continues a trial a crash left unfinished from its checkpoint, "
    "as if uninterrupted",
    "[train-engine][selection-run]") {
  test::Fixture f;
  test::make_fixture(f);
  auto select_args = [&](const std::string& out) {
    std::vector<std::string> a = test::run_args(
        f, out,
        {"--set", "method.name=dp-sgd", "--set", "privacy.noise_multiplier=1", "--set",
         "output.checkpoint_every=2", "--grid", "train.lr=0.01,0.05", "--metric", "eval.loss",
         "--mean-trials", "2", "--score-noise", "2", "--out", out});
    a[0] = "select";
    a.erase(a.begin() + 2, a.begin() + 4);  // select takes --out as an option
    return a;
  };
  const fs::path whole = f.tmp.path / "whole", crashed = f.tmp.path / "crashed";
  REQUIRE(test::cli(select_args(whole.string())) == 0);
  // SIGKILL at the first trial's step 4 (a checkpoint at step 2): no line for it yet.
  std::string cmd = fmt::format("DPFT_CRASH_AT=step4 '{}' --quiet", DPFT_BINARY);
  for (const std::string& a : select_args(crashed.string())) cmd += " '" + a + "'";
  const int rc = std::system((cmd + " >/dev/null 2>&1").c_str());
  CHECK(WIFSIGNALED(rc) + (WIFEXITED(rc) && WEXITSTATUS(rc) == 137) >= 1);
  CHECK_FALSE(fs::exists(crashed / "selection_trials.jsonl"));
  std::vector<std::string> resume = select_args(crashed.string());
  resume.push_back("--resume");
  REQUIRE(test::cli(resume) == 0);
  // The same trials and noisy scores as the uninterrupted selection, one run per trial, the
  // first continued in place.
  const auto a = read_jsonl(whole / "selection_trials.jsonl"),
             b = read_jsonl(crashed / "selection_trials.jsonl");
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i]["candidate"] == b[i]["candidate"]);
    CHECK(a[i]["noisy_score"] == b[i]["noisy_score"]);
  }
  size_t runs = 0;
  for (const auto& e : fs::recursive_directory_iterator(crashed / "trials"))
    runs += e.path().filename() == "selection_trial.json";
  CHECK(runs == b.size());
  const nlohmann::json first = nlohmann::json::parse(
      read_file(fs::path(b[0]["run_dir"].get<std::string>()) / "manifest.json"));
  CHECK(first.value("resumed", false));
  CHECK(nlohmann::json::parse(read_file(whole / "selection.json"))["winner"]["noisy_score"] ==
        nlohmann::json::parse(read_file(crashed / "selection.json"))["winner"]["noisy_score"]);
}
