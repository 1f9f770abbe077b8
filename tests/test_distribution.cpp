// Distribution measures (core/eval/distribution.hpp, CTCL issue 25 part 5): FID, precision /
// recall and MAUVE against the independent reference tests/reference/ref_distribution.py
// (numpy, scipy: Debian's python3-numpy / python3-scipy, installed by scripts/setup.sh), and
// their defining cases (identical sets, a shift, disjoint clusters).
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cmath>
#include <cstdlib>

#include "core/eval/distribution.hpp"
#include "core/topics/topic_model.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "test_util.hpp"

using namespace dpft;

namespace {

bool have_scipy() {
  return std::system("/usr/bin/python3 -c 'import numpy, scipy' >/dev/null 2>&1") == 0;
}

nlohmann::json rows_json(const torch::Tensor& x) {
  nlohmann::json j = nlohmann::json::array();
  auto a = x.accessor<double, 2>();
  for (int64_t i = 0; i < x.size(0); ++i) {
    std::vector<double> r;
    for (int64_t c = 0; c < x.size(1); ++c) r.push_back(a[i][c]);
    j.push_back(r);
  }
  return j;
}

}  // namespace

TEST_CASE("FID, precision / recall and MAUVE's frontier equal an independent reference",
          "[eval][distribution]") {
  if (!have_scipy()) {
    WARN("skipped: no /usr/bin/python3 with numpy and scipy (scripts/setup.sh installs them)");
    return;
  }
  torch::manual_seed(3);
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  const torch::Tensor real = torch::randn({60, 5}, f64),
                      synth = torch::randn({50, 5}, f64) * 1.3 + 0.4;
  // Histograms with an empty bucket in each and one empty in both.
  const std::vector<double> p = {0.25, 0, 0.25, 0.5, 0}, q = {0.1, 0.3, 0.2, 0.4, 0};
  test::TempDir d;
  const nlohmann::json in = {{"real", rows_json(real)}, {"synth", rows_json(synth)}, {"k", 4},
                             {"p_hist", p},             {"q_hist", q}};
  const fs::path input = d.write("in.json", in.dump()), out = d.path / "ref.json";
  const std::string cmd = "/usr/bin/python3 " +
                          (fs::path(DPFT_SOURCE_DIR) / "tests/reference/ref_distribution.py").string() +
                          " " + input.string() + " > " + out.string();
  REQUIRE(std::system(cmd.c_str()) == 0);
  const nlohmann::json ref = nlohmann::json::parse(read_file(out));
  CHECK(eval::fid(real, synth) == Approx(ref["fid"].get<double>()).epsilon(1e-9));
  const eval::PrecisionRecall pr = eval::precision_recall(real, synth, 4);
  CHECK(pr.precision == ref["precision"].get<double>());
  CHECK(pr.recall == ref["recall"].get<double>());
  CHECK(pr.precision > 0);
  CHECK(pr.precision < 1);
  const eval::MauveResult m = eval::mauve_from_histograms(p, q);
  CHECK(m.mauve == Approx(ref["mauve"].get<double>()).epsilon(1e-12));
  CHECK(m.frontier_integral == Approx(ref["frontier_integral"].get<double>()).epsilon(1e-12));
  CHECK(m.curve.size() == 27);
  CHECK(m.mauve > 0.5);
  CHECK(m.mauve < 1);
  if (topics::have_faiss()) {  // the PCA's kept dimensions (the k-means is faiss's)
    eval::MauveOptions o;
    o.buckets = 5;
    CHECK(eval::mauve(real, synth, o).pca_dims == ref["pca_dims"].get<int64_t>());
  }
}

