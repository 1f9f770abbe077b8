// The one-run audit's conversion (core/privacy/audit_bound.hpp) against a slow, obvious
// reference on hand-made counts and against the numbers printed in Steinke, Nasr and Jagielski
// 2023 (Appendix D, Section 7).
#include <catch2/catch.hpp>

#include <cmath>
#include <set>
#include <sstream>

#include "core/grad/per_sample.hpp"
#include "core/model/checkpoint.hpp"
#include "core/model/peft.hpp"
#include "core/privacy/audit_bound.hpp"
#include "core/util/error.hpp"
#include "data/train_inputs.hpp"
#include "methods/registry.hpp"
#include "run_fixture.hpp"

using namespace dpft;
using privacy::AuditCounts;

namespace {

// P[Binomial(r, p) >= x] by summing every term, each C(r, j) built by exact-order products in
// long double (no log space, no shortcuts); x <= 0 gives 1.
long double ref_tail(int64_t r, long double p, int64_t x) {
  if (x <= 0) return 1.0L;
  long double total = 0;
  for (int64_t j = x; j <= r; ++j) {
    long double term = 1;
    for (int64_t k = 1; k <= j; ++k)  // C(r, j) p^j (1 - p)^(r - j), one factor at a time
      term *= static_cast<long double>(r - j + k) / static_cast<long double>(k) * p;
    for (int64_t k = 0; k < r - j; ++k) term *= (1 - p);
    total += term;
  }
  return total;
}

// The theorem's right-hand side with the maximum over every i = 1..m, as written.
double ref_p_value(const AuditCounts& c, double eps, double delta) {
  const long double p = std::exp(static_cast<long double>(eps)) /
                        (1 + std::exp(static_cast<long double>(eps)));
  const long double fv = ref_tail(c.guesses, p, c.correct);
  long double alpha = 0;
  for (int64_t i = 1; i <= c.m; ++i)
    alpha = std::max(alpha, (ref_tail(c.guesses, p, c.correct - i) - fv) / i);
  return static_cast<double>(std::min(1.0L, fv + 2.0L * c.m * delta * alpha));
}

// The bound by scanning epsilon upward in steps of 1e-4 until the p-value reaches beta.
double ref_lower_bound(const AuditCounts& c, double delta, double beta) {
  double eps = 0;
  if (ref_p_value(c, 0, delta) >= beta) return 0;
  while (ref_p_value(c, eps + 1e-4, delta) < beta) eps += 1e-4;
  return eps;
}

}  // namespace

TEST_CASE("audit p-value equals the slow reference on hand-made counts", "[audit]") {
  const AuditCounts cases[] = {{10, 10, 10}, {10, 6, 5}, {20, 8, 8},  {20, 20, 13},
                               {30, 12, 0},  {30, 30, 30}, {40, 10, 9}, {40, 40, 27}};
  for (const AuditCounts& c : cases)
    for (double eps : {0.0, 0.3, 1.0, 2.5, 6.0})
      for (double delta : {0.0, 1e-5, 1e-2}) {
        CAPTURE(c.m, c.guesses, c.correct, eps, delta);
        const double fast = privacy::audit_p_value(c, eps, delta), ref = ref_p_value(c, eps, delta);
        CHECK(fast == Approx(ref).epsilon(1e-9).margin(1e-15));
      }
}

