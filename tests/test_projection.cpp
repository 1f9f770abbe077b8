// Projection arithmetic of PE-SGD and its baselines (core/project) against slow, obvious
// references on small random matrices: the coefficient solve, per-column normalisation and
// clipping, each noise placement (noise replayed from the same seed), InPro, PDP-SGD and GEP
// (bases from a full SVD), SampleSelection's distribution, and the exactness property: with
// sigma = 0 and G spanning H the projected gradient is the mean private gradient.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "core/eval/grad_diagnostics.hpp"
#include "core/privacy/accountant.hpp"
#include "core/project/projection.hpp"
#include "core/util/error.hpp"
#include "mechanism_util.hpp"
#include "projection_modes.hpp"

using namespace dpft;
using torch::Tensor;

using namespace dpft::test_modes;

namespace {

Tensor rnd(int64_t n, int64_t p, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randn({n, p});
}

double rel_err(const Tensor& a, const Tensor& b) {
  Tensor x = a.to(torch::kFloat64), y = b.to(torch::kFloat64);
  return (x - y).norm().item<double>() / std::max(1e-30, y.norm().item<double>());
}

// Z by an explicit inverse in float64 (the reference only; the code under test never inverts).
Tensor ref_Z(const Tensor& Gs, const Tensor& Hs, double eta) {
  Tensor G = Gs.to(torch::kFloat64).t(), H = Hs.to(torch::kFloat64).t();  // (p, N), (p, M)
  Tensor A = G.t().matmul(G) + eta * torch::eye(G.size(1), torch::kFloat64);
  return torch::inverse(A).matmul(G.t().matmul(H));
}

// Columns scaled one by one with scalar loops.
Tensor ref_scale(const Tensor& X, const std::string& how, double C) {
  Tensor Y = X.to(torch::kFloat64).clone();
  for (int64_t j = 0; j < Y.size(1); ++j) {
    double n = 0;
    for (int64_t i = 0; i < Y.size(0); ++i) n += std::pow(Y[i][j].item<double>(), 2);
    n = std::sqrt(n);
    double f = how == "normalize" ? (n > 0 ? 1 / n : 0) : std::min(1.0, C / n);
    for (int64_t i = 0; i < Y.size(0); ++i) Y[i][j] = Y[i][j].item<double>() * f;
  }
  return Y;
}

Tensor projector(const Tensor& E) {
  Tensor e = E.to(torch::kFloat64);
  return e.matmul(e.t());
}

}  // namespace

TEST_CASE("GramSolver solves (G^T G + eta I) Z = G^T H like an explicit inverse", "[projection]") {
  Tensor Gs = rnd(12, 40, 1), Hs = rnd(5, 40, 2);
  for (double eta : {1e-6, 0.5}) {
    project::GramSolver s(Gs, eta);
    Tensor Z = s.solve(project::gram_f64(Gs, Hs));
    CHECK(rel_err(Z, ref_Z(Gs, Hs, eta)) < 1e-9);
    CHECK_FALSE(s.used_eigen_fallback());
  }
  // Duplicate rows and eta = 0: Cholesky fails, the eigen fallback reports the singularity.
  Tensor dup = torch::cat({Gs, Gs.narrow(0, 0, 1)});
  CHECK_THROWS_WITH(project::GramSolver(dup, 0.0), Catch::Contains("singular (rank 12 of 13)"));
  // A row equal to another up to 1e-9 is singular to working precision whatever the BLAS rounds:
  // the decision is relative (10 n eps), not whether Cholesky happened to fail.
  Tensor near = torch::cat({Gs, Gs.narrow(0, 0, 1) + 1e-9 * rnd(1, 40, 3)});
  CHECK_THROWS_WITH(project::GramSolver(near, 0.0), Catch::Contains("singular"));
  project::GramSolver s2(dup, 1e-6);
  Tensor x = s2.solve(project::gram_f64(dup, Hs));
  CHECK(x.isfinite().all().item<bool>());
}

