// PCRE2 pre-tokenizer (see pretokenizer.hpp).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "core/tokenizer/pretokenizer.hpp"

#include <fmt/format.h>
#include <pcre2.h>

#include "core/util/error.hpp"

namespace dpft::tok {

// Contractions, optional-space letter/digit/other runs, then whitespace: a whitespace run
// followed by a non-space keeps its last space for the next piece ("\s+(?!\S)").
const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct RegexSplitter::Code {
  pcre2_code* code = nullptr;
  ~Code() {
    if (code) pcre2_code_free(code);
  }
};

namespace {

std::string pcre2_message(int err) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(err, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

// Per-thread match state, shared by all patterns: one ovector pair is enough (the whole match;
// patterns with groups still report it), and a JIT stack large enough for long runs.
struct ThreadMatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  ThreadMatchState() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    jit_stack = pcre2_jit_stack_create(64 * 1024, 16 * 1024 * 1024, nullptr);
    if (!data || !context) throw RuntimeError("PCRE2: out of memory creating match data");
    if (jit_stack) pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~ThreadMatchState() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
    if (jit_stack) pcre2_jit_stack_free(jit_stack);
  }
};

ThreadMatchState& match_state() {
  thread_local ThreadMatchState state;
  return state;
}

size_t utf8_length(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

}  // namespace

RegexSplitter::RegexSplitter(std::string pattern, const std::string& origin)
    : pattern_(std::move(pattern)), code_(std::make_unique<Code>()) {
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern_.data()), pattern_.size(),
                              PCRE2_UTF | PCRE2_UCP, &err, &err_offset, nullptr);
  if (!code_->code)
    throw InputError(
        fmt::format("{}: the pre-tokenizer regex does not compile at offset {}: {} "
                    "(pattern: {})",
                    origin, err_offset, pcre2_message(err), pattern_));
  jit_ = pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE) == 0;
}

RegexSplitter::~RegexSplitter() = default;
RegexSplitter::RegexSplitter(RegexSplitter&&) noexcept = default;
RegexSplitter& RegexSplitter::operator=(RegexSplitter&&) noexcept = default;

void RegexSplitter::split(std::string_view text, std::vector<Span>& out, size_t max_pieces) const {
  ThreadMatchState& st = match_state();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t n = text.size();
  size_t emitted = 0;  // end of the last piece appended
  size_t from = 0;     // where the next search starts
  const size_t stop = max_pieces == SIZE_MAX ? SIZE_MAX : out.size() + max_pieces;
  while (from < n && out.size() < stop) {
    int rc =
        jit_ ? pcre2_jit_match(code_->code, subject, n, from, 0, st.data, st.context)
             : pcre2_match(code_->code, subject, n, from, PCRE2_NO_UTF_CHECK, st.data, st.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0)
      throw RuntimeError(fmt::format("pre-tokenizer regex failed at byte {} of a {}-byte text: {}",
                                     from, n, pcre2_message(rc)));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
    size_t s = ov[0], e = ov[1];
    if (e == s) {  // an empty match covers nothing: search again one character later
      from = s + utf8_length(static_cast<unsigned char>(text[s < n ? s : n - 1]));
      continue;
    }
    if (s > emitted) {
      out.push_back({static_cast<uint32_t>(emitted), static_cast<uint32_t>(s)});
      if (out.size() >= stop) return;
    }
    out.push_back({static_cast<uint32_t>(s), static_cast<uint32_t>(e)});
    emitted = from = e;
  }
  if (emitted < n && out.size() < stop)
    out.push_back({static_cast<uint32_t>(emitted), static_cast<uint32_t>(n)});
}

}  // namespace dpft::tok
