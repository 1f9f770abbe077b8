// CTCL's sampling side (paper 004, Section 3.4): how many documents each topic gets, and the
// post-filter of generated documents. Both are post-processing of DP outputs (the released
// histogram, the DP-trained generator): no privacy cost.
#pragma once
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/topics/topic_model.hpp"

namespace dpft {
class Fields;
}

namespace dpft::ctcl {

// Exact apportionment of `total` documents to bins in proportion to `weights` (the released
// histogram, all >= 0) by the largest-remainder (Hamilton) method: bin k gets
// floor(total w_k / W), then the remaining seats go one each to the largest fractional parts
// (ties: the larger weight, then the lower index). The result sums to `total` and every bin is
// within 1 of its exact share. If every weight is 0 (noise swamped a tiny histogram) the seats
// are spread evenly over all bins, and `uniform` is set. ConfigError for a negative weight or
// total, or no bins.
std::vector<int64_t> apportion(const std::vector<int64_t>& weights, int64_t total,
                               bool* uniform = nullptr);

// The reference code's post-filter of a generated document: words are its whitespace-separated
// pieces with leading and trailing punctuation split off as tokens of their own (an
// approximation of nltk.word_tokenize; hyphens and inner apostrophes stay inside), lower-cased.
// A document is dropped (returns the reason) if a word is longer than `max_word_len` (25)
// characters, no word is purely alphabetic, it has no word besides "the", "a", ",", ".", or one
// of those other words occurs more than `max_repeat` (20) times; "" keeps it.
std::string filter_reason(std::string_view text, size_t max_word_len = 25, int64_t max_repeat = 20);

// The condition the generator is given: "Document Type: <type>\n<class line>\n...Keywords: k1,
// k2, ..." (the first line only when doc_type is not empty; one line per label of the
// document's class, e.g. "Review Stars: 5.0"; the keyword line only when keyword_line is not
// empty).
std::string condition(const std::string& doc_type, const std::string& keyword_line,
                      const std::vector<std::string>& class_lines = {});

// CTCL-Generator's pretraining conditions (Section 3.2) for public documents: for docs[i] of
// type doc_type[i] in topic topic[i] of `m`, condition(doc_type[i], its `keywords` keywords:
// the document's own `own` top TF-IDF words (c-TF-IDF with each document its own class), then
// its topic's c-TF-IDF words not already there). ConfigError when own > keywords.
std::vector<std::string> pretraining_conditions(const topics::TopicModel& m,
                                                const std::vector<std::string>& docs,
                                                const std::vector<int64_t>& topic,
                                                const std::vector<std::string>& doc_type,
                                                int64_t own, int64_t keywords);

// The classes of a labelled private set (Yelp's category and stars): every combination of the
// public values of its label columns, the first column's varying slowest. `label` is the
// values joined by "\n" (a condition's class lines, a PE prompt's <label>).
struct Classes {
  std::vector<std::vector<std::string>> values;  // per class, one value per label column
  std::vector<std::string> label;
  int64_t size() const { return static_cast<int64_t>(label.size()); }
};
Classes class_combinations(const std::vector<std::vector<std::string>>& label_values);

// The method-block keys of a labelled private set: `label_columns` (data.train's columns) and
// `label_values` (one list of public values per column). read (or write, through a Fields
// writer): ConfigError naming the key when the lists do not pair up.
struct LabelOptions {
  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> values;
  bool on() const { return !columns.empty(); }
  void read(Fields& f, const std::string& method);
};

// The class of each of the private rows `rows` (row numbers of data.train's file, as
// lm::Example::index) from its `columns`. InputError naming the file and line for a row whose
// labels are not among the public values (`who`: the method, for the message).
std::vector<int64_t> classes_of_rows(const std::string& path, const std::string& format,
                                     const std::vector<int64_t>& rows,
                                     const std::vector<std::string>& columns, const Classes& c,
                                     const std::string& who);

}  // namespace dpft::ctcl
