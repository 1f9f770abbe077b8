// The DP-SGD engine: one privatised step against a hand computation from the reference
// per-sample gradients (clipping, normalisation, noise, divisors), the sgd / dp-sgd
// equivalence, eps = inf without noise, and checkpoint / resume reproducing an uninterrupted
// run exactly.
#include <catch2/catch.hpp>

#include "core/grad/per_sample.hpp"
#include "core/model/peft.hpp"
#include "core/train/privatize.hpp"
#include "core/util/atomic_file.hpp"
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

}  // namespace

TEST_CASE("a privatised batch equals the hand computation from reference per-sample gradients",
          "[train-engine]") {
  model::CausalLM m = tiny_lora_gpt2(3);
  data::LmDataset ds = random_lm_dataset(12, m->config().vocab_size, 9);
  std::vector<int64_t> rows = {0, 2, 3, 5, 7, 8, 11};
  data::LmBatch b = data::collate(ds, rows, 0);
  Tensor ref =
      grad::reference_per_sample_grads(m, b.input_ids, b.attention_mask, b.labels).first;  // (B, p)
  Tensor norms = ref.norm(2, 1);
  grad::PerSampleGrads psg(m);
  train::DpSettings dp;
  dp.q = 0.5;
  dp.dataset_size = 12;
  Tensor sorted = std::get<0>(norms.sort());
  dp.clip_norm = 0.5 * (sorted[3] + sorted[4]).item<double>();  // 3 of the 7 samples are clipped
  auto clipping = GENERATE(as<std::string>{}, "clip", "normalize");
  auto divisor = GENERATE(as<std::string>{}, "expected", "realized");
  dp.clipping = clipping;
  dp.divisor = divisor;
  CAPTURE(clipping, divisor);
  Tensor w = clipping == "clip" ? torch::clamp_max(dp.clip_norm / norms, 1.0)
                                : dp.clip_norm / (norms + 0.01);
  double div = divisor == "expected" ? 0.5 * 12 : 7.0;
  Tensor expect = torch::mv(ref.t(), w) / div;

  SECTION("no noise; micro-batches of 3 rows") {
    train::BatchStats st;
    auto g = train::clipped_sum(psg, ds, rows, 3, 0, dp, &st);
    privacy::NoiseSource noise(1, false);
    CHECK(train::noise_and_scale(g, dp, noise, 7, &st) == div);
    CHECK(rel(flat(g), expect) < 1e-5);
    CHECK(st.batch_size == 7);
    CHECK(st.clipped_fraction == Approx((norms > dp.clip_norm).sum().item<double>() / 7));
    // Each clipped (or normalised) gradient has norm <= C: the sensitivity the noise assumes.
    CHECK((ref * w.unsqueeze(1)).norm(2, 1).max().item<double>() <= dp.clip_norm * (1 + 1e-6));
  }
  SECTION("with noise: exactly sigma C z / divisor on top, z from the seeded source") {
    dp.sigma = 0.7;
    auto g = train::clipped_sum(psg, ds, rows, 4, 0, dp, nullptr);
    privacy::NoiseSource noise(42, false), replay(42, false);
    train::noise_and_scale(g, dp, noise, 7, nullptr);
    std::vector<Tensor> z;
    for (auto& p : psg.params())
      z.push_back(replay.normal(p.param.sizes(), dp.sigma * dp.clip_norm));
    CHECK(rel(flat(g), expect + flat(z) / div) < 1e-5);
    CHECK(flat(g).sub(expect).abs().sum().item<double>() > 0);
  }
}

TEST_CASE("an empty Poisson batch releases pure noise", "[train-engine]") {
  model::CausalLM m = tiny_lora_gpt2(3);
  data::LmDataset ds = random_lm_dataset(4, m->config().vocab_size, 1);
  grad::PerSampleGrads psg(m);
  train::DpSettings dp;
  dp.sigma = 1;
  dp.q = 0.25;
  dp.dataset_size = 4;
  auto g = train::clipped_sum(psg, ds, {}, 2, 0, dp, nullptr);
  CHECK(flat(g).abs().sum().item<double>() == 0.0);
  privacy::NoiseSource noise(3, false);
  CHECK(train::noise_and_scale(g, dp, noise, 0, nullptr) == 1.0);  // q N = 1
  CHECK(flat(g).abs().sum().item<double>() > 0);
}

TEST_CASE("dp-sgd with sigma 0, C inf and realised divisor equals sgd on the same Poisson batches",
          "[train-engine]") {
  Fixture f;
  if (!make_fixture(f)) return;
  std::string out = (f.tmp.path / "runs").string();
  auto a = run_metrics(f, out, {"--set", "method.name=sgd", "--set", "method.sampling=poisson"});
  auto b =
      run_metrics(f, out,
                  {"--set", "method.name=dp-sgd", "--set", "privacy.noise_multiplier=0", "--set",
                   "privacy.clip_norm=inf", "--set", "privacy.noise_divisor=realized"});
  REQUIRE(a["history"].size() == 6);
  for (size_t i = 0; i < 6; ++i) {
    CHECK(a["history"][i]["batch_size"] == b["history"][i]["batch_size"]);
    CHECK(a["history"][i]["loss"].get<double>() ==
          Approx(b["history"][i]["loss"].get<double>()).epsilon(1e-5));
  }
  double la = a["eval"]["final"]["loss"], lb = b["eval"]["final"]["loss"],
         l0 = a["eval"]["base"]["loss"];
  CHECK(la == Approx(lb).epsilon(1e-5));
  CHECK(la != l0);  // training moved the model
  CHECK(a["privacy"]["epsilon"] == "inf");
  CHECK(b["privacy"]["epsilon"] == "inf");
}

TEST_CASE(
    "dp-sgd at epsilon inf clips without noise and reports eps inf; at eps 1 spends at most 1",
    "[train-engine]") {
  Fixture f;
  if (!make_fixture(f)) return;
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

TEST_CASE("a run stopped after step k and resumed ends with the numbers of an uninterrupted run",
          "[train-engine]") {
  Fixture f;
  if (!make_fixture(f)) return;
  std::string out = (f.tmp.path / "runs").string();
  auto method =
      GENERATE(as<std::string>{}, "dp-sgd", "sgd");  // Poisson + noise streams; shuffle sampler
  CAPTURE(method);
  std::vector<std::string> spec = {
      "--set", "method.name=" + method,    "--set", "privacy.epsilon=2",
      "--set", "model.peft.dropout=0.1",   "--set", "train.warmup_ratio=0.3",
      "--set", "train.schedule=cosine",    "--set", "eval.every=2",
      "--set", "output.checkpoint_every=2"};
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
  for (const char* k : {"eval", "history", "privacy"}) {
    CAPTURE(k);
    CHECK(resumed[k] == full[k]);
  }
  CHECK(!fs::exists(fs::path(dir) / "checkpoint"));
  CHECK(fs::exists(fs::path(dir) / "adapter" / "adapter_model.safetensors"));
  CHECK(test::cli({"run", "--resume", dir}) == 2);  // already finished: refused
}

TEST_CASE("labelled eval data adds classification accuracy to the base and final evaluations",
          "[train-engine]") {
  Fixture f;
  if (!make_fixture(f)) return;
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
