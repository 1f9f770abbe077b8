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
constexpr const char* kPoissonKeyedTag = "poisson-keyed-v1";
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

PoissonSampler::PoissonSampler(int64_t n, double q, const KeyStream& stream)
    : PoissonSampler(n, q, 0, false) {
  stream_ = std::make_unique<KeyStream>(stream);
}

std::vector<int64_t> PoissonSampler::next() {
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(std::min<double>(n_, q_ * n_ + 6 * std::sqrt(q_ * n_) + 16)));
  if (secure_ || stream_) {
    std::vector<uint64_t> words(static_cast<size_t>(std::min(n_, kSecureBlock)));
    for (int64_t start = 0; start < n_; start += kSecureBlock) {
      const int64_t m = std::min(kSecureBlock, n_ - start);
      const size_t bytes = static_cast<size_t>(m) * sizeof(uint64_t);
      if (stream_) {  // kSecureBlock words are a whole number of 64-byte blocks
        stream_->read(offset_, words.data(), bytes);
        offset_ += (bytes + 63) / 64 * 64;
      } else {
        os_random(words.data(), bytes);
      }
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
  os << (stream_   ? kPoissonKeyedTag
         : secure_ ? kSecureTag
                   : kStateTag)
     << ' ' << n_ << ' ' << hex_double(q_) << ' ' << draws_;
  if (stream_)
    os << ' ' << stream_->fingerprint() << ' ' << offset_;
  else if (!secure_)
    os << ' ' << rng_;
  return os.str();
}

void PoissonSampler::set_state(const std::string& s) {
  std::istringstream is(s);
  std::string tag, qs;
  int64_t n = 0, draws = 0;
  is >> tag >> n >> qs >> draws;
  const std::string mine = stream_ ? kPoissonKeyedTag : secure_ ? kSecureTag : kStateTag;
  auto mode_of = [](const std::string& t) {
    return t == kPoissonKeyedTag ? "keyed (the default)"
           : t == kSecureTag     ? "os (privacy.secure_noise: true)"
                                 : "seeded (privacy.noise_seed, or a dpft before keyed noise)";
  };
  if (is && (tag == kStateTag || tag == kSecureTag || tag == kPoissonKeyedTag) && tag != mine)
    throw InputError(fmt::format(
        "Poisson sampler state was written with {} batches but this run's are {}: resume with "
        "the settings the run was started with",
        mode_of(tag), mode_of(mine)));
  const char* want = mine.c_str();
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
  uint64_t offset = 0;
  if (stream_) {
    std::string fp;
    is >> fp >> offset;
    DPFT_CHECK_AS(InputError, !is.fail() && offset % 64 == 0,
                  "Poisson sampler state has a malformed keystream position");
    DPFT_CHECK_AS(InputError, fp == stream_->fingerprint(),
                  "Poisson sampler state: the checkpoint's batches were drawn with key {}, but "
                  "the run's noise.key is {}; the key file was replaced: restore it, or start a "
                  "new run",
                  fp, stream_->fingerprint());
  } else if (!secure_) {
    is >> rng;
    DPFT_CHECK_AS(InputError, !is.fail(), "Poisson sampler state has a malformed generator state");
  }
  is >> std::ws;
  DPFT_CHECK_AS(InputError, is.eof(), "Poisson sampler state has trailing text");
  rng_ = rng;
  offset_ = offset;
  draws_ = draws;
}

}  // namespace dpft::privacy