TEST_CASE("scale_columns normalises or clips each column", "[projection]") {
  Tensor X = rnd(6, 9, 3) * torch::linspace(0.1, 3, 9).unsqueeze(0);
  X.select(1, 4).zero_();
  CHECK(rel_err(project::scale_columns(X, scaling("normalize"), 0), ref_scale(X, "normalize", 0)) <
        1e-6);
  CHECK(rel_err(project::scale_columns(X, scaling("clip"), 1.0), ref_scale(X, "clip", 1.0)) < 1e-6);
  Tensor n = project::scale_columns(X, scaling("normalize"), 0).norm(2, {0});
  CHECK(n[4].item<double>() == 0);
  CHECK(n[0].item<double>() == Approx(1).epsilon(1e-6));
  CHECK(project::column_bound(scaling("clip"), 0.5) == 0.5);
  CHECK(project::column_bound(scaling("normalize"), 0.5) == 1.0);
}

// Share of the columns of X (double) whose norm exceeds bound, counted one column at a time.
double ref_clipped(const Tensor& X, double bound) {
  int64_t n = 0;
  for (int64_t j = 0; j < X.size(1); ++j) n += X.select(1, j).norm().item<double>() > bound;
  return X.size(1) > 0 ? static_cast<double>(n) / static_cast<double>(X.size(1)) : 0.0;
}

TEST_CASE("clipped_fraction counts the columns above the bound", "[projection]") {
  project::ProjectionResult r;
  CHECK(project::clipped_fraction(r) == 0);  // no columns (empty batch)
  r.noised_norms = torch::tensor({0.5f, 1.5f, 2.0f, 0.1f});
  r.norm_bound = 1.0;
  CHECK(project::clipped_fraction(r) == 0.5);
  r.norm_bound = 2.0;  // a norm equal to the bound is not scaled
  CHECK(project::clipped_fraction(r) == 0.0);
  r.norm_bound = 0.05;
  CHECK(project::clipped_fraction(r) == 1.0);
}

TEST_CASE("pe_project: every noise placement matches the slow reference", "[projection]") {
  const int64_t N = 8, M = 5, p = 30;
  Tensor Gs = rnd(N, p, 4), Hs = rnd(M, p, 5);
  const double eta = 1e-6, sigma = 0.7, div = 4.0;
  project::GramSolver solver(Gs, eta);
  Tensor G = Gs.to(torch::kFloat64).t(), H = Hs.to(torch::kFloat64).t();
  Tensor Ainv = torch::inverse(G.t().matmul(G) + eta * torch::eye(N, torch::kFloat64));
  for (std::string sens : {"normalize", "clip"}) {
    const double C = 0.3, bound = sens == "clip" ? C : 1.0;
    project::NoiseOptions o{sigma, scaling(sens), C, div};
    SECTION("coefficients / " + sens) {
      auto ns = test::test_sum(9, sigma);
      auto ref = test::reference_stream(9, "noise");
      auto r = project::pe_project(Gs, Hs, solver, place("coefficients"), o, ns);
      Tensor Z = Ainv.matmul(G.t().matmul(H));
      Tensor signal = ref_scale(Z, sens, C).sum(1),
             n = ref->normal({N}, sigma * bound, torch::kFloat64);
      Tensor z = signal + n;
      CHECK(rel_err(r.z, z) < 1e-5);
      CHECK(r.signal_norm == Approx(signal.norm().item<double>()).epsilon(1e-6));
      CHECK(r.noise_norm == Approx(n.norm().item<double>()).epsilon(1e-9));
      CHECK(rel_err(r.direction, G.matmul(z) / div) < 1e-5);
      CHECK(rel_err(r.noised_norms, Z.norm(2, {0})) < 1e-5);
      CHECK(r.norm_bound == bound);
      CHECK(project::clipped_fraction(r) == ref_clipped(Z, bound));
    }
    SECTION("inner_product / " + sens) {
      auto ns = test::test_sum(9, sigma);
      auto ref = test::reference_stream(9, "noise");
      auto r = project::pe_project(Gs, Hs, solver, place("inner_product"), o, ns);
      Tensor A = G.t().matmul(H);
      Tensor a = ref_scale(A, sens, C).sum(1) + ref->normal({N}, sigma * bound, torch::kFloat64);
      Tensor z = Ainv.matmul(a);
      CHECK(rel_err(r.z, z) < 1e-5);
      CHECK(rel_err(r.direction, G.matmul(z) / div) < 1e-5);
      CHECK(rel_err(r.noised_norms, A.norm(2, {0})) < 1e-5);
      CHECK(r.norm_bound == bound);
      CHECK(project::clipped_fraction(r) == ref_clipped(A, bound));
    }
    SECTION("private_gradient / " + sens) {
      auto ns = test::test_sum(9, sigma);
      auto ref = test::reference_stream(9, "noise");
      auto r = project::pe_project(Gs, Hs, solver, place("private_gradient"), o, ns);
      Tensor h = ref_scale(H, sens, C).sum(1) +
                 ref->normal({p}, sigma * bound, torch::kFloat32).to(torch::kFloat64);
      Tensor z = Ainv.matmul(G.t().matmul(h));
      CHECK(rel_err(r.z, z) < 1e-5);
      CHECK(rel_err(r.direction, G.matmul(z) / div) < 1e-5);
      CHECK(rel_err(r.noised_norms, H.norm(2, {0})) < 1e-5);
      CHECK(r.norm_bound == bound);
      CHECK(project::clipped_fraction(r) == ref_clipped(H, bound));
    }
  }
  CHECK_THROWS_AS(place("gradient"),
                  ConfigError);  // parsed once: an unknown placement never reaches the maths
}

