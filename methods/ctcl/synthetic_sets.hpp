// CTCL's synthetic sets on disk (paper 004, Section 3.4, Figure 3): the generated bins as
// part files with their SHA-256 index, and every set (synthetic.jsonl, then each
// synthetic_n<N>.jsonl subset) written as the bins come, one bin's rows in memory at a time.
// All of it is post-processing of the released histogram and the DP-trained generator.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/util/atomic_file.hpp"

namespace dpft::ctcl {

// The bins already generated, with their SHA-256 (<dir>/parts.json, rewritten after each bin):
// a resumed generation reuses a part only when it is unchanged, regenerates one the index does
// not list (killed between the part and the index: the same seed gives the same rows), and
// refuses one that was edited.
class PartIndex {
 public:
  explicit PartIndex(const std::filesystem::path& dir);
  // The part's text when it was generated before and is unchanged; nullopt when it must be
  // generated. InputError when it was edited.
  std::optional<std::string> reuse(const std::filesystem::path& part) const;
  // Writes the part (atomically), then records it in the index.
  void record(const std::filesystem::path& part, const std::string& lines);

 private:
  std::filesystem::path file_;
  nlohmann::json index_;
};

// Every set takes, from each bin, its first seats of the bin's generated rows, less the rows
// the filter dropped (a row's "dropped" field: the reason).
class SyntheticSets {
 public:
  // seats: the main set's seats per bin; subset_seats[i]: subset i's (size subset_sizes[i]).
  SyntheticSets(const std::filesystem::path& dir, const std::vector<int64_t>& seats,
                const std::vector<std::vector<int64_t>>& subset_seats,
                const std::vector<int64_t>& subset_sizes);
  // Bin k's part text (`part` names it in errors): `expected` rows, or InputError.
  void add(size_t k, const std::string& lines, int64_t expected, const std::filesystem::path& part);
  // Commits every set; the main set's summary (requested, kept, dropped, dropped_by_reason,
  // file) with "subsets" when there are any.
  nlohmann::json commit();

 private:
  struct Set {
    std::vector<int64_t> take;
    std::filesystem::path file;
    std::unique_ptr<AtomicFileWriter> writer;  // committed once every bin is in
    int64_t requested = 0, kept = 0;
    std::map<std::string, int64_t> dropped;
  };
  std::filesystem::path dir_;
  std::vector<Set> sets_;
};

}  // namespace dpft::ctcl
