// Poisson subsampling for DP-SGD: each step's logical batch contains every example
// independently with probability q (Abadi et al. 2016, "Deep Learning with Differential
// Privacy", Sec. 3.1, "lots"; the sampling the accountants in this directory assume: Mironov,
// Talwar & Zhang 2019, Sec. 3, add/remove adjacency). Batch sizes vary and may be 0.
//
// Exactness. The generator is std::mt19937_64 (fully specified by the C++ standard, so the
// batches of a seed are the same with every compiler and library). For each index i in
// [0, n), in order, one 64-bit output x is drawn, u = (x >> 11) * 2^-53 is uniform on the grid
// {0, 2^-53, ..., 1 - 2^-53}, and i is included iff u < q. The inclusion probability is
// therefore ceil(q 2^53) / 2^53, within 2^-53 of q (exactly q when q 2^53 is an integer, e.g.
// q = 1 or any power of 2), and inclusions are independent across indices and steps as far
// as the generator's outputs are. We do not use geometric skips (gap = floor(log u /
// log(1 - q))): their distribution is exact only in real arithmetic, and the per-index draw
// costs ~8 ns per example (8 ms per batch at N = 10^6 on the 2-core dev machine), negligible
// next to a training step.
//
// Keyed mode (the default for a run; keystream.hpp): the 64-bit words are read from the run's
// secret ChaCha20 keystream "sampler" (8 bytes per example per step, rounded up to a 64-byte
// block), with the same u < q rule: unpredictable without <run>/noise.key, reproducible and
// resumable with it (the state records the stream offset and the key's fingerprint).
//
// Secure (OS) mode (privacy.secure_noise: true): the 64-bit words come from the kernel CSPRNG
// (os_random.hpp) instead of the seeded generator, with the same u < q rule, so the inclusion
// probability is the same ceil(q 2^53) / 2^53. The batches are then not reproducible and not
// predictable from the seed in config.resolved.yaml: the subsampling amplification the
// accountant credits assumes the adversary does not know which examples each batch holds.
// Nothing needs checkpointing (fresh randomness after a resume is still Poisson); the state
// records only n, q and the number of draws.
#pragma once
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/privacy/keystream.hpp"

namespace dpft::privacy {

class PoissonSampler {
 public:
  // n: data set size (>= 1); q: sampling rate in (0, 1]. ConfigError otherwise. secure: draw
  // from the OS CSPRNG and ignore `seed` (RuntimeError at construction if it is unavailable).
  PoissonSampler(int64_t n, double q, uint64_t seed, bool secure = false);
  // Keyed mode: words from `stream`.
  PoissonSampler(int64_t n, double q, const KeyStream& stream);

  // The next batch: indices in [0, n), ascending, each present independently with probability
  // q; may be empty.
  std::vector<int64_t> next();
  // Batches drawn so far.
  int64_t draws() const { return draws_; }
  int64_t size() const { return n_; }
  double rate() const { return q_; }
  bool secure() const { return secure_; }

  // Everything needed to continue exactly: a text line "poisson-v1 <n> <q as hex float>
  // <draws> <mt19937_64 state>" (keyed mode: "poisson-keyed-v1 <n> <q> <draws> <key
  // fingerprint> <offset>"; secure mode: "poisson-secure-v1 <n> <q> <draws>"). set_state
  // throws InputError if the text is malformed, its n or q differ from this sampler's (a
  // resumed run must sample the same data at the same rate, or its privacy accounting would be
  // wrong), or it was written in another mode (or, keyed, under another key).
  std::string state() const;
  void set_state(const std::string& s);

 private:
  int64_t n_;
  double q_;
  bool secure_;
  int64_t draws_ = 0;
  std::mt19937_64 rng_;                // seeded mode only
  std::unique_ptr<KeyStream> stream_;  // keyed mode only
  uint64_t offset_ = 0;                // keyed mode: the next unread keystream byte
};

}  // namespace dpft::privacy
