// Checkpoint inspection (`dpft model inspect`): what a .safetensors file, a safetensors
// checkpoint directory (single file or sharded) or a PyTorch zip checkpoint (torch.save of a
// state dict) holds: tensor names, dtypes, shapes, parameter count, metadata. Reads headers and
// the pickle only; no tensor data is loaded.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace dpft::model {

struct TensorSummary {
  std::string name;
  std::string dtype;  // safetensors name: F32, BF16, ...
  std::vector<int64_t> shape;
  int64_t numel = 0;
  std::string device;  // PyTorch zip only: where it was saved from
};

struct CheckpointSummary {
  std::filesystem::path path;
  std::string format;  // "safetensors" | "safetensors-sharded" | "pytorch-zip"
  std::vector<std::filesystem::path> files;
  std::map<std::string, std::string> metadata;
  std::vector<TensorSummary> tensors;  // sorted by name (safetensors) or in pickle order (zip)
  int64_t parameter_count = 0;         // total elements over all tensors
  int64_t bytes = 0;                   // total tensor bytes
  std::vector<std::pair<std::string, std::string>> skipped;  // zip: non-tensor entries (name, type)
};

// Directory -> safetensors checkpoint; a file starting with "PK\3\4" -> PyTorch zip; any other
// file -> .safetensors. Throws InputError (exit 3) for anything unreadable or malformed.
CheckpointSummary inspect_checkpoint(const std::filesystem::path& path);

nlohmann::json to_json(const CheckpointSummary& s);
std::string to_text(const CheckpointSummary& s);  // a table, one tensor per line

}  // namespace dpft::model
