// The decoder families added for "bring your own model" (issue 71) end to end through the CLI:
// `dpft model init --arch X --preset tiny` with a SentencePiece tokenizer (Llama-2's
// tokenizer.model, which is also Phi-3's), then `dpft run` with every training method that fits a
// decoder (a few steps on the PubMed fixture rows, targets auto), then `dpft eval` and
// `dpft generate` from the run directory (~30 s for the 45 runs). Multi-turn chat data
// (data.*.messages_column) rendered in a family's chat format with the loss on assistant turns.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>

#include "core/config/spec.hpp"
#include "core/model/checkpoint.hpp"
#include "core/tokenizer/chat.hpp"
#include "core/tokenizer/load.hpp"
#include "core/util/atomic_file.hpp"
#include "data/lm_dataset.hpp"
#include "run_fixture.hpp"

using namespace dpft;
using Catch::Matchers::Contains;

namespace {

std::string prompts_file() {
  return std::string(DPFT_SOURCE_DIR) + "/experiments/prompts/pubmed.yaml";
}

// Each decoder training method's options for a run of a few steps.
std::vector<std::string> method_args(const std::string& method) {
  if (method == "sgd") return {"--set", "method.name=sgd"};
  if (method == "dp-sgd" || method == "denoise")
    return {"--set", "method.name=" + method, "--set", "privacy.epsilon=2"};
  if (method == "dp-sft")
    return {"--set", "method.name=dp-sft",    "--set", "method.k=2",
            "--set", "method.stage1.steps=4", "--set", "privacy.epsilon=2",
            "--set", "model.peft.r=2"};
  // pe-sgd and the projection baselines: synthetic gradients from generated texts.
  return {"--set", "method.name=" + method,   "--set", "method.prompts=" + prompts_file(),
          "--set", "method.synthetic_size=8", "--set", "method.generation.max_new_tokens=8",
          "--set", "train.steps=3",           "--set", "privacy.epsilon=1"};
}

// Trains `arch` (made with the Llama-2 tokenizer) with each of `methods`; checks the run's
// metrics, then evaluates and samples from the last run directory.
void train_family(const std::string& arch, const std::vector<std::string>& methods) {
  SHARED_DATA_OR_SKIP(spm, "llama2_tokenizer");
  test::Fixture f;
  test::make_fixture(f);
  f.model = (f.tmp.path / arch).string();
  REQUIRE(test::cli({"model", "init", "--arch", arch, "--preset", "tiny", "--tokenizer",
                     (spm / "tokenizer.model").string(), "--out", f.model}) == 0);
  REQUIRE(model::load_checkpoint(f.model)->config().model_type == arch);
  std::string dir;
  for (const std::string& method : methods) {
    CAPTURE(arch, method);
    std::vector<std::string> extra = {"--set", "model.peft.targets=auto"};
    for (const std::string& a : method_args(method)) extra.push_back(a);
    const nlohmann::json m = test::run_metrics(f, (f.tmp.path / "runs").string(), extra, &dir);
    const double before = m["eval"]["base"]["loss"].get<double>();
    const double after = m["eval"]["final"]["loss"].get<double>();
    CHECK(std::isfinite(before));
    CHECK(std::isfinite(after));
    CHECK(after != before);  // it trained
    // The Llama-2 vocabulary: a random model's loss is near ln(32000) = 10.4.
    CHECK(before == Approx(std::log(32000.0)).margin(0.5));
    if (method != "sgd") CHECK(m["privacy"]["epsilon"].get<double>() <= 2.0 + 1e-9);
  }
  std::string text;
  REQUIRE(test::cli({"eval", "--model", dir, "--data", f.eval, "--max-length", "24",
                     "--max-samples", "4"},
                    &text) == 0);
  CHECK_THAT(text, Contains("loss"));
  REQUIRE(
      test::cli({"generate", "--model", dir, "--prompt", "The patients", "--max-new-tokens", "5"},
                &text) == 0);
  CHECK_FALSE(text.empty());
}

const std::vector<std::string> kMethods = {"sgd", "dp-sgd", "denoise", "pe-sgd",    "pdp-sgd",
                                           "gep", "inpro",  "dp-sft",  "sft+dp-sgd"};

}  // namespace

