#include "core/model/torch_zip.hpp"

#include <array>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <set>

#include "core/util/error.hpp"

namespace dpft::model {

namespace {

uint16_t le16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}
uint32_t le32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
uint64_t le64(const uint8_t* p) {
  return le32(p) | (static_cast<uint64_t>(le32(p + 4)) << 32);
}

// torch.<X>Storage -> dtype (the storage types torch.save names in persistent ids).
const std::map<std::string, DType>& storage_types() {
  static const std::map<std::string, DType> m = {
      {"torch.DoubleStorage", DType::F64}, {"torch.FloatStorage", DType::F32},
      {"torch.HalfStorage", DType::F16},   {"torch.BFloat16Storage", DType::BF16},
      {"torch.LongStorage", DType::I64},   {"torch.IntStorage", DType::I32},
      {"torch.ShortStorage", DType::I16},  {"torch.CharStorage", DType::I8},
      {"torch.ByteStorage", DType::U8},    {"torch.BoolStorage", DType::BOOL},
  };
  return m;
}

// ---------------------------------------------------------------------------------------------
// Pickle values. Objects live in the unpickler's arena; containers refer to them by shared_ptr.
struct PyObj;
using Obj = std::shared_ptr<PyObj>;
struct PyObj {
  enum class Kind {
    None,
    Bool,
    Int,
    Float,
    Str,
    Bytes,
    Tuple,
    List,
    Dict,
    Global,
    Storage,
    Tensor,
    Opaque
  };
  Kind kind = Kind::None;
  int64_t i = 0;
  double f = 0;
  std::string s;           // Str/Bytes; Global: "module.name"; Opaque: what it is
  std::vector<Obj> items;  // Tuple/List; Dict: key0, value0, key1, value1, ...
  TorchZipTensor t;        // Storage (dtype, storage_key, storage_numel, device) and Tensor
};

std::string kind_name(const PyObj& o) {
  switch (o.kind) {
    case PyObj::Kind::None:
      return "None";
    case PyObj::Kind::Bool:
      return "bool";
    case PyObj::Kind::Int:
      return "int";
    case PyObj::Kind::Float:
      return "float";
    case PyObj::Kind::Str:
      return "str";
    case PyObj::Kind::Bytes:
      return "bytes";
    case PyObj::Kind::Tuple:
      return "tuple";
    case PyObj::Kind::List:
      return "list";
    case PyObj::Kind::Dict:
      return "dict";
    case PyObj::Kind::Global:
      return "global " + o.s;
    case PyObj::Kind::Storage:
      return "storage";
    case PyObj::Kind::Tensor:
      return "tensor";
    case PyObj::Kind::Opaque:
      return o.s;
  }
  return "?";
}

// Interprets the pickle opcodes torch.save emits (protocols 2-5, no extension registry). Nothing
// is imported or called: a few known callables (see call()) build dicts and tensor
// descriptions; any other global yields an opaque object.
class Unpickler {
 public:
  using RecordSize = std::function<std::optional<uint64_t>(const std::string& key)>;
  Unpickler(const uint8_t* p, size_t n, std::string what, RecordSize record_size)
      : p_(p), n_(n), what_(std::move(what)), record_size_(std::move(record_size)) {}
  ~Unpickler() {
    // Break reference cycles (a list appended to itself) and deep nesting without recursion:
    // every object is held by the arena, so clearing children never frees a subtree.
    for (auto& o : arena_) o->items.clear();
  }

