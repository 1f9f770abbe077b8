// Sequence classification through `dpft run` (issue 22, part 3): data.task classification with
// a RoBERTa classifier on SST-2 rows, non-private sgd and dp-sgd (Poisson, clipping, noise,
// ledger), the classification block in metrics.json, per-example records, and the refusals.
#include <catch2/catch.hpp>

#include <fstream>

#include "core/util/atomic_file.hpp"
#include "test_util.hpp"

using namespace dpft;

namespace {

struct ClsFixture {
  test::TempDir tmp;
  std::string model, train, eval, spec;
};

// A tiny random RoBERTa classifier (the real RoBERTa BPE tokenizer) and 64 / 24 SST-2 rows.
bool make_cls_fixture(ClsFixture& f, const fs::path& roberta, const fs::path& sst2) {
  f.model = (f.tmp.path / "model").string();
  if (test::cli({"model", "init", "--arch", "roberta", "--preset", "tiny", "--head",
                 "classification", "--labels", "negative,positive", "--tokenizer", roberta.string(),
                 "--out", f.model, "--seed", "5"}) != 0)
    return false;
  // Label ids 0/1 as in the GLUE file; data.labels maps them to names below.
  auto copy_rows = [&](const fs::path& from, const fs::path& to, int n) {
    std::ifstream in(from);
    std::ofstream out(to);
    std::string line;
    for (int i = 0; i <= n && std::getline(in, line); ++i) out << line << "\n";
  };
  f.train = (f.tmp.path / "train.tsv").string();
  f.eval = (f.tmp.path / "dev.tsv").string();
  copy_rows(sst2 / "train.tsv", f.train, 64);
  copy_rows(sst2 / "dev.tsv", f.eval, 24);
  f.spec = (f.tmp.path / "spec.yaml").string();
  write_file_atomic(f.spec,
                    "name: cls-test\n"
                    "seed: 2\n"
                    "model: {peft: {kind: full, targets: [all]}}\n"
                    "data:\n"
                    "  task: classification\n"
                    "  labels: ['0', '1']\n"
                    "  train: {text_column: sentence, label_column: label}\n"
                    "  eval: {text_column: sentence, label_column: label}\n"
                    "  max_length: 32\n"
                    "train: {steps: 4, batch_size: 16, micro_batch_size: 8, lr: 0.01}\n"
                    "output: {save_model: true}\n");
  return true;
}

std::vector<std::string> cls_args(const ClsFixture& f, const std::string& out,
                                  std::vector<std::string> extra) {
  std::vector<std::string> a = {"run",   f.spec,
                                "--out", out,
                                "--set", "model.path=" + f.model,
                                "--set", "data.train.path=" + f.train,
                                "--set", "data.eval.path=" + f.eval};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

}  // namespace

TEST_CASE("dpft run trains a RoBERTa classifier: sgd and dp-sgd, metrics and per-example records",
          "[classification][run]") {
  SHARED_DATA_OR_SKIP(roberta, "roberta_tokenizer");
  SHARED_DATA_OR_SKIP(sst2, "glue_sst2");
  ClsFixture f;
  REQUIRE(make_cls_fixture(f, roberta, sst2));
  const std::string out = (f.tmp.path / "runs").string();

  std::string printed;
  REQUIRE(test::cli(cls_args(f, out, {"--set", "method.name=sgd", "--set", "privacy.epsilon=.inf"}),
                    &printed) == 0);
  fs::path dir = test::last_line(printed);
  auto m = nlohmann::json::parse(read_file(dir / "metrics.json"));
  const auto& base = m["eval"]["base"];
  const auto& fin = m["eval"]["final"];
  CHECK(base["samples"] == 24);
  CHECK(fin["classification"]["samples"] == 24);
  // The confusion matrix counts every eval example once; accuracy is its diagonal share.
  int64_t total = 0, diag = 0;
  for (int t = 0; t < 2; ++t)
    for (int p = 0; p < 2; ++p) {
      total += fin["classification"]["confusion"][t][p].get<int64_t>();
      if (t == p) diag += fin["classification"]["confusion"][t][p].get<int64_t>();
    }
  CHECK(total == 24);
  CHECK(fin["classification"]["accuracy"].get<double>() == Approx(diag / 24.0));
  CHECK(fin["accuracy"].get<double>() == Approx(diag / 24.0));
  CHECK(fin["loss"].get<double>() != base["loss"].get<double>());  // it trained
  // The saved classifier names its classes as data.labels does.
  auto cfg = nlohmann::json::parse(read_file(dir / "model" / "config.json"));
  CHECK(cfg["architectures"][0] == "RobertaForSequenceClassification");
  CHECK(cfg["id2label"]["1"] == "1");

  // dp-sgd: Poisson batches, clipping, noise, one ledger release per step.
  REQUIRE(test::cli(cls_args(f, out,
                             {"--set", "method.name=dp-sgd", "--set", "privacy.epsilon=4", "--set",
                              "privacy.clip_norm=1.0", "--set", "eval.per_sample=true"}),
                    &printed) == 0);
  dir = test::last_line(printed);
  m = nlohmann::json::parse(read_file(dir / "metrics.json"));
  CHECK(m["privacy"]["epsilon"].get<double>() <= 4.0);
  CHECK(m["privacy"]["steps"] == 4);
  CHECK(m["privacy"]["dataset_size"] == 64);
  CHECK(m["eval"]["final"]["classification"].contains("mcc"));
  // LoRA (default modules_to_save [classifier]): the head trains and is saved in the adapter.
  REQUIRE(
      test::cli(cls_args(f, out,
                         {"--set", "method.name=dp-sgd", "--set", "privacy.epsilon=4", "--set",
                          "model.peft.kind=lora", "--set", "model.peft.r=4", "--set",
                          "model.peft.targets=[query, value]", "--set", "output.save_model=true"}),
                &printed) == 0);
  const fs::path lora_dir = test::last_line(printed);
  auto acfg = nlohmann::json::parse(read_file(lora_dir / "adapter" / "adapter_config.json"));
  CHECK(acfg["modules_to_save"] == nlohmann::json({"classifier"}));
  CHECK(acfg["task_type"] == "SEQ_CLS");
  // Houlsby adapters (Adapter-DP): the adapters and the head train and are saved.
  REQUIRE(test::cli(cls_args(f, out,
                             {"--set", "method.name=dp-sgd", "--set", "privacy.epsilon=4", "--set",
                              "model.peft.kind=adapter", "--set", "model.peft.reduction_factor=16",
                              "--set", "output.save_model=true"}),
                    &printed) == 0);
  const fs::path adapter_dir = test::last_line(printed);
  auto bcfg = nlohmann::json::parse(read_file(adapter_dir / "adapter" / "adapter_config.json"));
  CHECK(bcfg["peft_type"] == "BOTTLENECK");
  CHECK(bcfg["modules_to_save"] == nlohmann::json({"classifier"}));
  auto am = nlohmann::json::parse(read_file(adapter_dir / "metrics.json"));
  CHECK(am["privacy"]["epsilon"].get<double>() <= 4.0);
  CHECK(am["eval"]["final"]["loss"] != am["eval"]["base"]["loss"]);
  // per_sample.jsonl: one line per eval example and model, with label and prediction.
  std::ifstream ps(dir / "per_sample.jsonl");
  int lines = 0;
  for (std::string line; std::getline(ps, line);) {
    auto j = nlohmann::json::parse(line);
    CHECK(j.contains("label"));
    CHECK(j.contains("predicted"));
    CHECK(j["tokens"] == 1);
    ++lines;
  }
  CHECK(lines == 48);  // base and final
}

TEST_CASE("classification runs refuse what they cannot do, naming the fix", "[classification]") {
  SHARED_DATA_OR_SKIP(roberta, "roberta_tokenizer");
  SHARED_DATA_OR_SKIP(sst2, "glue_sst2");
  ClsFixture f;
  REQUIRE(make_cls_fixture(f, roberta, sst2));
  const std::string out = (f.tmp.path / "runs").string();
  // PE-SGD generates text: language models only.
  CHECK(test::cli(
            cls_args(f, out, {"--set", "method.name=pe-sgd", "--set", "privacy.epsilon=4"})) == 2);
  // A label outside data.labels names the row.
  CHECK(test::cli(cls_args(f, out,
                           {"--set", "data.labels=[a, b]", "--set", "privacy.epsilon=.inf", "--set",
                            "method.name=sgd"})) == 3);
  // Without data.labels the model's names (negative, positive) are the label set, never the
  // private file's labels: its 0 / 1 rows are then outside it.
  CHECK(test::cli(cls_args(f, out,
                           {"--set", "data.labels=[]", "--set", "privacy.epsilon=.inf", "--set",
                            "method.name=sgd"})) == 3);
  // No label column: a spec error.
  CHECK(test::cli(cls_args(f, out,
                           {"--set", "data.train.label_column=", "--set", "privacy.epsilon=.inf",
                            "--set", "method.name=sgd"})) == 2);
  // A decoder with data.task classification: a spec error naming the head it needs.
  const std::string gpt2 = std::string(DPFT_SOURCE_DIR) + "/models/tiny-gpt2";
  CHECK(test::cli(cls_args(f, out,
                           {"--set", "model.path=" + gpt2, "--set", "privacy.epsilon=.inf", "--set",
                            "method.name=sgd"})) == 2);
}

TEST_CASE("several named evaluation sets: each is scored at every evaluation, like data.eval",
          "[classification][run]") {
  SHARED_DATA_OR_SKIP(roberta, "roberta_tokenizer");
  SHARED_DATA_OR_SKIP(sst2, "glue_sst2");
  ClsFixture f;
  REQUIRE(make_cls_fixture(f, roberta, sst2));
  const std::string out = (f.tmp.path / "runs").string();
  const std::string later = (f.tmp.path / "later.tsv").string();
  {  // dev rows 25-40 as a second ("mismatched"-style) set
    std::ifstream in(sst2 / "dev.tsv");
    std::ofstream o(later);
    std::string line;
    for (int i = 0; i <= 40 && std::getline(in, line); ++i)
      if (i == 0 || i > 24) o << line << "\n";
  }
  const std::string sets =
      "data.eval_sets=[{name: same, path: " + f.eval +
      ", text_column: sentence, label_column: label}, {name: later, path: " + later +
      ", text_column: sentence, label_column: label}]";
  std::string printed;
  REQUIRE(test::cli(cls_args(f, out,
                             {"--set", "method.name=sgd", "--set", "privacy.epsilon=.inf", "--set",
                              sets, "--set", "eval.per_sample=true", "--set", "eval.every=2"}),
                    &printed) == 0);
  const fs::path dir = test::last_line(printed);
  auto m = nlohmann::json::parse(read_file(dir / "metrics.json"));
  for (const char* tag : {"base", "final"}) {
    CAPTURE(tag);
    const auto& e = m["eval"][tag];
    // The same file as data.eval scores exactly as data.eval does.
    for (const char* k : {"loss", "accuracy", "samples"}) CHECK(e["sets"]["same"][k] == e[k]);
    CHECK(e["sets"]["later"]["samples"] == 16);
    CHECK(e["sets"]["later"]["classification"]["samples"] == 16);
  }
  CHECK(m["eval"]["history"][0]["sets"]["later"]["samples"] == 16);
  int later_lines = 0;
  std::ifstream ps(dir / "per_sample.jsonl");
  for (std::string line; std::getline(ps, line);)
    later_lines += nlohmann::json::parse(line)["model"] == "final/later";
  CHECK(later_lines == 16);
  // Refusals: an unnamed set, a repeated name, eval_sets without data.eval, no label column.
  CHECK(test::cli(cls_args(f, out, {"--set", "data.eval_sets=[{path: " + later + "}]"})) == 2);
  CHECK(test::cli(cls_args(f, out,
                           {"--set", "data.eval_sets=[{name: a, path: " + later +
                                         ", label_column: label}, {name: a, path: " + later +
                                         ", label_column: label}]"})) == 2);
  const std::string no_eval = (f.tmp.path / "no_eval.yaml").string();
  write_file_atomic(no_eval, "model: {path: " + f.model +
                                 "}\ndata:\n  task: classification\n  labels: ['0', '1']\n"
                                 "  train: {path: " +
                                 f.train +
                                 ", text_column: sentence, label_column: label}\n"
                                 "  eval_sets: [{name: a, path: " +
                                 later +
                                 ", text_column: sentence, label_column: label}]\n"
                                 "privacy: {epsilon: .inf}\nmethod: {name: sgd}\n");
  CHECK(test::cli({"config", "validate", no_eval}) == 2);
  CHECK(test::cli(cls_args(f, out, {"--set", "data.eval_sets=[{name: a, path: " + later + "}]"})) ==
        2);
}
