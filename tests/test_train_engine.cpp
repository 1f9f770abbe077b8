// The DP-SGD engine: one privatised step against a hand computation from the reference
// per-sample gradients (clipping, normalisation, noise, divisors), the sgd / dp-sgd
// equivalence, eps = inf without noise, and checkpoint / resume reproducing an uninterrupted
// run exactly.
#include <catch2/catch.hpp>

#include <set>

#include "core/eval/grad_diagnostics.hpp"
#include "core/grad/per_sample.hpp"
#include "core/model/peft.hpp"
#include "core/model/safetensors.hpp"
#include "core/train/privatize.hpp"
#include "core/train/setup.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "data/table.hpp"
#include "data/train_inputs.hpp"
#include "mechanism_util.hpp"
#include "methods/registry.hpp"
#include "model_test_util.hpp"
#include "run_fixture.hpp"
#include "test_util.hpp"

using namespace dpft;
using namespace dpft::test;
using torch::Tensor;

namespace {

Tensor flat(const std::vector<Tensor>& ts) {
  std::vector<Tensor> f;
  for (auto& t : ts) f.push_back(t.reshape(-1));
  return torch::cat(f);
}

double rel(const Tensor& a, const Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(1e-30, b.abs().max().item<double>());
}

// The hand computations' batch: 7 of 12 random rows through a tiny LoRA GPT-2, with the slow
// reference per-sample gradients.
struct HandBatch {
  model::CausalLM m = tiny_lora_gpt2(3);
  lm::LmDataset ds = random_lm_dataset(12, m->config().vocab_size, 9);
  std::vector<int64_t> rows = {0, 2, 3, 5, 7, 8, 11};
  lm::LmBatch b = lm::collate(ds, rows, 0);
  Tensor ref =
      grad::reference_per_sample_grads(m, b.input_ids, b.attention_mask, b.labels).first;  // (B, p)
};

// (p, k) float32 with orthonormal columns.
Tensor random_subspace(int64_t p, int64_t k) {
  return std::get<0>(torch::linalg_qr(torch::randn({p, k}, torch::kFloat64)))
      .to(torch::kFloat32)
      .contiguous();
}

// P's rows per trainable parameter (PerSampleGrads::project's blocks).
std::vector<Tensor> blocks_of(const Tensor& P, grad::PerSampleGrads& psg) {
  std::vector<Tensor> blocks;
  int64_t off = 0;
  for (const auto& p : psg.params()) {
    blocks.push_back(P.slice(0, off, off + p.param.numel()));
    off += p.param.numel();
  }
  return blocks;
}

}  // namespace

TEST_CASE("a privatised batch equals the hand computation from reference per-sample gradients",
          "[train-engine]") {
  HandBatch h;
  model::CausalLM& m = h.m;
  Tensor norms = h.ref.norm(2, 1);
  grad::PerSampleGrads psg(m);
  train::DpSettings dp;
  dp.q = 0.5;
  dp.dataset_size = 12;
  Tensor sorted = std::get<0>(norms.sort());
  dp.clip_norm = 0.5 * (sorted[3] + sorted[4]).item<double>();  // 3 of the 7 samples are clipped
  auto clipping = GENERATE(as<std::string>{}, "clip", "normalize");
  auto divisor = GENERATE(as<std::string>{}, "expected", "realized");
  dp.clipping = enum_value(clipping, privacy::kClippingNames, "clipping");
  dp.divisor = enum_value(divisor, privacy::kNoiseDivisorNames, "divisor");
  CAPTURE(clipping, divisor);
  Tensor w = clipping == "clip" ? torch::clamp_max(dp.clip_norm / norms, 1.0)
                                : dp.clip_norm / (norms + 0.01);
  double div = divisor == "expected" ? 0.5 * 12 : 7.0;
  Tensor expect = torch::mv(h.ref.t(), w) / div;

  SECTION("no noise; micro-batches of 3 rows") {
    train::BatchStats st;
    std::vector<Tensor> raw;
    auto g = train::clipped_sum(psg, h.ds, h.rows, 3, 0, dp, &st, &raw);
    CHECK(rel(flat(raw), h.ref.sum(0)) < 1e-5);  // the unclipped sum, for diagnostics
    auto noise = test::test_sum(1, dp.sigma);
    double noise_norm = -1;
    CHECK(train::noise_and_scale(g, dp, noise, 7, &st, &noise_norm) == div);
    CHECK(noise_norm == 0.0);
    CHECK(rel(flat(g), expect) < 1e-5);
    CHECK(st.batch_size == 7);
    CHECK(st.clipped_fraction == Approx((norms > dp.clip_norm).sum().item<double>() / 7));
    // Each clipped (or normalised) gradient has norm <= C: the sensitivity the noise assumes.
    CHECK((h.ref * w.unsqueeze(1)).norm(2, 1).max().item<double>() <= dp.clip_norm * (1 + 1e-6));
  }
  SECTION("with noise: exactly sigma C z / divisor on top, z from the seeded source") {
    dp.sigma = 0.7;
    auto g = train::clipped_sum(psg, h.ds, h.rows, 4, 0, dp, nullptr);
    auto noise = test::test_sum(42, dp.sigma);
    auto replay = test::reference_stream(42, "noise");
    double noise_norm = -1;
    train::noise_and_scale(g, dp, noise, 7, nullptr, &noise_norm);
    std::vector<Tensor> z;
    for (auto& p : psg.params())
      z.push_back(replay->normal(p.param.sizes(), dp.sigma * dp.clip_norm));
    CHECK(rel(flat(g), expect + flat(z) / div) < 1e-5);
    CHECK(noise_norm == Approx(flat(z).norm().item<double>()).epsilon(1e-6));
    CHECK(flat(g).sub(expect).abs().sum().item<double>() > 0);
  }
}

TEST_CASE("a DP-SFT stage-2 batch equals the hand computation: P^T g clipped in R^k",
          "[train-engine][dp-sft]") {
  HandBatch h;
  model::CausalLM& m = h.m;
  grad::PerSampleGrads psg(m);
  torch::manual_seed(8);
  const Tensor P = random_subspace(h.ref.size(1), 5);  // (p, k)
  const std::vector<Tensor> blocks = blocks_of(P, psg);
  Tensor gs = h.ref.mm(P);  // (B, k)
  Tensor norms = gs.norm(2, 1);
  train::DpSettings dp;
  dp.q = 0.5;
  dp.dataset_size = 12;
  Tensor sorted = std::get<0>(norms.sort());
  dp.clip_norm = 0.5 * (sorted[3] + sorted[4]).item<double>();  // 3 of the 7 are clipped in R^k
  // (clipped on the projected norm, not the full gradient's: the sensitivity lives in R^k)
  REQUIRE((h.ref.norm(2, 1) > dp.clip_norm).sum().item<int64_t>() >
          (norms > dp.clip_norm).sum().item<int64_t>());
  Tensor w = torch::clamp_max(dp.clip_norm / norms, 1.0);
  Tensor expect = torch::mv(gs.t(), w);  // (k)
  train::BatchStats st;
  Tensor got = train::projected_clipped_sum(psg, h.ds, h.rows, 3, 0, blocks, dp, &st);
  CHECK(rel(got, expect) < 1e-5);
  CHECK(st.batch_size == 7);
  CHECK(st.clipped_fraction == Approx(3.0 / 7));
  CHECK((gs * w.unsqueeze(1)).norm(2, 1).max().item<double>() <= dp.clip_norm * (1 + 1e-6));
}

