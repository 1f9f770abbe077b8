// The explicit list of methods. Adding a method = one file in methods/ + one line in registry.cpp.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "methods/method.hpp"

namespace dpft {

struct MethodInfo {
  std::string name;
  std::string summary;  // one line, shown by `dpft methods` and in errors
  std::function<std::unique_ptr<Method>()> make;
};

const std::vector<MethodInfo>& method_registry();
std::vector<std::string> method_names();
// Throws ConfigError naming the known methods (and the closest one) for an unknown name.
std::unique_ptr<Method> make_method(const std::string& name);

}  // namespace dpft
