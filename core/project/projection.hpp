// Gradient projection onto the span of synthetic (non-private) per-sample gradients: the
// arithmetic of PE-SGD and of the projection baselines it compares against.
//
// Convention: per-sample gradients are ROWS. Gs (N, p) holds the synthetic gradients g_i (the
// paper's G = Gs^T, p x N); Hs (M, p) the private gradients h_j of the Poisson batch (H = Hs^T).
//
// PE-SGD (Zou et al., ICLR 2026, "PE-SGD", Sec. 4, Eq. 1-3, Alg. 1 line 8-9 and Alg. 3):
//   Z = (G^T G + eta I)^-1 G^T H                         (N, M)   Eq. 2 with footnote 1's eta
//   Z_j <- Z_j / ||Z_j||  (normalize)  or  Z_j * min(1, C / ||Z_j||)  (clip)      Alg. 3
//   z  = sum_j Z_j + N(0, (sigma s)^2 I_N),  s = 1 (normalize) or C (clip)        Alg. 1 line 8
//   update direction = G z / divisor                                             Alg. 1 line 9
// Noise placements of Sec. 5.4 / Fig. 8 (same sensitivity control, applied to the columns of
// the matrix the noise is added to):
//   coefficients:      as above (the paper's PE-SGD)
//   inner_product:     a = sum_j scale(G^T H)_j + N(0, (sigma s)^2 I_N);  z = (G^T G + eta I)^-1 a
//   private_gradient:  h = sum_j scale(H)_j + N(0, (sigma s)^2 I_p);     z = (G^T G + eta I)^-1 G^T
//   h
// Baselines (Sec. 5.1):
//   InPro:   direction = G (sum_j normalize(G^T H)_j + N(0, sigma^2 I_N)) / divisor  (no inverse)
//   PDP-SGD (Zhou et al. 2021): E = top-k eigenvectors of G G^T (p, k);
//            direction = E E^T (sum_j clip_C(h_j) + N(0, (sigma C)^2 I_p)) / divisor
//   GEP (Yu et al. 2021): E = top-k left singular vectors of G by power (subspace) iteration;
//            c_j = E^T h_j (k), r_j = h_j - E c_j (p); c = sum clip_C1(c_j) + N(0, (sigma' C1)^2),
//            r = sum clip_C2(r_j) + N(0, (sigma' C2)^2), sigma' = sigma sqrt(2);
//            direction = (E c + r) / divisor. Stacking [c/C1; r/C2] has sensitivity sqrt(2) and
//            noise sigma sqrt(2): the pair is ONE Gaussian mechanism of multiplier sigma. The
//            no-residual variant releases c alone with sigma' = sigma.
// Every linear solve with G^T G + eta I is a Cholesky solve in float64 (an eigen-solve with
// eigenvalues clamped at 0 if rounding made the matrix indefinite), never an explicit inverse.
// Products G^T G and G^T H are accumulated in float64 over column chunks.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "core/privacy/mechanism.hpp"
#include "core/privacy/modes.hpp"

namespace dpft::project {

// A B^T in float64, accumulated over chunks of columns. A: (n, p), B: (m, p) -> (n, m) double.
torch::Tensor gram_f64(const torch::Tensor& A, const torch::Tensor& B);

// Solves (Gs Gs^T + eta I) X = R for any right-hand side.
class GramSolver {
 public:
  GramSolver(const torch::Tensor& Gs, double eta);      // Gs: (N, p)
  torch::Tensor solve(const torch::Tensor& rhs) const;  // rhs: (N, K) or (N) -> same shape, double
  const torch::Tensor& gram() const { return gram_; }   // (N, N) double, without eta
  bool used_eigen_fallback() const { return eig_; }

