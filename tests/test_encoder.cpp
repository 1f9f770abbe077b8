// Encoders (issue 22, part 1): BERT and RoBERTa with every head against the independent Python
// reference (tests/reference/ref_forward.py, Debian's python3-torch) on tiny random
// checkpoints, with padding, sentence pairs and token types; HF parameter names; config errors;
// the causal BERT's KV cache; sentence embeddings.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <set>

#include "core/grad/per_sample.hpp"
#include "core/lm/objective.hpp"
#include "core/model/checkpoint.hpp"
#include "core/model/encoder.hpp"
#include "core/model/peft.hpp"
#include "core/model/safetensors.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "data/classification.hpp"
#include "model_test_util.hpp"
#include "test_util.hpp"

using namespace dpft;
using namespace dpft::model;

TEST_CASE("encoders match the independent Python reference: every head, padding, pairs",
          "[model][parity][encoder]") {
  const std::string py = test::python_with_torch();
  if (py.empty()) {
    WARN("skipped: no python3 with torch (apt-get install python3-torch; scripts/setup.sh does)");
    return;
  }
  const fs::path script = fs::path(DPFT_SOURCE_DIR) / "tests" / "reference" / "ref_forward.py";
  struct Case {
    std::string type, arch;
    bool decoder;
  };
  const std::vector<Case> cases = {{"bert", "BertForSequenceClassification", false},
                                   {"bert", "BertForMaskedLM", false},
                                   {"bert", "BertLMHeadModel", true},
                                   {"bert", "BertModel", false},
                                   {"roberta", "RobertaForSequenceClassification", false},
                                   {"roberta", "RobertaForMaskedLM", false},
                                   {"roberta", "RobertaForCausalLM", true}};
  for (const auto& c : cases) {
    INFO(c.arch);
    test::TempDir d;
    CausalLM m = test::random_encoder(test::encoder_json(c.type, c.arch, c.decoder), 41);
    save_checkpoint(m, d.path / "ckpt");
    const int64_t pad = c.type == "roberta" ? 1 : 0;
    // Row 0: a pair "[CLS] a [SEP] b [SEP]" with token types 0/1 (BERT) and right padding;
    // row 1: full length; row 2: short, padded.
    std::vector<std::vector<int64_t>> ids = {{2, 17, 5, 3, 42, 8, 3, pad, pad},
                                             {2, 11, 12, 13, 14, 15, 16, 17, 3},
                                             {2, 50, 3, pad, pad, pad, pad, pad, pad}};
    std::vector<std::vector<int64_t>> mask = {
        {1, 1, 1, 1, 1, 1, 1, 0, 0}, {1, 1, 1, 1, 1, 1, 1, 1, 1}, {1, 1, 1, 0, 0, 0, 0, 0, 0}};
    std::vector<std::vector<int64_t>> types(3, std::vector<int64_t>(9, 0));
    if (c.type == "bert")
      for (int t = 4; t < 7; ++t) types[0][static_cast<size_t>(t)] = 1;
    std::ofstream(d.path / "in.json")
        << nlohmann::json({{"input_ids", ids}, {"attention_mask", mask}, {"token_type_ids", types}})
               .dump();
    const std::string cmd = py + " " + script.string() + " " + (d.path / "ckpt").string() + " " +
                            (d.path / "in.json").string() + " " + (d.path / "out.json").string();
    REQUIRE(std::system(cmd.c_str()) == 0);
    auto ref = nlohmann::json::parse(read_file(d.path / "out.json"));

    CausalLM loaded = load_checkpoint(d.path / "ckpt");
    Encoder enc = as_encoder(loaded);
    REQUIRE(enc);
    torch::NoGradGuard ng;
    auto flat = [](const std::vector<std::vector<int64_t>>& v) {
      std::vector<int64_t> f;
      for (const auto& r : v) f.insert(f.end(), r.begin(), r.end());
      return torch::tensor(f).view({static_cast<int64_t>(v.size()), -1});
    };
    const torch::Tensor I = flat(ids), M = flat(mask), TT = flat(types);
    const torch::Tensor real = M.unsqueeze(-1).to(torch::kFloat32);  // compare real tokens only
    torch::Tensor hidden = enc->encode(I, M, TT);
    CHECK(test::max_abs_diff(hidden * real, test::json_tensor(ref["hidden"]) * real) < 1e-4);
    CHECK(test::max_abs_diff(mean_pool_normalize(hidden, M), test::json_tensor(ref["embedding"])) <
          1e-5);
    const ModelConfig& cfg = loaded->config();
    if (cfg.head == EncoderHead::kSequenceClassification) {
      torch::Tensor logits = enc->classify(I, M, TT);
      CHECK(logits.sizes() == torch::IntArrayRef({3, 3}));
      CHECK(test::max_abs_diff(logits, test::json_tensor(ref["logits"])) < 1e-4);
      CHECK_THROWS_AS(loaded->forward(I, M), ConfigError);
    } else if (cfg.head == EncoderHead::kNone) {
      CHECK_FALSE(ref.contains("logits"));
      CHECK_THROWS_AS(enc->classify(I, M, TT), ConfigError);
    } else {
      // forward() has no token types: compare with the rows whose types are all 0.
      torch::Tensor logits = loaded->forward(I, M);
      torch::Tensor want = test::json_tensor(ref["logits"]);
      const int64_t from = c.type == "bert" ? 1 : 0;  // BERT row 0 used token types
      CHECK(test::max_abs_diff((logits * real).slice(0, from), (want * real).slice(0, from)) <
            1e-4);
      CHECK_THROWS_AS(enc->classify(I, M, TT), ConfigError);
    }
  }
}