TEST_CASE("a user-level batch equals the hand computation: each unit's rows summed, then clipped",
          "[train-engine][privacy]") {
  HandBatch h;  // rows 0 2 3 5 7 8 11 as units {0 2 3} {5} {7 8 11}: micro-batches of 2 split them
  const std::vector<int64_t> starts = {0, 3, 4};
  const std::vector<std::vector<int64_t>> members = {{0, 1, 2}, {3}, {4, 5, 6}};  // of h.ref's rows
  std::vector<Tensor> unit_grads;
  for (const auto& m : members) {
    Tensor g = torch::zeros({h.ref.size(1)});
    for (int64_t b : m) g += h.ref[b];
    unit_grads.push_back(g);
  }
  const Tensor U = torch::stack(unit_grads);  // (3, p)
  const Tensor norms = U.norm(2, 1);
  grad::PerSampleGrads psg(h.m);
  train::DpSettings dp;
  dp.clip_norm = 0.5 * (std::get<0>(norms.sort())[0] + std::get<0>(norms.sort())[1]).item<double>();
  auto clipping = GENERATE(as<std::string>{}, "clip", "normalize");
  dp.clipping = enum_value(clipping, privacy::kClippingNames, "clipping");
  CAPTURE(clipping);
  const Tensor w = clipping == "clip" ? torch::clamp_max(dp.clip_norm / norms, 1.0)
                                      : dp.clip_norm / (norms + 0.01);
  train::BatchStats st;
  std::vector<Tensor> raw;
  auto g = train::unit_clipped_sum(psg, h.ds, h.rows, starts, 2, 0, dp, &st, &raw);
  CHECK(rel(flat(g), torch::mv(U.t(), w)) < 1e-5);
  CHECK(rel(flat(raw), h.ref.sum(0)) < 1e-5);
  CHECK(st.batch_size == 3);
  CHECK(st.extra["rows"] == 7);
  CHECK(st.clipped_fraction == Approx((norms > dp.clip_norm).sum().item<double>() / 3));
  // Each unit, however many rows, moves the sum by at most C: leave out the 3-row unit {7 8 11}.
  auto without = train::unit_clipped_sum(psg, h.ds, {0, 2, 3, 5}, {0, 3}, 2, 0, dp, nullptr);
  CHECK((flat(g) - flat(without)).norm().item<double>() <= dp.clip_norm * (1 + 1e-5));
  CHECK((flat(g) - flat(without)).norm().item<double>() > 0);
  // With one row per unit it is the per-example clipped sum.
  std::vector<int64_t> each(h.rows.size());
  for (size_t i = 0; i < each.size(); ++i) each[i] = static_cast<int64_t>(i);
  auto per_row = train::unit_clipped_sum(psg, h.ds, h.rows, each, 3, 0, dp, nullptr);
  CHECK(rel(flat(per_row), flat(train::clipped_sum(psg, h.ds, h.rows, 3, 0, dp, nullptr))) < 1e-5);
  // clipped_sum follows the step's units (BatchStats::unit_starts): every caller clips users.
  train::BatchStats grouped;
  grouped.unit_starts = starts;
  CHECK(rel(flat(train::clipped_sum(psg, h.ds, h.rows, 2, 0, dp, &grouped)), torch::mv(U.t(), w)) <
        1e-5);
  CHECK(grouped.batch_size == 3);
  // The PE-SGD family's H per unit: the rows of each unit summed.
  CHECK(rel(train::unit_rows_sum(h.ref, starts), U) < 1e-6);
}

namespace {

// The slow reference of part-wise clipping: each row of M (R, p) cut into the parameters'
// columns, each part k's columns clipped to C_k (clip: min(1, C_k / norm)), summed over rows.
Tensor parts_reference(const Tensor& M, const std::vector<int64_t>& widths,
                       const train::ClipGroups& cg) {
  Tensor out = torch::zeros({M.size(1)});
  for (int64_t r = 0; r < M.size(0); ++r) {
    std::vector<double> sq(cg.threshold.size(), 0.0);
    int64_t at = 0;
    for (size_t j = 0; j < widths.size(); ++j) {
      sq[cg.part_of[j]] += M[r].narrow(0, at, widths[j]).pow(2).sum().item<double>();
      at += widths[j];
    }
    at = 0;
    for (size_t j = 0; j < widths.size(); ++j) {
      const double n = std::sqrt(sq[cg.part_of[j]]), C = cg.threshold[cg.part_of[j]];
      out.narrow(0, at, widths[j]) += M[r].narrow(0, at, widths[j]) * std::min(1.0, C / n);
      at += widths[j];
    }
  }
  return out;
}

}  // namespace

TEST_CASE("per-layer and group clipping equal the slow reference; each clipped gradient <= C",
          "[train-engine][privacy]") {
  HandBatch h;
  grad::PerSampleGrads psg(h.m);
  std::vector<int64_t> widths;
  for (const auto& p : psg.params()) widths.push_back(p.param.numel());
  train::DpSettings dp;
  dp.clip_norm = 0.5 * h.ref.norm(2, 1).median().item<double>();
  auto style = GENERATE(as<std::string>{}, "per_layer", "groups");
  CAPTURE(style);
  dp.clipping_style = enum_value(style, privacy::kClippingStyleNames, "style");
  dp.clip_groups = {{"lora_A", 3.0}, {"lora_B", 1.0}};
  const train::ClipGroups cg = train::clip_groups(dp, psg.params());
  double sq = 0;
  for (double c : cg.threshold) sq += c * c;
  CHECK(std::sqrt(sq) == Approx(dp.clip_norm).epsilon(1e-12));  // the noise's sensitivity: C
  if (style == "groups") {
    REQUIRE(cg.threshold.size() == 2);
    CHECK(cg.threshold[0] == Approx(dp.clip_norm * std::sqrt(0.75)));
  } else {
    CHECK(cg.threshold.size() == psg.params().size());
  }
  train::BatchStats st;
  const auto g = train::clipped_sum(psg, h.ds, h.rows, 3, 0, dp, &st);
  CHECK(rel(flat(g), parts_reference(h.ref, widths, cg)) < 1e-5);
  CHECK(st.clipped_fraction > 0);
  for (int64_t r : h.rows)  // one row: its clipped gradient, within C
    CHECK(flat(train::clipped_sum(psg, h.ds, {r}, 1, 0, dp, nullptr)).norm().item<double>() <=
          dp.clip_norm * (1 + 1e-5));
  // At user level the units' summed gradients are clipped part by part the same way.
  const std::vector<int64_t> starts = {0, 3, 4};
  const auto u = train::unit_clipped_sum(psg, h.ds, h.rows, starts, 2, 0, dp, nullptr);
  CHECK(rel(flat(u), parts_reference(train::unit_rows_sum(h.ref, starts), widths, cg)) < 1e-5);
}

