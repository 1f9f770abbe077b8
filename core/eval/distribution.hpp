// Distribution measures between the embeddings of real and synthetic texts (CTCL paper 004,
// Sec. 4 / App. D, as Aug-PE evaluates): MAUVE, FID, and k-NN precision / recall.
//
//  * FID (Heusel et al. 2017, Eq. 6 of "GANs Trained by a Two Time-Scale Update Rule ..."):
//    ||mu_r - mu_s||^2 + Tr(S_r + S_s - 2 (S_r S_s)^{1/2}), means and (unbiased, n - 1)
//    covariances of the two sets. Tr((S_r S_s)^{1/2}) is computed as the sum of the square roots
//    of the eigenvalues of S_r^{1/2} S_s S_r^{1/2} (symmetric positive semi-definite, so the
//    square root is real; the same trace as scipy.linalg.sqrtm's), in float64.
//  * Precision / recall (Kynkäänniemi et al. 2019, "Improved Precision and Recall Metric for
//    Assessing Generative Models", Sec. 2): each sample's ball reaches its k-th nearest neighbour
//    in its own set (itself excluded); precision = the share of synthetic samples inside some
//    real ball, recall = the share of real samples inside some synthetic ball. Exact Euclidean
//    distances (torch::cdist in float64, in row chunks).
//  * MAUVE (Pillutla et al. 2021, Sec. 3-4) with the defaults of its official implementation
//    (the `mauve-text` package, compute_mauve): rows L2-normalised; PCA of the union (centred),
//    keeping the leading components up to the first whose cumulative explained variance reaches
//    0.9; k-means in that space (faiss, Euclidean, 500 iterations, 5 restarts, k = max(2,
//    round(min(n_p, n_q) / 10))); the two cluster histograms P and Q; the divergence curve
//    exp(-c (KL(Q || R_w), KL(P || R_w))) for R_w = w P + (1 - w) Q at 25 weights w evenly in
//    [1e-6, 1 - 1e-6] plus the end points (1, 0) and (0, 1), c = 5; MAUVE = the mean of the
//    trapezoid areas under the curve taken along each axis (where points share an abscissa,
//    which happens only when P == Q, the highest is kept, so that MAUVE(P, P) = 1). The frontier integral (the package's
//    get_fronter_integral, scale 2) is reported too. The k-means is faiss's, so a result equals
//    the package's up to clustering differences (different seeds pick different partitions);
//    given the histograms the rest is exact (tests/reference/ref_distribution.py).
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace dpft::eval {

// real (n, d), synth (m, d), n, m >= 2; any floating type. InputError on bad shapes.
double fid(const torch::Tensor& real, const torch::Tensor& synth);

struct PrecisionRecall {
  double precision = 0, recall = 0;
  int64_t k = 0;
};
// real (n, d), synth (m, d) with n, m > k >= 1.
PrecisionRecall precision_recall(const torch::Tensor& real, const torch::Tensor& synth,
                                 int64_t k = 10);

struct MauveOptions {
  int64_t buckets = 0;  // k-means clusters; 0 = max(2, round(min(n_p, n_q) / 10))
  double explained_variance = 0.9;
  int64_t kmeans_iterations = 500, kmeans_redo = 5;
  uint64_t seed = 25;  // k-means seed = seed + 2, as the package's
  int64_t curve_points = 25;
  double scaling = 5;  // c
};

struct MauveResult {
  double mauve = 0, frontier_integral = 0;
  int64_t buckets = 0, pca_dims = 0;
  std::vector<double> p_hist, q_hist;
  std::vector<std::pair<double, double>> curve;  // (exp(-c KL(Q||R)), exp(-c KL(P||R)))
};

// p (n, d): the real texts' embeddings, q (m, d): the synthetic ones'. Needs faiss for the
// k-means (ConfigError without it).
MauveResult mauve(const torch::Tensor& p, const torch::Tensor& q, const MauveOptions& o = {});
// The part after quantisation: histograms p, q (same length, each summing to 1).
MauveResult mauve_from_histograms(const std::vector<double>& p, const std::vector<double>& q,
                                  const MauveOptions& o = {});

}  // namespace dpft::eval
