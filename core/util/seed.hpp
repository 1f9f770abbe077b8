// Independent random streams from one experiment seed: derive_seed(seed, "noise") and
// derive_seed(seed, "sampler") never coincide, so changing how much randomness one consumer
// draws never shifts another's stream (SplitMix64 finaliser over seed and an FNV-1a name hash).
#pragma once
#include <cstdint>
#include <string_view>

namespace dpft {

inline uint64_t derive_seed(uint64_t seed, std::string_view stream) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : stream) h = (h ^ c) * 1099511628211ull;
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (h | 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace dpft
