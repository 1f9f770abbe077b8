// BERT's WordPiece tokenizer (Devlin et al. 2019; Wu et al. 2016), as HF's BertTokenizer does it:
//   basic tokenizer: drop NUL, U+FFFD and control characters, whitespace -> ' ', spaces around
//     CJK ideographs; split on whitespace; uncased: lower-case, then NFD and drop combining
//     marks (strip_accents); split every punctuation character (ASCII symbols and Unicode P*)
//     into its own word;
//   wordpiece: per word, greedy longest-match-first against the vocabulary, later pieces with
//     the "##" prefix; a word with an unmatched remainder, or longer than 100 characters, is
//     [UNK] as a whole.
// Pairs: [CLS] a [SEP] b [SEP], token types 0 for the first segment (with [CLS] and its [SEP]),
// 1 for the second; truncation "longest_first" (one token at a time from the longer segment,
// the second on ties), as HF does. Unicode case mapping, decomposition and categories come from
// utf8proc.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/tokenizer/tokenizer.hpp"  // PairEncoding, truncate_longest_first

namespace dpft::tok {

struct WordPieceOptions {
  bool lowercase = true;              // uncased checkpoints (bert-base-uncased, all-MiniLM-L6-v2)
  std::optional<bool> strip_accents;  // default: = lowercase (HF's default)
  bool chinese_chars = true;          // spaces around CJK ideographs
  bool clean_text = true;             // drop control characters, whitespace -> ' '
  std::string unk = "[UNK]", cls = "[CLS]", sep = "[SEP]", pad = "[PAD]", mask = "[MASK]";
  std::string prefix = "##";  // continuing-subword prefix
  size_t max_chars_per_word = 100;
};

class WordPiece {
 public:
  // `vocab`: the tokens in id order (vocab.txt's lines). ConfigError on a duplicate token or a
  // missing unk / cls / sep token.
  WordPiece(std::vector<std::string> vocab, WordPieceOptions opts = {});
  // vocab.txt (one token per line), or a tokenizer.json whose model is WordPiece (its
  // normalizer's lowercase / strip_accents / handle_chinese_chars / clean_text are read).
  // InputError naming the file when it cannot be read or is not a WordPiece vocabulary.
  static WordPiece load(const std::filesystem::path& path, WordPieceOptions opts = {});

  // The basic tokenizer's words, then their pieces (as strings, "##" included).
  std::vector<std::string> basic_tokenize(std::string_view text) const;
  std::vector<std::string> tokenize(std::string_view text) const;
  std::vector<int64_t> encode(std::string_view text) const;  // no [CLS]/[SEP]
  // [CLS] a [SEP] or [CLS] a [SEP] b [SEP] with token types; max_length > 0 truncates the
  // segments longest_first so that the whole fits (ConfigError when not even the specials fit).
  PairEncoding encode_pair(std::string_view a, std::optional<std::string_view> b,
                           size_t max_length = 0) const;
  // Pieces joined, "##" continuations glued to the previous piece (special tokens kept).
  std::string decode(const std::vector<int64_t>& ids) const;

  std::optional<int64_t> token_to_id(const std::string& token) const;
  const std::string& id_to_token(int64_t id) const;  // ConfigError when out of range
  int64_t vocab_size() const { return static_cast<int64_t>(vocab_.size()); }
  int64_t unk_id() const { return unk_; }
  int64_t cls_id() const { return cls_; }
  int64_t sep_id() const { return sep_; }
  std::optional<int64_t> pad_id() const { return pad_; }
  std::optional<int64_t> mask_id() const { return mask_; }
  const WordPieceOptions& options() const { return opts_; }

 private:
  std::vector<std::string> vocab_;
  std::unordered_map<std::string, int64_t> index_;
  WordPieceOptions opts_;
  int64_t unk_ = 0, cls_ = 0, sep_ = 0;
  std::optional<int64_t> pad_, mask_;
  void word_pieces(const std::string& word, std::vector<int64_t>& out) const;
};

// The WordPiece vocabulary `path` names, if it is one: a vocab.txt file, a tokenizer.json whose
// model is WordPiece, or a directory holding either (a WordPiece tokenizer.json first; vocab.txt
// only when there is no tokenizer.json or vocab.json, i.e. not a BPE directory). nullopt else.
std::optional<std::filesystem::path> find_wordpiece(const std::filesystem::path& path);

}  // namespace dpft::tok
