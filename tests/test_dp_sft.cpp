// Method dp-sft (paper 002) end to end on the tiny fixture: both stages in the ledger, the
// trajectory and subspace files, resume inside either stage, the identity subspace equal to
// DP-SGD, and a subspace refused on another base model.
#include <catch2/catch.hpp>

#include "core/project/subspace.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/sha256.hpp"
#include "run_fixture.hpp"

using namespace dpft;
using test::Fixture;
using test::make_fixture;
using test::run_metrics;

namespace {

// Stage 1: 4 steps (k = 2: a trajectory row every 2 steps); stage 2: train.steps = 6.
std::vector<std::string> sft_args(std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {
      "--set", "method.name=dp-sft",          "--set", "method.k=2",
      "--set", "method.stage1.steps=4",       "--set", "privacy.epsilon=2",
      "--set", "model.peft.targets=[c_attn]", "--set", "model.peft.r=2"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

}  // namespace

TEST_CASE("dp-sft: two stages, both in the ledger, the trajectory's subspace saved", "[dp-sft]") {
  Fixture f;
  make_fixture(f);
  const std::string out = (f.tmp.path / "runs").string();
  auto budget = GENERATE(as<std::string>{}, "joint", "split");
  CAPTURE(budget);
  std::string dir;
  auto m = run_metrics(f, out, sft_args({"--set", "method.budget=" + budget}), &dir);
  CHECK(m["status"] == "ok");
  CHECK(m["train"]["steps_done"] == 10);
  REQUIRE(m["train"]["phases"].size() == 2);
  CHECK(m["train"]["phases"][1]["first_step"] == 5);
  CHECK(test::release_count(m, "dp-sft stage 1") == 4);
  CHECK(test::release_count(m, "dp-sft stage 2") == 6);
  const double eps = m["privacy"]["epsilon"].get<double>();
  CHECK(eps <= 2.0);
  const auto& acct = m["privacy"]["accounting"];
  if (budget == "split") {  // Theorem 3: each stage alone within its share
    CHECK(acct["split"]["stage1"]["epsilon"].get<double>() <= 1.0);
    CHECK(acct["split"]["stage2"]["epsilon"].get<double>() <= 1.0);
    CHECK(acct["noise_scale_vs_split"] == 1.0);
  } else {
    CHECK(acct["noise_scale_vs_split"].get<double>() < 1.0);
    CHECK(eps > 1.9);  // the joint accounting spends the budget it was given
  }
  CHECK(m["privacy"]["stage1"]["noise_multiplier"].get<double>() > 0);
  CHECK(m["privacy"]["stage2"]["noise_multiplier"].get<double>() > 0);
  // A k = 2 subspace over every trained value; the trajectory it came from is gone (the default
  // method.keep_trajectory: false).
  CHECK_FALSE(fs::exists(fs::path(dir) / "trajectory"));
  project::Subspace s = project::load_subspace(fs::path(dir) / "subspace.safetensors");
  CHECK(s.k() == 2);
  CHECK(m["subspace"]["dim"] == s.dim());
  CHECK(m["subspace"]["singular_values"].size() == 2);
  torch::Tensor P = s.P.to(torch::kFloat64);
  CHECK((P.t().mm(P) - torch::eye(2, torch::kFloat64)).abs().max().item<double>() < 1e-6);
  CHECK(m["eval"]["final"]["loss"] != m["eval"]["base"]["loss"]);
}

TEST_CASE("dp-sft: keep_trajectory keeps stage 1's rows, keep_subspace false removes P at the end",
          "[dp-sft]") {
  Fixture f;
  make_fixture(f);
  const std::string out = (f.tmp.path / "runs").string();
  std::string dir;
  auto m = run_metrics(
      f, out,
      sft_args({"--set", "method.keep_trajectory=true", "--set", "method.keep_subspace=false"}),
      &dir);
  CHECK(m["status"] == "ok");
  CHECK(fs::exists(fs::path(dir) / "trajectory" / "row-00001.safetensors"));  // k = 2 rows
  CHECK_FALSE(fs::exists(fs::path(dir) / "trajectory" / "row-00002.safetensors"));
  CHECK_FALSE(fs::exists(fs::path(dir) / "subspace.safetensors"));
  CHECK(m["subspace"]["singular_values"].size() == 2);  // what P was, still in metrics.json
}

TEST_CASE("dp-sft: a run stopped in stage 1 or stage 2 resumes to the uninterrupted numbers",
          "[dp-sft]") {
  Fixture f;
  make_fixture(f);
  const std::string out = (f.tmp.path / "runs").string();
  const std::vector<std::string> spec =
      sft_args({"--set", "output.checkpoint_every=1", "--set", "train.warmup_ratio=0.3"});
  std::string full_dir;
  auto full = run_metrics(f, out, spec, &full_dir);
  const torch::Tensor P_full =
      project::load_subspace(fs::path(full_dir) / "subspace.safetensors").P;
  for (const char* at : {"3", "7"}) {
    CAPTURE(at);
    std::string dir;
    std::vector<std::string> stop = spec;
    stop.insert(stop.end(), {"--stop-after", at});
    auto part = run_metrics(f, out, stop, &dir);
    CHECK(part["status"] == "stopped");
    REQUIRE(test::cli({"run", "--resume", dir}) == 0);
    auto resumed = nlohmann::json::parse(read_file(fs::path(dir) / "metrics.json"));
    CHECK(resumed["status"] == "ok");
    CHECK(resumed["eval"] == full["eval"]);
    CHECK(resumed["privacy"] == full["privacy"]);
    CHECK(resumed["non_private"]["history"] == full["non_private"]["history"]);
    CHECK(torch::equal(project::load_subspace(fs::path(dir) / "subspace.safetensors").P, P_full));
  }
  // A trajectory row changed after the checkpoint (a forged trajectory: another subspace than the
  // one stage 1 released) refuses the resume, naming the file; metrics.json stays as it was.
  {
    std::string forged;
    std::vector<std::string> stop3 = spec;
    stop3.insert(stop3.end(), {"--stop-after", "3"});
    CHECK(run_metrics(f, out, stop3, &forged)["status"] == "stopped");
    const fs::path row = fs::path(forged) / "trajectory" / "row-00000.safetensors";
    REQUIRE(fs::exists(row));
    std::string bytes = read_file(row);
    bytes.back() = static_cast<char>(bytes.back() ^ 0x40);  // one float of the row, changed
    write_file_atomic(row, bytes);
    const std::string before = read_file(fs::path(forged) / "metrics.json");
    CHECK(test::cli({"run", "--resume", forged}) == 3);
    CHECK_THAT(nlohmann::json::parse(read_file(fs::path(forged) / "manifest.json"))["error"]
                   .get<std::string>(),
               Catch::Matchers::Contains("row-00000.safetensors is changed"));
    CHECK(read_file(fs::path(forged) / "metrics.json") == before);
  }
  // Interrupted between saving P (which removes the trajectory) and the first checkpoint of stage
  // 2: the resume from the end of stage 1 finds no trajectory rows and takes the saved P.
  std::string dir;
  std::vector<std::string> stop = spec;
  stop.insert(stop.end(), {"--stop-after", "4"});
  CHECK(run_metrics(f, out, stop, &dir)["status"] == "stopped");
  REQUIRE(fs::exists(fs::path(dir) / "trajectory" / "row-00001.safetensors"));
  fs::remove_all(fs::path(dir) / "trajectory");
  fs::copy_file(fs::path(full_dir) / "subspace.safetensors",
                fs::path(dir) / "subspace.safetensors");
  REQUIRE(test::cli({"run", "--resume", dir}) == 0);
  auto resumed = nlohmann::json::parse(read_file(fs::path(dir) / "metrics.json"));
  CHECK(resumed["eval"] == full["eval"]);
  CHECK(resumed["non_private"]["history"] == full["non_private"]["history"]);
}

TEST_CASE("dp-sft: in the identity subspace with sigma 0 and C inf it is DP-SGD's run",
          "[dp-sft]") {
  Fixture f;
  make_fixture(f);
  const std::string out = (f.tmp.path / "runs").string();
  std::string dir;
  run_metrics(f, out, sft_args(), &dir);  // its subspace file names the parameters and base
  project::Subspace s = project::load_subspace(fs::path(dir) / "subspace.safetensors");
  const int64_t d = s.dim();
  REQUIRE(d > 0);
  REQUIRE(d <= 2048);
  s.P = torch::eye(d, torch::kFloat32);
  s.singular_values = torch::Tensor();
  const std::string eye = (f.tmp.path / "eye.safetensors").string();
  project::save_subspace(eye, s);
  const std::vector<std::string> common = {"--set", "privacy.noise_multiplier=0",
                                           "--set", "privacy.clip_norm=inf",
                                           "--set", "privacy.noise_divisor=realized",
                                           "--set", "train.optimizer=sgd",
                                           "--set", "train.lr=0.5",
                                           "--set", "model.peft.targets=[c_attn]",
                                           "--set", "model.peft.r=2"};
  std::vector<std::string> a_args = common, b_args = common;
  a_args.insert(a_args.end(), {"--set", "method.name=dp-sgd"});
  b_args.insert(b_args.end(),
                {"--set", "method.name=dp-sft", "--set", "method.source=file", "--set",
                 "method.file=" + eye, "--set", "method.k=" + std::to_string(d)});
  auto a = run_metrics(f, out, a_args);
  auto b = run_metrics(f, out, b_args);
  REQUIRE(b["train"]["steps_done"] == 6);
  for (size_t i = 0; i < 6; ++i) {
    CHECK(a["non_private"]["history"][i]["batch_size"] ==
          b["non_private"]["history"][i]["batch_size"]);
    CHECK(a["non_private"]["history"][i]["loss"].get<double>() ==
          Approx(b["non_private"]["history"][i]["loss"].get<double>()).epsilon(1e-5));
  }
  CHECK(a["eval"]["final"]["loss"].get<double>() ==
        Approx(b["eval"]["final"]["loss"].get<double>()).epsilon(1e-5));
  CHECK(a["eval"]["final"]["loss"] != a["eval"]["base"]["loss"]);
  CHECK(b["privacy"]["epsilon"] == "inf");
  // Diagnostics: in the identity subspace nothing is outside P (residual 0), and reading them
  // changes no number of the run.
  std::vector<std::string> diag_args = b_args;
  diag_args.insert(diag_args.end(), {"--set", "method.diagnostics=true"});
  auto bd = run_metrics(f, out, diag_args);
  CHECK(bd["eval"] == b["eval"]);
  CHECK(bd["non_private"]["dp_sft_diagnostics"]["steps"] == 6);
  CHECK(bd["non_private"]["dp_sft_diagnostics"]["residual_mean"].get<double>() < 1e-6);

  // The same subspace on another base model (another seed initialises other LoRA weights).
  std::vector<std::string> other = b_args;
  other.insert(other.end(), {"--set", "seed=4"});
  std::string printed;
  CHECK(test::cli(test::run_args(f, out, other), &printed) == 2);
}

TEST_CASE("dp-sft: options are checked before anything runs", "[dp-sft]") {
  Fixture f;
  make_fixture(f);
  const std::string out = (f.tmp.path / "runs").string();
  CHECK(test::cli(test::run_args(f, out, sft_args({"--set", "method.stage1.steps=1"}))) == 2);
  CHECK(test::cli(test::run_args(f, out, sft_args({"--set", "method.source=file"}))) == 2);
  CHECK(test::cli(test::run_args(f, out, sft_args({"--set", "method.split=1"}))) == 2);
}

TEST_CASE("dp-sft: a public stage 1 costs nothing, reads no private row, and resumes", "[dp-sft]") {
  Fixture f;
  make_fixture(f);
  const std::string out = (f.tmp.path / "runs").string();
  // The fixture's eval file stands for a public corpus: 12 of its rows.
  const std::vector<std::string> pub =
      sft_args({"--set", "method.source=public", "--set", "data.public.path=" + f.eval, "--set",
                "data.public.num_samples=12", "--set", "output.checkpoint_every=1"});
  std::string dir;
  auto m = run_metrics(f, out, pub, &dir);
  CHECK(m["status"] == "ok");
  CHECK(m["train"]["steps_done"] == 10);  // stage 1's 4 public steps, stage 2's 6
  CHECK(test::release_count(m, "dp-sft stage 1") == 0);
  CHECK(test::release_count(m, "dp-sft stage 2") == 6);
  CHECK_FALSE(m["privacy"].contains("stage1"));
  CHECK(m["privacy"]["stage1_public"]["examples"] == 12);
  const double eps = m["privacy"]["epsilon"].get<double>();
  CHECK(eps <= 2.0);
  CHECK(eps > 1.9);  // the whole budget goes to stage 2
  CHECK(m["subspace"]["source"] == "public");
  const torch::Tensor P = project::load_subspace(fs::path(dir) / "subspace.safetensors").P;
  // Another private set, the same seed: stage 1 saw none of it, so P is the same to the bit.
  std::string other_dir;
  std::vector<std::string> other = pub;
  other.insert(other.end(), {"--set", "data.train.num_samples=20"});
  auto m2 = run_metrics(f, out, other, &other_dir);
  CHECK(torch::equal(project::load_subspace(fs::path(other_dir) / "subspace.safetensors").P, P));
  CHECK(m2["eval"]["final"]["loss"] != m["eval"]["final"]["loss"]);  // stage 2 did see it
  // Stopped inside the public stage, resumed: the uninterrupted run's numbers and subspace.
  std::string part_dir;
  std::vector<std::string> stop = pub;
  stop.insert(stop.end(), {"--stop-after", "3"});
  REQUIRE(run_metrics(f, out, stop, &part_dir)["status"] == "stopped");
  REQUIRE(test::cli({"run", "--resume", part_dir}) == 0);
  auto resumed = nlohmann::json::parse(read_file(fs::path(part_dir) / "metrics.json"));
  CHECK(resumed["eval"] == m["eval"]);
  CHECK(resumed["non_private"]["history"] == m["non_private"]["history"]);
  CHECK(torch::equal(project::load_subspace(fs::path(part_dir) / "subspace.safetensors").P, P));

  // The private training file as the "public" set: refused under DP, allowed at eps inf.
  std::vector<std::string> leak =
      sft_args({"--set", "method.source=public", "--set", "data.public.path=" + f.train});
  CHECK(test::cli(test::run_args(f, out, leak)) == 2);
  leak.insert(leak.end(), {"--set", "privacy.epsilon=.inf"});
  CHECK(test::cli(test::run_args(f, out, leak)) == 0);
  // data.public without source public, and source public without data.public.
  CHECK(test::cli(test::run_args(f, out,
                                 {"--set", "method.name=dp-sgd", "--set", "privacy.epsilon=2",
                                  "--set", "data.public.path=" + f.eval})) == 2);
  CHECK(test::cli(test::run_args(f, out, sft_args({"--set", "method.source=public"}))) == 2);
}

TEST_CASE("dp-sft: diagnostics measure clipping, noise and what the subspace leaves out",
          "[dp-sft]") {
  Fixture f;
  make_fixture(f);
  const std::string out = (f.tmp.path / "runs").string();
  const std::vector<std::string> args = sft_args({"--set", "privacy.clip_norm=0.05"});
  auto plain = run_metrics(f, out, args);
  std::vector<std::string> with = args;
  with.insert(with.end(), {"--set", "method.diagnostics=true"});
  auto m = run_metrics(f, out, with);
  CHECK(m["eval"] == plain["eval"]);  // analysis only: nothing fed back
  CHECK(m["privacy"] == plain["privacy"]);
  const auto& h = m["non_private"]["history"];
  REQUIRE(h.size() == 10);
  for (size_t i = 0; i < h.size(); ++i) {
    CAPTURE(i);
    const auto& d = h[i]["dp_sft"];
    const double before = d["norm_before_clip_mean"].get<double>(),
                 after = d["norm_after_clip_mean"].get<double>();
    CHECK(before == Approx(h[i]["grad_norm_mean"].get<double>()));
    CHECK(after <= std::min(before, 0.05) * (1 + 1e-6));  // clipped to C = 0.05
    CHECK(after > 0);
    const double B = h[i]["batch_size"].get<double>();
    CHECK(d["sum_norm"].get<double>() <= B * 0.05 * (1 + 1e-6));  // the triangle inequality
    CHECK(d["noise_norm"].get<double>() > 0);
    // stage 1 (steps 1-4) has no subspace yet; stage 2's residual is a share of ||g||
    CHECK(d.contains("residual") == (i >= 4));
    if (i >= 4) {
      CHECK(d["residual"].get<double>() >= 0);
      CHECK(d["residual"].get<double>() <= 1 + 1e-9);
    }
  }
  // k = 2 directions out of thousands: most of a fresh batch's gradient is outside them.
  CHECK(m["non_private"]["dp_sft_diagnostics"]["residual_mean"].get<double>() > 0.5);
  CHECK(m["non_private"]["dp_sft_diagnostics"]["steps"] == 6);
}

TEST_CASE(
    "dp-sft: a subspace file carries its run's releases: composed, refused or declared "
    "public",
    "[dp-sft][privacy]") {
  Fixture f;
  make_fixture(f);
  const std::string out = (f.tmp.path / "runs").string();
  std::string dp_dir, np_dir;
  run_metrics(f, out, sft_args(), &dp_dir);  // epsilon 2: stage 1's 4 releases in P
  const std::string dp_file = (fs::path(dp_dir) / "subspace.safetensors").string();
  const nlohmann::json prov = project::subspace_provenance(dp_file);
  REQUIRE(prov.is_object());
  CHECK(prov["schema"] == "dpft.provenance/2");
  CHECK(prov["private"] == true);
  REQUIRE(prov["releases"].size() == 1);
  CHECK(prov["releases"][0]["label"] == "dp-sft stage 1");
  CHECK(prov["releases"][0]["count"] == 4);
  REQUIRE(prov["data"]["files"].size() == 1);
  CHECK(prov["data"]["files"][0]["name"] == fs::path(f.train).filename().string());
  // The data are named by a keyed fingerprint, never by their SHA-256 (which would let whoever
  // holds the file test a guess of the data).
  const std::string train_sha = sha256_file_hex(f.train);
  CHECK(prov["data"]["files"][0]["fingerprint"].get<std::string>().size() == 64);
  CHECK(prov["data"]["files"][0]["fingerprint"] != train_sha);
  CHECK(prov.dump().find(train_sha) == std::string::npos);
  CHECK(read_file(dp_file).find(train_sha) == std::string::npos);
  // The adapter embodies both stages.
  const auto ap =
      nlohmann::json::parse(read_file(fs::path(dp_dir) / "adapter" / "provenance.json"));
  CHECK(ap["releases"].size() == 2);
  CHECK(ap["private"] == true);

  auto from = [&](const std::string& file, std::vector<std::string> more = {}) {
    std::vector<std::string> a = {"--set", "method.source=file", "--set", "method.file=" + file};
    a.insert(a.end(), more.begin(), more.end());
    return sft_args(a);
  };
  // Made from this run's private data: its releases are composed, and stage 2's sigma is
  // calibrated so that both together meet epsilon 2.
  auto c = run_metrics(f, out, from(dp_file));
  CHECK(c["status"] == "ok");
  CHECK(test::release_count(c, "source: dp-sft stage 1") == 4);
  CHECK(test::release_count(c, "dp-sft stage 2") == 6);
  CHECK(c["privacy"]["epsilon"].get<double>() <= 2.0);
  CHECK(c["privacy"]["epsilon"].get<double>() > 1.9);
  CHECK_THAT(c["subspace"]["provenance"]["decision"].get<std::string>(),
             Catch::Contains("composed"));
  // Stopped and resumed: composed once (the checkpoint's ledger holds them), the same numbers.
  std::string part_dir;
  std::vector<std::string> stop = from(dp_file, {"--set", "output.checkpoint_every=1"});
  stop.insert(stop.end(), {"--stop-after", "2"});
  REQUIRE(run_metrics(f, out, stop, &part_dir)["status"] == "stopped");
  REQUIRE(test::cli({"run", "--resume", part_dir}) == 0);
  const auto resumed = nlohmann::json::parse(read_file(fs::path(part_dir) / "metrics.json"));
  CHECK(test::release_count(resumed, "source: dp-sft stage 1") == 4);
  CHECK(resumed["privacy"]["epsilon"] == c["privacy"]["epsilon"]);
  CHECK(resumed["eval"] == c["eval"]);

  // Without provenance: refused (exit 2), unless the spec declares the file public; then the
  // whole budget goes to stage 2 (a smaller sigma than when composing).
  project::Subspace bare = project::load_subspace(dp_file);
  bare.provenance = nullptr;
  const std::string bare_file = (f.tmp.path / "bare.safetensors").string();
  project::save_subspace(bare_file, bare);
  std::string printed;
  CHECK(test::cli(test::run_args(f, out, from(bare_file)), &printed) == 2);
  auto pub = run_metrics(f, out, from(bare_file, {"--set", "method.file_public=true"}));
  CHECK(test::release_count(pub, "source: dp-sft stage 1") == 0);
  CHECK(pub["privacy"]["stage2"]["noise_multiplier"].get<double>() <
        c["privacy"]["stage2"]["noise_multiplier"].get<double>());

  // Made without noise (epsilon inf) from the same private data: refused, exit 2.
  run_metrics(f, out, sft_args({"--set", "privacy.epsilon=inf"}), &np_dir);
  const std::string np_file = (fs::path(np_dir) / "subspace.safetensors").string();
  CHECK(project::subspace_provenance(np_file)["private"] == false);
  CHECK(test::cli(test::run_args(f, out, from(np_file)), &printed) == 2);
  // ... but another private data set has nothing to compose: accepted, said so.
  auto other = run_metrics(f, out, from(np_file, {"--set", "data.train.path=" + f.eval}));
  CHECK(other["status"] == "ok");
  CHECK(test::release_count(other, "source: dp-sft stage 1") == 0);
  CHECK_THAT(other["subspace"]["provenance"]["decision"].get<std::string>(),
             Catch::Contains("other private data"));

  // Declared not this run's data: nothing composed from other data; refused (exit 2) for a
  // file made from this run's own files.
  auto decl = run_metrics(
      f, out,
      from(dp_file, {"--set", "data.train.path=" + f.eval, "--set", "method.file_public=true"}));
  CHECK(test::release_count(decl, "source: dp-sft stage 1") == 0);
  CHECK(test::cli(test::run_args(f, out, from(dp_file, {"--set", "method.file_public=true"})),
                  &printed) == 2);
  // Under another data key nothing can tell whether the data are the same: a DP file's releases
  // are composed (over-counting at worst), a non-private one is refused unless declared.
  test::SetEnv key("DPFT_DATA_KEY", (f.tmp.path / "other.key").string());
  auto unknown = run_metrics(f, out, from(dp_file, {"--set", "data.train.path=" + f.eval}));
  CHECK(test::release_count(unknown, "source: dp-sft stage 1") == 4);
  CHECK(unknown["subspace"]["provenance"]["decision"] == c["subspace"]["provenance"]["decision"]);
  CHECK(test::cli(test::run_args(f, out, from(np_file, {"--set", "data.train.path=" + f.eval})),
                  &printed) == 2);
  auto declared = run_metrics(
      f, out,
      from(np_file, {"--set", "data.train.path=" + f.eval, "--set", "method.file_public=true"}));
  CHECK(test::release_count(declared, "source: dp-sft stage 1") == 0);
}