TEST_CASE("clip groups that miss a parameter, hold one twice or hold none are refused",
          "[train-engine][privacy]") {
  HandBatch h;
  grad::PerSampleGrads psg(h.m);
  train::DpSettings dp;
  dp.clipping_style = privacy::ClippingStyle::kGroups;
  dp.clip_groups = {{"lora_A", 1.0}};
  CHECK_THROWS_WITH(
      train::clip_groups(dp, psg.params()),
      Catch::Contains("lora_B is in 0 groups") && Catch::Contains("add a group that holds it"));
  dp.clip_groups = {{"lora", 1.0}, {"lora_B", 1.0}};
  CHECK_THROWS_WITH(train::clip_groups(dp, psg.params()), Catch::Contains("is in 2 groups"));
  dp.clip_groups = {{"lora", 1.0}, {"c_proj", 1.0}};
  CHECK_THROWS_WITH(train::clip_groups(dp, psg.params()),
                    Catch::Contains("clip_groups[1] (params: c_proj) holds no trainable"));
  CHECK_THROWS_AS(train::clip_groups(dp, psg.params()), ConfigError);
  // DP-SFT's projected sum clips in R^k: flat only.
  dp.clipping_style = privacy::ClippingStyle::kPerLayer;
  CHECK_THROWS_AS(
      train::projected_clipped_sum(psg, h.ds, h.rows, 2, 0,
                                   blocks_of(random_subspace(h.ref.size(1), 2), psg), dp, nullptr),
      ConfigError);
}

TEST_CASE("a user-level DP-SFT stage-2 batch: each unit's P^T sum g clipped in R^k",
          "[train-engine][dp-sft][privacy]") {
  HandBatch h;
  grad::PerSampleGrads psg(h.m);
  torch::manual_seed(9);
  const Tensor P = random_subspace(h.ref.size(1), 4);  // (p, k)
  const std::vector<Tensor> blocks = blocks_of(P, psg);
  // The slow reference: units {0 2 3} {5 7} {8} {11}; each unit's gradients summed, projected,
  // clipped to C in R^k, summed.
  const std::vector<int64_t> starts = {0, 3, 5, 6};
  const Tensor Us = train::unit_rows_sum(h.ref, starts).mm(P);  // (4, k)
  const Tensor norms = Us.norm(2, 1);
  train::DpSettings dp;
  dp.clip_norm = 0.5 * (std::get<0>(norms.sort())[1] + std::get<0>(norms.sort())[2]).item<double>();
  const Tensor expect = torch::mv(Us.t(), torch::clamp_max(dp.clip_norm / norms, 1.0));
  train::BatchStats st;
  st.unit_starts = starts;
  const Tensor got = train::projected_clipped_sum(psg, h.ds, h.rows, 2, 0, blocks, dp, &st);
  CHECK(rel(got, expect) < 1e-5);
  CHECK(st.batch_size == 4);
  CHECK(st.clipped_fraction == Approx(0.5));
  // Leaving out the 3-row unit moves the sum by at most C.
  train::BatchStats less;
  less.unit_starts = {0, 2, 3};
  const Tensor without =
      train::projected_clipped_sum(psg, h.ds, {5, 7, 8, 11}, 2, 0, blocks, dp, &less);
  CHECK((got - without).norm().item<double>() <= dp.clip_norm * (1 + 1e-5));
}

TEST_CASE("direction_error is the l2 distance and cosine of the hand computation",
          "[train-engine]") {
  Tensor d = torch::tensor({3.0, 4.0, 0.0}), ref = torch::tensor({4.0, 0.0, 3.0});
  eval::DirectionError e = eval::direction_error(d, ref);
  CHECK(e.l2 == Approx(std::sqrt(1.0 + 16.0 + 9.0)));
  CHECK(e.cosine == Approx(12.0 / 25.0));
  CHECK(eval::direction_error(ref, ref).cosine == Approx(1.0));
  CHECK(eval::direction_error(ref, ref).l2 == 0.0);
}

TEST_CASE("an empty Poisson batch releases pure noise", "[train-engine]") {
  model::CausalLM m = tiny_lora_gpt2(3);
  lm::LmDataset ds = random_lm_dataset(4, m->config().vocab_size, 1);
  grad::PerSampleGrads psg(m);
  train::DpSettings dp;
  dp.sigma = 1;
  dp.q = 0.25;
  dp.dataset_size = 4;
  auto g = train::clipped_sum(psg, ds, {}, 2, 0, dp, nullptr);
  CHECK(flat(g).abs().sum().item<double>() == 0.0);
  auto noise = test::test_sum(3, dp.sigma);
  CHECK(train::noise_and_scale(g, dp, noise, 0, nullptr) == 1.0);  // q N = 1
  CHECK(flat(g).abs().sum().item<double>() > 0);
}

