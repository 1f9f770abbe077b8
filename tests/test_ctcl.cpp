// CTCL (paper 004) pieces: the DP topic histogram (noise, rounding, clamping, one ledger entry of
// sensitivity 1), largest-remainder apportionment, the post-filter on hand-made cases, the
// generator's condition.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <cstdlib>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <random>
#include <regex>
#include <set>

#include <yaml-cpp/yaml.h>

#include "core/privacy/accountant.hpp"
#include "core/privacy/histogram.hpp"
#include "core/topics/topic_model.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "core/util/sha256.hpp"
#include "mechanism_util.hpp"
#include "methods/ctcl/synthesis.hpp"
#include "test_util.hpp"

using namespace dpft;
namespace fs = std::filesystem;

TEST_CASE("DP histogram: true counts + N(0, sigma^2), rounded, clamped, one ledger entry",
          "[ctcl][privacy]") {
  privacy::LedgerOptions lo;
  lo.accountant = privacy::AccountantKind::kGaussian;
  lo.delta = 1e-6;
  const privacy::Release rel{"topic_histogram", 10.0, 1.0, 1}, rel0{"h0", 0.0, 1.0, 1};
  auto M = test::test_mechanisms(11, {rel, rel0}, lo);
  privacy::Histogram& h = M->histogram("hist", rel);
  const int64_t K = 20000;
  std::vector<int64_t> bin;  // bins 0..K/2-1 hold 1000 records each, the rest none
  for (int64_t k = 0; k < K / 2; ++k)
    for (int i = 0; i < 1000; ++i) bin.push_back(k);
  // Bad input first, and nothing recorded for it.
  CHECK_THROWS_AS(h.release({0, 3}, 3, {}), RuntimeError);
  CHECK_THROWS_AS(h.release({0}, 0, {}), ConfigError);
  CHECK(M->ledger().releases().empty());
  const std::vector<int64_t> counts = h.release(bin, K, {});
  REQUIRE(counts.size() == static_cast<size_t>(K));
  // The same draws, made again from the stream's start: released = max(0, round(true + z)).
  const torch::Tensor z = test::reference_stream(11, "hist")->normal({K}, 10.0, torch::kFloat64);
  for (int64_t k = 0; k < K; k += 997) {
    const double t = k < K / 2 ? 1000 : 0;
    CHECK(counts[static_cast<size_t>(k)] ==
          std::max<int64_t>(0, std::llround(t + z[k].item<double>())));
  }
  // Noise std 10 on the full bins; empty bins clamped: P(round(z) <= 0) = Phi(0.05) ~ 0.52.
  double s = 0, s2 = 0;
  int64_t zeros = 0, negative = 0;
  for (int64_t k = 0; k < K; ++k) {
    const double c = static_cast<double>(counts[static_cast<size_t>(k)]);
    if (k < K / 2) {
      s += c - 1000;
      s2 += (c - 1000) * (c - 1000);
    } else {
      zeros += c == 0;
    }
    negative += c < 0;
  }
  const double n = K / 2.0, mean = s / n, sd = std::sqrt(s2 / n - mean * mean);
  CHECK(std::fabs(mean) < 0.5);                                  // 5 standard errors
  CHECK(sd == Approx(std::sqrt(100 + 1.0 / 12)).epsilon(0.03));  // noise + rounding
  CHECK(negative == 0);
  CHECK(static_cast<double>(zeros) / n == Approx(0.5199).margin(0.03));
  // One Gaussian release of sensitivity 1: the ledger's epsilon is the analytic Gaussian's at
  // mu = 1 / 10.
  const auto spent = M->ledger().spent();
  CHECK(spent.epsilon == Approx(privacy::gaussian_epsilon(0.1, 1e-6)).epsilon(1e-6));
  const auto j = M->ledger().to_json();
  REQUIRE(j["releases"].size() == 1);
  CHECK(j["releases"][0]["label"] == "topic_histogram");
  CHECK(j["releases"][0]["noise_multiplier"] == 10.0);
  CHECK(j["releases"][0]["sampling_rate"] == 1.0);
  CHECK(j["releases"][0]["count"] == 1);
  // Released once per run: a second draw is refused (the plan holds one).
  CHECK_THROWS(h.release(bin, K, {}));
  CHECK(M->ledger().to_json()["releases"].size() == 1);
  // sigma 0 (privacy.epsilon inf): the true counts, recorded as a non-private release.
  CHECK(M->histogram("hist0", rel0).release({0, 2, 2}, 3, {}) == std::vector<int64_t>{1, 0, 2});
  CHECK(M->ledger().to_json()["releases"][1]["mechanism"] == "non_private");
  CHECK(M->ledger().to_json()["epsilon"] == "inf");
}

