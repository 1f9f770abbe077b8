// Spec spellings of enum values: each mode enum has one table of (value, name) pairs, used to
// parse it once (Fields::get_enum) and to print it (config dump, metrics.json).
#pragma once
#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "core/util/error.hpp"

namespace dpft {

template <class E>
struct EnumName {
  E value;
  const char* name;
};

template <class E, size_t N>
const char* enum_name(E value, const std::array<EnumName<E>, N>& table) {
  for (const auto& e : table)
    if (e.value == value) return e.name;
  throw RuntimeError("enum value without a name in its table");
}

template <class E, size_t N>
std::vector<std::string> enum_names(const std::array<EnumName<E>, N>& table) {
  std::vector<std::string> out;
  for (const auto& e : table) out.emplace_back(e.name);
  return out;
}

// The value spelled `name`; ConfigError naming `what` and the allowed names otherwise.
template <class E, size_t N>
E enum_value(const std::string& name, const std::array<EnumName<E>, N>& table,
             const std::string& what) {
  for (const auto& e : table)
    if (name == e.name) return e.value;
  std::string allowed;
  for (const auto& e : table) allowed += std::string(allowed.empty() ? "" : ", ") + e.name;
  throw ConfigError(what + ": unknown value '" + name + "'; allowed: " + allowed);
}

}  // namespace dpft
