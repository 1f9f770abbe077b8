// Byte-level BPE merging (see bpe.hpp).
#include "core/tokenizer/bpe.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <queue>

#include "core/tokenizer/unicode.hpp"
#include "core/util/error.hpp"

namespace dpft::tok {

namespace {
constexpr int32_t kNoMerge = std::numeric_limits<int32_t>::max();
constexpr size_t kScanMaxBytes = 48;  // longer pieces use the heap
}  // namespace

void BpeModel::build_index(std::vector<Entry> vocab, const std::string& origin) {
  TokenId max_id = -1;
  for (const auto& e : vocab) {
    if (e.id < 0) throw InputError(fmt::format("{}: negative token id {}", origin, e.id));
    if (e.bytes.empty()) throw InputError(fmt::format("{}: token {} is empty", origin, e.id));
    max_id = std::max(max_id, e.id);
  }
  bytes_.assign(static_cast<size_t>(max_id + 1), std::string());
  present_.assign(bytes_.size(), 0);
  for (auto& e : vocab) {
    if (present_[e.id])
      throw InputError(fmt::format("{}: token id {} appears twice ('{}' and '{}')", origin, e.id,
                                   bytes_to_byte_level(bytes_[e.id]),
                                   bytes_to_byte_level(e.bytes)));
    present_[e.id] = 1;
    bytes_[e.id] = std::move(e.bytes);
  }
  // bytes_ is final from here on: index_ keys view its strings.
  index_.reserve(vocab.size());
  for (size_t id = 0; id < bytes_.size(); ++id) {
    if (!present_[id]) continue;
    auto [it, fresh] = index_.emplace(std::string_view(bytes_[id]), static_cast<TokenId>(id));
    if (!fresh)
      throw InputError(fmt::format("{}: token '{}' has two ids ({} and {})", origin,
                                   bytes_to_byte_level(bytes_[id]), it->second, id));
  }
  for (int b = 0; b < 256; ++b) {
    char c = static_cast<char>(b);
    auto it = index_.find(std::string_view(&c, 1));
    if (it == index_.end())
      throw InputError(
          fmt::format("{}: not a byte-level BPE vocabulary: byte 0x{:02X} ('{}') has no "
                      "token of its own",
                      origin, b, bytes_to_byte_level(std::string(1, c))));
    byte_id_[b] = it->second;
  }
}

BpeModel BpeModel::from_merges(std::vector<Entry> vocab, const std::vector<MergeRule>& merges,
                               const std::string& origin) {
  BpeModel m;
  m.build_index(std::move(vocab), origin);
  m.merges_.reserve(merges.size());
  std::string joined;
  for (size_t r = 0; r < merges.size(); ++r) {
    const MergeRule& rule = merges[r];
    auto where = [&] {
      return rule.line
                 ? fmt::format("{}: merge on line {} ('{} {}')", origin, rule.line,
                               bytes_to_byte_level(rule.left), bytes_to_byte_level(rule.right))
                 : fmt::format("{}: merge {} ('{} {}')", origin, r, bytes_to_byte_level(rule.left),
                               bytes_to_byte_level(rule.right));
    };
    auto a = m.find(rule.left), b = m.find(rule.right);
    if (!a || !b)
      throw InputError(fmt::format("{}: '{}' is not in the vocabulary", where(),
                                   bytes_to_byte_level(!a ? rule.left : rule.right)));
    joined = rule.left + rule.right;
    auto c = m.find(joined);
    if (!c)
      throw InputError(fmt::format("{}: the merged token '{}' is not in the vocabulary", where(),
                                   bytes_to_byte_level(joined)));
    uint64_t key =
        (static_cast<uint64_t>(static_cast<uint32_t>(*a)) << 32) | static_cast<uint32_t>(*b);
    m.merges_.emplace(key,
                      Merge{static_cast<int32_t>(r), *c});  // a repeated pair keeps its first rank
  }
  return m;
}

BpeModel BpeModel::from_ranks(std::vector<Entry> ranks, const std::string& origin) {
  BpeModel m;
  m.build_index(std::move(ranks), origin);
  m.merges_.reserve(m.index_.size() * 2);
  for (size_t id = 0; id < m.bytes_.size(); ++id) {
    if (!m.present_[id]) continue;
    std::string_view t(m.bytes_[id]);
    for (size_t k = 1; k < t.size(); ++k) {
      auto a = m.find(t.substr(0, k));
      if (!a) continue;
      auto b = m.find(t.substr(k));
      if (!b) continue;
      uint64_t key =
          (static_cast<uint64_t>(static_cast<uint32_t>(*a)) << 32) | static_cast<uint32_t>(*b);
      m.merges_.emplace(key, Merge{static_cast<int32_t>(id), static_cast<TokenId>(id)});
    }
  }
  return m;
}

std::optional<TokenId> BpeModel::find(std::string_view bytes) const {
  auto it = index_.find(bytes);
  if (it == index_.end()) return std::nullopt;
  return it->second;
}

void BpeModel::encode_piece(std::string_view bytes, std::vector<TokenId>& out) const {
  if (bytes.empty()) return;
  if (bytes.size() == 1) {
    out.push_back(byte_id_[static_cast<unsigned char>(bytes[0])]);
    return;
  }
  if (ignore_merges_) {
    if (auto id = find(bytes)) {
      out.push_back(*id);
      return;
    }
  }
  if (bytes.size() <= kScanMaxBytes)
    merge_scan(bytes, out);
  else
    merge_heap(bytes, out);
}

void BpeModel::merge_scan(std::string_view bytes, std::vector<TokenId>& out) const {
  const size_t n = bytes.size();
  if (n == 0) return;
  std::vector<TokenId> sym(n);
  for (size_t i = 0; i < n; ++i) sym[i] = byte_id_[static_cast<unsigned char>(bytes[i])];
  // rank[i], merged[i]: the merge of the pair (sym[i], sym[i+1]), kNoMerge if none.
  std::vector<int32_t> rank(n, kNoMerge);
  std::vector<TokenId> merged(n, -1);
  auto update = [&](size_t i) {
    const Merge* mg = i + 1 < sym.size() ? merge_of(sym[i], sym[i + 1]) : nullptr;
    rank[i] = mg ? mg->rank : kNoMerge;
    merged[i] = mg ? mg->merged : -1;
  };
  for (size_t i = 0; i + 1 < n; ++i) update(i);
  while (sym.size() > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < sym.size(); ++i)
      if (rank[i] < rank[best]) best = i;
    if (rank[best] == kNoMerge) break;
    sym[best] = merged[best];
    sym.erase(sym.begin() + best + 1);
    rank.erase(rank.begin() + best + 1);
    merged.erase(merged.begin() + best + 1);
    update(best);
    if (best > 0) update(best - 1);
  }
  out.insert(out.end(), sym.begin(), sym.end());
}

