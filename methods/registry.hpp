// The explicit list of methods, and the spec's method block: parsing it (with the rest of the
// spec) and building the configured method from it. Adding a method = a file in its paper's
// folder (methods/<paper>/) + one line in registry.cpp.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/config/spec.hpp"
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

// The MethodParser of core/config/spec.hpp: configures the named method from its block, the
// only place a method block is read; the Spec keeps the configured method.
MethodBlock parse_method_block(const std::string& name, Fields& block);
// The configured method a parsed spec keeps (RuntimeError for a Spec that was not parsed).
const Method& parsed_method(const MethodSpec& m);
// A copy of it for one run: plan() and run() keep their settings in the copy.
std::unique_ptr<Method> configured_method(const MethodSpec& m);

// core/config/spec.hpp's parse_spec / load_spec with the registry's methods.
Spec parse_spec(const YAML::Node& root);
Spec load_spec(const std::string& path, const std::vector<std::string>& overrides);

}  // namespace dpft
