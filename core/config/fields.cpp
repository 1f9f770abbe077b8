#include "core/config/fields.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstdlib>

#include "core/util/error.hpp"
#include "core/util/strings.hpp"

namespace dpft {

namespace {


std::string show(const YAML::Node& n) {
  if (n.IsScalar()) return "'" + n.Scalar() + "'";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "null";
}


std::string suggestion_for(const std::string& unknown, const std::set<std::string>& known) {
  // Same block first (typo), then the same leaf name elsewhere (wrong block).
  std::string parent = unknown.substr(0, unknown.size() - last_component(unknown).size());
  std::vector<std::string> siblings;
  for (const auto& k : known)
    if (k.compare(0, parent.size(), parent) == 0 && k.find('.', parent.size()) == std::string::npos)
      siblings.push_back(k);
  if (auto m = closest_match(unknown, siblings)) return *m;
  std::string lf = last_component(unknown);
  std::optional<std::string> best;
  size_t best_d = std::max<size_t>(2, lf.size() / 3) + 1;
  for (const auto& k : known) {
    size_t d = edit_distance(lf, last_component(k));
    if (d < best_d) best_d = d, best = k;
  }
  return best.value_or("");
}

}  // namespace

void KeyRegistry::throw_if_unknown() const {
  if (unknown.empty()) return;
  std::vector<std::string> lines;
  for (const auto& u : unknown) {
    std::string s = suggestion_for(u, known);
    lines.push_back(s.empty() ? fmt::format("unknown key `{}`", u)
                              : fmt::format("unknown key `{}` (did you mean `{}`?)", u, s));
  }
  throw ConfigError(join(lines, "\n") +
                    "\n(`dpft config dump SPEC` prints every known key with its default)");
}

bool Range::contains(double v) const {
  if (std::isnan(v)) return false;
  if (lo_open ? !(v > lo) : !(v >= lo)) return false;
  if (hi_open ? !(v < hi) : !(v <= hi)) return false;
  return true;
}

std::string Range::describe() const {
  return fmt::format("{}{}, {}{}", lo_open ? "(" : "[", format_double(lo), format_double(hi),
                     hi_open ? ")" : "]");
}

std::optional<double> parse_double(const std::string& s0) {
  std::string s = to_lower(s0);
  if (s == "inf" || s == "+inf" || s == "infinity" || s == ".inf" || s == "+.inf")
    return std::numeric_limits<double>::infinity();
  if (s == "-inf" || s == "-.inf" || s == "-infinity") return -std::numeric_limits<double>::infinity();
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || std::isnan(v)) return std::nullopt;
  // A finite-looking number that overflows (1e999) is not infinity: only the literal spellings
  // above are (epsilon: 1e999 must not quietly become a non-private run). Underflow to a
  // subnormal or zero is refused alike.
  if (errno == ERANGE && (std::isinf(v) || v == 0 || !std::isnormal(v))) return std::nullopt;
  return v;
}

bool overflows_double(const std::string& s) {
  if (parse_double(s)) return false;
  char* end = nullptr;
  errno = 0;
  std::strtod(s.c_str(), &end);
  return !s.empty() && end == s.c_str() + s.size() && errno == ERANGE;
}

void check_range(const std::string& path, double v, const Range& r, const std::string& hint) {
  if (r.contains(v)) return;
  throw ConfigError(fmt::format("{}: {} is out of range; allowed {}{}", path, format_double(v),
                                r.describe(), hint.empty() ? "" : " (" + hint + ")"));
}

std::string format_double(double v) {
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  if (std::isnan(v)) return ".nan";
  return fmt::format("{}", v);
}

Fields::Fields(const YAML::Node& node, std::string path, std::shared_ptr<KeyRegistry> keys)
    : node_(node), path_(std::move(path)), keys_(std::move(keys)) {
  if (node_ && !node_.IsNull() && !node_.IsMap())
    throw ConfigError(fmt::format("{}: expected a mapping of keys, got {}",
                                  path_.empty() ? "spec" : path_, show(node_)));
}

Fields Fields::writer(std::string path) {
  Fields f(YAML::Node(YAML::NodeType::Map), std::move(path), std::make_shared<KeyRegistry>());
  f.writing_ = true;
  return f;
}

std::string Fields::key_path(const std::string& key) const {
  return path_.empty() ? key : path_ + "." + key;
}

YAML::Node Fields::lookup(const std::string& key) {
  asked_.insert(key);
  keys_->known.insert(key_path(key));
  if (!node_ || !node_.IsMap()) return YAML::Node();
  return node_[key];
}

bool Fields::present_null(const YAML::Node& n) const {
  // lookup() of an absent key gives an undefined node, or a default (null) one when this block
  // is absent: only a key written with no value is "present and null".
  return node_ && node_.IsMap() && n.IsDefined() && n.IsNull();
}