  Obj run() {
    while (true) {
      const size_t at = pos_;
      const uint8_t op = u8();
      // One opcode per line reads as a table:
      // clang-format off
      switch (op) {
        case 0x80: {  // PROTO
          uint8_t v = u8();
          if (v > 5) fail(at, fmt::format("pickle protocol {} is newer than 5", v));
          break;
        }
        case 0x95: take(8); break;  // FRAME (length hint)
        case '(': marks_.push_back(stack_.size()); break;
        case '.': {  // STOP
          Obj r = pop(at);
          if (!marks_.empty()) fail(at, "STOP with an open MARK");
          return r;
        }
        case 'N': push(make(PyObj::Kind::None)); break;
        case 0x88: push(make_int(1, PyObj::Kind::Bool)); break;  // NEWTRUE
        case 0x89: push(make_int(0, PyObj::Kind::Bool)); break;  // NEWFALSE
        case 'K': push(make_int(u8())); break;                         // BININT1
        case 'M': push(make_int(le16(take(2)))); break;                // BININT2
        case 'J': push(make_int(static_cast<int32_t>(le32(take(4))))); break;  // BININT
        case 0x8a: {  // LONG1: n-byte little-endian two's complement
          uint8_t len = u8();
          if (len > 8) fail(at, fmt::format("integer of {} bytes (more than 64 bits)", len));
          const uint8_t* b = take(len);
          uint64_t v = 0;
          for (int k = 0; k < len; ++k) v |= static_cast<uint64_t>(b[k]) << (8 * k);
          if (len > 0 && len < 8 && (b[len - 1] & 0x80)) v |= ~uint64_t{0} << (8 * len);
          push(make_int(static_cast<int64_t>(v)));
          break;
        }
        case 'G': {  // BINFLOAT: big-endian double
          const uint8_t* b = take(8);
          uint64_t v = 0;
          for (int k = 0; k < 8; ++k) v = (v << 8) | b[k];
          Obj o = make(PyObj::Kind::Float);
          std::memcpy(&o->f, &v, 8);
          push(o);
          break;
        }
        case 'X': push(make_str(le32(take(4)), PyObj::Kind::Str)); break;    // BINUNICODE
        case 0x8c: push(make_str(u8(), PyObj::Kind::Str)); break;            // SHORT_BINUNICODE
        case 0x8d: push(make_str(le64(take(8)), PyObj::Kind::Str)); break;   // BINUNICODE8
        case 'T': {                                                          // BINSTRING
          int32_t len = static_cast<int32_t>(le32(take(4)));
          if (len < 0) fail(at, "negative string length");
          push(make_str(static_cast<uint64_t>(len), PyObj::Kind::Str));
          break;
        }
        case 'U': push(make_str(u8(), PyObj::Kind::Str)); break;             // SHORT_BINSTRING
        case 'B': push(make_str(le32(take(4)), PyObj::Kind::Bytes)); break;  // BINBYTES
        case 'C': push(make_str(u8(), PyObj::Kind::Bytes)); break;           // SHORT_BINBYTES
        case 0x8e: push(make_str(le64(take(8)), PyObj::Kind::Bytes)); break; // BINBYTES8
        case ')': push(make(PyObj::Kind::Tuple)); break;                     // EMPTY_TUPLE
        case 't': push(make_seq(PyObj::Kind::Tuple, pop_mark(at))); break;   // TUPLE
        case 0x85: case 0x86: case 0x87: {                                   // TUPLE1..3
          size_t k = op - 0x84;
          std::vector<Obj> v(k);
          for (size_t j = k; j-- > 0;) v[j] = pop(at);
          push(make_seq(PyObj::Kind::Tuple, std::move(v)));
          break;
        }
        case ']': push(make(PyObj::Kind::List)); break;                      // EMPTY_LIST
        case 'l': push(make_seq(PyObj::Kind::List, pop_mark(at))); break;    // LIST
        case 'a': {                                                          // APPEND
          Obj v = pop(at);
          container(at, PyObj::Kind::List)->items.push_back(v);
          break;
        }
        case 'e': {  // APPENDS
          std::vector<Obj> v = pop_mark(at);
          auto& items = container(at, PyObj::Kind::List)->items;
          items.insert(items.end(), v.begin(), v.end());
          break;
        }
        case '}': push(make(PyObj::Kind::Dict)); break;  // EMPTY_DICT
        case 'd': {                                      // DICT
          std::vector<Obj> v = pop_mark(at);
          if (v.size() % 2) fail(at, "DICT with an odd number of items");
          push(make_seq(PyObj::Kind::Dict, std::move(v)));
          break;
        }
        case 's': {  // SETITEM
          Obj v = pop(at), k = pop(at);
          auto& items = container(at, PyObj::Kind::Dict)->items;
          items.push_back(k);
          items.push_back(v);
          break;
        }
        case 'u': {  // SETITEMS
          std::vector<Obj> v = pop_mark(at);
          if (v.size() % 2) fail(at, "SETITEMS with an odd number of items");
          auto& items = container(at, PyObj::Kind::Dict)->items;
          items.insert(items.end(), v.begin(), v.end());
          break;
        }
        case 'c': {  // GLOBAL "module\nname\n"
          std::string module = line(at), name = line(at);
          Obj o = make(PyObj::Kind::Global);
          o->s = module + "." + name;
          push(o);
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          Obj name = pop(at), module = pop(at);
          if (name->kind != PyObj::Kind::Str || module->kind != PyObj::Kind::Str)
            fail(at, "STACK_GLOBAL needs two strings");
          Obj o = make(PyObj::Kind::Global);
          o->s = module->s + "." + name->s;
          push(o);
          break;
        }
        case 'q': memo_put(at, u8()); break;             // BINPUT
        case 'r': memo_put(at, le32(take(4))); break;    // LONG_BINPUT
        case 0x94: memo_put(at, memo_.size()); break;    // MEMOIZE
        case 'h': memo_get(at, u8()); break;             // BINGET
        case 'j': memo_get(at, le32(take(4))); break;    // LONG_BINGET
        case 'Q': push(persistent(at, pop(at))); break;  // BINPERSID
        case 'R': {                                      // REDUCE
          Obj args = pop(at), fn = pop(at);
          push(call(at, fn, args));
          break;
        }
        case 0x81: {  // NEWOBJ cls.__new__(cls, *args)
          pop(at);
          Obj cls = pop(at);
          push(opaque(cls));
          break;
        }
        case 0x92: {  // NEWOBJ_EX
          pop(at);
          pop(at);
          Obj cls = pop(at);
          push(opaque(cls));
          break;
        }
        case 'b':  // BUILD: sets state (an OrderedDict's _metadata, a Parameter's attributes)
          pop(at);
          if (stack_.size() <= floor()) fail(at, "BUILD on an empty stack");
          break;
        default:
          fail(at, fmt::format("unsupported pickle opcode 0x{:02x} (not written by torch.save)", op));
      }
      // clang-format on
    }
  }

