// privacy.unit user for every method that trains on the run fixture (dp-sgd's own test is in
// test_train_engine.cpp; ctcl's and pe / aug-pe's in test_ctcl.cpp and
// test_private_evolution.cpp): with one row per user a user-level run is the example-level run
// bit for bit (the same secret stream, the same sums); with several rows per user it runs,
// counts users in its N and names the unit in metrics.json. The sums' sensitivity per user is
// tested against slow references in test_train_engine.cpp. privacy.unit document: packing
// within documents against each document tokenised whole, and dp-sgd's runs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>

#include <cmath>

#include "core/tokenizer/load.hpp"
#include "core/train/adaptive_clip.hpp"
#include "data/encoder_lm.hpp"
#include "data/lm_dataset.hpp"
#include "mechanism_util.hpp"
#include "methods/registry.hpp"
#include "run_fixture.hpp"

using namespace dpft;
using test::Fixture;
using test::make_fixture;
using test::run_metrics;

namespace {

// Each method's options on the fixture (a few steps; the PE-SGD family's synthetic sets small).
std::vector<std::string> method_args(const std::string& m) {
  const std::string prompts = std::string(DPFT_SOURCE_DIR) + "/experiments/prompts/pubmed.yaml";
  std::vector<std::string> a = {"--set", "method.name=" + m, "--set", "privacy.epsilon=4",
                                "--set", "train.steps=3"};
  if (m == "dp-sft")
    a.insert(a.end(), {"--set", "method.k=2", "--set", "method.stage1.steps=2", "--set",
                       "model.peft.targets=[c_attn]", "--set", "model.peft.r=2"});
  if (m != "dp-sft" && m != "denoise")
    a.insert(a.end(), {"--set", "method.prompts=" + prompts, "--set", "method.synthetic_size=4",
                       "--set", "method.generation.max_new_tokens=6"});
  return a;
}

std::vector<std::string> cat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST_CASE("every trained method at user level: one row per user is example level bit for bit",
          "[privacy][units]") {
  Fixture f;
  make_fixture(f);
  const std::string out = (f.tmp.path / "runs").string();
  const std::string own = test::write_user_rows(f, "own.jsonl", 1);
  const std::string few = test::write_user_rows(f, "few.jsonl", 4);  // 100 users of 4 rows
  for (std::string m : {"denoise", "dp-sft", "pe-sgd", "pdp-sgd", "gep", "inpro", "sft+dp-sgd"}) {
    CAPTURE(m);
    const auto example = run_metrics(f, out,
                                     cat(method_args(m), {"--set", "data.train.path=" + own,
                                                          "--set", "data.train.num_samples=0"}));
    const auto per_user = run_metrics(f, out, cat(method_args(m), test::user_level_args(own)));
    CHECK(per_user["eval"] == example["eval"]);
    CHECK(per_user[kNonPrivate]["history"] == example[kNonPrivate]["history"]);
    CHECK(per_user["privacy"]["epsilon"] == example["privacy"]["epsilon"]);
    CHECK(per_user["privacy"]["releases"] == example["privacy"]["releases"]);
    CHECK(per_user["privacy"]["unit"]["count"] == 400);
    // Four rows per user: N = 100 users, every step's lot holds whole users (at most 4 rows
    // each), the same budget spent over users.
    const auto grouped = run_metrics(f, out, cat(method_args(m), test::user_level_args(few)));
    CHECK(grouped["status"] == "ok");
    CHECK(grouped["privacy"]["unit"] == nlohmann::json{{"unit", "user"}, {"count", 100}});
    CHECK(grouped["privacy"]["epsilon"].get<double>() <= 4.0);
    int64_t units = 0, steps = 0;
    for (const auto& h : grouped[kNonPrivate]["history"]) {
      if (h.contains("rows")) CHECK(h["rows"].get<int64_t>() <= 4 * h["batch_size"].get<int64_t>());
      units += h["batch_size"].get<int64_t>();
      ++steps;
    }
    CHECK(units > 0);
    // The lot counts users: q N = 6 expected a step (train.batch_size), not the ~24 rows they
    // hold; twice the expectation bounds a Poisson total over the run's steps.
    CHECK(units <= 12 * steps);
    CHECK(grouped["eval"]["final"]["loss"] != example["eval"]["final"]["loss"]);
  }
}

TEST_CASE("privacy.unit document: packing keeps each document's blocks apart, one unit each",
          "[privacy][units]") {
  const tok::Tokenizer tk = tok::load_tokenizer(fs::path(DPFT_SOURCE_DIR) / "models" / "tiny-gpt2");
  std::vector<lm::Example> docs;
  for (int i = 0; i < 12; ++i) {
    lm::Example e;
    e.index = 3 * i;  // the file's row numbers, not positions
    e.text = i == 5 ? "" : fmt::format("document {} says {}", i, std::string(4 + 3 * i, 'x'));
    docs.push_back(e);
  }
  data::LmDataOptions o;
  o.max_length = 8;
  o.packing = true;
  o.within_documents = true;
  const lm::LmDataset ds = data::build_lm_dataset(docs, tk, o);
  // The reference: each document on its own, untruncated, with its eos.
  data::LmDataOptions whole;
  whole.max_length = 1 << 20;
  const lm::LmDataset ref = data::build_lm_dataset(docs, tk, whole);  // the empty one dropped
  REQUIRE(ref.items.size() == 11);
  std::map<int64_t, std::vector<int32_t>> joined;
  for (const auto& t : ds.items) {
    CHECK(t.ids.size() <= 8);
    auto& j = joined[t.index];
    j.insert(j.end(), t.ids.begin(), t.ids.end());
  }
  for (const auto& t : ref.items) {  // the document's tokens in order (a 1-token tail dropped)
    const auto& j = joined[t.index];
    REQUIRE(j.size() <= t.ids.size());
    CHECK(t.ids.size() - j.size() <= 1);
    CHECK(std::equal(j.begin(), j.end(), t.ids.begin()));
  }
  CHECK(joined.size() == 11);
  CHECK(ds.items.size() > 11);  // long documents span several blocks
}

TEST_CASE("privacy.unit document: an encoder's packing keeps each document's blocks apart",
          "[privacy][units]") {
  const auto tk =
      tok::EncoderTokenizer::load(fs::path(DPFT_SOURCE_DIR) / "models" / "tiny-roberta");
  std::vector<lm::Example> docs;
  for (int i = 0; i < 12; ++i) {
    lm::Example e;
    e.index = 3 * i;
    e.text = i == 5 ? "" : fmt::format("document {} says {}", i, std::string(4 + 3 * i, 'x'));
    docs.push_back(e);
  }
  const lm::LmDataset ds =
      data::build_encoder_lm_dataset(docs, tk, 8, true, lm::Objective::kNextToken, true);
  // The reference: each document on its own, untruncated: <s> text </s>.
  const lm::LmDataset ref =
      data::build_encoder_lm_dataset(docs, tk, 1 << 20, false, lm::Objective::kNextToken);
  REQUIRE(ref.items.size() == 11);
  std::map<int64_t, std::vector<int32_t>> joined;  // each document's block bodies in order
  for (const auto& t : ds.items) {
    REQUIRE(t.ids.size() >= 3);
    CHECK(t.ids.size() <= 8);
    CHECK(t.ids.front() == ref.items[0].ids.front());  // <s>
    CHECK(t.ids.back() == ref.items[0].ids.back());    // </s>
    auto& j = joined[t.index];
    j.insert(j.end(), t.ids.begin() + 1, t.ids.end() - 1);
  }
  for (const auto& t : ref.items)
    CHECK(joined[t.index] == std::vector<int32_t>(t.ids.begin() + 1, t.ids.end() - 1));
  CHECK(joined.size() == 11);
  CHECK(ds.items.size() > 11);  // long documents span several blocks
}

TEST_CASE("dp-sgd at document level: unpacked it is example level; packed, a document is a unit",
          "[privacy][units]") {
  Fixture f;
  make_fixture(f);
  const std::string out = (f.tmp.path / "runs").string();
  const std::vector<std::string> dp = {"--set", "method.name=dp-sgd", "--set", "privacy.epsilon=4"};
  const auto example = run_metrics(f, out, dp);
  const auto doc = run_metrics(f, out, cat(dp, {"--set", "privacy.unit=document"}));
  CHECK(doc["eval"] == example["eval"]);
  CHECK(doc[kNonPrivate]["history"] == example[kNonPrivate]["history"]);
  CHECK(doc["privacy"]["epsilon"] == example["privacy"]["epsilon"]);
  CHECK(doc["privacy"]["unit"] == nlohmann::json{{"unit", "document"}, {"count", 24}});
  // Packed into blocks of 24 tokens: still 24 documents, each sampled with all its blocks.
  const auto packed = run_metrics(
      f, out, cat(dp, {"--set", "privacy.unit=document", "--set", "data.packing=true"}));
  CHECK(packed["status"] == "ok");
  CHECK(packed["privacy"]["unit"] == nlohmann::json{{"unit", "document"}, {"count", 24}});
  CHECK(packed["privacy"]["sampling_rate"] == example["privacy"]["sampling_rate"]);
  int64_t rows = 0, units = 0;
  for (const auto& h : packed[kNonPrivate]["history"]) {
    units += h["batch_size"].get<int64_t>();
    rows += h.value("rows", h["batch_size"].get<int64_t>());
  }
  CHECK(rows > units);  // PubMed abstracts are longer than one 24-token block
  // Packing one stream at example level stays refused for a DP run.
  CHECK(test::cli(test::run_args(f, out, cat(dp, {"--set", "data.packing=true"}))) == 2);
}

TEST_CASE("the accountant in users: a user-level spec's epsilon is the independent reference's",
          "[privacy][units]") {
  Fixture f;
  make_fixture(f);
  const std::string few = test::write_user_rows(f, "few.jsonl", 4);  // 400 rows, 100 users
  // tests/reference/rdp_reference.py (numerical integration, independent of dpft's accountant):
  // sigma 1, q 0.05, T 10, delta 1e-5.
  const auto ref = nlohmann::json::parse(
      read_file(fs::path(DPFT_SOURCE_DIR) / "tests" / "reference" / "rdp_reference.json"));
  double want = -1;
  for (const auto& e : ref["eps_check"])
    if (e["sigma"] == 1.0 && e["q"] == 0.05 && e["steps"] == 10 && e["delta"] == 1e-5)
      want = e["eps"].get<double>();
  REQUIRE(want > 0);
  auto account = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = {"account", "--json",
                                  "--spec",  f.spec,
                                  "--set",   "model.path=" + f.model,
                                  "--set",   "method.name=dp-sgd",
                                  "--set",   "train.batch_size=5",
                                  "--set",   "train.steps=10",
                                  "--set",   "privacy.noise_multiplier=1",
                                  "--set",   "privacy.delta=1e-5",
                                  "--set",   "privacy.accountant=rdp",
                                  "--set",   "data.train.path=" + few,
                                  "--set",   "data.train.num_samples=0"};
    a.insert(a.end(), extra.begin(), extra.end());
    std::string printed;
    REQUIRE(test::cli(a, &printed) == 0);
    return nlohmann::json::parse(printed);
  };
  const auto users = account({"--set", "privacy.unit=user", "--set", "data.train.user_column=who"});
  CHECK(users["unit"] == "user");
  CHECK(users["dataset_size"] == 100);
  CHECK(users["epsilon"].get<double>() == Approx(want).epsilon(1e-6));  // q = 5 / 100
  // The same rows counted as examples: q = 5 / 400, a smaller number about one row only.
  const auto rows = account({});
  CHECK(rows["dataset_size"] == 400);
  CHECK(rows["epsilon"].get<double>() < want);
  // And the flags alone, N in users.
  std::string printed;
  REQUIRE(test::cli({"account", "--json", "--sigma", "1", "--dataset-size", "100", "--batch-size",
                     "5", "--steps", "10", "--delta", "1e-5", "--accountant", "rdp"},
                    &printed) == 0);
  CHECK(nlohmann::json::parse(printed)["epsilon"].get<double>() == Approx(want).epsilon(1e-6));
}