YAML::Node Fields::lookup_value(const std::string& key) {
  YAML::Node n = lookup(key);
  if (present_null(n))
    throw ConfigError(fmt::format(
        "{}: no value given (the key is empty or null; an unset shell variable in --set?); give "
        "a value, or delete the key to use the default (`dpft config dump` shows it)",
        key_path(key)));
  return n;
}

std::string Fields::number_error(const std::string& key, const YAML::Node& n) const {
  if (n.IsScalar() && overflows_double(n.Scalar())) {
    // strtod's ERANGE is also its answer for a subnormal result, which is a double, but too
    // small to compute with (privacy.delta: 1e-320).
    const double v = std::strtod(n.Scalar().c_str(), nullptr);
    if (v != 0 && std::fabs(v) < DBL_MIN)
      return fmt::format(
          "{}: {} is below the smallest normal double (about 2.2e-308), too small to compute "
          "with; give a larger value (or 0 where 0 is allowed)",
          key_path(key), n.Scalar());
    return fmt::format("{}: {} is outside the range of a double (write .inf for infinity)",
                       key_path(key), n.Scalar());
  }
  return fmt::format("{}: expected a number, got {}", key_path(key), show(n));
}

bool Fields::has(const std::string& key) const {
  return node_ && node_.IsMap() && node_[key] && !node_[key].IsNull();
}

bool Fields::get(const std::string& key, std::string& out) {
  if (writing_) return write(key, out);
  YAML::Node n = lookup_value(key);
  if (!n || n.IsNull()) return false;
  if (!n.IsScalar())
    throw ConfigError(fmt::format("{}: expected a string, got {}", key_path(key), show(n)));
  out = n.Scalar();
  return true;
}

bool Fields::get(const std::string& key, bool& out) {
  if (writing_) return write(key, out);
  YAML::Node n = lookup_value(key);
  if (!n || n.IsNull()) return false;
  std::string s = n.IsScalar() ? to_lower(n.Scalar()) : "";
  if (s == "true" || s == "yes" || s == "on") out = true;
  else if (s == "false" || s == "no" || s == "off") out = false;
  else throw ConfigError(fmt::format("{}: expected true or false, got {}", key_path(key), show(n)));
  return true;
}

bool Fields::get(const std::string& key, double& out, Range r) {
  if (writing_) return write(key, out);
  YAML::Node n = lookup_value(key);
  if (!n || n.IsNull()) return false;
  std::optional<double> v = n.IsScalar() ? parse_double(n.Scalar()) : std::nullopt;
  if (!v) throw ConfigError(number_error(key, n));
  check_range(key_path(key), *v, r);
  out = *v;
  return true;
}

bool Fields::get(const std::string& key, std::optional<double>& out, Range r) {
  if (writing_) return out ? write(key, *out) : false;
  YAML::Node n = lookup(key);
  if (present_null(n)) {  // an explicit null unsets an optional value
    out.reset();
    return false;
  }
  double v = 0;
  if (!get(key, v, r)) return false;
  out = v;
  return true;
}

bool Fields::get(const std::string& key, int64_t& out, Range r) {
  if (writing_) return write(key, out);
  YAML::Node n = lookup_value(key);
  if (!n || n.IsNull()) return false;
  bool ok = n.IsScalar();
  long long v = 0;
  if (ok) {
    const std::string& s = n.Scalar();
    char* end = nullptr;
    errno = 0;
    v = std::strtoll(s.c_str(), &end, 10);
    ok = !s.empty() && end == s.c_str() + s.size() && errno == 0;
    if (!ok) {  // allow 1e5-style integers
      auto d = parse_double(s);
      if (d && std::isfinite(*d) && std::floor(*d) == *d && std::fabs(*d) < 9e15) {
        v = static_cast<long long>(*d);
        ok = true;
      }
    }
  }
  if (!ok)
    throw ConfigError(n.IsScalar() && overflows_double(n.Scalar())
                          ? number_error(key, n)
                          : fmt::format("{}: expected an integer, got {}", key_path(key), show(n)));
  check_range(key_path(key), static_cast<double>(v), r);
  out = v;
  return true;
}

bool Fields::get(const std::string& key, int& out, Range r) {
  if (writing_) return write(key, out);
  int64_t v = out;
  Range rr = r;
  rr.lo = std::max(rr.lo, static_cast<double>(std::numeric_limits<int>::min()));
  rr.hi = std::min(rr.hi, static_cast<double>(std::numeric_limits<int>::max()));
  if (!get(key, v, rr)) return false;
  out = static_cast<int>(v);
  return true;
}

bool Fields::get(const std::string& key, std::optional<int64_t>& out, Range r) {
  if (writing_) return out ? write(key, *out) : false;
  YAML::Node n = lookup(key);
  if (present_null(n)) {
    out.reset();
    return false;
  }
  int64_t v = 0;
  if (!get(key, v, r)) return false;
  out = v;
  return true;
}

