// DP-SFT's subspace arithmetic (core/project/subspace, PerSampleGrads::project) against slow,
// obvious references: the Gram route against torch::linalg_svd of the whole trajectory matrix,
// the per-sample projection against the one-sample-at-a-time gradients times P.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/grad/per_sample.hpp"
#include "core/model/peft.hpp"
#include "core/model/safetensors.hpp"
#include "core/project/subspace.hpp"
#include "core/util/error.hpp"
#include "model_test_util.hpp"
#include "test_util.hpp"

using namespace dpft;
using torch::Tensor;

namespace {

// A trajectory-like matrix: row t = Theta_t - Theta_0 of a random walk with drift (m, d), rows
// strongly correlated as real trajectories are.
Tensor walk(int64_t m, int64_t d, uint64_t seed) {
  torch::manual_seed(seed);
  Tensor steps =
      torch::randn({m, d}, torch::kFloat64) * 0.3 + torch::randn({1, d}, torch::kFloat64);
  return steps.cumsum(0).to(torch::kFloat32);
}

double ortho_err(const Tensor& P) {
  Tensor p = P.to(torch::kFloat64);
  return (p.t().mm(p) - torch::eye(P.size(1), torch::kFloat64)).abs().max().item<double>();
}

Tensor random_orthonormal(int64_t d, int64_t k, uint64_t seed) {
  torch::manual_seed(seed);
  return std::get<0>(torch::linalg_qr(torch::randn({d, k}, torch::kFloat64)))
      .to(torch::kFloat32)
      .contiguous();
}

// Largest principal angle (degrees) between span(A) and span(B), both (d, k), by the sines
// (Bjorck-Golub): s = singular values of Qa - Qb Qb^T Qa with Qa, Qb orthonormalised in float64.
// Accurate for tiny angles, where acos of the cosines loses half the digits.
double max_angle_deg(const Tensor& A, const Tensor& B) {
  Tensor qa = std::get<0>(torch::linalg_qr(A.to(torch::kFloat64)));
  Tensor qb = std::get<0>(torch::linalg_qr(B.to(torch::kFloat64)));
  Tensor sines = torch::linalg_svdvals(qa - qb.mm(qb.t().mm(qa)));
  return std::asin(std::min(1.0, sines.max().item<double>())) * 180.0 / M_PI;
}

double subspace_rel_err(const Tensor& a, const Tensor& ref) {
  return ((a.to(torch::kFloat64) - ref.to(torch::kFloat64)).norm() /
          ref.to(torch::kFloat64).norm().clamp_min(1e-30))
      .item<double>();
}

}  // namespace

TEST_CASE("subspace: the Gram route spans the direct SVD's top-k right singular vectors",
          "[subspace]") {
  test::TempDir tmp;
  const int64_t m = 12, d = 300, k = 5;
  Tensor A = walk(m, d, 3);
  project::Trajectory traj(tmp.path / "A", d);
  for (int64_t i = 0; i < m; ++i) traj.append(A[i]);
  REQUIRE(traj.rows() == m);
  CHECK(torch::equal(traj.matrix(), A));

  Tensor s;
  // chunk_mb tiny: 10-column chunks, so the chunked Gram and the chunked P = A^T U S^-1 are used.
  Tensor P = project::subspace_from_trajectory(traj, k, &s, torch::kFloat32, 0.001);
  REQUIRE(P.sizes() == torch::IntArrayRef({d, k}));
  CHECK(P.scalar_type() == torch::kFloat32);
  CHECK(ortho_err(P) < 1e-6);
  Tensor ref = project::subspace_direct_svd(A, k);
  CHECK(max_angle_deg(P, ref) < 1e-4);
  Tensor sv = torch::linalg_svdvals(A.to(torch::kFloat64));
  CHECK(subspace_rel_err(s, sv) < 1e-6);
  // Not the span of some other k directions: the next singular vector is orthogonal to P.
  Tensor next = project::subspace_direct_svd(A, k + 1).slice(1, k, k + 1);
  CHECK(P.to(torch::kFloat64).t().mm(next).abs().max().item<double>() < 1e-5);

  project::Subspace sub;
  sub.P = P;
  sub.singular_values = s;
  CHECK(sub.energy_top_k() ==
        Approx((sv.slice(0, 0, k).pow(2).sum() / sv.pow(2).sum()).item<double>()).epsilon(1e-9));

  // bfloat16 storage: orthonormal to bfloat16 precision, the same span to within a degree.
  Tensor Pb = project::subspace_from_trajectory(traj, k, nullptr, torch::kBFloat16, 0.001);
  CHECK(Pb.scalar_type() == torch::kBFloat16);
  CHECK(ortho_err(Pb) < 2e-2);
  CHECK(max_angle_deg(Pb, ref) < 1.0);
}

