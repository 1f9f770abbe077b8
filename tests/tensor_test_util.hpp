// Tensor helpers for the checkpoint tests: raw element bits, comparison with JSON fixtures
// written by the independent Python generators in tests/data/.
#pragma once
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include <catch2/catch.hpp>

#include "core/model/safetensors.hpp"
#include "core/util/atomic_file.hpp"

namespace dpft::test {

// tests/data: checked-in fixtures.
inline std::filesystem::path test_data_dir() {
  return std::filesystem::path(DPFT_SOURCE_DIR) / "tests" / "data";
}

inline std::vector<uint8_t> file_bytes(const std::filesystem::path& p) {
  std::string s = read_file(p);
  return {s.begin(), s.end()};
}

// Raw element bits as int64 (floats reinterpreted through a same-size integer view).
inline std::vector<int64_t> bits_of(const torch::Tensor& t) {
  torch::Tensor c = t.contiguous();
  switch (c.element_size()) {
    case 8:
      c = c.view(torch::kInt64);
      break;
    case 4:
      c = c.view(torch::kInt32).to(torch::kInt64).bitwise_and(int64_t{0xffffffff});
      break;
    case 2:
      c = c.view(torch::kInt16).to(torch::kInt64).bitwise_and(int64_t{0xffff});
      break;
    default:
      c = c.view(torch::kUInt8).to(torch::kInt64);
      break;
  }
  c = c.reshape({-1}).contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

// Element values against a JSON list (numbers; "nan", "inf", "-inf" as strings). Int64 tensors
// compare exactly as integers, everything else as doubles (exact: fixtures hold exact values).
inline void check_values(const torch::Tensor& t, const nlohmann::json& values) {
  torch::Tensor flat = t.reshape({-1}).contiguous();
  torch::Tensor d = flat.to(torch::kFloat64);
  REQUIRE(d.numel() == static_cast<int64_t>(values.size()));
  for (int64_t i = 0; i < d.numel(); ++i) {
    double v = d.data_ptr<double>()[i];
    const nlohmann::json& e = values[i];
    INFO("element " << i << ": got " << v << ", want " << e.dump());
    if (e.is_string()) {
      std::string s = e.get<std::string>();
      if (s == "nan")
        CHECK(std::isnan(v));
      else
        CHECK((std::isinf(v) && (v > 0) == (s == "inf")));
    } else if (t.scalar_type() == torch::kInt64) {
      CHECK(flat.data_ptr<int64_t>()[i] == e.get<int64_t>());
    } else {
      CHECK(v == e.get<double>());
    }
  }
}

inline std::vector<int64_t> shape_of(const nlohmann::json& j) {
  return j.get<std::vector<int64_t>>();
}

}  // namespace dpft::test

// The common preamble of the checkpoint tests (test_safetensors.cpp, test_torch_zip.cpp).
namespace dpft::test {
inline const std::filesystem::path kData = test_data_dir();
}  // namespace dpft::test
using namespace dpft;
using namespace dpft::model;
using namespace dpft::test;
using Catch::Matchers::Contains;
using nlohmann::json;
