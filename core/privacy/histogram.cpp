#include "core/privacy/histogram.hpp"

#include <cmath>
#include <map>

#include "core/util/error.hpp"

namespace dpft::privacy {

std::vector<double> nn_votes(const torch::Tensor& nn_idx, int64_t M,
                             const std::vector<int64_t>& unit_of) {
  DPFT_CHECK_AS(RuntimeError,
                nn_idx.defined() && nn_idx.dim() == 2 && nn_idx.scalar_type() == torch::kInt64,
                "nn histogram: the neighbour indices must be an (N, k) int64 tensor");
  const int64_t N = nn_idx.size(0), k = nn_idx.size(1);
  DPFT_CHECK_AS(RuntimeError, k >= 1 || N == 0, "nn histogram: k = 0 neighbours");
  DPFT_CHECK_AS(RuntimeError, static_cast<int64_t>(unit_of.size()) == N,
                "nn histogram: {} units for {} records", unit_of.size(), N);
  std::map<int64_t, int64_t> records_of;  // unit -> its records here
  for (int64_t u : unit_of)
    if (u >= 0) ++records_of[u];
  std::vector<double> votes(static_cast<size_t>(M), 0.0);
  std::map<int64_t, std::map<int64_t, double>> grouped;  // unit of several -> its summed votes
  const torch::Tensor idx = nn_idx.cpu().contiguous();
  const int64_t* p = idx.data_ptr<int64_t>();
  const double w = 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(k, 1)));
  for (int64_t i = 0; i < N; ++i) {
    const int64_t u = unit_of[static_cast<size_t>(i)];
    if (u < 0) continue;  // left out: not in any unit
    const int64_t* row = p + i * k;
    const bool alone = records_of[u] == 1;
    for (int64_t j = 0; j < k; ++j) {
      DPFT_CHECK_AS(RuntimeError, row[j] >= 0 && row[j] < M,
                    "nn histogram: record {} votes for candidate {}, outside [0, {})", i, row[j],
                    M);
      for (int64_t l = 0; l < j; ++l)  // a repeated neighbour would weigh sqrt(2) / sqrt(k)
        DPFT_CHECK_AS(RuntimeError, row[l] != row[j],
                      "nn histogram: record {} lists candidate {} twice", i, row[j]);
      if (alone)
        votes[static_cast<size_t>(row[j])] += w;  // ||v|| = sqrt(k / k) = 1
      else
        grouped[u][row[j]] += w;
    }
  }
  for (const auto& [u, v] : grouped) {  // v_u / max(1, ||v_u||)
    double sq = 0;
    for (const auto& [m, x] : v) sq += x * x;
    const double scale = 1.0 / std::max(1.0, std::sqrt(sq));
    for (const auto& [m, x] : v) votes[static_cast<size_t>(m)] += x * scale;
  }
  return votes;
}

}  // namespace dpft::privacy