TEST_CASE("DP histogram per user: each user counted once, in its most common bin",
          "[ctcl][privacy]") {
  // Hand case: rows' bins 0 1 1 2 0 3 3 3 2 2; users {0,1,2} {3,4} {5,6,7,8} {9}.
  const std::vector<int64_t> bins = {0, 1, 1, 2, 0, 3, 3, 3, 2, 2};
  privacy::Units u;
  u.kind = privacy::PrivacyUnit::kUser;
  u.rows = {{0, 1, 2}, {3, 4}, {5, 6, 7, 8}, {9}};
  // modal bins: 1; tie 2 vs 0 -> the lower, 0; 3; 2
  CHECK(privacy::unit_bins(u, bins) == std::vector<int64_t>{1, 0, 3, 2});
  CHECK(privacy::unit_bins(privacy::Units{}, bins) == bins);  // example level: the rows' own
  CHECK(privacy::unit_of_rows(u, 10) == std::vector<int64_t>{0, 0, 0, 1, 1, 2, 2, 2, 2, 3});
  privacy::LedgerOptions lo;
  lo.accountant = privacy::AccountantKind::kGaussian;
  const privacy::Release rel0{"h0", 0.0, 1.0, 1}, rel1{"h1", 0.0, 1.0, 1};
  auto M = test::test_mechanisms(3, {rel0, rel1}, lo);
  // sigma 0: the counts of users, not rows
  CHECK(M->histogram("a", rel0).release(bins, 4, u) == std::vector<int64_t>{1, 1, 1, 1});
  // Sensitivity: a user with 1,000 rows spread over every bin moves the counts by 1 in one bin.
  std::vector<int64_t> many = bins;
  privacy::Units v = u;
  v.rows.emplace_back();
  for (int64_t i = 0; i < 1000; ++i) {
    many.push_back(i % 7 == 0 ? 2 : i % 4);
    v.rows.back().push_back(10 + i);
  }
  const auto with = M->histogram("b", rel1).release(many, 4, v);
  int64_t l1 = 0;
  for (size_t k = 0; k < 4; ++k) l1 += std::llabs(with[k] - std::vector<int64_t>{1, 1, 1, 1}[k]);
  CHECK(l1 == 1);
}

TEST_CASE("largest-remainder apportionment sums to the total and follows the histogram", "[ctcl]") {
  using V = std::vector<int64_t>;
  // 7 seats for 5:3:2: shares 3.5, 2.1, 1.4 -> floors 3, 2, 1; the last seat to remainder .5.
  CHECK(ctcl::apportion({5, 3, 2}, 7) == V{4, 2, 1});
  CHECK(ctcl::apportion({1, 1, 1}, 2) == V{1, 1, 0});  // ties: lower index
  CHECK(ctcl::apportion({1, 2, 1}, 1) == V{0, 1, 0});  // equal remainders: larger weight
  CHECK(ctcl::apportion({0, 4, 0}, 5) == V{0, 5, 0});
  CHECK(ctcl::apportion({3, 1}, 0) == V{0, 0});
  bool uniform = false;
  CHECK(ctcl::apportion({0, 0, 0, 0}, 6, &uniform) == V{2, 2, 1, 1});
  CHECK(uniform);
  ctcl::apportion({1, 0}, 6, &uniform);
  CHECK_FALSE(uniform);
  CHECK_THROWS_AS(ctcl::apportion({1, -1}, 3), ConfigError);
  CHECK_THROWS_AS(ctcl::apportion({}, 3), ConfigError);
  CHECK_THROWS_AS(ctcl::apportion({1}, -1), ConfigError);
  std::mt19937_64 rng(5);
  for (int t = 0; t < 200; ++t) {
    V w(1 + rng() % 50);
    for (auto& x : w) x = static_cast<int64_t>(rng() % 1000) * (rng() % 4 != 0);
    if (std::accumulate(w.begin(), w.end(), int64_t{0}) == 0) w[0] = 1;
    const int64_t total = static_cast<int64_t>(rng() % 100000);
    const V seats = ctcl::apportion(w, total);
    const double W = static_cast<double>(std::accumulate(w.begin(), w.end(), int64_t{0}));
    CHECK(std::accumulate(seats.begin(), seats.end(), int64_t{0}) == total);
    for (size_t k = 0; k < w.size(); ++k) {
      const double share = static_cast<double>(total) * static_cast<double>(w[k]) / W;
      CHECK(std::fabs(static_cast<double>(seats[k]) - share) < 1.0);
      if (w[k] == 0) CHECK(seats[k] == 0);
    }
  }
}

TEST_CASE("post-filter: overlong words, no alphabetic word, repetition beyond 20", "[ctcl]") {
  CHECK(ctcl::filter_reason("The patients were treated with aspirin.") == "");
  auto rep = [](const std::string& w, int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += w + " ";
    return s;
  };
  CHECK(ctcl::filter_reason(rep("cell", 20)) == "");
  CHECK(ctcl::filter_reason(rep("cell", 21)).find("'cell' repeated 21 times") == 0);
  CHECK(ctcl::filter_reason(rep("Cell cell CELL", 7)).find("'cell' repeated 21") == 0);  // case
  CHECK(ctcl::filter_reason(rep("cell,", 21)).find("'cell' repeated 21") == 0);  // punctuation off
  CHECK(ctcl::filter_reason(rep("the a , .", 30) + " study") == "");             // exempt words
  CHECK(ctcl::filter_reason(rep("the", 5)) == "no word besides the, a, commas and full stops");
  CHECK(ctcl::filter_reason("123 456 !! 7.5%") == "no alphabetic word");
  CHECK(ctcl::filter_reason("") == "no alphabetic word");
  CHECK(ctcl::filter_reason("a " + std::string(25, 'x')) == "");
  CHECK(ctcl::filter_reason("a " + std::string(26, 'x')) == "a word longer than 25 characters");
  CHECK(ctcl::filter_reason("(" + std::string(25, 'x') + ").") == "");  // brackets split off
  CHECK(ctcl::filter_reason("well-known result") == "");
}

TEST_CASE("the generator's condition", "[ctcl]") {
  CHECK(ctcl::condition("medical paper abstract", "cell, tumor") ==
        "Document Type: medical paper abstract\nKeywords: cell, tumor");
  CHECK(ctcl::condition("", "cell") == "Keywords: cell");
  CHECK(ctcl::condition("review", "food, staff", {"Review Stars: 5.0"}) ==
        "Document Type: review\nReview Stars: 5.0\nKeywords: food, staff");
  CHECK(ctcl::condition("review", "", {"Review Stars: 1.0"}) ==
        "Document Type: review\nReview Stars: 1.0");
}

