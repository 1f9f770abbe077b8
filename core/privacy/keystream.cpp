#include "core/privacy/keystream.hpp"

#include <openssl/evp.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "core/privacy/os_random.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "core/util/hex.hpp"
#include "core/util/sha256.hpp"

namespace dpft::privacy {

namespace {

constexpr const char* kKeyTag = "dpft.noise_key/1";
constexpr uint64_t kChachaBlock = 64;  // one ChaCha20 block

std::string key_fingerprint(const uint8_t* k) {
  return sha256_hex(std::string_view(reinterpret_cast<const char*>(k), RunKey::kBytes))
      .substr(0, 16);
}

// One context per call: EVP_CIPHER_CTX is not shareable across threads, and a fill reads
// whole 64 KiB-scale ranges, so the set-up cost (~1 us) is noise.
using CipherCtx = std::unique_ptr<EVP_CIPHER_CTX, decltype(&EVP_CIPHER_CTX_free)>;

}  // namespace

RunKey RunKey::generate() {
  RunKey k;
  os_random(k.k_.data(), kBytes);
  return k;
}

RunKey RunKey::from_text(const std::string& text, const std::string& where) {
  const std::string want = std::string(kKeyTag) + " ";
  bool ok = text.size() >= want.size() + 2 * kBytes && text.compare(0, want.size(), want) == 0;
  RunKey k;
  for (size_t i = 0; ok && i < kBytes; ++i) {
    int hi = hex_digit(text[want.size() + 2 * i]), lo = hex_digit(text[want.size() + 2 * i + 1]);
    ok = hi >= 0 && lo >= 0;
    if (ok) k.k_[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  if (ok) {
    std::string rest = text.substr(want.size() + 2 * kBytes);
    ok = rest.find_first_not_of(" \n") == std::string::npos;
  }
  DPFT_CHECK_AS(InputError, ok,
                "{}: not a dpft noise key ('{} <64 hex digits>'); the file was altered, so the "
                "run's noise cannot continue: start a new run",
                where, kKeyTag);
  return k;
}

std::string RunKey::to_text() const {
  return std::string(kKeyTag) + " " + to_hex(k_.data(), kBytes) + "\n";
}

std::string RunKey::fingerprint() const {
  return key_fingerprint(k_.data());
}

void write_run_key(const std::filesystem::path& path, const RunKey& key) {
  const std::string text = key.to_text();
  AtomicFileWriter w(path, 0600);
  w.write(text.data(), text.size());
  w.commit();
}

RunKey read_run_key(const std::filesystem::path& path) {
  DPFT_CHECK_AS(InputError, std::filesystem::is_regular_file(path),
                "{} is missing: the run's secret noise key is gone, so its noise and batches "
                "cannot continue (a new key would draw a second, unrecorded release); start a "
                "new run",
                path.string());
  return RunKey::from_text(read_file(path), path.string());
}

KeyStream::KeyStream(const RunKey& key, std::string_view stream)
    : key_(key.bytes()), fingerprint_(key.fingerprint()) {
  Sha256 h;
  h.update("dpft.keystream/1:");
  h.update(stream);
  const std::string d = h.hex();
  for (size_t i = 0; i < stream_id_.size(); ++i)
    stream_id_[i] = static_cast<uint8_t>(hex_digit(d[2 * i]) * 16 + hex_digit(d[2 * i + 1]));
}

void chacha20_keystream(const uint8_t* key, const uint8_t* nonce, uint32_t counter, void* out,
                        size_t bytes) {
  DPFT_CHECK(bytes <= ((uint64_t{1} << 32) - counter) * kChachaBlock && bytes <= (1u << 30),
             "chacha20_keystream: {} bytes from block {} pass the 32-bit counter", bytes, counter);
  auto* o = static_cast<unsigned char*>(out);
  std::memset(o, 0, bytes);  // the keystream is the encryption of zeros
  uint8_t iv[16];            // OpenSSL's chacha20 IV: le32 counter || 96-bit nonce
  for (int i = 0; i < 4; ++i) iv[i] = static_cast<uint8_t>(counter >> (8 * i));
  std::memcpy(iv + 4, nonce, 12);
  CipherCtx ctx(EVP_CIPHER_CTX_new(), &EVP_CIPHER_CTX_free);
  int len = 0;
  DPFT_CHECK(ctx && EVP_EncryptInit_ex(ctx.get(), EVP_chacha20(), nullptr, key, iv) == 1 &&
                 EVP_EncryptUpdate(ctx.get(), o, &len, o, static_cast<int>(bytes)) == 1 &&
                 static_cast<size_t>(len) == bytes,
             "OpenSSL: ChaCha20 keystream failed");
}

void KeyStream::read(uint64_t offset, void* out, size_t bytes) const {
  DPFT_CHECK(offset % kChachaBlock == 0, "keystream offset {} is not a block boundary", offset);
  auto* o = static_cast<unsigned char*>(out);
  uint64_t block = offset / kChachaBlock;
  while (bytes > 0) {
    // Blocks up to the next multiple of 2^32 share a nonce; the counter runs below 2^32.
    const uint64_t in_epoch = (uint64_t{1} << 32) - (block & 0xffffffffULL);
    const size_t n = static_cast<size_t>(
        std::min<uint64_t>(bytes, std::min<uint64_t>(in_epoch * kChachaBlock, 1u << 30)));
    uint8_t nonce[12];  // stream id || le32(block / 2^32)
    std::memcpy(nonce, stream_id_.data(), 8);
    const uint32_t epoch = static_cast<uint32_t>(block >> 32);
    for (int i = 0; i < 4; ++i) nonce[8 + i] = static_cast<uint8_t>(epoch >> (8 * i));
    chacha20_keystream(key_.data(), nonce, static_cast<uint32_t>(block & 0xffffffffULL), o, n);
    o += n;
    bytes -= n;
    block += (n + kChachaBlock - 1) / kChachaBlock;
  }
}

}  // namespace dpft::privacy
