// BART (issue 25, part 1): the encoder-decoder against the independent Python reference
// (tests/reference/ref_forward.py, Debian's python3-torch) on a tiny random checkpoint with
// source and target padding; the one-pass training logits equal encode + decode; cached
// decoding equals recomputation; HF names, tied-embedding aliases, config errors; shift_right.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <set>

#include "core/generate/generate.hpp"
#include "core/grad/per_sample.hpp"
#include "core/lm/objective.hpp"
#include "core/model/checkpoint.hpp"
#include "core/model/peft.hpp"
#include "core/model/safetensors.hpp"
#include "core/model/seq2seq.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "model_test_util.hpp"
#include "test_util.hpp"

using namespace dpft;
using namespace dpft::model;

namespace {

torch::Tensor bart_ids(const std::vector<std::vector<int64_t>>& v) {
  std::vector<int64_t> f;
  for (const auto& r : v) f.insert(f.end(), r.begin(), r.end());
  return torch::tensor(f).view({static_cast<int64_t>(v.size()), -1});
}

// Sources and targets with right padding (pad 1): row 0 padded in both, row 1 full, row 2 short.
const std::vector<std::vector<int64_t>> kSrc = {
    {0, 17, 5, 42, 8, 2, 1, 1}, {0, 11, 12, 13, 14, 15, 16, 2}, {0, 50, 2, 1, 1, 1, 1, 1}};
const std::vector<std::vector<int64_t>> kSrcMask = {
    {1, 1, 1, 1, 1, 1, 0, 0}, {1, 1, 1, 1, 1, 1, 1, 1}, {1, 1, 1, 0, 0, 0, 0, 0}};
const std::vector<std::vector<int64_t>> kTgt = {
    {2, 0, 33, 34, 1, 1}, {2, 0, 60, 61, 62, 63}, {2, 0, 7, 1, 1, 1}};
const std::vector<std::vector<int64_t>> kTgtMask = {
    {1, 1, 1, 1, 0, 0}, {1, 1, 1, 1, 1, 1}, {1, 1, 1, 0, 0, 0}};

}  // namespace

TEST_CASE("bart matches the independent Python reference, with source and target padding",
          "[model][parity][bart]") {
  const std::string py = test::python_with_torch();
  if (py.empty()) {
    WARN("skipped: no python3 with torch (apt-get install python3-torch; scripts/setup.sh does)");
    return;
  }
  const fs::path script = fs::path(DPFT_SOURCE_DIR) / "tests" / "reference" / "ref_forward.py";
  auto scale = GENERATE(false, true);
  CAPTURE(scale);
  nlohmann::json j = test::bart_json();
  j["scale_embedding"] = scale;
  test::TempDir d;
  Seq2Seq m = test::random_bart(j, 43);
  CausalLM base = m;
  save_checkpoint(base, d.path / "ckpt");
  std::ofstream(d.path / "in.json") << nlohmann::json({{"input_ids", kSrc},
                                                       {"attention_mask", kSrcMask},
                                                       {"decoder_input_ids", kTgt},
                                                       {"decoder_attention_mask", kTgtMask}})
                                           .dump();
  const std::string cmd = py + " " + script.string() + " " + (d.path / "ckpt").string() + " " +
                          (d.path / "in.json").string() + " " + (d.path / "out.json").string();
  REQUIRE(std::system(cmd.c_str()) == 0);
  auto ref = nlohmann::json::parse(read_file(d.path / "out.json"));

  Seq2Seq loaded = as_seq2seq(load_checkpoint(d.path / "ckpt"));
  REQUIRE(loaded);
  torch::NoGradGuard ng;
  const torch::Tensor S = bart_ids(kSrc), SM = bart_ids(kSrcMask), T = bart_ids(kTgt),
                      TM = bart_ids(kTgtMask);
  const torch::Tensor src_real = SM.unsqueeze(-1).to(torch::kFloat32),
                      tgt_real = TM.unsqueeze(-1).to(torch::kFloat32);
  torch::Tensor enc = loaded->encode(S, SM);
  CHECK(test::max_abs_diff(enc * src_real, test::json_tensor(ref["encoder_hidden"]) * src_real) <
        1e-4);
  torch::Tensor logits = loaded->decode(T, TM, enc, SM);
  CHECK(logits.sizes() == torch::IntArrayRef({3, 6, 83}));
  CHECK(test::max_abs_diff(logits * tgt_real, test::json_tensor(ref["logits"]) * tgt_real) < 1e-4);
  // The training pass (one shared-embedding lookup) gives the same logits.
  CHECK(test::max_abs_diff(loaded->seq2seq_logits(S, SM, T, TM), logits) < 1e-5);
  // A plain token stream is refused: the model needs its source.
  CHECK_THROWS_AS(loaded->forward(S, SM), ConfigError);
}