bool Fields::get(const std::string& key, std::vector<std::string>& out) {
  if (writing_) return write(key, out);
  YAML::Node n = lookup_value(key);
  if (!n || n.IsNull()) return false;
  std::vector<std::string> v;
  if (n.IsScalar()) {
    v.push_back(n.Scalar());  // a single string is a list of one
  } else if (n.IsSequence()) {
    for (size_t i = 0; i < n.size(); ++i) {
      if (!n[i].IsScalar())
        throw ConfigError(fmt::format("{}[{}]: expected a string, got {}", key_path(key), i, show(n[i])));
      v.push_back(n[i].Scalar());
    }
  } else {
    throw ConfigError(fmt::format("{}: expected a list of strings, got {}", key_path(key), show(n)));
  }
  out = std::move(v);
  return true;
}

bool Fields::get(const std::string& key, std::vector<int64_t>& out, Range r) {
  if (writing_) return write(key, out);
  std::vector<std::string> items;
  if (!get(key, items)) return false;
  std::vector<int64_t> v;
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string& s = items[i];
    char* end = nullptr;
    errno = 0;
    long long x = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || end != s.c_str() + s.size() || errno != 0)
      throw ConfigError(fmt::format("{}[{}]: expected an integer, got '{}'", key_path(key), i, s));
    check_range(fmt::format("{}[{}]", key_path(key), i), static_cast<double>(x), r);
    v.push_back(x);
  }
  out = std::move(v);
  return true;
}

bool Fields::get(const std::string& key, std::vector<double>& out, Range r) {
  if (writing_) return write(key, out);
  std::vector<std::string> items;
  if (!get(key, items)) return false;
  std::vector<double> v;
  for (size_t i = 0; i < items.size(); ++i) {
    const std::optional<double> x = parse_double(items[i]);
    if (!x)
      throw ConfigError(
          fmt::format("{}[{}]: expected a number, got '{}'", key_path(key), i, items[i]));
    check_range(fmt::format("{}[{}]", key_path(key), i), *x, r);
    v.push_back(*x);
  }
  out = std::move(v);
  return true;
}

bool Fields::get_choice(const std::string& key, std::string& out, const std::vector<std::string>& allowed) {
  if (writing_) return write(key, out);
  std::string v;
  if (!get(key, v)) return false;
  if (std::find(allowed.begin(), allowed.end(), v) == allowed.end()) {
    auto m = closest_match(v, allowed);
    throw ConfigError(fmt::format("{}: '{}' is not allowed; use one of: {}{}", key_path(key), v,
                                  join(allowed, ", "), m ? fmt::format(" (did you mean '{}'?)", *m) : ""));
  }
  out = v;
  return true;
}

bool Fields::get(const std::string& key, std::vector<std::vector<std::string>>& out) {
  if (writing_) {
    YAML::Node lists(YAML::NodeType::Sequence);
    for (const auto& v : out) lists.push_back(v);
    return write(key, lists);
  }
  YAML::Node n = lookup_value(key);
  if (!n || n.IsNull()) return false;
  if (!n.IsSequence())
    throw ConfigError(fmt::format("{}: expected a list of lists, got {}", key_path(key), show(n)));
  std::vector<std::vector<std::string>> v;
  for (size_t i = 0; i < n.size(); ++i) {
    if (!n[i].IsSequence() || n[i].size() == 0)
      throw ConfigError(fmt::format("{}[{}]: expected a non-empty list of values, got {}",
                                    key_path(key), i, show(n[i])));
    std::vector<std::string> items;
    for (size_t j = 0; j < n[i].size(); ++j) {
      if (!n[i][j].IsScalar())
        throw ConfigError(fmt::format("{}[{}][{}]: expected a value, got {}", key_path(key), i, j,
                                      show(n[i][j])));
      items.push_back(n[i][j].Scalar());
    }
    v.push_back(std::move(items));
  }
  out = std::move(v);
  return true;
}

Fields Fields::child(const std::string& key) {
  if (!writing_) return Fields(lookup(key), key_path(key), keys_);
  node_[key] = YAML::Node(YAML::NodeType::Map);
  Fields w(node_[key], key_path(key), keys_);
  w.writing_ = true;
  return w;
}

YAML::Node Fields::raw(const std::string& key) {
  if (writing_)
    throw std::logic_error("Fields::raw(" + key_path(key) + ") on a writer: use a getter");
  return lookup(key);
}

void Fields::finish() {
  if (writing_) return;
  if (!node_ || !node_.IsMap()) return;
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    std::string k = it->first.as<std::string>();
    if (!asked_.count(k)) keys_->unknown.push_back(key_path(k));
  }
}

}  // namespace dpft