TEST_CASE("audit epsilon lower bound equals the slow reference scan", "[audit]") {
  const AuditCounts cases[] = {{10, 10, 10}, {20, 8, 8}, {20, 20, 17}, {30, 30, 30},
                               {40, 10, 9},  {40, 40, 31}, {16, 16, 16}, {30, 20, 10}};
  for (const AuditCounts& c : cases)
    for (double delta : {0.0, 1e-5, 1e-3})
      for (double beta : {0.05, 0.01}) {
        CAPTURE(c.m, c.guesses, c.correct, delta, beta);
        const double fast = privacy::audit_epsilon_lower_bound(c, delta, beta);
        const double ref = ref_lower_bound(c, delta, beta);
        CHECK(fast >= ref - 1e-6);  // the scan stops on its grid below the supremum
        CHECK(fast <= ref + 1e-4 + 1e-6);
        // The bound is refuted, a hair above it is not.
        if (fast > 0) CHECK(privacy::audit_p_value(c, fast, delta) < beta);
        CHECK(privacy::audit_p_value(c, fast + 1e-6, delta) >= beta);
      }
  // Half right is no evidence of leakage; all wrong is none either.
  CHECK(privacy::audit_epsilon_lower_bound({100, 100, 50}, 1e-5, 0.05) == 0);
  CHECK(privacy::audit_epsilon_lower_bound({100, 100, 0}, 1e-5, 0.05) == 0);
}

TEST_CASE("audit bound: closed form for delta 0 and all guesses right, and the paper's numbers",
          "[audit]") {
  // delta = 0, v = r: p^r < beta  <=>  eps < -ln(beta^(-1/r) - 1).
  for (int64_t r : {1, 5, 16, 100, 1000}) {
    CAPTURE(r);
    const double closed = -std::log(std::pow(0.05, -1.0 / static_cast<double>(r)) - 1);
    CHECK(privacy::audit_epsilon_lower_bound({r, r, r}, 0.0, 0.05) ==
          Approx(std::max(0.0, closed)).margin(1e-6));
  }
  // Printed in Steinke, Nasr, Jagielski 2023 (Appendix D's examples; Section 7, Fig. 11), 95%:
  // m = 100, r = 100, v = 75: p-value 0.553 at eps ln 3, delta 0; bound 0.702 (delta 0),
  // 0.699 (delta 1e-4); m = 1000: 0.673; m = 100000, r = 1510, v = 1439, delta 1e-5: 2.675.
  CHECK(privacy::audit_p_value({100, 100, 75}, std::log(3.0), 0.0) == Approx(0.553).margin(5e-4));
  CHECK(privacy::audit_epsilon_lower_bound({100, 100, 75}, 0.0, 0.05) ==
        Approx(0.702).margin(5e-4));
  CHECK(privacy::audit_epsilon_lower_bound({100, 100, 75}, 1e-4, 0.05) ==
        Approx(0.699).margin(5e-4));
  CHECK(privacy::audit_epsilon_lower_bound({1000, 100, 75}, 1e-4, 0.05) ==
        Approx(0.673).margin(5e-4));
  CHECK(privacy::audit_epsilon_lower_bound({100000, 1510, 1439}, 1e-5, 0.05) ==
        Approx(2.6755).margin(1e-3));
}

TEST_CASE("audit guesses: top k+ included, bottom k- excluded, ties by index", "[audit]") {
  std::vector<double> s = {0.5, 2.0, -1.0, 2.0, 0.0, -3.0};
  CHECK(privacy::audit_guesses(s, 2, 2) == std::vector<int>{0, 1, -1, 1, 0, -1});
  CHECK(privacy::audit_guesses(s, 3, 0) == std::vector<int>{1, 1, 0, 1, 0, 0});
  CHECK(privacy::audit_guesses(s, 0, 0) == std::vector<int>(6, 0));
  CHECK_THROWS_AS(privacy::audit_guesses(s, 4, 3), ConfigError);
  CHECK_THROWS_AS(privacy::audit_epsilon_lower_bound({10, 11, 3}, 1e-5, 0.05), ConfigError);
  CHECK_THROWS_AS(privacy::audit_epsilon_lower_bound({10, 10, 3}, 1e-5, 1.5), ConfigError);
}

// ---------------------------------------------------------------------------------------------
// `dpft audit` end to end on the tiny fixture model (tests/run_fixture.hpp).

