// Masked-LM pretraining of encoders (issue 22, part 5): BERT's 15 % / 80-10-10 masks drawn by
// lm::collate per (seed, example, draw), the unshifted masked-token loss against a slow loop,
// and `dpft run` with data.task mlm (packing, evaluation on fixed masks, resume), plus the
// causal BERT (data.task lm on an is_decoder encoder) and the refusals.
#include <catch2/catch.hpp>

#include "core/lm/objective.hpp"
#include "core/model/checkpoint.hpp"
#include "core/model/encoder.hpp"
#include "core/util/atomic_file.hpp"
#include "model_test_util.hpp"
#include "test_util.hpp"

using namespace dpft;

namespace {

// 200 rows of 100 ids in [10, 1000): the first and last unscored (the specials).
lm::LmDataset masked_set() {
  lm::LmDataset ds;
  ds.objective = lm::Objective::kMaskedLM;
  ds.masking = {3, 1000, 0.15, 7};
  for (int64_t r = 0; r < 200; ++r) {
    lm::TokenizedExample t;
    t.index = 1000 + r;
    for (int64_t i = 0; i < 100; ++i)
      t.ids.push_back(static_cast<int32_t>(10 + (r * 37 + i * 11) % 990));
    t.scored.assign(100, 1);
    t.scored.front() = t.scored.back() = 0;
    ds.items.push_back(t);
  }
  return ds;
}

std::vector<int64_t> all_rows(int64_t n) {
  std::vector<int64_t> r;
  for (int64_t i = 0; i < n; ++i) r.push_back(i);
  return r;
}

}  // namespace

TEST_CASE("masked-LM batches select 15 % of the text ids: 80 % [MASK], 10 % random, 10 % kept",
          "[mlm]") {
  const lm::LmDataset ds = masked_set();
  const lm::LmBatch b = lm::collate(ds, all_rows(ds.size()), 1, 5);
  int64_t scored = 0, selected = 0, masked = 0, random = 0, kept = 0;
  for (int64_t r = 0; r < ds.size(); ++r) {
    const auto& ex = ds.items[static_cast<size_t>(r)];
    for (int64_t t = 0; t < 100; ++t) {
      const int64_t orig = ex.ids[static_cast<size_t>(t)];
      const int64_t in = b.input_ids[r][t].item<int64_t>(), y = b.labels[r][t].item<int64_t>();
      if (!ex.scored[static_cast<size_t>(t)]) {  // specials: never selected, never changed
        CHECK(y == -100);
        CHECK(in == orig);
        continue;
      }
      ++scored;
      if (y == -100) {
        REQUIRE(in == orig);  // an unselected id is left as it is
        continue;
      }
      REQUIRE(y == orig);  // the target is the original id
      ++selected;
      if (in == 3)
        ++masked;
      else if (in == orig)
        ++kept;
      else {
        ++random;
        CHECK((in >= 0 && in < 1000));
      }
    }
  }
  REQUIRE(scored == 200 * 98);
  // Binomial standard deviations: 0.0026 for the selection rate, ~0.007 / 0.0055 for the shares
  // (about 2900 selected); the bounds are 4 of them.
  const double rate = static_cast<double>(selected) / static_cast<double>(scored);
  CHECK(rate == Approx(0.15).margin(0.011));
  CHECK(static_cast<double>(masked) / selected == Approx(0.8).margin(0.03));
  CHECK(static_cast<double>(random) / selected == Approx(0.1).margin(0.022));
  CHECK(static_cast<double>(kept) / selected == Approx(0.1).margin(0.022));
}

TEST_CASE("masked-LM draws depend on the example and the draw only, not on the batch", "[mlm]") {
  const lm::LmDataset ds = masked_set();
  const lm::LmBatch whole = lm::collate(ds, all_rows(ds.size()), 1, 9);
  const lm::LmBatch alone = lm::collate(ds, {17}, 1, 9);
  CHECK(torch::equal(alone.input_ids[0], whole.input_ids[17]));
  CHECK(torch::equal(alone.labels[0], whole.labels[17]));
  const lm::LmBatch again = lm::collate(ds, all_rows(ds.size()), 1, 9);
  CHECK(torch::equal(again.labels, whole.labels));
  const lm::LmBatch next = lm::collate(ds, all_rows(ds.size()), 1, 10);
  CHECK(!torch::equal(next.labels, whole.labels));  // a new step masks anew
  lm::LmDataset other = ds;
  other.masking.seed = 8;
  CHECK(!torch::equal(lm::collate(other, all_rows(ds.size()), 1, 9).labels, whole.labels));
  // A masked-LM set without a mask id cannot be collated.
  other.masking.mask_id = -1;
  CHECK_THROWS_WITH(lm::collate(other, {0}, 1, 1), Catch::Contains("mask id"));
}

