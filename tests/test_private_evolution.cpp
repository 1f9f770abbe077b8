// Private Evolution (methods pe / aug-pe, CTCL's baselines): exact nearest neighbours against
// the obvious search, the vote vector's sensitivity, the vote release and its ledger entry, the
// noise calibration against the closed form of composed Gaussians (Dong et al. 2019, as the DPSDA
// library computes it), threshold and selection, and end-to-end runs (ledger, output sizes,
// classes, resume == uninterrupted, refusals).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "core/privacy/accountant.hpp"
#include "core/privacy/calibrate.hpp"
#include "core/privacy/histogram.hpp"
#include "core/topics/topic_model.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "mechanism_util.hpp"
#include "methods/ctcl/pe_population.hpp"
#include "test_util.hpp"

using namespace dpft;
namespace fs = std::filesystem;

namespace {
// delta(eps) of mu-GDP (Dong, Roth, Su 2019, Cor. 2.13), written out here as the DPSDA library
// computes it: Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2).
double gdp_delta(double eps, double mu) {
  auto Phi = [](double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); };
  return Phi(-eps / mu + mu / 2) - std::exp(eps) * Phi(-eps / mu - mu / 2);
}
// The sigma at which T composed Gaussian releases (sensitivity 1) are exactly (eps, delta)-DP:
// mu = sqrt(T) / sigma, bisection on sigma (delta falls as sigma grows).
double gdp_sigma(double eps, double delta, int64_t T) {
  double lo = 0.05, hi = 500;
  for (int i = 0; i < 200; ++i) {
    const double mid = std::sqrt(lo * hi);
    (gdp_delta(eps, std::sqrt(static_cast<double>(T)) / mid) > delta ? lo : hi) = mid;
  }
  return hi;
}
}  // namespace

namespace {
std::vector<int64_t> iota(int64_t n) {  // one unit per record: 0, 1, ..., n - 1
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
  return v;
}
}  // namespace

TEST_CASE("knn: faiss exact search equals the full distance matrix sorted", "[pe]") {
  torch::manual_seed(3);
  const torch::Tensor q = torch::randn({57, 16}), b = torch::randn({41, 16});
  for (int64_t k : {1, 3, 41}) {
    auto [idx, d2] = topics::knn(q, b, k);
    auto [ridx, rd2] = topics::knn_reference(q, b, k);
    REQUIRE(idx.sizes() == torch::IntArrayRef({57, k}));
    CHECK(torch::equal(idx, ridx));
    CHECK(torch::allclose(d2, rd2, 1e-4, 1e-4));
  }
  // The reference by hand: row 0's nearest is the argmin of its distances.
  const torch::Tensor dist0 = (b - q[0]).pow(2).sum(1);
  CHECK(topics::knn_reference(q, b, 1).first[0][0].item<int64_t>() ==
        dist0.argmin().item<int64_t>());
  CHECK_THROWS_AS(topics::knn(q, b, 0), ConfigError);
  CHECK_THROWS_AS(topics::knn(q, b, 42), ConfigError);
  CHECK_THROWS_AS(topics::knn(q, torch::randn({5, 8}), 1), InputError);
}