 private:
  [[noreturn]] void fail(size_t at, const std::string& msg) const {
    throw InputError(fmt::format("{}: data.pkl byte {}: {}", what_, at, msg));
  }
  const uint8_t* take(uint64_t k) {
    if (k > n_ - pos_) fail(pos_, "pickle ends early (truncated?)");
    const uint8_t* r = p_ + pos_;
    pos_ += static_cast<size_t>(k);
    return r;
  }
  uint8_t u8() { return *take(1); }
  std::string line(size_t at) {
    const void* nl = pos_ < n_ ? std::memchr(p_ + pos_, '\n', n_ - pos_) : nullptr;
    if (!nl) fail(at, "GLOBAL without a newline");
    size_t len = static_cast<const uint8_t*>(nl) - (p_ + pos_);
    std::string s(reinterpret_cast<const char*>(take(len)), len);
    take(1);
    return s;
  }
  Obj make(PyObj::Kind k) {
    arena_.push_back(std::make_shared<PyObj>());
    arena_.back()->kind = k;
    return arena_.back();
  }
  Obj make_int(int64_t v, PyObj::Kind k = PyObj::Kind::Int) {
    Obj o = make(k);
    o->i = v;
    return o;
  }
  Obj make_str(uint64_t len, PyObj::Kind k) {
    const uint8_t* b = take(len);
    Obj o = make(k);
    o->s.assign(reinterpret_cast<const char*>(b), static_cast<size_t>(len));
    return o;
  }
  Obj make_seq(PyObj::Kind k, std::vector<Obj> v) {
    Obj o = make(k);
    o->items = std::move(v);
    return o;
  }
  Obj opaque(const Obj& cls) {
    Obj o = make(PyObj::Kind::Opaque);
    o->s = cls->kind == PyObj::Kind::Global ? cls->s : "object";
    return o;
  }
  // The innermost MARK is a floor: pops never reach below it (as in Python's metastack).
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  void push(Obj o) { stack_.push_back(std::move(o)); }
  Obj pop(size_t at) {
    if (stack_.size() <= floor()) fail(at, "stack underflow");
    Obj o = std::move(stack_.back());
    stack_.pop_back();
    return o;
  }
  std::vector<Obj> pop_mark(size_t at) {
    if (marks_.empty()) fail(at, "no MARK to pop to");
    size_t m = marks_.back();
    marks_.pop_back();
    std::vector<Obj> v(std::make_move_iterator(stack_.begin() + static_cast<std::ptrdiff_t>(m)),
                       std::make_move_iterator(stack_.end()));
    stack_.resize(m);
    return v;
  }
  PyObj* container(size_t at, PyObj::Kind k) {
    if (stack_.size() <= floor()) fail(at, "stack underflow");
    PyObj* top = stack_.back().get();
    if (top->kind != k)
      fail(at, fmt::format("adding items to a {}, expected a {}", kind_name(*top),
                           k == PyObj::Kind::List ? "list" : "dict"));
    return top;
  }
  void memo_put(size_t at, uint64_t idx) {
    if (stack_.size() <= floor()) fail(at, "memo store from an empty stack");
    memo_[idx] = stack_.back();
  }
  void memo_get(size_t at, uint64_t idx) {
    auto it = memo_.find(idx);
    if (it == memo_.end()) fail(at, fmt::format("memo entry {} was never stored", idx));
    push(it->second);
  }