TEST_CASE("an example with a non-finite per-sample gradient contributes nothing to the clipped sum",
          "[train-engine]") {
  // Untied output head: a NaN input-embedding row then poisons only the examples that read it.
  model::ModelConfig c = tiny_config("gpt2");
  c.tie_word_embeddings = false;
  model::CausalLM m = model::make_causal_lm(c, 3);
  model::PeftOptions o;
  o.targets = {"c_attn", "c_fc"};
  model::apply_peft(m, o, 4);
  const int64_t V = c.vocab_size;
  lm::LmDataset ds = random_lm_dataset(6, V, 4);
  // Example 2 alone uses token V - 1, whose (frozen) embedding row becomes NaN.
  for (auto& e : ds.items)
    for (auto& id : e.ids)
      if (id == V - 1) id = 1;
  ds.items[2].ids[1] = static_cast<int32_t>(V - 1);
  {
    torch::NoGradGuard ng;
    for (auto& kv : model::trainable_parameters(m))
      if (kv.first.find("lora_B") != std::string::npos) kv.second.normal_(0, 0.05);
    for (auto& kv : m->named_parameters())
      if (kv.key().find("wte") != std::string::npos) kv.value()[V - 1].fill_(std::nan(""));
  }
  grad::PerSampleGrads psg(m);
  // The setting: example 2's per-sample gradient is NaN, the others' are finite.
  lm::LmBatch b = lm::collate(ds, {0, 1, 2, 3, 4, 5}, 0);
  psg.compute(b.input_ids, b.attention_mask, b.labels);
  Tensor finite = torch::isfinite(psg.sq_norms());
  REQUIRE(finite.sum().item<int64_t>() == 5);
  REQUIRE_FALSE(finite[2].item<bool>());

  train::DpSettings dp;
  dp.q = 0.5;
  dp.dataset_size = 6;
  dp.clip_norm = 0.1;
  auto with_bad = flat(train::clipped_sum(psg, ds, {0, 1, 2, 3, 4, 5}, 2, 0, dp, nullptr));
  auto without = flat(train::clipped_sum(psg, ds, {0, 1, 3, 4, 5}, 2, 0, dp, nullptr));
  REQUIRE(torch::isfinite(with_bad).all().item<bool>());
  CHECK(without.abs().sum().item<double>() > 0);
  CHECK(rel(with_bad, without) < 1e-6);
  // A micro-batch of nothing but the bad example adds exactly zero.
  CHECK(flat(train::clipped_sum(psg, ds, {2}, 2, 0, dp, nullptr)).abs().sum().item<double>() ==
        0.0);
}

TEST_CASE("dp-sgd with sigma 0, C inf and realised divisor equals sgd on the same Poisson batches",
          "[train-engine]") {
  Fixture f;
  make_fixture(f);
  std::string out = (f.tmp.path / "runs").string();
  // Plain SGD: AdamW's per-coordinate normalisation would magnify the last-bit differences of
  // summing per-sample gradients instead of the batch gradient into visible loss differences.
  auto a = run_metrics(f, out,
                       {"--set", "method.name=sgd", "--set", "method.sampling=poisson", "--set",
                        "train.optimizer=sgd", "--set", "train.lr=0.5"});
  auto b = run_metrics(f, out,
                       {"--set", "method.name=dp-sgd", "--set", "privacy.noise_multiplier=0",
                        "--set", "privacy.clip_norm=inf", "--set", "privacy.noise_divisor=realized",
                        "--set", "train.optimizer=sgd", "--set", "train.lr=0.5"});
  REQUIRE(a["non_private"]["history"].size() == 6);
  for (size_t i = 0; i < 6; ++i) {
    CHECK(a["non_private"]["history"][i]["batch_size"] == b["non_private"]["history"][i]["batch_size"]);
    CHECK(a["non_private"]["history"][i]["loss"].get<double>() ==
          Approx(b["non_private"]["history"][i]["loss"].get<double>()).epsilon(1e-5));
  }
  double la = a["eval"]["final"]["loss"], lb = b["eval"]["final"]["loss"],
         l0 = a["eval"]["base"]["loss"];
  CHECK(la == Approx(lb).epsilon(1e-5));
  CHECK(la != l0);  // training moved the model
  CHECK(a["privacy"]["epsilon"] == "inf");
  CHECK(b["privacy"]["epsilon"] == "inf");
}

TEST_CASE("dp-sgd diagnostics compare with the true mean gradient and never change the run",
          "[train-engine]") {
  Fixture f;
  make_fixture(f);
  std::string out = (f.tmp.path / "runs").string();
  // No clipping, no noise, realised divisor: the privatised gradient is the true mean gradient.
  auto exact = run_metrics(f, out,
                           {"--set", "method.name=dp-sgd", "--set", "method.diagnostics=true",
                            "--set", "privacy.noise_multiplier=0", "--set", "privacy.clip_norm=inf",
                            "--set", "privacy.noise_divisor=realized"});
  REQUIRE(exact["non_private"]["diagnostics"]["steps"].get<int64_t>() > 0);
  CHECK(exact["non_private"]["diagnostics"]["cosine_mean"].get<double>() == Approx(1.0).epsilon(1e-5));
  CHECK(exact["non_private"]["diagnostics"]["noise_to_signal"].get<double>() == 0.0);
  for (const auto& h : exact["non_private"]["history"])
    if (h.contains("diagnostics"))
      CHECK(h["diagnostics"]["l2"].get<double>() < 1e-5 * h["grad_norm_mean"].get<double>());
  // With noise: far from the true gradient, and the same run as without diagnostics.
  std::vector<std::string> dp = {"--set", "method.name=dp-sgd", "--set", "privacy.epsilon=1"};
  auto plain = run_metrics(f, out, dp);
  dp.insert(dp.end(), {"--set", "method.diagnostics=true"});
  auto diag = run_metrics(f, out, dp);
  CHECK(diag["non_private"]["diagnostics"]["cosine_mean"].get<double>() < 0.9);
  CHECK(diag["non_private"]["diagnostics"]["noise_to_signal"].get<double>() > 1.0);
  CHECK(diag["eval"] == plain["eval"]);
  CHECK(!plain["non_private"].contains("diagnostics"));
  for (size_t i = 0; i < plain["non_private"]["history"].size(); ++i)
    CHECK(diag["non_private"]["history"][i]["loss"] == plain["non_private"]["history"][i]["loss"]);
}

TEST_CASE(
    "dp-sgd at epsilon inf clips without noise and reports eps inf; at eps 1 spends at most 1",
    "[train-engine]") {
  Fixture f;
  make_fixture(f);
  std::string out = (f.tmp.path / "runs").string();
  auto inf = run_metrics(f, out, {"--set", "method.name=dp-sgd", "--set", "privacy.epsilon=inf"});
  CHECK(inf["privacy"]["epsilon"] == "inf");
  CHECK(inf["privacy"]["noise_multiplier"] == 0.0);
  auto one = run_metrics(f, out, {"--set", "method.name=dp-sgd", "--set", "privacy.epsilon=1"});
  CHECK(one["privacy"]["epsilon"].get<double>() <= 1.0);
  CHECK(one["privacy"]["epsilon"].get<double>() > 0.9);
  CHECK(one["privacy"]["noise_multiplier"].get<double>() > 1.0);
  CHECK(one["privacy"]["releases"][0]["count"] == 6);
  CHECK(one["privacy"]["sampling_rate"].get<double>() == Approx(0.25));
}

