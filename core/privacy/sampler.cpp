#include "core/privacy/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/util/error.hpp"

namespace dpft::privacy {

namespace {

constexpr const char* kStateTag = "poisson-v1";

std::string hex_double(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", x);
  return buf;
}

}  // namespace

PoissonSampler::PoissonSampler(int64_t n, double q, uint64_t seed) : n_(n), q_(q), rng_(seed) {
  DPFT_CHECK_AS(ConfigError, n >= 1, "Poisson sampling needs a non-empty data set, got {} examples",
                n);
  DPFT_CHECK_AS(ConfigError, q > 0 && q <= 1,
                "privacy.sampling_rate = {} must be in (0, 1] (batch_size / N for Poisson "
                "sampling)",
                q);
}

std::vector<int64_t> PoissonSampler::next() {
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(std::min<double>(n_, q_ * n_ + 6 * std::sqrt(q_ * n_) + 16)));
  for (int64_t i = 0; i < n_; ++i) {
    double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
    if (u < q_) out.push_back(i);
  }
  ++draws_;
  return out;
}

std::string PoissonSampler::state() const {
  std::ostringstream os;
  os << kStateTag << ' ' << n_ << ' ' << hex_double(q_) << ' ' << draws_ << ' ' << rng_;
  return os.str();
}

void PoissonSampler::set_state(const std::string& s) {
  std::istringstream is(s);
  std::string tag, qs;
  int64_t n = 0, draws = 0;
  is >> tag >> n >> qs >> draws;
  DPFT_CHECK_AS(InputError, is && tag == kStateTag && draws >= 0,
                "Poisson sampler state is malformed (expected '{} <n> <q> <draws> <rng>', got "
                "'{}...')",
                kStateTag, s.substr(0, 40));
  char* end = nullptr;
  double q = std::strtod(qs.c_str(), &end);
  DPFT_CHECK_AS(InputError, end && *end == '\0', "Poisson sampler state has a bad rate '{}'", qs);
  DPFT_CHECK_AS(InputError, n == n_ && q == q_,
                "Poisson sampler state was saved for N = {}, q = {} but this run has N = {}, "
                "q = {}: resume with the same data and privacy.sampling_rate",
                n, q, n_, q_);
  std::mt19937_64 rng;
  is >> rng;
  DPFT_CHECK_AS(InputError, !is.fail(), "Poisson sampler state has a malformed generator state");
  is >> std::ws;
  DPFT_CHECK_AS(InputError, is.eof(), "Poisson sampler state has trailing text");
  rng_ = rng;
  draws_ = draws;
}

}  // namespace dpft::privacy