TEST_CASE("nn votes: 1/sqrt(k) per neighbour, one record changes the vector by exactly 1",
          "[pe][privacy]") {
  // Hand case, k = 2: records vote {0, 2}, {2, 1}, {2, 3}.
  const torch::Tensor idx = torch::tensor({0, 2, 2, 1, 2, 3}, torch::kInt64).view({3, 2});
  const auto v = privacy::nn_votes(idx, 5, iota(3));
  const double w = 1 / std::sqrt(2.0);
  CHECK(v == std::vector<double>{w, w, 3 * w, w, 0});
  // Sensitivity: dropping any one record (its neighbours in a fixed candidate set do not move
  // the others') changes the votes by an L2 norm of exactly 1, for every k.
  torch::manual_seed(5);
  const torch::Tensor priv = torch::randn({30, 8}), cand = torch::randn({12, 8});
  for (int64_t k : {1, 2, 5}) {
    const auto all = privacy::nn_votes(topics::knn(priv, cand, k).first, 12, iota(30));
    for (int64_t drop : {0, 17, 29}) {
      const torch::Tensor keep = torch::cat({priv.slice(0, 0, drop), priv.slice(0, drop + 1)});
      const auto less = privacy::nn_votes(topics::knn(keep, cand, k).first, 12, iota(29));
      double d2 = 0;
      for (size_t j = 0; j < 12; ++j) d2 += (all[j] - less[j]) * (all[j] - less[j]);
      CHECK(std::sqrt(d2) == Approx(1.0).epsilon(1e-12));
    }
  }
  CHECK_THROWS_AS(privacy::nn_votes(torch::tensor({0, 5}, torch::kInt64).view({1, 2}), 5, {0}),
                  RuntimeError);
  CHECK_THROWS_AS(privacy::nn_votes(torch::tensor({1, 1}, torch::kInt64).view({1, 2}), 5, {0}),
                  RuntimeError);
  CHECK_THROWS_AS(privacy::nn_votes(idx, 5, {0, 1}), RuntimeError);  // a unit per record
}

TEST_CASE("nn votes per user: one vector of norm at most 1 per user, against a slow reference",
          "[pe][privacy]") {
  torch::manual_seed(8);
  const int64_t k = 3, M = 40;
  const torch::Tensor cand = torch::randn({M, 8});
  // 20 users of one record, 1 of 1,000, and 5 records left out (unit -1).
  const torch::Tensor priv = torch::randn({1025, 8});
  std::vector<int64_t> unit(1025);
  for (int64_t i = 0; i < 1025; ++i) unit[i] = i < 20 ? i : i < 1020 ? 20 : -1;
  const torch::Tensor nn = topics::knn(priv, cand, k).first;
  const auto all = privacy::nn_votes(nn, M, unit);
  // The slow reference: each user's vector summed densely, divided by max(1, its norm).
  std::vector<double> ref(M, 0.0);
  for (int64_t u = 0; u <= 20; ++u) {
    std::vector<double> v(M, 0.0);
    for (int64_t i = 0; i < 1025; ++i)
      if (unit[i] == u)
        for (int64_t j = 0; j < k; ++j) v[nn[i][j].item<int64_t>()] += 1 / std::sqrt(3.0);
    double sq = 0;
    for (double x : v) sq += x * x;
    for (int64_t m = 0; m < M; ++m) ref[m] += v[m] / std::max(1.0, std::sqrt(sq));
  }
  for (int64_t m = 0; m < M; ++m) CHECK(all[m] == Approx(ref[m]).margin(1e-12));
  // Removing the user of 1,000 records moves the totals by at most 1 (here exactly 1: its
  // summed vector is longer than 1 and is scaled to 1).
  std::vector<int64_t> without = unit;
  for (auto& u : without)
    if (u == 20) u = -1;
  const auto less = privacy::nn_votes(nn, M, without);
  double d2 = 0;
  for (int64_t m = 0; m < M; ++m) d2 += (all[m] - less[m]) * (all[m] - less[m]);
  CHECK(std::sqrt(d2) == Approx(1.0).epsilon(1e-12));
  // One record per user, whatever the users' numbers: exactly the per-record votes.
  std::vector<int64_t> reversed = iota(20);
  std::reverse(reversed.begin(), reversed.end());
  CHECK(privacy::nn_votes(nn.slice(0, 0, 20), M, reversed) ==
        privacy::nn_votes(nn.slice(0, 0, 20), M, iota(20)));
}