TEST_CASE("encoder parameters carry Hugging Face's names; a missing one is named",
          "[model][encoder]") {
  auto names = [](const nlohmann::json& j) {
    nlohmann::json k = j;
    k["num_hidden_layers"] = 1;
    CausalLM m = make_causal_lm(parse_model_config(k, "t"), 0);
    std::vector<std::string> n = m->checkpoint_names();
    return std::set<std::string>(n.begin(), n.end());
  };
  const std::vector<std::string> layer = {"encoder.layer.0.attention.self.query.weight",
                                          "encoder.layer.0.attention.self.query.bias",
                                          "encoder.layer.0.attention.self.key.weight",
                                          "encoder.layer.0.attention.self.key.bias",
                                          "encoder.layer.0.attention.self.value.weight",
                                          "encoder.layer.0.attention.self.value.bias",
                                          "encoder.layer.0.attention.output.dense.weight",
                                          "encoder.layer.0.attention.output.dense.bias",
                                          "encoder.layer.0.attention.output.LayerNorm.weight",
                                          "encoder.layer.0.attention.output.LayerNorm.bias",
                                          "encoder.layer.0.intermediate.dense.weight",
                                          "encoder.layer.0.intermediate.dense.bias",
                                          "encoder.layer.0.output.dense.weight",
                                          "encoder.layer.0.output.dense.bias",
                                          "encoder.layer.0.output.LayerNorm.weight",
                                          "encoder.layer.0.output.LayerNorm.bias",
                                          "embeddings.word_embeddings.weight",
                                          "embeddings.position_embeddings.weight",
                                          "embeddings.token_type_embeddings.weight",
                                          "embeddings.LayerNorm.weight",
                                          "embeddings.LayerNorm.bias"};
  auto body = [&](const std::string& prefix) {
    std::set<std::string> s;
    for (const auto& n : layer) s.insert(prefix + n);
    return s;
  };
  auto with = [](std::set<std::string> s, std::initializer_list<std::string> more) {
    s.insert(more.begin(), more.end());
    return s;
  };
  CHECK(names(test::encoder_json("bert", "BertForSequenceClassification")) ==
        with(body("bert."), {"bert.pooler.dense.weight", "bert.pooler.dense.bias",
                             "classifier.weight", "classifier.bias"}));
  CHECK(names(test::encoder_json("roberta", "RobertaForSequenceClassification")) ==
        with(body("roberta."), {"classifier.dense.weight", "classifier.dense.bias",
                                "classifier.out_proj.weight", "classifier.out_proj.bias"}));
  CHECK(names(test::encoder_json("bert", "BertForMaskedLM")) ==
        with(body("bert."),
             {"cls.predictions.transform.dense.weight", "cls.predictions.transform.dense.bias",
              "cls.predictions.transform.LayerNorm.weight",
              "cls.predictions.transform.LayerNorm.bias", "cls.predictions.bias"}));
  CHECK(names(test::encoder_json("roberta", "RobertaForMaskedLM")) ==
        with(body("roberta."),
             {"lm_head.dense.weight", "lm_head.dense.bias", "lm_head.layer_norm.weight",
              "lm_head.layer_norm.bias", "lm_head.bias"}));
  CHECK(names(test::encoder_json("bert", "BertModel")) == body("bert."));

  // A saved base model (names without "bert.", as sentence-transformers ships them) loads; a
  // missing tensor is an error naming it.
  test::TempDir d;
  nlohmann::json j = test::encoder_json("bert", "BertModel");
  CausalLM m = test::random_encoder(j, 3);
  std::vector<std::pair<std::string, torch::Tensor>> w;
  for (auto& [n, t] : export_weights(m)) w.emplace_back(n.substr(5), t);  // strip "bert."
  fs::create_directories(d.path / "base");
  write_json_atomic(d.path / "base" / "config.json", j);
  save_safetensors(d.path / "base" / "model.safetensors", w);
  CausalLM back = load_checkpoint(d.path / "base");
  torch::NoGradGuard ng;
  const torch::Tensor ids = torch::tensor({{2, 5, 6, 3}}, torch::kInt64);
  CHECK(torch::equal(as_encoder(back)->encode(ids, torch::Tensor(), torch::Tensor()),
                     as_encoder(m)->encode(ids, torch::Tensor(), torch::Tensor())));
  w.erase(w.begin() + 2);
  const std::string gone = "bert." + export_weights(m)[2].first.substr(5);
  save_safetensors(d.path / "base" / "model.safetensors", w);
  CHECK_THROWS_WITH(load_checkpoint(d.path / "base"),
                    Catch::Contains(gone) && Catch::Contains("missing"));
}

