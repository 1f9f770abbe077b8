#include "core/project/projection.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "core/util/error.hpp"
#include "core/util/shape.hpp"

namespace dpft::project {

using torch::Tensor;

namespace {

constexpr int64_t kChunk = 1 << 16;  // columns per float64 block of gram_f64
// top_basis keeps eigen-directions of G G^T above this fraction of the largest eigenvalue
// (singular values above 1e-4 of the largest): below it, float64 eigenvectors of a float32
// matrix's Gram are too inaccurate to give a basis vector.
constexpr double kBasisRelEig = 1e-8;

Tensor col_norms(const Tensor& X) {  // X: (n, M) -> (M)
  return X.numel() == 0 ? torch::zeros({X.size(1)}, X.options()) : X.norm(2, {0});
}

Tensor row_norms(const Tensor& X) {  // X: (M, p) -> (M)
  return X.size(0) == 0 ? torch::zeros({0}, X.options()) : X.norm(2, {1});
}

void check_rows(const Tensor& Gs, const Tensor& Hs) {
  DPFT_CHECK(Gs.dim() == 2 && Hs.dim() == 2 && Gs.size(1) == Hs.size(1),
             "projection: G {} and H {} must be (N, p) and (M, p)", shape_str(Gs.sizes()),
             shape_str(Hs.sizes()));
}

// The release of `sum` (per-unit L2 bound `bound`) through the mechanism: sum + N(0, (sigma
// bound)^2 I), recording both norms in r (diagnostics).
Tensor release_sum(privacy::GaussianSum& mechanism, const Tensor& sum, double bound,
                   ProjectionResult& r) {
  r.signal_norm = sum.norm().item<double>();
  std::vector<Tensor> v{sum};
  r.noise_norm = mechanism.release(v, bound);
  return v[0];
}

void check_sigma(const privacy::GaussianSum& mechanism, const NoiseOptions& o) {
  DPFT_CHECK(mechanism.sigma() == o.sigma, "projection: the mechanism's sigma {} is not {}",
             mechanism.sigma(), o.sigma);
}

}  // namespace

Tensor gram_f64(const Tensor& A, const Tensor& B) {
  DPFT_CHECK(A.dim() == 2 && B.dim() == 2 && A.size(1) == B.size(1), "gram_f64: {} x {}",
             shape_str(A.sizes()), shape_str(B.sizes()));
  auto opts = torch::TensorOptions().dtype(torch::kFloat64).device(A.device());
  Tensor out = torch::zeros({A.size(0), B.size(0)}, opts);
  const int64_t p = A.size(1);
  for (int64_t s = 0; s < p; s += kChunk) {
    int64_t len = std::min(kChunk, p - s);
    out.addmm_(A.narrow(1, s, len).to(torch::kFloat64),
               B.narrow(1, s, len).to(torch::kFloat64).t());
  }
  return out;
}

GramSolver::GramSolver(const Tensor& Gs, double eta) : eta_(eta) {
  DPFT_CHECK(Gs.dim() == 2, "GramSolver: G must be (N, p), got {}", shape_str(Gs.sizes()));
  DPFT_CHECK(eta >= 0 && std::isfinite(eta), "GramSolver: eta must be finite and >= 0, got {}",
             eta);
  gram_ = gram_f64(Gs, Gs);
  const int64_t n = gram_.size(0);
  Tensor reg = gram_ + eta * torch::eye(n, gram_.options());
  // Whether G G^T + eta I counts as singular must not depend on the BLAS's rounding: a rank-
  // deficient Gram matrix can factor with a pivot of 1e-16 (MKL) or fail to (OpenBLAS). So an
  // eigenvalue (or a squared Cholesky pivot, an upper bound on the smallest eigenvalue's scale)
  // below rtol times the largest diagonal entry counts as zero.
  const double scale = n > 0 ? reg.diagonal().max().item<double>() : 0.0;
  const double rtol =
      10.0 * static_cast<double>(std::max<int64_t>(n, 1)) * std::numeric_limits<double>::epsilon();
  auto [L, info] = torch::linalg_cholesky_ex(reg);
  if (n == 0 ||
      (info.item<int64_t>() == 0 && L.diagonal().pow(2).min().item<double>() > rtol * scale)) {
    chol_ = L;
  } else {  // singular or nearly so (e.g. eta = 0 and duplicate rows): eigen-solve
    eig_ = true;
    auto [w, V] = torch::linalg_eigh(gram_);
    const double wmax = w.max().item<double>();
    Tensor wc = torch::where(w > rtol * std::max(wmax, 0.0), w, torch::zeros_like(w));
    evals_ = wc + eta;
    DPFT_CHECK_AS(RuntimeError, evals_.min().item<double>() > 0,
                  "projection: G^T G is singular (rank {} of {}) and eta is 0; set eta > 0",
                  (wc > 0).sum().item<int64_t>(), n);
    evecs_ = V;
  }
}

Tensor GramSolver::solve(const Tensor& rhs) const {
  Tensor r = rhs.to(torch::kFloat64);
  bool vec = r.dim() == 1;
  if (vec) r = r.unsqueeze(1);
  DPFT_CHECK(r.size(0) == gram_.size(0), "GramSolver: rhs has {} rows, G^T G is {}", r.size(0),
             gram_.size(0));
  Tensor x = eig_ ? evecs_.matmul(evecs_.t().matmul(r) / evals_.unsqueeze(1))
                  : torch::cholesky_solve(r, chol_);
  return vec ? x.squeeze(1) : x;
}

double column_bound(ColumnScaling scaling, double C) {
  if (scaling == ColumnScaling::kUnitNorm) return 1.0;
  DPFT_CHECK(C > 0, "clip bound must be > 0, got {}", C);
  return C;
}

Tensor scale_columns(const Tensor& X, ColumnScaling scaling, double C) {
  Tensor n = col_norms(X);
  Tensor ok = torch::isfinite(n);
  if (!ok.all().item<bool>()) {
    // A column that is not finite (one private example's NaN or Inf gradient) contributes 0:
    // scaling it by 0 would keep the NaN (0 * NaN = NaN) and let one example decide the whole
    // release. 0 is within the bound, so the sensitivity is unchanged.
    return scale_columns(X.masked_fill(ok.logical_not().unsqueeze(0), 0), scaling, C);
  }
  Tensor w;
  if (scaling == ColumnScaling::kUnitNorm)
    w = torch::where(n > 0, 1.0 / n, torch::zeros_like(n));
  else
    w = (column_bound(scaling, C) / n.clamp_min(1e-300)).clamp_max(1.0);
  return X * w.unsqueeze(0);
}

ProjectionResult pe_project(const Tensor& Gs, const Tensor& Hs, const GramSolver& solver,
                            NoisePlacement placement, const NoiseOptions& o,
                            privacy::GaussianSum& mechanism) {
  check_rows(Gs, Hs);
  check_sigma(mechanism, o);
  const double bound = column_bound(o.scaling, o.clip_norm);
  ProjectionResult r;
  r.noise_std = o.sigma * bound;
  r.norm_bound = bound;
  Tensor z;  // (N) double
  if (placement == NoisePlacement::kCoefficients) {
    Tensor Z = solver.solve(gram_f64(Gs, Hs));  // (N, M)
    r.noised_norms = col_norms(Z).to(torch::kFloat32);
    z = release_sum(mechanism, scale_columns(Z, o.scaling, o.clip_norm).sum(1), bound, r);
  } else if (placement == NoisePlacement::kInnerProduct) {
    Tensor A = gram_f64(Gs, Hs);  // (N, M) = G^T H
    r.noised_norms = col_norms(A).to(torch::kFloat32);
    Tensor a = release_sum(mechanism, scale_columns(A, o.scaling, o.clip_norm).sum(1), bound, r);
    z = solver.solve(a);
  } else {  // NoisePlacement::kPrivateGradient
    r.noised_norms = row_norms(Hs);
    Tensor h = release_sum(mechanism, scale_columns(Hs.t(), o.scaling, o.clip_norm).sum(1), bound,
                           r);  // (p)
    z = solver.solve(gram_f64(Gs, h.unsqueeze(0)).squeeze(1));
  }
  r.z = z.to(torch::kFloat32);
  r.direction = Gs.t().matmul(z.to(Gs.scalar_type())) / o.divisor;
  return r;
}

ProjectionResult inpro_project(const Tensor& Gs, const Tensor& Hs, const NoiseOptions& o,
                               privacy::GaussianSum& mechanism) {
  check_rows(Gs, Hs);
  check_sigma(mechanism, o);
  Tensor A = gram_f64(Gs, Hs);  // (N, M)
  ProjectionResult r;
  r.noised_norms = col_norms(A).to(torch::kFloat32);
  r.norm_bound = column_bound(o.scaling, o.clip_norm);
  r.noise_std = o.sigma * r.norm_bound;
  Tensor a = release_sum(mechanism, scale_columns(A, o.scaling, o.clip_norm).sum(1), r.norm_bound,
                         r);  // (N)
  r.z = a.to(torch::kFloat32);
  r.direction = Gs.t().matmul(a.to(Gs.scalar_type())) / o.divisor;
  return r;
}

double clipped_fraction(const ProjectionResult& r) {
  if (!r.noised_norms.defined() || r.noised_norms.numel() == 0) return 0.0;
  return (r.noised_norms.to(torch::kFloat64) > r.norm_bound)
      .to(torch::kFloat64)
      .mean()
      .item<double>();
}

Tensor top_basis(const Tensor& Gs, int64_t k) {
  DPFT_CHECK(k > 0, "top_basis: k must be > 0");
  Tensor gram = gram_f64(Gs, Gs);
  auto [w, V] = torch::linalg_eigh(gram);  // ascending
  const int64_t n = w.size(0), p = Gs.size(1);
  double top = n > 0 ? w[n - 1].item<double>() : 0;
  std::vector<int64_t> keep;
  for (int64_t i = n - 1; i >= 0 && static_cast<int64_t>(keep.size()) < k; --i)
    if (top > 0 && w[i].item<double>() > kBasisRelEig * top) keep.push_back(i);
  if (keep.empty()) return torch::zeros({p, 0}, Gs.options());
  Tensor idx = torch::tensor(keep, torch::kLong).to(V.device());
  Tensor U = V.index_select(1, idx), s = w.index_select(0, idx).sqrt();  // (N, k'), (k')
  // Right singular vectors of Gs: E = Gs^T U / s, in float64 block by block over p (U stays
  // float64: rounding it to float32 first would cost ~1e-7 * s_max / s_i of orthogonality).
  Tensor E = torch::empty({p, U.size(1)}, Gs.options());  // (p, k')
  for (int64_t c = 0; c < p; c += kChunk) {
    const int64_t len = std::min(kChunk, p - c);
    E.narrow(0, c, len).copy_(Gs.narrow(1, c, len).to(torch::kFloat64).t().matmul(U) / s);
  }
  // The eigenvectors of small eigenvalues carry relative error ~ lambda_max / gap * 1e-16, so
  // re-orthonormalise (symmetric, twice): E <- E Q L^-1/2 Q^T for E^T E = Q L Q^T.
  for (int pass = 0; pass < 2; ++pass) {
    Tensor C = gram_f64(E.t(), E.t());  // (k', k') = E^T E
    auto [l, Q] = torch::linalg_eigh(C);
    DPFT_CHECK(l.min().item<double>() > 0.5,
               "top_basis: the basis lost rank while re-orthonormalising (smallest eigenvalue {} "
               "of E^T E); the synthetic gradients are too ill-conditioned",
               l.min().item<double>());
    Tensor R = Q.matmul(torch::diag(l.rsqrt())).matmul(Q.t());  // (k', k')
    for (int64_t c = 0; c < p; c += kChunk) {
      const int64_t len = std::min(kChunk, p - c);
      Tensor blk = E.narrow(0, c, len);
      blk.copy_(blk.to(torch::kFloat64).matmul(R));
    }
  }
  return E;
}

Tensor power_basis(const Tensor& Gs, int64_t k, int64_t iters, uint64_t seed) {
  DPFT_CHECK(k > 0 && iters >= 1, "power_basis: k and iters must be >= 1");
  const int64_t N = Gs.size(0);
  k = std::min(k, N);
  torch::Generator gen = at::detail::createCPUGenerator(seed);
  Tensor gram = gram_f64(Gs, Gs);  // (N, N)
  Tensor Q = torch::randn({N, k}, gen, torch::TensorOptions().dtype(torch::kFloat64));
  Q = std::get<0>(torch::linalg_qr(gram.matmul(Q)));
  for (int64_t i = 1; i < iters; ++i) Q = std::get<0>(torch::linalg_qr(gram.matmul(Q)));
  // V = Gs^T Q spans the same subspace of R^p as (Gs^T Gs)^iters Gs^T Q0; orthonormalise it.
  Tensor V = Gs.t().matmul(Q.to(Gs.scalar_type()));  // (p, k)
  return std::get<0>(torch::linalg_qr(V.to(torch::kFloat64))).to(Gs.scalar_type());
}

ProjectionResult pdp_project(const Tensor& E, const Tensor& Hs, const NoiseOptions& o,
                             privacy::GaussianSum& mechanism) {
  check_sigma(mechanism, o);
  DPFT_CHECK(E.dim() == 2 && Hs.dim() == 2 && E.size(0) == Hs.size(1), "pdp_project: E {} and H {}",
             shape_str(E.sizes()), shape_str(Hs.sizes()));
  ProjectionResult r;
  r.noised_norms = row_norms(Hs);
  r.norm_bound = o.clip_norm;
  r.noise_std = o.sigma * o.clip_norm;
  Tensor h = release_sum(mechanism, scale_columns(Hs.t(), ColumnScaling::kClip, o.clip_norm).sum(1),
                         o.clip_norm, r);                                              // (p)
  r.z = E.t().matmul(h);                                                               // (k)
  r.direction = E.matmul(r.z) / o.divisor;
  return r;
}

std::pair<double, double> gep_noise_stds(const GepOptions& g, double sigma) {
  if (!g.residual) return {sigma * g.coef_clip, 0.0};
  return {sigma * std::sqrt(2.0) * g.coef_clip, sigma * std::sqrt(2.0) * g.residual_clip};
}

ProjectionResult gep_project(const Tensor& E, const Tensor& Hs, const GepOptions& g,
                             const NoiseOptions& o, privacy::GaussianSum& mechanism) {
  check_sigma(mechanism, o);
  DPFT_CHECK(E.dim() == 2 && Hs.dim() == 2 && E.size(0) == Hs.size(1), "gep_project: E {} and H {}",
             shape_str(E.sizes()), shape_str(Hs.sizes()));
  auto [std_c, std_r] = gep_noise_stds(g, o.sigma);
  ProjectionResult r;
  r.noise_std = std_c;
  r.noise_std_residual = std_r;
  Tensor C = E.t().matmul(Hs.t());  // (k, M) coefficients c_j
  r.noised_norms = col_norms(C);
  r.norm_bound = g.coef_clip;
  Tensor c = scale_columns(C, ColumnScaling::kClip, g.coef_clip).sum(1);  // (k)
  r.signal_norm = c.norm().item<double>();
  if (g.residual) {  // one release of both parts (gep_noise_stds: sqrt(2) C1 and sqrt(2) C2)
    Tensor R = Hs.t() - E.matmul(C);  // (p, M) residuals r_j
    std::vector<Tensor> parts{c, scale_columns(R, ColumnScaling::kClip, g.residual_clip).sum(1)};
    r.noise_norm = mechanism.release_blocks(parts, {g.coef_clip, g.residual_clip})[0];
    r.z = parts[0];
    r.direction = E.matmul(parts[0]) + parts[1];
  } else {
    std::vector<Tensor> parts{c};
    r.noise_norm = mechanism.release(parts, g.coef_clip);
    r.z = parts[0];
    r.direction = E.matmul(parts[0]);
  }
  r.direction = r.direction / o.divisor;
  return r;
}

std::vector<int64_t> sample_selection(const Tensor& z, int64_t count, uint64_t seed) {
  const int64_t N = z.numel();
  DPFT_CHECK(count >= 0 && count <= N, "sample_selection: cannot draw {} distinct of {}", count, N);
  Tensor a = z.to(torch::kFloat64).abs();
  Tensor p = torch::softmax(a, 0).contiguous();  // exp(|z|) / sum, computed stably
  std::vector<double> w(p.data_ptr<double>(), p.data_ptr<double>() + N);
  std::mt19937_64 rng(seed);
  std::vector<int64_t> out;
  for (int64_t i = 0; i < count; ++i) {
    int64_t j;
    if (std::accumulate(w.begin(), w.end(), 0.0) > 0) {
      std::discrete_distribution<int64_t> d(w.begin(), w.end());
      j = d(rng);
    } else {  // every remaining weight underflowed: uniform over the indices not yet drawn
      std::vector<int64_t> rest;
      for (int64_t k = 0; k < N; ++k)
        if (std::find(out.begin(), out.end(), k) == out.end()) rest.push_back(k);
      j = rest[std::uniform_int_distribution<size_t>(0, rest.size() - 1)(rng)];
    }
    out.push_back(j);
    w[static_cast<size_t>(j)] = 0;  // without replacement: renormalise over the rest
  }
  return out;
}

}  // namespace dpft::project
