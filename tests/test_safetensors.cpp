// safetensors I/O: bit-exact round trips for every dtype, the reference writer's byte layout,
// files written by an independent Python writer (and ours read by it), sharded checkpoints,
// and the malformed-file corpus (tests/data/safetensors_corpus, made by
// tests/data/make_safetensors_corpus.py): every bad file is an InputError naming the problem.
#include <sys/stat.h>
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <thread>

#include "core/model/safetensors.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "tensor_test_util.hpp"
#include "test_util.hpp"

namespace {

void write_bytes(const fs::path& p, const std::string& s) {
  std::ofstream(p, std::ios::binary) << s;
}

// Every dtype with awkward values; F16/BF16/F32/F64 from random bit patterns (NaN payloads,
// subnormals, infinities included).
std::vector<std::pair<std::string, torch::Tensor>> sample_tensors() {
  torch::manual_seed(7);
  auto random_bytes = [](int64_t n) { return torch::randint(0, 256, {n}, torch::kUInt8); };
  auto bits16 = random_bytes(70).view(torch::kInt16).reshape({5, 7});
  auto bits32 = random_bytes(4 * 33).view(torch::kInt32);
  auto bits64 = random_bytes(8 * 8).view(torch::kInt64).reshape({4, 2});
  return {
      {"f64", bits64.view(torch::kFloat64)},
      {"f32", bits32.view(torch::kFloat32)},
      {"f16", bits16.view(torch::kFloat16)},
      {"bf16", bits16.flip(0).contiguous().view(torch::kBFloat16)},
      {"i64", torch::tensor({std::numeric_limits<int64_t>::min(), int64_t(0),
                             std::numeric_limits<int64_t>::max()})},
      {"i32", torch::tensor({-5, 1 << 30}, torch::kInt32).reshape({1, 2})},
      {"i16", torch::tensor({-32768, 32767}, torch::kInt16)},
      {"i8", torch::tensor({-128, 0, 127}, torch::kInt8)},
      {"u8", torch::arange(256, torch::kInt32).to(torch::kUInt8).reshape({16, 16})},
      {"bool", torch::tensor({true, false, true})},
      {"scalar", torch::tensor(3.5)},
      {"empty", torch::zeros({0, 3}, torch::kFloat16)},
      {"transposed", torch::arange(6, torch::kFloat32).reshape({2, 3}).t()},  // non-contiguous
  };
}

}  // namespace

TEST_CASE("safetensors round trip is bit-exact for every dtype", "[safetensors]") {
  test::TempDir d;
  fs::path p = d.path / "all.safetensors";
  auto tensors = sample_tensors();
  save_safetensors(p, tensors, {{"format", "pt"}, {"note", "quote \" newline \n caf\u00e9"}});
  auto f = SafetensorsFile::open(p);
  REQUIRE(f->tensors().size() == tensors.size());
  CHECK(f->metadata() == std::map<std::string, std::string>{
                             {"format", "pt"}, {"note", "quote \" newline \n caf\u00e9"}});
  for (const auto& [name, t] : tensors) {
    INFO(name);
    const TensorInfo* info = f->find(name);
    REQUIRE(info != nullptr);
    CHECK(info->dtype == from_torch(t.scalar_type()));
    CHECK(info->shape == t.sizes().vec());
    torch::Tensor back = f->load(name);
    CHECK(back.scalar_type() == t.scalar_type());
    CHECK(back.sizes() == t.sizes());
    CHECK(back.is_contiguous());
    CHECK(bits_of(back) == bits_of(t));
  }
  // The same through TensorStore.
  TensorStore s = TensorStore::open_file(p);
  CHECK(s.names().size() == tensors.size());
  CHECK(bits_of(s.load("bf16")) == bits_of(tensors[3].second));
  CHECK(s.metadata().at("format") == "pt");
}

