// Keyed noise (core/privacy/keystream.hpp, randomness.hpp): the ChaCha20 keystream against
// RFC 8439's test vector and its documented stream layout (nonce = stream id || epoch), keyed
// Gaussian noise's moments, determinism per (key, stream) and independence of the thread count,
// exact resumption and refusal of another key or mode, the keyed Poisson sampler's inclusion
// rate and resumption, the key file (mode 0600, round trip, malformed refused), and
// PrivateRandomness's modes (seeded = the old derive_seed(seed, stream) numbers).
#include <catch2/catch.hpp>

#include <ATen/Parallel.h>
#include <sys/stat.h>

#include <cmath>
#include <filesystem>
#include <vector>

#include "core/privacy/data_key.hpp"
#include "core/privacy/keystream.hpp"
#include "core/privacy/randomness.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "core/util/seed.hpp"
#include "core/util/sha256.hpp"
#include "test_util.hpp"

using namespace dpft;
using namespace dpft::privacy;
using Catch::Matchers::Contains;

namespace {

RunKey key_of(char fill) {  // a fixed key, through the file format
  return RunKey::from_text("dpft.noise_key/1 " + std::string(64, fill) + "\n", "test");
}

std::vector<uint8_t> bytes_of(const KeyStream& ks, uint64_t offset, size_t n) {
  std::vector<uint8_t> b(n);
  ks.read(offset, b.data(), n);
  return b;
}

}  // namespace

TEST_CASE("chacha20_keystream matches RFC 8439's all-zero test vector", "[keyed]") {
  // RFC 8439 App. A.1, test vector #1: key 0, nonce 0, block counter 0.
  const uint8_t want[64] = {0x76, 0xb8, 0xe0, 0xad, 0xa0, 0xf1, 0x3d, 0x90, 0x40, 0x5d, 0x6a,
                            0xe5, 0x53, 0x86, 0xbd, 0x28, 0xbd, 0xd2, 0x19, 0xb8, 0xa0, 0x8d,
                            0xed, 0x1a, 0xa8, 0x36, 0xef, 0xcc, 0x8b, 0x77, 0x0d, 0xc7, 0xda,
                            0x41, 0x59, 0x7c, 0x51, 0x57, 0x48, 0x8d, 0x77, 0x24, 0xe0, 0x3f,
                            0xb8, 0xd8, 0x4a, 0x37, 0x6a, 0x43, 0xb8, 0xf4, 0x15, 0x18, 0xa1,
                            0x1c, 0xc3, 0x87, 0xb6, 0x69, 0xb2, 0xee, 0x65, 0x86};
  uint8_t key[32] = {}, nonce[12] = {}, out[64];
  chacha20_keystream(key, nonce, 0, out, 64);
  CHECK(std::equal(out, out + 64, want));
}

TEST_CASE("KeyStream: blocks read anywhere, streams and keys apart, epochs per the header",
          "[keyed]") {
  const RunKey k = key_of('3');
  KeyStream a(k, "noise"), again(k, "noise"), other(k, "sampler"), other_key(key_of('4'), "noise");
  auto whole = bytes_of(a, 0, 640);
  CHECK(whole == bytes_of(again, 0, 640));
  auto tail = bytes_of(a, 192, 448);  // random access at a block boundary
  CHECK(std::equal(tail.begin(), tail.end(), whole.begin() + 192));
  CHECK(whole != bytes_of(other, 0, 640));
  CHECK(whole != bytes_of(other_key, 0, 640));
  uint8_t b[8];
  CHECK_THROWS_AS(a.read(3, b, 8), RuntimeError);  // not a block boundary

  // Across the 2^32-block boundary: the counter wraps and the nonce's epoch word goes 0 -> 1.
  const std::string d = sha256_hex("dpft.keystream/1:noise");
  uint8_t nonce[2][12] = {};
  for (int i = 0; i < 8; ++i)
    nonce[0][i] = nonce[1][i] = static_cast<uint8_t>(std::stoi(d.substr(2 * i, 2), nullptr, 16));
  nonce[1][8] = 1;
  uint8_t want[128];
  chacha20_keystream(k.bytes().data(), nonce[0], 0xffffffffu, want, 64);
  chacha20_keystream(k.bytes().data(), nonce[1], 0, want + 64, 64);
  auto got = bytes_of(a, ((uint64_t{1} << 32) - 1) * 64, 128);
  CHECK(std::equal(got.begin(), got.end(), want));
  chacha20_keystream(k.bytes().data(), nonce[0], 0, want, 64);
  CHECK(std::equal(whole.begin(), whole.begin() + 64, want));
}

