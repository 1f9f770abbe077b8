// The first hour of a new user (issue 70): defaults that fit the model (peft.targets: auto),
// train.epochs, the warnings a run records in metrics.json (q capped, a tiny private set,
// blank rows), and the closing line and warnings that flag a trivial result.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <cmath>
#include <cstdlib>

#include "core/eval/verdict.hpp"
#include "core/model/peft.hpp"
#include "core/train/setup.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "data/lm_dataset.hpp"
#include "methods/registry.hpp"
#include "methods/run.hpp"
#include "run_fixture.hpp"
#include "test_util.hpp"

using namespace dpft;
using Catch::Matchers::Contains;

namespace {

const fs::path kSource(DPFT_SOURCE_DIR);

Spec spec_with(const std::vector<std::string>& sets) {
  return load_spec("", sets);
}

// Whether one of metrics.json's warnings contains `part`.
bool warned(const nlohmann::json& m, const std::string& part) {
  if (!m.contains("warnings")) return false;
  for (const auto& w : m["warnings"])
    if (w.get<std::string>().find(part) != std::string::npos) return true;
  return false;
}

// A CSV field: quoted, its quotes doubled.
std::string csv_quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

// Runs the dpft binary (for its stderr): the exit status, and stdout + stderr in *out.
int run_binary(const std::vector<std::string>& args, std::string* out) {
  test::TempDir t;
  std::string cmd = "'" DPFT_BINARY "' --quiet";
  for (const std::string& a : args) cmd += " '" + a + "'";
  const fs::path log = t.path / "out.txt";
  const int status = std::system((cmd + " > '" + log.string() + "' 2>&1").c_str());
  *out = read_file(log);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_CASE("peft.targets: auto picks each family's LoRA targets", "[first-hour]") {
  using model::PeftKind;
  CHECK(model::auto_targets("gpt2", PeftKind::kLora) == std::vector<std::string>{"c_attn"});
  CHECK(model::auto_targets("roberta", PeftKind::kLora) ==
        std::vector<std::string>{"query", "value"});
  CHECK(model::auto_targets("bert", PeftKind::kLora) == std::vector<std::string>{"query", "value"});
  for (const char* t : {"llama", "qwen2", "qwen3", "mistral", "gemma", "gemma2", "bart"})
    CHECK(model::auto_targets(t, PeftKind::kLora) == std::vector<std::string>{"q_proj", "v_proj"});
  CHECK(model::auto_targets("phi3", PeftKind::kLora) == std::vector<std::string>{"qkv_proj"});
  CHECK(model::auto_targets("gpt2", PeftKind::kFull) == std::vector<std::string>{"all"});
  CHECK_THAT(
      [] {
        try {
          model::resolved_targets({"auto"}, "t5", PeftKind::kLora);
        } catch (const ConfigError& e) {
          return std::string(e.what());
        }
        return std::string("no error");
      }(),
      Contains("auto knows no default for model_type 't5'"));
  // given targets are kept as they are
  CHECK(model::resolved_targets({"c_fc"}, "gpt2", PeftKind::kLora) ==
        std::vector<std::string>{"c_fc"});

  // The spec: auto until the model is read, then the model's targets.
  const Spec s = spec_with({});
  CHECK(spec_to_yaml(s)["model"]["peft"]["targets"].as<std::string>() == "auto");
  const Spec gpt2 = train::with_model_defaults(s);  // the embedded default, tiny-gpt2
  CHECK(gpt2.model.peft.targets == std::vector<std::string>{"c_attn"});
  const Spec roberta = train::with_model_defaults(
      spec_with({"model.path=" + (kSource / "models/tiny-roberta").string()}));
  CHECK(roberta.model.peft.targets == std::vector<std::string>{"query", "value"});
  const Spec bart = train::with_model_defaults(
      spec_with({"model.path=" + (kSource / "models/tiny-bart").string()}));
  CHECK(bart.model.peft.targets == std::vector<std::string>{"q_proj", "v_proj"});
  // no model to read: left as auto (the run's load reports the missing directory)
  CHECK(
      train::with_model_defaults(spec_with({"model.path=/nonexistent/model"})).model.peft.targets ==
      std::vector<std::string>{"auto"});
}

TEST_CASE("a five-line dp-sgd spec on the default model runs, with its targets resolved",
          "[first-hour]") {
  test::Fixture f;
  test::make_fixture(f);
  const fs::path spec =
      f.tmp.write("five.yaml",
                  "method: {name: dp-sgd}\n"
                  "privacy: {epsilon: 8}\n"
                  "data:\n  train: {path: " +
                      f.train +
                      ", num_samples: 60}\n"
                      "train: {epochs: 1, batch_size: 20, micro_batch_size: 10}\n");
  std::string printed;
  REQUIRE(test::cli({"run", spec.string(), "--out", (f.tmp.path / "runs").string(), "--set",
                     "data.max_length=16"},
                    &printed) == 0);
  const fs::path dir(test::last_line(printed));
  const YAML::Node resolved = YAML::LoadFile((dir / "config.resolved.yaml").string());
  CHECK(resolved["model"]["peft"]["targets"].size() == 1);
  CHECK(resolved["model"]["peft"]["targets"][0].as<std::string>() == "c_attn");
  // epochs 1 at q = 20 / 60: 3 steps, written as steps (epochs gone)
  CHECK(resolved["train"]["steps"].as<int64_t>() == 3);
  CHECK_FALSE(resolved["train"]["epochs"]);
  const nlohmann::json m = nlohmann::json::parse(read_file(dir / "metrics.json"));
  CHECK(test::release_count(m, "train") == 3);
  const nlohmann::json adapter =
      nlohmann::json::parse(read_file(dir / "adapter/adapter_config.json"));
  CHECK(adapter["target_modules"] == nlohmann::json::array({"c_attn"}));
}

TEST_CASE(
    "train.epochs: steps = ceil(epochs / q); with steps, or on a method without "
    "training, an error",
    "[first-hour]") {
  Spec s = spec_with(
      {"method.name=dp-sgd", "privacy.epsilon=1", "train.epochs=2.5", "train.batch_size=30"});
  REQUIRE(s.train.epochs);
  CHECK(spec_to_yaml(s)["train"]["epochs"].as<double>() == 2.5);
  CHECK_FALSE(spec_to_yaml(s)["train"]["steps"]);
  const Spec r = resolved_for(s, 100);  // q = 0.3: 2.5 / 0.3 = 8.33 -> 9
  CHECK(r.train.steps == 9);
  CHECK_FALSE(r.train.epochs);
  CHECK(resolved_for(spec_with({"method.name=dp-sgd", "privacy.epsilon=1", "train.epochs=3",
                                "privacy.sampling_rate=0.2"}),
                     1000)
            .train.steps == 15);  // exactly 15, not 16 from 3 / 0.2 = 15.000000000000002
  try {
    spec_with({"train.steps=10", "train.epochs=1"});
    FAIL("steps and epochs were both accepted");
  } catch (const ConfigError& e) {
    CHECK_THAT(e.what(), Contains("train.steps and train.epochs are both given"));
  }
  try {
    resolved_for(spec_with({"method.name=noop", "train.epochs=1"}), 100);
    FAIL("epochs on noop was accepted");
  } catch (const ConfigError& e) {
    CHECK_THAT(e.what(), Contains("train.epochs: method noop trains on no private examples"));
  }
}

TEST_CASE("a run's warnings reach metrics.json, and export leaves them out", "[first-hour]") {
  test::Fixture f;
  test::make_fixture(f);
  // 24 rows with a batch of 30: q capped at 1 and fewer than 50 units.
  std::string dir;
  const nlohmann::json m = test::run_metrics(
      f, (f.tmp.path / "runs").string(),
      {"--set", "method.name=dp-sgd", "--set", "privacy.epsilon=8", "--set", "train.batch_size=30",
       "--set", "privacy.noise_seed=null"},  // keyed noise: export refuses seeded runs
      &dir);
  CHECK(warned(m, "q is capped at 1"));
  CHECK(warned(m, "only 24 usable private examples"));
  const fs::path out = f.tmp.path / "export";
  REQUIRE(test::cli({"export", dir, "--out", out.string()}) == 0);
  const nlohmann::json exported = nlohmann::json::parse(read_file(out / "metrics.json"));
  CHECK_FALSE(exported.contains("warnings"));
  const std::string manifest = read_file(out / "export_manifest.json");
  CHECK_THAT(manifest, Contains("metrics.json#warnings"));
}

TEST_CASE("blank rows are dropped with a count: empty lines and whitespace-only texts",
          "[first-hour]") {
  test::TempDir t;
  const fs::path csv = t.write("blank.csv", "text,label\na,1\n\n  ,0\nb,1\n \t,1\n\n\n");
  DatasetSpec d;
  d.path = csv.string();
  d.label_column = "label";
  const std::vector<data::Example> ex = data::read_examples(d, "data.train");
  REQUIRE(ex.size() == 2);
  CHECK(ex[0].text == "a");
  CHECK(ex[1].text == "b");
  CHECK(ex[1].index == 2);                        // file rows keep their numbers
  CHECK(data::read_table(csv).blank_lines == 1);  // the trailing empty lines are not counted
  // A file of nothing but blank rows leaves no training set: an error, not one example of
  // spaces at q = 1.
  const fs::path spaces = t.write("spaces.csv", "text\n   \n\n  \n");
  DatasetSpec sp;
  sp.path = spaces.string();
  CHECK(data::read_examples(sp, "data.train").empty());
}

TEST_CASE("the closing verdict flags a constant classifier, chance MCC and a worse LM",
          "[first-hour]") {
  auto block = [](double loss, double acc, double mcc, nlohmann::json confusion) {
    int64_t n = 0;
    for (const auto& row : confusion)
      for (const auto& c : row) n += c.get<int64_t>();
    return nlohmann::json{{"loss", loss},
                          {"accuracy", acc},
                          {"classification",
                           {{"samples", n},
                            {"accuracy", acc},
                            {"macro_f1", 0.337},
                            {"mcc", mcc},
                            {"confusion", confusion}}}};
  };
  // The SST-2 run: confusion [[0, 428], [0, 444]], MCC 0.
  const nlohmann::json constant = block(0.69, 0.5092, 0.0, {{0, 428}, {0, 444}});
  eval::EvalVerdict v = eval::eval_verdict(constant, constant, true);
  CHECK_THAT(v.line, Contains("macro-F1 0.3370 -> 0.3370, MCC 0.0000 -> 0.0000"));
  CHECK_THAT(v.line, !Contains("perplexity"));
  REQUIRE(v.warnings.size() == 2);
  CHECK_THAT(v.warnings[0], Contains("predicts class 1 for every one of the 872 eval rows"));
  CHECK_THAT(v.warnings[1], Contains("within noise of 0"));
  // A real classifier: 2 / sqrt(872) = 0.068 < 0.5, both classes predicted.
  v = eval::eval_verdict(constant, block(0.5, 0.75, 0.5, {{320, 108}, {110, 334}}), true);
  CHECK(v.warnings.empty());
  // MCC just inside the band is flagged, just outside it is not.
  const double band = eval::mcc_noise_band(872);
  CHECK(band == Approx(2 / std::sqrt(872.0)));
  CHECK(eval::eval_verdict(constant, block(0.6, 0.53, band * 0.99, {{220, 208}, {200, 244}}), true)
            .warnings.size() == 1);
  CHECK(eval::eval_verdict(constant, block(0.6, 0.53, band * 1.01, {{220, 208}, {200, 244}}), true)
            .warnings.empty());
  // A language model: worse final loss warns; a better one does not.
  const nlohmann::json base = {{"loss", 3.0}, {"accuracy", 0.12}};
  v = eval::eval_verdict(base, {{"loss", 3.1}, {"accuracy", 0.13}}, false);
  REQUIRE(v.warnings.size() == 1);
  CHECK_THAT(v.warnings[0], Contains("eval loss 3.1000 is worse than the base model's 3.0000"));
  CHECK(eval::eval_verdict(base, {{"loss", 2.9}, {"accuracy", 0.13}}, false).warnings.empty());
  CHECK(eval::eval_verdict(nullptr, base, false).line.empty());
}

TEST_CASE("the pre-flight of --dry-run and config validate opens the model and data files",
          "[first-hour]") {
  test::Fixture f;
  test::make_fixture(f);
  const fs::path spec = f.tmp.write("pf.yaml",
                                    "method: {name: dp-sgd}\n"
                                    "privacy: {epsilon: 1}\n"
                                    "model: {path: " +
                                        f.model +
                                        "}\n"
                                        "data:\n  train: {path: " +
                                        f.train +
                                        "}\n"
                                        "  eval: {path: " +
                                        f.eval +
                                        "}\n"
                                        "train: {epochs: 2, batch_size: 80}\n");
  std::string out;
  REQUIRE(test::cli({"run", spec.string(), "--dry-run", "--check-eps", "1", "8"}, &out) == 0);
  CHECK_THAT(out, Contains("# pre-flight: data.train " + f.train +
                           ": N = 400 examples, q = 0.2, 10 steps"));
  CHECK_THAT(out, Contains("# pre-flight: data.eval " + f.eval + ": 200 examples"));
  CHECK_THAT(out, Contains("targets [c_attn]"));
  CHECK_THAT(out, Contains("privacy: releases train (sigma "));
  CHECK_THAT(out, Contains("  steps: 10\n"));  // the resolved spec: epochs converted
  CHECK_THAT(out, Contains("# dry run at privacy.epsilon=8"));
  REQUIRE(test::cli({"config", "validate", spec.string()}, &out) == 0);
  CHECK_THAT(out, Contains("  pre-flight: data.train " + f.train + ": N = 400 examples"));

  // What fails first fails here, with the run's exit code; --no-data checks the spec alone.
  struct Case {
    std::string set, message;
    int exit;
  };
  for (const Case& c : std::vector<Case>{
           {"data.train.path=/nonexistent/train.csv",
            "data file '/nonexistent/train.csv' not found", 3},
           {"data.eval.path=/nonexistent/eval.csv", "data file '/nonexistent/eval.csv' not found",
            3},
           {"model.path=/nonexistent/model", "'/nonexistent/model' is not a directory", 3},
           {"data.train.text_column=body", "no column 'body'", 3},
           {"model.peft.targets=[q_proj]", "'q_proj' matches no linear module of this gpt2 model",
            2},
           {"privacy.epsilon=1e-9", "", 2}}) {
    CAPTURE(c.set);
    for (const char* cmd : {"run", "config"}) {
      std::vector<std::string> args =
          std::string(cmd) == "run"
              ? std::vector<std::string>{"run", spec.string(), "--dry-run", "--set", c.set}
              : std::vector<std::string>{"config", "validate", spec.string(), "--set", c.set};
      std::string message;
      CHECK(run_binary(args, &message) == c.exit);
      CHECK_THAT(message, Contains(c.message));
      if (c.set.rfind("privacy.", 0) != 0) {  // the spec alone is valid
        args.push_back("--no-data");
        CHECK(test::cli(args) == 0);
      }
    }
  }
}

TEST_CASE("dpft eval and generate take a run directory or an adapter alone", "[first-hour]") {
  test::Fixture f;
  test::make_fixture(f);
  // A small eval file, evaluated whole by the run and by dpft eval.
  const data::Table t = data::read_table(f.eval);
  std::string csv = "text\n";
  for (size_t i = 0; i < 6; ++i) csv += csv_quote(t.rows[i][0]) + "\n";
  const fs::path held_out = f.tmp.write("held_out.csv", csv);
  std::string dir;
  const nlohmann::json m = test::run_metrics(
      f, (f.tmp.path / "runs").string(),
      {"--set", "method.name=dp-sgd", "--set", "privacy.epsilon=8", "--set",
       "data.eval.path=" + held_out.string(), "--set", "data.eval.num_samples=0"},
      &dir);
  const nlohmann::json& final_eval = m["eval"]["final"];
  REQUIRE(final_eval.is_object());
  const fs::path adapter = fs::path(dir) / "adapter";
  auto eval_json = [&](std::vector<std::string> model_args) {
    const fs::path out = f.tmp.path / "eval.json";
    std::vector<std::string> a = {"eval", "--data", held_out.string(), "--max-length", "24",
                                  "--out", out.string()};
    a.insert(a.end(), model_args.begin(), model_args.end());
    REQUIRE(test::cli(a) == 0);
    return nlohmann::json::parse(read_file(out));
  };
  // The run's final eval block, recomputed from the saved adapter three ways.
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--model", dir}, {"--adapter", adapter.string()}, {"--model", adapter.string()},
           {"--model", f.model, "--adapter", adapter.string()}}) {
    CAPTURE(args);
    const nlohmann::json j = eval_json(args);
    CHECK(j["task"] == "lm");
    CHECK(j["adapter"] == adapter.string());
    CHECK(j["eval"]["samples"] == final_eval["samples"]);
    CHECK(j["eval"]["tokens"] == final_eval["tokens"]);
    CHECK(j["eval"]["loss"].get<double>() == Approx(final_eval["loss"].get<double>()).epsilon(1e-6));
    CHECK(j["eval"]["accuracy"].get<double>() == Approx(final_eval["accuracy"].get<double>()));
  }
  // The base alone differs from the trained adapter (it is the run's eval.base).
  const nlohmann::json base = eval_json({"--model", f.model});
  CHECK(base["adapter"].is_null());
  // Its numbers are statistics of the file as given, and the JSON says so.
  CHECK_THAT(base["note"].get<std::string>(), Contains("non-private"));
  CHECK(base["eval"]["loss"].get<double>() ==
        Approx(m["eval"]["base"]["loss"].get<double>()).epsilon(1e-6));