TEST_CASE("encoder configs: heads, labels and the errors that name the fix", "[model][encoder]") {
  ModelConfig c =
      parse_model_config(test::encoder_json("roberta", "RobertaForSequenceClassification"), "t");
  CHECK(c.head == EncoderHead::kSequenceClassification);
  CHECK(c.labels == std::vector<std::string>{"negative", "neutral", "positive"});
  CHECK(c.usable_positions() == 40 - 2);  // RoBERTa positions start at pad + 1
  nlohmann::json back = model_config_to_json(c);
  CHECK(back["architectures"][0] == "RobertaForSequenceClassification");
  CHECK(back["id2label"]["2"] == "positive");
  CHECK(back["label2id"]["neutral"] == 1);
  CHECK(parse_model_config(back, "round trip").labels == c.labels);

  nlohmann::json j = test::encoder_json("bert", "BertForSequenceClassification");
  j.erase("id2label");
  CHECK(parse_model_config(j, "t").labels == std::vector<std::string>{"LABEL_0", "LABEL_1"});
  j["num_labels"] = 5;
  CHECK(parse_model_config(j, "t").num_labels() == 5);

  auto fails = [](nlohmann::json k, const std::string& what) {
    CHECK_THROWS_WITH(parse_model_config(k, "cfg"), Catch::Contains(what));
  };
  fails(test::encoder_json("bert", "BertLMHeadModel", false), "is_decoder");
  fails(test::encoder_json("bert", "BertForMaskedLM", true), "causal mask");
  fails(test::encoder_json("bert", "BertForTokenClassification"), "not supported");
  nlohmann::json k = test::encoder_json("bert", "BertModel");
  k["position_embedding_type"] = "relative_key";
  fails(k, "relative_key");
  k = test::encoder_json("bert", "BertForSequenceClassification");
  k["num_labels"] = 2;  // but id2label names 3
  fails(k, "num_labels 2");
  k = test::encoder_json("bert", "BertForSequenceClassification");
  k["id2label"] = {{"0", "a"}, {"2", "b"}};
  fails(k, "once each");
  k = test::encoder_json("roberta", "RobertaModel");
  k["max_position_embeddings"] = 2;
  fails(k, "no position");
  k = test::encoder_json("bert", "BertModel");
  k["hidden_size"] = 50;
  fails(k, "not divisible");

  // A sequence longer than the position table is an InputError naming the limit.
  CausalLM m =
      make_causal_lm(parse_model_config(test::encoder_json("roberta", "RobertaModel"), "t"), 0);
  torch::NoGradGuard ng;
  CHECK_THROWS_WITH(as_encoder(m)->encode(torch::full({1, 39}, 5, torch::kInt64), torch::Tensor(),
                                          torch::Tensor()),
                    Catch::Contains("at most 38"));
}