namespace {
// Synthetic rows per topic in a finished ctcl run's per-topic files (kept and dropped).
// The ctcl run setting: a private corpus of 40 short documents on four themes (with a user
// column `who`, user i / rows_per_user, when rows_per_user > 0), its 4-topic model, a tiny
// BART and the spec (4 DP steps, 11 synthetic documents). nullopt without faiss (`topics
// build` then refuses, exit 2: checked).
struct CtclSetup {
  fs::path data;
  std::string encoder, topics, bart, spec;
};
const char* const themes[] = {"the tumour cells grew in mice treated with the new drug",
                              "patients with diabetes had lower glucose after the trial",
                              "the river flooded the valley after days of heavy rain",
                              "the court ruled on the appeal of the contract dispute"};
std::optional<CtclSetup> ctcl_setup(test::TempDir& tmp, const fs::path& roberta,
                                    int rows_per_user = 0) {
  std::string corpus = rows_per_user > 0 ? "text,who\n" : "text\n";
  for (int i = 0; i < 40; ++i)
    corpus += fmt::format("\"{} (case {})\"{}\n", themes[i % 4], i,
                          rows_per_user > 0 ? fmt::format(",u{}", i / rows_per_user) : "");
  const fs::path data = tmp.write("private.csv", corpus);
  const std::string encoder = (fs::path(DPFT_SOURCE_DIR) / "models" / "tiny-roberta").string();
  const std::string topics = (tmp.path / "topics").string();
  if (!topics::have_faiss()) {
    CHECK(test::cli({"topics", "build", "--corpus", data.string(), "--model", encoder, "--out",
                     topics}) == 2);
    return std::nullopt;
  }
  REQUIRE(test::cli({"topics", "build", "--corpus", data.string(), "--model", encoder, "--topics",
                     "4", "--out", topics}) == 0);
  const std::string bart = (tmp.path / "bart").string();
  REQUIRE(test::cli({"model", "init", "--arch", "bart", "--preset", "tiny", "--tokenizer",
                     roberta.string(), "--out", bart, "--seed", "1"}) == 0);
  const std::string spec = (tmp.path / "ctcl.yaml").string();
  const std::string text = "name: ctcl-test\nseed: 2\nmodel: {path: " + bart +
                           "}\ndata:\n  task: seq2seq\n  train: {path: " + data.string() +
                           ", text_column: text}\n  max_length: 32\n"
                           "privacy: {epsilon: 4, clip_norm: 1.0, noise_seed: 2}\n"
                           "train: {steps: 4, batch_size: 10, lr: 0.001}\n"
                           "method:\n  name: ctcl\n  topic_model: " +
                           topics +
                           "\n  doc_type: note\n"
                           "  generation: {num_synthetic: 11, max_new_tokens: 6, batch: 4}\n"
                           "output: {checkpoint_every: 1}\n";
  write_file_atomic(spec, text);
  return CtclSetup{data, encoder, topics, bart, spec};
}

std::map<int64_t, int64_t> ctcl_rows_per_topic(const fs::path& run) {
  std::map<int64_t, int64_t> n;
  for (const auto& f : fs::directory_iterator(run / "synthetic"))
    if (f.path().filename().string().rfind("topic-", 0) == 0)
      for (const auto& row : read_jsonl(f.path())) ++n[row.at("topic").get<int64_t>()];
  return n;
}
}  // namespace