  // generate: a run directory and an adapter alone give what base + adapter gives.
  std::string a, b, c;
  REQUIRE(test::cli({"generate", "--model", f.model, "--adapter", adapter.string(), "--prompt",
                     "The patients", "--max-new-tokens", "5"},
                    &a) == 0);
  REQUIRE(test::cli({"generate", "--model", dir, "--prompt", "The patients", "--max-new-tokens",
                     "5"},
                    &b) == 0);
  REQUIRE(test::cli({"generate", "--adapter", adapter.string(), "--prompt", "The patients",
                     "--max-new-tokens", "5"},
                    &c) == 0);
  CHECK_FALSE(a.empty());
  CHECK(a == b);
  CHECK(a == c);
  // Not a model: the error says what was expected.
  std::string message;
  CHECK(run_binary({"eval", "--model", f.tmp.path.string(), "--data", held_out.string()},
                   &message) == 3);
  CHECK_THAT(message, Contains("expected a checkpoint directory, a dpft run directory"));

  // dpft account RUN_DIR: what the run spent, re-accounted from its ledger's releases.
  std::string spent;
  REQUIRE(test::cli({"account", dir, "--json"}, &spent) == 0);
  const nlohmann::json acc = nlohmann::json::parse(spent);
  CHECK(acc["epsilon"].get<double>() == Approx(m["privacy"]["epsilon"].get<double>()));
  CHECK(acc["epsilon"].get<double>() <= 8.0);
  CHECK(acc["releases"] == m["privacy"]["releases"]);
  CHECK(acc["status"] == "ok");
  CHECK(acc["method"] == "dp-sgd");
  CHECK(run_binary({"account", dir, "--eps", "1"}, &message) == 2);
  CHECK_THAT(message, Contains("--eps conflicts with a run directory"));
  CHECK(run_binary({"account", f.tmp.path.string()}, &message) == 3);
  CHECK_THAT(message, Contains("not a dpft run directory (no metrics.json)"));
}