TEST_CASE("subspace: k beyond the rows or the rank is refused", "[subspace]") {
  test::TempDir tmp;
  const int64_t d = 40;
  project::Trajectory traj(tmp.path / "A", d);
  torch::manual_seed(1);
  Tensor v = torch::randn({d});
  for (int i = 1; i <= 4; ++i) traj.append(v * i);  // rank 1: a straight line
  CHECK_THROWS_WITH(project::subspace_from_trajectory(traj, 5),
                    Catch::Contains("k = 5 needs 1 <= k <= the trajectory's 4 rows"));
  CHECK_THROWS_WITH(project::subspace_from_trajectory(traj, 2),
                    Catch::Contains("numerical rank 1 < k = 2"));
  Tensor P = project::subspace_from_trajectory(traj, 1);
  CHECK(std::abs(P.squeeze(1).dot(v / v.norm()).item<double>()) == Approx(1.0).epsilon(1e-6));
}

TEST_CASE("trajectory: rows persist, a reopened directory resumes, truncate drops rows",
          "[subspace]") {
  test::TempDir tmp;
  const int64_t d = 17;
  Tensor A = walk(4, d, 9);
  {
    project::Trajectory t(tmp.path / "A", d);
    for (int i = 0; i < 3; ++i) t.append(A[i].to(torch::kFloat64));  // stored float32
  }
  project::Trajectory t(tmp.path / "A", d);
  REQUIRE(t.rows() == 3);
  CHECK(torch::equal(t.matrix(), A.slice(0, 0, 3)));
  CHECK(torch::equal(t.columns(5, 9), A.slice(0, 0, 3).slice(1, 5, 9)));
  t.truncate(2);
  CHECK(t.rows() == 2);
  CHECK_FALSE(fs::exists(tmp.path / "A" / "row-00002.safetensors"));
  t.append(A[3]);
  CHECK(torch::equal(project::Trajectory(tmp.path / "A", d).matrix()[2], A[3]));
  CHECK_THROWS_AS(project::Trajectory(tmp.path / "A", d + 1), InputError);
  CHECK_THROWS_WITH(t.append(torch::zeros({d + 1})), Catch::Contains("must have 17"));
  fs::remove(tmp.path / "A" / "row-00001.safetensors");
  CHECK_THROWS_WITH(project::Trajectory(tmp.path / "A", d), Catch::Contains("is missing"));
}

TEST_CASE("subspace file: round trip, and a subspace never applies to another model",
          "[subspace]") {
  test::TempDir tmp;
  torch::manual_seed(4);
  std::vector<std::pair<std::string, Tensor>> params = {{"a.weight", torch::randn({3, 4})},
                                                        {"b.bias", torch::randn({5})}};
  project::Subspace s;
  s.P = random_orthonormal(17, 3, 2);
  s.singular_values = torch::tensor({3.0, 2.0, 1.0, 0.5}, torch::kFloat64);
  s.params = project::param_entries(params);
  s.base_sha256 = project::params_sha256(params);
  s.source = "private";
  project::save_subspace(tmp.path / "s.safetensors", s);
  project::Subspace r = project::load_subspace(tmp.path / "s.safetensors");
  CHECK(torch::equal(r.P, s.P));
  CHECK(torch::equal(r.singular_values, s.singular_values));
  CHECK(r.base_sha256 == s.base_sha256);
  REQUIRE(r.params.size() == 2);
  CHECK(r.params[1].name == "b.bias");
  CHECK(r.params[1].shape == std::vector<int64_t>{5});
  CHECK(r.blocks()[0].sizes() == torch::IntArrayRef({12, 3}));
  CHECK(r.energy_top_k() == Approx(14.0 / 14.25));
  CHECK_NOTHROW(project::check_applies(r, project::param_entries(params), s.base_sha256));

  // One changed weight: another base model.
  auto other = params;
  other[1].second = other[1].second.clone();
  other[1].second[2] += 1e-3;
  const std::string h2 = project::params_sha256(other);
  CHECK(h2 != s.base_sha256);
  CHECK(project::params_sha256(params) == s.base_sha256);  // deterministic
  CHECK_THROWS_WITH(project::check_applies(r, project::param_entries(other), h2),
                    Catch::Contains("other base weights"));
  // Another parameter set.
  auto fewer = params;
  fewer.pop_back();
  CHECK_THROWS_AS(project::check_applies(r, project::param_entries(fewer), s.base_sha256),
                  ConfigError);
  other[0].first = "c.weight";
  CHECK_THROWS_WITH(project::check_applies(r, project::param_entries(other), s.base_sha256),
                    Catch::Contains("'a.weight' (3, 4) in the subspace but 'c.weight'"));
  // Not a subspace file.
  model::save_safetensors(tmp.path / "x.safetensors", {{"P", s.P}});
  CHECK_THROWS_AS(project::load_subspace(tmp.path / "x.safetensors"), InputError);
}

