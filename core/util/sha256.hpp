// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104) through OpenSSL's libcrypto: the identity of
// a private data file inside a run, the integrity hash of a checkpoint's privacy ledger
// (core/run/privacy_lock.hpp) and the keyed data fingerprints of provenance records.
#pragma once
#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

namespace dpft {

// Incremental hashing (a model's weights, fed a tensor at a time).
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  std::string hex();  // lower-case hex digest; call once

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

// Lower-case hex digest of `data`.
std::string sha256_hex(std::string_view data);

// Lower-case hex HMAC-SHA256 (RFC 2104) of `data` under `key`: a keyed fingerprint that only
// the key's holder can compute (core/privacy/data_key.hpp).
std::string hmac_sha256_hex(std::string_view key, std::string_view data);

// Lower-case hex digest of a file's bytes, read in 1 MiB blocks. InputError naming the file if
// it cannot be read.
std::string sha256_file_hex(const std::filesystem::path& path);

}  // namespace dpft
