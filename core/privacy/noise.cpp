#include "core/privacy/noise.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/privacy/os_random.hpp"
#include "core/util/error.hpp"

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

constexpr int kTerms = 4;                      // 2n draws per output, n = 2 (noise.hpp)
constexpr int64_t kBlock = 2048;               // outputs per getrandom call (64 KiB of bits)
constexpr int64_t kWordsPerPair = 4 * kTerms;  // 2 outputs: kTerms Box-Muller pairs, 2 words each

// Writes out[0, count) (count <= kBlock) with N(0, std^2) samples per the secure recipe.
// words: scratch of kBlock / 2 * kWordsPerPair entries.
template <typename T>
void secure_block(T* out, int64_t count, double std, uint64_t* words) {
  int64_t pairs = (count + 1) / 2;
  NoiseSource::os_random(words, static_cast<size_t>(pairs * kWordsPerPair) * 8);
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

template <typename T>
void secure_fill(T* data, int64_t n, double std) {
  int64_t blocks = (n + kBlock - 1) / kBlock;
  at::parallel_for(0, blocks, 4, [&](int64_t b0, int64_t b1) {
    std::vector<uint64_t> words(kBlock / 2 * kWordsPerPair);
    for (int64_t b = b0; b < b1; ++b) {
      int64_t start = b * kBlock;
      secure_block<T>(data + start, std::min(kBlock, n - start), std, words.data());
    }
  });
}

std::string to_hex(const uint8_t* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = d[p[i] >> 4];
    s[2 * i + 1] = d[p[i] & 15];
  }
  return s;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

void NoiseSource::os_random(void* out, size_t bytes) {
  privacy::os_random(out, bytes);
}

NoiseSource::NoiseSource(uint64_t seed, bool secure, NoiseDraw draw)
    : secure_(secure), draw_(draw) {
  DPFT_CHECK_AS(ConfigError, !(secure_ && draw_ == NoiseDraw::kDevice),
                "privacy.noise_draw: device draws seeded noise with the device's generator, but "
                "privacy.secure_noise draws from the host's CSPRNG; use noise_draw auto or host");
  if (secure_) {
    uint64_t probe;
    os_random(&probe, sizeof probe);  // fail at construction, not at the first release
  } else {
    gen_ = at::make_generator<at::CPUGeneratorImpl>((seed ^ (seed >> 32)) & 0xffffffffULL);
  }
}

torch::Tensor NoiseSource::normal(at::IntArrayRef shape, double std, torch::Dtype dtype) {
  DPFT_CHECK(std::isfinite(std) && std >= 0, "noise std {} must be finite and >= 0", std);
  DPFT_CHECK(c10::isFloatingType(dtype), "noise dtype {} is not a floating type",
             std::string(c10::toString(dtype)));
  auto opts = torch::TensorOptions().dtype(dtype).device(torch::kCPU);
  if (std == 0) return torch::zeros(shape, opts);
  if (!secure_) {
    std::lock_guard<std::mutex> lock(mutex_);
    torch::NoGradGuard no_grad;
    return torch::empty(shape, opts).normal_(0.0, std, gen_);
  }
  if (dtype == torch::kFloat32) {
    torch::Tensor t = torch::empty(shape, opts);
    secure_fill(t.data_ptr<float>(), t.numel(), std);
    return t;
  }
  torch::Tensor t = torch::empty(shape, opts.dtype(torch::kFloat64));
  secure_fill(t.data_ptr<double>(), t.numel(), std);
  return dtype == torch::kFloat64 ? t : t.to(dtype);
}

bool NoiseSource::draws_on(const torch::Device& device) const {
  // Never on the CPU: its generator keeps 32 bits of a seed, so per-tensor keys would repeat
  // (and repeat noise) after ~2^16 tensors; CUDA's Philox takes all 64.
  return !secure_ && draw_ != NoiseDraw::kHost && device.is_cuda();
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
  if (secure_) return "";
  std::lock_guard<std::mutex> lock(mutex_);
  torch::Tensor s;
  {
    std::lock_guard<std::mutex> glock(gen_.mutex());
    s = gen_.get_state().contiguous();
  }
  DPFT_CHECK(s.scalar_type() == torch::kUInt8, "torch generator state is not bytes");
  return to_hex(s.data_ptr<uint8_t>(), static_cast<size_t>(s.numel()));
}

void NoiseSource::set_state(const std::string& s) {
  if (secure_) {
    DPFT_CHECK_AS(InputError, s.empty(),
                  "noise state: the checkpoint holds a seeded-noise generator state, but "
                  "privacy.secure_noise is true (secure noise has no state); resume with the "
                  "setting the run was started with");
    return;
  }
  DPFT_CHECK_AS(InputError, !s.empty(),
                "noise state is empty: the checkpoint was written with privacy.secure_noise: "
                "true; resume with the setting the run was started with");
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