TEST_CASE("the masked-token loss is each sample's mean cross-entropy at its targets, unshifted",
          "[mlm]") {
  torch::manual_seed(3);
  const torch::Tensor logits = torch::randn({3, 5, 11}, torch::kFloat64);
  torch::Tensor labels = torch::full({3, 5}, -100, torch::kInt64);
  labels[0][1] = 4, labels[0][4] = 10, labels[1][0] = 0;  // row 2 has no target
  auto [loss, count] = lm::masked_token_loss(logits, labels);
  for (int64_t b = 0; b < 3; ++b) {
    double sum = 0;
    int64_t n = 0;
    for (int64_t t = 0; t < 5; ++t) {
      const int64_t y = labels[b][t].item<int64_t>();
      if (y == -100) continue;
      double z = 0;
      for (int64_t v = 0; v < 11; ++v) z += std::exp(logits[b][t][v].item<double>());
      sum += std::log(z) - logits[b][t][y].item<double>();
      ++n;
    }
    CHECK(count[b].item<int64_t>() == n);
    CHECK(loss[b].item<double>() == Approx(n ? sum / n : 0.0).epsilon(1e-5));
  }
}

TEST_CASE("masked-LM scores from the masked positions only equal the full-logits reference",
          "[mlm]") {
  for (const char* type : {"bert", "roberta"}) {
    CAPTURE(type);
    const std::string arch = std::string(type) == "bert" ? "BertForMaskedLM" : "RobertaForMaskedLM";
    model::CausalLM m = test::random_encoder(test::encoder_json(type, arch), 4);
    lm::LmDataset ds;
    ds.objective = lm::Objective::kMaskedLM;
    ds.masking = {5, 83, 0.3, 11};
    for (int64_t r = 0; r < 4; ++r) {  // rows of 9, 14, 19, 24 ids: padding in the batch
      lm::TokenizedExample t;
      t.index = r;
      for (int64_t i = 0; i < 9 + 5 * r; ++i)
        t.ids.push_back(static_cast<int32_t>(7 + (r * 13 + i * 5) % 70));
      t.scored.assign(t.ids.size(), 1);
      t.scored.front() = t.scored.back() = 0;
      ds.items.push_back(t);
    }
    const int64_t pad = std::string(type) == "bert" ? 0 : 1;
    const lm::LmBatch b = lm::collate(ds, {0, 1, 2, 3}, pad, 2);
    torch::NoGradGuard ng;
    const lm::MaskedLmScores fast = lm::masked_lm_scores(*m, b);
    torch::Tensor logits = m->forward(b.input_ids, b.attention_mask);  // (B, T, V)
    auto [loss, targets] = lm::masked_token_loss(logits, b.labels);
    CHECK(torch::equal(fast.targets, targets));
    CHECK(torch::allclose(fast.loss, loss, 1e-5, 1e-6));
    torch::Tensor hit = (logits.argmax(-1) == b.labels) & b.labels.ne(-100);
    CHECK(torch::equal(fast.correct, hit.sum(1)));
    CHECK(targets.min().item<int64_t>() > 0);  // every row has targets at rate 0.3
    CHECK(torch::allclose(lm::sample_losses(*m, b), loss, 1e-5, 1e-6));
  }
}

