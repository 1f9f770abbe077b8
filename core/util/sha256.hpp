// SHA-256 (FIPS 180-4) through OpenSSL's libcrypto: the identity of a private data file and the
// integrity hash of a checkpoint's privacy ledger (core/run/privacy_lock.hpp).
#pragma once
#include <filesystem>
#include <string>
#include <string_view>

namespace dpft {

// Lower-case hex digest of `data`.
std::string sha256_hex(std::string_view data);

// Lower-case hex digest of a file's bytes, read in 1 MiB blocks. InputError naming the file if
// it cannot be read.
std::string sha256_file_hex(const std::filesystem::path& path);

}  // namespace dpft
