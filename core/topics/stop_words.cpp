// English function words left out of topic keywords (core/topics/topic_model.hpp): articles,
// pronouns, auxiliaries, prepositions, conjunctions, common adverbs and quantifiers, plus "unk"
// (wikitext's <unk>). Our own list, lower case.
#include <algorithm>
#include <iterator>
#include <string_view>
#include <vector>

#include "core/topics/topic_model.hpp"

namespace dpft::topics {

namespace {
constexpr std::string_view kStopWords[] = {
    "about",     "above",    "across",     "after",    "afterwards", "again",     "against",
    "all",       "almost",   "alone",      "along",    "already",    "also",      "although",
    "always",    "am",       "among",      "an",       "and",        "another",   "any",
    "anyone",    "anything", "are",        "around",   "as",         "at",        "be",
    "became",    "because",  "become",     "been",     "before",     "being",     "below",
    "besides",   "between",  "both",       "but",      "by",         "can",       "cannot",
    "could",     "did",      "do",         "does",     "doing",      "done",      "down",
    "during",    "each",     "either",     "else",     "enough",     "etc",       "even",
    "ever",      "every",    "few",        "for",      "from",       "further",   "had",
    "has",       "have",     "having",     "he",       "her",        "here",      "hers",
    "herself",   "him",      "himself",    "his",      "how",        "however",   "if",
    "in",        "into",     "is",         "it",       "its",        "itself",    "just",
    "least",     "less",     "like",       "ll",       "made",       "many",      "may",
    "me",        "might",    "more",       "most",     "much",       "must",      "my",
    "myself",    "neither",  "never",      "no",       "nor",        "not",       "now",
    "of",        "off",      "often",      "on",       "once",       "one",       "only",
    "onto",      "or",       "other",      "others",   "otherwise",  "our",       "ours",
    "ourselves", "out",      "over",       "own",      "per",        "perhaps",   "quite",
    "rather",    "re",       "same",       "several",  "she",        "should",    "since",
    "so",        "some",     "such",       "than",     "that",       "the",       "their",
    "theirs",    "them",     "themselves", "then",     "there",      "therefore", "these",
    "they",      "this",     "those",      "though",   "through",    "thus",      "to",
    "too",       "toward",   "towards",    "under",    "unk",        "until",     "up",
    "upon",      "us",       "ve",         "very",     "via",        "was",       "we",
    "well",      "were",     "what",       "whatever", "when",       "where",     "whether",
    "which",     "while",    "who",        "whom",     "whose",      "why",       "will",
    "with",      "within",   "without",    "would",    "yet",        "you",       "your",
    "yours",     "yourself", "yourselves", "yes"};
}  // namespace

bool is_stop_word(std::string_view w) {
  static const std::vector<std::string_view> sorted = [] {
    std::vector<std::string_view> s(std::begin(kStopWords), std::end(kStopWords));
    std::sort(s.begin(), s.end());
    return s;
  }();
  return std::binary_search(sorted.begin(), sorted.end(), w);
}

}  // namespace dpft::topics
