#include "core/privacy/randomness.hpp"

#include "core/util/seed.hpp"

namespace dpft::privacy {

PrivateRandomness PrivateRandomness::keyed(const RunKey& key) {
  PrivateRandomness r;
  r.mode_ = NoiseMode::kKeyed;
  r.key_ = key;
  return r;
}

PrivateRandomness PrivateRandomness::seeded(uint64_t noise_seed) {
  PrivateRandomness r;
  r.mode_ = NoiseMode::kSeeded;
  r.seed_ = noise_seed;
  return r;
}

PrivateRandomness PrivateRandomness::os() {
  PrivateRandomness r;
  r.mode_ = NoiseMode::kOs;
  return r;
}

PrivateRandomness PrivateRandomness::for_run(bool secure, std::optional<int64_t> noise_seed,
                                             const std::filesystem::path& key_file, bool resume,
                                             bool key_holder) {
  if (secure) return os();
  if (noise_seed) return seeded(static_cast<uint64_t>(*noise_seed));
  if (!key_holder) return keyed(RunKey::generate());
  if (resume) return keyed(read_run_key(key_file));
  const RunKey key = RunKey::generate();
  write_run_key(key_file, key);
  return keyed(key);
}

PrivateRandomness PrivateRandomness::for_benchmark(NoiseMode mode) {
  switch (mode) {
    case NoiseMode::kSeeded:
      return seeded(0);
    case NoiseMode::kOs:
      return os();
    case NoiseMode::kKeyed:
      break;
  }
  return keyed(RunKey::generate());
}

std::unique_ptr<NoiseSource> PrivateRandomness::noise(std::string_view stream,
                                                      NoiseDraw draw) const {
  switch (mode_) {
    case NoiseMode::kKeyed:
      return std::make_unique<NoiseSource>(KeyStream(*key_, stream), draw);
    case NoiseMode::kSeeded:
      return std::make_unique<NoiseSource>(derive_seed(seed_, stream), false, draw);
    case NoiseMode::kOs:
      break;
  }
  return std::make_unique<NoiseSource>(0, true, draw);
}

std::unique_ptr<PoissonSampler> PrivateRandomness::poisson(int64_t n, double q,
                                                           std::string_view stream) const {
  switch (mode_) {
    case NoiseMode::kKeyed:
      return std::make_unique<PoissonSampler>(n, q, KeyStream(*key_, stream));
    case NoiseMode::kSeeded:
      return std::make_unique<PoissonSampler>(n, q, derive_seed(seed_, stream), false);
    case NoiseMode::kOs:
      break;
  }
  return std::make_unique<PoissonSampler>(n, q, 0, true);
}

nlohmann::json PrivateRandomness::to_json() const {
  nlohmann::json j = {{"mode", name_of(mode_)}, {"shareable", shareable()}};
  if (mode_ == NoiseMode::kSeeded) {
    j["noise_seed"] = seed_;
    j["label"] = kNoiseSeededLabel;
  }
  if (key_) j["key_fingerprint"] = key_->fingerprint();
  return j;
}

}  // namespace dpft::privacy
