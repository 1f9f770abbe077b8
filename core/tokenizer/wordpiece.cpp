#include "core/tokenizer/wordpiece.hpp"

#include <fmt/format.h>
#include <utf8proc.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <memory>

#include "core/tokenizer/unicode.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"

namespace dpft::tok {

namespace {

// Code points of `s` (invalid UTF-8 bytes become U+FFFD, which clean_text drops).
std::vector<uint32_t> code_points(std::string_view s) {
  std::vector<uint32_t> out;
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  utf8proc_ssize_t left = static_cast<utf8proc_ssize_t>(s.size());
  while (left > 0) {
    utf8proc_int32_t cp = 0;
    utf8proc_ssize_t n = utf8proc_iterate(p, left, &cp);
    if (n <= 0) {  // one invalid byte
      out.push_back(0xFFFD);
      n = 1;
    } else {
      out.push_back(static_cast<uint32_t>(cp));
    }
    p += n;
    left -= n;
  }
  return out;
}

utf8proc_category_t category(uint32_t cp) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(cp));
}

bool is_whitespace(uint32_t cp) {
  return cp == ' ' || cp == '\t' || cp == '\n' || cp == '\r' ||
         category(cp) == UTF8PROC_CATEGORY_ZS;
}

bool is_control(uint32_t cp) {  // every C* category but tab, newline, carriage return
  if (cp == '\t' || cp == '\n' || cp == '\r') return false;
  switch (category(cp)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
      return true;
    default:
      return false;
  }
}

bool is_punctuation(uint32_t cp) {  // ASCII symbols count, as in BERT
  if ((cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) ||
      (cp >= 123 && cp <= 126))
    return true;
  switch (category(cp)) {
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
      return true;
    default:
      return false;
  }
}