  // ('storage', torch.<X>Storage, key, location, numel)
  Obj persistent(size_t at, const Obj& pid) {
    const auto& v = pid->items;
    if (pid->kind != PyObj::Kind::Tuple || v.size() != 5 || v[0]->kind != PyObj::Kind::Str ||
        v[0]->s != "storage")
      fail(at, "persistent id is not ('storage', type, key, location, numel)");
    if (v[1]->kind != PyObj::Kind::Global) fail(at, "storage type is not a global");
    auto st = storage_types().find(v[1]->s);
    if (st == storage_types().end())
      fail(at, fmt::format("unsupported storage type {} (supported: float, double, half, bfloat16, "
                           "long, int, short, char, byte, bool)",
                           v[1]->s));
    if (v[2]->kind != PyObj::Kind::Str || v[2]->s.empty() || v[2]->s.find('/') != std::string::npos)
      fail(at, "storage key must be a plain string");
    if (v[3]->kind != PyObj::Kind::Str) fail(at, "storage location must be a string");
    if (v[4]->kind != PyObj::Kind::Int || v[4]->i < 0) fail(at, "storage size must be an int >= 0");
    Obj o = make(PyObj::Kind::Storage);
    o->t.dtype = st->second;
    o->t.storage_key = v[2]->s;
    o->t.device = v[3]->s;
    o->t.storage_numel = v[4]->i;
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(v[4]->i), dtype_size(st->second), &nbytes))
      fail(at, fmt::format("storage {} size {} overflows", v[2]->s, v[4]->i));
    std::optional<uint64_t> have = record_size_(v[2]->s);
    if (!have) fail(at, fmt::format("storage record data/{} is missing", v[2]->s));
    if (*have != nbytes)
      fail(at, fmt::format("storage record data/{} has {} bytes, but {} x {} elements need {}",
                           v[2]->s, *have, v[4]->i, dtype_name(st->second), nbytes));
    return o;
  }

  std::vector<int64_t> int_tuple(size_t at, const Obj& o, const char* what) {
    if (o->kind != PyObj::Kind::Tuple) fail(at, fmt::format("tensor {} is not a tuple", what));
    if (o->items.size() > 64) fail(at, fmt::format("tensor {} has more than 64 dims", what));
    std::vector<int64_t> v;
    for (const auto& e : o->items) {
      if (e->kind != PyObj::Kind::Int || e->i < 0)
        fail(at, fmt::format("tensor {} must hold non-negative ints", what));
      v.push_back(e->i);
    }
    return v;
  }

  Obj call(size_t at, const Obj& fn, const Obj& args) {
    if (fn->kind != PyObj::Kind::Global) return opaque(fn);
    if (args->kind != PyObj::Kind::Tuple)
      fail(at, fmt::format("arguments of {} are not a tuple", fn->s));
    const auto& a = args->items;
    if (fn->s == "collections.OrderedDict") {
      if (!a.empty()) fail(at, "OrderedDict with constructor arguments");
      return make(PyObj::Kind::Dict);
    }
    if (fn->s ==
        "torch.jit._pickle.restore_type_tag") {  // LibTorch's pickle_save: (dict, "Dict[..]")
      if (a.empty()) fail(at, "restore_type_tag without a value");
      return a[0];
    }
    if (fn->s == "torch._utils._rebuild_parameter" ||
        fn->s == "torch._utils._rebuild_parameter_with_state") {
      if (a.empty() || a[0]->kind != PyObj::Kind::Tensor)
        fail(at, fmt::format("{} without a tensor", fn->s));
      return a[0];
    }
    if (fn->s == "torch._utils._rebuild_tensor_v2" || fn->s == "torch._utils._rebuild_tensor") {
      // (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
      if (a.size() < 4 || a[0]->kind != PyObj::Kind::Storage || a[1]->kind != PyObj::Kind::Int)
        fail(at, fmt::format("{} arguments are not (storage, offset, size, stride, ...)", fn->s));
      Obj o = make(PyObj::Kind::Tensor);
      o->t = a[0]->t;
      o->t.storage_offset = a[1]->i;
      o->t.shape = int_tuple(at, a[2], "size");
      o->t.stride = int_tuple(at, a[3], "stride");
      check_view(at, o->t);
      return o;
    }
    return opaque(fn);  // never called: an unknown value, listed as skipped
  }

  // The view (offset, size, stride) must stay inside its storage.
  void check_view(size_t at, const TorchZipTensor& t) {
    if (t.storage_offset < 0) fail(at, "negative storage offset");
    if (t.shape.size() != t.stride.size()) fail(at, "tensor size and stride differ in length");
    int64_t numel = 1, last = t.storage_offset;
    bool empty = false;
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (t.shape[d] == 0) empty = true;
      int64_t span = 0;
      if (t.shape[d] > 0 && (__builtin_mul_overflow(t.shape[d] - 1, t.stride[d], &span) ||
                             __builtin_add_overflow(last, span, &last)))
        fail(at, "tensor view overflows");
      if (t.shape[d] > 0 && __builtin_mul_overflow(numel, t.shape[d], &numel))
        fail(at, "tensor size overflows");
    }
    if (empty ? t.storage_offset > t.storage_numel : last >= t.storage_numel)
      fail(at, fmt::format("tensor view (offset {}, size, stride) reaches element {} of storage "
                           "{} with {} elements",
                           t.storage_offset, last, t.storage_key, t.storage_numel));
    // More elements than storage means overlapping views (expand, as_strided), which state dicts
    // never hold; refusing them keeps every load bounded by the file size.
    if (!empty && numel > t.storage_numel)
      fail(at, fmt::format("tensor has {} elements but its storage {} only {}: overlapping views "
                           "are not supported",
                           numel, t.storage_key, t.storage_numel));
  }

  const uint8_t* p_;
  size_t n_, pos_ = 0;
  std::string what_;
  RecordSize record_size_;
  std::vector<Obj> stack_, arena_;
  std::vector<size_t> marks_;
  std::map<uint64_t, Obj> memo_;
};

