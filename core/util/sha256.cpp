#include "core/util/sha256.hpp"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <array>
#include <fstream>
#include <memory>
#include <vector>

#include "core/util/error.hpp"
#include "core/util/hex.hpp"

namespace dpft {

namespace sha256_detail {

struct DigestCtx {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx{EVP_MD_CTX_new(), &EVP_MD_CTX_free};
  DigestCtx() {
    DPFT_CHECK(ctx && EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) == 1,
               "OpenSSL: cannot initialise SHA-256");
  }
  void update(const void* p, size_t n) {
    DPFT_CHECK(EVP_DigestUpdate(ctx.get(), p, n) == 1, "OpenSSL: SHA-256 update failed");
  }
  std::string hex() {
    std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
    unsigned int len = 0;
    DPFT_CHECK(EVP_DigestFinal_ex(ctx.get(), md.data(), &len) == 1 && len == 32,
               "OpenSSL: SHA-256 final failed");
    return to_hex(md.data(), len);
  }
};

}  // namespace sha256_detail

using sha256_detail::DigestCtx;

struct Sha256::Ctx : DigestCtx {};
Sha256::Sha256() : ctx_(std::make_unique<Ctx>()) {}
Sha256::~Sha256() = default;
void Sha256::update(const void* data, size_t n) {
  ctx_->update(data, n);
}
std::string Sha256::hex() {
  return ctx_->hex();
}

std::string sha256_hex(std::string_view data) {
  DigestCtx d;
  d.update(data.data(), data.size());
  return d.hex();
}

std::string hmac_sha256_hex(std::string_view key, std::string_view data) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned int len = 0;
  DPFT_CHECK(HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
                  reinterpret_cast<const unsigned char*>(data.data()), data.size(), md.data(),
                  &len) != nullptr &&
                 len == 32,
             "OpenSSL: HMAC-SHA256 failed");
  return to_hex(md.data(), len);
}

std::string sha256_file_hex(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  DPFT_CHECK_AS(InputError, static_cast<bool>(in), "cannot read {} to hash it (check the path)",
                path.string());
  DigestCtx d;
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (in.gcount() > 0) d.update(buf.data(), static_cast<size_t>(in.gcount()));
  }
  DPFT_CHECK_AS(InputError, in.eof(), "error while reading {} to hash it", path.string());
  return d.hex();
}

}  // namespace dpft
