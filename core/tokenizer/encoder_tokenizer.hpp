// The tokenizer of an encoder checkpoint (BERT: WordPiece from vocab.txt or a WordPiece
// tokenizer.json; RoBERTa: byte-level BPE), one interface for single sentences and pairs with
// the model's special tokens and token types (docs/tokenizers.md, "Pairs").
#pragma once
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/tokenizer/tokenizer.hpp"
#include "core/tokenizer/wordpiece.hpp"

namespace dpft::tok {

class EncoderTokenizer {
 public:
  // A WordPiece vocabulary when `path` holds one (find_wordpiece), else a BPE tokenizer
  // (load_tokenizer) with RoBERTa's templates. InputError naming the path when neither loads;
  // ConfigError when a BPE tokenizer has no bos / eos (RoBERTa's <s> and </s>).
  static EncoderTokenizer load(const std::filesystem::path& path);
  explicit EncoderTokenizer(WordPiece wp);
  explicit EncoderTokenizer(Tokenizer bpe);
  ~EncoderTokenizer();
  EncoderTokenizer(EncoderTokenizer&&) noexcept;
  EncoderTokenizer& operator=(EncoderTokenizer&&) noexcept;

  // [CLS] a [SEP] (b [SEP]) / <s> a </s> (</s> b </s>), truncated longest_first to max_length
  // (0: no limit).
  PairEncoding encode(std::string_view a, std::optional<std::string_view> b = std::nullopt,
                      size_t max_length = 0) const;
  int64_t pad_id() const;  // [PAD] / <pad>; ConfigError when the vocabulary has none
  std::optional<int64_t> mask_id() const;  // [MASK] / <mask>
  int64_t vocab_size() const;
  bool wordpiece() const { return wp_ != nullptr; }
  const std::string& kind() const { return kind_; }  // "wordpiece" | "bpe"

 private:
  std::unique_ptr<WordPiece> wp_;
  std::unique_ptr<Tokenizer> bpe_;
  std::string kind_;
};

}  // namespace dpft::tok