TEST_CASE("a causal BERT decodes with the KV cache as without it", "[model][encoder]") {
  for (std::string type : {"bert", "roberta"}) {
    INFO(type);
    CausalLM m = test::random_encoder(
        test::encoder_json(type, type == "bert" ? "BertLMHeadModel" : "RobertaForCausalLM", true),
        7);
    torch::NoGradGuard ng;
    const torch::Tensor ids = torch::tensor({{4, 9, 21, 33, 7, 12}}, torch::kInt64);
    torch::Tensor full = m->forward(ids, torch::Tensor());  // (1, 6, V)
    KVCache cache;
    torch::Tensor first = m->forward(ids.slice(1, 0, 4), torch::Tensor(), &cache);
    CHECK(test::max_abs_diff(first, full.slice(1, 0, 4)) < 1e-5);
    for (int64_t t = 4; t < 6; ++t) {
      torch::Tensor step = m->forward(ids.slice(1, t, t + 1), torch::Tensor(), &cache);
      CHECK(test::max_abs_diff(step, full.slice(1, t, t + 1)) < 1e-5);
    }
    // Causal: a later token does not change an earlier position's logits.
    torch::Tensor changed = ids.clone();
    changed[0][5] = 60;
    CHECK(test::max_abs_diff(m->forward(changed, torch::Tensor()).slice(1, 0, 5),
                             full.slice(1, 0, 5)) == 0);
  }
  // A masked LM sees both sides and refuses a cache.
  CausalLM mlm = test::random_encoder(test::encoder_json("bert", "BertForMaskedLM"), 8);
  torch::NoGradGuard ng;
  const torch::Tensor ids = torch::tensor({{4, 9, 21, 33}}, torch::kInt64);
  torch::Tensor changed = ids.clone();
  changed[0][3] = 60;
  CHECK(test::max_abs_diff(mlm->forward(changed, torch::Tensor()).select(1, 0),
                           mlm->forward(ids, torch::Tensor()).select(1, 0)) > 0);
  KVCache cache;
  CHECK_THROWS_AS(mlm->forward(ids, torch::Tensor(), &cache), ConfigError);
}

TEST_CASE("mean_pool_normalize: the mean over real tokens, unit length", "[model][encoder]") {
  torch::Tensor h = torch::tensor({1.0f, 2.0f, 3.0f, 4.0f, 100.0f, 100.0f}).view({1, 3, 2});
  torch::Tensor m = torch::tensor({{1, 1, 0}});
  torch::Tensor e = mean_pool_normalize(h, m);
  // mean (2, 3) / sqrt(13); the padded (100, 100) is ignored.
  CHECK(e[0][0].item<double>() == Approx(2.0 / std::sqrt(13.0)));
  CHECK(e[0][1].item<double>() == Approx(3.0 / std::sqrt(13.0)));
}

namespace {

double rows_rel_err(const torch::Tensor& a, const torch::Tensor& ref) {
  torch::Tensor d = (a.to(torch::kFloat64) - ref.to(torch::kFloat64)).norm(2, 1);
  return (d / ref.to(torch::kFloat64).norm(2, 1).clamp_min(1e-30)).max().item<double>();
}

}  // namespace