TEST_CASE("bart: cached decoding equals recomputation, also after dropping rows", "[model][bart]") {
  Seq2Seq m = test::random_bart(test::bart_json(), 7);
  torch::NoGradGuard ng;
  const torch::Tensor S = bart_ids(kSrc), SM = bart_ids(kSrcMask);
  const torch::Tensor T =
      bart_ids({{2, 0, 33, 34, 35, 36}, {2, 0, 60, 61, 62, 63}, {2, 0, 7, 8, 9, 10}});
  torch::Tensor enc = m->encode(S, SM);
  torch::Tensor full = m->decode(T, torch::Tensor(), enc, SM);  // (3, 6, V)
  Seq2SeqCache cache;
  for (int64_t t = 0; t < T.size(1); ++t) {
    torch::Tensor step = m->decode(T.slice(1, t, t + 1), torch::Tensor(), enc, SM, &cache);
    CHECK(test::max_abs_diff(step.select(1, 0), full.select(1, t)) < 1e-5);
  }
  CHECK(cache.length() == 6);
  CHECK(cache.cross_k.size() == 2);  // one per decoder layer, computed once
  // Keep rows 2 and 0 (a beam reorder): the next step continues each of them.
  Seq2SeqCache c2;
  m->decode(T.slice(1, 0, 3), torch::Tensor(), enc, SM, &c2);
  const torch::Tensor rows = torch::tensor(std::vector<int64_t>{2, 0});
  c2.select_rows(rows);
  torch::Tensor next = m->decode(T.index_select(0, rows).slice(1, 3, 4), torch::Tensor(),
                                 enc.index_select(0, rows), SM.index_select(0, rows), &c2);
  CHECK(test::max_abs_diff(next.select(1, 0), full.index_select(0, rows).select(1, 3)) < 1e-5);
  // keep_last: only the last position's logits.
  CHECK(m->decode(T, torch::Tensor(), enc, SM, nullptr, 1).size(1) == 1);
}