TEST_CASE("safetensors writer produces the reference implementation's bytes", "[safetensors]") {
  // huggingface/safetensors serialize(): compact JSON, entries by dtype size then name,
  // __metadata__ first, header padded with spaces to a multiple of 8, data packed.
  test::TempDir d;
  auto le64 = [](uint64_t n) { return std::string(reinterpret_cast<const char*>(&n), 8); };
  auto f32 = [](std::vector<float> v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  };
  auto x = torch::arange(6, torch::kFloat32);

  save_safetensors(d.path / "a.safetensors", {{"attn.0", x.reshape({1, 2, 3})}});
  std::string h = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
  REQUIRE(h.size() == 64);  // already a multiple of 8: no padding
  CHECK(read_file(d.path / "a.safetensors") == le64(64) + h + f32({0, 1, 2, 3, 4, 5}));

  save_safetensors(d.path / "b.safetensors", {{"attn0", x.reshape({1, 1, 2, 3})}});
  h = R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})";
  REQUIRE(h.size() == 65);
  CHECK(read_file(d.path / "b.safetensors") == le64(72) + h + "       " + f32({0, 1, 2, 3, 4, 5}));

  save_safetensors(d.path / "c.safetensors", {}, {{"framework", "pt"}});
  CHECK(read_file(d.path / "c.safetensors") ==
        le64(40) + R"({"__metadata__":{"framework":"pt"}})" + "     ");

  save_safetensors(d.path / "e.safetensors", {});
  CHECK(read_file(d.path / "e.safetensors") == le64(8) + "{}      ");
}

TEST_CASE("safetensors writer aligns every tensor to its element size", "[safetensors]") {
  test::TempDir d;
  fs::path p = d.path / "mixed.safetensors";
  save_safetensors(p, {{"z_u8", torch::ones({3}, torch::kUInt8)},
                       {"a_f16", torch::ones({5}, torch::kFloat16)},
                       {"m_f64", torch::ones({1}, torch::kFloat64)},
                       {"b_bool", torch::ones({1}, torch::kBool)},
                       {"c_i32", torch::ones({3}, torch::kInt32)},
                       {"a_bf16", torch::ones({1}, torch::kBFloat16)},
                       {"y_i64", torch::ones({1}, torch::kInt64)}});
  std::string raw = read_file(p);
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  CHECK(n % 8 == 0);
  auto f = SafetensorsFile::open(p);
  std::vector<std::string> order;
  for (const auto& t : f->tensors()) {
    order.push_back(t.name);
    CHECK((8 + n + t.begin) % dtype_size(t.dtype) == 0);
  }
  // Reference order: I64, F64, F32, I32, BF16, F16, I16, I8, U8, BOOL; ties by name.
  CHECK(order ==
        std::vector<std::string>{"y_i64", "m_f64", "c_i32", "a_bf16", "a_f16", "z_u8", "b_bool"});
  CHECK(f->tensors().back().end == raw.size() - 8 - n);  // packed, no trailing bytes
}

TEST_CASE("safetensors writer rejects bad input and leaves the old file", "[safetensors]") {
  test::TempDir d;
  fs::path p = d.path / "m.safetensors";
  save_safetensors(p, {{"w", torch::ones({2})}});
  const std::string before = read_file(p);
  CHECK_THROWS_AS(save_safetensors(p, {{"w", torch::ones({1})}, {"w", torch::ones({1})}}),
                  RuntimeError);
  CHECK_THROWS_AS(save_safetensors(p, {{"__metadata__", torch::ones({1})}}), RuntimeError);
  CHECK_THROWS_WITH(save_safetensors(p, {{"c", torch::ones({1}, torch::kComplexFloat)}}),
                    Contains("cannot be stored in safetensors"));
  CHECK_THROWS_AS(save_safetensors(p, {{"u", torch::Tensor()}}), RuntimeError);
  CHECK_THROWS_AS(save_safetensors(d.path / "no_dir" / "x.safetensors", {{"w", torch::ones({1})}}),
                  RuntimeError);
  CHECK(read_file(p) == before);
  int files = 0;
  for (auto& e : fs::directory_iterator(d.path)) files += e.is_regular_file();
  CHECK(files == 1);  // no temp file left behind
}