TEST_CASE("per-sample gradients of encoder classifiers equal the one-sample reference",
          "[encoder][grad]") {
  for (std::string type : {"bert", "roberta"}) {
    for (std::string peft : {"lora", "lora+head", "adapter", "full"}) {
      for (auto mode : {grad::GradMode::kMaterialize, grad::GradMode::kGhost}) {
        INFO(type << " " << peft << " mode " << static_cast<int>(mode));
        CausalLM m = test::random_encoder(
            test::encoder_json(type, type == "bert" ? "BertForSequenceClassification"
                                                    : "RobertaForSequenceClassification"),
            11);
        PeftOptions o;
        o.kind = peft == "full"      ? model::PeftKind::kFull
                 : peft == "adapter" ? model::PeftKind::kAdapter
                                     : model::PeftKind::kLora;  // lora, lora+head
        o.r = 4;
        o.reduction_factor = 8;  // width 6
        o.targets = peft == "full" ? std::vector<std::string>{"all"}
                                   : std::vector<std::string>{"query", "value", "dense"};
        if (peft == "lora+head" || peft == "adapter") o.modules_to_save = {"classifier"};
        apply_peft(m, o, 3);
        {  // LoRA B and adapter up-projections away from 0: every factor has a gradient
          torch::NoGradGuard ng;
          for (auto& [n, p] : trainable_parameters(m))
            if (n.find("lora_B") != std::string::npos ||
                n.find(".adapter.up.") != std::string::npos)
              p.normal_(0, 0.1);
        }
        const lm::LmDataset ds = test::encoder_grad_set(type == "bert");
        lm::LmBatch b = lm::collate(ds, {0, 1, 2, 3}, type == "roberta" ? 1 : 0);
        REQUIRE(b.token_type_ids.defined());
        REQUIRE(b.class_labels.defined());
        grad::GradOptions go;
        go.mode = mode;
        grad::PerSampleGrads psg(m, go);
        torch::Tensor losses = psg.compute(b);
        auto [ref, ref_losses] = grad::reference_per_sample_grads(m, b);
        CHECK((losses - ref_losses).abs().max().item<double>() < 1e-5);
        torch::Tensor M = psg.matrix();
        CHECK(rows_rel_err(M, ref) < 1e-5);
        torch::Tensor sq = psg.sq_norms();
        CHECK(((sq - ref.pow(2).sum(1)).abs() / ref.pow(2).sum(1)).max().item<double>() < 1e-5);
        const torch::Tensor w = torch::tensor({0.5f, 1.0f, 0.25f, 2.0f});
        std::vector<torch::Tensor> ws = psg.weighted_sum(w);
        std::vector<torch::Tensor> flat;
        for (auto& t : ws) flat.push_back(t.reshape(-1));
        torch::Tensor want = (ref * w.unsqueeze(1)).sum(0);
        CHECK(((torch::cat(flat) - want).norm() / want.norm()).item<double>() < 1e-5);
        if (peft == "full") {  // every new trainable kind took part
          std::set<std::string> names;
          for (const auto& p : psg.params()) names.insert(p.name);
          for (const char* n :
               {"embeddings.token_type_embeddings.weight", "embeddings.position_embeddings.weight",
                "embeddings.LayerNorm.weight"})
            CHECK(names.count(type + "." + n) == 1);
        }
      }
    }
  }
}

TEST_CASE(
    "per-sample gradients of encoder LM heads (their own vocabulary bias) equal the reference",
    "[encoder][grad]") {
  // BERT's cls.predictions.bias and RoBERTa's lm_head.bias are added to logits the tied word
  // embeddings (or an untied decoder) compute: the causal BERT of eval-synthetic --lm and of
  // CTCL's Downstream DPFT row trains them under DP.
  for (std::string type : {"bert", "roberta"}) {
    for (bool tied : {true, false}) {
      for (auto mode : {grad::GradMode::kMaterialize, grad::GradMode::kGhost}) {
        INFO(type << " tied " << tied << " mode " << static_cast<int>(mode));
        nlohmann::json j = test::encoder_json(
            type, type == "bert" ? "BertLMHeadModel" : "RobertaForCausalLM", true);
        j["tie_word_embeddings"] = tied;
        CausalLM m = test::random_encoder(j, 13);
        PeftOptions o;
        o.kind = model::PeftKind::kFull;
        o.targets = {"all"};
        apply_peft(m, o, 0);
        {  // a bias away from 0, as after training
          torch::NoGradGuard ng;
          for (auto& [n, p] : trainable_parameters(m))
            if (n == (type == "bert" ? "cls.predictions.bias" : "lm_head.bias")) p.normal_(0, 0.5);
        }
        lm::LmBatch b;
        b.input_ids = torch::tensor(
            {{5, 9, 21, 33, 7, 12}, {4, 60, 8, 1, 1, 1}, {70, 3, 44, 45, 46, 1}}, torch::kInt64);
        b.attention_mask = (b.input_ids != 1).to(torch::kInt64);
        b.labels = b.input_ids.masked_fill(b.attention_mask == 0, -100);
        grad::GradOptions go;
        go.mode = mode;
        grad::PerSampleGrads psg(m, go);
        std::set<std::string> names;
        for (const auto& p : psg.params()) names.insert(p.name);
        CHECK(names.count(type == "bert" ? "cls.predictions.bias" : "lm_head.bias") == 1);
        torch::Tensor losses = psg.compute(b);
        auto [ref, ref_losses] = grad::reference_per_sample_grads(m, b);
        CHECK((losses - ref_losses).abs().max().item<double>() < 1e-5);
        CHECK(rows_rel_err(psg.matrix(), ref) < 1e-5);
        torch::Tensor sq = psg.sq_norms();
        CHECK(((sq - ref.pow(2).sum(1)).abs() / ref.pow(2).sum(1)).max().item<double>() < 1e-5);
      }
    }
  }
}

