#include "core/model/safetensors.hpp"

#include "core/model/torch_zip.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "core/util/strings.hpp"

namespace dpft::model {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian; dpft reads it by memcpy on little-endian hosts");

namespace {

using json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // as the reference implementation
constexpr size_t kMaxArrayLen = 64;                // no header array (shape, offsets) is longer
constexpr size_t kMaxNesting = 3;                  // {name: {"shape": [..]}}

struct DTypeRow {
  DType dtype;
  const char* name;
  size_t size;
  torch::ScalarType torch_type;
  int rank;  // the reference writer's alignment order (larger first)
};
const DTypeRow kDTypes[] = {
    {DType::F64, "F64", 8, torch::kFloat64, 8}, {DType::F32, "F32", 4, torch::kFloat32, 7},
    {DType::F16, "F16", 2, torch::kFloat16, 4}, {DType::BF16, "BF16", 2, torch::kBFloat16, 5},
    {DType::I64, "I64", 8, torch::kInt64, 9},   {DType::I32, "I32", 4, torch::kInt32, 6},
    {DType::I16, "I16", 2, torch::kInt16, 3},   {DType::I8, "I8", 1, torch::kInt8, 2},
    {DType::U8, "U8", 1, torch::kUInt8, 1},     {DType::BOOL, "BOOL", 1, torch::kBool, 0},
};

const DTypeRow& row(DType d) {
  for (const auto& r : kDTypes)
    if (r.dtype == d) return r;
  throw RuntimeError(fmt::format("unknown DType value {}", static_cast<int>(d)));
}

std::string supported_dtypes() {
  std::vector<std::string> v;
  for (const auto& r : kDTypes) v.push_back(r.name);
  return join(v, " ");
}

std::string dims_str(const std::vector<int64_t>& shape) {
  std::vector<std::string> v;
  for (auto d : shape) v.push_back(std::to_string(d));
  return "[" + join(v, ", ") + "]";
}

// Raised inside the JSON parser callback to stop parsing a header early.
struct HeaderAbort {
  std::string msg;
};

// Parses the header JSON, rejecting duplicate keys (a plain parse keeps one of them silently),
// nesting deeper than a safetensors header has, and arrays longer than any shape.
json parse_header_json(const char* begin, const char* end) {
  struct Frame {
    bool is_object;
    std::set<std::string> keys;
    size_t count = 0;
    std::string key;  // the key this container is the value of ("" at the root)
  };
  std::vector<Frame> stack;
  std::string pending_key;  // last key seen in the innermost object
  auto where = [&]() {
    // The top-level key the parser is inside ("tensor 'x'"), for messages.
    if (stack.size() >= 2) return fmt::format("entry '{}'", stack[1].key);
    return std::string("top level");
  };
  auto on_value_in_parent = [&]() {
    if (stack.empty() || stack.back().is_object) return;
    if (++stack.back().count > kMaxArrayLen)
      throw HeaderAbort{
          fmt::format("{}: an array has more than {} elements", where(), kMaxArrayLen)};
  };
  json::parser_callback_t cb = [&](int /*depth*/, json::parse_event_t ev, json& parsed) -> bool {
    switch (ev) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start: {
        on_value_in_parent();
        if (stack.size() >= kMaxNesting)
          throw HeaderAbort{fmt::format("{}: nested deeper than a safetensors header ({} levels)",
                                        where(), kMaxNesting)};
        Frame f{ev == json::parse_event_t::object_start, {}, 0, pending_key};
        stack.push_back(std::move(f));
        pending_key.clear();
        break;
      }
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!stack.empty()) stack.pop_back();
        break;
      case json::parse_event_t::key: {
        std::string k = parsed.get<std::string>();
        if (!stack.empty() && !stack.back().keys.insert(k).second) {
          if (stack.size() == 1)
            throw HeaderAbort{
                fmt::format("duplicate entry '{}' (JSON parsers silently keep only "
                            "one of two equal keys)",
                            k)};
          throw HeaderAbort{fmt::format("{}: duplicate key '{}'", where(), k)};
        }
        pending_key = k;
        break;
      }
      case json::parse_event_t::value:
        on_value_in_parent();
        break;
    }
    return true;
  };
  return json::parse(begin, end, cb, /*allow_exceptions=*/true, /*ignore_comments=*/false);
}

