// safetensors I/O (https://huggingface.co/docs/safetensors): an 8-byte little-endian header
// length N, N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__":
// {str: str}}, then the raw little-endian tensor bytes (offsets relative to the data start).
//
// Reading memory-maps the file (or reads it when mmap is refused) and validates everything
// before any tensor byte is touched: header length <= 100 MB and within the file, header is a
// JSON object without duplicate keys, `__metadata__` maps strings to strings, every entry has
// exactly dtype/shape/data_offsets, a known dtype, non-negative integer dims whose element count
// does not overflow, dtype size x element count == end - begin, begin <= end, ranges inside the
// data section, no two ranges sharing a byte (gaps are allowed). A malformed file is an
// InputError (exit 3) naming the file, the tensor and the field; never a crash or an
// out-of-bounds read. Full rules: docs/checkpoints.md.
// Sharded checkpoints: model.safetensors.index.json {"weight_map": {name: shard file}}.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/util/error.hpp"
#include "core/util/mapped_file.hpp"

namespace dpft::model {

namespace fs = std::filesystem;

enum class DType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL };

std::string dtype_name(DType d);  // "F32", ...
size_t dtype_size(DType d);       // bytes per element
torch::ScalarType to_torch(DType d);
DType from_torch(torch::ScalarType t);  // throws RuntimeError for unsupported types
std::optional<DType> dtype_from_name(const std::string& name);  // "F32" -> F32; nullopt if unknown

// The InputError for a tensor name that `where` does not hold, with a "did you mean" from `names`.
InputError no_such_tensor(const std::string& where, const std::string& name,
                          const std::vector<std::string>& names);

struct TensorInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range within the data section
  int64_t numel() const;        // product of shape (1 for a scalar)
};

// One memory-mapped .safetensors file.
class SafetensorsFile {
 public:
  // Validates the whole header; throws InputError naming `path` on any problem.
  static std::shared_ptr<SafetensorsFile> open(const fs::path& path);
  // Same checks on an in-memory buffer (for fuzzing); `what` names it in errors.
  static std::shared_ptr<SafetensorsFile> from_bytes(std::vector<uint8_t> bytes,
                                                     const std::string& what);
  ~SafetensorsFile();

  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // by data offset
  const TensorInfo* find(const std::string& name) const;               // nullptr if absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const fs::path& path() const { return path_; }
  // A copy of the tensor as a contiguous CPU tensor of its stored dtype.
  torch::Tensor load(const std::string& name) const;  // throws InputError if absent
  // Elements [begin, end) of the flattened tensor, copied out of the mapping (1-D, stored
  // dtype): reads a slice without touching the rest of a large tensor. Not for BOOL tensors.
  torch::Tensor load_slice(const std::string& name, int64_t begin, int64_t end) const;

 private:
  SafetensorsFile() = default;
  void parse(const std::string& what);
  fs::path path_;
  MappedFile file_;        // whole file (mapped, or owned bytes)
  size_t data_start_ = 0;  // 8 + header length
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

class TorchZipFile;  // torch_zip.hpp

// All tensors of a checkpoint directory: model.safetensors, the shards listed by
// model.safetensors.index.json, or (checkpoints saved without safetensors) pytorch_model.bin /
// the shards of pytorch_model.bin.index.json, read by the non-executing PyTorch zip reader
// (torch_zip.hpp). Throws InputError if none exists or a shard is missing.
class TensorStore {
 public:
  // Preference as in transformers: model.safetensors, its index, pytorch_model.bin, its index.
  // Index checks: weight_map is {name: file name in `dir`}, no duplicate names, every shard
  // exists, every listed name is in its shard, and every shard tensor is listed (so no name is
  // in two shards).
  static TensorStore open_dir(const fs::path& dir);
  // A .safetensors file, or a PyTorch zip file (torch.save >= 1.6) of a state dict.
  static TensorStore open_file(const fs::path& file);
  static TensorStore open(const fs::path& path);  // open_dir for a directory, else open_file
  std::vector<std::string> names() const;         // sorted
  bool contains(const std::string& name) const;
  const TensorInfo& info(const std::string& name) const;  // throws InputError if absent
  torch::Tensor load(const std::string& name) const;      // stored dtype, CPU
  // The file's __metadata__, or for a sharded checkpoint the index's "metadata" (non-string
  // values as JSON text).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::vector<fs::path>& files() const { return files_; }  // the weight files read
  const fs::path& source() const { return source_; }  // the file or index that was opened
  bool pytorch() const { return pytorch_; }           // PyTorch zip files, not safetensors

 private:
  // One weight file: a .safetensors file or a PyTorch zip.
  struct File {
    std::shared_ptr<SafetensorsFile> st;
    std::shared_ptr<TorchZipFile> zip;
    std::map<std::string, TensorInfo> zip_infos;  // name -> dtype and shape (zip only)
    static std::shared_ptr<File> open(const fs::path& path);
    bool has(const std::string& name) const;
    std::vector<std::string> names() const;
  };
  static TensorStore open_index(const fs::path& dir, const fs::path& index);
  const File& file_of(const std::string& name) const;
  std::map<std::string, std::shared_ptr<File>> where_;
  std::map<std::string, std::string> metadata_;
  std::vector<fs::path> files_;
  fs::path source_;
  bool pytorch_ = false;
};

// Write tensors (any supported dtype; made contiguous, CPU) atomically to `path` (temp file +
// fsync + rename), with optional string metadata. Layout as the reference implementation
// (huggingface/safetensors serialize()): tensors ordered by dtype size, larger first, then by
// name (so each tensor's data is aligned to its element size), packed without gaps; compact
// header JSON with __metadata__ first (keys sorted), padded with spaces to a multiple of 8.
// Throws RuntimeError for duplicate or reserved names and unsupported dtypes.
void save_safetensors(const fs::path& path,
                      const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace dpft::model