TEST_CASE("dp-sgd with per-layer and group clipping: the same noise, the style in metrics.json",
          "[privacy][units]") {
  Fixture f;
  make_fixture(f);
  const std::string out = (f.tmp.path / "runs").string();
  // C small enough that every part is clipped: the styles then differ
  const std::vector<std::string> dp = {"--set", "method.name=dp-sgd",
                                       "--set", "privacy.epsilon=4",
                                       "--set", "privacy.clip_norm=1e-4"};
  const auto flat = run_metrics(f, out, dp);
  const auto layer = run_metrics(f, out, cat(dp, {"--set", "privacy.clipping_style=per_layer"}));
  const auto groups = run_metrics(
      f, out,
      cat(dp, {"--set", "privacy.clipping_style=groups", "--set",
               "privacy.clip_groups=[{params: lora_A, share: 1}, {params: lora_B, share: 2}]"}));
  for (const auto* m : {&layer, &groups}) {
    CHECK((*m)["status"] == "ok");
    CHECK((*m)["privacy"]["noise_std"] == flat["privacy"]["noise_std"]);  // sigma C, unchanged
    CHECK((*m)["privacy"]["epsilon"] == flat["privacy"]["epsilon"]);
    CHECK((*m)["eval"]["final"]["loss"] != flat["eval"]["final"]["loss"]);
  }
  CHECK(layer["privacy"]["clipping_style"] == "per_layer");
  CHECK(groups["privacy"]["clip_groups"][1]["share"] == 2.0);
  CHECK_FALSE(flat["privacy"].contains("clipping_style"));
  // A group list that leaves a trainable parameter out: refused before training (exit 2).
  CHECK(test::cli(test::run_args(f, out,
                                 cat(dp, {"--set", "privacy.clipping_style=groups", "--set",
                                          "privacy.clip_groups=[{params: lora_A}]"}))) == 2);
  // Methods that clip something else refuse the styles (exit 2).
  CHECK(test::cli(test::run_args(
            f, out, cat(method_args("dp-sft"), {"--set", "privacy.clipping_style=per_layer"}))) ==
        2);
}

