// SentencePiece models through the official library (see sentencepiece.hpp), reached through
// the module libdpft_spm.so (core/tokenizer/sentencepiece_shim.cpp says why it is apart).
#include "core/tokenizer/sentencepiece.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <mutex>

#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "dpft/build_info.hpp"

namespace dpft::tok {

namespace spm_detail {

// The module's functions (sentencepiece_shim.cpp).
struct SpmApi {
  void* (*load)(const std::string*, std::string*) = nullptr;
  void (*free)(void*) = nullptr;
  bool (*encode)(const void*, const char*, size_t, std::vector<int>*, std::vector<uint32_t>*,
                 std::vector<uint32_t>*, std::string*) = nullptr;
  bool (*decode)(const void*, const std::vector<int>*, std::string*, std::string*) = nullptr;
  int (*size)(const void*) = nullptr;
  int (*kind)(const void*, int) = nullptr;
  void (*piece)(const void*, int, std::string*) = nullptr;
  int (*piece_to_id)(const void*, const char*, size_t) = nullptr;
  int (*special)(const void*, int) = nullptr;
};

}  // namespace spm_detail

namespace {

using spm_detail::SpmApi;

namespace fs = std::filesystem;

constexpr const char* kSpmModule = "libdpft_spm.so";

// Where the module may be: beside the executable (build/dpft), one folder up (build/tests/...),
// or the build folder this binary was configured in.
std::vector<fs::path> spm_module_candidates() {
  std::vector<fs::path> out;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    out.push_back(exe.parent_path() / kSpmModule);
    out.push_back(exe.parent_path().parent_path() / kSpmModule);
  }
  out.push_back(fs::path(build::kBinaryDir) / kSpmModule);
  return out;
}

const SpmApi& spm_api() {
  static SpmApi a;
  static std::string failure;
  static std::once_flag once;
  std::call_once(once, [] {
    void* h = nullptr;
    std::string tried;
    for (const fs::path& p : spm_module_candidates()) {
      if (!fs::exists(p)) {
        tried += (tried.empty() ? "" : ", ") + p.string();
        continue;
      }
      // Bound to itself: the library's embedded protobuf, not LibTorch's libprotobuf.
      h = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
      if (!h) {
        failure = fmt::format("{} could not be loaded: {}", p.string(), dlerror());
        return;
      }
      break;
    }
    if (!h) {
      failure = fmt::format("{} was not found (looked at {})", kSpmModule, tried);
      return;
    }
    auto sym = [&](auto& f, const char* name) {
      f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(dlsym(h, name));
      if (!f && failure.empty()) failure = fmt::format("{} lacks {}", kSpmModule, name);
    };
    sym(a.load, "dpft_spm_load");
    sym(a.free, "dpft_spm_free");
    sym(a.encode, "dpft_spm_encode");
    sym(a.decode, "dpft_spm_decode");
    sym(a.size, "dpft_spm_size");
    sym(a.kind, "dpft_spm_kind");
    sym(a.piece, "dpft_spm_piece");
    sym(a.piece_to_id, "dpft_spm_piece_to_id");
    sym(a.special, "dpft_spm_special");
  });
  if (!failure.empty())
    throw ConfigError(fmt::format(
        "SentencePiece support is unavailable: {}; it is built with dpft (libsentencepiece-dev, "
        "scripts/setup.sh): rebuild, and keep {} beside the dpft binary",
        failure, kSpmModule));
  return a;
}

// A SentencePiece model is a serialized protobuf whose first field is its pieces (field 1,
// length-delimited: byte 0x0A); a tiktoken rank file or a JSON file is text.
bool looks_like_model_proto(const std::string& bytes) {
  return !bytes.empty() && bytes[0] == '\x0A';
}

}  // namespace

struct SpmModel::Impl {
  const SpmApi* api = nullptr;
  void* handle = nullptr;
  void* plain = nullptr;  // the same model with its normaliser's add_dummy_prefix off
};

namespace {

// The serialized ModelProto with `normalizer_spec { add_dummy_prefix: false }` appended. A
// protobuf parser merges repeated occurrences of a singular message field, so this overrides
// the one flag and keeps the rest of the normaliser: field 3 (NormalizerSpec, length-delimited:
// 0x1A, length 2) holding field 3 (add_dummy_prefix, varint: 0x18) = 0.
std::string without_dummy_prefix(const std::string& bytes) {
  return bytes + std::string("\x1A\x02\x18\x00", 4);
}

}  // namespace