namespace {

struct AuditFixture {
  test::Fixture f;
  std::string spec;
  AuditFixture(const std::string& privacy, int steps) {
    test::make_fixture(f);
    // 24 private rows: the first rows of the shipped PubMed sample.
    std::istringstream in(read_file(f.train));
    std::string csv, line;
    for (int i = 0; i <= 24 && std::getline(in, line); ++i) csv += line + "\n";
    write_file_atomic(f.tmp.path / "small.csv", csv);
    spec = (f.tmp.path / "audit.yaml").string();
    write_file_atomic(
        spec, fmt::format("name: audit-test\nseed: 0\n"
                          "model: {{path: {}, peft: {{kind: lora, r: 8, alpha: 16, targets: "
                          "[c_attn, c_fc]}}}}\n"
                          "data: {{train: {{path: {}}}, max_length: 24}}\n"
                          // noise_seed: these checks need the batches and noise of one
                          // seed (keyed noise would draw new ones each run)
                          "privacy: {{{}, delta: 1.0e-5, sampling_rate: 0.5, noise_seed: 0}}\n"
                          "train: {{steps: {}, micro_batch_size: 16, optimizer: adamw, lr: 0.02}}\n"
                          "method: {{name: dp-sgd}}\n",
                          f.model, (f.tmp.path / "small.csv").string(), privacy, steps));
  }
  nlohmann::json audit(const std::string& out, std::vector<std::string> extra = {}) {
    std::vector<std::string> a = {"audit", spec, "--canaries", "100", "--canary-tokens", "8",
                                  "--out", out};
    a.insert(a.end(), extra.begin(), extra.end());
    REQUIRE(test::cli(a) == 0);
    return nlohmann::json::parse(read_file(fs::path(out) / "audit.json"));
  }
};

}  // namespace

TEST_CASE("dpft audit finds the leakage of a run without noise", "[train-engine][audit-run]") {
  AuditFixture af("epsilon: .inf", 40);
  const fs::path out = af.f.tmp.path / "audit";
  nlohmann::json j = af.audit(out.string());
  // The secret coins, the canary files and the report agree.
  std::istringstream coins(read_file(out / "canaries_included.txt"));
  std::vector<nlohmann::json> all = read_jsonl(out / "canaries.jsonl"),
                              in = read_jsonl(out / "canaries_in.jsonl");
  REQUIRE(all.size() == 100);
  std::set<std::string> distinct;
  std::vector<nlohmann::json> expect_in;
  std::string c;
  for (size_t i = 0; std::getline(coins, c); ++i) {
    distinct.insert(all[i]["text"].get<std::string>());
    if (c == "1") expect_in.push_back(all[i]);
  }
  CHECK(distinct.size() == 100);
  CHECK(in == expect_in);
  CHECK(j["included"] == static_cast<int64_t>(in.size()));
  CHECK(j["reported_epsilon"] == "inf");
  CHECK(j["violation"] == false);
  CHECK(j["bonferroni"] == 6);
  for (const auto& t : j["tests"]) CHECK(t["correct"].get<int64_t>() <= t["guesses"].get<int64_t>());
  // Included canaries were memorised: their loss fell more, and the bound is clearly above 0
  // (measured 2.05 on the dev machine: 40 of 40 guesses right at K = 20).
  CHECK(j["score_mean_included"].get<double>() > j["score_mean_excluded"].get<double>());
  CHECK(j["eps_lower_bound"].get<double>() > 1.0);
}