TEST_CASE("per-sample projection P^T g_i equals the reference gradients times P",
          "[subspace][grad]") {
  struct Case {
    std::string what;
    model::CausalLM m;
    lm::LmBatch b;
  };
  std::vector<Case> cases;
  {  // GPT-2, full: tied embedding (lookup + head), position embeddings, padding, a prompt
    model::CausalLM m = model::make_causal_lm(test::tiny_config("gpt2"), 3);
    model::PeftOptions o;
    o.kind = model::PeftKind::kFull;
    o.targets = {"all"};
    model::apply_peft(m, o, 4);
    torch::manual_seed(7);
    lm::LmBatch b;
    const std::vector<int64_t> lens = {9, 6, 1, 4};
    b.input_ids = torch::randint(1, m->config().vocab_size, {4, 9}, torch::kInt64);
    b.attention_mask = torch::zeros({4, 9}, torch::kInt64);
    for (int64_t i = 0; i < 4; ++i) b.attention_mask[i].slice(0, 0, lens[i]).fill_(1);
    b.input_ids *= b.attention_mask;
    b.labels = torch::where(b.attention_mask.to(torch::kBool), b.input_ids,
                            torch::full_like(b.input_ids, -100));
    b.labels[0].slice(0, 0, 3).fill_(-100);
    cases.push_back({"gpt2 full", m, b});
  }
  for (std::string type : {"roberta", "bert"}) {  // encoders: full, and a restricted set
    model::CausalLM m = test::random_encoder(
        test::encoder_json(type, type == "bert" ? "BertForSequenceClassification"
                                                : "RobertaForSequenceClassification"),
        11);
    model::PeftOptions o;
    o.kind = model::PeftKind::kFull;
    o.targets = type == "roberta" ? std::vector<std::string>{"all"}
                                  : std::vector<std::string>{"query", "dense", "classifier"};
    model::apply_peft(m, o, 3);
    lm::LmBatch b = lm::collate(test::encoder_grad_set(type == "bert"), {0, 1, 2, 3},
                                type == "roberta" ? 1 : 0);
    cases.push_back({type + (type == "roberta" ? " full" : " restricted"), m, b});
  }
  for (auto& c : cases) {
    INFO(c.what);
    auto [ref, ref_losses] = grad::reference_per_sample_grads(c.m, c.b);
    REQUIRE(ref.abs().sum().item<double>() > 0);
    const int64_t p = ref.size(1), k = 6;
    Tensor P = random_orthonormal(p, k, 5);
    project::Subspace sub;
    sub.P = P;
    sub.params = project::param_entries(model::trainable_parameters(c.m));
    Tensor want = ref.to(torch::kFloat64).mm(P.to(torch::kFloat64));  // (B, k)
    grad::PerSampleGrads psg(c.m);
    REQUIRE(psg.dim() == p);
    psg.compute(c.b);
    for (double chunk_mb : {256.0, 1e-4}) {  // one chunk; one sample at a time
      INFO("chunk_mb " << chunk_mb);
      CHECK(subspace_rel_err(psg.project(sub.blocks(), chunk_mb), want) < 1e-5);
    }
    // bfloat16 storage of P: float32 accumulation of the stored values.
    project::Subspace sb = sub;
    sb.P = P.to(torch::kBFloat16);
    Tensor want_b = ref.to(torch::kFloat64).mm(sb.P.to(torch::kFloat64));
    CHECK(subspace_rel_err(psg.project(sb.blocks()), want_b) < 1e-5);
    // After sq_norms() materialised some parameters, the same answer.
    psg.sq_norms();
    CHECK(subspace_rel_err(psg.project(sub.blocks()), want) < 1e-5);
  }
}

TEST_CASE("subspace memory: roberta-base at k = 64 in float32 does not fit 24 GB; the ways out do",
          "[subspace]") {
  const int64_t d = 124645632;  // roberta-base's parameters
  const double f32 = project::subspace_memory_mb(d, 64, torch::kFloat32, 256);
  CHECK(f32 == Approx(d * 64.0 * 4 / (1 << 20) + d * 8.0 / (1 << 20) + 256));
  CHECK_THROWS_WITH(project::check_subspace_memory(f32, 24000, d, 64, torch::kFloat32),
                    Catch::Contains("method.storage: bfloat16"));
  const double bf16 = project::subspace_memory_mb(d, 64, torch::kBFloat16, 256);
  CHECK(bf16 < 0.51 * f32 + 1024);
  CHECK_NOTHROW(project::check_subspace_memory(bf16, 24000, d, 64, torch::kBFloat16));
  CHECK_NOTHROW(project::check_subspace_memory(f32, 0, d, 64, torch::kFloat32));  // unknown
}