TEST_CASE("distribution measures: identical sets, a shift, disjoint clusters, bad input",
          "[eval][distribution]") {
  torch::manual_seed(4);
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  const torch::Tensor x = torch::randn({80, 6}, f64), v = torch::randn({6}, f64);
  CHECK(std::abs(eval::fid(x, x)) < 1e-9);
  // A shift leaves the covariances equal: FID is exactly the squared shift.
  CHECK(eval::fid(x, x + v) == Approx(v.pow(2).sum().item<double>()).epsilon(1e-9));
  const eval::PrecisionRecall same = eval::precision_recall(x, x, 3);
  CHECK(same.precision == 1.0);
  CHECK(same.recall == 1.0);
  const eval::PrecisionRecall far = eval::precision_recall(x, x + 100, 3);
  CHECK(far.precision == 0.0);
  CHECK(far.recall == 0.0);
  CHECK(eval::mauve_from_histograms({0.2, 0.3, 0.5}, {0.2, 0.3, 0.5}).mauve ==
        Approx(1.0).epsilon(1e-12));
  // Disjoint supports: the curve is ((1 - w)^c, w^c), a sliver near the axes.
  CHECK(eval::mauve_from_histograms({0.5, 0.5, 0}, {0, 0, 1}).mauve < 0.01);
  CHECK(eval::mauve_from_histograms({0.2, 0.3, 0.5}, {0.2, 0.3, 0.5}).frontier_integral ==
        Approx(0.0).margin(1e-15));
  CHECK_THROWS_AS(eval::fid(x, torch::randn({5, 4}, f64)), InputError);
  CHECK_THROWS_AS(eval::precision_recall(x, x.slice(0, 0, 3), 3), InputError);
  torch::Tensor bad = x.clone();
  bad[0][0] = std::nan("");
  CHECK_THROWS_AS(eval::fid(x, bad), InputError);
  CHECK_THROWS_AS(eval::mauve_from_histograms({0.5, 0.5}, {1.0}), InputError);
  if (!topics::have_faiss()) {
    WARN("skipped: MAUVE's k-means needs faiss (libfaiss-dev)");
    return;
  }
  // Two draws of one distribution score high; two far-apart clusters score near 0.
  const torch::Tensor a = torch::randn({300, 8}, f64), b = torch::randn({300, 8}, f64);
  const torch::Tensor shifted = b + torch::full({8}, 3.0, f64);
  const eval::MauveResult near = eval::mauve(a, b), apart = eval::mauve(a, shifted);
  CHECK(near.buckets == 30);
  CHECK(near.mauve > 0.8);
  CHECK(apart.mauve < 0.1);
  CHECK(near.frontier_integral < apart.frontier_integral);
  double sp = 0, sq = 0;
  for (size_t i = 0; i < near.p_hist.size(); ++i) sp += near.p_hist[i], sq += near.q_hist[i];
  CHECK(sp == Approx(1.0));
  CHECK(sq == Approx(1.0));
}