TEST_CASE("vote release: votes + N(0, sigma^2), one q = 1 release in the ledger first",
          "[pe][privacy]") {
  privacy::LedgerOptions lo;
  lo.accountant = privacy::AccountantKind::kGaussian;
  lo.delta = 1e-5;
  const privacy::Release rel{"pe_histogram", 2.0, 1.0, 1}, rel0{"v0", 0.0, 1.0, 1};
  auto mech = test::test_mechanisms(21, {rel, rel0}, lo);
  privacy::VoteHistogram& h = mech->votes("pe", rel);
  const int64_t M = 40000;
  std::vector<double> votes(M, 0.0);
  for (int64_t j = 0; j < M; j += 2) votes[static_cast<size_t>(j)] = 3.5;
  const auto out = h.release(votes);
  const torch::Tensor z = test::reference_stream(21, "pe")->normal({M}, 2.0, torch::kFloat64);
  double s = 0, s2 = 0;
  for (int64_t j = 0; j < M; ++j) {
    const double e = out[static_cast<size_t>(j)] - votes[static_cast<size_t>(j)];
    if (j % 4999 == 0)
      CHECK(out[static_cast<size_t>(j)] == votes[static_cast<size_t>(j)] + z[j].item<double>());
    s += e;
    s2 += e * e;
  }
  const double mean = s / M, sd = std::sqrt(s2 / M - mean * mean);
  CHECK(std::fabs(mean) < 0.05);  // 5 standard errors of 2 / sqrt(40000)
  CHECK(sd == Approx(2.0).epsilon(0.02));
  const auto j = mech->ledger().to_json();
  REQUIRE(j["releases"].size() == 1);
  CHECK(j["releases"][0]["label"] == "pe_histogram");
  CHECK(j["releases"][0]["noise_multiplier"] == 2.0);
  CHECK(j["releases"][0]["sampling_rate"] == 1.0);
  CHECK(j["releases"][0]["count"] == 1);
  CHECK_THROWS(h.release(votes));  // the plan holds one
  CHECK(mech->ledger().to_json()["releases"].size() == 1);
  // sigma 0 (privacy.epsilon inf): the true votes, recorded as a non-private release.
  CHECK(mech->votes("pe0", rel0).release(votes) == votes);
  CHECK(mech->ledger().to_json()["releases"][1]["mechanism"] == "non_private");
}

TEST_CASE("PE noise: the PRV calibration of T q = 1 releases matches the GDP closed form",
          "[pe][privacy]") {
  privacy::AccountantOptions ao;
  auto prv = privacy::make_accountant("prv", ao);
  auto gauss = privacy::make_accountant("gaussian", ao);
  for (int64_t T : {1, 5, 20})
    for (double eps : {1.0, 4.0}) {
      const double s = privacy::calibrate_sigma(*prv, 1.0, T, eps, 1e-5).sigma;
      const double exact = gdp_sigma(eps, 1e-5, T);
      INFO("T " << T << " eps " << eps << ": prv " << s << ", closed form " << exact);
      CHECK(s == Approx(exact).epsilon(0.01));
      CHECK(s >= exact * 0.999);  // certified: never less noise than the exact answer, to rounding
      // privacy.accountant: gaussian is the closed form itself (up to the calibration's 1e-3).
      CHECK(privacy::calibrate_sigma(*gauss, 1.0, T, eps, 1e-5).sigma ==
            Approx(exact).epsilon(2e-3));
    }
}

TEST_CASE("PE selection: threshold, rank (ties to the lower index), sampling proportional",
          "[pe]") {
  CHECK(pe::threshold({3.0, 0.5, -1.0, 2.0}, 1.0) == std::vector<double>{2.0, 0.0, 0.0, 1.0});
  CHECK_THROWS_AS(pe::threshold({1.0}, -1.0), ConfigError);
  const std::vector<double> h = {1.0, 4.0, 0.0, 4.0, 2.0};
  CHECK(pe::select(h, 3, pe::Selection::kRank, 0) == std::vector<int64_t>{1, 3, 4});
  CHECK(pe::select(h, 5, pe::Selection::kRank, 0) == std::vector<int64_t>{1, 3, 4, 0, 2});
  CHECK_THROWS_AS(pe::select(h, 6, pe::Selection::kRank, 0), ConfigError);
  CHECK_THROWS_AS(pe::select({1.0, -0.5}, 1, pe::Selection::kRank, 0), RuntimeError);
  // Sampling: 110,000 draws follow h / sum h (sd of a frequency < 0.0015), never a zero count.
  bool uniform = true;
  const auto d = pe::select(h, 110000, pe::Selection::kSample, 9, &uniform);
  CHECK_FALSE(uniform);
  std::map<int64_t, int64_t> n;
  for (int64_t j : d) ++n[j];
  CHECK(n.count(2) == 0);
  for (int64_t j : {0, 1, 3, 4})
    CHECK(static_cast<double>(n[j]) / 110000 ==
          Approx(h[static_cast<size_t>(j)] / 11).margin(0.006));
  CHECK(pe::select(h, 50, pe::Selection::kSample, 9) ==
        pe::select(h, 50, pe::Selection::kSample, 9));
  CHECK(pe::select(h, 50, pe::Selection::kSample, 9) !=
        pe::select(h, 50, pe::Selection::kSample, 10));
  // Nothing left after the threshold: uniform draws, flagged.
  const auto u = pe::select({0.0, 0.0, 0.0}, 3000, pe::Selection::kSample, 1, &uniform);
  CHECK(uniform);
  std::set<int64_t> seen(u.begin(), u.end());
  CHECK(seen.size() == 3);
}