TEST_CASE("pe_project with an empty batch releases pure noise", "[projection]") {
  Tensor Gs = rnd(6, 20, 6), Hs = torch::zeros({0, 20});
  project::GramSolver solver(Gs, 1e-6);
  auto ns = test::test_sum(3, 2.0);
  auto ref = test::reference_stream(3, "noise");
  auto r = project::pe_project(Gs, Hs, solver, place("coefficients"),
                               {2.0, scaling("normalize"), 1, 16}, ns);
  Tensor z = ref->normal({6}, 2.0, torch::kFloat64);
  CHECK(rel_err(r.z, z) < 1e-6);
  CHECK(r.noised_norms.numel() == 0);
}

TEST_CASE("every projection releases pure noise on an empty batch", "[projection]") {
  const int64_t N = 6, p = 20;
  Tensor Gs = rnd(N, p, 16), Hs = torch::zeros({0, p});
  project::GramSolver solver(Gs, 1e-6);
  Tensor G = Gs.to(torch::kFloat64).t();  // (p, N)
  Tensor A = G.t().matmul(G) + 1e-6 * torch::eye(N, torch::kFloat64);
  Tensor E = project::top_basis(Gs, 3);  // (p, 3)
  const double div = 4.0;
  for (std::string pl : {"coefficients", "inner_product", "private_gradient"}) {
    INFO(pl);
    auto ns = test::test_sum(3, 2.0);
    auto ref = test::reference_stream(3, "noise");
    auto r = project::pe_project(Gs, Hs, solver, place(pl), {2.0, scaling("clip"), 0.5, div}, ns);
    Tensor want;
    if (pl == "coefficients") want = G.matmul(ref->normal({N}, 1.0, torch::kFloat64));
    if (pl == "inner_product")
      want = G.matmul(torch::inverse(A).matmul(ref->normal({N}, 1.0, torch::kFloat64)));
    if (pl == "private_gradient")
      want = G.matmul(torch::inverse(A).matmul(
          G.t().matmul(ref->normal({p}, 1.0, torch::kFloat32).to(torch::kFloat64))));
    CHECK(rel_err(r.direction, want / div) < 1e-5);
    CHECK(r.noise_std == 1.0);
  }
  auto ns = test::test_sum(4, 1.5);
  auto ref = test::reference_stream(4, "noise");
  auto in = project::inpro_project(Gs, Hs, {1.5, scaling("normalize"), 1, div}, ns);
  CHECK(rel_err(in.direction, G.matmul(ref->normal({N}, 1.5, torch::kFloat64)) / div) < 1e-5);
  auto pdp = project::pdp_project(E, Hs, {1.5, scaling("clip"), 2.0, div}, ns);
  Tensor E64 = E.to(torch::kFloat64);
  CHECK(rel_err(pdp.direction, E64.matmul(E64.t().matmul(
                                   ref->normal({p}, 3.0, torch::kFloat32).to(torch::kFloat64))) /
                                   div) < 1e-5);
  auto gep = project::gep_project(E, Hs, {1.0, 0.2, true}, {1.5, scaling("clip"), 1.0, div}, ns);
  Tensor c = ref->normal({3}, 1.5 * std::sqrt(2.0), torch::kFloat32).to(torch::kFloat64);
  Tensor res = ref->normal({p}, 1.5 * std::sqrt(2.0) * 0.2, torch::kFloat32).to(torch::kFloat64);
  CHECK(rel_err(gep.direction, (E64.matmul(c) + res) / div) < 1e-5);
  CHECK(gep.noise_std_residual == Approx(1.5 * std::sqrt(2.0) * 0.2));
}