TEST_CASE("bart parameters carry Hugging Face's names; tied aliases load; errors are named",
          "[model][bart]") {
  Seq2Seq m = test::random_bart(test::bart_json(), 3);
  CausalLM base = m;
  const std::vector<std::string> names = base->checkpoint_names();
  const std::set<std::string> have(names.begin(), names.end());
  for (const char* n :
       {"model.shared.weight", "model.encoder.embed_positions.weight",
        "model.encoder.layernorm_embedding.weight",
        "model.encoder.layers.1.self_attn.q_proj.weight",
        "model.encoder.layers.0.self_attn_layer_norm.bias", "model.encoder.layers.0.fc1.weight",
        "model.encoder.layers.0.final_layer_norm.weight",
        "model.decoder.layers.1.encoder_attn.k_proj.bias",
        "model.decoder.layers.0.encoder_attn_layer_norm.weight",
        "model.decoder.embed_positions.weight", "final_logits_bias"})
    CHECK(have.count(n) == 1);
  CHECK(have.count("lm_head.weight") == 0);  // tied to model.shared
  CHECK(have.count("model.encoder.layers.0.encoder_attn.q_proj.weight") == 0);
  CHECK(base->named_parameters(true).find("final_logits_bias") == nullptr);  // a buffer
  CHECK(base->named_parameters(true)["model.encoder.embed_positions.weight"].size(0) == 42);
  CHECK(base->linears().size() == 2 * (4 + 2) + 2 * (8 + 2));

  // A checkpoint holding the shared table only as model.encoder.embed_tokens.weight (and
  // BartModel's names, without "model.") loads to the same model.
  test::TempDir d;
  save_checkpoint(base, d.path / "ckpt");
  auto store = TensorStore::open_dir(d.path / "ckpt");
  std::vector<std::pair<std::string, torch::Tensor>> renamed;
  for (const std::string& n : names) {
    std::string k = n == "model.shared.weight" ? "model.encoder.embed_tokens.weight" : n;
    if (k.rfind("model.", 0) == 0 && k != "model.encoder.embed_tokens.weight") k = k.substr(6);
    renamed.emplace_back(k, store.load(n));
  }
  fs::create_directories(d.path / "alias");
  fs::copy_file(d.path / "ckpt" / "config.json", d.path / "alias" / "config.json");
  save_safetensors(d.path / "alias" / "model.safetensors", renamed);
  Seq2Seq a = as_seq2seq(load_checkpoint(d.path / "alias"));
  torch::NoGradGuard ng;
  const torch::Tensor S = bart_ids(kSrc), SM = bart_ids(kSrcMask), T = bart_ids(kTgt);
  CHECK(test::max_abs_diff(a->seq2seq_logits(S, SM, T, torch::Tensor()),
                           m->seq2seq_logits(S, SM, T, torch::Tensor())) == 0);

  // A missing tensor is named.
  renamed.erase(renamed.begin() + 3);
  save_safetensors(d.path / "alias" / "model.safetensors", renamed);
  try {
    load_checkpoint(d.path / "alias");
    FAIL("a checkpoint with a missing tensor loaded");
  } catch (const InputError& e) {
    CHECK_THAT(e.what(), Catch::Contains(names[3]));
  }

  // Config errors name the field.
  auto bad = [](const char* key, const nlohmann::json& v) {
    nlohmann::json j = test::bart_json();
    j[key] = v;
    try {
      parse_model_config(j, "cfg");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK_THAT(bad("decoder_attention_heads", 4), Catch::Contains("decoder_attention_heads"));
  CHECK_THAT(bad("decoder_ffn_dim", 96), Catch::Contains("decoder_ffn_dim"));
  CHECK_THAT(bad("decoder_layers", 0), Catch::Contains("decoder_layers"));
  CHECK_THAT(bad("decoder_start_token_id", 500), Catch::Contains("decoder_start_token_id"));
  CHECK_THAT(bad("tie_word_embeddings", false), Catch::Contains("tie_word_embeddings"));
  CHECK_THAT(bad("architectures", nlohmann::json::array({"BartForSequenceClassification"})),
             Catch::Contains("BartForSequenceClassification"));
  // Sequences beyond the position table are refused with the way out.
  const torch::Tensor long_ids = torch::full({1, 41}, 5, torch::kInt64);
  CHECK_THROWS_AS(m->encode(long_ids, torch::Tensor()), InputError);
  // config.json round trip.
  ModelConfig back = parse_model_config(model_config_to_json(m->config()), "round trip");
  CHECK(back.decoder_layers == 2);
  CHECK(back.num_layers == 2);
  CHECK(back.decoder_start_token_id == 2);
  CHECK(back.max_position == 40);
}

TEST_CASE("shift_right makes BART's teacher-forcing inputs", "[model][bart]") {
  const torch::Tensor labels = bart_ids({{0, 17, 18, 2}, {0, 5, -100, -100}});
  const torch::Tensor want = bart_ids({{2, 0, 17, 18}, {2, 0, 5, 1}});
  CHECK(torch::equal(shift_right(labels, 2, 1), want));
}

TEST_CASE("dpft model init --arch bart writes a loadable BART with the tokenizer's ids",
          "[model][bart]") {
  SHARED_DATA_OR_SKIP(roberta, "roberta_tokenizer");
  test::TempDir tmp;
  const std::string out = (tmp.path / "bart").string();
  REQUIRE(test::cli({"model", "init", "--arch", "bart", "--preset", "mini", "--tokenizer",
                     roberta.string(), "--out", out, "--seed", "2", "--dtype", "float16"}) == 0);
  CausalLM m = load_checkpoint(out);
  Seq2Seq s = as_seq2seq(m);
  REQUIRE(s);
  const ModelConfig& c = m->config();
  CHECK(c.vocab_size == 50265);
  CHECK(c.hidden_size == 128);
  CHECK(c.num_layers == 4);
  CHECK(c.decoder_layers == 4);
  CHECK(c.decoder_start_token_id == 2);  // RoBERTa's </s>
  CHECK(c.pad_token_id == 1);
  // The size the shipped generator must keep under 20 MB in float16.
  CHECK(fs::file_size(fs::path(out) / "model.safetensors") < 20u * 1000 * 1000);
  CHECK(test::cli({"model", "init", "--arch", "bart", "--preset", "gpt2-124m", "--tokenizer",
                   roberta.string(), "--out", out + "2"}) == 2);
}

TEST_CASE("bart generation: the cached decoder equals recomputation, greedy and sampled",
          "[generate][bart]") {
  Seq2Seq m = test::random_bart(test::bart_json(), 19);
  CausalLM base = m;
  const std::vector<std::vector<int64_t>>& src = test::bart_sources();
  for (bool sample : {false, true}) {
    CAPTURE(sample);
    generate::GenerationOptions o = test::bart_generation(sample);
    auto cached = generate::generate(*base, src, o);
    o.use_cache = false;
    auto slow = generate::generate(*base, src, o);
    REQUIRE(cached.size() == 3);
    for (size_t i = 0; i < 3; ++i) {
      CHECK(cached[i].tokens == slow[i].tokens);
      CHECK(cached[i].finish_reason == slow[i].finish_reason);
      CHECK(!cached[i].tokens.empty());
    }
    // A row decodes the same alone as in the batch (right padding of the sources is masked).
    o.use_cache = true;
    if (!sample) CHECK(generate::generate(*base, {src[1]}, o)[0].tokens == cached[1].tokens);
  }
  // no_repeat_ngram_size 1: no token twice among the new ones.
  generate::GenerationOptions o;
  o.max_new_tokens = 20;
  o.no_repeat_ngram_size = 1;
  o.pad_id = 1;
  for (const auto& g : generate::generate(*base, src, o)) {
    std::set<int64_t> distinct(g.tokens.begin(), g.tokens.end());
    CHECK(distinct.size() == g.tokens.size());
  }
  // The decoder's 40 positions: the start token and at most 39 new ones.
  o.no_repeat_ngram_size = 0;
  o.max_new_tokens = 100;
  CHECK(generate::generate(*base, {src[0]}, o)[0].tokens.size() == 39);
  generate::BeamOptions bo;
  CHECK_THROWS_AS(generate::beam_search(*base, src, bo), ConfigError);
}

namespace {
double bart_rows_rel_err(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).norm(2, 1) / b.norm(2, 1).clamp_min(1e-12)).max().item<double>();
}
}  // namespace