TEST_CASE("dpft audit --score gradient equals a one-canary reference and finds the leakage",
          "[train-engine][audit-run]") {
  for (const char* kind : {"lora", "full"}) {
    CAPTURE(kind);
    const bool full = std::string(kind) == "full";
    AuditFixture af("epsilon: .inf", full ? 20 : 40);
    const fs::path out = af.f.tmp.path / "audit";
    std::vector<std::string> extra = {"--score", "gradient", "--set",
                                      std::string("model.peft.kind=") + kind};
    if (std::string(kind) == "full")  // a small full fine-tune: the attention projections
      extra.insert(extra.end(),
                   {"--set", "model.peft.targets=[c_attn]", "--set", "train.lr=0.002"});
    nlohmann::json j = af.audit(out.string(), extra);
    CHECK(j["score"] == "gradient");
    const fs::path run(j["run_dir"].get<std::string>());
    // The reference: theta_0 and the canaries' tokens from the run's resolved spec, theta_T
    // read back from the release, and each canary's gradient by the slow one-sample reference.
    Spec spec = load_spec((run / "config.resolved.yaml").string(), {});
    train::TrainInputs in = data::load_train_inputs(spec);
    in.model->eval();
    if (std::string(kind) == "full") {  // theta_0 is the base checkpoint itself
      model::CausalLM base = model::load_checkpoint(af.f.model);
      auto named = base->named_parameters();
      for (const auto& [name, p] : model::trainable_parameters(in.model))
        REQUIRE(torch::equal(p, *named.find(name)));
    }
    model::CausalLM released =
        model::load_checkpoint(std::string(kind) == "full" ? run / "model" : fs::path(af.f.model));
    if (std::string(kind) == "lora") model::load_adapter(released, run / "adapter");
    auto named = released->named_parameters();
    std::vector<torch::Tensor> delta;
    for (const auto& [name, p] : model::trainable_parameters(in.model))
      delta.push_back((*named.find(name) - p).detach().to(torch::kFloat64).reshape({-1}));
    const torch::Tensor d = torch::cat(delta);
    CHECK(d.norm().item<double>() > 0);
    const std::vector<nlohmann::json> scores = read_jsonl(out / "scores.jsonl");
    REQUIRE(scores.size() == 100);
    for (int64_t i : {0, 1, 37, 99}) {
      CAPTURE(i);
      const lm::LmBatch b = lm::collate(in.eval, {i}, lm::pad_id_for(*in.tok));
      auto [g, loss] =
          grad::reference_per_sample_grads(in.model, b.input_ids, b.attention_mask, b.labels);
      const torch::Tensor g64 = g[0].to(torch::kFloat64);
      const double ref = -(g64.dot(d) / g64.norm()).item<double>();
      CHECK(scores[static_cast<size_t>(i)]["index"] == i);
      CHECK(scores[static_cast<size_t>(i)]["score"].get<double>() ==
            Approx(ref).epsilon(1e-4).margin(1e-7));
    }
    // Without noise, the included canaries moved the parameters their way.
    CHECK(j["score_mean_included"].get<double>() > j["score_mean_excluded"].get<double>());
    WARN(kind << ": gradient-score lower bound " << j["eps_lower_bound"]);
    CHECK(j["eps_lower_bound"].get<double>() > 1.0);
  }
}

TEST_CASE("dpft audit of a DP run bounds epsilon below what the run reports",
          "[train-engine][audit-run]") {
  AuditFixture af("epsilon: 2", 10);  // a smoke check; the [slow] case below runs 9 audits
  nlohmann::json j = af.audit((af.f.tmp.path / "audit").string());
  CHECK(j["reported_epsilon"].get<double>() <= 2.0);
  CHECK(j["eps_lower_bound"].get<double>() <= j["reported_epsilon"].get<double>());
  CHECK(j["violation"] == false);
}

TEST_CASE("dpft audit over seeds: the DP lower bound never exceeds the reported epsilon",
          "[slow][audit-run]") {
  for (const char* eps : {"epsilon: 1", "epsilon: 4", "epsilon: 8"}) {
    AuditFixture af(eps, 40);
    for (int seed = 0; seed < 3; ++seed) {
      CAPTURE(eps, seed);
      nlohmann::json j = af.audit((af.f.tmp.path / fmt::format("audit{}", seed)).string(),
                                  {"--set", fmt::format("seed={}", seed), "--set",
                                   fmt::format("privacy.noise_seed={}", seed)});
      WARN(eps << " seed " << seed << ": lower bound " << j["eps_lower_bound"] << ", reported "
               << j["reported_epsilon"]);
      CHECK(j["eps_lower_bound"].get<double>() <= j["reported_epsilon"].get<double>());
    }
  }
}

