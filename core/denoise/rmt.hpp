// Random-matrix-theory shrinkage of a noisy gradient matrix (paper 003, "gradient-matrix
// denoising for DP-SGD", Sec. 2.3 and Algorithm 1), following Shabalin & Nobel (2013):
//   Y = X + Z, X (n, m) low rank, Z i.i.d. N(0, sigma^2). A signal singular value lambda above
//   sigma (mn)^(1/4) shows up in Y as
//     F(lambda) = sqrt((lambda + sigma^2 n / lambda) (lambda + sigma^2 m / lambda))       (Eq. 3)
//   and the rest merge into the noise bulk, whose edge is sigma (sqrt(n) + sqrt(m)).
//   The optimal estimate keeps Y's singular vectors and shrinks its singular values:
//     X_hat = sum_i eta_i u_i v_i^T                                                        (Eq. 7)
//     eta_i = l sqrt((l^4 - mn s^4) / (l^4 + m l^2 s^2)) sqrt((l^4 - mn s^4) / (l^4 + n l^2 s^2)),
//             l = F^-1(lambda~_i), s = sigma, for lambda~_i above the edge; 0 otherwise  (Eq. 8)
//   F^-1 in closed form: with t = lambda^2, lambda~^2 = t + s^2 (n + m) + s^4 n m / t, so t is
//   the larger root of t^2 - (lambda~^2 - s^2 (n + m)) t + s^4 n m = 0 (real exactly when
//   lambda~ >= s (sqrt(n) + sqrt(m)), the edge).
//   Denoise(Y) = Y when lambda~_1 < kappa s (sqrt(n) + sqrt(m)), else (||Y|| / ||X_hat||) X_hat
//   with the norm correction, or X_hat without it (App. D.2's "unscaled")                  (Eq. 9)
// Everything is computed in float64 whatever the input dtype; the result has the input's dtype.
#pragma once
#include <torch/torch.h>

#include <array>
#include <string>

#include <cstdint>
#include <tuple>
#include <vector>

#include "core/util/enum_names.hpp"

namespace dpft::denoise {

// Eq. 3: the noisy singular value of a signal singular value `lambda` > sigma (mn)^(1/4) (the
// bulk edge sigma (sqrt(n) + sqrt(m)) otherwise).
double forward_singular_value(double lambda, double sigma, int64_t n, int64_t m);
// F^-1 of a noisy singular value at or above the bulk edge (the edge maps to sigma (mn)^(1/4));
// RuntimeError below the edge, where no signal value maps.
double inverse_singular_value(double noisy, double sigma, int64_t n, int64_t m);
// Eq. 8's eta for a noisy singular value: 0 at or below the bulk edge.
double shrink(double noisy, double sigma, int64_t n, int64_t m);
// sigma (sqrt(n) + sqrt(m)).
double bulk_edge(double sigma, int64_t n, int64_t m);

// exact: the full SVD (LAPACK through linalg_svd). randomized: the top singular triplets by
// randomized subspace iteration (Halko, Martinsson & Tropp 2011, Alg. 4.4: a Gaussian sketch with
// `oversample` extra columns, `power_iters` re-orthonormalised power iterations), enough because
// only singular values above the bulk edge enter the estimate; the norm correction uses the
// matrix's own Frobenius norm.
enum class Svd { kExact, kRandomized };
inline constexpr std::array<EnumName<Svd>, 2> kSvdNames = {
    {{Svd::kExact, "exact"}, {Svd::kRandomized, "randomized"}}};  // method.svd's spelling

// How the exact batched path screens blocks before the SVD (Eq. 9's test lambda~_1 < kappa
// edge, with a 1e-4 relative margin so that float32's error cannot flip a decision; blocks
// within it go to the SVD, which decides):
//   kEigen     the top eigenvalue of each block's Gram matrix G (float32 eigvalsh): every
//              block's lambda~_1 / edge is known (the diagnostics need it).
//   kCholesky  a Cholesky factorisation of t^2 I - G, t = kappa edge (1 - 1e-4), in float64:
//              it exists exactly when lambda_max(G) < t^2, a certificate for about n^3 / 3
//              flops against eigvalsh's tridiagonalisation; a certified block's lambda~_1 is
//              not computed (Outcome::top_over_edge is NaN).
enum class Screen { kEigen, kCholesky };

struct Options {
  double kappa = 1.02;           // Sec. 3.2.1: denoise only when lambda~_1 >= kappa * edge
  bool norm_correction = true;   // Eq. 9's rescaling to the noisy matrix's norm
  Svd svd = Svd::kExact;
  Screen screen = Screen::kEigen;  // exact batched path only
  // randomized: the number of triplets; 0 = adaptive (8, doubled while the smallest one found
  // is still above the edge, up to min(n, m))
  int64_t rank = 0;
  // Convergence of a value goes with its gap to the (k + oversample + 1)-th: values just above
  // the edge converge slowest (tests/test_denoise.cpp states the measured accuracy).
  int64_t oversample = 20;
  int64_t power_iters = 4;
  uint64_t seed = 0;  // the sketch's generator seed (with the matrix shape)
};

// The top-k singular triplets of y (n, m) by randomized subspace iteration: u (n, k), s (k)
// descending, vh (k, m), float64. k <= min(n, m).
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> randomized_svd(const torch::Tensor& y,
                                                                       int64_t k, const Options& o);

// The Gram matrix of the smaller side of y (n, m), float32: y y^T (s = n <= m) or y^T y (s = m),
// (s, s); its top eigenvalue is y's top singular value squared (the screen's input).
torch::Tensor gram_of_smaller_side(const torch::Tensor& y);

// Sec. 3.2: token / position embeddings and output heads are not denoised unless asked for
// (method.apply_to): true for such a parameter name.
bool excluded_by_default(const std::string& param_name);

// What happened to one matrix (the diagnostics of issue 23).
struct Outcome {
  bool denoised = false;  // false: left unchanged (lambda~_1 below kappa * edge)
  double top_over_edge = 0;  // lambda~_1 / edge (Fig. 10); NaN: below kappa, not computed
  int64_t kept = 0;          // singular values above the edge (the estimate's rank)
};

// Denoise one noisy matrix y (n, m) whose entries carry N(0, sigma^2) noise; sigma > 0
// (sigma = 0 is the caller's decision: there is nothing to shrink). The exact SVD in float64.
torch::Tensor denoise_matrix(const torch::Tensor& y, double sigma, const Options& o,
                             Outcome* out = nullptr);

// The same for several matrices, each with its own sigma: matrices of one shape are stacked
// and decomposed by one batched linalg_svd call. Results in input order. Exact mode screens
// first (Options::screen, on the Gram matrices of a shape's blocks, float32, batched); blocks
// clearly below kappa * edge (1e-4 relative margin) are returned unchanged without an SVD, so
// the decisions and results are denoise_matrix's (tested); with kEigen their Outcome's
// top_over_edge carries float32's error (~1e-6 relative), with kCholesky it is NaN.
std::vector<torch::Tensor> denoise_batched(const std::vector<torch::Tensor>& ys,
                                           const std::vector<double>& sigmas, const Options& o,
                                           std::vector<Outcome>* out = nullptr);

}  // namespace dpft::denoise
