// Tokenizer: encode/decode, added tokens, truncation, padding (see tokenizer.hpp).
#include "core/tokenizer/tokenizer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <limits>
#include <mutex>

#include "core/tokenizer/unicode.hpp"
#include "core/util/error.hpp"

namespace dpft::tok {

// BPE results per pre-token. Keys live in `keys` (a deque: stable addresses), ids in `pool`.
// Cleared when it reaches kMaxEntries; pieces longer than kMaxKeyBytes are not cached.
struct Tokenizer::Cache {
  static constexpr size_t kMaxEntries = size_t{1} << 20;
  static constexpr size_t kMaxKeyBytes = 256;
  std::mutex mu;
  std::unordered_map<std::string_view, std::pair<uint32_t, uint32_t>> map;  // -> (offset, count)
  std::deque<std::string> keys;
  std::vector<TokenId> pool;

  void insert(std::string_view key, const TokenId* ids, size_t n) {
    if (key.size() > kMaxKeyBytes) return;
    if (map.size() >= kMaxEntries) {
      map.clear();
      keys.clear();
      pool.clear();
    }
    keys.emplace_back(key);
    map.emplace(std::string_view(keys.back()),
                std::make_pair(static_cast<uint32_t>(pool.size()), static_cast<uint32_t>(n)));
    pool.insert(pool.end(), ids, ids + n);
  }
};

Tokenizer::Tokenizer(TokenizerParts p)
    : source_(std::move(p.source)),
      format_(std::move(p.format)),
      pretokenizer_name_(std::move(p.pretokenizer)),
      bpe_(std::move(p.bpe)),
      spm_(std::move(p.spm)),
      spm_prefix_first_(p.spm_prefix_first_only),
      add_prefix_space_(p.add_prefix_space),
      added_(std::move(p.added)),
      bos_(p.bos),
      eos_(p.eos),
      pad_(p.pad),
      add_bos_(p.add_bos),
      add_eos_(p.add_eos),
      chat_format_(p.chat_format),
      chat_template_unknown_(p.chat_template_unknown),
      cache_(std::make_unique<Cache>()) {
  DPFT_CHECK((bpe_ != nullptr) != (spm_ != nullptr),
             "a tokenizer needs one model: byte-level BPE or SentencePiece");
  if (bpe_) splitter_ = std::make_unique<RegexSplitter>(p.pattern, source_);

  TokenId max_id = bpe_ ? bpe_->max_id() : spm_->size() - 1;
  for (const auto& t : added_) max_id = std::max(max_id, t.id);
  for (const auto& t : p.inert) max_id = std::max(max_id, t.id);
  kind_.assign(static_cast<size_t>(max_id) + 1, kHole);
  if (bpe_) {
    for (TokenId id = 0; id <= bpe_->max_id(); ++id)
      if (bpe_->contains(id)) kind_[id] = kRegular;
  } else {  // control and unknown pieces are the loader's added tokens
    for (TokenId id = 0; id < spm_->size(); ++id) {
      const SpmModel::PieceKind k = spm_->kind(id);
      if (k != SpmModel::PieceKind::kControl && k != SpmModel::PieceKind::kUnknown)
        kind_[id] = kRegular;
    }
  }

  auto claim = [&](TokenId id, Kind k, const std::string& text) {
    if (id < 0)
      throw InputError(fmt::format("{}: token '{}' has a negative id {}", source_, text, id));
    if (kind_[id] != kHole) {
      std::string other = kind_[id] != kRegular ? id_text_[id]
                          : bpe_                ? bytes_to_byte_level(bpe_->bytes(id))
                                                : spm_->piece(id);
      throw InputError(
          fmt::format("{}: token '{}' and token '{}' share id {}", source_, text, other, id));
    }
    kind_[id] = k;
    id_text_[id] = text;
  };
  for (const auto& t : p.inert) claim(t.id, kInert, t.bytes);
  for (size_t i = 0; i < added_.size(); ++i) {
    const AddedToken& t = added_[i];
    if (t.content.empty())
      throw InputError(fmt::format("{}: added token {} is empty", source_, t.id));
    if (find_invalid_utf8(t.content) != kNoInvalidByte)
      throw InputError(fmt::format("{}: added token {} is not valid UTF-8", source_, t.id));
    claim(t.id, t.special ? kSpecial : kAdded, t.content);
    if (!added_index_.emplace(t.content, t.id).second)
      throw InputError(fmt::format("{}: added token '{}' appears twice", source_, t.content));
    added_by_first_byte_[static_cast<unsigned char>(t.content[0])].push_back(
        static_cast<uint32_t>(i));
    any_always_matched_ |= !t.special;
  }
  for (auto& v : added_by_first_byte_)  // leftmost-longest matching: try longer tokens first
    std::stable_sort(v.begin(), v.end(), [&](uint32_t a, uint32_t b) {
      return added_[a].content.size() > added_[b].content.size();
    });

  auto check = [&](const std::optional<TokenId>& id, const char* what) {
    if (id && (*id < 0 || *id >= vocab_size() || kind_[*id] == kHole))
      throw InputError(
          fmt::format("{}: the {} token id {} is not in the vocabulary", source_, what, *id));
  };
  check(bos_, "bos");
  check(eos_, "eos");
  check(pad_, "pad");
  if (add_bos_ && !bos_)
    throw InputError(fmt::format("{}: adds a bos token but defines none", source_));
  if (add_eos_ && !eos_)
    throw InputError(fmt::format("{}: adds an eos token but defines none", source_));
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

Tokenizer::Match Tokenizer::find_added(std::string_view text, size_t from,
                                       bool allow_special) const {
  if (added_.empty() || (!allow_special && !any_always_matched_)) return {};
  for (size_t i = from; i < text.size(); ++i) {
    const auto& cands = added_by_first_byte_[static_cast<unsigned char>(text[i])];
    for (uint32_t k : cands) {
      const AddedToken& t = added_[k];
      if (t.special && !allow_special) continue;
      if (text.compare(i, t.content.size(), t.content) == 0) return {i, t.content.size(), t.id};
    }
  }
  return {};
}

void Tokenizer::encode_text(std::string_view text, uint32_t base, bool at_start, size_t max_pieces,
                            std::vector<TokenId>& ids, std::vector<Span>* offsets,
                            Cache& cache) const {
  if (text.empty()) return;
  if (spm_) {  // the library normalises, adds its dummy prefix and segments
    spm_->encode(text, base, ids, offsets, !spm_prefix_first_ || at_start);
    return;
  }
  std::string prefixed;
  uint32_t shift = 0;  // 1 when a virtual leading space was added
  if (add_prefix_space_ && text[0] != ' ') {
    prefixed.reserve(text.size() + 1);
    prefixed.push_back(' ');
    prefixed.append(text);
    text = prefixed;
    shift = 1;
  }
  thread_local std::vector<Span> spans;
  spans.clear();
  splitter_->split(text, spans, max_pieces);
  for (const Span& s : spans) {
    std::string_view piece = text.substr(s.begin, s.end - s.begin);
    const size_t first = ids.size();
    auto it = cache.map.find(piece);
    if (it != cache.map.end()) {
      const TokenId* p = cache.pool.data() + it->second.first;
      ids.insert(ids.end(), p, p + it->second.second);
    } else {
      bpe_->encode_piece(piece, ids);
      cache.insert(piece, ids.data() + first, ids.size() - first);
    }
    if (offsets) {
      uint32_t pos = s.begin;
      for (size_t k = first; k < ids.size(); ++k) {
        uint32_t end = pos + static_cast<uint32_t>(bpe_->bytes(ids[k]).size());
        offsets->push_back(
            {base + std::max(pos, shift) - shift, base + std::max(end, shift) - shift});
        pos = end;
      }
    }
  }
}

void Tokenizer::encode_into(std::string_view text, const EncodeOptions& opt,
                            std::vector<TokenId>& ids, std::vector<Span>* offsets) const {
  if (text.size() >= std::numeric_limits<uint32_t>::max())
    throw InputError(
        fmt::format("text of {} bytes is too long to encode at once (limit 4 GiB)", text.size()));
  size_t bad = find_invalid_utf8(text);
  if (bad != kNoInvalidByte)
    throw InputError(fmt::format("text is not valid UTF-8: byte offset {} (0x{:02X})", bad,
                                 static_cast<unsigned char>(text[bad])));
  const bool bos = opt.add_special && add_bos_;
  const bool eos = opt.add_special && add_eos_;
  const size_t n_special = size_t(bos) + size_t(eos);
  size_t budget = std::numeric_limits<size_t>::max();
  if (opt.max_length > 0) {
    if (opt.max_length < n_special)
      throw ConfigError(
          fmt::format("max_length {} leaves no room for the {} bos/eos ids it must hold",
                      opt.max_length, n_special));
    budget = opt.max_length - n_special;
  }
  if (bos) {
    ids.push_back(*bos_);
    if (offsets) offsets->push_back({0, 0});
  }
  const size_t start = ids.size();
  auto used = [&] { return ids.size() - start; };
  {
    std::lock_guard<std::mutex> lock(cache_->mu);
    size_t pos = 0;
    while (pos < text.size() && used() < budget) {
      Match m = find_added(text, pos, opt.allow_special);
      size_t seg_end = m.id >= 0 ? m.pos : text.size();
      // Every piece gives at least one id, so budget - used pieces are enough.
      size_t max_pieces = budget == std::numeric_limits<size_t>::max() ? SIZE_MAX : budget - used();
      encode_text(text.substr(pos, seg_end - pos), static_cast<uint32_t>(pos),
                  opt.text_start && pos == 0, max_pieces, ids, offsets, *cache_);
      if (m.id < 0 || used() >= budget) break;
      ids.push_back(m.id);
      if (offsets)
        offsets->push_back({static_cast<uint32_t>(m.pos), static_cast<uint32_t>(m.pos + m.len)});
      pos = m.pos + m.len;
    }
  }
  if (used() > budget) {
    ids.resize(start + budget);
    if (offsets) offsets->resize(start + budget);
  }
  if (eos) {
    ids.push_back(*eos_);
    auto end = static_cast<uint32_t>(text.size());
    if (offsets) offsets->push_back({end, end});
  }
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, const EncodeOptions& opt) const {
  std::vector<TokenId> ids;
  ids.reserve(text.size() / 3 + 4);
  encode_into(text, opt, ids, nullptr);
  return ids;
}

Encoding Tokenizer::encode_with_offsets(std::string_view text, const EncodeOptions& opt) const {
  Encoding e;
  encode_into(text, opt, e.ids, &e.offsets);
  return e;
}

Batch Tokenizer::encode_batch(const std::vector<std::string>& texts,
                              const BatchOptions& opt) const {
  Batch b;
  b.input_ids.resize(texts.size());
  b.lengths.resize(texts.size());
  size_t longest = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    try {
      encode_into(texts[i], opt.encode, b.input_ids[i], nullptr);
    } catch (const InputError& e) {
      throw InputError(fmt::format("batch row {}: {}", i, e.what()));
    }
    b.lengths[i] = b.input_ids[i].size();
    longest = std::max(longest, b.lengths[i]);
  }
  size_t T = longest;
  if (opt.pad_to_max_length) {
    if (opt.encode.max_length == 0)
      throw ConfigError("pad_to_max_length needs encode.max_length > 0");
    T = opt.encode.max_length;
  }
  std::optional<TokenId> pad = opt.pad_id ? opt.pad_id : pad_ ? pad_ : eos_;
  b.attention_mask.resize(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    auto& row = b.input_ids[i];
    const size_t n = row.size(), missing = T - n;
    b.attention_mask[i].assign(T, 1);
    if (missing == 0) continue;
    if (!pad)
      throw ConfigError(fmt::format(
          "{}: the tokenizer has no pad or eos token to pad with; set a pad id", source_));
    if (opt.padding_side == PaddingSide::kRight) {
      row.insert(row.end(), missing, *pad);
      std::fill(b.attention_mask[i].begin() + n, b.attention_mask[i].end(), 0);
    } else {
      row.insert(row.begin(), missing, *pad);
      std::fill(b.attention_mask[i].begin(), b.attention_mask[i].begin() + missing, 0);
    }
  }
  return b;
}

std::string Tokenizer::decode(const std::vector<TokenId>& ids, bool skip_special) const {
  std::string out;
  out.reserve(ids.size() * 4);
  std::vector<TokenId> run;  // SentencePiece: regular ids decoded together by the library
  bool run_at_start = true;  // the run began at ids[0] (the only one with a dummy prefix when
                             // spm_prefix_first_)
  auto flush = [&] {
    if (!run.empty()) out += spm_->decode(run, !spm_prefix_first_ || run_at_start);
    run.clear();
  };
  for (size_t i = 0; i < ids.size(); ++i) {
    TokenId id = ids[i];
    if (id < 0 || id >= vocab_size() || kind_[id] == kHole)
      throw InputError(fmt::format("token id {} at position {} is not in the vocabulary ({} ids)",
                                   id, i, vocab_size()));
    if (kind_[id] == kRegular) {
      if (spm_) {
        if (run.empty()) run_at_start = i == 0;
        run.push_back(id);
      } else {
        out += bpe_->bytes(id);
      }
    } else if (!(skip_special && kind_[id] == kSpecial)) {
      flush();
      out += id_text_.at(id);
    }
  }
  flush();
  return out;
}

std::string Tokenizer::piece(TokenId id) const {
  if (id < 0 || id >= vocab_size() || kind_[id] == kHole)
    throw InputError(
        fmt::format("token id {} is not in the vocabulary ({} ids)", id, vocab_size()));
  if (kind_[id] == kRegular) return spm_ ? spm_->piece(id) : bytes_to_byte_level(bpe_->bytes(id));
  if (kind_[id] == kInert) return bytes_to_byte_level(id_text_.at(id));
  return id_text_.at(id);
}

std::optional<TokenId> Tokenizer::token_to_id(std::string_view token) const {
  auto it = added_index_.find(std::string(token));
  if (it != added_index_.end()) return it->second;
  if (spm_) {
    const auto id = spm_->find(token);
    return id && kind_[*id] == kRegular ? id : std::nullopt;
  }
  std::string bytes;
  if (byte_level_to_bytes(token, bytes)) {
    if (auto id = bpe_->find(bytes)) return id;
    for (const auto& [id, text] : id_text_)
      if (kind_[id] == kInert && text == bytes) return id;
  }
  return std::nullopt;
}

bool Tokenizer::is_special(TokenId id) const {
  return id >= 0 && id < vocab_size() && kind_[id] == kSpecial;
}

size_t Tokenizer::cache_size() const {
  std::lock_guard<std::mutex> lock(cache_->mu);
  return cache_->map.size();
}

void truncate_longest_first(std::vector<int64_t>& a, std::vector<int64_t>& b, size_t specials,
                            size_t max_length, bool pair) {
  if (max_length == 0) return;
  DPFT_CHECK_AS(ConfigError, max_length >= specials,
                "max_length {} leaves no room for the {} special tokens of a {}", max_length,
                specials, pair ? "pair" : "sentence");
  while (a.size() + b.size() + specials > max_length) {
    if (a.size() > b.size())
      a.pop_back();
    else
      b.pop_back();
  }
}

PairEncoding encode_roberta_pair(const Tokenizer& t, std::string_view a,
                                 std::optional<std::string_view> b, size_t max_length) {
  DPFT_CHECK_AS(ConfigError, t.bos_id() && t.eos_id(),
                "tokenizer {} has no bos or eos token: it cannot make RoBERTa's <s> a </s>",
                t.source());
  auto ids = [&](std::string_view s) {
    std::vector<TokenId> v = t.encode(s);
    return std::vector<int64_t>(v.begin(), v.end());
  };
  std::vector<int64_t> x = ids(a), y = b ? ids(*b) : std::vector<int64_t>();
  truncate_longest_first(x, y, b ? 4 : 2, max_length, b.has_value());
  const int64_t bos = *t.bos_id(), eos = *t.eos_id();
  PairEncoding e;
  e.ids.push_back(bos);
  e.ids.insert(e.ids.end(), x.begin(), x.end());
  e.ids.push_back(eos);
  if (b) {
    e.ids.push_back(eos);
    e.ids.insert(e.ids.end(), y.begin(), y.end());
    e.ids.push_back(eos);
  }
  e.type_ids.assign(e.ids.size(), 0);
  return e;
}

const BpeModel& Tokenizer::bpe() const {
  if (!bpe_)
    throw ConfigError(
        fmt::format("{}: a SentencePiece tokenizer has no byte-level BPE model", source_));
  return *bpe_;
}

bool Tokenizer::regex_jit() const {
  return splitter_ && splitter_->jit();
}

}  // namespace dpft::tok