TEST_CASE("collate carries token types and class ids of a classification set", "[encoder][data]") {
  const lm::LmDataset ds = test::encoder_grad_set();
  lm::LmBatch b = lm::collate(ds, {2, 0}, 0);
  CHECK(b.objective == lm::Objective::kClassification);
  CHECK(b.input_ids.sizes() == torch::IntArrayRef({2, 7}));
  CHECK(torch::equal(b.class_labels, torch::tensor({1, 0}, torch::kInt64)));
  CHECK(torch::equal(b.token_type_ids[1], torch::tensor({0, 0, 0, 0, 1, 1, 1}, torch::kInt64)));
  CHECK(b.token_type_ids[0].sum().item<int64_t>() == 0);  // a row without types: all type 0
  CHECK((b.labels == -100).all().item<bool>());           // no token is a prediction target
  lm::LmDataset bad = ds;
  bad.items[1].class_id = -1;
  CHECK_THROWS_WITH(lm::collate(bad, {1}, 0), Catch::Contains("has no class"));
  // A classification batch on a decoder is a ConfigError naming the need for an encoder.
  test::TinySize s;
  CausalLM gpt = make_causal_lm(test::tiny_config("gpt2", s), 0);
  CHECK_THROWS_WITH(lm::sample_losses(*gpt, b), Catch::Contains("needs an encoder"));
}

TEST_CASE("classification data: pairs with token types, label ids, label resolution, errors",
          "[encoder][data]") {
  tok::EncoderTokenizer tk(tok::WordPiece(
      {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "dog", "##s"}));
  std::vector<lm::Example> ex(3);
  ex[0].index = 0, ex[0].text = "the cat", ex[0].text_pair = std::string("dogs sat"),
  ex[0].label = "yes";
  ex[1].index = 1, ex[1].text = "the dog sat", ex[1].text_pair = std::string("cat"),
  ex[1].label = "no";
  ex[2].index = 2, ex[2].text = "cats", ex[2].text_pair = std::string("the the the the"),
  ex[2].label = "yes";
  // data.labels first, else the model's real label names; never the private file's labels.
  const std::vector<std::string> labels = {"no", "yes"};
  CHECK(data::resolve_labels(labels, {"LABEL_0", "LABEL_1"}) == labels);
  CHECK(data::resolve_labels({}, {"neg", "pos"}) == std::vector<std::string>{"neg", "pos"});
  CHECK_THROWS_WITH(data::resolve_labels({}, {"LABEL_0", "LABEL_1"}),
                    Catch::Contains("data.labels: not given"));
  CHECK_THROWS_WITH(data::resolve_labels(labels, {"a", "b", "c"}),
                    Catch::Contains("2 labels (no, yes)") && Catch::Contains("has 3 (a, b, c)"));
  CHECK_THROWS_WITH(data::resolve_labels({"a", "a"}, {}), Catch::Contains("twice"));
  lm::LmDataset ds = data::build_classification_dataset(ex, tk, labels, 8, "data.train");
  REQUIRE(ds.size() == 3);
  CHECK(ds.objective == lm::Objective::kClassification);
  // [CLS] the cat [SEP] dog ##s sat [SEP]
  CHECK(ds.items[0].ids == std::vector<int32_t>{2, 5, 6, 3, 8, 9, 7, 3});
  CHECK(ds.items[0].type_ids == std::vector<uint8_t>{0, 0, 0, 0, 1, 1, 1, 1});
  CHECK(ds.items[0].class_id == 1);
  CHECK(ds.items[1].class_id == 0);
  // longest_first to 8: "the the the the" loses one token, "cat ##s" keeps both.
  CHECK(ds.items[2].ids == std::vector<int32_t>{2, 6, 9, 3, 5, 5, 5, 3});
  ex[1].label = "maybe";
  CHECK_THROWS_WITH(
      data::build_classification_dataset(ex, tk, labels, 8, "data.train"),
      Catch::Contains("data.train: row 2 has label 'maybe'") && Catch::Contains("[no, yes]"));
  CHECK_THROWS_AS(data::build_classification_dataset(ex, tk, labels, 2, "data.train"), ConfigError);
}

