#include "data/nlg.hpp"

#include <fmt/format.h>

#include <cctype>

#include <map>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "core/util/sha256.hpp"

namespace dpft::data {

namespace {

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t\r\n"), b = s.find_last_not_of(" \t\r\n");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

// E2E attribute names as prefix-tuning's linearised data spells them.
std::string e2e_attribute(const std::string& key) {
  static const std::map<std::string, std::string> names = {
      {"eatType", "Type"}, {"priceRange", "price"}, {"familyFriendly", "family friendly"}};
  auto it = names.find(key);
  return it == names.end() ? key : it->second;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t at = 0;
  while (at < text.size()) {
    size_t nl = text.find('\n', at);
    std::string line = text.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(std::move(line));
    if (nl == std::string::npos) break;
    at = nl + 1;
  }
  return lines;
}

std::string file_text(const std::filesystem::path& path, const std::string& what) {
  if (!std::filesystem::exists(path))
    throw InputError(fmt::format("{} file '{}' not found", what, path.string()));
  return read_file(path);
}

bool is_jsonl(const std::filesystem::path& p) {
  return p.extension() == ".jsonl";
}

}  // namespace

std::string linearize_e2e_mr(const std::string& mr, const std::string& where) {
  std::string out;
  size_t at = 0;
  while (true) {
    while (at < mr.size() && (mr[at] == ' ' || mr[at] == ',')) ++at;
    if (at >= mr.size()) break;
    size_t open = mr.find('[', at), close = open == std::string::npos ? open : mr.find(']', open);
    if (open == std::string::npos || close == std::string::npos)
      throw InputError(
          fmt::format("{}: meaning representation '{}' is not of the form "
                      "attribute[value], attribute[value], ...",
                      where, mr));
    std::string key = trim(mr.substr(at, open - at)),
                value = trim(mr.substr(open + 1, close - open - 1));
    if (key.empty())
      throw InputError(fmt::format("{}: an attribute without a name in '{}'", where, mr));
    if (!out.empty()) out += " | ";
    out += e2e_attribute(key) + " : " + value;
    at = close + 1;
  }
  if (out.empty()) throw InputError(fmt::format("{}: empty meaning representation", where));
  return out;
}

Table e2e_table(const Table& csv) {
  size_t mc = csv.column("mr"), rc = csv.column("ref");
  Table t;
  t.source = csv.source;
  t.columns = {"source", "prompt", "text", "mr"};
  for (size_t i = 0; i < csv.rows.size(); ++i) {
    const auto& row = csv.rows[i];
    std::string where = fmt::format("{}:{}", csv.source, csv.line[i]);
    std::string src = linearize_e2e_mr(row[mc], where);
    t.rows.push_back({src, nlg_prompt(src), row[rc], row[mc]});
    t.line.push_back(csv.line[i]);
  }
  return t;
}

std::string nlg_prompt(const std::string& source) {
  return source + " ||";
}

bool dart_is_test(const std::string& source) {
  std::string h = sha256_hex(source);
  uint64_t v = std::stoull(h.substr(0, 16), nullptr, 16);
  return v % 5 == 0;
}

void parse_dart(const std::string& text, const std::string& split, Table& t) {
  if (!(split.empty() || split == "train" || split == "test"))
    throw ConfigError(fmt::format("DART split '{}': use dart, dart-train or dart-test", split));
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: not valid JSON ({})", t.source, e.what()));
  }
  if (!doc.is_array())
    throw InputError(
        fmt::format("{}: a DART file is a JSON array of {{tripleset, annotations}} "
                    "objects",
                    t.source));
  t.columns = {"source", "prompt", "text"};
  for (size_t i = 0; i < doc.size(); ++i) {
    const auto& e = doc[i];
    std::string where = fmt::format("{}: entry {}", t.source, i);
    if (!e.is_object() || !e.contains("tripleset") || !e["tripleset"].is_array() ||
        !e.contains("annotations") || !e["annotations"].is_array())
      throw InputError(where + ": needs a tripleset array and an annotations array");
    std::string source;
    for (const auto& tr : e["tripleset"]) {
      if (!tr.is_array() || tr.size() != 3 || !tr[0].is_string() || !tr[1].is_string() ||
          !tr[2].is_string())
        throw InputError(where + ": each triple is [subject, predicate, object] strings");
      std::string pred = tr[1].get<std::string>();
      for (char& c : pred)
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      if (!source.empty()) source += " | ";
      source += tr[0].get<std::string>() + " : " + pred + " : " + tr[2].get<std::string>();
    }
    if (source.empty()) throw InputError(where + ": empty tripleset");
    if (!split.empty() && dart_is_test(source) != (split == "test")) continue;
    for (const auto& a : e["annotations"]) {
      if (!a.is_object() || !a.contains("text") || !a["text"].is_string())
        throw InputError(where + ": each annotation needs a text string");
      t.rows.push_back({source, nlg_prompt(source), a["text"].get<std::string>()});
      t.line.push_back(static_cast<int64_t>(i) + 1);
    }
  }
}