TEST_CASE(
    "dpft run ctcl: topics, one histogram release, DP fine-tuning, apportioned synthesis, "
    "resume",
    "[ctcl][run]") {
  SHARED_DATA_OR_SKIP(roberta, "roberta_tokenizer");
  test::TempDir tmp;
  const auto setup = ctcl_setup(tmp, roberta);
  if (!setup) return;
  const fs::path data = setup->data;
  const std::string &encoder = setup->encoder, &topics = setup->topics, &bart = setup->bart,
                    &spec = setup->spec;
  const std::string text = read_file(spec);
  const std::string out = (tmp.path / "runs").string();
  std::string printed;
  REQUIRE(test::cli({"run", spec, "--out", out}, &printed) == 0);
  const fs::path run = test::last_line(printed);
  const auto m = nlohmann::json::parse(read_file(run / "metrics.json"));
  REQUIRE(m["status"] == "ok");
  // The ledger: the histogram once (sigma 10, whole data) and the T subsampled steps, together
  // within the budget and close to it (the steps' sigma was calibrated with the histogram in).
  const auto& rel = m["privacy"]["releases"];
  REQUIRE(rel.size() == 2);
  // No privacy.delta: ctcl's default 1 / (N ln N), N = 40, fixed in config.resolved.yaml; the
  // plan of `dpft account --spec` is the run's ledger.
  const double auto_delta = 1.0 / (40 * std::log(40.0));
  CHECK(m["privacy"]["delta"].get<double>() == Approx(auto_delta).epsilon(1e-12));
  CHECK(YAML::LoadFile((run / "config.resolved.yaml").string())["privacy"]["delta"].as<double>() ==
        Approx(auto_delta).epsilon(1e-12));
  std::string planned;
  REQUIRE(test::cli({"account", "--spec", spec, "--json"}, &planned) == 0);
  const auto plan = nlohmann::json::parse(planned);
  CHECK(plan["delta"] == m["privacy"]["delta"]);
  CHECK(plan["delta_source"] == "auto: 1 / (N ln N)");
  CHECK(plan["epsilon"] == m["privacy"]["epsilon"]);
  CHECK(rel[0]["label"] == "topic_histogram");
  CHECK(rel[0]["noise_multiplier"] == 10.0);
  CHECK(rel[0]["sampling_rate"] == 1.0);
  CHECK(rel[0]["count"] == 1);
  CHECK(rel[1]["count"] == 4);
  const double eps = m["privacy"]["epsilon"].get<double>();
  CHECK(eps <= 4.0);
  CHECK(eps > 3.9);
  // Synthesis follows the released histogram: 11 documents apportioned by largest remainder.
  const auto hist = nlohmann::json::parse(read_file(run / "topic_histogram.json"));
  const auto counts = hist["counts"].get<std::vector<int64_t>>();
  REQUIRE(counts.size() == 4);
  const auto seats = ctcl::apportion(counts, 11);
  const auto per_topic = ctcl_rows_per_topic(run);
  for (size_t k = 0; k < 4; ++k) {
    auto it = per_topic.find(static_cast<int64_t>(k));
    CHECK((it == per_topic.end() ? 0 : it->second) == seats[k]);
  }
  const auto& syn = m["synthetic"];
  CHECK(syn["requested"] == 11);
  CHECK(syn["kept"].get<int64_t>() + syn["dropped"].get<int64_t>() == 11);
  CHECK(static_cast<int64_t>(read_jsonl(run / "synthetic" / "synthetic.jsonl").size()) ==
        syn["kept"].get<int64_t>());
  CHECK(m["train"]["method"]["topics"] == 4);
  // The histogram and the synthetic set carry the run's provenance; no file of an export names
  // the private data by their SHA-256 or by a hash over it (the histogram's resume check).
  // (the histogram embodies its own release; the set, the histogram's and the training's)
  REQUIRE(hist["provenance"]["releases"].size() == 1);
  CHECK(hist["provenance"]["releases"][0]["label"] == "topic_histogram");
  const auto syn_prov = nlohmann::json::parse(read_file(run / "synthetic" / "provenance.json"));
  REQUIRE(syn_prov["releases"].size() == 2);
  CHECK(syn_prov["releases"][1]["count"] == 4);
  CHECK(syn_prov["private"] == true);
  const fs::path ex = tmp.path / "export";
  REQUIRE(test::cli({"export", run.string(), "--out", ex.string(), "--allow-seeded-noise"}) == 0);
  const auto ex_hist = nlohmann::json::parse(read_file(ex / "topic_histogram.json"));
  CHECK(ex_hist["counts"] == hist["counts"]);
  CHECK(ex_hist["provenance"] == hist["provenance"]);
  CHECK_FALSE(ex_hist.contains("integrity"));
  CHECK(hist.contains("integrity"));
  const std::string data_sha = sha256_file_hex(data);
  for (const auto& e : fs::recursive_directory_iterator(ex))
    if (e.is_regular_file()) {
      CAPTURE(e.path().string());
      const std::string bytes = read_file(e.path());
      CHECK(bytes.find(data_sha) == std::string::npos);
      CHECK(bytes.find(hist["integrity"].get<std::string>()) == std::string::npos);
    }

  // Stopped after step 2 and resumed: the histogram is not released again and the outputs
  // equal the uninterrupted run's.
  REQUIRE(test::cli({"run", spec, "--out", out, "--stop-after", "2"}, &printed) == 0);
  const fs::path part = test::last_line(printed);
  const std::string hist_before = read_file(part / "topic_histogram.json");
  REQUIRE(test::cli({"run", "--resume", part.string()}) == 0);
  const auto r = nlohmann::json::parse(read_file(part / "metrics.json"));
  CHECK(read_file(part / "topic_histogram.json") == hist_before);
  CHECK(
      nlohmann::json::parse(hist_before)["counts"] ==  // the same seeded release; the
      nlohmann::json::parse(read_file(run / "topic_histogram.json"))["counts"]);  // hash is per run
  CHECK(r["privacy"]["releases"] == rel);
  CHECK(r["privacy"]["epsilon"] == m["privacy"]["epsilon"]);
  CHECK(read_file(part / "synthetic" / "synthetic.jsonl") ==
        read_file(run / "synthetic" / "synthetic.jsonl"));
  CHECK(r["eval"] == m["eval"]);

  // SIGINT during synthesis (DPFT_SIGNAL_AT=ctcl_bins1: after the first bin's file is written):
  // exit 130, status interrupted, the checkpoint and that bin kept, no set committed; the resume
  // generates the other bins and writes the uninterrupted run's set, one histogram release.
  {
    const fs::path sig_out = tmp.path / "sig";
    const std::string cmd =
        fmt::format("DPFT_SIGNAL_AT=ctcl_bins1 '{}' --quiet run '{}' --out '{}' >/dev/null 2>&1",
                    DPFT_BINARY, spec, sig_out.string());
    const int rc = std::system(cmd.c_str());
    CHECK(WIFEXITED(rc));
    CHECK(WEXITSTATUS(rc) == 130);
    fs::path sig_run;
    for (const auto& e : fs::recursive_directory_iterator(sig_out))
      if (e.path().filename() == "metrics.json") sig_run = e.path().parent_path();
    REQUIRE_FALSE(sig_run.empty());
    CHECK(nlohmann::json::parse(read_file(sig_run / "metrics.json"))["status"] == "interrupted");
    CHECK(fs::exists(sig_run / "checkpoint"));
    CHECK_FALSE(fs::exists(sig_run / "synthetic" / "synthetic.jsonl"));
    int parts = 0;
    for (const auto& e : fs::directory_iterator(sig_run / "synthetic"))
      parts += e.path().filename().string().rfind("topic-", 0) == 0;
    CHECK(parts == 1);
    // A generated bin edited before the resume: refused (exit 3) with the file's name, not
    // mixed into the set; restored, the resume goes on.
    fs::path part_file;
    for (const auto& e : fs::directory_iterator(sig_run / "synthetic"))
      if (e.path().filename().string().rfind("topic-", 0) == 0) part_file = e.path();
    const std::string generated = read_file(part_file);
    std::string edited = generated;
    const size_t at = edited.find("\"text\":\"");
    REQUIRE(at != std::string::npos);
    edited.insert(at + 8, "EDITED ");
    write_file_atomic(part_file, edited);
    CHECK(test::cli({"run", "--resume", sig_run.string()}) == 3);
    CHECK_THAT(
        nlohmann::json::parse(read_file(sig_run / "manifest.json"))["error"].get<std::string>(),
        Contains(part_file.filename().string()) && Contains("changed after it was generated"));
    write_file_atomic(part_file, generated);
    REQUIRE(test::cli({"run", "--resume", sig_run.string()}) == 0);
    const auto sr = nlohmann::json::parse(read_file(sig_run / "metrics.json"));
    CHECK(sr["status"] == "ok");
    CHECK(sr["privacy"]["releases"] == rel);
    CHECK(read_file(sig_run / "synthetic" / "synthetic.jsonl") ==
          read_file(run / "synthetic" / "synthetic.jsonl"));
  }

  // A released histogram that cannot be read back is not released again: resume exits 3.
  REQUIRE(test::cli({"run", spec, "--out", out, "--stop-after", "1"}, &printed) == 0);
  const fs::path broken = test::last_line(printed);
  const std::string kept = read_file(broken / "topic_histogram.json");
  fs::remove(broken / "topic_histogram.json");  // gone: refused, not drawn again
  const std::string metrics_before = read_file(broken / "metrics.json");
  CHECK(test::cli({"run", "--resume", broken.string()}) == 3);
  CHECK_THAT(nlohmann::json::parse(read_file(broken / "manifest.json"))["error"].get<std::string>(),
             Contains("topic_histogram.json is missing"));
  CHECK_FALSE(fs::exists(broken / "topic_histogram.json"));
  CHECK(read_file(broken / "metrics.json") == metrics_before);  // the ledger stays recorded
  // Edited counts (a bin moved by one): refused, never used to apportion the set.
  nlohmann::json edited_hist = nlohmann::json::parse(kept);
  edited_hist["counts"][0] = edited_hist["counts"][0].get<int64_t>() + 1;
  write_file_atomic(broken / "topic_histogram.json", edited_hist.dump());
  CHECK(test::cli({"run", "--resume", broken.string()}) == 3);
  CHECK_THAT(nlohmann::json::parse(read_file(broken / "manifest.json"))["error"].get<std::string>(),
             Contains("changed after it was released"));
  write_file_atomic(broken / "topic_histogram.json", "{\"counts\": [1, 2");
  CHECK(test::cli({"run", "--resume", broken.string()}) == 3);
  write_file_atomic(broken / "topic_histogram.json", "{\"counts\": \"many\"}");
  CHECK(test::cli({"run", "--resume", broken.string()}) == 3);

  // keywords: false (Table 5's vanilla generator): no topics, no histogram, the whole budget to
  // the steps.
  REQUIRE(test::cli({"run", spec, "--out", out, "--set", "method.keywords=false"}, &printed) == 0);
  const auto v =
      nlohmann::json::parse(read_file(fs::path(test::last_line(printed)) / "metrics.json"));
  REQUIRE(v["privacy"]["releases"].size() == 1);
  CHECK(v["privacy"]["releases"][0]["label"] == "train");
  CHECK(v["privacy"]["noise_multiplier"].get<double>() <
        m["privacy"]["noise_multiplier"].get<double>());
  CHECK(v["synthetic"]["requested"] == 11);
  CHECK_FALSE(fs::exists(fs::path(test::last_line(printed)) / "topic_histogram.json"));
  // generation.subsets (Fig. 3): smaller sets from the same generation. Each bin is sampled as
  // often as the most seats any size gives it; every set, the main one included, is each
  // bin's first seats (as many as apportioning its N gives the bin), less the filter's drops.
  REQUIRE(test::cli({"run", spec, "--out", out, "--set", "method.generation.subsets=[9, 5]"},
                    &printed) == 0);
  const fs::path srun = test::last_line(printed);
  const auto sm = nlohmann::json::parse(read_file(srun / "metrics.json"));
  const auto scounts = nlohmann::json::parse(read_file(srun / "topic_histogram.json"))["counts"]
                           .get<std::vector<int64_t>>();
  CHECK(scounts == counts);  // the same seed: the same release
  CHECK(sm["privacy"]["releases"] == rel);
  REQUIRE(sm["synthetic"]["subsets"].size() == 2);
  for (int64_t n : {5, 9, 11}) {
    const nlohmann::json& e =
        n == 11 ? sm["synthetic"] : sm["synthetic"]["subsets"][n == 5 ? 0 : 1];
    CHECK(e["requested"] == n);
    const auto want = ctcl::apportion(scounts, n);
    std::vector<std::string> expect;
    for (size_t k = 0; k < want.size(); ++k) {
      if (want[k] == 0) continue;
      const auto part = read_jsonl(srun / "synthetic" / fmt::format("topic-{:05d}.jsonl", k));
      int64_t most = 0;
      for (int64_t m : {5, 9, 11}) most = std::max(most, ctcl::apportion(scounts, m)[k]);
      REQUIRE(static_cast<int64_t>(part.size()) == most);
      for (int64_t i = 0; i < want[k]; ++i)
        if (!part[static_cast<size_t>(i)].contains("dropped"))
          expect.push_back(part[static_cast<size_t>(i)]["text"]);
    }
    const auto got = read_jsonl(
        srun / "synthetic" / (n == 11 ? "synthetic.jsonl" : fmt::format("synthetic_n{}.jsonl", n)));
    std::vector<std::string> texts;
    for (const auto& g : got) texts.push_back(g["text"]);
    CHECK(texts == expect);
    CHECK(e["kept"] == static_cast<int64_t>(expect.size()));
    CHECK(e["kept"].get<int64_t>() + e["dropped"].get<int64_t>() == n);
  }
  // eval-synthetic --subset scores one of them under synthetic_eval.n<N>, with its N_syn; the
  // main set's N_syn is the run's requested count.
  const int64_t kept9 = sm["synthetic"]["subsets"][1]["kept"];
  if (kept9 > 1) {
    REQUIRE(test::cli({"eval-synthetic", "--run", srun.string(), "--subset", "9", "--real",
                       data.string(), "--embedder", encoder, "--k", "1", "--buckets", "2"}) == 0);
    const auto se = nlohmann::json::parse(read_file(srun / "metrics.json"))["synthetic_eval"];
    CHECK(se["n9"]["synthetic"]["requested"] == 9);
    CHECK(se["n9"]["synthetic"]["subset"] == true);
    CHECK(se["n9"]["synthetic"]["texts"] == kept9);
    REQUIRE(test::cli({"eval-synthetic", "--run", srun.string(), "--real", data.string(),
                       "--embedder", encoder, "--k", "1", "--buckets", "2"}) == 0);
    const auto se2 = nlohmann::json::parse(read_file(srun / "metrics.json"))["synthetic_eval"];
    CHECK(se2["main"]["synthetic"]["requested"] == 11);
    CHECK_FALSE(se2["main"]["synthetic"].contains("subset"));
    CHECK(se2["n9"] == se["n9"]);  // kept beside it
  } else {
    WARN("eval-synthetic --subset not exercised: the filter dropped all but " << kept9);
  }
  CHECK(test::cli({"eval-synthetic", "--run", srun.string(), "--subset", "4", "--real",
                   data.string(), "--embedder", encoder}) == 3);  // no such subset
  CHECK(test::cli({"eval-synthetic", "--subset", "9", "--synthetic", data.string(), "--real",
                   data.string(), "--embedder", encoder}) == 2);  // --subset needs --run
  // data.eval (a validation split for the lr): each eval document is given its own topic's
  // condition, as in training, so the generator's eval loss before any step equals that of a
  // plain seq2seq run whose sources are those conditions (topics from `dpft topics assign`).
  const fs::path assigned = tmp.path / "assigned.jsonl";
  REQUIRE(test::cli({"topics", "assign", "--topics", topics, "--input", data.string(), "--out",
                     assigned.string()}) == 0);
  const topics::TopicModel tm = topics::load(topics);
  std::string with_cond = "text,cond\n";
  const auto assigned_rows = read_jsonl(assigned);
  REQUIRE(assigned_rows.size() == 40);
  for (int i = 0; i < 40; ++i) {
    const int64_t k = assigned_rows[static_cast<size_t>(i)]["topic"];
    std::string cond = ctcl::condition("note", tm.keyword_line(k));
    cond = std::regex_replace(cond, std::regex("\""), "\"\"");
    with_cond += fmt::format("\"{} (case {})\",\"{}\"\n", themes[i % 4], i, cond);
  }
  const fs::path cond_data = tmp.write("with_cond.csv", with_cond);
  const std::string ref_spec =
      tmp.write("ref.yaml", "name: ref\nseed: 2\nmodel: {path: " + bart +
                                "}\ndata:\n  task: seq2seq\n  train: {path: " + cond_data.string() +
                                ", text_column: text, prompt_column: cond}\n  eval: {path: " +
                                cond_data.string() +
                                ", text_column: text, prompt_column: cond}\n  max_length: 32\n"
                                "privacy: {epsilon: .inf}\ntrain: {steps: 1, batch_size: 10, "
                                "lr: 0.001}\nmethod: {name: sgd}\n")
          .string();
  REQUIRE(test::cli({"run", ref_spec, "--out", out}, &printed) == 0);
  const auto ref =
      nlohmann::json::parse(read_file(fs::path(test::last_line(printed)) / "metrics.json"));
  REQUIRE(test::cli({"run", spec, "--out", out, "--set", "data.eval.path=" + data.string(), "--set",
                     "data.eval.text_column=text", "--set", "method.max_source_length=32"},
                    &printed) == 0);
  const auto ev =
      nlohmann::json::parse(read_file(fs::path(test::last_line(printed)) / "metrics.json"));
  // (eval = the training documents: a statistic of the private data, in the non_private block)
  const double ref_loss = ref["non_private"]["eval"]["base"]["loss"],
               ctcl_loss = ev["non_private"]["eval"]["base"]["loss"];
  CHECK(ctcl_loss == Approx(ref_loss).epsilon(1e-6));
  // ... and not the loss given other sources (the check above would pass by accident otherwise).
  REQUIRE(test::cli({"run", ref_spec, "--out", out, "--set", "data.eval.prompt_column=text"},
                    &printed) == 0);
  const auto bare =
      nlohmann::json::parse(read_file(fs::path(test::last_line(printed)) / "metrics.json"));
  CHECK(std::abs(bare["non_private"]["eval"]["base"]["loss"].get<double>() - ref_loss) > 1e-4);

  // The method makes the eval sources: a source column on data.eval is refused.
  CHECK(test::cli({"run", spec, "--out", out, "--set", "data.eval.path=" + data.string(), "--set",
                   "data.eval.prompt_column=text"}) == 2);
  // Sizes must be distinct and below num_synthetic.
  CHECK(test::cli({"run", spec, "--out", out, "--set", "method.generation.subsets=[11]"}) == 2);
  CHECK(test::cli({"run", spec, "--out", out, "--set", "method.generation.subsets=[5, 5]"}) == 2);

  // Refusals: another task, a source column, no topic model.
  CHECK(test::cli({"run", spec, "--out", out, "--set", "data.task=lm"}) == 2);
  CHECK(test::cli({"run", spec, "--out", out, "--set", "data.train.prompt=x"}) == 2);
  const std::string no_topics = (tmp.path / "no_topics.yaml").string();
  write_file_atomic(no_topics, text.substr(0, text.find("  topic_model:")) +
                                   text.substr(text.find("  doc_type:")));
  CHECK(test::cli({"run", no_topics, "--out", out}) == 2);

  // A labelled set: the class goes into each condition and the histogram counts (topic, class)
  // bins (4 topics x 2 classes); every synthetic row carries its class's label column.
  std::string labelled = "text,stars\n";
  for (int i = 0; i < 40; ++i)
    labelled += fmt::format("\"{} (case {})\",Stars: {}\n", themes[i % 4], i, 1 + i % 2);
  const fs::path ldata = tmp.write("labelled.csv", labelled);
  std::string ltext = text;
  ltext.replace(ltext.find(data.string()), data.string().size(), ldata.string());
  ltext += "";
  const std::string lspec = (tmp.path / "ctcl-labelled.yaml").string();
  write_file_atomic(lspec, ltext.substr(0, ltext.find("  doc_type:")) +
                               "  label_columns: [stars]\n"
                               "  label_values: [[\"Stars: 1\", \"Stars: 2\"]]\n" +
                               ltext.substr(ltext.find("  doc_type:")));
  REQUIRE(test::cli({"run", lspec, "--out", out}, &printed) == 0);
  const fs::path lrun = test::last_line(printed);
  const auto lm = nlohmann::json::parse(read_file(lrun / "metrics.json"));
  REQUIRE(lm["privacy"]["releases"].size() == 2);
  CHECK(lm["privacy"]["releases"][0]["label"] == "topic_histogram");
  const auto lcounts = nlohmann::json::parse(read_file(lrun / "topic_histogram.json"))["counts"]
                           .get<std::vector<int64_t>>();
  REQUIRE(lcounts.size() == 8);
  const auto lseats = ctcl::apportion(lcounts, 11);
  std::map<int64_t, int64_t> per_bin;
  for (const auto& f : fs::directory_iterator(lrun / "synthetic"))
    if (f.path().filename().string().rfind("topic-", 0) == 0)
      for (const auto& row : read_jsonl(f.path())) {
        const int64_t c = row.at("stars") == "Stars: 1" ? 0 : 1;
        CHECK((row.at("stars") == "Stars: 1" || row.at("stars") == "Stars: 2"));
        ++per_bin[row.at("topic").get<int64_t>() * 2 + c];
      }
  for (int64_t b = 0; b < 8; ++b) {
    auto it = per_bin.find(b);
    CHECK((it == per_bin.end() ? 0 : it->second) == lseats[static_cast<size_t>(b)]);
  }
  for (const auto& row : read_jsonl(lrun / "synthetic" / "synthetic.jsonl"))
    CHECK(row.contains("stars"));
  // A label outside the public values is refused (exit 3).
  const std::string lbad = (tmp.path / "ctcl-bad.yaml").string();
  std::string bad_text = read_file(lspec);
  bad_text.replace(bad_text.find("\"Stars: 2\""), 10, "\"Stars: 9\"");
  write_file_atomic(lbad, bad_text);
  CHECK(test::cli({"run", lbad, "--out", out}) == 3);
  // Its audit: every canary document a class of the public values; the private documents keep
  // theirs in the run's training file.
  const fs::path aud = tmp.path / "audit";
  REQUIRE(test::cli({"audit", lspec, "--canaries", "10", "--canary-tokens", "3", "--out",
                     aud.string(), "--set", "train.steps=1"}) == 0);
  std::set<std::string> drawn;
  for (const auto& row : read_jsonl(aud / "canaries.jsonl")) {
    drawn.insert(row.at("stars").get<std::string>());
    CHECK((row.at("stars") == "Stars: 1" || row.at("stars") == "Stars: 2"));
  }
  CHECK(drawn.size() == 2);
  const std::vector<nlohmann::json> joined = read_jsonl(aud / "train_with_canaries.jsonl");
  REQUIRE(joined.size() >= 40);
  CHECK(joined[0] ==
        nlohmann::json{{"text", themes[0] + std::string(" (case 0)")}, {"stars", "Stars: 1"}});
  CHECK(joined[1]["stars"] == "Stars: 2");
}

