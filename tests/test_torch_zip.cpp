// PyTorch zip checkpoints (torch.save) and `dpft model inspect`. Expected contents come from
// Python's own zipfile + pickle machinery (tests/data/make_torch_zip_fixtures.py) and from
// LibTorch's writer (torch::pickle_save), never from the reader under test.
#include <torch/serialize.h>
#include <catch2/catch.hpp>

#include <set>

#include "core/model/inspect.hpp"
#include "core/model/safetensors.hpp"
#include "core/model/torch_zip.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "tensor_test_util.hpp"
#include "test_util.hpp"

namespace {

fs::path roberta_bin() {
  fs::path d = test::shared_data_dir();
  return d.empty() ? fs::path() : d / "lora_adapter_roberta_mnli" / "roberta_base_lora_mnli.bin";
}

}  // namespace

TEST_CASE("crc32 matches the standard check value", "[safetensors][torch_zip]") {
  const std::string s = "123456789";  // CRC-32/ISO-HDLC check value 0xCBF43926
  CHECK(crc32(reinterpret_cast<const uint8_t*>(s.data()), s.size()) == 0xCBF43926u);
  CHECK(crc32(nullptr, 0) == 0u);
}

TEST_CASE("torch zip corpus: state dicts read exactly, malformed archives are InputErrors",
          "[safetensors][torch_zip]") {
  const fs::path dir = kData / "torch_zip_corpus";
  json expected = json::parse(read_file(dir / "expected.json"));
  std::set<std::string> on_disk, listed;
  for (auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".pt") on_disk.insert(e.path().filename().string());
  for (auto it = expected.begin(); it != expected.end(); ++it) listed.insert(it.key());
  REQUIRE(on_disk == listed);  // regenerate with tests/data/make_torch_zip_fixtures.py
  const fs::path pwned = "/tmp/dpft_pwned";
  fs::remove(pwned);

  int ok = 0, bad = 0;
  for (auto it = expected.begin(); it != expected.end(); ++it) {
    const fs::path p = dir / it.key();
    INFO(it.key());
    CHECK(TorchZipFile::looks_like_zip(p) == (it.key() != "bad_empty.pt"));
    if (it.value().contains("error")) {
      ++bad;
      for (int via_bytes = 0; via_bytes < 2; ++via_bytes) {
        try {
          auto f = via_bytes ? TorchZipFile::from_bytes(file_bytes(p), p.string())
                             : TorchZipFile::open(p);
          for (const auto& t : f->tensors()) f->load(t.name);
          FAIL("no error for " << it.key());
        } catch (const InputError& e) {
          CHECK_THAT(e.what(), Contains(it.value()["error"].get<std::string>()));
          CHECK_THAT(e.what(), Contains(p.string()));
        }
      }
      continue;
    }
    ++ok;
    auto f = TorchZipFile::open(p);
    const json& want = it.value()["tensors"];
    CHECK(f->tensors().size() == want.size());
    for (auto w = want.begin(); w != want.end(); ++w) {
      INFO(w.key());
      const TorchZipTensor* t = f->find(w.key());
      REQUIRE(t != nullptr);
      CHECK(dtype_name(t->dtype) == w.value()["dtype"].get<std::string>());
      CHECK(t->shape == shape_of(w.value()["shape"]));
      torch::Tensor x = f->load(w.key());
      CHECK(x.is_contiguous());
      CHECK(x.sizes().vec() == shape_of(w.value()["shape"]));
      check_values(x, w.value()["values"]);
    }
    json skipped = json::object();
    for (const auto& [name, type] : f->skipped()) skipped[name] = type;
    CHECK(skipped == it.value()["skipped"]);
  }
  CHECK(ok >= 5);
  CHECK(bad >= 20);
  CHECK_FALSE(fs::exists(pwned));  // the hostile pickle's posix.system was never called
}