TEST_CASE("LoRA with modules_to_save: the head trains in full, without LoRA, and round-trips",
          "[encoder][peft]") {
  for (std::string type : {"bert", "roberta"}) {
    INFO(type);
    test::TempDir d;
    const nlohmann::json j =
        test::encoder_json(type, type == "bert" ? "BertForSequenceClassification"
                                                : "RobertaForSequenceClassification");
    CausalLM m = test::random_encoder(j, 21);
    save_checkpoint(m, d.path / "base");
    PeftOptions o;
    o.r = 4;
    o.alpha = 8;
    o.targets = {"query", "value", "dense"};
    o.modules_to_save = {"classifier"};
    apply_peft(m, o, 5);
    std::set<std::string> trainable;
    for (auto& [n, p] : trainable_parameters(m)) trainable.insert(n);
    const std::string head = type == "bert" ? "classifier.weight" : "classifier.out_proj.weight";
    CHECK(trainable.count(head) == 1);
    if (type == "roberta") {  // classifier.dense matches "dense" but is saved whole, not LoRA'd
      CHECK(trainable.count("classifier.dense.weight") == 1);
      CHECK(trainable.count("classifier.dense.lora_A") == 0);
    }
    CHECK(trainable.count(type + ".encoder.layer.0.attention.output.dense.lora_A") == 1);
    CHECK(trainable.count(type + ".encoder.layer.0.attention.output.dense.weight") == 0);
    {
      torch::NoGradGuard ng;
      for (auto& [n, p] : trainable_parameters(m)) p.normal_(0, 0.05);
    }
    save_adapter(m, o, d.path / "adapter", (d.path / "base").string());
    auto cfg = nlohmann::json::parse(read_file(d.path / "adapter" / "adapter_config.json"));
    CHECK(cfg["task_type"] == "SEQ_CLS");
    CHECK(cfg["modules_to_save"] == nlohmann::json({"classifier"}));
    auto file = SafetensorsFile::open(d.path / "adapter" / "adapter_model.safetensors");
    CHECK(file->find("base_model.model." + head) != nullptr);
    CausalLM back = load_checkpoint(d.path / "base");
    PeftOptions read = load_adapter(back, d.path / "adapter");
    CHECK(read.modules_to_save == std::vector<std::string>{"classifier"});
    torch::NoGradGuard ng;
    const torch::Tensor ids = torch::tensor({{2, 5, 6, 7, 3}}, torch::kInt64);
    CHECK(torch::equal(as_encoder(back)->classify(ids, torch::Tensor(), torch::Tensor()),
                       as_encoder(m)->classify(ids, torch::Tensor(), torch::Tensor())));
  }
  CausalLM m = test::random_encoder(test::encoder_json("bert", "BertForSequenceClassification"), 1);
  PeftOptions bad;
  bad.targets = {"query"};
  bad.modules_to_save = {"score"};
  CHECK_THROWS_WITH(apply_peft(m, bad, 0), Catch::Contains("'score' matches no module"));
}

