#include "core/eval/nlg_metrics.hpp"

#include <fmt/format.h>
#include <libstemmer.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <unordered_map>
#include <unordered_set>

#include "core/util/error.hpp"

namespace dpft::eval::nlg {

namespace {

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size()))
    s.replace(p, from.size(), to);
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// mteval-v13a's punctuation class [\{-\~\[-\` -\&\(-\+\:-\@\/]: everything printable but
// letters, digits, the apostrophe, comma, dash and period.
bool is_split_punct(char c) {
  auto u = static_cast<unsigned char>(c);
  return (u >= 0x7B && u <= 0x7E) || (u >= 0x5B && u <= 0x60) || (u >= 0x20 && u <= 0x26) ||
         (u >= 0x28 && u <= 0x2B) || (u >= 0x3A && u <= 0x40) || u == 0x2F;
}

// Perl's s/(X)(Y)/.../g for a two-character pattern: leftmost matches, never overlapping.
template <class Match, class Emit>
std::string substitute_pairs(const std::string& s, Match match, Emit emit) {
  std::string out;
  out.reserve(s.size() + 16);
  size_t i = 0;
  while (i < s.size()) {
    if (i + 1 < s.size() && match(s[i], s[i + 1])) {
      emit(out, s[i], s[i + 1]);
      i += 2;
    } else {
      out.push_back(s[i++]);
    }
  }
  return out;
}

using Counts = std::unordered_map<std::string, double>;

// An n-gram's key: its tokens joined by spaces (tokens never hold whitespace, so keys of
// different orders never collide).
std::string ngram_key(const Tokens& t, size_t at, size_t n) {
  std::string k = t[at];
  for (size_t i = at + 1; i < at + n; ++i) {
    k.push_back(' ');
    k += t[i];
  }
  return k;
}

Counts ngram_counts(const Tokens& t, size_t n) {
  Counts c;
  if (t.size() >= n)
    for (size_t i = 0; i + n <= t.size(); ++i) c[ngram_key(t, i, n)] += 1;
  return c;
}

// Per reference set: the maximum count of each n-gram in any one reference (mteval's clipping).
Counts max_ref_counts(const std::vector<Tokens>& refs, size_t n) {
  Counts m;
  for (const auto& r : refs)
    for (const auto& [k, v] : ngram_counts(r, n)) m[k] = std::max(m[k], v);
  return m;
}

double clipped_matches(const Counts& hyp, const Counts& ref_max) {
  double m = 0;
  for (const auto& [k, v] : hyp) {
    auto it = ref_max.find(k);
    if (it != ref_max.end()) m += std::min(v, it->second);
  }
  return m;
}

void check_corpus(const Corpus& c) {
  if (c.hyps.size() != c.refs.size())
    throw InputError(fmt::format("{} hypotheses but {} reference sets: give one set per hypothesis",
                                 c.hyps.size(), c.refs.size()));
  for (size_t i = 0; i < c.refs.size(); ++i)
    if (c.refs[i].empty()) throw InputError(fmt::format("segment {} has no reference", i + 1));
}

std::string ascii_lower(std::string s) {
  for (char& ch : s)
    if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
  return s;
}

// Snowball stemmer with a per-call cache (libstemmer instances are not thread-safe).
class Stemmer {
 public:
  explicit Stemmer(const std::string& algorithm)
      : s_(sb_stemmer_new(algorithm.c_str(), "UTF_8"), &sb_stemmer_delete) {
    if (!s_)
      throw ConfigError(
          fmt::format("unknown stemmer '{}': use a Snowball algorithm name such as "
                      "english or porter",
                      algorithm));
  }
  const std::string& stem(const std::string& w) {
    auto it = cache_.find(w);
    if (it != cache_.end()) return it->second;
    const sb_symbol* r = sb_stemmer_stem(s_.get(), reinterpret_cast<const sb_symbol*>(w.data()),
                                         static_cast<int>(w.size()));
    std::string out = r ? std::string(reinterpret_cast<const char*>(r),
                                      static_cast<size_t>(sb_stemmer_length(s_.get())))
                        : w;
    return cache_.emplace(w, std::move(out)).first->second;
  }

 private:
  std::unique_ptr<sb_stemmer, void (*)(sb_stemmer*)> s_;
  std::unordered_map<std::string, std::string> cache_;
};

struct Word {
  size_t index;
  std::string text;
};