 private:
  torch::Tensor gram_, chol_, evecs_, evals_;
  double eta_;
  bool eig_ = false;
};

// Per-column sensitivity control of X (n, M): kUnitNorm X_j / ||X_j|| (a zero column stays
// zero) or kClip X_j min(1, C / ||X_j||). A column with a NaN or Inf (a private example whose
// gradient is not finite) becomes zero. Returns the scaled X (same dtype).
using privacy::ColumnScaling;
using privacy::NoisePlacement;
torch::Tensor scale_columns(const torch::Tensor& X, ColumnScaling scaling, double C);
// The bound on each scaled column's norm: 1 (kUnitNorm) or C (kClip).
double column_bound(ColumnScaling scaling, double C);

struct NoiseOptions {
  double sigma = 0;                                  // noise multiplier
  ColumnScaling scaling = ColumnScaling::kUnitNorm;  // the columns' sensitivity control
  double clip_norm = 1;                              // C for kClip
  double divisor = 1;                                // q N or the realised batch size
};

struct ProjectionResult {
  torch::Tensor direction;  // (p) float32: the update direction (already divided)
  torch::Tensor z;  // (N) float32 coefficients in the synthetic basis (DP); may be undefined
  torch::Tensor
      noised_norms;        // (M) column norms of the matrix the noise is added to, before scaling
  double signal_norm = 0;  // || sum of the scaled columns ||, before noise (diagnostics only)
  double noise_norm = 0;   // || the noise drawn || (diagnostics only)
  double noise_std = 0;    // std of each noise coordinate added (GEP: on the coefficients)
  double noise_std_residual = 0;  // GEP with residual: std on the residual's p coordinates
  double norm_bound = 1;  // the norm the noised columns are scaled to (normalize) or clipped at
};

// Share of the noised columns whose norm exceeds r.norm_bound, i.e. that clipping scaled down
// (normalize: scaled down to norm 1; the others were scaled up). 0 when there are no columns.
double clipped_fraction(const ProjectionResult& r);

// PE-SGD with a noise placement: coefficients | inner_product | private_gradient.
ProjectionResult pe_project(const torch::Tensor& Gs, const torch::Tensor& Hs,
                            const GramSolver& solver, NoisePlacement placement,
                            const NoiseOptions& o, privacy::GaussianSum& mechanism);

// InPro: G (sum of normalised columns of G^T H + noise) / divisor.
ProjectionResult inpro_project(const torch::Tensor& Gs, const torch::Tensor& Hs,
                               const NoiseOptions& o, privacy::GaussianSum& mechanism);

// Orthonormal basis (p, k') of the top-k eigenspace of Gs^T Gs (= top-k right singular
// vectors of Gs, the paper's left singular vectors of G), exactly, via the eigen-decomposition
// of the N x N Gram matrix, computed in float64 and re-orthonormalised. Directions with
// eigenvalue <= 1e-8 * largest (singular value <= 1e-4 * largest) are dropped (k' <= k): their
// eigenvectors are not accurate enough to give a basis vector.
torch::Tensor top_basis(const torch::Tensor& Gs, int64_t k);

// The same subspace by block power (subspace) iteration on Gs^T Gs from a seeded random
// start, `iters` multiplications, re-orthonormalised (QR) each time. (p, min(k, N)).
torch::Tensor power_basis(const torch::Tensor& Gs, int64_t k, int64_t iters, uint64_t seed);

// PDP-SGD: E E^T (sum_j clip_C(h_j) + N(0, (sigma C)^2 I_p)) / divisor. E: (p, k).
ProjectionResult pdp_project(const torch::Tensor& E, const torch::Tensor& Hs, const NoiseOptions& o,
                             privacy::GaussianSum& mechanism);

// GEP with residual (clip bounds C1 for coefficients, C2 for residuals) or without.
struct GepOptions {
  double coef_clip = 1.0;      // C1
  double residual_clip = 0.2;  // C2
  bool residual = true;
};
ProjectionResult gep_project(const torch::Tensor& E, const torch::Tensor& Hs, const GepOptions& g,
                             const NoiseOptions& o, privacy::GaussianSum& mechanism);
// Noise std of GEP's two parts: {coefficients, residual}, before division.
std::pair<double, double> gep_noise_stds(const GepOptions& g, double sigma);

// SampleSelection (Alg. 3): p = softmax(|z|); `count` distinct indices drawn one after another
// with probability proportional to p among those not yet drawn (sampling without replacement).
std::vector<int64_t> sample_selection(const torch::Tensor& z, int64_t count, uint64_t seed);

}  // namespace dpft::project