const char* json_type(const json& j) {
  return j.type_name();
}

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  std::memcpy(&v, p, 8);
  return v;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
std::string dtype_name(DType d) {
  return row(d).name;
}
size_t dtype_size(DType d) {
  return row(d).size;
}
torch::ScalarType to_torch(DType d) {
  return row(d).torch_type;
}

DType from_torch(torch::ScalarType t) {
  for (const auto& r : kDTypes)
    if (r.torch_type == t) return r.dtype;
  throw RuntimeError(fmt::format("tensor dtype {} cannot be stored in safetensors (supported: {})",
                                 c10::toString(t), supported_dtypes()));
}

std::optional<DType> dtype_from_name(const std::string& name) {
  for (const auto& r : kDTypes)
    if (name == r.name) return r.dtype;
  return std::nullopt;
}

InputError no_such_tensor(const std::string& where, const std::string& name,
                          const std::vector<std::string>& names) {
  auto near = closest_match(name, names);
  return InputError(fmt::format("{}: no tensor '{}' ({} tensors{})", where, name, names.size(),
                                near ? fmt::format("; did you mean '{}'?", *near) : ""));
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

// ---------------------------------------------------------------------------------------------
std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const fs::path& path) {
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->file_ = MappedFile::open(path);
  f->parse(path.string());
  return f;
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::from_bytes(std::vector<uint8_t> bytes,
                                                             const std::string& what) {
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = what;
  f->file_ = MappedFile::adopt(std::move(bytes));
  f->parse(what);
  return f;
}

SafetensorsFile::~SafetensorsFile() = default;

void SafetensorsFile::parse(const std::string& what) {
  const uint8_t* data = file_.data();
  const size_t size = file_.size();
  if (size < 8)
    throw InputError(
        fmt::format("{}: not a safetensors file: {} bytes, shorter than the 8-byte "
                    "header length",
                    what, size));
  const uint64_t n = read_u64_le(data);
  if (n > kMaxHeaderBytes)
    throw InputError(
        fmt::format("{}: header length {} exceeds the {} byte limit (corrupt file or "
                    "not safetensors)",
                    what, n, kMaxHeaderBytes));
  if (n > size - 8)
    throw InputError(
        fmt::format("{}: header length {} runs past the end of the file ({} bytes "
                    "after the length field); truncated file?",
                    what, n, size - 8));
  data_start_ = 8 + static_cast<size_t>(n);
  const uint64_t data_size = size - data_start_;
  const char* h = reinterpret_cast<const char*>(data + 8);

  // The JSON parser would stop at a NUL byte and ignore the rest; JSON has no use for one.
  if (const void* nul = std::memchr(h, 0, static_cast<size_t>(n)))
    throw InputError(fmt::format("{}: header is not valid JSON: NUL byte at header offset {}", what,
                                 static_cast<const char*>(nul) - h));
  json root;
  try {
    root = parse_header_json(h, h + n);
  } catch (const HeaderAbort& e) {
    throw InputError(fmt::format("{}: invalid header: {}", what, e.msg));
  } catch (const json::exception& e) {
    throw InputError(fmt::format("{}: header is not valid JSON: {}", what, e.what()));
  }
  if (!root.is_object())
    throw InputError(
        fmt::format("{}: header must be a JSON object, got {}", what, json_type(root)));

  std::vector<TensorInfo> infos;
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object())
        throw InputError(fmt::format("{}: __metadata__ must be an object of strings, got {}", what,
                                     json_type(v)));
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          throw InputError(fmt::format("{}: __metadata__ must map strings to strings; '{}' is {}",
                                       what, m.key(), json_type(m.value())));
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string& msg) {
      return InputError(fmt::format("{}: tensor '{}': {}", what, name, msg));
    };
    if (!v.is_object()) throw bad(fmt::format("entry must be an object, got {}", json_type(v)));
    for (auto f = v.begin(); f != v.end(); ++f)
      if (f.key() != "dtype" && f.key() != "shape" && f.key() != "data_offsets")
        throw bad(fmt::format("unknown field '{}' (allowed: dtype, shape, data_offsets)", f.key()));
    for (const char* field : {"dtype", "shape", "data_offsets"})
      if (!v.contains(field)) throw bad(fmt::format("missing field '{}'", field));

    TensorInfo t;
    t.name = name;
    const json& dt = v["dtype"];
    if (!dt.is_string()) throw bad(fmt::format("dtype must be a string, got {}", json_type(dt)));
    auto d = dtype_from_name(dt.get<std::string>());
    if (!d)
      throw bad(fmt::format("unknown dtype '{}' (supported: {})", dt.get<std::string>(),
                            supported_dtypes()));
    t.dtype = *d;

    const json& sh = v["shape"];
    if (!sh.is_array()) throw bad(fmt::format("shape must be an array, got {}", json_type(sh)));
    // The element count must not overflow, and (so that any tensor of this shape can be
    // described by int64 sizes) neither may the product of the non-zero dimensions.
    uint64_t count = 1, nonzero = 1;
    for (size_t i = 0; i < sh.size(); ++i) {
      const json& e = sh[i];
      if (e.is_number_integer() && !e.is_number_unsigned())
        throw bad(fmt::format("shape[{}] = {} is negative", i, e.get<int64_t>()));
      if (!e.is_number_unsigned())
        throw bad(fmt::format("shape[{}] must be a non-negative integer, got {}", i, e.dump()));
      uint64_t dim = e.get<uint64_t>();
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        throw bad(fmt::format("shape[{}] = {} is too large", i, dim));
      if (dim != 0 && __builtin_mul_overflow(nonzero, dim, &nonzero))
        throw bad(fmt::format("shape {} overflows the element count", sh.dump()));
      if (nonzero > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        throw bad(fmt::format("shape {} overflows the element count", sh.dump()));
      count *= dim;  // <= nonzero, cannot overflow
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(count, static_cast<uint64_t>(dtype_size(t.dtype)), &nbytes))
      throw bad(
          fmt::format("shape {} of {} overflows the byte count", sh.dump(), dt.get<std::string>()));

    const json& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2)
      throw bad(fmt::format("data_offsets must be [begin, end], got {}", off.dump()));
    for (size_t i = 0; i < 2; ++i)
      if (!off[i].is_number_unsigned())
        throw bad(fmt::format("data_offsets must be non-negative integers, got {}", off.dump()));
    t.begin = off[0].get<uint64_t>();
    t.end = off[1].get<uint64_t>();
    if (t.begin > t.end)
      throw bad(fmt::format("data_offsets [{}, {}]: begin > end", t.begin, t.end));
    if (t.end > data_size)
      throw bad(
          fmt::format("data_offsets [{}, {}] run past the data section ({} bytes); "
                      "truncated file?",
                      t.begin, t.end, data_size));
    if (t.end - t.begin != nbytes)
      throw bad(fmt::format("data_offsets [{}, {}] hold {} bytes but {} shape {} needs {}", t.begin,
                            t.end, t.end - t.begin, dtype_name(t.dtype), dims_str(t.shape),
                            nbytes));
    infos.push_back(std::move(t));
  }

  // File order = data order. No two non-empty byte ranges may share a byte.
  std::sort(infos.begin(), infos.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  const TensorInfo* prev = nullptr;
  for (const auto& t : infos) {
    if (t.begin == t.end) continue;
    if (prev && t.begin < prev->end)
      throw InputError(fmt::format("{}: tensors '{}' [{}, {}] and '{}' [{}, {}] overlap", what,
                                   prev->name, prev->begin, prev->end, t.name, t.begin, t.end));
    prev = &t;
  }
  tensors_ = std::move(infos);
  for (size_t i = 0; i < tensors_.size(); ++i) index_[tensors_[i].name] = i;
}

const TensorInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

torch::Tensor SafetensorsFile::load(const std::string& name) const {
  const TensorInfo* t = find(name);
  if (!t) {
    std::vector<std::string> names;
    for (const auto& i : tensors_) names.push_back(i.name);
    throw no_such_tensor(path_.string(), name, names);
  }
  torch::Tensor out = torch::empty(t->shape, torch::TensorOptions().dtype(to_torch(t->dtype)));
  const uint8_t* src = file_.data() + data_start_ + t->begin;
  const size_t nbytes = static_cast<size_t>(t->end - t->begin);
  if (t->dtype == DType::BOOL) {  // torch assumes bool bytes are 0 or 1
    for (size_t i = 0; i < nbytes; ++i)
      if (src[i] > 1)
        throw InputError(
            fmt::format("{}: tensor '{}': BOOL element {} has byte value {} (must be "
                        "0 or 1)",
                        path_.string(), name, i, src[i]));
  }
  if (nbytes) std::memcpy(out.data_ptr(), src, nbytes);  // memcpy: source may be unaligned
  return out;
}

torch::Tensor SafetensorsFile::load_slice(const std::string& name, int64_t begin,
                                          int64_t end) const {
  const TensorInfo* t = find(name);
  if (!t) {
    std::vector<std::string> names;
    for (const auto& i : tensors_) names.push_back(i.name);
    throw no_such_tensor(path_.string(), name, names);
  }
  DPFT_CHECK(t->dtype != DType::BOOL && 0 <= begin && begin <= end && end <= t->numel(),
             "{}: tensor '{}': cannot read elements [{}, {}) of {} ({})", path_.string(), name,
             begin, end, t->numel(), dtype_name(t->dtype));
  torch::Tensor out = torch::empty({end - begin}, torch::TensorOptions().dtype(to_torch(t->dtype)));
  const size_t es = dtype_size(t->dtype);
  const uint8_t* src = file_.data() + data_start_ + t->begin + static_cast<size_t>(begin) * es;
  if (end > begin) std::memcpy(out.data_ptr(), src, static_cast<size_t>(end - begin) * es);
  return out;
}