namespace {
// A private corpus of `n` short documents on four themes; with stars, a label column.
std::string pe_corpus(int n, bool stars, int rows_per_user = 0) {
  const char* themes[] = {"the tumour cells grew in mice treated with the new drug",
                          "patients with diabetes had lower glucose after the trial",
                          "the river flooded the valley after days of heavy rain",
                          "the court ruled on the appeal of the contract dispute"};
  std::string s =
      std::string(stars ? "text,stars" : "text") + (rows_per_user > 0 ? ",who\n" : "\n");
  for (int i = 0; i < n; ++i)
    s += fmt::format("\"{} (case {})\"{}{}\n", themes[i % 4], i,
                     stars ? fmt::format(",Stars: {}", 1 + i % 2) : "",
                     rows_per_user > 0 ? fmt::format(",u{}", i / rows_per_user) : "");
  return s;
}

std::string pe_spec(const fs::path& data, const fs::path& prompts, const std::string& method,
                    const std::string& extra) {
  const fs::path root(DPFT_SOURCE_DIR);
  return "name: " + method +
         "-test\nseed: 4\nmodel: {path: " + (root / "models/tiny-gpt2").string() +
         ", peft: {kind: none}}\ndata:\n  train: {path: " + data.string() +
         ", text_column: text}\n  max_length: 64\nprivacy: {epsilon: 2, delta: 1.0e-5, noise_seed: "
         "4}\n"
         "method:\n  name: " +
         method + "\n  embedder: " + (root / "models/tiny-roberta").string() +
         "\n  prompts: " + prompts.string() +
         "\n  iterations: 3\n  num_synthetic: 6\n"
         "  generation: {max_new_tokens: 8, min_new_tokens: 2, batch: 8}\n" +
         extra;
}
}  // namespace