TEST_CASE("AtomicFileWriter without commit leaves the target untouched", "[safetensors][atomic]") {
  test::TempDir d;
  fs::path p = d.write("t.bin", "old");
  {
    AtomicFileWriter w(p);
    w.write("new", 3);
  }  // destroyed without commit (as when an exception unwinds mid-write)
  CHECK(read_file(p) == "old");
  int files = 0;
  for (auto& e : fs::directory_iterator(d.path)) files += e.is_regular_file();
  CHECK(files == 1);
  {
    AtomicFileWriter w(p);
    w.write("new", 3);
    w.commit();
  }
  CHECK(read_file(p) == "new");
}

namespace {
// A tree with files, an empty directory, a nested directory and a link to a directory outside it.
void make_tree(const fs::path& root, const fs::path& outside) {
  fs::create_directories(root / "a" / "b");
  fs::create_directories(root / "empty");
  std::ofstream(root / "f.txt") << "1";
  std::ofstream(root / "a" / "g.txt") << "2";
  std::ofstream(root / "a" / "b" / "h.txt") << "3";
  fs::create_directory_symlink(outside, root / "a" / "link");
}
}  // namespace

TEST_CASE("remove_tree removes what std::filesystem::remove_all removes, never following links",
          "[atomic]") {
  test::TempDir d;
  const fs::path outside = d.path / "outside", mine = d.path / "mine", ref = d.path / "ref";
  fs::create_directories(outside);
  std::ofstream(outside / "keep.txt") << "k";
  make_tree(mine, outside);
  make_tree(ref, outside);
  const std::uintmax_t want = fs::remove_all(ref);  // the reference (on the system's libstdc++)
  CHECK(want == 8);
  CHECK(remove_tree(mine) == want);
  CHECK_FALSE(fs::exists(mine));
  CHECK(fs::exists(outside / "keep.txt"));  // the link was removed, not its target's contents
  CHECK(remove_tree(mine) == 0);            // a missing path: nothing to do, no error
  std::ofstream(d.path / "file") << "x";
  CHECK(remove_tree(d.path / "file") == 1);  // a plain file
  CHECK_FALSE(fs::exists(d.path / "file"));
  if (::geteuid() != 0) {  // root may delete from a read-only directory
    fs::create_directories(d.path / "ro" / "sub");
    std::ofstream(d.path / "ro" / "sub" / "x") << "x";
    fs::permissions(d.path / "ro" / "sub", fs::perms::owner_read | fs::perms::owner_exec);
    std::error_code ec;
    remove_tree(d.path / "ro", ec);
    CHECK(ec);
    CHECK_THROWS_WITH(remove_tree(d.path / "ro"),
                      Catch::Contains("could not remove") && Catch::Contains("sub/x"));
    fs::permissions(d.path / "ro" / "sub", fs::perms::owner_all);
    CHECK(remove_tree(d.path / "ro") == 3);
  }
}

TEST_CASE("safetensors files from an independent Python writer read back exactly",
          "[safetensors]") {
  // tests/data/make_interop_safetensors.py (struct + json): unsorted, indented, unpadded header.
  auto f = SafetensorsFile::open(kData / "interop_python.safetensors");
  json want = json::parse(read_file(kData / "interop_python.json"));
  CHECK(f->metadata() == want["__metadata__"].get<std::map<std::string, std::string>>());
  size_t n = 0;
  for (auto it = want.begin(); it != want.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    INFO(it.key());
    ++n;
    const TensorInfo* info = f->find(it.key());
    REQUIRE(info != nullptr);
    CHECK(dtype_name(info->dtype) == it.value()["dtype"].get<std::string>());
    torch::Tensor t = f->load(it.key());
    CHECK(t.sizes().vec() == shape_of(it.value()["shape"]));
    std::vector<int64_t> bits;
    for (const auto& b : it.value()["bits"])
      bits.push_back(static_cast<int64_t>(b.get<uint64_t>()));
    CHECK(bits_of(t) == bits);              // bit-exact (F16/BF16 NaN payloads included)
    check_values(t, it.value()["values"]);  // and decoded as the right dtype
  }
  CHECK(n == f->tensors().size());
}

