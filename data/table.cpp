#include "data/table.hpp"

#include "data/nlg.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdlib>

#include <algorithm>
#include <random>
#include <sstream>

#include "core/tokenizer/unicode.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "core/util/strings.hpp"

namespace dpft::data {

size_t Table::column(const std::string& name) const {
  for (size_t i = 0; i < columns.size(); ++i)
    if (columns[i] == name) return i;
  auto m = closest_match(name, columns);
  throw InputError(fmt::format("{}: no column '{}'; columns are: {}{}", source, name, join(columns, ", "),
                               m ? fmt::format(" (did you mean '{}'?)", *m) : ""));
}

namespace {

std::string lower_ext(const std::filesystem::path& p) {
  std::string e = p.extension().string();
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return std::tolower(c); });
  return e;
}

// RFC 4180 records, each with the line it starts on.
void parse_csv(const std::string& text, Table& t) {
  std::vector<std::string> rec;
  std::string field;
  int64_t line = 1, rec_line = 1;
  bool in_quotes = false, field_started = false, any = false;
  int64_t blank = 0;  // blank lines since the last row
  size_t i = 0, n = text.size();
  if (n >= 3 && text.compare(0, 3, "\xEF\xBB\xBF") == 0) i = 3;  // UTF-8 BOM
  auto end_record = [&]() {
    rec.push_back(field);
    field.clear();
    if (t.columns.empty()) {
      t.columns = rec;
    } else if (rec.size() == 1 && rec[0].empty()) {  // skip blank lines
      ++blank;
    } else {
      if (rec.size() != t.columns.size())
        throw InputError(fmt::format("{}:{}: {} fields, but the header has {}", t.source, rec_line, rec.size(),
                                     t.columns.size()));
      t.rows.push_back(rec);
      t.line.push_back(rec_line);
      t.blank_lines += blank;
      blank = 0;
    }
    rec.clear();
    field_started = any = false;
  };
  for (; i < n; ++i) {
    char c = text[i];
    if (in_quotes) {
      if (c == '"') {
        if (i + 1 < n && text[i + 1] == '"') {
          field += '"';
          ++i;
        } else {
          in_quotes = false;
        }
      } else {
        if (c == '\n') ++line;
        field += c;
      }
      continue;
    }
    if (c == '"' && !field_started) {
      in_quotes = field_started = any = true;
    } else if (c == ',') {
      rec.push_back(field);
      field.clear();
      field_started = false;
      any = true;
    } else if (c == '\r' && i + 1 < n && text[i + 1] == '\n') {
      continue;
    } else if (c == '\n') {
      end_record();
      ++line;
      rec_line = line;
    } else {  // includes a quote inside an unquoted field: literal, as Python's csv reads it
      field += c;
      field_started = any = true;
    }
  }
  if (in_quotes) throw InputError(fmt::format("{}:{}: unterminated quoted field", t.source, rec_line));
  if (any || !field.empty() || !rec.empty()) end_record();
}

// Calls f(line, number) for each '\n'-separated line (1-based numbers), a trailing '\r' cut.
template <class F>
void for_each_line(const std::string& text, size_t pos, F f) {
  int64_t line = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    std::string l = text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    pos = nl == std::string::npos ? text.size() : nl + 1;
    ++line;
    if (!l.empty() && l.back() == '\r') l.pop_back();
    f(std::move(l), line);
  }
}

void parse_tsv(const std::string& text, Table& t) {
  int64_t blank = 0;  // blank lines since the last row
  for_each_line(text, 0, [&](std::string l, int64_t line) {
    if (l.empty()) {
      if (!t.columns.empty()) ++blank;
      return;
    }
    std::vector<std::string> f;
    size_t s = 0;
    while (true) {
      size_t tab = l.find('\t', s);
      f.push_back(l.substr(s, tab == std::string::npos ? std::string::npos : tab - s));
      if (tab == std::string::npos) break;
      s = tab + 1;
    }
    if (t.columns.empty()) {
      t.columns = f;
      return;
    }
    if (f.size() != t.columns.size())
      throw InputError(fmt::format("{}:{}: {} fields, but the header has {}", t.source, line, f.size(), t.columns.size()));
    t.rows.push_back(std::move(f));
    t.line.push_back(line);
    t.blank_lines += blank;
    blank = 0;
  });
}