TEST_CASE("every decoder family trains with every decoder method", "[families]") {
  for (const char* arch : {"llama", "mistral", "gemma", "gemma2", "phi3"})
    train_family(arch, kMethods);
}

namespace {

// A Mistral v0.3 tokenizer directory (its tokenizer.json, tokenizer_config.json with the chat
// template, and tokenizer.model.v3 as tokenizer.model) under `dir`.
fs::path mistral_v3_tokenizer(const fs::path& shared, const fs::path& dir) {
  const fs::path v3 = shared / "v0.3";
  fs::create_directories(dir);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) fs::copy_file(v3 / f, dir / f);
  fs::copy_file(v3 / "tokenizer.model.v3", dir / "tokenizer.model");
  return dir;
}

}  // namespace

TEST_CASE(
    "multi-turn chats: messages_column rendered in the family's format, loss on assistant "
    "turns only",
    "[families][chat]") {
  SHARED_DATA_OR_SKIP(mistral, "mistral_tokenizer");
  SHARED_DATA_OR_SKIP(arena, "chatbot_arena_sample");
  test::TempDir tmp;
  const fs::path tokdir = mistral_v3_tokenizer(mistral, tmp.path / "tok");
  const tok::Tokenizer t = tok::load_tokenizer(tokdir);
  REQUIRE(t.chat_format() == tok::ChatFormat::kMistral);
  const std::string file = (arena / "chatbot_arena_conversations_sample.jsonl").string();
  DataSpec spec;
  spec.train.path = file;
  spec.train.messages_column = "messages";
  spec.train.num_samples = 6;
  spec.max_length = 4096;
  spec.chat_format = ChatFormatChoice::kAuto;
  for (LossOn on : {LossOn::kAssistant, LossOn::kAll}) {
    spec.loss_on = on;
    const data::LmDataset ds = data::load_lm_dataset(spec.train, {}, spec, t, 1);
    REQUIRE(ds.items.size() == 6);
    const std::vector<data::Example> all = data::read_examples(spec.train, "data.train");
    for (const auto& item : ds.items) {
      const data::Example& e = all.at(static_cast<size_t>(item.index));
      REQUIRE(e.messages.size() >= 2);
      const tok::ChatEncoding enc =
          tok::encode_chat(t, tok::render_chat(t, e.messages, false, tok::ChatFormat::kMistral));
      // bos first; the chat's ids (eos appended by add_eos only when it fits and is not there).
      REQUIRE(item.ids.size() >= enc.ids.size());
      CHECK(std::vector<int32_t>(item.ids.begin(), item.ids.begin() + enc.ids.size()) ==
            std::vector<int32_t>(enc.ids.begin(), enc.ids.end()));
      CHECK(item.ids[0] == 1);
      if (on == LossOn::kAll) {
        CHECK(std::count(item.scored.begin(), item.scored.end(), 1) ==
              static_cast<long>(item.scored.size()));
        continue;
      }
      // Scored: exactly the assistant turns (their content and </s>); the user turns and the
      // [INST] / [/INST] controls are context.
      CHECK(std::vector<uint8_t>(item.scored.begin(), item.scored.begin() + enc.ids.size()) ==
            enc.response_mask);
      size_t assistants = 0;
      for (const auto& m : e.messages) assistants += m.role == "assistant";
      CHECK(enc.response_tokens.size() == assistants);
      for (size_t i = 0; i < enc.ids.size(); ++i)
        if (enc.ids[i] == 3 || enc.ids[i] == 4) CHECK(item.scored[i] == 0);  // [INST] [/INST]
      CHECK_THAT(
          t.decode(std::vector<tok::TokenId>(enc.ids.begin() + enc.response_tokens[0].first,
                                             enc.ids.begin() + enc.response_tokens[0].second)),
          Contains(e.messages[1].content.substr(0, 20)));
    }
  }
  // Bad rows and settings are named.
  const fs::path bad = tmp.path / "bad.jsonl";
  write_file_atomic(bad,
                    "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n"
                    "{\"messages\": [{\"role\": \"bot\", \"content\": \"hi\"}]}\n");
  spec.train.path = bad.string();
  spec.train.num_samples = 0;
  CHECK_THROWS_WITH(data::read_examples(spec.train, "data.train"),
                    Contains("bad.jsonl:2: message 0 has role 'bot'; chat roles are system, user "
                             "and assistant"));
  write_file_atomic(bad, "{\"messages\": \"hi\"}\n");
  CHECK_THROWS_WITH(data::read_examples(spec.train, "data.train"),
                    Contains("bad.jsonl:1: messages_column holds no chat"));
  // A template no format here implements is refused under auto, with the known formats.
  nlohmann::json cfg = nlohmann::json::parse(read_file(tokdir / "tokenizer_config.json"));
  cfg["chat_template"] = "{% for m in messages %}<<{{ m.role }}>>{{ m.content }}{% endfor %}";
  fs::remove(tokdir / "tokenizer_config.json");
  write_file_atomic(tokdir / "tokenizer_config.json", cfg.dump());
  const tok::Tokenizer odd = tok::load_tokenizer(tokdir);
  spec.train.path = file;
  spec.train.num_samples = 2;
  CHECK_THROWS_WITH(data::load_lm_dataset(spec.train, {}, spec, odd, 1),
                    Contains("chat_template of") && Contains("is none dpft knows") &&
                        Contains("llama2, mistral, gemma, phi3"));
}

