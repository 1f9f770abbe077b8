#include "methods/ctcl/synthesis.hpp"

#include <utf8proc.h>

#include <algorithm>
#include <map>
#include <numeric>

#include "core/config/fields.hpp"
#include "core/util/error.hpp"
#include "core/util/strings.hpp"
#include "data/table.hpp"

namespace dpft::ctcl {

std::vector<int64_t> apportion(const std::vector<int64_t>& weights, int64_t total, bool* uniform) {
  DPFT_CHECK_AS(ConfigError, !weights.empty(), "apportion: no bins");
  DPFT_CHECK_AS(ConfigError, total >= 0, "apportion: total {} must be >= 0", total);
  for (int64_t w : weights)
    DPFT_CHECK_AS(ConfigError, w >= 0, "apportion: weight {} is negative", w);
  const size_t K = weights.size();
  std::vector<int64_t> w = weights;
  const bool flat = std::all_of(w.begin(), w.end(), [](int64_t x) { return x == 0; });
  if (flat) std::fill(w.begin(), w.end(), 1);
  if (uniform) *uniform = flat;
  // Exact integer arithmetic: total * w_k = q_k W + r_k; seats go to the largest r_k.
  const __int128 W = std::accumulate(w.begin(), w.end(), static_cast<__int128>(0));
  std::vector<int64_t> seats(K);
  std::vector<__int128> rem(K);
  int64_t given = 0;
  for (size_t k = 0; k < K; ++k) {
    const __int128 p = static_cast<__int128>(total) * w[k];
    seats[k] = static_cast<int64_t>(p / W);
    rem[k] = p % W;
    given += seats[k];
  }
  std::vector<size_t> order(K);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (rem[a] != rem[b]) return rem[a] > rem[b];
    return w[a] > w[b];
  });
  for (int64_t i = 0; i < total - given; ++i) ++seats[order[static_cast<size_t>(i)]];
  return seats;
}

namespace {

bool is_punct(utf8proc_int32_t cp) {
  const utf8proc_category_t c = utf8proc_category(cp);
  return c == UTF8PROC_CATEGORY_PC || c == UTF8PROC_CATEGORY_PD || c == UTF8PROC_CATEGORY_PS ||
         c == UTF8PROC_CATEGORY_PE || c == UTF8PROC_CATEGORY_PI || c == UTF8PROC_CATEGORY_PF ||
         c == UTF8PROC_CATEGORY_PO || c == UTF8PROC_CATEGORY_SM || c == UTF8PROC_CATEGORY_SC ||
         c == UTF8PROC_CATEGORY_SK || c == UTF8PROC_CATEGORY_SO;
}

bool is_space(utf8proc_int32_t cp) {
  return cp == ' ' || cp == '\t' || cp == '\n' || cp == '\r' || cp == '\f' || cp == '\v' ||
         utf8proc_category(cp) == UTF8PROC_CATEGORY_ZS;
}

struct Word {
  std::vector<utf8proc_int32_t> cps;  // lower-cased code points
};

std::string encode(const Word& w) {
  std::string s;
  for (utf8proc_int32_t cp : w.cps) {
    utf8proc_uint8_t buf[4];
    s.append(reinterpret_cast<const char*>(buf),
             static_cast<size_t>(utf8proc_encode_char(cp, buf)));
  }
  return s;
}

// Whitespace pieces, leading / trailing punctuation split into one-character tokens.
std::vector<Word> filter_words(std::string_view text) {
  std::vector<Word> out;
  std::vector<utf8proc_int32_t> piece;
  auto flush = [&] {
    size_t b = 0, e = piece.size();
    while (b < e && is_punct(piece[b])) out.push_back({{piece[b++]}});
    std::vector<Word> tail;
    while (e > b && is_punct(piece[e - 1])) tail.push_back({{piece[--e]}});
    if (e > b)
      out.push_back({std::vector<utf8proc_int32_t>(piece.begin() + static_cast<long>(b),
                                                   piece.begin() + static_cast<long>(e))});
    out.insert(out.end(), tail.rbegin(), tail.rend());
    piece.clear();
  };
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  utf8proc_ssize_t left = static_cast<utf8proc_ssize_t>(text.size());
  while (left > 0) {
    utf8proc_int32_t cp = 0;
    utf8proc_ssize_t n = utf8proc_iterate(p, left, &cp);
    if (n <= 0) {  // an invalid byte counts as one (non-letter) character
      cp = 0xFFFD;
      n = 1;
    }
    p += n;
    left -= n;
    if (is_space(cp))
      flush();
    else
      piece.push_back(utf8proc_tolower(cp));
  }
  flush();
  return out;
}

bool all_letters(const Word& w) {
  if (w.cps.empty()) return false;
  for (utf8proc_int32_t cp : w.cps) {
    const utf8proc_category_t c = utf8proc_category(cp);
    if (!(c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT ||
          c == UTF8PROC_CATEGORY_LM || c == UTF8PROC_CATEGORY_LO))
      return false;
  }
  return true;
}

}  // namespace