TEST_CASE("a private example with a NaN or Inf gradient contributes nothing to any projection",
          "[projection]") {
  const int64_t p = 20;
  Tensor Gs = rnd(6, p, 21), Hs = rnd(3, p, 22);
  Tensor nan_row = rnd(1, p, 23), inf_row = rnd(1, p, 24);
  nan_row[0][4] = std::nan("");
  inf_row[0][7] = std::numeric_limits<float>::infinity();
  Tensor Hb = torch::cat({Hs.narrow(0, 0, 1), nan_row, Hs.narrow(0, 1, 2), inf_row});  // (5, p)
  project::GramSolver solver(Gs, 1e-6);
  Tensor E = project::top_basis(Gs, 3);
  auto same =
      [&](const std::function<project::ProjectionResult(const Tensor&, privacy::GaussianSum&)>& f) {
        auto a = test::test_sum(9, 0.5), b = test::test_sum(9, 0.5);
        auto clean = f(Hs, a), dirty = f(Hb, b);
        REQUIRE(torch::isfinite(dirty.direction).all().item<bool>());
        CHECK(rel_err(dirty.direction, clean.direction) < 1e-6);
      };
  for (std::string pl : {"coefficients", "inner_product", "private_gradient"})
    for (std::string sens : {"normalize", "clip"}) {
      INFO(pl << " " << sens);
      same([&](const Tensor& H, privacy::GaussianSum& ns) {
        return project::pe_project(Gs, H, solver, place(pl), {0.5, scaling(sens), 0.3, 3.0}, ns);
      });
    }
  same([&](const Tensor& H, privacy::GaussianSum& ns) {
    return project::inpro_project(Gs, H, {0.5, scaling("normalize"), 1, 3.0}, ns);
  });
  same([&](const Tensor& H, privacy::GaussianSum& ns) {
    return project::pdp_project(E, H, {0.5, scaling("clip"), 0.3, 3.0}, ns);
  });
  same([&](const Tensor& H, privacy::GaussianSum& ns) {
    return project::gep_project(E, H, {0.3, 0.1, true}, {0.5, scaling("clip"), 0.3, 3.0}, ns);
  });
}

