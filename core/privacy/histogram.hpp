// The DP histogram of a partition (CTCL's topic histogram, paper 004 Section 3.3; the Gaussian
// mechanism, Dwork & Roth 2014 Thm. A.1): each private record falls in exactly one of K bins, so
// adding or removing a record changes one count by 1 and the count vector has L2 sensitivity
// exactly 1. The release is counts + N(0, sigma^2 I_K), rounded to the nearest integer and
// clamped at 0 (post-processing, as the paper's code does). It is recorded in the ledger as one
// Gaussian release {sigma, q = 1, count 1} before the noisy counts exist.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/privacy/ledger.hpp"
#include "core/privacy/noise.hpp"

namespace dpft::privacy {

struct HistogramRelease {
  std::vector<int64_t> counts;  // released: max(0, round(true + noise)), K bins
  double sigma = 0;             // noise multiplier = noise std (sensitivity 1)
};

// bin_of[i] in [0, K) is record i's bin (the one bin it is counted in). sigma > 0 and finite
// (a non-private histogram is not offered: use the true counts knowingly instead). Throws
// RuntimeError for a bin outside [0, K), ConfigError for a bad sigma or K.
HistogramRelease release_histogram(const std::vector<int64_t>& bin_of, int64_t K, double sigma,
                                   NoiseSource& noise, PrivacyLedger& ledger,
                                   const std::string& label = "histogram");

}  // namespace dpft::privacy