std::vector<eval::NlgSegment> nlg_segments(const std::vector<Example>& examples,
                                           const std::string& where) {
  std::vector<eval::NlgSegment> out;
  std::unordered_map<std::string, size_t> at;
  for (const auto& e : examples) {
    if (!e.prompt)
      throw ConfigError(
          fmt::format("{}: generation evaluation needs sources: set prompt_column "
                      "(format e2e / dart: source)",
                      where));
    auto [it, fresh] = at.emplace(*e.prompt, out.size());
    if (fresh) out.push_back({*e.prompt, {}});
    out[it->second].refs.push_back(e.text);
  }
  return out;
}

namespace {

// A segment is a sentence or a paragraph: ROUGE-L's LCS and METEOR's alignment cost the product
// of two segments' lengths, so a 200,000-word line would score for minutes. Refused, naming it.
constexpr size_t kMaxSegmentWords = 10000;

void check_segment_words(const std::string& s, const std::filesystem::path& path, size_t line) {
  size_t words = 0;
  bool in_word = false;
  for (const char c : s) {
    const bool space = std::isspace(static_cast<unsigned char>(c)) != 0;
    words += !space && !in_word;
    in_word = !space;
  }
  DPFT_CHECK_AS(InputError, words <= kMaxSegmentWords,
                "{}:{}: a segment of {} words; eval-nlg scores sentences and paragraphs (at most "
                "{} words each): split the text into segments, one per line",
                path.string(), line, words, kMaxSegmentWords);
}

}  // namespace

std::vector<std::string> read_hypotheses(const std::filesystem::path& path) {
  std::vector<std::string> lines = split_lines(file_text(path, "hypotheses"));
  if (!lines.empty() && lines.back().empty()) lines.pop_back();  // the final newline
  if (!is_jsonl(path)) {
    for (size_t i = 0; i < lines.size(); ++i) check_segment_words(lines[i], path, i + 1);
    return lines;
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < lines.size(); ++i) {
    try {
      auto j = nlohmann::json::parse(lines[i]);
      if (!j.is_string()) throw InputError("");
      out.push_back(j.get<std::string>());
    } catch (const std::exception&) {
      throw InputError(
          fmt::format("{}:{}: each line of a .jsonl hypotheses file is one JSON "
                      "string",
                      path.string(), i + 1));
    }
    check_segment_words(out.back(), path, i + 1);
  }
  return out;
}

std::vector<std::vector<std::string>> read_references(const std::filesystem::path& path) {
  std::vector<std::string> lines = split_lines(file_text(path, "references"));
  std::vector<std::vector<std::string>> out;
  if (is_jsonl(path)) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (trim(lines[i]).empty()) continue;
      std::vector<std::string> group;
      try {
        auto j = nlohmann::json::parse(lines[i]);
        if (!j.is_array()) throw InputError("");
        for (const auto& r : j) group.push_back(r.get<std::string>());
      } catch (const std::exception&) {
        throw InputError(
            fmt::format("{}:{}: each line of a .jsonl references file is one JSON "
                        "array of strings",
                        path.string(), i + 1));
      }
      if (group.empty())
        throw InputError(fmt::format("{}:{}: a segment without references", path.string(), i + 1));
      for (const std::string& r : group) check_segment_words(r, path, i + 1);
      out.push_back(std::move(group));
    }
    return out;
  }
  std::vector<std::string> group;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    if (trim(line).empty()) {
      if (!group.empty()) out.push_back(std::move(group));
      group.clear();
    } else {
      check_segment_words(line, path, i + 1);
      group.push_back(line);
    }
  }
  if (!group.empty()) out.push_back(std::move(group));
  return out;
}

}  // namespace dpft::data