std::string filter_reason(std::string_view text, size_t max_word_len, int64_t max_repeat) {
  bool letters = false;
  std::map<std::string, int64_t> count;
  for (const Word& w : filter_words(text)) {
    if (w.cps.size() > max_word_len)
      return "a word longer than " + std::to_string(max_word_len) + " characters";
    letters = letters || all_letters(w);
    std::string s = encode(w);
    if (s != "the" && s != "a" && s != "," && s != ".") ++count[s];
  }
  if (!letters) return "no alphabetic word";
  if (count.empty()) return "no word besides the, a, commas and full stops";
  for (const auto& [w, n] : count)
    if (n > max_repeat)
      return "'" + w + "' repeated " + std::to_string(n) + " times (more than " +
             std::to_string(max_repeat) + ")";
  return "";
}

std::string condition(const std::string& doc_type, const std::string& keyword_line,
                      const std::vector<std::string>& class_lines) {
  std::string c = doc_type.empty() ? std::string() : "Document Type: " + doc_type + "\n";
  for (const auto& l : class_lines) c += l + "\n";
  if (!keyword_line.empty()) c += "Keywords: " + keyword_line;
  if (!c.empty() && c.back() == '\n') c.pop_back();
  return c;
}

void LabelOptions::read(Fields& f, const std::string& method) {
  f.get("label_columns", columns);  // [] = unlabelled
  f.get("label_values", values);    // the public values of each label column
  DPFT_CHECK_AS(ConfigError, columns.size() == values.size(),
                "method {}: label_columns names {} columns but label_values gives {} lists; give "
                "the public list of values of each column (the classes are their combinations)",
                method, columns.size(), values.size());
}

std::vector<std::string> pretraining_conditions(const topics::TopicModel& m,
                                                const std::vector<std::string>& docs,
                                                const std::vector<int64_t>& topic,
                                                const std::vector<std::string>& doc_type,
                                                int64_t own, int64_t keywords) {
  DPFT_CHECK_AS(ConfigError, own >= 0 && own <= keywords,
                "{} of the document's own keywords out of {}: give 0 to {}", own, keywords,
                keywords);
  DPFT_CHECK(topic.size() == docs.size() && doc_type.size() == docs.size(),
             "pretraining_conditions: {} documents, {} topics, {} types", docs.size(), topic.size(),
             doc_type.size());
  std::vector<int64_t> self(docs.size());  // each document its own class: TF-IDF
  std::iota(self.begin(), self.end(), int64_t{0});
  const auto mine =
      own > 0 ? topics::ctfidf_keywords(docs, self, static_cast<int64_t>(docs.size()), own)
              : std::vector<std::vector<topics::Keyword>>(docs.size());
  std::vector<std::string> out(docs.size());
  for (size_t i = 0; i < docs.size(); ++i) {
    std::vector<std::string> words;
    for (const auto& k : mine[i]) words.push_back(k.word);
    for (const auto& k : m.keywords.at(static_cast<size_t>(topic[i]))) {
      if (static_cast<int64_t>(words.size()) >= keywords) break;
      if (std::find(words.begin(), words.end(), k.word) == words.end()) words.push_back(k.word);
    }
    out[i] = condition(doc_type[i], join(words, ", "));
  }
  return out;
}

Classes class_combinations(const std::vector<std::vector<std::string>>& label_values) {
  Classes out;
  int64_t n = 1;
  for (const auto& v : label_values) {
    DPFT_CHECK_AS(ConfigError, !v.empty(), "label_values: a label column with no values");
    n *= static_cast<int64_t>(v.size());
  }
  for (int64_t c = 0; c < n; ++c) {
    std::vector<std::string> v(label_values.size());
    int64_t rest = c;
    for (size_t j = label_values.size(); j-- > 0;) {
      const int64_t m = static_cast<int64_t>(label_values[j].size());
      v[j] = label_values[j][static_cast<size_t>(rest % m)];
      rest /= m;
    }
    out.label.push_back(join(v, "\n"));
    out.values.push_back(std::move(v));
  }
  return out;
}

std::vector<int64_t> classes_of_rows(const std::string& path, const std::string& format,
                                     const std::vector<int64_t>& rows,
                                     const std::vector<std::string>& columns, const Classes& c,
                                     const std::string& who) {
  std::map<std::string, int64_t> class_of;
  for (int64_t k = 0; k < c.size(); ++k) class_of.emplace(c.label[static_cast<size_t>(k)], k);
  const data::Table t = data::read_table(path, format);
  std::vector<size_t> col;
  for (const auto& name : columns) col.push_back(t.column(name));
  std::vector<int64_t> out;
  out.reserve(rows.size());
  for (int64_t r : rows) {
    DPFT_CHECK_AS(InputError, r >= 0 && r < static_cast<int64_t>(t.rows.size()),
                  "{}: private row {} is not in {}", who, r, t.source);
    std::vector<std::string> v;
    for (size_t j : col) v.push_back(t.rows[static_cast<size_t>(r)][j]);
    const auto it = class_of.find(join(v, "\n"));
    DPFT_CHECK_AS(InputError, it != class_of.end(),
                  "{}: {} line {}: the labels ({}) are not among method.label_values; add the "
                  "values to the public lists (or fix the row)",
                  who, t.source, t.line[static_cast<size_t>(r)], join(v, ", "));
    out.push_back(it->second);
  }
  return out;
}

}  // namespace dpft::ctcl