// One JSON object as a table row: the first row's keys are the columns; keys absent from the
// first row are ignored; null or missing values are recorded as absent (examples() refuses a
// row without a column it reads).
void add_json_row(const nlohmann::json& j, int64_t line, std::map<std::string, size_t>& index,
                  Table& t) {
  if (t.columns.empty())
    for (auto it = j.begin(); it != j.end(); ++it) {
      index[it.key()] = t.columns.size();
      t.columns.push_back(it.key());
    }
  std::vector<std::string> row(t.columns.size());
  std::vector<bool> seen(t.columns.size(), false);
  for (auto it = j.begin(); it != j.end(); ++it) {
    auto f = index.find(it.key());
    if (f == index.end() || it->is_null()) continue;
    row[f->second] = it->is_string() ? it->get<std::string>() : it->dump();
    seen[f->second] = true;
  }
  std::vector<size_t> absent;
  for (size_t c = 0; c < seen.size(); ++c)
    if (!seen[c]) absent.push_back(c);
  if (!absent.empty()) t.absent[t.rows.size()] = std::move(absent);
  t.rows.push_back(std::move(row));
  t.line.push_back(line);
}

void parse_jsonl(const std::string& text, Table& t) {
  std::map<std::string, size_t> index;
  for_each_line(text, 0, [&](std::string l, int64_t line) {
    if (l.find_first_not_of(" \t\r") == std::string::npos) return;
    nlohmann::json j;
    // Cells nested deeper than this are refused while parsing: re-serialising a 100k-deep
    // value would overflow the stack.
    constexpr int kMaxDepth = 64;
    auto depth_limit = [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
      if (depth > kMaxDepth)
        throw InputError(fmt::format("{}:{}: JSON nested deeper than {} levels; a row is one "
                                     "object of strings (or numbers)",
                                     t.source, line, kMaxDepth));
      return true;
    };
    try {
      j = nlohmann::json::parse(l, depth_limit);
    } catch (const nlohmann::json::parse_error& e) {
      throw InputError(fmt::format("{}:{}: invalid JSON: {}", t.source, line, e.what()));
    }
    if (!j.is_object()) throw InputError(fmt::format("{}:{}: expected a JSON object per line", t.source, line));
    add_json_row(j, line, index, t);
  });
}

// A whole-file JSON document of rows, if `text` is one: an array of objects, or an object whose
// values are all objects (the GLUE sample export {"0": {"text_a", "text_b", "label"}, ...}; rows
// in order of their integer keys, else in key order). Columns: the first row's keys, as JSONL.
// Row k is reported as "file:k" (its ordinal; the document has no line per row). false when the
// text is not such a document (then it is read as JSONL).
bool parse_json_document(const std::string& text, Table& t) {
  constexpr int kMaxDepth = 64;
  bool too_deep = false;
  auto depth_limit = [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    if (depth > kMaxDepth) too_deep = true;
    return depth <= kMaxDepth;
  };
  nlohmann::json doc = nlohmann::json::parse(text, depth_limit, /*allow_exceptions=*/false);
  if (too_deep)
    throw InputError(
        fmt::format("{}: JSON nested deeper than {} levels; a row is one object of "
                    "strings (or numbers)",
                    t.source, kMaxDepth));
  if (doc.is_discarded()) return false;
  std::vector<const nlohmann::json*> rows;
  if (doc.is_array()) {
    for (const auto& r : doc) rows.push_back(&r);
  } else if (doc.is_object() && !doc.empty()) {
    std::vector<std::pair<long long, const nlohmann::json*>> keyed;
    bool integer_keys = true;
    for (auto it = doc.begin(); it != doc.end(); ++it) {
      if (!it->is_object()) return false;  // one JSONL row (an object of values), not a document
      char* end = nullptr;
      const long long k = std::strtoll(it.key().c_str(), &end, 10);
      integer_keys = integer_keys && !it.key().empty() && *end == '\0';
      keyed.emplace_back(k, &*it);
    }
    if (integer_keys)
      std::stable_sort(keyed.begin(), keyed.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [k, r] : keyed) rows.push_back(r);
  } else {
    return false;
  }
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < rows.size(); ++i) {
    const nlohmann::json& j = *rows[i];
    if (!j.is_object())
      throw InputError(fmt::format("{}:{}: expected an object per row", t.source, i + 1));
    add_json_row(j, static_cast<int64_t>(i + 1), index, t);
  }
  return true;
}