TEST_CASE("With sigma 0 and G spanning H, the projection is the mean private gradient",
          "[projection]") {
  Tensor Hs = rnd(5, 50, 7);
  Tensor Gs = torch::cat({rnd(3, 50, 8), Hs, rnd(4, 50, 9)});  // D contains the private samples
  project::GramSolver solver(Gs, 1e-6);
  auto ns = test::test_sum(0, 0.0);
  project::NoiseOptions o{0.0, scaling("clip"), 1e30, 5.0};  // no scaling, no noise, divide by |B|
  for (std::string placement : {"coefficients", "inner_product", "private_gradient"}) {
    auto r = project::pe_project(Gs, Hs, solver, place(placement), o, ns);
    INFO(placement);
    CHECK(rel_err(r.direction, Hs.mean(0)) < 1e-5);
  }
}

TEST_CASE("inpro_project: G (sum of normalised G^T H columns + noise) / divisor", "[projection]") {
  Tensor Gs = rnd(7, 25, 10), Hs = rnd(4, 25, 11);
  auto ns = test::test_sum(5, 1.3);
  auto ref = test::reference_stream(5, "noise");
  auto r = project::inpro_project(Gs, Hs, {1.3, scaling("normalize"), 1, 3.0}, ns);
  Tensor G = Gs.to(torch::kFloat64).t();
  Tensor a = ref_scale(G.t().matmul(Hs.to(torch::kFloat64).t()), "normalize", 0).sum(1) +
             ref->normal({7}, 1.3, torch::kFloat64);
  CHECK(rel_err(r.direction, G.matmul(a) / 3.0) < 1e-5);
}

TEST_CASE("top_basis and power_basis span the top-k singular subspace of G", "[projection]") {
  // G with a clear spectral gap: singular values 10, 9, ..., then 0.1.
  const int64_t N = 10, p = 40, k = 4;
  torch::manual_seed(12);
  Tensor U = std::get<0>(torch::linalg_qr(torch::randn({N, N}, torch::kFloat64)));
  Tensor V = std::get<0>(torch::linalg_qr(torch::randn({p, N}, torch::kFloat64)));
  Tensor s = torch::tensor({10., 9., 8., 7., 0.1, 0.1, 0.1, 0.1, 0.1, 0.1}, torch::kFloat64);
  Tensor Gs = (U * s).matmul(V.t()).to(torch::kFloat32);  // (N, p), right singular vectors V
  Tensor P = projector(V.narrow(1, 0, k));
  Tensor E1 = project::top_basis(Gs, k), E2 = project::power_basis(Gs, k, 30, 77);
  CHECK(E1.size(1) == k);
  CHECK(rel_err(projector(E1), P) < 1e-5);
  CHECK(rel_err(projector(E2), P) < 1e-5);
  CHECK(rel_err(E2.t().matmul(E2), torch::eye(k)) < 1e-5);  // orthonormal
  // Rank-deficient G: only the non-zero directions come back.
  Tensor low = torch::cat({Gs.narrow(0, 0, 2), Gs.narrow(0, 0, 2) * 2});
  CHECK(project::top_basis(low, 5).size(1) == 2);
}