TEST_CASE("per-sample gradients of BART equal the one-sample reference", "[bart][grad]") {
  for (std::string peft : {"lora", "full"}) {
    for (auto mode : {grad::GradMode::kMaterialize, grad::GradMode::kGhost}) {
      INFO(peft << " mode " << static_cast<int>(mode));
      Seq2Seq s = test::random_bart(test::bart_json(), 23);
      CausalLM m = s;
      PeftOptions o;
      o.kind = enum_value(peft, model::kPeftKindNames, "peft");
      o.r = 4;
      o.targets = peft == "full" ? std::vector<std::string>{"all"}
                                 : std::vector<std::string>{"q_proj",   "k_proj", "v_proj",
                                                            "out_proj", "fc1",    "fc2"};
      apply_peft(m, o, 3);
      {
        torch::NoGradGuard ng;
        for (auto& [n, p] : trainable_parameters(m))
          if (n.find("lora_B") != std::string::npos) p.normal_(0, 0.1);
      }
      const lm::LmDataset ds = test::bart_grad_set();
      lm::LmBatch b = lm::collate(ds, {0, 1, 2}, 1);
      REQUIRE(b.src_ids.defined());
      grad::GradOptions go;
      go.mode = mode;
      grad::PerSampleGrads psg(m, go);
      torch::Tensor losses = psg.compute(b);
      auto [ref, ref_losses] = grad::reference_per_sample_grads(m, b);
      CHECK((losses - ref_losses).abs().max().item<double>() < 1e-5);
      CHECK(bart_rows_rel_err(psg.matrix(), ref) < 1e-5);
      torch::Tensor sq = psg.sq_norms();
      CHECK(((sq - ref.pow(2).sum(1)).abs() / ref.pow(2).sum(1)).max().item<double>() < 1e-5);
      if (peft == "full") {  // the shared table (both lookups and the tied head), positions, norms
        std::set<std::string> names;
        for (const auto& p : psg.params()) names.insert(p.name);
        for (const char* n :
             {"model.shared.weight", "model.encoder.embed_positions.weight",
              "model.decoder.embed_positions.weight", "model.decoder.layernorm_embedding.bias",
              "model.decoder.layers.1.encoder_attn.k_proj.weight"})
          CHECK(names.count(n) == 1);
        CHECK(names.count("final_logits_bias") == 0);
      } else {
        CHECK(psg.params().size() == 2 * 6 * 2 + 2 * 10 * 2);  // A and B of every linear
      }
    }
  }
}

