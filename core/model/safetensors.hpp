// safetensors I/O (https://huggingface.co/docs/safetensors): an 8-byte little-endian header
// length N, N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__":
// {str: str}}, then the raw little-endian tensor bytes (offsets relative to the data start).
//
// Reading memory-maps the file and validates everything before any tensor byte is touched:
// header length within the file, header is a JSON object, known dtypes, non-negative shapes,
// dtype size x element count == end - begin, ranges inside the data section, no overlaps, no
// duplicate names. A malformed file is an InputError (exit 3) naming the file and the problem;
// never a crash or an out-of-bounds read.
// Sharded checkpoints: model.safetensors.index.json {"weight_map": {name: shard file}}.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace dpft::model {

namespace fs = std::filesystem;

enum class DType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL };

std::string dtype_name(DType d);         // "F32", ...
size_t dtype_size(DType d);              // bytes per element
torch::ScalarType to_torch(DType d);
DType from_torch(torch::ScalarType t);   // throws RuntimeError for unsupported types

struct TensorInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range within the data section
};

// One memory-mapped .safetensors file.
class SafetensorsFile {
 public:
  // Validates the whole header; throws InputError naming `path` on any problem.
  static std::shared_ptr<SafetensorsFile> open(const fs::path& path);
  // Same checks on an in-memory buffer (for fuzzing); `what` names it in errors.
  static std::shared_ptr<SafetensorsFile> from_bytes(std::vector<uint8_t> bytes, const std::string& what);
  ~SafetensorsFile();

  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // in file order
  const TensorInfo* find(const std::string& name) const;              // nullptr if absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const fs::path& path() const { return path_; }
  // A copy of the tensor as a contiguous CPU tensor of its stored dtype.
  torch::Tensor load(const std::string& name) const;  // throws InputError if absent

 private:
  SafetensorsFile() = default;
  void parse(const std::string& what);
  fs::path path_;
  const uint8_t* data_ = nullptr;   // whole file (mapped or owned)
  size_t size_ = 0;
  size_t data_start_ = 0;           // 8 + header length
  void* map_ = nullptr;             // mmap base, if mapped
  std::vector<uint8_t> owned_;      // from_bytes
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a checkpoint directory: model.safetensors, or the shards listed by
// model.safetensors.index.json. Throws InputError if neither exists or a shard is missing.
class TensorStore {
 public:
  static TensorStore open_dir(const fs::path& dir);
  static TensorStore open_file(const fs::path& file);
  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const;
  const TensorInfo& info(const std::string& name) const;
  torch::Tensor load(const std::string& name) const;  // stored dtype, CPU

 private:
  std::map<std::string, std::shared_ptr<SafetensorsFile>> where_;
};

// Write tensors (any supported dtype; made contiguous, CPU) atomically to `path`, in the
// given order, with optional string metadata.
void save_safetensors(const fs::path& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace dpft::model
