#include "core/privacy/data_key.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "core/privacy/os_random.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "core/util/hex.hpp"
#include "core/util/sha256.hpp"

namespace dpft::privacy {

namespace fs = std::filesystem;

namespace {

constexpr const char* kDataKeyTag = "dpft.data_key/1";

std::string_view key_view(const std::array<uint8_t, DataKey::kBytes>& k) {
  return {reinterpret_cast<const char*>(k.data()), k.size()};
}

// Creates `path` holding a fresh key unless it exists: the key is written to a private temp
// file, then hard-linked to `path`, which fails when another process linked its key first.
void create_key_file(const fs::path& path) {
  std::array<uint8_t, DataKey::kBytes> k{};
  os_random(k.data(), k.size());
  const std::string text = std::string(kDataKeyTag) + " " + to_hex(k.data(), k.size()) + "\n";
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  const fs::path tmp = path.string() + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  DPFT_CHECK_AS(RuntimeError, fd >= 0,
                "cannot create the data key {} ({}); set DPFT_DATA_KEY to a writable file path",
                path.string(), std::strerror(errno));
  const bool wrote = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                     ::fsync(fd) == 0;
  ::close(fd);
  const int linked = wrote ? ::link(tmp.c_str(), path.c_str()) : -1;
  const int err = errno;
  ::unlink(tmp.c_str());
  DPFT_CHECK_AS(RuntimeError, wrote && (linked == 0 || err == EEXIST),
                "cannot create the data key {} ({}); set DPFT_DATA_KEY to a writable file path",
                path.string(), std::strerror(err));
  fsync_path(path.parent_path());
}

}  // namespace

fs::path DataKey::default_path() {
  if (const char* p = std::getenv("DPFT_DATA_KEY"); p && *p) return p;
  if (const char* x = std::getenv("XDG_CONFIG_HOME"); x && *x)
    return fs::path(x) / "dpft" / "data.key";
  const char* home = std::getenv("HOME");
  DPFT_CHECK_AS(RuntimeError, home && *home,
                "no place for the data key (provenance records name private data with it): set "
                "DPFT_DATA_KEY to a file path (created on first use) or HOME");
  return fs::path(home) / ".config" / "dpft" / "data.key";
}

DataKey DataKey::load_or_create(const fs::path& path) {
  if (!fs::exists(path)) create_key_file(path);
  const std::string text = read_file(path);
  const std::string want = std::string(kDataKeyTag) + " ";
  bool ok = text.size() >= want.size() + 2 * kBytes && text.compare(0, want.size(), want) == 0 &&
            text.find_first_not_of(" \n", want.size() + 2 * kBytes) == std::string::npos;
  DataKey k;
  for (size_t i = 0; ok && i < kBytes; ++i) {
    const int hi = hex_digit(text[want.size() + 2 * i]),
              lo = hex_digit(text[want.size() + 2 * i + 1]);
    ok = hi >= 0 && lo >= 0;
    if (ok) k.k_[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  DPFT_CHECK_AS(InputError, ok,
                "{}: not a dpft data key ('{} <64 hex digits>'). Restore it from a copy (the "
                "provenance of earlier runs was written with it), or point DPFT_DATA_KEY at "
                "another file",
                path.string(), kDataKeyTag);
  return k;
}

std::string DataKey::fingerprint(const std::string& sha256_hex) const {
  return hmac_sha256_hex(key_view(k_), "dpft.data/1:" + sha256_hex);
}

std::string DataKey::id() const {
  return sha256_hex(std::string("dpft.data_key/1:") + std::string(key_view(k_))).substr(0, 16);
}

}  // namespace dpft::privacy
