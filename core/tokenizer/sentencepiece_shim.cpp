// The only code that calls libsentencepiece, built as its own module (libdpft_spm.so) and
// opened by core/tokenizer/sentencepiece.cpp with dlopen(RTLD_LOCAL | RTLD_DEEPBIND).
// Why apart: Debian's libsentencepiece exports the symbols of the protobuf-lite it embeds; linked
// into the dpft binary beside LibTorch's libprotobuf they displace libprotobuf's own, and its
// static initialisers crash before main (measured: `dpft version` segfaults). Opened later and
// bound to itself, the library uses its protobuf and libprotobuf keeps its own.
// C linkage for dlsym; the arguments are the same libstdc++'s types on both sides.
#include <sentencepiece_processor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace {

using Processor = sentencepiece::SentencePieceProcessor;

const Processor& sp(const void* h) {
  return *static_cast<const Processor*>(h);
}

}  // namespace

extern "C" {

// A processor for a serialized ModelProto, or nullptr with *error set.
void* dpft_spm_load(const std::string* bytes, std::string* error) {
  auto* p = new Processor();
  const auto status = p->LoadFromSerializedProto(*bytes);
  if (!status.ok()) {
    *error = status.ToString();
    delete p;
    return nullptr;
  }
  return p;
}

void dpft_spm_free(void* h) {
  delete static_cast<Processor*>(h);
}

// ids and each piece's byte range [begin, end) in the text; false with *error on failure.
bool dpft_spm_encode(const void* h, const char* text, size_t len, std::vector<int>* ids,
                     std::vector<uint32_t>* begins, std::vector<uint32_t>* ends,
                     std::string* error) {
  if (!begins) {
    const auto status = sp(h).Encode(std::string_view(text, len), ids);
    if (!status.ok()) *error = status.ToString();
    return status.ok();
  }
  const auto spt = sp(h).EncodeAsImmutableProto(std::string_view(text, len));
  for (const auto& piece : spt.pieces()) {
    ids->push_back(static_cast<int>(piece.id()));
    begins->push_back(piece.begin());
    ends->push_back(piece.end());
  }
  return true;
}

bool dpft_spm_decode(const void* h, const std::vector<int>* ids, std::string* out,
                     std::string* error) {
  const auto status = sp(h).Decode(*ids, out);
  if (!status.ok()) *error = status.ToString();
  return status.ok();
}

int dpft_spm_size(const void* h) {
  return sp(h).GetPieceSize();
}

// 0 normal, 1 unknown, 2 control, 3 byte, 4 unused.
int dpft_spm_kind(const void* h, int id) {
  const Processor& p = sp(h);
  if (p.IsUnknown(id)) return 1;
  if (p.IsControl(id)) return 2;
  if (p.IsByte(id)) return 3;
  if (p.IsUnused(id)) return 4;
  return 0;
}

void dpft_spm_piece(const void* h, int id, std::string* out) {
  *out = sp(h).IdToPiece(id);
}

int dpft_spm_piece_to_id(const void* h, const char* piece, size_t len) {
  return sp(h).PieceToId(std::string_view(piece, len));
}

// 0 unk, 1 bos, 2 eos, 3 pad: the id, or -1 when the model has none.
int dpft_spm_special(const void* h, int which) {
  const Processor& p = sp(h);
  switch (which) {
    case 0:
      return p.unk_id();
    case 1:
      return p.bos_id();
    case 2:
      return p.eos_id();
    default:
      return p.pad_id();
  }
}

}  // extern "C"
