#include "core/model/inspect.hpp"

#include <fmt/format.h>

#include <fstream>

#include "core/model/safetensors.hpp"
#include "core/model/torch_zip.hpp"
#include "core/util/error.hpp"

namespace dpft::model {

namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string with_commas(int64_t n) {
  std::string d = std::to_string(n), out;
  for (size_t i = 0; i < d.size(); ++i) {
    if (i && (d.size() - i) % 3 == 0) out += ',';
    out += d[i];
  }
  return out;
}

void add(CheckpointSummary& s, TensorSummary t, size_t elem_size) {
  s.parameter_count += t.numel;
  s.bytes += t.numel * static_cast<int64_t>(elem_size);
  s.tensors.push_back(std::move(t));
}

}  // namespace

CheckpointSummary inspect_checkpoint(const fs::path& path) {
  CheckpointSummary s;
  s.path = path;
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw InputError(fmt::format("{}: no such file or directory", path.string()));
  if (!fs::is_directory(path, ec) && TorchZipFile::looks_like_zip(path)) {
    auto z = TorchZipFile::open(path);
    s.format = "pytorch-zip";
    s.files = {path};
    for (const auto& t : z->tensors())
      add(s, {t.name, dtype_name(t.dtype), t.shape, t.numel(), t.device}, dtype_size(t.dtype));
    s.skipped = z->skipped();
    return s;
  }
  TensorStore store;
  try {
    store = TensorStore::open(path);
  } catch (const InputError& e) {
    // Pre-1.6 torch.save files are a bare pickle: PROTO 2 then a LONG1 magic number.
    std::ifstream in(path, std::ios::binary);
    char head[3] = {};
    if (in.read(head, 3) && head[0] == '\x80' && head[1] == '\x02' && head[2] == '\x8a')
      throw InputError(
          std::string(e.what()) +
          " (the file looks like a legacy torch.save pickle, "
          "which dpft does not read: re-save it with PyTorch >= 1.6 or as safetensors)");
    throw;
  }
  const bool single = store.files().size() == 1 && store.source() == store.files()[0];
  s.format = store.pytorch() ? (single ? "pytorch-zip" : "pytorch-zip-sharded")
                             : (single ? "safetensors" : "safetensors-sharded");
  s.files = store.files();
  s.metadata = store.metadata();
  for (const auto& name : store.names()) {
    const TensorInfo& t = store.info(name);
    add(s, {name, dtype_name(t.dtype), t.shape, t.numel(), ""}, dtype_size(t.dtype));
  }
  return s;
}

nlohmann::json to_json(const CheckpointSummary& s) {
  using nlohmann::json;
  json files = json::array();
  for (const auto& f : s.files) files.push_back(f.string());
  json tensors = json::array();
  for (const auto& t : s.tensors) {
    json j = {{"name", t.name}, {"dtype", t.dtype}, {"shape", t.shape}, {"numel", t.numel}};
    if (!t.device.empty()) j["device"] = t.device;
    tensors.push_back(std::move(j));
  }
  json out = {{"path", s.path.string()},
              {"format", s.format},
              {"files", files},
              {"tensor_count", s.tensors.size()},
              {"parameter_count", s.parameter_count},
              {"bytes", s.bytes},
              {"metadata", s.metadata},
              {"tensors", tensors}};
  if (s.format == "pytorch-zip") {
    json skipped = json::object();
    for (const auto& [name, type] : s.skipped) skipped[name] = type;
    out["skipped"] = skipped;
  }
  return out;
}

std::string to_text(const CheckpointSummary& s) {
  std::string out = fmt::format("{}: {}", s.path.string(), s.format);
  if (s.format == "safetensors-sharded") out += fmt::format(" ({} shards)", s.files.size());
  out += fmt::format("\ntensors: {}, parameters: {}, bytes: {}\n", s.tensors.size(),
                     with_commas(s.parameter_count), with_commas(s.bytes));
  if (!s.metadata.empty()) {
    out += "metadata:\n";
    for (const auto& [k, v] : s.metadata) out += fmt::format("  {}: {}\n", k, v);
  }
  size_t w = 4;
  for (const auto& t : s.tensors) w = std::max(w, t.name.size());
  out += fmt::format("{:<{}}  {:<5} {}\n", "name", w, "dtype", "shape");
  for (const auto& t : s.tensors)
    out += fmt::format("{:<{}}  {:<5} {}{}\n", t.name, w, t.dtype, shape_text(t.shape),
                       t.device.empty() ? "" : "  (" + t.device + ")");
  for (const auto& [name, type] : s.skipped)
    out += fmt::format("not a tensor: {} ({})\n", name, type);
  return out;
}

}  // namespace dpft::model