// ---------------------------------------------------------------------------------------------
namespace {

// Parses a JSON file with the duplicate-key check of safetensors headers (any depth, any size).
json parse_json_no_duplicates(const std::string& text, const std::string& what) {
  std::vector<std::set<std::string>> keys;
  json::parser_callback_t cb = [&](int, json::parse_event_t ev, json& parsed) -> bool {
    if (ev == json::parse_event_t::object_start)
      keys.emplace_back();
    else if (ev == json::parse_event_t::object_end && !keys.empty())
      keys.pop_back();
    else if (ev == json::parse_event_t::key && !keys.empty()) {
      std::string k = parsed.get<std::string>();
      if (!keys.back().insert(k).second) throw HeaderAbort{fmt::format("duplicate key '{}'", k)};
    }
    return true;
  };
  if (size_t nul = text.find('\0'); nul != std::string::npos)  // the parser would stop there
    throw InputError(fmt::format("{}: not valid JSON: NUL byte at offset {}", what, nul));
  try {
    return json::parse(text, cb);
  } catch (const HeaderAbort& e) {
    throw InputError(fmt::format("{}: {}", what, e.msg));
  } catch (const json::exception& e) {
    throw InputError(fmt::format("{}: not valid JSON: {}", what, e.what()));
  }
}

}  // namespace