TEST_CASE("keyed noise: N(0, std^2) moments, per (key, stream) determinism, any thread count",
          "[keyed]") {
  const RunKey k = key_of('a');
  NoiseSource a(KeyStream(k, "noise")), b(KeyStream(k, "noise")), c(KeyStream(k, "other"));
  CHECK(a.mode() == NoiseMode::kKeyed);
  torch::Tensor x = a.normal({1 << 20}, 2.0);
  const double n = static_cast<double>(x.numel());
  torch::Tensor d = x.to(torch::kFloat64);
  CHECK(std::fabs(d.mean().item<double>()) <= 4.5 * 2.0 / std::sqrt(n));
  CHECK(std::fabs(d.pow(2).mean().item<double>() / 4.0 - 1) <= 4.5 * std::sqrt(2 / n));
  const double kurt = d.pow(4).mean().item<double>() / std::pow(d.pow(2).mean().item<double>(), 2);
  CHECK(std::fabs(kurt - 3) <= 4.5 * std::sqrt(24 / n));

  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  torch::Tensor y1 = b.normal({1 << 20}, 2.0);
  at::set_num_threads(std::max(2, threads));
  CHECK(torch::equal(x, y1));  // the same stream drawn with 1 thread and with several
  at::set_num_threads(threads);
  CHECK_FALSE(torch::equal(x, c.normal({1 << 20}, 2.0)));
  // Consecutive draws do not overlap: the second tensor is not the first again.
  torch::Tensor s1 = a.normal({100}, 1.0), s2 = a.normal({100}, 1.0);
  CHECK((s1 == s2).sum().item<int64_t>() < 5);
  CHECK_THROWS_AS(NoiseSource(KeyStream(k, "noise"), NoiseDraw::kDevice), ConfigError);
  CHECK_FALSE(a.draws_on(torch::Device(torch::kCUDA, 0)));  // keyed: always the host
}

TEST_CASE("keyed noise: state round trip continues exactly; another key or mode is refused",
          "[keyed]") {
  const RunKey k = key_of('b');
  NoiseSource a(KeyStream(k, "noise"));
  a.normal({3000}, 1.0);
  const std::string st = a.state();
  CHECK_THAT(st, Contains("keyed-noise-v1 " + k.fingerprint()));
  torch::Tensor x1 = a.normal({7}, 1.0), x2 = a.normal({5000}, 0.5, torch::kFloat64);
  NoiseSource b(KeyStream(k, "noise"));
  b.set_state(st);
  CHECK(torch::equal(x1, b.normal({7}, 1.0)));
  CHECK(torch::equal(x2, b.normal({5000}, 0.5, torch::kFloat64)));
  CHECK(b.state() == a.state());

  NoiseSource wrong(KeyStream(key_of('c'), "noise"));
  CHECK_THROWS_WITH(wrong.set_state(st), Contains("noise.key"));
  NoiseSource seeded(1, false), os(1, true);
  CHECK_THROWS_WITH(seeded.set_state(st), Contains("keyed"));
  CHECK_THROWS_WITH(os.set_state(st), Contains("keyed"));
  CHECK_THROWS_WITH(b.set_state(seeded.state()), Contains("seeded"));
  CHECK_THROWS_WITH(b.set_state(""), Contains("secure_noise"));
  CHECK_THROWS_AS(b.set_state("keyed-noise-v1 " + k.fingerprint() + " 12"), InputError);
  CHECK_THROWS_AS(b.set_state("keyed-noise-v1 " + k.fingerprint() + " 0 junk"), InputError);
}

TEST_CASE("keyed Poisson sampler: rate q, deterministic per key, exact resumption",
          "[keyed][sampler]") {
  const RunKey k = key_of('d');
  const int64_t n = 1000, K = 400;
  const double q = 0.1;
  PoissonSampler s(n, q, KeyStream(k, "sampler")), same(n, q, KeyStream(k, "sampler")),
      other(n, q, KeyStream(key_of('e'), "sampler"));
  double total = 0;
  std::vector<int64_t> first;
  for (int64_t i = 0; i < K; ++i) {
    auto b = s.next();
    if (i == 0) first = b;
    total += static_cast<double>(b.size());
    CHECK(b == same.next());
  }
  CHECK(std::fabs(total / K - q * n) <= 4 * std::sqrt(n * q * (1 - q) / K));
  CHECK(first != other.next());
  const std::string st = s.state();
  CHECK_THAT(st, Contains("poisson-keyed-v1"));
  auto next = s.next();
  PoissonSampler r(n, q, KeyStream(k, "sampler"));
  r.set_state(st);
  CHECK(r.draws() == K);
  CHECK(r.next() == next);
  PoissonSampler wrong(n, q, KeyStream(key_of('f'), "sampler")), seeded(n, q, 1);
  CHECK_THROWS_WITH(wrong.set_state(st), Contains("noise.key"));
  CHECK_THROWS_WITH(seeded.set_state(st), Contains("keyed"));
  CHECK_THROWS_WITH(r.set_state(seeded.state()), Contains("seeded"));
}

