// A tokenizer: added and special tokens, bos/eos, truncation and batch padding with attention
// masks, around one of two models: byte-level BPE (a regex pre-tokenizer, BPE inside each piece,
// results cached per piece; exact on bytes: decode(encode(t)) == t for every valid UTF-8 text t)
// or a SentencePiece model run by its library (core/tokenizer/sentencepiece.hpp: its own
// normaliser and dummy prefix; decode is the library's). Loaders (core/tokenizer/load.hpp) build
// one from HF tokenizer.json, GPT-2 vocab.json + merges.txt, tiktoken rank files or
// SentencePiece tokenizer.model files.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/tokenizer/bpe.hpp"
#include "core/tokenizer/chat.hpp"
#include "core/tokenizer/pretokenizer.hpp"
#include "core/tokenizer/sentencepiece.hpp"

namespace dpft::tok {

struct AddedToken {
  std::string content;
  TokenId id = 0;
  // special: matched in text only when EncodeOptions::allow_special is set (control tokens).
  // Not special (HF added tokens with "special": false): always matched.
  bool special = true;
};

struct EncodeOptions {
  // Text spelling a special token ("<|im_end|>") becomes that token's id. Off: it is ordinary
  // text (the safe default for training data).
  bool allow_special = false;
  // Add the tokenizer's bos / eos where it adds them (add_bos() / add_eos()).
  bool add_special = false;
  // > 0: keep at most this many ids, bos/eos included; the end of the text is cut.
  size_t max_length = 0;
  // False: the text continues a longer one (a chat prompt's text after a control token), so a
  // SentencePiece tokenizer that puts its dummy prefix only where the text starts (HF legacy:
  // false) puts none here.
  bool text_start = true;
};

struct Encoding {
  std::vector<TokenId> ids;
  std::vector<Span> offsets;  // byte range of each id in the text; bos/eos get empty ranges
};

enum class PaddingSide { kRight, kLeft };

struct BatchOptions {
  EncodeOptions encode;
  PaddingSide padding_side = PaddingSide::kRight;
  bool pad_to_max_length = false;  // every row padded to encode.max_length (not the longest row)
  std::optional<TokenId> pad_id;   // default: the tokenizer's pad, else its eos
};

struct Batch {
  std::vector<std::vector<TokenId>> input_ids;       // (B, T)
  std::vector<std::vector<uint8_t>> attention_mask;  // (B, T): 1 = token, 0 = padding
  std::vector<size_t> lengths;                       // (B): ids per row before padding
};

// Everything a loader found; the Tokenizer constructor checks it.
struct TokenizerParts {
  std::string source;        // path it came from
  std::string format;        // "tokenizer.json" | "vocab+merges" | "tiktoken" | "sentencepiece"
  std::string pretokenizer;  // "gpt2" | "llama3" | "qwen2" | "custom" | "sentencepiece"
  std::unique_ptr<BpeModel> bpe;        // one of bpe and spm
  std::shared_ptr<const SpmModel> spm;  // its control and unknown pieces: in `added`
  // SentencePiece: the dummy prefix only where the text starts, not after a special token (HF
  // `legacy: false`, Metaspace prepend_scheme "first"); else every stretch gets one.
  bool spm_prefix_first_only = false;
  std::string pattern;
  bool add_prefix_space = false;  // HF ByteLevel: " " before text not starting with one
  std::vector<AddedToken> added;
  std::vector<BpeModel::Entry> inert;  // ids that decode but are never produced by encode
  std::optional<TokenId> bos, eos, pad;
  bool add_bos = false, add_eos = false;
  ChatFormat chat_format = ChatFormat::kPlain;
  bool chat_template_unknown = false;  // tokenizer_config.json has a template dpft cannot name
};

class Tokenizer {
 public:
  // Throws InputError if ids collide or bos/eos/pad name unknown ids.
  explicit Tokenizer(TokenizerParts parts);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // Throws InputError naming the byte offset when `text` is not valid UTF-8. Thread-safe
  // (concurrent calls share the piece cache under a lock).
  std::vector<TokenId> encode(std::string_view text, const EncodeOptions& opt = {}) const;
  Encoding encode_with_offsets(std::string_view text, const EncodeOptions& opt = {}) const;
  // Rows padded to a common length T; ConfigError if no pad id can be found.
  Batch encode_batch(const std::vector<std::string>& texts, const BatchOptions& opt = {}) const;

