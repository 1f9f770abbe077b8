// libFuzzer target: SafetensorsFile::from_bytes on arbitrary bytes, then find() and load() of
// every tensor it accepts. The only acceptable failure is dpft::InputError; any other exception,
// crash, out-of-bounds access (ASan) or undefined behaviour (UBSan) is a finding.
// Build and run: scripts/fuzz.sh (seed corpus: tests/data/safetensors_corpus).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/model/safetensors.hpp"
#include "core/util/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto f =
        dpft::model::SafetensorsFile::from_bytes(std::vector<uint8_t>(data, data + size), "fuzz");
    for (const auto& t : f->tensors()) {
      if (f->find(t.name) != &t) __builtin_trap();
      torch::Tensor x = f->load(t.name);
      if (x.numel() != t.numel() || x.nbytes() != t.end - t.begin) __builtin_trap();
    }
  } catch (const dpft::InputError&) {
  }
  return 0;
}