TEST_CASE("with keyed or secure noise the seed predicts neither the Poisson batches nor the noise",
          "[train-engine]") {
  Fixture f;
  make_fixture(f);
  std::string out = (f.tmp.path / "runs").string();
  for (const char* mode : {"keyed", "os"}) {
    CAPTURE(mode);
    std::vector<std::string> args = {"--set", "method.name=dp-sgd",
                                     "--set", "privacy.epsilon=1",
                                     "--set", "privacy.noise_seed=null"};
    if (std::string(mode) == "os") args.insert(args.end(), {"--set", "privacy.secure_noise=true"});
    auto a = run_metrics(f, out, args), b = run_metrics(f, out, args);
    CHECK(a["privacy"]["noise"]["mode"] == mode);
    REQUIRE(a["non_private"]["history"].size() == 6);
    // Step 0 trains the same initial model, so its loss depends on the batch only: with seeded
    // batches it would be equal. Two independent Poisson(0.25) subsets of 24 rows coincide with
    // probability 0.625^24 ~ 1e-5, and then the six batch sizes would all have to agree too.
    bool batches_differ =
        a["non_private"]["history"][0]["loss"] != b["non_private"]["history"][0]["loss"];
    for (size_t i = 0; i < 6; ++i)
      batches_differ |= a["non_private"]["history"][i]["batch_size"] !=
                        b["non_private"]["history"][i]["batch_size"];
    CHECK(batches_differ);
    CHECK(a["eval"]["final"]["loss"] != b["eval"]["final"]["loss"]);
    CHECK(a["privacy"]["epsilon"].get<double>() <= 1.0);
  }
}

TEST_CASE("noise_draw: recorded; on the CPU every mode draws the host's numbers",
          "[train-engine]") {
  // On a GPU auto / device draw there (tests/test_cuda.cpp); CPU tensors always come from the
  // host generator, so the three modes give one run.
  Fixture f;
  make_fixture(f);
  std::string out = (f.tmp.path / "runs").string();
  const std::vector<std::string> base = {"--set", "method.name=dp-sgd", "--set",
                                         "privacy.epsilon=1"};
  auto with = [&](const std::string& mode) {
    std::vector<std::string> a = base;
    a.insert(a.end(), {"--set", "privacy.noise_draw=" + mode});
    return run_metrics(f, out, a);
  };
  auto h = run_metrics(f, out, base), d = with("device"), o = with("host");
  CHECK(h["privacy"]["noise_draw"] == "auto");
  CHECK(d["privacy"]["noise_draw"] == "device");
  CHECK(o["privacy"]["noise_draw"] == "host");
  for (const auto* m : {&d, &o}) {
    CHECK((*m)["eval"] == h["eval"]);
    CHECK((*m)["non_private"]["history"] == h["non_private"]["history"]);
    CHECK((*m)["privacy"]["releases"] == h["privacy"]["releases"]);
  }
}

TEST_CASE("a run stopped after step k and resumed ends with the numbers of an uninterrupted run",
          "[train-engine]") {
  Fixture f;
  make_fixture(f);
  std::string out = (f.tmp.path / "runs").string();
  auto method =
      GENERATE(as<std::string>{}, "dp-sgd", "sgd", "denoise");  // Poisson + noise; shuffle
  CAPTURE(method);
  std::vector<std::string> spec = {
      "--set", "method.name=" + method,    "--set", "privacy.epsilon=2",
      "--set", "model.peft.dropout=0.1",   "--set", "train.warmup_ratio=0.3",
      "--set", "train.schedule=cosine",    "--set", "eval.every=2",
      "--set", "output.checkpoint_every=2"};
  if (method == "denoise") spec.insert(spec.end(), {"--set", "method.kappa=1.0"});  // it fires
  auto full = run_metrics(f, out, spec);
  std::string dir;
  std::vector<std::string> stop = spec;
  stop.insert(stop.end(), {"--stop-after", "3"});
  auto part = run_metrics(f, out, stop, &dir);
  CHECK(part["status"] == "stopped");
  CHECK(part["train"]["steps_done"] == 3);
  CHECK(part["privacy"]["releases"][0]["count"] == 3);  // eps never resets
  CHECK(fs::exists(fs::path(dir) / "checkpoint" / "state.json"));
  std::string printed;
  REQUIRE(test::cli({"run", "--resume", dir}, &printed) == 0);
  auto resumed = nlohmann::json::parse(read_file(fs::path(dir) / "metrics.json"));
  CHECK(resumed["status"] == "ok");
  for (const char* k : {"eval", "privacy"}) {
    CAPTURE(k);
    CHECK(resumed[k] == full[k]);
  }
  CHECK(resumed["non_private"]["history"] == full["non_private"]["history"]);
  CHECK(!fs::exists(fs::path(dir) / "checkpoint"));
  CHECK(fs::exists(fs::path(dir) / "adapter" / "adapter_model.safetensors"));
  CHECK(test::cli({"run", "--resume", dir}) == 2);  // already finished: refused
}

TEST_CASE("the step's gradient check refuses a wrong dtype, shape or count; noise a bf16 sum",
          "[train-engine][bf16]") {
  const std::vector<Tensor> like = {torch::zeros({3, 2}), torch::zeros({4})};
  const std::vector<std::string> names = {"a.lora_A", "a.lora_B"};
  CHECK_NOTHROW(train::check_step_gradients({torch::ones({3, 2}), Tensor()}, like, names));
  std::string msg;
  try {
    train::check_step_gradients({torch::ones({3, 2}), torch::ones({4}, torch::kBFloat16)}, like,
                                names);
  } catch (const RuntimeError& e) {
    msg = e.what();
  }
  CHECK_THAT(msg, Catch::Matchers::Contains("a.lora_B") && Catch::Matchers::Contains("BFloat16"));
  CHECK_THROWS_AS(train::check_step_gradients({torch::ones({2, 3}), Tensor()}, like, names),
                  RuntimeError);
  CHECK_THROWS_AS(train::check_step_gradients({torch::ones({3, 2})}, like, names), RuntimeError);
  train::DpSettings dp;
  dp.sigma = 1;
  dp.q = 0.5;
  dp.dataset_size = 10;
  auto noise = test::test_sum(1, dp.sigma);
  std::vector<Tensor> bf = {torch::zeros({4}, torch::kBFloat16)};
  CHECK_THROWS_AS(train::noise_and_scale(bf, dp, noise, 5, nullptr), RuntimeError);
}

