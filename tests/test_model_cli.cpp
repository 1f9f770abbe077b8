// `dpft model init | info | logits | inspect` and `dpft generate` end to end on a tiny GPT-2
// built with the real GPT-2 tokenizer from ../shared/data (skipped when absent).
#include <catch2/catch.hpp>

#include "core/generate/generate.hpp"
#include "core/model/checkpoint.hpp"
#include "core/model/peft.hpp"
#include "core/tokenizer/load.hpp"
#include "core/util/atomic_file.hpp"
#include "test_util.hpp"

using namespace dpft;
using namespace dpft::test;

TEST_CASE("model init/info/logits and generate on a tiny GPT-2", "[model][cli]") {
  fs::path data = shared_data_dir();
  if (data.empty()) {
    WARN("skipped: ../shared/data not found");
    return;
  }
  TempDir d;
  std::string ck = (d.path / "tiny").string(), out;
  REQUIRE(cli({"model", "init", "--arch", "gpt2", "--preset", "tiny", "--tokenizer", (data / "gpt2_tokenizer").string(),
               "--out", ck, "--seed", "3"}, &out) == 0);
  CHECK(fs::exists(fs::path(ck) / "tokenizer.json"));

  REQUIRE(cli({"model", "info", ck, "--json", "--targets", "c_attn", "--r", "4"}, &out) == 0);
  auto info = nlohmann::json::parse(out);
  // tiny: d 64, 2 layers, MLP 256, 256 positions, vocab 50257, tied head
  int64_t per_layer = 2 * 64 * 2 + (64 * 192 + 192) + (64 * 64 + 64) + (64 * 256 + 256) + (256 * 64 + 64);
  CHECK(info["parameters"] == 50257 * 64 + 256 * 64 + 2 * per_layer + 2 * 64);
  CHECK(info["trainable_parameters"] == 2 * 4 * (64 + 192));
  CHECK(cli({"model", "info", ck, "--targets", "q_proj"}) == 2);

  // logits: --text and the same --ids agree, and equal a direct forward
  REQUIRE(cli({"model", "logits", "--model", ck, "--text", "Hello world", "--json"}, &out) == 0);
  auto by_text = nlohmann::json::parse(out);
  CHECK(by_text["input_ids"] == std::vector<int64_t>{15496, 995});  // GPT-2 ids of "Hello world"
  REQUIRE(cli({"model", "logits", "--model", ck, "--ids", "15496,995", "--json"}, &out) == 0);
  CHECK(nlohmann::json::parse(out)["logits"] == by_text["logits"]);
  model::CausalLM m = model::load_checkpoint(ck);
  torch::NoGradGuard ng;
  torch::Tensor direct = m->forward(torch::tensor({15496, 995}, torch::kInt64).view({1, 2}), torch::Tensor())[0][1];
  auto got = by_text["logits"].get<std::vector<float>>();
  REQUIRE(got.size() == 50257);
  CHECK(torch::allclose(torch::tensor(got), direct, 1e-6, 1e-6));
  CHECK(cli({"model", "logits", "--model", ck, "--ids", "1,x"}) == 2);
  CHECK(cli({"model", "logits", "--model", ck, "--ids", "99999"}) == 2);
  CHECK(cli({"model", "logits", "--model", (d.path / "missing").string(), "--ids", "1"}) == 3);

  // generate: greedy JSONL equals the library call
  std::string jl = (d.path / "g.jsonl").string();
  REQUIRE(cli({"generate", "--model", ck, "--prompt", "Hello world", "--max-new-tokens", "6", "--out", jl}) == 0);
  auto rows = read_jsonl(jl);
  REQUIRE(rows.size() == 1);
  generate::GenerationOptions g;
  g.max_new_tokens = 6;
  g.stop_ids = {50256};
  auto want = generate::generate(*m, {{15496, 995}}, g);
  CHECK(rows[0]["tokens"].get<std::vector<int64_t>>() == want[0].tokens);
  CHECK(rows[0]["finish_reason"] == want[0].finish_reason);

  REQUIRE(cli({"model", "inspect", ck, "--json"}, &out) == 0);
  CHECK(out.find("transformer.h.0.attn.c_attn.weight") != std::string::npos);
}

TEST_CASE("model info --peft adapter counts what apply_peft makes trainable", "[model][cli]") {
  SHARED_DATA_OR_SKIP(bert, "bert_base_uncased_vocab");
  TempDir d;
  const std::string ck = (d.path / "bert").string();
  REQUIRE(cli({"model", "init", "--arch", "bert", "--preset", "tiny", "--head", "classification",
               "--tokenizer", bert.string(), "--out", ck}) == 0);
  std::string out;
  REQUIRE(cli({"model", "info", ck, "--peft", "adapter", "--reduction-factor", "8", "--json"},
              &out) == 0);
  model::CausalLM m = model::load_checkpoint(ck);
  model::PeftOptions o;
  o.kind = model::PeftKind::kAdapter;
  o.reduction_factor = 8;
  model::apply_peft(m, o, 0);
  CHECK(nlohmann::json::parse(out)["trainable_parameters"] == model::count_parameters(m, true));
  CHECK(cli({"model", "info", std::string(DPFT_SOURCE_DIR) + "/models/tiny-gpt2", "--peft",
             "adapter"}) == 2);
}
