#include "methods/ctcl/pe_population.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "core/util/error.hpp"

namespace dpft::pe {

std::vector<double> threshold(const std::vector<double>& h, double H) {
  DPFT_CHECK_AS(ConfigError, H >= 0 && std::isfinite(H), "PE: threshold {} must be >= 0", H);
  std::vector<double> out(h.size());
  for (size_t j = 0; j < h.size(); ++j) out[j] = std::max(h[j] - H, 0.0);
  return out;
}

std::vector<int64_t> select(const std::vector<double>& h, int64_t n, Selection mode, uint64_t seed,
                            bool* uniform) {
  if (uniform) *uniform = false;
  const int64_t M = static_cast<int64_t>(h.size());
  DPFT_CHECK_AS(ConfigError, n >= 0, "PE: cannot select {} candidates", n);
  if (n == 0) return {};
  DPFT_CHECK_AS(ConfigError, M > 0, "PE: nothing to select {} candidates from", n);
  for (int64_t j = 0; j < M; ++j)
    DPFT_CHECK_AS(RuntimeError, std::isfinite(h[j]) && h[j] >= 0,
                  "PE: count {} of candidate {} is not a finite count >= 0", h[j], j);
  if (mode == Selection::kRank) {
    DPFT_CHECK_AS(ConfigError, n <= M,
                  "PE: rank selection of {} from {} candidates; the population must hold at "
                  "least num_synthetic candidates (variations >= 1 or keep_selected)",
                  n, M);
    std::vector<int64_t> order(static_cast<size_t>(M));
    std::iota(order.begin(), order.end(), int64_t{0});
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return h[a] > h[b]; });
    order.resize(static_cast<size_t>(n));
    return order;
  }
  // Inverse CDF over the prefix sums.
  std::vector<double> cdf(static_cast<size_t>(M));
  double total = 0;
  for (int64_t j = 0; j < M; ++j) cdf[j] = total += h[j];
  if (!(total > 0)) {
    if (uniform) *uniform = true;
    for (int64_t j = 0; j < M; ++j) cdf[j] = static_cast<double>(j + 1);
    total = static_cast<double>(M);
  }
  std::mt19937_64 gen(seed);
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const double u = static_cast<double>(gen() >> 11) * 0x1.0p-53 * total;  // [0, total)
    // The first j with cdf[j] > u: candidates of count 0 are never drawn.
    const auto it = std::upper_bound(cdf.begin(), cdf.end(), u);
    out.push_back(std::min<int64_t>(it - cdf.begin(), M - 1));
  }
  return out;
}

}  // namespace dpft::pe