TEST_CASE("top_basis stays orthonormal when G is ill-conditioned", "[projection]") {
  // Singular values from 1 down to 2e-4 (eigenvalues of G G^T down to 4e-8 of the largest, all
  // kept): the small directions are where a float32 rounding of the eigenvectors, or their
  // inaccuracy, shows up as E^T E != I.
  const int64_t N = 12, p = 300;
  torch::manual_seed(31);
  Tensor U = std::get<0>(torch::linalg_qr(torch::randn({N, N}, torch::kFloat64)));
  Tensor V = std::get<0>(torch::linalg_qr(torch::randn({p, N}, torch::kFloat64)));
  Tensor s = torch::logspace(0, std::log10(2e-4), N, 10, torch::kFloat64);
  Tensor Gs = (U * s).matmul(V.t()).to(torch::kFloat32);  // (N, p)
  Tensor E = project::top_basis(Gs, N);                   // (p, N)
  REQUIRE(E.size(1) == N);
  Tensor e = E.to(torch::kFloat64);
  CHECK((e.t().matmul(e) - torch::eye(N, torch::kFloat64)).abs().max().item<double>() < 1e-5);
  // E spans the rows of Gs: G E E^T = G.
  Tensor G = Gs.to(torch::kFloat64);
  CHECK(rel_err(G.matmul(e).matmul(e.t()), G) < 1e-5);
  // Below 1e-8 of the largest eigenvalue a direction is dropped.
  Tensor s2 = torch::tensor({1.0, 0.5, 1e-5, 1e-6}, torch::kFloat64);
  Tensor U4 = std::get<0>(torch::linalg_qr(torch::randn({4, 4}, torch::kFloat64)));
  Tensor G2 = (U4 * s2).matmul(V.narrow(1, 0, 4).t());  // (4, p), singular values s2
  CHECK(project::top_basis(G2.to(torch::kFloat32), 4).size(1) == 2);
}

TEST_CASE("pdp_project and gep_project match loops over the samples", "[projection]") {
  const int64_t p = 30, M = 6, k = 3;
  Tensor E = std::get<0>(torch::linalg_qr(rnd(p, k, 13)));  // orthonormal (p, k)
  Tensor Hs = rnd(M, p, 14) * 0.5;
  const double sigma = 0.9, C = 1.0, div = 5.0;
  Tensor Ed = E.to(torch::kFloat64);
  SECTION("pdp") {
    auto ns = test::test_sum(2, sigma);
    auto ref = test::reference_stream(2, "noise");
    auto r = project::pdp_project(E, Hs, {sigma, scaling("clip"), C, div}, ns);
    Tensor h = torch::zeros({p}, torch::kFloat64);
    for (int64_t j = 0; j < M; ++j) {
      Tensor g = Hs[j].to(torch::kFloat64);
      h += g * std::min(1.0, C / g.norm().item<double>());
    }
    h += ref->normal({p}, sigma * C, torch::kFloat32).to(torch::kFloat64);
    CHECK(rel_err(r.direction, Ed.matmul(Ed.t().matmul(h)) / div) < 1e-5);
    CHECK(r.norm_bound == C);
    CHECK(project::clipped_fraction(r) == ref_clipped(Hs.t().to(torch::kFloat64), C));
  }
  SECTION("gep with and without residual") {
    for (bool residual : {true, false}) {
      project::GepOptions g{1.0, 0.2, residual};
      auto ns = test::test_sum(4, sigma);
      auto ref = test::reference_stream(4, "noise");
      auto r = project::gep_project(E, Hs, g, {sigma, scaling("clip"), C, div}, ns);
      auto [sc, sr] = project::gep_noise_stds(g, sigma);
      Tensor c = torch::zeros({k}, torch::kFloat64), res = torch::zeros({p}, torch::kFloat64);
      for (int64_t j = 0; j < M; ++j) {
        Tensor h = Hs[j].to(torch::kFloat64);
        Tensor cj = Ed.t().matmul(h), rj = h - Ed.matmul(cj);
        c += cj * std::min(1.0, g.coef_clip / cj.norm().item<double>());
        res += rj * std::min(1.0, g.residual_clip / rj.norm().item<double>());
      }
      c += ref->normal({k}, sc, torch::kFloat32).to(torch::kFloat64);
      Tensor dir = Ed.matmul(c);
      if (residual) dir += res + ref->normal({p}, sr, torch::kFloat32).to(torch::kFloat64);
      INFO("residual " << residual);
      CHECK(rel_err(r.direction, dir / div) < 1e-5);
      CHECK(r.norm_bound == g.coef_clip);  // the coefficients' clip (the noise is added there)
      CHECK(project::clipped_fraction(r) ==
            ref_clipped(Ed.t().matmul(Hs.t().to(torch::kFloat64)), g.coef_clip));
    }
  }
}