bool is_cjk(uint32_t cp) {  // the CJK Unified Ideographs blocks BERT spaces out
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

// Lower case (utf8proc's simple mapping; U+0130 gets its full mapping "i" + U+0307).
void append_lower(std::vector<uint32_t>& out, uint32_t cp) {
  if (cp == 0x130) {
    out.push_back('i');
    out.push_back(0x307);
    return;
  }
  out.push_back(static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
}

// NFD, then every nonspacing mark (Mn) dropped.
std::vector<uint32_t> strip_accents(const std::vector<uint32_t>& word) {
  std::vector<uint32_t> out;
  utf8proc_int32_t buf[32];
  for (uint32_t cp : word) {
    int last = 0;
    utf8proc_ssize_t n =
        utf8proc_decompose_char(static_cast<utf8proc_int32_t>(cp), buf, 32,
                                static_cast<utf8proc_option_t>(UTF8PROC_DECOMPOSE), &last);
    if (n < 0 || n > 32) {
      out.push_back(cp);
      continue;
    }
    for (utf8proc_ssize_t i = 0; i < n; ++i)
      if (category(static_cast<uint32_t>(buf[i])) != UTF8PROC_CATEGORY_MN)
        out.push_back(static_cast<uint32_t>(buf[i]));
  }
  return out;
}

std::string to_utf8(const std::vector<uint32_t>& cps, size_t begin, size_t end) {
  std::string s;
  for (size_t i = begin; i < end; ++i) append_utf8(s, cps[i]);
  return s;
}

}  // namespace

WordPiece::WordPiece(std::vector<std::string> vocab, WordPieceOptions opts)
    : vocab_(std::move(vocab)), opts_(std::move(opts)) {
  if (!opts_.strip_accents) opts_.strip_accents = opts_.lowercase;
  for (size_t i = 0; i < vocab_.size(); ++i) {
    auto [it, fresh] = index_.emplace(vocab_[i], static_cast<int64_t>(i));
    DPFT_CHECK_AS(ConfigError, fresh,
                  "WordPiece vocabulary: token '{}' appears twice (ids {} and {})", vocab_[i],
                  it->second, i);
  }
  auto need = [&](const std::string& t, const char* what) {
    auto id = token_to_id(t);
    DPFT_CHECK_AS(ConfigError, id.has_value(),
                  "WordPiece vocabulary ({} tokens) has no {} token '{}'", vocab_.size(), what, t);
    return *id;
  };
  unk_ = need(opts_.unk, "unknown");
  cls_ = need(opts_.cls, "classification");
  sep_ = need(opts_.sep, "separator");
  pad_ = token_to_id(opts_.pad);
  mask_ = token_to_id(opts_.mask);
}

WordPiece WordPiece::load(const std::filesystem::path& path, WordPieceOptions opts) {
  DPFT_CHECK_AS(InputError, std::filesystem::is_regular_file(path),
                "WordPiece vocabulary {} does not exist (give vocab.txt or tokenizer.json)",
                path.string());
  const std::string text = read_file(path);
  std::vector<std::string> vocab;
  if (path.extension() == ".json") {
    nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    DPFT_CHECK_AS(InputError,
                  j.is_object() && j.contains("model") && j["model"].is_object() &&
                      j["model"].value("type", "") == "WordPiece" && j["model"].contains("vocab") &&
                      j["model"]["vocab"].is_object(),
                  "{} is not a WordPiece tokenizer.json (model.type must be WordPiece, with a "
                  "vocab object)",
                  path.string());
    const nlohmann::json& m = j["model"];
    vocab.resize(m["vocab"].size());
    std::vector<bool> seen(vocab.size(), false);
    for (const auto& [token, id] : m["vocab"].items()) {
      DPFT_CHECK_AS(InputError,
                    id.is_number_integer() && id.get<int64_t>() >= 0 &&
                        id.get<int64_t>() < static_cast<int64_t>(vocab.size()) &&
                        !seen[id.get<size_t>()],
                    "{}: the id of '{}' is not a unique integer in [0, {})", path.string(), token,
                    vocab.size());
      seen[id.get<size_t>()] = true;
      vocab[id.get<size_t>()] = token;
    }
    opts.unk = m.value("unk_token", opts.unk);
    opts.prefix = m.value("continuing_subword_prefix", opts.prefix);
    opts.max_chars_per_word = m.value("max_input_chars_per_word", opts.max_chars_per_word);
    if (j.contains("normalizer") && j["normalizer"].is_object() &&
        j["normalizer"].value("type", "") == "BertNormalizer") {
      const nlohmann::json& n = j["normalizer"];
      opts.lowercase = n.value("lowercase", opts.lowercase);
      opts.chinese_chars = n.value("handle_chinese_chars", opts.chinese_chars);
      opts.clean_text = n.value("clean_text", opts.clean_text);
      if (n.contains("strip_accents") && n["strip_accents"].is_boolean())
        opts.strip_accents = n["strip_accents"].get<bool>();
    }
  } else {
    size_t start = 0;
    while (start < text.size()) {
      size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      std::string line = text.substr(start, end - start);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      vocab.push_back(line);
      start = end + 1;
    }
    DPFT_CHECK_AS(InputError, find_invalid_utf8(text) == kNoInvalidByte,
                  "{} is not valid UTF-8 (a WordPiece vocab.txt has one token per line)",
                  path.string());
  }
  try {
    return WordPiece(std::move(vocab), std::move(opts));
  } catch (const ConfigError& e) {
    throw InputError(fmt::format("{}: {}", path.string(), e.what()));
  }
}

std::vector<std::string> WordPiece::basic_tokenize(std::string_view text) const {
  // Clean and space out CJK, then split on whitespace.
  std::vector<uint32_t> cps;
  for (uint32_t cp : code_points(text)) {
    if (opts_.clean_text && (cp == 0 || cp == 0xFFFD || is_control(cp))) continue;
    if (is_whitespace(cp)) {
      cps.push_back(' ');
    } else if (opts_.chinese_chars && is_cjk(cp)) {
      cps.push_back(' ');
      cps.push_back(cp);
      cps.push_back(' ');
    } else {
      cps.push_back(cp);
    }
  }
  std::vector<std::string> words;
  size_t i = 0;
  while (i < cps.size()) {
    while (i < cps.size() && is_whitespace(cps[i])) ++i;
    size_t j = i;
    while (j < cps.size() && !is_whitespace(cps[j])) ++j;
    if (j == i) break;
    std::vector<uint32_t> w;
    if (opts_.lowercase)
      for (size_t k = i; k < j; ++k) append_lower(w, cps[k]);
    else
      w.assign(cps.begin() + static_cast<std::ptrdiff_t>(i),
               cps.begin() + static_cast<std::ptrdiff_t>(j));
    if (*opts_.strip_accents) w = strip_accents(w);
    // Every punctuation character is a word of its own.
    size_t s = 0;
    for (size_t k = 0; k < w.size(); ++k) {
      if (!is_punctuation(w[k])) continue;
      if (k > s) words.push_back(to_utf8(w, s, k));
      words.push_back(to_utf8(w, k, k + 1));
      s = k + 1;
    }
    if (s < w.size()) words.push_back(to_utf8(w, s, w.size()));
    i = j;
  }
  return words;
}

void WordPiece::word_pieces(const std::string& word, std::vector<int64_t>& out) const {
  // Byte offsets of the word's character boundaries.
  std::vector<size_t> bounds{0};
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(word.data());
  size_t off = 0;
  while (off < word.size()) {
    utf8proc_int32_t cp = 0;
    utf8proc_ssize_t n =
        utf8proc_iterate(p + off, static_cast<utf8proc_ssize_t>(word.size() - off), &cp);
    off += n > 0 ? static_cast<size_t>(n) : 1;
    bounds.push_back(off);
  }
  const size_t chars = bounds.size() - 1;
  if (chars > opts_.max_chars_per_word) {
    out.push_back(unk_);
    return;
  }
  std::vector<int64_t> pieces;
  size_t start = 0;
  std::string candidate;
  while (start < chars) {
    std::optional<int64_t> found;
    size_t end = chars;
    for (; end > start; --end) {  // longest match first
      candidate = start > 0 ? opts_.prefix : std::string();
      candidate.append(word, bounds[start], bounds[end] - bounds[start]);
      if (auto it = index_.find(candidate); it != index_.end()) {
        found = it->second;
        break;
      }
    }
    if (!found) {  // an unmatched remainder: the whole word is unknown
      out.push_back(unk_);
      return;
    }
    pieces.push_back(*found);
    start = end;
  }
  out.insert(out.end(), pieces.begin(), pieces.end());
}

std::vector<int64_t> WordPiece::encode(std::string_view text) const {
  std::vector<int64_t> ids;
  for (const std::string& w : basic_tokenize(text)) word_pieces(w, ids);
  return ids;
}

std::vector<std::string> WordPiece::tokenize(std::string_view text) const {
  std::vector<std::string> out;
  for (int64_t id : encode(text)) out.push_back(vocab_[static_cast<size_t>(id)]);
  return out;
}

PairEncoding WordPiece::encode_pair(std::string_view a, std::optional<std::string_view> b,
                                    size_t max_length) const {
  std::vector<int64_t> x = encode(a), y = b ? encode(*b) : std::vector<int64_t>();
  const size_t specials = b ? 3 : 2;
  truncate_longest_first(x, y, specials, max_length, b.has_value());
  PairEncoding e;
  e.ids.push_back(cls_);
  e.ids.insert(e.ids.end(), x.begin(), x.end());
  e.ids.push_back(sep_);
  e.type_ids.assign(e.ids.size(), 0);
  if (b) {
    e.ids.insert(e.ids.end(), y.begin(), y.end());
    e.ids.push_back(sep_);
    e.type_ids.resize(e.ids.size(), 1);
  }
  return e;
}

std::string WordPiece::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  for (int64_t id : ids) {
    const std::string& t = id_to_token(id);
    if (!out.empty() && !opts_.prefix.empty() && t.rfind(opts_.prefix, 0) == 0) {
      out += t.substr(opts_.prefix.size());
    } else {
      if (!out.empty()) out += ' ';
      out += t;
    }
  }
  return out;
}