TEST_CASE("a tokenizer kept apart from the model: model.tokenizer, and the hint that names it",
          "[first-hour]") {
  test::Fixture f;
  test::make_fixture(f);
  // The model's weights and config without its tokenizer files.
  const fs::path bare = f.tmp.path / "bare";
  fs::create_directories(bare);
  for (const char* file : {"config.json", "model.safetensors"})
    fs::copy_file(fs::path(f.model) / file, bare / file);
  const std::vector<std::string> validate = {"config",
                                             "validate",
                                             f.spec,
                                             "--set",
                                             "model.path=" + bare.string(),
                                             "--set",
                                             "data.train.path=" + f.train,
                                             "--set",
                                             "method.name=dp-sgd",
                                             "--set",
                                             "privacy.epsilon=8"};
  std::string message;
  CHECK(run_binary(validate, &message) == 3);
  CHECK_THAT(message, Contains("or set model.tokenizer to a directory that holds them"));
  std::vector<std::string> with = validate;
  with.insert(with.end(), {"--set", "model.tokenizer=" + f.model});
  CHECK(run_binary(with, &message) == 0);
  CHECK_THAT(message, Contains("pre-flight: data.train"));
  with.back() = "model.tokenizer=" + (f.tmp.path / "none").string();
  CHECK(run_binary(with, &message) == 3);
  CHECK_THAT(message,
             Contains("model.tokenizer: '" + (f.tmp.path / "none").string() + "' does not exist"));
}