TEST_CASE("dpft run ctcl at user level: one row per user is example level; a user in one bin",
          "[ctcl][run][privacy]") {
  SHARED_DATA_OR_SKIP(roberta, "roberta_tokenizer");
  test::TempDir tmp;
  const auto own = ctcl_setup(tmp, roberta, 1);
  if (!own) return;
  const std::string out = (tmp.path / "runs").string();
  const std::vector<std::string> user = {"--set", "privacy.unit=user", "--set",
                                         "data.train.user_column=who"};
  auto run = [&](const std::string& spec, const std::vector<std::string>& extra) {
    std::vector<std::string> a = {"run", spec, "--out", out};
    a.insert(a.end(), extra.begin(), extra.end());
    std::string printed;
    REQUIRE(test::cli(a, &printed) == 0);
    return fs::path(test::last_line(printed));
  };
  const fs::path ex = run(own->spec, {}), us = run(own->spec, user);
  const auto me = nlohmann::json::parse(read_file(ex / "metrics.json"));
  const auto mu = nlohmann::json::parse(read_file(us / "metrics.json"));
  CHECK(mu["privacy"]["unit"]["count"] == 40);
  CHECK(mu["privacy"]["epsilon"] == me["privacy"]["epsilon"]);
  CHECK(mu["eval"] == me["eval"]);
  CHECK(nlohmann::json::parse(read_file(us / "topic_histogram.json"))["counts"] ==
        nlohmann::json::parse(read_file(ex / "topic_histogram.json"))["counts"]);
  CHECK(read_file(us / "synthetic" / "synthetic.jsonl") ==
        read_file(ex / "synthetic" / "synthetic.jsonl"));
  // Two documents per user: N = 20 users, q = B / N = 10 / 20 over users (privacy.delta set:
  // 1 / (N ln N) is refused for so few), the histogram and the steps within the budget.
  test::TempDir tmp4;
  const auto four = ctcl_setup(tmp4, roberta, 2);
  REQUIRE(four);
  std::vector<std::string> with_delta = user;
  with_delta.insert(with_delta.end(), {"--set", "privacy.delta=1e-5"});
  const auto m4 = nlohmann::json::parse(read_file(run(four->spec, with_delta) / "metrics.json"));
  CHECK(m4["status"] == "ok");
  CHECK(m4["privacy"]["unit"] == nlohmann::json{{"unit", "user"}, {"count", 20}});
  CHECK(m4["privacy"]["releases"][1]["sampling_rate"] == 0.5);
  CHECK(m4["privacy"]["epsilon"].get<double>() <= 4.0);
  CHECK(m4["privacy"]["releases"][0]["label"] == "topic_histogram");
}