TEST_CASE("seq2seq batches: sources right-padded, the loss scores every target token",
          "[bart][data]") {
  const lm::LmDataset ds = test::bart_grad_set();
  lm::LmBatch b = lm::collate(ds, {0, 1}, 1);
  CHECK(b.src_ids.sizes() == torch::IntArrayRef({2, 6}));
  CHECK(torch::equal(b.src_mask[1], torch::tensor(std::vector<int64_t>{1, 1, 1, 0, 0, 0})));
  CHECK(b.src_ids[1][4].item<int64_t>() == 1);
  Seq2Seq s = test::random_bart(test::bart_json(), 5);
  CausalLM m = s;
  torch::NoGradGuard ng;
  lm::MaskedLmScores sc = lm::seq2seq_scores(*m, b);
  CHECK(sc.targets[0].item<int64_t>() == 4);
  CHECK(sc.targets[1].item<int64_t>() == 7);
  // By hand for row 0: the decoder reads [2, 0, 33, 34] and is scored on [0, 33, 34, 2].
  torch::Tensor src = b.src_ids.slice(0, 0, 1), dec = bart_ids({{2, 0, 33, 34}});
  torch::Tensor logp =
      torch::log_softmax(s->seq2seq_logits(src, torch::Tensor(), dec, torch::Tensor()), -1)[0];
  const std::vector<int64_t> y = {0, 33, 34, 2};
  double nll = 0;
  for (int64_t t = 0; t < 4; ++t) nll -= logp[t][y[static_cast<size_t>(t)]].item<double>();
  CHECK(std::abs(sc.loss[0].item<double>() - nll / 4) < 1e-5);
  // A decoder-only model is refused.
  CausalLM gpt = make_causal_lm(test::tiny_config("gpt2", test::TinySize{}), 1);
  CHECK_THROWS_AS(lm::seq2seq_scores(*gpt, b), ConfigError);
}

TEST_CASE("dpft run trains a BART on (source, target) pairs: sgd learns, dp-sgd spends, resume",
          "[bart][run]") {
  SHARED_DATA_OR_SKIP(roberta, "roberta_tokenizer");
  SHARED_DATA_OR_SKIP(e2e, "e2e");
  test::TempDir tmp;
  const std::string model = (tmp.path / "model").string();
  REQUIRE(test::cli({"model", "init", "--arch", "bart", "--preset", "tiny", "--tokenizer",
                     roberta.string(), "--out", model, "--seed", "1"}) == 0);
  const std::string spec = (tmp.path / "spec.yaml").string();
  write_file_atomic(spec,
                    "name: bart-test\nseed: 3\n"
                    "model: {path: " +
                        model +
                        ", peft: {kind: full, targets: [all]}}\n"
                        "data:\n  task: seq2seq\n"
                        "  train: {path: " +
                        (e2e / "trainset.csv").string() +
                        ", prompt_column: mr, text_column: ref, num_samples: 96}\n"
                        "  eval: {path: " +
                        (e2e / "devset.csv").string() +
                        ", prompt_column: mr, text_column: ref, num_samples: 24}\n"
                        "  max_length: 48\n"
                        "privacy: {epsilon: .inf}\n"
                        "train: {steps: 8, batch_size: 16, micro_batch_size: 8, lr: 0.005}\n"
                        "method: {name: sgd}\n"
                        "eval: {every: 4}\n"
                        "output: {checkpoint_every: 2}\n");
  const std::string out = (tmp.path / "runs").string();
  std::string printed;
  REQUIRE(test::cli({"run", spec, "--out", out}, &printed) == 0);
  const fs::path dir = test::last_line(printed);
  auto m = nlohmann::json::parse(read_file(dir / "metrics.json"));
  const auto& base = m["eval"]["base"];
  const auto& fin = m["eval"]["final"];
  CHECK(fin["loss"].get<double>() < base["loss"].get<double>() - 1.0);  // it learns
  CHECK(base["tokens"] == fin["tokens"]);  // every target token of the 24 pairs, both times
  CHECK(base["tokens"].get<int64_t>() > 24 * 5);
  // Stopped after step 4 and resumed: the uninterrupted run's numbers.
  REQUIRE(test::cli({"run", spec, "--out", out, "--stop-after", "4"}, &printed) == 0);
  const fs::path part = test::last_line(printed);
  REQUIRE(test::cli({"run", "--resume", part.string()}) == 0);
  auto resumed = nlohmann::json::parse(read_file(part / "metrics.json"));
  CHECK(resumed["eval"] == m["eval"]);
  // DP-SGD with LoRA: Poisson lots, the ledger spends the budget.
  REQUIRE(test::cli({"run", spec, "--out", out, "--set", "method.name=dp-sgd", "--set",
                     "privacy.epsilon=4", "--set",
                     "model.peft={kind: lora, r: 4, targets: "
                     "[q_proj, v_proj, fc1, fc2]}"},
                    &printed) == 0);
  auto dp = nlohmann::json::parse(read_file(fs::path(test::last_line(printed)) / "metrics.json"));
  CHECK(dp["status"] == "ok");
  CHECK(dp["privacy"]["epsilon"].get<double>() <= 4.0);
  CHECK(dp["privacy"]["epsilon"].get<double>() > 3.5);
  // dpft generate on a BART: the prompt is the source; sampled, cut at max-new-tokens.
  const std::string gen = (tmp.path / "gen.jsonl").string();
  REQUIRE(test::cli({"generate", "--model", model, "--prompt", "name[The Vaults], eatType[pub]",
                     "--sample", "--top-p", "0.95", "--repetition-penalty", "1.5",
                     "--max-new-tokens", "6", "--out", gen}) == 0);
  auto line = nlohmann::json::parse(read_file(gen));
  CHECK(line["tokens"].size() <= 6);
  CHECK(!line["tokens"].empty());
  // The refusals: a bart under data.task lm, and a decoder-only model under seq2seq.
  CHECK(test::cli({"run", spec, "--out", out, "--set", "data.task=lm"}) == 2);
  const std::string gpt = (tmp.path / "gpt").string();
  SHARED_DATA_OR_SKIP(gpt2tok, "gpt2_tokenizer");
  REQUIRE(test::cli({"model", "init", "--arch", "gpt2", "--preset", "tiny", "--tokenizer",
                     gpt2tok.string(), "--out", gpt}) == 0);
  CHECK(test::cli({"run", spec, "--out", out, "--set", "model.path=" + gpt}) == 2);
}

