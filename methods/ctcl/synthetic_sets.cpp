#include "methods/ctcl/synthetic_sets.hpp"

#include <fmt/format.h>

#include "core/util/error.hpp"
#include "core/util/sha256.hpp"

namespace dpft::ctcl {

namespace {
// A generated text may end inside a multi-byte character: invalid bytes become U+FFFD.
constexpr auto kReplace = nlohmann::json::error_handler_t::replace;
}  // namespace

PartIndex::PartIndex(const fs::path& dir) : file_(dir / "parts.json") {
  index_ = {{"schema", "dpft.synthetic_parts/1"}, {"parts", nlohmann::json::object()}};
  if (fs::exists(file_)) index_ = read_json(file_);
}

std::optional<std::string> PartIndex::reuse(const fs::path& part) const {
  const std::string recorded = index_["parts"].value(part.filename().string(), std::string());
  if (!fs::exists(part) || recorded.empty()) return std::nullopt;
  std::string lines = read_file(part);
  DPFT_CHECK_AS(InputError, sha256_hex(lines) == recorded,
                "--resume: refused: {} was changed after it was generated (its SHA-256 is "
                "not the one in {}); delete it and resume to generate the bin again",
                part.string(), file_.string());
  return lines;
}

void PartIndex::record(const fs::path& part, const std::string& lines) {
  write_file_atomic(part, lines);
  index_["parts"][part.filename().string()] = sha256_hex(lines);
  write_json_atomic(file_, index_);
}

SyntheticSets::SyntheticSets(const fs::path& dir, const std::vector<int64_t>& seats,
                             const std::vector<std::vector<int64_t>>& subset_seats,
                             const std::vector<int64_t>& subset_sizes)
    : dir_(dir) {
  auto add_set = [&](const std::vector<int64_t>& take, fs::path file) {
    Set s;
    s.take = take;
    s.file = std::move(file);
    s.writer = std::make_unique<AtomicFileWriter>(s.file);
    sets_.push_back(std::move(s));
  };
  add_set(seats, dir / "synthetic.jsonl");
  for (size_t i = 0; i < subset_sizes.size(); ++i)
    add_set(subset_seats[i], dir / fmt::format("synthetic_n{}.jsonl", subset_sizes[i]));
}

void SyntheticSets::add(size_t k, const std::string& lines, int64_t expected,
                        const fs::path& part) {
  // This bin's rows as the sets write them: the kept line, or the filter's reason.
  std::vector<std::pair<std::string, std::string>> rows;
  for (size_t b = 0, e; b < lines.size(); b = e + 1) {
    e = lines.find('\n', b);
    if (e == std::string::npos) e = lines.size();
    if (e == b) continue;
    nlohmann::json row = nlohmann::json::parse(lines.substr(b, e - b));
    std::string why = row.value("dropped", "");
    row.erase("dropped");
    rows.emplace_back(why.empty() ? row.dump(-1, ' ', false, kReplace) + "\n" : "", std::move(why));
  }
  DPFT_CHECK_AS(InputError, static_cast<int64_t>(rows.size()) == expected,
                "{}: {} documents, this run samples {} for the bin; the file was not written "
                "by this run's generation: delete {} and resume to sample again",
                part.string(), rows.size(), expected, dir_.string());
  for (auto& set : sets_)
    for (int64_t i = 0; i < set.take[k]; ++i) {
      const auto& [line, why] = rows[static_cast<size_t>(i)];
      ++set.requested;
      if (!why.empty()) {  // repetitions counted together, whichever the word
        ++set.dropped[why.rfind('\'', 0) == 0 ? "a word repeated too often" : why];
        continue;
      }
      ++set.kept;
      set.writer->write(line.data(), line.size());
    }
}

nlohmann::json SyntheticSets::commit() {
  auto summary = [](Set& set) {
    set.writer->commit();
    nlohmann::json drops = nlohmann::json::object();
    for (const auto& [why, n] : set.dropped) drops[why] = n;
    return nlohmann::json{{"requested", set.requested},
                          {"kept", set.kept},
                          {"dropped", set.requested - set.kept},
                          {"dropped_by_reason", drops},
                          {"file", set.file.string()}};
  };
  nlohmann::json out = summary(sets_[0]);
  if (sets_.size() > 1) {
    out["subsets"] = nlohmann::json::array();
    for (size_t i = 1; i < sets_.size(); ++i) out["subsets"].push_back(summary(sets_[i]));
  }
  return out;
}

}  // namespace dpft::ctcl