TEST_CASE("dpft eval-synthetic: same-domain texts score close, other texts far; errors",
          "[eval][distribution][cli]") {
  if (!topics::have_faiss()) {
    WARN("skipped: MAUVE's k-means needs faiss (libfaiss-dev)");
    return;
  }
  // Everything from the repository: the PubMed sample and the tiny RoBERTa as the embedder.
  const fs::path src(DPFT_SOURCE_DIR), pub = src / "experiments/data/pubmed_sample";
  test::TempDir d;
  std::string other = "text\n";  // short restaurant descriptions, nothing like PubMed abstracts
  for (int i = 0; i < 100; ++i)
    other += fmt::format("The Eagle {} is a cheap pub near the river with a rating of {}.\n", i,
                         1 + i % 5);
  const fs::path other_csv = d.write("other.csv", other);
  auto eval = [&](const std::string& synth, const std::string& out) {
    return test::cli({"eval-synthetic", "--real", (pub / "eval.csv").string(), "--synthetic",
                      synth, "--embedder", (src / "models/tiny-roberta").string(),
                      "--max-real", "100", "--max-synthetic", "100", "--max-length", "48",
                      "--out", out});
  };
  const std::string near_json = (d.path / "near.json").string(),
                    far_json = (d.path / "far.json").string();
  REQUIRE(eval((pub / "train.csv").string(), near_json) == 0);
  REQUIRE(eval(other_csv.string(), far_json) == 0);
  const auto near = nlohmann::json::parse(read_file(near_json)),
             far = nlohmann::json::parse(read_file(far_json));
  CHECK(near["real"]["texts"] == 100);
  CHECK(near["mauve"]["buckets"] == 10);
  CHECK(near["precision_recall"]["k"] == 10);
  CHECK(near["embedder"].contains("params_sha256"));
  CHECK(near["mauve"]["mauve"].get<double>() > 0.5);
  CHECK(far["mauve"]["mauve"].get<double>() < near["mauve"]["mauve"].get<double>() - 0.3);
  CHECK(far["fid"].get<double>() > near["fid"].get<double>());
  CHECK(far["precision_recall"]["precision"].get<double>() <
        near["precision_recall"]["precision"].get<double>());
  // Too few texts for --k, and a missing file: input errors (exit 3).
  CHECK(test::cli({"eval-synthetic", "--real", (pub / "eval.csv").string(), "--synthetic",
                   other_csv.string(), "--embedder", (src / "models/tiny-roberta").string(),
                   "--k", "200"}) == 3);
  CHECK(test::cli({"eval-synthetic", "--real", (d.path / "none.csv").string(), "--synthetic",
                   other_csv.string(), "--embedder", (src / "models/tiny-roberta").string()}) ==
        3);
}

TEST_CASE(
    "dpft eval-synthetic --lm: a causal LM trained on in-domain texts predicts the real ones "
    "better",
    "[eval][distribution][cli]") {
  SHARED_DATA_OR_SKIP(vocab, "bert_base_uncased_vocab");
  if (!topics::have_faiss()) {
    WARN("skipped: MAUVE's k-means needs faiss (libfaiss-dev)");
    return;
  }
  const fs::path src(DPFT_SOURCE_DIR), pub = src / "experiments/data/pubmed_sample";
  test::TempDir d;
  std::string other = "text\n";
  for (int i = 0; i < 40; ++i)
    other += fmt::format("The Eagle {} is a cheap pub near the river with a rating of {}.\n", i,
                         1 + i % 5);
  const fs::path other_csv = d.write("other.csv", other);
  auto lm = [&](const std::string& synth, const std::string& name) {
    const std::string out = (d.path / name).string();
    REQUIRE(test::cli({"eval-synthetic",
                       "--real",
                       (pub / "eval.csv").string(),
                       "--synthetic",
                       synth,
                       "--embedder",
                       (src / "models/tiny-roberta").string(),
                       "--max-real",
                       "40",
                       "--max-synthetic",
                       "40",
                       "--max-length",
                       "32",
                       "--lm",
                       "--lm-tokenizer",
                       vocab.string(),
                       "--lm-preset",
                       "tiny",
                       "--lm-steps",
                       "12",
                       "--lm-batch",
                       "8",
                       "--lm-lr",
                       "0.002",
                       "--lm-max-length",
                       "32",
                       "--out",
                       out}) == 0);
    return nlohmann::json::parse(read_file(out))["downstream_lm"];
  };
  const auto in = lm((pub / "train.csv").string(), "in.json"),
             off = lm(other_csv.string(), "off.json");
  CHECK(in["steps"] == 12);
  CHECK(fs::exists(fs::path(in["run_dir"].get<std::string>()) / "metrics.json"));
  CHECK(fs::exists(d.path / "in.json.work" / "lm-init" / "config.json"));
  CHECK(in["eval_tokens"].get<int64_t>() > 40 * 10);  // every real token of the 40 texts
  CHECK(in["eval_tokens"] == off["eval_tokens"]);
  CHECK(in["perplexity"].get<double>() < off["perplexity"].get<double>());
  CHECK(in["next_token_accuracy"].get<double>() > 0);
  // --lm without a tokenizer is a config error (exit 2).
  CHECK(test::cli({"eval-synthetic", "--real", (pub / "eval.csv").string(), "--synthetic",
                   other_csv.string(), "--embedder", (src / "models/tiny-roberta").string(),
                   "--max-real", "20", "--max-synthetic", "20", "--k", "3", "--lm", "--out",
                   (d.path / "x.json").string()}) == 2);
}

