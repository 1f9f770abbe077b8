// Where a run's private randomness comes from: the one place that builds the noise sources
// and Poisson samplers of DP releases (docs/privacy.md, "Noise modes"). `seed` governs only
// what is public (initialisation, public sampling, generation); the noise and the batches
// come from here, in one of three modes (NoiseMode, core/privacy/modes.hpp):
//
//   keyed   (default)                 ChaCha20 keystreams of the run's secret key
//                                     (keystream.hpp), kept in <run>/noise.key: unpredictable
//                                     from anything an export holds, exact on --resume
//   seeded  (privacy.noise_seed: N)   generators seeded by derive_seed(N, stream), as dpft did
//                                     from `seed` before keyed noise: reproducible research
//                                     noise that anyone with N can replay and subtract, so the
//                                     run and its outputs are labelled "noise seeded: not
//                                     shareable" and `dpft export` refuses them
//   os      (privacy.secure_noise)    the kernel CSPRNG for every draw: not reproducible, and a
//                                     resumed run draws fresh batches
//
// Streams are named ("noise", "sampler", "ctcl-histogram", ...): each consumer has its own, so
// how much one draws never shifts another. A source built twice from one stream name repeats
// its numbers (in keyed and seeded mode), so each name is built once per run.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/privacy/keystream.hpp"
#include "core/privacy/modes.hpp"
#include "core/privacy/noise.hpp"
#include "core/privacy/sampler.hpp"

namespace dpft::privacy {

// The label of a seeded run and its outputs (metrics.json, manifest.json, exports).
inline constexpr const char* kNoiseSeededLabel = "noise seeded: not shareable";

class PrivateRandomness {
 public:
  static PrivateRandomness keyed(const RunKey& key);
  static PrivateRandomness seeded(uint64_t noise_seed);
  static PrivateRandomness os();
  // A run's: os when `secure`, seeded when `noise_seed` is set, else keyed. Keyed with
  // `key_holder` (rank 0): a fresh run draws the key and writes it to `key_file` (0600) before
  // any release; a resumed run reads it back (InputError when it is missing or damaged: a new
  // key would draw a second, unrecorded release). Keyed without `key_holder` (other ranks,
  // which draw no noise and no batch): a throwaway key of its own, so the secret never travels.
  static PrivateRandomness for_run(bool secure, std::optional<int64_t> noise_seed,
                                   const std::filesystem::path& key_file, bool resume,
                                   bool key_holder);
  // Benchmarks only (dpft bench): the draws of `mode` with a fresh key, seed 0 or the OS.
  static PrivateRandomness for_benchmark(NoiseMode mode);

  NoiseMode mode() const { return mode_; }
  // Whether the run's noise is unpredictable to an export's receiver (every mode but seeded).
  bool shareable() const { return mode_ != NoiseMode::kSeeded; }

  // The Gaussian noise source of stream `stream` (`draw`: where a GPU tensor's noise is drawn).
  std::unique_ptr<NoiseSource> noise(std::string_view stream,
                                     NoiseDraw draw = NoiseDraw::kHost) const;
  // The Poisson sampler of stream `stream` over n examples at rate q.
  std::unique_ptr<PoissonSampler> poisson(int64_t n, double q, std::string_view stream) const;

  // {"mode", "shareable"[, "noise_seed", "label"][, "key_fingerprint"]} for metrics.json and
  // manifest.json. The fingerprint names the key without revealing it.
  nlohmann::json to_json() const;

 private:
  NoiseMode mode_ = NoiseMode::kKeyed;
  std::optional<RunKey> key_;
  uint64_t seed_ = 0;
};

}  // namespace dpft::privacy
