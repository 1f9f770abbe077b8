// Bytes from the kernel CSPRNG (getrandom(2), flags 0: blocks only until the pool is first
// initialised, never after). Used by privacy.secure_noise for the Gaussian noise
// (noise.hpp) and the Poisson batch membership (sampler.hpp): with a seeded user-space
// generator, anyone who knows the seed written to config.resolved.yaml knows every batch and
// every noise draw, and neither the subsampling amplification nor the noise protects anything.
#pragma once
#include <cstddef>
#include <string>

namespace dpft::privacy {

// Fills `bytes` bytes at `out`. RuntimeError naming privacy.secure_noise if the OS refuses.
void os_random(void* out, size_t bytes);
// `bytes` fresh bytes as lower-case hex (a run nonce: names a run, protects nothing).
std::string os_random_hex(size_t bytes);

}  // namespace dpft::privacy
