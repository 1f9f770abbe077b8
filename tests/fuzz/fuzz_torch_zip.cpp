// libFuzzer target: TorchZipFile::from_bytes (zip directory + pickle interpreter) on arbitrary
// bytes, then load() of every tensor it lists. Only dpft::InputError may escape; anything else
// (crash, ASan/UBSan report, other exception) is a finding. Seeds: tests/data/torch_zip_corpus.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/model/torch_zip.hpp"
#include "core/util/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto f = dpft::model::TorchZipFile::from_bytes(std::vector<uint8_t>(data, data + size), "fuzz");
    for (const auto& t : f->tensors()) {
      torch::Tensor x = f->load(t.name);
      if (x.sizes().vec() != t.shape || !x.is_contiguous()) __builtin_trap();
    }
  } catch (const dpft::InputError&) {
  }
  return 0;
}