TEST_CASE("a bfloat16 LoRA run: the float32 run's epsilon, float32 masters, exact resume",
          "[train-engine][bf16]") {
  Fixture f;
  make_fixture(f);
  std::string out = (f.tmp.path / "runs").string();
  const std::vector<std::string> spec = {"--set", "method.name=dp-sgd",
                                         "--set", "privacy.epsilon=2",
                                         "--set", "model.peft.dropout=0.1"};
  std::vector<std::string> bf = spec;
  bf.insert(bf.end(), {"--set", "model.dtype=bfloat16"});
  auto f32 = run_metrics(f, out, spec);
  std::string dir;
  auto b16 = run_metrics(f, out, bf, &dir);
  CHECK(b16["status"] == "ok");
  CHECK(b16["privacy"] == f32["privacy"]);  // the same releases, sigma and epsilon
  const double l32 = f32["eval"]["final"]["loss"].get<double>(),
               l16 = b16["eval"]["final"]["loss"].get<double>();
  WARN("final eval loss: float32 " << l32 << ", bfloat16 " << l16);
  CHECK(std::isfinite(l16));
  CHECK(std::abs(l16 - l32) < 0.05 * l32);
  CHECK(b16["eval"]["final"] != b16["eval"]["base"]);  // it trained
  // The released adapter holds the bfloat16 model's LoRA factors.
  auto st = model::SafetensorsFile::open(fs::path(dir) / "adapter" / "adapter_model.safetensors");
  for (const auto& info : st->tensors())
    CHECK(st->load(info.name).scalar_type() == torch::kBFloat16);
  // Stopped and resumed: checkpoints carry the float32 masters, so the numbers are exact.
  std::vector<std::string> stop = bf;
  stop.insert(stop.end(), {"--set", "output.checkpoint_every=2", "--stop-after", "3"});
  auto part = run_metrics(f, out, stop, &dir);
  REQUIRE(part["status"] == "stopped");
  auto ck = model::SafetensorsFile::open(fs::path(dir) / "checkpoint" / "state.safetensors");
  for (const auto& info : ck->tensors())
    if (info.name.rfind("param.", 0) == 0 || info.name.rfind("opt.exp_avg", 0) == 0)
      CHECK(ck->load(info.name).scalar_type() == torch::kFloat32);
  REQUIRE(test::cli({"run", "--resume", dir}) == 0);
  auto resumed = nlohmann::json::parse(read_file(fs::path(dir) / "metrics.json"));
  CHECK(resumed["eval"] == b16["eval"]);
  CHECK(resumed["non_private"]["history"] == b16["non_private"]["history"]);
}

TEST_CASE("labelled eval data adds classification accuracy to the base and final evaluations",
          "[train-engine]") {
  Fixture f;
  make_fixture(f);
  fs::path yelp = test::shared_data_subdir("yelp_augpe");
  if (yelp.empty()) return;
  std::string out = (f.tmp.path / "runs").string();
  auto m = run_metrics(
      f, out,
      {"--set", "method.name=sgd", "--set", "train.steps=1", "--set",
       "data.eval.path=" + (yelp / "dev.csv").string(), "--set", "data.eval.label_column=label2"});
  for (const char* k : {"base", "final"}) {
    CAPTURE(k);
    const auto& c = m["eval"][k]["classification"];
    CHECK(c["samples"] == 8);
    CHECK(c["correct"].get<int64_t>() ==
          static_cast<int64_t>(std::lround(c["accuracy"].get<double>() * 8)));
  }
}

// A LoRA spec training on part of `pool` (data.train.KEY: train_part) with a second block
// (data.SECOND, "eval" or "public") on another part of it (KEY: second_part).
static Spec two_part_spec(const std::string& model, const std::string& pool,
                          const std::string& second, const std::string& key,
                          const std::string& train_part, const std::string& second_part) {
  return parse_spec(
      YAML::Load(fmt::format("model: {{path: {}, peft: {{kind: lora, targets: [c_attn]}}}}\n"
                             "data:\n  train: {{path: {}, {}: {}}}\n  {}: {{path: {}, {}: {}}}\n"
                             "  max_length: 16\n",
                             model, pool, key, train_part, second, pool, key, second_part)));
}

// A 10-row one-column CSV (rows 0..9 distinct) in d; its path.
static std::string write_pool(test::TempDir& d) {
  std::string rows = "text\n";
  for (int i = 0; i < 10; ++i) rows += fmt::format("abstract number {} about cells\n", i);
  d.write("pool.csv", rows);
  return (d.path / "pool.csv").string();
}

TEST_CASE("data.eval.exclude_train holds out the rows of the training file that are not trained on",
          "[train-engine]") {
  Fixture f;
  make_fixture(f);
  test::TempDir d;
  const std::string pool = write_pool(d);
  auto spec_with = [&](int64_t train_n, int64_t eval_n) {
    return parse_spec(YAML::Load(fmt::format(
        "model: {{path: {}, peft: {{kind: lora, targets: [c_attn]}}}}\n"
        "data:\n  train: {{path: {}, num_samples: {}}}\n"
        "  eval: {{path: {}, num_samples: {}, exclude_train: true}}\n  max_length: 16\n",
        f.model, pool, train_n, pool, eval_n)));
  };
  train::TrainInputs in = data::load_train_inputs(spec_with(6, 0));
  std::set<int64_t> tr, ev;
  for (const auto& it : in.train.items) tr.insert(it.index);
  for (const auto& it : in.eval.items) ev.insert(it.index);
  CHECK(tr.size() == 6);
  CHECK(ev.size() == 4);  // exactly the rows not trained on
  for (int64_t i : ev) CHECK(tr.count(i) == 0);
  // num_samples subsamples what is left; the same seed picks the same held-out rows.
  train::TrainInputs sub = data::load_train_inputs(spec_with(6, 3));
  CHECK(sub.eval.size() == 3);
  for (const auto& it : sub.eval.items) CHECK(ev.count(it.index) == 1);
  // Without the switch the eval set may overlap the training set (here: it is the whole file).
  Spec plain = spec_with(6, 0);
  plain.data.eval.exclude_train = false;
  CHECK(data::load_train_inputs(plain).eval.size() == 10);
  CHECK_THROWS_AS(data::load_train_inputs(spec_with(10, 0)), InputError);  // nothing left
  CHECK_THROWS_AS(parse_spec(YAML::Load("data: {train: {exclude_train: true}}")), ConfigError);
}

TEST_CASE("data rows [begin, end] split one file into fixed training and test parts",
          "[train-engine]") {
  Fixture f;
  make_fixture(f);
  test::TempDir d;
  const std::string pool = write_pool(d);
  auto spec_with = [&](const std::string& train_rows, const std::string& eval_rows) {
    return two_part_spec(f.model, pool, "eval", "rows", train_rows, eval_rows);
  };
  train::TrainInputs in = data::load_train_inputs(spec_with("[0, 7]", "[7, 10]"));
  std::set<int64_t> tr, ev;
  for (const auto& it : in.train.items) tr.insert(it.index);
  for (const auto& it : in.eval.items) ev.insert(it.index);
  CHECK(tr == std::set<int64_t>{0, 1, 2, 3, 4, 5, 6});
  CHECK(ev == std::set<int64_t>{7, 8, 9});
  // The slice is taken before subsampling: a subsample never leaves it, for any seed.
  for (int64_t seed : {0, 1, 2}) {
    Spec s = spec_with("[2, 6]", "[7, 10]");
    s.seed = seed;
    s.data.train.num_samples = 3;
    for (const auto& it : data::load_train_inputs(s).train.items) {
      CHECK(it.index >= 2);
      CHECK(it.index < 6);
    }
  }
  CHECK_THROWS_AS(data::load_train_inputs(spec_with("[0, 7]", "[7, 11]")), ConfigError);
  for (const char* bad : {"[5, 5]", "[6, 5]", "[3]", "[0, 1, 2]", "[-1, 4]"})
    CHECK_THROWS_AS(spec_with("[0, 7]", bad), ConfigError);
  // The spec round-trips with its rows (and without them when unset).
  const Spec s = spec_with("[0, 7]", "[7, 10]");
  CHECK(parse_spec(spec_to_yaml(s)).data.train.rows == std::vector<int64_t>{0, 7});
}