TEST_CASE("dpft audit runs every training method", "[slow][audit-run]") {
  AuditFixture af("epsilon: 2", 10);
  nlohmann::json sgd = af.audit((af.f.tmp.path / "sgd").string(), {"--set", "method.name=sgd"});
  CHECK(sgd["reported_epsilon"] == "inf");
  CHECK(sgd["method"] == "sgd");
  nlohmann::json pe = af.audit(
      (af.f.tmp.path / "pe").string(),
      {"--set", "method.name=pe-sgd", "--set",
       "method.prompts=" + (fs::path(DPFT_SOURCE_DIR) / "experiments/prompts/pubmed.yaml").string(),
       "--set", "method.synthetic_size=8"});
  CHECK(pe["method"] == "pe-sgd");
  CHECK(pe["eps_lower_bound"].get<double>() <= pe["reported_epsilon"].get<double>());
  const std::string prompts =
      "method.prompts=" + (fs::path(DPFT_SOURCE_DIR) / "experiments/prompts/pubmed.yaml").string();
  const std::vector<std::vector<std::string>> others = {
      {"--set", "method.name=pdp-sgd", "--set", prompts, "--set", "method.synthetic_size=8",
       "--set", "method.k=4"},
      {"--set", "method.name=gep", "--set", prompts, "--set", "method.synthetic_size=8", "--set",
       "method.k=4"},
      {"--set", "method.name=inpro", "--set", prompts, "--set", "method.synthetic_size=8"},
      {"--set", "method.name=sft+dp-sgd", "--set", prompts, "--set", "method.synthetic_size=8"},
      {"--set", "method.name=denoise", "--set", "method.kappa=1.0"},
      {"--set", "method.name=dp-sft", "--set", "method.k=2", "--set", "method.stage1.steps=4",
       "--set", "model.peft.targets=[c_attn]", "--set", "model.peft.r=2"}};
  for (const auto& set : others)
    for (const char* score : {"loss", "gradient"}) {
      std::vector<std::string> extra = set;
      extra.insert(extra.end(), {"--score", score});
      CAPTURE(set[1], score);
      nlohmann::json j =
          af.audit((af.f.tmp.path / (set[1].substr(12) + "-" + score)).string(), extra);
      CHECK(j["method"] == set[1].substr(12));
      WARN(set[1] << " " << score << ": lower bound " << j["eps_lower_bound"] << ", reported "
                  << j["reported_epsilon"]);
      CHECK(j["eps_lower_bound"].get<double>() <= j["reported_epsilon"].get<double>());
    }
}

TEST_CASE("dpft audit refuses what it cannot audit", "[audit-run]") {
  AuditFixture af("epsilon: 2", 4);
  const std::string out = (af.f.tmp.path / "x").string();
  auto rc = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = {"audit", af.spec, "--canaries", "100", "--out", out};
    a.insert(a.end(), extra.begin(), extra.end());
    return test::cli(a);
  };
  CHECK(rc({"--set", "method.name=noop"}) == 2);
  CHECK(rc({"--set", "data.train.num_samples=5"}) == 2);
  CHECK(rc({"--set", "data.packing=true"}) == 2);
  CHECK(rc({"--guesses", "51"}) == 2);
  CHECK(rc({"--confidence", "1"}) == 2);
  CHECK(rc({"--canary-tokens", "24"}) == 2);  // not below data.max_length
  CHECK(!fs::exists(out));  // refused before anything was written
  fs::create_directories(out);
  write_file_atomic(fs::path(out) / "keep.txt", "x");
  CHECK(rc({}) == 2);
  CHECK(fs::exists(fs::path(out) / "keep.txt"));
}