TEST_CASE("dpft run: a BART trained on (source, target) pairs reads its sources", "[bart][run]") {
  // A copy task (target = the source's word, one of 8): after training, the eval loss with each
  // document's own source is far below the loss with the sources shuffled among the documents.
  // A training or eval path that dropped or mixed up the sources would score both alike
  // (an unconditional model learns the 8-word distribution and no more).
  SHARED_DATA_OR_SKIP(roberta, "roberta_tokenizer");
  test::TempDir tmp;
  const std::vector<std::string> words = {"apple",  "river",  "mountain", "doctor",
                                          "guitar", "window", "silver",   "engine"};
  std::string train = "source,target\n", right = train, shuffled = train;
  for (size_t i = 0; i < 256; ++i) train += words[i % 8] + "," + words[i % 8] + "\n";
  for (size_t i = 0; i < 16; ++i) {
    right += words[i % 8] + "," + words[i % 8] + "\n";
    shuffled += words[(i + 3) % 8] + "," + words[i % 8] + "\n";
  }
  const std::string dir = tmp.path.string();
  write_file_atomic(tmp.path / "train.csv", train);
  write_file_atomic(tmp.path / "right.csv", right);
  write_file_atomic(tmp.path / "shuffled.csv", shuffled);
  const std::string model = dir + "/model";
  REQUIRE(test::cli({"model", "init", "--arch", "bart", "--preset", "tiny", "--tokenizer",
                     roberta.string(), "--out", model, "--seed", "1"}) == 0);
  const std::string cols = ", prompt_column: source, text_column: target}";
  write_file_atomic(tmp.path / "spec.yaml", "name: copy\nseed: 3\nmodel: {path: " + model +
                                                ", peft: {kind: full, targets: [all]}}\n"
                                                "data:\n  task: seq2seq\n"
                                                "  train: {path: " +
                                                dir + "/train.csv" + cols +
                                                "\n  eval: {path: " + dir + "/right.csv" + cols +
                                                "\n  eval_sets: [{name: shuffled, path: " + dir +
                                                "/shuffled.csv" + cols +
                                                "]\n  max_length: 8\n"
                                                "privacy: {epsilon: .inf}\n"
                                                "train: {steps: 120, batch_size: 16, lr: 0.002}\n"
                                                "method: {name: sgd}\n");
  std::string printed;
  REQUIRE(test::cli({"run", dir + "/spec.yaml", "--out", dir + "/runs"}, &printed) == 0);
  auto m = nlohmann::json::parse(read_file(fs::path(test::last_line(printed)) / "metrics.json"));
  // The eval texts are training texts, so the block is non_private.
  const nlohmann::json& ev =
      m.contains("eval") && m["eval"].contains("final") ? m["eval"] : m["non_private"]["eval"];
  const nlohmann::json& fin = ev["final"];
  const double own = fin["loss"].get<double>();
  const double other = fin["sets"]["shuffled"]["loss"].get<double>();
  INFO("own sources " << own << ", shuffled " << other);
  CHECK(own < 0.5);
  CHECK(other > own + 1.0);
}

