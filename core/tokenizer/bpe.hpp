// Byte-level BPE merging. A BpeModel holds the regular vocabulary (token bytes <-> id) and the
// merge table (adjacent pair of ids -> priority and merged id), built from either
//  - an ordered merges list (HF tokenizer.json, GPT-2 merges.txt/vocab.bpe): priority = line, or
//  - tiktoken ranks (id = rank): ids a, b merge when bytes(a)+bytes(b) is a token, and the
//    priority is that token's rank (what tiktoken's byte-pair merge does).
// encode_piece() turns one pre-token's bytes into ids: start from single bytes and repeatedly
// merge the adjacent pair of lowest priority (leftmost on ties) until none applies.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dpft::tok {

using TokenId = int32_t;

class BpeModel {
 public:
  struct Entry {
    std::string bytes;
    TokenId id = 0;
  };
  struct MergeRule {
    std::string left, right;  // token bytes
    size_t line = 0;          // for error messages (1-based; 0 = unknown)
  };

  // Throws InputError naming `origin` when a merge names an unknown token, a merge result is
  // not in the vocabulary, ids repeat, or some byte has no single-byte token.
  static BpeModel from_merges(std::vector<Entry> vocab, const std::vector<MergeRule>& merges,
                              const std::string& origin);
  static BpeModel from_ranks(std::vector<Entry> ranks, const std::string& origin);

  BpeModel(BpeModel&&) = default;
  BpeModel& operator=(BpeModel&&) = default;
  BpeModel(const BpeModel&) = delete;
  BpeModel& operator=(const BpeModel&) = delete;

  // A piece that is itself a token is emitted whole, without merging (tiktoken does this;
  // HF calls it ignore_merges). Off by default.
  void set_ignore_merges(bool v) { ignore_merges_ = v; }
  bool ignore_merges() const { return ignore_merges_; }

  // Appends the ids of `bytes` (one pre-token) to `out`. Short pieces use merge_scan, long
  // ones merge_heap; both give the same ids.
  void encode_piece(std::string_view bytes, std::vector<TokenId>& out) const;
  // O(n^2) reference: rescan all adjacent pairs after every merge.
  void merge_scan(std::string_view bytes, std::vector<TokenId>& out) const;
  // O(n log n): a min-heap of (priority, position) candidates with lazy invalidation.
  void merge_heap(std::string_view bytes, std::vector<TokenId>& out) const;

  std::optional<TokenId> find(std::string_view bytes) const;
  bool contains(TokenId id) const {
    return id >= 0 && static_cast<size_t>(id) < present_.size() && present_[id];
  }
  // The bytes of a regular token; `id` must satisfy contains().
  const std::string& bytes(TokenId id) const { return bytes_[id]; }
  size_t size() const { return index_.size(); }
  size_t num_merges() const { return merges_.size(); }
  TokenId max_id() const { return static_cast<TokenId>(bytes_.size()) - 1; }

 private:
  struct Merge {
    int32_t rank;
    TokenId merged;
  };
  BpeModel() = default;
  void build_index(std::vector<Entry> vocab, const std::string& origin);
  const Merge* merge_of(TokenId a, TokenId b) const {
    auto it = merges_.find((static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) |
                           static_cast<uint32_t>(b));
    return it == merges_.end() ? nullptr : &it->second;
  }

  std::vector<std::string> bytes_;  // by id; element addresses stay put on move (index_ views them)
  std::vector<uint8_t> present_;
  std::unordered_map<std::string_view, TokenId> index_;
  std::unordered_map<uint64_t, Merge> merges_;
  TokenId byte_id_[256] = {};
  bool ignore_merges_ = false;
};

}  // namespace dpft::tok