  // The bytes the ids stand for (special tokens as their text unless skipped). Exact inverse of
  // encode; a slice of ids may end inside a UTF-8 character. InputError on an unknown id.
  std::string decode(const std::vector<TokenId>& ids, bool skip_special = false) const;
  // What an id looks like: regular tokens in the byte-level spelling ("Ġworld") or as the
  // SentencePiece model writes them ("▁world"), added tokens as their text. InputError on an
  // unknown id.
  std::string piece(TokenId id) const;
  // The id of an added token's text, or of a regular token's byte-level spelling.
  std::optional<TokenId> token_to_id(std::string_view token) const;
  bool is_special(TokenId id) const;

  int64_t vocab_size() const { return static_cast<int64_t>(kind_.size()); }  // max id + 1
  const BpeModel& bpe() const;  // ConfigError for a SentencePiece tokenizer
  bool is_sentencepiece() const { return spm_ != nullptr; }
  const std::vector<AddedToken>& added_tokens() const { return added_; }
  std::optional<TokenId> bos_id() const { return bos_; }
  std::optional<TokenId> eos_id() const { return eos_; }
  std::optional<TokenId> pad_id() const { return pad_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  ChatFormat chat_format() const { return chat_format_; }
  // tokenizer_config.json's chat_template is one no format here implements (chat_format() is
  // then plain); data.chat_format auto refuses it.
  bool chat_template_unknown() const { return chat_template_unknown_; }
  const std::string& source() const { return source_; }
  const std::string& format() const { return format_; }
  const std::string& pretokenizer() const { return pretokenizer_name_; }
  bool regex_jit() const;  // the pre-tokenizer's regex is JIT-compiled (false: none)
  size_t cache_size() const;

 private:
  enum Kind : uint8_t { kHole = 0, kRegular, kInert, kAdded, kSpecial };
  struct Cache;
  struct Match {
    size_t pos = 0, len = 0;
    TokenId id = -1;
  };
  void encode_into(std::string_view text, const EncodeOptions& opt, std::vector<TokenId>& ids,
                   std::vector<Span>* offsets) const;
  // Pre-tokenize and BPE one stretch of text without added tokens (at most `max_pieces`
  // pieces); offsets are shifted by `base`. `at_start`: the stretch begins the whole text (the
  // one place a prefix-first SentencePiece tokenizer puts its dummy prefix).
  void encode_text(std::string_view text, uint32_t base, bool at_start, size_t max_pieces,
                   std::vector<TokenId>& ids, std::vector<Span>* offsets, Cache& cache) const;
  Match find_added(std::string_view text, size_t from, bool allow_special) const;

  std::string source_, format_, pretokenizer_name_;
  std::unique_ptr<BpeModel> bpe_;
  std::shared_ptr<const SpmModel> spm_;
  bool spm_prefix_first_ = false;
  std::unique_ptr<RegexSplitter> splitter_;  // byte-level BPE only
  bool add_prefix_space_ = false;
  std::vector<AddedToken> added_;
  std::unordered_map<std::string, TokenId> added_index_;
  std::array<std::vector<uint32_t>, 256>
      added_by_first_byte_;  // indices into added_, longest first
  bool any_always_matched_ = false;
  std::vector<uint8_t> kind_;                         // by id
  std::unordered_map<TokenId, std::string> id_text_;  // added and inert tokens: their bytes
  std::optional<TokenId> bos_, eos_, pad_;
  bool add_bos_ = false, add_eos_ = false;
  ChatFormat chat_format_ = ChatFormat::kPlain;
  bool chat_template_unknown_ = false;
  std::unique_ptr<Cache> cache_;
};

// A sentence or a pair with the model's special tokens, for encoders.
struct PairEncoding {
  std::vector<int64_t> ids;  // BERT: [CLS] a [SEP] (b [SEP]); RoBERTa: <s> a </s> (</s> b </s>)
  std::vector<int64_t> type_ids;  // BERT: 0 ... 0 (1 ... 1); RoBERTa: all 0 (one type)
};

// Truncation "longest_first" as HF's Python tokenizers do it: while the segments and `specials`
// special tokens exceed max_length (0: no limit), drop the last token of the longer segment (of
// the second on a tie). ConfigError when max_length cannot hold the specials (`pair` names it).
void truncate_longest_first(std::vector<int64_t>& a, std::vector<int64_t>& b, size_t specials,
                            size_t max_length, bool pair);

// RoBERTa's templates: <s> a </s>, or <s> a </s></s> b </s>; each segment encoded alone without
// special tokens (as HF's RobertaTokenizer, add_prefix_space off); truncation longest_first.
// ConfigError when the tokenizer has no bos or eos.
PairEncoding encode_roberta_pair(const Tokenizer& t, std::string_view a,
                                 std::optional<std::string_view> b, size_t max_length = 0);

}  // namespace dpft::tok