SpmModel::SpmModel() : impl_(std::make_unique<Impl>()) {}

SpmModel::~SpmModel() {
  if (impl_ && impl_->handle) impl_->api->free(impl_->handle);
  if (impl_ && impl_->plain) impl_->api->free(impl_->plain);
}

std::shared_ptr<const SpmModel> SpmModel::load(const std::filesystem::path& file) {
  const std::string bytes = read_file(file);  // InputError naming the file when unreadable
  std::string error = "not a serialized ModelProto";
  std::shared_ptr<SpmModel> m(new SpmModel());
  m->impl_->api = &spm_api();
  if (looks_like_model_proto(bytes)) m->impl_->handle = m->impl_->api->load(&bytes, &error);
  if (!m->impl_->handle)
    throw InputError(fmt::format(
        "{}: not a SentencePiece model ({}); a tokenizer.model is either a SentencePiece model "
        "(Llama-2, Mistral, Gemma, Phi-3, T5) or a tiktoken rank file (Llama-3)",
        file.string(), error));
  if (m->size() <= 0)
    throw InputError(fmt::format("{}: SentencePiece model has no pieces", file.string()));
  const std::string plain = without_dummy_prefix(bytes);
  m->impl_->plain = m->impl_->api->load(&plain, &error);
  DPFT_CHECK(m->impl_->plain, "{}: the model without its dummy prefix did not load: {}",
             file.string(), error);
  return m;
}

void SpmModel::encode(std::string_view text, uint32_t base, std::vector<int32_t>& ids,
                      std::vector<Span>* offsets, bool dummy_prefix) const {
  if (text.empty()) return;
  std::vector<int> out;
  std::vector<uint32_t> begins, ends;
  std::string error;
  if (!impl_->api->encode(dummy_prefix ? impl_->handle : impl_->plain, text.data(), text.size(),
                          &out, offsets ? &begins : nullptr, offsets ? &ends : nullptr, &error))
    throw InputError(fmt::format("SentencePiece could not encode a text: {}", error));
  ids.insert(ids.end(), out.begin(), out.end());
  if (offsets)
    for (size_t i = 0; i < begins.size(); ++i)
      offsets->push_back({base + begins[i], base + ends[i]});
}

std::string SpmModel::decode(const std::vector<int32_t>& ids, bool dummy_prefix) const {
  const std::vector<int> in(ids.begin(), ids.end());
  std::string out, error;
  if (!impl_->api->decode(dummy_prefix ? impl_->handle : impl_->plain, &in, &out, &error))
    throw InputError(fmt::format("SentencePiece could not decode ids: {}", error));
  return out;
}

int32_t SpmModel::size() const {
  return impl_->api->size(impl_->handle);
}

SpmModel::PieceKind SpmModel::kind(int32_t id) const {
  switch (impl_->api->kind(impl_->handle, id)) {
    case 1:
      return PieceKind::kUnknown;
    case 2:
      return PieceKind::kControl;
    case 3:
      return PieceKind::kByte;
    case 4:
      return PieceKind::kUnused;
    default:
      return PieceKind::kNormal;
  }
}

std::string SpmModel::piece(int32_t id) const {
  std::string out;
  impl_->api->piece(impl_->handle, id, &out);
  return out;
}

std::optional<int32_t> SpmModel::find(std::string_view p) const {
  const int id = impl_->api->piece_to_id(impl_->handle, p.data(), p.size());
  // An unknown piece maps to unk_id: only the unknown piece itself truly has it.
  if (id < 0 || (unk_id() == id && piece(id) != p)) return std::nullopt;
  return id;
}

namespace {
std::optional<int32_t> spm_id_or_none(int id) {
  return id >= 0 ? std::optional<int32_t>(id) : std::nullopt;
}
}  // namespace

std::optional<int32_t> SpmModel::unk_id() const {
  return spm_id_or_none(impl_->api->special(impl_->handle, 0));
}
std::optional<int32_t> SpmModel::bos_id() const {
  return spm_id_or_none(impl_->api->special(impl_->handle, 1));
}
std::optional<int32_t> SpmModel::eos_id() const {
  return spm_id_or_none(impl_->api->special(impl_->handle, 2));
}
std::optional<int32_t> SpmModel::pad_id() const {
  return spm_id_or_none(impl_->api->special(impl_->handle, 3));
}

}  // namespace dpft::tok
