#include "core/privacy/os_random.hpp"

#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "core/util/error.hpp"
#include "core/util/hex.hpp"

namespace dpft::privacy {

void os_random(void* out, size_t bytes) {
  auto* p = static_cast<unsigned char*>(out);
  while (bytes > 0) {
    ssize_t r = ::getrandom(p, bytes, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw RuntimeError(
          "privacy.secure_noise: getrandom(2) failed (" + std::string(std::strerror(errno)) +
          "); the OS CSPRNG is unavailable (needs Linux >= 3.17, and no seccomp filter blocking "
          "it); set privacy.secure_noise: false to use seeded noise and sampling instead");
    }
    p += r;
    bytes -= static_cast<size_t>(r);
  }
}

std::string os_random_hex(size_t bytes) {
  std::string raw(bytes, '\0');
  os_random(raw.data(), bytes);
  return to_hex(reinterpret_cast<const uint8_t*>(raw.data()), bytes);
}

}  // namespace dpft::privacy
