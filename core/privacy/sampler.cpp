#include "core/privacy/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/privacy/os_random.hpp"
#include "core/util/error.hpp"

namespace dpft::privacy {

namespace {

constexpr const char* kStateTag = "poisson-v1";
constexpr const char* kSecureTag = "poisson-secure-v1";
constexpr int64_t kSecureBlock = 4096;  // words per getrandom call (32 KiB)

std::string hex_double(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", x);
  return buf;
}

}  // namespace

PoissonSampler::PoissonSampler(int64_t n, double q, uint64_t seed, bool secure)
    : n_(n), q_(q), secure_(secure), rng_(seed) {
  DPFT_CHECK_AS(ConfigError, n >= 1, "Poisson sampling needs a non-empty data set, got {} examples",
                n);
  DPFT_CHECK_AS(ConfigError, q > 0 && q <= 1,
                "privacy.sampling_rate = {} must be in (0, 1] (batch_size / N for Poisson "
                "sampling)",
                q);
  if (secure_) {
    uint64_t probe;
    os_random(&probe, sizeof probe);  // fail at construction, not at the first batch
  }
}

std::vector<int64_t> PoissonSampler::next() {
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(std::min<double>(n_, q_ * n_ + 6 * std::sqrt(q_ * n_) + 16)));
  if (secure_) {
    std::vector<uint64_t> words(static_cast<size_t>(std::min(n_, kSecureBlock)));
    for (int64_t start = 0; start < n_; start += kSecureBlock) {
      const int64_t m = std::min(kSecureBlock, n_ - start);
      os_random(words.data(), static_cast<size_t>(m) * sizeof(uint64_t));
      for (int64_t j = 0; j < m; ++j) {
        double u = static_cast<double>(words[static_cast<size_t>(j)] >> 11) * 0x1.0p-53;
        if (u < q_) out.push_back(start + j);
      }
    }
  } else {
    for (int64_t i = 0; i < n_; ++i) {
      double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
      if (u < q_) out.push_back(i);
    }
  }
  ++draws_;
  return out;
}

std::string PoissonSampler::state() const {
  std::ostringstream os;
  os << (secure_ ? kSecureTag : kStateTag) << ' ' << n_ << ' ' << hex_double(q_) << ' ' << draws_;
  if (!secure_) os << ' ' << rng_;
  return os.str();
}

void PoissonSampler::set_state(const std::string& s) {
  std::istringstream is(s);
  std::string tag, qs;
  int64_t n = 0, draws = 0;
  is >> tag >> n >> qs >> draws;
  if (is && (tag == kStateTag || tag == kSecureTag) && (tag == kSecureTag) != secure_)
    throw InputError(fmt::format(
        "Poisson sampler state was written with privacy.secure_noise: {} but this run has {}: "
        "resume with the same setting",
        !secure_, secure_));
  const char* want = secure_ ? kSecureTag : kStateTag;
  DPFT_CHECK_AS(InputError, is && tag == want && draws >= 0,
                "Poisson sampler state is malformed (expected '{} <n> <q> <draws> [<rng>]', got "
                "'{}...')",
                want, s.substr(0, 40));
  char* end = nullptr;
  double q = std::strtod(qs.c_str(), &end);
  DPFT_CHECK_AS(InputError, end && *end == '\0', "Poisson sampler state has a bad rate '{}'", qs);
  DPFT_CHECK_AS(InputError, n == n_ && q == q_,
                "Poisson sampler state was saved for N = {}, q = {} but this run has N = {}, "
                "q = {}: resume with the same data and privacy.sampling_rate",
                n, q, n_, q_);
  std::mt19937_64 rng = rng_;
  if (!secure_) {
    is >> rng;
    DPFT_CHECK_AS(InputError, !is.fail(), "Poisson sampler state has a malformed generator state");
  }
  is >> std::ws;
  DPFT_CHECK_AS(InputError, is.eof(), "Poisson sampler state has trailing text");
  rng_ = rng;
  draws_ = draws;
}

}  // namespace dpft::privacy