TEST_CASE("bottleneck adapters: identity at init, only they and the head train, round trip",
          "[encoder][peft]") {
  for (std::string type : {"bert", "roberta"}) {
    INFO(type);
    test::TempDir d;
    const nlohmann::json j =
        test::encoder_json(type, type == "bert" ? "BertForSequenceClassification"
                                                : "RobertaForSequenceClassification");
    CausalLM m = test::random_encoder(j, 22);
    save_checkpoint(m, d.path / "base");
    const torch::Tensor ids = torch::tensor({{2, 5, 6, 7, 3}, {2, 9, 3, 1, 1}}, torch::kInt64);
    const torch::Tensor mask = torch::tensor({{1, 1, 1, 1, 1}, {1, 1, 1, 0, 0}}, torch::kInt64);
    torch::Tensor before;
    {
      torch::NoGradGuard ng;
      before = as_encoder(m)->classify(ids, mask, torch::Tensor());
    }
    PeftOptions o;
    o.kind = model::PeftKind::kAdapter;
    o.reduction_factor = 8;  // 48 / 8 = 6 wide
    o.modules_to_save = {"classifier"};
    apply_peft(m, o, 5);
    std::set<std::string> trainable;
    int64_t adapters = 0;
    for (auto& [n, p] : trainable_parameters(m)) {
      trainable.insert(n);
      adapters += n.find(".adapter.") != std::string::npos;
      if (n.find(".adapter.down.weight") != std::string::npos)
        CHECK(p.sizes() == at::IntArrayRef{6, 48});
    }
    CHECK(adapters == 2 * 2 * 6);  // 2 layers x 2 places x (norm w, b, down w, b, up w, b)
    const std::string p0 = type + ".encoder.layer.0.";
    for (const char* where : {"attention.output.adapter.", "output.adapter."})
      for (const char* what : {"down.weight", "up.bias", "norm.weight"})
        CHECK(trainable.count(p0 + where + what) == 1);
    CHECK(trainable.count(p0 + "attention.self.query.weight") == 0);
    CHECK(trainable.count(type == "bert" ? "classifier.weight" : "classifier.out_proj.weight") ==
          1);
    torch::NoGradGuard ng;
    // The up-projections start at 0: the adapted model is the base model.
    CHECK(torch::equal(as_encoder(m)->classify(ids, mask, torch::Tensor()), before));
    // Base checkpoints never carry adapter weights.
    for (const auto& n : m->checkpoint_names()) CHECK(n.find("adapter") == std::string::npos);
    for (auto& [n, p] : trainable_parameters(m)) p.normal_(0, 0.05);
    const torch::Tensor trained = as_encoder(m)->classify(ids, mask, torch::Tensor());
    CHECK(!torch::allclose(trained, before));
    save_adapter(m, o, d.path / "adapter", (d.path / "base").string());
    auto cfg = nlohmann::json::parse(read_file(d.path / "adapter" / "adapter_config.json"));
    CHECK(cfg["peft_type"] == "BOTTLENECK");
    CHECK(cfg["bottleneck_size"] == 6);
    CausalLM back = load_checkpoint(d.path / "base");
    PeftOptions read = load_adapter(back, d.path / "adapter");
    CHECK(read.kind == model::PeftKind::kAdapter);
    CHECK(read.reduction_factor == 8);
    CHECK(torch::equal(as_encoder(back)->classify(ids, mask, torch::Tensor()), trained));
    // An adapter made for another width is refused, naming the mismatch.
    cfg["bottleneck_size"] = 5;
    write_file_atomic(d.path / "adapter" / "adapter_config.json", cfg.dump());
    CausalLM other = load_checkpoint(d.path / "base");
    CHECK_THROWS_WITH(load_adapter(other, d.path / "adapter"),
                      Catch::Contains("bottleneck_size 5"));
  }
  // Decoders have no adapters.
  CausalLM gpt2 = test::tiny_lora_gpt2(1);
  PeftOptions o;
  o.kind = model::PeftKind::kAdapter;
  CHECK_THROWS_WITH(apply_peft(gpt2, o, 0), Catch::Contains("built for encoders"));
}

TEST_CASE("auto grad mode takes ghost norms for an untied word embedding (a lookup only)",
          "[encoder][grad]") {
  // Materialising a lookup's per-sample gradient fills a (B, vocabulary, d) block: the cost model
  // counts that block, so the vocabulary-wide embedding goes to ghost norms (it chose
  // materialisation before, 2.5x slower and 5x the memory at bert small: docs/BENCHMARKS.md).
  nlohmann::json j = test::encoder_json("bert", "BertForSequenceClassification");
  j["vocab_size"] = 5000;
  CausalLM m = make_causal_lm(parse_model_config(j, "t"), 4);
  PeftOptions o;
  o.kind = model::PeftKind::kFull;
  o.targets = {"all"};
  apply_peft(m, o, 0);
  grad::PerSampleGrads psg(m);
  psg.compute(lm::collate(test::encoder_grad_set(), {0, 1, 2, 3}, 0));
  psg.sq_norms();
  const auto modes = psg.last_modes();
  for (size_t i = 0; i < psg.params().size(); ++i)
    if (psg.params()[i].name == "bert.embeddings.word_embeddings.weight")
      CHECK(modes[i] == "ghost");
}