TEST_CASE("safetensors files we write are read by the independent Python reader", "[safetensors]") {
  if (std::system("/usr/bin/python3 -c 'import json, struct' > /dev/null 2>&1") != 0) {
    WARN("SKIPPED: /usr/bin/python3 not available");
    return;
  }
  test::TempDir d;
  fs::path p = d.path / "ours.safetensors";
  auto tensors = sample_tensors();
  save_safetensors(p, tensors, {{"k", "v"}});
  std::string cmd = "/usr/bin/python3 " + (kData / "make_interop_safetensors.py").string() +
                    " --read " + p.string() + " > " + (d.path / "out.json").string();
  REQUIRE(std::system(cmd.c_str()) == 0);
  json got = json::parse(read_file(d.path / "out.json"));
  CHECK(got["__metadata__"] == json{{"k", "v"}});
  for (const auto& [name, t] : tensors) {
    INFO(name);
    REQUIRE(got.contains(name));
    CHECK(got[name]["dtype"] == dtype_name(from_torch(t.scalar_type())));
    CHECK(shape_of(got[name]["shape"]) == t.sizes().vec());
    std::vector<int64_t> bits;
    for (const auto& b : got[name]["bits"]) bits.push_back(static_cast<int64_t>(b.get<uint64_t>()));
    CHECK(bits == bits_of(t));
  }
}

