// "(2, 3, 4)" for tensor shapes in error messages (fmt cannot format IntArrayRef directly).
#pragma once
#include <c10/util/ArrayRef.h>

#include <string>

namespace dpft {

inline std::string shape_str(c10::IntArrayRef s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

}  // namespace dpft