TEST_CASE(
    "dpft eval-synthetic --classify: a classifier learns the synthetic labels and is scored "
    "on the real ones",
    "[eval][distribution][cli]") {
  if (!topics::have_faiss()) {
    WARN("skipped: MAUVE's k-means needs faiss (libfaiss-dev)");
    return;
  }
  // Polarity words in templates: learnable in a few steps. Trained on flipped labels the
  // classifier must be wrong on the real texts, so the score follows the synthetic labels.
  const std::vector<std::string> pos = {"great", "wonderful", "excellent", "lovely", "superb"},
                                 neg = {"terrible", "awful", "bad", "dreadful", "horrible"},
                                 fill = {"the film was", "this movie is", "a story that is",
                                         "acting that was", "an ending so"};
  auto rows = [&](int n, int offset, bool flip) {
    std::string s = "text,label\n";
    for (int i = 0; i < n; ++i) {
      const int l = i % 2, j = (i * 7 + offset) % 5, f = (i * 3 + offset) % 5;
      s += fmt::format("{} {},{}\n", fill[static_cast<size_t>(f)],
                       (l ? pos : neg)[static_cast<size_t>(j)], flip ? 1 - l : l);
    }
    return s;
  };
  test::TempDir d;
  const fs::path src(DPFT_SOURCE_DIR), real = d.write("real.csv", rows(24, 1, false));
  auto accuracy = [&](bool flip, const std::string& name) {
    const fs::path syn = d.write(name + ".csv", rows(64, 0, flip));
    const std::string out = (d.path / (name + ".json")).string();
    REQUIRE(test::cli({"eval-synthetic",
                       "--real",
                       real.string(),
                       "--synthetic",
                       syn.string(),
                       "--embedder",
                       (src / "models/tiny-roberta").string(),
                       "--k",
                       "3",
                       "--classify",
                       "--classifier-from",
                       (src / "models/tiny-roberta").string(),
                       "--labels",
                       "0,1",
                       "--clf-steps",
                       "20",
                       "--clf-batch",
                       "16",
                       "--clf-lr",
                       "0.001",
                       "--clf-max-length",
                       "16",
                       "--out",
                       out}) == 0);
    const auto j = nlohmann::json::parse(read_file(out))["downstream_classifier"];
    CHECK(j["labels"] == std::vector<std::string>{"0", "1"});
    CHECK(j.contains("macro_f1"));
    // the real texts' loss (the scorer's lr is selected by it: experiments/ctcl/run.sh)
    CHECK(j["loss"].get<double>() > 0.0);
    return j["accuracy"].get<double>();
  };
  const double right = accuracy(false, "right"), flipped = accuracy(true, "flipped");
  CHECK(right > 0.7);
  CHECK(flipped < 0.3);
  // --classify without --labels is a config error (exit 2); a label outside --labels an input
  // error (exit 3).
  CHECK(test::cli({"eval-synthetic", "--real", real.string(), "--synthetic", real.string(),
                   "--embedder", (src / "models/tiny-roberta").string(), "--k", "3", "--classify",
                   "--classifier-from", (src / "models/tiny-roberta").string()}) == 2);
  CHECK(test::cli({"eval-synthetic", "--real", real.string(), "--synthetic", real.string(),
                   "--embedder", (src / "models/tiny-roberta").string(), "--k", "3", "--classify",
                   "--classifier-from", (src / "models/tiny-roberta").string(), "--labels",
                   "neg,pos", "--clf-steps", "2", "--out", (d.path / "bad.json").string()}) == 3);
}