TEST_CASE("dpft run pretrains a RoBERTa masked LM, evaluates on fixed masks and resumes exactly",
          "[mlm][run]") {
  SHARED_DATA_OR_SKIP(roberta, "roberta_tokenizer");
  SHARED_DATA_OR_SKIP(text, "lm_text_misc");
  test::TempDir tmp;
  const std::string model = (tmp.path / "model").string();
  REQUIRE(test::cli({"model", "init", "--arch", "roberta", "--preset", "tiny", "--head", "mlm",
                     "--tokenizer", roberta.string(), "--out", model, "--seed", "1"}) == 0);
  const std::string spec = (tmp.path / "spec.yaml").string();
  write_file_atomic(spec,
                    "name: mlm-test\nseed: 3\n"
                    "model: {path: " +
                        model +
                        ", peft: {kind: full, targets: [all]}}\n"
                        "data:\n  task: mlm\n"
                        "  train: {path: " +
                        (text / "wikitext-2_valid.txt").string() +
                        ", format: text, num_samples: 120}\n"
                        "  eval: {path: " +
                        (text / "wikitext-2_test.txt").string() +
                        ", format: text, num_samples: 40, exclude_train: true}\n"
                        "  max_length: 32\n  packing: true\n"
                        "privacy: {epsilon: .inf}\n"
                        "train: {steps: 6, batch_size: 8, micro_batch_size: 8, lr: 0.003}\n"
                        "method: {name: sgd}\n"
                        "eval: {every: 3}\n"
                        "output: {checkpoint_every: 2}\n");
  const std::string out = (tmp.path / "runs").string();
  std::string printed;
  REQUIRE(test::cli({"run", spec, "--out", out}, &printed) == 0);
  const fs::path dir = test::last_line(printed);
  auto m = nlohmann::json::parse(read_file(dir / "metrics.json"));
  const auto& base = m["eval"]["base"];
  const auto& fin = m["eval"]["final"];
  CHECK(fin["loss"].get<double>() < base["loss"].get<double>() - 0.5);  // it learns
  // About 15 % of the eval text ids are targets, on every evaluation the same ones.
  CHECK(base["tokens"] == fin["tokens"]);
  CHECK(base["tokens"].get<int64_t>() > 0);
  CHECK(m["eval"]["history"][0]["tokens"] == fin["tokens"]);
  // Stopped after step 3 and resumed: the masks of steps 4-6 are the uninterrupted run's.
  REQUIRE(test::cli({"run", spec, "--out", out, "--stop-after", "3"}, &printed) == 0);
  const fs::path part = test::last_line(printed);
  REQUIRE(test::cli({"run", "--resume", part.string()}) == 0);
  auto resumed = nlohmann::json::parse(read_file(part / "metrics.json"));
  CHECK(resumed["eval"] == m["eval"]);
  CHECK(resumed["non_private"]["history"] == m["non_private"]["history"]);
  // The refusals: DP masked-LM training, and a classifier checkpoint under data.task mlm.
  CHECK(test::cli({"run", spec, "--out", out, "--set", "method.name=dp-sgd", "--set",
                   "privacy.epsilon=4"}) == 2);
  const std::string cls = (tmp.path / "cls").string();
  REQUIRE(test::cli({"model", "init", "--arch", "roberta", "--preset", "tiny", "--head",
                     "classification", "--tokenizer", roberta.string(), "--out", cls}) == 0);
  CHECK(test::cli({"run", spec, "--out", out, "--set", "model.path=" + cls}) == 2);
}

