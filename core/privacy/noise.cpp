#include "core/privacy/noise.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <vector>

#include "core/privacy/os_random.hpp"
#include "core/util/error.hpp"
#include "core/util/hex.hpp"

namespace dpft::privacy {

namespace {

// Uniform on {2^-53, 2 * 2^-53, ..., 1}: never 0, so log() is finite (|Z| <= sqrt(106 ln 2)).
inline double uniform_open0(uint64_t x) {
  return static_cast<double>((x >> 11) + 1) * 0x1.0p-53;
}
// Uniform on {0, 2^-53, ..., 1 - 2^-53}.
inline double uniform_open1(uint64_t x) {
  return static_cast<double>(x >> 11) * 0x1.0p-53;
}

constexpr const char* kNoiseKeyedTag = "keyed-noise-v1";
constexpr int kTerms = 4;                      // 2n draws per output, n = 2 (noise.hpp)
constexpr int64_t kBlock = 2048;               // outputs per getrandom call (64 KiB of bits)
constexpr int64_t kWordsPerPair = 4 * kTerms;  // 2 outputs: kTerms Box-Muller pairs, 2 words each

constexpr uint64_t kBlockBytes = kBlock / 2 * kWordsPerPair * 8;  // words of one full block

// Writes out[0, count) (count <= kBlock) with N(0, std^2) samples per the secure recipe from
// `words` (at least (count + 1) / 2 * kWordsPerPair random 64-bit words).
template <typename T>
void secure_block(T* out, int64_t count, double std, const uint64_t* words) {
  int64_t pairs = (count + 1) / 2;
  const double scale = std / std::sqrt(static_cast<double>(kTerms));
  const uint64_t* w = words;
  for (int64_t j = 0; j < pairs; ++j, w += kWordsPerPair) {
    double c = 0, s = 0;
    for (int k = 0; k < kTerms; ++k) {
      double r = std::sqrt(-2.0 * std::log(uniform_open0(w[2 * k])));
      double t = 2.0 * M_PI * uniform_open1(w[2 * k + 1]);
      c += r * std::cos(t);
      s += r * std::sin(t);
    }
    out[2 * j] = static_cast<T>(c * scale);
    if (2 * j + 1 < count) out[2 * j + 1] = static_cast<T>(s * scale);
  }
}

// The secure recipe over data[0, n), block b's words from words_for(b, words, bytes).
template <typename T, typename Words>
void secure_fill(T* data, int64_t n, double std, const Words& words_for) {
  int64_t blocks = (n + kBlock - 1) / kBlock;
  at::parallel_for(0, blocks, 4, [&](int64_t b0, int64_t b1) {
    std::vector<uint64_t> words(kBlock / 2 * kWordsPerPair);
    for (int64_t b = b0; b < b1; ++b) {
      int64_t start = b * kBlock;
      const int64_t count = std::min(kBlock, n - start);
      words_for(b, words.data(), static_cast<size_t>((count + 1) / 2 * kWordsPerPair) * 8);
      secure_block<T>(data + start, count, std, words.data());
    }
  });
}

}  // namespace

void NoiseSource::os_random(void* out, size_t bytes) {
  privacy::os_random(out, bytes);
}

NoiseSource::NoiseSource(uint64_t seed, bool secure, NoiseDraw draw)
    : mode_(secure ? NoiseMode::kOs : NoiseMode::kSeeded), draw_(draw) {
  DPFT_CHECK_AS(ConfigError, !(secure && draw_ == NoiseDraw::kDevice),
                "privacy.noise_draw: device draws seeded noise with the device's generator, but "
                "privacy.secure_noise draws from the host's CSPRNG; use noise_draw auto or host");
  if (secure) {
    uint64_t probe;
    os_random(&probe, sizeof probe);  // fail at construction, not at the first release
  } else {
    gen_ = at::make_generator<at::CPUGeneratorImpl>((seed ^ (seed >> 32)) & 0xffffffffULL);
  }
}

NoiseSource::NoiseSource(const KeyStream& stream, NoiseDraw draw)
    : mode_(NoiseMode::kKeyed), draw_(draw), stream_(std::make_unique<KeyStream>(stream)) {
  DPFT_CHECK_AS(ConfigError, draw_ != NoiseDraw::kDevice,
                "privacy.noise_draw: device draws noise with the device's generator, which is "
                "no CSPRNG; keyed noise (the default) is drawn on the host: use noise_draw auto "
                "or host, or set privacy.noise_seed for reproducible device draws");
}

template <typename T>
void NoiseSource::fill(T* data, int64_t n, double std) {
  if (mode_ == NoiseMode::kOs) {
    secure_fill(data, n, std, [](int64_t, uint64_t* w, size_t bytes) { os_random(w, bytes); });
    return;
  }
  uint64_t base = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    base = offset_;
    offset_ += static_cast<uint64_t>((n + kBlock - 1) / kBlock) * kBlockBytes;
  }
  const KeyStream& ks = *stream_;
  secure_fill(data, n, std, [&](int64_t b, uint64_t* w, size_t bytes) {
    ks.read(base + static_cast<uint64_t>(b) * kBlockBytes, w, bytes);
  });
}