TEST_CASE("dpft run aug-pe / pe: T releases, N_syn outputs, classes, resume, refusals",
          "[pe][run]") {
  SHARED_DATA_OR_SKIP(roberta, "roberta_tokenizer");
  test::TempDir tmp;
  const fs::path data = tmp.write("private.csv", pe_corpus(24, true));
  const fs::path prompts =
      tmp.write("prompts.yaml",
                "zero_shot: \"<label>\\nWrite a short note: \"\n"
                "one_shot: \"<label>\\n<sample>\\nRewrite the note above <tone>: \"\n"
                "tones: [briefly, plainly]\n");
  const std::string out = (tmp.path / "runs").string();
  const std::string spec = tmp.write("aug.yaml", pe_spec(data, prompts, "aug-pe", "")).string();
  if (!topics::have_faiss()) WARN("built without faiss: knn falls back to the reference search");
  std::string printed;
  // The prompts hold <label> but the run is unlabelled: <label> stays literal (allowed), and
  // the one-class run spends T releases at the calibrated sigma.
  REQUIRE(test::cli({"run", spec, "--out", out}, &printed) == 0);
  const fs::path run = test::last_line(printed);
  const auto m = nlohmann::json::parse(read_file(run / "metrics.json"));
  REQUIRE(m["status"] == "ok");
  const auto& rel = m["privacy"]["releases"];
  REQUIRE(rel.size() == 1);
  CHECK(rel[0]["label"] == "pe_histogram");
  CHECK(rel[0]["count"] == 3);
  CHECK(rel[0]["sampling_rate"] == 1.0);
  const double sigma = rel[0]["noise_multiplier"].get<double>();
  CHECK(sigma == Approx(gdp_sigma(2.0, 1e-5, 3)).epsilon(0.01));
  CHECK(m["privacy"]["epsilon"].get<double>() <= 2.0);
  CHECK(m["pe"]["sigma"] == sigma);
  // Aug-PE: 6 seeds x (1 + 3 variations) candidates voted on each iteration, 6 selected.
  const auto syn = read_jsonl(run / "synthetic" / "synthetic.jsonl");
  CHECK(syn.size() == 6);
  CHECK(m["synthetic"]["count"] == 6);
  REQUIRE(m["pe"]["history"].size() == 3);
  for (const auto& h : m["pe"]["history"]) CHECK(h["candidates"] == 24);
  // The last selection is what synthetic.jsonl holds, with the noisy counts in iter_0003.
  const auto last = read_jsonl(run / "synthetic" / "iter_0003.jsonl");
  REQUIRE(last.size() == 6);
  for (size_t i = 0; i < 6; ++i) CHECK(last[i]["text"] == syn[i]["text"]);
  for (size_t i = 1; i < 6; ++i) CHECK(last[i - 1]["count"] >= last[i]["count"]);  // rank order

  // `dpft export` shares the synthetic texts and leaves the checkpoint (noise state) out. The
  // test's noise is seeded (privacy.noise_seed), so export needs --allow-seeded-noise and says so.
  const fs::path ex = tmp.path / "export";
  CHECK(test::cli({"export", run.string(), "--out", ex.string()}) == 2);
  REQUIRE(test::cli({"export", run.string(), "--out", ex.string(), "--allow-seeded-noise"}) == 0);
  CHECK(nlohmann::json::parse(read_file(ex / "export_manifest.json"))["shareable"] == false);
  CHECK(fs::exists(ex / "synthetic" / "synthetic.jsonl"));
  CHECK(fs::exists(ex / "synthetic" / "iter_0001.jsonl"));
  CHECK(fs::exists(run / "pe_state.json"));
  CHECK_FALSE(fs::exists(ex / "pe_state.json"));

  // eval-synthetic --run scores the run's synthetic set and records it in its metrics.json.
  const std::string enc = (fs::path(DPFT_SOURCE_DIR) / "models/tiny-roberta").string();
  REQUIRE(test::cli({"eval-synthetic", "--run", run.string(), "--real", data.string(), "--embedder",
                     enc, "--k", "2", "--buckets", "2"}) == 0);
  const auto scored = nlohmann::json::parse(read_file(run / "metrics.json"));
  REQUIRE(scored.contains("synthetic_eval"));
  const auto& se = scored["synthetic_eval"]["main"];
  CHECK(se["synthetic"]["texts"] == 6);
  CHECK(se["synthetic"]["requested"] == m["pe"]["num_synthetic"]);  // N_syn, Fig. 3's x
  CHECK(test::cli({"eval-synthetic", "--run", run.string(), "--subset", "3", "--real",
                   data.string(), "--embedder", enc}) == 3);  // subsets are ctcl's
  CHECK(se["real"]["texts"] == 24);
  CHECK(se["mauve"]["mauve"].get<double>() > 0);
  CHECK(se["mauve"]["mauve"].get<double>() <= 1);
  CHECK(se.contains("fid"));
  CHECK(scored["privacy"] == m["privacy"]);  // the rest as it was
  CHECK(test::cli({"eval-synthetic", "--run", run.string(), "--synthetic", data.string(), "--real",
                   data.string(), "--embedder", enc}) != 0);

  // Stopped after one iteration, resumed: the same outputs and ledger as without the stop.
  REQUIRE(test::cli({"run", spec, "--out", out, "--stop-after", "1"}, &printed) == 0);
  const fs::path part = test::last_line(printed);
  CHECK(nlohmann::json::parse(read_file(part / "metrics.json"))["status"] == "stopped");
  CHECK_FALSE(fs::exists(part / "synthetic" / "synthetic.jsonl"));
  const std::string state = read_file(part / "pe_state.json");
  // An edited ledger in the checkpoint is refused (exit 3) and leaves the checkpoint as it was.
  auto edited = nlohmann::json::parse(state);
  edited["ledger"]["releases"][0]["noise_multiplier"] = 100.0;
  write_file_atomic(part / "pe_state.json", edited.dump());
  CHECK(test::cli({"run", "--resume", part.string()}) == 3);
  // A deleted state file is refused too (exit 3): without it every iteration would be released
  // again while the outputs of the first one exist.
  // The refused resume leaves the last recorded metrics.json (status, ledger) in place and names
  // the file in manifest.json.
  fs::remove(part / "pe_state.json");
  const std::string metrics_before = read_file(part / "metrics.json");
  CHECK(test::cli({"run", "--resume", part.string()}) == 3);
  CHECK(read_file(part / "metrics.json") == metrics_before);
  CHECK_THAT(nlohmann::json::parse(read_file(part / "manifest.json"))["error"].get<std::string>(),
             Catch::Contains("pe_state.json is missing"));
  write_file_atomic(part / "pe_state.json", state);
  CHECK(test::cli({"eval-synthetic", "--run", part.string(), "--real", data.string(), "--embedder",
                   enc, "--k", "2"}) == 2);  // a stopped run: finish it first
  REQUIRE(test::cli({"run", "--resume", part.string()}) == 0);
  const auto r = nlohmann::json::parse(read_file(part / "metrics.json"));
  CHECK(r["status"] == "ok");
  CHECK(r["privacy"]["releases"] == rel);
  CHECK(r["privacy"]["epsilon"] == m["privacy"]["epsilon"]);
  CHECK(read_file(part / "synthetic" / "synthetic.jsonl") ==
        read_file(run / "synthetic" / "synthetic.jsonl"));

  // Plain PE: probability sampling, output = the last population (6 variations of the draw).
  REQUIRE(test::cli({"run", tmp.write("pe.yaml", pe_spec(data, prompts, "pe", "")).string(),
                     "--out", out},
                    &printed) == 0);
  const fs::path pe_run = test::last_line(printed);
  const auto pm = nlohmann::json::parse(read_file(pe_run / "metrics.json"));
  CHECK(pm["pe"]["selection"] == "sample");
  CHECK(pm["pe"]["variant"] == "PE");
  for (const auto& h : pm["pe"]["history"]) CHECK(h["candidates"] == 6);
  CHECK(read_jsonl(pe_run / "synthetic" / "synthetic.jsonl").size() == 6);

  // Two classes from the label column, shares by a DP class histogram: two ledger entries,
  // every output row carries its class, and the seats follow the released counts.
  const std::string cls =
      tmp.write("cls.yaml", pe_spec(data, prompts, "aug-pe",
                                    "  label_columns: [stars]\n"
                                    "  label_values: [[\"Stars: 1\", \"Stars: 2\"]]\n"
                                    "  class_shares: dp\n"))
          .string();
  REQUIRE(test::cli({"run", cls, "--out", out}, &printed) == 0);
  const fs::path cls_run = test::last_line(printed);
  const auto cm = nlohmann::json::parse(read_file(cls_run / "metrics.json"));
  const auto& crel = cm["privacy"]["releases"];
  REQUIRE(crel.size() == 2);
  CHECK(crel[0]["label"] == "class_histogram");
  CHECK(crel[0]["noise_multiplier"] == 10.0);
  CHECK(crel[1]["count"] == 3);
  CHECK(crel[1]["noise_multiplier"].get<double>() > sigma);  // less budget left for the votes
  CHECK(cm["privacy"]["epsilon"].get<double>() <= 2.0);
  const auto seats = cm["pe"]["seats"].get<std::vector<int64_t>>();
  REQUIRE(seats.size() == 2);
  CHECK(seats[0] + seats[1] == 6);
  std::map<std::string, int64_t> per_class;
  for (const auto& row : read_jsonl(cls_run / "synthetic" / "synthetic.jsonl")) {
    CHECK(row["stars"] == row["label"]);
    ++per_class[row["label"].get<std::string>()];
  }
  CHECK(per_class["Stars: 1"] == seats[0]);
  CHECK(per_class["Stars: 2"] == seats[1]);

  // Refusals: a label the public lists lack (exit 3), prompts without <label> for classes,
  // k above what a one-seat class holds, an empty next population, no embedder (exit 2).
  CHECK(test::cli({"run",
                   tmp.write("bad1.yaml", pe_spec(data, prompts, "aug-pe",
                                                  "  label_columns: [stars]\n"
                                                  "  label_values: [[\"Stars: 1\"]]\n"))
                       .string(),
                   "--out", out}) == 3);
  const fs::path plain =
      tmp.write("plain.yaml", "zero_shot: \"Write: \"\none_shot: \"<sample> again: \"\n");
  CHECK(
      test::cli({"run",
                 tmp.write("bad2.yaml", pe_spec(data, plain, "aug-pe",
                                                "  label_columns: [stars]\n"
                                                "  label_values: [[\"Stars: 1\", \"Stars: 2\"]]\n"))
                     .string(),
                 "--out", out}) == 2);
  CHECK(test::cli({"run", spec, "--out", out, "--set", "method.nearest_neighbors=5"}) == 2);
  CHECK(test::cli({"run", spec, "--out", out, "--set", "method.variations=0", "--set",
                   "method.keep_selected=false"}) == 2);
  CHECK(test::cli({"run", spec, "--out", out, "--set", "method.label_columns=[stars]"}) == 2);
}

