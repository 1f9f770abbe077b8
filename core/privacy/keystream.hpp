// A run's secret noise key and the keystreams derived from it: the bits of keyed noise
// (noise.hpp) and keyed Poisson batches (sampler.hpp), privacy.noise_seed unset and
// privacy.secure_noise false (docs/privacy.md, "Noise modes").
//
// Why: noise and batches drawn from a generator seeded by `seed` can be replayed by anyone who
// has the run's exported config (it holds the seed): run it again on public data at sigma and
// 2 sigma, subtract, and the noise of the release is known exactly. The run key is 256 bits from
// the OS CSPRNG (os_random.hpp) at run start, written only to <run>/noise.key (mode 0600; never
// exported, removed when the run finishes) and never derived from `seed`.
//
// Keystream: ChaCha20 (RFC 8439, Sec. 2.3-2.4) through OpenSSL's EVP_chacha20, keyed by the
// run key. A named stream ("noise", "sampler", "ctcl-histogram", ...) has its own nonce, so
// streams never overlap: 64-byte block b of stream s is the ChaCha20 block with counter
// b mod 2^32 and 96-bit nonce = SHA-256("dpft.keystream/1:" + s)[0, 8) || le32(b / 2^32), which
// gives each stream 2^64 blocks (2^70 bytes). Any block can be read directly (read(offset)), so
// parallel fills are reproducible whatever the thread count, and a resumed run continues at a
// recorded offset. Without the key, the stream is indistinguishable from random bytes (ChaCha20
// as a PRF); with it, everything is reproducible, which is what --resume needs.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace dpft::privacy {

class RunKey {
 public:
  static constexpr size_t kBytes = 32;
  // 256 fresh bits from the OS CSPRNG (RuntimeError if it is unavailable).
  static RunKey generate();
  // The key in `text` as written by to_text(); InputError naming `where` otherwise.
  static RunKey from_text(const std::string& text, const std::string& where);
  // "dpft.noise_key/1 <64 hex digits>\n".
  std::string to_text() const;
  // The first 16 hex digits of SHA-256 of the key: names it in a checkpoint without revealing
  // it (2^-64 chance that two keys share it).
  std::string fingerprint() const;
  const std::array<uint8_t, kBytes>& bytes() const { return k_; }

 private:
  std::array<uint8_t, kBytes> k_{};
};

// Writes the key to `path` atomically with mode 0600 (RuntimeError naming the path on failure).
void write_run_key(const std::filesystem::path& path, const RunKey& key);
// Reads it back; InputError naming the file when it is missing or malformed.
RunKey read_run_key(const std::filesystem::path& path);

// The raw ChaCha20 keystream (RFC 8439, Sec. 2.4: the encryption of zeros) of `key` (32 bytes)
// and `nonce` (12 bytes) from block `counter` on; bytes <= 64 (2^32 - counter).
void chacha20_keystream(const uint8_t* key, const uint8_t* nonce, uint32_t counter, void* out,
                        size_t bytes);

class KeyStream {
 public:
  KeyStream(const RunKey& key, std::string_view stream);
  // Writes keystream bytes [offset, offset + bytes) of this stream to `out`; offset must be a
  // multiple of 64 (a block boundary). Thread-safe (no shared mutable state).
  void read(uint64_t offset, void* out, size_t bytes) const;
  const std::string& fingerprint() const { return fingerprint_; }  // the key's (RunKey)

 private:
  std::array<uint8_t, RunKey::kBytes> key_{};
  std::array<uint8_t, 8> stream_id_{};
  std::string fingerprint_;
};

}  // namespace dpft::privacy
