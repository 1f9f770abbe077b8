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

#include "core/tokenizer/load.hpp"
#include "data/lm_dataset.hpp"
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
    int64_t units = 0;
    for (const auto& h : grouped[kNonPrivate]["history"]) {
      if (h.contains("rows")) CHECK(h["rows"].get<int64_t>() <= 4 * h["batch_size"].get<int64_t>());
      units += h["batch_size"].get<int64_t>();
    }
    CHECK(units > 0);
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