TEST_CASE("data hash_split parts one file by a hash of each text: equal texts on one side",
          "[train-engine]") {
  // The reference positions come from Python's hashlib (the formula in data/lm_dataset.hpp):
  // rows 4, 5, 8, 9 of write_pool's file hash below 0.5, rows 0-3, 6, 7 above.
  CHECK(data::hash_fraction("a") == Approx(0.7913742705223815).epsilon(1e-15));
  CHECK(data::hash_fraction("abstract number 5 about cells") ==
        Approx(0.055545185345402315).epsilon(1e-15));
  Fixture f;
  make_fixture(f);
  test::TempDir d;
  std::string rows = "text\n";
  for (int i = 0; i < 10; ++i) rows += fmt::format("abstract number {} about cells\n", i);
  rows +=
      "abstract number 3 about cells\nabstract number 8 about cells\n";  // rows 10, 11 repeat 3, 8
  d.write("pool.csv", rows);
  const std::string pool = (d.path / "pool.csv").string();
  auto spec_with = [&](const std::string& train_split, const std::string& public_split) {
    return two_part_spec(f.model, pool, "public", "hash_split", train_split, public_split);
  };
  train::TrainInputs in = data::load_train_inputs(spec_with("[0, 0.5]", "[0.5, 1]"));
  std::set<int64_t> tr, pub;
  for (const auto& it : in.train.items) tr.insert(it.index);
  for (const auto& it : in.public_train.items) pub.insert(it.index);
  CHECK(tr == std::set<int64_t>{4, 5, 8, 9, 11});
  CHECK(pub == std::set<int64_t>{0, 1, 2, 3, 6, 7, 10});
  CHECK(in.public_overlap == 0);  // a repeated text never straddles the split
  // Without it, the same file as public data shares every text with the private set.
  Spec whole = spec_with("[0, 0.5]", "[0.5, 1]");
  whole.data.public_data.hash_split.clear();
  CHECK(data::load_train_inputs(whole).public_overlap == 5);
  CHECK_THROWS_AS(data::load_train_inputs(spec_with("[0.99, 1]", "[0.5, 1]")), ConfigError);
  for (const char* bad : {"[0.5, 0.5]", "[0.6, 0.5]", "[0.5]", "[-0.1, 0.5]", "[0.5, 1.5]"})
    CHECK_THROWS_AS(spec_with("[0, 0.5]", bad), ConfigError);
  CHECK(parse_spec(spec_to_yaml(spec_with("[0, 0.5]", "[0.5, 1]"))).data.train.hash_split ==
        std::vector<double>{0, 0.5});
}

TEST_CASE("data label_map renames a file's labels to the task's; an unmapped label is an error",
          "[train-engine]") {
  test::TempDir d;
  d.write("imdb.csv", "review,sentiment\ngreat film,positive\ndull film,negative\nok,positive\n");
  const std::string file = (d.path / "imdb.csv").string();
  auto block = [&](const std::string& map) {
    return parse_spec(YAML::Load(fmt::format(
                          "data:\n  train: {{path: {}, text_column: review, label_column: "
                          "sentiment, label_map: {}}}\n",
                          file, map)))
        .data.train;
  };
  const DatasetSpec ok = block("{negative: '0', positive: '1'}");
  std::vector<std::string> labels;
  for (const auto& e : data::read_examples(ok, "data.train")) labels.push_back(e.label);
  CHECK(labels == std::vector<std::string>{"1", "0", "1"});
  CHECK_THROWS_WITH(data::read_examples(block("{positive: '1'}"), "data.train"),
                    Catch::Contains("row 2 has label 'negative'"));
  for (const char* bad : {"[a, b]", "{}", "{negative: ''}", "{negative: [0]}"})
    CHECK_THROWS_AS(block(bad), ConfigError);
  YAML::Node round = spec_to_yaml(parse_spec(YAML::Load(fmt::format(
      "data:\n  train: {{path: {}, label_map: {{negative: '0', positive: '1'}}}}\n", file))));
  CHECK(parse_spec(round).data.train.label_map ==
        std::map<std::string, std::string>{{"negative", "0"}, {"positive", "1"}});
}

TEST_CASE("a diverged run ends failed with the step and the cause; NaN weights are refused",
          "[train-engine]") {
  Fixture f;
  make_fixture(f);
  std::string out = (f.tmp.path / "runs").string();
  for (const char* method : {"dp-sgd", "sgd"}) {
    CAPTURE(method);
    std::string printed;
    auto args = run_args(f, out,
                         {"--set", std::string("method.name=") + method, "--set",
                          "privacy.epsilon=4", "--set", "train.lr=1e30"});
    CHECK(test::cli(args, &printed) == 4);
    // The newest run directory of this spec holds the failure.
    fs::path newest;
    for (const auto& e : fs::directory_iterator(fs::path(out) / "engine-test"))
      if (newest.empty() || fs::last_write_time(e.path()) > fs::last_write_time(newest))
        newest = e.path();
    auto m = nlohmann::json::parse(read_file(newest / "metrics.json"));
    CHECK(m["status"] == "failed");
    CHECK_THAT(m["error"].get<std::string>(),
               Catch::Matchers::Contains("training diverged at step"));
    remove_tree(newest);
  }
  // A model whose weights hold a NaN is refused before training, naming the weight.
  fs::path st = fs::path(f.model) / "model.safetensors";
  auto file = model::SafetensorsFile::open(st);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& info : file->tensors()) tensors.emplace_back(info.name, file->load(info.name));
  file.reset();
  tensors[0].second = tensors[0].second.clone();
  tensors[0].second.view(-1)[0] = std::numeric_limits<float>::quiet_NaN();
  model::save_safetensors(st, tensors);
  std::string printed;
  CHECK(test::cli(run_args(f, out, {"--set", "method.name=dp-sgd", "--set", "privacy.epsilon=4"}),
                  &printed) == 3);
}

