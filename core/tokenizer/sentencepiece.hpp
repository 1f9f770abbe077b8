// A SentencePiece model (tokenizer.model: Llama-2, Mistral, Gemma, Phi-3, T5), run by the
// official library (Debian libsentencepiece-dev, reached through the module libdpft_spm.so:
// sentencepiece_shim.cpp): its normaliser, dummy prefix, BPE or unigram segmentation and byte
// fallback, exactly as the model file says. ConfigError when the module cannot be loaded. The
// Tokenizer (core/tokenizer/tokenizer.hpp) splits text around added tokens and hands each stretch
// here.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/tokenizer/pretokenizer.hpp"

namespace dpft::tok {

class SpmModel {
 public:
  enum class PieceKind : uint8_t { kNormal, kUnknown, kControl, kUserDefined, kByte, kUnused };

  // InputError naming `file` when it is not a SentencePiece model.
  static std::shared_ptr<const SpmModel> load(const std::filesystem::path& file);
  ~SpmModel();

  // Appends the ids of `text` (no bos / eos); offsets (optional): each id's byte range in
  // `text`, shifted by `base`. `dummy_prefix` false encodes as if the model's normaliser had
  // add_dummy_prefix off (HF `legacy: false` for text after a special token). Thread-safe.
  void encode(std::string_view text, uint32_t base, std::vector<int32_t>& ids,
              std::vector<Span>* offsets, bool dummy_prefix = true) const;
  // The text of a run of regular ids as the library decodes it (the dummy prefix's space
  // removed at the start unless `dummy_prefix` is false, byte pieces joined into UTF-8).
  std::string decode(const std::vector<int32_t>& ids, bool dummy_prefix = true) const;

  int32_t size() const;  // pieces: ids 0 .. size() - 1
  PieceKind kind(int32_t id) const;
  std::string piece(int32_t id) const;  // as written in the model ("▁Hello", "<0x0A>", "<s>")
  std::optional<int32_t> find(std::string_view piece) const;
  std::optional<int32_t> unk_id() const;
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  std::optional<int32_t> pad_id() const;

 private:
  SpmModel();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dpft::tok