TEST_CASE("text infilling: Poisson spans, one mask each, the kept ids in order, per draw",
          "[bart][data]") {
  const int32_t kMask = 9999;
  std::vector<int32_t> body(400);
  for (size_t i = 0; i < body.size(); ++i) body[i] = static_cast<int32_t>(1000 + i);
  auto spans_of = [&](const std::vector<int32_t>& out, std::vector<int64_t>* lengths) {
    // Walk the output against the body: kept ids strictly in order; between two kept ids (or
    // the ends) the hidden run of ids must be stood for by at least one mask.
    int64_t next = 0, hidden = 0, masks_since = 0;
    auto close_gap = [&](int64_t upto) {
      const int64_t run = upto - next;
      if (run > 0) {
        CHECK(masks_since >= 1);
        if (lengths) lengths->push_back(run);
      }
      hidden += run;
      masks_since = 0;
    };
    for (int32_t id : out) {
      if (id == kMask) {
        ++masks_since;
        continue;
      }
      const int64_t pos = id - 1000;
      REQUIRE(pos >= next);
      close_gap(pos);
      next = pos + 1;
    }
    close_gap(static_cast<int64_t>(body.size()));
    return hidden;
  };
  lm::InfillingOptions o{kMask, 0.3, 3.0, 17};
  int64_t hidden = -1;
  const std::vector<int32_t> a = lm::text_infilling(body, o, 5, 1, &hidden);
  CHECK(hidden == 120);  // round(0.3 * 400)
  CHECK(spans_of(a, nullptr) == 120);
  CHECK(std::count(a.begin(), a.end(), kMask) >= 1);
  CHECK(lm::text_infilling(body, o, 5, 1) == a);  // deterministic in (seed, index, draw)
  CHECK(lm::text_infilling(body, o, 5, 2) != a);
  CHECK(lm::text_infilling(body, o, 6, 1) != a);
  // Span lengths follow the Poisson's mean (cut by the budget and by the spans already drawn:
  // a little shorter); a smaller lambda makes shorter spans.
  auto mean_span = [&](double lambda) {
    lm::InfillingOptions p{kMask, 0.3, lambda, 3};
    std::vector<int64_t> lengths;
    for (uint64_t d = 0; d < 200; ++d) spans_of(lm::text_infilling(body, p, 0, d), &lengths);
    double s = 0;
    for (int64_t l : lengths) s += static_cast<double>(l);
    return s / static_cast<double>(lengths.size());
  };
  const double m3 = mean_span(3.0), m1 = mean_span(1.0);
  INFO("mean span " << m3 << " (lambda 3), " << m1 << " (lambda 1)");
  CHECK(m3 > 2.4);
  CHECK(m3 < 3.6);
  CHECK(m1 < 1.8);
  // A short body still hides round(ratio n) ids; an empty one gets at most inserted masks.
  std::vector<int32_t> shortb(body.begin(), body.begin() + 10);
  lm::text_infilling(shortb, o, 0, 0, &hidden);
  CHECK(hidden == 3);
  for (int32_t id : lm::text_infilling({}, o, 0, 0, &hidden)) CHECK(id == kMask);
  CHECK(hidden == 0);
  // Nonsense options are refused.
  CHECK_THROWS(lm::text_infilling(body, lm::InfillingOptions{-1, 0.3, 3, 0}, 0, 0));
  CHECK_THROWS(lm::text_infilling(body, lm::InfillingOptions{kMask, 1.0, 3, 0}, 0, 0));
}

