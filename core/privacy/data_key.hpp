// The data holder's key: names private data in provenance records (core/run/provenance.hpp)
// so that the holder's own runs recognise it and nobody else can test a guess of it
// (docs/privacy.md, "Provenance").
//
// Why: a provenance record says which private data an artefact came from, so that a later run
// on the same data composes the artefact's releases. Written as the data file's SHA-256, it
// would tell the same to anyone who receives the artefact: knowing every record but one, they
// hash the file for each candidate and learn the missing record exactly (the hash is a
// deterministic function of the data, with no noise). A keyed fingerprint,
// HMAC-SHA256(key, "dpft.data/1:" + SHA-256 of the file) (RFC 2104), under a 256-bit key only
// the data holder has, cannot be computed without the key.
//
// The key lives in a file: $DPFT_DATA_KEY when set, else $XDG_CONFIG_HOME/dpft/data.key, else
// $HOME/.config/dpft/data.key. The first run that needs it creates it (256 bits from the OS
// CSPRNG, mode 0600, created atomically so that concurrent runs agree on one key). Every
// machine that trains on the same data should share it (a cluster's shared home does); runs
// under different keys cannot tell whether their data are the same (DataMatch::kUnknown).
#pragma once
#include <array>
#include <cstdint>
#include <filesystem>
#include <string>

namespace dpft::privacy {

class DataKey {
 public:
  static constexpr size_t kBytes = 32;
  // Where the key is (see above); RuntimeError when neither DPFT_DATA_KEY nor a home is set.
  static std::filesystem::path default_path();
  // The key at `path`, created first when it does not exist. RuntimeError naming the path (and
  // DPFT_DATA_KEY) when it cannot be created or read; InputError when the file is not a key.
  static DataKey load_or_create(const std::filesystem::path& path);
  static DataKey load_or_create() { return load_or_create(default_path()); }
  // A provenance record's name of the data file whose SHA-256 is `sha256_hex`.
  std::string fingerprint(const std::string& sha256_hex) const;
  // The first 16 hex digits of SHA-256("dpft.data_key/1:" + key): says whether two records
  // were made under the same key without revealing it.
  std::string id() const;

 private:
  std::array<uint8_t, kBytes> k_{};
};

}  // namespace dpft::privacy