// NLTK's matching stage: hypothesis words from the last, each to the last equal unmatched
// reference word.
void match_stage(std::vector<Word>& hyp, std::vector<Word>& ref,
                 std::vector<std::pair<size_t, size_t>>& matches) {
  for (size_t i = hyp.size(); i-- > 0;) {
    for (size_t j = ref.size(); j-- > 0;) {
      if (hyp[i].text == ref[j].text) {
        matches.emplace_back(hyp[i].index, ref[j].index);
        hyp.erase(hyp.begin() + static_cast<std::ptrdiff_t>(i));
        ref.erase(ref.begin() + static_cast<std::ptrdiff_t>(j));
        break;
      }
    }
  }
}

double meteor_one(const Tokens& hyp, const Tokens& ref, const MeteorParams& p, Stemmer& stemmer) {
  if (hyp.empty() || ref.empty()) return 0.0;
  std::vector<Word> h, r;
  for (size_t i = 0; i < hyp.size(); ++i) h.push_back({i, ascii_lower(hyp[i])});
  for (size_t j = 0; j < ref.size(); ++j) r.push_back({j, ascii_lower(ref[j])});
  std::vector<std::pair<size_t, size_t>> matches;
  match_stage(h, r, matches);  // exact
  for (auto& w : h) w.text = stemmer.stem(w.text);
  for (auto& w : r) w.text = stemmer.stem(w.text);
  match_stage(h, r, matches);  // stems
  if (matches.empty()) return 0.0;
  std::stable_sort(matches.begin(), matches.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  double chunks = 1;
  for (size_t i = 0; i + 1 < matches.size(); ++i)
    if (!(matches[i + 1].first == matches[i].first + 1 &&
          matches[i + 1].second == matches[i].second + 1))
      chunks += 1;
  double m = static_cast<double>(matches.size());
  double prec = m / static_cast<double>(hyp.size()), rec = m / static_cast<double>(ref.size());
  double fmean = prec * rec / (p.alpha * prec + (1 - p.alpha) * rec);
  double penalty = p.gamma * std::pow(chunks / m, p.beta);
  return (1 - penalty) * fmean;
}

size_t lcs_length(const Tokens& a, const Tokens& b) {
  std::vector<size_t> prev(b.size() + 1, 0), cur(b.size() + 1, 0);
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = a[i - 1] == b[j - 1] ? prev[j - 1] + 1 : std::max(prev[j], cur[j - 1]);
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

Tokens tokenize(const std::string& text, bool keep_case) {
  std::string s = text;
  replace_all(s, "<skipped>", "");
  replace_all(s, "-\n", "");
  replace_all(s, "\n", " ");
  replace_all(s, "&quot;", "\"");
  replace_all(s, "&amp;", "&");
  replace_all(s, "&lt;", "<");
  replace_all(s, "&gt;", ">");
  s = " " + s + " ";
  if (!keep_case) s = ascii_lower(std::move(s));
  std::string p;
  p.reserve(s.size() * 2);
  for (char ch : s) {
    if (is_split_punct(ch)) {
      p.push_back(' ');
      p.push_back(ch);
      p.push_back(' ');
    } else {
      p.push_back(ch);
    }
  }
  auto period_comma = [](char c) { return c == '.' || c == ','; };
  p = substitute_pairs(
      p, [&](char a, char b) { return !is_digit(a) && period_comma(b); },
      [](std::string& o, char a, char b) {
        o += {a, ' ', b, ' '};
      });
  p = substitute_pairs(
      p, [&](char a, char b) { return period_comma(a) && !is_digit(b); },
      [](std::string& o, char a, char b) {
        o += {' ', a, ' ', b};
      });
  p = substitute_pairs(
      p, [](char a, char b) { return is_digit(a) && b == '-'; },
      [](std::string& o, char a, char b) {
        o += {a, ' ', b, ' '};
      });
  Tokens out;
  std::string cur;
  for (char ch : p) {
    // Perl's \s: space, \t, \n, \v, \f, \r.
    if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\v' || ch == '\f' || ch == '\r') {
      if (!cur.empty()) out.push_back(std::move(cur));
      cur.clear();
    } else {
      cur.push_back(ch);
    }
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

Corpus make_corpus(const std::vector<std::string>& hyps,
                   const std::vector<std::vector<std::string>>& refs, bool keep_case) {
  Corpus c;
  for (const auto& h : hyps) c.hyps.push_back(tokenize(h, keep_case));
  for (const auto& set : refs) {
    std::vector<Tokens> t;
    for (const auto& r : set) t.push_back(tokenize(r, keep_case));
    c.refs.push_back(std::move(t));
  }
  check_corpus(c);
  return c;
}

double bleu(const Corpus& c, int max_n) {
  check_corpus(c);
  if (max_n < 1) throw ConfigError("BLEU needs max_n >= 1");
  std::vector<double> matched(static_cast<size_t>(max_n), 0), total(static_cast<size_t>(max_n), 0);
  double hyp_len = 0, ref_len = 0;
  for (size_t i = 0; i < c.hyps.size(); ++i) {
    const Tokens& h = c.hyps[i];
    double hl = static_cast<double>(h.size());
    hyp_len += hl;
    // closest reference length, ties to the shorter
    double best = -1;
    for (const auto& r : c.refs[i]) {
      double rl = static_cast<double>(r.size());
      if (best < 0 || std::abs(rl - hl) < std::abs(best - hl) ||
          (std::abs(rl - hl) == std::abs(best - hl) && rl < best))
        best = rl;
    }
    ref_len += best;
    for (int n = 1; n <= max_n; ++n) {
      auto sn = static_cast<size_t>(n);
      matched[sn - 1] += clipped_matches(ngram_counts(h, sn), max_ref_counts(c.refs[i], sn));
      total[sn - 1] += h.size() >= sn ? static_cast<double>(h.size() - sn + 1) : 0.0;
    }
  }
  if (hyp_len == 0) return 0.0;
  double log_sum = 0;
  for (int n = 0; n < max_n; ++n) {
    if (matched[static_cast<size_t>(n)] == 0) return 0.0;  // no smoothing, as mteval and NLTK
    log_sum += std::log(matched[static_cast<size_t>(n)] / total[static_cast<size_t>(n)]);
  }
  double bp = hyp_len < ref_len ? std::exp(1.0 - ref_len / hyp_len) : 1.0;
  return bp * std::exp(log_sum / max_n);
}

double nist(const Corpus& c, int max_n) {
  check_corpus(c);
  if (max_n < 1) throw ConfigError("NIST needs max_n >= 1");
  // Information weights from every reference of the corpus.
  Counts ref_counts;
  double ref_words = 0;
  for (const auto& set : c.refs)
    for (const auto& r : set) {
      ref_words += static_cast<double>(r.size());
      for (int n = 1; n <= max_n; ++n)
        for (const auto& [k, v] : ngram_counts(r, static_cast<size_t>(n))) ref_counts[k] += v;
    }
  auto info = [&](const Tokens& t, size_t at, size_t n) {
    double num = ref_words;
    if (n > 1) num = ref_counts.at(ngram_key(t, at, n - 1));
    return std::log2(num / ref_counts.at(ngram_key(t, at, n)));
  };
  std::vector<double> info_sum(static_cast<size_t>(max_n), 0), total(static_cast<size_t>(max_n), 0);
  double sys_len = 0, avg_ref_len = 0;
  for (size_t i = 0; i < c.hyps.size(); ++i) {
    const Tokens& h = c.hyps[i];
    sys_len += static_cast<double>(h.size());
    double rl = 0;
    for (const auto& r : c.refs[i]) rl += static_cast<double>(r.size());
    avg_ref_len += rl / static_cast<double>(c.refs[i].size());
    for (int n = 1; n <= max_n; ++n) {
      auto sn = static_cast<size_t>(n);
      if (h.size() < sn) continue;
      Counts ref_max = max_ref_counts(c.refs[i], sn);
      total[sn - 1] += static_cast<double>(h.size() - sn + 1);
      // matched count of each hypothesis n-gram, clipped, times its information weight
      Counts used;
      for (size_t at = 0; at + sn <= h.size(); ++at) {
        std::string k = ngram_key(h, at, sn);
        auto it = ref_max.find(k);
        if (it == ref_max.end() || used[k] >= it->second) continue;
        used[k] += 1;
        info_sum[sn - 1] += info(h, at, sn);
      }
    }
  }
  double score = 0;
  for (int n = 0; n < max_n; ++n)
    if (total[static_cast<size_t>(n)] > 0)
      score += info_sum[static_cast<size_t>(n)] / total[static_cast<size_t>(n)];
  if (avg_ref_len <= 0) return 0.0;
  double ratio = sys_len / avg_ref_len;
  if (ratio <= 0) return 0.0;
  if (ratio < 1) {
    const double beta = std::log(0.5) / std::pow(std::log(1.5), 2);
    score *= std::exp(beta * std::pow(std::log(ratio), 2));
  }
  return score;
}

double meteor_segment(const Tokens& hyp, const std::vector<Tokens>& refs, const MeteorParams& p) {
  Stemmer stemmer(p.stemmer);
  double best = 0;
  for (const auto& r : refs) best = std::max(best, meteor_one(hyp, r, p, stemmer));
  return best;
}

double meteor(const Corpus& c, const MeteorParams& p) {
  check_corpus(c);
  if (c.hyps.empty()) return 0.0;
  Stemmer stemmer(p.stemmer);
  double sum = 0;
  for (size_t i = 0; i < c.hyps.size(); ++i) {
    double best = 0;
    for (const auto& r : c.refs[i]) best = std::max(best, meteor_one(c.hyps[i], r, p, stemmer));
    sum += best;
  }
  return sum / static_cast<double>(c.hyps.size());
}

double rouge_l_segment(const Tokens& hyp, const std::vector<Tokens>& refs, double beta) {
  if (hyp.empty()) return 0.0;
  double pmax = 0, rmax = 0;
  for (const auto& r : refs) {
    if (r.empty()) continue;
    double l = static_cast<double>(lcs_length(hyp, r));
    pmax = std::max(pmax, l / static_cast<double>(hyp.size()));
    rmax = std::max(rmax, l / static_cast<double>(r.size()));
  }
  if (pmax == 0 || rmax == 0) return 0.0;
  return (1 + beta * beta) * pmax * rmax / (rmax + beta * beta * pmax);
}

double rouge_l(const Corpus& c, double beta) {
  check_corpus(c);
  if (c.hyps.empty()) return 0.0;
  double sum = 0;
  for (size_t i = 0; i < c.hyps.size(); ++i) sum += rouge_l_segment(c.hyps[i], c.refs[i], beta);
  return sum / static_cast<double>(c.hyps.size());
}

double cider(const Corpus& c, int max_n, double sigma) {
  check_corpus(c);
  if (c.hyps.empty()) return 0.0;
  auto N = static_cast<size_t>(max_n);
  auto all_counts = [&](const Tokens& t) {
    std::vector<Counts> v(N);
    for (size_t n = 1; n <= N; ++n) v[n - 1] = ngram_counts(t, n);
    return v;
  };
  // document frequency: in how many segments' reference sets an n-gram occurs
  std::unordered_map<std::string, double> df;
  std::vector<std::vector<std::vector<Counts>>> ref_counts(c.refs.size());
  for (size_t i = 0; i < c.refs.size(); ++i) {
    std::unordered_set<std::string> seen;
    for (const auto& r : c.refs[i]) {
      ref_counts[i].push_back(all_counts(r));
      for (const auto& per_n : ref_counts[i].back())
        for (const auto& [k, v] : per_n) seen.insert(k);
    }
    for (const auto& k : seen) df[k] += 1;
  }
  const double log_docs = std::log(static_cast<double>(c.refs.size()));
  struct Vec {
    std::vector<Counts> w;
    std::vector<double> norm;
    double length = 0;
  };
  auto to_vec = [&](const std::vector<Counts>& counts) {
    Vec v{std::vector<Counts>(N), std::vector<double>(N, 0.0), 0.0};
    for (size_t n = 0; n < N; ++n) {
      for (const auto& [k, tf] : counts[n]) {
        auto it = df.find(k);
        double d = std::log(std::max(1.0, it == df.end() ? 0.0 : it->second));
        double w = tf * (log_docs - d);
        v.w[n][k] = w;
        v.norm[n] += w * w;
        if (n == 1) v.length += tf;  // the caption scripts' "length": bigrams
      }
      v.norm[n] = std::sqrt(v.norm[n]);
    }
    return v;
  };
  double total = 0;
  for (size_t i = 0; i < c.hyps.size(); ++i) {
    Vec h = to_vec(all_counts(c.hyps[i]));
    std::vector<double> score(N, 0.0);
    for (const auto& rc : ref_counts[i]) {
      Vec r = to_vec(rc);
      double delta = h.length - r.length;
      for (size_t n = 0; n < N; ++n) {
        double val = 0;
        for (const auto& [k, wh] : h.w[n]) {
          auto it = r.w[n].find(k);
          if (it != r.w[n].end()) val += std::min(wh, it->second) * it->second;
        }
        if (h.norm[n] != 0 && r.norm[n] != 0) val /= h.norm[n] * r.norm[n];
        val *= std::exp(-(delta * delta) / (2 * sigma * sigma));
        score[n] += val;
      }
    }
    double mean = 0;
    for (double s : score) mean += s;
    mean /= static_cast<double>(N);
    total += mean / static_cast<double>(c.refs[i].size()) * 10.0;
  }
  return total / static_cast<double>(c.hyps.size());
}

Scores score_all(const Corpus& c) {
  Scores s;
  s.bleu = bleu(c);
  s.nist = nist(c);
  s.meteor = meteor(c);
  s.rouge_l = rouge_l(c);
  s.cider = cider(c);
  s.segments = c.hyps.size();
  for (const auto& r : c.refs) s.references += r.size();
  return s;
}

}  // namespace dpft::eval::nlg
