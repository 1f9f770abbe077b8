#include "core/privacy/histogram.hpp"

#include <cmath>

#include "core/util/error.hpp"

namespace dpft::privacy {

HistogramRelease release_histogram(const std::vector<int64_t>& bin_of, int64_t K, double sigma,
                                   NoiseSource& noise, PrivacyLedger& ledger,
                                   const std::string& label) {
  DPFT_CHECK_AS(ConfigError, K >= 1, "histogram: need at least one bin, got {}", K);
  DPFT_CHECK_AS(ConfigError, sigma > 0 && std::isfinite(sigma),
                "histogram: noise multiplier {} must be in (0, inf)", sigma);
  std::vector<int64_t> count(static_cast<size_t>(K), 0);
  for (size_t i = 0; i < bin_of.size(); ++i) {
    DPFT_CHECK_AS(RuntimeError, bin_of[i] >= 0 && bin_of[i] < K,
                  "histogram: record {} is in bin {}, outside [0, {})", i, bin_of[i], K);
    ++count[static_cast<size_t>(bin_of[i])];
  }
  // Into the ledger first: a release that cannot be accounted for never happens.
  ledger.record({label, sigma, 1.0, 1});
  const torch::Tensor z = noise.normal({K}, sigma, torch::kFloat64);
  const double* zp = z.data_ptr<double>();
  HistogramRelease r;
  r.sigma = sigma;
  r.counts.resize(static_cast<size_t>(K));
  for (int64_t k = 0; k < K; ++k)
    r.counts[static_cast<size_t>(k)] = std::max<int64_t>(
        0, std::llround(static_cast<double>(count[static_cast<size_t>(k)]) + zp[k]));
  return r;
}

}  // namespace dpft::privacy