TEST_CASE("run key: fresh keys differ, the file is 0600 and round trips, damage is refused",
          "[keyed]") {
  const RunKey a = RunKey::generate(), b = RunKey::generate();
  CHECK(a.bytes() != b.bytes());
  CHECK(a.fingerprint().size() == 16);
  const auto dir = std::filesystem::temp_directory_path() / "dpft_test_keyed";
  remove_tree(dir);
  std::filesystem::create_directories(dir);
  const auto p = dir / "noise.key";
  write_run_key(p, a);
  struct stat st {};
  REQUIRE(::stat(p.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(read_run_key(p).bytes() == a.bytes());
  write_file_atomic(p, a.to_text().substr(0, 40));
  CHECK_THROWS_AS(read_run_key(p), InputError);
  std::filesystem::remove(p);
  CHECK_THROWS_WITH(read_run_key(p), Contains("missing"));
  CHECK_THROWS_AS(RunKey::from_text("dpft.noise_key/1 " + std::string(64, 'g'), "x"), InputError);
  remove_tree(dir);
}

TEST_CASE("HMAC-SHA256 meets RFC 4231's first test case", "[keyed]") {
  CHECK(hmac_sha256_hex(std::string(20, '\x0b'), "Hi There") ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
}

TEST_CASE(
    "data key: created once (0600), keyed fingerprints that the file's SHA-256 cannot give, "
    "damage refused",
    "[keyed]") {
  const auto dir = std::filesystem::temp_directory_path() / "dpft_test_data_key";
  remove_tree(dir);
  const auto p = dir / "sub" / "data.key", q = dir / "other.key";
  const DataKey a = DataKey::load_or_create(p);  // creates the folder and the key
  struct stat st {};
  REQUIRE(::stat(p.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  const std::string text = read_file(p);
  const DataKey again = DataKey::load_or_create(p);  // read back, not replaced
  CHECK(read_file(p) == text);
  CHECK(again.id() == a.id());
  const std::string sha = sha256_hex("the private data");
  CHECK(again.fingerprint(sha) == a.fingerprint(sha));
  CHECK(a.fingerprint(sha) != sha);
  CHECK(a.fingerprint(sha).size() == 64);
  CHECK(a.fingerprint(sha) != a.fingerprint(sha256_hex("other data")));
  // The fingerprint is HMAC-SHA256 under the key in the file, and the id does not reveal it.
  const std::string key_hex = text.substr(std::string("dpft.data_key/1 ").size(), 64);
  std::string key_bytes;
  for (size_t i = 0; i < 32; ++i)
    key_bytes.push_back(static_cast<char>(std::stoi(key_hex.substr(2 * i, 2), nullptr, 16)));
  CHECK(a.fingerprint(sha) == hmac_sha256_hex(key_bytes, "dpft.data/1:" + sha));
  CHECK(text.find(a.id()) == std::string::npos);
  const DataKey b = DataKey::load_or_create(q);  // another key: other names
  CHECK(b.id() != a.id());
  CHECK(b.fingerprint(sha) != a.fingerprint(sha));
  // DPFT_DATA_KEY decides where the key is.
  {
    test::SetEnv env("DPFT_DATA_KEY", q.string());
    CHECK(DataKey::default_path() == q);
    CHECK(DataKey::load_or_create().id() == b.id());
  }
  write_file_atomic(q, "dpft.data_key/1 " + std::string(64, 'g') + "\n");
  CHECK_THROWS_AS(DataKey::load_or_create(q), InputError);
  write_file_atomic(q, text.substr(0, 40));
  CHECK_THROWS_WITH(DataKey::load_or_create(q), Contains("not a dpft data key"));
  remove_tree(dir);
}

TEST_CASE(
    "PrivateRandomness: seeded = derive_seed(noise_seed, stream), keyed = the key's "
    "stream, os = fresh; labels",
    "[keyed]") {
  auto seeded = PrivateRandomness::seeded(7);
  NoiseSource ref(derive_seed(7, "noise"), false);
  CHECK(torch::equal(seeded.noise("noise")->normal({50}, 1.0), ref.normal({50}, 1.0)));
  PoissonSampler pref(100, 0.3, derive_seed(7, "sampler"));
  CHECK(seeded.poisson(100, 0.3, "sampler")->next() == pref.next());
  CHECK_FALSE(seeded.shareable());
  CHECK(seeded.to_json()["label"] == kNoiseSeededLabel);

  const RunKey k = key_of('9');
  auto keyed = PrivateRandomness::keyed(k);
  NoiseSource kref(KeyStream(k, "noise"));
  CHECK(torch::equal(keyed.noise("noise")->normal({50}, 1.0), kref.normal({50}, 1.0)));
  CHECK(keyed.shareable());
  CHECK(keyed.to_json()["key_fingerprint"] == k.fingerprint());
  CHECK(keyed.to_json().dump().find(k.to_text().substr(17, 64)) == std::string::npos);

  auto os = PrivateRandomness::os();
  CHECK(os.noise("noise")->mode() == NoiseMode::kOs);
  CHECK(os.shareable());
}