TEST_CASE("seq2seq batches with data.denoising: sources infilled from the targets, per draw",
          "[bart][data]") {
  lm::LmDataset ds;
  ds.objective = lm::Objective::kSeq2Seq;
  ds.infilling = {50, 0.3, 3.0, 7};
  for (int r = 0; r < 3; ++r) {
    lm::TokenizedExample t;
    t.index = r;
    t.ids = {0};
    for (int i = 0; i < 20 + 5 * r; ++i) t.ids.push_back(100 + i);
    t.ids.push_back(2);
    t.scored.assign(t.ids.size(), 1);
    ds.items.push_back(t);
  }
  const lm::LmBatch b = lm::collate(ds, {0, 1, 2}, 1, 4);
  REQUIRE(b.src_ids.size(0) == 3);
  for (int64_t i = 0; i < 3; ++i) {
    const int64_t len = b.src_mask[i].sum().item<int64_t>();
    CHECK(b.src_ids[i][0].item<int64_t>() == 0);        // <s>
    CHECK(b.src_ids[i][len - 1].item<int64_t>() == 2);  // </s>
    CHECK((b.src_ids[i] == 50).sum().item<int64_t>() >= 1);
    CHECK(len < static_cast<int64_t>(ds.items[i].ids.size()));  // spans became single masks
    // The targets are the rows as stored.
    CHECK(b.labels[i][1].item<int64_t>() == 100);
  }
  CHECK(torch::equal(lm::collate(ds, {0, 1, 2}, 1, 4).src_ids, b.src_ids));
  CHECK(!torch::equal(lm::collate(ds, {0, 1, 2}, 1, 5).src_ids, b.src_ids));
}

TEST_CASE("dpft run with data.denoising: sources made from the targets reach the model; refusals",
          "[bart][run]") {
  // One-word documents (one of 8 words): with mask_ratio 0.2 nothing of a word of 1 or 2
  // tokens is hidden (round(0.2 n) = 0), so each source is its own target, a copy task the
  // model learns; with 0.95 every token is hidden and the best it can do is the 8-word
  // distribution. A run whose sources did not come from the targets (or did not reach the
  // encoder) would score both alike.
  SHARED_DATA_OR_SKIP(roberta, "roberta_tokenizer");
  test::TempDir tmp;
  const std::vector<std::string> words = {"apple",  "river",  "mountain", "doctor",
                                          "guitar", "window", "silver",   "engine"};
  std::string train = "target\n";
  for (size_t i = 0; i < 256; ++i) train += words[i % 8] + "\n";
  const std::string dir = tmp.path.string();
  write_file_atomic(tmp.path / "train.csv", train);
  const std::string model = dir + "/model";
  REQUIRE(test::cli({"model", "init", "--arch", "bart", "--preset", "tiny", "--tokenizer",
                     roberta.string(), "--out", model, "--seed", "1"}) == 0);
  const std::string spec = dir + "/spec.yaml";
  write_file_atomic(spec, "name: infill\nseed: 3\nmodel: {path: " + model +
                              ", peft: {kind: full, targets: [all]}}\n"
                              "data:\n  task: seq2seq\n  denoising: {mask_ratio: 0.2}\n"
                              "  train: {path: " +
                              dir + "/train.csv, text_column: target}\n" + "  eval: {path: " + dir +
                              "/train.csv, text_column: target, num_samples: 16}\n"
                              "  max_length: 8\n"
                              "privacy: {epsilon: .inf}\n"
                              "train: {steps: 120, batch_size: 16, lr: 0.002}\n"
                              "method: {name: sgd}\n");
  auto final_loss = [&](const std::string& ratio) {
    std::string printed;
    REQUIRE(test::cli({"run", spec, "--out", dir + "/runs", "--set",
                       "data.denoising.mask_ratio=" + ratio},
                      &printed) == 0);
    auto m = nlohmann::json::parse(read_file(fs::path(test::last_line(printed)) / "metrics.json"));
    // The eval texts are training texts, so the block is non_private.
    const nlohmann::json& ev =
        m.contains("eval") && m["eval"].contains("final") ? m["eval"] : m["non_private"]["eval"];
    return ev["final"]["loss"].get<double>();
  };
  const double copy = final_loss("0.2"), hidden = final_loss("0.95");
  INFO("mask_ratio 0.2: " << copy << ", 0.95: " << hidden);
  CHECK(copy < 0.25);
  CHECK(hidden > 0.5);  // about ln 8 over the ~3 scored tokens of a word: the words' distribution
  CHECK(hidden > copy + 0.4);
  // Refusals: sources from a column as well, another task, a ratio of 1.
  CHECK(test::cli({"run", spec, "--out", dir + "/runs", "--set",
                   "data.train.prompt_column=target"}) == 2);
  CHECK(test::cli({"run", spec, "--out", dir + "/runs", "--set", "data.task=lm"}) == 2);
  CHECK(test::cli({"run", spec, "--out", dir + "/runs", "--set", "data.denoising.mask_ratio=1"}) ==
        2);
}