std::shared_ptr<TensorStore::File> TensorStore::File::open(const fs::path& path) {
  auto f = std::make_shared<File>();
  if (TorchZipFile::looks_like_zip(path)) {
    f->zip = TorchZipFile::open(path);
    // A weight file holds tensors (and perhaps plain values). An entry the pickle builds with a
    // callable outside the reader's allow-list was never run (nothing is), but the file is then
    // not a state dict of weights: refused, naming it.
    for (const auto& [entry, kind] : f->zip->skipped()) {
      static const std::set<std::string> plain = {"None",  "bool",  "int",  "float",  "str",
                                                  "bytes", "tuple", "list", "storage"};
      if (!plain.count(kind))
        throw InputError(fmt::format(
            "{}: entry '{}' is built by {}, a callable outside the allow-list of the PyTorch "
            "reader (tensors, OrderedDict); dpft executes no pickle code and reads only plain "
            "state dicts: re-save the weights as safetensors, or torch.save(model.state_dict())",
            path.string(), entry, kind));
    }
    for (const TorchZipTensor& t : f->zip->tensors()) {
      TensorInfo i;
      i.name = t.name;
      i.dtype = t.dtype;
      i.shape = t.shape;
      f->zip_infos.emplace(t.name, std::move(i));
    }
  } else {
    f->st = SafetensorsFile::open(path);
  }
  return f;
}

bool TensorStore::File::has(const std::string& name) const {
  return st ? st->find(name) != nullptr : zip_infos.count(name) > 0;
}

std::vector<std::string> TensorStore::File::names() const {
  std::vector<std::string> v;
  if (st)
    for (const auto& t : st->tensors()) v.push_back(t.name);
  for (const auto& kv : zip_infos) v.push_back(kv.first);
  return v;
}

TensorStore TensorStore::open_dir(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw InputError(fmt::format("{}: not a directory", dir.string()));
  for (const char* single : {"model.safetensors", "pytorch_model.bin"}) {
    const std::string index = std::string(single) + ".index.json";
    if (fs::exists(dir / single, ec)) return open_file(dir / single);
    if (fs::exists(dir / index, ec)) return open_index(dir, dir / index);
  }
  throw InputError(
      fmt::format("{}: no weights: expected model.safetensors, model.safetensors.index.json, "
                  "pytorch_model.bin or pytorch_model.bin.index.json",
                  dir.string()));
}

TensorStore TensorStore::open_index(const fs::path& dir, const fs::path& index) {
  std::error_code ec;
  TensorStore s;
  s.source_ = index;
  json j = parse_json_no_duplicates(read_file(index), index.string());
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw InputError(
        fmt::format("{}: must be an object with a \"weight_map\" object "
                    "{{tensor name: shard file}}",
                    index.string()));
  if (j.contains("metadata") && j["metadata"].is_object())
    for (auto m = j["metadata"].begin(); m != j["metadata"].end(); ++m)
      s.metadata_[m.key()] =
          m.value().is_string() ? m.value().get<std::string>() : m.value().dump();

  std::map<std::string, std::shared_ptr<File>> shards;  // file name -> file
  std::map<std::string, std::string> claimed;           // tensor -> shard (by map)
  const json& wm = j["weight_map"];
  for (auto it = wm.begin(); it != wm.end(); ++it) {
    const std::string& name = it.key();
    if (!it.value().is_string())
      throw InputError(fmt::format("{}: weight_map['{}'] must be a shard file name, got {}",
                                   index.string(), name, it.value().dump()));
    std::string shard = it.value().get<std::string>();
    fs::path rel(shard);
    if (shard.empty() || rel.is_absolute() || rel.has_parent_path() || shard == "." ||
        shard == "..")
      throw InputError(fmt::format("{}: weight_map['{}'] = '{}' must be a file name in {}",
                                   index.string(), name, shard, dir.string()));
    auto sit = shards.find(shard);
    if (sit == shards.end()) {
      fs::path sp = dir / rel;
      if (!fs::exists(sp, ec))
        throw InputError(fmt::format("{}: shard {} (listed for '{}') does not exist",
                                     index.string(), sp.string(), name));
      sit = shards.emplace(shard, File::open(sp)).first;
      s.files_.push_back(sp);
      s.pytorch_ = s.pytorch_ || sit->second->zip != nullptr;
    }
    if (!sit->second->has(name))
      throw InputError(fmt::format("{}: weight_map puts '{}' in {}, which has no such tensor",
                                   index.string(), name, shard));
    s.where_[name] = sit->second;
    claimed[name] = shard;
  }
  // Every tensor of every shard must be the one the map names: no name in two shards and no
  // tensor the map does not know about.
  for (const auto& [shard, file] : shards)
    for (const std::string& t : file->names()) {
      auto c = claimed.find(t);
      if (c == claimed.end())
        throw InputError(fmt::format("{}: shard {} holds '{}', which weight_map does not list",
                                     index.string(), shard, t));
      if (c->second != shard)
        throw InputError(fmt::format("{}: '{}' is in two shards, {} and {}", index.string(), t,
                                     c->second, shard));
    }
  return s;
}