TEST_CASE("safetensors corpus: every malformed file is an InputError naming the problem",
          "[safetensors]") {
  const fs::path dir = kData / "safetensors_corpus";
  json expected = json::parse(read_file(dir / "expected.json"));
  std::set<std::string> on_disk;
  for (auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") on_disk.insert(e.path().filename().string());
  std::set<std::string> listed;
  for (auto it = expected.begin(); it != expected.end(); ++it) listed.insert(it.key());
  REQUIRE(on_disk == listed);  // regenerate with tests/data/make_safetensors_corpus.py
  REQUIRE(listed.size() >= 40);

  int bad = 0, ok = 0;
  for (auto it = expected.begin(); it != expected.end(); ++it) {
    const fs::path p = dir / it.key();
    INFO(it.key());
    if (it.value().contains("error")) {
      ++bad;
      const std::string msg = it.value()["error"].get<std::string>();
      // From the file (mmap or read) and from memory (the fuzzing entry point): same verdict.
      for (int via_bytes = 0; via_bytes < 2; ++via_bytes) {
        try {
          auto f = via_bytes ? SafetensorsFile::from_bytes(file_bytes(p), p.string())
                             : SafetensorsFile::open(p);
          for (const auto& t : f->tensors()) f->load(t.name);  // some problems show at load
          FAIL("no error for " << it.key());
        } catch (const InputError& e) {
          CHECK_THAT(e.what(), Contains(msg));
          CHECK_THAT(e.what(), Contains(p.string()));
          CHECK(e.exit_code() == 3);
        }
      }
    } else {
      ++ok;
      auto f = SafetensorsFile::open(p);
      const json& want = it.value()["tensors"];
      CHECK(f->tensors().size() == want.size());
      CHECK(f->metadata() == it.value()["metadata"].get<std::map<std::string, std::string>>());
      for (auto w = want.begin(); w != want.end(); ++w) {
        INFO(w.key());
        REQUIRE(f->find(w.key()) != nullptr);
        CHECK(dtype_name(f->find(w.key())->dtype) == w.value()["dtype"].get<std::string>());
        torch::Tensor t = f->load(w.key());
        CHECK(t.sizes().vec() == shape_of(w.value()["shape"]));
        check_values(t, w.value()["values"]);
      }
    }
  }
  CHECK(ok >= 5);
  CHECK(bad >= 40);
}

TEST_CASE("safetensors reader handles unmappable input and missing names", "[safetensors]") {
  test::TempDir d;
  fs::path p = d.path / "m.safetensors";
  save_safetensors(p, {{"layer.weight", torch::arange(4, torch::kFloat32)}});
  // A FIFO cannot be mapped: the reader falls back to reading it.
  fs::path fifo = d.path / "pipe.safetensors";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::string content = read_file(p);
  std::thread writer([&] { std::ofstream(fifo, std::ios::binary) << content; });
  auto f = SafetensorsFile::open(fifo);
  writer.join();
  CHECK(torch::equal(f->load("layer.weight"), torch::arange(4, torch::kFloat32)));
  CHECK_THROWS_WITH(f->load("layer.weigth"), Contains("did you mean 'layer.weight'"));
  CHECK_THROWS_AS(SafetensorsFile::open(d.path / "absent.safetensors"), InputError);
  CHECK_THROWS_AS(SafetensorsFile::open(d.path), InputError);
  CHECK_THROWS_AS(TensorStore::open_file(p).info("nope"), InputError);
}

TEST_CASE("sharded safetensors checkpoints are read through the index", "[safetensors]") {
  test::TempDir d;
  auto a = torch::arange(6, torch::kFloat32).reshape({2, 3});
  auto b = torch::tensor({1, 2, 3}, torch::kInt64);
  auto c = torch::ones({2}, torch::kBFloat16);
  save_safetensors(d.path / "model-00001-of-00002.safetensors", {{"a", a}, {"b", b}},
                   {{"format", "pt"}});
  save_safetensors(d.path / "model-00002-of-00002.safetensors", {{"c", c}});
  auto index = [&](const std::string& weight_map) {
    write_bytes(d.path / "model.safetensors.index.json",
                R"({"metadata": {"total_size": 44}, "weight_map": )" + weight_map + "}");
  };
  index(R"({"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
            "c": "model-00002-of-00002.safetensors"})");
  TensorStore s = TensorStore::open_dir(d.path);
  CHECK(s.names() == std::vector<std::string>{"a", "b", "c"});
  CHECK(s.contains("c"));
  CHECK_FALSE(s.contains("d"));
  CHECK(torch::equal(s.load("a"), a));
  CHECK(torch::equal(s.load("b"), b));
  CHECK(bits_of(s.load("c")) == bits_of(c));
  CHECK(s.info("c").dtype == DType::BF16);
  CHECK(s.files().size() == 2);
  CHECK(s.metadata().at("total_size") == "44");
  CHECK(TensorStore::open(d.path).names().size() == 3);

  auto expect_error = [&](const std::string& weight_map, const std::string& msg) {
    index(weight_map);
    INFO(weight_map);
    CHECK_THROWS_WITH(TensorStore::open_dir(d.path), Contains(msg));
    CHECK_THROWS_AS(TensorStore::open_dir(d.path), InputError);
  };
  expect_error(R"({"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
                   "c": "missing.safetensors"})",
               "does not exist");
  expect_error(R"({"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
                   "c": "model-00001-of-00002.safetensors"})",
               "which has no such tensor");
  expect_error(
      R"({"a": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"})",
      "holds 'b', which weight_map does not list");
  expect_error(R"({"a": "model-00001-of-00002.safetensors", "a": "model-00002-of-00002.safetensors",
                   "b": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"})",
               "duplicate key 'a'");
  expect_error(R"({"a": "../model-00001-of-00002.safetensors"})", "must be a file name in");
  expect_error(R"({"a": 3})", "must be a shard file name");
  expect_error(R"([1])", "must be an object");  // index {"weight_map": [1]} is not an object
  write_bytes(d.path / "model.safetensors.index.json", "{not json");
  CHECK_THROWS_WITH(TensorStore::open_dir(d.path), Contains("not valid JSON"));

  // The same tensor in two shards.
  save_safetensors(d.path / "model-00002-of-00002.safetensors", {{"c", c}, {"a", a}});
  expect_error(R"({"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
                   "c": "model-00002-of-00002.safetensors"})",
               "'a' is in two shards");

  // A single model.safetensors wins; an empty directory is an error.
  save_safetensors(d.path / "model.safetensors", {{"only", b}});
  CHECK(TensorStore::open_dir(d.path).names() == std::vector<std::string>{"only"});
  test::TempDir empty;
  CHECK_THROWS_WITH(TensorStore::open_dir(empty.path),
                    Contains("no weights: expected model.safetensors"));
  CHECK_THROWS_AS(TensorStore::open_dir(empty.path / "nope"), InputError);
}