TEST_CASE("GEP's noise split is one Gaussian mechanism of multiplier sigma",
          "[projection][privacy]") {
  // Stacking [c / C1; r / C2] has l2 sensitivity sqrt(2); per-coordinate noise std there is
  // std_c / C1 = std_r / C2, so the effective multiplier is that std / sqrt(2).
  for (double sigma : {0.5, 1.7, 4.0}) {
    project::GepOptions g{1.0, 0.2, true};
    auto [sc, sr] = project::gep_noise_stds(g, sigma);
    CHECK(sc / g.coef_clip == Approx(sr / g.residual_clip));
    CHECK(sc / g.coef_clip / std::sqrt(2.0) == Approx(sigma));
    g.residual = false;
    CHECK(project::gep_noise_stds(g, sigma).first == Approx(sigma * g.coef_clip));
  }
  // Accounted as two releases, the parts are Gaussian mechanisms of multiplier
  // std_i / C_i = sigma sqrt(2) each. Without subsampling the pair composes exactly to one
  // release of multiplier sigma (RDP alpha / (2 sigma^2) = 2 alpha / (4 sigma^2)). With Poisson
  // subsampling both parts read the same batch, so they are one subsampled mechanism of
  // multiplier sigma, which the ledger records; composing them as two separately subsampled
  // releases would assume independent batches and understate epsilon.
  const double sigma = 1.3;
  auto [sc, sr] = project::gep_noise_stds({1.0, 0.2, true}, sigma);
  const double part = sc / 1.0;
  REQUIRE(sr / 0.2 == Approx(part));
  auto rdp = privacy::make_accountant("rdp");
  const double joint1 = rdp->epsilon({{sigma, 1.0, 10}}, 1e-5).epsilon,
               pair1 = rdp->epsilon({{part, 1.0, 20}}, 1e-5).epsilon;
  CHECK(pair1 == Approx(joint1).epsilon(1e-9));
  auto prv = privacy::make_accountant("prv");
  const double joint = prv->epsilon({{sigma, 0.2, 10}}, 1e-5).epsilon,
               pair = prv->epsilon({{part, 0.2, 20}}, 1e-5).epsilon;
  CHECK(pair < joint);  // the separate accounting would be optimistic: not what we record
}

TEST_CASE("sample_selection draws distinct indices with probability softmax(|z|)",
          "[projection][statistical]") {
  Tensor z = torch::tensor({0.0, -1.0, 2.0, 0.5});
  std::vector<double> w;
  for (double v : {0.0, 1.0, 2.0, 0.5}) w.push_back(std::exp(v));
  double W = w[0] + w[1] + w[2] + w[3];
  // count = 2: exact inclusion probabilities of sequential sampling without replacement.
  std::vector<double> incl(4, 0.0);
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b)
      if (a != b) {
        double pr = w[a] / W * w[b] / (W - w[a]);
        incl[a] += pr, incl[b] += pr;
      }
  const int trials = 20000;
  std::vector<int> hits(4, 0), first(4, 0);
  for (int t = 0; t < trials; ++t) {
    auto s = project::sample_selection(z, 2, 1000 + t);
    REQUIRE(s.size() == 2);
    REQUIRE(s[0] != s[1]);
    ++first[s[0]];
    for (auto i : s) ++hits[i];
  }
  // Chi-square goodness of fit of the first draw (3 dof; 99.9% quantile 16.27) and binomial
  // z-scores of inclusion (|z| < 4.5).
  double chi2 = 0;
  for (int i = 0; i < 4; ++i) {
    double e = trials * w[i] / W;
    chi2 += std::pow(first[i] - e, 2) / e;
    double sd = std::sqrt(trials * incl[i] * (1 - incl[i]));
    CHECK(std::abs(hits[i] - trials * incl[i]) < 4.5 * sd);
  }
  CHECK(chi2 < 16.27);
  CHECK(project::sample_selection(z, 4, 1).size() == 4);
  CHECK_THROWS(project::sample_selection(z, 5, 1));
}