std::optional<int64_t> WordPiece::token_to_id(const std::string& token) const {
  auto it = index_.find(token);
  return it == index_.end() ? std::nullopt : std::optional<int64_t>(it->second);
}

std::optional<std::filesystem::path> find_wordpiece(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  auto wordpiece_json = [](const fs::path& f) {
    if (!fs::is_regular_file(f)) return false;
    nlohmann::json j = nlohmann::json::parse(read_file(f), nullptr, false);
    return j.is_object() && j.contains("model") && j["model"].is_object() &&
           j["model"].value("type", "") == "WordPiece";
  };
  if (fs::is_regular_file(path)) {
    if (path.filename() == "vocab.txt") return path;
    if (path.extension() == ".json" && wordpiece_json(path)) return path;
    return std::nullopt;
  }
  if (!fs::is_directory(path)) return std::nullopt;
  if (wordpiece_json(path / "tokenizer.json")) return path / "tokenizer.json";
  if (fs::is_regular_file(path / "vocab.txt") && !fs::exists(path / "tokenizer.json") &&
      !fs::exists(path / "vocab.json"))
    return path / "vocab.txt";
  return std::nullopt;
}

const std::string& WordPiece::id_to_token(int64_t id) const {
  DPFT_CHECK_AS(ConfigError, id >= 0 && id < vocab_size(),
                "token id {} is outside the WordPiece vocabulary (0 to {})", id, vocab_size() - 1);
  return vocab_[static_cast<size_t>(id)];
}

}  // namespace dpft::tok
