// The statistics of the histogram mechanisms (mechanism.hpp, Histogram and VoteHistogram).
// A partition's histogram (CTCL's topic histogram, paper 004 Section 3.3; the Gaussian
// mechanism, Dwork & Roth 2014 Thm. A.1): each private record falls in exactly one of K bins, so
// adding or removing a record changes one count by 1 and the count vector has L2 sensitivity
// exactly 1; Histogram::release counts and noises it. The vote vector below has sensitivity 1
// too; VoteHistogram::release noises it.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace dpft::privacy {

// Private Evolution's nearest-neighbour histogram (Lin et al. 2024, DP_NN_HISTOGRAM; Xie et al.
// 2024, Aug-PE): private record i votes 1/sqrt(k) for each of its k nearest candidates
// (nn_idx row i, k distinct indices in [0, M)). The candidates are fixed before the private
// records are looked at (earlier releases and the generator), so adding or removing one record
// changes the vote vector by k entries of 1/sqrt(k): an L2 change of exactly 1, for any k.
// Per privacy unit (unit_of[i]: record i's unit, -1 for a record left out; units.hpp
// unit_of_rows): a unit of one record votes as above; a unit of several records votes the sum
// of its records' vectors scaled to L2 norm at most 1 (v_u / max(1, ||v_u||)), so adding or
// removing a unit still changes the totals by at most 1 in L2.
// Returns the M vote totals. RuntimeError for an index outside [0, M) or repeated in a row.
std::vector<double> nn_votes(const torch::Tensor& nn_idx /* (N, k) int64 */, int64_t M,
                             const std::vector<int64_t>& unit_of /* (N) */);

}  // namespace dpft::privacy