TEST_CASE("privacy.unit user: a user's rows form one unit, at most max_examples_per_user of them",
          "[train-engine][privacy]") {
  Fixture f;
  make_fixture(f);
  test::TempDir d;
  // 12 users; user u0 has 5 rows, the others 1 or 2 (rows in file order, users interleaved).
  std::string rows = "text,who\n";
  std::vector<std::string> who;
  for (int i = 0; i < 5; ++i) who.push_back("u0");
  for (int u = 1; u < 12; ++u)
    for (int k = 0; k < 1 + u % 2; ++k) who.push_back(fmt::format("u{}", u));
  std::swap(who[1], who[6]);  // u0's second row comes later
  for (size_t i = 0; i < who.size(); ++i)
    rows += fmt::format("abstract number {} about cells,{}\n", i, who[i]);
  d.write("users.csv", rows);
  auto spec_with = [&](const std::string& file, int64_t cap) {
    return parse_spec(
        YAML::Load(fmt::format("model: {{path: {}, peft: {{kind: lora, targets: [c_attn]}}}}\n"
                               "privacy: {{unit: user, max_examples_per_user: {}}}\n"
                               "data:\n  train: {{path: {}, user_column: who}}\n  max_length: 16\n",
                               f.model, cap, (d.path / file).string())));
  };
  train::TrainInputs in = data::load_train_inputs(spec_with("users.csv", 2));
  REQUIRE(in.units.kind == privacy::PrivacyUnit::kUser);
  CHECK(in.units.count(in.train.size()) == 12);
  // u0 (the first unit, rows 0 2 3 4 6): its first two rows in file order; three left out.
  CHECK(in.units.rows[0] == std::vector<int64_t>{0, 2});
  CHECK(in.units.rows_left_out == 3);
  int64_t kept = 0;
  for (const auto& r : in.units.rows) {
    CHECK(r.size() <= 2);
    kept += static_cast<int64_t>(r.size());
    for (int64_t row : r)
      CHECK(who[static_cast<size_t>(in.train.items[row].index)] ==
            who[static_cast<size_t>(in.train.items[r[0]].index)]);
  }
  CHECK(kept + in.units.rows_left_out == in.train.size());
  CHECK(data::load_train_inputs(spec_with("users.csv", 10)).units.rows_left_out == 0);

  // A row without a user, a missing column, fewer than 10 users: refused (exit 3), named.
  d.write("gap.csv", "text,who\na,u1\nb,\nc,u2\n");
  CHECK_THROWS_WITH(data::load_train_inputs(spec_with("gap.csv", 2)),
                    Catch::Contains("gap.csv:3: this row has no user in user_column 'who'"));
  d.write("few.csv", "text,who\na,u1\nb,u2\nc,u1\n");
  CHECK_THROWS_WITH(data::load_train_inputs(spec_with("few.csv", 2)),
                    Catch::Contains("2 distinct user(s) in 3 training rows"));
  d.write("nocol.csv", "text,author\na,u1\n");
  CHECK_THROWS_AS(data::load_train_inputs(spec_with("nocol.csv", 2)), InputError);
  // A method that cannot bound a user's rows together refuses it before loading (exit 2).
  for (const char* m : {"sgd", "noop"}) {
    Spec s = spec_with("users.csv", 2);
    s.method = parse_spec(YAML::Load(fmt::format("method: {{name: {}}}\n", m))).method;
    CHECK_THROWS_WITH(check_task(parsed_method(s.method), s),
                      Catch::Contains("privacy.unit: user: method " + std::string(m)));
  }
}

TEST_CASE("dp-sgd at user level: one row per user is example level bit for bit; N counts users",
          "[train-engine][privacy]") {
  Fixture f;
  make_fixture(f);
  const std::string out = (f.tmp.path / "runs").string();
  // The fixture's rows with a user column: `own` gives every row its own user, `few` puts rows
  // 3k, 3k+1, 3k+2 under one user.
  const std::string own_file = test::write_user_rows(f, "own.jsonl", 1);
  const std::string few_file = test::write_user_rows(f, "few.jsonl", 3);
  auto dp = [&](const std::string& file, std::vector<std::string> extra = {}) {
    std::vector<std::string> a = {
        "--set", "method.name=dp-sgd",      "--set", "privacy.epsilon=4",
        "--set", "data.train.path=" + file, "--set", "data.train.num_samples=0"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  const std::vector<std::string> user = {"--set", "privacy.unit=user", "--set",
                                         "data.train.user_column=who"};
  const auto example = run_metrics(f, out, dp(own_file));
  const auto per_user = run_metrics(f, out, dp(own_file, user));
  CHECK(per_user["eval"] == example["eval"]);
  CHECK(per_user["privacy"]["noise_multiplier"] == example["privacy"]["noise_multiplier"]);
  CHECK(per_user["privacy"]["epsilon"] == example["privacy"]["epsilon"]);
  CHECK(per_user[kNonPrivate]["history"] == example[kNonPrivate]["history"]);

  // Three rows per user: N = 134 users (400 rows), q = B / N over users; every step's batch
  // holds whole users.
  std::string dir;
  const auto grouped = run_metrics(f, out, dp(few_file, user), &dir);
  CHECK(grouped["status"] == "ok");
  const double q = grouped["privacy"]["sampling_rate"].get<double>();
  CHECK(q == Approx(6.0 / 134));
  const auto lock = nlohmann::json::parse(read_file(fs::path(dir) / "privacy_lock.json"));
  CHECK(lock.dump().find("\"count\":134") != std::string::npos);
  CHECK(grouped["privacy"]["unit"]["unit"] == "user");
  CHECK(grouped["privacy"]["unit"]["count"] == 134);
  // How many rows the cap left out is a statistic of the users' row counts: non-private only.
  CHECK_FALSE(grouped["privacy"]["unit"].contains("rows_left_out"));
  CHECK(grouped[kNonPrivate]["unit_rows_left_out"] == 0);
  CHECK_FALSE(example["privacy"].contains("unit"));
  for (const auto& h : grouped[kNonPrivate]["history"])
    if (h.contains("rows")) CHECK(h["rows"].get<int64_t>() <= 3 * h["batch_size"].get<int64_t>());
  // `dpft account --spec` counts the users too.
  std::string printed;
  std::vector<std::string> acc = {"account", "--json", "--spec", f.spec};
  for (const auto& a : run_args(f, out, dp(few_file, user)))
    if (a.rfind("--set", 0) == 0 || a.find('=') != std::string::npos) acc.push_back(a);
  REQUIRE(test::cli(acc, &printed) == 0);
  const auto j = nlohmann::json::parse(printed);
  CHECK(j["dataset_size"] == 134);
  CHECK(j["unit"] == "user");
}