TEST_CASE("a causal BERT trains as a language model with sgd and dp-sgd (LoRA)", "[mlm][run]") {
  SHARED_DATA_OR_SKIP(bert, "bert_base_uncased_vocab");
  SHARED_DATA_OR_SKIP(text, "lm_text_misc");
  test::TempDir tmp;
  const std::string model = (tmp.path / "model").string();
  REQUIRE(test::cli({"model", "init", "--arch", "bert", "--preset", "tiny", "--head", "causal",
                     "--tokenizer", bert.string(), "--out", model, "--seed", "1"}) == 0);
  const std::string spec = (tmp.path / "spec.yaml").string();
  write_file_atomic(spec,
                    "name: causal-bert\nseed: 3\n"
                    "model: {path: " +
                        model +
                        ", peft: {kind: full, targets: [all]}}\n"
                        "data:\n"
                        "  train: {path: " +
                        (text / "wikitext-2_valid.txt").string() +
                        ", format: text, num_samples: 64}\n"
                        "  eval: {path: " +
                        (text / "wikitext-2_test.txt").string() +
                        ", format: text, num_samples: 24, exclude_train: true}\n"
                        "  max_length: 32\n"
                        "privacy: {epsilon: .inf}\n"
                        "train: {steps: 4, batch_size: 16, micro_batch_size: 8, lr: 0.003}\n"
                        "method: {name: sgd}\n");
  const std::string out = (tmp.path / "runs").string();
  std::string printed;
  REQUIRE(test::cli({"run", spec, "--out", out}, &printed) == 0);
  auto m = nlohmann::json::parse(read_file(fs::path(test::last_line(printed)) / "metrics.json"));
  CHECK(m["eval"]["final"]["loss"].get<double>() < m["eval"]["base"]["loss"].get<double>());
  CHECK(m["eval"]["final"]["perplexity"].get<double>() > 1.0);
  REQUIRE(test::cli({"run", spec, "--out", out, "--set", "method.name=dp-sgd", "--set",
                     "privacy.epsilon=4", "--set", "model.peft.kind=lora", "--set",
                     "model.peft.targets=[query, value]"},
                    &printed) == 0);
  m = nlohmann::json::parse(read_file(fs::path(test::last_line(printed)) / "metrics.json"));
  CHECK(m["privacy"]["epsilon"].get<double>() <= 4.0);
  // At document level with packing: each line's blocks apart, one unit per non-empty line.
  REQUIRE(test::cli(
              {"run", spec, "--out", out, "--set", "method.name=dp-sgd", "--set",
               "privacy.epsilon=4", "--set", "privacy.unit=document", "--set", "data.packing=true"},
              &printed) == 0);
  m = nlohmann::json::parse(read_file(fs::path(test::last_line(printed)) / "metrics.json"));
  CHECK(m["status"] == "ok");
  CHECK(m["privacy"]["unit"]["unit"] == "document");
  CHECK(m["privacy"]["unit"]["count"].get<int64_t>() > 10);
  CHECK(m["privacy"]["unit"]["count"].get<int64_t>() <= 64);
  // PE-SGD generates with a decoder tokenizer: refused for an encoder.
  CHECK(test::cli(
            {"run", spec, "--out", out, "--set", "method.name=pe-sgd", "--set",
             "method.prompts=" + std::string(DPFT_SOURCE_DIR) + "/experiments/prompts/pubmed.yaml",
             "--set", "privacy.epsilon=4"}) == 2);
}

TEST_CASE("dpft model rehead keeps a pretrained encoder's body and gives it a new seeded head",
          "[mlm][model-cli]") {
  SHARED_DATA_OR_SKIP(bert, "bert_base_uncased_vocab");
  test::TempDir tmp;
  const std::string mlm = (tmp.path / "mlm").string(), cls = (tmp.path / "cls").string();
  REQUIRE(test::cli({"model", "init", "--arch", "bert", "--preset", "tiny", "--head", "mlm",
                     "--tokenizer", bert.string(), "--out", mlm, "--seed", "1"}) == 0);
  std::string printed;
  REQUIRE(test::cli({"model", "rehead", "--from", mlm, "--head", "classification", "--labels",
                     "a,b,c", "--out", cls, "--seed", "2"},
                    &printed) == 0);
  CHECK_THAT(printed, Catch::Contains("bert.pooler.dense.weight"));  // BertForMaskedLM has none
  model::CausalLM a = model::load_checkpoint(mlm), b = model::load_checkpoint(cls);
  CHECK(b->config().labels == std::vector<std::string>{"a", "b", "c"});
  auto pa = a->named_parameters(true);
  int shared = 0;
  for (const auto& p : b->named_parameters(true))
    if (const torch::Tensor* q = pa.find(p.key())) {
      CHECK(torch::equal(*q, p.value()));
      ++shared;
    } else {
      CHECK((p.key().rfind("classifier.", 0) == 0 || p.key().rfind("bert.pooler.", 0) == 0));
    }
  CHECK(shared > 10);
  // The same body: the same hidden states.
  const torch::Tensor ids = torch::tensor({{101, 7592, 2088, 102}}, torch::kInt64);
  torch::NoGradGuard ng;
  CHECK(torch::equal(model::as_encoder(a)->encode(ids, torch::Tensor(), torch::Tensor()),
                     model::as_encoder(b)->encode(ids, torch::Tensor(), torch::Tensor())));
  // Refusals: a decoder source, and writing over the source.
  const std::string gpt2 = std::string(DPFT_SOURCE_DIR) + "/models/tiny-gpt2";
  CHECK(test::cli({"model", "rehead", "--from", gpt2, "--head", "classification", "--out",
                   (tmp.path / "x").string()}) == 2);
  CHECK(test::cli({"model", "rehead", "--from", mlm, "--head", "classification", "--out", mlm}) ==
        2);
}
