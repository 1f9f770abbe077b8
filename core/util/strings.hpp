// Small string helpers: edit distance and "did you mean" suggestions, joining, durations.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace dpft {

// Levenshtein distance (insert/delete/substitute, each cost 1).
size_t edit_distance(const std::string& a, const std::string& b);

// The candidate closest to `word` if it is plausibly a typo (distance <= max(2, |word|/3)).
std::optional<std::string> closest_match(const std::string& word,
                                         const std::vector<std::string>& candidates);

std::string join(const std::vector<std::string>& parts, const std::string& sep);
// One CSV field (RFC 4180): in double quotes, inner quotes doubled.
std::string csv_quote(const std::string& s);

// ASCII lower case.
std::string to_lower(std::string s);

// "a.b.c" -> "c": the part after the last dot (the whole string without one).
std::string last_component(const std::string& dotted);

// "1h02m", "3m05s", "4.2s", "120ms".
std::string format_duration(double seconds);

}  // namespace dpft