TEST_CASE("adaptive clipping: C converges to the quantile of fixed norms; a count release a step",
          "[privacy][adaptive]") {
  // 200 units with norms 0.01, 0.02, ..., 2.00 every step: the 0.3 quantile is 0.6.
  std::vector<double> norms;
  for (int i = 1; i <= 200; ++i) norms.push_back(0.01 * i);
  train::DpSettings dp;
  dp.q = 1;
  dp.dataset_size = 200;
  dp.clip_norm = 2.5;                                        // start far above
  dp.adaptive = train::AdaptiveClipSettings{0.3, 0.2, 2.0};  // count std 2: the fraction +-0.01
  privacy::LedgerOptions lo;
  lo.accountant = privacy::AccountantKind::kRdp;
  auto M = test::test_mechanisms(5, {dp.count_release(400)}, lo);
  train::AdaptiveClip a(dp, M->gaussian_sum("clip-count", dp.count_release()));
  std::vector<double> tail;
  for (int t = 0; t < 400; ++t) {
    train::BatchStats st;
    st.batch_size = 200;
    for (double n : norms) (n > a.clip_norm() ? st.clipped : st.unclipped) += 1;
    a.update(st);
    if (t >= 300) tail.push_back(a.clip_norm());
  }
  double mean = 0;
  for (double c : tail) mean += c / static_cast<double>(tail.size());
  CHECK(mean == Approx(0.6).margin(0.03));
  // The ledger holds one subsampled Gaussian per step at 2 sigma_b = 4 (sensitivity 1/2).
  const auto j = M->ledger().to_json();
  REQUIRE(j["releases"].size() == 1);
  CHECK(j["releases"][0]["label"] == "clip_count");
  CHECK(j["releases"][0]["count"] == 400);
  CHECK(j["releases"][0]["noise_multiplier"] == 4.0);
  // Without noise the update is the exact geometric step from the true fraction.
  dp.adaptive->count_std = 0;
  auto M0 = test::test_mechanisms(5, {dp.count_release(1)}, lo);
  train::AdaptiveClip b(dp, M0->gaussian_sum("clip-count", dp.count_release()));
  train::BatchStats st;
  st.batch_size = 200;
  st.unclipped = 150;  // 3/4 unclipped against a target of 0.3
  st.clipped = 50;
  CHECK(b.update(st) == Approx(0.75));
  CHECK(b.clip_norm() == Approx(2.5 * std::exp(-0.2 * (0.75 - 0.3))));
  // The default count std: the paper's expected batch / 20.
  const Spec spec =
      parse_spec(YAML::Load("privacy: {adaptive_clip_quantile: 0.5}\ntrain: {batch_size: 40}\n"));
  CHECK(train::dp_settings_before_noise(spec, 400).adaptive->count_std == Approx(2.0));
}