TEST_CASE("principal angles and overlap of subspaces", "[projection]") {
  Tensor I = torch::eye(5, torch::kFloat64);
  Tensor A = I.narrow(1, 0, 2), B = I.narrow(1, 1, 2);  // share e1, e0 vs e2 orthogonal
  Tensor ang = eval::principal_angles_deg(A, B);
  CHECK(ang[0].item<double>() == Approx(0).margin(1e-6));
  CHECK(ang[1].item<double>() == Approx(90).margin(1e-6));
  CHECK(eval::subspace_overlap(A, B) == Approx(1.0));
  CHECK(eval::subspace_overlap(A, A) == Approx(2.0));
}

TEST_CASE("projection diagnostics equal their closed forms on constructed subspaces",
          "[projection]") {
  // Private gradients H span {e0, e1} (distinct strengths); synthetic G span the plane rotated
  // by theta = 30 deg (e0 -> e2) and phi = 60 deg (e1 -> e3). Then the principal angles between
  // the top-2 bases are 30 and 60 degrees and overlap_g_h = cos^2 30 + cos^2 60 = 1.
  const double th = M_PI / 6, ph = M_PI / 3;
  Tensor e = torch::eye(6, torch::kFloat64);
  Tensor g0 = std::cos(th) * e[0] + std::sin(th) * e[2], g1 = std::cos(ph) * e[1] + std::sin(ph) * e[3];
  Tensor Hs = torch::stack({3 * e[0], 2 * e[1], -3 * e[0], 1 * e[1]}).to(torch::kFloat32);
  Tensor Gs = torch::stack({2 * g0, 1 * g1, -1 * g1}).to(torch::kFloat32);
  // Direction (1, 1, 0...) against the mean of H, (0, 0.75, 0...): l2 = sqrt(1 + 0.0625),
  // cosine = 0.75 / (sqrt 2 * 0.75).
  Tensor dir = (e[0] + e[1]).to(torch::kFloat32);
  Tensor norms = torch::tensor({1.0, 2.0, 3.0, 6.0});  // mean 3, sample std sqrt(14/3)
  eval::ProjectionDiagnostics diag(2);
  nlohmann::json j = diag.record({Gs, Hs, dir, norms, 4.0, 1.0, 0});
  CHECK(j["overlap_g_h"].get<double>() == Approx(std::pow(std::cos(th), 2) + std::pow(std::cos(ph), 2)).epsilon(1e-5));
  CHECK(j["l2"].get<double>() == Approx(std::sqrt(1.0625)).epsilon(1e-6));
  CHECK(j["cosine"].get<double>() == Approx(1 / std::sqrt(2.0)).epsilon(1e-6));
  CHECK(j["noise_to_signal"].get<double>() == Approx(0.25));
  CHECK(j["norm_std_over_mean"].get<double>() == Approx(std::sqrt(14.0 / 3) / 3).epsilon(1e-9));
  CHECK(j["norm_min_over_max"].get<double>() == Approx(1.0 / 6));
  // The next step's private subspace is the synthetic one: its angles to step 0's are 30, 60.
  nlohmann::json k = diag.record({Gs, Gs, dir, norms, 4.0, 1.0, 1});
  std::vector<double> ang = k["principal_angles_deg"].get<std::vector<double>>();
  REQUIRE(ang.size() == 2);
  CHECK(ang[0] == Approx(30).epsilon(1e-4));
  CHECK(ang[1] == Approx(60).epsilon(1e-4));
  CHECK(k["principal_angle_mean_deg"].get<double>() == Approx(45).epsilon(1e-4));
  CHECK(diag.summary()["principal_angle_mean_deg"].get<double>() == Approx(45).epsilon(1e-4));
  CHECK(k["overlap_g_h"].get<double>() == Approx(2.0).epsilon(1e-5));  // G against itself
}