// One row per line with a non-whitespace character.
void parse_text(const std::string& text, Table& t) {
  t.columns = {"text"};
  size_t bom = text.size() >= 3 && text.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;
  for_each_line(text, bom, [&](std::string l, int64_t line) {
    if (l.find_first_not_of(" \t\r\v\f") == std::string::npos) return;
    t.rows.push_back({std::move(l)});
    t.line.push_back(line);
  });
}

// UTF-16 / UTF-32 (a byte-order mark, or NUL bytes) is refused with the conversion to run:
// read as UTF-8 it would split into wrong fields or garbage text.
void check_encoding(const std::string& text, const std::string& source) {
  auto starts = [&](const char* bom, size_t n) { return text.size() >= n && text.compare(0, n, bom, n) == 0; };
  const char* enc = starts("\xFF\xFE\x00\x00", 4) || starts("\x00\x00\xFE\xFF", 4) ? "UTF-32"
                    : starts("\xFF\xFE", 2) || starts("\xFE\xFF", 2)                ? "UTF-16"
                                                                                      : nullptr;
  if (!enc && text.find('\0') != std::string::npos) enc = "UTF-16 or binary";
  if (enc)
    throw InputError(fmt::format("{}: the file looks {}-encoded; dpft reads UTF-8 text: convert it, "
                                 "e.g. iconv -f {} -t UTF-8 {} > converted.csv",
                                 source, enc, std::string(enc).substr(0, 6), source));
}

// Every cell valid UTF-8 (naming file, line, column and byte), every column named once.
void check_cells(const Table& t) {
  for (size_t a = 0; a < t.columns.size(); ++a)
    for (size_t b = a + 1; b < t.columns.size(); ++b)
      if (t.columns[a] == t.columns[b])
        throw InputError(fmt::format("{}: column '{}' appears twice in the header (columns {} and {}); "
                                     "rename one",
                                     t.source, t.columns[a], a + 1, b + 1));
  for (size_t c = 0; c < t.columns.size(); ++c)
    if (size_t bad = tok::find_invalid_utf8(t.columns[c]); bad != std::string::npos)
      throw InputError(fmt::format("{}: header column {} is not valid UTF-8 (byte 0x{:02X}); convert the "
                                   "file to UTF-8, e.g. iconv -f LATIN1 -t UTF-8",
                                   t.source, c + 1, static_cast<unsigned char>(t.columns[c][bad])));
  for (size_t r = 0; r < t.rows.size(); ++r)
    for (size_t c = 0; c < t.rows[r].size(); ++c)
      if (size_t bad = tok::find_invalid_utf8(t.rows[r][c]); bad != std::string::npos)
        throw InputError(fmt::format(
            "{}:{}: column '{}' is not valid UTF-8 (byte 0x{:02X} at offset {}); dpft reads UTF-8 "
            "text: convert the file, e.g. iconv -f LATIN1 -t UTF-8 (for Latin-1 data)",
            t.source, t.line[r], t.columns[c], static_cast<unsigned char>(t.rows[r][c][bad]), bad));
}

}  // namespace

Table read_table(const std::filesystem::path& path, const std::string& format) {
  std::string fmt_ = format;
  if (fmt_ == "auto") {
    std::string e = lower_ext(path);
    fmt_ = e == ".csv"                      ? "csv"
           : e == ".tsv"                    ? "tsv"
           : (e == ".jsonl" || e == ".json") ? "jsonl"
           : e == ".txt"                    ? "text"
                                            : "";
    if (fmt_.empty())
      throw ConfigError(fmt::format(
          "{}: cannot tell the format from the extension '{}'; set format: csv, tsv, jsonl or text", path.string(),
          e));
  }
  if (!std::filesystem::exists(path)) throw InputError(fmt::format("data file '{}' not found", path.string()));
  Table t;
  t.source = path.string();
  std::string text = read_file(path);
  check_encoding(text, t.source);
  if (fmt_ == "csv") parse_csv(text, t);
  else if (fmt_ == "e2e") {
    parse_csv(text, t);
    if (!t.columns.empty()) t = e2e_table(t);
  } else if (fmt_ == "dart" || fmt_ == "dart-train" || fmt_ == "dart-test")
    parse_dart(text, fmt_ == "dart" ? "" : fmt_.substr(5), t);
  else if (fmt_ == "tsv") parse_tsv(text, t);
  else if (fmt_ == "jsonl" && lower_ext(path) == ".json" && parse_json_document(text, t)) {
  }  // a whole-file JSON document of rows
  else if (fmt_ == "jsonl")
    parse_jsonl(text, t);
  else if (fmt_ == "text") parse_text(text, t);
  else
    throw ConfigError(
        fmt::format("data format '{}': use auto, csv, tsv, jsonl, text, e2e, dart, "
                    "dart-train or dart-test",
                    fmt_));
  if (t.columns.empty()) throw InputError(fmt::format("{}: empty file (no header or rows)", t.source));
  check_cells(t);
  return t;
}

