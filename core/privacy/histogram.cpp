#include "core/privacy/histogram.hpp"

#include <cmath>

#include "core/util/error.hpp"

namespace dpft::privacy {

HistogramRelease release_histogram(const std::vector<int64_t>& bin_of, int64_t K, double sigma,
                                   NoiseSource& noise, PrivacyLedger& ledger,
                                   const std::string& label) {
  DPFT_CHECK_AS(ConfigError, K >= 1, "histogram: need at least one bin, got {}", K);
  DPFT_CHECK_AS(ConfigError, sigma >= 0 && std::isfinite(sigma),
                "histogram: noise multiplier {} must be in [0, inf)", sigma);
  std::vector<int64_t> count(static_cast<size_t>(K), 0);
  for (size_t i = 0; i < bin_of.size(); ++i) {
    DPFT_CHECK_AS(RuntimeError, bin_of[i] >= 0 && bin_of[i] < K,
                  "histogram: record {} is in bin {}, outside [0, {})", i, bin_of[i], K);
    ++count[static_cast<size_t>(bin_of[i])];
  }
  // Into the ledger first: a release that cannot be accounted for never happens.
  ledger.record({label, sigma, 1.0, 1});  // sigma 0: a non-private release, recorded so
  const torch::Tensor z = noise.normal({K}, sigma, torch::kFloat64);  // zeros for sigma 0
  const double* zp = z.data_ptr<double>();
  HistogramRelease r;
  r.sigma = sigma;
  r.counts.resize(static_cast<size_t>(K));
  for (int64_t k = 0; k < K; ++k)
    r.counts[static_cast<size_t>(k)] = std::max<int64_t>(
        0, std::llround(static_cast<double>(count[static_cast<size_t>(k)]) + zp[k]));
  return r;
}

std::vector<double> nn_votes(const torch::Tensor& nn_idx, int64_t M) {
  DPFT_CHECK_AS(RuntimeError,
                nn_idx.defined() && nn_idx.dim() == 2 && nn_idx.scalar_type() == torch::kInt64,
                "nn histogram: the neighbour indices must be an (N, k) int64 tensor");
  const int64_t N = nn_idx.size(0), k = nn_idx.size(1);
  DPFT_CHECK_AS(RuntimeError, k >= 1 || N == 0, "nn histogram: k = 0 neighbours");
  std::vector<double> votes(static_cast<size_t>(M), 0.0);
  const torch::Tensor idx = nn_idx.cpu().contiguous();
  const int64_t* p = idx.data_ptr<int64_t>();
  const double w = 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(k, 1)));
  for (int64_t i = 0; i < N; ++i) {
    const int64_t* row = p + i * k;
    for (int64_t j = 0; j < k; ++j) {
      DPFT_CHECK_AS(RuntimeError, row[j] >= 0 && row[j] < M,
                    "nn histogram: record {} votes for candidate {}, outside [0, {})", i, row[j],
                    M);
      for (int64_t l = 0; l < j; ++l)  // a repeated neighbour would weigh sqrt(2) / sqrt(k)
        DPFT_CHECK_AS(RuntimeError, row[l] != row[j],
                      "nn histogram: record {} lists candidate {} twice", i, row[j]);
      votes[static_cast<size_t>(row[j])] += w;
    }
  }
  return votes;
}

std::vector<double> release_votes(const std::vector<double>& votes, double sigma,
                                  NoiseSource& noise, PrivacyLedger& ledger,
                                  const std::string& label) {
  DPFT_CHECK_AS(ConfigError, sigma >= 0 && std::isfinite(sigma),
                "nn histogram: noise multiplier {} must be in [0, inf)", sigma);
  ledger.record({label, sigma, 1.0, 1});  // accounted for before anything is drawn
  const int64_t M = static_cast<int64_t>(votes.size());
  const torch::Tensor z = noise.normal({M}, sigma, torch::kFloat64);
  const double* zp = z.data_ptr<double>();
  std::vector<double> out(votes);
  for (int64_t m = 0; m < M; ++m) out[static_cast<size_t>(m)] += zp[m];
  return out;
}

}  // namespace dpft::privacy