TEST_CASE("dpft run pe / aug-pe at user level: one row per user is example level bit for bit",
          "[pe][run][privacy]") {
  SHARED_DATA_OR_SKIP(roberta, "roberta_tokenizer");
  test::TempDir tmp;
  const fs::path prompts = tmp.write("prompts.yaml",
                                     "zero_shot: \"Write a short note: \"\n"
                                     "one_shot: \"<sample>\\nRewrite the note above <tone>: \"\n"
                                     "tones: [briefly, plainly]\n");
  const std::string out = (tmp.path / "runs").string();
  const std::vector<std::string> user = {"--set", "privacy.unit=user", "--set",
                                         "data.train.user_column=who"};
  auto run = [&](const fs::path& data, const std::string& method,
                 const std::vector<std::string>& extra) {
    const std::string spec =
        tmp.write(method + ".yaml", pe_spec(data, prompts, method, "")).string();
    std::vector<std::string> a = {"run", spec, "--out", out};
    a.insert(a.end(), extra.begin(), extra.end());
    std::string printed;
    REQUIRE(test::cli(a, &printed) == 0);
    return fs::path(test::last_line(printed));
  };
  const fs::path own = tmp.write("own.csv", pe_corpus(24, false, 1));
  const fs::path pairs = tmp.write("pairs.csv", pe_corpus(24, false, 2));  // 12 users
  for (std::string method : {"pe", "aug-pe"}) {
    CAPTURE(method);
    const fs::path ex = run(own, method, {}), us = run(own, method, user);
    const auto me = nlohmann::json::parse(read_file(ex / "metrics.json"));
    const auto mu = nlohmann::json::parse(read_file(us / "metrics.json"));
    CHECK(mu["privacy"]["unit"]["count"] == 24);
    CHECK(mu["privacy"]["epsilon"] == me["privacy"]["epsilon"]);
    for (const char* f : {"iter_0001.jsonl", "iter_0003.jsonl"})  // the noisy counts
      CHECK(read_file(us / "synthetic" / f) == read_file(ex / "synthetic" / f));
    CHECK(read_file(us / "synthetic" / "synthetic.jsonl") ==
          read_file(ex / "synthetic" / "synthetic.jsonl"));
    // Two rows per user: 12 users, each one vote vector of norm at most 1, the same T releases.
    const auto mp = nlohmann::json::parse(read_file(run(pairs, method, user) / "metrics.json"));
    CHECK(mp["status"] == "ok");
    CHECK(mp["privacy"]["unit"] == nlohmann::json{{"unit", "user"}, {"count", 12}});
    CHECK(mp["privacy"]["releases"] == me["privacy"]["releases"]);
  }
}
