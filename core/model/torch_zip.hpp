// Reading PyTorch zip checkpoints (torch.save since PyTorch 1.6: a zip archive holding
// `<prefix>/data.pkl`, the pickled object, and `<prefix>/data/<key>`, one raw little-endian
// record per storage) without executing anything.
//
// LibTorch's torch::pickle_load cannot serve here: it restores each storage on the device it was
// saved from and has no map_location, so a state dict saved from CUDA (like the shared
// roberta LoRA adapter) fails on a CPU-only machine. Instead this is a small, bounds-checked
// reader: a zip central-directory parser (stored entries only, zip64 aware; torch.save never
// compresses) and a pickle interpreter for the opcodes torch.save emits (protocols 2-4) that
// knows a handful of callables: collections.OrderedDict, torch._utils._rebuild_tensor(_v2),
// _rebuild_parameter(_with_state), and torch.jit._pickle.restore_type_tag (LibTorch's
// torch::pickle_save wraps dicts in it). Any other global is recorded as an opaque object,
// never imported or called. Malformed input is an InputError naming the file.
//
// The checkpoint must pickle a dict (state dict); tensors in nested dicts are listed with dotted
// names ("model.layer.weight"); other values are listed in `skipped()`.
#pragma once
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/model/safetensors.hpp"

namespace dpft::model {

struct TorchZipTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape, stride;
  int64_t storage_offset = 0;  // in elements
  std::string storage_key;     // record <prefix>/data/<key>
  int64_t storage_numel = 0;
  std::string device;  // where it was saved from ("cpu", "cuda:0"); loads go to CPU
  int64_t numel() const;
};

class TorchZipFile {
 public:
  // True if the file starts with a zip local-file signature ("PK\3\4").
  static bool looks_like_zip(const fs::path& path);
  static std::shared_ptr<TorchZipFile> open(const fs::path& path);
  static std::shared_ptr<TorchZipFile> from_bytes(std::vector<uint8_t> bytes,
                                                  const std::string& what);

  const std::vector<TorchZipTensor>& tensors() const { return tensors_; }  // pickle order
  const TorchZipTensor* find(const std::string& name) const;
  // Non-tensor entries of the dict: dotted name -> what it is ("int", "torch.Size", ...).
  const std::vector<std::pair<std::string, std::string>>& skipped() const { return skipped_; }
  // A contiguous CPU copy in the stored dtype (views of shared storages are materialized).
  // Checks the record's CRC-32. Throws InputError if absent or corrupt.
  torch::Tensor load(const std::string& name) const;
  const std::string& what() const { return what_; }

 private:
  struct Entry {
    uint64_t offset = 0, size = 0;  // of the stored bytes within bytes_
    uint32_t crc = 0;
  };
  TorchZipFile() = default;
  void parse();
  const Entry& record(const std::string& name) const;
  std::string what_;
  MappedFile file_;
  std::string prefix_;  // "archive/"
  std::map<std::string, Entry> entries_;
  std::vector<TorchZipTensor> tensors_;
  std::map<std::string, size_t> index_;
  std::vector<std::pair<std::string, std::string>> skipped_;
};

uint32_t crc32(const uint8_t* data, size_t n);  // the zip/PNG CRC-32 (reflected 0xEDB88320)

}  // namespace dpft::model
