// Reading tabular text data sets: CSV (RFC 4180: quoted fields with embedded commas, quotes
// and newlines), TSV (GLUE style: tab-separated, first line a header, no quoting), JSONL
// (one JSON object per line; a .json file may instead hold one document of rows: an array of
// objects, or an object of objects such as the GLUE sample export {"0": {...}, "1": {...}}) and
// plain text (one example per line that has a non-whitespace character, in one column named
// `text`). Every row becomes named string fields; errors name
// the file and line. Used by the engine to load private training / evaluation text (and labels).
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/lm/examples.hpp"

namespace dpft::data {

struct Table {
  std::string source;                          // path, for messages
  std::vector<std::string> columns;            // header order (JSONL: keys of the first row)
  std::vector<std::vector<std::string>> rows;  // rows[i][c] = value of columns[c]
  std::vector<int64_t> line;                   // 1-based line where each row starts
  // JSONL: for rows lacking some of the first row's keys (or holding null), those columns'
  // indices; examples() refuses a row without a column it reads.
  std::map<size_t, std::vector<size_t>> absent;
  // CSV / TSV: empty lines between rows, skipped (trailing ones are not counted).
  int64_t blank_lines = 0;
  // Index of `name`; InputError listing the columns if absent.
  size_t column(const std::string& name) const;
};

// format: "auto" (from the extension: .csv, .tsv, .jsonl / .json, .txt), "csv", "tsv", "jsonl",
// "text", or a data-to-text set's own ("e2e", "dart", "dart-train", "dart-test": data/nlg.hpp).
// Text lines keep their spaces (wikitext lines start with one); a trailing '\r' is cut. Throws
// InputError (exit 3) for a missing file, a malformed row (naming file:line), a row whose field
// count differs from the header's, a column named twice, a UTF-16/32 file, a cell that is not valid
// UTF-8 (naming line and column) or JSON nested deeper than 64 levels.
Table read_table(const std::filesystem::path& path, const std::string& format = "auto");

using lm::Example;

// The `column` cells of a table file, in order; a one-column table's only column when column is
// "text" (`dpft embed`, `dpft topics`). InputError as read_table, or naming the columns.
std::vector<std::string> column_texts(const std::filesystem::path& path, const std::string& column,
                                      const std::string& format = "auto");

// The documents of several corpus files (`dpft topics build` and `pairs`): column[i] of file i
// (one column for all when columns has one entry), kept when they have at least `min_words`
// whitespace-separated words (at least 1). ConfigError when the column count fits neither;
// InputError as column_texts, or when no document is kept (naming `who`).
struct Documents {
  std::vector<std::string> texts;
  std::vector<size_t> corpus;  // the file each came from (an index into the files)
  nlohmann::json sources;      // per file: {path, column, rows, documents}
};
Documents read_documents(const std::vector<std::string>& files,
                         const std::vector<std::string>& columns, const std::string& format,
                         size_t min_words, const std::string& who);

// The text (and optional label, prompt and second-sentence) columns of a table; empty texts are
// kept (callers decide).
std::vector<Example> examples(const Table& t, const std::string& text_column,
                              const std::string& label_column = "",
                              const std::string& prompt_column = "",
                              const std::string& text_pair_column = "");

// A deterministic subsample of k of the n examples (all if k == 0 or k >= n), chosen by a
// seeded shuffle and returned in file order.
std::vector<Example> subsample(const std::vector<Example>& all, int64_t k, uint64_t seed);

}  // namespace dpft::data