TEST_CASE("torch zip files written by LibTorch's pickle_save read back bit-exactly",
          "[safetensors][torch_zip]") {
  torch::manual_seed(3);
  c10::Dict<std::string, at::Tensor> d;
  std::vector<std::pair<std::string, torch::Tensor>> want = {
      {"w", torch::randn({3, 4})},
      {"w_t", torch::randn({4, 3}).t()},  // non-contiguous
      {"half", torch::randn({5}).to(torch::kFloat16)},
      {"bf16", torch::randn({2, 2}).to(torch::kBFloat16)},
      {"f64", torch::randn({2}, torch::kFloat64)},
      {"steps", torch::tensor({int64_t(1) << 40, int64_t(-3)})},
      {"i32", torch::tensor({7, -7}, torch::kInt32)},
      {"mask", torch::tensor({true, false})},
      {"bytes", torch::tensor({0, 255}, torch::kUInt8)},
      {"scalar", torch::tensor(2.5)},
  };
  for (const auto& [k, v] : want) d.insert(k, v);
  std::vector<char> raw = torch::pickle_save(c10::IValue(d));
  auto f = TorchZipFile::from_bytes(std::vector<uint8_t>(raw.begin(), raw.end()), "pickle_save");
  REQUIRE(f->tensors().size() == want.size());
  CHECK(f->skipped().empty());
  for (const auto& [k, v] : want) {
    INFO(k);
    const TorchZipTensor* t = f->find(k);
    REQUIRE(t != nullptr);
    CHECK(to_torch(t->dtype) == v.scalar_type());
    CHECK(t->device == "cpu");
    torch::Tensor x = f->load(k);
    CHECK(x.sizes() == v.sizes());
    CHECK(bits_of(x) == bits_of(v));
  }
  CHECK_THROWS_WITH(f->load("W"), Contains("no tensor 'W'"));
}

TEST_CASE("the real roberta LoRA checkpoint (torch.save from CUDA) reads as Python sees it",
          "[safetensors][torch_zip]") {
  const fs::path bin = roberta_bin();
  if (bin.empty() || !fs::exists(bin)) {
    WARN("SKIPPED: ../shared/data/lora_adapter_roberta_mnli not found");
    return;
  }
  // LibTorch's own loader cannot: it restores storages on cuda:0 (no map_location).
  std::string bytes = read_file(bin);
  CHECK_THROWS(torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end())));

  json want = json::parse(read_file(kData / "roberta_lora_mnli_tensors.json"))["tensors"];
  REQUIRE(want.size() == 52);
  auto f = TorchZipFile::open(bin);
  REQUIRE(f->tensors().size() == want.size());
  CHECK(f->skipped().empty());
  for (size_t i = 0; i < want.size(); ++i) {
    const TorchZipTensor& t = f->tensors()[i];
    const json& w = want[i];
    INFO(w["name"].get<std::string>());
    CHECK(t.name == w["name"].get<std::string>());  // pickle (OrderedDict) order
    CHECK(dtype_name(t.dtype) == w["dtype"].get<std::string>());
    CHECK(t.shape == shape_of(w["shape"]));
    CHECK(t.stride == shape_of(w["stride"]));
    CHECK(t.storage_offset == w["storage_offset"].get<int64_t>());
    CHECK(t.storage_key == w["storage_key"].get<std::string>());
    CHECK(t.device == w["device"].get<std::string>());
    torch::Tensor x = f->load(t.name).to(torch::kFloat64).reshape({-1});
    REQUIRE(x.numel() == w["numel"].get<int64_t>());
    for (size_t k = 0; k < w["first"].size(); ++k)
      CHECK(x[static_cast<int64_t>(k)].item<double>() == w["first"][k].get<double>());
    CHECK(x.sum().item<double>() == Approx(w["sum"].get<double>()).margin(1e-9).epsilon(1e-9));
  }
}

