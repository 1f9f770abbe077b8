// Pre-tokenization: a PCRE2 regex (UTF + UCP, JIT-compiled when available) cuts text into
// pieces; BPE then runs inside each piece. Holds the three patterns byte-level BPE models use.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dpft::tok {

// GPT-2 / RoBERTa (HF ByteLevel pre-tokenizer with use_regex).
extern const char* const kGpt2Pattern;
// Llama-3 (tiktoken cl100k-style: case-insensitive contractions, digits in runs of 1..3).
extern const char* const kLlama3Pattern;
// Qwen / Qwen2 (as Llama-3, but every digit is its own piece).
extern const char* const kQwen2Pattern;

// A byte range [begin, end) of the text.
struct Span {
  uint32_t begin = 0, end = 0;
};

class RegexSplitter {
 public:
  // Throws InputError naming `origin` (where the pattern came from) if it does not compile.
  explicit RegexSplitter(std::string pattern, const std::string& origin = "pattern");
  ~RegexSplitter();
  RegexSplitter(RegexSplitter&&) noexcept;
  RegexSplitter& operator=(RegexSplitter&&) noexcept;

  // Appends to `out` the pieces of `text` (valid UTF-8; offsets relative to `text`) in order.
  // The pieces tile the text: stretches the regex does not match become pieces of their own,
  // as HF's "Isolated" split behaviour does. Stops after `max_pieces` pieces (the rest of the
  // text is then not covered). Thread-safe.
  void split(std::string_view text, std::vector<Span>& out, size_t max_pieces = SIZE_MAX) const;

  const std::string& pattern() const { return pattern_; }
  bool jit() const { return jit_; }

 private:
  struct Code;
  std::string pattern_;
  std::unique_ptr<Code> code_;
  bool jit_ = false;
};

}  // namespace dpft::tok
