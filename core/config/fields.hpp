// Typed, validated access to one YAML mapping of an experiment spec.
//
// Every block of the spec (and every method's own block) is read through a Fields object:
// each getter names its key, converts with a clear error ("privacy.delta: expected a number,
// got 'abc'"), and marks the key as known. finish() then rejects the keys nobody asked for,
// suggesting the closest known key ("did you mean `privacy.epsilon`?"). A key that appears in
// the wrong block is found through the KeyRegistry shared by all blocks of one spec.
// The same getters also write: a Fields made by Fields::writer() puts each value it is given
// under its key (and reads nothing), so that one list of get() calls (a method's configure)
// parses, validates and dumps its options, with no key spelled twice.
#pragma once
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/util/enum_names.hpp"

namespace dpft {

// All key paths known to one parse, and the unknown ones found, reported together at the end.
struct KeyRegistry {
  std::set<std::string> known;       // full dotted paths, e.g. "privacy.epsilon"
  std::vector<std::string> unknown;  // full dotted paths of unknown keys
  // Throws ConfigError listing every unknown key with a suggestion; no-op if none.
  void throw_if_unknown() const;
};

// Interval for range checks; open/closed ends are named in the error message.
struct Range {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;
  bool contains(double v) const;
  std::string describe() const;  // "(0, 1)", "[1, inf)"
  static Range open(double lo, double hi) { return {lo, hi, true, true}; }
  static Range closed(double lo, double hi) { return {lo, hi, false, false}; }
  static Range at_least(double lo) {
    return {lo, std::numeric_limits<double>::infinity(), false, true};
  }
  static Range above(double lo) {
    return {lo, std::numeric_limits<double>::infinity(), true, true};
  }
};

class Fields {
 public:
  // `node` must be a map or null/absent (then all fields keep their defaults).
  Fields(const YAML::Node& node, std::string path, std::shared_ptr<KeyRegistry> keys);
  // A writer: every getter stores the value it is given under its key in written() (an
  // optional only when set) and returns false; child() writes a nested mapping; nothing is
  // read, so the values stay as they are. A field list run through it must only get().
  static Fields writer(std::string path);
  bool writing() const { return writing_; }
  const YAML::Node& written() const { return node_; }

  // Each getter leaves `out` unchanged when the key is absent and returns whether it was
  // present. A key present with no value (`key:`, `key: ~`, `--set key=`) is a ConfigError,
  // except for the optional getters, where null means "unset" (out.reset(), returns false).
  bool get(const std::string& key, std::string& out);
  bool get(const std::string& key, bool& out);
  bool get(const std::string& key, int64_t& out, Range r = {});
  bool get(const std::string& key, int& out, Range r = {});
  bool get(const std::string& key, double& out, Range r = {});  // accepts inf / .inf
  bool get(const std::string& key, std::optional<double>& out, Range r = {});
  bool get(const std::string& key, std::optional<int64_t>& out, Range r = {});
  bool get(const std::string& key, std::vector<std::string>& out);
  // A list of integers (a single integer is a list of one), each in r.
  bool get(const std::string& key, std::vector<int64_t>& out, Range r = {});
  // A list of numbers (a single number is a list of one), each in r.
  bool get(const std::string& key, std::vector<double>& out, Range r = {});
  // A list of non-empty lists of strings.
  bool get(const std::string& key, std::vector<std::vector<std::string>>& out);
  // A string restricted to `allowed`; the error lists them.
  bool get_choice(const std::string& key, std::string& out,
                  const std::vector<std::string>& allowed);
  // An enum spelled as one of the names of its table (core/util/enum_names.hpp).
  template <class E, size_t N>
  bool get_enum(const std::string& key, E& out, const std::array<EnumName<E>, N>& table) {
    std::string s = enum_name(out, table);
    const bool present = get_choice(key, s, enum_names(table));
    out = enum_value(s, table, key_path(key));
    return present;
  }
  // A nested block: a Fields over node[key] (which may be absent), sharing this registry.
  Fields child(const std::string& key);
  // The raw node (for blocks owned by someone else); marks `key` and everything below as known.
  // Not for a writer (which has no node to give).
  YAML::Node raw(const std::string& key);
  bool has(const std::string& key) const;

  // Mark this block done: every key not asked for is recorded as unknown.
  void finish();

  const std::string& path() const { return path_; }
  std::string key_path(const std::string& key) const;
  std::shared_ptr<KeyRegistry> registry() const { return keys_; }

 private:
  YAML::Node node_;
  std::string path_;
  std::shared_ptr<KeyRegistry> keys_;
  std::set<std::string> asked_;
  bool writing_ = false;
  template <class T>
  bool write(const std::string& key, const T& value) {
    node_[key] = value;
    return false;
  }
  YAML::Node lookup(const std::string& key);
  YAML::Node lookup_value(const std::string& key);  // lookup; ConfigError if null
  bool present_null(const YAML::Node& n) const;     // n (from lookup) is a key with no value
  std::string number_error(const std::string& key, const YAML::Node& n) const;
};

// Parse a double as the spec does: YAML numbers plus inf/+inf/infinity/.inf (any case);
// nullopt for anything else, including numbers outside a double's range (1e999, 1e-999).
std::optional<double> parse_double(const std::string& s);
// Whether s is a number that parse_double refused only because a double cannot hold it.
bool overflows_double(const std::string& s);

// Throws ConfigError("<path>: <value> is out of range; allowed <range>") unless r.contains(v).
void check_range(const std::string& path, double v, const Range& r, const std::string& hint = "");

// Shortest round-trip text of a double for YAML output (".inf" for infinity).
std::string format_double(double v);

}  // namespace dpft