TEST_CASE("dpft model inspect: roberta LoRA zip", "[safetensors][cli]") {
  const fs::path bin = roberta_bin();
  if (bin.empty() || !fs::exists(bin)) {
    WARN("SKIPPED: ../shared/data/lora_adapter_roberta_mnli not found");
    return;
  }
  json want = json::parse(read_file(kData / "roberta_lora_mnli_tensors.json"))["tensors"];
  int64_t params = 0;
  for (const auto& w : want) params += w["numel"].get<int64_t>();
  std::string out;
  REQUIRE(test::cli({"model", "inspect", bin.string(), "--json"}, &out) == 0);
  json j = json::parse(out);
  CHECK(j["format"] == "pytorch-zip");
  CHECK(j["tensor_count"] == 52);
  CHECK(j["parameter_count"] == params);
  CHECK(j["bytes"] == params * 4);
  REQUIRE(j["tensors"].size() == 52);
  for (size_t i = 0; i < want.size(); ++i) {
    CHECK(j["tensors"][i]["name"] == want[i]["name"]);
    CHECK(j["tensors"][i]["shape"] == want[i]["shape"]);
    CHECK(j["tensors"][i]["dtype"] == "F32");
    CHECK(j["tensors"][i]["device"] == "cuda:0");
  }
  REQUIRE(test::cli({"model", "inspect", bin.string()}, &out) == 0);
  CHECK_THAT(out, Contains("pytorch-zip"));
  CHECK_THAT(out, Contains("tensors: 52, parameters: 887,811"));
  CHECK_THAT(out, Contains("classifier.out_proj.weight"));
  CHECK_THAT(out, Contains("[3, 768]"));
}

TEST_CASE("dpft model inspect: safetensors file, sharded directory, errors", "[safetensors][cli]") {
  test::TempDir d;
  save_safetensors(d.path / "model-1.safetensors",
                   {{"emb", torch::zeros({10, 4})}, {"bias", torch::zeros({4}, torch::kBFloat16)}},
                   {{"format", "pt"}});
  save_safetensors(d.path / "model-2.safetensors",
                   {{"head", torch::zeros({4, 2}, torch::kFloat16)}});
  std::string out;
  REQUIRE(test::cli({"model", "inspect", (d.path / "model-1.safetensors").string(), "--json"},
                    &out) == 0);
  json j = json::parse(out);
  CHECK(j["format"] == "safetensors");
  CHECK(j["tensor_count"] == 2);
  CHECK(j["parameter_count"] == 44);
  CHECK(j["bytes"] == 40 * 4 + 4 * 2);
  CHECK(j["metadata"] == json{{"format", "pt"}});
  CHECK(j["tensors"][0] == json{{"name", "bias"}, {"dtype", "BF16"}, {"shape", {4}}, {"numel", 4}});
  CHECK(j["tensors"][1]["shape"] == json{10, 4});

  write_file_atomic(
      d.path / "model.safetensors.index.json",
      R"({"metadata": {"total_size": 184}, "weight_map": {"emb": "model-1.safetensors",
                        "bias": "model-1.safetensors", "head": "model-2.safetensors"}})");
  REQUIRE(test::cli({"model", "inspect", d.path.string(), "--json"}, &out) == 0);
  j = json::parse(out);
  CHECK(j["format"] == "safetensors-sharded");
  CHECK(j["files"].size() == 2);
  CHECK(j["tensor_count"] == 3);
  CHECK(j["parameter_count"] == 52);
  CHECK(j["metadata"]["total_size"] == "184");
  REQUIRE(test::cli({"model", "inspect", d.path.string()}, &out) == 0);
  CHECK_THAT(out, Contains("safetensors-sharded (2 shards)"));
  CHECK_THAT(out, Contains("head"));
  CHECK_THAT(out, Contains("F16"));

  // Errors: malformed file, missing path (exit 3); no subcommand, no path (exit 2).
  CHECK(test::cli(
            {"model", "inspect",
             (kData / "safetensors_corpus" / "bad_overlapping_ranges.safetensors").string()}) == 3);
  CHECK(test::cli({"model", "inspect", (d.path / "absent").string()}) == 3);
  CHECK(test::cli({"model", "inspect",
                   (kData / "torch_zip_corpus" / "bad_pickle_crc.pt").string()}) == 3);
  CHECK(test::cli({"model"}) == 2);
  CHECK(test::cli({"model", "inspect"}) == 2);

  // A legacy (pre-zip) torch.save pickle gets a hint instead of a bare safetensors error.
  write_file_atomic(d.path / "legacy.bin",
                    std::string("\x80\x02\x8a\x0a", 4) + std::string(40, 'x'));
  CHECK_THROWS_WITH(inspect_checkpoint(d.path / "legacy.bin"), Contains("legacy torch.save"));
}