TensorStore TensorStore::open_file(const fs::path& file) {
  TensorStore s;
  s.source_ = file;
  auto f = File::open(file);
  s.files_.push_back(file);
  s.pytorch_ = f->zip != nullptr;
  if (f->st) s.metadata_ = f->st->metadata();
  for (const std::string& n : f->names()) s.where_[n] = f;
  return s;
}

TensorStore TensorStore::open(const fs::path& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) ? open_dir(path) : open_file(path);
}

std::vector<std::string> TensorStore::names() const {
  std::vector<std::string> v;
  for (const auto& kv : where_) v.push_back(kv.first);
  return v;
}

bool TensorStore::contains(const std::string& name) const {
  return where_.count(name) > 0;
}

const TensorStore::File& TensorStore::file_of(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw no_such_tensor(source_.string(), name, names());
  return *it->second;
}

const TensorInfo& TensorStore::info(const std::string& name) const {
  const File& f = file_of(name);
  return f.st ? *f.st->find(name) : f.zip_infos.at(name);
}

torch::Tensor TensorStore::load(const std::string& name) const {
  const File& f = file_of(name);
  return f.st ? f.st->load(name) : f.zip->load(name);
}

// ---------------------------------------------------------------------------------------------
void save_safetensors(const fs::path& path,
                      const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  struct Item {
    std::string name;
    DType dtype;
    torch::Tensor t;  // CPU, contiguous
  };
  std::vector<Item> items;
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__")
      throw RuntimeError(fmt::format("cannot save {}: '__metadata__' is reserved", path.string()));
    if (!seen.insert(name).second)
      throw RuntimeError(
          fmt::format("cannot save {}: tensor name '{}' given twice", path.string(), name));
    if (!t.defined())
      throw RuntimeError(
          fmt::format("cannot save {}: tensor '{}' is undefined", path.string(), name));
    items.push_back({name, from_torch(t.scalar_type()), t.detach().to(torch::kCPU).contiguous()});
  }
  // The reference writer's order: larger dtypes first (so every tensor starts at a multiple of
  // its element size: the data section starts 8-aligned), then by name.
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    int ra = row(a.dtype).rank, rb = row(b.dtype).rank;
    return ra != rb ? ra > rb : a.name < b.name;
  });

  auto quote = [&](const std::string& s) {
    try {
      return json(s).dump();
    } catch (const json::exception&) {
      throw RuntimeError(fmt::format("cannot save {}: '{}' is not valid UTF-8", path.string(), s));
    }
  };
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      header += (first ? "" : ",") + quote(k) + ":" + quote(v);
      first = false;
    }
    header += "}";
  }
  uint64_t offset = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& it = items[i];
    uint64_t nbytes = static_cast<uint64_t>(it.t.numel()) * dtype_size(it.dtype);
    std::string shape;
    for (int64_t d = 0; d < it.t.dim(); ++d) shape += (d ? "," : "") + std::to_string(it.t.size(d));
    header += fmt::format("{}{}:{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                          (i == 0 && metadata.empty()) ? "" : ",", quote(it.name),
                          dtype_name(it.dtype), shape, offset, offset + nbytes);
    offset += nbytes;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');  // data section starts 8-aligned

  AtomicFileWriter w(path);
  uint8_t len[8];
  const uint64_t n = header.size();
  std::memcpy(len, &n, 8);
  w.write(len, 8);
  w.write(header.data(), header.size());
  for (const auto& it : items)
    if (it.t.numel())
      w.write(it.t.data_ptr(), static_cast<size_t>(it.t.numel()) * dtype_size(it.dtype));
  w.commit();
}

}  // namespace dpft::model