TEST_CASE("dpft model logits --text on an encoder uses its tokenizer with <s> ... </s>",
          "[first-hour]") {
  const std::string model = (kSource / "models" / "tiny-roberta").string();
  std::string out;
  REQUIRE(test::cli({"tokenize", "--tokenizer", model, "--text", "hello world", "--json"}, &out) ==
          0);
  std::vector<int64_t> want = {0};  // <s>
  const nlohmann::json pieces = nlohmann::json::parse(out);
  for (const auto& id : pieces["ids"]) want.push_back(id.get<int64_t>());
  want.push_back(2);  // </s>
  REQUIRE(test::cli({"model", "logits", "--model", model, "--text", "hello world"}, &out) == 0);
  const nlohmann::json by_text = nlohmann::json::parse(out);
  CHECK(by_text["input_ids"].get<std::vector<int64_t>>() == want);
  std::string ids;
  for (int64_t id : want) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  REQUIRE(test::cli({"model", "logits", "--model", model, "--ids", ids}, &out) == 0);
  CHECK(nlohmann::json::parse(out)["logits"] == by_text["logits"]);
}

TEST_CASE("the first hour: own CSV -> run -> eval -> generate -> export -> summary table",
          "[first-hour]") {
  test::Fixture f;
  test::make_fixture(f);
  // The user's own file: their column name, a blank line and a row of spaces among the rows.
  const data::Table t = data::read_table(f.train);
  std::string csv = "id,note\n";
  for (size_t i = 0; i < 60; ++i) {
    csv += std::to_string(i) + "," + csv_quote(t.rows[i][0]) + "\n";
    if (i == 10) csv += "\n";
    if (i == 20) csv += "99,   \n";
  }
  const fs::path own = f.tmp.write("notes.csv", csv);
  std::string held = "id,note\n";
  for (size_t i = 100; i < 110; ++i)
    held += std::to_string(i) + "," + csv_quote(t.rows[i][0]) + "\n";
  const fs::path test_csv = f.tmp.write("notes_test.csv", held);
  // A short spec with the defaults: targets auto, epochs instead of steps.
  const fs::path spec =
      f.tmp.write("mine.yaml", "model: {path: " + f.model +
                                   "}\n"
                                   "data:\n"
                                   "  train: {path: " +
                                   own.string() +
                                   ", text_column: note, name: notes}\n"
                                   "  eval: {path: " +
                                   test_csv.string() +
                                   ", text_column: note}\n"
                                   "  max_length: 24\n"
                                   "privacy: {epsilon: 4}\n"
                                   "train: {epochs: 1, batch_size: 20, lr: 0.01}\n");
  const fs::path runs = f.tmp.path / "runs";
  std::vector<std::string> dirs;
  for (const char* method : {"dp-sgd", "denoise"})
    for (const char* seed : {"0", "1"}) {
      CAPTURE(method, seed);
      std::string printed;
      REQUIRE(
          test::cli({"run", spec.string(), "--out", runs.string(), "--set",
                     std::string("method.name=") + method, "--set", std::string("seed=") + seed},
                    &printed) == 0);
      dirs.push_back(test::last_line(printed));
    }
  const nlohmann::json m = nlohmann::json::parse(read_file(fs::path(dirs[0]) / "metrics.json"));
  CHECK(m["train"]["dataset_size"] == 60);  // the blank line and the row of spaces dropped
  CHECK(warned(m, "2 rows dropped as blank"));
  CHECK(m["run"]["dataset_name"] == "notes");
  // Evaluate and generate from the run directory alone.
  const fs::path ev = f.tmp.path / "eval.json";
  REQUIRE(test::cli({"eval", "--model", dirs[0], "--data", test_csv.string(), "--text-column",
                     "note", "--max-length", "24", "--out", ev.string()}) == 0);
  const nlohmann::json e = nlohmann::json::parse(read_file(ev));
  CHECK(e["eval"]["loss"].get<double>() ==
        Approx(m["eval"]["final"]["loss"].get<double>()).epsilon(1e-6));
  std::string text;
  REQUIRE(test::cli({"generate", "--model", dirs[0], "--prompt", "The", "--max-new-tokens", "4"},
                    &text) == 0);
  CHECK_FALSE(text.empty());
  // Export, then one table comparing the two methods over their seeds.
  REQUIRE(test::cli({"export", dirs[0], "--out", (f.tmp.path / "share").string()}) == 0);
  CHECK(fs::exists(f.tmp.path / "share" / "adapter" / "adapter_model.safetensors"));
  std::string table;
  REQUIRE(test::cli({"report", runs.string(), "--table", "summary"}, &table) == 0);
  CHECK_THAT(table, Contains("notes ε=4"));
  CHECK_THAT(table, Contains("| DP-SGD |"));
  CHECK_THAT(table, Contains("| DP-SGD+Denoise |"));
  CHECK_THAT(table, Contains("(n=2)"));
  CHECK_THAT(table, Contains("Eval loss (↓)"));
  // ... and one labelled plot.
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    WARN("skipped the plot: no gnuplot (apt-get install gnuplot-nox; scripts/setup.sh does)");
    return;
  }
  const fs::path fig = f.tmp.path / "loss.svg";
  REQUIRE(test::cli(
              {"report", runs.string(), "--plot", fig.string(), "--plot-kind", "eval-loss"}) == 0);
  const std::string svg = read_file(fig);
  CHECK_THAT(svg, Contains("DP-SGD, eps 4, n=2"));
  CHECK_THAT(svg, Contains("DP-SGD+Denoise, eps 4, n=2"));
  CHECK_THAT(svg, Contains("mean ± std over seeds"));
}