// Fuzz builds skip checksum verdicts (the OSS-Fuzz convention), so that mutated archives reach the
// pickle interpreter instead of stopping at a CRC mismatch.
bool crc_mismatch(const uint8_t* data, size_t n, uint32_t want) {
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
  (void)crc32(data, n);
  (void)want;
  return false;
#else
  return crc32(data, n) != want;
#endif
}

}  // namespace

uint32_t crc32(const uint8_t* data, size_t n) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ data[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

int64_t TorchZipTensor::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

bool TorchZipFile::looks_like_zip(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  char sig[4] = {};
  return in.read(sig, 4) && std::memcmp(sig, "PK\x03\x04", 4) == 0;
}

std::shared_ptr<TorchZipFile> TorchZipFile::open(const fs::path& path) {
  std::shared_ptr<TorchZipFile> f(new TorchZipFile());
  f->what_ = path.string();
  f->file_ = MappedFile::open(path);
  f->parse();
  return f;
}

std::shared_ptr<TorchZipFile> TorchZipFile::from_bytes(std::vector<uint8_t> bytes,
                                                       const std::string& what) {
  std::shared_ptr<TorchZipFile> f(new TorchZipFile());
  f->what_ = what;
  f->file_ = MappedFile::adopt(std::move(bytes));
  f->parse();
  return f;
}

void TorchZipFile::parse() {
  const uint8_t* b = file_.data();
  const uint64_t size = file_.size();
  auto fail = [&](const std::string& msg) { return InputError(fmt::format("{}: {}", what_, msg)); };
  auto need = [&](uint64_t off, uint64_t len, const char* what) {
    if (off > size || len > size - off)
      throw fail(fmt::format("zip {} runs past the end of the file", what));
  };

  // End of central directory: 22 bytes + a comment of up to 65535 bytes at the end.
  if (size < 22) throw fail("not a zip archive (too short)");
  uint64_t eocd = size;
  for (uint64_t i = size - 22 + 1; i-- > 0 && size - i <= 22 + 65535;)
    if (le32(b + i) == 0x06054b50 && i + 22 + le16(b + i + 20) <= size) {
      eocd = i;
      break;
    }
  if (eocd == size) throw fail("not a zip archive (no end of central directory)");
  if (le16(b + eocd + 4) != 0 || le16(b + eocd + 6) != 0)
    throw fail("multi-disk zip archives are not supported");
  uint64_t count = le16(b + eocd + 10), cd_size = le32(b + eocd + 12), cd_off = le32(b + eocd + 16);
  if (count == 0xFFFF || cd_size == 0xFFFFFFFF || cd_off == 0xFFFFFFFF) {
    // zip64: a locator right before the end record points at the zip64 end record.
    if (eocd < 20 || le32(b + eocd - 20) != 0x07064b50) throw fail("zip64 locator missing");
    uint64_t rec = le64(b + eocd - 20 + 8);
    need(rec, 56, "zip64 end record");
    if (le32(b + rec) != 0x06064b50) throw fail("bad zip64 end record signature");
    count = le64(b + rec + 32);
    cd_size = le64(b + rec + 40);
    cd_off = le64(b + rec + 48);
  }
  need(cd_off, cd_size, "central directory");

  uint64_t p = cd_off;
  const uint64_t cd_end = cd_off + cd_size;
  for (uint64_t e = 0; e < count; ++e) {
    if (p > cd_end || cd_end - p < 46 || le32(b + p) != 0x02014b50)
      throw fail(fmt::format("zip central directory entry {} is malformed", e));
    const uint16_t flags = le16(b + p + 8), method = le16(b + p + 10);
    const uint32_t crc = le32(b + p + 16);
    uint64_t csize = le32(b + p + 20), usize = le32(b + p + 24);
    const uint64_t nlen = le16(b + p + 28), xlen = le16(b + p + 30), clen = le16(b + p + 32);
    uint64_t local = le32(b + p + 42);
    if (cd_end - p - 46 < nlen + xlen + clen)
      throw fail(fmt::format("zip central directory entry {} is malformed", e));
    std::string name(reinterpret_cast<const char*>(b + p + 46), nlen);
    // zip64 extra field (id 1): the 64-bit values of the fields that hold 0xFFFFFFFF, in order.
    for (uint64_t x = p + 46 + nlen; x + 4 <= p + 46 + nlen + xlen;) {
      const uint16_t id = le16(b + x), len = le16(b + x + 2);
      if (x + 4 + len > p + 46 + nlen + xlen)
        throw fail(fmt::format("zip entry {}: bad extra field", name));
      if (id == 1) {
        uint64_t q = x + 4, qend = x + 4 + len;
        for (uint64_t* v : {&usize, &csize, &local}) {
          if (*v != 0xFFFFFFFF) continue;
          if (qend - q < 8) throw fail(fmt::format("zip entry {}: short zip64 field", name));
          *v = le64(b + q);
          q += 8;
        }
      }
      x += 4 + len;
    }
    p += 46 + nlen + xlen + clen;
    if (flags & 1) throw fail(fmt::format("zip entry {} is encrypted", name));
    // Local header: 30 bytes + name + extra; the data follows. Sizes come from the central
    // directory (torch.save sets the data-descriptor flag and leaves local sizes 0).
    need(local, 30, "local header");
    if (le32(b + local) != 0x04034b50)
      throw fail(fmt::format("zip entry {}: bad local header", name));
    const uint64_t data = local + 30 + le16(b + local + 26) + le16(b + local + 28);
    need(data, csize, fmt::format("entry {}", name).c_str());
    if (method != 0 || csize != usize)
      throw fail(
          fmt::format("zip entry {} is compressed (method {}); torch.save stores records "
                      "uncompressed",
                      name, method));
    if (!entries_.emplace(name, Entry{data, usize, crc}).second)
      throw fail(fmt::format("zip entry {} appears twice", name));
  }

  // The records live under one top-level folder: <prefix>/data.pkl, <prefix>/data/<key>.
  for (const auto& [name, e] : entries_) {
    size_t slash = name.find('/');
    if (slash != std::string::npos && name.compare(slash, std::string::npos, "/data.pkl") == 0) {
      if (!prefix_.empty()) throw fail("more than one data.pkl in the archive");
      prefix_ = name.substr(0, slash + 1);
    }
  }
  if (prefix_.empty())
    throw fail("zip archive without <name>/data.pkl: not a torch.save checkpoint");
  if (auto bo = entries_.find(prefix_ + "byteorder"); bo != entries_.end()) {
    std::string order(reinterpret_cast<const char*>(b + bo->second.offset), bo->second.size);
    if (order != "little")
      throw fail(fmt::format("byteorder '{}' is not supported (little only)", order));
  }
  const Entry& pkl = entries_.at(prefix_ + "data.pkl");
  if (crc_mismatch(b + pkl.offset, pkl.size, pkl.crc))
    throw fail("data.pkl fails its CRC-32 check (corrupt file)");

  Unpickler u(b + pkl.offset, pkl.size, what_,
              [this](const std::string& key) -> std::optional<uint64_t> {
                auto it = entries_.find(prefix_ + "data/" + key);
                if (it == entries_.end()) return std::nullopt;
                return it->second.size;
              });
  Obj root = u.run();
  if (root->kind != PyObj::Kind::Dict)
    throw fail(
        fmt::format("data.pkl holds a {}, not a dict of tensors (state dict)", kind_name(*root)));

  // Flatten nested dicts into dotted names (depth-limited; a dict inside itself is an error).
  std::set<const PyObj*> open_dicts;
  std::function<void(const PyObj&, const std::string&, int)> walk =
      [&](const PyObj& d, const std::string& prefix, int depth) {
        if (depth > 16) throw fail("dicts nested more than 16 deep");
        if (!open_dicts.insert(&d).second) throw fail("a dict contains itself");
        for (size_t i = 0; i + 1 < d.items.size(); i += 2) {
          const PyObj& k = *d.items[i];
          const PyObj& v = *d.items[i + 1];
          std::string key;
          if (k.kind == PyObj::Kind::Str)
            key = k.s;
          else if (k.kind == PyObj::Kind::Int)
            key = std::to_string(k.i);
          else
            throw fail(fmt::format("dict key is a {}, not a string", kind_name(k)));
          const std::string name = prefix + key;
          if (v.kind == PyObj::Kind::Tensor) {
            if (index_.count(name)) throw fail(fmt::format("tensor name '{}' appears twice", name));
            index_[name] = tensors_.size();
            tensors_.push_back(v.t);
            tensors_.back().name = name;
          } else if (v.kind == PyObj::Kind::Dict) {
            walk(v, name + ".", depth + 1);
          } else {
            skipped_.emplace_back(name, kind_name(v));
          }
        }
        open_dicts.erase(&d);
      };
  walk(*root, "", 0);
}

const TorchZipTensor* TorchZipFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

torch::Tensor TorchZipFile::load(const std::string& name) const {
  const TorchZipTensor* t = find(name);
  if (!t) {
    std::vector<std::string> names;
    for (const auto& x : tensors_) names.push_back(x.name);
    throw no_such_tensor(what_, name, names);
  }
  const Entry& rec = entries_.at(prefix_ + "data/" + t->storage_key);  // checked when parsed
  const uint8_t* src = file_.data() + rec.offset;
  if (crc_mismatch(src, rec.size, rec.crc))
    throw InputError(
        fmt::format("{}: record data/{} (tensor '{}') fails its CRC-32 check (corrupt "
                    "file)",
                    what_, t->storage_key, name));
  if (t->dtype == DType::BOOL)
    for (uint64_t i = 0; i < rec.size; ++i)
      if (src[i] > 1)
        throw InputError(fmt::format("{}: tensor '{}': bool byte {} is {} (must be 0 or 1)", what_,
                                     name, i, src[i]));
  torch::Tensor storage =
      torch::empty({t->storage_numel}, torch::TensorOptions().dtype(to_torch(t->dtype)));
  if (rec.size) std::memcpy(storage.data_ptr(), src, rec.size);
  return storage.as_strided(t->shape, t->stride, t->storage_offset)
      .clone(at::MemoryFormat::Contiguous);
}

}  // namespace dpft::model
