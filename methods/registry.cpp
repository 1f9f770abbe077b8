#include "methods/registry.hpp"

#include <fmt/format.h>

#include "core/util/error.hpp"
#include "core/util/strings.hpp"

namespace dpft {

std::unique_ptr<Method> make_noop_method();    // methods/noop.cpp
std::unique_ptr<Method> make_sgd_method();     // methods/sgd.cpp
std::unique_ptr<Method> make_dp_sgd_method();  // methods/dp_sgd.cpp

const std::vector<MethodInfo>& method_registry() {
  static const std::vector<MethodInfo> registry = {
      {"noop", "no training: records the resolved config, ticks optional empty steps, writes metrics",
       make_noop_method},
      {"sgd", "non-private fine-tuning (or clip-only with clip: true); also pretraining", make_sgd_method},
      {"dp-sgd", "DP-SGD / DP-AdamW: Poisson sampling, per-sample clipping, Gaussian noise (Abadi et al. 2016)",
       make_dp_sgd_method},
  };
  return registry;
}

std::vector<std::string> method_names() {
  std::vector<std::string> names;
  for (const auto& m : method_registry()) names.push_back(m.name);
  return names;
}

std::unique_ptr<Method> make_method(const std::string& name) {
  for (const auto& m : method_registry())
    if (m.name == name) return m.make();
  auto names = method_names();
  auto close = closest_match(name, names);
  throw ConfigError(fmt::format("method.name: unknown method '{}'; known methods: {}{}", name,
                                join(names, ", "), close ? fmt::format(" (did you mean '{}'?)", *close) : ""));
}

}  // namespace dpft