TEST_CASE(
    "dp-sgd with adaptive clipping: steps and counts composed to the budget, C moves, "
    "resume",
    "[privacy][adaptive]") {
  Fixture f;
  make_fixture(f);
  const std::string out = (f.tmp.path / "runs").string();
  // (q N = 6 units a step: the default count std 6 / 20 would spend most of the budget)
  const std::vector<std::string> a = {"--set", "method.name=dp-sgd",
                                      "--set", "privacy.epsilon=4",
                                      "--set", "privacy.adaptive_clip_quantile=0.5",
                                      "--set", "privacy.adaptive_clip_count_std=3"};
  std::string dir;
  const auto m = run_metrics(f, out, a, &dir);
  CHECK(m["status"] == "ok");
  CHECK(test::release_count(m, "train") == 6);
  CHECK(test::release_count(m, "clip_count") == 6);
  const double eps = m["privacy"]["epsilon"].get<double>();
  CHECK(eps <= 4.0);
  CHECK(eps > 3.9);  // the steps' sigma calibrated with the counts composed in
  const auto flat =
      run_metrics(f, out, {"--set", "method.name=dp-sgd", "--set", "privacy.epsilon=4"});
  CHECK(m["privacy"]["noise_multiplier"].get<double>() >
        flat["privacy"]["noise_multiplier"].get<double>());  // the counts cost some budget
  CHECK(m["privacy"]["adaptive_clip"]["count_noise_multiplier"] == 6.0);  // 2 sigma_b
  std::vector<double> C;
  for (const auto& h : m[kNonPrivate]["history"]) C.push_back(h["clip_norm"].get<double>());
  REQUIRE(C.size() == 6);
  CHECK(C[0] == 1.0);  // privacy.clip_norm, the start
  CHECK(C[5] != C[0]);
  // Stopped after 3 steps and resumed: C_t comes back from the checkpoint.
  std::string printed;
  REQUIRE(test::cli(cat(test::run_args(f, out, a), {"--stop-after", "3"}), &printed) == 0);
  const std::string part = test::last_line(printed);
  REQUIRE(test::cli({"run", "--resume", part}) == 0);
  const auto r = nlohmann::json::parse(read_file(fs::path(part) / "metrics.json"));
  CHECK(r["eval"] == m["eval"]);
  CHECK(r[kNonPrivate]["history"].back()["clip_norm"] ==
        m[kNonPrivate]["history"].back()["clip_norm"]);
  CHECK(r["privacy"]["releases"] == m["privacy"]["releases"]);
  // `dpft account --spec` plans the same two blocks.
  std::vector<std::string> acc = {"account", "--json", "--spec", f.spec};
  for (const auto& x : test::run_args(f, out, a))
    if (x.rfind("--set", 0) == 0 || x.find('=') != std::string::npos) acc.push_back(x);
  REQUIRE(test::cli(acc, &printed) == 0);
  CHECK(
      nlohmann::json::parse(printed)["epsilon"].get<double>() ==
      Approx(m["privacy"]["epsilon"].get<double>()).epsilon(1e-9));  // (composed in another order)
  // Methods whose steps are not dp-sgd's refuse it (exit 2).
  CHECK(test::cli(test::run_args(
            f, out, cat(method_args("dp-sft"), {"--set", "privacy.adaptive_clip_quantile=0.5"}))) ==
        2);
}
