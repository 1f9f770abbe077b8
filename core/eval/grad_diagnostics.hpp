// Gradient diagnostics: analysis only. They read the true (unclipped, noise-free) private
// gradients, so they are non-private statistics of the private data; they never feed back
// into training and are reported in their own `diagnostics` blocks (docs/outputs.md).
//   direction error     l2 and cosine of the update direction to the true mean gradient of
//                       the batch (PE-SGD paper, Fig. 1 and 10)
//   noise_to_signal     ||noise|| / ||clipped (or scaled) sum|| before division
//   column norms        std / mean and min / max of the noised matrix's column norms before
//                       scaling (PE-SGD paper, Table 5: disparity that normalisation removes)
//   overlap_g_h         sum of squared cosines between the top-k synthetic and private
//                       gradient subspaces (Table 13)
//   principal angles    between the private-gradient subspace of the run's first step and the
//                       current one, degrees ascending, and their mean (Fig. 11)
#pragma once
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <vector>

namespace dpft::eval {

struct DirectionError {
  double l2 = 0;      // ||d - ref||
  double cosine = 0;  // <d, ref> / (||d|| ||ref||)
};
// d, ref: (p); computed in float64.
DirectionError direction_error(const torch::Tensor& d, const torch::Tensor& ref);

// Principal angles (degrees, ascending) between the column spans of two orthonormal bases
// A (p, a), B (p, b); and the overlap sum_j s_j^2 of A^T B (s: singular values).
torch::Tensor principal_angles_deg(const torch::Tensor& A, const torch::Tensor& B);
double subspace_overlap(const torch::Tensor& A, const torch::Tensor& B);

// DP-SGD's per-step block: l2, cosine of d (p, the privatised gradient) to true_mean (p), and
// noise_norm / signal_norm (0 when the signal is 0).
nlohmann::json dp_sgd_step(const torch::Tensor& d, const torch::Tensor& true_mean,
                           double signal_norm, double noise_norm);

// Means over a run's history (resumed steps included) of every per-step "diagnostics" value:
// {"steps": n, "l2_mean", "cosine_mean", other keys by name}.
nlohmann::json summarize_history(const nlohmann::json& history);

// The projection methods' per-step diagnostics and their means over the steps of this process
// (after --resume the principal angles restart from the resumed step's subspace).
class ProjectionDiagnostics {
 public:
  explicit ProjectionDiagnostics(int64_t k) : k_(k) {}
  struct Step {
    const torch::Tensor& Gs;            // (N, p) synthetic per-sample gradients
    const torch::Tensor& Hs;            // (M, p) private per-sample gradients, M > 0
    const torch::Tensor& direction;     // (p) the update direction
    const torch::Tensor& noised_norms;  // (M) column norms of the noised matrix, before scaling
    double signal_norm = 0, noise_norm = 0;
    int64_t step = 0;  // 0-based; step 0's angles (its subspace against itself) are not averaged
  };
  nlohmann::json record(const Step& s);  // the step's block for the history
  nlohmann::json summary() const;        // means over the recorded steps; null when none

 private:
  int64_t k_;
  torch::Tensor E_H0_;  // (p, k') the first recorded step's private-gradient basis
  std::vector<double> nts_, cos_, l2_, std_mean_, min_max_, overlap_, angle_;
};

}  // namespace dpft::eval
