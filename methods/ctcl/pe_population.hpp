// Private Evolution's population steps (Lin et al. 2024, "Differentially Private Synthetic Data
// via Foundation Model APIs 1: Images", Alg. 1; Xie et al. 2024, Aug-PE, Alg. 1; the DPSDA
// library's PE population): what happens to the DP nearest-neighbour histogram of the candidates
// once it is released. All of it is post-processing of that release: no privacy cost.
//   threshold   h_j <- max(h_j - H, 0)                (drops the candidates noise alone lifted)
//   selection   rank:   the n candidates with the highest counts (Aug-PE)
//               sample: n draws with replacement, P(j) = h_j / sum h (PE)
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "core/util/enum_names.hpp"

namespace dpft::pe {

enum class Selection { kRank, kSample };
inline constexpr std::array<EnumName<Selection>, 2> kSelectionNames = {
    {{Selection::kRank, "rank"}, {Selection::kSample, "sample"}}};

// max(h_j - H, 0) for every j; H >= 0.
std::vector<double> threshold(const std::vector<double>& h, double H);

// The indices of n candidates chosen from counts h (all >= 0, after threshold):
//   kRank    the n largest counts, largest first (ties: the lower index first); n <= |h|.
//   kSample  n independent draws j ~ h_j / sum h by inverse CDF on 53-bit uniforms from
//            std::mt19937_64(seed) (the same draws on every platform). If every count is 0 (the
//            noise and threshold left nothing) the draws are uniform and `uniform` is set.
// ConfigError for n < 0, an empty h with n > 0, or (rank) n > |h|; RuntimeError for a negative
// or non-finite count.
std::vector<int64_t> select(const std::vector<double>& h, int64_t n, Selection mode, uint64_t seed,
                            bool* uniform = nullptr);

}  // namespace dpft::pe