TEST_CASE("a Mistral model trains on multi-turn chats with DP-SGD, loss on assistant turns",
          "[families][chat]") {
  SHARED_DATA_OR_SKIP(mistral, "mistral_tokenizer");
  SHARED_DATA_OR_SKIP(arena, "chatbot_arena_sample");
  test::Fixture f;
  test::make_fixture(f);
  const fs::path tokdir = mistral_v3_tokenizer(mistral, f.tmp.path / "tok");
  f.model = (f.tmp.path / "mistral").string();
  REQUIRE(test::cli({"model", "init", "--arch", "mistral", "--preset", "tiny", "--tokenizer",
                     tokdir.string(), "--out", f.model}) == 0);
  f.train = f.eval = (arena / "chatbot_arena_conversations_sample.jsonl").string();
  std::string dir;
  const nlohmann::json m = test::run_metrics(f, (f.tmp.path / "runs").string(),
                                             {"--set", "model.peft.targets=auto",
                                              "--set", "data.train.messages_column=messages",
                                              "--set", "data.eval.messages_column=messages",
                                              "--set", "data.eval.rows=[2000, 2100]",
                                              "--set", "data.train.rows=[0, 2000]",
                                              "--set", "data.max_length=96",
                                              "--set", "data.chat_format=auto",
                                              "--set", "data.loss_on=assistant",
                                              "--set", "method.name=dp-sgd",
                                              "--set", "privacy.epsilon=4"},
                                             &dir);
  CHECK(std::isfinite(m["eval"]["final"]["loss"].get<double>()));
  const std::string resolved = read_file(fs::path(dir) / "config.resolved.yaml");
  CHECK_THAT(resolved, Contains("loss_on: assistant"));
  CHECK_THAT(resolved, Contains("messages_column: messages"));
  // Without a chat format the spec is refused before anything runs.
  std::string out;
  CHECK(test::cli(test::run_args(f, (f.tmp.path / "runs2").string(),
                                 {"--set", "data.train.messages_column=messages", "--set",
                                  "data.chat_format=none"}),
                  &out) == 2);
}
