// Loading byte-level BPE tokenizers from disk (docs/tokenizers.md):
//   HF tokenizer.json (BPE model, ByteLevel pre-tokenizer, added_tokens, post_processor),
//   GPT-2 layout vocab.json + merges.txt (or vocab.bpe),
//   tiktoken base64 rank files (Llama-3 tokenizer.model, Qwen qwen.tiktoken) with the special
//   tokens and pre-tokenizer regex of their family,
// and tokenizer_config.json on top when present (bos/eos/pad, add_bos/add_eos, chat template,
// extra added tokens). Every failure is an InputError (exit 3) naming the path.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "core/tokenizer/tokenizer.hpp"

namespace dpft::tok {

// Families of tiktoken rank files: pre-tokenizer regex + special-token table.
//   llama3  Llama-3: 256 specials from the first id after the ranks (Meta's order)
//   qwen2   Qwen2 / Qwen2.5: <|endoftext|> <|im_start|> <|im_end|> + 19 Qwen2.5 tokens
//   qwen1   Qwen(-1): <|endoftext|> <|im_start|> <|im_end|> + <|extra_0|>..<|extra_204|>
inline const std::vector<std::string> kTiktokenFamilies = {"llama3", "qwen2", "qwen1"};

struct LoadOptions {
  // For a tiktoken file: one of kTiktokenFamilies; empty = decided from tokenizer_config.json,
  // else from the file name (docs/tokenizers.md). ConfigError if not a known family.
  std::string tiktoken_family;
};

// `path`: a directory (the format follows from the files present: tokenizer.json, else
// vocab.json/encoder.json + merges.txt/vocab.bpe, else *.tiktoken / tokenizer.model) or a single
// file (*.json = HF tokenizer.json, anything else a tiktoken rank file).
Tokenizer load_tokenizer(const std::filesystem::path& path, const LoadOptions& opt = {});

// The single-format loaders (no tokenizer_config.json).
Tokenizer load_hf_tokenizer_json(const std::filesystem::path& file);
Tokenizer load_vocab_merges(const std::filesystem::path& vocab_json,
                            const std::filesystem::path& merges);
Tokenizer load_tiktoken(const std::filesystem::path& file, const std::string& family);

// The special tokens of a tiktoken family, in id order from the first id after the ranks, with
// their HF "special" flag.
std::vector<AddedToken> tiktoken_special_tokens(const std::string& family, TokenId first_id);

}  // namespace dpft::tok