std::vector<Example> examples(const Table& t, const std::string& text_column,
                              const std::string& label_column, const std::string& prompt_column,
                              const std::string& text_pair_column) {
  size_t tc = t.column(text_column);
  std::optional<size_t> lc, pc, qc;
  if (!label_column.empty()) lc = t.column(label_column);
  if (!prompt_column.empty()) pc = t.column(prompt_column);
  if (!text_pair_column.empty()) qc = t.column(text_pair_column);
  std::vector<Example> out;
  out.reserve(t.rows.size());
  for (size_t i = 0; i < t.rows.size(); ++i) {
    if (auto a = t.absent.find(i); a != t.absent.end())
      for (size_t c : a->second)
        if (c == tc || (lc && c == *lc) || (pc && c == *pc) || (qc && c == *qc))
          throw InputError(fmt::format("{}:{}: this row has no '{}' (or it is null); every row needs it",
                                       t.source, t.line[i], t.columns[c]));
    out.push_back({static_cast<int64_t>(i), t.rows[i][tc], lc ? t.rows[i][*lc] : "", std::nullopt});
    if (pc) out.back().prompt = t.rows[i][*pc];
    if (qc) out.back().text_pair = t.rows[i][*qc];
  }
  return out;
}

std::vector<Example> subsample(const std::vector<Example>& all, int64_t k, uint64_t seed) {
  if (k <= 0 || k >= static_cast<int64_t>(all.size())) return all;
  std::vector<size_t> idx(all.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::mt19937_64 rng(seed);
  for (size_t i = idx.size() - 1; i > 0; --i) {  // Fisher-Yates with our own draws (portable)
    size_t j = static_cast<size_t>(rng() % (i + 1));
    std::swap(idx[i], idx[j]);
  }
  idx.resize(static_cast<size_t>(k));
  std::sort(idx.begin(), idx.end());
  std::vector<Example> out;
  for (size_t i : idx) out.push_back(all[i]);
  return out;
}

Documents read_documents(const std::vector<std::string>& files,
                         const std::vector<std::string>& columns, const std::string& format,
                         size_t min_words, const std::string& who) {
  DPFT_CHECK_AS(ConfigError, columns.size() == 1 || columns.size() == files.size(),
                "{}: {} --column values for {} --corpus files: give one for all, or one per "
                "corpus",
                who, columns.size(), files.size());
  Documents d;
  d.sources = nlohmann::json::array();
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string& col = columns[columns.size() == 1 ? 0 : i];
    std::vector<std::string> texts = column_texts(files[i], col, format);
    size_t kept = 0;
    for (std::string& t : texts) {
      std::istringstream in(t);
      size_t words = 0;
      for (std::string w; in >> w;) ++words;
      if (words < std::max<size_t>(min_words, 1)) continue;
      d.texts.push_back(std::move(t));
      d.corpus.push_back(i);
      ++kept;
    }
    d.sources.push_back(
        {{"path", files[i]}, {"column", col}, {"rows", texts.size()}, {"documents", kept}});
  }
  DPFT_CHECK_AS(InputError, !d.texts.empty(),
                "{}: no document has {} or more words in the corpus files", who, min_words);
  return d;
}

std::vector<std::string> column_texts(const std::filesystem::path& path, const std::string& column,
                                      const std::string& format) {
  const Table t = read_table(path, format);
  const size_t col = t.column(t.columns.size() == 1 && column == "text" ? t.columns[0] : column);
  std::vector<std::string> texts;
  texts.reserve(t.rows.size());
  for (const auto& r : t.rows) texts.push_back(r[col]);
  return texts;
}

}  // namespace dpft::data
