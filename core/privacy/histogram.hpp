// The DP histogram of a partition (CTCL's topic histogram, paper 004 Section 3.3; the Gaussian
// mechanism, Dwork & Roth 2014 Thm. A.1): each private record falls in exactly one of K bins, so
// adding or removing a record changes one count by 1 and the count vector has L2 sensitivity
// exactly 1. The release is counts + N(0, sigma^2 I_K), rounded to the nearest integer and
// clamped at 0 (post-processing, as the paper's code does). It is recorded in the ledger as one
// Gaussian release {sigma, q = 1, count 1} before the noisy counts exist.
#pragma once
#include <torch/torch.h>

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

// bin_of[i] in [0, K) is record i's bin (the one bin it is counted in). sigma >= 0 and finite;
// sigma 0 releases the true counts, recorded as a non-private release (epsilon inf). Throws
// RuntimeError for a bin outside [0, K), ConfigError for a bad sigma or K.
HistogramRelease release_histogram(const std::vector<int64_t>& bin_of, int64_t K, double sigma,
                                   NoiseSource& noise, PrivacyLedger& ledger,
                                   const std::string& label = "histogram");

// Private Evolution's nearest-neighbour histogram (Lin et al. 2024, DP_NN_HISTOGRAM; Xie et al.
// 2024, Aug-PE): private record i votes 1/sqrt(k) for each of its k nearest candidates
// (nn_idx row i, k distinct indices in [0, M)). The candidates are fixed before the private
// records are looked at (earlier releases and the generator), so adding or removing one record
// changes the vote vector by k entries of 1/sqrt(k): an L2 change of exactly 1, for any k.
// Returns the M vote totals. RuntimeError for an index outside [0, M) or repeated in a row.
std::vector<double> nn_votes(const torch::Tensor& nn_idx /* (N, k) int64 */, int64_t M);

// The Gaussian release of a vote vector of L2 sensitivity 1 (nn_votes): votes + N(0, sigma^2 I),
// real-valued (PE thresholds and selects on them: post-processing). Recorded in the ledger as
// one release {sigma, q = 1, count 1} before the noise is drawn. sigma >= 0 and finite (0: the
// true votes, recorded as a non-private release).
std::vector<double> release_votes(const std::vector<double>& votes, double sigma,
                                  NoiseSource& noise, PrivacyLedger& ledger,
                                  const std::string& label = "nn_histogram");

}  // namespace dpft::privacy