void BpeModel::merge_heap(std::string_view bytes, std::vector<TokenId>& out) const {
  const size_t n = bytes.size();
  if (n == 0) return;
  struct Sym {
    TokenId id;
    int32_t prev, next;
    bool alive;
  };
  struct Cand {
    int32_t rank;
    int32_t left;  // index of the left symbol (its first byte): leftmost wins ties
    TokenId left_id, right_id, merged;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::vector<Sym> sym(n);
  for (size_t i = 0; i < n; ++i)
    sym[i] = {byte_id_[static_cast<unsigned char>(bytes[i])], static_cast<int32_t>(i) - 1,
              i + 1 < n ? static_cast<int32_t>(i + 1) : -1, true};
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int32_t l) {
    if (l < 0) return;
    int32_t r = sym[l].next;
    if (r < 0) return;
    if (const Merge* mg = merge_of(sym[l].id, sym[r].id))
      heap.push({mg->rank, l, sym[l].id, sym[r].id, mg->merged});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int32_t>(i));
  while (!heap.empty()) {
    Cand c = heap.top();
    heap.pop();
    Sym& l = sym[c.left];
    if (!l.alive || l.id != c.left_id || l.next < 0) continue;  // stale: the pair changed
    Sym& r = sym[l.next];
    if (r.id != c.right_id) continue;
    l.id = c.merged;
    r.alive = false;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = c.left;
    push(l.prev);
    push(c.left);
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
}

}  // namespace dpft::tok