namespace {
// The ctcl setting of the audit: the generator trained in full, long enough to learn documents.
std::optional<CtclSetup> ctcl_audit_setup(test::TempDir& tmp, const fs::path& roberta) {
  auto setup = ctcl_setup(tmp, roberta);
  if (!setup) return setup;
  std::string text = read_file(setup->spec);
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"}\ndata:", ", peft: {kind: full, targets: [all]}}\ndata:"},
           {"steps: 4, batch_size: 10, lr: 0.001", "steps: 30, batch_size: 20, lr: 0.003"}}) {
    const size_t at = text.find(from);
    REQUIRE(at != std::string::npos);
    text.replace(at, from.size(), to);
  }
  write_file_atomic(setup->spec, text);
  return setup;
}
nlohmann::json ctcl_audit(const CtclSetup& setup, const fs::path& out,
                          const std::vector<std::string>& extra) {
  std::vector<std::string> a = {"audit",           setup.spec, "--canaries", "60",
                                "--canary-tokens", "5",        "--out",      out.string()};
  a.insert(a.end(), extra.begin(), extra.end());
  REQUIRE(test::cli(a) == 0);
  return nlohmann::json::parse(read_file(out / "audit.json"));
}
}  // namespace

TEST_CASE("dpft audit of ctcl: canary documents join the private file, scored by the generator",
          "[ctcl][run][audit-run]") {
  SHARED_DATA_OR_SKIP(roberta, "roberta_tokenizer");
  test::TempDir tmp;
  const auto setup = ctcl_audit_setup(tmp, roberta);
  if (!setup) return;
  const fs::path dir = tmp.path / "inf";
  const nlohmann::json inf = ctcl_audit(*setup, dir, {"--set", "privacy.epsilon=inf"});
  CHECK(inf["method"] == "ctcl");
  CHECK(inf["score_formula"] == "base loss - final loss of the document given its bin's condition");
  // The run's private file: the 40 documents, then exactly the included canaries; the run
  // released its histogram of all of them.
  const std::vector<nlohmann::json> used = read_jsonl(dir / "train_with_canaries.jsonl"),
                                    in = read_jsonl(dir / "canaries_in.jsonl");
  REQUIRE(used.size() == 40 + in.size());
  REQUIRE(!in.empty());
  CHECK(used[40]["text"] == in[0]["text"]);
  const nlohmann::json hist = nlohmann::json::parse(
      read_file(fs::path(inf["run_dir"].get<std::string>()) / "topic_histogram.json"));
  int64_t counted = 0;
  for (const auto& c : hist.at("counts")) counted += c.get<int64_t>();
  CHECK(counted == static_cast<int64_t>(used.size()));  // no noise: the true counts
  // Without noise the included documents were learnt: 2.13 measured on the 2-core dev VM.
  WARN("ctcl canary documents, no noise: lower bound " << inf["eps_lower_bound"]);
  CHECK(inf["score_mean_included"].get<double>() > inf["score_mean_excluded"].get<double>());
  CHECK(inf["eps_lower_bound"].get<double>() > 0.5);
}

TEST_CASE("dpft audit of ctcl with DP: never above the reported epsilon, 3 seeds",
          "[ctcl][run][audit-run][slow]") {
  SHARED_DATA_OR_SKIP(roberta, "roberta_tokenizer");
  test::TempDir tmp;
  const auto setup = ctcl_audit_setup(tmp, roberta);
  if (!setup) return;
  for (const std::string seed : {"0", "1", "2"}) {
    const nlohmann::json dp = ctcl_audit(*setup, tmp.path / ("dp" + seed),
                                         {"--set", "privacy.delta=1e-5", "--set", "seed=" + seed,
                                          "--set", "privacy.noise_seed=" + seed});
    WARN("ctcl canary documents, epsilon " << dp["reported_epsilon"] << ", seed " << seed
                                           << ": lower bound " << dp["eps_lower_bound"]);
    CHECK(dp["reported_epsilon"].get<double>() <= 4.0 + 1e-9);
    CHECK(dp["eps_lower_bound"].get<double>() <= dp["reported_epsilon"].get<double>());
    CHECK_FALSE(dp["violation"].get<bool>());
  }
}
