// The Gaussian noise source for DP releases: i.i.d. N(0, std^2) tensors (the Gaussian
// mechanism, Dwork & Roth 2014 "The Algorithmic Foundations of Differential Privacy", Def. A.1 /
// Thm. A.1; in DP-SGD, Abadi et al. 2016 Alg. 1 line "Add noise": std = sigma * C).
//
// Three modes (NoiseMode, core/privacy/modes.hpp; a run's mode comes from
// core/privacy/randomness.hpp, docs/privacy.md "Noise modes"):
//
// Keyed mode (the default for a run): the secure recipe below, its bits read from a ChaCha20
// keystream of the run's secret key (keystream.hpp) instead of getrandom(2). Unpredictable to
// anyone without <run>/noise.key, reproducible with it: the state is the stream offset (and the
// key's fingerprint, so a checkpoint is never continued under another key). A tensor of n
// values reserves ceil(n / 2048) blocks of 128 KiB of the stream, block b of the tensor reads
// its own range, so the numbers do not depend on the thread count.
//
// Seeded mode (privacy.noise_seed): a dedicated torch CPU generator
// (at::CPUGeneratorImpl, an MT19937) created from the seed, so the noise never depends on or
// disturbs torch's global RNG. Samples are torch's own normal_ (Box-Muller on float uniforms).
// Reproducible for a seed with the same LibTorch build on CPUs with the same vector
// capability (torch picks an AVX2 kernel at run time whose rounding differs from the scalar
// one). The generator keeps only 32 bits of seed: it is seeded with (seed ^ (seed >> 32)) mod
// 2^32 so that seeds differing only in their high half still give different streams.
// state() is the generator's get_state() bytes in hex; set_state() continues exactly.
//
// Device draws (normal_on, NoiseDraw in core/privacy/modes.hpp): a seeded source asked for noise
// on a GPU (draw auto or device) takes one 64-bit key from its host generator per tensor and
// draws the tensor with a copy of the device's generator (CUDA: Philox4x32-10 and torch's
// Box-Muller) seeded with that key, on the device: no 4-bytes-per-value host draw and copy.
// Still reproducible for a seed (on the same GPU model and LibTorch), and the host state still
// determines everything, so checkpoints are unchanged; but a GPU run then draws other numbers
// than the CPU run (draw host keeps them equal). Device draws are seeded-mode and GPU only: a
// secure source refuses kDevice at construction and draws on the host under kAuto, and CPU
// tensors are always drawn by normal() (a CPU generator keeps 32 bits of its seed, so per-tensor
// keys would collide, repeating noise, after ~2^16 tensors; Philox's seed has 64).
//
// OS mode (privacy.secure_noise true): not reproducible, nothing to checkpoint.
//  * Randomness: every bit comes from the kernel CSPRNG through getrandom(2) (flags 0: blocks
//    only until the pool is first initialised; EINTR and short reads are retried); no
//    user-space generator whose state could be recovered. RuntimeError if getrandom fails.
//  * Floating-point attacks: a textbook sampler maps ~2^53 uniforms to a sparse, structured set
//    of doubles, so the noisy output can reveal which input was used (Mironov 2012, "On
//    Significance of the Least Significant Bits for Differential Privacy", for Laplace; Jin
//    et al. 2022, "Are We There Yet? Timing and Floating-Point Attacks on Differential Privacy
//    Systems", Sec. IV, for Gaussians and DP-SGD). We use the mitigation of Holohan & Braghin
//    2021, "Secure Random Sampling in Differential Privacy" (ESORICS), Sec. 5, in the
//    parameters Opacus's secure_mode uses (opacus/optimizers/optimizer.py, _generate_noise):
//    each output is (Z_1 + Z_2 + Z_3 + Z_4) / 2 with Z_k i.i.d. N(0, 1), i.e. 2n = 4 draws for
//    n = 2, which raises an attacker's search from ~2^53 to ~2^159 candidate draws. Each Z_k is
//    the cosine (or sine) output of its own Box-Muller pair (Box & Muller 1958):
//    Z = sqrt(-2 ln u1) cos(2 pi u2), u1 in (0, 1], u2 in [0, 1) on the 2^-53 grid from 64
//    CSPRNG bits each. The sibling sine outputs go to the *next* output element, never into the
//    same sum (cos t + sin t = sqrt(2) cos(t - pi/4) would collapse two draws into one:
//    Holohan & Braghin, footnote 2). Arithmetic is in double; rounding to `dtype` is last.
//    Cost per output: 32 bytes from getrandom, 2 log, 2 sqrt, 2 sincos (see docs/privacy.md
//    for measured throughput). This is a mitigation, not a proof of exact DP in floating point.
#pragma once
#include <torch/torch.h>

#include "core/privacy/keystream.hpp"
#include "core/privacy/modes.hpp"

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

namespace dpft::privacy {

class NoiseSource {
 public:
  // Seeded (secure false) or OS (secure true) mode. ConfigError for secure with
  // NoiseDraw::kDevice (the CSPRNG is the host's).
  NoiseSource(uint64_t seed, bool secure, NoiseDraw draw = NoiseDraw::kHost);
  // Keyed mode: bits from `stream` (ConfigError with NoiseDraw::kDevice: the keystream is the
  // host's, and a device generator seeded from it would not be a CSPRNG).
  explicit NoiseSource(const KeyStream& stream, NoiseDraw draw = NoiseDraw::kHost);

  // i.i.d. N(0, std^2) CPU tensor of `shape` (any rank; numel may be 0) and floating `dtype`.
  // std must be finite and >= 0 (0 gives zeros and draws nothing). Thread-safe.
  torch::Tensor normal(at::IntArrayRef shape, double std, torch::Dtype dtype = torch::kFloat32);
  // The same distribution as a float32 tensor on `device`, drawn where draws_on(device) says.
  torch::Tensor normal_on(at::IntArrayRef shape, double std, const torch::Device& device);
  // Whether normal_on(.., device) draws on the device (see the header comment).
  bool draws_on(const torch::Device& device) const;
  bool secure() const { return mode_ == NoiseMode::kOs; }
  NoiseMode mode() const { return mode_; }
  NoiseDraw draw() const { return draw_; }

  // Seeded mode: the generator state as lowercase hex; keyed mode: "keyed-noise-v1
  // <key fingerprint> <offset>"; OS mode: "" (nothing to restore).
  std::string state() const;
  // Restores state(). InputError if the text is not such a state, or its mode (or key)
  // differs from this source's.
  void set_state(const std::string& s);

  // Fills `bytes` bytes at `out` from getrandom(2). RuntimeError if the OS refuses.
  static void os_random(void* out, size_t bytes);

 private:
  NoiseMode mode_;
  NoiseDraw draw_;
  mutable at::Generator gen_;  // seeded mode only (mutable: locking its mutex in state())
  std::unique_ptr<KeyStream> stream_;  // keyed mode only
  uint64_t offset_ = 0;                // keyed mode: the next unread keystream byte
  mutable std::mutex mutex_;           // serialises state()/set_state() against normal()

  template <typename T>
  void fill(T* data, int64_t n, double std);  // keyed / OS mode
};

}  // namespace dpft::privacy