torch::Tensor NoiseSource::normal(at::IntArrayRef shape, double std, torch::Dtype dtype) {
  DPFT_CHECK(std::isfinite(std) && std >= 0, "noise std {} must be finite and >= 0", std);
  DPFT_CHECK(c10::isFloatingType(dtype), "noise dtype {} is not a floating type",
             std::string(c10::toString(dtype)));
  auto opts = torch::TensorOptions().dtype(dtype).device(torch::kCPU);
  if (std == 0) return torch::zeros(shape, opts);
  if (mode_ == NoiseMode::kSeeded) {
    std::lock_guard<std::mutex> lock(mutex_);
    torch::NoGradGuard no_grad;
    return torch::empty(shape, opts).normal_(0.0, std, gen_);
  }
  if (dtype == torch::kFloat32) {
    torch::Tensor t = torch::empty(shape, opts);
    fill(t.data_ptr<float>(), t.numel(), std);
    return t;
  }
  torch::Tensor t = torch::empty(shape, opts.dtype(torch::kFloat64));
  fill(t.data_ptr<double>(), t.numel(), std);
  return dtype == torch::kFloat64 ? t : t.to(dtype);
}

bool NoiseSource::draws_on(const torch::Device& device) const {
  // Never on the CPU: its generator keeps 32 bits of a seed, so per-tensor keys would repeat
  // (and repeat noise) after ~2^16 tensors; CUDA's Philox takes all 64.
  return mode_ == NoiseMode::kSeeded && draw_ != NoiseDraw::kHost && device.is_cuda();
}

torch::Tensor NoiseSource::normal_on(at::IntArrayRef shape, double std,
                                     const torch::Device& device) {
  if (!draws_on(device)) return normal(shape, std, torch::kFloat32).to(device);
  DPFT_CHECK(std::isfinite(std) && std >= 0, "noise std {} must be finite and >= 0", std);
  auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  if (std == 0) return torch::zeros(shape, opts);
  uint64_t key = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::lock_guard<std::mutex> glock(gen_.mutex());
    key = gen_.get<at::CPUGeneratorImpl>()->random64();  // one host draw per tensor
  }
  // A private copy of the device's generator type, seeded with the key (CUDA: the Philox seed,
  // offset 0): the default generator (dropout's) is neither read nor advanced.
  at::Generator g = at::globalContext().defaultGenerator(device).clone();
  {
    std::lock_guard<std::mutex> glock(g.mutex());
    g.set_current_seed(key);
  }
  torch::NoGradGuard no_grad;
  return torch::empty(shape, opts).normal_(0.0, std, g);
}

std::string NoiseSource::state() const {
  if (mode_ == NoiseMode::kOs) return "";
  std::lock_guard<std::mutex> lock(mutex_);
  if (mode_ == NoiseMode::kKeyed)
    return fmt::format("{} {} {}", kNoiseKeyedTag, stream_->fingerprint(), offset_);
  torch::Tensor s;
  {
    std::lock_guard<std::mutex> glock(gen_.mutex());
    s = gen_.get_state().contiguous();
  }
  DPFT_CHECK(s.scalar_type() == torch::kUInt8, "torch generator state is not bytes");
  return to_hex(s.data_ptr<uint8_t>(), static_cast<size_t>(s.numel()));
}

void NoiseSource::set_state(const std::string& s) {
  const bool keyed_text = s.rfind(kNoiseKeyedTag, 0) == 0;
  const char* written = s.empty()    ? "os (privacy.secure_noise: true)"
                        : keyed_text ? "keyed (the default)"
                                     : "seeded (privacy.noise_seed, or a dpft before keyed noise)";
  DPFT_CHECK_AS(InputError,
                (mode_ == NoiseMode::kOs) == s.empty() &&
                    (mode_ == NoiseMode::kKeyed) == (keyed_text && !s.empty()),
                "noise state: the checkpoint was written with {} noise, but this run's noise "
                "mode is {}; resume with the settings the run was started with",
                written, name_of(mode_));
  if (mode_ == NoiseMode::kOs) return;
  if (mode_ == NoiseMode::kKeyed) {
    std::istringstream is(s.substr(std::string(kNoiseKeyedTag).size()));
    std::string fp;
    uint64_t offset = 0;
    const bool parsed = static_cast<bool>(is >> fp >> offset);
    std::string extra;
    is >> extra;
    DPFT_CHECK_AS(InputError, parsed && extra.empty() && offset % kBlockBytes == 0,
                  "noise state '{}' is malformed (expected '{} <key fingerprint> <offset>')",
                  s.substr(0, 60), kNoiseKeyedTag);
    DPFT_CHECK_AS(InputError, fp == stream_->fingerprint(),
                  "noise state: the checkpoint's noise was drawn with key {}, but the run's "
                  "noise.key is {}; the key file was replaced: restore it, or start a new run",
                  fp, stream_->fingerprint());
    std::lock_guard<std::mutex> lock(mutex_);
    offset_ = offset;
    return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  std::lock_guard<std::mutex> glock(gen_.mutex());
  int64_t want = gen_.get_state().numel();
  DPFT_CHECK_AS(InputError, static_cast<int64_t>(s.size()) == 2 * want,
                "noise state has {} hex digits, but this LibTorch's CPU generator state needs {}: "
                "was the checkpoint written by another LibTorch version?",
                s.size(), 2 * want);
  torch::Tensor bytes = torch::empty({want}, torch::kUInt8);
  uint8_t* b = bytes.data_ptr<uint8_t>();
  for (int64_t i = 0; i < want; ++i) {
    int hi = hex_digit(s[2 * i]), lo = hex_digit(s[2 * i + 1]);
    DPFT_CHECK_AS(InputError, hi >= 0 && lo >= 0,
                  "noise state has a non-hex character near position {}", 2 * i);
    b[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  try {
    gen_.set_state(bytes);
  } catch (const c10::Error& e) {
    throw InputError(
        fmt::format("noise state was rejected by LibTorch: {}", e.what_without_backtrace()));
  }
}

}  // namespace dpft::privacy
